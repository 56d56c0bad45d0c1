//! Members replaced: a seed that never serves, a cluster of one replaced either way round, a new
//! instance on a dead member's address, and a member only the function cannot reach (never
//! marked unhealthy for that).

use super::*;

#[tokio::test]
async fn a_seed_that_never_serves_is_abandoned_and_the_cluster_reseeded() {
    let world = Fake::default();
    for n in 1..=3 {
        world.launch(n);
    }
    world.world().dead.insert("i-00000001".into());
    let r = reconciler(&world);
    r.handle(&schedule(), far()).await.unwrap(); // record, seed 1's config
    world.world().now += 10_000; // past the start timeout
    r.handle(&schedule(), far()).await.unwrap(); // abandon 1, re-seed with 2
    {
        let w = world.world();
        assert!(
            w.calls
                .contains(&"complete launch i-00000001 ABANDON".to_string()),
            "{:#?}",
            w.calls
        );
        assert!(
            w.calls
                .contains(&"reseed i-00000001 -> i-00000002".to_string()),
            "{:#?}",
            w.calls
        );
        assert_eq!(w.record.as_ref().unwrap().seed, "i-00000002");
    }
    world.launch(4); // the group replaces the abandoned instance
    converge(&world, &[schedule()]).await;
    assert_converged(&world);
    let w = world.world();
    let record = w.record.as_ref().unwrap();
    assert!(
        record.has_served() && record.cluster_id == Some(1),
        "{record:?}"
    );
}

#[tokio::test]
async fn a_cluster_of_one_is_replaced_before_its_last_voter_is_removed() {
    let world = Fake::default();
    world.launch(1);
    converge(&world, &[schedule()]).await;
    assert_converged(&world);
    // A replacement launches first (the group's maintenance policy), then the old one leaves.
    world.launch(2);
    world.start_terminating("i-00000001");
    converge(&world, &[schedule()]).await;
    assert_converged(&world);
    let w = world.world();
    assert_eq!(w.members.len(), 1);
    assert_eq!(w.members[0].name, "i-00000002");
    let calls = &w.calls;
    let added = calls
        .iter()
        .position(|c| c.starts_with("add-learner"))
        .unwrap();
    let removed = calls.iter().position(|c| c.starts_with("remove")).unwrap();
    assert!(added < removed, "{calls:#?}");
}

#[tokio::test]
async fn a_cluster_of_one_replaced_terminate_first_keeps_its_last_voter_until_the_replacement_joins(
) {
    let world = Fake::default();
    world.launch(1);
    converge(&world, &[schedule()]).await;
    world.world().data = "precious".into();
    // Terminated without decrementing: the group wants one instance again, but Auto Scaling
    // has not listed the replacement when the event arrives.
    world.world().desired_capacity = Some(1);
    world.start_terminating("i-00000001");
    let r = reconciler(&world);
    let resp = r
        .handle(&lifecycle_event("terminate", "i-00000001"), far())
        .await
        .unwrap();
    let (_, waiting, _) = reconciled(&resp);
    assert_eq!(
        waiting,
        Some("last-voter-awaits-replacement i-00000001"),
        "{resp:?}"
    );
    let calls = world.calls();
    assert!(
        !calls.iter().any(|c| c.starts_with("complete terminate")),
        "the only voter kept: {calls:#?}"
    );
    assert!(calls.contains(&"heartbeat terminate i-00000001".to_string()));
    // The replacement shows up, joins, and only then does the old voter go.
    world.launch(2);
    converge(&world, &[schedule()]).await;
    assert_converged(&world);
    let w = world.world();
    assert_eq!(w.members.len(), 1);
    assert_eq!(w.members[0].name, "i-00000002");
    assert_eq!(w.data, "precious", "the data lived on in the replacement");
}

#[tokio::test]
async fn a_new_instance_on_a_dead_members_address_joins_after_that_member_is_removed() {
    let world = three_member_cluster().await;
    // 2 vanishes (no hook, no event); 4 comes up on 2's old address.
    world.world().instances.retain(|i| i.id != "i-00000002");
    let four = world.launch(4);
    world
        .world()
        .instances
        .iter_mut()
        .find(|i| i.id == four)
        .unwrap()
        .address = Some("10.0.0.2".into());
    converge(&world, &[schedule()]).await;
    assert_converged(&world);
    let w = world.world();
    let names: Vec<&str> = w.members.iter().map(|m| m.name.as_str()).collect();
    assert!(
        names.contains(&"i-00000004") && !names.contains(&"i-00000002"),
        "{names:?}"
    );
}

#[tokio::test]
async fn a_member_only_the_function_cannot_reach_is_never_marked_unhealthy() {
    let world = three_member_cluster().await;
    let r = reconciler(&world);
    world.world().cut_off.insert("i-00000002".into());
    let mut last = None;
    for _ in 0..5 {
        last = Some(r.handle(&schedule(), far()).await.unwrap());
        // Past UNHEALTHY_REPLACE_SECS, within PEER_VIEW_HOLD times it.
        world.world().now += 250;
    }
    let calls = world.calls();
    assert!(
        !calls.iter().any(|c| c.starts_with("set-unhealthy")),
        "{calls:#?}"
    );
    let Some(Response::Reconciled {
        waiting, metrics, ..
    }) = &last
    else {
        panic!("{last:?}")
    };
    assert_eq!(
        waiting.as_deref(),
        Some("member-unreachable-from-function i-00000002 member 2"),
        "{last:?}"
    );
    assert_eq!(metrics.get("MemberUnreachableFromFunction"), Some(1));
    // Down for its peers too (its etcd dies): replaced as any dead member.
    {
        let mut w = world.world();
        w.cut_off.clear();
        w.dead.insert("i-00000002".into());
    }
    for _ in 0..3 {
        r.handle(&schedule(), far()).await.unwrap();
        world.world().now += 600;
    }
    assert!(world
        .calls()
        .iter()
        .any(|c| c == "set-unhealthy i-00000002"));
}
