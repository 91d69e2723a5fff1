//! What Slack sends besides Events API envelopes, on the same Request URL and signed the same
//! way: slash commands (a form) and interactivity (a form whose one field, `payload`, is JSON:
//! `block_actions`, `view_submission`, `view_closed`, `shortcut`, `message_action`,
//! `block_suggestion`). [`Incoming::parse`] tells them apart by content type and fields, after
//! the signature has verified the raw bytes.
//!
//! Each kind has an identity, the ledger key a repeat of it shares (see [`Interaction::key`]):
//! Slack does not redeliver these requests, but people double-click, a queue redelivers, and a
//! handler can crash after acknowledging.
#![warn(missing_docs)]

use std::fmt;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::slack::envelope::{Envelope, EventId};

/// A verified request, parsed.
#[derive(Debug)]
pub enum Incoming {
    /// An Events API envelope (JSON).
    Envelope(Envelope),
    /// A slash command or an interaction (a form).
    Interaction(Box<Interaction>),
    /// An interaction of a type this version does not know (`interactive_message`,
    /// `dialog_submission`…): acknowledged, ignored, as an unknown envelope type is.
    UnknownInteraction(String),
}

/// Why a verified body is not a request of Slack's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Malformed {}

impl Incoming {
    /// Parses a verified body: JSON (`application/json`, or a body that opens with `{`) is an
    /// Events API envelope; a form (`application/x-www-form-urlencoded`) with a `payload` field
    /// is an interaction, one with a `command` field a slash command.
    pub fn parse(content_type: Option<&str>, body: &[u8]) -> Result<Self, serde_json::Error> {
        let json = content_type
            .and_then(|c| c.split(';').next())
            .is_some_and(|c| c.trim().eq_ignore_ascii_case("application/json"));
        // A JSON object is an envelope whatever the content type says (curl -d, some proxies
        // send JSON as a form); a form never opens with `{`.
        let opens_json = body
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'{');
        if json || opens_json {
            let text = std::str::from_utf8(body).map_err(|_| custom("the body is not UTF-8"))?;
            return Envelope::from_delivered(text).map(Incoming::Envelope);
        }
        match Interaction::from_form(body) {
            Ok(interaction) => Ok(Incoming::Interaction(Box::new(interaction))),
            Err(Malformed(why)) if why.starts_with(UNKNOWN_TYPE) => {
                Ok(Incoming::UnknownInteraction(why))
            }
            Err(e) => Err(custom(&e.0)),
        }
    }
}

/// How [`Interaction::from_payload`] says a payload's type is not one it knows.
const UNKNOWN_TYPE: &str = "an interaction of type";

fn custom(message: &str) -> serde_json::Error {
    <serde_json::Error as serde::de::Error>::custom(message)
}

/// The kinds of request this module knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// A slash command (a form with a `command` field).
    Command,
    /// An action in a block (`block_actions`): a button clicked, an option selected…
    BlockActions,
    /// A modal submitted (`view_submission`).
    ViewSubmission,
    /// A modal closed by the user (`view_closed`, when its view sets `notify_on_close`).
    ViewClosed,
    /// A global shortcut (`shortcut`).
    Shortcut,
    /// A message shortcut (`message_action`).
    MessageShortcut,
    /// The options of an external select (`block_suggestion`).
    BlockSuggestion,
}

impl Kind {
    /// The kind as Slack names it in the payload's `type` (`command` for a slash command).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Command => "command",
            Kind::BlockActions => "block_actions",
            Kind::ViewSubmission => "view_submission",
            Kind::ViewClosed => "view_closed",
            Kind::Shortcut => "shortcut",
            Kind::MessageShortcut => "message_action",
            Kind::BlockSuggestion => "block_suggestion",
        }
    }
}

/// A slash command or an interaction: what every kind has (its team, user, conversation,
/// `trigger_id`, `response_url`) and the payload as Slack sent it (`raw`: the command's form
/// as a JSON object of strings, or the interaction's `payload`).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Interaction {
    /// What the request is: a slash command, or which interaction.
    pub kind: Kind,
    /// The workspace: a command's `team_id`, or a payload's `team.id`, `user.team_id` or
    /// `view.team_id`.
    pub team_id: Option<String>,
    /// The Enterprise Grid organisation, when there is one (`enterprise_id`, or `enterprise.id`).
    pub enterprise_id: Option<String>,
    /// The app the request is for (`api_app_id`, or `view.app_id`).
    pub api_app_id: Option<String>,
    /// The user who acted: a command's `user_id`, or a payload's `user.id`.
    pub user_id: Option<String>,
    /// The conversation it happened in, when there is one (`channel_id`, `channel.id` or
    /// `container.channel_id`).
    pub channel_id: Option<String>,
    /// The `trigger_id`, to open a view (valid 3 s, and once).
    pub trigger_id: Option<String>,
    /// Where to post responses: `response_url`, or a view submission's first of `response_urls`.
    pub response_url: Option<String>,
    /// The payload as Slack sent it (a command's form as a JSON object of strings), but for a
    /// Workflow Builder step's token (`bot_access_token`, shown `[redacted]`).
    pub raw: Value,
    /// A step execution's token (an interaction in a step: its `bot_access_token`).
    pub(crate) execution_token: Option<crate::config::Secret>,
    /// The form as Slack sent it, byte for byte (what the gateway forwards to a bot), when
    /// the interaction was read from one.
    pub(crate) delivered: Option<std::sync::Arc<str>>,
}

/// A form's fields, each at most once (a field given twice is not Slack's).
fn form_fields(body: &[u8]) -> Result<Map<String, Value>, Malformed> {
    let mut fields = Map::new();
    for (k, v) in form_urlencoded::parse(body) {
        if fields
            .insert(k.clone().into_owned(), Value::String(v.into_owned()))
            .is_some()
        {
            return Err(Malformed(format!("the form field {k:?} is given twice")));
        }
    }
    Ok(fields)
}

fn text(v: &Value, path: &[&str]) -> Option<String> {
    let mut v = v;
    for key in path {
        v = v.get(key)?;
    }
    v.as_str().filter(|s| !s.is_empty()).map(str::to_string)
}

impl Interaction {
    /// A slash command's form, or an interaction's (`payload=<JSON>`).
    pub fn from_form(body: &[u8]) -> Result<Self, Malformed> {
        let delivered = std::str::from_utf8(body).ok().map(std::sync::Arc::from);
        let fields = form_fields(body)?;
        if let Some(payload) = fields.get("payload") {
            let payload = payload.as_str().unwrap_or_default();
            let raw: Value = serde_json::from_str(payload)
                .map_err(|e| Malformed(format!("the payload is not JSON: {e}")))?;
            return Self::from_payload(raw).map(|i| Self { delivered, ..i });
        }
        let raw = Value::Object(fields);
        let Some(command) = text(&raw, &["command"]) else {
            return Err(Malformed(
                "a form without `payload` or `command` is neither an interaction nor a slash command"
                    .into(),
            ));
        };
        if !command.starts_with('/') || command.len() > 64 {
            return Err(Malformed(
                "a command's name starts with / and is short".into(),
            ));
        }
        Ok(Self {
            kind: Kind::Command,
            team_id: text(&raw, &["team_id"]),
            enterprise_id: text(&raw, &["enterprise_id"]),
            api_app_id: text(&raw, &["api_app_id"]),
            user_id: text(&raw, &["user_id"]),
            channel_id: text(&raw, &["channel_id"]),
            trigger_id: text(&raw, &["trigger_id"]),
            response_url: text(&raw, &["response_url"]),
            raw,
            execution_token: None,
            delivered,
        })
    }

    /// An interaction's `payload`.
    pub fn from_payload(mut raw: Value) -> Result<Self, Malformed> {
        // A step's token: the context's calls use it; listeners never see it.
        let execution_token = match raw.get("function_data").is_some_and(Value::is_object) {
            true => crate::slack::envelope::redact_execution_token(&mut raw),
            false => None,
        };
        if !raw.is_object() {
            return Err(Malformed("the payload is not a JSON object".into()));
        }
        let kind = match raw.get("type").and_then(Value::as_str) {
            Some("block_actions") => Kind::BlockActions,
            Some("view_submission") => Kind::ViewSubmission,
            Some("view_closed") => Kind::ViewClosed,
            Some("shortcut") => Kind::Shortcut,
            Some("message_action") => Kind::MessageShortcut,
            Some("block_suggestion") => Kind::BlockSuggestion,
            Some(other) => {
                return Err(Malformed(format!(
                    "{UNKNOWN_TYPE} {:?} is not one this version knows",
                    other.chars().take(40).collect::<String>()
                )));
            }
            None => return Err(Malformed("the payload has no string `type`".into())),
        };
        let needs = |path: &[&str]| {
            text(&raw, path)
                .map(|_| ())
                .ok_or_else(|| Malformed(format!("a {} has no {}", kind.as_str(), path.join("."))))
        };
        match kind {
            Kind::BlockActions => {
                let first = raw.get("actions").and_then(|a| a.get(0));
                if first
                    .and_then(|a| a.get("action_id"))
                    .and_then(Value::as_str)
                    .is_none()
                {
                    return Err(Malformed(
                        "a block_actions has no actions[0].action_id".into(),
                    ));
                }
            }
            Kind::ViewSubmission | Kind::ViewClosed => {
                needs(&["view", "id"])?;
            }
            Kind::Shortcut | Kind::MessageShortcut => needs(&["callback_id"])?,
            Kind::BlockSuggestion => needs(&["action_id"])?,
            Kind::Command => {}
        }
        // The conversation: a block action's container or channel, a shortcut's channel.
        let channel_id = text(&raw, &["channel", "id"])
            .or_else(|| text(&raw, &["container", "channel_id"]))
            .or_else(|| text(&raw, &["channel_id"]));
        // A view submission's, when its modal has a conversation select for it.
        let response_url = text(&raw, &["response_url"]).or_else(|| {
            raw.get("response_urls")
                .and_then(|u| u.get(0))
                .and_then(|u| u.get("response_url"))
                .and_then(Value::as_str)
                .map(str::to_string)
        });
        Ok(Self {
            kind,
            team_id: text(&raw, &["team", "id"])
                .or_else(|| text(&raw, &["user", "team_id"]))
                .or_else(|| text(&raw, &["view", "team_id"])),
            enterprise_id: text(&raw, &["enterprise", "id"]),
            api_app_id: text(&raw, &["api_app_id"]).or_else(|| text(&raw, &["view", "app_id"])),
            user_id: text(&raw, &["user", "id"]),
            channel_id,
            // A click in a Workflow Builder step may carry its trigger only as the
            // interactivity pointer (Slack's SDKs open views with it as the trigger_id).
            trigger_id: text(&raw, &["trigger_id"])
                .or_else(|| text(&raw, &["interactivity", "interactivity_pointer"])),
            response_url,
            raw,
            execution_token,
            delivered: None,
        })
    }

    /// What picks the installation this request is for: its team, its enterprise, and
    /// whether the app is installed org-wide (`is_enterprise_install`: a boolean in an
    /// interaction's payload, `"true"` in a command's form).
    pub fn installation(&self) -> (Option<&str>, Option<&str>, bool) {
        let org_wide = match &self.raw["is_enterprise_install"] {
            Value::Bool(b) => *b,
            Value::String(s) => s == "true",
            _ => false,
        };
        // A view opened in a channel shared with another organisation names the team the app
        // is installed in (the person's `team` may be the other one).
        let installed_team = self.raw["view"]["app_installed_team_id"]
            .as_str()
            .filter(|t| !t.is_empty());
        (
            installed_team.or(self.team_id.as_deref()),
            self.enterprise_id.as_deref(),
            org_wide,
        )
    }

    /// The team the request is for (its enterprise on an org-wide install without one).
    pub fn team(&self) -> Option<&str> {
        self.team_id.as_deref().or(self.enterprise_id.as_deref())
    }

    /// The message the request is about: a block action's message, a message shortcut's.
    pub fn message(&self) -> Option<&Value> {
        self.raw.get("message").filter(|m| m.is_object())
    }

    /// That message's `ts` (`container.message_ts`, or the message's own).
    pub fn message_ts(&self) -> Option<String> {
        text(&self.raw, &["container", "message_ts"])
            .or_else(|| text(&self.raw, &["message_ts"]))
            .or_else(|| text(&self.raw, &["message", "ts"]))
    }

    /// The thread the request's message is in, if any.
    pub fn thread_ts(&self) -> Option<String> {
        text(&self.raw, &["container", "thread_ts"])
            .or_else(|| text(&self.raw, &["message", "thread_ts"]))
    }

    /// The view the request is about (a view's submission or closing; an action in a modal).
    pub fn view(&self) -> Option<&Value> {
        self.raw.get("view").filter(|v| v.is_object())
    }

    /// The first action of a `block_actions` (Slack sends one per interaction).
    pub fn action(&self) -> Option<&Value> {
        self.raw.get("actions").and_then(|a| a.get(0))
    }

    /// What the listeners are chosen by: a command's name, an action's or a suggestion's
    /// `action_id`, a view's or a shortcut's `callback_id`.
    pub fn selector(&self) -> Option<String> {
        match self.kind {
            Kind::Command => text(&self.raw, &["command"]),
            Kind::BlockActions => self.action().and_then(|a| text(a, &["action_id"])),
            Kind::BlockSuggestion => text(&self.raw, &["action_id"]),
            Kind::ViewSubmission | Kind::ViewClosed => text(&self.raw, &["view", "callback_id"]),
            Kind::Shortcut | Kind::MessageShortcut => text(&self.raw, &["callback_id"]),
        }
    }

    /// The `block_id` of an action or a suggestion.
    pub fn block_id(&self) -> Option<String> {
        match self.kind {
            Kind::BlockActions => self.action().and_then(|a| text(a, &["block_id"])),
            Kind::BlockSuggestion => text(&self.raw, &["block_id"]),
            _ => None,
        }
    }

    /// The ledger key every repeat of this request shares; `None` for a `block_suggestion`,
    /// which writes nothing and is never claimed. What counts as the same:
    /// - a command, a global or a message shortcut: its `trigger_id` (Slack mints one per
    ///   invocation; the same command typed again is a new one);
    /// - a block action: its `action_ts`, `action_id` and user (a second click is a second
    ///   action for Slack, with an `action_ts` of its own);
    /// - a view submission: the view's id and `hash` and the values submitted (the same form
    ///   sent twice; after validation errors, corrected values are a new submission);
    /// - a view closed: the view's id and `hash`.
    ///
    /// The key is a digest of these (and the team), so its size and alphabet are bounded
    /// whatever the fields hold. A request without them is keyed by a digest of the whole
    /// payload (a copy of it is the same).
    pub fn key(&self) -> Option<EventId> {
        let team = self.team().unwrap_or("-");
        let whole = || self.raw.to_string();
        let (prefix, parts): (&str, Vec<String>) = match self.kind {
            Kind::BlockSuggestion => return None,
            Kind::Command | Kind::Shortcut | Kind::MessageShortcut => (
                match self.kind {
                    Kind::Command => "cmd",
                    _ => "sc",
                },
                vec![self.trigger_id.clone().unwrap_or_else(whole)],
            ),
            Kind::BlockActions => {
                let action = self.action().cloned().unwrap_or_default();
                match text(&action, &["action_ts"]) {
                    Some(ts) => (
                        "act",
                        vec![
                            ts,
                            text(&action, &["action_id"]).unwrap_or_default(),
                            self.user_id.clone().unwrap_or_default(),
                        ],
                    ),
                    None => ("act", vec![whole()]),
                }
            }
            Kind::ViewSubmission | Kind::ViewClosed => {
                let view = self.view().cloned().unwrap_or_default();
                let mut parts = vec![
                    text(&view, &["id"]).unwrap_or_default(),
                    text(&view, &["hash"]).unwrap_or_default(),
                ];
                let prefix = if self.kind == Kind::ViewSubmission {
                    parts.push(canonical(view.get("state").and_then(|s| s.get("values"))));
                    "view"
                } else {
                    "viewclosed"
                };
                (prefix, parts)
            }
        };
        let mut hasher = Sha256::new();
        for part in &parts {
            hasher.update(part.len().to_le_bytes());
            hasher.update(part.as_bytes());
        }
        let digest = hex::encode(&hasher.finalize()[..12]);
        let team: String = team
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(32)
            .collect();
        EventId::try_from(format!("{prefix}-{team}-{digest}")).ok()
    }
}

/// JSON with every object's keys sorted, so that the same values digest the same whichever
/// order Slack sent them in (and whatever map serde_json is built with).
fn canonical(value: Option<&Value>) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push(':');
                    write(&map[key], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    if let Some(value) = value {
        write(value, &mut out);
    }
    out
}

// ---------------------------------------------------------------- typed payloads

fn options_values(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|o| o.get("value").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// A slash command: `/once some text`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Command {
    /// The command's name, with its slash.
    pub command: String,
    /// What follows the command's name, as typed (empty when nothing does).
    pub text: String,
    /// The user who ran the command.
    pub user_id: String,
    /// The conversation the command was run in (`C…`, `D…` for a DM, `G…`).
    pub channel_id: String,
    /// The workspace the command was run in (`T…`).
    pub team_id: Option<String>,
    /// The `trigger_id`, to open a modal (valid 3 s, and once).
    pub trigger_id: Option<String>,
    /// The command's `response_url`: up to 5 posts within 30 minutes.
    pub response_url: Option<String>,
    /// The form as Slack sent it, as a JSON object of strings.
    pub raw: Value,
}

impl Command {
    pub(crate) fn of(i: &Interaction) -> Self {
        Self {
            command: text(&i.raw, &["command"]).unwrap_or_default(),
            text: i.raw["text"].as_str().unwrap_or_default().to_string(),
            user_id: i.user_id.clone().unwrap_or_default(),
            channel_id: i.channel_id.clone().unwrap_or_default(),
            team_id: i.team_id.clone(),
            trigger_id: i.trigger_id.clone(),
            response_url: i.response_url.clone(),
            raw: i.raw.clone(),
        }
    }
}

/// A click, a selection, a date picked…: one `block_actions`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct BlockAction {
    /// The action's `action_id`, as the app set it on the element.
    pub action_id: String,
    /// The `block_id` of the block the element is in.
    pub block_id: Option<String>,
    /// A button's `value`, or an input's typed value.
    pub value: Option<String>,
    /// The values of the options selected (a select's, a checkbox group's).
    pub selected: Vec<String>,
    /// The action's `action_ts`, which tells one click from the next.
    pub action_ts: Option<String>,
    /// The user who acted.
    pub user_id: String,
    /// The conversation the action happened in (`channel.id` or `container.channel_id`); absent in
    /// a modal or on the Home tab.
    pub channel_id: Option<String>,
    /// The message the action's block sits in (absent in a modal or on the Home tab).
    pub message: Option<Value>,
    /// The `ts` of the message the action's block is in, when it is in one (`container.message_ts`,
    /// or the message's own).
    pub message_ts: Option<String>,
    /// The view the action's block sits in, if it is in one.
    pub view_id: Option<String>,
    /// The `trigger_id`, to open a modal (valid 3 s, and once).
    pub trigger_id: Option<String>,
    /// The action's `response_url`, when it is on a message.
    pub response_url: Option<String>,
    /// The whole payload.
    pub raw: Value,
}

impl BlockAction {
    pub(crate) fn of(i: &Interaction) -> Self {
        let action = i.action().cloned().unwrap_or_default();
        let mut selected = options_values(action.get("selected_options"));
        if let Some(one) = action
            .get("selected_option")
            .and_then(|o| o.get("value"))
            .and_then(Value::as_str)
        {
            selected.push(one.to_string());
        }
        for key in [
            "selected_user",
            "selected_channel",
            "selected_conversation",
            "selected_date",
        ] {
            if let Some(v) = text(&action, &[key]) {
                selected.push(v);
            }
        }
        Self {
            action_id: text(&action, &["action_id"]).unwrap_or_default(),
            block_id: text(&action, &["block_id"]),
            value: text(&action, &["value"]),
            selected,
            action_ts: text(&action, &["action_ts"]),
            user_id: i.user_id.clone().unwrap_or_default(),
            channel_id: i.channel_id.clone(),
            message: i.message().cloned(),
            message_ts: i.message_ts(),
            view_id: i.view().and_then(|v| text(v, &["id"])),
            trigger_id: i.trigger_id.clone(),
            response_url: i.response_url.clone(),
            raw: i.raw.clone(),
        }
    }
}

/// A modal's values at submission: by block and action.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ViewValues(pub Value);

impl ViewValues {
    /// The value of the input `action_id` in block `block_id`: typed text, or the selected
    /// option's value, user, channel or date. `None` when empty.
    pub fn get(&self, block_id: &str, action_id: &str) -> Option<String> {
        let input = self.0.get(block_id)?.get(action_id)?;
        for key in [
            "value",
            "selected_date",
            "selected_time",
            "selected_user",
            "selected_channel",
            "selected_conversation",
        ] {
            if let Some(v) = input.get(key).and_then(Value::as_str) {
                return Some(v.to_string()).filter(|v| !v.is_empty());
            }
        }
        input
            .get("selected_option")
            .and_then(|o| o.get("value"))
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    /// Every selected value of a multi-select or checkbox input.
    pub fn all(&self, block_id: &str, action_id: &str) -> Vec<String> {
        let input = self.0.get(block_id).and_then(|b| b.get(action_id));
        options_values(input.and_then(|i| i.get("selected_options")))
    }
}

/// A modal submitted (`view_submission`) or closed (`view_closed`).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ViewSubmission {
    /// The view's `callback_id`, as the app set it when opening the modal.
    pub callback_id: String,
    /// The view's id (`V…`).
    pub view_id: String,
    /// The view's `hash`, which changes with each update of the view.
    pub hash: Option<String>,
    /// The view's `private_metadata`, as the app set it (`None` when empty).
    pub private_metadata: Option<String>,
    /// The values of the view's inputs (`view.state.values`), by block and action.
    pub values: ViewValues,
    /// The user who submitted or closed the modal.
    pub user_id: String,
    /// The `trigger_id` of a submission, to open another view (valid 3 s, and once).
    pub trigger_id: Option<String>,
    /// `view_closed` only: the whole stack of views was closed.
    pub is_cleared: bool,
    /// The whole payload.
    pub raw: Value,
}

impl ViewSubmission {
    pub(crate) fn of(i: &Interaction) -> Self {
        let view = i.view().cloned().unwrap_or_default();
        Self {
            callback_id: text(&view, &["callback_id"]).unwrap_or_default(),
            view_id: text(&view, &["id"]).unwrap_or_default(),
            hash: text(&view, &["hash"]),
            private_metadata: text(&view, &["private_metadata"]),
            values: ViewValues(view["state"]["values"].clone()),
            user_id: i.user_id.clone().unwrap_or_default(),
            trigger_id: i.trigger_id.clone(),
            is_cleared: i.raw["is_cleared"].as_bool().unwrap_or(false),
            raw: i.raw.clone(),
        }
    }
}

/// A global shortcut (`shortcut`) or a message shortcut (`message_action`).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Shortcut {
    /// The shortcut's `callback_id`, as set in the app's settings.
    pub callback_id: String,
    /// The user who used the shortcut.
    pub user_id: String,
    /// The `trigger_id`, to open a modal (valid 3 s, and once).
    pub trigger_id: Option<String>,
    /// A message shortcut's conversation and message.
    pub channel_id: Option<String>,
    /// The message the shortcut was used on, as Slack sent it (a message shortcut's).
    pub message: Option<Value>,
    /// The `ts` of that message (a message shortcut's).
    pub message_ts: Option<String>,
    /// The `response_url`, to post in the conversation (a message shortcut's).
    pub response_url: Option<String>,
    /// The whole payload.
    pub raw: Value,
}

impl Shortcut {
    pub(crate) fn of(i: &Interaction) -> Self {
        Self {
            callback_id: text(&i.raw, &["callback_id"]).unwrap_or_default(),
            user_id: i.user_id.clone().unwrap_or_default(),
            trigger_id: i.trigger_id.clone(),
            channel_id: i.channel_id.clone(),
            message: i.message().cloned(),
            message_ts: i.message_ts(),
            response_url: i.response_url.clone(),
            raw: i.raw.clone(),
        }
    }
}

/// An external select asking for its options (`block_suggestion`): what the user typed.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct OptionsRequest {
    /// The `action_id` of the external select asking.
    pub action_id: String,
    /// The `block_id` of the block the select is in.
    pub block_id: Option<String>,
    /// What the user has typed so far.
    pub value: String,
    /// The user typing.
    pub user_id: String,
    /// The whole payload.
    pub raw: Value,
}

impl OptionsRequest {
    pub(crate) fn of(i: &Interaction) -> Self {
        Self {
            action_id: text(&i.raw, &["action_id"]).unwrap_or_default(),
            block_id: text(&i.raw, &["block_id"]),
            value: i.raw["value"].as_str().unwrap_or_default().to_string(),
            user_id: i.user_id.clone().unwrap_or_default(),
            raw: i.raw.clone(),
        }
    }
}

// ---------------------------------------------------------------- response_url

/// Slack's host for `response_url`s.
pub const HOOKS_HOST: &str = "hooks.slack.com";

/// Whether `url` may be followed: an `https` URL on [`HOOKS_HOST`] (port 443), or, when the
/// Web API base `api_base` is a local stand-in (http on the loopback), a URL on the same
/// scheme, host and port. Anything else is refused before any connection is made: a
/// `response_url` comes from a payload, and only Slack's own may receive what the bot writes.
pub fn allowed_response_url(url: &str, api_base: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|_| "the response_url is not a URL".to_string())?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err("the response_url is not an absolute URL".into());
    };
    if authority.as_str().contains('@') {
        return Err("the response_url carries credentials".into());
    }
    let port =
        |scheme: &str, port: Option<u16>| port.unwrap_or(if scheme == "https" { 443 } else { 80 });
    if scheme == "https"
        && authority.host().eq_ignore_ascii_case(HOOKS_HOST)
        && port(scheme, authority.port_u16()) == 443
    {
        return Ok(uri);
    }
    if let Ok(base) = api_base.parse::<http::Uri>()
        && let (Some(base_scheme), Some(base_authority)) = (base.scheme_str(), base.authority())
    {
        let local = base_scheme == "http" && crate::config::is_loopback(base_authority.host());
        if local
            && scheme == base_scheme
            && authority.host().eq_ignore_ascii_case(base_authority.host())
            && port(scheme, authority.port_u16()) == port(base_scheme, base_authority.port_u16())
        {
            return Ok(uri);
        }
    }
    Err(format!(
        "the response_url is not on {HOOKS_HOST} (https) nor on the local Slack stand-in"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> Vec<u8> {
        form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish()
            .into_bytes()
    }

    const FORM: Option<&str> = Some("application/x-www-form-urlencoded");

    #[test]
    fn a_slash_command_parses_from_its_form() {
        let body = form(&[
            ("command", "/once"),
            ("text", "hello world"),
            ("team_id", "T1"),
            ("user_id", "U1"),
            ("channel_id", "C1"),
            ("api_app_id", "A1"),
            ("trigger_id", "123.456.abc"),
            ("response_url", "https://hooks.slack.com/commands/T1/1/x"),
        ]);
        let Incoming::Interaction(i) = Incoming::parse(FORM, &body).unwrap() else {
            panic!("not an interaction")
        };
        assert_eq!(i.kind, Kind::Command);
        assert_eq!(i.selector().as_deref(), Some("/once"));
        let c = Command::of(&i);
        assert_eq!((c.text.as_str(), c.user_id.as_str()), ("hello world", "U1"));
        assert_eq!(i.channel_id.as_deref(), Some("C1"));
        let key = i.key().unwrap();
        assert!(key.as_str().starts_with("cmd-T1-"), "{key}");
        let mut again = (*i).clone();
        assert_eq!(again.key(), i.key(), "the same trigger_id, the same key");
        again.trigger_id = Some("other".into());
        assert_ne!(again.key(), i.key());
    }

    #[test]
    fn interactions_parse_from_their_payload() {
        let payload = serde_json::json!({
            "type": "block_actions", "team": {"id": "T1"}, "user": {"id": "U1"},
            "api_app_id": "A1", "trigger_id": "1.2.3",
            "container": {"type": "message", "message_ts": "1.000100", "channel_id": "C1"},
            "channel": {"id": "C1"}, "message": {"ts": "1.000100", "text": "hi"},
            "response_url": "https://hooks.slack.com/actions/T1/1/x",
            "actions": [{"action_id": "thanks", "block_id": "b1", "value": "v", "action_ts": "2.000"}]
        });
        let body = form(&[("payload", &payload.to_string())]);
        let Incoming::Interaction(i) = Incoming::parse(FORM, &body).unwrap() else {
            panic!()
        };
        assert_eq!(i.kind, Kind::BlockActions);
        let a = BlockAction::of(&i);
        assert_eq!(a.action_id, "thanks");
        assert_eq!(a.value.as_deref(), Some("v"));
        assert_eq!(a.message_ts.as_deref(), Some("1.000100"));
        assert!(i.key().unwrap().as_str().starts_with("act-T1-"));
    }

    #[test]
    fn a_view_submission_is_the_same_only_with_the_same_values() {
        let view = |value: &str| {
            Interaction::from_payload(serde_json::json!({
                "type": "view_submission", "team": {"id": "T1"}, "user": {"id": "U1"},
                "view": {"id": "V1", "hash": "h1", "callback_id": "ask",
                         "state": {"values": {"b": {"a": {"type": "plain_text_input", "value": value}}}}}
            }))
            .unwrap()
        };
        assert_eq!(view("x").key(), view("x").key());
        assert_ne!(view("x").key(), view("y").key());
        assert_eq!(
            ViewSubmission::of(&view("x"))
                .values
                .get("b", "a")
                .as_deref(),
            Some("x")
        );
        assert_eq!(ViewSubmission::of(&view("")).values.get("b", "a"), None);
    }

    #[test]
    fn bad_forms_and_payloads_are_malformed() {
        assert!(matches!(
            Incoming::parse(
                FORM,
                &form(&[("payload", r#"{"type":"dialog_submission"}"#)])
            ),
            Ok(Incoming::UnknownInteraction(_))
        ));
        for body in [
            form(&[("payload", "not json")]),
            form(&[("payload", "[1]")]),
            form(&[("payload", r#"{"type":"block_actions","actions":[]}"#)]),
            form(&[("text", "no command")]),
            form(&[("command", "/a"), ("command", "/b")]),
            form(&[("command", "no-slash")]),
        ] {
            assert!(
                Incoming::parse(FORM, &body).is_err(),
                "{}",
                String::from_utf8_lossy(&body)
            );
        }
        assert!(Incoming::parse(Some("application/json"), b"command=/once").is_err());
    }

    #[test]
    fn a_json_envelope_is_an_envelope_whatever_its_content_type_says() {
        let body = br#"{"type":"url_verification","challenge":"c"}"#;
        for content_type in [FORM, None, Some("text/plain")] {
            assert!(matches!(
                Incoming::parse(content_type, body),
                Ok(Incoming::Envelope(_))
            ));
        }
    }

    #[test]
    fn a_suggestion_is_never_claimed() {
        let i = Interaction::from_payload(serde_json::json!({
            "type": "block_suggestion", "action_id": "pick", "value": "ab", "team": {"id": "T1"}
        }))
        .unwrap();
        assert_eq!(i.key(), None);
    }

    #[test]
    fn only_slacks_hooks_host_or_the_local_stand_in_take_a_response_url() {
        let api = "https://slack.com/api";
        assert!(allowed_response_url("https://hooks.slack.com/commands/T1/1/x", api).is_ok());
        for bad in [
            "http://hooks.slack.com/commands/T1/1/x",
            "https://hooks.slack.com:8443/x",
            "https://hooks.slack.com.evil.example/x",
            "https://evil.example/hooks.slack.com",
            "https://user@hooks.slack.com/x",
            "https://slack.com/api/chat.postMessage",
            "/relative",
            "not a url",
            "http://127.0.0.1:9/x",
        ] {
            assert!(allowed_response_url(bad, api).is_err(), "{bad}");
        }
        let local = "http://127.0.0.1:4000/api";
        assert!(allowed_response_url("http://127.0.0.1:4000/commands/T1/1/x", local).is_ok());
        assert!(allowed_response_url("http://127.0.0.1:4001/commands/x", local).is_err());
        assert!(allowed_response_url("http://localhost:4000/commands/x", local).is_err());
        assert!(allowed_response_url("https://hooks.slack.com/commands/x", local).is_ok());
    }
}
