//! The store a schedule's ledger lives in: the process's memory (the explorer's and the
//! simulation's default), or PostgreSQL ([`super::Simulation::on_postgres`]), each behind the
//! one seam the checks read at a schedule's end ([`SimStore`]).
//!
//! A schedule runs on tokio's paused clock, which moves on whenever its runtime is idle: a
//! statement in flight on a socket would leave it idle, and leases would lapse while the
//! database answers. So each PostgreSQL call runs on a runtime of its own on real time, and the
//! schedule's thread waits for it blocked: its runtime is stopped, and a call takes no virtual
//! time, as an in-memory call takes none.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use async_trait::async_trait;

use crate::journal::record::{Journal, Settled, StepRecord};
use crate::ledger::postgres::PostgresLedger;
use crate::ledger::{
    Alias, AliasRequest, Claim, ClaimRequest, Finish, Held, Ledger, LedgerError, MemoryLedger,
    NotePut, StateItem, StatePut, StateWrite, Status,
};
use crate::postgres::{Clock, Database};
use crate::slack::envelope::EventId;

/// The ledger of a schedule's world, and what the explorer reads of it beside the [`Ledger`]
/// calls the runs make.
pub(crate) trait SimStore: Ledger {
    /// The journal of a claim, as stored.
    fn journal(&self, key: &EventId) -> Option<Journal>;
    /// Every claim's key and status, as stored, in key order.
    fn statuses(&self) -> Vec<(EventId, Status)>;
    /// Ends `failed` (`code`, retryable) the claim of `key` left in progress past its lease at
    /// `now_ms`, as `slack-once redrive` ends a refused dead letter's claim; whether it did.
    fn end_lapsed(&self, key: &EventId, code: &str, now_ms: u64) -> bool;
    /// What the checks read of it once the schedule is over.
    fn at_end(self: Arc<Self>, now_ms: u64) -> Arc<dyn AtEnd>;
}

/// The ledger as the checks read it once a schedule is over.
pub(crate) trait AtEnd: Send + Sync {
    /// The state value at `key`, live at `now_ms`.
    fn state(&self, key: &EventId, now_ms: u64) -> Result<Option<StateItem>, LedgerError>;
    /// The failure code a claim ended with.
    fn error(&self, key: &EventId) -> Option<String>;
}

impl SimStore for MemoryLedger {
    fn journal(&self, key: &EventId) -> Option<Journal> {
        MemoryLedger::journal(self, key)
    }

    fn statuses(&self) -> Vec<(EventId, Status)> {
        MemoryLedger::statuses(self)
    }

    fn end_lapsed(&self, key: &EventId, code: &str, now_ms: u64) -> bool {
        MemoryLedger::end_lapsed(self, key, code, now_ms)
    }

    fn at_end(self: Arc<Self>, _now_ms: u64) -> Arc<dyn AtEnd> {
        self
    }
}

impl AtEnd for MemoryLedger {
    fn state(&self, key: &EventId, now_ms: u64) -> Result<Option<StateItem>, LedgerError> {
        super::end::at_once(Ledger::state(self, key, now_ms))
    }

    fn error(&self, key: &EventId) -> Option<String> {
        MemoryLedger::error(self, key)
    }
}

/// Which store the schedules' ledgers are in.
#[derive(Clone, Default)]
pub(crate) enum Store {
    /// A new [`MemoryLedger`] for each schedule.
    #[default]
    Memory,
    /// A schema of its own on PostgreSQL for each schedule running at once, emptied before
    /// each.
    Postgres(Arc<Schemas>),
}

impl Store {
    /// The ledger of a new schedule's world.
    pub(crate) fn ledger(&self) -> Arc<dyn SimStore> {
        match self {
            Store::Memory => Arc::new(MemoryLedger::new()),
            Store::Postgres(schemas) => Arc::new(schemas.take()),
        }
    }
}

/// The runtime every PostgreSQL call of every schedule runs on (real time, two threads).
static REAL_TIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("explore-postgres")
        .enable_all()
        .build()
        .expect("a runtime for PostgreSQL's calls")
});

/// Runs `call` on [`REAL_TIME`], this thread blocked until it ends (so a paused runtime on
/// this thread stands still). The call sees this thread's wall clock ([`crate::clock::now`]),
/// the schedule's virtual one: an operator's call reads it.
fn blocking<T: Send>(call: impl Future<Output = T> + Send) -> T {
    let now = crate::clock::now();
    std::thread::scope(|scope| {
        scope
            .spawn(move || {
                let _clock = crate::clock::simulate(now);
                REAL_TIME.block_on(call)
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// The schemas on one PostgreSQL database that schedules run in: one per schedule running at
/// once, each migrated once, emptied before each schedule, dropped at the end.
pub(crate) struct Schemas {
    url: String,
    free: Mutex<Vec<(String, Database)>>,
    made: Mutex<Vec<String>>,
}

/// The tables a schedule's ledger writes, emptied before each schedule.
const LEDGER_TABLES: &[&str] = &[
    "slack_once_claims",
    "slack_once_aliases",
    "slack_once_notes",
    "slack_once_state",
];

impl Schemas {
    /// Schemas on the database `url` names (`postgres://…`), made as schedules need them.
    pub(crate) fn on(url: &str) -> Self {
        Self {
            url: url.to_string(),
            free: Mutex::new(Vec::new()),
            made: Mutex::new(Vec::new()),
        }
    }

    fn admin(&self) -> Database {
        Database::connect(&self.url, 1).expect("Simulation::on_postgres: a PostgreSQL URL")
    }

    /// A schema of its own, empty, and the ledger on it (its clock the times each call passes,
    /// the schedule's virtual ones).
    fn take(self: &Arc<Self>) -> PostgresStore {
        let free = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let (schema, database) = match free {
            Some(taken) => taken,
            None => self.make(),
        };
        let empty = LEDGER_TABLES
            .iter()
            .map(|t| format!("DELETE FROM {t};"))
            .collect::<String>();
        blocking(async {
            database
                .client()
                .await
                .expect("a connection to the schedule's schema")
                .batch_execute(&empty)
                .await
                .expect("the schedule's schema emptied")
        });
        PostgresStore {
            ledger: PostgresLedger::new(database.clone()),
            schema: Some((schema, database)),
            schemas: self.clone(),
        }
    }

    fn make(&self) -> (String, Database) {
        let schema = format!("explore_{}", uuid::Uuid::new_v4().simple());
        let separator = if self.url.contains('?') { '&' } else { '?' };
        let url = format!("{}{separator}options=-c%20search_path%3D{schema}", self.url);
        let admin = self.admin();
        let database = Database::connect(&url, 2)
            .expect("Simulation::on_postgres: a PostgreSQL URL")
            .with_clock(Clock::Given);
        blocking(async {
            admin
                .client()
                .await
                .expect("Simulation::on_postgres: PostgreSQL answers")
                .batch_execute(&format!("CREATE SCHEMA {schema}"))
                .await
                .expect("a schema for the simulation");
            database.migrate().await.expect("the schema migrated");
        });
        self.made
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(schema.clone());
        (schema, database)
    }
}

impl Drop for Schemas {
    fn drop(&mut self) {
        let made = std::mem::take(&mut *self.made.lock().unwrap_or_else(|e| e.into_inner()));
        if made.is_empty() {
            return;
        }
        self.free.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let admin = self.admin();
        let drop_all = made
            .iter()
            .map(|s| format!("DROP SCHEMA IF EXISTS {s} CASCADE;"))
            .collect::<String>();
        let dropped = blocking(async {
            admin
                .client()
                .await
                .map_err(|e| e.to_string())?
                .batch_execute(&drop_all)
                .await
                .map_err(|e| e.to_string())
        });
        if let Err(e) = dropped {
            tracing::warn!(error = %e, "explore: the simulation's schemas were left");
        }
    }
}

/// A schedule's ledger on PostgreSQL: [`PostgresLedger`] on a schema of its own, each call made
/// on [`REAL_TIME`] with the schedule's thread blocked. Its schema goes back to the others when
/// it is dropped.
pub(crate) struct PostgresStore {
    ledger: PostgresLedger,
    schema: Option<(String, Database)>,
    schemas: Arc<Schemas>,
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        if let Some(schema) = self.schema.take() {
            self.schemas
                .free
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(schema);
        }
    }
}

impl PostgresStore {
    /// The rows of `statement` (its one parameter `key`, if any): the explorer's reads of the
    /// claims' table, which no method of the store makes.
    fn query(&self, statement: &str, key: Option<&str>) -> Vec<tokio_postgres::Row> {
        let database = self.ledger.database();
        blocking(async {
            let client = database
                .client()
                .await
                .expect("a connection to the schedule's schema");
            match key {
                Some(key) => client.query(statement, &[&key]).await,
                None => client.query(statement, &[]).await,
            }
            .expect("the explorer's read of the schedule's schema")
        })
    }
}

impl SimStore for PostgresStore {
    fn journal(&self, key: &EventId) -> Option<Journal> {
        let rows = self.query(
            "SELECT journal FROM slack_once_claims WHERE key = $1",
            Some(key.as_str()),
        );
        let column: serde_json::Value = rows.first()?.get(0);
        let records = column.as_object()?;
        Some(
            records
                .iter()
                .filter_map(|(step, record)| {
                    Some((
                        step.parse().ok()?,
                        record.as_str().and_then(StepRecord::decode)?,
                    ))
                })
                .collect(),
        )
    }

    fn statuses(&self) -> Vec<(EventId, Status)> {
        self.query(
            "SELECT key, status FROM slack_once_claims ORDER BY key COLLATE \"C\"",
            None,
        )
        .iter()
        .filter_map(|row| {
            let key = EventId::try_from(row.get::<_, String>(0)).ok()?;
            Some((key, Status::parse(row.get(1))?))
        })
        .collect()
    }

    fn end_lapsed(&self, key: &EventId, code: &str, now_ms: u64) -> bool {
        // The operator's call reads the wall clock: the schedule's, at `now_ms`.
        let _clock = crate::clock::simulate(UNIX_EPOCH + Duration::from_millis(now_ms));
        blocking(self.ledger.end_lapsed(key, code)).expect("the redrive's end of a lapsed claim")
    }

    fn at_end(self: Arc<Self>, now_ms: u64) -> Arc<dyn AtEnd> {
        let errors = self
            .query(
                "SELECT key, error FROM slack_once_claims WHERE error IS NOT NULL",
                None,
            )
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        let mut states = BTreeMap::new();
        for row in self.query("SELECT key FROM slack_once_state", None) {
            let Ok(key) = EventId::try_from(row.get::<_, String>(0)) else {
                continue;
            };
            if let Some(item) = blocking(self.ledger.state(&key, now_ms))
                .expect("the explorer's read of a state value")
            {
                states.insert(key.as_str().to_string(), item);
            }
        }
        // The schema goes back to the others: the checks read this copy.
        Arc::new(Snapshot { states, errors })
    }
}

/// What a schedule's PostgreSQL ledger held at its end, as the checks read it.
struct Snapshot {
    states: BTreeMap<String, StateItem>,
    errors: BTreeMap<String, String>,
}

impl AtEnd for Snapshot {
    fn state(&self, key: &EventId, _now_ms: u64) -> Result<Option<StateItem>, LedgerError> {
        Ok(self.states.get(key.as_str()).cloned())
    }

    fn error(&self, key: &EventId) -> Option<String> {
        self.errors.get(key.as_str()).cloned()
    }
}

#[async_trait]
impl Ledger for PostgresStore {
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<Claim, LedgerError> {
        blocking(self.ledger.claim(request))
    }

    async fn begin_step(
        &self,
        held: Held<'_>,
        step: u32,
        intent: &StepRecord,
        settled: &[Settled],
        now_ms: u64,
    ) -> Result<(), LedgerError> {
        blocking(self.ledger.begin_step(held, step, intent, settled, now_ms))
    }

    async fn alias(&self, request: &AliasRequest<'_>) -> Result<Alias, LedgerError> {
        blocking(self.ledger.alias(request))
    }

    async fn set_note(
        &self,
        key: &EventId,
        value: &str,
        at_ms: u64,
        expires_at_s: u64,
    ) -> Result<(), LedgerError> {
        blocking(self.ledger.set_note(key, value, at_ms, expires_at_s))
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
        blocking(
            self.ledger
                .replace_note(key, read, value, at_ms, expires_at_s, now_ms),
        )
    }

    async fn note(&self, key: &EventId, now_ms: u64) -> Result<Option<String>, LedgerError> {
        blocking(self.ledger.note(key, now_ms))
    }

    async fn state(&self, key: &EventId, now_ms: u64) -> Result<Option<StateItem>, LedgerError> {
        blocking(self.ledger.state(key, now_ms))
    }

    async fn state_changes(&self, key: &EventId) -> Result<BTreeMap<String, u64>, LedgerError> {
        blocking(self.ledger.state_changes(key))
    }

    async fn put_state(
        &self,
        key: &EventId,
        write: &StateWrite<'_>,
        now_ms: u64,
    ) -> Result<StatePut, LedgerError> {
        blocking(self.ledger.put_state(key, write, now_ms))
    }

    async fn finish(
        &self,
        held: Held<'_>,
        to: &Finish,
        settled: &[Settled],
        now_ms: u64,
    ) -> Result<(), LedgerError> {
        blocking(self.ledger.finish(held, to, settled, now_ms))
    }
}
