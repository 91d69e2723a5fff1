//! `slack-once gateway` (the built binary, on DynamoDB Local) under the faults a production
//! deployment meets: a replica whose load balancer gave up while its listener went on, an
//! SDK's retry of a write whose answer was lost while another write of the same listener was
//! under way, the gateway itself killed mid-call after a replica failover, and malformed calls
//! to the Web API proxy. Each test says what must hold (`docs/gateway-protocol.md`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

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
async fn a_replica_whose_balancer_gave_up_cannot_write_into_the_next_replicas_run() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let late_answers: Arc<Mutex<Vec<Value>>> = Arc::default();
    let kept = late_answers.clone();
    // Replica A sits behind its own load balancer, which answers 504 at once; A's listener
    // goes on and replies a moment later (its LLM's answer, worded its own way).
    let given_up = HttpBot::start(move |f: Forwarded| {
        let kept = kept.clone();
        async move {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let event = f.json()["event"].clone();
                let reply = json!({"channel": event["channel"], "thread_ts": event["ts"],
                                   "text": "Hello (worded by replica A)"});
                let answer = f.call("chat.postMessage", reply).await;
                kept.lock().unwrap().push(answer);
            });
            (StatusCode::GATEWAY_TIMEOUT, String::new())
        }
    })
    .await;
    // Replica B gets the request next, and replies after a moment of its own.
    let next = HttpBot::start(|f: Forwarded| async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let event = f.json()["event"].clone();
        let reply = json!({"channel": event["channel"], "thread_ts": event["ts"],
                           "text": "Hello (worded by replica B)"});
        let answer = f.call("chat.postMessage", reply).await;
        match answer["ok"] == true {
            true => (StatusCode::OK, String::new()),
            false => (StatusCode::INTERNAL_SERVER_ERROR, answer.to_string()),
        }
    })
    .await;
    let gateway = spawn_gateway(&slack, &table, &[given_up.url(), next.url()]);
    let http = HttpClient::default();

    let body = app_mention("EvGwLateReplica1", "hello");
    let answer = deliver(&http, &gateway.url(), &body, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());
    assert_eq!(next.received().len(), 1, "{}", gateway.log());
    let answered = eventually(Duration::from_secs(5), || {
        !late_answers.lock().unwrap().is_empty()
    })
    .await;
    assert!(answered, "replica A's late call got an answer");

    let posts = thread_posts(&slack, &ts_of("EvGwLateReplica1"));
    let texts: Vec<&Value> = posts.iter().map(|p| &p.body["text"]).collect();
    assert_eq!(
        posts.len(),
        1,
        "one reply: replica A's run ended when the gateway gave its request to replica B, so \
         A's late write is refused (slack_once_request_ended), not made as B's next step; \
         replies: {texts:?}; A's late call was answered {:?}",
        late_answers.lock().unwrap()
    );
    assert_eq!(
        late_answers.lock().unwrap()[0]["error"],
        "slack_once_request_ended"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn an_sdk_retry_of_a_post_that_comes_after_another_write_of_the_run_is_the_same_step() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    // Slack takes its time over the post: the bot's HTTP client gives up on its answer first.
    slack.script_method(
        "chat.postMessage",
        [SlackFailure::Slow(Duration::from_millis(800))],
    );
    let bot = HttpBot::start(|f: Forwarded| async move {
        let event = f.json()["event"].clone();
        let (channel, ts) = (event["channel"].clone(), event["ts"].clone());
        let reply = json!({"channel": channel, "thread_ts": ts, "text": "Hello"});
        // `Promise.all([say(…), client.reactions.add(…)])`: the post and the reaction at once.
        // The post's connection is reset before its answer comes, and the SDK sends the very
        // same post again (the Node client retries a request error up to 10 times).
        let post_with_the_sdks_retry = async {
            let lost = tokio::time::timeout(
                Duration::from_millis(300),
                f.call("chat.postMessage", reply.clone()),
            )
            .await;
            assert!(lost.is_err(), "the first attempt's answer is lost");
            f.call("chat.postMessage", reply.clone()).await
        };
        let reaction = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let eyes = json!({"channel": channel, "timestamp": ts, "name": "eyes"});
            f.call("reactions.add", eyes).await
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

    let body = app_mention("EvGwSdkRetryBetween1", "hello");
    let answer = deliver(&http, &gateway.url(), &body, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());

    let ts = ts_of("EvGwSdkRetryBetween1");
    assert_eq!(eyes(&slack, &ts), 1);
    assert_eq!(
        thread_posts(&slack, &ts).len(),
        1,
        "the SDK's retry of the post is the post's own step, answered with its answer, even \
         though the run's reaction came in between: {}",
        gateway.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_gateway_killed_during_a_post_after_a_replica_failover_leaves_it_to_be_looked_up() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    // The post is made, and Slack's answer never comes back: the gateway is killed waiting.
    slack.script_method("chat.postMessage", [SlackFailure::MadeUnanswered]);
    let posting = Arc::new(tokio::sync::Notify::new());
    // Replica A reacts and dies; replica B replays the reaction and posts (step 2).
    let dying = reacting_bot(true, None).await;
    let healthy = reacting_bot(false, Some(posting.clone())).await;
    let lease = [("DEDUP_LEASE_SECONDS", "2".to_string())];
    let mut first = spawn_gateway_with(&slack, &table, &[dying.url(), healthy.url()], &lease[..]);
    let http = HttpClient::default();
    let body = app_mention("EvGwKilledAfterFailover1", "hello");
    let url = first.url();
    let delivered = tokio::spawn({
        let (http, body) = (http.clone(), body.clone());
        async move {
            http.try_request("POST", &url, &signed(&body), body.into_bytes())
                .await
        }
    });
    tokio::time::timeout(Duration::from_secs(5), posting.notified())
        .await
        .expect("replica B came to its post");
    let made = eventually(Duration::from_secs(5), || slack.posted_count() == 1).await;
    assert!(made, "the post is in Slack: {}", first.log());
    first.kill();
    let _ = delivered.await;

    // After the lease, Slack's retry reaches another gateway on the same table.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let third = reacting_bot(false, None).await;
    let second = spawn_gateway_with(&slack, &table, &[third.url()], &lease[..]);
    let retry = deliver(&http, &second.url(), &body, Some(1)).await;
    assert_eq!(retry.status, StatusCode::OK, "{}", second.log());

    let ts = ts_of("EvGwKilledAfterFailover1");
    assert_eq!(eyes(&slack, &ts), 1);
    assert_eq!(
        thread_posts(&slack, &ts).len(),
        1,
        "the post the killed gateway made is looked up, not made again: {}",
        second.log()
    );
}

/// A malformed call to the proxy: what it is, its method, its headers and its body.
type MalformedCall = (&'static str, String, Vec<(String, String)>, Vec<u8>);

/// Slack's headers for `body`, signed now.
fn signed(body: &str) -> Vec<(String, String)> {
    signed_headers(SECRET, now_unix(), body.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn malformed_calls_to_the_proxy_are_answered_slack_shaped_and_make_nothing() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let answers: Arc<Mutex<Vec<(String, u16, Value)>>> = Arc::default();
    let kept = answers.clone();
    let bot = HttpBot::start(move |f: Forwarded| {
        let kept = kept.clone();
        async move {
            let api = f.header("x-slack-once-api-url").to_string();
            let run = f.header("x-slack-once-request").to_string();
            let auth = format!("Bearer {PROXY_TOKEN}");
            let with = |content_type: &str| {
                vec![
                    ("content-type".to_string(), content_type.to_string()),
                    ("authorization".to_string(), auth.clone()),
                    ("x-slack-once-request".to_string(), run.clone()),
                ]
            };
            let mut huge = br#"{"channel":"C0001","text":""#.to_vec();
            huge.extend(std::iter::repeat_n(b'x', 2 << 20));
            huge.extend(br#""}"#);
            let cases: Vec<MalformedCall> = vec![
                (
                    "a JSON array",
                    "chat.postMessage".into(),
                    with("application/json"),
                    b"[{\"channel\":\"C0001\",\"text\":\"x\"}]".to_vec(),
                ),
                (
                    "not UTF-8",
                    "chat.postMessage".into(),
                    with("application/json"),
                    b"{\"channel\":\"C0001\",\"text\":\"\xff\xfe\"}".to_vec(),
                ),
                (
                    "a body larger than 1 MiB",
                    "chat.postMessage".into(),
                    with("application/json"),
                    huge,
                ),
                (
                    "a method with a path trick",
                    "..".into(),
                    with("application/x-www-form-urlencoded"),
                    b"channel=C0001&text=x".to_vec(),
                ),
                (
                    "a method name with a dot path",
                    "chat.postMessage%2F..%2F..%2Fchat.postMessage".into(),
                    with("application/x-www-form-urlencoded"),
                    b"channel=C0001&text=x".to_vec(),
                ),
                (
                    "a multipart upload",
                    "files.upload".into(),
                    with("multipart/form-data; boundary=x"),
                    b"--x\r\n\r\n--x--".to_vec(),
                ),
            ];
            for (what, method, headers, body) in cases {
                // A connection of its own: the proxy may close one whose body it did not read.
                let answer = HttpClient::default()
                    .request("POST", &format!("{api}{method}"), &headers, body)
                    .await;
                let json = answer.json();
                kept.lock()
                    .unwrap()
                    .push((what.to_string(), answer.status.as_u16(), json));
            }
            (StatusCode::OK, String::new())
        }
    })
    .await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    let http = HttpClient::default();

    let body = app_mention("EvGwMalformed1", "hello");
    let answer = deliver(&http, &gateway.url(), &body, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());
    let answers = answers.lock().unwrap().clone();
    assert_eq!(answers.len(), 6, "{}", gateway.log());
    let accepted: Vec<String> = answers
        .iter()
        .filter(|(_, status, json)| {
            *status != 200 || json["ok"] != false || !json["error"].is_string()
        })
        .map(|(what, status, json)| format!("{what}: HTTP {status} {json}"))
        .collect();
    assert!(
        accepted.is_empty() && slack.received().is_empty(),
        "each malformed call is refused with HTTP 200 and a Slack error code, and nothing \
         reaches Slack; accepted: {accepted:?}; Slack got {:?}",
        slack.calls()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn a_deferred_gateways_worker_killed_during_a_post_leaves_it_to_the_redelivery_once() {
    let stack = DeferredStack::start(5).await;
    // The post is made, and Slack's answer never comes back: the worker is killed waiting.
    stack
        .slack
        .script_method("chat.postMessage", [SlackFailure::MadeUnanswered]);
    let bot = reacting_bot(false, None).await;
    let (ingress, mut worker) = spawn_deferred_gateway(&stack, &[bot.url()], 3);
    let http = HttpClient::default();

    let body = app_mention("EvGwWorkerKilled1", "hello");
    let answer = deliver(&http, &ingress.url(), &body, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", ingress.log());
    let made = eventually(Duration::from_secs(20), || stack.slack.posted_count() == 1).await;
    assert!(made, "the post is in Slack: {}", worker.log());
    worker.kill();

    // Another worker receives the request again once the queue lets it go.
    let mut vars = stack.worker_vars(3, 5);
    vars.extend(gateway_vars(&[bot.url()]));
    let next = BotProcess::spawn_gateway_worker(&vars);
    let ts = ts_of("EvGwWorkerKilled1");
    let again = eventually(Duration::from_secs(40), || bot.received().len() >= 2).await;
    assert!(again, "redelivered to the bot: {}", next.log());
    let drained = eventually_async(Duration::from_secs(30), || async {
        stack.queue.depth(&stack.queue.url).await == 0
    })
    .await;
    assert!(drained, "{}", next.log());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(eyes(&stack.slack, &ts), 1);
    assert_eq!(
        thread_posts(&stack.slack, &ts).len(),
        1,
        "the killed worker's post is looked up by the redelivery, not made again: {}",
        next.log()
    );
}

/// A bot that answers an options request (`block_suggestion`) with one option, and a slash
/// command with a message of its own.
async fn options_and_command_bot() -> HttpBot {
    HttpBot::start(|f: Forwarded| async move {
        let form: std::collections::HashMap<String, String> =
            form_urlencoded::parse(&f.body).into_owned().collect();
        let answer = match form.get("payload") {
            Some(_) => json!({"options": [{"text": {"type": "plain_text", "text": "Apples"},
                                           "value": "apples"}]}),
            None => json!({"response_type": "ephemeral", "text": "Filing your ticket"}),
        };
        (StatusCode::OK, answer.to_string())
    })
    .await
}

fn options_request() -> String {
    let payload = json!({
        "type": "block_suggestion", "action_id": "fruit", "block_id": "b", "value": "ap",
        "team": {"id": TEAM}, "user": {"id": "U0001", "team_id": TEAM}, "api_app_id": APP_ID,
        "container": {"type": "view", "view_id": "V0001"},
        "view": {"id": "V0001", "type": "modal", "team_id": TEAM, "app_id": APP_ID},
    });
    form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn an_options_request_to_a_deferred_gateway_gets_the_bots_options() {
    let stack = DeferredStack::start(5).await;
    let bot = options_and_command_bot().await;
    let (ingress, worker) = spawn_deferred_gateway(&stack, &[bot.url()], 30);
    let http = HttpClient::default();

    // Slack shows the options it reads in the answer to this very request, within 3 s: a
    // worker answering later has no one to answer.
    let answer = deliver_form(&http, &ingress.url(), &options_request(), None).await;
    assert_eq!(
        answer.json()["options"][0]["value"],
        "apples",
        "the bot's options, in the answer Slack reads; got HTTP {} {:?}; bot got {} forwards; \
         ingress:\n{}\nworker:\n{}",
        answer.status,
        answer.body,
        bot.received().len(),
        ingress.log(),
        worker.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn a_command_answered_with_content_by_a_deferred_gateways_bot_is_posted_once() {
    let stack = DeferredStack::start(5).await;
    let bot = options_and_command_bot().await;
    let (ingress, worker) = spawn_deferred_gateway(&stack, &[bot.url()], 30);
    let http = HttpClient::default();

    let form = command_form(&stack.slack, "/ticket", "printer");
    let answer = deliver_form(&http, &ingress.url(), &form, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", ingress.log());
    let retry = deliver_form(&http, &ingress.url(), &form, Some(1)).await;
    assert_eq!(retry.status, StatusCode::OK, "{}", ingress.log());
    let responded = || {
        stack
            .slack
            .calls()
            .into_iter()
            .filter(|(m, a)| m == "response_url" && a["text"] == "Filing your ticket")
            .count()
    };
    let posted = eventually(Duration::from_secs(20), || responded() >= 1).await;
    assert!(posted, "worker:\n{}", worker.log());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(responded(), 1, "worker:\n{}", worker.log());
}

/// A Bolt app whose authorization's `auth.test` (made outside any run, on the first request a
/// replica handles) fails once at Slack: the mention must still be answered, by Slack's retry.
/// (Bolt for JavaScript makes it at start and exits when it fails: a process manager's matter.)
async fn a_failed_authorization_leaves_the_mention_to_the_retry(bolt: Bolt) {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    slack.script_method("auth.test", [SlackFailure::Code("internal_error")]);
    let port = free_port();
    let gateway = spawn_gateway(&slack, &table, &[BoltReplica::url_on(port)]);
    let api = gateway.url().replace("/slack/events", "/api/");
    let bot = BoltReplica::start(bolt, port, &api, &[]);
    let http = HttpClient::default();

    let event_id = format!("EvGwBolt{bolt:?}AuthFailed1");
    let body = app_mention(&event_id, "hello");
    let first = deliver(&http, &gateway.url(), &body, None).await;
    let retry = deliver(&http, &gateway.url(), &body, Some(1)).await;
    let ts = ts_of(&event_id);
    let replies = slack
        .posted()
        .iter()
        .filter(|p| p.body["thread_ts"] == ts.as_str() && p.body["text"] == "Hello <@U0001>")
        .count();
    assert_eq!(
        (eyes(&slack, &ts), replies),
        (1, 1),
        "the first delivery's bot could not authorize and made no write: that run is no \
         answer, and Slack's retry answers the mention; the first was answered HTTP {} {:?}, \
         the retry {} {:?}\nbot:\n{}\ngateway:\n{}",
        first.status,
        first.body,
        retry.status,
        retry.body,
        bot.log(),
        gateway.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_python_whose_authorization_failed_once_still_answers_the_mention() {
    a_failed_authorization_leaves_the_mention_to_the_retry(Bolt::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_message_edit_reaches_a_bot_that_listens_for_edits() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    // `app.message(subtype('message_changed'), …)` in Bolt: the bot answers edits itself.
    let bot = HttpBot::start(|_: Forwarded| async move { (StatusCode::OK, String::new()) }).await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    let http = HttpClient::default();

    let ts = ts_of("EvGwEdited1");
    let edit = json!({
        "token": "unused", "team_id": TEAM, "api_app_id": APP_ID, "type": "event_callback",
        "event_id": "EvGwEdited1", "event_time": 1_700_000_100,
        "event": {
            "type": "message", "subtype": "message_changed", "hidden": true,
            "channel": "C0001", "ts": "1700000100.000200", "event_ts": "1700000100.000200",
            "message": {"type": "message", "user": "U0001", "text": "hello, edited", "ts": ts,
                        "edited": {"user": "U0001", "ts": "1700000100.000000"}},
            "previous_message": {"type": "message", "user": "U0001", "text": "hello", "ts": ts},
        },
        "authorizations": [{"enterprise_id": null, "team_id": TEAM, "user_id": BOT_USER,
                            "is_bot": true}],
    })
    .to_string();
    let answer = deliver(&http, &gateway.url(), &edit, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());
    assert_eq!(
        bot.received().len(),
        1,
        "the edit is forwarded to the bot, which decides what it listens to (Slack sent it \
         because the app subscribes to message events); the gateway answered {:?}",
        answer.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn twenty_writes_of_one_run_at_once_are_each_made_once_and_answered_to_their_caller() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let mismatches: Arc<Mutex<Vec<String>>> = Arc::default();
    let kept = mismatches.clone();
    let bot = HttpBot::start(move |f: Forwarded| {
        let kept = kept.clone();
        async move {
            let event = f.json()["event"].clone();
            // More at once than the run's queue holds (16): `Promise.all` over a list.
            let posts: Vec<_> = (0..20)
                .map(|n| {
                    let f = f.clone();
                    let post = json!({"channel": event["channel"], "thread_ts": event["ts"],
                                      "text": format!("part {n}")});
                    tokio::spawn(async move { (n, f.call("chat.postMessage", post).await) })
                })
                .collect();
            for post in posts {
                let (n, answer) = post.await.expect("a call");
                if answer["message"]["text"] != format!("part {n}").as_str() {
                    kept.lock()
                        .unwrap()
                        .push(format!("part {n} answered {answer}"));
                }
            }
            (StatusCode::OK, String::new())
        }
    })
    .await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    let http = HttpClient::default();

    let body = app_mention("EvGwTwentyAtOnce1", "hello");
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        deliver(&http, &gateway.url(), &body, None),
    )
    .await
    .expect("no deadlock: answered within 10 s");
    assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());
    assert!(
        mismatches.lock().unwrap().is_empty(),
        "{:?}",
        mismatches.lock().unwrap()
    );
    let posts = thread_posts(&slack, &ts_of("EvGwTwentyAtOnce1"));
    let mut texts: Vec<String> = posts
        .iter()
        .map(|p| p.body["text"].as_str().unwrap_or_default().to_string())
        .collect();
    texts.sort();
    texts.dedup();
    assert_eq!((posts.len(), texts.len()), (20, 20), "each part once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_read_made_again_sees_what_changed_in_slack_since() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = Arc::new(SlackStandin::start().await);
    let counts: Arc<Mutex<Vec<usize>>> = Arc::default();
    let (kept, people) = (counts.clone(), slack.clone());
    // A bot that waits for the thread to move: it reads the replies, and reads them again.
    let bot = HttpBot::start(move |f: Forwarded| {
        let (kept, people) = (kept.clone(), people.clone());
        async move {
            let event = f.json()["event"].clone();
            let (channel, ts) = (event["channel"].clone(), event["ts"].clone());
            let read = json!({"channel": channel, "ts": ts});
            let before = f.call("conversations.replies", read.clone()).await;
            // Meanwhile, people answer in the thread.
            let (c, t) = (channel.as_str().unwrap(), ts.as_str().unwrap());
            people.add_other_messages(c, Some(t), 2);
            let after = f.call("conversations.replies", read).await;
            let n = |v: &Value| v["messages"].as_array().map_or(0, Vec::len);
            kept.lock().unwrap().extend([n(&before), n(&after)]);
            (StatusCode::OK, String::new())
        }
    })
    .await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    let http = HttpClient::default();

    let body = app_mention("EvGwReadAgain1", "hello");
    let answer = deliver(&http, &gateway.url(), &body, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());
    let counts = counts.lock().unwrap().clone();
    assert_eq!(counts.len(), 2, "{}", gateway.log());
    assert_eq!(
        counts[1],
        counts[0] + 2,
        "reads pass through to Slack: the second read is Slack's answer now, not the first \
         read's answer again (taken for an SDK's retry); {}",
        gateway.log()
    );
}

/// A Bolt app behind a gateway that serves many workspaces (OAuth, its installation store),
/// installed in `T0000ONE`: a mention there is answered, once.
async fn a_mention_in_an_installed_workspace_is_answered(bolt: Bolt) {
    use crate::tenants::{A, Tenant, tenant_vars};
    use slack_once::testing::{FakeSlack, Identity, bot_id_for, bot_user_for};

    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let slack = FakeSlack::start_for(Identity {
        team: "T0000HOME".into(),
        app_id: A.0.into(),
        bot_id: bot_id_for(A.0, "T0000HOME"),
        bot_user: bot_user_for(A.0, "T0000HOME"),
    })
    .await
    .with_oauth(A.1, A.2);
    let port = free_port();
    let mut vars = tenant_vars(A, &slack, &endpoint, &table);
    vars.extend(gateway_vars(&[BoltReplica::url_on(port)]));
    let how = Spawn {
        signing_secret_env: false,
        ..Spawn::default()
    };
    let program = std::path::PathBuf::from(env!("CARGO_BIN_EXE_slack-once"));
    let gateway = BotProcess::spawn_program_with(&program, &["gateway"], &vars, &how);
    let api = gateway.url().replace("/slack/events", "/api/");
    let tenant = Tenant {
        app_id: A.0,
        signing_secret: A.3,
        slack,
        bot: gateway,
        http: HttpClient::default(),
        vars,
    };
    assert_eq!(tenant.install("T0000ONE", false).await.status, 200);
    let bot = BoltReplica::start(bolt, port, &api, &[]);

    let mention = tenant.mention("T0000ONE", 1);
    let first = tenant.send(&mention).await;
    let retry = tenant.send(&mention).await;
    assert_eq!(
        tenant.answers_in("T0000ONE"),
        1,
        "the Bolt app's reply, made with T0000ONE's installation; the gateway answered {:?}, \
         then {:?}\nbot:\n{}\ngateway:\n{}",
        first.body,
        retry.body,
        bot.log(),
        tenant.bot.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_python_behind_a_gateway_of_many_workspaces_answers_a_mention() {
    a_mention_in_an_installed_workspace_is_answered(Bolt::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_js_behind_a_gateway_of_many_workspaces_answers_a_mention() {
    a_mention_in_an_installed_workspace_is_answered(Bolt::JavaScript).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_messages_two_events_each_reach_their_listener_and_each_writes_once() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let answers: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let kept = answers.clone();
    // `app.message(/hello/, …)` reacts; `app.event('app_mention', …)` replies.
    let bot = HttpBot::start(move |f: Forwarded| {
        let kept = kept.clone();
        async move {
            let kind = f.json()["event"]["type"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let answer = match kind.as_str() {
                "message" => f.react().await,
                _ => f.reply("Hello").await,
            };
            let ok = answer["ok"] == true;
            kept.lock().unwrap().push((kind, answer));
            match ok {
                true => (StatusCode::OK, String::new()),
                false => (StatusCode::INTERNAL_SERVER_ERROR, String::new()),
            }
        }
    })
    .await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    let http = HttpClient::default();

    // Slack sends both for a mention in a channel whose messages the app subscribes to.
    let mention = app_mention("EvGwBothEvents1", "hello");
    let mut message: Value = serde_json::from_str(&mention).unwrap();
    message["event_id"] = "EvGwBothEvents1Msg".into();
    message["event"]["type"] = "message".into();
    message["event"]["channel_type"] = "channel".into();
    let message = message.to_string();
    let a = deliver(&http, &gateway.url(), &message, None).await;
    let b = deliver(&http, &gateway.url(), &mention, None).await;

    let ts = ts_of("EvGwBothEvents1");
    let replies = thread_posts(&slack, &ts).len();
    assert_eq!(
        (eyes(&slack, &ts), replies),
        (1, 1),
        "the message's listener reacted and the mention's replied; the gateway answered {:?} \
         and {:?}; the bot's calls were answered {:?}\n{}",
        a.body,
        b.body,
        answers.lock().unwrap(),
        gateway.log()
    );
}
