//! Recovery: what a lost cluster is restored from, and when; and a new stack's first
//! generation (empty, or restored from a backup copied in).
//!
//! - Recovery, never on a guess: only when a cluster that served answers for nothing and none of
//!   its members' instances is left in the group (a partition leaves them in the group), and no
//!   instance is in service (one might run an etcd out of reach). `RECOVERY=auto` restores the
//!   freshest backup; `manual` waits for `<prefix>/restore-request`. A sleeping cluster wakes
//!   from its final snapshot instead (`hibernate`, which the ranking hands in).
//! - While the store fails, nothing is restored: which backup is freshest is unknown.

use super::context::seed_candidate;
use super::snapshots::{facts, latest, lineage, readable, restored, unrestorable};
use super::step::{BackupReason, Plan, Step};
use super::wait::{StaleRequest, Wait};
use crate::config::{BackupPolicy, Recovery, Settings};
use crate::model::{
    quorum, ActionResult, Backup, BackupRef, ClusterRecord, Instance, LifecycleState, Observation,
    Restore, Survivor, Transition,
};
use crate::versions::Version;

/// A cluster that served answers for nothing: changing nothing unless it is lost for good
/// (every member gone, or a majority gone with the survivors' data saved first) and a backup
/// brings its data back. The ranking hands in what hibernation says: `policy`, the backup policy
/// as it stands for `record` (None with backups off; a sleeping cluster's restore is an
/// operator's to name, `hibernate::unless_asleep`), and `wake`, asked once the cluster is known
/// lost: the plan of a sleeping cluster waking from its final snapshot (`hibernate::wake`).
pub fn recovery(
    obs: &Observation,
    settings: &Settings,
    policy: Option<&BackupPolicy>,
    record: &ClusterRecord,
    detail: &str,
    survivors: &[Survivor],
    wake: impl FnOnce() -> Option<Plan>,
) -> Plan {
    let unreachable = |detail: String| Plan::waiting(Wait::ClusterUnreachable { detail });
    if let Some(step) = let_go(obs, survivors) {
        return Plan::only(step);
    }
    let Some(policy) = policy else {
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
    if let Some(plan) = wake() {
        return plan;
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Timestamp;

    fn policy() -> BackupPolicy {
        BackupPolicy::for_tests()
    }

    fn backup(taken_at: Timestamp, revision: i64) -> Backup {
        Backup::for_tests(taken_at, revision)
    }

    #[test]
    fn manual_recovery_waits_for_a_request_naming_a_backup_we_have() {
        let mut obs = Observation {
            desired_capacity: 3,
            cluster: crate::model::ClusterState::unreachable(""),
            backups: vec![backup(10, 1), backup(20, 2)],
            now: 100,
            ..Observation::for_tests()
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
