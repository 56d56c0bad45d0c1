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
use crate::model::{ClusterState, ClusterView, MemberId, Observation, Timestamp};
use crate::planner::{self, Step, Wait};
use crate::ports::{Completion, Created, Group, Lifecycle, Members, PublishedConfig};

/// Steps one invocation applies at most: a bound on a plan that would not converge.
const MAX_STEPS: usize = 64;

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
        stats: Stats,
    },
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

pub struct Reconciler<G, L, P, M> {
    pub group: G,
    pub lifecycle: L,
    pub published: P,
    pub members: M,
    pub config: Config,
    pub clock: Clock,
}

impl<G: Group, L: Lifecycle, P: PublishedConfig, M: Members> Reconciler<G, L, P, M> {
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
                ..
            }) => {
                let trigger = format!("{transition} {instance}");
                Box::pin(self.reconcile(trigger, Some(&instance), deadline)).await
            }
        }
    }

    async fn observe(&self, meter: &Meter) -> Result<Observation, Error> {
        meter.observations.fetch_add(1, Ordering::Relaxed);
        // Group, then parameters, then etcd: a config is written only after its member exists,
        // so a config seen here without its member means the member has since been removed.
        let instances = meter.aws(self.group.instances()).await?;
        let published = meter.aws(self.published.load()).await?;
        let topology = &self.config.settings.topology;
        let mut present: Vec<_> = instances.iter().filter(|i| i.state.is_present()).collect();
        present.sort_by(|a, b| (a.launched_at, &a.id).cmp(&(b.launched_at, &b.id)));
        let endpoints: Vec<String> = present
            .iter()
            .filter_map(|i| i.address.as_deref().map(|a| topology.client_url(a)))
            .collect();
        let cluster = meter.etcd(self.members.observe(&endpoints)).await;
        Ok(Observation {
            instances,
            cluster,
            published,
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
        // until `stop_at`.
        let patience_until = stop_at.min(started + self.config.wait_budget);
        let mut steps = Vec::new();
        let mut failures = 0u32;
        let mut last_wait = None;
        loop {
            let obs = self.observe(&meter).await?;
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
            let step = planner::plan(&obs, &self.config.settings);
            let waiting = match &step {
                Step::Idle => {
                    let stats = meter.stats(started.elapsed());
                    info!(%trigger, steps = steps.len(), ?stats, "converged");
                    return Ok(Response::Reconciled {
                        trigger,
                        steps,
                        waiting: None,
                        stats,
                    });
                }
                Step::Wait(w) => Some(w.clone()),
                _ => None,
            };
            if let Some(wait) = waiting {
                if last_wait.as_ref() != Some(&wait) {
                    log_decision(&step, "waiting");
                    last_wait = Some(wait.clone());
                }
                if Instant::now() + self.config.poll_interval > patience_until {
                    self.heartbeat(&obs, &wait, &meter).await?;
                    let stats = meter.stats(started.elapsed());
                    info!(%trigger, steps = steps.len(), ?stats, ?wait, "leaving work for later");
                    return Ok(Response::Reconciled {
                        trigger,
                        steps,
                        waiting: Some(format!("{wait:?}")),
                        stats,
                    });
                }
                meter.sleep(self.config.poll_interval).await;
                continue;
            }
            match self.apply(&step, &obs, &meter).await {
                Ok(outcome) => {
                    log_decision(&step, outcome);
                    steps.push(describe(&step, outcome));
                    failures = 0;
                    last_wait = None;
                    if self.config.crash_after.as_deref() == Some(step.name()) {
                        // Test-only failpoint: die between two steps, as a timeout or OOM would.
                        tracing::error!(step = step.name(), "failpoint: aborting");
                        std::process::abort();
                    }
                }
                Err(e) if e.is_retryable() => {
                    failures += 1;
                    let pause = backoff(self.config.poll_interval, failures);
                    if is_not_yet(&e) {
                        info!(step = step.name(), instance = step.instance(), refusal = ?e.refusal(), "etcd not ready for this step yet; observing again");
                    } else {
                        warn!(step = step.name(), instance = step.instance(), error = ?e, failures, "step failed; observing again");
                    }
                    if Instant::now() + pause > patience_until {
                        return Err(e);
                    }
                    meter.sleep(pause).await;
                }
                Err(e) => return Err(e),
            }
            if steps.len() >= MAX_STEPS || Instant::now() > stop_at {
                let stats = meter.stats(started.elapsed());
                warn!(
                    steps = steps.len(),
                    ?stats,
                    "stopping with work left: step or time budget spent"
                );
                return Ok(Response::Reconciled {
                    trigger,
                    steps,
                    waiting: Some("budget".into()),
                    stats,
                });
            }
        }
    }

    async fn apply(
        &self,
        step: &Step,
        obs: &Observation,
        meter: &Meter,
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
            Step::Publish { instance, config } => {
                meter.aws(published.publish(instance, config)).await?;
                Ok("published")
            }
            Step::AddLearner { peer_url, .. } => {
                let r = meter
                    .etcd(members.add_learner(&endpoint(None)?, peer_url))
                    .await;
                settled(
                    r.map(drop),
                    Refusal::PeerUrlExists,
                    "added",
                    "already-member",
                )
            }
            Step::Promote { member, .. } => {
                let r = meter.etcd(members.promote(&endpoint(None)?, *member)).await;
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

    /// While work waits on something slow, keep the held instances' hooks from timing out. Not
    /// when the cluster is unreachable: then the hooks' default results are the right end.
    async fn heartbeat(&self, obs: &Observation, wait: &Wait, meter: &Meter) -> Result<(), Error> {
        if matches!(wait, Wait::ClusterUnreachable { .. }) {
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
/// membership change, the one learner slot taken, an election under way.
fn is_not_yet(e: &Error) -> bool {
    matches!(
        e.refusal(),
        Some(
            Refusal::LearnerNotInSync
                | Refusal::UnhealthyCluster
                | Refusal::TooManyLearners
                | Refusal::NoLeader
        )
    )
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
