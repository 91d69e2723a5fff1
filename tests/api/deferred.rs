//! Deferred mode over the built binary: an ingress that acknowledges once the SQS server (moto,
//! on 127.0.0.1) holds the event, workers that answer it through DynamoDB Local, the Slack
//! stand-in. The ledger stays the one arbiter of every copy: Slack's retries, the queue's
//! at-least-once duplicates, redeliveries after a crash, a redrive from the dead-letter queue.

use std::time::{Duration, Instant};

use http::StatusCode;

use crate::helpers::*;

struct Deferred {
    slack: SlackStandin,
    dynamodb: String,
    table: String,
    ledger: std::sync::Arc<slack_once::ledger::DynamoLedger>,
    sqs: String,
    queue: TestQueue,
    ingress: BotProcess,
}

impl Deferred {
    async fn start(max_receives: u32) -> Self {
        let dynamodb = dynamodb_endpoint();
        let sqs = sqs_endpoint();
        let (table, ledger) = fresh_table(&dynamodb).await;
        let slack = SlackStandin::start().await;
        let queue = TestQueue::create(&sqs, max_receives).await;
        let ingress = BotProcess::spawn(&ingress_vars(&queue, &sqs));
        Self {
            slack,
            dynamodb,
            table,
            ledger,
            sqs,
            queue,
            ingress,
        }
    }

    fn worker(&self, lease_s: u64, max_receives: u32) -> BotProcess {
        BotProcess::spawn_worker(&worker_vars(
            &self.slack,
            &self.dynamodb,
            &self.table,
            &self.queue,
            &self.sqs,
            lease_s,
            max_receives,
        ))
    }

    /// The ledger status of the message an `app_mention` of this event id carries.
    async fn status(&self, event_id: &str) -> Option<String> {
        let item = self
            .ledger
            .get_item(&mention_key(event_id))
            .await
            .unwrap()?;
        Some(item["status"].as_s().unwrap().clone())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn a_slow_bot_is_acknowledged_in_milliseconds_and_answered_once_from_the_queue() {
    let d = Deferred::start(5).await;
    // Every post takes Slack 5 s: inside Slack's request this would be a retry each time.
    d.slack
        .script((0..5).map(|_| SlackFailure::Slow(Duration::from_secs(5))));
    let _worker = d.worker(30, 5);
    let http = HttpClient::default();
    let mut slowest = Duration::ZERO;
    for n in 0..5 {
        let (answer, took) = timed_as_slack(
            &http,
            &d.ingress.url(),
            &app_mention(&format!("EvSlow{n}"), "take your time"),
        )
        .await;
        slowest = slowest.max(took);
        assert_eq!(
            (answer.status, answer.outcome().as_str()),
            (StatusCode::OK, "queued"),
            "{}",
            answer.body
        );
    }
    println!("deferred: slowest acknowledgement {slowest:?}");
    // Inside Slack's window while each post takes 5 s (the figure is printed above).
    assert!(
        slowest < Duration::from_secs(3),
        "acknowledged inside Slack's 3 s"
    );
    assert!(
        eventually(Duration::from_secs(30), || d.slack.posted().len() == 5).await,
        "answered from the queue: {} posts",
        d.slack.posted().len()
    );
    assert!(d.slack.posts_per_event().values().all(|&n| n == 1));
    // Slack holds the post once it answers; the worker's completion is its next write.
    for n in 0..5 {
        let event = format!("EvSlow{n}");
        assert!(
            eventually_async(Duration::from_secs(10), || async {
                d.status(&event).await.as_deref() == Some("done")
            })
            .await,
            "{event} is done: {:?}",
            d.status(&event).await
        );
    }
    // A send the SDK retried past its attempt timeout (a slow queue server) can leave a
    // second copy, which finds the live claim and waits out its visibility timeout (the 30 s
    // lease) before it is found done and deleted.
    assert!(
        eventually_async(Duration::from_secs(45), || async {
            d.queue.depth(&d.queue.url).await == 0
        })
        .await,
        "every message deleted"
    );
    assert_eq!(d.slack.posted().len(), 5, "and no copy answered again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn the_same_event_queued_twice_is_answered_once_and_both_messages_deleted() {
    let d = Deferred::start(5).await;
    let http = HttpClient::default();
    let body = app_mention("EvTwice", "twice");
    // Slack's original and its retry both reach the ingress: two messages.
    for retry in [None, Some(1)] {
        let answer = deliver(&http, &d.ingress.url(), &body, retry).await;
        assert_eq!(answer.outcome(), "queued");
    }
    assert_eq!(d.queue.depth(&d.queue.url).await, 2);
    // Received together, one finds the other's live claim and is left for its visibility
    // timeout (the 4 s lease), then found done and deleted.
    let _worker = d.worker(4, 5);
    assert!(
        eventually_async(Duration::from_secs(20), || async {
            d.queue.depth(&d.queue.url).await == 0
        })
        .await,
        "both messages deleted"
    );
    assert_eq!(d.slack.posted().len(), 1);
    assert_eq!(d.status("EvTwice").await.as_deref(), Some("done"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn two_hundred_events_each_queued_three_times_over_four_workers_are_answered_once() {
    let events = env_usize("DEFERRED_EVENTS", 200);
    let d = Deferred::start(5).await;
    let workers: Vec<BotProcess> = (0..4).map(|_| d.worker(30, 5)).collect();
    let http = HttpClient::default();
    let limit = std::sync::Arc::new(tokio::sync::Semaphore::new(16));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for copy in 0..3u32 {
        for e in 0..events {
            let permit = limit.clone().acquire_owned().await.unwrap();
            let (http, url) = (http.clone(), d.ingress.url());
            tasks.push(tokio::spawn(async move {
                let body = app_mention(&format!("EvQ{e:04}"), "storm");
                // As Slack: a non-2xx is retried (here at once, up to 3 times).
                let mut statuses = Vec::new();
                for attempt in 0..4 {
                    let retry = (copy > 0 || attempt > 0).then_some(copy + attempt);
                    let answer = deliver(&http, &url, &body, retry).await;
                    statuses.push(answer.status.as_u16());
                    if answer.status.is_success() {
                        assert_eq!(answer.outcome(), "queued");
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                drop(permit);
                statuses
            }));
        }
    }
    let mut refused = 0;
    for t in tasks {
        let statuses = t.await.unwrap();
        assert!(
            statuses.last().is_some_and(|&s| s == 200),
            "queued within Slack's retries: {statuses:?}"
        );
        refused += statuses.len() - 1;
    }
    let queued_in = started.elapsed();
    assert!(
        eventually(Duration::from_secs(120), || d.slack.posted().len()
            >= events)
        .await,
        "answered {} of {events}",
        d.slack.posted().len()
    );
    assert!(
        eventually_async(Duration::from_secs(60), || async {
            d.queue.depth(&d.queue.url).await == 0
        })
        .await,
        "every message deleted"
    );
    let per_event = d.slack.posts_per_event();
    let doubles = per_event.values().filter(|&&n| n > 1).count();
    println!(
        "deferred storm: {events} events x 3 copies queued in {:.1} s ({refused} deliveries refused 503 and retried), answered by 4 workers in {:.1} s; doubles {doubles}",
        queued_in.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(doubles, 0);
    assert_eq!(per_event.len(), events);
    drop(workers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn a_worker_killed_mid_post_is_taken_over_after_the_visibility_timeout_with_one_reply() {
    let d = Deferred::start(5).await;
    // Slack posts, and the answer never comes back: then the worker dies.
    d.slack.script([SlackFailure::MadeUnanswered]);
    let mut a = d.worker(3, 5);
    let http = HttpClient::default();
    let answer = deliver_as_slack(&http, &d.ingress.url(), &app_mention("EvKilled", "x")).await;
    assert_eq!(answer.outcome(), "queued");
    assert!(eventually(Duration::from_secs(20), || !d.slack.received().is_empty()).await);
    a.kill();
    let b = d.worker(3, 5);
    let started = Instant::now();
    assert!(
        eventually_async(Duration::from_secs(30), || async {
            d.status("EvKilled").await.as_deref() == Some("done")
        })
        .await,
        "taken over:\n{}",
        b.log()
    );
    println!("deferred: taken over after {:?}", started.elapsed());
    assert_eq!(
        d.slack.posted().len(),
        1,
        "found in Slack, not posted again"
    );
    assert_eq!(d.slack.lookup_queries().len(), 1);
    let log = b
        .log_when(Duration::from_secs(10), |log| log.contains("recovered"))
        .await;
    assert!(log.contains("recovered"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn slack_down_longer_than_its_whole_retry_schedule_is_still_answered_once_from_the_queue() {
    // Scaled: Slack's own schedule (original + 3 retries over ~6 min) becomes 2.6 s here, as
    // in faults.rs; the queue's is 8 receives x a 2 s visibility timeout = 16 s.
    let d = Deferred::start(8).await;
    d.slack.outage(Duration::from_secs(7));
    let worker = d.worker(2, 8);
    let http = HttpClient::default();
    let started = Instant::now();
    let answer = deliver_as_slack(&http, &d.ingress.url(), &app_mention("EvOutage", "x")).await;
    assert_eq!(answer.outcome(), "queued");
    assert!(
        eventually_async(Duration::from_secs(30), || async {
            d.status("EvOutage").await.as_deref() == Some("done")
        })
        .await,
        "answered after the outage:\n{}",
        worker.log()
    );
    let attempts = d.slack.received().len();
    println!(
        "deferred: Slack down 7 s, answered after {:.1} s and {attempts} post attempts",
        started.elapsed().as_secs_f64()
    );
    assert!(attempts >= 3, "the queue redelivered through the outage");
    assert_eq!(d.slack.posted().len(), 1);
}

/// A passing failure is retried soon: the worker hands the released message back for its
/// backoff (10 s) instead of leaving it for its visibility timeout (the 120 s lease here, six
/// times the worker's timeout on Lambda), so a `/once` whose first follow-up gets HTTP 500 is
/// answered within tens of seconds, once, well inside the response_url's 30 minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn a_deferred_command_whose_first_follow_up_gets_http_500_is_followed_up_once_within_tens_of_seconds()
 {
    let d = Deferred::start(5).await;
    d.slack
        .script_method("response_url", [SlackFailure::Status(500)]);
    let worker = d.worker(120, 5);
    let http = HttpClient::default();
    let started = Instant::now();
    let form = command_form(&d.slack, "/once", "soon");
    let answer = deliver_form(&http, &d.ingress.url(), &form, None).await;
    let outcome = answer
        .headers
        .get(slack_once::OUTCOME_HEADER)
        .and_then(|v| v.to_str().ok());
    assert_eq!(
        (answer.status, outcome),
        (StatusCode::OK, Some("queued")),
        "{}",
        answer.body
    );
    assert_eq!(answer.json()["response_type"], "ephemeral");
    assert!(
        eventually(Duration::from_secs(40), || d.slack.posted().len() == 1).await,
        "followed up after the 500 within tens of seconds: {} posts to the response_url \
         in {:.1} s\n{}",
        d.slack.calls_of("response_url"),
        started.elapsed().as_secs_f64(),
        worker.log()
    );
    let took = started.elapsed();
    println!(
        "deferred: a follow-up refused with HTTP 500 answered after {:.1} s",
        took.as_secs_f64()
    );
    assert!(
        took >= slack_once::queue::worker::RETRY_FIRST,
        "not before its backoff: {took:?}"
    );
    // Settled: the message deleted, nothing posted again.
    assert!(
        eventually_async(Duration::from_secs(10), || async {
            d.queue.depth(&d.queue.url).await == 0
        })
        .await,
        "the message deleted once answered"
    );
    assert_eq!(
        d.slack.calls_of("response_url"),
        2,
        "the 500, then the answer"
    );
    assert_eq!(d.slack.posted().len(), 1, "once");
}

/// Slack down for two and a half minutes (every chat.postMessage answered HTTP 500) while an
/// event waits on the queue, with the default MaxReceiveCount (5) and a two-minute lease: the
/// event is answered once Slack is back, as the queue's redeliveries promise, however soon its
/// retries come. Not dead-lettered and ended `failed` within the outage because every receive
/// it had was spent inside it: an event has no deadline but the queue's deliveries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn an_event_queued_through_a_slack_outage_of_150_seconds_is_answered_once_slack_is_back() {
    let d = Deferred::start(5).await;
    d.slack.outage(Duration::from_secs(150));
    let worker = d.worker(120, 5);
    let http = HttpClient::default();
    let started = Instant::now();
    let answer = deliver_as_slack(&http, &d.ingress.url(), &app_mention("EvLongOut", "x")).await;
    assert_eq!(answer.outcome(), "queued");
    let mut status = None;
    while started.elapsed() < Duration::from_secs(330) {
        status = d.status("EvLongOut").await;
        if matches!(status.as_deref(), Some("done") | Some("failed")) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!(
        "deferred: Slack down 150 s, the event {status:?} after {:.1} s and {} post attempts",
        started.elapsed().as_secs_f64(),
        d.slack.received().len()
    );
    assert_eq!(
        status.as_deref(),
        Some("done"),
        "dead-lettered inside the outage: {} post attempts, dead-letter queue depth {}\n{}",
        d.slack.received().len(),
        d.queue.depth(&d.queue.dlq_url).await,
        worker.log()
    );
    assert_eq!(d.slack.posted().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn a_message_that_always_fails_is_dead_lettered_failed_and_a_redrive_answers_it() {
    let d = Deferred::start(3).await;
    d.slack.outage(Duration::from_secs(3600));
    let worker = d.worker(1, 3);
    let http = HttpClient::default();
    let answer = deliver_as_slack(&http, &d.ingress.url(), &app_mention("EvDead", "x")).await;
    assert_eq!(answer.outcome(), "queued");
    assert!(
        eventually_async(Duration::from_secs(30), || async {
            d.status("EvDead").await.as_deref() == Some("failed")
        })
        .await,
        "{}",
        worker.log()
    );
    let item = d
        .ledger
        .get_item(&mention_key("EvDead"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(item["error"].as_s().unwrap(), "http_500");
    assert_eq!(item["retryable"].as_bool().unwrap(), &true);
    let deadline = Instant::now() + Duration::from_secs(15);
    let dead = loop {
        let dead = d.queue.dead_letters().await;
        if !dead.is_empty() || Instant::now() > deadline {
            break dead;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        dead.len(),
        1,
        "moved to the dead-letter queue after 3 receives"
    );
    assert_eq!(d.slack.posted().len(), 0);
    assert_eq!(d.slack.received().len(), 3, "one post attempt per receive");
    // What the worker's canary alarm watches: every failed receive, and the dead letter.
    let lines = metric_lines(&worker.log_after(3).await);
    assert_eq!(
        metric_sum(&lines, "WorkerErrors"),
        3.0,
        "one per failed receive"
    );
    assert_eq!(metric_sum(&lines, "DeadLettered"), 1.0);

    // Slack is back; an operator redrives the message.
    d.slack.outage(Duration::ZERO);
    d.queue
        .client
        .send_message()
        .queue_url(&d.queue.url)
        .message_body(&dead[0])
        .send()
        .await
        .unwrap();
    assert!(
        eventually_async(Duration::from_secs(20), || async {
            d.status("EvDead").await.as_deref() == Some("done")
        })
        .await,
        "the redriven event is answered:\n{}",
        worker.log()
    );
    assert_eq!(d.slack.posted().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn the_ingress_answers_503_when_the_queue_does_not_take_the_event() {
    // A queue URL where nothing listens: the send fails within Slack's window.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut vars = dynamodb_env("http://127.0.0.1:9");
    vars.extend([
        ("AWS_ENDPOINT_URL_SQS", format!("http://{closed}")),
        (
            "WORK_QUEUE_URL",
            format!("http://{closed}/123456789012/nowhere"),
        ),
    ]);
    let ingress = BotProcess::spawn(&vars);
    let http = HttpClient::default();
    let started = Instant::now();
    let answer = deliver(&http, &ingress.url(), &app_mention("EvNoQueue", "x"), None).await;
    assert_eq!(
        (answer.status, answer.json()["error"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("queue_unavailable")),
        "{}",
        answer.body
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "inside Slack's window"
    );
    // What needs no worker is still answered by the ingress itself.
    let challenge = deliver(
        &http,
        &ingress.url(),
        r#"{"token":"t","challenge":"c-1","type":"url_verification"}"#,
        None,
    )
    .await;
    assert_eq!(challenge.json()["challenge"], "c-1");
    let own = deliver(
        &http,
        &ingress.url(),
        &direct_message("EvOwnQ", BOT_USER, "me"),
        None,
    )
    .await;
    assert_eq!(own.outcome(), "skipped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn a_forged_request_never_reaches_the_queue() {
    let d = Deferred::start(5).await;
    let http = HttpClient::default();
    let body = app_mention("EvForgedQ", "x");
    let headers = signed_headers("not-the-secret", now_unix(), body.as_bytes());
    let answer = http
        .request("POST", &d.ingress.url(), &headers, body.into_bytes())
        .await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert_eq!(d.queue.depth(&d.queue.url).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn sigterm_stops_the_worker_receiving_and_it_finishes_what_it_holds() {
    let d = Deferred::start(5).await;
    d.slack.script([SlackFailure::Slow(Duration::from_secs(2))]);
    let worker = d.worker(30, 5);
    let http = HttpClient::default();
    deliver_as_slack(&http, &d.ingress.url(), &app_mention("EvTermQ", "x")).await;
    assert!(eventually(Duration::from_secs(20), || !d.slack.received().is_empty()).await);
    let started = Instant::now();
    worker.terminate();
    let (code, log) = worker.exited().await;
    assert_eq!(code, Some(0), "{}", log);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "no long poll waited out"
    );
    assert_eq!(d.slack.posted().len(), 1);
    assert_eq!(d.status("EvTermQ").await.as_deref(), Some("done"));
    assert_eq!(d.queue.depth(&d.queue.url).await, 0, "handled and deleted");
}

/// Delivers `body` as Slack does: the original, then up to 3 retries at once while the answer is
/// not 2xx (an SQS server slowed down by the other tests may make the ingress answer 503).
pub(crate) async fn deliver_as_slack(http: &HttpClient, url: &str, body: &str) -> Answer {
    timed_as_slack(http, url, body).await.0
}

/// As [`deliver_as_slack`], with how long the last delivery took to be answered.
async fn timed_as_slack(http: &HttpClient, url: &str, body: &str) -> (Answer, Duration) {
    let mut retry = None;
    loop {
        let started = Instant::now();
        let answer = deliver(http, url, body, retry).await;
        let took = started.elapsed();
        match retry {
            _ if answer.status.is_success() => return (answer, took),
            Some(3) => return (answer, took),
            _ => retry = Some(retry.map_or(1, |n| n + 1)),
        }
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn an_event_between_256_kib_and_1_mib_is_queued_and_answered() {
    let d = Deferred::start(3).await;
    let _worker = d.worker(30, 3);
    let mut body: serde_json::Value =
        serde_json::from_str(&app_mention("EvLarge", "a long one")).unwrap();
    // Slack's events are small, but SQS takes 1 MiB since 2025: so does the ingress.
    body["event"]["attachments"] = serde_json::json!([{"text": "x".repeat(700 * 1024)}]);
    let body = body.to_string();
    assert!(body.len() > 700 * 1024);
    let answer = deliver_as_slack(&HttpClient::default(), &d.ingress.url(), &body).await;
    assert_eq!(answer.outcome(), "queued", "{}", answer.body);
    assert!(
        eventually_async(Duration::from_secs(20), || async {
            d.status("EvLarge").await.as_deref() == Some("done")
        })
        .await
    );
    assert_eq!(d.slack.posted().len(), 1);
}
