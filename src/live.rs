//! The wiring the function (at cold start) and the CLI share: the reconciler with its real
//! adapters. Above both `adapters/` and `reconciler/`, so that neither imports the other.

use crate::adapters::{autoscaling, etcd, s3, s3_client, ssm};
use crate::config::Config;
use crate::error::Error;
use crate::reconciler::{system_clock, Reconciler};

/// The reconciler with its real adapters, as the function and the CLI use it.
pub type Live = Reconciler<
    autoscaling::AutoScalingGroup,
    autoscaling::LifecycleHooks,
    ssm::SsmParameters,
    etcd::EtcdMembers,
    s3::S3Backups,
>;

/// One SDK configuration and one client per service: the wiring the function (at cold start)
/// and the CLI share. No call leaves the process here: what needs AWS (the hooks' check, the
/// CA) is `Reconciler::prepare`'s, on the first invocation.
pub fn connect(config: Config, aws: &aws_config::SdkConfig) -> Result<Live, Error> {
    let autoscaling = aws_sdk_autoscaling::Client::new(aws);
    let group = autoscaling::AutoScalingGroup::new(
        autoscaling.clone(),
        aws_sdk_ec2::Client::new(aws),
        config.group_name.clone(),
        config.address_source.clone(),
    );
    let published = ssm::SsmParameters {
        ssm: aws_sdk_ssm::Client::new(aws),
        prefix: config.parameter_prefix.clone(),
        kms_key_id: config.pki.as_ref().and_then(|p| p.kms_key_id.clone()),
    };
    // TLS=managed: the client's own certificate comes with the CA (`Members::identify`).
    let files = match (&config.pki, &config.tls) {
        (None, Some(files)) => Some(etcd::ClientTls::from_files(files)?),
        _ => None,
    };
    let members = etcd::EtcdMembers::new(config.timing.etcd_timeout, files.as_ref())?
        .with_metrics_port(config.settings.topology.metrics_port);
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
        }),
        published,
        members,
        ca: Default::default(),
        prepared: Default::default(),
        config,
        clock: system_clock(),
        backup_failed_at: Default::default(),
        hooks: Default::default(),
        defragmented: Default::default(),
    })
}
