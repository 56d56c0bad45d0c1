//! One error type for the whole function. Causes are kept, and each error says whether trying
//! again later can help: Lambda's async retries and the schedule are our retry loop.

use std::fmt;

pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// How etcd refused a membership call, from the `message` of its answer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Refusal {
    TooManyLearners,
    LearnerNotInSync,
    NotALearner,
    MemberNotFound,
    PeerUrlExists,
    InvalidPeerUrls,
    BadLeaderTransferee,
    NotEnoughStartedMembers,
    UnhealthyCluster,
    NotSupportedForLearner,
    NoLeader,
    AlreadyCompacted,
    NoSpace,
    /// The token's auth revision is not the store's (a serialized read demands it be equal).
    AuthOldRevision,
    /// Authentication is on and the request named no user.
    UserEmpty,
    /// The token does not verify: signed with a key the member does not hold, or expired.
    InvalidAuthToken,
    UserNotFound,
    /// A user or role of that name exists already.
    AlreadyExists,
    Other,
}

impl Refusal {
    pub fn from_message(message: &str) -> Self {
        const KNOWN: &[(&str, Refusal)] = &[
            ("too many learner members", Refusal::TooManyLearners),
            ("which is in sync with leader", Refusal::LearnerNotInSync),
            ("can only promote a learner member", Refusal::NotALearner),
            ("member not found", Refusal::MemberNotFound),
            ("peer urls already exists", Refusal::PeerUrlExists),
            // What 3.4 answers when the same peer URL is added twice.
            ("member id already exist", Refusal::PeerUrlExists),
            ("given member urls are invalid", Refusal::InvalidPeerUrls),
            ("bad leader transferee", Refusal::BadLeaderTransferee),
            (
                "not enough started members",
                Refusal::NotEnoughStartedMembers,
            ),
            ("unhealthy cluster", Refusal::UnhealthyCluster),
            (
                "rpc not supported for learner",
                Refusal::NotSupportedForLearner,
            ),
            ("no leader", Refusal::NoLeader),
            (
                "required revision has been compacted",
                Refusal::AlreadyCompacted,
            ),
            ("database space exceeded", Refusal::NoSpace),
            // 3.4: "revision of auth store is old"; 3.5: "revision in header is old".
            ("revision of auth store is old", Refusal::AuthOldRevision),
            ("revision in header is old", Refusal::AuthOldRevision),
            ("user name is empty", Refusal::UserEmpty),
            ("invalid auth token", Refusal::InvalidAuthToken),
            ("user name not found", Refusal::UserNotFound),
            ("name already exists", Refusal::AlreadyExists),
        ];
        let lower = message.to_ascii_lowercase();
        KNOWN
            .iter()
            .find(|(needle, _)| lower.contains(needle))
            .map(|(_, r)| *r)
            .unwrap_or(Refusal::Other)
    }
}

#[derive(thiserror::Error)]
pub enum Error {
    #[error("configuration: {var}={value:?} {reason}")]
    Config {
        var: String,
        value: String,
        reason: String,
    },
    #[error("AWS {operation} failed")]
    Aws {
        operation: &'static str,
        #[source]
        source: BoxError,
    },
    #[error("Auto Scaling group {0:?} does not exist")]
    GroupNotFound(String),
    #[error("parameter {name} holds something unreadable: {detail}")]
    BadParameter { name: String, detail: String },
    #[error("etcd {operation} via {endpoint} got no answer")]
    EtcdUnavailable {
        operation: &'static str,
        endpoint: String,
        #[source]
        source: BoxError,
    },
    #[error("etcd refused {operation} ({refusal:?}): {message}")]
    EtcdRefused {
        operation: &'static str,
        refusal: Refusal,
        message: String,
    },
    /// Issuing or reading certificates. Never carries key material.
    #[error("certificates: {what} failed: {detail}")]
    Pki { what: &'static str, detail: String },
    #[error("etcd {operation} answered in a form we cannot read: {detail}")]
    EtcdProtocol {
        operation: &'static str,
        detail: String,
    },
    /// Long work stopped so that the invocation ends in time (a snapshot too slow to finish,
    /// a call that does not answer).
    #[error("{what} stopped before the invocation's deadline: {detail}")]
    OutOfTime { what: &'static str, detail: String },
    /// A bug: the invocation panicked (its held hooks were still heartbeated).
    #[error("the invocation panicked: {detail}")]
    Panicked { detail: String },
}

/// What an error means for the step that met it. Decided here alone: the reconciler only acts on
/// the class.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Class {
    /// etcd's refusals that only mean "not yet": a learner catching up, etcd's 5 s connectivity
    /// rule after a membership change or a member down, the one learner slot taken, an election
    /// under way, too few started members, a peer URL still held by a member about to be
    /// removed. A wait, never a failure.
    NotYet,
    /// etcd's answers that the step has nothing left to do: "member not found" (removed
    /// already, by an earlier try or a replayed event), "can only promote a learner member" (a
    /// voter already). The next observation decides what follows.
    AlreadyDone,
    /// Anything else a later try may cure (AWS or etcd not answering, throttling).
    Retryable,
    Fatal,
}

impl Error {
    pub fn class(&self) -> Class {
        match self.refusal() {
            Some(Refusal::MemberNotFound | Refusal::NotALearner) => Class::AlreadyDone,
            Some(
                Refusal::LearnerNotInSync
                | Refusal::UnhealthyCluster
                | Refusal::TooManyLearners
                | Refusal::NoLeader
                | Refusal::NotEnoughStartedMembers
                | Refusal::PeerUrlExists,
            ) => Class::NotYet,
            _ if self.is_retryable() => Class::Retryable,
            _ => Class::Fatal,
        }
    }

    /// Whether a later invocation may succeed where this one failed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Config { .. }
            | Self::GroupNotFound(_)
            | Self::BadParameter { .. }
            | Self::Pki { .. }
            | Self::Panicked { .. } => false,
            Self::EtcdRefused { refusal, .. } => !matches!(refusal, Refusal::InvalidPeerUrls),
            Self::Aws { .. }
            | Self::EtcdUnavailable { .. }
            | Self::EtcdProtocol { .. }
            | Self::OutOfTime { .. } => true,
        }
    }

    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            Self::EtcdRefused { refusal, .. } => Some(*refusal),
            _ => None,
        }
    }

    /// What CloudWatch shows as the error type of a failed invocation.
    pub fn kind(&self) -> String {
        let what = match self {
            Self::Config { .. } => "Config",
            Self::Aws { operation, .. } => {
                return format!("{}.Aws.{operation}", self.retry_class())
            }
            Self::GroupNotFound(_) => "GroupNotFound",
            Self::BadParameter { .. } => "BadParameter",
            Self::EtcdUnavailable { .. } => "EtcdUnavailable",
            Self::EtcdRefused { refusal, .. } => {
                return format!("{}.EtcdRefused.{refusal:?}", self.retry_class())
            }
            Self::EtcdProtocol { .. } => "EtcdProtocol",
            Self::Pki { .. } => "Pki",
            Self::OutOfTime { .. } => "OutOfTime",
            Self::Panicked { .. } => "Panic",
        };
        format!("{}.{what}", self.retry_class())
    }

    /// `Retryable` or `Fatal`: the first part of `kind`.
    fn retry_class(&self) -> &'static str {
        if self.is_retryable() {
            "Retryable"
        } else {
            "Fatal"
        }
    }
}

/// The whole cause chain on one line: this is what lands in the logs.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")?;
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            write!(f, ": {c}")?;
            cause = c.source();
        }
        Ok(())
    }
}

impl From<Error> for lambda_runtime::Diagnostic {
    fn from(e: Error) -> Self {
        Self {
            error_type: e.kind(),
            error_message: format!("{e:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_read_from_etcd_messages() {
        let cases = [
            (
                "etcdserver: too many learner members in cluster",
                Refusal::TooManyLearners,
            ),
            (
                "etcdserver: can only promote a learner member which is in sync with leader",
                Refusal::LearnerNotInSync,
            ),
            (
                "etcdserver: can only promote a learner member",
                Refusal::NotALearner,
            ),
            ("etcdserver: member not found", Refusal::MemberNotFound),
            (
                "etcdserver: Peer URLs already exists",
                Refusal::PeerUrlExists,
            ),
            (
                "etcdserver: re-configuration failed due to not enough started members",
                Refusal::NotEnoughStartedMembers,
            ),
            ("etcdserver: unhealthy cluster", Refusal::UnhealthyCluster),
            ("etcdserver: no leader", Refusal::NoLeader),
            ("something new", Refusal::Other),
        ];
        for (msg, want) in cases {
            assert_eq!(Refusal::from_message(msg), want, "{msg}");
        }
    }

    #[test]
    fn errors_classify_themselves() {
        let refused = |refusal| Error::EtcdRefused {
            operation: "member remove",
            refusal,
            message: String::new(),
        };
        assert_eq!(refused(Refusal::MemberNotFound).class(), Class::AlreadyDone);
        assert_eq!(refused(Refusal::NotALearner).class(), Class::AlreadyDone);
        assert_eq!(refused(Refusal::UnhealthyCluster).class(), Class::NotYet);
        assert_eq!(refused(Refusal::PeerUrlExists).class(), Class::NotYet);
        assert_eq!(refused(Refusal::Other).class(), Class::Retryable);
        assert_eq!(refused(Refusal::InvalidPeerUrls).class(), Class::Fatal);
        assert_eq!(Error::GroupNotFound("x".into()).class(), Class::Fatal);
    }

    #[test]
    fn debug_form_carries_the_cause_and_kind_says_retryable() {
        let e = Error::Aws {
            operation: "DescribeAutoScalingGroups",
            source: "connection refused".into(),
        };
        assert_eq!(
            format!("{e:?}"),
            "AWS DescribeAutoScalingGroups failed: connection refused"
        );
        assert_eq!(e.kind(), "Retryable.Aws.DescribeAutoScalingGroups");
        let e = Error::GroupNotFound("x".into());
        assert_eq!(e.kind(), "Fatal.GroupNotFound");
        assert!(!e.is_retryable());
    }
}
