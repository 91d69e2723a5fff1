//! The journal's writes: a step's intent and the fates learnt, each conditioned on the claim's
//! owner and folded into one update.

use std::sync::atomic::Ordering;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};

use super::item::{attr, looked_key, s};
use super::{DynamoLedger, past_transactions, unavailable};
use crate::journal::record::{Settled, StepRecord};
use crate::ledger::{Held, LedgerError, Status};

/// Steps, completion and release: only by the owner of a claim still in progress.
pub(super) const OWNER_CONDITION: &str = "#owner = :owner AND #status = :in_progress";

pub(super) async fn begin_step(
    ledger: &DynamoLedger,
    held: Held<'_>,
    step: u32,
    intent: &StepRecord,
    settled: &[Settled],
) -> Result<(), LedgerError> {
    // The condition still holds when the SDK sends this write again: it is idempotent.
    let result = ledger
        .owner_write(
            held,
            vec!["#journal.#step = :intent".into()],
            vec!["#journal.#lstep".into()],
            vec![
                ("#step".into(), step.to_string()),
                ("#lstep".into(), looked_key(step)),
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

impl DynamoLedger {
    /// Sends a write conditioned on the owner; `settled` is folded into it.
    pub(super) async fn owner_write(
        &self,
        held: Held<'_>,
        mut set: Vec<String>,
        mut remove: Vec<String>,
        mut names: Vec<(String, String)>,
        mut values: Vec<(String, AttributeValue)>,
        settled: &[Settled],
    ) -> Result<(), SdkError<UpdateItemError, aws_smithy_runtime_api::http::Response>> {
        for (i, fate) in crate::journal::record::last_per_step(settled)
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
                    names.push((name.clone(), looked_key(*step)));
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
            names.push((lname.clone(), looked_key(*step)));
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
}

/// A write that failed: too large for an item (no retry fixes it), or the ledger unavailable.
pub(super) fn write_failed(
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
