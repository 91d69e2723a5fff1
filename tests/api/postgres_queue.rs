//! Deferred mode's work queue on PostgreSQL (127.0.0.1, scripts/postgres-local.sh): SQS's
//! semantics as the worker relies on them (visibility, receipt handles of one receive, the
//! redrive policy to a dead-letter table, a redrive back), each test on a schema of its own;
//! then the real worker over it, with the memory ledger and the Slack stand-in.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use slack_once::ledger::{MemoryLedger, PostgresLedger, Status};
use slack_once::postgres::Database;
use slack_once::queue::{
    MAX_MESSAGE_BYTES, PostgresQueue, QueueError, ReceiptOutcome, Received, Redrive, WorkQueue,
};

use crate::helpers::*;

/// The time the tests' given clock starts at (epoch ms).
const T0: u64 = 1_767_225_600_000;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

async fn queue(max_receives: u32) -> PostgresQueue {
    let (_, database) = fresh_schema().await;
    PostgresQueue::new(database, "work", max_receives)
}

async fn receive_one(queue: &PostgresQueue, visibility: Duration, now_ms: u64) -> Received {
    let mut got = queue.receive_at(10, visibility, now_ms).await.unwrap();
    assert_eq!(got.len(), 1, "one message received at {now_ms}: {got:?}");
    got.remove(0)
}

async fn nothing_at(queue: &PostgresQueue, now_ms: u64) -> bool {
    queue
        .receive_at(10, secs(30), now_ms)
        .await
        .unwrap()
        .is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL"]
async fn receivers_at_once_never_hold_one_message_together() {
    const MESSAGES: usize = 120;
    let queue = Arc::new(queue(5).await);
    for n in 0..MESSAGES {
        queue.send(&format!("m{n}")).await.unwrap();
    }
    let receivers = (0..8).map(|_| {
        let queue = queue.clone();
        tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = queue.receive_at(3, secs(600), T0).await.unwrap();
                if got.is_empty() {
                    return mine;
                }
                mine.extend(got);
            }
        })
    });
    let mut all = Vec::new();
    for receiver in receivers.collect::<Vec<_>>() {
        all.extend(receiver.await.unwrap());
    }
    let ids: HashSet<&str> = all.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(
        (all.len(), ids.len()),
        (MESSAGES, MESSAGES),
        "each message received once, by one receiver"
    );
    assert!(all.iter().all(|m| m.receive_count == 1));
    let bodies: HashSet<&str> = all.iter().map(|m| m.body.as_str()).collect();
    assert_eq!(bodies.len(), MESSAGES);
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn a_message_whose_visibility_lapses_comes_back_with_its_receive_count_up() {
    let queue = queue(5).await;
    queue.send("m").await.unwrap();
    let first = receive_one(&queue, secs(30), T0).await;
    assert_eq!((first.body.as_str(), first.receive_count), ("m", 1));
    assert!(nothing_at(&queue, T0 + 29_999).await, "hidden for 30 s");
    let second = receive_one(&queue, secs(30), T0 + 30_000).await;
    assert_eq!(second.message_id, first.message_id);
    assert_eq!(second.receive_count, 2);
    assert_ne!(
        second.receipt_handle, first.receipt_handle,
        "a handle per receive"
    );
    assert_eq!(queue.depth().await.unwrap(), 1);
}

/// SQS's rule: only the handle of a message's latest receive deletes it or changes its
/// visibility; an earlier receive's changes nothing, whoever holds it.
#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn the_handle_of_an_earlier_receive_neither_deletes_it_nor_changes_its_visibility() {
    let queue = queue(5).await;
    queue.send("m").await.unwrap();
    let old = receive_one(&queue, secs(10), T0).await;
    let new = receive_one(&queue, secs(10), T0 + 10_000).await;
    assert_eq!(
        queue
            .change_visibility_at(&old.receipt_handle, Duration::ZERO, T0 + 10_001)
            .await
            .unwrap(),
        ReceiptOutcome::Stale
    );
    assert!(
        nothing_at(&queue, T0 + 10_001).await,
        "still hidden by the latest receive"
    );
    assert_eq!(
        queue.delete_received(&old.receipt_handle).await.unwrap(),
        ReceiptOutcome::Stale
    );
    queue.delete(&old.receipt_handle).await.unwrap();
    assert_eq!(
        queue.depth().await.unwrap(),
        1,
        "not deleted by the old handle"
    );
    for bad in [
        "",
        "x",
        "1",
        "not:a-handle",
        &format!("{}:", new.message_id),
    ] {
        assert_eq!(
            queue.delete_received(bad).await.unwrap(),
            ReceiptOutcome::Stale,
            "{bad:?}"
        );
    }
    assert_eq!(
        queue.delete_received(&new.receipt_handle).await.unwrap(),
        ReceiptOutcome::Applied
    );
    assert_eq!(queue.depth().await.unwrap(), 0);
    assert_eq!(
        queue.delete_received(&new.receipt_handle).await.unwrap(),
        ReceiptOutcome::Stale,
        "deleted once"
    );
}

/// The worker's short retry: a message handed back with `change_visibility` comes back then,
/// not at the end of its visibility timeout, and the change spends no receive.
#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn a_visibility_changed_makes_it_visible_then_with_its_receive_count_unchanged() {
    let queue = queue(5).await;
    queue.send("m").await.unwrap();
    let first = receive_one(&queue, secs(600), T0).await;
    assert_eq!(
        queue
            .change_visibility_at(&first.receipt_handle, Duration::ZERO, T0 + 1)
            .await
            .unwrap(),
        ReceiptOutcome::Applied
    );
    let second = receive_one(&queue, secs(600), T0 + 1).await;
    assert_eq!(
        second.receive_count, 2,
        "one more for the receive, none for the change"
    );
    queue
        .change_visibility_at(&second.receipt_handle, secs(10), T0 + 2)
        .await
        .unwrap();
    assert!(nothing_at(&queue, T0 + 10_001).await);
    let third = receive_one(&queue, secs(600), T0 + 10_002).await;
    assert_eq!(third.receive_count, 3);
    // A handle whose visibility lapsed works until the message is received again (SQS's).
    let fourth = receive_one(&queue, secs(5), T0 + 610_002).await;
    assert_eq!(
        queue
            .change_visibility_at(&fourth.receipt_handle, secs(60), T0 + 620_000)
            .await
            .unwrap(),
        ReceiptOutcome::Applied
    );
    assert!(
        nothing_at(&queue, T0 + 620_001).await,
        "hidden again by its holder"
    );
}

/// SQS's redrive policy: a message received `max_receives` times that becomes visible again
/// goes to the dead letters, with its body, its count and when; one still hidden is in flight
/// (its holder may delete it). A redrive brings it back once, its receives restored.
#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn the_last_receives_failure_dead_letters_it_and_a_redrive_brings_it_back_once() {
    let (_, database) = fresh_schema().await;
    let queue = Arc::new(PostgresQueue::new(database.clone(), "work", 2));
    queue.send("doomed").await.unwrap();
    queue.send("kept").await.unwrap();
    let first = queue.receive_at(10, secs(30), T0).await.unwrap();
    assert_eq!(first.len(), 2);
    let last = queue.receive_at(10, secs(30), T0 + 30_000).await.unwrap();
    assert!(last.iter().all(|m| m.receive_count == 2));
    let kept = last.iter().find(|m| m.body == "kept").unwrap();
    let doomed = last.iter().find(|m| m.body == "doomed").unwrap().clone();
    // In flight on its last receive: not dead yet, and its holder deletes it.
    assert!(nothing_at(&queue, T0 + 59_999).await);
    assert!(queue.dead_letters(10).await.unwrap().is_empty());
    queue.delete(&kept.receipt_handle).await.unwrap();
    // The other's last receive failed (its visibility lapsed): dead-lettered, not received.
    assert!(nothing_at(&queue, T0 + 60_000).await);
    assert_eq!(queue.depth().await.unwrap(), 0);
    let dead = queue.dead_letters(10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].message_id, doomed.message_id);
    assert_eq!(dead[0].body, "doomed");
    assert_eq!(dead[0].receive_count, 2);
    assert_eq!(dead[0].dead_at_ms, T0 + 60_000);
    // Kept for the retention asked, as SQS keeps a dead-letter queue's messages.
    let retention = secs(14 * 24 * 3600);
    let expires_at = T0 + 60_000 + retention.as_millis() as u64;
    assert_eq!(
        queue
            .expire_dead_letters(retention, expires_at)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        queue.delete_received(&doomed.receipt_handle).await.unwrap(),
        ReceiptOutcome::Stale,
        "a dead letter is out of its last holder's reach"
    );
    // Two redrives at once (two operators): moved back by one of them.
    let other = PostgresQueue::new(database, "other", 2);
    other.send("expires").await.unwrap();
    other.receive_at(1, secs(1), T0).await.unwrap();
    other.receive_at(1, secs(1), T0 + 1_000).await.unwrap();
    assert!(nothing_at(&other, T0 + 2_000).await);
    assert_eq!(
        other
            .expire_dead_letters(retention, expires_at + 1)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        queue.dead_letters(10).await.unwrap().len(),
        1,
        "another queue's"
    );
    let ids = [dead[0].message_id.clone(), "not-an-id".to_string()];
    let (a, b) = tokio::join!(
        queue.redrive_dead_letters(Redrive::Messages(&ids)),
        queue.redrive_dead_letters(Redrive::All)
    );
    let moved = [a.unwrap(), b.unwrap()].concat();
    assert_eq!(moved, std::slice::from_ref(&doomed.message_id));
    assert!(queue.dead_letters(10).await.unwrap().is_empty());
    assert!(
        queue
            .redrive_dead_letters(Redrive::All)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(queue.depth().await.unwrap(), 1, "back once");
    let again = receive_one(&queue, secs(30), T0 + 60_001).await;
    assert_eq!(
        (
            again.message_id.as_str(),
            again.body.as_str(),
            again.receive_count
        ),
        (doomed.message_id.as_str(), "doomed", 1),
        "its receives restored"
    );
    assert_ne!(again.receipt_handle, doomed.receipt_handle);
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn a_body_larger_than_a_message_holds_is_refused_with_nothing_sent() {
    let queue = queue(5).await;
    let too_large = "x".repeat(MAX_MESSAGE_BYTES + 1);
    assert!(matches!(
        queue.send(&too_large).await,
        Err(QueueError::TooLarge { size }) if size == MAX_MESSAGE_BYTES + 1
    ));
    assert_eq!(queue.depth().await.unwrap(), 0);
    // The largest, and a body with characters PostgreSQL's text cannot hold, come back as sent.
    let largest = "y".repeat(MAX_MESSAGE_BYTES);
    let odd = "nul \0, é, 🦀";
    queue.send(&largest).await.unwrap();
    queue.send(odd).await.unwrap();
    let got = queue.receive_at(10, secs(30), T0).await.unwrap();
    let bodies: Vec<&str> = got.iter().map(|m| m.body.as_str()).collect();
    assert_eq!(bodies, [largest.as_str(), odd]);
}

/// Several apps (and tests) share one database: each queue's messages, handles and dead
/// letters are its own.
#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn queues_of_one_database_are_apart_by_name() {
    let (_, database) = fresh_schema().await;
    let a = PostgresQueue::new(database.clone(), "app-a", 1);
    let b = PostgresQueue::new(database, "app-b", 1);
    a.send("for a").await.unwrap();
    assert!(nothing_at(&b, T0).await);
    assert_eq!(b.depth().await.unwrap(), 0);
    let got = receive_one(&a, secs(30), T0).await;
    assert_eq!(
        b.delete_received(&got.receipt_handle).await.unwrap(),
        ReceiptOutcome::Stale
    );
    assert_eq!(
        b.change_visibility_at(&got.receipt_handle, Duration::ZERO, T0)
            .await
            .unwrap(),
        ReceiptOutcome::Stale
    );
    assert!(nothing_at(&a, T0 + 1).await, "hidden still");
    assert!(nothing_at(&a, T0 + 30_000).await, "a's receive spent: dead");
    assert_eq!(a.dead_letters(10).await.unwrap().len(), 1);
    assert!(b.dead_letters(10).await.unwrap().is_empty());
    assert!(
        b.redrive_dead_letters(Redrive::All)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        a.dead_letters(10).await.unwrap().len(),
        1,
        "not b's to redrive"
    );
}

/// `receive` waits up to its wait for the first message (polling), and no longer.
#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn a_receive_waits_for_the_first_message_and_returns_empty_when_none_came() {
    let queue = Arc::new(queue(5).await);
    let started = Instant::now();
    let got = queue.receive(10, secs(30), secs(2)).await.unwrap();
    let waited = started.elapsed();
    assert!(got.is_empty());
    assert!(
        waited >= secs(2) && waited < secs(3),
        "waited its wait: {waited:?}"
    );
    let sender = {
        let queue = queue.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            queue.send("late").await.unwrap();
        })
    };
    let started = Instant::now();
    let got = queue.receive(10, secs(30), secs(10)).await.unwrap();
    let waited = started.elapsed();
    sender.await.unwrap();
    assert_eq!(got.len(), 1);
    assert!(
        waited >= Duration::from_millis(1500) && waited < secs(3),
        "taken within a poll of its arrival: {waited:?}"
    );
}

/// The worker over PostgreSQL: an in-process ingress (deferred mode: it acknowledges once the
/// queue holds the event) and the real `Worker::run_local`, on the database's clock, the
/// memory ledger shared by both, the Slack stand-in.
struct PostgresDeferred {
    slack: SlackStandin,
    ledger: Arc<MemoryLedger>,
    queue: Arc<PostgresQueue>,
    ingress: String,
    http: HttpClient,
    _stop_ingress: tokio::sync::oneshot::Sender<()>,
    stop_worker: Option<tokio::sync::oneshot::Sender<()>>,
    worker: Option<tokio::task::JoinHandle<()>>,
}

impl PostgresDeferred {
    async fn start(lease_s: u64, max_receives: u32) -> Self {
        let (url, _) = fresh_schema().await;
        let database = Database::connect(&url, 8).unwrap();
        let queue = Arc::new(PostgresQueue::new(database, "work", max_receives));
        let slack = SlackStandin::start().await;
        let ledger = Arc::new(MemoryLedger::new());
        let ingress = slack_once::Application::with_queue(
            test_config(&slack, &[]),
            ledger.clone(),
            slack_once::reference_app(),
            Some(queue.clone() as Arc<dyn WorkQueue>),
        );
        let server = ingress.bind().await.unwrap();
        let ingress = format!("http://{}/slack/events", server.local_addr());
        let (stop_ingress, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.run_until(async {
            let _ = stopped.await;
        }));
        let (lease, receives) = (lease_s.to_string(), max_receives.to_string());
        let worker = slack_once::Application::with_parts(
            test_config(
                &slack,
                &[
                    ("SLACK_ONCE_ROLE", "worker"),
                    ("DEDUP_TABLE", "in-memory"),
                    ("WORK_QUEUE_URL", "http://127.0.0.1:9/000000000000/unused"),
                    ("DEDUP_LEASE_SECONDS", &lease),
                    ("WORK_QUEUE_MAX_RECEIVES", &receives),
                    ("WORK_QUEUE_POLL_SECONDS", "1"),
                ],
            ),
            ledger.clone(),
            slack_once::reference_app(),
        )
        .worker();
        let (stop_worker, worker_stopped) = tokio::sync::oneshot::channel::<()>();
        let worker = tokio::spawn(worker.run_local(
            queue.clone() as Arc<dyn WorkQueue>,
            4,
            secs(lease_s),
            async {
                let _ = worker_stopped.await;
            },
        ));
        Self {
            slack,
            ledger,
            queue,
            ingress,
            http: HttpClient::default(),
            _stop_ingress: stop_ingress,
            stop_worker: Some(stop_worker),
            worker: Some(worker),
        }
    }

    /// Delivers an `app_mention` as Slack does (`retry`: its `X-Slack-Retry-Num`): queued.
    async fn mention(&self, event_id: &str, retry: Option<u32>) {
        let answer = deliver(
            &self.http,
            &self.ingress,
            &app_mention(event_id, "from the queue"),
            retry,
        )
        .await;
        assert_eq!(answer.outcome(), "queued", "{}", answer.body);
    }

    fn status(&self, event_id: &str) -> Option<Status> {
        let key = mention_key(event_id);
        self.ledger
            .statuses()
            .into_iter()
            .find(|(k, _)| k.as_str() == key)
            .map(|(_, status)| status)
    }

    async fn depth_reaches_zero(&self, within: Duration) -> bool {
        eventually_async(within, || async { self.queue.depth().await.unwrap() == 0 }).await
    }

    /// Stops the worker (it finishes what it holds).
    async fn stop(mut self) {
        let _ = self.stop_worker.take().map(|stop| stop.send(()));
        if let Some(worker) = self.worker.take() {
            worker.await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL"]
async fn events_queued_on_postgresql_are_answered_once_by_the_worker_and_deleted() {
    let d = PostgresDeferred::start(4, 5).await;
    // Each event twice: Slack's original and its retry, two messages.
    for n in 0..5 {
        let event = format!("EvPg{n}");
        d.mention(&event, None).await;
        d.mention(&event, Some(1)).await;
    }
    assert!(
        eventually(secs(20), || d.slack.posted().len() >= 5).await,
        "answered from the queue: {} posts",
        d.slack.posted().len()
    );
    // A copy received while its original runs finds the live claim and is left, hidden for
    // the lease (4 s), then found done and deleted.
    assert!(
        d.depth_reaches_zero(secs(20)).await,
        "every message deleted"
    );
    assert_eq!(d.slack.posted().len(), 5);
    assert!(d.slack.posts_per_event().values().all(|&n| n == 1));
    for n in 0..5 {
        assert_eq!(d.status(&format!("EvPg{n}")), Some(Status::Done));
    }
    assert!(d.queue.dead_letters(10).await.unwrap().is_empty());
    d.stop().await;
}

/// A transient failure (Slack's HTTP 500) releases the claim, and the worker hands the message
/// back with `change_visibility` for its backoff (10 s): answered once soon after, not at the
/// end of the 120 s lease the receive hid it for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL"]
async fn a_transient_failure_is_retried_after_its_backoff_through_change_visibility() {
    let d = PostgresDeferred::start(120, 5).await;
    d.slack.script([SlackFailure::Status(500)]);
    let started = Instant::now();
    d.mention("EvPgRetry", None).await;
    assert!(
        eventually(secs(30), || d.slack.posted().len() == 1).await,
        "answered after the 500 within tens of seconds: {} attempts in {:?}",
        d.slack.received().len(),
        started.elapsed()
    );
    let took = started.elapsed();
    assert!(
        took >= slack_once::queue::worker::RETRY_FIRST,
        "not before its backoff: {took:?}"
    );
    assert!(
        d.depth_reaches_zero(secs(10)).await,
        "deleted once answered"
    );
    assert_eq!(d.slack.received().len(), 2, "the 500, then the answer");
    assert_eq!(d.slack.posted().len(), 1);
    assert_eq!(d.status("EvPgRetry"), Some(Status::Done));
    d.stop().await;
}

/// Slack down through every receive: the last one ends the event `failed` (retryable) and the
/// message goes to the dead letters; once Slack is back, a redrive answers it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL"]
async fn receives_spent_dead_letter_the_event_and_a_redrive_answers_it_once() {
    let d = PostgresDeferred::start(1, 3).await;
    d.slack.outage(secs(3600));
    d.mention("EvPgDead", None).await;
    let dead = {
        let deadline = Instant::now() + secs(30);
        loop {
            let dead = d.queue.dead_letters(10).await.unwrap();
            if !dead.is_empty() || Instant::now() > deadline {
                break dead;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    assert_eq!(dead.len(), 1, "dead-lettered after 3 receives");
    assert_eq!(dead[0].receive_count, 3);
    assert_eq!(d.status("EvPgDead"), Some(Status::Failed));
    assert_eq!(d.slack.received().len(), 3, "one post attempt per receive");
    assert_eq!(d.slack.posted().len(), 0);
    assert_eq!(d.queue.depth().await.unwrap(), 0);

    // Slack is back; an operator redrives the dead letters.
    d.slack.outage(Duration::ZERO);
    let moved = d.queue.redrive_dead_letters(Redrive::All).await.unwrap();
    assert_eq!(moved, [dead[0].message_id.clone()]);
    assert!(
        eventually(secs(20), || d.slack.posted().len() == 1).await,
        "the redriven event is answered"
    );
    assert!(d.depth_reaches_zero(secs(10)).await);
    assert_eq!(d.status("EvPgDead"), Some(Status::Done));
    assert!(d.queue.dead_letters(10).await.unwrap().is_empty());
    assert!(
        d.queue
            .redrive_dead_letters(Redrive::All)
            .await
            .unwrap()
            .is_empty()
    );
    tokio::time::sleep(secs(2)).await;
    assert_eq!(d.slack.posted().len(), 1, "once");
    d.stop().await;
}

/// Ends a claim of `key` on `ledger` `failed` with `error` (not retryable), as a worker's last
/// receive leaves a request that failed.
async fn put_failed(ledger: &PostgresLedger, key: &str, error: &str) {
    use slack_once::ledger::{Claim, Finish, Held, Ledger, OwnerToken};
    let key = slack_once::slack::envelope::EventId::try_from(key.to_string()).unwrap();
    let owner = OwnerToken::random();
    let now = slack_once::clock::now_ms();
    let request = slack_once::ledger::ClaimRequest {
        app_id: None,
        ..slack_once::ledger::contract::request(&key, &owner, now)
    };
    assert!(matches!(
        ledger.claim(&request).await.unwrap(),
        Claim::Acquired { .. }
    ));
    let failed = Finish::Failed {
        error: error.to_string(),
        retryable: false,
    };
    let held = Held {
        event_id: &key,
        owner: &owner,
    };
    ledger.finish(held, &failed, &[], now).await.unwrap();
}

/// `redrive`'s judgement over PostgreSQL's dead letters and ledger (one database): a request
/// failed for a passing cause is made claimable and moved back, one with no claim moved, one
/// whose write's fate is unknown refused and left; a dry run changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL"]
async fn redrive_judges_postgresqls_dead_letters_by_the_ledger_and_keeps_its_refusals() {
    use slack_once::tools::redrive::{Action, Options, PostgresDeadLetters, redrive_with};
    let (_, database) = fresh_schema().await;
    let queue = PostgresQueue::new(database.clone(), "work", 1);
    let ledger = PostgresLedger::new(database);
    put_failed(&ledger, &mention_key("EvRdFailed"), "http_500").await;
    put_failed(&ledger, &mention_key("EvRdUnknown"), "unconfirmed_write").await;
    let received_at = slack_once::clock::now_ms() - 60_000;
    for event in ["EvRdFailed", "EvRdUnknown", "EvRdNone"] {
        let envelope = app_mention(event, "x");
        let body = format!(r#"{{"v":1,"envelope":{envelope},"received_at_ms":{received_at}}}"#);
        queue.send(&body).await.unwrap();
    }
    assert_eq!(queue.receive_at(10, secs(1), T0).await.unwrap().len(), 3);
    assert!(
        nothing_at(&queue, T0 + 1_000).await,
        "their one receive spent"
    );
    let dead = queue.dead_letters(10).await.unwrap();
    assert_eq!(dead.len(), 3);
    let mut options = Options {
        dry_run: true,
        max: 100,
        ttl: slack_once::config::MIN_TTL,
        now_ms: slack_once::clock::now_ms(),
        visibility: slack_once::tools::redrive::RECEIVE_VISIBILITY,
    };
    let action_of = |report: &slack_once::tools::redrive::Report, event: &str| {
        let id = &dead
            .iter()
            .find(|d| d.body.contains(event))
            .unwrap()
            .message_id;
        let entry = report.entries.iter().find(|e| &e.message_id == id);
        entry.unwrap().action.clone()
    };
    let key =
        |event: &str| slack_once::slack::envelope::EventId::try_from(mention_key(event)).unwrap();
    let retryable = || async {
        ledger
            .claim_record(&key("EvRdFailed"))
            .await
            .unwrap()
            .unwrap()
            .retryable
    };
    let letters = PostgresDeadLetters::new(&queue, options.max);
    let report = redrive_with(&letters, &ledger, &options).await;
    assert!(report.error.is_none(), "{report}");
    assert_eq!(report.entries.len(), 3, "{report}");
    assert_eq!(action_of(&report, "EvRdFailed"), Action::Moved);
    assert_eq!(action_of(&report, "EvRdNone"), Action::Moved);
    assert!(
        matches!(action_of(&report, "EvRdUnknown"), Action::Refused(why) if why.contains("unconfirmed_write")),
        "{report}"
    );
    assert!(!report.came_back, "{report}");
    assert_eq!(queue.dead_letters(10).await.unwrap().len(), 3, "a dry run");
    assert_eq!(queue.depth().await.unwrap(), 0);
    assert!(!retryable().await, "nothing reset by a dry run");

    options.dry_run = false;
    let letters = PostgresDeadLetters::new(&queue, options.max);
    let report = redrive_with(&letters, &ledger, &options).await;
    assert!(report.error.is_none(), "{report}");
    let left = queue.dead_letters(10).await.unwrap();
    assert_eq!(left.len(), 1, "{report}");
    assert!(
        left[0].body.contains("EvRdUnknown"),
        "the refused one stays"
    );
    assert_eq!(queue.depth().await.unwrap(), 2, "moved back");
    assert!(retryable().await, "made claimable");
    let back = queue.receive_at(10, secs(30), T0 + 2_000).await.unwrap();
    assert!(
        back.iter().all(|m| m.receive_count == 1),
        "its receives restored"
    );
}

/// A receive whose caller went away before its answer (a worker stopped or killed mid-poll, the
/// answer lost): the statement may still take the message, as SQS's open long poll does. It is
/// not lost: hidden for that receive's visibility, with one receive spent, then received again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL"]
async fn a_receive_whose_answer_is_lost_hides_the_message_for_its_visibility_only() {
    let (_, database) = fresh_schema().await;
    let queue = PostgresQueue::new(database.clone(), "work", 5);
    queue.send("m").await.unwrap();
    // Another session holds the table: the receive waits on the server, and its caller gives up.
    let mut blocker = database.client().await.unwrap();
    let lock = blocker.transaction().await.unwrap();
    lock.batch_execute("LOCK TABLE slack_once_queue IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let gave_up = tokio::time::timeout(
        Duration::from_millis(300),
        queue.receive_at(10, secs(5), T0),
    )
    .await;
    assert!(gave_up.is_err(), "the receive was still waiting");
    lock.commit().await.unwrap();
    let observer = database.client().await.unwrap();
    let counts = || async {
        observer
            .query("SELECT receive_count FROM slack_once_queue", &[])
            .await
            .unwrap()
            .iter()
            .map(|row| row.get::<_, i32>(0))
            .collect::<Vec<_>>()
    };
    assert!(
        eventually_async(secs(5), || async { counts().await == [1] }).await,
        "the abandoned receive took it: {:?}",
        counts().await
    );
    assert!(
        nothing_at(&queue, T0 + 4_999).await,
        "hidden for that receive's 5 s"
    );
    let again = receive_one(&queue, secs(30), T0 + 5_000).await;
    assert_eq!((again.body.as_str(), again.receive_count), ("m", 2));
}

/// The server closes every connection of the pool (a restart, a failover, an idle timeout in
/// between), five times: each call after it opens a new one (sent once more where it met the
/// closed one), and nothing sent is lost or doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL"]
async fn the_queue_goes_on_after_the_server_closes_its_connections() {
    let name = format!("pgq_{}", uuid::Uuid::new_v4().simple());
    let url = format!("{}&application_name={name}", fresh_schema_url().await);
    let database = Database::connect(&url, 4).unwrap();
    database.migrate().await.unwrap();
    let queue = PostgresQueue::new(database, "work", 5);
    let admin = Database::connect(&postgres_url(), 1).unwrap();
    let admin = admin.client().await.unwrap();
    let close_every_connection = || async {
        let closed = admin
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE application_name = $1",
                &[&name],
            )
            .await
            .unwrap();
        assert!(!closed.is_empty(), "the pool's connections closed");
    };
    for round in 0..5 {
        let body = format!("m{round}");
        queue.send(&body).await.unwrap();
        close_every_connection().await;
        let got = queue.receive_at(10, secs(30), T0).await.unwrap();
        let bodies: Vec<&str> = got.iter().map(|m| m.body.as_str()).collect();
        assert_eq!(
            bodies,
            [body.as_str()],
            "round {round}: nothing lost, nothing doubled"
        );
        close_every_connection().await;
        queue.delete(&got[0].receipt_handle).await.unwrap();
        close_every_connection().await;
        assert_eq!(queue.depth().await.unwrap(), 0, "round {round}: deleted");
    }
}
