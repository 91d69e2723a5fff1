//! The use case: verify → parse → skip own → claim → bot → reply → complete or release.
//!
//! The ledger is touched only after the signature verifies and the envelope parses, so a forged
//! or malformed request can never claim, poison or block a real event.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use tokio::time::Instant;
use tracing::Instrument;

use crate::bot::{Bot, BotError};
use crate::config::SigningSecrets;
use crate::envelope::{Envelope, EventCallback, SkipReason};
use crate::ledger::{Claim, ClaimRequest, Ledger, LedgerError, OwnerToken};
use crate::signature::{self, SignatureError};
use crate::slack::{PostMessage, SlackClient, SlackError, REPLY_METADATA_TYPE};

pub const RETRY_NUM_HEADER: &str = "x-slack-retry-num";
pub const RETRY_REASON_HEADER: &str = "x-slack-retry-reason";

/// Processing stops this long before the lease ends (at most 1 s, at most a quarter of the
/// lease), leaving time to release the claim and answer, and absorbing clock skew between
/// instances: no other instance sees the lease expired before the claimant has stopped.
const MAX_LEASE_MARGIN: Duration = Duration::from_secs(1);

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
    /// Another delivery holds a live claim: no reply here, and a non-2xx so Slack retries.
    InProgress,
    /// The bot's own message, an edit, a join…: acknowledged, never claimed.
    Skipped(SkipReason),
    /// Slack says it is holding back this app's events for the rest of the hour.
    RateLimitNotice,
    /// An envelope type this version does not know.
    Ignored,
}

impl Outcome {
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Challenge(_) => "challenge",
            Outcome::Answered { .. } => "answered",
            Outcome::Recovered => "recovered",
            Outcome::NoReply => "no_reply",
            Outcome::Duplicate => "duplicate",
            Outcome::InProgress => "in_progress",
            Outcome::Skipped(_) => "skipped",
            Outcome::RateLimitNotice => "app_rate_limited",
            Outcome::Ignored => "ignored",
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
    #[error("the bot failed (claim released)")]
    Bot(#[source] BotError),
    #[error("the processing deadline passed before the reply was posted")]
    Deadline,
}

/// Everything a delivery needs, built once per process and shared by every request.
pub struct Processor {
    secrets: SigningSecrets,
    ledger: Arc<dyn Ledger>,
    slack: SlackClient,
    bot: Arc<dyn Bot>,
    ttl: Duration,
    lease: Duration,
    version: String,
}

impl Processor {
    pub fn new(
        secrets: SigningSecrets,
        ledger: Arc<dyn Ledger>,
        slack: SlackClient,
        bot: Arc<dyn Bot>,
        ttl: Duration,
        lease: Duration,
        version: String,
    ) -> Self {
        Self {
            secrets,
            ledger,
            slack,
            bot,
            ttl,
            lease,
            version,
        }
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
        span.record("latency_ms", delivery.started.elapsed().as_millis() as u64);
        match &result {
            Ok(outcome) => {
                span.record("outcome", outcome.as_str());
                span.in_scope(|| tracing::info!("delivery handled"));
            }
            Err(error) => {
                span.record("outcome", "error");
                span.in_scope(|| match error {
                    ProcessError::Signature(_) | ProcessError::Malformed(_) => {
                        tracing::warn!(error = %error, "delivery refused")
                    }
                    _ => tracing::error!(error = %error_chain(error), "delivery failed"),
                });
            }
        }
        result
    }

    async fn handle_in_span(
        &self,
        delivery: Delivery<'_>,
        retry_num: Option<u32>,
    ) -> Result<Outcome, ProcessError> {
        let now_unix = unix_ms(delivery.now) / 1000;
        // The exact bytes Slack signed, before anything parses them.
        signature::verify_at(&self.secrets, delivery.headers, delivery.body, now_unix)?;
        let envelope: Envelope =
            serde_json::from_slice(delivery.body).map_err(ProcessError::Malformed)?;
        match envelope {
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
                self.process_event(&callback, &delivery, retry_num).await
            }
        }
    }

    async fn process_event(
        &self,
        callback: &EventCallback,
        delivery: &Delivery<'_>,
        retry_num: Option<u32>,
    ) -> Result<Outcome, ProcessError> {
        let span = tracing::Span::current();
        span.record("event_id", callback.event_id.as_str());
        if let Some(team) = &callback.team_id {
            span.record("team", team.as_str());
        }
        let retry_reason = header_str(delivery.headers, RETRY_REASON_HEADER)
            .filter(|r| r.len() <= 64 && r.bytes().all(|b| b.is_ascii_graphic()));
        if let Some(reason) = retry_reason {
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
        let expires_at_s = (unix_ms(delivery.now) + self.ttl.as_millis() as u64).div_ceil(1000);
        let request = ClaimRequest {
            event_id: &callback.event_id,
            owner: &owner,
            now_ms: times.now_ms,
            lease_until_ms: times.lease_until_ms,
            expires_at_s,
            team_id: callback.team_id.as_deref(),
            retry_num,
            retry_reason,
        };
        let claim = tokio::time::timeout_at(times.work_deadline, self.ledger.claim(&request))
            .await
            .map_err(|_| ledger_timeout())?
            .map_err(ProcessError::Ledger)?;
        let attempt = match claim {
            Claim::AlreadyDone => return Ok(Outcome::Duplicate),
            Claim::InProgress { lease_until_ms } => {
                tracing::info!(
                    lease_until_ms,
                    "another delivery holds a live claim: not answering"
                );
                return Ok(Outcome::InProgress);
            }
            Claim::Acquired { attempt } => attempt,
        };
        if attempt > 1 {
            tracing::info!(
                attempt,
                "taking over an event whose earlier claim expired or was released"
            );
        }

        let work = async {
            let reply = self
                .bot
                .respond(callback)
                .await
                .map_err(ProcessError::Bot)?;
            let Some(reply) = reply else {
                return Ok(Worked::NothingToSay);
            };
            if attempt > 1 {
                // An earlier claim of this event ended without completing: it may have posted
                // before it died or gave up. Slack knows: look for its reply first.
                let found = self
                    .slack
                    .find_reply(
                        &reply.channel,
                        reply.thread_ts.as_deref(),
                        callback.event.ts.as_deref(),
                        callback.event_id.as_str(),
                        times.work_deadline,
                    )
                    .await;
                match found {
                    Ok(Some(ts)) => {
                        tracing::info!(
                            ts,
                            "an earlier claim's reply is already in Slack: not posting again"
                        );
                        return Ok(Worked::FoundEarlierReply);
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(
                        error = %error_chain(&e),
                        "could not look for an earlier claim's reply; posting (it may be a second answer)"
                    ),
                }
            }
            let message = PostMessage {
                channel: reply.channel,
                text: reply.text,
                thread_ts: reply.thread_ts,
                metadata: Some(serde_json::json!({
                    "event_type": REPLY_METADATA_TYPE,
                    "event_payload": {
                        "event_id": callback.event_id.as_str(),
                        "attempt": attempt,
                        "version": self.version,
                    },
                })),
            };
            self.slack
                .post_message(&message, times.work_deadline)
                .await
                .map_err(|e| match e {
                    SlackError::Timeout => ProcessError::Deadline,
                    e => ProcessError::Slack(e),
                })?;
            Ok(Worked::Posted)
        };
        let worked = match tokio::time::timeout_at(times.work_deadline, work).await {
            Ok(result) => result,
            Err(_) => Err(ProcessError::Deadline),
        };
        let now_ms = || unix_ms(delivery.now) + delivery.started.elapsed().as_millis() as u64;
        match worked {
            Ok(worked) => {
                let complete = self.ledger.complete(&callback.event_id, &owner, now_ms());
                if let Err(error) = before_lease_ends(times.lease_deadline, complete).await {
                    // The reply is out: answer 2xx all the same so Slack stops redelivering.
                    tracing::error!(
                        error,
                        "the reply is out but the event could not be marked done; a copy \
                         arriving after the lease takes over and looks in Slack first"
                    );
                }
                Ok(match worked {
                    Worked::Posted => Outcome::Answered { attempt },
                    Worked::FoundEarlierReply => Outcome::Recovered,
                    Worked::NothingToSay => Outcome::NoReply,
                })
            }
            Err(error) => {
                let ambiguous = match &error {
                    ProcessError::Slack(slack) => slack.may_have_posted(),
                    ProcessError::Deadline => true,
                    _ => false,
                };
                if ambiguous {
                    tracing::warn!(
                        "it is unknown whether the reply was posted; releasing: Slack's next \
                         delivery takes over and looks in Slack before posting"
                    );
                }
                let release = self.ledger.release(&callback.event_id, &owner, now_ms());
                if let Err(error) = before_lease_ends(times.lease_deadline, release).await {
                    tracing::warn!(
                        error,
                        "could not release the claim: the next copy waits for the lease to end"
                    );
                }
                Err(error)
            }
        }
    }
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
    /// Written to the ledger: the claim is live until then.
    lease_until_ms: u64,
    /// Monotonic instants: bot, Slack and claim must finish by `work_deadline`; completing or
    /// releasing by `lease_deadline`.
    work_deadline: Instant,
    lease_deadline: Instant,
}

impl Times {
    /// `None` when the invocation deadline has already passed.
    fn new(delivery: &Delivery<'_>, configured_lease: Duration) -> Option<Self> {
        let lease = match delivery.invocation_deadline {
            Some(deadline) => deadline.duration_since(delivery.now).ok()?,
            None => configured_lease,
        };
        if lease.is_zero() {
            return None;
        }
        let margin = (lease / 4).min(MAX_LEASE_MARGIN);
        let now_ms = unix_ms(delivery.now);
        let lease_until_ms = match delivery.invocation_deadline {
            Some(deadline) => unix_ms(deadline),
            None => now_ms + lease.as_millis() as u64,
        };
        Some(Self {
            now_ms,
            lease_until_ms,
            work_deadline: delivery.started + (lease - margin),
            lease_deadline: delivery.started + lease,
        })
    }
}

/// A completion or release, which must finish before the lease ends.
async fn before_lease_ends(
    lease_deadline: Instant,
    call: impl std::future::Future<Output = Result<(), LedgerError>>,
) -> Result<(), String> {
    match tokio::time::timeout_at(lease_deadline, call).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(error_chain(&e)),
        Err(_) => Err("no answer before the lease ended".into()),
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
    fn the_lease_is_the_invocation_deadline_on_lambda() {
        let headers = HeaderMap::new();
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let started = Instant::now();
        let delivery = Delivery {
            headers: &headers,
            body: b"",
            now,
            started,
            invocation_deadline: Some(now + Duration::from_secs(10)),
        };
        let t = Times::new(&delivery, Duration::from_secs(30)).unwrap();
        assert_eq!(t.lease_until_ms, 1_700_000_010_000);
        assert_eq!(t.work_deadline, started + Duration::from_secs(9));
        assert_eq!(t.lease_deadline, started + Duration::from_secs(10));

        let local = Delivery {
            invocation_deadline: None,
            ..delivery
        };
        let t = Times::new(&local, Duration::from_secs(2)).unwrap();
        assert_eq!(t.lease_until_ms, 1_700_000_002_000);
        assert_eq!(t.work_deadline, started + Duration::from_millis(1500));

        let late = Delivery {
            invocation_deadline: Some(now - Duration::from_secs(1)),
            ..delivery
        };
        assert!(Times::new(&late, Duration::from_secs(30)).is_none());
    }
}
