//! A poll: `/poll Lunch? | Pizza | Sushi | Salad` posts the question with a button per option;
//! each click counts (or moves) the clicker's vote; "Close" (only for the poll's author) opens a
//! modal whose submission closes the poll with its results; a mention of the bot with "polls"
//! says how many are open. Its votes live in the app's state ([`Ctx::state`]), not in the
//! buttons: two people voting at once are both counted (a write conditioned on the version
//! read, read again on a conflict), and a click run again (a retry, a takeover, a redelivery)
//! counts once.
//!
//!   SLACK_SIGNING_SECRET=dev-secret cargo run --example poll

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use slack_once::app::blocks::{self, Style};
use slack_once::app::{
    Ack, App, BlockAction, Command, Ctx, HandlerResult, Message, MessageEvent, ViewSubmission,
    safe_text,
};

pub const COMMAND: &str = "/poll";
pub const VOTE: &str = "poll_vote";
pub const CLOSE: &str = "poll_close";
pub const CLOSE_VIEW: &str = "poll_close_view";
/// The state name of the list of the workspace's open polls: [`Ctx::state`]'s names are each
/// workspace's own, so one name serves every workspace the app is installed in.
pub const OPEN_POLLS: &str = "open-polls";
/// At most this many polls are listed open per workspace (the newest): a state value stays
/// well under its 64 KiB however many polls are never closed.
pub const MAX_LISTED: usize = 500;

/// A poll in the workspace's open list, until it is closed or its creation is a TTL old.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Listed {
    pub name: String,
    /// When it leaves the list unless closed before (epoch ms).
    pub until_ms: u64,
}

/// `open` without the polls past their time, with `name` added (until `until_ms`), the newest
/// [`MAX_LISTED`] kept.
pub fn listed(open: Option<Vec<Listed>>, name: &str, now_ms: u64, until_ms: u64) -> Vec<Listed> {
    let mut open = open.unwrap_or_default();
    open.retain(|l| l.until_ms > now_ms && l.name != name);
    open.push(Listed {
        name: name.to_string(),
        until_ms,
    });
    let excess = open.len().saturating_sub(MAX_LISTED);
    open.drain(..excess);
    open
}
/// How long a poll is kept after its latest vote.
pub const TTL: Duration = Duration::from_secs(30 * 86_400);

/// A poll, as the app's state keeps it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Poll {
    pub question: String,
    pub options: Vec<String>,
    pub author: String,
    /// Each voter's option.
    pub votes: BTreeMap<String, usize>,
    pub closed: bool,
}

impl Poll {
    pub fn count(&self, option: usize) -> usize {
        self.votes.values().filter(|&&v| v == option).count()
    }

    /// The poll's message: the question, a button per option with its count, and Close; once
    /// closed, the results without buttons.
    pub fn message(&self, name: &str) -> Message {
        let question = safe_text(&self.question);
        let tally: Vec<String> = (0..self.options.len())
            .map(|i| format!("{}: {}", safe_text(&self.options[i]), self.count(i)))
            .collect();
        let text = format!("{question} ({} votes)", self.votes.len());
        if self.closed {
            return Message::text(format!("Closed: {text}")).blocks([
                blocks::section(format!("*Closed:* {question}")),
                blocks::context(tally),
            ]);
        }
        let buttons = self.options.iter().enumerate().map(|(i, option)| {
            let label = format!("{} ({})", option, self.count(i));
            blocks::styled(
                blocks::button(label, VOTE, format!("{name} {i}")),
                Style::Primary,
            )
        });
        let close = blocks::styled(blocks::button("Close", CLOSE, name), Style::Danger);
        Message::text(text.clone()).blocks([
            blocks::section(format!("*{question}*")),
            blocks::with_block_id(blocks::actions(buttons), format!("options-{name}")),
            blocks::with_block_id(blocks::actions([close]), format!("close-{name}")),
            blocks::context([format!("{} votes", self.votes.len())]),
        ])
    }
}

async fn create(ctx: Ctx, command: Command) -> HandlerResult {
    let parts: Vec<String> = command
        .text
        .split('|')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    if parts.len() < 3 || parts.len() > 11 {
        ctx.ack(Ack::ephemeral(
            "Usage: /poll Question | option | option (2 to 10 options)",
        ))
        .await?;
        return Ok(());
    }
    ctx.ack(Ack::ephemeral("Poll posted.")).await?;
    let poll = Poll {
        question: parts[0].clone(),
        options: parts[1..].to_vec(),
        author: command.user_id.clone(),
        ..Poll::default()
    };
    // Named by the command (its ledger key): kept before it is posted, so that every click on
    // a posted poll finds it.
    let name = format!("poll-{}", ctx.event_id());
    let state = ctx.state();
    state
        .update(&name, TTL, |_: Option<Poll>| poll.clone())
        .await?;
    let now_ms = now_ms();
    let until_ms = now_ms + TTL.as_millis() as u64;
    state
        .update(OPEN_POLLS, TTL, |open: Option<Vec<Listed>>| {
            listed(open, &name, now_ms, until_ms)
        })
        .await?;
    ctx.post(&command.channel_id, poll.message(&name)).await?;
    Ok(())
}

/// Shows `poll` in its message; then, should another vote have come in meanwhile (whose own
/// update may have landed first), shows the newer one: the message ends with the latest.
async fn show(ctx: &Ctx, name: &str, channel: &str, ts: &str, mut poll: Poll) -> HandlerResult {
    for _ in 0..3 {
        ctx.update(channel, ts, poll.message(name)).await?;
        match ctx.state().get::<Poll>(name).await? {
            Some(latest) if latest.value != poll => poll = latest.value,
            _ => break,
        }
    }
    Ok(())
}

async fn vote(ctx: Ctx, click: BlockAction) -> HandlerResult {
    let (Some(channel), Some(ts)) = (click.channel_id.clone(), click.message_ts.clone()) else {
        return Ok(());
    };
    let Some((name, option)) = click.value.as_deref().and_then(|v| v.rsplit_once(' ')) else {
        return Ok(());
    };
    let (name, Ok(option)) = (name.to_string(), option.parse::<usize>()) else {
        return Ok(());
    };
    let Some(poll) = ctx.state().get::<Poll>(&name).await? else {
        return Ok(()); // not kept yet, or past its TTL
    };
    if poll.value.closed || option >= poll.value.options.len() {
        return Ok(());
    }
    let (voter, read) = (click.user_id.clone(), poll.value);
    let poll = ctx
        .state()
        .update(&name, TTL, |poll: Option<Poll>| {
            // Gone since it was read (past its TTL): the poll as read, with this vote.
            let mut poll = poll.unwrap_or_else(|| read.clone());
            if !poll.closed {
                poll.votes.insert(voter.clone(), option);
            }
            poll
        })
        .await?;
    show(&ctx, &name, &channel, &ts, poll).await
}

async fn ask_to_close(ctx: Ctx, click: BlockAction) -> HandlerResult {
    let Some(name) = click.value.clone() else {
        return Ok(());
    };
    let Some(poll) = ctx.state().get::<Poll>(&name).await? else {
        return Ok(());
    };
    if poll.value.author != click.user_id {
        ctx.respond(slack_once::app::Respond::ephemeral(
            "Only the poll's author can close it.",
        ))
        .await?;
        return Ok(());
    }
    let note = blocks::input("note", "A last word", blocks::text_input("note_text"));
    let (Some(channel), Some(ts)) = (click.channel_id, click.message_ts) else {
        return Ok(());
    };
    let view = blocks::modal(
        CLOSE_VIEW,
        "Close the poll",
        "Close",
        [blocks::optional(note)],
    )
    .with_metadata(format!("{name} {channel} {ts}"));
    ctx.open_view(view).await?;
    Ok(())
}

async fn close(ctx: Ctx, view: ViewSubmission) -> HandlerResult {
    let metadata = view.private_metadata.clone().unwrap_or_default();
    let [name, channel, ts] = metadata.split(' ').collect::<Vec<_>>()[..] else {
        return Ok(());
    };
    let name = name.to_string();
    ctx.ack(Ack::empty()).await?;
    let state = ctx.state();
    match state.get::<Poll>(&name).await? {
        Some(poll) if poll.value.author == view.user_id => {}
        _ => return Ok(()), // gone (past its TTL), or not the author's
    }
    let poll = state
        .update(&name, TTL, |poll: Option<Poll>| {
            let mut poll = poll.unwrap_or_default();
            poll.closed = true;
            poll
        })
        .await?;
    state
        .update(OPEN_POLLS, TTL, |open: Option<Vec<Listed>>| {
            let mut open = open.unwrap_or_default();
            open.retain(|l| l.name != name);
            open
        })
        .await?;
    ctx.update(channel, ts, poll.message(&name)).await?;
    Ok(())
}

async fn count_open(ctx: Ctx, _mention: MessageEvent) -> HandlerResult {
    let open = ctx.state().get::<Vec<Listed>>(OPEN_POLLS).await?;
    let now_ms = now_ms();
    let n = open.map_or(0, |open| {
        open.value.iter().filter(|l| l.until_ms > now_ms).count()
    });
    ctx.reply(format!("{n} open polls.")).await?;
    Ok(())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub fn app() -> App {
    App::new()
        .command(COMMAND, create)
        .action(VOTE, vote)
        .action(CLOSE, ask_to_close)
        .view_submission(CLOSE_VIEW, close)
        .message_where(
            |m: &MessageEvent| m.mention && m.text.contains("polls"),
            count_open,
        )
}

#[allow(dead_code)]
fn main() -> std::process::ExitCode {
    slack_once::run(app())
}
