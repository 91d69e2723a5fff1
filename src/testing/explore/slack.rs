//! Slack as a run sees it: the schedule's [`crate::testing::FakeSlack`], reached in process,
//! each call (Web API method, `response_url` post) a site where the schedule's fault strikes.
//! Also the queue as the ingress sees it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use super::schedule::{Fault, SiteKind};
use super::world::{Decision, World};
use crate::queue::{QueueError, Received, WorkQueue};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The HTTP service a run's Slack connections reach.
#[derive(Clone)]
pub(crate) struct SimSlack {
    pub world: Arc<World>,
    pub run: u32,
}

/// Reads that change nothing in Slack.
fn is_read(method: &str) -> bool {
    matches!(
        method,
        "conversations.history"
            | "conversations.replies"
            | "conversations.info"
            | "conversations.open"
            | "users.info"
            | "auth.test"
            | "api.test"
            | "team.info"
            | "bots.info"
            // A token exchange writes nothing a listener made: its faults are a read's.
            | "oauth.v2.access"
    ) || method.ends_with(".list")
        || method.ends_with(".info")
}

fn text_of(v: &Value, key: &str) -> String {
    match &v[key] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn short(text: &str) -> String {
    let mut cut: String = text.chars().take(48).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    format!("{cut:?}")
}

/// The arguments of a call, as Slack reads them (query, then a JSON or form body).
fn arguments(query: Option<&str>, body: &[u8]) -> Value {
    let mut args = crate::testing::slack::form(query.unwrap_or(""));
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(fields)) => args.extend(fields),
        _ => args.extend(crate::testing::slack::form(&String::from_utf8_lossy(body))),
    }
    Value::Object(args)
}

/// A call as the trace names it: the method and what it writes to.
fn describe(method: &str, args: &Value) -> String {
    let mut parts = vec![method.to_string()];
    for key in [
        "channel",
        "channel_id",
        "thread_ts",
        "ts",
        "timestamp",
        "users",
        "view_id",
        "external_id",
        "name",
        "oldest",
        "latest",
        "cursor",
        "response_type",
        "replace_original",
        "delete_original",
    ] {
        let value = text_of(args, key);
        if !value.is_empty() {
            parts.push(format!("{key}={value}"));
        }
    }
    for key in ["text", "markdown_text"] {
        let value = text_of(args, key);
        if !value.is_empty() {
            parts.push(short(&value));
            break;
        }
    }
    parts.join(" ")
}

/// What Slack answered, for the trace.
fn summary(status: StatusCode, body: &[u8]) -> String {
    let Ok(answer) = serde_json::from_slice::<Value>(body) else {
        return format!(
            "{} {}",
            status.as_u16(),
            short(&String::from_utf8_lossy(body))
        );
    };
    if answer["ok"] != true {
        return format!("ok:false {}", text_of(&answer, "error"));
    }
    if let Some(messages) = answer["messages"].as_array() {
        let more = if answer["has_more"] == true {
            ", more"
        } else {
            ""
        };
        return format!("ok, {} messages{more}", messages.len());
    }
    let mut text = "ok".to_string();
    for key in ["channel", "ts"] {
        let value = match &answer[key] {
            Value::Object(o) => o.get("id").map(|v| text_of(v, "")).unwrap_or_default(),
            _ => text_of(&answer, key),
        };
        if !value.is_empty() && !value.starts_with('{') {
            text.push_str(&format!(" {key}={value}"));
        }
    }
    if let Some(id) = answer["view"]["id"].as_str() {
        text.push_str(&format!(" view={id}"));
    }
    text
}

fn status_response(status: StatusCode, content_type: &str, body: String) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Body::from(body))
        .expect("a valid response")
}

impl tower::Service<Request<hyper::body::Incoming>> for SimSlack {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<hyper::body::Incoming>) -> Self::Future {
        let (world, run) = (self.world.clone(), self.run);
        Box::pin(async move {
            // Other runs go on between any two calls (two requests at once interleave).
            tokio::task::yield_now().await;
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await?.to_bytes();
            if parts.method == http::Method::HEAD {
                // The client's warm-up (a HEAD of api.test, without a token): no call at all.
                return Ok(status_response(StatusCode::OK, "text/plain", String::new()));
            }
            let path = parts.uri.path().to_string();
            let hook = path.starts_with("/commands/") || path.starts_with("/actions/");
            let method = if hook {
                "response_url".to_string()
            } else {
                path.rsplit('/').next().unwrap_or_default().to_string()
            };
            let kind = match () {
                _ if hook => SiteKind::ResponseUrl,
                _ if is_read(&method) => SiteKind::SlackRead,
                _ => SiteKind::SlackWrite,
            };
            // The token exchange carries the app's credentials, no token.
            if !hook && method != "oauth.v2.access" {
                let bearer = parts
                    .headers
                    .get(http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .map(str::to_string);
                world.lock().tokens.push((run, bearer));
            }
            let args = arguments(parts.uri.query(), &bytes);
            let target = ["channel", "users", "channel_id"]
                .iter()
                .map(|k| text_of(&args, k))
                .find(|t| !t.is_empty())
                .unwrap_or_default();
            let (mut decision, line) =
                world.decide(run, kind, format!("slack {}", describe(&method, &args)));
            let sticky = (method.clone(), target);
            if kind == SiteKind::SlackRead {
                match decision {
                    Decision::Fault(Fault::Refused) => {
                        world.lock().refused.insert(sticky);
                    }
                    Decision::Proceed if world.lock().refused.contains(&sticky) => {
                        world.note(line, "refused for good, as before");
                        decision = Decision::Fault(Fault::Refused);
                    }
                    _ => {}
                }
            }
            if kind == SiteKind::SlackRead
                && world.spec_history_per_minute()
                && matches!(
                    method.as_str(),
                    "conversations.history" | "conversations.replies"
                )
                && decision == Decision::Proceed
            {
                // One call a minute per method: a 429 with the seconds left.
                let now = world.elapsed();
                let mut s = world.lock();
                match s.last_read.get(&method) {
                    Some(last) if now < *last + Duration::from_secs(60) => {
                        let left = (*last + Duration::from_secs(60) - now).as_secs().max(1);
                        drop(s);
                        world.note(
                            line,
                            &format!("429, Retry-After {left} (one call a minute)"),
                        );
                        let mut response = status_response(
                            StatusCode::TOO_MANY_REQUESTS,
                            "application/json",
                            r#"{"ok":false,"error":"ratelimited"}"#.into(),
                        );
                        response
                            .headers_mut()
                            .insert("retry-after", left.to_string().parse().expect("a number"));
                        return Ok(response);
                    }
                    _ => {
                        s.last_read.insert(method.clone(), now);
                    }
                }
            }
            let fake = world.slack.router();
            let writes = matches!(kind, SiteKind::SlackWrite | SiteKind::ResponseUrl);
            let forward = || async {
                // What the write adds to Slack is its request's.
                let before = writes.then(|| world.shown());
                let request = Request::from_parts(parts.clone(), Body::from(bytes.clone()));
                let response = fake.oneshot(request).await.expect("the fake answers");
                if let Some(before) = before {
                    world.made_by(world.request_of(run), &before);
                    // A response_url names where it answers: `/actions/T/CHANNEL/TS/n` (the
                    // message it came with), `/commands/T/CHANNEL/n`.
                    let mut recorded = args.clone();
                    if hook {
                        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
                        if let Some(channel) = parts.get(2) {
                            recorded["channel"] = (*channel).into();
                        }
                        if let (Some(&"actions"), Some(ts)) = (parts.first(), parts.get(3)) {
                            recorded["ts"] = (*ts).into();
                        }
                    }
                    world.wrote(run, &method, &recorded);
                }
                let (head, body) = response.into_parts();
                let body = body
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                (head, body)
            };
            let answer = |head: http::response::Parts, body: bytes::Bytes| {
                Response::from_parts(head, Body::from(body))
            };
            match decision {
                Decision::Dead => std::future::pending().await,
                Decision::Proceed => {
                    let (head, body) = forward().await;
                    world.note(line, &summary(head.status, &body));
                    world.make_busy(&method, &args, &body);
                    Ok(answer(head, body))
                }
                Decision::Fault(fault) => match fault {
                    Fault::DiesBefore => {
                        world.die(run, "before a Slack call");
                        std::future::pending().await
                    }
                    Fault::DiesAfter => {
                        let (head, body) = forward().await;
                        world.note(line, &format!("applied: {}", summary(head.status, &body)));
                        world.make_busy(&method, &args, &body);
                        world.die(run, "after Slack applied a call, before its answer arrived");
                        std::future::pending().await
                    }
                    Fault::AnswerLost => {
                        let (head, body) = forward().await;
                        world.note(
                            line,
                            &format!(
                                "applied ({}), connection dropped",
                                summary(head.status, &body)
                            ),
                        );
                        world.make_busy(&method, &args, &body);
                        Err("the connection dropped before the answer".into())
                    }
                    Fault::Slow => std::future::pending().await,
                    Fault::SlowApplied => {
                        let (head, body) = forward().await;
                        world.note(line, &format!("applied: {}", summary(head.status, &body)));
                        world.make_busy(&method, &args, &body);
                        std::future::pending().await
                    }
                    Fault::RateLimited => {
                        let wait = match kind {
                            SiteKind::SlackRead => 60,
                            _ => 1,
                        };
                        let mut response = status_response(
                            StatusCode::TOO_MANY_REQUESTS,
                            "application/json",
                            r#"{"ok":false,"error":"ratelimited"}"#.into(),
                        );
                        response
                            .headers_mut()
                            .insert("retry-after", wait.to_string().parse().expect("a number"));
                        Ok(response)
                    }
                    Fault::InternalError => {
                        let (head, body) = forward().await;
                        world.note(line, &format!("applied: {}", summary(head.status, &body)));
                        world.make_busy(&method, &args, &body);
                        Ok(status_response(
                            StatusCode::OK,
                            "application/json",
                            r#"{"ok":false,"error":"internal_error"}"#.into(),
                        ))
                    }
                    Fault::Refused => Ok(match kind {
                        SiteKind::ResponseUrl => status_response(
                            StatusCode::NOT_FOUND,
                            "text/plain",
                            "expired_url".into(),
                        ),
                        SiteKind::SlackRead => status_response(
                            StatusCode::OK,
                            "application/json",
                            r#"{"ok":false,"error":"missing_scope"}"#.into(),
                        ),
                        _ => status_response(
                            StatusCode::OK,
                            "application/json",
                            r#"{"ok":false,"error":"restricted_action"}"#.into(),
                        ),
                    }),
                    // Unavailable, and what a Slack call cannot meet.
                    _ => Ok(status_response(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "text/plain",
                        "service unavailable".into(),
                    )),
                },
            }
        })
    }
}

/// The work queue as a deferred ingress sees it: each send a site; a message sent is handed
/// to `sent` (which starts its receives).
pub(crate) struct SimQueue {
    pub world: Arc<World>,
    pub run: u32,
    pub sent: Arc<dyn Fn(String) + Send + Sync>,
}

#[async_trait]
impl WorkQueue for SimQueue {
    async fn send(&self, body: &str) -> Result<(), QueueError> {
        let (decision, line) =
            self.world
                .decide(self.run, SiteKind::QueueSend, "queue send".into());
        let unavailable = |why: &str| Err(QueueError::Unavailable(why.to_string().into()));
        let send = || {
            if body.len() > crate::queue::MAX_MESSAGE_BYTES {
                return Err(QueueError::TooLarge { size: body.len() });
            }
            (self.sent)(body.to_string());
            Ok(())
        };
        match decision {
            Decision::Dead => std::future::pending().await,
            Decision::Proceed => {
                let result = send();
                self.world
                    .note(line, if result.is_ok() { "sent" } else { "too large" });
                result
            }
            Decision::Fault(fault) => match fault {
                Fault::DiesBefore => {
                    self.world.die(self.run, "before the queue's send");
                    std::future::pending().await
                }
                Fault::DiesAfter => {
                    let _ = send();
                    self.world.note(line, "sent");
                    self.world.die(self.run, "after the queue took the message");
                    std::future::pending().await
                }
                Fault::AnswerLost => {
                    let _ = send();
                    self.world.note(line, "sent, answer lost");
                    unavailable("the queue's answer was lost")
                }
                Fault::Slow => std::future::pending().await,
                _ => unavailable("the queue refused the send"),
            },
        }
    }

    async fn receive(
        &self,
        _max: usize,
        _visibility: Duration,
        _wait: Duration,
    ) -> Result<Vec<Received>, QueueError> {
        Err(QueueError::Unavailable(
            "the explorer's ingress does not receive".into(),
        ))
    }

    async fn delete(&self, _receipt_handle: &str) -> Result<(), QueueError> {
        Ok(())
    }

    async fn change_visibility(
        &self,
        _receipt_handle: &str,
        _after: Duration,
    ) -> Result<(), QueueError> {
        Err(QueueError::Unavailable(
            "the explorer's ingress does not receive".into(),
        ))
    }
}
