//! The ledger every event passes: claim it, journal the claim's steps, then finish it.
//!
//! Semantics shared by every implementation:
//! - an entry past its TTL (`expires_at`) counts as absent, whether or not it was deleted yet
//!   (DynamoDB deletes expired items lazily, typically within 48 hours);
//! - an in-progress claim whose lease (`lease_until`) has passed counts as absent, so a crashed
//!   claimant's event is taken over by the next copy;
//! - a released claim counts as absent; a done or failed one blocks every later copy;
//! - only the claim's owner journals a step or finishes the claim;
//! - a write whose answer was lost and that the SDK sent again is recognised by its owner token:
//!   a claim that finds its own claim is acquired, a finish that finds itself applied succeeded;
//! - the journal (one record per Slack write of the claim, numbered from 1) survives takeovers,
//!   so a later claim knows which writes were done and which may have been attempted;
//! - the claim itself stands for the intent of the claimant's first new step: it records that
//!   its claimant may make the lowest-numbered step absent from the journal (its *began*
//!   window), so the first Slack write of a claim needs no ledger write of its own; the
//!   claimant's next write (an intent, a finish) ends that record, so a claim that wrote
//!   nothing to Slack and said so leaves no doubt behind. A claim that finds such records of
//!   earlier claims sees them in its journal as [`StepRecord::Began`] at that step.

#[doc(hidden)]
#[cfg(feature = "testing")]
pub mod contract;
pub(crate) mod dynamo;
pub(crate) mod memory;
pub(crate) mod postgres;

use std::collections::BTreeMap;
use std::fmt;

use async_trait::async_trait;

use crate::slack::envelope::EventId;

pub use crate::journal::record::{Journal, Looked, Settled, StepRecord};
pub use dynamo::{DynamoLedger, ITEM_FORMAT, ITEM_FORMAT_READ};
pub use memory::MemoryLedger;
pub use postgres::{ClaimRecord, PostgresLedger, Sweep, Swept};

/// Identifies one claim: a random token made per delivery, so a takeover changes the owner and
/// the previous claimant can no longer journal or finish.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerToken(String);

impl OwnerToken {
    /// A new token: a random UUID's 32 hex digits.
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4().simple().to_string())
    }

    /// The token as the ledger stores it (the item's `owner`).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerToken({})", &self.0)
    }
}

impl From<&str> for OwnerToken {
    fn from(value: &str) -> Self {
        Self(value.to_string())
    }
}

/// Everything a claim writes. Times are passed in, never read from a clock inside the ledger.
#[derive(Clone, Debug)]
pub struct ClaimRequest<'a> {
    /// The key claimed: Slack's `event_id`, or a message's identity.
    pub event_id: &'a EventId,
    /// This delivery's token: the claim's owner if it is acquired.
    pub owner: &'a OwnerToken,
    /// Now, in milliseconds since the epoch.
    pub now_ms: u64,
    /// The claim is live until then (milliseconds since the epoch); processing stops before it.
    pub lease_until_ms: u64,
    /// The entry counts as absent from then on (seconds since the epoch: DynamoDB's TTL unit).
    pub expires_at_s: u64,
    /// The request's workspace, written on the item (`None`: the request names none).
    pub team_id: Option<&'a str>,
    /// The delivery's `X-Slack-Retry-Num`, written on the item (`None`: an original delivery).
    pub retry_num: Option<u32>,
    /// The delivery's `X-Slack-Retry-Reason`, written on the item (`None`: an original).
    pub retry_reason: Option<&'a str>,
    /// The Slack app claiming (the request's `api_app_id`), written on the item: a key another
    /// app holds (two apps whose deployments share one table) is never taken, and
    /// [`Claim::OtherApp`] sends this one to its own key ([`app_scoped`]).
    pub app_id: Option<&'a str>,
    /// A delivery from the work queue with receives left: should this claim end with its
    /// process, the queue hands the request out again (or, its receives spent, dead-letters it
    /// for `redrive`). Written on the item (`redelivery`), so that `sweep` leaves it to them.
    pub redelivery_due: bool,
}

/// One claim, as its owner names it to the ledger.
#[derive(Clone, Copy, Debug)]
pub struct Held<'a> {
    /// The claimed key.
    pub event_id: &'a EventId,
    /// The claim's owner token, as written by its claim.
    pub owner: &'a OwnerToken,
}

/// An alias of a claim's key (a message's `client_msg_id`), and the key it belongs to.
#[derive(Clone, Copy, Debug)]
pub struct AliasRequest<'a> {
    /// The alias's own key (`cmid-TEAM-CLIENT_MSG_ID`).
    pub alias: &'a EventId,
    /// The claim's key: the message this alias is an identity of.
    pub of: &'a EventId,
    /// Now, in milliseconds since the epoch.
    pub now_ms: u64,
    /// The alias counts as absent from then on (seconds since the epoch), as its claim.
    pub expires_at_s: u64,
    /// As [`ClaimRequest::app_id`].
    pub app_id: Option<&'a str>,
}

/// What an alias write found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Alias {
    /// The alias is this key's (written now, or before by a copy of the same message).
    Ours,
    /// The alias belongs to another key: this is a copy of that message, under another `ts`.
    CopyOf {
        /// The key of the message the alias belongs to.
        key: String,
    },
    /// An alias written as a claim (a status and a lease rather than a pointer), as versions
    /// before aliases were pointers wrote it, still live: answered as a live claim (a non-2xx;
    /// the next delivery tries again).
    Busy {
        /// When that claim's lease ends (epoch ms; 0 if the item holds none).
        lease_until_ms: u64,
    },
    /// The alias is another Slack app's (two apps share the table): this app writes its own,
    /// at [`app_scoped`].
    OtherApp {
        /// The app whose alias it is (its `api_app_id`).
        app_id: String,
    },
}

/// What a claim found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// This delivery owns the event now. `attempt` counts the claims of this event, this one
    /// included: above 1, an earlier claim was released or its lease expired. `journal` holds
    /// what earlier claims recorded of their Slack writes.
    Acquired {
        /// The claims of this event so far, this one included: 1 for the first.
        attempt: u32,
        /// The earlier claims' steps, with their began windows as one [`StepRecord::Began`].
        journal: Journal,
    },
    /// The event was answered already; for a message, by the listeners `ran` names (when
    /// the claim recorded them).
    AlreadyDone {
        /// The ids of the listeners that ran; `None` where the completion recorded none.
        ran: Option<Vec<String>>,
    },
    /// The event ended with an error no retry can fix (Slack's code in `error`).
    AlreadyFailed {
        /// The failure's code, as [`Finish::Failed`] recorded it.
        error: String,
    },
    /// Another delivery holds a live claim until `lease_until_ms`.
    InProgress {
        /// When that claim's lease ends (epoch ms).
        lease_until_ms: u64,
    },
    /// The key is another Slack app's, whatever its state (two apps whose deployments share
    /// one table, each sent the same message or event): nothing was written, and this app
    /// claims its own key, [`app_scoped`], instead.
    OtherApp {
        /// The app whose key it is (its `api_app_id`).
        app_id: String,
    },
}

/// The key `app_id` claims where `key` is another app's: the same key, followed by the app.
pub fn app_scoped(key: &EventId, app_id: &str) -> Option<EventId> {
    EventId::try_from(format!("{key}-{app_id}")).ok()
}

/// Whether an item written by the app `found` is another app's than `ours` (an item or a
/// request without one, as versions before apps were written, is anyone's).
pub fn other_app<'a>(found: Option<&'a str>, ours: Option<&str>) -> Option<&'a str> {
    match (found, ours) {
        (Some(found), Some(ours)) if found != ours => Some(found),
        _ => None,
    }
}

/// How a claim ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finish {
    /// Answered: every later copy gets [`Claim::AlreadyDone`].
    Done,
    /// Given up, so the next copy may take the event at once.
    Released,
    /// Ended with an error: later copies get `AlreadyFailed`. `retryable`: the error was not
    /// final (the work queue's receives ran out on a transient failure), so a copy redriven from
    /// the dead-letter queue may claim the event again, as after a release.
    Failed {
        /// The failure's code: Slack's error code (`channel_not_found`) or the pipeline's own
        /// (`unconfirmed_write`, `ledger_unavailable`…).
        error: String,
        /// The failure was not final: a copy redriven from the dead-letter queue may claim the
        /// event again.
        retryable: bool,
    },
}

impl Finish {
    /// The status the claim ends in.
    pub fn status(&self) -> Status {
        match self {
            Finish::Done => Status::Done,
            Finish::Released => Status::Released,
            Finish::Failed { .. } => Status::Failed,
        }
    }
}

/// Why a ledger call failed.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The claim is no longer this owner's: its lease expired and another delivery took it
    /// over, or it was finished already.
    #[error("the claim on {event_id} is not held by this owner any more")]
    NotOwner {
        /// The claimed key.
        event_id: EventId,
    },
    /// The ledger could not be reached or refused the request (throttling, timeout, network).
    #[error("the ledger is unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The write would make the event's item larger than the ledger holds (DynamoDB's 400 KB):
    /// no retry can fix it.
    #[error("the event's ledger item would be larger than the ledger allows")]
    ItemTooLarge(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// A value of the app's own state ([`crate::app::State`]) as the ledger holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateItem {
    /// The value, as the app wrote it (JSON).
    pub value: String,
    /// Its version: 1 for the first write, one more for each write since.
    pub version: u64,
    /// The writers of the latest writes, oldest first (at most [`STATE_WRITERS_KEPT`]): a
    /// write sent again (an SDK retry, a listener run again by a takeover or a redelivery)
    /// finds itself there and is not applied twice.
    pub writers: Vec<String>,
}

/// How many of a state value's latest writers it keeps. Whether a request made a change is
/// decided by the request's own record ([`RequestChange`]); the writers are kept for releases
/// before that record, which decide by them and may still serve during a rolling deploy.
pub const STATE_WRITERS_KEPT: usize = 32;

/// The largest state value the ledger keeps (bytes of JSON): far below DynamoDB's 400 KB item.
pub const MAX_STATE_BYTES: usize = 64 * 1024;

/// A conditional write of a state value.
#[derive(Clone, Debug)]
pub struct StateWrite<'a> {
    /// The value to write (JSON text).
    pub value: &'a str,
    /// The version read (0: none was there, or it had expired).
    pub expected: u64,
    /// The writer's id, appended to [`StateItem::writers`].
    pub writer: &'a str,
    /// The writers read with `expected` (empty when it is 0).
    pub read_writers: &'a [String],
    /// The item's TTL (epoch seconds): past it the value counts as absent.
    pub expires_at_s: u64,
    /// The request making the change, and the change's id in it: the change is recorded on
    /// the request's claim in the same atomic write, so that the request run again, at any
    /// time while its claim is remembered (a redelivery an hour later, a redrive a day later),
    /// finds it made whatever became of the value meanwhile. `None`: not recorded.
    pub request: Option<RequestChange<'a>>,
}

/// A state change as its request records it.
#[derive(Clone, Copy, Debug)]
pub struct RequestChange<'a> {
    /// The request's claim: the write is refused (`NotOwner`) where it is no longer this
    /// owner's, in progress.
    pub held: Held<'a>,
    /// The change's id in the request: the same each time the request runs
    /// ([`state_change_id`]).
    pub change: &'a str,
}

/// The id of the listener `listener`'s `n`th change (from 1) of the value under `key` in a
/// request: what the request's claim records, the same each time the listener runs for the
/// request. The listener is part of it: one message's events run different listeners under one
/// claim (stragglers), and each listener's changes are its own.
pub fn state_change_id(listener: &str, key: &EventId, n: u32) -> String {
    format!(
        "{}:{}#{n}",
        short_digest(listener, 4),
        state_key_digest(key)
    )
}

/// The part of every change id of the value under `key` that names the value.
pub fn state_key_digest(key: &EventId) -> String {
    short_digest(key.as_str(), 8)
}

fn short_digest(text: &str, bytes: usize) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(text.as_bytes())[..bytes])
}

/// What a [`Ledger::replace_note`] came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotePut {
    /// The note was as read: it is now the value written.
    Written,
    /// Another write came between the read and this one (or this very write, whose answer
    /// was lost): nothing was written. Read again.
    Conflict,
}

/// What a [`StateWrite`] came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatePut {
    /// Written as `version`.
    Written {
        /// The version written: one more than the one read.
        version: u64,
    },
    /// Another write came between the read and this one: nothing was written.
    Conflict,
    /// The request's claim records this change already (an earlier run of the request made
    /// it, or this very write, whose answer was lost): nothing was written.
    MadeAlready {
        /// The version the change wrote, as the claim records it.
        version: u64,
    },
}

/// The writers an item keeps after `writer`'s write: the latest [`STATE_WRITERS_KEPT`].
pub fn state_writers_after(mut writers: Vec<String>, writer: &str) -> Vec<String> {
    writers.push(writer.to_string());
    let extra = writers.len().saturating_sub(STATE_WRITERS_KEPT);
    writers.drain(..extra);
    writers
}

/// The ledger seam: the in-memory and DynamoDB implementations share these semantics.
#[async_trait]
pub trait Ledger: Send + Sync + 'static {
    /// Whether every process of the deployment reads this ledger (a table), not this process
    /// alone (its own memory). Deferred mode's ingress reads the app's state only from a
    /// shared ledger; from its own memory it hands the request to a worker instead.
    fn is_shared(&self) -> bool {
        true
    }

    /// Claims the event if it is absent, expired, released or lease-expired, or if the live
    /// claim found is this request's own (a claim sent again after its answer was lost).
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<Claim, LedgerError>;

    /// Records `intent` (a [`StepRecord::Intent`]) as step `step` of the claim, and `settled`
    /// (earlier steps' fates) with it. Refused (`NotOwner`) when the claim is no longer held:
    /// then the call must not be made.
    async fn begin_step(
        &self,
        held: Held<'_>,
        step: u32,
        intent: &StepRecord,
        settled: &[Settled],
        now_ms: u64,
    ) -> Result<(), LedgerError>;

    /// Writes `request.alias` as an identity of `request.of`, unless it already belongs to
    /// another key (then this is a copy of that message). An alias past its TTL counts as
    /// absent. Sent again after its answer was lost, it finds itself written: `Ours`.
    async fn alias(&self, request: &AliasRequest<'_>) -> Result<Alias, LedgerError>;

    /// Keeps `value` under `key` beside the claims (an assistant thread's context: `actx-…`),
    /// unless a note written at a later `at_ms` is there already; it expires at `expires_at_s`
    /// like a claim. Idempotent: sent again, it changes nothing.
    async fn set_note(
        &self,
        key: &EventId,
        value: &str,
        at_ms: u64,
        expires_at_s: u64,
    ) -> Result<(), LedgerError>;

    /// Replaces the note under `key` with `value` (written at `at_ms`, expiring at
    /// `expires_at_s`) if it is still `read` (`None`: none, or past its TTL at `now_ms`), else
    /// [`NotePut::Conflict`] and nothing is written: a note read, changed and written again
    /// (a session's stops) loses no write that came in between.
    async fn replace_note(
        &self,
        key: &EventId,
        read: Option<&str>,
        value: &str,
        at_ms: u64,
        expires_at_s: u64,
        now_ms: u64,
    ) -> Result<NotePut, LedgerError>;

    /// The note under `key`, unless none was written or it is past its TTL.
    async fn note(&self, key: &EventId, now_ms: u64) -> Result<Option<String>, LedgerError>;

    /// The state changes the claim of `key` records ([`RequestChange`]), by change id, with
    /// the version each wrote: none where it records none (or is gone). A strongly consistent
    /// read.
    async fn state_changes(&self, key: &EventId) -> Result<BTreeMap<String, u64>, LedgerError>;

    /// The app's state value under `key` (an item of its own, `state-APP-…`), unless none was
    /// written or it is past its TTL. A strongly consistent read.
    async fn state(&self, key: &EventId, now_ms: u64) -> Result<Option<StateItem>, LedgerError>;

    /// Writes `write.value` under `key` as version `write.expected + 1` if the version there is
    /// still `write.expected` (0: absent or past its TTL), else [`StatePut::Conflict`]; with
    /// `write.request`, atomically with the change's record on the request's claim: refused
    /// with [`StatePut::MadeAlready`] where the claim records the change already, and with
    /// [`LedgerError::NotOwner`] where the claim is no longer the owner's.
    async fn put_state(
        &self,
        key: &EventId,
        write: &StateWrite<'_>,
        now_ms: u64,
    ) -> Result<StatePut, LedgerError>;

    /// Ends the owner's claim, recording `settled` with it. Sent again after its answer was
    /// lost, a finish that finds itself applied succeeds.
    async fn finish(
        &self,
        held: Held<'_>,
        to: &Finish,
        settled: &[Settled],
        now_ms: u64,
    ) -> Result<(), LedgerError>;

    /// Marks the owner's claim done: every later copy gets [`Claim::AlreadyDone`].
    async fn complete(
        &self,
        event_id: &EventId,
        owner: &OwnerToken,
        now_ms: u64,
    ) -> Result<(), LedgerError> {
        self.finish(Held { event_id, owner }, &Finish::Done, &[], now_ms)
            .await
    }

    /// Gives the owner's claim up, so the next copy may take the event at once.
    async fn release(
        &self,
        event_id: &EventId,
        owner: &OwnerToken,
        now_ms: u64,
    ) -> Result<(), LedgerError> {
        self.finish(Held { event_id, owner }, &Finish::Released, &[], now_ms)
            .await
    }
}

/// The state of one event in a ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Claimed: live until its lease ends, then it counts as absent.
    InProgress,
    /// Answered: every later copy is refused.
    Done,
    /// Given up by its claimant: the next copy may claim it at once.
    Released,
    /// Ended with an error: later copies are refused, unless the failure was retryable.
    Failed,
}

impl Status {
    /// The status as stored (the item's `status`): `in_progress`, `done`, `released`, `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "in_progress",
            Status::Done => "done",
            Status::Released => "released",
            Status::Failed => "failed",
        }
    }

    /// Reads [`Status::as_str`]'s form. Anything else is `None`.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "in_progress" => Some(Status::InProgress),
            "done" => Some(Status::Done),
            "released" => Some(Status::Released),
            "failed" => Some(Status::Failed),
            _ => None,
        }
    }
}

/// Why an existing entry refuses a new claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// The event was answered.
    Done,
    /// The event ended with an error that was final.
    Failed,
    /// Another claim is live.
    InProgress {
        /// When its lease ends (epoch ms).
        lease_until_ms: u64,
    },
}

/// What an existing entry means to a new claim at `now`: the one rule both ledgers apply.
/// `None`: the entry counts as absent and the claim succeeds. `retryable` marks a `failed`
/// entry whose failure was not final (see [`Finish::Failed`]).
pub fn existing_blocks_claim(
    status: Status,
    lease_until_ms: u64,
    expires_at_s: u64,
    now_ms: u64,
    retryable: bool,
) -> Option<Blocked> {
    existing_blocks_claim_ms(
        status,
        lease_until_ms,
        expires_at_s.saturating_mul(1000),
        now_ms,
        retryable,
    )
}

/// [`existing_blocks_claim`] with the entry's TTL in milliseconds (PostgreSQL keeps it so).
pub fn existing_blocks_claim_ms(
    status: Status,
    lease_until_ms: u64,
    expires_at_ms: u64,
    now_ms: u64,
    retryable: bool,
) -> Option<Blocked> {
    if expires_at_ms <= now_ms {
        return None;
    }
    match status {
        Status::Done => Some(Blocked::Done),
        Status::Failed if retryable => None,
        Status::Failed => Some(Blocked::Failed),
        Status::InProgress if lease_until_ms > now_ms => {
            Some(Blocked::InProgress { lease_until_ms })
        }
        Status::InProgress | Status::Released => None,
    }
}

/// What one write of a claim's owner does to its journal: the fates learnt (`settled`, in
/// order) and a step's intent, as one edit where the last change of each step decides. The
/// in-memory ledger applies it to its entry; PostgreSQL sends it as one update.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalEdit {
    /// Step records written (`Some`) or removed (`None`), by step.
    pub records: BTreeMap<u32, Option<StepRecord>>,
    /// Look-ups' progress written (`Some`) or removed (`None`), by step.
    pub looked: BTreeMap<u32, Option<Looked>>,
    /// The listeners that ran, where a fate records them.
    pub ran: Option<Vec<String>>,
}

impl JournalEdit {
    /// The fates `settled`, applied in order.
    pub fn of(settled: &[Settled]) -> Self {
        let mut edit = Self::default();
        for fate in settled {
            match fate {
                Settled::Done { step, result, op } => {
                    let done = StepRecord::Done {
                        result: result.clone(),
                        op: op.clone(),
                    };
                    edit.records.insert(*step, Some(done));
                }
                Settled::NotDone { step } => {
                    edit.records.insert(*step, None);
                }
                Settled::Unknown { step, intent } => {
                    edit.records.insert(*step, Some(intent.clone()));
                }
                Settled::Ran { listeners } => edit.ran = Some(listeners.clone()),
                Settled::Looked { step, looked } => {
                    edit.looked.insert(*step, Some(looked.clone()));
                }
            }
            // A step written again: a look-up's progress for what it was is no longer its, but
            // for a doubt kept with it.
            match fate {
                Settled::Unknown {
                    step,
                    intent:
                        StepRecord::Intent {
                            looked: Some(looked),
                            ..
                        },
                } => {
                    edit.looked.insert(*step, Some(looked.clone()));
                }
                Settled::Done { step, .. }
                | Settled::NotDone { step }
                | Settled::Unknown { step, .. } => {
                    edit.looked.insert(*step, None);
                }
                Settled::Ran { .. } | Settled::Looked { .. } => {}
            }
        }
        edit
    }

    /// The edit, then `intent` recorded as step `step` (whose earlier look-up is no longer its).
    pub fn with_intent(mut self, step: u32, intent: &StepRecord) -> Self {
        self.records.insert(step, Some(intent.clone()));
        self.looked.insert(step, None);
        self
    }

    /// Applies the edit to a journal, its look-ups' progress and its listeners that ran.
    pub fn apply(
        &self,
        journal: &mut Journal,
        looked: &mut BTreeMap<u32, Looked>,
        ran: &mut Option<Vec<String>>,
    ) {
        for (step, record) in &self.records {
            match record {
                Some(record) => journal.insert(*step, record.clone()),
                None => journal.remove(step),
            };
        }
        for (step, progress) in &self.looked {
            match progress {
                Some(progress) => looked.insert(*step, progress.clone()),
                None => looked.remove(step),
            };
        }
        if let Some(listeners) = &self.ran {
            *ran = Some(listeners.clone());
        }
    }
}

/// Whether an entry found by a write sent again is that write, already applied: the owner
/// token is unique to one claim, so an entry with this owner in `status` was written by it.
pub fn applied_already(
    found_owner: Option<&str>,
    found_status: Option<Status>,
    owner: &OwnerToken,
    status: Status,
) -> bool {
    found_owner == Some(owner.as_str()) && found_status == Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_entries_and_leases_count_as_absent() {
        let now = 1_000_000;
        // TTL passed: absent whatever the status.
        assert_eq!(
            existing_blocks_claim(Status::Done, 0, 1_000, now, false),
            None
        );
        assert_eq!(
            existing_blocks_claim(Status::Failed, 0, 1_000, now, false),
            None
        );
        assert_eq!(
            existing_blocks_claim(Status::InProgress, now + 5, 1_000, now, false),
            None
        );
        // Live entries.
        assert_eq!(
            existing_blocks_claim(Status::Done, 0, 2_000, now, false),
            Some(Blocked::Done)
        );
        assert_eq!(
            existing_blocks_claim(Status::Failed, 0, 2_000, now, false),
            Some(Blocked::Failed)
        );
        assert_eq!(
            existing_blocks_claim(Status::InProgress, now + 1, 2_000, now, false),
            Some(Blocked::InProgress {
                lease_until_ms: now + 1
            })
        );
        // Lease passed, or released: absent.
        assert_eq!(
            existing_blocks_claim(Status::InProgress, now, 2_000, now, false),
            None
        );
        assert_eq!(
            existing_blocks_claim(Status::Released, now + 9, 2_000, now, false),
            None
        );
        // A failure that was not final: a redriven copy may claim it again.
        assert_eq!(
            existing_blocks_claim(Status::Failed, 0, 2_000, now, true),
            None
        );
    }

    #[test]
    fn a_journal_edit_is_its_fates_in_order_the_last_of_each_step_deciding() {
        let looked = Looked {
            oldest: "1.0".into(),
            latest: "2.0".into(),
            to: ">1.5".into(),
        };
        let edit = JournalEdit::of(&[
            Settled::Looked {
                step: 1,
                looked: looked.clone(),
            },
            Settled::Done {
                step: 1,
                result: "{}".into(),
                op: None,
            },
            Settled::Done {
                step: 2,
                result: "{}".into(),
                op: None,
            },
            Settled::Looked {
                step: 2,
                looked: looked.clone(),
            },
            Settled::NotDone { step: 3 },
        ])
        .with_intent(
            4,
            &StepRecord::Intent {
                attempt: 1,
                op: None,
                at_ms: None,
                lease_until_ms: None,
                looked: None,
            },
        );
        let mut journal = Journal::from([(
            3,
            StepRecord::Done {
                result: "{}".into(),
                op: None,
            },
        )]);
        let mut progress = BTreeMap::from([(4, looked.clone())]);
        let mut ran = None;
        edit.apply(&mut journal, &mut progress, &mut ran);
        assert_eq!(journal.keys().copied().collect::<Vec<_>>(), [1, 2, 4]);
        assert_eq!(
            progress,
            BTreeMap::from([(2, looked)]),
            "step 1's look-up ended by its record, step 2's kept after it, step 4's by its intent"
        );
        assert_eq!(ran, None);
    }

    #[test]
    fn only_the_same_owner_in_the_target_status_is_a_write_already_applied() {
        let me = OwnerToken::from("me");
        assert!(applied_already(
            Some("me"),
            Some(Status::Done),
            &me,
            Status::Done
        ));
        assert!(!applied_already(
            Some("other"),
            Some(Status::Done),
            &me,
            Status::Done
        ));
        assert!(!applied_already(
            Some("me"),
            Some(Status::Released),
            &me,
            Status::Done
        ));
        assert!(!applied_already(None, None, &me, Status::Done));
    }
}
