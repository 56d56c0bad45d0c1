//! The etcd adapter against a real etcd 3.4 cluster on loopback: the calls the reconciler makes,
//! and each refusal etcd answers, mapped to ours.

mod support;

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
        ClusterState::Known(v) => v,
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

#[tokio::test]
async fn membership_calls_against_a_real_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = EtcdMembers::new(Duration::from_secs(3), None).unwrap();
    let mut n1 = Etcd::new("n1", dir.path());
    let mut n2 = Etcd::new("n2", dir.path());
    let mut n3 = Etcd::new("n3", dir.path());
    n1.start(&format!("n1={}", n1.peer_url), "new");
    let c1 = n1.client_url.clone();

    // List: one started voter that leads and answers its status.
    let v = eventually("n1 to answer", 30, || async {
        match etcd.observe(std::slice::from_ref(&c1), None).await {
            ClusterState::Known(v) if v.leader.is_some() => Some(v),
            _ => None,
        }
    })
    .await;
    assert_eq!(v.members.len(), 1);
    let m1 = v.members[0].clone();
    assert_eq!(m1.name, "n1");
    assert!(!m1.is_learner && m1.is_started());
    assert_eq!(v.leader, Some(m1.id));
    assert!(v.healthy.contains(&m1.id));
    assert_eq!(v.endpoint, c1);
    assert_ne!(v.cluster_id, 0);

    // Add a learner: it is listed unstarted, with no name and no client URL.
    let id2 = etcd.add_learner(&c1, &n2.peer_url).await.unwrap();
    let v = observe(&etcd, &[&c1]).await;
    let l = v.member(id2).unwrap();
    assert!(l.is_learner && !l.is_started() && l.client_urls.is_empty());
    assert_eq!(l.peer_urls, vec![n2.peer_url.clone()]);

    // Refusals while it is unstarted.
    assert_eq!(
        refusal(etcd.add_learner(&c1, &n3.peer_url).await),
        Refusal::TooManyLearners
    );
    assert_eq!(
        refusal(etcd.add_learner(&c1, &n2.peer_url).await),
        Refusal::PeerUrlExists
    );
    assert_eq!(
        refusal(etcd.add_learner(&c1, &n1.peer_url).await),
        Refusal::PeerUrlExists
    );
    assert_eq!(
        refusal(etcd.promote(&c1, id2).await),
        Refusal::LearnerNotInSync
    );
    assert_eq!(
        refusal(etcd.add_learner(&c1, "not a url").await),
        Refusal::InvalidPeerUrls
    );

    // Remove the unstarted learner (always allowed), then again: not found.
    etcd.remove(&c1, id2).await.unwrap();
    assert_eq!(
        refusal(etcd.remove(&c1, id2).await),
        Refusal::MemberNotFound
    );

    // Join n2 and n3 for real: add, start, promote once in sync. etcd 3.4 derives a member id
    // from its peer URLs and the current second, so re-adding n2's URL in the second it was
    // removed would collide with the removed id ("member not found").
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let existing = format!("n1={}", n1.peer_url);
    let id2 = join(&etcd, &c1, &mut n2, &existing).await;
    // Promoting a voter is refused; etcd checks the member's progress before its role, so a
    // voter still catching up is "not in sync" rather than "not a learner".
    let again = refusal(etcd.promote(&c1, id2).await);
    assert!(
        matches!(again, Refusal::NotALearner | Refusal::LearnerNotInSync),
        "{again:?}"
    );
    let existing = format!("{existing},n2={}", n2.peer_url);
    let id3 = join(&etcd, &c1, &mut n3, &existing).await;
    let v = observe(&etcd, &[&c1]).await;
    assert_eq!(v.voters().count(), 3);
    assert_eq!(v.healthy.len(), 3);

    // n3 dies: removing a live voter would leave one connected voter of two: refused.
    n3.kill();
    let v = eventually("n3 to be seen unhealthy", 20, || async {
        let v = observe(&etcd, &[&c1]).await;
        (!v.healthy.contains(&id3)).then_some(v)
    })
    .await;
    assert_eq!(v.voters().count(), 3, "a dead member is still listed");
    assert_eq!(
        refusal(etcd.remove(&c1, id2).await),
        Refusal::UnhealthyCluster
    );
    // Removing the dead one is fine.
    etcd.remove(&c1, id3).await.unwrap();

    // Leadership moves when asked at the leader.
    let v = observe(&etcd, &[&c1]).await;
    let leader = v.leader.unwrap();
    let (from, to) = if leader == m1.id {
        (&n1.client_url, id2)
    } else {
        (&n2.client_url, m1.id)
    };
    etcd.transfer_leadership(from, to).await.unwrap();
    eventually("leadership to move", 10, || async {
        (observe(&etcd, &[&c1]).await.leader == Some(to)).then_some(())
    })
    .await;

    // An unstarted voter (which the planner never adds) makes etcd refuse to remove a started
    // one: the started voters left would be fewer than a quorum.
    let ghost_peer = format!("http://127.0.0.1:{}", support::free_port());
    let added: serde_json::Value = reqwest::Client::new()
        .post(format!("{c1}/v3/cluster/member/add"))
        .json(&serde_json::json!({"peerURLs": [ghost_peer]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ghost: u64 = added["member"]["ID"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        refusal(etcd.remove(&c1, id2).await),
        Refusal::NotEnoughStartedMembers
    );
    etcd.remove(&c1, MemberId(ghost)).await.unwrap();

    // A dead endpoint first in the list is skipped; only dead endpoints is Unreachable.
    let dead = "http://127.0.0.1:1".to_string();
    let v = observe(&etcd, &[&dead, &n2.client_url]).await;
    assert_eq!(v.voters().count(), 2);
    let fresh = EtcdMembers::new(Duration::from_millis(500), None).unwrap();
    match fresh.observe(std::slice::from_ref(&dead), None).await {
        ClusterState::Unreachable { detail, .. } => {
            assert!(detail.contains("127.0.0.1:1"), "{detail}")
        }
        ClusterState::Known(v) => panic!("{v:?}"),
    }
    // A member of another cluster (by the record's id) is never believed; of this one, it is.
    let endpoints = [n2.client_url.clone()];
    match fresh.observe(&endpoints, Some(v.cluster_id ^ 1)).await {
        ClusterState::Unreachable { detail, .. } => {
            assert!(detail.contains("not the record's"), "{detail}")
        }
        ClusterState::Known(v) => panic!("{v:?}"),
    }
    assert!(matches!(
        fresh.observe(&endpoints, Some(v.cluster_id)).await,
        ClusterState::Known(_)
    ));
}

#[tokio::test]
async fn a_member_the_function_cannot_reach_is_seen_connected_by_its_peers() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = EtcdMembers::new(Duration::from_secs(3), None).unwrap();
    let mut nodes: Vec<Etcd> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| Etcd::new(n, dir.path()))
        .collect();
    // n3 serves its peers, but the client URL it advertises leads nowhere: the function's probe
    // of it fails, as with a route or an ACL on the function's path only.
    // A port none of the three took: a free port probed before they bind can be one of theirs.
    let taken: Vec<&str> = nodes
        .iter()
        .flat_map(|n| [n.client_url.as_str(), n.peer_url.as_str()])
        .collect();
    nodes[2].advertised_client_url =
        std::iter::repeat_with(|| format!("http://127.0.0.1:{}", support::free_port()))
            .find(|u| !taken.contains(&u.as_str()))
            .unwrap();
    let initial: Vec<String> = nodes
        .iter()
        .map(|n| format!("{}={}", n.name, n.peer_url))
        .collect();
    for n in nodes.iter_mut() {
        n.start(&initial.join(","), "new");
    }
    let urls = [nodes[0].client_url.clone(), nodes[1].client_url.clone()];
    let v = eventually("n3 seen connected by its peers", 30, || async {
        match etcd.observe(&urls, None).await {
            ClusterState::Known(v) if v.members.iter().all(|m| m.is_started()) => {
                (!v.peer_connected.is_empty()).then_some(v)
            }
            _ => None,
        }
    })
    .await;
    let n3 = v.members.iter().find(|m| m.name == "n3").unwrap().id;
    assert!(!v.healthy.contains(&n3), "the function cannot reach it");
    assert_eq!(v.peer_connected, [n3].into_iter().collect());
    // Its etcd stops: its peers lose the connection, and it is down for everyone.
    nodes[2].kill();
    eventually("n3 gone for its peers too", 30, || async {
        match etcd.observe(&urls, None).await {
            ClusterState::Known(v) if !v.healthy.contains(&n3) && v.peer_connected.is_empty() => {
                Some(())
            }
            _ => None,
        }
    })
    .await;
    for n in nodes.iter_mut() {
        n.kill();
    }
}

#[tokio::test]
async fn survivors_are_asked_for_only_once_a_cluster_has_served() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = EtcdMembers::new(Duration::from_secs(2), None).unwrap();
    // Three members serve; two stop: the one left answers only for itself (no leader).
    let mut nodes: Vec<Etcd> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| Etcd::new(n, dir.path()))
        .collect();
    let initial: Vec<String> = nodes
        .iter()
        .map(|n| format!("{}={}", n.name, n.peer_url))
        .collect();
    for n in nodes.iter_mut() {
        n.start(&initial.join(","), "new");
    }
    let url = nodes[0].client_url.clone();
    let v = eventually("the cluster to serve", 30, || async {
        match etcd.observe(std::slice::from_ref(&url), None).await {
            ClusterState::Known(v) if v.healthy.len() == 3 => Some(v),
            _ => None,
        }
    })
    .await;
    nodes[1].kill();
    nodes[2].kill();
    // No record id (a bootstrap that never served): not asked.
    eventually("the quorum lost", 30, || async {
        match etcd.observe(std::slice::from_ref(&url), None).await {
            ClusterState::Unreachable { survivors, .. } => {
                assert!(survivors.is_empty(), "{survivors:?}");
                Some(())
            }
            _ => None,
        }
    })
    .await;
    // The record's cluster: the survivor answers for itself.
    match etcd
        .observe(std::slice::from_ref(&url), Some(v.cluster_id))
        .await
    {
        ClusterState::Unreachable { survivors, .. } => {
            assert_eq!(survivors.len(), 1);
            assert_eq!(survivors[0].name, "n1");
        }
        other => panic!("{other:?}"),
    }
    nodes[0].kill();
}

fn openssl(dir: &std::path::Path, args: &str) {
    let status = std::process::Command::new("openssl")
        .args(args.split_whitespace())
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl");
    assert!(status.success(), "openssl {args}");
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, all made here.
fn certificates(dir: &std::path::Path) {
    // etcd's JSON gateway dials etcd's own gRPC server with the server certificate as its client
    // certificate: without clientAuth it is refused ("incompatible key usage").
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    openssl(
        dir,
        "req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=test-ca",
    );
    for who in ["server", "client"] {
        openssl(
            dir,
            &format!(
                "req -newkey rsa:2048 -nodes -keyout {who}.key -out {who}.csr -subj /CN={who}"
            ),
        );
        openssl(dir, &format!(
            "x509 -req -in {who}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out {who}.pem -days 1 -extfile {who}.ext"
        ));
    }
}

#[tokio::test]
async fn client_certificates_when_etcd_requires_them() {
    use etcd_asg_lifecycle::adapters::etcd::ClientTls;
    use etcd_asg_lifecycle::config::TlsFiles;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certificates(d);
    let peer = format!("http://127.0.0.1:{}", support::free_port());
    let client = format!("https://127.0.0.1:{}", support::free_port());
    let path = |f: &str| d.join(f).to_str().unwrap().to_string();
    let mut cmd = std::process::Command::new(support::etcd_bin());
    // etcd reads every ETCD_* variable as a flag (ETCD_VERSION=3.4 would be --version).
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .args(["--name", "tls", "--data-dir", &path("data")])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .args(["--initial-cluster", &format!("tls={peer}")])
        .args([
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
        ])
        .args([
            "--cert-file",
            &path("server.pem"),
            "--key-file",
            &path("server.key"),
        ])
        .args(["--trusted-ca-file", &path("ca.pem"), "--client-cert-auth"]);
    let _etcd = support::Proc::spawn("etcd-tls", &mut cmd, &d.join("etcd.log"));

    let tls = TlsFiles {
        ca: path("ca.pem"),
        cert: path("client.pem"),
        key: path("client.key"),
    };
    let with_cert = EtcdMembers::new(
        Duration::from_secs(3),
        Some(&ClientTls::from_files(&tls).unwrap()),
    )
    .unwrap();
    let endpoints = [client.clone()];
    let v = eventually("etcd over TLS", 30, || async {
        match with_cert.observe(&endpoints, None).await {
            ClusterState::Known(v) if v.leader.is_some() => Some(v),
            _ => None,
        }
    })
    .await;
    assert_eq!(v.members.len(), 1);
    assert_eq!(v.members[0].client_urls, vec![client.clone()]);
    assert!(
        v.healthy.contains(&v.members[0].id),
        "the health probe speaks TLS too"
    );

    // Without our CA and certificate, etcd is out of reach: no guessing, no membership change.
    let plain = EtcdMembers::new(Duration::from_secs(3), None).unwrap();
    assert!(matches!(
        plain.observe(&endpoints, None).await,
        ClusterState::Unreachable { .. }
    ));

    // A missing file is a configuration error naming the variable and the path.
    let missing = TlsFiles {
        ca: path("nope.pem"),
        ..tls
    };
    let e = ClientTls::from_files(&missing).err().unwrap();
    let text = e.to_string();
    assert!(
        text.contains("ETCD_CA_FILE") && text.contains("nope.pem"),
        "{text}"
    );
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
            ClusterState::Known(v) if v.leader.is_some() => Some(v),
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

#[tokio::test]
async fn mutual_tls_with_the_certificates_the_function_issues() {
    use etcd_asg_lifecycle::adapters::etcd::own_identity;
    use etcd_asg_lifecycle::pki::Ca;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let now = now();
    let ca = Ca::generate("tls-test", now).unwrap();
    let ManagedMember {
        _etcd,
        peer,
        client,
        metrics,
    } = managed_member(d, &ca, now, Tokens::CaVerifies);

    let function = EtcdMembers::new(
        Duration::from_secs(3),
        Some(&own_identity(&ca, now).unwrap()),
    )
    .unwrap();
    let endpoints = [client.clone()];
    let v = serving(&function, &endpoints).await;
    assert_eq!(v.members[0].name, "i-0tls");
    assert_eq!(v.members[0].peer_urls, vec![peer.clone()]);
    assert!(v.healthy.contains(&v.members[0].id));

    let status = |c: reqwest::Client, url: String| async move {
        match c
            .post(format!("{url}/v3/maintenance/status"))
            .body("{}")
            .send()
            .await
        {
            Ok(r) => Some(r.status().as_u16()),
            Err(_) => None,
        }
    };
    let ca_root = reqwest::Certificate::from_pem(ca.cert_pem.as_bytes()).unwrap();
    // TLS without a client certificate: the handshake fails.
    let anonymous = reqwest::Client::builder()
        .add_root_certificate(ca_root.clone())
        .build()
        .unwrap();
    assert_eq!(status(anonymous, client.clone()).await, None);
    // A certificate of another CA: refused just the same.
    let stranger = Ca::generate("tls-test", now).unwrap();
    let theirs = stranger.issue_client("root", 3600, now, true).unwrap();
    let foreign = reqwest::Client::builder()
        .add_root_certificate(ca_root.clone())
        .identity(
            reqwest::Identity::from_pem(
                format!("{}{}", theirs.cert_pem, theirs.key_pem.expose()).as_bytes(),
            )
            .unwrap(),
        )
        .build()
        .unwrap();
    assert_eq!(status(foreign, client.clone()).await, None);
    // Plain HTTP on the client port: no answer from etcd's API.
    let plain = reqwest::Client::new();
    let answered = status(plain.clone(), client.replace("https://", "http://")).await;
    assert!(
        answered.is_none_or(|code| code != 200),
        "plain HTTP got {answered:?}"
    );
    // The metrics listener: health in plain HTTP, and nothing of the API.
    let health = plain.get(format!("{metrics}/health")).send().await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    assert_ne!(status(plain, metrics.clone()).await, Some(200));
}

/// etcdctl (gRPC: it takes the user from the certificate's common name) as etcd user `user`,
/// with a client certificate of `ca` written into `d`. Its output, or its error text.
fn etcdctl(
    d: &std::path::Path,
    ca: &etcd_asg_lifecycle::pki::Ca,
    user: &str,
    endpoint: &str,
    args: &[&str],
) -> Result<String, String> {
    let cert = ca.issue_client(user, 3600, now(), true).unwrap();
    let write = |name: String, text: &str| {
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let ca_file = write("ctl-ca.crt".into(), &ca.cert_pem);
    let cert_file = write(format!("{user}.crt"), &cert.cert_pem);
    let key_file = write(format!("{user}.key"), cert.key_pem.expose());
    let mut all = vec![
        "--cacert",
        ca_file.as_str(),
        "--cert",
        cert_file.as_str(),
        "--key",
        key_file.as_str(),
    ];
    all.extend_from_slice(args);
    etcdctl_plain(endpoint, &all)
}

/// etcd's authentication as the function runs it: turned on through the JSON gateway with root
/// tokens signed by the CA's key (members verify them with the CA's certificate); every call the
/// reconciler makes keeps working; a client certificate for a user of one prefix reaches that
/// prefix only, and is refused on every membership, snapshot, defragment and user call.
#[tokio::test]
async fn authentication_root_tokens_and_a_prefix_limited_client() {
    use etcd_asg_lifecycle::adapters::etcd::own_identity;
    use etcd_asg_lifecycle::pki::Ca;
    use etcd_asg_lifecycle::ports::PrefixGrant;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let now = now();
    let mut ca = Ca::generate("auth-test", now).unwrap();
    ca.token_key = Some(etcd_asg_lifecycle::pki::generate_token_key().unwrap());
    let m = managed_member(d, &ca, now, Tokens::TokenKey);
    let identity = own_identity(&ca, now).unwrap();
    let function = EtcdMembers::new(Duration::from_secs(3), Some(&identity))
        .unwrap()
        .with_root(ca.root_tokens().unwrap());
    let endpoints = [m.client.clone()];
    let v = serving(&function, &endpoints).await;
    assert!(!v.auth_enabled);

    function.enable_auth(&m.client).await.unwrap();
    // Again: each part finds itself done.
    function.enable_auth(&m.client).await.unwrap();
    let v = known(function.observe(&endpoints, None).await);
    assert!(v.auth_enabled, "the probe sees authentication on");
    assert!(v.healthy.contains(&v.members[0].id));

    // Root's keys, written with a root certificate over gRPC (common-name authentication).
    etcdctl(d, &ca, "root", &m.client, &["put", "/app/config", "1"]).unwrap();
    etcdctl(d, &ca, "root", &m.client, &["put", "/other/secret", "2"]).unwrap();
    for (user, read_only) in [("app", false), ("reader", true)] {
        let grant = PrefixGrant {
            user: user.into(),
            prefix: "/app/".into(),
            read_only,
            password: None,
        };
        function.grant_prefix(&m.client, &grant).await.unwrap();
        // Granting again changes nothing and fails nothing.
        function.grant_prefix(&m.client, &grant).await.unwrap();
    }

    let app = |args: &[&str]| etcdctl(d, &ca, "app", &m.client, args);
    assert_eq!(
        app(&["get", "/app/config", "--print-value-only"]).unwrap(),
        "1"
    );
    app(&["put", "/app/new", "x"]).unwrap();
    let reader = |args: &[&str]| etcdctl(d, &ca, "reader", &m.client, args);
    assert_eq!(
        reader(&["get", "/app/new", "--print-value-only"]).unwrap(),
        "x"
    );
    let denied = |r: Result<String, String>, what: &str| {
        let e = r.expect_err(what);
        assert!(e.contains("permission denied"), "{what}: {e}");
    };
    denied(reader(&["put", "/app/new", "y"]), "a read-only user writes");
    denied(app(&["get", "/other/secret"]), "a read outside the prefix");
    denied(
        app(&["put", "/other/secret", "3"]),
        "a write outside the prefix",
    );
    denied(app(&["get", "", "--from-key"]), "a read of everything");
    // Membership, maintenance and access control: root's alone.
    let id = format!("{:x}", v.members[0].id.0);
    let peer = "https://127.0.0.1:1";
    for (args, what) in [
        (
            vec!["member", "add", "x", "--peer-urls", peer, "--learner"],
            "member add",
        ),
        (vec!["member", "remove", &id], "member remove"),
        (vec!["member", "promote", &id], "member promote"),
        (
            vec!["member", "update", &id, "--peer-urls", &m.peer],
            "member update",
        ),
        (vec!["defrag"], "defragment"),
        (vec!["endpoint", "hashkv"], "hash"),
        (vec!["user", "add", "eve", "--no-password"], "user add"),
        (
            vec!["role", "grant-permission", "app", "readwrite", "/"],
            "role grant",
        ),
        (vec!["auth", "disable"], "auth disable"),
    ] {
        denied(app(&args), what);
    }
    let snapshot = d.join("stolen.db");
    denied(
        app(&["snapshot", "save", snapshot.to_str().unwrap()]),
        "snapshot",
    );
    assert!(!snapshot.exists() || std::fs::metadata(&snapshot).unwrap().len() == 0);
    // The JSON gateway refuses any certificate with a common name once authentication is on:
    // it cannot act as that user.
    let app_cert = ca.issue_client("app", 3600, now, true).unwrap();
    let gateway = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.cert_pem.as_bytes()).unwrap())
        .identity(
            reqwest::Identity::from_pem(
                format!("{}{}", app_cert.cert_pem, app_cert.key_pem.expose()).as_bytes(),
            )
            .unwrap(),
        )
        .build()
        .unwrap();
    let r = gateway
        .post(format!("{}/v3/kv/range", m.client))
        .body(r#"{"key":"L290aGVyL3NlY3JldA=="}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let body = r.text().await.unwrap();
    assert!(body.contains("CommonName of client"), "{body}");

    // Everything the reconciler does still works as root, through the gateway.
    let learner = function
        .add_learner(&m.client, "https://127.0.0.1:2")
        .await
        .unwrap();
    function.remove(&m.client, learner).await.unwrap();
    let revision = v.statuses.values().next().unwrap().revision + 2;
    function.compact(&m.client, revision).await.unwrap();
    function.defragment(&m.client).await.unwrap();
    let mut snapshot = function.snapshot(&m.client).await.unwrap();
    let mut bytes = 0;
    while let Some(chunk) = snapshot.next_chunk().await.unwrap() {
        bytes += chunk.len();
    }
    assert!(bytes > 0);
    // Without the root tokens the same certificate changes nothing.
    let tokenless = EtcdMembers::new(Duration::from_secs(3), Some(&identity)).unwrap();
    let e = tokenless
        .add_learner(&m.client, "https://127.0.0.1:3")
        .await
        .unwrap_err();
    assert_eq!(e.refusal(), Some(Refusal::UserEmpty), "{e}");

    // A lease expires and takes its key: the leader revokes it as root with a token it signs
    // with the token key (a verify-only member cannot: etcd-io/etcd#14616).
    let granted = etcdctl(d, &ca, "root", &m.client, &["lease", "grant", "2"]).unwrap();
    let lease = granted.split_whitespace().nth(1).unwrap().to_string();
    etcdctl(
        d,
        &ca,
        "root",
        &m.client,
        &["put", "--lease", &lease, "/app/leased", "x"],
    )
    .unwrap();
    eventually("the leased key gone with its lease", 15, || async {
        let got = etcdctl(d, &ca, "root", &m.client, &["get", "/app/leased"]).unwrap();
        got.is_empty().then_some(())
    })
    .await;
}

/// A member of a bundle from before the token key verifies only tokens signed with the CA's key:
/// the function, holding both, is refused the first and uses the second there, and remembers.
#[tokio::test]
async fn a_member_of_a_bundle_before_the_token_key_takes_the_ca_signed_tokens() {
    use etcd_asg_lifecycle::pki::Ca;
    let dir = tempfile::tempdir().unwrap();
    let now = now();
    let mut ca = Ca::generate("older-bundle", now).unwrap();
    let m = managed_member(dir.path(), &ca, now, Tokens::CaVerifies);
    ca.token_key = Some(etcd_asg_lifecycle::pki::generate_token_key().unwrap());
    let function = EtcdMembers::managed(Duration::from_secs(3), &ca).unwrap();
    let endpoints = [m.client.clone()];
    serving(&function, &endpoints).await;
    function.enable_auth(&m.client).await.unwrap();
    let v = known(function.observe(&endpoints, None).await);
    assert!(v.auth_enabled);
    assert!(
        v.healthy.contains(&v.members[0].id),
        "its status probe is answered"
    );
    let learner = function
        .add_learner(&m.client, "https://127.0.0.1:2")
        .await
        .unwrap();
    function.remove(&m.client, learner).await.unwrap();
    let mut snapshot = function.snapshot(&m.client).await.unwrap();
    assert!(snapshot.next_chunk().await.unwrap().is_some());
    // A process that has learned nothing yet (a survivor's snapshot at a cold start) streams
    // from it too: the snapshot, one request, first finds the key it takes.
    let cold = EtcdMembers::managed(Duration::from_secs(3), &ca).unwrap();
    let mut snapshot = cold.snapshot(&m.client).await.unwrap();
    let mut bytes = 0;
    while let Some(chunk) = snapshot.next_chunk().await.unwrap() {
        bytes += chunk.len();
    }
    assert!(bytes > 0);
}

/// A warm environment outlives the function's one-day certificate: the adapter issues itself a
/// fresh one at half its life instead of losing etcd.
#[tokio::test]
async fn the_functions_certificate_is_issued_again_before_it_ends() {
    use etcd_asg_lifecycle::adapters::etcd::own_identity;
    use etcd_asg_lifecycle::pki::Ca;
    let dir = tempfile::tempdir().unwrap();
    let now = now();
    let ca = Ca::generate("renewal-test", now - 3 * 86_400).unwrap();
    // A member of a config from before root tokens: with authentication off the function sends
    // none (such a member would refuse them), and works on.
    let m = managed_member(dir.path(), &ca, now, Tokens::None);
    let endpoints = [m.client.clone()];
    let fresh = EtcdMembers::managed(Duration::from_secs(3), &ca).unwrap();
    serving(&fresh, &endpoints).await;
    // Issued two days ago and never again: etcd refuses the expired certificate.
    let stale = own_identity(&ca, now - 2 * 86_400).unwrap();
    let kept = EtcdMembers::new(Duration::from_secs(3), Some(&stale)).unwrap();
    assert!(matches!(
        kept.observe(&endpoints, None).await,
        ClusterState::Unreachable { .. }
    ));
    // The same start, renewing: the first call finds it due and issues a fresh one.
    let renewing =
        EtcdMembers::managed_since(Duration::from_secs(3), &ca, now - 2 * 86_400).unwrap();
    let v = known(renewing.observe(&endpoints, None).await);
    assert!(v.leader.is_some() && !v.auth_enabled);
    let learner = renewing
        .add_learner(&m.client, "https://127.0.0.1:2")
        .await
        .unwrap();
    renewing.remove(&m.client, learner).await.unwrap();
}

/// A gateway in front of one member that behaves as etcd 3.6.0-3.6.8 do with authentication on
/// (https://github.com/etcd-io/etcd/blob/v3.6.0/CHANGELOG/CHANGELOG-3.6.md, #14663; MemberList
/// needs a user only from 3.6.9): Status without a token is refused for naming no user (the
/// grpc-gateway v2 error of 3.6), everything else is passed to the member as it came. One request
/// per connection (the forwarded one says `Connection: close`). Returns its URL.
fn gateway_refusing_status_without_a_token(member: &str) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let upstream = member.trim_start_matches("http://").to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let upstream = upstream.clone();
            std::thread::spawn(move || {
                let mut request = Vec::new();
                let mut buf = [0u8; 8192];
                let head_end = loop {
                    let Ok(n) = conn.read(&mut buf) else { return };
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    if let Some(p) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                        break p + 4;
                    }
                };
                let head = String::from_utf8_lossy(&request[..head_end]).to_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap_or(0));
                while request.len() < head_end + length {
                    let Ok(n) = conn.read(&mut buf) else { return };
                    if n == 0 {
                        break;
                    }
                    request.extend_from_slice(&buf[..n]);
                }
                let status = head.starts_with("post /v3/maintenance/status ");
                let token = head.lines().any(|l| l.starts_with("authorization:"));
                if status && !token {
                    let body =
                        r#"{"code":3,"message":"etcdserver: user name is empty","details":[]}"#;
                    let _ = write!(
                        conn,
                        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    return;
                }
                // Forwarded with `Connection: close`, so that the answer ends with the stream.
                let text = String::from_utf8_lossy(&request[..head_end]).to_string();
                let mut lines: Vec<&str> = text
                    .split("\r\n")
                    .filter(|l| !l.to_lowercase().starts_with("connection:"))
                    .collect();
                lines.retain(|l| !l.is_empty());
                let mut forwarded = lines.join("\r\n").into_bytes();
                forwarded.extend_from_slice(b"\r\nConnection: close\r\n\r\n");
                forwarded.extend_from_slice(&request[head_end..]);
                let Ok(mut up) = std::net::TcpStream::connect(&upstream) else {
                    return;
                };
                let mut answer = Vec::new();
                if up.write_all(&forwarded).is_ok() && up.read_to_end(&mut answer).is_ok() {
                    let _ = conn.write_all(&answer);
                }
            });
        }
    });
    url
}

/// The 3.6.0-3.6.8 case: a function that has not yet seen authentication on (a fresh
/// environment) lists members without a token, which those releases answer, then probes each
/// member's status, which they refuse without one. Every probe refused would read as no leader,
/// the cluster as unreachable; the probe asks again with root's token instead.
#[tokio::test]
async fn status_refused_without_a_token_while_member_list_answers_is_asked_again_as_root() {
    let dir = tempfile::tempdir().unwrap();
    let now = now();
    let mut ca = etcd_asg_lifecycle::pki::Ca::generate("gateway-36", now).unwrap();
    ca.token_key = Some(etcd_asg_lifecycle::pki::generate_token_key().unwrap());
    let mut n1 = Etcd::new("n1", dir.path());
    let gateway = gateway_refusing_status_without_a_token(&n1.client_url);
    n1.advertised_client_url = gateway.clone();
    n1.start(&format!("n1={}", n1.peer_url), "new");
    let function = EtcdMembers::new(Duration::from_secs(3), None)
        .unwrap()
        .with_root(ca.root_tokens().unwrap());
    let v = eventually(
        "the member seen through the 3.6.0-3.6.8 gateway",
        30,
        || async {
            match function.observe(std::slice::from_ref(&gateway), None).await {
                ClusterState::Known(v) if v.leader.is_some() => Some(v),
                _ => None,
            }
        },
    )
    .await;
    assert_eq!(v.members.len(), 1);
    assert!(v.healthy.contains(&v.members[0].id), "{v:?}");
    let version = v.statuses[&v.members[0].id].version.clone();
    assert!(version.starts_with("3."), "{version}");
    // Without root's tokens the same member is never seen healthy: the refusal is real.
    let plain = EtcdMembers::new(Duration::from_secs(3), None).unwrap();
    match plain.observe(std::slice::from_ref(&gateway), None).await {
        ClusterState::Known(v) => assert!(v.healthy.is_empty() && v.leader.is_none(), "{v:?}"),
        ClusterState::Unreachable { .. } => {}
    }
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

/// Why the function is not root of a cluster to adopt: the adoption check's refusal, or the
/// observation's (etcd 3.6.9+ refuses even the member list without a user).
async fn not_root(etcd: &EtcdMembers, url: &str) -> String {
    match etcd.observe(&[url.to_string()], None).await {
        ClusterState::Known(v) => {
            assert!(v.auth_enabled);
            v.root_refused.expect("the function is not root")
        }
        ClusterState::Unreachable { detail, .. } => detail,
    }
}

/// A cluster to adopt with authentication on (ADOPT_ENDPOINTS, docs/adopting.md): the function
/// is its root only with root's password, logging in at the member (etcd's Authenticate), and
/// then every call works; without it, or with a wrong one, the adoption check says why.
#[tokio::test]
async fn a_cluster_to_adopt_with_authentication_on_is_ours_with_roots_password_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Etcd::new("old-1", dir.path());
    node.start(&format!("old-1={}", node.peer_url), "new");
    let url = node.client_url.clone();
    eventually("etcd to answer", 30, || async {
        etcdctl_plain(&url, &["put", "/old/key", "kept"]).ok()
    })
    .await;
    for args in [
        &["user", "add", "root", "--new-user-password", "old-secret"][..],
        &["auth", "enable"][..],
    ] {
        etcdctl_plain(&url, args).unwrap();
    }
    let without = EtcdMembers::new(Duration::from_secs(2), None).unwrap();
    let why = not_root(&without, &url).await;
    assert!(why.contains("UserEmpty"), "{why}");
    let wrong = EtcdMembers::new(Duration::from_secs(2), None).unwrap();
    let adopted = [url.clone()];
    wrong.use_root_password(
        etcd_asg_lifecycle::pki::Password::given("guess".into()),
        &adopted,
    );
    let why = not_root(&wrong, &url).await;
    assert!(why.contains("refused root's password"), "{why}");
    assert!(!why.contains("guess"), "{why}");
    // Corrected: the same client logs in again with the new password.
    let function = wrong;
    function.use_root_password(
        etcd_asg_lifecycle::pki::Password::given("old-secret".into()),
        &adopted,
    );
    let v = observe(&function, &[&url]).await;
    assert!(v.auth_enabled && v.root_refused.is_none(), "{v:?}");
    assert_eq!(v.healthy.len(), 1);
    // Root's work: a learner added and removed, the alarms listed.
    let extra = Etcd::new("extra", dir.path());
    let id = function.add_learner(&url, &extra.peer_url).await.unwrap();
    assert!(observe(&function, &[&url]).await.member(id).is_some());
    function.remove(&url, id).await.unwrap();
    assert!(observe(&function, &[&url]).await.member(id).is_none());
    node.kill();
}
