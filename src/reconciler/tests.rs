//! The handler against the in-memory world: given a group and a cluster, when events arrive
//! (duplicated, reordered, lost, concurrent), then the cluster converges with no step repeated.

use super::*;
use crate::error::Refusal;
use crate::fake::Fake;
use crate::model::{InitialState, LifecycleState, MemberId};
use serde_json::json;

mod faults;

type Tested = Reconciler<Fake, Fake, Fake, Fake, Fake>;

fn reconciler(world: &Fake) -> Tested {
    reconciler_with(world, &[])
}

fn reconciler_with(world: &Fake, extra: &[(&str, &str)]) -> Tested {
    let extra: Vec<(String, String)> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config = Config::from_lookup(|k| {
        if let Some((_, v)) = extra.iter().find(|(key, _)| key == k) {
            return Some(v.clone());
        }
        match k {
            "ASG_NAME" => Some("etcd"),
            "LAUNCH_HOOK_NAME" => Some("etcd-launch"),
            "TERMINATE_HOOK_NAME" => Some("etcd-terminate"),
            // Never wait inside an invocation: the test boots instances between invocations.
            "WAIT_BUDGET_SECS" => Some("0"),
            "POLL_INTERVAL_MS" => Some("50"),
            "DEADLINE_MARGIN_MS" => Some("0"),
            _ => None,
        }
        .map(str::to_string)
    })
    .unwrap();
    let clock_world = world.clone();
    Reconciler {
        group: world.clone(),
        lifecycle: world.clone(),
        published: world.clone(),
        members: world.clone(),
        backups: config.backup_store.is_some().then(|| world.clone()),
        ca: Default::default(),
        prepared: Default::default(),
        config,
        clock: Arc::new(move || clock_world.world().now),
        backup_failed_at: Default::default(),
        hooks: Default::default(),
    }
}

fn lifecycle_event(transition: &str, instance: &str) -> Value {
    let (detail_type, hook, t) = match transition {
        "launch" => (
            "EC2 Instance-launch Lifecycle Action",
            "etcd-launch",
            "autoscaling:EC2_INSTANCE_LAUNCHING",
        ),
        _ => (
            "EC2 Instance-terminate Lifecycle Action",
            "etcd-terminate",
            "autoscaling:EC2_INSTANCE_TERMINATING",
        ),
    };
    json!({
        "version": "0", "id": "1", "detail-type": detail_type, "source": "aws.autoscaling",
        "account": "123456789012", "time": "2026-11-29T12:00:00Z", "region": "us-east-1",
        "resources": [], "detail": {
            "LifecycleActionToken": "87654321-4321-4321-4321-210987654321",
            "AutoScalingGroupName": "etcd", "LifecycleHookName": hook,
            "EC2InstanceId": instance, "LifecycleTransition": t }
    })
}

fn schedule() -> Value {
    json!({"version": "0", "id": "2", "detail-type": "Scheduled Event", "source": "aws.events",
           "account": "123456789012", "time": "2026-11-29T12:00:00Z", "region": "us-east-1",
           "resources": [], "detail": {}})
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

/// Invoke with each event, letting instances boot between invocations, until an invocation
/// leaves nothing waiting. Returns the invocations it took.
async fn converge(world: &Fake, events: &[Value]) -> usize {
    let r = reconciler(world);
    for round in 1..=40 {
        let mut all_done = true;
        for e in events {
            let resp = r.handle(e, far()).await.unwrap();
            if let Response::Reconciled {
                waiting: Some(_), ..
            } = resp
            {
                all_done = false;
            }
            world.boot();
            world.world().now += 5;
        }
        if all_done {
            return round;
        }
    }
    panic!("did not converge: {:#?}", world.calls());
}

fn assert_converged(world: &Fake) {
    let w = world.world();
    let live: Vec<&str> = w
        .instances
        .iter()
        .filter(|i| i.state.wants_membership())
        .map(|i| i.id.as_str())
        .collect();
    let mut names: Vec<&str> = w.members.iter().map(|m| m.name.as_str()).collect();
    names.sort();
    let mut live_sorted = live.clone();
    live_sorted.sort();
    assert_eq!(
        names, live_sorted,
        "member set equals the group's live instances"
    );
    assert!(w.members.iter().all(|m| !m.is_learner && m.is_started()));
    assert!(
        w.instances
            .iter()
            .all(|i| i.state == LifecycleState::InService),
        "every lifecycle action completed: {:?}",
        w.instances
    );
    assert_eq!(w.clusters_formed, 1, "exactly one cluster was ever formed");
}

async fn three_member_cluster() -> Fake {
    let world = Fake::default();
    for n in 1..=3 {
        world.launch(n);
    }
    converge(&world, &[schedule()]).await;
    assert_converged(&world);
    world
}

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

// Compound faults (issue 7).

fn reconciled(resp: &Response) -> (&Vec<String>, Option<&str>, &Vec<HeldTermination>) {
    match resp {
        Response::Reconciled {
            steps,
            waiting,
            held_for_quorum,
            ..
        } => (steps, waiting.as_deref(), held_for_quorum),
        other => panic!("{other:?}"),
    }
}

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

// Maintenance (issue 10).

#[tokio::test]
async fn nospace_is_compacted_defragmented_member_by_member_and_disarmed() {
    use crate::model::{Alarm, MemberStatus};
    let world = three_member_cluster().await;
    {
        let mut w = world.world();
        let ids: Vec<MemberId> = w.members.iter().map(|m| m.id).collect();
        for (k, id) in ids.iter().enumerate() {
            let status = MemberStatus {
                db_size: 2 << 30,
                db_size_in_use: (2 << 30) - 1000,
                version: "3.5.1".into(),
                revision: 9000 + k as i64,
            };
            w.db.insert(*id, status);
        }
        w.live_bytes = 100 << 20;
        w.alarms.push(Alarm {
            member: ids[1],
            kind: "NOSPACE".into(),
        });
    }
    converge(&world, &[schedule()]).await;
    let w = world.world();
    assert!(w.alarms.is_empty(), "disarmed");
    assert!(w.db.values().all(|s| s.db_size == 100 << 20), "{:?}", w.db);
    let calls: Vec<&String> = w
        .calls
        .iter()
        .filter(|c| {
            ["compact", "defragment", "disarm", "transfer"]
                .iter()
                .any(|p| c.starts_with(p))
        })
        .collect();
    assert_eq!(calls[0], "compact 9002", "{calls:#?}");
    assert_eq!(
        calls.iter().filter(|c| c.starts_with("defragment")).count(),
        3,
        "{calls:#?}"
    );
    assert!(
        calls.last().unwrap().starts_with("disarm NOSPACE"),
        "{calls:#?}"
    );
    // The leader went last, after handing over.
    let transfer = calls
        .iter()
        .position(|c| c.starts_with("transfer"))
        .unwrap();
    assert!(transfer > 1 && transfer < calls.len() - 2, "{calls:#?}");
}

#[tokio::test]
async fn nospace_with_too_much_live_data_is_never_disarmed() {
    use crate::model::{Alarm, MemberStatus};
    let world = three_member_cluster().await;
    {
        let mut w = world.world();
        let ids: Vec<MemberId> = w.members.iter().map(|m| m.id).collect();
        for id in &ids {
            let status = MemberStatus {
                db_size: 2 << 30,
                db_size_in_use: 2 << 30,
                version: "3.5.1".into(),
                revision: 9000,
            };
            w.db.insert(*id, status);
        }
        w.live_bytes = 2 << 30;
        w.alarms.push(Alarm {
            member: ids[0],
            kind: "NOSPACE".into(),
        });
    }
    let r = reconciler(&world);
    for _ in 0..3 {
        r.handle(&schedule(), far()).await.unwrap();
    }
    let w = world.world();
    assert_eq!(w.alarms.len(), 1);
    assert!(
        !w.calls.iter().any(|c| c.starts_with("disarm")),
        "{:#?}",
        w.calls
    );
}

// Backups and recovery (issue 8).

fn with_backups(world: &Fake) -> Tested {
    reconciler_with(world, &[("BACKUP_BUCKET", "backups")])
}

async fn converge_with(r: &Tested, world: &Fake) {
    for _ in 0..40 {
        let resp = r.handle(&schedule(), far()).await.unwrap();
        world.boot();
        world.world().now += 5;
        if let Response::Reconciled { waiting: None, .. } = resp {
            return;
        }
    }
    panic!("did not converge: {:#?}", world.calls());
}

#[tokio::test]
async fn a_healthy_member_leaves_only_behind_a_fresh_snapshot() {
    let world = three_member_cluster().await;
    world.world().data = "k=v".into();
    let r = with_backups(&world);
    converge_with(&r, &world).await; // the first scheduled backup
    world.world().now += 120; // older than a minute
    world.start_terminating("i-00000003");
    converge_with(&r, &world).await;
    let calls = world.calls();
    let stores: Vec<usize> = calls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.starts_with("store"))
        .map(|(n, _)| n)
        .collect();
    let removal = calls.iter().position(|c| c.starts_with("remove")).unwrap();
    assert_eq!(stores.len(), 2, "{calls:#?}");
    assert!(
        stores[1] < removal,
        "a fresh snapshot before the removal: {calls:#?}"
    );
}

#[tokio::test]
async fn a_backup_store_that_cannot_be_listed_stops_no_membership_work() {
    let world = three_member_cluster().await;
    let r = with_backups(&world);
    converge_with(&r, &world).await; // the first scheduled backup
    world.world().bucket_list_fails = true;
    world.world().now += 120;
    // A scale-out joins, and a healthy member leaves without the (best-effort) fresh snapshot.
    world.launch(4);
    let resp = r
        .handle(&lifecycle_event("launch", "i-00000004"), far())
        .await
        .unwrap();
    let Response::Reconciled { metrics, .. } = &resp else {
        panic!("{resp:?}")
    };
    assert_eq!(metrics.get("BackupFailed"), Some(1), "{metrics:?}");
    converge_with(&r, &world).await;
    world.start_terminating("i-00000002");
    converge_with(&r, &world).await;
    assert_converged(&world);
    let w = world.world();
    let names: Vec<&str> = w.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["i-00000001", "i-00000003", "i-00000004"]);
    assert_eq!(
        w.bucket.len(),
        1,
        "no snapshot stored while the store fails"
    );
}

#[tokio::test]
async fn a_failing_store_costs_the_backup_never_a_held_hooks_heartbeat() {
    let world = three_member_cluster().await;
    // A termination held for quorum (2's etcd is down), and a scheduled backup due.
    world.world().dead.insert("i-00000002".into());
    world.start_terminating("i-00000003");
    world.world().bucket_store_fails = true;
    let r = with_backups(&world);
    let resp = r.handle(&schedule(), far()).await.unwrap();
    let (_, waiting, held) = reconciled(&resp);
    assert!(
        waiting.unwrap().starts_with("quorum-guard i-00000003"),
        "{resp:?}"
    );
    assert_eq!(held.len(), 1);
    let calls = world.calls();
    let failed = calls
        .iter()
        .position(|c| c == "store failed")
        .expect("a backup was tried");
    let beats: Vec<usize> = calls
        .iter()
        .enumerate()
        .filter(|(_, c)| *c == "heartbeat terminate i-00000003")
        .map(|(n, _)| n)
        .collect();
    // Before anything else, and so before the snapshot; none again on the way out, where it
    // is not due (an eighth of its hook's 300 s has not passed).
    assert_eq!(beats.len(), 1, "{calls:#?}");
    assert!(
        beats[0] < failed,
        "a heartbeat before the snapshot: {calls:#?}"
    );
}

#[tokio::test]
async fn a_snapshot_that_cannot_finish_stops_in_time_and_the_removal_goes_on() {
    let world = three_member_cluster().await;
    let r = with_backups(&world);
    converge_with(&r, &world).await; // the first scheduled backup
    world.world().now += 120; // the removal wants a fresh one
    world.world().snapshot_stalls = true;
    world.start_terminating("i-00000003");
    let deadline = Instant::now() + Duration::from_secs(4);
    let event = lifecycle_event("terminate", "i-00000003");
    let resp = tokio::time::timeout(Duration::from_secs(10), r.handle(&event, deadline))
        .await
        .expect("the invocation outlived its deadline inside the snapshot")
        .unwrap();
    assert!(Instant::now() < deadline, "returned after its deadline");
    let Response::Reconciled { metrics, .. } = &resp else {
        panic!("{resp:?}")
    };
    assert_eq!(metrics.get("BackupFailed"), Some(1), "{metrics:?}");
    assert_eq!(metrics.get("BackupTimedOut"), Some(1), "{metrics:?}");
    let calls = world.calls();
    let aborted = calls.iter().position(|c| c == "store aborted");
    let removed = calls.iter().position(|c| c.starts_with("remove"));
    assert!(
        matches!((aborted, removed), (Some(a), Some(m)) if a < m),
        "the upload aborted, then the member removed in the same invocation: {calls:#?}"
    );
    {
        let w = world.world();
        assert_eq!(w.bucket.len(), 1, "nothing half-stored");
        assert!(w.members.iter().all(|m| m.name != "i-00000003"));
    }
    // The next invocations do not try again at once: one with no time to spare for a snapshot
    // (its deadline moments away) removes the next leaving member straight away.
    world.start_terminating("i-00000002");
    world.launch(4);
    let snapshots = |w: &Fake| {
        w.calls()
            .iter()
            .filter(|c| c.starts_with("snapshot"))
            .count()
    };
    let before = snapshots(&world);
    let event = lifecycle_event("terminate", "i-00000002");
    let soon = Instant::now() + Duration::from_millis(1500);
    let resp = r.handle(&event, soon).await.unwrap();
    let Response::Reconciled { metrics, .. } = &resp else {
        panic!("{resp:?}")
    };
    assert_eq!(snapshots(&world), before, "no second attempt so soon");
    assert_eq!(
        metrics.get("BackupFailed"),
        Some(1),
        "still reported failing"
    );
    assert!(
        world.world().members.iter().all(|m| m.name != "i-00000002"),
        "{:#?}",
        world.calls()
    );
}

#[tokio::test]
async fn scheduled_snapshots_wait_for_the_interval_and_a_moved_revision() {
    use crate::model::MemberStatus;
    let world = three_member_cluster().await;
    let r = with_backups(&world);
    r.handle(&schedule(), far()).await.unwrap();
    let count = |w: &Fake| w.calls().iter().filter(|c| c.starts_with("store")).count();
    assert_eq!(count(&world), 1, "the first one at once");
    world.world().now += 3600;
    r.handle(&schedule(), far()).await.unwrap();
    assert_eq!(count(&world), 1, "the revision has not moved");
    {
        let mut w = world.world();
        let ids: Vec<MemberId> = w.members.iter().map(|m| m.id).collect();
        for id in ids {
            let s = MemberStatus {
                revision: 50,
                ..Default::default()
            };
            w.db.insert(id, s);
        }
    }
    r.handle(&schedule(), far()).await.unwrap();
    assert_eq!(count(&world), 2, "interval passed, revision moved");
}

#[tokio::test]
async fn when_every_member_is_lost_the_cluster_comes_back_from_the_latest_backup() {
    let world = three_member_cluster().await;
    world.world().data = "precious".into();
    let r = with_backups(&world);
    r.handle(&schedule(), far()).await.unwrap();
    let (old_token, old_id) = {
        let w = world.world();
        let rec = w.record.clone().unwrap();
        (rec.token, rec.cluster_id)
    };
    // Every instance gone at once, no hook; the data dies with them; the group launches anew.
    {
        let mut w = world.world();
        w.instances.clear();
        w.members.clear();
        w.data.clear();
    }
    for n in 4..=6 {
        world.launch(n);
    }
    converge_with(&r, &world).await;
    let w = world.world();
    assert_eq!(w.data, "precious", "restored");
    let rec = w.record.clone().unwrap();
    let restored = rec.restored_from.clone().expect("a restored generation");
    assert_eq!(restored.previous_token, old_token);
    assert_ne!(rec.token, old_token);
    assert_ne!(rec.cluster_id, old_id);
    assert!(rec.has_served());
    assert_eq!(w.members.len(), 3);
    assert!(w.calls.iter().any(|c| c.starts_with("hand-over")));
    // No config still asks for a restore: a wiped seed must not restore a second copy.
    assert!(w.configs.values().all(|p| p.config.restore.is_none()));
}

#[tokio::test]
async fn a_manual_restore_request_is_used_for_one_loss_never_the_next() {
    let world = three_member_cluster().await;
    world.world().data = "first".into();
    let manual = reconciler_with(
        &world,
        &[("BACKUP_BUCKET", "backups"), ("RECOVERY", "manual")],
    );
    manual.handle(&schedule(), far()).await.unwrap();
    let lose_everything = |first: u8| {
        {
            let mut w = world.world();
            w.instances.clear();
            w.members.clear();
            w.data.clear();
            w.now += 60;
        }
        for n in first..first + 3 {
            world.launch(n);
        }
    };
    lose_everything(4);
    world.world().now += 60;
    let (key, at) = (Some("latest".to_string()), Some(world.world().now));
    (
        world.world().restore_request,
        world.world().restore_request_at,
    ) = (key, at);
    converge_with(&manual, &world).await;
    assert_eq!(world.world().data, "first", "restored on request");
    let restored = world.world().record.clone().unwrap();
    // Weeks later, with newer data backed up, every member is lost again: the old request (still
    // there) is not for this loss.
    world.world().now += 21 * 86_400;
    world.world().data = "newer".into();
    manual.handle(&schedule(), far()).await.unwrap();
    lose_everything(7);
    let resp = manual.handle(&schedule(), far()).await.unwrap();
    let (_, waiting, _) = reconciled(&resp);
    assert!(
        waiting.unwrap().starts_with("await-restore-request"),
        "{resp:?}"
    );
    assert_eq!(world.world().record, Some(restored));
}

#[tokio::test]
async fn a_partition_is_not_a_loss_and_manual_recovery_waits_for_the_operator() {
    let world = three_member_cluster().await;
    let r = with_backups(&world);
    r.handle(&schedule(), far()).await.unwrap();
    // Unreachable but still in the group: never restored.
    world.world().etcd_down = true;
    world.launch(4);
    let before = world.world().record.clone();
    r.handle(&schedule(), far()).await.unwrap();
    assert_eq!(world.world().record, before);
    assert!(!world.calls().iter().any(|c| c.starts_with("hand-over")));
    // Everything lost, RECOVERY=manual: nothing until a request.
    {
        let mut w = world.world();
        w.etcd_down = false;
        w.instances.retain(|i| i.id == "i-00000004");
        w.members.clear();
    }
    let manual = reconciler_with(
        &world,
        &[("BACKUP_BUCKET", "backups"), ("RECOVERY", "manual")],
    );
    let resp = manual.handle(&schedule(), far()).await.unwrap();
    let (_, waiting, _) = reconciled(&resp);
    assert!(
        waiting.unwrap().starts_with("await-restore-request"),
        "{resp:?}"
    );
    assert_eq!(world.world().record, before);
}

#[tokio::test]
async fn a_restore_whose_seed_never_starts_hands_the_snapshot_to_the_next_seed() {
    let world = three_member_cluster().await;
    world.world().data = "precious".into();
    let r = with_backups(&world);
    r.handle(&schedule(), far()).await.unwrap();
    {
        let mut w = world.world();
        w.instances.clear();
        w.members.clear();
        w.data.clear();
        // The restoring seed's etcd never starts (a bad AMI, a failed download).
        w.dead.insert("i-00000004".into());
    }
    for n in 4..=6 {
        world.launch(n);
    }
    r.handle(&schedule(), far()).await.unwrap();
    assert_eq!(
        world.world().record.as_ref().map(|r| r.seed.clone()),
        Some("i-00000004".into())
    );
    // Past the start timeout the seed is abandoned and another one restores.
    world.world().now += 10_000;
    for _ in 0..10 {
        r.handle(&schedule(), far()).await.unwrap();
        world.boot();
        world.world().now += 5;
    }
    let w = world.world();
    let seed = w.record.as_ref().unwrap().seed.clone();
    assert_ne!(seed, "i-00000004");
    assert!(
        w.calls
            .iter()
            .any(|c| c.starts_with("hand-over") && c.ends_with(&format!("to {seed}"))),
        "{:#?}",
        w.calls
    );
    assert_eq!(w.data, "precious", "restored by the second seed");
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

#[tokio::test]
async fn polling_asks_etcd_and_aws_only_what_may_have_changed() {
    // A learner whose etcd does not start within the invocation: it is added, its config
    // published, then polled for until the wait budget is spent.
    let world = three_member_cluster().await;
    world.launch(4);
    let (describes, loads) = {
        let w = world.world();
        (w.describes, w.loads)
    };
    let r = reconciler_with(&world, &[("WAIT_BUDGET_SECS", "1")]);
    let resp = r
        .handle(&lifecycle_event("launch", "i-00000004"), far())
        .await
        .unwrap();
    let Response::Reconciled { steps, stats, .. } = &resp else {
        panic!("{resp:?}");
    };
    assert_eq!(steps.len(), 2, "add-learner, publish-config: {steps:?}");
    assert!(stats.observations > 5, "it polled: {stats:?}");
    let w = world.world();
    // The group once (nothing of ours changed it, and it was fresh); the parameters once (the
    // config the invocation published is taken as written, not listed again).
    assert_eq!(w.describes - describes, 1, "{stats:?}");
    assert_eq!(w.loads - loads, 1, "{stats:?}");
}

#[tokio::test]
async fn every_write_an_invocation_takes_as_done_is_what_a_listing_would_show() {
    use crate::model::{ClusterRecord, MemberConfig, RecordState};
    use crate::planner::MemberCertificate;
    let world = Fake::default();
    let mut r = reconciler_with(&world, &[("TLS", "managed")]);
    r.ca = crate::pki::Ca::generate("etcd", 1000).unwrap().into();
    let id = world.launch(1);
    world.world().now = 1000;
    let arn = format!("{}{id}", crate::fake::ARN_PREFIX);
    let record = ClusterRecord::bootstrapping(format!("etcd-{id}"), id.clone(), 1000);
    let rival = ClusterRecord {
        seed: "i-00000009".into(),
        ..record.clone()
    };
    let served = ClusterRecord {
        state: RecordState::Served,
        cluster_id: Some(7),
        ..record.clone()
    };
    let config = MemberConfig::parse_env(&format!(
        "ETCD_NAME={id}\nETCD_INITIAL_CLUSTER={id}=https://10.0.0.1:2380\n\
         ETCD_INITIAL_CLUSTER_STATE=new\nETCD_INITIAL_CLUSTER_TOKEN=etcd-{id}\n\
         ETCD_INITIAL_ADVERTISE_PEER_URLS=https://10.0.0.1:2380\n\
         ETCD_ADVERTISE_CLIENT_URLS=https://10.0.0.1:2379\nETCD_AUTO_COMPACTION_RETENTION=1h\n\
         ETCD_QUOTA_BACKEND_BYTES=2147483648\n"
    ))
    .unwrap();
    let publish = |certificate: bool| Step::Publish {
        instance: id.clone(),
        instance_arn: arn.clone(),
        config: config.clone(),
        certificate: certificate.then(|| MemberCertificate {
            address: "10.0.0.1".into(),
        }),
    };
    let unpublish = |key_material| Step::Unpublish {
        instance: id.clone(),
        key_material,
    };
    let steps = [
        Step::CreateCluster(record.clone()),
        Step::CreateCluster(rival),
        publish(true),
        unpublish(false),
        // Its bundle handed out before (as by an invocation that died before the config):
        // kept, and the config written all the same.
        publish(true),
        publish(false),
        Step::MarkServed(served),
        Step::NoteDown {
            instance: id.clone(),
            since: 990,
        },
        Step::ForgetDown {
            instance: id.clone(),
        },
        unpublish(true),
    ];
    let meter = super::invocation::Meter::default();
    for step in steps {
        let before = r.published.load().await.unwrap();
        let (_, written) = r.apply(&step, &meter, 1000, far()).await.unwrap();
        let listed = r.published.load().await.unwrap();
        let mut cached = before;
        match written {
            Some(w) => cached.record(w, 1000),
            None => cached = listed.clone(),
        }
        assert_eq!(cached, listed, "after {step}");
        if let Step::Publish { config, .. } = &step {
            assert_eq!(
                listed.members.get(&id).map(|p| &p.config),
                Some(config),
                "{step}"
            );
        }
    }
    assert!(world.world().configs.is_empty() && world.world().tls.is_empty());
}

#[tokio::test]
async fn a_cluster_secret_created_first_by_another_invocation_is_read_not_replaced() {
    use crate::ports::Created;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Nothing there: the fresh one is created and used.
    let got = super::setup::load_or_create(
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
    let got = super::setup::load_or_create(
        "CA",
        async || Ok((reads.fetch_add(1, Ordering::SeqCst) > 0).then_some("winner")),
        || Ok("fresh"),
        async |_: &&str| Ok(Created::AlreadyExists),
    )
    .await
    .unwrap();
    assert_eq!((got, reads.load(Ordering::SeqCst)), ("winner", 2));
    // Said to exist, then not there: an error naming it, not a second creation.
    let e = super::setup::load_or_create(
        "token key",
        async || Ok(None::<&str>),
        || Ok("fresh"),
        async |_: &&str| Ok(Created::AlreadyExists),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("token key"), "{e}");
}

#[tokio::test]
async fn a_new_stack_asked_to_restore_a_copied_backup_starts_from_it_once_and_records_the_source() {
    let world = Fake::default();
    let key = "backups/prod-i-9/00000000500-rev42.db".to_string();
    let source =
        "s3://prod-backups/etcd-asg-lifecycle/prod/prod-i-9/20261201T000000Z-rev000000000042.db";
    {
        let mut w = world.world();
        let backup = crate::model::Backup {
            key: key.clone(),
            token: "prod-i-9".into(),
            taken_at: 500,
            revision: 42,
            size: 4,
            etcd_version: None,
        };
        w.bucket.insert(key.clone(), (backup, "prod".into()));
        w.copied_from.insert(key.clone(), source.into());
        w.restore_request = Some(key.clone());
        w.restore_request_at = Some(w.now);
    }
    for n in 1..=3 {
        world.launch(n);
    }
    // START_FROM=backup, RECOVERY manual, and no loss ever happened: the request alone decides.
    let r = reconciler_with(
        &world,
        &[
            ("BACKUP_BUCKET", "backups"),
            ("RECOVERY", "manual"),
            ("START_FROM", "backup"),
        ],
    );
    converge_with(&r, &world).await;
    let w = world.world();
    assert_eq!(w.data, "prod", "started from the copied backup");
    assert_eq!(w.clusters_formed, 1);
    assert_eq!(w.members.len(), 3);
    let rec = w.record.clone().unwrap();
    assert!(rec.has_served());
    let from = rec.restored_from.expect("restored");
    assert_eq!(
        (from.snapshot.key.as_str(), from.previous_token.as_str()),
        (key.as_str(), "prod-i-9")
    );
    assert_eq!(from.copied_from.as_deref(), Some(source));
    assert!(w.configs.values().all(|p| p.config.restore.is_none()));
    // No fence of a lost generation: there was none.
    assert!(w.restored.is_empty(), "{:?}", w.restored);
}
