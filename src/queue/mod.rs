//! Deferred mode's work queue: the ingress acknowledges Slack as soon as the verified event is
//! on the queue, and workers take it from there through the same ledger protocol.
//!
//! The queue seam is four calls (send, receive, delete, and the visibility of a received
//! message changed) with an SQS implementation (`sqs.rs`)
//! and an in-memory one for tests; `worker.rs` holds what a worker does with each message, on
//! Lambda (an SQS event batch) and locally (a long-polling loop).

pub(crate) mod memory;
pub(crate) mod postgres;
pub(crate) mod sqs;
pub mod worker;

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

pub use memory::MemoryQueue;
pub use postgres::{DeadLetter, PostgresQueue, ReceiptOutcome, Redrive};
pub use sqs::{CallBudget, SqsQueue};

/// The format version of a [`QueuedEvent`] holding an event's envelope; a worker refuses a
/// message of a version it does not know.
pub const QUEUED_EVENT_VERSION: u32 = 1;
/// The format version of a [`QueuedEvent`] holding a command's or an interaction's form (a
/// worker of an earlier version leaves it for the dead-letter queue rather than misread it).
pub const QUEUED_FORM_VERSION: u32 = 2;
/// The format version of a form's [`QueuedEvent`] carrying a step whose fate is unknown
/// ([`QueuedStep::unknown`]): a worker of a version before it would read that step as made,
/// so it leaves the message for the dead-letter queue instead (and its redrive waits for the
/// new workers). The ingress sends version 2 when no step is unknown.
pub const QUEUED_FORM_VERSION_UNKNOWN: u32 = 3;
/// The formats this release's worker reads.
pub const READS: &[u32] = &[
    QUEUED_EVENT_VERSION,
    QUEUED_FORM_VERSION,
    QUEUED_FORM_VERSION_UNKNOWN,
];

/// The formats the ingress may write: those every worker that may serve reads, this release's
/// ([`READS`]) and the release's before it (e596cea's worker reads 1, 2 and 3), which serves
/// beside this one during a gradual shift or after a rollback. A new format joins [`READS`]
/// in one release and this list (and the ingress) in the next: read first, write later.
pub const WRITES: &[u32] = &[1, 2, 3];

/// The format the ingress writes for a request: an event's envelope (JSON), or a form, with
/// or without a step of unknown fate (which a worker before format 3 would take as made).
pub fn format_for(envelope: bool, unknown_step: bool) -> u32 {
    match (envelope, unknown_step) {
        (true, _) => QUEUED_EVENT_VERSION,
        (false, true) => QUEUED_FORM_VERSION_UNKNOWN,
        (false, false) => QUEUED_FORM_VERSION,
    }
}

#[cfg(test)]
mod format_tests {
    use super::*;

    /// Read first, write later: every format the ingress writes is one it may write (the
    /// release before this one reads it), and one this release reads.
    #[test]
    fn the_ingress_writes_only_formats_every_serving_worker_reads() {
        for envelope in [true, false] {
            for unknown in [true, false] {
                let v = format_for(envelope, unknown);
                assert!(WRITES.contains(&v), "format {v}");
                assert!(READS.contains(&v), "format {v}");
            }
        }
    }
}

/// SQS's largest message body: 1 MiB since August 2025 (256 KiB before). SQS bills each 64 KiB
/// of a message as one request; Slack's events are a few KiB.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// SQS's longest visibility timeout (12 hours): no queue hides a message longer.
pub const MAX_VISIBILITY: Duration = Duration::from_secs(43_200);

/// Every queue's first check of a body: larger than [`MAX_MESSAGE_BYTES`], it is refused with
/// nothing sent.
pub(crate) fn refuse_too_large(body: &str) -> Result<(), QueueError> {
    match body.len() {
        size if size > MAX_MESSAGE_BYTES => Err(QueueError::TooLarge { size }),
        _ => Ok(()),
    }
}

/// What the ingress puts on the queue: the verified request exactly as Slack sent it (an
/// event's envelope, or a command's or interaction's form), and how it arrived. The queue is
/// reachable only by the functions' IAM roles, so the worker does not verify the signature
/// again (it could not: it would have expired).
#[derive(Debug, Serialize, Deserialize)]
pub struct QueuedEvent {
    /// The format version: [`QUEUED_EVENT_VERSION`], [`QUEUED_FORM_VERSION`] or
    /// [`QUEUED_FORM_VERSION_UNKNOWN`] (see [`format_for`]).
    pub v: u32,
    /// An event's envelope, the JSON body exactly as Slack sent it; `None` for a form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope: Option<Box<RawValue>>,
    /// A command's or interaction's form body, exactly as Slack sent it; `None` for an event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form: Option<String>,
    /// A form's: the steps its listener made in the ingress, before the acknowledgement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<QueuedStep>,
    /// A form's: the ingress acknowledged empty on the listener's behalf (it had not chosen
    /// within 2 s, or wrote first), so an acknowledgement it chooses on the worker is too
    /// late for Slack's 3 s. Absent in messages of earlier versions: read as given.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub implicit_ack: bool,
    /// An event's `X-Slack-Retry-Num`, as the ingress received it (`None`: an original, or a
    /// form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_num: Option<u32>,
    /// An event's `X-Slack-Retry-Reason`, as the ingress received it (`None`: an original, or
    /// a form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_reason: Option<String>,
    /// When the ingress received it (epoch ms): time to the answer is measured from it.
    pub received_at_ms: u64,
}

/// A step made before the claim (a view opened with a `trigger_id`), as its journal record.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct QueuedStep {
    /// The step's number.
    pub step: u32,
    /// What a replay returns, as JSON text (empty when `unknown`).
    pub result: String,
    /// The step's identity (`record::step_op`); `None` where it is not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// Its fate unknown (a view whose answer the hand-off cut off): the worker looks for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unknown: bool,
}

/// One message as received.
#[derive(Clone, Debug)]
pub struct Received {
    /// The queue's id of the message (SQS's `MessageId`).
    pub message_id: String,
    /// What deletes it (valid for this receive only).
    pub receipt_handle: String,
    /// The message's body, as sent: a [`QueuedEvent`] as JSON, when the ingress sent it.
    pub body: String,
    /// SQS's ApproximateReceiveCount: 1 on the first receive.
    pub receive_count: u32,
}

/// Why a queue call failed.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The queue could not be reached or refused the call (throttling, timeout, network).
    #[error("the work queue is unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The body is larger than [`MAX_MESSAGE_BYTES`]: nothing was sent, and no retry can fix it.
    #[error("the message is {size} bytes, more than a queue message holds ({MAX_MESSAGE_BYTES})")]
    TooLarge {
        /// The body's size, in bytes.
        size: usize,
    },
}

/// The queue seam.
#[async_trait]
pub trait WorkQueue: Send + Sync + 'static {
    /// Sends one message: once this returns `Ok`, the queue holds it durably.
    async fn send(&self, body: &str) -> Result<(), QueueError>;

    /// Receives up to `max` messages, hiding each for `visibility`, waiting up to `wait` for
    /// the first.
    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<Received>, QueueError>;

    /// Deletes a received message for good.
    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError>;

    /// Makes a received message visible again `after` from now instead of when its visibility
    /// timeout ends (SQS's `ChangeMessageVisibility`, whose timeout counts from the call): how
    /// a worker hands back a message it released for a transient failure, to be retried soon.
    /// The receive count is unchanged: the next receive of it is counted as ever.
    async fn change_visibility(
        &self,
        receipt_handle: &str,
        after: Duration,
    ) -> Result<(), QueueError>;
}
