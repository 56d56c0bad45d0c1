//! A decorator for every port that lets reads through and refuses every write: it records what
//! would have been done and answers as if it had been. The CLI's `replay` runs the real handler
//! through it against a real account.

use std::sync::{Arc, Mutex};

use crate::config::{Config, Timing};
use crate::error::Error;
use crate::model::{
    ActionResult, Alarm, Backup, BackupListing, BackupRef, ClusterRecord, ClusterState, GroupState,
    MemberConfig, MemberId, PublishedState, SnapshotFacts, Timestamp, Transition,
};
use crate::pki::{Ca, KeyPem, Password};
use crate::ports::{
    Backups, Compacted, Completion, Created, Group, Hook, Lifecycle, Members, PrefixGrant,
    PublishedConfig, Secrets, Snapshot,
};
use crate::reconciler::Reconciler;

/// The writes a dry run refused, in order.
pub type Refused = Arc<Mutex<Vec<String>>>;

pub struct DryRun<T> {
    pub inner: T,
    pub refused: Refused,
}

impl<T> DryRun<T> {
    fn refuse(&self, what: String) {
        self.refused.lock().unwrap().push(what);
    }
}

/// A reconciler whose every port is wrapped.
pub type Dry<G, L, P, M, B> = Reconciler<DryRun<G>, DryRun<L>, DryRun<P>, DryRun<M>, DryRun<B>>;

/// The same reconciler with every port wrapped, and the log its refused writes go to.
pub fn wrap<G, L, P, M, B>(r: Reconciler<G, L, P, M, B>) -> (Dry<G, L, P, M, B>, Refused) {
    let refused = Refused::default();
    let wrap = |inner| DryRun {
        inner,
        refused: refused.clone(),
    };
    (
        Reconciler {
            group: DryRun {
                inner: r.group,
                refused: refused.clone(),
            },
            lifecycle: DryRun {
                inner: r.lifecycle,
                refused: refused.clone(),
            },
            published: DryRun {
                inner: r.published,
                refused: refused.clone(),
            },
            members: wrap(r.members),
            ca: r.ca,
            prepared: r.prepared,
            backups: r.backups.map(|inner| DryRun {
                inner,
                refused: refused.clone(),
            }),
            // Never waits: what comes after a refused write depends on a write that was not
            // made (the invocation takes its own writes as done), so polling shows nothing.
            config: Config {
                timing: Timing {
                    wait_budget: std::time::Duration::ZERO,
                    ..r.config.timing
                },
                ..r.config
            },
            clock: r.clock,
            backup_failed_at: Default::default(),
            hooks: Default::default(),
            defragmented: Default::default(),
        },
        refused,
    )
}

impl<G: Group> Group for DryRun<G> {
    async fn list(&self) -> Result<GroupState, Error> {
        self.inner.list().await
    }

    async fn locate(&self, group: GroupState) -> GroupState {
        self.inner.locate(group).await
    }

    async fn has_warm_pool(&self) -> Result<bool, Error> {
        self.inner.has_warm_pool().await
    }

    async fn set_unhealthy(&self, instance: &str) -> Result<(), Error> {
        self.refuse(format!("SetInstanceHealth {instance} Unhealthy"));
        Ok(())
    }
}

impl<L: Lifecycle> Lifecycle for DryRun<L> {
    async fn complete(
        &self,
        instance: &str,
        transition: Transition,
        result: ActionResult,
    ) -> Result<Completion, Error> {
        self.refuse(format!(
            "CompleteLifecycleAction {instance} {transition} {}",
            result.as_str()
        ));
        Ok(Completion::Done)
    }

    async fn heartbeat(&self, instance: &str, transition: Transition) -> Result<Completion, Error> {
        self.refuse(format!(
            "RecordLifecycleActionHeartbeat {instance} {transition}"
        ));
        Ok(Completion::Done)
    }

    async fn hooks(&self) -> Result<Vec<Hook>, Error> {
        self.inner.hooks().await
    }
}

impl<P: PublishedConfig> PublishedConfig for DryRun<P> {
    async fn load(&self) -> Result<PublishedState, Error> {
        self.inner.load().await
    }

    async fn create_cluster(&self, record: &ClusterRecord) -> Result<Created, Error> {
        self.refuse(format!("create cluster record seeded by {}", record.seed));
        Ok(Created::Created)
    }

    async fn replace_cluster(
        &self,
        old: &ClusterRecord,
        new: &ClusterRecord,
    ) -> Result<Created, Error> {
        self.refuse(format!(
            "replace cluster record seeded by {} with one seeded by {}",
            old.seed, new.seed
        ));
        Ok(Created::Created)
    }

    async fn mark_served(&self, record: &ClusterRecord) -> Result<Created, Error> {
        self.refuse(format!(
            "record that the cluster seeded by {} served",
            record.seed
        ));
        Ok(Created::Created)
    }

    async fn note_down(&self, instance: &str, since: Timestamp) -> Result<(), Error> {
        self.refuse(format!("note {instance} down since {since}"));
        Ok(())
    }

    async fn note_marked(&self, instance: &str, at: Timestamp) -> Result<(), Error> {
        self.refuse(format!("note {instance} marked Unhealthy at {at}"));
        Ok(())
    }

    async fn forget_down(&self, instance: &str) -> Result<(), Error> {
        self.refuse(format!("forget {instance} down"));
        Ok(())
    }

    async fn request_restore(&self, key: &str) -> Result<(), Error> {
        self.refuse(format!("request a restore of {key}"));
        Ok(())
    }

    async fn restore_cluster(
        &self,
        old: &ClusterRecord,
        new: &ClusterRecord,
    ) -> Result<Created, Error> {
        self.refuse(format!(
            "replace the record of the lost cluster seeded by {} with a restored one seeded by {}",
            old.seed, new.seed
        ));
        Ok(Created::Created)
    }

    async fn publish(
        &self,
        instance: &str,
        _instance_arn: &str,
        config: &MemberConfig,
    ) -> Result<(), Error> {
        self.refuse(format!(
            "publish config of {instance} ({:?}, {} members)",
            config.state,
            config.initial_cluster.len()
        ));
        Ok(())
    }

    async fn unpublish(&self, instance: &str, key_material: bool) -> Result<(), Error> {
        if key_material {
            self.refuse(format!("delete {instance}'s certificate and key"));
        }
        self.refuse(format!("delete config of {instance}"));
        Ok(())
    }
}

impl<P: Secrets> Secrets for DryRun<P> {
    async fn load_ca(&self) -> Result<Option<Ca>, Error> {
        self.inner.load_ca().await
    }

    async fn create_ca(&self, _ca: &Ca) -> Result<Created, Error> {
        self.refuse("create the cluster's CA".into());
        Ok(Created::Created)
    }

    async fn load_token_key(&self) -> Result<Option<KeyPem>, Error> {
        self.inner.load_token_key().await
    }

    async fn create_token_key(&self, _key: &KeyPem) -> Result<Created, Error> {
        self.refuse("create the cluster's token key".into());
        Ok(Created::Created)
    }

    async fn load_root_password(&self) -> Result<Option<Password>, Error> {
        self.inner.load_root_password().await
    }

    async fn put_root_password(&self, _password: &Password) -> Result<(), Error> {
        self.refuse("store the adopted cluster's root password".into());
        Ok(())
    }

    async fn hand_out(
        &self,
        instance: &str,
        _instance_arn: &str,
        _bundle: &KeyPem,
        _not_after: Timestamp,
    ) -> Result<(), Error> {
        self.refuse(format!("hand {instance} its certificate and key"));
        Ok(())
    }
}

impl<B: Backups> Backups for DryRun<B> {
    async fn list(&self) -> Result<BackupListing, Error> {
        self.inner.list().await
    }

    async fn store(
        &self,
        _snapshot: Snapshot,
        facts: &SnapshotFacts,
    ) -> Result<(Backup, String), Error> {
        self.refuse(format!(
            "store a snapshot of member {} at revision {}",
            facts.member, facts.revision
        ));
        let backup = Backup {
            key: "(dry run)".into(),
            token: facts.token.clone(),
            taken_at: facts.taken_at,
            revision: facts.revision,
            size: 0,
            etcd_version: None,
        };
        Ok((backup, String::new()))
    }

    async fn delete(&self, key: &str) -> Result<(), Error> {
        self.refuse(format!("delete backup {key}"));
        Ok(())
    }

    async fn hand_over(
        &self,
        key: &str,
        instance_arn: &str,
    ) -> Result<(BackupRef, Option<String>), Error> {
        self.refuse(format!("let {instance_arn} read backup {key}"));
        let snapshot = BackupRef {
            key: key.into(),
            url: String::new(),
            sha256: String::new(),
        };
        Ok((snapshot, None))
    }

    async fn holds(&self, key: &str) -> Result<i64, Error> {
        self.inner.holds(key).await
    }
}

impl<M: Members> Members for DryRun<M> {
    fn identify(&self, ca: &Ca) -> Result<(), Error> {
        self.inner.identify(ca)
    }

    fn use_root_password(&self, password: Password, login_first: &[String]) {
        self.inner.use_root_password(password, login_first)
    }

    async fn observe(&self, endpoints: &[String], cluster: Option<u64>) -> ClusterState {
        self.inner.observe(endpoints, cluster).await
    }

    async fn add_learner(&self, _endpoint: &str, peer_url: &str) -> Result<MemberId, Error> {
        self.refuse(format!("member add {peer_url} as learner"));
        Ok(MemberId(0))
    }

    async fn promote(&self, _endpoint: &str, id: MemberId) -> Result<(), Error> {
        self.refuse(format!("member promote {id}"));
        Ok(())
    }

    async fn remove(&self, _endpoint: &str, id: MemberId) -> Result<(), Error> {
        self.refuse(format!("member remove {id}"));
        Ok(())
    }

    async fn compact(&self, _endpoint: &str, revision: i64) -> Result<Compacted, Error> {
        self.refuse(format!("compact to revision {revision}"));
        Ok(Compacted::Now)
    }

    async fn defragment(&self, endpoint: &str) -> Result<(), Error> {
        self.refuse(format!("defragment {endpoint}"));
        Ok(())
    }

    async fn disarm(&self, _endpoint: &str, alarm: &Alarm) -> Result<(), Error> {
        self.refuse(format!("disarm {} of {}", alarm.kind, alarm.member));
        Ok(())
    }

    async fn raise(&self, _endpoint: &str, alarm: &Alarm) -> Result<(), Error> {
        self.refuse(format!("raise {} for {}", alarm.kind, alarm.member));
        Ok(())
    }

    /// Reading: a snapshot changes nothing (the store it would go to refuses).
    async fn snapshot(&self, endpoint: &str) -> Result<Snapshot, Error> {
        self.inner.snapshot(endpoint).await
    }

    async fn transfer_leadership(&self, _leader: &str, to: MemberId) -> Result<(), Error> {
        self.refuse(format!("move leadership to {to}"));
        Ok(())
    }

    async fn enable_auth(&self, _endpoint: &str) -> Result<(), Error> {
        self.refuse("turn etcd's authentication on".into());
        Ok(())
    }

    async fn grant_prefix(&self, _endpoint: &str, grant: &PrefixGrant) -> Result<(), Error> {
        self.refuse(format!(
            "grant {} the prefix {:?}",
            grant.user, grant.prefix
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::Fake;
    use std::time::{Duration, Instant};

    #[tokio::test]
    async fn a_dry_run_changes_nothing_and_says_what_it_would_have_done() {
        let world = Fake::default();
        world.launch(1);
        let config = crate::Config::from_lookup(|k| {
            match k {
                "ASG_NAME" => Some("etcd"),
                "LAUNCH_HOOK_NAME" => Some("etcd-launch"),
                "TERMINATE_HOOK_NAME" => Some("etcd-terminate"),
                "WAIT_BUDGET_SECS" => Some("0"),
                _ => None,
            }
            .map(str::to_string)
        })
        .unwrap();
        let clock_world = world.clone();
        let live = Reconciler {
            group: world.clone(),
            lifecycle: world.clone(),
            published: world.clone(),
            members: world.clone(),
            backups: None::<Fake>,
            ca: Default::default(),
            prepared: Default::default(),
            config,
            clock: Arc::new(move || clock_world.world().now),
            backup_failed_at: Default::default(),
            hooks: Default::default(),
            defragmented: Default::default(),
        };
        let (dry, refused) = wrap(live);
        let schedule = serde_json::json!({"version": "0", "id": "2", "detail-type": "Scheduled Event",
            "source": "aws.events", "account": "1", "time": "2026-11-29T12:00:00Z",
            "region": "us-east-1", "resources": [], "detail": {}});
        dry.handle(&schedule, Instant::now() + Duration::from_secs(30))
            .await
            .unwrap();
        assert!(world.calls().is_empty(), "{:?}", world.calls());
        let refused = refused.lock().unwrap();
        // The held launch's heartbeat first (a write too), then the bootstrap.
        assert_eq!(
            refused[..2],
            [
                "RecordLifecycleActionHeartbeat i-00000001 launch",
                "create cluster record seeded by i-00000001"
            ],
            "{refused:?}"
        );
    }
}
