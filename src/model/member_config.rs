//! Exactly what one instance's etcd starts with, as the env file it is published as (written and
//! read back), and what an address may be.

use std::collections::BTreeMap;

use super::backup::BackupRef;
use crate::versions::Version;

/// Whether `s` can stand as the host of an etcd URL: an IP address or a DNS name. Addresses can
/// come from instance tags, which anyone allowed to tag may set; whatever else a tag holds (a
/// comma, an `=`, a newline) would be spliced into initial-cluster and the published env file.
pub fn is_valid_address(s: &str) -> bool {
    if s.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum InitialState {
    New,
    Existing,
}

impl InitialState {
    fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Existing => "existing",
        }
    }
}

/// Exactly what one instance's etcd needs to start, published as an env file.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct MemberConfig {
    pub name: String,
    /// `name=peerURL` pairs, in member-id order so the text is stable across observations.
    pub initial_cluster: Vec<(String, String)>,
    pub state: InitialState,
    pub token: String,
    pub peer_url: String,
    pub client_url: String,
    pub auto_compaction_retention: String,
    pub quota_backend_bytes: u64,
    /// etcd's `--snapshot-count` (0: not set, a config of before it was).
    pub snapshot_count: u64,
    /// For the seed of a restored generation: the snapshot its boot script restores first.
    pub restore: Option<BackupRef>,
    /// Mutual TLS (TLS=managed): clients and peers must present a certificate of the cluster's
    /// CA. The boot script adds the files' paths (`<prefix>/tls/<instance>`, written 0600).
    pub client_cert_auth: bool,
    /// A plain-HTTP listener for `/health` and `/metrics` only (load balancer health checks).
    pub metrics_url: Option<String>,
    /// Published by a function that has the boot script point etcd at the CA's certificate for
    /// the function's root tokens (`ETCD_ASG_ROOT_TOKENS=jwt`, which the boot script keeps from
    /// etcd): authentication is turned on only once every voter's config says so, since a
    /// member of an older config rejects the tokens.
    pub root_tokens: bool,
    /// The etcd release the instance declared: etcd's corruption checks are named as that
    /// release names them, and the boot script refuses to start another release with this config
    /// (`ETCD_ASG_ETCD_VERSION`, which it keeps from etcd).
    pub etcd_version: Option<Version>,
}

impl MemberConfig {
    /// The env file an instance hands to etcd unchanged (etcd reads `ETCD_*` variables).
    pub fn to_env(&self) -> String {
        let cluster = self
            .initial_cluster
            .iter()
            .map(|(n, u)| format!("{n}={u}"))
            .collect::<Vec<_>>()
            .join(",");
        format!(
            "ETCD_NAME={}\nETCD_INITIAL_CLUSTER={}\nETCD_INITIAL_CLUSTER_STATE={}\n\
             ETCD_INITIAL_CLUSTER_TOKEN={}\nETCD_INITIAL_ADVERTISE_PEER_URLS={}\n\
             ETCD_ADVERTISE_CLIENT_URLS={}\nETCD_AUTO_COMPACTION_MODE=periodic\n\
             ETCD_AUTO_COMPACTION_RETENTION={}\nETCD_QUOTA_BACKEND_BYTES={}\n\
             ETCD_SNAPSHOT_COUNT={}\n",
            self.name,
            cluster,
            self.state.as_str(),
            self.token,
            self.peer_url,
            self.client_url,
            self.auto_compaction_retention,
            self.quota_backend_bytes,
            self.snapshot_count
        ) + if self.client_cert_auth {
            "ETCD_CLIENT_CERT_AUTH=true\nETCD_PEER_CLIENT_CERT_AUTH=true\n"
        } else {
            ""
        } + &self
            .metrics_url
            .as_ref()
            .map(|u| format!("ETCD_LISTEN_METRICS_URLS={u}\n"))
            .unwrap_or_default()
            + if self.root_tokens {
                "ETCD_ASG_ROOT_TOKENS=jwt\n"
            } else {
                ""
            }
            + &self
                .restore
                .as_ref()
                .map(|r| {
                    format!(
                        "ETCD_ASG_RESTORE_URL={}\nETCD_ASG_RESTORE_SHA256={}\n",
                        r.url, r.sha256
                    )
                })
                .unwrap_or_default()
            + &self
                .etcd_version
                .map(|v| format!("ETCD_ASG_ETCD_VERSION={v}\n{}", v.corruption_check_env()))
                .unwrap_or_default()
    }

    /// The host of its peer URL (`scheme://host:port`, an IPv6 host in brackets): the address
    /// it was published for. None if that is not an address (`is_valid_address`).
    pub fn address(&self) -> Option<String> {
        let rest = self.peer_url.split_once("://")?.1;
        let host = match rest.strip_prefix('[') {
            Some(v6) => v6.split_once(']')?.0,
            None => rest.rsplit_once(':').map_or(rest, |(h, _)| h),
        };
        is_valid_address(host).then(|| host.to_string())
    }

    pub fn parse_env(text: &str) -> Result<Self, String> {
        let mut vars = BTreeMap::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| format!("line {line:?} is not KEY=VALUE"))?;
            vars.insert(k, v);
        }
        let get = |k: &str| {
            vars.get(k)
                .map(|v| v.to_string())
                .ok_or_else(|| format!("{k} is missing"))
        };
        let initial_cluster = get("ETCD_INITIAL_CLUSTER")?
            .split(',')
            .map(|pair| {
                pair.split_once('=')
                    .map(|(n, u)| (n.to_string(), u.to_string()))
                    .ok_or_else(|| format!("initial-cluster entry {pair:?} is not name=url"))
            })
            .collect::<Result<_, _>>()?;
        let state = match get("ETCD_INITIAL_CLUSTER_STATE")?.as_str() {
            "new" => InitialState::New,
            "existing" => InitialState::Existing,
            other => {
                return Err(format!(
                    "ETCD_INITIAL_CLUSTER_STATE {other:?} is not new|existing"
                ))
            }
        };
        Ok(Self {
            name: get("ETCD_NAME")?,
            initial_cluster,
            state,
            token: get("ETCD_INITIAL_CLUSTER_TOKEN")?,
            peer_url: get("ETCD_INITIAL_ADVERTISE_PEER_URLS")?,
            client_url: get("ETCD_ADVERTISE_CLIENT_URLS")?,
            auto_compaction_retention: get("ETCD_AUTO_COMPACTION_RETENTION")?,
            quota_backend_bytes: get("ETCD_QUOTA_BACKEND_BYTES")?
                .parse()
                .map_err(|e| format!("ETCD_QUOTA_BACKEND_BYTES: {e}"))?,
            snapshot_count: match vars.get("ETCD_SNAPSHOT_COUNT") {
                Some(v) => v.parse().map_err(|e| format!("ETCD_SNAPSHOT_COUNT: {e}"))?,
                None => 0,
            },
            restore: match (
                vars.get("ETCD_ASG_RESTORE_URL"),
                vars.get("ETCD_ASG_RESTORE_SHA256"),
            ) {
                (Some(url), Some(sha256)) => Some(BackupRef {
                    key: url
                        .strip_prefix("s3://")
                        .and_then(|r| r.split_once('/'))
                        .map(|(_, k)| k.to_string())
                        .unwrap_or_default(),
                    url: url.to_string(),
                    sha256: sha256.to_string(),
                }),
                _ => None,
            },
            client_cert_auth: vars.get("ETCD_CLIENT_CERT_AUTH") == Some(&"true"),
            metrics_url: vars.get("ETCD_LISTEN_METRICS_URLS").map(|u| u.to_string()),
            root_tokens: vars.get("ETCD_ASG_ROOT_TOKENS") == Some(&"jwt"),
            etcd_version: vars
                .get("ETCD_ASG_ETCD_VERSION")
                .map(|v| v.parse())
                .transpose()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_config_env_round_trips() {
        let cfg = MemberConfig {
            name: "i-0abc".into(),
            initial_cluster: vec![
                ("i-0aaa".into(), "http://10.0.0.1:2380".into()),
                ("i-0abc".into(), "http://10.0.0.2:2380".into()),
            ],
            state: InitialState::Existing,
            token: "etcd-i-0aaa".into(),
            peer_url: "http://10.0.0.2:2380".into(),
            client_url: "http://10.0.0.2:2379".into(),
            auto_compaction_retention: "1h".into(),
            quota_backend_bytes: 2 << 30,
            snapshot_count: 10_000,
            restore: None,
            client_cert_auth: false,
            root_tokens: false,
            etcd_version: None,
            metrics_url: None,
        };
        let env = cfg.to_env();
        assert!(env.contains("ETCD_AUTO_COMPACTION_MODE=periodic\n"));
        assert!(env.contains("ETCD_QUOTA_BACKEND_BYTES=2147483648\n"));
        assert!(env.contains(
            "ETCD_INITIAL_CLUSTER=i-0aaa=http://10.0.0.1:2380,i-0abc=http://10.0.0.2:2380\n"
        ));
        assert!(env.contains("ETCD_INITIAL_CLUSTER_STATE=existing\n"));
        assert_eq!(MemberConfig::parse_env(&env).unwrap(), cfg);
        assert!(!env.contains("CERT") && !env.contains("METRICS"), "{env}");
        // With TLS managed: certificates demanded of clients and peers, a plain metrics listener.
        let tls = MemberConfig {
            client_cert_auth: true,
            root_tokens: true,
            etcd_version: None,
            metrics_url: Some("http://10.0.0.2:2381".into()),
            ..cfg
        };
        let env = tls.to_env();
        assert!(env.contains("ETCD_CLIENT_CERT_AUTH=true\nETCD_PEER_CLIENT_CERT_AUTH=true\n"));
        assert!(env.contains("ETCD_LISTEN_METRICS_URLS=http://10.0.0.2:2381\n"));
        assert!(env.contains("ETCD_ASG_ROOT_TOKENS=jwt\n"));
        assert_eq!(MemberConfig::parse_env(&env).unwrap(), tls);
    }

    #[test]
    fn member_config_parse_names_the_missing_variable() {
        let err = MemberConfig::parse_env("ETCD_NAME=x\n").unwrap_err();
        assert!(err.contains("ETCD_INITIAL_CLUSTER"), "{err}");
    }

    #[test]
    fn addresses_are_ips_or_host_names_and_nothing_else() {
        for ok in [
            "10.0.1.13",
            "127.0.9.1",
            "fd00::7",
            "ip-10-0-1-13.ec2.internal",
        ] {
            assert!(is_valid_address(ok), "{ok}");
        }
        let hostile = [
            "",
            "10.0.0.1\nETCD_DATA_DIR=/",
            "10.0.0.1,evil=http://10.9.9.9:2380",
            "a b",
            "-bad.example",
            "x..y",
            "http://10.0.0.1",
        ];
        for bad in hostile {
            assert!(!is_valid_address(bad), "{bad:?}");
        }
    }
}
