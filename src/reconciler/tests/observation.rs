//! What an invocation asks and what it takes as written: polling asks etcd and AWS only what may
//! have changed, and every write taken as done is what a listing would show.

use super::*;

#[tokio::test]
async fn polling_asks_etcd_and_aws_only_what_may_have_changed() {
    // A learner whose etcd does not start within the invocation: it is added, its config
    // published, then polled for until the wait budget is spent.
    let world = three_member_cluster().await;
    world.launch(4);
    let (describes, loads) = {
        let w = world.world();
        (w.describes, w.loads)
    };
    let r = reconciler_with(&world, &[("WAIT_BUDGET_SECS", "1")]);
    let resp = r
        .handle(&lifecycle_event("launch", "i-00000004"), far())
        .await
        .unwrap();
    let Response::Reconciled { steps, stats, .. } = &resp else {
        panic!("{resp:?}");
    };
    assert_eq!(steps.len(), 2, "add-learner, publish-config: {steps:?}");
    assert!(stats.observations > 5, "it polled: {stats:?}");
    let w = world.world();
    // The group once (nothing of ours changed it, and it was fresh); the parameters once (the
    // config the invocation published is taken as written, not listed again).
    assert_eq!(w.describes - describes, 1, "{stats:?}");
    assert_eq!(w.loads - loads, 1, "{stats:?}");
}

#[tokio::test]
async fn every_write_an_invocation_takes_as_done_is_what_a_listing_would_show() {
    use crate::model::{ClusterRecord, MemberConfig, RecordState};
    use crate::planner::MemberCertificate;
    let world = Fake::default();
    let mut r = reconciler_with(&world, &[("TLS", "managed")]);
    r.ca = crate::pki::Ca::generate("etcd", 1000).unwrap().into();
    let id = world.launch(1);
    world.world().now = 1000;
    let arn = format!("{}{id}", crate::fake::ARN_PREFIX);
    let record = ClusterRecord::bootstrapping(format!("etcd-{id}"), id.clone(), 1000);
    let rival = ClusterRecord {
        seed: "i-00000009".into(),
        ..record.clone()
    };
    let served = ClusterRecord {
        state: RecordState::Served,
        cluster_id: Some(7),
        ..record.clone()
    };
    let config = MemberConfig::parse_env(&format!(
        "ETCD_NAME={id}\nETCD_INITIAL_CLUSTER={id}=https://10.0.0.1:2380\n\
         ETCD_INITIAL_CLUSTER_STATE=new\nETCD_INITIAL_CLUSTER_TOKEN=etcd-{id}\n\
         ETCD_INITIAL_ADVERTISE_PEER_URLS=https://10.0.0.1:2380\n\
         ETCD_ADVERTISE_CLIENT_URLS=https://10.0.0.1:2379\nETCD_AUTO_COMPACTION_RETENTION=1h\n\
         ETCD_QUOTA_BACKEND_BYTES=2147483648\n"
    ))
    .unwrap();
    let publish = |certificate: bool| Step::Publish {
        instance: id.clone(),
        instance_arn: arn.clone(),
        config: config.clone(),
        certificate: certificate.then(|| MemberCertificate {
            address: "10.0.0.1".into(),
        }),
    };
    let unpublish = |key_material| Step::Unpublish {
        instance: id.clone(),
        key_material,
    };
    let steps = [
        Step::CreateCluster(record.clone()),
        Step::CreateCluster(rival),
        publish(true),
        unpublish(false),
        // Its bundle handed out before (as by an invocation that died before the config):
        // kept, and the config written all the same.
        publish(true),
        publish(false),
        Step::MarkServed(served),
        Step::NoteDown {
            instance: id.clone(),
            since: 990,
        },
        Step::ForgetDown {
            instance: id.clone(),
        },
        unpublish(true),
    ];
    let meter = crate::reconciler::invocation::Meter::default();
    for step in steps {
        let before = r.published.load().await.unwrap();
        let (_, written) = r.apply(&step, &meter, 1000, far()).await.unwrap();
        let listed = r.published.load().await.unwrap();
        let mut cached = before;
        match written {
            Some(w) => cached.record(w, 1000),
            None => cached = listed.clone(),
        }
        assert_eq!(cached, listed, "after {step}");
        if let Step::Publish { config, .. } = &step {
            assert_eq!(
                listed.members.get(&id).map(|p| &p.config),
                Some(config),
                "{step}"
            );
        }
    }
    assert!(world.world().configs.is_empty() && world.world().tls.is_empty());
}
