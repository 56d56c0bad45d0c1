//! An in-memory world behind all four ports, for handler tests. Its etcd keeps the membership
//! rules that matter here (one learner, promote only started learners, not-found on a second
//! remove) and its lifecycle hooks answer "not pending" on a second completion. Every mutating
//! call is recorded.
//!
//! Split as the real adapters are: `autoscaling.rs` (`Group`, `Lifecycle`), `ssm.rs`
//! (`PublishedConfig`, `Secrets`), `etcd.rs` (`Members`), `s3.rs` (`Backups`); here, the world
//! they share, the faults it can be given, and what a test does to it (`launch`, `boot`, …).

mod autoscaling;
mod etcd;
mod s3;
mod ssm;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Refusal};
use crate::model::*;
use crate::pki::{Ca, KeyPem, Password};
use crate::ports::*;

/// The instances' ARNs, less their id.
pub const ARN_PREFIX: &str = "arn:aws:ec2:us-east-1:123456789012:instance/";

/// The instance an ARN names.
fn id_of(arn: &str) -> &str {
    arn.rsplit('/').next().unwrap_or(arn)
}

#[derive(Default)]
pub struct World {
    pub instances: Vec<Instance>,
    pub members: Vec<Member>,
    pub record: Option<ClusterRecord>,
    pub configs: BTreeMap<String, Published>,
    pub calls: Vec<String>,
    pub now: Timestamp,
    next_member: u64,
    /// Clusters ever formed: more than one is split brain.
    pub clusters_formed: u32,
    /// Every etcd process unreachable (a network partition from the function's point of view).
    pub etcd_down: bool,
    /// Instances whose etcd is dead (or never starts) while the instance itself runs on.
    pub dead: BTreeSet<String>,
    /// Instances whose etcd runs and serves its peers but that the function cannot reach (a
    /// route, an ACL, an ENI problem): their peers report them connected.
    pub cut_off: BTreeSet<String>,
    /// The group's desired capacity; None: the instances not terminating.
    pub desired_capacity: Option<u32>,
    /// The group's hook names, when a test wants them other than the configured two.
    pub hooks: Option<Vec<String>>,
    /// The decisions about record generations and the restore fences, by the generation's
    /// fence name (`ClusterRecord::fence`), as SSM holds them.
    pub decided: BTreeMap<String, Decision>,
    pub restored: BTreeMap<String, ClusterRecord>,
    pub down_since: BTreeMap<String, Timestamp>,
    /// When the function marked each instance Unhealthy.
    pub marked: BTreeMap<String, Timestamp>,
    /// etcd refuses every membership change with this, as a real one does for a while.
    pub refuse: Option<Refusal>,
    /// Completions succeed but the group keeps showing the action (eventual consistency).
    pub stale_completions: bool,
    /// Each member's database, by member id; members without an entry report an empty one.
    pub db: BTreeMap<MemberId, MemberStatus>,
    /// Bytes the live data takes, what a compaction leaves in use.
    pub live_bytes: u64,
    /// Members with a read open (a snapshot streaming) when a compaction commits: the pages it
    /// frees stay pending and their in-use figure stays as it was, until a defragmentation
    /// (bbolt releases pending pages at its next write transaction; under NOSPACE none comes).
    pub reading: std::collections::BTreeSet<MemberId>,
    pub alarms: Vec<Alarm>,
    pub compacted: i64,
    /// etcd's authentication, and the prefixes granted to users.
    pub auth_enabled: bool,
    pub root_refused: Option<String>,
    pub grants: Vec<PrefixGrant>,
    /// The CA and each instance's TLS bundle (Secrets).
    pub ca: Option<crate::pki::Ca>,
    pub token_key: Option<KeyPem>,
    pub root_password: Option<Password>,
    pub tls: BTreeMap<String, crate::pki::KeyPem>,
    pub cert_not_after: BTreeMap<String, Timestamp>,
    pub issuing: BTreeSet<String>,
    /// The keyspace, as one string: what a snapshot streams and a restore brings back.
    pub data: String,
    pub restore_request: Option<String>,
    pub restore_request_at: Option<Timestamp>,
    /// Reads of the group (`describe`) and of the published state (`load`): what AWS would be
    /// asked.
    pub describes: u32,
    pub loads: u32,
    /// The backup bucket: key → (backup, content).
    pub bucket: BTreeMap<String, (Backup, String)>,
    /// Backups copied in from elsewhere (`etcd-asg restore --from`): key → the source.
    pub copied_from: BTreeMap<String, String>,
    /// The bucket refuses listings, or stores (a deleted bucket, a disabled KMS key, a policy).
    pub bucket_list_fails: bool,
    pub bucket_store_fails: bool,
    /// A lease expires as each snapshot begins: the member's revision moves by one, and the
    /// snapshot holds the moved one (`snapshot_holds`, what the store's manifest then says).
    pub snapshot_moves_revision: bool,
    pub snapshot_holds: Option<i64>,
    /// The revision each stored backup's manifest says its snapshot holds, by key.
    pub holds: BTreeMap<String, i64>,
    /// Snapshots stream their first chunk, then nothing more (a database too large for the
    /// function's share of a CPU, a member too slow).
    pub snapshot_stalls: bool,
    /// Incomplete backups in the bucket: the halves a store or a prune left.
    pub incomplete: BTreeMap<String, Backup>,
    /// The group has a warm pool.
    pub warm_pool: bool,
    /// The group's Availability Zones and suspended processes.
    pub zones: Vec<String>,
    pub suspended: BTreeSet<String>,
    /// AWS as it fails (`Faults`).
    pub faults: Faults,
}

/// What the fake's AWS does wrong, as the real one can: each port call below by its name.
#[derive(Default)]
pub struct Faults {
    /// Calls that fail (throttled, refused), changing nothing: `list`, `load`, `heartbeat`,
    /// `hooks`, `complete`, `publish`, `hand-out`, ...
    pub fail: BTreeSet<&'static str>,
    /// Calls that fail the first time only.
    pub fail_once: BTreeSet<&'static str>,
    /// Calls that never answer.
    pub hang: BTreeSet<&'static str>,
    /// Calls that panic (a bug).
    pub panic: BTreeSet<&'static str>,
    /// Steps of two writes that do the first and then fail (a crash, or a lost answer, between
    /// the two): `mark-served` (the fence, not the record), `hand-out` (the bundle, not its
    /// end), `reseed` and `restore` (the fence, not the record), `store` (the snapshot, not
    /// its manifest), `prune` (the manifest, not the snapshot).
    pub split: BTreeSet<&'static str>,
    /// Instances whose heartbeat fails.
    pub heartbeat_fails: BTreeSet<String>,
    /// Instances EC2 does not describe (an impaired zone), and why.
    pub undescribed: BTreeMap<String, String>,
    /// Heartbeats answered, by instance, at the world's time.
    pub beats: Vec<(String, Timestamp)>,
    /// The hooks' heartbeat timeout (default 300 s).
    pub hook_timeout: Option<std::time::Duration>,
}

/// A call's fault, if the world has one for it.
async fn fault(f: &Fake, call: &'static str) -> Result<(), Error> {
    let (fails, hangs, panics) = {
        let mut w = f.world();
        (
            w.faults.fail.contains(call) || w.faults.fail_once.remove(call),
            w.faults.hang.contains(call),
            w.faults.panic.contains(call),
        )
    };
    if panics {
        panic!("the fake's {call} panics on purpose");
    }
    if hangs {
        std::future::pending::<()>().await;
    }
    if fails {
        f.world().calls.push(format!("{call} failed"));
        return Err(Error::Aws {
            operation: call,
            source: "ThrottlingException: Rate exceeded".into(),
        });
    }
    Ok(())
}

/// The second write of a split step did not happen.
fn split(w: &mut World, call: &'static str) -> Result<(), Error> {
    if w.faults.split.contains(call) {
        w.calls.push(format!("{call} split"));
        return Err(Error::Aws {
            operation: call,
            source: "InternalFailure: the answer was lost".into(),
        });
    }
    Ok(())
}

#[derive(Clone, Default)]
pub struct Fake(pub Arc<Mutex<World>>);

fn refused(operation: &'static str, refusal: Refusal) -> Error {
    Error::EtcdRefused {
        operation,
        refusal,
        message: format!("{refusal:?}"),
    }
}

impl Fake {
    pub fn world(&self) -> std::sync::MutexGuard<'_, World> {
        self.0.lock().unwrap()
    }

    /// Mutating calls made so far.
    pub fn calls(&self) -> Vec<String> {
        self.world().calls.clone()
    }

    pub fn launch(&self, n: u8) -> String {
        let mut w = self.world();
        let id = format!("i-0000000{n}");
        let launched_at = w.now;
        w.instances.push(Instance {
            arn: format!("{ARN_PREFIX}{id}"),
            id: id.clone(),
            state: LifecycleState::PendingWait,
            address: Some(format!("10.0.0.{n}")),
            launched_at,
            healthy: true,
            zone: None,
            etcd_version: Some(crate::model::Version::new(3, 6, 17)),
        });
        id
    }

    /// What the group does with an instance marked Unhealthy: terminate it through the hook and
    /// launch a replacement (`n` names it).
    pub fn replace_unhealthy(&self, n: u8) -> Option<String> {
        let sick = self
            .world()
            .instances
            .iter()
            .find(|i| !i.healthy && i.state == LifecycleState::InService)
            .map(|i| i.id.clone())?;
        self.start_terminating(&sick);
        self.launch(n);
        Some(sick)
    }

    pub fn start_terminating(&self, id: &str) {
        let mut w = self.world();
        let i = w.instances.iter_mut().find(|i| i.id == id).unwrap();
        i.state = LifecycleState::TerminatingWait;
    }

    /// What each instance's boot script does: read its published config, start etcd with it.
    pub fn boot(&self) {
        let mut w = self.world();
        let w = &mut *w;
        for inst in w
            .instances
            .iter()
            .filter(|i| i.state.wants_membership() && !w.dead.contains(&i.id))
        {
            let Some(p) = w.configs.get(&inst.id) else {
                continue;
            };
            let c = &p.config;
            match c.state {
                InitialState::New if w.members.is_empty() => {
                    if let Some(r) = &c.restore {
                        let content = w.bucket.get(&r.key).map(|(_, c)| c.clone());
                        match content {
                            Some(c) if format!("sha-of-{c}") == r.sha256 => w.data = c,
                            _ => continue, // refuses to start: nothing restored
                        }
                    }
                    w.next_member += 1;
                    w.clusters_formed += 1;
                    w.members.push(Member {
                        id: MemberId(w.next_member),
                        name: c.name.clone(),
                        peer_urls: vec![c.peer_url.clone()],
                        client_urls: vec![c.client_url.clone()],
                        is_learner: false,
                    });
                }
                InitialState::Existing => {
                    // etcd refuses to start unless initial-cluster matches the member list.
                    let mut want: Vec<&String> = c.initial_cluster.iter().map(|(_, u)| u).collect();
                    let mut have: Vec<&String> =
                        w.members.iter().flat_map(|m| &m.peer_urls).collect();
                    want.sort();
                    have.sort();
                    if want != have {
                        continue;
                    }
                    if let Some(m) = w
                        .members
                        .iter_mut()
                        .find(|m| m.peer_urls.contains(&c.peer_url) && !m.is_started())
                    {
                        m.name = c.name.clone();
                        m.client_urls = vec![c.client_url.clone()];
                    }
                }
                _ => {}
            }
        }
    }
}

impl World {
    /// A started member whose instance runs and whose etcd is alive.
    /// Live, and reachable from the function.
    fn reachable(&self, m: &Member) -> bool {
        self.live(m) && !self.cut_off.contains(&m.name)
    }

    fn live(&self, m: &Member) -> bool {
        m.is_started()
            && !self.etcd_down
            && self
                .instances
                .iter()
                .any(|i| i.id == m.name && i.state.is_present() && !self.dead.contains(&i.id))
    }
}
