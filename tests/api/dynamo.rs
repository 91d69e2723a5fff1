//! The DynamoDB ledger on AWS's DynamoDB Local (the real engine) at 127.0.0.1: every
//! transition, atomicity under 200 concurrent claims, and the cost in requests; writes whose
//! answer is lost or whose connection is reset after DynamoDB applied them (the SDK sends them
//! again), and a write that meets a transaction on its item.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use http::StatusCode;
use slack_once::ledger::contract::{LEASE, NOW, TTL_S, request};
use slack_once::ledger::{
    Claim, ClaimRequest, DynamoLedger, Ledger, LedgerError, OwnerToken, contract,
};
use slack_once::ledger::{Journal, StepRecord};
use slack_once::slack::envelope::EventId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::*;

fn id(s: &str) -> EventId {
    EventId::try_from(s.to_string()).unwrap()
}

async fn ledger() -> Arc<DynamoLedger> {
    fresh_table(&dynamodb_endpoint()).await.1
}

fn n(item: &std::collections::HashMap<String, AttributeValue>, key: &str) -> u64 {
    item[key].as_n().unwrap().parse().unwrap()
}

fn s<'a>(item: &'a std::collections::HashMap<String, AttributeValue>, key: &str) -> &'a str {
    item[key].as_s().unwrap()
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn an_absent_event_is_acquired_and_the_item_holds_the_documented_schema() {
    let ledger = ledger().await;
    let (e, a) = (id("EvD1"), OwnerToken::random());
    assert_eq!(
        ledger.claim(&request(&e, &a, NOW)).await.unwrap(),
        Claim::Acquired {
            attempt: 1,
            journal: Journal::new()
        }
    );
    let item = ledger
        .get_item("EvD1")
        .await
        .unwrap()
        .expect("the item exists");
    assert_eq!(s(&item, "pk"), "EvD1");
    assert_eq!(s(&item, "status"), "in_progress");
    assert_eq!(s(&item, "owner"), a.as_str());
    assert_eq!(n(&item, "lease_until"), NOW + LEASE);
    assert_eq!(n(&item, "expires_at"), NOW / 1000 + TTL_S);
    assert_eq!(n(&item, "attempts"), 1);
    assert_eq!(s(&item, "team_id"), "T0001");
    assert_eq!(n(&item, "retry_num"), 2);
    assert_eq!(s(&item, "retry_reason"), "http_timeout");
    assert_eq!(n(&item, "created_at"), NOW);
    assert_eq!(n(&item, "claimed_at"), NOW);

    ledger.complete(&e, &a, NOW + 7).await.unwrap();
    let item = ledger.get_item("EvD1").await.unwrap().unwrap();
    assert_eq!(s(&item, "status"), "done");
    assert_eq!(n(&item, "completed_at"), NOW + 7);
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_done_event_is_reported_done_by_one_failed_write() {
    let ledger = ledger().await;
    let (e, a, b) = (id("EvD2"), OwnerToken::random(), OwnerToken::random());
    ledger.claim(&request(&e, &a, NOW)).await.unwrap();
    ledger.complete(&e, &a, NOW + 1).await.unwrap();
    let before = ledger.requests_sent();
    assert_eq!(
        ledger.claim(&request(&e, &b, NOW + 2)).await.unwrap(),
        Claim::AlreadyDone { ran: None }
    );
    assert_eq!(
        ledger.requests_sent() - before,
        1,
        "a duplicate costs one request"
    );
    // Done stays done long after the lease, until the TTL.
    assert_eq!(
        ledger
            .claim(&request(&e, &b, NOW + 100 * LEASE))
            .await
            .unwrap(),
        Claim::AlreadyDone { ran: None }
    );
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_live_claim_is_reported_in_progress_and_not_overwritten() {
    let ledger = ledger().await;
    let (e, a, b) = (id("EvD3"), OwnerToken::random(), OwnerToken::random());
    ledger.claim(&request(&e, &a, NOW)).await.unwrap();
    assert_eq!(
        ledger
            .claim(&request(&e, &b, NOW + LEASE - 1))
            .await
            .unwrap(),
        Claim::InProgress {
            lease_until_ms: NOW + LEASE
        }
    );
    let item = ledger.get_item("EvD3").await.unwrap().unwrap();
    assert_eq!(s(&item, "owner"), a.as_str());
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_lease_expired_claim_is_taken_over_and_the_old_owner_is_refused() {
    let ledger = ledger().await;
    let (e, a, b) = (id("EvD4"), OwnerToken::random(), OwnerToken::random());
    ledger.claim(&request(&e, &a, NOW)).await.unwrap();
    // A wrote nothing after its claim: it may have made step 1 in its window.
    assert_eq!(
        ledger.claim(&request(&e, &b, NOW + LEASE)).await.unwrap(),
        Claim::Acquired {
            attempt: 2,
            journal: Journal::from([(
                1,
                StepRecord::Began {
                    at_ms: NOW,
                    lease_until_ms: NOW + LEASE,
                    announces: true,
                    looked: None,
                }
            )])
        }
    );
    assert!(matches!(
        ledger.complete(&e, &a, NOW + LEASE + 1).await,
        Err(LedgerError::NotOwner { .. })
    ));
    assert!(matches!(
        ledger.release(&e, &a, NOW + LEASE + 1).await,
        Err(LedgerError::NotOwner { .. })
    ));
    ledger.complete(&e, &b, NOW + LEASE + 2).await.unwrap();
    let item = ledger.get_item("EvD4").await.unwrap().unwrap();
    assert_eq!(
        (s(&item, "status"), s(&item, "owner")),
        ("done", b.as_str())
    );
    assert_eq!(
        n(&item, "created_at"),
        NOW,
        "created_at keeps the first claim's time"
    );
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_released_claim_is_taken_at_once() {
    let ledger = ledger().await;
    let (e, a, b) = (id("EvD5"), OwnerToken::random(), OwnerToken::random());
    ledger.claim(&request(&e, &a, NOW)).await.unwrap();
    ledger.release(&e, &a, NOW + 1).await.unwrap();
    assert_eq!(
        s(&ledger.get_item("EvD5").await.unwrap().unwrap(), "status"),
        "released"
    );
    assert_eq!(
        ledger.claim(&request(&e, &b, NOW + 2)).await.unwrap(),
        Claim::Acquired {
            attempt: 2,
            journal: Journal::new()
        }
    );
    let item = ledger.get_item("EvD5").await.unwrap().unwrap();
    assert!(
        !item.contains_key("released_at"),
        "a new claim clears the old release"
    );
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn an_item_past_its_ttl_counts_as_absent_though_not_yet_deleted() {
    let ledger = ledger().await;
    let (e, a, b) = (id("EvD6"), OwnerToken::random(), OwnerToken::random());
    ledger.claim(&request(&e, &a, NOW)).await.unwrap();
    ledger.complete(&e, &a, NOW + 1).await.unwrap();
    // TTL is disabled on test tables (DynamoDB Local deletes within a second, AWS takes up to
    // ~48 h): the expired item is still there, as it may be on AWS, and must not count.
    let after_ttl = NOW + TTL_S * 1000;
    assert!(ledger.get_item("EvD6").await.unwrap().is_some());
    assert!(matches!(
        ledger.claim(&request(&e, &b, after_ttl)).await.unwrap(),
        Claim::Acquired { .. }
    ));
    let item = ledger.get_item("EvD6").await.unwrap().unwrap();
    assert_eq!(s(&item, "status"), "in_progress");
    assert!(!item.contains_key("completed_at"));
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn complete_and_release_by_a_stranger_are_refused() {
    let ledger = ledger().await;
    let (e, a, stranger) = (id("EvD7"), OwnerToken::random(), OwnerToken::random());
    assert!(
        matches!(
            ledger.complete(&e, &a, NOW).await,
            Err(LedgerError::NotOwner { .. })
        ),
        "nothing claimed yet"
    );
    ledger.claim(&request(&e, &a, NOW)).await.unwrap();
    assert!(matches!(
        ledger.complete(&e, &stranger, NOW).await,
        Err(LedgerError::NotOwner { .. })
    ));
    assert!(matches!(
        ledger.release(&e, &stranger, NOW).await,
        Err(LedgerError::NotOwner { .. })
    ));
    ledger.complete(&e, &a, NOW).await.unwrap();
    ledger
        .complete(&e, &a, NOW)
        .await
        .expect("sent twice (an SDK retry after a lost answer): applied already, success");
    assert!(
        matches!(
            ledger.release(&e, &a, NOW).await,
            Err(LedgerError::NotOwner { .. })
        ),
        "after done"
    );
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_claim_without_optional_fields_removes_an_earlier_deliverys() {
    let ledger = ledger().await;
    let (e, a, b) = (id("EvD8"), OwnerToken::random(), OwnerToken::random());
    ledger.claim(&request(&e, &a, NOW)).await.unwrap();
    ledger.release(&e, &a, NOW + 1).await.unwrap();
    let bare = ClaimRequest {
        team_id: None,
        retry_num: None,
        retry_reason: None,
        ..request(&e, &b, NOW + 2)
    };
    ledger.claim(&bare).await.unwrap();
    let item = ledger.get_item("EvD8").await.unwrap().unwrap();
    assert!(
        !item.contains_key("retry_num")
            && !item.contains_key("retry_reason")
            && !item.contains_key("team_id")
    );
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn two_hundred_concurrent_claims_of_one_event_have_exactly_one_winner() {
    let ledger = ledger().await;
    let e = id("EvRace");
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let (ledger, e) = (ledger.clone(), e.clone());
        tasks.push(tokio::spawn(async move {
            let owner = OwnerToken::random();
            ledger.claim(&request(&e, &owner, NOW)).await.unwrap()
        }));
    }
    let mut acquired = 0;
    let mut in_progress = 0;
    for t in tasks {
        match t.await.unwrap() {
            Claim::Acquired { .. } => acquired += 1,
            Claim::InProgress { .. } => in_progress += 1,
            other => panic!("nobody finished: {other:?}"),
        }
    }
    assert_eq!((acquired, in_progress), (1, 199));
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn through_the_app_a_first_delivery_costs_two_writes_and_a_duplicate_one() {
    let ledger = ledger().await;
    let app = spawn_app_with(Options {
        ledger: Some(ledger.clone() as Arc<dyn Ledger>),
        ..Default::default()
    })
    .await;
    let body = app_mention("EvD9", "count me");
    let before = ledger.requests_sent();
    assert_eq!(app.send(&body, None).await.outcome(), "answered");
    assert_eq!(
        ledger.requests_sent() - before,
        2,
        "the claim (standing for the post's intent) + complete (with the post's ts)"
    );
    let item = ledger
        .get_item(&mention_key("EvD9"))
        .await
        .unwrap()
        .unwrap();
    let step = item["journal"].as_m().unwrap()["1"].as_s().unwrap();
    let StepRecord::Done { result, op } = StepRecord::decode(step).unwrap() else {
        panic!("step 1 not done: {step}")
    };
    assert!(op.unwrap().starts_with("chat.postMessage#"));
    assert_eq!(
        result,
        serde_json::json!({"channel": "C0001", "ok": true, "ts": app.slack.posted()[0].ts})
            .to_string(),
        "what a replay needs of the stand-in's answer: the ids"
    );
    assert!(
        !item.contains_key("began"),
        "the completion ends the claim's window"
    );
    let before = ledger.requests_sent();
    assert_eq!(app.send(&body, Some(1)).await.outcome(), "duplicate");
    assert_eq!(
        ledger.requests_sent() - before,
        1,
        "one failed conditional write"
    );
    assert_eq!(app.slack.posted().len(), 1);
}

#[tokio::test]
async fn an_unreachable_ledger_answers_503_and_posts_nothing() {
    // A port nothing listens on: connection refused, as when DynamoDB is down.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let ledger = DynamoLedger::new(dynamodb_client(&format!("http://{closed}")), "nowhere");
    let app = spawn_app_with(Options {
        ledger: Some(Arc::new(ledger) as Arc<dyn Ledger>),
        ..Default::default()
    })
    .await;
    let answer = app.send(&app_mention("EvD10", "anyone?"), None).await;
    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        answer.body
    );
    assert_eq!(answer.json()["error"], "ledger_unavailable");
    assert!(
        app.slack.received().is_empty(),
        "never a reply without a claim"
    );
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_missing_table_answers_503_and_posts_nothing() {
    let ledger = DynamoLedger::new(dynamodb_client(&dynamodb_endpoint()), "no-such-table");
    let app = spawn_app_with(Options {
        ledger: Some(Arc::new(ledger) as Arc<dyn Ledger>),
        ..Default::default()
    })
    .await;
    let answer = app
        .send(&app_mention("EvD11", "where is the table?"), None)
        .await;
    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        answer.body
    );
    assert!(app.slack.received().is_empty());
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_state_change_is_made_once_per_request() {
    let ledger = ledger().await;
    contract::a_state_change_is_made_once_per_request(
        ledger.as_ref(),
        &id("EvD40"),
        &id("EvD41"),
        &id("state-A0001-count"),
    )
    .await;
    // The record on the request's claim, in the transaction's other item.
    let item = ledger.get_item("EvD40").await.unwrap().unwrap();
    let changes = item["state_changes"].as_m().unwrap();
    assert_eq!(changes.len(), 2, "{changes:?}");
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_note_is_replaced_only_where_it_is_as_read() {
    let (ledger, key) = (ledger().await, id("astop-T1-D1-1_5-A0001"));
    contract::a_note_is_replaced_only_where_it_is_as_read(ledger.as_ref(), &key).await;
    let item = ledger.get_item(key.as_str()).await.unwrap().unwrap();
    assert_eq!(s(&item, "note"), "c");
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn state_is_written_once_per_version_read() {
    let (ledger, key) = (ledger().await, id("state-A0001-EvD30-poll"));
    contract::state_is_written_once_per_version_read(ledger.as_ref(), &key).await;
    let item = ledger.get_item(key.as_str()).await.unwrap().unwrap();
    assert_eq!(s(&item, "app_state"), "{\"n\":1}");
    assert!(item["app_state_writers"].as_l().is_ok());
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn two_fates_of_one_step_in_one_write_are_one_valid_update_recording_the_last() {
    let (ledger, e) = (ledger().await, id("EvD10b"));
    contract::two_fates_of_one_step_in_one_write_record_the_last(ledger.as_ref(), &e).await;
    let item = ledger.get_item("EvD10b").await.unwrap().unwrap();
    let journal = item["journal"].as_m().unwrap();
    let step1 = journal["1"].as_s().unwrap();
    assert!(step1.starts_with("d ") && step1.contains("V1"), "{step1}");
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn the_journal_records_intents_and_results_and_survives_a_takeover() {
    let (ledger, e) = (ledger().await, id("EvD10"));
    contract::the_journal_survives_a_takeover(ledger.as_ref(), &e).await;
    let item = ledger.get_item("EvD10").await.unwrap().unwrap();
    let journal = item["journal"].as_m().unwrap();
    assert_eq!(
        journal.len(),
        1,
        "step 2 certainly not done: its intent is gone"
    );
    assert_eq!(s(&item, "status"), "released");
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_claim_stands_for_its_first_steps_intent_until_its_claimant_writes() {
    let (ledger, e) = (ledger().await, id("EvD13"));
    contract::began_windows_stand_for_the_first_step_until_the_claimant_writes(ledger.as_ref(), &e)
        .await;
    let item = ledger.get_item("EvD13").await.unwrap().unwrap();
    assert!(
        !item.contains_key("began"),
        "the claimant's writes end the windows"
    );
    assert_eq!(item["journal"].as_m().unwrap().len(), 2);
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn an_alias_lives_as_long_as_its_messages_latest_claim() {
    let ledger = ledger().await;
    let (alias, first, second) = (id("cmid-T1-D2"), id("msg-T1-C1-3"), id("msg-T1-C1-4"));
    contract::an_alias_lives_as_long_as_its_messages_latest_claim(
        ledger.as_ref(),
        &alias,
        &first,
        &second,
    )
    .await;
    // A write seconds later moves nothing: one request, no update.
    let requests = ledger.requests_sent();
    let again = slack_once::ledger::AliasRequest {
        alias: &alias,
        of: &first,
        now_ms: NOW + 2 * 3600 * 1000 + 5_000,
        expires_at_s: (NOW + 2 * 3600 * 1000 + 5_000) / 1000 + TTL_S,
        app_id: Some(contract::APP),
    };
    assert_eq!(
        ledger.alias(&again).await.unwrap(),
        slack_once::ledger::Alias::Ours
    );
    assert_eq!(ledger.requests_sent() - requests, 1);
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn an_alias_is_one_small_item_naming_the_message_it_belongs_to() {
    let ledger = ledger().await;
    let (alias, first, second) = (id("cmid-T1-D1"), id("msg-T1-C1-1"), id("msg-T1-C1-2"));
    contract::an_alias_belongs_to_the_first_message_that_writes_it(
        ledger.as_ref(),
        &alias,
        &first,
        &second,
    )
    .await;
    let item = ledger.get_item("cmid-T1-D1").await.unwrap().unwrap();
    assert_eq!(
        s(&item, "alias_of"),
        "msg-T1-C1-2",
        "rewritten past its TTL"
    );
    assert_eq!(
        (s(&item, "status"), n(&item, "lease_until")),
        ("released", 0),
        "to a version before pointers, a claim it may take: {item:?}"
    );
    assert!(!item.contains_key("owner") && !item.contains_key("journal"));
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_failed_event_keeps_its_error_and_blocks_every_later_copy() {
    let (ledger, e) = (ledger().await, id("EvD11"));
    contract::a_failed_event_blocks_every_later_copy(ledger.as_ref(), &e).await;
    let item = ledger.get_item("EvD11").await.unwrap().unwrap();
    assert_eq!(s(&item, "status"), "failed");
    assert_eq!(s(&item, "error"), "channel_not_found");
    assert_eq!(n(&item, "failed_at"), contract::NOW + 3);
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_claim_that_finds_its_own_claim_acquires_it_with_the_stored_attempt() {
    let (ledger, e) = (ledger().await, id("EvD12"));
    contract::a_claim_sent_again_acquires_with_the_stored_attempt(ledger.as_ref(), &e).await;
    let item = ledger.get_item("EvD12").await.unwrap().unwrap();
    assert_eq!(n(&item, "attempts"), 2, "not counted twice");
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn another_apps_key_and_alias_are_never_taken_and_an_item_of_no_app_is_anyones() {
    let ledger = ledger().await;
    let (e, old, alias) = (id("EvD20"), id("EvD21"), id("cmid-T1-D20"));
    contract::another_apps_key_is_never_taken(ledger.as_ref(), &e).await;
    let item = ledger.get_item("EvD20").await.unwrap().unwrap();
    assert_eq!(s(&item, "app"), contract::OTHER_APP, "{item:?}");
    assert_eq!(s(&item, "status"), "done");
    let scoped = format!("EvD20-{}", contract::APP);
    let here = ledger.get_item(&scoped).await.unwrap().unwrap();
    assert_eq!(s(&here, "app"), contract::APP);
    contract::an_item_of_no_app_is_anyones(ledger.as_ref(), &old).await;
    let item = ledger.get_item("EvD21").await.unwrap().unwrap();
    assert!(
        !item.contains_key("app"),
        "a takeover leaves an item of no app anyone's: {item:?}"
    );
    contract::another_apps_alias_is_never_taken(ledger.as_ref(), &alias).await;
    let item = ledger.get_item("cmid-T1-D20").await.unwrap().unwrap();
    assert_eq!(s(&item, "app"), contract::OTHER_APP);
}

/// A message that mentions two apps whose deployments share one table: Slack sends each app
/// the same event (the same `event_id`, `ts` and `client_msg_id`, its own `api_app_id`).
fn for_app(event_id: &str, app: &str, ts: Option<&str>) -> String {
    let mut v: serde_json::Value =
        serde_json::from_str(&app_mention(event_id, "hello both")).unwrap();
    v["api_app_id"] = app.into();
    v["event"]["client_msg_id"] = "7c1d5a2e-0b7f-4c55-9e0e-3d2f3b1a9c44".into();
    if let Some(ts) = ts {
        v["event"]["ts"] = ts.into();
        v["event"]["event_ts"] = ts.into();
    }
    v.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn two_apps_sharing_a_table_each_answer_a_message_that_mentions_both_once() {
    let endpoint = dynamodb_endpoint();
    let (table, ledger) = fresh_table(&endpoint).await;
    let ours = spawn_app_on_ledger(&endpoint, table.clone(), vec![]).await;
    let theirs = spawn_app_on_ledger(&endpoint, table.clone(), vec![]).await;
    let (a, b) = ("A0001", "A0OTHERAPP");
    // The other app first, then this one, then Slack's retries to each.
    let first = theirs.send(&for_app("EvShared1", b, None), None).await;
    assert_eq!(first.outcome(), "answered", "{}", first.body);
    let second = ours.send(&for_app("EvShared1", a, None), None).await;
    assert_eq!(second.outcome(), "answered", "{}", second.body);
    for (app, id) in [(&ours, a), (&theirs, b)] {
        let retry = app.send(&for_app("EvShared1", id, None), Some(1)).await;
        assert_eq!(retry.outcome(), "duplicate", "{id}: {}", retry.body);
        // A copy of the message under another ts (the same client_msg_id): each app's own
        // alias finds it a copy.
        let copy = app
            .send(&for_app("EvShared1b", id, Some("1650000000.000900")), None)
            .await;
        assert_eq!(copy.outcome(), "duplicate", "{id}: {}", copy.body);
    }
    assert_eq!(ours.slack.posted().len(), 1, "{:?}", ours.slack.posted());
    assert_eq!(
        theirs.slack.posted().len(),
        1,
        "{:?}",
        theirs.slack.posted()
    );
    let key = mention_key("EvShared1");
    let held = ledger.get_item(&key).await.unwrap().unwrap();
    assert_eq!((s(&held, "app"), s(&held, "status")), (b, "done"));
    let own = ledger
        .get_item(&format!("{key}-{a}"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((s(&own, "app"), s(&own, "status")), (a, "done"));
}

// ================================================================ a reset after the write

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
#[ignore = "needs DynamoDB Local and the built binary"]
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
#[ignore = "needs DynamoDB Local and the built binary"]
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
#[ignore = "needs DynamoDB Local and the built binary"]
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
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_release_whose_answer_was_lost_is_success_and_the_retry_takes_over_at_once() {
    let (slack, proxy, bot, ledger, _) = behind_proxy("20").await;
    // A 429 longer than the lease: certainly not posted, released.
    slack.script([SlackFailure::RateLimited(60)]);
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

/// A claim's write to its item met a transaction under way on it (a state change of the same
/// request, recorded with the claim): DynamoDB refuses with `TransactionConflictException`,
/// which the SDK does not send again. The claim, a step's intent and the completion each send
/// it again a few ms later: the request is answered once, never released or failed for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
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
