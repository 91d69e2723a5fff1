//! Slack's agent view (2026), in process against `FakeSlack`: an answer longer than a stream
//! lives in one message per part, its plan once with every task once and never moved back,
//! the session processing then active; the stop button ends the answer (nothing written
//! after it, on any part); feedback clicks once each; what the person looks at
//! (`app_context_changed`, a message's `app_context`). The example as processes, killed
//! mid-answer, is in `agent_processes.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use slack_once::app::{
    AgentSessionStopped, App, Ctx, Error, Feedback, MessageEvent, SessionStatus, StreamOptions,
    Task, TaskDisplay, TaskStatus, feedback_buttons,
};
use slack_once::testing::{FakeSlack, TestBot};

const TASKS: [(&str, &str); 3] = [
    ("read", "Read the question"),
    ("search", "Look it up"),
    ("write", "Write the answer"),
];

/// The answer to `question` with `words` words, as the agent below writes it.
pub fn expected(question: &str, words: usize) -> String {
    let mut answer = format!("You asked: {question}.");
    for n in 1..=words {
        answer.push_str(&format!(" w{n}"));
    }
    answer
}

/// An agent: a session, a plan of three tasks, `words` words streamed one every `pause`,
/// parts switched after `part`, feedback buttons at the end.
pub fn agent(words: usize, pause: Duration, part: Duration, asked: Arc<AtomicUsize>) -> App {
    App::new()
        .assistant_message(move |ctx: Ctx, q: MessageEvent| {
            let asked = asked.clone();
            async move {
                let (channel, thread) = (q.channel.clone(), q.thread().to_string());
                ctx.set_session_status(
                    &channel,
                    Some(&thread),
                    SessionStatus::Processing,
                    Some("Q"),
                )
                .await?;
                let options = StreamOptions::new()
                    .tasks(TaskDisplay::Plan)
                    .rotate_after(part);
                let mut stream = ctx.stream_with(&channel, &thread, None, options).await?;
                stream.plan("Answering").await?;
                for (id, title) in TASKS {
                    stream
                        .task(Task::new(id, title, TaskStatus::InProgress))
                        .await?;
                    let found = ctx.remember(id, async { format!("{id} done") }).await?;
                    stream
                        .task(Task::new(id, title, TaskStatus::Complete).output(found))
                        .await?;
                }
                asked.fetch_add(1, Ordering::SeqCst);
                let mut text = format!("You asked: {}.", q.text);
                stream.append(&text).await;
                for n in 1..=words {
                    if stream.stopped() {
                        break;
                    }
                    tokio::time::sleep(pause).await;
                    let word = format!(" w{n}");
                    text.push_str(&word);
                    stream.append(&word).await;
                }
                let stopped = stream.stopped();
                let footer = vec![feedback_buttons("fb", "Good", "Bad")];
                stream.finish_answer(&text, footer).await?;
                if !stopped {
                    ctx.set_session_status(&channel, Some(&thread), SessionStatus::Active, None)
                        .await?;
                }
                Ok(())
            }
        })
        .agent_session_stopped(|ctx: Ctx, stop: AgentSessionStopped| async move {
            ctx.set_session_status(
                &stop.channel,
                stop.thread_ts.as_deref(),
                SessionStatus::Active,
                None,
            )
            .await?;
            Ok(())
        })
}

/// The bot's messages in `thread` of `channel`, oldest first.
pub fn parts_in(messages: &[Value], channel: &str, thread: &str) -> Vec<Value> {
    messages
        .iter()
        .filter(|m| m["channel"] == channel && m["thread_ts"] == thread && m["ts"] != thread)
        .cloned()
        .collect()
}

/// What an answer in parts must be, whatever ran or crashed: every part finished (not
/// streaming, marked as ours), their texts the answer in order without a gap or a repeat,
/// the plan once (at the top of the first) with each task once and complete, the feedback
/// under the last only; every task's updates in each stream forward only, none twice.
pub fn check_answer(
    parts: &[Value],
    answer: &str,
    task_updates: &std::collections::HashMap<(String, String, String), Vec<String>>,
) {
    assert!(!parts.is_empty(), "an answer");
    let joined: String = parts
        .iter()
        .map(|p| p["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        joined, answer,
        "the parts, in order, are the answer: {parts:#?}"
    );
    for (i, part) in parts.iter().enumerate() {
        assert_ne!(part["streaming"], true, "part {i} finished: {part}");
        assert!(
            part["metadata"]["event_payload"]["slack_once"].is_object(),
            "part {i} marked as ours: {part}"
        );
        let blocks = part["blocks"].as_array().cloned().unwrap_or_default();
        let plans: Vec<&Value> = blocks.iter().filter(|b| b["type"] == "plan").collect();
        if i == 0 {
            assert_eq!(plans.len(), 1, "the plan heads the first part: {part}");
            let ids: Vec<&str> = plans[0]["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["task_id"].as_str().unwrap())
                .collect();
            assert_eq!(ids, ["read", "search", "write"], "each task once");
            assert!(
                plans[0]["tasks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|t| t["status"] == "complete")
            );
        } else {
            assert!(plans.is_empty(), "one plan: {part}");
        }
        let feedback = part["blocks"].to_string().contains("feedback_buttons");
        assert_eq!(
            feedback,
            i + 1 == parts.len(),
            "feedback under the last: {part}"
        );
    }
    let order = ["pending", "in_progress", "complete", "error"];
    for ((_, ts, id), statuses) in task_updates {
        let ranks: Vec<usize> = statuses
            .iter()
            .map(|s| order.iter().position(|o| o == s).unwrap())
            .collect();
        assert!(
            ranks.windows(2).all(|w| w[0] < w[1]),
            "task {id} in stream {ts}: forward only, each status once: {statuses:?}"
        );
    }
}

fn session(slack: &FakeSlack, channel: &str, thread: &str) -> Value {
    slack
        .with_workspace(|w| w.session(channel, thread))
        .expect("a session")
}

fn task_updates(
    slack: &FakeSlack,
) -> std::collections::HashMap<(String, String, String), Vec<String>> {
    slack.with_workspace(|w| w.task_updates().clone())
}

/// The statuses a session went through end with `active`, with none `processing` after the
/// first `active`.
pub fn processing_then_active(session: &Value) {
    let statuses: Vec<&str> = session["statuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(statuses.first(), Some(&"processing"), "{statuses:?}");
    assert_eq!(session["status"], "active", "{statuses:?}");
    let first_active = statuses.iter().position(|s| *s == "active").unwrap();
    assert!(
        statuses[first_active..].iter().all(|s| *s == "active"),
        "never processing again once active: {statuses:?}"
    );
}

#[tokio::test]
async fn an_answer_longer_than_a_stream_lives_is_one_message_per_part_its_plan_and_tasks_once() {
    let asked = Arc::new(AtomicUsize::new(0));
    let bot = TestBot::start(agent(
        150,
        Duration::from_millis(4),
        Duration::from_millis(250),
        asked.clone(),
    ))
    .await;
    // Slack ends streams on its own too: a part may end before its switch.
    bot.slack().set_stream_expiry(Duration::from_millis(400));
    assert_eq!(bot.dm("why once").await, "answered");
    let thread = bot.slack().messages()[0]["thread_ts"]
        .as_str()
        .unwrap()
        .to_string();
    let parts = parts_in(&bot.slack().messages(), "D0TEST", &thread);
    assert!(
        parts.len() >= 2,
        "an answer longer than a part: {}",
        parts.len()
    );
    check_answer(
        &parts,
        &expected("why once", 150),
        &task_updates(bot.slack()),
    );
    let starts = bot
        .slack()
        .calls()
        .iter()
        .filter(|(m, _)| m == "chat.startStream")
        .count();
    assert_eq!(starts, parts.len(), "a stream per part, no orphan");
    processing_then_active(&session(bot.slack(), "D0TEST", &thread));
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    // A redelivery of the question writes nothing.
    let calls = bot.slack().call_count();
    assert_eq!(bot.retry(1).await, "duplicate");
    assert_eq!(bot.slack().call_count(), calls);
}

#[tokio::test]
async fn the_stop_button_ends_the_answer_and_nothing_is_written_after_it() {
    let asked = Arc::new(AtomicUsize::new(0));
    let bot = TestBot::start(agent(
        2000,
        Duration::from_millis(2),
        Duration::from_secs(240),
        asked,
    ))
    .await;
    let slack = bot.slack().clone();
    let stop = async {
        // Once the answer streams, the person presses stop.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let thread = loop {
            let streaming = slack.messages().into_iter().find(|m| {
                m["streaming"] == true && m["text"].as_str().is_some_and(|t| t.len() > 300)
            });
            if let Some(m) = streaming {
                break m["thread_ts"].as_str().unwrap().to_string();
            }
            assert!(tokio::time::Instant::now() < deadline, "a stream");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let outcome = bot.stop_session(&thread).await;
        (thread, outcome, slack.calls().len())
    };
    let (answered, (thread, stopped, calls_at_stop)) = tokio::join!(bot.dm("stop me"), stop);
    assert_eq!(answered, "answered");
    assert_eq!(stopped, "answered", "the stop's listener ran");
    let after: Vec<(String, Value)> = bot.slack().calls()[calls_at_stop..].to_vec();
    // At most the one append already on its way when the person pressed stop, which Slack
    // refused; then nothing but the stop's own status.
    let writes: Vec<&(String, Value)> = after
        .iter()
        .filter(|(m, _)| m.starts_with("chat."))
        .collect();
    assert!(
        writes.iter().all(|(m, _)| m == "chat.appendStream"),
        "nothing stopped, updated or started after the stop: {writes:#?}"
    );
    assert!(writes.len() <= 1, "{writes:#?}");
    let parts = parts_in(&bot.slack().messages(), "D0TEST", &thread);
    assert_eq!(parts.len(), 1);
    assert!(
        !parts[0]["blocks"].to_string().contains("feedback_buttons"),
        "the stopped answer is left as stopped"
    );
    let session = session(bot.slack(), "D0TEST", &thread);
    assert_eq!(session["status"], "active", "{session}");
}

#[tokio::test]
async fn a_stop_before_a_takeover_is_kept_the_takeover_writes_nothing_more() {
    // The stop reaches the ledger first (its note), then the question's run begins: it may
    // not start a part, update or set the session processing.
    let asked = Arc::new(AtomicUsize::new(0));
    let bot = TestBot::start(agent(
        50,
        Duration::from_millis(1),
        Duration::from_secs(240),
        asked,
    ))
    .await;
    // The thread the next DM starts (TestBot's next `ts`): stopped first.
    let thread = "1767225600.000001";
    let stopped = bot.stop_session(thread).await;
    assert_eq!(stopped, "answered");
    // A question older than the stop (its ts is before it): a redelivery after the stop.
    let outcome = bot
        .send(
            json!({"type": "message", "channel_type": "im", "user": "U0USER",
                     "text": "late", "channel": "D0TEST", "ts": thread, "event_ts": thread}),
        )
        .await;
    assert_eq!(outcome, "no_reply", "nothing written: not an answer");
    let session = session(bot.slack(), "D0TEST", thread);
    assert_eq!(
        session["statuses"],
        json!(["active"]),
        "never set processing after the stop: {session}"
    );
    let parts = parts_in(&bot.slack().messages(), "D0TEST", thread);
    assert!(parts.len() <= 1, "{parts:#?}");
}

#[tokio::test]
async fn feedback_clicks_reach_their_listener_once_each() {
    let heard = Arc::new(AtomicUsize::new(0));
    let counted = heard.clone();
    let app = App::new()
        .assistant_message(|ctx: Ctx, q: MessageEvent| async move {
            let mut stream = ctx.stream(&q.channel, q.thread(), None).await?;
            stream.append("Deploys run at 10:00.").await;
            let footer = vec![feedback_buttons("fb", "Good", "Bad")];
            stream
                .finish_answer("Deploys run at 10:00.", footer)
                .await?;
            Ok(())
        })
        .feedback("fb", move |ctx: Ctx, f: Feedback| {
            let counted = counted.clone();
            async move {
                let name = if f.positive { "up" } else { "down" };
                let n: u64 = ctx
                    .state()
                    .update(name, Duration::from_secs(3600), |n: Option<u64>| {
                        n.unwrap_or(0) + 1
                    })
                    .await?;
                counted.fetch_add(1, Ordering::SeqCst);
                ctx.respond(format!("{name} {n}")).await?;
                Ok(())
            }
        });
    let bot = TestBot::start(app).await;
    assert_eq!(bot.dm("when?").await, "answered");
    let answer = bot.slack().messages().pop().unwrap();
    let click = bot.feedback("fb", true, &answer).await;
    assert_eq!(click.outcome, "answered");
    // Slack's retry of the click, and a person's double click (a new action_ts).
    assert_eq!(bot.repeat().await.outcome, "duplicate");
    assert_eq!(bot.feedback("fb", true, &answer).await.outcome, "answered");
    assert_eq!(bot.feedback("fb", false, &answer).await.outcome, "answered");
    assert_eq!(heard.load(Ordering::SeqCst), 3, "once per click");
    let said: Vec<String> = bot
        .slack()
        .ephemerals()
        .iter()
        .map(|e| e["text"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(said, ["up 1", "up 2", "down 1"], "each click counted once");
}

#[tokio::test]
async fn a_task_never_moves_back_and_a_finished_one_never_changes() {
    let refused = Arc::new(AtomicBool::new(false));
    let seen = refused.clone();
    let app = App::new().assistant_message(move |ctx: Ctx, q: MessageEvent| {
        let seen = seen.clone();
        async move {
            let mut stream = ctx.stream(&q.channel, q.thread(), None).await?;
            stream
                .task(Task::new("t", "T", TaskStatus::InProgress))
                .await?;
            stream
                .task(Task::new("t", "T", TaskStatus::Complete))
                .await?;
            let back = stream
                .task(Task::new("t", "T", TaskStatus::InProgress))
                .await;
            seen.store(
                matches!(back, Err(Error::TaskMovedBack { .. })),
                Ordering::SeqCst,
            );
            stream.finish_answer("done", vec![]).await?;
            Ok(())
        }
    });
    let bot = TestBot::start(app).await;
    assert_eq!(bot.dm("go").await, "answered");
    assert!(
        refused.load(Ordering::SeqCst),
        "moving a task back is refused"
    );
    let updates = task_updates(bot.slack());
    let statuses: Vec<&Vec<String>> = updates.values().collect();
    assert_eq!(
        statuses,
        [&vec!["in_progress".to_string(), "complete".to_string()]]
    );
}

#[tokio::test]
async fn the_person_context_is_the_message_s_own_or_the_latest_change() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = seen.clone();
    let app = App::new()
        .assistant_message(move |ctx: Ctx, _q: MessageEvent| {
            let keep = keep.clone();
            async move {
                let here = ctx.app_context().await?;
                keep.lock()
                    .unwrap()
                    .push(here.and_then(|c| c.channel().map(str::to_string)));
                Ok(())
            }
        })
        .app_context_changed(|_ctx: Ctx, _c| async move { Ok(()) });
    let bot = TestBot::start(app).await;
    // The listener writes nothing: `no_reply`.
    assert_eq!(bot.dm("nothing seen yet").await, "no_reply");
    let change = |channel: &str, at: &str| {
        json!({"type": "app_context_changed", "channel": "D0TEST", "user": "U0USER",
               "event_ts": at,
               "context": {"entities": [{"type": "slack#/types/channel_id", "value": channel}]}})
    };
    assert_eq!(
        bot.send(change("C0NEW", "1767225700.000001")).await,
        "no_reply"
    );
    // An older change delivered late does not undo the newer.
    assert_eq!(
        bot.send(change("C0OLD", "1767225650.000001")).await,
        "no_reply"
    );
    assert_eq!(bot.dm("what am I looking at").await, "no_reply");
    let inline = json!({"type": "message", "channel_type": "im", "user": "U0USER", "text": "this",
        "channel": "D0TEST", "ts": "1767225800.000001", "event_ts": "1767225800.000001",
        "app_context": {"entities": [{"type": "slack#/types/message_context",
                        "value": {"channel_id": "C0MSG", "message_ts": "1.2"}}]}});
    assert_eq!(bot.send(inline).await, "no_reply");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [None, Some("C0NEW".to_string()), Some("C0MSG".to_string())]
    );
}

#[tokio::test]
async fn a_click_in_the_dm_reads_what_the_person_looks_at() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = seen.clone();
    let app = App::new()
        .assistant_message(|ctx: Ctx, q: MessageEvent| async move {
            ctx.reply(format!("About {}?", q.text)).await?;
            Ok(())
        })
        .app_context_changed(|_ctx: Ctx, _c| async move { Ok(()) })
        .action(
            "more",
            move |ctx: Ctx, _click: slack_once::app::BlockAction| {
                let keep = keep.clone();
                async move {
                    let here = ctx.app_context().await?;
                    keep.lock()
                        .unwrap()
                        .push(here.and_then(|c| c.channel().map(str::to_string)));
                    Ok(())
                }
            },
        );
    let bot = TestBot::start(app).await;
    assert_eq!(bot.dm("deploys").await, "answered");
    // Slack's documented example names neither the DM nor the person in the event: the
    // change is the person's the event is authorized for.
    let change = json!({"token": "unused", "team_id": "T0TEST", "api_app_id": "A0TEST",
        "type": "event_callback", "event_id": "EvCTX1", "event_time": 1_767_225_700,
        "event": {"type": "app_context_changed",
                  "context": {"entities": [{"type": "slack#/types/channel_id", "value": "C0DOC"}]}},
        "authorizations": [{"team_id": "T0TEST", "user_id": "U0USER", "is_bot": false}]});
    assert_eq!(bot.send_envelope(change).await, "no_reply");
    let answer = bot.slack().messages().pop().unwrap();
    let click = bot
        .as_user("U0USER")
        .in_channel("D0TEST")
        .click("more", "", Some(&answer))
        .await;
    assert_eq!(click.outcome, "no_reply");
    assert_eq!(*seen.lock().unwrap(), [Some("C0DOC".to_string())]);
}
