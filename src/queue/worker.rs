//! A worker: each queued event through the ledger protocol (claim, the bot, its Slack writes as
//! journaled steps, finish), then the message deleted or left for SQS to hand out again.
//!
//! - done, duplicate, failed for good, nothing to do → deleted;
//! - a live claim elsewhere → left: it comes back after its visibility timeout, when that claim
//!   has ended one way or the other;
//! - a transient failure → released and left: SQS's redeliveries are the retry schedule
//!   (`maxReceiveCount` × the visibility timeout), never shortened here; on the last receive the
//!   event ends `failed` (retryable, so a redrive from the dead-letter queue takes it again) and
//!   the message goes to the dead-letter queue;
//! - a message that is not an event of ours → left, and so dead-lettered for an operator to see.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::{
    QUEUED_EVENT_VERSION, QUEUED_FORM_VERSION, QUEUED_FORM_VERSION_UNKNOWN, QueuedEvent, READS,
    Received, WorkQueue,
};
use crate::envelope::Envelope;
use crate::interaction::Interaction;
use crate::metrics::Metrics;
use crate::process::{EventDelivery, Outcome, Processor, Queued, QueuedMessage};

/// What to do with a message after its event ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Deleted: nothing more is to be done (done, a duplicate, failed for good, nothing to do).
    Delete,
    /// Left to come back after its visibility timeout (or go to the dead-letter queue).
    Leave,
}

/// Deferred mode's worker: runs each queued event through the pipeline, on Lambda or locally.
pub struct Worker {
    processor: Arc<Processor>,
    /// The queue's `maxReceiveCount`: a receive with this count is the message's last.
    max_receives: u32,
}

/// What a queued message's body holds, read by the format its `v` names.
enum Parsed {
    /// A request to run.
    Request(Queued),
    /// An envelope that is no event (nothing to answer).
    NotAnEvent,
    /// Not a well-formed message of its format: why.
    Invalid(String),
}

/// Reads `queued` by its format: one arm per format of [`READS`] (a test holds the two
/// together).
fn parse(queued: &QueuedEvent) -> Parsed {
    match (queued.v, &queued.envelope, &queued.form) {
        (QUEUED_EVENT_VERSION, Some(envelope), None) => {
            match serde_json::from_str::<Envelope>(envelope.get()) {
                Ok(Envelope::EventCallback(callback)) => {
                    Parsed::Request(Queued::Event(Arc::from(callback)))
                }
                Ok(_) => Parsed::NotAnEvent,
                Err(error) => Parsed::Invalid(error.to_string()),
            }
        }
        (QUEUED_FORM_VERSION | QUEUED_FORM_VERSION_UNKNOWN, None, Some(form)) => {
            Interaction::from_form(form.as_bytes())
                .map(|i| {
                    let done = queued
                        .steps
                        .iter()
                        .map(|s| match s.unknown {
                            false => crate::ledger::Settled::Done {
                                step: s.step,
                                result: s.result.clone(),
                                op: s.op.clone(),
                            },
                            true => crate::ledger::Settled::Unknown {
                                step: s.step,
                                intent: crate::ledger::StepRecord::Intent {
                                    attempt: 0,
                                    op: s.op.clone(),
                                    at_ms: Some(queued.received_at_ms),
                                    lease_until_ms: None,
                                    looked: None,
                                },
                            },
                        })
                        .collect();
                    Parsed::Request(Queued::Interaction(Arc::new(i), done, queued.implicit_ack))
                })
                .unwrap_or_else(|e| Parsed::Invalid(e.to_string()))
        }
        _ => Parsed::Invalid(format!(
            "format {} with its envelope or form missing, or one it does not read",
            queued.v
        )),
    }
}

impl Worker {
    /// A worker on `processor`, for a queue whose `maxReceiveCount` is `max_receives`.
    pub fn new(processor: Arc<Processor>, max_receives: u32) -> Self {
        Self {
            processor,
            max_receives,
        }
    }

    /// Runs one received message's event. `started`/`now`: when it was received;
    /// `invocation_deadline`: on Lambda, the lease of every record of the batch.
    pub async fn handle(
        &self,
        message: &Received,
        now: SystemTime,
        started: Instant,
        invocation_deadline: Option<SystemTime>,
        request_id: Option<&str>,
    ) -> Disposition {
        let queued: QueuedEvent = match serde_json::from_str(&message.body) {
            Ok(queued) => queued,
            Err(error) => {
                tracing::error!(
                    message_id = message.message_id,
                    error = %error,
                    "a message on the work queue is not a queued event: left for the dead-letter queue"
                );
                return Disposition::Leave;
            }
        };
        if !READS.contains(&queued.v) {
            tracing::error!(
                message_id = message.message_id,
                version = queued.v,
                "a queued event of another format version: left for the dead-letter queue"
            );
            return Disposition::Leave;
        }
        let parsed = match parse(&queued) {
            Parsed::Request(request) => Ok(request),
            Parsed::NotAnEvent => {
                tracing::warn!(
                    message_id = message.message_id,
                    "a queued envelope that is not an event: deleted"
                );
                return Disposition::Delete;
            }
            Parsed::Invalid(error) => Err(error),
        };
        let queued_request = match parsed {
            Ok(queued_request) => queued_request,
            Err(error) => {
                tracing::error!(
                    message_id = message.message_id,
                    error = %error,
                    "a queued request that does not parse: left for the dead-letter queue"
                );
                return Disposition::Leave;
            }
        };
        let delivery = EventDelivery {
            retry_num: queued.retry_num,
            retry_reason: queued.retry_reason.as_deref(),
            // The receive after which SQS dead-letters the message: no delivery follows.
            last_chance: message.receive_count >= self.max_receives,
            queued: true,
            now,
            started,
            invocation_deadline,
        };
        let queued_message = QueuedMessage {
            message_id: &message.message_id,
            receive_count: message.receive_count,
            received_at_ms: queued.received_at_ms,
            request_id,
        };
        let result = self
            .processor
            .run_queued(&queued_request, &delivery, queued_message)
            .await;
        match result.as_ref().map(Outcome::inner) {
            Ok(Outcome::InProgress) => Disposition::Leave,
            Ok(_) => Disposition::Delete,
            Err(_) => Disposition::Leave,
        }
    }

    /// Locally: long-polls `queue` until `shutdown`, with at most `concurrency` messages in
    /// flight, each hidden (and leased) for `lease`; then stops receiving and finishes what it
    /// holds. One long poll at a time, asking for as many messages as there are free slots: no
    /// received message waits for a slot while its lease runs, and a worker that dies leaves at
    /// most one long poll behind (SQS may still hand it a message, which then comes back after
    /// its visibility timeout, one receive spent; many pollers would spend many).
    pub async fn run_local(
        self: Arc<Self>,
        queue: Arc<dyn WorkQueue>,
        concurrency: usize,
        lease: Duration,
        shutdown: impl Future<Output = ()>,
    ) {
        let slots = Arc::new(Semaphore::new(concurrency.max(1)));
        let in_flight = TaskTracker::new();
        tokio::pin!(shutdown);
        loop {
            let first = tokio::select! {
                slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
                () = &mut shutdown => break,
            };
            let mut permits = vec![first];
            while permits.len() < 10 {
                match slots.clone().try_acquire_owned() {
                    Ok(permit) => permits.push(permit),
                    Err(_) => break,
                }
            }
            let received = tokio::select! {
                received = queue.receive(permits.len(), lease, super::sqs::MAX_WAIT) => received,
                () = &mut shutdown => break,
            };
            // Each message's visibility timeout started when the long poll handed it out: so
            // does its lease (the processing margin covers the way back).
            let (now, started) = (crate::clock::now(), Instant::now());
            let messages = match received {
                Ok(messages) => messages,
                Err(error) => {
                    tracing::warn!(
                        error = %crate::errors::error_chain(&error),
                        "receiving from the work queue failed; trying again in 1 s"
                    );
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        () = &mut shutdown => break,
                    }
                }
            };
            for (message, permit) in messages.into_iter().zip(permits.drain(..)) {
                let (worker, queue) = (self.clone(), queue.clone());
                in_flight.spawn(async move {
                    // One metrics line per message: the local worker's invocation.
                    let metrics = Metrics::new();
                    let disposition = metrics
                        .scope(worker.handle(&message, now, started, None, None))
                        .await;
                    worker
                        .processor
                        .emit_metrics(&metrics, &[("MessageId", &message.message_id)]);
                    if disposition == Disposition::Delete
                        && let Err(error) = queue.delete(&message.receipt_handle).await
                    {
                        // Harmless: it comes back and is found done.
                        tracing::warn!(
                            message_id = message.message_id,
                            error = %crate::errors::error_chain(&error),
                            "could not delete a handled message"
                        );
                    }
                    drop(permit);
                });
            }
        }
        tracing::info!("stopped receiving: finishing the messages in flight");
        in_flight.close();
        in_flight.wait().await;
    }

    /// On Lambda: one SQS event batch, its records run concurrently, each leased until the
    /// invocation's deadline. Only the records to hand out again are reported as failures
    /// (the event source mapping's ReportBatchItemFailures); the others are deleted by Lambda.
    pub async fn handle_batch(
        self: Arc<Self>,
        event: SqsEvent,
        invocation_deadline: Option<SystemTime>,
        request_id: &str,
    ) -> SqsBatchResponse {
        let (now, started) = (crate::clock::now(), Instant::now());
        // One metrics line for the whole batch: the invocation.
        let metrics = Metrics::new();
        let mut tasks = Vec::with_capacity(event.records.len());
        for record in event.records {
            let message_id = record.message_id.unwrap_or_default();
            let message = Received {
                message_id: message_id.clone(),
                receipt_handle: record.receipt_handle.unwrap_or_default(),
                body: record.body.unwrap_or_default(),
                receive_count: record
                    .attributes
                    .get("ApproximateReceiveCount")
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(1),
            };
            let (worker, metrics, request_id) =
                (self.clone(), metrics.clone(), request_id.to_string());
            tasks.push((
                message_id,
                tokio::spawn(metrics.scope(async move {
                    worker
                        .handle(
                            &message,
                            now,
                            started,
                            invocation_deadline,
                            Some(&request_id),
                        )
                        .await
                })),
            ));
        }
        let mut response = SqsBatchResponse::default();
        for (message_id, task) in tasks {
            let disposition = task.await.unwrap_or_else(|error| {
                tracing::error!(message_id, error = %error, "a record's task failed");
                Disposition::Leave
            });
            if disposition == Disposition::Leave {
                response.add_failure(message_id);
            }
        }
        self.processor
            .emit_metrics(&metrics, &[("RequestId", request_id)]);
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The previous release's message of format `v` (tests/data/formats/previous/queue/), its
    /// placeholders filled in.
    fn previous(v: u32) -> QueuedEvent {
        let text = match v {
            1 => include_str!("../../tests/data/formats/previous/queue/v1_event.json"),
            2 => include_str!("../../tests/data/formats/previous/queue/v2_command.json"),
            3 => {
                include_str!("../../tests/data/formats/previous/queue/v3_command_unknown_step.json")
            }
            v => panic!("no fixture of format {v}: keep one for every format READS names"),
        };
        let text = text
            .replace("{{SLACK_ENCODED}}", "http%3A%2F%2F127.0.0.1%3A9")
            .replace("{{NOW_MS}}", "1767225600000");
        serde_json::from_str(&text).unwrap()
    }

    /// Every format the worker declares it reads has an arm that reads it: a format added to
    /// READS without one (or one dropped while still declared) fails here, not in production.
    #[test]
    fn every_format_the_worker_declares_it_reads() {
        for &v in READS {
            let queued = previous(v);
            assert_eq!(queued.v, v);
            assert!(
                matches!(parse(&queued), Parsed::Request(_)),
                "format {v} is declared but not read"
            );
        }
        // Format 3's step of unknown fate stays unknown: a worker that took it as made would
        // never look for the view it may have opened.
        let Parsed::Request(Queued::Interaction(_, steps, _)) = parse(&previous(3)) else {
            panic!("format 3 is a form")
        };
        assert!(matches!(
            steps.as_slice(),
            [crate::ledger::Settled::Unknown { step: 1, .. }]
        ));
    }

    /// A message of a known format without what that format carries is not read as another.
    #[test]
    fn a_known_format_without_its_envelope_or_form_is_invalid() {
        let mut event = previous(1);
        event.envelope = None;
        assert!(matches!(parse(&event), Parsed::Invalid(_)));
        let mut form = previous(2);
        form.v = QUEUED_EVENT_VERSION;
        assert!(matches!(parse(&form), Parsed::Invalid(_)));
    }
}
