//! The decision: from one observation, the next safe step. Pure: no I/O, no clock, no log.
//!
//! This file is the ranking: which rule wins. Each rule group lives in a file of its own and
//! reads the observation through `context`; the steps and waits they return are `step`'s.
//! Imports run one way: this file → the rule files → `snapshots`, `context`, `step` → `model`,
//! `config`. No rule file imports another: what one concern needs from another is asked here
//! and handed in (a value or a function), as `leaving::removals` is handed
//! `backup::before_removal` (`tools/house.py` fails on a rule file importing a sibling).
//!
//! Rules, in the order they are tried (the first that has something to do wins; a rule that can
//! only wait lets later rules act, and every wait is reported):
//! 0. keep the cluster record true: note that the cluster served (with its id), and never believe
//!    a cluster whose id differs from the record's (`record`); a cluster that ran before the
//!    stack is adopted, and the record says when its last old member is gone (`adopt`); the
//!    function's write fence is lifted once the group wants members again (`hibernate`);
//! 1. bootstrap exactly once, when no member answers (create-only cluster record, then the seed);
//!    a seed that never serves is abandoned after the start timeout, and a record whose seed
//!    never served and is gone is replaced (conditionally) with a new seed. A record that served
//!    is never replaced (`record`); it comes back only from a backup once lost for good
//!    (`recovery`, which also says what a new stack's first generation starts from), or, asleep,
//!    from its final snapshot (`hibernate`);
//! 2. remove members that must go (a terminating instance's, one whose instance left the group),
//!    **unhealthy ones first**, each only while the healthy voters left keep a quorum (moving
//!    leadership away first, and a healthy one only behind a fresh snapshot, `backup`); a blocked
//!    removal holds its terminate hook. The last voter leaves only after a replacement has joined
//!    and been promoted, or, the group scaled to zero, after its final snapshot (`hibernate`)
//!    (`leaving`); an adopted member leaves as the group's members take over (`adopt`);
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
//!
//! The files, each answering one question:
//! - `mod.rs`: which rule wins (this file);
//! - `record.rs`: is the cluster record true, and is a cluster bootstrapped (rules 0, 1);
//! - `adopt.rs`: how a cluster that ran before the stack is taken over (rules 0, 2);
//! - `leaving.rs`: which members go, and which are replaced (rules 2, 6);
//! - `joining.rs`: which instances join, are promoted and have their launch completed (rules 3
//!   to 5);
//! - `cleanup.rs`: what is left of instances that are gone or well again (rule 7);
//! - `access.rs`: etcd's authentication, turned on once (rule 8);
//! - `maintenance.rs`: compaction, defragmentation and NOSPACE (rule 8): a defrag window goes
//!   here;
//! - `backup.rs`: snapshots on schedule and before a removal, and their retention (rules 2, 9);
//! - `recovery.rs`: what a lost cluster is restored from and when, and what a new stack's first
//!   generation starts from (rule 1);
//! - `hibernate.rs`: a group scaled to zero: the write fence, the final snapshot, asleep in it,
//!   woken from it (rules 0, 1, 2);
//! - `holds.rs`: which lifecycle hooks are heartbeated while work waits (the reconciler asks);
//! - `zones.rs`: what one Availability Zone's loss would cost (a report for metrics and
//!   `status`, not a rule);
//! - shared by the rule files, importing none: `snapshots.rs` (what a backup is and which member
//!   to take it from), `context.rs` (what every rule reads), `step.rs` (the steps and their one
//!   rendering), `wait.rs` (what a wait means, all of it: its name, reason, rendering, hold,
//!   log line and level, and the metrics it feeds);
//! - `tests.rs`: the table tests' shared world (`given`); the tests themselves sit in `tests/`, a
//!   file per rule file (`tests/record.rs` for `record.rs`, …), the ranking's in
//!   `tests/ranking.rs`.
//!
//! What etcd's releases allow (an upgrade's floor, which backup a release can restore) is
//! `crate::versions`' (src/versions.rs).

mod access;
mod adopt;
pub mod backup;
mod cleanup;
mod context;
mod hibernate;
mod holds;
mod joining;
mod leaving;
pub mod maintenance;
mod record;
pub mod recovery;
pub mod snapshots;
mod step;
mod wait;
pub mod zones;

pub use holds::{
    due, held, held_while_unreachable, holds, released, Held, Hold, BEAT_EVERY, RELEASE_FOR,
};
pub use step::{BackupReason, MemberCertificate, Plan, Removal, Replacement, Step};
pub use wait::{Fields, Level, Report, StaleRequest, Wait};

use crate::config::Settings;
use crate::model::{ClusterRecord, ClusterState, Observation, Survivor};
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
                    adopt::while_unreachable(record, detail)
                        .unwrap_or_else(|| lost(obs, settings, record, detail, survivors))
                }
                _ => record::bootstrap(obs, settings, detail, |seed| {
                    recovery::first_generation(obs, settings, seed)
                }),
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
        .or_else(|| hibernate::unfence(&ctx))
        .or_else(|| cleanup::forget_recovered(&ctx))
    {
        return Plan::only(step);
    }
    // What one concern needs from another is asked here and handed in: no rule file reaches
    // into another's.
    let others = leaving::Others {
        fresh_snapshot: backup::before_removal(&ctx),
        hibernate: &|last| hibernate::hibernate(&ctx, last),
        adopted_held: &|m| adopt::held(&ctx, m),
        adopted_patience: adopt::patience(&ctx),
    };
    // Every rule is a cheap pure function: evaluating all keeps the priority order plain.
    let candidates = [
        leaving::removals(&ctx, others),
        joining::launch_completions(&ctx),
        joining::learner(&ctx),
        joining::joins(&ctx),
        leaving::replacements(&ctx),
        cleanup::cleanup(&ctx, adopt::owns_mark),
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

/// A cluster that served answers for nothing: `recovery`'s to answer, with what hibernation says
/// of a sleeping cluster (the backup policy as it stands for it, and its wake) handed in.
fn lost(
    obs: &Observation,
    settings: &Settings,
    record: &ClusterRecord,
    detail: &str,
    survivors: &[Survivor],
) -> Plan {
    let policy = settings
        .backup
        .as_ref()
        .map(|p| hibernate::unless_asleep(p, record));
    let wake = || hibernate::wake(obs, settings, record);
    recovery::recovery(
        obs,
        settings,
        policy.as_ref(),
        record,
        detail,
        survivors,
        wake,
    )
}

#[cfg(test)]
mod tests;
