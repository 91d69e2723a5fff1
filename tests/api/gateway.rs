//! `slack-once gateway` (the built binary, on DynamoDB Local) in front of bots that are not
//! Rust: here, bots written as plain HTTP servers, for the wire protocol's edges
//! (`docs/gateway-protocol.md`); in `gateway_bolt.rs`, real Bolt for JavaScript and Python apps.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

fn replies(slack: &SlackStandin, ts: &str) -> usize {
    slack
        .posted()
        .iter()
        .filter(|p| p.body["thread_ts"] == ts && p.body["text"] == "Hello")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_forward_is_the_requests_bytes_signed_again_and_names_its_run() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let bot = reacting_bot(false, None).await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    let http = HttpClient::default();

    let body = app_mention("EvGwForward1", "hello");
    let answer = deliver(&http, &gateway.url(), &body, Some(1)).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());

    let received = bot.received();
    assert_eq!(received.len(), 1);
    let f = &received[0];
    assert_eq!(
        f.body,
        body.as_bytes(),
        "the body as Slack sent it, byte for byte"
    );
    assert!(
        f.signed_by_the_gateway(),
        "signed with the gateway's secret"
    );
    let ts: u64 = f.header("x-slack-request-timestamp").parse().unwrap();
    assert!(now_unix().abs_diff(ts) <= 5, "a fresh timestamp");
    assert_eq!(f.header("content-type"), "application/json");
    assert_eq!(f.header("x-slack-once-request").len(), 32);
    let api_url = gateway.url().replace("/slack/events", "/api/");
    assert_eq!(f.header("x-slack-once-api-url"), api_url);
    let headers_signed = format!("{}:{api_url}", f.header("x-slack-once-request"));
    let secret = slack_once::config::Secret::new(GATEWAY_SECRET);
    let expected = slack_once::slack::signature::sign(&secret, ts, headers_signed.as_bytes());
    assert_eq!(
        f.header("x-slack-once-signature"),
        expected,
        "the run and the address signed"
    );
    assert_eq!(f.header("x-slack-once-key"), mention_key("EvGwForward1"));
    assert_eq!(f.header("x-slack-once-attempt"), "1");
    let deadline: u128 = f.header("x-slack-once-deadline").parse().unwrap();
    assert!(
        deadline > u128::from(now_unix()) * 1000,
        "the lease ends later"
    );
    assert!(
        f.headers.get("x-slack-retry-num").is_none(),
        "Slack's retry number is not forwarded: the bot handles every forward"
    );
    let ts = ts_of("EvGwForward1");
    assert_eq!((eyes(&slack, &ts), replies(&slack, &ts)), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_mention_with_slacks_retries_and_a_copy_under_another_event_id_is_answered_once() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let bot = reacting_bot(false, None).await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    let http = HttpClient::default();

    let body = app_mention("EvGwRetries1", "hello");
    let mut copy: Value = serde_json::from_str(&body).unwrap();
    copy["event_id"] = "EvGwRetriesCopy".into();
    let copy = copy.to_string();
    // The original and Slack's first retry at once, then the other retries and the copy.
    let url = gateway.url();
    let (a, b) = tokio::join!(
        deliver(&http, &url, &body, None),
        deliver(&http, &url, &body, Some(1))
    );
    let mut statuses = vec![a.status, b.status];
    for (body, retry) in [(&body, Some(2)), (&body, Some(3)), (&copy, None)] {
        statuses.push(deliver(&http, &gateway.url(), body, retry).await.status);
    }
    assert!(
        statuses.iter().filter(|s| s.is_success()).count() >= 4,
        "{statuses:?}"
    );

    let ts = ts_of("EvGwRetries1");
    assert_eq!((eyes(&slack, &ts), replies(&slack, &ts)), (1, 1));
    assert_eq!(
        bot.received().len(),
        1,
        "only the first delivery reached the bot"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_replica_dying_between_two_writes_is_followed_by_the_next_which_makes_only_the_second() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let dying = reacting_bot(true, None).await;
    let healthy = reacting_bot(false, None).await;
    let gateway = spawn_gateway(&slack, &table, &[dying.url(), healthy.url()]);
    let http = HttpClient::default();

    let body = app_mention("EvGwReplica1", "hello");
    let answer = deliver(&http, &gateway.url(), &body, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());

    let ts = ts_of("EvGwReplica1");
    assert_eq!((eyes(&slack, &ts), replies(&slack, &ts)), (1, 1));
    assert_eq!(dying.received().len(), 1);
    assert_eq!(healthy.received().len(), 1);
    assert_eq!(
        slack.calls_of("reactions.add"),
        1,
        "the second replica's reaction was answered from the journal"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_post_made_by_a_replica_that_died_is_replayed_to_the_next_not_posted_again() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let posting = |dies: bool| {
        HttpBot::start(move |f: Forwarded| async move {
            let event = f.json()["event"].clone();
            let post =
                json!({"channel": event["channel"], "thread_ts": event["ts"], "text": "Hello"});
            let posted = f.call("chat.postMessage", post).await;
            if dies {
                panic!("killed after its post");
            }
            let eyes =
                json!({"channel": event["channel"], "timestamp": posted["ts"], "name": "eyes"});
            f.call("reactions.add", eyes).await;
            (StatusCode::OK, String::new())
        })
    };
    let (dying, healthy) = (posting(true).await, posting(false).await);
    let gateway = spawn_gateway(&slack, &table, &[dying.url(), healthy.url()]);
    let http = HttpClient::default();

    let body = app_mention("EvGwReplica2", "hello");
    let answer = deliver(&http, &gateway.url(), &body, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());
    let ts = ts_of("EvGwReplica2");
    assert_eq!(replies(&slack, &ts), 1);
    assert_eq!(
        slack.received().len(),
        1,
        "the post was replayed, not sent again"
    );
    let reply = &slack.posted()[0];
    assert_eq!(
        eyes(&slack, &reply.ts),
        1,
        "the reaction on the replayed post's ts"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_write_sent_again_at_once_is_the_same_step() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let bot = HttpBot::start(|f: Forwarded| async move {
        let event = f.json()["event"].clone();
        let post = json!({"channel": event["channel"], "thread_ts": event["ts"], "text": "Hello"});
        // An SDK's retry of a call whose answer it never read: the very same call again.
        let first = f.call("chat.postMessage", post.clone()).await;
        let again = f.call("chat.postMessage", post).await;
        assert_eq!(first["ts"], again["ts"], "the first attempt's answer");
        (StatusCode::OK, String::new())
    })
    .await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    let http = HttpClient::default();

    let body = app_mention("EvGwSdkRetry1", "hello");
    let answer = deliver(&http, &gateway.url(), &body, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());
    assert_eq!(replies(&slack, &ts_of("EvGwSdkRetry1")), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_run_again_that_makes_a_different_write_is_refused() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let first = HttpBot::start(|f: Forwarded| async move {
        let event = f.json()["event"].clone();
        f.call(
            "chat.postMessage",
            json!({"channel": event["channel"], "thread_ts": event["ts"], "text": "one"}),
        )
        .await;
        panic!("killed after its first write");
    })
    .await;
    let answers = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = answers.clone();
    let second = HttpBot::start(move |f: Forwarded| {
        let kept = kept.clone();
        async move {
            // Another version of the bot: its first write goes elsewhere.
            let answer = f
                .call(
                    "chat.postMessage",
                    json!({"channel": "C0OTHER", "text": "two"}),
                )
                .await;
            kept.lock().unwrap().push(answer);
            (StatusCode::INTERNAL_SERVER_ERROR, String::new())
        }
    })
    .await;
    let gateway = spawn_gateway(&slack, &table, &[first.url(), second.url()]);
    let http = HttpClient::default();

    let body = app_mention("EvGwDifferent1", "hello");
    // The request ends failed: no retry would make the same writes.
    deliver(&http, &gateway.url(), &body, None).await;
    let answers = answers.lock().unwrap().clone();
    assert_eq!(answers.len(), 1, "{}", gateway.log());
    assert_eq!(answers[0]["error"], "slack_once_different_write");
    assert!(
        gateway.log().contains("different write"),
        "{}",
        gateway.log()
    );
    assert_eq!(slack.posted().len(), 1, "only the first run's write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn calls_of_a_run_that_ended_or_without_the_token_are_refused_unmade() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let wrong_token = std::sync::Arc::new(std::sync::Mutex::new(Value::Null));
    let kept = wrong_token.clone();
    let bot = HttpBot::start(move |f: Forwarded| {
        let kept = kept.clone();
        async move {
            let answer = f
                .call_as(
                    "chat.postMessage",
                    json!({"channel": "C0001", "text": "x"}),
                    "xoxb-real",
                )
                .await;
            *kept.lock().unwrap() = answer;
            (StatusCode::OK, String::new())
        }
    })
    .await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    let http = HttpClient::default();

    let body = app_mention("EvGwEnded1", "hello");
    assert!(
        deliver(&http, &gateway.url(), &body, None)
            .await
            .status
            .is_success()
    );
    assert_eq!(wrong_token.lock().unwrap()["error"], "invalid_auth");

    // The run is over: a late write of it (a fire-and-forget call, a bot past its lease).
    let late = bot.received()[0]
        .call(
            "chat.postMessage",
            json!({"channel": "C0001", "text": "late"}),
        )
        .await;
    assert_eq!(late["error"], "slack_once_request_ended");
    assert_eq!(slack.posted().len(), 0, "nothing reached Slack");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_request_not_signed_by_slack_never_reaches_the_bot() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let bot = reacting_bot(false, None).await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    let http = HttpClient::default();

    let body = app_mention("EvGwUnsigned1", "hello");
    // Signed with the gateway's secret (a forward replayed at the gateway), not Slack's.
    let headers = signed_headers(GATEWAY_SECRET, now_unix(), body.as_bytes());
    let answer = http
        .request("POST", &gateway.url(), &headers, body.into_bytes())
        .await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert!(bot.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_post_slack_made_but_answered_with_a_5xx_is_found_in_slack_by_the_retry() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    slack.script_method("chat.postMessage", [SlackFailure::MadeThenStatus(503)]);
    let bot = reacting_bot(false, None).await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    let http = HttpClient::default();

    let body = app_mention("EvGw5xx1", "hello");
    let first = deliver(&http, &gateway.url(), &body, None).await;
    assert!(
        !first.status.is_success(),
        "Slack keeps a retry: {}",
        gateway.log()
    );
    let retry = deliver(&http, &gateway.url(), &body, Some(1)).await;
    assert_eq!(retry.status, StatusCode::OK, "{}", gateway.log());

    let ts = ts_of("EvGw5xx1");
    assert_eq!((eyes(&slack, &ts), replies(&slack, &ts)), (1, 1));
    assert_eq!(bot.received().len(), 2, "the retry ran the bot again");
    assert_eq!(slack.received().len(), 1, "looked up, not posted again");
}

/// A bot answering `/ticket`: `Ticket: printer` in the channel through its `respond`, and
/// `Filing your ticket…` as its acknowledgement.
async fn ticket_bot() -> HttpBot {
    HttpBot::start(|f: Forwarded| async move {
        let answer = f
            .call(
                "respond",
                json!({"response_type": "in_channel", "text": "Ticket: printer"}),
            )
            .await;
        assert_eq!(answer["ok"], true, "{answer}");
        let ack = json!({"response_type": "ephemeral", "text": "Filing your ticket…"});
        (StatusCode::OK, ack.to_string())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_command_is_acknowledged_with_the_bots_answer_and_its_respond_goes_through() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let bot = ticket_bot().await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    let http = HttpClient::default();

    let form = command_form(&slack, "/ticket", "printer");
    let answer = deliver_form(&http, &gateway.url(), &form, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());
    assert_eq!(answer.json()["text"], "Filing your ticket…");
    let received = bot.received();
    assert_eq!(received[0].body, form.as_bytes());
    assert_eq!(
        received[0].header("content-type"),
        "application/x-www-form-urlencoded"
    );
    let responded: Vec<_> = slack
        .calls()
        .into_iter()
        .filter(|(m, _)| m == "response_url")
        .collect();
    assert_eq!(responded.len(), 1);
    assert_eq!(responded[0].1["text"], "Ticket: printer");
    tokio::time::sleep(Duration::from_millis(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn a_bot_slower_than_slacks_3_s_answers_once_from_the_deferred_gateways_worker() {
    let stack = DeferredStack::start(5).await;
    let bot = HttpBot::start(|f: Forwarded| async move {
        f.react().await;
        // An LLM's answer: longer than Slack waits for an acknowledgement.
        tokio::time::sleep(Duration::from_secs(4)).await;
        f.reply("Hello").await;
        (StatusCode::OK, String::new())
    })
    .await;
    let (ingress, worker) = spawn_deferred_gateway(&stack, &[bot.url()], 60);
    let http = HttpClient::default();

    let body = app_mention("EvGwSlow1", "hello");
    let started = std::time::Instant::now();
    let answer = deliver(&http, &ingress.url(), &body, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", ingress.log());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "acknowledged within Slack's 3 s"
    );
    let ts = ts_of("EvGwSlow1");
    let done = eventually(Duration::from_secs(30), || replies(&stack.slack, &ts) == 1).await;
    assert!(done, "worker:\n{}", worker.log());
    assert_eq!(eyes(&stack.slack, &ts), 1);
    assert_eq!(bot.received().len(), 1, "the ingress never called the bot");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(replies(&stack.slack, &ts), 1);
}

/// A mention of the bot in `team`, its message in that workspace of `slack`.
fn mention_in_workspace(slack: &slack_once::testing::FakeSlack, team: &str) -> String {
    let bot_user = slack_once::testing::bot_user_of(team);
    let body = json!({
        "token": "unused", "team_id": team, "api_app_id": slack_once::testing::APP_ID,
        "type": "event_callback", "event_id": format!("Ev{team}1"), "event_time": 1_700_000_000,
        "event": {
            "type": "app_mention", "user": "U0PERSON", "text": format!("<@{bot_user}> hello"),
            "ts": "1700000001.000100", "channel": "C0GENERAL", "event_ts": "1700000001.000100"
        },
        "authorizations": [{"team_id": team, "user_id": bot_user, "is_bot": true}]
    })
    .to_string();
    slack.with_workspace_of(team, |w| w.add_event_message(body.as_bytes()));
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn in_many_workspaces_each_requests_writes_use_its_workspaces_token() {
    let installed = [("xoxb-workspace-a", "T0WSA"), ("xoxb-workspace-b", "T0WSB")];
    let (slack, _table, mut vars) = many_workspaces(&installed).await;
    let bot = reacting_bot(false, None).await;
    vars.extend(gateway_vars(&[bot.url()]));
    let gateway = BotProcess::spawn_gateway(&vars);
    let http = HttpClient::default();

    for team in ["T0WSA", "T0WSB"] {
        let body = mention_in_workspace(&slack, team);
        let answer = deliver(&http, &gateway.url(), &body, None).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());
        let ours = slack.messages_of(team);
        assert_eq!(ours.len(), 1, "{team}: {ours:?}\n{}", gateway.log());
        assert_eq!(ours[0]["text"], "Hello");
    }

    // A call that names no request (a scheduled job) names its workspace.
    let api = gateway
        .url()
        .replace("/slack/events", "/api/chat.postMessage");
    let post = json!({"channel": "C0GENERAL", "text": "The daily digest"}).to_string();
    let mut headers = vec![
        ("content-type".to_string(), "application/json".to_string()),
        ("authorization".to_string(), format!("Bearer {PROXY_TOKEN}")),
    ];
    let unnamed = http.request("POST", &api, &headers, post.clone()).await;
    assert_eq!(unnamed.json()["error"], "slack_once_team_required");
    headers.push(("x-slack-once-team".to_string(), "T0WSB".to_string()));
    let named = http.request("POST", &api, &headers, post).await;
    assert_eq!(named.json()["ok"], true, "{}", named.body);
    assert_eq!(slack.messages_of("T0WSB").len(), 2);
    assert_eq!(slack.messages_of("T0WSA").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_bot_running_past_its_lease_has_its_later_writes_refused() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let late_answers = Arc::new(Mutex::new(Vec::new()));
    let forwards = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (kept, counted) = (late_answers.clone(), forwards.clone());
    let bot = HttpBot::start(move |f: Forwarded| {
        let (kept, counted) = (kept.clone(), counted.clone());
        async move {
            let event = f.json()["event"].clone();
            let reply =
                json!({"channel": event["channel"], "thread_ts": event["ts"], "text": "Hello"});
            if counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                // Stuck past the lease (a slow dependency), then writing as if nothing happened:
                // a process goes on when the gateway stops waiting for it.
                let stuck = tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(2500)).await;
                    let late = f.call("chat.postMessage", reply).await;
                    kept.lock().unwrap().push(late);
                });
                let _ = stuck.await;
                return (StatusCode::OK, String::new());
            }
            f.call("chat.postMessage", reply).await;
            (StatusCode::OK, String::new())
        }
    })
    .await;
    let lease = [("DEDUP_LEASE_SECONDS", "2".to_string())];
    let gateway = spawn_gateway_with(&slack, &table, &[bot.url()], &lease);
    let http = HttpClient::default();

    let body = app_mention("EvGwLease1", "hello");
    let first = deliver(&http, &gateway.url(), &body, None).await;
    assert!(
        !first.status.is_success(),
        "no answer within the lease: Slack keeps a retry"
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let retry = deliver(&http, &gateway.url(), &body, Some(1)).await;
    assert_eq!(retry.status, StatusCode::OK, "{}", gateway.log());
    assert!(
        eventually(Duration::from_secs(5), || !late_answers
            .lock()
            .unwrap()
            .is_empty())
        .await,
        "the stuck run wrote at last"
    );
    assert_eq!(
        late_answers.lock().unwrap()[0]["error"],
        "slack_once_request_ended"
    );
    assert_eq!(replies(&slack, &ts_of("EvGwLease1")), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn a_command_behind_the_deferred_gateway_gets_its_content_through_the_response_url() {
    let stack = DeferredStack::start(5).await;
    let bot = ticket_bot().await;
    let (ingress, worker) = spawn_deferred_gateway(&stack, &[bot.url()], 60);
    let http = HttpClient::default();

    let form = command_form(&stack.slack, "/ticket", "printer");
    let answer = deliver_form(&http, &ingress.url(), &form, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", ingress.log());
    assert!(
        answer.body.is_empty(),
        "acknowledged at once, empty: {}",
        answer.body
    );
    let responded = || {
        stack
            .slack
            .calls()
            .into_iter()
            .filter(|(m, _)| m == "response_url")
            .map(|(_, args)| args["text"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    let both = eventually(Duration::from_secs(20), || responded().len() == 2).await;
    assert!(both, "{:?}\n{}", responded(), worker.log());
    let mut texts = responded();
    texts.sort();
    assert_eq!(texts, ["Filing your ticket…", "Ticket: printer"]);
    assert_eq!(bot.received().len(), 1, "the ingress never called the bot");
}

/// `function_executed` for the execution `execution` of this app's step `summarize`.
pub(crate) fn step_executed(
    event_id: &str,
    execution: &slack_once::testing::StartedExecution,
) -> String {
    json!({
        "token": "unused", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
        "event_id": event_id, "event_time": now_unix(),
        "event": {
            "type": "function_executed",
            "function": {"id": "Fn0SUMMARY", "callback_id": "summarize", "title": "Summarize",
                         "type": "app", "app_id": "A0001",
                         "input_parameters": [], "output_parameters": []},
            "inputs": {"text": "the quarter"},
            "function_execution_id": execution.function_execution_id,
            "workflow_execution_id": execution.workflow_execution_id,
            "event_ts": format!("{}.000100", now_unix()),
            "bot_access_token": execution.bot_access_token,
        },
        "authorizations": [{"team_id": "T0001", "user_id": BOT_USER, "is_bot": true}]
    })
    .to_string()
}

/// A Workflow Builder step behind the gateway: the bot is given the placeholder in place of the
/// step's own token, so a write around the gateway fails at Slack; its completion, made through
/// the proxy with the step's token, is refused by Slack with a 500 on the first run and made
/// on Slack's retry, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_steps_token_stays_with_the_gateway_and_its_completion_survives_a_5xx() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let execution = slack.start_execution("summarize", json!({"text": "the quarter"}));
    let tokens: Arc<Mutex<Vec<Value>>> = Arc::default();
    let bot = HttpBot::start({
        let tokens = tokens.clone();
        move |f: Forwarded| {
            let tokens = tokens.clone();
            async move {
                let event = f.json()["event"].clone();
                tokens
                    .lock()
                    .unwrap()
                    .push(event["bot_access_token"].clone());
                let done = f
                    .call(
                        "functions.completeSuccess",
                        json!({"function_execution_id": event["function_execution_id"],
                               "outputs": {"summary": "up"}}),
                    )
                    .await;
                match done["ok"] == true {
                    true => (StatusCode::OK, String::new()),
                    false => (StatusCode::INTERNAL_SERVER_ERROR, done.to_string()),
                }
            }
        }
    })
    .await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    slack.script_method("functions.completeSuccess", [SlackFailure::Status(500)]);
    let http = HttpClient::default();
    let body = step_executed("EvGatewayStep", &execution);

    let first = deliver(&http, &gateway.url(), &body, None).await;
    assert!(!first.status.is_success(), "{:?}", first.status);
    let retry = deliver(&http, &gateway.url(), &body, Some(1)).await;
    assert_eq!(retry.status, StatusCode::OK, "{}", gateway.log());

    let shown = slack.executions();
    assert_eq!(
        shown[0]["state"],
        "completed",
        "{shown:?}\n{}",
        gateway.log()
    );
    assert_eq!(shown[0]["completions"], 1, "{shown:?}");
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens, [json!(PROXY_TOKEN), json!(PROXY_TOKEN)]);
    assert!(!gateway.log().contains(&execution.bot_access_token));
    // What the bot holds opens nothing at Slack.
    let around = HttpClient::default()
        .request(
            "POST",
            &format!("{}/functions.completeError", slack.base_url),
            &[("authorization".to_string(), format!("Bearer {PROXY_TOKEN}"))],
            json!({"function_execution_id": execution.function_execution_id, "error": "no"})
                .to_string(),
        )
        .await;
    assert_eq!(around.json()["ok"], false, "{}", around.json());
}

/// Two gateway processes behind one address (`SLACK_ONCE_RELAY_CALLS`): the bot's calls of a
/// run the one process holds reach the other, which relays them through the ledger; the
/// mention is answered once, with one reaction and one reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn behind_one_address_a_gateway_relays_the_calls_of_a_run_another_holds() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let bot = reacting_bot(false, None).await;
    let relaying = [("SLACK_ONCE_RELAY_CALLS", "true".to_string())];
    let other = spawn_gateway_with(&slack, &table, &[bot.url()], &relaying);
    let one_address = [
        ("SLACK_ONCE_RELAY_CALLS", "true".to_string()),
        ("SLACK_ONCE_API_URL", format!("http://{}/api/", other.addr)),
    ];
    let holder = spawn_gateway_with(&slack, &table, &[bot.url()], &one_address);
    let http = HttpClient::default();

    let body = app_mention("EvGwOneAddress1", "hello");
    let answer = deliver(&http, &holder.url(), &body, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", holder.log());
    let ts = ts_of("EvGwOneAddress1");
    assert_eq!(
        (eyes(&slack, &ts), replies(&slack, &ts)),
        (1, 1),
        "holder:\n{}\nother:\n{}",
        holder.log(),
        other.log()
    );
    let forwarded = bot.received();
    assert_eq!(
        forwarded[0].header("x-slack-once-api-url"),
        format!("http://{}/api/", other.addr),
        "the calls went to the other process"
    );
}

/// A click on `action_id` in the step `execution` (its `function_data`, and a token of its
/// own, new with each request, as Slack sends it), from `user`.
fn click_in_step(
    slack: &SlackStandin,
    execution: &slack_once::testing::StartedExecution,
    user: &str,
    action_id: &str,
) -> String {
    let id = &execution.function_execution_id;
    let payload = json!({
        "type": "block_actions",
        "team": {"id": "T0001"}, "user": {"id": user, "team_id": "T0001"},
        "api_app_id": "A0001",
        "container": {"type": "message", "message_ts": "1700000000.000100", "channel_id": "D0001"},
        "channel": {"id": "D0001"},
        "actions": [{"type": "button", "action_id": action_id, "block_id": "approval", "value": "x",
                     "action_ts": format!("{}.{:06}", now_unix(), uuid::Uuid::new_v4().as_u128() % 1_000_000)}],
        "trigger_id": slack_once::testing::Workspace::trigger_id(),
        "bot_access_token": slack.execution_token(id),
        "function_data": {"execution_id": id, "function": {"callback_id": "summarize"},
                          "inputs": {"text": "the quarter"}},
    });
    form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish()
}

/// A bot that completes the step a click is in: `approve` with success, `deny` with an error;
/// keeping each completion's answer, and answering the click 200 whatever it was.
async fn deciding_bot(answers: Arc<Mutex<Vec<Value>>>) -> HttpBot {
    HttpBot::start(move |f: Forwarded| {
        let answers = answers.clone();
        async move {
            let (_, payload) = form_urlencoded::parse(&f.body)
                .find(|(k, _)| k == "payload")
                .expect("a click");
            let payload: Value = serde_json::from_str(&payload).unwrap();
            let id = payload["function_data"]["execution_id"].clone();
            let answer = match payload["actions"][0]["action_id"].as_str() {
                Some("approve") => {
                    f.call(
                        "functions.completeSuccess",
                        json!({"function_execution_id": id, "outputs": {"decision": "approved"}}),
                    )
                    .await
                }
                _ => {
                    f.call(
                        "functions.completeError",
                        json!({"function_execution_id": id, "error": "denied"}),
                    )
                    .await
                }
            };
            answers.lock().unwrap().push(answer);
            (StatusCode::OK, String::new())
        }
    })
    .await
}

/// Two approvers decide one step differently, each with a click of their own: the second
/// decision is not the one Slack took, so its completion is answered with Slack's
/// `execution_not_in_running_state`, not `ok` (the bot would tell the second approver the
/// workflow stopped on their denial while it went on approved).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_second_approvers_completion_of_a_step_completed_already_is_answered_not_running() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let execution = slack.start_execution("summarize", json!({"text": "the quarter"}));
    let answers: Arc<Mutex<Vec<Value>>> = Arc::default();
    let bot = deciding_bot(answers.clone()).await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    let http = HttpClient::default();

    let approve = click_in_step(&slack, &execution, "U0001", "approve");
    let answer = deliver_form(&http, &gateway.url(), &approve, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());
    let deny = click_in_step(&slack, &execution, "U0002", "deny");
    let answer = deliver_form(&http, &gateway.url(), &deny, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());

    let answers = answers.lock().unwrap().clone();
    assert_eq!(answers.len(), 2, "{answers:?}\n{}", gateway.log());
    assert_eq!(answers[0]["ok"], true, "{answers:?}");
    assert_eq!(
        answers[1],
        json!({"ok": false, "error": "execution_not_in_running_state"}),
        "the denial was not taken"
    );
    let shown = slack.executions();
    assert_eq!(shown[0]["state"], "completed", "{shown:?}");
    assert_eq!(shown[0]["outputs"], json!({"decision": "approved"}));
    // The first decision's completion, made with its click's own token, never the
    // placeholder; the second's is not sent (the execution's record says it was decided).
    let used: Vec<_> = slack
        .tokens_used()
        .into_iter()
        .filter(|(method, _)| method.starts_with("functions."))
        .collect();
    assert_eq!(used.len(), 1, "{used:?}");
    assert!(
        used.iter().all(|(_, token)| token.starts_with("xwfp-")),
        "{used:?}"
    );
    assert!(!gateway.log().contains("xwfp-"), "no step token in the log");
}

/// A step's completion that Slack made but answered with a 500: Slack's retry of
/// `function_executed` makes it again, and Slack's `execution_not_in_running_state` is that
/// first call's success: the bot is answered `ok`, and the step completed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_steps_completion_made_but_answered_5xx_is_ok_on_slacks_retry() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let execution = slack.start_execution("summarize", json!({"text": "the quarter"}));
    let answers: Arc<Mutex<Vec<Value>>> = Arc::default();
    let bot = HttpBot::start({
        let answers = answers.clone();
        move |f: Forwarded| {
            let answers = answers.clone();
            async move {
                let event = f.json()["event"].clone();
                let done = f
                    .call(
                        "functions.completeSuccess",
                        json!({"function_execution_id": event["function_execution_id"],
                               "outputs": {"summary": "up"}}),
                    )
                    .await;
                answers.lock().unwrap().push(done.clone());
                match done["ok"] == true {
                    true => (StatusCode::OK, String::new()),
                    false => (StatusCode::INTERNAL_SERVER_ERROR, done.to_string()),
                }
            }
        }
    })
    .await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    slack.script_method(
        "functions.completeSuccess",
        [SlackFailure::MadeThenStatus(500)],
    );
    let http = HttpClient::default();
    let body = step_executed("EvGatewayStepMade", &execution);

    let first = deliver(&http, &gateway.url(), &body, None).await;
    assert!(!first.status.is_success(), "{:?}", first.status);
    let retry = deliver(&http, &gateway.url(), &body, Some(1)).await;
    assert_eq!(retry.status, StatusCode::OK, "{}", gateway.log());

    let answers = answers.lock().unwrap().clone();
    assert_eq!(answers.last().unwrap()["ok"], true, "{answers:?}");
    let shown = slack.executions();
    assert_eq!(shown[0]["state"], "completed", "{shown:?}");
    assert_eq!(shown[0]["completions"], 1, "{shown:?}");
}

/// `slack-once gateway --version` and `slack-once gateway --help` answer whatever
/// name the binary runs under: installed as `gateway` (its `argv[0]`), its own name is not
/// the subcommand.
#[test]
#[ignore = "needs the built binary"]
fn the_gateways_arguments_are_read_after_the_subcommand_whatever_the_binarys_name() {
    use std::os::unix::process::CommandExt;
    for name in ["slack-once", "gateway"] {
        let run = |args: &[&str]| {
            std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"))
                .arg0(name)
                .args(args)
                .env_remove("AWS_LAMBDA_RUNTIME_API")
                .output()
                .expect("the binary runs")
        };
        let version = run(&["gateway", "--version"]);
        assert!(version.status.success(), "{name}: {version:?}");
        assert!(
            String::from_utf8_lossy(&version.stdout).starts_with("slack-once "),
            "{name}: {version:?}"
        );
        let usage = run(&["gateway", "--help"]);
        assert!(usage.status.success(), "{name}: {usage:?}");
        assert!(
            String::from_utf8_lossy(&usage.stdout).contains("slack-once gateway worker"),
            "{name}: {usage:?}"
        );
    }
}

/// A bot that completes its step with success and then, in the same run, with an error: Slack
/// took the first, so the second is answered as Slack answers it, `execution_not_in_running_state`,
/// and the step stays completed with the first's outputs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_completion_after_the_runs_own_first_one_is_answered_not_running() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let execution = slack.start_execution("summarize", json!({"text": "the quarter"}));
    let answers: Arc<Mutex<Vec<Value>>> = Arc::default();
    let bot = HttpBot::start({
        let answers = answers.clone();
        move |f: Forwarded| {
            let answers = answers.clone();
            async move {
                let id = f.json()["event"]["function_execution_id"].clone();
                let success = f
                    .call(
                        "functions.completeSuccess",
                        json!({"function_execution_id": id, "outputs": {"summary": "up"}}),
                    )
                    .await;
                let error = f
                    .call(
                        "functions.completeError",
                        json!({"function_execution_id": id, "error": "changed my mind"}),
                    )
                    .await;
                answers.lock().unwrap().extend([success, error]);
                (StatusCode::OK, String::new())
            }
        }
    })
    .await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    let http = HttpClient::default();

    let body = step_executed("EvGatewayStepTwice", &execution);
    let answer = deliver(&http, &gateway.url(), &body, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", gateway.log());
    let answers = answers.lock().unwrap().clone();
    assert_eq!(answers[0]["ok"], true, "{answers:?}");
    assert_eq!(
        answers[1],
        json!({"ok": false, "error": "execution_not_in_running_state"})
    );
    let shown = slack.executions();
    assert_eq!(shown[0]["state"], "completed", "{shown:?}");
    assert_eq!(shown[0]["outputs"], json!({"summary": "up"}));
}

/// A bot that sends its completion again in the same run after the gateway answered it
/// `slack_once_unavailable` (Slack made it, but answered with a 500): the completion was its
/// own, so the second is answered `ok` (not Slack's `execution_not_in_running_state`), and
/// the step completed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_completion_sent_again_in_its_run_after_a_5xx_is_answered_ok() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let execution = slack.start_execution("summarize", json!({"text": "the quarter"}));
    let answers: Arc<Mutex<Vec<Value>>> = Arc::default();
    let bot = HttpBot::start({
        let answers = answers.clone();
        move |f: Forwarded| {
            let answers = answers.clone();
            async move {
                let id = f.json()["event"]["function_execution_id"].clone();
                let complete = json!({"function_execution_id": id, "outputs": {"summary": "up"}});
                for _ in 0..2 {
                    let answer = f.call("functions.completeSuccess", complete.clone()).await;
                    let done = answer["ok"] == true;
                    answers.lock().unwrap().push(answer);
                    if done {
                        return (StatusCode::OK, String::new());
                    }
                }
                (StatusCode::INTERNAL_SERVER_ERROR, String::new())
            }
        }
    })
    .await;
    let gateway = spawn_gateway(&slack, &table, &[bot.url()]);
    slack.script_method(
        "functions.completeSuccess",
        [SlackFailure::MadeThenStatus(500)],
    );
    let http = HttpClient::default();

    let body = step_executed("EvGatewayStepAgain", &execution);
    deliver(&http, &gateway.url(), &body, None).await;
    let sent = answers.lock().unwrap().clone();
    assert_eq!(sent.len(), 2, "{sent:?}\n{}", gateway.log());
    assert_eq!(sent[1]["ok"], true, "the completion was its own: {sent:?}");
    // The run's first write failed in doubt, so its claim is released (as for any write):
    // Slack's retry finds the completion made.
    let retry = deliver(&http, &gateway.url(), &body, Some(1)).await;
    assert_eq!(retry.status, StatusCode::OK, "{}", gateway.log());
    let shown = slack.executions();
    assert_eq!(shown[0]["state"], "completed", "{shown:?}");
    assert_eq!(shown[0]["completions"], 1, "{shown:?}");
}

/// A step decided by one request while another's completion was in doubt: the first gateway
/// sent `function_executed`'s `completeSuccess` and died before Slack made it or answered; an
/// approver's click, through another gateway, denies; Slack's retry of `function_executed`
/// reaches a third. Slack's `execution_not_in_running_state` to a completion sent again must
/// not be taken as the first call's success when another decision ended the step: each bot is
/// told `ok` exactly when its own decision is the one the step ended with. The gateway decides
/// and completes a request's own step as the Rust listeners do (`Ctx::decide`,
/// `Ctx::complete_decision`): the first decision recorded is the one sent, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_takeovers_completion_of_a_step_another_request_decided_is_not_answered_ok() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let execution = slack.start_execution("summarize", json!({"text": "the quarter"}));
    // The completion reaches Slack, which never makes it nor answers: the gateway dies waiting.
    slack.script_method("functions.completeSuccess", [SlackFailure::Unanswered]);
    let answers: Arc<Mutex<Vec<Value>>> = Arc::default();
    let clicks: Arc<Mutex<Vec<Value>>> = Arc::default();
    let summarizing = HttpBot::start({
        let answers = answers.clone();
        move |f: Forwarded| {
            let answers = answers.clone();
            async move {
                let id = f.json()["event"]["function_execution_id"].clone();
                let done = f
                    .call(
                        "functions.completeSuccess",
                        json!({"function_execution_id": id, "outputs": {"summary": "up"}}),
                    )
                    .await;
                answers.lock().unwrap().push(done);
                (StatusCode::OK, String::new())
            }
        }
    })
    .await;
    let lease = [("DEDUP_LEASE_SECONDS", "2".to_string())];
    let mut first = spawn_gateway_with(&slack, &table, &[summarizing.url()], &lease[..]);
    let http = HttpClient::default();
    let body = step_executed("EvGatewayStepTakeover", &execution);
    let url = first.url();
    let delivered = tokio::spawn({
        let (http, body) = (http.clone(), body.clone());
        async move { deliver(&http, &url, &body, None).await }
    });
    let sent = eventually(Duration::from_secs(5), || {
        slack.calls_of("functions.completeSuccess") == 1
    })
    .await;
    assert!(sent, "the completion reached Slack: {}", first.log());
    first.kill();
    delivered.abort();

    // An approver denies: another request, another gateway, the step failed.
    let deciding = deciding_bot(clicks.clone()).await;
    let second = spawn_gateway_with(&slack, &table, &[deciding.url()], &lease[..]);
    let deny = click_in_step(&slack, &execution, "U0002", "deny");
    deliver_form(&http, &second.url(), &deny, None).await;

    // After the lease, Slack's retry of function_executed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let third = spawn_gateway_with(&slack, &table, &[summarizing.url()], &lease[..]);
    deliver(&http, &third.url(), &body, Some(1)).await;
    // Each request is told `ok` exactly when its own decision is the one the step ended with.
    let shown = slack.executions();
    let summarized = answers.lock().unwrap().last().cloned().unwrap_or_default();
    let denied = clicks.lock().unwrap().last().cloned().unwrap_or_default();
    let completed_with_the_summary =
        shown[0]["state"] == "completed" && shown[0]["outputs"] == json!({"summary": "up"});
    assert_eq!(
        summarized["ok"] == true,
        completed_with_the_summary,
        "function_executed's bot was told {summarized}, the step is {shown:?}\n{}",
        third.log()
    );
    assert_eq!(
        denied["ok"] == true,
        shown[0]["state"] == "failed",
        "the click's bot was told {denied}, the step is {shown:?}"
    );
}

/// Two approvers click in a step behind the deferred gateway: each click is acknowledged at
/// once and forwarded by the worker, with its own token; the first decision completes the
/// step, once, and the second approver's bot is answered `execution_not_in_running_state`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn two_approvers_in_a_step_behind_the_deferred_gateway_complete_it_once() {
    let stack = DeferredStack::start(5).await;
    let execution = stack
        .slack
        .start_execution("summarize", json!({"text": "the quarter"}));
    let answers: Arc<Mutex<Vec<Value>>> = Arc::default();
    let bot = deciding_bot(answers.clone()).await;
    let (ingress, worker) = spawn_deferred_gateway(&stack, &[bot.url()], 60);
    let http = HttpClient::default();

    let approve = click_in_step(&stack.slack, &execution, "U0001", "approve");
    let answer = deliver_form(&http, &ingress.url(), &approve, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", ingress.log());
    let first = eventually(Duration::from_secs(20), || {
        answers.lock().unwrap().len() == 1
    })
    .await;
    assert!(first, "{}", worker.log());
    let deny = click_in_step(&stack.slack, &execution, "U0002", "deny");
    let answer = deliver_form(&http, &ingress.url(), &deny, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", ingress.log());
    let both = eventually(Duration::from_secs(20), || {
        answers.lock().unwrap().len() == 2
    })
    .await;
    assert!(both, "{}", worker.log());

    let answers = answers.lock().unwrap().clone();
    assert_eq!(answers[0]["ok"], true, "{answers:?}\n{}", worker.log());
    assert_eq!(
        answers[1],
        json!({"ok": false, "error": "execution_not_in_running_state"})
    );
    let shown = stack.slack.executions();
    assert_eq!(shown[0]["state"], "completed", "{shown:?}");
    assert_eq!(shown[0]["outputs"], json!({"decision": "approved"}));
    assert_eq!(shown[0]["completions"], 1, "{shown:?}");
}
