//! The planner's vocabulary: the steps it can choose, and their one rendering. `Display` is the
//! short form every log line, response and CLI screen uses (`remove-member i-0abc member
//! 51ea4121aab8f43d`); `why` is the rule behind it, in a sentence. A wait (`Step::Wait`) means
//! what `wait.rs` says.
//!
//! A step carries everything applying it needs (endpoints, records, facts): the reconciler only
//! translates it into port calls.

use std::fmt;

use super::wait::{identify, Wait};
use crate::model::{
    ActionResult, Alarm, Backup, ClusterRecord, MemberConfig, MemberId, SnapshotFacts, Timestamp,
    Transition,
};

/// What an operator does for a cluster with authentication on (docs/adopting.md): the reason an
/// adoption is refused (`adopt`), or a cluster to adopt that does not answer waits (`record`).
pub const STORE_PASSWORD: &str =
    "store its root password: etcd-asg adopt-secrets --root-password-file FILE";

#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Step {
    CreateCluster(ClusterRecord),
    /// Replace `old`, whose seed never served, with `new`: only if `old` is still the record. A
    /// restored generation's snapshot is handed over to the new seed first.
    ReseedCluster {
        old: ClusterRecord,
        new: ClusterRecord,
        /// The new seed's ARN, which the restored snapshot is handed over to.
        seed_arn: String,
    },
    /// Rewrite the record as having served, with the cluster's id.
    MarkServed(ClusterRecord),
    /// Rewrite the record of the same cluster as asleep at its final snapshot (`sleeping`), or
    /// awake again (None): the group scaled to zero, or back up before the last voter left.
    Sleep(ClusterRecord),
    Publish {
        instance: String,
        /// The instance's ARN: only its own requests may read the config (and bundle).
        instance_arn: String,
        config: MemberConfig,
        /// TLS=managed and the instance has no bundle yet: issue its certificate first.
        certificate: Option<MemberCertificate>,
    },
    AddLearner {
        instance: String,
        peer_url: String,
        /// The voter that answered the member list.
        endpoint: String,
    },
    Promote {
        instance: String,
        member: MemberId,
        /// The leader's client URL: a follower forwards a promote without the caller's token,
        /// which the leader refuses once authentication is on, until the call times out
        /// (etcd-io/etcd#20757; fixed in 3.5 and 3.6 in 2026, never in 3.4).
        endpoint: String,
    },
    TransferLeadership {
        from: MemberId,
        to: MemberId,
        leader_endpoint: String,
    },
    RemoveMember {
        member: MemberId,
        instance: Option<String>,
        reason: Removal,
        /// A voter that answered, not the member being removed when another can take the call.
        endpoint: String,
    },
    Unpublish {
        instance: String,
        /// TLS=managed: its key material (bundle and certificate end) goes first.
        key_material: bool,
    },
    Complete {
        instance: String,
        transition: Transition,
        result: ActionResult,
    },
    /// Remember when this in-service instance's etcd was first seen not answering.
    NoteDown {
        instance: String,
        since: Timestamp,
    },
    /// Its etcd answers again, or it left: forget the mark.
    ForgetDown {
        instance: String,
    },
    /// Have the group replace an instance (SetInstanceHealth Unhealthy), through its hooks.
    Replace {
        instance: String,
        why: Replacement,
    },
    /// Maintenance under NOSPACE: compact all history up to `revision`.
    Compact {
        revision: i64,
        endpoint: String,
    },
    /// Defragment one member, through its own client URL. `looks_full`: under NOSPACE, its
    /// in-use figure fills the quota but may count pages still pending (maintenance rule 3);
    /// otherwise its file is mostly free space.
    Defragment {
        member: MemberId,
        endpoint: String,
        looks_full: bool,
    },
    /// Deactivate an alarm once its cause is gone.
    Disarm {
        alarm: Alarm,
        endpoint: String,
    },
    /// Raise NOSPACE for `model::FENCE` before a hibernating cluster's final snapshot: every
    /// write is refused cluster-wide from then on, so nothing acknowledged is left out of it.
    FenceWrites {
        alarm: Alarm,
        endpoint: String,
    },
    /// Turn etcd's authentication on (ETCD_AUTH=on): the cluster serves and it is off.
    EnableAuth {
        endpoint: String,
    },
    /// Stream a snapshot of `member` into the backup store, recorded with `facts`.
    Backup {
        member: MemberId,
        endpoint: String,
        reason: BackupReason,
        facts: SnapshotFacts,
    },
    /// Delete a backup retention lets go.
    Prune {
        key: String,
    },
    /// The cluster that served is lost for good (every member gone, or a majority gone and the
    /// survivors' data saved): `new` replaces `old` (once), seeded by `new.seed` from `backup`.
    /// Without `old`: a new stack's first generation, restored from the backup an operator asked
    /// for (`etcd-asg restore`), written create-only as any first record.
    /// Only the store can say where the seed fetches the snapshot and what it hashes to: its
    /// hand-over completes `new`'s `restored_from.snapshot`.
    Restore {
        old: Option<ClusterRecord>,
        new: ClusterRecord,
        backup: Backup,
        /// The seed's ARN, which the snapshot is handed over to.
        seed_arn: String,
        /// Newer backups of the lineage the seed's etcd cannot read (taken on a newer minor):
        /// skipped, and said so.
        skipped: Vec<String>,
    },
    /// The launch of an instance whose etcd release etcd would never let join (older than the
    /// cluster version, or more than one minor ahead): ABANDON, said loudly (`why`).
    RefuseLaunch {
        instance: String,
        why: String,
    },
    Wait(Wait),
    Idle,
}

/// TLS=managed: the certificate a member is issued before its config is published.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct MemberCertificate {
    /// The address it names (besides the instance id and MEMBER_CERT_EXTRA_SANS).
    pub address: String,
}

/// Why an in-service instance is replaced.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Replacement {
    /// Its voter's etcd has been down this long.
    Down { member: MemberId, down_secs: i64 },
    /// It survived a cluster that was restored into a new generation: its etcd serves the old
    /// one (config of `token`), and a fresh instance joins the new one in its place.
    OldGeneration { token: String },
    /// TLS=managed: its member certificate has less than a third of its life left; a fresh
    /// instance gets a fresh certificate (no reload in place).
    CertificateExpiring { not_after: Timestamp },
    /// etcd raised its CORRUPT alarm for this member: its data differs from its peers'.
    Corrupt { member: MemberId },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Removal {
    Terminating,
    LearnerNeverStarted,
    /// A learner etcd raised its CORRUPT alarm for: never promoted.
    CorruptLearner,
    InstanceGone,
    /// Its etcd is down and its instance is marked Unhealthy: the group replaces it, possibly
    /// launching the replacement first, which cannot join while the dead member counts.
    Replaced,
}

/// Why a snapshot is taken now.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BackupReason {
    Scheduled,
    BeforeRemoval,
    /// The quorum is lost for good: the freshest survivor's data, before the restore.
    Survivor,
    /// The group is scaled to zero: the last voter's data, before it goes (hibernation).
    Final,
}

/// The next step, and every wait a rule reported on the way: what `plan` would say and why.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Plan {
    pub step: Step,
    pub waits: Vec<Wait>,
}

impl Plan {
    /// A step found before any rule could report a wait (the record's bookkeeping).
    pub fn only(step: Step) -> Self {
        match step {
            Step::Wait(w) => Self::waiting(w),
            step => Self {
                step,
                waits: vec![],
            },
        }
    }

    pub fn waiting(w: Wait) -> Self {
        Self {
            step: Step::Wait(w.clone()),
            waits: vec![w],
        }
    }
}

impl Step {
    pub fn name(&self) -> &'static str {
        match self {
            Self::CreateCluster(r) if r.adopting.is_some() => "adopt",
            Self::CreateCluster(_) => "create-cluster",
            Self::ReseedCluster { .. } => "reseed-cluster",
            Self::MarkServed(_) => "mark-served",
            Self::Sleep(r) if r.sleeping.is_some() => "hibernate",
            Self::Sleep(_) => "wake",
            Self::Publish { .. } => "publish-config",
            Self::AddLearner { .. } => "add-learner",
            Self::Promote { .. } => "promote",
            Self::TransferLeadership { .. } => "transfer-leadership",
            Self::RemoveMember { .. } => "remove-member",
            Self::Unpublish { .. } => "unpublish-config",
            Self::Complete { .. } => "complete-lifecycle-action",
            Self::NoteDown { .. } => "note-down",
            Self::ForgetDown { .. } => "forget-down",
            Self::Replace { .. } => "replace-instance",
            Self::Compact { .. } => "compact",
            Self::Defragment { .. } => "defragment",
            Self::Disarm { .. } => "disarm-alarm",
            Self::FenceWrites { .. } => "fence-writes",
            Self::EnableAuth { .. } => "enable-auth",
            Self::Backup { .. } => "backup",
            Self::Prune { .. } => "prune-backup",
            Self::Restore { .. } => "restore",
            Self::RefuseLaunch { .. } => "refuse-launch",
            Self::Wait(_) => "wait",
            Self::Idle => "idle",
        }
    }

    pub fn instance(&self) -> Option<&str> {
        match self {
            Self::CreateCluster(r) | Self::MarkServed(r) | Self::Sleep(r) => Some(&r.seed),
            Self::ReseedCluster { new, .. } | Self::Restore { new, .. } => Some(&new.seed),
            Self::Publish { instance, .. }
            | Self::AddLearner { instance, .. }
            | Self::Promote { instance, .. }
            | Self::Unpublish { instance, .. }
            | Self::Complete { instance, .. }
            | Self::NoteDown { instance, .. }
            | Self::ForgetDown { instance }
            | Self::RefuseLaunch { instance, .. }
            | Self::Replace { instance, .. } => Some(instance),
            Self::RemoveMember { instance, .. } => instance.as_deref(),
            Self::Wait(w) => w.instance(),
            _ => None,
        }
    }

    pub fn member(&self) -> Option<MemberId> {
        match self {
            Self::Promote { member, .. }
            | Self::RemoveMember { member, .. }
            | Self::Defragment { member, .. }
            | Self::Backup { member, .. } => Some(*member),
            Self::Disarm { alarm, .. } => Some(alarm.member),
            Self::Replace {
                why: Replacement::Down { member, .. } | Replacement::Corrupt { member },
                ..
            } => Some(*member),
            Self::TransferLeadership { from, .. } => Some(*from),
            Self::Wait(w) => w.member(),
            _ => None,
        }
    }

    /// Whether `other` is this step again (the same kind, for the same instance and member).
    pub fn is_again(&self, other: &Step) -> bool {
        (self.name(), self.instance(), self.member())
            == (other.name(), other.instance(), other.member())
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Self::Wait(w) = self {
            return w.fmt(f);
        }
        identify(f, self.name(), self.instance(), self.member())?;
        if let Self::Complete { result, .. } = self {
            write!(f, " {}", result.as_str())?;
        }
        if let Self::RefuseLaunch { why, .. } = self {
            write!(f, ": {why}")?;
        }
        Ok(())
    }
}

impl Step {
    /// The rule behind the step, in a sentence (the CLI's `plan`, the decision log line).
    /// Long: one arm per step, each its sentence; split, the wording would only scatter.
    pub fn why(&self) -> String {
        match self {
            Self::CreateCluster(r) if r.adopting.is_some() => format!(
                "adoption: the cluster at ADOPT_ENDPOINTS is fit: record it as this stack's (cluster {:x}); its {} members leave once the group's instances have joined",
                r.cluster_id.unwrap_or_default(),
                r.adopting.as_ref().map_or(0, |a| a.members.len())
            ),
            Self::CreateCluster(r) => format!(
                "rule 1: no cluster record and no member answers: create the record, seeded by {} (the oldest launching instance)",
                r.seed
            ),
            Self::ReseedCluster { old, new, .. } => format!(
                "rule 1: the seed {} never served and is gone: replace the record, seeded by {}",
                old.seed, new.seed
            ),
            Self::MarkServed(r) => format!(
                "rule 0: the seed {} is a started voter: note in the record that the cluster served",
                r.seed
            ),
            Self::Sleep(r) => match &r.sleeping {
                Some(s) => format!(
                    "hibernation: the group is scaled to zero and the last voter's final snapshot {} (revision {}) is in the bucket: note in the record that the cluster sleeps there",
                    s.key, s.revision
                ),
                None => "hibernation: the group wants instances again while the cluster still runs: note in the record that it is awake".into(),
            },
            Self::Publish { instance, config, .. } => format!(
                "rule 1/4: publish {instance}'s etcd config (initial-cluster-state {:?}, {} members)",
                config.state,
                config.initial_cluster.len()
            ),
            Self::AddLearner { instance, peer_url, .. } => format!(
                "rule 5: {instance} wants membership and no learner exists: add it as a learner at {peer_url}"
            ),
            Self::Promote { instance, member, .. } => {
                format!("rule 4: learner {member} of {instance} has started: promote it")
            }
            Self::TransferLeadership { from, to, .. } => format!(
                "leader {from} must leave or be defragmented: move leadership to {to} first"
            ),
            Self::RemoveMember {
                member,
                instance,
                reason,
                ..
            } => {
                let why = match reason {
                    Removal::Terminating => "its instance is terminating",
                    Removal::LearnerNeverStarted => "its learner never started",
                    Removal::CorruptLearner => "etcd raised CORRUPT for this learner",
                    Removal::InstanceGone => "its instance left the group",
                    Removal::Replaced => "its etcd is down and its instance is being replaced",
                };
                format!(
                    "rule 2: remove member {member}{}: {why}, and the voters that stay keep a quorum",
                    instance.as_ref().map(|i| format!(" ({i})")).unwrap_or_default()
                )
            }
            Self::Unpublish { instance, .. } => {
                format!("rule 2/7: {instance} has no member and is leaving or gone: delete its config")
            }
            Self::Complete {
                instance,
                transition,
                result,
            } => format!(
                "rule 2/3: complete {instance}'s {transition} action with {}",
                result.as_str()
            ),
            Self::NoteDown { instance, .. } => {
                format!("rule 6: {instance}'s etcd does not answer: note since when")
            }
            Self::ForgetDown { instance } => {
                format!("rule 7: {instance} answers again or left: forget its down-mark")
            }
            Self::Replace { instance, why } => match why {
                Replacement::Down { down_secs, .. } => format!(
                    "rule 6: {instance}'s etcd has been down {down_secs} s: mark it Unhealthy so the group replaces it"
                ),
                Replacement::OldGeneration { token } => format!(
                    "rule 6: {instance} survived the restore and still serves the old generation {token}: mark it Unhealthy so a fresh instance joins in its place"
                ),
                Replacement::CertificateExpiring { not_after } => format!(
                    "rule 6: {instance}'s certificate ends at {not_after} (less than a third of its life left): mark it Unhealthy so a fresh instance with a fresh certificate replaces it"
                ),
                Replacement::Corrupt { member } => format!(
                    "rule 6: etcd raised CORRUPT for member {member} on {instance}: mark it Unhealthy so a fresh instance with its peers' data replaces it"
                ),
            },
            Self::Compact { revision, .. } => format!(
                "maintenance: the NOSPACE alarm is raised: compact all history up to revision {revision}, then defragment, then disarm"
            ),
            Self::Defragment { member, looks_full: true, .. } => format!(
                "maintenance: under NOSPACE, member {member}'s in-use figure fills the quota, but it may count pages a compaction freed while a read was open, and this environment has not defragmented it lately: defragment it, which leaves the live data alone in its file"
            ),
            Self::Defragment { member, .. } => {
                format!("maintenance: member {member}'s database file is mostly free space: defragment it")
            }
            Self::EnableAuth { .. } => "access: etcd's authentication is off (ETCD_AUTH=on): create the root user the function acts as and turn it on".into(),
            Self::FenceWrites { .. } => "hibernation: the group is scaled to zero: fence writes (NOSPACE raised by the function, cluster-wide) before the last voter's final snapshot, so that no write is acknowledged after it".into(),
            Self::Disarm { alarm, .. } if alarm.member == crate::model::FENCE => "hibernation: the group wants members again: lift the function's write fence (its NOSPACE alarm)".into(),
            Self::Disarm { alarm, .. } if alarm.kind == crate::model::CORRUPT => format!(
                "rule 6: member {} that etcd found corrupt is no longer a member: disarm its CORRUPT alarm (the cluster refuses writes while it is raised)",
                alarm.member
            ),
            Self::Disarm { alarm, .. } => format!(
                "maintenance: the data fits the quota again: disarm {} of member {}",
                alarm.kind, alarm.member
            ),
            Self::Backup { member, reason, .. } => format!(
                "backups: {} snapshot of member {member} to the bucket",
                match reason {
                    BackupReason::Scheduled => "the interval passed and the revision moved: a scheduled",
                    BackupReason::BeforeRemoval => "a healthy member is about to be removed: a fresh",
                    BackupReason::Survivor => "the quorum is lost for good and this survivor holds the newest data: a",
                    BackupReason::Final => "the group is scaled to zero and this is the last voter: a final",
                }
            ),
            Self::Prune { key } => format!("backups: retention lets {key} go"),
            Self::Restore { old, new, backup, skipped, .. } => format!(
                "{}: start a new generation seeded by {}, restored from {} (revision {}){}",
                if old.is_some() {
                    "recovery: the cluster is lost for good"
                } else {
                    "rule 1: no cluster record, and a restore is requested"
                },
                new.seed, backup.key, backup.revision,
                if skipped.is_empty() {
                    String::new()
                } else {
                    format!("; skipped, taken on a newer etcd than the seed runs: {}", skipped.join(", "))
                }
            ),
            Self::RefuseLaunch { instance, why } => format!(
                "rule 5: {instance} runs an etcd that can never join this cluster: abandon its launch ({why}); fix the stack's EtcdVersion and EtcdDownloadUrl"
            ),
            Self::Wait(w) => w.why(),
            Self::Idle => "nothing to do: membership matches the group and nothing needs maintenance".into(),
        }
    }
}
