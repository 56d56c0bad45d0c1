//! `record.rs` (rules 0, 1): the cluster record stays true, and a cluster is bootstrapped
//! exactly once; a seed that never serves is abandoned, and re-seeded while the record never
//! served.

use super::*;

#[test]
fn empty_group_does_nothing() {
    assert_eq!(given(vec![]).plan(), Step::Idle);
}

#[test]
fn no_record_and_no_member_creates_the_cluster_seeded_by_the_oldest_instance() {
    let mut young = inst(1, PendingWait);
    young.launched_at = 50;
    let g = given(vec![young, inst(3, PendingWait), inst(2, PendingWait)]);
    assert_eq!(
        g.plan(),
        Step::CreateCluster(ClusterRecord::bootstrapping(
            "etcd-i-00000002".into(),
            i(2),
            1000
        ))
    );
}

#[test]
fn seed_ties_on_launch_time_are_broken_by_instance_id() {
    let mut a = inst(4, PendingWait);
    let mut b = inst(3, PendingWait);
    a.launched_at = 9;
    b.launched_at = 9;
    match given(vec![a, b]).plan() {
        Step::CreateCluster(r) => assert_eq!(r.seed, i(3)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn terminating_instances_are_never_seeds() {
    let g = given(vec![inst(1, TerminatingWait), inst(2, PendingWait)]);
    assert!(matches!(g.plan(), Step::CreateCluster(r) if r.seed == i(2)));
}

#[test]
fn instances_in_service_never_seed_a_cluster() {
    // No record and nobody answering, but these may run an etcd the function cannot reach.
    let g = given(vec![inst(1, InService), inst(2, InService)]);
    assert_eq!(g.plan(), Step::Idle);
    let g = given(vec![inst(1, InService), inst(2, PendingWait)]);
    assert!(matches!(g.plan(), Step::CreateCluster(r) if r.seed == i(2)));
}

#[test]
fn after_the_record_the_seed_gets_a_new_cluster_config_of_itself() {
    let g = given(vec![inst(1, PendingWait), inst(2, PendingWait)]).bootstrapping(1);
    assert_eq!(
        g.plan(),
        Step::Publish {
            instance: i(1),
            instance_arn: arn(1),
            config: seed_config(1),
            certificate: None
        }
    );
}

#[test]
fn once_the_seed_config_is_out_it_waits_for_the_seed() {
    let g = given(vec![inst(1, PendingWait)])
        .bootstrapping(1)
        .published(1, seed_config(1), 999);
    assert_eq!(g.plan(), Step::Wait(Wait::SeedStarting { instance: i(1) }));
}

#[test]
fn a_record_and_no_member_answering_never_bootstraps_again() {
    // The seed is gone and nobody answers: an unreachable cluster, not a new one.
    let g = given(vec![inst(2, PendingWait), inst(3, InService)]).record(1);
    assert!(matches!(
        g.plan(),
        Step::Wait(Wait::ClusterUnreachable { .. })
    ));
}

#[test]
fn a_seed_in_service_with_nobody_answering_is_an_unreachable_cluster_not_a_bootstrap() {
    // Even with the seed's config gone, a `new` config is never written again once it served.
    let g = given(vec![inst(1, InService), inst(2, InService)]).record(1);
    assert!(matches!(
        g.plan(),
        Step::Wait(Wait::ClusterUnreachable { .. })
    ));
}

#[test]
fn a_seed_that_never_starts_is_abandoned_after_the_start_timeout() {
    let g = given(vec![inst(1, PendingWait), inst(2, PendingWait)])
        .bootstrapping(1)
        .published(1, seed_config(1), 1000 - 601);
    assert_eq!(
        g.plan(),
        complete(1, Transition::Launch, ActionResult::Abandon)
    );
}

#[test]
fn a_record_whose_seed_never_served_and_is_gone_is_reseeded() {
    let g = given(vec![inst(3, PendingWait), inst(2, PendingWait)]).bootstrapping(1);
    let Step::ReseedCluster { old, new, .. } = g.plan() else {
        panic!("{:?}", g.plan())
    };
    assert_eq!(old.seed, i(1));
    assert_eq!(new.seed, i(2));
    assert_ne!(new.token, old.token, "a new cluster never reuses the token");
    assert!(!new.has_served());
    // Leaving counts as gone: its terminate action is released first.
    let g = given(vec![inst(1, TerminatingWait), inst(2, PendingWait)]).bootstrapping(1);
    assert_eq!(
        g.plan(),
        complete(1, Transition::Terminate, ActionResult::Continue)
    );
    // Nobody to seed: wait for a launch.
    let g = given(vec![inst(2, InService)]).bootstrapping(1);
    assert_eq!(g.plan(), Step::Wait(Wait::NoSeed));
}

#[test]
fn a_record_that_served_is_never_reseeded() {
    let g = given(vec![inst(2, PendingWait)]).record(1);
    assert!(matches!(
        g.plan(),
        Step::Wait(Wait::ClusterUnreachable { .. })
    ));
    // Nor is a record written before `state` existed.
    let legacy: ClusterRecord =
        serde_json::from_str(r#"{"token":"etcd-i-00000001","seed":"i-00000001","created_at":1}"#)
            .unwrap();
    let mut g = given(vec![inst(2, PendingWait)]);
    g.obs.published.cluster = Some(legacy);
    assert!(matches!(
        g.plan(),
        Step::Wait(Wait::ClusterUnreachable { .. })
    ));
}

#[test]
fn the_record_notes_that_the_cluster_served_with_its_id() {
    let g = given(vec![inst(1, PendingWait)])
        .bootstrapping(1)
        .members(vec![voter(1)]);
    let Step::MarkServed(r) = g.plan() else {
        panic!("{:?}", g.plan())
    };
    assert!(r.has_served());
    assert_eq!(r.cluster_id, Some(7));
    assert_eq!(r.seed, i(1));
}

#[test]
fn a_member_of_another_cluster_is_never_believed() {
    let mut g = given(vec![inst(1, InService), inst(2, PendingWait)])
        .record(1)
        .members(vec![voter(1)]);
    g.obs.published.cluster.as_mut().unwrap().cluster_id = Some(8);
    assert!(matches!(
        g.plan(),
        Step::Wait(Wait::ClusterUnreachable { .. })
    ));
}

#[test]
fn once_the_cluster_served_the_seed_config_never_says_new_again() {
    let g = given(vec![inst(1, InService), inst(2, InService)])
        .record(1)
        .members(vec![voter(1), voter(2)])
        .published(1, seed_config(1), 5)
        .some_config(2);
    let Step::Publish {
        instance, config, ..
    } = g.plan()
    else {
        panic!("{:?}", g.plan())
    };
    assert_eq!(instance, i(1));
    assert_eq!(config.state, InitialState::Existing);
}

#[test]
fn published_configs_name_the_release_and_its_corruption_checks() {
    let g = given(vec![running(1, PendingWait, "3.5.36")]).bootstrapping(1);
    let Step::Publish { config, .. } = g.plan() else {
        panic!("{:?}", g.plan())
    };
    let env = config.to_env();
    assert!(env.contains("ETCD_ASG_ETCD_VERSION=3.5.36\n"), "{env}");
    assert!(
        env.contains("ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED=true\n"),
        "{env}"
    );
    assert_eq!(MemberConfig::parse_env(&env).unwrap(), config);
    let g = given(vec![running(1, PendingWait, "3.7.4")]).bootstrapping(1);
    let Step::Publish { config, .. } = g.plan() else {
        panic!()
    };
    assert!(config
        .to_env()
        .contains("ETCD_FEATURE_GATES=InitialCorruptCheck=true,CompactHashCheck=true\n"));
}
