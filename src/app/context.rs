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

use super::message::Message;
use crate::envelope::{EventCallback, EventId};
use crate::ledger::{Held, Journal, Ledger, LedgerError, OwnerToken, Settled, StepRecord};
use crate::slack::{post_metadata, Args, ReplyQuery, SlackClient, SlackError};

/// A recorded result larger than this is kept trimmed to its `ts` and `channel` (the item
/// holding the journal must stay far below DynamoDB's 400 KB).
const MAX_RESULT_BYTES: usize = 16 * 1024;

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
}

/// How a step whose fate is unknown is settled by a later claim.
#[derive(Clone, Copy, Debug)]
pub enum Settle<'a> {
    /// A message: looked for in Slack by its metadata.
    Lookup {
        channel: &'a str,
        thread_ts: Option<&'a str>,
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
    pub journal: Journal,
    pub next: u32,
    pub unrecorded: Option<Settled>,
    pub last_chance: bool,
    pub closed: bool,
    pub tally: Tally,
    pub now_ms: u64,
    pub started: Instant,
}

impl Steps {
    fn now_ms(&self) -> u64 {
        self.now_ms + self.started.elapsed().as_millis() as u64
    }

    /// Step `step` (`method`) was found done for an earlier claim: `answer` stands for its
    /// result and is recorded with the claim's next write.
    fn settled_earlier(&mut self, step: u32, method: &str, answer: Value) -> Value {
        self.unrecorded = Some(Settled::Done {
            step,
            result: answer.to_string(),
            op: Some(method.to_string()),
        });
        self.tally.settled += 1;
        answer
    }
}

struct Inner {
    event: Arc<EventCallback>,
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
            .field("event_id", &self.inner.event.event_id)
            .finish()
    }
}

impl Ctx {
    pub(crate) fn new(
        event: Arc<EventCallback>,
        slack: SlackClient,
        deadline: Instant,
        version: String,
        steps: Steps,
    ) -> Self {
        let wall_deadline = SystemTime::now() + deadline.saturating_duration_since(Instant::now());
        Self {
            inner: Arc::new(Inner {
                event,
                slack,
                deadline,
                wall_deadline,
                version,
                steps: Mutex::new(steps),
            }),
        }
    }

    /// Ends the steps: later writes fail with [`Error::Closed`]. Returns the last step's fate
    /// for the finishing write, and the tally.
    pub(crate) async fn close(&self) -> (Option<Settled>, Tally) {
        let mut steps = self.inner.steps.lock().await;
        steps.closed = true;
        (steps.unrecorded.take(), steps.tally)
    }

    // ------------------------------------------------------------ the event

    /// The whole delivery: `event_id`, team, authorizations, and the inner event (`.event`,
    /// with `.event.raw` as Slack sent it).
    pub fn event(&self) -> &EventCallback {
        &self.inner.event
    }

    pub fn event_id(&self) -> &str {
        self.inner.event.event_id.as_str()
    }

    pub fn team(&self) -> Option<&str> {
        self.inner.event.team()
    }

    /// The bot's own user id in this workspace.
    pub fn bot_user_id(&self) -> Option<&str> {
        self.inner.event.bot_user_id()
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
            message.thread_ts = thread.map(str::to_string);
        }
        self.post(&channel, message).await
    }

    /// Posts in the thread of the event's message (starting one under it if need be).
    pub async fn reply(&self, message: impl Into<Message>) -> Result<Posted, Error> {
        let (channel, thread) = self.conversation()?;
        let event = &self.inner.event.event;
        let Some(ts) = thread.or(event.ts.as_deref()) else {
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
        self.step("chat.postEphemeral", args, Settle::AtMostOnce, &[])
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
        self.step("chat.update", args, Settle::Idempotent, &[])
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
        self.step(method, args, Settle::Idempotent, &[benign])
            .await
            .map(|_| ())
    }

    /// Reacts to the event's own message.
    pub async fn react_to_event(&self, name: &str) -> Result<(), Error> {
        let (channel, _) = self.conversation()?;
        let Some(ts) = self.inner.event.event.ts.clone() else {
            return Err(no_conversation());
        };
        self.react(&channel, &ts, name).await
    }

    /// Opens (or finds) the DM or group DM with `users` (`conversations.open`); returns its id.
    pub async fn open_conversation(&self, users: &[&str]) -> Result<String, Error> {
        let args = json!({"users": users.join(",")});
        let answer = self
            .step("conversations.open", args, Settle::Idempotent, &[])
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
        self.step(method, args, settle, &[]).await
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

    fn conversation(&self) -> Result<(String, Option<&str>), Error> {
        let event = &self.inner.event.event;
        let channel = event.channel.clone().ok_or_else(no_conversation)?;
        Ok((channel, event.thread_ts.as_deref()))
    }

    /// One journaled write. See the module's documentation.
    async fn step(
        &self,
        method: &str,
        mut args: Value,
        settle: Settle<'_>,
        benign: &[&str],
    ) -> Result<Value, Error> {
        // Held for the whole step: steps run one at a time, in the order they are made.
        let mut steps = self.inner.steps.lock().await;
        if steps.closed {
            return Err(Error::Closed);
        }
        let step = steps.next;
        steps.next += 1;
        let earlier = steps.journal.get(&step).cloned();
        match &earlier {
            Some(StepRecord::Done { result, op }) => {
                check_same(step, op.as_deref(), method)?;
                steps.tally.settled += 1;
                tracing::debug!(
                    step,
                    method,
                    "recorded done by an earlier claim: not made again"
                );
                return Ok(serde_json::from_str(result).unwrap_or_else(|_| json!({"ok": true})));
            }
            Some(StepRecord::Intent { attempt, op }) => {
                check_same(step, op.as_deref(), method)?;
                let settled = self
                    .settle_unknown(&mut steps, step, method, *attempt, settle)
                    .await?;
                if let Some(answer) = settled {
                    return Ok(answer);
                }
            }
            None => {}
        }

        // The intent, conditioned on the owner, with the previous step's fate: no write to
        // Slack without a claim still held.
        let now_ms = steps.now_ms();
        let held = Held {
            event_id: &steps.key,
            owner: &steps.owner,
        };
        let intent = steps.ledger.begin_step(
            held,
            step,
            steps.attempt,
            Some(method),
            steps.unrecorded.as_ref(),
            now_ms,
        );
        match tokio::time::timeout_at(self.inner.deadline, intent).await {
            Ok(Ok(())) => steps.unrecorded = None,
            Ok(Err(e)) => return Err(Error::Ledger(e)),
            Err(_) => {
                return Err(Error::Ledger(LedgerError::Unavailable(
                    "the ledger did not answer before the deadline".into(),
                )))
            }
        }

        if matches!(settle, Settle::Lookup { .. }) {
            let names = json!({
                "key": steps.key.as_str(),
                "event_id": self.inner.event.event_id.as_str(),
                "step": step,
                "attempt": steps.attempt,
                "version": self.inner.version,
            });
            args["metadata"] = post_metadata(args.get("metadata"), names);
        }
        let answer = match self
            .inner
            .slack
            .api(method, &Args::Json(args), self.inner.deadline)
            .await
        {
            Ok(answer) => answer,
            Err(SlackError::Api { code }) if benign.contains(&code.as_str()) => {
                json!({"ok": true, "already": code})
            }
            Err(error) => {
                if !error.may_have_posted() && earlier.is_none() {
                    // Certainly not made, and no earlier claim tried: no one need look.
                    steps.unrecorded = Some(Settled::NotDone { step });
                }
                return Err(Error::Slack(error));
            }
        };
        steps.tally.made += 1;
        steps.unrecorded = Some(Settled::Done {
            step,
            result: recordable(&answer),
            op: Some(method.to_string()),
        });
        Ok(answer)
    }

    /// A step an earlier claim announced but did not record done: whether it reached Slack is
    /// unknown, and `settle` says how to find out. `Some(answer)` when it is settled without a
    /// call; `None` when it is to be made.
    async fn settle_unknown(
        &self,
        steps: &mut Steps,
        step: u32,
        method: &str,
        earlier_attempt: u32,
        settle: Settle<'_>,
    ) -> Result<Option<Value>, Error> {
        match settle {
            Settle::Lookup { channel, thread_ts } => {
                let event = &self.inner.event;
                let event_time = event.event_time.map(|t| t.to_string());
                let oldest = event
                    .event
                    .ts
                    .as_deref()
                    .or(event.event.event_ts.as_deref())
                    .or(event_time.as_deref());
                let query = ReplyQuery {
                    channel,
                    thread_ts,
                    oldest,
                    key: steps.key.as_str(),
                    step,
                };
                match self
                    .inner
                    .slack
                    .find_reply(&query, self.inner.deadline)
                    .await
                {
                    Ok(Some(ts)) => {
                        tracing::info!(
                            step,
                            ts,
                            earlier_attempt,
                            "an earlier claim's message is already in Slack: not posting again"
                        );
                        let answer = json!({"ok": true, "channel": channel, "ts": ts});
                        Ok(Some(steps.settled_earlier(step, method, answer)))
                    }
                    Ok(None) => {
                        tracing::info!(
                            step,
                            earlier_attempt,
                            "the earlier claim's message is not in Slack: posting"
                        );
                        Ok(None)
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
                Ok(Some(steps.settled_earlier(step, method, answer)))
            }
        }
    }
}

/// A replayed step must be the same write.
fn check_same(step: u32, recorded: Option<&str>, now: &str) -> Result<(), Error> {
    match recorded {
        Some(recorded) if recorded != now => Err(Error::Nondeterministic {
            step,
            recorded: recorded.to_string(),
            now: now.to_string(),
        }),
        _ => Ok(()),
    }
}

/// The result to journal: the answer, or when too large its `ts` and `channel` only.
fn recordable(answer: &Value) -> String {
    let text = answer.to_string();
    if text.len() <= MAX_RESULT_BYTES {
        return text;
    }
    let mut small = json!({"ok": true, "trimmed": true});
    for key in ["ts", "channel"] {
        if let Some(v) = answer.get(key) {
            small[key] = v.clone();
        }
    }
    small.to_string()
}

fn no_conversation() -> Error {
    Error::Slack(SlackError::Api {
        code: "no_conversation_in_event".into(),
    })
}
