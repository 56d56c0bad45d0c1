//! Hooks held while work waits (compound faults, issue 7): a termination held for quorum until
//! the dead member is replaced, a terminating voter's hook kept alive while the cluster is
//! unreachable, a not-yet refusal as a wait, a completion AWS still shows pending, and a
//! scheduled run that only waits.

use super::*;

#[tokio::test]
async fn a_termination_with_another_member_down_is_held_then_unblocked_by_replacing_the_dead_one() {
    let world = three_member_cluster().await;
    let (m2, m3) = {
        let w = world.world();
        let id = |name: &str| w.members.iter().find(|m| m.name == name).unwrap().id;
        (id("i-00000002"), id("i-00000003"))
    };
    // 2's etcd dies on a running instance; then 3 is terminated.
    world.world().dead.insert("i-00000002".into());
    world.start_terminating("i-00000003");
    let r = reconciler(&world);
    let resp = r
        .handle(&lifecycle_event("terminate", "i-00000003"), far())
        .await
        .unwrap();
    let (_, waiting, held) = reconciled(&resp);
    assert!(
        waiting.unwrap().starts_with("quorum-guard i-00000003"),
        "{resp:?}"
    );
    assert_eq!(
        held,
        &vec![HeldTermination {
            instance: "i-00000003".into(),
            member: m3.to_string(),
            blocking: vec![m2.to_string()],
        }]
    );
    let calls = world.calls();
    assert!(!calls.contains(&format!("remove {m3}")), "{calls:#?}");
    assert!(
        calls.contains(&"heartbeat terminate i-00000003".to_string()),
        "{calls:#?}"
    );
    assert!(
        calls.contains(&"note-down i-00000002".to_string()),
        "{calls:#?}"
    );

    // Still held as time passes, heartbeat after heartbeat, until 2 has been down long enough.
    world.world().now += 200;
    r.handle(&schedule(), far()).await.unwrap();
    assert!(!world.calls().iter().any(|c| c.starts_with("set-unhealthy")));
    world.world().now += 200;
    r.handle(&schedule(), far()).await.unwrap();
    assert!(world
        .calls()
        .contains(&"set-unhealthy i-00000002".to_string()));
    // The group replaces 2 (terminate hook, new instance); the dead member goes first, then 3.
    world.replace_unhealthy(4);
    converge(&world, &[schedule()]).await;
    let calls = world.calls();
    let pos = |c: String| calls.iter().position(|x| *x == c).unwrap();
    assert!(
        pos(format!("remove {m2}")) < pos(format!("remove {m3}")),
        "{calls:#?}"
    );
    assert_converged(&world);
    let w = world.world();
    let names: Vec<&str> = w.members.iter().map(|m| m.name.as_str()).collect();
    assert!(
        names.contains(&"i-00000004") && names.len() == 2,
        "{names:?}"
    );
}

#[tokio::test]
async fn while_the_cluster_is_unreachable_a_terminating_voters_hook_is_kept_alive() {
    let world = three_member_cluster().await;
    // 1's and 2's etcd are down (the instances run): no quorum; 3 answers for itself. Then 2's
    // instance is terminated: its disk may hold acknowledged writes 3 lacks.
    world.world().dead.insert("i-00000001".into());
    world.world().dead.insert("i-00000002".into());
    world.start_terminating("i-00000002");
    let r = reconciler(&world);
    let setup = world.calls().len();
    let resp = r.handle(&schedule(), far()).await.unwrap();
    let Response::Reconciled {
        waiting, metrics, ..
    } = &resp
    else {
        panic!("{resp:?}")
    };
    assert!(
        waiting
            .as_deref()
            .unwrap()
            .starts_with("cluster-unreachable"),
        "{resp:?}"
    );
    assert_eq!(metrics.get("HeldWhileUnreachable"), Some(1), "{metrics:?}");
    let calls = world.calls()[setup..].to_vec();
    assert!(
        calls.contains(&"heartbeat terminate i-00000002".to_string()),
        "{calls:#?}"
    );
    assert!(
        !calls
            .iter()
            .any(|c| c.starts_with("remove") || c.starts_with("complete")),
        "{calls:#?}"
    );
    // With nobody answering there is no one to say whose data matters: nothing is held.
    world.world().dead.insert("i-00000003".into());
    let before = world.calls().len();
    r.handle(&schedule(), far()).await.unwrap();
    assert!(!world.calls()[before..]
        .iter()
        .any(|c| c.starts_with("heartbeat")));
}

#[tokio::test]
async fn a_not_yet_refusal_is_a_wait_with_heartbeats_not_a_failed_invocation() {
    let world = three_member_cluster().await;
    world.world().refuse = Some(Refusal::UnhealthyCluster);
    world.start_terminating("i-00000003");
    let resp = reconciler(&world)
        .handle(&lifecycle_event("terminate", "i-00000003"), far())
        .await
        .expect("a refusal that means not yet is not an error");
    let (_, waiting, _) = reconciled(&resp);
    assert!(waiting.unwrap().starts_with("refused-for-now"), "{resp:?}");
    assert!(world
        .calls()
        .contains(&"heartbeat terminate i-00000003".to_string()));
    // Once etcd agrees, the same termination goes through.
    world.world().refuse = None;
    converge(&world, &[schedule()]).await;
    assert_eq!(world.world().members.len(), 2);
}

#[tokio::test]
async fn a_completion_aws_still_shows_pending_is_not_repeated() {
    let world = three_member_cluster().await;
    world.start_terminating("i-00000003");
    world.world().refuse = None;
    let r = reconciler(&world);
    // Remove the member first, then have AWS keep showing the action after every completion.
    world.world().stale_completions = true;
    let resp = r.handle(&schedule(), far()).await.unwrap();
    let completions = world
        .calls()
        .iter()
        .filter(|c| c.starts_with("complete terminate i-00000003"))
        .count();
    assert_eq!(completions, 1, "{:#?}", world.calls());
    let (_, waiting, _) = reconciled(&resp);
    assert!(
        waiting.unwrap().starts_with("not-yet-visible i-00000003"),
        "{resp:?}"
    );
}

#[tokio::test]
async fn a_scheduled_run_that_only_waits_returns_at_once() {
    let world = three_member_cluster().await;
    world.launch(4);
    // A long budget: a lifecycle event would poll for the learner; the schedule must not.
    let r = reconciler_with(
        &world,
        &[("WAIT_BUDGET_SECS", "600"), ("POLL_INTERVAL_MS", "50")],
    );
    r.handle(&schedule(), far()).await.unwrap(); // adds the learner, publishes, returns
    let began = Instant::now();
    let resp = r.handle(&schedule(), far()).await.unwrap();
    let (steps, waiting, _) = reconciled(&resp);
    assert!(
        steps.is_empty() && waiting.unwrap().starts_with("learner-starting"),
        "{resp:?}"
    );
    assert!(began.elapsed() < Duration::from_secs(5));
    let Response::Reconciled { stats, .. } = resp else {
        unreachable!()
    };
    assert_eq!(stats.waited_ms, 0);
}
