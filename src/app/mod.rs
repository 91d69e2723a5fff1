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
//! Events that no listener takes are acknowledged and never claimed. A message-like event
//! (`message`, `app_mention`) is claimed by the message's identity (team, channel and `ts`, and
//! its `client_msg_id` when it has one) rather than by its `event_id`, so one message gets one
//! answer whichever events carry it; a listener opts out with [`Listener::per_event_id`].

pub mod blocks;
mod context;
pub mod events;
mod message;
mod reference;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use regex::Regex;

pub use context::{Ctx, Error, Posted, Settle, Tally};
pub use events::{
    AppHomeOpened, AppMention, ChannelCreated, MemberJoinedChannel, MessageEvent, Reaction,
    TeamJoin,
};
pub use message::Message;
pub use reference::{reference_app, safe_text};

use crate::envelope::{Event, EventCallback};
use events::{typed, Typed};

pub(crate) use context::Steps;

/// What a handler may fail with: any error (`?` works on anything); a failed step's [`Error`]
/// is recognised, so that Slack's permanent errors end the event `failed` and transient ones
/// release it for a retry.
pub type BotError = Box<dyn std::error::Error + Send + Sync>;
pub type HandlerResult = Result<(), BotError>;

type BoxFuture = Pin<Box<dyn Future<Output = HandlerResult> + Send>>;
/// A listener's work for one event, ready to run with its context.
pub(crate) type Prepared = Box<dyn FnOnce(Ctx) -> BoxFuture + Send>;
type Take = Box<dyn Fn(&Arc<EventCallback>) -> Option<Prepared> + Send + Sync>;

/// One handler and what it listens to.
pub struct Listener {
    name: String,
    per_event_id: bool,
    take: Take,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("name", &self.name)
            .field("per_event_id", &self.per_event_id)
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
    fn typed<E, F, Fut>(kind: &'static str, handler: F) -> Self
    where
        E: Typed + Send + 'static,
        F: Fn(Ctx, E) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        Self {
            name: kind.to_string(),
            per_event_id: false,
            take: Box::new(move |cb| {
                if cb.event.kind != kind {
                    return None;
                }
                let event: E = typed(&cb.event.raw)?;
                Some(prepared(handler.clone(), event))
            }),
        }
    }

    /// Any event of type `kind`, untyped ([`Event`], with the whole event as `raw`).
    pub fn event<F, Fut>(kind: &str, handler: F) -> Self
    where
        F: Fn(Ctx, Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let kind = kind.to_string();
        Self {
            name: kind.clone(),
            per_event_id: false,
            take: Box::new(move |cb| {
                (cb.event.kind == kind).then(|| prepared(handler.clone(), cb.event.clone()))
            }),
        }
    }

    /// Every event (after the bot's own are skipped), untyped: a catch-all, for logging or for
    /// event types without a typed listener.
    pub fn any_event<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        Self {
            name: "any event".to_string(),
            per_event_id: false,
            take: Box::new(move |cb| Some(prepared(handler.clone(), cb.event.clone()))),
        }
    }

    pub fn app_mention<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, AppMention) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Self::typed("app_mention", handler)
    }

    /// Messages from people (see [`MessageEvent`]: `app_mention`s too) whose text matches
    /// `pattern` (a regular expression; an app_mention's text is matched without its leading
    /// mention of the bot). The captures are in [`MessageEvent::captures`].
    ///
    /// Panics if `pattern` is not a valid regular expression: it is checked when the app is
    /// built, not when a message arrives.
    pub fn message<F, Fut>(pattern: &str, handler: F) -> Self
    where
        F: Fn(Ctx, MessageEvent) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let regex = Regex::new(pattern)
            .unwrap_or_else(|e| panic!("the listener's pattern {pattern:?} is not valid: {e}"));
        let handler = Arc::new(handler);
        Self {
            name: format!("message {pattern:?}"),
            per_event_id: false,
            take: Box::new(move |cb| {
                let mut m = message_event(cb)?;
                let captures = regex.captures(&m.text)?;
                m.captures = captures
                    .iter()
                    .map(|c| c.map(|c| c.as_str().to_string()))
                    .collect();
                Some(prepared(handler.clone(), m))
            }),
        }
    }

    /// Messages from people (see [`MessageEvent`]) for which `predicate` holds.
    pub fn message_where<P, F, Fut>(predicate: P, handler: F) -> Self
    where
        P: Fn(&MessageEvent) -> bool + Send + Sync + 'static,
        F: Fn(Ctx, MessageEvent) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        Self {
            name: "message".to_string(),
            per_event_id: false,
            take: Box::new(move |cb| {
                let m = message_event(cb)?;
                predicate(&m).then(|| prepared(handler.clone(), m))
            }),
        }
    }

    pub fn reaction_added<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, Reaction) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Self::typed("reaction_added", handler)
    }

    pub fn reaction_removed<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, Reaction) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Self::typed("reaction_removed", handler)
    }

    pub fn member_joined_channel<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, MemberJoinedChannel) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Self::typed("member_joined_channel", handler)
    }

    pub fn app_home_opened<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, AppHomeOpened) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Self::typed("app_home_opened", handler)
    }

    pub fn team_join<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, TeamJoin) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Self::typed("team_join", handler)
    }

    pub fn channel_created<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, ChannelCreated) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Self::typed("channel_created", handler)
    }

    /// Claims the events this listener takes by their `event_id` alone, not by the identity
    /// of the message they carry: every event of one message is then answered, each once.
    pub fn per_event_id(mut self) -> Self {
        self.per_event_id = true;
        self
    }
}

/// The message a `message` or `app_mention` event carries, if it is one from a person.
fn message_event(cb: &EventCallback) -> Option<MessageEvent> {
    let event = &cb.event;
    let mention = match event.kind.as_str() {
        "app_mention" => true,
        "message" => false,
        _ => return None,
    };
    let mut m: MessageEvent = typed(&event.raw)?;
    m.mention = mention;
    if mention {
        // The text without the leading mention of the bot: "<@U123> deploy api" → "deploy api".
        if let Some(bot) = cb.bot_user_id() {
            let prefix = format!("<@{bot}>");
            if let Some(rest) = m.text.trim_start().strip_prefix(&prefix) {
                m.text = rest.trim_start().to_string();
            }
        }
    }
    Some(m)
}

/// An application: its listeners, in the order they were registered.
#[derive(Default)]
pub struct App {
    listeners: Vec<Listener>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("listeners", &self.listeners)
            .finish()
    }
}

/// The listeners that take one event, and how it is claimed.
pub(crate) struct Route {
    pub runs: Vec<(String, Prepared)>,
    /// Claim by `event_id` even if the event carries a message.
    pub per_event_id: bool,
}

impl App {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a listener (for one built with options, such as [`Listener::per_event_id`]).
    pub fn listen(mut self, listener: Listener) -> Self {
        self.listeners.push(listener);
        self
    }

    /// See [`Listener::event`].
    pub fn event<F, Fut>(self, kind: &str, handler: F) -> Self
    where
        F: Fn(Ctx, Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::event(kind, handler))
    }

    /// See [`Listener::any_event`].
    pub fn any_event<F, Fut>(self, handler: F) -> Self
    where
        F: Fn(Ctx, Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::any_event(handler))
    }

    pub fn app_mention<F, Fut>(self, handler: F) -> Self
    where
        F: Fn(Ctx, AppMention) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::app_mention(handler))
    }

    /// See [`Listener::message`].
    pub fn message<F, Fut>(self, pattern: &str, handler: F) -> Self
    where
        F: Fn(Ctx, MessageEvent) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::message(pattern, handler))
    }

    /// See [`Listener::message_where`].
    pub fn message_where<P, F, Fut>(self, predicate: P, handler: F) -> Self
    where
        P: Fn(&MessageEvent) -> bool + Send + Sync + 'static,
        F: Fn(Ctx, MessageEvent) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::message_where(predicate, handler))
    }

    pub fn reaction_added<F, Fut>(self, handler: F) -> Self
    where
        F: Fn(Ctx, Reaction) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::reaction_added(handler))
    }

    pub fn reaction_removed<F, Fut>(self, handler: F) -> Self
    where
        F: Fn(Ctx, Reaction) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::reaction_removed(handler))
    }

    pub fn member_joined_channel<F, Fut>(self, handler: F) -> Self
    where
        F: Fn(Ctx, MemberJoinedChannel) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::member_joined_channel(handler))
    }

    pub fn app_home_opened<F, Fut>(self, handler: F) -> Self
    where
        F: Fn(Ctx, AppHomeOpened) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::app_home_opened(handler))
    }

    pub fn team_join<F, Fut>(self, handler: F) -> Self
    where
        F: Fn(Ctx, TeamJoin) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::team_join(handler))
    }

    pub fn channel_created<F, Fut>(self, handler: F) -> Self
    where
        F: Fn(Ctx, ChannelCreated) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.listen(Listener::channel_created(handler))
    }

    /// The listeners that take `event`, in registration order.
    pub(crate) fn route(&self, event: &Arc<EventCallback>) -> Route {
        let mut runs = Vec::new();
        let mut per_event_id = false;
        for listener in &self.listeners {
            if let Some(run) = (listener.take)(event) {
                per_event_id |= listener.per_event_id;
                runs.push((listener.name.clone(), run));
            }
        }
        Route { runs, per_event_id }
    }

    /// Whether some listener takes `event`.
    pub fn takes(&self, event: &Arc<EventCallback>) -> bool {
        !self.route(event).runs.is_empty()
    }
}
