//! Hibernation: a group scaled to zero keeps its data in a final snapshot of its last voter, and
//! wakes from exactly that snapshot (docs/backups.md, "Hibernation").
//!
//! - The last voter of a group scaled to zero (`leaving`, which the ranking hands `hibernate`)
//!   goes only once its writes are fenced (NOSPACE), a snapshot at its revision is in the bucket
//!   and the record says the cluster sleeps there.
//! - The fence is lifted once the group wants members again (`unfence`).
//! - A sleeping cluster that no member answers for is restored from its final snapshot when an
//!   instance launches, whatever RECOVERY says (`wake`, which the ranking hands `recovery`); with
//!   that snapshot gone an operator names a backup (`unless_asleep`).

use super::context::{seed_candidate, Context};
use super::snapshots::{latest, readable, restored, snapshot, source, unrestorable};
use super::step::{BackupReason, Plan, Step};
use super::wait::Wait;
use crate::config::{BackupPolicy, Recovery, Settings};
use crate::model::{Alarm, Backup, ClusterRecord, Instance, Observation, FENCE, NOSPACE};

/// How long an unfenced last voter waits after a snapshot its writes outran, before the next.
const OUTRUN_PAUSE_SECS: i64 = 60;

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
    // Writes fenced first, whatever backup there is already (NOSPACE, which etcd applies
    // cluster-wide and which travels in the snapshot): a client on a kept connection can no
    // longer be told a write is committed that the snapshot lacks, and the revision read from
    // now on is one after the fence. etcd still applies deletes and lease revocations under
    // NOSPACE (`applierV3Capped`,
    // <https://github.com/etcd-io/etcd/blob/v3.6.17/server/etcdserver/apply/apply.go>): one
    // moves the revision, and the snapshot is taken again.
    if needs_fence(ctx) {
        return Some(Step::FenceWrites {
            alarm: Alarm {
                member: FENCE,
                kind: NOSPACE.into(),
            },
            endpoint,
        });
    }
    let revision = ctx.view.statuses.get(&member).map(|s| s.revision);
    let newest = latest(&ctx.obs.backups, &record.token);
    let final_snapshot = newest.filter(|b| revision.is_some_and(|r| b.revision >= r));
    let Some(backup) = final_snapshot else {
        // Unfenced (below 3.6 with authentication on), a steady writer outruns every snapshot:
        // one a minute then, the operator told, not one after another for as long as it writes.
        let outrun =
            newest.filter(|b| !fenced(ctx) && ctx.obs.now - b.taken_at < OUTRUN_PAUSE_SECS);
        if let (Some(b), Some(now)) = (outrun, revision) {
            return Some(Step::Wait(Wait::FinalSnapshotPending {
                instance: last.id.clone(),
                why: format!(
                    "writes go on past the last snapshot (revision {} of {now}) and no fence can \
                     stop them on this cluster (below 3.6 with authentication on): stop its \
                     clients; another snapshot in {} s",
                    b.revision,
                    OUTRUN_PAUSE_SECS - (ctx.obs.now - b.taken_at)
                ),
            }));
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

/// Whether the last voter's writes are still to be fenced. Not on a cluster below 3.6 with
/// authentication on (or whose version is unknown): etcd 3.4 and 3.5 rebuild their applier
/// chain under NOSPACE without the authorization layer (`newApplierV3Capped(a)` over the bare
/// backend, <https://github.com/etcd-io/etcd/blob/v3.5.36/server/etcdserver/apply.go>; etcd
/// PR #22386), so a fence would let any client change users, roles and authentication for as
/// long as it is up; there the writes of a kept connection after the snapshot stay at risk, as
/// docs/backups.md says. 3.6 rewraps the whole chain.
fn needs_fence(ctx: &Context) -> bool {
    let unsafe_to_fence = ctx.view.auth_enabled
        && ctx
            .view
            .cluster_version
            .is_none_or(|v| (v.major, v.minor) < (3, 6));
    !fenced(ctx) && !unsafe_to_fence
}

/// Whether the function's write fence is raised.
fn fenced(ctx: &Context) -> bool {
    ctx.view.alarms.iter().any(|a| a.member == FENCE)
}

/// The function's write fence (`hibernate`) is lifted once the group wants members again and
/// the record no longer says the cluster sleeps: woken from a final snapshot that carries it
/// (a new generation, not asleep), or scaled back up before the last voter left and a voter
/// serves again (`record`'s wake). Not while the record sleeps: its last voter may be on its
/// way out with the action completed, and writes it took then would be lost at the wake.
/// Ranked with the record's bookkeeping: every write waits on it.
pub fn unfence(ctx: &Context) -> Option<Step> {
    let alarm = ctx.view.alarms.iter().find(|a| a.member == FENCE)?;
    let asleep = ctx
        .obs
        .published
        .cluster
        .as_ref()
        .is_some_and(|r| r.sleeping.is_some());
    (ctx.obs.desired_capacity > 0 && !asleep).then(|| Step::Disarm {
        alarm: alarm.clone(),
        endpoint: ctx.view.endpoint.clone(),
    })
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
pub fn unless_asleep(policy: &BackupPolicy, record: &ClusterRecord) -> BackupPolicy {
    let mut policy = policy.clone();
    if record.sleeping.is_some() {
        policy.recovery = Recovery::Manual;
    }
    policy
}

/// A sleeping cluster wakes from exactly its final snapshot (`asleep_in`) when an instance
/// launches, whatever RECOVERY says: this is no disaster, and no request is awaited. None: the
/// cluster does not sleep, or nothing that new is in the bucket.
pub fn wake(obs: &Observation, settings: &Settings, record: &ClusterRecord) -> Option<Plan> {
    let backup = asleep_in(obs, record)?;
    Some(waking(obs, settings, record, backup))
}

/// The restore of a sleeping cluster from `backup`, or the wait for a seed that can carry it.
fn waking(obs: &Observation, settings: &Settings, record: &ClusterRecord, backup: &Backup) -> Plan {
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
