//! The Slack Events API envelope as typed serde values (docs.slack.dev, "Events API").

use std::fmt;

use serde::Deserialize;

/// Slack's `event_id`: globally unique across workspaces, the same on every retry of one event.
/// It is the ledger's key, so its size and alphabet are bounded here, before it reaches DynamoDB.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(try_from = "String")]
pub struct EventId(String);

/// Slack's ids are short (`Ev08ABCDEF12`); anything longer is not Slack's.
pub const MAX_EVENT_ID_LEN: usize = 128;

impl EventId {
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
pub enum Envelope {
    /// Sent once when the Request URL is saved in the Slack app's settings.
    UrlVerification {
        challenge: String,
    },
    EventCallback(Box<EventCallback>),
    /// Slack stopped delivering events for this app in this workspace for the rest of the hour
    /// (more than 30,000 deliveries an hour).
    AppRateLimited {
        #[serde(default)]
        team_id: Option<String>,
        #[serde(default)]
        minute_rate_limited: Option<u64>,
    },
    /// Any envelope type this version does not know: acknowledged and ignored.
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Deserialize)]
pub struct EventCallback {
    pub event_id: EventId,
    #[serde(default)]
    pub team_id: Option<String>,
    #[serde(default)]
    pub api_app_id: Option<String>,
    #[serde(default)]
    pub event_time: Option<i64>,
    pub event: Event,
    /// One installation: `user_id` is the bot user's own id.
    #[serde(default)]
    pub authorizations: Vec<Authorization>,
}

#[derive(Debug, Deserialize)]
pub struct Authorization {
    #[serde(default)]
    pub user_id: Option<String>,
    #[serde(default)]
    pub is_bot: Option<bool>,
}

/// The inner event: the fields the router and the reference bot use. Unknown fields are ignored.
#[derive(Debug, Deserialize)]
pub struct Event {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub subtype: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub bot_id: Option<String>,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub channel: Option<String>,
    #[serde(default)]
    pub channel_type: Option<String>,
    #[serde(default)]
    pub ts: Option<String>,
    #[serde(default)]
    pub thread_ts: Option<String>,
}

/// Message subtypes that are a new message from a person; every other subtype (edits,
/// deletions, joins, topic changes, bot messages…) is not something to answer.
const USER_MESSAGE_SUBTYPES: &[&str] = &["file_share", "thread_broadcast", "me_message"];

/// Why an event is acknowledged without being claimed or answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// The bot's own message (it has a `bot_id`, or its author is the installation's bot user).
    OwnMessage,
    /// An edit, a deletion, a join… rather than a new message from a person.
    NotANewMessage,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::OwnMessage => "own_message",
            SkipReason::NotANewMessage => "not_a_new_message",
        }
    }
}

impl EventCallback {
    /// The bot user of the installation this delivery is for.
    pub fn bot_user_id(&self) -> Option<&str> {
        self.authorizations.first()?.user_id.as_deref()
    }

    /// Events the bot must never answer, decided before the ledger is touched.
    pub fn skip_reason(&self) -> Option<SkipReason> {
        let event = &self.event;
        if event.bot_id.is_some() {
            return Some(SkipReason::OwnMessage);
        }
        if let (Some(user), Some(bot)) = (event.user.as_deref(), self.bot_user_id()) {
            if user == bot {
                return Some(SkipReason::OwnMessage);
            }
        }
        if let Some(subtype) = event.subtype.as_deref() {
            if subtype == "bot_message" {
                return Some(SkipReason::OwnMessage);
            }
            if !USER_MESSAGE_SUBTYPES.contains(&subtype) {
                return Some(SkipReason::NotANewMessage);
            }
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
        assert_eq!(by_bot_id.skip_reason(), Some(SkipReason::OwnMessage));
        let by_user = callback(r#"{"type":"message","user":"UBOT","text":"hi","channel":"D1"}"#);
        assert_eq!(by_user.skip_reason(), Some(SkipReason::OwnMessage));
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
