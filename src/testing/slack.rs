//! [`FakeSlack`]: one [`Workspace`] served over HTTP as Slack's Web API serves it, on a port of
//! 127.0.0.1 or in process (the crash explorer's connections never leave the runtime).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;

use super::functions::{Authenticated, Executions, StartedExecution};
use super::oauth::OAuthGrants;
use super::recorded::{
    RandomFaults, Recorded, SlackFailure, SlackRequest, TokenRule, is_read, log_call,
};
use super::scripts;
use super::socket_mode::links::Links;
use super::socket_mode::{self, SocketMode};
use super::workspace::{self, Identity, Workspace};
use super::{APP_ID, BOT_ID, BOT_USER, TEAM};

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
            socket: Links::new(identity.clone(), &base_url),
            workspace: Workspace::new(identity),
            grants: None,
            others: HashMap::new(),
            callers: Vec::new(),
            peers: Vec::new(),
            auth_test_without_app: false,
            bearers: Vec::new(),
            failures: HashMap::new(),
            around: Vec::new(),
            log: Vec::new(),
            token_rule: None,
            reads_per_minute: None,
            requests: Vec::new(),
            keep_requests: true,
            counts: HashMap::new(),
            outages: HashMap::new(),
            read_failures: std::collections::VecDeque::new(),
            reads_fail_with: None,
            reads_answered: 0,
            random: None,
            drawn: HashMap::new(),
            warm_ups: 0,
            posted_with: HashMap::new(),
            before_call: None,
        }));
        let router = Router::new()
            .route("/api/{method}", post(call).get(call_by_query))
            .route("/around/api/{method}", post(call_around).get(call_around))
            .route("/_standin/state", axum::routing::get(scripts::state))
            .route("/_standin/{*endpoint}", post(scripts::endpoint))
            .route("/commands/{*rest}", post(hook))
            .route("/actions/{*rest}", post(hook))
            .route("/link", get(socket_mode::link))
            .route("/link/", get(socket_mode::link))
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

    /// Starts it on `127.0.0.1:port` (0: a free port), for the app `identity` names, on the
    /// current runtime; `Err` if the port is taken.
    pub async fn start_on(identity: Identity, port: u16) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let slack = Self::new(identity, format!("http://{addr}/api"));
        let router = slack.router.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(slack)
    }

    /// Starts it for the app a [`super::TestBot`] is ([`TEAM`], [`APP_ID`], [`BOT_ID`],
    /// [`BOT_USER`]).
    pub async fn start() -> Self {
        Self::start_for(default_identity()).await
    }

    /// The same Slack, reached in process only (the explorer serves its router): no socket.
    pub fn in_process(identity: Identity) -> Self {
        Self::new(identity, IN_PROCESS_BASE.to_string())
    }

    /// The HTTP service, to wrap (the explorer puts its faults in front of it).
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// The Web API base to give the bot (`SLACK_API_URL`).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The Web API base a client of the bot's own is given ([`crate::slack::api_url`]) while a
    /// [`super::TestBot`] serves a request: this Slack, where each call is also kept as one
    /// made around slack-once's client ([`FakeSlack::calls_around_the_crate`]).
    pub fn around_base(&self) -> String {
        let host = self.base_url.strip_suffix("/api").unwrap_or(&self.base_url);
        format!("{host}/around/api")
    }

    /// The calls made with a client of the bot's own (under [`FakeSlack::around_base`]), in
    /// order: (method, arguments). Each is also made, as Slack would, and in
    /// [`FakeSlack::calls`]; a write here is not a step of the journal (made again on every
    /// retry and takeover).
    pub fn calls_around_the_crate(&self) -> Vec<(String, Value)> {
        self.state.lock().expect("lock").around.clone()
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

    /// Slack's Socket Mode for this app, over the same workspace: its app-level token, the
    /// connections `apps.connections.open` leads to, the envelopes a test sends them and what
    /// became of them.
    pub fn socket_mode(&self) -> SocketMode {
        SocketMode::new(self.state.clone())
    }

    /// Works on the workspace directly (add people's messages, another app's, chatter).
    pub fn with_workspace<T>(&self, f: impl FnOnce(&mut Workspace) -> T) -> T {
        f(&mut self.state.lock().expect("lock").workspace)
    }

    /// Multi-workspace mode: the app `client_id` (with `client_secret`) is installed through
    /// OAuth; `oauth.v2.access` is answered, and every call is served by the workspace its
    /// token is for. A token Slack would refuse is refused as Slack refuses it: one it never
    /// issued (another app's, one made up) with `invalid_auth`, none with `not_authed`; a token
    /// issued outside the flow is taken once [`OAuthGrants::accept`] names it.
    pub fn with_oauth(self, client_id: &str, client_secret: &str) -> Self {
        {
            let mut s = self.state.lock().expect("lock");
            let app_id = s.workspace.identity.app_id.clone();
            s.grants = Some(OAuthGrants::new(client_id, client_secret, &app_id));
        }
        self
    }

    /// This stand-in and `other` (another app's, each [`FakeSlack::with_oauth`]) are one Slack:
    /// a token either issued is taken by both and acts as its own app (a call with app B's
    /// token made through app A's stand-in is B's call, in B's workspace, as in Slack, where
    /// it would post as B's bot), and an exchange goes to the app its client id names.
    pub fn same_slack_as(&self, other: &FakeSlack) {
        self.state
            .lock()
            .expect("lock")
            .peers
            .push(Arc::downgrade(&other.state));
        other
            .state
            .lock()
            .expect("lock")
            .peers
            .push(Arc::downgrade(&self.state));
    }

    /// `auth.test` answers without naming the app (`app_id`), as Slack's documented example
    /// does.
    pub fn auth_test_without_app(&self) {
        self.state.lock().expect("lock").auth_test_without_app = true;
    }

    /// The next calls of `method` that reach this stand-in fail, one each, as `failures` say:
    /// each is recorded as a call, made nothing, and the one after answers as ever.
    pub fn fail_next(&self, method: &str, failures: impl IntoIterator<Item = SlackFailure>) {
        self.state
            .lock()
            .expect("lock")
            .failures
            .entry(method.to_string())
            .or_default()
            .extend(failures.into_iter().map(Some));
    }

    /// The next calls of `method` (or `response_url`) answer as a script says, one each:
    /// `None` as ever, or as the failure says (what `/_standin/script` takes).
    pub fn script<F: Into<Option<SlackFailure>>>(
        &self,
        method: &str,
        script: impl IntoIterator<Item = F>,
    ) {
        self.state
            .lock()
            .expect("lock")
            .failures
            .entry(method.to_string())
            .or_default()
            .extend(script.into_iter().map(Into::into));
    }

    /// Without OAuth, as Slack: a call without a token is `not_authed`, and one whose token is
    /// not a bot token (`xoxb-`), or not `only` when given, is `invalid_auth` (a rotated or
    /// another app's token). By default any token, or none, is taken.
    pub fn require_bot_token(&self, only: Option<&str>) {
        self.state.lock().expect("lock").token_rule = Some(TokenRule {
            only: only.map(str::to_string),
        });
    }

    /// Slack's rate limit of `conversations.history` and `.replies` (Tier 1 for new
    /// commercially distributed apps outside the Marketplace: 1 a minute): each method's calls
    /// past `calls` in a rolling minute answer HTTP 429 with `Retry-After`.
    pub fn limit_reads_per_minute(&self, calls: usize) {
        self.state.lock().expect("lock").reads_per_minute = Some((calls, HashMap::new()));
    }

    /// Tokens of workflow executions (`xwfp-`) are good this long after they are issued
    /// (Slack: 15 minutes, [`super::WORKFLOW_TOKEN_MS`]).
    pub fn set_workflow_token_lifetime(&self, lifetime: std::time::Duration) {
        self.with_workspace(|w| w.executions.set_token_lifetime(lifetime.as_millis() as u64));
    }

    /// Every call from the `first`-th on (0: the first), as `/_standin/state` lists them: `n`,
    /// `method`, `bearer`, `args` (tokens and secrets as `***`), `error`.
    pub fn call_log_from(&self, first: usize) -> Vec<Value> {
        let s = self.state.lock().expect("lock");
        s.log.iter().skip(first).cloned().collect()
    }

    /// Works on the grants ([`FakeSlack::with_oauth`]): make codes, revoke tokens.
    pub fn with_grants<T>(&self, f: impl FnOnce(&mut OAuthGrants) -> T) -> T {
        let mut s = self.state.lock().expect("lock");
        f(s.grants.as_mut().expect("FakeSlack::with_oauth first"))
    }

    /// Works on the workspace of `team` (or of an enterprise's org-wide install).
    pub fn with_workspace_of<T>(&self, team: &str, f: impl FnOnce(&mut Workspace) -> T) -> T {
        f(self.state.lock().expect("lock").workspace_of(team))
    }

    /// This app's messages in `team`'s workspace.
    pub fn messages_of(&self, team: &str) -> Vec<Value> {
        self.with_workspace_of(team, |w| w.ours())
    }

    /// Each call's installation, by its token: (method, team), in order.
    pub fn callers(&self) -> Vec<(String, String)> {
        self.state.lock().expect("lock").callers.clone()
    }

    /// Each Web API call's method and the token it came with, in order (a test's check of
    /// which token a call used: a step execution's own, `xwfp-…`, or the installation's).
    pub fn tokens_used(&self) -> Vec<(String, String)> {
        self.state.lock().expect("lock").bearers.clone()
    }

    /// A workflow reached the app's step `callback_id` with `inputs`, in the default workspace:
    /// the execution runs, with its ids and its first token (for its `function_executed`).
    pub fn start_execution(&self, callback_id: &str, inputs: Value) -> StartedExecution {
        let mut s = self.state.lock().expect("lock");
        let team = s.workspace.identity.team.clone();
        let (function_execution_id, workflow_execution_id, bot_access_token) =
            s.workspace.executions.start(callback_id, inputs, &team);
        StartedExecution {
            function_execution_id,
            workflow_execution_id,
            bot_access_token,
        }
    }

    /// A new token of the execution `id` (Slack sends one with each request of the step: a
    /// click's, a submission's); born revoked once the execution has ended. `None`: unknown.
    pub fn execution_token(&self, id: &str) -> Option<String> {
        self.state
            .lock()
            .expect("lock")
            .workspace
            .executions
            .token(id)
    }

    /// The workflow was stopped, or the step timed out: the execution `id` ends (its tokens
    /// revoked) unless it has completed already.
    pub fn end_execution(&self, id: &str) -> bool {
        self.state
            .lock()
            .expect("lock")
            .workspace
            .executions
            .end(id)
    }

    /// The executions, in the order they started: each `function_execution_id`,
    /// `workflow_execution_id`, `callback_id`, `team`, `inputs`, `state` (`running`,
    /// `completed`, `failed`, `ended`), `outputs`, `error`, `completions` (answered ok: at most
    /// one) and `refused` (completions answered not ok).
    pub fn executions(&self) -> Vec<Value> {
        self.state
            .lock()
            .expect("lock")
            .workspace
            .executions
            .shown()
    }
}

impl FakeSlack {
    /// Every request to a Web API method or a response URL (`response_url`), in order, as it
    /// came: refused, failed and unanswered ones too (none after [`FakeSlack::keep_counts_only`]).
    pub fn requests(&self) -> Vec<SlackRequest> {
        self.state.lock().expect("lock").requests.clone()
    }

    /// Requests per method so far (`response_url` for posts to a response URL), kept always.
    pub fn counts(&self) -> HashMap<String, usize> {
        self.state.lock().expect("lock").counts.clone()
    }

    /// From now on only [`FakeSlack::counts`] are kept, not requests or calls (what is kept
    /// stays): for a soak of a million calls.
    pub fn keep_counts_only(&self) {
        self.state.lock().expect("lock").keep_requests = false;
    }

    /// For `duration` from now, every call of `method` answers HTTP 500 and makes nothing
    /// (its script waits).
    pub fn outage(&self, method: &str, duration: std::time::Duration) {
        let until = tokio::time::Instant::now() + duration;
        self.state
            .lock()
            .expect("lock")
            .outages
            .insert(method.to_string(), until);
    }

    /// The next reads (`conversations.history` or `.replies`, whichever comes, after a
    /// method's own [`FakeSlack::fail_next`]) fail as `failures` say, one each.
    pub fn fail_next_reads(&self, failures: impl IntoIterator<Item = SlackFailure>) {
        self.state
            .lock()
            .expect("lock")
            .read_failures
            .extend(failures);
    }

    /// From now on every read no script decides answers `{"ok": false, "error": code}`
    /// (`None`: answered again).
    pub fn fail_reads(&self, code: Option<&'static str>) {
        self.state.lock().expect("lock").reads_fail_with = code;
    }

    /// How many reads (`conversations.history`, `.replies`) were answered.
    pub fn reads_answered(&self) -> usize {
        self.state.lock().expect("lock").reads_answered
    }

    /// From now on, every call no script decides draws its fault from `faults` (`None`: no
    /// more random faults).
    pub fn random_faults(&self, faults: Option<RandomFaults>) {
        self.state.lock().expect("lock").random = faults;
    }

    /// The random faults drawn so far: (method, failure) → count.
    pub fn faults_drawn(&self) -> HashMap<(String, String), u64> {
        self.state.lock().expect("lock").drawn.clone()
    }

    /// How many `HEAD` requests came: connections a client opened ahead of a first call.
    pub fn warm_ups(&self) -> usize {
        self.state.lock().expect("lock").warm_ups
    }

    /// The token the app's message `ts` was posted with (`None`: none, or not posted here).
    pub fn token_of_message(&self, ts: &str) -> Option<String> {
        self.state
            .lock()
            .expect("lock")
            .posted_with
            .get(ts)
            .cloned()
            .flatten()
    }

    /// Runs `before` on the workspace before each Web API call is answered, with the call's
    /// arguments: a test fills a conversation as its events come (the message an event is
    /// about is in its conversation, as in Slack).
    pub fn before_each_call(
        &self,
        before: impl Fn(&mut Workspace, &Value) + Send + Sync + 'static,
    ) {
        self.state.lock().expect("lock").before_call = Some(Arc::new(before));
    }
}

/// The identity of the app a [`super::TestBot`] is ([`TEAM`], [`APP_ID`], [`BOT_ID`],
/// [`BOT_USER`]).
pub fn default_identity() -> Identity {
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
pub(crate) fn answer(
    state: &Mutex<Recorded>,
    method: &str,
    args: Value,
    token: Option<&str>,
) -> Value {
    if method == "apps.connections.open" {
        // The app-level token's method: Socket Mode's own rule, whatever the Web API's.
        return state.lock().expect("lock").socket.open(token);
    }
    // Another app's token, or an exchange of another app's client id, on the same Slack: that
    // app's stand-in answers it.
    let peer = {
        let s = state.lock().expect("lock");
        let client = args["client_id"].as_str().unwrap_or_default();
        let ours = |g: &OAuthGrants| match method {
            "oauth.v2.access" => g.client_id() == client,
            _ => token.is_none_or(|t| g.issued(t)),
        };
        match s.grants.as_ref() {
            Some(g) if !ours(g) => s
                .peers
                .iter()
                .filter_map(std::sync::Weak::upgrade)
                .find(|p| p.lock().expect("lock").grants.as_ref().is_some_and(&ours)),
            _ => None,
        }
    };
    if let Some(peer) = peer {
        return answer(&peer, method, args, token);
    }
    let mut guard = state.lock().expect("lock");
    let s = &mut *guard;
    let now_ms = crate::clock::now_ms();
    let mut owner = s.workspace.identity.team.clone();
    let keep = s.keep_requests;
    if let Some(token) = token
        && keep
    {
        s.bearers.push((method.to_string(), token.to_string()));
    }
    if matches!(
        method,
        "functions.completeSuccess" | "functions.completeError"
    ) {
        if keep {
            s.calls.push((method.to_string(), args.clone()));
        }
        return s.workspace.executions.complete(method, &args, token);
    }
    if Executions::is_workflow_token(token) {
        // A step execution's token: its team's bot while the execution runs.
        match s
            .workspace
            .executions
            .authenticate(token.unwrap_or_default())
        {
            Authenticated::Team(team) => owner = team,
            Authenticated::Refused(code) => {
                return serde_json::json!({"ok": false, "error": code});
            }
        }
    } else if let Some(grants) = s.grants.as_mut() {
        if method == "oauth.v2.access" {
            if keep {
                s.calls.push((method.to_string(), redacted(&args)));
            }
            return grants.exchange(&args, now_ms);
        }
        // As Slack: a call without a token is `not_authed`, and one with a token Slack never
        // issued (another app's, a made-up one) is `invalid_auth`.
        let Some(token) = token else {
            return serde_json::json!({"ok": false, "error": "not_authed"});
        };
        match grants.check(token, now_ms) {
            Ok(o) => owner = o,
            Err(code) => return serde_json::json!({"ok": false, "error": code}),
        }
    } else if let Some(code) = s.token_rule_refusal(token) {
        return serde_json::json!({"ok": false, "error": code});
    }
    if keep {
        s.callers.push((method.to_string(), owner.clone()));
    }
    if let Some(before) = s.before_call.clone() {
        before(s.workspace_of(&owner), &args);
    }
    match method {
        "conversations.history" | "conversations.replies" => {
            s.reads_answered += 1;
            let query = strings(&args);
            let w = s.workspace_of(&owner);
            match method {
                "conversations.history" => w.history(&query),
                _ => w.replies(&query),
            }
        }
        _ => {
            if keep {
                s.calls.push((method.to_string(), args.clone()));
            }
            let without_app = method == "auth.test" && s.auth_test_without_app;
            let mut answer = s.workspace_of(&owner).call(method, &args);
            if without_app && let Some(fields) = answer.as_object_mut() {
                fields.remove("app_id");
            }
            if method == "chat.postMessage"
                && keep
                && let Some(ts) = answer["ts"].as_str()
            {
                s.posted_with
                    .insert(ts.to_string(), token.map(str::to_string));
            }
            answer
        }
    }
}

/// An exchange's arguments without its secrets.
fn redacted(args: &Value) -> Value {
    let mut args = args.clone();
    if let Some(fields) = args.as_object_mut() {
        for (k, v) in fields.iter_mut() {
            if matches!(k.as_str(), "client_secret" | "code" | "refresh_token") {
                *v = Value::String("[redacted]".into());
            }
        }
    }
    args
}

/// The bearer token of a request.
fn bearer(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string)
}

async fn call(
    State(state): State<Arc<Mutex<Recorded>>>,
    Path(method): Path<String>,
    RawQuery(query): RawQuery,
    headers: http::HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let args = arguments(query.as_deref(), &body);
    // A form's `token` field is taken as Slack takes it; a JSON body's is not.
    let form_token = serde_json::from_slice::<Value>(&body)
        .is_err()
        .then(|| args["token"].as_str().map(str::to_string))
        .flatten();
    let token = bearer(&headers).or(form_token);
    serve(state, &method, args, token).await
}

/// A Web API call, answered as [`FakeSlack::fail_next`] or `/_standin/script` scripted it
/// (or an outage, or a random fault), as Slack's rate limit answers it, or as Slack does
/// ([`answer`]); kept in the call log. A token the stand-in's rule refuses is refused first,
/// as Slack refuses it before the method runs.
async fn serve(
    state: Arc<Mutex<Recorded>>,
    method: &str,
    args: Value,
    token: Option<String>,
) -> Response {
    let failure = {
        let mut s = state.lock().expect("lock");
        *s.counts.entry(method.to_string()).or_default() += 1;
        if s.keep_requests {
            s.requests.push(SlackRequest {
                method: method.to_string(),
                token: token.clone(),
                args: args.clone(),
            });
        }
        let ruled = s.grants.is_none()
            && method != "apps.connections.open"
            && !Executions::is_workflow_token(token.as_deref())
            && !matches!(
                method,
                "functions.completeSuccess" | "functions.completeError"
            );
        if let Some(code) = ruled
            .then(|| s.token_rule_refusal(token.as_deref()))
            .flatten()
        {
            drop(s);
            let refused = serde_json::json!({"ok": false, "error": code});
            log_call(&state, method, token.is_some(), &args, &refused);
            return json_response(refused);
        }
        s.next_failure(method)
    };
    if failure.is_none()
        && let Some(limited) = rate_limited(&state, method)
    {
        let refused = serde_json::json!({"ok": false, "error": "ratelimited"});
        log_call(&state, method, token.is_some(), &args, &refused);
        return limited;
    }
    let refused = {
        let (state, method, args, bearer) = (
            state.clone(),
            method.to_string(),
            args.clone(),
            token.is_some(),
        );
        move |code: &str| {
            {
                let mut s = state.lock().expect("lock");
                if s.keep_requests {
                    s.calls.push((method.clone(), redacted(&args)));
                }
            }
            let refused = serde_json::json!({"ok": false, "error": code});
            log_call(&state, &method, bearer, &args, &refused);
        }
    };
    let method = method.to_string();
    let make = move || {
        let answered = answer(&state, &method, args.clone(), token.as_deref());
        log_call(&state, &method, token.is_some(), &args, &answered);
        json_response(answered)
    };
    match failure {
        None => make(),
        Some(failure) => scripted_answer(failure, false, make, refused).await,
    }
}

/// Answers a call as `failure` scripts it: `make` makes the call and gives Slack's answer;
/// `refused` keeps a call refused unmade, with its code. A response URL (`hook`) answers a
/// status with an empty body.
async fn scripted_answer(
    failure: SlackFailure,
    hook: bool,
    make: impl FnOnce() -> Response + Send + 'static,
    refused: impl FnOnce(&str),
) -> Response {
    match failure {
        SlackFailure::Slow(delay) => tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            make()
        })
        .await
        .unwrap_or_else(|_| http::StatusCode::INTERNAL_SERVER_ERROR.into_response()),
        SlackFailure::MadeUnanswered => {
            make();
            std::future::pending().await
        }
        SlackFailure::MadeThenCode(code) => {
            make();
            json_response(serde_json::json!({"ok": false, "error": code}))
        }
        SlackFailure::MadeThenStatus(status) => {
            make();
            http::StatusCode::from_u16(status)
                .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR)
                .into_response()
        }
        SlackFailure::Code(code) => {
            refused(code);
            json_response(serde_json::json!({"ok": false, "error": code}))
        }
        SlackFailure::RateLimited(secs) => {
            refused("ratelimited");
            (
                http::StatusCode::TOO_MANY_REQUESTS,
                [
                    ("content-type", "application/json".to_string()),
                    ("retry-after", secs.to_string()),
                ],
                serde_json::json!({"ok": false, "error": "ratelimited"}).to_string(),
            )
                .into_response()
        }
        SlackFailure::Status(status) => {
            refused("internal_error");
            let status = http::StatusCode::from_u16(status)
                .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
            if hook {
                return status.into_response();
            }
            (
                status,
                [("content-type", "application/json")],
                serde_json::json!({"ok": false, "error": "internal_error"}).to_string(),
            )
                .into_response()
        }
        SlackFailure::Unanswered => {
            refused("internal_error");
            std::future::pending().await
        }
    }
}

/// HTTP 429 with `Retry-After`, when a read is past [`FakeSlack::limit_reads_per_minute`].
fn rate_limited(state: &Mutex<Recorded>, method: &str) -> Option<Response> {
    if !is_read(method) {
        return None;
    }
    let mut s = state.lock().expect("lock");
    let (allowed, recent) = s.reads_per_minute.as_mut()?;
    let now = std::time::Instant::now();
    let minute = std::time::Duration::from_secs(60);
    let made = recent.entry(method.to_string()).or_default();
    while made
        .front()
        .is_some_and(|t| now.duration_since(*t) >= minute)
    {
        made.pop_front();
    }
    if made.len() < *allowed {
        made.push_back(now);
        return None;
    }
    let wait = made.front().map_or(minute, |oldest| {
        minute.saturating_sub(now.duration_since(*oldest))
    });
    let retry_after = wait.as_secs_f64().ceil().max(1.0) as u64;
    Some(
        (
            http::StatusCode::TOO_MANY_REQUESTS,
            [
                ("content-type", "application/json".to_string()),
                ("retry-after", retry_after.to_string()),
            ],
            serde_json::json!({"ok": false, "error": "ratelimited"}).to_string(),
        )
            .into_response(),
    )
}

async fn call_by_query(
    State(state): State<Arc<Mutex<Recorded>>>,
    Path(method): Path<String>,
    verb: http::Method,
    RawQuery(query): RawQuery,
    headers: http::HeaderMap,
) -> Response {
    if verb == http::Method::HEAD {
        // A client opening its connection ahead of a call (`HEAD api.test`): no call at all.
        state.lock().expect("lock").warm_ups += 1;
        return json_response(serde_json::json!({"ok": true}));
    }
    let args = arguments(query.as_deref(), b"");
    serve(state, &method, args, bearer(&headers)).await
}

/// A call of a client of the bot's own: kept as such, then answered as any call.
async fn call_around(
    State(state): State<Arc<Mutex<Recorded>>>,
    Path(method): Path<String>,
    RawQuery(query): RawQuery,
    headers: http::HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let args = arguments(query.as_deref(), &body);
    state
        .lock()
        .expect("lock")
        .around
        .push((method.clone(), redacted(&args)));
    json_response(answer(&state, &method, args, bearer(&headers).as_deref()))
}

/// A post to a response URL: recorded as the call `response_url`, answered as Slack does, or
/// as a script, an outage or a random fault says.
async fn hook(
    State(state): State<Arc<Mutex<Recorded>>>,
    uri: http::Uri,
    body: axum::body::Bytes,
) -> Response {
    let args: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let failure = {
        let mut s = state.lock().expect("lock");
        *s.counts.entry("response_url".into()).or_default() += 1;
        if s.keep_requests {
            s.requests.push(SlackRequest {
                method: "response_url".into(),
                token: None,
                args: args.clone(),
            });
        }
        s.next_failure("response_url")
    };
    let refused = {
        let (state, args) = (state.clone(), args.clone());
        move |code: &str| {
            let refused = serde_json::json!({"ok": false, "error": code});
            log_call(&state, "response_url", false, &args, &refused);
        }
    };
    let make = move || {
        let (status, answer) = {
            let mut s = state.lock().expect("lock");
            if s.keep_requests {
                s.calls.push(("response_url".into(), args.clone()));
            }
            s.workspace.respond(uri.path(), &args)
        };
        log_call(&state, "response_url", false, &args, &answer);
        let status = http::StatusCode::from_u16(status).unwrap_or_default();
        (
            status,
            [("content-type", "text/plain")],
            workspace::hook_answer(&answer),
        )
            .into_response()
    };
    match failure {
        None => make(),
        Some(failure) => scripted_answer(failure, true, make, refused).await,
    }
}

fn json_response(value: Value) -> Response {
    ([("content-type", "application/json")], value.to_string()).into_response()
}
