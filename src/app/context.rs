//! The context a listener gets: the event, its deadline, reads that go straight to Slack, and
//! writes that are **journaled steps** of the event's claim.
//!
//! Every write is numbered in the order the listener makes it (1, 2, …). Before the call, a
//! write conditioned on the claim's owner records its intent in the ledger; its result rides on
//! the claim's next write (the next step's intent, or the finish): one ledger write per step.
//! A later claim of the event (a takeover after a crash, a retry after a failure) runs the
//! listener again from the start:
//! - a step recorded done returns its recorded result without calling Slack;
//! - a step recorded only as an intent may have reached Slack: a message is looked for by the
//!   metadata every post carries (found: its result; not found: posted; Slack cannot be asked:
//!   the claim is released for a later delivery, unless none follows); a write that changes
//!   nothing when made twice (reactions, updates, deletions, opening a DM) is made again; one
//!   that can be neither looked for nor repeated (an ephemeral message) is not made again;
//! - a step not recorded at all is made.
//!
//! So a listener must make the same writes in the same order each time it runs for an event:
//! its own computation between steps (an LLM call, a look-up) runs again, its writes do not.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::interactive::{response_body, Ack};
use super::message::Message;
use crate::envelope::{EventCallback, EventId};
use crate::interaction::{allowed_response_url, Interaction};
use crate::ledger::{
    first_absent_step, keep_doubt, same_step, step_op, Held, Journal, Ledger, LedgerError,
    OwnerToken, Settled, StepRecord,
};
use crate::slack::{post_metadata, Args, OurApp, ReplyQuery, SlackClient, SlackError};

/// At most this many Slack writes (steps) per event. Each is a journal record in the event's
/// ledger item, and every write of the item is billed by its size: a listener that would make
/// more fails with [`Error::JournalFull`] and the event ends `failed` (`journal_full`), once.
pub const MAX_STEPS: u32 = 500;
/// The journal is kept under this many bytes (DynamoDB holds 400 KB an item).
pub const MAX_JOURNAL_BYTES: usize = 64 * 1024;
/// A remembered result ([`Ctx::remember`]) is kept in the journal up to this size serialised
/// (the journal holds [`MAX_JOURNAL_BYTES`] in all).
pub const MAX_REMEMBERED_BYTES: usize = 16 * 1024;
/// What a replay returns of a step is kept under this size: the ids (a message's `ts` and
/// `channel`, a file's or a view's id), never Slack's whole answer.
const MAX_RESULT_BYTES: usize = 1024;
/// A look-up for a message an earlier claim may have posted searches the window from its
/// intent to its lease's end, widened by this much on each side (clocks, Slack's own delay).
const LOOKUP_SLACK_MS: u64 = 5_000;

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
    #[error("step {step} was {recorded} when first run and is {now} now: the listener's writes must be the same each time it runs")]
    Nondeterministic {
        step: u32,
        recorded: String,
        now: String,
    },
    /// The event's claim has ended (the listener returned, or ran out of time): no more steps.
    #[error("the event's claim has ended: no more writes")]
    Closed,
    /// The listener would make more Slack writes for one event than its journal holds
    /// ([`MAX_STEPS`], [`MAX_JOURNAL_BYTES`]): the write is not made, and the event ends
    /// `failed` (`journal_full`). Make fewer, larger writes (one `chat.update` with the final
    /// text rather than one per token).
    #[error("step {step} would make the event's journal larger than it may grow ({MAX_STEPS} steps, {MAX_JOURNAL_BYTES} bytes)")]
    JournalFull { step: u32 },
    /// A write (`method`) was made from inside the computation [`Ctx::remember`] runs at step
    /// `step`: a run that finds the result remembered would not make it, so the listener's
    /// writes would differ between runs. Write before or after `remember`.
    #[error("{method} was called inside the computation remembered at step {step}: write before or after ctx.remember")]
    InsideRemember { step: u32, method: String },
}

/// How a step whose fate is unknown is settled by a later claim.
#[derive(Clone, Copy, Debug)]
pub enum Settle<'a> {
    /// A message: looked for in Slack by its metadata.
    Lookup {
        channel: &'a str,
        thread_ts: Option<&'a str>,
    },
    /// A streamed message (`chat.startStream` takes no metadata): looked for among the app's
    /// messages of the thread, in the claim's window, that carry no slack-once names yet.
    Stream {
        channel: &'a str,
        thread_ts: &'a str,
    },
    /// Made again: doing it twice changes nothing.
    Idempotent,
    /// Not made again: it can be neither looked for nor repeated harmlessly.
    AtMostOnce,
}

/// A message posted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Posted {
    pub channel: String,
    pub ts: String,
}

/// What a claim's steps came to, for the outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Writes made to Slack by this claim.
    pub made: u32,
    /// Writes found done (recorded, or looked up in Slack) from an earlier claim.
    pub settled: u32,
}

pub(crate) struct Steps {
    pub ledger: Arc<dyn Ledger>,
    pub key: EventId,
    pub owner: OwnerToken,
    pub attempt: u32,
    /// As the claim found it (with earlier claims' began windows as [`StepRecord::Began`]),
    /// kept up to date with what this claim writes.
    pub journal: Journal,
    pub next: u32,
    /// Fates learnt since the ledger was last written: the next write records them.
    pub unrecorded: Vec<Settled>,
    pub last_chance: bool,
    pub closed: bool,
    pub tally: Tally,
    pub now_ms: u64,
    pub started: Instant,
    /// The claim's lease end (epoch ms), written into each intent.
    pub lease_until_ms: u64,
    /// The step of a [`Ctx::remember`] whose computation is running: no write may be made
    /// from inside it.
    pub remembering: Option<u32>,
    /// The step this claim's own began window stands for (the lowest absent from the journal):
    /// while the claim has written nothing since, that step needs no intent of its own.
    covered: u32,
    /// No ledger write since the claim: its began window still stands.
    began_stands: bool,
    /// The earlier claims' began windows at the covered step (a [`StepRecord::Began`]) were
    /// settled: looked for, made again, or skipped. Until then the claim may not end without
    /// keeping them as an intent, or a later claim would never look for what they may have
    /// posted.
    began_settled: bool,
    /// No claim behind these steps (deferred mode's ingress, before the acknowledgement): only
    /// the `trigger_id`'s views may be opened (Slack itself takes a trigger once); any other
    /// write is where the listener hands off to a worker (an implicit empty acknowledgement).
    pub provisional: bool,
    /// The covered step while its call is out, made without an intent of its own: should the
    /// claim end before the call returns, its intent goes with the finish.
    in_flight: Option<(u32, StepRecord)>,
}

impl Steps {
    pub(crate) fn new(
        ledger: Arc<dyn Ledger>,
        key: EventId,
        owner: OwnerToken,
        claim: (u32, Journal),
        last_chance: bool,
        times: (u64, Instant, u64),
    ) -> Self {
        let (attempt, journal) = claim;
        let (now_ms, started, lease_until_ms) = times;
        Self {
            covered: first_absent_step(&journal),
            ledger,
            key,
            owner,
            attempt,
            journal,
            next: 1,
            unrecorded: Vec::new(),
            last_chance,
            closed: false,
            tally: Tally::default(),
            now_ms,
            started,
            lease_until_ms,
            began_stands: true,
            began_settled: false,
            provisional: false,
            remembering: None,
            in_flight: None,
        }
    }

    fn now_ms(&self) -> u64 {
        self.now_ms + self.started.elapsed().as_millis() as u64
    }

    /// Numbers the next step, `op`, and gives what earlier claims recorded at that number: a
    /// record of another step there is [`Error::Nondeterministic`].
    fn take(&mut self, op: &str) -> Result<(u32, Option<StepRecord>), Error> {
        let step = self.next;
        self.next += 1;
        let earlier = self.journal.get(&step).cloned();
        if let Some(recorded) = earlier.as_ref().and_then(StepRecord::op) {
            if !same_step(recorded, op) {
                return Err(Error::Nondeterministic {
                    step,
                    recorded: recorded.to_string(),
                    now: op.to_string(),
                });
            }
        }
        Ok((step, earlier))
    }

    /// Writes `record` as step `step`, conditioned on the owner, with the fates learnt since the
    /// last write, by `deadline`: then the ledger holds them all.
    async fn write(
        &mut self,
        step: u32,
        record: &StepRecord,
        deadline: Instant,
    ) -> Result<(), Error> {
        // A fate of this very step is written as the record itself, not twice in one update.
        let is_this = |fate: &Settled| matches!(fate, Settled::Done { step: s, .. } if *s == step);
        let others: Vec<Settled>;
        let settled: &[Settled] = if self.unrecorded.iter().any(is_this) {
            others = self
                .unrecorded
                .iter()
                .filter(|f| !is_this(f))
                .cloned()
                .collect();
            &others
        } else {
            &self.unrecorded
        };
        let now_ms = self.now_ms();
        let held = Held {
            event_id: &self.key,
            owner: &self.owner,
        };
        let write = self.ledger.begin_step(held, step, record, settled, now_ms);
        match tokio::time::timeout_at(deadline, write).await {
            Ok(Ok(())) => {
                self.recorded();
                Ok(())
            }
            Ok(Err(LedgerError::ItemTooLarge(_))) => Err(Error::JournalFull { step }),
            Ok(Err(e)) => Err(Error::Ledger(e)),
            Err(_) => Err(Error::Ledger(LedgerError::Unavailable(
                "the ledger did not answer before the deadline".into(),
            ))),
        }
    }

    /// Steps made before this claim existed (by deferred mode's ingress, before the
    /// acknowledgement), each done: a replay returns them, and the claim's next write records
    /// them. That write is an intent of its own (the claim's began window stood for the
    /// lowest step absent from the ledger, not for the first after these).
    pub(crate) fn seed(&mut self, done: Vec<Settled>) {
        for fate in done {
            if let Settled::Done { step, result, op } = &fate {
                if matches!(self.journal.get(step), Some(StepRecord::Done { .. })) {
                    continue;
                }
                self.journal.insert(
                    *step,
                    StepRecord::Done {
                        result: result.clone(),
                        op: op.clone(),
                    },
                );
                self.unrecorded.push(fate);
                self.began_stands = false;
            }
        }
        self.covered = first_absent_step(&self.journal);
    }

    /// The journal as the ledger holds it once `intent` (step `step`) and the unrecorded fates
    /// are written.
    fn after(&self, step: u32, intent: &StepRecord) -> Journal {
        let mut journal: Journal = self
            .journal
            .iter()
            .filter(|(_, r)| !matches!(r, StepRecord::Began { .. }))
            .map(|(s, r)| (*s, r.clone()))
            .collect();
        apply(&mut journal, &self.unrecorded);
        journal.insert(step, intent.clone());
        journal
    }

    /// The ledger now holds the unrecorded fates, and this claim's began window is gone.
    fn recorded(&mut self) {
        let fates = std::mem::take(&mut self.unrecorded);
        self.journal
            .retain(|_, r| !matches!(r, StepRecord::Began { .. }));
        apply(&mut self.journal, &fates);
        self.began_stands = false;
    }

    /// Step `step` (its identity `op`) was found done for an earlier claim: `answer` stands
    /// for its result and is recorded with the claim's next write.
    fn settled_earlier(&mut self, step: u32, op: &str, answer: Value) -> Value {
        self.unrecorded.push(Settled::Done {
            step,
            result: recordable(&answer),
            op: Some(op.to_string()),
        });
        self.tally.settled += 1;
        answer
    }
}

/// `fates` applied to `journal`, as a ledger write records them.
fn apply(journal: &mut Journal, fates: &[Settled]) {
    for fate in fates {
        match fate {
            Settled::Done { step, result, op } => {
                journal.insert(
                    *step,
                    StepRecord::Done {
                        result: result.clone(),
                        op: op.clone(),
                    },
                );
            }
            Settled::NotDone { step } => {
                journal.remove(step);
            }
            Settled::Unknown { step, intent } => {
                journal.insert(*step, intent.clone());
            }
            Settled::Ran { .. } => {}
        }
    }
}

/// The journal's size as the DynamoDB ledger stores it.
fn journal_bytes(journal: &Journal) -> usize {
    journal
        .iter()
        .map(|(s, r)| s.to_string().len() + r.encode().len() + 4)
        .sum()
}

/// What a listener's work is for: an event, or a command or interaction (with its ledger key).
#[derive(Clone, Debug)]
pub(crate) enum Source {
    Event(Arc<EventCallback>),
    Interaction {
        interaction: Arc<Interaction>,
        key: String,
    },
}

impl Source {
    /// The event's id, or the interaction's ledger key: what the metadata of a post names.
    fn id(&self) -> &str {
        match self {
            Source::Event(cb) => cb.event_id.as_str(),
            Source::Interaction { key, .. } => key,
        }
    }

    fn team(&self) -> Option<&str> {
        match self {
            Source::Event(cb) => cb.team(),
            Source::Interaction { interaction, .. } => interaction.team(),
        }
    }

    fn bot_user_id(&self) -> Option<&str> {
        match self {
            Source::Event(cb) => cb.bot_user_id(),
            Source::Interaction { .. } => None,
        }
    }

    fn app_id(&self) -> Option<&str> {
        match self {
            Source::Event(cb) => cb.api_app_id.as_deref(),
            Source::Interaction { interaction, .. } => interaction.api_app_id.as_deref(),
        }
    }

    /// The conversation the request happened in, and its thread.
    fn conversation(&self) -> Option<(String, Option<String>)> {
        match self {
            Source::Event(cb) => Some((cb.event.channel.clone()?, cb.event.thread_ts.clone())),
            Source::Interaction { interaction, .. } => {
                Some((interaction.channel_id.clone()?, interaction.thread_ts()))
            }
        }
    }

    /// The `ts` of the message the request is about (an event's message, a button's).
    fn message_ts(&self) -> Option<String> {
        match self {
            Source::Event(cb) => cb.event.ts.clone(),
            Source::Interaction { interaction, .. } => interaction.message_ts(),
        }
    }

    /// A Slack `ts` no answer to this request can be older than (look-ups of records of
    /// versions that wrote no times start there).
    fn since_ts(&self) -> Option<String> {
        match self {
            Source::Event(cb) => {
                let e = &cb.event;
                e.ts.clone()
                    .or(e.event_ts.clone())
                    .or(cb.event_time.map(|t| t.to_string()))
            }
            Source::Interaction { interaction, .. } => interaction
                .action()
                .and_then(|a| a.get("action_ts"))
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| interaction.message_ts()),
        }
    }
}

/// What [`Ctx::ack`] does where the listener runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AckMode {
    /// An event: there is nothing to acknowledge (`ack` does nothing).
    NotAsked,
    /// Synchronous mode: recorded, and the listener goes on; the acknowledgement is returned
    /// when it returns.
    Inline,
    /// Deferred mode's ingress: recorded, and the listener stops there (a worker runs it again
    /// from the start: its steps so far replay from the journal).
    StopAfter,
    /// A worker: the ingress acknowledged; `ack` returns at once.
    Given,
}

struct Acking {
    mode: AckMode,
    ack: Option<Ack>,
}

struct Inner {
    source: Source,
    /// The claim's ledger key (the steps' own, kept here for the names of messages).
    key: EventId,
    acking: std::sync::Mutex<Acking>,
    /// Told when the listener acknowledges (deferred mode's ingress waits for it).
    acked: tokio::sync::Notify,
    slack: SlackClient,
    deadline: Instant,
    wall_deadline: SystemTime,
    version: String,
    steps: Mutex<Steps>,
}

/// What a listener is given: the event, its deadline, and Slack, read and written exactly once.
/// Cheap to clone.
#[derive(Clone)]
pub struct Ctx {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("source", &self.inner.source.id())
            .finish()
    }
}

impl Ctx {
    pub(crate) fn new(
        source: Source,
        ack_mode: AckMode,
        slack: SlackClient,
        deadline: Instant,
        version: String,
        steps: Steps,
    ) -> Self {
        let wall_deadline =
            crate::clock::now() + deadline.saturating_duration_since(Instant::now());
        let key = steps.key.clone();
        Self {
            inner: Arc::new(Inner {
                source,
                key,
                acking: std::sync::Mutex::new(Acking {
                    mode: ack_mode,
                    ack: None,
                }),
                acked: tokio::sync::Notify::new(),
                slack,
                deadline,
                wall_deadline,
                version,
                steps: Mutex::new(steps),
            }),
        }
    }

    /// Ends the steps: later writes fail with [`Error::Closed`]. Returns the fates for the
    /// finishing write (a covered step whose call never returned among them, as an intent),
    /// and the tally.
    pub(crate) async fn close(&self) -> (Vec<Settled>, Tally) {
        let mut steps = self.inner.steps.lock().await;
        steps.closed = true;
        if let Some((step, intent)) = steps.in_flight.take() {
            steps.unrecorded.push(Settled::Unknown { step, intent });
        }
        if !steps.began_settled {
            // Not reached (a failure before it, a look-up that could not be made): what the
            // earlier claims may have done there stays in doubt, as an intent of their window.
            let doubt = keep_doubt(&steps.journal);
            steps.unrecorded.extend(doubt);
        }
        (std::mem::take(&mut steps.unrecorded), steps.tally)
    }

    /// The acknowledgement the listener chose, if it did.
    pub(crate) fn chosen_ack(&self) -> Option<Ack> {
        self.inner.acking.lock().expect("ack lock").ack.clone()
    }

    /// Resolves once the listener has acknowledged.
    pub(crate) async fn acknowledged(&self) {
        self.inner.acked.notified().await
    }

    // ------------------------------------------------------------ the request

    /// The whole delivery of an event: `event_id`, team, authorizations, and the inner event
    /// (`.event`, with `.event.raw` as Slack sent it). `None` for a command or an interaction.
    pub fn event(&self) -> Option<&EventCallback> {
        match &self.inner.source {
            Source::Event(cb) => Some(cb),
            Source::Interaction { .. } => None,
        }
    }

    /// The command or interaction, as parsed (`.raw` as Slack sent it). `None` for an event.
    pub fn interaction(&self) -> Option<&Interaction> {
        match &self.inner.source {
            Source::Interaction { interaction, .. } => Some(interaction),
            Source::Event(_) => None,
        }
    }

    /// The event's `event_id`; for a command or an interaction, its ledger key (see
    /// [`Interaction::key`]).
    pub fn event_id(&self) -> &str {
        self.inner.source.id()
    }

    pub fn team(&self) -> Option<&str> {
        self.inner.source.team()
    }

    /// The assistant thread's context (where the user is: `{channel_id, team_id, …}`), as the
    /// event carries it (`assistant_thread_started`, `assistant_thread_context_changed`).
    pub fn assistant_context(&self) -> Option<&Value> {
        let event = self.event()?;
        event
            .event
            .raw
            .get("assistant_thread")
            .and_then(|t| t.get("context"))
            .filter(|c| c.is_object())
    }

    /// The assistant thread's context for any event of the thread: as the event carries it
    /// (`assistant_thread_started`, `assistant_thread_context_changed`), or, for a message in
    /// the thread, as the latest of those events left it (kept beside the claims by an app
    /// with an assistant's listener; `None` when none was seen, as in the agent view).
    pub async fn thread_context(&self) -> Result<Option<Value>, Error> {
        if let Some(context) = self.assistant_context() {
            return Ok(Some(context.clone()));
        }
        let (Some((channel, Some(thread))), Some(team)) =
            (self.inner.source.conversation(), self.team())
        else {
            return Ok(None);
        };
        let Some(key) = crate::pipeline::thread_context_key(team, &channel, &thread) else {
            return Ok(None);
        };
        let ledger = self.inner.steps.lock().await.ledger.clone();
        let now_ms = crate::clock::now_ms();
        let note = tokio::time::timeout_at(self.inner.deadline, ledger.note(&key, now_ms))
            .await
            .map_err(|_| {
                Error::Ledger(LedgerError::Unavailable(
                    "the ledger did not answer before the deadline".into(),
                ))
            })?
            .map_err(Error::Ledger)?;
        Ok(note.and_then(|n| serde_json::from_str(&n).ok()))
    }

    /// The bot's own user id in this workspace (events name it; interactions do not).
    pub fn bot_user_id(&self) -> Option<&str> {
        self.inner.source.bot_user_id()
    }

    // ------------------------------------------------------------ the acknowledgement

    /// Acknowledges a command or an interaction with `ack`: what Slack shows at once (see
    /// [`Ack`]). Everything before this runs while Slack waits; everything after it runs
    /// once the acknowledgement is decided: in synchronous mode in the same invocation (the
    /// acknowledgement is returned when the listener returns), in deferred mode on a worker,
    /// which runs the listener again from the start (its writes so far replay from the
    /// journal, and this call returns at once). A second call is ignored; for an event, the
    /// call does nothing.
    pub async fn ack(&self, ack: Ack) -> Result<(), Error> {
        let mode = {
            let mut acking = self.inner.acking.lock().expect("ack lock");
            if acking.ack.is_some() {
                tracing::warn!("the listener acknowledged twice: the first stands");
                return Ok(());
            }
            if acking.mode == AckMode::NotAsked {
                // An event: Slack was acknowledged already; nothing to choose.
                return Ok(());
            }
            #[cfg(feature = "explore")]
            crate::testing::explore::acknowledging(self.inner.key.as_str(), ack.body());
            acking.ack = Some(ack);
            acking.mode
        };
        self.inner.acked.notify_one();
        if mode == AckMode::StopAfter {
            // The ingress answers Slack now and hands the rest to a worker: this run goes no
            // further (the pipeline drops it).
            std::future::pending::<()>().await;
        }
        Ok(())
    }

    /// Whether Slack has been (or is being) acknowledged: the request's `trigger_id` can no
    /// longer be spent.
    fn past_ack(&self) -> bool {
        let acking = self.inner.acking.lock().expect("ack lock");
        acking.ack.is_some() || acking.mode == AckMode::Given
    }

    /// The claim's attempt: 1 the first time, more when this run takes over from an earlier one.
    pub async fn attempt(&self) -> u32 {
        self.inner.steps.lock().await.attempt
    }

    /// When the work must be done (the claim's lease, less a margin): bound slow calls by it.
    pub fn deadline(&self) -> Instant {
        self.inner.deadline
    }

    /// The same deadline on the wall clock.
    pub fn deadline_at(&self) -> SystemTime {
        self.inner.wall_deadline
    }

    /// The time left until the deadline.
    pub fn remaining(&self) -> Duration {
        self.inner
            .deadline
            .saturating_duration_since(Instant::now())
    }

    // ------------------------------------------------------------ writes, each a step

    /// Posts `message` in `channel` (`chat.postMessage`).
    pub async fn post(&self, channel: &str, message: impl Into<Message>) -> Result<Posted, Error> {
        let message = message.into();
        let args = message.args(channel, &[]);
        let answer = self
            .step(
                "chat.postMessage",
                args,
                Settle::Lookup {
                    channel,
                    thread_ts: message.thread_ts.as_deref(),
                },
                &[],
                Returns::Ids,
            )
            .await?;
        Ok(Posted {
            channel: answer["channel"].as_str().unwrap_or(channel).to_string(),
            ts: answer["ts"].as_str().unwrap_or_default().to_string(),
        })
    }

    /// Posts in the event's conversation: in its thread when the event is in one.
    pub async fn say(&self, message: impl Into<Message>) -> Result<Posted, Error> {
        let (channel, thread) = self.conversation()?;
        let mut message = message.into();
        if message.thread_ts.is_none() {
            message.thread_ts = thread;
        }
        self.post(&channel, message).await
    }

    /// Posts in the thread of the event's message (starting one under it if need be).
    pub async fn reply(&self, message: impl Into<Message>) -> Result<Posted, Error> {
        let (channel, thread) = self.conversation()?;
        let Some(ts) = thread.or(self.inner.source.message_ts()) else {
            return Err(no_conversation());
        };
        let message = message.into().in_thread(ts);
        self.post(&channel, message).await
    }

    /// A message only `user` sees (`chat.postEphemeral`). Slack keeps no trace of it that can
    /// be looked up: if an earlier claim may have sent it, it is not sent again.
    pub async fn post_ephemeral(
        &self,
        channel: &str,
        user: &str,
        message: impl Into<Message>,
    ) -> Result<(), Error> {
        let args = message.into().args(channel, &[("user", user.into())]);
        self.step(
            "chat.postEphemeral",
            args,
            Settle::AtMostOnce,
            &[],
            Returns::Nothing,
        )
        .await
        .map(|_| ())
    }

    /// Replaces the message `ts` in `channel` (`chat.update`).
    pub async fn update(
        &self,
        channel: &str,
        ts: &str,
        message: impl Into<Message>,
    ) -> Result<(), Error> {
        let args = message.into().args(channel, &[("ts", ts.into())]);
        self.step(
            "chat.update",
            args,
            Settle::Idempotent,
            &[],
            Returns::Nothing,
        )
        .await
        .map(|_| ())
    }

    /// Deletes the message `ts` in `channel` (`chat.delete`; already gone is success).
    pub async fn delete(&self, channel: &str, ts: &str) -> Result<(), Error> {
        let args = json!({"channel": channel, "ts": ts});
        self.step(
            "chat.delete",
            args,
            Settle::Idempotent,
            &["message_not_found"],
            Returns::Nothing,
        )
        .await
        .map(|_| ())
    }

    /// Adds the reaction `name` (without colons) to the message `ts` (`already_reacted` is
    /// success).
    pub async fn react(&self, channel: &str, ts: &str, name: &str) -> Result<(), Error> {
        self.reaction("reactions.add", "already_reacted", channel, ts, name)
            .await
    }

    /// Removes the reaction `name` from the message `ts` (`no_reaction` is success).
    pub async fn unreact(&self, channel: &str, ts: &str, name: &str) -> Result<(), Error> {
        self.reaction("reactions.remove", "no_reaction", channel, ts, name)
            .await
    }

    async fn reaction(
        &self,
        method: &str,
        benign: &str,
        channel: &str,
        ts: &str,
        name: &str,
    ) -> Result<(), Error> {
        let args = json!({"channel": channel, "timestamp": ts, "name": name.trim_matches(':')});
        self.step(
            method,
            args,
            Settle::Idempotent,
            &[benign],
            Returns::Nothing,
        )
        .await
        .map(|_| ())
    }

    /// Reacts to the event's own message.
    pub async fn react_to_event(&self, name: &str) -> Result<(), Error> {
        let (channel, _) = self.conversation()?;
        let Some(ts) = self.inner.source.message_ts() else {
            return Err(no_conversation());
        };
        self.react(&channel, &ts, name).await
    }

    /// Opens (or finds) the DM or group DM with `users` (`conversations.open`); returns its id.
    pub async fn open_conversation(&self, users: &[&str]) -> Result<String, Error> {
        let args = json!({"users": users.join(",")});
        let answer = self
            .step(
                "conversations.open",
                args,
                Settle::Idempotent,
                &[],
                Returns::Ids,
            )
            .await?;
        Ok(answer["channel"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// Any other write method of the Web API, as a step: `settle` says what a later claim does
    /// when this call's fate is unknown ([`Settle::Idempotent`]: call again;
    /// [`Settle::AtMostOnce`]: not again). Returns Slack's answer.
    pub async fn call(
        &self,
        method: &str,
        args: Value,
        settle: Settle<'_>,
    ) -> Result<Value, Error> {
        self.step(method, args, settle, &[], Returns::Ids).await
    }

    // ------------------------------------------------------------ interactions' follow-ups

    /// Answers through the request's `response_url` (a command's, a block action's in a
    /// message, a message shortcut's): see [`Respond`] for the kinds and how each is settled
    /// when a takeover does not know whether an earlier run's reached Slack. The URL is
    /// followed only if it is Slack's (https on `hooks.slack.com`, or the local stand-in named
    /// by `SLACK_API_URL`): any other is refused before any connection, and the event ends
    /// `failed` (`response_url_refused`).
    pub async fn respond(&self, response: impl Into<Respond>) -> Result<(), Error> {
        let response = response.into();
        self.response_url()?;
        let conversation = self.inner.source.conversation();
        let settle = match (&response.kind, &conversation) {
            (RespondKind::InChannel, Some((channel, _))) => Settle::Lookup {
                channel,
                thread_ts: response.body["thread_ts"].as_str(),
            },
            (RespondKind::Replace | RespondKind::Delete, _) => Settle::Idempotent,
            _ => Settle::AtMostOnce,
        };
        self.step(
            RESPOND,
            response.body.clone(),
            settle,
            &[],
            Returns::Nothing,
        )
        .await
        .map(|_| ())
    }

    /// The request's `response_url`, if it is one that may be followed.
    fn response_url(&self) -> Result<http::Uri, Error> {
        let refused = |code: &str| Error::Slack(SlackError::Api { code: code.into() });
        let Some(url) = self.interaction().and_then(|i| i.response_url.as_deref()) else {
            return Err(refused("no_response_url"));
        };
        allowed_response_url(url, self.inner.slack.base_url()).map_err(|why| {
            // The URL itself is a credential for 30 minutes: only why it was refused is logged.
            tracing::warn!(reason = why, "a response_url was refused: not followed");
            crate::metrics::count("ResponseUrlRefused");
            refused("response_url_refused")
        })
    }

    /// Opens a modal with the request's `trigger_id` (`views.open`); returns the view's id.
    /// Only before [`Ctx::ack`]: a `trigger_id` lives 3 s and works once, so after the
    /// acknowledgement (and on a deferred worker) the call is not made and fails with
    /// `expired_trigger_id`. A takeover that does not know whether an earlier run opened it
    /// asks again: the same `trigger_id` cannot open a second one (`exchanged_trigger_id`).
    pub async fn open_view(&self, view: Value) -> Result<String, Error> {
        self.trigger_view("views.open", view).await
    }

    /// Pushes a view onto the open modal's stack with the request's `trigger_id`
    /// (`views.push`), under the same rules as [`Ctx::open_view`].
    pub async fn push_view(&self, view: Value) -> Result<String, Error> {
        self.trigger_view("views.push", view).await
    }

    async fn trigger_view(&self, method: &str, view: Value) -> Result<String, Error> {
        let trigger = self
            .interaction()
            .and_then(|i| i.trigger_id.clone())
            .ok_or_else(|| {
                Error::Slack(SlackError::Api {
                    code: "invalid_trigger_id".into(),
                })
            })?;
        let args = json!({"trigger_id": trigger, "view": view});
        let answer = self
            .step(
                method,
                args,
                Settle::Idempotent,
                &["exchanged_trigger_id"],
                Returns::Ids,
            )
            .await?;
        Ok(answer["view"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// Replaces the view `view_id` (`views.update`): made again harmlessly on a takeover.
    pub async fn update_view(&self, view_id: &str, view: Value) -> Result<(), Error> {
        let args = json!({"view_id": view_id, "view": view});
        self.step(
            "views.update",
            args,
            Settle::Idempotent,
            &[],
            Returns::Nothing,
        )
        .await
        .map(|_| ())
    }

    // ------------------------------------------------------------ remembered results

    /// Runs `compute` once per event and remembers its result (any serialisable value, such as
    /// a model's answer) in the event's journal, written before this returns: a takeover, a
    /// retry or a redelivery that runs the listener again gets the remembered value and does
    /// not run `compute` again, so a listener that branches on it stays deterministic. It is a
    /// step like a write: `name` must be the same, at the same place, each time the listener
    /// runs. A result larger than [`MAX_REMEMBERED_BYTES`] serialised is not remembered (a
    /// warning says so): a later run computes it again.
    pub async fn remember<T, F>(&self, name: &str, compute: F) -> Result<T, Error>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
        F: std::future::Future<Output = T>,
    {
        let mut steps = self.inner.steps.lock().await;
        if steps.closed {
            return Err(Error::Closed);
        }
        let op = step_op("remember", name, "");
        let (step, earlier) = steps.take(&op)?;
        match &earlier {
            Some(StepRecord::Done { result, .. }) => {
                if let Ok(value) = serde_json::from_str::<T>(result) {
                    tracing::info!(step, name, "remembered: not computed again");
                    return Ok(value);
                }
                tracing::warn!(
                    step,
                    name,
                    "a remembered result of another shape: computed again"
                );
            }
            // An earlier claim's window here wrote nothing to Slack: a remembered result is no
            // write.
            Some(StepRecord::Began { .. }) => steps.began_settled = true,
            _ => {}
        }
        // Computed without the steps held, so that a write inside is refused at once rather
        // than waiting: a remembered computation must not write (a replay would skip it).
        #[cfg(feature = "explore")]
        crate::testing::explore::computing(steps.key.as_str(), step, name);
        steps.remembering = Some(step);
        drop(steps);
        let value = compute.await;
        let mut steps = self.inner.steps.lock().await;
        steps.remembering = None;
        let result = serde_json::to_string(&value)
            .map_err(|e| Error::Slack(SlackError::InvalidResponse(Box::new(e))))?;
        if steps.provisional {
            // Deferred mode's ingress has no claim: the result goes to the worker with the
            // request (its journal is seeded with it).
            if result.len() <= MAX_REMEMBERED_BYTES {
                steps.unrecorded.push(Settled::Done {
                    step,
                    result,
                    op: Some(op),
                });
            }
            return Ok(value);
        }
        let record = StepRecord::Done {
            result,
            op: Some(op),
        };
        let too_large = match &record {
            StepRecord::Done { result, .. } => result.len() > MAX_REMEMBERED_BYTES,
            _ => false,
        };
        if too_large || journal_bytes(&steps.after(step, &record)) > MAX_JOURNAL_BYTES {
            // Not a write to Slack: nothing is lost by not keeping it, but a later run
            // computes it again.
            tracing::warn!(
                step,
                name,
                limit = MAX_REMEMBERED_BYTES,
                journal_limit = MAX_JOURNAL_BYTES,
                "too large to remember: a later run computes it again"
            );
            return Ok(value);
        }
        steps.write(step, &record, self.inner.deadline).await?;
        steps.journal.insert(step, record);
        Ok(value)
    }

    /// Writes what the steps learnt since the ledger was last written (a stream's `ts`, say)
    /// now, rather than with the next step: a takeover then knows it.
    pub(crate) async fn record_now(&self) -> Result<(), Error> {
        let mut steps = self.inner.steps.lock().await;
        if steps.provisional || steps.closed {
            return Ok(());
        }
        let last_done = steps.unrecorded.iter().rev().find_map(|fate| match fate {
            Settled::Done { step, result, op } => Some((
                *step,
                StepRecord::Done {
                    result: result.clone(),
                    op: op.clone(),
                },
            )),
            _ => None,
        });
        let Some((step, record)) = last_done else {
            return Ok(());
        };
        steps.write(step, &record, self.inner.deadline).await
    }

    // ------------------------------------------------------------ reads, straight to Slack

    /// Any read method (`users.info`, `conversations.info`, `conversations.replies`…), not
    /// journaled: it runs again each time the listener does.
    pub async fn read(&self, method: &str, args: Value) -> Result<Value, Error> {
        self.inner
            .slack
            .api(method, &Args::form_from(&args), self.inner.deadline)
            .await
            .map_err(Error::Slack)
    }

    /// `users.info`: the user object.
    pub async fn user_info(&self, user: &str) -> Result<Value, Error> {
        let answer = self.read("users.info", json!({"user": user})).await?;
        Ok(answer["user"].clone())
    }

    /// `conversations.info`: the channel object.
    pub async fn conversation_info(&self, channel: &str) -> Result<Value, Error> {
        let answer = self
            .read("conversations.info", json!({"channel": channel}))
            .await?;
        Ok(answer["channel"].clone())
    }

    // ------------------------------------------------------------ the engine

    fn conversation(&self) -> Result<(String, Option<String>), Error> {
        self.inner.source.conversation().ok_or_else(no_conversation)
    }

    /// A journaled write, for the other modules of the bot API (streams, assistants).
    pub(crate) async fn journaled(
        &self,
        method: &str,
        args: Value,
        settle: Settle<'_>,
        benign: &[&str],
        returns: Returns,
    ) -> Result<Value, Error> {
        self.step(method, args, settle, benign, returns).await
    }

    /// The number the next step will have.
    pub(crate) async fn next_step(&self) -> u32 {
        self.inner.steps.lock().await.next
    }

    /// slack-once's names for a message made at `step` (for its metadata).
    pub(crate) fn names(&self, step: u32) -> Value {
        json!({
            "key": self.inner.key.as_str(),
            "event_id": self.inner.source.id(),
            "step": step,
            "version": self.inner.version,
        })
    }

    /// How many writes this claim has made to Slack so far.
    pub(crate) async fn made(&self) -> u32 {
        self.inner.steps.lock().await.tally.made
    }

    /// The last write made counted as not made: Slack refused it as a recorded result that
    /// made nothing (a stream's refused recipient).
    pub(crate) async fn unmade(&self) {
        let mut steps = self.inner.steps.lock().await;
        steps.tally.made = steps.tally.made.saturating_sub(1);
    }

    /// The Web API client (for calls that are not steps: a stream's appends).
    pub(crate) fn slack(&self) -> &SlackClient {
        &self.inner.slack
    }

    /// One journaled write. See the module's documentation.
    async fn step(
        &self,
        method: &str,
        mut args: Value,
        settle: Settle<'_>,
        benign: &[&str],
        returns: Returns,
    ) -> Result<Value, Error> {
        // Held for the whole step: steps run one at a time, in the order they are made.
        let mut steps = self.inner.steps.lock().await;
        if steps.closed {
            return Err(Error::Closed);
        }
        if let Some(remembering) = steps.remembering {
            return Err(Error::InsideRemember {
                step: remembering,
                method: method.to_string(),
            });
        }
        let op = step_identity(method, &args);
        let (step, earlier) = steps.take(&op)?;
        match &earlier {
            Some(StepRecord::Done { result, .. }) => {
                steps.tally.settled += 1;
                tracing::debug!(
                    step,
                    method,
                    "recorded done by an earlier claim: not made again"
                );
                return Ok(serde_json::from_str(result).unwrap_or_else(|_| json!({"ok": true})));
            }
            // An earlier claim stood for this step without an intent of its own; a step that is
            // at most once always writes one first, so for it that claim made nothing.
            Some(StepRecord::Began { .. }) if matches!(settle, Settle::AtMostOnce) => {
                steps.began_settled = true;
            }
            Some(earlier @ (StepRecord::Intent { .. } | StepRecord::Began { .. })) => {
                let settled = self
                    .settle_unknown(&mut steps, step, (method, &op), earlier, settle)
                    .await?;
                if matches!(earlier, StepRecord::Began { .. }) {
                    steps.began_settled = true;
                }
                if let Some(answer) = settled {
                    return Ok(answer);
                }
            }
            None => {}
        }
        let trigger_bound = matches!(method, "views.open" | "views.push");
        if steps.provisional && !trigger_bound {
            // Deferred mode's ingress: what follows is a worker's. Acknowledged now (with the
            // listener's acknowledgement, or an empty one), and this run goes no further.
            steps.next -= 1;
            drop(steps);
            let ack = self.chosen_ack().is_none().then(Ack::empty);
            if let Some(ack) = ack {
                self.ack(ack).await?;
            }
            std::future::pending::<()>().await;
            unreachable!("the pipeline drops this run");
        }
        if trigger_bound && self.past_ack() {
            // Not made: the trigger_id has been spent or has expired.
            tracing::warn!(
                step,
                method,
                "a view needs the request's trigger_id, which is valid only before the \
                 acknowledgement: not made (open views before ctx.ack)"
            );
            return Err(Error::Slack(SlackError::Api {
                code: "expired_trigger_id".into(),
            }));
        }

        let now_ms = steps.now_ms();
        let intent = StepRecord::Intent {
            attempt: steps.attempt,
            op: Some(op.clone()),
            at_ms: Some(now_ms),
            lease_until_ms: Some(steps.lease_until_ms),
        };
        let after = steps.after(step, &intent);
        if step > MAX_STEPS || journal_bytes(&after) > MAX_JOURNAL_BYTES {
            return Err(Error::JournalFull { step });
        }
        // The claim stands for the intent of its first new step while it has written nothing
        // since; any other step records its intent first, conditioned on the owner, with the
        // fates learnt so far: no write to Slack without a claim still held.
        let stands = step == steps.covered
            && steps.began_stands
            && !matches!(settle, Settle::AtMostOnce)
            && !steps.provisional;
        if steps.provisional {
            // No claim to announce it in: the trigger_id is Slack's own once-only guard.
        } else if stands {
            steps.in_flight = Some((step, intent.clone()));
        } else {
            steps.write(step, &intent, self.inner.deadline).await?;
            steps.journal.insert(step, intent.clone());
        }

        if matches!(settle, Settle::Lookup { .. }) {
            let names = json!({
                "key": steps.key.as_str(),
                "event_id": self.inner.source.id(),
                "step": step,
                "attempt": steps.attempt,
                "version": self.inner.version,
            });
            args["metadata"] = post_metadata(args.get("metadata"), names);
        }
        let answer = if method == RESPOND {
            match self.response_url() {
                Ok(url) => {
                    self.inner
                        .slack
                        .respond(&url, &args, self.inner.deadline)
                        .await
                }
                Err(Error::Slack(e)) => Err(e),
                Err(_) => unreachable!("response_url fails only with a Slack error"),
            }
        } else {
            self.inner
                .slack
                .api(method, &Args::Json(args), self.inner.deadline)
                .await
        };
        steps.in_flight = None;
        let answer = match answer {
            Ok(answer) => answer,
            Err(SlackError::Api { code }) if benign.contains(&code.as_str()) => {
                json!({"ok": true, "already": code})
            }
            Err(error) => {
                if error.may_have_posted() {
                    if stands {
                        // No intent of its own in the ledger: the finish records one.
                        steps.unrecorded.push(Settled::Unknown { step, intent });
                    }
                } else if earlier.is_none() && !stands {
                    // Certainly not made, and no earlier claim tried: no one need look.
                    steps.unrecorded.push(Settled::NotDone { step });
                }
                return Err(Error::Slack(error));
            }
        };
        steps.tally.made += 1;
        let result = match returns {
            Returns::Ids => recordable(&answer),
            Returns::Nothing => "{}".to_string(),
        };
        steps.unrecorded.push(Settled::Done {
            step,
            result,
            op: Some(op),
        });
        Ok(answer)
    }

    /// A step an earlier claim announced (`intent`) but did not record done: whether it reached
    /// Slack is unknown, and `settle` says how to find out. `Some(answer)` when it is settled
    /// without a call; `None` when it is to be made.
    async fn settle_unknown(
        &self,
        steps: &mut Steps,
        step: u32,
        (method, op): (&str, &str),
        earlier: &StepRecord,
        settle: Settle<'_>,
    ) -> Result<Option<Value>, Error> {
        let (earlier_attempt, at_ms, lease_until_ms) = match *earlier {
            StepRecord::Intent {
                attempt,
                at_ms,
                lease_until_ms,
                ..
            } => (Some(attempt), at_ms, lease_until_ms),
            StepRecord::Began {
                at_ms,
                lease_until_ms,
            } => (None, Some(at_ms), Some(lease_until_ms)),
            StepRecord::Done { .. } => return Ok(None),
        };
        match settle {
            Settle::Lookup { .. } | Settle::Stream { .. } => {
                let (channel, thread_ts, adopt_unmarked) = match settle {
                    Settle::Lookup { channel, thread_ts } => (channel, thread_ts, false),
                    Settle::Stream { channel, thread_ts } => (channel, Some(thread_ts), true),
                    _ => unreachable!("matched above"),
                };
                let source = &self.inner.source;
                // The earlier claim posted after its intent and before its lease ended: only
                // that window is searched, so one page settles it however busy the channel.
                // Records of earlier versions carry no times: from the event on.
                let oldest = match at_ms {
                    Some(at) => Some(slack_ts(at.saturating_sub(LOOKUP_SLACK_MS))),
                    None => source.since_ts(),
                };
                let latest = lease_until_ms.map(|until| slack_ts(until + LOOKUP_SLACK_MS));
                let query = ReplyQuery {
                    channel,
                    thread_ts,
                    oldest: oldest.as_deref(),
                    latest: latest.as_deref(),
                    key: steps.key.as_str(),
                    step,
                    app: OurApp {
                        app_id: source.app_id(),
                        bot_user_id: source.bot_user_id(),
                    },
                    adopt_unmarked,
                };
                match self
                    .inner
                    .slack
                    .find_reply(&query, self.inner.deadline)
                    .await
                {
                    Ok(Some(found)) => {
                        tracing::info!(
                            step,
                            ts = found.ts,
                            earlier_attempt,
                            "an earlier claim's message is already in Slack: not posting again"
                        );
                        let answer = json!({"ok": true, "channel": found.channel, "ts": found.ts});
                        Ok(Some(steps.settled_earlier(step, op, answer)))
                    }
                    Ok(None) => {
                        tracing::info!(
                            step,
                            earlier_attempt,
                            "the earlier claim's message is not in Slack: posting"
                        );
                        Ok(None)
                    }
                    Err(error)
                        if method == RESPOND
                            && error.code().is_some_and(|c| UNLOOKABLE.contains(&c)) =>
                    {
                        // A command works in conversations the bot is not in: none of its
                        // redeliveries could look either (and the response_url expires after
                        // 30 minutes), so it is settled now, at most once.
                        tracing::warn!(
                            error = %crate::process::error_chain(&error),
                            step,
                            "an earlier claim may have answered through the response_url, and \
                             the conversation cannot be read: not answered again (at most once)"
                        );
                        let answer = json!({"ok": true, "unknown": true});
                        Ok(Some(steps.settled_earlier(step, op, answer)))
                    }
                    Err(error) if steps.last_chance => {
                        tracing::warn!(
                            error = %crate::process::error_chain(&error),
                            step,
                            "could not look for an earlier claim's message, and no delivery \
                             follows this one: posting (it may be a second answer)"
                        );
                        Ok(None)
                    }
                    Err(error) => {
                        tracing::warn!(
                            error = %crate::process::error_chain(&error),
                            step,
                            "could not look for an earlier claim's message: releasing, so \
                             a later delivery looks again rather than risk a second answer"
                        );
                        Err(Error::LookupUnavailable(error))
                    }
                }
            }
            Settle::Idempotent => {
                tracing::info!(
                    step,
                    method,
                    "an earlier claim may have made this call: making it again (harmless)"
                );
                Ok(None)
            }
            Settle::AtMostOnce => {
                tracing::warn!(
                    step,
                    method,
                    "an earlier claim may have made this call, which can be neither looked \
                     for nor repeated: not made again"
                );
                let answer = json!({"ok": true, "unknown": true});
                Ok(Some(steps.settled_earlier(step, op, answer)))
            }
        }
    }
}

/// The step name of a post to the request's `response_url`.
const RESPOND: &str = "response_url";
/// Look-up refusals no later delivery gets past: the bot is not in the conversation, or the app
/// lacks the history scope.
const UNLOOKABLE: &[&str] = &["not_in_channel", "channel_not_found", "missing_scope"];

/// What a `response_url` post does, which decides how a takeover settles it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RespondKind {
    Ephemeral,
    InChannel,
    Replace,
    Delete,
}

/// A post to the request's `response_url` ([`Ctx::respond`]). How a takeover that does not
/// know whether an earlier run's post reached Slack settles it:
/// - [`Respond::in_channel`]: a message in the conversation, carrying slack-once's metadata
///   like every post, so it is looked for among the app's messages, and posted only if absent;
/// - [`Respond::replace`] / [`Respond::delete`]: made again (the same result twice);
/// - [`Respond::ephemeral`] (also a bare string): Slack keeps no trace of it that can be
///   looked up, so it is not sent again: at most once.
#[derive(Clone, Debug, PartialEq)]
pub struct Respond {
    kind: RespondKind,
    body: Value,
}

impl Respond {
    pub fn ephemeral(message: impl Into<Message>) -> Self {
        Self {
            kind: RespondKind::Ephemeral,
            body: response_body(message.into(), "ephemeral"),
        }
    }

    pub fn in_channel(message: impl Into<Message>) -> Self {
        Self {
            kind: RespondKind::InChannel,
            body: response_body(message.into(), "in_channel"),
        }
    }

    /// Replaces the message the request came from (a button's message).
    pub fn replace(message: impl Into<Message>) -> Self {
        let mut body = serde_json::to_value(message.into()).unwrap_or_else(|_| json!({}));
        body["replace_original"] = true.into();
        Self {
            kind: RespondKind::Replace,
            body,
        }
    }

    /// Deletes the message the request came from.
    pub fn delete() -> Self {
        Self {
            kind: RespondKind::Delete,
            body: json!({"delete_original": true}),
        }
    }
}

impl From<&str> for Respond {
    fn from(text: &str) -> Self {
        Respond::ephemeral(text)
    }
}

impl From<String> for Respond {
    fn from(text: String) -> Self {
        Respond::ephemeral(text)
    }
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
fn step_identity(method: &str, args: &Value) -> String {
    let text = |key: &str| args.get(key).and_then(Value::as_str).unwrap_or_default();
    let target = ["thread_ts", "ts", "timestamp", "users", "user", "view_id"]
        .iter()
        .map(|k| text(k))
        .find(|t| !t.is_empty())
        .unwrap_or_default();
    step_op(method, text("channel"), target)
}

/// Epoch milliseconds as a Slack `ts` (`"1700000000.123000"`).
fn slack_ts(ms: u64) -> String {
    format!("{}.{:03}000", ms / 1000, ms % 1000)
}

/// What a replay of a step needs of Slack's answer: the ids it returns (a message's `ts` and
/// `channel`, an ephemeral's `message_ts`, a conversation's, file's or view's `id`), not the
/// whole answer (a `chat.update`'s answer holds the whole message).
fn recordable(answer: &Value) -> String {
    let mut kept = serde_json::Map::new();
    kept.insert("ok".into(), true.into());
    for key in ["ts", "message_ts", "thread_ts", "already"] {
        if let Some(v @ Value::String(_)) = answer.get(key) {
            kept.insert(key.into(), v.clone());
        }
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

fn no_conversation() -> Error {
    Error::Slack(SlackError::Api {
        code: "no_conversation_in_event".into(),
    })
}
