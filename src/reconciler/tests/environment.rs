//! What an environment needs before its first observation (`setup.rs`): the group's hooks, no
//! warm pool, and the stack's own CA (an adopted cluster's imported, never made) and secrets
//! read, not replaced, when another invocation created them first.

use super::*;

#[tokio::test]
async fn a_missing_hook_fails_the_first_invocation_naming_it_and_the_next_looks_again() {
    let world = Fake::default();
    world.world().hooks = Some(vec!["etcd-launch".into()]);
    let r = reconciler(&world);
    for _ in 0..2 {
        let e = r.handle(&schedule(), far()).await.unwrap_err();
        assert_eq!(e.kind(), "Fatal.Config");
        assert!(e.to_string().contains("TERMINATE_HOOK_NAME"), "{e}");
    }
    assert!(
        world.calls().is_empty(),
        "nothing changed: {:?}",
        world.calls()
    );
    world.world().hooks = None;
    r.handle(&schedule(), far()).await.unwrap();
    world.world().hooks = Some(vec!["etcd-launch".into()]);
    let e = reconciler(&world).check_hooks().await.unwrap_err();
    assert_eq!(e.kind(), "Fatal.Config");
    let text = e.to_string();
    assert!(
        text.contains("TERMINATE_HOOK_NAME") && text.contains("etcd-terminate"),
        "{text}"
    );
    world.world().hooks = None;
    reconciler(&world).check_hooks().await.unwrap();
}

#[tokio::test]
async fn a_cluster_adopted_over_tls_waits_for_its_own_ca_and_the_stack_never_makes_one() {
    let world = Fake::default();
    let adopt = [
        ("TLS", "managed"),
        ("ADOPT_ENDPOINTS", "https://10.1.0.1:2379"),
    ];
    let r = reconciler_with(&world, &adopt);
    for _ in 0..2 {
        r.handle(&schedule(), far()).await.unwrap();
    }
    assert!(world.world().ca.is_none() && r.ca.get().is_none());
    assert!(!world.calls().iter().any(|c| c == "create-ca"));
    // Imported (`etcd-asg adopt-secrets`): the next invocation of the same environment uses it.
    let imported = crate::pki::Ca::generate("outside", world.world().now).unwrap();
    world.world().ca = Some(imported.clone());
    r.handle(&schedule(), far()).await.unwrap();
    assert_eq!(r.ca.get().map(|c| &c.cert_pem), Some(&imported.cert_pem));
    // Without ADOPT_ENDPOINTS a stack makes its own, as ever.
    let own = Fake::default();
    reconciler_with(&own, &[("TLS", "managed")])
        .handle(&schedule(), far())
        .await
        .unwrap();
    assert!(own.world().ca.is_some());
}

#[tokio::test]
async fn a_group_with_a_warm_pool_is_refused_every_invocation_changing_nothing() {
    // Was: a launch into the warm pool completed at once, a warm instance stopped before its
    // boot script ran, and the learner of its second boot never started: a loop.
    let world = three_member_cluster().await;
    world.world().warm_pool = true;
    world.launch(4);
    let before = world.calls();
    let mut into_pool = lifecycle_event("launch", "i-00000004");
    into_pool["detail"]["Origin"] = json!("EC2");
    into_pool["detail"]["Destination"] = json!("WarmPool");
    for event in [into_pool, schedule()] {
        let e = reconciler(&world).handle(&event, far()).await.unwrap_err();
        assert_eq!(e.kind(), "Fatal.Config", "{e:?}");
        assert!(e.to_string().contains("warm pool"), "{e:?}");
    }
    // Nothing but the heartbeat of the held launch (the group alone, first).
    let after: Vec<String> = world.calls()[before.len()..].to_vec();
    assert!(
        after.iter().all(|c| c == "heartbeat launch i-00000004"),
        "{after:#?}"
    );
    world.world().warm_pool = false;
    converge(&world, &[schedule()]).await;
    assert_converged(&world);
}

#[tokio::test]
async fn a_cluster_secret_created_first_by_another_invocation_is_read_not_replaced() {
    use crate::ports::Created;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Nothing there: the fresh one is created and used.
    let got = crate::reconciler::setup::load_or_create(
        "CA",
        async || Ok(None),
        || Ok("fresh"),
        async |_: &&str| Ok(Created::Created),
    )
    .await
    .unwrap();
    assert_eq!(got, "fresh");
    // Absent at the first read, created by another invocation before ours: the winner's.
    let reads = AtomicUsize::new(0);
    let got = crate::reconciler::setup::load_or_create(
        "CA",
        async || Ok((reads.fetch_add(1, Ordering::SeqCst) > 0).then_some("winner")),
        || Ok("fresh"),
        async |_: &&str| Ok(Created::AlreadyExists),
    )
    .await
    .unwrap();
    assert_eq!((got, reads.load(Ordering::SeqCst)), ("winner", 2));
    // Said to exist, then not there: an error naming it, not a second creation.
    let e = crate::reconciler::setup::load_or_create(
        "token key",
        async || Ok(None::<&str>),
        || Ok("fresh"),
        async |_: &&str| Ok(Created::AlreadyExists),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("token key"), "{e}");
}
