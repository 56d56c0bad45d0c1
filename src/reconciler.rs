//! The handler: validate the event, then observe → plan → apply until nothing is left to do or
//! the invocation's time is up. Every step looks before it acts, so replays are no-ops.

use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use tracing::{info, warn};

use crate::config::Config;
use crate::error::{Error, Refusal};
use crate::event::{self, Expected, Trigger};
use crate::maintenance;
use crate::metrics::Metrics;
use crate::model::{
    ActionResult, ClusterRecord, ClusterState, ClusterView, GroupState, MemberId, Observation,
    Restore, Timestamp, Transition,
};
use crate::planner::{self, Replacement, Step, Wait};
use crate::ports::{
    Backups, Compacted, Completion, Created, Group, Lifecycle, Members, NoBackups, PublishedConfig,
    Secrets, SnapshotFacts,
};

/// Steps one invocation applies at most: a bound on a plan that would not converge.
const MAX_STEPS: usize = 64;
/// A defragmentation longer than this ends the invocation's maintenance.
const LONG_DEFRAG: Duration = Duration::from_secs(5);

pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64)
    })
}

/// What an invocation returns. A rejected event is a successful invocation: retrying it cannot
/// make it valid, and the log line says why it was refused.
#[derive(Serialize, Clone, PartialEq, Eq, Debug)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Response {
    Rejected {
        field: String,
        value: String,
        reason: String,
    },
    Acknowledged {
        what: String,
    },
    Reconciled {
        trigger: String,
        steps: Vec<String>,
        /// Work left for a later invocation, if any.
        waiting: Option<String>,
        /// Terminations held because removing their member now would cost quorum: an alarm keys
        /// on this being non-empty.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        held_for_quorum: Vec<HeldTermination>,
        stats: Stats,
        /// For the EMF log line (`Metrics::emf`), not the response.
        #[serde(skip)]
        metrics: Metrics,
    },
}

/// A terminate hook held by the quorum guard, and the voters whose etcd is down.
#[derive(Serialize, Clone, PartialEq, Eq, Debug)]
pub struct HeldTermination {
    pub instance: String,
    pub member: String,
    pub blocking: Vec<String>,
}

/// Where one invocation's time went, and how many calls it made through each port.
#[derive(Serialize, Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Stats {
    pub elapsed_ms: u64,
    /// Elapsed minus etcd, AWS and waiting: the function's own work.
    pub own_ms: u64,
    pub etcd_ms: u64,
    pub aws_ms: u64,
    pub waited_ms: u64,
    pub etcd_calls: u32,
    pub aws_calls: u32,
    pub observations: u32,
}

#[derive(Default)]
struct Meter {
    etcd_ns: AtomicU64,
    etcd_calls: AtomicU32,
    aws_ns: AtomicU64,
    aws_calls: AtomicU32,
    waited_ns: AtomicU64,
    observations: AtomicU32,
}

impl Meter {
    async fn etcd<T>(&self, call: impl Future<Output = T>) -> T {
        Self::time(&self.etcd_ns, &self.etcd_calls, call).await
    }

    async fn aws<T>(&self, call: impl Future<Output = T>) -> T {
        Self::time(&self.aws_ns, &self.aws_calls, call).await
    }

    async fn time<T>(ns: &AtomicU64, calls: &AtomicU32, call: impl Future<Output = T>) -> T {
        let began = Instant::now();
        let out = call.await;
        ns.fetch_add(began.elapsed().as_nanos() as u64, Ordering::Relaxed);
        calls.fetch_add(1, Ordering::Relaxed);
        out
    }

    async fn sleep(&self, pause: Duration) {
        tokio::time::sleep(pause).await;
        self.waited_ns
            .fetch_add(pause.as_nanos() as u64, Ordering::Relaxed);
    }

    fn stats(&self, elapsed: Duration) -> Stats {
        let ms = |ns: &AtomicU64| ns.load(Ordering::Relaxed) / 1_000_000;
        let (etcd_ms, aws_ms, waited_ms) =
            (ms(&self.etcd_ns), ms(&self.aws_ns), ms(&self.waited_ns));
        let elapsed_ms = elapsed.as_millis() as u64;
        Stats {
            elapsed_ms,
            own_ms: elapsed_ms.saturating_sub(etcd_ms + aws_ms + waited_ms),
            etcd_ms,
            aws_ms,
            waited_ms,
            etcd_calls: self.etcd_calls.load(Ordering::Relaxed),
            aws_calls: self.aws_calls.load(Ordering::Relaxed),
            observations: self.observations.load(Ordering::Relaxed),
        }
    }
}

/// One invocation's listing of the backup store: the backups, or why the store is not used.
type Listed = Option<Result<Vec<crate::model::Backup>, String>>;

pub struct Reconciler<G, L, P, M, B = NoBackups> {
    pub group: G,
    pub lifecycle: L,
    pub published: P,
    pub members: M,
    /// The backup store; None when backups are off.
    pub backups: Option<B>,
    /// The cluster's CA (TLS=managed), read or created at cold start; it signs member
    /// certificates as members join.
    pub ca: Option<crate::pki::Ca>,
    pub config: Config,
    pub clock: Clock,
    /// When a backup step last failed in this (warm) environment: backups wait
    /// `BACKUP_RETRY_AFTER` after it, so that a snapshot that cannot finish in time, or a store
    /// that fails, costs one invocation's attempt and not every invocation's membership work (a
    /// removal that wants a fresh snapshot then goes without it).
    pub backup_failed_at: std::sync::Mutex<Option<Instant>>,
}

/// How long backups wait after a backup step failed in this environment.
const BACKUP_RETRY_AFTER: Duration = Duration::from_secs(120);

impl<G: Group, L: Lifecycle, P: PublishedConfig + Secrets, M: Members, B: Backups>
    Reconciler<G, L, P, M, B>
{
    pub async fn handle(&self, payload: &Value, deadline: Instant) -> Result<Response, Error> {
        let expected = Expected {
            group: &self.config.group_name,
            hooks: [&self.config.launch_hook, &self.config.terminate_hook],
        };
        match event::parse(payload, &expected) {
            Err(r) => {
                warn!(field = r.field, value = %r.value, reason = %r.reason, "event rejected");
                Ok(Response::Rejected {
                    field: r.field.to_string(),
                    value: r.value,
                    reason: r.reason,
                })
            }
            Ok(Trigger::TestNotification) => {
                info!("lifecycle hook test notification acknowledged");
                Ok(Response::Acknowledged {
                    what: "test notification".into(),
                })
            }
            // Boxed: the SDK's futures nest deep enough that the release build's layout
            // computation of one unboxed handler future overflows rustc's query depth.
            Ok(Trigger::Schedule) => {
                Box::pin(self.reconcile("schedule".into(), None, deadline)).await
            }
            Ok(Trigger::Lifecycle {
                transition,
                instance,
                warm_pool: true,
                ..
            }) => self.warm_pool(transition, &instance, deadline).await,
            Ok(Trigger::Lifecycle {
                transition,
                instance,
                ..
            }) => {
                let trigger = format!("{transition} {instance}");
                Box::pin(self.reconcile(trigger, Some(&instance), deadline)).await
            }
        }
    }

    /// Instances going into a warm pool, or dying out of one, never become members: let them
    /// through. Only while the group does not list them: one it lists is reconciled as usual.
    async fn warm_pool(
        &self,
        transition: Transition,
        instance: &str,
        deadline: Instant,
    ) -> Result<Response, Error> {
        let started = Instant::now();
        let meter = Meter::default();
        let group = meter.aws(self.group.describe()).await?;
        if group.instances.iter().any(|i| i.id == instance) {
            let trigger = format!("{transition} {instance}");
            return Box::pin(self.reconcile(trigger, Some(instance), deadline)).await;
        }
        let result = ActionResult::Continue;
        let c = meter
            .aws(self.lifecycle.complete(instance, transition, result))
            .await?;
        let outcome = match c {
            Completion::Done => "completed",
            Completion::NotPending => "already-completed",
        };
        info!(%instance, %transition, outcome, "warm-pool lifecycle action completed: not a member");
        Ok(Response::Reconciled {
            trigger: format!("{transition} {instance} (warm pool)"),
            steps: vec![format!(
                "complete-lifecycle-action {instance} CONTINUE: {outcome}"
            )],
            waiting: None,
            held_for_quorum: vec![],
            stats: meter.stats(started.elapsed()),
            metrics: Metrics::default(),
        })
    }

    /// At cold start: both hooks must exist on the group, or no instance would ever be held for
    /// us (and every event would be for nothing).
    pub async fn check_hooks(&self) -> Result<(), Error> {
        let names = self.lifecycle.hook_names().await?;
        for (var, hook) in [
            ("LAUNCH_HOOK_NAME", &self.config.launch_hook),
            ("TERMINATE_HOOK_NAME", &self.config.terminate_hook),
        ] {
            if !names.contains(hook) {
                return Err(Error::Config {
                    var: var.into(),
                    value: hook.clone(),
                    reason: format!(
                        "is not a lifecycle hook of group {:?} (it has {names:?})",
                        self.config.group_name
                    ),
                });
            }
        }
        Ok(())
    }

    /// One look at the world and what the planner makes of it, changing nothing: what the CLI's
    /// `status` and `plan` show.
    pub async fn look(&self) -> Result<(Observation, planner::Plan), Error> {
        let obs = self.observe(&Meter::default(), &mut None).await?;
        let plan = planner::assess(&obs, &self.config.settings);
        Ok((obs, plan))
    }

    /// `listed` keeps the bucket's listing across the observations of one invocation: only a
    /// step of ours changes it (taken, pruned), and polling must not list it every pause. A
    /// listing that fails (or a backup that failed) is kept too, as why the store is not used:
    /// membership goes on without it.
    async fn observe(&self, meter: &Meter, listed: &mut Listed) -> Result<Observation, Error> {
        meter.observations.fetch_add(1, Ordering::Relaxed);
        // Group, then parameters, then etcd: a config is written only after its member exists,
        // so a config seen here without its member means the member has since been removed.
        let GroupState {
            instances,
            desired_capacity,
        } = meter.aws(self.group.describe()).await?;
        let published = meter.aws(self.published.load()).await?;
        let topology = &self.config.settings.topology;
        let mut present: Vec<_> = instances.iter().filter(|i| i.state.is_present()).collect();
        present.sort_by(|a, b| (a.launched_at, &a.id).cmp(&(b.launched_at, &b.id)));
        let endpoints: Vec<String> = present
            .iter()
            .filter_map(|i| i.address.as_deref().map(|a| topology.client_url(a)))
            .collect();
        let expected = published.cluster.as_ref().and_then(|r| r.cluster_id);
        let cluster = meter.etcd(self.members.observe(&endpoints, expected)).await;
        let failed_at = *self.backup_failed_at.lock().unwrap();
        if let Some(at) = failed_at.filter(|at| at.elapsed() < BACKUP_RETRY_AFTER) {
            if self.backups.is_some() && listed.is_none() {
                *listed = Some(Err(format!(
                    "a backup failed {} s ago in this environment; backups wait {} s after a failure",
                    at.elapsed().as_secs(),
                    BACKUP_RETRY_AFTER.as_secs()
                )));
            }
        }
        if let (Some(b), None) = (&self.backups, listed.as_ref()) {
            *listed = Some(meter.aws(b.list()).await.map_err(|e| {
                tracing::error!(error = ?e, "the backup store cannot be listed: going on without backups this invocation");
                e.to_string()
            }));
        }
        let (backups, backups_failing) = match listed.as_ref().filter(|_| self.backups.is_some()) {
            Some(Ok(found)) => (found.clone(), None),
            Some(Err(why)) => (vec![], Some(why.clone())),
            None => (vec![], None),
        };
        Ok(Observation {
            instances,
            desired_capacity,
            cluster,
            published,
            backups,
            backups_failing,
            now: (self.clock)(),
        })
    }

    async fn reconcile(
        &self,
        trigger: String,
        hint: Option<&str>,
        deadline: Instant,
    ) -> Result<Response, Error> {
        let started = Instant::now();
        let meter = Meter::default();
        let stop_at = deadline
            .checked_sub(self.config.deadline_margin)
            .unwrap_or(started);
        // Waiting on slow steps and retrying failed ones both end here; applying steps goes on
        // until `stop_at`. A scheduled run never waits: it holds the one concurrency slot that
        // lifecycle events queue behind, and the next schedule looks again anyway.
        let budget = if hint.is_none() {
            Duration::ZERO
        } else {
            self.config.wait_budget
        };
        let patience_until = stop_at.min(started + budget);
        let mut steps = Vec::new();
        let mut failures = 0u32;
        let mut last_wait = None;
        let mut last_applied: Option<Step> = None;
        let mut listed: Listed = None;
        // Steps applied, refusals and errors by kind, for the metrics.
        let mut counts = Metrics::default();
        loop {
            let obs = self.observe(&meter, &mut listed).await?;
            if let Some(id) = hint.filter(|_| steps.is_empty() && failures == 0) {
                if obs.instance(id).is_none() {
                    let reason = format!("is not in group {:?}", self.config.group_name);
                    warn!(field = "EC2InstanceId", value = %event::shown(id), %reason, "event rejected");
                    return Ok(Response::Rejected {
                        field: "EC2InstanceId".into(),
                        value: event::shown(id),
                        reason,
                    });
                }
            }
            let plan = planner::assess(&obs, &self.config.settings);
            let mut step = plan.step;
            let same = |a: &Step| {
                (a.name(), a.instance(), a.member())
                    == (step.name(), step.instance(), step.member())
            };
            if last_applied.as_ref().is_some_and(same) {
                // Applied, yet still called for: what we observe has not caught up with it.
                step = Step::Wait(Wait::NotYetVisible {
                    step: step.name(),
                    instance: step.instance().map(str::to_string),
                });
            }
            let done =
                |waiting: Option<String>, meter: &Meter, steps: Vec<String>, counts: &Metrics| {
                    let stats = meter.stats(started.elapsed());
                    let mut metrics = Metrics::observed(&obs, &plan.waits);
                    metrics.0.extend(counts.0.clone());
                    if let Some(ca) = &self.ca {
                        metrics.ca_days_left(ca.not_after, obs.now);
                    }
                    let held_for_quorum = held_for_quorum(&plan.waits);
                    for w in &plan.waits {
                        if let Wait::LiveDataOverQuota { in_use, quota } = w {
                            tracing::error!(
                            in_use,
                            quota,
                            "NOSPACE: the live data alone fills the backend quota even with all \
                             history compacted and every member defragmented; the alarm stays \
                             until data is deleted (or members are replaced with a larger \
                             QUOTA_BACKEND_BYTES)"
                        );
                        }
                    }
                    for h in &held_for_quorum {
                        warn!(instance = %h.instance, member = %h.member, blocking = ?h.blocking,
                        "terminate hook held: removing this member now would cost quorum; \
                         the blocking members are down");
                    }
                    info!(%trigger, steps = steps.len(), ?stats, waiting, "invocation done");
                    Response::Reconciled {
                        trigger: trigger.clone(),
                        steps,
                        waiting,
                        held_for_quorum,
                        stats,
                        metrics,
                    }
                };
            let wait = match &step {
                Step::Idle => return Ok(done(None, &meter, steps, &counts)),
                Step::Wait(w) => Some(w.clone()),
                _ => None,
            };
            if let Some(wait) = wait {
                if last_wait.as_ref() != Some(&wait) {
                    log_decision(&step, "waiting");
                    last_wait = Some(wait.clone());
                }
                let patient =
                    wait.is_short() && Instant::now() + self.config.poll_interval <= patience_until;
                if !patient {
                    self.heartbeat(&obs, &wait, &meter).await?;
                    return Ok(done(Some(describe_wait(&wait)), &meter, steps, &counts));
                }
                meter.sleep(self.config.poll_interval).await;
                continue;
            }
            let applying = Instant::now();
            if matches!(step, Step::Backup { .. }) {
                // A snapshot can take long: every held hook gets its heartbeat before it.
                self.heartbeat_held(&obs, &meter).await;
            }
            // A snapshot gets half of what is left, so that a database too large to stream in
            // time never takes the membership work after it (the backup before a removal is
            // best-effort) and the invocation still ends with its heartbeats.
            let until = applying + stop_at.saturating_duration_since(applying) / 2;
            match self.apply(&step, &obs, &meter, until).await {
                Ok(outcome) => {
                    log_decision(&step, outcome);
                    counts.count(format!("StepsApplied.{}", step.name()));
                    if matches!(step, Step::Backup { .. } | Step::Prune { .. }) {
                        listed = None;
                        *self.backup_failed_at.lock().unwrap() = None;
                    }
                    // A defragmentation blocks its member while it runs: after a long one, give
                    // the clients a breather and leave the next member to a later invocation.
                    let long_defrag =
                        matches!(step, Step::Defragment { .. }) && applying.elapsed() > LONG_DEFRAG;
                    steps.push(describe(&step, outcome));
                    failures = 0;
                    last_wait = None;
                    if self.config.crash_after.as_deref() == Some(step.name()) {
                        // Test-only failpoint: die between two steps, as a timeout or OOM would.
                        tracing::error!(step = step.name(), "failpoint: aborting");
                        std::process::abort();
                    }
                    last_applied = Some(step);
                    if long_defrag {
                        steps.push("pause: the defragmentation took long".into());
                        let waiting = Some("maintenance-paused".into());
                        return Ok(done(waiting, &meter, steps, &counts));
                    }
                }
                // The store (or a snapshot) failing costs this invocation its backups, never its
                // membership work: the rules go on as if backups were off, and the next
                // invocation tries again. BackupFailed counts it (the BackupFailing alarm).
                Err(e) if matches!(step, Step::Backup { .. } | Step::Prune { .. }) => {
                    tracing::error!(step = step.name(), error = ?e, "backup store or snapshot failed: going on without backups this invocation");
                    if matches!(e, Error::OutOfTime { .. }) {
                        counts.count("BackupTimedOut");
                    }
                    listed = Some(Err(e.to_string()));
                    *self.backup_failed_at.lock().unwrap() = Some(Instant::now());
                    last_applied = None;
                    // Counted here too: an invocation that ends on its budget right after a
                    // slow failing snapshot reports no later observation.
                    counts.count("BackupFailed");
                }
                Err(e) if e.is_retryable() => {
                    failures += 1;
                    last_applied = None;
                    let pause = backoff(self.config.poll_interval, failures);
                    let not_yet = is_not_yet(&e);
                    match e.refusal() {
                        Some(r) => counts.count(format!("Refusals.{r:?}")),
                        None => counts.count(format!("Errors.{}", e.kind())),
                    }
                    if not_yet {
                        info!(step = step.name(), instance = step.instance(), refusal = ?e.refusal(), "etcd not ready for this step yet; observing again");
                    } else {
                        warn!(step = step.name(), instance = step.instance(), error = ?e, failures, "step failed; observing again");
                    }
                    if Instant::now() + pause > patience_until {
                        if !not_yet {
                            self.heartbeat_held(&obs, &meter).await;
                            return Err(e);
                        }
                        // "Not yet" is a wait, not a failure: keep every held hook alive and
                        // let the schedule look again.
                        let wait = Wait::Refused {
                            step: step.name(),
                            instance: step.instance().map(str::to_string),
                            refusal: format!("{:?}", e.refusal().unwrap_or(Refusal::Other)),
                        };
                        warn!(step = step.name(), instance = step.instance(), error = ?e, "etcd refuses this step for now; holding and waiting");
                        self.heartbeat(&obs, &wait, &meter).await?;
                        return Ok(done(Some(describe_wait(&wait)), &meter, steps, &counts));
                    }
                    meter.sleep(pause).await;
                }
                Err(e) => {
                    self.heartbeat_held(&obs, &meter).await;
                    return Err(e);
                }
            }
            if steps.len() >= MAX_STEPS || Instant::now() > stop_at {
                warn!(
                    steps = steps.len(),
                    "stopping with work left: step or time budget spent"
                );
                return Ok(done(Some("budget".into()), &meter, steps, &counts));
            }
        }
    }

    /// `until`: when a snapshot must stop (its upload then aborted).
    async fn apply(
        &self,
        step: &Step,
        obs: &Observation,
        meter: &Meter,
        until: Instant,
    ) -> Result<&'static str, Error> {
        let view = match &obs.cluster {
            ClusterState::Known(v) => Some(v),
            ClusterState::Unreachable { .. } => None,
        };
        let endpoint = |avoid: Option<MemberId>| -> Result<String, Error> {
            view.map(|v| endpoint_avoiding(v, avoid))
                .ok_or_else(|| Error::EtcdProtocol {
                    operation: step.name(),
                    detail: "no member answered this observation".into(),
                })
        };
        // etcd's "already so" answers are success for an idempotent step.
        let settled = |r: Result<(), Error>, done: Refusal, outcome, already| match r {
            Ok(()) => Ok(outcome),
            Err(e) if e.refusal() == Some(done) => Ok(already),
            Err(e) => Err(e),
        };
        let (members, published) = (&self.members, &self.published);
        match step {
            Step::CreateCluster(record) => {
                Ok(match meter.aws(published.create_cluster(record)).await? {
                    Created::Created => "created",
                    Created::AlreadyExists => "lost-race",
                })
            }
            Step::ReseedCluster { old, new } => {
                // A restored generation's new seed must be able to read the snapshot: it is
                // tagged for one instance, the seed that died.
                if let Some(restore) = &new.restored_from {
                    let store = self.backups.as_ref().ok_or_else(|| no_store(step))?;
                    meter
                        .aws(store.hand_over(&restore.snapshot.key, &new.seed))
                        .await?;
                }
                let r = meter.aws(published.replace_cluster(old, new)).await?;
                Ok(match r {
                    Created::Created => {
                        warn!(old_seed = %old.seed, new_seed = %new.seed, old_token = %old.token,
                            "the seed never served: cluster record replaced, bootstrapping anew");
                        "reseeded"
                    }
                    Created::AlreadyExists => "lost-race",
                })
            }
            Step::MarkServed(record) => {
                Ok(match meter.aws(published.mark_served(record)).await? {
                    Created::Created => "recorded",
                    Created::AlreadyExists => "lost-race",
                })
            }
            Step::NoteDown { instance, since } => {
                meter.aws(published.note_down(instance, *since)).await?;
                Ok("noted")
            }
            Step::ForgetDown { instance } => {
                meter.aws(published.forget_down(instance)).await?;
                Ok("forgotten")
            }
            Step::Replace { instance, why } => {
                match why {
                    Replacement::Down { member, down_secs } => warn!(%instance, %member, down_secs,
                        "etcd down too long on an in-service instance: marking it Unhealthy so the group replaces it"),
                    Replacement::OldGeneration { token } => warn!(%instance, old_token = %token,
                        "this instance survived a restore and serves the old generation: marking it Unhealthy so a fresh instance joins in its place"),
                    Replacement::CertificateExpiring { not_after } => info!(%instance, not_after,
                        "member certificate past two thirds of its life: marking the instance Unhealthy so a fresh one replaces it"),
                }
                meter.aws(self.group.set_unhealthy(instance)).await?;
                Ok("marked-unhealthy")
            }
            Step::Compact { revision } => {
                let r = meter
                    .etcd(members.compact(&endpoint(None)?, *revision))
                    .await?;
                if view.is_some_and(maintenance::nospace) {
                    warn!(
                        revision,
                        "NOSPACE: compacting all history up to the current revision"
                    );
                }
                Ok(match r {
                    Compacted::Now => "compacted",
                    Compacted::Already => "already-compacted",
                })
            }
            Step::Defragment { endpoint, .. } => {
                meter.etcd(members.defragment(endpoint)).await?;
                Ok("defragmented")
            }
            Step::Backup {
                member,
                endpoint,
                reason,
            } => {
                let store = self.backups.as_ref().ok_or_else(|| no_store(step))?;
                let (cluster_id, status) = match &obs.cluster {
                    ClusterState::Known(view) => (
                        view.cluster_id,
                        view.statuses.get(member).cloned().unwrap_or_default(),
                    ),
                    // The quorum is lost: a survivor answers for itself.
                    ClusterState::Unreachable { survivors, .. } => survivors
                        .iter()
                        .find(|s| s.member == *member)
                        .map(|s| (s.cluster_id, s.status.clone()))
                        .ok_or_else(|| Error::EtcdProtocol {
                            operation: "snapshot",
                            detail: format!("member {member} no longer answers"),
                        })?,
                };
                let facts = SnapshotFacts {
                    token: obs.published.cluster.as_ref().map_or_else(
                        || self.config.settings.cluster_name.clone(),
                        |r| r.token.clone(),
                    ),
                    revision: status.revision,
                    cluster_id,
                    member: member.to_string(),
                    etcd_version: status.version,
                    taken_at: obs.now,
                };
                let began = Instant::now();
                let snapshot = meter.etcd(members.snapshot(endpoint)).await?;
                let snapshot = Box::new(Bounded {
                    inner: snapshot,
                    until,
                    began,
                    streamed: 0,
                });
                let (backup, sha256) = meter.aws(store.store(snapshot, &facts)).await?;
                let secs = began.elapsed().as_secs_f64();
                let mib_per_s = backup.size as f64 / 1_048_576.0 / secs.max(0.001);
                info!(key = %backup.key, size = backup.size, %sha256, revision = backup.revision,
                    ?reason, elapsed_ms = (secs * 1000.0) as u64, mib_per_s = format!("{mib_per_s:.1}"),
                    "backup stored");
                Ok("stored")
            }
            Step::Prune { key } => {
                let store = self.backups.as_ref().ok_or_else(|| no_store(step))?;
                meter.aws(store.delete(key)).await?;
                Ok("pruned")
            }
            Step::Restore {
                old,
                seed,
                token,
                backup,
            } => {
                let store = self.backups.as_ref().ok_or_else(|| no_store(step))?;
                let snapshot = meter.aws(store.hand_over(&backup.key, seed)).await?;
                let new = ClusterRecord {
                    restored_from: Some(Restore {
                        snapshot,
                        previous_token: old.token.clone(),
                        previous_seed: old.seed.clone(),
                        previous_created_at: old.created_at,
                    }),
                    ..ClusterRecord::bootstrapping(token.clone(), seed.clone(), obs.now)
                };
                match meter.aws(published.restore_cluster(old, &new)).await? {
                    Created::Created => {
                        tracing::error!(
                            snapshot = %backup.key,
                            revision = backup.revision,
                            snapshot_age_secs = obs.now - backup.taken_at,
                            old_token = %old.token,
                            new_token = %token,
                            %seed,
                            "the cluster is lost for good: restoring it from a backup; writes \
                             newer than the snapshot (up to its age at the loss) are lost"
                        );
                        Ok("restoring")
                    }
                    Created::AlreadyExists => Ok("lost-race"),
                }
            }
            Step::Disarm(alarm) => {
                meter.etcd(members.disarm(&endpoint(None)?, alarm)).await?;
                Ok("disarmed")
            }
            Step::EnableAuth => {
                meter.etcd(members.enable_auth(&endpoint(None)?)).await?;
                info!("etcd authentication on: clients need a certificate naming a user with a role (etcd-asg client-cert USER --prefix P); the function acts as root");
                Ok("auth-enabled")
            }
            Step::Publish { instance, config } => {
                // Its certificate first: the boot script fetches it once the config is there.
                // Issued once: a config published again (a replay, a seed's rewrite) finds its
                // bundle in place, and a key is not generated only to be thrown away.
                let bundled = obs.published.cert_not_after.contains_key(instance);
                if let Some(pki) = self.config.pki.as_ref().filter(|_| !bundled) {
                    let ca = self.ca.as_ref().ok_or_else(|| Error::Pki {
                        what: "issuing a member certificate",
                        detail: "TLS=managed but no CA was loaded at cold start".into(),
                    })?;
                    let address = obs
                        .instance(instance)
                        .and_then(|i| i.address.as_deref())
                        .ok_or_else(|| Error::Pki {
                            what: "issuing a member certificate",
                            detail: format!("{instance} has no address"),
                        })?;
                    let issued = ca.issue_member(
                        instance,
                        address,
                        &pki.extra_sans,
                        pki.member_cert_secs,
                        obs.now,
                    )?;
                    if meter
                        .aws(published.hand_out(instance, &issued.bundle(ca), issued.not_after))
                        .await?
                        == Created::Created
                    {
                        info!(%instance, not_after = issued.not_after, "member certificate issued");
                    }
                }
                meter.aws(published.publish(instance, config)).await?;
                Ok("published")
            }
            // "Peer URLs already exist" is not success: the URL may be a dead member's whose
            // address this instance reuses. The next observation tells which.
            Step::AddLearner { peer_url, .. } => {
                meter
                    .etcd(members.add_learner(&endpoint(None)?, peer_url))
                    .await?;
                Ok("added")
            }
            Step::Promote { member, .. } => {
                // To the leader: a follower forwards a promote without the caller's token, which
                // the leader refuses once authentication is on, until the call times out
                // (etcd-io/etcd#20757; fixed in 3.5 and 3.6 in 2026, never in 3.4).
                let leader = view.and_then(|v| v.member(v.leader?)?.client_urls.first().cloned());
                let at = leader.map_or_else(|| endpoint(None), Ok)?;
                let r = meter.etcd(members.promote(&at, *member)).await;
                settled(r, Refusal::NotALearner, "promoted", "already-voter")
            }
            Step::TransferLeadership {
                to,
                leader_endpoint,
                ..
            } => {
                meter
                    .etcd(members.transfer_leadership(leader_endpoint, *to))
                    .await?;
                Ok("transferred")
            }
            Step::RemoveMember { member, .. } => {
                let r = meter
                    .etcd(members.remove(&endpoint(Some(*member))?, *member))
                    .await;
                settled(r, Refusal::MemberNotFound, "removed", "already-removed")
            }
            Step::Unpublish { instance } => {
                // The key material first: once the config is gone nothing plans this again.
                if self.config.pki.is_some() {
                    meter.aws(published.take_back(instance)).await?;
                }
                meter.aws(published.unpublish(instance)).await?;
                Ok("unpublished")
            }
            Step::Complete {
                instance,
                transition,
                result,
            } => {
                let done = meter
                    .aws(self.lifecycle.complete(instance, *transition, *result))
                    .await?;
                Ok(match done {
                    Completion::Done => "completed",
                    Completion::NotPending => "already-completed",
                })
            }
            Step::Wait(_) | Step::Idle => Ok("nothing"),
        }
    }

    /// Heartbeats every held hook on the way out of a failure, or before a long step: failing
    /// to is logged, never the invocation's outcome.
    async fn heartbeat_held(&self, obs: &Observation, meter: &Meter) {
        for (instance, transition) in planner::held(obs) {
            match meter
                .aws(self.lifecycle.heartbeat(&instance, transition))
                .await
            {
                Ok(c) => info!(%instance, %transition, completion = ?c, "lifecycle heartbeat"),
                Err(e) => warn!(%instance, %transition, error = ?e, "lifecycle heartbeat failed"),
            }
        }
    }

    /// While work waits on something slow, keep the held instances' hooks from timing out. When
    /// the cluster is unreachable, only the terminating instances of voters an answering member
    /// lists: every other hook's default result is then the right end.
    async fn heartbeat(&self, obs: &Observation, wait: &Wait, meter: &Meter) -> Result<(), Error> {
        if matches!(wait, Wait::ClusterUnreachable { .. }) {
            // No quorum: only a voter's instance that is terminating is held, so that no disk
            // that may hold acknowledged writes is destroyed on a guess (up to the hook's global
            // timeout). Launches are left to their timeout: they hold no data.
            for instance in planner::held_while_unreachable(obs) {
                let c = meter
                    .aws(self.lifecycle.heartbeat(&instance, Transition::Terminate))
                    .await?;
                warn!(%instance, completion = ?c, "terminate hook held while the cluster is unreachable: an answering member lists this instance's member as a voter, whose data may be the newest");
            }
            return Ok(());
        }
        for (instance, transition) in planner::held(obs) {
            let c = meter
                .aws(self.lifecycle.heartbeat(&instance, transition))
                .await?;
            info!(%instance, %transition, completion = ?c, "lifecycle heartbeat");
        }
        Ok(())
    }
}

fn no_store(step: &Step) -> Error {
    Error::Config {
        var: "BACKUP_BUCKET".into(),
        value: String::new(),
        reason: format!("is needed for {} (backups are off)", step.name()),
    }
}

/// Membership calls go to a voter that answered; not to the member being removed when another
/// healthy voter can take the call.
fn endpoint_avoiding(view: &ClusterView, avoid: Option<MemberId>) -> String {
    let answering_is_avoided = avoid
        .and_then(|id| view.member(id))
        .is_some_and(|m| m.client_urls.contains(&view.endpoint));
    if !answering_is_avoided {
        return view.endpoint.clone();
    }
    view.voters()
        .filter(|m| Some(m.id) != avoid && view.healthy.contains(&m.id))
        .find_map(|m| m.client_urls.first().cloned())
        .unwrap_or_else(|| view.endpoint.clone())
}

/// Refusals that only mean "not yet": a learner catching up, etcd's 5 s connectivity rule after a
/// membership change or a member down, the one learner slot taken, an election under way, too
/// few started members, a peer URL still held by a member about to be removed.
fn is_not_yet(e: &Error) -> bool {
    matches!(
        e.refusal(),
        Some(
            Refusal::LearnerNotInSync
                | Refusal::UnhealthyCluster
                | Refusal::TooManyLearners
                | Refusal::NoLeader
                | Refusal::NotEnoughStartedMembers
                | Refusal::PeerUrlExists
        )
    )
}

fn held_for_quorum(waits: &[Wait]) -> Vec<HeldTermination> {
    waits
        .iter()
        .filter_map(|w| match w {
            Wait::QuorumGuard {
                member,
                instance: Some(instance),
                blocking,
            } => Some(HeldTermination {
                instance: instance.clone(),
                member: member.to_string(),
                blocking: blocking.iter().map(ToString::to_string).collect(),
            }),
            _ => None,
        })
        .collect()
}

/// What a response says it waits on: the wait's kind, then its instance and member.
fn describe_wait(w: &Wait) -> String {
    let mut s = w.name().to_string();
    if let Some(i) = w.instance() {
        s += &format!(" {i}");
    }
    if let Some(m) = w.member() {
        s += &format!(" member {m}");
    }
    match w {
        Wait::Refused { step, refusal, .. } => s + &format!(" ({step}: {refusal})"),
        Wait::ClusterUnreachable { detail } => s + &format!(": {detail}"),
        _ => s,
    }
}

/// A snapshot stream that ends in `Error::OutOfTime` at `until`: the store aborts its upload
/// (nothing half-stored) and the invocation goes on without the backup. A chunk that never comes
/// is cut off too, not only a slow total.
struct Bounded {
    inner: crate::ports::Snapshot,
    until: Instant,
    began: Instant,
    streamed: u64,
}

impl crate::ports::SnapshotStream for Bounded {
    fn next_chunk(&mut self) -> crate::ports::NextChunk<'_> {
        Box::pin(async move {
            let until = tokio::time::Instant::from_std(self.until);
            match tokio::time::timeout_at(until, self.inner.next_chunk()).await {
                Ok(Ok(Some(chunk))) => {
                    self.streamed += chunk.len() as u64;
                    Ok(Some(chunk))
                }
                Ok(other) => other,
                Err(_) => Err(Error::OutOfTime {
                    what: "snapshot",
                    detail: format!(
                        "{:.1} MiB streamed in {:.1} s, the half of the invocation a snapshot may \
                         take; a database this large needs more CPU (the function's memory \
                         size) or time (its timeout)",
                        self.streamed as f64 / 1_048_576.0,
                        self.began.elapsed().as_secs_f64()
                    ),
                }),
            }
        })
    }
}

fn backoff(base: Duration, failures: u32) -> Duration {
    let exp = base.saturating_mul(1 << failures.min(5));
    let capped = exp.min(Duration::from_secs(20));
    // Full jitter: racing invocations should not retry in lockstep.
    capped.mul_f64(0.5 + fastrand::f64() * 0.5)
}

fn log_decision(step: &Step, outcome: &str) {
    info!(
        step = step.name(),
        instance = step.instance(),
        member = step.member().map(|m| m.to_string()),
        outcome,
        detail = ?step,
        "decision"
    );
}

fn describe(step: &Step, outcome: &str) -> String {
    let mut s = step.name().to_string();
    if let Some(i) = step.instance() {
        s += &format!(" {i}");
    }
    if let Some(m) = step.member() {
        s += &format!(" member {m}");
    }
    if let Step::Complete { result, .. } = step {
        s += &format!(" {}", result.as_str());
    }
    s + &format!(": {outcome}")
}

#[cfg(test)]
mod tests;
