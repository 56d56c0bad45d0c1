//! `joining.rs`'s version gate (rule 5): what `crate::versions` lets join (an upgrade's floor, one
//! minor at a time), and a launch refused for a release etcd would never admit (crate::versions
//! has the rules' own table).

use super::*;

/// A 3.5 cluster of two voters running `second`'s release beside 3.5.36, and a 3.6 joiner.
fn a_3_6_joiner_beside(second: &str) -> Given {
    given(vec![
        running(1, InService, "3.5.36"),
        running(2, InService, second),
        running(4, PendingWait, "3.6.17"),
    ])
    .record(1)
    .members(vec![voter(1), voter(2)])
    .versions("3.5.0", &["3.5.36", second])
}

#[test]
fn a_joiner_of_the_next_minor_waits_for_every_member_at_the_floor_and_names_them() {
    let g = a_3_6_joiner_beside("3.5.30");
    let plan = assess(&g.obs, &settings());
    let Step::Wait(Wait::VersionGate { instance, why }) = &plan.step else {
        panic!("{plan:?}")
    };
    assert_eq!(instance, &i(4));
    assert!(
        why.contains("i-00000002 runs 3.5.30") && why.contains("3.5.32"),
        "{why}"
    );
    // Another joiner of the cluster's minor is not held behind it.
    let mut g = g;
    g.obs.instances.push(running(5, PendingWait, "3.5.36"));
    assert!(matches!(g.plan(), Step::AddLearner { instance, .. } if instance == i(5)));
    // Every member at the floor: the 3.6 joiner is added.
    let g = a_3_6_joiner_beside("3.5.32");
    assert!(matches!(g.plan(), Step::AddLearner { instance, .. } if instance == i(4)));
}

#[test]
fn a_joiner_older_than_the_cluster_version_or_two_minors_ahead_is_refused_at_launch() {
    for (joiner, cluster, member) in [("3.5.36", "3.6.0", "3.6.17"), ("3.7.4", "3.5.0", "3.5.36")] {
        let g = given(vec![
            running(1, InService, member),
            running(4, PendingWait, joiner),
        ])
        .record(1)
        .members(vec![voter(1)])
        .versions(cluster, &[member]);
        let Step::RefuseLaunch { instance, why } = g.plan() else {
            panic!("{joiner} into {cluster}: {:?}", g.plan())
        };
        assert_eq!(instance, i(4));
        assert!(why.contains(joiner), "{why}");
    }
    // One already in service is never abandoned: it waits, named.
    let g = given(vec![
        running(1, InService, "3.6.17"),
        running(4, InService, "3.5.36"),
    ])
    .record(1)
    .members(vec![voter(1)])
    .versions("3.6.0", &["3.6.17"]);
    assert!(matches!(g.plan(), Step::Wait(Wait::VersionGate { instance, .. }) if instance == i(4)));
}

#[test]
fn an_instance_that_declares_no_version_is_never_joined_or_seeded() {
    let g = given(vec![
        running(1, InService, "3.6.17"),
        running(4, PendingWait, ""),
    ])
    .record(1)
    .members(vec![voter(1)]);
    assert!(
        matches!(g.plan(), Step::Wait(Wait::VersionGate { instance, why }) if instance == i(4) && why.contains("etcd-asg-etcd-version"))
    );
    // A seed without one: the record is created, its config never published.
    let g = given(vec![running(1, PendingWait, "")]).bootstrapping(1);
    assert_eq!(
        g.plan(),
        Step::Wait(Wait::VersionUnknown { instance: i(1) })
    );
}

/// (e) The join gate: no etcd 3.5 or later joins a 3.4 cluster with authentication on
/// (https://etcd.io/docs/v3.5/upgrades/upgrade_3_5/); its launch is refused, as for any release
/// etcd would never admit.
#[test]
fn the_join_gate_refuses_35_into_a_34_cluster_with_authentication_on() {
    let g = |auth: bool| {
        let mut g = given(vec![inst(1, InService), inst(2, PendingWait)])
            .members(vec![voter(1)])
            .record(1);
        let v = view_mut(&mut g);
        v.cluster_version = Some(Version::new(3, 4, 0));
        v.auth_enabled = auth;
        g.obs.instances[1].etcd_version = Some(Version::new(3, 5, 30));
        g
    };
    assert!(
        matches!(g(true).plan(), Step::RefuseLaunch { ref instance, ref why } if *instance == i(2) && why.contains("authentication on")),
        "{:?}",
        g(true).plan()
    );
    assert!(
        matches!(g(false).plan(), Step::AddLearner { .. }),
        "{:?}",
        g(false).plan()
    );
}
