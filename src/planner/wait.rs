//! What a wait means, in one place: the waits the planner can report (`Wait`), and per wait
//! its name, whom it is for, its reason in a sentence (`why`), its one rendering (`Display`),
//! whether an invocation polls it, the hooks it holds, its own log line and level (`report`)
//! and the metrics it feeds (`feeds`). Adding a wait touches this file and the rule that
//! returns it.

use std::fmt;

use crate::model::{MemberId, Timestamp};

/// A restore request written before the current generation was created: not for this loss.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct StaleRequest {
    pub request: String,
    pub requested_at: Timestamp,
    pub generation_created_at: Timestamp,
}

/// Work remains, but no step is safe or useful right now.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Wait {
    SeedStarting {
        instance: String,
    },
    LearnerStarting {
        instance: String,
    },
    /// A cluster record exists but no member answers: never bootstrap again, change nothing.
    ClusterUnreachable {
        detail: String,
    },
    /// A record that never served, whose seed is gone, and no launching instance to seed anew.
    NoSeed,
    /// The cluster sleeps (the group was scaled to zero) at its final snapshot: it wakes, from
    /// exactly that snapshot, when an instance launches.
    Asleep {
        key: String,
        revision: i64,
    },
    /// The last voter's termination is held until its final snapshot is in the bucket: the
    /// store fails, or the snapshot has not caught up with the member's revision yet.
    FinalSnapshotPending {
        instance: String,
        why: String,
    },
    /// ADOPT_ENDPOINTS: the cluster there cannot be adopted as it is (`why`); nothing changes.
    AdoptionRefused {
        why: String,
    },
    /// An adopted member (outside the group) does not answer: removed once it has been down
    /// UNHEALTHY_REPLACE_SECS (from its down-mark), unless that would leave two voters before a
    /// member of the group has joined (`last_margin`: an operator's call).
    AdoptedMemberDown {
        member: MemberId,
        name: String,
        down_secs: i64,
        last_margin: bool,
    },
    /// START_FROM=backup: a new stack (no cluster record) never starts empty; its first
    /// launches are held until a restore request names the backup to start from.
    AwaitFirstRestore,
    /// A new stack (no cluster record) with a restore request it cannot carry out yet (`why`):
    /// it starts from that backup or not at all, never from an empty cluster instead.
    RestoreRequestUnusable {
        request: String,
        why: String,
    },
    /// Every member is gone and RECOVERY=manual: waiting for `<prefix>/restore-request`; one
    /// found there older than the lost generation is `stale` (never used: it was for an
    /// earlier loss).
    AwaitRestoreRequest {
        stale: Option<StaleRequest>,
    },
    /// Removing this member now would leave fewer healthy voters than a quorum; `instance` is held
    /// in its terminate hook meanwhile, `blocking` are the voters whose etcd is down.
    QuorumGuard {
        member: MemberId,
        instance: Option<String>,
        blocking: Vec<MemberId>,
    },
    VoterNotStarted {
        member: MemberId,
    },
    /// The last voter's instance is held until `replacement` has joined and been promoted.
    LastVoterHeld {
        instance: String,
        replacement: String,
    },
    /// The last voter is leaving and no replacement is listed yet, but the group's desired
    /// capacity says one is coming: held (heartbeats) until it is listed, then `LastVoterHeld`.
    LastVoterAwaitsReplacement {
        instance: String,
        desired_capacity: u32,
    },
    /// A voter does not answer, and etcd refuses every add until it answers or is removed.
    JoinBlocked {
        member: MemberId,
    },
    /// etcd found the leader corrupt: no learner is added under it (it would receive the
    /// leader's data as its raft snapshot) until leadership has moved to a sound voter.
    CorruptLeader {
        member: MemberId,
    },
    /// A started member of another instance holds this instance's peer URL (a reused address):
    /// it must be removed before this instance can join.
    PeerUrlTaken {
        instance: String,
        member: MemberId,
    },
    /// A voter's etcd is down while its instance is in service; replaced once down long enough
    /// and only while the other voters keep a quorum.
    MemberDown {
        instance: String,
        member: MemberId,
        down_secs: i64,
    },
    /// An instance that would be replaced (its member down long enough, its certificate near its
    /// end, an old generation's) while the group will not replace it: `processes` are
    /// suspended. The function marks nothing until they are resumed.
    ReplacementSuspended {
        instance: String,
        processes: Vec<String>,
    },
    /// A voter the function cannot reach, but to which an answering member reports an active
    /// raft connection: down for the function only (a route, an ACL, an ENI problem). Never
    /// replaced on the function's view alone; a replacement in the same place could look down
    /// again, a loop at quorum margin zero.
    MemberUnreachableFromFunction {
        instance: String,
        member: MemberId,
        down_secs: i64,
    },
    /// The observation still calls for a step this invocation has just applied (AWS is
    /// eventually consistent: a completed action can show a while longer): a later invocation
    /// sees it done.
    NotYetVisible {
        step: &'static str,
        instance: Option<String>,
    },
    /// NOSPACE: history compacted and every member defragmented, and the live data alone still
    /// fills the backend quota. Disarming would only alarm again: data must be deleted.
    LiveDataOverQuota {
        in_use: u64,
        quota: u64,
    },
    /// etcd would not yet let this instance's release join (an upgrade's floor, an unknown
    /// version): `why` names the members and versions.
    VersionGate {
        instance: String,
        why: String,
    },
    /// The instance declares no etcd release (its `etcd-asg-etcd-version` tag): never seeded.
    VersionUnknown {
        instance: String,
    },
    /// CORRUPT alarms name these members, too many to replace while a quorum stays: an operator
    /// must decide which data to keep.
    CorruptMajority {
        members: Vec<MemberId>,
    },
    /// The backup to restore (the freshest of the lineage, or the one requested) holds the
    /// storage of a newer etcd (`needs`, a minor) than the seed's: never an older one on a guess.
    NoRestorableBackup {
        instance: String,
        seed_version: String,
        backup: String,
        needs: String,
    },
    /// etcd refused a step with an answer that means "not yet" (a member down, the learner not in
    /// sync, too few started members) for longer than this invocation could wait.
    Refused {
        step: &'static str,
        instance: Option<String>,
        refusal: String,
    },
}

impl Wait {
    /// Whether this wait usually ends within seconds (a process starting), so an invocation may
    /// poll for it; others (a dead member, a replacement) take minutes and are left to the schedule.
    pub fn is_short(&self) -> bool {
        matches!(
            self,
            Self::SeedStarting { .. }
                | Self::LearnerStarting { .. }
                | Self::VoterNotStarted { .. }
                | Self::LastVoterHeld { .. }
                | Self::LastVoterAwaitsReplacement { .. }
        )
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::SeedStarting { .. } => "seed-starting",
            Self::LearnerStarting { .. } => "learner-starting",
            Self::ClusterUnreachable { .. } => "cluster-unreachable",
            Self::NoSeed => "no-seed",
            Self::AwaitRestoreRequest { .. } => "await-restore-request",
            Self::RestoreRequestUnusable { .. } => "restore-request-unusable",
            Self::AwaitFirstRestore => "await-first-restore",
            Self::AdoptionRefused { .. } => "adoption-refused",
            Self::AdoptedMemberDown { .. } => "adopted-member-down",
            Self::Asleep { .. } => "asleep",
            Self::FinalSnapshotPending { .. } => "final-snapshot-pending",
            Self::QuorumGuard { .. } => "quorum-guard",
            Self::VoterNotStarted { .. } => "voter-not-started",
            Self::LastVoterHeld { .. } => "last-voter-held",
            Self::LastVoterAwaitsReplacement { .. } => "last-voter-awaits-replacement",
            Self::PeerUrlTaken { .. } => "peer-url-taken",
            Self::JoinBlocked { .. } => "join-blocked",
            Self::CorruptLeader { .. } => "corrupt-leader",
            Self::MemberDown { .. } => "member-down",
            Self::ReplacementSuspended { .. } => "replacement-suspended",
            Self::MemberUnreachableFromFunction { .. } => "member-unreachable-from-function",
            Self::NotYetVisible { .. } => "not-yet-visible",
            Self::Refused { .. } => "refused-for-now",
            Self::LiveDataOverQuota { .. } => "live-data-over-quota",
            Self::VersionGate { .. } => "version-gate",
            Self::VersionUnknown { .. } => "version-unknown",
            Self::CorruptMajority { .. } => "corrupt-majority",
            Self::NoRestorableBackup { .. } => "no-restorable-backup",
        }
    }

    pub fn instance(&self) -> Option<&str> {
        match self {
            Self::SeedStarting { instance }
            | Self::LearnerStarting { instance }
            | Self::LastVoterHeld { instance, .. }
            | Self::LastVoterAwaitsReplacement { instance, .. }
            | Self::PeerUrlTaken { instance, .. }
            | Self::MemberDown { instance, .. }
            | Self::ReplacementSuspended { instance, .. }
            | Self::MemberUnreachableFromFunction { instance, .. }
            | Self::VersionGate { instance, .. }
            | Self::VersionUnknown { instance }
            | Self::FinalSnapshotPending { instance, .. }
            | Self::NoRestorableBackup { instance, .. } => Some(instance),
            Self::QuorumGuard { instance, .. }
            | Self::NotYetVisible { instance, .. }
            | Self::Refused { instance, .. } => instance.as_deref(),
            _ => None,
        }
    }

    pub fn member(&self) -> Option<MemberId> {
        match self {
            Self::QuorumGuard { member, .. }
            | Self::VoterNotStarted { member }
            | Self::JoinBlocked { member }
            | Self::CorruptLeader { member }
            | Self::PeerUrlTaken { member, .. }
            | Self::MemberDown { member, .. }
            | Self::AdoptedMemberDown { member, .. }
            | Self::MemberUnreachableFromFunction { member, .. } => Some(*member),
            _ => None,
        }
    }

    /// Its hold (`holds`): while the cluster is unreachable only the terminating voters whose
    /// disk may hold the newest writes are heartbeated; every other wait holds every held hook.
    pub fn holds_only_voters_at_risk(&self) -> bool {
        matches!(self, Self::ClusterUnreachable { .. })
    }

    /// Whether polling it means listing the group again (what it waits for is the group's).
    pub fn is_about_the_group(&self) -> bool {
        matches!(
            self,
            Self::LastVoterHeld { .. } | Self::LastVoterAwaitsReplacement { .. }
        )
    }

    /// The metrics (`metrics.rs`) that count it: each wait of the plan adds one to each.
    pub fn feeds(&self) -> &'static [&'static str] {
        match self {
            Self::VersionGate { .. }
            | Self::VersionUnknown { .. }
            | Self::NoRestorableBackup { .. } => &["VersionGated"],
            Self::ReplacementSuspended { .. } => &["ReplacementsSuspended"],
            Self::MemberUnreachableFromFunction { .. } => &["MemberUnreachableFromFunction"],
            Self::LiveDataOverQuota { .. } => &["LiveDataOverQuota"],
            Self::QuorumGuard {
                instance: Some(_), ..
            } => &["HeldForQuorum"],
            _ => &[],
        }
    }
}

/// How loud a wait's own log line is (`Wait::report`); the reconciler maps it to tracing's.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Level {
    Info,
    Warn,
    Error,
}

/// The line an operator must read on every invocation a wait lasts: its level, its message,
/// and its fields (those it has; the others are left out of the line).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Report {
    pub level: Level,
    pub message: &'static str,
    pub fields: Fields,
}

/// A report's fields, in the order the line shows them; each a text as logged (`Display`),
/// but the numbers.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Fields {
    pub wait: Option<String>,
    pub in_use: Option<u64>,
    pub quota: Option<u64>,
    pub request: Option<String>,
    pub requested_at: Option<Timestamp>,
    pub generation_created_at: Option<Timestamp>,
    pub instance: Option<String>,
    pub why: Option<String>,
    pub members: Option<String>,
}

impl Wait {
    /// Its own log line, for the waits an operator must hear of on every invocation they last
    /// (None: the `waiting` line and the response say enough).
    pub fn report(&self) -> Option<Report> {
        let (level, message, fields) = match self {
            Self::LiveDataOverQuota { in_use, quota } => (
                Level::Error,
                "NOSPACE: the live data alone fills the backend quota even with all history \
                 compacted and every member defragmented; the alarm stays until data is deleted \
                 (or members are replaced with a larger QUOTA_BACKEND_BYTES)",
                Fields {
                    in_use: Some(*in_use),
                    quota: Some(*quota),
                    ..Fields::default()
                },
            ),
            Self::AwaitRestoreRequest { stale: Some(s) } => (
                Level::Warn,
                "ignoring a restore request older than the cluster's current generation: put a \
                 new one for this loss",
                Fields {
                    request: Some(crate::event::shown(&s.request)),
                    requested_at: Some(s.requested_at),
                    generation_created_at: Some(s.generation_created_at),
                    ..Fields::default()
                },
            ),
            Self::VersionGate { instance, why } => (
                Level::Warn,
                "launch held by the version gate",
                Fields {
                    instance: Some(instance.clone()),
                    why: Some(why.clone()),
                    ..Fields::default()
                },
            ),
            Self::AdoptionRefused { why } => (
                Level::Error,
                "adoption refused: nothing changed",
                Fields {
                    why: Some(format!("{why:?}")),
                    ..Fields::default()
                },
            ),
            Self::AdoptedMemberDown {
                last_margin: true, ..
            } => (
                Level::Error,
                "adopted member down: an operator's call",
                self.named(),
            ),
            Self::AdoptedMemberDown { .. } => (Level::Warn, "adopted member down", self.named()),
            Self::VersionUnknown { .. } | Self::NoRestorableBackup { .. } => {
                (Level::Error, "held: etcd versions", self.named())
            }
            Self::CorruptMajority { members } => (
                Level::Error,
                "CORRUPT alarms name too many members to replace while a quorum stays: an \
                 operator must decide whose data to keep (docs/failure-modes.md)",
                Fields {
                    members: Some(format!("{members:?}")),
                    ..Fields::default()
                },
            ),
            _ => return None,
        };
        Some(Report {
            level,
            message,
            fields,
        })
    }

    /// The fields of a report that names the wait and why it holds.
    fn named(&self) -> Fields {
        Fields {
            wait: Some(self.to_string()),
            why: Some(self.why()),
            ..Fields::default()
        }
    }
}

/// `name [instance] [member id]`: what it is, and whom it is for.
pub(super) fn identify(
    f: &mut fmt::Formatter<'_>,
    name: &str,
    instance: Option<&str>,
    member: Option<MemberId>,
) -> fmt::Result {
    f.write_str(name)?;
    if let Some(i) = instance {
        write!(f, " {i}")?;
    }
    if let Some(m) = member {
        write!(f, " member {m}")?;
    }
    Ok(())
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        identify(f, self.name(), self.instance(), self.member())?;
        match self {
            Self::Refused { step, refusal, .. } => write!(f, " ({step}: {refusal})"),
            Self::ClusterUnreachable { detail } => write!(f, ": {detail}"),
            Self::VersionGate { why, .. } => write!(f, ": {why}"),
            _ => Ok(()),
        }
    }
}

impl Wait {
    /// What is waited for, and what ends the wait, in a sentence.
    /// Long: one arm per wait, each its sentence; split, the wording would only scatter.
    pub fn why(&self) -> String {
        match self {
            Self::SeedStarting { instance } => format!("the seed {instance} has its config; waiting for its etcd to start"),
            Self::LearnerStarting { instance } => format!("learner {instance} has its config; waiting for its etcd to start"),
            Self::ClusterUnreachable { detail } => format!(
                "a cluster record exists but no member answers as a voter that knows a leader: changing nothing ({detail})"
            ),
            Self::NoSeed => "the seed never served and is gone; waiting for a launching instance to seed anew".into(),
            Self::Asleep { key, revision } => format!(
                "the cluster sleeps (the group was scaled to zero) at its final snapshot {key} (revision {revision}): the next launching instance restores exactly that, whatever RECOVERY says"
            ),
            Self::FinalSnapshotPending { instance, why } => format!(
                "the group is scaled to zero and {instance} is the last voter: its termination is held (heartbeated) until its final snapshot is in the bucket ({why}); to let it go without one, complete its lifecycle action by hand"
            ),
            Self::AdoptionRefused { why } => format!(
                "adoption refused, nothing changed: {why}; fix the cluster (or ADOPT_ENDPOINTS) and the next invocation checks again"
            ),
            Self::AdoptedMemberDown { member, name, down_secs, last_margin: false } => format!(
                "adopted member {name} ({member}) has not answered for {down_secs} s: removed once it has been down UNHEALTHY_REPLACE_SECS, while the others keep a quorum"
            ),
            Self::AdoptedMemberDown { member, name, down_secs, last_margin: true } => format!(
                "adopted member {name} ({member}) has not answered for {down_secs} s, and removing it would leave two voters before a member of the group has joined: held; if it is dead, remove it by hand (etcdctl member remove {member}), else bring it back or open its client port to the function"
            ),
            Self::AwaitFirstRestore => "START_FROM=backup: this stack's first cluster starts from a backup only; the launching instances are held until `etcd-asg restore` (or `restore --from` another stack's backup) names it".into(),
            Self::RestoreRequestUnusable { request, why } => format!(
                "a new cluster is to start from the backup <prefix>/restore-request names ({request:?}), and {why}: nothing starts until it can (or the request is deleted, for an empty cluster)"
            ),
            Self::AwaitRestoreRequest { stale } => format!(
                "the cluster is lost for good and RECOVERY=manual: put the backup to restore (a key, or latest) in <prefix>/restore-request{}",
                stale.as_ref().map(|s| format!(
                    " (the request there, {:?}, was written at {}, before the current generation was created at {}: it was for an earlier loss)",
                    s.request, s.requested_at, s.generation_created_at
                )).unwrap_or_default()
            ),
            Self::QuorumGuard { member, instance, blocking } => format!(
                "removing member {member}{} now would cost quorum: held until the down members ({}) are gone",
                instance.as_ref().map(|i| format!(" ({i}, terminate hook held)")).unwrap_or_default(),
                blocking.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            ),
            Self::VoterNotStarted { member } => format!("voter {member} has not started: no join behind it"),
            Self::JoinBlocked { member } => format!(
                "voter {member} does not answer: etcd refuses every join until it answers or is removed (rule 6 replaces it)"
            ),
            Self::CorruptLeader { member } => format!(
                "etcd found the leader, member {member}, corrupt: no learner joins under it (it would receive the corrupt data); leadership moves to a sound voter first (rule 6)"
            ),
            Self::LastVoterHeld { instance, replacement } => format!(
                "{instance} is the last voter: held until {replacement} has joined and been promoted"
            ),
            Self::LastVoterAwaitsReplacement { instance, desired_capacity } => format!(
                "{instance} is the last voter and the group wants {desired_capacity} instance(s): held until the replacement is listed, joined and promoted (scale to 0 to end the cluster)"
            ),
            Self::PeerUrlTaken { instance, member } => format!(
                "{instance}'s peer URL is still held by member {member} of another instance: it joins once that member is removed"
            ),
            Self::MemberDown { instance, member, down_secs } => format!(
                "member {member} on {instance} has not answered for {down_secs} s: replaced after UNHEALTHY_REPLACE_SECS, one at a time, while the others keep a quorum"
            ),
            Self::ReplacementSuspended { instance, processes } => format!(
                "{instance} is due to be replaced, but the group has {} suspended: nothing is marked Unhealthy until they are resumed (aws autoscaling resume-processes)",
                processes.join(", ")
            ),
            Self::MemberUnreachableFromFunction { instance, member, down_secs } => format!(
                "member {member} on {instance} has not answered the function for {down_secs} s, but its peers are connected to it: not replaced; check the function's route to it (subnets, security groups, network ACLs)"
            ),
            Self::NotYetVisible { step, instance } => format!(
                "{step}{} was just applied; AWS does not show it yet",
                instance.as_ref().map(|i| format!(" of {i}")).unwrap_or_default()
            ),
            Self::LiveDataOverQuota { in_use, quota } => format!(
                "NOSPACE: the live data ({} MiB) fills the quota ({} MiB) even compacted and defragmented: delete data; the alarm stays",
                in_use >> 20,
                quota >> 20
            ),
            Self::VersionGate { instance, why } => format!(
                "{instance} is held at its launch: {why}"
            ),
            Self::VersionUnknown { instance } => format!(
                "{instance} declares no etcd version (its {} tag, which the stack's group propagates from EtcdVersion): never seeded or joined",
                crate::model::VERSION_TAG
            ),
            Self::CorruptMajority { members } => format!(
                "CORRUPT alarms name {} members ({}): replacing them would cost quorum; an operator must decide which data to keep",
                members.len(),
                members.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            ),
            Self::NoRestorableBackup { instance, seed_version, backup, needs } => format!(
                "the seed {instance} runs etcd {seed_version}, which cannot restore {backup} (it needs etcd {needs} or newer): launch that release (the stack's EtcdVersion), or name an older backup with `etcd-asg restore KEY` (the writes after it are lost)"
            ),
            Self::Refused { step, instance, refusal } => format!(
                "etcd refuses {step}{} for now ({refusal})",
                instance.as_ref().map(|i| format!(" of {i}")).unwrap_or_default()
            ),
        }
    }
}
