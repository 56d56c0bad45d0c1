//! Table tests: each case is one rule of the module doc, stated as given / expect.

use super::*;
use crate::config::{Scheme, Topology};
use crate::model::{Published, PublishedState};

fn settings() -> Settings {
    Settings {
        topology: Topology {
            peer_scheme: Scheme::Http,
            peer_port: 2380,
            client_scheme: Scheme::Http,
            client_port: 2379,
        },
        cluster_name: "etcd".into(),
        learner_start_timeout_secs: 600,
    }
}

fn addr(n: u8) -> String {
    format!("10.0.0.{n}")
}
fn peer(n: u8) -> String {
    format!("http://10.0.0.{n}:2380")
}

/// Instance `i-0000000n` at 10.0.0.n, launched at second n.
fn inst(n: u8, state: LifecycleState) -> Instance {
    Instance {
        id: format!("i-0000000{n}"),
        state,
        address: Some(addr(n)),
        launched_at: n as i64,
    }
}
use LifecycleState::{InService, PendingWait, TerminatingWait};

/// A started voter on instance n, member id 100+n.
fn voter(n: u8) -> Member {
    Member {
        id: MemberId(100 + n as u64),
        name: format!("i-0000000{n}"),
        peer_urls: vec![peer(n)],
        client_urls: vec![format!("http://10.0.0.{n}:2379")],
        is_learner: false,
    }
}
fn learner(n: u8) -> Member {
    Member {
        is_learner: true,
        ..voter(n)
    }
}
fn unstarted_learner(n: u8) -> Member {
    Member {
        name: String::new(),
        client_urls: vec![],
        ..learner(n)
    }
}
fn id(n: u8) -> MemberId {
    MemberId(100 + n as u64)
}
fn i(n: u8) -> String {
    format!("i-0000000{n}")
}

struct Given {
    obs: Observation,
}

fn given(instances: Vec<Instance>) -> Given {
    Given {
        obs: Observation {
            instances,
            cluster: ClusterState::Unreachable {
                detail: "connection refused".into(),
            },
            published: PublishedState::default(),
            now: 1000,
        },
    }
}

impl Given {
    /// Members all healthy, the first voter leading.
    fn members(mut self, members: Vec<Member>) -> Self {
        let leader = members.iter().find(|m| !m.is_learner).map(|m| m.id);
        let healthy = members
            .iter()
            .filter(|m| m.is_started())
            .map(|m| m.id)
            .collect();
        self.obs.cluster = ClusterState::Known(ClusterView {
            cluster_id: 7,
            members,
            leader,
            healthy,
            endpoint: "http://10.0.0.1:2379".into(),
        });
        self
    }
    fn leader(mut self, n: u8) -> Self {
        if let ClusterState::Known(v) = &mut self.obs.cluster {
            v.leader = Some(id(n));
        }
        self
    }
    fn unhealthy(mut self, n: u8) -> Self {
        if let ClusterState::Known(v) = &mut self.obs.cluster {
            v.healthy.remove(&id(n));
        }
        self
    }
    fn record(mut self, seed: u8) -> Self {
        self.obs.published.cluster = Some(ClusterRecord {
            token: format!("etcd-{}", i(seed)),
            seed: i(seed),
            created_at: 1,
        });
        self
    }
    fn published(mut self, n: u8, config: MemberConfig, at: i64) -> Self {
        self.obs.published.members.insert(
            i(n),
            Published {
                config,
                published_at: at,
            },
        );
        self
    }
    /// Whatever config: for rules that only ask whether one exists.
    fn some_config(self, n: u8) -> Self {
        let c = seed_config(n);
        self.published(n, c, 1)
    }
    fn plan(&self) -> Step {
        plan(&self.obs, &settings())
    }
}

fn seed_config(n: u8) -> MemberConfig {
    MemberConfig {
        name: i(n),
        initial_cluster: vec![(i(n), peer(n))],
        state: InitialState::New,
        token: format!("etcd-{}", i(n)),
        peer_url: peer(n),
        client_url: format!("http://10.0.0.{n}:2379"),
    }
}

fn complete(n: u8, transition: Transition, result: ActionResult) -> Step {
    Step::Complete {
        instance: i(n),
        transition,
        result,
    }
}

// Rule 1: bootstrap exactly once.

#[test]
fn empty_group_does_nothing() {
    assert_eq!(given(vec![]).plan(), Step::Idle);
}

#[test]
fn no_record_and_no_member_creates_the_cluster_seeded_by_the_oldest_instance() {
    let mut young = inst(1, PendingWait);
    young.launched_at = 50;
    let g = given(vec![young, inst(3, PendingWait), inst(2, PendingWait)]);
    assert_eq!(
        g.plan(),
        Step::CreateCluster(ClusterRecord {
            token: "etcd-i-00000002".into(),
            seed: i(2),
            created_at: 1000,
        })
    );
}

#[test]
fn seed_ties_on_launch_time_are_broken_by_instance_id() {
    let mut a = inst(4, PendingWait);
    let mut b = inst(3, PendingWait);
    a.launched_at = 9;
    b.launched_at = 9;
    match given(vec![a, b]).plan() {
        Step::CreateCluster(r) => assert_eq!(r.seed, i(3)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn terminating_instances_are_never_seeds() {
    let g = given(vec![inst(1, TerminatingWait), inst(2, PendingWait)]);
    assert!(matches!(g.plan(), Step::CreateCluster(r) if r.seed == i(2)));
}

#[test]
fn instances_in_service_never_seed_a_cluster() {
    // No record and nobody answering, but these may run an etcd the function cannot reach.
    let g = given(vec![inst(1, InService), inst(2, InService)]);
    assert_eq!(g.plan(), Step::Idle);
    let g = given(vec![inst(1, InService), inst(2, PendingWait)]);
    assert!(matches!(g.plan(), Step::CreateCluster(r) if r.seed == i(2)));
}

#[test]
fn after_the_record_the_seed_gets_a_new_cluster_config_of_itself() {
    let g = given(vec![inst(1, PendingWait), inst(2, PendingWait)]).record(1);
    assert_eq!(
        g.plan(),
        Step::Publish {
            instance: i(1),
            config: seed_config(1)
        }
    );
}

#[test]
fn once_the_seed_config_is_out_it_waits_for_the_seed() {
    let g = given(vec![inst(1, PendingWait)])
        .record(1)
        .published(1, seed_config(1), 999);
    assert_eq!(g.plan(), Step::Wait(Wait::SeedStarting { instance: i(1) }));
}

#[test]
fn a_record_and_no_member_answering_never_bootstraps_again() {
    // The seed is gone and nobody answers: an unreachable cluster, not a new one.
    let g = given(vec![inst(2, PendingWait), inst(3, InService)]).record(1);
    assert!(matches!(
        g.plan(),
        Step::Wait(Wait::ClusterUnreachable { .. })
    ));
}

#[test]
fn a_seed_in_service_with_nobody_answering_is_an_unreachable_cluster_not_a_bootstrap() {
    // Even with the seed's config gone, a `new` config is never written again once it served.
    let g = given(vec![inst(1, InService), inst(2, InService)]).record(1);
    assert!(matches!(
        g.plan(),
        Step::Wait(Wait::ClusterUnreachable { .. })
    ));
}

#[test]
fn unreachable_cluster_changes_nothing_even_for_terminations() {
    let g = given(vec![inst(2, TerminatingWait), inst(3, InService)]).record(1);
    assert!(matches!(
        g.plan(),
        Step::Wait(Wait::ClusterUnreachable { .. })
    ));
}

// Rule 2: join as a learner, one at a time.

#[test]
fn a_new_instance_joins_as_a_learner() {
    let g = given(vec![inst(1, InService), inst(2, PendingWait)])
        .record(1)
        .members(vec![voter(1)]);
    assert_eq!(
        g.plan(),
        Step::AddLearner {
            instance: i(2),
            peer_url: peer(2)
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
    let Step::Publish { instance, config } = g.plan() else {
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
            member: id(2)
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
        .published(1, seed_config(1), 5);
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

// Rule 3: remove before death.

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
            reason: Removal::Terminating
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
    assert_eq!(g.plan(), Step::Unpublish { instance: i(3) });
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
    let g = given(vec![inst(1, TerminatingWait)])
        .record(1)
        .members(vec![voter(1)]);
    assert_eq!(
        g.plan(),
        complete(1, Transition::Terminate, ActionResult::Continue)
    );
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

// Rule 4: clean up what events missed.

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
            reason: Removal::InstanceGone
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
    .unhealthy(2);
    assert_eq!(g.plan(), Step::Wait(Wait::QuorumGuard { member: id(4) }));
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
            reason: Removal::LearnerNeverStarted
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
fn configs_of_instances_that_are_gone_are_deleted() {
    let g = given(vec![inst(1, InService)])
        .record(1)
        .members(vec![voter(1)])
        .some_config(1)
        .some_config(9);
    assert_eq!(g.plan(), Step::Unpublish { instance: i(9) });
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

// Rule 5 and the hook's heartbeat.

#[test]
fn a_member_list_that_cannot_be_read_allows_no_membership_change() {
    // Same world as a_terminating_member_is_removed_while_alive, but etcd did not answer.
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        inst(3, TerminatingWait),
    ])
    .record(1);
    assert!(matches!(
        g.plan(),
        Step::Wait(Wait::ClusterUnreachable { .. })
    ));
}

#[test]
fn held_instances_are_the_ones_waiting_in_a_hook() {
    let g = given(vec![
        inst(1, InService),
        inst(2, PendingWait),
        inst(3, TerminatingWait),
    ]);
    assert_eq!(
        held(&g.obs),
        vec![(i(2), Transition::Launch), (i(3), Transition::Terminate)]
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
