//! What a bot posts: text, Block Kit blocks, attachments, a thread, a broadcast, unfurl flags,
//! and metadata of its own (slack-once keeps its names under the reserved
//! `event_payload.slack_once`, whatever the bot's `event_type`).

use serde::Serialize;
use serde_json::Value;

/// A message for `chat.postMessage`, `chat.postEphemeral` or `chat.update`. Build it from a
/// string, or with the methods below:
///
/// ```
/// use slack_once::app::{blocks, Message};
/// let m = Message::text("Deploy finished")
///     .blocks([blocks::section("*Deploy finished* :rocket:"), blocks::divider()])
///     .unfurl_links(false);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Message {
    /// The message's `text`: the notification and fallback text when there are blocks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Block Kit blocks (`blocks`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks: Option<Vec<Value>>,
    /// Secondary attachments (`attachments`), as Slack names them: fields and text beside a
    /// colored bar.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Vec<Value>>,
    /// The thread's parent `ts`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_ts: Option<String>,
    /// With `thread_ts`: also show the reply in the channel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_broadcast: Option<bool>,
    /// Whether Slack unfurls the links in the text (`unfurl_links`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unfurl_links: Option<bool>,
    /// Whether Slack unfurls linked media (`unfurl_media`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unfurl_media: Option<bool>,
    /// Whether `text` is read as mrkdwn (`mrkdwn`; Slack's default is true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mrkdwn: Option<bool>,
    /// The bot's own metadata: `{event_type, event_payload}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

impl Message {
    /// A message with `text` (the notification and fallback text when there are blocks).
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// Block Kit blocks (see [`crate::app::blocks`]).
    pub fn blocks(mut self, blocks: impl IntoIterator<Item = Value>) -> Self {
        self.blocks = Some(blocks.into_iter().collect());
        self
    }

    /// Secondary attachments (`attachments`).
    pub fn attachments(mut self, attachments: impl IntoIterator<Item = Value>) -> Self {
        self.attachments = Some(attachments.into_iter().collect());
        self
    }

    /// Posts in the thread of `ts`.
    pub fn in_thread(mut self, ts: impl Into<String>) -> Self {
        self.thread_ts = Some(ts.into());
        self
    }

    /// A thread reply also shown in the channel.
    pub fn broadcast(mut self) -> Self {
        self.reply_broadcast = Some(true);
        self
    }

    /// Sets whether Slack unfurls the links in the text (`unfurl_links`).
    pub fn unfurl_links(mut self, unfurl: bool) -> Self {
        self.unfurl_links = Some(unfurl);
        self
    }

    /// Sets whether Slack unfurls linked media, such as images and videos (`unfurl_media`).
    pub fn unfurl_media(mut self, unfurl: bool) -> Self {
        self.unfurl_media = Some(unfurl);
        self
    }

    /// Metadata of the bot's own (`event_payload.slack_once` is reserved and overwritten).
    pub fn metadata(mut self, event_type: impl Into<String>, event_payload: Value) -> Self {
        self.metadata = Some(serde_json::json!({
            "event_type": event_type.into(),
            "event_payload": event_payload,
        }));
        self
    }

    /// The arguments of a call: this message in `channel`, with whatever `extra` adds.
    pub(crate) fn args(&self, channel: &str, extra: &[(&str, Value)]) -> Value {
        let mut args = serde_json::to_value(self).expect("a message serialises");
        args["channel"] = channel.into();
        for (k, v) in extra {
            args[*k] = v.clone();
        }
        args
    }
}

impl From<&str> for Message {
    fn from(text: &str) -> Self {
        Message::text(text)
    }
}

impl From<String> for Message {
    fn from(text: String) -> Self {
        Message::text(text)
    }
}

impl From<&String> for Message {
    fn from(text: &String) -> Self {
        Message::text(text.clone())
    }
}

/// `text` made safe to repeat in a message: Slack's special mentions (`<!here>`,
/// `<!channel>`, `<!everyone>`, `<!subteam^…>`) become plain text that notifies no one, and
/// mentions of users are removed. Whitespace is collapsed.
pub fn safe_text(text: &str) -> String {
    defuse(text)
}

fn defuse(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let Some(end) = tail.find('>') else {
            // No closing bracket: not a control sequence, but never let one form.
            out.push_str(&tail.replace('<', "&lt;"));
            rest = "";
            break;
        };
        let inner = &tail[1..end];
        if let Some(special) = inner.strip_prefix('!') {
            // `<!here>`, `<!subteam^S1|@team>`: keep the label, as plain text with a
            // zero-width space after the `@`.
            let label = special
                .split_once('|')
                .map_or(special, |(_, label)| label)
                .trim_start_matches('@');
            let label = label.split('^').next().unwrap_or(label);
            out.push_str("@\u{200B}");
            out.push_str(label);
        } else if !inner.starts_with('@') {
            // Links and channel references (`<#C1|general>`, `<https://…|text>`) are harmless.
            out.push_str(&tail[..=end]);
        }
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_serialises_only_what_is_set() {
        let m = Message::text("hi").in_thread("1.2").broadcast();
        assert_eq!(
            m.args("C1", &[]),
            serde_json::json!({"text": "hi", "thread_ts": "1.2", "reply_broadcast": true, "channel": "C1"})
        );
        let m = Message::text("x").metadata("order", serde_json::json!({"id": 7}));
        assert_eq!(m.args("C1", &[])["metadata"]["event_payload"]["id"], 7);
    }
}
