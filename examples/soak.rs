//! The bot the soak runs (`scripts/soak.sh`, tests/api/soak/): a listener for every kind of
//! request a bot takes, each answering with a write the soak can count in Slack:
//!
//! - a mention: a reply in its thread, with a "Helpful" button;
//! - `/once`: an ephemeral acknowledgement, then an answer in the channel through the command's
//!   `response_url`, with the same button;
//! - a click on that button: the message it sits on updated (marked), and a reply in its thread
//!   naming who clicked;
//! - the `soak_note` modal's submission: the note posted to the submitter's DM;
//! - a direct message (a question in an assistant thread): a status while the model thinks,
//!   the answer streamed into its thread, remembered, finished with its whole text, the status
//!   cleared.
//!
//! The model is a deterministic stand-in: `You asked: Q.` then `w1 … wN` (N = `MODEL_WORDS`,
//! default 6), one word every `MODEL_WORD_MS` (default 20). It is written on the API that the
//! previous release has too, so the soak's rolling deploy runs this same bot built on the
//! previous release (`scripts/previous-release.sh --example soak`) beside it built on this one.
//!
//!   SLACK_SIGNING_SECRET=dev-secret cargo run --example soak

use std::time::Duration;

use serde_json::{Value, json};
use slack_once::app::blocks::{actions, button, context, section};
use slack_once::app::{
    Ack, App, AppMention, BlockAction, Command, Ctx, HandlerResult, Message, MessageEvent, Respond,
    Stream, ViewSubmission, safe_text,
};

/// The button on the bot's answers.
pub const HELPFUL: &str = "soak_helpful";
/// The modal whose submissions are notes, and its input.
pub const NOTE: &str = "soak_note";
pub const NOTE_BLOCK: &str = "note";
pub const NOTE_INPUT: &str = "note_text";

/// An answer with the button that marks it helpful.
fn with_button(text: String) -> Message {
    Message::text(text.clone()).blocks([
        section(text),
        actions([button("Helpful", HELPFUL, "helpful")]),
    ])
}

async fn mention(ctx: Ctx, mention: AppMention) -> HandlerResult {
    let user = mention.user.as_deref().unwrap_or("there");
    let said = safe_text(&mention.text);
    ctx.reply(with_button(format!("<@{user}> asked: {said}")))
        .await?;
    Ok(())
}

async fn command(ctx: Ctx, command: Command) -> HandlerResult {
    ctx.ack(Ack::ephemeral("On it.")).await?;
    let said = safe_text(&command.text);
    let text = format!("<@{}> ran {}: {said}", command.user_id, command.command);
    ctx.respond(Respond::in_channel(with_button(text))).await?;
    Ok(())
}

async fn helpful(ctx: Ctx, action: BlockAction) -> HandlerResult {
    let (Some(channel), Some(ts)) = (action.channel_id.as_deref(), action.message_ts.as_deref())
    else {
        return Ok(());
    };
    let message = action.message.clone().unwrap_or(Value::Null);
    let text = message["text"].as_str().unwrap_or_default().to_string();
    let marked = format!("<@{}> found this helpful.", action.user_id);
    let updated = Message::text(text.clone()).blocks([section(text), context([marked.clone()])]);
    ctx.update(channel, ts, updated).await?;
    // In the thread the message is in (a mention's answer), or under it (a command's).
    let thread = message["thread_ts"].as_str().unwrap_or(ts).to_string();
    ctx.post(channel, Message::text(marked).in_thread(&thread))
        .await?;
    Ok(())
}

async fn note(ctx: Ctx, view: ViewSubmission) -> HandlerResult {
    let text = view
        .values
        .get(NOTE_BLOCK, NOTE_INPUT)
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    let Some(text) = text else {
        ctx.ack(Ack::errors([(NOTE_BLOCK, "Write something")]))
            .await?;
        return Ok(());
    };
    ctx.ack(Ack::empty()).await?;
    ctx.post(
        &view.user_id,
        format!("Saved your note: {}", safe_text(&text)),
    )
    .await?;
    Ok(())
}

/// The model: its words one at a time into `stream`; the whole answer.
async fn model(question: &str, stream: &mut Stream) -> String {
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(default)
    };
    let (words, pause) = (var("MODEL_WORDS", 6), var("MODEL_WORD_MS", 20));
    let mut answer = format!("You asked: {}.", safe_text(question));
    stream.append(&answer).await;
    for n in 1..=words {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let word = format!(" w{n}");
        answer.push_str(&word);
        stream.append(&word).await;
    }
    answer
}

async fn question(ctx: Ctx, question: MessageEvent) -> HandlerResult {
    let channel = question.channel.clone();
    let thread = question.thread().to_string();
    ctx.set_status(&channel, &thread, "is thinking…", &[])
        .await?;
    let team = question.user_team().or(ctx.team());
    let recipient = question.user.as_deref().zip(team);
    let mut stream = ctx.stream(&channel, &thread, recipient).await?;
    let text = ctx
        .remember("answer", model(&question.text, &mut stream))
        .await?;
    let blocks = vec![json!({"type": "markdown", "text": text})];
    stream.finish(&text, Some(blocks)).await?;
    ctx.set_status(&channel, &thread, "", &[]).await?;
    Ok(())
}

pub fn app() -> App {
    App::new()
        .app_mention(mention)
        .command("/once", command)
        .action(HELPFUL, helpful)
        .view_submission(NOTE, note)
        .assistant_message(question)
}

fn main() -> std::process::ExitCode {
    slack_once::run(app())
}
