//! Joins and removals as events arrive: simultaneous launches give one cluster, duplicated,
//! lost and reordered events converge, a leaving seed hands leadership over, foreign events
//! change nothing, and a learner that never starts is removed.

use super::*;

#[tokio::test]
async fn three_simultaneous_launches_into_an_empty_group_give_one_seed_and_one_cluster() {
    let world = Fake::default();
    let ids: Vec<String> = (1..=3).map(|n| world.launch(n)).collect();
    // All three launch events race: three invocations at once against the same world.
    let r = reconciler(&world);
    let events: Vec<Value> = ids.iter().map(|i| lifecycle_event("launch", i)).collect();
    let (a, b, c) = tokio::join!(
        r.handle(&events[0], far()),
        r.handle(&events[1], far()),
        r.handle(&events[2], far())
    );
    for resp in [a, b, c] {
        resp.unwrap();
    }
    converge(&world, &events).await;
    assert_converged(&world);
    let w = world.world();
    // The seed's `new` config was rewritten once the cluster served: none is left to found a
    // second cluster from.
    let seeds: Vec<_> = w
        .configs
        .values()
        .filter(|p| p.config.state == InitialState::New)
        .collect();
    assert_eq!(seeds.len(), 0, "no `new` config left");
    assert_eq!(w.record.as_ref().unwrap().seed, "i-00000001");
    let creates = w
        .calls
        .iter()
        .filter(|c| c.starts_with("create-cluster"))
        .count();
    assert!(creates >= 1 && w.clusters_formed == 1);
}

#[tokio::test]
async fn a_duplicate_event_is_a_no_op() {
    let world = three_member_cluster().await;
    let before = world.calls();
    let r = reconciler(&world);
    for _ in 0..3 {
        let resp = r
            .handle(&lifecycle_event("launch", "i-00000002"), far())
            .await
            .unwrap();
        let Response::Reconciled {
            trigger,
            steps,
            waiting,
            stats,
            ..
        } = resp
        else {
            panic!("{resp:?}")
        };
        assert_eq!(trigger, "launch i-00000002");
        assert_eq!((steps, waiting), (vec![], None));
        assert_eq!(stats.observations, 1, "one look, nothing to do");
    }
    assert_eq!(world.calls(), before, "no call changed anything");
}

#[tokio::test]
async fn a_lost_launch_event_is_made_up_for_by_the_schedule() {
    let world = three_member_cluster().await;
    world.launch(4);
    converge(&world, &[schedule()]).await;
    assert_converged(&world);
    assert_eq!(world.world().members.len(), 4);
}

#[tokio::test]
async fn terminate_before_launch_converges() {
    let world = three_member_cluster().await;
    let id = world.launch(4);
    let r = reconciler(&world);
    // The launch event is late; the schedule added the learner, then the group gave up on it.
    r.handle(&schedule(), far()).await.unwrap();
    assert!(world.world().members.iter().any(|m| m.is_learner));
    world.start_terminating(&id);
    converge(
        &world,
        &[
            lifecycle_event("terminate", &id),
            lifecycle_event("launch", &id),
        ],
    )
    .await;
    assert_converged(&world);
    let w = world.world();
    assert_eq!(w.members.len(), 3);
    assert!(!w.configs.contains_key(&id), "its config is gone");
    assert!(w
        .calls
        .contains(&format!("complete terminate {id} CONTINUE")));
}

#[tokio::test]
async fn two_simultaneous_terminations_from_three_leave_a_working_one_member_cluster() {
    let world = three_member_cluster().await;
    world.start_terminating("i-00000001");
    world.start_terminating("i-00000002");
    let r = reconciler(&world);
    let e1 = lifecycle_event("terminate", "i-00000001");
    let e2 = lifecycle_event("terminate", "i-00000002");
    let (a, b) = tokio::join!(r.handle(&e1, far()), r.handle(&e2, far()));
    a.unwrap();
    b.unwrap();
    converge(&world, &[e1, e2]).await;
    assert_converged(&world);
    let w = world.world();
    assert_eq!(w.members.len(), 1);
    assert_eq!(w.members[0].name, "i-00000003");
    // Removed while alive: every removal came before its instance's completion.
    let calls = &w.calls;
    let removed = calls.iter().position(|c| c.starts_with("remove")).unwrap();
    let completed = calls
        .iter()
        .position(|c| c.starts_with("complete terminate"))
        .unwrap();
    assert!(removed < completed, "{calls:#?}");
}

#[tokio::test]
async fn the_seed_terminating_as_leader_hands_over_before_its_removal() {
    let world = three_member_cluster().await;
    world.start_terminating("i-00000001");
    converge(&world, &[lifecycle_event("terminate", "i-00000001")]).await;
    let calls = world.calls();
    let transfer = calls
        .iter()
        .position(|c| c.starts_with("transfer-leadership"))
        .expect("leadership moved");
    let remove = calls.iter().position(|c| c.starts_with("remove")).unwrap();
    assert!(transfer < remove, "{calls:#?}");
    assert_converged(&world);
}

#[tokio::test]
async fn events_for_unknown_instances_or_foreign_groups_change_nothing() {
    let world = three_member_cluster().await;
    let before = world.calls();
    let r = reconciler(&world);
    let resp = r
        .handle(&lifecycle_event("terminate", "i-0000000f"), far())
        .await
        .unwrap();
    assert!(
        matches!(&resp, Response::Rejected { field, .. } if field == "EC2InstanceId"),
        "{resp:?}"
    );
    let mut foreign = lifecycle_event("launch", "i-00000002");
    foreign["detail"]["AutoScalingGroupName"] = "other".into();
    let resp = r.handle(&foreign, far()).await.unwrap();
    assert!(matches!(&resp, Response::Rejected { field, .. } if field == "AutoScalingGroupName"));
    assert_eq!(world.calls(), before);
}

#[tokio::test]
async fn a_cluster_nobody_can_reach_is_never_bootstrapped_again() {
    let world = three_member_cluster().await;
    // Every member is out of the function's reach, but the instances remain.
    world.world().etcd_down = true;
    world.launch(4);
    let before = world.calls();
    let r = reconciler(&world);
    let resp = r.handle(&schedule(), far()).await.unwrap();
    assert!(
        matches!(&resp, Response::Reconciled { waiting: Some(w), .. } if w.starts_with("cluster-unreachable")),
        "{resp:?}"
    );
    // A fresh environment heartbeats every held action before it knows which the plan lets
    // lapse (holding is the safe side); from then on the launch is left to its timeout.
    assert_eq!(
        world.calls()[before.len()..],
        ["heartbeat launch i-00000004"],
        "no membership change"
    );
    let before = world.calls();
    r.handle(&schedule(), far()).await.unwrap();
    assert_eq!(world.calls(), before, "no membership change, no heartbeat");
}

#[tokio::test]
async fn a_slow_learner_keeps_its_hook_alive_with_heartbeats() {
    let world = three_member_cluster().await;
    world.launch(4);
    let r = reconciler(&world);
    r.handle(&schedule(), far()).await.unwrap();
    r.handle(&schedule(), far()).await.unwrap();
    assert!(world
        .calls()
        .contains(&"heartbeat launch i-00000004".to_string()));
}

#[tokio::test]
async fn a_learner_that_never_starts_is_removed_and_its_launch_abandoned() {
    let world = three_member_cluster().await;
    let id = world.launch(4);
    let r = reconciler(&world);
    r.handle(&schedule(), far()).await.unwrap(); // added and published; it never boots
    world.world().now += 10_000;
    r.handle(&schedule(), far()).await.unwrap();
    let w = world.world();
    assert!(
        w.calls.contains(&format!("complete launch {id} ABANDON")),
        "{:#?}",
        w.calls
    );
    assert_eq!(w.members.len(), 3);
    assert!(w.instances.iter().all(|i| i.id != id));
}
