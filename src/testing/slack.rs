//! [`FakeSlack`]: one [`Workspace`] served over HTTP as Slack's Web API serves it, on a port of
//! 127.0.0.1 or in process (the crash explorer's connections never leave the runtime).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::Value;

use super::workspace::{self, Identity, Workspace};
use super::{APP_ID, BOT_ID, BOT_USER, TEAM};
use crate::net::Connector;

pub(crate) struct Recorded {
    pub(crate) calls: Vec<(String, Value)>,
    pub(crate) workspace: Workspace,
}

/// A stand-in for Slack's Web API, for tests: one [`Workspace`] served as Slack serves it.
/// Every method takes its arguments as Slack does: a JSON body, a form, or a query string
/// (`GET`), so a bot that reads with `POST` (as [`crate::app::Ctx::read`] does) and one that
/// reads with `GET` both work.
#[derive(Clone)]
pub struct FakeSlack {
    base_url: String,
    state: Arc<Mutex<Recorded>>,
    router: Router,
}

/// The base of an in-process FakeSlack: on 127.0.0.1 (so its response URLs pass the check
/// every `response_url` gets), on a port nothing listens on (its connections never open one).
pub const IN_PROCESS_BASE: &str = "http://127.0.0.1:9/api";

impl FakeSlack {
    fn new(identity: Identity, base_url: String) -> Self {
        let state = Arc::new(Mutex::new(Recorded {
            calls: Vec::new(),
            workspace: Workspace::new(identity),
        }));
        let router = Router::new()
            .route("/api/{method}", post(call).get(call_by_query))
            .route("/commands/{*rest}", post(hook))
            .route("/actions/{*rest}", post(hook))
            .with_state(state.clone());
        Self {
            base_url,
            state,
            router,
        }
    }

    /// Starts it on a free port of 127.0.0.1 (it stops with the test's runtime), for the app
    /// `identity` names.
    pub async fn start_for(identity: Identity) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port on 127.0.0.1");
        let addr = listener.local_addr().expect("a bound address");
        let slack = Self::new(identity, format!("http://{addr}/api"));
        let router = slack.router.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        slack
    }

    /// Starts it for the app a [`super::TestBot`] is ([`TEAM`], [`APP_ID`], [`BOT_ID`],
    /// [`BOT_USER`]).
    pub async fn start() -> Self {
        Self::start_for(default_identity()).await
    }

    /// The same Slack, reached through [`FakeSlack::connector`] only: no socket.
    pub fn in_process(identity: Identity) -> Self {
        Self::new(identity, IN_PROCESS_BASE.to_string())
    }

    /// Connections to this Slack in process (give it to [`crate::slack::SlackClient`]).
    pub fn connector(&self) -> Connector {
        Connector::Memory(crate::net::serve_http(self.router.clone()))
    }

    /// The HTTP service, to wrap (the explorer puts its faults in front of it).
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// The Web API base to give the bot (`SLACK_API_URL`).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Every call the bot made, in order: (method, arguments). Reads of conversations
    /// (`conversations.history`, `.replies`) are not listed: they change nothing.
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.state.lock().expect("lock").calls.clone()
    }

    /// How many calls the bot made (without copying them).
    pub fn call_count(&self) -> usize {
        self.state.lock().expect("lock").calls.len()
    }

    /// The bot's messages in Slack now (updates applied, deletions removed), each with its
    /// `ts`, oldest first.
    pub fn messages(&self) -> Vec<Value> {
        self.state.lock().expect("lock").workspace.ours()
    }

    /// The reactions in place: (channel, ts, name).
    pub fn reactions(&self) -> Vec<(String, String, String)> {
        self.state.lock().expect("lock").workspace.reactions()
    }

    /// Streams stop taking appends this long after they start (Slack: about 5 minutes).
    pub fn set_stream_expiry(&self, expiry: std::time::Duration) {
        self.with_workspace(|w| w.set_stream_expiry(expiry));
    }

    /// The assistant calls: (method, channel, thread_ts, arguments).
    pub fn assistant_calls(&self) -> Vec<(String, String, String, Value)> {
        self.with_workspace(|w| w.assistant_calls().to_vec())
    }

    /// The views the bot opened or pushed (updates applied).
    pub fn views(&self) -> Vec<Value> {
        self.with_workspace(|w| w.views().to_vec())
    }

    /// The ephemeral messages sent (by `chat.postEphemeral` or a `response_url`).
    pub fn ephemerals(&self) -> Vec<Value> {
        self.with_workspace(|w| w.ephemerals().to_vec())
    }

    /// Works on the workspace directly (add people's messages, another app's, chatter).
    pub fn with_workspace<T>(&self, f: impl FnOnce(&mut Workspace) -> T) -> T {
        f(&mut self.state.lock().expect("lock").workspace)
    }
}

pub(crate) fn default_identity() -> Identity {
    Identity {
        team: TEAM.into(),
        app_id: APP_ID.into(),
        bot_id: BOT_ID.into(),
        bot_user: BOT_USER.into(),
    }
}

/// A form body or a query string as a JSON object of strings.
pub(crate) fn form(text: &str) -> serde_json::Map<String, Value> {
    form_urlencoded::parse(text.as_bytes())
        .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
        .collect()
}

/// A method's arguments as Slack reads them: the query string, then the body (JSON, or a form).
fn arguments(query: Option<&str>, body: &[u8]) -> Value {
    let mut args = form(query.unwrap_or(""));
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(fields)) => args.extend(fields),
        _ => args.extend(form(&String::from_utf8_lossy(body))),
    }
    Value::Object(args)
}

/// The strings of `args`, as the conversation reads take them.
fn strings(args: &Value) -> HashMap<String, String> {
    args.as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), v)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One Web API method, answered as Slack answers it: `conversations.history` and `.replies`
/// from the workspace's conversations (not recorded: they change nothing), any other recorded
/// and answered by [`Workspace::call`].
pub(crate) fn answer(state: &Mutex<Recorded>, method: &str, args: Value) -> Value {
    let mut s = state.lock().expect("lock");
    match method {
        "conversations.history" => s.workspace.history(&strings(&args)),
        "conversations.replies" => s.workspace.replies(&strings(&args)),
        _ => {
            s.calls.push((method.to_string(), args.clone()));
            s.workspace.call(method, &args)
        }
    }
}

async fn call(
    State(state): State<Arc<Mutex<Recorded>>>,
    Path(method): Path<String>,
    RawQuery(query): RawQuery,
    body: axum::body::Bytes,
) -> Response {
    json_response(answer(&state, &method, arguments(query.as_deref(), &body)))
}

async fn call_by_query(
    State(state): State<Arc<Mutex<Recorded>>>,
    Path(method): Path<String>,
    verb: http::Method,
    RawQuery(query): RawQuery,
) -> Response {
    if verb == http::Method::HEAD {
        // A client opening its connection ahead of a call (`HEAD api.test`): no call at all.
        return json_response(serde_json::json!({"ok": true}));
    }
    json_response(answer(&state, &method, arguments(query.as_deref(), b"")))
}

/// A post to a response URL: recorded as the call `response_url`, answered as Slack does.
async fn hook(
    State(state): State<Arc<Mutex<Recorded>>>,
    uri: http::Uri,
    body: axum::body::Bytes,
) -> Response {
    let args: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut s = state.lock().expect("lock");
    s.calls.push(("response_url".into(), args.clone()));
    let (status, answer) = s.workspace.respond(uri.path(), &args);
    let status = http::StatusCode::from_u16(status).unwrap_or_default();
    (
        status,
        [("content-type", "text/plain")],
        workspace::hook_answer(&answer),
    )
        .into_response()
}

fn json_response(value: Value) -> Response {
    ([("content-type", "application/json")], value.to_string()).into_response()
}
