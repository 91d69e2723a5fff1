//! Notes: small items of their own, written where a later one does not stand, or replaced where
//! they are as read.

use std::sync::atomic::Ordering;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;

use super::item::{attr, n, number, s};
use super::{DynamoLedger, unavailable};
use crate::ledger::LedgerError;

/// The put of a note's item (`value`, written at `at_ms`, kept until `expires_at_s`), counted
/// as a ledger request; its condition is the caller's.
fn note_put(
    ledger: &DynamoLedger,
    key: &crate::slack::envelope::EventId,
    value: &str,
    at_ms: u64,
    expires_at_s: u64,
) -> aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder {
    ledger.requests.fetch_add(1, Ordering::Relaxed);
    ledger
        .client
        .put_item()
        .table_name(&ledger.table)
        .item(attr::PK, s(key.as_str()))
        .item(attr::NOTE, s(value))
        .item(attr::NOTE_AT, n(at_ms))
        .item(attr::EXPIRES_AT, n(expires_at_s))
}

pub(super) async fn set_note(
    ledger: &DynamoLedger,
    key: &crate::slack::envelope::EventId,
    value: &str,
    at_ms: u64,
    expires_at_s: u64,
) -> Result<(), LedgerError> {
    let result = note_put(ledger, key, value, at_ms, expires_at_s)
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

pub(super) async fn replace_note(
    ledger: &DynamoLedger,
    key: &crate::slack::envelope::EventId,
    read: Option<&str>,
    value: &str,
    at_ms: u64,
    expires_at_s: u64,
    now_ms: u64,
) -> Result<crate::ledger::NotePut, LedgerError> {
    let put = note_put(ledger, key, value, at_ms, expires_at_s)
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
        Ok(_) => Ok(crate::ledger::NotePut::Written),
        Err(SdkError::ServiceError(e))
            if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) =>
        {
            Ok(crate::ledger::NotePut::Conflict)
        }
        Err(e) => Err(unavailable(e.into_service_error())),
    }
}

pub(super) async fn note(
    ledger: &DynamoLedger,
    key: &crate::slack::envelope::EventId,
    now_ms: u64,
) -> Result<Option<String>, LedgerError> {
    let Some(item) = ledger.get_item(key.as_str()).await? else {
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
