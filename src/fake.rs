//! An in-memory world behind all four ports, for handler tests. Its etcd keeps the membership
//! rules that matter here (one learner, promote only started learners, not-found on a second
//! remove) and its lifecycle hooks answer "not pending" on a second completion. Every mutating
//! call is recorded.

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

fn store_failure(operation: &'static str) -> Error {
    Error::Aws {
        operation,
        source: "AccessDenied: the bucket's KMS key is disabled".into(),
    }
}

/// A snapshot streamed in small chunks.
struct Chunks(Vec<Vec<u8>>);

impl SnapshotStream for Chunks {
    fn next_chunk(&mut self) -> NextChunk<'_> {
        let next = (!self.0.is_empty()).then(|| self.0.remove(0));
        Box::pin(async move { Ok(next) })
    }
}

/// A snapshot that sends one chunk and then never another.
struct Stalls(bool);

impl SnapshotStream for Stalls {
    fn next_chunk(&mut self) -> NextChunk<'_> {
        let first = !std::mem::replace(&mut self.0, true);
        Box::pin(async move {
            if first {
                Ok(Some(b"first".to_vec()))
            } else {
                std::future::pending().await
            }
        })
    }
}

impl Backups for Fake {
    async fn list(&self) -> Result<BackupListing, Error> {
        if self.world().bucket_list_fails {
            return Err(store_failure("ListObjectsV2"));
        }
        let w = self.world();
        let mut complete: Vec<Backup> = w.bucket.values().map(|(b, _)| b.clone()).collect();
        complete.sort_by_key(|b| (b.taken_at, b.revision));
        let incomplete = w.incomplete.values().cloned().collect();
        Ok(BackupListing {
            complete,
            incomplete,
        })
    }

    async fn store(
        &self,
        mut snapshot: Snapshot,
        facts: &SnapshotFacts,
    ) -> Result<(Backup, String), Error> {
        if self.world().bucket_store_fails {
            self.world().calls.push("store failed".into());
            return Err(store_failure("PutObject"));
        }
        let mut content = Vec::new();
        loop {
            match snapshot.next_chunk().await {
                Ok(Some(chunk)) => content.extend(chunk),
                Ok(None) => break,
                Err(e) => {
                    // The real store aborts its multipart upload: nothing is kept.
                    self.world().calls.push("store aborted".into());
                    return Err(e);
                }
            }
        }
        let mut w = self.world();
        let key = format!(
            "backups/{}/{:011}-rev{}.db",
            facts.token, facts.taken_at, facts.revision
        );
        w.calls.push(format!("store {key}"));
        let backup = Backup {
            key: key.clone(),
            token: facts.token.clone(),
            taken_at: facts.taken_at,
            revision: facts.revision,
            size: content.len() as u64,
            etcd_version: None,
        };
        let content = String::from_utf8(content).unwrap();
        if w.faults.split.contains("store") {
            // The snapshot stored, its manifest not.
            w.incomplete.insert(key.clone(), backup.clone());
            return split(&mut w, "store").map(|_| unreachable!());
        }
        w.bucket.insert(key, (backup.clone(), content.clone()));
        Ok((backup, format!("sha-of-{content}")))
    }

    async fn delete(&self, key: &str) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("delete {key}"));
        if let Some((b, _)) = w.bucket.remove(key) {
            if w.faults.split.contains("prune") {
                // The manifest deleted, the snapshot not.
                w.incomplete.insert(key.to_string(), b);
                return split(&mut w, "prune");
            }
        }
        w.incomplete.remove(key);
        Ok(())
    }

    async fn hand_over(
        &self,
        key: &str,
        instance_arn: &str,
    ) -> Result<(BackupRef, Option<String>), Error> {
        let mut w = self.world();
        w.calls
            .push(format!("hand-over {key} to {}", id_of(instance_arn)));
        let (_, content) = w
            .bucket
            .get(key)
            .ok_or_else(|| refused("hand over", Refusal::Other))?
            .clone();
        let snapshot = BackupRef {
            key: key.to_string(),
            url: format!("s3://bucket/{key}"),
            sha256: format!("sha-of-{content}"),
        };
        Ok((snapshot, w.copied_from.get(key).cloned()))
    }
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

impl Group for Fake {
    async fn list(&self) -> Result<GroupState, Error> {
        fault(self, "list").await?;
        let mut w = self.world();
        w.describes += 1;
        // As Auto Scaling keeps it: the instances not on their way out, unless a test says.
        let desired_capacity = w.desired_capacity.unwrap_or_else(|| {
            w.instances
                .iter()
                .filter(|i| i.state.is_present() && i.state != LifecycleState::TerminatingWait)
                .count() as u32
        });
        Ok(GroupState {
            instances: w.instances.clone(),
            desired_capacity,
            undescribed: Default::default(),
            zones: w.zones.clone(),
            suspended: w.suspended.clone(),
        })
    }

    /// The addresses and launch times were listed with the instances already (the fake has one
    /// source): those EC2 does not describe lose them.
    async fn locate(&self, mut group: GroupState) -> GroupState {
        if fault(self, "locate").await.is_err() {
            return group;
        }
        let undescribed = self.world().faults.undescribed.clone();
        for i in &mut group.instances {
            if let Some(why) = undescribed.get(&i.id) {
                (i.address, i.launched_at) = (None, 0);
                group.undescribed.insert(i.id.clone(), why.clone());
            }
        }
        group
    }

    async fn has_warm_pool(&self) -> Result<bool, Error> {
        Ok(self.world().warm_pool)
    }

    async fn set_unhealthy(&self, instance: &str) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("set-unhealthy {instance}"));
        if let Some(i) = w.instances.iter_mut().find(|i| i.id == instance) {
            i.healthy = false;
        }
        Ok(())
    }
}

impl Lifecycle for Fake {
    async fn complete(
        &self,
        instance: &str,
        transition: Transition,
        result: ActionResult,
    ) -> Result<Completion, Error> {
        fault(self, "complete").await?;
        let mut w = self.world();
        w.calls.push(format!(
            "complete {transition} {instance} {}",
            result.as_str()
        ));
        let Some(pos) = w.instances.iter().position(|i| i.id == instance) else {
            return Ok(Completion::NotPending);
        };
        if w.stale_completions {
            return Ok(Completion::NotPending);
        }
        match (transition, &w.instances[pos].state, result) {
            (Transition::Launch, LifecycleState::PendingWait, ActionResult::Continue) => {
                w.instances[pos].state = LifecycleState::InService;
            }
            (Transition::Launch, LifecycleState::PendingWait, ActionResult::Abandon)
            | (Transition::Terminate, LifecycleState::TerminatingWait, _) => {
                w.instances.remove(pos);
            }
            _ => return Ok(Completion::NotPending),
        }
        Ok(Completion::Done)
    }

    async fn heartbeat(&self, instance: &str, transition: Transition) -> Result<Completion, Error> {
        fault(self, "heartbeat").await?;
        let mut w = self.world();
        if w.faults.heartbeat_fails.contains(instance) {
            w.calls
                .push(format!("heartbeat {transition} {instance} failed"));
            return Err(Error::Aws {
                operation: "RecordLifecycleActionHeartbeat",
                source: "Throttling: Rate exceeded".into(),
            });
        }
        w.calls.push(format!("heartbeat {transition} {instance}"));
        let held = w.instances.iter().any(|i| {
            i.id == instance
                && matches!(
                    (transition, &i.state),
                    (Transition::Launch, LifecycleState::PendingWait)
                        | (Transition::Terminate, LifecycleState::TerminatingWait)
                )
        });
        if !held {
            return Ok(Completion::NotPending);
        }
        let now = w.now;
        w.faults.beats.push((instance.to_string(), now));
        Ok(Completion::Done)
    }

    async fn hooks(&self) -> Result<Vec<Hook>, Error> {
        fault(self, "hooks").await?;
        let w_timeout = self
            .world()
            .faults
            .hook_timeout
            .unwrap_or(std::time::Duration::from_secs(300));
        let names = self
            .world()
            .hooks
            .clone()
            .unwrap_or_else(|| vec!["etcd-launch".into(), "etcd-terminate".into()]);
        Ok(names
            .into_iter()
            .map(|name| Hook {
                name,
                heartbeat_timeout: w_timeout,
            })
            .collect())
    }
}

impl Secrets for Fake {
    async fn load_ca(&self) -> Result<Option<Ca>, Error> {
        Ok(self.world().ca.clone())
    }

    async fn create_ca(&self, ca: &Ca) -> Result<Created, Error> {
        let mut w = self.world();
        w.calls.push("create-ca".into());
        if w.ca.is_some() {
            return Ok(Created::AlreadyExists);
        }
        w.ca = Some(ca.clone());
        // Applied, its answer lost.
        split(&mut w, "create-ca")?;
        Ok(Created::Created)
    }

    async fn load_token_key(&self) -> Result<Option<KeyPem>, Error> {
        Ok(self.world().token_key.clone())
    }

    async fn create_token_key(&self, key: &KeyPem) -> Result<Created, Error> {
        let mut w = self.world();
        w.calls.push("create-token-key".into());
        if w.token_key.is_some() {
            return Ok(Created::AlreadyExists);
        }
        w.token_key = Some(key.clone());
        Ok(Created::Created)
    }

    async fn load_root_password(&self) -> Result<Option<Password>, Error> {
        Ok(self.world().root_password.clone())
    }

    async fn put_root_password(&self, password: &Password) -> Result<(), Error> {
        self.world().root_password = Some(password.clone());
        Ok(())
    }

    async fn hand_out(
        &self,
        instance: &str,
        instance_arn: &str,
        bundle: &KeyPem,
        not_after: Timestamp,
    ) -> Result<(), Error> {
        assert_eq!(
            id_of(instance_arn),
            instance,
            "a bundle for its own instance"
        );
        fault(self, "hand-out").await?;
        let mut w = self.world();
        w.calls.push(format!("hand-out {instance}"));
        // As SSM holds them: the end says issuing, the bundle, then its end, each written
        // whatever is there.
        w.issuing.insert(instance.to_string());
        w.cert_not_after.remove(instance);
        w.tls.insert(instance.to_string(), bundle.clone());
        split(&mut w, "hand-out")?;
        w.issuing.remove(instance);
        w.cert_not_after.insert(instance.to_string(), not_after);
        Ok(())
    }
}

impl PublishedConfig for Fake {
    async fn load(&self) -> Result<PublishedState, Error> {
        fault(self, "load").await?;
        let mut w = self.world();
        w.loads += 1;
        Ok(PublishedState {
            decided: w.decided.clone(),
            restored: w.restored.clone(),
            cluster: w.record.clone(),
            members: w.configs.clone(),
            down_since: w.down_since.clone(),
            marked: w.marked.clone(),
            restore_request: w.restore_request.clone(),
            restore_request_at: w.restore_request_at,
            cert_not_after: w.cert_not_after.clone(),
            issuing: w.issuing.clone(),
        })
    }

    async fn create_cluster(&self, record: &ClusterRecord) -> Result<Created, Error> {
        let mut w = self.world();
        w.calls.push(format!("create-cluster seed {}", record.seed));
        if w.record.is_some() {
            return Ok(Created::AlreadyExists);
        }
        w.record = Some(record.clone());
        Ok(Created::Created)
    }

    async fn replace_cluster(
        &self,
        old: &ClusterRecord,
        new: &ClusterRecord,
    ) -> Result<Created, Error> {
        let mut w = self.world();
        w.calls.push(format!("reseed {} -> {}", old.seed, new.seed));
        // As SSM: the fence decides, whoever finds it rolls its record forward.
        let decided = w
            .decided
            .entry(old.fence())
            .or_insert_with(|| Decision::Replaced(Box::new(new.clone())))
            .clone();
        let Decision::Replaced(decided) = decided else {
            return Ok(Created::AlreadyExists);
        };
        split(&mut w, "reseed")?;
        if w.record.as_ref() != Some(old) {
            return Ok(Created::AlreadyExists);
        }
        w.record = Some(*decided.clone());
        Ok(if decided.as_ref() == new {
            Created::Created
        } else {
            Created::AlreadyExists
        })
    }

    async fn request_restore(&self, key: &str) -> Result<(), Error> {
        let mut w = self.world();
        w.restore_request = Some(key.to_string());
        w.restore_request_at = Some(w.now);
        Ok(())
    }

    async fn restore_cluster(
        &self,
        old: &ClusterRecord,
        new: &ClusterRecord,
    ) -> Result<Created, Error> {
        let mut w = self.world();
        w.calls.push(format!("restore-cluster seed {}", new.seed));
        let won = !w.restored.contains_key(&old.fence());
        let decided = w
            .restored
            .entry(old.fence())
            .or_insert_with(|| new.clone())
            .clone();
        split(&mut w, "restore")?;
        if w.record.as_ref() != Some(old) {
            return Ok(Created::AlreadyExists);
        }
        w.record = Some(decided);
        Ok(if won {
            Created::Created
        } else {
            Created::AlreadyExists
        })
    }

    async fn mark_served(&self, record: &ClusterRecord) -> Result<Created, Error> {
        let mut w = self.world();
        w.calls.push(format!("mark-served {}", record.seed));
        let decided = w
            .decided
            .entry(record.fence())
            .or_insert(Decision::Served)
            .clone();
        if decided != Decision::Served {
            return Ok(Created::AlreadyExists);
        }
        split(&mut w, "mark-served")?;
        w.record = Some(record.clone());
        Ok(Created::Created)
    }

    async fn note_down(&self, instance: &str, since: Timestamp) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("note-down {instance}"));
        w.down_since.insert(instance.to_string(), since);
        Ok(())
    }

    async fn note_marked(&self, instance: &str, at: Timestamp) -> Result<(), Error> {
        self.world().marked.insert(instance.to_string(), at);
        Ok(())
    }

    async fn forget_down(&self, instance: &str) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("forget-down {instance}"));
        w.down_since.remove(instance);
        w.marked.remove(instance);
        Ok(())
    }

    async fn publish(
        &self,
        instance: &str,
        instance_arn: &str,
        config: &MemberConfig,
    ) -> Result<(), Error> {
        assert_eq!(
            id_of(instance_arn),
            instance,
            "a config for its own instance"
        );
        fault(self, "publish").await?;
        let mut w = self.world();
        w.calls.push(format!("publish {instance}"));
        let published_at = w.now;
        w.configs.insert(
            instance.to_string(),
            Published {
                config: config.clone(),
                published_at,
            },
        );
        Ok(())
    }

    async fn unpublish(&self, instance: &str, key_material: bool) -> Result<(), Error> {
        let mut w = self.world();
        if key_material {
            w.calls.push(format!("take-back {instance}"));
            w.tls.remove(instance);
            w.cert_not_after.remove(instance);
            w.issuing.remove(instance);
        }
        w.calls.push(format!("unpublish {instance}"));
        w.configs.remove(instance);
        w.marked.remove(instance);
        Ok(())
    }
}

impl Members for Fake {
    async fn observe(&self, endpoints: &[String], cluster: Option<u64>) -> ClusterState {
        let w = self.world();
        let cluster_id = u64::from(w.clusters_formed);
        let answering = w
            .members
            .iter()
            .filter(|m| !m.is_learner && w.reachable(m))
            .filter(|_| cluster.is_none_or(|c| c == cluster_id))
            .find_map(|m| m.client_urls.iter().find(|u| endpoints.contains(u)));
        // A quorum of voters alive, or there is no leader and nobody is believed.
        let voters = w.members.iter().filter(|m| !m.is_learner).count();
        let live_voters = w
            .members
            .iter()
            .filter(|m| !m.is_learner && w.live(m))
            .count();
        match answering {
            Some(endpoint) if live_voters > voters / 2 => ClusterState::Known(ClusterView {
                cluster_id,
                members: w.members.clone(),
                leader: w
                    .members
                    .iter()
                    .find(|m| !m.is_learner && w.live(m))
                    .map(|m| m.id),
                healthy: w
                    .members
                    .iter()
                    .filter(|m| w.reachable(m))
                    .map(|m| m.id)
                    .collect(),
                endpoint: endpoint.clone(),
                statuses: w
                    .members
                    .iter()
                    .filter(|m| w.reachable(m))
                    .map(|m| (m.id, w.db.get(&m.id).cloned().unwrap_or_default()))
                    .collect(),
                alarms: w.alarms.clone(),
                history_compacted: w.compacted > 0
                    && w.compacted >= w.db.values().map(|s| s.revision).max().unwrap_or(0),
                auth_enabled: w.auth_enabled,
                root_refused: w.root_refused.clone(),
                cluster_version: Some(crate::model::Version::new(3, 6, 0)),
                peer_connected: w
                    .members
                    .iter()
                    .filter(|m| w.live(m) && w.cut_off.contains(&m.name))
                    .map(|m| m.id)
                    .collect(),
            }),
            // No quorum: the members still alive answer for themselves (status, local list).
            _ => ClusterState::Unreachable {
                detail: "no endpoint answered".into(),
                survivors: w
                    .members
                    .iter()
                    .filter(|m| w.live(m) && cluster.is_none_or(|c| c == cluster_id))
                    .filter_map(|m| {
                        Some(crate::model::Survivor {
                            member: m.id,
                            name: m.name.clone(),
                            is_learner: m.is_learner,
                            endpoint: m.client_urls.first()?.clone(),
                            cluster_id,
                            status: w.db.get(&m.id).cloned().unwrap_or_default(),
                            voters: w
                                .members
                                .iter()
                                .filter(|v| !v.is_learner)
                                .cloned()
                                .collect(),
                        })
                    })
                    .collect(),
            },
        }
    }

    fn identify(&self, _ca: &Ca) -> Result<(), Error> {
        Ok(())
    }

    fn use_root_password(&self, _password: Password, _login_first: &[String]) {}

    async fn add_learner(&self, _endpoint: &str, peer_url: &str) -> Result<MemberId, Error> {
        let mut w = self.world();
        w.calls.push(format!("add-learner {peer_url}"));
        if let Some(r) = w.refuse {
            return Err(refused("add", r));
        }
        if w.members.iter().any(|m| m.is_learner) {
            return Err(refused("add", Refusal::TooManyLearners));
        }
        if w.members
            .iter()
            .any(|m| m.peer_urls.iter().any(|u| u == peer_url))
        {
            return Err(refused("add", Refusal::PeerUrlExists));
        }
        w.next_member += 1;
        let id = MemberId(w.next_member);
        w.members.push(Member {
            id,
            name: String::new(),
            peer_urls: vec![peer_url.to_string()],
            client_urls: vec![],
            is_learner: true,
        });
        Ok(id)
    }

    async fn promote(&self, _endpoint: &str, id: MemberId) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("promote {id}"));
        let m = w
            .members
            .iter_mut()
            .find(|m| m.id == id)
            .ok_or_else(|| refused("promote", Refusal::MemberNotFound))?;
        if !m.is_learner {
            return Err(refused("promote", Refusal::NotALearner));
        }
        if !m.is_started() {
            return Err(refused("promote", Refusal::LearnerNotInSync));
        }
        m.is_learner = false;
        Ok(())
    }

    /// etcd's strict reconfiguration check: an active voter may go only when the other active
    /// voters are a quorum of those that stay; a downed one when the started others are.
    async fn remove(&self, _endpoint: &str, id: MemberId) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("remove {id}"));
        if let Some(r) = w.refuse {
            return Err(refused("remove", r));
        }
        let Some(m) = w.members.iter().find(|m| m.id == id).cloned() else {
            return Err(refused("remove", Refusal::MemberNotFound));
        };
        if !m.is_learner {
            let others: Vec<&Member> = w
                .members
                .iter()
                .filter(|o| !o.is_learner && o.id != id)
                .collect();
            let quorum = others.len() / 2 + 1;
            let started = others.iter().filter(|o| o.is_started()).count();
            let active = others.iter().filter(|o| w.live(o)).count();
            if started < quorum {
                return Err(refused("remove", Refusal::NotEnoughStartedMembers));
            }
            if w.live(&m) && active < quorum {
                return Err(refused("remove", Refusal::UnhealthyCluster));
            }
        }
        w.members.retain(|m| m.id != id);
        Ok(())
    }

    async fn compact(&self, _endpoint: &str, revision: i64) -> Result<Compacted, Error> {
        let mut w = self.world();
        w.calls.push(format!("compact {revision}"));
        if revision <= w.compacted {
            return Ok(Compacted::Already);
        }
        w.compacted = revision;
        let live = w.live_bytes;
        for s in w.db.values_mut() {
            s.db_size_in_use = live.min(s.db_size);
        }
        Ok(Compacted::Now)
    }

    async fn defragment(&self, endpoint: &str) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("defragment {endpoint}"));
        let id = w
            .members
            .iter()
            .find(|m| m.client_urls.iter().any(|u| u == endpoint))
            .map(|m| m.id)
            .ok_or_else(|| refused("defragment", Refusal::MemberNotFound))?;
        if let Some(s) = w.db.get_mut(&id) {
            s.db_size = s.db_size_in_use;
        }
        Ok(())
    }

    async fn snapshot(&self, endpoint: &str) -> Result<Snapshot, Error> {
        let mut w = self.world();
        w.calls.push(format!("snapshot {endpoint}"));
        if w.snapshot_stalls {
            return Ok(Box::new(Stalls(false)));
        }
        let data = w.data.clone();
        Ok(Box::new(Chunks(
            data.into_bytes().chunks(4).map(<[u8]>::to_vec).collect(),
        )))
    }

    async fn disarm(&self, _endpoint: &str, alarm: &Alarm) -> Result<(), Error> {
        let mut w = self.world();
        w.calls
            .push(format!("disarm {} {}", alarm.kind, alarm.member));
        w.alarms.retain(|a| a != alarm);
        Ok(())
    }

    async fn raise(&self, _endpoint: &str, alarm: &Alarm) -> Result<(), Error> {
        let mut w = self.world();
        w.calls
            .push(format!("raise {} {}", alarm.kind, alarm.member));
        if !w.alarms.contains(alarm) {
            w.alarms.push(alarm.clone());
        }
        Ok(())
    }

    async fn enable_auth(&self, _endpoint: &str) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push("enable-auth".into());
        w.auth_enabled = true;
        Ok(())
    }

    async fn grant_prefix(&self, _endpoint: &str, grant: &PrefixGrant) -> Result<(), Error> {
        let mut w = self.world();
        w.calls
            .push(format!("grant {} {}", grant.user, grant.prefix));
        w.grants.push(grant.clone());
        Ok(())
    }

    async fn transfer_leadership(&self, _leader: &str, to: MemberId) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("transfer-leadership {to}"));
        // Leadership goes to the first live voter: move the transferee to the front.
        let pos = w
            .members
            .iter()
            .position(|m| m.id == to)
            .ok_or_else(|| refused("transfer", Refusal::BadLeaderTransferee))?;
        let m = w.members.remove(pos);
        w.members.insert(0, m);
        Ok(())
    }
}
