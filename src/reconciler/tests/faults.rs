//! The handler against an AWS that fails as the real one does (`fake::Faults`): calls refused
//! or never answered, panics, steps whose two writes a crash or a lost answer splits. Each test
//! names the defect it was written against.

use super::*;

/// Three members; 2's etcd dead on a running instance, 3 terminating: its termination is held
/// for quorum.
async fn termination_held_for_quorum() -> Fake {
    let world = three_member_cluster().await;
    world.world().dead.insert("i-00000002".into());
    world.start_terminating("i-00000003");
    world
}

fn beats(world: &Fake, call: &str) -> usize {
    world.calls().iter().filter(|c| *c == call).count()
}

#[tokio::test]
async fn a_failed_observation_still_heartbeats_the_held_hooks_from_the_group_alone() {
    // Was: `reconcile` left at the first error of the observation, before any heartbeat; SSM
    // throttled while a termination is held for quorum, and the hook lapsed.
    // SSM failing (the observation), or Auto Scaling's DescribeLifecycleHooks (the
    // environment's preparation): a fresh environment, which has no heartbeat to its name.
    for fault in ["load", "hooks"] {
        let world = termination_held_for_quorum().await;
        world.world().faults.fail.insert(fault);
        let before = beats(&world, "heartbeat terminate i-00000003");
        let e = reconciler(&world)
            .handle(&schedule(), far())
            .await
            .unwrap_err();
        assert!(e.to_string().contains(fault), "{fault}: {e:?}");
        assert_eq!(
            beats(&world, "heartbeat terminate i-00000003"),
            before + 1,
            "{fault}: {:#?}",
            world.calls()
        );
    }
}

#[tokio::test]
async fn a_heartbeat_that_fails_stops_none_of_the_others_and_fails_the_invocation() {
    // Was: `heartbeat()` returned at the first hold whose heartbeat failed (`?`).
    let world = termination_held_for_quorum().await;
    world.launch(4);
    world
        .world()
        .faults
        .heartbeat_fails
        .insert("i-00000003".into());
    let e = reconciler(&world)
        .handle(&schedule(), far())
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("RecordLifecycleActionHeartbeat"),
        "{e:?}"
    );
    let calls = world.calls();
    assert!(
        calls.contains(&"heartbeat terminate i-00000003 failed".to_string()),
        "{calls:#?}"
    );
    assert!(
        calls.contains(&"heartbeat launch i-00000004".to_string()),
        "the other hold still beat: {calls:#?}"
    );
}

#[tokio::test]
async fn a_call_that_never_answers_ends_with_the_invocation_its_hooks_heartbeated() {
    // Was: no call had a time limit; one that never answered held the invocation until Lambda
    // killed it, nothing heartbeated.
    let world = termination_held_for_quorum().await;
    world.world().faults.hang.insert("load");
    let began = Instant::now();
    let deadline = began + Duration::from_millis(1500);
    let e = reconciler(&world)
        .handle(&schedule(), deadline)
        .await
        .unwrap_err();
    let took = began.elapsed();
    assert!(matches!(e, Error::OutOfTime { .. }), "{e:?} after {took:?}");
    assert!(took < Duration::from_millis(1700), "{took:?}");
    assert_eq!(beats(&world, "heartbeat terminate i-00000003"), 1);
}

#[tokio::test]
async fn a_panic_fails_the_invocation_after_the_heartbeats_are_retried_on_the_way_out() {
    let world = termination_held_for_quorum().await;
    world.world().faults.panic.insert("load");
    // The first heartbeat fails; the one on the way out, after the panic, goes out.
    world.world().faults.fail_once.insert("heartbeat");
    let e = reconciler(&world)
        .handle(&schedule(), far())
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Panicked { .. }), "{e:?}");
    assert_eq!(e.kind(), "Fatal.Panic");
    assert_eq!(
        beats(&world, "heartbeat terminate i-00000003"),
        1,
        "{:#?}",
        world.calls()
    );
}

#[tokio::test]
async fn a_group_that_cannot_be_listed_still_gets_what_it_held_last_heartbeated() {
    let world = termination_held_for_quorum().await;
    let r = reconciler(&world);
    // The first invocation lists the hold; its heartbeat fails.
    world
        .world()
        .faults
        .heartbeat_fails
        .insert("i-00000003".into());
    r.handle(&schedule(), far()).await.unwrap_err();
    // Then Auto Scaling fails DescribeAutoScalingGroups, and heartbeats work again.
    world.world().faults.heartbeat_fails.clear();
    world.world().faults.fail.insert("list");
    let e = r.handle(&schedule(), far()).await.unwrap_err();
    assert!(e.to_string().contains("list"), "{e:?}");
    let calls = world.calls();
    let failed = calls.iter().position(|c| c == "list failed").unwrap();
    assert!(
        calls[failed..].contains(&"heartbeat terminate i-00000003".to_string()),
        "{calls:#?}"
    );
}

#[tokio::test]
async fn an_instance_ec2_cannot_describe_keeps_the_address_it_was_published_with() {
    // Was: one DescribeInstances for every unknown instance, its failure the observation's.
    let world = three_member_cluster().await;
    world
        .world()
        .faults
        .undescribed
        .insert("i-00000002".into(), "Unavailable: an impaired zone".into());
    world.launch(4);
    world
        .world()
        .faults
        .undescribed
        .insert("i-00000004".into(), "InvalidInstanceID.NotFound".into());
    let (obs, plan) = reconciler(&world).look().await.unwrap();
    let address = |id: &str| obs.instance(id).unwrap().address.clone();
    assert_eq!(address("i-00000002").as_deref(), Some("10.0.0.2"));
    assert_eq!(address("i-00000004"), None, "never published: not yet");
    assert_eq!(obs.undescribed.len(), 2);
    // Without an address the new instance is not joined, and nothing else is held up.
    assert!(!matches!(plan.step, Step::AddLearner { .. }), "{plan:?}");
}

#[tokio::test]
async fn a_record_whose_fence_says_served_is_never_bootstrapped_again() {
    // Was: `mark_served` split (the fence `served`, the record still `bootstrapping`) with the
    // cluster then unreachable: bootstrap ran on a cluster that served (abandoning its seed
    // after the start timeout, or, with the seed gone, a re-seed that found the fence served
    // and reported a lost race every minute, for ever).
    let world = Fake::default();
    world.world().faults.split.insert("mark-served");
    world.launch(1);
    let r = reconciler(&world);
    for _ in 0..4 {
        let _ = r.handle(&schedule(), far()).await;
        world.boot();
        world.world().now += 5;
    }
    let record = world.world().record.clone().unwrap();
    assert!(!record.has_served(), "the split left it: {record:?}");
    assert!(world.calls().contains(&"mark-served split".to_string()));
    world.world().faults.split.clear();
    // Nobody answers, long past the seed's start timeout: nothing is done to it.
    world.world().etcd_down = true;
    world.world().now += 10_000;
    let before = world.calls().len();
    let resp = r.handle(&schedule(), far()).await.unwrap();
    let (_, waiting, _) = reconciled(&resp);
    assert!(
        waiting.unwrap().starts_with("cluster-unreachable"),
        "{resp:?}"
    );
    let after: Vec<String> = world.calls()[before..].to_vec();
    assert!(
        !after
            .iter()
            .any(|c| c.contains("ABANDON") || c.starts_with("reseed")),
        "{after:#?}"
    );
    // Back: the record is written as the fence says, with the cluster's id.
    world.world().etcd_down = false;
    r.handle(&schedule(), far()).await.unwrap();
    let record = world.world().record.clone().unwrap();
    assert!(
        record.has_served() && record.cluster_id == Some(1),
        "{record:?}"
    );
}

#[tokio::test]
async fn a_hand_out_split_between_its_bundle_and_its_end_is_done_again_whole() {
    // Was: the end first, then the bundle: split, the config was published without a bundle
    // and the instance waited for it for ever (until LEARNER_START_TIMEOUT_SECS).
    let world = Fake::default();
    let mut r = reconciler_with(&world, &[("TLS", "managed")]);
    r.ca = crate::pki::Ca::generate("etcd", 1000).unwrap().into();
    world.launch(1);
    world.world().faults.split.insert("hand-out");
    let _ = r.handle(&schedule(), far()).await;
    {
        let w = world.world();
        assert!(w.tls.contains_key("i-00000001"));
        assert!(!w.cert_not_after.contains_key("i-00000001"));
        assert!(w.issuing.contains("i-00000001"), "its end says issuing");
        assert!(
            !w.configs.contains_key("i-00000001"),
            "no config before its bundle's end"
        );
    }
    world.world().faults.split.clear();
    let first = world.world().tls.get("i-00000001").cloned();
    for _ in 0..6 {
        r.handle(&schedule(), far()).await.unwrap();
        world.boot();
        world.world().now += 5;
    }
    let w = world.world();
    assert!(w.configs.contains_key("i-00000001") && w.cert_not_after.contains_key("i-00000001"));
    assert_ne!(w.tls.get("i-00000001").cloned(), first, "handed out again");
    assert_eq!(w.members.len(), 1);
}

#[tokio::test]
async fn a_hand_out_split_for_an_instance_that_then_left_leaves_no_bundle_behind() {
    let world = Fake::default();
    let mut r = reconciler_with(&world, &[("TLS", "managed")]);
    r.ca = crate::pki::Ca::generate("etcd", 1000).unwrap().into();
    world.launch(1);
    world.launch(2);
    world.world().faults.split.insert("hand-out");
    let _ = r.handle(&schedule(), far()).await;
    world.world().faults.split.clear();
    assert!(world.world().tls.contains_key("i-00000001"));
    // The seed's instance goes before anything else is written for it.
    world.world().instances.retain(|i| i.id != "i-00000001");
    for _ in 0..8 {
        let _ = r.handle(&schedule(), far()).await;
        world.boot();
        world.world().now += 5;
    }
    let w = world.world();
    assert!(!w.tls.contains_key("i-00000001"), "{:#?}", w.calls);
    assert!(!w.issuing.contains("i-00000001"));
    assert!(w.calls.contains(&"take-back i-00000001".to_string()));
}

#[tokio::test]
async fn halves_of_backups_a_store_or_a_prune_left_are_pruned_once_old() {
    // Was: `list()` showed only snapshots with a manifest, so a snapshot whose manifest was never
    // written (or whose prune stopped after the manifest) stayed for ever.
    let world = three_member_cluster().await;
    world.world().data = "kept".into();
    world.world().faults.split.insert("store");
    let r = with_backups(&world);
    r.handle(&schedule(), far()).await.unwrap();
    let orphan = {
        let w = world.world();
        assert!(w.bucket.is_empty());
        w.incomplete
            .keys()
            .next()
            .cloned()
            .expect("a snapshot without a manifest")
    };
    world.world().faults.split.clear();
    // A fresh environment (this one waits after a failed backup): within the hour the half is
    // kept (a store may still be under way); then pruned.
    let r = with_backups(&world);
    world.world().now += 600;
    r.handle(&schedule(), far()).await.unwrap();
    assert!(world.world().incomplete.contains_key(&orphan));
    world.world().now += crate::planner::backup::INCOMPLETE_SECS;
    for _ in 0..3 {
        r.handle(&schedule(), far()).await.unwrap();
    }
    assert!(
        !world.world().incomplete.contains_key(&orphan),
        "{:#?}",
        world.calls()
    );
    assert!(world.calls().contains(&format!("delete {orphan}")));
}

#[tokio::test]
async fn a_reseed_split_between_its_fence_and_the_record_is_rolled_forward_as_decided() {
    let world = Fake::default();
    for n in 1..=3 {
        world.launch(n);
    }
    world.world().dead.insert("i-00000001".into());
    let r = reconciler(&world);
    r.handle(&schedule(), far()).await.unwrap();
    world.world().now += 10_000;
    world.world().faults.split.insert("reseed");
    let _ = r.handle(&schedule(), far()).await; // abandon 1; the fence, not the record
    let decided = {
        let w = world.world();
        assert_eq!(w.record.as_ref().unwrap().seed, "i-00000001");
        match w.decided.values().next() {
            Some(crate::model::Decision::Replaced(new)) => *new.clone(),
            other => panic!("{other:?}"),
        }
    };
    world.world().faults.split.clear();
    world.world().now += 60;
    r.handle(&schedule(), far()).await.unwrap();
    assert_eq!(world.world().record.clone(), Some(decided));
}

#[tokio::test]
async fn a_restore_split_between_its_fence_and_the_record_is_rolled_forward_as_decided() {
    let world = three_member_cluster().await;
    world.world().data = "precious".into();
    let r = with_backups(&world);
    r.handle(&schedule(), far()).await.unwrap();
    {
        let mut w = world.world();
        w.instances.clear();
        w.members.clear();
        w.data.clear();
    }
    for n in 4..=6 {
        world.launch(n);
    }
    world.world().faults.split.insert("restore");
    let _ = r.handle(&schedule(), far()).await;
    let decided = world.world().restored.values().next().cloned().unwrap();
    world.world().faults.split.clear();
    world.world().now += 60;
    // The oldest launching instance goes meanwhile: still the decided seed, not another.
    r.handle(&schedule(), far()).await.unwrap();
    assert_eq!(world.world().record.clone(), Some(decided.clone()));
    converge_with(&r, &world).await;
    assert_eq!(world.world().data, "precious");
    let hand_overs: Vec<String> = world
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("hand-over"))
        .collect();
    assert!(
        hand_overs.iter().all(|c| c.ends_with(&decided.seed)),
        "{hand_overs:?}"
    );
}

#[tokio::test]
async fn a_ca_whose_create_answer_was_lost_is_the_one_used() {
    let world = Fake::default();
    world.world().faults.split.insert("create-ca");
    let r = reconciler_with(&world, &[("TLS", "managed")]);
    world.launch(1);
    r.handle(&schedule(), far()).await.unwrap_err();
    let stored = world.world().ca.clone().expect("the create was applied");
    world.world().faults.split.clear();
    let r = reconciler_with(&world, &[("TLS", "managed")]);
    r.handle(&schedule(), far()).await.unwrap();
    assert_eq!(r.ca.get().map(|ca| &ca.cert_pem), Some(&stored.cert_pem));
    let creates = world.calls().iter().filter(|c| *c == "create-ca").count();
    assert_eq!(creates, 1, "{:#?}", world.calls());
}

#[tokio::test]
async fn while_ssm_fails_a_held_termination_is_heartbeated_as_often_as_its_hook_needs() {
    let world = termination_held_for_quorum().await;
    world.world().faults.hook_timeout = Some(Duration::from_millis(1200));
    let r = reconciler(&world);
    r.handle(&schedule(), far()).await.unwrap();
    world.world().faults.fail.insert("load");
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        r.handle(&schedule(), far()).await.unwrap_err();
    }
    // A heartbeat once an eighth of the 1.2 s timeout passed: over 1.5 s, several.
    let n = beats(&world, "heartbeat terminate i-00000003");
    assert!(n >= 4, "{n}: {:#?}", world.calls());
}

#[tokio::test]
async fn an_observation_that_fails_once_is_made_again_within_a_lifecycle_invocation() {
    // A lifecycle event's invocation may wait (its budget): SSM throttled once costs a pause, not
    // the invocation (and a minute until the next schedule).
    let world = three_member_cluster().await;
    world.launch(4);
    world.world().faults.fail_once.insert("load");
    let r = reconciler_with(&world, &[("WAIT_BUDGET_SECS", "1")]);
    let resp = r
        .handle(&lifecycle_event("launch", "i-00000004"), far())
        .await
        .unwrap();
    let (steps, _, _) = reconciled(&resp);
    assert!(
        steps.iter().any(|s| s.starts_with("add-learner")),
        "{resp:?}"
    );
    assert!(world.calls().contains(&"load failed".to_string()));
    // A scheduled run never waits: it fails, and the next schedule looks again.
    world.world().faults.fail_once.insert("load");
    r.handle(&schedule(), far()).await.unwrap_err();
}
