//! The reference bot, written on the bot API: it answers mentions in their thread and direct
//! messages in the conversation, echoing what was said (never pinging anyone), once; `/once`
//! acknowledges at once (only the user sees it) and then answers in the channel through the
//! command's `response_url`, once; the button on its answers updates the message it sits in.

use crate::app::blocks::{actions, button, context, section};
use crate::app::manifest::Manifest;
use crate::app::{
    Ack, App, AppMention, BlockAction, Command, Ctx, HandlerResult, Message, MessageEvent, Respond,
    safe_text,
};

/// The `action_id` of the button on the reference bot's answers.
const THANKS_ACTION: &str = "once_thanks";

/// Echoed text is cut to this many characters.
const MAX_ECHO_CHARS: usize = 200;

/// The reference bot: `slack-once`'s default application.
pub fn reference_app() -> App {
    App::new()
        .app_mention(answer_mention)
        .message_where(|m: &MessageEvent| m.is_dm() && !m.mention, answer_dm)
        .command("/once", answer_command)
        .action(THANKS_ACTION, thank)
        .with_manifest(
            Manifest::new("slack-once")
                .description(
                    "Answers every mention, direct message, /once and button exactly once.",
                )
                .background_color("#2c2d30")
                .command(
                    "/once",
                    "Answers once in the channel, however many times the request arrives",
                    Some("[something to say]"),
                    false,
                )
                .message_events(["message.im"])
                // A takeover looks for its answers where it posts them (the history scopes);
                // a post to a user's id opens their DM (im:write).
                .scopes([
                    "mpim:history",
                    "im:write",
                    "channels:history",
                    "groups:history",
                ]),
        )
}

/// An answer with the button that marks it helpful.
fn with_button(text: String) -> Message {
    Message::text(text.clone()).blocks([
        section(text),
        actions([button("Helpful", THANKS_ACTION, "helpful")]),
    ])
}

async fn answer_command(ctx: Ctx, command: Command) -> HandlerResult {
    ctx.ack(Ack::ephemeral("On it: one answer is coming."))
        .await?;
    let said = echo(&command.text);
    let text = if said.is_empty() {
        format!(
            "<@{}> ran {} with nothing to say. This is my one answer to it.",
            command.user_id, command.command
        )
    } else {
        format!(
            "<@{}> ran {}: “{said}”. This is my one answer to it.",
            command.user_id, command.command
        )
    };
    ctx.respond(Respond::in_channel(with_button(text))).await?;
    Ok(())
}

async fn thank(ctx: Ctx, action: BlockAction) -> HandlerResult {
    let (Some(channel), Some(ts)) = (action.channel_id.as_deref(), action.message_ts.as_deref())
    else {
        // A button outside a message (a modal, the Home tab): nothing to update.
        return Ok(());
    };
    let text = action
        .message
        .as_ref()
        .and_then(|m| m["text"].as_str())
        .unwrap_or_default()
        .to_string();
    let marked = format!("<@{}> found this helpful.", action.user_id);
    let updated = Message::text(text.clone()).blocks([section(text), context([marked])]);
    ctx.update(channel, ts, updated).await?;
    Ok(())
}

async fn answer_mention(ctx: Ctx, mention: AppMention) -> HandlerResult {
    let user = mention.user.as_deref().unwrap_or("there");
    let said = echo(&mention.text);
    let text = if said.is_empty() || said.eq_ignore_ascii_case("help") {
        format!(
            "Hi <@{user}>! Mention me with a question and I answer here, in the thread: once, \
             however many times Slack delivers your message."
        )
    } else {
        format!("<@{user}> you said: “{said}”. This is my one answer to it.")
    };
    ctx.reply(with_button(text)).await?;
    Ok(())
}

async fn answer_dm(ctx: Ctx, message: MessageEvent) -> HandlerResult {
    let said = echo(&message.text);
    let text = if said.is_empty() {
        "Hi! Send me a message, or mention me in a channel, and I answer it once.".to_string()
    } else {
        format!("You said: “{said}”. I answer every message exactly once.")
    };
    // In the conversation, unless the message was in a thread.
    ctx.say(text).await?;
    Ok(())
}

/// The user's text made safe to echo: mentions of users (`<@U123>`) removed, and Slack's
/// special mentions (`<!here>`, `<!channel>`, `<!everyone>`, `<!subteam^S123|@team>`, any
/// `<!…>`) turned into plain text that notifies no one, so a user cannot make the bot ping a
/// channel or a group; trimmed and cut to a short length.
fn echo(text: &str) -> String {
    let trimmed = safe_text(text);
    match trimmed.char_indices().nth(MAX_ECHO_CHARS) {
        Some((cut, _)) => format!("{}…", &trimmed[..cut]),
        None => trimmed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_never_pings_a_channel_or_a_group() {
        for (said, shown) in [
            ("<!channel> look", "@\u{200B}channel look"),
            ("<!here>", "@\u{200B}here"),
            ("<!everyone> hi", "@\u{200B}everyone hi"),
            (
                "ping <!subteam^S0123|@oncall> now",
                "ping @\u{200B}oncall now",
            ),
            ("<!subteam^S0123>", "@\u{200B}subteam"),
            ("<!here|here> x", "@\u{200B}here x"),
        ] {
            let echoed = echo(said);
            assert_eq!(echoed, shown, "{said}");
            assert!(!echoed.contains("<!"), "{said} -> {echoed}");
        }
        assert_eq!(echo("see <#C1|general>"), "see <#C1|general>");
        assert_eq!(echo("a <b"), "a &lt;b");
    }

    #[test]
    fn echo_strips_mentions_and_cuts_long_text() {
        assert_eq!(echo("<@U1>  hello <@U2> world "), "hello world");
        assert_eq!(echo("<@U1"), "&lt;@U1");
        let long = "é".repeat(500);
        let cut = echo(&long);
        assert_eq!(cut.chars().count(), MAX_ECHO_CHARS + 1);
        assert!(cut.ends_with('…'));
    }
}
