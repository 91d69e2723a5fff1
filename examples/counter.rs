//! A counter: every mention of the bot counts one, in the app's state (per workspace), and the
//! bot replies with the count. Each mention counts once however often it runs: Slack's retries,
//! a takeover after a crash, a queue's redelivery, a `redrive` of its dead letter a day later
//! (the change is recorded with the request's own claim, not only on the value).
//!
//!   SLACK_SIGNING_SECRET=dev-secret cargo run --example counter

use std::time::Duration;

use slack_once::app::{App, AppMention, Ctx, HandlerResult};

/// The state name of the count.
pub const COUNT: &str = "mentions";

async fn count(ctx: Ctx, _mention: AppMention) -> HandlerResult {
    let month = Duration::from_secs(30 * 86_400);
    let n = ctx
        .state()
        .update(COUNT, month, |n: Option<u64>| n.unwrap_or(0) + 1)
        .await?;
    ctx.reply(format!("That makes {n}.")).await?;
    Ok(())
}

pub fn app() -> App {
    App::new().app_mention(count)
}

fn main() -> std::process::ExitCode {
    slack_once::run(app())
}
