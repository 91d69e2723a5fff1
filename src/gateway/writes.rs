//! The bot's calls, made under the run's claim: each write a step of the request's journal,
//! settled by the rule its method needs when a later run does not know its fate; reads
//! passed through; the same write sent again at once (an SDK's own retry) answered as the first.

use serde_json::{Value, json};

use super::{Answered, Call};
use crate::app::function::{Completion, NOT_RUNNING, StepEnd};
use crate::app::{BotError, Ctx, Error as StepError, Respond, Settle};
use crate::journal::Returns;
use crate::ledger::LedgerError;
use crate::slack::SlackError;

/// The method name under which the proxy takes a post to the request's `response_url`.
pub(crate) const RESPOND_METHOD: &str = "respond";

/// Arguments Slack takes as JSON, which a form carries as JSON text.
const JSON_ARGUMENTS: [&str; 8] = [
    "blocks",
    "attachments",
    "metadata",
    "view",
    "unfurls",
    "outputs",
    "chunks",
    "user_auth_blocks",
];

/// A write made, its arguments and the answer it was given.
type Made = (String, Value, Answered);

/// One run's calls: the writes made (an SDK's retry of one is the same step), and the first
/// write that failed.
#[derive(Default)]
pub(crate) struct RunWrites {
    /// The writes Slack took, in order.
    made: Vec<Made>,
    /// The step completions this run sent whose fate is unknown (Slack may have made them).
    completions_in_doubt: Vec<(String, Value)>,
    failed: Option<BotError>,
}

impl RunWrites {
    /// Makes `call` and sends its answer back to the proxy.
    pub(crate) async fn make(&mut self, ctx: &Ctx, call: Call) {
        let Call {
            method,
            args,
            answer,
        } = call;
        let args = with_json_arguments(args);
        let answered = match self.sent_again(&method, &args) {
            Some(answered) => {
                tracing::info!(method, "the same write sent again: answered as the first");
                answered
            }
            None => match write(
                ctx,
                &method,
                args.clone(),
                self.sent_in_doubt(&method, &args),
            )
            .await
            {
                Ok(body) => {
                    let answered = Answered::ok(body);
                    if !crate::slack::is_read_method(&method) && answered.0["ok"] == true {
                        self.made.push((method, args, answered.clone()));
                    }
                    answered
                }
                Err(error) => {
                    if is_completion(&method)
                        && matches!(&error, StepError::Slack(e) if e.may_have_posted())
                    {
                        self.completions_in_doubt.push((method.clone(), args));
                    }
                    self.refused(&method, error)
                }
            },
        };
        // The bot may have gone: its answer has nowhere to go, and its SDK sends the write again.
        let _ = answer.send(answered);
    }

    /// The answer of an earlier write of the run that this call repeats, with nothing made
    /// since that changed what it made (the reaction removed, the message updated again): an
    /// SDK's retry after a lost answer, whatever the run wrote in between. A read, or a write
    /// that failed, is made again.
    fn sent_again(&self, method: &str, args: &Value) -> Option<Answered> {
        if crate::slack::is_read_method(method) {
            return None;
        }
        for (m, a, answered) in self.made.iter().rev() {
            if m == method && a == args {
                return Some(answered.clone());
            }
            if undoes(m, a, method, args) {
                return None;
            }
        }
        None
    }

    /// Whether this run sent this completion before and does not know whether Slack made it:
    /// sent again, Slack's refusal of a second completion is that first one's success.
    fn sent_in_doubt(&self, method: &str, args: &Value) -> bool {
        self.completions_in_doubt
            .iter()
            .any(|(m, a)| m == method && a == args)
    }

    /// The listener is run again from its first step (another replica): a call is no longer
    /// the retry of one before.
    pub(crate) fn run_again(&mut self) {
        self.made.clear();
        self.completions_in_doubt.clear();
    }

    /// The first write that failed, if one did.
    pub(crate) fn failed_step(&self) -> Option<&BotError> {
        self.failed.as_ref()
    }

    /// The run's failure when no replica answered: the failed write's, if one failed.
    pub(crate) fn failure_or(self, why: &str) -> BotError {
        self.failed.unwrap_or_else(|| why.into())
    }

    fn refused(&mut self, method: &str, error: StepError) -> Answered {
        let code = error_code(&error).to_string();
        match &error {
            StepError::Nondeterministic { .. } => {
                tracing::error!(method, error = %error, "the bot made a different write than its earlier run at this step: not made");
            }
            _ => tracing::warn!(method, code = %code, "a write of the bot's was not made"),
        }
        if self.failed.is_none() {
            self.failed = Some(Box::new(error));
        }
        Answered::error(&code)
    }
}

/// The Slack-shaped error code the bot is answered with.
fn error_code(error: &StepError) -> &str {
    match error {
        StepError::Slack(SlackError::Api { code }) => code,
        StepError::Slack(SlackError::RateLimited { .. }) => "ratelimited",
        StepError::Slack(_) | StepError::LookupUnavailable(_) => "slack_once_unavailable",
        StepError::Ledger(LedgerError::NotOwner { .. }) | StepError::Closed => {
            "slack_once_request_ended"
        }
        StepError::Ledger(_) => "slack_once_unavailable",
        StepError::Nondeterministic { .. } | StepError::InsideRemember { .. } => {
            "slack_once_different_write"
        }
        StepError::JournalFull { .. } => "slack_once_journal_full",
        _ => "slack_once_refused",
    }
}

/// A Workflow Builder step's completion.
fn is_completion(method: &str) -> bool {
    matches!(
        method,
        "functions.completeSuccess" | "functions.completeError"
    )
}

/// A call made under the run's claim: a read passed through, a write made as a step (a
/// completion `sent_in_doubt` by this run before, see [`completion`]).
async fn write(
    ctx: &Ctx,
    method: &str,
    args: Value,
    sent_in_doubt: bool,
) -> Result<Value, StepError> {
    if method == RESPOND_METHOD {
        ctx.respond(Respond::from_body(args)).await?;
        return Ok(json!({"ok": true}));
    }
    if crate::slack::is_read_method(method) {
        return ctx.read(method, args).await;
    }
    if is_completion(method) {
        return completion(ctx, method, args, sent_in_doubt).await;
    }
    let text = |key: &str| args[key].as_str().map(str::to_string);
    let (channel, thread_ts) = (text("channel").unwrap_or_default(), text("thread_ts"));
    let (settle, benign): (Settle<'_>, &[&str]) = match method {
        "chat.postMessage" => (
            Settle::Lookup {
                channel: &channel,
                thread_ts: thread_ts.as_deref(),
            },
            &[],
        ),
        "chat.update" | "views.update" | "views.publish" | "conversations.open" => {
            (Settle::Idempotent, &[])
        }
        "chat.delete" => (Settle::Idempotent, &["message_not_found"]),
        "reactions.add" => (Settle::Idempotent, &["already_reacted"]),
        "reactions.remove" => (Settle::Idempotent, &["no_reaction"]),
        "views.open" | "views.push" => (Settle::View, &[]),
        _ => (Settle::AtMostOnce, &[]),
    };
    let answer = ctx
        .journaled(method, args.clone(), settle, benign, Returns::Ids)
        .await?;
    if answer["unknown"] == true {
        // An earlier run may have made it, and Slack keeps nothing to look it up by.
        return Ok(json!({"ok": false, "error": "slack_once_unconfirmed_write"}));
    }
    Ok(answer)
}

/// A step's completion, made as the Rust listeners' is: again when an earlier run of this
/// request announced it and its fate is unknown (or this run sent it, `sent_in_doubt`, and
/// sends it again), and then Slack's refusal of a second completion
/// (`execution_not_in_running_state`, `token_revoked`, `function_execution_not_found`) is that
/// earlier call's success. Never sent before by this request, the same refusal is Slack's own
/// answer to the bot: another request (a second approver's click) or another completion of
/// this run decided the step, not this call.
async fn completion(
    ctx: &Ctx,
    method: &str,
    args: Value,
    sent_in_doubt: bool,
) -> Result<Value, StepError> {
    if !sent_in_doubt && let Some(end) = own_step_end(ctx, method, &args) {
        return decided(ctx, end).await;
    }
    let answer = ctx
        .journaled_announced(
            method,
            args,
            Settle::Idempotent,
            &crate::app::function::COMPLETION_MADE_ALREADY,
            sent_in_doubt,
            Returns::Ids,
        )
        .await?;
    match answer["already"]
        .as_str()
        .and_then(|a| a.strip_prefix(crate::journal::UNANNOUNCED))
    {
        Some(code) => Err(StepError::Slack(SlackError::Api {
            code: code.to_string(),
        })),
        None => Ok(answer),
    }
}

/// How the bot ends the request's own step execution (`functions.completeSuccess` with an
/// object of outputs, `functions.completeError` with a message), or `None` for a completion of
/// another execution, or one Slack refuses for its arguments.
fn own_step_end(ctx: &Ctx, method: &str, args: &Value) -> Option<StepEnd> {
    let execution = ctx.execution()?;
    if args["function_execution_id"].as_str() != Some(execution.id.as_str()) {
        return None;
    }
    match method {
        "functions.completeSuccess" if args["outputs"].is_object() => {
            Some(StepEnd::Success(args["outputs"].clone()))
        }
        "functions.completeError" => args["error"]
            .as_str()
            .filter(|e| !e.is_empty())
            .map(|e| StepEnd::Error(e.to_string())),
        _ => None,
    }
}

/// The request's own step ended with `end` as the Rust listeners end theirs
/// (`Ctx::decide`, then `Ctx::complete_decision`): the first decision recorded for the
/// execution is the one sent, once, whichever request sends it. The bot is answered `ok` when
/// the step ended with its decision, else as Slack answers a completion of an execution that
/// another decision ended: `execution_not_in_running_state`.
async fn decided(ctx: &Ctx, end: StepEnd) -> Result<Value, StepError> {
    let decision = ctx.decide(end.clone()).await?;
    if decision.mine && decision.end != end {
        // This request decided otherwise before (its run's earlier completion): that stands.
        return Err(not_running());
    }
    match ctx.complete_decision(&decision).await? {
        Completion::Completed => Ok(json!({"ok": true})),
        Completion::DecidedElsewhere(_) | Completion::Pending(_) | Completion::Ended => {
            Err(not_running())
        }
    }
}

fn not_running() -> StepError {
    StepError::Slack(SlackError::Api {
        code: NOT_RUNNING.to_string(),
    })
}

/// Whether `later(later_args)`, made after `method(args)`, changes what that made, so that
/// making `method(args)` again is a write of its own (a reaction added again after its removal).
fn undoes(later: &str, later_args: &Value, method: &str, args: &Value) -> bool {
    let same = |keys: &[&str]| keys.iter().all(|k| later_args.get(*k) == args.get(*k));
    match (method, later) {
        ("reactions.add", "reactions.remove") | ("reactions.remove", "reactions.add") => {
            same(&["channel", "timestamp", "name"])
        }
        ("chat.update", "chat.update" | "chat.delete") => same(&["channel", "ts"]),
        ("views.update", "views.update") => same(&["view_id", "external_id"]),
        ("views.publish", "views.publish") => same(&["user_id"]),
        _ => false,
    }
}

/// A form's JSON arguments (`blocks`, `view`…) as JSON, so that the same write reads the same
/// whichever way the bot's SDK encodes it, and the metadata slack-once adds to a post merges
/// with the bot's own.
fn with_json_arguments(mut args: Value) -> Value {
    if let Some(map) = args.as_object_mut() {
        for key in JSON_ARGUMENTS {
            if let Some(Value::String(text)) = map.get(key)
                && let Ok(parsed @ (Value::Array(_) | Value::Object(_))) =
                    serde_json::from_str::<Value>(text)
            {
                map.insert(key.to_string(), parsed);
            }
        }
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forms_json_arguments_read_as_the_same_json_body() {
        let form = json!({"channel": "C1", "blocks": "[{\"type\":\"divider\"}]", "text": "[x]"});
        let body = json!({"channel": "C1", "blocks": [{"type": "divider"}], "text": "[x]"});
        assert_eq!(with_json_arguments(form), body);
    }

    #[test]
    fn a_reaction_removed_since_makes_adding_it_again_a_write_of_its_own() {
        let eyes = json!({"channel": "C1", "timestamp": "1.2", "name": "eyes"});
        let tada = json!({"channel": "C1", "timestamp": "1.2", "name": "tada"});
        assert!(undoes("reactions.remove", &eyes, "reactions.add", &eyes));
        assert!(!undoes("reactions.remove", &tada, "reactions.add", &eyes));
        assert!(!undoes("chat.postMessage", &eyes, "reactions.add", &eyes));
        let edit = json!({"channel": "C1", "ts": "1.3", "text": "b"});
        assert!(undoes(
            "chat.update",
            &edit,
            "chat.update",
            &json!({"channel": "C1", "ts": "1.3", "text": "a"})
        ));
    }

    #[test]
    fn every_failure_is_answered_with_a_slack_shaped_code() {
        let api = StepError::Slack(SlackError::Api {
            code: "channel_not_found".into(),
        });
        assert_eq!(error_code(&api), "channel_not_found");
        assert_eq!(error_code(&StepError::Closed), "slack_once_request_ended");
        let different = StepError::Nondeterministic {
            step: 2,
            recorded: "chat.postMessage C1".into(),
            now: "reactions.add C1".into(),
        };
        assert_eq!(error_code(&different), "slack_once_different_write");
        assert_eq!(
            error_code(&StepError::Slack(SlackError::Timeout)),
            "slack_once_unavailable"
        );
    }
}
