//! PostgreSQL (`DATABASE_URL`): where a deployment has no DynamoDB, the one database that holds
//! the ledger, the app's state, the installations and the work queue. This module is what those
//! stores share: the pool of connections, the clock every lease is judged on (the database's),
//! how a statement is sent (and sent again), and the schema's versioned migrations.
//!
//! Statements go as unnamed prepared statements with their parameters' types
//! (`query_typed`): one round trip each, nothing named that outlives its statement, so PgBouncer
//! in transaction mode needs nothing of its own. A transaction holds its connection until it
//! ends, as PgBouncer's transaction mode expects.

use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use tokio_postgres::Row;
use tokio_postgres::config::SslMode;
use tokio_postgres::types::{ToSql, Type};

/// The schema version this release needs: every migration up to it applied
/// ([`Database::migrate`]). A later release's migrations only add (tables, columns with
/// defaults), so this release runs beside it on one database during a rolling deploy.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// The migrations, in order: version `n` is the `n`th (from 1). Never edit one that shipped;
/// add the next.
const MIGRATIONS: &[(&str, &str)] = &[
    ("ledger", include_str!("migrations/0001_ledger.sql")),
    (
        "installations",
        include_str!("migrations/0002_installations.sql"),
    ),
    ("work queue", include_str!("migrations/0003_queue.sql")),
];

/// The table that records which migrations were applied.
const SCHEMA_TABLE: &str = "slack_once_schema";

/// How long a statement (with its connection's checkout) may take before the call fails as
/// unavailable: a claim's answer must come well inside Slack's 3 s.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long opening a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How many connections a process keeps to the database by default (`DATABASE_POOL_SIZE`).
pub const DEFAULT_POOL_SIZE: usize = 8;

/// The database's clock, in milliseconds since the epoch, as SQL: the wall clock at the
/// statement (`clock_timestamp()`), not the transaction's start.
pub const DB_NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// Whose clock a store's leases and TTLs are judged on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// The database's: every instance compares leases on one clock, whatever its own says.
    /// What a deployment runs on.
    Database,
    /// The times each call passes in: the test kit's virtual time, and the contract tests,
    /// which move time by hand.
    Given,
}

/// Why the database could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    /// `DATABASE_URL` is not a PostgreSQL URL the client understands.
    #[error("DATABASE_URL is not a PostgreSQL connection URL: {0}")]
    BadUrl(String),
    /// The database could not be reached, or refused or failed the statement.
    #[error("the database is unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The database's schema is older than this release needs: migrations are missing.
    #[error(
        "the database's schema is at version {found}, this release needs {needed}: run \
         `slack-once create-table` (with DATABASE_URL) to migrate it"
    )]
    SchemaBehind {
        /// The version the database holds (0: none).
        found: i32,
        /// The version this release needs.
        needed: i32,
    },
}

impl From<tokio_postgres::Error> for DatabaseError {
    fn from(e: tokio_postgres::Error) -> Self {
        DatabaseError::Unavailable(Box::new(e))
    }
}

/// One process's connections to the database.
#[derive(Clone)]
pub struct Database {
    pool: Pool,
    clock: Clock,
    place: String,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("place", &self.place)
            .field("clock", &self.clock)
            .finish()
    }
}

impl Database {
    /// A pool of up to `pool_size` connections to the database `url` names
    /// (`postgres://user:password@host:port/database?sslmode=require`), judged on the
    /// database's clock. Connects lazily: the first statement opens the first connection.
    /// `sslmode=require` connects over TLS, checking the server's certificate against the
    /// Mozilla roots; `prefer` (the default) and `disable` connect without TLS.
    pub fn connect(url: &str, pool_size: usize) -> Result<Self, DatabaseError> {
        let (url, tls) = libpq_tls_of(url)?;
        let mut config = tokio_postgres::Config::from_str(&url)
            .map_err(|e| DatabaseError::BadUrl(e.to_string()))?;
        config.connect_timeout(CONNECT_TIMEOUT);
        config.keepalives_idle(Duration::from_secs(30));
        if config.get_application_name().is_none() {
            config.application_name("slack-once");
        }
        let place = describe(&config);
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = if config.get_ssl_mode() == SslMode::Require {
            let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(tls.root_cert)?);
            Manager::from_config(config, tls, manager_config)
        } else {
            config.ssl_mode(SslMode::Disable);
            Manager::from_config(config, tokio_postgres::NoTls, manager_config)
        };
        let pool = Pool::builder(manager)
            .max_size(pool_size.max(1))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(STATEMENT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| DatabaseError::BadUrl(e.to_string()))?;
        Ok(Self {
            pool,
            clock: Clock::Database,
            place,
        })
    }

    /// The same pool, its leases and TTLs judged on `clock`.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Whose clock leases and TTLs are judged on.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// The time a statement compares with, as its parameter: `None` on the database's clock
    /// (the statement reads [`DB_NOW_MS`] through `coalesce`), `given_ms` on a given clock.
    pub fn now_param(&self, given_ms: u64) -> Option<i64> {
        match self.clock {
            Clock::Database => None,
            Clock::Given => Some(ms(given_ms)),
        }
    }

    /// Where the database is, for the logs: host, port and database, never the password.
    pub fn place(&self) -> &str {
        &self.place
    }

    /// A connection from the pool, within [`STATEMENT_TIMEOUT`].
    pub async fn client(&self) -> Result<Object, DatabaseError> {
        self.pool
            .get()
            .await
            .map_err(|e| DatabaseError::Unavailable(Box::new(e)))
    }

    /// Runs `call` on a connection of the pool within [`STATEMENT_TIMEOUT`], and once more on
    /// another where the first failed in a way a second try may not (the connection broke, the
    /// transaction was chosen to fail a serialization or a deadlock). A call sent again must be
    /// one whose second run finds the first's effect and says so (every store's writes carry
    /// their writer's token for this): the first's answer may have been lost after it committed.
    pub async fn run<T, F, Fut>(&self, call: F) -> Result<T, DatabaseError>
    where
        F: Fn(Object) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let mut tries = 0;
        loop {
            tries += 1;
            let attempt = async {
                let client = self.client().await?;
                call(client).await.map_err(DatabaseError::from)
            };
            let result = match tokio::time::timeout(STATEMENT_TIMEOUT, attempt).await {
                Ok(result) => result,
                Err(elapsed) => Err(DatabaseError::Unavailable(Box::new(elapsed))),
            };
            match result {
                Err(e) if tries < 2 && worth_another_try(&e) => {
                    // The connection that broke is back among the idle ones before its end is
                    // seen (a server's FATAL comes before it closes the socket), and a restart
                    // or a failover broke the others too: the second try opens a new one.
                    if !chosen_to_fail(&e) {
                        self.pool.retain(|_, _| false);
                    }
                    tracing::debug!(error = %crate::errors::error_chain(&e), "database: trying again");
                }
                other => return other,
            }
        }
    }

    /// Runs `sql` with `params` (each with its type) as [`Database::run`] runs a call: one
    /// round trip, an unnamed statement; sent once more on another connection where the first
    /// broke, so only for statements whose second run recognises the first.
    pub async fn query(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, DatabaseError> {
        self.run(|client| async move { client.query_typed(sql, params).await })
            .await
    }

    /// Applies the migrations the database lacks, in order, one transaction each, under a lock
    /// that lets one process migrate at a time (two releases starting together wait for each
    /// other). The versions applied now.
    pub async fn migrate(&self) -> Result<Vec<i32>, DatabaseError> {
        let mut client = self.client().await?;
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (
                   version integer PRIMARY KEY,
                   name text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"
            ))
            .await
            .or_else(ignore_concurrent_create)?;
        let mut applied = Vec::new();
        for (index, (name, sql)) in MIGRATIONS.iter().enumerate() {
            let version = index as i32 + 1;
            let transaction = client.transaction().await?;
            transaction
                .execute(
                    "SELECT pg_advisory_xact_lock(hashtext('slack-once migrations'))",
                    &[],
                )
                .await?;
            let done = transaction
                .query_opt(
                    &format!("SELECT 1 FROM {SCHEMA_TABLE} WHERE version = $1"),
                    &[&version],
                )
                .await?;
            if done.is_some() {
                continue;
            }
            transaction.batch_execute(sql).await?;
            transaction
                .execute(
                    &format!("INSERT INTO {SCHEMA_TABLE} (version, name) VALUES ($1, $2)"),
                    &[&version, name],
                )
                .await?;
            transaction.commit().await?;
            tracing::info!(version, migration = %name, "database: migrated");
            applied.push(version);
        }
        Ok(applied)
    }

    /// The standbys streaming from the server that replicate asynchronously, where none
    /// replicates synchronously: a failover to one of them can lose commits the bot acted on
    /// (docs/postgres.md). `None` where the server does not say (a managed service, a role
    /// without `pg_monitor`): its own failover is then what the operator chose.
    pub async fn asynchronous_standbys(&self) -> Result<Option<i64>, DatabaseError> {
        let client = self.client().await?;
        let row = client
            .query_typed_one(
                "SELECT count(*) FILTER (WHERE sync_state = 'async'),
                        count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')),
                        count(*) FILTER (WHERE sync_state IS NULL)
                 FROM pg_stat_replication",
                &[],
            )
            .await?;
        let (asynchronous, synchronous, unknown): (i64, i64, i64) =
            (row.get(0), row.get(1), row.get(2));
        Ok(match (asynchronous, synchronous, unknown) {
            (_, _, 1..) => None,
            (n, 0, _) => Some(n.max(0)),
            _ => Some(0),
        })
    }

    /// The schema's version: the highest migration applied (0: none).
    pub async fn schema_version(&self) -> Result<i32, DatabaseError> {
        let client = self.client().await?;
        // Unnamed statements, as every call outside a transaction (PgBouncer's transaction mode).
        let exists = client
            .query_typed_one(
                "SELECT to_regclass($1) IS NOT NULL",
                &[(&SCHEMA_TABLE, Type::TEXT)],
            )
            .await?
            .get::<_, bool>(0);
        if !exists {
            return Ok(0);
        }
        let row = client
            .query_typed_one(
                &format!("SELECT coalesce(max(version), 0) FROM {SCHEMA_TABLE}"),
                &[],
            )
            .await?;
        Ok(row.get(0))
    }

    /// Fails with [`DatabaseError::SchemaBehind`] unless every migration this release needs is
    /// applied (a later release's, beyond them, are fine).
    pub async fn require_schema(&self) -> Result<(), DatabaseError> {
        let found = self.schema_version().await?;
        if found < SCHEMA_VERSION {
            return Err(DatabaseError::SchemaBehind {
                found,
                needed: SCHEMA_VERSION,
            });
        }
        Ok(())
    }
}

/// A time in epoch milliseconds as PostgreSQL's `bigint`.
pub fn ms(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A `bigint` of epoch milliseconds back (a negative one, never written, as 0).
pub fn from_ms(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// Whether a failed call may be sent once more: the connection broke (whatever the statement
/// did, a second run recognises), the call timed out, or the server chose the transaction to
/// fail (a serialization failure or a deadlock: rolled back, nothing done).
fn worth_another_try(error: &DatabaseError) -> bool {
    let DatabaseError::Unavailable(source) = error else {
        return false;
    };
    let Some(error) = source.downcast_ref::<tokio_postgres::Error>() else {
        // The pool's checkout or the timeout.
        return true;
    };
    match error.code() {
        Some(code) => {
            *code == tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE
                || *code == tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED
                || *code == tokio_postgres::error::SqlState::ADMIN_SHUTDOWN
                || *code == tokio_postgres::error::SqlState::CANNOT_CONNECT_NOW
        }
        None => true,
    }
}

/// Whether the server chose the transaction to fail (a serialization failure or a deadlock:
/// its connection is sound).
fn chosen_to_fail(error: &DatabaseError) -> bool {
    let DatabaseError::Unavailable(source) = error else {
        return false;
    };
    source
        .downcast_ref::<tokio_postgres::Error>()
        .and_then(tokio_postgres::Error::code)
        .is_some_and(|code| {
            *code == tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE
                || *code == tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED
        })
}

/// Two processes creating the schema table at once: one of them meets the other's row in the
/// catalog (PostgreSQL's `CREATE TABLE IF NOT EXISTS` is not safe against a concurrent one).
fn ignore_concurrent_create(error: tokio_postgres::Error) -> Result<(), tokio_postgres::Error> {
    match error.code() {
        Some(code) if *code == tokio_postgres::error::SqlState::UNIQUE_VIOLATION => Ok(()),
        _ => Err(error),
    }
}

fn describe(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let database = config.get_dbname().unwrap_or("(the user's)");
    format!("{host}:{port}/{database}")
}

/// What libpq's URL says of TLS beyond what the client reads itself.
struct LibpqTls {
    /// `sslrootcert`: the certificate authorities (PEM) that sign the server's certificate
    /// (a managed service's own: Amazon RDS's, Cloud SQL's), instead of the Mozilla roots.
    root_cert: Option<String>,
}

/// `url` as the client reads it, with libpq's TLS parameters it does not read taken out:
/// `sslrootcert=FILE`, and `sslmode=verify-ca` / `verify-full`, which are `require` here (the
/// server's certificate and name are always checked over TLS).
fn libpq_tls_of(url: &str) -> Result<(String, LibpqTls), DatabaseError> {
    let mut tls = LibpqTls { root_cert: None };
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), tls));
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sslrootcert", file)) => {
                let file = form_urlencoded::parse(format!("f={file}").as_bytes())
                    .next()
                    .map(|(_, v)| v.into_owned())
                    .unwrap_or_default();
                tls.root_cert = Some(file);
            }
            Some(("sslmode", "verify-ca" | "verify-full")) => kept.push("sslmode=require"),
            _ => kept.push(pair),
        }
    }
    let url = match kept.is_empty() {
        true => base.to_string(),
        false => format!("{base}?{}", kept.join("&")),
    };
    Ok((url, tls))
}

fn tls_config(root_cert: Option<String>) -> Result<rustls::ClientConfig, DatabaseError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match root_cert {
        Some(file) => {
            let unreadable = |e: &dyn std::fmt::Display| {
                DatabaseError::BadUrl(format!("sslrootcert {file:?} is not readable PEM: {e}"))
            };
            let certs = CertificateDer::pem_file_iter(&file).map_err(|e| unreadable(&e))?;
            for cert in certs {
                let cert = cert.map_err(|e| unreadable(&e))?;
                roots.add(cert).map_err(|e| unreadable(&e))?;
            }
            if roots.is_empty() {
                return Err(unreadable(&"no certificate in it"));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    Ok(
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("ring supports TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_that_is_not_postgresql_is_refused_and_the_password_never_described() {
        assert!(matches!(
            Database::connect("mysql://x@y/z", 2),
            Err(DatabaseError::BadUrl(_))
        ));
        let database = Database::connect(
            "postgres://bot:hunter2@127.0.0.1:5433/slack?sslmode=disable",
            2,
        )
        .expect("a PostgreSQL URL");
        assert_eq!(database.place(), "127.0.0.1:5433/slack");
        assert!(!format!("{database:?}").contains("hunter2"));
    }

    #[test]
    fn libpqs_tls_parameters_are_read_and_an_unreadable_authority_refused() {
        let (url, tls) = libpq_tls_of(
            "postgres://u@h/d?sslmode=verify-full&sslrootcert=%2Fetc%2Frds.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(url, "postgres://u@h/d?sslmode=require&application_name=x");
        assert_eq!(tls.root_cert.as_deref(), Some("/etc/rds.pem"));
        assert!(matches!(
            Database::connect("postgres://u@h/d?sslmode=require&sslrootcert=/nonexistent", 1),
            Err(DatabaseError::BadUrl(why)) if why.contains("sslrootcert")
        ));
        let (url, tls) = libpq_tls_of("postgres://u@h/d").unwrap();
        assert_eq!((url.as_str(), tls.root_cert), ("postgres://u@h/d", None));
    }

    #[test]
    fn migrations_are_numbered_from_one_in_order() {
        assert_eq!(SCHEMA_VERSION as usize, MIGRATIONS.len());
        assert!(MIGRATIONS.iter().all(|(name, _)| !name.is_empty()));
    }
}
