//! The Auto Scaling group as observed: its instances, their lifecycle states and addresses, and
//! the lifecycle actions' transitions and results.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::basics::Timestamp;
use super::published::PublishedState;
use crate::versions::Version;

/// The lifecycle states Auto Scaling reports for an instance in a group.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum LifecycleState {
    Pending,
    PendingWait,
    PendingProceed,
    InService,
    Terminating,
    TerminatingWait,
    TerminatingProceed,
    Terminated,
    Standby,
    Detaching,
    /// Warm-pool and future states: kept verbatim, treated as neither joining nor leaving.
    Other(String),
}

impl LifecycleState {
    pub fn parse(s: &str) -> Self {
        match s {
            "Pending" => Self::Pending,
            "Pending:Wait" => Self::PendingWait,
            "Pending:Proceed" => Self::PendingProceed,
            "InService" => Self::InService,
            "Terminating" => Self::Terminating,
            "Terminating:Wait" => Self::TerminatingWait,
            "Terminating:Proceed" => Self::TerminatingProceed,
            "Terminated" => Self::Terminated,
            "Standby" => Self::Standby,
            "Detaching" => Self::Detaching,
            other => Self::Other(other.to_string()),
        }
    }

    /// Instances that should be (or become) members of the cluster.
    pub fn wants_membership(&self) -> bool {
        matches!(
            self,
            Self::Pending | Self::PendingWait | Self::PendingProceed | Self::InService
        )
    }

    /// Not yet in service: the only instances that may seed a new cluster.
    pub fn is_launching(&self) -> bool {
        matches!(self, Self::Pending | Self::PendingWait)
    }

    /// Instances still running etcd (or about to): a member of one is not an orphan.
    pub fn is_present(&self) -> bool {
        self.wants_membership()
            || matches!(self, Self::TerminatingWait | Self::Standby | Self::Other(_))
    }
}

impl fmt::Display for LifecycleState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Self::Pending => "Pending",
            Self::PendingWait => "Pending:Wait",
            Self::PendingProceed => "Pending:Proceed",
            Self::InService => "InService",
            Self::Terminating => "Terminating",
            Self::TerminatingWait => "Terminating:Wait",
            Self::TerminatingProceed => "Terminating:Proceed",
            Self::Terminated => "Terminated",
            Self::Standby => "Standby",
            Self::Detaching => "Detaching",
            Self::Other(s) => s,
        };
        f.write_str(s)
    }
}

/// The group as one DescribeAutoScalingGroups call (and EC2's addresses) shows it.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct GroupState {
    pub instances: Vec<Instance>,
    /// How many instances the group wants in service: with the last voter leaving, above 0
    /// means a replacement is coming even before it is listed.
    pub desired_capacity: u32,
    /// Instances EC2 did not describe this time, and why: a zone with a service disruption
    /// fails every DescribeInstances that names one of its instances, and a new instance is
    /// unknown to EC2 for a while (`InvalidInstanceID.NotFound`). They have no address from EC2
    /// (`with_published_addresses` gives them the one they were published with) and no launch
    /// time (0).
    pub undescribed: BTreeMap<String, String>,
    /// The group's Availability Zones, which it balances its instances across.
    pub zones: Vec<String>,
    /// The group's suspended processes (`ReplaceUnhealthy`, `Launch`, `Terminate`,
    /// `AZRebalance`, …): while one of the first three is, an instance marked Unhealthy is not
    /// replaced.
    pub suspended: BTreeSet<String>,
}

impl GroupState {
    /// Each instance EC2 did not describe gets the address its published config names (an
    /// instance's address does not change while it runs, and the config was written from it):
    /// a fresh Lambda environment, which has no address cached, is not blinded by an impaired
    /// zone. One never published keeps none, and every rule that needs its address waits.
    pub fn with_published_addresses(mut self, published: &PublishedState) -> Self {
        for i in &mut self.instances {
            if i.address.is_none() && self.undescribed.contains_key(&i.id) {
                i.address = published
                    .members
                    .get(&i.id)
                    .and_then(|p| p.config.address());
            }
        }
        self
    }
}

/// One instance of the group, as Auto Scaling and EC2 describe it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Instance {
    pub id: String,
    /// `arn:<partition>:ec2:<region>:<account>:instance/<id>`: what the instance's own requests
    /// carry as `ec2:SourceInstanceARN`, which its parameters and snapshot are tagged with.
    pub arn: String,
    pub state: LifecycleState,
    /// The address etcd peers and clients reach it on; None until EC2 reports one.
    pub address: Option<String>,
    pub launched_at: Timestamp,
    /// Auto Scaling's health status: false once marked `Unhealthy` (by EC2's checks, the load
    /// balancer's, or this function), until the group replaces it.
    pub healthy: bool,
    /// Its Availability Zone, as Auto Scaling lists it.
    pub zone: Option<String>,
    /// The etcd release it runs, as its `etcd-asg-etcd-version` tag declares (the stack's group
    /// propagates it at launch; the boot script refuses to start any other release). None: the
    /// tag is missing or not a version, and the instance is never seeded or joined.
    pub etcd_version: Option<Version>,
}

/// The instance tag that declares which etcd release an instance runs (the stack's group
/// propagates it at launch from `EtcdVersion`).
pub const VERSION_TAG: &str = "etcd-asg-etcd-version";

#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, PartialOrd, Ord)]
pub enum Transition {
    Launch,
    Terminate,
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Launch => "launch",
            Self::Terminate => "terminate",
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ActionResult {
    Continue,
    Abandon,
}

impl ActionResult {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Continue => "CONTINUE",
            Self::Abandon => "ABANDON",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{InitialState, MemberConfig, Published};

    #[test]
    fn an_instance_ec2_did_not_describe_gets_the_address_it_was_published_with() {
        let config = |peer: &str| MemberConfig {
            name: "i-1".into(),
            initial_cluster: vec![],
            state: InitialState::Existing,
            token: "t".into(),
            peer_url: peer.into(),
            client_url: String::new(),
            auto_compaction_retention: "1h".into(),
            quota_backend_bytes: 1,
            snapshot_count: 10_000,
            restore: None,
            client_cert_auth: false,
            metrics_url: None,
            root_tokens: false,
            etcd_version: None,
        };
        for (peer, want) in [
            ("https://10.0.1.13:2380", Some("10.0.1.13")),
            (
                "http://ip-10-0-1-13.ec2.internal:2380",
                Some("ip-10-0-1-13.ec2.internal"),
            ),
            ("https://[fd00::7]:2380", Some("fd00::7")),
            ("https://10.0.1.13", Some("10.0.1.13")),
            ("10.0.1.13:2380", None),
            ("https://a,b:2380", None),
        ] {
            assert_eq!(config(peer).address().as_deref(), want, "{peer}");
        }
        let instance = |id: &str| Instance {
            id: id.into(),
            arn: String::new(),
            state: LifecycleState::InService,
            address: None,
            launched_at: 0,
            healthy: true,
            zone: None,
            etcd_version: None,
        };
        let group = GroupState {
            instances: vec![instance("i-1"), instance("i-2"), instance("i-3")],
            desired_capacity: 3,
            // i-3 EC2 described (it has no address yet): not taken from a config.
            undescribed: [
                ("i-1".into(), "Unavailable".into()),
                ("i-2".into(), "x".into()),
            ]
            .into(),
            ..GroupState::default()
        };
        let mut published = PublishedState::default();
        for id in ["i-1", "i-3"] {
            let p = Published {
                config: config("https://10.0.1.13:2380"),
                published_at: 0,
            };
            published.members.insert(id.into(), p);
        }
        let g = group.with_published_addresses(&published);
        let addresses: Vec<Option<&str>> =
            g.instances.iter().map(|i| i.address.as_deref()).collect();
        assert_eq!(addresses, [Some("10.0.1.13"), None, None]);
    }
}
