//! `adopt.rs` (rules 0, 2): a cluster that ran before the stack is adopted as it is, or refused
//! saying why, and its old members leave as the group's join; issue #38, item 2: adoption cannot
//! hurt the team's cluster (its quota, its authentication, a down old member's patience).

use super::*;

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

#[test]
fn simple_tokens_beside_the_stacks_jwts_are_refused_and_with_tls_off_they_mix_with_nothing() {
    let group = || (1..=3).map(|n| inst(n, PendingWait)).collect::<Vec<_>>();
    let with_tokens = |mutual_tls: bool, simple: &[&str]| {
        let mut g = adopting(given(group()).members((1..=3).map(adopted).collect()));
        g.settings.as_mut().unwrap().topology.mutual_tls = mutual_tls;
        if let ClusterState::Known(v) = &mut g.obs.cluster {
            v.auth_enabled = true;
            v.token_kinds = (1..=3)
                .map(|n| format!("old-{n}"))
                .map(|m| {
                    let kind = if simple.contains(&m.as_str()) {
                        TokenKind::Simple
                    } else {
                        TokenKind::Jwt
                    };
                    (m, kind)
                })
                .collect();
        }
        g
    };
    match with_tokens(true, &["old-2"]).plan() {
        Step::Wait(Wait::AdoptionRefused { why }) => {
            assert!(
                why.contains("member old-2 hands out etcd's simple tokens"),
                "{why}"
            );
            assert!(why.contains("--auth-token jwt"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    // A member whose kind could not be read: refused this time, never adopted on a guess.
    let mut unknown = with_tokens(true, &[]);
    if let ClusterState::Known(v) = &mut unknown.obs.cluster {
        v.token_kinds[2].1 = TokenKind::Unknown;
    }
    match unknown.plan() {
        Step::Wait(Wait::AdoptionRefused { why }) => {
            assert!(
                why.contains("member old-3's kind of authentication token"),
                "{why}"
            )
        }
        other => panic!("{other:?}"),
    }
    // Every old member on JWTs: adopted.
    assert!(matches!(
        with_tokens(true, &[]).plan(),
        Step::CreateCluster(_)
    ));
    // TLS=off: the stack's members use simple tokens too, each login's prefix random.
    assert!(matches!(
        with_tokens(false, &["old-1", "old-2"]).plan(),
        Step::CreateCluster(_)
    ));
}
