//! Maintenance (issue 10): NOSPACE compacted, defragmented member by member and disarmed, and
//! never disarmed while the live data alone is too large.

use super::*;
use crate::model::{Alarm, MemberStatus};

/// Every member's file at 2 GiB with `in_use` of it in use (the k-th member at revision
/// 9000 + k × `step`), `live` bytes left in use by a compaction, and NOSPACE raised for the
/// `alarmed`-th member. The members' ids.
fn out_of_space(world: &Fake, in_use: u64, step: i64, live: u64, alarmed: usize) -> Vec<MemberId> {
    let mut w = world.world();
    let ids: Vec<MemberId> = w.members.iter().map(|m| m.id).collect();
    for (k, id) in ids.iter().enumerate() {
        let status = MemberStatus {
            db_size: 2 << 30,
            db_size_in_use: in_use,
            version: "3.5.1".into(),
            revision: 9000 + k as i64 * step,
        };
        w.db.insert(*id, status);
    }
    w.live_bytes = live;
    w.alarms.push(Alarm {
        member: ids[alarmed],
        kind: "NOSPACE".into(),
    });
    ids
}

#[tokio::test]
async fn nospace_is_compacted_defragmented_member_by_member_and_disarmed() {
    let world = three_member_cluster().await;
    out_of_space(&world, (2 << 30) - 1000, 1, 100 << 20, 1);
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

/// A snapshot streaming from a member while the compaction commits leaves its in-use figure
/// counting the freed pages (bbolt keeps them pending, and under NOSPACE few writes come to
/// release them): the member looks full though 100 MiB are live. It is defragmented, which makes the
/// figure exact, and the alarm disarmed. Before: "live data over the quota" for ever (CI, etcd
/// 3.7, the function's own backup overlapping the compaction).
#[tokio::test]
async fn nospace_with_a_figure_left_stale_by_an_open_read_is_still_disarmed() {
    let world = three_member_cluster().await;
    let ids = out_of_space(&world, (2 << 30) - 1000, 0, 100 << 20, 0);
    world.world().reading.insert(ids[1]);
    converge(&world, &[schedule()]).await;
    let w = world.world();
    assert!(w.alarms.is_empty(), "disarmed: {:#?}", w.calls);
    assert!(w.db.values().all(|s| s.db_size == 100 << 20), "{:?}", w.db);
    let defragmented = w.calls.iter().filter(|c| c.starts_with("defragment"));
    assert_eq!(defragmented.count(), 3, "{:#?}", w.calls);
}

#[tokio::test]
async fn nospace_with_too_much_live_data_is_never_disarmed() {
    let world = three_member_cluster().await;
    out_of_space(&world, 2 << 30, 0, 2 << 30, 0);
    let r = reconciler(&world);
    let defragmented = || {
        let w = world.world();
        let n = w
            .calls
            .iter()
            .filter(|c| c.starts_with("defragment"))
            .count();
        assert_eq!(w.alarms.len(), 1);
        assert!(
            !w.calls.iter().any(|c| c.starts_with("disarm")),
            "{:#?}",
            w.calls
        );
        n
    };
    for _ in 0..3 {
        r.handle(&schedule(), far()).await.unwrap();
    }
    // Each full member once (its figure might have counted pending pages), then only the wait.
    assert_eq!(defragmented(), 3);
    world.world().now += crate::planner::maintenance::RECHECK_SECS - 1;
    r.handle(&schedule(), far()).await.unwrap();
    assert_eq!(defragmented(), 3);
    // And again once the last ones are 15 minutes old.
    world.world().now += 1;
    for _ in 0..3 {
        r.handle(&schedule(), far()).await.unwrap();
    }
    assert_eq!(defragmented(), 6);
}
