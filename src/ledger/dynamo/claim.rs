//! The claim and the finish: the put that claims a key never seen, the update that takes over
//! a key that counts as absent, what a failed claim's item means, and the owner's last write.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};

use super::item::{
    ITEM_FORMAT, ITEM_FORMAT_READ, attempts_of, attr, began_of, journal_of, looked_of, n, number,
    s, window_of,
};
use super::journal::write_failed;
use super::{DynamoLedger, past_transactions, unavailable};
use crate::journal::record::{Journal, Settled, with_began, with_looked};
use crate::ledger::{
    Blocked, Claim, ClaimRequest, Finish, Held, LedgerError, Status, applied_already,
    existing_blocks_claim, other_app,
};

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
pub(super) const CLAIM_CONDITION: &str = "attribute_not_exists(#pk) \
    OR #expires_at <= :now_s \
    OR ((attribute_not_exists(#fmt) OR #fmt <= :fmt_read) \
        AND (#status = :released \
            OR (#status = :failed AND #retryable = :true) \
            OR (#status = :in_progress AND #lease_until <= :now_ms)))";

/// Where the request names its app, a takeover or an alias update also needs the item to be
/// no other app's.
pub(super) const APP_CONDITION: &str = "(attribute_not_exists(#app) OR #app = :app)";

/// What a put of a key never written met.
pub(super) enum PutNew {
    Written,
    /// The key's item, as the failed condition returned it.
    Found(Option<HashMap<String, AttributeValue>>),
    /// `AccessDeniedException`: the role allows only `UpdateItem`.
    Refused,
}

pub(super) fn access_denied(meta: &aws_sdk_dynamodb::error::ErrorMetadata) -> bool {
    meta.code() == Some("AccessDeniedException")
}

/// Said once per process: the role refuses `PutItem`, and every claim of a key never seen
/// takes the update instead (one request as before, evaluated more slowly).
pub(super) fn put_refused_warning() {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        tracing::warn!(
            "the ledger's role refuses dynamodb:PutItem: claims fall back to UpdateItem; \
             allow both (the SAM template does)"
        );
    });
}

pub(super) async fn claim(
    ledger: &DynamoLedger,
    request: &ClaimRequest<'_>,
) -> Result<Claim, LedgerError> {
    // Most deliveries find the key never seen (a first delivery) or held (a duplicate): a
    // put conditioned on the key's absence settles both in one request, the simplest one
    // DynamoDB evaluates. Only a key that counts as absent though it exists (past its TTL,
    // released, retryable, its lease ended) needs the update below: a takeover, rare.
    match ledger.claim_new(request).await? {
        Ok(claim) => Ok(claim),
        Err(absent) => ledger.claim_existing(request, absent).await,
    }
}

pub(super) async fn finish(
    ledger: &DynamoLedger,
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
    let result = ledger
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

impl DynamoLedger {
    /// The claim of a key never seen: one put, conditioned on the key's absence. `Err` when the
    /// key exists but counts as absent (`Err(false)`: the update of [`Self::claim_existing`]
    /// takes it over), or when the role refuses the put (`Err(true)`: the key may be new).
    pub(super) async fn claim_new(
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
    pub(super) async fn put_new(
        &self,
        item: HashMap<String, AttributeValue>,
    ) -> Result<PutNew, LedgerError> {
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

    /// The claim of a key that exists and counted as absent when the put found it: the update
    /// conditioned on every way an item counts as absent (evaluated again, atomically). It
    /// names its app only where the key may be new (`maybe_new`: the role refused the put): an
    /// item of no app, a version before apps wrote it, stays anyone's, so the app whose old
    /// version wrote it never finds it another's and answers again under a key of its own.
    pub(super) async fn claim_existing(
        &self,
        request: &ClaimRequest<'_>,
        maybe_new: bool,
    ) -> Result<Claim, LedgerError> {
        let update = self.takeover(request, maybe_new);
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

    /// The takeover's update: [`CLAIM_CONDITION`] (and [`APP_CONDITION`]), the claim's
    /// attributes set, and what an earlier delivery left removed.
    fn takeover(&self, request: &ClaimRequest<'_>, maybe_new: bool) -> UpdateItemFluentBuilder {
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
            .set_expression_attribute_names(Some(takeover_names(request.app_id)))
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

        update.update_expression(expression)
    }
}

/// The placeholders of a takeover's attributes (several are DynamoDB reserved words); `#app`
/// only where the request names its app (DynamoDB refuses a name the expression does not use).
fn takeover_names(app_id: Option<&str>) -> HashMap<String, String> {
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
    .chain(app_id.map(|_| attr::APP))
    .map(|a| (format!("#{a}"), a.to_string()))
    .collect()
}

/// What the item returned by a failed claim means. The server judged it with the same `now`, so
/// it blocks, unless it is this request's own claim, applied by an attempt whose answer was lost
/// and found by the SDK's retry of the same write: then the claim is acquired. Should the item
/// not parse, the safe answer is "in progress": no reply, Slack retries.
pub(super) fn blocking_claim(
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
pub(super) fn existing_claim(
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
