//! `slack-once gateway` (the built binary, on DynamoDB Local): how a run tells an SDK's retry of
//! a write from a write the bot means to make again (`RunWrites`), and message changes
//! forwarded by their event id. Each test says what must hold (`docs/gateway-protocol.md`).

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;

use crate::helpers::*;

fn eyes(slack: &SlackStandin, ts: &str) -> usize {
    slack
        .reactions()
        .iter()
        .filter(|(_, t, n)| t == ts && n == "eyes")
        .count()
}

/// Messages the bots posted in the thread of the message `ts`.
fn thread_posts(slack: &SlackStandin, ts: &str) -> Vec<Post> {
    slack
        .posted()
        .into_iter()
        .filter(|p| p.body["thread_ts"] == ts)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_reaction_added_again_after_its_removal_is_made_though_the_first_add_timed_out() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    // Slack takes its time over the first reaction: the bot's client gives up on its answer.
    slack.script_method(
        "reactions.add",
        [SlackFailure::Slow(Duration::from_millis(800))],
    );
    let bot = HttpBot::start(|f: Forwarded| async move {
        let event = f.json()["event"].clone();
        let eyes = json!({"channel": event["channel"], "timestamp": event["ts"], "name": "eyes"});
        // Python's WebClient(timeout=…): a read timeout is raised to the listener, not retried
        // (its ConnectionErrorRetryHandler retries a reset connection only). The listener
        // carries on: ":eyes: while I work", then the work, then ":eyes:" off and on again.
        let timed_out = tokio::time::timeout(
            Duration::from_millis(300),
            f.call("reactions.add", eyes.clone()),
        )
        .await;
        assert!(
            timed_out.is_err(),
            "the first add's answer is not waited for"
        );
        let removed = f.call("reactions.remove", eyes.clone()).await;
        let added = f.call("reactions.add", eyes).await;
        match removed["ok"] == true && added["ok"] == true {
            true => (StatusCode::OK, String::new()),
            false => (StatusCode::INTERNAL_SERVER_ERROR, String::new()),
        }
    })
    .await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    let http = HttpClient::default();

    let body = app_mention("EvGwAddRemoveAdd1", "hello");
    let answer = deliver(&http, &gateway.url(), &body, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());
    let adds = slack.calls_of("reactions.add");
    assert_eq!(
        eyes(&slack, &ts_of("EvGwAddRemoveAdd1")),
        1,
        "add, remove, add: the reaction is in place. The second add comes after a remove, so \
         it is no SDK retry of the first (whose caller gave up without retrying); Slack got \
         {adds} reactions.add: {}",
        gateway.log()
    );
}

/// Sends `method` to the run's proxy over a connection of its own, waits until the gateway's
/// answer has arrived on that connection, then, once `go_on` is notified, resets it unread: a
/// client whose timeout fired as the answer came, or a proxy between the two that lost it.
async fn call_with_its_answer_lost_on_the_wire(
    f: &Forwarded,
    method: &str,
    args: &Value,
    go_on: &Notify,
) {
    let api = f.header("x-slack-once-api-url").to_string();
    let authority = api
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let body = args.to_string();
    let request = format!(
        "POST /api/{method} HTTP/1.1\r\nHost: {authority}\r\ncontent-type: application/json\r\n\
         authorization: Bearer {PROXY_TOKEN}\r\nx-slack-once-request: {}\r\n\
         content-length: {}\r\n\r\n{body}",
        f.header("x-slack-once-request"),
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), stream.readable())
        .await
        .expect("the gateway answered")
        .unwrap();
    go_on.notified().await;
    // Closed with its answer unread: Linux resets the connection.
    drop(stream);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn an_sdk_retry_of_a_post_whose_answer_was_lost_on_the_wire_after_another_write_is_the_same_step()
 {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    slack.script_method(
        "chat.postMessage",
        [SlackFailure::Slow(Duration::from_millis(400))],
    );
    let bot = HttpBot::start(|f: Forwarded| async move {
        let event = f.json()["event"].clone();
        let (channel, ts) = (event["channel"].clone(), event["ts"].clone());
        let reply = json!({"channel": channel, "thread_ts": ts, "text": "Hello"});
        let reacted = Arc::new(Notify::new());
        // `Promise.all([say(…), client.reactions.add(…)])`: the post's answer comes back and is
        // lost before the SDK reads it; the reaction is made meanwhile; the SDK sends the post
        // again (the Node client retries a request error up to 10 times).
        let post_with_the_sdks_retry = async {
            call_with_its_answer_lost_on_the_wire(&f, "chat.postMessage", &reply, &reacted).await;
            f.call("chat.postMessage", reply.clone()).await
        };
        let reaction = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let eyes = json!({"channel": channel, "timestamp": ts, "name": "eyes"});
            let answer = f.call("reactions.add", eyes).await;
            reacted.notify_one();
            answer
        };
        let (posted, reacted) = tokio::join!(post_with_the_sdks_retry, reaction);
        match posted["ok"] == true && reacted["ok"] == true {
            true => (StatusCode::OK, String::new()),
            false => (StatusCode::INTERNAL_SERVER_ERROR, String::new()),
        }
    })
    .await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    let http = HttpClient::default();

    let body = app_mention("EvGwLostOnTheWire1", "hello");
    let answer = deliver(&http, &gateway.url(), &body, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());

    let ts = ts_of("EvGwLostOnTheWire1");
    assert_eq!(eyes(&slack, &ts), 1);
    assert_eq!(
        thread_posts(&slack, &ts).len(),
        1,
        "the SDK's retry of the post whose answer never reached it is the post's own step, \
         whether the answer was lost before the gateway wrote it or after: {}",
        gateway.log()
    );
}

/// A `message_changed` of the message `ts` in `C0001`, its new version written by `author`.
fn edit_of(event_id: &str, ts: &str, author: Value) -> String {
    let mut message = json!({"type": "message", "text": "hello, edited", "ts": ts,
                             "edited": {"user": "U0001", "ts": "1700000100.000000"}});
    message
        .as_object_mut()
        .unwrap()
        .extend(author.as_object().unwrap().clone());
    json!({
        "token": "unused", "team_id": TEAM, "api_app_id": APP_ID, "type": "event_callback",
        "event_id": event_id, "event_time": 1_700_000_100,
        "event": {
            "type": "message", "subtype": "message_changed", "hidden": true,
            "channel": "C0001", "ts": "1700000100.000200", "event_ts": "1700000100.000200",
            "message": message,
            "previous_message": {"type": "message", "user": "U0001", "text": "hello", "ts": ts},
        },
        "authorizations": [{"enterprise_id": null, "team_id": TEAM, "user_id": BOT_USER,
                            "is_bot": true}],
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn an_edit_retried_by_slack_is_forwarded_once_and_after_its_message_all_the_same() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    // The bot answers every message event with a reply in its thread.
    let bot = HttpBot::start(|f: Forwarded| async move {
        let event = f.json()["event"].clone();
        let ts = event["message"]["ts"].clone();
        let ts = if ts.is_null() {
            event["ts"].clone()
        } else {
            ts
        };
        let reply = json!({"channel": event["channel"], "thread_ts": ts,
                           "text": format!("seen {}", event["subtype"])});
        let answer = f.call("chat.postMessage", reply).await;
        match answer["ok"] == true {
            true => (StatusCode::OK, String::new()),
            false => (StatusCode::INTERNAL_SERVER_ERROR, answer.to_string()),
        }
    })
    .await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    let http = HttpClient::default();

    // The message itself, then its edit (claimed by the edit's event id, not the message's
    // key), then Slack's retry of the edit.
    let mention = app_mention("EvGwEditRetried1", "hello");
    let mut message: Value = serde_json::from_str(&mention).unwrap();
    message["event"]["type"] = "message".into();
    let ts = ts_of("EvGwEditRetried1");
    let edit = edit_of("EvGwEditRetried1Edit", &ts, json!({"user": "U0001"}));
    for (body, retry) in [
        (message.to_string(), None),
        (edit.clone(), None),
        (edit, Some(1)),
    ] {
        let answer = deliver(&http, &gateway.url(), &body, retry).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());
    }
    let texts: Vec<Value> = thread_posts(&slack, &ts)
        .iter()
        .map(|p| p.body["text"].clone())
        .collect();
    assert_eq!(
        texts,
        vec![json!("seen null"), json!("seen \"message_changed\"")],
        "{}",
        gateway.log()
    );
}
