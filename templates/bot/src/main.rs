//! {{ project_name }}: a Slack bot built on slack-once, which answers every event exactly once
//! however many copies of it arrive. `cargo run` serves it on 127.0.0.1:3000; on Lambda the same
//! binary serves the Function URL (template.yaml). `cargo run -- --help` lists its tools.

use slack_once::app::manifest::Manifest;
use slack_once::app::{Ack, App, Command, Ctx, HandlerResult, Message, MessageEvent, blocks};

/// A mention, or a direct message: one reply in its thread.
async fn hello(ctx: Ctx, message: MessageEvent) -> HandlerResult {
    let who = message.user.as_deref().unwrap_or("there");
    ctx.reply(format!("Hello, <@{who}>! You said: {}", message.text))
        .await?;
    Ok(())
}

/// `/{{ project_name }} TEXT`: an ephemeral acknowledgement at once, then one answer in the
/// channel through the command's `response_url`.
async fn command(ctx: Ctx, command: Command) -> HandlerResult {
    ctx.ack(Ack::ephemeral("On it.")).await?;
    let text = format!("<@{}> asked: {}", command.user_id, command.text);
    ctx.respond(slack_once::app::Respond::in_channel(
        Message::text(text.clone()).blocks([blocks::section(text)]),
    ))
    .await?;
    Ok(())
}

/// The bot's slash command (`slack-app-manifest.json` declares it too).
pub const COMMAND: &str = "/{{ project_name }}";

/// The bot: its listeners and commands, and what its Slack app manifest says of them
/// (`cargo run -- manifest` prints it; CI checks `slack-app-manifest.json` against it).
pub fn app() -> App {
    App::new()
        .message_where(|m: &MessageEvent| m.mention || m.is_dm(), hello)
        .command(COMMAND, command)
        .with_manifest(
            Manifest::new("{{ project_name }}")
                .description("A Slack bot built on slack-once: every event answered exactly once.")
                .background_color("#2c2d30")
                .command(
                    COMMAND,
                    "Answers once in the channel",
                    Some("[something to ask]"),
                    false,
                )
                // Mentions come as app_mention; direct messages as message.im.
                .events(["app_mention"])
                .message_events(["message.im"])
                // A takeover looks for its answers where it posts them.
                .scopes(["mpim:history", "channels:history", "groups:history"]),
        )
}

fn main() -> std::process::ExitCode {
    slack_once::run(app())
}

#[cfg(test)]
mod tests;
