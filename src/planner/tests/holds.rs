//! `holds.rs`: which lifecycle hooks are held (heartbeated) while work waits, and which a plan
//! lets lapse.

use super::*;

#[test]
fn held_instances_are_the_ones_waiting_in_a_hook() {
    let g = given(vec![
        inst(1, InService),
        inst(2, PendingWait),
        inst(3, TerminatingWait),
    ]);
    assert_eq!(
        held(&g.obs.instances),
        vec![(i(2), Transition::Launch), (i(3), Transition::Terminate)]
    );
}

#[test]
fn what_a_plan_lets_lapse_idle_everything_a_step_nothing_unreachable_all_but_listed_voters() {
    use crate::planner::released;
    let g = given(vec![
        inst(1, InService),
        inst(2, PendingWait),
        inst(3, TerminatingWait),
    ]);
    let all: std::collections::BTreeSet<_> = held(&g.obs.instances).into_iter().collect();
    assert_eq!(released(&g.obs, &Step::Idle), all);
    let step = Step::Complete {
        instance: i(2),
        transition: Transition::Launch,
        result: crate::model::ActionResult::Continue,
    };
    assert!(released(&g.obs, &step).is_empty());
    let waiting = Step::Wait(Wait::NoSeed);
    assert!(released(&g.obs, &waiting).is_empty());
    // No quorum, and no answering member lists 3 as a voter: both lapse; listed, 3 is kept.
    let unreachable = Step::Wait(Wait::ClusterUnreachable {
        detail: String::new(),
    });
    assert_eq!(released(&g.obs, &unreachable), all);
    let mut listed = g.obs.clone();
    listed.cluster = ClusterState::Unreachable {
        detail: String::new(),
        survivors: vec![survivor(1, 10, &[1, 3])],
    };
    assert_eq!(
        released(&listed, &unreachable),
        [(i(2), Transition::Launch)].into_iter().collect()
    );
}

/// Scaled to zero, the last voter's etcd hung before its final snapshot (paused: disk intact).
/// No member answers, so no answering member lists it: before, its hook lapsed and the disk
/// with the only copy of the newest writes was deleted. It is held (heartbeated, named) until
/// it answers or an operator completes the action; an instance of an older generation, or one
/// whose config never came, is not.
#[test]
fn a_hung_last_voter_is_held_while_nothing_answers() {
    use crate::planner::{held_while_unreachable, released};
    let g = with_backups(given(vec![inst(1, TerminatingWait)]))
        .record(1)
        .published(1, seed_config(1), 1)
        .desired(0);
    let step = g.plan();
    assert!(
        matches!(step, Step::Wait(Wait::ClusterUnreachable { .. })),
        "{step:?}"
    );
    assert_eq!(held_while_unreachable(&g.obs), vec![i(1)]);
    assert!(!released(&g.obs, &step).contains(&(i(1), Transition::Terminate)));
    // A config of an older generation (a survivor of a restore): not this cluster's data.
    let old = g.published(
        1,
        MemberConfig {
            token: "etcd-old".into(),
            ..seed_config(1)
        },
        1,
    );
    assert!(held_while_unreachable(&old.obs).is_empty());
}

#[test]
fn heartbeats_are_due_once_an_eighth_of_the_hook_passed_and_releases_stand_half_of_it() {
    use crate::planner::due;
    use std::time::{Duration, Instant};
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let (launch, leave) = ((i(2), Transition::Launch), (i(3), Transition::Terminate));
    let held = vec![launch.clone(), leave.clone()];
    // A 320 s terminate hook (due after 40 s), a 960 s launch hook (after 120 s).
    let timeout = |t: Transition| match t {
        Transition::Launch => Duration::from_secs(960),
        Transition::Terminate => Duration::from_secs(320),
    };
    let none = std::collections::BTreeMap::new();
    let beaten: std::collections::BTreeMap<_, _> =
        [(launch.clone(), at(0)), (leave.clone(), at(0))].into();
    let cases = [
        // (now, released at, due)
        (at(0), None, vec![]),
        (at(39), None, vec![]),
        (at(40), None, vec![leave.clone()]),
        (at(120), None, vec![launch.clone(), leave.clone()]),
        // Released 10 s before: not beaten while the release stands (160 s for a 320 s hook)...
        (at(50), Some(at(40)), vec![]),
        (at(199), Some(at(40)), vec![launch.clone()]),
        // ...and beaten again once no plan renewed it (SSM failing since).
        (at(200), Some(at(40)), vec![launch.clone(), leave.clone()]),
    ];
    for (now, released_at, want) in cases {
        let released: std::collections::BTreeMap<_, _> = released_at
            .map(|t| [(leave.clone(), t)].into())
            .unwrap_or_default();
        assert_eq!(
            due(&held, &released, &beaten, timeout, now),
            want,
            "at {:?}",
            now - t0
        );
    }
    // Never beaten: due at once.
    assert_eq!(due(&held, &none, &none, timeout, t0), held);
}
