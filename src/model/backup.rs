//! The bucket's backups: a complete one as its listing tells it, the halves an incomplete one
//! left, what a snapshot records besides its bytes, and where a restoring seed fetches one.

use super::basics::Timestamp;
use crate::versions::Version;

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
