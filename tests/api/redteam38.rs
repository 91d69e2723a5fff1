//! What a production review of the agent features (issue 38) found, each test failing on the
//! defect it is named after, in process against `FakeSlack`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;
use slack_once::app::{AgentSessionStopped, App, Ctx, MessageEvent};
use slack_once::testing::TestBot;

use crate::agent::parts_in;

/// A plain one-part answer streamed in several appends (outside `remember`, as
/// examples/assistant.rs streams), then `after` runs: on the first run it fails the listener
/// (a write of the app's own after the answer failing, a crash after the end's update: the
/// journal then ends with the end's `chat.stopStream` and `chat.update`).
fn one_part(runs: Arc<AtomicUsize>) -> App {
    App::new().assistant_message(move |ctx: Ctx, q: MessageEvent| {
        let runs = runs.clone();
        async move {
            let run = runs.fetch_add(1, Ordering::SeqCst);
            let (channel, thread) = (q.channel.clone(), q.thread().to_string());
            let mut stream = ctx.stream(&channel, &thread, None).await?;
            let mut text = String::new();
            for word in ["One", " answer", " in", " four", " appends."] {
                text.push_str(word);
                stream.append(word).await;
            }
            stream.finish_answer(&text, vec![]).await?;
            if run == 0 {
                // Anything after the answer that fails once (a DB write of the app's own, a
                // lost answer of a later step): the event is tried again.
                return Err("the app's own bookkeeping failed once".into());
            }
            Ok(())
        }
    })
}

/// F1. `Stream::due` takes the journal's records of the END of a one-part answer
/// (`chat.stopStream` of the part, `chat.update` of the part, nothing after) for a SWITCH:
/// a later run (the retry of a listener that failed after `finish_answer`, a takeover after a
/// crash during the end's update) "replays" a switch at its second append and starts a new
/// stream that the first run never started: the answer is two messages.
#[tokio::test]
async fn rt38_f1_a_replay_takes_the_end_of_a_one_part_answer_for_a_switch() {
    let runs = Arc::new(AtomicUsize::new(0));
    let bot = TestBot::start(one_part(runs.clone())).await;
    let first = bot.dm("one part please").await;
    eprintln!("[F1] first run: {first}");
    let thread = bot.slack().messages()[0]["thread_ts"]
        .as_str()
        .unwrap()
        .to_string();
    let before = parts_in(&bot.slack().messages(), "D0TEST", &thread);
    assert_eq!(before.len(), 1, "one part after the first run: {before:#?}");
    let again = bot.retry(1).await;
    eprintln!("[F1] retry: {again}");
    let after = parts_in(&bot.slack().messages(), "D0TEST", &thread);
    let starts = bot
        .slack()
        .calls()
        .iter()
        .filter(|(m, _)| m == "chat.startStream")
        .count();
    assert!(runs.load(Ordering::SeqCst) >= 2, "the listener ran again");
    assert_eq!(
        (after.len(), starts),
        (1, 1),
        "the retry started a second stream for a one-part answer: {:#?}",
        after
            .iter()
            .map(|m| (&m["ts"], &m["text"]))
            .collect::<Vec<(&Value, &Value)>>()
    );
}

/// The first question's answer waits at `gate` between its two appends (a model's pause, a
/// tool call); any other question is answered at once with "second answer".
fn gated(gate: Arc<tokio::sync::Notify>) -> App {
    App::new()
        .assistant_message(move |ctx: Ctx, q: MessageEvent| {
            let gate = gate.clone();
            async move {
                let (channel, thread) = (q.channel.clone(), q.thread().to_string());
                let mut stream = ctx.stream(&channel, &thread, None).await?;
                if q.text == "first" {
                    let a = "a".repeat(300);
                    stream.append(&a).await; // sent: more than 256 buffered
                    gate.notified().await;
                    let b = "b".repeat(300);
                    stream.append(&b).await; // Slack answers stopped_by_user
                    stream.finish_answer(&format!("{a}{b}"), vec![]).await?;
                } else {
                    stream.append("second answer").await;
                    stream.finish_answer("second answer", vec![]).await?;
                }
                Ok(())
            }
        })
        .agent_session_stopped(|_ctx: Ctx, _stop: AgentSessionStopped| async move { Ok(()) })
}

fn now_ts() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    format!("{}.{:06}", d.as_secs(), d.subsec_micros())
}

/// F2. A run that learns of a stop from Slack (`stopped_by_user` on an append) keeps the stop
/// as a note stamped with the run's CLOCK (`Ctx::note_stop`: `now_ms`), not with when the
/// person stopped. `session_stopped` takes every request of the thread that began before that
/// stamp as stopped: a follow-up question the person asked in the same thread after pressing
/// stop (and before the first answer's run next appended: a model's pause, a tool call, a
/// takeover minutes later) is never answered; its stream is not even started.
#[tokio::test]
async fn rt38_f2_a_stop_learnt_late_from_slack_silences_a_follow_up_asked_after_it() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let bot = TestBot::start(gated(gate.clone())).await;
    let slack = bot.slack().clone();
    let asked_at = std::sync::Mutex::new(String::new());
    let stop_and_ask = async {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        let thread = loop {
            if let Some(m) = slack
                .messages()
                .into_iter()
                .find(|m| m["streaming"] == true)
            {
                break m["thread_ts"].as_str().unwrap().to_string();
            }
            assert!(tokio::time::Instant::now() < deadline, "a stream");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        };
        // The person presses stop (Slack stops the stream and sends the event).
        let stopped = bot.stop_session(&thread).await;
        assert!(
            ["answered", "no_reply"].contains(&stopped.as_str()),
            "{stopped}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        // ... then asks a follow-up in the same thread.
        *asked_at.lock().unwrap() = now_ts();
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        // The first answer's model goes on: its next append hears stopped_by_user.
        gate.notify_one();
        thread
    };
    let (first, thread) = tokio::join!(bot.dm("first"), stop_and_ask);
    eprintln!("[F2] first: {first}");
    let ts = asked_at.lock().unwrap().clone();
    // The follow-up's delivery (processed after the first run ended; its first delivery may
    // as well have crashed after starting its stream: the retry then finds it "stopped").
    let outcome = bot
        .send(
            serde_json::json!({"type": "message", "channel_type": "im", "user": "U0USER",
            "text": "second", "channel": "D0TEST", "ts": ts, "thread_ts": thread,
            "event_ts": ts}),
        )
        .await;
    eprintln!("[F2] follow-up: {outcome}");
    let answered = parts_in(&bot.slack().messages(), "D0TEST", &thread)
        .iter()
        .any(|m| m["text"] == "second answer");
    assert!(
        answered,
        "the follow-up asked AFTER the stop was taken as stopped ({outcome}): never answered"
    );
}

/// An answer whose parts switch at once (`rotate_after` 1 ms): 300 characters, `gates[0]`,
/// one more word (the switch comes before it), `gates[1]`, the end.
fn switching(gates: Arc<[tokio::sync::Notify; 2]>) -> App {
    use slack_once::app::StreamOptions;
    App::new()
        .assistant_message(move |ctx: Ctx, q: MessageEvent| {
            let gates = gates.clone();
            async move {
                let (channel, thread) = (q.channel.clone(), q.thread().to_string());
                let options =
                    StreamOptions::new().rotate_after(std::time::Duration::from_millis(1));
                let mut stream = ctx.stream_with(&channel, &thread, None, options).await?;
                let a = "a".repeat(300);
                stream.append(&a).await;
                gates[0].notified().await;
                stream.append(" b").await; // the part is due: switched first
                gates[1].notified().await;
                stream.finish_answer(&format!("{a} b"), vec![]).await?;
                Ok(())
            }
        })
        .agent_session_stopped(|_ctx: Ctx, _stop: AgentSessionStopped| async move { Ok(()) })
}

/// F3. The person presses stop while a part is due for its switch, and the switch runs
/// before `agent_session_stopped` is delivered (the event lags Slack's own stop). The
/// switch's `chat.stopStream` is answered `message_not_in_streaming_state` (Slack stopped the
/// stream), which the switch takes for an expiry; its flush had nothing buffered, so no
/// `stopped_by_user` was heard: it starts a NEW part after the person's stop (and
/// `chat.startStream` sets the session processing again). The end then reads the stop and
/// passes every step: the new part is left streaming, unmarked, the session processing.
#[tokio::test]
async fn rt38_f3_a_stop_during_a_switch_starts_a_part_after_the_stop_left_streaming() {
    let gates = Arc::new([tokio::sync::Notify::new(), tokio::sync::Notify::new()]);
    let bot = TestBot::start(switching(gates.clone())).await;
    let slack = bot.slack().clone();
    let press = async {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        let thread = loop {
            if let Some(m) = slack
                .messages()
                .into_iter()
                .find(|m| m["streaming"] == true)
            {
                break m["thread_ts"].as_str().unwrap().to_string();
            }
            assert!(tokio::time::Instant::now() < deadline, "a stream");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        };
        // Slack stops the stream at once; its event is on its way.
        let event = slack.with_workspace(|w| w.stop_session("D0TEST", &thread, "U0USER"));
        gates[0].notify_one();
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let _ = bot.send(event).await;
        gates[1].notify_one();
        thread
    };
    let (outcome, thread) = tokio::join!(bot.dm("stop me mid-switch"), press);
    eprintln!("[F3] outcome {outcome}");
    let starts = bot
        .slack()
        .calls()
        .iter()
        .filter(|(m, _)| m == "chat.startStream")
        .count();
    let parts = parts_in(&bot.slack().messages(), "D0TEST", &thread);
    let session = bot
        .slack()
        .with_workspace(|w| w.session("D0TEST", &thread))
        .unwrap_or_default();
    eprintln!("[F3] parts {parts:#?}\nsession {session}");
    assert!(
        starts == 1 && parts.iter().all(|p| p["streaming"] != true),
        "a part started after the person's stop ({starts} starts), left streaming: {parts:#?}"
    );
}
