//! Streamed answers (`chat.startStream`, `chat.appendStream`, `chat.stopStream`), exactly once,
//! with plans and tasks, and answers longer than a stream lives.
//!
//! The stream's start is a journaled step whose `ts` is written to the ledger as soon as Slack
//! answers, so a later run (a takeover after a crash, a redelivery) never starts a second one:
//! it finds the stream in the journal (or, if the start's answer was lost, among the app's
//! messages of the thread in the claim's window: a stream carries no metadata until stopped).
//! Text appends are buffered and not journaled one by one; a plan's title, a task's update and
//! a blocks chunk are each a journaled step ([`Stream::plan`], [`Stream::task`],
//! [`Stream::blocks`]), made once across takeovers, and a task never moves back.
//!
//! **Parts.** Slack ends a stream by itself about 5 minutes after its start
//! (`message_not_in_streaming_state`, earlier when it idles). An answer that runs longer goes
//! on in a new stream in the same thread, a *part*: when the current part is older than
//! [`StreamOptions::rotate_after`] (4 minutes), holds [`PART_CHARS`] characters, or Slack
//! ended it, the part is stopped and marked with slack-once's names (two journaled steps) and
//! the next is started (a journaled step carrying the plan so far). The journal knows each
//! part's message: a takeover after a switch replays the switch, never starting a part twice;
//! and a takeover switches where the part's age or size calls for it, as the crashed run
//! would have, never for the crash alone: a short answer a crash interrupted ends as one
//! message.
//!
//! **The end** ([`Stream::finish`], [`Stream::finish_answer`]): the last part stopped, then
//! every part replaced with its share of the final text (`chat.update`), the plan as a `plan`
//! block at the top of the first: so whatever ran or crashed before, the thread holds the
//! answer once, in order, without a gap. A reader may see, during a takeover, the words the
//! crashed run had appended, then the whole answer at once. A start Slack refuses for its
//! recipient (a Slack Connect author) is recorded as refused, and the answer is then one
//! journaled post, made at the end.
//!
//! **A stop.** A person who presses the session's stop button (`agent_session_stopped`, kept
//! beside the claims, the app's) or whose stream Slack answers `stopped_by_user` ends the
//! answer: nothing is appended, started, stopped or updated after it, on any instance. A stop
//! is the answer's whose stream it names (`streaming_message_ts`: the streams Slack stopped);
//! another answer in the same thread goes on. A stop that names none (no stream was active)
//! ends every answer of the thread asked before it. A run learns of a stop at the latest at
//! each switch and at the end, where the stream reads the stop's note (a remembered step, so
//! every later run takes the same way).

use std::time::Duration;

use serde_json::{Value, json};

use super::agent::{Task, TaskDisplay};
use super::{Ctx, Error, Message};
use crate::journal::{Returns, Settle};
use crate::slack::{Args, SlackError, post_metadata};

/// Appends are sent once this many characters are buffered (Slack's SDKs use 256), keeping
/// within `chat.appendStream`'s rate tier.
pub const APPEND_BUFFER_CHARS: usize = 256;
/// An append waits at most this long for Slack (within the claim's deadline). An append is not
/// a step: one that hangs ends the appending to this part, and the end replaces the message
/// with its share of the answer, so neither the answer nor the listener waits on it until the
/// lease ends.
pub const APPEND_TIMEOUT: Duration = Duration::from_secs(2);
/// A part holds at most this many characters of the answer (a `markdown` block holds 12,000):
/// past it, the answer goes on in a new part.
pub const PART_CHARS: usize = 10_000;
/// A part is switched for a new one this long after it started, before Slack ends it (about
/// 5 minutes).
pub const ROTATE_AFTER: Duration = Duration::from_secs(240);

/// How long a switch waits for a stop's event where Slack ended a part it was still taking
/// text for (the event trails Slack's own stop), before it starts the next part.
pub const STOP_EVENT_GRACE: Duration = Duration::from_secs(1);

/// `chat.startStream`'s answer to a recipient it cannot resolve for this app (an author of
/// another organisation in a Slack Connect conversation).
const RECIPIENT_REFUSED: &str = "user_not_found";
const EXPIRED: &str = "message_not_in_streaming_state";
const STOPPED: &str = "stopped_by_user";

/// How a stream is started: [`Ctx::stream_with`].
#[derive(Clone, Debug)]
pub struct StreamOptions {
    tasks: Option<TaskDisplay>,
    rotate_after: Duration,
}

impl Default for StreamOptions {
    fn default() -> Self {
        Self {
            tasks: None,
            rotate_after: ROTATE_AFTER,
        }
    }
}

impl StreamOptions {
    /// Slack's defaults; parts switched after 4 minutes.
    pub fn new() -> Self {
        Self::default()
    }

    /// How the stream shows its tasks (`task_display_mode`).
    pub fn tasks(mut self, display: TaskDisplay) -> Self {
        self.tasks = Some(display);
        self
    }

    /// Switch to a new part this long after a part started (default 4 minutes; keep it
    /// below Slack's 5 minutes by more than a model's pause between words).
    pub fn rotate_after(mut self, after: Duration) -> Self {
        self.rotate_after = after;
        self
    }
}

/// One message of a streamed answer.
#[derive(Debug, Clone)]
struct Part {
    ts: String,
    /// The start's step: the finished message is marked with it.
    step: u32,
    /// Where its share of the answer begins (characters appended by this run before it).
    from: usize,
    /// Epoch ms of its start (its `ts`).
    started_ms: u64,
    /// This run started it, and Slack takes its appends: text goes to it.
    live: bool,
    /// Slack no longer takes appends to it (expired, or stopped), as far as this run heard.
    ended: bool,
    /// An append to it failed (a 429, a timeout): no more text goes to it (the end writes
    /// its share), and no switch is made for it.
    muted: bool,
    /// This run replaced it with its share (at a switch), from `from` to the next part's.
    written: bool,
    /// Blocks chunks streamed into it, kept for its final form.
    blocks: Vec<Value>,
}

/// A streamed answer in a thread: [`Ctx::stream`].
#[derive(Debug)]
pub struct Stream {
    ctx: Ctx,
    /// The conversation the stream's thread is in.
    pub channel: String,
    /// The (first) streamed message; empty when Slack refused the recipient and the answer is
    /// posted whole by [`Stream::finish`] instead.
    pub ts: String,
    thread_ts: String,
    recipient: Option<(String, String)>,
    options: StreamOptions,
    parts: Vec<Part>,
    buffer: String,
    /// Characters of the answer appended by this run.
    appended: usize,
    /// What this run appended (a part's share at a switch).
    text: String,
    plan: Option<String>,
    tasks: Vec<Task>,
    /// A person stopped the answer: nothing more is written.
    stopped: bool,
    /// Slack answered an append `stopped_by_user`: the next check reads the stop.
    stop_hint: bool,
    /// An earlier run may have started it and Slack cannot show whether (its start settled
    /// unconfirmed): neither appended to, nor finished, nor posted whole (that could be a
    /// second answer); the request ends `failed` (`unconfirmed_write`).
    unconfirmed: bool,
    /// Slack refused the stream's recipient: no stream, the answer posted whole at the end.
    refused: bool,
    /// A step of the stream failed while text was appended (a switch): nothing more is
    /// made, and the next step, or the end, fails with it (a retry settles it).
    failed: Option<Error>,
}

fn epoch_ms_of(ts: &str) -> u64 {
    crate::clock::ts_ms(ts).unwrap_or_else(crate::clock::now_ms)
}

fn slice(text: &str, from: usize, to: Option<usize>) -> String {
    let part: String = match to {
        Some(to) => text
            .chars()
            .skip(from)
            .take(to.saturating_sub(from))
            .collect(),
        None => text.chars().skip(from).collect(),
    };
    if part.trim().is_empty() {
        "…".to_string()
    } else {
        part
    }
}

/// Streamed answers (`chat.startStream`, `appendStream`, `stopStream`), in parts, with plans
/// and tasks: one whole answer per request, whoever finishes it.
impl Ctx {
    /// Starts a streamed reply in the thread `thread_ts` of `channel` (`chat.startStream`).
    /// `recipient` (user, and the user's team) is required outside a DM. A recipient Slack
    /// refuses (`user_not_found`, as for a Slack Connect author of another organisation)
    /// starts no stream: appends do nothing and [`Stream::finish`] posts the whole answer in
    /// the thread. See the module's documentation for how a later run finishes the same stream.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent};
    ///
    /// let _app = App::new().assistant_message(|ctx: Ctx, q: MessageEvent| async move {
    ///     // Outside a DM Slack asks for the recipient: the author, and the author's team.
    ///     let recipient = q.user.as_deref().zip(q.user_team().or(ctx.team()));
    ///     let mut stream = ctx.stream(&q.channel, q.thread(), recipient).await?;
    ///     stream.append("Looking that up… ").await;
    ///     stream.finish("Deploys run at 10:00 and 15:00 UTC.", None).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn stream(
        &self,
        channel: &str,
        thread_ts: &str,
        recipient: Option<(&str, &str)>,
    ) -> Result<Stream, Error> {
        self.stream_with(channel, thread_ts, recipient, StreamOptions::default())
            .await
    }

    /// As [`Ctx::stream`], with `options`: how tasks are shown, when a part is switched.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent, StreamOptions, Task, TaskDisplay, TaskStatus};
    ///
    /// let _app = App::new().assistant_message(|ctx: Ctx, q: MessageEvent| async move {
    ///     let options = StreamOptions::new().tasks(TaskDisplay::Plan);
    ///     let mut stream = ctx.stream_with(&q.channel, q.thread(), None, options).await?;
    ///     stream.plan("Looking it up").await?;
    ///     stream.task(Task::new("docs", "Read the runbook", TaskStatus::InProgress)).await?;
    ///     stream.task(Task::new("docs", "Read the runbook", TaskStatus::Complete)).await?;
    ///     let answer = "Deploys run at 10:00 and 15:00 UTC.";
    ///     stream.append(answer).await;
    ///     stream.finish_answer(answer, vec![]).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn stream_with(
        &self,
        channel: &str,
        thread_ts: &str,
        recipient: Option<(&str, &str)>,
        options: StreamOptions,
    ) -> Result<Stream, Error> {
        let mut stream = Stream {
            ctx: self.clone(),
            channel: channel.to_string(),
            ts: String::new(),
            thread_ts: thread_ts.to_string(),
            recipient: recipient.map(|(u, t)| (u.to_string(), t.to_string())),
            options,
            parts: Vec::new(),
            buffer: String::new(),
            appended: 0,
            text: String::new(),
            plan: None,
            tasks: Vec::new(),
            stopped: false,
            stop_hint: false,
            unconfirmed: false,
            refused: false,
            failed: None,
        };
        // A stop pressed before this request's run began (a redelivery after it).
        stream.stop_seen().await?;
        stream.start_part().await?;
        if stream.parts.first().is_some_and(|p| !p.live) {
            // A part an earlier run started: a stop may have named it.
            stream.stop_seen().await?;
        }
        stream.ts = stream
            .parts
            .first()
            .map(|p| p.ts.clone())
            .unwrap_or_default();
        Ok(stream)
    }
}

impl Stream {
    /// Starts a part (the first, or the next after a switch): a journaled step.
    async fn start_part(&mut self) -> Result<(), Error> {
        let ctx = self.ctx.clone();
        let mut args = json!({"channel": self.channel, "thread_ts": self.thread_ts});
        if let Some((user, team)) = &self.recipient {
            args["recipient_user_id"] = user.as_str().into();
            args["recipient_team_id"] = team.as_str().into();
        }
        if let Some(display) = self.options.tasks {
            args["task_display_mode"] = display.as_str().into();
        }
        // A later part shows the plan so far.
        if !self.parts.is_empty() {
            let chunks = self.plan_chunks();
            if !chunks.is_empty() {
                args["chunks"] = Value::Array(chunks);
            }
        }
        // A recipient Slack refuses (`user_not_found`: an author of another organisation in a
        // Slack Connect conversation) started nothing. The refusal is the step's recorded
        // result, so every later run takes the same way: no stream, the answer posted whole
        // by `finish` (without a recipient Slack would refuse a stream in a channel too).
        let benign: &[&str] = match (&self.recipient, self.parts.is_empty()) {
            (Some(_), true) => &[RECIPIENT_REFUSED],
            _ => &[],
        };
        let step = ctx.next_step().await;
        if self.stopped {
            // Nothing is started after a stop: the start an earlier run made is taken from
            // the journal (a refusal, an unconfirmed start, or its part), so the steps after
            // it are the same.
            let recorded = ctx.pass_recorded("chat.startStream", &args).await?;
            let recorded = recorded.unwrap_or_default();
            if self.parts.is_empty() && recorded["already"] == RECIPIENT_REFUSED {
                self.refused = true;
            }
            self.unconfirmed |= recorded["unknown"] == true;
            if let Some(ts) = recorded["ts"].as_str().map(str::to_string) {
                self.parts.push(Part {
                    started_ms: epoch_ms_of(&ts),
                    ts,
                    step,
                    from: self.appended,
                    live: false,
                    ended: true,
                    muted: false,
                    written: false,
                    blocks: Vec::new(),
                });
            }
            return Ok(());
        }
        let made_before = ctx.made().await;
        let answer = ctx
            .journaled(
                "chat.startStream",
                args,
                Settle::Stream {
                    channel: &self.channel,
                    thread_ts: &self.thread_ts,
                },
                benign,
                Returns::Ids,
            )
            .await?;
        let refused = answer["already"] == RECIPIENT_REFUSED;
        self.refused = refused;
        self.unconfirmed = answer["unknown"] == true;
        let called_here = ctx.made().await > made_before;
        let started_here = !refused && called_here;
        if refused {
            tracing::info!(
                "Slack refused the stream's recipient (user_not_found: a user of another \
                 workspace?): the answer is posted whole when it is finished"
            );
            if called_here {
                // Nothing reached the thread: not an answer by itself.
                ctx.unmade().await;
                // The refusal is in the ledger before the answer is made: a takeover replays
                // it, never looks for a stream this step did not start.
                ctx.record_now().await?;
            }
            return Ok(());
        }
        if started_here {
            // The part's ts is in the ledger before anything else happens.
            ctx.record_now().await?;
        } else {
            tracing::info!(ts = %answer["ts"], part = self.parts.len() + 1,
                "a part an earlier run started: finishing it");
        }
        let ts = answer["ts"].as_str().unwrap_or_default().to_string();
        if let Some(channel) = answer["channel"].as_str() {
            self.channel = channel.to_string();
        }
        self.parts.push(Part {
            started_ms: epoch_ms_of(&ts),
            ts,
            step,
            from: self.appended,
            live: started_here,
            // An earlier run's part goes on as that run's would: switched when its age, its
            // size or Slack's end calls for it, never for the crash alone.
            ended: false,
            muted: false,
            written: false,
            blocks: Vec::new(),
        });
        Ok(())
    }

    /// No stream to write to, and no step to make: refused for its recipient, unconfirmed.
    fn closed(&self) -> bool {
        self.refused || self.unconfirmed || (self.parts.is_empty() && !self.stopped)
    }

    /// A journaled step of the stream, or, after a stop, the same step passed (taken from the
    /// journal, not made): `None` then.
    async fn step(
        &self,
        method: &str,
        args: Value,
        benign: &[&str],
    ) -> Result<Option<Value>, Error> {
        if self.stopped {
            self.ctx.pass_recorded(method, &args).await?;
            return Ok(None);
        }
        self.ctx
            .journaled(method, args, Settle::Idempotent, benign, Returns::Nothing)
            .await
            .map(Some)
    }

    /// The messages holding the answer, in order (one per part).
    pub fn parts(&self) -> Vec<&str> {
        self.parts.iter().map(|p| p.ts.as_str()).collect()
    }

    /// Whether a person stopped the answer (as far as this run knows): nothing more is written.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Appends `text` (buffered: sent by 256 characters). An append Slack refuses
    /// (the stream expired: `message_not_in_streaming_state`, or any failure) ends the
    /// appending to this part: the next switches to a new part (outside
    /// [`Ctx::remember`], where no step can be made), and the end replaces each part with its
    /// share of the final text. A stop ends the appending for good.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent};
    ///
    /// let _app = App::new().assistant_message(|ctx: Ctx, q: MessageEvent| async move {
    ///     let mut stream = ctx.stream(&q.channel, q.thread(), None).await?;
    ///     let mut answer = String::new();
    ///     for word in ["Exactly", " once,", " however", " often", " Slack", " retries."] {
    ///         answer.push_str(word);
    ///         stream.append(word).await; // sent APPEND_BUFFER_CHARS at a time
    ///     }
    ///     stream.finish(&answer, None).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn append(&mut self, text: &str) {
        if self.closed() {
            return;
        }
        if self.failed.is_some() {
            return;
        }
        // A part due for its switch is switched before this text (what is buffered goes to
        // it first): the new part begins with it. A switch that fails ends the streaming:
        // the next step, or the end, fails with its error, and the request is tried again.
        if let Err(error) = self.before_step(true).await {
            tracing::warn!(
                error = %crate::errors::error_chain(&error),
                "the answer's next part could not be started: the answer fails with it"
            );
            self.failed = Some(error);
            return;
        }
        // The fate of the step before the text (a task's update, say) is written now, not
        // with the next step: text may stream for minutes, and a takeover after a crash in
        // them replays that step rather than making it again.
        if crate::journal::inside_remember().is_none()
            && let Err(error) = self.ctx.record_now().await
        {
            tracing::warn!(
                error = %crate::errors::error_chain(&error),
                "the stream's last step could not be recorded before its text"
            );
        }
        self.buffer.push_str(text);
        self.text.push_str(text);
        self.appended += text.chars().count();
        if self.buffer.chars().count() >= APPEND_BUFFER_CHARS {
            self.flush().await;
        }
    }

    async fn flush(&mut self) {
        let text = std::mem::take(&mut self.buffer);
        let Some(part) = self.parts.last_mut() else {
            return;
        };
        if !part.live || part.ended || part.muted || self.stopped || text.is_empty() {
            return;
        }
        let args = json!({"channel": self.channel, "ts": part.ts, "markdown_text": text});
        let by = (tokio::time::Instant::now() + APPEND_TIMEOUT).min(self.ctx.deadline());
        let sent = self
            .ctx
            .slack()
            .api("chat.appendStream", &Args::Json(args), by)
            .await;
        match sent {
            Ok(_) => {}
            Err(SlackError::Api { code }) if code == EXPIRED => {
                tracing::info!("Slack ended the stream: the answer goes on in a new part");
                part.ended = true;
            }
            Err(SlackError::Api { code }) if code == STOPPED => {
                tracing::info!("the person stopped the answer: nothing more is written");
                part.ended = true;
                self.stop_hint = true;
            }
            Err(error) => {
                // Not ended: a part is switched only where Slack ended it (each switch is two
                // Tier 2 calls, and an answer in more parts than its time needs).
                tracing::warn!(
                    error = %crate::errors::error_chain(&error),
                    "an append failed: the part's share is written by the end"
                );
                part.muted = true;
            }
        }
    }

    /// The name of the remembered step a switch to part `k` begins with (where the part's
    /// share begins): a step the end never makes, so a later run tells a switch from the end.
    fn switch_name(&self, k: usize) -> String {
        format!("stream-switch-{}-{k}", self.ts)
    }

    /// Whether the earlier run switched parts here (the journal's next record is the switch's
    /// first step), or, past what the journal holds, whether the current part is due: older
    /// than `rotate_after`, holding [`PART_CHARS`], or ended by Slack.
    async fn due(&self, by_age: bool) -> bool {
        let Some(part) = self.parts.last() else {
            return false;
        };
        let switch =
            crate::journal::record::step_op("remember", &self.switch_name(self.parts.len()), "");
        match self.ctx.records_ahead(1).await.first() {
            Some(Some(Some(op))) => crate::journal::record::same_step(op, &switch),
            // Else (no record, or an earlier claim's began window, which names no step and
            // stands for no switch's remembered step): as this run finds the part.
            _ if self.stopped || !by_age => false,
            // A part gets its share of the answer before the next begins.
            _ if self.appended <= part.from => false,
            _ => {
                let age = crate::clock::now_ms().saturating_sub(part.started_ms);
                part.ended
                    || age >= self.options.rotate_after.as_millis() as u64
                    || self.appended.saturating_sub(part.from) >= PART_CHARS
            }
        }
    }

    /// Before a step of the stream, or before text: a stop Slack reported is taken, and a
    /// switch made where the journal says an earlier run made one here, or (`by_age`: before
    /// text) where the part is due.
    async fn before_step(&mut self, by_age: bool) -> Result<(), Error> {
        if self.closed() || crate::journal::inside_remember().is_some() {
            return Ok(());
        }
        if self.stop_hint {
            self.stop_seen().await?;
        }
        self.switch_if_due(by_age).await
    }

    /// Switches to a new part when one is due (never inside [`Ctx::remember`]): where the
    /// new part's share begins (remembered: a takeover splits the answer where this run did),
    /// the part stopped and replaced with its share, marked as ours (so that the next part's
    /// look-up never takes it for the new stream; the session stays processing), and the
    /// next part started. Nothing is started, stopped or updated once a stop is seen; a stop
    /// Slack answers the part's stop with is read again before the update and the start.
    async fn switch_if_due(&mut self, by_age: bool) -> Result<(), Error> {
        if self.closed() || crate::journal::inside_remember().is_some() || !self.due(by_age).await {
            return Ok(());
        }
        // The part's last text first (Slack may answer it `stopped_by_user`).
        self.flush().await;
        let k = self.parts.len();
        let appended = self.appended;
        let from: usize = self
            .ctx
            .remember(&self.switch_name(k), async move { appended })
            .await?;
        self.stop_seen().await?;
        let part = self.parts.last().cloned().expect("a part");
        let names = self.part_names(k - 1);
        let stop = json!({"channel": self.channel, "ts": part.ts, "metadata": names,
                          "session_status": "processing"});
        self.stop_part(stop, part.live && !part.ended).await?;
        let share = slice(&self.text, part.from, Some(from));
        // The first part keeps its plan, as the end shows it.
        let mut blocks: Vec<Value> = match k {
            1 => self.plan_block().into_iter().collect(),
            _ => Vec::new(),
        };
        blocks.push(markdown(&share));
        blocks.extend(part.blocks.iter().cloned());
        let update = json!({"channel": self.channel, "ts": part.ts, "text": share,
                            "blocks": blocks, "metadata": names});
        let made_before = self.ctx.made().await;
        self.step("chat.update", update, &[]).await?;
        let written = part.live && from == appended && self.ctx.made().await > made_before;
        if let Some(last) = self.parts.last_mut() {
            last.ended = true;
            last.written = written;
        }
        self.start_part().await?;
        if let Some(new) = self.parts.get_mut(k) {
            new.from = from.max(part.from);
        }
        Ok(())
    }

    /// A part's `chat.stopStream` (a step, passed after a stop). Slack answering that it no
    /// longer streams (expired, or stopped by the person) has the stop read again before
    /// anything else is written; where the part was still taking text (`was_live`), after
    /// `STOP_EVENT_GRACE`: the person's event trails Slack's own stop, and no part may start
    /// after it.
    async fn stop_part(&mut self, stop: Value, was_live: bool) -> Result<(), Error> {
        let answer = self
            .step("chat.stopStream", stop, &[EXPIRED, STOPPED])
            .await?;
        let Some(answer) = answer else {
            return Ok(());
        };
        if answer["already"] != EXPIRED && answer["already"] != STOPPED {
            return Ok(());
        }
        self.stop_hint |= answer["already"] == STOPPED;
        if was_live && !self.stop_hint {
            let wait = tokio::time::Instant::now() + STOP_EVENT_GRACE;
            tokio::time::sleep_until(wait.min(self.ctx.deadline())).await;
        }
        self.stop_seen().await?;
        Ok(())
    }

    /// Whether a person stopped the answer: Slack said so (`stopped_by_user`: then kept
    /// beside the claims, naming this answer's parts, for every later run), or the stop's
    /// note says so (one `GetItem`, in an app that hears `agent_session_stopped`: Slack shows
    /// the stop button only then): a stop that named one of this answer's parts, or one that
    /// named no stream (none was active) at or after the request began. A stop that named
    /// another answer's stream in the same thread is not this answer's. A stop is for good:
    /// from it on, the stream's steps are passed, not made.
    async fn stop_seen(&mut self) -> Result<bool, Error> {
        if self.stopped {
            return Ok(true);
        }
        if self.stop_hint {
            let parts = self.parts.iter().map(|p| p.ts.clone()).collect();
            self.ctx
                .note_stop(&self.channel, &self.thread_ts, parts)
                .await;
            self.stopped = true;
        } else if self.ctx.hears_stops() {
            let parts: Vec<&str> = self.parts.iter().map(|p| p.ts.as_str()).collect();
            self.stopped = self
                .ctx
                .stream_stopped(&self.channel, &self.thread_ts, &parts)
                .await?;
        }
        if self.stopped {
            tracing::info!("the person stopped the answer: nothing more is written");
        }
        Ok(self.stopped)
    }

    /// A journaled chunk (a plan's title, a task's update, blocks) into the current part.
    async fn chunk(&mut self, chunk: Value) -> Result<(), Error> {
        if let Some(error) = self.failed.take() {
            self.failed = Some(Error::Closed);
            return Err(error);
        }
        if self.closed() {
            return Ok(());
        }
        // The text before it goes first.
        self.flush().await;
        self.before_step(false).await?;
        let Some(part) = self.parts.last().map(|p| p.ts.clone()) else {
            return Ok(());
        };
        let args = json!({"channel": self.channel, "ts": part, "chunks": [chunk]});
        let Some(answer) = self
            .step("chat.appendStream", args, &[EXPIRED, STOPPED])
            .await?
        else {
            return Ok(());
        };
        if answer["already"] == STOPPED {
            self.stop_hint = true;
        }
        if answer["already"] == EXPIRED || answer["already"] == STOPPED {
            // Not shown in this part: the end shows it.
            if let Some(part) = self.parts.last_mut() {
                part.ended = true;
            }
        }
        Ok(())
    }

    /// The plan's title (`plan_update`): a journaled step. The plan, with every task at its
    /// last status, heads the first part of the finished answer.
    pub async fn plan(&mut self, title: &str) -> Result<(), Error> {
        self.plan = Some(title.to_string());
        self.chunk(json!({"type": "plan_update", "title": title}))
            .await
    }

    /// A task's update (`task_update`: its id, title, status, details, output, sources): a
    /// journaled step, made once across takeovers. A task moves forward only (`pending` →
    /// `in_progress` → `complete` or `error`): an update that would move it back, or change
    /// a finished task, is refused before anything is sent ([`Error::TaskMovedBack`]).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent, Task, TaskStatus};
    ///
    /// let _app = App::new().assistant_message(|ctx: Ctx, q: MessageEvent| async move {
    ///     let mut stream = ctx.stream(&q.channel, q.thread(), None).await?;
    ///     stream.plan("Checking the deploy").await?;
    ///     let task = |status| Task::new("ci", "Read the CI run", status);
    ///     stream.task(task(TaskStatus::InProgress)).await?;
    ///     let found = ctx.remember("ci", async { "green".to_string() }).await?;
    ///     stream.task(task(TaskStatus::Complete).output(format!("CI is {found}"))).await?;
    ///     stream.append("The deploy can go.").await;
    ///     stream.finish_answer("The deploy can go.", vec![]).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn task(&mut self, task: Task) -> Result<(), Error> {
        if let Some(known) = self.tasks.iter_mut().find(|t| t.id == task.id) {
            if !known.status.may_become(task.status) {
                return Err(Error::TaskMovedBack {
                    task: task.id.clone(),
                    from: known.status.as_str(),
                    to: task.status.as_str(),
                });
            }
            *known = task.clone();
        } else {
            self.tasks.push(task.clone());
        }
        self.chunk(task.chunk()).await
    }

    /// Blocks streamed into the answer (a `blocks` chunk): a journaled step; the finished
    /// answer keeps them under the part's text.
    pub async fn blocks(&mut self, blocks: Vec<Value>) -> Result<(), Error> {
        if let Some(part) = self.parts.last_mut() {
            part.blocks.extend(blocks.iter().cloned());
        }
        self.chunk(json!({"type": "blocks", "blocks": blocks}))
            .await
    }

    /// The metadata of part `i`: slack-once's names of its start's step, with the answer's
    /// (its first part's step) and its place among the parts.
    fn part_names(&self, i: usize) -> Value {
        let mut names = self.ctx.names(self.parts[i].step);
        names["stream"] = self.parts[0].step.into();
        names["part"] = i.into();
        post_metadata(None, names)
    }

    /// The plan so far as chunks (a later part starts with them).
    fn plan_chunks(&self) -> Vec<Value> {
        let mut chunks = Vec::new();
        if let Some(title) = &self.plan {
            chunks.push(json!({"type": "plan_update", "title": title}));
        }
        chunks.extend(self.tasks.iter().map(Task::chunk));
        chunks
    }

    /// The plan as a `plan` block of `task_card`s (the finished answer's), when there is one.
    fn plan_block(&self) -> Option<Value> {
        if self.plan.is_none() && self.tasks.is_empty() {
            return None;
        }
        let cards: Vec<Value> = self.tasks.iter().map(Task::card).collect();
        Some(
            json!({"type": "plan", "title": self.plan.as_deref().unwrap_or("Plan"),
                    "tasks": cards}),
        )
    }

    /// Ends the stream with the whole answer: `text` (and `blocks`: give the answer a
    /// `markdown` block, which holds 12,000 characters, beside feedback buttons; with blocks,
    /// `text` is only the notification's) replace what it shows, so the message is complete
    /// whatever was appended, by this run or by an earlier one. Both writes carry slack-once's
    /// names in the message's metadata: no later look-up takes it for another stream. An
    /// answer in several parts is ended as [`Stream::finish_answer`] ends it, with `blocks`
    /// other than `markdown` ones under the last part. The plan, if any, heads the first part.
    ///
    /// Returns the answer's last message's `ts` (the stream's, or the post's).
    ///
    /// # Example
    ///
    /// ```
    /// use serde_json::json;
    /// use slack_once::app::{App, Ctx, MessageEvent, blocks};
    ///
    /// let _app = App::new().assistant_message(|ctx: Ctx, q: MessageEvent| async move {
    ///     let answer = "Deploys run at **10:00** and **15:00** UTC.";
    ///     let mut stream = ctx.stream(&q.channel, q.thread(), None).await?;
    ///     stream.append(answer).await;
    ///     let shown = vec![
    ///         json!({"type": "markdown", "text": answer}),
    ///         blocks::actions([blocks::button("Helpful", "answer_helpful", "yes")]),
    ///     ];
    ///     let ts = stream.finish(answer, Some(shown)).await?;
    ///     tracing::info!(%ts, "answered");
    ///     Ok(())
    /// });
    /// ```
    pub async fn finish(self, text: &str, blocks: Option<Vec<Value>>) -> Result<String, Error> {
        if self.parts.len() > 1 {
            let footer = blocks
                .unwrap_or_default()
                .into_iter()
                .filter(|b| b["type"] != "markdown")
                .collect();
            return self.end(text, End::Parts { footer }).await;
        }
        self.end(text, End::Given(blocks)).await
    }

    /// Ends the answer, in as many parts as it took: each part replaced with its share of
    /// `text` as a `markdown` block (the first headed by the plan), `footer` (feedback
    /// buttons, say) under the last. `text` is the answer as appended, in order: a part's
    /// share is where this run's appends put it.
    ///
    /// Returns the answer's last message's `ts`.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent, feedback_buttons};
    ///
    /// let _app = App::new().assistant_message(|ctx: Ctx, q: MessageEvent| async move {
    ///     let mut stream = ctx.stream(&q.channel, q.thread(), None).await?;
    ///     let mut answer = String::new();
    ///     for word in ["Deploys", " run", " at", " 10:00."] {
    ///         answer.push_str(word);
    ///         stream.append(word).await;
    ///     }
    ///     let footer = vec![feedback_buttons("answer_feedback", "Good answer", "Bad answer")];
    ///     stream.finish_answer(&answer, footer).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn finish_answer(self, text: &str, footer: Vec<Value>) -> Result<String, Error> {
        self.end(text, End::Parts { footer }).await
    }

    /// No stream (its recipient refused): the answer, whole, as a post of ours in the thread,
    /// found by its metadata if its fate is ever unknown.
    async fn post_whole(&self, text: &str, end: End) -> Result<String, Error> {
        let mut message = Message::text(text).in_thread(&self.thread_ts);
        let mut blocks: Vec<Value> = self.plan_block().into_iter().collect();
        match end {
            End::Given(Some(given)) => blocks.extend(given),
            End::Given(None) if blocks.is_empty() => {}
            End::Given(None) => blocks.push(markdown(text)),
            End::Parts { footer } => {
                blocks.push(markdown(text));
                blocks.extend(footer);
            }
        }
        if !blocks.is_empty() {
            message = message.blocks(blocks);
        }
        if self.stopped {
            // Not posted after a stop (an earlier run's post is taken from the journal).
            let at = json!({"channel": self.channel, "thread_ts": self.thread_ts});
            let posted = self.ctx.pass_recorded("chat.postMessage", &at).await?;
            return Ok(posted
                .and_then(|p| p["ts"].as_str().map(str::to_string))
                .unwrap_or_default());
        }
        let posted = self.ctx.post(&self.channel, message).await?;
        Ok(posted.ts)
    }

    async fn end(mut self, text: &str, end: End) -> Result<String, Error> {
        if let Some(error) = self.failed.take() {
            return Err(error);
        }
        if self.unconfirmed {
            tracing::warn!(
                "the stream's start cannot be confirmed: its answer is not posted again \
                 (the request ends failed, unconfirmed_write)"
            );
            return Ok(String::new());
        }
        if self.refused {
            return self.post_whole(text, end).await;
        }
        // After a stop the end's steps are passed: the answer is left as the stop left it
        // (what is buffered is not sent after it either).
        self.stop_seen().await?;
        self.flush().await;
        if self.stop_hint {
            // The last text was refused `stopped_by_user`.
            self.stop_seen().await?;
        }
        let Some(last) = self.parts.last().cloned() else {
            return Ok(String::new());
        };
        let names = self.part_names(self.parts.len() - 1);
        if self.stopped && last.live && !last.ended {
            // A part this run started while the person's stop was on its way (its event not
            // yet here): ended at once, its session made active, nothing else written.
            let stop = json!({"channel": self.channel, "ts": last.ts, "session_status": "active"});
            self.ctx
                .journaled(
                    "chat.stopStream",
                    stop,
                    Settle::Idempotent,
                    &[EXPIRED, STOPPED],
                    Returns::Nothing,
                )
                .await?;
        } else {
            let stop = json!({"channel": self.channel, "ts": last.ts, "metadata": names});
            self.stop_part(stop, false).await?;
        }
        let n = self.parts.len();
        for (i, part) in self.parts.iter().enumerate() {
            let to = self.parts.get(i + 1).map(|next| next.from);
            let share = if n == 1 {
                text.to_string()
            } else {
                slice(text, part.from, to)
            };
            let mut blocks: Vec<Value> = if i == 0 {
                self.plan_block().into_iter().collect()
            } else {
                Vec::new()
            };
            match &end {
                End::Given(Some(given)) => blocks.extend(given.iter().cloned()),
                End::Given(None) => {
                    if !blocks.is_empty() || !part.blocks.is_empty() {
                        blocks.push(markdown(&share));
                    }
                    blocks.extend(part.blocks.iter().cloned());
                }
                End::Parts { footer } => {
                    blocks.push(markdown(&share));
                    blocks.extend(part.blocks.iter().cloned());
                    if i + 1 == n {
                        blocks.extend(footer.iter().cloned());
                    }
                }
            }
            let names = self.part_names(i);
            let mut update =
                json!({"channel": self.channel, "ts": part.ts, "text": share, "metadata": names});
            if !blocks.is_empty() {
                update["blocks"] = Value::Array(blocks);
            }
            if part.written && i + 1 < n && (i > 0 || self.plan_block().is_none()) {
                // This run wrote the part's final share at the switch (the first part's plan
                // may have moved on since: that part is written again).
                self.ctx.pass_step("chat.update", &update).await?;
                continue;
            }
            self.step("chat.update", update, &[]).await?;
        }
        Ok(last.ts)
    }
}

/// How [`Stream::end`] shows the answer.
enum End {
    /// [`Stream::finish`]'s blocks, for an answer of one part.
    Given(Option<Vec<Value>>),
    /// Each part's share as a `markdown` block, `footer` under the last.
    Parts { footer: Vec<Value> },
}

/// `text` as a `markdown` block (12,000 characters; a `section` holds 3,000).
fn markdown(text: &str) -> Value {
    json!({"type": "markdown", "text": text})
}

/// The assistant container (`assistant.threads.*`): the status under the composer, the
/// suggested prompts, the thread's title. The agent view's sessions have their own
/// ([`Ctx::set_session_status`], [`Ctx::rename_session`]).
impl Ctx {
    /// `assistant.threads.setStatus`: the status under the thread's composer while the answer
    /// is made ("is thinking…"), with `loading_messages` shown in turn; an empty status clears
    /// it. Made again on a takeover (the same status twice).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent};
    ///
    /// let _app = App::new().assistant_message(|ctx: Ctx, q: MessageEvent| async move {
    ///     let loading = ["Reading the runbook…", "Writing…"];
    ///     ctx.set_status(&q.channel, q.thread(), "is thinking…", &loading).await?;
    ///     ctx.reply("Deploys run at 10:00 and 15:00 UTC.").await?;
    ///     ctx.set_status(&q.channel, q.thread(), "", &[]).await?; // cleared
    ///     Ok(())
    /// });
    /// ```
    pub async fn set_status(
        &self,
        channel: &str,
        thread_ts: &str,
        status: &str,
        loading_messages: &[&str],
    ) -> Result<(), Error> {
        let mut args = json!({"channel_id": channel, "thread_ts": thread_ts, "status": status});
        if !loading_messages.is_empty() {
            args["loading_messages"] = json!(loading_messages);
        }
        self.assistant_call("assistant.threads.setStatus", args)
            .await
    }

    /// `assistant.threads.setSuggestedPrompts`: prompts (title, message) offered in the thread.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AssistantThread, Ctx};
    ///
    /// let _app = App::new().assistant_thread_started(|ctx: Ctx, t: AssistantThread| async move {
    ///     let Some(ts) = t.thread_ts.as_deref() else {
    ///         return Ok(()); // the agent view: no thread yet
    ///     };
    ///     let prompts = [
    ///         ("When are deploys?", "When do deploys run?"),
    ///         ("Help", "What can you do?"),
    ///     ];
    ///     ctx.set_suggested_prompts(&t.channel_id, ts, Some("Try one of these"), &prompts).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn set_suggested_prompts(
        &self,
        channel: &str,
        thread_ts: &str,
        title: Option<&str>,
        prompts: &[(&str, &str)],
    ) -> Result<(), Error> {
        let prompts: Vec<Value> = prompts
            .iter()
            .map(|(title, message)| json!({"title": title, "message": message}))
            .collect();
        let mut args = json!({"channel_id": channel, "thread_ts": thread_ts, "prompts": prompts});
        if let Some(title) = title {
            args["title"] = title.into();
        }
        self.assistant_call("assistant.threads.setSuggestedPrompts", args)
            .await
    }

    /// `assistant.threads.setTitle`: the thread's title in the history.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent};
    ///
    /// let _app = App::new().assistant_message(|ctx: Ctx, q: MessageEvent| async move {
    ///     // The thread is named in the history after the question.
    ///     let title: String = q.text.chars().take(40).collect();
    ///     ctx.set_title(&q.channel, q.thread(), &title).await?;
    ///     ctx.reply("Let me look.").await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn set_title(
        &self,
        channel: &str,
        thread_ts: &str,
        title: &str,
    ) -> Result<(), Error> {
        let args = json!({"channel_id": channel, "thread_ts": thread_ts, "title": title});
        self.assistant_call("assistant.threads.setTitle", args)
            .await
    }

    /// A journaled write made again where its fate is unknown (doing it twice changes
    /// nothing): the assistants' and agents' calls.
    pub(crate) async fn assistant_call(&self, method: &str, args: Value) -> Result<(), Error> {
        self.journaled(method, args, Settle::Idempotent, &[], Returns::Nothing)
            .await
            .map(|_| ())
    }
}
