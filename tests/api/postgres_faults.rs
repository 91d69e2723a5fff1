//! Faults on the PostgreSQL stores that a single statement's snapshot or a pooler in front of
//! the server bring about: a statement that waits for another transaction's commit and reads
//! the row as it was before it, and statements whose names outlive one transaction.

use std::sync::Arc;
use std::time::Duration;

use slack_once::ledger::contract::{LEASE, NOW, request};
use slack_once::ledger::{Claim, Ledger, OwnerToken, PostgresLedger};
use slack_once::postgres::Database;
use slack_once::queue::{PostgresQueue, WorkQueue};
use slack_once::slack::envelope::EventId;

use crate::helpers::*;

fn id(s: &str) -> EventId {
    EventId::try_from(s.to_string()).unwrap()
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn a_claim_sent_again_while_another_takes_it_over_answers_the_takeover_not_its_own_claim() {
    let (_, database) = fresh_schema().await;
    let ledger = Arc::new(PostgresLedger::new(database.clone()));
    let (e, a) = (id("EvResentClaim"), OwnerToken::random());
    // A's claim commits; its answer is lost, and A sends it again once A's lease has lapsed.
    assert!(matches!(
        ledger.claim(&request(&e, &a, NOW)).await.unwrap(),
        Claim::Acquired { attempt: 1, .. }
    ));
    // Meanwhile B takes the lapsed claim over: its transaction has written, not committed.
    let b_lease_until = NOW + LEASE + 1 + LEASE;
    let mut other = database.client().await.unwrap();
    let takeover = other.transaction().await.unwrap();
    takeover
        .execute(
            "UPDATE slack_once_claims SET owner = 'B', lease_until = $2, claimed_at = $3, \
             attempts = attempts + 1 WHERE key = $1",
            &[
                &e.as_str(),
                &(b_lease_until as i64),
                &((NOW + LEASE + 1) as i64),
            ],
        )
        .await
        .unwrap();
    // A's claim, sent again, starts while B's is uncommitted: its snapshot holds A's own row.
    let resent = {
        let (ledger, e, a) = (ledger.clone(), e.clone(), a.clone());
        tokio::spawn(async move { ledger.claim(&request(&e, &a, NOW + LEASE + 2)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !resent.is_finished(),
        "the claim sent again waits for B's transaction"
    );
    takeover.commit().await.unwrap();
    assert_eq!(
        resent.await.unwrap().unwrap(),
        Claim::InProgress {
            lease_until_ms: b_lease_until
        },
        "B holds the claim: A, whose first answer was lost, must not think it holds it too"
    );
}

/// A TCP proxy on 127.0.0.1 in front of the PostgreSQL server that reads the protocol's
/// messages both ways and keeps every statement name a client's Parse gave while its connection
/// was in no transaction (the server's latest ReadyForQuery said idle): what PgBouncer in
/// transaction mode cannot carry, as the next message may reach another server connection,
/// which lacks the statement (or holds another client's of the same name).
struct PoolerProxy {
    port: u16,
    named_outside_transactions: Arc<std::sync::Mutex<Vec<String>>>,
}

impl PoolerProxy {
    async fn start(upstream: u16) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let named = Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = named.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = tokio::net::TcpStream::connect(("127.0.0.1", upstream))
                    .await
                    .unwrap();
                tokio::spawn(relay(client, server, kept.clone()));
            }
        });
        Self {
            port,
            named_outside_transactions: named,
        }
    }

    fn url(&self, url: &str) -> String {
        url.replace(
            &format!(":{}/", upstream_port()),
            &format!(":{}/", self.port),
        )
    }

    fn named(&self) -> Vec<String> {
        self.named_outside_transactions.lock().unwrap().clone()
    }
}

fn upstream_port() -> u16 {
    std::env::var("POSTGRES_LOCAL_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(5433)
}

/// One message of the protocol (type byte, then a length that counts itself) off `bytes`.
fn next_message(bytes: &mut Vec<u8>) -> Option<(u8, Vec<u8>)> {
    if bytes.len() < 5 {
        return None;
    }
    let len = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
    if bytes.len() < 1 + len {
        return None;
    }
    let message: Vec<u8> = bytes.drain(..1 + len).collect();
    Some((message[0], message[5..].to_vec()))
}

async fn relay(
    client: tokio::net::TcpStream,
    server: tokio::net::TcpStream,
    named: Arc<std::sync::Mutex<Vec<String>>>,
) {
    use std::sync::atomic::{AtomicU8, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    // The transaction status of the server's latest ReadyForQuery ('I': idle).
    let status = Arc::new(AtomicU8::new(b'I'));
    let up = {
        let status = status.clone();
        async move {
            let (mut buf, mut pending, mut started) = (vec![0u8; 64 * 1024], Vec::new(), false);
            loop {
                let n = match from_client.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                pending.extend_from_slice(&buf[..n]);
                if !started {
                    // The startup message has no type byte.
                    if pending.len() < 4 {
                        continue;
                    }
                    let len = u32::from_be_bytes(pending[..4].try_into().unwrap()) as usize;
                    if pending.len() < len {
                        continue;
                    }
                    pending.drain(..len);
                    started = true;
                }
                while let Some((kind, body)) = next_message(&mut pending) {
                    let name_end = body.iter().position(|b| *b == 0).unwrap_or(0);
                    if kind == b'P' && name_end > 0 && status.load(Ordering::SeqCst) == b'I' {
                        let query_end = body[name_end + 1..]
                            .iter()
                            .position(|b| *b == 0)
                            .unwrap_or(0);
                        let query = &body[name_end + 1..name_end + 1 + query_end];
                        named
                            .lock()
                            .unwrap()
                            .push(String::from_utf8_lossy(query).into_owned());
                    }
                }
                if to_server.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    };
    let down = async move {
        let (mut buf, mut pending) = (vec![0u8; 64 * 1024], Vec::new());
        loop {
            let n = match from_server.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            pending.extend_from_slice(&buf[..n]);
            while let Some((kind, body)) = next_message(&mut pending) {
                if kind == b'Z' {
                    status.store(body[0], Ordering::SeqCst);
                }
            }
            if to_client.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn behind_a_transaction_pooler_no_statement_is_named_outside_a_transaction() {
    let url = fresh_schema_url().await;
    let proxy = PoolerProxy::start(upstream_port()).await;
    // One connection: every statement below goes over it, one after another.
    let database = Database::connect(&proxy.url(&url), 1).unwrap();
    database.migrate().await.unwrap();
    // A process started with DATABASE_MIGRATE=off checks the schema instead; every process
    // asks about the server's standbys as it starts.
    database.require_schema().await.unwrap();
    database.asynchronous_standbys().await.unwrap();
    let ledger = PostgresLedger::new(database.clone());
    let (e, a) = (id("EvPooled"), OwnerToken::random());
    let now = slack_once::clock::now_ms();
    assert!(matches!(
        ledger.claim(&request(&e, &a, now)).await.unwrap(),
        Claim::Acquired { .. }
    ));
    ledger.complete(&e, &a, now + 1).await.unwrap();
    let queue = PostgresQueue::new(database.clone(), "pooled", 3);
    queue.send("{}").await.unwrap();
    let taken = queue
        .receive(1, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    queue.delete(&taken[0].receipt_handle).await.unwrap();
    assert_eq!(
        proxy.named(),
        Vec::<String>::new(),
        "statements named outside a transaction: behind PgBouncer in transaction mode the \
         next message may reach a server connection that lacks them"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL and the built binary"]
async fn a_process_with_its_queue_in_postgresql_deletes_its_dead_letters_past_their_retention() {
    let url = fresh_schema_url().await;
    let database = Database::connect(&url, 1).unwrap();
    database.migrate().await.unwrap();
    let now = slack_once::clock::now_ms() as i64;
    let day = 24 * 3600 * 1000;
    database
        .client()
        .await
        .unwrap()
        .execute(
            "INSERT INTO slack_once_queue_dead_letters
               (id, queue, body, sent_at_ms, receive_count, dead_at_ms)
             VALUES (1, 'work', '{}', $1, 10, $1), (2, 'work', '{}', $2, 10, $2),
                    (3, 'another', '{}', $1, 10, $1)",
            &[&(now - 15 * day), &(now - day)],
        )
        .await
        .unwrap();
    let dead_letters = || async {
        let rows = database
            .client()
            .await
            .unwrap()
            .query(
                "SELECT id FROM slack_once_queue_dead_letters ORDER BY id",
                &[],
            )
            .await
            .unwrap();
        rows.iter().map(|row| row.get(0)).collect::<Vec<i64>>()
    };
    let process = BotProcess::spawn(&[
        ("DATABASE_URL", url.clone()),
        ("WORK_QUEUE_NAME", "work".into()),
    ]);
    assert!(
        eventually_async(Duration::from_secs(15), || async {
            dead_letters().await == [2, 3]
        })
        .await,
        "the queue's dead letter past 14 days deleted, its recent one and another queue's \
         kept: {:?}\n{}",
        dead_letters().await,
        process.log()
    );
}
