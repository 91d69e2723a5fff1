//! App state: a versioned item, written alone or with the request's record of the change in one
//! transaction.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, Put, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};

use super::item::{attr, n, number, s};
use super::{DynamoLedger, unavailable};
use crate::ledger::{LedgerError, Status};

pub(super) async fn state(
    ledger: &DynamoLedger,
    key: &crate::slack::envelope::EventId,
    now_ms: u64,
) -> Result<Option<crate::ledger::StateItem>, LedgerError> {
    ledger.requests.fetch_add(1, Ordering::Relaxed);
    let Some(item) = ledger.get_item(key.as_str()).await? else {
        return Ok(None);
    };
    Ok(state_item(&item, now_ms))
}

pub(super) async fn state_changes(
    ledger: &DynamoLedger,
    key: &crate::slack::envelope::EventId,
) -> Result<std::collections::BTreeMap<String, u64>, LedgerError> {
    ledger.requests.fetch_add(1, Ordering::Relaxed);
    let item = ledger.get_item(key.as_str()).await?;
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

/// Writes the app state's new version: alone, or with the request's record of the change.
pub(super) async fn put_state(
    ledger: &DynamoLedger,
    key: &crate::slack::envelope::EventId,
    write: &crate::ledger::StateWrite<'_>,
    now_ms: u64,
) -> Result<crate::ledger::StatePut, LedgerError> {
    ledger.requests.fetch_add(1, Ordering::Relaxed);
    let version = write.expected + 1;
    let put = versioned_put(key, write, version, now_ms);
    match &write.request {
        None => put_alone(ledger, put, version).await,
        Some(request) => put_with_record(ledger, put, request, version).await,
    }
}

/// A state item's put, as either way of writing it sends it.
struct VersionedPut {
    item: HashMap<String, AttributeValue>,
    /// On the version read, or, for a first version, on no live item.
    condition: &'static str,
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

/// The state item at `version`, conditioned on the version the write read.
fn versioned_put(
    key: &crate::slack::envelope::EventId,
    write: &crate::ledger::StateWrite<'_>,
    version: u64,
    now_ms: u64,
) -> VersionedPut {
    // The writers kept are the ones read with `expected`: the condition on the version makes
    // sure they are still the item's.
    let writers = crate::ledger::state_writers_after(write.read_writers.to_vec(), write.writer);
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
    VersionedPut {
        item,
        condition,
        names,
        values,
    }
}

/// The state's new version, with no request to record it on.
async fn put_alone(
    ledger: &DynamoLedger,
    put: VersionedPut,
    version: u64,
) -> Result<crate::ledger::StatePut, LedgerError> {
    let VersionedPut {
        item,
        condition,
        names,
        values,
    } = put;
    let put = ledger
        .client
        .put_item()
        .table_name(&ledger.table)
        .set_item(Some(item))
        .condition_expression(condition)
        .set_expression_attribute_names(Some(names))
        .set_expression_attribute_values(Some(values));
    match put.send().await {
        Ok(_) => Ok(crate::ledger::StatePut::Written { version }),
        Err(SdkError::ServiceError(e))
            if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) =>
        {
            Ok(crate::ledger::StatePut::Conflict)
        }
        Err(e) => Err(unavailable(e.into_service_error())),
    }
}

/// The value and the request's record of the change, in one transaction: the value
/// conditioned on the version read, the record on the claim being the owner's, in progress,
/// and not recording this change yet.
async fn put_with_record(
    ledger: &DynamoLedger,
    put: VersionedPut,
    request: &crate::ledger::RequestChange<'_>,
    version: u64,
) -> Result<crate::ledger::StatePut, LedgerError> {
    let VersionedPut {
        item,
        condition,
        names,
        values,
    } = put;
    let put = Put::builder()
        .table_name(&ledger.table)
        .set_item(Some(item))
        .condition_expression(condition)
        .set_expression_attribute_names(Some(names))
        .set_expression_attribute_values(Some(values))
        .build()
        .map_err(unavailable)?;
    let record = Update::builder()
        .table_name(&ledger.table)
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
    let sent = ledger
        .client
        .transact_write_items()
        .transact_items(TransactWriteItem::builder().put(put).build())
        .transact_items(TransactWriteItem::builder().update(record).build())
        .send()
        .await;
    let reasons = match sent {
        Ok(_) => return Ok(crate::ledger::StatePut::Written { version }),
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
        return record_refused(ledger, request, &reasons[1]).await;
    }
    if failed(0) {
        return Ok(crate::ledger::StatePut::Conflict);
    }
    let codes: Vec<&str> = reasons.iter().filter_map(|r| r.code()).collect();
    // Another write to either item at the same moment: read again and try again.
    if codes.contains(&"TransactionConflict") {
        crate::metrics::count("LedgerTransactionConflicts");
        return Ok(crate::ledger::StatePut::Conflict);
    }
    let why = format!("the state change's transaction was cancelled: {codes:?}");
    // A claim item grown past DynamoDB's 400 KB (its record of changes among it): no retry
    // fixes that. Throttling and the rest: the ledger is unavailable, as for any write.
    if codes.contains(&"ValidationError") {
        return Err(LedgerError::ItemTooLarge(why.into()));
    }
    Err(LedgerError::Unavailable(why.into()))
}

/// What the request's record refused means: the change made already (by an earlier run, or
/// by this write whose answer was lost), or the claim no longer the owner's.
async fn record_refused(
    ledger: &DynamoLedger,
    request: &crate::ledger::RequestChange<'_>,
    reason: &CancellationReason,
) -> Result<crate::ledger::StatePut, LedgerError> {
    // The claim's item as it is (returned with the failure; read where it is not).
    let item = match reason.item() {
        Some(item) => Some(item.clone()),
        None => ledger.get_item(request.held.event_id.as_str()).await?,
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
    match recorded {
        // Made by an earlier run of this request, or by this write, whose answer was
        // lost (a claim taken over since records it all the same).
        Some(version) => Ok(crate::ledger::StatePut::MadeAlready { version }),
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
    }
}

/// A state item as read, unless past its TTL or not a state item.
pub(super) fn state_item(
    item: &HashMap<String, AttributeValue>,
    now_ms: u64,
) -> Option<crate::ledger::StateItem> {
    let live = item
        .get(attr::EXPIRES_AT)
        .and_then(number)
        .is_some_and(|at| at >= now_ms / 1000);
    if !live {
        return None;
    }
    Some(crate::ledger::StateItem {
        value: item.get(attr::APP_STATE)?.as_s().ok()?.clone(),
        version: item.get(attr::APP_STATE_VERSION).and_then(number)?,
        writers: item
            .get(attr::APP_STATE_WRITERS)
            .and_then(|v| v.as_l().ok())
            .map(|l| l.iter().filter_map(|w| w.as_s().ok().cloned()).collect())
            .unwrap_or_default(),
    })
}
