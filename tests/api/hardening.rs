//! The production review's findings, each injected: lost DynamoDB answers that the SDK sends
//! again, takeovers that must not post blind, Slack errors no retry can fix, slow and vanishing
//! clients, the answer's margin on Lambda, and the smaller ones.

use std::io::{Read, Write};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::StatusCode;
use slack_once::app::{App, AppMention, Ctx};
use slack_once::ledger::{DynamoLedger, Ledger, MemoryLedger, Status};

use crate::helpers::*;

// ---------------------------------------------------------------- 1. a lost answer is our own

/// The built binary, its ledger behind the proxy, so the SDK's own retry configuration meets
/// the lost answer.
async fn behind_proxy(
    lease: &str,
) -> (
    SlackStandin,
    LedgerProxy,
    BotProcess,
    Arc<DynamoLedger>,
    String,
) {
    let endpoint = dynamodb_endpoint();
    let (table, ledger) = fresh_table(&endpoint).await;
    let slack = SlackStandin::start().await;
    let proxy = LedgerProxy::start(&endpoint).await;
    let mut vars = bot_vars(&slack, &proxy.url, &table);
    vars.push(("DEDUP_LEASE_SECONDS", lease.to_string()));
    let bot = BotProcess::spawn(&vars);
    (slack, proxy, bot, ledger, table)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_answer_was_lost_is_this_deliverys_own_and_answered_once() {
    for (n, at) in [HoldAt::DropAnswer, HoldAt::Error500AfterForwarding]
        .into_iter()
        .enumerate()
    {
        let (slack, proxy, bot, ledger, _) = behind_proxy("20").await;
        proxy.hold_next(LedgerOp::Claim, at);
        let id = format!("EvLostClaim{n}");
        let http = HttpClient::default();
        let answer = deliver(&http, &bot.url(), &app_mention(&id, "hi"), None).await;
        assert_eq!(
            (answer.status, answer.outcome().as_str()),
            (StatusCode::OK, "answered"),
            "{at:?}: {}\n{}",
            answer.body,
            bot.log()
        );
        assert_eq!(proxy.held(), 1, "{at:?}: the answer was lost once");
        let claims = proxy
            .seen()
            .iter()
            .filter(|&&op| op == LedgerOp::Claim)
            .count();
        assert_eq!(claims, 2, "{at:?}: the SDK sent the claim again");
        assert_eq!(slack.posted().len(), 1, "{at:?}");
        let item = ledger.get_item(&mention_key(&id)).await.unwrap().unwrap();
        assert_eq!(item["status"].as_s().unwrap(), "done", "{at:?}");
        assert_eq!(item["attempts"].as_n().unwrap(), "1", "{at:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_whose_answer_was_lost_is_success_not_an_error() {
    let (slack, proxy, bot, ledger, _) = behind_proxy("20").await;
    proxy.hold_next(LedgerOp::Complete, HoldAt::DropAnswer);
    let http = HttpClient::default();
    let answer = deliver(&http, &bot.url(), &app_mention("EvLostDone", "hi"), None).await;
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);
    assert_eq!(proxy.held(), 1);
    let log = bot.log_after(1).await;
    assert!(!log.contains("could not be marked done"), "{log}");
    let item = ledger
        .get_item(&mention_key("EvLostDone"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(item["status"].as_s().unwrap(), "done");
    let retry = deliver(&http, &bot.url(), &app_mention("EvLostDone", "hi"), Some(1)).await;
    assert_eq!(retry.outcome(), "duplicate");
    assert_eq!(slack.posted().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_answer_was_lost_is_success_and_the_retry_takes_over_at_once() {
    let (slack, proxy, bot, ledger, _) = behind_proxy("20").await;
    // A 429 longer than the lease: certainly not posted, released.
    slack.script([Behaviour::RateLimited(60)]);
    proxy.hold_next(LedgerOp::Release, HoldAt::DropAnswer);
    let http = HttpClient::default();
    let body = app_mention("EvLostRelease", "hi");
    let answer = deliver(&http, &bot.url(), &body, None).await;
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY, "{}", answer.body);
    assert_eq!(proxy.held(), 1);
    let log = bot.log_after(1).await;
    assert!(!log.contains("could not release"), "{log}");
    let item = ledger
        .get_item(&mention_key("EvLostRelease"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(item["status"].as_s().unwrap(), "released");
    let retry = deliver(&http, &bot.url(), &body, Some(1)).await;
    assert_eq!(retry.outcome(), "answered", "{}", retry.body);
    assert_eq!(slack.posted().len(), 1);
}

// ---------------------------------------------------------------- 2. no blind takeover

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
    app.slack.script([Behaviour::RateLimited(30)]);
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
    app.slack.script([Behaviour::OkFalse {
        code: "internal_error",
        posted: false,
    }]);
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
    app.slack.script([Behaviour::OkFalse {
        code: "internal_error",
        posted: true,
    }]);
    app.slack
        .script_lookups([LookupBehaviour::Error("missing_scope")]);
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
    app.slack.script([Behaviour::OkFalse {
        code: "internal_error",
        posted: true,
    }]);
    app.slack.script_lookups([LookupBehaviour::RateLimited(1)]);
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
    app.slack.script([Behaviour::OkFalse {
        code: "fatal_error",
        posted: true,
    }]);
    app.slack.script_lookups([LookupBehaviour::RateLimited(60)]);
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

// ---------------------------------------------------------------- 3. errors no retry fixes

#[tokio::test]
async fn slack_errors_no_retry_can_fix_end_the_event_failed_with_200() {
    for code in [
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "msg_too_long",
        "no_text",
        "invalid_blocks",
        "restricted_action",
        "invalid_auth",
        "account_inactive",
        "token_revoked",
        "missing_scope",
    ] {
        let ledger = Arc::new(MemoryLedger::new());
        let app = spawn_app_with(Options {
            ledger: Some(ledger.clone() as Arc<dyn Ledger>),
            ..Default::default()
        })
        .await;
        app.slack.script([Behaviour::OkFalse {
            code,
            posted: false,
        }]);
        let body = app_mention("EvFail", "x");
        let answer = app.send(&body, None).await;
        assert_eq!(
            (answer.status, answer.outcome().as_str()),
            (StatusCode::OK, "failed"),
            "{code}: {}",
            answer.body
        );
        assert!(answer.headers.get("x-slack-no-retry").is_none());
        let id = slack_once::slack::envelope::EventId::try_from(mention_key("EvFail")).unwrap();
        assert_eq!(ledger.status(&id), Some(Status::Failed), "{code}");
        for retry in 1..=3 {
            let copy = app.send(&body, Some(retry)).await;
            assert_eq!(
                (copy.status, copy.outcome().as_str()),
                (StatusCode::OK, "already_failed"),
                "{code}"
            );
        }
        assert_eq!(app.slack.received().len(), 1, "{code}: the bot ran once");
    }
}

#[tokio::test]
async fn transient_slack_errors_still_release_for_the_next_copy() {
    for behaviour in [
        Behaviour::Status(500),
        Behaviour::Status(503),
        Behaviour::OkFalse {
            code: "internal_error",
            posted: false,
        },
        Behaviour::OkFalse {
            code: "fatal_error",
            posted: false,
        },
        Behaviour::OkFalse {
            code: "ratelimited",
            posted: false,
        },
        Behaviour::OkFalse {
            code: "service_unavailable",
            posted: false,
        },
    ] {
        let app = spawn_app().await;
        app.slack.script([behaviour.clone()]);
        let body = app_mention("EvTransient", "x");
        let answer = app.send(&body, None).await;
        assert_eq!(answer.status, StatusCode::BAD_GATEWAY, "{behaviour:?}");
        assert_eq!(answer.json()["error"], "slack_failed");
        let retry = app.send(&body, Some(1)).await;
        assert_eq!(retry.outcome(), "answered", "{behaviour:?}: {}", retry.body);
        assert_eq!(app.slack.posted().len(), 1, "{behaviour:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_event_is_logged_at_error_level_with_its_id_and_slacks_error() {
    let endpoint = dynamodb_endpoint();
    let (table, ledger) = fresh_table(&endpoint).await;
    let slack = SlackStandin::start().await;
    slack.script([Behaviour::OkFalse {
        code: "is_archived",
        posted: false,
    }]);
    let bot = BotProcess::spawn(&bot_vars(&slack, &endpoint, &table));
    let http = HttpClient::default();
    let answer = deliver(&http, &bot.url(), &app_mention("EvArchived", "x"), None).await;
    assert_eq!(answer.outcome(), "failed");
    let item = ledger
        .get_item(&mention_key("EvArchived"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(item["status"].as_s().unwrap(), "failed");
    assert_eq!(item["error"].as_s().unwrap(), "is_archived");
    let log = bot.log_after(1).await;
    let line = log
        .lines()
        .find(|l| l.contains("ERROR") && l.contains("is_archived"))
        .unwrap_or_else(|| panic!("no error line naming the Slack error:\n{log}"));
    assert!(line.contains("EvArchived"), "{line}");
}

// ---------------------------------------------------------------- 4. every real event shape

/// An event as the bot saw it: type, user, channel, the raw event.
type Seen = (String, Option<String>, Option<String>, serde_json::Value);

/// An app that records what each event looked like to it, and writes nothing.
fn recorder() -> (App, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = App::new().any_event({
        let seen = seen.clone();
        move |_ctx, e| {
            seen.lock().unwrap().push((
                e.kind.clone(),
                e.user.clone(),
                e.channel.clone(),
                e.raw.clone(),
            ));
            async { Ok(()) }
        }
    });
    (app, seen)
}

#[tokio::test]
async fn every_documented_event_shape_is_accepted_and_reaches_the_bot_whole() {
    let (bot, recorder) = recorder();
    let app = spawn_bot(bot).await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/events");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 12, "at least twelve event types: {files:?}");
    for file in &files {
        let body = std::fs::read_to_string(file).unwrap();
        let sent: serde_json::Value = serde_json::from_str(&body).unwrap();
        let answer = app.send(&body, None).await;
        assert_eq!(
            answer.status,
            StatusCode::OK,
            "{}: {}",
            file.display(),
            answer.body
        );
        assert_eq!(answer.outcome(), "no_reply", "{}", file.display());
        let seen = recorder.lock().unwrap().last().cloned().unwrap();
        assert_eq!(seen.0, sent["event"]["type"].as_str().unwrap());
        assert_eq!(seen.3, sent["event"], "{}: the whole event", file.display());
    }
    let seen = recorder.lock().unwrap().clone();
    let by_kind = |kind: &str| seen.iter().find(|s| s.0 == kind).cloned().unwrap();
    // Object-valued fields read as ids.
    assert_eq!(by_kind("team_join").1.as_deref(), Some("W0NEWUSER"));
    assert_eq!(by_kind("user_change").1.as_deref(), Some("U0CHANGED"));
    assert_eq!(by_kind("channel_created").2.as_deref(), Some("C0NEWCHAN"));
    assert_eq!(by_kind("channel_rename").2.as_deref(), Some("C0RENAMED"));
    assert_eq!(by_kind("im_created").2.as_deref(), Some("D0NEWIM"));
    assert_eq!(by_kind("reaction_added").2.as_deref(), Some("C0789CHAN"));
    assert_eq!(app.slack.received().len(), 0);
}

#[tokio::test]
async fn only_an_envelope_without_what_the_protocol_needs_is_refused() {
    let app = spawn_app().await;
    for body in [
        r#"{"type":"event_callback","event":{"type":"team_join","user":{"id":"W1"}}}"#,
        r#"{"type":"event_callback","event_id":"Ev1","event":{"user":{"id":"W1"}}}"#,
        r#"{"event_id":"Ev1","event":{"type":"team_join"}}"#,
    ] {
        let answer = app.send(body, None).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body}");
    }
    // Odd types in fields the protocol does not need are no reason to refuse.
    let odd = r#"{"type":"event_callback","event_id":"EvOdd","team_id":7,"event_time":"later",
        "authorizations":{"x":1},"event":{"type":"app_mention","user":{"id":"U1"},"ts":1,
        "channel":"C1","text":"<@UBOT> hi"}}"#;
    let answer = app.send(odd, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
}

// ---------------------------------------------------------------- 5. slow and vanishing clients

#[tokio::test]
async fn a_delivery_whose_client_went_away_still_completes_its_claim() {
    let app = spawn_app_with(Options {
        vars: vec![("DEDUP_LEASE_SECONDS", "20".into())],
        ..Default::default()
    })
    .await;
    app.slack
        .script([Behaviour::Delay(Duration::from_millis(1500))]);
    let body = app_mention("EvGone", "x");
    // Slack gives up (here after 300 ms) and closes the connection.
    let gone = tokio::time::timeout(Duration::from_millis(300), app.send(&body, None)).await;
    assert!(gone.is_err(), "the client left before the answer");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // The claim was completed, not left to block the event until its lease ends.
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(retry.outcome(), "duplicate", "{}", retry.body);
    assert_eq!(app.slack.posted().len(), 1);
}

/// Opens a connection and sends the start of a request head, never the rest.
fn slowloris(addr: std::net::SocketAddr) -> std::net::TcpStream {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"POST /slack/events HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .unwrap();
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_never_finished_is_cut_off_after_the_header_timeout() {
    let bot = BotProcess::spawn(&[]);
    let mut stream = slowloris(bot.addr);
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let started = Instant::now();
    let mut buf = Vec::new();
    let _ = stream.read_to_end(&mut buf);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(15),
        "closed after {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_never_finished_gets_408_after_the_body_timeout() {
    let bot = BotProcess::spawn(&[]);
    let mut stream = std::net::TcpStream::connect(bot.addr).unwrap();
    stream
        .write_all(
            b"POST /slack/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"type\":",
        )
        .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut buf = [0u8; 512];
    let n = stream.read(&mut buf).unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_capped_and_a_freed_slot_serves_the_next() {
    let bot = BotProcess::spawn(&[("MAX_CONNECTIONS", "2".to_string())]);
    let first = slowloris(bot.addr);
    let _second = slowloris(bot.addr);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let http = HttpClient::default();
    let url = format!("http://{}/healthz", bot.addr);
    let waiting = {
        let (http, url) = (http.clone(), url.clone());
        tokio::spawn(async move { http.request("GET", &url, &[], "").await })
    };
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        !waiting.is_finished(),
        "a third connection waits for a slot"
    );
    drop(first);
    let answer = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("served once a slot was freed")
        .unwrap();
    assert_eq!(answer.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_does_not_wait_on_slow_clients() {
    let bot = BotProcess::spawn(&[]);
    let _slow: Vec<_> = (0..3).map(|_| slowloris(bot.addr)).collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    bot.terminate();
    let (code, log) = bot.exited().await;
    assert_eq!(code, Some(0), "{}", log);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "exited after {:?}",
        started.elapsed()
    );
}

// ---------------------------------------------------------------- 7. the smaller ones

#[tokio::test]
async fn the_reference_bot_never_pings_a_channel_or_a_group() {
    let app = spawn_app().await;
    let body = app_mention(
        "EvPing",
        "<!channel> <!here> <!subteam^S0123|@oncall> wake up",
    );
    assert_eq!(app.send(&body, None).await.outcome(), "answered");
    let text = app.slack.posted()[0].body["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!text.contains("<!"), "{text}");
    assert!(text.contains("wake up"), "{text}");
}

#[tokio::test]
async fn the_bot_user_is_the_authorization_marked_is_bot_not_the_first() {
    let app = spawn_app().await;
    let envelope = |id: &str, user: &str| {
        serde_json::json!({
            "type": "event_callback", "team_id": "T0001", "event_id": id,
            "event": {"type": "message", "channel_type": "im", "user": user, "text": "hi",
                      "ts": "1700000000.000300", "channel": "D0001"},
            "authorizations": [
                {"team_id": "T0001", "user_id": "U0001", "is_bot": false},
                {"team_id": "T0001", "user_id": BOT_USER, "is_bot": true}
            ]
        })
        .to_string()
    };
    assert_eq!(
        app.send(&envelope("EvHuman", "U0001"), None)
            .await
            .outcome(),
        "answered",
        "a person whose authorization comes first is answered"
    );
    assert_eq!(
        app.send(&envelope("EvSelf", BOT_USER), None)
            .await
            .outcome(),
        "skipped",
        "the bot's own message is not"
    );
}

#[test]
fn a_lease_longer_than_slacks_one_minute_retry_allows_is_refused_at_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_slack-once"))
        .env_clear()
        .env("SLACK_SIGNING_SECRET", "s")
        .env("DEDUP_LEASE_SECONDS", "60")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("DEDUP_LEASE_SECONDS is invalid"), "{text}");
    assert!(text.contains("one-minute retry"), "{text}");
}

/// A claim's write to its item met a transaction under way on it (a state change of the same
/// request, recorded with the claim): DynamoDB refuses with `TransactionConflictException`,
/// which the SDK does not send again. The claim, a step's intent and the completion each send
/// it again a few ms later: the request is answered once, never released or failed for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_meets_a_transaction_on_its_item_is_sent_again() {
    for (n, op) in [LedgerOp::Claim, LedgerOp::Intent, LedgerOp::Complete]
        .into_iter()
        .enumerate()
    {
        let (slack, proxy, bot, ledger, _) = behind_proxy("20").await;
        proxy.hold_next(op, HoldAt::TransactionConflict);
        let id = format!("EvConflict{n}");
        let http = HttpClient::default();
        // The reference bot's /once: its answer through the response URL is a step with an
        // intent of its own, after the claim.
        let body = match op {
            LedgerOp::Intent => command_form(&slack, "/once", "hi"),
            _ => app_mention(&id, "hi"),
        };
        let answer = match op {
            LedgerOp::Intent => deliver_form(&http, &bot.url(), &body, None).await,
            _ => deliver(&http, &bot.url(), &body, None).await,
        };
        assert_eq!(
            answer.status,
            StatusCode::OK,
            "{op:?}: {}\n{}",
            answer.body,
            bot.log()
        );
        assert_eq!(proxy.held(), 1, "{op:?}: refused once");
        let sent = proxy.seen().iter().filter(|&&o| o == op).count();
        assert!(sent >= 2, "{op:?}: sent again ({sent})");
        if op == LedgerOp::Intent {
            // Acknowledged, then answered in the channel through the response URL: its claim
            // done.
            let client = dynamodb_client(&dynamodb_endpoint());
            let done = eventually_async(Duration::from_secs(10), || async {
                let page = client
                    .scan()
                    .table_name(ledger.table())
                    .send()
                    .await
                    .unwrap();
                page.items().iter().any(|i| {
                    i["pk"].as_s().unwrap().starts_with("cmd-")
                        && i.get("status")
                            .and_then(|v| v.as_s().ok())
                            .map(String::as_str)
                            == Some("done")
                })
            })
            .await;
            assert!(done, "{}", bot.log());
        } else {
            assert_eq!(answer.outcome(), "answered", "{op:?}: {}", answer.body);
            assert_eq!(slack.posted().len(), 1, "{op:?}");
            let item = ledger.get_item(&mention_key(&id)).await.unwrap().unwrap();
            assert_eq!(item["status"].as_s().unwrap(), "done", "{op:?}");
        }
    }
}
