//! Observation: the group, the published parameters, etcd and the backup store, read into one
//! `Observation`; AWS only for what the invocation has not seen yet. What ADOPT_ENDPOINTS means
//! for the reconciler is decided here and nowhere else (`Adoption`): the endpoints observed
//! beside the group's, whether the adopted cluster's CA is imported rather than made, whose
//! root password is read, and the error said when the stack's cluster was not adopted.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::invocation::{Listed, Meter, Seen};
use super::Reconciler;
use crate::error::Error;
use crate::model::{BackupListing, ClusterState, Observation, PublishedState};
use crate::planner::{self, Plan};
use crate::ports::{Backups, Group, Lifecycle, Members, PublishedConfig, Secrets};

/// How long backups wait after a backup step failed in this environment.
pub(super) const BACKUP_RETRY_AFTER: Duration = Duration::from_secs(120);

/// What ADOPT_ENDPOINTS asks of the reconciler, read from the settings here alone: the rest of
/// the reconciler takes what this decides.
pub(super) struct Adoption<'a> {
    endpoints: &'a [String],
}

impl<'a> Adoption<'a> {
    /// Whether a cluster is to be adopted (ADOPT_ENDPOINTS is set).
    pub(super) fn asked(&self) -> bool {
        !self.endpoints.is_empty()
    }

    /// The adopted cluster's endpoints: observed beside the group's while it is being adopted,
    /// and logged in to first with its root password.
    pub(super) fn endpoints(&self) -> &'a [String] {
        self.endpoints
    }

    /// A cluster adopted over TLS: its own CA, imported by the operator (`etcd-asg
    /// adopt-secrets`); one of our own would be trusted by none of its members.
    pub(super) fn over_tls(&self) -> bool {
        self.endpoints.iter().any(|u| u.starts_with("https://"))
    }
}

impl<G: Group, L: Lifecycle, P: PublishedConfig + Secrets, M: Members, B: Backups>
    Reconciler<G, L, P, M, B>
{
    /// What ADOPT_ENDPOINTS asks of this reconciler (`Adoption`).
    pub(super) fn adoption(&self) -> Adoption<'_> {
        Adoption {
            endpoints: &self.config.settings.adopt,
        }
    }

    /// One look at the world and what the planner makes of it, changing nothing: what the CLI's
    /// `status` and `plan` show.
    pub async fn look(&self) -> Result<(Observation, Plan), Error> {
        let obs = self
            .observe(&Meter::default(), &mut Seen::default(), None)
            .await?;
        let plan = planner::assess(&obs, &self.config.settings);
        Ok((obs, plan))
    }

    /// Group, then parameters, then etcd: a config is written only after its member exists, so a
    /// config seen here without its member means the member has since been removed. etcd is
    /// asked every time; AWS only for what this invocation has not `seen` (or no longer trusts).
    /// With `beats` (an invocation's; not the CLI's look), the held hooks that are due are
    /// heartbeated right after the group is read, before anything else can fail, and their
    /// failures go there. EC2 failing for some instances leaves them the address they were
    /// published with (`GroupState::with_published_addresses`), never a failed observation.
    /// A listing of the bucket that fails, or a backup that failed in this environment lately,
    /// is why the store is not used: membership goes on without it.
    pub(super) async fn observe(
        &self,
        meter: &Meter,
        seen: &mut Seen,
        beats: Option<&mut Vec<Error>>,
    ) -> Result<Observation, Error> {
        meter.observations.fetch_add(1, Ordering::Relaxed);
        seen.forget_stale_group();
        if seen.group.is_none() {
            let listed = match seen.listed.take() {
                Some(listed) => listed,
                None => meter.aws(self.group.list()).await?,
            };
            if let Some(beats) = beats {
                self.hooks.listed(&listed);
                let due = self.hooks.keep_alive(&self.lifecycle, meter, meter.bound());
                beats.extend(due.await);
            }
            let located = meter.aws(async { Ok(self.group.locate(listed).await) });
            seen.group = Some((located.await?, Instant::now()));
        } else if let Some(beats) = beats {
            let due = self.hooks.keep_alive(&self.lifecycle, meter, meter.bound());
            beats.extend(due.await);
        }
        if seen.published.is_none() {
            let published = meter.aws(self.published.load()).await?;
            self.adopted_or_not(&published);
            seen.published = Some(published);
        }
        let (group, published) = match (&seen.group, &seen.published) {
            (Some((group, _)), Some(published)) => (group.clone(), published.clone()),
            _ => unreachable!("both read above"),
        };
        let group = group.with_published_addresses(&published);
        let topology = &self.config.settings.topology;
        let mut present: Vec<_> = group
            .instances
            .iter()
            .filter(|i| i.state.is_present())
            .collect();
        present.sort_by(|a, b| (a.launched_at, &a.id).cmp(&(b.launched_at, &b.id)));
        let mut endpoints: Vec<String> = present
            .iter()
            .filter_map(|i| i.address.as_deref().map(|a| topology.client_url(a)))
            .collect();
        // A cluster to adopt, or being adopted, answers at its own endpoints too.
        let adopting = published
            .cluster
            .as_ref()
            .is_none_or(|r| r.adopting.is_some());
        if adopting {
            endpoints.extend(self.adoption().endpoints().iter().cloned());
        }
        let expected = published.cluster.as_ref().and_then(|r| r.cluster_id);
        let mut cluster = meter
            .cluster(self.members.observe(&endpoints, expected))
            .await?;
        self.mark_defragmented(&mut cluster);
        // A group scaled to zero, not yet asleep: its last voter goes behind a final snapshot at
        // its revision.
        let hibernating = published
            .cluster
            .as_ref()
            .filter(|r| group.desired_capacity == 0 && r.sleeping.is_none())
            .map(|r| r.token.as_str());
        let (listing, backups_failing) = self.backups(meter, &mut seen.backups, hibernating).await;
        Ok(Observation {
            instances: group.instances,
            desired_capacity: group.desired_capacity,
            undescribed: group.undescribed,
            zones: group.zones,
            suspended: group.suspended,
            cluster,
            published,
            backups: listing.complete,
            incomplete_backups: listing.incomplete,
            backups_failing,
            now: (self.clock)(),
        })
    }

    /// The members this environment defragmented lately (`ClusterView::defragmented`); members
    /// gone from the cluster are forgotten.
    fn mark_defragmented(&self, cluster: &mut ClusterState) {
        let ClusterState::Known(view) = cluster else {
            return;
        };
        let now = (self.clock)();
        let mut defragmented = self.defragmented.lock().unwrap();
        defragmented.retain(|id, _| view.members.iter().any(|m| m.id == *id));
        view.defragmented = view
            .members
            .iter()
            .map(|m| m.id)
            .filter(|id| {
                planner::maintenance::recently_defragmented(defragmented.get(id).copied(), now)
            })
            .collect();
    }

    /// ADOPT_ENDPOINTS set on a stack whose cluster was not adopted (it started its own first:
    /// deployed without it, then updated): the endpoints are ignored, and clients given both
    /// would write to two clusters. Said on every invocation until one or the other is changed.
    fn adopted_or_not(&self, published: &PublishedState) {
        let Some(record) = published.cluster.as_ref() else {
            return;
        };
        let adopted = record.adopting.is_some() || record.token.contains("-adopted-");
        if self.adoption().asked() && !adopted {
            tracing::error!(
                token = %record.token,
                "ADOPT_ENDPOINTS is set, but this stack's cluster was not adopted (it started its \
                 own before): the endpoints are ignored; two clusters run, keep their clients apart"
            );
        }
    }

    /// The backups, or why the store is not used this invocation. While `hibernating` (the
    /// cluster token of a group scaled to zero), the newest backup of that cluster is listed at
    /// the revision its manifest says its snapshot holds: its key names the revision read before
    /// it streamed, and a lease expiring in between would have the last voter snapshotted again
    /// and again.
    async fn backups(
        &self,
        meter: &Meter,
        listed: &mut Listed,
        hibernating: Option<&str>,
    ) -> (BackupListing, Option<String>) {
        let Some(store) = &self.backups else {
            return Default::default();
        };
        let failed_at = *self.backup_failed_at.lock().unwrap();
        if let Some(at) = failed_at.filter(|at| at.elapsed() < BACKUP_RETRY_AFTER) {
            if listed.is_none() {
                *listed = Some(Err(format!(
                    "a backup failed {} s ago in this environment; backups wait {} s after a failure",
                    at.elapsed().as_secs(),
                    BACKUP_RETRY_AFTER.as_secs()
                )));
            }
        }
        if listed.is_none() {
            let mut listing = meter.aws(store.list()).await;
            if let (Ok(found), Some(token)) = (&mut listing, hibernating) {
                let newest = found
                    .complete
                    .iter_mut()
                    .filter(|b| b.token == token)
                    .max_by_key(|b| (b.taken_at, b.revision));
                if let Some(newest) = newest {
                    match meter.aws(store.holds(&newest.key)).await {
                        Ok(holds) => newest.revision = newest.revision.max(holds),
                        // Its key's revision stands: at worst another final snapshot.
                        Err(e) => tracing::warn!(key = %newest.key, error = ?e,
                            "the newest backup's manifest cannot be read: taken at its key's revision"),
                    }
                }
            }
            *listed = Some(listing.map_err(|e| {
                tracing::error!(error = ?e, "the backup store cannot be listed: going on without backups this invocation");
                e.to_string()
            }));
        }
        match listed {
            Some(Ok(found)) => (found.clone(), None),
            Some(Err(why)) => (Default::default(), Some(why.clone())),
            None => Default::default(),
        }
    }
}
