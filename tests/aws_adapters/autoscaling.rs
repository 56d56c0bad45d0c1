//! The group's instances and their lifecycle actions, through the Auto Scaling and EC2 adapters.

use super::*;

#[tokio::test]
async fn group_instances_and_lifecycle_actions() {
    let dir = tempfile::tempdir().unwrap();
    let moto = support::Moto::start(dir.path());
    let sdk = sdk_at(&moto.endpoint).await;
    let ids = group_with_hooks(&sdk, "etcd", 2).await;
    let autoscaling = aws_sdk_autoscaling::Client::new(&sdk);
    let group_named = |name: &str, address| {
        AutoScalingGroup::new(
            autoscaling.clone(),
            aws_sdk_ec2::Client::new(&sdk),
            name.into(),
            address,
        )
    };
    let group = |address| group_named("etcd", address);

    let described = group(AddressSource::Tag("etcd-address".into()))
        .describe()
        .await
        .unwrap();
    assert_eq!(described.desired_capacity, 2);
    let by_tag = described.instances;
    assert_eq!(by_tag.len(), 2);
    for i in &by_tag {
        assert_eq!(i.state, LifecycleState::PendingWait, "{i:?}");
        assert!(
            i.address.as_deref().unwrap().starts_with("127.0.9."),
            "{i:?}"
        );
        assert!(i.launched_at > 1_700_000_000, "{i:?}");
    }
    // The version its tag declares, read as a fact; a value that is not a version is none.
    let version = |id: &str| by_tag.iter().find(|i| i.id == id).unwrap().etcd_version;
    assert_eq!(version(&ids[0]), Some("3.6.17".parse().unwrap()));
    assert_eq!(version(&ids[1]), None);
    // A tag anyone may set: a value that is not an IP or host name gives no address at all,
    // rather than being spliced into initial-cluster and the env file.
    aws_sdk_ec2::Client::new(&sdk)
        .create_tags()
        .resources(&ids[1])
        .tags(
            Tag::builder()
                .key("etcd-address")
                .value("127.0.9.2\nETCD_DATA_DIR=/")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let after_tag = group(AddressSource::Tag("etcd-address".into()))
        .describe()
        .await
        .unwrap()
        .instances;
    let address = |id: &str| {
        after_tag
            .iter()
            .find(|i| i.id == id)
            .unwrap()
            .address
            .clone()
    };
    assert_eq!(address(&ids[1]), None);
    assert!(address(&ids[0]).is_some());

    let by_ip = group(AddressSource::PrivateIp)
        .describe()
        .await
        .map(|g| g.instances)
        .unwrap();
    assert!(by_ip
        .iter()
        .all(|i| i.address.as_deref().is_some_and(|a| a.starts_with("10."))));

    let missing = group_named("nope", AddressSource::PrivateIp);
    assert!(
        matches!(missing.describe().await.map(|g| g.instances), Err(Error::GroupNotFound(g)) if g == "nope")
    );

    let hooks = LifecycleHooks {
        autoscaling: autoscaling.clone(),
        group: "etcd".into(),
        launch_hook: "etcd-launch".into(),
        terminate_hook: "etcd-terminate".into(),
    };
    let (a, b) = (&ids[0], &ids[1]);
    assert_eq!(
        hooks.heartbeat(b, Transition::Launch).await.unwrap(),
        Completion::Done
    );
    assert_eq!(
        hooks
            .complete(a, Transition::Launch, ActionResult::Continue)
            .await
            .unwrap(),
        Completion::Done
    );
    // AWS's "No active Lifecycle Action found" is an already-completed action, not an error.
    assert_eq!(
        hooks
            .complete(a, Transition::Launch, ActionResult::Continue)
            .await
            .unwrap(),
        Completion::NotPending
    );
    assert_eq!(
        hooks.heartbeat(a, Transition::Launch).await.unwrap(),
        Completion::NotPending
    );
    let after = group(AddressSource::PrivateIp)
        .describe()
        .await
        .map(|g| g.instances)
        .unwrap();
    let state = |id: &str| after.iter().find(|i| i.id == id).unwrap().state.clone();
    assert_eq!(state(a), LifecycleState::InService);
    assert_eq!(state(b), LifecycleState::PendingWait);

    // Scale in: the leaving instance waits in Terminating:Wait until its action completes.
    autoscaling
        .terminate_instance_in_auto_scaling_group()
        .instance_id(a)
        .should_decrement_desired_capacity(true)
        .send()
        .await
        .unwrap();
    let now = group(AddressSource::PrivateIp)
        .describe()
        .await
        .map(|g| g.instances)
        .unwrap();
    assert_eq!(
        now.iter().find(|i| &i.id == a).unwrap().state,
        LifecycleState::TerminatingWait
    );
    assert_eq!(
        hooks
            .complete(a, Transition::Terminate, ActionResult::Continue)
            .await
            .unwrap(),
        Completion::Done
    );
    let now = group(AddressSource::PrivateIp)
        .describe()
        .await
        .map(|g| g.instances)
        .unwrap();
    assert!(now.iter().all(|i| &i.id != a), "{now:?}");

    // What the function checks and learns at cold start.
    let mut found = hooks.hooks().await.unwrap();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<&str> = found.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, vec!["etcd-launch", "etcd-terminate"]);
    // Their heartbeat timeouts, which the heartbeats are paced by.
    assert!(found
        .iter()
        .all(|h| h.heartbeat_timeout == std::time::Duration::from_secs(300)));
    // Each instance carries its ARN, from the group's (what its parameters are tagged with).
    for i in group(AddressSource::PrivateIp)
        .describe()
        .await
        .unwrap()
        .instances
    {
        assert_eq!(
            i.arn,
            format!("arn:aws:ec2:us-east-1:123456789012:instance/{}", i.id)
        );
    }
    // An in-service instance marked Unhealthy is the group's to replace: it shows as unhealthy,
    // or already on its way out through the terminate hook.
    hooks
        .complete(b, Transition::Launch, ActionResult::Continue)
        .await
        .unwrap();
    let g = group(AddressSource::PrivateIp);
    assert!(g
        .describe()
        .await
        .map(|g| g.instances)
        .unwrap()
        .iter()
        .all(|i| i.healthy));
    g.set_unhealthy(b).await.unwrap();
    let now = g.describe().await.map(|g| g.instances).unwrap();
    let sick = now.iter().find(|i| &i.id == b).unwrap();
    assert!(
        !sick.healthy || sick.state == LifecycleState::TerminatingWait,
        "{sick:?}"
    );

    // Another group's action is not ours to find.
    let foreign = LifecycleHooks {
        group: "no-such-group".into(),
        autoscaling: autoscaling.clone(),
        launch_hook: "etcd-launch".into(),
        terminate_hook: "etcd-terminate".into(),
    };
    let r = foreign
        .complete(b, Transition::Launch, ActionResult::Continue)
        .await;
    assert!(matches!(r, Ok(Completion::NotPending)), "{r:?}");

    // Any other failure is a retryable AWS error that names the call and keeps its cause.
    let dead = sdk_at("http://127.0.0.1:1").await;
    let unreachable = LifecycleHooks {
        autoscaling: aws_sdk_autoscaling::Client::new(&dead),
        ..hooks
    };
    let e = unreachable
        .complete(b, Transition::Launch, ActionResult::Continue)
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    let text = format!("{e:?}");
    assert!(
        text.starts_with("AWS CompleteLifecycleAction failed: "),
        "{text}"
    );
}
