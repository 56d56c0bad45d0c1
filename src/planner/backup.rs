//! Backups and recovery: when to take a snapshot, which ones to keep, and which one a lost
//! cluster comes back from. Ranked below membership: a snapshot is taken whenever membership has
//! no step to take (a wait, such as a held termination, is when a fresh one matters most), and
//! before a healthy member leaves.
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
//! - While the store fails (its listing, or a backup this invocation), no rule here acts: the
//!   snapshot before a removal is skipped, nothing is restored while the freshest is unknown.

use std::collections::BTreeSet;

use super::context::{seed_candidate, Context};
use super::step::{BackupReason, Plan, StaleRequest, Step, Wait};
use crate::config::{BackupPolicy, Recovery, Settings};
use crate::model::{
    quorum, ActionResult, Alarm, Backup, BackupRef, ClusterRecord, ClusterView, Instance,
    LifecycleState, MemberId, MemberStatus, Observation, Restore, SnapshotFacts, Survivor,
    Timestamp, Transition, FENCE, NOSPACE,
};
use crate::versions::Version;

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

/// A snapshot of the source member (`source`), with what its manifest records.
fn snapshot(ctx: &Context, reason: BackupReason) -> Option<Step> {
    let (member, endpoint) = source(ctx.view)?;
    let status = ctx.view.statuses.get(&member).cloned().unwrap_or_default();
    Some(Step::Backup {
        member,
        endpoint,
        reason,
        facts: facts(
            ctx.token(),
            ctx.view.cluster_id,
            member,
            status,
            ctx.view.cluster_version,
            ctx.obs.now,
        ),
    })
}

fn facts(
    token: String,
    cluster_id: u64,
    member: MemberId,
    status: MemberStatus,
    cluster_version: Option<Version>,
    now: Timestamp,
) -> SnapshotFacts {
    SnapshotFacts {
        token,
        revision: status.revision,
        cluster_id,
        member: member.to_string(),
        etcd_version: status.version,
        cluster_version,
        taken_at: now,
    }
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

/// Hibernation: the group is scaled to zero and `last` holds the last voter. Before its
/// termination completes, a final snapshot of it at its current revision (or later) is in the
/// bucket, and the record says the cluster sleeps there; then None: it may go. Held (a wait,
/// its hook heartbeated) while the store fails. Without backups configured there is nothing to
/// keep the data in: None, and it goes as before (docs/backups.md).
pub fn hibernate(ctx: &Context, last: &Instance) -> Option<Step> {
    ctx.settings.backup.as_ref()?;
    let record = ctx.obs.published.cluster.as_ref()?;
    if let Some(why) = &ctx.obs.backups_failing {
        return Some(Step::Wait(Wait::FinalSnapshotPending {
            instance: last.id.clone(),
            why: format!("the backup store fails: {why}"),
        }));
    }
    // A last voter that cannot be read is held: its data may be newer than any backup.
    let Some((member, endpoint)) = source(ctx.view) else {
        return Some(Step::Wait(Wait::FinalSnapshotPending {
            instance: last.id.clone(),
            why: "the last voter does not answer its status: no snapshot can be taken of it".into(),
        }));
    };
    let revision = ctx.view.statuses.get(&member).map(|s| s.revision);
    let final_snapshot = latest(&ctx.obs.backups, &record.token)
        .filter(|b| revision.is_some_and(|r| b.revision >= r));
    let Some(backup) = final_snapshot else {
        // Writes fenced first (NOSPACE, which etcd applies cluster-wide and which travels in the
        // snapshot): a client on a kept connection can no longer be told a write is committed
        // that the snapshot lacks. etcd still applies deletes and lease revocations under
        // NOSPACE (`applierV3Capped`,
        // <https://github.com/etcd-io/etcd/blob/v3.6.17/server/etcdserver/apply/apply.go>): one
        // moves the revision, and the snapshot is taken again.
        if !ctx.view.alarms.iter().any(|a| a.member == FENCE) {
            return Some(Step::FenceWrites {
                alarm: Alarm {
                    member: FENCE,
                    kind: NOSPACE.into(),
                },
                endpoint,
            });
        }
        return snapshot(ctx, BackupReason::Final);
    };
    let sleeping = crate::model::Sleeping {
        key: backup.key.clone(),
        revision: backup.revision,
        since: ctx.obs.now,
    };
    let recorded = record
        .sleeping
        .as_ref()
        .is_some_and(|s| s.key == sleeping.key);
    (!recorded).then(|| {
        Step::Sleep(ClusterRecord {
            sleeping: Some(sleeping),
            ..record.clone()
        })
    })
}

/// The function's write fence (`hibernate`) is lifted once the group wants members again: woken
/// (the alarm travels in the final snapshot to the restored cluster), or scaled back up before
/// the last voter left. Ranked with the record's bookkeeping: every write waits on it.
pub fn unfence(ctx: &Context) -> Option<Step> {
    let alarm = ctx.view.alarms.iter().find(|a| a.member == FENCE)?;
    (ctx.obs.desired_capacity > 0).then(|| Step::Disarm {
        alarm: alarm.clone(),
        endpoint: ctx.view.endpoint.clone(),
    })
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

/// A cluster that served answers for nothing: changing nothing unless it is lost for good
/// (every member gone, or a majority gone with the survivors' data saved first) and a backup
/// brings its data back.
pub fn recovery(
    obs: &Observation,
    settings: &Settings,
    record: &ClusterRecord,
    detail: &str,
    survivors: &[Survivor],
) -> Plan {
    let unreachable = |detail: String| Plan::waiting(Wait::ClusterUnreachable { detail });
    if let Some(step) = let_go(obs, survivors) {
        return Plan::only(step);
    }
    let Some(policy) = settings.backup.as_ref() else {
        return unreachable(detail.to_string());
    };
    // Whether there is a backup, and which is freshest, is unknown: restore nothing on a
    // guess (and take no survivor's snapshot into a store that fails).
    if let Some(why) = &obs.backups_failing {
        return unreachable(format!(
            "{detail}; the backup store fails ({why}): nothing is restored"
        ));
    }
    if !every_member_gone(obs) {
        let Some(survivor) = quorum_lost_for_good(obs, survivors, record.cluster_id, &record.token)
        else {
            return unreachable(detail.to_string());
        };
        // The survivor's data first, when no backup of this generation is as new.
        let newer = latest(&obs.backups, &record.token)
            .is_none_or(|b| b.revision < survivor.status.revision);
        if newer {
            return Plan::only(Step::Backup {
                member: survivor.member,
                endpoint: survivor.endpoint.clone(),
                reason: BackupReason::Survivor,
                facts: facts(
                    record.token.clone(),
                    survivor.cluster_id,
                    survivor.member,
                    survivor.status.clone(),
                    None,
                    obs.now,
                ),
            });
        }
    }
    if let Some(step) = restore_decided(obs, record) {
        return Plan::only(step);
    }
    if let Some(backup) = asleep_in(obs, record) {
        return wake(obs, settings, record, backup);
    }
    let policy = &unless_asleep(policy, record);
    let Some(seed) = seed_candidate(obs, None) else {
        return unreachable(format!(
            "the cluster is lost for good; a launching instance will seed its restore ({detail})"
        ));
    };
    let Some(restorer) = seed.etcd_version else {
        return Plan::waiting(Wait::VersionUnknown {
            instance: seed.id.clone(),
        });
    };
    match choose_for(obs, policy, Some(restorer)) {
        Choice::Restore(backup) => Plan::only(Step::Restore {
            new: restored(record, &backup, &seed.id, settings, obs.now),
            old: Some(record.clone()),
            skipped: newer_unreadable(obs, &backup, restorer),
            backup,
            seed_arn: seed.arn.clone(),
        }),
        Choice::AwaitRequest => Plan::waiting(Wait::AwaitRestoreRequest {
            stale: stale_request(obs),
        }),
        Choice::Unreadable(backup) => Plan::waiting(unrestorable(seed, restorer, &backup)),
        Choice::NoBackup => unreachable(format!(
            "every member is gone and there is no backup to restore ({detail})"
        )),
    }
}

/// The snapshot a sleeping cluster wakes from: the newest of its generation, at or past the
/// recorded final snapshot's revision (a newer final snapshot, or one taken before a removal
/// when the group was scaled up again before the last voter left); None once nothing that new
/// is in the bucket.
fn asleep_in<'a>(obs: &'a Observation, record: &ClusterRecord) -> Option<&'a Backup> {
    let sleeping = record.sleeping.as_ref()?;
    latest(&obs.backups, &record.token)
        .filter(|b| b.revision >= sleeping.revision)
        .or_else(|| obs.backups.iter().find(|b| b.key == sleeping.key))
}

/// A sleeping cluster whose final snapshot is gone from the bucket restores nothing on a guess:
/// an operator names a backup (`restore-request`), whatever RECOVERY says.
fn unless_asleep(policy: &BackupPolicy, record: &ClusterRecord) -> BackupPolicy {
    let mut policy = policy.clone();
    if record.sleeping.is_some() {
        policy.recovery = Recovery::Manual;
    }
    policy
}

/// A sleeping cluster wakes from exactly its final snapshot when an instance launches, whatever
/// RECOVERY says: this is no disaster, and no request is awaited.
fn wake(obs: &Observation, settings: &Settings, record: &ClusterRecord, backup: &Backup) -> Plan {
    let Some(seed) = seed_candidate(obs, None) else {
        return Plan::waiting(Wait::Asleep {
            key: backup.key.clone(),
            revision: backup.revision,
        });
    };
    let Some(restorer) = seed.etcd_version else {
        return Plan::waiting(Wait::VersionUnknown {
            instance: seed.id.clone(),
        });
    };
    if !readable(backup, Some(restorer)) {
        return Plan::waiting(unrestorable(seed, restorer, backup));
    }
    Plan::only(Step::Restore {
        new: restored(record, backup, &seed.id, settings, obs.now),
        old: Some(record.clone()),
        skipped: vec![],
        backup: backup.clone(),
        seed_arn: seed.arn.clone(),
    })
}

/// A new stack's first generation (no cluster record, `seed` the oldest launching instance):
/// an empty cluster; or with START_FROM=backup, exactly the backup the restore request names
/// (`etcd-asg restore`, a backup copied in from another stack), whatever RECOVERY says, and
/// nothing until there is one. A request it cannot carry out yet is a wait, never an empty
/// cluster in its place. With START_FROM=empty a request is not read here: one left over by a
/// deleted stack of the same name must not restore old data into a new one (it is older than
/// the generation then created, so no later loss uses it either).
pub fn first_generation(obs: &Observation, settings: &Settings, seed: &Instance) -> Step {
    let token = format!("{}-{}", settings.cluster_name, seed.id);
    if !settings.start_from_backup {
        return Step::CreateCluster(ClusterRecord::bootstrapping(
            token,
            seed.id.clone(),
            obs.now,
        ));
    }
    let Some(request) = obs.published.restore_request.as_deref() else {
        return Step::Wait(Wait::AwaitFirstRestore);
    };
    let unusable = |why: String| {
        Step::Wait(Wait::RestoreRequestUnusable {
            request: request.to_string(),
            why,
        })
    };
    if settings.backup.is_none() {
        return unusable(
            "backups are off (no BACKUP_BUCKET): there is no store to restore from".into(),
        );
    }
    if let Some(why) = &obs.backups_failing {
        return unusable(format!("the backup store fails ({why})"));
    }
    let Some(restorer) = seed.etcd_version else {
        return Step::Wait(Wait::VersionUnknown {
            instance: seed.id.clone(),
        });
    };
    let named = match request {
        "latest" => obs.backups.iter().max_by_key(|b| (b.taken_at, b.revision)),
        key => obs.backups.iter().find(|b| b.key == key),
    };
    let Some(backup) = named else {
        return unusable(
            "it names no complete backup in this stack's prefix (`etcd-asg backups`)".into(),
        );
    };
    if !readable(backup, Some(restorer)) {
        return Step::Wait(unrestorable(seed, restorer, backup));
    }
    Step::Restore {
        old: None,
        new: ClusterRecord {
            restored_from: Some(Restore {
                snapshot: BackupRef {
                    key: backup.key.clone(),
                    url: String::new(),
                    sha256: String::new(),
                },
                previous_token: backup.token.clone(),
                previous_seed: String::new(),
                previous_created_at: backup.taken_at,
                copied_from: None,
            }),
            ..ClusterRecord::bootstrapping(token, seed.id.clone(), obs.now)
        },
        backup: backup.clone(),
        seed_arn: seed.arn.clone(),
        skipped: vec![],
    }
}

/// A restore already decided for `old` (its fence written, the record not: a crash or a lost
/// answer between the two), rolled forward as decided: the same generation, seed and backup,
/// while its seed is still held at launch. With the seed gone the record is written anyway by
/// the next restore planned (whose fence write finds this one), and re-seeded from there.
fn restore_decided(obs: &Observation, old: &ClusterRecord) -> Option<Step> {
    let new = obs.published.restored.get(&old.fence())?;
    let snapshot = &new.restored_from.as_ref()?.snapshot;
    let seed = obs.instance(&new.seed).filter(|i| i.state.is_launching())?;
    let backup = obs.backups.iter().find(|b| b.key == snapshot.key)?;
    Some(Step::Restore {
        old: Some(old.clone()),
        new: new.clone(),
        backup: backup.clone(),
        seed_arn: seed.arn.clone(),
        skipped: vec![],
    })
}

/// The backups newer than `chosen` that an etcd of `restorer`'s release cannot read.
fn newer_unreadable(obs: &Observation, chosen: &Backup, restorer: Version) -> Vec<String> {
    obs.backups
        .iter()
        .filter(|b| (b.taken_at, b.revision) > (chosen.taken_at, chosen.revision))
        .filter(|b| !readable(b, Some(restorer)))
        .map(|b| b.key.clone())
        .collect()
}

/// The record of the generation restored from `backup` in place of `old`, seeded by `seed`.
/// Its snapshot's URL and SHA-256 are the store's to tell when it hands the snapshot over.
fn restored(
    old: &ClusterRecord,
    backup: &Backup,
    seed: &str,
    settings: &Settings,
    now: Timestamp,
) -> ClusterRecord {
    ClusterRecord {
        restored_from: Some(Restore {
            snapshot: BackupRef {
                key: backup.key.clone(),
                url: String::new(),
                sha256: String::new(),
            },
            previous_token: old.token.clone(),
            previous_seed: old.seed.clone(),
            previous_created_at: old.created_at,
            copied_from: None,
        }),
        // An adopted cluster restored is still the team's: its authentication is not changed
        // without an explicit setting (`access::enable`).
        adopted_auth: old.adopted_auth.or_else(|| old.adopted().then_some(false)),
        ..ClusterRecord::bootstrapping(
            format!("{}-{seed}", settings.cluster_name),
            seed.to_string(),
            now,
        )
    }
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
    // Never a member etcd found corrupt.
    let corrupt = view.corrupt();
    let healthy = |id: &MemberId| {
        view.healthy.contains(id) && view.statuses.contains_key(id) && !corrupt.contains(id)
    };
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

/// The generations whose backups are this cluster's: the record's, and the one it was restored
/// from. Another stack's (a second Region, a rebuilt stack of the same name sharing the bucket)
/// and older generations are neither pruned nor restored on our own account.
fn lineage(obs: &Observation) -> Option<[&str; 2]> {
    let record = obs.published.cluster.as_ref()?;
    let previous = record
        .restored_from
        .as_ref()
        .map_or(record.token.as_str(), |r| r.previous_token.as_str());
    Some([record.token.as_str(), previous])
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

/// What a lost cluster comes back from.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Choice {
    Restore(Backup),
    /// RECOVERY=manual and no (valid) request yet.
    AwaitRequest,
    NoBackup,
    /// The backup to restore needs a newer etcd than the seed's.
    Unreadable(Backup),
}

/// Whether every member of the cluster that served is gone for good: none of the instances its
/// members had (those with a published config) is left in the group, and no instance is in
/// service. A network partition or a stopped etcd leaves instances in the group: never a restore.
/// An instance terminating that never held data (`never_held_data`) does not count.
pub fn every_member_gone(obs: &Observation) -> bool {
    let old_members_gone = obs
        .published
        .members
        .keys()
        .all(|id| obs.instance(id).is_none_or(|i| !i.state.is_present()));
    let none_in_service = obs.instances.iter().all(|i| {
        !i.state.is_present()
            || i.state.is_launching()
            || never_held_data(obs, &[]).any(|n| n.id == i.id)
    });
    old_members_gone && none_in_service
}

/// The termination of an instance that never held data completes at once (`never_held_data`).
fn let_go(obs: &Observation, survivors: &[Survivor]) -> Option<Step> {
    let i = never_held_data(obs, survivors).next()?;
    Some(Step::Complete {
        instance: i.id.clone(),
        transition: Transition::Terminate,
        result: ActionResult::Continue,
    })
}

/// Terminating instances that never held data while no quorum answers: no config was ever
/// published for them (the function publishes one before any member of theirs can start, and
/// deletes it only once the instance is gone) and no answering member lists them. Seeds held by
/// a wait for a restorable backup are such: let go at once, so that an operator's fix (the
/// template back on the right release, the waiting instances terminated) restores unaided.
fn never_held_data<'a>(
    obs: &'a Observation,
    survivors: &'a [Survivor],
) -> impl Iterator<Item = &'a Instance> {
    obs.instances.iter().filter(move |i| {
        i.state == LifecycleState::TerminatingWait
            && !obs.published.members.contains_key(&i.id)
            && !survivors
                .iter()
                .any(|s| s.name == i.id || s.voters.iter().any(|v| v.name == i.id))
    })
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
            && remaining.len() < quorum(s.voters.len())
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
    match stale_request(obs) {
        Some(_) => None,
        None => obs.published.restore_request.as_deref(),
    }
}

/// A restore request older than the current generation (`request_for_this_generation`), which
/// the wait for a new one reports.
pub fn stale_request(obs: &Observation) -> Option<StaleRequest> {
    let request = obs.published.restore_request.as_deref()?;
    let created = obs.published.cluster.as_ref()?.created_at;
    let at = obs.published.restore_request_at?;
    (at <= created).then(|| StaleRequest {
        request: request.to_string(),
        requested_at: at,
        generation_created_at: created,
    })
}

pub fn choose(obs: &Observation, policy: &BackupPolicy) -> Choice {
    choose_for(obs, policy, None)
}

/// The backup to restore: the freshest of this cluster's lineage (RECOVERY=auto, or a request
/// for `latest`), or the one a request names. One an etcd of `restorer`'s release (when known)
/// cannot read (`versions::can_restore`) is never passed over for an older one on a guess: that
/// would drop every write since (a launch template rolled back a minor after a total loss).
/// It is named instead, and waited on; an operator may still name an older backup.
pub fn choose_for(obs: &Observation, policy: &BackupPolicy, restorer: Option<Version>) -> Choice {
    let ours = |b: &&Backup| lineage(obs).is_none_or(|l| l.contains(&b.token.as_str()));
    let freshest = || {
        obs.backups
            .iter()
            .filter(ours)
            .max_by_key(|b| (b.taken_at, b.revision))
    };
    let found = match policy.recovery {
        Recovery::Auto => freshest(),
        Recovery::Manual => match request_for_this_generation(obs) {
            None => return Choice::AwaitRequest,
            Some("latest") => freshest(),
            // An operator naming a key may pick any, another stack's included.
            Some(key) => obs.backups.iter().find(|b| b.key == key),
        },
    };
    match (found, policy.recovery) {
        (Some(b), _) if !readable(b, restorer) => Choice::Unreadable(b.clone()),
        (Some(b), _) => Choice::Restore(b.clone()),
        // A request naming no backup we have: keep waiting for a good one.
        (None, Recovery::Manual) => Choice::AwaitRequest,
        (None, Recovery::Auto) => Choice::NoBackup,
    }
}

/// Whether an etcd of `restorer`'s release can restore `backup`; a backup or a restorer whose
/// release is not named is taken as readable (taken on 3.5 or older, before keys named it).
fn readable(backup: &Backup, restorer: Option<Version>) -> bool {
    match (backup.etcd_version, restorer) {
        (Some(needs), Some(restorer)) => crate::versions::can_restore(needs, restorer),
        _ => true,
    }
}

/// The wait for a seed of `restorer`'s release that cannot read `backup`.
fn unrestorable(seed: &Instance, restorer: Version, backup: &Backup) -> Wait {
    Wait::NoRestorableBackup {
        instance: seed.id.clone(),
        seed_version: restorer.to_string(),
        backup: backup.key.clone(),
        needs: backup
            .etcd_version
            .map_or_else(String::new, |v| v.minor_str()),
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
            etcd_version: None,
        }
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
            instances: vec![],
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
            incomplete_backups: vec![],
            undescribed: Default::default(),
            zones: vec![],
            suspended: Default::default(),
            backups_failing: None,
            now,
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

    #[test]
    fn manual_recovery_waits_for_a_request_naming_a_backup_we_have() {
        let mut obs = Observation {
            instances: vec![],
            desired_capacity: 3,
            cluster: crate::model::ClusterState::unreachable(""),
            published: Default::default(),
            backups: vec![backup(10, 1), backup(20, 2)],
            incomplete_backups: vec![],
            undescribed: Default::default(),
            zones: vec![],
            suspended: Default::default(),
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
            "t".into(),
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
