//! AWS failing as it does: sim/faults.py in front of moto. EC2 failing for some instances, a
//! write applied whose answer was lost, a throttled or silent service.

use super::*;

#[tokio::test]
async fn ec2_failing_for_some_instances_leaves_only_those_without_an_address() {
    // Was: one DescribeInstances for every instance without an address, whose failure failed
    // the whole observation: one instance of an impaired zone (or one EC2 does not know yet)
    // blinded the function.
    let dir = tempfile::tempdir().unwrap();
    let moto = support::Moto::start(dir.path());
    let sdk = sdk_at(&moto.endpoint).await;
    let ids = group_with_hooks(&sdk, "etcd", 3).await;
    let group = || {
        AutoScalingGroup::new(
            aws_sdk_autoscaling::Client::new(&sdk),
            aws_sdk_ec2::Client::new(&sdk),
            "etcd".into(),
            AddressSource::Tag("etcd-address".into()),
        )
    };
    // A zone with a service disruption: every DescribeInstances that names its instance fails.
    moto.faults(serde_json::json!({"impaired": [ids[1]]})).await;
    let g = group().describe().await.unwrap();
    let address = |g: &etcd_asg_lifecycle::model::GroupState, id: &str| {
        g.instances
            .iter()
            .find(|i| i.id == id)
            .unwrap()
            .address
            .clone()
    };
    assert!(address(&g, &ids[0]).is_some() && address(&g, &ids[2]).is_some());
    assert_eq!(address(&g, &ids[1]), None);
    assert!(g.undescribed[&ids[1]].starts_with("Unavailable"), "{g:?}");
    assert_eq!(g.undescribed.len(), 1);
    // New instances EC2 does not know yet: "not yet", each, and never a failed call.
    moto.faults(serde_json::json!({"impaired": [], "unknown_for": 3600}))
        .await;
    let fresh = group().describe().await.unwrap();
    assert_eq!(fresh.undescribed.len(), 3, "{fresh:?}");
    assert!(fresh
        .undescribed
        .values()
        .all(|why| why.contains("not yet known to EC2")));
    // A warm environment keeps what EC2 told it: the impaired one is asked again, alone.
    let warm = group();
    moto.faults(serde_json::json!({"unknown_for": 0})).await;
    warm.describe().await.unwrap();
    moto.faults(serde_json::json!({"impaired": [ids[0]]})).await;
    let g = warm.describe().await.unwrap();
    assert!(g.undescribed.is_empty() && g.instances.iter().all(|i| i.address.is_some()));
    let done = moto.faults_done().await;
    assert!(
        done["ec2.DescribeInstances.impaired"].as_u64().unwrap() >= 1,
        "{done}"
    );
}

#[tokio::test]
async fn a_write_applied_whose_answer_was_lost_is_already_done_when_retried() {
    // Each write is applied, its first answer a 500 (the SDK then retries and meets its own
    // first attempt): what each adapter makes of that.
    let dir = tempfile::tempdir().unwrap();
    let moto = support::Moto::start(dir.path());
    let sdk = sdk_at(&moto.endpoint).await;
    let ids = group_with_hooks(&sdk, "etcd", 1).await;
    let (store, ssm) = ssm_store(&moto, "/etcd-asg-lifecycle/lost").await;
    let lose_once = |action: &str| serde_json::json!({"rules": [{"fault": "lose", "action": action, "count": 1}]});

    // Create-only PutParameter: the retry meets ParameterAlreadyExists, which `create_cluster`
    // reports as a lost race; the next observation finds the record is ours.
    moto.faults(lose_once("PutParameter")).await;
    let record = ClusterRecord::bootstrapping("lost-i-1".into(), "i-1".into(), 1_800_000_000);
    assert_eq!(
        store.create_cluster(&record).await.unwrap(),
        Created::AlreadyExists
    );
    assert_eq!(store.load().await.unwrap().cluster, Some(record.clone()));
    // The fence of `mark_served`: its retry finds `served`, and the record is written.
    moto.faults(lose_once("PutParameter")).await;
    let served = ClusterRecord {
        state: RecordState::Served,
        cluster_id: Some(7),
        ..record.clone()
    };
    assert_eq!(store.mark_served(&served).await.unwrap(), Created::Created);
    assert_eq!(store.load().await.unwrap().cluster, Some(served));
    // A member's config (created tagged): overwritten and tagged again.
    moto.faults(lose_once("PutParameter")).await;
    let arn = "arn:aws:ec2:us-east-1:123456789012:instance/i-1";
    let config = MemberConfig {
        name: "i-1".into(),
        initial_cluster: vec![("i-1".into(), "http://10.0.0.1:2380".into())],
        state: InitialState::New,
        token: "lost-i-1".into(),
        peer_url: "http://10.0.0.1:2380".into(),
        client_url: "http://10.0.0.1:2379".into(),
        auto_compaction_retention: "1h".into(),
        quota_backend_bytes: 2 << 30,
        snapshot_count: 10_000,
        restore: None,
        client_cert_auth: false,
        metrics_url: None,
        root_tokens: false,
        etcd_version: None,
    };
    store.publish("i-1", arn, &config).await.unwrap();
    let loaded = store.load().await.unwrap();
    assert_eq!(loaded.members["i-1"].config, config);
    let tags = ssm
        .list_tags_for_resource()
        .resource_type(aws_sdk_ssm::types::ResourceTypeForTagging::Parameter)
        .resource_id(store.member_name("i-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(tags.tag_list()[0].value(), arn);
    // DeleteParameters: the retry lists the names as invalid (gone), which is success.
    moto.faults(lose_once("DeleteParameters")).await;
    store.unpublish("i-1", false).await.unwrap();
    assert!(store.load().await.unwrap().members.is_empty());
    // A lifecycle action completed, its answer lost: "No active Lifecycle Action found".
    let hooks = LifecycleHooks {
        autoscaling: aws_sdk_autoscaling::Client::new(&sdk),
        group: "etcd".into(),
        launch_hook: "etcd-launch".into(),
        terminate_hook: "etcd-terminate".into(),
    };
    moto.faults(lose_once("RecordLifecycleActionHeartbeat"))
        .await;
    assert_eq!(
        hooks.heartbeat(&ids[0], Transition::Launch).await.unwrap(),
        Completion::Done
    );
    moto.faults(lose_once("CompleteLifecycleAction")).await;
    let done = hooks
        .complete(&ids[0], Transition::Launch, ActionResult::Continue)
        .await;
    assert_eq!(done.unwrap(), Completion::NotPending);
    let done = moto.faults_done().await;
    assert_eq!(
        done["autoscaling.CompleteLifecycleAction.lose"], 1,
        "{done}"
    );
    assert_eq!(done["ssm.PutParameter.lose"], 3, "{done}");
}

#[tokio::test]
async fn a_throttled_or_silent_service_costs_seconds_not_the_invocation() {
    let dir = tempfile::tempdir().unwrap();
    let moto = support::Moto::start(dir.path());
    let (store, _) = ssm_store(&moto, "/etcd-asg-lifecycle/slow").await;
    for fault in ["throttle", "refuse", "hang"] {
        moto.faults(serde_json::json!({"rules": [{"fault": fault, "service": "ssm"}]}))
            .await;
        let began = std::time::Instant::now();
        let e = store.load().await.unwrap_err();
        let took = began.elapsed();
        // Three attempts, each of at most ATTEMPT_TIMEOUT, within OPERATION_TIMEOUT.
        assert!(
            took <= etcd_asg_lifecycle::adapters::OPERATION_TIMEOUT
                + std::time::Duration::from_secs(1),
            "{fault}: {took:?} {e:?}"
        );
        assert!(format!("{e:?}").contains("GetParametersByPath"), "{e:?}");
    }
    moto.faults(serde_json::json!({"rules": []})).await;
    assert!(store.load().await.is_ok());
    let done = moto.faults_done().await;
    // Each retried: three attempts of each fault.
    assert_eq!(done["ssm.GetParametersByPath.throttle"], 3, "{done}");
}
