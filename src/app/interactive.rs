//! Listeners of slash commands, actions, views, shortcuts and options, and the acknowledgement
//! a listener chooses ([`Ack`]).
//!
//! A listener of these is an async function of a [`Ctx`] and the typed payload, like an event's.
//! Everything it does before [`Ctx::ack`] runs while Slack waits (Slack gives 3 s); everything
//! after it runs once the acknowledgement is decided: in synchronous mode in the same
//! invocation, before the acknowledgement is returned (Lambda freezes the environment once the
//! response is out, so nothing may run after it: the whole listener must fit in Slack's 3 s);
//! in deferred mode on a worker, from the queue, as long as it needs. A listener that never
//! calls `ack` is acknowledged with an empty 200 when it returns. `views.open` / `views.push`
//! (they spend the request's `trigger_id`, valid 3 s and once) happen before `ack` or not at
//! all.

use std::future::Future;
use std::sync::Arc;

use regex::Regex;
use serde_json::{Value, json};

use super::{Ctx, HandlerResult, Message, Prepared, prepared};
use crate::slack::interaction::{
    BlockAction, Command, Interaction, Kind, OptionsRequest, Shortcut, ViewSubmission,
};

/// What Slack is answered with, within its 3 s: the listener's choice.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Ack {
    /// An empty 200 (what an action, a shortcut or a closed view always gets).
    #[default]
    Empty,
    /// A message for a command or an action's `response_url` body: `{"response_type", "text", …}`.
    Message(Value),
    /// A view submission's `response_action` (`errors`, `update`, `push`, `clear`).
    ResponseAction(Value),
    /// A suggestion's options.
    Options(Value),
}

impl Ack {
    /// An empty 200.
    pub fn empty() -> Self {
        Ack::Empty
    }

    /// A message only the user sees (a command's acknowledgement).
    pub fn ephemeral(message: impl Into<Message>) -> Self {
        Ack::Message(response_body(message.into(), "ephemeral"))
    }

    /// A message everyone in the conversation sees (a command's acknowledgement).
    pub fn in_channel(message: impl Into<Message>) -> Self {
        Ack::Message(response_body(message.into(), "in_channel"))
    }

    /// A view submission refused, with a message under each failing input block: Slack keeps
    /// the modal open. The submission is not taken: its claim is released, so the same values
    /// sent again are validated again, and corrected ones are a new submission.
    pub fn errors<K, V>(errors: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        let errors: serde_json::Map<String, Value> = errors
            .into_iter()
            .map(|(k, v)| (k.into(), Value::String(v.into())))
            .collect();
        Ack::ResponseAction(json!({"response_action": "errors", "errors": errors}))
    }

    /// A view submission answered by replacing the modal with `view`.
    pub fn update_view(view: Value) -> Self {
        Ack::ResponseAction(json!({"response_action": "update", "view": view}))
    }

    /// A view submission answered by pushing `view` onto the modal's stack.
    pub fn push_view(view: Value) -> Self {
        Ack::ResponseAction(json!({"response_action": "push", "view": view}))
    }

    /// A view submission answered by closing every view of the stack.
    pub fn clear() -> Self {
        Ack::ResponseAction(json!({"response_action": "clear"}))
    }

    /// A suggestion's options: (text shown, value).
    pub fn options<T, V>(options: impl IntoIterator<Item = (T, V)>) -> Self
    where
        T: Into<String>,
        V: Into<String>,
    {
        let options: Vec<Value> = options
            .into_iter()
            .map(|(t, v)| {
                json!({"text": {"type": "plain_text", "text": t.into()}, "value": v.into()})
            })
            .collect();
        Ack::Options(json!({ "options": options }))
    }

    /// The response body (`None`: an empty 200).
    pub fn body(&self) -> Option<String> {
        match self {
            Ack::Empty => None,
            Ack::Message(v) | Ack::ResponseAction(v) | Ack::Options(v) => Some(v.to_string()),
        }
    }

    /// A view's validation errors: the submission is not taken.
    pub fn is_errors(&self) -> bool {
        matches!(self, Ack::ResponseAction(v) if v["response_action"] == "errors")
    }
}

/// A message as a `response_url` (or a command's acknowledgement) takes it.
pub(crate) fn response_body(message: Message, response_type: &str) -> Value {
    let mut body = serde_json::to_value(&message).unwrap_or_else(|_| json!({}));
    body["response_type"] = response_type.into();
    body
}

/// What a listener of actions or options is chosen by: an exact id, or a pattern.
#[derive(Clone, Debug)]
pub enum Selector {
    /// An id, matched exactly.
    Exact(String),
    /// Any id the regular expression matches.
    Pattern(Regex),
}

impl Selector {
    fn matches(&self, id: &str) -> bool {
        match self {
            Selector::Exact(s) => s == id,
            Selector::Pattern(r) => r.is_match(id),
        }
    }

    fn describe(&self) -> String {
        match self {
            Selector::Exact(s) => s.clone(),
            Selector::Pattern(r) => format!("/{}/", r.as_str()),
        }
    }
}

impl From<&str> for Selector {
    fn from(s: &str) -> Self {
        Selector::Exact(s.to_string())
    }
}

impl From<String> for Selector {
    fn from(s: String) -> Self {
        Selector::Exact(s)
    }
}

impl From<Regex> for Selector {
    fn from(r: Regex) -> Self {
        Selector::Pattern(r)
    }
}

type TakeInteraction = Box<dyn Fn(&Interaction) -> Option<Prepared> + Send + Sync>;

/// One listener of a command, an action, a view, a shortcut or a suggestion.
pub struct InteractiveListener {
    pub(crate) name: String,
    pub(crate) take: TakeInteraction,
    /// What the app's manifest declares for it ([`crate::app::App::manifest`]).
    pub(crate) declares: Declares,
}

/// What an interactive listener needs of the app's manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Declares {
    /// A slash command (`/name`).
    Command(String),
    /// A shortcut: its callback id when exact, and whether it is a message shortcut.
    Shortcut(Option<String>, bool),
    /// Interactivity (actions, views).
    Interactivity,
    /// Interactivity with options loaded from the Request URL (an external select).
    Options,
}

impl std::fmt::Debug for InteractiveListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InteractiveListener")
            .field("name", &self.name)
            .finish()
    }
}

fn listener<P, F, Fut>(
    name: String,
    kinds: &'static [Kind],
    selector: Selector,
    block: Option<Selector>,
    typed: fn(&Interaction) -> P,
    handler: F,
) -> InteractiveListener
where
    P: Send + 'static,
    F: Fn(Ctx, P) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    let handler = Arc::new(handler);
    let declares = match kinds.first() {
        Some(Kind::Command) => Declares::Command(selector.describe()),
        Some(k @ (Kind::Shortcut | Kind::MessageShortcut)) => Declares::Shortcut(
            match &selector {
                Selector::Exact(id) => Some(id.clone()),
                Selector::Pattern(_) => None,
            },
            *k == Kind::MessageShortcut,
        ),
        Some(Kind::BlockSuggestion) => Declares::Options,
        _ => Declares::Interactivity,
    };
    InteractiveListener {
        name,
        declares,
        take: Box::new(move |i| {
            if !kinds.contains(&i.kind) || !selector.matches(&i.selector()?) {
                return None;
            }
            if let Some(block) = &block
                && !block.matches(&i.block_id()?)
            {
                return None;
            }
            Some(prepared(handler.clone(), typed(i)))
        }),
    }
}

impl InteractiveListener {
    /// A slash command by its name (`"/once"`).
    pub fn command<F, Fut>(name: &str, handler: F) -> Self
    where
        F: Fn(Ctx, Command) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let name = format!("/{}", name.trim_start_matches('/'));
        listener(
            format!("command {name}"),
            &[Kind::Command],
            Selector::Exact(name),
            None,
            Command::of,
            handler,
        )
    }

    /// A block action by its `action_id` (a string, or a [`Regex`]), and, when `block` is set,
    /// its `block_id`.
    pub fn action<F, Fut>(action_id: Selector, block: Option<Selector>, handler: F) -> Self
    where
        F: Fn(Ctx, BlockAction) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let name = match &block {
            Some(b) => format!("action {} in {}", action_id.describe(), b.describe()),
            None => format!("action {}", action_id.describe()),
        };
        listener(
            name,
            &[Kind::BlockActions],
            action_id,
            block,
            BlockAction::of,
            handler,
        )
    }

    /// A modal's submission (`closed`: false) or closing (`closed`: true), by `callback_id`.
    pub fn view<F, Fut>(callback_id: Selector, closed: bool, handler: F) -> Self
    where
        F: Fn(Ctx, ViewSubmission) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let (kinds, what): (&'static [Kind], _) = if closed {
            (&[Kind::ViewClosed], "view_closed")
        } else {
            (&[Kind::ViewSubmission], "view_submission")
        };
        listener(
            format!("{what} {}", callback_id.describe()),
            kinds,
            callback_id,
            None,
            ViewSubmission::of,
            handler,
        )
    }

    /// A global (`message`: false) or a message shortcut, by `callback_id`.
    pub fn shortcut<F, Fut>(callback_id: Selector, message: bool, handler: F) -> Self
    where
        F: Fn(Ctx, Shortcut) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let (kinds, what): (&'static [Kind], _) = if message {
            (&[Kind::MessageShortcut], "message shortcut")
        } else {
            (&[Kind::Shortcut], "shortcut")
        };
        listener(
            format!("{what} {}", callback_id.describe()),
            kinds,
            callback_id,
            None,
            Shortcut::of,
            handler,
        )
    }

    /// Every command and interaction, whatever its kind and id: what the gateway forwards.
    pub(crate) fn any<F, Fut>(handler: F) -> Self
    where
        F: Fn(Ctx, Interaction) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler = Arc::new(handler);
        InteractiveListener {
            name: "any interaction".into(),
            declares: Declares::Interactivity,
            take: Box::new(move |i| Some(prepared(handler.clone(), i.clone()))),
        }
    }

    /// An external select's options, by `action_id`: the listener acknowledges with
    /// [`Ack::options`]. Never claimed (it writes nothing); its writes fail with
    /// [`super::Error::Closed`].
    pub fn options<F, Fut>(action_id: Selector, handler: F) -> Self
    where
        F: Fn(Ctx, OptionsRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        listener(
            format!("options {}", action_id.describe()),
            &[Kind::BlockSuggestion],
            action_id,
            None,
            OptionsRequest::of,
            handler,
        )
    }
}

/// The one listener that takes an interaction (the first registered that matches), with its
/// id and name.
pub(crate) fn route(
    listeners: &[InteractiveListener],
    interaction: &Interaction,
) -> Option<super::Run> {
    listeners.iter().enumerate().find_map(|(nth, l)| {
        let work: Prepared = (l.take)(interaction)?;
        Some(super::Run {
            id: super::listener_id(&l.name, nth),
            name: l.name.clone(),
            work,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acknowledgements_have_slacks_shapes() {
        assert_eq!(Ack::empty().body(), None);
        let eph: Value = serde_json::from_str(&Ack::ephemeral("hi").body().unwrap()).unwrap();
        assert_eq!(eph, json!({"text": "hi", "response_type": "ephemeral"}));
        let errors = Ack::errors([("title", "Say something")]);
        assert!(errors.is_errors());
        let body: Value = serde_json::from_str(&errors.body().unwrap()).unwrap();
        assert_eq!(body["errors"]["title"], "Say something");
        let options: Value =
            serde_json::from_str(&Ack::options([("One", "1")]).body().unwrap()).unwrap();
        assert_eq!(options["options"][0]["value"], "1");
        assert_eq!(options["options"][0]["text"]["type"], "plain_text");
        assert!(!Ack::clear().is_errors());
    }
}
