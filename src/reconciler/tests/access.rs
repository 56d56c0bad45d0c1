//! Certificates and authentication: a config published again keeps the member's certificate,
//! and etcd's authentication is turned on once the cluster serves, once.

use super::*;

#[tokio::test]
async fn a_config_published_again_keeps_the_members_certificate() {
    let world = Fake::default();
    let mut r = reconciler_with(&world, &[("TLS", "managed")]);
    let ca = crate::pki::Ca::generate("etcd", 1000).unwrap();
    r.ca = ca.clone().into();
    world.launch(1);
    for _ in 0..10 {
        r.handle(&schedule(), far()).await.unwrap();
        world.boot();
        world.world().now += 5;
    }
    assert!(world.world().tls.contains_key("i-00000001"));
    // An invocation handed out 2's bundle and died before publishing its config: the next
    // one publishes the config and keeps that bundle rather than issuing another.
    world.launch(2);
    let earlier = ca
        .issue_member("i-00000002", "10.0.0.2", &[], 3600, 1000)
        .unwrap();
    {
        let mut w = world.world();
        w.tls.insert("i-00000002".into(), earlier.bundle(&ca));
        w.cert_not_after
            .insert("i-00000002".into(), earlier.not_after);
    }
    let bundle = world.world().tls.get("i-00000002").cloned();
    for _ in 0..10 {
        r.handle(&schedule(), far()).await.unwrap();
        world.boot();
        world.world().now += 5;
    }
    assert!(world.world().configs.contains_key("i-00000002"));
    let calls = world.calls();
    assert!(
        !calls.iter().any(|c| c == "hand-out i-00000002"),
        "no second certificate: {calls:#?}"
    );
    assert_eq!(world.world().tls.get("i-00000002").cloned(), bundle);
}

#[tokio::test]
async fn auth_is_turned_on_once_the_cluster_serves_and_only_once() {
    let world = three_member_cluster().await;
    let mut r = reconciler(&world);
    r.handle(&schedule(), far()).await.unwrap();
    assert!(!world.world().auth_enabled, "ETCD_AUTH off: left alone");
    r.config.settings.etcd_auth = true;
    r.handle(&schedule(), far()).await.unwrap();
    assert!(
        !world.world().auth_enabled,
        "members of configs from before root tokens would refuse them"
    );
    for p in world.world().configs.values_mut() {
        p.config.root_tokens = true;
    }
    r.handle(&schedule(), far()).await.unwrap();
    r.handle(&schedule(), far()).await.unwrap();
    let w = world.world();
    assert!(w.auth_enabled);
    let enables = w.calls.iter().filter(|c| *c == "enable-auth").count();
    assert_eq!(enables, 1, "{:#?}", w.calls);
}
