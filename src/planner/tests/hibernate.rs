//! `hibernate.rs` (rules 0, 1, 2): a group scaled to zero keeps its data in a final snapshot,
//! its writes fenced first, and wakes from exactly that snapshot.

use super::*;

fn sleeping_at(revision: i64) -> crate::model::Sleeping {
    crate::model::Sleeping {
        key: backup_at(revision).key,
        revision,
        since: 1000,
    }
}

fn fence() -> Alarm {
    Alarm {
        member: FENCE,
        kind: NOSPACE.into(),
    }
}

/// The function's write fence raised, as the cluster reports it.
fn fenced(mut g: Given) -> Given {
    if let ClusterState::Known(v) = &mut g.obs.cluster {
        v.alarms.push(fence());
    }
    g
}

/// Before the last voter's final snapshot, writes are fenced (NOSPACE, raised by the function
/// for no member), so that none is acknowledged after the snapshot and lost at the wake.
#[test]
fn writes_are_fenced_before_the_final_snapshot() {
    let mut g = with_backups(given(vec![inst(1, TerminatingWait)]))
        .record(1)
        .some_config(1)
        .members(vec![voter(1)])
        .status(1, 70);
    g.obs.backups = vec![backup_at(60)];
    assert_eq!(
        g.plan(),
        Step::FenceWrites {
            alarm: fence(),
            endpoint: "http://10.0.0.1:2379".into()
        }
    );
    assert!(matches!(
        fenced(g).plan(),
        Step::Backup {
            reason: BackupReason::Final,
            ..
        }
    ));
}

/// From a review: the fence came only when a new snapshot was needed. A quiet cluster whose
/// removal of the second-to-last voter had just taken a snapshot at the last voter's revision
/// went to sleep unfenced, and writes acknowledged before its etcd stopped were lost at the
/// wake. The fence comes first whatever backup there is; the revision read after it decides.
#[test]
fn the_fence_comes_first_even_when_a_snapshot_is_already_as_new() {
    let g = || {
        let mut g = with_backups(given(vec![inst(1, TerminatingWait)]))
            .record(1)
            .some_config(1)
            .members(vec![voter(1)])
            .status(1, 70);
        g.obs.backups = vec![backup_at(70)];
        g
    };
    assert!(
        matches!(g().plan(), Step::FenceWrites { .. }),
        "{:?}",
        g().plan()
    );
    assert!(
        matches!(fenced(g()).plan(), Step::Sleep(_)),
        "{:?}",
        fenced(g()).plan()
    );
}

/// From a review: etcd 3.4 and 3.5 rebuild their applier without its authorization layer under
/// NOSPACE (etcd PR #22386): with authentication on below 3.6 no fence is raised (any client
/// could change users and roles while it is up); on 3.6 it is.
#[test]
fn no_fence_on_a_cluster_below_3_6_with_authentication_on() {
    let g = |cluster: &str| {
        let mut g = with_backups(given(vec![inst(1, TerminatingWait)]))
            .record(1)
            .some_config(1)
            .members(vec![voter(1)])
            .status(1, 70);
        g.obs.backups = vec![backup_at(60)];
        if let ClusterState::Known(v) = &mut g.obs.cluster {
            v.auth_enabled = true;
            v.cluster_version = cluster.parse().ok();
        }
        g
    };
    assert!(
        matches!(
            g("3.5.0").plan(),
            Step::Backup {
                reason: BackupReason::Final,
                ..
            }
        ),
        "{:?}",
        g("3.5.0").plan()
    );
    assert!(matches!(g("unknown").plan(), Step::Backup { .. }));
    assert!(matches!(g("3.6.0").plan(), Step::FenceWrites { .. }));
    // Unfenced, writes outran a final snapshot taken 30 s ago: the next waits out the minute,
    // the operator told why; fenced, a moved revision (a revocation) is snapshotted at once.
    let outrun = |cluster: &str, ago: i64| {
        let mut g = g(cluster);
        g.obs.backups[0].taken_at = g.obs.now - ago;
        g
    };
    let Step::Wait(w) = outrun("3.5.0", 30).plan() else {
        panic!("{:?}", outrun("3.5.0", 30).plan())
    };
    assert_eq!(w.name(), "final-snapshot-pending");
    let said = w.why();
    assert!(
        said.contains("revision 60 of 70") && said.contains("in 30 s"),
        "{said}"
    );
    assert!(matches!(outrun("3.5.0", 60).plan(), Step::Backup { .. }));
    assert!(matches!(
        fenced(outrun("3.6.0", 30)).plan(),
        Step::Backup { .. }
    ));
}

#[test]
fn the_last_voter_of_a_group_scaled_to_zero_goes_only_after_its_final_snapshot_and_the_record_says_so(
) {
    let base = || {
        with_backups(given(vec![inst(1, TerminatingWait)]))
            .record(1)
            .some_config(1)
            .members(vec![voter(1)])
            .status(1, 70)
    };
    // Its newest backup is older than its revision, writes fenced (below): a final snapshot.
    let mut g = fenced(base());
    g.obs.backups = vec![backup_at(60)];
    let step = g.plan();
    assert!(
        matches!(&step, Step::Backup { member, reason: BackupReason::Final, facts, .. }
            if *member == id(1) && facts.revision == 70),
        "{step:?}"
    );
    assert!(step.why().contains("final"), "{}", step.why());
    // The snapshot holds its revision: the record says the cluster sleeps there.
    g.obs.backups = vec![backup_at(60), backup_at(70)];
    let step = g.plan();
    let Step::Sleep(record) = &step else {
        panic!("{step:?}")
    };
    assert_eq!(record.sleeping, Some(sleeping_at(70)));
    assert_eq!(step.name(), "hibernate");
    // Recorded: then it goes as before (its config, then its action).
    g.obs.published.cluster.as_mut().unwrap().sleeping = Some(sleeping_at(70));
    assert!(
        matches!(g.plan(), Step::Unpublish { ref instance, .. } if *instance == i(1)),
        "{:?}",
        g.plan()
    );
    // A write after the snapshot (a delete, which NOSPACE lets through): snapshot again.
    let mut later = fenced(base().status(1, 75));
    later.obs.backups = vec![backup_at(70)];
    later.obs.published.cluster.as_mut().unwrap().sleeping = Some(sleeping_at(70));
    assert!(
        matches!(
            later.plan(),
            Step::Backup {
                reason: BackupReason::Final,
                ..
            }
        ),
        "{:?}",
        later.plan()
    );
    // The store fails: held, and says why.
    let mut failing = base();
    failing.obs.backups_failing = Some("AccessDenied".into());
    assert!(
        matches!(failing.plan(), Step::Wait(Wait::FinalSnapshotPending { ref instance, ref why })
            if *instance == i(1) && why.contains("AccessDenied")),
        "{:?}",
        failing.plan()
    );
    // Without backups there is nowhere to keep the data: it goes, as it always did.
    let mut none = base();
    none.settings = None;
    assert!(
        matches!(none.plan(), Step::Unpublish { ref instance, .. } if *instance == i(1)),
        "{:?}",
        none.plan()
    );
}

/// It wakes from the newest snapshot of the sleeping generation, whatever RECOVERY says: the
/// recorded final snapshot, or a newer one of the same generation (a newer final snapshot, or
/// one taken before a removal when the group was scaled up again before the last voter left),
/// never an older one.
#[test]
fn a_sleeping_cluster_wakes_from_the_newest_snapshot_of_its_generation_whatever_recovery_says() {
    let mut s = settings();
    s.backup = Some(crate::config::BackupPolicy {
        interval_secs: 900,
        hourly_days: 7,
        daily_days: 90,
        recovery: crate::config::Recovery::Manual,
    });
    let mut g = given(vec![]).record(1);
    g.obs.published.cluster.as_mut().unwrap().sleeping = Some(sleeping_at(70));
    // An older backup of the generation, and the final snapshot.
    g.obs.backups = vec![backup_at(50), backup_at(70)];
    // Nobody launching: asleep, and says where.
    assert_eq!(
        plan(&g.obs, &s),
        Step::Wait(Wait::Asleep {
            key: backup_at(70).key,
            revision: 70
        })
    );
    // The group scaled up: restored from the final snapshot, no restore request awaited.
    g.obs.instances = vec![running(5, PendingWait, "3.6.17")];
    let step = plan(&g.obs, &s);
    assert!(
        matches!(&step, Step::Restore { backup, new, .. }
            if backup.key == backup_at(70).key && new.sleeping.is_none() && new.seed == i(5)),
        "{step:?}"
    );
    // A newer snapshot of the same generation than the recorded one: that one.
    let mut newer = backup_at(90);
    newer.taken_at = 950;
    g.obs.backups.push(newer.clone());
    let step = plan(&g.obs, &s);
    assert!(
        matches!(&step, Step::Restore { backup, .. } if backup.key == newer.key),
        "{step:?}"
    );
    // Another generation's newer backup is not this cluster's data: never chosen.
    let mut foreign = backup_at(95);
    foreign.token = "etcd-other".into();
    foreign.key = "p/etcd-other/95.db".into();
    foreign.taken_at = 990;
    g.obs.backups.push(foreign);
    assert!(matches!(plan(&g.obs, &s), Step::Restore { backup, .. } if backup.key == newer.key));
}

/// The fence is lifted once the group wants members again: woken from a final snapshot that
/// carries it, or scaled back up before the last voter left; never while it sleeps.
#[test]
fn the_write_fence_is_lifted_once_the_group_wants_members_again() {
    let fence = fence();
    let mut g = with_backups(given(vec![inst(1, InService)]))
        .record(1)
        .some_config(1)
        .members(vec![voter(1)])
        .desired(1);
    if let ClusterState::Known(v) = &mut g.obs.cluster {
        v.alarms.push(fence.clone());
    }
    assert_eq!(
        g.plan(),
        Step::Disarm {
            alarm: fence.clone(),
            endpoint: "http://10.0.0.1:2379".into()
        }
    );
    assert!(g.plan().why().contains("fence"), "{}", g.plan().why());
    // Still scaling to zero: kept.
    g.obs.instances[0].state = TerminatingWait;
    g.obs.desired_capacity = 0;
    assert!(!matches!(g.plan(), Step::Disarm { .. }), "{:?}", g.plan());
    // From a review: the record sleeps (the last voter's action completed, its etcd not yet
    // stopped) and the group is scaled up again: kept until a voter serves and the record wakes;
    // lifted, the dying voter would acknowledge writes the wake then loses.
    g.obs.desired_capacity = 1;
    g.obs.published.cluster.as_mut().unwrap().sleeping = Some(sleeping_at(70));
    assert!(!matches!(g.plan(), Step::Disarm { .. }), "{:?}", g.plan());
}

#[test]
fn a_group_scaled_back_up_before_its_last_voter_left_is_awake_again() {
    let mut g = with_backups(given(vec![inst(1, InService)]))
        .record(1)
        .members(vec![voter(1)])
        .desired(1);
    g.obs.published.cluster.as_mut().unwrap().sleeping = Some(sleeping_at(70));
    let step = g.plan();
    assert!(
        matches!(&step, Step::Sleep(r) if r.sleeping.is_none()),
        "{step:?}"
    );
    assert_eq!(step.name(), "wake");
}

#[test]
fn hibernation_never_lets_data_go_on_a_guess() {
    // The last voter does not answer its status: held, no snapshot can be taken of it.
    let g = with_backups(given(vec![inst(1, TerminatingWait)]))
        .record(1)
        .some_config(1)
        .members(vec![voter(1)])
        .unhealthy(1);
    assert!(
        matches!(g.plan(), Step::Wait(Wait::FinalSnapshotPending { ref why, .. }) if why.contains("status")),
        "{:?}",
        g.plan()
    );
    // The group wants an instance again while the last voter is only on its way out: still
    // asleep in the record until a voter serves on an instance in service.
    let mut leaving = with_backups(given(vec![inst(1, TerminatingWait)]))
        .record(1)
        .some_config(1)
        .members(vec![voter(1)])
        .status(1, 70)
        .desired(1);
    leaving.obs.published.cluster.as_mut().unwrap().sleeping = Some(sleeping_at(70));
    assert!(
        !matches!(leaving.plan(), Step::Sleep(_)),
        "{:?}",
        leaving.plan()
    );
    // Its final snapshot gone from the bucket: nothing else restored on a guess, even with
    // RECOVERY=auto; an operator names one.
    let mut gone = with_backups(given(vec![running(5, PendingWait, "3.6.17")])).record(1);
    gone.obs.published.cluster.as_mut().unwrap().sleeping = Some(sleeping_at(70));
    gone.obs.backups = vec![backup_at(60)];
    assert!(
        matches!(gone.plan(), Step::Wait(Wait::AwaitRestoreRequest { .. })),
        "{:?}",
        gone.plan()
    );
}
