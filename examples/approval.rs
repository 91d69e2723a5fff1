//! An approval step for Workflow Builder: the function `request_approval` (inputs `approver`, a
//! user, and `summary`, text; outputs `decision`, `approved` or `rejected`, `decided_by`, a
//! user, and `reason`, text, given on a rejection) DMs the approver the summary with Approve
//! and Reject, and waits. Approve completes the step; Reject opens a modal asking why, whose
//! submission completes it with the reason. The DM then shows the decision.
//!
//! Exactly once, whatever arrives: Slack's retries of `function_executed` send one DM; two
//! clicks at once, a double click, a click repeated after a crash complete the step once, with
//! the first decision (the DM shows it, naming who decided, before the completion: Slack
//! revokes the execution's tokens when it completes); a click after the workflow stopped
//! completes nothing and says so (through the click's `response_url`). Every call for the
//! execution goes with the token Slack sent for it (the step's, or the click's own).
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

/// A decision in a few words: "Approved by <@U…>", "Rejected: the reason by <@U…>".
pub fn verdict(d: &Decision) -> String {
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
    format!("{outcome}{by}")
}

/// The DM once decided: the summary, and who decided what.
pub fn decided(summary: &str, d: &Decision) -> Message {
    let head = format!("Approval requested:\n>{}", safe_text(summary));
    let verdict = verdict(d);
    Message::text(verdict.clone()).blocks([
        blocks::section(head),
        blocks::context([format!("*{verdict}*")]),
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

/// What a click shows: the decision on the DM, with the click's token while the execution runs
/// (Slack revokes it when the step completes: shown before the completion). A click on a DM
/// whose execution was completed by another click finds its token revoked: the other click
/// showed the decision.
async fn show(ctx: &Ctx, channel: &str, ts: &str, message: Message) -> Result<(), Error> {
    match ctx.update(channel, ts, message).await {
        Err(e) if e.slack_code() == Some("token_revoked") => Ok(()),
        other => other,
    }
}

/// The execution ended before any decision: said through the click's response_url (it needs
/// no token), when Slack gave the click one.
async fn ended(ctx: &Ctx) -> Result<(), Error> {
    if ctx.interaction().is_some_and(|i| i.response_url.is_some()) {
        ctx.respond(Respond::replace(Message::text(ENDED))).await?;
    } else {
        tracing::warn!("the step had ended before the click, and the click has no response_url");
    }
    Ok(())
}

async fn approve(ctx: Ctx, click: BlockAction) -> HandlerResult {
    let (Some(channel), Some(ts)) = (&click.channel_id, &click.message_ts) else {
        return Ok(());
    };
    let outputs = json!({"decision": "approved", "decided_by": click.user_id});
    // The first decision wins: this click's, or the one recorded before it.
    let decision = ctx.decide(StepEnd::Success(outputs)).await?;
    show(&ctx, channel, ts, decided(&summary(&ctx), &decision)).await?;
    match ctx.complete_decision(&decision).await? {
        Completion::Completed => {}
        // Someone was first: this person is told who, privately.
        Completion::DecidedElsewhere(d) => told(&ctx, &d).await?,
        Completion::Ended => ended(&ctx).await?,
    }
    Ok(())
}

/// Tells the person who clicked that `d` was decided first, through the click's response_url.
async fn told(ctx: &Ctx, d: &Decision) -> Result<(), Error> {
    if ctx.interaction().is_some_and(|i| i.response_url.is_some()) {
        ctx.respond(Respond::ephemeral(format!(
            "Decided already: {}",
            verdict(d)
        )))
        .await?;
    }
    Ok(())
}

async fn reject(ctx: Ctx, click: BlockAction) -> HandlerResult {
    let (Some(channel), Some(ts)) = (&click.channel_id, &click.message_ts) else {
        return Ok(());
    };
    // Decided already (the other button, another click): the message shows it, no modal.
    if let Some(d) = ctx.decision().await? {
        show(&ctx, channel, ts, decided(&summary(&ctx), &d)).await?;
        return Ok(());
    }
    let reason = blocks::input(REASON_BLOCK, "Why reject?", blocks::text_area(REASON_INPUT));
    let view = blocks::modal(REJECT_VIEW, "Reject", "Reject", [reason])
        .with_metadata(format!("{channel} {ts}"));
    // The trigger lives 3 s: the modal opens while Slack waits.
    match ctx.open_view(view).await {
        Ok(_) => Ok(()),
        // The execution ended meanwhile: Slack revoked its tokens.
        Err(e) if e.slack_code() == Some("token_revoked") => Ok(ended(&ctx).await?),
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
    if let Some((channel, ts)) = metadata.split_once(' ') {
        show(&ctx, channel, ts, decided(&summary(&ctx), &decision)).await?;
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
