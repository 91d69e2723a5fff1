//! Routes, the body limit and read timeout, and the one place failures become HTTP statuses.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderValue, StatusCode};
use http_body_util::{BodyExt, Limited};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::ledger::LedgerError;
use crate::metrics::Metrics;
use crate::pipeline::{Delivery, Outcome, ProcessError, Processor, Transport};
use crate::queue::QueueError;

/// Slack's event payloads are small; a body above 1 MiB is refused before more is read.
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// A body still arriving after this long is refused (408): Slack itself gives up after 3 s.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What the routes share: the processor, and, for a server whose clients can go away (local
/// mode), the deliveries still running, each on its own task (waited for at shutdown).
#[derive(Clone)]
pub struct AppState {
    /// The pipeline each request goes through.
    pub processor: Arc<Processor>,
    /// `Some`: each delivery runs detached from its connection. `None` (Lambda, where the
    /// invocation is the request): inline.
    pub in_flight: Option<TaskTracker>,
    /// Whether the process takes requests (`GET /readyz`): over Socket Mode, whether a
    /// connection is open. `None`: requests come over HTTP, and the process is ready once it
    /// listens.
    pub readiness: Option<Readiness>,
}
/// Asked by `GET /readyz`: whether the process takes requests now.
pub type Readiness = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// What became of a command or an interaction (its body is the acknowledgement).
pub const OUTCOME_HEADER: &str = "x-slack-once-outcome";
/// Tells Slack not to redeliver an event: only on answers no retry could change.
const NO_RETRY: (&str, &str) = ("x-slack-no-retry", "1");

/// The router both modes serve: `POST /slack/events` (also `POST /`, for a Request URL that is
/// the bare Function URL, and `POST /{stage}/slack/events`, as lambda_http presents REST API
/// paths with their stage), `GET /healthz` (the process runs) and `GET /readyz` (it takes
/// requests: over Socket Mode, once a connection is open and until it drains).
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/slack/events", post(slack_events))
        .route("/", post(slack_events))
        .route("/{stage}/slack/events", post(slack_events))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        // Multi-workspace mode's install flow (404 without SLACK_CLIENT_ID).
        .route("/slack/install", get(install))
        .route("/{stage}/slack/install", get(install))
        .route("/slack/oauth_redirect", get(oauth_redirect))
        .route("/{stage}/slack/oauth_redirect", get(oauth_redirect))
        .with_state(state)
}

async fn ready(State(state): State<AppState>) -> Response {
    match state.readiness.as_ref().is_none_or(|ready| ready()) {
        true => "ready".into_response(),
        false => json(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "no Socket Mode connection is open (starting, or draining)",
        ),
    }
}

async fn install(State(state): State<AppState>) -> Response {
    let metrics = Metrics::new();
    let response = match state.processor.oauth() {
        Some(flow) => metrics.scope(flow.install()).await,
        None => not_distributed(),
    };
    state.processor.emit_metrics(&metrics, &[]);
    response
}

async fn oauth_redirect(State(state): State<AppState>, request: Request) -> Response {
    let metrics = Metrics::new();
    let response = match state.processor.oauth() {
        Some(flow) => {
            metrics
                .scope(flow.redirect(request.uri().query(), request.headers()))
                .await
        }
        None => not_distributed(),
    };
    state.processor.emit_metrics(&metrics, &[]);
    response
}

fn not_distributed() -> Response {
    json(
        StatusCode::NOT_FOUND,
        "not_distributed",
        "this app is installed with one bot token (SLACK_BOT_TOKEN): set SLACK_CLIENT_ID, \
         SLACK_CLIENT_SECRET and SLACK_SCOPES to install it in many workspaces",
    )
}

async fn slack_events(State(state): State<AppState>, request: Request) -> Response {
    let now = crate::clock::now();
    let started = Instant::now();
    let (parts, body) = request.into_parts();

    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        rejected(&state, "RejectedTooLarge");
        return too_large();
    }
    let read = tokio::time::timeout(
        BODY_READ_TIMEOUT,
        Limited::new(body, MAX_BODY_BYTES).collect(),
    );
    let body = match read.await {
        Err(_) => {
            rejected(&state, "RejectedBodyTimeout");
            tracing::warn!(timeout = ?BODY_READ_TIMEOUT, "the request body was not sent in time");
            return json(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                "the request body was not sent in time",
            );
        }
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            rejected(&state, "RejectedTooLarge");
            return too_large();
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "the request body could not be read");
            return json(
                StatusCode::BAD_REQUEST,
                "unreadable_body",
                "the request body could not be read",
            );
        }
    };

    // On Lambda, lambda_http puts the invocation's context (and its deadline) in the extensions.
    let context = parts.extensions.get::<lambda_http::Context>();
    let invocation_deadline = context.and_then(|context| invocation_deadline(context.deadline));
    let request_id = context.map(|context| context.request_id.clone());

    let processor = state.processor.clone();
    let delivery = async move {
        // One metrics line per delivery: on Lambda, per invocation.
        let metrics = Metrics::new();
        let result = metrics
            .scope(processor.handle(Delivery {
                headers: &parts.headers,
                body: &body,
                now,
                started,
                invocation_deadline,
                request_id: request_id.as_deref(),
                transport: Transport::Http,
            }))
            .await;
        let response = respond(result);
        if response.status().is_server_error() {
            metrics.count("Responses5xx");
        }
        let properties: Vec<(&str, &str)> = request_id
            .as_deref()
            .map(|id| ("RequestId", id))
            .into_iter()
            .collect();
        processor.emit_metrics(&metrics, &properties);
        response
    };
    let Some(in_flight) = &state.in_flight else {
        return delivery.await;
    };
    // The delivery runs to its end on its own task: should the client go away (Slack gives
    // up after 3 s), the claim is still completed or released rather than left to block the
    // event until its lease ends.
    match in_flight.spawn(delivery).await {
        Ok(response) => response,
        Err(e) => {
            tracing::error!(error = %e, "the delivery's task failed");
            json(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "internal error",
            )
        }
    }
}

/// A request refused before it reached the processor: its own metrics line.
fn rejected(state: &AppState, reason: &'static str) {
    let metrics = Metrics::new();
    metrics.count("Deliveries");
    metrics.count(reason);
    state.processor.emit_metrics(&metrics, &[]);
}

/// Lambda's `Lambda-Runtime-Deadline-Ms` is epoch milliseconds. Some emulators send a duration
/// instead (`cargo lambda watch` sends 600000): a value before 2001 is not an epoch time, and the
/// configured lease (`DEDUP_LEASE_SECONDS`) is used instead.
pub fn invocation_deadline(deadline_ms: u64) -> Option<SystemTime> {
    const EPOCH_MS_2001: u64 = 1_000_000_000_000;
    if deadline_ms < EPOCH_MS_2001 {
        tracing::debug!(
            deadline_ms,
            "not an epoch deadline: using the configured lease"
        );
        return None;
    }
    Some(SystemTime::UNIX_EPOCH + Duration::from_millis(deadline_ms))
}

/// Whether no retry of the request can change `error` (a body that is not a request, an event
/// too large to queue): Slack is told not to send it again (over HTTP `x-slack-no-retry`, over
/// Socket Mode an acknowledgement).
pub(crate) fn no_retry_can_fix(error: &ProcessError) -> bool {
    matches!(
        error,
        ProcessError::Malformed(_) | ProcessError::Queue(QueueError::TooLarge { .. })
    )
}

/// The one mapping of outcomes and failures to statuses (see the README's status table).
pub fn respond(result: Result<Outcome, ProcessError>) -> Response {
    match result {
        Ok(Outcome::Challenge(challenge)) => (
            StatusCode::OK,
            [(CONTENT_TYPE, "application/json")],
            serde_json::json!({ "challenge": challenge }).to_string(),
        )
            .into_response(),
        // A command or an interaction: its acknowledgement is the body (none: an empty 200),
        // what became of it a header, for operators and tests.
        Ok(Outcome::Acked { body, outcome }) => {
            let mut response = match body {
                Some(body) => {
                    (StatusCode::OK, [(CONTENT_TYPE, "application/json")], body).into_response()
                }
                None => StatusCode::OK.into_response(),
            };
            response
                .headers_mut()
                .insert(OUTCOME_HEADER, HeaderValue::from_static(outcome.as_str()));
            response
        }
        // No reply, and not 2xx: if the claimant dies, Slack's next retry takes the event over.
        Ok(Outcome::InProgress) => json(
            StatusCode::CONFLICT,
            "in_progress",
            "another delivery of this event holds a live claim",
        ),
        Ok(outcome) => (
            StatusCode::OK,
            [(CONTENT_TYPE, "application/json")],
            serde_json::json!({ "ok": true, "outcome": outcome.as_str() }).to_string(),
        )
            .into_response(),
        Err(error) => {
            let status = status_of(&error);
            let mut response = match &error {
                ProcessError::Signature(e) => json(status, "invalid_signature", &e.to_string()),
                ProcessError::Malformed(_) => json(status, "invalid_payload", &error.to_string()),
                ProcessError::Ledger(LedgerError::Unavailable(_)) => json(
                    status,
                    "ledger_unavailable",
                    "the ledger is unavailable; retry later",
                ),
                ProcessError::Slack(_) => json(
                    status,
                    "slack_failed",
                    "posting to Slack failed; retry later",
                ),
                ProcessError::LookupUnavailable(_) => json(
                    status,
                    "slack_lookup_unavailable",
                    "an earlier attempt may have answered and Slack could not be asked; retry later",
                ),
                ProcessError::Deadline => json(
                    status,
                    "deadline_exceeded",
                    "processing ran out of time; retry later",
                ),
                ProcessError::Queue(QueueError::TooLarge { .. }) => json(
                    status,
                    "payload_too_large",
                    "the event is larger than a work queue message holds (1 MiB)",
                ),
                ProcessError::Queue(QueueError::Unavailable(_)) => json(
                    status,
                    "queue_unavailable",
                    "the work queue did not take the event; retry later",
                ),
                ProcessError::Installations(_) => json(
                    status,
                    "installations_unavailable",
                    "the installation store is unavailable; retry later",
                ),
                ProcessError::Bot(_)
                | ProcessError::Nondeterministic(_)
                | ProcessError::JournalFull(_)
                | ProcessError::AckTooLate
                | ProcessError::Ledger(LedgerError::NotOwner { .. })
                | ProcessError::Ledger(LedgerError::ItemTooLarge(_)) => {
                    json(status, "internal_error", "internal error")
                }
            };
            if no_retry_can_fix(&error) {
                response
                    .headers_mut()
                    .insert(NO_RETRY.0, HeaderValue::from_static(NO_RETRY.1));
            }
            response
        }
    }
}

/// The HTTP status a failed request is answered with: 401 for a bad signature, 400 for a
/// malformed body, 503 while the ledger, the queue, the installation store or a look-up is
/// unavailable, 413 for an event too large for the queue, 502 for Slack's error, 504 past the
/// deadline, 500 for the rest.
pub fn status_of(error: &ProcessError) -> StatusCode {
    match error {
        ProcessError::Signature(_) => StatusCode::UNAUTHORIZED,
        ProcessError::Malformed(_) => StatusCode::BAD_REQUEST,
        ProcessError::Ledger(LedgerError::Unavailable(_))
        | ProcessError::LookupUnavailable(_)
        | ProcessError::Queue(QueueError::Unavailable(_))
        | ProcessError::Installations(_) => StatusCode::SERVICE_UNAVAILABLE,
        ProcessError::Queue(QueueError::TooLarge { .. }) => StatusCode::PAYLOAD_TOO_LARGE,
        ProcessError::Slack(_) => StatusCode::BAD_GATEWAY,
        ProcessError::Deadline => StatusCode::GATEWAY_TIMEOUT,
        ProcessError::Bot(_)
        | ProcessError::Nondeterministic(_)
        | ProcessError::JournalFull(_)
        | ProcessError::AckTooLate
        | ProcessError::Ledger(LedgerError::NotOwner { .. })
        | ProcessError::Ledger(LedgerError::ItemTooLarge(_)) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn too_large() -> Response {
    tracing::warn!(limit = MAX_BODY_BYTES, "request body too large: refused");
    let mut response = json(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        "the body is larger than 1 MiB",
    );
    response
        .headers_mut()
        .insert(NO_RETRY.0, HeaderValue::from_static(NO_RETRY.1));
    response
}

fn json(status: StatusCode, error: &str, message: &str) -> Response {
    let body = serde_json::json!({ "ok": false, "error": error, "message": message }).to_string();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slack::SlackError;
    use crate::slack::signature::SignatureError;

    #[test]
    fn every_failure_has_its_status() {
        let cases: Vec<(ProcessError, u16)> = vec![
            (ProcessError::Signature(SignatureError::Mismatch), 401),
            (
                ProcessError::Malformed(serde_json::from_str::<u8>("x").unwrap_err()),
                400,
            ),
            (
                ProcessError::Ledger(LedgerError::Unavailable("down".into())),
                503,
            ),
            (ProcessError::Slack(SlackError::Timeout), 502),
            (ProcessError::Deadline, 504),
            (ProcessError::Bot("boom".into()), 500),
        ];
        for (error, status) in cases {
            assert_eq!(status_of(&error).as_u16(), status, "{error:?}");
            assert_eq!(respond(Err(error)).status().as_u16(), status);
        }
    }

    #[tokio::test]
    async fn a_500_says_nothing_of_its_cause() {
        let response = respond(Err(ProcessError::Bot("secret detail".into())));
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8(body.to_vec()).unwrap();
        assert!(!body.contains("secret detail"), "{body}");
        assert!(body.contains("internal_error"));
    }

    #[test]
    fn only_an_epoch_deadline_is_taken_as_the_lease() {
        assert_eq!(invocation_deadline(0), None);
        assert_eq!(
            invocation_deadline(600_000),
            None,
            "cargo lambda watch sends a duration"
        );
        assert_eq!(
            invocation_deadline(1_795_966_663_386),
            Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_966_663_386))
        );
    }

    #[test]
    fn in_progress_is_not_2xx_so_slack_retries() {
        let response = respond(Ok(Outcome::InProgress));
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert!(response.headers().get(NO_RETRY.0).is_none());
    }

    #[test]
    fn permanent_refusals_tell_slack_not_to_retry() {
        let response = respond(Err(ProcessError::Malformed(
            serde_json::from_str::<u8>("x").unwrap_err(),
        )));
        assert_eq!(response.headers().get(NO_RETRY.0).unwrap(), "1");
        assert_eq!(too_large().headers().get(NO_RETRY.0).unwrap(), "1");
        // A bad signature may be a secret being rotated: let Slack retry.
        let response = respond(Err(ProcessError::Signature(SignatureError::Mismatch)));
        assert!(response.headers().get(NO_RETRY.0).is_none());
    }
}
