//! The cluster as etcd answers: its members, who leads, what each says of itself, its alarms, and
//! the voters that answer for themselves when no quorum does.

use std::collections::{BTreeMap, BTreeSet};

use super::basics::MemberId;
use crate::versions::Version;

/// One etcd member, as the members API lists it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Member {
    pub id: MemberId,
    /// Empty until the member's process has started and joined.
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
    pub is_learner: bool,
}

impl Member {
    pub fn is_started(&self) -> bool {
        !self.name.is_empty()
    }
}

/// What the members API told us, or that nobody answered.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ClusterState {
    /// No client URL we know of answered a member list: no cluster yet, or one we cannot see.
    Unreachable {
        detail: String,
        /// Voters that still answer for themselves without a leader (the quorum is lost).
        survivors: Vec<Survivor>,
    },
    Known(Box<ClusterView>),
}

impl ClusterState {
    /// Nobody answers at all.
    pub fn unreachable(detail: impl Into<String>) -> Self {
        Self::Unreachable {
            detail: detail.into(),
            survivors: vec![],
        }
    }
}

/// A voter that answers for itself while no quorum answers: the data it holds, and the voters its
/// own (local, possibly old) member list names.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Survivor {
    pub member: MemberId,
    /// Its name (the instance id), as its own list has it.
    pub name: String,
    pub is_learner: bool,
    pub endpoint: String,
    pub cluster_id: u64,
    pub status: MemberStatus,
    pub voters: Vec<Member>,
}

/// The kind of authentication token a member hands out at login.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TokenKind {
    /// etcd's simple tokens: 16 random letters, a dot, the login's raft index.
    Simple,
    Jwt,
    /// Not read: no answer to a read as root, or no login.
    Unknown,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ClusterView {
    pub cluster_id: u64,
    pub members: Vec<Member>,
    pub leader: Option<MemberId>,
    /// Members whose own client URL answered a status request in this observation.
    pub healthy: BTreeSet<MemberId>,
    /// The client URL that answered the member list: a voting member, so membership calls go there.
    pub endpoint: String,
    /// What each answering member said of itself.
    pub statuses: BTreeMap<MemberId, MemberStatus>,
    /// The cluster's active alarms.
    pub alarms: Vec<Alarm>,
    /// Whether all history up to the current revision is compacted away. Asked only under a
    /// NOSPACE alarm (writes stop then, so the revision stands still); false otherwise.
    pub history_compacted: bool,
    /// Whether etcd's authentication is on (asked only when the function holds root tokens,
    /// TLS=managed; false otherwise).
    pub auth_enabled: bool,
    /// A cluster not this stack's yet (one to adopt) whose authentication is on, and the
    /// function cannot act as its `root` there: why (etcd's refusal). None otherwise.
    pub root_refused: Option<String>,
    /// A cluster to adopt whose authentication is on: what kind of token each member's login as
    /// `root` gave (etcd's simple tokens, `--auth-token simple`, its default; or JWTs), by
    /// member name. Empty otherwise.
    pub token_kinds: Vec<(String, TokenKind)>,
    /// The cluster version (`etcdcluster` of the answering member's `/version`): the lowest
    /// minor every member runs, raised by the leader. None: not decided yet, or unreadable.
    pub cluster_version: Option<Version>,
    /// Started members that did not answer the function but to which an answering member
    /// reports an active raft connection (etcd's `etcd_network_active_peers` gauge): down for
    /// the function only. Asked only when a started member does not answer.
    pub peer_connected: BTreeSet<MemberId>,
    /// Members this environment defragmented lately (`maintenance::RECHECK_SECS`): their
    /// in-use figure is taken as exact. etcd's can count pages a compaction freed while a read
    /// was open (a snapshot streaming, say): bbolt keeps such pages pending, and under NOSPACE
    /// few writes come to release them. Filled by the reconciler from its own memory (a new
    /// environment starts with none); empty from the adapters.
    pub defragmented: BTreeSet<MemberId>,
}

/// One member's own status: its database file and how much of it is in use, its version, and
/// the revision it has applied.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct MemberStatus {
    pub db_size: u64,
    pub db_size_in_use: u64,
    pub version: String,
    pub revision: i64,
}

impl MemberStatus {
    /// The release the member says it runs; None if that is not a version.
    pub fn etcd_version(&self) -> Option<Version> {
        self.version.parse().ok()
    }

    /// Bytes of the file that hold no data (reclaimed by defragmentation).
    pub fn free(&self) -> u64 {
        self.db_size.saturating_sub(self.db_size_in_use)
    }
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Alarm {
    pub member: MemberId,
    /// As etcd names it: `NOSPACE`, `CORRUPT`.
    pub kind: String,
}

/// The smallest number of voters that is a majority of `n`.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// etcd's alarm that the backend quota is full: writes stop until it is disarmed.
pub const NOSPACE: &str = "NOSPACE";

/// etcd's alarm that a member's data differs from its peers' (the initial or the periodic
/// corruption check found it): etcd names the member it believes corrupt.
/// https://etcd.io/docs/v3.6/op-guide/data_corruption/
pub const CORRUPT: &str = "CORRUPT";

/// The member id the function raises its own NOSPACE alarm for, to fence writes before a
/// hibernating cluster's final snapshot (`planner::hibernate::hibernate`): no member has it (etcd
/// takes any id, `AlarmStore.Activate`), so it is never taken for a member's own alarm. "fence".
pub const FENCE: MemberId = MemberId(0x0066_656e_6365);

impl ClusterView {
    /// The members etcd raised its CORRUPT alarm for.
    pub fn corrupt(&self) -> BTreeSet<MemberId> {
        self.alarms
            .iter()
            .filter(|a| a.kind == CORRUPT)
            .map(|a| a.member)
            .collect()
    }

    /// Whether a member ran out of space: a NOSPACE alarm other than the function's own write
    /// fence (`FENCE`, raised on purpose at hibernation: no maintenance to do, no alarm to page).
    pub fn nospace(&self) -> bool {
        self.alarms
            .iter()
            .any(|a| a.kind == NOSPACE && a.member != FENCE)
    }

    pub fn member(&self, id: MemberId) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    pub fn voters(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| !m.is_learner)
    }

    pub fn learners(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| m.is_learner)
    }

    /// The newest revision any answering member reports.
    pub fn revision(&self) -> i64 {
        self.statuses
            .values()
            .map(|s| s.revision)
            .max()
            .unwrap_or(0)
    }
}
