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

use crate::bot::{Bot, BotError, Reply};
use crate::config::SigningSecrets;
use crate::envelope::{Envelope, EventCallback, SkipReason};
use crate::ledger::{
    Claim, ClaimRequest, Finish, Held, Journal, Ledger, LedgerError, OwnerToken, Settled,
    StepRecord,
};
use crate::queue::{QueueError, QueuedEvent, WorkQueue, QUEUED_EVENT_VERSION};
use crate::signature::{self, SignatureError};
use crate::slack::{
    Delivered, PostMessage, ReplyQuery, SlackClient, SlackError, REPLY_METADATA_TYPE,
};

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
    /// This delivery claimed the event; the bot had nothing to say.
    NoReply,
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
                };
                format!("{prefix}{kind}")
            }
            ProcessError::Bot(_) => "bot_failed".into(),
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
    #[error("the bot failed (claim released)")]
    Bot(#[source] BotError),
    #[error("the processing deadline passed before the reply was posted")]
    Deadline,
    #[error("the event could not be put on the work queue")]
    Queue(#[source] QueueError),
}

/// Everything a delivery needs, built once per process and shared by every request.
pub struct Processor {
    /// `None` in a worker, which serves no HTTP request.
    secrets: Option<SigningSecrets>,
    ledger: Arc<dyn Ledger>,
    slack: SlackClient,
    bot: Arc<dyn Bot>,
    /// Deferred mode: verified events go to this queue instead of being run here.
    queue: Option<Arc<dyn WorkQueue>>,
    ttl: Duration,
    lease: Duration,
    version: String,
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
}

impl Processor {
    pub fn new(
        ledger: Arc<dyn Ledger>,
        slack: SlackClient,
        bot: Arc<dyn Bot>,
        settings: Settings,
    ) -> Self {
        Self {
            secrets: None,
            ledger,
            slack,
            bot,
            queue: None,
            ttl: settings.ttl,
            lease: settings.lease,
            version: settings.version,
        }
    }

    /// The secrets HTTP deliveries are verified with (an ingress needs them).
    pub fn with_secrets(mut self, secrets: SigningSecrets) -> Self {
        self.secrets = Some(secrets);
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
            team = tracing::field::Empty,
            retry_num,
            retry_reason = tracing::field::Empty,
            outcome = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
        );
        let result = self
            .handle_in_span(delivery, retry_num)
            .instrument(span.clone())
            .await;
        log_result(&span, delivery.started, &result, "delivery");
        result
    }

    /// Runs one event taken from the work queue, inside a span carrying the event id, team,
    /// Slack's retry number, the message and its receive count, and the outcome.
    pub async fn run_queued(
        &self,
        callback: &EventCallback,
        delivery: &EventDelivery<'_>,
        message_id: &str,
        receive_count: u32,
    ) -> Result<Outcome, ProcessError> {
        let span = tracing::info_span!(
            "queued_event",
            event_id = tracing::field::Empty,
            team = tracing::field::Empty,
            retry_num = delivery.retry_num,
            retry_reason = tracing::field::Empty,
            message_id,
            receive_count,
            outcome = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
        );
        let result = self
            .run_event(callback, delivery)
            .instrument(span.clone())
            .await;
        log_result(&span, delivery.started, &result, "queued event");
        result
    }

    async fn handle_in_span(
        &self,
        delivery: Delivery<'_>,
        retry_num: Option<u32>,
    ) -> Result<Outcome, ProcessError> {
        match self.verify_and_parse(&delivery)? {
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
    /// the signature holds.
    pub fn verify_and_parse(&self, delivery: &Delivery<'_>) -> Result<Envelope, ProcessError> {
        let now_unix = unix_ms(delivery.now) / 1000;
        let Some(secrets) = &self.secrets else {
            // A worker serves no HTTP request; should one reach it, nothing verifies.
            return Err(ProcessError::Signature(SignatureError::Mismatch));
        };
        signature::verify_at(secrets, delivery.headers, delivery.body, now_unix)?;
        serde_json::from_slice(delivery.body).map_err(ProcessError::Malformed)
    }

    /// Deferred mode's ingress: the verified event goes to the work queue as Slack sent it,
    /// with its retry number and reason, and Slack gets its 2xx once the queue holds it. No
    /// ledger write: a duplicate on the queue is harmless, the worker de-duplicates.
    async fn enqueue(
        &self,
        queue: &dyn WorkQueue,
        callback: &EventCallback,
        delivery: &Delivery<'_>,
        retry_num: Option<u32>,
        retry_reason: Option<&str>,
    ) -> Result<Outcome, ProcessError> {
        let span = tracing::Span::current();
        span.record("event_id", callback.event_id.as_str());
        if let Some(team) = callback.team() {
            span.record("team", team);
        }
        if let Some(reason) = callback.skip_reason() {
            tracing::debug!(reason = reason.as_str(), "not answering this event");
            return Ok(Outcome::Skipped(reason));
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

    /// The protocol for one verified event, shared by every path that runs one: skip → claim
    /// → work (the bot, then its Slack writes as journaled steps) → finish.
    pub async fn run_event(
        &self,
        callback: &EventCallback,
        delivery: &EventDelivery<'_>,
    ) -> Result<Outcome, ProcessError> {
        let span = tracing::Span::current();
        span.record("event_id", callback.event_id.as_str());
        if let Some(team) = callback.team() {
            span.record("team", team);
        }
        if let Some(reason) = delivery.retry_reason {
            span.record("retry_reason", reason);
        }
        if let Some(reason) = callback.skip_reason() {
            tracing::debug!(reason = reason.as_str(), "not answering this event");
            return Ok(Outcome::Skipped(reason));
        }
        let Some(times) = Times::new(delivery, self.lease) else {
            tracing::warn!(
                deadline_ms = delivery.invocation_deadline.map(unix_ms),
                now_ms = unix_ms(delivery.now),
                "the invocation deadline has passed already: not claiming"
            );
            return Err(ProcessError::Deadline);
        };
        let owner = OwnerToken::random();
        let (attempt, journal) = match self.claim(callback, delivery, &times, &owner).await? {
            Claimed::Acquired { attempt, journal } => (attempt, journal),
            Claimed::Ended(outcome) => return Ok(outcome),
        };
        let mut run = ClaimRun {
            held: Held {
                event_id: &callback.event_id,
                owner: &owner,
            },
            attempt,
            journal,
            next_step: 1,
            unrecorded: None,
            last_chance: delivery.last_chance,
            times: &times,
        };
        let worked =
            match tokio::time::timeout_at(times.work_deadline, self.work(&mut run, callback)).await
            {
                Ok(result) => result,
                Err(_) => Err(ProcessError::Deadline),
            };
        self.finish(&mut run, worked).await
    }

    /// Claims the event in the ledger, within the processing deadline.
    async fn claim(
        &self,
        callback: &EventCallback,
        delivery: &EventDelivery<'_>,
        times: &Times,
        owner: &OwnerToken,
    ) -> Result<Claimed, ProcessError> {
        let expires_at_s = (unix_ms(delivery.now) + self.ttl.as_millis() as u64).div_ceil(1000);
        let request = ClaimRequest {
            event_id: &callback.event_id,
            owner,
            now_ms: times.now_ms,
            lease_until_ms: times.lease_until_ms,
            expires_at_s,
            team_id: callback.team(),
            retry_num: delivery.retry_num,
            retry_reason: delivery.retry_reason,
        };
        let claim = tokio::time::timeout_at(times.work_deadline, self.ledger.claim(&request))
            .await
            .map_err(|_| ledger_timeout())?
            .map_err(ProcessError::Ledger)?;
        match claim {
            Claim::AlreadyDone => Ok(Claimed::Ended(Outcome::Duplicate)),
            Claim::AlreadyFailed { error } => {
                tracing::info!(error, "this event ended failed already: not answering");
                Ok(Claimed::Ended(Outcome::AlreadyFailed))
            }
            Claim::InProgress { lease_until_ms } => {
                tracing::info!(
                    lease_until_ms,
                    "another delivery holds a live claim: not answering"
                );
                Ok(Claimed::Ended(Outcome::InProgress))
            }
            Claim::Acquired { attempt, journal } => {
                if attempt > 1 {
                    tracing::info!(
                        attempt,
                        steps_recorded = journal.len(),
                        "taking over an event whose earlier claim expired or was released"
                    );
                }
                Ok(Claimed::Acquired { attempt, journal })
            }
        }
    }

    /// The bot decides; its reply is step 1.
    async fn work(
        &self,
        run: &mut ClaimRun<'_>,
        callback: &EventCallback,
    ) -> Result<Worked, ProcessError> {
        let reply = self
            .bot
            .respond(callback)
            .await
            .map_err(ProcessError::Bot)?;
        let Some(reply) = reply else {
            return Ok(Worked::NothingToSay);
        };
        let event = &callback.event;
        let event_time = callback.event_time.map(|t| t.to_string());
        let oldest = event
            .ts
            .as_deref()
            .or(event.event_ts.as_deref())
            .or(event_time.as_deref());
        self.post_step(run, callback, reply, oldest).await
    }

    /// One post as a journaled step: its intent is recorded before the call, so a later claim
    /// looks in Slack only where this one may have posted.
    async fn post_step(
        &self,
        run: &mut ClaimRun<'_>,
        callback: &EventCallback,
        reply: Reply,
        oldest: Option<&str>,
    ) -> Result<Worked, ProcessError> {
        let step = run.next_step;
        run.next_step += 1;
        let earlier = run.journal.get(&step).cloned();
        match &earlier {
            Some(StepRecord::Done { .. }) => {
                tracing::info!(step, "the reply is recorded done by an earlier claim");
                return Ok(Worked::FoundEarlierReply);
            }
            Some(StepRecord::Intent { attempt }) => {
                // An earlier claim was about to post this step and never recorded how it went.
                let query = ReplyQuery {
                    channel: &reply.channel,
                    thread_ts: reply.thread_ts.as_deref(),
                    oldest,
                    event_id: callback.event_id.as_str(),
                    step,
                };
                match self.slack.find_reply(&query, run.times.work_deadline).await {
                    Ok(Some(ts)) => {
                        tracing::info!(
                            ts,
                            step,
                            earlier_attempt = attempt,
                            "an earlier claim's reply is already in Slack: not posting again"
                        );
                        run.unrecorded = Some(Settled::Done {
                            step,
                            result: posted_result(Some(&ts)),
                        });
                        return Ok(Worked::FoundEarlierReply);
                    }
                    Ok(None) => tracing::info!(
                        step,
                        earlier_attempt = attempt,
                        "the earlier claim's reply is not in Slack: posting"
                    ),
                    Err(error) if run.last_chance => tracing::warn!(
                        error = %error_chain(&error),
                        step,
                        "could not look for an earlier claim's reply, and no delivery follows \
                         this one: posting (it may be a second answer)"
                    ),
                    Err(error) => {
                        tracing::warn!(
                            error = %error_chain(&error),
                            step,
                            "could not look for an earlier claim's reply: releasing, so a later \
                             delivery looks again rather than risk a second answer"
                        );
                        return Err(ProcessError::LookupUnavailable(error));
                    }
                }
            }
            None => {}
        }

        // The intent, conditioned on the owner: no post without a claim still held.
        let intent = run.begin_step(&*self.ledger, step).await;
        if let Err(error) = intent {
            if earlier.is_none() {
                // Nothing was posted: should the intent have been written after all, a later
                // claim need not look.
                run.unrecorded = Some(Settled::NotDone { step });
            }
            return Err(error);
        }
        let message = PostMessage {
            channel: reply.channel,
            text: reply.text,
            thread_ts: reply.thread_ts,
            metadata: Some(serde_json::json!({
                "event_type": REPLY_METADATA_TYPE,
                "event_payload": {
                    "event_id": callback.event_id.as_str(),
                    "step": step,
                    "attempt": run.attempt,
                    "version": self.version,
                },
            })),
        };
        match self
            .slack
            .post_message(&message, run.times.work_deadline)
            .await
        {
            Ok(delivered) => {
                let ts = match &delivered {
                    Delivered::Posted { ts } => ts.as_deref(),
                    Delivered::Logged => None,
                };
                run.unrecorded = Some(Settled::Done {
                    step,
                    result: posted_result(ts),
                });
                Ok(Worked::Posted)
            }
            Err(error) => {
                if !error.may_have_posted() && earlier.is_none() {
                    // Certainly not posted, and no earlier claim tried: no one need look.
                    run.unrecorded = Some(Settled::NotDone { step });
                }
                Err(match error {
                    SlackError::Timeout => ProcessError::Deadline,
                    e => ProcessError::Slack(e),
                })
            }
        }
    }

    /// Ends the claim: done after the work, `failed` after an error no retry can fix,
    /// released after any other failure. The finishing write carries the last step's result
    /// and must end before the lease (on Lambda: early enough to return the answer).
    async fn finish(
        &self,
        run: &mut ClaimRun<'_>,
        worked: Result<Worked, ProcessError>,
    ) -> Result<Outcome, ProcessError> {
        let now_ms = run.times.now_ms + run.times.started.elapsed().as_millis() as u64;
        let settled = run.unrecorded.take();
        match worked {
            Ok(worked) => {
                let complete =
                    self.ledger
                        .finish(run.held, &Finish::Done, settled.as_ref(), now_ms);
                if let Err(error) = before(run.times.finish_deadline, complete).await {
                    // The reply is out: answer 2xx all the same so Slack stops redelivering.
                    tracing::error!(
                        error,
                        "the reply is out but the event could not be marked done; a copy \
                         arriving after the lease takes over and looks in Slack first"
                    );
                }
                Ok(match worked {
                    Worked::Posted => Outcome::Answered {
                        attempt: run.attempt,
                    },
                    Worked::FoundEarlierReply => Outcome::Recovered,
                    Worked::NothingToSay => Outcome::NoReply,
                })
            }
            Err(ProcessError::Slack(error)) if error.is_permanent() => {
                let code = error.code().unwrap_or("unknown_error").to_string();
                tracing::error!(
                    slack_error = code.as_str(),
                    "Slack refused the reply with an error no retry can fix: the event ends \
                     failed, and no copy of it is answered"
                );
                let failed = Finish::Failed {
                    error: code.clone(),
                    retryable: false,
                };
                let write = self
                    .ledger
                    .finish(run.held, &failed, settled.as_ref(), now_ms);
                match before(run.times.finish_deadline, write).await {
                    Ok(()) => Ok(Outcome::Failed { code }),
                    Err(e) => {
                        tracing::warn!(
                            error = e,
                            "could not mark the event failed: releasing it to the next copy"
                        );
                        Err(ProcessError::Slack(error))
                    }
                }
            }
            Err(error) => {
                let ambiguous = match &error {
                    ProcessError::Slack(slack) => slack.may_have_posted(),
                    ProcessError::Deadline => true,
                    _ => false,
                };
                if ambiguous {
                    tracing::warn!(
                        "it is unknown whether the reply was posted; releasing: the next \
                         delivery takes over and looks in Slack before posting"
                    );
                }
                // No delivery follows: the event ends failed, and says why. Not for good: a
                // copy redriven from a dead-letter queue may claim it again.
                let to = if run.last_chance {
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
                let write = self.ledger.finish(run.held, &to, settled.as_ref(), now_ms);
                if let Err(e) = before(run.times.finish_deadline, write).await {
                    tracing::warn!(
                        error = e,
                        "could not release the claim: the next copy waits for the lease to end"
                    );
                }
                Err(error)
            }
        }
    }
}

/// What a claim attempt came to.
enum Claimed {
    Acquired {
        attempt: u32,
        journal: Journal,
    },
    /// No work for this delivery: done, failed or in progress elsewhere.
    Ended(Outcome),
}

/// One held claim while its work runs: what the ledger knows of its steps, and what it has not
/// been told yet.
struct ClaimRun<'a> {
    held: Held<'a>,
    attempt: u32,
    /// As the claim found it.
    journal: Journal,
    next_step: u32,
    /// The last step's fate, for the claim's next write.
    unrecorded: Option<Settled>,
    /// No delivery follows this one.
    last_chance: bool,
    times: &'a Times,
}

impl ClaimRun<'_> {
    /// Records step `step`'s intent (with the previous step's fate), within the work deadline.
    async fn begin_step(&mut self, ledger: &dyn Ledger, step: u32) -> Result<(), ProcessError> {
        let now_ms = self.times.now_ms + self.times.started.elapsed().as_millis() as u64;
        let write = ledger.begin_step(
            self.held,
            step,
            self.attempt,
            self.unrecorded.as_ref(),
            now_ms,
        );
        match tokio::time::timeout_at(self.times.work_deadline, write).await {
            Ok(Ok(())) => {
                self.unrecorded = None;
                Ok(())
            }
            Ok(Err(e)) => Err(ProcessError::Ledger(e)),
            Err(_) => Err(ledger_timeout()),
        }
    }
}

/// The result journaled for a post: the message's `ts`.
fn posted_result(ts: Option<&str>) -> String {
    serde_json::json!({ "ts": ts }).to_string()
}

/// What the work under a claim did.
enum Worked {
    Posted,
    FoundEarlierReply,
    NothingToSay,
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
