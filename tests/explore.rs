//! The crash explorer over every example and the reference bot, for every request kind each
//! handles, in both modes (the README's bots are explored in tests/readme.rs). The budget is
//! `SLACK_ONCE_EXPLORE`'s (see `slack_once::testing::explore`).

use serde_json::json;
use slack_once::testing::explore::{Explorer, Request};

#[path = "../examples/assistant.rs"]
#[allow(dead_code)]
mod assistant;
#[path = "../examples/assistant_view.rs"]
#[allow(dead_code)]
mod assistant_view;
#[path = "../examples/deploy.rs"]
#[allow(dead_code)]
mod deploy;
#[path = "../examples/echo.rs"]
#[allow(dead_code)]
mod echo;
#[path = "../examples/handoff.rs"]
#[allow(dead_code)]
mod handoff;
#[path = "../examples/modal.rs"]
#[allow(dead_code)]
mod modal;
#[path = "../examples/poll.rs"]
#[allow(dead_code)]
mod poll;
#[path = "explore/postgres.rs"]
mod postgres;
#[path = "../examples/reactions.rs"]
#[allow(dead_code)]
mod reactions;
#[path = "../examples/simulate.rs"]
#[allow(dead_code)]
mod simulate;
#[path = "explore/socket_mode.rs"]
mod socket_mode;
// The approval step is the simulation's too: one copy of the module.
use simulate::approval;
#[path = "../examples/thinking.rs"]
#[allow(dead_code)]
mod thinking;
#[path = "../examples/triage.rs"]
#[allow(dead_code)]
mod triage;
#[path = "../examples/welcome.rs"]
#[allow(dead_code)]
mod welcome;

#[test]
fn echo_answers_every_mention_and_dm_once() {
    Explorer::new(echo::app)
        .request(Request::mention("hello"))
        .request(Request::dm("hello"))
        .both_modes()
        .run()
        .assert_ok();
}

#[test]
fn triage_answers_a_mention_and_reacts_to_ship_once() {
    Explorer::new(triage::app)
        .request(Request::mention("help"))
        .request(Request::message("time to ship it"))
        .both_modes()
        .run()
        .assert_ok();
}

#[test]
fn reactions_react_and_wave_back_once() {
    Explorer::new(reactions::app)
        .request(Request::message("we shipped it"))
        .request(Request::event(json!({
            "type": "reaction_added", "user": "U0USER", "reaction": "wave",
            "item": {"type": "message", "channel": "C0TEST", "ts": "1767225600.000100"},
            "event_ts": "1767225600.000500"
        })))
        .both_modes()
        .run()
        .assert_ok();
}

#[test]
fn deploy_reacts_replies_updates_and_reacts_once() {
    Explorer::new(deploy::app)
        .request(Request::message("deploy api to prod"))
        .both_modes()
        .run()
        .assert_ok();
}

#[test]
fn thinking_remembers_its_answer_and_updates_its_placeholder_once() {
    Explorer::new(thinking::app)
        .request(Request::mention("what is 6 x 7?"))
        .both_modes()
        .run()
        .assert_ok();
}

#[test]
fn welcome_greets_each_new_person_once() {
    Explorer::new(welcome::app)
        .request(Request::event(json!({
            "type": "team_join",
            "user": {"id": "U0NEW", "name": "newbie", "real_name": "New Person", "is_bot": false}
        })))
        .both_modes()
        .run()
        .assert_ok();
}

#[test]
fn modal_opens_once_and_saves_each_note_once() {
    Explorer::new(modal::app)
        .request(Request::shortcut("new_note"))
        .request(Request::view_submission(
            json!({"type": "modal", "callback_id": modal::CALLBACK,
                   "title": {"type": "plain_text", "text": "New note"}, "blocks": []}),
            json!({modal::TITLE_BLOCK: {modal::TITLE_INPUT: {"type": "plain_text_input", "value": "groceries"}}}),
        ))
        .request(Request::view_submission(
            json!({"type": "modal", "callback_id": modal::CALLBACK,
                   "title": {"type": "plain_text", "text": "New note"}, "blocks": []}),
            json!({modal::TITLE_BLOCK: {modal::TITLE_INPUT: {"type": "plain_text_input", "value": " "}}}),
        ))
        .both_modes()
        .run()
        .assert_ok();
}

#[test]
fn the_assistant_streams_one_complete_answer_per_question() {
    // SAFETY: every test here that sets MODEL_WORDS sets the same value, as before Rust
    // 2024 made set_var unsafe; none reads another value from it.
    unsafe { std::env::set_var("MODEL_WORDS", "80") };
    Explorer::new(assistant_view::app)
        .request(Request::assistant_question("what is exactly once?"))
        .request(Request::event(json!({
            "type": "assistant_thread_started", "event_ts": "1767225600.000200",
            "assistant_thread": {"user_id": "U0USER", "channel_id": "D0TEST",
                                 "thread_ts": "1767225600.000100",
                                 "context": {"channel_id": "C0TEST", "team_id": "T0TEST"}}
        })))
        .both_modes()
        .run()
        .assert_ok();
}

#[test]
fn the_reference_bot_answers_mentions_dms_once_and_its_button() {
    Explorer::new(slack_once::reference_app)
        .request(Request::mention("hello"))
        .request(Request::dm("hello"))
        .request(Request::command("/once", "hello"))
        .request(
            Request::click("once_thanks", "helpful")
                .on_message("<@U0USER> you said: “hello”. This is my one answer to it."),
        )
        .both_modes()
        .run()
        .assert_ok();
}

#[test]
fn a_planted_defect_a_second_post_on_a_takeover_is_found_and_shrunk() {
    use slack_once::app::{App, Ctx, MessageEvent};
    let defective = || {
        App::new().message_where(
            |m: &MessageEvent| m.mention,
            |ctx: Ctx, _m: MessageEvent| async move {
                ctx.reply("one").await?;
                if ctx.attempt().await > 1 {
                    // The defect: a takeover posts a message the first run never made.
                    ctx.reply("one more").await?;
                }
                Ok(())
            },
        )
    };
    let report = Explorer::new(defective)
        .request(Request::mention("hi"))
        .seed(7)
        .run();
    let (_, failure) = report
        .failures()
        .next()
        .expect("the explorer finds the defect");
    assert_eq!(failure.schedule.faults.len(), 1, "{report}");
    let text = report.to_string();
    for part in ["Slack retries", "one more", "replay it"] {
        assert!(text.contains(part), "{part:?} in {text}");
    }
    // The one fault that lets a takeover happen: a crash, or an answer lost.
    assert!(
        ["dies-after", "answer-lost"]
            .iter()
            .any(|f| failure.schedule.to_text().contains(f)),
        "{report}"
    );
}

/// What the explorer found in slack-once itself, each as the schedule that showed it: every one
/// of these failed before its fix.
mod regressions {
    use super::*;
    use slack_once::app::{
        Ack, App, Command, Ctx, MessageEvent, Respond, Shortcut, ViewSubmission,
    };
    use std::time::Duration;

    /// A finding's failing schedule replayed, then an exploration of the same listener around
    /// it: the mention `text`, without copies.
    fn replay_then_explore(app: fn() -> App, text: &str, schedule: &str) {
        Explorer::new(app)
            .request(Request::mention(text).without_copies())
            .replay(schedule)
            .run()
            .assert_ok();
        Explorer::new(app)
            .request(Request::mention(text).without_copies())
            .run()
            .assert_ok();
    }

    /// A `response_url` follow-up in a conversation the bot cannot read, after a crash between
    /// the claim and the follow-up: nothing was sent, so nothing may be taken as sent.
    #[test]
    fn a_follow_up_the_bot_cannot_look_for_is_never_taken_as_sent() {
        Explorer::new(slack_once::reference_app)
            .request(Request::command("/once", "hi").in_channel("D0PEOPLE"))
            .deferred()
            .replay("plain; 2.1=dies-after 3.2=refused")
            .run()
            .assert_ok();
        Explorer::new(slack_once::reference_app)
            .request(Request::command("/once", "hi").in_channel("D0PEOPLE"))
            .both_modes()
            .run()
            .assert_ok();
    }

    fn slow_ack() -> App {
        App::new()
            .command("/slow", |ctx: Ctx, _c: Command| async move {
                // Slower than the deferred ingress's 2 s before choosing the acknowledgement.
                tokio::time::sleep(Duration::from_millis(2500)).await;
                ctx.ack(Ack::ephemeral("Working on it.")).await?;
                ctx.respond(Respond::in_channel("Done.")).await?;
                Ok(())
            })
            .view_submission("slow_form", |ctx: Ctx, _v: ViewSubmission| async move {
                // A validation that takes longer than the hand-off allows.
                tokio::time::sleep(Duration::from_millis(2500)).await;
                ctx.ack(Ack::errors([("title", "Give it a title")])).await?;
                Ok(())
            })
    }

    /// In deferred mode an acknowledgement chosen after the ingress handed the request off
    /// reaches Slack through the response_url, and a view's errors found only on the worker
    /// end the request failed (said, counted), never released in silence.
    #[test]
    fn an_acknowledgement_chosen_after_the_hand_off_is_not_dropped() {
        Explorer::new(slow_ack)
            .request(Request::command("/slow", ""))
            .deferred()
            .replay("plain")
            .invariant(
                "the late acknowledgement comes through the response_url",
                |end| {
                    let shown = end.ephemerals.iter().any(|e| e["text"] == "Working on it.");
                    let done = end.messages.iter().any(|m| m["text"] == "Done.");
                    (shown && done).then_some(()).ok_or(format!(
                        "ephemerals {:?}, messages {:?}",
                        end.ephemerals, end.messages
                    ))
                },
            )
            .run()
            .assert_ok();
        Explorer::new(slow_ack)
            .request(Request::view_submission(
                json!({"type": "modal", "callback_id": "slow_form",
                       "title": {"type": "plain_text", "text": "Slow"}, "blocks": []}),
                json!({"title": {"t": {"type": "plain_text_input", "value": ""}}}),
            ))
            .deferred()
            .replay("plain")
            .invariant("late errors end the request failed, said", |end| {
                let failed = end
                    .ledger
                    .iter()
                    .any(|(_, s)| *s == slack_once::ledger::Status::Failed);
                let said = end.logs.iter().any(|l| l.contains("ack_too_late"));
                (failed && said)
                    .then_some(())
                    .ok_or(format!("ledger {:?}", end.ledger))
            })
            .run()
            .assert_ok();
        Explorer::new(slow_ack)
            .request(Request::command("/slow", ""))
            .request(Request::view_submission(
                json!({"type": "modal", "callback_id": "slow_form",
                       "title": {"type": "plain_text", "text": "Slow"}, "blocks": []}),
                json!({"title": {"t": {"type": "plain_text_input", "value": ""}}}),
            ))
            .deferred()
            .run()
            .assert_ok();
    }

    fn nested() -> App {
        App::new().message_where(
            |m: &MessageEvent| m.mention,
            |ctx: Ctx, _m: MessageEvent| async move {
                let c = ctx.clone();
                let answer: String = ctx
                    .remember("outer", async move {
                        let inner: u32 = c.remember("inner", async { 6 * 7 }).await.unwrap_or(0);
                        format!("The answer is {inner}.")
                    })
                    .await?;
                ctx.reply(answer).await?;
                Ok(())
            },
        )
    }

    fn side_by_side() -> App {
        App::new().message_where(
            |m: &MessageEvent| m.mention,
            |ctx: Ctx, _m: MessageEvent| async move {
                let slow = async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    6
                };
                let (a, b): (Result<u32, _>, Result<u32, _>) =
                    tokio::join!(ctx.remember("a", slow), ctx.remember("b", async { 7 }));
                ctx.reply(format!("The answer is {}.", a? * b?)).await?;
                Ok(())
            },
        )
    }

    /// Found by a review: two `remember`s made side by side (not one inside the
    /// other) each keep their result under a step of their own.
    #[test]
    fn remembers_side_by_side_each_keep_their_result() {
        Explorer::new(side_by_side)
            .request(Request::mention("6 x 7").without_copies())
            .run()
            .assert_ok();
    }

    /// A `remember` inside another is part of the outer's result: replays stay deterministic.
    #[tokio::test]
    async fn a_write_inside_a_remember_is_refused_after_an_inner_one_returns() {
        use slack_once::app::Error;
        let bot = slack_once::testing::TestBot::start(App::new().message_where(
            |m: &MessageEvent| m.mention,
            |ctx: Ctx, _m: MessageEvent| async move {
                let c = ctx.clone();
                let refused: bool = ctx
                    .remember("outer", async move {
                        let _inner: u32 = c.remember("inner", async { 1 }).await.unwrap_or(0);
                        matches!(c.reply("inside").await, Err(Error::InsideRemember { .. }))
                    })
                    .await?;
                ctx.reply(if refused { "refused" } else { "written" })
                    .await?;
                Ok(())
            },
        ))
        .await;
        assert_eq!(bot.mention("x").await, "answered");
        let texts: Vec<_> = bot
            .slack()
            .messages()
            .iter()
            .map(|m| m["text"].clone())
            .collect();
        assert_eq!(texts, [json!("refused")]);
    }

    #[test]
    fn a_remember_inside_a_remember_replays_as_one() {
        Explorer::new(nested)
            .request(Request::mention("what is 6 x 7?"))
            .run()
            .assert_ok();
    }

    /// The modal's note is posted to the user's id: a takeover whose look-up is refused
    /// (`conversations.open` without `im:write`) never posts again, on the last receive either.
    #[test]
    fn a_post_to_a_user_id_is_not_made_again_when_the_dm_cannot_be_looked_in() {
        Explorer::new(super::modal::app)
            .request(Request::view_submission(
                json!({"type": "modal", "callback_id": super::modal::CALLBACK,
                       "title": {"type": "plain_text", "text": "New note"}, "blocks": []}),
                json!({super::modal::TITLE_BLOCK: {super::modal::TITLE_INPUT: {"type": "plain_text_input", "value": "milk"}}}),
            ))
            .deferred()
            .replay("plain; 2.2=dies-after 3.2=refused")
            .run()
            .assert_ok();
    }

    fn open_then_post() -> App {
        App::new().shortcut("note", |ctx: Ctx, s: Shortcut| async move {
            ctx.open_view(json!({"type": "modal", "callback_id": "note",
                "title": {"type": "plain_text", "text": "Note"}, "blocks": []}))
                .await?;
            ctx.ack(Ack::empty()).await?;
            ctx.post(&s.user_id, "Your note is open.").await?;
            Ok(())
        })
    }

    /// A `views.open` whose answer is cut off at the deferred ingress's hand-off: the worker
    /// finds the view (by its external_id) rather than failing on an expired trigger, and
    /// what follows the acknowledgement runs.
    #[test]
    fn a_view_cut_off_at_the_hand_off_is_found_and_the_rest_runs() {
        Explorer::new(open_then_post)
            .request(Request::shortcut("note"))
            .deferred()
            .replay("plain; 1.1=slow-applied")
            .invariant("the rest runs", |end| {
                (end.messages.len() == 1).then_some(()).ok_or_else(|| {
                    format!("{} messages after the acknowledgement", end.messages.len())
                })
            })
            // A worker of an earlier version would take the view's step as made: the message
            // says it is of a later format, which such a worker leaves for the dead letters.
            .invariant("queued as format 3", |end| {
                let versions: Vec<_> = end
                    .queued
                    .iter()
                    .map(|b| serde_json::from_str::<serde_json::Value>(b).unwrap()["v"].clone())
                    .collect();
                (!versions.is_empty() && versions.iter().all(|v| v == 3))
                    .then_some(())
                    .ok_or(format!("queued as {versions:?}"))
            })
            .run()
            .assert_ok();
        Explorer::new(open_then_post)
            .request(Request::shortcut("note"))
            .both_modes()
            .run()
            .assert_ok();
    }

    /// A hung `chat.appendStream` does not hold the answer: the first run finishes it, and
    /// the model is asked once.
    #[test]
    fn a_hung_append_does_not_hold_the_answer() {
        // SAFETY: every test here that sets MODEL_WORDS sets the same value, as before Rust
        // 2024 made set_var unsafe; none reads another value from it.
        unsafe { std::env::set_var("MODEL_WORDS", "80") };
        // Site 7 of the first run is its first chat.appendStream, while the model answers.
        Explorer::new(super::assistant_view::app)
            .request(Request::assistant_question("what is exactly once?").without_copies())
            .replay("plain; 1.7=slow")
            .invariant("the model is asked once", |end| {
                let asked = end
                    .logs
                    .iter()
                    .filter(|l| l.contains("model: answering"))
                    .count();
                (asked == 1)
                    .then_some(())
                    .ok_or(format!("asked {asked} times"))
            })
            .invariant("the first run answers", |end| {
                match end.runs.first().and_then(|r| r.end.as_ref()) {
                    Some(slack_once::testing::explore::RunEnd::Answered { outcome, .. })
                        if outcome == "answered" =>
                    {
                        Ok(())
                    }
                    other => Err(format!("the first run ended {other:?}")),
                }
            })
            .run()
            .assert_ok();
    }

    /// Found by the long run: a stream whose start is settled unconfirmed (the look-up for it
    /// refused to the last delivery) is not posted again whole by its finish.
    #[test]
    fn an_unconfirmed_stream_start_is_not_answered_a_second_time() {
        // SAFETY: every test here that sets MODEL_WORDS sets the same value, as before Rust
        // 2024 made set_var unsafe; none reads another value from it.
        unsafe { std::env::set_var("MODEL_WORDS", "80") };
        Explorer::new(super::assistant_view::app)
            .request(Request::assistant_question("what is exactly once?"))
            .replay("plain; 1.5=dies-after 4.3=refused")
            .run()
            .assert_ok();
        Explorer::new(super::assistant_view::app)
            .request(Request::assistant_question("what is exactly once?"))
            .deferred()
            .replay("plain; 2.5=dies-after 5.3=refused")
            .run()
            .assert_ok();
    }

    fn look_then_whisper() -> App {
        App::new().message_where(
            |m: &MessageEvent| m.mention,
            |ctx: Ctx, m: MessageEvent| async move {
                let user = m.user.clone().unwrap_or_default();
                ctx.user_info(&user).await?;
                ctx.post_ephemeral(&m.channel, &user, "only you see this")
                    .await?;
                Ok(())
            },
        )
    }

    /// Found by a review: a claim that ends before its first write keeps its
    /// earlier claims' doubt; the doubt must still say those claims announce an at-most-once
    /// write themselves, or the next claim takes the ephemeral for perhaps sent and drops it.
    #[test]
    fn a_doubt_kept_from_announcing_claims_does_not_drop_an_ephemeral() {
        // Run 1 dies before its first write; retry 2's claim keeps the doubt (its alias
        // refused); retry 3 must still make the ephemeral.
        replay_then_explore(
            look_then_whisper,
            "psst",
            "plain; 1.3=dies-before 3.2=unavailable",
        );
    }

    fn carries_on() -> App {
        App::new().message_where(
            |m: &MessageEvent| m.mention,
            |ctx: Ctx, _m: MessageEvent| async move {
                // A listener that does not let a failed reply stop it.
                if ctx.reply("a reply").await.is_err() {
                    tracing::info!("the reply failed; reacting anyway");
                }
                ctx.react_to_event("eyes").await?;
                Ok(())
            },
        )
    }

    /// Found by a review: a listener that carries on past a look-up held back must
    /// not write the doubt away (a later write ended the began windows it stood on) nor end
    /// the request done.
    #[test]
    fn a_listener_carrying_on_past_a_held_look_up_does_not_lose_the_doubt() {
        replay_then_explore(
            carries_on,
            "x",
            "plain; 1.3=dies-after 3.3=rate-limited 3.4=dies-after",
        );
    }

    fn gives_up_waiting() -> App {
        App::new().message_where(
            |m: &MessageEvent| m.mention,
            |ctx: Ctx, _m: MessageEvent| async move {
                // A listener that stops waiting for a slow reply (the future dropped mid-call).
                let reply = ctx.reply("a reply");
                if tokio::time::timeout(Duration::from_secs(1), reply)
                    .await
                    .is_err()
                {
                    tracing::info!("the reply is slow; reacting instead");
                }
                ctx.react_to_event("eyes").await?;
                Ok(())
            },
        )
    }

    /// Found by a review: a write the listener drops while its call is out (a
    /// timeout around it) has an unknown fate: the claim cannot end done.
    #[test]
    fn a_write_dropped_by_its_listener_mid_call_is_not_taken_as_settled() {
        Explorer::new(gives_up_waiting)
            .request(Request::mention("x").without_copies())
            .run()
            .assert_ok();
    }

    fn carries_on_then_remembers() -> App {
        App::new().message_where(
            |m: &MessageEvent| m.mention,
            |ctx: Ctx, _m: MessageEvent| async move {
                // Carries on past each failed write, then remembers and writes again.
                let _ = ctx.reply("first").await;
                let _ = ctx.reply("second").await;
                let n: u32 = ctx.remember("n", async { 7 }).await?;
                ctx.react_to_event(if n == 7 { "eyes" } else { "x" })
                    .await?;
                Ok(())
            },
        )
    }

    /// Found by a review: a write refused because an earlier step is held back
    /// still takes its number, so a `remember` after it keeps the number it has on every run
    /// (it was taken for another step: `nondeterministic_listener`, failed for good).
    #[test]
    fn writes_refused_after_a_hold_keep_the_steps_numbered() {
        replay_then_explore(
            carries_on_then_remembers,
            "x",
            "plain; 1.3=slow 3.3=rate-limited",
        );
    }

    fn top_level() -> App {
        App::new().message_where(
            |m: &MessageEvent| m.mention,
            |ctx: Ctx, m: MessageEvent| async move {
                ctx.post(&m.channel, "Noted, in the channel.").await?;
                Ok(())
            },
        )
    }

    /// In a busy channel under Slack's one look-up a minute, each delivery's look-up goes on
    /// from where the last one stopped: the earlier post is found, not posted again.
    #[test]
    fn a_look_up_in_a_busy_channel_resumes_where_it_stopped() {
        Explorer::new(top_level)
            .request(Request::mention("note this").without_copies())
            .busy(25)
            .history_limit()
            .replay("plain; 1.3=dies-after")
            .invariant("found, not failed", |end| {
                let recovered = end.runs.iter().any(|r| {
                    matches!(&r.end, Some(slack_once::testing::explore::RunEnd::Answered { outcome, .. }) if outcome == "recovered")
                });
                recovered.then_some(()).ok_or("no delivery found the post".to_string())
            })
            .run()
            .assert_ok();
        Explorer::new(top_level)
            .request(Request::mention("note this"))
            .busy(25)
            .history_limit()
            .run()
            .assert_ok();
    }

    /// `X-Slack-Retry-Num` is not signed: a replay of a signed request with it forged to 3
    /// cannot make a post without a look-up.
    #[test]
    fn a_forged_retry_number_cannot_force_a_post() {
        Explorer::new(super::echo::app)
            .request(Request::mention("hello").without_copies())
            .replay("forged; 1.3=dies-after 3.3=refused")
            .run()
            .assert_ok();
    }
}

/// Multi-workspace mode: the reference bot installed through OAuth, its token due for a
/// refresh (beside the request with an hour left; at its first call, after the claim, with 30
/// seconds), every
/// fault at `oauth.v2.access` as at any call: each request answered once with this workspace's
/// token, and the installation still refreshable at the end.
#[test]
fn installed_through_oauth_each_request_refreshes_once_and_answers_once_with_its_own_token() {
    for left in [
        std::time::Duration::from_secs(3600),
        std::time::Duration::from_secs(30),
        // Expired: a workspace idle for half a day.
        std::time::Duration::ZERO,
    ] {
        Explorer::new(slack_once::reference_app)
            .installed(left)
            .request(Request::mention("hello"))
            .request(Request::command("/once", "hi"))
            .both_modes()
            .run()
            .assert_ok();
    }
}

/// The app's state in multi-workspace mode, the installation's own (`statew-…`), each change
/// written with its record on the request's claim in one transaction, and every fault at that
/// write as at any ledger call (its answer lost, sent again by the SDK, the process dying before
/// or after it): the counter says 1 in every schedule, in both modes, its token refreshed beside.
#[test]
fn installed_through_oauth_a_workspaces_state_change_is_made_once() {
    use slack_once::app::{App, Ctx, HandlerResult, MessageEvent};
    async fn count(ctx: Ctx, m: MessageEvent) -> HandlerResult {
        assert!(
            ctx.installation().is_some(),
            "answered with an installation"
        );
        count_mentions(ctx, m).await
    }
    Explorer::new(|| App::new().message_where(|m: &MessageEvent| m.mention, count))
        .installed(std::time::Duration::from_secs(3600))
        .request(Request::mention("count me"))
        .both_modes()
        .invariant("counted once, in the workspace's own state", counted_once)
        .run()
        .assert_ok();
}

/// A distributed app's look-ups (Slack's 2025 history limit, one read a minute per workspace)
/// paced through the installation store, shared by every process: a takeover in a busy
/// channel still answers once.
#[test]
fn installed_through_oauth_a_takeovers_look_ups_are_paced_per_workspace() {
    Explorer::new(slack_once::reference_app)
        .installed(std::time::Duration::from_secs(3600))
        .history_limit()
        .busy(20)
        .request(Request::mention("hello"))
        .both_modes()
        .run()
        .assert_ok();
}

#[test]
fn a_poll_is_posted_once_and_kept_once() {
    Explorer::new(poll::app)
        .request(Request::command(poll::COMMAND, "Lunch? | Pizza | Sushi"))
        .both_modes()
        .invariant("one poll message", |end| {
            let polls = end
                .messages
                .iter()
                .filter(|m| m["text"].as_str().is_some_and(|t| t.starts_with("Lunch?")))
                .count();
            (polls <= 1)
                .then_some(())
                .ok_or(format!("{polls} poll messages"))
        })
        .run()
        .assert_ok();
}

/// A change to the app's state is made once per request, however many times the listener
/// runs: a counter a mention increments says 1 in every schedule, crashes and takeovers
/// included.
#[test]
fn a_state_change_is_made_once_however_often_the_listener_runs() {
    use slack_once::app::{App, MessageEvent};
    Explorer::new(|| App::new().message_where(|m: &MessageEvent| m.mention, count_mentions))
        .request(Request::mention("count me"))
        .both_modes()
        .invariant("counted once", counted_once)
        .run()
        .assert_ok();
}

/// A counter every mention increments in the app's state (in multi-workspace mode, the
/// workspace's), replying with the count.
async fn count_mentions(
    ctx: slack_once::app::Ctx,
    _m: slack_once::app::MessageEvent,
) -> slack_once::app::HandlerResult {
    let n: u64 = ctx
        .state()
        .update(
            "mentions",
            std::time::Duration::from_secs(3600),
            |n: Option<u64>| n.unwrap_or(0) + 1,
        )
        .await?;
    ctx.reply(format!("mention number {n}")).await?;
    Ok(())
}

/// Every reply of [`count_mentions`] says 1: one mention, counted once.
fn counted_once(end: &slack_once::testing::explore::End) -> Result<(), String> {
    for m in &end.messages {
        if m["text"] != "mention number 1" {
            return Err(format!("the count went past 1: {}", m["text"]));
        }
    }
    Ok(())
}

/// No false alarms: correct bots that the explorer once flagged.
mod false_alarms {
    use slack_once::app::{App, BlockAction, Ctx, HandlerResult, MessageEvent, Respond};
    use slack_once::testing::explore::{Explorer, Request};

    /// A reply that shows when it was written: a retry a second later, or a worker minutes
    /// later, writes another time. The journal knows the post by its identity, and so must
    /// the explorer.
    #[test]
    fn a_message_showing_its_time_is_one_message() {
        async fn stamped(ctx: Ctx, _m: MessageEvent) -> HandlerResult {
            let now = slack_once::clock::now_ms() / 1000;
            ctx.reply(format!("Noted at <!date^{now}^{{time}}|now>."))
                .await?;
            Ok(())
        }
        Explorer::new(|| App::new().message_where(|m: &MessageEvent| m.mention, stamped))
            .request(Request::mention("note this"))
            .both_modes()
            .run()
            .assert_ok();
    }

    /// Compared by its identity, a message is still checked for its updates: a takeover that
    /// skips the update its first run would have made (a planted defect) is found.
    #[test]
    fn an_update_a_takeover_skips_is_found() {
        let defective = || {
            App::new().message_where(
                |m: &MessageEvent| m.mention,
                |ctx: Ctx, _m: MessageEvent| async move {
                    let placeholder = ctx.reply("Thinking…").await?;
                    if ctx.attempt().await == 1 {
                        // The defect: a takeover leaves the placeholder as it is.
                        ctx.update(&placeholder.channel, &placeholder.ts, "The answer.")
                            .await?;
                    }
                    Ok(())
                },
            )
        };
        let report = Explorer::new(defective)
            .request(Request::mention("hi"))
            .seed(7)
            .run();
        report
            .failures()
            .next()
            .expect("the explorer finds the defect");
        let text = report.to_string();
        assert!(text.contains("was updated 0 times"), "{text}");
    }

    /// What a message shows, compared where the test asks for it: the same bot, its time
    /// masked, passes; unmasked, its retries' later times are other messages.
    #[test]
    fn content_is_compared_where_the_test_asks_normalized_as_it_says() {
        async fn stamped(ctx: Ctx, _m: MessageEvent) -> HandlerResult {
            let now = slack_once::clock::now_ms() / 1000;
            ctx.reply(format!("Noted at <!date^{now}^{{time}}|now>."))
                .await?;
            Ok(())
        }
        let app = || App::new().message_where(|m: &MessageEvent| m.mention, stamped);
        Explorer::new(app)
            .request(Request::mention("note this"))
            .compare_content_by(|m| {
                let mut m = m.clone();
                if let Some(text) = m["text"].as_str() {
                    m["text"] = text.split("<!date").next().unwrap_or("").into();
                }
                m
            })
            .run()
            .assert_ok();
        let unmasked = Explorer::new(app)
            .request(Request::mention("note this"))
            .compare_content()
            .run();
        assert!(unmasked.failures().next().is_some(), "{unmasked}");
    }

    /// A click answered with an ephemeral refusal: an ephemeral cannot be looked for, so a
    /// repeat after its answer was lost ends `unconfirmed_write`, rightly; the explorer judges
    /// the run that ended the request, not the first failure logged.
    #[test]
    fn an_ephemeral_refusal_whose_answer_was_lost_ends_for_its_own_reason() {
        async fn refuse(ctx: Ctx, _a: BlockAction) -> HandlerResult {
            ctx.respond(Respond::ephemeral(
                "Only the incoming person can acknowledge.",
            ))
            .await?;
            Ok(())
        }
        Explorer::new(|| App::new().action("ack", refuse))
            .request(Request::click("ack", "1").on_message("Handoff to Ana"))
            .both_modes()
            .run()
            .assert_ok();
    }

    /// A reply made only when Slack refused the post for good (the bot tells the person): it
    /// is once in Slack on the path that refusal takes, which the fault-free run never takes.
    #[test]
    fn a_reply_on_an_error_path_is_at_most_once_on_that_path() {
        async fn post_or_say_why(ctx: Ctx, m: MessageEvent) -> HandlerResult {
            match ctx.post("C0ROTA", format!("Handoff: {}", m.text)).await {
                Ok(_) => {}
                // Refused for good (not in the channel, archived): tell the person.
                Err(slack_once::app::Error::Slack(e)) if e.is_permanent() => {
                    let user = m.user.clone().unwrap_or_default();
                    ctx.post_ephemeral(
                        &m.channel,
                        &user,
                        "I could not post the handoff in #rota: am I in it?",
                    )
                    .await?;
                }
                Err(e) => return Err(e.into()),
            }
            Ok(())
        }
        Explorer::new(|| App::new().message_where(|m: &MessageEvent| m.mention, post_or_say_why))
            .request(Request::mention("handoff to Ana"))
            .both_modes()
            .run()
            .assert_ok();
    }
}

/// The explorer as a bot's author meets it: an on-call handoff bot
/// (examples/handoff.rs), correct, passes every request, a sequence and two requests at
/// once; the same bot with a defect planted fails with a trace that names it.
mod handoff_bot {
    use serde_json::json;
    use slack_once::app::{App, AppMention, Ctx, HandlerResult, Message};
    use slack_once::testing::explore::{End, Explorer, Request};

    use super::handoff::{self, ACKNOWLEDGE, COMMAND, Handoff};

    const HANDOFF: &str = "<@U0BOB|bob> the database is slow since 14:00";

    /// Each handoff Slack shows is in the rota (two at once must both be kept).
    fn every_posted_handoff_in_the_rota(end: &End) -> Result<(), String> {
        let posted = end
            .messages
            .iter()
            .filter(|m| {
                m["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("handed off by"))
            })
            .count();
        let rota: Vec<Handoff> = end.state(&handoff::rota("C0TEST")).unwrap_or_default();
        if rota.len() < posted {
            return Err(format!(
                "{posted} handoffs are posted and the rota keeps {}: {rota:?}",
                rota.len()
            ));
        }
        Ok(())
    }

    /// What the bot's messages say, as the report's failure shows it.
    fn failure_text(report: &slack_once::testing::explore::Report) -> String {
        let (_, failure) = report
            .failures()
            .next()
            .unwrap_or_else(|| panic!("the explorer finds the defect:\n{report}"));
        format!("{}\n{}", failure.broken.join("\n"), report)
    }

    #[test]
    fn the_handoff_bot_passes_each_request_in_both_modes() {
        Explorer::new(handoff::app)
            .request(Request::command(COMMAND, HANDOFF))
            .request(Request::mention("who is on call?"))
            .both_modes()
            .run()
            .assert_ok();
    }

    /// A handoff, its acknowledgement by the incoming person, a refusal for someone else, a
    /// mention on another instance: explored as one life, each request with its faults.
    #[test]
    fn a_handoff_its_click_and_a_mention_are_explored_as_a_sequence() {
        let report = Explorer::new(handoff::app)
            .sequence([
                Request::command(COMMAND, HANDOFF),
                Request::click(ACKNOWLEDGE, "")
                    .as_user("U0EVE")
                    .on_posted_message(),
                Request::click(ACKNOWLEDGE, "")
                    .as_user("U0BOB")
                    .on_posted_message(),
                Request::mention("who is on call?"),
            ])
            .both_modes()
            .invariant("acknowledged once, by bob", |end| {
                let rota: Vec<Handoff> = end.state(&handoff::rota("C0TEST")).unwrap_or_default();
                let acked: Vec<_> = rota.iter().filter_map(|h| h.acknowledged.clone()).collect();
                match acked.as_slice() {
                    [] | [(_, _)] if acked.iter().all(|(by, _)| by == "U0BOB") => Ok(()),
                    _ => Err(format!("acknowledged as {acked:?}")),
                }
            })
            .run();
        report.assert_ok();
        let text = report.to_string();
        // The report says what the fault-free run did, each request's writes.
        for part in [
            "the fault-free run:",
            "chat.postMessage",
            "chat.update",
            "Only <@U0BOB> can acknowledge",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
    }

    /// Two handoffs in one channel at once: both kept, as the rota and Slack show.
    #[test]
    fn two_handoffs_at_once_are_both_kept() {
        Explorer::new(handoff::app)
            .together([
                Request::command(COMMAND, HANDOFF),
                Request::command(COMMAND, "<@U0CAROL|carol> taking over the pager")
                    .as_user("U0DAN"),
            ])
            .invariant(
                "every posted handoff is in the rota",
                every_posted_handoff_in_the_rota,
            )
            .run()
            .assert_ok();
    }

    /// The world seeded (a handoff posted and kept before), two clicks of bob's at once: one
    /// acknowledgement, the other click told who was first.
    #[test]
    fn a_double_click_acknowledges_once_on_a_seeded_world() {
        let kept = Handoff {
            id: "earlier".into(),
            from: "U0USER".into(),
            to: "U0BOB".into(),
            notes: "the pager is yours".into(),
            at_s: 1_767_220_000,
            acknowledged: None,
        };
        let mut posted = serde_json::to_value(handoff::message(&kept)).unwrap();
        for (k, v) in [
            ("channel", json!("C0TEST")),
            ("ts", json!("1767220000.000100")),
            ("bot_id", json!(slack_once::testing::BOT_ID)),
            ("app_id", json!(slack_once::testing::APP_ID)),
        ] {
            posted[k] = v;
        }
        Explorer::new(handoff::app)
            .with_state(&handoff::rota("C0TEST"), vec![kept])
            .with_message(posted)
            .together([
                Request::click(ACKNOWLEDGE, "")
                    .as_user("U0BOB")
                    .on_posted_message(),
                Request::click(ACKNOWLEDGE, "")
                    .as_user("U0BOB")
                    .on_posted_message(),
            ])
            .invariant("acknowledged once, and shown", |end| {
                let rota: Vec<Handoff> = end.state(&handoff::rota("C0TEST")).unwrap_or_default();
                let acknowledged = rota.first().and_then(|h| h.acknowledged.clone());
                let shown = end
                    .messages
                    .iter()
                    .any(|m| m.to_string().contains("Acknowledged by <@U0BOB>"));
                let told = end
                    .ephemerals
                    .iter()
                    .filter(|e| e["text"].as_str().is_some_and(|t| t.contains("already")))
                    .count();
                // A click is sent once: one that died or failed is lost (the person sees an
                // error; a click again shows the acknowledgement), and the report counts it.
                use slack_once::testing::explore::RunEnd;
                let died = end.runs.iter().any(|r| match &r.end {
                    Some(RunEnd::Answered {
                        status, outcome, ..
                    }) => *status >= 300 || outcome == "failed",
                    _ => true,
                });
                match (acknowledged, shown, told) {
                    (Some((by, _)), true, 0 | 1) if by == "U0BOB" => Ok(()),
                    // Neither click got through (each counted failed): nothing to show.
                    (None, false, 0) => Ok(()),
                    (Some(_), false, _) if died => Ok(()),
                    other => Err(format!("(acknowledged, shown, told) = {other:?}")),
                }
            })
            .run()
            .assert_ok();
    }

    /// A defect planted: the answer to a mention posted through `ctx.read`, a write the
    /// journal would never see. Refused, and the report says why.
    #[test]
    fn a_post_through_ctx_read_is_refused_and_named() {
        let defective = || {
            App::new().app_mention(|ctx: Ctx, m: AppMention| async move {
                let args = json!({"channel": m.channel, "thread_ts": m.ts, "text": "on call: bob"});
                ctx.read("chat.postMessage", args).await?;
                Ok(())
            })
        };
        let report = Explorer::new(defective)
            .request(Request::mention("who is on call?"))
            .run();
        let text = failure_text(&report);
        assert!(
            text.contains("ctx.read makes reads only, and chat.postMessage writes to Slack"),
            "{text}"
        );
    }

    /// A defect planted: the answer posted with the bot's own HTTP client (async, then
    /// blocking). The explorer's Slack is where it lands, and the call is named.
    #[test]
    fn a_post_through_the_bots_own_http_client_is_found_and_named() {
        async fn around(ctx: Ctx, m: AppMention) -> HandlerResult {
            let _ = &ctx;
            let form = format!("channel={}&thread_ts={}&text=on+call", m.channel, m.ts);
            let base = slack_once::slack::api_url();
            super::own_client::post(&base, "chat.postMessage", &form).await?;
            Ok(())
        }
        let report = Explorer::new(|| App::new().app_mention(around))
            .request(Request::mention("who is on call?"))
            .run();
        let text = failure_text(&report);
        for part in [
            "a Slack call that is not a step of the journal: chat.postMessage",
            "around slack-once's client: slack chat.postMessage",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }

        async fn blocking(ctx: Ctx, m: AppMention) -> HandlerResult {
            let _ = &ctx;
            // A blocking client, on the listener's own thread.
            let form = format!("channel={}&text=on+call", m.channel);
            let base = slack_once::slack::api_url();
            super::own_client::post_blocking(&base, "chat.postMessage", &form)?;
            Ok(())
        }
        let report = Explorer::new(|| App::new().app_mention(blocking))
            .request(Request::mention("who is on call?").without_copies())
            .schedules(20)
            .run();
        let text = failure_text(&report);
        assert!(
            text.contains("a Slack call that is not a step of the journal: chat.postMessage"),
            "{text}"
        );
    }

    /// A defect planted: the rota changed with `get` and `put`, a conflict ignored. Once per
    /// request it is (the change is recorded with the request), but two handoffs at once lose
    /// one: the exploration of both at once finds it.
    #[test]
    fn a_rota_changed_with_get_and_put_loses_a_handoff_made_at_once() {
        use slack_once::app::{Ack, Command};
        async fn hand_off(ctx: Ctx, command: Command) -> HandlerResult {
            ctx.ack(Ack::empty()).await?;
            let (to, notes) = handoff::person_and_notes(&command.text).unwrap_or_default();
            let h = Handoff {
                id: ctx.event_id().to_string(),
                from: command.user_id.clone(),
                to,
                notes,
                at_s: 0,
                acknowledged: None,
            };
            let name = handoff::rota(&command.channel_id);
            let state = ctx.state();
            let read = state.get::<Vec<Handoff>>(&name).await?;
            let (mut rota, version) = read.map_or((Vec::new(), 0), |v| (v.value, v.version));
            rota.push(h.clone());
            // The defect: a conflict (another handoff in between) is ignored.
            let _ = state.put(&name, &rota, version, handoff::TTL).await?;
            ctx.post(&command.channel_id, handoff::message(&h)).await?;
            Ok(())
        }
        let report = Explorer::new(|| App::new().command(COMMAND, hand_off))
            .together([
                Request::command(COMMAND, HANDOFF),
                Request::command(COMMAND, "<@U0CAROL|carol> the pager").as_user("U0DAN"),
            ])
            .invariant(
                "every posted handoff is in the rota",
                every_posted_handoff_in_the_rota,
            )
            .run();
        let text = failure_text(&report);
        assert!(
            text.contains("2 handoffs are posted and the rota keeps 1"),
            "{text}"
        );
    }

    /// A typo in the bot's action id: its button is clicked, and no listener takes the click.
    #[test]
    fn a_typo_in_an_action_id_fails_the_exploration() {
        let typo = || {
            App::new()
                .command(
                    COMMAND,
                    |ctx: Ctx, c: slack_once::app::Command| async move {
                        ctx.ack(slack_once::app::Ack::empty()).await?;
                        let h = Handoff {
                            id: "h".into(),
                            from: c.user_id.clone(),
                            to: "U0BOB".into(),
                            notes: String::new(),
                            at_s: 0,
                            acknowledged: None,
                        };
                        ctx.post(&c.channel_id, handoff::message(&h)).await?;
                        Ok(())
                    },
                )
                .action(
                    "handoff_acknowlege",
                    |_ctx: Ctx, _c: slack_once::app::BlockAction| async move { Ok(()) },
                )
        };
        let report = Explorer::new(typo)
            .sequence([
                Request::command(COMMAND, HANDOFF),
                Request::click(ACKNOWLEDGE, "")
                    .as_user("U0BOB")
                    .on_posted_message(),
            ])
            .run();
        let text = failure_text(&report);
        assert!(
            text.contains("no listener takes request 2 (a click on handoff_acknowledge)"),
            "{text}"
        );

        // The typo in the test instead: a click on a button no message has.
        let report = Explorer::new(handoff::app)
            .sequence([
                Request::command(COMMAND, HANDOFF),
                Request::click("handoff_acknowlege", "")
                    .as_user("U0BOB")
                    .on_posted_message(),
            ])
            .run();
        let text = failure_text(&report);
        assert!(
            text.contains("has a button \"handoff_acknowlege\" to click"),
            "{text}"
        );

        // A click no listener is meant to take passes when the test says so.
        Explorer::new(handoff::app)
            .request(Request::click("open_runbook", "").unhandled())
            .schedules(20)
            .run()
            .assert_ok();
        let report = Explorer::new(handoff::app)
            .request(Request::click("open_runbook", ""))
            .schedules(20)
            .run();
        assert!(failure_text(&report).contains("Request::unhandled()"));
    }

    /// A budget that ends the enumeration before its end says so, and how many single faults
    /// it left untried; one that lets it end leaves none.
    #[test]
    fn a_budget_that_cuts_the_enumeration_short_says_what_it_left_untried() {
        let report = Explorer::new(handoff::app)
            .request(Request::command(COMMAND, HANDOFF))
            .schedules(5)
            .run();
        report.assert_ok();
        let explored = &report.explored[0];
        assert_eq!(explored.enumerated, 5, "{report}");
        assert!(explored.untried_single_faults > 0, "{report}");
        assert!(
            report.to_string().contains(&format!(
                "the budget ended the enumeration short: {} single fault(s) at a site of the \
                 fault-free run",
                explored.untried_single_faults
            )),
            "{report}"
        );

        let quiet = || App::new().app_mention(|_ctx: Ctx, _m: AppMention| async move { Ok(()) });
        let report = Explorer::new(quiet)
            .request(Request::mention("hello?").without_copies())
            .schedules(400)
            .run();
        let explored = &report.explored[0];
        assert!(explored.drawn > 0, "{report}");
        assert_eq!(explored.untried, 0, "{report}");
        assert!(!report.to_string().contains("left untried"), "{report}");
    }

    /// A request whose fault-free run writes nothing says so in the report.
    #[test]
    fn a_request_that_writes_nothing_says_so() {
        let quiet = || App::new().app_mention(|_ctx: Ctx, _m: AppMention| async move { Ok(()) });
        let report = Explorer::new(quiet)
            .request(Request::mention("hello?"))
            .schedules(10)
            .run();
        report.assert_ok();
        assert!(
            report.to_string().contains("it writes nothing to Slack"),
            "{report}"
        );
        let _ = Message::text("");
    }
}

/// The explorer's sequences, requests at once and side door: a click's post whenever the click
/// comes, a request after a lost one, two clicks at once, a replacement a takeover skips, a post
/// from a blocking task, a base kept from an earlier schedule; each failed before its fix.
mod sequences_and_races {
    use std::sync::OnceLock;
    use std::time::Duration;

    use serde_json::json;
    use slack_once::app::blocks;
    use slack_once::app::{
        Ack, App, AppMention, BlockAction, Command, Ctx, HandlerResult, Message, Respond,
    };
    use slack_once::testing::explore::{Explorer, Request};

    fn with_button(text: &str) -> Message {
        Message::text(text).blocks([
            blocks::section(text),
            blocks::actions([blocks::button("Acknowledge", "ack_it", "h1")]),
        ])
    }

    async fn post_with_button(ctx: Ctx, c: Command) -> HandlerResult {
        ctx.ack(Ack::empty()).await?;
        ctx.post(&c.channel_id, with_button("handed off")).await?;
        Ok(())
    }

    /// A click's key is made of when it is sent, which a fault before it moves: its post in
    /// the thread is still its post.
    #[test]
    fn a_clicks_post_is_its_post_whenever_the_click_comes() {
        async fn click(ctx: Ctx, a: BlockAction) -> HandlerResult {
            let (Some(ch), Some(ts)) = (a.channel_id.clone(), a.message_ts.clone()) else {
                return Ok(());
            };
            ctx.post(&ch, Message::text("acknowledged").in_thread(ts))
                .await?;
            Ok(())
        }
        Explorer::new(|| {
            App::new()
                .command("/h", post_with_button)
                .action("ack_it", click)
        })
        .sequence([
            Request::command("/h", "x"),
            Request::click("ack_it", "").on_posted_message(),
        ])
        .schedules(300)
        .seed(7)
        .run()
        .assert_ok();
    }

    /// A mention after a handoff that was lost (a command is sent once) answers that nobody
    /// is on call: another path than the fault-free run's, and a correct one.
    #[test]
    fn a_request_after_a_lost_one_may_take_another_path() {
        async fn cmd(ctx: Ctx, c: Command) -> HandlerResult {
            ctx.ack(Ack::empty()).await?;
            ctx.state()
                .update("rota", Duration::from_secs(3600), |_: Option<String>| {
                    "bob".to_string()
                })
                .await?;
            ctx.post(&c.channel_id, Message::text("handed off to bob"))
                .await?;
            Ok(())
        }
        async fn who(ctx: Ctx, m: AppMention) -> HandlerResult {
            match ctx.state().get::<String>("rota").await? {
                Some(v) => {
                    ctx.react(&m.channel, &m.ts, "white_check_mark").await?;
                    ctx.reply(format!("{} is on call", v.value)).await?;
                }
                None => {
                    ctx.reply("nobody is on call").await?;
                }
            }
            Ok(())
        }
        Explorer::new(|| App::new().command("/h", cmd).app_mention(who))
            .sequence([Request::command("/h", "x"), Request::mention("who?")])
            .schedules(300)
            .seed(7)
            .run()
            .assert_ok();
    }

    /// Two clicks on one button at once: the first wins whichever it is.
    #[test]
    fn two_clicks_at_once_hold_whichever_wins() {
        async fn click(ctx: Ctx, a: BlockAction) -> HandlerResult {
            let (Some(ch), Some(ts)) = (a.channel_id.clone(), a.message_ts.clone()) else {
                return Ok(());
            };
            let me = a.user_id.clone();
            let taken = ctx
                .state()
                .change(
                    "winner",
                    Duration::from_secs(3600),
                    |w: Option<String>| match w {
                        Some(_) => None,
                        None => Some(me.clone()),
                    },
                )
                .await?;
            if taken.applied {
                ctx.post(&ch, Message::text(format!("<@{me}> took it")).in_thread(ts))
                    .await?;
            }
            Ok(())
        }
        let mut posted = serde_json::to_value(with_button("handed off")).unwrap();
        for (k, v) in [
            ("channel", json!("C0TEST")),
            ("ts", json!("1767225500.000001")),
            ("bot_id", json!(slack_once::testing::BOT_ID)),
            ("app_id", json!(slack_once::testing::APP_ID)),
        ] {
            posted[k] = v;
        }
        Explorer::new(|| App::new().action("ack_it", click))
            .with_message(posted)
            .together([
                Request::click("ack_it", "")
                    .as_user("U0ANN")
                    .on_posted_message(),
                Request::click("ack_it", "")
                    .as_user("U0BOB")
                    .on_posted_message(),
            ])
            .invariant("one winner, told once", |end| {
                let took = end
                    .messages
                    .iter()
                    .filter(|m| m["text"].as_str().is_some_and(|t| t.ends_with("took it")))
                    .count();
                match took {
                    0 | 1 => Ok(()),
                    n => Err(format!("{n} winners")),
                }
            })
            .schedules(300)
            .seed(7)
            .run()
            .assert_ok();
    }

    /// A click's replacement of its message through the `response_url`, skipped by a
    /// takeover (a planted defect), is found as a `chat.update` skipped is.
    #[test]
    fn a_replacement_through_the_response_url_a_takeover_skips_is_found() {
        async fn click(ctx: Ctx, _a: BlockAction) -> HandlerResult {
            if ctx.attempt().await == 1 {
                ctx.respond(Respond::replace(Message::text("acknowledged by bob")))
                    .await?;
            }
            Ok(())
        }
        let report = Explorer::new(|| {
            App::new()
                .command("/h", post_with_button)
                .action("ack_it", click)
        })
        .sequence([
            Request::command("/h", "x"),
            Request::click("ack_it", "").on_posted_message(),
        ])
        .both_modes()
        .schedules(400)
        .seed(7)
        .run();
        let text = report.to_string();
        assert!(report.failures().next().is_some(), "{text}");
        assert!(text.contains("was updated 0 times"), "{text}");
    }

    /// A blocking client run where blocking work belongs (`spawn_blocking`, another thread of
    /// the schedule's runtime) still reaches the explorer's Slack, and is named.
    #[test]
    fn a_post_from_a_blocking_task_is_found_and_named() {
        async fn blocking(_ctx: Ctx, m: AppMention) -> HandlerResult {
            let channel = m.channel.clone();
            tokio::task::spawn_blocking(move || -> std::io::Result<String> {
                let base = slack_once::slack::api_url();
                assert!(base.starts_with("http://127.0.0.1:"), "{base}");
                let form = format!("channel={channel}&text=on+call");
                super::own_client::post_blocking(&base, "chat.postMessage", &form)
            })
            .await
            .map_err(std::io::Error::other)??;
            Ok(())
        }
        let report = Explorer::new(|| App::new().app_mention(blocking))
            .request(Request::mention("who is on call?").without_copies())
            .schedules(5)
            .run();
        let text = report.to_string();
        assert!(report.failures().next().is_some(), "{text}");
        assert!(
            text.contains("a Slack call that is not a step of the journal: chat.postMessage"),
            "{text}"
        );
    }

    /// A base kept from the first schedule (a client built once, in a `static`): a later
    /// schedule's write (here a takeover's) reaches no schedule, is never sent, and fails the
    /// exploration.
    #[test]
    fn a_base_kept_from_an_earlier_schedule_is_reported() {
        static BASE: OnceLock<String> = OnceLock::new();
        async fn kept(ctx: Ctx, m: AppMention) -> HandlerResult {
            let base = BASE.get_or_init(slack_once::slack::api_url).clone();
            if ctx.attempt().await > 1 {
                let form = format!("channel={}&text=on+call", m.channel);
                super::own_client::post(&base, "chat.postMessage", &form).await?;
            }
            ctx.reply("on call: bob").await?;
            Ok(())
        }
        let report = Explorer::new(|| App::new().app_mention(kept))
            .request(Request::mention("who is on call?").without_copies())
            .schedules(40)
            .run();
        let text = report.to_string();
        assert!(!report.around.is_empty(), "{text}");
        assert!(
            text.contains("under a base kept from a schedule that has ended"),
            "{text}"
        );
    }
}

/// A state change made with `get` then `put` whose conflict is ignored loses an update when
/// two requests come at once: the explorer's own checks name it, with no invariant of the
/// bot's; a change that answers its conflicts passes.
mod lost_updates {
    use std::time::Duration;

    use slack_once::app::{Ack, App, Command, Ctx, HandlerResult, Put};
    use slack_once::testing::explore::{Explorer, Request};

    const DAY: Duration = Duration::from_secs(86_400);

    /// The defect: the count read, then written back one more, the `put`'s conflict ignored.
    async fn count_ignoring_conflicts(ctx: Ctx, _command: Command) -> HandlerResult {
        ctx.ack(Ack::empty()).await?;
        let state = ctx.state();
        let read = state.get::<u64>("incidents").await?;
        let (count, version) = read.map_or((0, 0), |v| (v.value, v.version));
        let _ = state.put("incidents", &(count + 1), version, DAY).await?;
        Ok(())
    }

    /// The same change, read again and put again on a conflict.
    async fn count_answering_conflicts(ctx: Ctx, _command: Command) -> HandlerResult {
        ctx.ack(Ack::empty()).await?;
        let state = ctx.state();
        loop {
            let read = state.get::<u64>("incidents").await?;
            let (count, version) = read.map_or((0, 0), |v| (v.value, v.version));
            match state.put("incidents", &(count + 1), version, DAY).await? {
                Put::Written { .. } => return Ok(()),
                Put::Conflict => continue,
            }
        }
    }

    fn two_at_once<F, Fut>(listener: F) -> slack_once::testing::explore::Report
    where
        F: Fn(Ctx, Command) -> Fut + Copy + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Explorer::new(move || App::new().command("/incident", listener))
            .together([
                Request::command("/incident", "the database is slow"),
                Request::command("/incident", "the pager is down").as_user("U0DAN"),
            ])
            .schedules(40)
            .run()
    }

    #[test]
    fn a_state_change_made_with_get_and_put_by_two_requests_at_once_fails_the_explorers_checks() {
        let report = two_at_once(count_ignoring_conflicts);
        let text = report.to_string();
        let (_, failure) = report
            .failures()
            .next()
            .unwrap_or_else(|| panic!("the lost update is found:\n{text}"));
        assert!(
            failure.broken.iter().any(|b| b.starts_with(
                "no lost update: a put of the state value \"incidents\" met Conflict"
            )),
            "{text}"
        );
        // No fault is needed: the two requests at once are enough.
        assert_eq!(failure.schedule.to_text(), "plain", "{text}");
    }

    #[test]
    fn a_state_change_that_reads_again_on_a_conflict_passes() {
        two_at_once(count_answering_conflicts).assert_ok();
        let by_update = |ctx: Ctx, _c: Command| async move {
            ctx.ack(Ack::empty()).await?;
            ctx.state()
                .update("incidents", DAY, |n: Option<u64>| n.unwrap_or(0) + 1)
                .await?;
            Ok(())
        };
        Explorer::new(move || App::new().command("/incident", by_update))
            .together([
                Request::command("/incident", "the database is slow"),
                Request::command("/incident", "the pager is down").as_user("U0DAN"),
            ])
            .schedules(40)
            .invariant("each command done is counted", |end| {
                let done = end
                    .ledger
                    .iter()
                    .filter(|(key, status)| key.starts_with("cmd-") && status.as_str() == "done")
                    .count() as u64;
                match end.state::<u64>("incidents") {
                    Some(count) if count >= done => Ok(()),
                    None if done == 0 => Ok(()),
                    other => Err(format!("{done} done, and the count is {other:?}")),
                }
            })
            .run()
            .assert_ok();
    }
}

/// The base a client of the bot's own gets is its test's own: a `TestBot`'s stand-in, an
/// exploration's schedule; never Slack, and never another test's running beside it.
mod side_door {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use slack_once::app::{App, AppMention, Ctx, HandlerResult};
    use slack_once::testing::TestBot;
    use slack_once::testing::explore::{Explorer, Request};

    /// The TestBot's listener: a post with a client of its own.
    async fn post_around(_ctx: Ctx, m: AppMention) -> HandlerResult {
        let base = slack_once::slack::api_url();
        let form = format!("channel={}&text=from-the-testbot", m.channel);
        super::own_client::post(&base, "chat.postMessage", &form).await?;
        Ok(())
    }

    #[tokio::test]
    async fn a_testbots_own_client_reaches_its_own_stand_in() {
        let bot = TestBot::start(App::new().app_mention(post_around)).await;
        let other = TestBot::start(App::new().app_mention(post_around)).await;
        // No write of the journal's: `no_reply`.
        assert_eq!(bot.mention("who is on call?").await, "no_reply");
        let around = bot.slack().calls_around_the_crate();
        assert_eq!(around.len(), 1, "{around:?}");
        assert_eq!(around[0].0, "chat.postMessage");
        assert_eq!(around[0].1["text"], "from-the-testbot");
        // Made as Slack would make it, in this bot's stand-in only.
        assert_eq!(bot.slack().messages().len(), 1);
        assert!(other.slack().calls_around_the_crate().is_empty());
        assert!(other.slack().messages().is_empty());
        // Outside any request of a test, a test process never gets Slack's own base.
        assert!(
            slack_once::slack::api_url().starts_with("http://127.0.0.1:"),
            "{}",
            slack_once::slack::api_url()
        );
    }

    static EXPLORING: AtomicBool = AtomicBool::new(false);

    /// The exploration's listener: a read with a client of its own (no defect: the
    /// exploration runs all its schedules), then its answer.
    async fn read_around_then_reply(ctx: Ctx, m: AppMention) -> HandlerResult {
        EXPLORING.store(true, Ordering::SeqCst);
        let base = slack_once::slack::api_url();
        let form = format!("channel={}", m.channel);
        super::own_client::post(&base, "conversations.info", &form).await?;
        ctx.reply("on call: bob").await?;
        Ok(())
    }

    #[test]
    fn a_testbots_raw_call_beside_an_exploration_is_the_testbots_not_the_explorations() {
        let exploration = std::thread::spawn(|| {
            Explorer::new(|| App::new().app_mention(read_around_then_reply))
                .request(Request::mention("who is on call?").without_copies())
                .schedules(12)
                .run()
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let sent = runtime.block_on(async {
            let bot = TestBot::start(App::new().app_mention(post_around)).await;
            let waited = std::time::Instant::now();
            while !EXPLORING.load(Ordering::SeqCst) && waited.elapsed() < Duration::from_secs(60) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let mut sent = 0;
            while !exploration.is_finished() {
                assert_eq!(bot.mention("who is on call?").await, "no_reply");
                sent += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let around = bot.slack().calls_around_the_crate();
            assert_eq!(around.len(), sent, "{around:?}");
            sent
        });
        assert!(sent > 0, "the TestBot ran while the exploration did");
        let report = exploration.join().expect("the exploration");
        let text = report.to_string();
        // The exploration's own call is in its report; the TestBot's posts are not.
        assert!(
            text.contains("around slack-once's client: conversations.info"),
            "{text}"
        );
        assert!(!text.contains("from-the-testbot"), "{text}");
        report.assert_ok();
    }
}

/// A client of the bot's own, as a bot with one would write it: an HTTP/1.1 POST of a form to
/// `{base}/{method}`, the base from `slack_once::slack::api_url()` (in an exploration, the
/// explorer's Slack on 127.0.0.1), on a socket of its own; async or blocking.
mod own_client {
    /// The request's bytes, and the host to connect to.
    fn request(base: &str, method: &str, form: &str) -> (String, String) {
        let rest = base
            .strip_prefix("http://")
            .expect("a loopback base in tests");
        let (host, path) = rest.split_once('/').expect("a base with a path");
        let bytes = format!(
            "POST /{path}/{method} HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer xoxb-mine\r\n\
             content-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{form}",
            form.len()
        );
        (host.to_string(), bytes)
    }

    pub async fn post(base: &str, method: &str, form: &str) -> std::io::Result<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (host, bytes) = request(base, method, form);
        let mut stream = tokio::net::TcpStream::connect(host).await?;
        stream.write_all(bytes.as_bytes()).await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        Ok(answer)
    }

    pub fn post_blocking(base: &str, method: &str, form: &str) -> std::io::Result<String> {
        use std::io::{Read, Write};
        let (host, bytes) = request(base, method, form);
        let mut stream = std::net::TcpStream::connect(host)?;
        stream.write_all(bytes.as_bytes())?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer)
    }
}

/// Workflow Builder steps: the approval example's step, its clicks and its modal,
/// explored with every fault; a step completed twice, or reported answered without its
/// completion in Slack, or with the installation's token, is caught.
mod steps {
    use serde_json::json;
    use slack_once::app::function::{Execution, Function, types};
    use slack_once::app::{App, BlockAction, Ctx, HandlerResult};
    use slack_once::testing::explore::{End, Explorer, Request};

    use super::approval::{self, APPROVE, CALLBACK_ID, REJECT, REJECT_VIEW};

    const DM: &str = "DU0APPROVER";

    fn inputs() -> serde_json::Value {
        json!({"approver": "U0APPROVER", "summary": "Ship the release"})
    }

    fn completed_once(end: &End) -> Result<(), String> {
        for e in &end.executions {
            if e["completions"].as_u64().unwrap_or(0) > 1 {
                return Err(format!("completed more than once: {e}"));
            }
        }
        Ok(())
    }

    #[test]
    fn the_step_and_an_approval_are_explored_in_both_modes() {
        Explorer::new(approval::app)
            .sequence([
                Request::step(CALLBACK_ID, inputs()),
                Request::click(APPROVE, "approve")
                    .as_user("U0APPROVER")
                    .in_channel(DM)
                    .on_posted_message()
                    .in_step(),
            ])
            .both_modes()
            .invariant("completed once", completed_once)
            .run()
            .assert_ok();
    }

    #[test]
    fn a_rejection_through_the_modal_is_explored() {
        Explorer::new(approval::app)
            .sequence([
                Request::step(CALLBACK_ID, inputs()),
                Request::click(REJECT, "reject")
                    .as_user("U0APPROVER")
                    .in_channel(DM)
                    .on_posted_message()
                    .in_step(),
                Request::submit_opened_view(
                    REJECT_VIEW,
                    json!({"reason": {"reason_text": {"type": "plain_text_input", "value": "Not now"}}}),
                )
                .as_user("U0APPROVER")
                .in_step(),
            ])
            .both_modes()
            .invariant("completed once, with the reason", |end| {
                completed_once(end)?;
                match end.executions.first() {
                    // Not decided (a click lost with its process), or failed on the error path
                    // (Slack refused the DM for good).
                    Some(e) if e["state"] == "running" || e["state"] == "failed" => Ok(()),
                    Some(e) if e["outputs"]["reason"] == "Not now" => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            })
            .run()
            .assert_ok();
    }

    #[test]
    fn two_approvers_clicking_at_once_complete_it_once() {
        let dm = seeded(approval::request("Ship the release"));
        Explorer::new(approval::app)
            .with_execution(CALLBACK_ID, inputs())
            .with_message(dm)
            .together([
                Request::click(APPROVE, "approve")
                    .as_user("U0APPROVER")
                    .in_channel(DM)
                    .on_posted_message()
                    .in_step(),
                Request::click(APPROVE, "approve")
                    .as_user("U0DEPUTY")
                    .in_channel(DM)
                    .on_posted_message()
                    .in_step(),
            ])
            .invariant("completed once", completed_once)
            .run()
            .assert_ok();
    }

    /// The step's DM refused for good (its request fails the step, and the ledger's answer to
    /// the completion's intent is lost), then taken on Slack's retry: the retry completes the
    /// failure that stands, rather than leaving the step running with a decision no one sends.
    #[test]
    fn a_retry_whose_dm_went_through_completes_the_failure_an_earlier_run_decided() {
        Explorer::new(approval::app)
            .sequence([
                Request::step(CALLBACK_ID, inputs()),
                click_as(APPROVE, "U0APPROVER"),
            ])
            .replay("plain; 1.3=refused 1.8=answer-lost")
            .invariant("completed once", completed_once)
            .run()
            .assert_ok();
    }

    /// The step failed on a run whose DM Slack refused for good, and completed on the retry
    /// whose DM went through: the Reject click after it finds the execution over (its token
    /// revoked) and says so rather than opening the modal, as a request after one that went
    /// another path may.
    #[test]
    fn a_rejection_after_the_step_failed_for_a_refused_dm_says_it_is_closed() {
        Explorer::new(approval::app)
            .sequence([
                Request::step(CALLBACK_ID, inputs()),
                click_as(REJECT, "U0APPROVER"),
            ])
            .replay("plain; 1.3=refused 1.8=dies-after")
            .invariant("completed once", completed_once)
            .run()
            .assert_ok();
    }

    /// In deferred mode, the step's message redelivered after its token expired: the DM is
    /// refused (`token_expired`) and the request ends `failed`, as the docs say, not `no_reply`
    /// with no DM in Slack.
    #[test]
    fn a_step_redelivered_after_its_token_expired_ends_failed() {
        Explorer::new(approval::app)
            .sequence([
                Request::step(CALLBACK_ID, inputs()),
                click_as(APPROVE, "U0APPROVER"),
            ])
            .deferred()
            .replay("plain; 2.1=dies-before 3.1=dies-before")
            .invariant("completed once", completed_once)
            .run()
            .assert_ok();
    }

    /// Two approvers clicking at once, or one person's double click, in deferred mode: each
    /// click a request of its own on the queue, with its retries and redeliveries.
    #[test]
    fn two_deciders_in_deferred_mode_complete_it_once() {
        for second in ["U0DEPUTY", "U0APPROVER"] {
            two_deciders(second)
                .deferred()
                .invariant("completed once", completed_once)
                .run()
                .assert_ok();
        }
    }

    /// The decider dies just after marking its completion `sending` (and its redelivery dies
    /// too); the other click, finding it completing, shows the decision, and its response_url
    /// post fails (Slack's 5xx): its redelivery, past the decider's lease, sends the decision
    /// at the completion's step number. Before every path took that step, the redelivery met
    /// the response_url post at that number and ended `nondeterministic_listener`, final: the
    /// click's answer lost, and the step left for the decider's last delivery.
    #[test]
    fn a_click_that_found_the_other_completing_sends_the_decision_on_its_redelivery() {
        two_deciders("U0DEPUTY")
            .deferred()
            .replay("plain; 3.12=unavailable 4.6=dies-after 5.1=dies-before")
            .invariant("completed once", completed_once)
            .run()
            .assert_ok();
    }

    /// The decider dies just after marking its completion `sending`; past its lease, its
    /// redelivery and the other click's first run (its first receive died) run at once, each
    /// about to send the decider's decision. Each must hold the mark by a write of its own on
    /// the record's version first: one sends, the other finds the mark taken and sends
    /// nothing. Before, the click sent it for the dead decider and the redelivery, finding its
    /// own mark, sent it too: Slack refused the second (`execution_not_in_running_state`),
    /// a call made although no completion's answer was lost.
    #[test]
    fn a_deciders_redelivery_and_a_click_sending_for_it_make_one_completion_call() {
        two_deciders("U0DEPUTY")
            .deferred()
            .replay("plain; 3.1=dies-before 4.6=dies-after")
            .invariant("completed once", completed_once)
            .invariant("one completion call, one decision shown", |end| {
                let sent: Vec<_> = end
                    .calls
                    .iter()
                    .filter(|(method, _)| method.starts_with("functions.complete"))
                    .collect();
                if sent.len() != 1 {
                    return Err(format!("{} completion calls: {sent:?}", sent.len()));
                }
                let shown: Vec<String> = end
                    .messages
                    .iter()
                    .map(|m| m["text"].as_str().unwrap_or_default().to_string())
                    .collect();
                let decided_by = end.executions[0]["outputs"]["decided_by"].as_str();
                let decision = format!("Approved by <@{}>", decided_by.unwrap_or("nobody"));
                match shown.as_slice() {
                    [text] if *text == decision => Ok(()),
                    _ => Err(format!(
                        "the DM reads {shown:?}, the step completed as {decision:?}"
                    )),
                }
            })
            .run()
            .assert_ok();
    }

    /// The decider's completion reaches Slack and its process dies before the answer; past its
    /// lease the other click takes the mark over to send the decision for it, and the ledger's
    /// SDK sends that conditioned write twice (the first answer lost: the second is refused as
    /// a conflict). The run reads the record again, finds the mark its own, and writes it again,
    /// keeping the decider's as the mark it replaced: Slack's `execution_not_in_running_state`
    /// is the decider's completion, and the DM shows the approval. When the re-read took this
    /// run's own mark for the one replaced, the answer was read as the workflow's end: the
    /// record closed `ended`, the DM saying the request ended before a decision.
    #[test]
    fn a_lost_answer_to_taking_the_mark_over_does_not_show_a_completed_step_as_ended() {
        two_deciders("U0DEPUTY")
            .deferred()
            .replay("plain; 3.1=dies-before 4.8=dies-after 5.8=sdk-retry 6.1=dies-before")
            .invariant("completed once", completed_once)
            .invariant(
                "the DM tells how the step ended",
                the_dm_tells_how_the_step_ended,
            )
            .run()
            .assert_ok();
    }

    /// The decider's completion reaches Slack and its process dies before the answer; past its
    /// lease the other click takes the mark over to send the decision for it, and the answer
    /// to that conditioned write is lost (it took effect): the click's run ends unfinished,
    /// and its redelivery finds the record marked with its own request's key. The decider's
    /// mark it replaced is still the one Slack's `execution_not_in_running_state` answers for:
    /// the DM shows the approval, never that the request ended. (The decider's redelivery
    /// dies, so that the click's redelivery is the next to send.) When only the run that
    /// took the mark knew whose mark it replaced, the redelivery took the refusal for the
    /// workflow's end: the record closed `ended`, and both clicks showed the request ended
    /// before a decision, on a step completed with the approval.
    #[test]
    fn a_lost_answer_to_taking_the_mark_over_is_remembered_by_the_redelivery() {
        two_deciders("U0DEPUTY")
            .deferred()
            .replay("plain; 3.1=dies-before 4.8=dies-after 5.8=answer-lost 6.1=dies-before")
            .invariant("completed once", completed_once)
            .invariant(
                "the DM tells how the step ended",
                the_dm_tells_how_the_step_ended,
            )
            .run()
            .assert_ok();
    }

    /// The same schedule without the SDK's second send: the click sends for the dead decider,
    /// Slack refuses it as completed already, and the DM shows the approval (the control of
    /// the test above).
    #[test]
    fn a_click_sending_for_a_decider_that_completed_and_died_shows_its_decision() {
        two_deciders("U0DEPUTY")
            .deferred()
            .replay("plain; 3.1=dies-before 4.8=dies-after 6.1=dies-before")
            .invariant("completed once", completed_once)
            .invariant(
                "the DM tells how the step ended",
                the_dm_tells_how_the_step_ended,
            )
            .run()
            .assert_ok();
    }

    /// The decider dies just after marking its completion `sending`, and the other click's
    /// first receive dies. Past the decider's lease, at once: the click's second receive takes
    /// the mark over and its completion meets Slack's 503 (handed back to the queue); the
    /// decider's redelivery reads the mark held (that run's lease is on). It waits for the
    /// record to close or that lease to end, then takes the mark over and sends. When it sent
    /// nothing and got `Completed` on trust, it showed the approval without the buttons; the
    /// click's next receive died and the one after came when its token had expired
    /// (`token_expired`, for good): the step was left running, no button left to click.
    #[test]
    fn a_deciders_redelivery_deferring_to_a_click_holding_the_mark_does_not_leave_the_step_running()
    {
        two_deciders("U0DEPUTY")
            .deferred()
            .replay("plain; 3.1=dies-before 4.6=dies-after 5.10=unavailable 7.1=dies-before")
            .invariant("completed once", completed_once)
            .invariant(
                "a decision shown as final is completed",
                a_decision_shown_as_final_is_completed,
            )
            .run()
            .assert_ok();
    }

    /// The same on the path that was there before the mark could be taken over: the decider's
    /// completion meets Slack's 503 (handed back to the queue), and the other click reads the
    /// decider's lease on; the decider's next two receives die, and the one after comes when
    /// its token has expired. The click waits for that lease to end (or is handed back to the
    /// queue) and sends the decision itself. When it deferred on trust, it removed the buttons
    /// and said "Decided already", and the step was left running.
    #[test]
    fn a_click_deferring_to_the_deciders_lease_does_not_leave_the_step_running() {
        two_deciders("U0DEPUTY")
            .deferred()
            .replay("plain; 4.8=unavailable 5.1=dies-before 6.1=dies-before")
            .invariant("completed once", completed_once)
            .invariant(
                "a decision shown as final is completed",
                a_decision_shown_as_final_is_completed,
            )
            .run()
            .assert_ok();
    }

    /// A double click in synchronous mode (Slack delivers each click once) whose first click's
    /// completion is rate-limited once: that click completes the step a moment later. The
    /// second click, finding the first completing, must not answer Slack with an error (the
    /// person shown a failure) when the step completes with the decision it shows.
    #[test]
    fn a_double_click_waiting_for_a_slow_completion_is_not_shown_a_failure() {
        two_deciders("U0APPROVER")
            .replay("plain; 2.8=rate-limited")
            .invariant("completed once", completed_once)
            .invariant("no click failed where the step completed", |end| {
                let completed = end
                    .executions
                    .iter()
                    .all(|e| e["completions"].as_u64() == Some(1));
                let failed: Vec<String> = end
                    .runs
                    .iter()
                    .filter_map(|r| match &r.end {
                        Some(slack_once::testing::explore::RunEnd::Answered {
                            status,
                            outcome,
                            ..
                        }) if *status >= 500 => {
                            Some(format!("run {}: {status} {outcome}", r.number))
                        }
                        _ => None,
                    })
                    .collect();
                match completed && !failed.is_empty() {
                    true => Err(format!("the step completed, yet {failed:?}")),
                    false => Ok(()),
                }
            })
            .run()
            .assert_ok();
    }

    /// In synchronous mode (Slack delivers each click once), two approvers click at once; the
    /// deputy's click records its decision and its process dies at once. The approver's
    /// click finds the deputy's lease on past its own deadline: the step must then not be left
    /// running with no button left to click. When that click got `DecidedElsewhere`, the same
    /// answer as for a step completed, the example removed the buttons and said "Decided
    /// already", and the step was never completed; it gets `Completion::Pending`, and the
    /// example keeps the buttons.
    #[test]
    fn a_click_finding_a_decider_that_died_pending_leaves_a_button_to_complete_the_step() {
        two_deciders("U0DEPUTY")
            .replay("plain; 2.3=dies-after")
            .invariant("completed once", completed_once)
            .invariant(
                "a decision shown as final is completed",
                a_decision_shown_as_final_is_completed,
            )
            .run()
            .assert_ok();
    }

    /// Three clicks 30 s apart in deferred mode; the first (the decider) dies just after
    /// marking its completion `sending`. The two later clicks both wait for its lease, which
    /// ends within their own, and both wake as it ends: one takes the mark over and sends; the
    /// other finds the mark taken, waits for the record to close, and sends nothing: one
    /// completion call (the decider's lease seen ending at its processing deadline, 1.25 s
    /// before its claim's).
    #[test]
    fn two_clicks_waiting_out_a_dead_deciders_lease_send_once() {
        Explorer::new(approval::app)
            .with_execution(CALLBACK_ID, inputs())
            .with_message(seeded(approval::request("Ship the release")))
            .sequence(["U0APPROVER", "U0DEPUTY", "U0APPROVER"].map(|user| {
                Request::click(APPROVE, "x")
                    .as_user(user)
                    .in_channel(DM)
                    .on_message("Approval requested:\n>Ship the release")
                    .in_step()
            }))
            .deferred()
            .replay("plain; 2.6=dies-after")
            .invariant("completed once", completed_once)
            .invariant("one completion call", |end| {
                let sent = end
                    .calls
                    .iter()
                    .filter(|(method, _)| method.starts_with("functions.complete"))
                    .count();
                match sent {
                    1 => Ok(()),
                    n => Err(format!("{n} completion calls")),
                }
            })
            .invariant(
                "a decision shown as final is completed",
                a_decision_shown_as_final_is_completed,
            )
            .run()
            .assert_ok();
    }

    /// Where the DM shows a decision without its buttons, or a person was told "Decided
    /// already", the step is completed: the approval example removes the buttons only once it
    /// holds the completion sent (by its request, or by another that is sending it).
    fn a_decision_shown_as_final_is_completed(end: &End) -> Result<(), String> {
        let completed = end
            .executions
            .iter()
            .any(|e| e["completions"].as_u64().unwrap_or(0) >= 1);
        let final_verdicts: Vec<&str> = end
            .messages
            .iter()
            .filter(|m| !has_buttons(m))
            .filter_map(|m| m["text"].as_str())
            .filter(|t| t.starts_with("Approved by") || t.starts_with("Rejected"))
            .collect();
        let told: Vec<&str> = end
            .ephemerals
            .iter()
            .filter_map(|m| m["text"].as_str())
            .filter(|t| t.starts_with("Decided already"))
            .collect();
        if completed || (final_verdicts.is_empty() && told.is_empty()) {
            return Ok(());
        }
        Err(format!(
            "the step is not completed, yet the DM shows {final_verdicts:?} without its buttons \
             and people were told {told:?}: executions {:?}",
            end.executions
        ))
    }

    /// Whether a message still has the step's buttons (an `actions` block).
    fn has_buttons(message: &serde_json::Value) -> bool {
        message["blocks"]
            .as_array()
            .is_some_and(|b| b.iter().any(|b| b["type"] == "actions"))
    }

    /// The DM reads "ended" only where the step did not complete, and shows the decision it
    /// completed with otherwise.
    fn the_dm_tells_how_the_step_ended(end: &End) -> Result<(), String> {
        let Some(execution) = end.executions.first() else {
            return Ok(());
        };
        let texts: Vec<&str> = end
            .messages
            .iter()
            .filter_map(|m| m["text"].as_str())
            .collect();
        if execution["state"] == "completed" && texts.contains(&approval::ENDED) {
            return Err(format!(
                "the step completed with {} but the DM reads {texts:?}",
                execution["outputs"]
            ));
        }
        Ok(())
    }

    /// The step's DM in Slack, and two clicks on its Approve at once: the approver's and
    /// `second`'s (the approver again: a double click).
    fn two_deciders(second: &str) -> Explorer {
        Explorer::new(approval::app)
            .with_execution(CALLBACK_ID, inputs())
            .with_message(seeded(approval::request("Ship the release")))
            .together([click_as(APPROVE, "U0APPROVER"), click_as(APPROVE, second)])
    }

    /// A planted defect: a step completed with a raw call (`ctx.call`, a journaled write, but
    /// no decision), once from the step and again from the click: the second completion is
    /// sent and refused.
    #[test]
    fn a_step_completed_twice_is_caught() {
        fn app() -> App {
            let f = Function::new("twice", "Twice").output("ok", types::BOOLEAN, "Ok");
            App::new()
                .function(f, |ctx: Ctx, ex: Execution| async move {
                    ctx.post(
                        "C0TEST",
                        slack_once::app::Message::text("done").blocks([
                            slack_once::app::blocks::actions([slack_once::app::blocks::button(
                                "Again", "again", "x",
                            )]),
                        ]),
                    )
                    .await?;
                    let args = json!({"function_execution_id": ex.function_execution_id,
                                      "outputs": {"ok": true}});
                    ctx.call(
                        "functions.completeSuccess",
                        args,
                        slack_once::app::Settle::Idempotent,
                    )
                    .await?;
                    Ok(())
                })
                .action(
                    "again",
                    |ctx: Ctx,
                     _c: BlockAction|
                     -> std::pin::Pin<
                        Box<dyn std::future::Future<Output = HandlerResult> + Send>,
                    > {
                        Box::pin(async move {
                            let id = ctx.execution().map(|e| e.id).unwrap_or_default();
                            let args =
                                json!({"function_execution_id": id, "outputs": {"ok": true}});
                            match ctx
                                .call(
                                    "functions.completeSuccess",
                                    args,
                                    slack_once::app::Settle::Idempotent,
                                )
                                .await
                            {
                                Err(e) if e.slack_code().is_some() => Ok(()),
                                other => other.map(|_| ()).map_err(Into::into),
                            }
                        })
                    },
                )
        }
        let report = Explorer::new(app)
            .sequence([
                Request::step("twice", json!({})),
                Request::click("again", "x").on_posted_message().in_step(),
            ])
            .run();
        let text = report.to_string();
        assert!(
            text.contains("at most one completion per execution"),
            "the explorer finds the second completion:\n{text}"
        );
    }

    /// A click that swallows its completion's failures of unknown fate (a timeout, a lost
    /// answer, the ledger's) is still never reported answered while the completion's fate is
    /// open: the journal holds the request back, and the queue's redelivery completes it.
    #[test]
    fn a_swallowed_completion_failure_is_not_reported_answered() {
        fn app() -> App {
            approval::app().action("approval_swallow", |ctx: Ctx, _c: BlockAction| async move {
                let outputs = json!({"decision": "approved", "decided_by": "U0APPROVER"});
                match ctx.complete(outputs).await {
                    // Slack's refusal is surfaced; a timeout, a lost answer, a ledger that
                    // did not answer are swallowed.
                    Err(e) if e.slack_code().is_some() => Err(e.into()),
                    _ => Ok(()),
                }
            })
        }
        Explorer::new(app)
            .with_execution(CALLBACK_ID, inputs())
            .with_message(dm_with("approval_swallow"))
            .request(click("approval_swallow"))
            .both_modes()
            .run()
            .assert_ok();
    }

    /// The approval example's click, but the completion's errors of unknown fate swallowed
    /// (`let _ = ctx.complete_decision(..)`, Slack's refusals surfaced).
    fn swallowing_app() -> App {
        approval::app().action("approval_swallow", |ctx: Ctx, _c: BlockAction| async move {
            let outputs = json!({"decision": "approved", "decided_by": "U0APPROVER"});
            let decision = ctx
                .decide(slack_once::app::function::StepEnd::Success(outputs))
                .await?;
            match ctx.complete_decision(&decision).await {
                // Slack's refusal is surfaced; a release, a timeout, a lost answer, a ledger
                // that did not answer are swallowed.
                Err(e) if e.slack_code().is_some() => Err(e.into()),
                _ => Ok(()),
            }
        })
    }

    /// Two clicks at once whose listener swallows the completion's error (`let _ =
    /// ctx.complete_decision(..)`), the approver's and a deputy's, in both modes: a click that
    /// finds the other completing and is released for it (the other's lease outlasts its own)
    /// is still not done, whatever its listener returns, so its next delivery sends the
    /// decision should the other's run have died.
    #[test]
    fn two_swallowing_clicks_complete_it_once() {
        Explorer::new(swallowing_app)
            .with_execution(CALLBACK_ID, inputs())
            .with_message(dm_with("approval_swallow"))
            .together([
                click("approval_swallow"),
                click_as("approval_swallow", "U0DEPUTY"),
            ])
            .both_modes()
            .invariant("completed once", completed_once)
            .run()
            .assert_ok();
    }

    /// The decider dies just after marking its completion `sending`; the other click, whose
    /// listener swallows the completion's error, waits for the decider's lease and is released
    /// past its own: not done, its redelivery sends the decision.
    #[test]
    fn a_swallowed_release_is_redelivered_and_sends_the_decision() {
        Explorer::new(swallowing_app)
            .with_execution(CALLBACK_ID, inputs())
            .with_message(dm_with("approval_swallow"))
            .together([
                click("approval_swallow"),
                click_as("approval_swallow", "U0DEPUTY"),
            ])
            .deferred()
            .replay("plain; 4.5=dies-after")
            .invariant("completed once", completed_once)
            .invariant("completed by the released click's redelivery", |end| {
                let completed = end
                    .executions
                    .iter()
                    .all(|e| e["completions"].as_u64() == Some(1));
                let released_then_sent = end.runs.iter().any(|r| {
                    r.number == 3
                        && matches!(
                            &r.end,
                            Some(slack_once::testing::explore::RunEnd::Handled {
                                deleted: false,
                                ..
                            })
                        )
                });
                match completed && released_then_sent {
                    true => Ok(()),
                    false => Err(format!("executions {:?}", end.executions)),
                }
            })
            .run()
            .assert_ok();
    }

    /// A planted defect: a click that records its decision and never completes the step.
    #[test]
    fn a_decision_never_completed_is_caught() {
        fn app() -> App {
            approval::app().action("approval_forget", |ctx: Ctx, _c: BlockAction| async move {
                let outputs = json!({"decision": "approved", "decided_by": "U0APPROVER"});
                ctx.decide(slack_once::app::function::StepEnd::Success(outputs))
                    .await?;
                Ok(())
            })
        }
        let report = Explorer::new(app)
            .with_execution(CALLBACK_ID, inputs())
            .with_message(dm_with("approval_forget"))
            .request(click("approval_forget"))
            .run();
        let text = report.to_string();
        assert!(
            text.contains("and never completed it"),
            "the explorer finds the step left running:\n{text}"
        );
    }

    /// The step's DM with one button, `action_id`, in Slack before the request.
    fn dm_with(action_id: &str) -> serde_json::Value {
        seeded(slack_once::app::Message::text("Approve?").blocks([
            slack_once::app::blocks::actions([slack_once::app::blocks::button(
                "Approve", action_id, "x",
            )]),
        ]))
    }

    /// `message` as the bot's DM to the approver, in Slack before the first request.
    fn seeded(message: slack_once::app::Message) -> serde_json::Value {
        let mut dm = serde_json::to_value(message).unwrap();
        for (k, v) in [
            ("channel", json!(DM)),
            ("ts", json!("1767220000.000100")),
            ("bot_id", json!(slack_once::testing::BOT_ID)),
            ("app_id", json!(slack_once::testing::APP_ID)),
        ] {
            dm[k] = v;
        }
        dm
    }

    fn click(action_id: &str) -> Request {
        click_as(action_id, "U0APPROVER")
    }

    fn click_as(action_id: &str, user: &str) -> Request {
        Request::click(action_id, "x")
            .as_user(user)
            .in_channel(DM)
            .on_posted_message()
            .in_step()
    }
}

/// The agent-view example: a question answered with a plan of three tasks and an answer
/// longer than a part (parts switched after 1 s here, Slack's streams ending after 2 s), its
/// session processing then active; and a person's stop while it streams.
mod agent {
    use std::time::Duration;

    use super::assistant::{Model, app_with};
    use slack_once::testing::explore::{Explorer, Request};

    fn long_answers() -> slack_once::app::App {
        app_with(Model {
            words: 60,
            pause: Duration::from_millis(50),
            task: Duration::from_millis(20),
            part: Duration::from_secs(1),
        })
    }

    /// A session is never set processing again once set active (a takeover's statuses are
    /// in their order), and is set active when the answer is whole.
    fn sessions_in_order(end: &slack_once::testing::explore::End) -> Result<(), String> {
        let made: Vec<&str> = end
            .calls
            .iter()
            .filter(|(m, _)| m == "agents.sessions.setStatus")
            .filter_map(|(_, a)| a["status"].as_str())
            .collect();
        let first_active = made.iter().position(|s| *s == "active");
        if let Some(i) = first_active
            && made[i..].contains(&"processing")
        {
            return Err(format!("processing after active: {made:?}"));
        }
        let whole = end.messages.iter().any(|m| {
            m["blocks"].to_string().contains("feedback_buttons") && m["streaming"] != true
        });
        if whole && first_active.is_none() {
            return Err(format!(
                "answered, and the session never set active: {made:?}"
            ));
        }
        Ok(())
    }

    #[test]
    fn an_answer_in_parts_with_its_plan_is_one_answer_through_every_fault() {
        Explorer::new(long_answers)
            .request(Request::assistant_question("what is exactly once?"))
            .invariant("the session's statuses in order", sessions_in_order)
            .invariant("a whole answer is the model's, in order", |end| {
                let mut model = "You asked: what is exactly once?.".to_string();
                for n in 1..=60 {
                    model.push_str(&format!(" w{n}"));
                }
                let whole = end.messages.iter().find(|m| {
                    m["blocks"].to_string().contains("feedback_buttons") && m["streaming"] != true
                });
                match whole {
                    Some(m) if m["text"] != model.as_str() => {
                        Err(format!("the answer reads {}", m["text"]))
                    }
                    _ => Ok(()),
                }
            })
            .invariant("a whole answer is in parts", |end| {
                let whole = end.messages.iter().find(|m| {
                    m["blocks"].to_string().contains("feedback_buttons") && m["streaming"] != true
                });
                match whole.map(|m| m["parts"].as_u64().unwrap_or(1)) {
                    Some(1) => Err("a whole answer in 1 part: not longer than a part".into()),
                    _ => Ok(()),
                }
            })
            .both_modes()
            .run()
            .assert_ok();
    }

    #[test]
    fn a_feedback_click_is_counted_once_whatever_struck() {
        // The answer, then the person's click on its feedback buttons: counted once in the
        // app's state, and thanked once, through every fault of either request.
        Explorer::new(|| {
            app_with(Model {
                words: 8,
                pause: Duration::from_millis(20),
                task: Duration::from_millis(5),
                part: Duration::from_secs(240),
            })
        })
        .sequence([
            Request::assistant_question("what is exactly once?").without_copies(),
            Request::click(super::assistant::FEEDBACK, "positive")
                .in_channel("D0TEST")
                .on_posted_message(),
        ])
        .invariant("a click counted at most once", |end| {
            match end.state::<u64>("feedback/positive") {
                Some(n) if n > 1 => Err(format!("counted {n} times")),
                _ => Ok(()),
            }
        })
        .run()
        .assert_ok();
    }

    #[test]
    fn a_stop_while_the_answer_streams_ends_it_whatever_struck() {
        Explorer::new(long_answers)
            .sequence([
                Request::assistant_question("what is exactly once?").without_copies(),
                Request::stop_session(),
            ])
            .deferred()
            .run()
            .assert_ok();
    }
}

/// The simulation: the soak's mix through the soak bot, every request with faults
/// drawn from the seed, checked by every invariant; the same report whatever the threads; a
/// defect planted in a bot, and one in the runtime, found and shown.
mod simulation {
    use super::simulate::{fleet_app, fleet_mix, soak, soak_mix, writing_around_the_journal};
    use slack_once::testing::explore::{Request, Simulation, SimulationReport};
    use std::time::Duration;

    /// Requests in the bounded run: `SLACK_ONCE_SIMULATE` (3,000 unless set).
    fn bounded() -> u64 {
        std::env::var("SLACK_ONCE_SIMULATE")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(3_000)
    }

    /// A quarter of the schedules delivered over Socket Mode (`Simulation::socket_mode`).
    #[test]
    fn the_fleets_mix_keeps_every_invariant_and_every_kind_is_answered() {
        let report = fleets_mix(bounded()).run();
        assert_the_fleets_mix_held(&report, bounded());
    }

    /// The fleet's mix as its bounded runs draw it: the old and the new version, a fifth of the
    /// schedules installed through OAuth, a quarter over Socket Mode, seed 1.
    pub(crate) fn fleets_mix(requests: u64) -> Simulation {
        fleet_mix(Simulation::new(fleet_app).old_version(fleet_app))
            .installed(200)
            .socket_mode(250)
            .requests(requests)
            .seed(1)
    }

    /// What a run of the fleet's mix must show, whichever ledger it ran on: every invariant
    /// held, every kind drawn and mostly answered, the bare event never claimed, each tenant
    /// drawn.
    pub(crate) fn assert_the_fleets_mix_held(report: &SimulationReport, requests: u64) {
        eprintln!("{report}");
        report.assert_ok();
        assert!(report.requests >= requests, "{report}");
        for kind in [
            "mention",
            "button click",
            "assistant question",
            "slash command",
            "view submission",
            "workflow step",
            "its approval click",
            "a double click's second click",
            "a second approver's click",
            "state change",
        ] {
            let t = &report.kinds[kind];
            // Faults fail some requests for good (a refusal, the last chance killed); most
            // are answered.
            assert!(
                t.requests > 0 && t.answered * 10 >= t.requests * 7,
                "{kind}: {report}"
            );
            assert!(
                t.ledger_writes > 0 && t.invocations >= t.requests,
                "{kind}: {report}"
            );
        }
        assert!(
            report.socket_mode > 0 && report.socket_mode < report.schedules,
            "{report}"
        );
        let bare = &report.kinds["event no listener takes"];
        assert_eq!(bare.not_taken, bare.requests, "{report}");
        assert_eq!(bare.ledger_writes, 0, "{report}");
        // Two apps, each in two workspaces, drawn per schedule on one ledger: each drawn.
        assert_eq!(report.tenants.len(), 4, "{report}");
        assert!(report.tenants.values().all(|n| *n > 0), "{report}");
    }

    /// The runtime planted with a defect: each process of a single-workspace install given
    /// the other app's bot token. Slack would answer as the other app; the tenant check of
    /// every call's token finds it in the first fault-free run.
    #[test]
    fn another_apps_token_is_found() {
        let report = soak_mix(Simulation::new(soak::app))
            .plant_other_apps_token()
            .requests(200)
            .seed(1)
            .run();
        let text = report.to_string();
        assert!(report.failure.is_some(), "{text}");
        assert!(
            text.contains("tokens: run 1 called Slack with another token than this workspace's"),
            "{text}"
        );
    }

    /// The ledger planted with a defect: in multi-workspace mode, a workspace's state values
    /// read and written under the other workspace's keys, so a `/count` in one workspace
    /// counts the other's. The other tenants' values are on the same ledger: the tenant checks
    /// find the key, and the other workspace's count written.
    #[test]
    fn state_not_scoped_by_workspace_is_found() {
        let report = Simulation::new(fleet_app)
            .mix(1, [("state change", Request::command("/count", ""))])
            .installed(1000)
            .requests(200)
            .seed(1)
            .plant_state_of_other_workspace()
            .run();
        let text = report.to_string();
        let failure = report.failure.as_ref().expect("the defect is found");
        assert!(failure.scene.contains("/count"), "{text}");
        for part in [
            "tenants: a request of A0TEST in T0TEST read or wrote the state value statew-A0TEST-T0SECOND-count-",
            "(another tenant's, on the same ledger)",
            "tenants: another tenant's state value statew-A0TEST-T0SECOND-count-",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
    }

    /// A `/count` whose state change is made twice (around `ctx.state()`'s once-per-request
    /// record: a second `update` on a takeover) breaks the fleet's invariant.
    #[test]
    fn a_state_change_made_again_on_a_takeover_is_found() {
        fn app() -> slack_once::app::App {
            use slack_once::app::{Ack, Command, Ctx, HandlerResult, Respond};
            async fn twice(ctx: Ctx, _c: Command) -> HandlerResult {
                ctx.ack(Ack::empty()).await?;
                let month = Duration::from_secs(30 * 86_400);
                let mut n = 0;
                for _ in 0..ctx.attempt().await {
                    n = ctx
                        .state()
                        .update(super::simulate::COUNT, month, |n: Option<u64>| {
                            n.unwrap_or(0) + 1
                        })
                        .await?;
                }
                ctx.respond(Respond::in_channel(format!("That makes {n}.")))
                    .await?;
                Ok(())
            }
            super::simulate::fleet_app_but_count().command("/count", twice)
        }
        let report = fleet_mix(Simulation::new(app))
            .requests(3_000)
            .seed(1)
            .run();
        let text = report.to_string();
        assert!(report.failure.is_some(), "{text}");
        assert!(text.contains("a state change once per request"), "{text}");
    }

    #[test]
    fn the_report_is_the_seeds_whatever_the_threads() {
        let run = |threads| {
            soak_mix(Simulation::new(soak::app).old_version(soak::app))
                .requests(400)
                .seed(7)
                .threads(threads)
                .run()
        };
        let (one, two) = (run(1), run(2));
        one.assert_ok();
        assert_eq!(one.kinds, two.kinds, "{one}\n{two}");
        assert_eq!(one.schedules, two.schedules);
        // Another seed, another history.
        let other = soak_mix(Simulation::new(soak::app))
            .requests(400)
            .seed(8)
            .threads(2)
            .run();
        assert_ne!(one.kinds, other.kinds, "{one}\n{other}");
    }

    /// A bot whose mention listener posts through its own HTTP client when it takes a request
    /// over: no fault-free run shows it; the simulation finds a schedule that does, shrinks it
    /// to the one fault that lets a takeover happen, and names the call.
    #[test]
    fn a_write_around_the_journal_on_a_takeover_is_found_and_shrunk() {
        let report = Simulation::new(writing_around_the_journal)
            .mix(1, [("mention", Request::mention("is the build green?"))])
            .requests(2_000)
            .seed(1)
            .replay_command("scripts/simulate.sh --plant around --seed 1")
            .run();
        let text = report.to_string();
        let failure = report.failure.as_ref().expect("the defect is found");
        assert!(failure.schedule_number.is_some(), "{text}");
        assert_eq!(failure.failure.schedule.faults.len(), 1, "{text}");
        for part in [
            "a Slack call that is not a step of the journal: chat.postMessage",
            "taken over",
            "run it again: scripts/simulate.sh --plant around --seed 1 --only",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
    }

    /// The ledger planted with a defect: a takeover's completion dropped and answered as made.
    /// No fault-free run takes anything over; the simulation finds a schedule whose claim a
    /// later run takes over, and the claim left in progress by a run that ended well (neither
    /// killed nor met by a ledger fault) breaks "nothing claimed past its lease at the end".
    #[test]
    fn a_takeovers_completion_dropped_is_found_and_shrunk() {
        let report = soak_mix(Simulation::new(soak::app))
            .plant_dropped_takeover_finish()
            .requests(2_000)
            .seed(1)
            .run();
        let text = report.to_string();
        let failure = report.failure.as_ref().expect("the defect is found");
        assert!(failure.schedule_number.is_some(), "{text}");
        assert!(!failure.failure.schedule.faults.is_empty(), "{text}");
        for part in [
            "nothing claimed past its lease at the end",
            "neither died nor met a ledger call failing",
            "(dropped: the planted defect)",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
    }

    /// The runtime planted with a defect: each process told a deadline a minute later than
    /// the one Lambda kills it at, so its claims outlive it (Slack's retries would meet a live
    /// claim nobody answers). Every claim shows it: the fault-free run is the trace.
    #[test]
    fn a_lease_past_the_deadline_is_found() {
        let report = soak_mix(Simulation::new(soak::app))
            .plant_lease_past_deadline(Duration::from_secs(60))
            .requests(200)
            .seed(1)
            .run();
        let text = report.to_string();
        assert!(report.failure.is_some(), "{text}");
        assert!(
            text.contains("processing never outlives its lease: run 1 claims")
                && text.contains("60 s after the deadline its process is killed at"),
            "{text}"
        );
    }
}
