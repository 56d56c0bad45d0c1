//! Wiring only: configuration, clients, tracing, then the runtime loop.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etcd_asg_lifecycle::metrics::Metrics;
use etcd_asg_lifecycle::{adapters, live};
use etcd_asg_lifecycle::{Config, Response};
use lambda_runtime::{run, service_fn, tracing, Diagnostic, LambdaEvent};
use serde_json::Value;

// One thread: invocations are serialized and every wait is I/O, so a worker pool would only add
// threads, and glibc a malloc arena per thread (make bench's membership peak: docs/figures.md).
// https://docs.rs/tokio/latest/tokio/attr.main.html#using-the-current-thread-runtime
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    tracing::init_default_subscriber();
    let config =
        Config::from_env().inspect_err(|e| tracing::error!(error = ?e, "bad configuration"))?;
    let aws = adapters::aws_config(adapters::FUNCTION_APP).await;
    // No AWS call before the first poll: the hooks' check and the CA are the first
    // invocation's (`Reconciler::prepare`).
    let reconciler = live::connect(config, &aws)
        .inspect_err(|e| tracing::error!(error = ?e, kind = %e.kind(), "cannot start"))?;
    let reconciler = &reconciler;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline = instant_of(event.context.deadline);
        // Boxed: the handler's future nests the SDK's deep enough that computing its layout
        // inline overflows rustc's query depth in some builds (the tests').
        let result = Box::pin(reconciler.handle(&event.payload, deadline)).await;
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
