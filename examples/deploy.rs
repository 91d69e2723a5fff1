//! Deploy: a command-like message pattern. "deploy api" or "@bot deploy api to prod" gets a
//! :eyes:, a status message in the thread, the (pretend) deployment, the status updated, and a
//! :white_check_mark:. Five writes, each made once.
//!
//!   SLACK_SIGNING_SECRET=dev-secret cargo run --example deploy

use std::time::Duration;

use slack_once::app::{App, Ctx, HandlerResult, Message, MessageEvent, blocks};

async fn deploy(ctx: Ctx, m: MessageEvent) -> HandlerResult {
    let service = m.capture(1).unwrap_or_default().to_string();
    let env = m.capture(2).unwrap_or("staging").to_string();
    ctx.react_to_event("eyes").await?;
    let status = ctx
        .reply(
            Message::text(format!("Deploying {service} to {env}…")).blocks([blocks::section(
                format!(":construction: Deploying *{service}* to *{env}*…"),
            )]),
        )
        .await?;
    let version = pretend_to_deploy(&service, &env, ctx.remaining()).await;
    ctx.update(
        &status.channel,
        &status.ts,
        Message::text(format!("{service} {version} is live on {env}")).blocks([blocks::section(
            format!(":white_check_mark: *{service}* `{version}` is live on *{env}*"),
        )]),
    )
    .await?;
    ctx.react_to_event("white_check_mark").await?;
    Ok(())
}

/// Stands in for a real deployment: deterministic, so a takeover computes the same version.
async fn pretend_to_deploy(service: &str, env: &str, budget: Duration) -> String {
    tokio::time::sleep(Duration::from_millis(300).min(budget)).await;
    let sum: u32 = service.bytes().chain(env.bytes()).map(u32::from).sum();
    format!("v1.{}.{}", sum % 10, sum % 7)
}

pub fn app() -> App {
    App::new().message(r"^deploy\s+([a-z0-9-]+)(?:\s+to\s+([a-z]+))?\s*$", deploy)
}

fn main() -> std::process::ExitCode {
    slack_once::run(app())
}
