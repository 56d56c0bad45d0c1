//! The maintenance concern: keeping every member's database small and the cluster writable.
//! Ranked below membership: the ranking asks here only when membership has nothing to do and
//! nothing to wait for (no member joining, leaving or down).
//!
//! Rules, in order:
//! 1. under `NOSPACE`, first compact all history up to the current revision (writes have stopped,
//!    so it stands still; the configured retention cannot be kept once the quota is full);
//! 2. defragment a member whose database file is mostly free space (`DEFRAG_FREE_PERCENT` of a
//!    file of at least `DEFRAG_MIN_BYTES`; under `NOSPACE`, any member with a tenth free, or with
//!    any free space in a file at 90 % of the quota): followers first, one at a time; the leader
//!    last, after moving leadership away;
//! 3. under `NOSPACE` with nothing left to defragment: a member whose in-use figure takes 90 % of
//!    the quota is defragmented unless this environment did so in the last `RECHECK_SECS` (the
//!    figure can count pages still pending in bbolt, see `plan`); if the live data alone still
//!    takes 90 % of the quota then, wait (an ERROR line and a metric say so): disarming would
//!    only alarm again;
//! 4. under `NOSPACE` once the data fits: disarm the alarm.
//!
//! Every voter must answer with its status, and every member be a started voter, or nothing here
//! runs: defragmenting one member while another is down risks the quorum.

use super::step::Step;
use super::wait::Wait;
use crate::config::Settings;
use crate::model::{ClusterView, Member, MemberStatus, NOSPACE};

/// Whether the live data takes 90 % of the quota or more.
pub fn nearly_full(status: &MemberStatus, quota: u64) -> bool {
    status.db_size_in_use.saturating_mul(10) >= quota.saturating_mul(9)
}

/// Rule 3: a member's in-use figure is taken at its word for this long after this environment
/// defragmented it; a member still full after that is defragmented again (once every 15
/// minutes while the live data truly fills the quota; a figure left stale after a
/// defragmentation, as when a follower's own compaction ran after it, is mended by the next).
pub const RECHECK_SECS: i64 = 15 * 60;

/// Rule 3: whether a member defragmented by this environment at `at` (None: never) counts as
/// defragmented at `now` (`ClusterView::defragmented`).
pub fn recently_defragmented(
    at: Option<crate::model::Timestamp>,
    now: crate::model::Timestamp,
) -> bool {
    at.is_some_and(|at| now - at < RECHECK_SECS)
}

/// Under NOSPACE, free space below this is not worth a defragmentation: bbolt keeps some free
/// pages in a file it has just rewritten, so a defragmentation would find as much again.
pub const NOSPACE_MIN_RECLAIM: u64 = 1 << 20;

/// Rule 2: whether a member's file has enough free space to defragment.
fn mostly_free(s: &MemberStatus, settings: &Settings, nospace: bool) -> bool {
    let quota = settings.topology.quota_backend_bytes;
    if nospace {
        // A tenth free, or a file near the quota with anything to reclaim: etcd checks the
        // file's size against the quota, so one left over it would raise the alarm again.
        // Never less than NOSPACE_MIN_RECLAIM: a file just defragmented keeps a few free
        // pages, and a small one keeps more than a tenth (the nemesis, seed 71: a 76 KiB
        // file, 24 KiB free, defragmented for ever and the alarm never disarmed).
        s.free() >= NOSPACE_MIN_RECLAIM
            && (s.free().saturating_mul(10) >= s.db_size
                || s.db_size.saturating_mul(10) >= quota.saturating_mul(9))
    } else {
        s.db_size >= settings.defrag_min_bytes
            && s.free().saturating_mul(100)
                >= s.db_size.saturating_mul(settings.defrag_free_percent)
    }
}

/// The next member `needs` says to defragment: followers first (by id), the leader last after
/// moving leadership away.
fn defragment(
    view: &ClusterView,
    looks_full: bool,
    needs: impl Fn(&Member, &MemberStatus) -> bool,
) -> Option<Step> {
    let mut candidates: Vec<&Member> = view
        .members
        .iter()
        .filter(|m| needs(m, &view.statuses[&m.id]))
        .collect();
    candidates.sort_by_key(|m| (view.leader == Some(m.id), m.id));
    let m = candidates.first()?;
    let endpoint = m.client_urls.first()?;
    if view.leader == Some(m.id) {
        let to = view
            .members
            .iter()
            .map(|o| o.id)
            .filter(|&id| id != m.id)
            .min();
        if let Some(to) = to {
            return Some(Step::TransferLeadership {
                from: m.id,
                to,
                leader_endpoint: endpoint.clone(),
            });
        }
    }
    Some(Step::Defragment {
        member: m.id,
        endpoint: endpoint.clone(),
        looks_full,
    })
}

pub fn plan(view: &ClusterView, settings: &Settings) -> Vec<Step> {
    let all_started_voters = view.members.iter().all(|m| !m.is_learner && m.is_started());
    let all_answer = view
        .members
        .iter()
        .all(|m| view.healthy.contains(&m.id) && view.statuses.contains_key(&m.id));
    if view.members.is_empty() || !all_started_voters || !all_answer {
        return vec![];
    }
    let nospace = view.nospace();
    let quota = settings.topology.quota_backend_bytes;
    if nospace && !view.history_compacted {
        // Writes have stopped; the revision stands still. All history goes: the retention
        // cannot be kept once the quota is full.
        let revision = view.revision();
        return vec![Step::Compact {
            revision,
            endpoint: view.endpoint.clone(),
        }];
    }
    if let Some(step) = defragment(view, false, |_, s| mostly_free(s, settings, nospace)) {
        return vec![step];
    }
    if !nospace {
        return vec![];
    }
    // Rule 3: a member that looks full is taken at its word only once this environment has
    // defragmented it, lately. etcd's in-use figure is the file less bbolt's free pages as
    // counted when its last write transaction closed; pages a compaction frees while an older
    // read is open (a snapshot streaming: a backup, a client's) stay pending until a write
    // transaction begins after that read ends, and count as in use until etcd commits after
    // that. Under NOSPACE few writes come (deletes, lease expiries), so the figure can stay
    // stale. etcd: `begin` (sizeInUse) in server/storage/backend/backend.go,
    // https://github.com/etcd-io/etcd/blob/v3.6.17/server/storage/backend/backend.go (3.5:
    // server/mvcc/backend/backend.go); bbolt: pending pages released in `beginRWTx`, the free
    // count taken in `Tx.close`: https://github.com/etcd-io/bbolt/blob/v1.4.3/db.go and
    // https://github.com/etcd-io/bbolt/blob/v1.4.3/tx.go (etcd 3.5 uses bbolt 1.3, 3.7 1.5).
    let unverified =
        |m: &Member, s: &MemberStatus| nearly_full(s, quota) && !view.defragmented.contains(&m.id);
    if let Some(step) = defragment(view, true, unverified) {
        return vec![step];
    }
    if let Some(in_use) = view
        .statuses
        .values()
        .filter(|s| nearly_full(s, quota))
        .map(|s| s.db_size_in_use)
        .max()
    {
        // Compacted and defragmented, and the live data alone still fills the quota: disarming
        // would only raise the alarm again.
        return vec![Step::Wait(Wait::LiveDataOverQuota { in_use, quota })];
    }
    view.alarms
        .iter()
        .filter(|a| a.kind == NOSPACE && a.member != crate::model::FENCE)
        .take(1)
        .map(|a| Step::Disarm {
            alarm: a.clone(),
            endpoint: view.endpoint.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    //! Given the members' statuses and alarms, expect the maintenance step.

    use super::*;
    use crate::model::{Alarm, MemberId};

    const MIB: u64 = 1 << 20;

    /// A 1000 MiB quota, so sizes read as per-mille of it.
    fn settings() -> Settings {
        let mut s = Settings::for_tests();
        s.topology.quota_backend_bytes = 1000 * MIB;
        s
    }

    fn member(n: u64) -> Member {
        Member {
            id: MemberId(n),
            name: format!("i-{n}"),
            peer_urls: vec![format!("http://10.0.0.{n}:2380")],
            client_urls: vec![format!("http://10.0.0.{n}:2379")],
            is_learner: false,
        }
    }

    /// Three voters, 1 leading, each with (file MiB, in-use MiB).
    fn view(sizes: [(u64, u64); 3]) -> ClusterView {
        let members: Vec<Member> = (1..=3).map(member).collect();
        ClusterView {
            cluster_id: 7,
            healthy: members.iter().map(|m| m.id).collect(),
            statuses: members
                .iter()
                .zip(sizes)
                .map(|(m, (size, used))| {
                    let s = MemberStatus {
                        db_size: size * MIB,
                        db_size_in_use: used * MIB,
                        version: "3.5.1".into(),
                        revision: 500 + m.id.0 as i64,
                    };
                    (m.id, s)
                })
                .collect(),
            leader: Some(MemberId(1)),
            endpoint: "http://10.0.0.1:2379".into(),
            alarms: vec![],
            history_compacted: false,
            auth_enabled: false,
            root_refused: None,
            token_kinds: vec![],
            cluster_version: None,
            peer_connected: Default::default(),
            defragmented: Default::default(),
            members,
        }
    }

    fn defrag(n: u64) -> Step {
        Step::Defragment {
            member: MemberId(n),
            endpoint: format!("http://10.0.0.{n}:2379"),
            looks_full: false,
        }
    }

    fn verify(n: u64) -> Step {
        Step::Defragment {
            member: MemberId(n),
            endpoint: format!("http://10.0.0.{n}:2379"),
            looks_full: true,
        }
    }

    fn nospace(mut v: ClusterView) -> ClusterView {
        v.alarms.push(Alarm {
            member: MemberId(2),
            kind: NOSPACE.into(),
        });
        v
    }

    #[test]
    fn a_compact_cluster_needs_nothing() {
        assert_eq!(
            plan(&view([(200, 190), (200, 150), (50, 10)]), &settings()),
            vec![]
        );
    }

    #[test]
    fn mostly_free_files_are_defragmented_followers_first() {
        let v = view([(400, 100), (300, 100), (400, 100)]);
        assert_eq!(plan(&v, &settings()), vec![defrag(2)]);
    }

    #[test]
    fn the_leader_goes_last_after_handing_over() {
        let v = view([(400, 100), (300, 290), (200, 190)]);
        assert_eq!(
            plan(&v, &settings()),
            vec![Step::TransferLeadership {
                from: MemberId(1),
                to: MemberId(2),
                leader_endpoint: "http://10.0.0.1:2379".into()
            }]
        );
        let mut v = v;
        v.leader = Some(MemberId(2));
        assert_eq!(plan(&v, &settings()), vec![defrag(1)]);
    }

    #[test]
    fn small_files_are_left_alone_however_free() {
        let v = view([(90, 1), (90, 1), (90, 1)]);
        assert_eq!(plan(&v, &settings()), vec![]);
    }

    #[test]
    fn nothing_while_a_member_is_down_or_joining() {
        let mut v = view([(400, 100), (400, 100), (400, 100)]);
        v.healthy.remove(&MemberId(3));
        assert_eq!(plan(&v, &settings()), vec![]);
        let mut v = view([(400, 100), (400, 100), (400, 100)]);
        v.members[2].is_learner = true;
        assert_eq!(plan(&v, &settings()), vec![]);
    }

    fn compacted(mut v: ClusterView) -> ClusterView {
        v.history_compacted = true;
        v
    }

    #[test]
    fn nospace_first_compacts_all_history() {
        // Even with free pages to reclaim: compaction first, or the quota fills again at once.
        let v = nospace(view([(1000, 800), (1000, 995), (1000, 990)]));
        assert_eq!(
            plan(&v, &settings()),
            vec![Step::Compact {
                revision: 503,
                endpoint: "http://10.0.0.1:2379".into()
            }]
        );
    }

    /// Under NOSPACE a small file keeps more than a tenth free however often it is
    /// defragmented (bbolt's free pages): below NOSPACE_MIN_RECLAIM it is not defragmented
    /// again, and the alarm is disarmed. Found by the nemesis (seed 71): defragmented for ever,
    /// NOSPACE never disarmed, every write refused.
    #[test]
    fn under_nospace_a_small_file_just_defragmented_is_not_defragmented_again() {
        let mut v = nospace(view([(1, 1), (1, 1), (1, 1)]));
        v.history_compacted = true;
        for s in v.statuses.values_mut() {
            s.db_size = 77_824;
            s.db_size_in_use = 53_248;
        }
        assert_eq!(
            plan(&v, &settings()),
            vec![Step::Disarm {
                alarm: v.alarms[0].clone(),
                endpoint: "http://10.0.0.1:2379".into()
            }]
        );
        // Near the quota, a just-defragmented file with a few free pages: no loop either, the
        // live data over the quota is said instead.
        v.defragmented = v.members.iter().map(|m| m.id).collect();
        for s in v.statuses.values_mut() {
            s.db_size = 950 * MIB;
            s.db_size_in_use = 950 * MIB - 16_384;
        }
        assert!(matches!(
            plan(&v, &settings())[..],
            [Step::Wait(Wait::LiveDataOverQuota { .. })]
        ));
    }

    /// The function's own write fence at hibernation is no member out of space: nothing to
    /// compact, defragment or disarm here (`hibernate::unfence` lifts it).
    #[test]
    fn the_hibernation_fence_is_no_space_alarm_to_maintain() {
        let mut v = view([(1000, 800), (1000, 995), (1000, 990)]);
        v.alarms.push(Alarm {
            member: crate::model::FENCE,
            kind: NOSPACE.into(),
        });
        assert!(!v.nospace());
        assert!(!plan(&v, &settings())
            .iter()
            .any(|s| matches!(s, Step::Compact { .. } | Step::Disarm { .. })));
    }

    #[test]
    fn nospace_then_defragments_every_member_then_disarms() {
        // Compacted: the files are mostly free now.
        let v = compacted(nospace(view([(1000, 100), (1000, 100), (1000, 100)])));
        assert_eq!(plan(&v, &settings()), vec![defrag(2)]);
        // Under NOSPACE even a modest free share is worth reclaiming.
        let v = compacted(nospace(view([(120, 100), (100, 100), (100, 100)])));
        assert!(matches!(
            &plan(&v, &settings())[..],
            [Step::TransferLeadership { .. }]
        ));
        // A file near the quota is defragmented for any free page at all.
        let v = compacted(nospace(view([(100, 100), (950, 940), (100, 100)])));
        assert_eq!(plan(&v, &settings()), vec![defrag(2)]);
        let v = compacted(nospace(view([(100, 100), (100, 100), (100, 100)])));
        assert_eq!(
            plan(&v, &settings()),
            vec![Step::Disarm {
                alarm: Alarm {
                    member: MemberId(2),
                    kind: NOSPACE.into()
                },
                endpoint: "http://10.0.0.1:2379".into()
            }]
        );
    }

    /// etcd's in-use figure can count pages a compaction freed while a read was open (bbolt
    /// keeps them pending, and under NOSPACE few writes come): a member that looks full after
    /// the compaction is defragmented before the live data is said to fill the quota. Found on
    /// CI (etcd 3.7): the alarm never disarmed, "delete data" logged of 2 MiB of live data.
    #[test]
    fn under_nospace_a_full_member_not_defragmented_lately_is_defragmented_first() {
        let mut v = compacted(nospace(view([(950, 950), (950, 950), (100, 100)])));
        assert_eq!(plan(&v, &settings()), vec![verify(2)]);
        v.defragmented.insert(MemberId(2));
        assert!(matches!(
            &plan(&v, &settings())[..],
            [Step::TransferLeadership { .. }]
        ));
        v.leader = Some(MemberId(3));
        assert_eq!(plan(&v, &settings()), vec![verify(1)]);
        // Both defragmented lately, the third never full: its figure is left be.
        v.defragmented.insert(MemberId(1));
        assert!(matches!(
            plan(&v, &settings())[..],
            [Step::Wait(Wait::LiveDataOverQuota { .. })]
        ));
    }

    #[test]
    fn a_defragmentation_counts_for_fifteen_minutes() {
        assert!(!recently_defragmented(None, 1000));
        assert!(recently_defragmented(Some(1000), 1000));
        assert!(recently_defragmented(Some(1000), 1000 + 15 * 60 - 1));
        assert!(!recently_defragmented(Some(1000), 1000 + 15 * 60));
    }

    #[test]
    fn nospace_with_live_data_over_the_quota_is_not_disarmed() {
        // Compacted, every full member defragmented lately, and the live data still fills the
        // quota.
        let mut v = compacted(nospace(view([(950, 950), (950, 950), (950, 950)])));
        v.defragmented = v.members.iter().map(|m| m.id).collect();
        assert_eq!(
            plan(&v, &settings()),
            vec![Step::Wait(Wait::LiveDataOverQuota {
                in_use: 950 * MIB,
                quota: 1000 * MIB
            })]
        );
    }
}
