//! etcd's authentication as the function runs it: root tokens, a prefix-limited client, members
//! of bundles from before the token key, and releases (3.6.0-3.6.8) that refuse a status without
//! a token.

use super::*;

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
