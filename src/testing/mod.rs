//! Testing a bot without Slack: [`TestBot`] runs an [`App`] in-process on the in-memory ledger,
//! sends it signed events as Slack would, and points it at [`FakeSlack`], a Web API on
//! 127.0.0.1 that keeps what the bot wrote (messages, updates, deletions, reactions, every
//! call) and answers look-ups by metadata like Slack.
//!
//! ```no_run
//! # async fn demo() {
//! use slack_once::app::{App, Ctx, MessageEvent};
//! use slack_once::testing::TestBot;
//!
//! let app = App::new().message_where(|m: &MessageEvent| m.mention, |ctx: Ctx, _m| async move {
//!     ctx.reply("hello").await?;
//!     Ok(())
//! });
//! let bot = TestBot::start(app).await;
//! assert_eq!(bot.mention("hi").await, "answered");
//! assert_eq!(bot.slack().messages()[0]["text"], "hello");
//! # }
//! ```

mod workspace;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use tower::ServiceExt;

pub use workspace::{hook_answer, micros, Identity, Workspace, OTHER_APP, PAGE_CAP};

use crate::app::App;
use crate::config::{Config, Secret};
use crate::ledger::MemoryLedger;
use crate::Application;

const SECRET: &str = "slack-once-testing-secret";

/// The workspace a [`TestBot`] runs in: its team, its app and its bot.
pub const TEAM: &str = "T0TEST";
pub const APP_ID: &str = "A0TEST";
pub const BOT_ID: &str = "B0TEST";
pub const BOT_USER: &str = "U0BOT";

struct Recorded {
    calls: Vec<(String, Value)>,
    workspace: Workspace,
}

/// A stand-in for Slack's Web API on 127.0.0.1, for tests: one [`Workspace`] served as Slack
/// serves it.
#[derive(Clone)]
pub struct FakeSlack {
    base_url: String,
    state: Arc<Mutex<Recorded>>,
}

impl FakeSlack {
    /// Starts it on a free port of 127.0.0.1 (it stops with the test's runtime), for the app
    /// `identity` names.
    pub async fn start_for(identity: Identity) -> Self {
        let state = Arc::new(Mutex::new(Recorded {
            calls: Vec::new(),
            workspace: Workspace::new(identity),
        }));
        let router = Router::new()
            .route("/api/conversations.replies", get(look_up))
            .route("/api/conversations.history", get(look_up))
            .route("/api/{method}", post(call))
            .route("/commands/{*rest}", post(hook))
            .route("/actions/{*rest}", post(hook))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port on 127.0.0.1");
        let addr = listener.local_addr().expect("a bound address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self {
            base_url: format!("http://{addr}/api"),
            state,
        }
    }

    /// Starts it for the app a [`TestBot`] is ([`TEAM`], [`APP_ID`], [`BOT_ID`], [`BOT_USER`]).
    pub async fn start() -> Self {
        Self::start_for(Identity {
            team: TEAM.into(),
            app_id: APP_ID.into(),
            bot_id: BOT_ID.into(),
            bot_user: BOT_USER.into(),
        })
        .await
    }

    /// The Web API base to give the bot (`SLACK_API_URL`).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Every call the bot made, in order: (method, arguments).
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
        self.state
            .lock()
            .expect("lock")
            .workspace
            .set_stream_expiry(expiry);
    }

    /// The assistant calls: (method, channel, thread_ts, arguments).
    pub fn assistant_calls(&self) -> Vec<(String, String, String, Value)> {
        self.state
            .lock()
            .expect("lock")
            .workspace
            .assistant_calls()
            .to_vec()
    }

    /// The views the bot opened or pushed (updates applied).
    pub fn views(&self) -> Vec<Value> {
        self.state.lock().expect("lock").workspace.views().to_vec()
    }

    /// The ephemeral messages sent (by `chat.postEphemeral` or a `response_url`).
    pub fn ephemerals(&self) -> Vec<Value> {
        self.state
            .lock()
            .expect("lock")
            .workspace
            .ephemerals()
            .to_vec()
    }

    /// Works on the workspace directly (add people's messages, another app's, chatter).
    pub fn with_workspace<T>(&self, f: impl FnOnce(&mut Workspace) -> T) -> T {
        f(&mut self.state.lock().expect("lock").workspace)
    }
}

/// A form body or a query string as a JSON object of strings.
fn form(text: &str) -> serde_json::Map<String, Value> {
    text.split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (percent_decode(k), Value::String(percent_decode(v))))
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(
                    std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or(""),
                    16,
                ) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn call(
    State(state): State<Arc<Mutex<Recorded>>>,
    Path(method): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let args: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::Object(form(&String::from_utf8_lossy(&body))));
    let mut s = state.lock().expect("lock");
    s.calls.push((method.clone(), args.clone()));
    let answer = s.workspace.call(&method, &args);
    json_response(answer)
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

async fn look_up(State(state): State<Arc<Mutex<Recorded>>>, uri: http::Uri) -> Response {
    let query: HashMap<String, String> = form(uri.query().unwrap_or(""))
        .into_iter()
        .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_string()))
        .collect();
    let s = state.lock().expect("lock");
    let answer = if uri.path().ends_with("conversations.replies") {
        s.workspace.replies(&query)
    } else {
        s.workspace.history(&query)
    };
    json_response(answer)
}

/// What Slack got back for a command or an interaction: the status, the acknowledgement's
/// body (`Null` for an empty 200), and what became of the request (`answered`, `duplicate`…,
/// or the error's code).
#[derive(Clone, Debug, PartialEq)]
pub struct Acked {
    pub status: u16,
    pub body: Value,
    pub outcome: String,
}

/// An [`App`] under test: in-process, on the in-memory ledger, writing to a [`FakeSlack`].
pub struct TestBot {
    router: Router,
    slack: FakeSlack,
    next: AtomicU64,
}

impl TestBot {
    /// Wires `app` to a new [`FakeSlack`].
    pub async fn start(app: App) -> Self {
        let slack = FakeSlack::start().await;
        let vars = [
            ("SLACK_SIGNING_SECRET", SECRET.to_string()),
            ("SLACK_BOT_TOKEN", "xoxb-testing".to_string()),
            ("SLACK_API_URL", slack.base_url().to_string()),
        ];
        let config = Config::from_lookup(|k| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.clone())
        })
        .expect("a valid test configuration");
        let router = Application::with_parts(config, Arc::new(MemoryLedger::new()), app).router();
        Self {
            router,
            slack,
            next: AtomicU64::new(1),
        }
    }

    pub fn slack(&self) -> &FakeSlack {
        &self.slack
    }

    /// Sends `event` (an inner event, such as `{"type": "team_join", …}`) in an envelope of
    /// its own, signed now, as Slack would; returns the outcome (`answered`, `duplicate`…).
    pub async fn send(&self, event: Value) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.send_envelope(json!({
            "type": "event_callback", "team_id": TEAM, "api_app_id": APP_ID,
            "event_id": format!("EvTest{n:06}"), "event_time": 1_767_225_600,
            "event": event,
            "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": true}]
        }))
        .await
    }

    /// Posts `body` to the app's Request URL, signed now as Slack signs it.
    async fn post(&self, content_type: &str, body: String) -> Response {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let signature = crate::signature::sign(&Secret::new(SECRET), now, body.as_bytes());
        let request = http::Request::post("/slack/events")
            .header("content-type", content_type)
            .header("x-slack-request-timestamp", now.to_string())
            .header("x-slack-signature", signature)
            .body(axum::body::Body::from(body))
            .expect("a valid request");
        self.router
            .clone()
            .oneshot(request)
            .await
            .expect("the router answers")
    }

    /// Sends a whole envelope (with its own `event_id`: send it twice to play Slack's retry).
    /// The message it is about is in Slack first, as it would be.
    pub async fn send_envelope(&self, envelope: Value) -> String {
        let body = envelope.to_string();
        self.slack
            .with_workspace(|w| w.add_event_message(body.as_bytes()));
        let response = self.post("application/json", body).await;
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        let answer: Value = serde_json::from_slice(&bytes).unwrap_or_default();
        answer["outcome"]
            .as_str()
            .or(answer["error"].as_str())
            .unwrap_or_default()
            .to_string()
    }

    // ------------------------------------------------------------ commands and interactions

    /// Sends a form (a command's, or `payload=` an interaction's) signed now, as Slack would.
    pub async fn send_form(&self, body: String) -> Acked {
        let response = self.post("application/x-www-form-urlencoded", body).await;
        let status = response.status().as_u16();
        let outcome = response
            .headers()
            .get(crate::http::OUTCOME_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Acked {
            status,
            outcome: if outcome.is_empty() {
                body["error"].as_str().unwrap_or_default().to_string()
            } else {
                outcome
            },
            body,
        }
    }

    /// Sends an interaction's `payload` (with the team, the app and `U0USER` filled in when
    /// absent, and a fresh `trigger_id`).
    pub async fn send_interaction(&self, mut payload: Value) -> Acked {
        for (key, value) in [
            ("team", json!({"id": TEAM})),
            ("user", json!({"id": "U0USER", "team_id": TEAM})),
            ("api_app_id", json!(APP_ID)),
            ("trigger_id", json!(Workspace::trigger_id())),
        ] {
            if payload.get(key).is_none() {
                payload[key] = value;
            }
        }
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &payload.to_string())
            .finish();
        self.send_form(body).await
    }

    /// `U0USER` runs `command` (`"/once"`) with `text` in `C0TEST`; its `response_url` is the
    /// stand-in's.
    pub async fn command(&self, command: &str, text: &str) -> Acked {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs([
                ("command", command),
                ("text", text),
                ("team_id", TEAM),
                ("api_app_id", APP_ID),
                ("user_id", "U0USER"),
                ("channel_id", "C0TEST"),
                ("trigger_id", &Workspace::trigger_id()),
                (
                    "response_url",
                    &self.response_url("commands", "C0TEST", None, n),
                ),
            ])
            .finish();
        self.send_form(body).await
    }

    /// `U0USER` clicks the button `action_id` (with `value`) on the bot's message `message`
    /// (one of [`FakeSlack::messages`]), or outside any message when `None`.
    pub async fn click(&self, action_id: &str, value: &str, message: Option<&Value>) -> Acked {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let action_ts = format!(
            "{}.{n:06}",
            crate::pipeline::unix_ms(SystemTime::now()) / 1000
        );
        let mut payload = json!({
            "type": "block_actions",
            "actions": [{"type": "button", "action_id": action_id, "block_id": "b", "value": value, "action_ts": action_ts}],
        });
        if let Some(m) = message {
            let channel = m["channel"].as_str().unwrap_or("C0TEST");
            let ts = m["ts"].as_str().unwrap_or_default();
            payload["container"] =
                json!({"type": "message", "message_ts": ts, "channel_id": channel});
            payload["channel"] = json!({"id": channel});
            payload["message"] = m.clone();
            payload["response_url"] = self.response_url("actions", channel, Some(ts), n).into();
        }
        self.send_interaction(payload).await
    }

    /// `U0USER` uses the global shortcut `callback_id`.
    pub async fn shortcut(&self, callback_id: &str) -> Acked {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.send_interaction(json!({
            "type": "shortcut", "callback_id": callback_id,
            "action_ts": format!("1767225600.{n:06}"),
        }))
        .await
    }

    /// `U0USER` submits `view` (as the bot opened it: one of [`FakeSlack::views`]) with
    /// `values` (`{block_id: {action_id: {"type": …, "value": …}}}`).
    pub async fn submit_view(&self, view: &Value, values: Value) -> Acked {
        let mut view = view.clone();
        view["state"] = json!({ "values": values });
        self.send_interaction(json!({"type": "view_submission", "view": view}))
            .await
    }

    /// An external select `action_id` asks for its options, `typed` being what the user typed.
    pub async fn options(&self, action_id: &str, typed: &str) -> Acked {
        self.send_interaction(json!({
            "type": "block_suggestion", "action_id": action_id, "block_id": "b", "value": typed,
        }))
        .await
    }

    /// A response URL of the stand-in (see [`Workspace::respond`]).
    fn response_url(&self, kind: &str, channel: &str, ts: Option<&str>, n: u64) -> String {
        let host = self.slack.base_url().trim_end_matches("/api");
        match ts {
            Some(ts) => format!("{host}/{kind}/{TEAM}/{channel}/{ts}/{n}"),
            None => format!("{host}/{kind}/{TEAM}/{channel}/{n}"),
        }
    }

    /// A mention of the bot by `U0USER` in `C0TEST`, as its own new message.
    pub async fn mention(&self, text: &str) -> String {
        let ts = self.new_ts();
        self.send(json!({
            "type": "app_mention", "user": "U0USER", "text": format!("<@U0BOT> {text}"),
            "channel": "C0TEST", "ts": ts, "event_ts": ts
        }))
        .await
    }

    /// A direct message to the bot from `U0USER`, as its own new message.
    pub async fn dm(&self, text: &str) -> String {
        let ts = self.new_ts();
        self.send(json!({
            "type": "message", "channel_type": "im", "user": "U0USER", "text": text,
            "channel": "D0TEST", "ts": ts, "event_ts": ts
        }))
        .await
    }

    fn new_ts(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("1767225600.{n:06}")
    }
}
