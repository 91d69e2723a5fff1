//! A few Block Kit builders, as JSON: enough for the messages bots usually post. Any block
//! Slack documents can also be written with `serde_json::json!` and passed as it is.

use serde_json::{Value, json};

/// A `mrkdwn` text object.
pub fn mrkdwn(text: impl Into<String>) -> Value {
    json!({"type": "mrkdwn", "text": text.into()})
}

/// A `plain_text` text object (emoji shortcodes rendered).
pub fn plain(text: impl Into<String>) -> Value {
    json!({"type": "plain_text", "text": text.into(), "emoji": true})
}

/// A section of `mrkdwn` text.
pub fn section(text: impl Into<String>) -> Value {
    json!({"type": "section", "text": mrkdwn(text)})
}

/// A section of `mrkdwn` text with an accessory element (a button, an image…).
pub fn section_with(text: impl Into<String>, accessory: Value) -> Value {
    json!({"type": "section", "text": mrkdwn(text), "accessory": accessory})
}

/// A header block: large bold `plain_text` (Slack takes at most 150 characters).
pub fn header(text: impl Into<String>) -> Value {
    json!({"type": "header", "text": plain(text)})
}

/// A divider block: a horizontal rule between blocks.
pub fn divider() -> Value {
    json!({"type": "divider"})
}

/// A context block of small `mrkdwn` texts.
pub fn context<I, S>(texts: I) -> Value
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let elements: Vec<Value> = texts.into_iter().map(mrkdwn).collect();
    json!({"type": "context", "elements": elements})
}

/// An image block showing the image at `url`, with `alt` as its alt text.
pub fn image(url: impl Into<String>, alt: impl Into<String>) -> Value {
    json!({"type": "image", "image_url": url.into(), "alt_text": alt.into()})
}

/// An actions block: buttons and other interactive elements.
pub fn actions(elements: impl IntoIterator<Item = Value>) -> Value {
    json!({"type": "actions", "elements": elements.into_iter().collect::<Vec<_>>()})
}

/// A button sending `action_id` and `value` to the app's interactivity URL.
pub fn button(
    text: impl Into<String>,
    action_id: impl Into<String>,
    value: impl Into<String>,
) -> Value {
    json!({"type": "button", "text": plain(text), "action_id": action_id.into(), "value": value.into()})
}

/// A button's colour: `primary` (green) or `danger` (red); Slack's default without one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Green (`primary`): the action that goes ahead.
    Primary,
    /// Red (`danger`): an action that deletes or cannot be undone.
    Danger,
}

/// `button` in `style`.
///
/// ```
/// use slack_once::app::blocks::{button, styled, Style};
/// let close = styled(button("Close", "poll_close", "1"), Style::Danger);
/// assert_eq!(close["style"], "danger");
/// ```
pub fn styled(mut button: Value, style: Style) -> Value {
    button["style"] = json!(match style {
        Style::Primary => "primary",
        Style::Danger => "danger",
    });
    button
}

/// `block` with its `block_id` (which an interaction names as `block_id`, and a view's
/// submitted values are keyed by).
///
/// ```
/// use slack_once::app::blocks::{actions, button, with_block_id};
/// let block = with_block_id(actions([button("Yes", "vote", "0")]), "poll-options");
/// assert_eq!(block["block_id"], "poll-options");
/// ```
pub fn with_block_id(mut block: Value, block_id: impl Into<String>) -> Value {
    block["block_id"] = json!(block_id.into());
    block
}

/// A one-line text input (`plain_text_input`) sending its value as `action_id`.
pub fn text_input(action_id: impl Into<String>) -> Value {
    json!({"type": "plain_text_input", "action_id": action_id.into()})
}

/// A multi-line text input (a `plain_text_input` with `multiline`): a reason, a note, a
/// description.
///
/// ```
/// use slack_once::app::blocks::{input, text_area};
/// let reason = input("reason", "Why escalate?", text_area("reason_text"));
/// assert_eq!(reason["element"]["multiline"], true);
/// ```
pub fn text_area(action_id: impl Into<String>) -> Value {
    json!({"type": "plain_text_input", "action_id": action_id.into(), "multiline": true})
}

/// A select of one person of the workspace (`users_select`), showing `placeholder` until one
/// is picked: its value is the user's id ([`crate::slack::interaction::ViewValues::get`] reads
/// `selected_user`).
///
/// ```
/// use slack_once::app::blocks::{input, user_select};
/// let to = input("to", "Hand off to", user_select("to_user", "Pick a person"));
/// assert_eq!(to["element"]["type"], "users_select");
/// ```
pub fn user_select(action_id: impl Into<String>, placeholder: impl Into<String>) -> Value {
    json!({"type": "users_select", "action_id": action_id.into(), "placeholder": plain(placeholder)})
}

/// A select of one conversation (`conversations_select`: public and private channels, DMs),
/// showing `placeholder` until one is picked; `default_to_current_conversation` set, so that
/// a modal opened from a channel starts on it. Its value is the conversation's id
/// (`selected_conversation`).
///
/// ```
/// use slack_once::app::blocks::{channel_select, input};
/// let to = input("where", "Post in", channel_select("where_channel", "Pick a channel"));
/// assert_eq!(to["element"]["type"], "conversations_select");
/// ```
pub fn channel_select(action_id: impl Into<String>, placeholder: impl Into<String>) -> Value {
    json!({
        "type": "conversations_select",
        "action_id": action_id.into(),
        "placeholder": plain(placeholder),
        "default_to_current_conversation": true,
        "response_url_enabled": false,
    })
}

/// `button` asking first: a confirmation dialog (`title`, `text`, the `confirm` and `deny`
/// buttons' texts) that Slack shows before the click is sent.
///
/// ```
/// use slack_once::app::blocks::{button, confirmed};
/// let escalate = confirmed(
///     button("Escalate", "handoff_escalate", "1"),
///     "Escalate?",
///     "This pages the next person on the rota.",
///     "Escalate",
///     "Cancel",
/// );
/// assert_eq!(escalate["confirm"]["confirm"]["text"], "Escalate");
/// ```
pub fn confirmed(
    mut button: Value,
    title: impl Into<String>,
    text: impl Into<String>,
    confirm: impl Into<String>,
    deny: impl Into<String>,
) -> Value {
    button["confirm"] = json!({
        "title": plain(title),
        "text": mrkdwn(text),
        "confirm": plain(confirm),
        "deny": plain(deny),
    });
    button
}

/// An input block of a modal: `label` above `element` (a [`text_input`], a select…), its
/// value submitted under `block_id` and the element's `action_id`
/// ([`crate::slack::interaction::ViewValues::get`]).
///
/// ```
/// use slack_once::app::blocks::{input, text_input};
/// let reason = input("reason", "Why close it?", text_input("reason_text"));
/// assert_eq!(reason["element"]["action_id"], "reason_text");
/// ```
pub fn input(block_id: impl Into<String>, label: impl Into<String>, element: Value) -> Value {
    json!({"type": "input", "block_id": block_id.into(), "label": plain(label), "element": element})
}

/// `input` made optional: the modal submits without it.
pub fn optional(mut input: Value) -> Value {
    input["optional"] = json!(true);
    input
}

/// A modal view (for [`crate::app::Ctx::open_view`]): its `callback_id` (which its submission
/// names), title, submit button's text and blocks; `private_metadata` carries what the
/// submission needs (at most 3,000 characters).
///
/// ```
/// use slack_once::app::blocks::{input, modal, text_input};
/// let view = modal("poll_close", "Close the poll", "Close", [input("r", "Why?", text_input("t"))])
///     .with_metadata("C1/1767225600.000100");
/// assert_eq!(view["private_metadata"], "C1/1767225600.000100");
/// ```
pub fn modal(
    callback_id: impl Into<String>,
    title: impl Into<String>,
    submit: impl Into<String>,
    blocks: impl IntoIterator<Item = Value>,
) -> Modal {
    Modal(json!({
        "type": "modal",
        "callback_id": callback_id.into(),
        "title": plain(title),
        "submit": plain(submit),
        "close": plain("Cancel"),
        "blocks": blocks.into_iter().collect::<Vec<_>>(),
    }))
}

/// A modal view from [`modal`]: JSON, with a way to add its `private_metadata`.
#[derive(Clone, Debug, PartialEq)]
pub struct Modal(pub Value);

impl Modal {
    /// The modal with `private_metadata`.
    pub fn with_metadata(mut self, metadata: impl Into<String>) -> Value {
        self.0["private_metadata"] = json!(metadata.into());
        self.0
    }
}

impl From<Modal> for Value {
    fn from(modal: Modal) -> Value {
        modal.0
    }
}

impl std::ops::Index<&str> for Modal {
    type Output = Value;
    fn index(&self, key: &str) -> &Value {
        &self.0[key]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_the_json_slack_documents() {
        assert_eq!(
            section("*hi*"),
            json!({"type": "section", "text": {"type": "mrkdwn", "text": "*hi*"}})
        );
        assert_eq!(
            actions([button("Approve", "approve", "42")]),
            json!({"type": "actions", "elements": [{"type": "button",
                "text": {"type": "plain_text", "text": "Approve", "emoji": true},
                "action_id": "approve", "value": "42"}]})
        );
        assert_eq!(context(["a", "b"])["elements"][1]["text"], "b");
    }
}
