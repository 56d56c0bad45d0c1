//! All configuration, read once from the environment into one struct of sections, each parsing
//! its own variables (`vars.rs` lists them all, with their defaults and meaning). A bad value is
//! refused with the variable's name and the value.
//!
//! The sections, each in its room with its own parser: who the function works for (`names.rs`:
//! the group, its hooks, the cluster's name and parameter prefix, where addresses come from, a
//! cluster to adopt), how members reach each other (`topology.rs`), TLS (`tls.rs`: files given,
//! or the function's own CA), backups (`backup.rs`); how a variable is read and a bad value
//! refused (`env.rs`). Here, the whole (`Config::from_lookup`), the planner's share (`Settings`)
//! and the invocation's timing.

mod backup;
mod env;
mod names;
mod tls;
mod topology;
mod vars;

use std::time::Duration;

use crate::error::Error;
use env::{bad, Env};
use names::{adopt_endpoints, Names};
use vars::*;

pub use backup::{BackupPolicy, BackupStore, Recovery};
pub use env::Scheme;
pub use names::AddressSource;
pub use tls::{Pki, TlsFiles};
pub use topology::{Topology, MAX_QUOTA_BACKEND_BYTES};
pub use vars::{table as variables_table, Var, VARIABLES};

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
