//! Aliases, notes and the app's state: one statement each; a state change with its request's
//! record on the claim in the same statement (one transaction).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use tokio_postgres::types::Type;

use super::PostgresLedger;
use super::rows::{after, changes_of};
use crate::ledger::{
    Alias, AliasRequest, LedgerError, NotePut, RequestChange, StateItem, StatePut, StateWrite,
    Status, other_app, state_writers_after,
};
use crate::postgres::{DB_NOW_MS, from_ms};
use crate::slack::envelope::EventId;

/// How many times an alias's statement is sent when it neither wrote the alias nor read what
/// stopped it (as [`super::claim::CLAIM_STATEMENTS`]).
const ALIAS_STATEMENTS: u32 = 5;

/// An alias is written where it is absent, past its TTL or already this message's (its TTL
/// never moved back), and no other app's; else the alias as it is, read in the statement.
static ALIAS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH now AS (SELECT coalesce($1::bigint, {DB_NOW_MS}) AS ms),
         written AS (
           INSERT INTO slack_once_aliases AS a (key, alias_of, expires_at, app)
           SELECT $2, $3, now.ms + $4, $5 FROM now
           ON CONFLICT (key) DO UPDATE SET
             alias_of = excluded.alias_of,
             expires_at = greatest(a.expires_at, excluded.expires_at),
             app = coalesce(excluded.app, a.app)
           WHERE (a.app IS NULL OR excluded.app IS NULL OR a.app = excluded.app)
             AND (a.alias_of = excluded.alias_of OR a.expires_at <= (SELECT ms FROM now))
           RETURNING 1)
         SELECT EXISTS (SELECT 1 FROM written), (SELECT ms FROM now), a.alias_of, a.expires_at,
                a.app
         FROM (SELECT 1) AS one LEFT JOIN slack_once_aliases a ON a.key = $2"
    )
});

pub(super) async fn alias(
    ledger: &PostgresLedger,
    request: &AliasRequest<'_>,
) -> Result<Alias, LedgerError> {
    let now = ledger.database.now_param(request.now_ms);
    let (key, of) = (request.alias.as_str(), request.of.as_str());
    let ttl_for = after(request.expires_at_s.saturating_mul(1000), request.now_ms);
    for _ in 0..ALIAS_STATEMENTS {
        let rows = ledger
            .query(
                &ALIAS,
                &[
                    (&now, Type::INT8),
                    (&key, Type::TEXT),
                    (&of, Type::TEXT),
                    (&ttl_for, Type::INT8),
                    (&request.app_id, Type::TEXT),
                ],
            )
            .await?;
        let Some(row) = rows.first() else { continue };
        if row.get::<_, bool>(0) {
            return Ok(Alias::Ours);
        }
        let db_now: i64 = row.get(1);
        let found_of: Option<&str> = row.get(2);
        let expires_at: Option<i64> = row.get(3);
        if let Some(app) = other_app(row.get(4), request.app_id) {
            return Ok(Alias::OtherApp {
                app_id: app.to_string(),
            });
        }
        if let (Some(found), Some(expires_at)) = (found_of, expires_at)
            && found != of
            && expires_at > db_now
        {
            return Ok(Alias::CopyOf {
                key: found.to_string(),
            });
        }
        // Read older than written (an alias committed after the statement began): again.
    }
    Err(LedgerError::Unavailable(
        format!("the alias {key} was neither written nor read in {ALIAS_STATEMENTS} statements")
            .into(),
    ))
}

static SET_NOTE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH now AS (SELECT coalesce($1::bigint, {DB_NOW_MS}) AS ms)
         INSERT INTO slack_once_notes AS n (key, value, written_at, expires_at)
         SELECT $2, $3, $4, now.ms + $5 FROM now
         ON CONFLICT (key) DO UPDATE SET
           value = excluded.value, written_at = excluded.written_at,
           expires_at = excluded.expires_at
         WHERE NOT (n.written_at > excluded.written_at AND n.expires_at > (SELECT ms FROM now))"
    )
});

pub(super) async fn set_note(
    ledger: &PostgresLedger,
    key: &EventId,
    value: &str,
    at_ms: u64,
    expires_at_s: u64,
) -> Result<(), LedgerError> {
    // The note's own time is its writer's now, as the in-memory ledger reads it.
    let now = ledger.database.now_param(at_ms);
    let key = key.as_str();
    let at = crate::postgres::ms(at_ms);
    let ttl_for = after(expires_at_s.saturating_mul(1000), at_ms);
    ledger
        .query(
            &SET_NOTE,
            &[
                (&now, Type::INT8),
                (&key, Type::TEXT),
                (&value, Type::TEXT),
                (&at, Type::INT8),
                (&ttl_for, Type::INT8),
            ],
        )
        .await?;
    Ok(())
}

/// A note read absent: written where none is live.
static NOTE_WHERE_ABSENT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH now AS (SELECT coalesce($1::bigint, {DB_NOW_MS}) AS ms)
         INSERT INTO slack_once_notes AS n (key, value, written_at, expires_at)
         SELECT $2, $3, $4, now.ms + $5 FROM now
         ON CONFLICT (key) DO UPDATE SET
           value = excluded.value, written_at = excluded.written_at,
           expires_at = excluded.expires_at
         WHERE n.expires_at <= (SELECT ms FROM now)
         RETURNING 1"
    )
});

/// A note read as `$6`: replaced where it is still that, live.
static NOTE_WHERE_READ: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH now AS (SELECT coalesce($1::bigint, {DB_NOW_MS}) AS ms)
         UPDATE slack_once_notes SET
           value = $3, written_at = $4, expires_at = now.ms + $5
         FROM now
         WHERE key = $2 AND value = $6 AND expires_at > now.ms
         RETURNING 1"
    )
});

pub(super) async fn replace_note(
    ledger: &PostgresLedger,
    key: &EventId,
    read: Option<&str>,
    value: &str,
    at_ms: u64,
    expires_at_s: u64,
    now_ms: u64,
) -> Result<NotePut, LedgerError> {
    let now = ledger.database.now_param(now_ms);
    let key = key.as_str();
    let at = crate::postgres::ms(at_ms);
    let ttl_for = after(expires_at_s.saturating_mul(1000), now_ms);
    // Sent again after its answer was lost, it finds the note changed (by itself): a
    // conflict, as the trait says; the caller reads again.
    let rows = ledger
        .run(|client| async move {
            let base: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 5] = [
                (&now, Type::INT8),
                (&key, Type::TEXT),
                (&value, Type::TEXT),
                (&at, Type::INT8),
                (&ttl_for, Type::INT8),
            ];
            match &read {
                None => client.query_typed(&NOTE_WHERE_ABSENT, &base).await,
                Some(read) => {
                    let mut params = base.to_vec();
                    params.push((read, Type::TEXT));
                    client.query_typed(&NOTE_WHERE_READ, &params).await
                }
            }
        })
        .await?;
    Ok(if rows.is_empty() {
        NotePut::Conflict
    } else {
        NotePut::Written
    })
}

static NOTE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT value FROM slack_once_notes
         WHERE key = $2 AND expires_at > coalesce($1::bigint, {DB_NOW_MS})"
    )
});

pub(super) async fn note(
    ledger: &PostgresLedger,
    key: &EventId,
    now_ms: u64,
) -> Result<Option<String>, LedgerError> {
    let now = ledger.database.now_param(now_ms);
    let key = key.as_str();
    let rows = ledger
        .query(&NOTE, &[(&now, Type::INT8), (&key, Type::TEXT)])
        .await?;
    Ok(rows.first().map(|row| row.get(0)))
}

static STATE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT value, version, writers FROM slack_once_state
         WHERE key = $2 AND expires_at > coalesce($1::bigint, {DB_NOW_MS})"
    )
});

pub(super) async fn state(
    ledger: &PostgresLedger,
    key: &EventId,
    now_ms: u64,
) -> Result<Option<StateItem>, LedgerError> {
    let now = ledger.database.now_param(now_ms);
    let key = key.as_str();
    let rows = ledger
        .query(&STATE, &[(&now, Type::INT8), (&key, Type::TEXT)])
        .await?;
    Ok(rows.first().map(|row| StateItem {
        value: row.get(0),
        version: from_ms(row.get(1)),
        writers: row.get(2),
    }))
}

pub(super) async fn state_changes(
    ledger: &PostgresLedger,
    key: &EventId,
) -> Result<BTreeMap<String, u64>, LedgerError> {
    let key = key.as_str();
    let rows = ledger
        .query(
            "SELECT state_changes FROM slack_once_claims WHERE key = $1",
            &[(&key, Type::TEXT)],
        )
        .await?;
    Ok(rows
        .first()
        .map(|row| changes_of(&row.get(0)))
        .unwrap_or_default())
}

/// The state value's write, as a statement's `put` step (`$1` now, `$2` key, `$3` value, `$4`
/// the version read, `$5` writers, `$6` how long it lives): a first version where none is live,
/// else where the version read is still there, live. `gate`: a further condition (the
/// request's claim, where the change is recorded).
fn state_put(expected: u64, gate: &str) -> String {
    if expected == 0 {
        format!(
            "INSERT INTO slack_once_state AS s (key, value, version, writers, expires_at)
             SELECT $2, $3, 1, $5, now.ms + $6 FROM now WHERE {gate}
             ON CONFLICT (key) DO UPDATE SET
               value = excluded.value, version = 1, writers = excluded.writers,
               expires_at = excluded.expires_at
             WHERE s.expires_at <= (SELECT ms FROM now)
             RETURNING version"
        )
    } else {
        format!(
            "UPDATE slack_once_state SET
               value = $3, version = $4 + 1, writers = $5, expires_at = now.ms + $6
             FROM now
             WHERE key = $2 AND version = $4 AND expires_at > now.ms AND {gate}
             RETURNING version"
        )
    }
}

/// The write of a state value alone.
fn put_alone(expected: u64) -> String {
    format!(
        "WITH now AS (SELECT coalesce($1::bigint, {DB_NOW_MS}) AS ms),
         put AS ({})
         SELECT (SELECT version FROM put)",
        state_put(expected, "true")
    )
}

/// The write of a state value with its request's record (`$7` the claim's key, `$8` its owner,
/// `$9` the change's id): the claim's row locked first; the value written only where the claim
/// is the owner's, in progress, and does not record the change; the change recorded with the
/// version written. The record's findings come back with it.
fn put_with_record(expected: u64) -> String {
    format!(
        "WITH now AS (SELECT coalesce($1::bigint, {DB_NOW_MS}) AS ms),
         claim AS (
           SELECT owner, status, state_changes -> $9 AS made FROM slack_once_claims
           WHERE key = $7 FOR UPDATE),
         put AS ({}),
         record AS (
           UPDATE slack_once_claims c
           SET state_changes = c.state_changes || jsonb_build_object($9::text, put.version)
           FROM put WHERE c.key = $7
           RETURNING 1)
         SELECT (SELECT version FROM put), claim.owner, claim.status, claim.made,
                (SELECT count(*) FROM record)
         FROM (SELECT 1) AS one LEFT JOIN claim ON true",
        state_put(
            expected,
            "EXISTS (SELECT 1 FROM claim WHERE owner = $8 AND status = 'in_progress' \
             AND made IS NULL)"
        )
    )
}

pub(super) async fn put_state(
    ledger: &PostgresLedger,
    key: &EventId,
    write: &StateWrite<'_>,
    now_ms: u64,
) -> Result<StatePut, LedgerError> {
    let now = ledger.database.now_param(now_ms);
    let key = key.as_str();
    let expected = crate::postgres::ms(write.expected);
    // The writers kept are the ones read with `expected`: the condition on the version makes
    // sure they are still the value's.
    let writers = state_writers_after(write.read_writers.to_vec(), write.writer);
    let ttl_for = after(write.expires_at_s.saturating_mul(1000), now_ms);
    let value = write.value;
    let Some(request) = write.request else {
        let sql = put_alone(write.expected);
        let rows = ledger
            .run(|client| {
                let (sql, writers) = (&sql, &writers);
                async move {
                    client
                        .query_typed(
                            sql,
                            &[
                                (&now, Type::INT8),
                                (&key, Type::TEXT),
                                (&value, Type::TEXT),
                                (&expected, Type::INT8),
                                (writers, Type::TEXT_ARRAY),
                                (&ttl_for, Type::INT8),
                            ],
                        )
                        .await
                }
            })
            .await?;
        let version: Option<i64> = rows.first().and_then(|row| row.get(0));
        return Ok(match version {
            Some(version) => StatePut::Written {
                version: from_ms(version),
            },
            None => StatePut::Conflict,
        });
    };
    let sql = put_with_record(write.expected);
    let (claim_key, owner) = (request.held.event_id.as_str(), request.held.owner.as_str());
    let change = request.change;
    // Sent again after its answer was lost, the claim records the change: made already.
    let rows = ledger
        .run(|client| {
            let (sql, writers) = (&sql, &writers);
            async move {
                client
                    .query_typed(
                        sql,
                        &[
                            (&now, Type::INT8),
                            (&key, Type::TEXT),
                            (&value, Type::TEXT),
                            (&expected, Type::INT8),
                            (writers, Type::TEXT_ARRAY),
                            (&ttl_for, Type::INT8),
                            (&claim_key, Type::TEXT),
                            (&owner, Type::TEXT),
                            (&change, Type::TEXT),
                        ],
                    )
                    .await
            }
        })
        .await?;
    recorded(rows.first(), &request)
}

/// What a state write with its request's record came to: as the in-memory ledger decides it,
/// the record first (made already, whoever holds the claim now; else the owner's claim in
/// progress), then the version.
fn recorded(
    row: Option<&tokio_postgres::Row>,
    request: &RequestChange<'_>,
) -> Result<StatePut, LedgerError> {
    let not_owner = || LedgerError::NotOwner {
        event_id: request.held.event_id.clone(),
    };
    let row = row.ok_or_else(not_owner)?;
    let made: Option<serde_json::Value> = row.get(3);
    if let Some(version) = made.as_ref().and_then(serde_json::Value::as_u64) {
        return Ok(StatePut::MadeAlready { version });
    }
    let owner: Option<&str> = row.get(1);
    let status = row.get::<_, Option<&str>>(2).and_then(Status::parse);
    if owner != Some(request.held.owner.as_str()) || status != Some(Status::InProgress) {
        return Err(not_owner());
    }
    let version: Option<i64> = row.get(0);
    Ok(match version {
        Some(version) => StatePut::Written {
            version: from_ms(version),
        },
        None => StatePut::Conflict,
    })
}
