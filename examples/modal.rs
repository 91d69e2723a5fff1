//! A modal: the global shortcut `new_note` opens it (before the acknowledgement: its
//! `trigger_id` lives 3 s), its submission is validated (an empty title keeps the modal open
//! with an error under the field), and a valid note is posted to the user's DM, once, however
//! many times the submission arrives (a double-click, a queue's redelivery, a crash and a
//! takeover). Runs in both modes; in deferred mode the post is made by a worker.
//!
//!   SLACK_SIGNING_SECRET=dev-secret cargo run --example modal

use serde_json::{Value, json};
use slack_once::app::{Ack, App, Ctx, Shortcut, ViewSubmission, safe_text};

/// The modal's `callback_id`, and its input's block and action.
pub const CALLBACK: &str = "note_modal";
pub const TITLE_BLOCK: &str = "title";
pub const TITLE_INPUT: &str = "title_input";

fn modal() -> Value {
    json!({
        "type": "modal",
        "callback_id": CALLBACK,
        "title": {"type": "plain_text", "text": "New note"},
        "submit": {"type": "plain_text", "text": "Save"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [{
            "type": "input",
            "block_id": TITLE_BLOCK,
            "optional": true,
            "label": {"type": "plain_text", "text": "Title"},
            "element": {"type": "plain_text_input", "action_id": TITLE_INPUT}
        }]
    })
}

pub fn app() -> App {
    App::new()
        .shortcut("new_note", |ctx: Ctx, _shortcut: Shortcut| async move {
            // The trigger_id is spent here, while Slack waits; then the acknowledgement.
            ctx.open_view(modal()).await?;
            ctx.ack(Ack::empty()).await?;
            Ok(())
        })
        .view_submission(CALLBACK, |ctx: Ctx, view: ViewSubmission| async move {
            let title = view
                .values
                .get(TITLE_BLOCK, TITLE_INPUT)
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty());
            let Some(title) = title else {
                // The modal stays open; the submission is not taken.
                ctx.ack(Ack::errors([(TITLE_BLOCK, "Give the note a title")]))
                    .await?;
                return Ok(());
            };
            ctx.ack(Ack::empty()).await?;
            ctx.post(
                &view.user_id,
                format!("Saved your note “{}”.", safe_text(&title)),
            )
            .await?;
            Ok(())
        })
}

fn main() -> std::process::ExitCode {
    slack_once::run(app())
}
