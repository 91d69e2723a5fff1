//! The agent-view example (`examples/assistant.rs`) as processes against the Slack stand-in:
//! a DM answered with a plan of three tasks and an answer longer than a stream lives (its
//! parts switched sooner: `STREAM_PART_MS`), the session processing → active, one message per
//! part and every task once; the worker SIGKILLed mid-answer (DynamoDB Local, the SQS server)
//! and taken over, the same; stopped by the person, nothing written after the stop; a
//! feedback click heard once; the Messages tab's prompts.

use std::time::Duration;

use serde_json::{Value, json};

use crate::agent::{check_answer, expected, parts_in, processing_then_active};
use crate::helpers::*;

/// A person's DM (its own thread root, in the agent view).
fn question(event_id: &str, text: &str) -> String {
    envelope(
        event_id,
        json!({"type": "message", "channel_type": "im", "user": "U0001", "text": text,
               "ts": ts_of(event_id), "channel": "D0001", "event_ts": ts_of(event_id)}),
    )
}

fn envelope(event_id: &str, event: Value) -> String {
    json!({
        "token": "unused", "team_id": TEAM, "api_app_id": APP_ID, "type": "event_callback",
        "event_id": event_id, "event_time": now_unix(), "event": event,
        "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": true}]
    })
    .to_string()
}

/// A click on the feedback buttons under `answer`, as Slack posts it.
fn feedback_click(slack: &SlackStandin, answer: &Value, positive: bool) -> String {
    let channel = answer["channel"].as_str().unwrap();
    let ts = answer["ts"].as_str().unwrap();
    let payload = json!({
        "type": "block_actions", "team": {"id": TEAM}, "user": {"id": "U0001", "team_id": TEAM},
        "api_app_id": APP_ID, "trigger_id": slack_once::testing::Workspace::trigger_id(),
        "actions": [{"type": "feedback_buttons", "action_id": "answer_feedback", "block_id": "fb",
                     "value": if positive { "positive" } else { "negative" },
                     "action_ts": format!("{}.000{}", now_unix(), u8::from(positive))}],
        "container": {"type": "message", "message_ts": ts, "channel_id": channel},
        "channel": {"id": channel}, "message": answer,
        "response_url": format!("{}/actions/{TEAM}/{channel}/{ts}/1", slack.origin()),
    });
    form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish()
}

fn model(words: usize, word_ms: u64, part_ms: u64) -> Vec<(&'static str, String)> {
    vec![
        ("MODEL_WORDS", words.to_string()),
        ("MODEL_WORD_MS", word_ms.to_string()),
        ("MODEL_TASK_MS", "5".to_string()),
        ("STREAM_PART_MS", part_ms.to_string()),
    ]
}

fn ours(slack: &SlackStandin) -> Vec<Value> {
    slack.with_workspace(|w| w.ours())
}

fn starts(slack: &SlackStandin) -> usize {
    slack.calls_of("chat.startStream")
}

/// The answer in `thread` is finished: some parts, none streaming, the last with its
/// feedback buttons.
fn finished(slack: &SlackStandin, thread: &str) -> bool {
    let parts = parts_in(&ours(slack), "D0001", thread);
    !parts.is_empty()
        && parts.iter().all(|p| p["streaming"] != true)
        && parts
            .last()
            .is_some_and(|p| p["blocks"].to_string().contains("feedback_buttons"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn a_dm_gets_a_plan_and_an_answer_in_parts_its_session_processing_then_active_and_one_feedback()
 {
    let slack = SlackStandin::start().await;
    let mut vars = model(100, 8, 300);
    vars.extend([
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
    ]);
    let bot = BotProcess::spawn_example("assistant", &[], &vars);
    let http = HttpClient::default();
    // The Messages tab opened: its suggested prompts, without a thread.
    let opened = envelope(
        "EvOpen1",
        json!({"type": "app_home_opened", "user": "U0001", "channel": "D0001",
               "tab": "messages", "event_ts": ts_of("EvOpen1")}),
    );
    assert_eq!(
        deliver(&http, &bot.url(), &opened, None).await.outcome(),
        "answered"
    );
    let prompts: Vec<_> = slack
        .assistant_calls()
        .into_iter()
        .filter(|(m, ..)| m == "assistant.threads.setSuggestedPrompts")
        .collect();
    assert_eq!(prompts.len(), 1);
    assert_eq!(prompts[0].2, "", "the Messages tab's: no thread");

    let thread = ts_of("EvAsk1");
    let asked = deliver(&http, &bot.url(), &question("EvAsk1", "why once"), None).await;
    assert_eq!(asked.outcome(), "answered", "{}", bot.log());
    let parts = parts_in(&ours(&slack), "D0001", &thread);
    assert!(parts.len() >= 2, "longer than a part: {parts:#?}");
    check_answer(
        &parts,
        &expected("why once", 100),
        &slack.with_workspace(|w| w.task_updates().clone()),
    );
    assert_eq!(starts(&slack), parts.len(), "a stream per part");
    let session = slack
        .with_workspace(|w| w.session("D0001", &thread))
        .unwrap();
    processing_then_active(&session);
    assert_eq!(session["title"], "why once");

    // Feedback: a click, Slack's retry of it, then the other button (acknowledged empty).
    let last = parts.last().unwrap();
    let up = feedback_click(&slack, last, true);
    let down = feedback_click(&slack, last, false);
    for (form, retry) in [(&up, None), (&up, Some(1)), (&down, None)] {
        let acked = deliver_form(&http, &bot.url(), form, retry).await;
        assert_eq!(acked.status, http::StatusCode::OK, "{}", acked.body);
    }
    let log = bot
        .log_when(Duration::from_secs(10), |l| {
            l.matches("outcome=\"answered\"").count() >= 4
        })
        .await;
    assert_eq!(log.matches("outcome=\"duplicate\"").count(), 1, "{log}");
    assert_eq!(slack.ephemerals().len(), 2, "one thanks per click");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn killed_mid_answer_the_takeover_finishes_the_same_parts_and_every_task_once() {
    let stack = DeferredStack::start(5).await;
    let ingress = BotProcess::spawn_example("assistant", &[], &stack.ingress_vars());
    let worker = || {
        let mut vars = stack.worker_vars(3, 5);
        vars.extend(model(150, 10, 400));
        BotProcess::spawn_example("assistant", &["worker"], &vars)
    };
    let mut a = worker();
    let http = HttpClient::default();
    let thread = ts_of("EvKill1");
    let sent = deliver(&http, &ingress.url(), &question("EvKill1", "kill me"), None).await;
    assert_eq!(sent.outcome(), "queued");
    // Killed once the answer's second part streams.
    assert!(
        eventually(Duration::from_secs(20), || starts(&stack.slack) >= 2).await,
        "a second part:\n{}",
        a.log()
    );
    a.kill();
    let b = worker();
    assert!(
        eventually(Duration::from_secs(40), || finished(&stack.slack, &thread)).await,
        "finished: {:#?}\n{}",
        parts_in(&ours(&stack.slack), "D0001", &thread),
        b.log()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let parts = parts_in(&ours(&stack.slack), "D0001", &thread);
    check_answer(
        &parts,
        &expected("kill me", 150),
        &stack.slack.with_workspace(|w| w.task_updates().clone()),
    );
    assert_eq!(
        starts(&stack.slack),
        parts.len(),
        "never a part started twice: every stream is a part"
    );
    let session = stack
        .slack
        .with_workspace(|w| w.session("D0001", &thread))
        .unwrap();
    processing_then_active(&session);
    let work =
        a.log().matches("model: working").count() + b.log().matches("model: working").count();
    assert!(
        work <= 4,
        "each task's work done once, the one in flight at most again: {work}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn killed_mid_answer_a_short_answer_taken_over_is_one_message_as_without_the_kill() {
    // Deferred mode, a lease of 8 s, an answer of about 4 s (100 words, one every 40 ms):
    // one part's worth. The worker is SIGKILLed while the answer streams; the takeover
    // finishes it in the same message.
    let stack = DeferredStack::start(5).await;
    let ingress = BotProcess::spawn_example("assistant", &[], &stack.ingress_vars());
    let worker = || {
        let mut vars = stack.worker_vars(8, 5);
        vars.extend(model(100, 40, 240_000));
        BotProcess::spawn_example("assistant", &["worker"], &vars)
    };
    let mut a = worker();
    let http = HttpClient::default();
    let thread = ts_of("EvShort1");
    let sent = deliver(&http, &ingress.url(), &question("EvShort1", "short"), None).await;
    assert_eq!(sent.outcome(), "queued");
    // Killed while the answer streams (its first 256 characters shown, about half of it).
    assert!(
        eventually(Duration::from_secs(20), || {
            ours(&stack.slack).iter().any(|m| {
                m["streaming"] == true && m["text"].as_str().is_some_and(|t| t.contains(" w40"))
            })
        })
        .await,
        "the answer streams:\n{}",
        a.log()
    );
    assert!(!finished(&stack.slack, &thread), "killed mid-answer");
    a.kill();
    let b = worker();
    assert!(
        eventually(Duration::from_secs(40), || finished(&stack.slack, &thread)).await,
        "finished: {:#?}\n{}",
        parts_in(&ours(&stack.slack), "D0001", &thread),
        b.log()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let parts = parts_in(&ours(&stack.slack), "D0001", &thread);
    assert_eq!(
        parts.len(),
        1,
        "one message of the app in the question's thread, as without the kill: {parts:#?}"
    );
    check_answer(
        &parts,
        &expected("short", 100),
        &stack.slack.with_workspace(|w| w.task_updates().clone()),
    );
    assert_eq!(
        starts(&stack.slack),
        1,
        "one stream, the crashed run's, finished"
    );
    let session = stack
        .slack
        .with_workspace(|w| w.session("D0001", &thread))
        .unwrap();
    processing_then_active(&session);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn stopped_by_the_person_nothing_is_written_after_the_stop() {
    let slack = SlackStandin::start().await;
    let mut vars = model(2000, 2, 240_000);
    vars.extend([
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
    ]);
    let bot = BotProcess::spawn_example("assistant", &[], &vars);
    let http = HttpClient::default();
    let thread = ts_of("EvStop1");
    let ask = {
        let (http, url) = (http.clone(), bot.url());
        tokio::spawn(
            async move { deliver(&http, &url, &question("EvStop1", "stop me"), None).await },
        )
    };
    assert!(
        eventually(Duration::from_secs(20), || {
            ours(&slack).iter().any(|m| {
                m["streaming"] == true && m["text"].as_str().is_some_and(|t| t.len() > 300)
            })
        })
        .await,
        "the answer streams:\n{}",
        bot.log()
    );
    let stop = slack.with_workspace(|w| w.stop_session("D0001", &thread, "U0001"));
    let at_stop = slack.calls().len();
    let shown = ours(&slack);
    let stopped = deliver(&http, &bot.url(), &envelope("EvStop2", stop), None).await;
    assert_eq!(stopped.outcome(), "answered", "{}", bot.log());
    let asked = ask.await.unwrap();
    assert_eq!(asked.outcome(), "answered", "{}", bot.log());
    let after: Vec<(String, Value)> = slack.calls()[at_stop..].to_vec();
    let writes: Vec<&(String, Value)> = after
        .iter()
        .filter(|(m, _)| m.starts_with("chat."))
        .collect();
    assert!(
        writes.len() <= 1 && writes.iter().all(|(m, _)| m == "chat.appendStream"),
        "at most the append on its way, refused; nothing stopped, updated or started: {writes:#?}"
    );
    assert_eq!(ours(&slack), shown, "the answer as the stop left it");
    let session = slack
        .with_workspace(|w| w.session("D0001", &thread))
        .unwrap();
    assert_eq!(session["status"], "active", "{session}");
}

#[test]
#[ignore = "needs the built binary"]
fn the_example_s_checked_in_manifest_is_the_one_its_code_needs() {
    let binary = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("examples").join("assistant"))
        .unwrap();
    let out = std::process::Command::new(binary)
        .args(["manifest", "--check"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/assistant-manifest.json"
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/assistant-manifest.json"
        ))
        .unwrap(),
    )
    .unwrap();
    assert!(
        manifest["features"]["agent_view"].is_object(),
        "an agent-view app"
    );
    let events = manifest["settings"]["event_subscriptions"]["bot_events"].to_string();
    for event in [
        "app_home_opened",
        "app_context_changed",
        "agent_session_stopped",
        "message.im",
    ] {
        assert!(events.contains(event), "{event} in {events}");
    }
    assert!(!events.contains("assistant_thread_started"), "{events}");
}

/// The example against `slack-once standin` (what the guide's manual steps run on): a plan of
/// three tasks and an answer in parts, the session processing → active, every task once; then
/// another question stopped through `/_standin/stop`, nothing written after the stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn against_slack_once_standin_an_answer_in_parts_and_a_stop() {
    let standin = crate::helpers::StandinProcess::start().await;
    let mut vars = model(60, 20, 400);
    vars.extend([
        ("SLACK_BOT_TOKEN", "xoxb-local".to_string()),
        ("SLACK_API_URL", standin.base_url.clone()),
    ]);
    let bot = BotProcess::spawn_example("assistant", &[], &vars);
    let http = HttpClient::default();
    let ask = |id: &str, text: &str| {
        json!({
            "token": "unused", "team_id": "T0TEST", "api_app_id": "A0TEST", "type": "event_callback",
            "event_id": id, "event_time": now_unix(),
            "event": {"type": "message", "channel_type": "im", "user": "U0001", "text": text,
                      "ts": ts_of(id), "channel": "D0001", "event_ts": ts_of(id)},
            "authorizations": [{"team_id": "T0TEST", "user_id": "U0BOT", "is_bot": true}]
        })
        .to_string()
    };
    let asked = deliver(&http, &bot.url(), &ask("EvPy1", "why once"), None).await;
    assert_eq!(asked.outcome(), "answered", "{}", bot.log());
    let state = standin.state().await;
    let thread = ts_of("EvPy1");
    let parts: Vec<Value> = state["messages"]["D0001"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["bot_id"].is_string() && m["thread_ts"] == thread.as_str())
        .cloned()
        .collect();
    let updates: std::collections::HashMap<(String, String, String), Vec<String>> =
        state["task_updates"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| {
                let mut it = k.split(' ').map(str::to_string);
                let key = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
                let statuses = v
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap().to_string())
                    .collect();
                (key, statuses)
            })
            .collect();
    assert!(parts.len() >= 2, "longer than a part: {parts:#?}");
    check_answer(&parts, &expected("why once", 60), &updates);
    let session = state["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["thread_ts"] == thread.as_str())
        .cloned()
        .unwrap();
    processing_then_active(&session);

    // A long answer to another question, stopped while it streams.
    drop(bot);
    let mut vars = model(3000, 2, 240_000);
    vars.extend([
        ("SLACK_BOT_TOKEN", "xoxb-local".to_string()),
        ("SLACK_API_URL", standin.base_url.clone()),
    ]);
    let bot = BotProcess::spawn_example("assistant", &[], &vars);
    let thread = ts_of("EvPy2");
    let question = {
        let (http, url, body) = (http.clone(), bot.url(), ask("EvPy2", "stop me"));
        tokio::spawn(async move { deliver(&http, &url, &body, None).await })
    };
    let mut streaming = false;
    for _ in 0..200 {
        let state = standin.state().await;
        streaming = state["messages"]["D0001"].as_array().is_some_and(|ms| {
            ms.iter().any(|m| {
                m["streaming"] == true
                    && m["thread_ts"] == thread.as_str()
                    && m["text"].as_str().is_some_and(|t| t.len() > 300)
            })
        });
        if streaming {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(streaming, "the answer streams:\n{}", bot.log());
    let stop = standin
        .post(
            "stop",
            json!({"channel": "D0001", "thread_ts": thread, "user": "U0001"}),
        )
        .await;
    let calls_at_stop = standin.state().await["calls"].as_array().unwrap().len();
    let shown = standin.state().await["messages"]["D0001"].clone();
    let stopped = deliver(
        &http,
        &bot.url(),
        &json!({"token": "unused", "team_id": "T0TEST", "api_app_id": "A0TEST",
                "type": "event_callback", "event_id": "EvPyStop", "event_time": now_unix(),
                "event": stop["event"],
                "authorizations": [{"team_id": "T0TEST", "user_id": "U0BOT", "is_bot": true}]})
        .to_string(),
        None,
    )
    .await;
    assert_eq!(stopped.outcome(), "answered", "{}", bot.log());
    assert_eq!(
        question.await.unwrap().outcome(),
        "answered",
        "{}",
        bot.log()
    );
    let state = standin.state().await;
    let after: Vec<&Value> = state["calls"].as_array().unwrap()[calls_at_stop..]
        .iter()
        .filter(|c| c["method"].as_str().is_some_and(|m| m.starts_with("chat.")))
        .collect();
    assert!(
        after.len() <= 1 && after.iter().all(|c| c["method"] == "chat.appendStream"),
        "nothing but the append on its way after the stop: {after:#?}"
    );
    assert_eq!(
        state["messages"]["D0001"], shown,
        "the answer as the stop left it"
    );
}
