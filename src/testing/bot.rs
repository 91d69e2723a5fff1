//! [`TestBot`]: an [`App`] under test, in process, on the in-memory ledger, sent signed
//! requests as Slack sends them and writing to a [`FakeSlack`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::response::Response;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::functions::StartedExecution;
use super::workspace::Workspace;
use super::{APP_ID, BOT_USER, FakeSlack, TEAM};
use crate::app::App;
use crate::config::{Secret, SigningSecrets};
use crate::http::AppState;
use crate::ledger::MemoryLedger;
use crate::metrics::MetricsOut;
use crate::pipeline::{Processor, Settings};
use crate::secrets::SlackSecrets;
use crate::slack::SlackClient;

const SECRET: &str = "slack-once-testing-secret";
/// The person a [`TestBot`]'s requests come from, unless told otherwise ([`TestBot::as_user`]).
pub const USER: &str = "U0USER";
/// The channel they happen in, unless told otherwise ([`Actor::in_channel`]).
pub const CHANNEL: &str = "C0TEST";

/// What Slack got back for a command or an interaction: the status, the acknowledgement's
/// body (`Null` for an empty 200), and what became of the request (`answered`, `duplicate`…,
/// or the error's code).
#[derive(Clone, Debug, PartialEq)]
pub struct Acked {
    /// The HTTP status Slack got.
    pub status: u16,
    /// The acknowledgement's body as JSON (`Null` for an empty 200).
    pub body: Value,
    /// What became of the request (`answered`, `duplicate`…, or the error's code).
    pub outcome: String,
}

/// A request as sent, to send again.
#[derive(Clone, Debug)]
struct Sent {
    content_type: &'static str,
    body: String,
}

/// An [`App`] under test: in-process, on the in-memory ledger, writing to a [`FakeSlack`].
/// Metrics lines are kept ([`TestBot::metrics`]) rather than printed, unless
/// [`TestBot::start_printing_metrics`] started it.
pub struct TestBot {
    router: Router,
    slack: FakeSlack,
    next: AtomicU64,
    last: Mutex<Option<Sent>>,
    metrics: Arc<Mutex<Vec<String>>>,
}

impl TestBot {
    /// Wires `app` to a new [`FakeSlack`].
    pub async fn start(app: App) -> Self {
        Self::wire(app, false, Arc::new(MemoryLedger::new())).await
    }

    /// As [`TestBot::start`], each request's metrics line printed on stdout as on Lambda.
    pub async fn start_printing_metrics(app: App) -> Self {
        Self::wire(app, true, Arc::new(MemoryLedger::new())).await
    }

    /// As [`TestBot::start`], on `ledger` (a [`crate::ledger::DynamoLedger`] on DynamoDB
    /// Local, say, or one wrapped to hold requests back).
    pub async fn start_with_ledger(app: App, ledger: Arc<dyn crate::ledger::Ledger>) -> Self {
        Self::wire(app, false, ledger).await
    }

    async fn wire(app: App, print: bool, ledger: Arc<dyn crate::ledger::Ledger>) -> Self {
        crate::slack::under_test();
        let slack = FakeSlack::start().await;
        let metrics = Arc::new(Mutex::new(Vec::new()));
        let secrets = Arc::new(SlackSecrets::fixed(
            Some(SigningSecrets::parse(SECRET).expect("a valid secret")),
            Some(Secret::new("xoxb-testing")),
        ));
        let client = SlackClient::with_secrets(slack.base_url(), secrets.clone());
        let settings = Settings {
            ttl: std::time::Duration::from_secs(90_000),
            lease: std::time::Duration::from_secs(30),
            version: "local".into(),
            metrics: if print {
                MetricsOut::Stdout
            } else {
                MetricsOut::Kept(metrics.clone())
            },
        };
        let processor =
            Processor::new(ledger, client, Arc::new(app), settings).with_secrets(secrets);
        let router = crate::http::router(AppState {
            processor: Arc::new(processor),
            in_flight: None,
            readiness: None,
        });
        Self {
            router,
            slack,
            next: AtomicU64::new(1),
            last: Mutex::new(None),
            metrics,
        }
    }

    /// The fake Slack the bot writes to: its messages, reactions and every call.
    pub fn slack(&self) -> &FakeSlack {
        &self.slack
    }

    /// The metrics lines of the requests so far (each a JSON object: the counts, by name).
    pub fn metrics(&self) -> Vec<Value> {
        self.metrics
            .lock()
            .expect("metrics lock")
            .iter()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// Requests from `user` (in [`CHANNEL`] unless [`Actor::in_channel`] says otherwise).
    pub fn as_user<'a>(&'a self, user: &str) -> Actor<'a> {
        Actor {
            bot: self,
            user: user.to_string(),
            channel: CHANNEL.to_string(),
            execution: None,
        }
    }

    /// A workflow reaches the app's step `callback_id` with `inputs`: the stand-in starts an
    /// execution ([`FakeSlack::start_execution`]) and Slack sends `function_executed` with its
    /// token. Returns the outcome (`answered`…) and the execution. Send it again with
    /// [`TestBot::retry`] (Slack's retry) or [`TestBot::repeat`].
    pub async fn run_step(&self, callback_id: &str, inputs: Value) -> (String, StartedExecution) {
        let execution = self.slack.start_execution(callback_id, inputs.clone());
        let ts = self.new_ts();
        let outcome = self
            .send(json!({
                "type": "function_executed",
                "function": {
                    "id": format!("Fn{}", callback_id.len()), "callback_id": callback_id,
                    "title": callback_id, "type": "app", "app_id": APP_ID,
                    "input_parameters": [], "output_parameters": [],
                },
                "inputs": inputs,
                "function_execution_id": execution.function_execution_id,
                "workflow_execution_id": execution.workflow_execution_id,
                "event_ts": ts,
                "bot_access_token": execution.bot_access_token,
            }))
            .await;
        (outcome, execution)
    }

    /// Requests from [`USER`] in `channel`.
    pub fn in_channel<'a>(&'a self, channel: &str) -> Actor<'a> {
        self.as_user(USER).in_channel(channel)
    }

    fn default_actor(&self) -> Actor<'_> {
        self.as_user(USER)
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

    /// Posts `body` to the app's Request URL, signed now as Slack signs it, with `headers`.
    async fn post(&self, sent: Sent, headers: &[(&str, String)]) -> Response {
        let now = crate::clock::now_ms() / 1000;
        let signature =
            crate::slack::signature::sign(&Secret::new(SECRET), now, sent.body.as_bytes());
        let mut request = http::Request::post("/slack/events")
            .header("content-type", sent.content_type)
            .header("x-slack-request-timestamp", now.to_string())
            .header("x-slack-signature", signature);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let request = request
            .body(axum::body::Body::from(sent.body.clone()))
            .expect("a valid request");
        *self.last.lock().expect("lock") = Some(sent);
        // A client of the bot's own reaches this bot's stand-in, whatever else the test
        // process runs (another TestBot, an exploration).
        crate::slack::with_own_client_base(
            self.slack.around_base(),
            self.router.clone().oneshot(request),
        )
        .await
        .expect("the router answers")
    }

    /// Sends a whole envelope (with its own `event_id`: send it twice to play Slack's retry,
    /// or use [`TestBot::retry`]). The message it is about is in Slack first, as it would be.
    pub async fn send_envelope(&self, envelope: Value) -> String {
        self.envelope(envelope.to_string(), &[]).await
    }

    async fn envelope(&self, body: String, headers: &[(&str, String)]) -> String {
        self.slack
            .with_workspace(|w| w.add_event_message(body.as_bytes()));
        let sent = Sent {
            content_type: "application/json",
            body,
        };
        let response = self.post(sent, headers).await;
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

    /// The last event sent, again, as Slack's retry `retry_num` (1–3) sends it
    /// (`X-Slack-Retry-Num`, `X-Slack-Retry-Reason: http_timeout`); returns its outcome.
    pub async fn retry(&self, retry_num: u32) -> String {
        let last = self.last.lock().expect("lock").clone();
        let Some(Sent { body, .. }) = last else {
            panic!("TestBot::retry: nothing was sent yet");
        };
        let headers = [
            (crate::pipeline::RETRY_NUM_HEADER, retry_num.to_string()),
            (crate::pipeline::RETRY_REASON_HEADER, "http_timeout".into()),
        ];
        self.envelope(body, &headers).await
    }

    /// The last request sent (an event, a command, an interaction), again, exactly as it was
    /// (a person's client sending it twice, a proxy's repeat), signed anew; returns what Slack
    /// got back.
    pub async fn repeat(&self) -> Acked {
        let last = self.last.lock().expect("lock").clone();
        let Some(sent) = last else {
            panic!("TestBot::repeat: nothing was sent yet");
        };
        self.acked(sent).await
    }

    // ------------------------------------------------------------ commands and interactions

    /// Sends a form (a command's, or `payload=` an interaction's) signed now, as Slack would.
    pub async fn send_form(&self, body: String) -> Acked {
        self.acked(Sent {
            content_type: "application/x-www-form-urlencoded",
            body,
        })
        .await
    }

    async fn acked(&self, sent: Sent) -> Acked {
        let response = self.post(sent, &[]).await;
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
                body["outcome"]
                    .as_str()
                    .or(body["error"].as_str())
                    .unwrap_or_default()
                    .to_string()
            } else {
                outcome
            },
            body,
        }
    }

    /// Sends an interaction's `payload` (with the team, the app and [`USER`] filled in when
    /// absent, and a fresh `trigger_id`).
    pub async fn send_interaction(&self, payload: Value) -> Acked {
        self.default_actor().send_interaction(payload).await
    }

    /// [`USER`] runs `command` (`"/once"`) with `text` in [`CHANNEL`]; its `response_url` is
    /// the stand-in's.
    pub async fn command(&self, command: &str, text: &str) -> Acked {
        self.default_actor().command(command, text).await
    }

    /// [`USER`] clicks the button `action_id` (with `value`) on the bot's message `message`
    /// (one of [`FakeSlack::messages`]), or outside any message when `None`.
    pub async fn click(&self, action_id: &str, value: &str, message: Option<&Value>) -> Acked {
        self.default_actor().click(action_id, value, message).await
    }

    /// [`USER`] uses the global shortcut `callback_id`.
    pub async fn shortcut(&self, callback_id: &str) -> Acked {
        self.default_actor().shortcut(callback_id).await
    }

    /// [`USER`] submits `view` (as the bot opened it: one of [`FakeSlack::views`]) with
    /// `values` (`{block_id: {action_id: {"type": …, "value": …}}}`).
    pub async fn submit_view(&self, view: &Value, values: Value) -> Acked {
        self.default_actor().submit_view(view, values).await
    }

    /// An external select `action_id` asks for its options, `typed` being what the user typed.
    pub async fn options(&self, action_id: &str, typed: &str) -> Acked {
        self.default_actor()
            .send_interaction(json!({
                "type": "block_suggestion", "action_id": action_id, "block_id": "b", "value": typed,
            }))
            .await
    }

    /// A mention of the bot by [`USER`] in [`CHANNEL`], as its own new message.
    pub async fn mention(&self, text: &str) -> String {
        self.default_actor().mention(text).await
    }

    /// A direct message to the bot from [`USER`], as its own new message.
    pub async fn dm(&self, text: &str) -> String {
        self.default_actor().dm(text).await
    }

    /// [`USER`] clicks feedback buttons on the answer `message`: see [`Actor::feedback`].
    pub async fn feedback(&self, action_id: &str, positive: bool, message: &Value) -> Acked {
        self.default_actor()
            .feedback(action_id, positive, message)
            .await
    }

    /// [`USER`] presses the stop button of the session of `thread_ts` in `D0TEST`: see
    /// [`Actor::stop_session`].
    pub async fn stop_session(&self, thread_ts: &str) -> String {
        self.default_actor().stop_session(thread_ts).await
    }

    fn new_ts(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("1767225600.{n:06}")
    }

    /// A response URL of the stand-in (see [`Workspace::respond`]).
    fn response_url(&self, kind: &str, channel: &str, ts: Option<&str>, n: u64) -> String {
        let host = self.slack.base_url().trim_end_matches("/api");
        match ts {
            Some(ts) => format!("{host}/{kind}/{TEAM}/{channel}/{ts}/{n}"),
            None => format!("{host}/{kind}/{TEAM}/{channel}/{n}"),
        }
    }
}

/// Requests of one person in one conversation: [`TestBot::as_user`], [`TestBot::in_channel`].
pub struct Actor<'a> {
    bot: &'a TestBot,
    user: String,
    channel: String,
    /// The step execution its interactions are in ([`Actor::in_step`]).
    execution: Option<String>,
}

impl Actor<'_> {
    /// In `channel` (a DM's id starts with `D`).
    pub fn in_channel(mut self, channel: &str) -> Self {
        self.channel = channel.to_string();
        self
    }

    /// Interactions in the step execution `function_execution_id` (a click on a message the
    /// step posted, a submission of a view it opened): each carries the execution's
    /// `function_data` and a new token of the execution, as Slack sends them.
    pub fn in_step(mut self, function_execution_id: &str) -> Self {
        self.execution = Some(function_execution_id.to_string());
        self
    }

    /// A mention of the bot, as a new message of this person in this channel.
    pub async fn mention(&self, text: &str) -> String {
        let ts = self.bot.new_ts();
        self.bot
            .send(json!({
                "type": "app_mention", "user": self.user, "text": format!("<@{BOT_USER}> {text}"),
                "channel": self.channel, "ts": ts, "event_ts": ts
            }))
            .await
    }

    /// A message of this person in this channel (a DM when its id starts with `D`).
    pub async fn message(&self, text: &str) -> String {
        let ts = self.bot.new_ts();
        let kind = if self.channel.starts_with('D') {
            "im"
        } else {
            "channel"
        };
        self.bot
            .send(json!({
                "type": "message", "channel_type": kind, "user": self.user, "text": text,
                "channel": self.channel, "ts": ts, "event_ts": ts
            }))
            .await
    }

    /// A direct message to the bot from this person (in `D0TEST` unless the channel is a DM).
    pub async fn dm(&self, text: &str) -> String {
        let channel = if self.channel.starts_with('D') {
            self.channel.clone()
        } else {
            "D0TEST".to_string()
        };
        Actor {
            bot: self.bot,
            user: self.user.clone(),
            channel,
            execution: None,
        }
        .message(text)
        .await
    }

    /// Sends an interaction's `payload` (the team, the app and this person filled in when
    /// absent, and a fresh `trigger_id`).
    pub async fn send_interaction(&self, mut payload: Value) -> Acked {
        if let Some(id) = &self.execution {
            let found = self
                .bot
                .slack
                .executions()
                .into_iter()
                .find(|e| e["function_execution_id"] == id.as_str());
            let (callback_id, inputs) = found
                .map(|e| (e["callback_id"].clone(), e["inputs"].clone()))
                .unwrap_or_default();
            payload["function_data"] = json!({
                "execution_id": id, "function": {"callback_id": callback_id}, "inputs": inputs,
            });
            if let Some(token) = self.bot.slack.execution_token(id) {
                payload["bot_access_token"] = token.into();
            }
            payload["interactivity"] = json!({
                "interactor": {"id": self.user, "secret": "not-a-secret"},
                "interactivity_pointer": Workspace::trigger_id(),
            });
        }
        for (key, value) in [
            ("team", json!({"id": TEAM})),
            ("user", json!({"id": self.user, "team_id": TEAM})),
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
        self.bot.send_form(body).await
    }

    /// This person runs `command` with `text` in this channel.
    pub async fn command(&self, command: &str, text: &str) -> Acked {
        let n = self.bot.next.fetch_add(1, Ordering::Relaxed);
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs([
                ("command", command),
                ("text", text),
                ("team_id", TEAM),
                ("api_app_id", APP_ID),
                ("user_id", &self.user),
                ("channel_id", &self.channel),
                ("trigger_id", &Workspace::trigger_id()),
                (
                    "response_url",
                    &self.bot.response_url("commands", &self.channel, None, n),
                ),
            ])
            .finish();
        self.bot.send_form(body).await
    }

    /// This person clicks the button `action_id` (with `value`) on the bot's message
    /// `message`, or outside any message when `None`.
    pub async fn click(&self, action_id: &str, value: &str, message: Option<&Value>) -> Acked {
        let n = self.bot.next.fetch_add(1, Ordering::Relaxed);
        let action_ts = format!("{}.{n:06}", crate::clock::now_ms() / 1000);
        let mut payload = json!({
            "type": "block_actions",
            "actions": [{"type": "button", "action_id": action_id, "block_id": "b", "value": value, "action_ts": action_ts}],
        });
        if let Some(m) = message {
            let channel = m["channel"].as_str().unwrap_or(&self.channel);
            let ts = m["ts"].as_str().unwrap_or_default();
            payload["container"] =
                json!({"type": "message", "message_ts": ts, "channel_id": channel});
            payload["channel"] = json!({"id": channel});
            payload["message"] = m.clone();
            payload["response_url"] = self
                .bot
                .response_url("actions", channel, Some(ts), n)
                .into();
        }
        self.send_interaction(payload).await
    }

    /// This person clicks the positive (`true`) or negative feedback button of the
    /// `feedback_buttons` element `action_id` on the bot's answer `message`, as Slack sends
    /// the click (its `value` the button's).
    pub async fn feedback(&self, action_id: &str, positive: bool, message: &Value) -> Acked {
        let n = self.bot.next.fetch_add(1, Ordering::Relaxed);
        let action_ts = format!("{}.{n:06}", crate::clock::now_ms() / 1000);
        let element = message["blocks"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|b| b["elements"].as_array().into_iter().flatten())
            .find(|e| e["type"] == "feedback_buttons" && e["action_id"] == action_id)
            .cloned()
            .unwrap_or_default();
        let button = if positive {
            "positive_button"
        } else {
            "negative_button"
        };
        let value = element[button]["value"]
            .as_str()
            .unwrap_or(if positive { "positive" } else { "negative" })
            .to_string();
        let channel = message["channel"].as_str().unwrap_or(&self.channel);
        let ts = message["ts"].as_str().unwrap_or_default();
        let payload = json!({
            "type": "block_actions",
            "actions": [{"type": "feedback_buttons", "action_id": action_id, "block_id": "fb",
                         "value": value, "text": element[button]["text"], "action_ts": action_ts}],
            "container": {"type": "message", "message_ts": ts, "channel_id": channel},
            "channel": {"id": channel},
            "message": message,
            "response_url": self.bot.response_url("actions", channel, Some(ts), n),
        });
        self.send_interaction(payload).await
    }

    /// This person presses the stop button of the agent session of `thread_ts` in this
    /// conversation (a DM: `D0TEST` unless the channel is one): Slack stops the app's streams
    /// there, then sends `agent_session_stopped`. The outcome of its delivery.
    pub async fn stop_session(&self, thread_ts: &str) -> String {
        let channel = if self.channel.starts_with('D') {
            self.channel.clone()
        } else {
            "D0TEST".to_string()
        };
        let event = self
            .bot
            .slack
            .with_workspace(|w| w.stop_session(&channel, thread_ts, &self.user));
        self.bot.send(event).await
    }

    /// This person uses the global shortcut `callback_id`.
    pub async fn shortcut(&self, callback_id: &str) -> Acked {
        let n = self.bot.next.fetch_add(1, Ordering::Relaxed);
        self.send_interaction(json!({
            "type": "shortcut", "callback_id": callback_id,
            "action_ts": format!("1767225600.{n:06}"),
        }))
        .await
    }

    /// This person submits `view` with `values`.
    pub async fn submit_view(&self, view: &Value, values: Value) -> Acked {
        let mut view = view.clone();
        view["state"] = json!({ "values": values });
        self.send_interaction(json!({"type": "view_submission", "view": view}))
            .await
    }
}
