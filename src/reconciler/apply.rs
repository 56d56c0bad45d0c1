//! Applying a step: its translation into port calls, by concern, and nothing else. Every step
//! carries what it needs (`planner::step`); each port call looks before it acts (create-only
//! writes, deletes of what is gone succeed, "already so" answers are success), so a replay or a
//! crash mid-step changes nothing.

use std::time::Instant;

use tracing::{info, warn};

use super::invocation::Meter;
use super::Reconciler;
use crate::error::Error;
use crate::model::{ActionResult, ClusterRecord, Restore, Timestamp, Transition, Written};
use crate::planner::{Replacement, Step};
use crate::ports::{
    Backups, Compacted, Completion, Created, Group, Lifecycle, Members, PublishedConfig, Secrets,
    SnapshotStream,
};

type Outcome = Result<&'static str, Error>;

/// What a snapshot's upload may take past the snapshot's own time (`until`), to finish.
const UPLOAD_GRACE: std::time::Duration = std::time::Duration::from_secs(20);
/// What applying a step did, and what it wrote under the prefix when the invocation may take
/// that for a listing (`Written`).
pub(super) type Applied = Result<(&'static str, Option<Written>), Error>;

impl<G: Group, L: Lifecycle, P: PublishedConfig + Secrets, M: Members, B: Backups>
    Reconciler<G, L, P, M, B>
{
    /// `now`: the observation's time (a certificate's start); `until`: when a snapshot must stop
    /// (its upload then aborted).
    pub(super) async fn apply(
        &self,
        step: &Step,
        meter: &Meter,
        now: Timestamp,
        until: Instant,
    ) -> Applied {
        let only = |o: Outcome| o.map(|o| (o, None));
        match step {
            Step::CreateCluster(_)
            | Step::ReseedCluster { .. }
            | Step::MarkServed(_)
            | Step::Sleep(_)
            | Step::Restore { .. } => self.record(step, meter).await,
            Step::Publish { .. }
            | Step::Unpublish { .. }
            | Step::NoteDown { .. }
            | Step::ForgetDown { .. } => self.config(step, meter, now).await,
            Step::AddLearner { .. }
            | Step::Promote { .. }
            | Step::TransferLeadership { .. }
            | Step::RemoveMember { .. } => only(self.membership(step, meter).await),
            Step::Replace { .. } | Step::Complete { .. } | Step::RefuseLaunch { .. } => {
                only(self.group_step(step, meter, now).await)
            }
            Step::Compact { .. }
            | Step::Defragment { .. }
            | Step::Disarm { .. }
            | Step::FenceWrites { .. }
            | Step::EnableAuth { .. } => only(self.maintenance(step, meter).await),
            Step::Backup { .. } | Step::Prune { .. } => only(self.backup(step, meter, until).await),
            Step::Wait(_) | Step::Idle => Ok(("nothing", None)),
        }
    }

    /// The cluster record: created once, replaced behind a fence, marked served, restored.
    async fn record(&self, step: &Step, meter: &Meter) -> Applied {
        let published = &self.published;
        // Ours, as written; another's (a lost race) is the next listing's to tell.
        let won = |c: Created, yes, record: &ClusterRecord| match c {
            Created::Created => (yes, Some(Written::Record(record.clone()))),
            Created::AlreadyExists => ("lost-race", None),
        };
        match step {
            Step::CreateCluster(record) => Ok(won(
                meter.aws(published.create_cluster(record)).await?,
                "created",
                record,
            )),
            Step::ReseedCluster { old, new, seed_arn } => {
                // A restored generation's new seed must be able to read the snapshot: it is
                // tagged for one instance, the seed that died.
                if let Some(restore) = &new.restored_from {
                    let store = self.store(step)?;
                    meter
                        .aws(store.hand_over(&restore.snapshot.key, seed_arn))
                        .await?;
                }
                let r = meter.aws(published.replace_cluster(old, new)).await?;
                if r == Created::Created {
                    warn!(old_seed = %old.seed, new_seed = %new.seed, old_token = %old.token,
                        "the seed never served: cluster record replaced, bootstrapping anew");
                }
                Ok(won(r, "reseeded", new))
            }
            Step::MarkServed(record) => Ok(won(
                meter.aws(published.mark_served(record)).await?,
                "recorded",
                record,
            )),
            // The same cluster's newer facts, as mark_served writes them (that generation
            // served: its record is never replaced by a re-seed).
            Step::Sleep(record) => Ok(won(
                meter.aws(published.mark_served(record)).await?,
                if record.sleeping.is_some() {
                    "asleep"
                } else {
                    "awake"
                },
                record,
            )),
            Step::Restore { .. } => self.restore(step, meter).await,
            _ => unreachable!("not a record step: {step}"),
        }
    }

    /// A restored generation's record, once its seed may read the snapshot: replacing the lost
    /// one behind its fence, or a new stack's first (create-only).
    async fn restore(&self, step: &Step, meter: &Meter) -> Applied {
        let Step::Restore {
            old,
            new,
            backup,
            seed_arn,
            skipped,
        } = step
        else {
            unreachable!("not a restore: {step}")
        };
        let published = &self.published;
        let won = |c: Created, record: &ClusterRecord| match c {
            Created::Created => ("restoring", Some(Written::Record(record.clone()))),
            Created::AlreadyExists => ("lost-race", None),
        };
        if !skipped.is_empty() {
            warn!(?skipped, chosen = %backup.key,
                "restore: newer backups skipped, taken on a newer etcd than the seed runs");
        }
        let store = self.store(step)?;
        let (snapshot, copied_from) = meter.aws(store.hand_over(&backup.key, seed_arn)).await?;
        let new = ClusterRecord {
            restored_from: new.restored_from.clone().map(|r| Restore {
                snapshot,
                copied_from,
                ..r
            }),
            ..new.clone()
        };
        let Some(old) = old else {
            // A new stack's first generation: create-only, as any first record.
            let r = meter.aws(published.create_cluster(&new)).await?;
            if r == Created::Created {
                let from = new
                    .restored_from
                    .as_ref()
                    .and_then(|r| r.copied_from.clone());
                info!(snapshot = %backup.key, revision = backup.revision, copied_from = ?from,
                    seed = %new.seed, token = %new.token,
                    "a new cluster, restored from the backup the restore request names");
            }
            return Ok(won(r, &new));
        };
        let r = meter.aws(published.restore_cluster(old, &new)).await?;
        if r == Created::Created {
            tracing::error!(
                snapshot = %backup.key,
                revision = backup.revision,
                snapshot_age_secs = new.created_at - backup.taken_at,
                old_token = %old.token,
                new_token = %new.token,
                seed = %new.seed,
                "the cluster is lost for good: restoring it from a backup; writes \
                 newer than the snapshot (up to its age at the loss) are lost"
            );
        }
        Ok(won(r, &new))
    }

    /// What instances read: their configs and key material, and the down-marks.
    async fn config(&self, step: &Step, meter: &Meter, now: Timestamp) -> Applied {
        let published = &self.published;
        match step {
            Step::Publish {
                instance,
                instance_arn,
                config,
                certificate,
            } => {
                // Its certificate first: the boot script fetches it once the config is there.
                // Its end, when this step issued it.
                let mut cert_not_after = None;
                if let Some(cert) = certificate {
                    let (ca, pki) = self.issuer()?;
                    let issued = ca.issue_member(
                        instance,
                        &cert.address,
                        &pki.extra_sans,
                        pki.member_cert_secs,
                        now,
                    )?;
                    let bundle = issued.bundle(ca);
                    let handed =
                        published.hand_out(instance, instance_arn, &bundle, issued.not_after);
                    meter.aws(handed).await?;
                    info!(%instance, not_after = issued.not_after, "member certificate issued");
                    cert_not_after = Some(issued.not_after);
                }
                meter
                    .aws(published.publish(instance, instance_arn, config))
                    .await?;
                let written = Written::Config {
                    instance: instance.clone(),
                    config: config.clone(),
                    cert_not_after,
                };
                Ok(("published", Some(written)))
            }
            Step::Unpublish {
                instance,
                key_material,
            } => {
                meter
                    .aws(published.unpublish(instance, *key_material))
                    .await?;
                let written = Written::Unpublished {
                    instance: instance.clone(),
                    key_material: *key_material,
                };
                Ok(("unpublished", Some(written)))
            }
            Step::NoteDown { instance, since } => {
                meter.aws(published.note_down(instance, *since)).await?;
                let (instance, since) = (instance.clone(), *since);
                Ok(("noted", Some(Written::DownSince { instance, since })))
            }
            Step::ForgetDown { instance } => {
                meter.aws(published.forget_down(instance)).await?;
                let instance = instance.clone();
                Ok(("forgotten", Some(Written::DownForgotten { instance })))
            }
            _ => unreachable!("not a config step: {step}"),
        }
    }

    /// The CA and how to issue from it (TLS=managed).
    fn issuer(&self) -> Result<(&crate::pki::Ca, &crate::config::Pki), Error> {
        let missing = |detail: &str| Error::Pki {
            what: "issuing a member certificate",
            detail: detail.into(),
        };
        let pki = self
            .config
            .pki
            .as_ref()
            .ok_or_else(|| missing("TLS is not managed"))?;
        let ca = self
            .ca
            .get()
            .ok_or_else(|| missing("TLS=managed but no CA was loaded (Reconciler::prepare)"))?;
        Ok((ca, pki))
    }

    /// etcd's membership. "Peer URLs already exist" on an add is not success: the URL may be a
    /// dead member's whose address this instance reuses (the next observation tells which).
    async fn membership(&self, step: &Step, meter: &Meter) -> Outcome {
        let members = &self.members;
        match step {
            Step::AddLearner {
                peer_url, endpoint, ..
            } => {
                meter.etcd(members.add_learner(endpoint, peer_url)).await?;
                Ok("added")
            }
            Step::Promote {
                member, endpoint, ..
            } => {
                meter.etcd(members.promote(endpoint, *member)).await?;
                Ok("promoted")
            }
            Step::TransferLeadership {
                to,
                leader_endpoint,
                ..
            } => {
                let moved = members.transfer_leadership(leader_endpoint, *to);
                meter.etcd(moved).await?;
                Ok("transferred")
            }
            Step::RemoveMember {
                member, endpoint, ..
            } => {
                meter.etcd(members.remove(endpoint, *member)).await?;
                Ok("removed")
            }
            _ => unreachable!("not a membership step: {step}"),
        }
    }

    /// The group: an instance replaced, a lifecycle action completed.
    async fn group_step(&self, step: &Step, meter: &Meter, now: Timestamp) -> Outcome {
        match step {
            Step::Replace { instance, why } => {
                match why {
                    Replacement::Down { member, down_secs } => warn!(%instance, %member, down_secs,
                        "etcd down too long on an in-service instance: marking it Unhealthy so the group replaces it"),
                    Replacement::OldGeneration { token } => warn!(%instance, old_token = %token,
                        "this instance survived a restore and serves the old generation: marking it Unhealthy so a fresh instance joins in its place"),
                    Replacement::CertificateExpiring { not_after } => info!(%instance, not_after,
                        "member certificate past two thirds of its life: marking the instance Unhealthy so a fresh one replaces it"),
                    Replacement::Corrupt { member } => warn!(%instance, %member,
                        "etcd raised CORRUPT for this member: marking the instance Unhealthy so a fresh one with its peers' data replaces it"),
                }
                // When, first: a mark that leads to no replacement for long is then no longer
                // taken for one under way (`leaving::being_replaced`). A crash between the two
                // leaves the time of a mark not made: the step is planned, and both written, again.
                meter.aws(self.published.note_marked(instance, now)).await?;
                meter.aws(self.group.set_unhealthy(instance)).await?;
                Ok("marked-unhealthy")
            }
            Step::Complete {
                instance,
                transition,
                result,
            } => {
                let done = self.lifecycle.complete(instance, *transition, *result);
                Ok(match meter.aws(done).await? {
                    Completion::Done => "completed",
                    Completion::NotPending => "already-completed",
                })
            }
            Step::RefuseLaunch { instance, why } => {
                tracing::error!(%instance, %why,
                    "refusing the launch: etcd would never let this release join (ABANDON; the group launches another from the same template: fix EtcdVersion and EtcdDownloadUrl)");
                let done =
                    self.lifecycle
                        .complete(instance, Transition::Launch, ActionResult::Abandon);
                Ok(match meter.aws(done).await? {
                    Completion::Done => "abandoned",
                    Completion::NotPending => "already-completed",
                })
            }
            _ => unreachable!("not a group step: {step}"),
        }
    }

    /// Keeping the databases small and the cluster writable, and authentication on.
    async fn maintenance(&self, step: &Step, meter: &Meter) -> Outcome {
        let members = &self.members;
        match step {
            Step::Compact { revision, endpoint } => {
                warn!(
                    revision,
                    "NOSPACE: compacting all history up to the current revision"
                );
                Ok(
                    match meter.etcd(members.compact(endpoint, *revision)).await? {
                        Compacted::Now => "compacted",
                        Compacted::Already => "already-compacted",
                    },
                )
            }
            Step::Defragment { endpoint, .. } => {
                meter.etcd(members.defragment(endpoint)).await?;
                Ok("defragmented")
            }
            Step::Disarm { alarm, endpoint } => {
                meter.etcd(members.disarm(endpoint, alarm)).await?;
                Ok("disarmed")
            }
            Step::FenceWrites { alarm, endpoint } => {
                meter.etcd(members.raise(endpoint, alarm)).await?;
                info!("writes fenced for the final snapshot: NOSPACE raised by the function; lifted when the group wants members again");
                Ok("fenced")
            }
            Step::EnableAuth { endpoint } => {
                meter.etcd(members.enable_auth(endpoint)).await?;
                info!("etcd authentication on: clients need a certificate naming a user with a role (etcd-asg client-cert USER --prefix P); the function acts as root");
                Ok("auth-enabled")
            }
            _ => unreachable!("not a maintenance step: {step}"),
        }
    }

    /// Snapshots into the store, and what retention lets go.
    async fn backup(&self, step: &Step, meter: &Meter, until: Instant) -> Outcome {
        let store = self.store(step)?;
        match step {
            Step::Backup {
                endpoint,
                reason,
                facts,
                ..
            } => {
                let began = Instant::now();
                // Its start (etcd's answer) within the snapshot's time too, not only its chunks.
                let start = tokio::time::timeout_at(
                    tokio::time::Instant::from_std(until),
                    meter.etcd(self.members.snapshot(endpoint)),
                );
                let snapshot = start.await.map_err(|_| Error::OutOfTime {
                    what: "snapshot",
                    detail: "the member did not start streaming within the half of the invocation a snapshot may take".into(),
                })??;
                let snapshot = Box::new(Bounded {
                    inner: snapshot,
                    until,
                    began,
                    streamed: 0,
                });
                // The upload's end (its last part, the completion, the manifest) within a little of
                // the snapshot's time too; one cut off is left to the bucket's rule for
                // incomplete uploads, and to the pruning of halves.
                let stored = tokio::time::timeout_at(
                    tokio::time::Instant::from_std(until + UPLOAD_GRACE),
                    meter.aws(store.store(snapshot, facts)),
                );
                let (backup, sha256) = stored.await.map_err(|_| Error::OutOfTime {
                    what: "snapshot upload",
                    detail: "its last parts, completion or manifest took too long".into(),
                })??;
                let secs = began.elapsed().as_secs_f64();
                let mib_per_s = backup.size as f64 / 1_048_576.0 / secs.max(0.001);
                info!(key = %backup.key, size = backup.size, %sha256, revision = backup.revision,
                    ?reason, elapsed_ms = (secs * 1000.0) as u64, mib_per_s = format!("{mib_per_s:.1}"),
                    "backup stored");
                Ok("stored")
            }
            Step::Prune { key } => {
                meter.aws(store.delete(key)).await?;
                Ok("pruned")
            }
            _ => unreachable!("not a backup step: {step}"),
        }
    }

    fn store(&self, step: &Step) -> Result<&B, Error> {
        self.backups.as_ref().ok_or_else(|| Error::Config {
            var: "BACKUP_BUCKET".into(),
            value: String::new(),
            reason: format!("is needed for {} (backups are off)", step.name()),
        })
    }
}

/// A snapshot stream that ends in `Error::OutOfTime` at `until`: the store aborts its upload
/// (nothing half-stored) and the invocation goes on without the backup. A chunk that never comes
/// is cut off too, not only a slow total.
struct Bounded {
    inner: crate::ports::Snapshot,
    until: Instant,
    began: Instant,
    streamed: u64,
}

impl SnapshotStream for Bounded {
    fn next_chunk(&mut self) -> crate::ports::NextChunk<'_> {
        Box::pin(async move {
            let until = tokio::time::Instant::from_std(self.until);
            match tokio::time::timeout_at(until, self.inner.next_chunk()).await {
                Ok(Ok(Some(chunk))) => {
                    self.streamed += chunk.len() as u64;
                    Ok(Some(chunk))
                }
                Ok(other) => other,
                Err(_) => Err(Error::OutOfTime {
                    what: "snapshot",
                    detail: format!(
                        "{:.1} MiB streamed in {:.1} s, the half of the invocation a snapshot may \
                         take; a database this large needs more CPU (the function's memory \
                         size) or time (its timeout)",
                        self.streamed as f64 / 1_048_576.0,
                        self.began.elapsed().as_secs_f64()
                    ),
                }),
            }
        })
    }
}
