//! The cluster record: the create-once fence for bootstrap, what it says of the generation it
//! founded (served, restored, asleep, adopted), and the decision about a generation whose seed
//! never served.

use super::backup::BackupRef;
use super::basics::Timestamp;

/// The create-once fence for bootstrap: whoever writes this first seeds the cluster.
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub struct ClusterRecord {
    pub token: String,
    pub seed: String,
    pub created_at: Timestamp,
    /// Whether the cluster has ever served. A record written before this field existed belongs
    /// to a cluster that served: it is never re-seeded.
    #[serde(default = "RecordState::legacy")]
    pub state: RecordState,
    /// The cluster id etcd derived at bootstrap, once it served: a member that answers with any
    /// other id belongs to another cluster and is never believed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<u64>,
    /// A generation bootstrapped from a backup: which, and the record of the cluster it
    /// replaced (kept for the audit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<Restore>,
    /// The group was scaled to zero and the cluster put to sleep: the final snapshot of its last
    /// voter, verified in the bucket, which the next generation is restored from whatever
    /// RECOVERY says (docs/backups.md, "Hibernation"). Cleared once the group wants instances
    /// again while the cluster still runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sleeping: Option<Sleeping>,
    /// A cluster that ran before this stack, adopted (`ADOPT_ENDPOINTS`, docs/adopting.md): its
    /// members at adoption, which leave once the group's instances have joined. Cleared when the
    /// last of them has gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopting: Option<Adopting>,
    /// A cluster adopted: whether etcd's authentication was on when it was adopted. Kept for
    /// good (`adopting` is cleared): an adoption never turns it on unless ETCD_AUTH=on is set
    /// explicitly (`planner::access`). None: not adopted, or adopted before this field (its
    /// token then says so, `adopted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted_auth: Option<bool>,
}

/// An adoption under way: the members the cluster had when it was adopted (ids, as etcd's JSON
/// gateway gives them: decimal).
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub struct Adopting {
    pub members: Vec<u64>,
    pub since: Timestamp,
}

/// Where a sleeping cluster's data is: the final snapshot, at the revision it holds.
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub struct Sleeping {
    pub key: String,
    pub revision: i64,
    pub since: Timestamp,
}

/// What a restored generation came from.
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub struct Restore {
    pub snapshot: BackupRef,
    /// The generation the snapshot was taken of (for a stack's first generation restored from
    /// another stack's backup, that stack's; `previous_seed` is then empty).
    pub previous_token: String,
    pub previous_seed: String,
    pub previous_created_at: Timestamp,
    /// Where the snapshot was copied from (`etcd-asg restore --from`), as its manifest says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copied_from: Option<String>,
}

impl ClusterRecord {
    /// A new record for a cluster the seed is about to bootstrap.
    pub fn bootstrapping(token: String, seed: String, created_at: Timestamp) -> Self {
        Self {
            token,
            seed,
            created_at,
            state: RecordState::Bootstrapping,
            cluster_id: None,
            restored_from: None,
            sleeping: None,
            adopting: None,
            adopted_auth: None,
        }
    }

    /// Whether this cluster ran before the stack and was adopted (ADOPT_ENDPOINTS): its record
    /// says so, or, written before `adopted_auth`, its token (`<name>-adopted-<cluster id>`).
    pub fn adopted(&self) -> bool {
        self.adopted_auth.is_some() || self.adopting.is_some() || self.token.contains("-adopted-")
    }

    pub fn has_served(&self) -> bool {
        self.state == RecordState::Served
    }

    /// What the fences about this generation are named by: `<seed>-<created_at>`
    /// (`<prefix>/decided/…`, `<prefix>/restored/…`).
    pub fn fence(&self) -> String {
        format!("{}-{}", self.seed, self.created_at)
    }
}

/// The one create-only decision about a record generation (`<prefix>/decided/<fence>`): it
/// served, or the record that replaced it because its seed never served. Whichever is written
/// first holds for ever.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Decision {
    Served,
    Replaced(Box<ClusterRecord>),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordState {
    /// Written, the seed not yet seen as a started voter: may be replaced if the seed never serves.
    Bootstrapping,
    /// The seed served: this record is never replaced by a re-seed.
    Served,
}

impl RecordState {
    fn legacy() -> Self {
        Self::Served
    }
}
