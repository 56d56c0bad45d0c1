//! mod.rs's ranking, across rules: nothing answering allows no membership change,
//! terminations come before joins, and a converged cluster is idle.

use super::*;

#[test]
fn unreachable_cluster_changes_nothing_even_for_terminations() {
    // Members (their configs published) whose etcd does not answer. (A terminating instance
    // that never had a config never held data: `instances_that_never_held_data_are_let_go…`.)
    let g = given(vec![inst(2, TerminatingWait), inst(3, InService)])
        .record(1)
        .some_config(2)
        .some_config(3);
    assert!(matches!(
        g.plan(),
        Step::Wait(Wait::ClusterUnreachable { .. })
    ));
}

#[test]
fn terminations_come_before_joins() {
    let g = given(vec![
        inst(1, InService),
        inst(2, TerminatingWait),
        inst(3, PendingWait),
    ])
    .record(1)
    .members(vec![voter(1), voter(2)]);
    assert!(matches!(g.plan(), Step::RemoveMember { member, .. } if member == id(2)));
}

#[test]
fn a_converged_cluster_is_idle() {
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        inst(3, InService),
    ])
    .record(1)
    .members(vec![voter(1), voter(2), voter(3)])
    .some_config(1)
    .some_config(2)
    .some_config(3);
    assert_eq!(g.plan(), Step::Idle);
}

#[test]
fn standby_members_are_left_alone() {
    let g = given(vec![inst(1, InService), inst(2, LifecycleState::Standby)])
        .record(1)
        .members(vec![voter(1), voter(2)]);
    assert_eq!(g.plan(), Step::Idle);
}

#[test]
fn a_member_list_that_cannot_be_read_allows_no_membership_change() {
    // Same world as a_terminating_member_is_removed_while_alive, but etcd did not answer.
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        inst(3, TerminatingWait),
    ])
    .record(1)
    .some_config(3);
    assert!(matches!(
        g.plan(),
        Step::Wait(Wait::ClusterUnreachable { .. })
    ));
}
