//! Second red-team round on the agents' streaming code (after the fixes of redteam38), each
//! test failing on the defect it is named after, in process against `FakeSlack`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use slack_once::app::{AgentSessionStopped, App, Ctx, MessageEvent, SessionStatus};
use slack_once::testing::TestBot;

/// A workspace of another organisation: Slack refuses its user as a stream's recipient.
const OTHER_TEAM: &str = "T0OTHERORG";

/// An answer to a recipient Slack refuses (the refusal recorded: the answer is one post, made
/// at the end), then the session set active; the first run fails after it (an app's own
/// write failing once), so the event is tried again.
fn refused_then_active(runs: Arc<AtomicUsize>, thread: Arc<Mutex<String>>) -> App {
    App::new()
        .assistant_message(move |ctx: Ctx, q: MessageEvent| {
            let (runs, thread_out) = (runs.clone(), thread.clone());
            async move {
                let run = runs.fetch_add(1, Ordering::SeqCst);
                let (channel, thread) = (q.channel.clone(), q.thread().to_string());
                *thread_out.lock().unwrap() = thread.clone();
                let user = q.user.clone().unwrap_or_default();
                let mut stream = ctx
                    .stream(&channel, &thread, Some((user.as_str(), OTHER_TEAM)))
                    .await?;
                stream.append("The whole answer.").await;
                stream.finish_answer("The whole answer.", vec![]).await?;
                ctx.set_session_status(&channel, Some(&thread), SessionStatus::Active, None)
                    .await?;
                if run == 0 {
                    return Err("the app's own bookkeeping failed once".into());
                }
                Ok(())
            }
        })
        .agent_session_stopped(|_ctx: Ctx, _stop: AgentSessionStopped| async move { Ok(()) })
}

/// B1. A refused recipient's answer is a post made by `end` (a step). A later run that sees a
/// stop passes the start with `pass_recorded`, which finds no `ts` in the recorded refusal:
/// `refused` stays false, `parts` empty, and `end` returns before passing the post's step.
/// Every step after the answer then lands one number early: the retry's
/// `agents.sessions.setStatus` meets the recorded `chat.postMessage` and the request ends
/// `nondeterministic_listener` (a failure that no retry can fix).
#[tokio::test]
async fn rt38b_b1_a_stop_after_a_refused_recipients_post_shifts_the_steps() {
    let runs = Arc::new(AtomicUsize::new(0));
    let thread = Arc::new(Mutex::new(String::new()));
    let ledger = Arc::new(slack_once::ledger::MemoryLedger::new());
    let bot = TestBot::start_with_ledger(
        refused_then_active(runs.clone(), thread.clone()),
        ledger.clone(),
    )
    .await;
    let ts = "1767225600.900001";
    let envelope = serde_json::json!({
        "type": "event_callback", "team_id": "T0TEST", "api_app_id": "A0TEST",
        "event_id": "EvB1QUESTION", "event_time": 1_767_225_600,
        "event": {"type": "message", "channel_type": "im", "user": "U0USER",
                  "text": "a question from afar", "channel": "D0TEST", "ts": ts, "event_ts": ts},
        "authorizations": [{"team_id": "T0TEST", "user_id": "U0BOT", "is_bot": true}]
    });
    let first = bot.send_envelope(envelope.clone()).await;
    eprintln!("[B1] first run: {first}");
    let posts = bot
        .slack()
        .calls()
        .iter()
        .filter(|(m, _)| m == "chat.postMessage")
        .count();
    assert_eq!(posts, 1, "the refused answer was posted whole");
    // The person presses stop (the session is processing in their eyes) before the retry.
    let thread = thread.lock().unwrap().clone();
    let stopped = bot.stop_session(&thread).await;
    eprintln!("[B1] stop: {stopped}");
    let again = bot.send_envelope(envelope).await;
    eprintln!("[B1] retry: {again}");
    for (id, status) in ledger.statuses() {
        eprintln!("[B1] {id:?}: {status:?} {:?}", ledger.journal(&id));
    }
    assert!(runs.load(Ordering::SeqCst) >= 2, "the listener ran again");
    assert!(
        ["answered", "recovered", "no_reply"].contains(&again.as_str()),
        "the retry after a stop ended {again}: the stopped run passed one step fewer than \
         the first run made (the refused answer's post), shifting every later step"
    );
}
