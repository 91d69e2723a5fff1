//! The Slack Web API client: any method with the bot token within a deadline (429s waited
//! out, nothing else retried), and the look-up of an earlier post by its metadata.
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

use crate::config::Secret;
use crate::net::Connector;
use crate::secrets::{Refused, SlackSecrets};

/// The `event_type` of the metadata attached to every reply, naming the event it answers.
pub const REPLY_METADATA_TYPE: &str = "slack_once_reply";

/// Slack's answers are small; anything larger than this is not Slack's.
const MAX_RESPONSE_BYTES: usize = 1 << 20;
/// Used when a 429 comes without a usable `Retry-After`.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
/// conversations.history / .replies page size: since 2025-05-29, new commercially distributed
/// apps outside the Marketplace get at most 15 items a call (and 1 call a minute).
pub const LOOKUP_PAGE_SIZE: u32 = 15;

/// chat.postMessage's documented errors that no retry can fix: the event ends `failed`.
/// (`ratelimited`, `request_timeout`, `service_unavailable`, `team_added_to_org`,
/// `internal_error`, `fatal_error` and codes not listed here are treated as transient.)
pub const PERMANENT_POST_ERRORS: &[&str] = &[
    "access_denied",
    "account_inactive",
    "as_user_not_supported",
    "cannot_reply_to_message",
    "channel_not_found",
    "deprecated_endpoint",
    "duplicate_channel_not_found",
    "duplicate_message_not_found",
    "ekm_access_denied",
    "enterprise_is_restricted",
    "invalid_arg_name",
    "invalid_arguments",
    "invalid_array_arg",
    "invalid_auth",
    "invalid_blocks",
    "invalid_blocks_format",
    "invalid_charset",
    "invalid_form_data",
    "invalid_metadata_format",
    "invalid_metadata_schema",
    "invalid_post_type",
    "is_archived",
    "messages_tab_disabled",
    "metadata_must_be_sent_from_app",
    "metadata_too_large",
    "method_deprecated",
    "missing_post_type",
    // A stream outside a DM without whom it is for (`chat.startStream`).
    "missing_recipient_team_id",
    "missing_recipient_user_id",
    "missing_scope",
    "msg_blocks_too_long",
    "msg_too_long",
    "no_permission",
    "no_text",
    "not_allowed_token_type",
    "not_authed",
    "not_in_channel",
    "restricted_action",
    "restricted_action_non_threadable_channel",
    "restricted_action_read_only_channel",
    "restricted_action_thread_locked",
    "restricted_action_thread_only_channel",
    "slack_connect_canvas_sharing_blocked",
    "slack_connect_file_link_sharing_blocked",
    "slack_connect_lists_sharing_blocked",
    "team_access_not_granted",
    "token_expired",
    "token_revoked",
    "too_many_attachments",
    "too_many_contact_cards",
    "two_factor_setup_required",
];

/// The errors of an interaction's follow-ups that no retry can fix: a `trigger_id` spent or
/// expired (`views.open` / `views.push`), a view too large, a `response_url` used up, expired,
/// or refused here because it is not Slack's (`response_url_refused`), a request without one.
/// Only codes no other method answers: generic ones (`not_found`, `hash_conflict`,
/// `message_not_found`) stay transient for every method, as before.
pub const PERMANENT_INTERACTION_ERRORS: &[&str] = &[
    "expired_trigger_id",
    "exchanged_trigger_id",
    "invalid_trigger_id",
    "view_too_large",
    "used_url",
    "expired_url",
    "response_url_refused",
    "no_response_url",
];

/// A step completion's errors no retry fixes: the execution ended, is unknown, or the outputs
/// were refused (`functions.completeSuccess`, `functions.completeError`).
pub const PERMANENT_STEP_ERRORS: &[&str] = &[
    "execution_not_in_running_state",
    "function_execution_not_found",
    "parameter_validation_failed",
    "access_denied",
];

/// Why a Slack call failed; [`SlackError::may_have_posted`] says whether it may have taken
/// effect all the same.
#[derive(Debug, thiserror::Error)]
pub enum SlackError {
    /// Slack answered `ok: false`; the code is Slack's (`channel_not_found`, `internal_error`…).
    #[error("Slack answered ok:false with {code}")]
    Api {
        /// Slack's error code.
        code: String,
    },
    /// Rate limited, and waiting `retry_after` would pass the deadline.
    #[error(
        "Slack rate-limited the post (Retry-After {retry_after:?}) and the deadline leaves no time to wait"
    )]
    RateLimited {
        /// How long Slack asked to wait (`Retry-After`, or 1 s without a usable one).
        retry_after: Duration,
    },
    /// Slack answered a non-2xx HTTP status (other than 429) without an error code.
    #[error("Slack answered HTTP {status}")]
    Status {
        /// The HTTP status.
        status: StatusCode,
    },
    /// The request failed on its connection: when connecting (nothing was made), or later (it
    /// may have been).
    #[error("the request to Slack failed")]
    Transport(#[source] hyper_util::client::legacy::Error),
    /// No whole answer came before the deadline: the call may have been made.
    #[error("Slack did not answer before the deadline")]
    Timeout,
    /// The deadline had passed before the request was sent: certainly not made.
    #[error("the deadline passed before the request to Slack was sent")]
    NotSent,
    /// Slack's answer could not be read or used (too large, not the JSON expected, a field
    /// missing, a look-up that cannot go on).
    #[error("Slack's answer could not be read")]
    InvalidResponse(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Slack refused the bot token (`code`), and the secret, read again, did not settle it (it
    /// could not be read, or it still holds that token for the first time): a later delivery
    /// tries again.
    #[error("Slack refused the bot token ({code}) and the secret held no other one yet")]
    TokenUnconfirmed {
        /// Slack's error code for the token (`invalid_auth`, `token_revoked`…).
        code: String,
    },
    /// Slack refused a token nothing can renew (a Workflow Builder step execution's own, which
    /// Slack revokes when the execution ends and expires 15 minutes after issuing it): no
    /// retry of this request can make the call.
    #[error("Slack refused the step execution's token ({code})")]
    ExecutionTokenRefused {
        /// Slack's error code (`token_revoked`, `token_expired`…).
        code: String,
    },
    /// The event names neither this app (`api_app_id`) nor its bot user: its own messages
    /// cannot be told from other apps', so none is taken for its own.
    #[error(
        "the event names neither the app nor its bot user: this app's messages cannot be told from other apps'"
    )]
    Unidentified,
}

impl SlackError {
    /// Whether no retry can fix this (a documented permanent error of chat.postMessage, or of
    /// an interaction's follow-ups): the event then ends `failed` instead of burning retries.
    pub fn is_permanent(&self) -> bool {
        match self {
            SlackError::Api { code } => {
                PERMANENT_POST_ERRORS.contains(&code.as_str())
                    || PERMANENT_INTERACTION_ERRORS.contains(&code.as_str())
                    || PERMANENT_STEP_ERRORS.contains(&code.as_str())
            }
            SlackError::ExecutionTokenRefused { .. } => true,
            _ => false,
        }
    }

    /// Whether Slack refused the token itself (`invalid_auth`,
    /// `token_revoked`, `account_inactive`, …): the token is no longer good, and asking again
    /// with it changes nothing. Any other failure (`internal_error`, `fatal_error`,
    /// `ratelimited`, `request_timeout`, a 5xx, a timeout) says nothing of the token.
    pub fn refuses_token(&self) -> bool {
        matches!(self, SlackError::Api { code } if TOKEN_ERRORS.contains(&code.as_str()))
    }

    /// Slack's error code, if Slack answered `ok:false`.
    pub fn code(&self) -> Option<&str> {
        match self {
            SlackError::Api { code } | SlackError::ExecutionTokenRefused { code } => Some(code),
            _ => None,
        }
    }

    /// Whether the message may have been posted although this call failed. Slack says
    /// `internal_error` and `fatal_error` posts may have succeeded; a timeout or a connection
    /// lost after the request was sent leaves the same doubt. Such failures are never retried here.
    pub fn may_have_posted(&self) -> bool {
        match self {
            SlackError::Api { code } => matches!(code.as_str(), "internal_error" | "fatal_error"),
            SlackError::Timeout | SlackError::InvalidResponse(_) => true,
            SlackError::Transport(e) => !e.is_connect(),
            SlackError::Status { status } => status.is_server_error(),
            SlackError::RateLimited { .. }
            | SlackError::NotSent
            | SlackError::TokenUnconfirmed { .. }
            | SlackError::ExecutionTokenRefused { .. }
            | SlackError::Unidentified => false,
        }
    }
}

/// Every Web API answer: `ok`, Slack's `error` code when not ok, and the method's own fields.
#[derive(Deserialize)]
struct ApiAnswer<T> {
    ok: bool,
    #[serde(default)]
    error: Option<String>,
    #[serde(flatten)]
    rest: Option<T>,
}

#[derive(Deserialize)]
struct History {
    #[serde(default)]
    messages: Vec<HistoryMessage>,
    #[serde(default)]
    has_more: bool,
    #[serde(default)]
    response_metadata: Option<ResponseMetadata>,
}

#[derive(Deserialize)]
struct ResponseMetadata {
    #[serde(default)]
    next_cursor: Option<String>,
}

#[derive(Deserialize)]
struct HistoryMessage {
    ts: String,
    #[serde(default)]
    metadata: Option<MessageMetadata>,
    #[serde(default)]
    app_id: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    bot_profile: Option<BotProfile>,
}

#[derive(Deserialize)]
struct BotProfile {
    #[serde(default)]
    app_id: Option<String>,
}

/// This app, as an event names it: its `api_app_id` and its bot user in the workspace.
#[derive(Clone, Copy, Debug, Default)]
pub struct OurApp<'a> {
    /// The app's id (`api_app_id`), when the event names it.
    pub app_id: Option<&'a str>,
    /// The bot's user id in the workspace, when known.
    pub bot_user_id: Option<&'a str>,
}

impl OurApp<'_> {
    /// Whether `message` was posted by this app: by its app id when the event names it (a
    /// staging and a production app in one channel have different ids), else by its bot user.
    fn posted(&self, message: &HistoryMessage) -> bool {
        match (self.app_id, self.bot_user_id) {
            (Some(app), _) => {
                message.app_id.as_deref() == Some(app)
                    || message
                        .bot_profile
                        .as_ref()
                        .and_then(|p| p.app_id.as_deref())
                        == Some(app)
            }
            (None, Some(user)) => message.user.as_deref() == Some(user),
            (None, None) => false,
        }
    }
}

/// A message slack-once posted, found in Slack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The conversation it is in (for a post to a user, the DM's id).
    pub channel: String,
    /// The message's `ts`.
    pub ts: String,
}

#[derive(Deserialize)]
struct MessageMetadata {
    event_type: String,
    #[serde(default)]
    event_payload: serde_json::Map<String, serde_json::Value>,
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

/// Where to look for a message slack-once may have posted.
#[derive(Clone, Copy, Debug)]
pub struct ReplyQuery<'a> {
    /// A conversation's id, or a user's (`U…`, `W…`): a post to a user goes to the DM with the
    /// bot, which is looked in.
    pub channel: &'a str,
    /// The thread's parent `ts`, for a reply in a thread.
    pub thread_ts: Option<&'a str>,
    /// Nothing older can be the message (its claim's intent, less a margin).
    pub oldest: Option<&'a str>,
    /// Nothing newer can be it (its claim's lease end, plus a margin).
    pub latest: Option<&'a str>,
    /// The ledger key of the claim that posted (the event id, or the message's identity).
    pub key: &'a str,
    /// The journal step that posted it (numbered from 1).
    pub step: u32,
    /// Only this app's messages can be the one.
    pub app: OurApp<'a>,
    /// Also take this app's message that carries no slack-once names (a stream not yet
    /// stopped: `chat.startStream` takes no metadata), in the window and the thread.
    pub adopt_unmarked: bool,
    /// Where an earlier look-up of the same window stopped ([`Lookup::reached`]: `>TS` when it
    /// searched the window up to TS, `<TS` from TS on): searched on from there.
    pub resume: Option<&'a str>,
}

/// What a look-up came to: its result, and how far it got (the edge of the window the pages it
/// read in full cover: `<TS`, the oldest `ts` read when pages come newest first, as
/// `conversations.history`'s do; `>TS`, the newest when oldest first), so that one cut short
/// can be gone on with.
#[derive(Debug)]
pub struct Lookup {
    /// The message found; `Ok(None)`: not in the window; `Err`: Slack could not be asked, which
    /// is no "not found".
    pub result: Result<Option<Found>, SlackError>,
    /// How far it got (`<TS` or `>TS`), for [`ReplyQuery::resume`]; `None`: no page was read
    /// far enough to say.
    pub reached: Option<String>,
}

/// The key under which slack-once keeps its own names in a message's metadata
/// (`event_payload.slack_once`): reserved, a bot's own metadata cannot use it.
pub const METADATA_KEY: &str = "slack_once";

/// The metadata a post carries: the bot's own `{event_type, event_payload}` (or slack-once's
/// default type) with `event_payload.slack_once` naming the claim and step that posted it.
pub fn post_metadata(
    own: Option<&serde_json::Value>,
    names: serde_json::Value,
) -> serde_json::Value {
    let mut metadata = match own {
        Some(own @ serde_json::Value::Object(_)) => own.clone(),
        _ => serde_json::json!({"event_type": REPLY_METADATA_TYPE, "event_payload": {}}),
    };
    if !metadata["event_payload"].is_object() {
        metadata["event_payload"] = serde_json::json!({});
    }
    metadata["event_payload"][METADATA_KEY] = names;
    metadata
}

/// The (ledger key, step) a message's metadata names, if slack-once posted it. Replies of
/// versions before the step journal carry `event_payload.event_id` and no step (step 1).
fn metadata_names(metadata: &MessageMetadata) -> Option<(&str, u64)> {
    let payload = &metadata.event_payload;
    match payload.get(METADATA_KEY).and_then(|v| v.as_object()) {
        Some(names) => Some((
            names.get("key")?.as_str()?,
            names.get("step").and_then(|s| s.as_u64()).unwrap_or(1),
        )),
        None if metadata.event_type == REPLY_METADATA_TYPE => Some((
            payload.get("event_id")?.as_str()?,
            payload.get("step").and_then(|s| s.as_u64()).unwrap_or(1),
        )),
        None => None,
    }
}

/// Slack's answers that mean the token is no longer good: the secret is consulted and, if it
/// holds another token, the call is made once more (it did nothing the first time).
const TOKEN_ERRORS: &[&str] = &[
    "invalid_auth",
    "not_authed",
    "token_revoked",
    "token_expired",
    "account_inactive",
];

/// Where a client's bot token comes from: the process's secrets (one workspace), or a
/// workspace's installation (multi-workspace mode: [`crate::workspaces`]).
#[async_trait::async_trait]
pub trait TokenSource: Send + Sync {
    /// The token to call with now (`None`: none is known).
    fn current(&self) -> Option<Secret>;
    /// Slack refused `used`, sent at `sent_at`: whether another token is to be had.
    async fn refused(&self, used: &Secret, sent_at: Instant) -> Refused;
    /// Called before each call: a token about to expire is renewed first (within `deadline`).
    async fn prepare(&self, _deadline: Instant) {}
    /// Waits, within `deadline`, for the right to read one page of history with `method` (a
    /// distributed app's limit, per workspace and method); `Err` when none comes in time.
    async fn lookup_slot(&self, _method: &str, _deadline: Instant) -> Result<(), SlackError> {
        Ok(())
    }
    /// The installation whose token this is (multi-workspace mode): its workspace's team id
    /// (`T…`), or its enterprise's id (`E…`) for an org-wide install. `None`: the process's
    /// one token (single-workspace mode).
    fn installation(&self) -> Option<&str> {
        None
    }
    /// Whether a refusal of this source's token stands for good for the request (nothing can
    /// renew it: a step execution's token).
    fn refusals_are_final(&self) -> bool {
        false
    }
}

#[async_trait::async_trait]
impl TokenSource for SlackSecrets {
    fn current(&self) -> Option<Secret> {
        SlackSecrets::current(self).bot_token.clone()
    }

    async fn refused(&self, used: &Secret, sent_at: Instant) -> Refused {
        self.token_refused(used, sent_at).await
    }
}

/// A Workflow Builder step execution's own token (`bot_access_token`, `xwfp-…`), which the
/// request that carries it uses for every call, in place of the installation's: nothing else
/// can renew it, so a refusal stands. The installation (the tenant) stays the one the request
/// is answered for.
struct ExecutionToken {
    token: Secret,
    installation: Option<String>,
}

#[async_trait::async_trait]
impl TokenSource for ExecutionToken {
    fn current(&self) -> Option<Secret> {
        Some(self.token.clone())
    }

    async fn refused(&self, _used: &Secret, _sent_at: Instant) -> Refused {
        Refused::Confirmed
    }

    fn installation(&self) -> Option<&str> {
        self.installation.as_deref()
    }

    fn refusals_are_final(&self) -> bool {
        true
    }
}

/// The Web API client. Built once per process and shared.
#[derive(Clone)]
pub struct SlackClient {
    base_url: String,
    secrets: Arc<dyn TokenSource>,
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
    pub fn with_secrets(base_url: impl Into<String>, secrets: Arc<SlackSecrets>) -> Self {
        // The process's one TLS configuration, shared with the AWS SDK's clients.
        let connector = Connector::Https(crate::aws::https_connector(Duration::from_secs(2)));
        Self::with_connector(base_url, secrets, connector)
    }

    /// As [`Self::with_secrets`], connecting with `connector` (the crash explorer's Slack is
    /// in process: [`Connector::Memory`]).
    pub fn with_connector(
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
    fn without_token(
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
    async fn authorized<T: DeserializeOwned>(
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
    /// [`crate::interaction::allowed_response_url`]): no token goes with it (the URL is the
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

    /// Looks for the message slack-once posted as step `step` of `key`, by the metadata every
    /// post carries, among this app's messages in `channel` (of the thread `thread_ts`, when
    /// set) between `oldest` and `latest`: `conversations.replies` or `conversations.history`
    /// with `include_all_metadata=true`, at most [`LOOKUP_PAGE_SIZE`] messages a page (newest
    /// first in a channel), page after page within the window (from [`ReplyQuery::resume`]
    /// when an earlier look-up got that far), waiting out 429s while `deadline` allows.
    /// A message of another app never matches, whatever its metadata says. Used only where an
    /// earlier claim may have posted. An `Err` result means Slack could not be asked: the
    /// caller must not take "not found" from it; [`Lookup::reached`] says how far it got.
    pub async fn find_reply(&self, query: &ReplyQuery<'_>, deadline: Instant) -> Lookup {
        let mut reached = None;
        let result = self.search(query, deadline, &mut reached).await;
        Lookup { result, reached }
    }

    /// [`Self::find_reply`]'s pages: within the window's bounds, the next one by Slack's
    /// cursor (or, without one, past the edge read); `reached` moved after each page read in
    /// full to the edge of the window the pages cover, with its direction (`>TS`, `<TS`), so
    /// that where it got to means the same to a later look-up, which goes on by bound.
    #[allow(clippy::too_many_lines)] // split in src/slack/
    async fn search(
        &self,
        query: &ReplyQuery<'_>,
        deadline: Instant,
        reached: &mut Option<String>,
    ) -> Result<Option<Found>, SlackError> {
        // Local mode without a token logs its calls: nothing was posted to look for.
        if let Some(without) = self.without_token("a look-up", String::new) {
            return without.map(|()| None);
        }
        if query.app.app_id.is_none() && query.app.bot_user_id.is_none() {
            return Err(SlackError::Unidentified);
        }
        // A post to a user went to the DM between the bot and that user.
        let channel = if is_user_id(query.channel) {
            let args = Args::Form(vec![("users".into(), query.channel.to_string())]);
            let opened = self.api("conversations.open", &args, deadline).await?;
            opened["channel"]["id"]
                .as_str()
                .ok_or_else(|| {
                    SlackError::InvalidResponse("conversations.open without a channel id".into())
                })?
                .to_string()
        } else {
            query.channel.to_string()
        };
        let limit = LOOKUP_PAGE_SIZE.to_string();
        let (method, newest_first) = match query.thread_ts {
            Some(_) => ("conversations.replies", false),
            None => ("conversations.history", true),
        };
        // The window's bounds (exclusive), narrowed by where an earlier look-up got to.
        let mut oldest = query.oldest.map(str::to_string);
        let mut latest = query.latest.map(str::to_string);
        // `>TS`: the window up to TS was searched (pages oldest first); `<TS`: from TS on
        // (newest first).
        match query.resume.map(|r| r.split_at(1)) {
            Some((">", ts)) => oldest = Some(ts.to_string()),
            Some(("<", ts)) => latest = Some(ts.to_string()),
            _ => {}
        }
        // Adopting a stream: this app's messages without slack-once's names, in the window,
        // other than the thread's parent. One is the stream; several cannot be told apart.
        let mut unmarked: Vec<String> = Vec::new();
        // Within this look-up, pages follow Slack's cursor. Where they reach is kept as the edge
        // of the window they cover, read off the order the first page shows (oldest first, or
        // newest first), so that a later look-up goes on from it with a bound, whatever order
        // Slack gives.
        let mut cursor: Option<String> = None;
        let mut oldest_first: Option<bool> = None;
        let after_oldest = |ts: &str| match (query.oldest.and_then(ts_micros), ts_micros(ts)) {
            (Some(oldest), Some(ts)) => ts >= oldest,
            _ => true,
        };
        loop {
            let mut params = vec![
                ("channel", channel.as_str()),
                ("include_all_metadata", "true"),
                ("limit", limit.as_str()),
            ];
            params.extend(query.thread_ts.map(|ts| ("ts", ts)));
            params.extend(oldest.as_deref().map(|o| ("oldest", o)));
            params.extend(latest.as_deref().map(|l| ("latest", l)));
            params.extend(cursor.as_deref().map(|c| ("cursor", c)));
            let encoded: Vec<String> = params
                .iter()
                .map(|(k, v)| format!("{k}={}", percent_encode(v)))
                .collect();
            let uri = format!("{}/{method}?{}", self.base_url, encoded.join("&"));
            // A distributed app's history reads are few a minute per workspace: each page
            // waits for its turn, shared by every instance (or gives up within the deadline).
            self.secrets.lookup_slot(method, deadline).await?;
            let history: History = self
                .authorized(method, deadline, |token| {
                    Request::builder()
                        .method(Method::GET)
                        .uri(&uri)
                        .header(AUTHORIZATION, format!("Bearer {}", token.expose()))
                        .body(Full::new(Bytes::new()))
                        .expect("a valid request")
                })
                .await?;
            let mut read: Vec<u128> = Vec::new();
            for m in &history.messages {
                // The thread's parent comes first on every page of conversations.replies.
                if Some(m.ts.as_str()) == query.thread_ts {
                    continue;
                }
                read.extend(ts_micros(&m.ts));
                if !query.app.posted(m) {
                    continue;
                }
                match m.metadata.as_ref().and_then(metadata_names) {
                    Some(names) if names == (query.key, u64::from(query.step)) => {
                        return Ok(Some(Found {
                            channel,
                            ts: m.ts.clone(),
                        }));
                    }
                    Some(_) => {}
                    // A stream carries no metadata until it is stopped.
                    None if query.adopt_unmarked && after_oldest(&m.ts) => {
                        unmarked.push(m.ts.clone())
                    }
                    None => {}
                }
            }
            if !history.has_more {
                return match unmarked.len() {
                    0 => Ok(None),
                    1 => Ok(Some(Found {
                        channel,
                        ts: unmarked.remove(0),
                    })),
                    n => Err(SlackError::InvalidResponse(
                        format!("{n} unmarked messages of this app in the window: which is the stream cannot be told")
                            .into(),
                    )),
                };
            }
            // How far the pages read reach, in the order they come.
            if oldest_first.is_none() && read.len() >= 2 {
                oldest_first = Some(read.first() < read.last());
            }
            let ascending = oldest_first.unwrap_or(!newest_first);
            let edge = match ascending {
                true => read.iter().max(),
                false => read.iter().min(),
            };
            let ts = edge.map(|m| format!("{}.{:06}", m / 1_000_000, m % 1_000_000));
            let next = history
                .response_metadata
                .and_then(|m| m.next_cursor)
                .filter(|c| !c.is_empty());
            let mark = |ts: &str| format!("{}{ts}", if ascending { ">" } else { "<" });
            match (next, ts) {
                // The edge is kept only once the pages' order is seen (two messages): a bound
                // on the wrong side would skip what was not read.
                (Some(next), ts) => {
                    cursor = Some(next);
                    if let (Some(ts), Some(_)) = (ts, oldest_first) {
                        *reached = Some(mark(&ts));
                    }
                }
                // No cursor: on past the edge, by the bound (a cursor is for its own bounds).
                (None, Some(ts)) => {
                    cursor = None;
                    match ascending {
                        true => oldest = Some(ts.clone()),
                        false => latest = Some(ts.clone()),
                    }
                    if oldest_first.is_some() {
                        *reached = Some(mark(&ts));
                    }
                }
                // More messages that cannot be reached: "not found" would be a guess.
                (None, None) => {
                    return Err(SlackError::InvalidResponse(
                        "has_more without a next_cursor or a message to go on from".into(),
                    ));
                }
            }
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

/// A Slack `ts` as microseconds (`"1700000000.000100"` → 1700000000000100).
fn ts_micros(ts: &str) -> Option<u128> {
    let (secs, frac) = ts.split_once('.').unwrap_or((ts, "0"));
    let frac = format!("{frac:0<6}");
    Some(secs.parse::<u128>().ok()? * 1_000_000 + frac.get(..6)?.parse::<u128>().ok()?)
}

/// A user's id (`U…`, or `W…` on Enterprise Grid), where Slack takes one for a channel.
fn is_user_id(channel: &str) -> bool {
    channel.len() > 1
        && channel.starts_with(['U', 'W'])
        && channel[1..]
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(value: &str) -> String {
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
/// [`crate::app::Ctx::read`] accepts. Slack's methods named as reads: a last part that lists,
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
    /// The Web API base [`api_url`] gives while a test harness serves a request (a
    /// [`crate::testing::TestBot`]'s: its own stand-in's): each test its own, whatever else runs
    /// in the test process.
    static OWN_CLIENT_BASE: String;
}

/// A test harness started in this process ([`crate::testing::TestBot`], the crash explorer):
/// from then on [`api_url`] never gives Slack's own base.
static UNDER_TEST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// [`api_url`]'s base in a test process outside any test's request: a port of 127.0.0.1
/// nothing listens on (9, discard), so the call fails there and never reaches Slack.
const NOWHERE: &str = "http://127.0.0.1:9/api";

/// Runs `work` (the serving of a request) with `base` as [`api_url`]'s answer inside it.
pub(crate) async fn with_own_client_base<F: std::future::Future>(
    base: String,
    work: F,
) -> F::Output {
    under_test();
    OWN_CLIENT_BASE.scope(base, work).await
}

/// This process is a test's: [`api_url`] never gives Slack's own base from now on.
pub(crate) fn under_test() {
    UNDER_TEST.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// The Web API base a client of the bot's own should call (without a trailing slash):
/// `SLACK_API_URL` where set (the local stand-in), else `https://slack.com/api`. In a test: a
/// [`crate::testing::TestBot`]'s request, its own stand-in's (`/around/api` there, so that the
/// stand-in tells these calls from slack-once's); an exploration's schedule, the explorer's
/// Slack, which names every write made there as a defect ("a Slack call that is not a step of
/// the journal"); any other code of a test process (a thread the bot started), never Slack: the
/// explorer's door while an exploration runs, else a port of 127.0.0.1 nothing listens on.
/// slack-once's own calls never need it: every write a listener makes goes through
/// [`crate::app::Ctx`], as a step of the journal.
pub fn api_url() -> String {
    if let Ok(base) = OWN_CLIENT_BASE.try_with(Clone::clone) {
        return base;
    }
    #[cfg(feature = "explore")]
    if let Some(url) = crate::testing::explore::door::url() {
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

    use super::*;

    #[test]
    fn only_a_refused_token_is_a_dead_token() {
        let api = |code: &str| SlackError::Api { code: code.into() };
        for dead in [
            "invalid_auth",
            "token_revoked",
            "account_inactive",
            "not_authed",
        ] {
            assert!(api(dead).refuses_token(), "{dead}");
        }
        for passing in [
            "internal_error",
            "fatal_error",
            "ratelimited",
            "request_timeout",
            "service_unavailable",
        ] {
            assert!(!api(passing).refuses_token(), "{passing}");
        }
        assert!(
            !SlackError::Status {
                status: StatusCode::SERVICE_UNAVAILABLE
            }
            .refuses_token()
        );
        assert!(!SlackError::Timeout.refuses_token());
    }

    #[test]
    fn ambiguous_failures_are_recognised() {
        let api = |code: &str| SlackError::Api { code: code.into() };
        assert!(api("internal_error").may_have_posted());
        assert!(api("fatal_error").may_have_posted());
        assert!(!api("channel_not_found").may_have_posted());
        assert!(SlackError::Timeout.may_have_posted());
        assert!(
            !SlackError::RateLimited {
                retry_after: Duration::from_secs(3)
            }
            .may_have_posted()
        );
        assert!(
            SlackError::Status {
                status: StatusCode::BAD_GATEWAY
            }
            .may_have_posted()
        );
        assert!(
            !SlackError::Status {
                status: StatusCode::NOT_FOUND
            }
            .may_have_posted()
        );
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

    #[test]
    fn a_posts_metadata_keeps_the_bots_own_and_names_the_claim_and_step() {
        let names = serde_json::json!({"key": "msg-T1-C1-1_2", "step": 2});
        let ours = post_metadata(None, names.clone());
        assert_eq!(ours["event_type"], REPLY_METADATA_TYPE);
        assert_eq!(ours["event_payload"]["slack_once"], names);
        let own = serde_json::json!({"event_type": "order", "event_payload": {"id": 7, "slack_once": "mine"}});
        let merged = post_metadata(Some(&own), names.clone());
        assert_eq!(merged["event_type"], "order");
        assert_eq!(merged["event_payload"]["id"], 7);
        assert_eq!(
            merged["event_payload"]["slack_once"], names,
            "the key is reserved"
        );
        let read: MessageMetadata = serde_json::from_value(merged).unwrap();
        assert_eq!(metadata_names(&read), Some(("msg-T1-C1-1_2", 2)));
        // A reply of a version before the journal: its event id, step 1.
        let old: MessageMetadata = serde_json::from_value(serde_json::json!({
            "event_type": REPLY_METADATA_TYPE, "event_payload": {"event_id": "Ev1", "attempt": 1}
        }))
        .unwrap();
        assert_eq!(metadata_names(&old), Some(("Ev1", 1)));
        let foreign: MessageMetadata = serde_json::from_value(
            serde_json::json!({"event_type": "order", "event_payload": {"id": 7}}),
        )
        .unwrap();
        assert_eq!(metadata_names(&foreign), None);
    }
}
