//! How etcd members reach each other and clients reach them, and the storage settings every
//! member starts with: what turns an instance address into a member config.

use super::env::{bad, Env, Scheme};
use super::vars::*;
use crate::error::Error;
use crate::model::{InitialState, MemberConfig};

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

impl Topology {
    /// `managed`: TLS=managed, which makes every URL https and adds the metrics listener.
    pub(super) fn parse(env: &Env, managed: bool) -> Result<Self, Error> {
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
