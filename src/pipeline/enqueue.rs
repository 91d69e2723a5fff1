//! Deferred mode's hand-off: the verified request on the work queue, within Slack's 3 s.

use serde_json::value::RawValue;

use super::{Delivery, ENQUEUE_BUDGET, Outcome, ProcessError, Processor, unix_ms};
use crate::queue::{QueueError, QueuedEvent, QueuedStep, WorkQueue};

impl Processor {
    /// Deferred mode's ingress: the verified request goes to the work queue as Slack sent it
    /// (an event's envelope, with its retry number and reason; a command's or interaction's
    /// form), and Slack gets its 2xx once the queue holds it. No ledger write for an event: a
    /// duplicate on the queue is harmless, the worker de-duplicates.
    pub(super) async fn enqueue(
        &self,
        queue: &dyn WorkQueue,
        delivery: &Delivery<'_>,
        retry_num: Option<u32>,
        retry_reason: Option<&str>,
    ) -> Result<Outcome, ProcessError> {
        self.send(
            queue,
            delivery,
            retry_num,
            retry_reason,
            (Vec::new(), false),
        )
        .await
    }

    /// A command's or interaction's form, with the steps its listener made before the
    /// acknowledgement (views opened with its `trigger_id`).
    pub(super) async fn enqueue_with_steps(
        &self,
        queue: &dyn WorkQueue,
        delivery: &Delivery<'_>,
        steps: Vec<QueuedStep>,
        implicit_ack: bool,
    ) -> Result<Outcome, ProcessError> {
        self.send(queue, delivery, None, None, (steps, implicit_ack))
            .await
    }

    async fn send(
        &self,
        queue: &dyn WorkQueue,
        delivery: &Delivery<'_>,
        retry_num: Option<u32>,
        retry_reason: Option<&str>,
        (steps, implicit_ack): (Vec<QueuedStep>, bool),
    ) -> Result<Outcome, ProcessError> {
        let not_text = || {
            ProcessError::Malformed(<serde_json::Error as serde::de::Error>::custom(
                "the body is not UTF-8",
            ))
        };
        let text = std::str::from_utf8(delivery.body).map_err(|_| not_text())?;
        // A body that parsed as JSON is a valid raw value; anything else is a form.
        // A step of unknown fate is one an earlier worker would take as made.
        let unknown = steps.iter().any(|s| s.unknown);
        let (v, envelope, form) = match RawValue::from_string(text.to_string()) {
            Ok(envelope) if text.trim_start().starts_with('{') => (
                crate::queue::format_for(true, unknown),
                Some(envelope),
                None,
            ),
            _ => (
                crate::queue::format_for(false, unknown),
                None,
                Some(text.to_string()),
            ),
        };
        let message = QueuedEvent {
            v,
            envelope,
            form,
            steps,
            implicit_ack,
            retry_num,
            retry_reason: retry_reason.map(str::to_string),
            received_at_ms: unix_ms(delivery.now),
        };
        let body = serde_json::to_string(&message).expect("a queued event serialises");
        // Slack waits 3 s for the 2xx; the send must be done well before.
        let deadline = delivery.started + ENQUEUE_BUDGET;
        match tokio::time::timeout_at(deadline, queue.send(&body)).await {
            Ok(Ok(())) => Ok(Outcome::Queued),
            Ok(Err(e)) => Err(ProcessError::Queue(e)),
            Err(_) => Err(ProcessError::Queue(QueueError::Unavailable(
                "the queue did not take the event within Slack's acknowledgement window".into(),
            ))),
        }
    }
}
