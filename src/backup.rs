//! The backup concern: when to take a snapshot, which ones to keep, and which one a lost cluster
//! comes back from. Pure, like the other planners.
//!
//! - A snapshot every `BACKUP_INTERVAL_MINUTES`, skipped while the revision has not moved; and
//!   before every removal of a healthy member unless the last one is younger than a minute
//!   (removing a dead member never waits: it restores the quorum's margin).
//! - Retention: the newest always; one an hour for `BACKUP_HOURLY_DAYS`; one a day for
//!   `BACKUP_DAILY_DAYS`; the rest is deleted.
//! - Recovery, never on a guess: only when a cluster that served answers for nothing and none of
//!   its members' instances is left in the group (a partition leaves them in the group), and no
//!   instance is in service (one might run an etcd out of reach). `RECOVERY=auto` restores the
//!   freshest backup; `manual` waits for `<prefix>/restore-request`.

use std::collections::BTreeSet;

use crate::config::{BackupPolicy, Recovery};
use crate::model::{Backup, ClusterView, MemberId, Observation, Survivor, Timestamp};

/// A removal waits for a snapshot unless the last one is younger than this.
pub const FRESH_SECS: i64 = 60;

/// Why a snapshot is taken now.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Reason {
    Scheduled,
    BeforeRemoval,
    /// The quorum is lost for good: the freshest survivor's data, before the restore.
    Survivor,
}

/// The newest backup of the generation `token`.
pub fn latest<'a>(backups: &'a [Backup], token: &str) -> Option<&'a Backup> {
    backups
        .iter()
        .filter(|b| b.token == token)
        .max_by_key(|b| (b.taken_at, b.revision))
}

/// The member to stream from: a healthy follower when there is one, else the leader.
pub fn source(view: &ClusterView) -> Option<(MemberId, String)> {
    let healthy = |id: &MemberId| view.healthy.contains(id) && view.statuses.contains_key(id);
    let mut voters: Vec<_> = view
        .voters()
        .filter(|m| m.is_started() && healthy(&m.id))
        .collect();
    voters.sort_by_key(|m| (view.leader == Some(m.id), m.id));
    voters
        .first()
        .and_then(|m| m.client_urls.first().map(|u| (m.id, u.clone())))
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

/// What a lost cluster comes back from.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Choice {
    Restore(Backup),
    /// RECOVERY=manual and no (valid) request yet.
    AwaitRequest,
    NoBackup,
}

/// Whether every member of the cluster that served is gone for good: none of the instances its
/// members had (those with a published config) is left in the group, and no instance is in
/// service. A network partition or a stopped etcd leaves instances in the group: never a restore.
pub fn every_member_gone(obs: &Observation) -> bool {
    let old_members_gone = obs
        .published
        .members
        .keys()
        .all(|id| obs.instance(id).is_none_or(|i| !i.state.is_present()));
    let none_in_service = obs
        .instances
        .iter()
        .all(|i| !i.state.is_present() || i.state.is_launching());
    old_members_gone && none_in_service
}

/// Whether the quorum is lost for good while some members survive: under **every** answering
/// member's own list (a list can be stale), a majority of the voters are on instances that left
/// the group; and every member whose instance is left answers — each voter of those lists, and
/// each present instance whose config names the generation `token` (a learner too) — so none
/// can hold newer data unseen. Returns the survivor with the highest revision, learners
/// included. Survivors of another cluster than `cluster_id` are ignored; a voter that never
/// started (no name to find its instance by) is never called lost.
pub fn quorum_lost_for_good<'a>(
    obs: &Observation,
    survivors: &'a [Survivor],
    cluster_id: Option<u64>,
    token: &str,
) -> Option<&'a Survivor> {
    let ours: Vec<&Survivor> = survivors
        .iter()
        .filter(|s| cluster_id.is_none_or(|c| c == s.cluster_id))
        .collect();
    let answers = |name: &str| ours.iter().any(|s| s.name == name);
    let present = |name: &str| obs.instance(name).is_some_and(|i| i.state.is_present());
    let lost_under = |s: &Survivor| {
        if s.voters.iter().any(|v| !v.is_started()) {
            return false;
        }
        let (remaining, lost): (Vec<_>, Vec<_>) = s.voters.iter().partition(|v| present(&v.name));
        !lost.is_empty()
            && remaining.len() < crate::planner::quorum(s.voters.len())
            && remaining.iter().all(|v| answers(&v.name))
    };
    let generation_answers =
        obs.published.members.iter().all(|(instance, p)| {
            p.config.token != token || !present(instance) || answers(instance)
        });
    let voters_listed = ours.iter().any(|s| !s.is_learner);
    if !(voters_listed && generation_answers && ours.iter().all(|s| lost_under(s))) {
        return None;
    }
    ours.into_iter()
        .max_by_key(|s| (s.status.revision, s.member))
}

/// The operator's restore request, if it was made for the loss of the current generation: one
/// written before that generation was created (by a restore, which it may have asked for) would
/// otherwise restore an old snapshot over fresher data at the next loss, weeks later.
fn request_for_this_generation(obs: &Observation) -> Option<&str> {
    let request = obs.published.restore_request.as_deref()?;
    let created = obs.published.cluster.as_ref().map(|r| r.created_at);
    match (obs.published.restore_request_at, created) {
        (Some(at), Some(created)) if at <= created => {
            tracing::warn!(
                request,
                requested_at = at,
                generation_created_at = created,
                "ignoring a restore request older than the cluster's current generation: put a \
                 new one for this loss"
            );
            None
        }
        _ => Some(request),
    }
}

pub fn choose(obs: &Observation, policy: &BackupPolicy) -> Choice {
    let freshest = || {
        obs.backups
            .iter()
            .max_by_key(|b| (b.taken_at, b.revision))
            .cloned()
    };
    let found = match policy.recovery {
        Recovery::Auto => freshest(),
        Recovery::Manual => match request_for_this_generation(obs) {
            None => return Choice::AwaitRequest,
            Some("latest") => freshest(),
            Some(key) => obs.backups.iter().find(|b| b.key == key).cloned(),
        },
    };
    match (found, policy.recovery) {
        (Some(b), _) => Choice::Restore(b),
        // A request naming no backup we have: keep waiting for a good one.
        (None, Recovery::Manual) => Choice::AwaitRequest,
        (None, Recovery::Auto) => Choice::NoBackup,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> BackupPolicy {
        BackupPolicy {
            interval_secs: 900,
            hourly_days: 7,
            daily_days: 90,
            recovery: Recovery::Auto,
        }
    }

    fn backup(taken_at: Timestamp, revision: i64) -> Backup {
        Backup {
            key: format!("p/t/{taken_at}"),
            token: "t".into(),
            taken_at,
            revision,
            size: 1,
        }
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

    #[test]
    fn manual_recovery_waits_for_a_request_naming_a_backup_we_have() {
        let mut obs = Observation {
            instances: vec![],
            cluster: crate::model::ClusterState::unreachable(""),
            published: Default::default(),
            backups: vec![backup(10, 1), backup(20, 2)],
            backups_failing: None,
            now: 100,
        };
        let manual = BackupPolicy {
            recovery: Recovery::Manual,
            ..policy()
        };
        assert_eq!(choose(&obs, &manual), Choice::AwaitRequest);
        obs.published.restore_request = Some("p/t/999".into());
        assert_eq!(choose(&obs, &manual), Choice::AwaitRequest);
        obs.published.restore_request = Some("p/t/10".into());
        assert_eq!(choose(&obs, &manual), Choice::Restore(backup(10, 1)));
        obs.published.restore_request = Some("latest".into());
        assert_eq!(choose(&obs, &manual), Choice::Restore(backup(20, 2)));
        // A request written before the current generation was created (the one that restored
        // it, weeks ago) is not for this loss.
        obs.published.cluster = Some(crate::model::ClusterRecord::bootstrapping(
            "t2".into(),
            "i-2".into(),
            50,
        ));
        obs.published.restore_request_at = Some(49);
        assert_eq!(choose(&obs, &manual), Choice::AwaitRequest);
        obs.published.restore_request_at = Some(60);
        assert_eq!(choose(&obs, &manual), Choice::Restore(backup(20, 2)));
        assert_eq!(choose(&obs, &policy()), Choice::Restore(backup(20, 2)));
        obs.backups.clear();
        assert_eq!(choose(&obs, &policy()), Choice::NoBackup);
    }
}
