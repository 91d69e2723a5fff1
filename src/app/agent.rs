//! Slack's agent messaging experience (2026): the events an agent-view app receives, its
//! sessions, plans and tasks, and feedback buttons.
//!
//! An agent-view app (`features.agent_view` in its manifest) hears a person open its Messages
//! tab as `app_home_opened` with `tab: "messages"` ([`App::assistant_thread_started`] with
//! `agent_view` set), each DM message as its own thread root ([`App::assistant_message`]), what
//! the person is looking at as `app_context_changed` ([`App::app_context_changed`],
//! [`Ctx::app_context`]), the session's stop button as `agent_session_stopped`
//! ([`App::agent_session_stopped`]) and a title the person changed as
//! `agent_session_title_changed`. Sessions' statuses and titles are journaled writes
//! ([`Ctx::set_session_status`], [`Ctx::rename_session`]); plans and tasks are chunks of a
//! [`super::Stream`]; feedback buttons' clicks reach [`App::feedback`].
//!
//! [`App::assistant_thread_started`]: super::App::assistant_thread_started
//! [`App::assistant_message`]: super::App::assistant_message
//! [`App::app_context_changed`]: super::App::app_context_changed
//! [`App::agent_session_stopped`]: super::App::agent_session_stopped
//! [`App::feedback`]: super::App::feedback

use serde_json::{Value, json};

use super::{Ctx, Error};
use crate::slack::interaction::BlockAction;

fn text(v: &Value) -> Option<String> {
    v.as_str().filter(|s| !s.is_empty()).map(str::to_string)
}

/// One thing a person is looking at, as Slack names it in a context's `entities`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Entity {
    /// A channel (`slack#/types/channel_id`).
    Channel(String),
    /// A canvas (`slack#/types/canvas_id`: a file id).
    Canvas(String),
    /// A list (`slack#/types/list_id`: a file id).
    List(String),
    /// A message (`slack#/types/message_context`): its conversation and `ts`.
    Message {
        /// The message's conversation.
        channel_id: String,
        /// The message's `ts`.
        message_ts: String,
    },
    /// A type this version does not know: its `type` and `value` as Slack sent them.
    Other {
        /// The entity's `type`.
        kind: String,
        /// The entity's `value`.
        value: Value,
    },
}

/// An entity of a context, with the workspace (and organisation) it belongs to.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ContextEntity {
    /// What it is.
    pub entity: Entity,
    /// Its workspace, when Slack says (another one's in a Slack Connect channel).
    pub team_id: Option<String>,
    /// Its organisation, when Slack says.
    pub enterprise_id: Option<String>,
}

/// What a person is looking at while they talk to the agent (`context` of
/// `app_context_changed` and of the Messages tab's `app_home_opened`, `app_context` of a DM
/// message): its entities, most relevant first; empty when Slack sent none.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct AppContext {
    /// The entities, most relevant first.
    pub entities: Vec<ContextEntity>,
    /// The context as Slack sent it.
    pub raw: Value,
}

impl AppContext {
    /// Reads a context object (`{"entities": [...]}`); entities it cannot read are skipped.
    pub fn of(raw: &Value) -> Self {
        let entities = raw["entities"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| {
                let kind = e["type"].as_str()?;
                let value = &e["value"];
                let entity = match kind {
                    "slack#/types/channel_id" => Entity::Channel(text(value)?),
                    "slack#/types/canvas_id" => Entity::Canvas(text(value)?),
                    "slack#/types/list_id" => Entity::List(text(value)?),
                    "slack#/types/message_context" => Entity::Message {
                        channel_id: text(&value["channel_id"])?,
                        message_ts: text(&value["message_ts"])?,
                    },
                    other => Entity::Other {
                        kind: other.to_string(),
                        value: value.clone(),
                    },
                };
                Some(ContextEntity {
                    entity,
                    team_id: text(&e["team_id"]),
                    enterprise_id: text(&e["enterprise_id"]),
                })
            })
            .collect();
        Self {
            entities,
            raw: raw.clone(),
        }
    }

    /// The channel the person is looking at: the most relevant channel entity, or a message
    /// entity's conversation.
    pub fn channel(&self) -> Option<&str> {
        self.entities.iter().find_map(|e| match &e.entity {
            Entity::Channel(id) => Some(id.as_str()),
            Entity::Message { channel_id, .. } => Some(channel_id.as_str()),
            _ => None,
        })
    }

    /// The message the person is looking at, when one is among the entities: (channel, ts).
    pub fn message(&self) -> Option<(&str, &str)> {
        self.entities.iter().find_map(|e| match &e.entity {
            Entity::Message {
                channel_id,
                message_ts,
            } => Some((channel_id.as_str(), message_ts.as_str())),
            _ => None,
        })
    }

    /// No entities: the person is looking at nothing Slack shares.
    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }
}

/// `app_context_changed`: the person talking to the agent now looks at something else.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct AppContextChanged {
    /// The person.
    pub user: Option<String>,
    /// The app's DM with them (`D…`).
    pub channel: Option<String>,
    /// What they look at now.
    pub context: AppContext,
    /// The event's `event_ts`.
    pub event_ts: Option<String>,
    /// The whole event as Slack sent it.
    pub raw: Value,
}

impl AppContextChanged {
    pub(crate) fn of(raw: &Value) -> Option<Self> {
        (raw["type"] == "app_context_changed").then(|| Self {
            user: text(&raw["user"]),
            channel: text(&raw["channel"]),
            context: AppContext::of(&raw["context"]),
            event_ts: text(&raw["event_ts"]),
            raw: raw.clone(),
        })
    }
}

/// `agent_session_stopped`: a person pressed a session's stop button. Slack has stopped the
/// streams it lists already; the session's status is the app's to change.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct AgentSessionStopped {
    /// Who pressed stop.
    pub user: Option<String>,
    /// The session's conversation.
    pub channel: String,
    /// The session's thread (`None` in a session channel).
    pub thread_ts: Option<String>,
    /// The app's streams Slack stopped (`streaming_message_ts`).
    pub streaming_message_ts: Vec<String>,
    /// The whole event as Slack sent it.
    pub raw: Value,
}

impl AgentSessionStopped {
    pub(crate) fn of(raw: &Value) -> Option<Self> {
        if raw["type"] != "agent_session_stopped" {
            return None;
        }
        Some(Self {
            user: text(&raw["user"]),
            channel: text(&raw["channel"])?,
            thread_ts: text(&raw["thread_ts"]),
            streaming_message_ts: raw["streaming_message_ts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(text)
                .collect(),
            raw: raw.clone(),
        })
    }
}

/// `agent_session_title_changed`: a person renamed a session.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct AgentSessionTitleChanged {
    /// Who renamed it.
    pub user: Option<String>,
    /// The session's conversation.
    pub channel: String,
    /// The session's thread.
    pub thread_ts: Option<String>,
    /// The new title.
    pub title: String,
    /// The title before, when it had one.
    pub previous_title: Option<String>,
    /// The whole event as Slack sent it.
    pub raw: Value,
}

impl AgentSessionTitleChanged {
    pub(crate) fn of(raw: &Value) -> Option<Self> {
        if raw["type"] != "agent_session_title_changed" {
            return None;
        }
        Some(Self {
            user: text(&raw["user"]),
            channel: text(&raw["channel"])?,
            thread_ts: text(&raw["thread_ts"]),
            title: raw["title"].as_str().unwrap_or_default().to_string(),
            previous_title: text(&raw["previous_title"]),
            raw: raw.clone(),
        })
    }
}

/// A click on feedback buttons (`feedback_buttons` in a `context_actions` block, at the end
/// of an answer).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Feedback {
    /// The positive button (its `value` is the element's `positive_button.value`).
    pub positive: bool,
    /// The clicked button's `value`.
    pub value: String,
    /// The answer's conversation.
    pub channel_id: Option<String>,
    /// The answer's message.
    pub message_ts: Option<String>,
    /// Who clicked.
    pub user_id: String,
    /// The click as a block action.
    pub click: BlockAction,
}

impl Feedback {
    /// A click, when it is one on feedback buttons: `positive` is read from the element in
    /// the message (its `positive_button.value`), or, where the message is not in the
    /// payload, from the value (`positive…`, `good`, `yes`, `up`).
    pub(crate) fn of(click: BlockAction) -> Option<Self> {
        let action = click.raw["actions"]
            .as_array()
            .and_then(|a| a.first())
            .cloned()
            .unwrap_or_default();
        if action["type"] != "feedback_buttons" {
            return None;
        }
        let value = click.value.clone().unwrap_or_default();
        let element = click
            .message
            .as_ref()
            .and_then(|m| m["blocks"].as_array())
            .into_iter()
            .flatten()
            .flat_map(|b| b["elements"].as_array().into_iter().flatten())
            .find(|e| e["type"] == "feedback_buttons" && e["action_id"] == action["action_id"])
            .cloned();
        let positive = match element {
            Some(e) if e["positive_button"]["value"].is_string() => {
                e["positive_button"]["value"] == value.as_str()
            }
            _ => {
                let v = value.to_ascii_lowercase();
                ["positive", "good", "yes", "up"]
                    .iter()
                    .any(|p| v.starts_with(p))
            }
        };
        Some(Self {
            positive,
            value,
            channel_id: click.channel_id.clone(),
            message_ts: click.message_ts.clone(),
            user_id: click.user_id.clone(),
            click,
        })
    }
}

/// Feedback buttons for the end of an answer: a `context_actions` block whose
/// `feedback_buttons` (`action_id`) carry the values `positive` and `negative`.
pub fn feedback_buttons(action_id: &str, positive: &str, negative: &str) -> Value {
    json!({"type": "context_actions", "elements": [{
        "type": "feedback_buttons", "action_id": action_id,
        "positive_button": {"text": {"type": "plain_text", "text": positive}, "value": "positive",
                            "accessibility_label": positive},
        "negative_button": {"text": {"type": "plain_text", "text": negative}, "value": "negative",
                            "accessibility_label": negative}
    }]})
}

/// An agent session's status (`agents.sessions.setStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionStatus {
    /// The agent works (Slack shows "Working…" and, when the app hears
    /// `agent_session_stopped`, a stop button); back to `Active` by itself after an hour.
    Processing,
    /// Answered: ready for the next prompt.
    Active,
    /// Waiting for the person's input.
    Suspended,
    /// Done.
    Closed,
}

impl SessionStatus {
    /// As Slack names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Processing => "processing",
            Self::Active => "active",
            Self::Suspended => "suspended",
            Self::Closed => "closed",
        }
    }
}

/// A task's status in a plan (`task_update`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TaskStatus {
    /// Not begun.
    Pending,
    /// Under way.
    InProgress,
    /// Done.
    Complete,
    /// Failed.
    Error,
}

impl TaskStatus {
    /// As Slack names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::InProgress => "in_progress",
            Self::Complete => "complete",
            Self::Error => "error",
        }
    }

    /// Whether a task at `self` may move to `next`: forward only (`pending` → `in_progress`
    /// → `complete` or `error`), or the same again.
    pub fn may_become(self, next: TaskStatus) -> bool {
        match (self, next) {
            (a, b) if a == b => true,
            (Self::Complete | Self::Error, _) => false,
            (a, b) => b > a,
        }
    }
}

/// A task of a stream's plan: its id (stable across updates), title and status, and what it
/// shows (`details`, `output`, `sources`).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Task {
    /// Its id: the same for every update of the task.
    pub id: String,
    /// Its title.
    pub title: String,
    /// Its status.
    pub status: TaskStatus,
    /// What it is doing.
    pub details: Option<String>,
    /// What it found.
    pub output: Option<String>,
    /// Its sources: (url, text).
    pub sources: Vec<(String, String)>,
}

impl Task {
    /// A task `id` titled `title`, at `status`.
    pub fn new(id: impl Into<String>, title: impl Into<String>, status: TaskStatus) -> Self {
        Self {
            id: id.into(),
            title: title.into(),
            status,
            details: None,
            output: None,
            sources: Vec::new(),
        }
    }

    /// With `details` (the whole text: it replaces the task's details).
    pub fn details(mut self, details: impl Into<String>) -> Self {
        self.details = Some(details.into());
        self
    }

    /// With `output` (the whole text).
    pub fn output(mut self, output: impl Into<String>) -> Self {
        self.output = Some(output.into());
        self
    }

    /// With a source: a link and its text.
    pub fn source(mut self, url: impl Into<String>, text: impl Into<String>) -> Self {
        self.sources.push((url.into(), text.into()));
        self
    }

    /// The `task_update` chunk.
    pub(crate) fn chunk(&self) -> Value {
        let mut chunk = json!({"type": "task_update", "id": self.id, "title": self.title,
                               "status": self.status.as_str()});
        if let Some(d) = &self.details {
            chunk["details"] = d.as_str().into();
        }
        if let Some(o) = &self.output {
            chunk["output"] = o.as_str().into();
        }
        if !self.sources.is_empty() {
            chunk["sources"] = self
                .sources
                .iter()
                .map(|(url, text)| json!({"type": "url", "url": url, "text": text}))
                .collect();
        }
        chunk
    }

    /// The task as a `task_card` block (a finished answer's plan).
    pub(crate) fn card(&self) -> Value {
        let mut card = json!({"type": "task_card", "task_id": self.id, "title": self.title,
                              "status": self.status.as_str()});
        let rich = |s: &str| {
            json!({"type": "rich_text", "elements": [{"type": "rich_text_section",
                   "elements": [{"type": "text", "text": s}]}]})
        };
        if let Some(d) = &self.details {
            card["details"] = rich(d);
        }
        if let Some(o) = &self.output {
            card["output"] = rich(o);
        }
        if !self.sources.is_empty() {
            card["sources"] = self
                .sources
                .iter()
                .map(|(url, text)| json!({"type": "url", "url": url, "text": text}))
                .collect();
        }
        card
    }
}

/// How a stream shows its tasks (`task_display_mode` of `chat.startStream`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TaskDisplay {
    /// Each task a card among the streamed text (Slack's default).
    #[default]
    Timeline,
    /// The tasks together in one plan block.
    Plan,
}

impl TaskDisplay {
    /// As Slack names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timeline => "timeline",
            Self::Plan => "plan",
        }
    }
}

/// The agent view (`agents.sessions.*`): a session's status and title, its suggested prompts,
/// and a person's stop. The assistant container's status and title are another Slack API
/// ([`Ctx::set_status`], [`Ctx::set_title`]).
impl Ctx {
    /// `agents.sessions.setStatus`: the session of the thread `thread_ts` in `channel` (a
    /// session channel's when `None`) shows `status`; `title` names a session this call
    /// creates (Slack ignores it for one that exists). A journaled write: a takeover makes
    /// again only the one status whose fate the crashed run left unknown, in its place among
    /// the listener's writes, so a status a crashed run set is never set again after a newer.
    /// `Processing` is not set for a session a person stopped after this request began (the
    /// step is passed: the stop stands).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent, SessionStatus};
    ///
    /// let _app = App::new().assistant_message(|ctx: Ctx, q: MessageEvent| async move {
    ///     let (channel, thread) = (q.channel.as_str(), q.thread());
    ///     ctx.set_session_status(channel, Some(thread), SessionStatus::Processing, Some("Deploys"))
    ///         .await?;
    ///     ctx.reply("Deploys run at 10:00 and 15:00 UTC.").await?;
    ///     ctx.set_session_status(channel, Some(thread), SessionStatus::Active, None).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn set_session_status(
        &self,
        channel: &str,
        thread_ts: Option<&str>,
        status: SessionStatus,
        title: Option<&str>,
    ) -> Result<(), Error> {
        let mut args = json!({"channel_id": channel, "status": status.as_str()});
        if let Some(ts) = thread_ts {
            args["thread_ts"] = ts.into();
        }
        if let Some(title) = title {
            args["title"] = title.into();
        }
        if status == SessionStatus::Processing
            && self.hears_stops()
            && let Some(ts) = thread_ts
            && self.session_stopped(channel, ts).await?
        {
            tracing::info!("the person stopped this session: not setting it processing again");
            return self.pass_step("agents.sessions.setStatus", &args).await;
        }
        self.assistant_call("agents.sessions.setStatus", args).await
    }

    /// `agents.sessions.rename`: the session's title (1–200 characters). A journaled write.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent};
    ///
    /// let _app = App::new().assistant_message(|ctx: Ctx, q: MessageEvent| async move {
    ///     let title: String = q.text.chars().take(60).collect();
    ///     ctx.rename_session(&q.channel, Some(q.thread()), &title).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn rename_session(
        &self,
        channel: &str,
        thread_ts: Option<&str>,
        title: &str,
    ) -> Result<(), Error> {
        let title: String = title.chars().take(200).collect();
        let mut args = json!({"channel_id": channel, "title": title});
        if let Some(ts) = thread_ts {
            args["thread_ts"] = ts.into();
        }
        self.assistant_call("agents.sessions.rename", args).await
    }

    /// The agent view's suggested prompts, at the top of the Messages tab
    /// (`assistant.threads.setSuggestedPrompts` without a thread): (title, message) each, at
    /// most 4. A journaled write.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AssistantThread, Ctx};
    ///
    /// let _app = App::new().assistant_thread_started(|ctx: Ctx, t: AssistantThread| async move {
    ///     if t.agent_view {
    ///         let prompts = [("When are deploys?", "When do deploys run?")];
    ///         ctx.set_agent_prompts(&t.channel_id, Some("Try one of these"), &prompts).await?;
    ///     }
    ///     Ok(())
    /// });
    /// ```
    pub async fn set_agent_prompts(
        &self,
        channel: &str,
        title: Option<&str>,
        prompts: &[(&str, &str)],
    ) -> Result<(), Error> {
        let prompts: Vec<Value> = prompts
            .iter()
            .take(4)
            .map(|(title, message)| json!({"title": title, "message": message}))
            .collect();
        let mut args = json!({"channel_id": channel, "prompts": prompts});
        if let Some(title) = title {
            args["title"] = title.into();
        }
        self.assistant_call("assistant.threads.setSuggestedPrompts", args)
            .await
    }

    /// What the person is looking at (the agent view): as this event carries it
    /// (`app_context_changed`'s `context`, the Messages tab's `app_home_opened`'s, a DM
    /// message's `app_context`), or else as the latest `app_context_changed` of this
    /// conversation (or of this person) left it, for an event or for a click or submission in
    /// the DM (kept beside the claims by an app with an assistant's or agent's listener: a
    /// `GetItem` or two). `None` when Slack sent none.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent};
    ///
    /// let _app = App::new().assistant_message(|ctx: Ctx, q: MessageEvent| async move {
    ///     let here = ctx.app_context().await?;
    ///     let answer = match here.as_ref().and_then(|c| c.channel()) {
    ///         Some(channel) => format!("You are looking at <#{channel}>."),
    ///         None => "Open a channel, then ask me about it.".to_string(),
    ///     };
    ///     ctx.reply(answer).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn app_context(&self) -> Result<Option<AppContext>, Error> {
        // Where to look: the event's own context, else the notes of its DM and its person; a
        // click or a submission in the DM: the notes of its conversation and its person.
        let (channel, user) = match (self.event(), self.interaction()) {
            (Some(callback), _) => {
                let raw = &callback.event.raw;
                let own = match callback.event.kind.as_str() {
                    "app_context_changed" | "app_home_opened" => raw.get("context"),
                    _ => raw.get("app_context"),
                };
                if let Some(own) = own.filter(|c| c.is_object()) {
                    return Ok(Some(AppContext::of(own)));
                }
                (
                    callback.event.channel.clone(),
                    raw["user"].as_str().map(str::to_string),
                )
            }
            (None, Some(interaction)) => {
                (interaction.channel_id.clone(), interaction.user_id.clone())
            }
            (None, None) => return Ok(None),
        };
        let Some(team) = self.team() else {
            return Ok(None);
        };
        // The DM's note, else the person's (a change Slack sent without naming the DM); the
        // app's own (another app's on a shared table is never read).
        let user = user.map(|u| format!("user-{u}"));
        let mut note = None;
        for place in [channel, user].into_iter().flatten() {
            let Some(keys) = crate::keys::agent_context_keys(team, &place, self.app_id()) else {
                continue;
            };
            note = self.app_note(&keys).await?;
            if note.is_some() {
                break;
            }
        }
        let Some(note) = note else {
            return Ok(None);
        };
        let kept: Value = serde_json::from_str(&note).unwrap_or_default();
        let context: Value = kept["value"]
            .as_str()
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or_default();
        Ok(context.is_object().then(|| AppContext::of(&context)))
    }

    /// Whether a person stopped the session of `thread_ts` in `channel` (its stop button:
    /// `agent_session_stopped`, kept beside the claims by an app with an assistant's or
    /// agent's listener) at or after this request began, while none of the app's streams was
    /// active (Slack named none: the stop is then the whole thread's work in progress). A stop
    /// that named streams stops their answers only ([`super::Stream::stopped`]). One
    /// `GetItem` (two while notes of the release before may be read).
    pub async fn session_stopped(&self, channel: &str, thread_ts: &str) -> Result<bool, Error> {
        let Some(since) = self.request_ms() else {
            return Ok(false);
        };
        let stop = self.stop_note(channel, thread_ts).await?;
        Ok(stop.is_some_and(|s| s.stops_work(since)))
    }

    /// Whether a person stopped the answer streamed in `parts` (none yet: not started) in the
    /// thread `thread_ts` of `channel`: a stop that named one of its parts, or one that named
    /// no stream at or after this request began.
    pub(crate) async fn stream_stopped(
        &self,
        channel: &str,
        thread_ts: &str,
        parts: &[&str],
    ) -> Result<bool, Error> {
        let Some(since) = self.request_ms() else {
            return Ok(false);
        };
        let stop = self.stop_note(channel, thread_ts).await?;
        Ok(stop.is_some_and(|s| s.stops(parts, since)))
    }

    /// The stops of the session of `thread_ts` in `channel` this app kept.
    async fn stop_note(
        &self,
        channel: &str,
        thread_ts: &str,
    ) -> Result<Option<crate::keys::StopNote>, Error> {
        let Some(team) = self.team() else {
            return Ok(None);
        };
        let Some(keys) = crate::keys::session_stop_keys(team, channel, thread_ts, self.app_id())
        else {
            return Ok(None);
        };
        let note = self.app_note(&keys).await?;
        Ok(note.as_deref().and_then(crate::keys::StopNote::read))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_reads_every_documented_entity() {
        let raw = json!({"entities": [
            {"type": "slack#/types/channel_id", "value": "C1", "team_id": "T1"},
            {"type": "slack#/types/canvas_id", "value": "F1"},
            {"type": "slack#/types/list_id", "value": "F2"},
            {"type": "slack#/types/message_context",
             "value": {"message_ts": "1.2", "channel_id": "C2"}},
            {"type": "slack#/types/thread_ts", "value": "3.4"},
            {"type": "slack#/types/channel_id"}
        ]});
        let c = AppContext::of(&raw);
        assert_eq!(c.entities.len(), 5, "the entity without a value is skipped");
        assert_eq!(c.channel(), Some("C1"));
        assert_eq!(c.message(), Some(("C2", "1.2")));
        assert_eq!(c.entities[0].team_id.as_deref(), Some("T1"));
        assert!(
            matches!(&c.entities[4].entity, Entity::Other { kind, .. } if kind.ends_with("thread_ts"))
        );
        assert!(AppContext::of(&json!({})).is_empty());
    }

    #[test]
    fn tasks_move_forward_only() {
        use TaskStatus::*;
        assert!(Pending.may_become(InProgress));
        assert!(InProgress.may_become(Complete));
        assert!(Pending.may_become(Error));
        assert!(InProgress.may_become(InProgress));
        assert!(!InProgress.may_become(Pending));
        assert!(!Complete.may_become(InProgress));
        assert!(!Error.may_become(Complete));
    }

    #[test]
    fn the_session_events_read_as_their_types() {
        let stop = json!({"type": "agent_session_stopped", "channel": "D1", "user": "U1",
                          "thread_ts": "1.0", "streaming_message_ts": ["1.5"], "event_ts": "2.0"});
        let s = AgentSessionStopped::of(&stop).unwrap();
        assert_eq!(
            (s.channel.as_str(), s.thread_ts.as_deref()),
            ("D1", Some("1.0"))
        );
        assert_eq!(s.streaming_message_ts, vec!["1.5".to_string()]);
        let renamed = json!({"type": "agent_session_title_changed", "channel": "D1", "user": "U1",
                             "thread_ts": "1.0", "title": "New", "event_ts": "2.0"});
        let r = AgentSessionTitleChanged::of(&renamed).unwrap();
        assert_eq!((r.title.as_str(), r.previous_title), ("New", None));
        let changed = json!({"type": "app_context_changed", "channel": "D1", "user": "U1",
                             "context": {}, "event_ts": "2.0"});
        assert!(AppContextChanged::of(&changed).unwrap().context.is_empty());
        assert!(AgentSessionStopped::of(&changed).is_none());
    }
}
