//! The request's journal: an item that keeps only what a replay needs, a listener that would
//! outgrow it, and a replay whose write changes its target.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::types::AttributeValue;
use http::StatusCode;
use slack_once::app::{App, Ctx, MessageEvent};
use slack_once::ledger::{Ledger, MemoryLedger, Status};

use crate::helpers::*;

/// The most steps a request's journal holds (docs/listeners.md): a listener that would make
/// more writes ends `failed` (`journal_full`).
const MAX_STEPS: u32 = 500;

/// An item's size as DynamoDB counts it (attribute names and values; numbers as stored).
fn item_size(item: &HashMap<String, AttributeValue>) -> usize {
    fn value(v: &AttributeValue) -> usize {
        match v {
            AttributeValue::S(s) => s.len(),
            AttributeValue::N(n) => n.len().div_ceil(2) + 1,
            AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
            AttributeValue::M(m) => {
                3 + m.iter().map(|(k, v)| k.len() + value(v) + 1).sum::<usize>()
            }
            AttributeValue::L(l) => 3 + l.iter().map(|v| value(v) + 1).sum::<usize>(),
            _ => 0,
        }
    }
    item.iter().map(|(k, v)| k.len() + value(v)).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn sixty_updates_of_a_5kb_answer_complete_and_the_item_keeps_only_what_a_replay_needs() {
    let endpoint = dynamodb_endpoint();
    let (_, ledger) = fresh_table(&endpoint).await;
    let bot = App::new().message_where(
        |_: &MessageEvent| true,
        |ctx: Ctx, _m: MessageEvent| async move {
            let answer = ctx.reply("thinking…").await?;
            for n in 1..=60 {
                // The answer as it streams in: 5 KB, growing.
                let text = format!("{n}: {}", "token ".repeat(850));
                ctx.update(&answer.channel, &answer.ts, text).await?;
            }
            Ok(())
        },
    );
    let app = spawn_app_with(Options {
        app: Some(bot),
        ledger: Some(ledger.clone() as Arc<dyn Ledger>),
        ..Default::default()
    })
    .await;
    let body = app_mention("EvSixty", "stream");
    let answer = app.send(&body, None).await;
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);
    let item = ledger
        .get_item(&mention_key("EvSixty"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(item["journal"].as_m().unwrap().len(), 61);
    let size = item_size(&item);
    println!("61 steps (a post and 60 updates of a 5 KB answer): the item is {size} bytes");
    assert!(
        size < 8 * 1024,
        "ids only, never Slack's answers: {size} bytes"
    );
    let posted = app.slack.posted();
    assert_eq!(posted.len(), 1);
    assert!(posted[0].body["text"].as_str().unwrap().starts_with("60: "));
    assert_eq!(app.send(&body, Some(1)).await.outcome(), "duplicate");

    // The reference bot's answered item stays within one write unit.
    let reference = spawn_app_with(Options {
        ledger: Some(ledger.clone() as Arc<dyn Ledger>),
        ..Default::default()
    })
    .await;
    let body = app_mention("EvSmall", "how big is my item?");
    assert_eq!(reference.send(&body, None).await.outcome(), "answered");
    let item = ledger
        .get_item(&mention_key("EvSmall"))
        .await
        .unwrap()
        .unwrap();
    let size = item_size(&item);
    println!("the reference bot's answered item: {size} bytes");
    assert!(
        size <= 1024,
        "an answered event's item is at most 1 KB: {size} bytes: {item:?}"
    );
}

#[tokio::test]
async fn a_listener_that_would_outgrow_its_journal_ends_the_event_failed_once() {
    let attempts = Arc::new(Mutex::new(0));
    let bot = App::new().message_where(|_: &MessageEvent| true, {
        let attempts = attempts.clone();
        move |ctx: Ctx, m: MessageEvent| {
            let attempts = attempts.clone();
            async move {
                *attempts.lock().unwrap() += 1;
                for n in 0..=MAX_STEPS {
                    ctx.react(&m.channel, &m.ts, &format!("emoji{n}")).await?;
                }
                Ok(())
            }
        }
    });
    let ledger = Arc::new(MemoryLedger::new());
    let app = spawn_app_with(Options {
        app: Some(bot),
        ledger: Some(ledger.clone() as Arc<dyn Ledger>),
        ..Default::default()
    })
    .await;
    let body = direct_message("EvOutgrow", "U0001", "react a lot");
    let answer = app.send(&body, None).await;
    assert_eq!(
        (answer.status, answer.outcome().as_str()),
        (StatusCode::OK, "failed"),
        "{}",
        answer.body
    );
    assert_eq!(
        app.send(&body, Some(1)).await.outcome(),
        "already_failed",
        "once, not a loop"
    );
    assert_eq!(*attempts.lock().unwrap(), 1);
    let made = app.slack.calls_of("reactions.add");
    assert_eq!(
        made, MAX_STEPS as usize,
        "the write past the bound was not made"
    );
    let key = slack_once::slack::envelope::EventId::try_from(message_key(
        TEAM,
        "D0001",
        &ts_of("EvOutgrow"),
    ))
    .unwrap();
    assert_eq!(ledger.status(&key), Some(Status::Failed));
}

#[tokio::test]
async fn a_replay_that_posts_to_another_channel_or_thread_ends_the_event_failed() {
    for moved in ["channel", "thread"] {
        let runs = Arc::new(Mutex::new(0));
        let bot = App::new().message_where(|_: &MessageEvent| true, {
            let runs = runs.clone();
            move |ctx: Ctx, m: MessageEvent| {
                let runs = runs.clone();
                async move {
                    let run = {
                        let mut runs = runs.lock().unwrap();
                        *runs += 1;
                        *runs
                    };
                    let (channel, thread) = match (moved, run) {
                        (_, 1) => ("C0001", m.ts.clone()),
                        ("channel", _) => ("C0OTHER", m.ts.clone()),
                        _ => ("C0001", "1600000000.999999".to_string()),
                    };
                    ctx.post(
                        channel,
                        slack_once::app::Message::text("x").in_thread(thread),
                    )
                    .await?;
                    Ok(())
                }
            }
        });
        let app = spawn_bot(bot).await;
        app.slack.script([SlackFailure::Status(500)]);
        let body = message_in("EvMoved", moved, "C0001");
        assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
        let retry = app.send(&body, Some(1)).await;
        assert_eq!(
            (retry.outcome().as_str(), app.slack.lookup_queries().len()),
            ("failed", 0),
            "{moved}: the step's target changed; nothing looked for or posted: {}",
            retry.body
        );
        assert!(app.slack.posted().is_empty());
    }
}

/// A channel message of its own for each `variant`.
fn message_in(event_id: &str, variant: &str, channel: &str) -> String {
    let id = format!("{event_id}{variant}");
    let ts = ts_of(&id);
    serde_json::json!({
        "token": "unused", "team_id": TEAM, "api_app_id": APP_ID, "type": "event_callback",
        "event_id": id, "event_time": 1_700_000_000,
        "event": {"type": "message", "channel_type": "channel", "user": "U0001", "text": "x",
                  "ts": ts, "channel": channel, "event_ts": ts},
        "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": true}]
    })
    .to_string()
}
