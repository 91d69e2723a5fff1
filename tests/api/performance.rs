//! The performance issue's behaviours that a test can pin down without timing anything: a cold
//! process opens its connection to Slack while it claims (and only for a verified event), and
//! what a person's message costs the ledger (the bench counts its round trips: BENCHMARKS.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use slack_once::ledger::Ledger;

use crate::helpers::*;

async fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while !done() {
        if started.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

#[tokio::test]
async fn the_first_verified_event_opens_the_connection_to_slack_once_and_a_forged_one_opens_none() {
    let app = spawn_app().await;
    // Forged: a wrong signature, then a stale timestamp. Nothing reaches Slack.
    let body = app_mention("EvWarm1", "hello");
    let mut forged = signed_headers(SECRET, now_unix(), body.as_bytes());
    for (k, v) in forged.iter_mut() {
        if k == "x-slack-signature" {
            *v = format!("v0={}", "0".repeat(64));
        }
    }
    assert_eq!(
        app.send_raw(&forged, body.clone().into_bytes())
            .await
            .status,
        401
    );
    let stale = signed_headers(SECRET, now_unix() - 600, body.as_bytes());
    assert_eq!(
        app.send_raw(&stale, body.clone().into_bytes()).await.status,
        401
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(app.slack.warm_ups(), 0, "a forged request makes no call");

    assert_eq!(app.send(&body, None).await.outcome(), "answered");
    assert!(
        wait_for(Duration::from_secs(5), || app.slack.warm_ups() == 1).await,
        "the first verified event opened the connection ahead of its post"
    );
    for i in 2..5 {
        let body = app_mention(&format!("EvWarm{i}"), "again");
        assert_eq!(app.send(&body, None).await.outcome(), "answered");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(app.slack.warm_ups(), 1, "once per process");
    assert_eq!(app.slack.posted().len(), 4);
}

#[tokio::test]
async fn without_a_token_nothing_is_opened_ahead() {
    let app = spawn_app_with(Options {
        vars: vec![("SLACK_BOT_TOKEN", String::new())],
        ..Default::default()
    })
    .await;
    assert_eq!(
        app.send(&app_mention("EvWarmNo", "hello"), None)
            .await
            .outcome(),
        "answered"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(app.slack.warm_ups(), 0);
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn a_persons_message_costs_three_ledger_requests_and_a_duplicate_two_without_a_read() {
    let endpoint = dynamodb_endpoint();
    let (_, ledger) = fresh_table(&endpoint).await;
    let app = spawn_app_with(Options {
        ledger: Some(ledger.clone() as Arc<dyn Ledger>),
        ..Default::default()
    })
    .await;
    let mut body: serde_json::Value =
        serde_json::from_str(&app_mention("EvPerson1", "count me")).unwrap();
    body["event"]["client_msg_id"] = "0b6a3f4e-8c1d-4c1e-9a55-1f2e3d4c5b6a".into();
    let body = body.to_string();
    let before = ledger.requests_sent();
    assert_eq!(app.send(&body, None).await.outcome(), "answered");
    assert_eq!(
        ledger.requests_sent() - before,
        3,
        "the claim and its alias (together), then the completion"
    );
    let before = ledger.requests_sent();
    assert_eq!(app.send(&body, Some(1)).await.outcome(), "duplicate");
    assert_eq!(
        ledger.requests_sent() - before,
        2,
        "claim and alias, no read"
    );
    assert_eq!(app.slack.posted().len(), 1);
}

/// A takeover's claim is two writes: the put that finds the item (its lease ended), then the
/// update. The update's answer is lost: the SDK sends it again, and it finds its own claim
/// (one more attempt counted, not two), looks in Slack and finds the earlier answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn a_takeover_whose_update_answer_is_lost_finds_its_own_claim() {
    let endpoint = dynamodb_endpoint();
    let (table, direct) = fresh_table(&endpoint).await;
    let proxy = LedgerProxy::start(&endpoint).await;
    let app = spawn_app_on_ledger(
        &proxy.url,
        table,
        vec![("DEDUP_LEASE_SECONDS", "3".to_string())],
    )
    .await;
    let id = "EvTakeoverUpdateLost";
    let body = app_mention(id, "hello");
    // Answered, but the completion never reaches DynamoDB (the instance died after posting).
    proxy.hold_next(LedgerOp::Complete, HoldAt::BeforeForwarding);
    assert_eq!(app.send(&body, None).await.outcome(), "answered");
    tokio::time::sleep(Duration::from_millis(3_300)).await;

    let before = proxy.seen().len();
    // The retry's put finds the item (1st claim write), its update (2nd) loses its answer.
    proxy.hold_nth(LedgerOp::Claim, 2, HoldAt::DropAnswer);
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(retry.outcome(), "recovered", "{}", retry.body);
    assert_eq!(
        proxy.held(),
        2,
        "the update's answer was dropped (after the completion)"
    );
    let claims = proxy.seen()[before..]
        .iter()
        .filter(|op| **op == LedgerOp::Claim)
        .count();
    assert_eq!(claims, 3, "the put, the update, the update sent again");
    assert_eq!(app.slack.posted().len(), 1, "no second answer");
    let item = direct.get_item(&mention_key(id)).await.unwrap().unwrap();
    assert_eq!(item["status"].as_s().unwrap(), "done");
    assert_eq!(
        item["attempts"].as_n().unwrap(),
        "2",
        "the update sent again was recognised as this delivery's own claim"
    );
}

/// Two retries after the lease, the first one's update delayed until the second has put and
/// updated: between the put and the update another delivery took the event over, so the
/// update's condition (evaluated again) refuses it: B has answered (it found the earlier
/// post) and A finds the event done. No second post.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn a_takeover_overtaken_between_its_put_and_its_update_does_not_claim() {
    let endpoint = dynamodb_endpoint();
    let (table, direct) = fresh_table(&endpoint).await;
    let proxy = LedgerProxy::start(&endpoint).await;
    let app = Arc::new(
        spawn_app_on_ledger(
            &proxy.url,
            table,
            vec![("DEDUP_LEASE_SECONDS", "3".to_string())],
        )
        .await,
    );
    let id = "EvTakeoverRace";
    let body = app_mention(id, "hello");
    proxy.hold_next(LedgerOp::Complete, HoldAt::BeforeForwarding);
    assert_eq!(app.send(&body, None).await.outcome(), "answered");
    tokio::time::sleep(Duration::from_millis(3_300)).await;

    // A: its put, then its update held back 700 ms. B: put and update meanwhile.
    proxy.hold_nth(
        LedgerOp::Claim,
        2,
        HoldAt::DelayForwarding(Duration::from_millis(700)),
    );
    let a = tokio::spawn({
        let (app, body) = (app.clone(), body.clone());
        async move { app.send(&body, Some(1)).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let b = app.send(&body, Some(2)).await;
    let a = a.await.unwrap();
    assert_eq!(b.outcome(), "recovered", "{}", b.body);
    assert_eq!(
        a.outcome(),
        "duplicate",
        "A's update, evaluated after B's takeover ended, found the event done: {} {}",
        a.status,
        a.body
    );
    assert_eq!(app.slack.posted().len(), 1, "no second answer");
    let item = direct.get_item(&mention_key(id)).await.unwrap().unwrap();
    assert_eq!(item["status"].as_s().unwrap(), "done");
    assert_eq!(item["attempts"].as_n().unwrap(), "2", "B's takeover only");
}
