//! What the service and the operator tools do to the ledger besides requests: rows past their
//! TTL deleted, claims abandoned in progress ended (`sweep`), a claim read and made retryable
//! (`redrive`).

use std::sync::LazyLock;
use std::time::Duration;

use tokio_postgres::types::Type;

use super::PostgresLedger;
use super::rows::{after, to_caller};
use crate::ledger::{LedgerError, Status};
use crate::postgres::{DB_NOW_MS, ms};
use crate::slack::envelope::EventId;

/// The tables whose rows expire, each deleted in batches.
const EXPIRING: [&str; 4] = [
    "slack_once_claims",
    "slack_once_aliases",
    "slack_once_notes",
    "slack_once_state",
];

pub(super) async fn delete_expired(
    ledger: &PostgresLedger,
    now_ms: u64,
    batch: usize,
) -> Result<u64, LedgerError> {
    let now = ledger.database.now_param(now_ms);
    let limit = i64::try_from(batch.max(1)).unwrap_or(i64::MAX);
    let mut deleted = 0;
    for table in EXPIRING {
        // Rows another call holds (a claim taking an expired row over) are skipped, and the
        // condition is read again on the row as locked.
        let sql = format!(
            "WITH now AS (SELECT coalesce($1::bigint, {DB_NOW_MS}) AS ms),
             gone AS (
               DELETE FROM {table} WHERE key IN (
                 SELECT key FROM {table}, now WHERE expires_at <= now.ms
                 ORDER BY expires_at LIMIT $2 FOR UPDATE OF {table} SKIP LOCKED)
               AND expires_at <= (SELECT ms FROM now)
               RETURNING 1)
             SELECT count(*) FROM gone"
        );
        loop {
            let sql = &sql;
            // Deleting what is gone already deletes nothing: safe to send again.
            let rows = ledger
                .query(sql, &[(&now, Type::INT8), (&limit, Type::INT8)])
                .await?;
            let count: i64 = rows.first().map_or(0, |row| row.get(0));
            deleted += count.max(0) as u64;
            if count < limit {
                break;
            }
        }
    }
    Ok(deleted)
}

/// What `sweep` asks of the ledger: the claims in progress whose lease ended more than
/// `older_than` ago ended `failed` with `code` (retryable: claimable as a lapsed claim is), but
/// for those of queued requests with receives left (for `redelivery_within` more) and those of
/// other apps than `app`.
#[derive(Clone, Copy, Debug)]
pub struct Sweep<'a> {
    /// How long past its lease a claim must be.
    pub older_than: Duration,
    /// How much longer a claim marked `redelivery` is left to the queue.
    pub redelivery_within: Duration,
    /// The app whose claims to end (`None`: only claims that name no app).
    pub app: Option<&'a str>,
    /// The failure code they end with.
    pub code: &'a str,
    /// List them only: nothing changed.
    pub dry_run: bool,
}

/// What a [`Sweep`] found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// The keys of the claims ended (with `dry_run`: that would be).
    pub keys: Vec<String>,
    /// Lapsed claims of other apps, passed over.
    pub other_apps: usize,
    /// Lapsed claims of queued requests with receives left, passed over.
    pub redelivery_due: usize,
    /// Lapsed claims looked at.
    pub lapsed: usize,
}

/// One statement: the lapsed claims read, those due ended (each row's condition read again as
/// it is locked: a takeover in between wins), and the counts.
static SWEEP: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH now AS (SELECT coalesce($1::bigint, {DB_NOW_MS}) AS ms),
         lapsed AS (
           SELECT key, app, redelivery AND lease_until >= now.ms - $2 - $3 AS left_to_queue
           FROM slack_once_claims, now
           WHERE status = 'in_progress' AND lease_until < now.ms - $2),
         due AS (
           SELECT key FROM lapsed
           WHERE NOT left_to_queue AND (app IS NULL OR app = $5)
           ORDER BY key LIMIT $7),
         ended AS (
           UPDATE slack_once_claims c SET
             status = 'failed', error = $4, retryable = true, finished_at = now.ms,
             redelivery = false
           FROM now
           WHERE NOT $6 AND c.key IN (SELECT key FROM due)
             AND c.status = 'in_progress' AND c.lease_until < now.ms - $2
             AND NOT (c.redelivery AND c.lease_until >= now.ms - $2 - $3)
           RETURNING c.key)
         SELECT
           coalesce((SELECT array_agg(key ORDER BY key) FROM ended), '{{}}'),
           coalesce((SELECT array_agg(key ORDER BY key) FROM due), '{{}}'),
           (SELECT count(*) FROM lapsed WHERE left_to_queue),
           (SELECT count(*) FROM lapsed
              WHERE NOT left_to_queue AND app IS NOT NULL AND app IS DISTINCT FROM $5),
           (SELECT count(*) FROM lapsed)"
    )
});

pub(super) async fn sweep_abandoned(
    ledger: &PostgresLedger,
    now_ms: u64,
    sweep: &Sweep<'_>,
) -> Result<Swept, LedgerError> {
    let now = ledger.database.now_param(now_ms);
    let older_than = ms(sweep.older_than.as_millis().try_into().unwrap_or(u64::MAX));
    let within = ms(sweep
        .redelivery_within
        .as_millis()
        .try_into()
        .unwrap_or(u64::MAX));
    let (code, app, dry_run) = (sweep.code, sweep.app, sweep.dry_run);
    // A batch at a time, so that no statement holds many rows or runs past its deadline (a
    // dry run lists them all).
    let batch: i64 = if dry_run { i64::MAX } else { SWEEP_BATCH };
    let mut swept: Option<Swept> = None;
    loop {
        // Sent again, it finds the claims it ended no longer in progress.
        let rows = ledger
            .query(
                &SWEEP,
                &[
                    (&now, Type::INT8),
                    (&older_than, Type::INT8),
                    (&within, Type::INT8),
                    (&code, Type::TEXT),
                    (&app, Type::TEXT),
                    (&dry_run, Type::BOOL),
                    (&batch, Type::INT8),
                ],
            )
            .await?;
        let Some(row) = rows.first() else { break };
        let count = |i: usize| row.get::<_, i64>(i).max(0) as usize;
        let keys: Vec<String> = row.get(if dry_run { 1 } else { 0 });
        for key in keys.iter().filter(|_| !dry_run) {
            tracing::info!(key = %key, "ledger: abandoned claim ended failed");
        }
        let more = !dry_run && keys.len() as i64 >= batch;
        match &mut swept {
            Some(swept) => swept.keys.extend(keys),
            // What the first batch saw of the others stands for the run.
            None => {
                swept = Some(Swept {
                    keys,
                    redelivery_due: count(2),
                    other_apps: count(3),
                    lapsed: count(4),
                })
            }
        }
        if !more {
            break;
        }
    }
    Ok(swept.unwrap_or_default())
}

/// How many claims one statement of a sweep ends at most.
const SWEEP_BATCH: i64 = 500;

/// A claim as the operator tools read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRecord {
    /// Its status.
    pub status: Status,
    /// A `failed` claim that a redriven copy may claim again.
    pub retryable: bool,
    /// The failure's code, for a `failed` claim.
    pub error: Option<String>,
    /// When its lease ends (epoch ms, this process's clock).
    pub lease_until_ms: u64,
    /// When it counts as absent (epoch ms, this process's clock).
    pub expires_at_ms: u64,
    /// The Slack app whose claim it is (`None`: anyone's).
    pub app_id: Option<String>,
    /// A queued request's claim with receives left ([`crate::ledger::ClaimRequest::redelivery_due`]).
    pub redelivery: bool,
}

static CLAIM_RECORD: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT coalesce($1::bigint, {DB_NOW_MS}), status, retryable, error, lease_until,
                expires_at, app, redelivery
         FROM slack_once_claims WHERE key = $2"
    )
});

pub(super) async fn claim_record(
    ledger: &PostgresLedger,
    key: &EventId,
) -> Result<Option<ClaimRecord>, LedgerError> {
    let caller_now = crate::clock::now_ms();
    let now = ledger.database.now_param(caller_now);
    let key = key.as_str();
    let rows = ledger
        .query(&CLAIM_RECORD, &[(&now, Type::INT8), (&key, Type::TEXT)])
        .await?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let db_now: i64 = row.get(0);
    let status: &str = row.get(1);
    let Some(status) = Status::parse(status) else {
        return Err(LedgerError::Unavailable(
            format!("the claim of {key} has a status this release does not read: {status}").into(),
        ));
    };
    Ok(Some(ClaimRecord {
        status,
        retryable: row.get(2),
        error: row.get(3),
        lease_until_ms: to_caller(row.get(4), db_now, caller_now),
        expires_at_ms: to_caller(row.get(5), db_now, caller_now),
        app_id: row.get(6),
        redelivery: row.get(7),
    }))
}

static MAKE_RETRYABLE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE slack_once_claims SET
           retryable = true,
           expires_at = greatest(expires_at, coalesce($1::bigint, {DB_NOW_MS}) + $3)
         WHERE key = $2 AND status = 'failed'
         RETURNING 1"
    )
});

pub(super) async fn make_retryable(
    ledger: &PostgresLedger,
    key: &EventId,
    expires_at_ms: u64,
) -> Result<bool, LedgerError> {
    let caller_now = crate::clock::now_ms();
    let now = ledger.database.now_param(caller_now);
    let key = key.as_str();
    let ttl_for = after(expires_at_ms, caller_now);
    // Sent again, it finds the claim retryable already, its TTL as far: the same.
    let rows = ledger
        .query(
            &MAKE_RETRYABLE,
            &[
                (&now, Type::INT8),
                (&key, Type::TEXT),
                (&ttl_for, Type::INT8),
            ],
        )
        .await?;
    Ok(!rows.is_empty())
}

static END_LAPSED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH now AS (SELECT coalesce($1::bigint, {DB_NOW_MS}) AS ms)
         UPDATE slack_once_claims SET
           status = 'failed', error = $3, retryable = true, finished_at = now.ms,
           redelivery = false
         FROM now
         WHERE key = $2 AND status = 'in_progress' AND lease_until <= now.ms
         RETURNING 1"
    )
});

pub(super) async fn end_lapsed(
    ledger: &PostgresLedger,
    key: &EventId,
    code: &str,
) -> Result<bool, LedgerError> {
    let now = ledger.database.now_param(crate::clock::now_ms());
    let key = key.as_str();
    // Sent again, it finds the claim ended: `false`, and the first run's end stands.
    let rows = ledger
        .query(
            &END_LAPSED,
            &[(&now, Type::INT8), (&key, Type::TEXT), (&code, Type::TEXT)],
        )
        .await?;
    Ok(!rows.is_empty())
}
