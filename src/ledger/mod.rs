//! The ledger every event passes: claim it, then complete or release it.
//!
//! Semantics shared by every implementation:
//! - an entry past its TTL (`expires_at`) counts as absent, whether or not it was deleted yet
//!   (DynamoDB deletes expired items lazily, typically within 48 hours);
//! - an in-progress claim whose lease (`lease_until`) has passed counts as absent, so a crashed
//!   claimant's event is taken over by the next copy;
//! - a released claim counts as absent;
//! - only the claim's owner completes or releases it.

pub mod dynamo;
pub mod memory;

use std::fmt;

use async_trait::async_trait;

use crate::envelope::EventId;

pub use dynamo::DynamoLedger;
pub use memory::MemoryLedger;

/// Identifies one claim: a random token made per delivery, so a takeover changes the owner and
/// the previous claimant can no longer complete or release.
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

/// What a claim found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// This delivery owns the event now. `attempt` counts the claims of this event, this one
    /// included: above 1, an earlier claim was released or its lease expired.
    Acquired { attempt: u32 },
    /// The event was answered already.
    AlreadyDone,
    /// Another delivery holds a live claim until `lease_until_ms`.
    InProgress { lease_until_ms: u64 },
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The claim is no longer this owner's: its lease expired and another delivery took it
    /// over, or it was completed or released already.
    #[error("the claim on {event_id} is not held by this owner any more")]
    NotOwner { event_id: EventId },
    /// The ledger could not be reached or refused the request (throttling, timeout, network).
    #[error("the ledger is unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// The ledger seam: the in-memory and DynamoDB implementations share these semantics.
#[async_trait]
pub trait Ledger: Send + Sync + 'static {
    /// Claims the event if it is absent, expired, released or lease-expired.
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<Claim, LedgerError>;

    /// Marks the owner's claim done: every later copy gets `Claim::AlreadyDone`.
    async fn complete(
        &self,
        event_id: &EventId,
        owner: &OwnerToken,
        now_ms: u64,
    ) -> Result<(), LedgerError>;

    /// Gives the owner's claim up, so the next copy may take the event at once.
    async fn release(
        &self,
        event_id: &EventId,
        owner: &OwnerToken,
        now_ms: u64,
    ) -> Result<(), LedgerError>;
}

/// The state of one event in a ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    InProgress,
    Done,
    Released,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "in_progress",
            Status::Done => "done",
            Status::Released => "released",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "in_progress" => Some(Status::InProgress),
            "done" => Some(Status::Done),
            "released" => Some(Status::Released),
            _ => None,
        }
    }
}

/// What an existing entry means to a new claim at `now`: the one rule both ledgers apply.
pub fn existing_blocks_claim(
    status: Status,
    lease_until_ms: u64,
    expires_at_s: u64,
    now_ms: u64,
) -> Option<Claim> {
    if expires_at_s.saturating_mul(1000) <= now_ms {
        return None;
    }
    match status {
        Status::Done => Some(Claim::AlreadyDone),
        Status::InProgress if lease_until_ms > now_ms => Some(Claim::InProgress { lease_until_ms }),
        Status::InProgress | Status::Released => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_entries_and_leases_count_as_absent() {
        let now = 1_000_000;
        // TTL passed: absent whatever the status.
        assert_eq!(existing_blocks_claim(Status::Done, 0, 1_000, now), None);
        assert_eq!(
            existing_blocks_claim(Status::InProgress, now + 5, 1_000, now),
            None
        );
        // Live entries.
        assert_eq!(
            existing_blocks_claim(Status::Done, 0, 2_000, now),
            Some(Claim::AlreadyDone)
        );
        assert_eq!(
            existing_blocks_claim(Status::InProgress, now + 1, 2_000, now),
            Some(Claim::InProgress {
                lease_until_ms: now + 1
            })
        );
        // Lease passed, or released: absent.
        assert_eq!(
            existing_blocks_claim(Status::InProgress, now, 2_000, now),
            None
        );
        assert_eq!(
            existing_blocks_claim(Status::Released, now + 9, 2_000, now),
            None
        );
    }
}
