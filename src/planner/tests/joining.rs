//! `joining.rs` (rules 3 to 5): instances join as learners one at a time, the learner is
//! promoted (or removed if it never starts) and launches complete; a started member is its
//! instance by name only, and a new instance on a dead member's address does not inherit it.

use super::*;

#[test]
fn a_new_instance_joins_as_a_learner() {
    let g = given(vec![inst(1, InService), inst(2, PendingWait)])
        .record(1)
        .members(vec![voter(1)]);
    assert_eq!(
        g.plan(),
        Step::AddLearner {
            instance: i(2),
            peer_url: peer(2),
            endpoint: ANSWERING.into()
        }
    );
}

#[test]
fn an_added_learner_gets_every_member_in_its_initial_cluster() {
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        inst(3, PendingWait),
    ])
    .record(1)
    .members(vec![voter(2), voter(1), unstarted_learner(3)]);
    let Step::Publish {
        instance, config, ..
    } = g.plan()
    else {
        panic!("{:?}", g.plan())
    };
    assert_eq!(instance, i(3));
    assert_eq!(config.state, InitialState::Existing);
    assert_eq!(config.token, "etcd-i-00000001");
    assert_eq!(
        config.initial_cluster,
        vec![(i(1), peer(1)), (i(2), peer(2)), (i(3), peer(3))]
    );
}

#[test]
fn an_unstarted_learner_with_its_config_is_waited_for() {
    let g = given(vec![
        inst(1, InService),
        inst(2, PendingWait),
        inst(3, PendingWait),
    ])
    .record(1)
    .members(vec![voter(1), unstarted_learner(2)]);
    let Step::Publish { config, .. } = g.plan() else {
        panic!()
    };
    let g = g.published(2, config, 990);
    // Instance 3 must not be added while 2's learner holds the one learner slot.
    assert_eq!(
        g.plan(),
        Step::Wait(Wait::LearnerStarting { instance: i(2) })
    );
}

#[test]
fn a_config_made_stale_by_a_membership_change_is_republished() {
    let g = given(vec![inst(1, InService), inst(2, PendingWait)])
        .record(1)
        .members(vec![voter(1), unstarted_learner(2)])
        .published(2, seed_config(2), 990);
    assert!(matches!(g.plan(), Step::Publish { instance, .. } if instance == i(2)));
}

#[test]
fn a_started_learner_is_promoted() {
    let g = given(vec![inst(1, InService), inst(2, PendingWait)])
        .record(1)
        .members(vec![voter(1), learner(2)])
        .some_config(2);
    assert_eq!(
        g.plan(),
        Step::Promote {
            instance: i(2),
            member: id(2),
            endpoint: ANSWERING.into()
        }
    );
}

#[test]
fn launch_completes_with_continue_only_for_a_started_voter() {
    let g = given(vec![inst(1, InService), inst(2, PendingWait)])
        .record(1)
        .members(vec![voter(1), voter(2)])
        .some_config(2);
    assert_eq!(
        g.plan(),
        complete(2, Transition::Launch, ActionResult::Continue)
    );
}

#[test]
fn the_seed_launch_completes_once_it_answers() {
    let g = given(vec![inst(1, PendingWait), inst(2, PendingWait)])
        .record(1)
        .members(vec![voter(1)])
        .some_config(1);
    assert_eq!(
        g.plan(),
        complete(1, Transition::Launch, ActionResult::Continue)
    );
}

#[test]
fn joins_wait_for_an_unstarted_voter_never_adding_behind_it() {
    let mut v2 = voter(2);
    v2.name.clear();
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        inst(3, PendingWait),
    ])
    .record(1)
    .members(vec![voter(1), v2]);
    assert_eq!(
        g.plan(),
        Step::Wait(Wait::VoterNotStarted { member: id(2) })
    );
}

#[test]
fn an_instance_held_without_any_event_is_still_joined() {
    // Nothing but the observation: a Pending:Wait instance with no member gets one.
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        inst(5, PendingWait),
    ])
    .record(1)
    .members(vec![voter(1), voter(2)]);
    assert!(matches!(g.plan(), Step::AddLearner { instance, .. } if instance == i(5)));
}

#[test]
fn an_orphaned_learner_is_always_removed() {
    let g = given(vec![inst(1, InService)])
        .record(1)
        .members(vec![voter(1), unstarted_learner(2)]);
    assert!(matches!(
        g.plan(),
        Step::RemoveMember { member, reason: Removal::InstanceGone, .. } if member == id(2)
    ));
}

#[test]
fn a_learner_that_never_starts_is_removed_then_its_launch_abandoned() {
    let g = given(vec![inst(1, InService), inst(2, PendingWait)])
        .record(1)
        .members(vec![voter(1), unstarted_learner(2)]);
    let Step::Publish { config, .. } = g.plan() else {
        panic!()
    };
    let g = g.published(2, config, 300); // 700 s ago, the timeout is 600 s
    assert_eq!(
        g.plan(),
        Step::RemoveMember {
            member: id(2),
            instance: Some(i(2)),
            reason: Removal::LearnerNeverStarted,
            endpoint: ANSWERING.into()
        }
    );
    let g = given(vec![inst(1, InService), inst(2, PendingWait)])
        .record(1)
        .members(vec![voter(1)])
        .some_config(2);
    assert_eq!(
        g.plan(),
        complete(2, Transition::Launch, ActionResult::Abandon)
    );
}

#[test]
fn members_are_matched_by_peer_url_before_they_have_a_name() {
    let mut g = given(vec![inst(1, InService), inst(2, PendingWait)])
        .record(1)
        .members(vec![voter(1), unstarted_learner(2)]);
    g.obs.instances[1].address = Some(addr(7));
    // Instance 2 now lives elsewhere: the learner at .2 is nobody's, and it goes.
    assert!(matches!(g.plan(), Step::RemoveMember { member, .. } if member == id(2)));
}

#[test]
fn instances_marked_unhealthy_never_join_or_seed() {
    let g = given(vec![inst(1, InService), unhealthy_inst(2, PendingWait)])
        .record(1)
        .members(vec![voter(1)]);
    assert_eq!(g.plan(), Step::Idle);
    let g = given(vec![unhealthy_inst(1, PendingWait), inst(2, PendingWait)]);
    assert!(matches!(g.plan(), Step::CreateCluster(r) if r.seed == i(2)));
}

#[test]
fn a_new_instance_on_a_dead_members_address_does_not_inherit_it() {
    // Instance 4 got 2's old address; member 2 (started, named i-00000002) is dead and gone.
    let mut four = inst(4, PendingWait);
    four.address = Some(addr(2));
    let g = given(vec![inst(1, InService), inst(3, InService), four.clone()])
        .record(1)
        .members(vec![voter(1), voter(2), voter(3)])
        .unhealthy(2);
    assert_eq!(
        g.plan(),
        Step::RemoveMember {
            member: id(2),
            instance: None,
            reason: Removal::InstanceGone,
            endpoint: ANSWERING.into()
        }
    );
    // While the dead member cannot be removed, 4 is neither completed nor added: it waits.
    let g = given(vec![inst(1, InService), four])
        .record(1)
        .members(vec![voter(1), voter(2), voter(3)])
        .unhealthy(2)
        .unhealthy(3);
    let plan = g.plan();
    assert!(matches!(plan, Step::Wait(_)), "{plan:?}");
    assert!(g.waits().contains(&Wait::JoinBlocked { member: id(2) }));
}

#[test]
fn a_join_waits_while_a_voter_is_down_and_the_dead_member_is_noted_meanwhile() {
    // etcd refuses every add while a voter is not connected: no AddLearner that can only fail,
    // and the dead member is noted (then replaced) instead.
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        inst(3, InService),
        inst(4, PendingWait),
    ])
    .record(1)
    .members(vec![voter(1), voter(2), voter(3)])
    .unhealthy(3);
    assert_eq!(
        g.plan(),
        Step::NoteDown {
            instance: i(3),
            since: 1000
        }
    );
    let g = g.down_since(3, 990);
    assert_eq!(g.plan(), Step::Wait(Wait::JoinBlocked { member: id(3) }));
}

#[test]
fn a_replacement_launched_first_joins_once_the_dead_member_on_the_unhealthy_instance_is_removed() {
    // The group's maintenance policy launches 4 before terminating 3, which we marked Unhealthy.
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        unhealthy_inst(3, InService),
        inst(4, PendingWait),
    ])
    .record(1)
    .members(vec![voter(1), voter(2), voter(3)])
    .unhealthy(3)
    .down_since(3, 1);
    assert_eq!(
        g.plan(),
        Step::RemoveMember {
            member: id(3),
            instance: Some(i(3)),
            reason: Removal::Replaced,
            endpoint: ANSWERING.into()
        }
    );
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        unhealthy_inst(3, InService),
        inst(4, PendingWait),
    ])
    .record(1)
    .members(vec![voter(1), voter(2)]);
    assert!(matches!(g.plan(), Step::AddLearner { instance, .. } if instance == i(4)));
}
