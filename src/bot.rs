//! What the bot says: the part users replace. Implement [`Bot`] and pass it to
//! [`crate::Application::build_with_bot`]; the ledger, signatures and Slack stay as they are.
//!
//! ```
//! use slack_once::bot::{Bot, BotError, Reply};
//! use slack_once::envelope::EventCallback;
//!
//! /// Answers every mention and DM with its own text, in the thread.
//! struct Echo;
//!
//! #[async_trait::async_trait]
//! impl Bot for Echo {
//!     async fn respond(&self, cb: &EventCallback) -> Result<Option<Reply>, BotError> {
//!         Ok(cb.event.channel.clone().map(|channel| Reply {
//!             channel,
//!             text: cb.event.text.clone().unwrap_or_default(),
//!             thread_ts: cb.event.thread_ts.clone().or_else(|| cb.event.ts.clone()),
//!         }))
//!     }
//! }
//!
//! # async fn wire() -> Result<(), Box<dyn std::error::Error>> {
//! let config = slack_once::config::Config::from_env()?;
//! let app = slack_once::Application::build_with_bot(config, std::sync::Arc::new(Echo)).await;
//! # let _ = app.router();
//! # Ok(())
//! # }
//! ```

use async_trait::async_trait;

use crate::envelope::EventCallback;

/// A reply to post with `chat.postMessage`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub channel: String,
    pub text: String,
    /// The parent message's `ts`, to answer in its thread.
    pub thread_ts: Option<String>,
}

pub type BotError = Box<dyn std::error::Error + Send + Sync>;

/// Decides the answer to one event. Called at most once per claim, only for events that are
/// not the bot's own; it runs within the claim's lease, so it must not outlast it.
#[async_trait]
pub trait Bot: Send + Sync + 'static {
    /// `Ok(None)`: nothing to say (the event is still marked done).
    async fn respond(&self, event: &EventCallback) -> Result<Option<Reply>, BotError>;
}

/// The reference bot: answers mentions in their thread and direct messages in the conversation.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReferenceBot;

/// Echoed text is cut to this many characters.
const MAX_ECHO_CHARS: usize = 200;

#[async_trait]
impl Bot for ReferenceBot {
    async fn respond(&self, callback: &EventCallback) -> Result<Option<Reply>, BotError> {
        let event = &callback.event;
        let Some(channel) = event.channel.clone() else {
            return Ok(None);
        };
        let user = event.user.as_deref().unwrap_or("there");
        let said = echo(event.text.as_deref().unwrap_or(""));
        match (event.kind.as_str(), event.channel_type.as_deref()) {
            ("app_mention", _) => {
                let text = if said.is_empty() || said.eq_ignore_ascii_case("help") {
                    format!(
                        "Hi <@{user}>! Mention me with a question and I answer here, in the \
                         thread: once, however many times Slack delivers your message."
                    )
                } else {
                    format!("<@{user}> you said: “{said}”. This is my one answer to it.")
                };
                Ok(Some(Reply {
                    channel,
                    text,
                    thread_ts: event.thread_ts.clone().or_else(|| event.ts.clone()),
                }))
            }
            ("message", Some("im")) => {
                let text = if said.is_empty() {
                    "Hi! Send me a message, or mention me in a channel, and I answer it once."
                        .to_string()
                } else {
                    format!("You said: “{said}”. I answer every message exactly once.")
                };
                Ok(Some(Reply {
                    channel,
                    text,
                    // Answer in the conversation, unless the message was in a thread.
                    thread_ts: event.thread_ts.clone(),
                }))
            }
            _ => Ok(None),
        }
    }
}

/// The user's text made safe to echo: mentions of users (`<@U123>`) removed, and Slack's
/// special mentions (`<!here>`, `<!channel>`, `<!everyone>`, `<!subteam^S123|@team>`, any
/// `<!…>`) turned into plain text that notifies no one, so a user cannot make the bot ping a
/// channel or a group; trimmed and cut to a short length.
fn echo(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_ECHO_CHARS * 4));
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
    let trimmed = out.split_whitespace().collect::<Vec<_>>().join(" ");
    match trimmed.char_indices().nth(MAX_ECHO_CHARS) {
        Some((cut, _)) => format!("{}…", &trimmed[..cut]),
        None => trimmed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::Envelope;

    fn callback(event: &str) -> EventCallback {
        let json = format!(r#"{{"type":"event_callback","event_id":"Ev1","event":{event}}}"#);
        match serde_json::from_str::<Envelope>(&json).unwrap() {
            Envelope::EventCallback(cb) => *cb,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_mention_is_answered_in_its_thread() {
        let cb = callback(
            r#"{"type":"app_mention","user":"U1","text":"<@UBOT> is it up?","ts":"1.2","channel":"C1"}"#,
        );
        let reply = ReferenceBot.respond(&cb).await.unwrap().unwrap();
        assert_eq!(reply.channel, "C1");
        assert_eq!(reply.thread_ts.as_deref(), Some("1.2"));
        assert!(reply.text.contains("“is it up?”"), "{}", reply.text);
        assert!(reply.text.starts_with("<@U1>"));
    }

    #[tokio::test]
    async fn a_mention_inside_a_thread_is_answered_in_that_thread() {
        let cb = callback(
            r#"{"type":"app_mention","user":"U1","text":"<@UBOT> help","ts":"1.5","thread_ts":"1.2","channel":"C1"}"#,
        );
        let reply = ReferenceBot.respond(&cb).await.unwrap().unwrap();
        assert_eq!(reply.thread_ts.as_deref(), Some("1.2"));
        assert!(reply.text.contains("Mention me"), "{}", reply.text);
    }

    #[tokio::test]
    async fn a_direct_message_is_answered_in_the_conversation() {
        let cb = callback(
            r#"{"type":"message","channel_type":"im","user":"U1","text":"ping","ts":"1.2","channel":"D1"}"#,
        );
        let reply = ReferenceBot.respond(&cb).await.unwrap().unwrap();
        assert_eq!((reply.channel.as_str(), reply.thread_ts), ("D1", None));
        assert!(reply.text.contains("“ping”"));
    }

    #[tokio::test]
    async fn channel_messages_and_other_events_get_no_answer() {
        let cb = callback(
            r#"{"type":"message","channel_type":"channel","user":"U1","text":"x","channel":"C1"}"#,
        );
        assert_eq!(ReferenceBot.respond(&cb).await.unwrap(), None);
        let cb = callback(r#"{"type":"reaction_added","user":"U1"}"#);
        assert_eq!(ReferenceBot.respond(&cb).await.unwrap(), None);
    }

    #[test]
    fn echo_never_pings_a_channel_or_a_group() {
        for (said, shown) in [
            ("<!channel> look", "@\u{200B}channel look"),
            ("<!here>", "@\u{200B}here"),
            ("<!everyone> hi", "@\u{200B}everyone hi"),
            (
                "ping <!subteam^S0123|@oncall> now",
                "ping @\u{200B}oncall now",
            ),
            ("<!subteam^S0123>", "@\u{200B}subteam"),
            ("<!here|here> x", "@\u{200B}here x"),
        ] {
            let echoed = echo(said);
            assert_eq!(echoed, shown, "{said}");
            assert!(!echoed.contains("<!"), "{said} -> {echoed}");
        }
        assert_eq!(echo("see <#C1|general>"), "see <#C1|general>");
        assert_eq!(echo("a <b"), "a &lt;b");
    }

    #[test]
    fn echo_strips_mentions_and_cuts_long_text() {
        assert_eq!(echo("<@U1>  hello <@U2> world "), "hello world");
        assert_eq!(echo("<@U1"), "&lt;@U1");
        let long = "é".repeat(500);
        let cut = echo(&long);
        assert_eq!(cut.chars().count(), MAX_ECHO_CHARS + 1);
        assert!(cut.ends_with('…'));
    }
}
