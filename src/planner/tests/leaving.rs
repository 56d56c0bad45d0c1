//! `leaving.rs`'s removals (rule 2): members leave before their instances die, unhealthy ones
//! first, each only while the healthy voters left keep a quorum; the last voter leaves only
//! after its replacement has joined.

use super::*;

#[test]
fn a_terminating_member_is_removed_while_alive() {
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        inst(3, TerminatingWait),
    ])
    .record(1)
    .members(vec![voter(1), voter(2), voter(3)]);
    assert_eq!(
        g.plan(),
        Step::RemoveMember {
            member: id(3),
            instance: Some(i(3)),
            reason: Removal::Terminating,
            endpoint: ANSWERING.into()
        }
    );
}

#[test]
fn a_terminating_leader_hands_leadership_to_a_staying_healthy_voter_first() {
    let g = given(vec![
        inst(1, TerminatingWait),
        inst(2, TerminatingWait),
        inst(3, InService),
    ])
    .record(1)
    .members(vec![voter(1), voter(2), voter(3)])
    .leader(1);
    assert_eq!(
        g.plan(),
        Step::TransferLeadership {
            from: id(1),
            to: id(3),
            leader_endpoint: "http://10.0.0.1:2379".into()
        }
    );
}

#[test]
fn a_leader_leaving_a_group_scaled_to_zero_hands_over_to_the_voter_that_leaves_last() {
    // The nemesis, seed 708: the leader of two removed at once; the survivor, elected alone,
    // answered a linearizable read below a write the old leader had acknowledged.
    let two = given(vec![inst(1, TerminatingWait), inst(2, TerminatingWait)])
        .record(1)
        .members(vec![voter(1), voter(2)])
        .leader(1)
        .desired(0);
    assert!(
        matches!(two.plan(), Step::TransferLeadership { from, to, .. } if from == id(1) && to == id(2)),
        "{:?}",
        two.plan()
    );
    let three = |leader: u8| {
        given(vec![
            inst(1, TerminatingWait),
            inst(2, TerminatingWait),
            inst(3, TerminatingWait),
        ])
        .record(1)
        .members(vec![voter(1), voter(2), voter(3)])
        .leader(leader)
        .desired(0)
    };
    assert!(
        matches!(three(1).plan(), Step::TransferLeadership { from, to, .. } if from == id(1) && to == id(3))
    );
    // A leader that leaves later stays leader while the older ones go.
    assert!(matches!(three(3).plan(), Step::RemoveMember { member, .. } if member == id(1)));
    // A leader that does not answer is removed all the same: an election moves leadership anyway.
    assert!(
        matches!(three(1).unhealthy(1).plan(), Step::RemoveMember { member, .. } if member == id(1))
    );
}

#[test]
fn a_hung_terminating_leader_is_removed_without_a_handover() {
    let g = given(vec![
        inst(1, TerminatingWait),
        inst(2, InService),
        inst(3, InService),
    ])
    .record(1)
    .members(vec![voter(1), voter(2), voter(3)])
    .leader(1)
    .unhealthy(1);
    assert!(matches!(g.plan(), Step::RemoveMember { member, .. } if member == id(1)));
}

#[test]
fn after_removal_the_config_goes_then_the_action_completes() {
    let g = given(vec![inst(1, InService), inst(3, TerminatingWait)])
        .record(1)
        .members(vec![voter(1)])
        .some_config(3);
    assert_eq!(
        g.plan(),
        Step::Unpublish {
            instance: i(3),
            key_material: false
        }
    );
    let g = given(vec![inst(1, InService), inst(3, TerminatingWait)])
        .record(1)
        .members(vec![voter(1)]);
    assert_eq!(
        g.plan(),
        complete(3, Transition::Terminate, ActionResult::Continue)
    );
}

#[test]
fn simultaneous_terminations_remove_one_member_per_step_oldest_first() {
    let g = given(vec![
        inst(1, InService),
        inst(3, TerminatingWait),
        inst(2, TerminatingWait),
    ])
    .record(1)
    .members(vec![voter(1), voter(2), voter(3)]);
    assert!(matches!(g.plan(), Step::RemoveMember { member, .. } if member == id(2)));
}

#[test]
fn the_last_voter_is_not_removed_but_its_termination_completes() {
    // The group scaled to zero: the cluster ends with it.
    let g = given(vec![inst(1, TerminatingWait)])
        .record(1)
        .members(vec![voter(1)]);
    assert_eq!(g.obs.desired_capacity, 0);
    assert_eq!(
        g.plan(),
        complete(1, Transition::Terminate, ActionResult::Continue)
    );
}

#[test]
fn the_last_voter_waits_for_a_replacement_the_group_wants_but_has_not_listed() {
    // Terminated without decrementing (or replaced terminate-first): the group still wants one
    // instance, whose launch Auto Scaling has not listed yet.
    let g = given(vec![inst(1, TerminatingWait)])
        .record(1)
        .members(vec![voter(1)])
        .desired(1);
    assert_eq!(
        g.plan(),
        Step::Wait(Wait::LastVoterAwaitsReplacement {
            instance: i(1),
            desired_capacity: 1
        })
    );
}

#[test]
fn a_member_whose_instance_left_is_removed_when_quorum_holds() {
    let g = given(vec![inst(1, InService), inst(2, InService)])
        .record(1)
        .members(vec![voter(1), voter(2), voter(3)])
        .unhealthy(3);
    assert_eq!(
        g.plan(),
        Step::RemoveMember {
            member: id(3),
            instance: None,
            reason: Removal::InstanceGone,
            endpoint: ANSWERING.into()
        }
    );
}

#[test]
fn an_orphan_is_kept_when_removing_it_would_break_quorum() {
    // 4 voters, the orphan and another one dead: 2 healthy of 3 remaining is a quorum, so go;
    // with two dead besides the orphan, 1 of 3 is not.
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        inst(3, InService),
    ])
    .record(1)
    .members(vec![voter(1), voter(2), voter(3), voter(4)])
    .unhealthy(4)
    .unhealthy(3)
    .unhealthy(2)
    .down_since(2, 999)
    .down_since(3, 999);
    assert_eq!(
        g.plan(),
        Step::Wait(Wait::QuorumGuard {
            member: id(4),
            instance: None,
            blocking: vec![id(2), id(3), id(4)]
        })
    );
}

#[test]
fn a_healthy_leaving_member_is_held_while_another_voter_is_down() {
    // Removing 3 (alive) with 2 dead would leave one answering voter of two: no quorum.
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        inst(3, TerminatingWait),
    ])
    .record(1)
    .members(vec![voter(1), voter(2), voter(3)])
    .unhealthy(2)
    .down_since(2, 990);
    let guard = Wait::QuorumGuard {
        member: id(3),
        instance: Some(i(3)),
        blocking: vec![id(2)],
    };
    assert_eq!(g.plan(), Step::Wait(guard.clone()));
    assert!(g.waits().contains(&guard));
}

#[test]
fn the_dead_member_is_removed_before_the_healthy_leaving_one() {
    // 2's instance is terminating too and its etcd is dead: it goes first, which restores the
    // margin that lets 3 go next.
    let g = given(vec![
        inst(1, InService),
        inst(2, TerminatingWait),
        inst(3, TerminatingWait),
    ])
    .record(1)
    .members(vec![voter(1), voter(2), voter(3)])
    .unhealthy(2);
    let mut g3 = g;
    g3.obs.instances[1].launched_at = 50; // 2 leaves later than 3: health, not age, decides
    assert_eq!(
        g3.plan(),
        Step::RemoveMember {
            member: id(2),
            instance: Some(i(2)),
            reason: Removal::Terminating,
            endpoint: ANSWERING.into()
        }
    );
    let g = given(vec![inst(1, InService), inst(3, TerminatingWait)])
        .record(1)
        .members(vec![voter(1), voter(3)]);
    assert!(matches!(g.plan(), Step::RemoveMember { member, .. } if member == id(3)));
}

#[test]
fn a_dead_orphan_goes_before_a_healthy_leaving_member() {
    let g = given(vec![inst(1, InService), inst(3, TerminatingWait)])
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
}

#[test]
fn the_last_voter_is_held_while_its_replacement_joins() {
    let g = given(vec![inst(1, TerminatingWait), inst(2, PendingWait)])
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
    assert!(g.waits().contains(&Wait::LastVoterHeld {
        instance: i(1),
        replacement: i(2)
    }));
    // A replacement whose address EC2 has not reported yet still holds the last voter.
    let mut bare = inst(2, PendingWait);
    bare.address = None;
    let g = given(vec![inst(1, TerminatingWait), bare])
        .record(1)
        .members(vec![voter(1)]);
    assert_eq!(
        g.plan(),
        Step::Wait(Wait::LastVoterHeld {
            instance: i(1),
            replacement: i(2)
        })
    );
    // Once the replacement is a voter, leadership moves and the old one goes.
    let g = given(vec![inst(1, TerminatingWait), inst(2, PendingWait)])
        .record(1)
        .members(vec![voter(1), voter(2)])
        .leader(1);
    assert!(
        matches!(g.plan(), Step::TransferLeadership { from, to, .. } if from == id(1) && to == id(2))
    );
}
