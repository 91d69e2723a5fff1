//! Streamed answers (`chat.startStream`, `chat.appendStream`, `chat.stopStream`), exactly once.
//!
//! The stream's start is a journaled step whose `ts` is written to the ledger as soon as Slack
//! answers, so a later run (a takeover after a crash, a redelivery) never starts a second one:
//! it finds the stream in the journal (or, if the start's answer was lost, among the app's
//! messages of the thread in the claim's window: a stream carries no metadata until stopped).
//! Appends are buffered and not journaled one by one. The end is always two steps: the stream
//! stopped (`message_not_in_streaming_state`, as after Slack expired it, counts as stopped),
//! then the message replaced with the final text and blocks (`chat.update`), so whatever ran
//! or crashed before, the thread holds one message, complete. A reader may see, during a
//! takeover, the words the crashed run had appended, then the whole answer at once. A start
//! Slack refuses for its recipient (a Slack Connect author) is recorded as refused, and the
//! answer is then one journaled post, made at the end.

use serde_json::{Value, json};

use super::{Ctx, Error, Message};
use crate::journal::{Returns, Settle};
use crate::slack::{Args, SlackError, post_metadata};

/// Appends are sent once this many characters are buffered (Slack's SDKs use 256), keeping
/// within `chat.appendStream`'s rate tier.
pub const APPEND_BUFFER_CHARS: usize = 256;
/// An append waits at most this long for Slack (within the claim's deadline). An append is not
/// a step: one that hangs ends the appending, and the end replaces the message with the whole
/// answer, so neither the answer nor the listener waits on it until the lease ends.
pub const APPEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// `chat.startStream`'s answer to a recipient it cannot resolve for this app (an author of
/// another organisation in a Slack Connect conversation).
const RECIPIENT_REFUSED: &str = "user_not_found";

/// A streamed message in a thread: [`Ctx::stream`].
#[derive(Debug)]
pub struct Stream {
    ctx: Ctx,
    /// The conversation the stream's thread is in.
    pub channel: String,
    /// The streamed message; empty when Slack refused the recipient and the answer is posted
    /// whole by [`Stream::finish`] instead.
    pub ts: String,
    thread_ts: String,
    /// The start's step: the finished message is marked with it, so no later look-up takes
    /// it for another stream.
    step: u32,
    buffer: String,
    /// An earlier run started it, or Slack no longer takes appends: what it shows is not known
    /// here, so nothing more is appended; the end replaces it with the final text.
    unknown: bool,
    /// An earlier run may have started it and Slack cannot show whether (its start settled
    /// unconfirmed): neither appended to, nor finished, nor posted whole (that could be a
    /// second answer); the request ends `failed` (`unconfirmed_write`).
    unconfirmed: bool,
}

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
        let mut args = json!({"channel": channel, "thread_ts": thread_ts});
        if let Some((user, team)) = recipient {
            args["recipient_user_id"] = user.into();
            args["recipient_team_id"] = team.into();
        }
        // A recipient Slack refuses (`user_not_found`: an author of another organisation in a
        // Slack Connect conversation) started nothing. The refusal is the step's recorded
        // result, so every later run takes the same way: no stream, the answer posted whole
        // by `finish` (without a recipient Slack would refuse a stream in a channel too).
        let benign: &[&str] = match recipient {
            Some(_) => &[RECIPIENT_REFUSED],
            None => &[],
        };
        let made_before = self.made().await;
        let step = self.next_step().await;
        let answer = self
            .journaled(
                "chat.startStream",
                args,
                Settle::Stream { channel, thread_ts },
                benign,
                Returns::Ids,
            )
            .await?;
        let refused = answer["already"] == RECIPIENT_REFUSED;
        let unconfirmed = answer["unknown"] == true;
        let called_here = self.made().await > made_before;
        let started_here = !refused && called_here;
        if refused {
            tracing::info!(
                "Slack refused the stream's recipient (user_not_found: a user of another \
                 workspace?): the answer is posted whole when it is finished"
            );
            if called_here {
                // Nothing reached the thread: not an answer by itself.
                self.unmade().await;
                // The refusal is in the ledger before the answer is made: a takeover replays
                // it, never looks for a stream this step did not start.
                self.record_now().await?;
            }
        } else if started_here {
            // The stream's ts is in the ledger before anything else happens.
            self.record_now().await?;
        } else {
            tracing::info!(ts = %answer["ts"], "the stream an earlier run started: finishing it");
        }
        Ok(Stream {
            ctx: self.clone(),
            channel: answer["channel"].as_str().unwrap_or(channel).to_string(),
            ts: answer["ts"].as_str().unwrap_or_default().to_string(),
            thread_ts: thread_ts.to_string(),
            step,
            buffer: String::new(),
            unknown: !started_here,
            unconfirmed,
        })
    }
}

impl Stream {
    /// Appends `text` (buffered: sent by [`APPEND_BUFFER_CHARS`]). An append Slack refuses
    /// (the stream expired: `message_not_in_streaming_state`, or any failure) ends the
    /// appending: the end replaces the message with the final text.
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
        self.buffer.push_str(text);
        if self.buffer.chars().count() >= APPEND_BUFFER_CHARS {
            self.flush().await;
        }
    }

    async fn flush(&mut self) {
        if self.unknown || self.buffer.is_empty() {
            self.buffer.clear();
            return;
        }
        let args = json!({"channel": self.channel, "ts": self.ts, "markdown_text": self.buffer});
        let by = (tokio::time::Instant::now() + APPEND_TIMEOUT).min(self.ctx.deadline());
        let sent = self
            .ctx
            .slack()
            .api("chat.appendStream", &Args::Json(args), by)
            .await;
        self.buffer.clear();
        match sent {
            Ok(_) => {}
            Err(SlackError::Api { code }) if code == "message_not_in_streaming_state" => {
                tracing::info!("Slack ended the stream: the answer is finished by an update");
                self.unknown = true;
            }
            Err(error) => {
                tracing::warn!(
                    error = %crate::errors::error_chain(&error),
                    "an append failed: the answer is finished by an update"
                );
                self.unknown = true;
            }
        }
    }

    /// Ends the stream with the whole answer: `text` (and `blocks`: give the answer a
    /// `markdown` block, which holds 12,000 characters, beside feedback buttons; with blocks,
    /// `text` is only the notification's) replace what it shows, so the message is complete
    /// whatever was appended, by this run or by an earlier one. Both writes carry slack-once's
    /// names in the message's metadata: no later look-up takes it for another stream.
    ///
    /// Returns the answer message's `ts` (the stream's, or the post's).
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
    pub async fn finish(mut self, text: &str, blocks: Option<Vec<Value>>) -> Result<String, Error> {
        if self.unconfirmed {
            tracing::warn!(
                "the stream's start cannot be confirmed: its answer is not posted again \
                 (the request ends failed, unconfirmed_write)"
            );
            return Ok(String::new());
        }
        if self.ts.is_empty() {
            // No stream (its recipient refused): the answer, whole, as a post of ours in the
            // thread, found by its metadata if its fate is ever unknown.
            let mut message = Message::text(text).in_thread(&self.thread_ts);
            if let Some(blocks) = blocks {
                message = message.blocks(blocks);
            }
            let posted = self.ctx.post(&self.channel, message).await?;
            return Ok(posted.ts);
        }
        self.flush().await;
        let metadata = post_metadata(None, self.ctx.names(self.step));
        let mut stop = json!({"channel": self.channel, "ts": self.ts, "metadata": metadata});
        if let Some(blocks) = &blocks {
            stop["blocks"] = Value::Array(blocks.clone());
        }
        self.ctx
            .journaled(
                "chat.stopStream",
                stop,
                Settle::Idempotent,
                // Slack expired it, or the user pressed stop: the update below still ends it.
                &["message_not_in_streaming_state", "stopped_by_user"],
                Returns::Nothing,
            )
            .await?;
        let mut update =
            json!({"channel": self.channel, "ts": self.ts, "text": text, "metadata": metadata});
        if let Some(blocks) = blocks {
            update["blocks"] = Value::Array(blocks);
        }
        self.ctx
            .journaled(
                "chat.update",
                update,
                Settle::Idempotent,
                &[],
                Returns::Nothing,
            )
            .await?;
        Ok(self.ts)
    }
}

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

    async fn assistant_call(&self, method: &str, args: Value) -> Result<(), Error> {
        self.journaled(method, args, Settle::Idempotent, &[], Returns::Nothing)
            .await
            .map(|_| ())
    }
}
