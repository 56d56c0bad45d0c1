//! Thin adapters from the ports to etcd and AWS: translation only, no decisions.

pub mod autoscaling;
pub mod etcd;
pub mod s3;
mod sdk;

pub use sdk::{ATTEMPT_TIMEOUT, OPERATION_TIMEOUT};
pub mod ssm;

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

/// The function's name in each request's User-Agent (`app/…`), and the CLI's.
pub const FUNCTION_APP: &str = "etcd-asg-lifecycle";
pub const CLI_APP: &str = "etcd-asg-cli";

/// The SDK configuration of every client: from the environment, each call bounded and retried
/// briefly (`sdk::load`); `app` is `FUNCTION_APP` or `CLI_APP`.
pub async fn aws_config(app: &'static str) -> aws_config::SdkConfig {
    sdk::load(app).await
}

/// `loader` with the bounds and retries of `aws_config` (for a loader of the tests' own).
pub fn bounded(loader: aws_config::ConfigLoader, app: &'static str) -> aws_config::ConfigLoader {
    sdk::bounded(loader, app)
}

/// An S3 client, with S3's longer timeouts (a part is megabytes); path-style addressing when
/// the endpoint is overridden (an emulator on loopback has no virtual-host names).
pub fn s3_client(aws: &aws_config::SdkConfig) -> aws_sdk_s3::Client {
    let conf = aws_sdk_s3::config::Builder::from(aws)
        .timeout_config(sdk::s3_timeouts())
        .force_path_style(aws.endpoint_url().is_some())
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

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
    })
}
