//! Which lifecycle hooks to keep alive (heartbeats) while work waits, so that no instance is let
//! go, or abandoned, by a hook timing out on a guess.

use super::step::Wait;
use crate::model::{ClusterState, LifecycleState, Observation, Transition};

/// Instances held in a lifecycle hook, whose heartbeat keeps the hook from timing out while a
/// slow step is under way.
pub fn held(obs: &Observation) -> Vec<(String, Transition)> {
    obs.instances
        .iter()
        .filter_map(|i| match i.state {
            LifecycleState::PendingWait => Some((i.id.clone(), Transition::Launch)),
            LifecycleState::TerminatingWait => Some((i.id.clone(), Transition::Terminate)),
            _ => None,
        })
        .collect()
}

/// With no quorum: the terminating instances that a member still answering lists as a voter.
/// Their disks may hold acknowledged writes the answering members lack, so their hooks are kept
/// alive (heartbeats) instead of lapsing into a termination on a guess.
pub fn held_while_unreachable(obs: &Observation) -> Vec<String> {
    let ClusterState::Unreachable { survivors, .. } = &obs.cluster else {
        return vec![];
    };
    obs.instances
        .iter()
        .filter(|i| i.state == LifecycleState::TerminatingWait)
        .filter(|i| {
            survivors
                .iter()
                .any(|s| s.voters.iter().any(|v| v.name == i.id))
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
    if matches!(wait, Wait::ClusterUnreachable { .. }) {
        return held_while_unreachable(obs)
            .into_iter()
            .map(|instance| Hold {
                instance,
                transition: Transition::Terminate,
                while_unreachable: true,
            })
            .collect();
    }
    held(obs)
        .into_iter()
        .map(|(instance, transition)| Hold {
            instance,
            transition,
            while_unreachable: false,
        })
        .collect()
}
