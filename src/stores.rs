//! The stores a configuration names, opened: the ledger, the installation store and the work
//! queue, each on DynamoDB and SQS (`DEDUP_TABLE`, `WORK_QUEUE_URL`), on PostgreSQL
//! (`DATABASE_URL`, `WORK_QUEUE_NAME`), or in this process's memory. The one place that knows
//! which implementation each seam gets; everything above holds the seams' traits.

use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, DatabaseConfig, OAuthConfig, WorkQueueConfig};
use crate::ledger::{DynamoLedger, Ledger, MemoryLedger, PostgresLedger};
use crate::postgres::{Database, DatabaseError};
use crate::queue::sqs::CallBudget;
use crate::queue::{PostgresQueue, SqsQueue, WorkQueue};
use crate::workspaces::seal::Seal;
use crate::workspaces::{DynamoInstallations, InstallationStore, PostgresInstallations};

/// How many times a process tries to ready the database as it starts.
const START_TRIES: u32 = 5;

/// How often a process on PostgreSQL deletes the rows past their TTL (PostgreSQL has no TTL
/// of its own), and how many at a time: small batches, so that no delete holds many locks.
pub const EXPIRED_ROWS_EVERY: Duration = Duration::from_secs(600);
/// See [`EXPIRED_ROWS_EVERY`].
pub const EXPIRED_ROWS_BATCH: usize = 500;
/// How long a dead letter of a queue in PostgreSQL is kept (as the SQS dead-letter queue's
/// retention in the template, 14 days): past it the ledger has forgotten the request, and
/// `redrive` refuses it.
pub const DEAD_LETTERS_KEPT: Duration = Duration::from_secs(14 * 24 * 3600);

/// The ledger, in multi-workspace mode the installation store, and on PostgreSQL the
/// database's pool (which the work queue shares).
pub(crate) struct Stores {
    pub(crate) ledger: Arc<dyn Ledger>,
    pub(crate) installations: Option<Arc<dyn InstallationStore>>,
    pub(crate) database: Option<Database>,
}

/// Opens the stores `config` names. On PostgreSQL, the schema is migrated first
/// (`DATABASE_MIGRATE=on`, the default) or checked (`off`), and expired rows are deleted in the
/// background for as long as the process runs.
pub(crate) async fn open(config: &Config) -> Result<Stores, DatabaseError> {
    if let Some(settings) = &config.database {
        let database = open_database(settings).await?;
        let ledger = Arc::new(PostgresLedger::new(database.clone()));
        let dead_letters = match &config.work_queue {
            Some(WorkQueueConfig::Postgres { name }) => Some(PostgresQueue::new(
                database.clone(),
                name.clone(),
                config.max_receives,
            )),
            _ => None,
        };
        let installations = match &config.oauth {
            Some(oauth) => Some(Arc::new(
                PostgresInstallations::new(database.clone(), oauth.client_id.clone())
                    .with_seal(Arc::new(seal_of(oauth, "the database").await)),
            )),
            None => None,
        };
        let cleanup = Cleanup {
            ledger: ledger.clone(),
            dead_letters,
            installations: installations.clone(),
        };
        tokio::spawn(cleanup.every(EXPIRED_ROWS_EVERY));
        return Ok(Stores {
            ledger,
            installations: installations.map(|i| i as Arc<dyn InstallationStore>),
            database: Some(database),
        });
    }
    if let Some(table) = &config.dedup_table {
        tracing::info!(table = %table, "ledger: DynamoDB");
        let client = crate::ledger::dynamo::client_from_env().await;
        let installations = match &config.oauth {
            Some(oauth) => {
                let store = DynamoInstallations::new(
                    client.clone(),
                    table.clone(),
                    oauth.client_id.clone(),
                )
                .with_seal(Arc::new(seal_of(oauth, "the table").await));
                Some(Arc::new(store) as Arc<dyn InstallationStore>)
            }
            None => None,
        };
        return Ok(Stores {
            ledger: Arc::new(DynamoLedger::new(client, table.clone())),
            installations,
            database: None,
        });
    }
    if config.answers_synchronously() {
        tracing::info!(
            "ledger: in memory (this process only; set DATABASE_URL or DEDUP_TABLE to share one)"
        );
    }
    Ok(Stores {
        ledger: Arc::new(MemoryLedger::new()),
        installations: None,
        database: None,
    })
}

/// The database `settings` names, its schema migrated (or checked) for this release.
pub(crate) async fn open_database(settings: &DatabaseConfig) -> Result<Database, DatabaseError> {
    let database = Database::connect(settings.url.expose(), settings.pool_size)?;
    // A connection broken while starting (a failover, a proxy's restart) is tried again; a
    // schema behind the release, or a refusal, is not.
    let mut tries = 0;
    loop {
        tries += 1;
        let ready = match settings.migrate {
            true => database.migrate().await.map(drop),
            false => database.require_schema().await,
        };
        match ready {
            Err(DatabaseError::Unavailable(error)) if tries < START_TRIES => {
                tracing::warn!(
                    error = %crate::errors::error_chain(error.as_ref()),
                    "database: not ready at start, trying again in a second"
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            other => break other?,
        }
    }
    tracing::info!(
        database = %database.place(),
        pool = settings.pool_size,
        "ledger: PostgreSQL"
    );
    if let Ok(Some(standbys @ 1..)) = database.asynchronous_standbys().await {
        tracing::warn!(
            standbys,
            "the database's standbys replicate asynchronously: a failover to one of them can \
             lose claims this bot acted on, and a request would be answered twice (set \
             synchronous_standby_names; docs/postgres.md)"
        );
    }
    Ok(database)
}

/// Deferred mode's work queue, as `config` names it, on `database` where it is PostgreSQL's
/// (`None`: not deferred).
pub(crate) async fn work_queue(
    config: &Config,
    database: Option<&Database>,
    budget: CallBudget,
) -> Option<Arc<dyn WorkQueue>> {
    match sqs_queue(config, budget).await {
        Some(queue) => Some(queue),
        None => postgres_queue(config, database?),
    }
}

/// Deferred mode's SQS queue (`WORK_QUEUE_URL`), if that is the queue.
pub(crate) async fn sqs_queue(config: &Config, budget: CallBudget) -> Option<Arc<dyn WorkQueue>> {
    match &config.work_queue {
        Some(WorkQueueConfig::Sqs { url }) => {
            Some(Arc::new(SqsQueue::from_env(url.clone(), budget).await))
        }
        _ => None,
    }
}

/// Deferred mode's queue in PostgreSQL (`WORK_QUEUE_NAME`), on `database`, if that is the
/// queue.
pub(crate) fn postgres_queue(config: &Config, database: &Database) -> Option<Arc<dyn WorkQueue>> {
    match &config.work_queue {
        Some(WorkQueueConfig::Postgres { name }) => Some(Arc::new(PostgresQueue::new(
            database.clone(),
            name.clone(),
            config.max_receives,
        ))),
        _ => None,
    }
}

/// How the installations' tokens are sealed at rest in `place`: with KMS
/// (`SLACK_TOKEN_KEY_ID`), with the operator's own keys (`SLACK_TOKEN_KEYS`), or not at all
/// (said in the log).
async fn seal_of(oauth: &OAuthConfig, place: &str) -> Seal {
    match (&oauth.token_key_id, &oauth.token_keys) {
        (Some(key), _) => {
            tracing::info!(key = %key, "installations' tokens sealed in {place} with KMS");
            Seal::kms_from_env(key.clone()).await
        }
        (None, Some(keys)) => {
            tracing::info!(
                key = %keys.current_id(),
                keys = %keys.ids().join(", "),
                "installations' tokens sealed in {place} with the token keys given (AES-256-GCM)"
            );
            Seal::local(keys.clone())
        }
        (None, None) => {
            tracing::warn!(
                "no key seals the installations' tokens: they are kept in {place} as they are, \
                 readable by anyone who can read it (set SLACK_TOKEN_KEY_ID to a KMS key to \
                 seal them, or SLACK_TOKEN_KEYS to keys of your own)"
            );
            Seal::none()
        }
    }
}

/// What a process on PostgreSQL deletes now and then, since PostgreSQL has no TTL: the
/// ledger's rows past their TTL, its queue's dead letters older than [`DEAD_LETTERS_KEPT`], its
/// app's spent OAuth states and pacing rows past theirs.
struct Cleanup {
    ledger: Arc<PostgresLedger>,
    dead_letters: Option<PostgresQueue>,
    installations: Option<Arc<PostgresInstallations>>,
}

impl Cleanup {
    /// Cleans up every `period` until the process ends; a failure is logged and tried again at
    /// the next turn.
    async fn every(self, period: Duration) {
        let mut every = tokio::time::interval(period);
        loop {
            every.tick().await;
            self.turn().await;
        }
    }

    async fn turn(&self) {
        let now = crate::clock::now_ms();
        if let Some(queue) = &self.dead_letters {
            let deleted = queue.expire_dead_letters(DEAD_LETTERS_KEPT, now).await;
            logged("old dead letters", deleted);
        }
        if let Some(store) = &self.installations {
            let deleted = store.sweep_expired(now, EXPIRED_ROWS_BATCH as i64).await;
            logged("expired OAuth states and pacing rows", deleted);
        }
        // Each table a batch at a time, until none is left.
        let deleted = self.ledger.delete_expired(now, EXPIRED_ROWS_BATCH).await;
        logged("the ledger's expired rows", deleted);
    }
}

fn logged<E: std::error::Error + 'static>(what: &str, deleted: Result<u64, E>) {
    match deleted {
        Ok(0) => {}
        Ok(deleted) => tracing::info!(deleted, "database: {what} deleted"),
        Err(error) => tracing::warn!(
            error = %crate::errors::error_chain(&error),
            "database: {what} not deleted (tried again later)"
        ),
    }
}
