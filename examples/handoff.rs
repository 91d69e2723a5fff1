//! An on-call handoff: `/handoff @person notes` hands the channel's on-call duty to that
//! person, keeps the channel's rota in the app's state and posts the handoff with two buttons.
//! Acknowledge is for the incoming person only, and the first click wins (a double click, two
//! tabs, a click retried: one acknowledgement, the others told who was first); Escalate asks
//! for a confirmation, then opens a modal whose submission posts the reason in the handoff's
//! thread. A mention asking who is on call answers from the rota. If Slack refuses the
//! handoff's post for good (the bot is not in the channel), the person is told so, privately.
//!
//! The manifest's `/handoff` command needs `should_escape: true`, so that `@person` arrives as
//! `<@U…|name>` (an id), not as the name someone typed.
//!
//!   SLACK_SIGNING_SECRET=dev-secret cargo run --example handoff

use std::time::Duration;

use serde::{Deserialize, Serialize};
use slack_once::app::blocks::{self, Style};
use slack_once::app::{
    Ack, App, AppMention, BlockAction, Command, Ctx, Error, HandlerResult, Message, Respond,
    ViewSubmission, safe_text,
};

pub const COMMAND: &str = "/handoff";
pub const ACKNOWLEDGE: &str = "handoff_acknowledge";
pub const ESCALATE: &str = "handoff_escalate";
pub const ESCALATE_VIEW: &str = "handoff_escalate_view";
pub const REASON_BLOCK: &str = "reason";
pub const REASON_INPUT: &str = "reason_text";
/// A channel's rota is kept this long after its latest change.
pub const TTL: Duration = Duration::from_secs(30 * 86_400);
/// A rota keeps its latest handoffs.
pub const KEPT: usize = 50;

/// One handoff, as the rota keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    /// The command's id (its ledger key): one handoff per command, however often it runs.
    pub id: String,
    pub from: String,
    pub to: String,
    pub notes: String,
    /// When it was handed off (epoch seconds).
    pub at_s: u64,
    /// Who acknowledged it, and when (epoch seconds).
    pub acknowledged: Option<(String, u64)>,
}

/// The state name of a channel's rota (each workspace's own, as every [`Ctx::state`] name).
pub fn rota(channel: &str) -> String {
    format!("rota-{channel}")
}

/// `<@U123|name> the notes` (or `<@U123> the notes`): the person's id and the notes.
pub fn person_and_notes(text: &str) -> Option<(String, String)> {
    let rest = text.trim().strip_prefix("<@")?;
    let (inside, notes) = rest.split_once('>')?;
    let id = inside.split('|').next()?.trim();
    let ok = id.starts_with(['U', 'W']) && id.chars().all(|c| c.is_ascii_alphanumeric());
    ok.then(|| (id.to_string(), notes.trim().to_string()))
}

/// A time as Slack shows it in each reader's time zone.
fn when(at_s: u64) -> String {
    format!("<!date^{at_s}^{{date_short_pretty}} at {{time}}|{at_s}>")
}

/// The handoff's message: who is on call, since when, the notes; the buttons until it is
/// acknowledged, then who acknowledged it.
pub fn message(h: &Handoff) -> Message {
    let head = format!(
        "<@{}> is on call, handed off by <@{}> {}.",
        h.to,
        h.from,
        when(h.at_s)
    );
    let notes = match h.notes.as_str() {
        "" => String::new(),
        notes => format!("\n>{}", safe_text(notes)),
    };
    let escalate = blocks::confirmed(
        blocks::button("Escalate", ESCALATE, &h.id),
        "Escalate this handoff?",
        "You will be asked why; the reason is posted in the thread.",
        "Escalate",
        "Cancel",
    );
    let buttons = match &h.acknowledged {
        None => vec![
            blocks::styled(
                blocks::button("Acknowledge", ACKNOWLEDGE, &h.id),
                Style::Primary,
            ),
            escalate,
        ],
        Some(_) => vec![escalate],
    };
    let mut shown = vec![
        blocks::section(format!("{head}{notes}")),
        blocks::with_block_id(blocks::actions(buttons), format!("handoff-{}", h.id)),
    ];
    if let Some((by, at_s)) = &h.acknowledged {
        shown.push(blocks::context([format!(
            "Acknowledged by <@{by}> {}",
            when(*at_s)
        )]));
    }
    Message::text(head).blocks(shown)
}

async fn hand_off(ctx: Ctx, command: Command) -> HandlerResult {
    let Some((to, notes)) = person_and_notes(&command.text) else {
        ctx.ack(Ack::ephemeral(
            "Usage: /handoff @person what they need to know",
        ))
        .await?;
        return Ok(());
    };
    ctx.ack(Ack::empty()).await?;
    let handoff = Handoff {
        id: ctx.event_id().to_string(),
        from: command.user_id.clone(),
        to,
        notes,
        at_s: slack_once::clock::now_ms() / 1000,
        acknowledged: None,
    };
    let channel = command.channel_id.clone();
    ctx.state()
        .update(&rota(&channel), TTL, |rota: Option<Vec<Handoff>>| {
            let mut rota = rota.unwrap_or_default();
            rota.push(handoff.clone());
            let excess = rota.len().saturating_sub(KEPT);
            rota.drain(..excess);
            rota
        })
        .await?;
    match ctx.post(&channel, message(&handoff)).await {
        Ok(_) => Ok(()),
        // Refused for good (not in the channel, an archived channel): tell the person.
        Err(Error::Slack(e)) if e.is_permanent() => {
            let code = e.code().unwrap_or("refused").to_string();
            ctx.respond(Respond::ephemeral(format!(
                "I could not post the handoff here (`{code}`): invite me to the channel and \
                 hand off again."
            )))
            .await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

async fn acknowledge(ctx: Ctx, click: BlockAction) -> HandlerResult {
    let (Some(channel), Some(ts), Some(id)) = (&click.channel_id, &click.message_ts, &click.value)
    else {
        return Ok(());
    };
    let me = click.user_id.clone();
    let name = rota(channel);
    let current = ctx.state().get::<Vec<Handoff>>(&name).await?;
    let Some(handoff) = current.and_then(|r| r.value.into_iter().find(|h| &h.id == id)) else {
        ctx.respond(Respond::ephemeral("This handoff is no longer in the rota."))
            .await?;
        return Ok(());
    };
    if handoff.to != me {
        let text = format!("Only <@{}> can acknowledge this handoff.", handoff.to);
        ctx.respond(Respond::ephemeral(text)).await?;
        return Ok(());
    }
    let now_s = slack_once::clock::now_ms() / 1000;
    // The first click wins: the change is made only where nobody acknowledged it yet.
    let taken = ctx
        .state()
        .change(&name, TTL, |rota: Option<Vec<Handoff>>| {
            let mut rota = rota?;
            let h = rota.iter_mut().find(|h| &h.id == id)?;
            if h.acknowledged.is_some() {
                return None;
            }
            h.acknowledged = Some((me.clone(), now_s));
            Some(rota)
        })
        .await?;
    let handoff = taken
        .value
        .and_then(|r| r.into_iter().find(|h| &h.id == id));
    match (taken.applied, handoff) {
        (true, Some(h)) => {
            ctx.update(channel, ts, message(&h)).await?;
        }
        (false, Some(h)) if h.acknowledged.is_some() => {
            // The click that acknowledged it may have died before it showed it (a click is
            // sent once): a message still offering Acknowledge is shown as it is.
            let stale = click
                .message
                .as_ref()
                .is_some_and(|m| m.to_string().contains(ACKNOWLEDGE));
            if stale {
                ctx.update(channel, ts, message(&h)).await?;
            }
            let (by, at_s) = h.acknowledged.clone().unwrap_or_default();
            let text = format!("<@{by}> acknowledged it already, {}.", when(at_s));
            ctx.respond(Respond::ephemeral(text)).await?;
        }
        _ => {
            ctx.respond(Respond::ephemeral("This handoff is no longer in the rota."))
                .await?;
        }
    }
    Ok(())
}

async fn escalate(ctx: Ctx, click: BlockAction) -> HandlerResult {
    let (Some(channel), Some(ts)) = (&click.channel_id, &click.message_ts) else {
        return Ok(());
    };
    let reason = blocks::input(
        REASON_BLOCK,
        "Why escalate?",
        blocks::text_area(REASON_INPUT),
    );
    let view = blocks::modal(ESCALATE_VIEW, "Escalate", "Escalate", [reason])
        .with_metadata(format!("{channel} {ts}"));
    // The trigger_id lives 3 s: the modal opens while Slack waits.
    ctx.open_view(view).await?;
    Ok(())
}

async fn escalated(ctx: Ctx, view: ViewSubmission) -> HandlerResult {
    let reason = view
        .values
        .get(REASON_BLOCK, REASON_INPUT)
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty());
    let Some(reason) = reason else {
        ctx.ack(Ack::errors([(REASON_BLOCK, "Say why")])).await?;
        return Ok(());
    };
    ctx.ack(Ack::empty()).await?;
    let metadata = view.private_metadata.unwrap_or_default();
    let Some((channel, ts)) = metadata.split_once(' ') else {
        return Ok(());
    };
    let text = format!("<@{}> escalated: {}", view.user_id, safe_text(&reason));
    ctx.post(channel, Message::text(text).in_thread(ts)).await?;
    Ok(())
}

async fn who_is_on_call(ctx: Ctx, mention: AppMention) -> HandlerResult {
    let rota = ctx
        .state()
        .get::<Vec<Handoff>>(&rota(&mention.channel))
        .await?;
    let text = match rota.and_then(|r| r.value.last().cloned()) {
        Some(h) => format!(
            "<@{}> is on call here, since {}{}.",
            h.to,
            when(h.at_s),
            match &h.acknowledged {
                Some(_) => "",
                None => " (not acknowledged yet)",
            }
        ),
        None => "Nobody has been handed the on-call here yet: `/handoff @person notes`.".into(),
    };
    ctx.reply(text).await?;
    Ok(())
}

pub fn app() -> App {
    App::new()
        .command(COMMAND, hand_off)
        .action(ACKNOWLEDGE, acknowledge)
        .action(ESCALATE, escalate)
        .view_submission(ESCALATE_VIEW, escalated)
        .app_mention(who_is_on_call)
}

fn main() -> std::process::ExitCode {
    slack_once::run(app())
}
