//! All configuration, read once from the environment into one struct.

use std::time::Duration;

use crate::error::Error;
use crate::model::{InitialState, MemberConfig};

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
            restore: None,
            client_cert_auth: self.mutual_tls,
            root_tokens: self.mutual_tls,
            metrics_url: self
                .metrics_port
                .map(|p| format!("http://{}:{p}", host(address))),
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
    /// Timeout of one etcd HTTP request.
    pub etcd_timeout: Duration,
    /// How long one invocation keeps waiting on slow steps (a learner booting, a promote not yet in
    /// sync) before it leaves the rest to the next event or schedule.
    pub wait_budget: Duration,
    pub poll_interval: Duration,
    /// Stop starting steps this long before the Lambda deadline.
    pub deadline_margin: Duration,
    /// Test-only failpoint (`FAILPOINT_CRASH_AFTER`): abort the process right after a step of
    /// this name succeeds, so tests can kill the function between two steps of one change.
    pub crash_after: Option<String>,
    /// The backup bucket; None: backups are off.
    pub backup_store: Option<BackupStore>,
}

/// The variables, for the README and for error messages.
pub const VARIABLES: &[(&str, &str)] = &[
    ("ASG_NAME", "required"),
    ("LAUNCH_HOOK_NAME", "required"),
    ("TERMINATE_HOOK_NAME", "required"),
    ("CLUSTER_NAME", "ASG_NAME"),
    ("PARAMETER_PREFIX", "/etcd-asg-lifecycle/<CLUSTER_NAME>"),
    ("ADDRESS_SOURCE", "private-ip"),
    ("ETCD_PEER_SCHEME", "http"),
    ("ETCD_PEER_PORT", "2380"),
    ("ETCD_CLIENT_SCHEME", "http"),
    ("ETCD_CLIENT_PORT", "2379"),
    ("TLS", "off"),
    ("MEMBER_CERT_DAYS", "90"),
    ("MEMBER_CERT_EXTRA_SANS", "unset"),
    ("MEMBER_CERT_SECS", "unset (tests only)"),
    ("PKI_KMS_KEY_ID", "unset (aws/ssm)"),
    ("ETCD_METRICS_PORT", "2381"),
    ("ETCD_AUTH", "on with TLS=managed"),
    ("ETCD_CA_FILE", "unset"),
    ("ETCD_CERT_FILE", "unset"),
    ("ETCD_KEY_FILE", "unset"),
    ("ETCD_REQUEST_TIMEOUT_MS", "3000"),
    ("LEARNER_START_TIMEOUT_SECS", "900"),
    ("UNHEALTHY_REPLACE_SECS", "300"),
    ("AUTO_COMPACTION_RETENTION", "1h"),
    ("QUOTA_BACKEND_BYTES", "2147483648"),
    ("DEFRAG_FREE_PERCENT", "50"),
    ("DEFRAG_MIN_BYTES", "104857600"),
    ("BACKUP_BUCKET", "unset (backups off)"),
    (
        "BACKUP_PREFIX",
        "<PARAMETER_PREFIX without the leading '/'>",
    ),
    ("BACKUP_INTERVAL_MINUTES", "15"),
    ("BACKUP_HOURLY_DAYS", "7"),
    ("BACKUP_DAILY_DAYS", "90"),
    ("RECOVERY", "auto"),
    ("WAIT_BUDGET_SECS", "120"),
    ("POLL_INTERVAL_MS", "2000"),
    ("DEADLINE_MARGIN_MS", "5000"),
    ("FAILPOINT_CRASH_AFTER", "unset (tests only)"),
];

impl Config {
    pub fn from_env() -> Result<Self, Error> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let required = |k: &str| get(k).ok_or_else(|| bad(k, "", "is required"));
        let group_name = name_value("ASG_NAME", required("ASG_NAME")?)?;
        let launch_hook = name_value("LAUNCH_HOOK_NAME", required("LAUNCH_HOOK_NAME")?)?;
        let terminate_hook = name_value("TERMINATE_HOOK_NAME", required("TERMINATE_HOOK_NAME")?)?;
        if launch_hook == terminate_hook {
            return Err(bad(
                "TERMINATE_HOOK_NAME",
                &terminate_hook,
                "must differ from LAUNCH_HOOK_NAME: a group's hook names are unique",
            ));
        }
        let cluster_name = match get("CLUSTER_NAME") {
            Some(v) => name_value("CLUSTER_NAME", v)?,
            None => group_name.clone(),
        };
        let parameter_prefix = get("PARAMETER_PREFIX")
            .unwrap_or_else(|| format!("/etcd-asg-lifecycle/{cluster_name}"));
        let parameter_prefix = parameter_prefix.trim_end_matches('/').to_string();
        if !parameter_prefix.starts_with('/')
            || parameter_prefix.len() < 2
            || !parameter_prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/_.-".contains(c))
        {
            return Err(bad(
                "PARAMETER_PREFIX",
                &parameter_prefix,
                "must be an SSM path: '/' then letters, digits, '/', '_', '.', '-'",
            ));
        }
        let address_source = match get("ADDRESS_SOURCE").as_deref() {
            None | Some("private-ip") => AddressSource::PrivateIp,
            Some(v) => match v.strip_prefix("tag:") {
                Some(tag) if !tag.is_empty() => AddressSource::Tag(tag.to_string()),
                _ => {
                    return Err(bad(
                        "ADDRESS_SOURCE",
                        v,
                        "must be 'private-ip' or 'tag:<tag key>'",
                    ))
                }
            },
        };
        let tls = match (
            get("ETCD_CA_FILE"),
            get("ETCD_CERT_FILE"),
            get("ETCD_KEY_FILE"),
        ) {
            (None, None, None) => None,
            (Some(ca), Some(cert), Some(key)) => Some(TlsFiles { ca, cert, key }),
            (ca, cert, _) => {
                let missing = if ca.is_none() {
                    "ETCD_CA_FILE"
                } else if cert.is_none() {
                    "ETCD_CERT_FILE"
                } else {
                    "ETCD_KEY_FILE"
                };
                return Err(bad(
                    missing,
                    "",
                    "is required when any of ETCD_CA_FILE, ETCD_CERT_FILE, ETCD_KEY_FILE is set",
                ));
            }
        };
        let backup_store = match get("BACKUP_BUCKET") {
            None => None,
            Some(bucket) => {
                let ok = (3..=63).contains(&bucket.len())
                    && bucket
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-".contains(c));
                if !ok {
                    return Err(bad(
                        "BACKUP_BUCKET",
                        &bucket,
                        "must be an S3 bucket name: 3-63 lowercase letters, digits, '.', '-'",
                    ));
                }
                let prefix = get("BACKUP_PREFIX")
                    .unwrap_or_else(|| parameter_prefix.clone())
                    .trim_matches('/')
                    .to_string();
                if prefix.is_empty()
                    || !prefix
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "/_.-".contains(c))
                {
                    return Err(bad(
                        "BACKUP_PREFIX",
                        &prefix,
                        "must be a key prefix of letters, digits, '/', '_', '.', '-'",
                    ));
                }
                Some(BackupStore { bucket, prefix })
            }
        };
        let backup = match &backup_store {
            None => None,
            Some(_) => Some(BackupPolicy {
                interval_secs: number(&get, "BACKUP_INTERVAL_MINUTES", 15, 1, 1440)? as i64 * 60,
                hourly_days: number(&get, "BACKUP_HOURLY_DAYS", 7, 1, 365)? as i64,
                daily_days: number(&get, "BACKUP_DAILY_DAYS", 90, 1, 3650)? as i64,
                recovery: match get("RECOVERY").as_deref() {
                    None | Some("auto") => Recovery::Auto,
                    Some("manual") => Recovery::Manual,
                    Some(v) => return Err(bad("RECOVERY", v, "must be 'auto' or 'manual'")),
                },
            }),
        };
        let pki = match get("TLS").as_deref() {
            None | Some("off") => None,
            Some("managed") => {
                if tls.is_some() {
                    return Err(bad(
                        "TLS",
                        "managed",
                        "issues the function's own certificate: leave ETCD_CA_FILE, \
                         ETCD_CERT_FILE and ETCD_KEY_FILE unset",
                    ));
                }
                for var in ["ETCD_PEER_SCHEME", "ETCD_CLIENT_SCHEME"] {
                    if let Some(v) = get(var).filter(|v| v != "https") {
                        return Err(bad(var, &v, "must be https (or unset) with TLS=managed"));
                    }
                }
                let extra_sans: Vec<String> = get("MEMBER_CERT_EXTRA_SANS")
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
                            "MEMBER_CERT_EXTRA_SANS",
                            n,
                            "must be IP addresses or DNS names, comma-separated",
                        ));
                    }
                }
                Some(Pki {
                    member_cert_secs: match get("MEMBER_CERT_SECS") {
                        Some(_) => number(&get, "MEMBER_CERT_SECS", 0, 60, 86_400)? as i64,
                        None => number(&get, "MEMBER_CERT_DAYS", 90, 1, 3650)? as i64 * 86_400,
                    },
                    extra_sans,
                    kms_key_id: get("PKI_KMS_KEY_ID"),
                })
            }
            Some(v) => return Err(bad("TLS", v, "must be 'managed' or 'off'")),
        };
        let (peer_scheme, client_scheme) = match pki {
            Some(_) => (Scheme::Https, Scheme::Https),
            None => (
                scheme(&get, "ETCD_PEER_SCHEME")?,
                scheme(&get, "ETCD_CLIENT_SCHEME")?,
            ),
        };
        let topology = Topology {
            peer_scheme,
            peer_port: number(&get, "ETCD_PEER_PORT", 2380, 1, 65535)? as u16,
            client_scheme,
            client_port: number(&get, "ETCD_CLIENT_PORT", 2379, 1, 65535)? as u16,
            mutual_tls: pki.is_some(),
            metrics_port: match pki {
                Some(_) => Some(number(&get, "ETCD_METRICS_PORT", 2381, 1, 65535)? as u16),
                None => None,
            },
            auto_compaction_retention: retention(&get)?,
            quota_backend_bytes: number(
                &get,
                "QUOTA_BACKEND_BYTES",
                2 << 30,
                16 << 20,
                MAX_QUOTA_BACKEND_BYTES,
            )?,
        };
        let member_cert_secs = pki.as_ref().map(|p| p.member_cert_secs);
        let etcd_auth =
            match (get("ETCD_AUTH").as_deref(), &pki) {
                (None | Some("on"), Some(_)) => true,
                (None | Some("off"), _) => false,
                (Some("on"), None) => return Err(bad(
                    "ETCD_AUTH",
                    "on",
                    "needs TLS=managed: the function signs its root tokens with the cluster's CA",
                )),
                (Some(v), _) => return Err(bad("ETCD_AUTH", v, "must be 'on' or 'off'")),
            };
        Ok(Self {
            group_name,
            launch_hook,
            terminate_hook,
            parameter_prefix,
            address_source,
            tls,
            pki,
            settings: Settings {
                topology,
                cluster_name,
                learner_start_timeout_secs: number(
                    &get,
                    "LEARNER_START_TIMEOUT_SECS",
                    900,
                    10,
                    86_400,
                )? as i64,
                unhealthy_replace_secs: number(&get, "UNHEALTHY_REPLACE_SECS", 300, 10, 86_400)?
                    as i64,
                backup,
                member_cert_secs,
                etcd_auth,
                defrag_free_percent: number(&get, "DEFRAG_FREE_PERCENT", 50, 10, 95)?,
                defrag_min_bytes: number(
                    &get,
                    "DEFRAG_MIN_BYTES",
                    100 << 20,
                    0,
                    MAX_QUOTA_BACKEND_BYTES,
                )?,
            },
            etcd_timeout: Duration::from_millis(number(
                &get,
                "ETCD_REQUEST_TIMEOUT_MS",
                3000,
                100,
                60_000,
            )?),
            wait_budget: Duration::from_secs(number(&get, "WAIT_BUDGET_SECS", 120, 0, 900)?),
            poll_interval: Duration::from_millis(number(
                &get,
                "POLL_INTERVAL_MS",
                2000,
                50,
                60_000,
            )?),
            deadline_margin: Duration::from_millis(number(
                &get,
                "DEADLINE_MARGIN_MS",
                5000,
                0,
                60_000,
            )?),
            crash_after: get("FAILPOINT_CRASH_AFTER"),
            backup_store,
        })
    }
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
fn retention(get: &impl Fn(&str) -> Option<String>) -> Result<String, Error> {
    let var = "AUTO_COMPACTION_RETENTION";
    let Some(raw) = get(var) else {
        return Ok("1h".into());
    };
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
            var,
            &raw,
            "must be a duration of at least a minute and at most a year: '1h', '30m', '90s' or whole hours",
        )),
    }
}

fn scheme(get: &impl Fn(&str) -> Option<String>, var: &str) -> Result<Scheme, Error> {
    match get(var).as_deref() {
        None | Some("http") => Ok(Scheme::Http),
        Some("https") => Ok(Scheme::Https),
        Some(v) => Err(bad(var, v, "must be 'http' or 'https'")),
    }
}

fn number(
    get: &impl Fn(&str) -> Option<String>,
    var: &str,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, Error> {
    let Some(raw) = get(var) else {
        return Ok(default);
    };
    match raw.trim().parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(bad(
            var,
            &raw,
            &format!("must be a whole number from {min} to {max}"),
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
    fn etcd_auth_follows_managed_tls_unless_turned_off() {
        let on =
            |pairs: &[(&str, &str)]| Config::from_lookup(env(pairs)).unwrap().settings.etcd_auth;
        assert!(!on(&[]));
        assert!(on(&[("TLS", "managed")]));
        assert!(!on(&[("TLS", "managed"), ("ETCD_AUTH", "off")]));
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
    fn the_readme_documents_every_variable() {
        let readme = include_str!("../README.md");
        for (var, _) in VARIABLES {
            assert!(readme.contains(&format!("`{var}`")), "README lacks {var}");
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
