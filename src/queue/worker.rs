//! A worker: each queued event through the ledger protocol (claim, the bot, its Slack writes as
//! journaled steps, finish), then the message deleted, handed back soon, or left for SQS to hand
//! out again.
//!
//! - done, duplicate, failed for good, nothing to do → deleted;
//! - a live claim elsewhere → left: it comes back after its visibility timeout, when that claim
//!   has ended one way or the other;
//! - a transient failure (the claim released, or never taken: the ledger unavailable) → handed
//!   back to come again after a backoff ([`retry_after`]: 10 s, then 5 times longer with each
//!   receive, at least Slack's `Retry-After`, at most the visibility timeout), each receive
//!   inside the `response_url`'s 30 minutes or a step token's 15 where the request has one
//!   (`answer_window`; docs/cost-and-scale.md's numbers), and after a failed ledger call no sooner than
//!   the run's own lease ends (the call may have left its claim); on the last receive the event
//!   ends `failed` (retryable, so a redrive from the dead-letter queue takes it again) and the
//!   message goes to the dead-letter queue;
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
use crate::metrics::Metrics;
use crate::pipeline::{EventDelivery, Outcome, ProcessError, Processor, Queued, QueuedMessage};
use crate::slack::SlackError;
use crate::slack::envelope::Envelope;
use crate::slack::interaction::Interaction;

/// What to do with a message after its event ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Deleted: nothing more is to be done (done, a duplicate, failed for good, nothing to do).
    Delete,
    /// Left to come back after its visibility timeout (or go to the dead-letter queue).
    Leave,
    /// Released for a transient failure: handed back to come again `after` from now (its
    /// visibility changed), or to go to the dead-letter queue then after its last receive.
    Retry {
        /// How long until it is visible again: [`retry_after`] of its receive count.
        after: Duration,
    },
}

/// A transient failure's first retry comes this long after it.
pub const RETRY_FIRST: Duration = Duration::from_secs(10);
/// Each later retry waits this many times the one before (10, 50, 250, 1,250 s…): a passing
/// error is retried within seconds, an outage of Slack or DynamoDB is waited out over the
/// receives the queue allows rather than spending them all in its first minutes.
pub const RETRY_GROWTH: u32 = 5;
/// SQS's longest visibility timeout (12 h): no wait is longer.
const VISIBILITY_MOST: Duration = Duration::from_secs(43_200);
/// How long a step execution's token works after the step began (Slack: 15 minutes).
pub const STEP_TOKEN_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// How long a `response_url` takes posts after the command or click (Slack: 30 minutes).
pub const RESPONSE_URL_LIFETIME: Duration = Duration::from_secs(30 * 60);

/// After a ledger call failed, a message comes back this long after the run's lease ends
/// (other instances' clocks may be behind).
const LEASE_SKEW: Duration = Duration::from_secs(1);

/// How long after its `receive_count`-th receive failed a released message comes again, before
/// the bounds of [`backoff`]: [`RETRY_FIRST`], [`RETRY_GROWTH`] times longer with
/// each receive (10, 50, 250, 1,250 s…), at most SQS's 12 hours.
pub fn retry_after(receive_count: u32) -> Duration {
    let growths = receive_count.saturating_sub(1).min(8);
    (RETRY_FIRST * RETRY_GROWTH.pow(growths)).min(VISIBILITY_MOST)
}

/// How long after it reached the ingress Slack still takes `request`'s answer: a Workflow
/// Builder step's (its execution's token) 15 minutes, a command's or an interaction's (its
/// `response_url`) 30; an event other than a step's has no such deadline (`None`).
pub(crate) fn answer_window(request: &Queued) -> Option<Duration> {
    match request {
        Queued::Event(callback) => {
            (callback.event.kind == "function_executed").then_some(STEP_TOKEN_LIFETIME)
        }
        Queued::Interaction(interaction, ..) => {
            if interaction.raw.get("function_data").is_some() {
                Some(STEP_TOKEN_LIFETIME)
            } else {
                Some(RESPONSE_URL_LIFETIME)
            }
        }
    }
}

/// The wait after a message's `receive_count`-th receive failed: [`retry_after`], at least
/// `rate_limited` (Slack's `Retry-After`), at most `last_start` (how long the next run may
/// still start and end inside the request's Slack deadline), never below [`RETRY_FIRST`].
pub fn backoff(
    receive_count: u32,
    rate_limited: Option<Duration>,
    last_start: Option<Duration>,
) -> Duration {
    let after = retry_after(receive_count).max(rate_limited.unwrap_or_default());
    last_start.map_or(after, |latest| after.min(latest).max(RETRY_FIRST))
}

/// The wait Slack asked for, when the run ended on a rate limit it could not wait out.
fn rate_limited_for(error: &ProcessError) -> Option<Duration> {
    match error {
        ProcessError::Slack(SlackError::RateLimited { retry_after })
        | ProcessError::LookupUnavailable(SlackError::RateLimited { retry_after }) => {
            Some(*retry_after)
        }
        _ => None,
    }
}

/// How long a message the local worker receives stays hidden before the worker extends that to
/// its lease, which it does as it starts on it: at least this, and at least the poll wait.
/// SQS keeps a long poll open after its caller died and may still hand it a message: a
/// receive spent, and the message hidden for the visibility timeout that poll asked for.
/// Asked for this long, such a message is visible again within seconds instead of after a
/// lease; and no sooner than every poll open when it was handed out has ended, so workers
/// killed together spend one of its receives, not one each.
pub(crate) const RECEIVE_VISIBILITY: Duration = Duration::from_secs(5);

/// Deferred mode's worker: runs each queued event through the pipeline, on Lambda or locally.
pub struct Worker {
    processor: Arc<Processor>,
    /// The queue's `maxReceiveCount`: a receive with this count is the message's last.
    max_receives: u32,
    /// The local worker's long poll (`WORK_QUEUE_POLL_SECONDS`): at most SQS's 20 s. A worker
    /// killed mid-poll leaves its poll open this long at most.
    poll_wait: Duration,
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
            match Envelope::from_delivered(envelope.get()) {
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
                            false => crate::journal::record::Settled::Done {
                                step: s.step,
                                result: s.result.clone(),
                                op: s.op.clone(),
                            },
                            true => crate::journal::record::Settled::Unknown {
                                step: s.step,
                                intent: crate::journal::record::StepRecord::Intent {
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
    pub(crate) fn new(processor: Arc<Processor>, max_receives: u32) -> Self {
        Self {
            processor,
            max_receives,
            poll_wait: crate::config::DEFAULT_WORKER_POLL,
        }
    }

    /// The same worker, its local long polls waiting at most `wait` (at most SQS's 20 s).
    pub(crate) fn with_poll_wait(mut self, wait: Duration) -> Self {
        self.poll_wait = wait.min(super::sqs::MAX_WAIT);
        self
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
            // Released (or never claimed): nothing holds it, so it may come again soon.
            Err(error) => Disposition::Retry {
                after: self.retry_wait(
                    error,
                    &queued_request,
                    queued.received_at_ms,
                    message.receive_count,
                    invocation_deadline,
                    started,
                ),
            },
        }
    }

    /// How long a message released after its `receive_count`-th receive stays hidden:
    /// [`retry_after`], at least as long as Slack's `Retry-After`, and short enough that the
    /// next receive can still answer inside the request's [`answer_window`] (never below
    /// [`RETRY_FIRST`]); after a failed ledger call, until this run's own lease has ended.
    fn retry_wait(
        &self,
        error: &ProcessError,
        request: &Queued,
        received_at_ms: u64,
        receive_count: u32,
        invocation_deadline: Option<SystemTime>,
        started: Instant,
    ) -> Duration {
        let last_start = answer_window(request).map(|window| {
            // The next run must be able to end (a lease) before Slack's deadline.
            let last_start_ms = (received_at_ms + window.as_millis() as u64)
                .saturating_sub(self.processor.lease().as_millis() as u64);
            Duration::from_millis(last_start_ms.saturating_sub(crate::clock::now_ms()))
        });
        let mut after = backoff(receive_count, rate_limited_for(error), last_start);
        if let ProcessError::Ledger(_) = error {
            // A ledger call that failed may have taken effect (a claim whose answer was lost,
            // a release that never landed): this run's claim then holds the request until its
            // lease ends, and a receive before that would find it live and leave it for the
            // whole visibility timeout.
            let lease_left = match invocation_deadline {
                Some(deadline) => deadline
                    .duration_since(crate::clock::now())
                    .unwrap_or_default(),
                None => self.processor.lease().saturating_sub(started.elapsed()),
            };
            after = after.max(lease_left + LEASE_SKEW);
        }
        after
    }

    /// Hands a message back as `disposition` says: deleted, visible again after its backoff
    /// (never later than `visibility`, when its visibility timeout would end anyway), or left.
    /// On Lambda the event source mapping deletes what is not reported, so `delete` is false.
    async fn dispose(
        queue: &dyn WorkQueue,
        message: &Received,
        disposition: Disposition,
        visibility: Option<Duration>,
        delete: bool,
    ) {
        let result = match disposition {
            Disposition::Delete if delete => queue.delete(&message.receipt_handle).await,
            Disposition::Delete | Disposition::Leave => return,
            Disposition::Retry { after } => {
                let after = visibility.map_or(after, |v| after.min(v));
                queue
                    .change_visibility(&message.receipt_handle, after)
                    .await
            }
        };
        if let Err(error) = result {
            // Harmless: it comes back after its visibility timeout, and is found done or
            // claimed again.
            tracing::warn!(
                message_id = message.message_id,
                disposition = ?disposition,
                error = %crate::errors::error_chain(&error),
                "could not delete a handled message, or hand a released one back"
            );
        }
    }

    /// Locally: long-polls `queue` until `shutdown`, with at most `concurrency` messages in
    /// flight, each hidden (and leased) for `lease`; then stops receiving and finishes what it
    /// holds. One long poll at a time, of the worker's poll wait, asking for as many messages
    /// as there are free slots: no received message waits for a slot while its lease runs, and
    /// a worker that dies leaves at most one long poll behind, open for that wait at most. SQS
    /// may still hand that poll a message (one receive spent): each receive hides a message for
    /// `RECEIVE_VISIBILITY` (5 s, or the poll wait, if longer) only, extended to `lease` as the
    /// worker starts on it, so such a message is visible again within seconds.
    pub async fn run_local(
        self: Arc<Self>,
        queue: Arc<dyn WorkQueue>,
        concurrency: usize,
        lease: Duration,
        shutdown: impl Future<Output = ()>,
    ) {
        let slots = Arc::new(Semaphore::new(concurrency.max(1)));
        let in_flight = TaskTracker::new();
        let hidden = lease.min(RECEIVE_VISIBILITY.max(self.poll_wait));
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
                received = queue.receive(permits.len(), hidden, self.poll_wait) => received,
                () = &mut shutdown => break,
            };
            // The lease starts when the long poll handed the messages out; each one's visibility
            // is extended to the lease after that, so it ends later (the processing margin
            // covers the way back).
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
                    if lease > hidden {
                        Self::hide_for_lease(&*queue, &message, lease).await;
                    }
                    // One metrics line per message: the local worker's invocation.
                    let metrics = Metrics::new();
                    let disposition = metrics
                        .scope(worker.handle(&message, now, started, None, None))
                        .await;
                    worker
                        .processor
                        .emit_metrics(&metrics, &[("MessageId", &message.message_id)]);
                    Self::dispose(&*queue, &message, disposition, Some(lease), true).await;
                    drop(permit);
                });
            }
        }
        tracing::info!("stopped receiving: finishing the messages in flight");
        in_flight.close();
        in_flight.wait().await;
    }

    /// Hides a message just received for `lease` (from now), as a worker starts on it: it was
    /// received for [`RECEIVE_VISIBILITY`] only. When that fails the run goes on: a copy
    /// another worker receives meanwhile finds this run's claim live and is left, or finds
    /// the request done.
    async fn hide_for_lease(queue: &dyn WorkQueue, message: &Received, lease: Duration) {
        if let Err(error) = queue
            .change_visibility(&message.receipt_handle, lease)
            .await
        {
            tracing::warn!(
                message_id = message.message_id,
                error = %crate::errors::error_chain(&error),
                "could not hide a received message for the lease; running it all the same"
            );
        }
    }

    /// On Lambda: one SQS event batch, its records run concurrently, each leased until the
    /// invocation's deadline. Only the records to hand out again are reported as failures
    /// (the event source mapping's ReportBatchItemFailures); the others are deleted by Lambda.
    /// A record released for a transient failure has its visibility changed to its backoff on
    /// `queue` (the one the records come from) before it is reported; without `queue` it comes
    /// back after the queue's visibility timeout.
    pub async fn handle_batch(
        self: Arc<Self>,
        event: SqsEvent,
        queue: Option<Arc<dyn WorkQueue>>,
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
            let (worker, metrics, request_id, queue) = (
                self.clone(),
                metrics.clone(),
                request_id.to_string(),
                queue.clone(),
            );
            tasks.push((
                message_id,
                tokio::spawn(metrics.scope(async move {
                    let disposition = worker
                        .handle(
                            &message,
                            now,
                            started,
                            invocation_deadline,
                            Some(&request_id),
                        )
                        .await;
                    // Before the batch is answered: the event source mapping leaves a reported
                    // record in flight until its visibility timeout, changed here or not.
                    if let Some(queue) = &queue {
                        Self::dispose(&**queue, &message, disposition, None, false).await;
                    }
                    disposition
                })),
            ));
        }
        let mut response = SqsBatchResponse::default();
        for (message_id, task) in tasks {
            let disposition = task.await.unwrap_or_else(|error| {
                tracing::error!(message_id, error = %error, "a record's task failed");
                Disposition::Leave
            });
            if disposition != Disposition::Delete {
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

    /// The backoff starts at 10 s and grows fivefold: a passing error is retried within
    /// seconds, and the template's default five receives span about 5 minutes before the
    /// visibility timeout's cap (more with it), rather than all falling inside a short outage.
    #[test]
    fn a_released_message_comes_back_after_10_50_then_250_seconds() {
        let waits: Vec<u64> = (1..=5).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(waits, [10, 50, 250, 1_250, 6_250]);
        assert_eq!(retry_after(u32::MAX), VISIBILITY_MOST);
    }

    /// Slack's `Retry-After` lengthens a wait, a request's deadline shortens it, and nothing
    /// shortens it below the first retry's.
    #[test]
    fn a_rate_limit_waits_its_retry_after_and_a_deadline_caps_every_wait() {
        let secs = Duration::from_secs;
        assert_eq!(backoff(1, Some(secs(30)), None), secs(30));
        assert_eq!(backoff(3, Some(secs(30)), None), secs(250));
        assert_eq!(backoff(3, None, Some(secs(100))), secs(100));
        assert_eq!(backoff(3, Some(secs(300)), Some(secs(100))), secs(100));
        assert_eq!(backoff(2, None, Some(secs(2))), RETRY_FIRST);
    }

    /// The receives of a request with a Slack deadline, each failing at once: when each
    /// receive starts, given the worker's lease and the queue's visibility timeout (which ends
    /// any wait), for `receives` receives.
    fn receive_starts(
        window: Duration,
        lease: Duration,
        visibility: Duration,
        receives: u32,
    ) -> Vec<u64> {
        let mut at = 0u64;
        let mut starts = vec![0];
        for n in 1..receives {
            let latest = window
                .saturating_sub(lease)
                .saturating_sub(Duration::from_secs(at));
            let after = backoff(n, None, Some(latest)).as_secs();
            at += after.min(visibility.as_secs());
            starts.push(at);
        }
        starts
    }

    /// The template's numbers against the backoff: with its largest `MaxReceiveCount` and
    /// every `WorkerTimeout` it offers (the lease, and six times it the visibility timeout),
    /// each receive of a step's request starts while a run can still end inside the step
    /// token's 15 minutes, and a command's inside its `response_url`'s 30.
    #[test]
    fn the_templates_receives_land_inside_slacks_deadlines() {
        let template = include_str!("../../template.yaml");
        let after = |name: &str| {
            template
                .split(&format!("\n  {name}:\n"))
                .nth(1)
                .unwrap_or_else(|| panic!("{name} in template.yaml"))
        };
        let max_receives: u32 = after("MaxReceiveCount")
            .lines()
            .find_map(|l| l.trim().strip_prefix("MaxValue:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("MaxReceiveCount's MaxValue");
        let timeouts: Vec<u64> = after("WorkerTimeout")
            .lines()
            .find_map(|l| l.trim().strip_prefix("AllowedValues:"))
            .expect("WorkerTimeout's AllowedValues")
            .trim()
            .trim_matches(['[', ']'])
            .split(',')
            .filter_map(|v| v.trim().parse().ok())
            .collect();
        assert!(!timeouts.is_empty(), "WorkerTimeout's AllowedValues");
        for timeout in timeouts {
            let (lease, visibility) = (
                Duration::from_secs(timeout),
                Duration::from_secs(6 * timeout),
            );
            for window in [STEP_TOKEN_LIFETIME, RESPONSE_URL_LIFETIME] {
                if lease >= window {
                    continue;
                }
                let starts = receive_starts(window, lease, visibility, max_receives);
                let last_start = window.as_secs() - lease.as_secs();
                let inside = starts.iter().filter(|s| **s <= last_start).count();
                assert!(
                    inside >= max_receives.min(4) as usize,
                    "WorkerTimeout {timeout}, {window:?}: receives at {starts:?} s, {inside} \
                     of them in time for a run to end inside Slack's deadline"
                );
                assert_eq!(
                    starts[1],
                    RETRY_FIRST.as_secs(),
                    "the first retry within seconds"
                );
            }
        }
    }

    /// A message of format `v` as the release before this one wrote it
    /// (tests/data/formats/previous/queue/), its placeholders filled in.
    fn message_of_format(v: u32) -> QueuedEvent {
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
            let queued = message_of_format(v);
            assert_eq!(queued.v, v);
            assert!(
                matches!(parse(&queued), Parsed::Request(_)),
                "format {v} is declared but not read"
            );
        }
        // Format 3's step of unknown fate stays unknown: a worker that took it as made would
        // never look for the view it may have opened.
        let Parsed::Request(Queued::Interaction(_, steps, _)) = parse(&message_of_format(3)) else {
            panic!("format 3 is a form")
        };
        assert!(matches!(
            steps.as_slice(),
            [crate::journal::record::Settled::Unknown { step: 1, .. }]
        ));
    }

    /// A message of a known format without what that format carries is not read as another.
    #[test]
    fn a_known_format_without_its_envelope_or_form_is_invalid() {
        let mut event = message_of_format(1);
        event.envelope = None;
        assert!(matches!(parse(&event), Parsed::Invalid(_)));
        let mut form = message_of_format(2);
        form.v = QUEUED_EVENT_VERSION;
        assert!(matches!(parse(&form), Parsed::Invalid(_)));
    }
}
