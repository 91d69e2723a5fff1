//! The bot API: an [`App`] is built from listeners, each a handler registered by event type or,
//! for messages, by a text pattern or a predicate. A handler gets the typed event and a [`Ctx`]
//! whose writes to Slack are each made exactly once per event, however many times the event
//! arrives, is retried, taken over after a crash or redelivered from the queue.
//!
//! ```no_run
//! use slack_once::app::{App, Ctx, MessageEvent};
//!
//! let app = App::new()
//!     .message(r"^deploy (\S+)$", |ctx: Ctx, msg: MessageEvent| async move {
//!         let service = msg.capture(1).unwrap_or_default().to_string();
//!         ctx.react_to_event("eyes").await?;
//!         ctx.reply(format!("Deploying {service}…")).await?;
//!         Ok(())
//!     });
//! ```
//!
//! Events that no listener takes are acknowledged and never claimed. A message (carried by a
//! `message` event, by an `app_mention`, or by both) is heard **as the message**, not as the
//! event that happens to carry it: every listener that takes the message in any of its forms
//! runs, once, under one claim keyed by the message's identity (team, channel and `ts`, and its
//! `client_msg_id` when it has one), whichever of its events arrives first and however many
//! copies follow. An `app_mention` listener takes a message that mentions the bot, whether
//! Slack delivers it as an `app_mention` or only as a `message` event. A listener opts out with
//! [`Listener::per_event_id`]: it then runs once per event, under a claim of its own, without
//! changing how the others are keyed. Messages of other bots and of workflows are heard only by
//! listeners built with [`Listener::including_bots`]; the bot's own messages never are.
#![warn(missing_docs)]

pub(crate) mod agent;
pub mod blocks;
mod context;
pub(crate) mod events;
pub mod function;
mod interactive;
pub mod manifest;
mod message;
mod state;
mod stream;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use regex::Regex;

pub use crate::journal::{Error, Settle, Tally};
pub use crate::slack::interaction::{
    BlockAction, Command, OptionsRequest, Shortcut, ViewSubmission, ViewValues,
};
pub use agent::{
    AgentSessionStopped, AgentSessionTitleChanged, AppContext, AppContextChanged, ContextEntity,
    Entity, Feedback, SessionStatus, Task, TaskDisplay, TaskStatus, feedback_buttons,
};
pub use context::{Ctx, Posted, Respond};
pub use events::{
    AppHomeOpened, AppMention, AssistantThread, Channel, ChannelCreated, MemberJoinedChannel,
    MessageEvent, Reaction, ReactionItem, TeamJoin, User,
};
pub use interactive::{Ack, InteractiveListener, Selector};
pub use message::{Message, safe_text};
#[cfg_attr(not(feature = "explore"), allow(unused_imports))]
pub(crate) use state::state_key;
pub use state::{Changed, Put, State, Versioned};
pub use stream::{Stream, StreamOptions};

use crate::slack::envelope::{Event, EventCallback};
use events::{Typed, typed};

pub(crate) use crate::journal::Steps;
pub(crate) use context::{AckMode, Source};

/// What a handler may fail with: any error (`?` works on anything); a failed step's [`Error`]
/// is recognised, so that Slack's permanent errors end the event `failed` and transient ones
/// release it for a retry.
pub type BotError = Box<dyn std::error::Error + Send + Sync>;
/// What a handler returns: `Ok(())`, or any error (see `BotError`).
pub type HandlerResult = Result<(), BotError>;

type BoxFuture = Pin<Box<dyn Future<Output = HandlerResult> + Send>>;
/// A listener's work for one event, ready to run with its context.
pub(crate) type Prepared = Box<dyn FnOnce(Ctx) -> BoxFuture + Send>;
type Take = Box<dyn Fn(&Heard<'_>) -> Option<Prepared> + Send + Sync>;

/// What listeners are offered: the event, and when it carries a message, the message as every
/// listener hears it whichever event carried it.
pub(crate) struct Heard<'a> {
    pub callback: &'a Arc<EventCallback>,
    pub message: Option<&'a MessageEvent>,
}

/// One handler and what it listens to.
pub struct Listener {
    name: String,
    per_event_id: bool,
    including_bots: bool,
    take: Take,
    /// The events it is for, as the manifest subscribes them (`message`: any message).
    events: Vec<String>,
    /// It hears the changes of messages ([`Listener::message_changes`]).
    hears_changes: bool,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("name", &self.name)
            .field("per_event_id", &self.per_event_id)
            .field("including_bots", &self.including_bots)
            .finish()
    }
}

fn prepared<E, F, Fut>(handler: Arc<F>, event: E) -> Prepared
where
    E: Send + 'static,
    F: Fn(Ctx, E) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    Box::new(move |ctx| Box::pin(handler(ctx, event)))
}

impl Listener {
    fn new(name: impl Into<String>, take: Take) -> Self {
        Self {
            name: name.into(),
            per_event_id: false,
            including_bots: false,
            take,
            events: Vec::new(),
            hears_changes: false,
        }
    }

    fn for_events(mut self, events: &[&str]) -> Self {
        self.events = events.iter().map(|e| e.to_string()).collect();
        self
    }

    fn typed<E, F, Fut>(kind: &'static str, handler: F) -> Self
    where
        E: Typed + Send + 'static,
        F: Fn(Ctx, E) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        Self::new(
            kind,
            Box::new(move |heard| {
                let cb = heard.callback;
                if cb.event.kind != kind {
                    return None;
                }
                let event: E = typed(&cb.event.raw)?;
                Some(prepared(handler.clone(), event))
            }),
        )
        .for_events(&[kind])
    }

    /// Any event of type `kind`, untyped ([`Event`], with the whole event as `raw`). For
    /// `message` and `app_mention` it takes the message as the typed listeners do (any message
    /// from a person; one that mentions the bot), with the event that carried it.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, Listener};
    /// use slack_once::slack::envelope::Event;
    ///
    /// // `emoji_changed` has no typed listener: its fields are in `raw`.
    /// let new_emoji = Listener::event("emoji_changed", |ctx: Ctx, e: Event| async move {
    ///     if let (Some("add"), Some(name)) = (e.subtype.as_deref(), e.raw["name"].as_str()) {
    ///         ctx.post("C0123EMOJI", format!("New emoji: :{name}:")).await?;
    ///     }
    ///     Ok(())
    /// });
    /// let _app = App::new().listen(new_emoji);
    /// ```
    pub fn event<F, Fut>(kind: &str, handler: F) -> Self
    where
        F: Fn(Ctx, Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let kind = kind.to_string();
        let subscribed = kind.clone();
        Self::new(
            kind.clone(),
            Box::new(move |heard| {
                let takes = match (kind.as_str(), heard.message) {
                    ("message", Some(_)) => true,
                    ("app_mention", Some(m)) => m.mention,
                    _ => heard.callback.event.kind == kind,
                };
                takes.then(|| prepared(handler.clone(), heard.callback.event.clone()))
            }),
        )
        .for_events(&[subscribed.as_str()])
    }

    /// Every event (after the bot's own are skipped), untyped: a catch-all, for logging or for
    /// event types without a typed listener. A message is taken once, whichever of its events
    /// carries it.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, Listener};
    /// use slack_once::slack::envelope::Event;
    ///
    /// let audit = Listener::any_event(|ctx: Ctx, e: Event| async move {
    ///     let channel = e.channel.as_deref().unwrap_or("-");
    ///     tracing::info!(kind = %e.kind, channel, team = ctx.team(), "event");
    ///     Ok(())
    /// });
    /// let _app = App::new().listen(audit.including_bots());
    /// ```
    pub fn any_event<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        Self::new(
            "any event",
            Box::new(move |heard| Some(prepared(handler.clone(), heard.callback.event.clone()))),
        )
        .for_events(&[])
    }

    /// Every event of type `kind` exactly, other bots' included, untyped: one listener per
    /// event type, so that the several events of one message (a `message` and an
    /// `app_mention`) each run once. What the gateway forwards.
    pub(crate) fn of_type<F, Fut>(kind: &str, handler: F) -> Self
    where
        F: Fn(Ctx, Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let wanted = kind.to_string();
        let mut listener = Self::new(
            kind,
            Box::new(move |heard| {
                let event = &heard.callback.event;
                (event.kind == wanted && !event.changes_a_message())
                    .then(|| prepared(handler.clone(), event.clone()))
            }),
        )
        .for_events(&[kind]);
        listener.including_bots = true;
        listener
    }

    /// Every change of a message (`message_changed`, `message_deleted`, any `message` event of
    /// a subtype that is not a new message), each event claimed by its own id: what the gateway
    /// forwards, its bot deciding what it listens to.
    pub(crate) fn message_changes<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let mut listener = Self::new(
            "message changes",
            Box::new(move |heard| {
                let event = &heard.callback.event;
                event
                    .changes_a_message()
                    .then(|| prepared(handler.clone(), event.clone()))
            }),
        )
        .for_events(&["message"]);
        listener.including_bots = true;
        listener.per_event_id = true;
        listener.hears_changes = true;
        listener
    }

    /// Every event whose type is not one of `kinds`, other bots' included, untyped.
    pub(crate) fn of_types_other_than<F, Fut>(kinds: &[&str], handler: F) -> Self
    where
        F: Fn(Ctx, Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let others: Vec<String> = kinds.iter().map(|k| k.to_string()).collect();
        let mut listener = Self::new(
            "other events",
            Box::new(move |heard| {
                (!others.contains(&heard.callback.event.kind))
                    .then(|| prepared(handler.clone(), heard.callback.event.clone()))
            }),
        );
        listener.including_bots = true;
        listener
    }

    /// A message that mentions the bot: an `app_mention`, or a `message` event whose text
    /// mentions the bot user (Slack sends both for one message when the app subscribes to
    /// both; either one runs this listener, once).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AppMention, Ctx, Listener};
    ///
    /// let help = Listener::app_mention(|ctx: Ctx, m: AppMention| async move {
    ///     let user = m.user.as_deref().unwrap_or("there");
    ///     ctx.reply(format!("Hi <@{user}>! Say `deploy <service>` to ship.")).await?;
    ///     Ok(())
    /// });
    /// let _app = App::new().listen(help);
    /// ```
    pub fn app_mention<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, AppMention) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        Self::new(
            "app_mention",
            Box::new(move |heard| {
                let m = heard.message.filter(|m| m.mention)?;
                Some(prepared(handler.clone(), AppMention::from_message(m)))
            }),
        )
        .for_events(&["app_mention"])
    }

    /// Messages from people (see [`MessageEvent`]: `app_mention`s too) whose text matches
    /// `pattern` (a regular expression; an app_mention's text is matched without its leading
    /// mention of the bot). The captures are in [`MessageEvent::captures`].
    ///
    /// Panics if `pattern` is not a valid regular expression: it is checked when the app is
    /// built, not when a message arrives.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, HandlerResult, Listener, MessageEvent};
    ///
    /// async fn rocket(ctx: Ctx, m: MessageEvent) -> HandlerResult {
    ///     ctx.react(&m.channel, &m.ts, "rocket").await?;
    ///     Ok(())
    /// }
    ///
    /// let _app = App::new().listen(Listener::message(r"(?i)\bship(ped|ping)?\b", rocket));
    /// ```
    pub fn message<F, Fut>(pattern: &str, handler: F) -> Self
    where
        F: Fn(Ctx, MessageEvent) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let regex = Regex::new(pattern)
            .unwrap_or_else(|e| panic!("the listener's pattern {pattern:?} is not valid: {e}"));
        let handler = Arc::new(handler);
        Self::new(
            format!("message {pattern:?}"),
            Box::new(move |heard| {
                let mut m = heard.message?.clone();
                let captures = regex.captures(&m.text)?;
                m.captures = captures
                    .iter()
                    .map(|c| c.map(|c| c.as_str().to_string()))
                    .collect();
                Some(prepared(handler.clone(), m))
            }),
        )
        .for_events(&["message"])
    }

    /// Messages from people (see [`MessageEvent`]) for which `predicate` holds.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, Listener, MessageEvent};
    ///
    /// // Replies in threads (not the threads' parents).
    /// let replies = Listener::message_where(
    ///     |m: &MessageEvent| m.thread_ts.as_deref().is_some_and(|t| t != m.ts),
    ///     |ctx: Ctx, m: MessageEvent| async move {
    ///         ctx.react(&m.channel, &m.ts, "speech_balloon").await?;
    ///         Ok(())
    ///     },
    /// );
    /// let _app = App::new().listen(replies);
    /// ```
    pub fn message_where<P, F, Fut>(predicate: P, handler: F) -> Self
    where
        P: Fn(&MessageEvent) -> bool + Send + Sync + 'static,
        F: Fn(Ctx, MessageEvent) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        Self::new(
            "message",
            Box::new(move |heard| {
                let m = heard.message?;
                predicate(m).then(|| prepared(handler.clone(), m.clone()))
            }),
        )
        .for_events(&["message"])
    }

    /// A reaction added to a message or a file (`reaction_added`).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, Listener, Reaction};
    ///
    /// let heart = Listener::reaction_added(|ctx: Ctx, r: Reaction| async move {
    ///     let (Some(channel), Some(ts)) = (&r.item.channel, &r.item.ts) else {
    ///         return Ok(()); // a reaction to a file
    ///     };
    ///     if r.reaction == "pray" {
    ///         ctx.react(channel, ts, "heart").await?;
    ///     }
    ///     Ok(())
    /// });
    /// let _app = App::new().listen(heart);
    /// ```
    pub fn reaction_added<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, Reaction) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Self::typed("reaction_added", handler)
    }

    /// A reaction removed from a message or a file (`reaction_removed`).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, Listener, Reaction};
    ///
    /// let unheart = Listener::reaction_removed(|ctx: Ctx, r: Reaction| async move {
    ///     let (Some(channel), Some(ts)) = (&r.item.channel, &r.item.ts) else {
    ///         return Ok(());
    ///     };
    ///     if r.reaction == "pray" {
    ///         ctx.unreact(channel, ts, "heart").await?;
    ///     }
    ///     Ok(())
    /// });
    /// let _app = App::new().listen(unheart);
    /// ```
    pub fn reaction_removed<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, Reaction) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Self::typed("reaction_removed", handler)
    }

    /// Someone joined a conversation, the bot included (`member_joined_channel`).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, Listener, MemberJoinedChannel};
    ///
    /// let thanks = Listener::member_joined_channel(|ctx: Ctx, j: MemberJoinedChannel| async move {
    ///     if let (Some(channel), Some(inviter)) = (&j.channel, &j.inviter) {
    ///         ctx.post_ephemeral(channel, inviter, "Thanks for bringing them in!").await?;
    ///     }
    ///     Ok(())
    /// });
    /// let _app = App::new().listen(thanks);
    /// ```
    pub fn member_joined_channel<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, MemberJoinedChannel) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Self::typed("member_joined_channel", handler)
    }

    /// Someone opened one of the app's tabs (`app_home_opened`).
    ///
    /// # Example
    ///
    /// ```
    /// use serde_json::json;
    /// use slack_once::app::{App, AppHomeOpened, Ctx, Listener, Settle, blocks};
    ///
    /// let home = Listener::app_home_opened(|ctx: Ctx, open: AppHomeOpened| async move {
    ///     let (Some(user), Some("home")) = (&open.user, open.tab.as_deref()) else {
    ///         return Ok(());
    ///     };
    ///     let view = json!({"type": "home", "blocks": [blocks::header("Your deploys")]});
    ///     let args = json!({"user_id": user, "view": view});
    ///     ctx.call("views.publish", args, Settle::Idempotent).await?;
    ///     Ok(())
    /// });
    /// let _app = App::new().listen(home);
    /// ```
    pub fn app_home_opened<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, AppHomeOpened) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Self::typed("app_home_opened", handler)
    }

    /// A new member joined the workspace (`team_join`).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, Listener, TeamJoin};
    ///
    /// let introduce = Listener::team_join(|ctx: Ctx, join: TeamJoin| async move {
    ///     if !join.user.is_bot {
    ///         let hello = format!("Please welcome <@{}> :wave:", join.user.id);
    ///         ctx.post("C0INTROS01", hello).await?;
    ///     }
    ///     Ok(())
    /// });
    /// let _app = App::new().listen(introduce);
    /// ```
    pub fn team_join<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, TeamJoin) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Self::typed("team_join", handler)
    }

    /// An assistant thread started: `assistant_thread_started`, or the agent view's
    /// `app_home_opened` with `tab: "messages"`. Claimed once per thread (its channel and
    /// `thread_ts`), whichever events carry it; an agent view's opening once per event.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AssistantThread, Ctx, Listener};
    ///
    /// // Through `App::listen` the threads' contexts are not kept (`App::assistant_thread_started`
    /// // keeps them, for `Ctx::thread_context`).
    /// let started = Listener::assistant_thread_started(|ctx: Ctx, t: AssistantThread| async move {
    ///     if let Some(ts) = t.thread_ts.as_deref() {
    ///         ctx.set_title(&t.channel_id, ts, "New conversation").await?;
    ///     }
    ///     Ok(())
    /// });
    /// let _app = App::new().listen(started);
    /// ```
    pub fn assistant_thread_started<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, AssistantThread) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        Self::new(
            "assistant_thread_started",
            Box::new(move |heard| {
                let event = &heard.callback.event;
                if event.kind == "assistant_thread_context_changed" {
                    return None;
                }
                let thread = AssistantThread::of(&event.kind, &event.raw)?;
                Some(prepared(handler.clone(), thread))
            }),
        )
        .for_events(&["assistant_thread_started"])
    }

    /// The user switched the channel they are looking at (`assistant_thread_context_changed`).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AssistantThread, Ctx, Listener};
    ///
    /// let moved = Listener::assistant_thread_context_changed(
    ///     |_ctx: Ctx, t: AssistantThread| async move {
    ///         tracing::info!(thread = t.thread_ts.as_deref(), context = ?t.context, "moved");
    ///         Ok(())
    ///     },
    /// );
    /// let _app = App::new().listen(moved);
    /// ```
    pub fn assistant_thread_context_changed<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, AssistantThread) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        Self::new(
            "assistant_thread_context_changed",
            Box::new(move |heard| {
                let event = &heard.callback.event;
                if event.kind != "assistant_thread_context_changed" {
                    return None;
                }
                let thread = AssistantThread::of(&event.kind, &event.raw)?;
                Some(prepared(handler.clone(), thread))
            }),
        )
        .for_events(&["assistant_thread_context_changed"])
    }

    /// An event read by `parse` (the agent view's events), claimed once per event.
    fn parsed<E, F, Fut>(
        kind: &'static str,
        parse: fn(&serde_json::Value) -> Option<E>,
        handler: F,
    ) -> Self
    where
        E: Send + 'static,
        F: Fn(Ctx, E) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        Self::new(
            kind,
            Box::new(move |heard| {
                let event = &heard.callback.event;
                if event.kind != kind {
                    return None;
                }
                Some(prepared(handler.clone(), parse(&event.raw)?))
            }),
        )
        .for_events(&[kind])
    }

    /// The agent view: what the person looks at changed (`app_context_changed`). Through
    /// `App::listen` the conversations' contexts are not kept ([`App::app_context_changed`]
    /// keeps them, for [`Ctx::app_context`]).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AppContextChanged, Ctx, Listener};
    ///
    /// let moved = Listener::app_context_changed(|_ctx: Ctx, c: AppContextChanged| async move {
    ///     tracing::info!(channel = c.context.channel(), "the person looks elsewhere");
    ///     Ok(())
    /// });
    /// let _app = App::new().listen(moved);
    /// ```
    pub fn app_context_changed<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, AppContextChanged) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Self::parsed("app_context_changed", AppContextChanged::of, handler)
    }

    /// A person pressed an agent session's stop button (`agent_session_stopped`).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{AgentSessionStopped, App, Ctx, Listener, SessionStatus};
    ///
    /// let stop = Listener::agent_session_stopped(|ctx: Ctx, s: AgentSessionStopped| async move {
    ///     let status = SessionStatus::Active;
    ///     ctx.set_session_status(&s.channel, s.thread_ts.as_deref(), status, None).await?;
    ///     Ok(())
    /// });
    /// let _app = App::new().listen(stop);
    /// ```
    pub fn agent_session_stopped<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, AgentSessionStopped) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Self::parsed("agent_session_stopped", AgentSessionStopped::of, handler)
    }

    /// A person renamed an agent session (`agent_session_title_changed`).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{AgentSessionTitleChanged, App, Ctx, Listener};
    ///
    /// let renamed =
    ///     Listener::agent_session_title_changed(|_ctx: Ctx, t: AgentSessionTitleChanged| async move {
    ///         tracing::info!(title = t.title, "renamed");
    ///         Ok(())
    ///     });
    /// let _app = App::new().listen(renamed);
    /// ```
    pub fn agent_session_title_changed<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, AgentSessionTitleChanged) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Self::parsed(
            "agent_session_title_changed",
            AgentSessionTitleChanged::of,
            handler,
        )
    }

    /// A channel was created (`channel_created`).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, ChannelCreated, Ctx, Listener};
    ///
    /// let announce = Listener::channel_created(|ctx: Ctx, c: ChannelCreated| async move {
    ///     ctx.post("C0CHANLOG1", format!("New channel: <#{}>", c.channel.id)).await?;
    ///     Ok(())
    /// });
    /// let _app = App::new().listen(announce);
    /// ```
    pub fn channel_created<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, ChannelCreated) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Self::typed("channel_created", handler)
    }

    /// A Workflow Builder step of the app (`function_executed` for `function`'s callback id):
    /// the handler gets the execution, its inputs deserialised into the author's type `I`
    /// ([`serde_json::Value`] for them untyped). Inputs that are not an `I` end the execution
    /// with an error (`functions.completeError`, once), and the handler is not called. Every
    /// Slack call of the handler goes with the execution's own token. See
    /// [`App::function`].
    pub fn function<I, F, Fut>(function: impl Into<function::Function>, handler: F) -> Self
    where
        I: serde::de::DeserializeOwned + Send + 'static,
        F: Fn(Ctx, function::Execution<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let function = function.into();
        let callback_id = function.callback_id().to_string();
        let handler = Arc::new(handler);
        Self::new(
            format!("function {callback_id:?}"),
            Box::new(move |heard| {
                let event = &heard.callback.event;
                if event.kind != "function_executed"
                    || event.raw["function"]["callback_id"].as_str() != Some(callback_id.as_str())
                {
                    return None;
                }
                Some(match function::execution_of::<I>(&event.raw) {
                    Ok(execution) => prepared(handler.clone(), execution),
                    Err(reason) => Box::new(move |ctx: Ctx| {
                        Box::pin(async move {
                            tracing::warn!(%reason, "the step's inputs are not what its listener reads: failing the step");
                            ctx.fail(reason).await?;
                            Ok(())
                        }) as BoxFuture
                    }),
                })
            }),
        )
        .for_events(&["function_executed"])
    }

    /// Claims the events this listener takes by their `event_id` alone, not by the identity
    /// of the message they carry: every event of one message then runs it, each once, under a
    /// claim of its own (the other listeners of the message keep theirs).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AppMention, Ctx, Listener};
    ///
    /// // A line per delivery: the mention's `app_mention` and its `message` event each log one.
    /// let log = Listener::app_mention(|ctx: Ctx, m: AppMention| async move {
    ///     tracing::info!(event_id = ctx.event_id(), ts = %m.ts, "mention delivered");
    ///     Ok(())
    /// });
    /// let _app = App::new().listen(log.per_event_id());
    /// ```
    pub fn per_event_id(mut self) -> Self {
        self.per_event_id = true;
        self
    }

    /// Also hears messages of other bots and of workflows (never the bot's own). Mind loops:
    /// two bots that answer each other's messages answer forever.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, Listener, MessageEvent};
    ///
    /// // The monitoring bot's alerts get a thread for the on-call's notes.
    /// let alerts = Listener::message(r"^\[ALERT\]", |ctx: Ctx, m: MessageEvent| async move {
    ///     if m.is_from_bot() {
    ///         ctx.reply("On-call: notes in this thread, please.").await?;
    ///     }
    ///     Ok(())
    /// });
    /// let _app = App::new().listen(alerts.including_bots());
    /// ```
    pub fn including_bots(mut self) -> Self {
        self.including_bots = true;
        self
    }
}

/// A listener's id: a short hash of its name, and its place among the listeners of that name.
fn listener_id(name: &str, nth: usize) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(name.as_bytes());
    format!("{}.{nth}", hex::encode(&digest[..3]))
}

/// The message a `message` or `app_mention` event carries, as every listener hears it whichever
/// of the two carried it: `mention` when it mentions the bot, the text without the leading
/// mention of the bot, and `channel_type` filled in for a DM when the event leaves it out.
pub(crate) fn message_view(cb: &EventCallback) -> Option<MessageEvent> {
    let event = &cb.event;
    let carried_as_mention = match event.kind.as_str() {
        "app_mention" => true,
        "message" => false,
        _ => return None,
    };
    let mut m: MessageEvent = typed(&event.raw)?;
    let tag = cb.bot_user_id().map(|bot| format!("<@{bot}>"));
    m.mention = carried_as_mention || tag.as_ref().is_some_and(|t| m.text.contains(t.as_str()));
    // The text without the leading mention of the bot: "<@U123> deploy api" → "deploy api".
    if let Some(tag) = &tag
        && let Some(rest) = m.text.trim_start().strip_prefix(tag.as_str())
    {
        m.text = rest.trim_start().to_string();
    }
    if m.channel_type.is_none() && m.channel.starts_with('D') {
        m.channel_type = Some("im".into());
    }
    Some(m)
}

/// An application: its listeners, in the order they were registered.
#[derive(Default)]
pub struct App {
    listeners: Vec<Listener>,
    interactive: Vec<InteractiveListener>,
    /// An assistant listens: the threads' contexts are kept ([`Ctx::thread_context`]).
    assistant: bool,
    /// A listener hears the stop button (`agent_session_stopped`), however it was registered.
    stops: bool,
    /// A listener hears the changes of messages (`message_changed`, `message_deleted`…), which
    /// are otherwise acknowledged unanswered (the gateway's bot decides what it listens to).
    message_changes: bool,
    /// The Workflow Builder steps registered ([`App::function`]), in order.
    functions: Arc<Vec<function::Function>>,
    /// What the author says of the app for its manifest ([`App::with_manifest`]).
    described: Option<manifest::Manifest>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("listeners", &self.listeners)
            .field("interactive", &self.interactive)
            .finish()
    }
}

/// How the writes of a group of listeners are claimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Identity {
    /// By the identity of the message the event carries.
    Message,
    /// By the event's `event_id`.
    Event,
}

/// One listener's work for one event: its id (stable across restarts: its name and how many
/// listeners of that name come before it), its name, and the work.
pub(crate) struct Run {
    pub id: String,
    pub name: String,
    pub work: Prepared,
}

/// Listeners that run under one claim, in registration order.
pub(crate) struct Unit {
    pub identity: Identity,
    pub runs: Vec<Run>,
}

/// The listeners that take one event, grouped by the claim they run under: at most one group
/// keyed by the message the event carries, and one keyed by the event.
pub(crate) struct Route {
    pub units: Vec<Unit>,
}

impl Route {
    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }
}

impl App {
    /// An app without listeners.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a listener (for one built with options, such as [`Listener::per_event_id`]).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, HandlerResult, Listener, MessageEvent, safe_text};
    ///
    /// async fn echo(ctx: Ctx, m: MessageEvent) -> HandlerResult {
    ///     ctx.reply(format!("Heard: {}", safe_text(&m.text))).await?;
    ///     Ok(())
    /// }
    ///
    /// let _app = App::new().listen(Listener::message(r"^echo ", echo).including_bots());
    /// ```
    pub fn listen(mut self, listener: Listener) -> Self {
        self.stops |= listener.events.iter().any(|e| e == "agent_session_stopped");
        self.message_changes |= listener.hears_changes;
        self.listeners.push(listener);
        self
    }

    /// See [`Listener::event`].
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx};
    /// use slack_once::slack::envelope::Event;
    ///
    /// let _app = App::new().event("pin_added", |ctx: Ctx, e: Event| async move {
    ///     let channel = e.raw["channel_id"].as_str();
    ///     if let (Some(channel), Some(user)) = (channel, e.user.as_deref()) {
    ///         ctx.post(channel, format!("<@{user}> pinned a message :pushpin:")).await?;
    ///     }
    ///     Ok(())
    /// });
    /// ```
    pub fn event<F, Fut>(self, kind: &str, handler: F) -> Self
    where
        F: Fn(Ctx, Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::event(kind, handler))
    }

    /// See [`Listener::any_event`].
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx};
    /// use slack_once::slack::envelope::Event;
    ///
    /// let _app = App::new().any_event(|ctx: Ctx, e: Event| async move {
    ///     tracing::info!(kind = %e.kind, event_id = ctx.event_id(), "heard");
    ///     Ok(())
    /// });
    /// ```
    pub fn any_event<F, Fut>(self, handler: F) -> Self
    where
        F: Fn(Ctx, Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::any_event(handler))
    }

    /// See `Listener::app_mention`.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AppMention, Ctx, Message, blocks};
    ///
    /// let _app = App::new().app_mention(|ctx: Ctx, m: AppMention| async move {
    ///     let user = m.user.as_deref().unwrap_or("there");
    ///     let section = blocks::section(format!("On it, <@{user}> :runner:"));
    ///     ctx.reply(Message::text("On it.").blocks([section])).await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn app_mention<F, Fut>(self, handler: F) -> Self
    where
        F: Fn(Ctx, AppMention) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::app_mention(handler))
    }

    /// See [`Listener::message`].
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent};
    ///
    /// let _app = App::new()
    ///     .message(r"(?i)^status ([a-z0-9-]+)$", |ctx: Ctx, m: MessageEvent| async move {
    ///         let service = m.capture(1).unwrap_or_default();
    ///         ctx.say(format!("{service} is up :large_green_circle:")).await?;
    ///         Ok(())
    ///     });
    /// ```
    pub fn message<F, Fut>(self, pattern: &str, handler: F) -> Self
    where
        F: Fn(Ctx, MessageEvent) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::message(pattern, handler))
    }

    /// See [`Listener::message_where`].
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent};
    ///
    /// let _app = App::new().message_where(
    ///     |m: &MessageEvent| m.is_dm() && !m.files.is_empty(),
    ///     |ctx: Ctx, m: MessageEvent| async move {
    ///         ctx.reply(format!("Got {} file(s): filing them.", m.files.len())).await?;
    ///         Ok(())
    ///     },
    /// );
    /// ```
    pub fn message_where<P, F, Fut>(self, predicate: P, handler: F) -> Self
    where
        P: Fn(&MessageEvent) -> bool + Send + Sync + 'static,
        F: Fn(Ctx, MessageEvent) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::message_where(predicate, handler))
    }

    /// See `Listener::reaction_added`.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, Message, Reaction};
    ///
    /// let _app = App::new().reaction_added(|ctx: Ctx, r: Reaction| async move {
    ///     let (Some(channel), Some(ts)) = (&r.item.channel, &r.item.ts) else {
    ///         return Ok(());
    ///     };
    ///     if r.reaction == "white_check_mark" {
    ///         ctx.post(channel, Message::text("Marked done :tada:").in_thread(ts)).await?;
    ///     }
    ///     Ok(())
    /// });
    /// ```
    pub fn reaction_added<F, Fut>(self, handler: F) -> Self
    where
        F: Fn(Ctx, Reaction) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::reaction_added(handler))
    }

    /// See `Listener::reaction_removed`.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, Message, Reaction};
    ///
    /// let _app = App::new().reaction_removed(|ctx: Ctx, r: Reaction| async move {
    ///     let (Some(channel), Some(ts)) = (&r.item.channel, &r.item.ts) else {
    ///         return Ok(());
    ///     };
    ///     if r.reaction == "white_check_mark" {
    ///         ctx.post(channel, Message::text("Reopened :repeat:").in_thread(ts)).await?;
    ///     }
    ///     Ok(())
    /// });
    /// ```
    pub fn reaction_removed<F, Fut>(self, handler: F) -> Self
    where
        F: Fn(Ctx, Reaction) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::reaction_removed(handler))
    }

    /// See `Listener::member_joined_channel`.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MemberJoinedChannel};
    ///
    /// let _app = App::new()
    ///     .member_joined_channel(|ctx: Ctx, j: MemberJoinedChannel| async move {
    ///         let (Some(user), Some(channel)) = (&j.user, &j.channel) else {
    ///             return Ok(());
    ///         };
    ///         let rules = "Welcome! Please read the pinned message before posting.";
    ///         ctx.post_ephemeral(channel, user, rules).await?;
    ///         Ok(())
    ///     });
    /// ```
    pub fn member_joined_channel<F, Fut>(self, handler: F) -> Self
    where
        F: Fn(Ctx, MemberJoinedChannel) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::member_joined_channel(handler))
    }

    /// See `Listener::app_home_opened`.
    ///
    /// # Example
    ///
    /// ```
    /// use serde_json::json;
    /// use slack_once::app::{App, AppHomeOpened, Ctx, Settle, blocks};
    ///
    /// let _app = App::new().app_home_opened(|ctx: Ctx, open: AppHomeOpened| async move {
    ///     let (Some(user), Some("home")) = (&open.user, open.tab.as_deref()) else {
    ///         return Ok(());
    ///     };
    ///     let hello = blocks::section(format!("Hi <@{user}> :wave: Mention me in any channel."));
    ///     let args = json!({"user_id": user, "view": {"type": "home", "blocks": [hello]}});
    ///     ctx.call("views.publish", args, Settle::Idempotent).await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn app_home_opened<F, Fut>(self, handler: F) -> Self
    where
        F: Fn(Ctx, AppHomeOpened) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::app_home_opened(handler))
    }

    /// See `Listener::team_join`.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, TeamJoin};
    ///
    /// let _app = App::new().team_join(|ctx: Ctx, join: TeamJoin| async move {
    ///     if join.user.is_bot {
    ///         return Ok(());
    ///     }
    ///     let dm = ctx.open_conversation(&[join.user.id.as_str()]).await?;
    ///     ctx.post(&dm, "Welcome aboard! Say *help* in any channel I am in.").await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn team_join<F, Fut>(self, handler: F) -> Self
    where
        F: Fn(Ctx, TeamJoin) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::team_join(handler))
    }

    /// See [`Listener::assistant_thread_started`].
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AssistantThread, Ctx, Message};
    ///
    /// let _app = App::new().assistant_thread_started(|ctx: Ctx, t: AssistantThread| async move {
    ///     let Some(ts) = t.thread_ts.as_deref() else {
    ///         return Ok(()); // the agent view: no thread until the user writes
    ///     };
    ///     let hello = Message::text("Hi! What can I help with?").in_thread(ts);
    ///     ctx.post(&t.channel_id, hello).await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn assistant_thread_started<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Ctx, AssistantThread) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.assistant = true;
        self.listen(Listener::assistant_thread_started(handler))
    }

    /// See [`Listener::assistant_thread_context_changed`].
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AssistantThread, Ctx};
    ///
    /// let _app = App::new()
    ///     .assistant_thread_context_changed(|ctx: Ctx, t: AssistantThread| async move {
    ///         let here = t.context.as_ref().and_then(|c| c["channel_id"].as_str());
    ///         let (Some(channel), Some(ts)) = (here, t.thread_ts.as_deref()) else {
    ///             return Ok(());
    ///         };
    ///         let ask = format!("Summarise <#{channel}>");
    ///         let prompts = [("Summarise this channel", ask.as_str())];
    ///         ctx.set_suggested_prompts(&t.channel_id, ts, None, &prompts).await?;
    ///         Ok(())
    ///     });
    /// ```
    pub fn assistant_thread_context_changed<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Ctx, AssistantThread) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.assistant = true;
        self.listen(Listener::assistant_thread_context_changed(handler))
    }

    /// A person's message to the assistant: any direct message from a person (in an assistant
    /// thread or the agent view's DM), as [`App::message_where`] with [`MessageEvent::is_dm`].
    /// Answer in its thread ([`MessageEvent::thread`]).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent, safe_text};
    ///
    /// let _app = App::new().assistant_message(|ctx: Ctx, q: MessageEvent| async move {
    ///     ctx.set_status(&q.channel, q.thread(), "is thinking…", &[]).await?;
    ///     ctx.reply(format!("You asked: {}", safe_text(&q.text))).await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn assistant_message<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Ctx, MessageEvent) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.assistant = true;
        self.message_where(|m: &MessageEvent| m.is_dm() && !m.is_from_bot(), handler)
    }

    /// See [`Listener::app_context_changed`]; the conversations' latest contexts are kept
    /// beside the claims for [`Ctx::app_context`] (one `PutItem` per change, an older change
    /// never replacing a newer).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AppContextChanged, Ctx};
    ///
    /// let _app = App::new().app_context_changed(|_ctx: Ctx, c: AppContextChanged| async move {
    ///     tracing::info!(entities = c.context.entities.len(), "context changed");
    ///     Ok(())
    /// });
    /// ```
    pub fn app_context_changed<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Ctx, AppContextChanged) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.assistant = true;
        self.listen(Listener::app_context_changed(handler))
    }

    /// See [`Listener::agent_session_stopped`]. The stop is also kept beside the claims
    /// (before the listener runs), so that an answer's stream begun before it, on any
    /// instance, writes nothing more ([`crate::app::Stream`]), and
    /// [`Ctx::set_session_status`] does not set the session processing again.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{AgentSessionStopped, App, Ctx, SessionStatus};
    ///
    /// let _app = App::new().agent_session_stopped(|ctx: Ctx, s: AgentSessionStopped| async move {
    ///     let status = SessionStatus::Active; // Slack leaves the status to the app
    ///     ctx.set_session_status(&s.channel, s.thread_ts.as_deref(), status, None).await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn agent_session_stopped<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Ctx, AgentSessionStopped) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.assistant = true;
        self.listen(Listener::agent_session_stopped(handler))
    }

    /// See [`Listener::agent_session_title_changed`].
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{AgentSessionTitleChanged, App, Ctx};
    ///
    /// let _app = App::new()
    ///     .agent_session_title_changed(|_ctx: Ctx, t: AgentSessionTitleChanged| async move {
    ///         tracing::info!(title = t.title, "the person renamed the session");
    ///         Ok(())
    ///     });
    /// ```
    pub fn agent_session_title_changed<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Ctx, AgentSessionTitleChanged) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.assistant = true;
        self.listen(Listener::agent_session_title_changed(handler))
    }

    /// A click on the feedback buttons (`feedback_buttons`, in a `context_actions` block) of
    /// `action_id`: positive or negative, and the answer's message. Each click is its own
    /// request, claimed once (its `action_ts`): what the listener writes, a state change or a
    /// reply, is made once per click. A click on another element with this `action_id` is
    /// claimed and ignored (a warning logged).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, Feedback};
    ///
    /// let _app = App::new().feedback("answer_feedback", |ctx: Ctx, f: Feedback| async move {
    ///     let name = if f.positive { "feedback/positive" } else { "feedback/negative" };
    ///     let keep = std::time::Duration::from_secs(90 * 86_400);
    ///     ctx.state().update(name, keep, |n: Option<u64>| n.unwrap_or(0) + 1).await?;
    ///     ctx.respond("Thanks for the feedback.").await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn feedback<F, Fut>(self, action_id: impl Into<Selector>, handler: F) -> Self
    where
        F: Fn(Ctx, Feedback) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        self.action(action_id, move |ctx: Ctx, click: BlockAction| {
            let handler = handler.clone();
            async move {
                match Feedback::of(click) {
                    Some(feedback) => handler(ctx, feedback).await,
                    None => {
                        tracing::warn!("a click on this action id that is not on feedback buttons");
                        Ok(())
                    }
                }
            }
        })
    }

    /// Whether the app has an assistant's listener: the threads' contexts are then kept.
    pub(crate) fn keeps_thread_contexts(&self) -> bool {
        self.assistant
    }

    /// Whether a listener hears the changes of messages (`message_changed`…).
    pub(crate) fn hears_message_changes(&self) -> bool {
        self.message_changes
    }

    /// Whether the app hears the stop button (`agent_session_stopped`): Slack shows it only
    /// then, and only then do its streams read a session's stop.
    pub(crate) fn hears_stops(&self) -> bool {
        self.stops
    }

    /// See `Listener::channel_created`.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, ChannelCreated, Ctx};
    ///
    /// let _app = App::new().channel_created(|ctx: Ctx, c: ChannelCreated| async move {
    ///     if let Some(creator) = &c.channel.creator {
    ///         let tip = format!("Thanks for creating <#{}>! `/invite` me to help.", c.channel.id);
    ///         ctx.post(creator, tip).await?; // a post to a user lands in the bot's DM with them
    ///     }
    ///     Ok(())
    /// });
    /// ```
    pub fn channel_created<F, Fut>(self, handler: F) -> Self
    where
        F: Fn(Ctx, ChannelCreated) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::channel_created(handler))
    }

    /// Registers a Workflow Builder step: `function` declares it (its callback id, title and
    /// parameters, for the manifest and for checking outputs; a bare `&str` callback id declares
    /// none), and `handler` runs once per execution, however many times Slack sends
    /// `function_executed`. The handler completes the step ([`Ctx::complete`], [`Ctx::fail`])
    /// or posts something a person answers later; that click or submission (it carries
    /// `function_data`) reaches the app's action and view listeners, whose [`Ctx::complete`]
    /// completes the same execution: once, whoever is first.
    ///
    /// ```
    /// use serde::Deserialize;
    /// use serde_json::json;
    /// use slack_once::app::function::{Execution, Function, types};
    /// use slack_once::app::{App, Ctx};
    ///
    /// #[derive(Deserialize)]
    /// struct Inputs { channel: String, text: String }
    ///
    /// let _app = App::new().function(
    ///     Function::new("announce", "Announce")
    ///         .input("channel", types::CHANNEL_ID, "Channel")
    ///         .input("text", types::STRING, "Text")
    ///         .output("ts", types::STRING, "Message ts"),
    ///     |ctx: Ctx, ex: Execution<Inputs>| async move {
    ///         let posted = ctx.post(&ex.inputs.channel, ex.inputs.text.as_str()).await?;
    ///         ctx.complete(json!({"ts": posted.ts})).await?;
    ///         Ok(())
    ///     },
    /// );
    /// ```
    pub fn function<I, F, Fut>(
        mut self,
        function: impl Into<function::Function>,
        handler: F,
    ) -> Self
    where
        I: serde::de::DeserializeOwned + Send + 'static,
        F: Fn(Ctx, function::Execution<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let function = function.into();
        let id = function.callback_id().to_string();
        assert!(
            !self.functions.iter().any(|f| f.callback_id() == id),
            "the function {id:?} is registered twice"
        );
        Arc::make_mut(&mut self.functions).push(function.clone());
        self.listen(Listener::function(function, handler))
    }

    /// Describes the app for its manifest ([`App::manifest`]): its name, the commands'
    /// descriptions, which message events it takes, further scopes.
    pub fn with_manifest(mut self, manifest: manifest::Manifest) -> Self {
        self.described = Some(manifest);
        self
    }

    /// The app manifest this app needs (what `BOT manifest` prints): its events, commands,
    /// shortcuts, interactivity and Workflow Builder steps with their parameters, and the bot
    /// scopes they imply, with what [`App::with_manifest`] describes (see [`manifest`]).
    pub fn manifest(&self) -> serde_json::Value {
        manifest::of(self, &self.described.clone().unwrap_or_default())
    }

    /// The app's Workflow Builder steps, as registered.
    pub fn functions(&self) -> Arc<Vec<function::Function>> {
        self.functions.clone()
    }

    /// Adds a listener of a command, an action, a view, a shortcut or a suggestion.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{Ack, App, Command, Ctx, InteractiveListener};
    ///
    /// let help = InteractiveListener::command("/help", |ctx: Ctx, _cmd: Command| async move {
    ///     ctx.ack(Ack::ephemeral("Try `/deploy <service>`, or mention me.")).await?;
    ///     Ok(())
    /// });
    /// let _app = App::new().listen_interactive(help);
    /// ```
    pub fn listen_interactive(mut self, listener: InteractiveListener) -> Self {
        self.interactive.push(listener);
        self
    }

    /// A slash command by name (`"/once"`). See [`interactive`](self) for when its work runs.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{Ack, App, Command, Ctx, safe_text};
    ///
    /// let _app = App::new().command("/deploy", |ctx: Ctx, cmd: Command| async move {
    ///     let service = safe_text(&cmd.text);
    ///     ctx.ack(Ack::ephemeral(format!("Deploying {service}…"))).await?;
    ///     ctx.post(&cmd.channel_id, format!("<@{}> deployed {service}", cmd.user_id)).await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn command<F, Fut>(self, name: &str, handler: F) -> Self
    where
        F: Fn(Ctx, Command) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen_interactive(InteractiveListener::command(name, handler))
    }

    /// A block action (a button, a select…) by its `action_id`: a string, or a [`regex::Regex`].
    ///
    /// # Example
    ///
    /// ```
    /// use regex::Regex;
    /// use slack_once::app::{App, BlockAction, Ctx, Respond};
    ///
    /// let vote = Regex::new(r"^vote_\d+$").expect("a valid pattern"); // vote_0, vote_1…
    /// let _app = App::new()
    ///     .action("approve", |ctx: Ctx, click: BlockAction| async move {
    ///         let done = format!("Approved by <@{}> :white_check_mark:", click.user_id);
    ///         ctx.respond(Respond::replace(done)).await?;
    ///         Ok(())
    ///     })
    ///     .action(vote, |ctx: Ctx, click: BlockAction| async move {
    ///         let option = click.value.unwrap_or_default();
    ///         ctx.respond(format!("Your vote for {option} is counted.")).await?;
    ///         Ok(())
    ///     });
    /// ```
    pub fn action<F, Fut>(self, action_id: impl Into<Selector>, handler: F) -> Self
    where
        F: Fn(Ctx, BlockAction) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen_interactive(InteractiveListener::action(action_id.into(), None, handler))
    }

    /// A block action by its `block_id` and `action_id`.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, BlockAction, Ctx};
    ///
    /// // `close` in the ticket's block only (other blocks have a `close` of their own).
    /// let _app = App::new().block_action(
    ///     "ticket_actions",
    ///     "close",
    ///     |ctx: Ctx, click: BlockAction| async move {
    ///         if let (Some(channel), Some(ts)) = (&click.channel_id, &click.message_ts) {
    ///             ctx.update(channel, ts, format!("Closed by <@{}>", click.user_id)).await?;
    ///         }
    ///         Ok(())
    ///     },
    /// );
    /// ```
    pub fn block_action<F, Fut>(
        self,
        block_id: impl Into<Selector>,
        action_id: impl Into<Selector>,
        handler: F,
    ) -> Self
    where
        F: Fn(Ctx, BlockAction) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen_interactive(InteractiveListener::action(
            action_id.into(),
            Some(block_id.into()),
            handler,
        ))
    }

    /// A modal submitted, by its `callback_id`: acknowledge with [`Ack::errors`] to keep it
    /// open, [`Ack::update_view`], [`Ack::push_view`], [`Ack::clear`], or nothing to close it.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{Ack, App, Ctx, ViewSubmission, safe_text};
    ///
    /// let _app = App::new()
    ///     .view_submission("feedback_modal", |ctx: Ctx, view: ViewSubmission| async move {
    ///         let Some(text) = view.values.get("feedback", "feedback_text") else {
    ///             ctx.ack(Ack::errors([("feedback", "Tell us something")])).await?;
    ///             return Ok(());
    ///         };
    ///         ctx.ack(Ack::empty()).await?;
    ///         ctx.post("C0FEEDBACK", format!("Feedback: {}", safe_text(&text))).await?;
    ///         Ok(())
    ///     });
    /// ```
    pub fn view_submission<F, Fut>(self, callback_id: impl Into<Selector>, handler: F) -> Self
    where
        F: Fn(Ctx, ViewSubmission) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen_interactive(InteractiveListener::view(
            callback_id.into(),
            false,
            handler,
        ))
    }

    /// A modal closed by the user (its view must set `notify_on_close`), by `callback_id`.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, ViewSubmission};
    ///
    /// // The modal's view sets `"notify_on_close": true`.
    /// let _app = App::new()
    ///     .view_closed("feedback_modal", |ctx: Ctx, view: ViewSubmission| async move {
    ///         ctx.post(&view.user_id, "No worries: `/feedback` opens the form again.").await?;
    ///         Ok(())
    ///     });
    /// ```
    pub fn view_closed<F, Fut>(self, callback_id: impl Into<Selector>, handler: F) -> Self
    where
        F: Fn(Ctx, ViewSubmission) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen_interactive(InteractiveListener::view(callback_id.into(), true, handler))
    }

    /// A global shortcut, by `callback_id`.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{Ack, App, Ctx, Shortcut, blocks};
    ///
    /// let _app = App::new().shortcut("new_ticket", |ctx: Ctx, _s: Shortcut| async move {
    ///     let summary = blocks::input("summary", "Summary", blocks::text_input("summary_text"));
    ///     let view = blocks::modal("ticket_modal", "New ticket", "File", [summary]);
    ///     ctx.open_view(view.into()).await?; // before the acknowledgement
    ///     ctx.ack(Ack::empty()).await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn shortcut<F, Fut>(self, callback_id: impl Into<Selector>, handler: F) -> Self
    where
        F: Fn(Ctx, Shortcut) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen_interactive(InteractiveListener::shortcut(
            callback_id.into(),
            false,
            handler,
        ))
    }

    /// A message shortcut, by `callback_id`.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, Shortcut, safe_text};
    ///
    /// let _app = App::new().message_shortcut("file_ticket", |ctx: Ctx, s: Shortcut| async move {
    ///     let text = s.message.as_ref().and_then(|m| m["text"].as_str()).unwrap_or_default();
    ///     let ticket = format!("Ticket from <@{}>: {}", s.user_id, safe_text(text));
    ///     ctx.post("C0TICKETS1", ticket).await?;
    ///     ctx.respond("Filed :ticket:").await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn message_shortcut<F, Fut>(self, callback_id: impl Into<Selector>, handler: F) -> Self
    where
        F: Fn(Ctx, Shortcut) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen_interactive(InteractiveListener::shortcut(
            callback_id.into(),
            true,
            handler,
        ))
    }

    /// An external select's options, by `action_id`: acknowledge with [`Ack::options`].
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{Ack, App, Ctx, OptionsRequest};
    ///
    /// let _app = App::new().options("team_select", |ctx: Ctx, q: OptionsRequest| async move {
    ///     let typed = q.value.to_lowercase();
    ///     let teams = ["payments", "platform", "search", "support"];
    ///     let matching = teams.into_iter().filter(|t| t.contains(typed.as_str()));
    ///     ctx.ack(Ack::options(matching.map(|t| (t, t)))).await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn options<F, Fut>(self, action_id: impl Into<Selector>, handler: F) -> Self
    where
        F: Fn(Ctx, OptionsRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen_interactive(InteractiveListener::options(action_id.into(), handler))
    }

    /// Whether any listener of commands, actions, views, shortcuts or options is registered.
    pub fn has_interactive(&self) -> bool {
        !self.interactive.is_empty()
    }

    /// The listener that takes `interaction`: the first registered that matches.
    pub(crate) fn route_interaction(
        &self,
        interaction: &crate::slack::interaction::Interaction,
    ) -> Option<Run> {
        interactive::route(&self.interactive, interaction)
    }

    /// The listeners that take `event`, in registration order, grouped by their claim.
    pub(crate) fn route(&self, event: &Arc<EventCallback>) -> Route {
        let message = message_view(event);
        let heard = Heard {
            callback: event,
            message: message.as_ref(),
        };
        let from_bot = event.from_other_bot();
        let mut by_message = Vec::new();
        let mut by_event = Vec::new();
        let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for listener in &self.listeners {
            let nth = seen.entry(listener.name.as_str()).or_default();
            let id = listener_id(&listener.name, *nth);
            *nth += 1;
            if from_bot && !listener.including_bots {
                continue;
            }
            if let Some(work) = (listener.take)(&heard) {
                let group = if message.is_some() && !listener.per_event_id {
                    &mut by_message
                } else {
                    &mut by_event
                };
                group.push(Run {
                    id,
                    name: listener.name.clone(),
                    work,
                });
            }
        }
        let units = [(Identity::Message, by_message), (Identity::Event, by_event)]
            .into_iter()
            .filter(|(_, runs)| !runs.is_empty())
            .map(|(identity, runs)| Unit { identity, runs })
            .collect();
        Route { units }
    }

    /// Whether some listener takes `event`.
    pub fn takes(&self, event: &Arc<EventCallback>) -> bool {
        !self.route(event).is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slack::envelope::Envelope;
    use crate::slack::interaction::Interaction;

    /// An `event_callback` carrying `event`, as Slack delivers it to the app `A1` whose bot user
    /// is `UBOT`.
    fn callback(event: serde_json::Value) -> Arc<EventCallback> {
        let body = serde_json::json!({
            "type": "event_callback", "team_id": "T1", "api_app_id": "A1",
            "event_id": "Ev1", "event_time": 1_700_000_000,
            "event": event,
            "authorizations": [{"team_id": "T1", "user_id": "UBOT", "is_bot": true}],
        });
        match serde_json::from_str::<Envelope>(&body.to_string()).unwrap() {
            Envelope::EventCallback(cb) => Arc::new(*cb),
            other => panic!("{other:?}"),
        }
    }

    fn mention() -> Arc<EventCallback> {
        callback(serde_json::json!({
            "type": "app_mention", "user": "U1", "text": "<@UBOT> hi", "channel": "C1",
            "ts": "1700000000.000100", "event_ts": "1700000000.000100",
        }))
    }

    fn message_of_another_bot() -> Arc<EventCallback> {
        callback(serde_json::json!({
            "type": "message", "subtype": "bot_message", "bot_id": "B0OTHER", "text": "hi",
            "channel": "C1", "ts": "1700000000.000200", "event_ts": "1700000000.000200",
        }))
    }

    fn on_mention() -> Listener {
        Listener::app_mention(|_ctx: Ctx, _m: AppMention| async { Ok(()) })
    }

    fn on_message() -> Listener {
        Listener::message("hi", |_ctx: Ctx, _m: MessageEvent| async { Ok(()) })
    }

    /// Each unit's identity and its runs' names, in the order the route gives them.
    fn shape(route: &Route) -> Vec<(Identity, Vec<String>)> {
        route
            .units
            .iter()
            .map(|u| (u.identity, u.runs.iter().map(|r| r.name.clone()).collect()))
            .collect()
    }

    #[test]
    fn a_mention_runs_its_mention_and_message_listeners_under_one_claim_of_the_message() {
        let app = App::new().listen(on_mention()).listen(on_message());
        let route = app.route(&mention());
        let names: Vec<String> = app.listeners.iter().map(|l| l.name.clone()).collect();
        assert_eq!(shape(&route), vec![(Identity::Message, names)]);
    }

    #[test]
    fn a_listener_that_opts_out_runs_under_the_events_own_claim_beside_the_others() {
        let app = App::new()
            .listen(on_mention().per_event_id())
            .listen(on_message());
        let route = app.route(&mention());
        let shape = shape(&route);
        assert_eq!(
            shape
                .iter()
                .map(|(identity, runs)| (*identity, runs.len()))
                .collect::<Vec<_>>(),
            vec![(Identity::Message, 1), (Identity::Event, 1)],
            "{shape:?}"
        );
        assert_eq!(shape[1].1[0], app.listeners[0].name);
    }

    #[test]
    fn another_bots_message_reaches_only_the_listeners_that_include_bots() {
        let app = App::new().listen(on_message());
        assert!(app.route(&message_of_another_bot()).is_empty());
        assert!(!app.takes(&message_of_another_bot()));
        let app = App::new()
            .listen(on_message())
            .listen(on_message().including_bots());
        let route = app.route(&message_of_another_bot());
        assert_eq!(route.units.len(), 1);
        let ids: Vec<&str> = route.units[0].runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, vec![listener_id(&app.listeners[1].name, 1)]);
    }

    #[test]
    fn listeners_of_one_name_have_ids_by_their_place_among_that_name() {
        let app = App::new()
            .listen(on_mention())
            .listen(on_message())
            .listen(on_mention());
        let ids = |app: &App| -> Vec<String> {
            app.route(&mention()).units[0]
                .runs
                .iter()
                .map(|r| r.id.clone())
                .collect()
        };
        let first = ids(&app);
        let mention = &app.listeners[0].name;
        assert_eq!(
            first,
            vec![
                listener_id(mention, 0),
                listener_id(&app.listeners[1].name, 0),
                listener_id(mention, 1),
            ]
        );
        assert_eq!(
            ids(&app),
            first,
            "the same ids on every route: the journal keys on them"
        );
    }

    #[test]
    fn an_event_no_listener_takes_routes_nowhere() {
        let app = App::new().listen(on_mention());
        let reaction = callback(serde_json::json!({
            "type": "reaction_added", "user": "U1", "reaction": "eyes",
            "item": {"type": "message", "channel": "C1", "ts": "1700000000.000100"},
            "event_ts": "1700000000.000300",
        }));
        assert!(app.route(&reaction).is_empty());
        assert!(!app.takes(&reaction));
        assert!(app.takes(&mention()));
    }

    #[test]
    fn an_interaction_goes_to_the_first_registered_listener_that_matches() {
        let app = App::new()
            .command("/other", |_ctx: Ctx, _c: Command| async { Ok(()) })
            .command("/deploy", |_ctx: Ctx, _c: Command| async { Ok(()) })
            .command("/deploy", |_ctx: Ctx, _c: Command| async { Ok(()) });
        let form = b"command=%2Fdeploy&text=api&team_id=T1&api_app_id=A1&user_id=U1\
            &channel_id=C1&trigger_id=1.2.3&response_url=https%3A%2F%2Fhooks.slack.com%2Fx";
        let deploy = Interaction::from_form(form).unwrap();
        let run = app.route_interaction(&deploy).expect("a /deploy listener");
        assert_eq!(run.id, listener_id(&app.interactive[1].name, 1));
        let unknown = Interaction::from_form(b"command=%2Fnone&team_id=T1&user_id=U1").unwrap();
        assert!(app.route_interaction(&unknown).is_none());
    }
}
