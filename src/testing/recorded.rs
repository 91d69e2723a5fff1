//! What a stand-in keeps between calls: its workspaces, its grants, every call as it came and
//! as it is printed, and the failures scripted for the next calls. [`super::slack`] serves Slack's
//! methods from it and [`super::scripts`] the endpoints a script or a person drives it with; both
//! import it, and it imports neither.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde_json::Value;

use super::oauth::{OAuthGrants, bot_id_for, bot_user_for};
use super::workspace::{Identity, Workspace};

pub(crate) struct Recorded {
    pub(crate) calls: Vec<(String, Value)>,
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
}

/// How Slack fails a call it did not make: what [`FakeSlack::fail_next`](super::FakeSlack::fail_next) scripts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlackFailure {
    /// HTTP 200 with `{"ok": false, "error": code}` (`internal_error`, `fatal_error`,
    /// `ratelimited`, `request_timeout`, or a token's refusal: `invalid_auth`…).
    Code(&'static str),
    /// That HTTP status (a 5xx), with Slack's `internal_error` in the body.
    Status(u16),
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

impl Recorded {
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
    let n = s.log.len() + 1;
    let error = match answer["ok"] {
        Value::Bool(false) => answer["error"].clone(),
        _ => Value::Null,
    };
    s.log.push(serde_json::json!({
        "n": n, "method": method, "bearer": bearer, "args": shown, "error": error,
    }));
}
