//! Wiring only: configuration, clients, tracing, then the runtime loop.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etcd_asg_lifecycle::adapters::autoscaling::{AutoScalingGroup, LifecycleHooks};
use etcd_asg_lifecycle::adapters::etcd::EtcdMembers;
use etcd_asg_lifecycle::adapters::ssm::SsmParameters;
use etcd_asg_lifecycle::metrics::Metrics;
use etcd_asg_lifecycle::{reconciler, Config, Reconciler, Response};
use lambda_runtime::{run, service_fn, tracing, Diagnostic, LambdaEvent};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    tracing::init_default_subscriber();
    let config =
        Config::from_env().inspect_err(|e| tracing::error!(error = ?e, "bad configuration"))?;
    let aws = aws_config::load_from_env().await;
    let autoscaling = aws_sdk_autoscaling::Client::new(&aws);
    let group = AutoScalingGroup {
        autoscaling: autoscaling.clone(),
        ec2: aws_sdk_ec2::Client::new(&aws),
        group: config.group_name.clone(),
        address: config.address_source.clone(),
    };
    let instance_arn_prefix = group
        .instance_arn_prefix()
        .await
        .inspect_err(|e| tracing::error!(error = ?e, kind = %e.kind(), "cannot start"))?;
    let reconciler = Reconciler {
        group,
        lifecycle: LifecycleHooks {
            autoscaling,
            group: config.group_name.clone(),
            launch_hook: config.launch_hook.clone(),
            terminate_hook: config.terminate_hook.clone(),
        },
        published: SsmParameters {
            ssm: aws_sdk_ssm::Client::new(&aws),
            prefix: config.parameter_prefix.clone(),
            instance_arn_prefix,
        },
        members: EtcdMembers::new(config.etcd_timeout, config.tls.as_ref())?,
        config,
        clock: reconciler::system_clock(),
    };
    reconciler
        .check_hooks()
        .await
        .inspect_err(|e| tracing::error!(error = ?e, kind = %e.kind(), "cannot start"))?;
    let reconciler = &reconciler;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline = instant_of(event.context.deadline);
        let result = reconciler.handle(&event.payload, deadline).await;
        // One EMF line per invocation, on stdout where CloudWatch reads it.
        let mut metrics = Metrics::default();
        match &result {
            Ok(Response::Reconciled { metrics: m, .. }) => metrics = m.clone(),
            Ok(_) => {}
            Err(e) => {
                tracing::error!(error = ?e, kind = %e.kind(), "invocation failed");
                metrics.count(format!("Errors.{}", e.kind()));
            }
        }
        if !metrics.0.is_empty() {
            let cluster = &reconciler.config.settings.cluster_name;
            println!("{}", metrics.emf(cluster, now_ms()));
        }
        result.map_err(Diagnostic::from)
    }))
    .await
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The runtime gives the deadline as epoch milliseconds.
fn instant_of(deadline_ms: u64) -> Instant {
    Instant::now() + Duration::from_millis(deadline_ms.saturating_sub(now_ms()))
}
