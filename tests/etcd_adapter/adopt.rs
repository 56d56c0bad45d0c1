//! A cluster to adopt with authentication on: the function is its root with root's password
//! alone, and the adoption check says why otherwise.

use super::*;

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
