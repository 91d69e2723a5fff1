//! Test helpers: the app on port 0, a real HTTP stand-in for Slack's Web API, signed requests,
//! and DynamoDB Local on 127.0.0.1. Nothing here talks to an address outside the loopback.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use slack_once::Application;
use slack_once::config::{Config, Secret};
use slack_once::ledger::{DynamoLedger, Ledger, MemoryLedger};
use tokio::sync::oneshot;

pub const SECRET: &str = "test-signing-secret";
pub const TOKEN: &str = "xoxb-test-token";
pub const BOT_USER: &str = "UBOT";

/// Serves `router` on a free port of 127.0.0.1 until the returned sender is dropped.
pub async fn serve_loopback(router: Router) -> (SocketAddr, oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    (addr, tx)
}

// ---------------------------------------------------------------- Slack stand-in

/// What the stand-in does with the next `chat.postMessage`.
#[derive(Clone, Debug)]
pub enum Behaviour {
    /// `{"ok": true}`: the message is posted.
    Ok,
    /// HTTP 429 with `Retry-After` in seconds: nothing posted.
    RateLimited(u64),
    /// This HTTP status with an empty body: nothing posted.
    Status(u16),
    /// `{"ok": false, "error": code}`; `posted` says whether Slack posted it anyway (as it may
    /// for `internal_error`).
    OkFalse { code: &'static str, posted: bool },
    /// Wait, then post.
    Delay(Duration),
    /// Never answer and never post: a request lost on its way to Slack.
    Hang,
    /// Post, then never answer: the answer is lost on its way back.
    PostThenHang,
}

#[derive(Clone, Debug)]
pub struct Post {
    pub authorization: Option<String>,
    /// The message as Slack holds it (a posted one), or the request's arguments (received).
    pub body: serde_json::Value,
    /// The `ts` Slack gave the message (empty until posted).
    pub ts: String,
}

/// What the stand-in does with the next conversations.replies / .history call.
#[derive(Clone, Debug)]
pub enum LookupBehaviour {
    /// HTTP 429 with `Retry-After` in seconds.
    RateLimited(u64),
    /// `{"ok": false, "error": code}`.
    Error(&'static str),
}

/// The app the tests' events are for (their `api_app_id`, team and bot user).
pub const APP_ID: &str = "A0001";
pub const TEAM: &str = "T0001";
pub const BOT_ID: &str = "B0001";

/// The messages the tests' events are about, by channel: every stand-in's conversations hold
/// them, as Slack's do (the message an event is about exists in its conversation).
static EVENT_MESSAGES: Mutex<Option<HashMap<String, Vec<serde_json::Value>>>> = Mutex::new(None);

/// Records the message a signed event body is about (see [`EVENT_MESSAGES`]), when a person
/// posted it (the tests' bots' messages are the stand-ins' own).
pub fn register_event_message(body: &[u8]) {
    let by_a_bot = serde_json::from_slice::<serde_json::Value>(body)
        .is_ok_and(|v| !v["event"]["bot_id"].is_null() || !v["event"]["app_id"].is_null());
    if by_a_bot {
        return;
    }
    let mut scratch = slack_once::testing::Workspace::new(identity());
    scratch.add_event_message(body);
    let mut all = EVENT_MESSAGES.lock().unwrap();
    let all = all.get_or_insert_with(HashMap::new);
    for message in scratch.messages() {
        let channel = message["channel"].as_str().unwrap_or_default().to_string();
        all.entry(channel).or_default().push(message.clone());
    }
}

fn identity() -> slack_once::testing::Identity {
    slack_once::testing::Identity {
        team: TEAM.into(),
        app_id: APP_ID.into(),
        bot_id: BOT_ID.into(),
        bot_user: BOT_USER.into(),
    }
}

struct StandinState {
    workspace: slack_once::testing::Workspace,
    /// When set, a request with another bearer token gets `ok:false, invalid_auth`.
    required_token: Option<String>,
    script: VecDeque<Behaviour>,
    /// Until then, every chat.postMessage answers HTTP 500 and posts nothing.
    outage_until: Option<tokio::time::Instant>,
    lookup_script: VecDeque<LookupBehaviour>,
    /// When set, conversations.replies / conversations.history answer `ok:false` with it.
    lookup_error: Option<&'static str>,
    /// At most this many look-ups a minute per method (Slack's 1 a minute for new commercially
    /// distributed apps since 2025): more answer 429 with the seconds left in `Retry-After`.
    lookups_per_minute: Option<usize>,
    lookup_times: HashMap<String, Vec<tokio::time::Instant>>,
    lookups: usize,
    /// The query of every look-up request, answered or not.
    lookup_queries: Vec<HashMap<String, String>>,
    /// Every post request received, in order.
    received: Vec<Post>,
    /// The bearer token each message was posted with, by `ts`.
    posted_with: HashMap<String, Option<String>>,
    /// Every other write method called: (method, arguments), in order.
    calls: Vec<(String, serde_json::Value)>,
    /// Behaviours for the next calls of other methods, by method.
    method_script: HashMap<String, VecDeque<Behaviour>>,
    /// `HEAD api.test` requests: connections opened ahead of a first call.
    warm_ups: usize,
    /// How many of each channel's event messages are in the workspace already.
    synced: HashMap<String, usize>,
    /// Whether every request's arguments are kept (`received`, `calls`, `lookup_queries`);
    /// a long soak keeps only the counts.
    keep_requests: bool,
    /// Requests per method (`response_url` for posts to a response URL), kept always.
    counts: HashMap<String, usize>,
    /// Faults drawn at random for the calls no script decides.
    random: Option<RandomFaults>,
    /// The faults drawn so far: (method, behaviour's name) → count.
    drawn: HashMap<(String, String), u64>,
}

/// Slack's faults at random, each at its rate per 10,000 calls, drawn from a seed for every
/// call no script decides: on writes (chat.postMessage and every `chat.`, `reactions.`,
/// `assistant.` and `views.` method), on posts to response URLs, and on look-ups.
#[derive(Clone, Debug)]
pub struct RandomFaults {
    pub writes: Vec<(u64, Behaviour)>,
    pub hooks: Vec<(u64, Behaviour)>,
    pub lookups: Vec<(u64, LookupBehaviour)>,
    pub seed: u64,
}

impl RandomFaults {
    fn roll(&mut self) -> u64 {
        // xorshift64*
        self.seed ^= self.seed >> 12;
        self.seed ^= self.seed << 25;
        self.seed ^= self.seed >> 27;
        self.seed.wrapping_mul(0x2545_F491_4F6C_DD1D) % 10_000
    }

    fn pick<T: Clone>(roll: u64, table: &[(u64, T)]) -> Option<T> {
        let mut upto = 0;
        table.iter().find_map(|(rate, b)| {
            upto += rate;
            (roll < upto).then(|| b.clone())
        })
    }
}

/// Whether `method` writes to Slack (the random write faults apply to it).
fn is_write(method: &str) -> bool {
    ["chat.", "reactions.", "assistant.", "views."]
        .iter()
        .any(|p| method.starts_with(p))
}

impl StandinState {
    /// The behaviour of the next call of `method`: its script's, else a random fault's (or
    /// none: `Ok`).
    fn next_behaviour(&mut self, method: &str) -> Behaviour {
        let scripted = match method {
            "chat.postMessage" => self.script.pop_front(),
            m => self.method_script.get_mut(m).and_then(|q| q.pop_front()),
        };
        if let Some(b) = scripted {
            return b;
        }
        let drawn = match self.random.as_mut() {
            Some(r) => {
                let roll = r.roll();
                match method {
                    "response_url" => RandomFaults::pick(roll, &r.hooks),
                    m if is_write(m) => RandomFaults::pick(roll, &r.writes),
                    _ => None,
                }
            }
            None => None,
        };
        match drawn {
            Some(b) => {
                let name = format!("{b:?}");
                *self.drawn.entry((method.to_string(), name)).or_default() += 1;
                b
            }
            None => Behaviour::Ok,
        }
    }

    /// The look-up fault of the next look-up: its script's, else a random one's.
    fn next_lookup(&mut self, method: &str) -> Option<LookupBehaviour> {
        if let Some(b) = self.lookup_script.pop_front() {
            return Some(b);
        }
        let r = self.random.as_mut()?;
        let roll = r.roll();
        let b = RandomFaults::pick(roll, &r.lookups)?;
        *self
            .drawn
            .entry((method.to_string(), format!("{b:?}")))
            .or_default() += 1;
        Some(b)
    }
}

impl StandinState {
    /// The event messages of `channel` are in the conversation (see [`EVENT_MESSAGES`]).
    fn sync(&mut self, channel: &str) {
        let all = EVENT_MESSAGES.lock().unwrap();
        if let Some(messages) = all.as_ref().and_then(|a| a.get(channel)) {
            // Only those registered since the last sync (a soak registers thousands).
            let synced = self.synced.entry(channel.to_string()).or_insert(0);
            for m in &messages[(*synced).min(messages.len())..] {
                self.workspace.add_message(m.clone());
            }
            *synced = messages.len();
        }
    }

    fn refused(&self, authorization: Option<&String>) -> bool {
        self.required_token
            .as_ref()
            .is_some_and(|t| authorization != Some(t))
    }
}

/// A real HTTP server on 127.0.0.1 standing in for `https://slack.com/api`, serving a
/// [`slack_once::testing::Workspace`] as Slack does, with faults to script.
pub struct SlackStandin {
    pub base_url: String,
    state: Arc<Mutex<StandinState>>,
    _shutdown: oneshot::Sender<()>,
}

impl SlackStandin {
    pub async fn start() -> Self {
        let state = Arc::new(Mutex::new(StandinState {
            workspace: slack_once::testing::Workspace::new(identity()),
            required_token: None,
            script: VecDeque::new(),
            outage_until: None,
            lookup_script: VecDeque::new(),
            lookup_error: None,
            lookups_per_minute: None,
            lookup_times: HashMap::new(),
            lookups: 0,
            lookup_queries: Vec::new(),
            received: Vec::new(),
            posted_with: HashMap::new(),
            calls: Vec::new(),
            method_script: HashMap::new(),
            warm_ups: 0,
            synced: HashMap::new(),
            keep_requests: true,
            counts: HashMap::new(),
            random: None,
            drawn: HashMap::new(),
        }));
        let app = Router::new()
            .route("/api/chat.postMessage", post(post_message))
            .route(
                "/api/api.test",
                axum::routing::head(warm_up).post(other_method_at_api_test),
            )
            .route("/api/{method}", post(other_method))
            .route("/commands/{*rest}", post(hook))
            .route("/actions/{*rest}", post(hook))
            // Reads as Slack takes them: a GET query, or a POST form (Ctx::read posts one).
            .route(
                "/api/conversations.replies",
                axum::routing::get(lookup).post(lookup),
            )
            .route(
                "/api/conversations.history",
                axum::routing::get(lookup).post(lookup),
            )
            .with_state(state.clone());
        let (addr, shutdown) = serve_loopback(app).await;
        Self {
            base_url: format!("http://{addr}/api"),
            state,
            _shutdown: shutdown,
        }
    }

    /// From now on, only `token` is good: any other gets `ok:false` with `invalid_auth` (as
    /// after a rotation) and changes nothing.
    pub fn require_token(&self, token: &str) {
        self.state.lock().unwrap().required_token = Some(format!("Bearer {token}"));
    }

    /// Queues behaviours for the next calls of `method` (other than chat.postMessage): `Ok`,
    /// `Hang`, `PostThenHang` (applied, never answered), `OkFalse`, `Status`, `RateLimited`.
    pub fn script_method(&self, method: &str, behaviours: impl IntoIterator<Item = Behaviour>) {
        self.state
            .lock()
            .unwrap()
            .method_script
            .entry(method.to_string())
            .or_default()
            .extend(behaviours);
    }

    /// The stand-in's origin (`http://127.0.0.1:PORT`): its response URLs live there.
    pub fn origin(&self) -> String {
        self.base_url.trim_end_matches("/api").to_string()
    }

    /// Streams stop taking appends this long after they start (Slack: about 5 minutes).
    pub fn set_stream_expiry(&self, expiry: Duration) {
        self.state
            .lock()
            .unwrap()
            .workspace
            .set_stream_expiry(expiry);
    }

    /// Works on the stand-in's workspace directly (a session's statuses, a person's stop).
    pub fn with_workspace<T>(&self, f: impl FnOnce(&mut slack_once::testing::Workspace) -> T) -> T {
        f(&mut self.state.lock().unwrap().workspace)
    }

    /// The assistant calls: (method, channel, thread_ts, arguments).
    pub fn assistant_calls(&self) -> Vec<(String, String, String, serde_json::Value)> {
        self.state
            .lock()
            .unwrap()
            .workspace
            .assistant_calls()
            .to_vec()
    }

    /// The views open or pushed, as Slack shows them.
    pub fn views(&self) -> Vec<serde_json::Value> {
        self.state.lock().unwrap().workspace.views().to_vec()
    }

    /// Every other write method called, in order: (method, arguments). Posts to a response
    /// URL are the method `response_url`.
    pub fn calls(&self) -> Vec<(String, serde_json::Value)> {
        self.state.lock().unwrap().calls.clone()
    }

    /// How many times `method` was called.
    pub fn calls_of(&self, method: &str) -> usize {
        self.calls().iter().filter(|(m, _)| m == method).count()
    }

    /// The reactions in place: (channel, ts, name).
    pub fn reactions(&self) -> Vec<(String, String, String)> {
        self.state.lock().unwrap().workspace.reactions()
    }

    pub fn ephemerals(&self) -> Vec<serde_json::Value> {
        self.state.lock().unwrap().workspace.ephemerals().to_vec()
    }

    /// Queues behaviours for the next posts; after the queue, every post succeeds.
    pub fn script(&self, behaviours: impl IntoIterator<Item = Behaviour>) {
        self.state.lock().unwrap().script.extend(behaviours);
    }

    /// For `duration` from now, every chat.postMessage answers HTTP 500 and posts nothing.
    pub fn outage(&self, duration: Duration) {
        self.state.lock().unwrap().outage_until = Some(tokio::time::Instant::now() + duration);
    }

    /// Makes conversations.replies / .history fail with this Slack error code.
    pub fn fail_lookups(&self, code: &'static str) {
        self.state.lock().unwrap().lookup_error = Some(code);
    }

    /// Queues behaviours for the next look-ups; after the queue, look-ups are answered.
    pub fn script_lookups(&self, behaviours: impl IntoIterator<Item = LookupBehaviour>) {
        self.state.lock().unwrap().lookup_script.extend(behaviours);
    }

    /// Slack's 2025 limits for commercially distributed apps outside the Marketplace: `n`
    /// look-ups a minute per method (15 messages a page always).
    pub fn limit_lookups_per_minute(&self, n: usize) {
        self.state.lock().unwrap().lookups_per_minute = Some(n);
    }

    /// How many conversations.replies / .history calls were answered.
    pub fn lookups(&self) -> usize {
        self.state.lock().unwrap().lookups
    }

    /// The query of every look-up request received, answered or refused.
    pub fn lookup_queries(&self) -> Vec<HashMap<String, String>> {
        self.state.lock().unwrap().lookup_queries.clone()
    }

    /// Adds `count` messages of people to `channel` (in the thread `thread_ts`), newer than
    /// everything, so that a look-up has pages to turn.
    pub fn add_other_messages(&self, channel: &str, thread_ts: Option<&str>, count: usize) {
        let mut s = self.state.lock().unwrap();
        s.sync(channel);
        s.workspace.add_chatter(channel, thread_ts, count);
    }

    /// Adds a message of another app carrying `metadata` (see
    /// [`slack_once::testing::Workspace::add_foreign`]); returns its `ts`.
    pub fn add_foreign_message(
        &self,
        channel: &str,
        thread_ts: Option<&str>,
        metadata: serde_json::Value,
    ) -> String {
        let mut s = self.state.lock().unwrap();
        s.sync(channel);
        s.workspace.add_foreign(channel, thread_ts, metadata)
    }

    /// From now on, every call no script decides draws its fault from `faults` (`None`: no
    /// more random faults).
    pub fn random_faults(&self, faults: Option<RandomFaults>) {
        self.state.lock().unwrap().random = faults;
    }

    /// The random faults drawn so far: (method, behaviour) → count.
    pub fn faults_drawn(&self) -> HashMap<(String, String), u64> {
        self.state.lock().unwrap().drawn.clone()
    }

    /// From now on only the count of requests per method is kept, not their arguments
    /// (`received`, `calls` and `lookup_queries` stay as they are): for a soak of a million.
    pub fn keep_counts_only(&self) {
        self.state.lock().unwrap().keep_requests = false;
    }

    /// Requests received per method so far (`response_url` for posts to a response URL).
    pub fn counts(&self) -> HashMap<String, usize> {
        self.state.lock().unwrap().counts.clone()
    }

    /// A message of `channel` and its thread's replies, as Slack holds them.
    pub fn thread(&self, channel: &str, ts: &str) -> Vec<serde_json::Value> {
        let mut s = self.state.lock().unwrap();
        s.sync(channel);
        s.workspace.thread(channel, ts)
    }

    /// How many messages this app has in Slack now.
    pub fn posted_count(&self) -> usize {
        self.state.lock().unwrap().workspace.ours_count()
    }

    /// This app's messages in Slack (what a user sees of the bot: updates applied, deletions
    /// removed), oldest first.
    pub fn posted(&self) -> Vec<Post> {
        self.posted_from(0)
    }

    /// This app's messages from the `first`-th (0: the oldest) on, as [`Self::posted`].
    pub fn posted_from(&self, first: usize) -> Vec<Post> {
        let s = self.state.lock().unwrap();
        s.workspace
            .ours_from(first)
            .into_iter()
            .map(|m| {
                let ts = m["ts"].as_str().unwrap_or_default().to_string();
                Post {
                    authorization: s.posted_with.get(&ts).cloned().flatten(),
                    body: m,
                    ts,
                }
            })
            .collect()
    }

    /// How many times a connection was opened ahead of a first call (`HEAD api.test`).
    pub fn warm_ups(&self) -> usize {
        self.state.lock().unwrap().warm_ups
    }

    pub fn received(&self) -> Vec<Post> {
        self.state.lock().unwrap().received.clone()
    }

    /// Posts per event id, read from the metadata slack-once attaches to each reply.
    pub fn posts_per_event(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for post in self.posted() {
            let id = post.body["metadata"]["event_payload"]["slack_once"]["event_id"]
                .as_str()
                .unwrap_or("?")
                .to_string();
            *counts.entry(id).or_default() += 1;
        }
        counts
    }
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

async fn post_message(
    State(state): State<Arc<Mutex<StandinState>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let args = arguments(&headers, &body);
    let authorization = bearer(&headers);
    let behaviour = {
        let mut s = state.lock().unwrap();
        *s.counts.entry("chat.postMessage".into()).or_default() += 1;
        if s.keep_requests {
            s.received.push(Post {
                authorization: authorization.clone(),
                body: args.clone(),
                ts: String::new(),
            });
        }
        if s.refused(authorization.as_ref()) {
            return json_response(serde_json::json!({"ok": false, "error": "invalid_auth"}));
        }
        match s.outage_until {
            Some(until) if tokio::time::Instant::now() < until => Behaviour::Status(500),
            _ => s.next_behaviour("chat.postMessage"),
        }
    };
    scripted(behaviour, move || {
        let mut s = state.lock().unwrap();
        s.sync(args["channel"].as_str().unwrap_or_default());
        let answer = s.workspace.call("chat.postMessage", &args);
        if let Some(ts) = answer["ts"].as_str()
            && s.keep_requests
        {
            s.posted_with.insert(ts.to_string(), authorization);
        }
        json_response(answer)
    })
    .await
}

/// The arguments of a Web API request: a JSON body, or a form (as a JSON object of strings).
fn arguments(headers: &HeaderMap, body: &[u8]) -> serde_json::Value {
    let json = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if json {
        return serde_json::from_slice(body).unwrap_or(serde_json::Value::Null);
    }
    serde_json::Value::Object(query_pairs(&String::from_utf8_lossy(body)))
}

fn query_pairs(text: &str) -> serde_json::Map<String, serde_json::Value> {
    text.split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (percent_decode(k), percent_decode(v).into()))
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
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

/// Every other method, as Slack answers it (see [`slack_once::testing::Workspace::call`]).
async fn other_method(
    State(state): State<Arc<Mutex<StandinState>>>,
    axum::extract::Path(method): axum::extract::Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let args = arguments(&headers, &body);
    let authorization = bearer(&headers);
    let behaviour = {
        let mut s = state.lock().unwrap();
        *s.counts.entry(method.clone()).or_default() += 1;
        if s.keep_requests {
            s.calls.push((method.clone(), args.clone()));
        }
        if s.refused(authorization.as_ref()) {
            return json_response(serde_json::json!({"ok": false, "error": "invalid_auth"}));
        }
        s.next_behaviour(&method)
    };
    scripted(behaviour, move || {
        let mut s = state.lock().unwrap();
        s.sync(args["channel"].as_str().unwrap_or_default());
        json_response(s.workspace.call(&method, &args))
    })
    .await
}

/// A post to a response URL, as Slack answers it, with the behaviours scripted for the method
/// `response_url`.
async fn hook(
    State(state): State<Arc<Mutex<StandinState>>>,
    uri: http::Uri,
    body: Bytes,
) -> Response {
    let args: serde_json::Value = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    let behaviour = {
        let mut s = state.lock().unwrap();
        *s.counts.entry("response_url".into()).or_default() += 1;
        if s.keep_requests {
            s.calls.push(("response_url".into(), args.clone()));
        }
        s.next_behaviour("response_url")
    };
    let path = uri.path().to_string();
    scripted(behaviour, move || {
        let mut s = state.lock().unwrap();
        let (status, answer) = s.workspace.respond(&path, &args);
        (
            StatusCode::from_u16(status).unwrap(),
            [("content-type", "text/plain")],
            slack_once::testing::hook_answer(&answer),
        )
            .into_response()
    })
    .await
}

async fn warm_up(State(state): State<Arc<Mutex<StandinState>>>) -> StatusCode {
    state.lock().unwrap().warm_ups += 1;
    // Slack's api.test is a GET or POST method: a HEAD has no answer of its own.
    StatusCode::OK
}

async fn other_method_at_api_test(
    state: State<Arc<Mutex<StandinState>>>,
    headers: http::HeaderMap,
    body: Bytes,
) -> Response {
    other_method(
        state,
        axum::extract::Path("api.test".to_string()),
        headers,
        body,
    )
    .await
}

/// Answers a Web API call as `behaviour` scripts it; `apply` does the call's work and gives
/// the `ok` answer. Slack finishes a call it accepted even if the caller has gone, so a delayed
/// call runs on its own.
async fn scripted(
    behaviour: Behaviour,
    apply: impl FnOnce() -> Response + Send + 'static,
) -> Response {
    match behaviour {
        Behaviour::Ok => apply(),
        Behaviour::Delay(d) => tokio::spawn(async move {
            tokio::time::sleep(d).await;
            apply()
        })
        .await
        .unwrap(),
        Behaviour::Hang => std::future::pending().await,
        Behaviour::PostThenHang => {
            apply();
            std::future::pending().await
        }
        Behaviour::RateLimited(secs) => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", secs.to_string())],
            "",
        )
            .into_response(),
        Behaviour::Status(code) => StatusCode::from_u16(code).unwrap().into_response(),
        Behaviour::OkFalse { code, posted } => {
            if posted {
                apply();
            }
            json_response(serde_json::json!({"ok": false, "error": code}))
        }
    }
}

/// conversations.replies (with `ts`) and conversations.history, as Slack answers them (see
/// [`slack_once::testing::Workspace::history`]), with the scripted faults and rate limits.
async fn lookup(
    State(state): State<Arc<Mutex<StandinState>>>,
    headers: HeaderMap,
    uri: http::Uri,
    body: Bytes,
) -> Response {
    let form = String::from_utf8_lossy(&body);
    let query: HashMap<String, String> = query_pairs(uri.query().unwrap_or(""))
        .into_iter()
        .chain(query_pairs(&form))
        .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_string()))
        .collect();
    let method = uri
        .path()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let mut s = state.lock().unwrap();
    *s.counts.entry(method.clone()).or_default() += 1;
    if s.keep_requests {
        s.lookup_queries.push(query.clone());
    }
    if s.refused(bearer(&headers).as_ref()) {
        return json_response(serde_json::json!({"ok": false, "error": "invalid_auth"}));
    }
    match s.next_lookup(&method) {
        Some(LookupBehaviour::RateLimited(secs)) => {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", secs.to_string())],
                "",
            )
                .into_response();
        }
        Some(LookupBehaviour::Error(code)) => {
            return json_response(serde_json::json!({"ok": false, "error": code}));
        }
        None => {}
    }
    if let Some(code) = s.lookup_error {
        return json_response(serde_json::json!({"ok": false, "error": code}));
    }
    if let Some(per_minute) = s.lookups_per_minute {
        let now = tokio::time::Instant::now();
        let times = s.lookup_times.entry(method.clone()).or_default();
        times.retain(|t| now.duration_since(*t) < Duration::from_secs(60));
        if times.len() >= per_minute {
            let wait = Duration::from_secs(60) - now.duration_since(times[0]);
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", wait.as_secs().max(1).to_string())],
                "",
            )
                .into_response();
        }
        times.push(now);
    }
    s.lookups += 1;
    let channel = query.get("channel").cloned().unwrap_or_default();
    s.sync(&channel);
    let answer = if method == "conversations.replies" {
        s.workspace.replies(&query)
    } else {
        s.workspace.history(&query)
    };
    json_response(answer)
}

fn json_response(value: serde_json::Value) -> Response {
    ([("content-type", "application/json")], value.to_string()).into_response()
}

// ---------------------------------------------------------------- signed requests

pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The headers Slack signs `body` with at `timestamp`. The message the body is about is in
/// Slack's conversations from then on, as it would be ([`register_event_message`]).
pub fn signed_headers(secret: &str, timestamp: u64, body: &[u8]) -> Vec<(String, String)> {
    register_event_message(body);
    vec![
        ("content-type".into(), "application/json".into()),
        ("x-slack-request-timestamp".into(), timestamp.to_string()),
        (
            "x-slack-signature".into(),
            slack_once::signature::sign(&Secret::new(secret), timestamp, body),
        ),
    ]
}

/// The `ts` of the message an event id of these tests carries: one message per event id, as in
/// Slack (every copy of one event carries the same message; two events, two messages).
pub fn ts_of(event_id: &str) -> String {
    let h = event_id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    // Between 2020 and 2023: an event's message is older than anything the bot posts.
    format!(
        "{}.{:06}",
        1_600_000_000 + h % 100_000_000,
        (h >> 40) % 1_000_000
    )
}

/// The ledger key of a message: its identity (team, channel, `ts`).
pub fn message_key(team: &str, channel: &str, ts: &str) -> String {
    format!("msg-{team}-{channel}-{}", ts.replace('.', "_"))
}

/// The ledger key of the message an [`app_mention`] of this event id carries.
pub fn mention_key(event_id: &str) -> String {
    message_key("T0001", "C0001", &ts_of(event_id))
}

/// An `app_mention` envelope, as Slack sends it.
pub fn app_mention(event_id: &str, text: &str) -> String {
    let ts = ts_of(event_id);
    serde_json::json!({
        "token": "unused", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
        "event_id": event_id, "event_time": 1_700_000_000,
        "event": {
            "type": "app_mention", "user": "U0001", "text": format!("<@{BOT_USER}> {text}"),
            "ts": ts, "channel": "C0001", "event_ts": ts
        },
        "authorizations": [{"enterprise_id": null, "team_id": "T0001", "user_id": BOT_USER, "is_bot": true}]
    })
    .to_string()
}

/// A direct message to the bot (`message.im`) with the given author.
pub fn direct_message(event_id: &str, user: &str, text: &str) -> String {
    let ts = ts_of(event_id);
    serde_json::json!({
        "token": "unused", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
        "event_id": event_id, "event_time": 1_700_000_000,
        "event": {
            "type": "message", "channel_type": "im", "user": user, "text": text,
            "ts": ts, "channel": "D0001", "event_ts": ts
        },
        "authorizations": [{"team_id": "T0001", "user_id": BOT_USER, "is_bot": true}]
    })
    .to_string()
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }

    pub fn outcome(&self) -> String {
        self.json()["outcome"].as_str().unwrap_or("").to_string()
    }
}

/// A plain HTTP client for 127.0.0.1.
#[derive(Clone)]
pub struct HttpClient(Client<HttpConnector, Full<Bytes>>);

impl Default for HttpClient {
    fn default() -> Self {
        // Idle connections are dropped well before the server closes them (it waits
        // HEADER_READ_TIMEOUT, 10 s, for a next request): reusing one the server is closing
        // fails the request (`SendRequest`) on a loaded machine.
        Self(
            Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(4))
                .build_http(),
        )
    }
}

impl HttpClient {
    pub async fn request(
        &self,
        method: &str,
        url: &str,
        headers: &[(String, String)],
        body: impl Into<Bytes>,
    ) -> Answer {
        self.try_request(method, url, headers, body)
            .await
            .unwrap_or_else(|e| panic!("request to {url} failed: {e}"))
    }

    pub async fn try_request(
        &self,
        method: &str,
        url: &str,
        headers: &[(String, String)],
        body: impl Into<Bytes>,
    ) -> Result<Answer, Box<dyn std::error::Error + Send + Sync>> {
        let mut request = http::Request::builder().method(method).uri(url);
        for (k, v) in headers {
            request = request.header(k.as_str(), v.as_str());
        }
        let response = self
            .0
            .request(request.body(Full::new(body.into()))?)
            .await?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await?.to_bytes();
        Ok(Answer {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }
}

// ---------------------------------------------------------------- the app

pub struct TestApp {
    pub addr: SocketAddr,
    pub slack: SlackStandin,
    pub http: HttpClient,
    _shutdown: oneshot::Sender<()>,
}

#[derive(Default)]
pub struct Options {
    pub vars: Vec<(&'static str, String)>,
    pub ledger: Option<Arc<dyn Ledger>>,
    /// The app answering (the reference bot when unset).
    pub app: Option<slack_once::app::App>,
}

/// The reference bot on a DynamoDB ledger reached at `url` (DynamoDB Local, or a proxy in front
/// of it), table `table`, with `vars` beside the test configuration.
pub async fn spawn_app_on_ledger(
    url: &str,
    table: impl Into<String>,
    vars: Vec<(&'static str, String)>,
) -> TestApp {
    let ledger = Arc::new(DynamoLedger::new(dynamodb_client(url), table));
    spawn_app_with(Options {
        vars,
        ledger: Some(ledger as Arc<dyn Ledger>),
        app: None,
    })
    .await
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(Options::default()).await
}

/// `app` answering, with the defaults otherwise.
pub async fn spawn_bot(app: slack_once::app::App) -> TestApp {
    spawn_app_with(Options {
        app: Some(app),
        ..Default::default()
    })
    .await
}

/// The test configuration (the test secret and token, `slack` as the Web API, port 0), with
/// `extra` over it.
pub fn test_config(slack: &SlackStandin, extra: &[(&str, &str)]) -> Config {
    let mut vars: HashMap<String, String> = [
        ("SLACK_SIGNING_SECRET", SECRET.to_string()),
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
        ("LISTEN_ADDR", "127.0.0.1:0".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for (k, v) in extra {
        vars.insert(k.to_string(), v.to_string());
    }
    Config::from_lookup(|k| vars.get(k).cloned()).expect("test configuration")
}

pub async fn spawn_app_with(options: Options) -> TestApp {
    let slack = SlackStandin::start().await;
    let vars: Vec<(&str, &str)> = options.vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let config = test_config(&slack, &vars);
    let ledger = options
        .ledger
        .unwrap_or_else(|| Arc::new(MemoryLedger::new()) as Arc<dyn Ledger>);
    let app = options.app.unwrap_or_else(slack_once::app::reference_app);
    let app = Application::with_parts(config, ledger, app);
    let server = app.bind().await.unwrap();
    let addr = server.local_addr();
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(server.run_until(async {
        let _ = rx.await;
    }));
    TestApp {
        addr,
        slack,
        http: HttpClient::default(),
        _shutdown: tx,
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Sends `body` signed now, as Slack would, with `X-Slack-Retry-Num` when `retry` is set.
    pub async fn send(&self, body: &str, retry: Option<u32>) -> Answer {
        let mut headers = signed_headers(SECRET, now_unix(), body.as_bytes());
        if let Some(n) = retry {
            headers.push(("x-slack-retry-num".into(), n.to_string()));
            headers.push(("x-slack-retry-reason".into(), "http_timeout".into()));
        }
        self.send_raw(&headers, body.as_bytes().to_vec()).await
    }

    pub async fn send_raw(&self, headers: &[(String, String)], body: Vec<u8>) -> Answer {
        self.http
            .request("POST", &self.url("/slack/events"), headers, body)
            .await
    }
}

// ---------------------------------------------------------------- DynamoDB Local

pub const DYNAMODB_SCRIPT: &str = "scripts/dynamodb-local.sh start";

/// An SDK client for a local server at `endpoint`, with test credentials, in us-east-1.
macro_rules! local_client {
    ($sdk:ident, $endpoint:expr_2021) => {{
        use $sdk::config::{BehaviorVersion, Credentials, Region};
        let config = $sdk::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url($endpoint)
            .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
            .http_client(slack_once::aws::new_http_client())
            .build();
        $sdk::Client::from_conf(config)
    }};
}

/// DynamoDB Local's endpoint on 127.0.0.1 (port from DYNAMODB_LOCAL_PORT, default 8000).
/// Fails the test, naming the script, when nothing answers there: never skips silently.
pub fn dynamodb_endpoint() -> String {
    let port: u16 = std::env::var("DYNAMODB_LOCAL_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(8000);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    if std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
        panic!(
            "DynamoDB Local is not answering on 127.0.0.1:{port}: start it with `{DYNAMODB_SCRIPT}` \
             (scripts/test.sh starts and stops it for you)"
        );
    }
    format!("http://{addr}")
}

/// The variables of a `slack-once` process posting to `slack` with its ledger in `table` at
/// `endpoint`.
pub fn bot_vars(slack: &SlackStandin, endpoint: &str, table: &str) -> Vec<(&'static str, String)> {
    let mut vars = dynamodb_env(endpoint);
    vars.extend([
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
        ("DEDUP_TABLE", table.to_string()),
    ]);
    vars
}

/// The variables that point the SDK (and the binary) at DynamoDB Local.
pub fn dynamodb_env(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint.to_string()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        // Keep the SDK away from ~/.aws and the instance metadata service.
        ("AWS_CONFIG_FILE", "/dev/null".into()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]
}

pub fn dynamodb_client(endpoint: &str) -> aws_sdk_dynamodb::Client {
    local_client!(aws_sdk_dynamodb, endpoint)
}

/// A fresh table on DynamoDB Local, and a ledger on it.
pub async fn fresh_table(endpoint: &str) -> (String, Arc<DynamoLedger>) {
    let client = dynamodb_client(endpoint);
    let table = format!("test-{}", uuid::Uuid::new_v4().simple());
    DynamoLedger::create_table(&client, &table)
        .await
        .expect("create the test table on DynamoDB Local");
    (table.clone(), Arc::new(DynamoLedger::new(client, table)))
}

// ---------------------------------------------------------------- the built binary

/// One `slack-once` process in local mode, killed (by its PID) when dropped.
pub struct BotProcess {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    pub log: Arc<Mutex<LogBook>>,
}

/// What a process printed: its last lines (all of them unless the spawn said how many to
/// keep), and counts of everything it printed.
#[derive(Default)]
pub struct LogBook {
    lines: VecDeque<String>,
    /// At most this many lines are kept (the oldest go first); 0: all.
    keep: usize,
    /// Bytes printed, newlines included.
    pub bytes: u64,
    /// Lines printed.
    pub printed: u64,
    /// Embedded-metric-format lines printed (one per delivery or message).
    pub metric_lines: u64,
    /// What was read in chunks once the process had started (lean spawns), its last 64 KiB.
    tail: Vec<u8>,
}

impl LogBook {
    fn push(&mut self, line: String) {
        self.bytes += line.len() as u64 + 1;
        self.printed += 1;
        if line.starts_with('{') && line.contains("\"_aws\"") {
            self.metric_lines += 1;
        }
        if self.keep > 0 && self.lines.len() == self.keep {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    /// Output read in chunks (not split into lines): counted, and its last 64 KiB kept.
    fn push_chunk(&mut self, chunk: &[u8]) {
        const TAIL: usize = 64 * 1024;
        self.bytes += chunk.len() as u64;
        self.printed += chunk.iter().filter(|b| **b == b'\n').count() as u64;
        // A metric line holds one "_aws" member; the tail's end is searched with the chunk, so
        // one cut in two is still found.
        let carry = self.tail.len().min(8);
        let mut seen = self.tail[self.tail.len() - carry..].to_vec();
        seen.extend_from_slice(chunk);
        self.metric_lines += seen.windows(8).filter(|w| *w == b"\"_aws\":{").count() as u64;
        self.tail.extend_from_slice(chunk);
        if self.tail.len() > TAIL {
            self.tail.drain(..self.tail.len() - TAIL);
        }
    }

    /// The lines kept (and the tail of what was read in chunks), joined.
    pub fn join(&self, separator: &str) -> String {
        let mut all: Vec<String> = self.lines.iter().cloned().collect();
        if !self.tail.is_empty() {
            all.push(String::from_utf8_lossy(&self.tail).into_owned());
        }
        all.join(separator)
    }
}

/// How [`BotProcess::spawn_program_with`] starts a process.
#[derive(Clone, Debug)]
pub struct Spawn {
    /// Lines of its log to keep (0: all).
    pub keep_lines: usize,
    /// Whether SLACK_SIGNING_SECRET is the tests' secret (else only `vars` give secrets, as
    /// `SLACK_SECRETS_ARN` does).
    pub signing_secret_env: bool,
}

impl Default for Spawn {
    fn default() -> Self {
        Self {
            keep_lines: 0,
            signing_secret_env: true,
        }
    }
}

impl BotProcess {
    /// Starts the binary with `vars` (plus the test secret and LISTEN_ADDR=127.0.0.1:0) and
    /// waits until it says where it listens.
    pub fn spawn(vars: &[(&str, String)]) -> Self {
        Self::spawn_with(&[], vars)
    }

    /// Starts `slack-once worker` with `vars` and waits until it receives.
    pub fn spawn_worker(vars: &[(&str, String)]) -> Self {
        Self::spawn_with(&["worker"], vars)
    }

    /// Starts the example bot `name` (built by `cargo test` into target/…/examples/) with `vars`;
    /// `args` may be `["worker"]`.
    pub fn spawn_example(name: &str, args: &[&str], vars: &[(&str, String)]) -> Self {
        let examples = std::env::current_exe()
            .unwrap()
            .parent()
            .and_then(|deps| deps.parent())
            .map(|dir| dir.join("examples"))
            .unwrap();
        let binary = examples.join(name);
        assert!(
            binary.exists(),
            "the example {name} is not built at {}: `cargo test` builds the examples",
            binary.display()
        );
        Self::spawn_program(&binary, args, vars)
    }

    /// Starts the previous release's binary (`args` may be `["worker"]`), which
    /// `scripts/previous-release.sh` builds and `scripts/test.sh` names in
    /// `SLACK_ONCE_PREVIOUS_BIN`.
    pub fn spawn_previous(args: &[&str], vars: &[(&str, String)]) -> Self {
        let binary = std::env::var_os("SLACK_ONCE_PREVIOUS_BIN").expect(
            "SLACK_ONCE_PREVIOUS_BIN is not set: run the tests with scripts/test.sh, which \
             builds the previous release's binary (scripts/previous-release.sh) and names it",
        );
        let binary = std::path::PathBuf::from(binary);
        assert!(binary.exists(), "no binary at {}", binary.display());
        Self::spawn_program(&binary, args, vars)
    }

    fn spawn_with(args: &[&str], vars: &[(&str, String)]) -> Self {
        Self::spawn_program(
            std::path::Path::new(env!("CARGO_BIN_EXE_slack-once")),
            args,
            vars,
        )
    }

    fn spawn_program(program: &std::path::Path, args: &[&str], vars: &[(&str, String)]) -> Self {
        Self::spawn_program_with(program, args, vars, &Spawn::default())
    }

    /// Starts `program` with `args` and `vars` as `how` says, and waits until it says where it
    /// listens (a worker: until it receives).
    pub fn spawn_program_with(
        program: &std::path::Path,
        args: &[&str],
        vars: &[(&str, String)],
        how: &Spawn,
    ) -> Self {
        Self::try_spawn_program_with(program, args, vars, how).unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`Self::spawn_program_with`]; a process that does not start is an error, with its log.
    pub fn try_spawn_program_with(
        program: &std::path::Path,
        args: &[&str],
        vars: &[(&str, String)],
        how: &Spawn,
    ) -> Result<Self, String> {
        use std::io::BufRead;
        let worker = args.first() == Some(&"worker");
        let mut command = std::process::Command::new(program);
        command
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default());
        if how.signing_secret_env {
            command.env("SLACK_SIGNING_SECRET", SECRET);
        }
        command
            .env("LISTEN_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for (k, v) in vars {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("the slack-once binary starts");
        let log = Arc::new(Mutex::new(LogBook {
            keep: how.keep_lines,
            ..LogBook::default()
        }));
        let (tx, rx) = std::sync::mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let (log, tx) = (log.clone(), tx.clone());
            let lean = how.keep_lines > 0;
            std::thread::spawn(move || {
                use std::io::Read;
                let mut reader = std::io::BufReader::new(stream);
                let mut line = String::new();
                let mut started = false;
                loop {
                    if lean && started {
                        // Started: from now on only counted, and its tail kept (a soak's
                        // processes print thousands of lines a second).
                        let mut chunk = [0u8; 64 * 1024];
                        match reader.read(&mut chunk) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => log.lock().unwrap().push_chunk(&chunk[..n]),
                        }
                        continue;
                    }
                    line.clear();
                    match reader.read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                    let line = line.trim_end_matches(['\n', '\r']).to_string();
                    if let Some(addr) = line
                        .split("addr=")
                        .nth(1)
                        .and_then(|rest| rest.split_whitespace().next())
                        .and_then(|a| a.parse::<SocketAddr>().ok())
                    {
                        let _ = tx.send(addr);
                        started = true;
                    }
                    if worker && line.contains("worker: receiving") {
                        let _ = tx.send(SocketAddr::from(([127, 0, 0, 1], 0)));
                        started = true;
                    }
                    log.lock().unwrap().push(line);
                }
            });
        }
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(addr) => Ok(Self { child, addr, log }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!(
                    "slack-once did not start; its log:\n{}",
                    log.lock().unwrap().join("\n")
                ))
            }
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/slack/events", self.addr)
    }

    /// SIGKILL: no cleanup, no release, as when an instance dies.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, as Lambda or a process manager sends it: the process drains and exits.
    pub fn terminate(&self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits, off the runtime's threads, until the process exits: its exit code and its log.
    pub async fn exited(mut self) -> (Option<i32>, String) {
        tokio::task::spawn_blocking(move || {
            let status = self.child.wait().unwrap();
            (status.code(), self.log())
        })
        .await
        .unwrap()
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Bytes, lines and metric lines printed so far.
    pub fn printed(&self) -> (u64, u64, u64) {
        let log = self.log.lock().unwrap();
        (log.bytes, log.printed, log.metric_lines)
    }

    /// The log once `ready` holds of it, or as it is after `limit`: the process's lines are
    /// read from its pipes by other threads, so a line written just before an answer or a
    /// ledger write the test has seen may not be here yet.
    pub async fn log_when(&self, limit: Duration, ready: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let log = self.log();
            if ready(&log) || tokio::time::Instant::now() >= deadline {
                return log;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The log once it holds `deliveries` metrics lines: each delivery prints its line last,
    /// after everything else it logs, so a check for what is absent is then sound.
    pub async fn log_after(&self, deliveries: usize) -> String {
        self.log_when(Duration::from_secs(10), |log| {
            metric_lines(log).len() >= deliveries
        })
        .await
    }
}

impl Drop for BotProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `COMMAND TEXT` by U0001 in C0001 of T0001 (app A0001), as Slack posts it: answered through
/// a response URL on `slack`, with a trigger of its own (the request's identity: Slack's retry
/// of it carries the same).
pub fn command_form(slack: &SlackStandin, command: &str, text: &str) -> String {
    let trigger = slack_once::testing::Workspace::trigger_id();
    let url = format!(
        "{}/commands/T0001/C0001/{}",
        slack.origin(),
        uuid::Uuid::new_v4().simple()
    );
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("command", command),
            ("text", text),
            ("team_id", "T0001"),
            ("api_app_id", "A0001"),
            ("user_id", "U0001"),
            ("channel_id", "C0001"),
            ("trigger_id", &trigger),
            ("response_url", &url),
        ])
        .finish()
}

/// `user` clicking the button `action_id` (with `value`) on this app's message `message` in
/// Slack, as Slack posts the click (`payload=…`), its response URL on `slack`.
pub fn click_form(
    slack: &SlackStandin,
    user: &str,
    action_id: &str,
    value: &str,
    message: &serde_json::Value,
) -> String {
    let channel = message["channel"].as_str().unwrap_or("C0001");
    let ts = message["ts"].as_str().unwrap_or_default();
    let payload = serde_json::json!({
        "type": "block_actions",
        "team": {"id": "T0001"},
        "user": {"id": user, "team_id": "T0001"},
        "api_app_id": "A0001",
        "trigger_id": slack_once::testing::Workspace::trigger_id(),
        "actions": [{"type": "button", "action_id": action_id, "block_id": "b", "value": value,
            "action_ts": format!("{}.{:06}", now_unix(), rand_u32() % 1_000_000)}],
        "container": {"type": "message", "message_ts": ts, "channel_id": channel},
        "channel": {"id": channel},
        "message": message,
        "response_url": format!("{}/actions/T0001/{channel}/{}", slack.origin(),
            uuid::Uuid::new_v4().simple()),
    });
    form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish()
}

fn rand_u32() -> u32 {
    u32::from_le_bytes(uuid::Uuid::new_v4().as_bytes()[..4].try_into().unwrap())
}

/// Delivers a form (a command, an interaction) to `url`, signed now; Slack's retry of it when
/// `retry` is set.
pub async fn deliver_form(http: &HttpClient, url: &str, body: &str, retry: Option<u32>) -> Answer {
    let mut headers = signed_headers(SECRET, now_unix(), body.as_bytes());
    headers[0].1 = "application/x-www-form-urlencoded".into();
    if let Some(n) = retry {
        headers.push(("x-slack-retry-num".into(), n.to_string()));
        headers.push(("x-slack-retry-reason".into(), "http_timeout".into()));
    }
    http.request("POST", url, &headers, body.as_bytes().to_vec())
        .await
}

/// Sends `body` signed now to `url`, with `X-Slack-Retry-Num` when `retry` is set.
/// Delivers `body` to `url` signed now, as Slack would.
pub async fn deliver(http: &HttpClient, url: &str, body: &str, retry: Option<u32>) -> Answer {
    let mut headers = signed_headers(SECRET, now_unix(), body.as_bytes());
    if let Some(n) = retry {
        headers.push(("x-slack-retry-num".into(), n.to_string()));
        headers.push(("x-slack-retry-reason".into(), "http_timeout".into()));
    }
    http.request("POST", url, &headers, body.as_bytes().to_vec())
        .await
}

/// `slack-once standin` (the built binary's stand-in for Slack) on a free port, as the
/// guide's walk-throughs run it, for the app [`slack_once::testing::TestBot`] is (`T0TEST`,
/// `A0TEST`, `B0TEST`, `U0BOT`); killed (by its handle) when dropped.
pub struct StandinProcess {
    child: std::process::Child,
    /// Its Web API base (`http://127.0.0.1:PORT/api`).
    pub base_url: String,
}

impl StandinProcess {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// Started with more options (`--workflow-token-seconds 2`).
    pub async fn start_with(options: &[&str]) -> Self {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"))
            .args(["standin", &port.to_string()])
            .args([
                "--team", "T0TEST", "--app-id", "A0TEST", "--bot-id", "B0TEST",
            ])
            .args(["--bot-user", "U0BOT"])
            .args(options)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the built binary runs its stand-in");
        // Owned from here: dropped (killed and waited for) whatever happens next.
        let standin = Self {
            child,
            base_url: format!("http://127.0.0.1:{port}/api"),
        };
        let http = HttpClient::default();
        for _ in 0..200 {
            let url = format!("http://127.0.0.1:{port}/_standin/state");
            if http.try_request("GET", &url, &[], Vec::new()).await.is_ok() {
                return standin;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("slack-once standin did not start");
    }

    /// Its origin (`http://127.0.0.1:PORT`), where response URLs and `/_standin/` are.
    pub fn origin(&self) -> String {
        self.base_url.trim_end_matches("/api").to_string()
    }

    /// A script endpoint: `POST /_standin/<path>` with a JSON body.
    pub async fn post(&self, path: &str, body: serde_json::Value) -> serde_json::Value {
        let headers = [("content-type".to_string(), "application/json".to_string())];
        HttpClient::default()
            .request(
                "POST",
                &format!("{}/_standin/{path}", self.origin()),
                &headers,
                body.to_string(),
            )
            .await
            .json()
    }

    /// `GET /_standin/state`.
    pub async fn state(&self) -> serde_json::Value {
        HttpClient::default()
            .request(
                "GET",
                &format!("{}/_standin/state", self.origin()),
                &[],
                Vec::new(),
            )
            .await
            .json()
    }
}

impl Drop for StandinProcess {
    fn drop(&mut self) {
        // Only the process this test started, by its handle.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------- a private DynamoDB Local

/// A DynamoDB Local of the test's own, on a free port with its data on disk, so the test can
/// stop and restart it. Stopped (by PID) when dropped.
pub struct PrivateDynamoDb {
    pub port: u16,
    data: std::path::PathBuf,
    child: Option<std::process::Child>,
}

impl PrivateDynamoDb {
    pub fn start() -> Self {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let data =
            std::env::temp_dir().join(format!("slack-once-ddb-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&data).unwrap();
        let mut db = Self {
            port,
            data,
            child: None,
        };
        db.restart();
        db
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        let dir = std::env::var("DYNAMODB_LOCAL_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|_| {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".dynamodb-local")
            })
            .join("package/emulator");
        let jar = dir.join("DynamoDBLocal.jar");
        assert!(
            jar.exists(),
            "DynamoDB Local is not installed at {}: run `scripts/dynamodb-local.sh install`",
            jar.display()
        );
        let child = std::process::Command::new("java")
            .arg(format!(
                "-Djava.library.path={}",
                dir.join("DynamoDBLocal_lib").display()
            ))
            .arg("-jar")
            .arg(&jar)
            .args(["-sharedDb", "-disableTelemetry", "-dbPath"])
            .arg(&self.data)
            .args(["-port", &self.port.to_string()])
            .current_dir(&self.data)
            .env("DDB_LOCAL_TELEMETRY", "0")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("java starts DynamoDB Local");
        self.child = Some(child);
        // The port opens before the JVM serves requests briskly: ready once a few requests in
        // a row are answered, so the bots' first ledger writes do not meet a cold start.
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut answered_in_a_row = 0;
        while answered_in_a_row < 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "DynamoDB Local did not start on {addr}"
            );
            if dynamodb_answers(addr) {
                answered_in_a_row += 1;
            } else {
                answered_in_a_row = 0;
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Whether DynamoDB Local at `addr` answers a ListTables request within a second (any HTTP
/// answer will do: DynamoDB Local does not check signatures).
fn dynamodb_answers(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let body = "{}";
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-amz-json-1.0\r\n\
         X-Amz-Target: DynamoDB_20120810.ListTables\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=00\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 ")
}

impl Drop for PrivateDynamoDb {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

// ---------------------------------------------------------------- a proxy in front of DynamoDB

/// The ledger write a DynamoDB request is, read from its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LedgerOp {
    Claim,
    /// A message's alias (its `client_msg_id`), written with its claim.
    Alias,
    /// A step's intent (`begin_step`).
    Intent,
    Complete,
    Release,
    Fail,
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldAt {
    /// The request never reaches DynamoDB, and no answer comes.
    BeforeForwarding,
    /// DynamoDB applies the write; its answer never comes back.
    AfterForwarding,
    /// DynamoDB applies the write; the proxy reads its answer and closes the client's
    /// connection without returning it (the SDK sees a lost answer and sends the write again).
    DropAnswer,
    /// DynamoDB applies the write; the client gets a 500 InternalServerError instead of the
    /// answer (the SDK retries it).
    Error500AfterForwarding,
    /// The request is forwarded after this long (a slow service).
    DelayForwarding(Duration),
    /// The request never reaches DynamoDB, and is refused as DynamoDB refuses a write to an
    /// item a transaction is under way on (`TransactionConflictException`, HTTP 400, which the
    /// SDK does not send again).
    TransactionConflict,
}

#[derive(Default)]
struct ProxyState {
    /// Every request is answered 503 and none forwarded: the service is down.
    down: bool,
    /// The kind of request to hold, how many more of that kind pass first, and how.
    hold: Option<(LedgerOp, usize, HoldAt)>,
    held: usize,
    seen: Vec<LedgerOp>,
}

/// A proxy on 127.0.0.1 in front of DynamoDB Local that can hold, or lose the answer of, the
/// next claim, intent, completion or release: a crash point, or a lost answer, on demand.
pub struct LedgerProxy {
    pub url: String,
    state: Arc<Mutex<ProxyState>>,
    held: Arc<tokio::sync::Notify>,
    _shutdown: oneshot::Sender<()>,
}

#[derive(Clone)]
struct ProxyCtx {
    upstream: String,
    client: Client<HttpConnector, Full<Bytes>>,
    state: Arc<Mutex<ProxyState>>,
    held: Arc<tokio::sync::Notify>,
}

impl LedgerProxy {
    pub async fn start(upstream: &str) -> Self {
        let state = Arc::new(Mutex::new(ProxyState::default()));
        let held = Arc::new(tokio::sync::Notify::new());
        let ctx = ProxyCtx {
            upstream: upstream.to_string(),
            client: Client::builder(TokioExecutor::new()).build_http(),
            state: state.clone(),
            held: held.clone(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, mut rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => stream,
                        Err(_) => continue,
                    },
                    _ = &mut rx => return,
                };
                let ctx = ctx.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        proxy_forward(ctx.clone(), request)
                    });
                    // A service error closes the connection without an answer: what DropAnswer needs.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            url: format!("http://{addr}"),
            state,
            held,
            _shutdown: tx,
        }
    }

    /// The next request of kind `op` is held (or its answer lost) as `at` says; later ones pass.
    pub fn hold_next(&self, op: LedgerOp, at: HoldAt) {
        self.hold_nth(op, 1, at);
    }

    /// The `n`-th request of kind `op` from now (1: the next) is held as `at` says.
    pub fn hold_nth(&self, op: LedgerOp, n: usize, at: HoldAt) {
        self.state.lock().unwrap().hold = Some((op, n.saturating_sub(1), at));
    }

    /// Waits until the request to hold has arrived (and, after forwarding, DynamoDB answered).
    pub async fn wait_held(&self) {
        let notified = self.held.notified();
        if self.state.lock().unwrap().held > 0 {
            return;
        }
        tokio::time::timeout(Duration::from_secs(10), notified)
            .await
            .expect("the held request arrived");
    }

    /// While `down`, every request is answered 503 (ServiceUnavailable) and none forwarded.
    pub fn set_down(&self, down: bool) {
        self.state.lock().unwrap().down = down;
    }

    /// How many requests were held so far.
    pub fn held(&self) -> usize {
        self.state.lock().unwrap().held
    }

    /// The ledger writes seen, in order.
    pub fn seen(&self) -> Vec<LedgerOp> {
        self.state.lock().unwrap().seen.clone()
    }
}

/// Which ledger write a DynamoDB request body is.
pub fn classify(body: &[u8]) -> LedgerOp {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return LedgerOp::Other;
    };
    // An alias: the put of a new one, or the update of one that exists.
    if v["Item"]["alias_of"].is_object() || v["ExpressionAttributeValues"][":of"].is_object() {
        return LedgerOp::Alias;
    }
    if v["ConditionExpression"]
        .as_str()
        .is_some_and(|c| c.contains("attribute_not_exists"))
    {
        return LedgerOp::Claim;
    }
    if v["ExpressionAttributeValues"][":intent"].is_object() {
        return LedgerOp::Intent;
    }
    match v["ExpressionAttributeValues"][":to"]["S"].as_str() {
        Some("done") => LedgerOp::Complete,
        Some("released") => LedgerOp::Release,
        Some("failed") => LedgerOp::Fail,
        _ => LedgerOp::Other,
    }
}

type ProxyError = Box<dyn std::error::Error + Send + Sync>;

async fn proxy_forward(
    ctx: ProxyCtx,
    request: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<Full<Bytes>>, ProxyError> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let op = classify(&body);
    if ctx.state.lock().unwrap().down {
        return Ok(http::Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .header("content-type", "application/x-amz-json-1.1")
            .body(Full::new(Bytes::from_static(
                br#"{"__type":"ServiceUnavailableException","message":"down"}"#,
            )))?);
    }
    let hold = {
        let mut s = ctx.state.lock().unwrap();
        s.seen.push(op);
        match s.hold {
            Some((wanted, 0, at)) if wanted == op => {
                s.hold = None;
                s.held += 1;
                Some(at)
            }
            Some((wanted, more, at)) if wanted == op => {
                s.hold = Some((wanted, more - 1, at));
                None
            }
            _ => None,
        }
    };
    match hold {
        Some(HoldAt::BeforeForwarding) => {
            ctx.held.notify_waiters();
            return std::future::pending().await;
        }
        Some(HoldAt::DelayForwarding(delay)) => {
            ctx.held.notify_waiters();
            tokio::time::sleep(delay).await;
        }
        Some(HoldAt::TransactionConflict) => {
            ctx.held.notify_waiters();
            return Ok(http::Response::builder()
                .status(StatusCode::BAD_REQUEST)
                .header("content-type", "application/x-amz-json-1.0")
                .body(Full::new(Bytes::from_static(
                    br#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionConflictException","message":"Transaction is ongoing for the item"}"#,
                )))?);
        }
        _ => {}
    }
    let uri = format!(
        "{}{}",
        ctx.upstream,
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
    );
    let mut upstream = http::Request::builder().method(parts.method).uri(uri);
    for (k, v) in &parts.headers {
        upstream = upstream.header(k, v);
    }
    let response = match ctx.client.request(upstream.body(Full::new(body))?).await {
        Ok(r) => r,
        Err(_) => {
            return Ok(http::Response::builder()
                .status(StatusCode::BAD_GATEWAY)
                .body(Full::new(Bytes::new()))?);
        }
    };
    let (parts, body) = response.into_parts();
    let body = body.collect().await?.to_bytes();
    match hold {
        Some(HoldAt::AfterForwarding) => {
            ctx.held.notify_waiters();
            std::future::pending().await
        }
        Some(HoldAt::DropAnswer) => {
            ctx.held.notify_waiters();
            Err("the answer is dropped: the connection closes".into())
        }
        Some(HoldAt::Error500AfterForwarding) => {
            ctx.held.notify_waiters();
            Ok(http::Response::builder()
                .status(StatusCode::INTERNAL_SERVER_ERROR)
                .header("content-type", "application/x-amz-json-1.0")
                .body(Full::new(Bytes::from_static(
                    br#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"injected after the write"}"#,
                )))?)
        }
        _ => Ok(http::Response::from_parts(parts, Full::new(body))),
    }
}

// ---------------------------------------------------------------- the SQS server (moto)

pub const SQS_SCRIPT: &str = "scripts/sqs-local.sh start";

/// The SQS server's endpoint on 127.0.0.1 (port from SQS_LOCAL_PORT, default 9324). Fails the
/// test, naming the script, when nothing answers there: never skips silently.
/// A new KMS key on the SQS server (moto serves KMS too), under the alias `alias/NAME-…`: the
/// variables that make a process seal its tokens with it.
pub async fn kms_key_vars() -> Vec<(&'static str, String)> {
    let endpoint = sqs_endpoint();
    let kms = local_client!(aws_sdk_kms, &endpoint);
    let key = kms
        .create_key()
        .description("slack-once tests: installations' tokens")
        .send()
        .await
        .expect("a KMS key on the moto server")
        .key_metadata
        .unwrap()
        .key_id;
    let alias = format!("alias/slack-once-test-{}", uuid::Uuid::new_v4().simple());
    kms.create_alias()
        .alias_name(&alias)
        .target_key_id(&key)
        .send()
        .await
        .unwrap();
    vec![
        ("SLACK_TOKEN_KEY_ID", alias),
        ("AWS_ENDPOINT_URL_KMS", endpoint),
    ]
}

pub fn sqs_endpoint() -> String {
    let port: u16 = std::env::var("SQS_LOCAL_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(9324);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    if std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
        panic!(
            "the SQS server is not answering on 127.0.0.1:{port}: start it with `{SQS_SCRIPT}` \
             (scripts/test.sh starts and stops it for you)"
        );
    }
    format!("http://{addr}")
}

pub fn sqs_client(endpoint: &str) -> aws_sdk_sqs::Client {
    local_client!(aws_sdk_sqs, endpoint)
}

/// A fresh work queue and its dead-letter queue on the SQS server.
pub struct TestQueue {
    pub url: String,
    pub dlq_url: String,
    pub client: aws_sdk_sqs::Client,
}

impl TestQueue {
    pub async fn create(endpoint: &str, max_receives: u32) -> Self {
        let client = sqs_client(endpoint);
        let name = format!("test-{}", uuid::Uuid::new_v4().simple());
        let (url, dlq_url) = slack_once::queue::SqsQueue::create_with_dead_letters(
            &client,
            &name,
            max_receives,
            Duration::from_secs(30),
        )
        .await
        .expect("create the test queues on the SQS server");
        Self {
            url,
            dlq_url,
            client,
        }
    }

    /// Messages in the queue, visible or in flight (SQS's approximate counts, exact on moto).
    pub async fn depth(&self, url: &str) -> usize {
        use aws_sdk_sqs::types::QueueAttributeName as A;
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(A::ApproximateNumberOfMessages)
            .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .unwrap();
        let attrs = out.attributes().unwrap();
        [
            A::ApproximateNumberOfMessages,
            A::ApproximateNumberOfMessagesNotVisible,
        ]
        .iter()
        .map(|a| {
            attrs
                .get(a)
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0)
        })
        .sum()
    }

    /// The bodies waiting in the dead-letter queue (received, then left there).
    pub async fn dead_letters(&self) -> Vec<String> {
        let out = self
            .client
            .receive_message()
            .queue_url(&self.dlq_url)
            .max_number_of_messages(10)
            .visibility_timeout(1)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        out.messages()
            .iter()
            .filter_map(|m| m.body().map(str::to_string))
            .collect()
    }
}

/// The variables of a deferred-mode ingress sending to `queue` at `endpoint`: no ledger.
pub fn ingress_vars(queue: &TestQueue, sqs: &str) -> Vec<(&'static str, String)> {
    let mut vars = dynamodb_env("http://127.0.0.1:9");
    vars.extend([
        ("AWS_ENDPOINT_URL_SQS", sqs.to_string()),
        ("WORK_QUEUE_URL", queue.url.clone()),
    ]);
    vars
}

/// The variables of a worker on `queue`, ledger `table`, posting to `slack`.
pub fn worker_vars(
    slack: &SlackStandin,
    dynamodb: &str,
    table: &str,
    queue: &TestQueue,
    sqs: &str,
    lease_s: u64,
    max_receives: u32,
) -> Vec<(&'static str, String)> {
    let mut vars = bot_vars(slack, dynamodb, table);
    vars.extend([
        ("AWS_ENDPOINT_URL_SQS", sqs.to_string()),
        ("WORK_QUEUE_URL", queue.url.clone()),
        ("DEDUP_LEASE_SECONDS", lease_s.to_string()),
        ("WORK_QUEUE_MAX_RECEIVES", max_receives.to_string()),
    ]);
    vars
}

/// What a deferred-mode test runs against: the Slack stand-in, a fresh table on DynamoDB
/// Local, a fresh queue (and its dead-letter queue) on the SQS server.
pub struct DeferredStack {
    pub slack: SlackStandin,
    pub dynamodb: String,
    pub table: String,
    pub sqs: String,
    pub queue: TestQueue,
}

impl DeferredStack {
    pub async fn start(max_receives: u32) -> Self {
        let dynamodb = dynamodb_endpoint();
        let sqs = sqs_endpoint();
        let (table, _ledger) = fresh_table(&dynamodb).await;
        Self {
            slack: SlackStandin::start().await,
            queue: TestQueue::create(&sqs, max_receives).await,
            dynamodb,
            table,
            sqs,
        }
    }

    /// An ingress's variables (no ledger: it only sends to the queue).
    pub fn ingress_vars(&self) -> Vec<(&'static str, String)> {
        ingress_vars(&self.queue, &self.sqs)
    }

    /// A worker's variables, with its lease and the queue's `maxReceiveCount`.
    pub fn worker_vars(&self, lease_s: u64, max_receives: u32) -> Vec<(&'static str, String)> {
        worker_vars(
            &self.slack,
            &self.dynamodb,
            &self.table,
            &self.queue,
            &self.sqs,
            lease_s,
            max_receives,
        )
    }
}

/// Waits until `check` holds, polling every 50 ms, for at most `limit`.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check()
}

/// Waits until the asynchronous `check` holds, polling every 100 ms, for at most `limit`.
pub async fn eventually_async<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------- the Secrets Manager server (moto)

pub fn secrets_client(endpoint: &str) -> aws_sdk_secretsmanager::Client {
    local_client!(aws_sdk_secretsmanager, endpoint)
}

/// The EMF metric lines a process printed, parsed.
pub fn metric_lines(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter(|l| l.starts_with('{') && l.contains("\"_aws\""))
        .map(|l| serde_json::from_str(l).expect("an EMF line is JSON"))
        .collect()
}

/// The sum of metric `name` over `lines`.
pub fn metric_sum(lines: &[serde_json::Value], name: &str) -> f64 {
    lines.iter().filter_map(|l| l[name].as_f64()).sum()
}
