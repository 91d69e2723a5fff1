//! `slack-once redrive` over the built binary, on the SQS server and DynamoDB Local: what failed
//! for a cause since fixed is moved back and answered once; what was answered is moved too and
//! dropped by the worker as done; what Slack no longer honours (an expired `response_url`) or what may already be in
//! Slack without a way to look (`unconfirmed_write`) is refused and left; `--dry-run` changes
//! nothing and says the same.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::helpers::*;

const BIN: &str = env!("CARGO_BIN_EXE_slack-once");

/// Runs `slack-once redrive ARGS` on `stack`'s queues and table; its report.
fn redrive(stack: &DeferredStack, args: &[&str]) -> String {
    let out = std::process::Command::new(BIN)
        .arg("redrive")
        .args(args)
        .env_clear()
        .envs(dynamodb_env(&stack.dynamodb))
        .env("AWS_ENDPOINT_URL_SQS", &stack.sqs)
        .env("WORK_QUEUE_URL", &stack.queue.url)
        .env("DEAD_LETTER_QUEUE_URL", &stack.queue.dlq_url)
        .env("DEDUP_TABLE", &stack.table)
        .output()
        .expect("slack-once redrive runs");
    let report = String::from_utf8_lossy(&out.stdout).to_string();
    eprintln!("slack-once redrive {args:?}:\n{report}");
    assert!(
        out.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    report
}

/// Runs `slack-once sweep ARGS` on `stack`'s table; what it printed.
fn sweep_cli(stack: &DeferredStack, args: &[&str]) -> String {
    let out = std::process::Command::new(BIN)
        .arg("sweep")
        .args(args)
        .env_clear()
        .envs(dynamodb_env(&stack.dynamodb))
        .env("DEDUP_TABLE", &stack.table)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Sends `body` to the dead-letter queue, as SQS moves a message there.
async fn dead_letter(stack: &DeferredStack, body: &str) {
    stack
        .queue
        .client
        .send_message()
        .queue_url(&stack.queue.dlq_url)
        .message_body(body)
        .send()
        .await
        .unwrap();
}

/// A queued event (format 1) as the ingress writes it, received `age` ago.
fn queued_event(envelope: &str, age: Duration) -> String {
    let received = slack_once::clock::now_ms() - age.as_millis() as u64;
    format!(r#"{{"v":1,"envelope":{envelope},"received_at_ms":{received}}}"#)
}

/// A queued command (format 2), received `age` ago.
fn queued_command(form: &str, age: Duration) -> String {
    let received = slack_once::clock::now_ms() - age.as_millis() as u64;
    serde_json::json!({"v": 2, "form": form, "received_at_ms": received}).to_string()
}

/// Writes a ledger item at `pk` as an earlier claim left it: `status`, `error`, its lease long
/// over, for `app` if given, expiring at `expires_at` (epoch s).
async fn put_failed(
    stack: &DeferredStack,
    pk: &str,
    app: Option<&str>,
    status: &str,
    error: &str,
    expires_at: u64,
) {
    let mut item: HashMap<String, AttributeValue> = [
        ("pk", AttributeValue::S(pk.into())),
        ("status", AttributeValue::S(status.into())),
        ("error", AttributeValue::S(error.into())),
        (
            "owner",
            AttributeValue::S("0b5c8a7e5a0e4f519a550d6f3c1a2b3c".into()),
        ),
        ("lease_until", AttributeValue::N("1".into())),
        ("expires_at", AttributeValue::N(expires_at.to_string())),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    if let Some(app) = app {
        item.insert("app".into(), AttributeValue::S(app.into()));
    }
    dynamodb_client(&stack.dynamodb)
        .put_item()
        .table_name(&stack.table)
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
}

/// Sets `name` to `value` on the ledger item at `pk` (a mark, a lease, as a claim left it).
async fn set_attribute(stack: &DeferredStack, pk: &str, name: &str, value: AttributeValue) {
    dynamodb_client(&stack.dynamodb)
        .update_item()
        .table_name(&stack.table)
        .key("pk", AttributeValue::S(pk.to_string()))
        .update_expression("SET #name = :value")
        .expression_attribute_names("#name", name)
        .expression_attribute_values(":value", value)
        .send()
        .await
        .unwrap();
}

/// The ledger key the pipeline claims a command's or an interaction's form under.
fn form_key(form: &str) -> String {
    slack_once::slack::Interaction::from_form(form.as_bytes())
        .unwrap()
        .key()
        .unwrap()
        .to_string()
}

fn line<'a>(report: &'a str, needle: &str) -> &'a str {
    report
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn a_redrive_moves_what_failed_removes_what_was_answered_and_refuses_the_rest() {
    let stack = DeferredStack::start(2).await;
    let ingress = BotProcess::spawn(&stack.ingress_vars());
    let http = HttpClient::default();
    let ledger = slack_once::ledger::DynamoLedger::new(
        dynamodb_client(&stack.dynamodb),
        stack.table.clone(),
    );

    // Answered while Slack works; a copy of it then reaches the dead-letter queue.
    let worker = BotProcess::spawn_worker(&stack.worker_vars(1, 2));
    let done = app_mention("EvRedriveDone", "answered already");
    assert_eq!(
        deliver(&http, &ingress.url(), &done, None).await.outcome(),
        "queued"
    );
    assert!(
        eventually(Duration::from_secs(20), || stack.slack.posted().len() == 1).await,
        "{}",
        worker.log()
    );

    // Slack is down: this one's receives run out, and SQS dead-letters it.
    stack.slack.outage(Duration::from_secs(3600));
    let failed = app_mention("EvRedriveFailed", "once Slack is back");
    assert_eq!(
        deliver(&http, &ingress.url(), &failed, None)
            .await
            .outcome(),
        "queued"
    );
    assert!(
        eventually_async(Duration::from_secs(30), || async {
            stack.queue.depth(&stack.queue.dlq_url).await == 1
        })
        .await,
        "dead-lettered after 2 receives: {}",
        worker.log()
    );
    drop(worker);
    let item = ledger
        .get_item(&mention_key("EvRedriveFailed"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(item["error"].as_s().unwrap(), "http_500");

    dead_letter(&stack, &queued_event(&done, Duration::from_secs(60))).await;
    // A command 31 minutes old: its response_url takes nothing now.
    let late = command_form(&stack.slack, "/once", "too late");
    dead_letter(&stack, &queued_command(&late, Duration::from_secs(31 * 60))).await;
    let ttl = slack_once::clock::now_ms() / 1000 + 86_400;
    // Its claim, left in progress by a worker's receive marked for a redelivery that never
    // took it over (the next receives failed before claiming): nothing brings it back now, so
    // the redrive ends it failed with the reason, not left unexplained until its TTL.
    let late_key = form_key(&late);
    put_failed(&stack, &late_key, Some("A0001"), "in_progress", "", ttl).await;
    set_attribute(&stack, &late_key, "redelivery", AttributeValue::Bool(true)).await;
    // Another, whose claim a worker still holds (its lease live): refused all the same, and
    // its claim left to its holder.
    let late_live = command_form(&stack.slack, "/once", "too late, still held");
    dead_letter(
        &stack,
        &queued_command(&late_live, Duration::from_secs(31 * 60)),
    )
    .await;
    let live_key = form_key(&late_live);
    put_failed(&stack, &live_key, Some("A0001"), "in_progress", "", ttl).await;
    set_attribute(
        &stack,
        &live_key,
        "lease_until",
        AttributeValue::N((slack_once::clock::now_ms() + 600_000).to_string()),
    )
    .await;
    // A write whose fate could not be known: never made again.
    let unknown = app_mention("EvRedriveUnknown", "may be in Slack");
    put_failed(
        &stack,
        &mention_key("EvRedriveUnknown"),
        None,
        "failed",
        "unconfirmed_write",
        ttl,
    )
    .await;
    dead_letter(&stack, &queued_event(&unknown, Duration::from_secs(60))).await;
    // In a table shared with another app (A0002) that answered the same message: this app's
    // own claim is under its app's key, failed; the other app's done item decides nothing.
    let shared = app_mention("EvRedriveShared", "another app answered it too");
    let key = mention_key("EvRedriveShared");
    put_failed(&stack, &key, Some("A0002"), "done", "http_500", ttl).await;
    let ours = format!("{key}-A0001");
    put_failed(&stack, &ours, Some("A0001"), "failed", "http_500", ttl).await;
    dead_letter(&stack, &queued_event(&shared, Duration::from_secs(60))).await;
    // Answered, but so long ago that its item may expire before a worker reads it (within an
    // hour of the ledger's TTL): a worker finding it absent would answer it again.
    let old_enough = slack_once::config::MIN_TTL - Duration::from_secs(30 * 60);
    dead_letter(&stack, &queued_event(&done, old_enough)).await;
    assert_eq!(stack.queue.depth(&stack.queue.dlq_url).await, 7);

    // A dry run says what it would do, and does nothing.
    let report = redrive(&stack, &["--dry-run"]);
    assert!(
        line(&report, "http_500").starts_with("would move"),
        "{report}"
    );
    assert!(
        line(&report, &mention_key("EvRedriveDone")).starts_with("would move"),
        "{report}"
    );
    assert!(line(&report, &mention_key("EvRedriveDone")).contains("answered already"));
    assert!(
        line(&report, "response_url expired").starts_with("refused"),
        "{report}"
    );
    assert!(
        line(&report, &format!("{late_key}="))
            .contains("its claim left in progress would end failed (dead_letter_refused)"),
        "{report}"
    );
    assert!(
        line(&report, &format!("{live_key}=")).starts_with("refused")
            && !line(&report, &format!("{live_key}=")).contains("end failed"),
        "{report}"
    );
    assert!(
        line(&report, "unconfirmed_write").starts_with("refused"),
        "{report}"
    );
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("refused") && l.contains("answered already; ")),
        "{report}"
    );
    let late_claim = || async { ledger.get_item(&late_key).await.unwrap().unwrap() };
    assert_eq!(late_claim().await["status"].as_s().unwrap(), "in_progress");
    assert!(
        line(
            &report,
            &format!("{}-A0001=failed", mention_key("EvRedriveShared"))
        )
        .starts_with("would move"),
        "{report}"
    );
    assert!(report.contains("a dry run: nothing changed"), "{report}");
    assert_eq!(stack.queue.depth(&stack.queue.dlq_url).await, 7, "{report}");
    assert_eq!(stack.queue.depth(&stack.queue.url).await, 0);

    // Slack is back: the redrive moves the failed one, and the answered one for the worker
    // to drop (the ledger decides, not the redrive).
    stack.slack.outage(Duration::ZERO);
    let report = redrive(&stack, &[]);
    assert!(line(&report, "http_500").starts_with("moved"), "{report}");
    assert!(
        report.contains("3 moved (1 of them answered already), 0 left (held), 4 refused"),
        "{report}"
    );
    assert_eq!(
        stack.queue.depth(&stack.queue.dlq_url).await,
        4,
        "the refused stay"
    );
    assert!(
        line(&report, &format!("{late_key}="))
            .contains("its claim left in progress ended failed (dead_letter_refused)"),
        "{report}"
    );
    assert!(
        !line(&report, &format!("{live_key}=")).contains("ended failed"),
        "{report}"
    );
    let claim = late_claim().await;
    assert_eq!(claim["status"].as_s().unwrap(), "failed");
    assert_eq!(claim["error"].as_s().unwrap(), "dead_letter_refused");
    assert_eq!(claim["retryable"].as_bool().unwrap(), &true);
    assert!(!claim.contains_key("redelivery"), "{claim:?}");
    let held = ledger.get_item(&live_key).await.unwrap().unwrap();
    assert_eq!(held["status"].as_s().unwrap(), "in_progress", "{held:?}");
    let worker = BotProcess::spawn_worker(&stack.worker_vars(5, 2));
    assert!(
        eventually(Duration::from_secs(20), || stack.slack.posted().len() == 3).await,
        "the redriven event is answered: {}",
        worker.log()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let per_event = stack.slack.posts_per_event();
    assert_eq!(per_event.get("EvRedriveFailed"), Some(&1), "{per_event:?}");
    assert_eq!(per_event.get("EvRedriveDone"), Some(&1), "{per_event:?}");
    assert_eq!(per_event.get("EvRedriveUnknown"), None, "{per_event:?}");
    assert_eq!(per_event.get("EvRedriveShared"), Some(&1), "{per_event:?}");
    let status = ledger
        .get_item(&mention_key("EvRedriveFailed"))
        .await
        .unwrap()
        .unwrap()["status"]
        .as_s()
        .unwrap()
        .clone();
    assert_eq!(status, "done");
}

/// `slack-once sweep`: a claim left in progress past its lease (a process killed on the
/// request's last delivery) ends failed, `abandoned`, retryable, so a later delivery still takes
/// it over and answers it once; a live claim and a done item are left as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn a_sweep_ends_failed_the_claims_left_past_their_lease_and_only_those() {
    let stack = DeferredStack::start(2).await;
    let client = dynamodb_client(&stack.dynamodb);
    let now = slack_once::clock::now_ms();
    let put = |key: String, status: &str, lease_until: u64| {
        let client = client.clone();
        let table = stack.table.clone();
        let status = status.to_string();
        async move {
            let item: HashMap<String, AttributeValue> = [
                ("pk", AttributeValue::S(key)),
                ("status", AttributeValue::S(status)),
                (
                    "owner",
                    AttributeValue::S("0b5c8a7e5a0e4f519a550d6f3c1a2b3c".into()),
                ),
                ("lease_until", AttributeValue::N(lease_until.to_string())),
                (
                    "expires_at",
                    AttributeValue::N((now / 1000 + 86_400).to_string()),
                ),
                ("attempts", AttributeValue::N("1".into())),
                ("journal", AttributeValue::M(HashMap::new())),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            client
                .put_item()
                .table_name(table)
                .set_item(Some(item))
                .send()
                .await
                .unwrap();
        }
    };
    put(mention_key("EvSweepLeft"), "in_progress", now - 20 * 60_000).await;
    put(mention_key("EvSweepLive"), "in_progress", now + 60_000).await;
    put(mention_key("EvSweepDone"), "done", now - 20 * 60_000).await;
    // A later release's claim (format 2): its release ends it, as a takeover leaves it.
    put(
        mention_key("EvSweepLater"),
        "in_progress",
        now - 20 * 60_000,
    )
    .await;
    client
        .update_item()
        .table_name(&stack.table)
        .key("pk", AttributeValue::S(mention_key("EvSweepLater")))
        .update_expression("SET fmt = :two")
        .expression_attribute_values(":two", AttributeValue::N("2".into()))
        .send()
        .await
        .unwrap();
    let sweep = |args: &[&str]| sweep_cli(&stack, args);
    let dry = sweep(&["--dry-run"]);
    assert!(dry.contains(&mention_key("EvSweepLeft")), "{dry}");
    assert!(dry.contains("1 claims left"), "{dry}");
    let done = sweep(&[]);
    assert!(done.contains("ended failed"), "{done}");
    let ledger = slack_once::ledger::DynamoLedger::new(client.clone(), stack.table.clone());
    let item = |id: &'static str| {
        let ledger = &ledger;
        async move { ledger.get_item(&mention_key(id)).await.unwrap().unwrap() }
    };
    let left = item("EvSweepLeft").await;
    assert_eq!(left["status"].as_s().unwrap(), "failed");
    assert_eq!(left["error"].as_s().unwrap(), "abandoned");
    assert_eq!(left["retryable"].as_bool().unwrap(), &true);
    assert_eq!(
        item("EvSweepLive").await["status"].as_s().unwrap(),
        "in_progress"
    );
    assert_eq!(item("EvSweepDone").await["status"].as_s().unwrap(), "done");
    assert_eq!(
        item("EvSweepLater").await["status"].as_s().unwrap(),
        "in_progress"
    );
    assert!(
        sweep(&[]).contains("0 claims left"),
        "a second sweep finds none"
    );

    // A delivery that still comes (Slack's Delayed Events, a redrive) takes it over, once.
    let bot = BotProcess::spawn(&bot_vars(&stack.slack, &stack.dynamodb, &stack.table));
    let http = HttpClient::default();
    let answer = deliver(
        &http,
        &bot.url(),
        &app_mention("EvSweepLeft", "late"),
        Some(3),
    )
    .await;
    assert_eq!(answer.status, http::StatusCode::OK, "{}", answer.body);
    assert_eq!(stack.slack.posts_per_event().get("EvSweepLeft"), Some(&1));
}

/// The counter (examples/counter.rs) in deferred mode: a mention whose count was changed, but
/// whose reply Slack refused on both receives, is dead-lettered; 300 other mentions change the
/// count meanwhile; then `redrive` runs it again: its change is found made (recorded with its
/// own claim, not among the value's latest writers, which long forgot it), and the count is
/// 301, not 302. Its reply says the count as it is now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn a_counters_redriven_request_counts_once_after_300_other_changes() {
    let stack = DeferredStack::start(2).await;
    let ingress = BotProcess::spawn_example("counter", &[], &stack.ingress_vars());
    let http = HttpClient::default();
    let worker = BotProcess::spawn_example("counter", &["worker"], &stack.worker_vars(1, 2));
    stack.slack.outage(Duration::from_secs(3600));
    let first = app_mention("EvCount000", "count me");
    let queued = deliver(&http, &ingress.url(), &first, None).await;
    assert_eq!(queued.outcome(), "queued", "{}", queued.body);
    assert!(
        eventually_async(Duration::from_secs(30), || async {
            stack.queue.depth(&stack.queue.dlq_url).await == 1
        })
        .await,
        "dead-lettered after 2 receives: {}",
        worker.log()
    );
    drop(worker);
    assert_eq!(count_of(&stack).await, Some(1), "its change was made");

    // Slack is back; 300 other mentions, answered by a synchronous process of the same bot.
    stack.slack.outage(Duration::ZERO);
    let sync = BotProcess::spawn_example(
        "counter",
        &[],
        &bot_vars(&stack.slack, &stack.dynamodb, &stack.table),
    );
    for i in 1..=300 {
        let body = app_mention(&format!("EvCount{i:03}"), "count me");
        let answer = deliver(&http, &sync.url(), &body, None).await;
        assert_eq!(answer.outcome(), "answered", "{i}: {}", answer.body);
    }
    assert_eq!(count_of(&stack).await, Some(301));

    let report = redrive(&stack, &[]);
    assert!(line(&report, "http_500").starts_with("moved"), "{report}");
    let worker = BotProcess::spawn_example("counter", &["worker"], &stack.worker_vars(1, 2));
    assert!(
        eventually(Duration::from_secs(30), || stack.slack.posted().len()
            == 301)
        .await,
        "{}",
        worker.log()
    );
    assert_eq!(count_of(&stack).await, Some(301), "counted once, not twice");
    let last = stack.slack.posted().last().unwrap().body["text"].clone();
    assert_eq!(last, "That makes 301.");
}

/// The counter's value in `stack`'s table.
async fn count_of(stack: &DeferredStack) -> Option<u64> {
    let client = dynamodb_client(&stack.dynamodb);
    let page = client
        .scan()
        .table_name(&stack.table)
        .filter_expression("begins_with(pk, :state)")
        .expression_attribute_values(":state", AttributeValue::S("state".into()))
        .send()
        .await
        .unwrap();
    let items = page.items();
    assert!(items.len() <= 1, "{items:?}");
    items
        .first()
        .and_then(|i| i.get("app_state"))
        .and_then(|v| v.as_s().ok())
        .and_then(|v| v.parse().ok())
}

/// `sweep` in a table shared by apps, and with a worker killed mid-request: another app's lapsed
/// claims are left (with no app named, every claim that names one is), and so is a worker's
/// claim of a queued request with receives left, which the queue brings back: the next receive
/// takes it over and answers it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn a_sweep_leaves_other_apps_claims_and_a_queued_request_the_queue_brings_back() {
    let stack = DeferredStack::start(3).await;
    let ingress = BotProcess::spawn(&stack.ingress_vars());
    let http = HttpClient::default();
    let ttl = slack_once::clock::now_ms() / 1000 + 86_400;
    // Lapsed claims of two apps sharing the table.
    for (key, app) in [("EvSweepOurs", "A0001"), ("EvSweepTheirs", "A0002")] {
        put_failed(&stack, &mention_key(key), Some(app), "in_progress", "", ttl).await;
    }
    // A claim marked for a redelivery that never took it over, its lease long over (past SQS's
    // longest visibility timeout): its message is dead-lettered or gone, and it is swept.
    put_failed(
        &stack,
        &mention_key("EvSweepNoRedelivery"),
        Some("A0001"),
        "in_progress",
        "",
        ttl,
    )
    .await;
    set_attribute(
        &stack,
        &mention_key("EvSweepNoRedelivery"),
        "redelivery",
        AttributeValue::Bool(true),
    )
    .await;
    // A worker claims a queued mention, then Slack hangs and the worker is killed: its claim
    // is left in progress, its message hidden until the visibility timeout.
    let mut worker = BotProcess::spawn_worker(&stack.worker_vars(1, 3));
    stack.slack.script([SlackFailure::Unanswered]);
    let body = app_mention("EvSweepQueued", "killed mid-way");
    assert_eq!(
        deliver(&http, &ingress.url(), &body, None).await.outcome(),
        "queued"
    );
    let ledger = slack_once::ledger::DynamoLedger::new(
        dynamodb_client(&stack.dynamodb),
        stack.table.clone(),
    );
    let key = mention_key("EvSweepQueued");
    assert!(
        eventually_async(Duration::from_secs(20), || async {
            ledger.get_item(&key).await.unwrap().is_some()
        })
        .await
    );
    // Killed once its post hangs in Slack (the script taken by it, not left for the takeover's
    // post: on a loaded machine the kill could otherwise come between the claim and the post).
    assert!(
        eventually(Duration::from_secs(20), || {
            stack
                .slack
                .counts()
                .get("chat.postMessage")
                .is_some_and(|n| *n >= 1)
        })
        .await,
        "{}",
        worker.log()
    );
    worker.kill();
    let item = ledger.get_item(&key).await.unwrap().unwrap();
    assert_eq!(item["redelivery"].as_bool().unwrap(), &true);
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let sweep = |args: &[&str]| sweep_cli(&stack, args);
    let nameless = sweep(&["--older-than", "0"]);
    assert!(nameless.contains("left 3 claims of apps"), "{nameless}");
    assert!(
        nameless.contains("left 1 claims of queued requests"),
        "{nameless}"
    );
    assert!(nameless.contains("0 claims left"), "{nameless}");
    let ours = sweep(&["--older-than", "0", "--app", "A0001"]);
    assert!(
        ours.contains(&format!("ended failed {}", mention_key("EvSweepOurs"))),
        "{ours}"
    );
    assert!(
        ours.contains(&format!(
            "ended failed {}",
            mention_key("EvSweepNoRedelivery")
        )),
        "{ours}"
    );
    assert!(
        ours.contains("left 1 claims of other apps than A0001"),
        "{ours}"
    );
    assert!(
        ours.contains("left 1 claims of queued requests with receives left"),
        "{ours}"
    );
    let status = |id: &'static str| {
        let ledger = &ledger;
        async move {
            ledger.get_item(&mention_key(id)).await.unwrap().unwrap()["status"]
                .as_s()
                .unwrap()
                .clone()
        }
    };
    assert_eq!(status("EvSweepTheirs").await, "in_progress");
    assert_eq!(status("EvSweepQueued").await, "in_progress");

    // The queue brings it back: a worker takes the claim over and answers it, once.
    // A lease of 3 s: room for the takeover's look-up and post on a loaded machine.
    let worker = BotProcess::spawn_worker(&stack.worker_vars(3, 3));
    assert!(
        eventually(Duration::from_secs(45), || {
            stack.slack.posts_per_event().get("EvSweepQueued") == Some(&1)
        })
        .await,
        "{}",
        worker.log()
    );
    assert!(
        eventually_async(Duration::from_secs(10), || async {
            status("EvSweepQueued").await == "done"
        })
        .await
    );
}

/// A redrive that goes round the dead-letter queue (a run longer than its receives' visibility:
/// here 1 s) stops at the first message it sees again, and makes that message and the rest of
/// its batch visible again at once, with every message it held: the next run sees them all
/// (before, the rest of that batch stayed hidden for the visibility timeout, and a run at once
/// after, as the report advises, missed them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn a_redrive_that_goes_round_leaves_every_message_visible() {
    let stack = DeferredStack::start(2).await;
    let ttl = slack_once::clock::now_ms() / 1000 + 86_400;
    // Dead letters whose writes' fates are unknown: each refused, left; enough of them that
    // looking at them all takes longer than their visibility.
    const N: usize = 400;
    for i in 0..N {
        let id = format!("EvRound{i:03}");
        put_failed(
            &stack,
            &mention_key(&id),
            None,
            "failed",
            "unconfirmed_write",
            ttl,
        )
        .await;
        let body = app_mention(&id, "its fate unknown");
        dead_letter(&stack, &queued_event(&body, Duration::from_secs(60))).await;
    }
    let sqs = stack.queue.client.clone();
    let dynamodb = dynamodb_client(&stack.dynamodb);
    let queues = slack_once::tools::redrive::Queues {
        sqs: &sqs,
        dead_letters: &stack.queue.dlq_url,
        work: &stack.queue.url,
        dynamodb: &dynamodb,
        table: &stack.table,
    };
    let options = slack_once::tools::redrive::Options {
        dry_run: false,
        max: 1000,
        ttl: slack_once::config::MIN_TTL,
        now_ms: slack_once::clock::now_ms(),
        visibility: Duration::from_secs(1),
    };
    let report = slack_once::tools::redrive::redrive(&queues, &options).await;
    assert!(report.error.is_none(), "{report}");
    assert!(report.came_back, "the run went round: {report}");
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(&stack.queue.dlq_url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap();
    let count = |name: A| -> usize { attributes.attributes().unwrap()[&name].parse().unwrap() };
    assert_eq!(
        (
            count(A::ApproximateNumberOfMessages),
            count(A::ApproximateNumberOfMessagesNotVisible)
        ),
        (N, 0),
        "every message visible again at once: {report}"
    );
}
