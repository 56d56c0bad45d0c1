//! What the reconciler needs from the world, in domain terms. Each port has a real adapter in
//! `adapters` and an in-memory fake for the handler tests.

use std::future::Future;
use std::pin::Pin;

use crate::error::Error;
use crate::model::{
    ActionResult, Alarm, Backup, BackupListing, BackupRef, ClusterRecord, ClusterState, GroupState,
    MemberConfig, MemberId, PublishedState, SnapshotFacts, Timestamp, Transition,
};
use crate::pki::{Ca, KeyPem, Password};

/// The group's instances with their lifecycle states and addresses.
pub trait Group: Send + Sync {
    /// Its instances, their lifecycle states and its desired capacity, from Auto Scaling alone
    /// (no address, no launch time): all that the heartbeats of held hooks need.
    fn list(&self) -> impl Future<Output = Result<GroupState, Error>> + Send;
    /// `group` with EC2's addresses and launch times. Never fails as a whole: an instance EC2
    /// does not describe (an impaired zone, an id it does not know yet) is left without, and
    /// named in `GroupState::undescribed` with why.
    fn locate(&self, group: GroupState) -> impl Future<Output = GroupState> + Send;
    /// Both: its instances and desired capacity, with their addresses.
    fn describe(&self) -> impl Future<Output = Result<GroupState, Error>> + Send {
        async { Ok(self.locate(self.list().await?).await) }
    }
    /// Whether the group has a warm pool (DescribeWarmPool).
    fn has_warm_pool(&self) -> impl Future<Output = Result<bool, Error>> + Send;
    /// Mark the instance Unhealthy so the group replaces it (through the terminate hook).
    fn set_unhealthy(&self, instance: &str) -> impl Future<Output = Result<(), Error>> + Send;
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Completion {
    Done,
    /// AWS holds no such action any more: someone (or an earlier try of ours) already finished it.
    NotPending,
}

/// The group's lifecycle hooks, addressed by instance id so no token needs remembering.
pub trait Lifecycle: Send + Sync {
    fn complete(
        &self,
        instance: &str,
        transition: Transition,
        result: ActionResult,
    ) -> impl Future<Output = Result<Completion, Error>> + Send;

    fn heartbeat(
        &self,
        instance: &str,
        transition: Transition,
    ) -> impl Future<Output = Result<Completion, Error>> + Send;

    /// The hooks the group has.
    fn hooks(&self) -> impl Future<Output = Result<Vec<Hook>, Error>> + Send;
}

/// A lifecycle hook of the group: its name, and how long an action waits for a heartbeat (or
/// its completion) before its default result.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Hook {
    pub name: String,
    pub heartbeat_timeout: std::time::Duration,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Compacted {
    Now,
    /// History was already compacted up to that revision.
    Already,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Created {
    Created,
    AlreadyExists,
}

/// The published cluster record and per-instance configs.
pub trait PublishedConfig: Send + Sync {
    fn load(&self) -> impl Future<Output = Result<PublishedState, Error>> + Send;
    /// Create-only: never overwrites an existing record.
    fn create_cluster(
        &self,
        record: &ClusterRecord,
    ) -> impl Future<Output = Result<Created, Error>> + Send;
    /// Replace `old` with `new` only if `old` is still the record and nobody replaced it before:
    /// `AlreadyExists` when someone else did.
    fn replace_cluster(
        &self,
        old: &ClusterRecord,
        new: &ClusterRecord,
    ) -> impl Future<Output = Result<Created, Error>> + Send;
    /// Overwrite the record with the same cluster's newer facts (it served, its id), unless that
    /// record generation was replaced first (`AlreadyExists`). After this, it never is.
    fn mark_served(
        &self,
        record: &ClusterRecord,
    ) -> impl Future<Output = Result<Created, Error>> + Send;
    /// Remember when this instance's etcd was first seen down.
    fn note_down(
        &self,
        instance: &str,
        since: Timestamp,
    ) -> impl Future<Output = Result<(), Error>> + Send;
    /// Remember when the function marked this instance Unhealthy.
    fn note_marked(
        &self,
        instance: &str,
        at: Timestamp,
    ) -> impl Future<Output = Result<(), Error>> + Send;
    /// The down-mark and the Unhealthy mark's time. Deleting what is already gone succeeds.
    fn forget_down(&self, instance: &str) -> impl Future<Output = Result<(), Error>> + Send;
    /// An operator's request to restore this backup (a key, or `latest`) once every member is
    /// gone (RECOVERY=manual waits for it).
    fn request_restore(&self, key: &str) -> impl Future<Output = Result<(), Error>> + Send;
    /// Replace `old`, a record that served and is lost for good, with `new`, a
    /// generation restored from a backup: once per `old`, whoever asks first.
    fn restore_cluster(
        &self,
        old: &ClusterRecord,
        new: &ClusterRecord,
    ) -> impl Future<Output = Result<Created, Error>> + Send;
    /// Readable by `instance_arn`'s requests alone.
    fn publish(
        &self,
        instance: &str,
        instance_arn: &str,
        config: &MemberConfig,
    ) -> impl Future<Output = Result<(), Error>> + Send;
    /// Deletes the instance's config and, with `key_material`, its TLS bundle and certificate
    /// end (TLS=managed). Deleting what is already gone succeeds.
    fn unpublish(
        &self,
        instance: &str,
        key_material: bool,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

/// The cluster's key material, kept encrypted (SSM SecureStrings): the CA, which only the
/// function reads, and each member's bundle (CA certificate, its certificate and key), which only
/// that instance reads.
pub trait Secrets: Send + Sync {
    fn load_ca(&self) -> impl Future<Output = Result<Option<Ca>, Error>> + Send;
    /// Create-only: `AlreadyExists` when another invocation created the CA first.
    fn create_ca(&self, ca: &Ca) -> impl Future<Output = Result<Created, Error>> + Send;
    /// The cluster's token key (`Ca::token_key`), which members hold too.
    fn load_token_key(&self) -> impl Future<Output = Result<Option<KeyPem>, Error>> + Send;
    /// Create-only, as the CA.
    fn create_token_key(&self, key: &KeyPem)
        -> impl Future<Output = Result<Created, Error>> + Send;
    /// An adopted cluster's `root` password (docs/adopting.md), which the operator stores
    /// (`etcd-asg adopt-secrets`) and only the function reads.
    fn load_root_password(&self) -> impl Future<Output = Result<Option<Password>, Error>> + Send;
    /// Stores it, over any password stored before.
    fn put_root_password(
        &self,
        password: &Password,
    ) -> impl Future<Output = Result<(), Error>> + Send;
    /// The bundle, readable by `instance_arn`'s requests alone, then its certificate's end
    /// beside it (in plain: the planner rotates by it, and hands out only where it finds none).
    /// The end is written last: an end means its bundle is there, so a member's config is never
    /// published before its bundle. Both are written whatever is there (a hand-out split by a
    /// crash or a lost answer is done again whole; no config was published after it, so no
    /// instance read its bundle). `PublishedConfig::unpublish` takes both back.
    fn hand_out(
        &self,
        instance: &str,
        instance_arn: &str,
        bundle: &KeyPem,
        not_after: Timestamp,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

/// The etcd members API.
pub trait Members: Send + Sync {
    /// Asks the endpoints in turn; never fails: nobody answering is itself an observation. Only a
    /// voter that knows a leader is believed, and with `cluster` given, only a member of it.
    fn observe(
        &self,
        endpoints: &[String],
        cluster: Option<u64>,
    ) -> impl Future<Output = ClusterState> + Send;
    /// TLS=managed, from now on: present the function's own certificate, issued from `ca`, and
    /// act as etcd's `root` through tokens of the cluster's keys. Once; later calls change
    /// nothing.
    fn identify(&self, ca: &Ca) -> Result<(), Error>;
    /// An adopted cluster's `root` password: where a member refuses the function's own tokens
    /// (a member of the adopted cluster), log in there as `root` with it; at `login_first` (the
    /// adopted cluster's endpoints) the function's own tokens are never sent. Another password
    /// replaces it (and the logins made with it).
    fn use_root_password(&self, password: Password, login_first: &[String]);
    fn add_learner(
        &self,
        endpoint: &str,
        peer_url: &str,
    ) -> impl Future<Output = Result<MemberId, Error>> + Send;
    fn promote(
        &self,
        endpoint: &str,
        id: MemberId,
    ) -> impl Future<Output = Result<(), Error>> + Send;
    fn remove(
        &self,
        endpoint: &str,
        id: MemberId,
    ) -> impl Future<Output = Result<(), Error>> + Send;
    fn compact(
        &self,
        endpoint: &str,
        revision: i64,
    ) -> impl Future<Output = Result<Compacted, Error>> + Send;
    /// Defragments the member that `endpoint` belongs to.
    fn defragment(&self, endpoint: &str) -> impl Future<Output = Result<(), Error>> + Send;
    fn disarm(
        &self,
        endpoint: &str,
        alarm: &Alarm,
    ) -> impl Future<Output = Result<(), Error>> + Send;
    /// Raises `alarm` cluster-wide (etcd's maintenance Alarm, ACTIVATE).
    fn raise(
        &self,
        endpoint: &str,
        alarm: &Alarm,
    ) -> impl Future<Output = Result<(), Error>> + Send;
    /// The member's database, streamed (etcd's maintenance Snapshot answers without quorum).
    fn snapshot(&self, endpoint: &str) -> impl Future<Output = Result<Snapshot, Error>> + Send;
    /// Sent to the current leader.
    fn transfer_leadership(
        &self,
        leader_endpoint: &str,
        to: MemberId,
    ) -> impl Future<Output = Result<(), Error>> + Send;
    /// Turns etcd's authentication on: the `root` user (no password: the function is root
    /// through tokens) with the `root` role, then auth enable. Each part may already be done.
    fn enable_auth(&self, endpoint: &str) -> impl Future<Output = Result<(), Error>> + Send;
    /// Lets etcd user `user` (a client certificate's common name) read, or read and write, the
    /// keys under `prefix`: a role of the user's name holding that permission, granted to it.
    fn grant_prefix(
        &self,
        endpoint: &str,
        grant: &PrefixGrant,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

/// What `grant_prefix` gives a user.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PrefixGrant {
    pub user: String,
    pub prefix: String,
    pub read_only: bool,
    /// A gateway user's: it logs in with this password (`/v3/auth/authenticate`). None: a
    /// certificate user, without one (etcd takes it from the certificate's common name).
    pub password: Option<crate::pki::Password>,
}

impl PrefixGrant {
    /// The first key after every key under the prefix (etcd's `range_end`): the prefix with its
    /// last byte below 0xff incremented, the bytes after it dropped; empty (no end) if there is
    /// none.
    pub fn range_end(&self) -> Vec<u8> {
        let mut end = self.prefix.as_bytes().to_vec();
        while let Some(last) = end.pop() {
            if last < 0xff {
                end.push(last + 1);
                return end;
            }
        }
        // All 0xff (or empty): to the end of the keyspace, which etcd spells as "\0".
        vec![0]
    }
}

/// The next chunk of a snapshot, or `None` at its end.
pub type NextChunk<'a> = Pin<Box<dyn Future<Output = Result<Option<Vec<u8>>, Error>> + Send + 'a>>;

/// A snapshot as it streams out of a member: chunks until `None`. Never whole in memory.
pub trait SnapshotStream: Send {
    fn next_chunk(&mut self) -> NextChunk<'_>;
}

pub type Snapshot = Box<dyn SnapshotStream>;

/// The object store the snapshots go to.
pub trait Backups: Send + Sync {
    /// Every complete backup (manifest written), oldest first, and the halves of incomplete ones.
    fn list(&self) -> impl Future<Output = Result<BackupListing, Error>> + Send;
    /// Streams `snapshot` in; returns the backup and the SHA-256 of its content.
    fn store(
        &self,
        snapshot: Snapshot,
        facts: &SnapshotFacts,
    ) -> impl Future<Output = Result<(Backup, String), Error>> + Send;
    /// The snapshot and its manifest, the manifest first. Deleting what is already gone
    /// succeeds.
    fn delete(&self, key: &str) -> impl Future<Output = Result<(), Error>> + Send;
    /// Where the instance `instance_arn` fetches the backup and what it must hash to; grants it
    /// read access. With it, where the backup was copied from (its manifest's `copied_from`).
    fn hand_over(
        &self,
        key: &str,
        instance_arn: &str,
    ) -> impl Future<Output = Result<(BackupRef, Option<String>), Error>> + Send;
    /// The revision the backup's snapshot holds, as its manifest says (a listing knows only the
    /// one its key names, read before the snapshot streamed: a lower bound).
    fn holds(&self, key: &str) -> impl Future<Output = Result<i64, Error>> + Send;
}

/// Backups off: the store that is never there.
pub enum NoBackups {}

impl Backups for NoBackups {
    async fn list(&self) -> Result<BackupListing, Error> {
        match *self {}
    }

    async fn store(
        &self,
        _snapshot: Snapshot,
        _facts: &SnapshotFacts,
    ) -> Result<(Backup, String), Error> {
        match *self {}
    }

    async fn delete(&self, _key: &str) -> Result<(), Error> {
        match *self {}
    }

    async fn hand_over(
        &self,
        _key: &str,
        _instance_arn: &str,
    ) -> Result<(BackupRef, Option<String>), Error> {
        match *self {}
    }

    async fn holds(&self, _key: &str) -> Result<i64, Error> {
        match *self {}
    }
}
