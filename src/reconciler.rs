//! The handler: validate the event, then observe → plan → apply until nothing is left to do or
//! the invocation's time is up. Every step looks before it acts, so replays are no-ops.
//!
//! By phase: an environment's identity and set-up, before its first observation (`setup.rs`:
//! hooks, warm pools, the stack's CA and token key); one look at the world (`observe.rs`, the
//! one reader of ADOPT_ENDPOINTS here); then this loop. One invocation's state is an
//! `Invocation` (`invocation.rs`); applying a step is its translation into port calls
//! (`apply.rs`); held hooks are heartbeated whatever fails (`heartbeats.rs`). What to do next
//! is always the planner's.

mod apply;
mod heartbeats;
mod invocation;
mod observe;
pub mod setup;

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use serde_json::Value;
use tracing::{info, warn, Instrument};

use crate::config::Config;
use crate::error::{Class, Error};
use crate::event::{self, Expected, Trigger};
use crate::model::{MemberId, Observation, Timestamp};
use crate::planner::{self, Plan, Step, Wait};
use crate::ports::{Backups, Group, Lifecycle, Members, NoBackups, PublishedConfig, Secrets};

pub use heartbeats::Keeper;
pub use invocation::{HeldTermination, Response, Stats};
use invocation::{Invocation, Meter, Next};

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
    /// When this environment last defragmented each member (`ClusterView::defragmented`).
    pub defragmented: std::sync::Mutex<std::collections::BTreeMap<MemberId, Timestamp>>,
}

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
        if let (Step::Defragment { member, .. }, "defragmented") = (&step, outcome) {
            self.defragmented.lock().unwrap().insert(*member, obs.now);
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

#[cfg(test)]
mod tests;
