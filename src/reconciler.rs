//! The handler: validate the event, then observe → plan → apply until nothing is left to do or
//! the invocation's time is up. Every step looks before it acts, so replays are no-ops.
//!
//! One invocation's state is an `Invocation` (`invocation.rs`); applying a step is its
//! translation into port calls (`apply.rs`). What to do next is always the planner's.

mod apply;
mod heartbeats;
mod invocation;

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use serde_json::Value;
use tracing::{info, warn, Instrument};

use crate::config::Config;
use crate::error::{Class, Error};
use crate::event::{self, Expected, Trigger};
use crate::model::{Observation, Timestamp, Transition};
use crate::planner::{self, Plan, Step, Wait};
use crate::ports::{Backups, Group, Lifecycle, Members, NoBackups, PublishedConfig, Secrets};

pub use heartbeats::Keeper;
pub use invocation::{HeldTermination, Response, Stats};
use invocation::{Invocation, Listed, Meter, Next, Seen};

/// Steps one invocation applies at most: a bound on a plan that would not converge.
const MAX_STEPS: usize = 64;
/// A defragmentation longer than this ends the invocation's maintenance.
const LONG_DEFRAG: Duration = Duration::from_secs(5);
/// The heartbeats on the way out of an invocation end this long before its deadline.
const EXIT_RESERVE: Duration = Duration::from_millis(250);
/// Every other call ends this long before the deadline (`DEADLINE_MARGIN_MS` is when no step
/// starts any more; a call begun before it may run into it, never past this).
const CALL_RESERVE: Duration = Duration::from_millis(1000);
/// While a step runs or the invocation pauses, the heartbeats that fall due go out at once:
/// checked this often.
const BEAT_CHECK: Duration = Duration::from_secs(1);

pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64)
    })
}

pub struct Reconciler<G, L, P, M, B = NoBackups> {
    pub group: G,
    pub lifecycle: L,
    pub published: P,
    pub members: M,
    /// The backup store; None when backups are off.
    pub backups: Option<B>,
    /// TLS=managed: the cluster's CA, read or created by this environment's first invocation
    /// (`prepare`); it signs member certificates as members join.
    pub ca: OnceLock<crate::pki::Ca>,
    /// Whether this environment is prepared (`prepare`).
    pub prepared: tokio::sync::OnceCell<()>,
    pub config: Config,
    pub clock: Clock,
    /// When a backup step last failed in this (warm) environment: backups wait
    /// `BACKUP_RETRY_AFTER` after it, so that a snapshot that cannot finish in time, or a store
    /// that fails, costs one invocation's attempt and not every invocation's membership work (a
    /// removal that wants a fresh snapshot then goes without it).
    pub backup_failed_at: std::sync::Mutex<Option<Instant>>,
    /// What the heartbeats of held hooks need, kept for the environment (`heartbeats`).
    pub hooks: Keeper,
}

/// How long backups wait after a backup step failed in this environment.
const BACKUP_RETRY_AFTER: Duration = Duration::from_secs(120);

/// How one pass of the loop ended.
enum Pass {
    Again,
    Done(Option<String>),
}

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
                Box::pin(self.invocation("schedule".into(), None, deadline)).await
            }
            Ok(Trigger::Lifecycle {
                transition,
                instance,
                warm_pool,
                ..
            }) => {
                let pool = if warm_pool { " (warm pool)" } else { "" };
                let trigger = format!("{transition} {instance}{pool}");
                Box::pin(self.invocation(trigger, Some(&instance), deadline)).await
            }
        }
    }

    /// A reconciling invocation, guarded: the held hooks are heartbeated first, from the group
    /// alone (`reconcile`), and again on the way out whatever ended it: a failure, its deadline
    /// (less the margin), a panic. A heartbeat that failed fails the invocation when nothing
    /// else did: Lambda's retries of an event, and the next schedule, try again.
    async fn invocation(
        &self,
        trigger: String,
        hint: Option<&str>,
        deadline: Instant,
    ) -> Result<Response, Error> {
        let budget = match hint {
            None => Duration::ZERO,
            Some(_) => self.config.timing.wait_budget,
        };
        let stop_at = deadline
            .checked_sub(self.config.timing.deadline_margin)
            .unwrap_or_else(Instant::now);
        // Never before `stop_at`: with a margin under a second, calls end at it.
        let reserve = CALL_RESERVE.min(self.config.timing.deadline_margin);
        let calls_until = deadline.checked_sub(reserve).unwrap_or_else(Instant::now);
        let mut inv = Invocation::new(trigger, stop_at, budget, calls_until);
        // Every call is bounded already (`Meter`): this ends what is left of the work between.
        let until = tokio::time::Instant::from_std(calls_until.max(Instant::now()));
        let run = AssertUnwindSafe(self.reconcile(&mut inv, hint)).catch_unwind();
        let outcome = match tokio::time::timeout_at(until, run).await {
            Ok(Ok(result)) => result,
            Ok(Err(panic)) => Err(Error::Panicked {
                detail: panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default(),
            }),
            Err(_) => Err(Error::OutOfTime {
                what: "the invocation",
                detail: "its deadline, less DEADLINE_MARGIN_MS, passed".into(),
            }),
        };
        // On the way out, whatever ended it: what is due (a heartbeat that failed, a long
        // invocation), with the time the margin keeps for it.
        let exit = deadline
            .checked_sub(EXIT_RESERVE)
            .unwrap_or_else(Instant::now)
            .max(Instant::now() + EXIT_RESERVE);
        let failed = self
            .hooks
            .keep_alive(&self.lifecycle, &inv.meter, Some(exit));
        inv.beats_failed.extend(failed.await);
        match outcome {
            Ok(response) if !inv.beats_failed.is_empty() => {
                warn!(
                    failed = inv.beats_failed.len(),
                    ?response,
                    "heartbeats failed: the invocation fails so that it is tried again"
                );
                Err(inv.beats_failed.swap_remove(0))
            }
            outcome => outcome,
        }
    }

    /// What an environment needs AWS for before its first observation, done by its first
    /// invocation rather than at cold start (which then makes no call at all): the group's hooks
    /// exist, and with TLS=managed the cluster's CA and token key are read (or created) and the
    /// etcd client presents the function's certificate. A failure fails that invocation
    /// (`Fatal.Config` for a missing hook) and the next one tries again.
    pub async fn prepare(&self) -> Result<(), Error> {
        self.prepared
            .get_or_try_init(|| async {
                self.check_hooks().await?;
                self.refuse_warm_pool().await
            })
            .await?;
        self.identify().await
    }

    /// TLS=managed: the cluster's CA and token key, read (or created), and the etcd client
    /// presenting the function's certificate; with ADOPT_ENDPOINTS, the adopted cluster's root
    /// password where the operator stored one. What the CLI needs before it observes. Each
    /// invocation: done once, it costs nothing.
    pub async fn identify(&self) -> Result<(), Error> {
        self.adopted_root_password().await?;
        if self.config.pki.is_none() {
            return Ok(());
        }
        let ca = match self.ca.get() {
            Some(ca) => ca,
            None => {
                let name = &self.config.settings.cluster_name;
                // A cluster adopted over TLS: its own CA, imported by the operator (`etcd-asg
                // adopt-secrets`); one of our own would be trusted by none of its members.
                let adopt_tls = self
                    .config
                    .settings
                    .adopt
                    .iter()
                    .any(|u| u.starts_with("https://"));
                match cluster_ca(&self.published, name, (self.clock)(), !adopt_tls).await? {
                    Some(ca) => self.ca.get_or_init(|| ca),
                    None => {
                        tracing::error!(
                            "ADOPT_ENDPOINTS names a cluster with TLS, and its CA is not imported \
                             yet: etcd-asg adopt-secrets --ca-cert FILE --ca-key FILE (docs/adopting.md)"
                        );
                        return Ok(());
                    }
                }
            }
        };
        self.members.identify(ca)
    }

    /// An adopted cluster's root password, if the operator stored one, handed to the etcd
    /// client: while ADOPT_ENDPOINTS is set, and with TLS=off for good (a plain-HTTP cluster
    /// adopted with authentication on has no root but by it: the function signs tokens only
    /// with TLS=managed). Read each invocation (one parameter): a password corrected by the
    /// operator is used at once, by warm environments too. Not read: a WARN, and the invocation
    /// goes on (heartbeats need nothing of it).
    async fn adopted_root_password(&self) -> Result<(), Error> {
        let adopt = &self.config.settings.adopt;
        if adopt.is_empty() && self.config.pki.is_some() {
            return Ok(());
        }
        match self.published.load_root_password().await {
            Ok(Some(password)) => self.members.use_root_password(password, adopt),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "the adopted cluster's root password not read"),
        }
        Ok(())
    }

    /// Warm pools are not supported: Auto Scaling stops an instance as soon as it launches into
    /// the pool, without waiting for its user data, and cloud-init runs user data only at the
    /// first boot; the launch hook pauses it twice, and with ReuseOnScaleIn a member's instance
    /// goes back into the pool with its data
    /// (<https://docs.aws.amazon.com/autoscaling/ec2/userguide/warm-pool-instance-lifecycle.html>).
    /// A group that has one fails every invocation (`Fatal.Config`) until the pool is deleted.
    pub async fn refuse_warm_pool(&self) -> Result<(), Error> {
        if !self.group.has_warm_pool().await? {
            return Ok(());
        }
        Err(Error::Config {
            var: "ASG_NAME".into(),
            value: self.config.group_name.clone(),
            reason: "has a warm pool, which etcd-asg-lifecycle does not support (a warm instance is stopped before its boot script runs, and one reused on scale-in keeps a removed member's data): delete it (aws autoscaling delete-warm-pool --auto-scaling-group-name <group> --force-delete)".into(),
        })
    }

    /// Both hooks must exist on the group, or no instance would ever be held for us (and every
    /// event would be for nothing).
    pub async fn check_hooks(&self) -> Result<(), Error> {
        let hooks = self.lifecycle.hooks().await?;
        let names: Vec<&String> = hooks.iter().map(|h| &h.name).collect();
        let mut timeouts = std::collections::BTreeMap::new();
        for (var, hook, transition) in [
            (
                "LAUNCH_HOOK_NAME",
                &self.config.launch_hook,
                Transition::Launch,
            ),
            (
                "TERMINATE_HOOK_NAME",
                &self.config.terminate_hook,
                Transition::Terminate,
            ),
        ] {
            if let Some(h) = hooks.iter().find(|h| &h.name == hook) {
                timeouts.insert(transition, h.heartbeat_timeout);
            } else {
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
        let _ = self.hooks.timeouts.set(timeouts);
        Ok(())
    }

    /// One look at the world and what the planner makes of it, changing nothing: what the CLI's
    /// `status` and `plan` show.
    pub async fn look(&self) -> Result<(Observation, planner::Plan), Error> {
        let obs = self
            .observe(&Meter::default(), &mut Seen::default(), None)
            .await?;
        let plan = planner::assess(&obs, &self.config.settings);
        Ok((obs, plan))
    }

    /// Group, then parameters, then etcd: a config is written only after its member exists, so a
    /// config seen here without its member means the member has since been removed. etcd is
    /// asked every time; AWS only for what this invocation has not `seen` (or no longer trusts).
    /// With `beats` (an invocation's; not the CLI's look), the held hooks that are due are
    /// heartbeated right after the group is read, before anything else can fail, and their
    /// failures go there. EC2 failing for some instances leaves them the address they were
    /// published with (`GroupState::with_published_addresses`), never a failed observation.
    /// A listing of the bucket that fails, or a backup that failed in this environment lately,
    /// is why the store is not used: membership goes on without it.
    async fn observe(
        &self,
        meter: &Meter,
        seen: &mut Seen,
        beats: Option<&mut Vec<Error>>,
    ) -> Result<Observation, Error> {
        meter.observations.fetch_add(1, Ordering::Relaxed);
        seen.forget_stale_group();
        if seen.group.is_none() {
            let listed = match seen.listed.take() {
                Some(listed) => listed,
                None => meter.aws(self.group.list()).await?,
            };
            if let Some(beats) = beats {
                self.hooks.listed(&listed);
                let due = self.hooks.keep_alive(&self.lifecycle, meter, meter.bound());
                beats.extend(due.await);
            }
            let located = meter.aws(async { Ok(self.group.locate(listed).await) });
            seen.group = Some((located.await?, Instant::now()));
        } else if let Some(beats) = beats {
            let due = self.hooks.keep_alive(&self.lifecycle, meter, meter.bound());
            beats.extend(due.await);
        }
        if seen.published.is_none() {
            let published = meter.aws(self.published.load()).await?;
            self.adopted_or_not(&published);
            seen.published = Some(published);
        }
        let (group, published) = match (&seen.group, &seen.published) {
            (Some((group, _)), Some(published)) => (group.clone(), published.clone()),
            _ => unreachable!("both read above"),
        };
        let group = group.with_published_addresses(&published);
        let topology = &self.config.settings.topology;
        let mut present: Vec<_> = group
            .instances
            .iter()
            .filter(|i| i.state.is_present())
            .collect();
        present.sort_by(|a, b| (a.launched_at, &a.id).cmp(&(b.launched_at, &b.id)));
        let mut endpoints: Vec<String> = present
            .iter()
            .filter_map(|i| i.address.as_deref().map(|a| topology.client_url(a)))
            .collect();
        // A cluster to adopt, or being adopted, answers at its own endpoints too.
        let adopting = published
            .cluster
            .as_ref()
            .is_none_or(|r| r.adopting.is_some());
        if adopting {
            endpoints.extend(self.config.settings.adopt.iter().cloned());
        }
        let expected = published.cluster.as_ref().and_then(|r| r.cluster_id);
        let cluster = meter
            .cluster(self.members.observe(&endpoints, expected))
            .await?;
        let (listing, backups_failing) = self.backups(meter, &mut seen.backups).await;
        Ok(Observation {
            instances: group.instances,
            desired_capacity: group.desired_capacity,
            undescribed: group.undescribed,
            zones: group.zones,
            suspended: group.suspended,
            cluster,
            published,
            backups: listing.complete,
            incomplete_backups: listing.incomplete,
            backups_failing,
            now: (self.clock)(),
        })
    }

    /// ADOPT_ENDPOINTS set on a stack whose cluster was not adopted (it started its own first:
    /// deployed without it, then updated): the endpoints are ignored, and clients given both
    /// would write to two clusters. Said on every invocation until one or the other is changed.
    fn adopted_or_not(&self, published: &crate::model::PublishedState) {
        let Some(record) = published.cluster.as_ref() else {
            return;
        };
        let adopted = record.adopting.is_some() || record.token.contains("-adopted-");
        if !self.config.settings.adopt.is_empty() && !adopted {
            tracing::error!(
                token = %record.token,
                "ADOPT_ENDPOINTS is set, but this stack's cluster was not adopted (it started its \
                 own before): the endpoints are ignored; two clusters run, keep their clients apart"
            );
        }
    }

    /// The backups, or why the store is not used this invocation.
    async fn backups(
        &self,
        meter: &Meter,
        listed: &mut Listed,
    ) -> (crate::model::BackupListing, Option<String>) {
        let Some(store) = &self.backups else {
            return Default::default();
        };
        let failed_at = *self.backup_failed_at.lock().unwrap();
        if let Some(at) = failed_at.filter(|at| at.elapsed() < BACKUP_RETRY_AFTER) {
            if listed.is_none() {
                *listed = Some(Err(format!(
                    "a backup failed {} s ago in this environment; backups wait {} s after a failure",
                    at.elapsed().as_secs(),
                    BACKUP_RETRY_AFTER.as_secs()
                )));
            }
        }
        if listed.is_none() {
            *listed = Some(meter.aws(store.list()).await.map_err(|e| {
                tracing::error!(error = ?e, "the backup store cannot be listed: going on without backups this invocation");
                e.to_string()
            }));
        }
        match listed {
            Some(Ok(found)) => (found.clone(), None),
            Some(Err(why)) => (Default::default(), Some(why.clone())),
            None => Default::default(),
        }
    }

    /// The group first, and every held hook that is due heartbeated from it alone; then the
    /// environment prepared; then observe, plan and apply until nothing is left, the wait budget
    /// is spent or the deadline nears. A scheduled run (no `hint`) never waits: it holds the one
    /// concurrency slot that lifecycle events queue behind, and the next schedule looks again.
    async fn reconcile(&self, inv: &mut Invocation, hint: Option<&str>) -> Result<Response, Error> {
        let listed = inv.meter.aws(self.group.list()).await?;
        self.hooks.listed(&listed);
        let due = self
            .hooks
            .keep_alive(&self.lifecycle, &inv.meter, inv.meter.bound());
        inv.beats_failed.extend(due.await);
        inv.seen.listed = Some(listed);
        // Boxed, as the handler: the SDK's futures nest deep.
        Box::pin(self.prepare()).await?;
        loop {
            let beats = Some(&mut inv.beats_failed);
            let obs = match self.observe(&inv.meter, &mut inv.seen, beats).await {
                Ok(obs) => obs,
                Err(e) => {
                    // A throttled or failing dependency: observed again while the invocation
                    // may wait (a lifecycle event's budget), not a minute later.
                    let poll = self.config.timing.poll_interval;
                    let pause = inv.retry_observation(e, poll)?;
                    self.pause(inv, pause).await;
                    continue;
                }
            };
            if let Some(id) = hint.filter(|_| inv.steps.is_empty() && inv.failures == 0) {
                if obs.instance(id).is_none() {
                    return Ok(self.not_in_group(id));
                }
            }
            let plan = planner::assess(&obs, &self.config.settings);
            let step = inv.not_again(plan.step.clone());
            self.hooks.planned(&obs, &step);
            let pass = match &step {
                Step::Idle => Pass::Done(None),
                Step::Wait(w) => self.wait(inv, &obs, w, &plan.waits).await,
                _ => self.step(inv, &obs, step).await?,
            };
            match pass {
                Pass::Done(waiting) => return Ok(self.finish(inv, &obs, &plan, waiting)),
                Pass::Again if inv.steps.len() >= MAX_STEPS || Instant::now() > inv.stop_at => {
                    warn!(
                        steps = inv.steps.len(),
                        "stopping with work left: step or time budget spent"
                    );
                    return Ok(self.finish(inv, &obs, &plan, Some("budget".into())));
                }
                Pass::Again => {}
            }
        }
    }

    /// `work` (a step, a pause), with the heartbeats that fall due meanwhile sent as they do;
    /// their failures go to `failed`.
    async fn beating<T>(
        &self,
        meter: &Meter,
        failed: &mut Vec<Error>,
        work: impl std::future::Future<Output = T>,
    ) -> T {
        // Polled together: a heartbeat that waits on a slow Auto Scaling never stalls the work.
        let failures = std::sync::Mutex::new(Vec::new());
        let ticker = async {
            let mut tick = tokio::time::interval(BEAT_CHECK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let due = self
                    .hooks
                    .keep_alive_paced(&self.lifecycle, meter, meter.bound());
                let f = due.await;
                failures.lock().unwrap_or_else(|e| e.into_inner()).extend(f);
            }
        };
        tokio::pin!(work);
        tokio::pin!(ticker);
        let out = tokio::select! {
            out = &mut work => out,
            never = &mut ticker => never,
        };
        failed.extend(std::mem::take(
            &mut *failures.lock().unwrap_or_else(|e| e.into_inner()),
        ));
        out
    }

    /// A pause of the invocation (a poll, a retry's backoff), heartbeating what falls due.
    async fn pause(&self, inv: &mut Invocation, pause: Duration) {
        let (meter, failed) = (&inv.meter, &mut inv.beats_failed);
        self.beating(meter, failed, meter.sleep(pause)).await;
    }

    fn finish(
        &self,
        inv: &Invocation,
        obs: &Observation,
        plan: &Plan,
        waiting: Option<String>,
    ) -> Response {
        inv.finish(obs, plan, waiting, self.ca.get().map(|ca| ca.not_after))
    }

    /// A lifecycle event for an instance the group does not list.
    fn not_in_group(&self, id: &str) -> Response {
        let reason = format!("is not in group {:?}", self.config.group_name);
        warn!(field = "EC2InstanceId", value = %event::shown(id), %reason, "event rejected");
        Response::Rejected {
            field: "EC2InstanceId".into(),
            value: event::shown(id),
            reason,
        }
    }

    /// A wait: polled while it is short and there is time, else left (its held hooks are
    /// heartbeated on the way out, `invocation`).
    async fn wait(&self, inv: &mut Invocation, obs: &Observation, w: &Wait, all: &[Wait]) -> Pass {
        if inv.last_wait.as_ref() != Some(w) {
            // Every other wait found on the way too: the one reported may not be what holds.
            let also: Vec<String> = all
                .iter()
                .filter(|o| *o != w)
                .map(|o| o.to_string())
                .collect();
            info!(wait = %w, why = %w.why(), detail = ?w, also = ?also, "waiting");
            inv.last_wait = Some(w.clone());
        }
        if inv.patient(w, self.config.timing.poll_interval) {
            self.pause(inv, self.config.timing.poll_interval).await;
            inv.seen.polling(w);
            return Pass::Again;
        }
        report_holds(obs, w);
        Pass::Done(Some(w.to_string()))
    }

    /// One step applied, under a span naming it, with the heartbeats that fall due meanwhile
    /// (a snapshot takes long): success, "already done", or what its failure means
    /// (`Invocation::after_error`).
    async fn step(
        &self,
        inv: &mut Invocation,
        obs: &Observation,
        step: Step,
    ) -> Result<Pass, Error> {
        let span = tracing::info_span!("step", step = %step);
        let applying = Instant::now();
        // A snapshot gets half of what is left, so that a database too large to stream in time
        // never takes the membership work after it (the backup before a removal is best-effort)
        // and the invocation still ends with its heartbeats.
        let until = applying + inv.stop_at.saturating_duration_since(applying) / 2;
        let applied = self.apply(&step, &inv.meter, obs.now, until);
        let applied = applied.instrument(span.clone());
        let applied = self
            .beating(&inv.meter, &mut inv.beats_failed, applied)
            .await;
        let (outcome, written) = match applied {
            Ok(done) => done,
            Err(e) if e.class() == Class::AlreadyDone => ("already-done", None),
            Err(e) => {
                let next =
                    span.in_scope(|| inv.after_error(&step, e, self.config.timing.poll_interval));
                return self.after_error(inv, obs, next).instrument(span).await;
            }
        };
        span.in_scope(|| info!(outcome, why = %step.why(), detail = ?step, "decision"));
        if matches!(step, Step::Backup { .. } | Step::Prune { .. }) {
            *self.backup_failed_at.lock().unwrap() = None;
        }
        if self.config.crash_after.as_deref() == Some(step.name()) {
            // Test-only failpoint: die between two steps, as a timeout or OOM would.
            tracing::error!(step = step.name(), "failpoint: aborting");
            std::process::abort();
        }
        // A defragmentation blocks its member while it runs: after a long one, give the
        // clients a breather and leave the next member to a later invocation.
        let long_defrag =
            matches!(step, Step::Defragment { .. }) && applying.elapsed() > LONG_DEFRAG;
        inv.applied(step, outcome, written, obs.now);
        if long_defrag {
            inv.steps
                .push("pause: the defragmentation took long".into());
            return Ok(Pass::Done(Some("maintenance-paused".into())));
        }
        Ok(Pass::Again)
    }

    async fn after_error(
        &self,
        inv: &mut Invocation,
        obs: &Observation,
        next: Next,
    ) -> Result<Pass, Error> {
        match next {
            Next::Retry(pause) => {
                self.pause(inv, pause).await;
                Ok(Pass::Again)
            }
            Next::WithoutBackups => {
                *self.backup_failed_at.lock().unwrap() = Some(Instant::now());
                Ok(Pass::Again)
            }
            Next::Wait(w) => {
                report_holds(obs, &w);
                Ok(Pass::Done(Some(w.to_string())))
            }
            Next::Fail(e) => Err(e),
        }
    }
}

/// The terminations a wait holds only because the cluster is unreachable, each its own line on
/// every invocation that holds it.
fn report_holds(obs: &Observation, wait: &Wait) {
    for hold in planner::holds(obs, wait) {
        if hold.while_unreachable {
            warn!(instance = %hold.instance, "terminate hook held while the cluster is unreachable: its member may hold the newest writes (an answering member lists it as a voter, or none answers and it has this generation's config); it goes once it answers, or when an operator completes its lifecycle action");
        }
    }
}

/// TLS=managed: the cluster's CA and its token key, each created (create-only) if there is none
/// yet; the CA only if `create` (None: there is none, and it is not ours to make). The CA's
/// remaining life is logged each time.
pub async fn cluster_ca(
    secrets: &impl Secrets,
    cluster: &str,
    now: Timestamp,
    create: bool,
) -> Result<Option<crate::pki::Ca>, Error> {
    if !create && secrets.load_ca().await?.is_none() {
        return Ok(None);
    }
    let mut ca = load_or_create(
        "CA",
        async || secrets.load_ca().await,
        || crate::pki::Ca::generate(cluster, now),
        async |fresh| secrets.create_ca(fresh).await,
    )
    .await?;
    ca.token_key = Some(
        load_or_create(
            "token key",
            async || secrets.load_token_key().await,
            crate::pki::generate_token_key,
            async |fresh| secrets.create_token_key(fresh).await,
        )
        .await?,
    );
    let days_left = (ca.not_after - now) / 86_400;
    if days_left < 365 {
        tracing::error!(
            days_left,
            not_after = ca.not_after,
            "the cluster's CA ends within a year: plan its replacement (README, TLS)"
        );
    } else {
        tracing::info!(days_left, not_after = ca.not_after, "cluster CA");
    }
    Ok(Some(ca))
}

/// One of the cluster's secrets that exists once: read it, else create it (create-only); when
/// another invocation created it first, read that one.
async fn load_or_create<T>(
    what: &'static str,
    load: impl AsyncFn() -> Result<Option<T>, Error>,
    generate: impl FnOnce() -> Result<T, Error>,
    create: impl AsyncFnOnce(&T) -> Result<crate::ports::Created, Error>,
) -> Result<T, Error> {
    if let Some(found) = load().await? {
        return Ok(found);
    }
    let fresh = generate()?;
    match create(&fresh).await? {
        crate::ports::Created::Created => {
            tracing::warn!("created the cluster's {what}");
            Ok(fresh)
        }
        crate::ports::Created::AlreadyExists => load().await?.ok_or(Error::Pki {
            what: "reading a cluster secret",
            detail: format!("the {what} exists and then does not: deleted by hand?"),
        }),
    }
}

#[cfg(test)]
mod tests;
