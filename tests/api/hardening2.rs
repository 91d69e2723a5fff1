//! The second production review's findings, each injected: look-ups under Slack's 2025 limits
//! in busy conversations, another app's message carrying our metadata, a post to a user, one
//! message heard by listeners of two event types, a journal that must stay small, writes that
//! change their target on a replay, and other bots' messages.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use http::StatusCode;
use slack_once::app::{App, Ctx, Listener, MessageEvent};
use slack_once::ledger::{Ledger, MemoryLedger, Status};

use crate::helpers::*;

/// The window a look-up searches beyond the earlier claim's intent and lease (see
/// `app::context`): tests that need a message outside it wait this long past the lease.
const LOOKUP_MARGIN: Duration = Duration::from_secs(5);

fn ms_of(ts: &str) -> u64 {
    (slack_once::testing::micros(ts).unwrap() / 1000) as u64
}

/// An app whose first post of `EvX` is ambiguous (Slack says `internal_error`; `posted` says
/// whether it went through), with a 2 s lease.
async fn ambiguous_first_post(posted: bool) -> TestApp {
    let app = spawn_app_with(Options {
        vars: vec![("DEDUP_LEASE_SECONDS", "2".into())],
        ..Default::default()
    })
    .await;
    app.slack.script([Behaviour::OkFalse {
        code: "internal_error",
        posted,
    }]);
    app
}

// ---------------------------------------------------------------- look-ups under Slack's limits

#[tokio::test]
async fn a_look_up_in_a_busy_thread_is_one_call_within_the_earlier_claims_window() {
    let app = ambiguous_first_post(true).await;
    app.slack.limit_lookups_per_minute(1);
    let body = app_mention("EvBusyThread", "x");
    let started = Instant::now();
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    // Forty newer messages in the thread, after the earlier claim's lease (and the margin).
    tokio::time::sleep(
        (Duration::from_secs(2) + LOOKUP_MARGIN + Duration::from_millis(500))
            .saturating_sub(started.elapsed()),
    )
    .await;
    let thread = ts_of("EvBusyThread");
    app.slack.add_other_messages("C0001", Some(&thread), 40);
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(retry.outcome(), "recovered", "{}", retry.body);
    let queries = app.slack.lookup_queries();
    assert_eq!(queries.len(), 1, "one call settles it: {queries:?}");
    let q = &queries[0];
    assert_eq!(q["ts"], thread, "the reply's thread");
    // Exclusive bounds: a next page goes on past the last `ts` read.
    assert_eq!(q["limit"], "15");
    assert_eq!(q.get("inclusive"), None);
    assert_eq!(q["include_all_metadata"], "true");
    let (oldest, latest) = (ms_of(&q["oldest"]), ms_of(&q["latest"]));
    let posted = ms_of(&app.slack.posted()[0].ts);
    assert!(
        oldest <= posted && posted <= latest,
        "the post lies in the window"
    );
    assert!(
        latest - oldest <= 2_000 + 2 * LOOKUP_MARGIN.as_millis() as u64 + 500,
        "the window spans the earlier claim's lease and the margins: {oldest}..{latest}"
    );
    assert_eq!(app.slack.posted().len(), 1);
}

#[tokio::test]
async fn a_look_up_that_needs_a_second_page_under_one_call_a_minute_holds_back_rather_than_post() {
    let app = ambiguous_first_post(true).await;
    app.slack.limit_lookups_per_minute(1);
    let thread = ts_of("EvSecondPage");
    let body = app_mention("EvSecondPage", "x");
    // Twenty replies in the thread inside the window, before the reply: it is on page 2.
    app.slack.add_other_messages("C0001", Some(&thread), 20);
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    let started = Instant::now();
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(
        (retry.status, retry.json()["error"].as_str()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Some("slack_lookup_unavailable")
        ),
        "{}",
        retry.body
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "not waited past the lease"
    );
    assert_eq!(
        app.slack.lookup_queries().len(),
        2,
        "page 1, then the 429 of page 2"
    );
    assert_eq!(app.slack.posted().len(), 1, "held back: no second answer");
}

#[tokio::test]
async fn a_look_up_in_a_busy_dm_is_one_call_within_the_earlier_claims_window() {
    let app = ambiguous_first_post(true).await;
    app.slack.limit_lookups_per_minute(1);
    let body = direct_message("EvDmWindow", "U0001", "ping");
    let before = now_unix() * 1000;
    let started = Instant::now();
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    // Forty newer messages in the DM, after the earlier claim's window: history is newest
    // first, so without `latest` the answer would be on the third page of 15.
    tokio::time::sleep(
        (Duration::from_secs(2) + LOOKUP_MARGIN + Duration::from_millis(500))
            .saturating_sub(started.elapsed()),
    )
    .await;
    app.slack.add_other_messages("D0001", None, 40);
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(retry.outcome(), "recovered", "{}", retry.body);
    let queries = app.slack.lookup_queries();
    assert_eq!(queries.len(), 1, "one call under 1 a minute: {queries:?}");
    let q = &queries[0];
    assert!(!q.contains_key("ts"), "a DM reply is not in a thread");
    let (oldest, latest) = (ms_of(&q["oldest"]), ms_of(&q["latest"]));
    assert!(
        oldest + LOOKUP_MARGIN.as_millis() as u64 >= before,
        "nothing before the earlier claim"
    );
    assert!(latest > oldest);
    assert!(
        oldest > ms_of(&ts_of("EvDmWindow")),
        "messages older than the claim are never searched"
    );
    assert_eq!(app.slack.posted().len(), 1);
}

/// The metadata slack-once puts on step 1 of the claim keyed `key` (event `event_id`).
fn our_metadata(key: &str, event_id: &str) -> serde_json::Value {
    serde_json::json!({
        "event_type": "slack_once_reply",
        "event_payload": {"slack_once": {"key": key, "event_id": event_id, "step": 1, "attempt": 1}}
    })
}

#[tokio::test]
async fn another_apps_message_carrying_our_metadata_is_never_taken_for_ours() {
    let app = ambiguous_first_post(false).await;
    let id = "EvForeign";
    let body = app_mention(id, "x");
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    // A staging bot in the same channel shares the keys; any app with chat:write can write this.
    let thread = ts_of(id);
    app.slack
        .add_foreign_message("C0001", Some(&thread), our_metadata(&mention_key(id), id));
    app.slack.add_foreign_message(
        "C0001",
        Some(&thread),
        serde_json::json!({"event_type": "slack_once_reply", "event_payload": {"event_id": mention_key(id)}}),
    );
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(retry.outcome(), "answered", "{}", retry.body);
    assert_eq!(
        app.slack.lookup_queries().len(),
        1,
        "it looked, and found only another app's"
    );
    let ours = app.slack.posted();
    assert_eq!(ours.len(), 1, "our one answer");
    assert_eq!(ours[0].body["app_id"], APP_ID);
}

#[tokio::test]
async fn a_post_to_a_user_is_looked_for_in_their_dm() {
    let bot = App::new().message_where(
        |_: &MessageEvent| true,
        |ctx: Ctx, m: MessageEvent| async move {
            let user = m.user.clone().unwrap_or_default();
            ctx.post(&user, "a word in private").await?;
            Ok(())
        },
    );
    let app = spawn_app_with(Options {
        app: Some(bot),
        vars: vec![("DEDUP_LEASE_SECONDS", "2".into())],
        ..Default::default()
    })
    .await;
    app.slack.script([Behaviour::OkFalse {
        code: "internal_error",
        posted: true,
    }]);
    let body = direct_message("EvToUser", "U0777", "hello")
        .replace("D0001", "C0001")
        .replace("\"im\"", "\"channel\"");
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(retry.outcome(), "recovered", "{}", retry.body);
    assert_eq!(
        app.slack.calls_of("conversations.open"),
        1,
        "the user's DM, resolved first"
    );
    let queries = app.slack.lookup_queries();
    assert_eq!(queries.len(), 1);
    assert_eq!(
        queries[0]["channel"], "DU0777",
        "looked in the DM, not at the user id"
    );
    assert_eq!(app.slack.posted().len(), 1);
}

#[tokio::test]
async fn an_event_that_names_neither_the_app_nor_its_bot_user_never_takes_a_message_for_its_own() {
    let app = ambiguous_first_post(true).await;
    let mut body: serde_json::Value = serde_json::from_str(&app_mention("EvNoApp", "x")).unwrap();
    body.as_object_mut().unwrap().remove("api_app_id");
    body.as_object_mut().unwrap().remove("authorizations");
    let body = body.to_string();
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(
        (retry.status, retry.json()["error"].as_str()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Some("slack_lookup_unavailable")
        ),
        "it cannot tell its messages from others': held back, {}",
        retry.body
    );
    assert_eq!(app.slack.posted().len(), 1);
}

// ---------------------------------------------------------------- one message, several listeners

/// A channel message that mentions the bot and says ship, as the `app_mention` (`mention`)
/// or the `message.channels` event, each with its own event id.
fn triage_events(ts: &str) -> (String, String) {
    let text = format!("<@{BOT_USER}> please ship it");
    let event = |kind: &str, id: &str| {
        let mut event = serde_json::json!({
            "type": kind, "user": "U0001", "text": text, "ts": ts, "channel": "C0001",
            "event_ts": ts, "client_msg_id": format!("cmid-{ts}")
        });
        if kind == "message" {
            event["channel_type"] = "channel".into();
        }
        serde_json::json!({
            "token": "unused", "team_id": TEAM, "api_app_id": APP_ID, "type": "event_callback",
            "event_id": id, "event_time": 1_700_000_000, "event": event,
            "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": true}]
        })
        .to_string()
    };
    (
        event("app_mention", &format!("EvTriageM{}", ts.replace('.', ""))),
        event("message", &format!("EvTriageC{}", ts.replace('.', ""))),
    )
}

fn triage_done(slack: &SlackStandin, ts: &str) -> (usize, usize) {
    let replies = slack
        .posted()
        .iter()
        .filter(|p| p.body["thread_ts"] == ts && p.body["text"] == "On it.")
        .count();
    let rockets = slack
        .reactions()
        .iter()
        .filter(|(c, t, n)| c == "C0001" && t == ts && n == "rocket")
        .count();
    (replies, rockets)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_triage_example_answers_and_reacts_once_whichever_event_comes_first_with_copies() {
    let slack = SlackStandin::start().await;
    let bot = BotProcess::spawn_example(
        "triage",
        &[],
        &[
            ("SLACK_BOT_TOKEN", TOKEN.to_string()),
            ("SLACK_API_URL", slack.base_url.clone()),
        ],
    );
    let http = HttpClient::default();
    let url = bot.url();
    for (n, mention_first) in [true, false].into_iter().enumerate() {
        let ts = format!("1600000{n}00.000100");
        let (mention, message) = triage_events(&ts);
        let (first, second) = if mention_first {
            (&mention, &message)
        } else {
            (&message, &mention)
        };
        let a = deliver(&http, &url, first, None).await;
        assert_eq!(a.outcome(), "answered", "{}", a.body);
        let b = deliver(&http, &url, second, None).await;
        assert_eq!(
            b.outcome(),
            "duplicate",
            "the other event of the message: {}",
            b.body
        );
        for retry in 1..=3 {
            for body in [first, second] {
                let copy = deliver(&http, &url, body, Some(retry)).await;
                assert_eq!(copy.outcome(), "duplicate", "{}", copy.body);
            }
        }
        assert_eq!(
            triage_done(&slack, &ts),
            (1, 1),
            "mention first: {mention_first}: one \"On it.\" and one :rocket:"
        );
    }
    // Both events at once, each with copies: still one of each.
    let ts = "1600000900.000100";
    let (mention, message) = triage_events(ts);
    let mut tasks = Vec::new();
    for body in [&mention, &message, &mention, &message] {
        let (http, url, body) = (http.clone(), url.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            deliver(&http, &url, &body, None).await.status
        }));
    }
    for t in tasks {
        let status = t.await.unwrap();
        assert!(matches!(status.as_u16(), 200 | 409), "{status}");
    }
    for body in [&mention, &message] {
        assert_eq!(
            deliver(&http, &url, body, Some(1)).await.outcome(),
            "duplicate"
        );
    }
    assert_eq!(triage_done(&slack, ts), (1, 1));
}

#[tokio::test]
async fn a_listener_that_opts_out_runs_per_event_without_rekeying_the_others() {
    let bot = App::new()
        .app_mention(|ctx: Ctx, _| async move {
            ctx.reply("On it.").await?;
            Ok(())
        })
        .listen(
            Listener::message_where(
                |_: &MessageEvent| true,
                |ctx: Ctx, m: MessageEvent| async move {
                    ctx.react(&m.channel, &m.ts, "eyes").await?;
                    ctx.post("C0LOG", format!("heard {}", ctx.event_id()))
                        .await?;
                    Ok(())
                },
            )
            .per_event_id(),
        );
    let app = spawn_bot(bot).await;
    let ts = "1600001000.000100";
    let (mention, message) = triage_events(ts);
    assert_eq!(app.send(&mention, None).await.outcome(), "answered");
    assert_eq!(
        app.send(&message, None).await.outcome(),
        "answered",
        "its own claim, per event"
    );
    for body in [&mention, &message] {
        assert_eq!(app.send(body, Some(1)).await.outcome(), "duplicate");
    }
    let posted = app.slack.posted();
    let on_it = posted.iter().filter(|p| p.body["text"] == "On it.").count();
    let logged = posted
        .iter()
        .filter(|p| p.body["channel"] == "C0LOG")
        .count();
    assert_eq!(
        (on_it, logged),
        (1, 2),
        "the mention's listener once per message, the other once per event"
    );
}

// ---------------------------------------------------------------- the journal stays small

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
                for n in 0..=slack_once::app::MAX_STEPS {
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
        made,
        slack_once::app::MAX_STEPS as usize,
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

// ---------------------------------------------------------------- writes elsewhere on a replay

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
        app.slack.script([Behaviour::Status(500)]);
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

// ---------------------------------------------------------------- other bots

fn bot_message(event_id: &str, app_id: &str) -> String {
    let ts = ts_of(event_id);
    serde_json::json!({
        "token": "unused", "team_id": TEAM, "api_app_id": APP_ID, "type": "event_callback",
        "event_id": event_id, "event_time": 1_700_000_000,
        "event": {"type": "message", "channel_type": "channel", "bot_id": "B0999", "app_id": app_id,
                  "user": "U0999BOT", "text": "deploy finished", "ts": ts, "channel": "C0001",
                  "event_ts": ts},
        "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": true}]
    })
    .to_string()
}

#[tokio::test]
async fn other_bots_messages_are_heard_only_by_listeners_that_ask_and_our_own_never() {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let record = |who: &'static str| {
        let heard = heard.clone();
        move |_ctx: Ctx, m: MessageEvent| {
            let heard = heard.clone();
            async move {
                heard.lock().unwrap().push((who, m.bot_id.clone()));
                Ok(())
            }
        }
    };
    let bot = App::new()
        .message_where(|_: &MessageEvent| true, record("people"))
        .listen(
            Listener::message_where(|_: &MessageEvent| true, record("bots too")).including_bots(),
        );
    let app = spawn_bot(bot).await;
    assert_eq!(
        app.send(&bot_message("EvOtherBot", "A0999"), None)
            .await
            .outcome(),
        "no_reply"
    );
    assert_eq!(
        *heard.lock().unwrap(),
        [("bots too", Some("B0999".to_string()))],
        "only the listener that asked heard another app's message"
    );
    assert_eq!(
        app.send(&bot_message("EvOurOwn", APP_ID), None)
            .await
            .outcome(),
        "skipped"
    );
    assert_eq!(
        heard.lock().unwrap().len(),
        1,
        "our own message is never heard"
    );
    // Only listeners that do not ask: another bot's message is no listener's, never claimed.
    let plain =
        spawn_bot(App::new().message_where(|_: &MessageEvent| true, record("people"))).await;
    assert_eq!(
        plain
            .send(&bot_message("EvOtherBot2", "A0999"), None)
            .await
            .outcome(),
        "no_listener"
    );
}
