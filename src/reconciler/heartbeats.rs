//! Held hooks kept alive whatever else fails. Which actions are held is the group's to tell
//! (`planner::held`); they are heartbeated before the rest of every observation, on every way
//! out of an invocation (a failure, the deadline, a panic) and before a long step, each at most
//! once a `planner::BEAT_EVERY`th of its hook's timeout, all at once, one failing stopping none
//! of the others. What the heartbeats need besides the group is kept here, per Lambda
//! environment, and is the least there is:
//!
//! - what the group held at its last listing (for a way out before any listing this time);
//! - of those, what the complete plans let lapse (`planner::released`: with the cluster
//!   unreachable, launches and terminations no answering member lists as a voter; everything
//!   when nothing is left to do), and when: a release stands for half its hook's timeout, each
//!   plan renewing it, so that a view taken just before SSM or the group began to fail cannot
//!   let a hold lapse. A fresh environment knows none, and heartbeats every held action until
//!   its first complete plan: holding is the safe side (a launch or a termination waits longer,
//!   no disk is destroyed on a guess);
//! - when each was last heartbeated, and each hook's timeout (DescribeLifecycleHooks, at
//!   `prepare`; before that, the shortest Auto Scaling allows).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tracing::info;

use crate::error::Error;
use crate::model::{GroupState, Observation, Transition};
use crate::planner::{self, Held, Step};
use crate::ports::{Completion, Lifecycle};

use super::invocation::Meter;

/// A hook's timeout before DescribeLifecycleHooks told it: the shortest Auto Scaling allows
/// (<https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_LifecycleHook.html>).
const SHORTEST_HOOK_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct Keeper {
    /// Each transition's hook timeout, once the environment is prepared.
    pub timeouts: OnceLock<BTreeMap<Transition, Duration>>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    held: Vec<Held>,
    /// When a plan last let each lapse.
    released: BTreeMap<Held, Instant>,
    beaten: BTreeMap<Held, Instant>,
    /// When a heartbeat of each last failed: tried again after `RETRY_AFTER`, not every second.
    failed: BTreeMap<Held, Instant>,
}

/// A heartbeat that failed is tried again this long after (a throttled Auto Scaling is not
/// asked every second of a step), well within an eighth of the shortest hook's timeout.
const RETRY_AFTER: Duration = Duration::from_secs(3);

impl Keeper {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere never leaves the state half-written: take it as it is.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the group holds now; whatever it no longer holds is forgotten.
    pub fn listed(&self, group: &GroupState) {
        let held = planner::held(&group.instances);
        let mut s = self.state();
        s.released.retain(|h, _| held.contains(h));
        s.beaten.retain(|h, _| held.contains(h));
        s.failed.retain(|h, _| held.contains(h));
        s.held = held;
    }

    /// What a complete plan lets lapse (`planner::RELEASE_FOR`); whatever it holds is held.
    pub fn planned(&self, obs: &Observation, step: &Step) {
        let now = Instant::now();
        let released = planner::released(obs, step);
        let mut s = self.state();
        s.released.retain(|h, _| released.contains(h));
        for h in released {
            s.released.insert(h, now);
        }
    }

    /// `paced`: not those whose heartbeat failed within `RETRY_AFTER` (a step's ticker); at an
    /// invocation's start and end, every one that is due.
    fn due(&self, now: Instant, paced: bool) -> Vec<Held> {
        let s = self.state();
        let timeouts = self.timeouts.get();
        let timeout = |t: Transition| {
            let known = timeouts.and_then(|m| m.get(&t).copied());
            known.unwrap_or(SHORTEST_HOOK_TIMEOUT)
        };
        let retried_soon = |h: &Held| {
            paced
                && s.failed
                    .get(h)
                    .is_some_and(|at| now.saturating_duration_since(*at) < RETRY_AFTER)
        };
        planner::due(&s.held, &s.released, &s.beaten, timeout, now)
            .into_iter()
            .filter(|h| !retried_soon(h))
            .collect()
    }

    /// Heartbeats every held action that is due, all at once, none past `until`: the failures
    /// (each logged), none stopping another.
    pub async fn keep_alive(
        &self,
        lifecycle: &impl Lifecycle,
        meter: &Meter,
        until: Option<Instant>,
    ) -> Vec<Error> {
        self.beat(lifecycle, meter, until, false).await
    }

    /// As `keep_alive`, for the ticker of a long step: a failed heartbeat is tried again after
    /// `RETRY_AFTER`, not at every tick.
    pub async fn keep_alive_paced(
        &self,
        lifecycle: &impl Lifecycle,
        meter: &Meter,
        until: Option<Instant>,
    ) -> Vec<Error> {
        self.beat(lifecycle, meter, until, true).await
    }

    async fn beat(
        &self,
        lifecycle: &impl Lifecycle,
        meter: &Meter,
        until: Option<Instant>,
        paced: bool,
    ) -> Vec<Error> {
        let due = self.due(Instant::now(), paced);
        if due.is_empty() {
            return vec![];
        }
        let beats = due.iter().map(|(instance, transition)| async move {
            let beat = lifecycle.heartbeat(instance, *transition);
            (instance, *transition, meter.aws_until(until, beat).await)
        });
        let mut failed = Vec::new();
        for (instance, transition, result) in futures_util::future::join_all(beats).await {
            let held = (instance.clone(), transition);
            match result {
                Ok(c) => {
                    // "No active Lifecycle Action found" too: the group listed an action that
                    // has ended (or lists it a moment longer); no need to ask again soon.
                    self.state().beaten.insert(held, Instant::now());
                    if c == Completion::NotPending {
                        info!(%instance, %transition, "lifecycle heartbeat: the action has ended");
                    } else {
                        info!(%instance, %transition, "lifecycle heartbeat");
                    }
                }
                Err(e) => {
                    self.state().failed.insert(held, Instant::now());
                    tracing::error!(%instance, %transition, error = ?e, "lifecycle heartbeat failed: the hook lapses into its default result if none goes out within its timeout");
                    failed.push(e);
                }
            }
        }
        failed
    }
}
