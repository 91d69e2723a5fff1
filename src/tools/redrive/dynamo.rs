//! `redrive` on AWS: the dead letters in SQS's dead-letter queue, the claims in the DynamoDB
//! table.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;

use super::{ClaimView, DEAD_LETTER_REFUSED, DeadLetter, DeadLetters, RedriveError, RedriveLedger};
use crate::ledger::dynamo::attr;
use crate::slack::envelope::EventId;

/// The queues and the table `redrive` works on.
pub struct Queues<'a> {
    /// The SQS client.
    pub sqs: &'a aws_sdk_sqs::Client,
    /// The dead-letter queue's URL.
    pub dead_letters: &'a str,
    /// The work queue's URL.
    pub work: &'a str,
    /// The DynamoDB client.
    pub dynamodb: &'a aws_sdk_dynamodb::Client,
    /// The ledger's table.
    pub table: &'a str,
}

type Item = std::collections::HashMap<String, AttributeValue>;

fn queue_error(e: impl std::error::Error + 'static) -> RedriveError {
    RedriveError::Queue(crate::errors::error_chain(&e))
}

fn ledger_error(e: impl std::error::Error + 'static) -> RedriveError {
    RedriveError::Ledger(crate::errors::error_chain(&e))
}

#[async_trait]
impl DeadLetters for Queues<'_> {
    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<DeadLetter>, RedriveError> {
        let received = self
            .sqs
            .receive_message()
            .queue_url(self.dead_letters)
            .max_number_of_messages(max.min(10) as i32)
            .visibility_timeout(visibility.as_secs().try_into().unwrap_or(i32::MAX))
            .wait_time_seconds(1)
            .send()
            .await
            .map_err(queue_error)?;
        Ok(received
            .messages()
            .iter()
            .filter_map(|m| {
                Some(DeadLetter {
                    id: m.message_id()?.to_string(),
                    receipt: m.receipt_handle()?.to_string(),
                    body: m.body().unwrap_or_default().to_string(),
                })
            })
            .collect())
    }

    async fn move_back(&self, letter: &DeadLetter) -> Result<(), RedriveError> {
        self.sqs
            .send_message()
            .queue_url(self.work)
            .message_body(&letter.body)
            .send()
            .await
            .map_err(queue_error)?;
        // Sent first, then deleted: a crash between leaves a copy, which the ledger answers
        // once.
        self.sqs
            .delete_message()
            .queue_url(self.dead_letters)
            .receipt_handle(&letter.receipt)
            .send()
            .await
            .map_err(queue_error)?;
        Ok(())
    }

    async fn leave(&self, receipts: Vec<String>) {
        for receipt in receipts {
            let _ = self
                .sqs
                .change_message_visibility()
                .queue_url(self.dead_letters)
                .receipt_handle(receipt)
                .visibility_timeout(0)
                .send()
                .await;
        }
    }
}

#[async_trait]
impl RedriveLedger for Queues<'_> {
    /// The item at `key`, read consistently; past its TTL it counts as absent, as every claim
    /// reads it.
    async fn read(&self, key: &EventId, now_ms: u64) -> Result<Option<ClaimView>, RedriveError> {
        let item = self
            .dynamodb
            .get_item()
            .table_name(self.table)
            .key(attr::PK, AttributeValue::S(key.to_string()))
            .consistent_read(true)
            .send()
            .await
            .map_err(ledger_error)?
            .item
            .filter(|i| number(i, attr::EXPIRES_AT).is_none_or(|s| s * 1000 > now_ms));
        Ok(item.map(|i| ClaimView {
            status: text(&i, attr::STATUS).unwrap_or_default().to_string(),
            error: text(&i, attr::ERROR).map(str::to_string),
            format: number(&i, attr::FORMAT),
            lease_until_ms: number(&i, attr::LEASE_UNTIL),
            app: text(&i, attr::APP).map(str::to_string),
            owner: text(&i, attr::OWNER).map(str::to_string),
            expires_at_s: number(&i, attr::EXPIRES_AT),
        }))
    }

    async fn make_claimable(
        &self,
        key: &EventId,
        view: &ClaimView,
        expires_at_s: u64,
    ) -> Result<(), RedriveError> {
        let result = self
            .dynamodb
            .update_item()
            .table_name(self.table)
            .key(attr::PK, AttributeValue::S(key.to_string()))
            .update_expression("SET #retryable = :true, #expires_at = :expires")
            .condition_expression("#status = :failed AND #owner = :owner")
            .expression_attribute_names("#retryable", attr::RETRYABLE)
            .expression_attribute_names("#expires_at", attr::EXPIRES_AT)
            .expression_attribute_names("#status", attr::STATUS)
            .expression_attribute_names("#owner", attr::OWNER)
            .expression_attribute_values(":true", AttributeValue::Bool(true))
            .expression_attribute_values(":expires", AttributeValue::N(expires_at_s.to_string()))
            .expression_attribute_values(":failed", AttributeValue::S("failed".into()))
            .expression_attribute_values(
                ":owner",
                AttributeValue::S(view.owner.clone().unwrap_or_default()),
            )
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                // Claimed, or changed, since it was read: the redriven copy meets it as it is.
                Ok(())
            }
            Err(e) => Err(ledger_error(e)),
        }
    }

    async fn end_refused(
        &self,
        key: &EventId,
        view: &ClaimView,
        now_ms: u64,
    ) -> Result<bool, RedriveError> {
        let (Some(owner), Some(lease)) = (&view.owner, view.lease_until_ms) else {
            return Ok(false);
        };
        crate::tools::sweep::end_lapsed_claim(
            self.dynamodb,
            self.table,
            AttributeValue::S(key.to_string()),
            AttributeValue::S(owner.clone()),
            AttributeValue::N(lease.to_string()),
            DEAD_LETTER_REFUSED,
            now_ms,
        )
        .await
        .map_err(RedriveError::Ledger)
    }
}

fn text<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

fn number(item: &Item, name: &str) -> Option<u64> {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
}
