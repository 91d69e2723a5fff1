//! The common events, typed, read leniently from the event as Slack sent it; every typed event
//! also carries the whole event as JSON (`raw`), and any event can be heard untyped as
//! [`crate::slack::envelope::Event`].

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
    /// The user who mentioned the bot (`U…`), when the event names one.
    #[serde(default, deserialize_with = "id")]
    pub user: Option<String>,
    /// The message's `text` as Slack sent it, the mention of the bot included (empty when it has
    /// none).
    #[serde(default, deserialize_with = "text")]
    pub text: String,
    /// The conversation the message was posted in (`C…`, or `G…` for a private channel).
    pub channel: String,
    /// The message's `ts`: its id within the conversation.
    pub ts: String,
    /// The `ts` of the thread's parent, when the message is in a thread.
    #[serde(default)]
    pub thread_ts: Option<String>,
    /// The id the Slack client gave the message, when a person sent it from a client.
    #[serde(default)]
    pub client_msg_id: Option<String>,
    /// The whole event as Slack sent it.
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
    /// The conversation the message was posted in (`C…`, `D…` for a DM, `G…`).
    pub channel: String,
    /// The kind of conversation (`channel`, `group`, `im`, `mpim`), when the event says; `im` is
    /// filled in for a DM.
    #[serde(default)]
    pub channel_type: Option<String>,
    /// The message's author (`U…` or `W…`), when it has one.
    #[serde(default, deserialize_with = "id")]
    pub user: Option<String>,
    /// The message's `text`, without a leading mention of the bot (empty when it has none).
    #[serde(default, deserialize_with = "text")]
    pub text: String,
    /// The message's `ts`: its id within the conversation.
    pub ts: String,
    /// The `ts` of the thread's parent, when the message is in a thread.
    #[serde(default)]
    pub thread_ts: Option<String>,
    /// The message's `subtype` (`file_share`, `thread_broadcast`, `me_message`, `bot_message`),
    /// `None` for a plain message.
    #[serde(default)]
    pub subtype: Option<String>,
    /// The id the Slack client gave the message, when a person sent it from a client.
    #[serde(default)]
    pub client_msg_id: Option<String>,
    /// The files shared with the message (`files`), as Slack sent them; empty when none.
    #[serde(default)]
    pub files: Vec<Value>,
    /// Another bot's message: its bot id (and app id).
    #[serde(default)]
    pub bot_id: Option<String>,
    /// Another bot's message: its app id, when Slack sends one.
    #[serde(default)]
    pub app_id: Option<String>,
    /// The message mentions the bot.
    #[serde(skip)]
    pub mention: bool,
    /// A pattern listener's captures: `captures[0]` is the whole match, then each group
    /// (`None` for a group that did not take part).
    #[serde(skip)]
    pub captures: Vec<Option<String>>,
    /// The whole event as Slack sent it.
    #[serde(skip)]
    pub raw: Value,
}

impl MessageEvent {
    /// What the person was looking at when they sent it (the agent view: the message's
    /// `app_context`), when Slack sent it.
    pub fn app_context(&self) -> Option<super::AppContext> {
        self.raw
            .get("app_context")
            .filter(|c| c.is_object())
            .map(super::AppContext::of)
    }

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
    /// What the reaction is on (`type`): `message`, `file` or `file_comment`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The conversation of the message reacted to (a `message` item).
    #[serde(default)]
    pub channel: Option<String>,
    /// The `ts` of the message reacted to (a `message` item).
    #[serde(default)]
    pub ts: Option<String>,
    /// The id of the file reacted to (a `file` or `file_comment` item).
    #[serde(default)]
    pub file: Option<String>,
}

/// `reaction_added` and `reaction_removed`.
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct Reaction {
    /// The user who added or removed the reaction.
    #[serde(default, deserialize_with = "id")]
    pub user: Option<String>,
    /// The emoji's name, without colons (`thumbsup`, `eyes`, `+1::skin-tone-2`).
    pub reaction: String,
    /// The author of the item reacted to, when Slack says.
    #[serde(default)]
    pub item_user: Option<String>,
    /// The item the reaction is on.
    #[serde(default)]
    pub item: ReactionItem,
    /// When the reaction was added or removed, as a Slack `ts` (`event_ts`).
    #[serde(default)]
    pub event_ts: Option<String>,
    /// The whole event as Slack sent it.
    #[serde(skip)]
    pub raw: Value,
}

/// `member_joined_channel`: someone (the bot too) joined a conversation.
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct MemberJoinedChannel {
    /// The user who joined.
    #[serde(deserialize_with = "id")]
    pub user: Option<String>,
    /// The conversation joined.
    #[serde(deserialize_with = "id")]
    pub channel: Option<String>,
    /// The conversation's type: `C` for a public channel, `G` for a private one.
    #[serde(default)]
    pub channel_type: Option<String>,
    /// The workspace of the user who joined (`T…`).
    #[serde(default)]
    pub team: Option<String>,
    /// The user who invited them, when someone did.
    #[serde(default)]
    pub inviter: Option<String>,
    /// The whole event as Slack sent it.
    #[serde(skip)]
    pub raw: Value,
}

/// `app_home_opened`: someone opened the app's Home, Messages or About tab.
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct AppHomeOpened {
    /// The user who opened the tab.
    #[serde(deserialize_with = "id")]
    pub user: Option<String>,
    /// The app's DM with that user (`D…`).
    #[serde(default, deserialize_with = "id")]
    pub channel: Option<String>,
    /// The tab opened (`home` or `messages`).
    #[serde(default)]
    pub tab: Option<String>,
    /// The whole event as Slack sent it.
    #[serde(skip)]
    pub raw: Value,
}

/// An assistant thread started: `assistant_thread_started` (Slack's assistant view), or, in
/// the agent view of 2026, `app_home_opened` with `tab: "messages"` (the user opened the app's
/// DM), which has no thread yet (`thread_ts` is `None`, `agent_view` true).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct AssistantThread {
    /// The user the thread is with (`assistant_thread.user_id`, or the event's `user` in the agent
    /// view).
    pub user_id: Option<String>,
    /// The DM the thread is in (`assistant_thread.channel_id`, or the event's `channel` in the
    /// agent view).
    pub channel_id: String,
    /// The thread's `ts` (`assistant_thread.thread_ts`); `None` in the agent view, where there is
    /// no thread yet.
    pub thread_ts: Option<String>,
    /// Where the user is: `{channel_id, team_id, enterprise_id}` (assistant view only).
    pub context: Option<Value>,
    /// The agent view's opening of the app's DM (`app_home_opened` with `tab: "messages"`), not an
    /// assistant thread event.
    pub agent_view: bool,
    /// The whole event as Slack sent it.
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
    /// The user's id (`U…` or `W…`).
    pub id: String,
    /// The user's workspace (`T…`).
    #[serde(default)]
    pub team_id: Option<String>,
    /// The user's handle (`name`).
    #[serde(default)]
    pub name: Option<String>,
    /// The user's full name (`real_name`).
    #[serde(default)]
    pub real_name: Option<String>,
    /// The user is a bot user.
    #[serde(default)]
    pub is_bot: bool,
    /// The user has been deactivated.
    #[serde(default)]
    pub deleted: bool,
    /// The user's time zone, as a tz database name (`Europe/Paris`).
    #[serde(default)]
    pub tz: Option<String>,
    /// The user's profile as Slack sent it (`display_name`, `email`, images…); `Null` when absent.
    #[serde(default)]
    pub profile: Value,
}

/// `team_join`: a new member of the workspace.
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct TeamJoin {
    /// The new member.
    pub user: User,
    /// The whole event as Slack sent it.
    #[serde(skip)]
    pub raw: Value,
}

/// A channel, as `channel_created` carries it.
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct Channel {
    /// The channel's id (`C…`).
    pub id: String,
    /// The channel's name, without the `#`.
    #[serde(default)]
    pub name: Option<String>,
    /// The user who created the channel.
    #[serde(default, deserialize_with = "id")]
    pub creator: Option<String>,
    /// When the channel was created, in Unix seconds.
    #[serde(default)]
    pub created: Option<i64>,
}

/// `channel_created`.
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct ChannelCreated {
    /// The new channel.
    pub channel: Channel,
    /// The whole event as Slack sent it.
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
