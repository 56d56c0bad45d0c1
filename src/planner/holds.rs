//! Which lifecycle hooks to keep alive (heartbeats) while work waits, so that no instance is let
//! go, or abandoned, by a hook timing out on a guess.
//!
//! Which actions are held is the group's alone to tell (`held`): the function heartbeats them
//! before the rest of every observation, so that nothing else failing (SSM, EC2, S3, etcd, a
//! panic) can keep a heartbeat from going out. The only other thing the heartbeats need is what
//! the last complete plan lets lapse (`released`), which the environment remembers.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::step::Step;
use super::wait::Wait;
use crate::model::{ClusterState, Instance, LifecycleState, Observation, Transition};

/// A lifecycle action the group holds: its instance, and which hook holds it.
pub type Held = (String, Transition);

/// Every action the group holds an instance in (`Pending:Wait`, `Terminating:Wait`): from the
/// group alone.
pub fn held(instances: &[Instance]) -> Vec<Held> {
    instances
        .iter()
        .filter_map(|i| match i.state {
            LifecycleState::PendingWait => Some((i.id.clone(), Transition::Launch)),
            LifecycleState::TerminatingWait => Some((i.id.clone(), Transition::Terminate)),
            _ => None,
        })
        .collect()
}

/// With no quorum: the terminating instances that a member still answering lists as a voter,
/// or, when no member answers at all (every etcd hung or cut off: a last voter paused at
/// hibernation, disk intact), those whose published config is of the current generation. Their
/// disks may hold acknowledged writes no backup has, so their hooks are kept alive (heartbeats)
/// instead of lapsing into a termination on a guess, until they answer or an operator completes
/// the action (docs/failure-modes.md).
pub fn held_while_unreachable(obs: &Observation) -> Vec<String> {
    let ClusterState::Unreachable { survivors, .. } = &obs.cluster else {
        return vec![];
    };
    let token = obs.published.cluster.as_ref().map(|r| r.token.as_str());
    let of_this_generation = |id: &str| {
        obs.published
            .members
            .get(id)
            .is_some_and(|p| Some(p.config.token.as_str()) == token)
    };
    obs.instances
        .iter()
        .filter(|i| i.state == LifecycleState::TerminatingWait)
        .filter(|i| match survivors.is_empty() {
            true => of_this_generation(&i.id),
            false => survivors
                .iter()
                .any(|s| s.voters.iter().any(|v| v.name == i.id)),
        })
        .map(|i| i.id.clone())
        .collect()
}

/// A hook to heartbeat while `wait` lasts.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Hold {
    pub instance: String,
    pub transition: Transition,
    /// Held only because the cluster is unreachable and this voter's disk may be the newest.
    pub while_unreachable: bool,
}

/// The hooks to keep alive while `wait` lasts: every held one, except when the cluster is
/// unreachable: then only a voter's instance that is terminating, so that no disk that may
/// hold acknowledged writes is destroyed on a guess (up to the hook's global timeout).
/// Launches are then left to their timeout: they hold no data.
pub fn holds(obs: &Observation, wait: &Wait) -> Vec<Hold> {
    if wait.holds_only_voters_at_risk() {
        return held_while_unreachable(obs)
            .into_iter()
            .map(|instance| Hold {
                instance,
                transition: Transition::Terminate,
                while_unreachable: true,
            })
            .collect();
    }
    held(&obs.instances)
        .into_iter()
        .map(|(instance, transition)| Hold {
            instance,
            transition,
            while_unreachable: false,
        })
        .collect()
}

/// The held actions a plan lets lapse into their hook's default result: with nothing left to do
/// (`Idle`), every one (an instance that will never join, say one EC2 gives no address); for a
/// wait, those `holds` does not keep; none while there is a step to take.
pub fn released(obs: &Observation, step: &Step) -> BTreeSet<Held> {
    let all = held(&obs.instances).into_iter();
    match step {
        Step::Idle => all.collect(),
        Step::Wait(w) => {
            let kept: BTreeSet<Held> = holds(obs, w)
                .into_iter()
                .map(|h| (h.instance, h.transition))
                .collect();
            all.filter(|h| !kept.contains(h)).collect()
        }
        _ => BTreeSet::new(),
    }
}

/// A hold is heartbeated again once this share of its hook's timeout has passed since its last
/// heartbeat: with one scheduled invocation a minute, a hook of 300 s (the template's 1800 s
/// gives 225 s) goes no longer than 37.5 + 60 s without one, within the third of its timeout the
/// goal allows.
pub const BEAT_EVERY: u32 = 8;

/// A plan's release of a held action (`released`) stands for this share of its hook's timeout:
/// each complete plan that makes it again renews it (one a minute, with the schedule), so that
/// it lapses as planned; when no complete plan comes (SSM or the group failing, invocations
/// killed), the hold is heartbeated again well before it could lapse on a view that old.
pub const RELEASE_FOR: u32 = 2;

/// Of `held`, the actions to heartbeat at `now`: those not released within a `RELEASE_FOR`th of
/// their hook's timeout (`released`, when each release was planned) whose last heartbeat
/// (`beaten`) is older than a `BEAT_EVERY`th of it, or that never had one.
pub fn due(
    held: &[Held],
    released: &BTreeMap<Held, Instant>,
    beaten: &BTreeMap<Held, Instant>,
    timeout: impl Fn(Transition) -> Duration,
    now: Instant,
) -> Vec<Held> {
    let within = |at: Option<&Instant>, span: Duration| {
        at.is_some_and(|at| now.saturating_duration_since(*at) < span)
    };
    held.iter()
        .filter(|h| !within(released.get(*h), timeout(h.1) / RELEASE_FOR))
        .filter(|h| !within(beaten.get(*h), timeout(h.1) / BEAT_EVERY))
        .cloned()
        .collect()
}
