//! The README's "Write your own bot" section, compiled and run: the "thinking… then update"
//! bot and its test, exactly as shown there.

use std::time::Duration;

use slack_once::app::{App, Ctx, HandlerResult, MessageEvent};
use slack_once::testing::TestBot;

// ---- README: the bot ----
async fn think(ctx: Ctx, m: MessageEvent) -> HandlerResult {
    ctx.react_to_event("eyes").await?; // step 1
    let placeholder = ctx.reply("Thinking… :hourglass:").await?; // step 2
    let answer = ask_the_model(&m.text, ctx.remaining()).await; // runs again on a takeover
    ctx.update(&placeholder.channel, &placeholder.ts, answer)
        .await?; // step 3
    Ok(())
}

async fn ask_the_model(question: &str, budget: Duration) -> String {
    tokio::time::sleep(Duration::from_millis(200).min(budget)).await; // your LLM call here
    format!("You asked: {question}")
}

fn app() -> App {
    App::new().message_where(|m: &MessageEvent| m.mention || m.is_dm(), think)
}
// ---- end of the bot ----

// ---- README: its test ----
#[tokio::test]
async fn a_mention_gets_a_placeholder_then_the_answer_once() {
    let bot = TestBot::start(app()).await;
    assert_eq!(bot.mention("what is 6 x 7?").await, "answered");
    let messages = bot.slack().messages();
    assert_eq!(messages.len(), 1, "one message: the placeholder, updated");
    assert_eq!(messages[0]["text"], "You asked: what is 6 x 7?");
    assert_eq!(bot.slack().reactions().len(), 1);
}
// ---- end of the test ----

#[tokio::test]
async fn a_retry_of_the_same_event_writes_nothing_more() {
    let bot = TestBot::start(app()).await;
    let envelope = serde_json::json!({
        "type": "event_callback", "team_id": "T0TEST", "event_id": "EvReadme1",
        "event": {"type": "app_mention", "user": "U0USER", "text": "<@U0BOT> again?",
                  "channel": "C0TEST", "ts": "1767225600.000001"},
        "authorizations": [{"team_id": "T0TEST", "user_id": "U0BOT", "is_bot": true}]
    });
    assert_eq!(bot.send_envelope(envelope.clone()).await, "answered");
    assert_eq!(bot.send_envelope(envelope).await, "duplicate");
    assert_eq!(
        bot.slack().calls().len(),
        3,
        "react, post, update: once each"
    );
}

// ---- README: /once and its button ----
mod commands {
    use slack_once::app::{
        blocks, Ack, App, BlockAction, Command, Ctx, HandlerResult, Message, Respond,
    };

    async fn once(ctx: Ctx, command: Command) -> HandlerResult {
        ctx.ack(Ack::ephemeral("On it: one answer is coming."))
            .await?; // what Slack shows at once
        let text = format!("<@{}> ran /once: “{}”.", command.user_id, command.text);
        let button = blocks::actions([blocks::button("Helpful", "once_thanks", "helpful")]);
        ctx.respond(Respond::in_channel(
            Message::text(text.clone()).blocks([blocks::section(text), button]),
        ))
        .await?; // through the response_url, once
        Ok(())
    }

    async fn thanks(ctx: Ctx, click: BlockAction) -> HandlerResult {
        let (Some(channel), Some(ts)) = (click.channel_id, click.message_ts) else {
            return Ok(());
        };
        ctx.update(
            &channel,
            &ts,
            format!("<@{}> found this helpful.", click.user_id),
        )
        .await?;
        Ok(()) // no ack: an empty 200 when the listener returns
    }

    fn app() -> App {
        App::new()
            .command("/once", once)
            .action("once_thanks", thanks)
    }

    #[tokio::test]
    async fn once_answers_in_the_channel_and_its_button_updates_the_answer() {
        let bot = slack_once::testing::TestBot::start(app()).await;
        let acked = bot.command("/once", "hi").await; // also click, shortcut, submit_view, options
        assert_eq!(acked.body["response_type"], "ephemeral");
        assert_eq!(bot.slack().messages().len(), 1); // the in-channel answer, once
        let click = bot
            .click("once_thanks", "helpful", Some(&bot.slack().messages()[0]))
            .await;
        assert_eq!(click.outcome, "answered");
        assert_eq!(
            bot.slack().messages()[0]["text"],
            "<@U0USER> found this helpful."
        );
    }
}
// ---- end of /once ----
