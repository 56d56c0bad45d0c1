//! The decision: from one observation, the next safe step. Pure: no I/O, no clock, no log.
//!
//! This file is the ranking: which rule wins. Each rule group lives in a file of its own and
//! reads the observation through `context`; the steps and waits they return are `step`'s.
//! Imports run one way: this file → the rule files → `context`, `step` → `model`, `config`.
//!
//! Rules, in the order they are tried (the first that has something to do wins; a rule that can
//! only wait lets later rules act, and every wait is reported):
//! 0. keep the cluster record true: note that the cluster served (with its id), and never believe
//!    a cluster whose id differs from the record's (`record`);
//! 1. bootstrap exactly once, when no member answers (create-only cluster record, then the seed);
//!    a seed that never serves is abandoned after the start timeout, and a record whose seed
//!    never served and is gone is replaced (conditionally) with a new seed. A record that served
//!    is never replaced (`record`); it comes back only from a backup once lost for good
//!    (`backup::recovery`);
//! 2. remove members that must go (a terminating instance's, one whose instance left the group),
//!    **unhealthy ones first**, each only while the healthy voters left keep a quorum (moving
//!    leadership away first); a blocked removal holds its terminate hook. The last voter leaves
//!    only after a replacement has joined and been promoted (`leaving`);
//! 3. complete launch actions of started voters (CONTINUE), and of instances whose learner was
//!    removed (ABANDON, so the group replaces them) (`joining`);
//! 4. the one learner: publish its config, promote it once started, remove it if it never starts;
//! 5. join the next instance as a learner, only when no learner exists and every voter started;
//!    never over a member of another instance that holds the same peer URL; only when etcd allows
//!    its release (`crate::versions`: an upgrade's floor, one minor at a time), else it waits at
//!    the gate, and a release etcd would never admit has its launch refused;
//! 6. a member etcd raised its CORRUPT alarm for is replaced first (never a majority; its alarm
//!    disarmed once it is gone); a voter whose etcd has been down `unhealthy_replace_secs` while its instance is in service
//!    is replaced (the group's health is set to Unhealthy), one at a time, while the others keep a
//!    quorum; never while an answering member still holds a raft connection to it (down for the
//!    function only) (`leaving`);
//! 7. delete published configs and down-marks of instances that are gone or well again
//!    (`cleanup`);
//! 8. only when membership has nothing to do or wait for: authentication on (`access`), then
//!    maintenance (`maintenance`);
//! 9. backups, whenever membership has no step to take (`backup`).

mod access;
mod adopt;
pub mod backup;
mod cleanup;
mod context;
mod holds;
mod joining;
mod leaving;
pub mod maintenance;
mod record;
mod step;
pub mod zones;

pub use holds::{
    due, held, held_while_unreachable, holds, released, Held, Hold, BEAT_EVERY, RELEASE_FOR,
};
pub use step::{
    BackupReason, MemberCertificate, Plan, Removal, Replacement, StaleRequest, Step, Wait,
};

use crate::config::Settings;
use crate::model::{ClusterState, Observation};
use context::Context;

pub fn plan(obs: &Observation, settings: &Settings) -> Step {
    assess(obs, settings).step
}

/// The next step and every wait found on the way to it.
pub fn assess(obs: &Observation, settings: &Settings) -> Plan {
    let view = match &obs.cluster {
        ClusterState::Unreachable { detail, survivors } => {
            return match &obs.published.cluster {
                Some(record) if obs.published.served(record) => {
                    adopt::while_unreachable(record, detail).unwrap_or_else(|| {
                        backup::recovery(obs, settings, record, detail, survivors)
                    })
                }
                _ => record::bootstrap(obs, settings, detail),
            }
        }
        ClusterState::Known(view) => view,
    };
    let ctx = Context {
        obs,
        settings,
        view,
    };
    if let Some(step) = adopt::adopt(&ctx)
        .or_else(|| record::bookkeeping(&ctx))
        .or_else(|| adopt::finished(&ctx))
        .or_else(|| backup::unfence(&ctx))
        .or_else(|| cleanup::forget_recovered(&ctx))
    {
        return Plan::only(step);
    }
    // Every rule is a cheap pure function: evaluating all keeps the priority order plain.
    let candidates = [
        leaving::removals(&ctx, backup::before_removal(&ctx)),
        joining::launch_completions(&ctx),
        joining::learner(&ctx),
        joining::joins(&ctx),
        leaving::replacements(&ctx),
        cleanup::cleanup(&ctx),
    ];
    let mut waits = Vec::new();
    for steps in candidates {
        for step in steps {
            match step {
                Step::Wait(w) => waits.push(w),
                step => return Plan { step, waits },
            }
        }
    }
    // Access and maintenance rank below membership: only when membership has nothing to do or
    // wait for. Access first: a one-off, and without it every certificate holder reaches all.
    if waits.is_empty() {
        if let Some(step) = access::enable(&ctx) {
            return Plan::only(step);
        }
        if let Some(step) = maintenance::plan(view, settings).into_iter().next() {
            return Plan::only(step);
        }
    }
    // Backups: whenever membership has no step to take (a wait, such as a held termination,
    // is when a fresh snapshot matters most).
    if let Some(step) = backup::scheduled(&ctx) {
        return Plan { step, waits };
    }
    // A short wait (something starting) is what an invocation may poll for: report it first.
    let step = waits
        .iter()
        .find(|w| w.is_short())
        .or(waits.first())
        .map_or(Step::Idle, |w| Step::Wait(w.clone()));
    Plan { step, waits }
}

#[cfg(test)]
mod tests;
