//! Reactions: a :rocket: on every message that says "ship", and a wave back, in the thread,
//! to whoever reacts with :wave: to a message. Once each.
//!
//!   SLACK_SIGNING_SECRET=dev-secret cargo run --example reactions
//!
//! Subscribe the app to `message.channels` and `reaction_added` (scopes `channels:history`,
//! `reactions:read`, `reactions:write`, `chat:write`).

use slack_once::app::{App, Ctx, Message, MessageEvent, Reaction};

pub fn app() -> App {
    App::new()
        .message(
            r"(?i)\bship(s|ped|ping)?\b",
            |ctx: Ctx, m: MessageEvent| async move {
                ctx.react(&m.channel, &m.ts, "rocket").await?;
                Ok(())
            },
        )
        .reaction_added(|ctx: Ctx, r: Reaction| async move {
            let (Some(channel), Some(ts), Some(user)) = (r.item.channel, r.item.ts, r.user) else {
                return Ok(());
            };
            if r.reaction == "wave" {
                let wave = Message::text(format!("<@{user}> :wave: back!")).in_thread(ts);
                ctx.post(&channel, wave).await?;
            }
            Ok(())
        })
}

fn main() -> std::process::ExitCode {
    slack_once::run(app())
}
