//! The DynamoDB ledger: one table shared by every instance and every deployed version.
//!
//! One item per event, keyed by Slack's `event_id` alone (nothing derived from the function's
//! name or version, so old and new versions share it during a deploy). Each operation is one
//! conditional write; a duplicate learns what it hit from the failed write itself
//! (`ReturnValuesOnConditionCheckFailure=ALL_OLD`), with no extra read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::BehaviorVersion;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ReturnValue,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;

use super::{existing_blocks_claim, Claim, ClaimRequest, Ledger, LedgerError, OwnerToken, Status};
use crate::envelope::EventId;

/// Attribute names of the ledger item (see the README's item schema).
pub mod attr {
    pub const PK: &str = "pk";
    pub const STATUS: &str = "status";
    pub const OWNER: &str = "owner";
    pub const LEASE_UNTIL: &str = "lease_until";
    pub const EXPIRES_AT: &str = "expires_at";
    pub const ATTEMPTS: &str = "attempts";
    pub const TEAM_ID: &str = "team_id";
    pub const RETRY_NUM: &str = "retry_num";
    pub const RETRY_REASON: &str = "retry_reason";
    pub const CREATED_AT: &str = "created_at";
    pub const CLAIMED_AT: &str = "claimed_at";
    pub const COMPLETED_AT: &str = "completed_at";
    pub const RELEASED_AT: &str = "released_at";
}

/// The claim's condition: the write succeeds only where the event counts as absent.
/// - `attribute_not_exists(pk)`: never seen;
/// - `expires_at <= :now_s`: past its TTL but not yet deleted (TTL deletion is lazy, up to
///   about 48 h late, and an expired item can still be read and written until then);
/// - `#status = :released`: its claimant gave it up (the Slack call failed);
/// - `#status = :in_progress AND lease_until <= :now_ms`: its claimant's lease ran out (it
///   crashed or was killed at its deadline), so this copy takes it over.
///
/// A `done` item inside its TTL, or a live lease, fails the condition.
const CLAIM_CONDITION: &str = "attribute_not_exists(#pk) \
    OR #expires_at <= :now_s \
    OR #status = :released \
    OR (#status = :in_progress AND #lease_until <= :now_ms)";

/// Completion and release: only by the owner of a claim still in progress.
const OWNER_CONDITION: &str = "#owner = :owner AND #status = :in_progress";

pub struct DynamoLedger {
    client: Client,
    table: String,
    requests: AtomicU64,
}

impl std::fmt::Debug for DynamoLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoLedger")
            .field("table", &self.table)
            .finish()
    }
}

impl DynamoLedger {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            requests: AtomicU64::new(0),
        }
    }

    /// Builds the client from the environment (region, credentials, and
    /// `AWS_ENDPOINT_URL_DYNAMODB` / `AWS_ENDPOINT_URL` for a local server). Call once per process.
    pub async fn from_env(table: impl Into<String>) -> Self {
        Self::new(client_from_env().await, table)
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// DynamoDB requests this ledger has sent (each conditional write is one), for benchmarks
    /// and tests that count round trips rather than assume them.
    pub fn requests_sent(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Creates the ledger's table (on-demand capacity, key `pk`), as the SAM template does.
    /// For local use and tests; TTL is left to the deployment (see the README).
    pub async fn create_table(client: &Client, table: &str) -> Result<(), LedgerError> {
        client
            .create_table()
            .table_name(table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(attr::PK)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .map_err(unavailable)?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(attr::PK)
                    .key_type(KeyType::Hash)
                    .build()
                    .map_err(unavailable)?,
            )
            .send()
            .await
            .map_err(|e| unavailable(e.into_service_error()))?;
        Ok(())
    }

    /// Reads an item as it is stored (for tests and operators; the protocol never reads).
    pub async fn get_item(
        &self,
        event_id: &str,
    ) -> Result<Option<HashMap<String, AttributeValue>>, LedgerError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(attr::PK, AttributeValue::S(event_id.to_string()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable(e.into_service_error()))?;
        Ok(out.item)
    }

    async fn finish(
        &self,
        event_id: &EventId,
        owner: &OwnerToken,
        now_ms: u64,
        to: Status,
    ) -> Result<(), LedgerError> {
        let at = match to {
            Status::Done => attr::COMPLETED_AT,
            _ => attr::RELEASED_AT,
        };
        self.requests.fetch_add(1, Ordering::Relaxed);
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(attr::PK, AttributeValue::S(event_id.to_string()))
            .update_expression("SET #status = :to, #at = :now_ms")
            .condition_expression(OWNER_CONDITION)
            .expression_attribute_names("#at", at)
            .expression_attribute_names("#status", attr::STATUS)
            .expression_attribute_names("#owner", attr::OWNER)
            .expression_attribute_values(":to", s(to.as_str()))
            .expression_attribute_values(":now_ms", n(now_ms))
            .expression_attribute_values(":owner", s(owner.as_str()))
            .expression_attribute_values(":in_progress", s(Status::InProgress.as_str()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                Err(LedgerError::NotOwner {
                    event_id: event_id.clone(),
                })
            }
            Err(e) => Err(unavailable(e)),
        }
    }
}

/// The SDK client, built once per process: rustls on ring, retries and timeouts bounded so that
/// a slow DynamoDB turns into a 503 (and a Slack retry) rather than a Lambda timeout.
pub async fn client_from_env() -> Client {
    let config = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http_client())
        .retry_config(RetryConfig::standard().with_max_attempts(3))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(1))
                .operation_attempt_timeout(Duration::from_secs(2))
                .operation_timeout(Duration::from_secs(5))
                .build(),
        )
        .load()
        .await;
    Client::new(&config)
}

/// The SDK's HTTP client on rustls with ring (the SDK's default, aws-lc, is a second C build).
pub fn http_client() -> aws_smithy_runtime_api::client::http::SharedHttpClient {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

#[async_trait]
impl Ledger for DynamoLedger {
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<Claim, LedgerError> {
        // Every attribute goes through a `#name` placeholder: several are DynamoDB reserved words.
        let mut set = vec![
            "#status = :in_progress".to_string(),
            "#owner = :owner".to_string(),
            "#lease_until = :lease_until".to_string(),
            "#expires_at = :expires_at".to_string(),
            "#attempts = if_not_exists(#attempts, :zero) + :one".to_string(),
            "#created_at = if_not_exists(#created_at, :now_ms)".to_string(),
            "#claimed_at = :now_ms".to_string(),
        ];
        let mut remove = vec!["#completed_at".to_string(), "#released_at".to_string()];
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(attr::PK, AttributeValue::S(request.event_id.to_string()))
            .condition_expression(CLAIM_CONDITION)
            .set_expression_attribute_names(Some(
                [
                    attr::PK,
                    attr::STATUS,
                    attr::OWNER,
                    attr::LEASE_UNTIL,
                    attr::EXPIRES_AT,
                    attr::ATTEMPTS,
                    attr::TEAM_ID,
                    attr::RETRY_NUM,
                    attr::RETRY_REASON,
                    attr::CREATED_AT,
                    attr::CLAIMED_AT,
                    attr::COMPLETED_AT,
                    attr::RELEASED_AT,
                ]
                .into_iter()
                .map(|a| (format!("#{a}"), a.to_string()))
                .collect(),
            ))
            .expression_attribute_values(":in_progress", s(Status::InProgress.as_str()))
            .expression_attribute_values(":released", s(Status::Released.as_str()))
            .expression_attribute_values(":owner", s(request.owner.as_str()))
            .expression_attribute_values(":lease_until", n(request.lease_until_ms))
            .expression_attribute_values(":expires_at", n(request.expires_at_s))
            .expression_attribute_values(":now_ms", n(request.now_ms))
            .expression_attribute_values(":now_s", n(request.now_ms / 1000))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .return_values(ReturnValue::UpdatedNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        // Optional attributes: set what this delivery has, remove what an earlier one left.
        let optional = [
            (attr::TEAM_ID, ":team_id", request.team_id.map(s)),
            (
                attr::RETRY_NUM,
                ":retry_num",
                request.retry_num.map(|r| n(r as u64)),
            ),
            (
                attr::RETRY_REASON,
                ":retry_reason",
                request.retry_reason.map(s),
            ),
        ];
        for (name, placeholder, value) in optional {
            match value {
                Some(v) => {
                    set.push(format!("#{name} = {placeholder}"));
                    update = update.expression_attribute_values(placeholder, v);
                }
                None => remove.push(format!("#{name}")),
            }
        }
        let expression = format!("SET {} REMOVE {}", set.join(", "), remove.join(", "));

        self.requests.fetch_add(1, Ordering::Relaxed);
        match update.update_expression(expression).send().await {
            Ok(out) => {
                let attempt = out
                    .attributes()
                    .and_then(|a| a.get(attr::ATTEMPTS))
                    .and_then(number)
                    .unwrap_or(1);
                Ok(Claim::Acquired {
                    attempt: attempt.try_into().unwrap_or(u32::MAX),
                })
            }
            Err(SdkError::ServiceError(e)) => match e.err() {
                UpdateItemError::ConditionalCheckFailedException(failed) => {
                    Ok(blocking_claim(failed.item(), request.now_ms))
                }
                UpdateItemError::ResourceNotFoundException(_) => Err(LedgerError::Unavailable(
                    format!(
                        "the ledger table {:?} does not exist: create it (`slack-once create-table`, \
                         or deploy the SAM template) or fix DEDUP_TABLE",
                        self.table
                    )
                    .into(),
                )),
                _ => Err(unavailable(SdkError::ServiceError(e))),
            },
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn complete(
        &self,
        event_id: &EventId,
        owner: &OwnerToken,
        now_ms: u64,
    ) -> Result<(), LedgerError> {
        self.finish(event_id, owner, now_ms, Status::Done).await
    }

    async fn release(
        &self,
        event_id: &EventId,
        owner: &OwnerToken,
        now_ms: u64,
    ) -> Result<(), LedgerError> {
        self.finish(event_id, owner, now_ms, Status::Released).await
    }
}

/// What the item returned by a failed claim means. The server judged it with the same `now`, so
/// it blocks; should it not parse, the safe answer is "in progress": no reply, Slack retries.
fn blocking_claim(item: Option<&HashMap<String, AttributeValue>>, now_ms: u64) -> Claim {
    let parsed = item.and_then(|item| {
        let status = Status::parse(item.get(attr::STATUS)?.as_s().ok()?)?;
        let lease_until = item.get(attr::LEASE_UNTIL).and_then(number).unwrap_or(0);
        let expires_at = item.get(attr::EXPIRES_AT).and_then(number)?;
        Some((status, lease_until, expires_at))
    });
    match parsed {
        Some((status, lease_until, expires_at)) => {
            existing_blocks_claim(status, lease_until, expires_at, now_ms).unwrap_or(
                Claim::InProgress {
                    lease_until_ms: lease_until,
                },
            )
        }
        None => Claim::InProgress { lease_until_ms: 0 },
    }
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_string())
}

fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn number(value: &AttributeValue) -> Option<u64> {
    value.as_n().ok()?.parse().ok()
}

fn unavailable(e: impl std::error::Error + Send + Sync + 'static) -> LedgerError {
    LedgerError::Unavailable(Box::new(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(pairs: &[(&str, AttributeValue)]) -> HashMap<String, AttributeValue> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn a_failed_claim_reads_done_or_in_progress_from_the_returned_item() {
        let done = item(&[
            (attr::STATUS, s("done")),
            (attr::LEASE_UNTIL, n(10)),
            (attr::EXPIRES_AT, n(2_000)),
        ]);
        assert_eq!(blocking_claim(Some(&done), 1_000_000), Claim::AlreadyDone);
        let live = item(&[
            (attr::STATUS, s("in_progress")),
            (attr::LEASE_UNTIL, n(1_000_500)),
            (attr::EXPIRES_AT, n(2_000)),
        ]);
        assert_eq!(
            blocking_claim(Some(&live), 1_000_000),
            Claim::InProgress {
                lease_until_ms: 1_000_500
            }
        );
    }

    #[test]
    fn an_unreadable_item_is_treated_as_in_progress() {
        assert_eq!(
            blocking_claim(None, 5),
            Claim::InProgress { lease_until_ms: 0 }
        );
        let odd = item(&[(attr::STATUS, s("weird"))]);
        assert_eq!(
            blocking_claim(Some(&odd), 5),
            Claim::InProgress { lease_until_ms: 0 }
        );
    }
}
