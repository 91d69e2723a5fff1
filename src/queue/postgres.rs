//! The work queue on PostgreSQL (`DATABASE_URL`), where there is no SQS: SQS's semantics as the
//! worker relies on them, in two tables (`0003_queue.sql`) shared by every queue of the
//! database, each message under its queue's name.
//!
//! - `send` is one `INSERT`, committed (durable) before it returns; a body larger than
//!   [`MAX_MESSAGE_BYTES`] is refused before anything is sent.
//! - `receive` is one statement: `UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT
//!   n) RETURNING …`, so two receivers never hold one message at once; each message taken is
//!   hidden for the visibility asked, its receive count goes up by one, and it gets a new
//!   receipt token (`gen_random_uuid()`: PostgreSQL 13 or later). Every time is judged on one
//!   clock (the database's, or the one given: `Database::now_param`). With nothing visible it
//!   polls again (100 ms, doubling to 1 s) until the wait is over: PostgreSQL's LISTEN needs a
//!   session of its own, which PgBouncer in transaction mode does not give, and a message
//!   whose visibility lapses notifies nobody.
//! - A receipt handle names the message and the receive that gave it (`<id>:<token>`): only
//!   the handle of the message's latest receive deletes it or changes its visibility, as SQS's
//!   does; an earlier one changes nothing ([`ReceiptOutcome::Stale`]).
//! - SQS's redrive policy: the same statement moves a message whose receives are spent
//!   (`max_receives`) and that is visible again to the dead-letter table, with its body, its
//!   count and when, instead of receiving it. [`PostgresQueue::redrive_dead_letters`] moves dead
//!   letters back, their count reset, in one statement (a dead letter is moved back once).
//!
//! Round trips (each statement one; a pool's connection is checked out without one):
//! - `send`: 1 (2 where the connection broke and it is sent again: the queue is at least once,
//!   so the second copy is one more delivery, which the ledger answers once);
//! - `receive`: 1 per poll (2 where the connection broke: a first run whose answer was lost
//!   left what it took hidden for its visibility, one receive spent, as below); a poll that
//!   finds nothing is followed by another after 100 ms, 200, 400, 800, then every second
//!   until `wait` is over (an idle worker: about 1 a second);
//! - `delete`, `change_visibility`: 1 (2 where the connection broke: a second run changes
//!   nothing more);
//! - `dead_letters`, `redrive_dead_letters`, `expire_dead_letters`, `depth`: 1.
//!
//! A receive whose caller goes away mid-statement (a worker killed or stopped mid-poll) may
//! still take messages, as SQS's open long poll does: each is hidden for the visibility that
//! receive asked for (the local worker asks for a few seconds) with one receive spent.

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;
use tokio_postgres::types::Type;

use super::{MAX_VISIBILITY, QueueError, Received, WorkQueue, refuse_too_large};
use crate::postgres::{DB_NOW_MS, Database, DatabaseError, from_ms};

#[cfg(doc)]
use super::MAX_MESSAGE_BYTES;

/// SQS's most messages a receive returns.
pub const MAX_BATCH: usize = 10;

/// A receive that finds nothing polls again this long after, doubling each time.
pub const POLL_FIRST: Duration = Duration::from_millis(100);

/// The longest pause between two polls of one receive.
pub const POLL_MOST: Duration = Duration::from_secs(1);

/// At most this many messages whose receives are spent go to the dead letters per receive.
const DEAD_LETTERS_PER_RECEIVE: i64 = 100;

/// What a call naming a receipt handle did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReceiptOutcome {
    /// The handle is the message's latest receive's: done.
    Applied,
    /// Nothing changed: the handle is not the latest receive's of a message of this queue (it
    /// was received again since, or deleted, or dead-lettered), or not a handle at all.
    Stale,
}

/// One message of the dead-letter table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The message's id, as its receives gave it (kept through a redrive).
    pub message_id: String,
    /// The body, as sent.
    pub body: String,
    /// The receives it was given, all spent.
    pub receive_count: u32,
    /// When it was sent (epoch ms).
    pub sent_at_ms: u64,
    /// When it was moved to the dead letters (epoch ms).
    pub dead_at_ms: u64,
}

/// Which dead letters [`PostgresQueue::redrive_dead_letters`] moves back.
#[derive(Clone, Copy, Debug)]
pub enum Redrive<'a> {
    /// Every dead letter of the queue.
    All,
    /// These, by message id (an id that names no dead letter of the queue is passed over).
    Messages(&'a [String]),
}

/// The work queue named `name` on PostgreSQL (see the module's documentation).
#[derive(Clone, Debug)]
pub struct PostgresQueue {
    database: Database,
    name: String,
    max_receives: u32,
}

impl PostgresQueue {
    /// The queue `name` in `database` (migrated: `Database::migrate`), its messages moved to
    /// the dead letters once received `max_receives` times (at least 1) and visible again.
    pub fn new(database: Database, name: impl Into<String>, max_receives: u32) -> Self {
        Self {
            database,
            name: name.into(),
            max_receives: max_receives.max(1),
        }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many receives a message is given before it goes to the dead letters.
    pub fn max_receives(&self) -> u32 {
        self.max_receives
    }

    /// One poll at `now_ms` (on a given clock; the database's otherwise): up to `max` visible
    /// messages (at most 10, as SQS), each hidden for `visibility` (at most SQS's 12 h),
    /// after the messages whose receives are spent and that are visible again are moved to
    /// the dead letters.
    pub async fn receive_at(
        &self,
        max: usize,
        visibility: Duration,
        now_ms: u64,
    ) -> Result<Vec<Received>, QueueError> {
        let sql = format!(
            "WITH now AS MATERIALIZED (SELECT coalesce($2::bigint, {DB_NOW_MS}) AS ms),
             spent AS (
               DELETE FROM slack_once_queue WHERE id IN (
                 SELECT id FROM slack_once_queue
                 WHERE queue = $1 AND receive_count >= $3
                   AND visible_at_ms <= (SELECT ms FROM now)
                 ORDER BY id LIMIT $6
                 FOR UPDATE SKIP LOCKED)
               RETURNING id, queue, body, sent_at_ms, receive_count),
             buried AS (
               INSERT INTO slack_once_queue_dead_letters
                 (id, queue, body, sent_at_ms, receive_count, dead_at_ms)
               SELECT id, queue, body, sent_at_ms, receive_count, (SELECT ms FROM now) FROM spent
               RETURNING id, receive_count),
             taken AS (
               UPDATE slack_once_queue
               SET receive_count = receive_count + 1,
                   visible_at_ms = (SELECT ms FROM now) + $5,
                   receipt = gen_random_uuid()::text
               WHERE id IN (
                 SELECT id FROM slack_once_queue
                 WHERE queue = $1 AND receive_count < $3
                   AND visible_at_ms <= (SELECT ms FROM now)
                 ORDER BY id LIMIT $4
                 FOR UPDATE SKIP LOCKED)
               RETURNING id, receipt, body, receive_count)
             SELECT id, receipt, body, receive_count FROM taken
             UNION ALL SELECT id, NULL, NULL, receive_count FROM buried"
        );
        let now = self.database.now_param(now_ms);
        let max_receives = i32::try_from(self.max_receives).unwrap_or(i32::MAX);
        let limit = max.clamp(1, MAX_BATCH) as i64;
        let visibility_ms = visibility.min(MAX_VISIBILITY).as_millis() as i64;
        // Sent once more where the connection broke: a first run whose answer was lost left
        // what it took hidden for its visibility, a receive spent, as an abandoned receive does.
        let rows = self
            .database
            .run(|client| {
                let sql = &sql;
                async move {
                    client
                        .query_typed(
                            sql,
                            &[
                                (&self.name, Type::TEXT),
                                (&now, Type::INT8),
                                (&max_receives, Type::INT4),
                                (&limit, Type::INT8),
                                (&visibility_ms, Type::INT8),
                                (&DEAD_LETTERS_PER_RECEIVE, Type::INT8),
                            ],
                        )
                        .await
                }
            })
            .await
            .map_err(unavailable)?;
        let mut received = Vec::with_capacity(rows.len());
        for row in rows {
            let id: i64 = row.get(0);
            let count = u32::try_from(row.get::<_, i32>(3)).unwrap_or(0);
            match row.get::<_, Option<String>>(1) {
                Some(token) => received.push(Received {
                    message_id: id.to_string(),
                    receipt_handle: format!("{id}:{token}"),
                    body: body_text(row.get(2)),
                    receive_count: count,
                }),
                None => tracing::warn!(
                    queue = self.name,
                    message_id = id,
                    receive_count = count,
                    "a message's receives are spent: moved to the dead letters"
                ),
            }
        }
        received.sort_by_key(|m| m.message_id.parse::<i64>().unwrap_or(0));
        Ok(received)
    }

    /// Deletes the message `receipt_handle` names, if it is its latest receive's.
    pub async fn delete_received(
        &self,
        receipt_handle: &str,
    ) -> Result<ReceiptOutcome, QueueError> {
        let Some((id, token)) = parse_handle(receipt_handle) else {
            return Ok(ReceiptOutcome::Stale);
        };
        let deleted = self
            .database
            .run(|client| {
                let (id, token) = (&id, &token);
                async move {
                    client
                        .execute_typed(
                            "DELETE FROM slack_once_queue WHERE queue = $1 AND id = $2 AND receipt = $3",
                            &[
                                (&self.name, Type::TEXT),
                                (id, Type::INT8),
                                (token, Type::TEXT),
                            ],
                        )
                        .await
                }
            })
            .await
            .map_err(unavailable)?;
        Ok(outcome(deleted))
    }

    /// Makes the message `receipt_handle` names visible `after` from `now_ms` (at most SQS's
    /// 12 h), if it is its latest receive's; its receive count unchanged. As SQS's, a handle
    /// whose visibility has lapsed still works until the message is received again.
    pub async fn change_visibility_at(
        &self,
        receipt_handle: &str,
        after: Duration,
        now_ms: u64,
    ) -> Result<ReceiptOutcome, QueueError> {
        let Some((id, token)) = parse_handle(receipt_handle) else {
            return Ok(ReceiptOutcome::Stale);
        };
        let sql = format!(
            "UPDATE slack_once_queue SET visible_at_ms = coalesce($4::bigint, {DB_NOW_MS}) + $5
             WHERE queue = $1 AND id = $2 AND receipt = $3"
        );
        let now = self.database.now_param(now_ms);
        let after_ms = after.min(MAX_VISIBILITY).as_millis() as i64;
        let changed = self
            .database
            .run(|client| {
                let (sql, id, token) = (&sql, &id, &token);
                async move {
                    client
                        .execute_typed(
                            sql,
                            &[
                                (&self.name, Type::TEXT),
                                (id, Type::INT8),
                                (token, Type::TEXT),
                                (&now, Type::INT8),
                                (&after_ms, Type::INT8),
                            ],
                        )
                        .await
                }
            })
            .await
            .map_err(unavailable)?;
        Ok(outcome(changed))
    }

    /// Messages not deleted yet, visible or not (the dead letters apart).
    pub async fn depth(&self) -> Result<u64, QueueError> {
        let rows = self
            .database
            .query(
                "SELECT count(*) FROM slack_once_queue WHERE queue = $1",
                &[(&self.name, Type::TEXT)],
            )
            .await
            .map_err(unavailable)?;
        Ok(rows.first().map_or(0, |row| from_ms(row.get::<_, i64>(0))))
    }

    /// Up to `limit` of the queue's dead letters, the longest dead first. A message goes
    /// there when a receive finds its receives spent and its visibility over.
    pub async fn dead_letters(&self, limit: usize) -> Result<Vec<DeadLetter>, QueueError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .database
            .query(
                "SELECT id, body, receive_count, sent_at_ms, dead_at_ms
                         FROM slack_once_queue_dead_letters WHERE queue = $1
                         ORDER BY dead_at_ms, id LIMIT $2",
                &[(&self.name, Type::TEXT), (&limit, Type::INT8)],
            )
            .await
            .map_err(unavailable)?;
        Ok(rows
            .into_iter()
            .map(|row| DeadLetter {
                message_id: row.get::<_, i64>(0).to_string(),
                body: body_text(row.get(1)),
                receive_count: u32::try_from(row.get::<_, i32>(2)).unwrap_or(0),
                sent_at_ms: from_ms(row.get(3)),
                dead_at_ms: from_ms(row.get(4)),
            })
            .collect())
    }

    /// Moves `which` dead letters back to the queue, visible at once, their receive counts
    /// reset (SQS's redrive: a message redriven has its receives again), in one statement: a
    /// dead letter two redrives name is moved back by one of them. The ids moved.
    pub async fn redrive_dead_letters(
        &self,
        which: Redrive<'_>,
    ) -> Result<Vec<String>, QueueError> {
        let ids: Option<Vec<i64>> = match which {
            Redrive::All => None,
            Redrive::Messages(ids) => Some(ids.iter().filter_map(|id| id.parse().ok()).collect()),
        };
        let rows = self
            .database
            .run(|client| {
                let ids = &ids;
                async move {
                    client
                        .query_typed(
                            "WITH moved AS (
                               DELETE FROM slack_once_queue_dead_letters
                               WHERE queue = $1 AND ($2::bigint[] IS NULL OR id = ANY($2))
                               RETURNING id, queue, body, sent_at_ms)
                             INSERT INTO slack_once_queue
                               (id, queue, body, sent_at_ms, visible_at_ms, receive_count)
                             SELECT id, queue, body, sent_at_ms, 0, 0 FROM moved
                             RETURNING id",
                            &[(&self.name, Type::TEXT), (ids, Type::INT8_ARRAY)],
                        )
                        .await
                }
            })
            .await
            .map_err(unavailable)?;
        let mut moved: Vec<i64> = rows.iter().map(|row| row.get(0)).collect();
        moved.sort_unstable();
        Ok(moved.into_iter().map(|id| id.to_string()).collect())
    }

    /// Removes the queue's dead letters dead for longer than `older_than` at `now_ms` (as SQS
    /// drops a dead-letter queue's messages after its retention, 14 days in the template; the
    /// ledger forgets a request long before, and `redrive` refuses what it forgot). How many.
    pub async fn expire_dead_letters(
        &self,
        older_than: Duration,
        now_ms: u64,
    ) -> Result<u64, QueueError> {
        let sql = format!(
            "DELETE FROM slack_once_queue_dead_letters
             WHERE queue = $1 AND dead_at_ms < coalesce($2::bigint, {DB_NOW_MS}) - $3"
        );
        let now = self.database.now_param(now_ms);
        let older_than_ms = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
        self.database
            .run(|client| {
                let sql = &sql;
                async move {
                    client
                        .execute_typed(
                            sql,
                            &[
                                (&self.name, Type::TEXT),
                                (&now, Type::INT8),
                                (&older_than_ms, Type::INT8),
                            ],
                        )
                        .await
                }
            })
            .await
            .map_err(unavailable)
    }
}

#[async_trait]
impl WorkQueue for PostgresQueue {
    async fn send(&self, body: &str) -> Result<(), QueueError> {
        refuse_too_large(body)?;
        let sql = format!(
            "INSERT INTO slack_once_queue (queue, body, sent_at_ms)
             VALUES ($1, $2, coalesce($3::bigint, {DB_NOW_MS}))"
        );
        let now = self.database.now_param(crate::clock::now_ms());
        let body = body.as_bytes();
        self.database
            .run(|client| {
                let sql = &sql;
                async move {
                    client
                        .execute_typed(
                            sql,
                            &[
                                (&self.name, Type::TEXT),
                                (&body, Type::BYTEA),
                                (&now, Type::INT8),
                            ],
                        )
                        .await
                }
            })
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<Received>, QueueError> {
        let deadline = Instant::now() + wait.min(super::sqs::MAX_WAIT);
        let mut pause = POLL_FIRST;
        loop {
            let received = self
                .receive_at(max, visibility, crate::clock::now_ms())
                .await?;
            let left = deadline.saturating_duration_since(Instant::now());
            if !received.is_empty() || left.is_zero() {
                return Ok(received);
            }
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(POLL_MOST);
        }
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        if self.delete_received(receipt_handle).await? == ReceiptOutcome::Stale {
            // As SQS's DeleteMessage with an old handle: nothing deleted, no error.
            tracing::info!(
                queue = self.name,
                "a delete with the handle of an earlier receive: the message was received \
                 again since (or is gone), left to its latest receive"
            );
        }
        Ok(())
    }

    async fn change_visibility(
        &self,
        receipt_handle: &str,
        after: Duration,
    ) -> Result<(), QueueError> {
        let changed = self
            .change_visibility_at(receipt_handle, after, crate::clock::now_ms())
            .await?;
        if changed == ReceiptOutcome::Stale {
            tracing::info!(
                queue = self.name,
                "a visibility change with the handle of an earlier receive: the message was \
                 received again since (or is gone), left to its latest receive"
            );
        }
        Ok(())
    }
}

/// A receipt handle's message id and receive token (`None`: not a handle this queue gave).
fn parse_handle(handle: &str) -> Option<(i64, String)> {
    let (id, token) = handle.split_once(':')?;
    Some((id.parse().ok()?, token.to_string())).filter(|(_, token)| !token.is_empty())
}

fn outcome(rows: u64) -> ReceiptOutcome {
    match rows {
        0 => ReceiptOutcome::Stale,
        _ => ReceiptOutcome::Applied,
    }
}

/// A body read back: it was sent as a `&str`, so it is UTF-8.
fn body_text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn unavailable(error: DatabaseError) -> QueueError {
    QueueError::Unavailable(Box::new(error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_names_its_message_and_its_receive_and_anything_else_is_no_handle() {
        assert_eq!(parse_handle("42:abc"), Some((42, "abc".to_string())));
        assert_eq!(parse_handle("42:"), None);
        assert_eq!(parse_handle("x:abc"), None);
        assert_eq!(parse_handle("42"), None);
        assert_eq!(parse_handle(""), None);
    }
}
