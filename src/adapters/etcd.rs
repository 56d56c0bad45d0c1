//! The etcd v3 JSON gateway (`POST /v3/cluster/member/*`, `/v3/maintenance/*`) over reqwest.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde::de::{DeserializeOwned, Deserializer};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use crate::config::TlsFiles;
use crate::error::{Error, Refusal};
use crate::model::{Alarm, ClusterState, ClusterView, Member, MemberId, MemberStatus, Survivor};
use crate::pki::RootTokens;
use crate::ports::{Compacted, Members, NextChunk, PrefixGrant, Snapshot, SnapshotStream};

/// A health probe is one status call: it gets less time than a membership change.
const HEALTH_TIMEOUT: Duration = Duration::from_millis(1000);
/// Streaming a snapshot of a 8 GiB database within a Lambda invocation's 15 minutes.
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
    /// The highest revision this process compacted to: what `compacted_up_to` answers when
    /// etcd's authentication keeps it from reading the history.
    compacted_to: Mutex<i64>,
    /// TLS=managed: the members' plain-HTTP metrics port; None: `/metrics` on the client URL.
    metrics_port: Option<u16>,
}

/// The members a `/metrics` page reports an active raft connection to: the `Remote` label
/// (a member id in hex) of each `etcd_network_active_peers` sample of 1 or more.
fn active_peers(text: &str) -> impl Iterator<Item = MemberId> + '_ {
    text.lines().filter_map(|line| {
        let rest = line.strip_prefix("etcd_network_active_peers{")?;
        let (labels, value) = rest.split_once('}')?;
        if value.trim().parse::<f64>().ok()? < 1.0 {
            return None;
        }
        let remote = labels
            .split(',')
            .find_map(|kv| kv.trim().strip_prefix("Remote=\""))?
            .trim_end_matches('"');
        u64::from_str_radix(remote, 16).ok().map(MemberId)
    })
}

/// etcd sends every 64-bit integer as a JSON string; accept a bare number too.
fn id<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        S(String),
        N(u64),
    }
    match Raw::deserialize(d)? {
        Raw::N(n) => Ok(n),
        Raw::S(s) => s.parse().map_err(serde::de::Error::custom),
    }
}

#[derive(Deserialize, Default)]
struct Header {
    #[serde(default, deserialize_with = "id")]
    cluster_id: u64,
    #[serde(default, deserialize_with = "id")]
    member_id: u64,
}

#[derive(Deserialize)]
struct WireMember {
    #[serde(rename = "ID", deserialize_with = "id")]
    id: u64,
    #[serde(default)]
    name: String,
    #[serde(rename = "peerURLs", default)]
    peer_urls: Vec<String>,
    #[serde(rename = "clientURLs", default)]
    client_urls: Vec<String>,
    #[serde(rename = "isLearner", default)]
    is_learner: bool,
}

impl From<WireMember> for Member {
    fn from(w: WireMember) -> Self {
        Member {
            id: MemberId(w.id),
            name: w.name,
            peer_urls: w.peer_urls,
            client_urls: w.client_urls,
            is_learner: w.is_learner,
        }
    }
}

#[derive(Deserialize)]
struct ListResponse {
    #[serde(default)]
    header: Header,
    #[serde(default)]
    members: Vec<WireMember>,
}

#[derive(Deserialize)]
struct StatusResponse {
    #[serde(default)]
    header: StatusHeader,
    #[serde(default, deserialize_with = "id")]
    leader: u64,
    #[serde(rename = "dbSize", default, deserialize_with = "id")]
    db_size: u64,
    /// 3.4+; absent (0) means the same as the file.
    #[serde(rename = "dbSizeInUse", default, deserialize_with = "id")]
    db_size_in_use: u64,
    #[serde(default)]
    version: String,
}

#[derive(Deserialize, Default)]
struct StatusHeader {
    #[serde(default, deserialize_with = "id")]
    revision: u64,
    #[serde(default, deserialize_with = "id")]
    member_id: u64,
}

impl From<&StatusResponse> for MemberStatus {
    fn from(s: &StatusResponse) -> Self {
        MemberStatus {
            db_size: s.db_size,
            db_size_in_use: if s.db_size_in_use == 0 {
                s.db_size
            } else {
                s.db_size_in_use
            },
            version: s.version.clone(),
            revision: s.header.revision as i64,
        }
    }
}

#[derive(Deserialize, Default)]
struct AlarmResponse {
    #[serde(default)]
    alarms: Vec<WireAlarm>,
}

#[derive(Deserialize)]
struct WireAlarm {
    #[serde(rename = "memberID", default, deserialize_with = "id")]
    member_id: u64,
    /// Absent means NONE (protobuf's default).
    #[serde(default)]
    alarm: String,
}

#[derive(Deserialize)]
struct AddResponse {
    member: WireMember,
}

/// 3.4/3.5 send `error` and `message`, 3.6 only `message`.
#[derive(Deserialize)]
struct ErrorBody {
    message: Option<String>,
    error: Option<String>,
}

/// One POST to the JSON gateway. A refusal is read from the answer's `message`, not its HTTP
/// status: builds map the same error to different statuses.
async fn call<T: DeserializeOwned>(
    client: &reqwest::Client,
    operation: &'static str,
    endpoint: &str,
    path: &str,
    body: Value,
    timeout: Option<Duration>,
    token: Option<&str>,
) -> Result<T, Error> {
    let unavailable = |e: reqwest::Error| Error::EtcdUnavailable {
        operation,
        endpoint: endpoint.to_string(),
        source: Box::new(e),
    };
    let mut request = client
        .post(format!("{}{path}", endpoint.trim_end_matches('/')))
        .json(&body);
    if let Some(t) = timeout {
        request = request.timeout(t);
    }
    if let Some(token) = token {
        request = request.header(reqwest::header::AUTHORIZATION, token);
    }
    // The gateway marks what it forwards by the Accept header; etcd then never takes the user
    // from the gateway's own certificate.
    let response = request
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(unavailable)?;
    let status = response.status();
    let bytes = response.bytes().await.map_err(unavailable)?;
    let protocol = |detail: String| Error::EtcdProtocol { operation, detail };
    if status.is_success() {
        return serde_json::from_slice(&bytes).map_err(|e| protocol(format!("{e}")));
    }
    let body: ErrorBody = serde_json::from_slice(&bytes).map_err(|_| {
        protocol(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        ))
    })?;
    let message = body.message.or(body.error).unwrap_or_default();
    Err(Error::EtcdRefused {
        operation,
        refusal: Refusal::from_message(&message),
        message,
    })
}

/// `call` with each of `tokens` in turn while the last was refused as an invalid token (a
/// member verifying another key's); none: one call without. Also says how many were refused.
async fn call_with<T: DeserializeOwned>(
    client: &reqwest::Client,
    operation: &'static str,
    endpoint: &str,
    path: &str,
    body: &Value,
    timeout: Option<Duration>,
    tokens: &[String],
) -> (Result<T, Error>, usize) {
    let mut tried = 0;
    loop {
        let token = tokens.get(tried).map(String::as_str);
        let r = call(
            client,
            operation,
            endpoint,
            path,
            body.clone(),
            timeout,
            token,
        )
        .await;
        let invalid = matches!(&r, Err(e) if e.refusal() == Some(Refusal::InvalidAuthToken));
        if !invalid || tried + 1 >= tokens.len() {
            return (r, tried);
        }
        tried += 1;
    }
}

/// What the function presents to etcd and trusts: PEM bytes, from files (ETCD_*_FILE) or from
/// the certificate it issued itself (TLS=managed).
pub struct ClientTls {
    pub ca_pem: Vec<u8>,
    /// Certificate then key.
    pub identity_pem: crate::pki::KeyPem,
}

impl ClientTls {
    pub fn from_files(tls: &TlsFiles) -> Result<Self, Error> {
        let read = |var: &str, path: &str| {
            std::fs::read(path).map_err(|e| Error::Config {
                var: var.into(),
                value: path.into(),
                reason: format!("cannot be read: {e}"),
            })
        };
        let text = |var: &str, path: &str| {
            String::from_utf8(read(var, path)?).map_err(|_| Error::Config {
                var: var.into(),
                value: path.into(),
                reason: "is not PEM text".into(),
            })
        };
        Ok(Self {
            ca_pem: read("ETCD_CA_FILE", &tls.ca)?,
            identity_pem: crate::pki::KeyPem::from(
                text("ETCD_CERT_FILE", &tls.cert)? + &text("ETCD_KEY_FILE", &tls.key)?,
            ),
        })
    }
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
    fn client(&self) -> Result<reqwest::Client, Error> {
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

    /// Acts as etcd's `root` from now on, with tokens signed by `tokens`.
    /// Where members serve `/metrics`: this port in plain HTTP on their address (TLS=managed's
    /// `ETCD_LISTEN_METRICS_URLS`), else their client URL.
    pub fn with_metrics_port(mut self, port: Option<u16>) -> Self {
        self.metrics_port = port;
        self
    }

    /// The second view of members that did not answer the function: which of `down` an
    /// answering member reports an active raft connection to. etcd's rafthttp keeps the gauge
    /// `etcd_network_active_peers{Local,Remote}` at 1 while the stream to a peer works and sets
    /// it to 0 when the peer stops answering (a dead process at once, a hung one after the
    /// stream's 5 s read timeout):
    /// https://github.com/etcd-io/etcd/blob/v3.5.30/server/etcdserver/api/rafthttp/peer_status.go
    /// Best effort: a member whose metrics cannot be read adds nothing.
    async fn peer_view(
        &self,
        members: &[Member],
        healthy: &std::collections::BTreeSet<MemberId>,
        down: &[MemberId],
    ) -> std::collections::BTreeSet<MemberId> {
        let mut connected = std::collections::BTreeSet::new();
        let Ok(client) = self.client() else {
            return connected;
        };
        for m in members.iter().filter(|m| healthy.contains(&m.id)) {
            let Some(url) = m.client_urls.first().and_then(|u| self.metrics_url(u)) else {
                continue;
            };
            let text = async {
                client
                    .get(url.clone())
                    .timeout(HEALTH_TIMEOUT)
                    .send()
                    .await?
                    .error_for_status()?
                    .text()
                    .await
            };
            match text.await {
                Ok(text) => connected.extend(active_peers(&text).filter(|id| down.contains(id))),
                Err(e) => tracing::debug!(%url, error = %e, "peer view: metrics unreadable"),
            }
            if down.iter().all(|d| connected.contains(d)) {
                break;
            }
        }
        connected
    }

    fn metrics_url(&self, client_url: &str) -> Option<reqwest::Url> {
        let mut url = reqwest::Url::parse(client_url).ok()?;
        if let Some(port) = self.metrics_port {
            url.set_scheme("http").ok()?;
            url.set_port(Some(port)).ok()?;
        }
        url.set_path("/metrics");
        Some(url)
    }

    pub fn with_root(self, tokens: RootTokens) -> Self {
        let _ = self.root.set(tokens);
        self
    }

    /// A fresh root token for `endpoint`, if the function holds the signers and etcd asked for a
    /// user: from the signer the endpoint took last, else the first.
    fn token(&self, endpoint: &str) -> Result<Option<String>, Error> {
        Ok(self.tokens(endpoint)?.into_iter().next())
    }

    /// Fresh root tokens for `endpoint`, one per signer, the one it took last first; none while
    /// etcd has not asked for a user.
    fn tokens(&self, endpoint: &str) -> Result<Vec<String>, Error> {
        let Some(root) = self
            .root
            .get()
            .filter(|_| self.auth_seen.load(std::sync::atomic::Ordering::Relaxed))
        else {
            return Ok(Vec::new());
        };
        let first = self.signer_of(endpoint);
        let now = unix_now();
        (0..root.signers())
            .map(|n| root.token((first + n) % root.signers(), now))
            .collect()
    }

    fn signer_of(&self, endpoint: &str) -> usize {
        self.signers
            .lock()
            .unwrap()
            .get(endpoint)
            .copied()
            .unwrap_or(0)
    }

    /// Remembers that `endpoint` took the token `tried` places after its preferred one.
    fn took(&self, endpoint: &str, tried: usize) {
        if tried == 0 {
            return;
        }
        let n = self.root.get().map_or(1, RootTokens::signers);
        let signer = (self.signer_of(endpoint) + tried) % n;
        tracing::info!(
            endpoint,
            signer,
            "a member verifies tokens of another key (a bundle from before the token key)"
        );
        self.signers
            .lock()
            .unwrap()
            .insert(endpoint.to_string(), signer);
    }

    /// Whether a call made without a token was refused for naming no user, and we can be root:
    /// then it is tried again with a token, and tokens are sent from now on.
    fn asks_for_root(&self, sent_token: bool, r: &Result<impl Sized, Error>) -> bool {
        let user_empty = matches!(r, Err(e) if e.refusal() == Some(Refusal::UserEmpty));
        if sent_token || self.root.get().is_none() || !user_empty {
            return false;
        }
        if !self
            .auth_seen
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::info!("etcd asks for a user: acting as root from now on");
        }
        true
    }

    async fn call<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        endpoint: &str,
        path: &str,
        body: Value,
        timeout: Option<Duration>,
    ) -> Result<T, Error> {
        let client = self.client()?;
        // At most twice: a second try carries a token, which `asks_for_root` never retries.
        loop {
            let tokens = self.tokens(endpoint)?;
            let (r, tried) =
                call_with(&client, operation, endpoint, path, &body, timeout, &tokens).await;
            self.took(endpoint, tried);
            if !self.asks_for_root(!tokens.is_empty(), &r) {
                return r;
            }
        }
    }

    /// A membership call whose answer carries nothing we need.
    async fn act(
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

    async fn list(&self, endpoint: &str) -> Result<ListResponse, Error> {
        self.call(
            "member list",
            endpoint,
            "/v3/cluster/member/list",
            // 3.5+ answers from the raft log (a partitioned member cannot hand out a stale
            // list); 3.4 ignores the field.
            json!({"linearizable": true}),
            None,
        )
        .await
    }

    /// The member list as one member sees it, believed only from a voter in its own list, of the
    /// expected cluster, that knows a leader.
    async fn view(&self, endpoint: &str, cluster: Option<u64>) -> Result<ClusterView, Error> {
        let list = self.trusted_list(endpoint, cluster).await?;
        let members: Vec<Member> = list.members.into_iter().map(Member::from).collect();
        let probed = self.probe(&members).await?;
        // No `leader` in the answer means there is none: a member without a leader may hold an
        // old list (partitioned, or the quorum is lost), so its list is not believed.
        let leader = probed
            .statuses
            .get(&MemberId(list.header.member_id))
            .map(|s| s.1)
            .filter(|&l| l != 0)
            .map(MemberId)
            .ok_or_else(|| Error::EtcdRefused {
                operation: "member list",
                refusal: Refusal::NoLeader,
                message: "the answering member knows no leader".into(),
            })?;
        let healthy: std::collections::BTreeSet<MemberId> =
            probed.statuses.keys().copied().collect();
        let statuses: std::collections::BTreeMap<MemberId, MemberStatus> = probed
            .statuses
            .into_iter()
            .map(|(id, (s, _))| (id, s))
            .collect();
        let down: Vec<MemberId> = members
            .iter()
            .filter(|m| m.is_started() && !healthy.contains(&m.id))
            .map(|m| m.id)
            .collect();
        let peer_connected = if down.is_empty() {
            Default::default()
        } else {
            self.peer_view(&members, &healthy, &down).await
        };
        let alarms = self.alarms(endpoint).await?;
        let history_compacted = if alarms.iter().any(|a| a.kind == crate::model::NOSPACE) {
            let revision = statuses.values().map(|s| s.revision).max().unwrap_or(0);
            self.compacted_up_to(endpoint, revision).await?
        } else {
            false
        };
        let auth_enabled = match self.root.get() {
            Some(_) => self.auth_enabled(endpoint).await?,
            None => false,
        };
        Ok(ClusterView {
            cluster_id: list.header.cluster_id,
            members,
            statuses,
            alarms,
            history_compacted,
            auth_enabled,
            peer_connected,
            leader: Some(leader),
            healthy,
            endpoint: endpoint.to_string(),
        })
    }

    /// The member list, only from a member of the expected cluster that is a voter in its own
    /// list (a learner cannot take membership calls; a member missing from its own list was
    /// removed).
    async fn trusted_list(
        &self,
        endpoint: &str,
        cluster: Option<u64>,
    ) -> Result<ListResponse, Error> {
        let list = self.list(endpoint).await?;
        let untrusted = |refusal, message: String| Error::EtcdRefused {
            operation: "member list",
            refusal,
            message,
        };
        if let Some(want) = cluster.filter(|&c| c != list.header.cluster_id) {
            return Err(untrusted(
                Refusal::Other,
                format!(
                    "answered by a member of cluster {:x}, not the record's {want:x}",
                    list.header.cluster_id
                ),
            ));
        }
        match list.members.iter().find(|m| m.id == list.header.member_id) {
            Some(m) if m.is_learner => Err(untrusted(
                Refusal::NotSupportedForLearner,
                "answered by a learner".into(),
            )),
            Some(_) => Ok(list),
            None => Err(untrusted(
                Refusal::Other,
                format!(
                    "answered by member {:x}, which is not in its own list (removed)",
                    list.header.member_id
                ),
            )),
        }
    }

    /// One status call per started member, at once: whether it answers (itself, not another
    /// etcd at a reused address), its own status, and the leader it knows.
    async fn probe(&self, members: &[Member]) -> Result<Probed, Error> {
        let mut probes = JoinSet::new();
        for m in members.iter().filter(|m| m.is_started()) {
            let id = m.id;
            let urls: Vec<(String, Vec<String>)> = m
                .client_urls
                .iter()
                .map(|u| Ok((u.clone(), self.tokens(u)?)))
                .collect::<Result<_, Error>>()?;
            let client = self.client()?;
            probes.spawn(async move {
                for (url, tokens) in urls {
                    let path = "/v3/maintenance/status";
                    let (status, tried) = call_with::<StatusResponse>(
                        &client,
                        "status",
                        &url,
                        path,
                        &json!({}),
                        Some(HEALTH_TIMEOUT),
                        &tokens,
                    )
                    .await;
                    // Only the member itself counts: anything else answering at its URL (an
                    // address reused by another etcd) says nothing of its health.
                    if let Ok(s) = status {
                        if s.header.member_id == id.0 {
                            return Some((id, s, url, tried));
                        }
                    }
                }
                None
            });
        }
        let mut statuses = std::collections::BTreeMap::new();
        while let Some(probe) = probes.join_next().await {
            if let Ok(Some((id, status, url, tried))) = probe {
                self.took(&url, tried);
                statuses.insert(id, (MemberStatus::from(&status), status.leader));
            }
        }
        Ok(Probed { statuses })
    }

    /// The cluster's active alarms: raft state, so any member answers for all.
    async fn alarms(&self, endpoint: &str) -> Result<Vec<Alarm>, Error> {
        let alarms: AlarmResponse = self
            .call(
                "alarm list",
                endpoint,
                "/v3/maintenance/alarm",
                json!({"action": "GET"}),
                None,
            )
            .await?;
        Ok(alarms
            .alarms
            .into_iter()
            .filter(|a| !a.alarm.is_empty() && a.alarm != "NONE")
            .map(|a| Alarm {
                member: MemberId(a.member_id),
                kind: a.alarm,
            })
            .collect())
    }
}

/// What the members that answered said of themselves, with the leader each knows.
struct Probed {
    statuses: std::collections::BTreeMap<MemberId, (MemberStatus, u64)>,
}

/// The JSON gateway's server stream: one `{"result": {...}}` object per line, each carrying a
/// base64 `blob` of the database; an `{"error": ...}` object ends it badly. Read without
/// copies: lines are parsed where they lie in the buffer (the blob borrowed), and decoded
/// straight into the chunk handed on.
struct SnapshotLines {
    response: reqwest::Response,
    endpoint: String,
    pending: Vec<u8>,
    /// Where the first unread line of `pending` begins.
    start: usize,
    finished: bool,
}

#[derive(Deserialize)]
struct SnapshotLine<'a> {
    #[serde(borrow)]
    result: Option<SnapshotChunk<'a>>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct SnapshotChunk<'a> {
    /// Borrowed from the line unless JSON escapes had to be undone (base64 has none).
    #[serde(default, borrow)]
    blob: std::borrow::Cow<'a, str>,
}

impl SnapshotLines {
    fn broken(&self, detail: String) -> Error {
        Error::EtcdProtocol {
            operation: "snapshot",
            detail: format!("from {}: {detail}", self.endpoint),
        }
    }

    /// The next decoded chunk, reading more of the body while no whole line is buffered.
    async fn next(&mut self) -> Result<Option<Vec<u8>>, Error> {
        loop {
            let unread = &self.pending[self.start..];
            if let Some(n) = memchr::memchr(b'\n', unread) {
                let (from, to) = (self.start, self.start + n);
                self.start = to + 1;
                match self.decode(from, to)? {
                    Some(bytes) => return Ok(Some(bytes)),
                    None => continue,
                }
            }
            // Keep the unread tail only; amortized, as the buffer grows by whole reads.
            self.pending.drain(..self.start);
            self.start = 0;
            if self.finished {
                if self.pending.iter().all(u8::is_ascii_whitespace) {
                    return Ok(None);
                }
                // The last message without its newline.
                self.pending.push(b'\n');
                continue;
            }
            match self.response.chunk().await {
                Ok(Some(bytes)) => self.pending.extend_from_slice(&bytes),
                Ok(None) => self.finished = true,
                Err(e) => {
                    return Err(Error::EtcdUnavailable {
                        operation: "snapshot",
                        endpoint: self.endpoint.clone(),
                        source: Box::new(e),
                    })
                }
            }
        }
    }

    /// The bytes of the line `pending[from..to]`; None for a blank line or an empty blob.
    /// A line with a blob (`"blob":"…"`, which only a key can spell: a quote inside a JSON
    /// string is escaped) is decoded where it lies; any other line is parsed whole (an error,
    /// a header alone). A blob whose bytes were not etcd's fails its SHA-256 trailer anyway.
    fn decode(&self, from: usize, to: usize) -> Result<Option<Vec<u8>>, Error> {
        use base64::Engine;
        const BLOB: &[u8] = b"\"blob\":\"";
        let line = &self.pending[from..to];
        if let Some(at) = memchr::memmem::find(line, BLOB) {
            let rest = &line[at + BLOB.len()..];
            let end = memchr::memchr(b'"', rest)
                .ok_or_else(|| self.broken("a chunk's blob is not closed".into()))?;
            let mut bytes = Vec::with_capacity(end / 4 * 3 + 3);
            base64::engine::general_purpose::STANDARD
                .decode_vec(&rest[..end], &mut bytes)
                .map_err(|e| self.broken(format!("a chunk is not base64: {e}")))?;
            return Ok((!bytes.is_empty()).then_some(bytes));
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        let parsed: SnapshotLine = serde_json::from_slice(line)
            .map_err(|e| self.broken(format!("unreadable stream message: {e}")))?;
        if let Some(e) = parsed.error {
            return Err(self.broken(format!("etcd ended the stream: {e}")));
        }
        let Some(blob) = parsed.result.map(|r| r.blob).filter(|b| !b.is_empty()) else {
            return Ok(None);
        };
        let mut bytes = Vec::with_capacity(blob.len() / 4 * 3 + 3);
        base64::engine::general_purpose::STANDARD
            .decode_vec(blob.as_bytes(), &mut bytes)
            .map_err(|e| self.broken(format!("a chunk is not base64: {e}")))?;
        Ok((!bytes.is_empty()).then_some(bytes))
    }
}

impl SnapshotStream for SnapshotLines {
    fn next_chunk(&mut self) -> NextChunk<'_> {
        Box::pin(self.next())
    }
}

impl EtcdMembers {
    /// Whether history before `revision` is compacted away: a read at the revision before it is
    /// refused as compacted.
    async fn compacted_up_to(&self, endpoint: &str, revision: i64) -> Result<bool, Error> {
        if revision <= 1 {
            return Ok(true);
        }
        let body =
            json!({"key": "AA==", "revision": (revision - 1).to_string(), "count_only": true});
        match self
            .call::<Value>("range", endpoint, "/v3/kv/range", body, None)
            .await
        {
            Ok(_) => Ok(false),
            Err(e) if e.refusal() == Some(Refusal::AlreadyCompacted) => Ok(true),
            // With authentication on, a read demands the store's exact auth revision, which
            // root tokens do not carry (etcd 3.4 cannot tell it): answer from this process's
            // own compaction instead. A new environment forgets it and compacts again, which etcd
            // answers at once (compacting to a compacted revision is refused as compacted).
            Err(e) if e.refusal() == Some(Refusal::AuthOldRevision) => {
                Ok(*self.compacted_to.lock().unwrap() >= revision)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether etcd's authentication is on: a read without a token is refused for naming no user
    /// only then (3.4 has no auth status call). Serializable: the member answers alone, no quorum
    /// and no raft proposal. Remembered for the token (`auth_seen`).
    async fn auth_enabled(&self, endpoint: &str) -> Result<bool, Error> {
        let body = json!({"key": "AA==", "serializable": true, "count_only": true});
        let client = self.client()?;
        let r = call::<Value>(
            &client,
            "auth probe",
            endpoint,
            "/v3/kv/range",
            body,
            None,
            None,
        );
        let on = match r.await {
            Ok(_) => false,
            Err(e) if e.refusal() == Some(Refusal::UserEmpty) => true,
            Err(e) => return Err(e),
        };
        self.auth_seen
            .store(on, std::sync::atomic::Ordering::Relaxed);
        Ok(on)
    }

    /// Whether `user` logs in with `password` through the gateway, as its programs will: a user
    /// made without a password (a certificate user of that name) cannot, whatever it is given.
    async fn check_login(
        &self,
        endpoint: &str,
        user: &str,
        password: &crate::pki::Password,
    ) -> Result<(), Error> {
        let client = self.client()?;
        let body = json!({"name": user, "password": password.expose()});
        let path = "/v3/auth/authenticate";
        match call::<Value>(&client, "auth login", endpoint, path, body, None, None).await {
            Ok(_) => Ok(()),
            Err(e) if e.refusal().is_some() => Err(Error::Config {
                var: "USER".into(),
                value: user.into(),
                reason: format!(
                    "cannot log in with its new password ({e}): a certificate user of that \
                     name has no password; give the gateway user another name"
                ),
            }),
            Err(e) => Err(e),
        }
    }

    /// An auth call that may find its work done already (the user or role exists).
    async fn ensure(
        &self,
        operation: &'static str,
        endpoint: &str,
        path: &str,
        body: Value,
    ) -> Result<(), Error> {
        match self.act(operation, endpoint, path, body).await {
            Err(e) if e.refusal() == Some(Refusal::AlreadyExists) => Ok(()),
            r => r,
        }
    }
}

impl EtcdMembers {
    /// A member that answers for itself (the maintenance status and its local member list need
    /// no quorum), of the expected cluster.
    async fn survivor(
        &self,
        endpoint: &str,
        cluster: Option<u64>,
    ) -> Result<Option<Survivor>, Error> {
        let status: StatusResponse = self
            .call(
                "status",
                endpoint,
                "/v3/maintenance/status",
                json!({}),
                Some(HEALTH_TIMEOUT),
            )
            .await?;
        // Served from the member's own store: no quorum needed.
        let list: ListResponse = self
            .call(
                "member list",
                endpoint,
                "/v3/cluster/member/list",
                json!({"linearizable": false}),
                Some(HEALTH_TIMEOUT),
            )
            .await?;
        let me = list.header.member_id;
        let Some(own) = list.members.iter().find(|m| m.id == me) else {
            return Ok(None);
        };
        if status.header.member_id != me || cluster.is_some_and(|c| c != list.header.cluster_id) {
            return Ok(None);
        }
        Ok(Some(Survivor {
            member: MemberId(me),
            name: own.name.clone(),
            is_learner: own.is_learner,
            endpoint: endpoint.to_string(),
            cluster_id: list.header.cluster_id,
            status: MemberStatus::from(&status),
            voters: list
                .members
                .into_iter()
                .filter(|m| !m.is_learner)
                .map(Member::from)
                .collect(),
        }))
    }
}

impl Members for EtcdMembers {
    async fn observe(&self, endpoints: &[String], cluster: Option<u64>) -> ClusterState {
        let preferred = self.preferred.lock().unwrap().clone();
        let ordered = preferred
            .iter()
            .chain(endpoints.iter().filter(|e| Some(*e) != preferred.as_ref()));
        let mut failures = Vec::new();
        for endpoint in ordered {
            match self.view(endpoint, cluster).await {
                Ok(view) => {
                    *self.preferred.lock().unwrap() = Some(endpoint.clone());
                    return ClusterState::Known(view);
                }
                Err(e) => failures.push(format!("{e:?}")),
            }
        }
        *self.preferred.lock().unwrap() = None;
        // Survivors matter only to a cluster that served (its record has an id): recovery, and
        // the holds of voters whose disks may have its newest writes. Before that, two calls
        // per endpoint on every observation of a bootstrap would buy nothing.
        let mut survivors = Vec::new();
        for endpoint in endpoints.iter().filter(|_| cluster.is_some()) {
            if let Ok(Some(s)) = self.survivor(endpoint, cluster).await {
                survivors.push(s);
            }
        }
        ClusterState::Unreachable {
            detail: if failures.is_empty() {
                "no endpoint to ask".into()
            } else {
                failures.join("; ")
            },
            survivors,
        }
    }

    fn identify(&self, ca: &crate::pki::Ca) -> Result<(), Error> {
        self.managed_by(ca, unix_now())
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
        // A survivor answers for itself: ask it whether a user is needed before streaming (a
        // served cluster's observation asked already).
        if self.root.get().is_some() && !self.auth_seen.load(std::sync::atomic::Ordering::Relaxed) {
            self.auth_enabled(endpoint).await?;
        }
        // The stream is one request, with one token: learn first which key this member takes
        // (a bundle from before the token key verifies only the CA's) with a call that checks
        // the token on 3.4 too: a serializable read of nothing, which the member answers alone
        // (its answer, "auth revision is old" for root tokens, does not matter). A failure here
        // is the snapshot's to report.
        if self.root.get().is_some() && self.auth_seen.load(std::sync::atomic::Ordering::Relaxed) {
            let nothing = json!({"key": "AA==", "serializable": true, "count_only": true});
            let _ = self
                .call::<Value>(
                    "range",
                    endpoint,
                    "/v3/kv/range",
                    nothing,
                    Some(HEALTH_TIMEOUT),
                )
                .await;
        }
        let url = format!("{}/v3/maintenance/snapshot", endpoint.trim_end_matches('/'));
        let mut request = self
            .client()?
            .post(url)
            .json(&json!({}))
            .timeout(SNAPSHOT_TIMEOUT);
        if let Some(token) = self.token(endpoint)? {
            request = request.header(reqwest::header::AUTHORIZATION, token);
        }
        let response = request.send().await.map_err(|e| Error::EtcdUnavailable {
            operation: "snapshot",
            endpoint: endpoint.to_string(),
            source: Box::new(e),
        })?;
        if !response.status().is_success() {
            return Err(Error::EtcdProtocol {
                operation: "snapshot",
                detail: format!("{endpoint} answered HTTP {}", response.status()),
            });
        }
        Ok(Box::new(SnapshotLines {
            response,
            endpoint: endpoint.to_string(),
            pending: Vec::new(),
            start: 0,
            finished: false,
        }))
    }

    async fn disarm(&self, endpoint: &str, alarm: &Alarm) -> Result<(), Error> {
        let body = json!({
            "action": "DEACTIVATE",
            "memberID": alarm.member.0.to_string(),
            "alarm": alarm.kind,
        });
        self.act("alarm disarm", endpoint, "/v3/maintenance/alarm", body)
            .await
    }

    async fn transfer_leadership(&self, leader_endpoint: &str, to: MemberId) -> Result<(), Error> {
        let body = json!({"targetID": to.0.to_string()});
        let path = "/v3/maintenance/transfer-leadership";
        self.act("transfer leadership", leader_endpoint, path, body)
            .await
    }

    async fn enable_auth(&self, endpoint: &str) -> Result<(), Error> {
        let root = crate::pki::ROOT_USER;
        let user = json!({"name": root, "options": {"no_password": true}});
        self.ensure("auth user add", endpoint, "/v3/auth/user/add", user)
            .await?;
        let grant = json!({"user": root, "role": root});
        self.act("auth grant role", endpoint, "/v3/auth/user/grant", grant)
            .await?;
        self.act("auth enable", endpoint, "/v3/auth/enable", json!({}))
            .await
    }

    async fn grant_prefix(&self, endpoint: &str, grant: &PrefixGrant) -> Result<(), Error> {
        use base64::Engine;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let name = &grant.user;
        self.ensure(
            "auth role add",
            endpoint,
            "/v3/auth/role/add",
            json!({"name": name}),
        )
        .await?;
        let perm = json!({
            "permType": if grant.read_only { "READ" } else { "READWRITE" },
            "key": b64(grant.prefix.as_bytes()),
            "range_end": b64(&grant.range_end()),
        });
        let body = json!({"name": name, "perm": perm});
        self.act(
            "auth grant permission",
            endpoint,
            "/v3/auth/role/grant",
            body,
        )
        .await?;
        match &grant.password {
            None => {
                let user = json!({"name": name, "options": {"no_password": true}});
                self.ensure("auth user add", endpoint, "/v3/auth/user/add", user)
                    .await?;
            }
            Some(password) => {
                let user = json!({"name": name, "password": password.expose()});
                match self
                    .act("auth user add", endpoint, "/v3/auth/user/add", user.clone())
                    .await
                {
                    Err(e) if e.refusal() == Some(Refusal::AlreadyExists) => {
                        self.act(
                            "auth change password",
                            endpoint,
                            "/v3/auth/user/changepw",
                            user,
                        )
                        .await?
                    }
                    r => r?,
                }
            }
        }
        let body = json!({"user": name, "role": name});
        self.act("auth grant role", endpoint, "/v3/auth/user/grant", body)
            .await?;
        if let Some(password) = &grant.password {
            self.check_login(endpoint, name, password).await?;
        }
        Ok(())
    }
}

/// The function's own client identity for etcd, from its CA: no common name (it is `root`
/// through tokens), valid a day from `now`.
pub fn own_identity(ca: &crate::pki::Ca, now: i64) -> Result<ClientTls, Error> {
    let issued = ca.issue_function(crate::pki::FUNCTION_CERT_SECS, now)?;
    Ok(ClientTls {
        ca_pem: ca.cert_pem.clone().into_bytes(),
        identity_pem: format!("{}{}", issued.cert_pem, issued.key_pem.expose()).into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_peers_are_read_from_etcds_metrics_page() {
        // As etcd 3.5 prints it (one sample per peer; Local is the member serving the page).
        let page = "# HELP etcd_network_active_peers The current number of active peer connections.\n\
            # TYPE etcd_network_active_peers gauge\n\
            etcd_network_active_peers{Local=\"8e9e05c52164694d\",Remote=\"91bc3c398fb3c146\"} 1\n\
            etcd_network_active_peers{Local=\"8e9e05c52164694d\",Remote=\"fd422379fda50e48\"} 0\n\
            etcd_network_disconnected_peers_total{Local=\"8e9e05c52164694d\",Remote=\"fd422379fda50e48\"} 3\n\
            etcd_network_active_peers{Local=\"8e9e05c52164694d\",Remote=\"not-hex\"} 1\n";
        let found: Vec<MemberId> = active_peers(page).collect();
        assert_eq!(found, [MemberId(0x91bc3c398fb3c146)]);
    }

    #[test]
    fn metrics_are_read_on_the_metrics_port_in_plain_http_when_there_is_one() {
        let m = EtcdMembers::new(Duration::from_secs(1), None).unwrap();
        let plain = m.metrics_url("http://10.0.0.2:2379").unwrap();
        assert_eq!(plain.as_str(), "http://10.0.0.2:2379/metrics");
        let m = m.with_metrics_port(Some(2381));
        let tls = m.metrics_url("https://10.0.0.2:2379").unwrap();
        assert_eq!(tls.as_str(), "http://10.0.0.2:2381/metrics");
    }
}
