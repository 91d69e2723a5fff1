//! Workflow Builder steps: an app's functions, declared in code ([`Function`]), run as
//! listeners ([`crate::app::App::function`]) and completed exactly once per execution,
//! whichever request completes it (the step's own `function_executed`, or a click or a view
//! submission in a message or view the step made, hours later).
//!
//! **The execution's record.** Completing is a decision first, then a write. [`Ctx::decide`]
//! records the request's decision (the outputs, or an error) in the app's state under the
//! execution's id, unless a decision is there already: the first decision wins, and the
//! change is recorded with the request's claim, so the request's retries, takeovers,
//! redeliveries and redrives find it made (see [`crate::app::State::change`]).
//! [`Ctx::complete_decision`] then sends it (`functions.completeSuccess` or
//! `functions.completeError`) as a journaled step, and closes the record. A request that finds
//! another request's run completing the decision (its lease on, or its mark held) sends nothing
//! while that lease lasts, and reports nothing on trust (that run may still fail): it waits,
//! within its own deadline, for the record to close, or is released for a later delivery.
//! Past that lease, with the record still open (the decider died between its decision and its
//! completion), it sends the recorded decision itself: the decider's, never its own. Only the
//! run that holds the record's mark (`sending`: its request and its lease) sends: a run about
//! to send under a mark it did not write takes it first, by a write of its own conditioned on
//! the record's version and made anew by every run, so that of two runs about to send (the
//! decider's redelivery, a click sending for the dead decider) one sends.
//!
//! **A completion whose answer was lost** is settled by what the journal knows: sent again, an
//! announced completion (this step's intent, or an earlier claim standing for it, or another
//! request's recorded decision) answered `execution_not_in_running_state` was this one's; a
//! completion never announced and answered so found the execution ended by something else
//! (the workflow stopped, or it was completed outside slack-once): [`Completion::Ended`].
//!
//! **Tokens.** Every Slack call made for an execution goes with the token Slack sent in the
//! request (`bot_access_token`: the step's, or the click's own), never the installation's and
//! never another execution's, and is never logged. Slack revokes an execution's tokens when it
//! ends, and each expires 15 minutes after it is issued: write what the person should see before
//! the completion (see [`Ctx::decide`]), or through the click's `response_url`, which needs
//! no token.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::Ctx;
use crate::journal::{Error, Returns, Settle};

/// How long an execution's record is kept: as long as a step may wait for a person. Slack
/// documents no limit for a step of an app that runs its own functions (the 60 s and 15 s limits
/// are for functions Slack hosts), so the record is kept 30 days; a click later than that finds
/// no record, decides anew, and its completion is refused by Slack
/// (`execution_not_in_running_state`) if the execution ended: [`Completion::Ended`].
pub const EXECUTION_RECORD_TTL: Duration = Duration::from_secs(30 * 86_400);

/// Slack's answer to a completion of an execution that is no longer running.
pub(crate) const NOT_RUNNING: &str = "execution_not_in_running_state";
/// Slack's answers to a completion made again after the first was made: the step is no longer
/// running, its token revoked with it, or the execution gone.
pub(crate) const COMPLETION_MADE_ALREADY: [&str; 3] =
    [NOT_RUNNING, "token_revoked", "function_execution_not_found"];

/// The time a run keeps, after its last look at a record another request's run is sending, to
/// take the mark over and send the completion itself before its own deadline.
const SENDING_MARGIN: Duration = Duration::from_secs(2);

/// How soon a run waiting for another request's run to complete the decision first reads the
/// execution's record again; each later look waits twice as long, up to [`LOOK_AGAIN_AT_MOST`]
/// (a run held 15 minutes by a Slack that does not answer costs its waiter about a hundred
/// reads, not thousands).
const LOOK_AGAIN: Duration = Duration::from_millis(500);

/// The longest wait between two looks at a record another request's run is completing.
const LOOK_AGAIN_AT_MOST: Duration = Duration::from_secs(8);

/// The types a function's parameters may have (`type` in the manifest).
pub mod types {
    /// Text.
    pub const STRING: &str = "string";
    /// A whole number.
    pub const INTEGER: &str = "integer";
    /// A number.
    pub const NUMBER: &str = "number";
    /// `true` or `false`.
    pub const BOOLEAN: &str = "boolean";
    /// A user's id (`U…`, `W…`).
    pub const USER_ID: &str = "slack#/types/user_id";
    /// A conversation's id (`C…`, `G…`, `D…`).
    pub const CHANNEL_ID: &str = "slack#/types/channel_id";
    /// A user group's id (`S…`).
    pub const USERGROUP_ID: &str = "slack#/types/usergroup_id";
    /// A Unix timestamp (seconds).
    pub const TIMESTAMP: &str = "slack#/types/timestamp";
    /// Formatted text (a `rich_text` block).
    pub const RICH_TEXT: &str = "slack#/types/rich_text";
    /// A date (`YYYY-MM-DD`).
    pub const DATE: &str = "slack#/types/date";
}

/// One input or output parameter of a [`Function`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parameter {
    /// Its name: the key in `inputs` and `outputs`.
    pub name: String,
    /// Its type (see [`types`]).
    pub kind: String,
    /// Its title, as Workflow Builder shows it.
    pub title: String,
    /// Its description, if any.
    pub description: Option<String>,
    /// Whether it must be given.
    pub required: bool,
}

impl Parameter {
    fn manifest(&self) -> Value {
        let mut p = json!({
            "type": self.kind,
            "title": self.title,
            "is_required": self.required,
        });
        if let Some(d) = &self.description {
            p["description"] = d.clone().into();
        }
        p
    }

    /// Whether `value` is of this parameter's type, as far as its JSON shows it.
    fn accepts(&self, value: &Value) -> bool {
        match self.kind.as_str() {
            types::INTEGER => value.is_i64() || value.is_u64(),
            types::NUMBER | types::TIMESTAMP => value.is_number(),
            types::BOOLEAN => value.is_boolean(),
            types::RICH_TEXT => value.is_object() || value.is_array(),
            types::USER_ID => value
                .as_str()
                .is_some_and(|s| s.starts_with('U') || s.starts_with('W')),
            types::CHANNEL_ID => value
                .as_str()
                .is_some_and(|s| s.starts_with(['C', 'G', 'D'])),
            types::USERGROUP_ID => value.as_str().is_some_and(|s| s.starts_with('S')),
            types::STRING | types::DATE => value.is_string(),
            // A type slack-once does not know the shape of: Slack checks it.
            _ => true,
        }
    }
}

/// A Workflow Builder step the app provides: its `callback_id`, title, and parameters, as the
/// app's manifest declares them (`slack-once manifest` prints them from here). Outputs given to
/// [`Ctx::complete`] are checked against them before anything is sent.
///
/// ```
/// use slack_once::app::function::{Function, types};
///
/// let approval = Function::new("request_approval", "Request approval")
///     .description("Asks someone to approve, and waits for their decision")
///     .input("approver", types::USER_ID, "Approver")
///     .input("summary", types::STRING, "What to approve")
///     .output("decision", types::STRING, "Decision")
///     .output("decided_by", types::USER_ID, "Decided by")
///     .optional_output("reason", types::STRING, "Reason");
/// assert_eq!(approval.callback_id(), "request_approval");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    callback_id: String,
    /// Declared with its parameters ([`Function::new`]); `false` for a bare callback id, whose
    /// outputs are not checked.
    declared: bool,
    title: String,
    description: Option<String>,
    inputs: Vec<Parameter>,
    outputs: Vec<Parameter>,
}

impl Function {
    /// A step with the `callback_id` the manifest and `function_executed` name, and its title.
    pub fn new(callback_id: impl Into<String>, title: impl Into<String>) -> Self {
        Self {
            callback_id: callback_id.into(),
            declared: true,
            title: title.into(),
            description: None,
            inputs: Vec::new(),
            outputs: Vec::new(),
        }
    }

    /// Its description, as Workflow Builder shows it.
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }

    fn param(name: &str, kind: &str, title: &str, required: bool) -> Parameter {
        Parameter {
            name: name.into(),
            kind: kind.into(),
            title: title.into(),
            description: None,
            required,
        }
    }

    /// A required input (`kind`: one of [`types`]).
    pub fn input(mut self, name: &str, kind: &str, title: &str) -> Self {
        self.inputs.push(Self::param(name, kind, title, true));
        self
    }

    /// An input the workflow may leave out.
    pub fn optional_input(mut self, name: &str, kind: &str, title: &str) -> Self {
        self.inputs.push(Self::param(name, kind, title, false));
        self
    }

    /// A required output: [`Ctx::complete`] refuses outputs without it.
    pub fn output(mut self, name: &str, kind: &str, title: &str) -> Self {
        self.outputs.push(Self::param(name, kind, title, true));
        self
    }

    /// An output the step may leave out.
    pub fn optional_output(mut self, name: &str, kind: &str, title: &str) -> Self {
        self.outputs.push(Self::param(name, kind, title, false));
        self
    }

    /// The step's `callback_id`.
    pub fn callback_id(&self) -> &str {
        &self.callback_id
    }

    /// Its input parameters.
    pub fn inputs(&self) -> &[Parameter] {
        &self.inputs
    }

    /// Its output parameters.
    pub fn outputs(&self) -> &[Parameter] {
        &self.outputs
    }

    /// The step as the manifest's `functions` declares it.
    pub fn manifest(&self) -> Value {
        let params = |ps: &[Parameter]| {
            let mut map = serde_json::Map::new();
            for p in ps {
                map.insert(p.name.clone(), p.manifest());
            }
            Value::Object(map)
        };
        let mut f = json!({
            "title": self.title,
            "description": self.description.clone().unwrap_or_else(|| self.title.clone()),
            "input_parameters": params(&self.inputs),
            "output_parameters": params(&self.outputs),
        });
        if self.description.is_none() {
            f["description"] = self.title.clone().into();
        }
        f
    }

    /// Checks `outputs` against the declared output parameters: an object, every required
    /// output there (not null), none undeclared, each of its type. `Err` says what is wrong, in
    /// the author's terms, before Slack would refuse it (`parameter_validation_failed`).
    pub fn check_outputs(&self, outputs: &Value) -> Result<(), String> {
        if !self.declared {
            // A bare callback id declares nothing to check against: Slack checks.
            return Ok(());
        }
        let Some(given) = outputs.as_object() else {
            return Err(format!(
                "the outputs of {:?} must be a JSON object of the declared outputs, not {outputs}",
                self.callback_id
            ));
        };
        let mut problems = Vec::new();
        for p in &self.outputs {
            match given.get(&p.name) {
                None | Some(Value::Null) if p.required => {
                    problems.push(format!("the required output {:?} is missing", p.name))
                }
                None | Some(Value::Null) => {}
                Some(v) if !p.accepts(v) => problems.push(format!(
                    "the output {:?} is declared {} and is {v}",
                    p.name, p.kind
                )),
                Some(_) => {}
            }
        }
        for name in given.keys() {
            if !self.outputs.iter().any(|p| &p.name == name) {
                problems.push(format!(
                    "{name:?} is not a declared output (declared: {})",
                    self.outputs
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        match problems.is_empty() {
            true => Ok(()),
            false => Err(format!(
                "the step {:?} cannot complete with these outputs: {}",
                self.callback_id,
                problems.join("; ")
            )),
        }
    }
}

impl From<&str> for Function {
    /// A step declared by its `callback_id` alone (no parameters: outputs are not checked, and
    /// the manifest's entry has none).
    fn from(callback_id: &str) -> Self {
        Function {
            declared: false,
            ..Function::new(callback_id, callback_id)
        }
    }
}

/// A step's execution, as `function_executed` brings it: the inputs (deserialised into the
/// author's own type `I`; [`Value`] for all of them untyped), the function's metadata and the
/// execution's ids. Its token is not here: the context's calls use it.
#[derive(Clone, Debug)]
pub struct Execution<I = Value> {
    /// The inputs, as the author's type.
    pub inputs: I,
    /// The execution's id (`Fx…`): what a completion names.
    pub function_execution_id: String,
    /// The workflow run's id (`Wx…`), when Slack gives it.
    pub workflow_execution_id: Option<String>,
    /// The function's `callback_id`.
    pub callback_id: String,
    /// The function as Slack sent it (`id`, `title`, `input_parameters`…).
    pub function: Value,
    /// The event's `event_ts`.
    pub event_ts: Option<String>,
}

/// The execution a request belongs to ([`Ctx::execution`]): the step's own `function_executed`,
/// or a click or view submission in it (its `function_data`).
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutionRef {
    /// The execution's id (`Fx…`).
    pub id: String,
    /// The function's `callback_id`.
    pub callback_id: String,
    /// The step's inputs.
    pub inputs: Value,
}

impl ExecutionRef {
    /// The execution of `function_executed` (its `event`).
    pub(crate) fn of_event(event: &Value) -> Option<Self> {
        Some(Self {
            id: event["function_execution_id"].as_str()?.to_string(),
            callback_id: event["function"]["callback_id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            inputs: event["inputs"].clone(),
        })
    }

    /// The execution of an interaction in a step (its `function_data`).
    pub(crate) fn of_interaction(raw: &Value) -> Option<Self> {
        let data = &raw["function_data"];
        Some(Self {
            id: data["execution_id"].as_str()?.to_string(),
            callback_id: data["function"]["callback_id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            inputs: data["inputs"].clone(),
        })
    }
}

/// How a step ends: with its outputs, or with an error shown to the workflow's people.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepEnd {
    /// `functions.completeSuccess` with these outputs.
    Success(Value),
    /// `functions.completeError` with this message.
    Error(String),
}

/// A decision recorded for an execution ([`Ctx::decide`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// How the step ends.
    pub end: StepEnd,
    /// Who decided: the user whose click or submission it was (`None`: the step's own request).
    pub by: Option<String>,
    /// Whether it is this request's decision (made by this run, or by an earlier run of it).
    pub mine: bool,
    record: Record,
}

/// What a completion came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Completion {
    /// The execution ended with this request's decision: completed now, or by an earlier run
    /// of the request (or by another request's run, which took the mark over from a dead run
    /// of this one, and closed the record).
    Completed,
    /// Another request decided first (a faster approver, the other button, a first click): its
    /// decision. This request sent nothing, unless the other's run had died with the
    /// completion unsent: then this one sent that decision for it.
    DecidedElsewhere(Box<Decision>),
    /// Another request's run is sending this decision (its lease outlasts this request's
    /// answer) and had not confirmed it when this request, which Slack delivers once (a click
    /// in synchronous mode), had to answer: nothing was sent by this request. Show the decision
    /// as being completed and keep what lets a person act again (the step's buttons): should
    /// that run fail, the next click sends the decision.
    Pending(Box<Decision>),
    /// Slack said the execution was no longer running before any completion of slack-once's
    /// (the workflow was stopped, the step timed out, or it was completed outside slack-once):
    /// nothing was completed.
    Ended,
}

/// The execution's record in the app's state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Record {
    end: StepEnd,
    by: Option<String>,
    /// The ledger key of the request that decided.
    key: String,
    /// When that request's lease ends (epoch ms): past it, another request may send its decision.
    until_ms: u64,
    /// `completed` or `ended` once Slack answered.
    #[serde(default)]
    closed: Option<String>,
    /// The ledger key of the request that closed it.
    #[serde(default)]
    closed_by: Option<String>,
    /// The ledger key of the request about to send the decision (written just before its
    /// completion call): a request that finds it set knows the decision may be in Slack already.
    /// Only the run that holds it sends: it wrote it, or took it over from a request whose run
    /// ended, by a write of its own conditioned on the record's version.
    #[serde(default)]
    sending: Option<String>,
    /// When the lease of the run that holds `sending` ends (epoch ms): till then no other
    /// request takes it over. `None` (no mark): `until_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sending_until_ms: Option<u64>,
    /// The ledger key of the other request whose mark the holder took over (that request may
    /// have sent the decision): written with the take-over, so that a later run of the holder's
    /// request, which finds only its own mark (the take-over's answer lost), still takes
    /// Slack's `execution_not_in_running_state` for that request's completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    replaced: Option<String>,
}

/// One run's completion of an execution's decision: the record's name, this request's key,
/// this run's lease, and the decision it sends.
struct Completing<'a> {
    name: String,
    me: String,
    until_ms: u64,
    decision: &'a Decision,
}

impl Completing<'_> {
    /// Whether another request's run is completing the decision (its lease is on at `at`).
    fn completing_elsewhere(&self, r: &Record, at: u64) -> bool {
        !self.decision.mine && r.closed.is_none() && at < r.until_ms
    }

    /// Whether the mark is another request's, whose run may be sending (its lease is on at `at`).
    fn held_elsewhere(&self, r: &Record, at: u64) -> bool {
        r.closed.is_none()
            && r.sending.as_deref().is_some_and(|s| s != self.me)
            && at < r.sending_until_ms.unwrap_or(r.until_ms)
    }

    /// Whether another request closed the record.
    fn closed_by_other(&self, r: &Record) -> bool {
        r.closed.is_some() && r.closed_by.as_deref() != Some(self.me.as_str())
    }
}

fn record_name(execution: &str) -> String {
    format!("slack-once/execution/{execution}")
}

/// Workflow Builder steps: the request's execution, its decision (the first wins), and the
/// completion, once per execution whichever request sends it.
impl Ctx {
    /// The step execution this request belongs to: `function_executed`'s, or a click's or view
    /// submission's in a message or view the step made (`function_data`). `None` elsewhere.
    pub fn execution(&self) -> Option<ExecutionRef> {
        if let Some(cb) = self.event() {
            return (cb.event.kind == "function_executed")
                .then(|| ExecutionRef::of_event(&cb.event.raw))
                .flatten();
        }
        self.interaction()
            .and_then(|i| ExecutionRef::of_interaction(&i.raw))
    }

    /// Completes the request's step execution with `outputs` (checked against the function's
    /// declared outputs first): exactly one completion per execution, whoever calls first
    /// (see [`Completion`]). `Err` for a request outside a step, or outputs that do not match
    /// the declaration ([`Error::InvalidOutputs`]: nothing recorded, nothing sent).
    ///
    /// ```
    /// use serde_json::json;
    /// use slack_once::app::function::{Completion, Execution, Function, types};
    /// use slack_once::app::{App, Ctx, Respond, BlockAction};
    ///
    /// let _app = App::new()
    ///     .function(
    ///         Function::new("greet", "Greet").input("name", types::STRING, "Name")
    ///             .output("greeting", types::STRING, "Greeting"),
    ///         |ctx: Ctx, ex: Execution| async move {
    ///             let name = ex.inputs["name"].as_str().unwrap_or("there");
    ///             ctx.complete(json!({"greeting": format!("Hello, {name}!")})).await?;
    ///             Ok(())
    ///         },
    ///     );
    /// ```
    pub async fn complete(&self, outputs: impl Serialize) -> Result<Completion, Error> {
        let outputs = serde_json::to_value(outputs).map_err(|e| Error::InvalidOutputs {
            reason: format!("the outputs do not serialise: {e}"),
        });
        let decided = match outputs {
            Ok(outputs) => self.decide(StepEnd::Success(outputs)).await,
            Err(e) => Err(e),
        };
        match decided {
            Ok(decision) => self.complete_decision(&decision).await,
            Err(Error::InvalidOutputs { reason }) => {
                // The author's error: the step fails with it (once), so that the workflow
                // stops and says why rather than waiting for a completion that cannot come;
                // the error is the listener's still.
                tracing::error!(%reason, "the step's outputs do not match its declaration: failing the step");
                self.fail(format!("The step could not complete: {reason}"))
                    .await?;
                Err(Error::InvalidOutputs { reason })
            }
            Err(e) => Err(e),
        }
    }

    /// Ends the request's step execution with an error (`functions.completeError`: the workflow
    /// stops, and Slack shows `message` to its people), once per execution as
    /// [`Ctx::complete`].
    pub async fn fail(&self, message: impl Into<String>) -> Result<Completion, Error> {
        let decision = self.decide(StepEnd::Error(message.into())).await?;
        self.complete_decision(&decision).await
    }

    /// Records `end` as the execution's decision unless another request's is recorded already
    /// (the first wins; once per request, whenever it runs again), and returns the decision that
    /// stands. Nothing is sent to Slack: [`Ctx::complete_decision`] sends it. Between the two, a
    /// listener writes what people should see of the decision while the execution's token is
    /// still good (Slack revokes it when the step completes):
    ///
    /// ```
    /// use serde_json::json;
    /// use slack_once::app::function::StepEnd;
    /// use slack_once::app::{Ctx, HandlerResult, ViewSubmission};
    ///
    /// async fn rejected(ctx: Ctx, v: ViewSubmission) -> HandlerResult {
    ///     let metadata = v.private_metadata.clone().unwrap_or_default();
    ///     let (channel, ts) = metadata.split_once(' ').unwrap_or_default();
    ///     let outputs = json!({"decision": "rejected", "decided_by": v.user_id});
    ///     let decision = ctx.decide(StepEnd::Success(outputs)).await?;
    ///     // Shown while the submission's token is good: the completion revokes it.
    ///     ctx.update(channel, ts, format!("Rejected by <@{}>", v.user_id)).await?;
    ///     ctx.complete_decision(&decision).await?;
    ///     Ok(())
    /// }
    /// ```
    pub async fn decide(&self, end: StepEnd) -> Result<Decision, Error> {
        let execution = self.execution().ok_or_else(|| Error::NotAStep {
            what: match &end {
                StepEnd::Success(_) => "ctx.complete".into(),
                StepEnd::Error(_) => "ctx.fail".into(),
            },
        })?;
        if let StepEnd::Success(outputs) = &end
            && let Some(function) = self.function(&execution.callback_id)
        {
            function
                .check_outputs(outputs)
                .map_err(|reason| Error::InvalidOutputs { reason })?;
        }
        let by = self.interaction().and_then(|i| i.user_id.clone());
        let key = self.ledger_key().to_string();
        let until_ms = self.lease_end_ms();
        let mine = Record {
            end: end.clone(),
            by: by.clone(),
            key: key.clone(),
            until_ms,
            closed: None,
            closed_by: None,
            sending: None,
            sending_until_ms: None,
            replaced: None,
        };
        let changed = self
            .state()
            .change(
                &record_name(&execution.id),
                EXECUTION_RECORD_TTL,
                |found: Option<Record>| match found {
                    Some(_) => None,
                    None => Some(mine.clone()),
                },
            )
            .await?;
        let record = match changed.value {
            Some(record) => record,
            // Recorded by an earlier run of this request, and gone since (its TTL): as decided.
            None => mine,
        };
        Ok(Decision {
            end: record.end.clone(),
            by: record.by.clone(),
            mine: record.key == key,
            record,
        })
    }

    /// When this run's lease ends (epoch ms): its deadline.
    fn lease_end_ms(&self) -> u64 {
        self.deadline_at()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or_default()
    }

    /// The decision recorded for the request's execution, if one is (by any request: `mine`
    /// says whether by this one). A read: nothing is recorded or sent.
    pub async fn decision(&self) -> Result<Option<Decision>, Error> {
        let execution = self.execution().ok_or_else(|| Error::NotAStep {
            what: "ctx.decision".into(),
        })?;
        let found = self
            .state()
            .get::<Record>(&record_name(&execution.id))
            .await?;
        let key = self.ledger_key();
        Ok(found.map(|v| Decision {
            end: v.value.end.clone(),
            by: v.value.by.clone(),
            mine: v.value.key == key,
            record: v.value,
        }))
    }

    /// Sends `decision` (from [`Ctx::decide`]) to Slack, once per execution: this request's
    /// own decision; another's only when that request's lease has ended with the record still
    /// open (it died before it completed). Then closes the record. Where another request's run
    /// is completing it, waits for the record to close within this run's deadline; past it,
    /// `Err` ([`Error::LookupUnavailable`]), and the request is not done whatever the listener
    /// does with it: a later delivery looks again.
    pub async fn complete_decision(&self, decision: &Decision) -> Result<Completion, Error> {
        let completed = self.complete_decision_once(decision).await;
        if let Err(Error::Ledger(_)) = &completed {
            // A read or a change of the record failed midway: the completion is unfinished,
            // and the request is not done whatever the listener does with the error.
            self.doubtful().await;
        }
        completed
    }

    async fn complete_decision_once(&self, decision: &Decision) -> Result<Completion, Error> {
        let execution = self.execution().ok_or_else(|| Error::NotAStep {
            what: "ctx.complete_decision".into(),
        })?;
        let c = Completing {
            name: record_name(&execution.id),
            me: self.ledger_key().to_string(),
            until_ms: self.lease_end_ms(),
            decision,
        };
        let marked = self.mark_once(&c).await?;
        let Some((now, replaced)) = self.hold_the_mark(&c, marked).await? else {
            return self.leave_pending(&c, &execution.id).await;
        };
        let (method, args) = completion_call(&execution.id, &now.end);
        let closed_elsewhere = c.closed_by_other(&now);
        let answer = if closed_elsewhere {
            // Closed by a request that sent it, or found the execution ended: nothing to send.
            self.pass_step(method, &args).await?;
            json!({"ok": true, "already": match now.closed.as_deref() {
                Some("ended") => format!("{}closed", crate::journal::UNANNOUNCED),
                _ => "closed".to_string(),
            }})
        } else {
            if !decision.mine {
                tracing::warn!(
                    "the execution's decision was recorded by a request whose lease has ended \
                     with the record open: sending that decision"
                );
            }
            // Another request was about to send it before this one (this run took its mark
            // over): the decision may be in Slack, and Slack's `not running` is then that
            // send's, not the workflow's end. This request's own mark, made by an earlier run,
            // announces nothing here: every other sender takes the mark over before it sends
            // (the record would name it), and the earlier run's own call is its journal's.
            // The record keeps it too, for a later run whose take-over's answer was lost.
            let announced_elsewhere = [replaced.as_deref(), now.replaced.as_deref()]
                .into_iter()
                .flatten()
                .any(|s| s != c.me);
            self.completion_step(method, args, announced_elsewhere)
                .await?
        };
        let mut ended = answer["already"]
            .as_str()
            .is_some_and(|a| a.starts_with(crate::journal::UNANNOUNCED));
        if ended && !closed_elsewhere {
            // Not running, and never announced: ended elsewhere, unless a request that sent
            // this decision closed the record meanwhile.
            let after = self.state().get::<Record>(&c.name).await?.map(|v| v.value);
            if after.is_some_and(|r| r.closed.as_deref() == Some("completed")) {
                ended = false;
            }
        }
        self.close_record(&c, ended).await?;
        Ok(match (ended, decision.mine) {
            (true, _) => Completion::Ended,
            (false, true) => Completion::Completed,
            (false, false) => Completion::DecidedElsewhere(Box::new(decision.clone())),
        })
    }

    /// The decision another request's run is completing, as pending ([`Completion::Pending`]),
    /// where this request is delivered once and that run's lease outlasts this one. It takes the completion's step
    /// number and makes the same state changes as the other paths (none here), so that the
    /// steps after it keep their numbers, and nothing is recorded at it.
    async fn leave_pending(&self, c: &Completing<'_>, id: &str) -> Result<Completion, Error> {
        let (method, args) = completion_call(id, &c.decision.end);
        self.pass_step(method, &args).await?;
        self.state()
            .change(&c.name, EXECUTION_RECORD_TTL, |_: Option<Record>| None)
            .await?;
        Ok(Completion::Pending(Box::new(c.decision.clone())))
    }

    /// Marks the record `sending` just before the completion call, once per request: the record
    /// as it is now (another request may have sent this decision, or closed it, since it was
    /// decided). Every run of the request makes the same state changes and takes the same step
    /// number for the completion, whatever it finds: the journal and the state changes are told
    /// apart by their places.
    async fn mark_once(&self, c: &Completing<'_>) -> Result<Record, Error> {
        let now_ms = crate::clock::now_ms();
        let marked = self
            .state()
            .change(&c.name, EXECUTION_RECORD_TTL, |found: Option<Record>| {
                let mut r = found?;
                if r.sending.is_some() || r.closed.is_some() || c.completing_elsewhere(&r, now_ms) {
                    return None;
                }
                r.sending = Some(c.me.clone());
                r.sending_until_ms = Some(c.until_ms);
                Some(r)
            })
            .await?;
        // Marked now (by this run or an earlier one of this request): `sending` is this
        // request's; left as it was: another's mark, or none.
        Ok(marked.value.unwrap_or_else(|| c.decision.record.clone()))
    }

    /// Holds the mark before sending, or waits for the run that holds it: the record this run
    /// goes on with, and the mark its send follows (a request that may have sent the decision
    /// before), or `None` where this run trusts the holder (see `wait_for_the_holder`). Another
    /// request's mark, once seen, is kept whatever a later read finds (this run's own mark, read
    /// again after the ledger's SDK sent the take-over twice).
    async fn hold_the_mark(
        &self,
        c: &Completing<'_>,
        mut now: Record,
    ) -> Result<Option<(Record, Option<String>)>, Error> {
        let mut replaced = now.sending.clone();
        let mut looks = 0;
        loop {
            let at = crate::clock::now_ms();
            let held_by_this_run = now.sending.as_deref() == Some(c.me.as_str())
                && now.sending_until_ms == Some(c.until_ms);
            if now.closed.is_none()
                && !held_by_this_run
                && !c.held_elsewhere(&now, at)
                && !c.completing_elsewhere(&now, at)
            {
                match self.take_the_mark(c, &mut replaced).await? {
                    Some(record) => now = record,
                    // Gone (its TTL): sent on what this run read, as nothing is left to wait on.
                    None => break,
                }
            }
            let at = crate::clock::now_ms();
            if !c.completing_elsewhere(&now, at) && !c.held_elsewhere(&now, at) {
                break;
            }
            looks += 1;
            match self.wait_for_the_holder(c, now, at, looks).await? {
                Some(read) => now = read,
                None => return Ok(None),
            }
        }
        Ok(Some((now, replaced)))
    }

    /// About to send under a mark this run did not write: an earlier run's of this request, or
    /// another request's whose run ended (past its lease), which may have sent the decision.
    /// The mark's change in `mark_once` is made once per request (a later run finds it
    /// made, whatever the record holds since), so this run holds the mark by a write of its
    /// own, on the version it reads: of two runs about to send (the decider's redelivery, and a
    /// click sending for the decider), one writes it and sends; the other reads the mark
    /// taken, and waits for it.
    async fn take_the_mark(
        &self,
        c: &Completing<'_>,
        replaced: &mut Option<String>,
    ) -> Result<Option<Record>, Error> {
        let held = self
            .state()
            .change_for_this_run(&c.name, EXECUTION_RECORD_TTL, |found: Option<Record>| {
                let mut r = found?;
                let at = crate::clock::now_ms();
                if r.closed.is_some() || c.held_elsewhere(&r, at) || c.completing_elsewhere(&r, at)
                {
                    return None;
                }
                if replaced.as_deref().is_none_or(|s| s == c.me) {
                    *replaced = r.sending.clone();
                }
                if let Some(other) = r.sending.as_deref().filter(|s| *s != c.me) {
                    r.replaced = Some(other.to_string());
                }
                r.sending = Some(c.me.clone());
                r.sending_until_ms = Some(c.until_ms);
                Some(r)
            })
            .await?;
        Ok(held.value)
    }

    /// Another request's run is sending (or may send) the decision. It may still fail (its
    /// completion refused for a while, its process gone, its later deliveries too late for the
    /// execution's token), so this run waits, within its own deadline, for the record to close
    /// or that run's lease to end, and reads it again (`Some`). Where the lease outlasts this
    /// run, the request is released, and a later delivery finds the record closed, or sends the
    /// decision itself; a request Slack delivers once (a click answered synchronously), which
    /// no later delivery would finish, trusts the other run instead (`None`).
    async fn wait_for_the_holder(
        &self,
        c: &Completing<'_>,
        now: Record,
        at: u64,
        looks: u32,
    ) -> Result<Option<Record>, Error> {
        let theirs_until = match c.held_elsewhere(&now, at) {
            true => now.sending_until_ms.unwrap_or(now.until_ms),
            false => now.until_ms,
        };
        let last_look = c.until_ms.saturating_sub(SENDING_MARGIN.as_millis() as u64);
        if at >= last_look && !self.delivered_again_if_released() {
            tracing::info!(
                "another request's run is completing the execution's decision past this \
                 run's deadline, and this request is delivered once: its decision is shown"
            );
            return Ok(None);
        }
        if at >= last_look {
            tracing::info!(
                "another request's run is completing the execution's decision past this \
                 run's deadline: released for a later delivery"
            );
            self.doubtful().await;
            return Err(Error::LookupUnavailable(
                crate::slack::SlackError::InvalidResponse(
                    "another request's run is completing the step's decision, and its \
                     lease outlasts this run's"
                        .into(),
                ),
            ));
        }
        let interval = LOOK_AGAIN
            .saturating_mul(1 << looks.saturating_sub(1).min(8))
            .min(LOOK_AGAIN_AT_MOST);
        let wake = theirs_until
            .min(at + interval.as_millis() as u64)
            .min(last_look);
        tokio::time::sleep(Duration::from_millis(wake.saturating_sub(at).max(1))).await;
        Ok(Some(match self.state().get::<Record>(&c.name).await? {
            Some(found) => found.value,
            None => now,
        }))
    }

    /// Closes the record `ended` or `completed`, unless another request closed it first.
    async fn close_record(&self, c: &Completing<'_>, ended: bool) -> Result<(), Error> {
        if ended {
            tracing::warn!("the execution was no longer running: nothing completed");
        }
        let closed = if ended { "ended" } else { "completed" };
        self.state()
            .change(&c.name, EXECUTION_RECORD_TTL, |found: Option<Record>| {
                let mut r = found?;
                if r.closed.is_some() {
                    return None;
                }
                r.closed = Some(closed.to_string());
                r.closed_by = Some(c.me.clone());
                Some(r)
            })
            .await?;
        Ok(())
    }

    /// The completion as a journaled step: made again when an earlier run's fate is unknown,
    /// and then (or when the decision is another request's) Slack's `not running` is the
    /// earlier call's own success.
    async fn completion_step(
        &self,
        method: &str,
        args: Value,
        announced_elsewhere: bool,
    ) -> Result<Value, Error> {
        self.journaled_announced(
            method,
            args,
            Settle::Idempotent,
            &COMPLETION_MADE_ALREADY,
            announced_elsewhere,
            Returns::Nothing,
        )
        .await
    }
}

/// The completion call that sends `end` for the execution `id`.
fn completion_call(id: &str, end: &StepEnd) -> (&'static str, Value) {
    match end {
        StepEnd::Success(outputs) => (
            "functions.completeSuccess",
            json!({"function_execution_id": id, "outputs": outputs}),
        ),
        StepEnd::Error(message) => (
            "functions.completeError",
            json!({"function_execution_id": id, "error": message}),
        ),
    }
}

/// The typed execution of `function_executed` (its `event`), or why its inputs are not an `I`.
pub(crate) fn execution_of<I: DeserializeOwned>(event: &Value) -> Result<Execution<I>, String> {
    let inputs = serde_json::from_value(event["inputs"].clone())
        .map_err(|e| format!("the step's inputs could not be read: {e}"))?;
    Ok(Execution {
        inputs,
        function_execution_id: event["function_execution_id"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        workflow_execution_id: event["workflow_execution_id"].as_str().map(str::to_string),
        callback_id: event["function"]["callback_id"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        function: event["function"].clone(),
        event_ts: event["event_ts"].as_str().map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval() -> Function {
        Function::new("request_approval", "Request approval")
            .input("approver", types::USER_ID, "Approver")
            .output("decision", types::STRING, "Decision")
            .output("decided_by", types::USER_ID, "Decided by")
            .optional_output("reason", types::STRING, "Reason")
    }

    #[test]
    fn outputs_are_checked_against_the_declaration() {
        let f = approval();
        assert!(
            f.check_outputs(&json!({"decision": "approved", "decided_by": "U1"}))
                .is_ok()
        );
        let missing = f
            .check_outputs(&json!({"decision": "approved"}))
            .unwrap_err();
        assert!(missing.contains("\"decided_by\" is missing"), "{missing}");
        let typed = f
            .check_outputs(&json!({"decision": "approved", "decided_by": 7}))
            .unwrap_err();
        assert!(typed.contains("declared slack#/types/user_id"), "{typed}");
        let extra = f
            .check_outputs(&json!({"decision": "x", "decided_by": "U1", "mood": "ok"}))
            .unwrap_err();
        assert!(
            extra.contains("\"mood\" is not a declared output"),
            "{extra}"
        );
        assert!(f.check_outputs(&json!("approved")).is_err());
    }

    #[test]
    fn the_manifest_declares_each_parameter() {
        let m = approval().manifest();
        assert_eq!(m["title"], "Request approval");
        assert_eq!(
            m["input_parameters"]["approver"],
            json!({"type": "slack#/types/user_id", "title": "Approver", "is_required": true})
        );
        assert_eq!(m["output_parameters"]["reason"]["is_required"], false);
    }
}
