//! One invocation's state: where its time went, what it applied, what it waits on, how often its
//! steps failed, and what it listed of the backup store. `finish` makes the response;
//! `after_error` decides what a failed step means: try again, wait, go on without backups, or
//! fail the invocation.

use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tracing::{info, warn};

use crate::error::{Class, Error};
use crate::metrics::Metrics;
use crate::model::{
    BackupListing, ClusterState, GroupState, Observation, PublishedState, Timestamp, Written,
};
use crate::planner::{Level, Plan, Report, Step, Wait};

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

/// Times and counts every port call of an invocation, and ends any that is not done by the
/// invocation's `until`: no outside call outlasts the invocation, whatever the SDK's or the
/// etcd client's own timeouts.
#[derive(Default)]
pub struct Meter {
    etcd_ns: AtomicU64,
    etcd_calls: AtomicU32,
    aws_ns: AtomicU64,
    aws_calls: AtomicU32,
    waited_ns: AtomicU64,
    pub observations: AtomicU32,
    /// None: no bound (the CLI's looks).
    until: Option<Instant>,
}

impl Meter {
    pub fn until(until: Instant) -> Self {
        Self {
            until: Some(until),
            ..Self::default()
        }
    }

    /// The invocation's bound on every call, if it has one.
    pub fn bound(&self) -> Option<Instant> {
        self.until
    }

    pub async fn etcd<T>(&self, call: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        let bounded = bound(self.until, "an etcd call", call);
        Self::time(&self.etcd_ns, &self.etcd_calls, bounded).await
    }

    /// etcd's view of the cluster. One not complete by `until` is no view: the observation
    /// fails (an unreachable cluster made up of a cut-off look would be planned on).
    pub async fn cluster(
        &self,
        call: impl Future<Output = ClusterState>,
    ) -> Result<ClusterState, Error> {
        let bounded = bound(self.until, "observing etcd", async { Ok(call.await) });
        Self::time(&self.etcd_ns, &self.etcd_calls, bounded).await
    }

    pub async fn aws<T>(&self, call: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        self.aws_until(self.until, call).await
    }

    /// An AWS call bounded by `until` rather than the invocation's own bound: the heartbeats on
    /// the way out of an invocation, which go after it.
    pub async fn aws_until<T>(
        &self,
        until: Option<Instant>,
        call: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let bounded = bound(until, "an AWS call", call);
        Self::time(&self.aws_ns, &self.aws_calls, bounded).await
    }

    async fn time<T>(ns: &AtomicU64, calls: &AtomicU32, call: impl Future<Output = T>) -> T {
        let began = Instant::now();
        let out = call.await;
        ns.fetch_add(began.elapsed().as_nanos() as u64, Ordering::Relaxed);
        calls.fetch_add(1, Ordering::Relaxed);
        out
    }

    pub async fn sleep(&self, pause: Duration) {
        tokio::time::sleep(pause).await;
        self.waited_ns
            .fetch_add(pause.as_nanos() as u64, Ordering::Relaxed);
    }

    pub fn stats(&self, elapsed: Duration) -> Stats {
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
pub type Listed = Option<Result<BackupListing, String>>;

/// The group is read again while polling once what was read is this old.
const GROUP_FRESH: Duration = Duration::from_secs(30);

/// What this invocation has read of each AWS source, kept until a step of ours may have changed
/// it: a pass observes etcd every time (what a poll waits on), AWS only where it may have moved.
/// SSM and the bucket are written by this function alone (one invocation at a time); the group
/// moves by itself, so it is read again after a step of ours on it, for a wait about it, and once
/// what was read is `GROUP_FRESH` old. Every invocation starts with none of it.
#[derive(Default)]
pub struct Seen {
    /// The group as Auto Scaling listed it at the invocation's start (its held hooks
    /// heartbeated from it), for the first observation to locate.
    pub listed: Option<GroupState>,
    pub group: Option<(GroupState, Instant)>,
    pub published: Option<PublishedState>,
    /// The bucket's listing: only a step of ours changes it (taken, pruned), and polling must
    /// not list it every pause. A listing that fails (or a backup that failed) is kept too, as
    /// why the store is not used.
    pub backups: Listed,
}

impl Seen {
    /// After `step` was applied: what it wrote under the prefix, as written (ours alone to
    /// write), else forget what it changed.
    pub fn applied(&mut self, step: &Step, written: Option<Written>, now: Timestamp) {
        match step {
            Step::Complete { .. } | Step::Replace { .. } => self.group = None,
            Step::CreateCluster(_)
            | Step::ReseedCluster { .. }
            | Step::MarkServed(_)
            | Step::Sleep(_)
            | Step::Restore { .. }
            | Step::Publish { .. }
            | Step::Unpublish { .. }
            | Step::NoteDown { .. }
            | Step::ForgetDown { .. } => match (written, self.published.as_mut()) {
                (Some(w), Some(published)) => published.record(w, now),
                _ => self.published = None,
            },
            Step::Backup { .. } | Step::Prune { .. } => self.backups = None,
            _ => {}
        }
    }

    /// After a step failed: what it was planned from may be why; read the group and the
    /// parameters again (the listing's fate is `Invocation::after_error`'s).
    pub fn failed(&mut self) {
        self.group = None;
        self.published = None;
    }

    /// Before polling `wait` again: the group, if the wait is about it.
    pub fn polling(&mut self, wait: &Wait) {
        if wait.is_about_the_group() {
            self.group = None;
        }
    }

    /// Before every observation: the group, once what was read is `GROUP_FRESH` old (a long
    /// snapshot, a step retried for a while), so that an instance that began terminating
    /// meanwhile is seen and its hook heartbeated within the invocation.
    pub fn forget_stale_group(&mut self) {
        if self
            .group
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() >= GROUP_FRESH)
        {
            self.group = None;
        }
    }
}

/// What to do after a step failed.
pub enum Next {
    /// Observe again after this pause.
    Retry(Duration),
    /// "Not yet" for longer than the invocation may wait: hold the hooks and leave it.
    Wait(Wait),
    /// Go on without backups this invocation (the step was a backup's).
    WithoutBackups,
    Fail(Error),
}

pub struct Invocation {
    pub trigger: String,
    pub started: Instant,
    /// No step starts after this (the Lambda deadline less the margin).
    pub stop_at: Instant,
    /// Waiting on slow steps and retrying failed ones both end here.
    pub patience_until: Instant,
    pub meter: Meter,
    /// What was applied, as the response lists it (`step: outcome`).
    pub steps: Vec<String>,
    /// Failed tries of the current step, for the backoff.
    pub failures: u32,
    pub last_wait: Option<Wait>,
    pub last_applied: Option<Step>,
    /// What was read of AWS, for the next passes.
    pub seen: Seen,
    /// Steps applied, refusals and errors by kind, for the metrics.
    pub counts: Metrics,
    /// Heartbeats that failed (each logged): the invocation's outcome if nothing else fails.
    pub beats_failed: Vec<Error>,
}

impl Invocation {
    /// No step starts after `stop_at`; no call outlasts `calls_until`.
    pub fn new(trigger: String, stop_at: Instant, budget: Duration, calls_until: Instant) -> Self {
        let started = Instant::now();
        let stop_at = stop_at.max(started);
        Self {
            trigger,
            started,
            stop_at,
            patience_until: stop_at.min(started + budget),
            meter: Meter::until(calls_until),
            steps: Vec::new(),
            failures: 0,
            last_wait: None,
            last_applied: None,
            seen: Seen::default(),
            counts: Metrics::default(),
            beats_failed: Vec::new(),
        }
    }

    /// The plan's step, unless this invocation has just applied it and the observation has not
    /// caught up (AWS is eventually consistent): then a wait, not a repeat.
    pub fn not_again(&self, step: Step) -> Step {
        if self
            .last_applied
            .as_ref()
            .is_some_and(|a| a.is_again(&step))
        {
            return Step::Wait(Wait::NotYetVisible {
                step: step.name(),
                instance: step.instance().map(str::to_string),
            });
        }
        step
    }

    /// Whether a short wait may be polled: it ends within seconds and there is time for a pause.
    pub fn patient(&self, wait: &Wait, pause: Duration) -> bool {
        wait.is_short() && Instant::now() + pause <= self.patience_until
    }

    /// A step applied: counted, listed, and no longer failing.
    pub fn applied(&mut self, step: Step, outcome: &str, written: Option<Written>, now: Timestamp) {
        self.counts.count(format!("StepsApplied.{}", step.name()));
        self.seen.applied(&step, written, now);
        self.steps.push(format!("{step}: {outcome}"));
        self.failures = 0;
        self.last_wait = None;
        self.last_applied = Some(step);
    }

    /// After an observation failed: the pause before observing again, when the error may pass
    /// and the invocation may wait that long; else the error, the invocation's outcome. What was
    /// read before the failure is kept.
    pub fn retry_observation(
        &mut self,
        e: Error,
        poll_interval: Duration,
    ) -> Result<Duration, Error> {
        if !e.is_retryable() {
            return Err(e);
        }
        self.failures += 1;
        let pause = backoff(poll_interval, self.failures);
        if Instant::now() + pause > self.patience_until {
            return Err(e);
        }
        self.counts.count(format!("Errors.{}", e.kind()));
        warn!(error = ?e, failures = self.failures, "observation failed; observing again");
        Ok(pause)
    }

    /// What a failed `step` means for the rest of the invocation. Its class is the error's
    /// (`Error::class`); the time left, the invocation's.
    pub fn after_error(&mut self, step: &Step, e: Error, poll_interval: Duration) -> Next {
        self.last_applied = None;
        // The store (or a snapshot) failing costs this invocation its backups, never its
        // membership work: the rules go on as if backups were off, and the next invocation
        // tries again. BackupFailed counts it (the BackupFailing alarm).
        if matches!(step, Step::Backup { .. } | Step::Prune { .. }) {
            tracing::error!(step = step.name(), error = ?e, "backup store or snapshot failed: going on without backups this invocation");
            if matches!(e, Error::OutOfTime { .. }) {
                self.counts.count("BackupTimedOut");
            }
            self.seen.backups = Some(Err(e.to_string()));
            // Counted here too: an invocation that ends on its budget right after a slow
            // failing snapshot reports no later observation.
            self.counts.count("BackupFailed");
            return Next::WithoutBackups;
        }
        let class = e.class();
        if class != Class::NotYet {
            // etcd's "not yet" says nothing of AWS; anything else may come from a stale view.
            self.seen.failed();
        }
        if matches!(class, Class::Fatal) {
            return Next::Fail(e);
        }
        self.failures += 1;
        let pause = backoff(poll_interval, self.failures);
        match e.refusal() {
            Some(r) => self.counts.count(format!("Refusals.{r:?}")),
            None => self.counts.count(format!("Errors.{}", e.kind())),
        }
        let not_yet = matches!(class, Class::NotYet);
        if not_yet {
            info!(refusal = ?e.refusal(), "etcd not ready for this step yet; observing again");
        } else {
            warn!(error = ?e, failures = self.failures, "step failed; observing again");
        }
        if Instant::now() + pause <= self.patience_until {
            return Next::Retry(pause);
        }
        if !not_yet {
            return Next::Fail(e);
        }
        // "Not yet" is a wait, not a failure: keep every held hook alive and let the schedule
        // look again.
        warn!(error = ?e, "etcd refuses this step for now; holding and waiting");
        Next::Wait(Wait::Refused {
            step: step.name(),
            instance: step.instance().map(str::to_string),
            refusal: format!("{:?}", e.refusal().unwrap_or(crate::error::Refusal::Other)),
        })
    }

    /// The response, from the last observation and plan: stats, metrics, and the log lines that
    /// report what is held and why.
    pub fn finish(
        &self,
        obs: &Observation,
        plan: &Plan,
        waiting: Option<String>,
        ca_not_after: Option<Timestamp>,
    ) -> Response {
        let stats = self.meter.stats(self.started.elapsed());
        let mut metrics = Metrics::observed(obs, &plan.waits);
        metrics.0.extend(self.counts.0.clone());
        if let Some(not_after) = ca_not_after {
            metrics.ca_days_left(not_after, obs.now);
        }
        let held_for_quorum = held_for_quorum(&plan.waits);
        report(&plan.waits, &held_for_quorum);
        if let Some(risk) = crate::planner::zones::zone_risk(obs) {
            warn!(%risk, "one Availability Zone's loss would cost the quorum");
        }
        info!(trigger = %self.trigger, steps = self.steps.len(), ?stats, waiting, "invocation done");
        Response::Reconciled {
            trigger: self.trigger.clone(),
            steps: self.steps.clone(),
            waiting,
            held_for_quorum,
            stats,
            metrics,
        }
    }
}

/// The waits an operator must hear of on every invocation they last, as their own log lines
/// (`Wait::report`).
fn report(waits: &[Wait], held_for_quorum: &[HeldTermination]) {
    for report in waits.iter().filter_map(Wait::report) {
        log(&report);
    }
    for h in held_for_quorum {
        warn!(instance = %h.instance, member = %h.member, blocking = ?h.blocking,
            "terminate hook held: removing this member now would cost quorum; the blocking \
             members are down");
    }
}

/// A wait's report, at its level; the fields it lacks are left out of the line.
fn log(report: &Report) {
    use tracing::field::display;
    let f = &report.fields;
    let wait = f.wait.as_deref().map(display);
    let request = f.request.as_deref().map(display);
    let instance = f.instance.as_deref().map(display);
    let why = f.why.as_deref().map(display);
    let members = f.members.as_deref().map(display);
    let (in_use, quota) = (f.in_use, f.quota);
    let (requested_at, generation_created_at) = (f.requested_at, f.generation_created_at);
    macro_rules! line {
        ($level:ident) => {
            tracing::$level!(
                wait,
                in_use,
                quota,
                request,
                requested_at,
                generation_created_at,
                instance,
                why,
                members,
                "{}",
                report.message
            )
        };
    }
    match report.level {
        Level::Info => line!(info),
        Level::Warn => line!(warn),
        Level::Error => line!(error),
    }
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

/// `call`, or `Error::OutOfTime` once `until` passes.
async fn bound<T>(
    until: Option<Instant>,
    what: &'static str,
    call: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let Some(until) = until else {
        return call.await;
    };
    match tokio::time::timeout_at(tokio::time::Instant::from_std(until), call).await {
        Ok(out) => out,
        Err(_) => Err(Error::OutOfTime {
            what,
            detail: "no answer before the invocation's deadline".into(),
        }),
    }
}

fn backoff(base: Duration, failures: u32) -> Duration {
    let exp = base.saturating_mul(1 << failures.min(5));
    let capped = exp.min(Duration::from_secs(20));
    // Full jitter: racing invocations should not retry in lockstep.
    capped.mul_f64(0.5 + fastrand::f64() * 0.5)
}
