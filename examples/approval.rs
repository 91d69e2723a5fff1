//! An approval step for Workflow Builder: the function `request_approval` (inputs `approver`, a
//! user, and `summary`, text; outputs `decision`, `approved` or `rejected`, `decided_by`, a
//! user, and `reason`, text, given on a rejection) DMs the approver the summary with Approve
//! and Reject, and waits. Approve completes the step; Reject opens a modal asking why, whose
//! submission completes it with the reason. The DM then shows the decision.
//!
//! Exactly once, whatever arrives: Slack's retries of `function_executed` send one DM; two
//! clicks at once, a double click, a click repeated after a crash complete the step once, with
//! the first decision (the others see the message updated with it); a click after the workflow
//! stopped completes nothing and says so. Every call for the execution goes with the token
//! Slack sent for it (the step's, or the click's own).
//!
//!   SLACK_SIGNING_SECRET=dev-secret cargo run --example approval
//!   cargo run --example approval -- manifest      (the app manifest, its function included)

use serde::Deserialize;
use serde_json::json;
use slack_once::app::blocks::{self, Style};
use slack_once::app::function::{Completion, Decision, Execution, Function, StepEnd, types};
use slack_once::app::{
    Ack, App, BlockAction, Ctx, Error, HandlerResult, Message, Respond, ViewSubmission, safe_text,
};

pub const CALLBACK_ID: &str = "request_approval";
pub const APPROVE: &str = "approval_approve";
pub const REJECT: &str = "approval_reject";
pub const REJECT_VIEW: &str = "approval_reject_view";
pub const REASON_BLOCK: &str = "reason";
pub const REASON_INPUT: &str = "reason_text";

/// The step as the manifest declares it.
pub fn function() -> Function {
    Function::new(CALLBACK_ID, "Request approval")
        .description("Asks someone to approve or reject, and waits for their decision")
        .input("approver", types::USER_ID, "Approver")
        .input("summary", types::STRING, "What to approve")
        .output("decision", types::STRING, "Decision (approved or rejected)")
        .output("decided_by", types::USER_ID, "Decided by")
        .optional_output("reason", types::STRING, "Reason for a rejection")
}

/// The step's inputs.
#[derive(Debug, Deserialize)]
pub struct Inputs {
    pub approver: String,
    pub summary: String,
}

/// The DM asking for a decision.
pub fn request(summary: &str) -> Message {
    let head = format!("Approval requested:\n>{}", safe_text(summary));
    Message::text(head.clone()).blocks([
        blocks::section(head),
        blocks::with_block_id(
            blocks::actions([
                blocks::styled(
                    blocks::button("Approve", APPROVE, "approve"),
                    Style::Primary,
                ),
                blocks::styled(blocks::button("Reject", REJECT, "reject"), Style::Danger),
            ]),
            "approval",
        ),
    ])
}

/// The DM once decided: the summary, and who decided what.
pub fn decided(summary: &str, d: &Decision) -> Message {
    let outcome = match &d.end {
        StepEnd::Success(o) => match (o["decision"].as_str(), o["reason"].as_str()) {
            (Some("rejected"), Some(reason)) => format!("Rejected: {}", safe_text(reason)),
            (Some("rejected"), None) => "Rejected".to_string(),
            _ => "Approved".to_string(),
        },
        StepEnd::Error(e) => format!("Failed: {e}"),
    };
    let by =
        d.by.as_deref()
            .map(|u| format!(" by <@{u}>"))
            .unwrap_or_default();
    let head = format!("Approval requested:\n>{}", safe_text(summary));
    Message::text(format!("{outcome}{by}")).blocks([
        blocks::section(head),
        blocks::context([format!("*{outcome}*{by}")]),
    ])
}

/// What a click or submission after the end shows.
pub const ENDED: &str = "This request ended before a decision (the workflow stopped or timed out).";

async fn ask(ctx: Ctx, ex: Execution<Inputs>) -> HandlerResult {
    // A user id as the channel: the DM with the approver.
    match ctx
        .post(&ex.inputs.approver, request(&ex.inputs.summary))
        .await
    {
        Ok(_) => Ok(()),
        Err(Error::Slack(e)) if e.is_permanent() => {
            let code = e.code().unwrap_or("refused").to_string();
            ctx.fail(format!("The approver could not be messaged ({code})."))
                .await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

fn summary(ctx: &Ctx) -> String {
    ctx.execution()
        .and_then(|e| e.inputs["summary"].as_str().map(str::to_string))
        .unwrap_or_default()
}

async fn approve(ctx: Ctx, click: BlockAction) -> HandlerResult {
    let outputs = json!({"decision": "approved", "decided_by": click.user_id});
    let shown = match ctx.complete(outputs).await? {
        Completion::Completed => {
            let d = ctx.decision().await?.expect("recorded");
            decided(&summary(&ctx), &d)
        }
        Completion::DecidedElsewhere(d) => decided(&summary(&ctx), &d),
        Completion::Ended => Message::text(ENDED),
    };
    ctx.respond(Respond::replace(shown)).await?;
    Ok(())
}

async fn reject(ctx: Ctx, _click: BlockAction) -> HandlerResult {
    // Decided already (the other button, another click): the message shows it, no modal.
    if let Some(d) = ctx.decision().await? {
        ctx.respond(Respond::replace(decided(&summary(&ctx), &d)))
            .await?;
        return Ok(());
    }
    let (Some(channel), Some(ts)) = (&_click.channel_id, &_click.message_ts) else {
        return Ok(());
    };
    let reason = blocks::input(REASON_BLOCK, "Why reject?", blocks::text_area(REASON_INPUT));
    let view = blocks::modal(REJECT_VIEW, "Reject", "Reject", [reason])
        .with_metadata(format!("{channel} {ts}"));
    // The trigger lives 3 s: the modal opens while Slack waits.
    match ctx.open_view(view).await {
        Ok(_) => Ok(()),
        // The execution ended meanwhile: Slack revoked its tokens.
        Err(e) if e.slack_code() == Some("token_revoked") => {
            ctx.respond(Respond::replace(Message::text(ENDED))).await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

async fn rejected(ctx: Ctx, view: ViewSubmission) -> HandlerResult {
    let reason = view
        .values
        .get(REASON_BLOCK, REASON_INPUT)
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty());
    let Some(reason) = reason else {
        ctx.ack(Ack::errors([(REASON_BLOCK, "Say why")])).await?;
        return Ok(());
    };
    ctx.ack(Ack::empty()).await?;
    let outputs = json!({"decision": "rejected", "decided_by": view.user_id, "reason": reason});
    let decision = ctx.decide(StepEnd::Success(outputs)).await?;
    let metadata = view.private_metadata.clone().unwrap_or_default();
    if decision.mine
        && let Some((channel, ts)) = metadata.split_once(' ')
    {
        // Shown before the completion: Slack revokes the execution's tokens when it completes.
        ctx.update(channel, ts, decided(&summary(&ctx), &decision))
            .await?;
    }
    ctx.complete_decision(&decision).await?;
    Ok(())
}

pub fn app() -> App {
    App::new()
        .function(function(), ask)
        .action(APPROVE, approve)
        .action(REJECT, reject)
        .view_submission(REJECT_VIEW, rejected)
}

fn main() -> std::process::ExitCode {
    slack_once::run(app())
}
