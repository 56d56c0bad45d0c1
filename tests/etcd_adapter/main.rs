//! The etcd adapter against a real etcd 3.4 cluster on loopback: the calls the reconciler makes,
//! and each refusal etcd answers, mapped to ours.
//!
//! One file per concern: membership, health and survivors (`membership.rs`); TLS, with files
//! given or the certificates the function issues (`tls.rs`); etcd's authentication with root
//! tokens, and releases that refuse a status without one (`auth.rs`); a cluster to adopt with
//! authentication on (`adopt.rs`). Here, what they share: polling, observing and joining, a
//! member under TLS=managed, etcdctl.

#[path = "../support/mod.rs"]
mod support;

mod adopt;
mod auth;
mod membership;
mod tls;

use std::time::Duration;

use etcd_asg_lifecycle::adapters::etcd::EtcdMembers;
use etcd_asg_lifecycle::error::Refusal;
use etcd_asg_lifecycle::model::{ClusterState, ClusterView, MemberId};
use etcd_asg_lifecycle::ports::Members;
use support::Etcd;

/// Polls `f` until it yields, for at most `secs` seconds.
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    secs: u64,
    mut f: impl FnMut() -> F,
) -> T {
    for _ in 0..secs * 5 {
        if let Some(v) = f().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("timed out waiting for {what}");
}

fn known(state: ClusterState) -> ClusterView {
    match state {
        ClusterState::Known(v) => *v,
        ClusterState::Unreachable { detail, .. } => panic!("unreachable: {detail}"),
    }
}

fn refusal<T: std::fmt::Debug>(r: Result<T, etcd_asg_lifecycle::Error>) -> Refusal {
    let e = r.expect_err("etcd should have refused");
    e.refusal()
        .unwrap_or_else(|| panic!("not a refusal: {e:?}"))
}

async fn observe(etcd: &EtcdMembers, endpoints: &[&str]) -> ClusterView {
    let endpoints: Vec<String> = endpoints.iter().map(|s| s.to_string()).collect();
    known(etcd.observe(&endpoints, None).await)
}

/// Waits for a member's process to join (it gets a name), then promotes it, retrying while etcd
/// says it is not in sync, as the reconciler does.
async fn join(etcd: &EtcdMembers, via: &str, node: &mut Etcd, existing: &str) -> MemberId {
    // Right after a promote etcd refuses adds until every voter has been connected for 5 s.
    let id = eventually("the cluster to take an add", 15, || async {
        match etcd.add_learner(via, &node.peer_url).await {
            Ok(id) => Some(id),
            Err(e) if e.refusal() == Some(Refusal::UnhealthyCluster) => None,
            Err(e) => panic!("{e:?}"),
        }
    })
    .await;
    node.start(
        &format!("{existing},{}={}", node.name, node.peer_url),
        "existing",
    );
    for _ in 0..100 {
        let v = observe(etcd, &[via]).await;
        if v.member(id).is_some_and(|m| m.is_started()) {
            match etcd.promote(via, id).await {
                Ok(()) => return id,
                Err(e) => assert_eq!(e.refusal(), Some(Refusal::LearnerNotInSync), "{e:?}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{} never joined", node.name);
}

/// TLS=managed against a real etcd: a member certificate the function's CA issued (client and
/// peer TLS, client certificates required), the function's own certificate, and every client
/// without one of the CA's certificates refused. The plain metrics listener serves health only.
/// A one-member cluster configured as a published config and the boot script have it under
/// TLS=managed, with a certificate from `ca`, files in `d`.
struct ManagedMember {
    _etcd: support::Proc,
    peer: String,
    client: String,
    metrics: String,
}

/// How a member takes etcd's tokens, as the boot script sets it up.
#[derive(Clone, Copy, PartialEq)]
enum Tokens {
    /// A config from before root tokens: etcd's default (simple tokens).
    None,
    /// A bundle from before the token key: verify-only, with the CA's certificate.
    CaVerifies,
    /// Today's bundle: the cluster's token key, which signs and verifies.
    TokenKey,
}

fn managed_member(
    d: &std::path::Path,
    ca: &etcd_asg_lifecycle::pki::Ca,
    now: i64,
    tokens: Tokens,
) -> ManagedMember {
    let member = ca
        .issue_member("i-0tls", "127.0.0.1", &[], 90 * 86_400, now)
        .unwrap();
    let write = |name: &str, text: &str| {
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let (ca_file, cert_file, key_file) = (
        write("ca.crt", &ca.cert_pem),
        write("member.crt", &member.cert_pem),
        write("member.key", member.key_pem.expose()),
    );
    let peer = format!("https://127.0.0.1:{}", support::free_port());
    let client = format!("https://127.0.0.1:{}", support::free_port());
    let metrics = format!("http://127.0.0.1:{}", support::free_port());
    let mut cmd = std::process::Command::new(support::etcd_bin());
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("ETCD_NAME", "i-0tls")
        .env("ETCD_DATA_DIR", d.join("data"))
        .env("ETCD_LISTEN_PEER_URLS", &peer)
        .env("ETCD_INITIAL_ADVERTISE_PEER_URLS", &peer)
        .env("ETCD_INITIAL_CLUSTER", format!("i-0tls={peer}"))
        .env("ETCD_LISTEN_CLIENT_URLS", &client)
        .env("ETCD_ADVERTISE_CLIENT_URLS", &client)
        .env("ETCD_LISTEN_METRICS_URLS", &metrics)
        .env("ETCD_CERT_FILE", &cert_file)
        .env("ETCD_KEY_FILE", &key_file)
        .env("ETCD_TRUSTED_CA_FILE", &ca_file)
        .env("ETCD_CLIENT_CERT_AUTH", "true")
        .env("ETCD_PEER_CERT_FILE", &cert_file)
        .env("ETCD_PEER_KEY_FILE", &key_file)
        .env("ETCD_PEER_TRUSTED_CA_FILE", &ca_file)
        .env("ETCD_PEER_CLIENT_CERT_AUTH", "true");
    match tokens {
        Tokens::None => {}
        Tokens::CaVerifies => {
            cmd.env(
                "ETCD_AUTH_TOKEN",
                format!("jwt,pub-key={ca_file},sign-method=ES256"),
            );
        }
        Tokens::TokenKey => {
            let key = ca.token_key.as_ref().expect("a CA with a token key");
            let key_file = write("token.key", key.expose());
            cmd.env(
                "ETCD_AUTH_TOKEN",
                format!("jwt,priv-key={key_file},sign-method=ES256"),
            );
        }
    }
    let etcd = support::Proc::spawn("etcd-managed-tls", &mut cmd, &d.join("etcd.log"));
    ManagedMember {
        _etcd: etcd,
        peer,
        client,
        metrics,
    }
}

/// The view once the member at `endpoints` serves over mutual TLS (it knows a leader).
async fn serving(members: &EtcdMembers, endpoints: &[String]) -> ClusterView {
    eventually("etcd over mutual TLS", 30, || async {
        match members.observe(endpoints, None).await {
            ClusterState::Known(v) if v.leader.is_some() => Some(*v),
            _ => None,
        }
    })
    .await
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// etcdctl with `args` (a `--user` among them where needed, certificates for TLS). Its output,
/// or its error text.
fn etcdctl_plain(endpoint: &str, args: &[&str]) -> Result<String, String> {
    let bin = std::path::Path::new(&support::etcd_bin()).with_file_name("etcdctl");
    let out = std::process::Command::new(bin)
        .env_clear()
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", endpoint, "--dial-timeout", "3s"])
        .args(["--command-timeout", "5s"])
        .args(args)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(format!("{} {}", text(&out.stdout), text(&out.stderr)))
    }
}
