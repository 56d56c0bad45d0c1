//! The etcd v3 JSON gateway (`POST /v3/cluster/member/*`, `/v3/maintenance/*`) over reqwest,
//! by concern: the gateway's wire (`gateway`), what the function presents (`tls`), observing the
//! cluster (`observe`), authentication (`auth`), snapshots (`snapshot`); membership changes and
//! maintenance calls are here. Every request has a timeout (`ETCD_REQUEST_TIMEOUT_MS`, a status
//! probe `HEALTH_TIMEOUT`), and the reconciler ends any call at the invocation's deadline.

mod auth;
mod gateway;
mod observe;
mod snapshot;
mod tls;

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::error::{Error, Refusal};
use crate::model::{Alarm, ClusterState, MemberId};
use crate::pki::RootTokens;
use crate::ports::{Compacted, Members, PrefixGrant, Snapshot};
use gateway::{call_with, AddResponse};
pub use tls::{own_identity, ClientTls};

/// A health probe is one status call: it gets less time than a membership change.
const HEALTH_TIMEOUT: Duration = Duration::from_millis(1000);
/// The cap of a snapshot's one request (an 8 GiB database within Lambda's longest invocation);
/// the reconciler ends it, its start included, at half of what is left of the invocation.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(600);
/// Defragmenting a 2 GiB file takes tens of seconds on slow disks.
const DEFRAG_TIMEOUT: Duration = Duration::from_secs(120);

pub struct EtcdMembers {
    client: Mutex<reqwest::Client>,
    timeout: Duration,
    /// TLS=managed: the CA the function's own certificate is issued from again at half its life
    /// (a warm Lambda environment may outlive it), and when that is due.
    renewal: OnceLock<(crate::pki::Ca, Mutex<i64>)>,
    /// The last endpoint that answered as a voter: asked first next time.
    preferred: Mutex<Option<String>>,
    /// TLS=managed: the function is etcd's `root` through tokens it signs (see `RootTokens`),
    /// sent once etcd asks for a user (`auth_seen`): a member of an older config verifies no
    /// such token, and etcd before 3.4.28/3.5.10 checks a token even with authentication off.
    root: OnceLock<RootTokens>,
    auth_seen: std::sync::atomic::AtomicBool,
    /// Per endpoint, the signer (`RootTokens`) whose token it took last, asked first next time:
    /// a member of a bundle older than the token key verifies only the CA's.
    signers: Mutex<std::collections::HashMap<String, usize>>,
    /// An adopted cluster's `root` password (docs/adopting.md): where a member refuses every
    /// token the function signs (a member of the adopted cluster, with a token provider of its
    /// own), the function logs in there as root and uses that member's token (`logins`).
    password: Mutex<Option<crate::pki::Password>>,
    logins: Mutex<std::collections::HashMap<String, String>>,
    /// The adopted cluster's endpoints: the function's own tokens are never sent there (etcd
    /// before 3.4.40, 3.5.26 and 3.6.7 logs a token it refuses whole, and they are root's at
    /// the stack's members); the function logs in first.
    login_first: Mutex<std::collections::HashSet<String>>,
    /// The highest revision this process compacted to: what `compacted_up_to` answers when
    /// etcd's authentication keeps it from reading the history.
    compacted_to: Mutex<i64>,
    /// TLS=managed: the members' plain-HTTP metrics port; None: `/metrics` on the client URL.
    metrics_port: Option<u16>,
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl EtcdMembers {
    pub fn new(timeout: Duration, tls: Option<&ClientTls>) -> Result<Self, Error> {
        Ok(Self {
            client: Mutex::new(Self::build(timeout, tls)?),
            timeout,
            renewal: OnceLock::new(),
            preferred: Mutex::new(None),
            root: OnceLock::new(),
            auth_seen: std::sync::atomic::AtomicBool::new(false),
            signers: Mutex::default(),
            password: Mutex::new(None),
            logins: Mutex::default(),
            login_first: Mutex::default(),
            compacted_to: Mutex::new(0),
            metrics_port: None,
        })
    }

    /// TLS=managed: the function's own certificate, issued from `ca` now and again at half its
    /// life, and `root` through tokens signed with the cluster's token key (or the CA's, for
    /// members of older bundles), whether or not ETCD_AUTH turns authentication on: once on, it
    /// stays on.
    pub fn managed(timeout: Duration, ca: &crate::pki::Ca) -> Result<Self, Error> {
        Self::managed_since(timeout, ca, unix_now())
    }

    /// As `managed`, with the first certificate issued at `issued` (a test's way to be a
    /// long-warm environment).
    pub fn managed_since(
        timeout: Duration,
        ca: &crate::pki::Ca,
        issued: i64,
    ) -> Result<Self, Error> {
        let members = Self::new(timeout, None)?;
        members.managed_by(ca, issued)?;
        Ok(members)
    }

    /// TLS=managed, from now on: the function's own certificate issued from `ca` at `issued`
    /// (and again at half its life), and `root` through tokens of the cluster's keys. Once:
    /// a second call changes nothing.
    fn managed_by(&self, ca: &crate::pki::Ca, issued: i64) -> Result<(), Error> {
        if self.renewal.get().is_some() {
            return Ok(());
        }
        let identity = own_identity(ca, issued)?;
        let tokens = ca.root_tokens()?;
        *self.client.lock().unwrap() = Self::build(self.timeout, Some(&identity))?;
        let due = issued + crate::pki::FUNCTION_CERT_SECS / 2;
        let _ = self.root.set(tokens);
        let _ = self.renewal.set((ca.clone(), Mutex::new(due)));
        Ok(())
    }

    /// The HTTP client, with a fresh certificate of the function's own first when one is due.
    pub(super) fn client(&self) -> Result<reqwest::Client, Error> {
        if let Some((ca, due)) = self.renewal.get() {
            let now = unix_now();
            let mut due = due.lock().unwrap();
            if now >= *due {
                let identity = own_identity(ca, now)?;
                *self.client.lock().unwrap() = Self::build(self.timeout, Some(&identity))?;
                *due = now + crate::pki::FUNCTION_CERT_SECS / 2;
                tracing::debug!(
                    renew_at = *due,
                    "issued the function's own client certificate"
                );
            }
        }
        Ok(self.client.lock().unwrap().clone())
    }

    fn build(timeout: Duration, tls: Option<&ClientTls>) -> Result<reqwest::Client, Error> {
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(2)));
        if let Some(tls) = tls {
            let ca = reqwest::Certificate::from_pem(&tls.ca_pem).map_err(|e| Error::Config {
                var: "ETCD_CA_FILE".into(),
                value: String::new(),
                reason: format!("is not a PEM certificate: {e}"),
            })?;
            // The error says what is wrong, never the key.
            let identity = reqwest::Identity::from_pem(tls.identity_pem.expose().as_bytes())
                .map_err(|e| Error::Config {
                    var: "ETCD_CERT_FILE".into(),
                    value: String::new(),
                    reason: format!("with its key is not a PEM client identity: {e}"),
                })?;
            builder = builder.add_root_certificate(ca).identity(identity);
        }
        builder.build().map_err(|e| Error::Config {
            var: "ETCD_CA_FILE".into(),
            value: String::new(),
            reason: format!("HTTP client could not be built: {e}"),
        })
    }

    /// Where members serve `/metrics`: this port in plain HTTP on their address (TLS=managed's
    /// `ETCD_LISTEN_METRICS_URLS`), else their client URL.
    pub fn with_metrics_port(mut self, port: Option<u16>) -> Self {
        self.metrics_port = port;
        self
    }

    /// Acts as etcd's `root` from now on, with tokens signed by `tokens`.
    pub fn with_root(self, tokens: RootTokens) -> Self {
        let _ = self.root.set(tokens);
        self
    }

    pub(super) async fn call<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        endpoint: &str,
        path: &str,
        body: Value,
        timeout: Option<Duration>,
    ) -> Result<T, Error> {
        let client = self.client()?;
        // At most three tries: one with tokens once etcd asks for a user, one after logging in.
        let (mut asked, mut logged_in) = (false, false);
        loop {
            let tokens = self.tokens(endpoint)?;
            let (r, tried) =
                call_with(&client, operation, endpoint, path, &body, timeout, &tokens).await;
            self.took(endpoint, tried);
            if !asked && self.asks_for_root(!tokens.is_empty(), &r) {
                asked = true;
                continue;
            }
            if !logged_in && self.may_log_in(&r) {
                logged_in = true;
                // A refused password says so; a login that got no verdict leaves the call's
                // own refusal.
                match self.log_in(&client, endpoint, timeout).await {
                    Ok(()) => continue,
                    Err(e) if e.to_string().contains("refused root's password") => return Err(e),
                    Err(_) => return r,
                }
            }
            return r;
        }
    }

    /// A membership call whose answer carries nothing we need.
    /// etcd's maintenance Alarm call: `action` (ACTIVATE, DEACTIVATE) for `alarm`.
    async fn alarm(
        &self,
        operation: &'static str,
        action: &str,
        endpoint: &str,
        alarm: &Alarm,
    ) -> Result<(), Error> {
        let body = json!({
            "action": action,
            "memberID": alarm.member.0.to_string(),
            "alarm": alarm.kind,
        });
        self.act(operation, endpoint, "/v3/maintenance/alarm", body)
            .await
    }

    pub(super) async fn act(
        &self,
        operation: &'static str,
        endpoint: &str,
        path: &str,
        body: Value,
    ) -> Result<(), Error> {
        self.call::<Value>(operation, endpoint, path, body, None)
            .await
            .map(drop)
    }
}

impl Members for EtcdMembers {
    async fn observe(&self, endpoints: &[String], cluster: Option<u64>) -> ClusterState {
        self.look(endpoints, cluster).await
    }

    fn identify(&self, ca: &crate::pki::Ca) -> Result<(), Error> {
        self.managed_by(ca, unix_now())
    }

    fn use_root_password(&self, password: crate::pki::Password, login_first: &[String]) {
        self.with_root_password(password, login_first)
    }

    async fn add_learner(&self, endpoint: &str, peer_url: &str) -> Result<MemberId, Error> {
        let r: AddResponse = self
            .call(
                "member add",
                endpoint,
                "/v3/cluster/member/add",
                json!({"peerURLs": [peer_url], "isLearner": true}),
                None,
            )
            .await?;
        Ok(MemberId(r.member.id))
    }

    async fn promote(&self, endpoint: &str, id: MemberId) -> Result<(), Error> {
        let body = json!({"ID": id.0.to_string()});
        self.act(
            "member promote",
            endpoint,
            "/v3/cluster/member/promote",
            body,
        )
        .await
    }

    async fn remove(&self, endpoint: &str, id: MemberId) -> Result<(), Error> {
        let body = json!({"ID": id.0.to_string()});
        self.act("member remove", endpoint, "/v3/cluster/member/remove", body)
            .await
    }

    /// Compacts the keyspace's history up to `revision`, waiting until it is physically applied.
    /// Compacting to a revision already compacted is success.
    async fn compact(&self, endpoint: &str, revision: i64) -> Result<Compacted, Error> {
        let body = json!({"revision": revision.to_string(), "physical": true});
        let r = self
            .act("compact", endpoint, "/v3/kv/compaction", body)
            .await;
        let r = match r {
            Ok(()) => Compacted::Now,
            Err(e) if e.refusal() == Some(Refusal::AlreadyCompacted) => Compacted::Already,
            Err(e) => return Err(e),
        };
        let mut to = self.compacted_to.lock().unwrap();
        *to = (*to).max(revision);
        Ok(r)
    }

    /// Defragments the member `endpoint` belongs to (and only it): it blocks reads and writes on
    /// that member while it runs, so it gets a long timeout.
    async fn defragment(&self, endpoint: &str) -> Result<(), Error> {
        self.call::<Value>(
            "defragment",
            endpoint,
            "/v3/maintenance/defragment",
            json!({}),
            Some(DEFRAG_TIMEOUT),
        )
        .await
        .map(drop)
    }

    async fn snapshot(&self, endpoint: &str) -> Result<Snapshot, Error> {
        self.stream(endpoint).await
    }

    async fn disarm(&self, endpoint: &str, alarm: &Alarm) -> Result<(), Error> {
        self.alarm("alarm disarm", "DEACTIVATE", endpoint, alarm)
            .await
    }

    async fn raise(&self, endpoint: &str, alarm: &Alarm) -> Result<(), Error> {
        self.alarm("alarm raise", "ACTIVATE", endpoint, alarm).await
    }

    async fn transfer_leadership(&self, leader_endpoint: &str, to: MemberId) -> Result<(), Error> {
        let body = json!({"targetID": to.0.to_string()});
        let path = "/v3/maintenance/transfer-leadership";
        self.act("transfer leadership", leader_endpoint, path, body)
            .await
    }

    async fn enable_auth(&self, endpoint: &str) -> Result<(), Error> {
        self.turn_auth_on(endpoint).await
    }

    async fn grant_prefix(&self, endpoint: &str, grant: &PrefixGrant) -> Result<(), Error> {
        self.grant(endpoint, grant).await
    }
}
