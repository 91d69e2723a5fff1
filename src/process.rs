//! The use case: verify → parse → skip own → claim → bot → its Slack writes, each a journaled
//! step → finish (done, released, or failed).
//!
//! The ledger is touched only after the signature verifies and the envelope parses, so a forged
//! or malformed request can never claim, poison or block a real event. Every Slack write is
//! announced in the ledger (its intent, conditioned on the claim's owner) before it is made, so
//! a later claim looks in Slack only where an earlier one may have written, and never writes
//! blind while a delivery of the event remains.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use serde_json::value::RawValue;
use tokio::time::Instant;
use tracing::Instrument;

use crate::app::{
    App, BotError, Ctx, Error as StepError, Identity, Route, Run, Steps, Tally, Unit,
};
use crate::envelope::{Envelope, EventCallback, EventId, SkipReason};
use crate::ledger::{
    keep_doubt, Alias, AliasRequest, Claim, ClaimRequest, Finish, Held, Journal, Ledger,
    LedgerError, OwnerToken, Settled,
};
use crate::metrics;
use crate::queue::{QueueError, QueuedEvent, WorkQueue, QUEUED_EVENT_VERSION};
use crate::secrets::{SecretValues, SlackSecrets};
use crate::signature::{self, SignatureError};
use crate::slack::{SlackClient, SlackError};

pub const RETRY_NUM_HEADER: &str = "x-slack-retry-num";
pub const RETRY_REASON_HEADER: &str = "x-slack-retry-reason";
/// Slack retries an event 3 times: the delivery with `X-Slack-Retry-Num: 3` is its last.
pub const SLACK_LAST_RETRY: u32 = 3;

/// Processing stops this long before the lease ends (at most 1 s, at most a quarter of the
/// lease), leaving time to release the claim and answer, and absorbing clock skew between
/// instances: no other instance sees the lease expired before the claimant has stopped.
const MAX_LEASE_MARGIN: Duration = Duration::from_secs(1);
/// On Lambda the ledger writes end this long before the invocation deadline, so the answer
/// still gets out (at most a quarter of the time left).
pub const ANSWER_MARGIN: Duration = Duration::from_millis(250);
/// Deferred mode: the ingress gives the queue this long from the request's arrival (Slack
/// waits 3 s for a 2xx); a send not done by then answers 503 and Slack retries.
pub const ENQUEUE_BUDGET: Duration = Duration::from_millis(2500);

/// One delivery of a request, as received.
#[derive(Clone, Copy, Debug)]
pub struct Delivery<'a> {
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
    /// The wall-clock time the request arrived: signatures and leases are judged against it.
    pub now: SystemTime,
    /// The monotonic time it arrived: deadlines are measured from it.
    pub started: Instant,
    /// On Lambda, the invocation's deadline: it is the lease. Elsewhere the configured lease.
    pub invocation_deadline: Option<SystemTime>,
    /// On Lambda, the invocation's request id (for the logs and the metrics line).
    pub request_id: Option<&'a str>,
}

/// A message of the work queue, as the worker received it.
#[derive(Clone, Copy, Debug)]
pub struct QueuedMessage<'a> {
    pub message_id: &'a str,
    /// SQS's ApproximateReceiveCount.
    pub receive_count: u32,
    /// When the ingress received the event (epoch ms).
    pub received_at_ms: u64,
    /// On Lambda, the worker invocation's request id.
    pub request_id: Option<&'a str>,
}

/// What the protocol needs to know of one delivery of a verified event.
#[derive(Clone, Copy, Debug)]
pub struct EventDelivery<'a> {
    /// `X-Slack-Retry-Num`: absent on the original.
    pub retry_num: Option<u32>,
    pub retry_reason: Option<&'a str>,
    /// No delivery of this event follows this one: a look-up in Slack that cannot be made no
    /// longer holds a write back (it is made, and logged as possibly a second answer).
    pub last_chance: bool,
    pub now: SystemTime,
    pub started: Instant,
    /// On Lambda, the invocation's deadline: it is the lease. Elsewhere the configured lease.
    pub invocation_deadline: Option<SystemTime>,
}

/// How a delivery ended, when nothing failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A url_verification: answer with its challenge.
    Challenge(String),
    /// This delivery claimed the event, and its reply was posted (or, without a token, logged).
    Answered { attempt: u32 },
    /// This delivery took the event over and found the earlier claim's reply already in Slack:
    /// marked done without posting again.
    Recovered,
    /// This delivery claimed the event; its listeners wrote nothing to Slack.
    NoReply,
    /// No listener takes this event: acknowledged, never claimed.
    NoListener,
    /// The event was answered already.
    Duplicate,
    /// Slack refused the reply with an error no retry can fix (`code`): the event is marked
    /// `failed`, and 2xx stops Slack from redelivering it.
    Failed { code: String },
    /// The event ended `failed` already: nothing to do.
    AlreadyFailed,
    /// Another delivery holds a live claim: no reply here, and a non-2xx so Slack retries.
    InProgress,
    /// The bot's own message, an edit, a join…: acknowledged, never claimed.
    Skipped(SkipReason),
    /// Slack says it is holding back this app's events for the rest of the hour.
    RateLimitNotice,
    /// An envelope type this version does not know.
    Ignored,
    /// Deferred mode: the event is on the work queue; a worker answers it.
    Queued,
}

impl ProcessError {
    /// Whether no retry can change this: the event then ends `failed` (200, never redelivered).
    pub fn is_final(&self) -> bool {
        match self {
            ProcessError::Slack(e) => e.is_permanent(),
            ProcessError::Nondeterministic(_) | ProcessError::JournalFull(_) => true,
            _ => false,
        }
    }

    /// A short code for the ledger's `error` attribute and the logs.
    pub fn failure_code(&self) -> String {
        match self {
            ProcessError::Signature(_) => "invalid_signature".into(),
            ProcessError::Malformed(_) => "invalid_payload".into(),
            ProcessError::Ledger(_) => "ledger_unavailable".into(),
            ProcessError::Slack(e) | ProcessError::LookupUnavailable(e) => {
                let prefix = match self {
                    ProcessError::LookupUnavailable(_) => "lookup_",
                    _ => "",
                };
                let kind = match e {
                    SlackError::Api { code } => code.clone(),
                    SlackError::RateLimited { .. } => "ratelimited".into(),
                    SlackError::Status { status } => format!("http_{}", status.as_u16()),
                    SlackError::Transport(_) => "connection_failed".into(),
                    SlackError::Timeout => "timeout".into(),
                    SlackError::InvalidResponse(_) => "invalid_response".into(),
                    SlackError::TokenUnconfirmed { code } => format!("{code}_unconfirmed"),
                    SlackError::Unidentified => "app_unidentified".into(),
                };
                format!("{prefix}{kind}")
            }
            ProcessError::Bot(_) => "bot_failed".into(),
            ProcessError::Nondeterministic(_) => "nondeterministic_listener".into(),
            ProcessError::JournalFull(_) => "journal_full".into(),
            ProcessError::Deadline => "deadline_exceeded".into(),
            ProcessError::Queue(_) => "queue_unavailable".into(),
        }
    }
}

impl Outcome {
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Challenge(_) => "challenge",
            Outcome::Answered { .. } => "answered",
            Outcome::Recovered => "recovered",
            Outcome::NoReply => "no_reply",
            Outcome::NoListener => "no_listener",
            Outcome::Duplicate => "duplicate",
            Outcome::Failed { .. } => "failed",
            Outcome::AlreadyFailed => "already_failed",
            Outcome::InProgress => "in_progress",
            Outcome::Skipped(_) => "skipped",
            Outcome::RateLimitNotice => "app_rate_limited",
            Outcome::Ignored => "ignored",
            Outcome::Queued => "queued",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("the request signature is invalid: {0}")]
    Signature(#[from] SignatureError),
    #[error("the body is not a valid Events API envelope: {0}")]
    Malformed(#[source] serde_json::Error),
    #[error("the ledger failed")]
    Ledger(#[source] LedgerError),
    #[error("posting the reply to Slack failed (claim released)")]
    Slack(#[source] SlackError),
    #[error("an earlier claim may have posted and Slack could not be asked (claim released)")]
    LookupUnavailable(#[source] SlackError),
    #[error("a listener failed (claim released)")]
    Bot(#[source] BotError),
    #[error("a listener made other writes than when it first ran")]
    Nondeterministic(#[source] BotError),
    #[error("the listener's writes would not fit in the event's journal")]
    JournalFull(#[source] BotError),
    #[error("the processing deadline passed before the reply was posted")]
    Deadline,
    #[error("the event could not be put on the work queue")]
    Queue(#[source] QueueError),
}

/// Everything a delivery needs, built once per process and shared by every request.
pub struct Processor {
    /// The signing secrets (a worker, which serves no HTTP request, has none).
    secrets: Arc<SlackSecrets>,
    ledger: Arc<dyn Ledger>,
    slack: SlackClient,
    app: Arc<App>,
    /// Deferred mode: verified events go to this queue instead of being run here.
    queue: Option<Arc<dyn WorkQueue>>,
    ttl: Duration,
    lease: Duration,
    version: String,
    metrics: bool,
}

/// The protocol's settings, from the configuration.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How long an event is remembered.
    pub ttl: Duration,
    /// The lease when the runtime gives no deadline.
    pub lease: Duration,
    /// The version answering, written into each post's metadata.
    pub version: String,
    /// Whether each invocation prints its metrics line.
    pub metrics: bool,
}

impl Processor {
    pub fn new(
        ledger: Arc<dyn Ledger>,
        slack: SlackClient,
        app: Arc<App>,
        settings: Settings,
    ) -> Self {
        Self {
            secrets: Arc::new(SlackSecrets::fixed(None, None)),
            ledger,
            slack,
            app,
            queue: None,
            ttl: settings.ttl,
            lease: settings.lease,
            version: settings.version,
            metrics: settings.metrics,
        }
    }

    /// The secrets HTTP deliveries are verified with (an ingress needs them).
    pub fn with_secrets(mut self, secrets: Arc<SlackSecrets>) -> Self {
        self.secrets = secrets;
        self
    }

    /// Deferred mode: the ingress puts verified events on `queue` and acknowledges.
    pub fn with_queue(mut self, queue: Arc<dyn WorkQueue>) -> Self {
        self.queue = Some(queue);
        self
    }

    /// Handles one delivery inside a span carrying the event id, team, retry number and outcome.
    pub async fn handle(&self, delivery: Delivery<'_>) -> Result<Outcome, ProcessError> {
        let retry_num =
            header_str(delivery.headers, RETRY_NUM_HEADER).and_then(|v| v.parse::<u32>().ok());
        let span = tracing::info_span!(
            "event",
            event_id = tracing::field::Empty,
            key = tracing::field::Empty,
            team = tracing::field::Empty,
            retry_num,
            retry_reason = tracing::field::Empty,
            function_version = %self.version,
            request_id = delivery.request_id,
            outcome = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
        );
        let result = self
            .handle_in_span(delivery, retry_num)
            .instrument(span.clone())
            .await;
        log_result(&span, delivery.started, &result, "delivery");
        metrics::count("Deliveries");
        record_result(&result);
        metrics::time_ms("TimeToAck", delivery.started.elapsed().as_secs_f64() * 1e3);
        result
    }

    /// The version answering (`AWS_LAMBDA_FUNCTION_VERSION`, or `local`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Prints `metrics`' line, unless `METRICS=off`.
    pub fn emit_metrics(&self, metrics: &crate::metrics::Metrics, properties: &[(&str, &str)]) {
        if self.metrics {
            metrics.emit(&self.version, properties);
        }
    }

    /// Runs one event taken from the work queue, inside a span carrying the event id, team,
    /// Slack's retry number, the message and its receive count, and the outcome.
    pub async fn run_queued(
        &self,
        callback: &Arc<EventCallback>,
        delivery: &EventDelivery<'_>,
        message: QueuedMessage<'_>,
    ) -> Result<Outcome, ProcessError> {
        let span = tracing::info_span!(
            "queued_event",
            event_id = tracing::field::Empty,
            key = tracing::field::Empty,
            team = tracing::field::Empty,
            retry_num = delivery.retry_num,
            retry_reason = tracing::field::Empty,
            function_version = %self.version,
            request_id = message.request_id,
            message_id = message.message_id,
            receive_count = message.receive_count,
            outcome = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
        );
        let result = self
            .run_event(callback, delivery)
            .instrument(span.clone())
            .await;
        log_result(&span, delivery.started, &result, "queued event");
        metrics::count("QueuedEvents");
        record_result(&result);
        if message.receive_count > 1 {
            metrics::count("QueueRedeliveries");
        }
        if result.is_err() {
            // Left for SQS to hand out again: what the worker's canary alarm watches (its
            // batches never fail as invocations).
            metrics::count("WorkerErrors");
            if delivery.last_chance {
                // Left on its last receive: SQS moves it to the dead-letter queue.
                metrics::count("DeadLettered");
            }
        }
        if result.is_ok() {
            let age = unix_ms(SystemTime::now()).saturating_sub(message.received_at_ms);
            metrics::time_ms("TimeToAnswer", age as f64);
        }
        result
    }

    async fn handle_in_span(
        &self,
        delivery: Delivery<'_>,
        retry_num: Option<u32>,
    ) -> Result<Outcome, ProcessError> {
        match self.verify_and_parse(&delivery).await? {
            Envelope::UrlVerification { challenge } => Ok(Outcome::Challenge(challenge)),
            Envelope::AppRateLimited {
                team_id,
                minute_rate_limited,
            } => {
                tracing::warn!(
                    team = team_id.as_deref().unwrap_or(""),
                    minute_rate_limited,
                    "Slack rate-limited this app's events (over 30,000 an hour): events are being dropped"
                );
                Ok(Outcome::RateLimitNotice)
            }
            Envelope::Unknown => Ok(Outcome::Ignored),
            Envelope::EventCallback(callback) => {
                let callback: Arc<EventCallback> = Arc::from(callback);
                let retry_reason = header_str(delivery.headers, RETRY_REASON_HEADER)
                    .filter(|r| r.len() <= 64 && r.bytes().all(|b| b.is_ascii_graphic()));
                if let Some(queue) = &self.queue {
                    return self
                        .enqueue(&**queue, &callback, &delivery, retry_num, retry_reason)
                        .await;
                }
                let event = EventDelivery {
                    retry_num,
                    retry_reason,
                    // Slack's last retry: no delivery follows it.
                    last_chance: retry_num.is_some_and(|n| n >= SLACK_LAST_RETRY),
                    now: delivery.now,
                    started: delivery.started,
                    invocation_deadline: delivery.invocation_deadline,
                };
                self.run_event(&callback, &event).await
            }
        }
    }

    /// Verifies the exact bytes Slack signed, then parses them: nothing else is read before
    /// the signature holds. A well-formed, fresh signature that matches none of the signing
    /// secrets may mean they were rotated: they are read again (at most once per refresh
    /// interval) and the signature checked once more.
    pub async fn verify_and_parse(
        &self,
        delivery: &Delivery<'_>,
    ) -> Result<Envelope, ProcessError> {
        let now_unix = unix_ms(delivery.now) / 1000;
        let verify = |values: &SecretValues| match &values.signing {
            Some(signing) => {
                signature::verify_at(signing, delivery.headers, delivery.body, now_unix)
            }
            // A worker serves no HTTP request; should one reach it, nothing verifies.
            None => Err(SignatureError::Mismatch),
        };
        match verify(&self.secrets.current()) {
            Ok(()) => {}
            Err(SignatureError::Mismatch)
                if self
                    .secrets
                    .refresh("a signature matched no signing secret")
                    .await =>
            {
                verify(&self.secrets.current())?
            }
            Err(e) => return Err(e.into()),
        }
        serde_json::from_slice(delivery.body).map_err(ProcessError::Malformed)
    }

    /// Deferred mode's ingress: the verified event goes to the work queue as Slack sent it,
    /// with its retry number and reason, and Slack gets its 2xx once the queue holds it. No
    /// ledger write: a duplicate on the queue is harmless, the worker de-duplicates.
    async fn enqueue(
        &self,
        queue: &dyn WorkQueue,
        callback: &Arc<EventCallback>,
        delivery: &Delivery<'_>,
        retry_num: Option<u32>,
        retry_reason: Option<&str>,
    ) -> Result<Outcome, ProcessError> {
        if let Err(outcome) = self.screen(callback) {
            return Ok(outcome);
        }
        // The body parsed as JSON, so it is UTF-8 and a valid raw value.
        let envelope = std::str::from_utf8(delivery.body)
            .ok()
            .and_then(|b| RawValue::from_string(b.to_string()).ok())
            .ok_or_else(|| {
                ProcessError::Malformed(<serde_json::Error as serde::de::Error>::custom(
                    "the body is not UTF-8 JSON",
                ))
            })?;
        let message = QueuedEvent {
            v: QUEUED_EVENT_VERSION,
            envelope,
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

    /// Names the event on the current span, then routes it to the listeners that take it; the
    /// outcome instead when it is not to be answered (the bot's own message, an edit…, or no
    /// listener takes it): it is then neither queued nor claimed.
    fn screen(&self, callback: &Arc<EventCallback>) -> Result<Route, Outcome> {
        let span = tracing::Span::current();
        span.record("event_id", callback.event_id.as_str());
        if let Some(team) = callback.team() {
            span.record("team", team);
        }
        if let Some(reason) = callback.skip_reason() {
            tracing::debug!(reason = reason.as_str(), "not answering this event");
            return Err(Outcome::Skipped(reason));
        }
        let route = self.app.route(callback);
        if route.is_empty() {
            tracing::debug!(kind = %callback.event.kind, "no listener takes this event");
            return Err(Outcome::NoListener);
        }
        Ok(route)
    }

    /// The protocol for one verified event, shared by every path that runs one: skip → route
    /// to the listeners → for each group of them (those keyed by the message the event carries,
    /// those keyed by the event): claim → run them (their Slack writes as journaled steps) →
    /// finish.
    pub async fn run_event(
        &self,
        callback: &Arc<EventCallback>,
        delivery: &EventDelivery<'_>,
    ) -> Result<Outcome, ProcessError> {
        let span = tracing::Span::current();
        if let Some(reason) = delivery.retry_reason {
            span.record("retry_reason", reason);
        }
        let route = match self.screen(callback) {
            Ok(route) => route,
            Err(outcome) => return Ok(outcome),
        };
        let Some(times) = Times::new(delivery, self.lease) else {
            tracing::warn!(
                deadline_ms = delivery.invocation_deadline.map(unix_ms),
                now_ms = unix_ms(delivery.now),
                "the invocation deadline has passed already: not claiming"
            );
            return Err(ProcessError::Deadline);
        };
        // A cold start's connection to Slack opens while the claim is made.
        self.slack.warm_up();
        let mut result: Option<Result<Outcome, ProcessError>> = None;
        for unit in route.units {
            let keys = LedgerKeys::of(callback, unit.identity == Identity::Message);
            if keys.primary != callback.event_id {
                span.record("key", keys.primary.as_str());
            }
            let ran = self.run_unit(callback, delivery, &times, &keys, unit).await;
            result = Some(match result {
                None => ran,
                Some(earlier) => combine(earlier, ran),
            });
        }
        result.unwrap_or(Ok(Outcome::NoListener))
    }

    /// One group of listeners under one claim: claim its key (and its alias, in the same round
    /// trip), run the listeners, finish. A message answered already by other listeners than
    /// some of these (Slack's other event of the message carried it, and a listener selects on
    /// what only this one says) runs those others, each under a claim of its own.
    async fn run_unit(
        &self,
        callback: &Arc<EventCallback>,
        delivery: &EventDelivery<'_>,
        times: &Times,
        keys: &LedgerKeys,
        unit: Unit,
    ) -> Result<Outcome, ProcessError> {
        let owner = OwnerToken::random();
        let (attempt, journal) = match self.claim(keys, callback, delivery, times, &owner).await? {
            Claimed::Acquired { attempt, journal } => (attempt, journal),
            Claimed::Done { ran: Some(ran) } if unit.identity == Identity::Message => {
                let missing: Vec<Run> = unit
                    .runs
                    .into_iter()
                    .filter(|r| !ran.contains(&r.id))
                    .collect();
                if missing.is_empty() {
                    return Ok(Outcome::Duplicate);
                }
                return Box::pin(self.run_stragglers(callback, delivery, times, keys, missing))
                    .await;
            }
            Claimed::Done { .. } => return Ok(Outcome::Duplicate),
            Claimed::Ended(outcome) => return Ok(outcome),
        };
        let ids: Vec<String> = unit.runs.iter().map(|r| r.id.clone()).collect();
        let ctx = Ctx::new(
            callback.clone(),
            self.slack.clone(),
            times.work_deadline,
            self.version.clone(),
            Steps::new(
                self.ledger.clone(),
                keys.primary.clone(),
                owner.clone(),
                (attempt, journal),
                delivery.last_chance,
                (times.now_ms, times.started, times.lease_until_ms),
            ),
        );
        let work = async {
            for run in unit.runs {
                if let Err(error) = (run.work)(ctx.clone()).await {
                    return Err(listener_failed(&run.name, error));
                }
            }
            Ok(())
        };
        let working = Instant::now();
        let worked = match tokio::time::timeout_at(times.work_deadline, work).await {
            Ok(result) => result,
            Err(_) => Err(ProcessError::Deadline),
        };
        metrics::time_ms("HandlerLatency", working.elapsed().as_secs_f64() * 1e3);
        let (mut settled, tally) = ctx.close().await;
        if unit.identity == Identity::Message && worked.is_ok() {
            // Which listeners answered the message: another of its events runs only others.
            settled.push(Settled::Ran { listeners: ids });
        }
        let held = Held {
            event_id: &keys.primary,
            owner: &owner,
        };
        self.finish(
            held,
            attempt,
            delivery.last_chance,
            times,
            worked,
            settled,
            tally,
        )
        .await
    }

    /// Listeners of a message that its answer did not run (they take only this event of it),
    /// each under a claim keyed by the message and the listener, so each runs once.
    async fn run_stragglers(
        &self,
        callback: &Arc<EventCallback>,
        delivery: &EventDelivery<'_>,
        times: &Times,
        keys: &LedgerKeys,
        missing: Vec<Run>,
    ) -> Result<Outcome, ProcessError> {
        let mut result: Option<Result<Outcome, ProcessError>> = None;
        for run in missing {
            let Some(key) = ledger_key(&format!("{}-{}", keys.primary, run.id)) else {
                continue;
            };
            tracing::info!(
                listener = run.name,
                key = %key,
                "the message was answered by its other event's listeners: running this one"
            );
            let keys = LedgerKeys {
                primary: key,
                alias: None,
            };
            let unit = Unit {
                identity: Identity::Event,
                runs: vec![run],
            };
            let ran = self.run_unit(callback, delivery, times, &keys, unit).await;
            result = Some(match result {
                None => ran,
                Some(earlier) => combine(earlier, ran),
            });
        }
        result.unwrap_or(Ok(Outcome::Duplicate))
    }

    /// Claims `keys.primary` in the ledger and, in the same round trip, writes its alias (the
    /// message's `client_msg_id`): a message whose alias belongs to another one is a copy of
    /// it under another `ts`, and is finished as a duplicate. Within the processing deadline.
    async fn claim(
        &self,
        keys: &LedgerKeys,
        callback: &EventCallback,
        delivery: &EventDelivery<'_>,
        times: &Times,
        owner: &OwnerToken,
    ) -> Result<Claimed, ProcessError> {
        let key = &keys.primary;
        let expires_at_s = (unix_ms(delivery.now) + self.ttl.as_millis() as u64).div_ceil(1000);
        let request = ClaimRequest {
            event_id: key,
            owner,
            now_ms: times.now_ms,
            lease_until_ms: times.lease_until_ms,
            expires_at_s,
            team_id: callback.team(),
            retry_num: delivery.retry_num,
            retry_reason: delivery.retry_reason,
        };
        let alias = keys.alias.as_ref().map(|alias| AliasRequest {
            alias,
            of: key,
            now_ms: times.now_ms,
            expires_at_s,
        });
        let both = async {
            let claim = self.ledger.claim(&request);
            match &alias {
                Some(alias) => {
                    let (claim, alias) = tokio::join!(claim, self.ledger.alias(alias));
                    (claim, Some(alias))
                }
                None => (claim.await, None),
            }
        };
        let (claim, alias) = tokio::time::timeout_at(times.work_deadline, both)
            .await
            .map_err(|_| ledger_timeout())?;
        let claim = claim.map_err(ProcessError::Ledger)?;
        let (attempt, journal) = match claim {
            Claim::AlreadyDone { ran } => return Ok(Claimed::Done { ran }),
            Claim::AlreadyFailed { error } => {
                tracing::info!(error, key = %key, "this event ended failed already: not answering");
                return Ok(Claimed::Ended(Outcome::AlreadyFailed));
            }
            Claim::InProgress { lease_until_ms } => {
                tracing::info!(
                    lease_until_ms,
                    key = %key,
                    "another delivery holds a live claim: not answering"
                );
                return Ok(Claimed::Ended(Outcome::InProgress));
            }
            Claim::Acquired { attempt, journal } => (attempt, journal),
        };
        // The claim is this delivery's: whether it is a copy of another message decides.
        let held = Held {
            event_id: key,
            owner,
        };
        let ended = match alias {
            None | Some(Ok(Alias::Ours)) => None,
            Some(Ok(Alias::CopyOf { key: of })) => {
                tracing::info!(
                    copy_of = of,
                    "this message is a copy of another one (the same client_msg_id under \
                     another ts): answered there, not here"
                );
                Some((Finish::Done, Ok(Claimed::Ended(Outcome::Duplicate))))
            }
            Some(Ok(Alias::Busy { lease_until_ms })) => {
                tracing::info!(
                    lease_until_ms,
                    "an earlier version holds a live claim of this message's client_msg_id"
                );
                Some((Finish::Released, Ok(Claimed::Ended(Outcome::InProgress))))
            }
            Some(Err(error)) => Some((Finish::Released, Err(ProcessError::Ledger(error)))),
        };
        if let Some((to, ended)) = ended {
            // Released before the listeners ran: what earlier claims may have posted stays in
            // doubt, as an intent.
            let doubt: Vec<Settled> = match to {
                Finish::Released => keep_doubt(&journal).into_iter().collect(),
                _ => Vec::new(),
            };
            let write = self.ledger.finish(held, &to, &doubt, times.now_ms());
            if let Err(e) = before(times.finish_deadline, write).await {
                tracing::warn!(error = e, key = %key, "could not end the claim");
            }
            return ended;
        }
        if attempt > 1 {
            metrics::count("Takeovers");
            tracing::info!(
                attempt,
                key = %key,
                steps_recorded = journal.len(),
                "taking over an event whose earlier claim expired or was released"
            );
        }
        Ok(Claimed::Acquired { attempt, journal })
    }

    /// Ends the claim: done after the work, `failed` after an error no retry can fix, released
    /// after any other failure (`failed`, retryable, when no delivery follows). The finishing
    /// write carries the last step's result and must end before the lease (on Lambda: early
    /// enough to return the answer).
    #[allow(clippy::too_many_arguments)]
    async fn finish(
        &self,
        held: Held<'_>,
        attempt: u32,
        last_chance: bool,
        times: &Times,
        worked: Result<(), ProcessError>,
        settled: Vec<Settled>,
        tally: Tally,
    ) -> Result<Outcome, ProcessError> {
        let now_ms = times.now_ms();
        let (to, result) = match worked {
            Ok(()) => (
                Finish::Done,
                Ok(if tally.made > 0 {
                    Outcome::Answered { attempt }
                } else if tally.settled > 0 {
                    Outcome::Recovered
                } else {
                    Outcome::NoReply
                }),
            ),
            Err(error) if error.is_final() => {
                let code = error.failure_code();
                match &error {
                    ProcessError::Slack(_) => {
                        metrics::count("SlackErrorsPermanent");
                        tracing::error!(
                            slack_error = code.as_str(),
                            "Slack refused a write with an error no retry can fix: the event \
                             ends failed, and no copy of it is answered"
                        );
                    }
                    _ => tracing::error!(
                        error = %error_chain(&error),
                        failure = code.as_str(),
                        "the event ends failed: no retry can change this (see the error)"
                    ),
                }
                (
                    Finish::Failed {
                        error: code.clone(),
                        retryable: false,
                    },
                    Ok(Outcome::Failed { code }),
                )
            }
            Err(error) => {
                let ambiguous = match &error {
                    ProcessError::Slack(slack) => slack.may_have_posted(),
                    ProcessError::Deadline => true,
                    _ => false,
                };
                if ambiguous {
                    tracing::warn!(
                        "it is unknown whether the last write reached Slack; releasing: the next \
                         delivery takes over and looks in Slack before writing again"
                    );
                }
                // No delivery follows: the event ends failed, and says why. Not for good: a
                // copy redriven from a dead-letter queue may claim it again.
                let to = if last_chance {
                    tracing::error!(
                        error = %error_chain(&error),
                        failure = error.failure_code(),
                        "the last delivery of this event failed: it ends failed, unanswered"
                    );
                    Finish::Failed {
                        error: error.failure_code(),
                        retryable: true,
                    }
                } else {
                    Finish::Released
                };
                (to, Err(error))
            }
        };
        let write = self.ledger.finish(held, &to, &settled, now_ms);
        let written = before(times.finish_deadline, write).await;
        match (written, to, result) {
            (Ok(()), _, result) => result,
            (Err(e), Finish::Done, result) => {
                // The writes are out: answer 2xx all the same so Slack stops redelivering.
                tracing::error!(
                    error = e,
                    "the event's writes are out but it could not be marked done; a copy arriving \
                     after the lease takes over and looks in Slack first"
                );
                result
            }
            (
                Err(e),
                Finish::Failed {
                    retryable: false, ..
                },
                _,
            ) => {
                tracing::warn!(
                    error = e,
                    "could not mark the event failed: the next copy runs it again"
                );
                Err(ProcessError::Ledger(LedgerError::Unavailable(e.into())))
            }
            (Err(e), _, result) => {
                tracing::warn!(
                    error = e,
                    "could not release the claim: the next copy waits for the lease to end"
                );
                result
            }
        }
    }
}

/// The result of a delivery whose listeners ran under two claims (the message's, and the
/// event's for listeners that opted out): a failure first (Slack retries; the claim that
/// finished finds itself done), then a live claim elsewhere, then what was written.
fn combine(
    a: Result<Outcome, ProcessError>,
    b: Result<Outcome, ProcessError>,
) -> Result<Outcome, ProcessError> {
    fn rank(result: &Result<Outcome, ProcessError>) -> u8 {
        match result {
            Err(_) => 0,
            Ok(Outcome::InProgress) => 1,
            Ok(Outcome::Failed { .. }) => 2,
            Ok(Outcome::Answered { .. }) => 3,
            Ok(Outcome::Recovered) => 4,
            Ok(Outcome::NoReply) => 5,
            Ok(Outcome::AlreadyFailed) => 6,
            Ok(_) => 7,
        }
    }
    if rank(&b) < rank(&a) {
        b
    } else {
        a
    }
}

/// The ledger keys of one claim: its own (`primary`, holding the step journal) and the alias
/// it writes with it (a message's `client_msg_id`).
struct LedgerKeys {
    primary: EventId,
    alias: Option<EventId>,
}

impl LedgerKeys {
    /// A message is keyed by its identity (team, channel, `ts`), so every event that carries
    /// it (an `app_mention` and a `message.channels`, phantom copies with new event ids) is one
    /// claim; its `client_msg_id`, when present, is written as an alias of that key, so a copy
    /// under another `ts` is the same message. Anything else, or listeners that asked for it,
    /// are keyed by `event_id`.
    fn of(callback: &EventCallback, by_message: bool) -> Self {
        let by_event = || Self {
            primary: callback.event_id.clone(),
            alias: None,
        };
        let event = &callback.event;
        if !by_message || !matches!(event.kind.as_str(), "message" | "app_mention") {
            return by_event();
        }
        let (Some(channel), Some(ts)) = (event.channel.as_deref(), event.ts.as_deref()) else {
            return by_event();
        };
        let team = callback.team().unwrap_or("-");
        let Some(primary) = ledger_key(&format!("msg-{team}-{channel}-{ts}")) else {
            return by_event();
        };
        let alias = event
            .client_msg_id
            .as_deref()
            .and_then(|id| ledger_key(&format!("cmid-{team}-{id}")));
        Self { primary, alias }
    }
}

/// The ledger keys of `callback` (primary, alias), as a claim derives them: for the fuzzers.
#[doc(hidden)]
pub fn ledger_keys(callback: &EventCallback, by_message: bool) -> (EventId, Option<EventId>) {
    let keys = LedgerKeys::of(callback, by_message);
    (keys.primary, keys.alias)
}

/// A ledger key from `raw`: the characters of an event id (others become `_`), at most 128.
fn ledger_key(raw: &str) -> Option<EventId> {
    let key: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    EventId::try_from(key).ok()
}

/// What a failed listener means to the protocol: a failed step's error as the step's failure,
/// anything else as the bot's.
fn listener_failed(name: &str, error: BotError) -> ProcessError {
    match error.downcast::<StepError>() {
        Ok(step) => match *step {
            StepError::Slack(SlackError::Timeout) => ProcessError::Deadline,
            StepError::Slack(e) => ProcessError::Slack(e),
            StepError::LookupUnavailable(e) => ProcessError::LookupUnavailable(e),
            StepError::Ledger(e) => ProcessError::Ledger(e),
            StepError::Closed => ProcessError::Deadline,
            e @ StepError::Nondeterministic { .. } => ProcessError::Nondeterministic(Box::new(e)),
            e @ StepError::JournalFull { .. } => ProcessError::JournalFull(Box::new(e)),
        },
        Err(error) => {
            tracing::warn!(listener = name, error = %error, "the listener failed");
            ProcessError::Bot(error)
        }
    }
}

/// What a claim attempt came to.
enum Claimed {
    Acquired {
        attempt: u32,
        journal: Journal,
    },
    /// Answered already (by the listeners `ran` names, when recorded).
    Done {
        ran: Option<Vec<String>>,
    },
    /// No work for this delivery: done, failed or in progress elsewhere.
    Ended(Outcome),
}

/// The times of one claim.
struct Times {
    now_ms: u64,
    started: Instant,
    /// Written to the ledger: the claim is live until then.
    lease_until_ms: u64,
    /// Monotonic instants: bot, Slack and the step writes must finish by `work_deadline`; the
    /// finishing write by `finish_deadline`, which leaves the answer time to get out.
    work_deadline: Instant,
    finish_deadline: Instant,
}

impl Times {
    /// The wall-clock time now (epoch ms), as measured from the delivery's arrival.
    fn now_ms(&self) -> u64 {
        self.now_ms + self.started.elapsed().as_millis() as u64
    }

    /// `None` when the invocation deadline has already passed.
    fn new(delivery: &EventDelivery<'_>, configured_lease: Duration) -> Option<Self> {
        let lease = match delivery.invocation_deadline {
            Some(deadline) => deadline.duration_since(delivery.now).ok()?,
            None => configured_lease,
        };
        // On Lambda the response must be returned before the deadline, or Lambda answers 502
        // itself and Slack redelivers an event already answered.
        let answer_margin = match delivery.invocation_deadline {
            Some(_) => ANSWER_MARGIN.min(lease / 4),
            None => Duration::ZERO,
        };
        let usable = lease.checked_sub(answer_margin)?;
        if usable.is_zero() {
            return None;
        }
        let margin = (usable / 4).min(MAX_LEASE_MARGIN);
        let now_ms = unix_ms(delivery.now);
        let lease_until_ms = match delivery.invocation_deadline {
            Some(deadline) => unix_ms(deadline),
            None => now_ms + lease.as_millis() as u64,
        };
        Some(Self {
            now_ms,
            started: delivery.started,
            lease_until_ms,
            work_deadline: delivery.started + (usable - margin),
            finish_deadline: delivery.started + usable,
        })
    }
}

/// A ledger write that must finish by `deadline`.
async fn before(
    deadline: Instant,
    call: impl std::future::Future<Output = Result<(), LedgerError>>,
) -> Result<(), String> {
    match tokio::time::timeout_at(deadline, call).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(error_chain(&e)),
        Err(_) => Err("no answer before the lease ended".into()),
    }
}

/// Counts a delivery's or queued event's result: its outcome, or its failure's kind.
fn record_result(result: &Result<Outcome, ProcessError>) {
    let name = match result {
        Ok(outcome) => match outcome {
            Outcome::Challenge(_) => "Challenge",
            Outcome::Answered { .. } => "Answered",
            Outcome::Recovered => "Recovered",
            Outcome::NoReply => "NoReply",
            Outcome::NoListener => "NoListener",
            Outcome::Duplicate => "Duplicate",
            Outcome::Failed { .. } => "Failed",
            Outcome::AlreadyFailed => "AlreadyFailed",
            Outcome::InProgress => "InProgress",
            Outcome::Skipped(_) => "Skipped",
            Outcome::RateLimitNotice => "AppRateLimited",
            Outcome::Ignored => "Ignored",
            Outcome::Queued => "Queued",
        },
        Err(error) => match error {
            ProcessError::Signature(_) => "RejectedSignature",
            ProcessError::Malformed(_) => "RejectedPayload",
            ProcessError::Ledger(_) => "LedgerErrors",
            ProcessError::Slack(e) if e.may_have_posted() => "SlackErrorsAmbiguous",
            ProcessError::Slack(_) => "SlackErrorsTransient",
            ProcessError::LookupUnavailable(_) => "SlackLookupUnavailable",
            ProcessError::Bot(_) => "ListenerErrors",
            ProcessError::Nondeterministic(_) => "NondeterministicListeners",
            ProcessError::JournalFull(_) => "JournalFull",
            ProcessError::Deadline => "DeadlineExceeded",
            ProcessError::Queue(QueueError::TooLarge { .. }) => "RejectedTooLarge",
            ProcessError::Queue(_) => "QueueErrors",
        },
    };
    metrics::count(name);
}

/// One line per delivery or queued event, at the level its result deserves, in its span.
fn log_result(
    span: &tracing::Span,
    started: Instant,
    result: &Result<Outcome, ProcessError>,
    what: &'static str,
) {
    span.record("latency_ms", started.elapsed().as_millis() as u64);
    match result {
        Ok(outcome) => {
            span.record("outcome", outcome.as_str());
            span.in_scope(|| tracing::info!("{what} handled"));
        }
        Err(error) => {
            span.record("outcome", "error");
            span.in_scope(|| match error {
                ProcessError::Signature(_) | ProcessError::Malformed(_) => {
                    tracing::warn!(error = %error, "{what} refused")
                }
                _ => tracing::error!(error = %error_chain(error), "{what} failed"),
            });
        }
    }
}

fn ledger_timeout() -> ProcessError {
    ProcessError::Ledger(LedgerError::Unavailable(
        "the ledger did not answer before the processing deadline".into(),
    ))
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// An error and all its sources on one line, for the log.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_is_the_invocation_deadline_on_lambda_and_the_answer_keeps_a_margin() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let started = Instant::now();
        let delivery = EventDelivery {
            retry_num: None,
            retry_reason: None,
            last_chance: false,
            now,
            started,
            invocation_deadline: Some(now + Duration::from_secs(10)),
        };
        let t = Times::new(&delivery, Duration::from_secs(30)).unwrap();
        assert_eq!(t.lease_until_ms, 1_700_000_010_000);
        // The ledger writes end 250 ms before the deadline; the work 1 s before that.
        assert_eq!(t.finish_deadline, started + Duration::from_millis(9_750));
        assert_eq!(t.work_deadline, started + Duration::from_millis(8_750));

        let local = EventDelivery {
            invocation_deadline: None,
            ..delivery
        };
        let t = Times::new(&local, Duration::from_secs(2)).unwrap();
        assert_eq!(t.lease_until_ms, 1_700_000_002_000);
        assert_eq!(t.work_deadline, started + Duration::from_millis(1500));
        assert_eq!(t.finish_deadline, started + Duration::from_secs(2));

        let late = EventDelivery {
            invocation_deadline: Some(now - Duration::from_secs(1)),
            ..delivery
        };
        assert!(Times::new(&late, Duration::from_secs(30)).is_none());
    }
}
