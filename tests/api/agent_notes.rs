//! An agent's notes beside the claims (what a person looks at, a stop) are its app's, and a
//! stop names what it stops: two apps whose deployments share one table (DynamoDB Local)
//! never read each other's context or stop; in a thread where two answers stream, a stop
//! pressed on one stream stops that answer only; notes the previous release kept (under keys
//! without the app) are still read while a deploy overlaps.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use slack_once::app::{
    AgentSessionStopped, App, AssistantThread, Ctx, MessageEvent, feedback_buttons,
};
use slack_once::ledger::{Ledger, MemoryLedger};
use slack_once::slack::envelope::EventId;
use slack_once::testing::{FakeSlack, TestBot};

use crate::agent::{agent, expected, parts_in};
use crate::helpers::{dynamodb_endpoint, fresh_table};

const APP_A: &str = "A0000APPA";
const APP_B: &str = "A0000APPB";

/// `event` in an envelope of the app `app`.
fn envelope(app: &str, event_id: &str, event: Value) -> Value {
    json!({"token": "unused", "team_id": "T0TEST", "api_app_id": app, "type": "event_callback",
           "event_id": event_id, "event_time": 1_767_225_700, "event": event,
           "authorizations": [{"team_id": "T0TEST", "user_id": "U0BOT", "is_bot": true}]})
}

/// An agent that says which channel the person looks at ([`Ctx::app_context`]), as `seen`.
fn looking(seen: Arc<Mutex<Vec<Option<String>>>>) -> App {
    App::new()
        .assistant_message(move |ctx: Ctx, _q: MessageEvent| {
            let seen = seen.clone();
            async move {
                let here = ctx.app_context().await?;
                let channel = here.and_then(|c| c.channel().map(str::to_string));
                seen.lock().unwrap().push(channel);
                Ok(())
            }
        })
        .app_context_changed(|_ctx: Ctx, _c| async move { Ok(()) })
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn two_apps_on_one_table_each_read_their_own_person_s_context() {
    let (_table, ledger) = fresh_table(&dynamodb_endpoint()).await;
    let (seen_a, seen_b) = (Arc::default(), Arc::default());
    let a = TestBot::start_with_ledger(looking(Arc::clone(&seen_a)), ledger.clone()).await;
    let b = TestBot::start_with_ledger(looking(Arc::clone(&seen_b)), ledger.clone()).await;
    // Slack's documented change names neither the DM nor the person: it is kept as the
    // person's the event is authorized for, the same person for both apps.
    let change = |app: &str, id: &str, channel: &str, at: &str| {
        let mut sent = envelope(
            app,
            id,
            json!({"type": "app_context_changed", "event_ts": at, "context": {"entities":
                    [{"type": "slack#/types/channel_id", "value": channel}]}}),
        );
        sent["authorizations"] = json!([{"team_id": "T0TEST", "user_id": "U0USER",
                                         "is_bot": false}]);
        sent
    };
    let changed = change(APP_A, "EvCtxA", "C0AAA", "1767225700.000001");
    assert_eq!(a.send_envelope(changed).await, "no_reply");
    // The other app's change, later: it must not become this app's.
    let changed = change(APP_B, "EvCtxB", "C0BBB", "1767225701.000001");
    assert_eq!(b.send_envelope(changed).await, "no_reply");
    for (bot, app, dm) in [(&a, APP_A, "D0AAA"), (&b, APP_B, "D0BBB")] {
        let ask = json!({"type": "message", "channel_type": "im", "user": "U0USER",
                         "text": "where am I", "channel": dm, "ts": "1767225710.000001",
                         "event_ts": "1767225710.000001"});
        let asked = envelope(app, &format!("EvAsk{app}"), ask);
        assert_eq!(bot.send_envelope(asked).await, "no_reply");
    }
    assert_eq!(*seen_a.lock().unwrap(), [Some("C0AAA".to_string())]);
    assert_eq!(*seen_b.lock().unwrap(), [Some("C0BBB".to_string())]);
}

/// An assistant that says which channel the person looks at in its thread
/// ([`Ctx::thread_context`]), as `seen`.
fn thread_looking(seen: Arc<Mutex<Vec<Option<String>>>>) -> App {
    App::new()
        .assistant_thread_started(|_ctx: Ctx, _t: AssistantThread| async { Ok(()) })
        .assistant_message(move |ctx: Ctx, _q: MessageEvent| {
            let seen = seen.clone();
            async move {
                let here = ctx.thread_context().await?;
                let channel = here.and_then(|c| c["channel_id"].as_str().map(str::to_string));
                seen.lock().unwrap().push(channel);
                Ok(())
            }
        })
}

/// `assistant_thread_started` of the thread `thread` in `dm`, the person looking at `channel`.
fn thread_started(app: &str, id: &str, dm: &str, thread: &str, channel: &str) -> Value {
    let started = json!({"type": "assistant_thread_started", "event_ts": "1767225700.000001",
                         "assistant_thread": {"user_id": "U0USER", "channel_id": dm,
                                              "thread_ts": thread,
                                              "context": {"channel_id": channel,
                                                          "team_id": "T0TEST"}}});
    envelope(app, id, started)
}

/// A person's question in the assistant thread `thread` of `dm`.
fn in_thread(app: &str, id: &str, dm: &str, thread: &str) -> Value {
    let ask = json!({"type": "message", "channel_type": "im", "user": "U0USER",
                     "text": "where am I", "channel": dm, "ts": "1767225710.000001",
                     "thread_ts": thread, "event_ts": "1767225710.000001"});
    envelope(app, id, ask)
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn two_apps_on_one_table_each_read_their_own_assistant_thread_s_context() {
    let (_table, ledger) = fresh_table(&dynamodb_endpoint()).await;
    let (seen_a, seen_b) = (Arc::default(), Arc::default());
    let a = TestBot::start_with_ledger(thread_looking(Arc::clone(&seen_a)), ledger.clone()).await;
    let b = TestBot::start_with_ledger(thread_looking(Arc::clone(&seen_b)), ledger.clone()).await;
    // One conversation and thread for both apps: the other app's start comes later.
    let (dm, thread) = ("D0SHARED", "1767225600.000001");
    let started = thread_started(APP_A, "EvStartA", dm, thread, "C0AAA");
    assert_eq!(a.send_envelope(started).await, "no_reply");
    let started = thread_started(APP_B, "EvStartB", dm, thread, "C0BBB");
    assert_eq!(b.send_envelope(started).await, "no_reply");
    assert_eq!(
        a.send_envelope(in_thread(APP_A, "EvAskA", dm, thread))
            .await,
        "no_reply"
    );
    assert_eq!(
        b.send_envelope(in_thread(APP_B, "EvAskB", dm, thread))
            .await,
        "no_reply"
    );
    assert_eq!(*seen_a.lock().unwrap(), [Some("C0AAA".to_string())]);
    assert_eq!(*seen_b.lock().unwrap(), [Some("C0BBB".to_string())]);
}

/// An agent answering any person's message in its thread, streamed (`words` words, one
/// every `pause`), with feedback buttons at the end unless stopped.
fn streamer(words: usize, pause: Duration) -> App {
    App::new()
        .message_where(
            |m: &MessageEvent| !m.is_from_bot(),
            move |ctx: Ctx, q: MessageEvent| async move {
                let recipient = q.user.as_deref().zip(ctx.team());
                let mut stream = ctx.stream(&q.channel, q.thread(), recipient).await?;
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
                let footer = vec![feedback_buttons("fb", "Good", "Bad")];
                stream.finish_answer(&text, footer).await?;
                Ok(())
            },
        )
        .agent_session_stopped(|_ctx: Ctx, _stop: AgentSessionStopped| async move { Ok(()) })
}

/// The app's answer in `thread` is finished whole: not streaming, its feedback buttons under
/// `answer`.
fn answered_whole(slack: &FakeSlack, channel: &str, thread: &str, answer: &str) {
    let parts = parts_in(&slack.messages(), channel, thread);
    assert_eq!(parts.len(), 1, "{parts:#?}");
    assert_eq!(parts[0]["text"], answer, "{:#}", parts[0]);
    assert_ne!(parts[0]["streaming"], true);
    assert!(
        parts[0]["blocks"].to_string().contains("feedback_buttons"),
        "finished, not stopped: {:#}",
        parts[0]
    );
}

/// Waits until `n` of the app's messages stream in `thread`, each showing some text; their
/// `ts`, oldest first.
async fn streaming(slack: &FakeSlack, channel: &str, thread: &str, n: usize) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let shown: Vec<String> = parts_in(&slack.messages(), channel, thread)
            .into_iter()
            .filter(|m| m["streaming"] == true && m["text"].as_str().is_some_and(|t| t.len() > 40))
            .map(|m| m["ts"].as_str().unwrap().to_string())
            .collect();
        if shown.len() >= n {
            let mut shown = shown;
            shown.sort();
            return shown;
        }
        assert!(tokio::time::Instant::now() < deadline, "{n} streams");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn another_app_s_stop_in_the_same_thread_never_stops_this_app_s_answer() {
    let (_table, ledger) = fresh_table(&dynamodb_endpoint()).await;
    // Appends are sent by 256 characters: some are shown well before the end.
    let a =
        TestBot::start_with_ledger(streamer(200, Duration::from_millis(10)), ledger.clone()).await;
    let b =
        TestBot::start_with_ledger(streamer(200, Duration::from_millis(10)), ledger.clone()).await;
    let (channel, thread) = ("C0SHARED", "1767225710.000001");
    let ask = json!({"type": "message", "channel_type": "channel", "user": "U0USER",
                     "text": "both of you", "channel": channel, "ts": thread,
                     "event_ts": thread});
    let press = async {
        streaming(a.slack(), channel, thread, 1).await;
        // The other app's session in the same thread is stopped (no stream of its own
        // active: Slack names none), after this app's question.
        let stop = json!({"type": "agent_session_stopped", "channel": channel,
                          "user": "U0USER", "thread_ts": thread, "streaming_message_ts": [],
                          "event_ts": "1767225720.000001"});
        b.send_envelope(envelope(APP_B, "EvStopB", stop)).await
    };
    let (answered, stopped) = tokio::join!(a.send_envelope(envelope(APP_A, "EvAskA", ask)), press);
    assert_eq!(stopped, "no_reply", "the other app heard its stop");
    assert_eq!(answered, "answered");
    answered_whole(a.slack(), channel, thread, &expected("both of you", 200));
}

/// Two questions in one DM thread, both answering; the person presses stop on the stream of
/// the first (`stop_first`) or of the second: that answer is stopped, the other finishes.
async fn two_answers_one_stopped(stop_first: bool) {
    let bot = TestBot::start(agent(
        300,
        Duration::from_millis(4),
        Duration::from_secs(240),
        Arc::new(AtomicUsize::new(0)),
    ))
    .await;
    let slack = bot.slack().clone();
    let (first, second) = ("1767225600.000101", "1767225601.000101");
    let ask = |text: &str, ts: &str| {
        json!({"type": "message", "channel_type": "im", "user": "U0USER", "text": text,
               "channel": "D0TEST", "ts": ts, "thread_ts": first, "event_ts": ts})
    };
    let mut first_ask = ask("first", first);
    first_ask.as_object_mut().unwrap().remove("thread_ts");
    let ask_second = async {
        streaming(&slack, "D0TEST", first, 1).await;
        bot.send(ask("second", second)).await
    };
    let press = async {
        let streams = streaming(&slack, "D0TEST", first, 2).await;
        let pressed = if stop_first { &streams[0] } else { &streams[1] };
        let stop = slack.with_workspace(|w| w.stop_stream("D0TEST", first, pressed, "U0USER"));
        assert_eq!(stop["streaming_message_ts"], json!([pressed]));
        (pressed.clone(), bot.send(stop).await)
    };
    let (one, two, (pressed, stopped)) = tokio::join!(bot.send(first_ask), ask_second, press);
    assert_eq!((one.as_str(), two.as_str()), ("answered", "answered"));
    assert_eq!(stopped, "answered", "the stop's listener ran");
    let parts = parts_in(&slack.messages(), "D0TEST", first);
    assert_eq!(parts.len(), 2, "{parts:#?}");
    let (stopped_one, going_on) = if stop_first {
        (&parts[0], (&parts[1], "second"))
    } else {
        (&parts[1], (&parts[0], "first"))
    };
    assert_eq!(stopped_one["ts"], pressed.as_str());
    assert!(
        !stopped_one["blocks"]
            .to_string()
            .contains("feedback_buttons"),
        "the stopped answer is left as stopped: {stopped_one:#}"
    );
    let (part, question) = going_on;
    assert_eq!(part["text"], expected(question, 300), "{part:#}");
    assert_ne!(part["streaming"], true);
    assert!(
        part["blocks"].to_string().contains("feedback_buttons"),
        "the answer not stopped is finished: {part:#}"
    );
}

#[tokio::test]
async fn a_stop_on_the_second_answer_s_stream_leaves_the_first_answering() {
    two_answers_one_stopped(false).await;
}

#[tokio::test]
async fn a_stop_on_the_first_answer_s_stream_leaves_the_second_answering() {
    two_answers_one_stopped(true).await;
}

#[tokio::test]
async fn notes_the_previous_release_kept_without_the_app_are_still_read() {
    // As the previous release kept them: under keys without the app.
    let ledger = Arc::new(MemoryLedger::new());
    let now_ms = slack_once::clock::now_ms();
    let expires_at_s = now_ms / 1000 + 3600;
    let thread = "1767225600.000077";
    let stop_key = EventId::try_from("astop-T0TEST-D0TEST-1767225600_000077".to_string()).unwrap();
    let stop = json!({"at_ms": now_ms, "value": "[]"}).to_string();
    ledger
        .set_note(&stop_key, &stop, now_ms, expires_at_s)
        .await
        .unwrap();
    let context_key = EventId::try_from("agctx-T0TEST-user-U0USER".to_string()).unwrap();
    let entities = json!({"entities": [{"type": "slack#/types/channel_id", "value": "C0OLD"}]});
    let context = json!({"at_ms": now_ms, "value": entities.to_string()}).to_string();
    ledger
        .set_note(&context_key, &context, now_ms, expires_at_s)
        .await
        .unwrap();

    let stopped = TestBot::start_with_ledger(
        agent(
            20,
            Duration::from_millis(1),
            Duration::from_secs(240),
            Arc::default(),
        ),
        ledger.clone(),
    )
    .await;
    // The question, older than the stop: nothing written.
    let late = json!({"type": "message", "channel_type": "im", "user": "U0USER", "text": "late",
                      "channel": "D0TEST", "ts": thread, "event_ts": thread});
    assert_eq!(stopped.send(late).await, "no_reply");
    assert!(parts_in(&stopped.slack().messages(), "D0TEST", thread).len() <= 1);

    let assistant_thread = "1767225600.000088";
    let thread_key = EventId::try_from("actx-T0TEST-D0TEST-1767225600_000088".to_string()).unwrap();
    let thread_context = json!({"channel_id": "C0OLDTHREAD", "team_id": "T0TEST"}).to_string();
    ledger
        .set_note(&thread_key, &thread_context, now_ms, expires_at_s)
        .await
        .unwrap();

    let seen = Arc::default();
    let bot = TestBot::start_with_ledger(looking(Arc::clone(&seen)), ledger.clone()).await;
    assert_eq!(bot.dm("where am I").await, "no_reply");
    assert_eq!(*seen.lock().unwrap(), [Some("C0OLD".to_string())]);

    let seen = Arc::default();
    let bot = TestBot::start_with_ledger(thread_looking(Arc::clone(&seen)), ledger).await;
    let asked = in_thread(
        slack_once::testing::APP_ID,
        "EvAskOld",
        "D0TEST",
        assistant_thread,
    );
    assert_eq!(bot.send_envelope(asked).await, "no_reply");
    assert_eq!(*seen.lock().unwrap(), [Some("C0OLDTHREAD".to_string())]);
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn two_stops_of_one_thread_kept_at_once_both_stand() {
    let (_table, ledger) = fresh_table(&dynamodb_endpoint()).await;
    // Two instances of one app, each hearing one of the two stops.
    let hearing =
        || App::new().agent_session_stopped(|_ctx: Ctx, _s: AgentSessionStopped| async { Ok(()) });
    let a = TestBot::start_with_ledger(hearing(), ledger.clone()).await;
    let b = TestBot::start_with_ledger(hearing(), ledger.clone()).await;
    let stop = |id: String, thread: &str, stream: &str| {
        let stop = json!({"type": "agent_session_stopped", "channel": "D0TEST",
                          "user": "U0USER", "thread_ts": thread,
                          "streaming_message_ts": [stream], "event_ts": stream});
        envelope(APP_A, &id, stop)
    };
    let mut lost = Vec::new();
    for round in 0..40 {
        let thread = format!("1767225600.{round:06}");
        let (first, second) = (
            format!("1767225601.{round:06}"),
            format!("1767225602.{round:06}"),
        );
        let (one, two) = tokio::join!(
            a.send_envelope(stop(format!("EvStopOne{round}"), &thread, &first)),
            b.send_envelope(stop(format!("EvStopTwo{round}"), &thread, &second)),
        );
        assert_eq!((one.as_str(), two.as_str()), ("no_reply", "no_reply"));
        let key = format!("astop-T0TEST-D0TEST-{}-{APP_A}", thread.replace('.', "_"));
        let now_ms = slack_once::clock::now_ms();
        let note = ledger
            .note(&EventId::try_from(key).unwrap(), now_ms)
            .await
            .unwrap()
            .expect("the thread's stops are kept");
        let kept: Value = serde_json::from_str(&note).unwrap();
        let streams = kept["streams"].as_array().unwrap();
        if !(streams.contains(&json!(first)) && streams.contains(&json!(second))) {
            lost.push(note);
        }
    }
    assert!(lost.is_empty(), "a stop's stream was dropped: {lost:#?}");
}
