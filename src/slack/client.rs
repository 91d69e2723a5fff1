//! The Slack Web API client: any method with the bot token within a deadline (429s waited
//! out, nothing else retried), which methods only read, and the Web API base a bot's own
//! client takes.
//!
//! Built on hyper directly rather than reqwest: the AWS SDK already links hyper 1, hyper-util
//! and rustls on ring, so this adds almost nothing to the binary or the cold start, and the root
//! certificates are compiled in (no certificate store read at start-up).

use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use std::sync::Arc;

use super::errors::TOKEN_ERRORS;
use super::tokens::ExecutionToken;
use super::{SlackError, TokenSource};
use crate::config::Secret;
use crate::net::Connector;
use crate::secrets::{Refused, SlackSecrets};

/// Slack's answers are small; anything larger than this is not Slack's.
const MAX_RESPONSE_BYTES: usize = 1 << 20;
/// Used when a 429 comes without a usable `Retry-After`.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Every Web API answer: `ok`, Slack's `error` code when not ok, and the method's own fields.
#[derive(Deserialize)]
struct ApiAnswer<T> {
    ok: bool,
    #[serde(default)]
    error: Option<String>,
    #[serde(flatten)]
    rest: Option<T>,
}

/// A Web API method's arguments: a JSON body (write methods), or a form (any method).
#[derive(Clone, Debug)]
pub enum Args {
    /// A JSON body (write methods).
    Json(serde_json::Value),
    /// A form's fields, as name and value, in order (any method).
    Form(Vec<(String, String)>),
}

impl Args {
    /// The arguments of a form from a JSON object: strings as they are, anything else as JSON.
    pub fn form_from(value: &serde_json::Value) -> Self {
        let pairs = value
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| {
                        let v = match v {
                            serde_json::Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        (k.clone(), v)
                    })
                    .collect()
            })
            .unwrap_or_default();
        Args::Form(pairs)
    }

    fn get(&self, key: &str) -> Option<String> {
        match self {
            Args::Json(v) => v.get(key).and_then(|v| v.as_str()).map(str::to_string),
            Args::Form(pairs) => pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()),
        }
    }

    /// For the log: the arguments without anything that looks like a token.
    fn describe(&self) -> String {
        let text = match self {
            Args::Json(v) => v.to_string(),
            Args::Form(pairs) => format!("{pairs:?}"),
        };
        text.chars().take(2000).collect()
    }
}

/// What a call answers without a token (local mode): `ok`, and for a message a `ts` made from
/// the clock and its `channel`, so that a bot can go on (update the message it "posted").
fn logged_answer(method: &str, args: &Args) -> serde_json::Value {
    let mut answer = serde_json::json!({"ok": true, "logged": true});
    if method.starts_with("chat.post") || method == "chat.update" {
        let now = crate::clock::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let ts = args
            .get("ts")
            .unwrap_or_else(|| format!("{}.{:06}", now.as_secs(), now.subsec_micros()));
        answer["ts"] = ts.into();
        answer["channel"] = args.get("channel").unwrap_or_default().into();
    }
    if method == "conversations.open" {
        answer["channel"] = serde_json::json!({"id": "D0LOCAL"});
    }
    answer
}

/// The Web API client. Built once per process and shared.
#[derive(Clone)]
pub struct SlackClient {
    base_url: String,
    pub(super) secrets: Arc<dyn TokenSource>,
    http: Client<Connector, Full<Bytes>>,
    /// Whether the connection to Slack was opened ahead of the first call ([`Self::warm_up`]).
    warmed: Arc<std::sync::atomic::AtomicBool>,
    /// Without a token, log each call instead of making it (local mode only: on Lambda a call
    /// without a token fails, `not_authed`, and says why).
    log_without_token: bool,
}

impl std::fmt::Debug for SlackClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackClient")
            .field("base_url", &self.base_url)
            .field("token", &self.secrets.current())
            .finish()
    }
}

impl SlackClient {
    /// A client with a fixed token. Without one, writes are logged instead of made.
    pub fn new(base_url: impl Into<String>, token: Option<Secret>) -> Self {
        Self::with_secrets(base_url, Arc::new(SlackSecrets::fixed(None, token)))
    }

    /// `base_url` is the Web API base (`https://slack.com/api`); method names are appended.
    /// The token is the secrets' current one.
    pub(crate) fn with_secrets(base_url: impl Into<String>, secrets: Arc<SlackSecrets>) -> Self {
        // The process's one TLS configuration, shared with the AWS SDK's clients.
        let connector = Connector::Https(crate::aws::https_connector(Duration::from_secs(2)));
        Self::with_connector(base_url, secrets, connector)
    }

    /// As [`Self::with_secrets`], connecting with `connector` (the crash explorer's Slack is
    /// in process: [`Connector::Memory`]).
    pub(crate) fn with_connector(
        base_url: impl Into<String>,
        secrets: Arc<SlackSecrets>,
        connector: Connector,
    ) -> Self {
        let http = Client::builder(TokioExecutor::new())
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .build(connector);
        Self {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            secrets: secrets as Arc<dyn TokenSource>,
            http,
            warmed: Arc::default(),
            log_without_token: true,
        }
    }

    /// This client, its connections shared, with its tokens from `tokens` (a workspace's
    /// installation).
    pub fn with_tokens(&self, tokens: Arc<dyn TokenSource>) -> Self {
        Self {
            secrets: tokens,
            ..self.clone()
        }
    }

    /// This client, its connections and installation kept, calling with a step execution's own
    /// token (`bot_access_token` of `function_executed`, or of a click or submission in a
    /// step), when `token` is one; else this client as it is.
    pub fn for_execution(&self, token: Option<&Secret>) -> Self {
        match token {
            Some(token) => self.with_tokens(Arc::new(ExecutionToken {
                token: token.clone(),
                installation: self.installation().map(str::to_string),
            })),
            None => self.clone(),
        }
    }

    /// The installation this client's token is (see [`TokenSource::installation`]): whose
    /// tenant a request answered with it is.
    pub fn installation(&self) -> Option<&str> {
        self.secrets.installation()
    }

    /// Calls `method` with a form and the given token (not the client's): the OAuth exchanges
    /// (`oauth.v2.access` takes the client's credentials in the form, no token) and
    /// `auth.test` with a token just issued. Nothing is retried but a 429 within `deadline`.
    pub async fn call_with(
        &self,
        method: &str,
        form: &[(&str, &str)],
        token: Option<&Secret>,
        deadline: Instant,
    ) -> Result<serde_json::Value, SlackError> {
        let body = Bytes::from(
            form.iter()
                .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
                .collect::<Vec<_>>()
                .join("&"),
        );
        let url = format!("{}/{method}", self.base_url);
        let mut answer: serde_json::Value = self
            .call_until(method, deadline, || {
                let mut request = Request::builder()
                    .method(Method::POST)
                    .uri(&url)
                    .header(CONTENT_TYPE, "application/x-www-form-urlencoded");
                if let Some(token) = token {
                    request = request.header(AUTHORIZATION, format!("Bearer {}", token.expose()));
                }
                request
                    .body(Full::new(body.clone()))
                    .expect("a valid request")
            })
            .await?;
        if let Some(fields) = answer.as_object_mut() {
            fields.insert("ok".into(), true.into());
        }
        Ok(answer)
    }

    /// Without a token, each call fails (`not_authed`) instead of being logged: what Lambda
    /// needs, where a logged call would be taken for made.
    pub fn calls_need_a_token(mut self) -> Self {
        self.log_without_token = false;
        self
    }

    /// A call that cannot be made for want of a token: logged in local mode (`Some`, a
    /// plausible answer), refused elsewhere.
    pub(super) fn without_token(
        &self,
        what: &str,
        shown: impl FnOnce() -> String,
    ) -> Option<Result<(), SlackError>> {
        if self.secrets.current().is_some() {
            return None;
        }
        if self.log_without_token {
            tracing::info!(
                call = what,
                args = %shown(),
                "SLACK_BOT_TOKEN is not set: the call is logged, not made"
            );
            return Some(Ok(()));
        }
        tracing::error!(
            call = what,
            "no bot token: the call is not made (set SLACK_BOT_TOKEN, or bot_token in the \
             secret SLACK_SECRETS_ARN names; a deferred ingress needs it when a listener opens a \
             view before its acknowledgement)"
        );
        Some(Err(SlackError::Api {
            code: "not_authed".into(),
        }))
    }

    /// Opens the connection to Slack (TCP and TLS) in the background, once per process, so that
    /// a cold start's first post does not wait for it after the claim: called when a verified
    /// event is about to be claimed. A `HEAD` of `api.test`, without the token; its answer is
    /// ignored, and the connection kept in the pool for the post. Nothing without a token.
    pub fn warm_up(&self) {
        use std::sync::atomic::Ordering;
        if self.warmed.swap(true, Ordering::Relaxed) || !self.has_token() {
            return;
        }
        let Ok(request) = Request::builder()
            .method(Method::HEAD)
            .uri(format!("{}/api.test", self.base_url))
            .body(Full::new(Bytes::new()))
        else {
            return;
        };
        let http = self.http.clone();
        tokio::spawn(async move {
            let sent = tokio::time::timeout(Duration::from_secs(2), http.request(request));
            if let Ok(Ok(response)) = sent.await {
                // Read to its end so the connection goes back to the pool.
                let _ = response.into_body().collect().await;
            }
        });
    }

    /// The Web API base, without a trailing slash (`SLACK_API_URL`).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Whether calls reach Slack (a bot token is set); without one, writes are logged.
    pub fn has_token(&self) -> bool {
        self.secrets.current().is_some()
    }

    /// Calls the Web API method `method` with `args` and returns Slack's answer (`ok: true`),
    /// waiting out HTTP 429s while `deadline` allows: a 429 means Slack did nothing, so asking
    /// again repeats nothing. A refused token is asked about once more (see `authorized`).
    /// Any other failure is returned as it is; whether the call may have taken effect is
    /// [`SlackError::may_have_posted`]. Without a token (local mode), the call is logged and a
    /// plausible answer returned (a `ts` for messages).
    pub async fn api(
        &self,
        method: &str,
        args: &Args,
        deadline: Instant,
    ) -> Result<serde_json::Value, SlackError> {
        match self.without_token(method, || args.describe()) {
            Some(Ok(())) => return Ok(logged_answer(method, args)),
            Some(Err(e)) => return Err(e),
            None => {}
        }
        let (content_type, body) = match args {
            Args::Json(value) => (
                "application/json; charset=utf-8",
                Bytes::from(serde_json::to_vec(value).expect("JSON serialises")),
            ),
            Args::Form(pairs) => (
                "application/x-www-form-urlencoded",
                Bytes::from(
                    pairs
                        .iter()
                        .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
                        .collect::<Vec<_>>()
                        .join("&"),
                ),
            ),
        };
        let url = format!("{}/{method}", self.base_url);
        let mut answer: serde_json::Value = self
            .authorized(method, deadline, |token| {
                Request::builder()
                    .method(Method::POST)
                    .uri(&url)
                    .header(CONTENT_TYPE, content_type)
                    .header(AUTHORIZATION, format!("Bearer {}", token.expose()))
                    .body(Full::new(body.clone()))
                    .expect("a valid request")
            })
            .await?;
        // `ok` was read off into the envelope: the method's answer is whole again.
        if let Some(fields) = answer.as_object_mut() {
            fields.insert("ok".into(), true.into());
        }
        Ok(answer)
    }

    /// Sends the request `request` makes with the bot token, as [`Self::call_until`] does. When
    /// Slack refuses the token (`invalid_auth`, `token_revoked`, …), it did nothing, so the call
    /// can be made again: the secret is consulted ([`SlackSecrets::token_refused`]: read again
    /// unless a read since this call was sent already did, one read for concurrent refusals)
    /// and, if it
    /// holds another token now, the call is made once more with it. A token the secret still
    /// holds after a read begun since the call was sent stands refused when an earlier read had
    /// already found it there before the call (Slack's error, for good); the first time, or
    /// when the secret could not be read, it is [`SlackError::TokenUnconfirmed`] (released: a
    /// later delivery meets the secret as it is then).
    pub(super) async fn authorized<T: DeserializeOwned>(
        &self,
        method: &str,
        deadline: Instant,
        request: impl Fn(&Secret) -> Request<Full<Bytes>>,
    ) -> Result<T, SlackError> {
        self.secrets.prepare(deadline).await;
        let Some(used) = self.secrets.current() else {
            return Err(SlackError::Api {
                code: "not_authed".into(),
            });
        };
        let sent_at = Instant::now();
        match self.call_until(method, deadline, || request(&used)).await {
            Err(SlackError::Api { code }) if TOKEN_ERRORS.contains(&code.as_str()) => {
                match self.secrets.refused(&used, sent_at).await {
                    Refused::Renewed(token) => {
                        tracing::info!(method, "calling again with the bot token read again");
                        self.call_until(method, deadline, || request(&token)).await
                    }
                    Refused::Confirmed if self.secrets.refusals_are_final() => {
                        Err(SlackError::ExecutionTokenRefused { code })
                    }
                    Refused::Confirmed => Err(SlackError::Api { code }),
                    Refused::Unknown => Err(SlackError::TokenUnconfirmed { code }),
                }
            }
            other => other,
        }
    }

    /// Posts `body` to a `response_url` (checked by the caller with
    /// [`crate::slack::interaction::allowed_response_url`]): no token goes with it (the URL is the
    /// credential), 429s are waited out while `deadline` allows. Slack answers the text `ok`
    /// (or JSON with `ok`), and refuses with a 4xx whose body is the error's code as text
    /// (`used_url`, `expired_url`, `no_text`, `invalid_payload`…): [`SlackError::Api`] with that
    /// code. Without a token (local mode), the post is logged, not made.
    pub async fn respond(
        &self,
        url: &http::Uri,
        body: &serde_json::Value,
        deadline: Instant,
    ) -> Result<serde_json::Value, SlackError> {
        let shown = || body.to_string().chars().take(2000).collect::<String>();
        match self.without_token("response_url", shown) {
            Some(Ok(())) => return Ok(serde_json::json!({"ok": true, "logged": true})),
            Some(Err(e)) => return Err(e),
            None => {}
        }
        let bytes = Bytes::from(serde_json::to_vec(body).expect("JSON serialises"));
        loop {
            if Instant::now() >= deadline {
                return Err(SlackError::NotSent);
            }
            let request = Request::builder()
                .method(Method::POST)
                .uri(url.clone())
                .header(CONTENT_TYPE, "application/json; charset=utf-8")
                .body(Full::new(bytes.clone()))
                .expect("a valid request");
            let response = tokio::time::timeout_at(deadline, self.http.request(request))
                .await
                .map_err(|_| SlackError::Timeout)?
                .map_err(SlackError::Transport)?;
            let status = response.status();
            if status == StatusCode::TOO_MANY_REQUESTS {
                let retry_after = retry_after(response.headers());
                if Instant::now() + retry_after >= deadline {
                    return Err(SlackError::RateLimited { retry_after });
                }
                crate::metrics::count("SlackRateLimitWaits");
                tracing::warn!(?retry_after, "Slack rate-limited the response; waiting");
                tokio::time::sleep(retry_after).await;
                continue;
            }
            let read = Limited::new(response.into_body(), MAX_RESPONSE_BYTES).collect();
            let text = tokio::time::timeout_at(deadline, read)
                .await
                .map_err(|_| SlackError::Timeout)?
                .map_err(SlackError::InvalidResponse)?
                .to_bytes();
            let text = String::from_utf8_lossy(&text);
            let text = text.trim();
            if let Ok(answer) = serde_json::from_str::<serde_json::Value>(text)
                && answer.get("ok") == Some(&serde_json::Value::Bool(false))
            {
                let code = answer["error"].as_str().unwrap_or("unknown_error");
                return Err(SlackError::Api { code: code.into() });
            }
            if status.is_success() {
                return Ok(serde_json::json!({"ok": true}));
            }
            let is_code = !text.is_empty()
                && text.len() <= 64
                && text
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if status.is_client_error() && is_code {
                return Err(SlackError::Api { code: text.into() });
            }
            return Err(SlackError::Status { status });
        }
    }

    /// Sends the request `request` makes, and again after each HTTP 429 while `deadline`
    /// allows (a 429 means Slack did nothing, so asking again repeats nothing); the whole
    /// exchange ends by `deadline`.
    async fn call_until<T: DeserializeOwned>(
        &self,
        method: &str,
        deadline: Instant,
        request: impl Fn() -> Request<Full<Bytes>>,
    ) -> Result<T, SlackError> {
        loop {
            if Instant::now() >= deadline {
                return Err(SlackError::NotSent);
            }
            match tokio::time::timeout_at(deadline, self.call::<T>(request()))
                .await
                .map_err(|_| SlackError::Timeout)??
            {
                Answer::Done(answer) => return Ok(answer),
                Answer::RateLimited(retry_after) => {
                    if Instant::now() + retry_after >= deadline {
                        return Err(SlackError::RateLimited { retry_after });
                    }
                    crate::metrics::count("SlackRateLimitWaits");
                    tracing::warn!(?retry_after, method, "Slack rate-limited the call; waiting");
                    tokio::time::sleep(retry_after).await;
                }
            }
        }
    }

    /// Sends one Web API request; `ok: false` becomes [`SlackError::Api`] with Slack's code.
    async fn call<T: DeserializeOwned>(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Answer<T>, SlackError> {
        let response = self
            .http
            .request(request)
            .await
            .map_err(SlackError::Transport)?;
        let status = response.status();
        if status == StatusCode::TOO_MANY_REQUESTS {
            let retry_after = retry_after(response.headers());
            return Ok(Answer::RateLimited(retry_after));
        }
        if !status.is_success() {
            return Err(SlackError::Status { status });
        }
        let bytes = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(SlackError::InvalidResponse)?
            .to_bytes();
        let answer: ApiAnswer<T> =
            serde_json::from_slice(&bytes).map_err(|e| SlackError::InvalidResponse(Box::new(e)))?;
        match (answer.ok, answer.rest) {
            (true, Some(rest)) => Ok(Answer::Done(rest)),
            (true, None) => Err(SlackError::InvalidResponse("ok without a result".into())),
            (false, _) => Err(SlackError::Api {
                code: answer.error.unwrap_or_else(|| "unknown_error".into()),
            }),
        }
    }
}

enum Answer<T> {
    Done(T),
    RateLimited(Duration),
}

/// How long a 429 asks to wait (`Retry-After`, in seconds; a default when it says nothing usable).
fn retry_after(headers: &http::HeaderMap) -> Duration {
    headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_RETRY_AFTER)
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub(super) fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Read methods Slack names in ways the rule below does not catch.
const READS: &[&str] = &[
    "assistant.search.context",
    "team.accessLogs",
    "team.billableInfo",
    "team.integrationLogs",
    "dnd.teamInfo",
    "openid.connect.userInfo",
    "apps.manifest.export",
    "apps.manifest.validate",
    "migration.exchange",
    "rtm.connect",
    "conversations.open",
    "users.conversations",
    "users.identity",
    "users.getPresence",
    "bots.info",
];

/// Methods the rule below would take for reads, that change something.
const WRITES: &[&str] = &["files.getUploadURLExternal"];

/// Whether the Web API method `method` only reads (changes nothing in Slack): what
/// `Ctx::read` accepts. Slack's methods named as reads: a last part that lists,
/// gets, looks up or tells (`conversations.history`, `conversations.replies`, `users.info`,
/// `chat.getPermalink`, `users.lookupByEmail`, `reactions.get`, `auth.test`…), the `search.*`
/// methods, and those named in a list of their own (`assistant.search.context`,
/// `team.accessLogs`, `conversations.open`, which finds a conversation, opening a DM only if
/// there is none…); `files.getUploadURLExternal` reserves an upload and is a write. Anything
/// else is taken for a write.
pub fn is_read_method(method: &str) -> bool {
    if WRITES.contains(&method) {
        return false;
    }
    if READS.contains(&method) {
        return true;
    }
    let last = method.rsplit('.').next().unwrap_or_default();
    let family = method.split('.').next().unwrap_or_default();
    family == "search"
        || matches!(
            last,
            "list" | "info" | "history" | "replies" | "members" | "test" | "get" | "lookup"
        )
        || ["list", "get", "lookup"].iter().any(|verb| {
            last.starts_with(verb)
                && last.len() > verb.len()
                && last[verb.len()..].starts_with(|c: char| c.is_ascii_uppercase())
        })
}

tokio::task_local! {
    /// The Web API base [`api_url`] gives while a test harness serves a request (a `TestBot`'s:
    /// its own stand-in's): each test its own, whatever else runs in the test process.
    static OWN_CLIENT_BASE: String;
}

/// A test harness started in this process (a `TestBot`, the crash explorer):
/// from then on [`api_url`] never gives Slack's own base.
static UNDER_TEST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// [`api_url`]'s base in a test process outside any test's request: a port of 127.0.0.1
/// nothing listens on (9, discard), so the call fails there and never reaches Slack.
const NOWHERE: &str = "http://127.0.0.1:9/api";

#[cfg(feature = "testing")]
/// Runs `work` (the serving of a request) with `base` as [`api_url`]'s answer inside it.
pub(crate) async fn with_own_client_base<F: std::future::Future>(
    base: String,
    work: F,
) -> F::Output {
    under_test();
    OWN_CLIENT_BASE.scope(base, work).await
}

#[cfg(feature = "testing")]
/// This process is a test's: [`api_url`] never gives Slack's own base from now on.
pub(crate) fn under_test() {
    UNDER_TEST.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// The Web API base a client of the bot's own should call (without a trailing slash):
/// `SLACK_API_URL` where set (the local stand-in), else `https://slack.com/api`. In a test: a
/// `TestBot`'s request, its own stand-in's (`/around/api` there, so that the
/// stand-in tells these calls from slack-once's); an exploration's schedule, the explorer's
/// Slack, which names every write made there as a defect ("a Slack call that is not a step of
/// the journal"); any other code of a test process (a thread the bot started), never Slack: the
/// explorer's door while an exploration runs, else a port of 127.0.0.1 nothing listens on.
/// slack-once's own calls never need it: every write a listener makes goes through
/// the listener's `Ctx`, as a step of the journal.
pub fn api_url() -> String {
    if let Ok(base) = OWN_CLIENT_BASE.try_with(Clone::clone) {
        return base;
    }
    if let Some(url) = crate::hooks::installed().and_then(|hooks| hooks.side_door_url()) {
        return url;
    }
    if UNDER_TEST.load(std::sync::atomic::Ordering::SeqCst) {
        return NOWHERE.to_string();
    }
    std::env::var("SLACK_API_URL")
        .ok()
        .map(|u| u.trim().trim_end_matches('/').to_string())
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| crate::config::DEFAULT_SLACK_API_URL.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn reads_are_told_from_writes_by_slacks_method_names() {
        for read in [
            "conversations.history",
            "conversations.replies",
            "conversations.info",
            "conversations.list",
            "conversations.members",
            "conversations.open",
            "users.info",
            "users.lookupByEmail",
            "users.getPresence",
            "chat.getPermalink",
            "auth.test",
            "team.info",
            "search.messages",
            "reactions.get",
            "pins.list",
            "assistant.search.context",
            "team.accessLogs",
            "dnd.teamInfo",
        ] {
            assert!(is_read_method(read), "{read} reads");
        }
        for write in [
            "chat.postMessage",
            "chat.update",
            "chat.delete",
            "chat.postEphemeral",
            "chat.startStream",
            "reactions.add",
            "views.open",
            "conversations.setTopic",
            "conversations.invite",
            "pins.add",
            "users.setPresence",
            "files.getUploadURLExternal",
            "listing",
        ] {
            assert!(!is_read_method(write), "{write} writes");
        }
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(percent_encode("1700000000.000100"), "1700000000.000100");
        assert_eq!(percent_encode("a b&c=d"), "a%20b%26c%3Dd");
    }

    #[test]
    fn the_token_never_appears_in_debug_output() {
        let client = SlackClient::new(
            "http://127.0.0.1:1/api/",
            Some(Secret::new("xoxb-very-secret")),
        );
        let printed = format!("{client:?}");
        assert!(!printed.contains("xoxb-very-secret"), "{printed}");
        assert_eq!(client.base_url(), "http://127.0.0.1:1/api");
    }
}
