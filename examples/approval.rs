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
use slack_once::app::manifest::Manifest;
use slack_once::app::{
    Ack, App, BlockAction, Ctx, Error, HandlerResult, Message, Respond, ViewSubmission, safe_text,
};
use slack_once::slack::SlackError;

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

/// The DM's buttons.
fn buttons() -> serde_json::Value {
    blocks::with_block_id(
        blocks::actions([
            blocks::styled(
                blocks::button("Approve", APPROVE, "approve"),
                Style::Primary,
            ),
            blocks::styled(blocks::button("Reject", REJECT, "reject"), Style::Danger),
        ]),
        "approval",
    )
}

/// The DM asking for a decision.
pub fn request(summary: &str) -> Message {
    let head = format!("Approval requested:\n>{}", safe_text(summary));
    Message::text(head.clone()).blocks([blocks::section(head), buttons()])
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

/// The DM once decided: the summary, and who decided what. Its buttons stay while the
/// completion is not confirmed (`buttons`), so that, should it fail, a click again sends the
/// recorded decision; they go once Slack has it.
pub fn decided(summary: &str, d: &Decision, buttons: bool) -> Message {
    let verdict = verdict(d);
    let head = format!("Approval requested:\n>{}", safe_text(summary));
    let mut shown = vec![
        blocks::section(head),
        blocks::context([format!("*{verdict}*")]),
    ];
    if buttons {
        shown.push(self::buttons());
    }
    Message::text(verdict).blocks(shown)
}

/// What a click or submission after the end shows.
pub const ENDED: &str = "This request ended before a decision (the workflow stopped or timed out).";
/// What a Reject shows when the execution is over (its token refused): decided, or stopped.
pub const CLOSED: &str = "This request is closed: decided already, or the workflow stopped.";

pub async fn ask(ctx: Ctx, ex: Execution<Inputs>) -> HandlerResult {
    // A user id as the channel: the DM with the approver.
    match ctx
        .post(&ex.inputs.approver, request(&ex.inputs.summary))
        .await
    {
        Ok(_) => {
            // An earlier run of this request failed the step (Slack refused the DM then, and
            // took it now): the first decision stands, and is completed, as that run would
            // have.
            if let Some(earlier) = ctx.decision().await?.filter(|d| d.mine) {
                let decision = ctx.decide(earlier.end).await?;
                ctx.complete_decision(&decision).await?;
            }
            Ok(())
        }
        // The step's token refused (it expired: a redelivery or a redrive 15 minutes after
        // Slack sent it; or the execution ended): nothing can be done with it, not even
        // failing the step. The request ends `failed`, for an operator to see.
        Err(e @ Error::Slack(SlackError::ExecutionTokenRefused { .. })) => Err(e.into()),
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

/// Shows `message` on the DM with the request's token, while the execution runs (a click whose
/// token was revoked, the execution completed by another click, shows nothing: the other did).
async fn show(ctx: &Ctx, channel: &str, ts: &str, message: Message) -> Result<(), Error> {
    match ctx.update(channel, ts, message).await {
        Err(Error::Slack(SlackError::ExecutionTokenRefused { .. })) => Ok(()),
        other => other,
    }
}

/// Shows `message` in place of the DM through the click's response_url, which needs no token
/// (Slack revokes the execution's when it completes), when Slack gave the click one.
async fn replace(ctx: &Ctx, message: Message) -> Result<(), Error> {
    if ctx.interaction().is_some_and(|i| i.response_url.is_some()) {
        ctx.respond(Respond::replace(message)).await?;
    }
    Ok(())
}

/// A click's decision (its own, or the one recorded before it) shown and completed: the DM
/// shows it with its buttons while the completion is under way, then without them.
async fn settle(ctx: &Ctx, click: &BlockAction, decision: Decision) -> HandlerResult {
    let (Some(channel), Some(ts)) = (&click.channel_id, &click.message_ts) else {
        return Ok(());
    };
    let summary = summary(ctx);
    show(ctx, channel, ts, decided(&summary, &decision, true)).await?;
    match ctx.complete_decision(&decision).await? {
        Completion::Completed => replace(ctx, decided(&summary, &decision, false)).await?,
        // Someone was first: the DM shows their decision, and this person is told.
        Completion::DecidedElsewhere(d) => {
            replace(ctx, decided(&summary, &d, false)).await?;
            if ctx.interaction().is_some_and(|i| i.response_url.is_some()) {
                let text = format!("Decided already: {}", verdict(&d));
                ctx.respond(Respond::ephemeral(text)).await?;
            }
        }
        // Another click is sending its decision and had not confirmed it in time: the DM
        // keeps showing it with its buttons (should that click fail, the next one sends it).
        Completion::Pending(d) => {
            if ctx.interaction().is_some_and(|i| i.response_url.is_some()) {
                let text = format!("Being completed by another click: {}", verdict(&d));
                ctx.respond(Respond::ephemeral(text)).await?;
            }
        }
        Completion::Ended => replace(ctx, Message::text(ENDED)).await?,
    }
    Ok(())
}

pub async fn approve(ctx: Ctx, click: BlockAction) -> HandlerResult {
    let outputs = json!({"decision": "approved", "decided_by": click.user_id});
    // The first decision wins: this click's, or the one recorded before it.
    let decision = ctx.decide(StepEnd::Success(outputs)).await?;
    settle(&ctx, &click, decision).await
}

pub async fn reject(ctx: Ctx, click: BlockAction) -> HandlerResult {
    let (Some(channel), Some(ts)) = (&click.channel_id, &click.message_ts) else {
        return Ok(());
    };
    let reason = blocks::input(REASON_BLOCK, "Why reject?", blocks::text_area(REASON_INPUT));
    let view = blocks::modal(REJECT_VIEW, "Reject", "Reject", [reason])
        .with_metadata(format!("{channel} {ts}"));
    // The trigger lives 3 s: the modal opens at once, while Slack waits (before any read of
    // the ledger, which deferred mode's ingress may not have). A decision made meanwhile is
    // found by the submission.
    match ctx.open_view(view).await {
        Ok(_) => Ok(()),
        // The execution is over (decided and completed, or stopped): Slack revoked its tokens.
        Err(Error::Slack(SlackError::ExecutionTokenRefused { .. })) => {
            Ok(replace(&ctx, Message::text(CLOSED)).await?)
        }
        Err(e) => Err(e.into()),
    }
}

pub async fn rejected(ctx: Ctx, view: ViewSubmission) -> HandlerResult {
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
    // A submission has no response_url: the DM shows the decision that stands (this one, or
    // one made before) with the submission's token, before the completion revokes it; its
    // buttons stay (a click on them later is told, and sends the decision should this
    // completion fail).
    if let Some((channel, ts)) = metadata.split_once(' ') {
        show(&ctx, channel, ts, decided(&summary(&ctx), &decision, true)).await?;
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
        .with_manifest(
            Manifest::new("approval")
                .description("An approval step for Workflow Builder, completed exactly once")
                .background_color("#2c2d30")
                // A takeover looks for the DM it may have sent (a post to a user's id: its DM
                // found with conversations.open, then read).
                .scopes(["im:write", "im:history"]),
        )
}

fn main() -> std::process::ExitCode {
    slack_once::run(app())
}
