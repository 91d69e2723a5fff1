//! The step journal: the rules every Slack write of a listener follows.
//!
//! A **step** is one write to Slack (a post, an update, a reaction, a view, a `response_url`
//! post, a stream's start) or one remembered result ([`crate::app::Ctx::remember`]), numbered
//! in the order the listener makes them (1, 2, …). A claim's steps are kept in its ledger
//! item's journal, so a later claim of the same request (a takeover after a crash, a retry
//! after a failure, a queue's redelivery) that runs the listener again knows, step by step,
//! what the earlier claims did:
//!
//! - **announced**: before its call, a step's *intent* is written to the ledger, conditioned
//!   on the claim's owner, with the fates learnt since the last write; so no write is made to
//!   Slack without a claim still held, and a later claim knows the step may have been made
//!   (and when: a look-up searches only that window). The claim itself stands for the intent
//!   of its first new step while it has written nothing since (its *began* window), where a
//!   later claim can always tell by looking whether that step was made (`steps`);
//! - **recorded**: what the call returned (the ids a replay needs: a message's `ts`) rides on
//!   the claim's next write (the next step's intent, or the finish): one ledger write a step;
//! - **settled**: a later claim that meets a step recorded done replays its result without a
//!   call; one recorded only as an intent (or covered by an earlier claim's began window)
//!   settles it by the one table in [`settle`]: looked for in Slack, made again (where twice
//!   is once), or not made again and said so; a step never announced is made.
//!
//! So a listener must make the same writes in the same order each time it runs for a request:
//! its own computation between steps (an LLM call, a look-up) runs again, its writes do not.
//! `engine` makes one step by these rules; [`crate::app::Ctx`] is the listener's surface.

mod engine;
pub mod record;
pub mod settle;
mod steps;

use serde_json::{Value, json};

pub(crate) use engine::{Call, For, Made, RESPOND, UNANNOUNCED, inside_remember, make, remember};
pub use settle::Settle;
pub(crate) use steps::Steps;

use crate::ledger::LedgerError;

use crate::journal::record::step_op;
use crate::slack::SlackError;

/// At most this many Slack writes (steps) per event. Each is a journal record in the event's
/// ledger item, and every write of the item is billed by its size: a listener that would make
/// more fails with [`Error::JournalFull`] and the event ends `failed` (`journal_full`), once.
pub const MAX_STEPS: u32 = 500;
/// The journal is kept under this many bytes (DynamoDB holds 400 KB an item).
pub const MAX_JOURNAL_BYTES: usize = 64 * 1024;
/// A remembered result ([`crate::app::Ctx::remember`]) is kept in the journal up to this size
/// serialised (the journal holds [64 KiB] in all).
pub const MAX_REMEMBERED_BYTES: usize = 16 * 1024;
/// What a replay returns of a step is kept under this size: the ids (a message's `ts` and
/// `channel`, a file's or a view's id), never Slack's whole answer.
const MAX_RESULT_BYTES: usize = 1024;

/// Why a step of a listener failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Slack refused the call (`ok:false`, an HTTP error, a 429 longer than the deadline
    /// allows), or its answer was lost: [`SlackError::may_have_posted`] says whether it may
    /// have taken effect.
    #[error("the Slack call failed")]
    Slack(#[source] SlackError),
    /// An earlier claim may have made this write, and Slack could not be asked whether it did:
    /// the claim is released so that a later delivery asks again.
    #[error("an earlier claim may have made this write and Slack could not be asked")]
    LookupUnavailable(#[source] SlackError),
    /// The ledger refused the step's intent (the claim was lost to a takeover) or is down: the
    /// write was not made.
    #[error("the step could not be recorded in the ledger")]
    Ledger(#[source] LedgerError),
    /// Run again, the listener made a different write at this step than the first time.
    #[error(
        "step {step} was {recorded} when first run and is {now} now: the listener's writes must be the same each time it runs"
    )]
    Nondeterministic {
        /// The step's number.
        step: u32,
        /// The step's identity as the journal records it (its `op`).
        recorded: String,
        /// The identity of the write the listener makes there now.
        now: String,
    },
    /// The event's claim has ended (the listener returned, or ran out of time): no more steps.
    #[error("the event's claim has ended: no more writes")]
    Closed,
    /// The listener would make more Slack writes for one event than its journal holds
    /// (500 steps, 64 KiB): the write is not made, and the event ends
    /// `failed` (`journal_full`). Make fewer, larger writes (one `chat.update` with the final
    /// text rather than one per token).
    #[error(
        "step {step} would make the event's journal larger than it may grow ({MAX_STEPS} steps, {MAX_JOURNAL_BYTES} bytes)"
    )]
    JournalFull {
        /// The number of the step refused.
        step: u32,
    },
    /// A write (`method`) was made from inside the computation [`crate::app::Ctx::remember`]
    /// runs at step `step`: a run that finds the result remembered would not make it, so the
    /// listener's writes would differ between runs. Write before or after `remember`.
    #[error(
        "{method} was called inside the computation remembered at step {step}: write before or after ctx.remember"
    )]
    InsideRemember {
        /// The step of the remembered computation.
        step: u32,
        /// The write's Web API method (or, for a state change, `state change "NAME"`).
        method: String,
    },
    /// A stream's task update would move the task back (`complete` to `in_progress`, say) or
    /// change a finished task: refused before anything is sent.
    #[error("task {task} is {from} and cannot become {to}: a task moves forward only")]
    TaskMovedBack {
        /// The task's id.
        task: String,
        /// Its status.
        from: &'static str,
        /// The status asked for.
        to: &'static str,
    },
    /// A state change (`what`) in a request the ledger never claims (a `block_suggestion`: an
    /// options request, answered at once and never de-duplicated): with no claim to record it
    /// with, it could not be made once per request, so it is refused, never skipped.
    #[error(
        "{what} needs a request the ledger claims, and an options request (block_suggestion) is never claimed: change state in the action that follows the choice"
    )]
    Unclaimed {
        /// The change: `state change "NAME"`.
        what: String,
    },
    /// A Web API method that writes was given to [`crate::app::Ctx::read`], which makes reads
    /// only: a write made there would be a write the journal never sees (made again on every
    /// retry and takeover). Nothing was sent.
    #[error(
        "ctx.read makes reads only, and {method} writes to Slack: make it a step of the journal with ctx.call(\"{method}\", args, Settle::…) (or ctx.post, ctx.update, ctx.react…)"
    )]
    NotARead {
        /// The method refused.
        method: String,
    },
    /// A step's completion ([`crate::app::Ctx::complete`], `fail`, `decide`) in a request that
    /// is not in a step's execution (neither `function_executed` nor a click or submission
    /// carrying `function_data`). Nothing was recorded or sent.
    #[error(
        "{what} needs a request in a Workflow Builder step's execution (function_executed, or an interaction with function_data)"
    )]
    NotAStep {
        /// The call refused.
        what: String,
    },
    /// The outputs given to [`crate::app::Ctx::complete`] do not match the function's declared
    /// output parameters: nothing was recorded or sent (Slack would refuse them,
    /// `parameter_validation_failed`).
    #[error("{reason}")]
    InvalidOutputs {
        /// What is wrong, output by output.
        reason: String,
    },
}

impl Error {
    /// Slack's error code (`channel_not_found`, `not_in_channel`, `ratelimited`…) when Slack
    /// refused the call with `ok:false`.
    ///
    /// ```
    /// # async fn f(ctx: slack_once::app::Ctx) -> slack_once::app::HandlerResult {
    /// match ctx.post("C0NOTHERE", "hi").await {
    ///     Err(e) if e.slack_code() == Some("not_in_channel") => Ok(()), // not invited: fine
    ///     other => {
    ///         other?;
    ///         Ok(())
    ///     }
    /// }
    /// # }
    /// ```
    pub fn slack_code(&self) -> Option<&str> {
        match self {
            Error::Slack(e) | Error::LookupUnavailable(e) => e.code(),
            _ => None,
        }
    }
}

/// What a claim's steps came to, for the outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Writes made to Slack by this claim.
    pub made: u32,
    /// Writes found done (recorded, or looked up in Slack) from an earlier claim.
    pub settled: u32,
    /// Writes an earlier claim may have made that could be neither looked for nor made again:
    /// not made twice, and not said to be answered (the request ends `failed`,
    /// `unconfirmed_write`).
    pub unconfirmed: u32,
}

/// What a step gives its caller, and so what its journal record keeps for a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Returns {
    /// The ids of Slack's answer (a message's `ts` and `channel`…).
    Ids,
    /// Nothing (an update, a deletion, a reaction): the record keeps no result at all.
    Nothing,
}

/// A step's identity: its method, and the conversation and thread (or message) it writes to.
pub(crate) fn step_identity(method: &str, args: &Value) -> String {
    let text = |key: &str| args.get(key).and_then(Value::as_str).unwrap_or_default();
    let target = [
        "thread_ts",
        "ts",
        "timestamp",
        "users",
        "user",
        "view_id",
        "function_execution_id",
    ]
    .iter()
    .map(|k| text(k))
    .find(|t| !t.is_empty())
    .unwrap_or_default();
    step_op(method, text("channel"), target)
}

/// Epoch milliseconds as a Slack `ts` (`"1700000000.123000"`).
pub(crate) fn slack_ts(ms: u64) -> String {
    format!("{}.{:03}000", ms / 1000, ms % 1000)
}

/// What a replay of a step needs of Slack's answer: the ids it returns (a message's `ts` and
/// `channel`, an ephemeral's `message_ts`, a conversation's, file's or view's `id`), not the
/// whole answer (a `chat.update`'s answer holds the whole message).
pub(crate) fn recordable(answer: &Value) -> String {
    let mut kept = serde_json::Map::new();
    kept.insert("ok".into(), true.into());
    for key in ["ts", "message_ts", "thread_ts", "already"] {
        if let Some(v @ Value::String(_)) = answer.get(key) {
            kept.insert(key.into(), v.clone());
        }
    }
    // A step settled unconfirmed stays so for every later claim that replays it.
    if answer.get("unknown") == Some(&Value::Bool(true)) {
        kept.insert("unknown".into(), true.into());
    }
    for key in ["channel", "file", "view"] {
        match answer.get(key) {
            Some(v @ Value::String(_)) => {
                kept.insert(key.into(), v.clone());
            }
            Some(Value::Object(o)) => {
                if let Some(id) = o.get("id") {
                    kept.insert(key.into(), json!({ "id": id }));
                }
            }
            _ => {}
        }
    }
    let text = Value::Object(kept).to_string();
    if text.len() <= MAX_RESULT_BYTES {
        text
    } else {
        json!({"ok": true, "trimmed": true}).to_string()
    }
}
