//! Message identity: which events are one message (listeners of two event types, one that
//! opts out), and which messages are the bot's own (its bot user, other bots' messages).

use std::sync::{Arc, Mutex};

use slack_once::app::{App, Ctx, Listener, MessageEvent};

use crate::helpers::*;

#[tokio::test]
async fn the_bot_user_is_the_authorization_marked_is_bot_not_the_first() {
    let app = spawn_app().await;
    let envelope = |id: &str, user: &str| {
        serde_json::json!({
            "type": "event_callback", "team_id": "T0001", "event_id": id,
            "event": {"type": "message", "channel_type": "im", "user": user, "text": "hi",
                      "ts": "1700000000.000300", "channel": "D0001"},
            "authorizations": [
                {"team_id": "T0001", "user_id": "U0001", "is_bot": false},
                {"team_id": "T0001", "user_id": BOT_USER, "is_bot": true}
            ]
        })
        .to_string()
    };
    assert_eq!(
        app.send(&envelope("EvHuman", "U0001"), None)
            .await
            .outcome(),
        "answered",
        "a person whose authorization comes first is answered"
    );
    assert_eq!(
        app.send(&envelope("EvSelf", BOT_USER), None)
            .await
            .outcome(),
        "skipped",
        "the bot's own message is not"
    );
}

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
#[ignore = "needs the built binary"]
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
