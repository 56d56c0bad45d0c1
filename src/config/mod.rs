//! All configuration, read once from the environment into one struct of sections, each parsing
//! its own variables (`vars.rs` lists them all, with their defaults and meaning). A bad value is
//! refused with the variable's name and the value.

mod vars;

use std::time::Duration;

use crate::error::Error;
use crate::model::{InitialState, MemberConfig};
use vars::*;
pub use vars::{table as variables_table, Var, VARIABLES};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
        }
    }
}

/// How etcd members reach each other and how clients reach them, and the storage settings every
/// member starts with: what the planner needs to turn an instance address into a member config.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Topology {
    pub peer_scheme: Scheme,
    pub peer_port: u16,
    pub client_scheme: Scheme,
    pub client_port: u16,
    /// etcd's periodic auto-compaction retention (`1h`, `30m`, or whole hours).
    pub auto_compaction_retention: String,
    pub quota_backend_bytes: u64,
    /// etcd's `--snapshot-count` on every member.
    pub snapshot_count: u64,
    /// TLS=managed: members demand client certificates of clients and peers.
    pub mutual_tls: bool,
    /// TLS=managed: members also serve `/health` and `/metrics` in plain HTTP on this port.
    pub metrics_port: Option<u16>,
}

impl Topology {
    pub fn peer_url(&self, address: &str) -> String {
        format!(
            "{}://{}:{}",
            self.peer_scheme.as_str(),
            host(address),
            self.peer_port
        )
    }

    pub fn client_url(&self, address: &str) -> String {
        format!(
            "{}://{}:{}",
            self.client_scheme.as_str(),
            host(address),
            self.client_port
        )
    }

    /// What the instance `name` at `address` starts etcd with.
    pub fn member_config(
        &self,
        name: &str,
        address: &str,
        initial_cluster: Vec<(String, String)>,
        state: InitialState,
        token: String,
        etcd_version: Option<crate::model::Version>,
    ) -> MemberConfig {
        MemberConfig {
            name: name.to_string(),
            initial_cluster,
            state,
            token,
            peer_url: self.peer_url(address),
            client_url: self.client_url(address),
            auto_compaction_retention: self.auto_compaction_retention.clone(),
            quota_backend_bytes: self.quota_backend_bytes,
            snapshot_count: self.snapshot_count,
            restore: None,
            client_cert_auth: self.mutual_tls,
            root_tokens: self.mutual_tls,
            metrics_url: self
                .metrics_port
                .map(|p| format!("http://{}:{p}", host(address))),
            etcd_version,
        }
    }
}

/// etcd's advice: a backend quota above 8 GiB is not supported well.
pub const MAX_QUOTA_BACKEND_BYTES: u64 = 8 << 30;

fn host(address: &str) -> String {
    if address.contains(':') {
        format!("[{address}]")
    } else {
        address.to_string()
    }
}

/// Where an instance's etcd address comes from.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum AddressSource {
    PrivateIp,
    /// The value of this instance tag: for multi-ENI setups, and for tests that map instances to
    /// loopback addresses.
    Tag(String),
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TlsFiles {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

/// The planner's share of the configuration.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Settings {
    pub topology: Topology,
    pub cluster_name: String,
    /// How long a learner may stay unstarted after its config was published before it is removed
    /// and its launch abandoned.
    pub learner_start_timeout_secs: i64,
    /// How long a voter's etcd may be down while its instance is in service before the function
    /// has the group replace the instance.
    pub unhealthy_replace_secs: i64,
    /// Defragment a member when at least this share of its database file is free...
    pub defrag_free_percent: u64,
    /// ...and the file is at least this large.
    pub defrag_min_bytes: u64,
    /// Backups and recovery; None when no bucket is configured.
    pub backup: Option<BackupPolicy>,
    /// TLS=managed: a member certificate's life; a member with less than a third of it left is
    /// replaced (certificates renew by replacement).
    pub member_cert_secs: Option<i64>,
    /// ETCD_AUTH=on (TLS=managed): etcd's authentication is kept on.
    pub etcd_auth: bool,
    /// ETCD_AUTH=on set, not taken by default from TLS=managed: an adopted cluster's
    /// authentication is turned on too (else it is left as it was found).
    pub etcd_auth_explicit: bool,
    /// START_FROM=backup: a new stack's first cluster only ever starts from the backup a restore
    /// request names, never empty.
    pub start_from_backup: bool,
    /// ADOPT_ENDPOINTS: the client URLs of a cluster that runs already, to adopt.
    pub adopt: Vec<String>,
}

#[cfg(test)]
impl BackupPolicy {
    /// The tests' policy: a snapshot every 15 minutes, one an hour kept for a week and one a
    /// day for 90 days, RECOVERY=auto.
    pub fn for_tests() -> Self {
        BackupPolicy {
            interval_secs: 900,
            hourly_days: 7,
            daily_days: 90,
            recovery: Recovery::Auto,
        }
    }
}

#[cfg(test)]
impl Settings {
    /// The planners' table tests' settings: http on the default ports, a 2 GiB quota, learners
    /// given 600 s, backups off.
    pub fn for_tests() -> Self {
        Settings {
            topology: Topology {
                peer_scheme: Scheme::Http,
                peer_port: 2380,
                client_scheme: Scheme::Http,
                client_port: 2379,
                auto_compaction_retention: "1h".into(),
                quota_backend_bytes: 2 << 30,
                snapshot_count: 10_000,
                mutual_tls: false,
                metrics_port: None,
            },
            cluster_name: "etcd".into(),
            learner_start_timeout_secs: 600,
            unhealthy_replace_secs: 300,
            defrag_free_percent: 50,
            defrag_min_bytes: 100 << 20,
            backup: None,
            member_cert_secs: None,
            etcd_auth: false,
            etcd_auth_explicit: false,
            start_from_backup: false,
            adopt: vec![],
        }
    }
}

/// When snapshots are taken and kept, and how a lost cluster comes back.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct BackupPolicy {
    pub interval_secs: i64,
    /// One snapshot per hour is kept this many days...
    pub hourly_days: i64,
    /// ...and one per day this many.
    pub daily_days: i64,
    pub recovery: Recovery,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Recovery {
    /// Restore the freshest data by itself when every member is lost.
    Auto,
    /// Wait for an operator's restore request (`<prefix>/restore-request`).
    Manual,
}

/// Where the snapshots go.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct BackupStore {
    pub bucket: String,
    /// Key prefix, without leading or trailing '/'.
    pub prefix: String,
}

/// TLS=managed: how member certificates are issued and their keys kept.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Pki {
    /// A member certificate's life: MEMBER_CERT_DAYS (or, in tests, MEMBER_CERT_SECS).
    pub member_cert_secs: i64,
    /// Further names in every member's certificate (the load balancer's DNS name).
    pub extra_sans: Vec<String>,
    /// The KMS key of the SecureStrings (CA, member keys); unset: the account's `aws/ssm` key.
    pub kms_key_id: Option<String>,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Config {
    pub group_name: String,
    pub launch_hook: String,
    pub terminate_hook: String,
    pub parameter_prefix: String,
    pub address_source: AddressSource,
    pub tls: Option<TlsFiles>,
    /// TLS=managed: the function keeps the cluster's CA and issues every certificate.
    pub pki: Option<Pki>,
    pub settings: Settings,
    pub timing: Timing,
    /// Test-only failpoint (`FAILPOINT_CRASH_AFTER`): abort the process right after a step of
    /// this name succeeds, so tests can kill the function between two steps of one change.
    pub crash_after: Option<String>,
    /// The backup bucket; None: backups are off.
    pub backup_store: Option<BackupStore>,
}

/// How long an invocation's parts may take.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Timing {
    /// Timeout of one etcd HTTP request.
    pub etcd_timeout: Duration,
    /// How long one invocation keeps waiting on slow steps (a learner booting, a promote not yet in
    /// sync) before it leaves the rest to the next event or schedule.
    pub wait_budget: Duration,
    pub poll_interval: Duration,
    /// Stop starting steps this long before the Lambda deadline.
    pub deadline_margin: Duration,
}

/// The environment as the sections read it: a variable unset or blank takes its default.
struct Env<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl Env<'_> {
    fn get(&self, var: &Var) -> Option<String> {
        (self.lookup)(var.name).filter(|v| !v.trim().is_empty())
    }

    fn required(&self, var: &Var) -> Result<String, Error> {
        self.get(var)
            .ok_or_else(|| bad(var.name, "", "is required"))
    }

    /// A whole number from `min` to `max`, else the variable's default.
    fn number(&self, var: &Var, min: u64, max: u64) -> Result<u64, Error> {
        let raw = self.get(var).unwrap_or_else(|| var.default.to_string());
        match raw.trim().parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(bad(
                var.name,
                &raw,
                &format!("must be a whole number from {min} to {max}"),
            )),
        }
    }

    fn millis(&self, var: &Var, min: u64, max: u64) -> Result<Duration, Error> {
        Ok(Duration::from_millis(self.number(var, min, max)?))
    }

    fn port(&self, var: &Var) -> Result<u16, Error> {
        Ok(self.number(var, 1, 65535)? as u16)
    }

    fn scheme(&self, var: &Var) -> Result<Scheme, Error> {
        match self.get(var).as_deref().unwrap_or(var.default) {
            "http" => Ok(Scheme::Http),
            "https" => Ok(Scheme::Https),
            v => Err(bad(var.name, v, "must be 'http' or 'https'")),
        }
    }

    /// An on/off switch; unset: `default`.
    fn switch(&self, var: &Var, default: bool) -> Result<bool, Error> {
        match self.get(var).as_deref() {
            None => Ok(default),
            Some("on") => Ok(true),
            Some("off") => Ok(false),
            Some(v) => Err(bad(var.name, v, "must be 'on' or 'off'")),
        }
    }
}

impl Config {
    pub fn from_env() -> Result<Self, Error> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let env = Env { lookup: &get };
        let names = Names::parse(&env)?;
        let tls = TlsFiles::parse(&env)?;
        let pki = Pki::parse(&env, tls.is_some())?;
        let backup_store = BackupStore::parse(&env, &names.parameter_prefix)?;
        let backup = match &backup_store {
            Some(_) => Some(BackupPolicy::parse(&env)?),
            None => None,
        };
        let start_from_backup = match env
            .get(&START_FROM)
            .as_deref()
            .unwrap_or(START_FROM.default)
        {
            "empty" => false,
            "backup" if backup.is_some() => true,
            "backup" => {
                return Err(bad(
                    START_FROM.name,
                    "backup",
                    "needs BACKUP_BUCKET: a backup is restored from the stack's bucket",
                ))
            }
            v => return Err(bad(START_FROM.name, v, "must be 'empty' or 'backup'")),
        };
        let managed = pki.is_some();
        let adopt = adopt_endpoints(&env, managed)?;
        if start_from_backup && !adopt.is_empty() {
            return Err(bad(
                START_FROM.name,
                "backup",
                "cannot go with ADOPT_ENDPOINTS: a stack either adopts a running cluster or starts from a backup",
            ));
        }
        let etcd_auth = env.switch(&ETCD_AUTH, managed)?;
        let etcd_auth_explicit = etcd_auth && env.get(&ETCD_AUTH).is_some();
        if etcd_auth && !managed {
            return Err(bad(
                ETCD_AUTH.name,
                "on",
                "needs TLS=managed: the function signs its root tokens with the cluster's CA",
            ));
        }
        Ok(Self {
            address_source: AddressSource::parse(&env)?,
            settings: Settings {
                topology: Topology::parse(&env, managed)?,
                learner_start_timeout_secs: env.number(&LEARNER_START_TIMEOUT_SECS, 10, 86_400)?
                    as i64,
                unhealthy_replace_secs: env.number(&UNHEALTHY_REPLACE_SECS, 10, 86_400)? as i64,
                backup,
                member_cert_secs: pki.as_ref().map(|p| p.member_cert_secs),
                etcd_auth,
                etcd_auth_explicit,
                start_from_backup,
                adopt,
                defrag_free_percent: env.number(&DEFRAG_FREE_PERCENT, 10, 95)?,
                defrag_min_bytes: env.number(&DEFRAG_MIN_BYTES, 0, MAX_QUOTA_BACKEND_BYTES)?,
                cluster_name: names.cluster_name,
            },
            timing: Timing::parse(&env)?,
            crash_after: env.get(&FAILPOINT_CRASH_AFTER),
            group_name: names.group_name,
            launch_hook: names.launch_hook,
            terminate_hook: names.terminate_hook,
            parameter_prefix: names.parameter_prefix,
            tls,
            pki,
            backup_store,
        })
    }
}

/// The group, its hooks, and where the cluster's state lives.
struct Names {
    group_name: String,
    launch_hook: String,
    terminate_hook: String,
    cluster_name: String,
    parameter_prefix: String,
}

impl Names {
    fn parse(env: &Env) -> Result<Self, Error> {
        let name = |var: &Var| name_value(var.name, env.required(var)?);
        let group_name = name(&ASG_NAME)?;
        let launch_hook = name(&LAUNCH_HOOK_NAME)?;
        let terminate_hook = name(&TERMINATE_HOOK_NAME)?;
        if launch_hook == terminate_hook {
            return Err(bad(
                TERMINATE_HOOK_NAME.name,
                &terminate_hook,
                "must differ from LAUNCH_HOOK_NAME: a group's hook names are unique",
            ));
        }
        let cluster_name = match env.get(&CLUSTER_NAME) {
            Some(v) => name_value(CLUSTER_NAME.name, v)?,
            None => group_name.clone(),
        };
        let parameter_prefix = env
            .get(&PARAMETER_PREFIX)
            .unwrap_or_else(|| format!("/etcd-asg-lifecycle/{cluster_name}"));
        let parameter_prefix = parameter_prefix.trim_end_matches('/').to_string();
        if !parameter_prefix.starts_with('/')
            || parameter_prefix.len() < 2
            || !parameter_prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/_.-".contains(c))
        {
            return Err(bad(
                PARAMETER_PREFIX.name,
                &parameter_prefix,
                "must be an SSM path: '/' then letters, digits, '/', '_', '.', '-'",
            ));
        }
        Ok(Self {
            group_name,
            launch_hook,
            terminate_hook,
            cluster_name,
            parameter_prefix,
        })
    }
}

impl AddressSource {
    fn parse(env: &Env) -> Result<Self, Error> {
        match env.get(&ADDRESS_SOURCE).as_deref() {
            None | Some("private-ip") => Ok(Self::PrivateIp),
            Some(v) => match v.strip_prefix("tag:") {
                Some(tag) if !tag.is_empty() => Ok(Self::Tag(tag.to_string())),
                _ => Err(bad(
                    ADDRESS_SOURCE.name,
                    v,
                    "must be 'private-ip' or 'tag:<tag key>'",
                )),
            },
        }
    }
}

impl TlsFiles {
    /// All three files or none.
    fn parse(env: &Env) -> Result<Option<Self>, Error> {
        match (
            env.get(&ETCD_CA_FILE),
            env.get(&ETCD_CERT_FILE),
            env.get(&ETCD_KEY_FILE),
        ) {
            (None, None, None) => Ok(None),
            (Some(ca), Some(cert), Some(key)) => Ok(Some(Self { ca, cert, key })),
            (ca, cert, _) => {
                let missing = if ca.is_none() {
                    ETCD_CA_FILE
                } else if cert.is_none() {
                    ETCD_CERT_FILE
                } else {
                    ETCD_KEY_FILE
                };
                Err(bad(
                    missing.name,
                    "",
                    "is required when any of ETCD_CA_FILE, ETCD_CERT_FILE, ETCD_KEY_FILE is set",
                ))
            }
        }
    }
}

impl Pki {
    /// TLS=managed; `files`: whether TLS files were given too (they must not be).
    fn parse(env: &Env, files: bool) -> Result<Option<Self>, Error> {
        match env.get(&TLS).as_deref().unwrap_or(TLS.default) {
            "off" => return Ok(None),
            "managed" => {}
            v => return Err(bad(TLS.name, v, "must be 'managed' or 'off'")),
        }
        if files {
            return Err(bad(
                TLS.name,
                "managed",
                "issues the function's own certificate: leave ETCD_CA_FILE, ETCD_CERT_FILE and \
                 ETCD_KEY_FILE unset",
            ));
        }
        for var in [ETCD_PEER_SCHEME, ETCD_CLIENT_SCHEME] {
            if let Some(v) = env.get(&var).filter(|v| v != "https") {
                return Err(bad(
                    var.name,
                    &v,
                    "must be https (or unset) with TLS=managed",
                ));
            }
        }
        let extra_sans: Vec<String> = env
            .get(&MEMBER_CERT_EXTRA_SANS)
            .unwrap_or_default()
            .split(',')
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        for n in &extra_sans {
            let ok = n.len() <= 253
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".-:".contains(c));
            if !ok || crate::pki::san(n).is_err() {
                return Err(bad(
                    MEMBER_CERT_EXTRA_SANS.name,
                    n,
                    "must be IP addresses or DNS names, comma-separated",
                ));
            }
        }
        let member_cert_secs = match env.get(&MEMBER_CERT_SECS) {
            Some(_) => env.number(&MEMBER_CERT_SECS, 60, 86_400)? as i64,
            None => env.number(&MEMBER_CERT_DAYS, 1, 3650)? as i64 * 86_400,
        };
        Ok(Some(Self {
            member_cert_secs,
            extra_sans,
            kms_key_id: env.get(&PKI_KMS_KEY_ID),
        }))
    }
}

impl Topology {
    /// `managed`: TLS=managed, which makes every URL https and adds the metrics listener.
    fn parse(env: &Env, managed: bool) -> Result<Self, Error> {
        let (peer_scheme, client_scheme) = match managed {
            true => (Scheme::Https, Scheme::Https),
            false => (
                env.scheme(&ETCD_PEER_SCHEME)?,
                env.scheme(&ETCD_CLIENT_SCHEME)?,
            ),
        };
        Ok(Self {
            peer_scheme,
            peer_port: env.port(&ETCD_PEER_PORT)?,
            client_scheme,
            client_port: env.port(&ETCD_CLIENT_PORT)?,
            mutual_tls: managed,
            metrics_port: match managed {
                true => Some(env.port(&ETCD_METRICS_PORT)?),
                false => None,
            },
            auto_compaction_retention: retention(env)?,
            quota_backend_bytes: env.number(
                &QUOTA_BACKEND_BYTES,
                16 << 20,
                MAX_QUOTA_BACKEND_BYTES,
            )?,
            snapshot_count: env.number(&SNAPSHOT_COUNT, 100, 1_000_000)?,
        })
    }
}

impl BackupStore {
    /// None: no bucket, backups off. The key prefix defaults to the parameter prefix.
    fn parse(env: &Env, parameter_prefix: &str) -> Result<Option<Self>, Error> {
        let Some(bucket) = env.get(&BACKUP_BUCKET) else {
            return Ok(None);
        };
        let ok = (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-".contains(c));
        if !ok {
            return Err(bad(
                BACKUP_BUCKET.name,
                &bucket,
                "must be an S3 bucket name: 3-63 lowercase letters, digits, '.', '-'",
            ));
        }
        let prefix = env
            .get(&BACKUP_PREFIX)
            .unwrap_or_else(|| parameter_prefix.to_string())
            .trim_matches('/')
            .to_string();
        if prefix.is_empty()
            || !prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/_.-".contains(c))
        {
            return Err(bad(
                BACKUP_PREFIX.name,
                &prefix,
                "must be a key prefix of letters, digits, '/', '_', '.', '-'",
            ));
        }
        Ok(Some(Self { bucket, prefix }))
    }
}

impl BackupPolicy {
    fn parse(env: &Env) -> Result<Self, Error> {
        Ok(Self {
            interval_secs: env.number(&BACKUP_INTERVAL_MINUTES, 1, 1440)? as i64 * 60,
            hourly_days: env.number(&BACKUP_HOURLY_DAYS, 1, 365)? as i64,
            daily_days: env.number(&BACKUP_DAILY_DAYS, 1, 3650)? as i64,
            recovery: match env.get(&RECOVERY).as_deref().unwrap_or(RECOVERY.default) {
                "auto" => Recovery::Auto,
                "manual" => Recovery::Manual,
                v => return Err(bad(RECOVERY.name, v, "must be 'auto' or 'manual'")),
            },
        })
    }
}

impl Timing {
    fn parse(env: &Env) -> Result<Self, Error> {
        Ok(Self {
            etcd_timeout: env.millis(&ETCD_REQUEST_TIMEOUT_MS, 100, 60_000)?,
            wait_budget: Duration::from_secs(env.number(&WAIT_BUDGET_SECS, 0, 900)?),
            poll_interval: env.millis(&POLL_INTERVAL_MS, 50, 60_000)?,
            deadline_margin: env.millis(&DEADLINE_MARGIN_MS, 0, 60_000)?,
        })
    }
}

/// ADOPT_ENDPOINTS: client URLs (`scheme://host:port`), at most nine, of one scheme: `https`
/// with TLS=managed (the adopted cluster's CA becomes the stack's: docs/adopting.md), `http`
/// without it (the members this stack adds speak what the old ones speak).
fn adopt_endpoints(env: &Env, managed: bool) -> Result<Vec<String>, Error> {
    let Some(value) = env.get(&ADOPT_ENDPOINTS).filter(|v| !v.trim().is_empty()) else {
        return Ok(vec![]);
    };
    let urls: Vec<String> = value.split(',').map(|u| u.trim().to_string()).collect();
    let scheme = if managed { "https://" } else { "http://" };
    if let Some(u) = urls.iter().find(|u| !u.starts_with(scheme)) {
        let reason = if managed {
            "is not https: with TLS=managed the members this stack adds speak TLS, and so must \
             the cluster they join (adopt a plain-HTTP cluster with TLS=off)"
        } else {
            "is not http: a cluster with TLS is adopted with TLS=managed and its CA imported \
             (etcd-asg adopt-secrets)"
        };
        return Err(bad(ADOPT_ENDPOINTS.name, u, reason));
    }
    let well_formed = |u: &str| {
        u.strip_prefix(scheme)
            .and_then(|rest| rest.rsplit_once(':'))
            .is_some_and(|(host, port)| {
                !host.is_empty()
                    && host
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b".-[]:".contains(&b))
                    && port.parse::<u16>().is_ok_and(|p| p > 0)
            })
    };
    if let Some(u) = urls.iter().find(|u| !well_formed(u)) {
        return Err(bad(
            ADOPT_ENDPOINTS.name,
            u,
            "is not a client URL scheme://host:port",
        ));
    }
    if urls.len() > 9 {
        return Err(bad(
            ADOPT_ENDPOINTS.name,
            &value,
            "names more than nine endpoints",
        ));
    }
    Ok(urls)
}

fn bad(var: &str, value: &str, reason: &str) -> Error {
    Error::Config {
        var: var.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

/// Group, hook and cluster names as AWS allows them (1-255 printable characters, no control
/// characters), so a hostile value is refused at start rather than echoed into parameters.
fn name_value(var: &str, value: String) -> Result<String, Error> {
    if value.len() > 255
        || value
            .chars()
            .any(|c| c.is_control() || c == ',' || c == '=')
    {
        return Err(bad(
            var,
            &value,
            "must be at most 255 characters without control characters, ',' or '='",
        ));
    }
    Ok(value)
}

/// etcd's `--auto-compaction-retention` in periodic mode: a Go duration of hours, minutes or
/// seconds (`1h`, `30m`, `90s`), or a whole number of hours. At least a minute: less would compact
/// away what watchers still need.
fn retention(env: &Env) -> Result<String, Error> {
    let var = AUTO_COMPACTION_RETENTION;
    let raw = env.get(&var).unwrap_or_else(|| var.default.to_string());
    let v = raw.trim();
    let (digits, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
    let secs = digits.parse::<u64>().ok().and_then(|n| match unit {
        "" | "h" => n.checked_mul(3600),
        "m" => n.checked_mul(60),
        "s" => Some(n),
        _ => None,
    });
    match secs {
        Some(s) if (60..=366 * 86_400).contains(&s) => Ok(v.to_string()),
        _ => Err(bad(
            var.name,
            &raw,
            "must be a duration of at least a minute and at most a year: '1h', '30m', '90s' or whole hours",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let mut map: HashMap<String, String> = [
            ("ASG_NAME", "etcd"),
            ("LAUNCH_HOOK_NAME", "etcd-launch"),
            ("TERMINATE_HOOK_NAME", "etcd-terminate"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (k, v) in pairs {
            map.insert(k.to_string(), v.to_string());
        }
        move |k| map.get(k).cloned()
    }

    fn error_text(pairs: &[(&str, &str)]) -> String {
        Config::from_lookup(env(pairs)).unwrap_err().to_string()
    }

    #[test]
    fn adopt_endpoints_speak_the_scheme_of_the_stacks_members() {
        let adopt =
            |pairs: &[(&str, &str)]| Config::from_lookup(env(pairs)).map(|c| c.settings.adopt);
        let urls = "https://10.1.0.1:2379, https://10.1.0.2:2379";
        assert_eq!(
            adopt(&[("TLS", "managed"), ("ADOPT_ENDPOINTS", urls)]).unwrap(),
            ["https://10.1.0.1:2379", "https://10.1.0.2:2379"]
        );
        assert_eq!(
            adopt(&[("ADOPT_ENDPOINTS", "http://old-1:2379")]).unwrap(),
            ["http://old-1:2379"]
        );
        for (pairs, says) in [
            (
                &[("ADOPT_ENDPOINTS", urls)][..],
                "\"https://10.1.0.1:2379\" is not http",
            ),
            (
                &[
                    ("TLS", "managed"),
                    ("ADOPT_ENDPOINTS", "https://a:2379,http://b:2379"),
                ][..],
                "\"http://b:2379\" is not https",
            ),
            (
                &[("TLS", "managed"), ("ADOPT_ENDPOINTS", "https://a:port")][..],
                "is not a client URL",
            ),
            (
                &[("ADOPT_ENDPOINTS", "http://a:2379;rm -rf")][..],
                "is not a client URL",
            ),
        ] {
            let e = error_text(pairs);
            assert!(e.contains(says), "{says}: {e}");
        }
    }

    #[test]
    fn etcd_auth_follows_managed_tls_unless_turned_off() {
        let on =
            |pairs: &[(&str, &str)]| Config::from_lookup(env(pairs)).unwrap().settings.etcd_auth;
        assert!(!on(&[]));
        assert!(on(&[("TLS", "managed")]));
        assert!(!on(&[("TLS", "managed"), ("ETCD_AUTH", "off")]));
        // Set, or taken by default (blank is unset: the template passes its empty default so).
        let explicit = |pairs: &[(&str, &str)]| {
            let s = Config::from_lookup(env(pairs)).unwrap().settings;
            (s.etcd_auth, s.etcd_auth_explicit)
        };
        assert_eq!(explicit(&[("TLS", "managed")]), (true, false));
        assert_eq!(
            explicit(&[("TLS", "managed"), ("ETCD_AUTH", "")]),
            (true, false)
        );
        assert_eq!(
            explicit(&[("TLS", "managed"), ("ETCD_AUTH", "on")]),
            (true, true)
        );
        assert_eq!(
            explicit(&[("TLS", "managed"), ("ETCD_AUTH", "off")]),
            (false, false)
        );
        let e = error_text(&[("ETCD_AUTH", "on")]);
        assert!(e.contains("ETCD_AUTH") && e.contains("TLS=managed"), "{e}");
        let e = error_text(&[("TLS", "managed"), ("ETCD_AUTH", "yes")]);
        assert!(e.contains("\"yes\"") && e.contains("'on' or 'off'"), "{e}");
    }

    #[test]
    fn defaults_fill_everything_but_the_names() {
        let c = Config::from_lookup(env(&[])).unwrap();
        assert_eq!(c.parameter_prefix, "/etcd-asg-lifecycle/etcd");
        assert_eq!(c.settings.cluster_name, "etcd");
        assert_eq!(c.address_source, AddressSource::PrivateIp);
        assert_eq!(
            c.settings.topology.peer_url("10.0.0.7"),
            "http://10.0.0.7:2380"
        );
        assert_eq!(
            c.settings.topology.client_url("fd00::7"),
            "http://[fd00::7]:2379"
        );
        assert_eq!(c.tls, None);
    }

    #[test]
    fn tag_address_source_and_https() {
        let c = Config::from_lookup(env(&[
            ("ADDRESS_SOURCE", "tag:etcd-address"),
            ("ETCD_PEER_SCHEME", "https"),
            ("ETCD_CLIENT_PORT", "12379"),
            ("PARAMETER_PREFIX", "/prod/etcd/"),
        ]))
        .unwrap();
        assert_eq!(c.address_source, AddressSource::Tag("etcd-address".into()));
        assert_eq!(
            c.settings.topology.peer_url("127.0.0.2"),
            "https://127.0.0.2:2380"
        );
        assert_eq!(
            c.settings.topology.client_url("127.0.0.2"),
            "http://127.0.0.2:12379"
        );
        assert_eq!(c.parameter_prefix, "/prod/etcd");
    }

    #[test]
    fn the_docs_table_is_the_variables_with_their_defaults() {
        // docs/configuration.md holds the table `variables_table()` makes, between markers:
        // a default or a meaning changed here must change there (paste the table below).
        let docs = include_str!("../../docs/configuration.md");
        let table = variables_table();
        assert!(
            docs.contains(&format!("<!-- variables -->\n{table}<!-- /variables -->")),
            "docs/configuration.md's table is not the variables' (src/config/vars.rs); it \
             should read:\n{table}"
        );
    }

    #[test]
    fn every_default_parses() {
        // Every variable's default, written once, is what its section takes when it is unset.
        let c = Config::from_lookup(env(&[])).unwrap();
        assert_eq!(c.settings.learner_start_timeout_secs, 900);
        assert_eq!(c.settings.unhealthy_replace_secs, 300);
        assert_eq!(c.settings.topology.quota_backend_bytes, 2 << 30);
        assert_eq!(c.settings.topology.auto_compaction_retention, "1h");
        assert_eq!(c.settings.defrag_free_percent, 50);
        assert_eq!(c.settings.defrag_min_bytes, 100 << 20);
        assert_eq!(c.timing.etcd_timeout, Duration::from_millis(3000));
        assert_eq!(c.timing.wait_budget, Duration::from_secs(120));
        assert_eq!(c.timing.poll_interval, Duration::from_millis(2000));
        assert_eq!(c.timing.deadline_margin, Duration::from_millis(5000));
        let b = Config::from_lookup(env(&[("BACKUP_BUCKET", "b-1"), ("TLS", "managed")])).unwrap();
        let policy = b.settings.backup.unwrap();
        assert_eq!(
            (policy.interval_secs, policy.hourly_days, policy.daily_days),
            (900, 7, 90)
        );
        assert_eq!(policy.recovery, Recovery::Auto);
        assert_eq!(b.backup_store.unwrap().prefix, "etcd-asg-lifecycle/etcd");
        assert_eq!(b.pki.unwrap().member_cert_secs, 90 * 86_400);
        assert_eq!(b.settings.topology.metrics_port, Some(2381));
        for v in VARIABLES {
            assert!(!v.doc.is_empty() && !v.shown_default().is_empty(), "{v:?}");
        }
    }

    #[test]
    fn bad_values_are_reported_with_variable_and_value() {
        let e = error_text(&[("ETCD_PEER_PORT", "70000")]);
        assert!(e.contains("ETCD_PEER_PORT") && e.contains("70000"), "{e}");
        let e = error_text(&[("ADDRESS_SOURCE", "public-ip")]);
        assert!(
            e.contains("ADDRESS_SOURCE") && e.contains("public-ip"),
            "{e}"
        );
        let e = error_text(&[("PARAMETER_PREFIX", "etcd")]);
        assert!(
            e.contains("PARAMETER_PREFIX") && e.contains("\"etcd\""),
            "{e}"
        );
        let e = error_text(&[("ETCD_CLIENT_SCHEME", "ftp")]);
        assert!(e.contains("ETCD_CLIENT_SCHEME") && e.contains("ftp"), "{e}");
        let e = error_text(&[("ETCD_CA_FILE", "/ca.pem")]);
        assert!(e.contains("ETCD_CERT_FILE"), "{e}");
        let e = error_text(&[("CLUSTER_NAME", "a,b=c")]);
        assert!(e.contains("CLUSTER_NAME"), "{e}");
        let e = error_text(&[("TERMINATE_HOOK_NAME", "etcd-launch")]);
        assert!(e.contains("TERMINATE_HOOK_NAME"), "{e}");
        let e = error_text(&[("QUOTA_BACKEND_BYTES", "17179869184")]);
        assert!(
            e.contains("QUOTA_BACKEND_BYTES") && e.contains("17179869184"),
            "{e}"
        );
        let e = error_text(&[("AUTO_COMPACTION_RETENTION", "1 day")]);
        assert!(
            e.contains("AUTO_COMPACTION_RETENTION") && e.contains("1 day"),
            "{e}"
        );
        let e = error_text(&[("AUTO_COMPACTION_RETENTION", "10s")]);
        assert!(e.contains("AUTO_COMPACTION_RETENTION"), "{e}");
        let c = Config::from_lookup(env(&[("AUTO_COMPACTION_RETENTION", "30m")])).unwrap();
        assert_eq!(c.settings.topology.auto_compaction_retention, "30m");
        let e = Config::from_lookup(|_| None).unwrap_err().to_string();
        assert!(e.contains("ASG_NAME") && e.contains("required"), "{e}");
    }
}
