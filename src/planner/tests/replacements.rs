//! `leaving.rs`'s replacements (rule 6): a member down too long, a corrupt member, a survivor
//! of an old generation and a member whose certificate nears its end (TLS=managed) are replaced
//! one at a time, never at the cost of the quorum; and the group as operators run it (issue 27):
//! suspended processes, marks that lead nowhere, certificates that end together.

use super::*;
use crate::planner::leaving;

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
    let stuck = base(Some(10_000 - leaving::STUCK_SECS - 1));
    assert!(replaces_2(&stuck), "{:?}", stuck.plan());
    // Unhealthy in Standby, which the group never replaces: no replacement under way.
    let mut standby = base(Some(10_000));
    standby.obs.instances[0].state = LifecycleState::Standby;
    assert!(replaces_2(&standby), "{:?}", standby.plan());
}

#[test]
fn certificates_that_end_together_are_renewed_apart() {
    let life = 90 * 86_400;
    let spreads: Vec<i64> = (1..=5).map(|n| leaving::spread(&i(n), life)).collect();
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
        .map(|n| (n, leaving::spread(&i(n), life)))
        .max_by_key(|(_, s)| *s)
        .unwrap();
    let second = (1..=3)
        .map(|n| leaving::spread(&i(n), life))
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

/// From a review: a corrupt leader while another voter is down. Its replacement must wait
/// (the quorum), but the handover must not: before, no handover was tried, the dead voter's
/// replacement could never join under the corrupt leader, and nothing said why.
#[test]
fn a_corrupt_leader_hands_over_even_while_its_replacement_must_wait() {
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        inst(3, InService),
        inst(4, PendingWait),
    ])
    .record(1)
    .members(vec![voter(1), voter(2), voter(3)])
    .unhealthy(2)
    .alarm(1, CORRUPT);
    assert!(
        matches!(g.plan(), Step::TransferLeadership { from, to, .. } if from == id(1) && to == id(3)),
        "{:?}",
        g.plan()
    );
    // No sound voter to take over (3 down too): the join says why it waits.
    let g = g.unhealthy(3);
    assert!(
        crate::planner::assess(&g.obs, &settings())
            .waits
            .contains(&Wait::CorruptLeader { member: id(1) }),
        "{:?}",
        crate::planner::assess(&g.obs, &settings())
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
