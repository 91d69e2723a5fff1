//! The Slack Events API envelope as typed serde values (docs.slack.dev, "Events API").
//!
//! Parsing is strict only where the protocol needs it (the envelope's `type`, a plain bounded
//! `event_id`, an inner `event` object with a `type`) and lenient everywhere else: Slack sends
//! `user` as a full object in `team_join` and `user_change`, `channel` as an object in
//! `channel_created`, `channel_rename` and `im_created`, and fields this version has never
//! heard of. The whole inner event is kept as raw JSON for bots.
#![warn(missing_docs)]

use std::fmt;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// Slack's `event_id`: globally unique across workspaces, the same on every retry of one event.
/// It is the ledger's key, so its size and alphabet are bounded here, before it reaches DynamoDB.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(try_from = "String")]
pub struct EventId(String);

/// Slack's ids are short (`Ev08ABCDEF12`); anything longer is not Slack's.
pub const MAX_EVENT_ID_LEN: usize = 128;

impl EventId {
    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for EventId {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        if value.is_empty() || value.len() > MAX_EVENT_ID_LEN {
            return Err(format!(
                "event_id must be 1 to {MAX_EVENT_ID_LEN} characters"
            ));
        }
        if !value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err("event_id may hold only letters, digits, _ and -".into());
        }
        Ok(Self(value))
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The outer envelope, tagged by its `type` field.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Envelope {
    /// Sent once when the Request URL is saved in the Slack app's settings.
    UrlVerification {
        /// The value to answer the verification with, as it is.
        challenge: String,
    },
    /// An event (`event_callback`): one delivery of one event.
    EventCallback(Box<EventCallback>),
    /// Slack stopped delivering events for this app in this workspace for the rest of the hour
    /// (more than 30,000 deliveries an hour).
    AppRateLimited {
        /// The workspace whose events stopped.
        #[serde(default, deserialize_with = "lenient_string")]
        team_id: Option<String>,
        /// The minute the limit began, in Unix seconds.
        #[serde(default, deserialize_with = "lenient_u64")]
        minute_rate_limited: Option<u64>,
    },
    /// Any envelope type this version does not know: acknowledged and ignored.
    #[serde(other)]
    Unknown,
}

/// An `event_callback`: one event's delivery, with the event and the installation it is for.
#[derive(Debug, Deserialize)]
#[non_exhaustive]
pub struct EventCallback {
    /// Slack's `event_id`, the same on every retry of this event.
    pub event_id: EventId,
    /// The workspace the event happened in; in a Slack Connect channel it may not be the
    /// installation's.
    #[serde(default, deserialize_with = "lenient_string")]
    pub team_id: Option<String>,
    /// The Enterprise Grid organisation, when there is one.
    #[serde(default, deserialize_with = "lenient_string")]
    pub enterprise_id: Option<String>,
    /// The app the event is delivered to (`A…`).
    #[serde(default, deserialize_with = "lenient_string")]
    pub api_app_id: Option<String>,
    /// When the event happened, in Unix seconds.
    #[serde(default, deserialize_with = "lenient_i64")]
    pub event_time: Option<i64>,
    /// The inner event.
    pub event: Event,
    /// The installation this delivery is for (one entry; `is_bot` marks the bot user).
    #[serde(default, deserialize_with = "lenient_authorizations")]
    pub authorizations: Vec<Authorization>,
    /// The envelope as Slack sent it, byte for byte (what the gateway forwards to a bot).
    #[serde(skip)]
    pub(crate) delivered: Option<std::sync::Arc<str>>,
}

/// One entry of `authorizations`: an installation the event is visible to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Authorization {
    /// The installation's workspace (`T…`).
    pub team_id: Option<String>,
    /// The installation's Enterprise Grid organisation, when there is one.
    pub enterprise_id: Option<String>,
    /// The user the authorization is for: the bot user when `is_bot`.
    pub user_id: Option<String>,
    /// The authorization is the app's bot user's.
    pub is_bot: bool,
    /// An org-wide install (Enterprise Grid): the installation is the enterprise's.
    pub is_enterprise_install: bool,
}

/// The inner event: the fields the protocol and the router use, read leniently, and the whole
/// event as Slack sent it (`raw`), for bots.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Event {
    /// `type`: the one field required.
    pub kind: String,
    /// The `subtype` (a message's `file_share`, `message_changed`…), when there is one.
    pub subtype: Option<String>,
    /// The acting user's id: a string in most events, the `id` of a user object in `team_join`
    /// and `user_change`.
    pub user: Option<String>,
    /// The `bot_id` of a bot's message.
    pub bot_id: Option<String>,
    /// The `text` of a message, when the event has one.
    pub text: Option<String>,
    /// The channel's id: a string in most events, the `id` of a channel object in
    /// `channel_created`, `channel_rename`, `im_created`; `item.channel` for reactions.
    pub channel: Option<String>,
    /// The kind of conversation (`channel`, `group`, `im`, `mpim`), when the event says.
    pub channel_type: Option<String>,
    /// The message's `ts`, when the event is a message's.
    pub ts: Option<String>,
    /// The thread's parent `ts` (`thread_ts`, or `assistant_thread.thread_ts`).
    pub thread_ts: Option<String>,
    /// When the event happened, as a Slack `ts` (`event_ts`).
    pub event_ts: Option<String>,
    /// The client's id of one user message, the same in every event that carries it.
    pub client_msg_id: Option<String>,
    /// The whole inner event as Slack sent it, but for a Workflow Builder step's token
    /// (`bot_access_token`, shown `[redacted]`: the context's calls use it).
    pub raw: Value,
    /// A step execution's token (`function_executed`'s `bot_access_token`).
    pub(crate) execution_token: Option<crate::config::Secret>,
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut raw = Value::deserialize(deserializer)?;
        let execution_token = redact_execution_token(&mut raw);
        let Value::Object(map) = &raw else {
            return Err(serde::de::Error::custom("event must be an object"));
        };
        let Some(kind) = map.get("type").and_then(Value::as_str).map(str::to_string) else {
            return Err(serde::de::Error::custom("event must have a string type"));
        };
        let text = |key: &str| map.get(key).and_then(Value::as_str).map(str::to_string);
        // A string id, or the `id` of an object.
        let id = |key: &str| match map.get(key) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Object(o)) => o.get("id").and_then(Value::as_str).map(str::to_string),
            _ => None,
        };
        let item = |key: &str| {
            map.get("item")
                .and_then(|i| i.get(key))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        // An assistant thread's events name their conversation inside `assistant_thread`.
        let assistant = |key: &str| {
            map.get("assistant_thread")
                .and_then(|t| t.get(key))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        Ok(Event {
            subtype: text("subtype"),
            user: id("user").or_else(|| assistant("user_id")),
            bot_id: text("bot_id"),
            text: text("text"),
            channel: id("channel")
                .or_else(|| item("channel"))
                .or_else(|| assistant("channel_id")),
            channel_type: text("channel_type"),
            ts: text("ts"),
            thread_ts: text("thread_ts").or_else(|| assistant("thread_ts")),
            event_ts: text("event_ts"),
            client_msg_id: text("client_msg_id"),
            kind,
            raw,
            execution_token,
        })
    }
}

/// Takes a Workflow Builder step's token (`bot_access_token`) out of `raw`, leaving
/// `[redacted]` in its place: what listeners see of a request never holds it, so that a
/// listener that logs the event or the click logs no token.
pub(crate) fn redact_execution_token(raw: &mut Value) -> Option<crate::config::Secret> {
    let slot = raw.get_mut("bot_access_token")?;
    let token = slot.as_str().filter(|t| !t.is_empty())?.to_string();
    *slot = Value::String("[redacted]".into());
    Some(crate::config::Secret::new(token))
}

fn lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => Some(s),
        _ => None,
    })
}

fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(Value::deserialize(d)?.as_u64())
}

fn lenient_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    Ok(Value::deserialize(d)?.as_i64())
}

fn lenient_authorizations<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Authorization>, D::Error> {
    let Value::Array(items) = Value::deserialize(d)? else {
        return Ok(Vec::new());
    };
    Ok(items
        .iter()
        .filter_map(Value::as_object)
        .map(|a| {
            let s = |k: &str| a.get(k).and_then(Value::as_str).map(str::to_string);
            Authorization {
                team_id: s("team_id"),
                enterprise_id: s("enterprise_id"),
                user_id: s("user_id"),
                is_bot: a.get("is_bot").and_then(Value::as_bool).unwrap_or(false),
                is_enterprise_install: a
                    .get("is_enterprise_install")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            }
        })
        .collect())
}

/// Message subtypes that are a new message (from a person, or `bot_message` from another
/// bot or a workflow); every other subtype (edits, deletions, joins, topic changes…) is not
/// something to answer.
const NEW_MESSAGE_SUBTYPES: &[&str] = &[
    "file_share",
    "thread_broadcast",
    "me_message",
    "bot_message",
];

/// Why an event is acknowledged without being claimed or answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// The bot's own message (posted by this app, or authored by the installation's bot
    /// user), or a bot's message that cannot be told from this app's own.
    OwnMessage,
    /// An edit, a deletion, a join… rather than a new message from a person.
    NotANewMessage,
    /// Multi-workspace mode: no installation serves the request's workspace.
    NotInstalled,
    /// Multi-workspace mode: the workspace's installation can no longer be used (its refresh
    /// token was refused): it must be installed again.
    InstallationBroken,
}

impl SkipReason {
    /// The reason as a snake_case name (`own_message`, `not_a_new_message`…).
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::OwnMessage => "own_message",
            SkipReason::NotANewMessage => "not_a_new_message",
            SkipReason::NotInstalled => "not_installed",
            SkipReason::InstallationBroken => "installation_broken",
        }
    }
}

/// Events whose `user` may be the bot itself and still matter (as in Bolt's ignoreSelf): the bot
/// joining or leaving a channel.
const KEPT_WHEN_BY_THE_BOT: &[&str] = &["member_joined_channel", "member_left_channel"];

impl Event {
    /// A `message` event that changes a message rather than posting one (`message_changed`,
    /// `message_deleted`, `channel_join`…: a subtype not of [`NEW_MESSAGE_SUBTYPES`]).
    pub(crate) fn changes_a_message(&self) -> bool {
        self.kind == "message"
            && self
                .subtype
                .as_deref()
                .is_some_and(|subtype| !NEW_MESSAGE_SUBTYPES.contains(&subtype))
    }
}

impl Envelope {
    /// Parses a verified body, keeping an event's envelope as Slack sent it.
    pub(crate) fn from_delivered(body: &str) -> Result<Envelope, serde_json::Error> {
        let mut envelope: Envelope = serde_json::from_str(body)?;
        if let Envelope::EventCallback(callback) = &mut envelope {
            callback.delivered = Some(std::sync::Arc::from(body));
        }
        Ok(envelope)
    }
}

impl EventCallback {
    /// What picks the installation this delivery is for: its team, its enterprise, and
    /// whether the app is installed org-wide.
    ///
    /// The installation is the one Slack names in `authorizations` (as Bolt reads it): in a
    /// channel shared with another organisation (Slack Connect), `team_id` is the team of the
    /// person who wrote, and may have no installation of this app, or one of its own.
    pub fn installation(&self) -> (Option<&str>, Option<&str>, bool) {
        if let Some(first) = self.authorizations.first()
            && (first.team_id.is_some() || first.enterprise_id.is_some())
        {
            return (
                first.team_id.as_deref(),
                first.enterprise_id.as_deref(),
                first.is_enterprise_install,
            );
        }
        (self.team(), self.enterprise_id.as_deref(), false)
    }

    /// The bot user of the installation this delivery is for: the authorization marked
    /// `is_bot` (an event can carry a user's authorization too).
    pub fn bot_user_id(&self) -> Option<&str> {
        self.authorizations
            .iter()
            .find(|a| a.is_bot)?
            .user_id
            .as_deref()
    }

    /// The workspace: `team_id`, or the installation's team.
    pub fn team(&self) -> Option<&str> {
        self.team_id
            .as_deref()
            .or_else(|| self.authorizations.first()?.team_id.as_deref())
    }

    /// The app that posted the event's message, when it says (`app_id`, or its bot profile's).
    fn posting_app(&self) -> Option<&str> {
        let raw = &self.event.raw;
        raw.get("app_id")
            .or_else(|| raw.get("bot_profile").and_then(|p| p.get("app_id")))
            .and_then(Value::as_str)
    }

    /// Whether the event is a message of a bot (`bot_id`, or `bot_message`).
    fn by_a_bot(&self) -> bool {
        self.event.bot_id.is_some() || self.event.subtype.as_deref() == Some("bot_message")
    }

    /// A message of another bot or a workflow (the bot's own are skipped before this matters):
    /// heard only by listeners that ask for them.
    pub fn from_other_bot(&self) -> bool {
        self.by_a_bot()
    }

    /// Events the bot must never answer, decided before the ledger is touched. The bot's own
    /// messages are told by the app that posted them (`app_id` = `api_app_id`) or by their
    /// author (the bot user); a bot's message that says neither which app posted it, in an
    /// event that does not name this app, is taken for the bot's own (never answer yourself).
    pub fn skip_reason(&self) -> Option<SkipReason> {
        let event = &self.event;
        if let (Some(user), Some(bot)) = (event.user.as_deref(), self.bot_user_id())
            && user == bot
            && !KEPT_WHEN_BY_THE_BOT.contains(&event.kind.as_str())
        {
            return Some(SkipReason::OwnMessage);
        }
        if self.by_a_bot() {
            match (self.posting_app(), self.api_app_id.as_deref()) {
                (Some(posted_by), Some(us)) if posted_by != us => {}
                _ => return Some(SkipReason::OwnMessage),
            }
        }
        if event.changes_a_message() {
            return Some(SkipReason::NotANewMessage);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn parse(json: &str) -> Result<Envelope, serde_json::Error> {
        serde_json::from_str(json)
    }

    const MENTION: &str = r#"{
        "token": "x", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
        "event_id": "Ev01ABC", "event_time": 1700000000,
        "event": {"type": "app_mention", "user": "U1", "text": "<@UBOT> hi",
                  "ts": "1700000000.000100", "channel": "C1", "event_ts": "1700000000.000100"},
        "authorizations": [{"enterprise_id": null, "team_id": "T1", "user_id": "UBOT", "is_bot": true}]
    }"#;

    #[test]
    fn url_verification_carries_its_challenge() {
        let e =
            parse(r#"{"token":"t","challenge":"3eZbrw1aB","type":"url_verification"}"#).unwrap();
        assert!(matches!(e, Envelope::UrlVerification { challenge } if challenge == "3eZbrw1aB"));
    }

    #[test]
    fn an_event_callback_parses_with_its_id_and_bot_user() {
        let Envelope::EventCallback(cb) = parse(MENTION).unwrap() else {
            panic!("not an event_callback")
        };
        assert_eq!(cb.event_id.as_str(), "Ev01ABC");
        assert_eq!(cb.team_id.as_deref(), Some("T1"));
        assert_eq!(cb.event.kind, "app_mention");
        assert_eq!(cb.bot_user_id(), Some("UBOT"));
        assert_eq!(cb.skip_reason(), None);
    }

    #[test]
    fn app_rate_limited_and_unknown_types_parse() {
        let e = parse(r#"{"token":"t","type":"app_rate_limited","team_id":"T1","minute_rate_limited":1518467820,"api_app_id":"A1"}"#).unwrap();
        assert!(matches!(
            e,
            Envelope::AppRateLimited {
                minute_rate_limited: Some(1518467820),
                ..
            }
        ));
        assert!(matches!(
            parse(r#"{"type":"something_new","x":1}"#).unwrap(),
            Envelope::Unknown
        ));
    }

    #[test]
    fn malformed_envelopes_are_errors() {
        for bad in [
            "",
            "{",
            "[]",
            r#"{"challenge":"no type"}"#,
            r#"{"type":"url_verification"}"#,
            r#"{"type":"event_callback","event_id":"Ev1"}"#,
            r#"{"type":"event_callback","event_id":"Ev 1","event":{"type":"message"}}"#,
            r#"{"type":"event_callback","event_id":"Ev1","event_id":"Ev2","event":{"type":"message"}}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        let huge = format!(
            r#"{{"type":"event_callback","event_id":"{}","event":{{"type":"message"}}}}"#,
            "E".repeat(MAX_EVENT_ID_LEN + 1)
        );
        assert!(parse(&huge).is_err());
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let nested = format!(
            r#"{{"type":"event_callback","event_id":"Ev1","event":{{"type":"message","x":{deep}}}}}"#
        );
        assert!(
            parse(&nested).is_err(),
            "serde_json's recursion limit refuses deep nesting"
        );
    }

    fn callback(event: &str) -> EventCallback {
        let json = format!(
            r#"{{"type":"event_callback","event_id":"Ev1","event":{event},
                "authorizations":[{{"user_id":"UBOT","is_bot":true}}]}}"#
        );
        match parse(&json).unwrap() {
            Envelope::EventCallback(cb) => *cb,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_bots_own_messages_are_skipped() {
        let by_bot_id = callback(r#"{"type":"message","bot_id":"B1","text":"hi","channel":"D1"}"#);
        assert_eq!(
            by_bot_id.skip_reason(),
            Some(SkipReason::OwnMessage),
            "a bot's message that cannot be told from ours is taken for ours"
        );
        let by_user = callback(r#"{"type":"message","user":"UBOT","text":"hi","channel":"D1"}"#);
        assert_eq!(by_user.skip_reason(), Some(SkipReason::OwnMessage));
        let mut ours = callback(
            r#"{"type":"message","bot_id":"B1","app_id":"A1","user":"U9","text":"hi","channel":"C1"}"#,
        );
        ours.api_app_id = Some("A1".into());
        assert_eq!(ours.skip_reason(), Some(SkipReason::OwnMessage));
    }

    #[test]
    fn another_apps_message_is_not_skipped_but_marked_as_a_bots() {
        let mut other = callback(
            r#"{"type":"message","bot_id":"B9","app_id":"A9","text":"deploy done","channel":"C1"}"#,
        );
        other.api_app_id = Some("A1".into());
        assert_eq!(other.skip_reason(), None);
        assert!(other.from_other_bot());
        let mut workflow = callback(
            r#"{"type":"message","subtype":"bot_message","bot_id":"B8","bot_profile":{"app_id":"A8"},"text":"x","channel":"C1"}"#,
        );
        workflow.api_app_id = Some("A1".into());
        assert_eq!(workflow.skip_reason(), None);
        assert!(workflow.from_other_bot());
    }

    #[test]
    fn edits_deletions_and_joins_are_skipped_but_file_shares_are_not() {
        for subtype in [
            "message_changed",
            "message_deleted",
            "channel_join",
            "channel_topic",
        ] {
            let cb = callback(&format!(
                r#"{{"type":"message","subtype":"{subtype}","channel":"D1"}}"#
            ));
            assert_eq!(
                cb.skip_reason(),
                Some(SkipReason::NotANewMessage),
                "{subtype}"
            );
        }
        let share =
            callback(r#"{"type":"message","subtype":"file_share","user":"U1","channel":"D1"}"#);
        assert_eq!(share.skip_reason(), None);
    }
}
