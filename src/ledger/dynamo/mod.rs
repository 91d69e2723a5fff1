//! The DynamoDB ledger: one table shared by every instance and every deployed version.
//!
//! One item per event, keyed by Slack's `event_id` alone (nothing derived from the function's
//! name or version, so old and new versions share it during a deploy). Each operation is one
//! conditional write (a claim of a key that exists and counts as absent, a takeover, two: the
//! put that finds it, then the update); a duplicate learns what it hit from the failed write itself
//! (`ReturnValuesOnConditionCheckFailure=ALL_OLD`), with no extra read, and so does a write the
//! SDK sent again after its answer was lost: the item it finds carries this claim's own owner.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, Put, ReturnValue,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType, TransactWriteItem, Update,
};

use super::{
    Alias, AliasRequest, BeganWindow, Blocked, Claim, ClaimRequest, Finish, Held, Journal, Ledger,
    LedgerError, Settled, Status, StepRecord, applied_already, existing_blocks_claim, other_app,
    with_began, with_looked,
};

/// Attribute names of the ledger item (docs/ledger.md's item schema).
pub mod attr {
    /// The partition key (a string): Slack's `event_id`, or a message's identity (`msg-…`),
    /// an alias's (`cmid-…`), a note's (`actx-…`) or a state value's (`state-…`).
    pub const PK: &str = "pk";
    /// The claim's status, as [`crate::ledger::Status::as_str`] writes it.
    pub const STATUS: &str = "status";
    /// The item's format ([`super::ITEM_FORMAT`] as this release writes it; absent: format 1,
    /// as every release before the attribute wrote it).
    pub const FORMAT: &str = "fmt";
    /// The owner token of the latest claim: only it journals a step or finishes the claim.
    pub const OWNER: &str = "owner";
    /// The claim is live until then (epoch milliseconds).
    pub const LEASE_UNTIL: &str = "lease_until";
    /// The table's TTL attribute (epoch seconds): past it the item counts as absent.
    pub const EXPIRES_AT: &str = "expires_at";
    /// The claims of the event so far: above 1, a takeover or a claim after a release.
    pub const ATTEMPTS: &str = "attempts";
    /// The workspace of the request that claimed it.
    pub const TEAM_ID: &str = "team_id";
    /// `X-Slack-Retry-Num` of the delivery that claimed it (absent for an original).
    pub const RETRY_NUM: &str = "retry_num";
    /// `X-Slack-Retry-Reason` of the delivery that claimed it (absent for an original).
    pub const RETRY_REASON: &str = "retry_reason";
    /// `true` where the claim came from the work queue with receives left: should it end
    /// with its process, the queue hands the request out again (or dead-letters it), so
    /// `sweep` leaves it ([`crate::ledger::ClaimRequest::redelivery_due`]).
    pub const REDELIVERY: &str = "redelivery";
    /// When the event was first claimed (epoch ms).
    pub const CREATED_AT: &str = "created_at";
    /// When the latest claim was made (epoch ms).
    pub const CLAIMED_AT: &str = "claimed_at";
    /// When the claim was completed (epoch ms).
    pub const COMPLETED_AT: &str = "completed_at";
    /// When the claim was released (epoch ms).
    pub const RELEASED_AT: &str = "released_at";
    /// When the event ended `failed` (epoch ms).
    pub const FAILED_AT: &str = "failed_at";
    /// Slack's error code of a `failed` event.
    pub const ERROR: &str = "error";
    /// A `failed` event whose failure was not final (the work queue's receives ran out): a copy
    /// redriven from the dead-letter queue may claim it again.
    pub const RETRYABLE: &str = "retryable";
    /// The step journal: a map from step number ("1", "2", …) to the step's record, one
    /// string ([`super::StepRecord::encode`]). Versions before it wrote a map of the fields
    /// below, still read.
    pub const JOURNAL: &str = "journal";
    /// An older journal record's state: `done` for a done step; anything else (`intent`) is
    /// read as an intent.
    pub const STEP_STATE: &str = "state";
    /// An older journal record's attempt: the number of the claim whose intent it is.
    pub const STEP_ATTEMPT: &str = "attempt";
    /// An older journal record's result: what a replay of a done step returns (JSON text).
    pub const STEP_RESULT: &str = "result";
    /// The Web API method of the step.
    pub const STEP_OP: &str = "op";
    /// An alias item (`cmid-…`): the key of the message it is an identity of.
    pub const ALIAS_OF: &str = "alias_of";
    /// The began windows (`"AT_MS LEASE_UNTIL_MS"`, a list) of claims that have written
    /// nothing since: each may have made the lowest step absent from the journal. Appended by
    /// every claim, removed by the claimant's next write.
    pub const BEGAN: &str = "began";
    /// Those of the began windows whose claims announce every step a look-up might not settle
    /// ([`crate::ledger::BeganWindow::announces`]): beside `began`, which versions before it
    /// read as they always have.
    pub const BEGAN_BY: &str = "began_by";
    /// A message's completion: the ids of the listeners that ran (space-separated).
    pub const RAN: &str = "ran";
    /// A note's value (`actx-…`: an assistant thread's context, as JSON).
    pub const NOTE: &str = "note";
    /// An app's state value (`state-APP-…` items, [`crate::app::State`]): its JSON, its version
    /// (a number, one more each write) and its latest writers (a list of strings).
    pub const APP_STATE: &str = "app_state";
    /// A state value's version (see [`APP_STATE`]).
    pub const APP_STATE_VERSION: &str = "app_state_version";
    /// A state value's latest writers (see [`APP_STATE`]).
    pub const APP_STATE_WRITERS: &str = "app_state_writers";
    /// When the note was written (epoch ms): an older write never replaces a newer one.
    pub const NOTE_AT: &str = "note_at";
    /// A claim's state changes made ([`crate::ledger::RequestChange`]): a map from the change's
    /// id to the version it wrote, set in the same transaction as the value. Made (empty) by
    /// every claim of this release; kept across takeovers, as the journal is.
    pub const STATE_CHANGES: &str = "state_changes";
    /// The Slack app (`api_app_id`) whose claim or alias the item is: another app's is never
    /// taken (two apps whose deployments share the table).
    pub const APP: &str = "app";
}

const STEP_DONE: &str = "done";

/// An alias is written where it counts as absent (never written, past its TTL), where it is
/// already this message's, or where a version before pointers left a claim item that is no
/// longer live (released, or its lease ended).
const ALIAS_CONDITION: &str = "attribute_not_exists(#pk) \
    OR #expires_at <= :now_s \
    OR #alias_of = :of \
    OR (attribute_not_exists(#alias_of) \
        AND (#status = :released OR (#status = :in_progress AND #lease_until <= :now_ms)))";

/// The claim's condition: the write succeeds only where the event counts as absent.
/// - `attribute_not_exists(pk)`: never seen;
/// - `expires_at <= :now_s`: past its TTL but not yet deleted (TTL deletion is lazy, up to
///   about 48 h late, and an expired item can still be read and written until then);
/// - `#status = :released`: its claimant gave it up (the Slack call failed);
/// - `#status = :failed AND #retryable = :true`: it failed, but not for good (the work queue's
///   receives ran out on a transient failure): a copy redriven from the dead-letter queue;
/// - `#status = :in_progress AND lease_until <= :now_ms`: its claimant's lease ran out (it
///   crashed or was killed at its deadline), so this copy takes it over;
///
/// the last three only for an item of a format this release reads (`fmt` absent or at most
/// [`ITEM_FORMAT_READ`]).
///
/// A `done` item inside its TTL, or a live lease, fails the condition.
const CLAIM_CONDITION: &str = "attribute_not_exists(#pk) \
    OR #expires_at <= :now_s \
    OR ((attribute_not_exists(#fmt) OR #fmt <= :fmt_read) \
        AND (#status = :released \
            OR (#status = :failed AND #retryable = :true) \
            OR (#status = :in_progress AND #lease_until <= :now_ms)))";

/// The format of the claim items this release writes (the `fmt` attribute). A takeover keeps
/// the format an item has (it never lowers it) and gives one to an item of a release before the
/// attribute. A new format takes two releases, as the queue's do: one that reads it
/// ([`ITEM_FORMAT_READ`]), then one that writes it.
pub const ITEM_FORMAT: u64 = 1;

/// The highest item format this release takes over. An item of a later format inside its TTL
/// is its writer's: this release reads its `done` and `failed` as every format means them
/// (answered; failed), but never takes it over (released, retryable, its lease ended): it is
/// left for a delivery to a release that reads it.
pub const ITEM_FORMAT_READ: u64 = 1;

/// Where the request names its app, a takeover or an alias update also needs the item to be
/// no other app's.
const APP_CONDITION: &str = "(attribute_not_exists(#app) OR #app = :app)";

/// What a put of a key never written met.
enum PutNew {
    Written,
    /// The key's item, as the failed condition returned it.
    Found(Option<HashMap<String, AttributeValue>>),
    /// `AccessDeniedException`: the role allows only `UpdateItem`.
    Refused,
}

/// How much earlier than the claim's an alias found by its message's put may expire before the
/// put gives way to the update that pushes it on (a duplicate seconds later writes nothing).
const ALIAS_EXPIRY_SLACK_S: u64 = 3600;

fn access_denied(meta: &aws_sdk_dynamodb::error::ErrorMetadata) -> bool {
    meta.code() == Some("AccessDeniedException")
}

/// Said once per process: the role refuses `PutItem`, and every claim of a key never seen
/// takes the update instead (one request as before, evaluated more slowly).
fn put_refused_warning() {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        tracing::warn!(
            "the ledger's role refuses dynamodb:PutItem: claims fall back to UpdateItem; \
             allow both (the SAM template does)"
        );
    });
}

/// Steps, completion and release: only by the owner of a claim still in progress.
const OWNER_CONDITION: &str = "#owner = :owner AND #status = :in_progress";

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
    /// The ledger on `table`, through `client` (built once per process: [`client_from_env`]).
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

    /// Sends a write conditioned on the owner; `settled` is folded into it.
    async fn owner_write(
        &self,
        held: Held<'_>,
        mut set: Vec<String>,
        mut remove: Vec<String>,
        mut names: Vec<(String, String)>,
        mut values: Vec<(String, AttributeValue)>,
        settled: &[Settled],
    ) -> Result<(), SdkError<UpdateItemError, aws_smithy_runtime_api::http::Response>> {
        for (i, fate) in crate::ledger::last_per_step(settled)
            .into_iter()
            .enumerate()
        {
            let (name, value) = (format!("#settled{i}"), format!(":settled{i}"));
            let (step, record) = match fate {
                Settled::Done { step, result, op } => (
                    step,
                    Some(StepRecord::Done {
                        result: result.clone(),
                        op: op.clone(),
                    }),
                ),
                Settled::NotDone { step } => (step, None),
                Settled::Unknown { step, intent } => (step, Some(intent.clone())),
                Settled::Ran { listeners } => {
                    names.push(("#ran".into(), attr::RAN.into()));
                    set.push("#ran = :ran".into());
                    values.push((":ran".into(), s(&listeners.join(" "))));
                    continue;
                }
                Settled::Looked { step, looked } => {
                    names.push((name.clone(), crate::ledger::looked_key(*step)));
                    set.push(format!("#journal.{name} = {value}"));
                    values.push((value, s(&looked.encode())));
                    continue;
                }
            };
            names.push((name.clone(), step.to_string()));
            match record {
                Some(record) => {
                    set.push(format!("#journal.{name} = {value}"));
                    values.push((value, s(&record.encode())));
                }
                None => remove.push(format!("#journal.{name}")),
            }
            // The step written again: a look-up's progress for what it was is no longer its,
            // but for a doubt kept with it.
            let lname = format!("#looked{i}");
            names.push((lname.clone(), crate::ledger::looked_key(*step)));
            match fate {
                Settled::Unknown {
                    intent:
                        StepRecord::Intent {
                            looked: Some(looked),
                            ..
                        },
                    ..
                } => {
                    let lvalue = format!(":looked{i}");
                    set.push(format!("#journal.{lname} = {lvalue}"));
                    values.push((lvalue, s(&looked.encode())));
                }
                _ => remove.push(format!("#journal.{lname}")),
            }
        }
        // The claimant writes: what its claim's began window stood for is recorded now.
        remove.push("#began".into());
        remove.push("#began_by".into());
        names.push(("#began".into(), attr::BEGAN.into()));
        names.push(("#began_by".into(), attr::BEGAN_BY.into()));
        names.extend(
            [attr::STATUS, attr::OWNER]
                .into_iter()
                .map(|a| (format!("#{a}"), a.to_string())),
        );
        // DynamoDB refuses a name the expression does not use.
        if set.iter().chain(&remove).any(|e| e.contains("#journal")) {
            names.push(("#journal".into(), attr::JOURNAL.into()));
        }
        values.push((":owner".into(), s(held.owner.as_str())));
        values.push((":in_progress".into(), s(Status::InProgress.as_str())));
        let expression = format!("SET {} REMOVE {}", set.join(", "), remove.join(", "));
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(attr::PK, AttributeValue::S(held.event_id.to_string()))
            .update_expression(expression)
            .condition_expression(OWNER_CONDITION)
            .set_expression_attribute_names(Some(names.into_iter().collect()))
            .set_expression_attribute_values(Some(values.into_iter().collect()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        past_transactions(|| {
            self.requests.fetch_add(1, Ordering::Relaxed);
            update.clone().send()
        })
        .await
        .map(|_| ())
    }

    /// The claim of a key never seen: one put, conditioned on the key's absence. `Err` when the
    /// key exists but counts as absent (`Err(false)`: the update of [`Self::claim_existing`]
    /// takes it over), or when the role refuses the put (`Err(true)`: the key may be new).
    async fn claim_new(
        &self,
        request: &ClaimRequest<'_>,
    ) -> Result<Result<Claim, bool>, LedgerError> {
        let mut item: HashMap<String, AttributeValue> = [
            (attr::PK, s(request.event_id.as_str())),
            (attr::STATUS, s(Status::InProgress.as_str())),
            (attr::OWNER, s(request.owner.as_str())),
            (attr::LEASE_UNTIL, n(request.lease_until_ms)),
            (attr::EXPIRES_AT, n(request.expires_at_s)),
            (attr::ATTEMPTS, n(1)),
            (attr::FORMAT, n(ITEM_FORMAT)),
            (attr::CREATED_AT, n(request.now_ms)),
            (attr::CLAIMED_AT, n(request.now_ms)),
            (attr::JOURNAL, AttributeValue::M(HashMap::new())),
            (attr::STATE_CHANGES, AttributeValue::M(HashMap::new())),
            (
                attr::BEGAN,
                AttributeValue::L(vec![s(&window_of(request).encode())]),
            ),
            (
                attr::BEGAN_BY,
                AttributeValue::L(vec![s(&window_of(request).encode())]),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if let Some(team_id) = request.team_id {
            item.insert(attr::TEAM_ID.into(), s(team_id));
        }
        if let Some(retry_num) = request.retry_num {
            item.insert(attr::RETRY_NUM.into(), n(retry_num as u64));
        }
        if let Some(reason) = request.retry_reason {
            item.insert(attr::RETRY_REASON.into(), s(reason));
        }
        if request.redelivery_due {
            item.insert(attr::REDELIVERY.into(), AttributeValue::Bool(true));
        }
        if let Some(app) = request.app_id {
            item.insert(attr::APP.into(), s(app));
        }
        match self.put_new(item).await? {
            PutNew::Written => Ok(Ok(Claim::Acquired {
                attempt: 1,
                journal: Journal::new(),
            })),
            // Held, answered, failed for good, or this very put applied by an attempt whose
            // answer was lost: settled by the item as it is. Anything else (it counts as
            // absent, or does not parse) goes to the update's full condition.
            PutNew::Found(item) => Ok(existing_claim(item.as_ref(), request).ok_or(false)),
            // A role that allows only `UpdateItem`: the update claims a key never seen too.
            PutNew::Refused => Ok(Err(true)),
        }
    }

    /// Puts `item` where its key was never written: written, or the item found there (as it
    /// is), or refused by a role that allows only `UpdateItem` (a deploy whose new policy has
    /// not reached IAM yet, a role kept outside the template), said once.
    async fn put_new(&self, item: HashMap<String, AttributeValue>) -> Result<PutNew, LedgerError> {
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", attr::PK)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        let result = past_transactions(|| {
            self.requests.fetch_add(1, Ordering::Relaxed);
            put.clone().send()
        })
        .await;
        match result {
            Ok(_) => Ok(PutNew::Written),
            Err(SdkError::ServiceError(e)) => match e.err() {
                PutItemError::ConditionalCheckFailedException(failed) => {
                    Ok(PutNew::Found(failed.item().cloned()))
                }
                PutItemError::ResourceNotFoundException(_) => Err(self.no_table()),
                _ if access_denied(e.err().meta()) => {
                    put_refused_warning();
                    Ok(PutNew::Refused)
                }
                _ => Err(unavailable(SdkError::ServiceError(e))),
            },
            Err(e) => Err(unavailable(e)),
        }
    }

    fn no_table(&self) -> LedgerError {
        LedgerError::Unavailable(
            format!(
                "the ledger table {:?} does not exist: create it (`slack-once create-table`, \
                 or deploy the SAM template) or fix DEDUP_TABLE",
                self.table
            )
            .into(),
        )
    }

    /// The claim of a key that exists and counted as absent when the put found it: the update
    /// conditioned on every way an item counts as absent (evaluated again, atomically). It
    /// names its app only where the key may be new (`maybe_new`: the role refused the put): an
    /// item of no app, a version before apps wrote it, stays anyone's, so the app whose old
    /// version wrote it never finds it another's and answers again under a key of its own.
    async fn claim_existing(
        &self,
        request: &ClaimRequest<'_>,
        maybe_new: bool,
    ) -> Result<Claim, LedgerError> {
        // Every attribute goes through a `#name` placeholder: several are DynamoDB reserved words.
        let mut set = vec![
            "#status = :in_progress".to_string(),
            "#owner = :owner".to_string(),
            "#lease_until = :lease_until".to_string(),
            "#expires_at = :expires_at".to_string(),
            "#attempts = if_not_exists(#attempts, :zero) + :one".to_string(),
            "#fmt = if_not_exists(#fmt, :fmt)".to_string(),
            "#created_at = if_not_exists(#created_at, :now_ms)".to_string(),
            "#claimed_at = :now_ms".to_string(),
            // The journal goes on across claims: a takeover learns what earlier claims did.
            "#journal = if_not_exists(#journal, :empty_journal)".to_string(),
            // And the request's state changes, as the journal.
            "#state_changes = if_not_exists(#state_changes, :empty_journal)".to_string(),
            // This claim stands for the intent of its first new step.
            "#began = list_append(if_not_exists(#began, :no_windows), :window)".to_string(),
            "#began_by = list_append(if_not_exists(#began_by, :no_windows), :window)".to_string(),
        ];
        let mut remove = vec![
            "#completed_at".to_string(),
            "#released_at".to_string(),
            "#failed_at".to_string(),
            "#error".to_string(),
            "#retryable".to_string(),
        ];
        let condition = match request.app_id {
            Some(_) => format!("({CLAIM_CONDITION}) AND {APP_CONDITION}"),
            None => CLAIM_CONDITION.to_string(),
        };
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(attr::PK, AttributeValue::S(request.event_id.to_string()))
            .condition_expression(condition)
            .set_expression_attribute_names(Some(
                [
                    attr::PK,
                    attr::STATUS,
                    attr::OWNER,
                    attr::LEASE_UNTIL,
                    attr::EXPIRES_AT,
                    attr::ATTEMPTS,
                    attr::FORMAT,
                    attr::TEAM_ID,
                    attr::RETRY_NUM,
                    attr::RETRY_REASON,
                    attr::REDELIVERY,
                    attr::CREATED_AT,
                    attr::CLAIMED_AT,
                    attr::COMPLETED_AT,
                    attr::RELEASED_AT,
                    attr::FAILED_AT,
                    attr::ERROR,
                    attr::RETRYABLE,
                    attr::JOURNAL,
                    attr::STATE_CHANGES,
                    attr::BEGAN,
                    attr::BEGAN_BY,
                ]
                .into_iter()
                .chain(request.app_id.map(|_| attr::APP))
                .map(|a| (format!("#{a}"), a.to_string()))
                .collect(),
            ))
            .expression_attribute_values(":in_progress", s(Status::InProgress.as_str()))
            .expression_attribute_values(":released", s(Status::Released.as_str()))
            .expression_attribute_values(":failed", s(Status::Failed.as_str()))
            .expression_attribute_values(":true", AttributeValue::Bool(true))
            .expression_attribute_values(":owner", s(request.owner.as_str()))
            .expression_attribute_values(":lease_until", n(request.lease_until_ms))
            .expression_attribute_values(":expires_at", n(request.expires_at_s))
            .expression_attribute_values(":now_ms", n(request.now_ms))
            .expression_attribute_values(":now_s", n(request.now_ms / 1000))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":fmt", n(ITEM_FORMAT))
            .expression_attribute_values(":fmt_read", n(ITEM_FORMAT_READ))
            .expression_attribute_values(":empty_journal", AttributeValue::M(HashMap::new()))
            .expression_attribute_values(":no_windows", AttributeValue::L(Vec::new()))
            .expression_attribute_values(
                ":window",
                AttributeValue::L(vec![s(&window_of(request).encode())]),
            )
            // The item as it was: its journal and the began windows of earlier claims.
            .return_values(ReturnValue::AllOld)
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
            (
                attr::REDELIVERY,
                ":redelivery",
                request.redelivery_due.then_some(AttributeValue::Bool(true)),
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
        if let Some(app) = request.app_id {
            // The condition keeps another app out; an app's own item keeps its app.
            update = update.expression_attribute_values(":app", s(app));
            if maybe_new {
                set.push(format!(
                    "#{} = if_not_exists(#{}, :app)",
                    attr::APP,
                    attr::APP
                ));
            }
        }
        let expression = format!("SET {} REMOVE {}", set.join(", "), remove.join(", "));

        let update = update.update_expression(expression);
        let sent = past_transactions(|| {
            self.requests.fetch_add(1, Ordering::Relaxed);
            update.clone().send()
        })
        .await;
        match sent {
            Ok(out) => {
                // `if_not_exists(attempts, 0) + 1`, read from the item as it was.
                let old = out.attributes().filter(|a| !a.is_empty());
                let attempt = old.map_or(1, |old| attempts_of(Some(old)).saturating_add(1));
                Ok(Claim::Acquired {
                    attempt,
                    journal: with_looked(
                        with_began(journal_of(old), &began_of(old, 0)),
                        &looked_of(old),
                    ),
                })
            }
            Err(SdkError::ServiceError(e)) => match e.err() {
                UpdateItemError::ConditionalCheckFailedException(failed) => {
                    Ok(blocking_claim(failed.item(), request))
                }
                UpdateItemError::ResourceNotFoundException(_) => Err(self.no_table()),
                _ => Err(unavailable(SdkError::ServiceError(e))),
            },
            Err(e) => Err(unavailable(e)),
        }
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

pub use crate::aws::http_client;

#[async_trait]
impl Ledger for DynamoLedger {
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<Claim, LedgerError> {
        // Most deliveries find the key never seen (a first delivery) or held (a duplicate): a
        // put conditioned on the key's absence settles both in one request, the simplest one
        // DynamoDB evaluates. Only a key that counts as absent though it exists (past its TTL,
        // released, retryable, its lease ended) needs the update below: a takeover, rare.
        match self.claim_new(request).await? {
            Ok(claim) => Ok(claim),
            Err(absent) => self.claim_existing(request, absent).await,
        }
    }

    async fn begin_step(
        &self,
        held: Held<'_>,
        step: u32,
        intent: &StepRecord,
        settled: &[Settled],
        _now_ms: u64,
    ) -> Result<(), LedgerError> {
        // The condition still holds when the SDK sends this write again: it is idempotent.
        let result = self
            .owner_write(
                held,
                vec!["#journal.#step = :intent".into()],
                vec!["#journal.#lstep".into()],
                vec![
                    ("#step".into(), step.to_string()),
                    ("#lstep".into(), crate::ledger::looked_key(step)),
                ],
                vec![(":intent".into(), s(&intent.encode()))],
                settled,
            )
            .await;
        match result {
            Ok(()) => Ok(()),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                Err(LedgerError::NotOwner {
                    event_id: held.event_id.clone(),
                })
            }
            Err(e) => Err(write_failed(e)),
        }
    }

    async fn set_note(
        &self,
        key: &crate::envelope::EventId,
        value: &str,
        at_ms: u64,
        expires_at_s: u64,
    ) -> Result<(), LedgerError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(attr::PK, s(key.as_str()))
            .item(attr::NOTE, s(value))
            .item(attr::NOTE_AT, n(at_ms))
            .item(attr::EXPIRES_AT, n(expires_at_s))
            .condition_expression(
                "attribute_not_exists(#pk) OR #note_at <= :at OR #expires_at < :now_s",
            )
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_names("#note_at", attr::NOTE_AT)
            .expression_attribute_names("#expires_at", attr::EXPIRES_AT)
            .expression_attribute_values(":at", n(at_ms))
            .expression_attribute_values(":now_s", n(at_ms / 1000))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            // A note written later stands.
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(())
            }
            Err(e) => Err(unavailable(e.into_service_error())),
        }
    }

    async fn replace_note(
        &self,
        key: &crate::envelope::EventId,
        read: Option<&str>,
        value: &str,
        at_ms: u64,
        expires_at_s: u64,
        now_ms: u64,
    ) -> Result<super::NotePut, LedgerError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(attr::PK, s(key.as_str()))
            .item(attr::NOTE, s(value))
            .item(attr::NOTE_AT, n(at_ms))
            .item(attr::EXPIRES_AT, n(expires_at_s))
            .expression_attribute_names("#note", attr::NOTE)
            .expression_attribute_names("#expires_at", attr::EXPIRES_AT)
            .expression_attribute_values(":now_s", n(now_ms / 1000));
        // As `note` reads it: live while `expires_at` is after now.
        let put = match read {
            None => put.condition_expression(
                "attribute_not_exists(#note) OR attribute_not_exists(#expires_at) \
                 OR #expires_at <= :now_s",
            ),
            Some(read) => put
                .condition_expression("#note = :read AND #expires_at > :now_s")
                .expression_attribute_values(":read", s(read)),
        };
        match put.send().await {
            Ok(_) => Ok(super::NotePut::Written),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(super::NotePut::Conflict)
            }
            Err(e) => Err(unavailable(e.into_service_error())),
        }
    }

    async fn state(
        &self,
        key: &crate::envelope::EventId,
        now_ms: u64,
    ) -> Result<Option<super::StateItem>, LedgerError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let Some(item) = self.get_item(key.as_str()).await? else {
            return Ok(None);
        };
        Ok(state_item(&item, now_ms))
    }

    async fn state_changes(
        &self,
        key: &crate::envelope::EventId,
    ) -> Result<std::collections::BTreeMap<String, u64>, LedgerError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let item = self.get_item(key.as_str()).await?;
        Ok(item
            .as_ref()
            .and_then(|i| i.get(attr::STATE_CHANGES))
            .and_then(|m| m.as_m().ok())
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| number(v).map(|v| (k.clone(), v)))
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn put_state(
        &self,
        key: &crate::envelope::EventId,
        write: &super::StateWrite<'_>,
        now_ms: u64,
    ) -> Result<super::StatePut, LedgerError> {
        // The writers kept are the ones read with `expected`: the condition on the version makes
        // sure they are still the item's.
        let writers = super::state_writers_after(write.read_writers.to_vec(), write.writer);
        self.requests.fetch_add(1, Ordering::Relaxed);
        let version = write.expected + 1;
        let (condition, mut names, mut values) = if write.expected == 0 {
            (
                "attribute_not_exists(#pk) OR #expires_at < :now_s",
                vec![("#pk", attr::PK)],
                vec![],
            )
        } else {
            (
                "#version = :expected AND #expires_at >= :now_s",
                vec![("#version", attr::APP_STATE_VERSION)],
                vec![(":expected", n(write.expected))],
            )
        };
        names.push(("#expires_at", attr::EXPIRES_AT));
        values.push((":now_s", n(now_ms / 1000)));
        let item: HashMap<String, AttributeValue> = [
            (attr::PK, s(key.as_str())),
            (attr::APP_STATE, s(write.value)),
            (attr::APP_STATE_VERSION, n(version)),
            (
                attr::APP_STATE_WRITERS,
                AttributeValue::L(writers.iter().map(|w| s(w)).collect()),
            ),
            (attr::EXPIRES_AT, n(write.expires_at_s)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let names: HashMap<String, String> = names
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let values: HashMap<String, AttributeValue> = values
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let Some(request) = &write.request else {
            let put = self
                .client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item))
                .condition_expression(condition)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(Some(values));
            return match put.send().await {
                Ok(_) => Ok(super::StatePut::Written { version }),
                Err(SdkError::ServiceError(e))
                    if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) =>
                {
                    Ok(super::StatePut::Conflict)
                }
                Err(e) => Err(unavailable(e.into_service_error())),
            };
        };
        // The value and the request's record of the change, in one transaction: the value
        // conditioned on the version read, the record on the claim being the owner's, in
        // progress, and not recording this change yet.
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .build()
            .map_err(unavailable)?;
        let record = Update::builder()
            .table_name(&self.table)
            .key(
                attr::PK,
                AttributeValue::S(request.held.event_id.to_string()),
            )
            .update_expression("SET #changes.#change = :version")
            .condition_expression(
                "#owner = :owner AND #status = :in_progress AND attribute_exists(#changes) \
                 AND attribute_not_exists(#changes.#change)",
            )
            .expression_attribute_names("#changes", attr::STATE_CHANGES)
            .expression_attribute_names("#change", request.change)
            .expression_attribute_names("#owner", attr::OWNER)
            .expression_attribute_names("#status", attr::STATUS)
            .expression_attribute_values(":version", n(version))
            .expression_attribute_values(":owner", s(request.held.owner.as_str()))
            .expression_attribute_values(":in_progress", s(Status::InProgress.as_str()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(unavailable)?;
        let sent = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(put).build())
            .transact_items(TransactWriteItem::builder().update(record).build())
            .send()
            .await;
        let reasons = match sent {
            Ok(_) => return Ok(super::StatePut::Written { version }),
            Err(SdkError::ServiceError(e)) => match e.err() {
                TransactWriteItemsError::TransactionCanceledException(canceled) => {
                    canceled.cancellation_reasons().to_vec()
                }
                _ => return Err(unavailable(SdkError::ServiceError(e))),
            },
            Err(e) => return Err(unavailable(e)),
        };
        let failed = |i: usize| {
            reasons
                .get(i)
                .and_then(|r| r.code())
                .is_some_and(|c| c == "ConditionalCheckFailed")
        };
        if failed(1) {
            // The claim's item as it is (returned with the failure; read where it is not).
            let item = match reasons[1].item() {
                Some(item) => Some(item.clone()),
                None => self.get_item(request.held.event_id.as_str()).await?,
            };
            let recorded = item
                .as_ref()
                .and_then(|i| i.get(attr::STATE_CHANGES))
                .and_then(|m| m.as_m().ok())
                .and_then(|m| m.get(request.change))
                .and_then(number);
            let owner = item
                .as_ref()
                .and_then(|i| i.get(attr::OWNER))
                .and_then(|v| v.as_s().ok());
            return match recorded {
                // Made by an earlier run of this request, or by this write, whose answer was
                // lost (a claim taken over since records it all the same).
                Some(version) => Ok(super::StatePut::MadeAlready { version }),
                None if owner.map(String::as_str) == Some(request.held.owner.as_str())
                    && item
                        .as_ref()
                        .and_then(|i| i.get(attr::STATE_CHANGES))
                        .is_none() =>
                {
                    Err(LedgerError::Unavailable(
                        "the claim's item has no record of state changes (a claim of a release \
                         before them): the change is not made"
                            .into(),
                    ))
                }
                None => Err(LedgerError::NotOwner {
                    event_id: request.held.event_id.clone(),
                }),
            };
        }
        if failed(0) {
            return Ok(super::StatePut::Conflict);
        }
        let codes: Vec<&str> = reasons.iter().filter_map(|r| r.code()).collect();
        // Another write to either item at the same moment: read again and try again.
        if codes.contains(&"TransactionConflict") {
            crate::metrics::count("LedgerTransactionConflicts");
            return Ok(super::StatePut::Conflict);
        }
        let why = format!("the state change's transaction was cancelled: {codes:?}");
        // A claim item grown past DynamoDB's 400 KB (its record of changes among it): no retry
        // fixes that. Throttling and the rest: the ledger is unavailable, as for any write.
        if codes.contains(&"ValidationError") {
            return Err(LedgerError::ItemTooLarge(why.into()));
        }
        Err(LedgerError::Unavailable(why.into()))
    }

    async fn note(
        &self,
        key: &crate::envelope::EventId,
        now_ms: u64,
    ) -> Result<Option<String>, LedgerError> {
        let Some(item) = self.get_item(key.as_str()).await? else {
            return Ok(None);
        };
        let live = item
            .get(attr::EXPIRES_AT)
            .and_then(number)
            .is_some_and(|at| at > now_ms / 1000);
        Ok(item
            .get(attr::NOTE)
            .and_then(|v| v.as_s().ok())
            .filter(|_| live)
            .cloned())
    }

    async fn alias(&self, request: &AliasRequest<'_>) -> Result<Alias, LedgerError> {
        // As a claim: a put where the alias was never written settles the first event of a
        // message, and the alias it finds settles the others; the update only where the alias
        // exists and counts as absent (past its TTL), or is a claim of a version before pointers.
        let item: HashMap<String, AttributeValue> = [
            (attr::PK, s(request.alias.as_str())),
            (attr::ALIAS_OF, s(request.of.as_str())),
            (attr::EXPIRES_AT, n(request.expires_at_s)),
            // As the update's `if_not_exists` leaves them on an alias written new.
            (attr::STATUS, s(Status::Released.as_str())),
            (attr::LEASE_UNTIL, n(0)),
        ]
        .into_iter()
        .chain(request.app_id.map(|app| (attr::APP, s(app))))
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        match self.put_new(item).await? {
            PutNew::Written => return Ok(Alias::Ours),
            PutNew::Found(item) => {
                let item = item.as_ref();
                let text = |key: &str| item.and_then(|i| i.get(key)).and_then(|v| v.as_s().ok());
                if let Some(app) = other_app(text(attr::APP).map(String::as_str), request.app_id) {
                    return Ok(Alias::OtherApp {
                        app_id: app.to_string(),
                    });
                }
                let expires_at = item.and_then(|i| i.get(attr::EXPIRES_AT)).and_then(number);
                let live = expires_at.is_some_and(|at| at > request.now_ms / 1000);
                // The alias lives as long as its message's claim: the update pushes its expiry
                // on when it would end more than an hour before this claim's.
                let fresh =
                    expires_at.is_some_and(|at| at + ALIAS_EXPIRY_SLACK_S >= request.expires_at_s);
                match text(attr::ALIAS_OF) {
                    Some(of) if live && fresh && of == request.of.as_str() => {
                        return Ok(Alias::Ours);
                    }
                    Some(of) if live && of != request.of.as_str() => {
                        return Ok(Alias::CopyOf { key: of.clone() });
                    }
                    _ => {}
                }
            }
            // A role that allows only `UpdateItem`: the update writes a new alias too.
            PutNew::Refused => {}
        }
        let names = [
            attr::PK,
            attr::EXPIRES_AT,
            attr::ALIAS_OF,
            attr::STATUS,
            attr::LEASE_UNTIL,
        ]
        .into_iter()
        .chain(request.app_id.map(|_| attr::APP));
        let (condition, set_app) = match request.app_id {
            Some(_) => (
                format!("({ALIAS_CONDITION}) AND {APP_CONDITION}"),
                ", #app = :app",
            ),
            None => (ALIAS_CONDITION.to_string(), ""),
        };
        self.requests.fetch_add(1, Ordering::Relaxed);
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(attr::PK, AttributeValue::S(request.alias.to_string()))
            // `status` and `lease_until` as a released claim: a version before pointers, which
            // claims this key as a claim of its own, can take it (and then finish it) instead
            // of finding it live for good.
            .update_expression(format!(
                "SET #alias_of = :of, #expires_at = :expires_at, \
                 #status = if_not_exists(#status, :released), \
                 #lease_until = if_not_exists(#lease_until, :zero){set_app}"
            ))
            .condition_expression(condition)
            .set_expression_attribute_names(Some(
                names.map(|a| (format!("#{a}"), a.to_string())).collect(),
            ))
            .expression_attribute_values(":of", s(request.of.as_str()))
            .expression_attribute_values(":expires_at", n(request.expires_at_s))
            .expression_attribute_values(":now_s", n(request.now_ms / 1000))
            .expression_attribute_values(":now_ms", n(request.now_ms))
            .expression_attribute_values(":released", s(Status::Released.as_str()))
            .expression_attribute_values(":in_progress", s(Status::InProgress.as_str()))
            .expression_attribute_values(":zero", n(0))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        let update = match request.app_id {
            Some(app) => update.expression_attribute_values(":app", s(app)),
            None => update,
        };
        let result = update.send().await;
        match result {
            Ok(_) => Ok(Alias::Ours),
            Err(SdkError::ServiceError(e)) => match e.err() {
                UpdateItemError::ConditionalCheckFailedException(failed) => {
                    Ok(alias_found(failed.item(), request.app_id))
                }
                _ => Err(unavailable(SdkError::ServiceError(e))),
            },
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn finish(
        &self,
        held: Held<'_>,
        to: &Finish,
        settled: &[Settled],
        now_ms: u64,
    ) -> Result<(), LedgerError> {
        let at = match to {
            Finish::Done => attr::COMPLETED_AT,
            Finish::Released => attr::RELEASED_AT,
            Finish::Failed { .. } => attr::FAILED_AT,
        };
        let mut set = vec!["#status = :to".to_string(), "#at = :now_ms".to_string()];
        let mut names = vec![("#at".to_string(), at.to_string())];
        let mut values = vec![
            (":to".to_string(), s(to.status().as_str())),
            (":now_ms".to_string(), n(now_ms)),
        ];
        if let Finish::Failed { error, retryable } = to {
            set.push("#error = :error".into());
            set.push("#retryable = :retryable".into());
            names.push(("#error".into(), attr::ERROR.into()));
            names.push(("#retryable".into(), attr::RETRYABLE.into()));
            values.push((":error".into(), s(error)));
            values.push((":retryable".into(), AttributeValue::Bool(*retryable)));
        }
        let result = self
            .owner_write(held, set, vec![], names, values, settled)
            .await;
        match result {
            Ok(()) => Ok(()),
            Err(SdkError::ServiceError(e)) => match e.err() {
                UpdateItemError::ConditionalCheckFailedException(failed) => {
                    let item = failed.item();
                    let owner = item
                        .and_then(|i| i.get(attr::OWNER))
                        .and_then(|v| v.as_s().ok());
                    let status = item
                        .and_then(|i| i.get(attr::STATUS))
                        .and_then(|v| v.as_s().ok())
                        .and_then(|v| Status::parse(v));
                    if applied_already(owner.map(String::as_str), status, held.owner, to.status()) {
                        // This write, sent again by the SDK after its answer was lost.
                        Ok(())
                    } else {
                        Err(LedgerError::NotOwner {
                            event_id: held.event_id.clone(),
                        })
                    }
                }
                _ => Err(write_failed(SdkError::ServiceError(e))),
            },
            Err(e) => Err(write_failed(e)),
        }
    }
}

/// What an alias item found by a failed alias write means: another message's alias, or (from a
/// version before pointers) a live claim or an answered one.
fn alias_found(item: Option<&HashMap<String, AttributeValue>>, app_id: Option<&str>) -> Alias {
    let text = |key: &str| item.and_then(|i| i.get(key)).and_then(|v| v.as_s().ok());
    if let Some(app) = other_app(text(attr::APP).map(String::as_str), app_id) {
        return Alias::OtherApp {
            app_id: app.to_string(),
        };
    }
    if let Some(of) = text(attr::ALIAS_OF) {
        return Alias::CopyOf { key: of.clone() };
    }
    match text(attr::STATUS).and_then(|v| Status::parse(v)) {
        Some(Status::Done | Status::Failed) => Alias::CopyOf {
            key: "(a claim of an earlier version)".into(),
        },
        _ => Alias::Busy {
            lease_until_ms: item
                .and_then(|i| i.get(attr::LEASE_UNTIL))
                .and_then(number)
                .unwrap_or(0),
        },
    }
}

/// A write that failed: too large for an item (no retry fixes it), or the ledger unavailable.
fn write_failed(
    e: SdkError<UpdateItemError, aws_smithy_runtime_api::http::Response>,
) -> LedgerError {
    let too_large = matches!(&e, SdkError::ServiceError(se)
        if se.err().meta().code() == Some("ValidationException")
            && se.err().meta().message().is_some_and(|m| m.contains("size")));
    if too_large {
        LedgerError::ItemTooLarge(Box::new(e))
    } else {
        unavailable(e)
    }
}

/// The look-ups' progress of a stored item, by step (journal keys `lN`).
fn looked_of(
    item: Option<&HashMap<String, AttributeValue>>,
) -> std::collections::BTreeMap<u32, crate::ledger::Looked> {
    let Some(AttributeValue::M(entries)) = item.and_then(|i| i.get(attr::JOURNAL)) else {
        return Default::default();
    };
    entries
        .iter()
        .filter_map(|(key, value)| {
            let step: u32 = key.strip_prefix('l')?.parse().ok()?;
            let looked = crate::ledger::Looked::decode(value.as_s().ok()?)?;
            Some((step, looked))
        })
        .collect()
}

/// The journal of a stored item; records that do not parse are read as intents of an unknown
/// attempt (the safe reading: someone looks before writing again).
fn journal_of(item: Option<&HashMap<String, AttributeValue>>) -> Journal {
    let Some(AttributeValue::M(entries)) = item.and_then(|i| i.get(attr::JOURNAL)) else {
        return Journal::new();
    };
    entries
        .iter()
        .filter_map(|(step, record)| {
            let step: u32 = step.parse().ok()?;
            if let AttributeValue::S(text) = record {
                let unknown = StepRecord::Intent {
                    attempt: 0,
                    op: None,
                    at_ms: None,
                    lease_until_ms: None,
                    looked: None,
                };
                return Some((step, StepRecord::decode(text).unwrap_or(unknown)));
            }
            // A record of a version before the one-string form.
            let fields = record.as_m().ok();
            let field = |k: &str| fields.and_then(|f| f.get(k));
            let state = field(attr::STEP_STATE).and_then(|v| v.as_s().ok());
            let op = field(attr::STEP_OP).and_then(|v| v.as_s().ok()).cloned();
            let record = match (state.map(String::as_str), field(attr::STEP_RESULT)) {
                (Some(STEP_DONE), Some(AttributeValue::S(result))) => StepRecord::Done {
                    result: result.clone(),
                    op,
                },
                _ => StepRecord::Intent {
                    attempt: field(attr::STEP_ATTEMPT)
                        .and_then(number)
                        .unwrap_or(0)
                        .try_into()
                        .unwrap_or(u32::MAX),
                    op,
                    at_ms: None,
                    lease_until_ms: None,
                    looked: None,
                },
            };
            Some((step, record))
        })
        .collect()
}

/// The began windows of a stored item, without its last `skip` (a claim's own).
fn began_of(item: Option<&HashMap<String, AttributeValue>>, skip: usize) -> Vec<BeganWindow> {
    let Some(AttributeValue::L(windows)) = item.and_then(|i| i.get(attr::BEGAN)) else {
        return Vec::new();
    };
    // The windows of claims that announce their own steps, listed again beside.
    let announcing: Vec<&str> = match item.and_then(|i| i.get(attr::BEGAN_BY)) {
        Some(AttributeValue::L(by)) => by
            .iter()
            .filter_map(|w| w.as_s().ok())
            .map(String::as_str)
            .collect(),
        _ => Vec::new(),
    };
    let keep = windows.len().saturating_sub(skip);
    windows[..keep]
        .iter()
        .map(|w| {
            let text = w.as_s().ok();
            // Unreadable: the widest window, so a look-up searches everything.
            let mut window = text
                .and_then(|t| BeganWindow::decode(t))
                .unwrap_or(BeganWindow {
                    at_ms: 0,
                    lease_until_ms: u64::MAX / 2,
                    announces: false,
                });
            window.announces = text.is_some_and(|t| announcing.contains(&t.as_str()));
            window
        })
        .collect()
}

/// The began window a claim writes: this version announces its own steps.
fn window_of(request: &ClaimRequest<'_>) -> BeganWindow {
    BeganWindow {
        at_ms: request.now_ms,
        lease_until_ms: request.lease_until_ms,
        announces: true,
    }
}

fn attempts_of(item: Option<&HashMap<String, AttributeValue>>) -> u32 {
    item.and_then(|a| a.get(attr::ATTEMPTS))
        .and_then(number)
        .unwrap_or(1)
        .try_into()
        .unwrap_or(u32::MAX)
}

/// What the item returned by a failed claim means. The server judged it with the same `now`, so
/// it blocks, unless it is this request's own claim, applied by an attempt whose answer was lost
/// and found by the SDK's retry of the same write: then the claim is acquired. Should the item
/// not parse, the safe answer is "in progress": no reply, Slack retries.
fn blocking_claim(
    item: Option<&HashMap<String, AttributeValue>>,
    request: &ClaimRequest<'_>,
) -> Claim {
    existing_claim(item, request).unwrap_or(Claim::InProgress {
        lease_until_ms: item
            .and_then(|i| i.get(attr::LEASE_UNTIL))
            .and_then(number)
            .unwrap_or(0),
    })
}

/// What an existing item means to a claim: this request's own (an attempt applied it and its
/// answer was lost), or what blocks it; `None` when it counts as absent, or does not parse.
fn existing_claim(
    item: Option<&HashMap<String, AttributeValue>>,
    request: &ClaimRequest<'_>,
) -> Option<Claim> {
    let text = |key: &str| item.and_then(|i| i.get(key)).and_then(|v| v.as_s().ok());
    let status = text(attr::STATUS).and_then(|v| Status::parse(v));
    if status == Some(Status::InProgress)
        && text(attr::OWNER).map(String::as_str) == Some(request.owner.as_str())
    {
        // Its own window is the last of the began windows.
        return Some(Claim::Acquired {
            attempt: attempts_of(item),
            journal: with_looked(
                with_began(journal_of(item), &began_of(item, 1)),
                &looked_of(item),
            ),
        });
    }
    if let Some(app) = other_app(text(attr::APP).map(String::as_str), request.app_id) {
        // Whatever its state: another app's claim is never taken over, nor its answer ours.
        return Some(Claim::OtherApp {
            app_id: app.to_string(),
        });
    }
    let lease_until = item
        .and_then(|i| i.get(attr::LEASE_UNTIL))
        .and_then(number)
        .unwrap_or(0);
    let expires_at = item.and_then(|i| i.get(attr::EXPIRES_AT)).and_then(number);
    let retryable = item
        .and_then(|i| i.get(attr::RETRYABLE))
        .and_then(|v| v.as_bool().ok())
        .copied()
        .unwrap_or(false);
    let blocked =
        existing_blocks_claim(status?, lease_until, expires_at?, request.now_ms, retryable)?;
    Some(match blocked {
        Blocked::Done => Claim::AlreadyDone {
            ran: text(attr::RAN).map(|r| r.split_whitespace().map(str::to_string).collect()),
        },
        Blocked::Failed => Claim::AlreadyFailed {
            error: text(attr::ERROR).cloned().unwrap_or_default(),
        },
        Blocked::InProgress { lease_until_ms } => Claim::InProgress { lease_until_ms },
    })
}

/// A state item as read, unless past its TTL or not a state item.
fn state_item(item: &HashMap<String, AttributeValue>, now_ms: u64) -> Option<super::StateItem> {
    let live = item
        .get(attr::EXPIRES_AT)
        .and_then(number)
        .is_some_and(|at| at >= now_ms / 1000);
    if !live {
        return None;
    }
    Some(super::StateItem {
        value: item.get(attr::APP_STATE)?.as_s().ok()?.clone(),
        version: item.get(attr::APP_STATE_VERSION).and_then(number)?,
        writers: item
            .get(attr::APP_STATE_WRITERS)
            .and_then(|v| v.as_l().ok())
            .map(|l| l.iter().filter_map(|w| w.as_s().ok().cloned()).collect())
            .unwrap_or_default(),
    })
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

    fn request<'a>(
        event_id: &'a crate::envelope::EventId,
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
        let e = crate::envelope::EventId::try_from("Ev1".to_string()).unwrap();
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
        let e = crate::envelope::EventId::try_from("Ev1".to_string()).unwrap();
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
    fn a_journal_written_by_an_earlier_version_as_maps_is_still_read() {
        let record = |fields: &[(&str, AttributeValue)]| AttributeValue::M(item(fields));
        let old = item(&[(
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
        let journal = journal_of(Some(&old));
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
    fn an_alias_item_names_its_message_and_a_claim_of_an_earlier_version_is_read() {
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
        let e = crate::envelope::EventId::try_from("Ev1".to_string()).unwrap();
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
