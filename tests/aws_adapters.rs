//! The AWS adapters against moto server, extended with lifecycle hooks by sim/moto_lifecycle.py
//! (moto itself lacks CompleteLifecycleAction and RecordLifecycleActionHeartbeat).

mod support;

use aws_config::BehaviorVersion;
use aws_sdk_autoscaling::config::Credentials;
use aws_sdk_ec2::types::{RequestLaunchTemplateData, Tag};
use etcd_asg_lifecycle::adapters::autoscaling::{AutoScalingGroup, LifecycleHooks};
use etcd_asg_lifecycle::adapters::ssm::{SsmParameters, INSTANCE_ARN_TAG};
use etcd_asg_lifecycle::config::AddressSource;
use etcd_asg_lifecycle::model::{
    ActionResult, ClusterRecord, InitialState, LifecycleState, MemberConfig, RecordState,
    Transition,
};
use etcd_asg_lifecycle::ports::{Completion, Created, Group, Lifecycle, PublishedConfig};
use etcd_asg_lifecycle::Error;

/// The function's own SDK configuration (its timeouts and retries), at the emulator.
async fn sdk_at(endpoint: &str) -> aws_config::SdkConfig {
    let loader = aws_config::defaults(BehaviorVersion::latest());
    etcd_asg_lifecycle::adapters::bounded(loader, etcd_asg_lifecycle::adapters::FUNCTION_APP)
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(Credentials::new("testing", "testing", None, None, "test"))
        .load()
        .await
}

/// A group of `n` instances held in Pending:Wait by a launch hook, tagged with addresses.
async fn group_with_hooks(sdk: &aws_config::SdkConfig, name: &str, n: i32) -> Vec<String> {
    let ec2 = aws_sdk_ec2::Client::new(sdk);
    let asg = aws_sdk_autoscaling::Client::new(sdk);
    ec2.create_launch_template()
        .launch_template_name(format!("{name}-lt"))
        .launch_template_data(
            RequestLaunchTemplateData::builder()
                .image_id("ami-12c6146b")
                .instance_type("t3.small".into())
                .build(),
        )
        .send()
        .await
        .unwrap();
    asg.create_auto_scaling_group()
        .auto_scaling_group_name(name)
        .launch_template(
            aws_sdk_autoscaling::types::LaunchTemplateSpecification::builder()
                .launch_template_name(format!("{name}-lt"))
                .build(),
        )
        .min_size(0)
        .max_size(10)
        .desired_capacity(0)
        .availability_zones("us-east-1a")
        .send()
        .await
        .unwrap();
    for (hook, transition, default) in [
        (
            "etcd-launch",
            "autoscaling:EC2_INSTANCE_LAUNCHING",
            "ABANDON",
        ),
        (
            "etcd-terminate",
            "autoscaling:EC2_INSTANCE_TERMINATING",
            "CONTINUE",
        ),
    ] {
        asg.put_lifecycle_hook()
            .auto_scaling_group_name(name)
            .lifecycle_hook_name(hook)
            .lifecycle_transition(transition)
            .heartbeat_timeout(300)
            .default_result(default)
            .send()
            .await
            .unwrap();
    }
    asg.set_desired_capacity()
        .auto_scaling_group_name(name)
        .desired_capacity(n)
        .send()
        .await
        .unwrap();
    let out = asg
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(name)
        .send()
        .await
        .unwrap();
    let ids: Vec<String> = out.auto_scaling_groups()[0]
        .instances()
        .iter()
        .map(|i| i.instance_id().unwrap().to_string())
        .collect();
    for (k, id) in ids.iter().enumerate() {
        ec2.create_tags()
            .resources(id)
            .tags(
                Tag::builder()
                    .key("etcd-address")
                    .value(format!("127.0.9.{}", k + 1))
                    .build(),
            )
            // The first declares its etcd release; the second a value that is none.
            .tags(
                Tag::builder()
                    .key(etcd_asg_lifecycle::model::VERSION_TAG)
                    .value(if k == 0 {
                        "3.6.17"
                    } else {
                        "3.6.17\nETCD_DATA_DIR=/"
                    })
                    .build(),
            )
            .send()
            .await
            .unwrap();
    }
    ids
}

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

/// The ARN of the instance the SSM tests publish for.
const ARN: &str = "arn:aws:ec2:us-east-1:123456789012:instance/i-00000001";

/// The SSM adapter under `prefix`, against moto, and a raw client to check what it wrote.
async fn ssm_store(moto: &support::Moto, prefix: &str) -> (SsmParameters, aws_sdk_ssm::Client) {
    let ssm = aws_sdk_ssm::Client::new(&sdk_at(&moto.endpoint).await);
    let store = SsmParameters {
        ssm: ssm.clone(),
        prefix: prefix.into(),
        kms_key_id: None,
    };
    (store, ssm)
}

#[tokio::test]
async fn published_config_round_trips_through_ssm() {
    let dir = tempfile::tempdir().unwrap();
    let moto = support::Moto::start(dir.path());
    let (store, ssm) = ssm_store(&moto, "/etcd-asg-lifecycle/test").await;
    assert_eq!(store.load().await.unwrap(), Default::default());

    let record =
        ClusterRecord::bootstrapping("test-i-00000001".into(), "i-00000001".into(), 1_800_000_000);
    assert_eq!(
        store.create_cluster(&record).await.unwrap(),
        Created::Created
    );
    let rival = ClusterRecord {
        seed: "i-00000002".into(),
        ..record.clone()
    };
    // Create-only: the loser of a bootstrap race learns it lost and the record is unchanged.
    assert_eq!(
        store.create_cluster(&rival).await.unwrap(),
        Created::AlreadyExists
    );

    let config = MemberConfig {
        name: "i-00000001".into(),
        initial_cluster: vec![("i-00000001".into(), "http://127.0.0.2:2380".into())],
        state: InitialState::New,
        token: record.token.clone(),
        peer_url: "http://127.0.0.2:2380".into(),
        client_url: "http://127.0.0.2:2379".into(),
        auto_compaction_retention: "1h".into(),
        quota_backend_bytes: 2 << 30,
        snapshot_count: 10_000,
        restore: None,
        client_cert_auth: false,
        root_tokens: false,
        etcd_version: None,
        metrics_url: None,
    };
    store.publish("i-00000001", ARN, &config).await.unwrap();
    store.publish("i-00000001", ARN, &config).await.unwrap(); // overwrite is fine
                                                              // Something else under the prefix, and a corrupt member config: ignored, not fatal.
    ssm.put_parameter()
        .name("/etcd-asg-lifecycle/test/members/i-0000000f")
        .value("garbage")
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .send()
        .await
        .unwrap();
    let state = store.load().await.unwrap();
    assert_eq!(state.cluster, Some(record.clone()));
    assert_eq!(state.members.len(), 1);
    let published = &state.members["i-00000001"];
    assert_eq!(published.config, config);
    assert!(published.published_at > 1_700_000_000);

    // The instance's boot script reads exactly this text.
    let raw = ssm
        .get_parameter()
        .name(store.member_name("i-00000001"))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.parameter().unwrap().value().unwrap(), config.to_env());
    // Tagged with the instance's ARN: the instance policy lets only that instance read it.
    let tags = ssm
        .list_tags_for_resource()
        .resource_type(aws_sdk_ssm::types::ResourceTypeForTagging::Parameter)
        .resource_id(store.member_name("i-00000001"))
        .send()
        .await
        .unwrap();
    let tags: Vec<(&str, &str)> = tags
        .tag_list()
        .iter()
        .map(|t| (t.key(), t.value()))
        .collect();
    assert_eq!(
        tags,
        vec![(
            INSTANCE_ARN_TAG,
            "arn:aws:ec2:us-east-1:123456789012:instance/i-00000001"
        )]
    );

    // Down-marks round-trip; forgetting twice is fine.
    store.note_down("i-00000001", 1_800_000_100).await.unwrap();
    assert_eq!(
        store.load().await.unwrap().down_since["i-00000001"],
        1_800_000_100
    );
    store.forget_down("i-00000001").await.unwrap();
    store.forget_down("i-00000001").await.unwrap();
    assert!(store.load().await.unwrap().down_since.is_empty());

    // A record whose seed never served is replaced once: a second replacement of the same
    // record, with another seed, loses and changes nothing.
    let next =
        ClusterRecord::bootstrapping("test-i-00000003".into(), "i-00000003".into(), 1_800_000_200);
    let other =
        ClusterRecord::bootstrapping("test-i-00000004".into(), "i-00000004".into(), 1_800_000_201);
    assert_eq!(
        store.replace_cluster(&record, &next).await.unwrap(),
        Created::Created
    );
    assert_eq!(
        store.replace_cluster(&record, &other).await.unwrap(),
        Created::AlreadyExists
    );
    assert_eq!(store.load().await.unwrap().cluster, Some(next.clone()));
    // Served, with its id: the record says so from now on.
    let served = ClusterRecord {
        state: RecordState::Served,
        cluster_id: Some(0xdead_beef),
        ..next.clone()
    };
    assert_eq!(store.mark_served(&served).await.unwrap(), Created::Created);
    assert_eq!(store.load().await.unwrap().cluster, Some(served.clone()));
    // Replacing a record that is no longer the current one changes nothing.
    assert_eq!(
        store.replace_cluster(&next, &other).await.unwrap(),
        Created::AlreadyExists
    );
    assert_eq!(store.load().await.unwrap().cluster, Some(served.clone()));
    // A record written before `state` existed belongs to a cluster that served.
    ssm.put_parameter()
        .name(store.cluster_name())
        .value(r#"{"token":"old","seed":"i-00000009","created_at":1}"#)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .overwrite(true)
        .send()
        .await
        .unwrap();
    assert!(store.load().await.unwrap().cluster.unwrap().has_served());
    ssm.put_parameter()
        .name(store.cluster_name())
        .value(serde_json::to_string(&record).unwrap())
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .overwrite(true)
        .send()
        .await
        .unwrap();

    store.unpublish("i-00000001", false).await.unwrap();
    store.unpublish("i-00000001", false).await.unwrap(); // already gone: fine
    assert!(store.load().await.unwrap().members.is_empty());

    // A restore request carries when it was written: it is for the loss it postdates.
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    store.request_restore("latest").await.unwrap();
    let state = store.load().await.unwrap();
    assert_eq!(state.restore_request.as_deref(), Some("latest"));
    let at = state.restore_request_at.expect("SSM's LastModifiedDate");
    assert!((before - 5..=before + 5).contains(&at), "{at} vs {before}");

    // A cluster record nobody can read stops everything: bootstrapping over it could split brain.
    ssm.put_parameter()
        .name(store.cluster_name())
        .value("{not json")
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .overwrite(true)
        .send()
        .await
        .unwrap();
    let e = store.load().await.unwrap_err();
    assert!(
        matches!(e, Error::BadParameter { .. }) && !e.is_retryable(),
        "{e:?}"
    );
}

#[tokio::test]
async fn the_ca_and_member_keys_are_kept_as_secure_strings_created_once() {
    use etcd_asg_lifecycle::ports::Secrets;
    let dir = tempfile::tempdir().unwrap();
    let moto = support::Moto::start(dir.path());
    let (store, ssm) = ssm_store(&moto, "/etcd-asg-lifecycle/pki").await;
    let now = 1_800_000_000;
    // The first cold start creates the CA; every later one (and a racing one) reads that one.
    let ca = etcd_asg_lifecycle::reconciler::setup::cluster_ca(&store, "pki", now, true)
        .await
        .unwrap()
        .unwrap();
    let again = etcd_asg_lifecycle::reconciler::setup::cluster_ca(&store, "pki", now + 5, false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ca, again);
    let rival = etcd_asg_lifecycle::pki::Ca::generate("pki", now).unwrap();
    assert_eq!(
        store.create_ca(&rival).await.unwrap(),
        Created::AlreadyExists
    );
    // The CA's record never holds the token key: that is kept apart, created once too.
    let token_key = ca.token_key.clone().expect("a token key with the CA");
    let loaded = store.load_ca().await.unwrap().unwrap();
    assert_eq!(loaded.token_key, None);
    assert_eq!(
        etcd_asg_lifecycle::pki::Ca {
            token_key: Some(token_key.clone()),
            ..loaded
        },
        ca
    );
    assert_eq!(
        store
            .create_token_key(&etcd_asg_lifecycle::pki::generate_token_key().unwrap())
            .await
            .unwrap(),
        Created::AlreadyExists
    );
    assert_eq!(store.load_token_key().await.unwrap(), Some(token_key));
    let kind = |name: String| {
        let ssm = ssm.clone();
        async move {
            let p = ssm.get_parameter().name(name).send().await.unwrap();
            let p = p.parameter().unwrap().clone();
            (p.r#type().unwrap().clone(), p.value().unwrap().to_string())
        }
    };
    // (moto's SecureString is not really encrypted: the type is what we can check here.)
    let (t, _) = kind(store.ca_name()).await;
    assert_eq!(t, aws_sdk_ssm::types::ParameterType::SecureString);
    let (t, _) = kind(store.token_key_name()).await;
    assert_eq!(t, aws_sdk_ssm::types::ParameterType::SecureString);
    // An adopted cluster's root password: a SecureString under pki/, stored again over itself.
    assert_eq!(store.load_root_password().await.unwrap(), None);
    for given in ["first", "second"] {
        let password = etcd_asg_lifecycle::pki::Password::given(given.into());
        store.put_root_password(&password).await.unwrap();
        assert_eq!(store.load_root_password().await.unwrap(), Some(password));
    }
    assert!(store
        .root_password_name()
        .starts_with("/etcd-asg-lifecycle/pki/pki/"));
    let (t, _) = kind(store.root_password_name()).await;
    assert_eq!(t, aws_sdk_ssm::types::ParameterType::SecureString);

    // A member's bundle: SecureString, tagged for its instance, deleted on removal. Handed out
    // again (the planner does so only where no end was written: a hand-out cut short), both
    // the bundle and its end are the second's, and the bundle keeps its tag.
    let first = ca
        .issue_member("i-00000001", "127.0.0.2", &[], 90 * 86_400, now)
        .unwrap();
    store
        .hand_out("i-00000001", ARN, &first.bundle(&ca), first.not_after)
        .await
        .unwrap();
    let issued = ca
        .issue_member("i-00000001", "127.0.0.2", &[], 90 * 86_400, now + 1)
        .unwrap();
    let bundle = issued.bundle(&ca);
    store
        .hand_out("i-00000001", ARN, &bundle, issued.not_after)
        .await
        .unwrap();
    let (t, _) = kind(store.tls_name("i-00000001")).await;
    assert_eq!(t, aws_sdk_ssm::types::ParameterType::SecureString);
    let decrypted = ssm
        .get_parameter()
        .name(store.tls_name("i-00000001"))
        .with_decryption(true)
        .send()
        .await
        .unwrap();
    assert_eq!(
        decrypted.parameter().unwrap().value().unwrap(),
        bundle.expose()
    );
    let tags = ssm
        .list_tags_for_resource()
        .resource_type(aws_sdk_ssm::types::ResourceTypeForTagging::Parameter)
        .resource_id(store.tls_name("i-00000001"))
        .send()
        .await
        .unwrap();
    assert_eq!(tags.tag_list()[0].key(), INSTANCE_ARN_TAG);
    assert!(tags.tag_list()[0].value().ends_with("instance/i-00000001"));
    // The published state ignores key material (and never decrypts it), and knows when the
    // certificate handed out ends.
    let state = store.load().await.unwrap();
    assert!(state.members.is_empty());
    assert!(
        state.issuing.is_empty(),
        "its end written: no longer issuing"
    );
    assert_eq!(
        state.cert_not_after.get("i-00000001"),
        Some(&issued.not_after)
    );
    store.unpublish("i-00000001", true).await.unwrap();
    store.unpublish("i-00000001", true).await.unwrap();
    assert!(store.load().await.unwrap().cert_not_after.is_empty());
    assert!(ssm
        .get_parameter()
        .name(store.tls_name("i-00000001"))
        .send()
        .await
        .is_err());
}

// --- AWS failing as it does: sim/faults.py in front of moto ---------------------------------

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
