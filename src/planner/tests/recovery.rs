//! `recovery.rs` (rule 1): a lost cluster is restored from its survivors (a majority's
//! instances left the group for good, the rest answer) or from a backup, never on a guess; and
//! what a new stack's first generation starts from.

use super::*;

#[test]
fn a_lost_majority_with_a_newer_survivor_is_snapshotted_then_restored_from_it() {
    // 1, 2 and 3 were voters; 2 and 3 left the group for good; 1 answers without a leader; a
    // replacement (4) is launching.
    let g = || {
        with_backups(given(vec![inst(1, InService), inst(4, PendingWait)]))
            .record(1)
            .some_config(1)
            .some_config(2)
            .some_config(3)
            .survivors(vec![survivor(1, 50, &[1, 2, 3])])
    };
    let mut first = g();
    first.obs.backups = vec![backup_at(40)];
    assert_eq!(
        first.plan(),
        Step::Backup {
            member: id(1),
            endpoint: "http://10.0.0.1:2379".into(),
            reason: BackupReason::Survivor,
            // The lost generation's, as the survivor answers for itself.
            facts: SnapshotFacts {
                token: format!("etcd-{}", i(1)),
                revision: 50,
                cluster_id: 7,
                member: id(1).to_string(),
                etcd_version: String::new(),
                cluster_version: None,
                taken_at: 1000,
            }
        }
    );
    // Once its snapshot is stored (newest, revision 50), the restore seeds from 4.
    let mut then = g();
    let saved = Backup {
        key: "p/etcd-i-00000001/50".into(),
        taken_at: 1000,
        ..backup_at(50)
    };
    then.obs.backups = vec![backup_at(40), saved.clone()];
    assert!(
        matches!(then.plan(), Step::Restore { new, backup, .. } if new.seed == i(4) && backup == saved)
    );
    // A survivor behind the last backup is not snapshotted: the backup is restored.
    let mut behind = g();
    behind.obs.backups = vec![backup_at(60)];
    assert!(matches!(behind.plan(), Step::Restore { backup, .. } if backup.revision == 60));
    // While the store fails, which backup is freshest is unknown: nothing is snapshotted or
    // restored on a guess.
    for mut failing in [g(), then, behind] {
        failing.obs.backups = vec![];
        failing.obs.backups_failing = Some("AccessDenied".into());
        assert!(
            matches!(failing.plan(), Step::Wait(Wait::ClusterUnreachable { ref detail }) if detail.contains("backup store fails")),
            "{:?}",
            failing.plan()
        );
    }
}

#[test]
fn survivors_never_trigger_a_restore_while_a_lost_voter_might_come_back() {
    let base = |instances: Vec<Instance>, survivors: Vec<Survivor>| {
        let mut g = with_backups(given(instances))
            .record(1)
            .some_config(1)
            .some_config(2)
            .some_config(3)
            .survivors(survivors);
        g.obs.backups = vec![backup_at(10)];
        g
    };
    let unreachable = |g: Given| matches!(g.plan(), Step::Wait(Wait::ClusterUnreachable { .. }));
    // A partition: 2 and 3 are still in the group (whatever etcd says).
    assert!(unreachable(base(
        vec![inst(1, InService), inst(2, InService), inst(3, InService)],
        vec![survivor(1, 50, &[1, 2, 3])]
    )));
    // Terminating but still in the group: not gone yet.
    assert!(unreachable(base(
        vec![
            inst(1, InService),
            inst(2, TerminatingWait),
            inst(4, PendingWait)
        ],
        vec![survivor(1, 50, &[1, 2, 3])]
    )));
    // Only a minority lost (3 of 5 remain, one of them silent): the quorum may come back.
    assert!(unreachable(base(
        vec![inst(1, InService), inst(2, InService), inst(3, InService)],
        vec![
            survivor(1, 50, &[1, 2, 3, 4, 5]),
            survivor(2, 50, &[1, 2, 3, 4, 5])
        ]
    )));
    // A majority lost, but a remaining voter does not answer: it may hold newer data.
    assert!(unreachable(base(
        vec![inst(1, InService), inst(2, InService), inst(6, PendingWait)],
        vec![survivor(1, 50, &[1, 2, 3, 4, 5])]
    )));
    // A survivor of another cluster says nothing of ours.
    let mut foreign = survivor(1, 50, &[1, 2, 3]);
    foreign.cluster_id = 8;
    assert!(unreachable(base(
        vec![inst(1, InService), inst(4, PendingWait)],
        vec![foreign]
    )));
    // Backups off: nothing to restore into, so nothing changes.
    let mut off = base(
        vec![inst(1, InService), inst(4, PendingWait)],
        vec![survivor(1, 50, &[1, 2, 3])],
    );
    off.settings = None;
    assert!(unreachable(off));
    // Both remaining voters of five answer, three are gone: the freshest (2) is snapshotted.
    let g = base(
        vec![inst(1, InService), inst(2, InService), inst(6, PendingWait)],
        vec![
            survivor(1, 40, &[1, 2, 3, 4, 5]),
            survivor(2, 50, &[1, 2, 3, 4, 5]),
        ],
    );
    assert!(matches!(g.plan(), Step::Backup { member, .. } if member == id(2)));
}

#[test]
fn survivors_restore_only_when_every_list_agrees_and_every_member_of_the_generation_answers() {
    let base = |instances: Vec<Instance>, survivors: Vec<Survivor>| {
        let mut g = with_backups(given(instances))
            .record(1)
            .some_config(1)
            .some_config(2)
            .survivors(survivors);
        g.obs.backups = vec![backup_at(10)];
        g
    };
    let unreachable = |g: &Given| matches!(g.plan(), Step::Wait(Wait::ClusterUnreachable { .. }));
    // 1's list is stale ({1,2,3,4,5}: 3 of 5 gone), 2's is current ({1,2,3}: 2 of 3 remain, a
    // quorum that comes back when the partition between them heals): no restore.
    let g = base(
        vec![inst(1, InService), inst(2, InService), inst(6, PendingWait)],
        vec![
            survivor(1, 50, &[1, 2, 3, 4, 5]),
            survivor(2, 50, &[1, 2, 3]),
        ],
    );
    assert!(unreachable(&g));
    // A learner of this generation on a present instance that does not answer may hold newer
    // data than the voters: wait.
    let mut silent_learner = base(
        vec![
            inst(1, InService),
            inst(2, PendingWait),
            inst(6, PendingWait),
        ],
        vec![survivor(1, 50, &[1, 3, 4])],
    );
    let c = silent_learner.obs.published.members.get_mut(&i(2)).unwrap();
    c.config.token = "etcd-i-00000001".into();
    assert!(unreachable(&silent_learner));
    // Once it answers and is the freshest, its data is what is kept.
    let mut learner = survivor(2, 60, &[1, 3, 4]);
    learner.is_learner = true;
    let g = Given {
        obs: Observation {
            cluster: ClusterState::Unreachable {
                detail: String::new(),
                survivors: vec![survivor(1, 50, &[1, 3, 4]), learner],
            },
            ..silent_learner.obs.clone()
        },
        settings: silent_learner.settings.clone(),
    };
    assert!(matches!(g.plan(), Step::Backup { member, .. } if member == id(2)));
}

/// A total loss, and the group relaunched from a launch template rolled back a minor (3.6):
/// the freshest backup was taken on 3.7 and 3.6 cannot read it. Restoring the older 3.6 backup
/// would drop every write since on a guess: the function waits, naming the backup and the
/// release it needs; an operator may still name the older one.
#[test]
fn a_restore_never_passes_over_the_freshest_backup_for_an_older_readable_one() {
    let taken = |at: i64, version: &str| Backup {
        key: format!("p/etcd-i-00000001/{at}-v{version}.db"),
        token: "etcd-i-00000001".into(),
        taken_at: at,
        revision: at,
        size: 1,
        etcd_version: version.parse().ok(),
    };
    let mut g = given(vec![running(5, PendingWait, "3.6.17")]).record(1);
    g.obs.backups = vec![taken(100, "3.6.17"), taken(200, "3.7.4")];
    let mut s = settings();
    s.backup = Some(crate::config::BackupPolicy {
        interval_secs: 900,
        hourly_days: 7,
        daily_days: 90,
        recovery: crate::config::Recovery::Auto,
    });
    let step = plan(&g.obs, &s);
    let Step::Wait(Wait::NoRestorableBackup {
        backup,
        seed_version,
        needs,
        ..
    }) = &step
    else {
        panic!("{step:?}")
    };
    assert_eq!(
        (backup, seed_version, needs.as_str()),
        (&taken(200, "3.7.4").key, &"3.6.17".to_string(), "3.7")
    );
    assert!(step.why().contains("needs etcd 3.7"), "{}", step.why());
    // The same under RECOVERY=manual with a request for `latest`.
    let mut manual = s.clone();
    manual.backup.as_mut().unwrap().recovery = crate::config::Recovery::Manual;
    g.obs.published.restore_request = Some("latest".into());
    g.obs.published.restore_request_at = Some(900);
    assert!(matches!(
        plan(&g.obs, &manual),
        Step::Wait(Wait::NoRestorableBackup { .. })
    ));
    // The operator names the older backup: restored, the newer one it passes over said so.
    g.obs.published.restore_request = Some(taken(100, "3.6.17").key);
    let step = plan(&g.obs, &manual);
    assert!(
        matches!(&step, Step::Restore { backup, skipped, .. }
        if backup.taken_at == 100 && skipped == &vec![taken(200, "3.7.4").key]),
        "{step:?}"
    );
    assert!(step.why().contains("3.7.4"), "{}", step.why());
    // The template back on 3.7: the freshest is restored.
    g.obs.instances[0].etcd_version = Some(Version::new(3, 7, 4));
    assert!(matches!(plan(&g.obs, &s), Step::Restore { backup, .. } if backup.taken_at == 200));
}

/// A 3.6 member's snapshot of a cluster still at 3.5 holds 3.5's storage (its key says `-s3.5`,
/// `versions::storage_of`): a 3.5 seed restores it.
#[test]
fn a_snapshot_of_a_cluster_still_at_the_older_minor_is_restored_by_that_minor() {
    let mut g = given(vec![running(5, PendingWait, "3.5.36")]).record(1);
    g.obs.backups = vec![Backup {
        key: "p/etcd-i-00000001/200-v3.6.17-s3.5.db".into(),
        token: "etcd-i-00000001".into(),
        taken_at: 200,
        revision: 200,
        size: 1,
        etcd_version: Some(Version::new(3, 5, 0)),
    }];
    let s = with_backups(given(vec![])).settings.unwrap();
    assert!(
        matches!(plan(&g.obs, &s), Step::Restore { backup, .. } if backup.taken_at == 200),
        "{:?}",
        plan(&g.obs, &s)
    );
}

/// The operator's way out of that wait: the template back on the right release, the waiting
/// instances terminated. They never held data (no config was ever published for them), so
/// their terminations are let go at once, and the relaunched instances restore. Before, they
/// counted as instances that might run an etcd: the cluster stayed "unreachable", their hooks
/// held, the new instances never restored.
#[test]
fn instances_that_never_held_data_are_let_go_at_once_when_terminated_while_the_cluster_is_lost() {
    let mut g = with_backups(given(vec![
        running(5, TerminatingWait, "3.6.17"),
        running(6, TerminatingWait, "3.6.17"),
        running(7, PendingWait, "3.7.4"),
    ]))
    .record(1);
    g.obs.backups = vec![Backup {
        key: "p/etcd-i-00000001/200-v3.7.4.db".into(),
        token: "etcd-i-00000001".into(),
        taken_at: 200,
        revision: 200,
        size: 1,
        etcd_version: Some(Version::new(3, 7, 4)),
    }];
    assert_eq!(
        g.plan(),
        complete(5, Transition::Terminate, ActionResult::Continue)
    );
    g.obs.instances.remove(0);
    assert_eq!(
        g.plan(),
        complete(6, Transition::Terminate, ActionResult::Continue)
    );
    g.obs.instances.remove(0);
    assert!(
        matches!(g.plan(), Step::Restore { seed_arn, .. } if seed_arn == arn(7)),
        "{:?}",
        g.plan()
    );
    // One that held data (its config was published: it may still hold a member's only copy)
    // is never let go on a guess.
    let mut held = with_backups(given(vec![
        running(5, TerminatingWait, "3.7.4"),
        running(7, PendingWait, "3.7.4"),
    ]))
    .record(1)
    .some_config(5);
    held.obs.backups = g.obs.backups.clone();
    assert!(
        matches!(held.plan(), Step::Wait(Wait::ClusterUnreachable { .. })),
        "{:?}",
        held.plan()
    );
}

#[test]
fn a_new_stack_with_a_restore_request_starts_from_exactly_that_backup_or_not_at_all() {
    let copied = Backup {
        key: "p/prod-i-9/20261201T000000Z-rev000000000042-v3.6.17.db".into(),
        token: "prod-i-9".into(),
        taken_at: 500,
        revision: 42,
        size: 1,
        etcd_version: Some(Version::new(3, 6, 17)),
    };
    let g = |request: Option<&str>| {
        let mut g = with_backups(given(vec![inst(2, PendingWait), inst(3, PendingWait)]));
        g.settings.as_mut().unwrap().start_from_backup = true;
        g.obs.backups = vec![copied.clone(), backup_at(7)];
        g.obs.published.restore_request = request.map(str::to_string);
        // Written long ago: a new stack has no generation the request could be stale for.
        g.obs.published.restore_request_at = Some(1);
        g
    };
    // START_FROM=backup and no request: never an empty cluster; held for one.
    assert_eq!(g(None).plan(), Step::Wait(Wait::AwaitFirstRestore));
    // START_FROM=empty: an empty cluster, a request (one left over) or not.
    let mut empty = g(Some(&copied.key));
    empty.settings.as_mut().unwrap().start_from_backup = false;
    assert!(matches!(empty.plan(), Step::CreateCluster(r) if r.restored_from.is_none()));
    // The named backup (RECOVERY is auto here, but not what decides), seeded by the oldest
    // launching instance, its lineage the copied generation's.
    match g(Some(&copied.key)).plan() {
        Step::Restore {
            old: None,
            new,
            backup,
            seed_arn,
            ..
        } => {
            assert_eq!(backup, copied);
            assert_eq!((new.seed.as_str(), seed_arn), (i(2).as_str(), arn(2)));
            assert_eq!(new.state, RecordState::Bootstrapping);
            let from = new.restored_from.unwrap();
            assert_eq!(
                (from.snapshot.key, from.previous_token),
                (copied.key.clone(), copied.token.clone())
            );
        }
        other => panic!("{other:?}"),
    }
    // `latest`: the freshest in the prefix, whatever its generation.
    assert!(
        matches!(g(Some("latest")).plan(), Step::Restore { backup, .. } if backup == backup_at(7))
    );
    // Never an empty cluster in the requested one's place: a key not in the bucket, a store
    // that fails, backups off, a seed whose etcd cannot read it, a seed whose version is unknown.
    let unusable = |g: Given, says: &str| match g.plan() {
        Step::Wait(Wait::RestoreRequestUnusable { why, .. }) => {
            assert!(why.contains(says), "{why}")
        }
        other => panic!("{says}: {other:?}"),
    };
    unusable(g(Some("p/prod-i-9/missing.db")), "names no complete backup");
    let mut failing = g(Some(&copied.key));
    failing.obs.backups = vec![];
    failing.obs.backups_failing = Some("AccessDenied".into());
    unusable(failing, "backup store fails");
    let mut off = g(Some(&copied.key));
    off.settings.as_mut().unwrap().backup = None;
    unusable(off, "backups are off");
    let mut old_seed = g(Some(&copied.key));
    for i in &mut old_seed.obs.instances {
        i.etcd_version = Some(Version::new(3, 5, 30));
    }
    assert!(
        matches!(old_seed.plan(), Step::Wait(Wait::NoRestorableBackup { backup, .. }) if backup == copied.key)
    );
    let mut unknown = g(Some(&copied.key));
    unknown.obs.instances[0].etcd_version = None;
    assert!(matches!(
        unknown.plan(),
        Step::Wait(Wait::VersionUnknown { .. })
    ));
}
