//! Takeovers and look-ups: a later delivery that takes over an earlier claim looks in Slack
//! for what the earlier one may have posted (within its window, in a busy thread or DM, under
//! Slack's rate limits), holds back when it cannot look, and never posts blind; on a ledger
//! that fails (throttled writes, lost answers, a role without `PutItem`) and with Slack's clock
//! behind. The tests named `window_…` measure what remains (RELIABILITY.md), those named
//! `evidence_…` check what was found sound.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use slack_once::app::{App, AppMention, Ctx, Message, MessageEvent};
use slack_once::ledger::{DynamoLedger, Ledger};
use tokio::sync::oneshot;

use crate::helpers::*;

// ================================================================ shared machinery

/// `body` (an event envelope) with `client_msg_id` set on its event, as Slack sends every
/// message typed by a person.
fn with_cmid(body: &str, cmid: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(body).unwrap();
    v["event"]["client_msg_id"] = cmid.into();
    v.to_string()
}

fn s_of(item: &std::collections::HashMap<String, AttributeValue>, k: &str) -> String {
    item.get(k)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default()
}

fn began_len(item: &std::collections::HashMap<String, AttributeValue>) -> usize {
    item.get("began")
        .and_then(|v| v.as_l().ok())
        .map_or(0, |l| l.len())
}

fn journal_len(item: &std::collections::HashMap<String, AttributeValue>) -> usize {
    item.get("journal")
        .and_then(|v| v.as_m().ok())
        .map_or(0, |m| m.len())
}

/// The ledger's writes, as the tests' `LedgerProxy` tells them apart.
type Op = LedgerOp;

/// A proxy on 127.0.0.1 in front of DynamoDB Local that answers every request of the kinds in
/// `failing` with a throttling error (HTTP 400 ProvisionedThroughputExceededException, which
/// the SDK retries, then gives up on) without forwarding it: a hot partition, for as long as
/// the test says. Unlike `LedgerProxy`, it fails every attempt, not one.
struct FaultProxy {
    url: String,
    failing: Arc<Mutex<HashSet<Op>>>,
    seen: Arc<Mutex<Vec<Op>>>,
    _shutdown: oneshot::Sender<()>,
    /// Every `PutItem` answered `AccessDeniedException`, as IAM does for a role without it.
    refuse_puts: Arc<std::sync::atomic::AtomicBool>,
}

impl FaultProxy {
    async fn start(upstream: &str) -> Self {
        let failing = Arc::new(Mutex::new(HashSet::new()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, mut rx) = oneshot::channel::<()>();
        let client: Client<HttpConnector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let upstream = upstream.to_string();
        let (f, s) = (failing.clone(), seen.clone());
        let refuse_puts = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let refuse = refuse_puts.clone();
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => stream,
                        Err(_) => continue,
                    },
                    _ = &mut rx => return,
                };
                let (client, upstream, f, s, refuse) = (
                    client.clone(),
                    upstream.clone(),
                    f.clone(),
                    s.clone(),
                    refuse.clone(),
                );
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        fault_forward(
                            client.clone(),
                            upstream.clone(),
                            (f.clone(), s.clone(), refuse.clone()),
                            request,
                        )
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            url: format!("http://{addr}"),
            failing,
            seen,
            _shutdown: tx,
            refuse_puts,
        }
    }

    fn refuse_puts(&self) {
        self.refuse_puts
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn fail(&self, op: Op) {
        self.failing.lock().unwrap().insert(op);
    }

    fn heal(&self, op: Op) {
        self.failing.lock().unwrap().remove(&op);
    }

    fn seen(&self) -> Vec<Op> {
        self.seen.lock().unwrap().clone()
    }
}

type ProxyError = Box<dyn std::error::Error + Send + Sync>;

/// What the proxy fails, what it saw, and whether it refuses every put.
type FaultState = (
    Arc<Mutex<HashSet<Op>>>,
    Arc<Mutex<Vec<Op>>>,
    Arc<std::sync::atomic::AtomicBool>,
);

async fn fault_forward(
    client: Client<HttpConnector, Full<Bytes>>,
    upstream: String,
    (failing, seen, refuse_puts): FaultState,
    request: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<Full<Bytes>>, ProxyError> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let op = classify(&body);
    seen.lock().unwrap().push(op);
    let put = parts
        .headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.ends_with(".PutItem"));
    if put && refuse_puts.load(std::sync::atomic::Ordering::SeqCst) {
        return Ok(http::Response::builder()
            .status(StatusCode::BAD_REQUEST)
            .header("content-type", "application/x-amz-json-1.0")
            .body(Full::new(Bytes::from_static(
                br#"{"__type":"com.amazon.coral.service#AccessDeniedException","Message":"injected: User is not authorized to perform: dynamodb:PutItem"}"#,
            )))?);
    }
    if failing.lock().unwrap().contains(&op) {
        return Ok(http::Response::builder()
            .status(StatusCode::BAD_REQUEST)
            .header("content-type", "application/x-amz-json-1.0")
            .body(Full::new(Bytes::from_static(
                br#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"injected: the partition is hot"}"#,
            )))?);
    }
    let uri = format!(
        "{upstream}{}",
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
    );
    let mut up = http::Request::builder().method(parts.method).uri(uri);
    for (k, v) in &parts.headers {
        up = up.header(k, v);
    }
    let response = client.request(up.body(Full::new(body))?).await?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(http::Response::from_parts(parts, Full::new(body)))
}

/// The in-process app on a DynamoDB ledger reached through `proxy`, with a lease of `lease_s`.
async fn app_through(proxy: &FaultProxy, table: &str, lease_s: u64, app: Option<App>) -> TestApp {
    let ledger = Arc::new(DynamoLedger::new(dynamodb_client(&proxy.url), table));
    spawn_app_with(Options {
        vars: vec![("DEDUP_LEASE_SECONDS", lease_s.to_string())],
        ledger: Some(ledger as Arc<dyn Ledger>),
        app,
    })
    .await
}

/// Sleeps until `from + d`.
async fn until(from: Instant, d: Duration) {
    tokio::time::sleep(d.saturating_sub(from.elapsed())).await;
}

// ================================================================ an early release keeps earlier claims' windows

/// Delivery 1 posts its answer (the claim stands for its intent: no intent write) but cannot
/// mark the event done (the completion is throttled): 200 `answered`, and the item keeps only
/// the claim's began window. Returns the app, the item key and when delivery 1 started.
async fn answered_but_not_marked_done(
    proxy: &FaultProxy,
    table: &str,
    direct: &DynamoLedger,
    lease_s: u64,
    body: &str,
    key: &str,
) -> (TestApp, Instant) {
    let app = app_through(proxy, table, lease_s, None).await;
    proxy.fail(Op::Complete);
    let t0 = Instant::now();
    let first = app.send(body, None).await;
    proxy.heal(Op::Complete);
    assert_eq!(first.outcome(), "answered", "{}", first.body);
    assert_eq!(app.slack.posted().len(), 1, "the answer is in Slack");
    let item = direct.get_item(key).await.unwrap().unwrap();
    assert_eq!(
        (
            s_of(&item, "status").as_str(),
            journal_len(&item),
            began_len(&item)
        ),
        ("in_progress", 0, 1),
        "only the claim's began window says a post may be out: {item:?}"
    );
    (app, t0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn a_takeover_released_before_its_listeners_ran_keeps_the_earlier_window_when_its_alias_write_fails()
 {
    let endpoint = dynamodb_endpoint();
    let (table, direct) = fresh_table(&endpoint).await;
    let proxy = FaultProxy::start(&endpoint).await;
    let id = "EvRtAliasThrottled";
    let body = with_cmid(
        &app_mention(id, "hello"),
        "c0ffee00-0000-4000-8000-000000000001",
    );
    let key = mention_key(id);
    let lease = 6;
    let (app, t0) = answered_but_not_marked_done(&proxy, &table, &direct, lease, &body, &key).await;

    // Slack's retry after the lease: the takeover claims the message (its journal shows the
    // earlier claim's window at step 1), but the alias item's partition is throttled.
    until(t0, Duration::from_millis(lease * 1000 + 300)).await;
    proxy.fail(Op::Alias);
    let second = app.send(&body, Some(1)).await;
    proxy.heal(Op::Alias);
    println!("retry 1: {} {}", second.status, second.body);
    assert!(!second.status.is_success(), "{}", second.body);
    let item = direct.get_item(&key).await.unwrap().unwrap();
    println!(
        "after retry 1: status={} journal={} began={}",
        s_of(&item, "status"),
        journal_len(&item),
        began_len(&item)
    );

    // Slack's next retry: the claim is released, and nothing says a post may be out.
    let third = app.send(&body, Some(2)).await;
    println!("retry 2: {} {}", third.status, third.body);
    println!("ledger writes: {:?}", proxy.seen());
    assert_eq!(
        third.outcome(),
        "recovered",
        "the release that ended retry 1's claim (its alias write failed) kept the earlier \
         claim's window as an intent: retry 2 looked and found the post ({})",
        third.body
    );
    assert_eq!(app.slack.posted().len(), 1, "no second answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn a_takeover_released_before_its_listeners_ran_keeps_the_earlier_window_when_an_old_version_holds_the_alias()
 {
    let endpoint = dynamodb_endpoint();
    let (table, direct) = fresh_table(&endpoint).await;
    let proxy = FaultProxy::start(&endpoint).await;
    let id = "EvRtAliasBusy";
    let cmid = "c0ffee00-0000-4000-8000-000000000002";
    let body = with_cmid(&app_mention(id, "hello"), cmid);
    let key = mention_key(id);
    let lease = 2;
    let (app, t0) = answered_but_not_marked_done(&proxy, &table, &direct, lease, &body, &key).await;

    // During a deploy, the version before pointers holds the client_msg_id as a live claim
    // (a copy of the message it is answering under another ts), for 3 s more.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    dynamodb_client(&endpoint)
        .put_item()
        .table_name(&table)
        .item("pk", AttributeValue::S(format!("cmid-{TEAM}-{cmid}")))
        .item("status", AttributeValue::S("in_progress".into()))
        .item("owner", AttributeValue::S("an-old-versions-claim".into()))
        .item(
            "lease_until",
            AttributeValue::N((now_ms + 3_000).to_string()),
        )
        .item(
            "expires_at",
            AttributeValue::N((now_ms / 1000 + 90_000).to_string()),
        )
        .item("attempts", AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap();

    until(t0, Duration::from_millis(lease * 1000 + 300)).await;
    let second = app.send(&body, Some(1)).await;
    println!("retry 1: {} {}", second.status, second.body);
    assert_eq!(second.status, StatusCode::CONFLICT, "{}", second.body);
    let item = direct.get_item(&key).await.unwrap().unwrap();
    println!(
        "after retry 1: status={} journal={} began={}",
        s_of(&item, "status"),
        journal_len(&item),
        began_len(&item)
    );

    // The old version's claim of the alias has ended; Slack's next retry.
    tokio::time::sleep(Duration::from_millis(3_300)).await;
    let third = app.send(&body, Some(2)).await;
    println!("retry 2: {} {}", third.status, third.body);
    assert_eq!(
        third.outcome(),
        "recovered",
        "the release after `Alias::Busy` kept the earlier claim's window: retry 2 looked ({})",
        third.body
    );
    assert_eq!(app.slack.posted().len(), 1, "no second answer");
}

// ================================================================ windows: a post Slack applies late, a clock ahead of Slack's, a moved first step

#[tokio::test]
async fn window_a_post_slack_applies_after_the_look_up_window_is_posted_again_by_a_later_retry() {
    let app = spawn_app_with(Options {
        vars: vec![("DEDUP_LEASE_SECONDS", "2".into())],
        ..Default::default()
    })
    .await;
    // Slack accepts the post and applies it 9 s later (an incident): the claimant gives up at
    // its deadline, not knowing.
    app.slack
        .script([SlackFailure::Slow(Duration::from_secs(9))]);
    let body = app_mention("EvRtLate", "x");
    let t0 = Instant::now();
    let first = app.send(&body, None).await;
    println!("first: {} {}", first.status, first.body);
    assert!(!first.status.is_success());
    assert!(
        eventually(Duration::from_secs(12), || app.slack.posted().len() == 1).await,
        "Slack applied the post"
    );
    println!("applied {:?} after the delivery", t0.elapsed());
    // Slack's retry arrives after the post is in the thread (its 1-minute retry would too).
    let retry = app.send(&body, Some(1)).await;
    println!(
        "retry: {}; look-ups: {:?}",
        retry.body,
        app.slack.lookup_queries()
    );
    assert_eq!(
        app.slack.posted().len(),
        2,
        "the documented window (RELIABILITY.md): the look-up searches only [intent − 5 s, lease \
         end + 5 s], the post Slack applied 9 s after the lease lies after it: posted again ({})",
        retry.body
    );
}

#[tokio::test]
async fn window_an_instance_clock_8s_ahead_of_slack_misses_its_earlier_post_and_answers_twice() {
    let app = spawn_app_with(Options {
        vars: vec![("DEDUP_LEASE_SECONDS", "2".into())],
        ..Default::default()
    })
    .await;
    // Slack's clock (the ts it gives posts) 8 s behind the instance's; the first post answers
    // `internal_error` but is posted (as Slack says it may be). The event's message is in the
    // channel as Slack would have it (the signed request puts it there).
    app.slack
        .with_workspace(|w| w.set_clock_behind(Duration::from_secs(8)));
    app.slack
        .script([SlackFailure::MadeThenCode("internal_error")]);
    let body = app_mention("EvRtSkew", "x");
    let first = app.send(&body, None).await;
    assert_eq!(first.status, StatusCode::BAD_GATEWAY, "{}", first.body);
    assert_eq!(
        app.slack.posted_count(),
        1,
        "posted although Slack said internal_error"
    );
    let retry = app.send(&body, Some(1)).await;
    println!(
        "retry: {}; look-ups: {:?}",
        retry.body,
        app.slack.lookup_queries()
    );
    assert_eq!(
        app.slack.posted_count(),
        2,
        "the documented window (RELIABILITY.md): the look-up window comes from the instance's \
         clock, compared with the ts Slack's clock gave the post; 8 s of skew (beyond the 5 s \
         margin) puts the post before `oldest`: posted again ({})",
        retry.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn window_a_nondeterministic_replay_that_moves_its_first_post_after_a_lost_completion_answers_twice()
 {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let proxy = FaultProxy::start(&endpoint).await;
    let runs = Arc::new(Mutex::new(0));
    let bot = App::new().message_where(|_: &MessageEvent| true, {
        let runs = runs.clone();
        move |ctx: Ctx, m: MessageEvent| {
            let runs = runs.clone();
            async move {
                let run = {
                    let mut runs = runs.lock().unwrap();
                    *runs += 1;
                    *runs
                };
                // The same write to another channel on the replay (with an ambiguous post,
                // `journal::a_replay_that_posts_to_another_channel_or_thread_ends_the_event_failed`
                // ends this `failed`, nondeterministic_listener).
                let channel = if run == 1 { "C0001" } else { "C0OTHER" };
                let _ = &m;
                ctx.post(channel, Message::text("x")).await?;
                Ok(())
            }
        }
    });
    let app = app_through(&proxy, &table, 2, Some(bot)).await;
    let ts = ts_of("EvRtMoved");
    let body = serde_json::json!({
        "token": "unused", "team_id": TEAM, "api_app_id": APP_ID, "type": "event_callback",
        "event_id": "EvRtMoved", "event_time": 1_700_000_000,
        "event": {"type": "message", "channel_type": "channel", "user": "U0001", "text": "x",
                  "ts": ts, "channel": "C0001", "event_ts": ts},
        "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": true}]
    })
    .to_string();
    proxy.fail(Op::Complete);
    let t0 = Instant::now();
    let first = app.send(&body, None).await;
    proxy.heal(Op::Complete);
    assert_eq!(first.outcome(), "answered", "{}", first.body);
    until(t0, Duration::from_millis(2_300)).await;
    let retry = app.send(&body, Some(1)).await;
    println!("retry: {}", retry.body);
    assert_eq!(
        (retry.outcome().as_str(), app.slack.posted().len()),
        ("answered", 2),
        "the documented window (README: a handler must make the same writes): the first step's \
         record is a began window with no identity, so a replay that moves it is not detected; \
         it is looked for in the new channel only, and made there ({})",
        retry.body
    );
}

// ================================================================ EVIDENCE: SDK retries of the new writes

/// EVIDENCE (passes): a takeover's claim whose answer is lost is sent again by the SDK; the
/// retry finds its own claim, drops only its own began window and still sees the earlier
/// claim's, looks, and finds the post.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn evidence_a_takeover_claim_sent_again_after_a_lost_answer_still_sees_the_earlier_window() {
    let endpoint = dynamodb_endpoint();
    let (table, direct) = fresh_table(&endpoint).await;
    let fault = FaultProxy::start(&endpoint).await;
    let drop = LedgerProxy::start(&fault.url).await;
    let app = spawn_app_on_ledger(
        &drop.url,
        table.clone(),
        vec![("DEDUP_LEASE_SECONDS", "2".into())],
    )
    .await;
    let id = "EvRtClaimAgain";
    let body = with_cmid(
        &app_mention(id, "x"),
        "c0ffee00-0000-4000-8000-000000000010",
    );
    fault.fail(Op::Complete);
    let t0 = Instant::now();
    assert_eq!(app.send(&body, None).await.outcome(), "answered");
    fault.heal(Op::Complete);
    until(t0, Duration::from_millis(2_300)).await;
    // The takeover's claim: the put that finds the item, then the update, whose answer is lost.
    drop.hold_nth(LedgerOp::Claim, 2, HoldAt::DropAnswer);
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(drop.held(), 1, "the claim's answer was dropped");
    assert_eq!(retry.outcome(), "recovered", "{}", retry.body);
    assert_eq!(app.slack.posted().len(), 1);
    let item = direct.get_item(&mention_key(id)).await.unwrap().unwrap();
    assert_eq!(
        (s_of(&item, "status").as_str(), began_len(&item)),
        ("done", 0)
    );
}

/// EVIDENCE (passes): the release that turns an unsettled earlier window into an intent (the
/// look-up was rate limited) loses its answer; the SDK's retry finds it applied, and the next
/// delivery looks in the window and finds the post.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn evidence_a_release_converting_the_window_whose_answer_is_lost_keeps_the_doubt() {
    let endpoint = dynamodb_endpoint();
    let (table, direct) = fresh_table(&endpoint).await;
    let fault = FaultProxy::start(&endpoint).await;
    let drop = LedgerProxy::start(&fault.url).await;
    let app = spawn_app_on_ledger(
        &drop.url,
        table.clone(),
        vec![("DEDUP_LEASE_SECONDS", "2".into())],
    )
    .await;
    let id = "EvRtReleaseLost";
    let body = app_mention(id, "x");
    fault.fail(Op::Complete);
    let t0 = Instant::now();
    assert_eq!(app.send(&body, None).await.outcome(), "answered");
    fault.heal(Op::Complete);
    until(t0, Duration::from_millis(2_300)).await;
    app.slack.script_lookups([SlackFailure::RateLimited(30)]);
    drop.hold_next(LedgerOp::Release, HoldAt::DropAnswer);
    let held_back = app.send(&body, Some(1)).await;
    assert_eq!(
        held_back.json()["error"],
        "slack_lookup_unavailable",
        "{}",
        held_back.body
    );
    assert_eq!(drop.held(), 1);
    let item = direct.get_item(&mention_key(id)).await.unwrap().unwrap();
    println!("after the release: {item:?}");
    assert_eq!(s_of(&item, "status"), "released");
    assert_eq!(journal_len(&item), 1, "the window is kept as an intent");
    let retry = app.send(&body, Some(2)).await;
    assert_eq!(retry.outcome(), "recovered", "{}", retry.body);
    assert_eq!(app.slack.posted().len(), 1);
}

/// EVIDENCE (passes): the alias write whose answer is lost is sent again and finds itself;
/// two copies of one message under two `ts` (one client_msg_id) delivered at once, with
/// retries, get one answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn evidence_alias_sent_again_and_copies_under_two_ts_at_once_answer_once() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let fault = FaultProxy::start(&endpoint).await;
    let drop = LedgerProxy::start(&fault.url).await;
    let app = Arc::new(spawn_app_on_ledger(&drop.url, table.clone(), vec![]).await);
    drop.hold_next(LedgerOp::Alias, HoldAt::DropAnswer);
    let body = with_cmid(
        &app_mention("EvRtAliasAgain", "x"),
        "c0ffee00-0000-4000-8000-0000000000aa",
    );
    assert_eq!(app.send(&body, None).await.outcome(), "answered");
    assert_eq!(drop.held(), 1);
    assert_eq!(app.send(&body, Some(1)).await.outcome(), "duplicate");
    assert_eq!(app.slack.posted().len(), 1);

    for n in 0..8 {
        let cmid = format!("c0ffee00-0000-4000-8000-0000000001{n:02}");
        let a = with_cmid(&app_mention(&format!("EvRtTwoTsA{n}"), "x"), &cmid);
        let b = with_cmid(&app_mention(&format!("EvRtTwoTsB{n}"), "x"), &cmid);
        let mut tasks = Vec::new();
        for (body, retry) in [(&a, None), (&b, None), (&a, Some(1)), (&b, Some(1))] {
            let (app, body) = (app.clone(), body.clone());
            tasks.push(tokio::spawn(
                async move { app.send(&body, retry).await.status },
            ));
        }
        for t in tasks {
            let status = t.await.unwrap();
            assert!(matches!(status.as_u16(), 200 | 409), "{status}");
        }
        for body in [&a, &b] {
            let later = app.send(body, Some(2)).await;
            assert!(
                matches!(later.outcome().as_str(), "duplicate"),
                "{}",
                later.body
            );
        }
    }
    let posted = app.slack.posted();
    assert_eq!(
        posted.len(),
        1 + 8,
        "one answer per message: {}",
        posted.len()
    );
}

/// A role that allows only `UpdateItem` on the ledger (a deploy whose new policy has not reached
/// IAM yet, or a role kept outside the template): every put is refused, and the claims and the
/// alias take the update instead. Answered once, a duplicate found, a copy under another `ts`
/// found a copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn a_role_without_put_item_still_claims_through_the_update() {
    let endpoint = dynamodb_endpoint();
    let (table, direct) = fresh_table(&endpoint).await;
    let fault = FaultProxy::start(&endpoint).await;
    fault.refuse_puts();
    let ledger = Arc::new(DynamoLedger::new(
        dynamodb_client(&fault.url),
        table.clone(),
    ));
    let app = spawn_app_with(Options {
        ledger: Some(ledger as Arc<dyn Ledger>),
        ..Default::default()
    })
    .await;
    let cmid = "c0ffee00-0000-4000-8000-0000000000dd";
    let body = with_cmid(&app_mention("EvNoPutItem", "hello"), cmid);
    assert_eq!(app.send(&body, None).await.outcome(), "answered");
    assert_eq!(app.send(&body, Some(1)).await.outcome(), "duplicate");
    let copy = with_cmid(&app_mention("EvNoPutItemCopy", "hello"), cmid);
    assert_eq!(app.send(&copy, None).await.outcome(), "duplicate");
    assert_eq!(app.slack.posted().len(), 1);
    let item = direct
        .get_item(&mention_key("EvNoPutItem"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s_of(&item, "status"), "done");
    assert!(
        fault.seen().iter().filter(|op| **op == Op::Claim).count() >= 4,
        "each claim was a refused put and an update: {:?}",
        fault.seen()
    );
}

#[tokio::test]
async fn a_takeover_whose_earlier_claim_never_reached_its_post_does_not_look_in_slack() {
    let app = spawn_app_with(Options {
        vars: vec![("DEDUP_LEASE_SECONDS", "2".into())],
        ..Default::default()
    })
    .await;
    // Look-ups would fail: a takeover that needed one could not answer.
    app.slack.fail_lookups("ratelimited");
    // A 429 longer than the lease: the post certainly did not happen.
    app.slack.script([SlackFailure::RateLimited(30)]);
    let body = app_mention("EvNoLook", "x");
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(retry.outcome(), "answered", "{}", retry.body);
    assert!(
        app.slack.lookup_queries().is_empty(),
        "nothing could be in Slack: no look-up"
    );
    assert_eq!(app.slack.posted().len(), 1);
}

#[tokio::test]
async fn a_bot_failure_before_the_post_leaves_nothing_to_look_for() {
    // A listener whose own work fails the first time (an LLM call timing out), before it posts.
    let failed = Arc::new(Mutex::new(false));
    let bot = App::new().app_mention(move |ctx: Ctx, _m: AppMention| {
        let failed = failed.clone();
        async move {
            let first = !std::mem::replace(&mut *failed.lock().unwrap(), true);
            if first {
                return Err("the model timed out".into());
            }
            ctx.reply("second try").await?;
            Ok(())
        }
    });
    let app = spawn_bot(bot).await;
    app.slack.fail_lookups("ratelimited");
    let body = app_mention("EvBotFails", "x");
    assert_eq!(
        app.send(&body, None).await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(app.send(&body, Some(1)).await.outcome(), "answered");
    assert!(app.slack.lookup_queries().is_empty());
    assert_eq!(app.slack.posted().len(), 1);
}

#[tokio::test]
async fn a_takeover_that_cannot_look_holds_back_on_every_retry_and_never_posts_blind() {
    let app = spawn_app().await;
    // internal_error: the post may have gone through (here it did not).
    app.slack.script([SlackFailure::Code("internal_error")]);
    app.slack.fail_lookups("ratelimited");
    let body = app_mention("EvHoldBack", "x");
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    for retry in [1, 2] {
        let answer = app.send(&body, Some(retry)).await;
        assert_eq!(
            (answer.status, answer.json()["error"].as_str()),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Some("slack_lookup_unavailable")
            ),
            "retry {retry}: {}",
            answer.body
        );
        assert_eq!(
            app.slack.posted().len(),
            0,
            "retry {retry}: nothing posted blind"
        );
    }
    // The last retry: no delivery follows, and still no post without a look-up. The event
    // ends failed, retryable (a redrive may look again).
    let last = app.send(&body, Some(3)).await;
    assert_eq!(
        (last.status, last.json()["error"].as_str()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Some("slack_lookup_unavailable")
        ),
        "{}",
        last.body
    );
    assert_eq!(app.slack.posted().len(), 0, "nothing posted blind");
    assert_eq!(app.slack.lookup_queries().len(), 3);
}

#[tokio::test]
async fn a_look_up_refused_once_is_made_again_by_the_next_delivery() {
    let app = spawn_app().await;
    app.slack
        .script([SlackFailure::MadeThenCode("internal_error")]);
    app.slack
        .script_lookups([SlackFailure::Code("missing_scope")]);
    let body = app_mention("EvLookAgain", "x");
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    assert_eq!(
        app.send(&body, Some(1)).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let retry = app.send(&body, Some(2)).await;
    assert_eq!(retry.outcome(), "recovered", "{}", retry.body);
    assert_eq!(app.slack.posted().len(), 1, "no second answer");
}

#[tokio::test]
async fn a_rate_limited_look_up_is_waited_out_within_the_deadline() {
    let app = spawn_app().await;
    app.slack
        .script([SlackFailure::MadeThenCode("internal_error")]);
    app.slack.script_lookups([SlackFailure::RateLimited(1)]);
    let body = app_mention("EvLookWait", "x");
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    let started = Instant::now();
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(retry.outcome(), "recovered", "{}", retry.body);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After honoured"
    );
    assert_eq!(app.slack.lookup_queries().len(), 2);
    assert_eq!(app.slack.posted().len(), 1);
}

#[tokio::test]
async fn a_look_up_longer_than_the_deadline_allows_is_held_back() {
    let app = spawn_app_with(Options {
        vars: vec![("DEDUP_LEASE_SECONDS", "2".into())],
        ..Default::default()
    })
    .await;
    app.slack
        .script([SlackFailure::MadeThenCode("fatal_error")]);
    app.slack.script_lookups([SlackFailure::RateLimited(60)]);
    let body = app_mention("EvLookTooLong", "x");
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    let started = Instant::now();
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(
        retry.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        retry.body
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "not waited past the lease"
    );
    assert_eq!(app.slack.posted().len(), 1, "no second answer");
}

/// The window a look-up searches beyond the earlier claim's intent and lease (see
/// `app::context`): tests that need a message outside it wait this long past the lease.
const LOOKUP_MARGIN: Duration = Duration::from_secs(5);

fn ms_of(ts: &str) -> u64 {
    (slack_once::testing::micros(ts).unwrap() / 1000) as u64
}

/// An app whose first post of `EvX` is ambiguous (Slack says `internal_error`; `posted` says
/// whether it went through), with a 2 s lease.
async fn ambiguous_first_post(posted: bool) -> TestApp {
    let app = spawn_app_with(Options {
        vars: vec![("DEDUP_LEASE_SECONDS", "2".into())],
        ..Default::default()
    })
    .await;
    app.slack.script([if posted {
        SlackFailure::MadeThenCode("internal_error")
    } else {
        SlackFailure::Code("internal_error")
    }]);
    app
}

#[tokio::test]
async fn a_look_up_in_a_busy_thread_is_one_call_within_the_earlier_claims_window() {
    let app = ambiguous_first_post(true).await;
    app.slack.limit_lookups_per_minute(1);
    let body = app_mention("EvBusyThread", "x");
    let started = Instant::now();
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    // Forty newer messages in the thread, after the earlier claim's lease (and the margin).
    tokio::time::sleep(
        (Duration::from_secs(2) + LOOKUP_MARGIN + Duration::from_millis(500))
            .saturating_sub(started.elapsed()),
    )
    .await;
    let thread = ts_of("EvBusyThread");
    app.slack.add_other_messages("C0001", Some(&thread), 40);
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(retry.outcome(), "recovered", "{}", retry.body);
    let queries = app.slack.lookup_queries();
    assert_eq!(queries.len(), 1, "one call settles it: {queries:?}");
    let q = &queries[0];
    assert_eq!(q["ts"], thread, "the reply's thread");
    // Exclusive bounds: a next page goes on past the last `ts` read.
    assert_eq!(q["limit"], "15");
    assert_eq!(q.get("inclusive"), None);
    assert_eq!(q["include_all_metadata"], "true");
    let (oldest, latest) = (ms_of(&q["oldest"]), ms_of(&q["latest"]));
    let posted = ms_of(&app.slack.posted()[0].ts);
    assert!(
        oldest <= posted && posted <= latest,
        "the post lies in the window"
    );
    assert!(
        latest - oldest <= 2_000 + 2 * LOOKUP_MARGIN.as_millis() as u64 + 500,
        "the window spans the earlier claim's lease and the margins: {oldest}..{latest}"
    );
    assert_eq!(app.slack.posted().len(), 1);
}

#[tokio::test]
async fn a_look_up_that_needs_a_second_page_under_one_call_a_minute_holds_back_rather_than_post() {
    let app = ambiguous_first_post(true).await;
    app.slack.limit_lookups_per_minute(1);
    let thread = ts_of("EvSecondPage");
    let body = app_mention("EvSecondPage", "x");
    // Twenty replies in the thread inside the window, before the reply: it is on page 2.
    app.slack.add_other_messages("C0001", Some(&thread), 20);
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    let started = Instant::now();
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(
        (retry.status, retry.json()["error"].as_str()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Some("slack_lookup_unavailable")
        ),
        "{}",
        retry.body
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "not waited past the lease"
    );
    assert_eq!(
        app.slack.lookup_queries().len(),
        2,
        "page 1, then the 429 of page 2"
    );
    assert_eq!(app.slack.posted().len(), 1, "held back: no second answer");
}

#[tokio::test]
async fn a_look_up_in_a_busy_dm_is_one_call_within_the_earlier_claims_window() {
    let app = ambiguous_first_post(true).await;
    app.slack.limit_lookups_per_minute(1);
    let body = direct_message("EvDmWindow", "U0001", "ping");
    let before = now_unix() * 1000;
    let started = Instant::now();
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    // Forty newer messages in the DM, after the earlier claim's window: history is newest
    // first, so without `latest` the answer would be on the third page of 15.
    tokio::time::sleep(
        (Duration::from_secs(2) + LOOKUP_MARGIN + Duration::from_millis(500))
            .saturating_sub(started.elapsed()),
    )
    .await;
    app.slack.add_other_messages("D0001", None, 40);
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(retry.outcome(), "recovered", "{}", retry.body);
    let queries = app.slack.lookup_queries();
    assert_eq!(queries.len(), 1, "one call under 1 a minute: {queries:?}");
    let q = &queries[0];
    assert!(!q.contains_key("ts"), "a DM reply is not in a thread");
    let (oldest, latest) = (ms_of(&q["oldest"]), ms_of(&q["latest"]));
    assert!(
        oldest + LOOKUP_MARGIN.as_millis() as u64 >= before,
        "nothing before the earlier claim"
    );
    assert!(latest > oldest);
    assert!(
        oldest > ms_of(&ts_of("EvDmWindow")),
        "messages older than the claim are never searched"
    );
    assert_eq!(app.slack.posted().len(), 1);
}

/// The metadata slack-once puts on step 1 of the claim keyed `key` (event `event_id`).
fn our_metadata(key: &str, event_id: &str) -> serde_json::Value {
    serde_json::json!({
        "event_type": "slack_once_reply",
        "event_payload": {"slack_once": {"key": key, "event_id": event_id, "step": 1, "attempt": 1}}
    })
}

#[tokio::test]
async fn another_apps_message_carrying_our_metadata_is_never_taken_for_ours() {
    let app = ambiguous_first_post(false).await;
    let id = "EvForeign";
    let body = app_mention(id, "x");
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    // A staging bot in the same channel shares the keys; any app with chat:write can write this.
    let thread = ts_of(id);
    app.slack
        .add_foreign_message("C0001", Some(&thread), our_metadata(&mention_key(id), id));
    app.slack.add_foreign_message(
        "C0001",
        Some(&thread),
        serde_json::json!({"event_type": "slack_once_reply", "event_payload": {"event_id": mention_key(id)}}),
    );
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(retry.outcome(), "answered", "{}", retry.body);
    assert_eq!(
        app.slack.lookup_queries().len(),
        1,
        "it looked, and found only another app's"
    );
    let ours = app.slack.posted();
    assert_eq!(ours.len(), 1, "our one answer");
    assert_eq!(ours[0].body["app_id"], APP_ID);
}

#[tokio::test]
async fn a_post_to_a_user_is_looked_for_in_their_dm() {
    let bot = App::new().message_where(
        |_: &MessageEvent| true,
        |ctx: Ctx, m: MessageEvent| async move {
            let user = m.user.clone().unwrap_or_default();
            ctx.post(&user, "a word in private").await?;
            Ok(())
        },
    );
    let app = spawn_app_with(Options {
        app: Some(bot),
        vars: vec![("DEDUP_LEASE_SECONDS", "2".into())],
        ..Default::default()
    })
    .await;
    app.slack
        .script([SlackFailure::MadeThenCode("internal_error")]);
    let body = direct_message("EvToUser", "U0777", "hello")
        .replace("D0001", "C0001")
        .replace("\"im\"", "\"channel\"");
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(retry.outcome(), "recovered", "{}", retry.body);
    assert_eq!(
        app.slack.calls_of("conversations.open"),
        1,
        "the user's DM, resolved first"
    );
    let queries = app.slack.lookup_queries();
    assert_eq!(queries.len(), 1);
    assert_eq!(
        queries[0]["channel"], "DU0777",
        "looked in the DM, not at the user id"
    );
    assert_eq!(app.slack.posted().len(), 1);
}

#[tokio::test]
async fn an_event_that_names_neither_the_app_nor_its_bot_user_never_takes_a_message_for_its_own() {
    let app = ambiguous_first_post(true).await;
    let mut body: serde_json::Value = serde_json::from_str(&app_mention("EvNoApp", "x")).unwrap();
    body.as_object_mut().unwrap().remove("api_app_id");
    body.as_object_mut().unwrap().remove("authorizations");
    let body = body.to_string();
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(
        (retry.status, retry.json()["error"].as_str()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Some("slack_lookup_unavailable")
        ),
        "it cannot tell its messages from others': held back, {}",
        retry.body
    );
    assert_eq!(app.slack.posted().len(), 1);
}
