//! What a backup is and which member to take it from, shared by the rules that take, keep and
//! restore backups (`backup`, `recovery`, `hibernate`): the newest of a generation (`latest`),
//! this cluster's generations (`lineage`), the member a snapshot streams from (`source`), the
//! snapshot step and its manifest (`snapshot`, `facts`), whether an etcd can read a backup
//! (`readable`, `unrestorable`) and the record of a generation restored from one (`restored`).
//! No rule lives here: the ranking (`mod.rs`) asks the rule files, which ask this one.

use super::context::Context;
use super::step::{BackupReason, Step};
use super::wait::Wait;
use crate::config::Settings;
use crate::model::{
    Backup, BackupRef, ClusterRecord, ClusterView, Instance, MemberId, MemberStatus, Observation,
    Restore, SnapshotFacts, Timestamp,
};
use crate::versions::Version;

/// The newest backup of the generation `token`.
pub fn latest<'a>(backups: &'a [Backup], token: &str) -> Option<&'a Backup> {
    backups
        .iter()
        .filter(|b| b.token == token)
        .max_by_key(|b| (b.taken_at, b.revision))
}

/// The generations whose backups are this cluster's: the record's, and the one it was restored
/// from. Another stack's (a second Region, a rebuilt stack of the same name sharing the bucket)
/// and older generations are neither pruned nor restored on our own account.
pub(super) fn lineage(obs: &Observation) -> Option<[&str; 2]> {
    let record = obs.published.cluster.as_ref()?;
    let previous = record
        .restored_from
        .as_ref()
        .map_or(record.token.as_str(), |r| r.previous_token.as_str());
    Some([record.token.as_str(), previous])
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

/// A snapshot of the source member (`source`), with what its manifest records.
pub(super) fn snapshot(ctx: &Context, reason: BackupReason) -> Option<Step> {
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

pub(super) fn facts(
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

/// Whether an etcd of `restorer`'s release can restore `backup`; a backup or a restorer whose
/// release is not named is taken as readable (taken on 3.5 or older, before keys named it).
pub(super) fn readable(backup: &Backup, restorer: Option<Version>) -> bool {
    match (backup.etcd_version, restorer) {
        (Some(needs), Some(restorer)) => crate::versions::can_restore(needs, restorer),
        _ => true,
    }
}

/// The wait for a seed of `restorer`'s release that cannot read `backup`.
pub(super) fn unrestorable(seed: &Instance, restorer: Version, backup: &Backup) -> Wait {
    Wait::NoRestorableBackup {
        instance: seed.id.clone(),
        seed_version: restorer.to_string(),
        backup: backup.key.clone(),
        needs: backup
            .etcd_version
            .map_or_else(String::new, |v| v.minor_str()),
    }
}

/// The record of the generation restored from `backup` in place of `old`, seeded by `seed`.
/// Its snapshot's URL and SHA-256 are the store's to tell when it hands the snapshot over.
pub(super) fn restored(
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
