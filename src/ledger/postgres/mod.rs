//! The PostgreSQL ledger (`DATABASE_URL`): the tables of `migrations/0001_ledger.sql`, shared by
//! every instance and every release on the database.
//!
//! One row per claimed key (`slack_once_claims`), its journal, began windows, look-ups and state
//! changes beside the claim as JSON; aliases, notes and state values in tables of their own.
//! Every lease and TTL is judged on one clock (`coalesce($now, DB_NOW_MS)`: the database's in a
//! deployment, the call's own in tests, [`crate::postgres::Clock`]): a claim stores its lease and
//! TTL as the database's now plus what the claimant asked for (`lease_until_ms - now_ms`), and
//! a time it returns (`InProgress`'s lease) is translated back to the caller's clock. Journal
//! records and began windows keep the claimant's own times, as it wrote them (they bound when
//! its Slack calls were made, by its clock).
//!
//! Round trips per operation (a statement is one; the pool's checkout costs none while a
//! connection is idle, one more to open one):
//! - `claim`: 1 (`INSERT … ON CONFLICT DO UPDATE … WHERE` it counts as absent, with a read of
//!   the row it did not take in the same statement); sent again (at most
//!   [`claim::CLAIM_STATEMENTS`] in all) only where a claim committed by another transaction after the
//!   statement began hid the row from it;
//! - `begin_step`, `finish` (and `complete`, `release`): 1, conditioned on the owner, in
//!   progress; `finish` reads in the same statement what it found where it wrote nothing;
//! - `alias`: 1 (as the claim: written where absent, past its TTL or already this message's);
//! - `set_note`, `replace_note`, `note`, `state`, `state_changes`: 1 each;
//! - `put_state`: 1: the value and, with a request, the request's record of the change, in
//!   one statement (so one transaction: both or neither), the claim's row locked first;
//! - `delete_expired`: one per batch per table (4 tables), until a batch comes back short;
//! - `sweep_abandoned`, `claim_record`, `make_retryable`: 1 each.
//!
//! Each call goes through [`Database::run`]: sent once more on another connection where the
//! first broke, which every write here recognises (the owner token, the alias's key, the change
//! id on the claim, a note as it reads).
//!
//! What this store does not have: formats (there is no earlier PostgreSQL format, so every row
//! is taken over as this release reads it, and every began window announces its steps), and
//! aliases written as claims: [`crate::ledger::Alias::Busy`] is never returned.
//!
//! Bounds ([`LedgerError::ItemTooLarge`]): a claim's journal, look-ups, began windows, state
//! changes and listeners at most 400 KiB of text together, a note or a state value at most
//! 400 KiB: DynamoDB's item limit, which the pipeline's journal and the app's state are built
//! under (check constraints in the migration).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use deadpool_postgres::Object;

use super::{
    Alias, AliasRequest, Claim, ClaimRequest, Finish, Held, Ledger, LedgerError, NotePut,
    StateItem, StatePut, StateWrite,
};
use crate::journal::record::{Settled, StepRecord};
use crate::postgres::{Database, DatabaseError};
use crate::slack::envelope::EventId;

mod claim;
mod rows;
mod upkeep;
mod values;

pub use upkeep::{ClaimRecord, Sweep, Swept};

/// The ledger on a PostgreSQL database (see the module's documentation).
#[derive(Clone, Debug)]
pub struct PostgresLedger {
    database: Database,
    statements: Arc<AtomicU64>,
}

impl PostgresLedger {
    /// The ledger on `database` (migrated: `Database::migrate`).
    pub fn new(database: Database) -> Self {
        Self {
            database,
            statements: Arc::default(),
        }
    }

    /// Statements this ledger has sent (each one round trip; one sent again on another
    /// connection counts twice), for benchmarks and tests that count round trips rather than
    /// assume them.
    pub fn statements_sent(&self) -> u64 {
        self.statements.load(Ordering::Relaxed)
    }

    /// Runs `call` as [`Database::run`] does, each statement it sends counted.
    async fn run<T, F, Fut>(&self, call: F) -> Result<T, LedgerError>
    where
        F: Fn(Object) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        self.database
            .run(|client| {
                self.statements.fetch_add(1, Ordering::Relaxed);
                call(client)
            })
            .await
            .map_err(ledger_error)
    }

    /// Runs `sql` with `params` as [`Database::query`] does, counted.
    async fn query(
        &self,
        sql: &str,
        params: &[(
            &(dyn tokio_postgres::types::ToSql + Sync),
            tokio_postgres::types::Type,
        )],
    ) -> Result<Vec<tokio_postgres::Row>, LedgerError> {
        self.run(|client| async move { client.query_typed(sql, params).await })
            .await
    }

    /// The database it runs on.
    pub fn database(&self) -> &Database {
        &self.database
    }

    /// Deletes the rows past their TTL at `now_ms` (claims, aliases, notes, state), `batch` at
    /// a time (each batch one short transaction, skipping rows another call holds): how many.
    pub async fn delete_expired(&self, now_ms: u64, batch: usize) -> Result<u64, LedgerError> {
        upkeep::delete_expired(self, now_ms, batch).await
    }

    /// Ends `failed` the claims in progress abandoned past their lease, as `slack-once sweep`
    /// does on DynamoDB ([`Sweep`]); what it found and did.
    pub async fn sweep_abandoned(
        &self,
        now_ms: u64,
        sweep: &Sweep<'_>,
    ) -> Result<Swept, LedgerError> {
        upkeep::sweep_abandoned(self, now_ms, sweep).await
    }

    /// The claim at `key` as stored, its times on this process's clock
    /// ([`crate::clock::now_ms`]), whatever its TTL (`expires_at_ms` says it): for operators.
    pub async fn claim_record(&self, key: &EventId) -> Result<Option<ClaimRecord>, LedgerError> {
        upkeep::claim_record(self, key).await
    }

    /// Ends `failed` with `code` (retryable: claimable as a lapsed claim is) the claim at `key`
    /// left in progress past its lease (a takeover since wins): `redrive`'s end of a claim whose
    /// dead letter it refused. Whether it did.
    pub async fn end_lapsed(&self, key: &EventId, code: &str) -> Result<bool, LedgerError> {
        upkeep::end_lapsed(self, key, code).await
    }

    /// Makes the `failed` claim at `key` claimable again (retryable), its TTL at least
    /// `expires_at_ms` (this process's clock): `redrive`'s reset. Whether it was `failed`.
    pub async fn make_retryable(
        &self,
        key: &EventId,
        expires_at_ms: u64,
    ) -> Result<bool, LedgerError> {
        upkeep::make_retryable(self, key, expires_at_ms).await
    }
}

#[async_trait]
impl Ledger for PostgresLedger {
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
        claim::begin_step(self, held, step, intent, settled).await
    }

    async fn alias(&self, request: &AliasRequest<'_>) -> Result<Alias, LedgerError> {
        values::alias(self, request).await
    }

    async fn set_note(
        &self,
        key: &EventId,
        value: &str,
        at_ms: u64,
        expires_at_s: u64,
    ) -> Result<(), LedgerError> {
        values::set_note(self, key, value, at_ms, expires_at_s).await
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
        values::replace_note(self, key, read, value, at_ms, expires_at_s, now_ms).await
    }

    async fn note(&self, key: &EventId, now_ms: u64) -> Result<Option<String>, LedgerError> {
        values::note(self, key, now_ms).await
    }

    async fn state_changes(&self, key: &EventId) -> Result<BTreeMap<String, u64>, LedgerError> {
        values::state_changes(self, key).await
    }

    async fn state(&self, key: &EventId, now_ms: u64) -> Result<Option<StateItem>, LedgerError> {
        values::state(self, key, now_ms).await
    }

    async fn put_state(
        &self,
        key: &EventId,
        write: &StateWrite<'_>,
        now_ms: u64,
    ) -> Result<StatePut, LedgerError> {
        values::put_state(self, key, write, now_ms).await
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

/// A failed call as the ledger says it: a row over its bound (a check constraint) is too large,
/// anything else unavailable.
fn ledger_error(error: DatabaseError) -> LedgerError {
    let too_large = match &error {
        DatabaseError::Unavailable(source) => source
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(|e| e.code())
            .is_some_and(|code| *code == tokio_postgres::error::SqlState::CHECK_VIOLATION),
        _ => false,
    };
    if too_large {
        LedgerError::ItemTooLarge(Box::new(error))
    } else {
        LedgerError::Unavailable(Box::new(error))
    }
}
