//! TLS against a real etcd: client certificates from files when etcd requires them, mutual TLS
//! with the certificates the function's CA issues, and the function's own certificate issued
//! again before it ends.

use super::*;

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
