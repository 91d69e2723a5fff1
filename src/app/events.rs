//! The common events, typed, read leniently from the event as Slack sent it; every typed event
//! also carries the whole event as JSON (`raw`), and any event can be heard untyped as
//! [`crate::envelope::Event`].

use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// An id Slack sends as a string in most events and as an object with an `id` in others
/// (`team_join`'s `user`, `channel_created`'s `channel`).
fn id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("id").and_then(Value::as_str).map(str::to_string),
        _ => None,
    })
}

fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s,
        _ => String::new(),
    })
}

/// Parses `raw` as `T`, keeping `raw` in it.
pub(crate) fn typed<T: Typed>(raw: &Value) -> Option<T> {
    let mut event = T::deserialize(raw).ok()?;
    event.set_raw(raw.clone());
    Some(event)
}

pub(crate) trait Typed: for<'de> Deserialize<'de> {
    fn set_raw(&mut self, raw: Value);
}

macro_rules! typed {
    ($($t:ty),*) => {
        $(impl Typed for $t {
            fn set_raw(&mut self, raw: Value) {
                self.raw = raw;
            }
        })*
    };
}

/// `app_mention`: the bot was mentioned in a conversation it is in.
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct AppMention {
    #[serde(default, deserialize_with = "id")]
    pub user: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub text: String,
    pub channel: String,
    pub ts: String,
    #[serde(default)]
    pub thread_ts: Option<String>,
    #[serde(default)]
    pub client_msg_id: Option<String>,
    #[serde(skip)]
    pub raw: Value,
}

/// The workspace of a message's author, as its event says (`user_team`, or `team`).
fn user_team(raw: &Value) -> Option<&str> {
    ["user_team", "team"]
        .into_iter()
        .find_map(|k| raw.get(k)?.as_str())
        .filter(|t| !t.is_empty())
}

impl AppMention {
    /// As [`MessageEvent::user_team`].
    pub fn user_team(&self) -> Option<&str> {
        user_team(&self.raw)
    }

    /// The mention a message is, whichever event carried it (`text` as Slack sent it, with
    /// the mention of the bot).
    pub(crate) fn from_message(m: &MessageEvent) -> Self {
        Self {
            user: m.user.clone(),
            text: m.raw["text"].as_str().unwrap_or(&m.text).to_string(),
            channel: m.channel.clone(),
            ts: m.ts.clone(),
            thread_ts: m.thread_ts.clone(),
            client_msg_id: m.client_msg_id.clone(),
            raw: m.raw.clone(),
        }
    }
}

/// A message from a person: `message` events (channels, groups, DMs: `channel_type` says which)
/// without a subtype or with `file_share`, `thread_broadcast` or `me_message`, and
/// `app_mention`s, so that one listener hears a message however it arrives. `mention` is true
/// when it mentions the bot (however it arrived), and `text` is without a leading mention of
/// the bot. A listener built with [`crate::app::Listener::including_bots`] also hears messages
/// of other bots (`bot_id` set, or the subtype `bot_message`).
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct MessageEvent {
    pub channel: String,
    #[serde(default)]
    pub channel_type: Option<String>,
    #[serde(default, deserialize_with = "id")]
    pub user: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub text: String,
    pub ts: String,
    #[serde(default)]
    pub thread_ts: Option<String>,
    #[serde(default)]
    pub subtype: Option<String>,
    #[serde(default)]
    pub client_msg_id: Option<String>,
    #[serde(default)]
    pub files: Vec<Value>,
    /// Another bot's message: its bot id (and app id).
    #[serde(default)]
    pub bot_id: Option<String>,
    #[serde(default)]
    pub app_id: Option<String>,
    /// The message mentions the bot.
    #[serde(skip)]
    pub mention: bool,
    /// A pattern listener's captures: `captures[0]` is the whole match, then each group
    /// (`None` for a group that did not take part).
    #[serde(skip)]
    pub captures: Vec<Option<String>>,
    #[serde(skip)]
    pub raw: Value,
}

impl MessageEvent {
    /// A direct message to the bot.
    pub fn is_dm(&self) -> bool {
        self.channel_type.as_deref() == Some("im")
    }

    /// The thread this message is in, or its own `ts` (to start a thread under it).
    pub fn thread(&self) -> &str {
        self.thread_ts.as_deref().unwrap_or(&self.ts)
    }

    /// The workspace of the message's author, when the event says (`user_team`, or `team`):
    /// in a Slack Connect conversation it is another organisation's, not the app's.
    pub fn user_team(&self) -> Option<&str> {
        user_team(&self.raw)
    }

    /// A message of another bot or of a workflow.
    pub fn is_from_bot(&self) -> bool {
        self.bot_id.is_some() || self.subtype.as_deref() == Some("bot_message")
    }

    /// The capture group `n` of a pattern listener (0: the whole match).
    pub fn capture(&self, n: usize) -> Option<&str> {
        self.captures.get(n)?.as_deref()
    }
}

/// The item a reaction is on.
#[derive(Clone, Debug, Default, Deserialize)]
#[non_exhaustive]
pub struct ReactionItem {
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub channel: Option<String>,
    #[serde(default)]
    pub ts: Option<String>,
    #[serde(default)]
    pub file: Option<String>,
}

/// `reaction_added` and `reaction_removed`.
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct Reaction {
    #[serde(default, deserialize_with = "id")]
    pub user: Option<String>,
    pub reaction: String,
    #[serde(default)]
    pub item_user: Option<String>,
    #[serde(default)]
    pub item: ReactionItem,
    #[serde(default)]
    pub event_ts: Option<String>,
    #[serde(skip)]
    pub raw: Value,
}

/// `member_joined_channel`: someone (the bot too) joined a conversation.
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct MemberJoinedChannel {
    #[serde(deserialize_with = "id")]
    pub user: Option<String>,
    #[serde(deserialize_with = "id")]
    pub channel: Option<String>,
    #[serde(default)]
    pub channel_type: Option<String>,
    #[serde(default)]
    pub team: Option<String>,
    #[serde(default)]
    pub inviter: Option<String>,
    #[serde(skip)]
    pub raw: Value,
}

/// `app_home_opened`: someone opened the app's Home, Messages or About tab.
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct AppHomeOpened {
    #[serde(deserialize_with = "id")]
    pub user: Option<String>,
    #[serde(default, deserialize_with = "id")]
    pub channel: Option<String>,
    #[serde(default)]
    pub tab: Option<String>,
    #[serde(skip)]
    pub raw: Value,
}

/// An assistant thread started: `assistant_thread_started` (Slack's assistant view), or, in
/// the agent view of 2026, `app_home_opened` with `tab: "messages"` (the user opened the app's
/// DM), which has no thread yet (`thread_ts` is `None`, `agent_view` true).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct AssistantThread {
    pub user_id: Option<String>,
    pub channel_id: String,
    pub thread_ts: Option<String>,
    /// Where the user is: `{channel_id, team_id, enterprise_id}` (assistant view only).
    pub context: Option<Value>,
    pub agent_view: bool,
    pub raw: Value,
}

impl AssistantThread {
    /// The thread an assistant event names (`assistant_thread_started`,
    /// `assistant_thread_context_changed`), or an agent view's opening.
    pub(crate) fn of(kind: &str, raw: &Value) -> Option<Self> {
        let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
        match kind {
            "assistant_thread_started" | "assistant_thread_context_changed" => {
                let thread = raw.get("assistant_thread")?;
                Some(Self {
                    user_id: text(&thread["user_id"]),
                    channel_id: text(&thread["channel_id"])?,
                    thread_ts: text(&thread["thread_ts"]),
                    context: thread.get("context").filter(|c| c.is_object()).cloned(),
                    agent_view: false,
                    raw: raw.clone(),
                })
            }
            "app_home_opened" if raw["tab"] == "messages" => Some(Self {
                user_id: text(&raw["user"]),
                channel_id: text(&raw["channel"])?,
                thread_ts: None,
                context: None,
                agent_view: true,
                raw: raw.clone(),
            }),
            _ => None,
        }
    }
}

/// A user, as `team_join` and `user_change` carry it.
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct User {
    pub id: String,
    #[serde(default)]
    pub team_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub real_name: Option<String>,
    #[serde(default)]
    pub is_bot: bool,
    #[serde(default)]
    pub deleted: bool,
    #[serde(default)]
    pub tz: Option<String>,
    #[serde(default)]
    pub profile: Value,
}

/// `team_join`: a new member of the workspace.
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct TeamJoin {
    pub user: User,
    #[serde(skip)]
    pub raw: Value,
}

/// A channel, as `channel_created` carries it.
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct Channel {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "id")]
    pub creator: Option<String>,
    #[serde(default)]
    pub created: Option<i64>,
}

/// `channel_created`.
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct ChannelCreated {
    pub channel: Channel,
    #[serde(skip)]
    pub raw: Value,
}

typed!(
    AppMention,
    MessageEvent,
    Reaction,
    MemberJoinedChannel,
    AppHomeOpened,
    TeamJoin,
    ChannelCreated
);

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str) -> Value {
        let path = format!(
            "{}/tests/data/events/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let envelope: Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        envelope["event"].clone()
    }

    #[test]
    fn the_documented_payloads_read_as_their_types() {
        let m: AppMention = typed(&file("app_mention")).unwrap();
        assert_eq!(
            (m.channel.as_str(), m.user.as_deref()),
            ("C0789CHAN", Some("U0123USER"))
        );
        let msg: MessageEvent = typed(&file("message_im")).unwrap();
        assert!(msg.is_dm());
        assert_eq!(msg.thread(), msg.ts);
        let r: Reaction = typed(&file("reaction_added")).unwrap();
        assert_eq!(
            (r.reaction.as_str(), r.item.ts.as_deref()),
            ("eyes", Some("1767225601.000200"))
        );
        let j: MemberJoinedChannel = typed(&file("member_joined_channel")).unwrap();
        assert_eq!(j.channel.as_deref(), Some("C0789CHAN"));
        let h: AppHomeOpened = typed(&file("app_home_opened")).unwrap();
        assert_eq!(h.tab.as_deref(), Some("home"));
        let t: TeamJoin = typed(&file("team_join")).unwrap();
        assert_eq!(t.user.id, "W0NEWUSER");
        assert_eq!(t.raw["user"]["profile"]["display_name"], "newbie");
        let c: ChannelCreated = typed(&file("channel_created")).unwrap();
        assert_eq!(c.channel.name.as_deref(), Some("project-x"));
    }

    #[test]
    fn an_event_without_what_its_type_needs_does_not_read_as_it() {
        assert!(typed::<AppMention>(&serde_json::json!({"type": "app_mention"})).is_none());
        assert!(
            typed::<TeamJoin>(&serde_json::json!({"type": "team_join", "user": "W1"})).is_none()
        );
    }
}
