//! The work queue on Amazon SQS (a standard queue with a redrive policy to a dead-letter queue).
//! The client comes from aws-config like the DynamoDB one: `AWS_ENDPOINT_URL_SQS` points it at
//! a local server (moto's, in the tests).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};

use super::{MAX_MESSAGE_BYTES, MAX_VISIBILITY, QueueError, Received, WorkQueue, refuse_too_large};

/// SQS's longest long poll.
pub const MAX_WAIT: Duration = Duration::from_secs(20);

/// The work queue on one SQS queue, by its URL.
pub struct SqsQueue {
    client: Client,
    url: String,
    sent: AtomicU64,
}

impl std::fmt::Debug for SqsQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsQueue").field("url", &self.url).finish()
    }
}

/// How long one SQS call may take: short for the ingress, which must answer Slack within 3 s;
/// past a long poll for a worker.
#[derive(Clone, Copy, Debug)]
pub enum CallBudget {
    /// The ingress's: 1.2 s an attempt, 2.5 s a call, within Slack's 3 s.
    Ingress,
    /// A worker's: `MAX_WAIT` and 5 s more an attempt, `MAX_WAIT` and 15 s more a call.
    Worker,
}

/// The SQS client, built once per process.
pub async fn client_from_env(budget: CallBudget) -> Client {
    let (attempt, operation) = match budget {
        CallBudget::Ingress => (Duration::from_millis(1200), Duration::from_millis(2500)),
        CallBudget::Worker => (
            MAX_WAIT + Duration::from_secs(5),
            MAX_WAIT + Duration::from_secs(15),
        ),
    };
    let config = aws_sdk_sqs::config::Builder::from(crate::aws::sdk_config().await)
        .timeout_config(crate::aws::timeouts(attempt, operation))
        .build();
    Client::from_conf(config)
}

impl SqsQueue {
    /// The queue at `url`, through `client` (built once per process: `client_from_env`).
    pub fn new(client: Client, url: impl Into<String>) -> Self {
        Self {
            client,
            url: url.into(),
            sent: AtomicU64::new(0),
        }
    }

    /// The queue at `url`, through a client built from the environment with `budget`'s
    /// timeouts (`client_from_env`). Call once per process.
    pub async fn from_env(url: impl Into<String>, budget: CallBudget) -> Self {
        Self::new(client_from_env(budget).await, url)
    }

    /// The queue's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The SDK client it sends its requests through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// SendMessage requests made (for benchmarks and tests that count them).
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// The queue's `maxReceiveCount` (its redrive policy), where it has one.
    pub async fn max_receives(&self) -> Result<Option<u32>, QueueError> {
        let attributes = self
            .client
            .get_queue_attributes()
            .queue_url(&self.url)
            .attribute_names(QueueAttributeName::RedrivePolicy)
            .send()
            .await
            .map_err(unavailable)?;
        let policy = attributes
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::RedrivePolicy))
            .and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok());
        Ok(policy.and_then(|p| match &p["maxReceiveCount"] {
            serde_json::Value::String(s) => s.parse().ok(),
            n => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        }))
    }

    /// Creates `name` and its dead-letter queue `name-dlq` (messages move there after
    /// `max_receives` receives), as the SAM template does; returns the queue's URL and the
    /// dead-letter queue's.
    pub async fn create_with_dead_letters(
        client: &Client,
        name: &str,
        max_receives: u32,
        visibility: Duration,
    ) -> Result<(String, String), QueueError> {
        let max_size = MAX_MESSAGE_BYTES.to_string();
        let dlq = client
            .create_queue()
            .queue_name(format!("{name}-dlq"))
            .attributes(QueueAttributeName::MessageRetentionPeriod, "1209600")
            .attributes(QueueAttributeName::MaximumMessageSize, &max_size)
            .send()
            .await
            .map_err(unavailable)?;
        let dlq_url = dlq.queue_url().unwrap_or_default().to_string();
        let attributes = client
            .get_queue_attributes()
            .queue_url(&dlq_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(unavailable)?;
        let dlq_arn = attributes
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::QueueArn))
            .cloned()
            .unwrap_or_default();
        let redrive = serde_json::json!({
            "deadLetterTargetArn": dlq_arn,
            "maxReceiveCount": max_receives.to_string(),
        });
        let queue = client
            .create_queue()
            .queue_name(name)
            .set_attributes(Some(HashMap::from([
                (QueueAttributeName::RedrivePolicy, redrive.to_string()),
                (
                    QueueAttributeName::VisibilityTimeout,
                    visibility.as_secs().to_string(),
                ),
                (QueueAttributeName::MaximumMessageSize, max_size),
            ])))
            .send()
            .await
            .map_err(unavailable)?;
        Ok((queue.queue_url().unwrap_or_default().to_string(), dlq_url))
    }
}

#[async_trait]
impl WorkQueue for SqsQueue {
    async fn send(&self, body: &str) -> Result<(), QueueError> {
        refuse_too_large(body)?;
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .send()
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<Received>, QueueError> {
        let out = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(max.clamp(1, 10) as i32)
            .visibility_timeout(visibility.as_secs().clamp(1, MAX_VISIBILITY.as_secs()) as i32)
            .wait_time_seconds(wait.min(MAX_WAIT).as_secs() as i32)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(unavailable)?;
        Ok(out
            .messages()
            .iter()
            .filter_map(|m| {
                Some(Received {
                    message_id: m.message_id()?.to_string(),
                    receipt_handle: m.receipt_handle()?.to_string(),
                    body: m.body().unwrap_or_default().to_string(),
                    receive_count: m
                        .attributes()
                        .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(1),
                })
            })
            .collect())
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        self.client
            .delete_message()
            .queue_url(&self.url)
            .receipt_handle(receipt_handle)
            .send()
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn change_visibility(
        &self,
        receipt_handle: &str,
        after: Duration,
    ) -> Result<(), QueueError> {
        self.client
            .change_message_visibility()
            .queue_url(&self.url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(after.as_secs().min(MAX_VISIBILITY.as_secs()) as i32)
            .send()
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}

fn unavailable<E: std::error::Error + Send + Sync + 'static>(
    e: aws_sdk_sqs::error::SdkError<E, aws_smithy_runtime_api::http::Response>,
) -> QueueError {
    QueueError::Unavailable(Box::new(e))
}
