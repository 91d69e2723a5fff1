//! `slack-once gateway` on Lambda: the built binary as environments of one function under the
//! Runtime API stand-in, behind a function URL that makes each request an invocation, on
//! DynamoDB Local. Slack's requests and the bot's Web API calls reach the same URL, so a call
//! lands in an environment other than the busy one that holds its request, and is relayed to it
//! through the ledger.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::StatusCode;
use serde_json::json;

use crate::helpers::*;

/// The function's timeout, and so its requests' lease.
const FUNCTION_TIMEOUT: Duration = Duration::from_secs(4);

/// A function URL in front of `environments` environments of the gateway, forwarding to
/// `bots`, on DynamoDB Local's `table`.
struct GatewayFunction {
    url: FunctionUrl,
    runtime: Arc<RuntimeApi>,
    environments: Vec<LambdaEnvironment>,
    vars: Vec<(&'static str, String)>,
}

impl GatewayFunction {
    async fn start(
        slack: &SlackStandin,
        table: &str,
        bots: &[String],
        environments: usize,
    ) -> Self {
        let vars = bot_vars(slack, &dynamodb_endpoint(), table);
        Self::on(vars, bots, environments).await
    }

    /// The function with `vars` (its ledger, Slack, its workspaces) and the gateway's own.
    async fn on(
        mut vars: Vec<(&'static str, String)>,
        bots: &[String],
        environments: usize,
    ) -> Self {
        let runtime = Arc::new(RuntimeApi::start().await);
        let url = FunctionUrl::start(runtime.clone(), FUNCTION_TIMEOUT).await;
        vars.extend(gateway_vars(bots));
        vars.push(("SLACK_ONCE_API_URL", url.api_url()));
        // The forward's line names the event: which environment holds it.
        vars.push(("RUST_LOG", "info,slack_once::gateway=debug".into()));
        let mut function = Self {
            url,
            runtime,
            environments: Vec::new(),
            vars,
        };
        for _ in 0..environments {
            function.add_environment();
        }
        function
    }

    /// Kills the environment that holds the request `event_id` (its forward's line names the
    /// event), and starts another in its place.
    fn kill_the_holder_of(&mut self, event_id: &str) {
        let holder = self
            .environments
            .iter()
            .position(|e| e.log().contains(event_id))
            .unwrap_or_else(|| panic!("no environment names the event:\n{}", self.logs()));
        self.environments[holder].kill();
        self.add_environment();
    }

    /// Another environment, as Lambda starts one when every other is busy.
    fn add_environment(&mut self) {
        let environment = LambdaEnvironment::start(&self.runtime, &["gateway"], &self.vars);
        self.environments.push(environment);
    }

    fn logs(&self) -> String {
        self.environments
            .iter()
            .enumerate()
            .map(|(n, e)| format!("--- environment {n}\n{}", e.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Deferred mode's two functions: the ingress behind its URL (two environments: it serves the
/// bot's calls too, relaying them through the ledger) and the worker, invoked with the queue's
/// records as the event source mapping invokes it.
struct DeferredFunctions {
    url: FunctionUrl,
    ingress: Vec<LambdaEnvironment>,
    worker_runtime: RuntimeApi,
    worker: LambdaEnvironment,
}

impl DeferredFunctions {
    /// The functions on `stack`'s queue and table, forwarding to `bots`; `ingress_extra` set on
    /// the ingress after the rest.
    async fn start(
        stack: &DeferredStack,
        bots: &[String],
        ingress_extra: &[(&'static str, String)],
    ) -> Self {
        let ingress_runtime = Arc::new(RuntimeApi::start().await);
        let url = FunctionUrl::start(ingress_runtime.clone(), FUNCTION_TIMEOUT).await;
        let mut ingress_vars = stack.ingress_vars();
        // The ingress is the proxy too: it relays the bot's calls through the ledger.
        ingress_vars.extend(dynamodb_env(&stack.dynamodb));
        ingress_vars.push(("DEDUP_TABLE", stack.table.clone()));
        ingress_vars.extend(gateway_vars(bots));
        ingress_vars.push(("SLACK_ONCE_API_URL", url.api_url()));
        ingress_vars.extend(ingress_extra.iter().cloned());
        let ingress = (0..2)
            .map(|_| LambdaEnvironment::start(&ingress_runtime, &["gateway"], &ingress_vars))
            .collect();
        let worker_runtime = RuntimeApi::start().await;
        let mut worker_vars = stack.worker_vars(60, 5);
        worker_vars.extend(gateway_vars(bots));
        worker_vars.push(("SLACK_ONCE_API_URL", url.api_url()));
        worker_vars.push(("SLACK_ONCE_ROLE", "worker".to_string()));
        let worker = LambdaEnvironment::start(&worker_runtime, &["gateway"], &worker_vars);
        Self {
            url,
            ingress,
            worker_runtime,
            worker,
        }
    }

    /// Slack's request `body` to the ingress, acknowledged once queued; then the queued record
    /// to the worker: the worker's answer to its batch.
    async fn deliver_and_work(&self, stack: &DeferredStack, body: &str) -> serde_json::Value {
        let http = HttpClient::default();
        let acknowledged = deliver(&http, &self.url.events_url(), body, None).await;
        assert_eq!(acknowledged.status, StatusCode::OK, "{}", self.logs());
        let received = stack
            .queue
            .client
            .receive_message()
            .queue_url(&stack.queue.url)
            .wait_time_seconds(5)
            .send()
            .await
            .unwrap();
        let messages = received.messages();
        assert_eq!(messages.len(), 1, "the ingress queued the request");
        let message = &messages[0];
        let batch = json!({"Records": [sqs_record(
            message.message_id().unwrap(),
            message.body().unwrap(),
            1,
        )]});
        let (answer, _) = self
            .worker_runtime
            .invoke(&batch, Duration::from_secs(30))
            .await;
        answer
    }

    fn logs(&self) -> String {
        let ingress: Vec<String> = self.ingress.iter().map(LambdaEnvironment::log).collect();
        format!(
            "ingress:\n{}\nworker:\n{}",
            ingress.join("\n---\n"),
            self.worker.log()
        )
    }
}

/// A bot that reads the thread of the event's message through the gateway's proxy, keeping
/// each answer.
async fn reading_bot() -> (HttpBot, Arc<std::sync::Mutex<Vec<serde_json::Value>>>) {
    let reads: Arc<std::sync::Mutex<Vec<serde_json::Value>>> = Arc::default();
    let bot = HttpBot::start({
        let reads = reads.clone();
        move |forwarded: Forwarded| {
            let reads = reads.clone();
            async move {
                let (channel, ts) = forwarded.message();
                let thread = forwarded
                    .call(
                        "conversations.replies",
                        json!({"channel": channel, "ts": ts}),
                    )
                    .await;
                reads.lock().unwrap().push(thread);
                (StatusCode::OK, String::new())
            }
        }
    })
    .await;
    (bot, reads)
}

async fn mentions_on_lambda(bolt: Bolt) {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let port = free_port();
    let function = GatewayFunction::start(&slack, &table, &[BoltReplica::url_on(port)], 3).await;
    let bot = BoltReplica::start(bolt, port, &function.url.api_url(), &[]);
    let http = HttpClient::default();

    for n in 0..3 {
        let event_id = format!("EvLambda{bolt:?}{n}");
        deliver_with_retries(&http, &function.url.events_url(), &event_id).await;
        assert_eq!(
            answered(&slack, &event_id),
            (1, 1),
            "bot:\n{}\ngateway:\n{}",
            bot.log(),
            function.logs()
        );
    }
    assert_eq!(slack.calls_of("reactions.add"), 3, "no reaction made twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_js_behind_the_gateway_on_lambda_answers_each_mention_once() {
    mentions_on_lambda(Bolt::JavaScript).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_python_behind_the_gateway_on_lambda_answers_each_mention_once() {
    mentions_on_lambda(Bolt::Python).await;
}

/// The environment that holds the request `event_id` is killed after the bot's reaction and
/// before its reply: the reply, relayed to a holder that is gone, is refused once the run's
/// deadline has passed; Slack's retry after the lease takes the request over, and the bot, run
/// again, gets its reaction's recorded answer and replies once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn on_lambda_a_holder_killed_between_two_writes_leaves_one_of_each() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let reacted = Arc::new(tokio::sync::Notify::new());
    let forwards = Arc::new(AtomicUsize::new(0));
    let replies: Arc<std::sync::Mutex<Vec<serde_json::Value>>> = Arc::default();
    let bot = HttpBot::start({
        let (reacted, forwards, replies) = (reacted.clone(), forwards.clone(), replies.clone());
        move |forwarded: Forwarded| {
            let (reacted, forwards, replies) = (reacted.clone(), forwards.clone(), replies.clone());
            // A task of its own: a bot's handler goes on when the gateway's connection drops.
            let handled = tokio::spawn(async move {
                let first = forwards.fetch_add(1, Ordering::SeqCst) == 0;
                let event = forwarded.json()["event"].clone();
                let (channel, ts) = (event["channel"].clone(), event["ts"].clone());
                let reaction = forwarded
                    .call(
                        "reactions.add",
                        json!({"channel": channel, "timestamp": ts, "name": "eyes"}),
                    )
                    .await;
                assert_eq!(reaction["ok"], true, "{reaction}");
                if first {
                    reacted.notify_one();
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                let reply = forwarded
                    .call(
                        "chat.postMessage",
                        json!({"channel": channel, "thread_ts": ts, "text": "Hello <@U0001>"}),
                    )
                    .await;
                replies.lock().unwrap().push(reply);
                (StatusCode::OK, String::new())
            });
            async move { handled.await.unwrap() }
        }
    })
    .await;
    let mut function = GatewayFunction::start(&slack, &table, &[bot.url()], 2).await;
    let events_url = function.url.events_url();
    let event_id = "EvLambdaHolderKilled";
    let body = app_mention(event_id, "hello");

    let first = tokio::spawn({
        let (url, body) = (events_url.clone(), body.clone());
        async move {
            deliver(&HttpClient::default(), &url, &body, None)
                .await
                .status
        }
    });
    tokio::time::timeout(Duration::from_secs(10), reacted.notified())
        .await
        .expect("the bot reacted");
    function.kill_the_holder_of(event_id);
    assert_eq!(
        first.await.unwrap(),
        StatusCode::BAD_GATEWAY,
        "the holder died unanswered"
    );
    // The reply waits for the run's holder until the run's deadline, then is withdrawn.
    for _ in 0..100 {
        if !replies.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = replies.lock().unwrap().clone();
    assert_eq!(
        refused,
        [json!({"ok": false, "error": "slack_once_request_ended"})],
        "the dead holder's reply is refused: {}",
        function.logs()
    );

    // Slack's retry, once the dead holder's lease has passed.
    tokio::time::sleep(FUNCTION_TIMEOUT).await;
    let retry = deliver(&HttpClient::default(), &events_url, &body, Some(1)).await;
    assert!(
        retry.status.is_success(),
        "{:?}\n{}",
        retry.status,
        function.logs()
    );
    // The reaction's fate died with its holder: made again, as an idempotent write is, it is
    // still one reaction.
    let ts = ts_of(event_id);
    assert_eq!(eyes(&slack, &ts), 1, "{}", function.logs());
    let thread: Vec<_> = slack
        .posted()
        .into_iter()
        .filter(|p| p.body["thread_ts"] == ts.as_str())
        .collect();
    assert_eq!(thread.len(), 1, "one reply: {}", function.logs());
    assert_eq!(forwards.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn on_lambda_the_gateway_without_its_url_stops_naming_it() {
    let runtime = RuntimeApi::start().await;
    let slack = SlackStandin::start().await;
    let mut vars = bot_vars(&slack, "http://127.0.0.1:9", "slack-once-test");
    vars.extend(gateway_vars(&[
        "http://127.0.0.1:3000/slack/events".to_string()
    ]));
    let mut environment = LambdaEnvironment::start(&runtime, &["gateway"], &vars);
    let mut code = None;
    for _ in 0..100 {
        code = environment.exit_code();
        if code.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(code, Some(2), "{}", environment.log());
    assert!(
        environment.log().contains("SLACK_ONCE_API_URL"),
        "{}",
        environment.log()
    );
}

/// Deferred mode on Lambda: the ingress function acknowledges Slack once the queue holds the
/// request; the worker function, invoked with the queue's record as the event source mapping
/// invokes it, forwards it to a bot slower than Slack's 3 s, whose calls reach the ingress
/// function's URL and are relayed through the ledger to the worker's invocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn on_lambda_a_slow_bot_in_deferred_mode_answers_once_through_the_worker_function() {
    let stack = DeferredStack::start(5).await;
    let bot = HttpBot::start(|forwarded: Forwarded| async move {
        tokio::time::sleep(Duration::from_secs(4)).await;
        let event = forwarded.json()["event"].clone();
        let (channel, ts) = (event["channel"].clone(), event["ts"].clone());
        let reaction = forwarded
            .call(
                "reactions.add",
                json!({"channel": channel, "timestamp": ts, "name": "eyes"}),
            )
            .await;
        let reply = forwarded
            .call(
                "chat.postMessage",
                json!({"channel": channel, "thread_ts": ts, "text": "Hello <@U0001>"}),
            )
            .await;
        assert_eq!(
            (&reaction["ok"], &reply["ok"]),
            (&json!(true), &json!(true))
        );
        (StatusCode::OK, String::new())
    })
    .await;
    let functions = DeferredFunctions::start(&stack, &[bot.url()], &[]).await;
    let event_id = "EvLambdaDeferredSlow";
    let answer = functions
        .deliver_and_work(&stack, &app_mention(event_id, "hello"))
        .await;
    assert_eq!(
        answer["batchItemFailures"],
        json!([]),
        "{answer}\n{}",
        functions.logs()
    );
    assert_eq!(
        answered(&stack.slack, event_id),
        (1, 1),
        "{}",
        functions.logs()
    );
}

/// Many workspaces on Lambda, in a channel shared with another organisation that installed the
/// app too: Slack's request names the team of the person who wrote (`team_id`), and the
/// installation it is for in `authorizations`. The bot's read lands in an environment other than
/// its run's holder, and is made there with the run's installation, as the holder makes its own:
/// never with the other organisation's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn on_lambda_a_relayed_read_in_a_shared_channel_uses_the_runs_installation() {
    let installed = [("xoxb-ours", "T0OURS"), ("xoxb-theirs", "T0THEIRS")];
    let (slack, _table, vars) = many_workspaces(&installed).await;
    let (bot, reads) = reading_bot().await;
    let function = GatewayFunction::on(vars, &[bot.url()], 2).await;
    let (url, logs) = (&function.url, || function.logs());

    let ours = slack_once::testing::bot_user_of("T0OURS");
    let body = json!({
        "token": "unused", "team_id": "T0THEIRS", "api_app_id": slack_once::testing::APP_ID,
        "type": "event_callback", "event_id": "EvSharedChannel1", "event_time": 1_700_000_000,
        "event": {
            "type": "app_mention", "user": "U0THEIRPERSON", "text": format!("<@{ours}> hello"),
            "ts": "1700000001.000100", "channel": "C0SHARED", "event_ts": "1700000001.000100"
        },
        "authorizations": [{"team_id": "T0OURS", "user_id": ours, "is_bot": true}]
    })
    .to_string();
    slack.with_workspace_of("T0OURS", |w| w.add_event_message(body.as_bytes()));
    let answer = deliver(&HttpClient::default(), &url.events_url(), &body, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", logs());
    assert_eq!(reads.lock().unwrap().len(), 1, "{}", logs());
    let readers: Vec<String> = slack
        .callers()
        .into_iter()
        .filter(|(method, _)| method == "conversations.replies")
        .map(|(_, team)| team)
        .collect();
    assert_eq!(
        readers,
        ["T0OURS"],
        "the read is the run's installation's: {:?}\n{}",
        reads.lock().unwrap(),
        logs()
    );
}

/// The holder's take of the bot's call is written, and DynamoDB's answer to it lost: the SDK
/// sends the write again, which finds the inbox changed (the write itself). The call taken is
/// made, once, and the bot has its answer at once, not a refusal once the run's deadline passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn on_lambda_a_take_whose_answer_was_lost_makes_the_call_once() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let ledger = LedgerProxy::start(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let reactions: Arc<std::sync::Mutex<Vec<(serde_json::Value, Duration)>>> = Arc::default();
    let bot = HttpBot::start({
        let reactions = reactions.clone();
        move |forwarded: Forwarded| {
            let reactions = reactions.clone();
            async move {
                let event = forwarded.json()["event"].clone();
                let started = std::time::Instant::now();
                let reaction = forwarded
                    .call(
                        "reactions.add",
                        json!({"channel": event["channel"], "timestamp": event["ts"], "name": "eyes"}),
                    )
                    .await;
                reactions
                    .lock()
                    .unwrap()
                    .push((reaction, started.elapsed()));
                (StatusCode::OK, String::new())
            }
        }
    })
    .await;
    let vars = bot_vars(&slack, &ledger.url, &table);
    let function = GatewayFunction::on(vars, &[bot.url()], 2).await;
    let (url, logs) = (&function.url, || function.logs());
    // The inbox's writes: the holder opens it, the proxy appends the call, the holder takes it.
    ledger.hold_nth(LedgerOp::RunInbox, 3, HoldAt::DropAnswer);

    let event_id = "EvLambdaTakeAnswerLost";
    let body = app_mention(event_id, "hello");
    let answer = deliver(&HttpClient::default(), &url.events_url(), &body, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", logs());
    assert_eq!(ledger.held(), 1, "the take's answer was lost: {}", logs());
    let reactions = reactions.lock().unwrap().clone();
    assert_eq!(reactions.len(), 1, "{}", logs());
    let (reaction, took) = &reactions[0];
    assert_eq!(reaction["ok"], true, "{reaction}\n{}", logs());
    assert!(*took < Duration::from_secs(2), "answered in {took:?}");
    assert_eq!(eyes(&slack, &ts_of(event_id)), 1);
    assert_eq!(slack.calls_of("reactions.add"), 1, "made once");
}

/// The bot's SDK sends a relayed write again, its first answer lost on the way back (the
/// function URL's connection dropped): the retry is another invocation, in whichever
/// environment is free, and is answered as the first, the message posted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn on_lambda_an_sdks_retry_of_a_relayed_write_is_answered_as_the_first() {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let answers: Arc<std::sync::Mutex<Vec<serde_json::Value>>> = Arc::default();
    let bot = HttpBot::start({
        let answers = answers.clone();
        move |forwarded: Forwarded| {
            let answers = answers.clone();
            async move {
                let event = forwarded.json()["event"].clone();
                let reply =
                    json!({"channel": event["channel"], "thread_ts": event["ts"], "text": "Hello"});
                let first = forwarded.call("chat.postMessage", reply.clone()).await;
                let again = forwarded.call("chat.postMessage", reply).await;
                answers.lock().unwrap().extend([first, again]);
                (StatusCode::OK, String::new())
            }
        }
    })
    .await;
    let function = GatewayFunction::start(&slack, &table, &[bot.url()], 3).await;
    let event_id = "EvLambdaSdkRetry";
    let body = app_mention(event_id, "hello");
    let answer = deliver(
        &HttpClient::default(),
        &function.url.events_url(),
        &body,
        None,
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", function.logs());
    let answers = answers.lock().unwrap().clone();
    assert_eq!(answers.len(), 2, "{}", function.logs());
    assert_eq!(answers[0]["ok"], true, "{answers:?}");
    assert_eq!(
        answers[0]["ts"], answers[1]["ts"],
        "the retry's answer is the first's"
    );
    let ts = ts_of(event_id);
    let thread = slack
        .posted()
        .into_iter()
        .filter(|p| p.body["thread_ts"] == ts.as_str())
        .count();
    assert_eq!(thread, 1, "posted once: {}", function.logs());
}

/// The environment that holds the request is killed after it made the bot's reply and before
/// it wrote the reply's answer. The reply's invocation answers the bot before its own time ends
/// (a Slack-shaped answer, HTTP 200, not the function URL's 502 that an SDK sends again), and
/// as a write whose fate is unknown, not one that was not made. Slack's retry, after the lease,
/// finds the reply made: one of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn on_lambda_a_holder_killed_between_making_a_write_and_answering_it_leaves_its_fate_unknown()
{
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let ledger = LedgerProxy::start(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let forwards = Arc::new(AtomicUsize::new(0));
    let replies: Arc<std::sync::Mutex<Vec<(StatusCode, serde_json::Value)>>> = Arc::default();
    let bot = HttpBot::start({
        let (forwards, replies) = (forwards.clone(), replies.clone());
        move |forwarded: Forwarded| {
            let (forwards, replies) = (forwards.clone(), replies.clone());
            // A task of its own: a bot's handler goes on when the gateway's connection drops.
            let handled = tokio::spawn(async move {
                forwards.fetch_add(1, Ordering::SeqCst);
                let event = forwarded.json()["event"].clone();
                let (channel, ts) = (event["channel"].clone(), event["ts"].clone());
                let reaction = forwarded
                    .call(
                        "reactions.add",
                        json!({"channel": channel, "timestamp": ts, "name": "eyes"}),
                    )
                    .await;
                assert_eq!(reaction["ok"], true, "{reaction}");
                // The call as an SDK makes it, its HTTP status seen.
                let url = format!(
                    "{}chat.postMessage",
                    forwarded.header("x-slack-once-api-url")
                );
                let headers = [
                    ("content-type".to_string(), "application/json".to_string()),
                    ("authorization".to_string(), format!("Bearer {PROXY_TOKEN}")),
                    (
                        "x-slack-once-request".to_string(),
                        forwarded.header("x-slack-once-request").to_string(),
                    ),
                ];
                let reply = json!({"channel": channel, "thread_ts": ts, "text": "Hello <@U0001>"});
                let answer = HttpClient::default()
                    .request("POST", &url, &headers, reply.to_string())
                    .await;
                let body = serde_json::from_str(&answer.body).unwrap_or_default();
                replies.lock().unwrap().push((answer.status, body));
                (StatusCode::OK, String::new())
            });
            async move { handled.await.unwrap() }
        }
    })
    .await;
    let vars = bot_vars(&slack, &ledger.url, &table);
    let mut function = GatewayFunction::on(vars, &[bot.url()], 2).await;
    // The holder's answers: the reaction's passes; the reply's, made, never gets written.
    ledger.hold_nth(LedgerOp::RunAnswer, 2, HoldAt::BeforeForwarding);

    let event_id = "EvLambdaKilledBeforeAnswering";
    let body = app_mention(event_id, "hello");
    let events_url = function.url.events_url();
    let first = tokio::spawn({
        let (url, body) = (events_url.clone(), body.clone());
        async move {
            deliver(&HttpClient::default(), &url, &body, None)
                .await
                .status
        }
    });
    ledger.wait_held().await;
    let ts = ts_of(event_id);
    let thread = || {
        slack
            .posted()
            .into_iter()
            .filter(|p| p.body["thread_ts"] == ts.as_str())
            .count()
    };
    assert_eq!(thread(), 1, "the reply was made: {}", function.logs());
    function.kill_the_holder_of(event_id);
    assert_ne!(first.await.unwrap(), StatusCode::OK, "the holder died");
    for _ in 0..200 {
        if !replies.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let unknown = replies.lock().unwrap().clone();
    assert_eq!(
        unknown,
        [(
            StatusCode::OK,
            json!({"ok": false, "error": "slack_once_unavailable"})
        )],
        "the reply's fate is unknown to its invocation: {}",
        function.logs()
    );

    // Slack's retry, once the dead holder's lease has passed.
    tokio::time::sleep(FUNCTION_TIMEOUT).await;
    let retry = deliver(&HttpClient::default(), &events_url, &body, Some(1)).await;
    assert!(retry.status.is_success(), "{}", function.logs());
    assert_eq!(forwards.load(Ordering::SeqCst), 2);
    assert_eq!(eyes(&slack, &ts), 1);
    assert_eq!(thread(), 1, "one reply: {}", function.logs());
    let replies = replies.lock().unwrap().clone();
    assert_eq!(replies[1].1["ok"], true, "the retry's reply: {replies:?}");
}

/// Deferred mode on Lambda: the bot's read reaches the ingress function, which holds no bot
/// token (it only queues Slack's requests: none is required of it). The read is made with the
/// run's token all the same, by its holder, the worker: Slack answers it, not a tokenless
/// client's made-up answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn on_lambda_in_deferred_mode_a_read_through_the_ingress_is_slacks_answer() {
    let stack = DeferredStack::start(5).await;
    let (bot, reads) = reading_bot().await;
    // Slack's address (the stand-in's), and no bot token: the ingress has none to hold.
    let no_token = [("SLACK_API_URL", format!("{}/api", stack.slack.origin()))];
    let functions = DeferredFunctions::start(&stack, &[bot.url()], &no_token).await;
    let logs = || functions.logs();
    let answer = functions
        .deliver_and_work(&stack, &app_mention("EvLambdaDeferredRead", "hello"))
        .await;
    assert_eq!(
        answer["batchItemFailures"],
        json!([]),
        "{answer}\n{}",
        logs()
    );
    let reads = reads.lock().unwrap().clone();
    assert_eq!(reads.len(), 1, "{}", logs());
    assert_eq!(
        stack.slack.lookups(),
        1,
        "Slack answered the read: {reads:?}\n{}",
        logs()
    );
    assert_eq!(reads[0]["ok"], true, "{reads:?}");
}
