//! Lambda mode: the sample events through lambda_http's parsing and the router, and the built
//! binary under a stand-in of the Lambda Runtime API on 127.0.0.1.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http_body_util::BodyExt;
use slack_once::Application;
use slack_once::config::{Config, Secret};
use slack_once::ledger::MemoryLedger;
use slack_once::reference_app;
use tower::ServiceExt;

use crate::helpers::*;

fn sample(name: &str) -> serde_json::Value {
    let path = format!("{}/events/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn resigned(name: &str) -> serde_json::Value {
    let mut event = sample(name);
    slack_once::tools::sign::resign_lambda_event(&mut event, &Secret::new(SECRET), now_unix())
        .unwrap();
    event
}

#[tokio::test]
async fn every_sample_event_gets_the_status_it_should_through_lambda_http_and_the_router() {
    let slack = SlackStandin::start().await;
    let vars: HashMap<&str, String> = [
        ("SLACK_SIGNING_SECRET", SECRET.to_string()),
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
    ]
    .into_iter()
    .collect();
    let config = Config::from_lookup(|k| vars.get(k).cloned()).unwrap();
    let app = Application::with_parts(config, Arc::new(MemoryLedger::new()), reference_app());

    // (file, re-sign it?, status, outcome or error)
    let cases = [
        ("url_verification.json", true, 200, ""),
        ("app_mention.json", true, 200, "answered"),
        ("app_mention_retry.json", true, 200, "duplicate"),
        ("direct_message.json", true, 200, "answered"),
        ("own_message.json", true, 200, "skipped"),
        ("base64_non_ascii.json", true, 200, "answered"),
        ("rest_v1_app_mention.json", true, 200, "answered"),
        ("forged.json", false, 401, "invalid_signature"),
        // The shipped files are signed at a past time: unsigned anew, they are stale.
        ("app_mention.json", false, 401, "invalid_signature"),
    ];
    for (file, sign, status, expected) in cases {
        let event = if sign { resigned(file) } else { sample(file) };
        let request = lambda_http::request::from_str(&event.to_string())
            .unwrap_or_else(|e| panic!("{file}: lambda_http cannot parse it: {e}"));
        let response = app.router().oneshot(request).await.unwrap();
        let got = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body)
            .unwrap_or_else(|_| panic!("{file}: {got} {}", String::from_utf8_lossy(&body)));
        assert_eq!(got, status, "{file}: {json}");
        if file == "url_verification.json" {
            assert_eq!(
                json["challenge"],
                "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
            );
        } else if status == 200 {
            assert_eq!(json["outcome"], expected, "{file}");
        } else {
            assert_eq!(json["error"], expected, "{file}");
        }
    }
    let posted = slack.posted();
    assert_eq!(posted.len(), 4, "mention, DM, base64 mention, REST mention");
    let texts: Vec<&str> = posted
        .iter()
        .map(|p| p.body["text"].as_str().unwrap())
        .collect();
    assert!(
        texts
            .iter()
            .any(|t| t.contains("¿Qué tal? — naïve café 👋 日本語")),
        "{texts:?}"
    );
}

// ---------------------------------------------------------------- the built binary on Lambda

fn lambda_vars(
    runtime: &RuntimeApi,
    slack: &SlackStandin,
    endpoint: &str,
    table: &str,
) -> Vec<(&'static str, String)> {
    let mut vars = dynamodb_env(endpoint);
    vars.extend([
        ("AWS_LAMBDA_RUNTIME_API", runtime.addr.to_string()),
        ("AWS_LAMBDA_FUNCTION_NAME", "slack-once".to_string()),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256".to_string()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_string()),
        ("AWS_LAMBDA_LOG_STREAM_NAME", "test-stream".to_string()),
        (
            "AWS_LAMBDA_LOG_GROUP_NAME",
            "/aws/lambda/slack-once".to_string(),
        ),
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
        ("DEDUP_TABLE", table.to_string()),
    ]);
    vars
}

/// Starts the binary under the Runtime API stand-in (it does not log a listening address).
fn spawn_lambda(vars: &[(&'static str, String)]) -> std::process::Child {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"));
    command
        .env_clear()
        .env("SLACK_SIGNING_SECRET", SECRET)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    for (k, v) in vars {
        command.env(k, v);
    }
    command.spawn().expect("the binary starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn under_the_lambda_runtime_api_the_invocation_deadline_is_the_lease() {
    let endpoint = dynamodb_endpoint();
    let (table, ledger) = fresh_table(&endpoint).await;
    let slack = SlackStandin::start().await;
    let runtime = RuntimeApi::start().await;
    let mut child = spawn_lambda(&lambda_vars(&runtime, &slack, &endpoint, &table));

    let event = resigned("app_mention.json");
    let (answer, deadline) = runtime.invoke(&event, Duration::from_secs(20)).await;
    assert_eq!(answer["statusCode"], 200, "{answer}");
    let body: serde_json::Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["outcome"], "answered");
    let key = message_key("T0001TEAM", "C0789CHAN", "1767225600.000100");
    let item = ledger.get_item(&key).await.unwrap().unwrap();
    assert_eq!(
        item["lease_until"].as_n().unwrap(),
        &deadline.to_string(),
        "lease = invocation deadline"
    );
    assert_eq!(item["status"].as_s().unwrap(), "done");

    let (retry, _) = runtime
        .invoke(&resigned("app_mention_retry.json"), Duration::from_secs(20))
        .await;
    let body: serde_json::Value = serde_json::from_str(retry["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["outcome"], "duplicate");

    let (forged, _) = runtime
        .invoke(&sample("forged.json"), Duration::from_secs(20))
        .await;
    assert_eq!(forged["statusCode"], 401);
    assert_eq!(slack.posted().len(), 1);
    let _ = child.kill();
    let _ = child.wait();
}

/// Four mentions invoked at once, each post held 1.5 s by Slack: how many posts Slack had
/// received when the first invocation answered, and the four answers.
async fn four_at_once(max_concurrency: Option<&str>) -> (usize, Vec<serde_json::Value>) {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let slack = Arc::new(SlackStandin::start().await);
    slack.script((0..4).map(|_| SlackFailure::Slow(Duration::from_millis(1500))));
    let runtime = Arc::new(RuntimeApi::start().await);
    let mut vars = lambda_vars(&runtime, &slack, &endpoint, &table);
    if let Some(n) = max_concurrency {
        vars.push(("AWS_LAMBDA_MAX_CONCURRENCY", n.to_string()));
    }
    let mut child = spawn_lambda(&vars);
    let mut invocations = tokio::task::JoinSet::new();
    for i in 0..4 {
        let body = app_mention(&format!("EvLmi{i}"), "at once");
        register_event_message(body.as_bytes());
        let mut event = sample("app_mention.json");
        event["body"] = body.into();
        slack_once::tools::sign::resign_lambda_event(&mut event, &Secret::new(SECRET), now_unix())
            .unwrap();
        let (runtime, slack) = (runtime.clone(), slack.clone());
        invocations.spawn(async move {
            let (answer, _) = runtime.invoke(&event, Duration::from_secs(20)).await;
            (answer, slack.received().len())
        });
    }
    let answers = invocations.join_all().await;
    let received_at_first = answers.iter().map(|(_, r)| *r).min().unwrap();
    let answers: Vec<serde_json::Value> = answers.into_iter().map(|(a, _)| a).collect();
    assert_eq!(slack.posted().len(), 4, "each mention answered once");
    assert!(slack.posts_per_event().values().all(|n| *n == 1));
    let _ = child.kill();
    let _ = child.wait();
    (received_at_first, answers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn with_lambdas_max_concurrency_one_environment_answers_several_invocations_at_once() {
    // Lambda Managed Instances: AWS_LAMBDA_MAX_CONCURRENCY=4. The four posts are all at Slack
    // before any invocation answers; each answered once, each its own claim.
    let (received, answers) = four_at_once(Some("4")).await;
    assert_eq!(received, 4, "the invocations ran at once");
    for answer in &answers {
        assert_eq!(answer["statusCode"], 200, "{answer}");
        let body: serde_json::Value =
            serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["outcome"], "answered");
    }
    // Without it, one at a time, as on ordinary Lambda: the test can tell the two apart.
    let (received, _) = four_at_once(None).await;
    assert_eq!(received, 1, "one invocation at a time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn on_lambda_a_slack_call_is_abandoned_before_the_invocation_deadline() {
    let endpoint = dynamodb_endpoint();
    let (table, ledger) = fresh_table(&endpoint).await;
    let slack = SlackStandin::start().await;
    slack.script([SlackFailure::Unanswered]);
    let runtime = RuntimeApi::start().await;
    let mut child = spawn_lambda(&lambda_vars(&runtime, &slack, &endpoint, &table));

    let started = std::time::Instant::now();
    let (answer, _) = runtime
        .invoke(&resigned("direct_message.json"), Duration::from_secs(3))
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "answered before the deadline"
    );
    assert_eq!(answer["statusCode"], 504, "{answer}");
    let key = message_key("T0001TEAM", "D0ABCDM", "1767225601.000200");
    let item = ledger.get_item(&key).await.unwrap().unwrap();
    assert_eq!(item["status"].as_s().unwrap(), "released");

    // The next delivery takes the released event at once.
    let (answer, _) = runtime
        .invoke(&resigned("direct_message.json"), Duration::from_secs(20))
        .await;
    assert_eq!(answer["statusCode"], 200, "{answer}");
    assert_eq!(slack.posted().len(), 1);
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn on_lambda_the_answer_gets_out_before_the_deadline_though_the_ledger_hangs() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let slack = SlackStandin::start().await;
    // The completion never comes back: the ledger writes run into the deadline.
    let proxy = LedgerProxy::start(&endpoint).await;
    proxy.hold_next(LedgerOp::Complete, HoldAt::BeforeForwarding);
    let runtime = RuntimeApi::start().await;
    let mut child = spawn_lambda(&lambda_vars(&runtime, &slack, &proxy.url, &table));

    let (answer, deadline) = runtime
        .invoke(&resigned("app_mention.json"), Duration::from_secs(3))
        .await;
    let answered_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        answered_at + 100 <= deadline,
        "the answer came {} ms before the deadline",
        deadline as i64 - answered_at as i64
    );
    assert_eq!(answer["statusCode"], 200, "{answer}");
    assert_eq!(proxy.held(), 1, "the completion was held");
    assert_eq!(slack.posted().len(), 1);
    let _ = child.kill();
    let _ = child.wait();
}

/// What the ingress puts on the queue for `envelope`.
fn queued(envelope: &str) -> String {
    serde_json::json!({
        "v": 1,
        "envelope": serde_json::from_str::<serde_json::Value>(envelope).unwrap(),
        "received_at_ms": 1_767_225_600_000u64
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn the_worker_on_lambda_reports_only_the_records_to_hand_out_again() {
    use slack_once::ledger::{ClaimRequest, Ledger, OwnerToken};
    let endpoint = dynamodb_endpoint();
    let (table, ledger) = fresh_table(&endpoint).await;
    let slack = SlackStandin::start().await;
    let runtime = RuntimeApi::start().await;
    let mut vars = lambda_vars(&runtime, &slack, &endpoint, &table);
    vars.push(("SLACK_ONCE_ROLE", "worker".to_string()));
    let mut child = spawn_lambda(&vars);

    // EvLamBusy: another worker holds a live claim. EvLamDone: answered already.
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    for (id, complete) in [("EvLamBusy", false), ("EvLamDone", true)] {
        let event_id = slack_once::slack::envelope::EventId::try_from(mention_key(id)).unwrap();
        let owner = OwnerToken::random();
        ledger
            .claim(&ClaimRequest {
                event_id: &event_id,
                owner: &owner,
                now_ms,
                lease_until_ms: now_ms + 600_000,
                expires_at_s: now_ms / 1000 + 90_000,
                team_id: None,
                retry_num: None,
                retry_reason: None,
                app_id: None,
                redelivery_due: false,
            })
            .await
            .unwrap();
        if complete {
            ledger.complete(&event_id, &owner, now_ms).await.unwrap();
        }
    }
    let batch = serde_json::json!({"Records": [
        sqs_record("m-answer", &queued(&app_mention("EvLamNew", "hi")), 1),
        sqs_record("m-busy", &queued(&app_mention("EvLamBusy", "hi")), 2),
        sqs_record("m-garbage", "this is not a queued event", 1),
        sqs_record("m-done", &queued(&app_mention("EvLamDone", "hi")), 1),
    ]});
    let (answer, _) = runtime.invoke(&batch, Duration::from_secs(20)).await;
    let failures: Vec<&str> = answer["batchItemFailures"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .map(|f| f["itemIdentifier"].as_str().unwrap())
        .collect();
    assert_eq!(failures, ["m-busy", "m-garbage"], "{answer}");
    assert_eq!(slack.posted().len(), 1);
    let item = ledger
        .get_item(&mention_key("EvLamNew"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(item["status"].as_s().unwrap(), "done");
    let _ = child.kill();
    let _ = child.wait();
}

/// A record released for a passing failure (Slack's HTTP 500) is reported, and its visibility
/// changed first with its receipt handle: it comes back from the queue within its backoff
/// (10 s), not after the visibility it was received with (300 s here; six times the worker's
/// timeout in the template).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn on_lambda_a_record_released_for_a_passing_failure_comes_back_within_its_backoff() {
    let endpoint = dynamodb_endpoint();
    let (table, _ledger) = fresh_table(&endpoint).await;
    let sqs = sqs_endpoint();
    let queue = TestQueue::create(&sqs, 5).await;
    let slack = SlackStandin::start().await;
    slack.script([SlackFailure::Status(500)]);
    let runtime = RuntimeApi::start().await;
    let mut vars = lambda_vars(&runtime, &slack, &endpoint, &table);
    vars.extend([
        ("SLACK_ONCE_ROLE", "worker".to_string()),
        ("WORK_QUEUE_MAX_RECEIVES", "5".to_string()),
        ("AWS_ENDPOINT_URL_SQS", sqs.clone()),
        ("WORK_QUEUE_URL", queue.url.clone()),
    ]);
    let mut child = spawn_lambda(&vars);

    // The event source mapping's receive, hiding the message as a 300 s visibility would.
    let receive = |visibility: i32, wait: i32| {
        queue
            .client
            .receive_message()
            .queue_url(&queue.url)
            .visibility_timeout(visibility)
            .wait_time_seconds(wait)
            .message_system_attribute_names(
                aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount,
            )
            .send()
    };
    queue
        .client
        .send_message()
        .queue_url(&queue.url)
        .message_body(queued(&app_mention("EvLamSoon", "hi")))
        .send()
        .await
        .unwrap();
    let got = receive(300, 5).await.unwrap();
    let message = &got.messages()[0];
    let mut record = sqs_record(message.message_id().unwrap(), message.body().unwrap(), 1);
    record["receiptHandle"] = message.receipt_handle().unwrap().into();
    let (answer, _) = runtime
        .invoke(
            &serde_json::json!({"Records": [record]}),
            Duration::from_secs(20),
        )
        .await;
    let reported_at = Instant::now();
    assert_eq!(
        answer["batchItemFailures"][0]["itemIdentifier"],
        message.message_id().unwrap(),
        "{answer}"
    );
    assert_eq!(slack.posted().len(), 0, "Slack answered 500");
    let again = loop {
        let got = receive(300, 2).await.unwrap();
        if let Some(m) = got.messages().first() {
            break m.clone();
        }
        assert!(
            reported_at.elapsed() < Duration::from_secs(30),
            "the record did not come back within its backoff"
        );
    };
    println!(
        "lambda: a released record visible again {:.1} s after the batch was answered",
        reported_at.elapsed().as_secs_f64()
    );
    assert_eq!(again.body(), message.body(), "the same message");
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn on_lambda_every_log_line_of_an_event_carries_its_ids_and_one_metrics_line_is_printed() {
    // A retry (X-Slack-Retry-Num: 1) as the first delivery the function sees.
    let lines = stdout_of_one_invocation(
        &[("RUST_LOG", "info"), ("AWS_LAMBDA_LOG_FORMAT", "JSON")],
        "app_mention_retry.json",
    )
    .await;
    let parsed: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
        .collect();
    let of_the_event: Vec<&serde_json::Value> = parsed
        .iter()
        .filter(|l| l["span"]["name"] == "event")
        .collect();
    assert!(!of_the_event.is_empty(), "{lines:?}");
    for line in &of_the_event {
        let span = &line["span"];
        assert_eq!(span["event_id"], "Ev0A1MENTION", "{line}");
        assert_eq!(span["team"], "T0001TEAM", "{line}");
        assert_eq!(span["retry_num"], 1, "{line}");
        assert_eq!(span["function_version"], "$LATEST", "{line}");
        assert!(
            span["request_id"].as_str().is_some_and(|id| !id.is_empty()),
            "{line}"
        );
    }
    let metrics = metric_lines(&lines.join("\n"));
    assert_eq!(metrics.len(), 1, "one metrics line for the invocation");
    assert_eq!(metrics[0]["Answered"], 1.0);
    assert_eq!(metrics[0]["FunctionVersion"], "$LATEST");
    assert!(metrics[0]["RequestId"].is_string());
}

/// Lambda's level (what the template's LoggingConfig sets) and an operator's
/// RUST_LOG: its per-target directives still apply beneath Lambda's level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn on_lambda_rust_logs_per_target_levels_apply_beneath_lambdas_level() {
    let lines = stdout_of_one_invocation(
        &[
            ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
            ("AWS_LAMBDA_LOG_LEVEL", "INFO"),
            ("RUST_LOG", "info,slack_once::run=warn"),
        ],
        "own_message.json",
    )
    .await;
    assert!(
        !lines.iter().any(|l| l.contains("slack-once starting")),
        "RUST_LOG's `slack_once::run=warn` was dropped because AWS_LAMBDA_LOG_LEVEL is set:\n{}",
        lines.join("\n")
    );
}

/// The lines the binary prints on stdout under the Runtime API stand-in, with `env` beside
/// Lambda's variables, for one invocation with the event file `event` (answered 200).
async fn stdout_of_one_invocation(env: &[(&str, &str)], event: &str) -> Vec<String> {
    use std::io::BufRead;
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let slack = SlackStandin::start().await;
    let runtime = RuntimeApi::start().await;
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"));
    command
        .env_clear()
        .env("SLACK_SIGNING_SECRET", SECRET)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    for (k, v) in lambda_vars(&runtime, &slack, &endpoint, &table) {
        command.env(k, v);
    }
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    let (answer, _) = runtime
        .invoke(&resigned(event), Duration::from_secs(20))
        .await;
    assert_eq!(answer["statusCode"], 200, "{answer}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = child.kill();
    let _ = child.wait();
    reader.join().unwrap()
}
