//! The performance issue's review (red team 16), each finding staged against DynamoDB Local,
//! the Slack stand-in and the built binary: copies of a message under another ts, events of one
//! message that disagree on carrying its client_msg_id (both failed with a person's message
//! keyed by its client_msg_id alone, since reverted), the SDK's connection poisoning through our
//! HTTP client, message patterns on text in other languages (failed with regex-lite), and, as
//! evidence, a claim whose connection is reset after DynamoDB applied it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use slack_once::app::{App, Ctx, MessageEvent};
use slack_once::ledger::Ledger;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::*;

fn with_cmid(body: &str, cmid: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(body).unwrap();
    v["event"]["client_msg_id"] = cmid.into();
    v.to_string()
}

// ================================================================ F2: copies under another ts

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_under_another_ts_never_answers_again_in_its_own_thread() {
    let endpoint = dynamodb_endpoint();
    let (table, direct) = fresh_table(&endpoint).await;
    let proxy = LedgerProxy::start(&endpoint).await;
    let app = spawn_app_on_ledger(
        &proxy.url,
        table,
        vec![("DEDUP_LEASE_SECONDS", "1".to_string())],
    )
    .await;
    let cmid = "c0ffee16-0000-4000-8000-0000000000b1";
    let original = with_cmid(&app_mention("EvRt16TwoTsA", "hello"), cmid);
    let copy = with_cmid(&app_mention("EvRt16TwoTsB", "hello"), cmid);

    // The original is answered, but its completion never reaches DynamoDB (as when the
    // instance dies right after posting): the item keeps the claim's began window.
    proxy.hold_next(LedgerOp::Complete, HoldAt::BeforeForwarding);
    let first = app.send(&original, None).await;
    assert_eq!(first.outcome(), "answered", "{}", first.body);
    assert_eq!(app.slack.posted().len(), 1);
    let item = direct
        .get_item(&mention_key("EvRt16TwoTsA"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(item["status"].as_s().unwrap(), "in_progress");

    // After the lease, the copy Slack sends under another ts (typeclaw/typeclaw#49: ~20 s later).
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let second = app.send(&copy, None).await;
    assert_eq!(
        app.slack.posted().len(),
        1,
        "the copy took the original's claim over, looked in its own thread ({:?}) and answered \
         again: {} {}",
        app.slack.lookup_queries(),
        second.status,
        second.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_under_another_ts_does_not_fail_the_message_for_good() {
    let endpoint = dynamodb_endpoint();
    let (_, ledger) = fresh_table(&endpoint).await;
    let app = spawn_app_with(Options {
        vars: vec![("DEDUP_LEASE_SECONDS", "1".to_string())],
        ledger: Some(ledger as Arc<dyn Ledger>),
        app: None,
    })
    .await;
    let cmid = "c0ffee16-0000-4000-8000-0000000000b2";
    let original = with_cmid(&app_mention("EvRt16TwoTsC", "hello"), cmid);
    let copy = with_cmid(&app_mention("EvRt16TwoTsD", "hello"), cmid);

    // Slack neither answers nor makes the original's post: the claim is released with the
    // post's intent (fate unknown), its identity naming the original's thread.
    app.slack.script([Behaviour::Hang]);
    let first = app.send(&original, None).await;
    assert!(!first.status.is_success(), "{}", first.body);

    let second = app.send(&copy, None).await;
    let retry = app.send(&original, Some(1)).await;
    assert_eq!(
        app.slack.posted().len(),
        1,
        "nobody answered: the copy got {} {} and the original's retry {} {}",
        second.status,
        second.body,
        retry.status,
        retry.body
    );
}

// ================================================================ F3: events that disagree on client_msg_id

/// The `message` event of the mention `mention_id` (same channel and ts, the bot mentioned):
/// a file share, as Slack's FileShareMessageEvent (no client_msg_id), or a plain message.
fn message_of(mention_id: &str, event_id: &str, file_share: bool) -> serde_json::Value {
    let ts = ts_of(mention_id);
    let mut event = serde_json::json!({
        "type": "message", "user": "U0001", "text": format!("<@{BOT_USER}> summarize this"),
        "ts": ts, "channel": "C0001", "channel_type": "channel", "event_ts": ts
    });
    if file_share {
        event["subtype"] = "file_share".into();
        event["upload"] = false.into();
        event["display_as_bot"] = false.into();
        event["files"] = serde_json::json!([{"id": "F0RT16", "name": "deploy.log"}]);
    }
    serde_json::json!({
        "token": "unused", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
        "event_id": event_id, "event_time": 1_700_000_000, "event": event,
        "authorizations": [{"team_id": "T0001", "user_id": BOT_USER, "is_bot": true}]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_message_is_one_answer_whichever_of_its_events_carries_the_client_msg_id() {
    let endpoint = dynamodb_endpoint();
    // 0: the app_mention carries it, the file_share message does not (Slack's types, the
    //    project's fixtures); 1: the message carries it, the app_mention does not
    //    (typeclaw/typeclaw#49).
    for (k, mention_has_it) in [(0, true), (1, false)] {
        let (_, ledger) = fresh_table(&endpoint).await;
        let app = spawn_app_with(Options {
            ledger: Some(ledger as Arc<dyn Ledger>),
            ..Default::default()
        })
        .await;
        let cmid = format!("c0ffee16-0000-4000-8000-00000000f00{k}");
        let mention_id = format!("EvRt16Mention{k}");
        let plain = app_mention(&mention_id, "summarize this");
        let mention = if mention_has_it {
            with_cmid(&plain, &cmid)
        } else {
            plain
        };
        let mut message = message_of(&mention_id, &format!("EvRt16Message{k}"), mention_has_it);
        if !mention_has_it {
            message["event"]["client_msg_id"] = cmid.clone().into();
        }
        let first = app.send(&mention, None).await;
        assert_eq!(first.outcome(), "answered", "{k}: {}", first.body);
        let second = app.send(&message.to_string(), None).await;
        assert_eq!(
            (second.outcome().as_str(), app.slack.posted().len()),
            ("duplicate", 1),
            "case {k}: the two events of one message were claimed under two keys: {}",
            second.body
        );
    }
}

// ================================================================ F4: connection poisoning

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_after_the_write_is_retried_without_an_error_line() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let slack = SlackStandin::start().await;
    let proxy = LedgerProxy::start(&endpoint).await;
    let bot = BotProcess::spawn(&bot_vars(&slack, &proxy.url, &table));
    proxy.hold_next(LedgerOp::Claim, HoldAt::Error500AfterForwarding);
    let http = HttpClient::default();
    let answer = deliver(&http, &bot.url(), &app_mention("EvRt16Poison", "hi"), None).await;
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);
    assert_eq!(slack.posted().len(), 1);
    let log = bot.log_after(1).await;
    assert!(
        !log.contains("unable to mark the connection for closure"),
        "the SDK's ConnectionPoisoningInterceptor found no connection to poison (our connector \
         never sets one): an ERROR line per transient response, and the retry reused the \
         connection:\n{log}"
    );
}

// ================================================================ F5: regex-lite

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patterns_that_matched_non_ascii_text_still_do() {
    let endpoint = dynamodb_endpoint();
    let (_, ledger) = fresh_table(&endpoint).await;
    let app = App::new()
        .message(r"(?i)^привет", |ctx: Ctx, _m: MessageEvent| async move {
            ctx.reply("здравствуйте").await?;
            Ok(())
        })
        .message(r"^deploy (\w+)$", |ctx: Ctx, m: MessageEvent| async move {
            let service = m.capture(1).unwrap_or_default().to_string();
            ctx.reply(format!("deploying {service}")).await?;
            Ok(())
        });
    let test = spawn_app_with(Options {
        ledger: Some(ledger as Arc<dyn Ledger>),
        app: Some(app),
        ..Default::default()
    })
    .await;
    for (id, text) in [
        ("EvRt16Cyrillic", "Привет"),
        ("EvRt16Accent", "deploy café"),
    ] {
        let answer = test.send(&app_mention(id, text), None).await;
        assert_eq!(
            answer.outcome(),
            "answered",
            "{text:?} no longer matches (regex-lite: ASCII-only (?i) and \\w): {}",
            answer.body
        );
    }
}

// ================================================================ E1 (evidence): a reset after the write

/// Reads one HTTP/1.1 message (head and body, by Content-Length or chunked) from `stream`.
async fn read_http_message(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let body = &buf[end + 4..];
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            let chunked = head.contains("transfer-encoding: chunked");
            match length {
                Some(len) if body.len() >= len => return buf,
                None if chunked && body.ends_with(b"0\r\n\r\n") => return buf,
                None if !chunked => return buf,
                _ => {}
            }
        }
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return buf;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A TCP proxy in front of `upstream`: on the first connection, the first request is forwarded
/// and applied, then the connection is reset (RST) instead of returning the answer; later
/// connections pass through.
async fn resetting_proxy(upstream: std::net::SocketAddr) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let resets = Arc::new(AtomicUsize::new(0));
    let counter = resets.clone();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut client, _)) = listener.accept().await {
            let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else {
                continue;
            };
            if std::mem::take(&mut first) {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let request = read_http_message(&mut client).await;
                    server.write_all(&request).await.unwrap();
                    let _applied = read_http_message(&mut server).await;
                    client.set_zero_linger().unwrap();
                    drop(client);
                    counter.fetch_add(1, Ordering::SeqCst);
                });
            } else {
                tokio::spawn(async move {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
            }
        }
    });
    (url, resets)
}

/// EVIDENCE (passes): our connector classifies ECONNRESET after the write as I/O, so the SDK
/// sends the claim again and finds it its own (attempt 1, one answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evidence_a_claim_whose_connection_is_reset_after_the_write_is_its_own() {
    let endpoint = dynamodb_endpoint();
    let (table, ledger) = fresh_table(&endpoint).await;
    let upstream: std::net::SocketAddr = endpoint.trim_start_matches("http://").parse().unwrap();
    let (proxy, resets) = resetting_proxy(upstream).await;
    let slack = SlackStandin::start().await;
    let bot = BotProcess::spawn(&bot_vars(&slack, &proxy, &table));
    let http = HttpClient::default();
    let id = "EvRt16Reset";
    let answer = deliver(&http, &bot.url(), &app_mention(id, "hi"), None).await;
    assert_eq!(
        answer.outcome(),
        "answered",
        "{}\n{}",
        answer.body,
        bot.log()
    );
    assert_eq!(
        resets.load(Ordering::SeqCst),
        1,
        "the claim's connection was reset"
    );
    assert_eq!(slack.posted().len(), 1);
    let item = ledger.get_item(&mention_key(id)).await.unwrap().unwrap();
    assert_eq!(item["status"].as_s().unwrap(), "done");
    assert_eq!(
        item["attempts"].as_n().unwrap(),
        "1",
        "the SDK's second attempt found its own claim"
    );
}
