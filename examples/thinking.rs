//! "Thinking…": reacts with :eyes:, posts a placeholder in the thread, does slow work (an LLM
//! call, say), then replaces the placeholder with the answer. Each of the three writes is made
//! once: after a crash, the takeover finds the placeholder it posted and updates that one. The
//! slow answer is remembered (`ctx.remember`): a takeover after it reuses it instead of asking
//! again, so the placeholder is updated with the answer the first run got.
//!
//!   SLACK_SIGNING_SECRET=dev-secret cargo run --example thinking
//!
//! THINKING_MS sets how long the slow step takes (2000 ms by default). Inside Slack's request
//! the work must end within the lease; for slower work run it in deferred mode
//! (`WORK_QUEUE_URL`, and `cargo run --example thinking -- worker`).

use std::time::Duration;

use slack_once::app::{App, Ctx, HandlerResult, MessageEvent, safe_text};

async fn think(ctx: Ctx, m: MessageEvent) -> HandlerResult {
    ctx.react_to_event("eyes").await?;
    let placeholder = ctx.reply("Thinking… :hourglass_flowing_sand:").await?;
    // The slow part, remembered once it is done: a takeover before then runs it again, so it
    // must not write to Slack itself. Bound it by the time the claim has left.
    let answer: String = ctx
        .remember("answer", slow_answer(&m.text, ctx.remaining()))
        .await?;
    ctx.update(&placeholder.channel, &placeholder.ts, answer)
        .await?;
    Ok(())
}

async fn slow_answer(question: &str, budget: Duration) -> String {
    let wanted = std::env::var("THINKING_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(2));
    tokio::time::sleep(wanted.min(budget.saturating_sub(Duration::from_millis(500)))).await;
    format!(
        "Here is what I think about “{}”: it can be answered exactly once.",
        safe_text(question)
    )
}

pub fn app() -> App {
    App::new().message_where(|m: &MessageEvent| m.mention || m.is_dm(), think)
}

fn main() -> std::process::ExitCode {
    slack_once::run(app())
}
