//! An AI assistant in Slack's legacy assistant view (`features.assistant_view`: apps made
//! before 2026-06-30 may stay on it; `examples/assistant.rs` is the agent view's): suggested
//! prompts when a thread starts; for each question, a status while
//! the model thinks, the answer streamed into the question's thread as the model writes it,
//! and, at the end, the whole answer with feedback buttons. Exactly once: a takeover after a
//! crash, a retry or a redelivery finishes the one stream (never a second answer), and reuses
//! the model's answer once it is remembered (the model is not asked twice).
//!
//! The model here is a deterministic stand-in, no network: the answer to `Q` is
//! `You asked: Q.` then the words `w1 w2 … wN` (N = `MODEL_WORDS`, default 40), one every
//! `MODEL_WORD_MS` milliseconds (default 50). Answers longer than Slack's 3 s belong to deferred
//! mode (`WORK_QUEUE_URL`, and `assistant worker`), configured as the reference bot is.
//!
//!   SLACK_SIGNING_SECRET=dev-secret cargo run --example assistant_view

use std::time::Duration;

use serde_json::{Value, json};
use slack_once::app::{App, AssistantThread, Ctx, HandlerResult, MessageEvent, Stream, safe_text};

/// The model's words, one at a time (a deterministic stand-in for an LLM's stream).
struct Model {
    words: usize,
    pause: Duration,
}

impl Model {
    fn from_env() -> Self {
        let var = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(default)
        };
        Self {
            words: var("MODEL_WORDS", 40) as usize,
            pause: Duration::from_millis(var("MODEL_WORD_MS", 50)),
        }
    }

    /// Answers `question`, handing each piece to `stream` as it is written; returns the whole.
    async fn answer(&self, question: &str, stream: &mut Stream) -> String {
        tracing::info!(question, "model: answering");
        let mut answer = format!("You asked: {}.", safe_text(question));
        stream.append(&answer).await;
        for n in 1..=self.words {
            tokio::time::sleep(self.pause).await;
            let word = format!(" w{n}");
            answer.push_str(&word);
            stream.append(&word).await;
        }
        answer
    }
}

fn feedback() -> Value {
    json!({"type": "context_actions", "elements": [{
        "type": "feedback_buttons", "action_id": "feedback",
        "positive_button": {"text": {"type": "plain_text", "text": "Good answer"}, "value": "good"},
        "negative_button": {"text": {"type": "plain_text", "text": "Bad answer"}, "value": "bad"}
    }]})
}

async fn thread_started(ctx: Ctx, thread: AssistantThread) -> HandlerResult {
    let Some(thread_ts) = thread.thread_ts.as_deref() else {
        // The agent view's DM was opened: its threads start with the user's first message.
        tracing::info!(channel = thread.channel_id, "agent view opened");
        return Ok(());
    };
    ctx.set_suggested_prompts(
        &thread.channel_id,
        thread_ts,
        Some("Try one of these"),
        &[
            ("What is slack-once?", "What is slack-once?"),
            (
                "Explain exactly once",
                "How does one answer stay one answer?",
            ),
        ],
    )
    .await?;
    Ok(())
}

async fn answer(ctx: Ctx, question: MessageEvent) -> HandlerResult {
    let model = Model::from_env();
    let channel = question.channel.clone();
    // In the question's thread (a DM question outside one gets a thread under it).
    let thread = question.thread().to_string();
    ctx.set_status(
        &channel,
        &thread,
        "is thinking…",
        &["Reading your question…", "Writing…"],
    )
    .await?;
    // The recipient: Slack asks for it outside a DM, and some workspaces in DMs too. Its team
    // is the author's (another organisation's in a Slack Connect conversation).
    let team = question.user_team().or(ctx.team());
    let recipient = question.user.as_deref().zip(team);
    let mut stream = ctx.stream(&channel, &thread, recipient).await?;
    let text = ctx
        .remember("answer", model.answer(&question.text, &mut stream))
        .await?;
    stream
        .finish(&text, Some(vec![markdown(&text), feedback()]))
        .await?;
    ctx.set_status(&channel, &thread, "", &[]).await?;
    Ok(())
}

/// The answer as a `markdown` block (up to 12,000 characters, rendered as the model wrote it;
/// a `section` holds 3,000).
fn markdown(text: &str) -> Value {
    json!({"type": "markdown", "text": text})
}

pub fn app() -> App {
    App::new()
        .assistant_thread_started(thread_started)
        .assistant_message(answer)
}

fn main() -> std::process::ExitCode {
    slack_once::run(app())
}
