//! An AI agent in Slack's agent view (`features.agent_view`, the only experience for new apps
//! since 2026-06-30): suggested prompts on the Messages tab; for each DM message (its own
//! thread root) a session going processing → active, a plan of three tasks, each done once
//! (its work remembered), and the answer streamed as the model writes it, in as many parts as
//! it takes (a stream lives about 5 minutes), with feedback buttons at the end. The stop
//! button ends the answer (nothing is written after it) and leaves the session active;
//! `done` closes the session; feedback clicks are counted once each in the app's state.
//! Exactly once: a takeover after a crash, a retry or a redelivery finishes the same parts
//! (never a second answer, never a task twice or moved back).
//!
//! The model here is a deterministic stand-in, no network: the answer to `Q` is
//! `You asked: Q.` then the words `w1 w2 … wN` (N = `MODEL_WORDS`, default 40), one every
//! `MODEL_WORD_MS` milliseconds (default 50); each task takes `MODEL_TASK_MS` (default 20).
//! `STREAM_PART_MS` switches parts sooner than Slack's 5 minutes (default 240000), to see a
//! long answer without waiting. Answers longer than Slack's 3 s belong to deferred mode
//! (`WORK_QUEUE_URL`, and `assistant worker`), configured as the reference bot is.
//!
//!   SLACK_SIGNING_SECRET=dev-secret cargo run --example assistant
//!   cargo run --example assistant -- manifest      (its app manifest: the agent view)

use std::sync::Arc;
use std::time::Duration;

use slack_once::app::manifest::Manifest;
use slack_once::app::{
    AgentSessionStopped, App, AppContextChanged, AssistantThread, Ctx, Feedback, HandlerResult,
    MessageEvent, SessionStatus, Stream, StreamOptions, Task, TaskDisplay, TaskStatus,
    feedback_buttons, safe_text,
};

/// The Messages tab's suggested prompts.
const PROMPTS: [(&str, &str); 2] = [
    ("What is slack-once?", "What is slack-once?"),
    (
        "Explain exactly once",
        "How does one answer stay one answer?",
    ),
];

/// The plan: (id, title) of each task.
const TASKS: [(&str, &str); 3] = [
    ("read", "Read the question"),
    ("search", "Look it up"),
    ("write", "Write the answer"),
];

/// The feedback buttons' action id.
pub const FEEDBACK: &str = "answer_feedback";

/// The model's words, one at a time (a deterministic stand-in for an LLM's stream).
#[derive(Clone, Debug)]
pub struct Model {
    /// How many words an answer has after `You asked: Q.`.
    pub words: usize,
    /// The pause before each word.
    pub pause: Duration,
    /// How long each task's work takes.
    pub task: Duration,
    /// When an answer's part is switched for the next (Slack ends a stream after about 5
    /// minutes).
    pub part: Duration,
}

impl Model {
    /// As `MODEL_WORDS`, `MODEL_WORD_MS`, `MODEL_TASK_MS` and `STREAM_PART_MS` say.
    pub fn from_env() -> Self {
        let var = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(default)
        };
        Self {
            words: var("MODEL_WORDS", 40) as usize,
            pause: Duration::from_millis(var("MODEL_WORD_MS", 50)),
            task: Duration::from_millis(var("MODEL_TASK_MS", 20)),
            part: Duration::from_millis(var("STREAM_PART_MS", 240_000)),
        }
    }

    /// A task's work (a search, a tool call): what it found.
    async fn work(&self, task: &str, question: &str) -> String {
        tracing::info!(task, "model: working");
        tokio::time::sleep(self.task).await;
        format!("{task}: {} words", question.split_whitespace().count())
    }

    /// Answers `question`, handing each piece to `stream` as it is written; returns the whole.
    async fn answer(&self, question: &str, stream: &mut Stream) -> String {
        tracing::info!(question, "model: answering");
        let mut answer = format!("You asked: {}.", safe_text(question));
        stream.append(&answer).await;
        for n in 1..=self.words {
            if stream.stopped() {
                break;
            }
            tokio::time::sleep(self.pause).await;
            let word = format!(" w{n}");
            answer.push_str(&word);
            stream.append(&word).await;
        }
        answer
    }
}

/// The Messages tab opened: its suggested prompts (an assistant-view thread: the thread's).
async fn opened(ctx: Ctx, opened: AssistantThread) -> HandlerResult {
    match opened.thread_ts.as_deref() {
        None => {
            ctx.set_agent_prompts(&opened.channel_id, Some("Try one of these"), &PROMPTS)
                .await?
        }
        Some(ts) => {
            ctx.set_suggested_prompts(&opened.channel_id, ts, Some("Try one of these"), &PROMPTS)
                .await?
        }
    }
    Ok(())
}

async fn answer(ctx: Ctx, question: MessageEvent, model: Arc<Model>) -> HandlerResult {
    let channel = question.channel.clone();
    // Each DM message is its own thread root; a follow-up is in its thread.
    let thread = question.thread().to_string();
    if question.text.trim().eq_ignore_ascii_case("done") {
        ctx.reply("Closing this session. Ask me anything in a new message.")
            .await?;
        let closed = SessionStatus::Closed;
        ctx.set_session_status(&channel, Some(&thread), closed, None)
            .await?;
        return Ok(());
    }
    let title: String = question.text.chars().take(60).collect();
    let processing = SessionStatus::Processing;
    ctx.set_session_status(&channel, Some(&thread), processing, Some(&title))
        .await?;
    if let Some(here) = ctx.app_context().await? {
        tracing::info!(channel = here.channel(), "the person is looking at");
    }
    // The recipient: Slack asks for it outside a DM. Its team is the author's.
    let team = question.user_team().or(ctx.team());
    let recipient = question.user.as_deref().zip(team);
    let options = StreamOptions::new()
        .tasks(TaskDisplay::Plan)
        .rotate_after(model.part);
    let mut stream = ctx
        .stream_with(&channel, &thread, recipient, options)
        .await?;
    stream.plan("Answering your question").await?;
    for (id, title) in TASKS {
        stream
            .task(Task::new(id, title, TaskStatus::InProgress))
            .await?;
        // The task's work is remembered: a takeover does not do it again.
        let found = ctx
            .remember(&format!("task-{id}"), model.work(id, &question.text))
            .await?;
        stream
            .task(Task::new(id, title, TaskStatus::Complete).output(found))
            .await?;
    }
    // Streamed as written, outside `remember` (a stream's parts are steps): a takeover's
    // model writes the answer again, and the end gives each part its share of it.
    let text = model.answer(&question.text, &mut stream).await;
    let footer = vec![feedback_buttons(FEEDBACK, "Good answer", "Bad answer")];
    let stopped = stream.stopped();
    stream.finish_answer(&text, footer).await?;
    if !stopped {
        // The stream's stop made the session active already; said here for its readers.
        let active = SessionStatus::Active;
        ctx.set_session_status(&channel, Some(&thread), active, None)
            .await?;
    }
    Ok(())
}

/// The stop button: the stream is stopped by Slack already, and the answer's run writes
/// nothing more; the session is the app's to leave processing.
async fn stopped(ctx: Ctx, stop: AgentSessionStopped) -> HandlerResult {
    tracing::info!(
        streams = stop.streaming_message_ts.len(),
        "the person stopped the answer"
    );
    let active = SessionStatus::Active;
    ctx.set_session_status(&stop.channel, stop.thread_ts.as_deref(), active, None)
        .await?;
    Ok(())
}

async fn context_changed(_ctx: Ctx, change: AppContextChanged) -> HandlerResult {
    tracing::info!(
        channel = change.context.channel(),
        "the person looks elsewhere"
    );
    Ok(())
}

/// A feedback click: counted once per click in the app's state, and thanked.
async fn feedback(ctx: Ctx, click: Feedback) -> HandlerResult {
    let name = if click.positive {
        "feedback/positive"
    } else {
        "feedback/negative"
    };
    let keep = Duration::from_secs(90 * 86_400);
    ctx.state()
        .update(name, keep, |n: Option<u64>| n.unwrap_or(0) + 1)
        .await?;
    ctx.respond("Thanks for the feedback.").await?;
    Ok(())
}

pub fn app() -> App {
    app_with(Model::from_env())
}

/// The app, its model `model`.
pub fn app_with(model: Model) -> App {
    let model = Arc::new(model);
    App::new()
        .assistant_thread_started(opened)
        .assistant_message(move |ctx: Ctx, q: MessageEvent| answer(ctx, q, model.clone()))
        .agent_session_stopped(stopped)
        .app_context_changed(context_changed)
        .feedback(FEEDBACK, feedback)
        .with_manifest(
            Manifest::new("slack-once assistant")
                .message_events(["message.im"])
                .description("An AI agent that answers every question once, streamed (examples/assistant.rs).")
                .background_color("#2c2d30")
                .agent(
                    "Answers your questions once, streamed as they are written.",
                    &PROMPTS,
                ),
        )
}

fn main() -> std::process::ExitCode {
    slack_once::run(app())
}
