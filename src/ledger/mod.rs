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
//!   so a later claim knows which writes were done and which may have been attempted.

#[doc(hidden)]
pub mod contract;
pub mod dynamo;
pub mod memory;

use std::collections::BTreeMap;
use std::fmt;

use async_trait::async_trait;

use crate::envelope::EventId;

pub use dynamo::DynamoLedger;
pub use memory::MemoryLedger;

/// Identifies one claim: a random token made per delivery, so a takeover changes the owner and
/// the previous claimant can no longer journal or finish.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerToken(String);

impl OwnerToken {
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4().simple().to_string())
    }

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
    pub event_id: &'a EventId,
    pub owner: &'a OwnerToken,
    /// Now, in milliseconds since the epoch.
    pub now_ms: u64,
    /// The claim is live until then (milliseconds since the epoch); processing stops before it.
    pub lease_until_ms: u64,
    /// The entry counts as absent from then on (seconds since the epoch: DynamoDB's TTL unit).
    pub expires_at_s: u64,
    pub team_id: Option<&'a str>,
    pub retry_num: Option<u32>,
    pub retry_reason: Option<&'a str>,
}

/// One claim, as its owner names it to the ledger.
#[derive(Clone, Copy, Debug)]
pub struct Held<'a> {
    pub event_id: &'a EventId,
    pub owner: &'a OwnerToken,
}

/// What the ledger knows of one Slack write of an event (a numbered step of its claims).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepRecord {
    /// The claim numbered `attempt` was about to make the call `op` (the Web API method):
    /// whether it reached Slack is unknown until someone looks.
    Intent { attempt: u32, op: Option<String> },
    /// The call `op` took effect; its result as JSON text (for a post, `{"ts": …}`).
    Done { result: String, op: Option<String> },
}

/// The steps of an event, by number (1, 2, …).
pub type Journal = BTreeMap<u32, StepRecord>;

/// What a claim found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// This delivery owns the event now. `attempt` counts the claims of this event, this one
    /// included: above 1, an earlier claim was released or its lease expired. `journal` holds
    /// what earlier claims recorded of their Slack writes.
    Acquired { attempt: u32, journal: Journal },
    /// The event was answered already.
    AlreadyDone,
    /// The event ended with an error no retry can fix (Slack's code in `error`).
    AlreadyFailed { error: String },
    /// Another delivery holds a live claim until `lease_until_ms`.
    InProgress { lease_until_ms: u64 },
}

/// A step's fate learnt since the ledger was last written; the next write of the claim (the
/// next step's intent, or the finish) records it, so a step costs one write, not two.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// The call `op` took effect, with this result.
    Done {
        step: u32,
        result: String,
        op: Option<String>,
    },
    /// The call certainly did not take effect: its intent is removed, so no later claim looks.
    NotDone { step: u32 },
}

/// How a claim ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finish {
    Done,
    /// Given up, so the next copy may take the event at once.
    Released,
    /// Ended with an error: later copies get `AlreadyFailed`. `retryable`: the error was not
    /// final (the work queue's receives ran out on a transient failure), so a copy redriven from
    /// the dead-letter queue may claim the event again, as after a release.
    Failed {
        error: String,
        retryable: bool,
    },
}

impl Finish {
    pub fn status(&self) -> Status {
        match self {
            Finish::Done => Status::Done,
            Finish::Released => Status::Released,
            Finish::Failed { .. } => Status::Failed,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The claim is no longer this owner's: its lease expired and another delivery took it
    /// over, or it was finished already.
    #[error("the claim on {event_id} is not held by this owner any more")]
    NotOwner { event_id: EventId },
    /// The ledger could not be reached or refused the request (throttling, timeout, network).
    #[error("the ledger is unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// The ledger seam: the in-memory and DynamoDB implementations share these semantics.
#[async_trait]
pub trait Ledger: Send + Sync + 'static {
    /// Claims the event if it is absent, expired, released or lease-expired, or if the live
    /// claim found is this request's own (a claim sent again after its answer was lost).
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<Claim, LedgerError>;

    /// Records that step `step` of the claim is about to call Slack's method `op`, and
    /// `settled` (the previous step's fate) with it. Refused (`NotOwner`) when the claim is no
    /// longer held: then the call must not be made.
    async fn begin_step(
        &self,
        held: Held<'_>,
        step: u32,
        attempt: u32,
        op: Option<&str>,
        settled: Option<&Settled>,
        now_ms: u64,
    ) -> Result<(), LedgerError>;

    /// Ends the owner's claim, recording `settled` with it. Sent again after its answer was
    /// lost, a finish that finds itself applied succeeds.
    async fn finish(
        &self,
        held: Held<'_>,
        to: &Finish,
        settled: Option<&Settled>,
        now_ms: u64,
    ) -> Result<(), LedgerError>;

    /// Marks the owner's claim done: every later copy gets `Claim::AlreadyDone`.
    async fn complete(
        &self,
        event_id: &EventId,
        owner: &OwnerToken,
        now_ms: u64,
    ) -> Result<(), LedgerError> {
        self.finish(Held { event_id, owner }, &Finish::Done, None, now_ms)
            .await
    }

    /// Gives the owner's claim up, so the next copy may take the event at once.
    async fn release(
        &self,
        event_id: &EventId,
        owner: &OwnerToken,
        now_ms: u64,
    ) -> Result<(), LedgerError> {
        self.finish(Held { event_id, owner }, &Finish::Released, None, now_ms)
            .await
    }
}

/// The state of one event in a ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    InProgress,
    Done,
    Released,
    Failed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "in_progress",
            Status::Done => "done",
            Status::Released => "released",
            Status::Failed => "failed",
        }
    }

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
    Done,
    Failed,
    InProgress { lease_until_ms: u64 },
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
    if expires_at_s.saturating_mul(1000) <= now_ms {
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
