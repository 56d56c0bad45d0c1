//! Backups: when to take a snapshot, and which ones to keep. Ranked below membership: a snapshot
//! is taken whenever membership has no step to take (a wait, such as a held termination, is when
//! a fresh one matters most), and before a healthy member leaves. What a lost cluster comes back
//! from is `recovery`'s; the final snapshot of a group scaled to zero is `hibernate`'s.
//!
//! - A snapshot every `BACKUP_INTERVAL_MINUTES`, skipped while the revision has not moved; and
//!   before every removal of a healthy member unless the last one is younger than a minute
//!   (removing a dead member never waits: it restores the quorum's margin).
//! - Retention: the newest always; one an hour for `BACKUP_HOURLY_DAYS`; one a day for
//!   `BACKUP_DAILY_DAYS`; the rest is deleted.
//! - While the store fails (its listing, or a backup this invocation), no rule here acts: the
//!   snapshot before a removal is skipped, nothing is pruned.

use std::collections::BTreeSet;

use super::context::Context;
use super::snapshots::{latest, lineage, snapshot};
use super::step::{BackupReason, Step};
use crate::config::{BackupPolicy, Settings};
use crate::model::{Backup, ClusterView, Observation, Timestamp};

/// A removal waits for a snapshot unless the last one is younger than this.
pub const FRESH_SECS: i64 = 60;
/// A half of a backup (a snapshot without its manifest, a manifest without its snapshot) is
/// pruned once taken this long ago: no invocation of any stack lives as long (Lambda's longest
/// timeout is 15 minutes), so no store can still be writing it.
pub const INCOMPLETE_SECS: i64 = 3600;

/// The policy, unless backups are off or the store fails this invocation.
fn usable<'a>(obs: &Observation, settings: &'a Settings) -> Option<&'a BackupPolicy> {
    settings
        .backup
        .as_ref()
        .filter(|_| obs.backups_failing.is_none())
}

/// The snapshot a healthy member's removal waits for, if the last one is not fresh. Best
/// effort: while the store fails the member is removed without.
pub fn before_removal(ctx: &Context) -> Option<Step> {
    usable(ctx.obs, ctx.settings)?;
    let stale = stale_for_removal(&ctx.obs.backups, &ctx.token(), ctx.obs.now);
    stale
        .then(|| snapshot(ctx, BackupReason::BeforeRemoval))
        .flatten()
}

/// A scheduled snapshot when one is due, else a backup retention lets go.
pub fn scheduled(ctx: &Context) -> Option<Step> {
    let policy = usable(ctx.obs, ctx.settings)?;
    let obs = ctx.obs;
    if due(&obs.backups, &ctx.token(), ctx.view, obs.now, policy) {
        if let Some(step) = snapshot(ctx, BackupReason::Scheduled) {
            return Some(step);
        }
    }
    prunable(obs, policy)
        .into_iter()
        .next()
        .map(|key| Step::Prune { key })
}

/// Whether a scheduled snapshot is due: the interval passed and the revision moved.
pub fn due(
    backups: &[Backup],
    token: &str,
    view: &ClusterView,
    now: Timestamp,
    policy: &BackupPolicy,
) -> bool {
    let revision = view.revision();
    match latest(backups, token) {
        None => true,
        Some(b) => now - b.taken_at >= policy.interval_secs && revision > b.revision,
    }
}

/// Whether a removal of a healthy member must wait for a snapshot first.
pub fn stale_for_removal(backups: &[Backup], token: &str, now: Timestamp) -> bool {
    latest(backups, token).is_none_or(|b| now - b.taken_at > FRESH_SECS)
}

/// The backups retention lets go: not the newest, not the newest of its hour within
/// `hourly_days`, not the newest of its day within `daily_days`.
pub fn expired(backups: &[Backup], now: Timestamp, policy: &BackupPolicy) -> Vec<String> {
    let mut newest_first: Vec<&Backup> = backups.iter().collect();
    newest_first.sort_by_key(|b| std::cmp::Reverse((b.taken_at, b.revision)));
    let (mut hours, mut days) = (BTreeSet::new(), BTreeSet::new());
    let mut out = Vec::new();
    for (n, b) in newest_first.into_iter().enumerate() {
        let age = now - b.taken_at;
        let keep = n == 0
            || (age <= policy.hourly_days * 86_400 && hours.insert(b.taken_at.div_euclid(3600)))
            || (age <= policy.daily_days * 86_400 && days.insert(b.taken_at.div_euclid(86_400)));
        // A kept hourly one also stands for its day.
        if keep {
            hours.insert(b.taken_at.div_euclid(3600));
            days.insert(b.taken_at.div_euclid(86_400));
        } else {
            out.push(b.key.clone());
        }
    }
    out
}

/// What retention deletes now: the halves of backups a store or a prune cut short, once
/// `INCOMPLETE_SECS` old, then per generation of this cluster's lineage what retention lets go
/// (the newest of each is always kept), never the snapshot the current generation was restored
/// from.
pub fn prunable(obs: &Observation, policy: &BackupPolicy) -> Vec<String> {
    let Some(generations) = lineage(obs) else {
        return vec![];
    };
    let mut out: Vec<String> = obs
        .incomplete_backups
        .iter()
        .filter(|b| generations.contains(&b.token.as_str()))
        .filter(|b| obs.now - b.taken_at >= INCOMPLETE_SECS)
        .map(|b| b.key.clone())
        .collect();
    let restored_from = obs
        .published
        .cluster
        .as_ref()
        .and_then(|r| r.restored_from.as_ref())
        .map(|r| r.snapshot.key.as_str());
    let mut seen = BTreeSet::new();
    for token in generations.into_iter().filter(|t| seen.insert(*t)) {
        let generation: Vec<Backup> = obs
            .backups
            .iter()
            .filter(|b| b.token == token)
            .cloned()
            .collect();
        out.extend(
            expired(&generation, obs.now, policy)
                .into_iter()
                .filter(|k| Some(k.as_str()) != restored_from),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Recovery;
    use crate::planner::recovery::{choose, Choice};

    fn policy() -> BackupPolicy {
        BackupPolicy::for_tests()
    }

    fn backup(taken_at: Timestamp, revision: i64) -> Backup {
        Backup::for_tests(taken_at, revision)
    }

    fn of(token: &str, taken_at: Timestamp) -> Backup {
        Backup {
            key: format!("p/{token}/{taken_at}"),
            token: token.into(),
            ..backup(taken_at, taken_at)
        }
    }

    #[test]
    fn retention_and_recovery_keep_to_this_clusters_lineage_and_keep_the_restored_snapshot() {
        use crate::model::{BackupRef, ClusterRecord, Restore};
        let now = 30 * 86_400;
        let day = 86_400;
        // This cluster: restored (generation "new") from generation "old"'s snapshot at day 10.
        let mut record = ClusterRecord::bootstrapping("new".into(), "i-9".into(), 20 * day);
        record.restored_from = Some(Restore {
            snapshot: BackupRef {
                key: "p/old/864000".into(),
                url: String::new(),
                sha256: String::new(),
            },
            previous_token: "old".into(),
            previous_seed: "i-1".into(),
            previous_created_at: 0,
            copied_from: None,
        });
        let mut obs = Observation {
            desired_capacity: 3,
            cluster: crate::model::ClusterState::unreachable(""),
            published: crate::model::PublishedState {
                cluster: Some(record),
                ..Default::default()
            },
            backups: vec![
                of("old", 10 * day),
                of("old", 10 * day + 60),
                of("new", 25 * day),
                of("new", 25 * day + 60),
                // Another stack of the same name sharing the bucket: newer than all of ours.
                of("foreign", 29 * day),
                of("foreign", 29 * day + 60),
            ],
            now,
            ..Observation::for_tests()
        };
        // A day's policy: one an hour for a day, one a day for two days.
        let short = BackupPolicy {
            hourly_days: 1,
            daily_days: 2,
            ..policy()
        };
        // Each of our generations keeps its newest; the restored-from snapshot stays however old;
        // the other stack's are not ours to prune.
        assert_eq!(prunable(&obs, &short), vec!["p/new/2160000".to_string()]);
        let keys = |v: Vec<String>| v.into_iter().filter(|k| k.contains("/old/")).count();
        assert_eq!(keys(prunable(&obs, &short)), 0);
        // Recovery takes the freshest of ours, never the other stack's.
        assert_eq!(
            choose(&obs, &policy()),
            Choice::Restore(of("new", 25 * day + 60))
        );
        // An operator naming the other stack's snapshot gets it (a migration).
        let manual = BackupPolicy {
            recovery: Recovery::Manual,
            ..policy()
        };
        obs.published.restore_request = Some("p/foreign/2505600".into());
        assert_eq!(
            choose(&obs, &manual),
            Choice::Restore(of("foreign", 29 * day))
        );
    }

    #[test]
    fn retention_keeps_the_newest_one_an_hour_for_a_week_one_a_day_for_ninety_days() {
        let now = 200 * 86_400;
        let mut all = vec![];
        // Every 15 minutes for the last two days; then one every 6 hours back 120 days.
        for k in 0..(2 * 96) {
            all.push(backup(now - k * 900, 1000 - k));
        }
        for k in 0..(120 * 4) {
            all.push(backup(now - 2 * 86_400 - 1 - k * 21_600, 100));
        }
        let gone: BTreeSet<String> = expired(&all, now, &policy()).into_iter().collect();
        let kept: Vec<&Backup> = all.iter().filter(|b| !gone.contains(&b.key)).collect();
        // Within the week: at most one per hour; beyond: at most one per day; nothing past 90 days.
        let recent: Vec<_> = kept
            .iter()
            .filter(|b| now - b.taken_at <= 7 * 86_400)
            .collect();
        let hours: BTreeSet<_> = recent.iter().map(|b| b.taken_at.div_euclid(3600)).collect();
        assert_eq!(hours.len(), recent.len());
        assert!(kept.iter().all(|b| now - b.taken_at <= 90 * 86_400));
        let old: Vec<_> = kept
            .iter()
            .filter(|b| now - b.taken_at > 7 * 86_400)
            .collect();
        let days: BTreeSet<_> = old.iter().map(|b| b.taken_at.div_euclid(86_400)).collect();
        assert_eq!(days.len(), old.len());
        assert!(old.len() >= 80, "one a day kept: {}", old.len());
        assert!(kept.iter().any(|b| b.taken_at == now), "the newest is kept");
    }

    #[test]
    fn the_newest_is_kept_however_old() {
        let all = vec![backup(0, 5)];
        assert!(expired(&all, 1_000 * 86_400, &policy()).is_empty());
    }
}
