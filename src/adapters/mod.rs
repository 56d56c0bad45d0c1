//! Thin adapters from the ports to etcd and AWS: translation only, no decisions.

pub mod autoscaling;
pub mod etcd;
pub mod s3;
pub mod ssm;

use crate::config::Config;
use crate::error::{BoxError, Error};
use crate::reconciler::{system_clock, Reconciler};

/// The reconciler with its real adapters, as the function and the CLI use it.
pub type Live = Reconciler<
    autoscaling::AutoScalingGroup,
    autoscaling::LifecycleHooks,
    ssm::SsmParameters,
    etcd::EtcdMembers,
    s3::S3Backups,
>;

/// An S3 client; path-style addressing when the endpoint is overridden (an emulator on
/// loopback has no virtual-host names).
pub fn s3_client(aws: &aws_config::SdkConfig) -> aws_sdk_s3::Client {
    let conf = aws_sdk_s3::config::Builder::from(aws)
        .force_path_style(aws.endpoint_url().is_some())
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

/// One SDK configuration, one client per service, one instance-ARN look-up: the wiring the
/// function (at cold start) and the CLI share.
pub async fn connect(config: Config, aws: &aws_config::SdkConfig) -> Result<Live, Error> {
    let autoscaling = aws_sdk_autoscaling::Client::new(aws);
    let group = autoscaling::AutoScalingGroup {
        autoscaling: autoscaling.clone(),
        ec2: aws_sdk_ec2::Client::new(aws),
        group: config.group_name.clone(),
        address: config.address_source.clone(),
    };
    let instance_arn_prefix = group.instance_arn_prefix().await?;
    Ok(Reconciler {
        group,
        lifecycle: autoscaling::LifecycleHooks {
            autoscaling,
            group: config.group_name.clone(),
            launch_hook: config.launch_hook.clone(),
            terminate_hook: config.terminate_hook.clone(),
        },
        backups: config.backup_store.as_ref().map(|store| s3::S3Backups {
            s3: s3_client(aws),
            bucket: store.bucket.clone(),
            prefix: store.prefix.clone(),
            instance_arn_prefix: instance_arn_prefix.clone(),
        }),
        published: ssm::SsmParameters {
            ssm: aws_sdk_ssm::Client::new(aws),
            prefix: config.parameter_prefix.clone(),
            instance_arn_prefix,
        },
        members: etcd::EtcdMembers::new(config.etcd_timeout, config.tls.as_ref())?,
        config,
        clock: system_clock(),
    })
}

fn aws(operation: &'static str) -> impl FnOnce(BoxError) -> Error {
    move |source| Error::Aws { operation, source }
}
