//! Test helpers: `SlackStandin`, a Slack stand-in over a `testing::Workspace` whose faults a
//! test scripts (statuses, delays, hangs, outages, random faults, look-up refusals).

use super::*;

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
