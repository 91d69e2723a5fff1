//! Message aliases: the key of a message's first event, written where each later event of the
//! same message finds it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};

use super::claim::{APP_CONDITION, PutNew};
use super::item::{attr, n, number, s};
use super::{DynamoLedger, unavailable};
use crate::ledger::{Alias, AliasRequest, LedgerError, Status, other_app};

/// An alias is written where it counts as absent (never written, past its TTL), where it is
/// already this message's, or where a version before pointers left a claim item that is no
/// longer live (released, or its lease ended).
pub(super) const ALIAS_CONDITION: &str = "attribute_not_exists(#pk) \
    OR #expires_at <= :now_s \
    OR #alias_of = :of \
    OR (attribute_not_exists(#alias_of) \
        AND (#status = :released OR (#status = :in_progress AND #lease_until <= :now_ms)))";

/// How much earlier than the claim's an alias found by its message's put may expire before the
/// put gives way to the update that pushes it on (a duplicate seconds later writes nothing).
pub(super) const ALIAS_EXPIRY_SLACK_S: u64 = 3600;

pub(super) async fn alias(
    ledger: &DynamoLedger,
    request: &AliasRequest<'_>,
) -> Result<Alias, LedgerError> {
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
    match ledger.put_new(item).await? {
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
    ledger.requests.fetch_add(1, Ordering::Relaxed);
    let update = ledger
        .client
        .update_item()
        .table_name(&ledger.table)
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

/// What an alias item found by a failed alias write means: another message's alias, or (from a
/// version before pointers) a live claim or an answered one.
pub(super) fn alias_found(
    item: Option<&HashMap<String, AttributeValue>>,
    app_id: Option<&str>,
) -> Alias {
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
            key: "(a claim kept at the alias key)".into(),
        },
        _ => Alias::Busy {
            lease_until_ms: item
                .and_then(|i| i.get(attr::LEASE_UNTIL))
                .and_then(number)
                .unwrap_or(0),
        },
    }
}
