//! A few Block Kit builders, as JSON: enough for the messages bots usually post. Any block
//! Slack documents can also be written with `serde_json::json!` and passed as it is.

use serde_json::{json, Value};

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

pub fn header(text: impl Into<String>) -> Value {
    json!({"type": "header", "text": plain(text)})
}

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
