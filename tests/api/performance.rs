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
