//! The claim, a step's intent and the finish: one statement each, on the database's clock, every
//! later write conditioned on the owner's claim in progress.

use std::sync::LazyLock;

use tokio_postgres::Row;
use tokio_postgres::types::Type;

use super::PostgresLedger;
use super::rows::{EditParams, after, began_of, journal_of, looked_of, to_caller};
use crate::journal::record::{BeganWindow, Settled, StepRecord, with_began, with_looked};
use crate::ledger::{
    Blocked, Claim, ClaimRequest, Finish, Held, JournalEdit, LedgerError, Status, applied_already,
    existing_blocks_claim_ms, other_app,
};
use crate::postgres::{DB_NOW_MS, from_ms};

/// How many times a claim's statement is sent when it neither took the row nor could read it
/// (a claim committed by another transaction after the statement's snapshot was taken, whose
/// row the statement's conflict check saw but its read did not): the next statement sees it.
pub(super) const CLAIM_STATEMENTS: u32 = 5;

/// The claim: inserted where the key was never claimed; taken over (`DO UPDATE … WHERE`) where
/// the row counts as absent (past its TTL, released, failed but retryable, its lease ended) and
/// is no other app's, unless it is this owner's own claim in progress (a claim sent again:
/// left as it is); else the row as it is, read in the same statement. The journal, the began
/// windows (this claim's appended), the look-ups and the state changes go on across claims.
/// The row not taken is read locked (`FOR SHARE`): under READ COMMITTED a plain read gives the
/// statement's snapshot, so a claim sent again that waited on another's takeover would read
/// its own earlier claim and answer `Acquired` beside the claim that took it over; a locked
/// read gives the row as the takeover committed it.
static CLAIM: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH now AS (SELECT coalesce($1::bigint, {DB_NOW_MS}) AS ms),
         claimed AS (
           INSERT INTO slack_once_claims AS c
             (key, status, owner, lease_until, expires_at, attempts, app, team_id, retry_num,
              retry_reason, redelivery, created_at, claimed_at, began)
           SELECT $2, 'in_progress', $3, now.ms + $4, now.ms + $5, 1, $6, $7, $8, $9, $10,
                  now.ms, now.ms, jsonb_build_array($11::text)
           FROM now
           ON CONFLICT (key) DO UPDATE SET
             status = 'in_progress', owner = excluded.owner,
             lease_until = excluded.lease_until, expires_at = excluded.expires_at,
             attempts = c.attempts + 1, team_id = excluded.team_id,
             retry_num = excluded.retry_num, retry_reason = excluded.retry_reason,
             redelivery = excluded.redelivery, claimed_at = excluded.claimed_at,
             finished_at = NULL, error = NULL, retryable = false, ran = NULL,
             began = c.began || excluded.began
           WHERE NOT (c.owner = excluded.owner AND c.status = 'in_progress')
             AND (c.app IS NULL OR excluded.app IS NULL OR c.app = excluded.app)
             AND (c.expires_at <= excluded.claimed_at
                  OR c.status = 'released'
                  OR (c.status = 'failed' AND c.retryable)
                  OR (c.status = 'in_progress' AND c.lease_until <= excluded.claimed_at))
           RETURNING c.*),
         held AS (
           SELECT {COLUMNS} FROM slack_once_claims
           WHERE key = $2 AND NOT EXISTS (SELECT 1 FROM claimed)
           FOR SHARE)
         SELECT (SELECT ms FROM now) AS now_ms, {COLUMNS} FROM claimed
         UNION ALL
         SELECT (SELECT ms FROM now), {COLUMNS} FROM held"
    )
});

const COLUMNS: &str = "status, owner, lease_until, expires_at, attempts, app, error, retryable, \
                       ran, journal, looked, began";

/// A step's intent and the fates learnt, by the owner of the claim in progress; its began
/// windows end (what they stood for is recorded now).
const BEGIN_STEP: &str = "UPDATE slack_once_claims SET
       journal = (journal - $3::text[]) || $4::jsonb,
       looked = (looked - $5::text[]) || $6::jsonb,
       ran = coalesce($7::text[], ran),
       began = '[]'
     WHERE key = $1 AND owner = $2 AND status = 'in_progress'
     RETURNING 1";

/// The finish, as [`BEGIN_STEP`] with the status; where it wrote nothing, the row's owner and
/// status as they are (the same finish applied already, by this call's first run).
static FINISH: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH finished AS (
           UPDATE slack_once_claims SET
             journal = (journal - $3::text[]) || $4::jsonb,
             looked = (looked - $5::text[]) || $6::jsonb,
             ran = coalesce($7::text[], ran),
             began = '[]',
             status = $8, finished_at = coalesce($9::bigint, {DB_NOW_MS}),
             error = coalesce($10::text, error), retryable = coalesce($11::boolean, retryable)
           WHERE key = $1 AND owner = $2 AND status = 'in_progress'
           RETURNING 1)
         SELECT EXISTS (SELECT 1 FROM finished), c.owner, c.status
         FROM (SELECT 1) AS one LEFT JOIN slack_once_claims c ON c.key = $1"
    )
});

pub(super) async fn claim(
    ledger: &PostgresLedger,
    request: &ClaimRequest<'_>,
) -> Result<Claim, LedgerError> {
    let now = ledger.database.now_param(request.now_ms);
    let key = request.event_id.as_str();
    let owner = request.owner.as_str();
    let lease_for = after(request.lease_until_ms, request.now_ms);
    let ttl_for = after(request.expires_at_s.saturating_mul(1000), request.now_ms);
    let retry_num = request
        .retry_num
        .map(|n| i32::try_from(n).unwrap_or(i32::MAX));
    let window = BeganWindow {
        at_ms: request.now_ms,
        lease_until_ms: request.lease_until_ms,
        announces: true,
    }
    .encode();
    for _ in 0..CLAIM_STATEMENTS {
        let rows = ledger
            .run(|client| {
                let window = &window;
                async move {
                    client
                        .query_typed(
                            &CLAIM,
                            &[
                                (&now, Type::INT8),
                                (&key, Type::TEXT),
                                (&owner, Type::TEXT),
                                (&lease_for, Type::INT8),
                                (&ttl_for, Type::INT8),
                                (&request.app_id, Type::TEXT),
                                (&request.team_id, Type::TEXT),
                                (&retry_num, Type::INT4),
                                (&request.retry_reason, Type::TEXT),
                                (&request.redelivery_due, Type::BOOL),
                                (window, Type::TEXT),
                            ],
                        )
                        .await
                }
            })
            .await?;
        if let Some(claim) = rows.first().and_then(|row| claim_of(row, request)) {
            return Ok(claim);
        }
        crate::metrics::count("LedgerClaimStatementsAgain");
    }
    Err(LedgerError::Unavailable(
        format!(
            "the claim of {key} neither took its row nor read it in {CLAIM_STATEMENTS} statements"
        )
        .into(),
    ))
}

/// What the claim's row means: this owner's (taken now, or by this claim's first run whose
/// answer was lost), another app's, or what blocks it. `None`: the row counts as absent though
/// the statement did not take it (its read saw an older row than its write did): send it again.
fn claim_of(row: &Row, request: &ClaimRequest<'_>) -> Option<Claim> {
    let db_now: i64 = row.get("now_ms");
    let status = Status::parse(row.get("status"));
    let owner: &str = row.get("owner");
    let began: serde_json::Value = row.get("began");
    if status == Some(Status::InProgress) && owner == request.owner.as_str() {
        // Its own window is the last of the began windows.
        let journal: serde_json::Value = row.get("journal");
        let looked: serde_json::Value = row.get("looked");
        return Some(Claim::Acquired {
            attempt: u32::try_from(row.get::<_, i32>("attempts")).unwrap_or(1),
            journal: with_looked(
                with_began(journal_of(&journal), &began_of(&began, 1)),
                &looked_of(&looked),
            ),
        });
    }
    if let Some(app) = other_app(row.get("app"), request.app_id) {
        // Whatever its state: another app's claim is never taken over, nor its answer ours.
        return Some(Claim::OtherApp {
            app_id: app.to_string(),
        });
    }
    let lease_until: i64 = row.get("lease_until");
    let expires_at: i64 = row.get("expires_at");
    let Some(status) = status else {
        // A status this release does not read: the safe answer is "in progress" (no reply,
        // the next delivery tries again), as DynamoDB's ledger answers an unreadable item.
        return Some(Claim::InProgress {
            lease_until_ms: to_caller(lease_until, db_now, request.now_ms),
        });
    };
    let blocked = existing_blocks_claim_ms(
        status,
        from_ms(lease_until),
        from_ms(expires_at),
        from_ms(db_now),
        row.get("retryable"),
    )?;
    Some(match blocked {
        Blocked::Done => Claim::AlreadyDone {
            ran: row.get("ran"),
        },
        Blocked::Failed => Claim::AlreadyFailed {
            error: row.get::<_, Option<String>>("error").unwrap_or_default(),
        },
        Blocked::InProgress { .. } => Claim::InProgress {
            lease_until_ms: to_caller(lease_until, db_now, request.now_ms),
        },
    })
}

pub(super) async fn begin_step(
    ledger: &PostgresLedger,
    held: Held<'_>,
    step: u32,
    intent: &StepRecord,
    settled: &[Settled],
) -> Result<(), LedgerError> {
    let edit = EditParams::of(&JournalEdit::of(settled).with_intent(step, intent));
    let (key, owner) = (held.event_id.as_str(), held.owner.as_str());
    // Sent again, the same update finds the claim as it left it: idempotent.
    let rows = ledger
        .run(|client| {
            let edit = &edit;
            async move {
                client
                    .query_typed(
                        BEGIN_STEP,
                        &[
                            (&key, Type::TEXT),
                            (&owner, Type::TEXT),
                            (&edit.removed, Type::TEXT_ARRAY),
                            (&edit.records, Type::JSONB),
                            (&edit.looked_removed, Type::TEXT_ARRAY),
                            (&edit.looked, Type::JSONB),
                            (&edit.ran, Type::TEXT_ARRAY),
                        ],
                    )
                    .await
            }
        })
        .await?;
    if rows.is_empty() {
        return Err(LedgerError::NotOwner {
            event_id: held.event_id.clone(),
        });
    }
    Ok(())
}

pub(super) async fn finish(
    ledger: &PostgresLedger,
    held: Held<'_>,
    to: &Finish,
    settled: &[Settled],
    now_ms: u64,
) -> Result<(), LedgerError> {
    let edit = EditParams::of(&JournalEdit::of(settled));
    let (key, owner) = (held.event_id.as_str(), held.owner.as_str());
    let status = to.status().as_str();
    let now = ledger.database.now_param(now_ms);
    let (error, retryable) = match to {
        Finish::Failed { error, retryable } => (Some(error.as_str()), Some(*retryable)),
        Finish::Done | Finish::Released => (None, None),
    };
    let rows = ledger
        .run(|client| {
            let edit = &edit;
            async move {
                client
                    .query_typed(
                        &FINISH,
                        &[
                            (&key, Type::TEXT),
                            (&owner, Type::TEXT),
                            (&edit.removed, Type::TEXT_ARRAY),
                            (&edit.records, Type::JSONB),
                            (&edit.looked_removed, Type::TEXT_ARRAY),
                            (&edit.looked, Type::JSONB),
                            (&edit.ran, Type::TEXT_ARRAY),
                            (&status, Type::TEXT),
                            (&now, Type::INT8),
                            (&error, Type::TEXT),
                            (&retryable, Type::BOOL),
                        ],
                    )
                    .await
            }
        })
        .await?;
    let row = rows.first();
    if row.is_some_and(|row| row.get::<_, bool>(0)) {
        return Ok(());
    }
    let found_owner: Option<&str> = row.and_then(|row| row.get(1));
    let found_status = row
        .and_then(|row| row.get::<_, Option<&str>>(2))
        .and_then(Status::parse);
    if applied_already(found_owner, found_status, held.owner, to.status()) {
        // This finish, applied by its first run whose answer was lost.
        return Ok(());
    }
    Err(LedgerError::NotOwner {
        event_id: held.event_id.clone(),
    })
}
