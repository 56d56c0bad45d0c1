//! Membership against a real cluster: every call the reconciler makes and each refusal, a member
//! only the function cannot reach (its peers see it connected), and survivors asked for only
//! once a cluster has served.

use super::*;

#[tokio::test]
async fn membership_calls_against_a_real_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = EtcdMembers::new(Duration::from_secs(3), None).unwrap();
    let mut n1 = Etcd::new("n1", dir.path());
    let mut n2 = Etcd::new("n2", dir.path());
    let mut n3 = Etcd::new("n3", dir.path());
    n1.start(&format!("n1={}", n1.peer_url), "new");
    let c1 = n1.client_url.clone();

    // List: one started voter that leads and answers its status.
    let v = eventually("n1 to answer", 30, || async {
        match etcd.observe(std::slice::from_ref(&c1), None).await {
            ClusterState::Known(v) if v.leader.is_some() => Some(v),
            _ => None,
        }
    })
    .await;
    assert_eq!(v.members.len(), 1);
    let m1 = v.members[0].clone();
    assert_eq!(m1.name, "n1");
    assert!(!m1.is_learner && m1.is_started());
    assert_eq!(v.leader, Some(m1.id));
    assert!(v.healthy.contains(&m1.id));
    assert_eq!(v.endpoint, c1);
    assert_ne!(v.cluster_id, 0);

    // Add a learner: it is listed unstarted, with no name and no client URL.
    let id2 = etcd.add_learner(&c1, &n2.peer_url).await.unwrap();
    let v = observe(&etcd, &[&c1]).await;
    let l = v.member(id2).unwrap();
    assert!(l.is_learner && !l.is_started() && l.client_urls.is_empty());
    assert_eq!(l.peer_urls, vec![n2.peer_url.clone()]);

    // Refusals while it is unstarted.
    assert_eq!(
        refusal(etcd.add_learner(&c1, &n3.peer_url).await),
        Refusal::TooManyLearners
    );
    assert_eq!(
        refusal(etcd.add_learner(&c1, &n2.peer_url).await),
        Refusal::PeerUrlExists
    );
    assert_eq!(
        refusal(etcd.add_learner(&c1, &n1.peer_url).await),
        Refusal::PeerUrlExists
    );
    assert_eq!(
        refusal(etcd.promote(&c1, id2).await),
        Refusal::LearnerNotInSync
    );
    assert_eq!(
        refusal(etcd.add_learner(&c1, "not a url").await),
        Refusal::InvalidPeerUrls
    );

    // Remove the unstarted learner (always allowed), then again: not found.
    etcd.remove(&c1, id2).await.unwrap();
    assert_eq!(
        refusal(etcd.remove(&c1, id2).await),
        Refusal::MemberNotFound
    );

    // Join n2 and n3 for real: add, start, promote once in sync. etcd 3.4 derives a member id
    // from its peer URLs and the current second, so re-adding n2's URL in the second it was
    // removed would collide with the removed id ("member not found").
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let existing = format!("n1={}", n1.peer_url);
    let id2 = join(&etcd, &c1, &mut n2, &existing).await;
    // Promoting a voter is refused; etcd checks the member's progress before its role, so a
    // voter still catching up is "not in sync" rather than "not a learner".
    let again = refusal(etcd.promote(&c1, id2).await);
    assert!(
        matches!(again, Refusal::NotALearner | Refusal::LearnerNotInSync),
        "{again:?}"
    );
    let existing = format!("{existing},n2={}", n2.peer_url);
    let id3 = join(&etcd, &c1, &mut n3, &existing).await;
    let v = observe(&etcd, &[&c1]).await;
    assert_eq!(v.voters().count(), 3);
    assert_eq!(v.healthy.len(), 3);

    // n3 dies: removing a live voter would leave one connected voter of two: refused.
    n3.kill();
    let v = eventually("n3 to be seen unhealthy", 20, || async {
        let v = observe(&etcd, &[&c1]).await;
        (!v.healthy.contains(&id3)).then_some(v)
    })
    .await;
    assert_eq!(v.voters().count(), 3, "a dead member is still listed");
    assert_eq!(
        refusal(etcd.remove(&c1, id2).await),
        Refusal::UnhealthyCluster
    );
    // Removing the dead one is fine.
    etcd.remove(&c1, id3).await.unwrap();

    // Leadership moves when asked at the leader.
    let v = observe(&etcd, &[&c1]).await;
    let leader = v.leader.unwrap();
    let (from, to) = if leader == m1.id {
        (&n1.client_url, id2)
    } else {
        (&n2.client_url, m1.id)
    };
    etcd.transfer_leadership(from, to).await.unwrap();
    eventually("leadership to move", 10, || async {
        (observe(&etcd, &[&c1]).await.leader == Some(to)).then_some(())
    })
    .await;

    // An unstarted voter (which the planner never adds) makes etcd refuse to remove a started
    // one: the started voters left would be fewer than a quorum.
    let ghost_peer = format!("http://127.0.0.1:{}", support::free_port());
    let added: serde_json::Value = reqwest::Client::new()
        .post(format!("{c1}/v3/cluster/member/add"))
        .json(&serde_json::json!({"peerURLs": [ghost_peer]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ghost: u64 = added["member"]["ID"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        refusal(etcd.remove(&c1, id2).await),
        Refusal::NotEnoughStartedMembers
    );
    etcd.remove(&c1, MemberId(ghost)).await.unwrap();

    // A dead endpoint first in the list is skipped; only dead endpoints is Unreachable.
    let dead = "http://127.0.0.1:1".to_string();
    let v = observe(&etcd, &[&dead, &n2.client_url]).await;
    assert_eq!(v.voters().count(), 2);
    let fresh = EtcdMembers::new(Duration::from_millis(500), None).unwrap();
    match fresh.observe(std::slice::from_ref(&dead), None).await {
        ClusterState::Unreachable { detail, .. } => {
            assert!(detail.contains("127.0.0.1:1"), "{detail}")
        }
        ClusterState::Known(v) => panic!("{v:?}"),
    }
    // A member of another cluster (by the record's id) is never believed; of this one, it is.
    let endpoints = [n2.client_url.clone()];
    match fresh.observe(&endpoints, Some(v.cluster_id ^ 1)).await {
        ClusterState::Unreachable { detail, .. } => {
            assert!(detail.contains("not the record's"), "{detail}")
        }
        ClusterState::Known(v) => panic!("{v:?}"),
    }
    assert!(matches!(
        fresh.observe(&endpoints, Some(v.cluster_id)).await,
        ClusterState::Known(_)
    ));
}

#[tokio::test]
async fn a_member_the_function_cannot_reach_is_seen_connected_by_its_peers() {
    let dir = tempfile::tempdir().unwrap();
    // The function expects a metrics port (the stack's members serve one) that these members,
    // as an adopted cluster's, do not: their metrics are read on their client URLs.
    let etcd = EtcdMembers::new(Duration::from_secs(3), None)
        .unwrap()
        .with_metrics_port(Some(support::free_port()));
    let mut nodes: Vec<Etcd> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| Etcd::new(n, dir.path()))
        .collect();
    // n3 serves its peers, but the client URL it advertises leads nowhere: the function's probe
    // of it fails, as with a route or an ACL on the function's path only.
    // A port none of the three took: a free port probed before they bind can be one of theirs.
    let taken: Vec<&str> = nodes
        .iter()
        .flat_map(|n| [n.client_url.as_str(), n.peer_url.as_str()])
        .collect();
    nodes[2].advertised_client_url =
        std::iter::repeat_with(|| format!("http://127.0.0.1:{}", support::free_port()))
            .find(|u| !taken.contains(&u.as_str()))
            .unwrap();
    let initial: Vec<String> = nodes
        .iter()
        .map(|n| format!("{}={}", n.name, n.peer_url))
        .collect();
    for n in nodes.iter_mut() {
        n.start(&initial.join(","), "new");
    }
    let urls = [nodes[0].client_url.clone(), nodes[1].client_url.clone()];
    let v = eventually("n3 seen connected by its peers", 30, || async {
        match etcd.observe(&urls, None).await {
            ClusterState::Known(v) if v.members.iter().all(|m| m.is_started()) => {
                (!v.peer_connected.is_empty()).then_some(v)
            }
            _ => None,
        }
    })
    .await;
    let n3 = v.members.iter().find(|m| m.name == "n3").unwrap().id;
    assert!(!v.healthy.contains(&n3), "the function cannot reach it");
    assert_eq!(v.peer_connected, [n3].into_iter().collect());
    // Its etcd stops: its peers lose the connection, and it is down for everyone.
    nodes[2].kill();
    eventually("n3 gone for its peers too", 30, || async {
        match etcd.observe(&urls, None).await {
            ClusterState::Known(v) if !v.healthy.contains(&n3) && v.peer_connected.is_empty() => {
                Some(())
            }
            _ => None,
        }
    })
    .await;
    for n in nodes.iter_mut() {
        n.kill();
    }
}

#[tokio::test]
async fn survivors_are_asked_for_only_once_a_cluster_has_served() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = EtcdMembers::new(Duration::from_secs(2), None).unwrap();
    // Three members serve; two stop: the one left answers only for itself (no leader).
    let mut nodes: Vec<Etcd> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| Etcd::new(n, dir.path()))
        .collect();
    let initial: Vec<String> = nodes
        .iter()
        .map(|n| format!("{}={}", n.name, n.peer_url))
        .collect();
    for n in nodes.iter_mut() {
        n.start(&initial.join(","), "new");
    }
    let url = nodes[0].client_url.clone();
    let v = eventually("the cluster to serve", 30, || async {
        match etcd.observe(std::slice::from_ref(&url), None).await {
            ClusterState::Known(v) if v.healthy.len() == 3 => Some(v),
            _ => None,
        }
    })
    .await;
    nodes[1].kill();
    nodes[2].kill();
    // No record id (a bootstrap that never served): not asked.
    eventually("the quorum lost", 30, || async {
        match etcd.observe(std::slice::from_ref(&url), None).await {
            ClusterState::Unreachable { survivors, .. } => {
                assert!(survivors.is_empty(), "{survivors:?}");
                Some(())
            }
            _ => None,
        }
    })
    .await;
    // The record's cluster: the survivor answers for itself.
    match etcd
        .observe(std::slice::from_ref(&url), Some(v.cluster_id))
        .await
    {
        ClusterState::Unreachable { survivors, .. } => {
            assert_eq!(survivors.len(), 1);
            assert_eq!(survivors[0].name, "n1");
        }
        other => panic!("{other:?}"),
    }
    nodes[0].kill();
}
