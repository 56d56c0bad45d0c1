//! Thin adapters from the ports to etcd and AWS: translation only, no decisions.

pub mod autoscaling;
pub mod etcd;
pub mod s3;
mod sdk;

pub use sdk::{ATTEMPT_TIMEOUT, OPERATION_TIMEOUT};
pub mod ssm;

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
