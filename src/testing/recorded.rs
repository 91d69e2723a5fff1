//! What a stand-in keeps between calls: its workspaces, its grants, every call as it came and
//! as it is printed, and the failures scripted for the next calls. [`super::slack`] serves Slack's
//! methods from it and [`super::scripts`] the endpoints a script or a person drives it with; both
//! import it, and it imports neither.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::oauth::{OAuthGrants, bot_id_for, bot_user_for};
use super::socket_mode::links::Links;
use super::workspace::{Identity, Workspace};

pub(crate) struct Recorded {
    pub(crate) calls: Vec<(String, Value)>,
    /// Socket Mode: the app's connections, the envelopes sent them and their acknowledgements.
    pub(crate) socket: Links,
    pub(crate) workspace: Workspace,
    /// Multi-workspace mode ([`FakeSlack::with_oauth`](super::FakeSlack::with_oauth)): the app's grants and tokens.
    pub(crate) grants: Option<OAuthGrants>,
    /// The other workspaces the app is installed in, by team (or enterprise).
    pub(crate) others: HashMap<String, Workspace>,
    /// Each call's installation, by the token it came with: (method, team), in order.
    pub(crate) callers: Vec<(String, String)>,
    /// The stand-ins of other apps on the same Slack ([`FakeSlack::same_slack_as`](super::FakeSlack::same_slack_as)): a token
    /// one of them issued is served there, as that app, wherever it is presented.
    pub(crate) peers: Vec<std::sync::Weak<Mutex<Recorded>>>,
    /// `auth.test` answers without `app_id` (Slack's documented example names none).
    pub(crate) auth_test_without_app: bool,
    /// Each call's method and the token it came with, in order (kept in the test's memory,
    /// never printed).
    pub(crate) bearers: Vec<(String, String)>,
    /// What the next calls of a method meet, by method ([`FakeSlack::fail_next`](super::FakeSlack::fail_next),
    /// `/_standin/script`): a failure, or `None` (answered as ever).
    pub(crate) failures: HashMap<String, VecDeque<Option<SlackFailure>>>,
    /// Every call as `slack-once standin` prints it and `/_standin/state` lists it: `n`,
    /// `method`, `bearer` (whether a token came), `args` (tokens and secrets as `***`),
    /// `error` (the refusal's code, or null).
    pub(crate) log: Vec<Value>,
    /// The tokens a call needs when no OAuth is set up ([`FakeSlack::require_bot_token`](super::FakeSlack::require_bot_token)).
    pub(crate) token_rule: Option<TokenRule>,
    /// The calls of `conversations.history`, and separately of `.replies`, allowed in a
    /// rolling minute ([`FakeSlack::limit_reads_per_minute`](super::FakeSlack::limit_reads_per_minute)), and when the last were made.
    pub(crate) reads_per_minute: Option<(usize, HashMap<String, VecDeque<std::time::Instant>>)>,
    /// The calls made around slack-once's client (under [`FakeSlack::around_base`](super::FakeSlack::around_base)), in order.
    pub(crate) around: Vec<(String, Value)>,
    /// Every request to a Web API method or a response URL, as it came, before any script
    /// or refusal decided its fate ([`FakeSlack::requests`](super::FakeSlack::requests)).
    pub(crate) requests: Vec<SlackRequest>,
    /// Whether requests and calls are kept (`requests`, `calls`, `log`, `bearers`, `callers`,
    /// the tokens of messages); off, only `counts` are ([`FakeSlack::keep_counts_only`](super::FakeSlack::keep_counts_only)).
    pub(crate) keep_requests: bool,
    /// Requests per method (`response_url` for posts to a response URL), kept always.
    pub(crate) counts: HashMap<String, usize>,
    /// Until when a method answers HTTP 500 and makes nothing, by method ([`FakeSlack::outage`](super::FakeSlack::outage)).
    pub(crate) outages: HashMap<String, tokio::time::Instant>,
    /// What the next reads (`conversations.history` or `.replies`, whichever comes) meet, after
    /// each method's own queue ([`FakeSlack::fail_next_reads`](super::FakeSlack::fail_next_reads)).
    pub(crate) read_failures: VecDeque<SlackFailure>,
    /// Every read answers `ok: false` with this code ([`FakeSlack::fail_reads`](super::FakeSlack::fail_reads)).
    pub(crate) reads_fail_with: Option<&'static str>,
    /// How many reads were answered (refused ones not counted).
    pub(crate) reads_answered: usize,
    /// Faults drawn at random for the calls no script decides ([`FakeSlack::random_faults`](super::FakeSlack::random_faults)).
    pub(crate) random: Option<RandomFaults>,
    /// The random faults drawn so far: (method, failure) → count.
    pub(crate) drawn: HashMap<(String, String), u64>,
    /// `HEAD` requests: connections a client opened ahead of a first call.
    pub(crate) warm_ups: usize,
    /// The token each of the app's messages was posted with, by `ts`.
    pub(crate) posted_with: HashMap<String, Option<String>>,
    /// Run on the workspace before each Web API call is answered, with its arguments
    /// ([`FakeSlack::before_each_call`](super::FakeSlack::before_each_call)).
    pub(crate) before_call: Option<BeforeCall>,
}

/// What [`FakeSlack::before_each_call`](super::FakeSlack::before_each_call) runs.
pub(crate) type BeforeCall = Arc<dyn Fn(&mut Workspace, &Value) + Send + Sync>;

/// One request as it reached the stand-in ([`FakeSlack::requests`](super::FakeSlack::requests)).
#[derive(Clone, Debug)]
pub struct SlackRequest {
    /// The Web API method, or `response_url` for a post to a response URL.
    pub method: String,
    /// The token it came with (the `Authorization: Bearer` header's, or a form's `token`).
    pub token: Option<String>,
    /// Its arguments: the JSON body, or the form and query as a JSON object of strings.
    pub args: Value,
}

/// How Slack fails (or delays) a call: what [`FakeSlack::fail_next`](super::FakeSlack::fail_next) scripts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlackFailure {
    /// HTTP 200 with `{"ok": false, "error": code}` (`internal_error`, `fatal_error`,
    /// `ratelimited`, `request_timeout`, or a token's refusal: `invalid_auth`…); nothing made.
    Code(&'static str),
    /// The call is made, and answered `{"ok": false, "error": code}`: Slack may post a
    /// message and still answer `internal_error`.
    MadeThenCode(&'static str),
    /// The call is made, and answered with that HTTP status (a 5xx from a load balancer in
    /// front of Slack after the write went through).
    MadeThenStatus(u16),
    /// That HTTP status (a 5xx), nothing made; a Web API method's body is Slack's
    /// `internal_error`, a response URL's is empty.
    Status(u16),
    /// HTTP 429 with `Retry-After` in seconds; nothing made.
    RateLimited(u64),
    /// Answered (and made) this long after it came; Slack finishes a call it accepted even
    /// when the caller has gone.
    Slow(Duration),
    /// No answer ever comes, and nothing is made (the connection stays open): a call lost
    /// on its way.
    Unanswered,
    /// The call is made, and its answer never comes: an answer lost on its way back.
    MadeUnanswered,
}

/// Which tokens a call needs without OAuth ([`FakeSlack::require_bot_token`](super::FakeSlack::require_bot_token)).
#[derive(Clone, Debug)]
pub(crate) struct TokenRule {
    /// The one bot token taken; `None`: any `xoxb-` token.
    pub(crate) only: Option<String>,
}

/// Slack's faults at random, each at its rate per 10,000 calls, drawn from a seed for every
/// call no script decides: on writes (every `chat.`, `reactions.`, `assistant.` and `views.`
/// method), on posts to response URLs (`hooks`), and on reads (`conversations.history`,
/// `.replies`).
#[derive(Clone, Debug)]
pub struct RandomFaults {
    /// (rate per 10,000, failure) for writes.
    pub writes: Vec<(u64, SlackFailure)>,
    /// (rate per 10,000, failure) for posts to response URLs.
    pub hooks: Vec<(u64, SlackFailure)>,
    /// (rate per 10,000, failure) for reads.
    pub reads: Vec<(u64, SlackFailure)>,
    /// The seed of the draws (not 0: xorshift stays at 0).
    pub seed: u64,
}

impl RandomFaults {
    /// The fault drawn for the next call of `method`, if any.
    pub(crate) fn draw(&mut self, method: &str) -> Option<SlackFailure> {
        // xorshift64*: one draw per call, whatever its method.
        self.seed ^= self.seed >> 12;
        self.seed ^= self.seed << 25;
        self.seed ^= self.seed >> 27;
        let roll = self.seed.wrapping_mul(0x2545_F491_4F6C_DD1D) % 10_000;
        let table = match method {
            "response_url" => &self.hooks,
            m if is_read(m) => &self.reads,
            m if is_write(m) => &self.writes,
            _ => return None,
        };
        let mut upto = 0;
        table.iter().find_map(|(rate, failure)| {
            upto += rate;
            (roll < upto).then(|| failure.clone())
        })
    }
}

/// Whether `method` writes to Slack (the random write faults apply to it).
fn is_write(method: &str) -> bool {
    ["chat.", "reactions.", "assistant.", "views."]
        .iter()
        .any(|p| method.starts_with(p))
}

/// Whether `method` reads a conversation.
pub(crate) fn is_read(method: &str) -> bool {
    matches!(method, "conversations.history" | "conversations.replies")
}

impl Recorded {
    /// The refusal of a call's token under [`FakeSlack::require_bot_token`](super::FakeSlack::require_bot_token), as Slack's: none is
    /// `not_authed`; one not a bot token (`xoxb-`), or not the one required, `invalid_auth`.
    pub(crate) fn token_rule_refusal(&self, token: Option<&str>) -> Option<&'static str> {
        let rule = self.token_rule.as_ref()?;
        match token {
            None => Some("not_authed"),
            Some(t) if !t.starts_with("xoxb-") => Some("invalid_auth"),
            Some(t) if rule.only.as_deref().is_some_and(|only| only != t) => Some("invalid_auth"),
            Some(_) => None,
        }
    }

    /// What the next call of `method` meets: an outage's 500; else its own script's next
    /// entry (`None` in a script: answered as ever); else, for a read, the reads' script;
    /// else a random fault; else, for a read, the failure every read meets.
    pub(crate) fn next_failure(&mut self, method: &str) -> Option<SlackFailure> {
        if self
            .outages
            .get(method)
            .is_some_and(|until| tokio::time::Instant::now() < *until)
        {
            return Some(SlackFailure::Status(500));
        }
        if let Some(scripted) = self.failures.get_mut(method).and_then(VecDeque::pop_front) {
            return scripted;
        }
        if is_read(method)
            && let Some(scripted) = self.read_failures.pop_front()
        {
            return Some(scripted);
        }
        if let Some(drawn) = self.random.as_mut().and_then(|r| r.draw(method)) {
            *self
                .drawn
                .entry((method.to_string(), format!("{drawn:?}")))
                .or_default() += 1;
            return Some(drawn);
        }
        match self.reads_fail_with {
            Some(code) if is_read(method) => Some(SlackFailure::Code(code)),
            _ => None,
        }
    }

    /// The workspace `owner`'s installation serves.
    pub(crate) fn workspace_of(&mut self, owner: &str) -> &mut Workspace {
        if owner == self.workspace.identity.team {
            return &mut self.workspace;
        }
        let app_id = self.workspace.identity.app_id.clone();
        let default = &self.workspace;
        self.others.entry(owner.to_string()).or_insert_with(|| {
            let mut other = Workspace::new(Identity {
                team: owner.to_string(),
                bot_id: bot_id_for(&app_id, owner),
                bot_user: bot_user_for(&app_id, owner),
                app_id,
            });
            other.take_settings_of(default);
            other
        })
    }
}

/// The arguments whose values are never shown: tokens, codes, secrets.
const SECRET_ARGUMENTS: [&str; 5] = [
    "client_secret",
    "code",
    "refresh_token",
    "token",
    "bot_access_token",
];

/// Keeps a call in the log `/_standin/state` lists and `slack-once standin` prints.
pub(crate) fn log_call(
    state: &Mutex<Recorded>,
    method: &str,
    bearer: bool,
    args: &Value,
    answer: &Value,
) {
    let mut shown = args.clone();
    if let Some(fields) = shown.as_object_mut() {
        for (k, v) in fields.iter_mut() {
            if SECRET_ARGUMENTS.contains(&k.as_str()) {
                *v = Value::String("***".into());
            }
        }
    }
    let mut s = state.lock().expect("lock");
    if !s.keep_requests {
        return;
    }
    let n = s.log.len() + 1;
    let error = match answer["ok"] {
        Value::Bool(false) => answer["error"].clone(),
        _ => Value::Null,
    };
    s.log.push(serde_json::json!({
        "n": n, "method": method, "bearer": bearer, "args": shown, "error": error,
    }));
}
