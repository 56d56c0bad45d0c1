//! `access.rs` (rule 8): etcd's authentication, turned on once every voter's config verifies
//! the function's root tokens; an adopted cluster keeps it as found unless ETCD_AUTH=on is set.

use super::*;

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

/// From a review: a cluster still at 3.4 with a member on 3.5 (authentication turned off for
/// the upgrade, as etcd requires): not turned on again until no member runs 3.4.
#[test]
fn auth_is_not_turned_on_where_3_4_meets_3_5() {
    let mut g = given((1..=3).map(|n| inst(n, InService)).collect())
        .members((1..=3).map(voter).collect())
        .record(1);
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
    let with = |versions: [&str; 3], cluster: &str| {
        let mut g = Given {
            obs: g.obs.clone(),
            settings: g.settings.clone(),
        };
        if let ClusterState::Known(v) = &mut g.obs.cluster {
            v.cluster_version = cluster.parse().ok();
            for (n, version) in (1..=3).zip(versions) {
                let status = MemberStatus {
                    version: version.into(),
                    ..Default::default()
                };
                v.statuses.insert(id(n), status);
            }
        }
        g.plan()
    };
    let on = Step::EnableAuth {
        endpoint: ANSWERING.into(),
    };
    assert_ne!(with(["3.4.23", "3.5.36", "3.5.36"], "3.4.0"), on);
    assert_eq!(with(["3.5.36", "3.5.36", "3.5.36"], "3.5.0"), on);
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
