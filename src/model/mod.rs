//! What the reconciler observes and what it publishes, in our own terms: no AWS or HTTP types.
//!
//! One room for each part, all re-exported here (`model::X` is the path everywhere): the plain
//! values (`basics.rs`: a time, a member id), the group (`group.rs`: instances, lifecycle states
//! and actions), the cluster as etcd answers (`cluster.rs`: members, statuses, alarms), the
//! cluster record and its fences (`record.rs`), the bucket's backups (`backup.rs`), one member's
//! env file (`member_config.rs`) and what is under the parameter prefix (`published.rs`); here,
//! the `Observation` that holds them all.

use std::collections::{BTreeMap, BTreeSet};

mod backup;
mod basics;
mod cluster;
mod group;
mod member_config;
mod published;
mod record;

pub use crate::versions::Version;
pub use backup::{Backup, BackupListing, BackupRef, SnapshotFacts};
pub use basics::{MemberId, Timestamp};
pub use cluster::{
    quorum, Alarm, ClusterState, ClusterView, Member, MemberStatus, Survivor, TokenKind, CORRUPT,
    FENCE, NOSPACE,
};
pub use group::{ActionResult, GroupState, Instance, LifecycleState, Transition, VERSION_TAG};
pub use member_config::{is_valid_address, InitialState, MemberConfig};
pub use published::{Published, PublishedState, Written};
pub use record::{Adopting, ClusterRecord, Decision, RecordState, Restore, Sleeping};

/// One complete look at the world; the planner decides from this alone.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Observation {
    pub instances: Vec<Instance>,
    /// The group's desired capacity (see `GroupState`).
    pub desired_capacity: u32,
    /// Instances EC2 did not describe this time, and why (see `GroupState`).
    pub undescribed: BTreeMap<String, String>,
    /// The group's Availability Zones and suspended processes (see `GroupState`).
    pub zones: Vec<String>,
    pub suspended: BTreeSet<String>,
    pub cluster: ClusterState,
    pub published: PublishedState,
    /// Complete backups, oldest first; empty when backups are off.
    pub backups: Vec<Backup>,
    /// Halves of backups a store or a prune left (`BackupListing::incomplete`).
    pub incomplete_backups: Vec<Backup>,
    /// Why the backup store cannot be used this invocation (its listing or a backup failed):
    /// then `backups` is empty and says nothing, and no rule acts on backups. Membership never
    /// waits for the store.
    pub backups_failing: Option<String>,
    pub now: Timestamp,
}

#[cfg(test)]
impl Observation {
    /// The tests' observation, for a test to change what it is about
    /// (`Observation { instances, ..Observation::for_tests() }`): no instance, a desired capacity
    /// of 0, no member answering ("connection refused"), nothing published, no backup, at second
    /// 1000.
    pub fn for_tests() -> Self {
        Observation {
            instances: vec![],
            desired_capacity: 0,
            undescribed: Default::default(),
            zones: vec![],
            suspended: Default::default(),
            cluster: ClusterState::unreachable("connection refused"),
            published: PublishedState::default(),
            backups: vec![],
            incomplete_backups: vec![],
            backups_failing: None,
            now: 1000,
        }
    }
}

impl Observation {
    pub fn instance(&self, id: &str) -> Option<&Instance> {
        self.instances.iter().find(|i| i.id == id)
    }

    /// The group's processes, suspended, that keep an instance marked Unhealthy from being
    /// replaced: ReplaceUnhealthy (the replacement itself), Launch (no new instance),
    /// Terminate (the old one stays)
    /// (<https://docs.aws.amazon.com/autoscaling/ec2/userguide/as-suspend-resume-processes.html>).
    pub fn replacement_suspended(&self) -> Vec<&str> {
        ["ReplaceUnhealthy", "Launch", "Terminate"]
            .into_iter()
            .filter(|p| self.suspended.contains(*p))
            .collect()
    }
}
