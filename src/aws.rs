//! What every AWS SDK client of this crate shares: rustls on ring (the SDK's default, aws-lc, is
//! a second C build), at most 3 attempts in total, and timeouts bounded so that a slow service
//! turns into a failure the protocol handles (a 503, a release) rather than a Lambda timeout.
//! Region, credentials and endpoints come from the environment as usual
//! (`AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_SQS`, `AWS_ENDPOINT_URL_SECRETS_MANAGER`).

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};

/// The SDK's HTTP client on rustls with ring.
pub fn http_client() -> aws_smithy_runtime_api::client::http::SharedHttpClient {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// The shared configuration, with `attempt` and `operation` timeouts.
pub async fn sdk_config(attempt: Duration, operation: Duration) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(http_client())
        .retry_config(RetryConfig::standard().with_max_attempts(3))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(1))
                .operation_attempt_timeout(attempt)
                .operation_timeout(operation)
                .build(),
        )
        .load()
        .await
}
