//! The AWS adapters against moto server, extended with lifecycle hooks by sim/moto_lifecycle.py
//! (moto itself lacks CompleteLifecycleAction and RecordLifecycleActionHeartbeat).
//!
//! One file per adapter: Auto Scaling and EC2 (`autoscaling.rs`), SSM (`ssm.rs`); and AWS failing
//! as it does, sim/faults.py in front of moto (`faults.rs`). Here, what they share: the SDK at the
//! emulator, a group held by its hooks, the SSM store.

#[path = "../support/mod.rs"]
mod support;

mod autoscaling;
mod faults;
mod ssm;

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
