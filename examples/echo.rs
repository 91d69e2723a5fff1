//! Echo: answers every message it hears (a mention, a DM) with what was said, in the thread.
//! One answer per message, however many times Slack delivers it.
//!
//!   SLACK_SIGNING_SECRET=dev-secret cargo run --example echo

use slack_once::app::{App, Ctx, MessageEvent, safe_text};

pub fn app() -> App {
    App::new().message_where(
        |m: &MessageEvent| m.mention || m.is_dm(),
        |ctx: Ctx, m: MessageEvent| async move {
            ctx.reply(format!("You said: {}", safe_text(&m.text)))
                .await?;
            Ok(())
        },
    )
}

fn main() -> std::process::ExitCode {
    slack_once::run(app())
}
