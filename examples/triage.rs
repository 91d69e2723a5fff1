//! Triage: "On it." in the thread of every message that mentions the bot, and a :rocket: on
//! every message that says "ship". One message that does both gets both, once each, whether
//! Slack delivers it as an `app_mention`, as a `message.channels` event, or as both (in either
//! order, with retries and copies): every listener that takes the message runs once, under the
//! message's one claim.
//!
//!   SLACK_SIGNING_SECRET=dev-secret cargo run --example triage
//!
//! Subscribe the app to `app_mention` and `message.channels` (scopes `app_mentions:read`,
//! `channels:history`, `chat:write`, `reactions:write`).

use slack_once::app::{App, AppMention, Ctx, MessageEvent};

pub fn app() -> App {
    App::new()
        .app_mention(|ctx: Ctx, _mention: AppMention| async move {
            ctx.reply("On it.").await?;
            Ok(())
        })
        .message(r"(?i)\bship\b", |ctx: Ctx, m: MessageEvent| async move {
            ctx.react(&m.channel, &m.ts, "rocket").await?;
            Ok(())
        })
}

fn main() -> std::process::ExitCode {
    slack_once::run(app())
}
