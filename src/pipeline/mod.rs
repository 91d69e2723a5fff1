//! One delivery, as named steps every kind of request shares:
//!
//! `verify` → parse ([`Incoming`]: an event, a command, an interaction) → route (the listeners
//! that take it) → `claim` (its ledger keys) → acknowledge → `work` (the listeners, their Slack
//! writes each a journaled step) → `finish` (done, released, or failed).
//!
//! - `verify`: the signature on the raw bytes, then the parse;
//! - `events`: an event's route (skip own, the message's listeners and the event's);
//! - `interactions`: a command's or an interaction's route, and its acknowledgement;
//! - `claim`: keys, times and the claim; `work`: the listeners under a claim;
//!   `finish`: the claim's end; `enqueue`: deferred mode's hand-off to the work queue.
//!
//! The ledger is touched only after the signature verifies and the body parses, so a forged
//! or malformed request can never claim, poison or block a real one. Every Slack write is
//! announced in the ledger (its intent, conditioned on the claim's owner) before it is made, so
//! a later claim looks in Slack only where an earlier one may have written, and never writes
//! blind while a delivery of the request remains.

mod claim;
mod enqueue;
mod events;
mod finish;
mod interactions;
mod verify;
mod work;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use tokio::time::Instant;
use tracing::Instrument;

use crate::app::App;
use crate::app::BotError;
use crate::ledger::{Ledger, LedgerError};
use crate::metrics;
use crate::queue::{QueueError, WorkQueue};
use crate::secrets::SlackSecrets;
use crate::slack::envelope::SkipReason;
use crate::slack::envelope::{Envelope, EventCallback};
use crate::slack::interaction::{Incoming, Interaction};
use crate::slack::signature::SignatureError;
use crate::slack::{SlackClient, SlackError};
use crate::workspaces::oauth::OAuthFlow;
use crate::workspaces::{Authorized, StoreError, Workspaces};

/// Slack's header numbering a retry (absent on the original delivery; unsigned).
pub const RETRY_NUM_HEADER: &str = "x-slack-retry-num";
/// Slack's header saying why it retried (`http_timeout`, `http_error`…).
pub const RETRY_REASON_HEADER: &str = "x-slack-retry-reason";
/// Slack retries an event 3 times: the delivery with `X-Slack-Retry-Num: 3` is its last.
pub const SLACK_LAST_RETRY: u32 = 3;
/// Slack's third retry comes about six minutes after the event (at once, after a minute, after
/// five): a delivery signed less than this long after the event's `event_time` is not it,
/// whatever its (unsigned) `X-Slack-Retry-Num` says.
pub const LAST_RETRY_AFTER: Duration = Duration::from_secs(240);

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
pub(crate) struct Delivery<'a> {
    /// The request's headers (the signature and its timestamp among them).
    pub headers: &'a HeaderMap,
    /// The raw body, as signed.
    pub body: &'a [u8],
    /// The wall-clock time the request arrived: signatures and leases are judged against it.
    pub now: SystemTime,
    /// The monotonic time it arrived: deadlines are measured from it.
    pub started: Instant,
    /// On Lambda, the invocation's deadline: it is the lease. Elsewhere the configured lease.
    pub invocation_deadline: Option<SystemTime>,
    /// On Lambda, the invocation's request id (for the logs and the metrics line).
    pub request_id: Option<&'a str>,
    /// How it reached this process, which says how it is authenticated.
    pub transport: Transport,
}

/// How a delivery reached this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// An HTTP request from Slack: its signature is checked on the exact bytes.
    Http,
    /// An envelope read from a Socket Mode connection this process opened with the app-level
    /// token: the connection authenticates it (Slack signs no envelope).
    SocketMode,
}

/// A message of the work queue, as the worker received it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QueuedMessage<'a> {
    /// SQS's message id (for the logs and the metrics line).
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
pub(crate) struct EventDelivery<'a> {
    /// `X-Slack-Retry-Num`: absent on the original.
    pub retry_num: Option<u32>,
    /// `X-Slack-Retry-Reason`: absent on the original.
    pub retry_reason: Option<&'a str>,
    /// No delivery of this request follows this one: an interaction answered synchronously
    /// (Slack sends a command or an interaction once), a queued request's last receive (SQS
    /// dead-letters it after), or Slack's last retry of an event (`X-Slack-Retry-Num` 3, signed
    /// at least `LAST_RETRY_AFTER` after its `event_time`). It decides how a failure here ends,
    /// never whether a write is made without a look-up: a failure a retry could fix ends the
    /// request `failed` with its reason, retryable, rather than released for a delivery that
    /// never comes; and a write an earlier claim may have made, which Slack refuses for good to
    /// show, is not made again and ends the request `failed` (`unconfirmed_write`) rather than
    /// held back for a later delivery.
    pub last_chance: bool,
    /// A delivery from the work queue (a worker's): with `last_chance` false, the queue hands
    /// the request out again should this delivery's process end with its claim.
    pub queued: bool,
    /// The wall-clock time the delivery arrived: leases are judged against it.
    pub now: SystemTime,
    /// The monotonic time it arrived: deadlines are measured from it.
    pub started: Instant,
    /// On Lambda, the invocation's deadline: it is the lease. Elsewhere the configured lease.
    pub invocation_deadline: Option<SystemTime>,
}

/// How a delivery ended, when nothing failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A url_verification: answer with its challenge.
    Challenge(String),
    /// This delivery claimed the event, and its reply was posted (or, without a token, logged).
    Answered {
        /// Which claim of the event posted it: 1 for the first, above 1 when an earlier claim
        /// was released or its lease expired.
        attempt: u32,
    },
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
    Failed {
        /// The code the ledger records: Slack's own for a refused write.
        code: String,
    },
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
    /// A command or an interaction: answered with the listener's acknowledgement (`body`;
    /// `None`: an empty 200), after `outcome`.
    Acked {
        /// The acknowledgement's body; `None`: an empty 200.
        body: Option<String>,
        /// What became of the request.
        outcome: Box<Outcome>,
    },
}

impl ProcessError {
    /// Whether no retry can change this: the event then ends `failed` (200, never redelivered).
    pub fn is_final(&self) -> bool {
        match self {
            ProcessError::Slack(e) => e.is_permanent(),
            ProcessError::Nondeterministic(_)
            | ProcessError::JournalFull(_)
            | ProcessError::AckTooLate => true,
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
                    SlackError::Api { code } | SlackError::ExecutionTokenRefused { code } => {
                        code.clone()
                    }
                    SlackError::RateLimited { .. } => "ratelimited".into(),
                    SlackError::Status { status } => format!("http_{}", status.as_u16()),
                    SlackError::Transport(_) => "connection_failed".into(),
                    SlackError::Timeout => "timeout".into(),
                    SlackError::NotSent => "deadline_passed".into(),
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
            ProcessError::Installations(_) => "installations_unavailable".into(),
            ProcessError::AckTooLate => "ack_too_late".into(),
        }
    }
}

impl Outcome {
    /// What became of the request: a command's or interaction's outcome under its
    /// acknowledgement, or the outcome itself.
    pub fn inner(&self) -> &Outcome {
        match self {
            Outcome::Acked { outcome, .. } => outcome.inner(),
            outcome => outcome,
        }
    }

    /// The outcome's name (`answered`, `duplicate`…), for the logs and the outcome header; an
    /// acknowledged request's is its inner outcome's.
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
            Outcome::Acked { outcome, .. } => outcome.as_str(),
        }
    }
}

/// Why a delivery failed; [`crate::http::status_of`] gives each its HTTP status.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProcessError {
    /// The request's signature did not verify: the ledger was not touched.
    #[error("the request signature is invalid: {0}")]
    Signature(#[from] SignatureError),
    /// The verified body is not an envelope, a command or an interaction: the ledger was not
    /// touched.
    #[error("the body is not a valid Events API envelope, command or interaction: {0}")]
    Malformed(#[source] serde_json::Error),
    /// A ledger call failed.
    #[error("the ledger failed")]
    Ledger(#[source] LedgerError),
    /// A Slack call failed: the claim is released, or, when no retry can fix it
    /// ([`ProcessError::is_final`]), the event ends `failed`.
    #[error("posting the reply to Slack failed (claim released)")]
    Slack(#[source] SlackError),
    /// An earlier claim may have made this write, and Slack could not be asked whether it did:
    /// the claim is released.
    #[error("an earlier claim may have posted and Slack could not be asked (claim released)")]
    LookupUnavailable(#[source] SlackError),
    /// A listener returned an error: the claim is released.
    #[error("a listener failed (claim released)")]
    Bot(#[source] BotError),
    /// Run again, a listener made other writes than when it first ran: the event ends `failed`.
    #[error("a listener made other writes than when it first ran")]
    Nondeterministic(#[source] BotError),
    /// The listener's writes would outgrow the event's journal: the event ends `failed`.
    #[error("the listener's writes would not fit in the event's journal")]
    JournalFull(#[source] BotError),
    /// The lease or the invocation's deadline came before the work was done.
    #[error("the processing deadline passed before the reply was posted")]
    Deadline,
    /// Deferred mode: the event could not be put on the work queue.
    #[error("the event could not be put on the work queue")]
    Queue(#[source] QueueError),
    /// Multi-workspace mode: the installation store failed.
    #[error("the installation store failed")]
    Installations(#[source] StoreError),
    /// The listener chose a view's `response_action` after the ingress had acknowledged
    /// empty: it cannot reach Slack.
    #[error(
        "the listener's acknowledgement came after Slack was acknowledged, and cannot reach Slack"
    )]
    AckTooLate,
}

/// Everything a delivery needs, built once per process and shared by every request.
pub(crate) struct Processor {
    /// The signing secrets (a worker, which serves no HTTP request, has none).
    secrets: Arc<SlackSecrets>,
    ledger: Arc<dyn Ledger>,
    slack: SlackClient,
    app: Arc<App>,
    /// Deferred mode: verified events go to this queue instead of being run here.
    queue: Option<Arc<dyn WorkQueue>>,
    /// Multi-workspace mode: each request's installation, and the install flow.
    workspaces: Option<Arc<Workspaces>>,
    oauth: Option<Arc<OAuthFlow>>,
    ttl: Duration,
    lease: Duration,
    version: String,
    metrics: crate::metrics::MetricsOut,
}

/// The protocol's settings, from the configuration.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// How long an event is remembered.
    pub ttl: Duration,
    /// The lease when the runtime gives no deadline.
    pub lease: Duration,
    /// The version answering, written into each post's metadata.
    pub version: String,
    /// Where each invocation's metrics line goes.
    pub metrics: crate::metrics::MetricsOut,
}

/// What a worker takes from the queue: an event, or a command or interaction whose listener
/// acknowledged in the ingress.
#[derive(Clone, Debug)]
pub(crate) enum Queued {
    /// An event, to be claimed and answered.
    Event(Arc<EventCallback>),
    /// With the steps its listener made in the ingress before the acknowledgement, and
    /// whether the ingress acknowledged empty on the listener's behalf.
    Interaction(Arc<Interaction>, Vec<crate::journal::record::Settled>, bool),
}

impl Processor {
    /// A processor on `ledger`, `slack` and `app`: one workspace, answering events itself,
    /// with no signing secrets until [`Processor::with_secrets`].
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
            workspaces: None,
            oauth: None,
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

    /// Multi-workspace mode: each request is answered with its workspace's installation, and
    /// the install flow is served.
    pub fn with_workspaces(mut self, workspaces: Arc<Workspaces>) -> Self {
        self.set_workspaces(workspaces);
        self
    }

    /// As [`Self::with_workspaces`], in place.
    pub fn set_workspaces(&mut self, workspaces: Arc<Workspaces>) {
        workspaces.set_metrics(self.metrics.clone(), &self.version);
        self.oauth = Some(Arc::new(OAuthFlow::new(workspaces.clone())));
        self.workspaces = Some(workspaces);
    }

    /// The lease of a delivery whose runtime gives no deadline (a local worker's, each
    /// message's visibility timeout).
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The process's client (one bot token's; in multi-workspace mode, without a token: each
    /// request gets its installation's).
    pub fn base_slack(&self) -> &SlackClient {
        &self.slack
    }

    /// The ledger every request is claimed in.
    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.ledger
    }

    /// The Slack secrets.
    pub fn secrets(&self) -> &Arc<SlackSecrets> {
        &self.secrets
    }

    /// The installations (multi-workspace mode).
    pub fn workspaces(&self) -> Option<&Arc<Workspaces>> {
        self.workspaces.as_ref()
    }

    /// The install flow (multi-workspace mode).
    pub fn oauth(&self) -> Option<&OAuthFlow> {
        self.oauth.as_deref()
    }

    /// The client a request of `(team, enterprise, is_enterprise_install)` is answered with:
    /// its installation's in multi-workspace mode (`Err(outcome)`: none serves it, or it is
    /// broken: acknowledged, never claimed), else the process's.
    pub(crate) async fn client_for(
        &self,
        (team, enterprise, org_wide): (Option<&str>, Option<&str>, bool),
        who: &crate::workspaces::Requester<'_>,
    ) -> Result<Result<SlackClient, Outcome>, ProcessError> {
        let Some(workspaces) = &self.workspaces else {
            return Ok(Ok(self.slack.clone()));
        };
        let authorized = workspaces
            .authorize(team, enterprise, org_wide, who)
            .await
            .map_err(ProcessError::Installations)?;
        Ok(match authorized {
            Authorized::Installed { client, .. } => Ok(client),
            Authorized::NotInstalled => {
                metrics::count("NotInstalled");
                tracing::warn!(
                    team = team.unwrap_or(""),
                    enterprise = enterprise.unwrap_or(""),
                    "no installation serves this workspace: acknowledged, not answered \
                     (install the app there through /slack/install)"
                );
                Err(Outcome::Skipped(SkipReason::NotInstalled))
            }
            Authorized::Broken { .. } => {
                metrics::count("InstallationBroken");
                Err(Outcome::Skipped(SkipReason::InstallationBroken))
            }
        })
    }

    /// `app_uninstalled` and `tokens_revoked` (multi-workspace mode): the installation, or its
    /// revoked tokens, removed from the store, each once (a write conditioned on the
    /// installation being older than the event), in whichever order they come.
    async fn installation_changed(&self, callback: &EventCallback) -> Result<(), ProcessError> {
        let Some(workspaces) = &self.workspaces else {
            return Ok(());
        };
        let kind = callback.event.kind.as_str();
        if !matches!(kind, "app_uninstalled" | "tokens_revoked") {
            return Ok(());
        }
        let (team, enterprise, org_wide) = callback.installation();
        // `event_time` is whole seconds: the event may have happened up to the end of it (an
        // install earlier in that second is removed; one after it, a reinstall, is not).
        let event_ms = callback
            .event_time
            .filter(|t| *t > 0)
            .map(|t| t as u64 * 1000 + 999)
            .unwrap_or_else(crate::clock::now_ms);
        let ids = |field: &str| -> Vec<String> {
            callback.event.raw["tokens"][field]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let (users, bots) = (ids("oauth"), ids("bot"));
        // The one installation the event names (no other: an org-wide install of the same
        // enterprise is not this workspace's to remove).
        let Some(key) = crate::workspaces::InstallationKey::candidates(team, enterprise, org_wide)
            .into_iter()
            .next()
        else {
            return Ok(());
        };
        let who = crate::workspaces::Requester {
            app_id: callback.api_app_id.as_deref(),
            bot_user: callback.bot_user_id(),
        };
        let changed = match kind {
            "app_uninstalled" => workspaces.uninstalled(&key, event_ms, &who).await,
            _ => {
                workspaces
                    .revoked(&key, &users, &bots, event_ms, &who)
                    .await
            }
        }
        .map_err(ProcessError::Installations)?;
        if changed {
            metrics::count("Uninstalls");
            tracing::info!(
                installation = key.id(),
                event = kind,
                "installation changed"
            );
        }
        Ok(())
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
            kind = tracing::field::Empty,
            outcome = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
        );
        let result = self
            .handle_in_span(delivery, retry_num)
            .instrument(span.clone())
            .await;
        // A token refresh this request began ends before it answers (on Lambda the answer
        // freezes the environment), within Slack's 3 s.
        if let Some(workspaces) = &self.workspaces {
            let bound = delivery.started + Duration::from_millis(2500);
            let bound = match delivery.invocation_deadline {
                Some(deadline) => bound.min(
                    Instant::now()
                        + deadline
                            .duration_since(crate::clock::now())
                            .unwrap_or_default()
                            .saturating_sub(ANSWER_MARGIN),
                ),
                None => bound,
            };
            workspaces.settle(bound).await;
        }
        log_result(&span, delivery.started, &result, "delivery");
        metrics::count("Deliveries");
        record_result(&result);
        metrics::time_ms("TimeToAck", delivery.started.elapsed().as_secs_f64() * 1e3);
        result
    }

    /// Prints `metrics`' line (or keeps it: [`Settings::metrics`]), unless `METRICS=off`.
    pub fn emit_metrics(&self, metrics: &crate::metrics::Metrics, properties: &[(&str, &str)]) {
        metrics.emit_to(&self.metrics, &self.version, properties);
    }

    /// Runs one event taken from the work queue, inside a span carrying the event id, team,
    /// Slack's retry number, the message and its receive count, and the outcome.
    pub async fn run_queued(
        &self,
        queued: &Queued,
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
            kind = tracing::field::Empty,
            outcome = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
        );
        let run = async {
            match queued {
                Queued::Event(callback) => self.run_event(callback, delivery).await,
                Queued::Interaction(interaction, done, implicit) => {
                    let mode = match implicit {
                        true => crate::app::AckMode::GivenEmpty,
                        false => crate::app::AckMode::Given,
                    };
                    self.run_interaction(interaction, delivery, mode, None, done.clone())
                        .await
                }
            }
        };
        let result = run.instrument(span.clone()).await;
        if let Some(workspaces) = &self.workspaces {
            let left = delivery
                .invocation_deadline
                .and_then(|d| d.duration_since(crate::clock::now()).ok())
                .unwrap_or(Duration::from_secs(2))
                .saturating_sub(Duration::from_secs(1));
            workspaces
                .settle(Instant::now() + left.min(crate::workspaces::tokens::REFRESH_BUDGET))
                .await;
        }
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
            let age = crate::clock::now_ms().saturating_sub(message.received_at_ms);
            metrics::time_ms("TimeToAnswer", age as f64);
        }
        result
    }

    async fn handle_in_span(
        &self,
        delivery: Delivery<'_>,
        retry_num: Option<u32>,
    ) -> Result<Outcome, ProcessError> {
        let envelope = match self.verify_and_parse(&delivery).await? {
            Incoming::Envelope(envelope) => envelope,
            Incoming::UnknownInteraction(why) => {
                tracing::info!(reason = why, "acknowledged and ignored");
                return Ok(Outcome::Acked {
                    body: None,
                    outcome: Box::new(Outcome::Ignored),
                });
            }
            Incoming::Interaction(interaction) => {
                let interaction: Arc<Interaction> = Arc::from(interaction);
                // Slack sends these once and never retries them: the ingress answers with the
                // listener's acknowledgement, and hands what follows it to the queue in
                // deferred mode.
                let mode = match self.queue {
                    Some(_) => crate::app::AckMode::StopAfter,
                    None => crate::app::AckMode::Inline,
                };
                let event = EventDelivery {
                    retry_num: None,
                    retry_reason: None,
                    // Answered here (synchronous mode), its one delivery is its last: a failure
                    // ends it failed with its reason (retryable), not released for a delivery
                    // that never comes.
                    last_chance: self.queue.is_none(),
                    queued: false,
                    now: delivery.now,
                    started: delivery.started,
                    invocation_deadline: delivery.invocation_deadline,
                };
                return self
                    .run_interaction(&interaction, &event, mode, Some(&delivery), Vec::new())
                    .await;
            }
        };
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
                let callback: Arc<EventCallback> = Arc::from(callback);
                self.installation_changed(&callback).await?;
                let retry_reason = header_str(delivery.headers, RETRY_REASON_HEADER)
                    .filter(|r| r.len() <= 64 && r.bytes().all(|b| b.is_ascii_graphic()));
                if let Some(queue) = &self.queue {
                    if let Err(outcome) = self.screen(&callback) {
                        return Ok(outcome);
                    }
                    return self
                        .enqueue(&**queue, &delivery, retry_num, retry_reason)
                        .await;
                }
                // Slack's last retry: no delivery follows it. `X-Slack-Retry-Num` is not signed;
                // the signed timestamp must also be as late as Slack's last retry comes, so a
                // captured request replayed with a forged header is not taken for it. (No write
                // is made without a look-up on any delivery: the last chance only decides that a
                // failure ends the event failed rather than released.)
                let signed_at =
                    header_str(delivery.headers, crate::slack::signature::TIMESTAMP_HEADER)
                        .and_then(|t| t.parse::<u64>().ok());
                let late_enough = match (signed_at, callback.event_time) {
                    (Some(signed), Some(at)) => {
                        signed >= (at as u64).saturating_add(LAST_RETRY_AFTER.as_secs())
                    }
                    _ => false,
                };
                let event = EventDelivery {
                    retry_num,
                    retry_reason,
                    last_chance: retry_num.is_some_and(|n| n >= SLACK_LAST_RETRY) && late_enough,
                    queued: false,
                    now: delivery.now,
                    started: delivery.started,
                    invocation_deadline: delivery.invocation_deadline,
                };
                self.run_event(&callback, &event).await
            }
        }
    }
}

/// Counts a delivery's or queued event's result: its outcome, or its failure's kind.
fn record_result(result: &Result<Outcome, ProcessError>) {
    let name = match result {
        Ok(Outcome::Acked { outcome, .. }) => return record_result(&Ok((**outcome).clone())),
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
            Outcome::Acked { .. } => unreachable!("counted by its outcome"),
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
            ProcessError::Installations(_) => "InstallationStoreErrors",
            ProcessError::AckTooLate => "AckTooLate",
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

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `t` in milliseconds since the Unix epoch (0 before it).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub use crate::errors::error_chain;
