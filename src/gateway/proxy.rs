//! The Web API proxy: `POST /api/{method}` as Slack's Web API takes it (a form, a JSON body,
//! query parameters), authorized by the placeholder token the bot is given; handed to the run
//! the call names, or passed through to Slack unjournaled when it names none.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http::HeaderMap;
use http_body_util::{BodyExt, Limited};
use serde_json::{Map, Value};
use tokio::sync::oneshot;

use super::forward::RUN_HEADER;
use super::relay::Found;
use super::{Answered, Call, Gateway};
use crate::pipeline::Processor;
use crate::slack::{Args, SlackClient, SlackError};

/// Names the installation a call with no run is for (many-workspace mode).
const TEAM_HEADER: &str = "x-slack-once-team";
/// A Web API call's arguments are small; file uploads are not proxied.
const MAX_CALL_BYTES: usize = 1 << 20;
/// How long a call with no run may take at Slack.
const PASS_THROUGH_TIME: Duration = Duration::from_secs(10);

#[derive(Clone)]
struct Proxy {
    gateway: Arc<Gateway>,
    processor: Arc<Processor>,
}

/// The proxy's routes: `POST /api/{method}` (and `POST /api/respond`, a post to the request's
/// `response_url`).
pub(crate) fn routes(gateway: Arc<Gateway>, processor: Arc<Processor>) -> Router {
    Router::new()
        .route("/api/{method}", post(call))
        .with_state(Proxy { gateway, processor })
}

async fn call(
    State(proxy): State<Proxy>,
    Path(method): Path<String>,
    request: Request,
) -> Response {
    let answered = answer(&proxy, &method, request).await;
    (
        [(
            http::header::CONTENT_TYPE,
            "application/json; charset=utf-8",
        )],
        answered.0.to_string(),
    )
        .into_response()
}

async fn answer(proxy: &Proxy, method: &str, request: Request) -> Answered {
    let (parts, body) = request.into_parts();
    // Slack's method names are words joined by dots: `..` or `.x` would name another path
    // at Slack's end.
    if method.len() > 100
        || method.split('.').any(str::is_empty)
        || !method
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_')
    {
        return Answered::error("unknown_method");
    }
    let mut args = match arguments(&parts.headers, parts.uri.query(), body).await {
        Ok(args) => args,
        Err(code) => return Answered::error(code),
    };
    // The token, in the header as the SDKs send it, or as an argument: the placeholder's.
    // The gateway's own token is the one used.
    let given = match args.as_object_mut().and_then(|a| a.remove("token")) {
        Some(Value::String(token)) => Some(token),
        _ => header(&parts.headers, "authorization")
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::to_string),
    };
    if !given.is_some_and(|g| same(&g, proxy.gateway.config.proxy_token.expose())) {
        return Answered::error("invalid_auth");
    }
    match header(&parts.headers, RUN_HEADER) {
        Some(run) => {
            // On Lambda, this invocation's own deadline: a relayed call is answered by then.
            let answer_by_ms = parts
                .extensions
                .get::<lambda_http::Context>()
                .and_then(|context| crate::http::invocation_deadline(context.deadline))
                .map(super::epoch_ms);
            in_run(proxy, run, method, args, answer_by_ms).await
        }
        None => pass_through(proxy, &parts.headers, method, args).await,
    }
}

/// The call handed to its run, whose listener makes it and answers.
async fn in_run(
    proxy: &Proxy,
    run: &str,
    method: &str,
    args: Value,
    answer_by_ms: Option<u64>,
) -> Answered {
    let Some(calls) = proxy.gateway.runs.calls_of(run) else {
        return held_elsewhere(proxy, run, method, args, answer_by_ms).await;
    };
    let (answer, answered) = oneshot::channel();
    let call = Call {
        method: method.to_string(),
        args,
        answer,
    };
    if calls.send(call).await.is_err() {
        return Answered::error("slack_once_request_ended");
    }
    // The run dropped the call unanswered: it ended before making it.
    answered
        .await
        .unwrap_or_else(|_| Answered::error("slack_once_request_ended"))
}

/// A call of a run this process does not hold: handed to its holder through the ledger, or,
/// a read, made here with the run's installation while the run is open (by the holder, where
/// this process holds no token); answered by
/// `answer_by_ms` (this invocation's own deadline on Lambda) at the latest.
async fn held_elsewhere(
    proxy: &Proxy,
    run: &str,
    method: &str,
    args: Value,
    answer_by_ms: Option<u64>,
) -> Answered {
    let Some(relay) = proxy.gateway.relay.get() else {
        return Answered::error("slack_once_request_ended");
    };
    if !super::relay::is_run_name(run) {
        return Answered::error("slack_once_request_ended");
    }
    // A process with no token of its own (deferred mode's ingress: it only queues Slack's
    // requests) hands its reads to the holder too, which makes them with the run's.
    let tokenless =
        proxy.processor.workspaces().is_none() && !proxy.processor.base_slack().has_token();
    if method == super::writes::RESPOND_METHOD || !crate::slack::is_read_method(method) || tokenless
    {
        return relay.call(run, method, args, answer_by_ms).await;
    }
    let (installation, deadline_ms) = match relay.find(run).await {
        Ok(Found::Open {
            installation,
            deadline_ms,
        }) => (installation, deadline_ms),
        Ok(Found::Ended) => return Answered::error("slack_once_request_ended"),
        Err(_) => return Answered::error("slack_once_unavailable"),
    };
    let client = match client_of_installation(proxy, installation.as_deref()).await {
        Ok(client) => client,
        Err(code) => return Answered::error(code),
    };
    let margin = super::relay::OWN_DEADLINE_MARGIN.as_millis() as u64;
    let deadline_ms = answer_by_ms.map_or(deadline_ms, |by| (by - margin).min(deadline_ms));
    let left = deadline_ms.saturating_sub(crate::clock::now_ms());
    let deadline = tokio::time::Instant::now() + Duration::from_millis(left);
    slack_answer(client.api(method, &Args::form_from(&args), deadline).await)
}

/// A call that names no run (a scheduled job, a start-up `auth.test`): made as it is, counted.
async fn pass_through(proxy: &Proxy, headers: &HeaderMap, method: &str, args: Value) -> Answered {
    if method == super::writes::RESPOND_METHOD {
        return Answered::error("slack_once_request_ended");
    }
    let client = match client(proxy, header(headers, TEAM_HEADER)).await {
        Ok(client) => client,
        Err(code) => return Answered::error(code),
    };
    let writes = !crate::slack::is_read_method(method);
    tracing::info!(
        method,
        writes,
        "a call with no request: passed through, not journaled"
    );
    crate::metrics::count("UnjournaledCalls");
    let deadline = tokio::time::Instant::now() + PASS_THROUGH_TIME;
    // Slack takes JSON bodies for writes only.
    let args = match writes {
        true => Args::Json(args),
        false => Args::form_from(&args),
    };
    slack_answer(client.api(method, &args, deadline).await)
}

/// Slack's answer to the bot, its errors as Slack's.
fn slack_answer(answer: Result<Value, SlackError>) -> Answered {
    match answer {
        Ok(answer) => Answered::ok(answer),
        Err(SlackError::Api { code }) => Answered::error(&code),
        Err(SlackError::RateLimited { .. }) => Answered::error("ratelimited"),
        Err(_) => Answered::error("slack_once_unavailable"),
    }
}

/// The one workspace's client, or the installation's `team` names.
async fn client(proxy: &Proxy, team: Option<&str>) -> Result<SlackClient, &'static str> {
    let Some(workspaces) = proxy.processor.workspaces() else {
        return Ok(proxy.processor.base_slack().clone());
    };
    let Some(team) = team else {
        return Err("slack_once_team_required");
    };
    match workspaces.client_for(team, None).await {
        Ok(Some(client)) => Ok(client),
        Ok(None) => Err("team_not_found"),
        Err(_) => Err("slack_once_unavailable"),
    }
}

/// The client of the installation a run is answered with, as its holder's is: the one
/// workspace's, or the installation whose key's id is `installation` (a workspace's team id,
/// or an org-wide install's enterprise id). Not the request's `team`: in a channel shared with
/// another organisation, that is the team of the person who wrote, perhaps another tenant's
/// installation of the app.
async fn client_of_installation(
    proxy: &Proxy,
    installation: Option<&str>,
) -> Result<SlackClient, &'static str> {
    let Some(workspaces) = proxy.processor.workspaces() else {
        return Ok(proxy.processor.base_slack().clone());
    };
    let Some(id) = installation else {
        return Err("slack_once_team_required");
    };
    // Slack's team ids and enterprise ids never meet: at most one of the two keys is found.
    match workspaces.client_for(id, Some(id)).await {
        Ok(Some(client)) => Ok(client),
        Ok(None) => Err("team_not_found"),
        Err(_) => Err("slack_once_unavailable"),
    }
}

/// Whether `given` is the placeholder token (compared in constant time).
fn same(given: &str, token: &str) -> bool {
    let (given, token) = (given.trim().as_bytes(), token.as_bytes());
    given.len() == token.len()
        && given
            .iter()
            .zip(token)
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// The call's arguments as one JSON object: the query's, then the body's (a form or a JSON
/// object), a body's winning.
async fn arguments(
    headers: &HeaderMap,
    query: Option<&str>,
    body: Body,
) -> Result<Value, &'static str> {
    let content_type = header(headers, "content-type").unwrap_or_default();
    if content_type.starts_with("multipart/") {
        return Err("slack_once_multipart_unsupported");
    }
    let bytes = Limited::new(body, MAX_CALL_BYTES)
        .collect()
        .await
        .map_err(|_| "request_too_large")?
        .to_bytes();
    let mut args = Map::new();
    let pairs = form_urlencoded::parse(query.unwrap_or_default().as_bytes());
    for (k, v) in pairs {
        args.insert(k.into_owned(), Value::String(v.into_owned()));
    }
    let json = content_type.starts_with("application/json")
        || bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    if json {
        let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(&bytes) else {
            return Err("invalid_json");
        };
        args.extend(body);
    } else {
        for (k, v) in form_urlencoded::parse(&bytes) {
            args.insert(k.into_owned(), Value::String(v.into_owned()));
        }
    }
    Ok(Value::Object(args))
}
