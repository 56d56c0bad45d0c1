//! The SSM adapter: the published config round-trips, and the CA and member keys are kept as
//! SecureStrings, created once.

use super::*;

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
