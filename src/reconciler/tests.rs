//! The handler against the in-memory world: given a group and a cluster, when events arrive
//! (duplicated, reordered, lost, concurrent), then the cluster converges with no step repeated.
//!
//! One file per concern: joins and removals as events arrive (`tests/membership.rs`), hooks
//! held while work waits (`tests/holds.rs`), members replaced (`tests/replacements.rs`), an
//! environment's set-up (`tests/environment.rs`), maintenance (`tests/maintenance.rs`), backups
//! (`tests/backups.rs`), recovery (`tests/recovery.rs`), certificates and authentication
//! (`tests/access.rs`), what an invocation asks and takes as written (`tests/observation.rs`),
//! and AWS failing as it does (`tests/faults.rs`). This file holds what they share: the
//! reconciler on a fake world (`reconciler`, `with_backups`), the events, and convergence
//! (`converge`, `assert_converged`, `three_member_cluster`).

use super::*;
use crate::error::Refusal;
use crate::fake::Fake;
use crate::model::{InitialState, LifecycleState, MemberId};
use serde_json::json;

mod access;
mod backups;
mod environment;
mod faults;
mod holds;
mod maintenance;
mod membership;
mod observation;
mod recovery;
mod replacements;

type Tested = Reconciler<Fake, Fake, Fake, Fake, Fake>;

fn reconciler(world: &Fake) -> Tested {
    reconciler_with(world, &[])
}

fn reconciler_with(world: &Fake, extra: &[(&str, &str)]) -> Tested {
    let extra: Vec<(String, String)> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config = Config::from_lookup(|k| {
        if let Some((_, v)) = extra.iter().find(|(key, _)| key == k) {
            return Some(v.clone());
        }
        match k {
            "ASG_NAME" => Some("etcd"),
            "LAUNCH_HOOK_NAME" => Some("etcd-launch"),
            "TERMINATE_HOOK_NAME" => Some("etcd-terminate"),
            // Never wait inside an invocation: the test boots instances between invocations.
            "WAIT_BUDGET_SECS" => Some("0"),
            "POLL_INTERVAL_MS" => Some("50"),
            "DEADLINE_MARGIN_MS" => Some("0"),
            _ => None,
        }
        .map(str::to_string)
    })
    .unwrap();
    let clock_world = world.clone();
    Reconciler {
        group: world.clone(),
        lifecycle: world.clone(),
        published: world.clone(),
        members: world.clone(),
        backups: config.backup_store.is_some().then(|| world.clone()),
        ca: Default::default(),
        prepared: Default::default(),
        config,
        clock: Arc::new(move || clock_world.world().now),
        backup_failed_at: Default::default(),
        hooks: Default::default(),
        defragmented: Default::default(),
    }
}

fn lifecycle_event(transition: &str, instance: &str) -> Value {
    let (detail_type, hook, t) = match transition {
        "launch" => (
            "EC2 Instance-launch Lifecycle Action",
            "etcd-launch",
            "autoscaling:EC2_INSTANCE_LAUNCHING",
        ),
        _ => (
            "EC2 Instance-terminate Lifecycle Action",
            "etcd-terminate",
            "autoscaling:EC2_INSTANCE_TERMINATING",
        ),
    };
    json!({
        "version": "0", "id": "1", "detail-type": detail_type, "source": "aws.autoscaling",
        "account": "123456789012", "time": "2026-11-29T12:00:00Z", "region": "us-east-1",
        "resources": [], "detail": {
            "LifecycleActionToken": "87654321-4321-4321-4321-210987654321",
            "AutoScalingGroupName": "etcd", "LifecycleHookName": hook,
            "EC2InstanceId": instance, "LifecycleTransition": t }
    })
}

fn schedule() -> Value {
    json!({"version": "0", "id": "2", "detail-type": "Scheduled Event", "source": "aws.events",
           "account": "123456789012", "time": "2026-11-29T12:00:00Z", "region": "us-east-1",
           "resources": [], "detail": {}})
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

/// Invoke with each event, letting instances boot between invocations, until an invocation
/// leaves nothing waiting. Returns the invocations it took.
async fn converge(world: &Fake, events: &[Value]) -> usize {
    let r = reconciler(world);
    for round in 1..=40 {
        let mut all_done = true;
        for e in events {
            let resp = r.handle(e, far()).await.unwrap();
            if let Response::Reconciled {
                waiting: Some(_), ..
            } = resp
            {
                all_done = false;
            }
            world.boot();
            world.world().now += 5;
        }
        if all_done {
            return round;
        }
    }
    panic!("did not converge: {:#?}", world.calls());
}

fn assert_converged(world: &Fake) {
    let w = world.world();
    let live: Vec<&str> = w
        .instances
        .iter()
        .filter(|i| i.state.wants_membership())
        .map(|i| i.id.as_str())
        .collect();
    let mut names: Vec<&str> = w.members.iter().map(|m| m.name.as_str()).collect();
    names.sort();
    let mut live_sorted = live.clone();
    live_sorted.sort();
    assert_eq!(
        names, live_sorted,
        "member set equals the group's live instances"
    );
    assert!(w.members.iter().all(|m| !m.is_learner && m.is_started()));
    assert!(
        w.instances
            .iter()
            .all(|i| i.state == LifecycleState::InService),
        "every lifecycle action completed: {:?}",
        w.instances
    );
    assert_eq!(w.clusters_formed, 1, "exactly one cluster was ever formed");
}

async fn three_member_cluster() -> Fake {
    let world = Fake::default();
    for n in 1..=3 {
        world.launch(n);
    }
    converge(&world, &[schedule()]).await;
    assert_converged(&world);
    world
}

fn reconciled(resp: &Response) -> (&Vec<String>, Option<&str>, &Vec<HeldTermination>) {
    match resp {
        Response::Reconciled {
            steps,
            waiting,
            held_for_quorum,
            ..
        } => (steps, waiting.as_deref(), held_for_quorum),
        other => panic!("{other:?}"),
    }
}

fn with_backups(world: &Fake) -> Tested {
    reconciler_with(world, &[("BACKUP_BUCKET", "backups")])
}

async fn converge_with(r: &Tested, world: &Fake) {
    for _ in 0..40 {
        let resp = r.handle(&schedule(), far()).await.unwrap();
        world.boot();
        world.world().now += 5;
        if let Response::Reconciled { waiting: None, .. } = resp {
            return;
        }
    }
    panic!("did not converge: {:#?}", world.calls());
}
