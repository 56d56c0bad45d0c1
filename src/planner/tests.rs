//! Table tests: each case is one rule of the module doc, stated as given / expect.

use super::*;
use crate::model::*;

fn settings() -> Settings {
    Settings::for_tests()
}

fn arn(n: u8) -> String {
    format!("arn:aws:ec2:us-east-1:123456789012:instance/i-0000000{n}")
}

/// The voter that answers the member list in `Given::members`: where membership calls go.
const ANSWERING: &str = "http://10.0.0.1:2379";

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
        arn: arn(n),
        state,
        address: Some(addr(n)),
        launched_at: n as i64,
        healthy: true,
        zone: None,
        etcd_version: Some(crate::model::Version::new(3, 6, 17)),
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
    /// `settings()` unless a test gives its own.
    settings: Option<Settings>,
}

fn given(instances: Vec<Instance>) -> Given {
    // As Auto Scaling keeps it after a scale-in: the instances not on their way out.
    let desired_capacity = instances
        .iter()
        .filter(|i| i.state.is_present() && i.state != LifecycleState::TerminatingWait)
        .count() as u32;
    Given {
        obs: Observation {
            instances,
            desired_capacity,
            cluster: ClusterState::unreachable("connection refused"),
            published: PublishedState::default(),
            backups: vec![],
            incomplete_backups: vec![],
            undescribed: Default::default(),
            zones: vec![],
            suspended: Default::default(),
            backups_failing: None,
            now: 1000,
        },
        settings: None,
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
            statuses: Default::default(),
            alarms: vec![],
            history_compacted: false,
            auth_enabled: false,
            root_refused: None,
            cluster_version: Some(crate::model::Version::new(3, 6, 0)),
            peer_connected: Default::default(),
        });
        self
    }
    fn leader(mut self, n: u8) -> Self {
        if let ClusterState::Known(v) = &mut self.obs.cluster {
            v.leader = Some(id(n));
        }
        self
    }
    /// The group's desired capacity, as a test says.
    fn desired(mut self, n: u32) -> Self {
        self.obs.desired_capacity = n;
        self
    }
    fn unhealthy(mut self, n: u8) -> Self {
        if let ClusterState::Known(v) = &mut self.obs.cluster {
            v.healthy.remove(&id(n));
        }
        self
    }
    /// Member `n` does not answer the function, yet an answering member reports a raft
    /// connection to it.
    fn cut_off(mut self, n: u8) -> Self {
        if let ClusterState::Known(v) = &mut self.obs.cluster {
            v.healthy.remove(&id(n));
            v.peer_connected.insert(id(n));
        }
        self
    }
    /// A record of a cluster that served, with the id `members` gives it.
    fn record(mut self, seed: u8) -> Self {
        self.obs.published.cluster = Some(ClusterRecord {
            state: RecordState::Served,
            cluster_id: Some(7),
            ..ClusterRecord::bootstrapping(format!("etcd-{}", i(seed)), i(seed), 1)
        });
        self
    }
    /// A record whose seed has not served yet.
    fn bootstrapping(mut self, seed: u8) -> Self {
        self.obs.published.cluster = Some(ClusterRecord::bootstrapping(
            format!("etcd-{}", i(seed)),
            i(seed),
            1,
        ));
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
        let c = MemberConfig {
            state: InitialState::Existing,
            ..seed_config(n)
        };
        self.published(n, c, 1)
    }
    fn plan(&self) -> Step {
        plan(&self.obs, self.settings.as_ref().unwrap_or(&settings()))
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
        auto_compaction_retention: "1h".into(),
        quota_backend_bytes: 2 << 30,
        snapshot_count: 10_000,
        restore: None,
        client_cert_auth: false,
        root_tokens: false,
        etcd_version: Some(crate::model::Version::new(3, 6, 17)),
        metrics_url: None,
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
        Step::CreateCluster(ClusterRecord::bootstrapping(
            "etcd-i-00000002".into(),
            i(2),
            1000
        ))
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
    let g = given(vec![inst(1, PendingWait), inst(2, PendingWait)]).bootstrapping(1);
    assert_eq!(
        g.plan(),
        Step::Publish {
            instance: i(1),
            instance_arn: arn(1),
            config: seed_config(1),
            certificate: None
        }
    );
}

#[test]
fn once_the_seed_config_is_out_it_waits_for_the_seed() {
    let g = given(vec![inst(1, PendingWait)])
        .bootstrapping(1)
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
fn a_vanished_seeds_config_is_deleted_not_rewritten() {
    // The record served; the seed's config still says `new`, and the seed's instance is gone.
    let g = given(vec![inst(2, InService), inst(3, InService)])
        .record(1)
        .members(vec![voter(2), voter(3)])
        .published(1, seed_config(1), 1);
    assert_eq!(
        g.plan(),
        Step::Unpublish {
            instance: i(1),
            key_material: false
        }
    );
    // Present, it is rewritten as before.
    let g = given(vec![inst(1, InService), inst(2, InService)])
        .record(1)
        .members(vec![voter(1), voter(2)])
        .published(1, seed_config(1), 1);
    assert!(matches!(g.plan(), Step::Publish { instance, .. } if instance == i(1)));
}

#[test]
fn key_material_of_a_gone_instance_goes_even_without_its_config() {
    // An invocation handed out 9's bundle and died before publishing its config; 9 is gone.
    let mut g = given(vec![inst(1, InService)])
        .record(1)
        .members(vec![voter(1)]);
    g.obs.published.cert_not_after.insert(i(9), 5000);
    assert_eq!(
        g.plan(),
        Step::Unpublish {
            instance: i(9),
            // Its certificate end says there is key material (whatever TLS says now).
            key_material: true
        }
    );
    // An instance still present keeps it (its config is on its way).
    let mut g = given(vec![inst(1, InService), inst(2, PendingWait)])
        .record(1)
        .members(vec![voter(1)]);
    g.obs.published.cert_not_after.insert(i(2), 5000);
    assert_ne!(
        g.plan(),
        Step::Unpublish {
            instance: i(2),
            key_material: false
        }
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
fn configs_of_instances_that_are_gone_are_deleted() {
    let g = given(vec![inst(1, InService)])
        .record(1)
        .members(vec![voter(1)])
        .some_config(1)
        .some_config(9);
    assert_eq!(
        g.plan(),
        Step::Unpublish {
            instance: i(9),
            key_material: false
        }
    );
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
    .record(1)
    .some_config(3);
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

#[test]
fn members_are_matched_by_peer_url_before_they_have_a_name() {
    let mut g = given(vec![inst(1, InService), inst(2, PendingWait)])
        .record(1)
        .members(vec![voter(1), unstarted_learner(2)]);
    g.obs.instances[1].address = Some(addr(7));
    // Instance 2 now lives elsewhere: the learner at .2 is nobody's, and it goes.
    assert!(matches!(g.plan(), Step::RemoveMember { member, .. } if member == id(2)));
}

// Compound faults (issue 7): unhealthy members go first, the quorum guard holds, dead members
// are replaced, seeds that never serve are re-seeded, the last voter is replaced before removal,
// and a started member is its instance by name only.

impl Given {
    fn down_since(mut self, n: u8, at: i64) -> Self {
        self.obs.published.down_since.insert(i(n), at);
        self
    }
    fn waits(&self) -> Vec<Wait> {
        assess(&self.obs, &settings()).waits
    }
}

fn unhealthy_inst(n: u8, state: LifecycleState) -> Instance {
    Instance {
        arn: arn(n),
        healthy: false,
        ..inst(n, state)
    }
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
fn a_member_first_seen_down_is_noted() {
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        inst(3, InService),
    ])
    .record(1)
    .members(vec![voter(1), voter(2), voter(3)])
    .unhealthy(2);
    assert_eq!(
        g.plan(),
        Step::NoteDown {
            instance: i(2),
            since: 1000
        }
    );
}

#[test]
fn a_member_down_too_long_is_replaced_once_the_others_keep_quorum() {
    let base = || {
        given(vec![
            inst(1, InService),
            inst(2, InService),
            inst(3, InService),
        ])
        .record(1)
        .members(vec![voter(1), voter(2), voter(3)])
        .unhealthy(2)
    };
    // Not yet long enough: waits, and says so.
    let g = base().down_since(2, 800);
    assert_eq!(
        g.plan(),
        Step::Wait(Wait::MemberDown {
            instance: i(2),
            member: id(2),
            down_secs: 200
        })
    );
    let g = base().down_since(2, 700);
    assert_eq!(
        g.plan(),
        Step::Replace {
            instance: i(2),
            why: Replacement::Down {
                member: id(2),
                down_secs: 300
            }
        }
    );
    // With another voter down too, removing 2 would leave one answering voter of two: no.
    let g = base().down_since(2, 700).unhealthy(3).down_since(3, 700);
    assert!(matches!(g.plan(), Step::Wait(Wait::MemberDown { .. })));
}

#[test]
fn a_member_only_the_function_cannot_reach_is_held_from_replacement_for_a_while() {
    let base = || {
        given(vec![
            inst(1, InService),
            inst(2, InService),
            inst(3, InService),
        ])
        .record(1)
        .members(vec![voter(1), voter(2), voter(3)])
    };
    // Down for the function past UNHEALTHY_REPLACE_SECS, its peers connected to it: a wait
    // that names it, not a replacement.
    let g = base().cut_off(2).down_since(2, 1);
    assert_eq!(
        g.plan(),
        Step::Wait(Wait::MemberUnreachableFromFunction {
            instance: i(2),
            member: id(2),
            down_secs: 999
        })
    );
    // Its first sight is noted as for any member that does not answer.
    assert!(matches!(base().cut_off(2).plan(), Step::NoteDown { .. }));
    // Held for PEER_VIEW_HOLD times UNHEALTHY_REPLACE_SECS only: a peer's gauge can outlive a
    // dead member, and one the function never reaches cannot be managed either.
    let mut g = base().cut_off(2).down_since(2, 1);
    let hold = leaving::PEER_VIEW_HOLD * settings().unhealthy_replace_secs;
    g.obs.now = 1 + hold - 1;
    assert!(matches!(
        g.plan(),
        Step::Wait(Wait::MemberUnreachableFromFunction { .. })
    ));
    g.obs.now = 1 + hold;
    assert!(matches!(g.plan(), Step::Replace { instance, .. } if instance == i(2)));
    // The peers' view only ever holds a replacement back: a member down for both is replaced.
    let g = base().unhealthy(2).down_since(2, 1);
    assert!(matches!(g.plan(), Step::Replace { instance, .. } if instance == i(2)));
}

#[test]
fn replacements_go_one_at_a_time_and_never_during_a_membership_change() {
    let five = || {
        given((1..=5).map(|n| inst(n, InService)).collect())
            .record(1)
            .members((1..=5).map(voter).collect())
            .unhealthy(2)
            .unhealthy(3)
            .down_since(2, 1)
            .down_since(3, 1)
    };
    assert!(matches!(five().plan(), Step::Replace { instance, .. } if instance == i(2)));
    // 2 is already marked: its dead member goes now (a replacement launched first could not
    // join while it counts), and 3 waits its turn.
    let mut g = five();
    g.obs.instances[1].healthy = false;
    assert_eq!(
        g.plan(),
        Step::RemoveMember {
            member: id(2),
            instance: Some(i(2)),
            reason: Removal::Replaced,
            endpoint: ANSWERING.into()
        }
    );
    let mut g = five();
    g.obs.instances[1].healthy = false;
    if let ClusterState::Known(v) = &mut g.obs.cluster {
        v.members.retain(|m| m.id != id(2));
    }
    // (Its down-mark stays while the group still lists it: it tells when it was marked.) 3 waits
    // its turn.
    assert_eq!(
        g.plan(),
        Step::Wait(Wait::MemberDown {
            instance: i(3),
            member: id(3),
            down_secs: 999
        })
    );
    // A learner joining is a membership change under way.
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        inst(3, InService),
        inst(4, PendingWait),
    ])
    .record(1)
    .members(vec![voter(1), voter(2), voter(3), unstarted_learner(4)])
    .unhealthy(2)
    .down_since(2, 1);
    let Step::Publish { config, .. } = g.plan() else {
        panic!("{:?}", g.plan())
    };
    let g = g.published(4, config, 999);
    assert_eq!(
        g.plan(),
        Step::Wait(Wait::LearnerStarting { instance: i(4) })
    );
    assert!(g.waits().contains(&Wait::MemberDown {
        instance: i(2),
        member: id(2),
        down_secs: 999
    }));
}

#[test]
fn a_down_mark_is_forgotten_once_the_member_answers_again() {
    let g = given(vec![inst(1, InService), inst(2, InService)])
        .record(1)
        .members(vec![voter(1), voter(2)])
        .down_since(2, 1);
    assert_eq!(g.plan(), Step::ForgetDown { instance: i(2) });
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

// A seed that never serves.

#[test]
fn a_seed_that_never_starts_is_abandoned_after_the_start_timeout() {
    let g = given(vec![inst(1, PendingWait), inst(2, PendingWait)])
        .bootstrapping(1)
        .published(1, seed_config(1), 1000 - 601);
    assert_eq!(
        g.plan(),
        complete(1, Transition::Launch, ActionResult::Abandon)
    );
}

#[test]
fn a_record_whose_seed_never_served_and_is_gone_is_reseeded() {
    let g = given(vec![inst(3, PendingWait), inst(2, PendingWait)]).bootstrapping(1);
    let Step::ReseedCluster { old, new, .. } = g.plan() else {
        panic!("{:?}", g.plan())
    };
    assert_eq!(old.seed, i(1));
    assert_eq!(new.seed, i(2));
    assert_ne!(new.token, old.token, "a new cluster never reuses the token");
    assert!(!new.has_served());
    // Leaving counts as gone: its terminate action is released first.
    let g = given(vec![inst(1, TerminatingWait), inst(2, PendingWait)]).bootstrapping(1);
    assert_eq!(
        g.plan(),
        complete(1, Transition::Terminate, ActionResult::Continue)
    );
    // Nobody to seed: wait for a launch.
    let g = given(vec![inst(2, InService)]).bootstrapping(1);
    assert_eq!(g.plan(), Step::Wait(Wait::NoSeed));
}

#[test]
fn a_record_that_served_is_never_reseeded() {
    let g = given(vec![inst(2, PendingWait)]).record(1);
    assert!(matches!(
        g.plan(),
        Step::Wait(Wait::ClusterUnreachable { .. })
    ));
    // Nor is a record written before `state` existed.
    let legacy: ClusterRecord =
        serde_json::from_str(r#"{"token":"etcd-i-00000001","seed":"i-00000001","created_at":1}"#)
            .unwrap();
    let mut g = given(vec![inst(2, PendingWait)]);
    g.obs.published.cluster = Some(legacy);
    assert!(matches!(
        g.plan(),
        Step::Wait(Wait::ClusterUnreachable { .. })
    ));
}

#[test]
fn the_record_notes_that_the_cluster_served_with_its_id() {
    let g = given(vec![inst(1, PendingWait)])
        .bootstrapping(1)
        .members(vec![voter(1)]);
    let Step::MarkServed(r) = g.plan() else {
        panic!("{:?}", g.plan())
    };
    assert!(r.has_served());
    assert_eq!(r.cluster_id, Some(7));
    assert_eq!(r.seed, i(1));
}

#[test]
fn a_member_of_another_cluster_is_never_believed() {
    let mut g = given(vec![inst(1, InService), inst(2, PendingWait)])
        .record(1)
        .members(vec![voter(1)]);
    g.obs.published.cluster.as_mut().unwrap().cluster_id = Some(8);
    assert!(matches!(
        g.plan(),
        Step::Wait(Wait::ClusterUnreachable { .. })
    ));
}

// The last voter.

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

// Identity.

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

#[test]
fn once_the_cluster_served_the_seed_config_never_says_new_again() {
    let g = given(vec![inst(1, InService), inst(2, InService)])
        .record(1)
        .members(vec![voter(1), voter(2)])
        .published(1, seed_config(1), 5)
        .some_config(2);
    let Step::Publish {
        instance, config, ..
    } = g.plan()
    else {
        panic!("{:?}", g.plan())
    };
    assert_eq!(instance, i(1));
    assert_eq!(config.state, InitialState::Existing);
}

#[test]
fn a_down_mark_goes_before_any_other_step_once_the_member_answers() {
    // A learner is waiting to be promoted (a step every time), and 2 answers again: its mark is
    // forgotten first, so a later blip does not count from the first one.
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        inst(3, PendingWait),
    ])
    .record(1)
    .members(vec![voter(1), voter(2), learner(3)])
    .down_since(2, 1);
    assert_eq!(g.plan(), Step::ForgetDown { instance: i(2) });
}

// Recovery from survivors: a majority's instances left the group for good, the rest answer.

fn with_backups(mut g: Given) -> Given {
    let mut s = settings();
    s.backup = Some(crate::config::BackupPolicy {
        interval_secs: 900,
        hourly_days: 7,
        daily_days: 90,
        recovery: crate::config::Recovery::Auto,
    });
    g.settings = Some(s);
    g
}

fn survivor(n: u8, revision: i64, voters: &[u8]) -> Survivor {
    Survivor {
        member: id(n),
        name: i(n),
        is_learner: false,
        endpoint: format!("http://10.0.0.{n}:2379"),
        cluster_id: 7,
        status: MemberStatus {
            revision,
            ..Default::default()
        },
        voters: voters.iter().map(|&v| voter(v)).collect(),
    }
}

fn backup_at(revision: i64) -> Backup {
    Backup {
        key: format!("p/etcd-i-00000001/{revision}"),
        token: format!("etcd-{}", i(1)),
        taken_at: 900,
        revision,
        size: 1,
        etcd_version: None,
    }
}

impl Given {
    fn survivors(mut self, survivors: Vec<Survivor>) -> Self {
        self.obs.cluster = ClusterState::Unreachable {
            detail: "no leader".into(),
            survivors,
        };
        self
    }
}

#[test]
fn a_lost_majority_with_a_newer_survivor_is_snapshotted_then_restored_from_it() {
    // 1, 2 and 3 were voters; 2 and 3 left the group for good; 1 answers without a leader; a
    // replacement (4) is launching.
    let g = || {
        with_backups(given(vec![inst(1, InService), inst(4, PendingWait)]))
            .record(1)
            .some_config(1)
            .some_config(2)
            .some_config(3)
            .survivors(vec![survivor(1, 50, &[1, 2, 3])])
    };
    let mut first = g();
    first.obs.backups = vec![backup_at(40)];
    assert_eq!(
        first.plan(),
        Step::Backup {
            member: id(1),
            endpoint: "http://10.0.0.1:2379".into(),
            reason: BackupReason::Survivor,
            // The lost generation's, as the survivor answers for itself.
            facts: SnapshotFacts {
                token: format!("etcd-{}", i(1)),
                revision: 50,
                cluster_id: 7,
                member: id(1).to_string(),
                etcd_version: String::new(),
                cluster_version: None,
                taken_at: 1000,
            }
        }
    );
    // Once its snapshot is stored (newest, revision 50), the restore seeds from 4.
    let mut then = g();
    let saved = Backup {
        key: "p/etcd-i-00000001/50".into(),
        taken_at: 1000,
        ..backup_at(50)
    };
    then.obs.backups = vec![backup_at(40), saved.clone()];
    assert!(
        matches!(then.plan(), Step::Restore { new, backup, .. } if new.seed == i(4) && backup == saved)
    );
    // A survivor behind the last backup is not snapshotted: the backup is restored.
    let mut behind = g();
    behind.obs.backups = vec![backup_at(60)];
    assert!(matches!(behind.plan(), Step::Restore { backup, .. } if backup.revision == 60));
    // While the store fails, which backup is freshest is unknown: nothing is snapshotted or
    // restored on a guess.
    for mut failing in [g(), then, behind] {
        failing.obs.backups = vec![];
        failing.obs.backups_failing = Some("AccessDenied".into());
        assert!(
            matches!(failing.plan(), Step::Wait(Wait::ClusterUnreachable { ref detail }) if detail.contains("backup store fails")),
            "{:?}",
            failing.plan()
        );
    }
}

#[test]
fn survivors_never_trigger_a_restore_while_a_lost_voter_might_come_back() {
    let base = |instances: Vec<Instance>, survivors: Vec<Survivor>| {
        let mut g = with_backups(given(instances))
            .record(1)
            .some_config(1)
            .some_config(2)
            .some_config(3)
            .survivors(survivors);
        g.obs.backups = vec![backup_at(10)];
        g
    };
    let unreachable = |g: Given| matches!(g.plan(), Step::Wait(Wait::ClusterUnreachable { .. }));
    // A partition: 2 and 3 are still in the group (whatever etcd says).
    assert!(unreachable(base(
        vec![inst(1, InService), inst(2, InService), inst(3, InService)],
        vec![survivor(1, 50, &[1, 2, 3])]
    )));
    // Terminating but still in the group: not gone yet.
    assert!(unreachable(base(
        vec![
            inst(1, InService),
            inst(2, TerminatingWait),
            inst(4, PendingWait)
        ],
        vec![survivor(1, 50, &[1, 2, 3])]
    )));
    // Only a minority lost (3 of 5 remain, one of them silent): the quorum may come back.
    assert!(unreachable(base(
        vec![inst(1, InService), inst(2, InService), inst(3, InService)],
        vec![
            survivor(1, 50, &[1, 2, 3, 4, 5]),
            survivor(2, 50, &[1, 2, 3, 4, 5])
        ]
    )));
    // A majority lost, but a remaining voter does not answer: it may hold newer data.
    assert!(unreachable(base(
        vec![inst(1, InService), inst(2, InService), inst(6, PendingWait)],
        vec![survivor(1, 50, &[1, 2, 3, 4, 5])]
    )));
    // A survivor of another cluster says nothing of ours.
    let mut foreign = survivor(1, 50, &[1, 2, 3]);
    foreign.cluster_id = 8;
    assert!(unreachable(base(
        vec![inst(1, InService), inst(4, PendingWait)],
        vec![foreign]
    )));
    // Backups off: nothing to restore into, so nothing changes.
    let mut off = base(
        vec![inst(1, InService), inst(4, PendingWait)],
        vec![survivor(1, 50, &[1, 2, 3])],
    );
    off.settings = None;
    assert!(unreachable(off));
    // Both remaining voters of five answer, three are gone: the freshest (2) is snapshotted.
    let g = base(
        vec![inst(1, InService), inst(2, InService), inst(6, PendingWait)],
        vec![
            survivor(1, 40, &[1, 2, 3, 4, 5]),
            survivor(2, 50, &[1, 2, 3, 4, 5]),
        ],
    );
    assert!(matches!(g.plan(), Step::Backup { member, .. } if member == id(2)));
}

#[test]
fn survivors_of_an_old_generation_are_replaced_one_at_a_time_once_the_new_one_serves() {
    // The restored generation (token etcd-i-00000004) serves on 4 and 5; 1 survived the old one.
    let g = || {
        let mut g = given(vec![
            inst(1, InService),
            inst(4, InService),
            inst(5, InService),
        ])
        .members(vec![voter(4), voter(5)])
        .record(4)
        .some_config(4)
        .some_config(5)
        .some_config(1);
        let old = g.obs.published.members.get_mut(&i(1)).unwrap();
        old.config.token = "etcd-i-00000001".into();
        g
    };
    assert_eq!(
        g().plan(),
        Step::Replace {
            instance: i(1),
            why: Replacement::OldGeneration {
                token: "etcd-i-00000001".into()
            }
        }
    );
    // Not while a voter of the new generation is down, nor while another change is under way.
    assert!(!matches!(g().unhealthy(5).plan(), Step::Replace { .. }));
    let mut busy = g();
    busy.obs.instances.push(Instance {
        healthy: false,
        ..inst(6, InService)
    });
    assert!(!matches!(busy.plan(), Step::Replace { .. }));
    // An instance of the current generation without a member is no survivor.
    let mut current = g();
    let c = current.obs.published.members.get_mut(&i(1)).unwrap();
    c.config.token = "etcd-i-00000004".into();
    assert!(!matches!(current.plan(), Step::Replace { .. }));
}

// Rotation (TLS=managed): certificates renew by replacement.

#[test]
fn a_member_certificate_with_a_third_of_its_life_left_is_replaced_one_at_a_time() {
    let life = 90 * 86_400;
    let g = || {
        let mut g = given((1..=3).map(|n| inst(n, InService)).collect())
            .record(1)
            .members((1..=3).map(voter).collect());
        let mut s = settings();
        s.member_cert_secs = Some(life);
        g.settings = Some(s);
        // 1 has most of its life; 2 and 3 are past two thirds, 3 ends first.
        let now = g.obs.now;
        for (n, left) in [(1, life / 2), (2, life / 3 - 10), (3, life / 3 - 20)] {
            g.obs.published.cert_not_after.insert(i(n), now + left);
        }
        g
    };
    assert_eq!(
        g().plan(),
        Step::Replace {
            instance: i(3),
            why: Replacement::CertificateExpiring {
                not_after: 1000 + life / 3 - 20
            }
        }
    );
    // Not while a voter is down, an instance is being replaced or launched, or TLS is off.
    assert!(!matches!(g().unhealthy(1).plan(), Step::Replace { .. }));
    let mut replacing = g();
    replacing.obs.instances[0].healthy = false;
    assert!(!matches!(
        replacing.plan(),
        Step::Replace {
            why: Replacement::CertificateExpiring { .. },
            ..
        }
    ));
    let mut launching = g();
    launching.obs.instances.push(inst(4, PendingWait));
    assert!(!matches!(
        launching.plan(),
        Step::Replace {
            why: Replacement::CertificateExpiring { .. },
            ..
        }
    ));
    let mut off = g();
    off.settings = None;
    assert!(!matches!(off.plan(), Step::Replace { .. }));
    // Nothing near its end: nothing to do.
    let mut fresh = g();
    fresh.obs.published.cert_not_after.clear();
    fresh
        .obs
        .published
        .cert_not_after
        .insert(i(3), 1000 + life / 2);
    assert_eq!(fresh.plan(), Step::Idle);
}

#[test]
fn survivors_restore_only_when_every_list_agrees_and_every_member_of_the_generation_answers() {
    let base = |instances: Vec<Instance>, survivors: Vec<Survivor>| {
        let mut g = with_backups(given(instances))
            .record(1)
            .some_config(1)
            .some_config(2)
            .survivors(survivors);
        g.obs.backups = vec![backup_at(10)];
        g
    };
    let unreachable = |g: &Given| matches!(g.plan(), Step::Wait(Wait::ClusterUnreachable { .. }));
    // 1's list is stale ({1,2,3,4,5}: 3 of 5 gone), 2's is current ({1,2,3}: 2 of 3 remain, a
    // quorum that comes back when the partition between them heals): no restore.
    let g = base(
        vec![inst(1, InService), inst(2, InService), inst(6, PendingWait)],
        vec![
            survivor(1, 50, &[1, 2, 3, 4, 5]),
            survivor(2, 50, &[1, 2, 3]),
        ],
    );
    assert!(unreachable(&g));
    // A learner of this generation on a present instance that does not answer may hold newer
    // data than the voters: wait.
    let mut silent_learner = base(
        vec![
            inst(1, InService),
            inst(2, PendingWait),
            inst(6, PendingWait),
        ],
        vec![survivor(1, 50, &[1, 3, 4])],
    );
    let c = silent_learner.obs.published.members.get_mut(&i(2)).unwrap();
    c.config.token = "etcd-i-00000001".into();
    assert!(unreachable(&silent_learner));
    // Once it answers and is the freshest, its data is what is kept.
    let mut learner = survivor(2, 60, &[1, 3, 4]);
    learner.is_learner = true;
    let g = Given {
        obs: Observation {
            cluster: ClusterState::Unreachable {
                detail: String::new(),
                survivors: vec![survivor(1, 50, &[1, 3, 4]), learner],
            },
            ..silent_learner.obs.clone()
        },
        settings: silent_learner.settings.clone(),
    };
    assert!(matches!(g.plan(), Step::Backup { member, .. } if member == id(2)));
}

#[test]
fn a_single_voter_is_rotated_too_and_only_while_nothing_else_changes() {
    let g = |instances| {
        let mut g = given(instances).record(1).members(vec![voter(1)]);
        let mut s = settings();
        s.member_cert_secs = Some(3600);
        g.settings = Some(s);
        g.obs.published.cert_not_after.insert(i(1), 1000 + 10);
        g
    };
    // Its certificate would end and the cluster of one stop: it is replaced (the last-voter
    // holds keep it until the replacement is a voter).
    assert!(matches!(
        g(vec![inst(1, InService)]).plan(),
        Step::Replace { instance, why: Replacement::CertificateExpiring { .. } } if instance == i(1)
    ));
    // Not again while its replacement launches.
    assert!(!matches!(
        g(vec![inst(1, InService), inst(2, PendingWait)]).plan(),
        Step::Replace { .. }
    ));
    // Marked, and terminating before Auto Scaling lists the replacement: held, not let go.
    let mut marked = g(vec![inst(1, TerminatingWait)]).desired(1);
    marked.obs.instances[0].healthy = false;
    assert!(matches!(
        marked.plan(),
        Step::Wait(Wait::LastVoterAwaitsReplacement { instance, .. }) if instance == i(1)
    ));
}

#[test]
fn auth_is_turned_on_once_every_voter_answers_with_a_config_that_verifies_root_tokens() {
    let on = Settings {
        etcd_auth: true,
        ..settings()
    };
    let served = |tokens: [bool; 3]| {
        let mut g = given((1..=3).map(|n| inst(n, InService)).collect())
            .members((1..=3).map(voter).collect())
            .record(1);
        for (n, t) in (1..=3).zip(tokens) {
            let c = MemberConfig {
                state: InitialState::Existing,
                root_tokens: t,
                etcd_version: None,
                ..seed_config(n)
            };
            g = g.published(n, c, 1);
        }
        g.settings = Some(on.clone());
        g
    };
    assert_eq!(
        served([true; 3]).plan(),
        Step::EnableAuth {
            endpoint: ANSWERING.into()
        }
    );
    // ETCD_AUTH=off: never.
    let mut off = served([true; 3]);
    off.settings = None;
    assert_ne!(
        off.plan(),
        Step::EnableAuth {
            endpoint: ANSWERING.into()
        }
    );
    // Already on.
    let mut done = served([true; 3]);
    if let ClusterState::Known(v) = &mut done.obs.cluster {
        v.auth_enabled = true;
    }
    assert_ne!(
        done.plan(),
        Step::EnableAuth {
            endpoint: ANSWERING.into()
        }
    );
    // A member of an older config would refuse the function's tokens: not until it is replaced.
    assert_ne!(
        served([true, false, true]).plan(),
        Step::EnableAuth {
            endpoint: ANSWERING.into()
        }
    );
    // A member not answering, or a learner joining: membership first.
    assert_ne!(
        served([true; 3]).unhealthy(2).plan(),
        Step::EnableAuth {
            endpoint: ANSWERING.into()
        }
    );
    let mut joining = served([true; 3]);
    joining
        .obs
        .instances
        .push(inst(4, LifecycleState::PendingWait));
    if let ClusterState::Known(v) = &mut joining.obs.cluster {
        v.members.push(learner(4));
    }
    assert_ne!(
        joining.plan(),
        Step::EnableAuth {
            endpoint: ANSWERING.into()
        }
    );
}

// The group as operators run it (issue 27): suspended processes, marks that lead nowhere,
// certificates that end together.

#[test]
fn a_dead_member_is_not_marked_while_the_group_would_not_replace_it() {
    let base = || {
        given((1..=3).map(|n| inst(n, InService)).collect())
            .record(1)
            .members((1..=3).map(voter).collect())
            .unhealthy(2)
            .down_since(2, 700)
    };
    assert!(matches!(base().plan(), Step::Replace { .. }));
    for process in ["ReplaceUnhealthy", "Launch", "Terminate"] {
        let mut g = base();
        g.obs.suspended.insert(process.into());
        assert_eq!(
            g.plan(),
            Step::Wait(Wait::ReplacementSuspended {
                instance: i(2),
                processes: vec![process.into()],
            }),
            "{process}"
        );
    }
    // Another process suspended (AZRebalance, say) keeps nothing from being replaced.
    let mut g = base();
    g.obs.suspended.insert("AZRebalance".into());
    assert!(matches!(g.plan(), Step::Replace { .. }));
}

#[test]
fn an_unhealthy_mark_that_led_nowhere_for_long_is_no_replacement_under_way() {
    // 1's etcd died, the function marked it Unhealthy (when: `marked/`) and removed its member,
    // and the group never replaced it (no capacity of the type in its zone, a launch that
    // fails); then 2's etcd dies.
    let base = |marked_at: Option<i64>| {
        let mut g = given((1..=5).map(|n| inst(n, InService)).collect())
            .record(2)
            .members((2..=5).map(voter).collect())
            .down_since(1, 0)
            .unhealthy(2)
            .down_since(2, 0);
        g.obs.instances[0].healthy = false;
        g.obs.now = 10_000;
        if let Some(at) = marked_at {
            g.obs.published.marked.insert(i(1), at);
        }
        g
    };
    let waits = |g: &Given| matches!(g.plan(), Step::Wait(Wait::MemberDown { .. }));
    let replaces_2 =
        |g: &Given| matches!(g.plan(), Step::Replace { instance, .. } if instance == i(2));
    // Marked just now (though down for hours): a replacement under way, 2 waits its turn.
    assert!(
        waits(&base(Some(10_000))),
        "{:?}",
        base(Some(10_000)).plan()
    );
    // Marked by someone else (no time of ours): under way until it leaves.
    assert!(waits(&base(None)));
    // Marked long ago with nothing happening: 2 is replaced.
    let stuck = base(Some(10_000 - super::leaving::STUCK_SECS - 1));
    assert!(replaces_2(&stuck), "{:?}", stuck.plan());
    // Unhealthy in Standby, which the group never replaces: no replacement under way.
    let mut standby = base(Some(10_000));
    standby.obs.instances[0].state = LifecycleState::Standby;
    assert!(replaces_2(&standby), "{:?}", standby.plan());
}

#[test]
fn certificates_that_end_together_are_renewed_apart() {
    let life = 90 * 86_400;
    let spreads: Vec<i64> = (1..=5)
        .map(|n| super::leaving::spread(&i(n), life))
        .collect();
    assert!(
        spreads.iter().all(|s| (0..life / 6).contains(s)),
        "{spreads:?}"
    );
    let mut distinct = spreads.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), spreads.len(), "{spreads:?}");
    // Three voters whose certificates end together: the first one due is the one whose renewal
    // comes earliest, and the others are not due at that moment.
    let g = |left: i64| {
        let mut g = given((1..=3).map(|n| inst(n, InService)).collect())
            .record(1)
            .members((1..=3).map(voter).collect());
        let mut s = settings();
        s.member_cert_secs = Some(life);
        g.settings = Some(s);
        for n in 1..=3 {
            g.obs
                .published
                .cert_not_after
                .insert(i(n), g.obs.now + left);
        }
        g
    };
    let (first, spread) = (1..=3)
        .map(|n| (n, super::leaving::spread(&i(n), life)))
        .max_by_key(|(_, s)| *s)
        .unwrap();
    let second = (1..=3)
        .map(|n| super::leaving::spread(&i(n), life))
        .filter(|s| *s < spread)
        .max()
        .unwrap();
    let at = life / 3 + (spread + second) / 2;
    assert!(matches!(g(at).plan(), Step::Replace { instance, .. } if instance == i(first)));
    assert!(!matches!(
        g(life / 3 + spread + 1).plan(),
        Step::Replace { .. }
    ));
}

// etcd versions: the gate, refusals, corruption (crate::versions has the rules' own table).

impl Given {
    /// Every member answers and says it runs `versions[k]` (by member order); the cluster
    /// version is `cluster`.
    fn versions(mut self, cluster: &str, versions: &[&str]) -> Self {
        if let ClusterState::Known(v) = &mut self.obs.cluster {
            v.cluster_version = Some(cluster.parse().unwrap());
            for (m, version) in v.members.clone().iter().zip(versions) {
                v.statuses.insert(
                    m.id,
                    MemberStatus {
                        version: version.to_string(),
                        ..Default::default()
                    },
                );
            }
        }
        self
    }
    fn alarm(mut self, n: u8, kind: &str) -> Self {
        if let ClusterState::Known(v) = &mut self.obs.cluster {
            v.alarms.push(Alarm {
                member: id(n),
                kind: kind.into(),
            });
        }
        self
    }
}

fn running(n: u8, state: LifecycleState, version: &str) -> Instance {
    Instance {
        etcd_version: version.parse().ok(),
        ..inst(n, state)
    }
}

/// A 3.5 cluster of two voters running `second`'s release beside 3.5.36, and a 3.6 joiner.
fn a_3_6_joiner_beside(second: &str) -> Given {
    given(vec![
        running(1, InService, "3.5.36"),
        running(2, InService, second),
        running(4, PendingWait, "3.6.17"),
    ])
    .record(1)
    .members(vec![voter(1), voter(2)])
    .versions("3.5.0", &["3.5.36", second])
}

#[test]
fn a_joiner_of_the_next_minor_waits_for_every_member_at_the_floor_and_names_them() {
    let g = a_3_6_joiner_beside("3.5.30");
    let plan = assess(&g.obs, &settings());
    let Step::Wait(Wait::VersionGate { instance, why }) = &plan.step else {
        panic!("{plan:?}")
    };
    assert_eq!(instance, &i(4));
    assert!(
        why.contains("i-00000002 runs 3.5.30") && why.contains("3.5.32"),
        "{why}"
    );
    // Another joiner of the cluster's minor is not held behind it.
    let mut g = g;
    g.obs.instances.push(running(5, PendingWait, "3.5.36"));
    assert!(matches!(g.plan(), Step::AddLearner { instance, .. } if instance == i(5)));
    // Every member at the floor: the 3.6 joiner is added.
    let g = a_3_6_joiner_beside("3.5.32");
    assert!(matches!(g.plan(), Step::AddLearner { instance, .. } if instance == i(4)));
}

#[test]
fn a_joiner_older_than_the_cluster_version_or_two_minors_ahead_is_refused_at_launch() {
    for (joiner, cluster, member) in [("3.5.36", "3.6.0", "3.6.17"), ("3.7.4", "3.5.0", "3.5.36")] {
        let g = given(vec![
            running(1, InService, member),
            running(4, PendingWait, joiner),
        ])
        .record(1)
        .members(vec![voter(1)])
        .versions(cluster, &[member]);
        let Step::RefuseLaunch { instance, why } = g.plan() else {
            panic!("{joiner} into {cluster}: {:?}", g.plan())
        };
        assert_eq!(instance, i(4));
        assert!(why.contains(joiner), "{why}");
    }
    // One already in service is never abandoned: it waits, named.
    let g = given(vec![
        running(1, InService, "3.6.17"),
        running(4, InService, "3.5.36"),
    ])
    .record(1)
    .members(vec![voter(1)])
    .versions("3.6.0", &["3.6.17"]);
    assert!(matches!(g.plan(), Step::Wait(Wait::VersionGate { instance, .. }) if instance == i(4)));
}

#[test]
fn an_instance_that_declares_no_version_is_never_joined_or_seeded() {
    let g = given(vec![
        running(1, InService, "3.6.17"),
        running(4, PendingWait, ""),
    ])
    .record(1)
    .members(vec![voter(1)]);
    assert!(
        matches!(g.plan(), Step::Wait(Wait::VersionGate { instance, why }) if instance == i(4) && why.contains("etcd-asg-etcd-version"))
    );
    // A seed without one: the record is created, its config never published.
    let g = given(vec![running(1, PendingWait, "")]).bootstrapping(1);
    assert_eq!(
        g.plan(),
        Step::Wait(Wait::VersionUnknown { instance: i(1) })
    );
}

#[test]
fn published_configs_name_the_release_and_its_corruption_checks() {
    let g = given(vec![running(1, PendingWait, "3.5.36")]).bootstrapping(1);
    let Step::Publish { config, .. } = g.plan() else {
        panic!("{:?}", g.plan())
    };
    let env = config.to_env();
    assert!(env.contains("ETCD_ASG_ETCD_VERSION=3.5.36\n"), "{env}");
    assert!(
        env.contains("ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED=true\n"),
        "{env}"
    );
    assert_eq!(MemberConfig::parse_env(&env).unwrap(), config);
    let g = given(vec![running(1, PendingWait, "3.7.4")]).bootstrapping(1);
    let Step::Publish { config, .. } = g.plan() else {
        panic!()
    };
    assert!(config
        .to_env()
        .contains("ETCD_FEATURE_GATES=InitialCorruptCheck=true,CompactHashCheck=true\n"));
}

#[test]
fn a_corrupt_member_is_replaced_never_a_majority_and_its_alarm_disarmed_once_gone() {
    let members = || vec![voter(1), voter(2), voter(3)];
    let three = || vec![inst(1, InService), inst(2, InService), inst(3, InService)];
    let g = given(three())
        .record(1)
        .members(members())
        .alarm(2, CORRUPT);
    assert_eq!(
        g.plan(),
        Step::Replace {
            instance: i(2),
            why: Replacement::Corrupt { member: id(2) }
        }
    );
    // Two of three named: replacing them would cost the quorum.
    let g = given(three())
        .record(1)
        .members(members())
        .alarm(2, CORRUPT)
        .alarm(3, CORRUPT);
    assert!(
        matches!(g.plan(), Step::Wait(Wait::CorruptMajority { members }) if members.len() == 2)
    );
    // Its member gone (removed at its termination): the alarm goes.
    let g = given(vec![inst(1, InService), inst(3, InService)])
        .record(1)
        .members(vec![voter(1), voter(3)])
        .alarm(2, CORRUPT);
    assert!(
        matches!(g.plan(), Step::Disarm { alarm, .. } if alarm.member == id(2) && alarm.kind == CORRUPT)
    );
    // An alarm naming no member (etcd's leader found hashes that differ, no majority agreeing):
    // an operator's call, never disarmed.
    let mut g = given(three()).record(1).members(members());
    if let ClusterState::Known(v) = &mut g.obs.cluster {
        v.alarms.push(Alarm {
            member: MemberId(0),
            kind: CORRUPT.into(),
        });
    }
    assert!(
        matches!(g.plan(), Step::Wait(Wait::CorruptMajority { .. })),
        "{:?}",
        g.plan()
    );
    // A corrupt learner is removed, never promoted.
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        inst(3, InService),
        inst(4, PendingWait),
    ])
    .record(1)
    .members(vec![voter(1), voter(2), voter(3), learner(4)])
    .alarm(4, CORRUPT);
    assert!(
        matches!(g.plan(), Step::RemoveMember { member, reason: Removal::CorruptLearner, .. } if member == id(4)),
        "{:?}",
        g.plan()
    );
    // The snapshot before its removal is never taken from it.
    let g = given(three())
        .record(1)
        .members(members())
        .alarm(1, CORRUPT);
    let ClusterState::Known(view) = &g.obs.cluster else {
        panic!()
    };
    let mut view = view.clone();
    for n in 1..=3 {
        view.statuses.insert(id(n), MemberStatus::default());
    }
    let (from, _) = snapshots::source(&view).unwrap();
    assert_ne!(from, id(1));
}

/// etcd's periodic check compares the leader's own hash with its followers' and can raise
/// CORRUPT against the leader itself (`server/etcdserver/corrupt.go`,
/// checkPeerHashes/TriggerCorruptAlarm). A learner added while a corrupt member leads receives
/// the corrupt data as its raft snapshot: leadership moves to a sound voter before the corrupt
/// leader is replaced, no learner is added while it leads, and a handover never goes to another
/// corrupt member.
#[test]
fn a_corrupt_leader_hands_over_before_it_is_replaced_and_no_learner_joins_under_it() {
    let members = || vec![voter(1), voter(2), voter(3)];
    let three = || vec![inst(1, InService), inst(2, InService), inst(3, InService)];
    // Member 1 leads (`members` makes the first voter the leader) and is corrupt.
    let g = given(three())
        .record(1)
        .members(members())
        .alarm(1, CORRUPT);
    assert_eq!(
        g.plan(),
        Step::TransferLeadership {
            from: id(1),
            to: id(2),
            leader_endpoint: "http://10.0.0.1:2379".into(),
        }
    );
    // A new instance launching meanwhile is not added under the corrupt leader.
    let mut four = three();
    four.push(inst(4, PendingWait));
    let g = given(four).record(1).members(members()).alarm(1, CORRUPT);
    assert!(
        !matches!(g.plan(), Step::AddLearner { .. }),
        "{:?}",
        g.plan()
    );
    // Once a sound member leads, the corrupt one is replaced.
    let g = given(three())
        .record(1)
        .members(members())
        .leader(2)
        .alarm(1, CORRUPT);
    assert_eq!(
        g.plan(),
        Step::Replace {
            instance: i(1),
            why: Replacement::Corrupt { member: id(1) }
        }
    );
    // A corrupt leader leaving on its own (a termination) hands over to a sound voter only:
    // member 2, the lowest id, is corrupt too (a majority of five stays sound).
    let five = (1..=5).map(|n| inst(n, InService)).collect::<Vec<_>>();
    let mut g = given(five)
        .record(1)
        .members((1..=5).map(voter).collect())
        .alarm(1, CORRUPT)
        .alarm(2, CORRUPT);
    g.obs.instances[0].state = TerminatingWait;
    assert!(
        matches!(g.plan(), Step::TransferLeadership { from, to, .. } if from == id(1) && to == id(3)),
        "{:?}",
        g.plan()
    );
}
/// A total loss, and the group relaunched from a launch template rolled back a minor (3.6):
/// the freshest backup was taken on 3.7 and 3.6 cannot read it. Restoring the older 3.6 backup
/// would drop every write since on a guess: the function waits, naming the backup and the
/// release it needs; an operator may still name the older one.
#[test]
fn a_restore_never_passes_over_the_freshest_backup_for_an_older_readable_one() {
    let taken = |at: i64, version: &str| Backup {
        key: format!("p/etcd-i-00000001/{at}-v{version}.db"),
        token: "etcd-i-00000001".into(),
        taken_at: at,
        revision: at,
        size: 1,
        etcd_version: version.parse().ok(),
    };
    let mut g = given(vec![running(5, PendingWait, "3.6.17")]).record(1);
    g.obs.backups = vec![taken(100, "3.6.17"), taken(200, "3.7.4")];
    let mut s = settings();
    s.backup = Some(crate::config::BackupPolicy {
        interval_secs: 900,
        hourly_days: 7,
        daily_days: 90,
        recovery: crate::config::Recovery::Auto,
    });
    let step = plan(&g.obs, &s);
    let Step::Wait(Wait::NoRestorableBackup {
        backup,
        seed_version,
        needs,
        ..
    }) = &step
    else {
        panic!("{step:?}")
    };
    assert_eq!(
        (backup, seed_version, needs.as_str()),
        (&taken(200, "3.7.4").key, &"3.6.17".to_string(), "3.7")
    );
    assert!(step.why().contains("needs etcd 3.7"), "{}", step.why());
    // The same under RECOVERY=manual with a request for `latest`.
    let mut manual = s.clone();
    manual.backup.as_mut().unwrap().recovery = crate::config::Recovery::Manual;
    g.obs.published.restore_request = Some("latest".into());
    g.obs.published.restore_request_at = Some(900);
    assert!(matches!(
        plan(&g.obs, &manual),
        Step::Wait(Wait::NoRestorableBackup { .. })
    ));
    // The operator names the older backup: restored, the newer one it passes over said so.
    g.obs.published.restore_request = Some(taken(100, "3.6.17").key);
    let step = plan(&g.obs, &manual);
    assert!(
        matches!(&step, Step::Restore { backup, skipped, .. }
        if backup.taken_at == 100 && skipped == &vec![taken(200, "3.7.4").key]),
        "{step:?}"
    );
    assert!(step.why().contains("3.7.4"), "{}", step.why());
    // The template back on 3.7: the freshest is restored.
    g.obs.instances[0].etcd_version = Some(Version::new(3, 7, 4));
    assert!(matches!(plan(&g.obs, &s), Step::Restore { backup, .. } if backup.taken_at == 200));
}

/// A 3.6 member's snapshot of a cluster still at 3.5 holds 3.5's storage (its key says `-s3.5`,
/// `versions::storage_of`): a 3.5 seed restores it.
#[test]
fn a_snapshot_of_a_cluster_still_at_the_older_minor_is_restored_by_that_minor() {
    let mut g = given(vec![running(5, PendingWait, "3.5.36")]).record(1);
    g.obs.backups = vec![Backup {
        key: "p/etcd-i-00000001/200-v3.6.17-s3.5.db".into(),
        token: "etcd-i-00000001".into(),
        taken_at: 200,
        revision: 200,
        size: 1,
        etcd_version: Some(Version::new(3, 5, 0)),
    }];
    let s = with_backups(given(vec![])).settings.unwrap();
    assert!(
        matches!(plan(&g.obs, &s), Step::Restore { backup, .. } if backup.taken_at == 200),
        "{:?}",
        plan(&g.obs, &s)
    );
}

/// The operator's way out of that wait: the template back on the right release, the waiting
/// instances terminated. They never held data (no config was ever published for them), so
/// their terminations are let go at once, and the relaunched instances restore. Before, they
/// counted as instances that might run an etcd: the cluster stayed "unreachable", their hooks
/// held, the new instances never restored.
#[test]
fn instances_that_never_held_data_are_let_go_at_once_when_terminated_while_the_cluster_is_lost() {
    let mut g = with_backups(given(vec![
        running(5, TerminatingWait, "3.6.17"),
        running(6, TerminatingWait, "3.6.17"),
        running(7, PendingWait, "3.7.4"),
    ]))
    .record(1);
    g.obs.backups = vec![Backup {
        key: "p/etcd-i-00000001/200-v3.7.4.db".into(),
        token: "etcd-i-00000001".into(),
        taken_at: 200,
        revision: 200,
        size: 1,
        etcd_version: Some(Version::new(3, 7, 4)),
    }];
    assert_eq!(
        g.plan(),
        complete(5, Transition::Terminate, ActionResult::Continue)
    );
    g.obs.instances.remove(0);
    assert_eq!(
        g.plan(),
        complete(6, Transition::Terminate, ActionResult::Continue)
    );
    g.obs.instances.remove(0);
    assert!(
        matches!(g.plan(), Step::Restore { seed_arn, .. } if seed_arn == arn(7)),
        "{:?}",
        g.plan()
    );
    // One that held data (its config was published: it may still hold a member's only copy)
    // is never let go on a guess.
    let mut held = with_backups(given(vec![
        running(5, TerminatingWait, "3.7.4"),
        running(7, PendingWait, "3.7.4"),
    ]))
    .record(1)
    .some_config(5);
    held.obs.backups = g.obs.backups.clone();
    assert!(
        matches!(held.plan(), Step::Wait(Wait::ClusterUnreachable { .. })),
        "{:?}",
        held.plan()
    );
}

/// A zone's loss took two voters of five; the group replaced one, and its replacement now
/// waits at launch to join. The other dead voter blocks that join (etcd refuses an add while a
/// voter is down), so it must still be replaced: the join's wait never holds up the
/// replacement that unblocks it. (The zone-loss test stalled here twice under load, the second
/// lost member never replaced; this table case passes, so what held it was in the observation:
/// every wait is now logged, `also`, to find it.)
#[test]
fn a_join_blocked_by_a_dead_voter_does_not_hold_up_that_voters_replacement() {
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        inst(3, InService),
        inst(4, InService),
        inst(6, PendingWait),
    ])
    .record(1)
    .members(vec![voter(1), voter(2), voter(3), voter(4)])
    .unhealthy(1)
    .down_since(1, 700);
    assert_eq!(
        g.plan(),
        Step::Replace {
            instance: i(1),
            why: Replacement::Down {
                member: id(1),
                down_secs: 300
            }
        }
    );
}

// Hibernation: the group scaled to zero keeps its data in a final snapshot.

impl Given {
    /// Member `n` answers its status at `revision`.
    fn status(mut self, n: u8, revision: i64) -> Self {
        if let ClusterState::Known(v) = &mut self.obs.cluster {
            v.statuses.insert(
                id(n),
                MemberStatus {
                    revision,
                    version: "3.6.17".into(),
                    ..Default::default()
                },
            );
        }
        self
    }
}

fn sleeping_at(revision: i64) -> crate::model::Sleeping {
    crate::model::Sleeping {
        key: backup_at(revision).key,
        revision,
        since: 1000,
    }
}

fn fence() -> Alarm {
    Alarm {
        member: FENCE,
        kind: NOSPACE.into(),
    }
}

/// The function's write fence raised, as the cluster reports it.
fn fenced(mut g: Given) -> Given {
    if let ClusterState::Known(v) = &mut g.obs.cluster {
        v.alarms.push(fence());
    }
    g
}

/// Before the last voter's final snapshot, writes are fenced (NOSPACE, raised by the function
/// for no member), so that none is acknowledged after the snapshot and lost at the wake.
#[test]
fn writes_are_fenced_before_the_final_snapshot() {
    let mut g = with_backups(given(vec![inst(1, TerminatingWait)]))
        .record(1)
        .some_config(1)
        .members(vec![voter(1)])
        .status(1, 70);
    g.obs.backups = vec![backup_at(60)];
    assert_eq!(
        g.plan(),
        Step::FenceWrites {
            alarm: fence(),
            endpoint: "http://10.0.0.1:2379".into()
        }
    );
    assert!(matches!(
        fenced(g).plan(),
        Step::Backup {
            reason: BackupReason::Final,
            ..
        }
    ));
}

#[test]
fn the_last_voter_of_a_group_scaled_to_zero_goes_only_after_its_final_snapshot_and_the_record_says_so(
) {
    let base = || {
        with_backups(given(vec![inst(1, TerminatingWait)]))
            .record(1)
            .some_config(1)
            .members(vec![voter(1)])
            .status(1, 70)
    };
    // Its newest backup is older than its revision, writes fenced (below): a final snapshot.
    let mut g = fenced(base());
    g.obs.backups = vec![backup_at(60)];
    let step = g.plan();
    assert!(
        matches!(&step, Step::Backup { member, reason: BackupReason::Final, facts, .. }
            if *member == id(1) && facts.revision == 70),
        "{step:?}"
    );
    assert!(step.why().contains("final"), "{}", step.why());
    // The snapshot holds its revision: the record says the cluster sleeps there.
    g.obs.backups = vec![backup_at(60), backup_at(70)];
    let step = g.plan();
    let Step::Sleep(record) = &step else {
        panic!("{step:?}")
    };
    assert_eq!(record.sleeping, Some(sleeping_at(70)));
    assert_eq!(step.name(), "hibernate");
    // Recorded: then it goes as before (its config, then its action).
    g.obs.published.cluster.as_mut().unwrap().sleeping = Some(sleeping_at(70));
    assert!(
        matches!(g.plan(), Step::Unpublish { ref instance, .. } if *instance == i(1)),
        "{:?}",
        g.plan()
    );
    // A write after the snapshot (a delete, which NOSPACE lets through): snapshot again.
    let mut later = fenced(base().status(1, 75));
    later.obs.backups = vec![backup_at(70)];
    later.obs.published.cluster.as_mut().unwrap().sleeping = Some(sleeping_at(70));
    assert!(
        matches!(
            later.plan(),
            Step::Backup {
                reason: BackupReason::Final,
                ..
            }
        ),
        "{:?}",
        later.plan()
    );
    // The store fails: held, and says why.
    let mut failing = base();
    failing.obs.backups_failing = Some("AccessDenied".into());
    assert!(
        matches!(failing.plan(), Step::Wait(Wait::FinalSnapshotPending { ref instance, ref why })
            if *instance == i(1) && why.contains("AccessDenied")),
        "{:?}",
        failing.plan()
    );
    // Without backups there is nowhere to keep the data: it goes, as it always did.
    let mut none = base();
    none.settings = None;
    assert!(
        matches!(none.plan(), Step::Unpublish { ref instance, .. } if *instance == i(1)),
        "{:?}",
        none.plan()
    );
}

/// It wakes from the newest snapshot of the sleeping generation, whatever RECOVERY says: the
/// recorded final snapshot, or a newer one of the same generation (a newer final snapshot, or
/// one taken before a removal when the group was scaled up again before the last voter left),
/// never an older one.
#[test]
fn a_sleeping_cluster_wakes_from_the_newest_snapshot_of_its_generation_whatever_recovery_says() {
    let mut s = settings();
    s.backup = Some(crate::config::BackupPolicy {
        interval_secs: 900,
        hourly_days: 7,
        daily_days: 90,
        recovery: crate::config::Recovery::Manual,
    });
    let mut g = given(vec![]).record(1);
    g.obs.published.cluster.as_mut().unwrap().sleeping = Some(sleeping_at(70));
    // An older backup of the generation, and the final snapshot.
    g.obs.backups = vec![backup_at(50), backup_at(70)];
    // Nobody launching: asleep, and says where.
    assert_eq!(
        plan(&g.obs, &s),
        Step::Wait(Wait::Asleep {
            key: backup_at(70).key,
            revision: 70
        })
    );
    // The group scaled up: restored from the final snapshot, no restore request awaited.
    g.obs.instances = vec![running(5, PendingWait, "3.6.17")];
    let step = plan(&g.obs, &s);
    assert!(
        matches!(&step, Step::Restore { backup, new, .. }
            if backup.key == backup_at(70).key && new.sleeping.is_none() && new.seed == i(5)),
        "{step:?}"
    );
    // A newer snapshot of the same generation than the recorded one: that one.
    let mut newer = backup_at(90);
    newer.taken_at = 950;
    g.obs.backups.push(newer.clone());
    let step = plan(&g.obs, &s);
    assert!(
        matches!(&step, Step::Restore { backup, .. } if backup.key == newer.key),
        "{step:?}"
    );
    // Another generation's newer backup is not this cluster's data: never chosen.
    let mut foreign = backup_at(95);
    foreign.token = "etcd-other".into();
    foreign.key = "p/etcd-other/95.db".into();
    foreign.taken_at = 990;
    g.obs.backups.push(foreign);
    assert!(matches!(plan(&g.obs, &s), Step::Restore { backup, .. } if backup.key == newer.key));
}

/// The fence is lifted once the group wants members again: woken from a final snapshot that
/// carries it, or scaled back up before the last voter left; never while it sleeps.
#[test]
fn the_write_fence_is_lifted_once_the_group_wants_members_again() {
    let fence = fence();
    let mut g = with_backups(given(vec![inst(1, InService)]))
        .record(1)
        .some_config(1)
        .members(vec![voter(1)])
        .desired(1);
    if let ClusterState::Known(v) = &mut g.obs.cluster {
        v.alarms.push(fence.clone());
    }
    assert_eq!(
        g.plan(),
        Step::Disarm {
            alarm: fence.clone(),
            endpoint: "http://10.0.0.1:2379".into()
        }
    );
    assert!(g.plan().why().contains("fence"), "{}", g.plan().why());
    // Still scaling to zero: kept.
    g.obs.instances[0].state = TerminatingWait;
    g.obs.desired_capacity = 0;
    assert!(!matches!(g.plan(), Step::Disarm { .. }), "{:?}", g.plan());
}

#[test]
fn a_group_scaled_back_up_before_its_last_voter_left_is_awake_again() {
    let mut g = with_backups(given(vec![inst(1, InService)]))
        .record(1)
        .members(vec![voter(1)])
        .desired(1);
    g.obs.published.cluster.as_mut().unwrap().sleeping = Some(sleeping_at(70));
    let step = g.plan();
    assert!(
        matches!(&step, Step::Sleep(r) if r.sleeping.is_none()),
        "{step:?}"
    );
    assert_eq!(step.name(), "wake");
}

#[test]
fn hibernation_never_lets_data_go_on_a_guess() {
    // The last voter does not answer its status: held, no snapshot can be taken of it.
    let g = with_backups(given(vec![inst(1, TerminatingWait)]))
        .record(1)
        .some_config(1)
        .members(vec![voter(1)])
        .unhealthy(1);
    assert!(
        matches!(g.plan(), Step::Wait(Wait::FinalSnapshotPending { ref why, .. }) if why.contains("status")),
        "{:?}",
        g.plan()
    );
    // The group wants an instance again while the last voter is only on its way out: still
    // asleep in the record until a voter serves on an instance in service.
    let mut leaving = with_backups(given(vec![inst(1, TerminatingWait)]))
        .record(1)
        .some_config(1)
        .members(vec![voter(1)])
        .status(1, 70)
        .desired(1);
    leaving.obs.published.cluster.as_mut().unwrap().sleeping = Some(sleeping_at(70));
    assert!(
        !matches!(leaving.plan(), Step::Sleep(_)),
        "{:?}",
        leaving.plan()
    );
    // Its final snapshot gone from the bucket: nothing else restored on a guess, even with
    // RECOVERY=auto; an operator names one.
    let mut gone = with_backups(given(vec![running(5, PendingWait, "3.6.17")])).record(1);
    gone.obs.published.cluster.as_mut().unwrap().sleeping = Some(sleeping_at(70));
    gone.obs.backups = vec![backup_at(60)];
    assert!(
        matches!(gone.plan(), Step::Wait(Wait::AwaitRestoreRequest { .. })),
        "{:?}",
        gone.plan()
    );
}

#[test]
fn a_new_stack_with_a_restore_request_starts_from_exactly_that_backup_or_not_at_all() {
    let copied = Backup {
        key: "p/prod-i-9/20261201T000000Z-rev000000000042-v3.6.17.db".into(),
        token: "prod-i-9".into(),
        taken_at: 500,
        revision: 42,
        size: 1,
        etcd_version: Some(Version::new(3, 6, 17)),
    };
    let g = |request: Option<&str>| {
        let mut g = with_backups(given(vec![inst(2, PendingWait), inst(3, PendingWait)]));
        g.settings.as_mut().unwrap().start_from_backup = true;
        g.obs.backups = vec![copied.clone(), backup_at(7)];
        g.obs.published.restore_request = request.map(str::to_string);
        // Written long ago: a new stack has no generation the request could be stale for.
        g.obs.published.restore_request_at = Some(1);
        g
    };
    // START_FROM=backup and no request: never an empty cluster; held for one.
    assert_eq!(g(None).plan(), Step::Wait(Wait::AwaitFirstRestore));
    // START_FROM=empty: an empty cluster, a request (one left over) or not.
    let mut empty = g(Some(&copied.key));
    empty.settings.as_mut().unwrap().start_from_backup = false;
    assert!(matches!(empty.plan(), Step::CreateCluster(r) if r.restored_from.is_none()));
    // The named backup (RECOVERY is auto here, but not what decides), seeded by the oldest
    // launching instance, its lineage the copied generation's.
    match g(Some(&copied.key)).plan() {
        Step::Restore {
            old: None,
            new,
            backup,
            seed_arn,
            ..
        } => {
            assert_eq!(backup, copied);
            assert_eq!((new.seed.as_str(), seed_arn), (i(2).as_str(), arn(2)));
            assert_eq!(new.state, RecordState::Bootstrapping);
            let from = new.restored_from.unwrap();
            assert_eq!(
                (from.snapshot.key, from.previous_token),
                (copied.key.clone(), copied.token.clone())
            );
        }
        other => panic!("{other:?}"),
    }
    // `latest`: the freshest in the prefix, whatever its generation.
    assert!(
        matches!(g(Some("latest")).plan(), Step::Restore { backup, .. } if backup == backup_at(7))
    );
    // Never an empty cluster in the requested one's place: a key not in the bucket, a store
    // that fails, backups off, a seed whose etcd cannot read it, a seed whose version is unknown.
    let unusable = |g: Given, says: &str| match g.plan() {
        Step::Wait(Wait::RestoreRequestUnusable { why, .. }) => {
            assert!(why.contains(says), "{why}")
        }
        other => panic!("{says}: {other:?}"),
    };
    unusable(g(Some("p/prod-i-9/missing.db")), "names no complete backup");
    let mut failing = g(Some(&copied.key));
    failing.obs.backups = vec![];
    failing.obs.backups_failing = Some("AccessDenied".into());
    unusable(failing, "backup store fails");
    let mut off = g(Some(&copied.key));
    off.settings.as_mut().unwrap().backup = None;
    unusable(off, "backups are off");
    let mut old_seed = g(Some(&copied.key));
    for i in &mut old_seed.obs.instances {
        i.etcd_version = Some(Version::new(3, 5, 30));
    }
    assert!(
        matches!(old_seed.plan(), Step::Wait(Wait::NoRestorableBackup { backup, .. }) if backup == copied.key)
    );
    let mut unknown = g(Some(&copied.key));
    unknown.obs.instances[0].etcd_version = None;
    assert!(matches!(
        unknown.plan(),
        Step::Wait(Wait::VersionUnknown { .. })
    ));
}

/// A member of a cluster that ran before the stack (no instance of the group): `old-n`, id 200+n.
fn adopted(n: u8) -> Member {
    Member {
        id: MemberId(200 + n as u64),
        name: format!("old-{n}"),
        peer_urls: vec![format!("http://10.1.0.{n}:2380")],
        client_urls: vec![format!("http://10.1.0.{n}:2379")],
        is_learner: false,
    }
}

fn adopting(mut g: Given) -> Given {
    let mut s = settings();
    s.adopt = vec!["http://10.1.0.1:2379".into()];
    g.settings = Some(s);
    g
}

#[test]
fn a_fit_cluster_is_adopted_as_it_is_and_an_unfit_one_changes_nothing() {
    let group = || (1..=3).map(|n| inst(n, PendingWait)).collect::<Vec<_>>();
    let g = || adopting(given(group()).members((1..=3).map(adopted).collect()));
    match g().plan() {
        Step::CreateCluster(r) => {
            assert_eq!(
                (r.state, r.cluster_id, r.seed.as_str()),
                (RecordState::Served, Some(7), "old-1")
            );
            assert_eq!(r.adopting.unwrap().members, vec![201, 202, 203]);
        }
        other => panic!("{other:?}"),
    }
    // Without ADOPT_ENDPOINTS none of this applies.
    assert!(!matches!(
        given(group())
            .members((1..=3).map(adopted).collect())
            .plan(),
        Step::CreateCluster(_)
    ));
    let refused = |g: Given, says: &str| match g.plan() {
        Step::Wait(Wait::AdoptionRefused { why }) => assert!(why.contains(says), "{says}: {why}"),
        other => panic!("{says}: {other:?}"),
    };
    let with_learner = adopting(given(group()).members(vec![
        adopted(1),
        adopted(2),
        Member {
            is_learner: true,
            ..adopted(3)
        },
    ]));
    refused(with_learner, "is a learner");
    let mut down = g();
    if let ClusterState::Known(v) = &mut down.obs.cluster {
        v.healthy.remove(&MemberId(202));
    }
    refused(down, "does not answer");
    let mut alarmed = g();
    let mut authed = g();
    let mut old = g();
    if let (ClusterState::Known(a), ClusterState::Known(b), ClusterState::Known(c)) = (
        &mut alarmed.obs.cluster,
        &mut authed.obs.cluster,
        &mut old.obs.cluster,
    ) {
        a.alarms.push(Alarm {
            member: MemberId(202),
            kind: "NOSPACE".into(),
        });
        b.auth_enabled = true;
        b.root_refused = Some("etcd refused auth user get (InvalidAuthToken)".into());
        c.cluster_version = Some(Version::new(3, 3, 0));
    }
    refused(alarmed, "alarm NOSPACE");
    refused(
        authed,
        "authentication is on, and the function cannot act as its root",
    );
    // Authentication on, and the function is its root (the adopted cluster's password): fit.
    let mut root = g();
    if let ClusterState::Known(v) = &mut root.obs.cluster {
        v.auth_enabled = true;
    }
    assert!(matches!(root.plan(), Step::CreateCluster(_)));
    refused(old, "below 3.4.0");
    let tls = adopting(given(group()).members(vec![Member {
        peer_urls: vec!["https://10.1.0.1:2380".into()],
        ..adopted(1)
    }]));
    refused(tls, "peer URLs");
    // Not answering: never an empty cluster in its place.
    refused(adopting(given(group())), "does not answer");
}

#[test]
fn adopted_members_leave_one_per_member_of_the_group_joined_the_leader_handing_over_first() {
    let record = |g: Given| {
        let mut g = adopting(g).record(1);
        let r = g.obs.published.cluster.as_mut().unwrap();
        r.seed = "old-1".into();
        r.adopting = Some(Adopting {
            members: vec![201, 202, 203],
            since: 1,
        });
        g
    };
    let group = |in_service: u8| {
        (1..=3)
            .map(|n| {
                inst(
                    n,
                    if n <= in_service {
                        InService
                    } else {
                        PendingWait
                    },
                )
            })
            .collect::<Vec<_>>()
    };
    let with = |extra: Vec<Member>| (1..=3).map(adopted).chain(extra).collect::<Vec<_>>();
    // The group's first instance joins while every adopted member stays.
    let joining = record(given(group(0)).members(with(vec![])));
    assert!(
        matches!(joining.plan(), Step::AddLearner { ref instance, .. } if *instance == i(1)),
        "{:?}",
        joining.plan()
    );
    let learning = record(given(group(0)).members(with(vec![learner(1)])));
    assert!(
        matches!(learning.plan(), Step::Promote { .. }),
        "{:?}",
        learning.plan()
    );
    // One joined: four voters, one past the size; an adopted one leaves, the adopted leader
    // handing over to the member of the group first.
    let one = || record(given(group(1)).members(with(vec![voter(1)])));
    assert_eq!(
        one().plan(),
        Step::TransferLeadership {
            from: MemberId(201),
            to: id(1),
            leader_endpoint: "http://10.1.0.1:2379".into()
        }
    );
    assert!(
        matches!(
            one().leader(1).plan(),
            Step::RemoveMember {
                member: MemberId(201),
                ..
            }
        ),
        "{:?}",
        one().leader(1).plan()
    );
    // Not while the member of the group does not answer.
    let down = one().unhealthy(1);
    assert!(
        !matches!(
            down.plan(),
            Step::RemoveMember { .. } | Step::TransferLeadership { .. }
        ),
        "{:?}",
        down.plan()
    );
    // None left: the record says the adoption is over.
    let done = record(given(group(3)).members((1..=3).map(voter).collect())).leader(1);
    match done.plan() {
        Step::MarkServed(r) => assert_eq!((r.adopting, r.cluster_id), (None, Some(7))),
        other => panic!("{other:?}"),
    }
}

#[test]
fn nothing_is_restored_over_an_adoption_under_way() {
    // The adopted members unreachable, no member of the group joined yet, a backup there: never a
    // restore (they are outside the group; a partition looks the same).
    let mut blip =
        with_backups(adopting(given((1..=3).map(|n| inst(n, PendingWait)).collect())).record(1));
    blip.settings.as_mut().unwrap().adopt = vec!["http://10.1.0.1:2379".into()];
    blip.obs.published.cluster.as_mut().unwrap().adopting = Some(Adopting {
        members: vec![201],
        since: 1,
    });
    blip.obs.backups = vec![backup_at(40)];
    assert!(
        matches!(blip.plan(), Step::Wait(Wait::ClusterUnreachable { ref detail }) if detail.contains("adoption")),
        "{:?}",
        blip.plan()
    );
    // The same without the adoption: restored.
    blip.obs.published.cluster.as_mut().unwrap().adopting = None;
    assert!(
        matches!(blip.plan(), Step::Restore { .. }),
        "{:?}",
        blip.plan()
    );
}

#[test]
fn an_adoption_is_refused_for_twin_names_a_stranger_endpoint_and_an_etcd_that_cannot_join() {
    let group = || (1..=3).map(|n| inst(n, PendingWait)).collect::<Vec<_>>();
    let g = || adopting(given(group()).members((1..=3).map(adopted).collect()));
    let refused = |g: Given, says: &str| match g.plan() {
        Step::Wait(Wait::AdoptionRefused { why }) => assert!(why.contains(says), "{says}: {why}"),
        other => panic!("{says}: {other:?}"),
    };
    let twins = adopting(given(group()).members(vec![
        adopted(1),
        Member {
            name: "old-1".into(),
            ..adopted(2)
        },
    ]));
    refused(twins, "two members are named");
    let mut elsewhere = g();
    elsewhere.settings.as_mut().unwrap().adopt = vec!["http://10.9.9.9:2379".into()];
    refused(
        elsewhere,
        "which no member of the cluster that answers advertises",
    );
    let mut ahead = g();
    for i in &mut ahead.obs.instances {
        i.etcd_version = Some(Version::new(3, 8, 0));
    }
    refused(ahead, "can never join");
}

#[test]
fn a_dead_adopted_member_goes_once_its_patience_is_spent_and_one_its_peers_see_stays() {
    let record = |g: Given| {
        let mut g = adopting(g).record(1);
        let r = g.obs.published.cluster.as_mut().unwrap();
        r.adopting = Some(Adopting {
            members: vec![201, 202, 203, 204, 205],
            since: 1,
        });
        g
    };
    let group = |_: u8| (1..=3).map(|n| inst(n, PendingWait)).collect::<Vec<_>>();
    let with = |extra: Vec<Member>| (1..=5).map(adopted).chain(extra).collect::<Vec<_>>();
    // A dead adopted member goes once down UNHEALTHY_REPLACE_SECS (five old members: four
    // stay); one its peers still see connected is alive and stays.
    let mut dead = record(given(group(0)).members(with(vec![])));
    if let ClusterState::Known(v) = &mut dead.obs.cluster {
        v.healthy.remove(&MemberId(202));
    }
    dead.obs
        .published
        .down_since
        .insert("adopted-ca".into(), dead.obs.now - 300);
    assert!(
        matches!(
            dead.plan(),
            Step::RemoveMember {
                member: MemberId(202),
                ..
            }
        ),
        "{:?}",
        dead.plan()
    );
    if let ClusterState::Known(v) = &mut dead.obs.cluster {
        v.peer_connected.insert(MemberId(202));
    }
    assert!(
        !matches!(dead.plan(), Step::RemoveMember { .. }),
        "{:?}",
        dead.plan()
    );
}

// Issue #38, item 2: adoption cannot hurt the team's cluster.

/// A fit cluster of three old members (`adopted`), the group's three instances launching.
fn fit_for_adoption() -> Given {
    adopting(
        given((1..=3).map(|n| inst(n, PendingWait)).collect())
            .members((1..=3).map(adopted).collect()),
    )
}

fn view_mut(g: &mut Given) -> &mut ClusterView {
    match &mut g.obs.cluster {
        ClusterState::Known(v) => v,
        _ => panic!("no cluster"),
    }
}

fn refused_saying(g: &Given, says: &[&str]) {
    match g.plan() {
        Step::Wait(Wait::AdoptionRefused { why }) => {
            for s in says {
                assert!(why.contains(s), "{s}: {why}");
            }
        }
        other => panic!("{says:?}: {other:?}"),
    }
}

/// (a) A learner's quota below the adopted database raises NOSPACE for the whole cluster at its
/// first applied write: refused, naming both sizes, with a tenth of the quota as headroom.
#[test]
fn an_adoption_is_refused_while_the_stacks_quota_leaves_no_room_for_the_clusters_database() {
    const MIB: u64 = 1 << 20;
    let with_db = |db_size: u64, quota: u64| {
        let mut g = fit_for_adoption();
        g.settings.as_mut().unwrap().topology.quota_backend_bytes = quota;
        for (n, size) in [(1, db_size / 2), (2, db_size), (3, db_size / 3)] {
            view_mut(&mut g).statuses.insert(
                MemberId(200 + n),
                MemberStatus {
                    db_size: size,
                    db_size_in_use: size / 2,
                    version: "3.6.17".into(),
                    revision: 9,
                },
            );
        }
        g
    };
    // As seen: a 26 MB cluster, a 16 MiB quota.
    refused_saying(
        &with_db(26_000_000, 16 * MIB),
        &["old-2", "24 MiB", "16 MiB", "QUOTA_BACKEND_BYTES"],
    );
    // Within the last tenth of the quota: refused too; below it: adopted.
    refused_saying(&with_db(92 * MIB, 100 * MIB), &["92 MiB", "100 MiB"]);
    assert!(matches!(
        with_db(89 * MIB, 100 * MIB).plan(),
        Step::CreateCluster(_)
    ));
}

/// (e) etcd does not support a rolling 3.4 → 3.5 upgrade with authentication on (3.5 changed the
/// WAL form of auth entries): such a cluster is not adopted by a stack of 3.5 or later.
#[test]
fn a_34_cluster_with_authentication_on_is_not_adopted_by_a_35_stack() {
    let g = |auth: bool, stack: Version| {
        let mut g = fit_for_adoption();
        let v = view_mut(&mut g);
        v.cluster_version = Some(Version::new(3, 4, 0));
        v.auth_enabled = auth;
        for i in &mut g.obs.instances {
            i.etcd_version = Some(stack);
        }
        g
    };
    refused_saying(
        &g(true, Version::new(3, 5, 30)),
        &["3.4", "authentication", "3.5.30", "upgrade_3_5"],
    );
    assert!(matches!(
        g(false, Version::new(3, 5, 30)).plan(),
        Step::CreateCluster(_)
    ));
    assert!(matches!(
        g(true, Version::new(3, 4, 23)).plan(),
        Step::CreateCluster(_)
    ));
}

/// (b) An adoption never turns on an adopted cluster's authentication by the default of
/// TLS=managed; only ETCD_AUTH=on, set explicitly, does. A stack's own cluster is unchanged.
#[test]
fn an_adopted_cluster_keeps_its_authentication_as_found_unless_etcd_auth_is_set() {
    let served = |token: &str| {
        let mut g = given((1..=3).map(|n| inst(n, InService)).collect())
            .members((1..=3).map(voter).collect())
            .record(1);
        g.obs.published.cluster.as_mut().unwrap().token = token.into();
        for n in 1..=3 {
            let c = MemberConfig {
                state: InitialState::Existing,
                root_tokens: true,
                etcd_version: None,
                ..seed_config(n)
            };
            g = g.published(n, c, 1);
        }
        g.settings = Some(Settings {
            etcd_auth: true,
            ..settings()
        });
        g
    };
    let enable = Step::EnableAuth {
        endpoint: ANSWERING.into(),
    };
    assert_eq!(served("etcd-i-00000001").plan(), enable);
    assert_ne!(served("etcd-adopted-7").plan(), enable);
    // The record says so, whatever the token (a record of this field's time).
    let mut recorded = served("etcd-i-00000001");
    recorded
        .obs
        .published
        .cluster
        .as_mut()
        .unwrap()
        .adopted_auth = Some(false);
    assert_ne!(recorded.plan(), enable);
    // ETCD_AUTH=on set explicitly: on, adopted or not.
    for mut g in [recorded, served("etcd-adopted-7")] {
        g.settings.as_mut().unwrap().etcd_auth_explicit = true;
        assert_eq!(g.plan(), enable);
    }
    // The adoption's record says whether authentication was on.
    for auth in [false, true] {
        let mut g = fit_for_adoption();
        view_mut(&mut g).auth_enabled = auth;
        match g.plan() {
            Step::CreateCluster(r) => assert_eq!(r.adopted_auth, Some(auth)),
            other => panic!("{other:?}"),
        }
    }
}

/// `old` adopted members and `joined` members of the group voters; old-2 (0xca) does not answer,
/// down-marked `down_for` seconds ago if at all.
fn down_adopted(old: u8, joined: u8, down_for: Option<i64>) -> Given {
    let group = (1..=3)
        .map(|n| inst(n, if n <= joined { InService } else { PendingWait }))
        .collect();
    let members = (1..=old)
        .map(adopted)
        .chain((1..=joined).map(voter))
        .collect();
    let mut g = adopting(given(group).members(members)).record(1);
    g.obs.published.cluster.as_mut().unwrap().adopting = Some(Adopting {
        members: (1..=old as u64).map(|n| 200 + n).collect(),
        since: 1,
    });
    view_mut(&mut g).healthy.remove(&MemberId(202));
    if let Some(secs) = down_for {
        let since = g.obs.now - secs;
        g.obs
            .published
            .down_since
            .insert("adopted-ca".into(), since);
    }
    g
}

fn old_2_removed(g: &Given) -> bool {
    matches!(
        g.plan(),
        Step::RemoveMember {
            member: MemberId(202),
            ..
        }
    )
}

/// (c) An old member that does not answer gets the patience the group's members get
/// (UNHEALTHY_REPLACE_SECS, from a down-mark): one missed probe removed it before.
#[test]
fn a_down_adopted_member_gets_the_groups_patience_first() {
    // One missed probe: noted, never removed.
    assert_eq!(
        down_adopted(3, 0, None).plan(),
        Step::NoteDown {
            instance: "adopted-ca".into(),
            since: 1000
        }
    );
    // Within UNHEALTHY_REPLACE_SECS: waited for (and the mark is not cleaned up as an
    // instance's that is gone).
    let waiting = down_adopted(5, 0, Some(299));
    assert!(
        matches!(
            waiting.plan(),
            Step::Wait(Wait::AdoptedMemberDown {
                member: MemberId(202),
                down_secs: 299,
                last_margin: false,
                ..
            })
        ),
        "{:?}",
        waiting.plan()
    );
    assert!(matches!(
        assess(&waiting.obs, waiting.settings.as_ref().unwrap()).waits[..],
        [Wait::AdoptedMemberDown { .. }, Wait::JoinBlocked { .. }]
    ));
    // Spent, five old members: four stay.
    let spent = down_adopted(5, 0, Some(300));
    assert!(old_2_removed(&spent), "{:?}", spent.plan());
}

/// (c) A down adopted member never goes while that would leave two voters (no failure
/// tolerated) before a member of the group has joined: the function cannot tell it dead from
/// unreachable, an operator can.
#[test]
fn a_down_adopted_member_never_leaves_two_voters_before_the_group_has_joined() {
    let three = down_adopted(3, 0, Some(10_000));
    match three.plan() {
        Step::Wait(
            w @ Wait::AdoptedMemberDown {
                last_margin: true, ..
            },
        ) => assert!(w.why().contains("etcdctl member remove ca"), "{}", w.why()),
        other => panic!("{other:?}"),
    }
    // Once a member of the group has joined: removed once spent (two old members, one of the
    // group's).
    let joined = |secs| down_adopted(2, 1, Some(secs));
    assert!(old_2_removed(&joined(300)), "{:?}", joined(300).plan());
    assert!(!old_2_removed(&joined(299)), "{:?}", joined(299).plan());
}

/// (c) An adopted member's down-mark goes once it answers again, or once it is gone.
#[test]
fn an_adopted_members_down_mark_goes_once_it_answers_or_is_gone() {
    let forget = Step::ForgetDown {
        instance: "adopted-ca".into(),
    };
    let mut back = down_adopted(3, 0, Some(100));
    view_mut(&mut back).healthy.insert(MemberId(202));
    assert_eq!(back.plan(), forget);
    let mut gone = down_adopted(3, 0, Some(100));
    view_mut(&mut gone)
        .members
        .retain(|m| m.id != MemberId(202));
    assert_eq!(gone.plan(), forget);
}

/// (e) The join gate: no etcd 3.5 or later joins a 3.4 cluster with authentication on
/// (https://etcd.io/docs/v3.5/upgrades/upgrade_3_5/); its launch is refused, as for any release
/// etcd would never admit.
#[test]
fn the_join_gate_refuses_35_into_a_34_cluster_with_authentication_on() {
    let g = |auth: bool| {
        let mut g = given(vec![inst(1, InService), inst(2, PendingWait)])
            .members(vec![voter(1)])
            .record(1);
        let v = view_mut(&mut g);
        v.cluster_version = Some(Version::new(3, 4, 0));
        v.auth_enabled = auth;
        g.obs.instances[1].etcd_version = Some(Version::new(3, 5, 30));
        g
    };
    assert!(
        matches!(g(true).plan(), Step::RefuseLaunch { ref instance, ref why } if *instance == i(2) && why.contains("authentication on")),
        "{:?}",
        g(true).plan()
    );
    assert!(
        matches!(g(false).plan(), Step::AddLearner { .. }),
        "{:?}",
        g(false).plan()
    );
}
