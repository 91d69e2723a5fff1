//! The DynamoDB ledger: one table shared by every instance and every deployed version.
//!
//! One item per event, keyed by Slack's `event_id` alone (nothing derived from the function's
//! name or version, so old and new versions share it during a deploy). Each operation is one
//! conditional write (a claim of a key that exists and counts as absent, a takeover, two: the
//! put that finds it, then the update); a duplicate learns what it hit from the failed write itself
//! (`ReturnValuesOnConditionCheckFailure=ALL_OLD`), with no extra read, and so does a write the
//! SDK sent again after its answer was lost: the item it finds carries this claim's own owner.
//!
//! By what it does: the item's schema and its codec ([`attr`], [`ITEM_FORMAT`], and the journal,
//! began windows and state as stored), the claim and the finish, the journal's owner-conditioned
//! writes, message aliases, notes, app state, and the table's setup.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::AttributeValue;

use super::{
    Alias, AliasRequest, Claim, ClaimRequest, Finish, Held, Ledger, LedgerError, NotePut,
    StateItem, StatePut, StateWrite,
};

use crate::journal::record::{Settled, StepRecord};
use crate::slack::envelope::EventId;

mod alias;
mod claim;
mod item;
mod journal;
mod notes;
mod state;
mod table;

pub use item::{ITEM_FORMAT, ITEM_FORMAT_READ, attr};

/// The ledger on one DynamoDB table: one item per event (see the module's documentation).
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
    /// The ledger on `table`, through `client` (built once per process: `client_from_env`).
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

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The SDK client it sends its requests through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// DynamoDB requests this ledger has sent (each conditional write is one), for benchmarks
    /// and tests that count round trips rather than assume them.
    pub fn requests_sent(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
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
}

/// How many times a write to one item is sent while it meets a transaction under way on that
/// item ([`past_transactions`]).
pub const TRANSACTION_CONFLICT_ATTEMPTS: u32 = 6;

/// Sends a write to one item again while DynamoDB refuses it for a transaction under way on
/// that item (`TransactionConflictException`: a state change of the same request, written with
/// its record on the claim's item, while the claim journals a step or finishes). The SDK does
/// not retry that refusal, and the transaction takes milliseconds: a few tries, 5 to 80 ms
/// apart, and a refusal past them is the caller's to handle as any other.
pub async fn past_transactions<T, E, F, Fut>(
    mut send: F,
) -> Result<T, SdkError<E, aws_smithy_runtime_api::http::Response>>
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, SdkError<E, aws_smithy_runtime_api::http::Response>>>,
{
    let mut attempt = 0;
    loop {
        match send().await {
            Err(SdkError::ServiceError(e))
                if e.err().code() == Some("TransactionConflictException")
                    && attempt + 1 < TRANSACTION_CONFLICT_ATTEMPTS =>
            {
                crate::metrics::count("LedgerTransactionConflicts");
                tokio::time::sleep(Duration::from_millis(5 << attempt)).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// The SDK client, built once per process: a slow DynamoDB turns into a 503 (and a Slack
/// retry) rather than a Lambda timeout.
pub async fn client_from_env() -> Client {
    let config = aws_sdk_dynamodb::config::Builder::from(crate::aws::sdk_config().await)
        .timeout_config(crate::aws::timeouts(
            Duration::from_secs(2),
            Duration::from_secs(5),
        ))
        .build();
    Client::from_conf(config)
}

#[async_trait]
impl Ledger for DynamoLedger {
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<Claim, LedgerError> {
        claim::claim(self, request).await
    }

    async fn begin_step(
        &self,
        held: Held<'_>,
        step: u32,
        intent: &StepRecord,
        settled: &[Settled],
        _now_ms: u64,
    ) -> Result<(), LedgerError> {
        journal::begin_step(self, held, step, intent, settled).await
    }

    async fn set_note(
        &self,
        key: &EventId,
        value: &str,
        at_ms: u64,
        expires_at_s: u64,
    ) -> Result<(), LedgerError> {
        notes::set_note(self, key, value, at_ms, expires_at_s).await
    }

    async fn replace_note(
        &self,
        key: &EventId,
        read: Option<&str>,
        value: &str,
        at_ms: u64,
        expires_at_s: u64,
        now_ms: u64,
    ) -> Result<NotePut, LedgerError> {
        notes::replace_note(self, key, read, value, at_ms, expires_at_s, now_ms).await
    }

    async fn state(&self, key: &EventId, now_ms: u64) -> Result<Option<StateItem>, LedgerError> {
        state::state(self, key, now_ms).await
    }

    async fn state_changes(
        &self,
        key: &EventId,
    ) -> Result<std::collections::BTreeMap<String, u64>, LedgerError> {
        state::state_changes(self, key).await
    }

    async fn put_state(
        &self,
        key: &EventId,
        write: &StateWrite<'_>,
        now_ms: u64,
    ) -> Result<StatePut, LedgerError> {
        state::put_state(self, key, write, now_ms).await
    }

    async fn note(&self, key: &EventId, now_ms: u64) -> Result<Option<String>, LedgerError> {
        notes::note(self, key, now_ms).await
    }

    async fn alias(&self, request: &AliasRequest<'_>) -> Result<Alias, LedgerError> {
        alias::alias(self, request).await
    }

    async fn finish(
        &self,
        held: Held<'_>,
        to: &Finish,
        settled: &[Settled],
        now_ms: u64,
    ) -> Result<(), LedgerError> {
        claim::finish(self, held, to, settled, now_ms).await
    }
}

pub(super) fn unavailable(e: impl std::error::Error + Send + Sync + 'static) -> LedgerError {
    LedgerError::Unavailable(Box::new(e))
}

#[cfg(test)]
mod tests {
    use super::alias::*;
    use super::claim::*;
    use super::item::*;
    use super::*;

    fn item(pairs: &[(&str, AttributeValue)]) -> HashMap<String, AttributeValue> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    fn request<'a>(
        event_id: &'a crate::slack::envelope::EventId,
        owner: &'a super::super::OwnerToken,
        now_ms: u64,
    ) -> ClaimRequest<'a> {
        ClaimRequest {
            event_id,
            owner,
            now_ms,
            lease_until_ms: now_ms + 1000,
            expires_at_s: now_ms / 1000 + 90_000,
            team_id: None,
            retry_num: None,
            retry_reason: None,
            app_id: None,
            redelivery_due: false,
        }
    }

    #[test]
    fn a_failed_claim_reads_done_failed_or_in_progress_from_the_returned_item() {
        let e = crate::slack::envelope::EventId::try_from("Ev1".to_string()).unwrap();
        let me = super::super::OwnerToken::from("me");
        let done = item(&[
            (attr::STATUS, s("done")),
            (attr::OWNER, s("other")),
            (attr::LEASE_UNTIL, n(10)),
            (attr::EXPIRES_AT, n(2_000)),
        ]);
        assert_eq!(
            blocking_claim(Some(&done), &request(&e, &me, 1_000_000)),
            Claim::AlreadyDone { ran: None }
        );
        let failed = item(&[
            (attr::STATUS, s("failed")),
            (attr::ERROR, s("is_archived")),
            (attr::EXPIRES_AT, n(2_000)),
        ]);
        assert_eq!(
            blocking_claim(Some(&failed), &request(&e, &me, 1_000_000)),
            Claim::AlreadyFailed {
                error: "is_archived".into()
            }
        );
        let live = item(&[
            (attr::STATUS, s("in_progress")),
            (attr::OWNER, s("other")),
            (attr::LEASE_UNTIL, n(1_000_500)),
            (attr::EXPIRES_AT, n(2_000)),
        ]);
        assert_eq!(
            blocking_claim(Some(&live), &request(&e, &me, 1_000_000)),
            Claim::InProgress {
                lease_until_ms: 1_000_500
            }
        );
    }

    #[test]
    fn a_live_claim_with_this_requests_owner_is_its_own_and_acquired() {
        let e = crate::slack::envelope::EventId::try_from("Ev1".to_string()).unwrap();
        let me = super::super::OwnerToken::from("me");
        let mine = item(&[
            (attr::STATUS, s("in_progress")),
            (attr::OWNER, s("me")),
            (attr::ATTEMPTS, n(2)),
            (attr::LEASE_UNTIL, n(1_000_500)),
            (attr::EXPIRES_AT, n(2_000)),
            (
                attr::JOURNAL,
                AttributeValue::M(HashMap::from([
                    (
                        "1".to_string(),
                        s(r#"d chat.postMessage#0a0b0c0d {"ts":"1.5"}"#),
                    ),
                    (
                        "2".to_string(),
                        s("i 1 999000 1000500 chat.update#01020304"),
                    ),
                    ("3".to_string(), s("garbage")),
                ])),
            ),
        ]);
        let Claim::Acquired { attempt, journal } =
            blocking_claim(Some(&mine), &request(&e, &me, 1_000_000))
        else {
            panic!("not acquired")
        };
        assert_eq!(attempt, 2);
        assert_eq!(
            journal.get(&1),
            Some(&StepRecord::Done {
                result: r#"{"ts":"1.5"}"#.into(),
                op: Some("chat.postMessage#0a0b0c0d".into())
            })
        );
        assert_eq!(
            journal.get(&2),
            Some(&StepRecord::Intent {
                attempt: 1,
                op: Some("chat.update#01020304".into()),
                at_ms: Some(999_000),
                lease_until_ms: Some(1_000_500),
                looked: None,
            })
        );
        assert!(
            matches!(
                journal.get(&3),
                Some(StepRecord::Intent {
                    attempt: 0,
                    op: None,
                    ..
                })
            ),
            "unreadable: an intent of an unknown attempt, so someone looks"
        );
    }

    #[test]
    fn a_journal_written_as_maps_is_still_read() {
        let record = |fields: &[(&str, AttributeValue)]| AttributeValue::M(item(fields));
        let as_maps = item(&[(
            attr::JOURNAL,
            AttributeValue::M(HashMap::from([
                (
                    "1".to_string(),
                    record(&[
                        (attr::STEP_STATE, s(STEP_DONE)),
                        (attr::STEP_RESULT, s(r#"{"ts":"1.5"}"#)),
                    ]),
                ),
                (
                    "2".to_string(),
                    record(&[
                        (attr::STEP_STATE, s("intent")),
                        (attr::STEP_ATTEMPT, n(1)),
                        (attr::STEP_OP, s("chat.update")),
                    ]),
                ),
            ])),
        )]);
        let journal = journal_of(Some(&as_maps));
        assert_eq!(
            journal.get(&1),
            Some(&StepRecord::Done {
                result: r#"{"ts":"1.5"}"#.into(),
                op: None
            })
        );
        assert_eq!(
            journal.get(&2),
            Some(&StepRecord::Intent {
                attempt: 1,
                op: Some("chat.update".into()),
                at_ms: None,
                lease_until_ms: None,
                looked: None,
            })
        );
    }

    #[test]
    fn an_alias_item_names_its_message_and_an_alias_written_as_a_claim_is_read() {
        assert_eq!(
            alias_found(Some(&item(&[(attr::ALIAS_OF, s("msg-T-C-1"))])), None),
            Alias::CopyOf {
                key: "msg-T-C-1".into()
            }
        );
        let answered = item(&[(attr::STATUS, s("done"))]);
        assert!(matches!(
            alias_found(Some(&answered), None),
            Alias::CopyOf { .. }
        ));
        let live = item(&[(attr::STATUS, s("in_progress")), (attr::LEASE_UNTIL, n(9))]);
        assert_eq!(
            alias_found(Some(&live), None),
            Alias::Busy { lease_until_ms: 9 }
        );
    }

    #[test]
    fn an_unreadable_item_is_treated_as_in_progress() {
        let e = crate::slack::envelope::EventId::try_from("Ev1".to_string()).unwrap();
        let me = super::super::OwnerToken::from("me");
        assert_eq!(
            blocking_claim(None, &request(&e, &me, 5)),
            Claim::InProgress { lease_until_ms: 0 }
        );
        let odd = item(&[(attr::STATUS, s("weird"))]);
        assert_eq!(
            blocking_claim(Some(&odd), &request(&e, &me, 5)),
            Claim::InProgress { lease_until_ms: 0 }
        );
    }
}
