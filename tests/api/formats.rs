//! This release reads what the release before it wrote (`tests/data/formats/previous/`): its
//! work-queue messages, handled by this release's worker, and its ledger items, put as they are
//! into DynamoDB Local and met by this release's worker. Each request is answered once, or not
//! again when the item says it was; a format this release does not read is left on the queue,
//! nothing written; a status or a journal record of a later release is taken for held, or
//! looked for before writing again. The promise is in docs/operations.md ("Formats, and the promise
//! between releases").

use std::collections::HashMap;
use std::time::SystemTime;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Value, json};
use slack_once::Application;
use slack_once::config::Config;
use slack_once::queue::Received;
use slack_once::queue::worker::Disposition;
use slack_once::testing::FakeSlack;
use slack_once::testing::Identity;

use crate::helpers::{dynamodb_client, dynamodb_endpoint, fresh_table};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/formats/previous");
const CHANNEL: &str = "C0789CHAN";
const MESSAGE_TS: &str = "1767225600.000100";
/// The ledger key of the fixtures' message.
const MESSAGE_KEY: &str = "msg-T0001TEAM-C0789CHAN-1767225600_000100";

struct Rig {
    slack: FakeSlack,
    app: Application,
    table: String,
}

/// This release's worker for the reference bot, on a fresh DynamoDB Local table, writing to
/// a stand-in for the fixtures' workspace (in which the mentioned message exists).
async fn rig() -> Rig {
    let slack = FakeSlack::start_for(Identity {
        team: "T0001TEAM".into(),
        app_id: "A0001APP".into(),
        bot_id: "B0001BOT".into(),
        bot_user: "U0456BOT".into(),
    })
    .await;
    slack.with_workspace(|w| {
        w.add_message(
            json!({"channel": CHANNEL, "ts": MESSAGE_TS, "user": "U0123USER",
            "text": "<@U0456BOT> what is the status of the deploy?"}),
        )
    });
    let (table, ledger) = fresh_table(&dynamodb_endpoint()).await;
    let vars = [
        ("SLACK_SIGNING_SECRET", "formats-secret".to_string()),
        ("SLACK_BOT_TOKEN", "xoxb-formats".to_string()),
        ("SLACK_API_URL", slack.base_url().to_string()),
        ("SLACK_ONCE_ROLE", "worker".to_string()),
        ("DEDUP_TABLE", table.clone()),
        (
            "WORK_QUEUE_URL",
            "http://127.0.0.1:9/000000000000/work".to_string(),
        ),
    ];
    let config =
        Config::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))
            .expect("a worker's configuration");
    let app = Application::with_parts(config, ledger, slack_once::reference_app());
    Rig { slack, app, table }
}

fn fixture(rig: &Rig, path: &str) -> String {
    let now = slack_once::clock::now_ms();
    let host = rig.slack.base_url().trim_end_matches("/api").to_string();
    let encoded: String = form_urlencoded::byte_serialize(host.as_bytes()).collect();
    std::fs::read_to_string(format!("{DIR}/{path}"))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .replace("{{SLACK_ENCODED}}", &encoded)
        .replace("{{NOW_MS}}", &now.to_string())
        .replace("{{PAST_MS}}", &(now - 600_000).to_string())
        .replace("{{FUTURE_MS}}", &(now + 600_000).to_string())
        .replace("{{TTL_S}}", &(now / 1000 + 90_000).to_string())
}

async fn handle(rig: &Rig, path: &str) -> Disposition {
    let message = Received {
        message_id: path.into(),
        receipt_handle: "receipt".into(),
        body: fixture(rig, path),
        receive_count: 1,
    };
    let deadline = SystemTime::now() + std::time::Duration::from_secs(20);
    rig.app
        .worker()
        .handle(
            &message,
            SystemTime::now(),
            tokio::time::Instant::now(),
            Some(deadline),
            None,
        )
        .await
}

/// A previous release's item, put as it is.
async fn put_item(rig: &Rig, path: &str) {
    let item: Value = serde_json::from_str(&fixture(rig, path)).expect("DynamoDB JSON");
    let item: HashMap<String, AttributeValue> = item
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), attribute(v)))
        .collect();
    dynamodb_client(&dynamodb_endpoint())
        .put_item()
        .table_name(&rig.table)
        .set_item(Some(item))
        .send()
        .await
        .expect("put the previous release's item");
}

/// DynamoDB's attribute-value JSON (S, N, BOOL, M, L) as the SDK's.
fn attribute(v: &Value) -> AttributeValue {
    let (kind, inner) = v
        .as_object()
        .and_then(|o| o.iter().next())
        .expect("{\"T\": …}");
    match kind.as_str() {
        "S" => AttributeValue::S(inner.as_str().unwrap().into()),
        "N" => AttributeValue::N(inner.as_str().unwrap().into()),
        "BOOL" => AttributeValue::Bool(inner.as_bool().unwrap()),
        "M" => AttributeValue::M(
            inner
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), attribute(v)))
                .collect(),
        ),
        "L" => AttributeValue::L(inner.as_array().unwrap().iter().map(attribute).collect()),
        other => panic!("attribute type {other} is not in the fixtures' format"),
    }
}

fn replies(rig: &Rig) -> Vec<Value> {
    rig.slack
        .messages()
        .into_iter()
        .filter(|m| m["bot_id"] == "B0001BOT")
        .collect()
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_previous_releases_queued_event_is_answered_once() {
    let rig = rig().await;
    assert!(matches!(
        handle(&rig, "queue/v1_event.json").await,
        Disposition::Delete
    ));
    assert_eq!(replies(&rig).len(), 1, "one answer");
    assert!(matches!(
        handle(&rig, "queue/v1_event.json").await,
        Disposition::Delete
    ));
    assert_eq!(replies(&rig).len(), 1, "its redelivery writes nothing more");
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_previous_releases_queued_command_is_answered_once_through_its_response_url() {
    let rig = rig().await;
    assert!(matches!(
        handle(&rig, "queue/v2_command.json").await,
        Disposition::Delete
    ));
    let answers = replies(&rig);
    assert_eq!(
        answers.len(),
        1,
        "the in-channel answer: {:?}",
        rig.slack.messages()
    );
    assert!(
        answers[0]["text"]
            .as_str()
            .unwrap()
            .contains("hello from the previous release")
    );
    assert!(matches!(
        handle(&rig, "queue/v2_command.json").await,
        Disposition::Delete
    ));
    assert_eq!(replies(&rig).len(), 1);
}

/// The items in the rig's table.
async fn items(rig: &Rig) -> i32 {
    dynamodb_client(&dynamodb_endpoint())
        .scan()
        .table_name(&rig.table)
        .send()
        .await
        .expect("scan")
        .count()
}

/// A later release's format (here the command of `v2_command.json`, well formed, under `v`
/// 99): left on the queue for a worker that reads it, nothing claimed, nothing written.
#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_format_this_release_does_not_read_is_left_and_nothing_is_written() {
    let rig = rig().await;
    assert!(matches!(
        handle(&rig, "queue/v99_unknown.json").await,
        Disposition::Leave
    ));
    assert!(rig.slack.calls().is_empty());
    assert_eq!(items(&rig).await, 0, "nothing claimed");
    assert!(matches!(
        handle(&rig, "queue/v2_command.json").await,
        Disposition::Delete
    ));
    assert_eq!(
        replies(&rig).len(),
        1,
        "the same form as format 2: answered"
    );
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_previous_releases_done_item_is_not_answered_again() {
    let rig = rig().await;
    put_item(&rig, "ledger/done.json").await;
    assert!(matches!(
        handle(&rig, "queue/v1_event.json").await,
        Disposition::Delete
    ));
    assert!(replies(&rig).is_empty(), "{:?}", rig.slack.calls());
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_previous_releases_failed_item_is_not_answered() {
    let rig = rig().await;
    put_item(&rig, "ledger/failed.json").await;
    assert!(matches!(
        handle(&rig, "queue/v1_event.json").await,
        Disposition::Delete
    ));
    assert!(replies(&rig).is_empty(), "{:?}", rig.slack.calls());
}

/// A failure that was not final (the queue's receives ran out): a redriven copy claims it
/// again, and answers once.
#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_previous_releases_retryable_failure_is_claimed_again_and_answered_once() {
    let rig = rig().await;
    put_item(&rig, "ledger/failed_retryable.json").await;
    assert!(matches!(
        handle(&rig, "queue/v1_event.json").await,
        Disposition::Delete
    ));
    assert_eq!(replies(&rig).len(), 1, "{:?}", rig.slack.calls());
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_previous_releases_released_item_is_taken_and_answered_once() {
    let rig = rig().await;
    put_item(&rig, "ledger/released.json").await;
    assert!(matches!(
        handle(&rig, "queue/v1_event.json").await,
        Disposition::Delete
    ));
    assert_eq!(replies(&rig).len(), 1);
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_previous_releases_live_claim_is_left_to_its_owner() {
    let rig = rig().await;
    put_item(&rig, "ledger/in_progress_live.json").await;
    assert!(matches!(
        handle(&rig, "queue/v1_event.json").await,
        Disposition::Leave
    ));
    assert!(replies(&rig).is_empty(), "{:?}", rig.slack.calls());
}

/// The fixtures' message item as it is now.
async fn message_item(rig: &Rig) -> HashMap<String, AttributeValue> {
    dynamodb_client(&dynamodb_endpoint())
        .get_item()
        .table_name(&rig.table)
        .key("pk", AttributeValue::S(MESSAGE_KEY.into()))
        .send()
        .await
        .unwrap()
        .item
        .expect("the message's item")
}

/// Updates the fixtures' message item by `set` (`#step` names the journal's step 1): what a
/// later release might leave there.
async fn rewrite_item(rig: &Rig, set: &str, values: &[(&str, AttributeValue)]) {
    let mut update = dynamodb_client(&dynamodb_endpoint())
        .update_item()
        .table_name(&rig.table)
        .key("pk", AttributeValue::S(MESSAGE_KEY.into()))
        .update_expression(set);
    for (name, attr) in [
        ("#status", "status"),
        ("#lease", "lease_until"),
        ("#journal", "journal"),
        ("#step", "1"),
        ("#fmt", "fmt"),
    ] {
        if set.contains(name) {
            update = update.expression_attribute_names(name, attr);
        }
    }
    for (name, value) in values {
        update = update.expression_attribute_values(*name, value.clone());
    }
    update.send().await.expect("rewrite the item");
}

/// A later release's status, unknown here, on an item (here one this release answered): the
/// claim reads it as held, so the request is left (Slack retries, the queue redelivers, and
/// the message is dead-lettered while only this release serves), never answered again, and
/// the item is not overwritten.
#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_status_this_release_does_not_know_is_left_and_the_item_kept() {
    let rig = rig().await;
    assert!(matches!(
        handle(&rig, "queue/v1_event.json").await,
        Disposition::Delete
    ));
    assert_eq!(replies(&rig).len(), 1);
    let past = (slack_once::clock::now_ms() - 600_000).to_string();
    rewrite_item(
        &rig,
        "SET #status = :s, #lease = :l",
        &[
            (":s", AttributeValue::S("archived".into())),
            (":l", AttributeValue::N(past)),
        ],
    )
    .await;
    assert!(matches!(
        handle(&rig, "queue/v1_event.json").await,
        Disposition::Leave
    ));
    assert_eq!(replies(&rig).len(), 1, "not answered again");
    let item = message_item(&rig).await;
    assert_eq!(item["status"].as_s().unwrap(), "archived", "kept as it was");
}

/// A later release's journal record, unknown here, on step 1 of a claim given up: this
/// release reads it as an intent of unknown fate, looks for the step's message before writing
/// again, finds the answer that claim posted, and posts nothing more.
#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_journal_record_this_release_does_not_know_is_looked_for_before_writing_again() {
    let rig = rig().await;
    assert!(matches!(
        handle(&rig, "queue/v1_event.json").await,
        Disposition::Delete
    ));
    assert_eq!(replies(&rig).len(), 1);
    let past = (slack_once::clock::now_ms() - 600_000).to_string();
    rewrite_item(
        &rig,
        "SET #status = :s, #lease = :l, #journal.#step = :r",
        &[
            (":s", AttributeValue::S("released".into())),
            (":l", AttributeValue::N(past)),
            (
                ":r",
                AttributeValue::S("q 1767225600000 a-later-release".into()),
            ),
        ],
    )
    .await;
    let calls_before = rig.slack.callers().len();
    assert!(matches!(
        handle(&rig, "queue/v1_event.json").await,
        Disposition::Delete
    ));
    // Every method called, look-ups included.
    let calls: Vec<String> = rig.slack.callers()[calls_before..]
        .iter()
        .map(|(method, _)| method.clone())
        .collect();
    assert!(
        calls.iter().any(|m| m.starts_with("conversations.")),
        "looked before writing: {calls:?}"
    );
    assert!(!calls.iter().any(|m| m == "chat.postMessage"), "{calls:?}");
    assert_eq!(replies(&rig).len(), 1, "the one answer stands");
}

/// The item of a later format (`fmt` above this release's): never taken over, though given up
/// (released) — it is left for a release that reads it; this release's own items say their
/// format.
#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn an_item_of_a_later_format_is_never_taken_over() {
    let rig = rig().await;
    put_item(&rig, "ledger/released.json").await;
    let later = (slack_once::ledger::ITEM_FORMAT_READ + 1).to_string();
    rewrite_item(&rig, "SET #fmt = :f", &[(":f", AttributeValue::N(later))]).await;
    assert!(matches!(
        handle(&rig, "queue/v1_event.json").await,
        Disposition::Leave
    ));
    assert!(replies(&rig).is_empty(), "{:?}", rig.slack.calls());

    // The same item of this release's format is taken over and answered once.
    let ours = slack_once::ledger::ITEM_FORMAT.to_string();
    rewrite_item(
        &rig,
        "SET #fmt = :f",
        &[(":f", AttributeValue::N(ours.clone()))],
    )
    .await;
    assert!(matches!(
        handle(&rig, "queue/v1_event.json").await,
        Disposition::Delete
    ));
    assert_eq!(replies(&rig).len(), 1);
    let item = message_item(&rig).await;
    assert_eq!(
        item["fmt"].as_n().unwrap(),
        &ours,
        "a takeover writes its format"
    );
}

/// A claim of this release writes its format on the item.
#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn this_releases_claims_write_their_format() {
    let rig = rig().await;
    handle(&rig, "queue/v1_event.json").await;
    let item = message_item(&rig).await;
    assert_eq!(
        item["fmt"].as_n().unwrap(),
        &slack_once::ledger::ITEM_FORMAT.to_string()
    );
}
