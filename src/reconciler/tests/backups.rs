//! Backups (issue 8): a fresh snapshot before a healthy member leaves, scheduled snapshots,
//! and a store that fails, cannot be listed or cannot finish never stopping membership work or
//! a held hook's heartbeat.

use super::*;

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

/// Issue 38: a final snapshot counted at the revision read before it streamed. A lease expiring
/// as each snapshot began moved the last voter past it, and it was snapshotted again and again
/// (to the hook's global timeout). The manifest says the revision the snapshot holds (read from
/// its database as it streams), and a group scaled to zero reads it.
#[tokio::test]
async fn a_final_snapshot_counts_at_the_revision_it_holds_not_the_one_read_before_it() {
    let world = three_member_cluster().await;
    world.world().data = "k=v".into();
    let r = with_backups(&world);
    converge_with(&r, &world).await;
    {
        let mut w = world.world();
        // Written since the scheduled backup.
        for id in 1..=3 {
            w.db.entry(crate::model::MemberId(id)).or_default().revision = 10;
        }
        w.desired_capacity = Some(0);
        w.snapshot_moves_revision = true;
    }
    for n in 1..=3 {
        world.start_terminating(&format!("i-0000000{n}"));
    }
    for _ in 0..20 {
        let resp = r.handle(&schedule(), far()).await.unwrap();
        world.world().now += 5;
        if reconciled(&resp).1.is_some_and(|w| w.starts_with("asleep")) {
            break;
        }
    }
    let w = world.world();
    let sleeping = w.record.as_ref().and_then(|r| r.sleeping.clone());
    let sleeping = sleeping.expect("the record says the cluster sleeps");
    // It sleeps at the revision its final snapshot holds, the revision the member last had.
    let last = w.db.values().map(|s| s.revision).max().unwrap();
    assert_eq!((sleeping.revision, w.holds[&sleeping.key]), (last, last));
    let stores = w.calls.iter().filter(|c| c.starts_with("store")).count();
    // The scheduled backup, and one final snapshot.
    assert_eq!(stores, 2, "{:#?}", w.calls);
}
