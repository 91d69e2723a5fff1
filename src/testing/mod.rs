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

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::app::App;
use crate::config::{Config, Secret};
use crate::ledger::MemoryLedger;
use crate::Application;

const SECRET: &str = "slack-once-testing-secret";

#[derive(Default)]
struct Recorded {
    calls: Vec<(String, Value)>,
    messages: Vec<Value>,
    reactions: BTreeSet<(String, String, String)>,
    next_ts: u64,
}

/// A stand-in for Slack's Web API on 127.0.0.1, for tests.
#[derive(Clone)]
pub struct FakeSlack {
    base_url: String,
    state: Arc<Mutex<Recorded>>,
}

impl FakeSlack {
    /// Starts it on a free port of 127.0.0.1 (it stops with the test's runtime).
    pub async fn start() -> Self {
        let state = Arc::new(Mutex::new(Recorded::default()));
        let router = Router::new()
            .route("/api/conversations.replies", get(look_up))
            .route("/api/conversations.history", get(look_up))
            .route("/api/{method}", post(call))
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

    /// The Web API base to give the bot (`SLACK_API_URL`).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Every call the bot made, in order: (method, arguments).
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.state.lock().expect("lock").calls.clone()
    }

    /// The messages in Slack now (updates applied, deletions removed), each with its `ts`.
    pub fn messages(&self) -> Vec<Value> {
        self.state.lock().expect("lock").messages.clone()
    }

    /// The reactions in place: (channel, ts, name).
    pub fn reactions(&self) -> Vec<(String, String, String)> {
        self.state
            .lock()
            .expect("lock")
            .reactions
            .iter()
            .cloned()
            .collect()
    }
}

async fn call(
    State(state): State<Arc<Mutex<Recorded>>>,
    Path(method): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let args: Value = serde_json::from_slice(&body).unwrap_or_else(|_| {
        // A form: key=value pairs (reads are sent so).
        let pairs: serde_json::Map<String, Value> = String::from_utf8_lossy(&body)
            .split('&')
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.to_string(), Value::String(v.replace("%2C", ","))))
            .collect();
        Value::Object(pairs)
    });
    let mut s = state.lock().expect("lock");
    s.calls.push((method.clone(), args.clone()));
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let channel = text(&args["channel"]);
    let answer = match method.as_str() {
        "chat.postMessage" => {
            s.next_ts += 1;
            let ts = format!("1900000000.{:06}", s.next_ts);
            let mut message = args.clone();
            message["ts"] = ts.clone().into();
            s.messages.push(message);
            json!({"ok": true, "channel": channel, "ts": ts})
        }
        "chat.update" => {
            let ts = text(&args["ts"]);
            match s.messages.iter_mut().find(|m| m["ts"] == ts.as_str()) {
                Some(m) => {
                    for key in ["text", "blocks", "attachments"] {
                        if !args[key].is_null() {
                            m[key] = args[key].clone();
                        }
                    }
                    json!({"ok": true, "channel": channel, "ts": ts})
                }
                None => json!({"ok": false, "error": "message_not_found"}),
            }
        }
        "chat.delete" => {
            let ts = text(&args["ts"]);
            s.messages.retain(|m| m["ts"] != ts.as_str());
            json!({"ok": true, "channel": channel, "ts": ts})
        }
        "reactions.add" => {
            let new = (channel, text(&args["timestamp"]), text(&args["name"]));
            if s.reactions.insert(new) {
                json!({"ok": true})
            } else {
                json!({"ok": false, "error": "already_reacted"})
            }
        }
        "reactions.remove" => {
            let gone = (channel, text(&args["timestamp"]), text(&args["name"]));
            if s.reactions.remove(&gone) {
                json!({"ok": true})
            } else {
                json!({"ok": false, "error": "no_reaction"})
            }
        }
        "conversations.open" => {
            json!({"ok": true, "channel": {"id": format!("D{}", text(&args["users"]).replace(',', ""))}})
        }
        "users.info" => {
            let user = text(&args["user"]);
            json!({"ok": true, "user": {"id": user, "name": user.to_lowercase()}})
        }
        _ => json!({"ok": true}),
    };
    json_response(answer)
}

fn json_response(value: Value) -> Response {
    ([("content-type", "application/json")], value.to_string()).into_response()
}

async fn look_up(State(state): State<Arc<Mutex<Recorded>>>, uri: http::Uri) -> Response {
    let query: std::collections::HashMap<String, String> = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let s = state.lock().expect("lock");
    let channel = query.get("channel").cloned().unwrap_or_default();
    let thread = query.get("ts");
    let messages: Vec<Value> = s
        .messages
        .iter()
        .filter(|m| m["channel"] == channel.as_str())
        .filter(|m| thread.is_none_or(|t| m["thread_ts"] == t.as_str()))
        .cloned()
        .collect();
    json_response(json!({"ok": true, "messages": messages, "has_more": false}))
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
            "type": "event_callback", "team_id": "T0TEST", "api_app_id": "A0TEST",
            "event_id": format!("EvTest{n:06}"), "event_time": 1_767_225_600,
            "event": event,
            "authorizations": [{"team_id": "T0TEST", "user_id": "U0BOT", "is_bot": true}]
        }))
        .await
    }

    /// Sends a whole envelope (with its own `event_id`: send it twice to play Slack's retry).
    pub async fn send_envelope(&self, envelope: Value) -> String {
        let body = envelope.to_string();
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let signature = crate::signature::sign(&Secret::new(SECRET), now, body.as_bytes());
        let request = http::Request::post("/slack/events")
            .header("content-type", "application/json")
            .header("x-slack-request-timestamp", now.to_string())
            .header("x-slack-signature", signature)
            .body(axum::body::Body::from(body))
            .expect("a valid request");
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("the router answers");
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
