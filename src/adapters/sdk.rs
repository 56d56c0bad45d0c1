//! The AWS SDK's configuration every client is built from, and what its failures become:
//! `Error::Aws`, naming the operation, its cause kept.

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{AppName, BehaviorVersion, ConfigLoader, SdkConfig};

use crate::error::{BoxError, Error};

pub fn aws(operation: &'static str) -> impl FnOnce(BoxError) -> Error {
    move |source| Error::Aws { operation, source }
}

/// Establishing a connection: the SDK's own default (3.1 s) is kept in spirit. A missing VPC
/// endpoint shows as this, not as an error naming the endpoint
/// (<https://docs.aws.amazon.com/lambda/latest/dg/configuration-vpc.html>).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// One attempt of one call, answer included. The SDK sets none by default: a connection that
/// stalls after connecting would hang the invocation until Lambda kills it
/// (<https://docs.aws.amazon.com/sdk-for-rust/latest/dg/timeouts.html>). The control-plane calls
/// of Auto Scaling, EC2 and SSM answer in well under a second.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// One call, all its attempts and the pauses between them.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(15);
/// S3's attempts carry a snapshot's part (8 MiB): more time, and the snapshot's own bound (half
/// of what is left of the invocation) ends the whole upload.
pub const S3_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(60);
pub const S3_OPERATION_TIMEOUT: Duration = Duration::from_secs(150);
/// Attempts of a call (the standard mode's default, 3), with backoff of full jitter from 0.2 s,
/// at most 2 s: a throttled or failing dependency costs seconds of an invocation, not its
/// minutes (the default backoff grows to 20 s). The standard mode's retry quota (a token bucket
/// the client shares) stops retries when most calls fail
/// (<https://docs.aws.amazon.com/sdk-for-rust/latest/dg/retries.html>).
pub const MAX_ATTEMPTS: u32 = 3;
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(200);
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The one SDK configuration, from the environment (credentials, Region, an endpoint override),
/// with every call bounded and retried briefly (`bounded`).
pub async fn load(app: &'static str) -> SdkConfig {
    bounded(aws_config::defaults(BehaviorVersion::latest()), app)
        .load()
        .await
}

/// `loader` with every call bounded and retried briefly. `app` names the caller in each
/// request's User-Agent (`app/<app>`), as CloudTrail then shows it: the function, or the
/// operator CLI.
pub fn bounded(loader: ConfigLoader, app: &'static str) -> ConfigLoader {
    loader
        .app_name(AppName::new(app).expect("a valid app name"))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .operation_attempt_timeout(ATTEMPT_TIMEOUT)
                .operation_timeout(OPERATION_TIMEOUT)
                .build(),
        )
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(MAX_ATTEMPTS)
                .with_initial_backoff(INITIAL_BACKOFF)
                .with_max_backoff(MAX_BACKOFF),
        )
}

/// S3's timeouts (`S3_ATTEMPT_TIMEOUT`), the rest as `load`'s.
pub fn s3_timeouts() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_attempt_timeout(S3_ATTEMPT_TIMEOUT)
        .operation_timeout(S3_OPERATION_TIMEOUT)
        .build()
}
