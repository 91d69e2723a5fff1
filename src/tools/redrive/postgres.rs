//! `redrive` on PostgreSQL: the dead letters in the work queue's dead-letter table, the claims
//! in the ledger's. A dead letter moves back by one statement (never both dead and back); a
//! listing hides nothing, so what is refused or held simply stays.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;

use super::{ClaimView, DEAD_LETTER_REFUSED, DeadLetter, DeadLetters, RedriveError, RedriveLedger};
use crate::ledger::{LedgerError, PostgresLedger};
use crate::queue::{PostgresQueue, QueueError, Redrive};
use crate::slack::envelope::EventId;

/// The dead letters of a work queue on PostgreSQL, the longest dead first, up to a run's most.
pub struct PostgresDeadLetters<'a> {
    queue: &'a PostgresQueue,
    /// What the first receive listed, handed out in batches; `None` until then.
    listed: Mutex<Option<VecDeque<DeadLetter>>>,
    most: usize,
}

impl<'a> PostgresDeadLetters<'a> {
    /// The dead letters of `queue`, at most `most` of them in a run.
    pub fn new(queue: &'a PostgresQueue, most: usize) -> Self {
        Self {
            queue,
            listed: Mutex::new(None),
            most,
        }
    }
}

fn queue_error(e: QueueError) -> RedriveError {
    RedriveError::Queue(crate::errors::error_chain(&e))
}

fn ledger_error(e: LedgerError) -> RedriveError {
    RedriveError::Ledger(crate::errors::error_chain(&e))
}

#[async_trait]
impl DeadLetters for PostgresDeadLetters<'_> {
    async fn receive(
        &self,
        max: usize,
        _visibility: Duration,
    ) -> Result<Vec<DeadLetter>, RedriveError> {
        let listed = self.listed.lock().expect("lock").is_some();
        if !listed {
            let dead = self
                .queue
                .dead_letters(self.most)
                .await
                .map_err(queue_error)?;
            let letters = dead.into_iter().map(|d| DeadLetter {
                receipt: d.message_id.clone(),
                id: d.message_id,
                body: d.body,
            });
            *self.listed.lock().expect("lock") = Some(letters.collect());
        }
        let mut guard = self.listed.lock().expect("lock");
        let listed = guard.get_or_insert_with(VecDeque::new);
        let take = max.min(listed.len());
        Ok(listed.drain(..take).collect())
    }

    async fn move_back(&self, letter: &DeadLetter) -> Result<(), RedriveError> {
        // Moved by this statement, or by another redrive since the listing: back once.
        let ids = std::slice::from_ref(&letter.id);
        self.queue
            .redrive_dead_letters(Redrive::Messages(ids))
            .await
            .map_err(queue_error)?;
        Ok(())
    }

    async fn leave(&self, _receipts: Vec<String>) {
        // Nothing was hidden.
    }
}

#[async_trait]
impl RedriveLedger for PostgresLedger {
    async fn read(&self, key: &EventId, now_ms: u64) -> Result<Option<ClaimView>, RedriveError> {
        let record = self.claim_record(key).await.map_err(ledger_error)?;
        Ok(record
            .filter(|r| r.expires_at_ms > now_ms)
            .map(|r| ClaimView {
                status: r.status.as_str().to_string(),
                error: r.error,
                format: None,
                lease_until_ms: Some(r.lease_until_ms),
                app: r.app_id,
                owner: None,
                expires_at_s: Some(r.expires_at_ms / 1000),
            }))
    }

    async fn make_claimable(
        &self,
        key: &EventId,
        _view: &ClaimView,
        expires_at_s: u64,
    ) -> Result<(), RedriveError> {
        // Claimed, or changed, since it was read: the redriven copy meets it as it is.
        self.make_retryable(key, expires_at_s.saturating_mul(1000))
            .await
            .map_err(ledger_error)?;
        Ok(())
    }

    async fn end_refused(
        &self,
        key: &EventId,
        _view: &ClaimView,
        _now_ms: u64,
    ) -> Result<bool, RedriveError> {
        self.end_lapsed(key, DEAD_LETTER_REFUSED)
            .await
            .map_err(ledger_error)
    }
}
