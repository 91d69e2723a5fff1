//! Operations: the metrics lines (CloudWatch embedded metric format) for a scripted run, the
//! logs' fields under Lambda, `--version`, and the Slack secrets read at run time from a
//! Secrets Manager stand-in (moto) with a rotation mid-run.

use std::time::Duration;

use http::StatusCode;

use crate::helpers::*;

/// Checks `line` is a valid EMF document: every declared metric has its member, every
/// dimension its value.
fn assert_emf(line: &serde_json::Value) {
    let aws = &line["_aws"];
    assert!(aws["Timestamp"].as_u64().is_some(), "{line}");
    let directives = aws["CloudWatchMetrics"].as_array().expect("directives");
    for directive in directives {
        assert_eq!(directive["Namespace"], "SlackOnce");
        for set in directive["Dimensions"].as_array().unwrap() {
            for key in set.as_array().unwrap() {
                assert!(
                    line[key.as_str().unwrap()].is_string(),
                    "dimension {key} in {line}"
                );
            }
        }
        for metric in directive["Metrics"].as_array().unwrap() {
            let name = metric["Name"].as_str().unwrap();
            assert!(
                matches!(metric["Unit"].as_str(), Some("Count" | "Milliseconds")),
                "{line}"
            );
            assert!(
                line[name].is_number() || line[name].is_array(),
                "metric {name} has its value in {line}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn a_scripted_run_prints_emf_lines_with_the_right_counts() {
    let slack = SlackStandin::start().await;
    slack.script([None, Some(SlackFailure::Code("channel_not_found"))]);
    let bot = BotProcess::spawn(&[
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "42".to_string()),
    ]);
    let http = HttpClient::default();
    let answered = app_mention("EvMetrics1", "count me");
    assert_eq!(
        deliver(&http, &bot.url(), &answered, None).await.outcome(),
        "answered"
    );
    assert_eq!(
        deliver(&http, &bot.url(), &answered, Some(1))
            .await
            .outcome(),
        "duplicate"
    );
    let forged = signed_headers("forged", now_unix(), answered.as_bytes());
    let refused = http
        .request("POST", &bot.url(), &forged, answered.clone().into_bytes())
        .await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    let failing = app_mention("EvMetrics2", "to an archived channel");
    assert_eq!(
        deliver(&http, &bot.url(), &failing, None).await.outcome(),
        "failed"
    );
    let log = bot.log_after(4).await;
    let lines = metric_lines(&log);
    assert_eq!(lines.len(), 4, "one line per delivery:\n{log}");
    for line in &lines {
        assert_emf(line);
        assert_eq!(line["FunctionVersion"], "42");
        assert_eq!(
            line["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            serde_json::json!([["FunctionVersion"], []])
        );
    }
    for (name, expected) in [
        ("Deliveries", 4.0),
        ("Answered", 1.0),
        ("Duplicate", 1.0),
        ("RejectedSignature", 1.0),
        ("Failed", 1.0),
        ("SlackErrorsPermanent", 1.0),
        ("ColdStart", 1.0),
    ] {
        assert_eq!(metric_sum(&lines, name), expected, "{name}");
    }
    assert_eq!(
        lines[0]["ColdStart"], 1.0,
        "the first invocation of the process is the cold one"
    );
    let acks: Vec<f64> = lines
        .iter()
        .filter_map(|l| l["TimeToAck"].as_array())
        .flatten()
        .filter_map(|v| v.as_f64())
        .collect();
    assert_eq!(acks.len(), 4, "a time to acknowledgement per delivery");
    assert!(lines.iter().any(|l| l["HandlerLatency"].is_array()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn version_is_printed_and_in_the_startup_line() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let version = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        version.trim(),
        format!("slack-once {}", env!("CARGO_PKG_VERSION"))
    );
    let bot = BotProcess::spawn(&[]);
    let log = bot.log();
    let start = log
        .lines()
        .find(|l| l.contains("slack-once starting"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(start.contains(env!("CARGO_PKG_VERSION")), "{start}");
}

// ---------------------------------------------------------------- secrets at run time

struct WithSecrets {
    slack: SlackStandin,
    client: aws_sdk_secretsmanager::Client,
    name: String,
    proxy: LedgerProxy,
    bot: BotProcess,
}

impl WithSecrets {
    async fn start(signing: &str, token: &str) -> Self {
        Self::start_with(signing, token, "1", &[]).await
    }

    /// With `SLACK_SECRETS_REFRESH_SECONDS=refresh` and more variables.
    async fn start_with(
        signing: &str,
        token: &str,
        refresh: &str,
        more: &[(&'static str, String)],
    ) -> Self {
        let sqs = sqs_endpoint(); // moto serves Secrets Manager too
        let client = secrets_client(&sqs);
        let name = format!("slack-once/test-{}", uuid::Uuid::new_v4().simple());
        client
            .create_secret()
            .name(&name)
            .secret_string(
                serde_json::json!({"signing_secret": signing, "bot_token": token}).to_string(),
            )
            .send()
            .await
            .expect("create the secret on the Secrets Manager stand-in");
        // Counts the Secrets Manager calls.
        let proxy = LedgerProxy::start(&sqs).await;
        let slack = SlackStandin::start().await;
        slack.require_token(token);
        let mut vars = vec![
            ("SLACK_SECRETS_ARN", name.clone()),
            ("SLACK_SECRETS_REFRESH_SECONDS", refresh.to_string()),
            ("AWS_ENDPOINT_URL_SECRETS_MANAGER", proxy.url.clone()),
            ("AWS_REGION", "us-east-1".to_string()),
            ("AWS_ACCESS_KEY_ID", "test".to_string()),
            ("AWS_SECRET_ACCESS_KEY", "test".to_string()),
            ("AWS_CONFIG_FILE", "/dev/null".to_string()),
            ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null".to_string()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
            ("SLACK_API_URL", slack.base_url.clone()),
            // The environment's own values are not used when the secret is named.
            ("SLACK_BOT_TOKEN", "xoxb-from-the-environment".to_string()),
        ];
        vars.extend(more.iter().cloned());
        let bot = BotProcess::spawn(&vars);
        Self {
            slack,
            client,
            name,
            proxy,
            bot,
        }
    }

    async fn rotate(&self, signing: &str, token: &str) {
        self.put(serde_json::json!({"signing_secret": signing, "bot_token": token}))
            .await;
    }

    async fn put(&self, value: serde_json::Value) {
        self.client
            .put_secret_value()
            .secret_id(&self.name)
            .secret_string(value.to_string())
            .send()
            .await
            .unwrap();
    }

    /// Reads of the secret after the one at start.
    fn reads_since_start(&self) -> usize {
        self.proxy.seen().len() - 1
    }

    async fn send_signed(&self, secret: &str, body: &str) -> Answer {
        let headers = signed_headers(secret, now_unix(), body.as_bytes());
        HttpClient::default()
            .request("POST", &self.bot.url(), &headers, body.as_bytes().to_vec())
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the SQS server and the built binary"]
async fn secrets_rotated_mid_run_are_read_again_and_no_delivery_fails() {
    let s = WithSecrets::start("signing-one", "xoxb-one").await;
    let first = s
        .send_signed("signing-one", &app_mention("EvSecret1", "a"))
        .await;
    assert_eq!(
        first.outcome(),
        "answered",
        "{}\n{}",
        first.body,
        s.bot.log()
    );
    let reads_at_start = s.proxy.seen().len();
    assert_eq!(reads_at_start, 1, "read once at start");

    // Both secrets rotated; Slack now takes only the new token.
    s.rotate("signing-two", "xoxb-two").await;
    s.slack.require_token("xoxb-two");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second = s
        .send_signed("signing-two", &app_mention("EvSecret2", "b"))
        .await;
    assert_eq!(
        second.outcome(),
        "answered",
        "{}\n{}",
        second.body,
        s.bot.log()
    );

    // Only the token rotated: Slack refuses the cached one, the secret is read again.
    s.rotate("signing-two", "xoxb-three").await;
    s.slack.require_token("xoxb-three");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let third = s
        .send_signed("signing-two", &app_mention("EvSecret3", "c"))
        .await;
    assert_eq!(
        third.outcome(),
        "answered",
        "{}\n{}",
        third.body,
        s.bot.log()
    );

    let posted = s.slack.posted();
    let tokens: Vec<&str> = posted
        .iter()
        .map(|p| p.authorization.as_deref().unwrap())
        .collect();
    assert_eq!(
        tokens,
        ["Bearer xoxb-one", "Bearer xoxb-two", "Bearer xoxb-three"]
    );
    assert_eq!(
        s.proxy.seen().len(),
        3,
        "one read at start and one per rotation"
    );
    let log = s.bot.log_after(3).await;
    assert!(!log.contains("xoxb-"), "no token in the log:\n{log}");
    assert!(!log.contains("signing-one") && !log.contains("signing-two"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the SQS server and the built binary"]
async fn a_token_rotated_just_after_the_start_is_read_again_at_once_and_the_event_answered() {
    // The secret was read a moment ago, well inside the 30 s refresh bound.
    let s = WithSecrets::start_with("signing", "xoxb-one", "30", &[]).await;
    s.rotate("signing", "xoxb-two").await;
    s.slack.require_token("xoxb-two");
    let answer = s
        .send_signed("signing", &app_mention("EvRotatedAtStart", "a"))
        .await;
    assert_eq!(
        answer.outcome(),
        "answered",
        "{}\n{}",
        answer.body,
        s.bot.log()
    );
    let posted = s.slack.posted();
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0].authorization.as_deref(), Some("Bearer xoxb-two"));
    assert_eq!(s.reads_since_start(), 1, "one read, for the refusal");
    let again = s
        .send_signed("signing", &app_mention("EvRotatedAtStart", "a"))
        .await;
    assert_eq!(again.outcome(), "duplicate");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the SQS server and the built binary"]
async fn concurrent_refusals_share_one_read_and_every_event_is_answered() {
    let s = WithSecrets::start_with("signing", "xoxb-one", "30", &[]).await;
    s.rotate("signing", "xoxb-two").await;
    s.slack.require_token("xoxb-two");
    // The read is slow: every delivery meets the refusal while it is under way.
    s.proxy.hold_next(
        LedgerOp::Other,
        HoldAt::DelayForwarding(Duration::from_millis(500)),
    );
    let mut tasks = Vec::new();
    for n in 0..6 {
        let (url, body) = (
            s.bot.url(),
            app_mention(&format!("EvConcurrentRefusal{n}"), "x"),
        );
        tasks.push(tokio::spawn(async move {
            let headers = signed_headers("signing", now_unix(), body.as_bytes());
            HttpClient::default()
                .request("POST", &url, &headers, body.into_bytes())
                .await
        }));
    }
    for t in tasks {
        let answer = t.await.unwrap();
        assert_eq!(
            answer.outcome(),
            "answered",
            "{}\n{}",
            answer.body,
            s.bot.log()
        );
    }
    assert_eq!(s.slack.posted().len(), 6);
    assert_eq!(
        s.reads_since_start(),
        1,
        "six refusals, one read of the secret"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the SQS server and the built binary"]
async fn a_forged_request_first_cannot_spend_or_delay_the_read_a_refused_token_needs() {
    let s = WithSecrets::start_with("signing", "xoxb-one", "2", &[]).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    // A fresh, well-formed signature with a wrong secret: the signature path reads, once.
    let forged = s
        .send_signed("forged", &app_mention("EvForgedFirst", "x"))
        .await;
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED);
    assert_eq!(s.reads_since_start(), 1);
    // Right after it, a token-only rotation: the refused token is read again all the same.
    s.rotate("signing", "xoxb-two").await;
    s.slack.require_token("xoxb-two");
    let answer = s
        .send_signed("signing", &app_mention("EvAfterForged", "x"))
        .await;
    assert_eq!(
        answer.outcome(),
        "answered",
        "{}\n{}",
        answer.body,
        s.bot.log()
    );
    assert_eq!(s.reads_since_start(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the SQS server and the built binary"]
async fn a_token_still_refused_after_a_fresh_read_ends_the_event_failed() {
    let s = WithSecrets::start_with("signing", "xoxb-revoked", "30", &[]).await;
    s.slack.require_token("xoxb-never-given");
    let body = app_mention("EvRevoked", "x");
    // Refused, and the secret read again still holds that token: the first time, the event is
    // released (the operator may not have put the new token in yet).
    let first = s.send_signed("signing", &body).await;
    assert_eq!(first.status, StatusCode::BAD_GATEWAY, "{}", first.body);
    // Slack's retry: refused again, read again, still the same: it ends.
    let answer = s.send_signed("signing", &body).await;
    assert_eq!(
        (answer.status, answer.outcome().as_str()),
        (StatusCode::OK, "failed"),
        "{}",
        answer.body
    );
    assert_eq!(s.reads_since_start(), 2, "one fresh read per refusal");
    assert!(s.slack.posted().is_empty());
    let log = s.bot.log_after(2).await;
    assert!(log.contains("invalid_auth"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the SQS server and the built binary"]
async fn a_refused_token_whose_secret_cannot_be_read_releases_the_event_for_a_later_delivery() {
    let s = WithSecrets::start_with("signing", "xoxb-one", "30", &[]).await;
    s.slack.require_token("xoxb-two");
    // The secret cannot be read at the refusal (deleted; it comes back rotated later).
    s.client
        .delete_secret()
        .secret_id(&s.name)
        .force_delete_without_recovery(true)
        .send()
        .await
        .unwrap();
    let body = app_mention("EvUnreadable", "x");
    let answer = s.send_signed("signing", &body).await;
    assert!(
        !answer.status.is_success(),
        "not ended: released for a later delivery: {} {}",
        answer.status,
        answer.body
    );
    s.client
        .create_secret()
        .name(&s.name)
        .secret_string(
            serde_json::json!({"signing_secret": "signing", "bot_token": "xoxb-two"}).to_string(),
        )
        .send()
        .await
        .unwrap();
    let retry = s.send_signed("signing", &body).await;
    assert_eq!(
        retry.outcome(),
        "answered",
        "{}\n{}",
        retry.body,
        s.bot.log()
    );
    assert_eq!(s.slack.posted().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the SQS server and the built binary"]
async fn a_secret_read_again_without_its_token_keeps_the_cached_values_with_an_error_logged() {
    let s = WithSecrets::start_with("signing", "xoxb-one", "1", &[]).await;
    s.put(serde_json::json!({"signing_secret": "signing-two"}))
        .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // The new signing secret makes the ingress read the secret again: it has lost its token.
    let refused = s
        .send_signed("signing-two", &app_mention("EvLostToken1", "x"))
        .await;
    assert_eq!(
        refused.status,
        StatusCode::UNAUTHORIZED,
        "the new values were not taken: {}\n{}",
        refused.body,
        s.bot.log()
    );
    let answer = s
        .send_signed("signing", &app_mention("EvLostToken2", "x"))
        .await;
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);
    assert_eq!(
        s.slack.posted()[0].authorization.as_deref(),
        Some("Bearer xoxb-one"),
        "the cached token is still used"
    );
    let log = s
        .bot
        .log_when(Duration::from_secs(5), |l| l.contains("has no bot_token"))
        .await;
    assert!(log.contains("ERROR"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the SQS server and the built binary"]
async fn on_lambda_a_process_that_answers_refuses_to_start_without_a_bot_token_in_its_secret() {
    let sqs = sqs_endpoint();
    let client = secrets_client(&sqs);
    let name = format!("slack-once/no-token-{}", uuid::Uuid::new_v4().simple());
    client
        .create_secret()
        .name(&name)
        .secret_string(serde_json::json!({"signing_secret": "signing"}).to_string())
        .send()
        .await
        .unwrap();
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let run = |role: &str, queue: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"));
        command
            .env_clear()
            .env("AWS_LAMBDA_RUNTIME_API", closed.to_string())
            .env("SLACK_ONCE_ROLE", role)
            .env("SLACK_SECRETS_ARN", &name)
            .env("AWS_ENDPOINT_URL_SECRETS_MANAGER", &sqs)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("DEDUP_TABLE", "ledger");
        if let Some(queue) = queue {
            command.env("WORK_QUEUE_URL", queue);
        }
        let out = command.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    for role in ["ingress", "worker"] {
        let (code, text) = run(role, None);
        assert_eq!(code, Some(2), "{role}: {text}");
        assert!(
            text.contains("bot_token"),
            "{role}: names the field: {text}"
        );
    }
    // A deferred ingress posts nothing: it needs no token (it then fails to reach the runtime).
    let (code, text) = run("ingress", Some("https://sqs.us-east-1.amazonaws.com/1/q"));
    assert_ne!(code, Some(2), "{text}");
    assert!(!text.contains("bot_token"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the SQS server and the built binary"]
async fn forged_requests_cannot_turn_into_secrets_manager_calls() {
    let s = WithSecrets::start("signing-real", "xoxb-real").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // A flood: 60 forged requests at once, then 60 more 0.8 s later. Each that matches no
    // secret waits (at most 1.5 s) for the next read allowed; they share it.
    let body = app_mention("EvForgedFlood", "x");
    let wave = || async {
        let answers = futures_lite_join_all(
            (0..60)
                .map(|_| s.send_signed("forged", &body))
                .collect::<Vec<_>>(),
        )
        .await;
        for answer in &answers {
            assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
        }
        answers.len()
    };
    let first = wave();
    let second = async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        wave().await
    };
    let (a, b) = tokio::join!(first, second);
    let refused = a + b;
    // Reads as the process counts them (the SDK may send one read again when moto is slow
    // under the test suite's load: that is one read, not two).
    let lines = metric_lines(&s.bot.log_after(refused).await);
    let reads = metric_sum(&lines, "SecretsRefreshes") as usize;
    println!("{refused} forged requests caused {reads} reads of the secret");
    // One read per refresh interval (1 s): the two waves fit in two or three intervals.
    // Unbounded, every one of the 120 forged requests would read.
    assert!(
        reads <= 3,
        "bounded to one read per refresh interval: {reads}"
    );
    assert!(s.slack.received().is_empty());
}

/// Runs the futures concurrently and collects their outputs in order.
async fn futures_lite_join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futures {
        set.push(Box::pin(f));
    }
    let mut outputs = Vec::with_capacity(set.len());
    // Polled together: each is a request to the bot, which serves them at once.
    let joined = std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if outputs.len() <= i {
                outputs.push(None);
            }
            if outputs[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => outputs[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    });
    joined.await;
    outputs
        .into_iter()
        .map(|o| o.expect("every future ended"))
        .collect()
}

#[test]
#[ignore = "needs the built binary"]
fn a_secret_that_cannot_be_read_stops_the_start_naming_the_variable() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"))
        .env_clear()
        .env("SLACK_SECRETS_ARN", "slack-once/missing")
        .env(
            "AWS_ENDPOINT_URL_SECRETS_MANAGER",
            format!("http://{closed}"),
        )
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("LISTEN_ADDR", "127.0.0.1:0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("SLACK_SECRETS_ARN"), "{text}");
}

/// A signing secret rotated while another request's read of the secret is in flight: the
/// request that waited for that read is verified with what it read, not refused (a command
/// or an interaction refused is lost: Slack never retries them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the SQS server and the built binary"]
async fn a_request_signed_with_a_just_rotated_secret_during_a_read_in_flight_is_verified() {
    let s = WithSecrets::start_with("signing-one", "xoxb-one", "1", &[]).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    s.rotate("signing-two", "xoxb-one").await;
    // The next read of the secret takes 800 ms.
    s.proxy.hold_next(
        LedgerOp::Other,
        HoldAt::DelayForwarding(Duration::from_millis(800)),
    );
    let body_a = app_mention("EvRotA", "a");
    let first = s.send_signed("signing-two", &body_a);
    let second = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        s.send_signed("signing-two", &app_mention("EvRotB", "b"))
            .await
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(
        first.outcome(),
        "answered",
        "{}\n{}",
        first.body,
        s.bot.log()
    );
    assert_eq!(
        second.outcome(),
        "answered",
        "the request that waited for the read in flight: {}\n{}",
        second.body,
        s.bot.log()
    );
    assert_eq!(s.reads_since_start(), 1, "one read, shared");
}

/// A signing secret rotated just after the secret was read (within the re-read bound): a
/// request signed with the new one waits for the next read allowed, rather than being refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the SQS server and the built binary"]
async fn a_request_signed_with_a_secret_rotated_just_after_a_read_waits_for_the_next_read() {
    let s = WithSecrets::start("signing-one", "xoxb-one").await;
    let before = s
        .send_signed("signing-one", &app_mention("EvRotC", "a"))
        .await;
    assert_eq!(before.outcome(), "answered", "{}", before.body);
    s.rotate("signing-two", "xoxb-one").await;
    let after = s
        .send_signed("signing-two", &app_mention("EvRotD", "b"))
        .await;
    assert_eq!(
        after.outcome(),
        "answered",
        "signed with the rotated secret: {}\n{}",
        after.body,
        s.bot.log()
    );
    // A forged signature still costs at most the reads the bound allows, and gets 401.
    let forged = s
        .send_signed("not-the-secret", &app_mention("EvRotE", "c"))
        .await;
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED);
    assert!(
        s.reads_since_start() <= 2,
        "{} reads",
        s.reads_since_start()
    );
}
