//! Thin adapters from the ports to etcd and AWS: translation only, no decisions.

pub mod autoscaling;
pub mod etcd;
pub mod s3;
mod sdk;
pub mod ssm;

use crate::config::Config;
use crate::error::Error;
use crate::model::Timestamp;
use crate::pki::Ca;
use crate::ports::Created;
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
    let published = ssm::SsmParameters {
        ssm: aws_sdk_ssm::Client::new(aws),
        prefix: config.parameter_prefix.clone(),
        instance_arn_prefix: instance_arn_prefix.clone(),
        kms_key_id: config.pki.as_ref().and_then(|p| p.kms_key_id.clone()),
    };
    let clock = system_clock();
    let (ca, members) = match (&config.pki, &config.tls) {
        (Some(_), _) => {
            let ca = cluster_ca(&published, &config.settings.cluster_name, clock()).await?;
            let members = etcd::EtcdMembers::managed(config.timing.etcd_timeout, &ca)?;
            (Some(ca), members)
        }
        (None, Some(files)) => {
            let tls = etcd::ClientTls::from_files(files)?;
            (
                None,
                etcd::EtcdMembers::new(config.timing.etcd_timeout, Some(&tls))?,
            )
        }
        (None, None) => (
            None,
            etcd::EtcdMembers::new(config.timing.etcd_timeout, None)?,
        ),
    };
    let members = members.with_metrics_port(config.settings.topology.metrics_port);
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
        published,
        members,
        ca,
        config,
        clock,
        backup_failed_at: Default::default(),
    })
}

/// TLS=managed: the cluster's CA and its token key, each created (create-only) if there is none
/// yet. The CA's remaining life is logged each time.
pub async fn cluster_ca(
    secrets: &impl crate::ports::Secrets,
    cluster: &str,
    now: Timestamp,
) -> Result<Ca, Error> {
    let mut ca = match secrets.load_ca().await? {
        Some(ca) => ca,
        None => {
            let fresh = Ca::generate(cluster, now)?;
            match secrets.create_ca(&fresh).await? {
                Created::Created => {
                    tracing::warn!(not_after = fresh.not_after, "created the cluster's CA");
                    fresh
                }
                // Another invocation created one first: use that.
                Created::AlreadyExists => secrets.load_ca().await?.ok_or(Error::Pki {
                    what: "reading the CA",
                    detail: "it exists and then does not: deleted by hand?".into(),
                })?,
            }
        }
    };
    ca.token_key = Some(match secrets.load_token_key().await? {
        Some(key) => key,
        None => {
            let fresh = crate::pki::generate_token_key()?;
            match secrets.create_token_key(&fresh).await? {
                Created::Created => {
                    tracing::warn!("created the cluster's token key");
                    fresh
                }
                Created::AlreadyExists => secrets.load_token_key().await?.ok_or(Error::Pki {
                    what: "reading the token key",
                    detail: "it exists and then does not: deleted by hand?".into(),
                })?,
            }
        }
    });
    let days_left = (ca.not_after - now) / 86_400;
    if days_left < 365 {
        tracing::error!(
            days_left,
            not_after = ca.not_after,
            "the cluster's CA ends within a year: plan its replacement (README, TLS)"
        );
    } else {
        tracing::info!(days_left, not_after = ca.not_after, "cluster CA");
    }
    Ok(ca)
}
