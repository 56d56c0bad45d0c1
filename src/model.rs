//! What the reconciler observes and what it publishes, in our own terms: no AWS or HTTP types.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

pub use crate::versions::Version;

/// Seconds since the Unix epoch. The planner never reads a clock: time is passed in.
pub type Timestamp = i64;

/// An etcd member id. etcd speaks decimal on the JSON gateway and hex in etcdctl; we log hex.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct MemberId(pub u64);

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

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

/// Whether `s` can stand as the host of an etcd URL: an IP address or a DNS name. Addresses can
/// come from instance tags, which anyone allowed to tag may set; whatever else a tag holds (a
/// comma, an `=`, a newline) would be spliced into initial-cluster and the published env file.
pub fn is_valid_address(s: &str) -> bool {
    if s.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
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
    Known(ClusterView),
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
    /// The cluster version (`etcdcluster` of the answering member's `/version`): the lowest
    /// minor every member runs, raised by the leader. None: not decided yet, or unreadable.
    pub cluster_version: Option<Version>,
    /// Started members that did not answer the function but to which an answering member
    /// reports an active raft connection (etcd's `etcd_network_active_peers` gauge): down for
    /// the function only. Asked only when a started member does not answer.
    pub peer_connected: BTreeSet<MemberId>,
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

/// The instance tag that declares which etcd release an instance runs (the stack's group
/// propagates it at launch from `EtcdVersion`).
pub const VERSION_TAG: &str = "etcd-asg-etcd-version";

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

/// One snapshot in the bucket: its key, where the seed fetches it, and its checksum.
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub struct BackupRef {
    pub key: String,
    pub url: String,
    pub sha256: String,
}

/// What a backup records besides its bytes.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SnapshotFacts {
    /// The cluster token of the generation it is taken from.
    pub token: String,
    pub revision: i64,
    pub cluster_id: u64,
    /// The member (hex id) it streamed from, and its etcd version.
    pub member: String,
    pub etcd_version: String,
    /// The cluster version when it was taken, if known: what its storage version follows
    /// (`versions::storage_of`).
    pub cluster_version: Option<Version>,
    pub taken_at: Timestamp,
}

/// The bucket's listing: the complete backups, oldest first, and the halves of incomplete ones.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct BackupListing {
    pub complete: Vec<Backup>,
    /// A snapshot without its manifest (a store cut short between the upload and the manifest,
    /// or whose completion's answer was lost), or a manifest without its snapshot (a prune cut
    /// short between the two deletes): never listed as a backup, pruned once old enough
    /// (`planner::backup`). `size` is the snapshot's (0 for a manifest alone).
    pub incomplete: Vec<Backup>,
}

/// A complete backup (its manifest exists), as the bucket listing tells it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Backup {
    pub key: String,
    /// The cluster token of the generation it was taken from.
    pub token: String,
    pub taken_at: Timestamp,
    pub revision: i64,
    pub size: u64,
    /// What its storage needs of a restorer, as its key names it: the release of the etcd it
    /// was taken from (`-v<version>`), or, where the cluster version was a minor older
    /// (`-s<minor>`, `versions::storage_of`), that minor's `.0`. None for a key of before
    /// versions were named (taken on 3.5 or older).
    pub etcd_version: Option<Version>,
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

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum InitialState {
    New,
    Existing,
}

impl InitialState {
    fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Existing => "existing",
        }
    }
}

/// Exactly what one instance's etcd needs to start, published as an env file.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct MemberConfig {
    pub name: String,
    /// `name=peerURL` pairs, in member-id order so the text is stable across observations.
    pub initial_cluster: Vec<(String, String)>,
    pub state: InitialState,
    pub token: String,
    pub peer_url: String,
    pub client_url: String,
    pub auto_compaction_retention: String,
    pub quota_backend_bytes: u64,
    /// etcd's `--snapshot-count` (0: not set, a config of before it was).
    pub snapshot_count: u64,
    /// For the seed of a restored generation: the snapshot its boot script restores first.
    pub restore: Option<BackupRef>,
    /// Mutual TLS (TLS=managed): clients and peers must present a certificate of the cluster's
    /// CA. The boot script adds the files' paths (`<prefix>/tls/<instance>`, written 0600).
    pub client_cert_auth: bool,
    /// A plain-HTTP listener for `/health` and `/metrics` only (load balancer health checks).
    pub metrics_url: Option<String>,
    /// Published by a function that has the boot script point etcd at the CA's certificate for
    /// the function's root tokens (`ETCD_ASG_ROOT_TOKENS=jwt`, which the boot script keeps from
    /// etcd): authentication is turned on only once every voter's config says so, since a
    /// member of an older config rejects the tokens.
    pub root_tokens: bool,
    /// The etcd release the instance declared: etcd's corruption checks are named as that
    /// release names them, and the boot script refuses to start another release with this config
    /// (`ETCD_ASG_ETCD_VERSION`, which it keeps from etcd).
    pub etcd_version: Option<Version>,
}

impl MemberConfig {
    /// The env file an instance hands to etcd unchanged (etcd reads `ETCD_*` variables).
    pub fn to_env(&self) -> String {
        let cluster = self
            .initial_cluster
            .iter()
            .map(|(n, u)| format!("{n}={u}"))
            .collect::<Vec<_>>()
            .join(",");
        format!(
            "ETCD_NAME={}\nETCD_INITIAL_CLUSTER={}\nETCD_INITIAL_CLUSTER_STATE={}\n\
             ETCD_INITIAL_CLUSTER_TOKEN={}\nETCD_INITIAL_ADVERTISE_PEER_URLS={}\n\
             ETCD_ADVERTISE_CLIENT_URLS={}\nETCD_AUTO_COMPACTION_MODE=periodic\n\
             ETCD_AUTO_COMPACTION_RETENTION={}\nETCD_QUOTA_BACKEND_BYTES={}\n\
             ETCD_SNAPSHOT_COUNT={}\n",
            self.name,
            cluster,
            self.state.as_str(),
            self.token,
            self.peer_url,
            self.client_url,
            self.auto_compaction_retention,
            self.quota_backend_bytes,
            self.snapshot_count
        ) + if self.client_cert_auth {
            "ETCD_CLIENT_CERT_AUTH=true\nETCD_PEER_CLIENT_CERT_AUTH=true\n"
        } else {
            ""
        } + &self
            .metrics_url
            .as_ref()
            .map(|u| format!("ETCD_LISTEN_METRICS_URLS={u}\n"))
            .unwrap_or_default()
            + if self.root_tokens {
                "ETCD_ASG_ROOT_TOKENS=jwt\n"
            } else {
                ""
            }
            + &self
                .restore
                .as_ref()
                .map(|r| {
                    format!(
                        "ETCD_ASG_RESTORE_URL={}\nETCD_ASG_RESTORE_SHA256={}\n",
                        r.url, r.sha256
                    )
                })
                .unwrap_or_default()
            + &self
                .etcd_version
                .map(|v| format!("ETCD_ASG_ETCD_VERSION={v}\n{}", v.corruption_check_env()))
                .unwrap_or_default()
    }

    /// The host of its peer URL (`scheme://host:port`, an IPv6 host in brackets): the address
    /// it was published for. None if that is not an address (`is_valid_address`).
    pub fn address(&self) -> Option<String> {
        let rest = self.peer_url.split_once("://")?.1;
        let host = match rest.strip_prefix('[') {
            Some(v6) => v6.split_once(']')?.0,
            None => rest.rsplit_once(':').map_or(rest, |(h, _)| h),
        };
        is_valid_address(host).then(|| host.to_string())
    }

    pub fn parse_env(text: &str) -> Result<Self, String> {
        let mut vars = BTreeMap::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| format!("line {line:?} is not KEY=VALUE"))?;
            vars.insert(k, v);
        }
        let get = |k: &str| {
            vars.get(k)
                .map(|v| v.to_string())
                .ok_or_else(|| format!("{k} is missing"))
        };
        let initial_cluster = get("ETCD_INITIAL_CLUSTER")?
            .split(',')
            .map(|pair| {
                pair.split_once('=')
                    .map(|(n, u)| (n.to_string(), u.to_string()))
                    .ok_or_else(|| format!("initial-cluster entry {pair:?} is not name=url"))
            })
            .collect::<Result<_, _>>()?;
        let state = match get("ETCD_INITIAL_CLUSTER_STATE")?.as_str() {
            "new" => InitialState::New,
            "existing" => InitialState::Existing,
            other => {
                return Err(format!(
                    "ETCD_INITIAL_CLUSTER_STATE {other:?} is not new|existing"
                ))
            }
        };
        Ok(Self {
            name: get("ETCD_NAME")?,
            initial_cluster,
            state,
            token: get("ETCD_INITIAL_CLUSTER_TOKEN")?,
            peer_url: get("ETCD_INITIAL_ADVERTISE_PEER_URLS")?,
            client_url: get("ETCD_ADVERTISE_CLIENT_URLS")?,
            auto_compaction_retention: get("ETCD_AUTO_COMPACTION_RETENTION")?,
            quota_backend_bytes: get("ETCD_QUOTA_BACKEND_BYTES")?
                .parse()
                .map_err(|e| format!("ETCD_QUOTA_BACKEND_BYTES: {e}"))?,
            snapshot_count: match vars.get("ETCD_SNAPSHOT_COUNT") {
                Some(v) => v.parse().map_err(|e| format!("ETCD_SNAPSHOT_COUNT: {e}"))?,
                None => 0,
            },
            restore: match (
                vars.get("ETCD_ASG_RESTORE_URL"),
                vars.get("ETCD_ASG_RESTORE_SHA256"),
            ) {
                (Some(url), Some(sha256)) => Some(BackupRef {
                    key: url
                        .strip_prefix("s3://")
                        .and_then(|r| r.split_once('/'))
                        .map(|(_, k)| k.to_string())
                        .unwrap_or_default(),
                    url: url.to_string(),
                    sha256: sha256.to_string(),
                }),
                _ => None,
            },
            client_cert_auth: vars.get("ETCD_CLIENT_CERT_AUTH") == Some(&"true"),
            metrics_url: vars.get("ETCD_LISTEN_METRICS_URLS").map(|u| u.to_string()),
            root_tokens: vars.get("ETCD_ASG_ROOT_TOKENS") == Some(&"jwt"),
            etcd_version: vars
                .get("ETCD_ASG_ETCD_VERSION")
                .map(|v| v.parse())
                .transpose()?,
        })
    }
}

/// A member config as found in the parameter store, with when it was written.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Published {
    pub config: MemberConfig,
    pub published_at: Timestamp,
}

/// Everything under the parameter prefix.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct PublishedState {
    pub cluster: Option<ClusterRecord>,
    /// Keyed by instance id.
    pub members: BTreeMap<String, Published>,
    /// When the function first saw each in-service instance's etcd not answering, by instance id.
    pub down_since: BTreeMap<String, Timestamp>,
    /// When the function marked each instance Unhealthy (`<prefix>/marked/<id>`), by instance id.
    pub marked: BTreeMap<String, Timestamp>,
    /// When each instance's member certificate ends (TLS=managed), by instance id.
    pub cert_not_after: BTreeMap<String, Timestamp>,
    /// Instances whose certificate's end says `issuing`: a hand-out began (and may have written
    /// the bundle) and did not end. Handed out again, or cleaned up with the instance.
    pub issuing: BTreeSet<String>,
    /// An operator's request to restore (RECOVERY=manual): a backup key, or `latest`.
    pub restore_request: Option<String>,
    /// When the request was last written (SSM's LastModifiedDate): it is for the loss of the
    /// generation it postdates, never a later one (`recovery::choose`).
    pub restore_request_at: Option<Timestamp>,
    /// The decisions about record generations, by the generation's fence (`<prefix>/decided/`).
    pub decided: BTreeMap<String, Decision>,
    /// The generations that replace lost ones, by the lost one's fence (`<prefix>/restored/`).
    pub restored: BTreeMap<String, ClusterRecord>,
}

/// What a step of ours wrote under the prefix, as a listing would read it back: the function is
/// the prefix's only writer (one invocation at a time), so an invocation that wrote it need not
/// list it again.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Written {
    Config {
        instance: String,
        config: MemberConfig,
        /// Its certificate's end, when one was issued with it.
        cert_not_after: Option<Timestamp>,
    },
    /// The config, and with `key_material` the instance's bundle and certificate end.
    Unpublished {
        instance: String,
        key_material: bool,
    },
    DownSince {
        instance: String,
        since: Timestamp,
    },
    DownForgotten {
        instance: String,
    },
    /// The cluster record, as written (not when another invocation's won).
    Record(ClusterRecord),
}

impl PublishedState {
    /// Whether `record`'s generation served: its own word, or its fence's. The fence is written
    /// first (`PublishedConfig::mark_served`): a crash or a lost answer between the two leaves a
    /// record that still says `bootstrapping` of a cluster that served, which must never be
    /// bootstrapped again.
    pub fn served(&self, record: &ClusterRecord) -> bool {
        record.has_served() || self.decided.get(&record.fence()) == Some(&Decision::Served)
    }

    /// The record that replaces `record` because its seed never served, if that is decided.
    pub fn replacement(&self, record: &ClusterRecord) -> Option<&ClusterRecord> {
        match self.decided.get(&record.fence()) {
            Some(Decision::Replaced(new)) => Some(new.as_ref()),
            _ => None,
        }
    }

    /// The state after `written`, at `now` (SSM's LastModifiedDate, to within the clocks).
    pub fn record(&mut self, written: Written, now: Timestamp) {
        match written {
            Written::Config {
                instance,
                config,
                cert_not_after,
            } => {
                if let Some(end) = cert_not_after {
                    self.cert_not_after.insert(instance.clone(), end);
                    self.issuing.remove(&instance);
                }
                let published_at = now;
                self.members.insert(
                    instance,
                    Published {
                        config,
                        published_at,
                    },
                );
            }
            Written::Unpublished {
                instance,
                key_material,
            } => {
                self.members.remove(&instance);
                if key_material {
                    self.cert_not_after.remove(&instance);
                    self.issuing.remove(&instance);
                }
            }
            Written::DownSince { instance, since } => {
                self.down_since.insert(instance, since);
            }
            Written::DownForgotten { instance } => {
                self.down_since.remove(&instance);
                self.marked.remove(&instance);
            }
            Written::Record(record) => {
                if record.has_served() {
                    self.decided.insert(record.fence(), Decision::Served);
                }
                self.cluster = Some(record)
            }
        }
    }
}

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
impl Backup {
    /// A backup of generation `t` taken at `taken_at` at `revision`, its key `p/t/<taken_at>`.
    pub fn for_tests(taken_at: Timestamp, revision: i64) -> Self {
        Backup {
            key: format!("p/t/{taken_at}"),
            token: "t".into(),
            taken_at,
            revision,
            size: 1,
            etcd_version: None,
        }
    }
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

    #[test]
    fn member_config_env_round_trips() {
        let cfg = MemberConfig {
            name: "i-0abc".into(),
            initial_cluster: vec![
                ("i-0aaa".into(), "http://10.0.0.1:2380".into()),
                ("i-0abc".into(), "http://10.0.0.2:2380".into()),
            ],
            state: InitialState::Existing,
            token: "etcd-i-0aaa".into(),
            peer_url: "http://10.0.0.2:2380".into(),
            client_url: "http://10.0.0.2:2379".into(),
            auto_compaction_retention: "1h".into(),
            quota_backend_bytes: 2 << 30,
            snapshot_count: 10_000,
            restore: None,
            client_cert_auth: false,
            root_tokens: false,
            etcd_version: None,
            metrics_url: None,
        };
        let env = cfg.to_env();
        assert!(env.contains("ETCD_AUTO_COMPACTION_MODE=periodic\n"));
        assert!(env.contains("ETCD_QUOTA_BACKEND_BYTES=2147483648\n"));
        assert!(env.contains(
            "ETCD_INITIAL_CLUSTER=i-0aaa=http://10.0.0.1:2380,i-0abc=http://10.0.0.2:2380\n"
        ));
        assert!(env.contains("ETCD_INITIAL_CLUSTER_STATE=existing\n"));
        assert_eq!(MemberConfig::parse_env(&env).unwrap(), cfg);
        assert!(!env.contains("CERT") && !env.contains("METRICS"), "{env}");
        // With TLS managed: certificates demanded of clients and peers, a plain metrics listener.
        let tls = MemberConfig {
            client_cert_auth: true,
            root_tokens: true,
            etcd_version: None,
            metrics_url: Some("http://10.0.0.2:2381".into()),
            ..cfg
        };
        let env = tls.to_env();
        assert!(env.contains("ETCD_CLIENT_CERT_AUTH=true\nETCD_PEER_CLIENT_CERT_AUTH=true\n"));
        assert!(env.contains("ETCD_LISTEN_METRICS_URLS=http://10.0.0.2:2381\n"));
        assert!(env.contains("ETCD_ASG_ROOT_TOKENS=jwt\n"));
        assert_eq!(MemberConfig::parse_env(&env).unwrap(), tls);
    }

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

    #[test]
    fn member_config_parse_names_the_missing_variable() {
        let err = MemberConfig::parse_env("ETCD_NAME=x\n").unwrap_err();
        assert!(err.contains("ETCD_INITIAL_CLUSTER"), "{err}");
    }

    #[test]
    fn addresses_are_ips_or_host_names_and_nothing_else() {
        for ok in [
            "10.0.1.13",
            "127.0.9.1",
            "fd00::7",
            "ip-10-0-1-13.ec2.internal",
        ] {
            assert!(is_valid_address(ok), "{ok}");
        }
        let hostile = [
            "",
            "10.0.0.1\nETCD_DATA_DIR=/",
            "10.0.0.1,evil=http://10.9.9.9:2380",
            "a b",
            "-bad.example",
            "x..y",
            "http://10.0.0.1",
        ];
        for bad in hostile {
            assert!(!is_valid_address(bad), "{bad:?}");
        }
    }

    #[test]
    fn member_id_displays_in_hex_like_etcdctl() {
        assert_eq!(
            MemberId(5902601874476430397).to_string(),
            "51ea4121aab8f43d"
        );
    }
}
