//! The context a listener gets: the request (an event, a command, an interaction), its
//! deadline, reads that go straight to Slack, and writes that are each a step of the request's
//! journal ([`crate::journal`]: announced in the ledger, made once, settled after a crash).
//! This is the listener's surface; the rules its writes follow are the journal's.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::interactive::{Ack, response_body};
use super::message::Message;
use crate::journal::record::Settled;
use crate::journal::{self, Call, For, Made, RESPOND, Returns, Steps, Tally};
pub use crate::journal::{Error, Settle};
use crate::ledger::LedgerError;
use crate::slack::envelope::{EventCallback, EventId};
use crate::slack::interaction::{Interaction, allowed_response_url};
use crate::slack::{Args, OurApp, SlackClient, SlackError};

/// A message posted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Posted {
    /// The conversation it was posted in, as Slack answered (a DM's `D…` for a post to a user).
    pub channel: String,
    /// The message's `ts`: its id within the conversation.
    pub ts: String,
}

/// What a listener's work is for: an event, or a command or interaction (with its ledger key).
#[derive(Clone, Debug)]
pub(crate) enum Source {
    Event(Arc<EventCallback>),
    Interaction {
        interaction: Arc<Interaction>,
        key: String,
    },
}

impl Source {
    /// The event's id, or the interaction's ledger key: what the metadata of a post names.
    fn id(&self) -> &str {
        match self {
            Source::Event(cb) => cb.event_id.as_str(),
            Source::Interaction { key, .. } => key,
        }
    }

    fn team(&self) -> Option<&str> {
        match self {
            Source::Event(cb) => cb.team(),
            Source::Interaction { interaction, .. } => interaction.team(),
        }
    }

    fn bot_user_id(&self) -> Option<&str> {
        match self {
            Source::Event(cb) => cb.bot_user_id(),
            Source::Interaction { .. } => None,
        }
    }

    fn app_id(&self) -> Option<&str> {
        match self {
            Source::Event(cb) => cb.api_app_id.as_deref(),
            Source::Interaction { interaction, .. } => interaction.api_app_id.as_deref(),
        }
    }

    /// The conversation the request happened in, and its thread.
    fn conversation(&self) -> Option<(String, Option<String>)> {
        match self {
            Source::Event(cb) => Some((cb.event.channel.clone()?, cb.event.thread_ts.clone())),
            Source::Interaction { interaction, .. } => {
                Some((interaction.channel_id.clone()?, interaction.thread_ts()))
            }
        }
    }

    /// The `ts` of the message the request is about (an event's message, a button's).
    fn message_ts(&self) -> Option<String> {
        match self {
            Source::Event(cb) => cb.event.ts.clone(),
            Source::Interaction { interaction, .. } => interaction.message_ts(),
        }
    }

    /// A Slack `ts` no answer to this request can be older than (look-ups of records of
    /// versions that wrote no times start there).
    fn since_ts(&self) -> Option<String> {
        match self {
            Source::Event(cb) => {
                let e = &cb.event;
                e.ts.clone()
                    .or(e.event_ts.clone())
                    .or(cb.event_time.map(|t| t.to_string()))
            }
            Source::Interaction { interaction, .. } => interaction
                .action()
                .and_then(|a| a.get("action_ts"))
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| interaction.message_ts()),
        }
    }
}

/// What [`Ctx::ack`] does where the listener runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AckMode {
    /// An event: there is nothing to acknowledge (`ack` does nothing).
    NotAsked,
    /// Synchronous mode: recorded, and the listener goes on; the acknowledgement is returned
    /// when it returns.
    Inline,
    /// Deferred mode's ingress: recorded, and the listener stops there (a worker runs it again
    /// from the start: its steps so far replay from the journal).
    StopAfter,
    /// A worker: the ingress acknowledged with the listener's choice; `ack` returns at once.
    Given,
    /// A worker: the ingress acknowledged empty on the listener's behalf (it had not chosen
    /// within 2 s, or wrote first). An acknowledgement chosen now is too late for Slack's 3 s:
    /// a message goes through the `response_url`; a view's `response_action`, which only the
    /// HTTP answer carries, cannot reach Slack, and the request ends `failed` (`ack_too_late`).
    GivenEmpty,
}

struct Acking {
    mode: AckMode,
    ack: Option<Ack>,
    /// The acknowledgement was made empty on the listener's behalf (deferred mode's ingress,
    /// handing off at the listener's first write that is not a view).
    implicit: bool,
    /// What the listener chose, too late to reach Slack in any form.
    lost: Option<Ack>,
}

struct Inner {
    source: Source,
    /// The claim's ledger key (the steps' own, kept here for the names of messages).
    key: EventId,
    acking: std::sync::Mutex<Acking>,
    /// Told when the listener acknowledges (deferred mode's ingress waits for it).
    acked: tokio::sync::Notify,
    slack: SlackClient,
    deadline: Instant,
    wall_deadline: SystemTime,
    version: String,
    steps: Mutex<Steps>,
    /// The state changes made so far by this run of the listeners, per listener and value and
    /// per name ([`Ctx::state`]).
    state_writes: std::sync::Mutex<std::collections::HashMap<String, u32>>,
    /// The state values whose `put` met a conflict that this run has not answered yet (by
    /// reading or writing the value again): (ledger key, name).
    state_conflicts: std::sync::Mutex<Vec<(String, String)>>,
    /// The id of the listener running ([`Ctx::set_listener`]).
    listener: std::sync::Mutex<String>,
    /// The app's functions (Workflow Builder steps), whose declared outputs a completion is
    /// checked against.
    functions: Arc<Vec<super::function::Function>>,
    /// The app hears the stop button (`agent_session_stopped`): a stream reads a session's
    /// stop.
    agent: bool,
}

/// What a listener is given: the event, its deadline, and Slack, read and written exactly once.
/// Cheap to clone.
#[derive(Clone)]
pub struct Ctx {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("source", &self.inner.source.id())
            .finish()
    }
}

/// The request: what Slack sent, whose it is, its deadline and attempt, its acknowledgement,
/// and the app's state.
impl Ctx {
    pub(crate) fn new(
        source: Source,
        ack_mode: AckMode,
        slack: SlackClient,
        deadline: Instant,
        version: String,
        steps: Steps,
        (functions, agent): (Arc<Vec<super::function::Function>>, bool),
    ) -> Self {
        let wall_deadline =
            crate::clock::now() + deadline.saturating_duration_since(Instant::now());
        let key = steps.key.clone();
        Self {
            inner: Arc::new(Inner {
                source,
                key,
                acking: std::sync::Mutex::new(Acking {
                    mode: ack_mode,
                    ack: None,
                    implicit: false,
                    lost: None,
                }),
                acked: tokio::sync::Notify::new(),
                slack,
                deadline,
                wall_deadline,
                version,
                steps: Mutex::new(steps),
                state_writes: std::sync::Mutex::new(std::collections::HashMap::new()),
                state_conflicts: std::sync::Mutex::new(Vec::new()),
                listener: std::sync::Mutex::new(String::new()),
                functions,
                agent,
            }),
        }
    }

    /// Ends the steps: later writes fail with [`Error::Closed`]. Returns the fates for the
    /// finishing write (a covered step whose call never returned among them, as an intent),
    /// and the tally.
    pub(crate) async fn close(&self) -> (Vec<Settled>, Tally) {
        self.inner.steps.lock().await.close()
    }

    /// The acknowledgement the listener chose, if it did.
    pub(crate) fn chosen_ack(&self) -> Option<Ack> {
        self.inner.acking.lock().expect("ack lock").ack.clone()
    }

    /// Resolves once the listener has acknowledged.
    pub(crate) async fn acknowledged(&self) {
        self.inner.acked.notified().await
    }

    // ------------------------------------------------------------ the request

    /// The whole delivery of an event: `event_id`, team, authorizations, and the inner event
    /// (`.event`, with `.event.raw` as Slack sent it). `None` for a command or an interaction.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AppMention, Ctx};
    ///
    /// let _app = App::new().app_mention(|ctx: Ctx, _m: AppMention| async move {
    ///     // When Slack says it happened (Unix seconds), in Slack's date formatting.
    ///     let when = ctx.event().and_then(|cb| cb.event_time).unwrap_or_default();
    ///     ctx.reply(format!("Mentioned <!date^{when}^{{time}}|just now>.")).await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn event(&self) -> Option<&EventCallback> {
        match &self.inner.source {
            Source::Event(cb) => Some(cb),
            Source::Interaction { .. } => None,
        }
    }

    /// The command or interaction, as parsed (`.raw` as Slack sent it). `None` for an event.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, BlockAction, Ctx, Respond};
    ///
    /// let _app = App::new().action("refresh", |ctx: Ctx, _click: BlockAction| async move {
    ///     // The payload as Slack sent it: where the button is (`message`, `view`…).
    ///     let container = ctx.interaction().and_then(|i| i.raw["container"]["type"].as_str());
    ///     if container == Some("message") {
    ///         ctx.respond(Respond::replace("Refreshed :arrows_counterclockwise:")).await?;
    ///     }
    ///     Ok(())
    /// });
    /// ```
    pub fn interaction(&self) -> Option<&Interaction> {
        match &self.inner.source {
            Source::Interaction { interaction, .. } => Some(interaction),
            Source::Event(_) => None,
        }
    }

    /// The event's `event_id`; for a command or an interaction, its ledger key (see
    /// [`Interaction::key`]).
    ///
    /// # Example
    ///
    /// ```
    /// use serde_json::json;
    /// use slack_once::app::{Ack, App, Command, Ctx, Message};
    ///
    /// let _app = App::new().command("/standup", |ctx: Ctx, cmd: Command| async move {
    ///     ctx.ack(Ack::ephemeral("Starting the standup thread…")).await?;
    ///     // The same for every repeat of this command: name what it makes after it.
    ///     let standup = Message::text("Standup: answer in the thread")
    ///         .metadata("standup", json!({"request": ctx.event_id()}));
    ///     ctx.post(&cmd.channel_id, standup).await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn event_id(&self) -> &str {
        self.inner.source.id()
    }

    /// The workspace of the request: an event's `team_id` (or its installation's team), an
    /// interaction's team (or its enterprise).
    ///
    /// # Example
    ///
    /// ```
    /// use serde_json::json;
    /// use slack_once::app::{App, Ctx, TeamJoin};
    ///
    /// let _app = App::new().team_join(|ctx: Ctx, join: TeamJoin| async move {
    ///     let info = ctx.read("team.info", json!({"team": ctx.team()})).await?;
    ///     let name = info["team"]["name"].as_str().unwrap_or("the team");
    ///     ctx.post(&join.user.id, format!("Welcome to {name}!")).await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn team(&self) -> Option<&str> {
        self.inner.source.team()
    }

    /// The assistant thread's context (where the user is: `{channel_id, team_id, …}`), as the
    /// event carries it (`assistant_thread_started`, `assistant_thread_context_changed`).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AssistantThread, Ctx, Message};
    ///
    /// let _app = App::new()
    ///     .assistant_thread_context_changed(|ctx: Ctx, t: AssistantThread| async move {
    ///         let here = ctx.assistant_context().and_then(|c| c["channel_id"].as_str());
    ///         if let (Some(channel), Some(ts)) = (here, t.thread_ts.as_deref()) {
    ///             let hint = Message::text(format!("Ask me about <#{channel}>.")).in_thread(ts);
    ///             ctx.post(&t.channel_id, hint).await?;
    ///         }
    ///         Ok(())
    ///     });
    /// ```
    pub fn assistant_context(&self) -> Option<&Value> {
        let event = self.event()?;
        event
            .event
            .raw
            .get("assistant_thread")
            .and_then(|t| t.get("context"))
            .filter(|c| c.is_object())
    }

    /// The assistant thread's context for any event of the thread: as the event carries it
    /// (`assistant_thread_started`, `assistant_thread_context_changed`), or, for a message in
    /// the thread, as the latest of those events left it (kept beside the claims by an app
    /// with an assistant's listener, the app's: another app's on a shared table is never read;
    /// `None` when none was seen, as in the agent view).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent};
    ///
    /// let _app = App::new().assistant_message(|ctx: Ctx, _q: MessageEvent| async move {
    ///     let context = ctx.thread_context().await?;
    ///     let answer = match context.as_ref().and_then(|c| c["channel_id"].as_str()) {
    ///         Some(channel) => format!("You are looking at <#{channel}>."),
    ///         None => "Open a channel, then ask me about it.".to_string(),
    ///     };
    ///     ctx.reply(answer).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn thread_context(&self) -> Result<Option<Value>, Error> {
        if let Some(context) = self.assistant_context() {
            return Ok(Some(context.clone()));
        }
        let (Some((channel, Some(thread))), Some(team)) =
            (self.inner.source.conversation(), self.team())
        else {
            return Ok(None);
        };
        let Some(keys) = crate::keys::thread_context_keys(team, &channel, &thread, self.app_id())
        else {
            return Ok(None);
        };
        let note = self.app_note(&keys).await?;
        Ok(note.and_then(|n| serde_json::from_str(&n).ok()))
    }

    /// The note under `key` beside the claims (a conversation's latest context, a session's
    /// stop), read by the listener's deadline.
    pub(crate) async fn note(&self, key: &EventId) -> Result<Option<String>, Error> {
        let ledger = self.inner.steps.lock().await.ledger.clone();
        let now_ms = crate::clock::now_ms();
        tokio::time::timeout_at(self.inner.deadline, ledger.note(key, now_ms))
            .await
            .map_err(|_| {
                Error::Ledger(LedgerError::Unavailable(
                    "the ledger did not answer before the deadline".into(),
                ))
            })?
            .map_err(Error::Ledger)
    }

    /// The app's note under `keys`: its own, else one the release before kept under the key
    /// without the app (while a deploy overlaps).
    pub(crate) async fn app_note(
        &self,
        keys: &crate::keys::NoteKeys,
    ) -> Result<Option<String>, Error> {
        if let Some(note) = self.note(&keys.own).await? {
            return Ok(Some(note));
        }
        match &keys.unscoped {
            Some(unscoped) => self.note(unscoped).await,
            None => Ok(None),
        }
    }

    /// When the request happened (its message's or event's `ts`, a click's `action_ts`), in
    /// epoch milliseconds.
    pub(crate) fn request_ms(&self) -> Option<u64> {
        crate::clock::ts_ms(&self.inner.source.since_ts()?)
    }

    /// The app's own state, in the ledger's table: small JSON values with a version and a TTL,
    /// changed once per request however often the listener runs (see [`super::State`]). Its
    /// names are this workspace's: in multi-workspace mode each installation (a workspace, or
    /// an enterprise's org-wide install) has values of its own under every name, and no name
    /// reaches another's; [`Ctx::shared_state`] holds the values every workspace shares.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use slack_once::app::{App, Ctx, MessageEvent};
    ///
    /// let _app = App::new().message(r"(?i)\bthanks\b", |ctx: Ctx, _m: MessageEvent| async move {
    ///     let month = Duration::from_secs(30 * 86_400);
    ///     let state = ctx.state();
    ///     let thanks = state.update("thanks", month, |n: Option<u64>| n.unwrap_or(0) + 1).await?;
    ///     ctx.reply(format!("That makes {thanks} thanks :heart:")).await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn state(&self) -> super::State {
        super::State::new(self.clone(), false)
    }

    /// The app's state shared by every workspace it is installed in: one value under each
    /// name for all of them (a global setting, a count across customers). Take care: what a
    /// listener writes here any workspace's request reads. In single-workspace mode it is the
    /// same as [`Ctx::state`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use slack_once::app::{App, Ctx, MessageEvent};
    ///
    /// let _app = App::new().message(r"(?i)\bthanks\b", |ctx: Ctx, _m: MessageEvent| async move {
    ///     let year = Duration::from_secs(365 * 86_400);
    ///     let everywhere = ctx.shared_state();
    ///     let all = everywhere.update("thanks-everywhere", year, |n: Option<u64>| n.unwrap_or(0) + 1).await?;
    ///     ctx.reply(format!("{all} thanks across every workspace :heart:")).await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn shared_state(&self) -> super::State {
        super::State::new(self.clone(), true)
    }

    /// The installation the request is answered with (multi-workspace mode): its workspace's
    /// team id, or its enterprise's id for an org-wide install; `None` in single-workspace
    /// mode. The tenant whose state [`Ctx::state`] reads and writes.
    pub fn installation(&self) -> Option<&str> {
        self.inner.slack.installation()
    }

    /// A `put` of the state value under `key` (named `name`) met a conflict: nothing was
    /// written, and the request's change is lost unless the listener reads or writes it again.
    pub(crate) fn state_conflict(&self, key: &EventId, name: &str) {
        let mut conflicts = self.inner.state_conflicts.lock().expect("conflicts lock");
        if !conflicts.iter().any(|(k, _)| k == key.as_str()) {
            conflicts.push((key.to_string(), name.to_string()));
        }
    }

    /// The listener reads or writes the state value under `key` again: a conflict met there
    /// is answered.
    pub(crate) fn state_looked_at_again(&self, key: &EventId) {
        self.inner
            .state_conflicts
            .lock()
            .expect("conflicts lock")
            .retain(|(k, _)| k != key.as_str());
    }

    /// The names of the state values whose conflict the listeners left unanswered.
    pub(crate) fn unanswered_state_conflicts(&self) -> Vec<String> {
        let conflicts = self.inner.state_conflicts.lock().expect("conflicts lock");
        conflicts.iter().map(|(_, name)| name.clone()).collect()
    }

    /// The ids of this request's next change to the state value under `key` (named `name`):
    /// the writer kept on the value, as a change made without a claim record is found (the
    /// request's ledger key, a digest of the name and the change's place among this run's
    /// changes to that name), and the change's id the claim records (the listener running, a
    /// digest of the key, and the change's place among that listener's changes to it): both
    /// the same each time the listener runs for the request.
    pub(crate) fn next_state_change(&self, key: &EventId, name: &str) -> (String, String) {
        use sha2::Digest;
        let listener = self.inner.listener.lock().expect("listener lock").clone();
        let mut counts = self.inner.state_writes.lock().expect("state writes lock");
        let by_name = counts.entry(format!("name\0{name}")).or_insert(0);
        *by_name += 1;
        let by_name = *by_name;
        let mine = counts.entry(format!("{listener}\0{key}")).or_insert(0);
        *mine += 1;
        let change = crate::ledger::state_change_id(&listener, key, *mine);
        let digest = hex::encode(&sha2::Sha256::digest(name.as_bytes())[..6]);
        (format!("{}#{digest}#{by_name}", self.inner.key), change)
    }

    /// The listener now running (its id), whose state changes are counted apart.
    pub(crate) fn set_listener(&self, id: &str) {
        *self.inner.listener.lock().expect("listener lock") = id.to_string();
    }

    /// The request's claim (its key and owner), where the ledger claims it.
    pub(crate) async fn claim(&self) -> Option<(EventId, crate::ledger::OwnerToken)> {
        let steps = self.inner.steps.lock().await;
        steps
            .claimed
            .then(|| (steps.key.clone(), steps.owner.clone()))
    }

    /// The ledger the request's claim is in.
    pub(crate) async fn ledger(&self) -> Arc<dyn crate::ledger::Ledger> {
        self.inner.steps.lock().await.ledger.clone()
    }

    /// The Slack app the request is for (`api_app_id`): `A…`.
    ///
    /// ```
    /// # async fn f(ctx: slack_once::app::Ctx) {
    /// let app = ctx.app_id().unwrap_or("unknown");
    /// # }
    /// ```
    pub fn app_id(&self) -> Option<&str> {
        self.inner.source.app_id()
    }

    /// The bot's own user id in this workspace (events name it; interactions do not).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MemberJoinedChannel};
    ///
    /// let _app = App::new()
    ///     .member_joined_channel(|ctx: Ctx, j: MemberJoinedChannel| async move {
    ///         // The bot itself was added to a channel: it introduces itself.
    ///         let me = ctx.bot_user_id();
    ///         if let Some(channel) = &j.channel && me.is_some() && j.user.as_deref() == me {
    ///             ctx.post(channel, "Hi! Mention me with `help` to see what I do.").await?;
    ///         }
    ///         Ok(())
    ///     });
    /// ```
    pub fn bot_user_id(&self) -> Option<&str> {
        self.inner.source.bot_user_id()
    }

    // ------------------------------------------------------------ the acknowledgement

    /// Acknowledges a command or an interaction with `ack`: what Slack shows at once (see
    /// [`Ack`]). Everything before this runs while Slack waits; everything after it runs
    /// once the acknowledgement is decided: in synchronous mode in the same invocation (the
    /// acknowledgement is returned when the listener returns), in deferred mode on a worker,
    /// which runs the listener again from the start (its writes so far replay from the
    /// journal, and this call returns at once). A second call is ignored; for an event, the
    /// call does nothing.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{Ack, App, Command, Ctx, safe_text};
    ///
    /// let _app = App::new().command("/deploy", |ctx: Ctx, cmd: Command| async move {
    ///     if cmd.text.trim().is_empty() {
    ///         ctx.ack(Ack::ephemeral("Usage: /deploy <service>")).await?;
    ///         return Ok(());
    ///     }
    ///     ctx.ack(Ack::in_channel(format!("Deploying {}…", safe_text(&cmd.text)))).await?;
    ///     // What follows runs once Slack has its answer.
    ///     Ok(())
    /// });
    /// ```
    pub async fn ack(&self, ack: Ack) -> Result<(), Error> {
        let mode = {
            let mut acking = self.inner.acking.lock().expect("ack lock");
            if acking.ack.is_some() {
                tracing::warn!("the listener acknowledged twice: the first stands");
                return Ok(());
            }
            if acking.mode == AckMode::NotAsked {
                // An event: Slack was acknowledged already; nothing to choose.
                return Ok(());
            }
            if let Some(hooks) = crate::hooks::installed() {
                hooks.acknowledging(self.inner.key.as_str(), ack.body());
            }
            acking.ack = Some(ack.clone());
            acking.mode
        };
        self.inner.acked.notify_one();
        match mode {
            // The ingress answers Slack now and hands the rest to a worker: this run goes no
            // further (the pipeline drops it).
            AckMode::StopAfter => std::future::pending::<()>().await,
            // Boxed: a late acknowledgement is a step, and a step may acknowledge (in
            // deferred mode's ingress, never in this mode).
            AckMode::GivenEmpty => Box::pin(self.late_ack(ack)).await?,
            _ => {}
        }
        Ok(())
    }

    /// Slack was acknowledged empty before the listener chose `ack`: its message goes through
    /// the `response_url` (a step like any other: at most once when ephemeral, looked for when
    /// in the channel); anything else is lost, and said so.
    async fn late_ack(&self, ack: Ack) -> Result<(), Error> {
        let late = |ack: &Ack| {
            tracing::error!(
                acknowledgement = ack.body().as_deref().unwrap_or(""),
                failure = "ack_too_late",
                "the listener chose its acknowledgement after the ingress had acknowledged \
                 empty (2 s after the request: choose it sooner, before slow work); a view's \
                 response_action cannot reach Slack now: the request ends failed"
            );
            crate::metrics::count("AckTooLate");
        };
        match &ack {
            Ack::Empty => Ok(()),
            Ack::Message(body) if self.response_url().is_ok() => {
                tracing::warn!(
                    "the listener chose its acknowledgement after the ingress had acknowledged \
                     empty: it is sent through the response_url instead"
                );
                let kind = match body["response_type"].as_str() {
                    Some("in_channel") => RespondKind::InChannel,
                    _ => RespondKind::Ephemeral,
                };
                let mut body = body.clone();
                if kind == RespondKind::Ephemeral {
                    body["response_type"] = "ephemeral".into();
                }
                self.respond(Respond { kind, body }).await
            }
            _ => {
                late(&ack);
                self.inner.acking.lock().expect("ack lock").lost = Some(ack);
                Ok(())
            }
        }
    }

    /// Whether a step was held back, or a write failed in a way a retry could fix or left its
    /// fate unknown (see [`Steps::held`], [`Steps::doubtful`]): the claim cannot end done.
    pub(crate) async fn held_back(&self) -> bool {
        let steps = self.inner.steps.lock().await;
        steps.held || steps.doubtful || steps.in_step > 0
    }

    /// A write whose fate is unknown (a state change whose answer was lost): the claim cannot
    /// end done, whatever the listener does with the error.
    pub(crate) async fn doubtful(&self) {
        self.inner.steps.lock().await.doubtful = true;
    }

    /// An acknowledgement the listener chose too late to reach Slack in any form.
    pub(crate) fn lost_ack(&self) -> Option<Ack> {
        self.inner.acking.lock().expect("ack lock").lost.clone()
    }

    /// Whether the acknowledgement was made empty on the listener's behalf.
    pub(crate) fn acked_implicitly(&self) -> bool {
        let acking = self.inner.acking.lock().expect("ack lock");
        acking.implicit || acking.ack.is_none()
    }

    /// Whether a request released now is delivered again: not a click, a submission or a command
    /// answered synchronously, which Slack sends once (only the Events API redelivers; the
    /// queue redelivers whatever it holds).
    pub(crate) fn delivered_again_if_released(&self) -> bool {
        self.inner.acking.lock().expect("ack lock").mode != AckMode::Inline
    }

    /// Whether Slack has been (or is being) acknowledged: the request's `trigger_id` can no
    /// longer be spent.
    fn past_ack(&self) -> bool {
        let acking = self.inner.acking.lock().expect("ack lock");
        acking.ack.is_some() || matches!(acking.mode, AckMode::Given | AckMode::GivenEmpty)
    }

    /// The claim's attempt: 1 the first time, more when this run takes over from an earlier one.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AppMention, Ctx};
    ///
    /// let _app = App::new().app_mention(|ctx: Ctx, m: AppMention| async move {
    ///     if ctx.attempt().await > 1 {
    ///         tracing::warn!(ts = %m.ts, "taking over from an earlier run: its writes replay");
    ///     }
    ///     ctx.reply("On it.").await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn attempt(&self) -> u32 {
        self.inner.steps.lock().await.attempt
    }

    /// When the work must be done (the claim's lease, less a margin): bound slow calls by it.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{Ack, App, Command, Ctx, Respond};
    /// # async fn build_report() -> String { String::new() }
    ///
    /// let _app = App::new().command("/report", |ctx: Ctx, _cmd: Command| async move {
    ///     ctx.ack(Ack::ephemeral("Building the report…")).await?;
    ///     match tokio::time::timeout_at(ctx.deadline(), build_report()).await {
    ///         Ok(report) => ctx.respond(Respond::in_channel(report)).await?,
    ///         Err(_) => ctx.respond("The report took too long: try again later.").await?,
    ///     }
    ///     Ok(())
    /// });
    /// ```
    pub fn deadline(&self) -> Instant {
        self.inner.deadline
    }

    /// The same deadline on the wall clock.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::UNIX_EPOCH;
    /// use slack_once::app::{App, AppMention, Ctx};
    ///
    /// let _app = App::new().app_mention(|ctx: Ctx, _m: AppMention| async move {
    ///     let by = ctx.deadline_at().duration_since(UNIX_EPOCH)?.as_secs();
    ///     ctx.reply(format!("On it: an answer by <!date^{by}^{{time_secs}}|soon>.")).await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn deadline_at(&self) -> SystemTime {
        self.inner.wall_deadline
    }

    /// The time left until the deadline.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use slack_once::app::{App, AppMention, Ctx};
    ///
    /// let _app = App::new().app_mention(|ctx: Ctx, _m: AppMention| async move {
    ///     if ctx.remaining() < Duration::from_secs(10) {
    ///         ctx.reply("Too little time left for a summary: ask me again.").await?;
    ///         return Ok(());
    ///     }
    ///     ctx.reply("Here is the summary…").await?;
    ///     Ok(())
    /// });
    /// ```
    pub fn remaining(&self) -> Duration {
        self.inner
            .deadline
            .saturating_duration_since(Instant::now())
    }

    // ------------------------------------------------------------ writes, each a step
}

/// Writes to Slack, each a journaled step of the request: made once whatever runs it again
/// (a retry, a takeover, a redelivery), or replayed from the journal.
impl Ctx {
    /// Posts `message` in `channel` (`chat.postMessage`).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, Message, Reaction};
    ///
    /// let _app = App::new().reaction_added(|ctx: Ctx, r: Reaction| async move {
    ///     let (Some(channel), Some(ts)) = (&r.item.channel, &r.item.ts) else {
    ///         return Ok(());
    ///     };
    ///     if r.reaction == "ticket" {
    ///         let ticket = ctx.post("C0TRIAGE01", format!("New ticket from <#{channel}>")).await?;
    ///         let note = format!("Filed in <#{}> (ticket {})", ticket.channel, ticket.ts);
    ///         ctx.post(channel, Message::text(note).in_thread(ts)).await?;
    ///     }
    ///     Ok(())
    /// });
    /// ```
    pub async fn post(&self, channel: &str, message: impl Into<Message>) -> Result<Posted, Error> {
        let message = message.into();
        let args = message.args(channel, &[]);
        let answer = self
            .step(
                "chat.postMessage",
                args,
                Settle::Lookup {
                    channel,
                    thread_ts: message.thread_ts.as_deref(),
                },
                &[],
                Returns::Ids,
            )
            .await?;
        Ok(Posted {
            channel: answer["channel"].as_str().unwrap_or(channel).to_string(),
            ts: answer["ts"].as_str().unwrap_or_default().to_string(),
        })
    }

    /// Posts in the event's conversation: in its thread when the event is in one.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent};
    ///
    /// let _app = App::new()
    ///     .message(r"(?i)^good morning\b", |ctx: Ctx, m: MessageEvent| async move {
    ///         let user = m.user.as_deref().unwrap_or("there");
    ///         ctx.say(format!("Good morning, <@{user}> :sunny:")).await?;
    ///         Ok(())
    ///     });
    /// ```
    pub async fn say(&self, message: impl Into<Message>) -> Result<Posted, Error> {
        let (channel, thread) = self.conversation()?;
        let mut message = message.into();
        if message.thread_ts.is_none() {
            message.thread_ts = thread;
        }
        self.post(&channel, message).await
    }

    /// Posts in the thread of the event's message (starting one under it if need be).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AppMention, Ctx, Message, blocks};
    ///
    /// let _app = App::new().app_mention(|ctx: Ctx, _m: AppMention| async move {
    ///     let question = Message::text("Deploy to production?").blocks([
    ///         blocks::section("*Deploy to production?*"),
    ///         blocks::actions([blocks::button("Deploy", "deploy_prod", "api")]),
    ///     ]);
    ///     ctx.reply(question).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn reply(&self, message: impl Into<Message>) -> Result<Posted, Error> {
        let (channel, thread) = self.conversation()?;
        let Some(ts) = thread.or(self.inner.source.message_ts()) else {
            return Err(no_conversation());
        };
        let message = message.into().in_thread(ts);
        self.post(&channel, message).await
    }

    /// A message only `user` sees (`chat.postEphemeral`). Slack keeps no trace of it that can
    /// be looked up: if an earlier claim may have sent it, it is not sent again.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent};
    ///
    /// let _app = App::new()
    ///     .message(r"(?i)\bpassword\s*[:=]", |ctx: Ctx, m: MessageEvent| async move {
    ///         if let Some(user) = &m.user {
    ///             let warning = "That looks like a password: delete the message?";
    ///             ctx.post_ephemeral(&m.channel, user, warning).await?;
    ///         }
    ///         Ok(())
    ///     });
    /// ```
    pub async fn post_ephemeral(
        &self,
        channel: &str,
        user: &str,
        message: impl Into<Message>,
    ) -> Result<(), Error> {
        let args = message.into().args(channel, &[("user", user.into())]);
        self.step(
            "chat.postEphemeral",
            args,
            Settle::AtMostOnce,
            &[],
            Returns::Nothing,
        )
        .await
        .map(|_| ())
    }

    /// Replaces the message `ts` in `channel` (`chat.update`).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AppMention, Ctx};
    ///
    /// let _app = App::new().app_mention(|ctx: Ctx, _m: AppMention| async move {
    ///     let status = ctx.reply("Building… :hourglass:").await?;
    ///     // … the build …
    ///     ctx.update(&status.channel, &status.ts, "Build passed :white_check_mark:").await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn update(
        &self,
        channel: &str,
        ts: &str,
        message: impl Into<Message>,
    ) -> Result<(), Error> {
        let args = message.into().args(channel, &[("ts", ts.into())]);
        self.step(
            "chat.update",
            args,
            Settle::Idempotent,
            &[],
            Returns::Nothing,
        )
        .await
        .map(|_| ())
    }

    /// Deletes the message `ts` in `channel` (`chat.delete`; already gone is success).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, BlockAction, Ctx};
    ///
    /// let _app = App::new().action("dismiss", |ctx: Ctx, click: BlockAction| async move {
    ///     if let (Some(channel), Some(ts)) = (&click.channel_id, &click.message_ts) {
    ///         ctx.delete(channel, ts).await?;
    ///     }
    ///     Ok(())
    /// });
    /// ```
    pub async fn delete(&self, channel: &str, ts: &str) -> Result<(), Error> {
        let args = json!({"channel": channel, "ts": ts});
        self.step(
            "chat.delete",
            args,
            Settle::Idempotent,
            &["message_not_found"],
            Returns::Nothing,
        )
        .await
        .map(|_| ())
    }

    /// Adds the reaction `name` (without colons) to the message `ts` (`already_reacted` is
    /// success).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent};
    ///
    /// let _app = App::new()
    ///     .message(r"(?i)\bship(ped|ping)?\b", |ctx: Ctx, m: MessageEvent| async move {
    ///         ctx.react(&m.channel, &m.ts, "rocket").await?;
    ///         Ok(())
    ///     });
    /// ```
    pub async fn react(&self, channel: &str, ts: &str, name: &str) -> Result<(), Error> {
        self.reaction("reactions.add", "already_reacted", channel, ts, name)
            .await
    }

    /// Removes the reaction `name` from the message `ts` (`no_reaction` is success).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent};
    ///
    /// let _app = App::new()
    ///     .message(r"^deploy ([a-z0-9-]+)$", |ctx: Ctx, m: MessageEvent| async move {
    ///         ctx.react(&m.channel, &m.ts, "eyes").await?;
    ///         // … the deploy …
    ///         ctx.unreact(&m.channel, &m.ts, "eyes").await?;
    ///         ctx.react(&m.channel, &m.ts, "white_check_mark").await?;
    ///         Ok(())
    ///     });
    /// ```
    pub async fn unreact(&self, channel: &str, ts: &str, name: &str) -> Result<(), Error> {
        self.reaction("reactions.remove", "no_reaction", channel, ts, name)
            .await
    }

    async fn reaction(
        &self,
        method: &str,
        benign: &str,
        channel: &str,
        ts: &str,
        name: &str,
    ) -> Result<(), Error> {
        let args = json!({"channel": channel, "timestamp": ts, "name": name.trim_matches(':')});
        self.step(
            method,
            args,
            Settle::Idempotent,
            &[benign],
            Returns::Nothing,
        )
        .await
        .map(|_| ())
    }

    /// Reacts to the event's own message.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AppMention, Ctx};
    ///
    /// let _app = App::new().app_mention(|ctx: Ctx, _m: AppMention| async move {
    ///     ctx.react_to_event("eyes").await?; // on the message that mentions the bot
    ///     ctx.reply("Looking into it.").await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn react_to_event(&self, name: &str) -> Result<(), Error> {
        let (channel, _) = self.conversation()?;
        let Some(ts) = self.inner.source.message_ts() else {
            return Err(no_conversation());
        };
        self.react(&channel, &ts, name).await
    }

    /// Opens (or finds) the DM or group DM with `users` (`conversations.open`); returns its id.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{Ack, App, Command, Ctx, safe_text};
    ///
    /// let _app = App::new().command("/page", |ctx: Ctx, cmd: Command| async move {
    ///     ctx.ack(Ack::ephemeral("Paging the on-call…")).await?;
    ///     // A group DM of the caller and the on-call engineer.
    ///     let dm = ctx.open_conversation(&[cmd.user_id.as_str(), "U0ONCALL01"]).await?;
    ///     ctx.post(&dm, format!("Page: {}", safe_text(&cmd.text))).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn open_conversation(&self, users: &[&str]) -> Result<String, Error> {
        let args = json!({"users": users.join(",")});
        let answer = self
            .step(
                "conversations.open",
                args,
                Settle::Idempotent,
                &[],
                Returns::Ids,
            )
            .await?;
        Ok(answer["channel"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// Any other write method of the Web API, as a step: `settle` says what a later claim does
    /// when this call's fate is unknown ([`Settle::Idempotent`]: call again;
    /// [`Settle::AtMostOnce`]: not again). Returns Slack's answer.
    ///
    /// # Example
    ///
    /// ```
    /// use serde_json::json;
    /// use slack_once::app::{Ack, App, Command, Ctx, Settle, safe_text};
    ///
    /// let _app = App::new().command("/topic", |ctx: Ctx, cmd: Command| async move {
    ///     ctx.ack(Ack::empty()).await?;
    ///     let args = json!({"channel": cmd.channel_id, "topic": safe_text(&cmd.text)});
    ///     // The same topic set twice is the same topic: safe to make again.
    ///     ctx.call("conversations.setTopic", args, Settle::Idempotent).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn call(
        &self,
        method: &str,
        args: Value,
        settle: Settle<'_>,
    ) -> Result<Value, Error> {
        self.step(method, args, settle, &[], Returns::Ids).await
    }

    // ------------------------------------------------------------ interactions' follow-ups

    /// Answers through the request's `response_url` (a command's, a block action's in a
    /// message, a message shortcut's): see [`Respond`] for the kinds and how each is settled
    /// when a takeover does not know whether an earlier run's reached Slack. The URL is
    /// followed only if it is Slack's (https on `hooks.slack.com`, or the local stand-in named
    /// by `SLACK_API_URL`): any other is refused before any connection, and the event ends
    /// `failed` (`response_url_refused`).
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{Ack, App, Command, Ctx, Respond};
    ///
    /// let _app = App::new().command("/lunch", |ctx: Ctx, cmd: Command| async move {
    ///     ctx.ack(Ack::empty()).await?;
    ///     let invite = format!("<@{}> is going for lunch at noon: who's in?", cmd.user_id);
    ///     ctx.respond(Respond::in_channel(invite)).await?; // everyone sees it
    ///     ctx.respond("Invite posted.").await?; // a bare string: only the user sees it
    ///     Ok(())
    /// });
    /// ```
    pub async fn respond(&self, response: impl Into<Respond>) -> Result<(), Error> {
        let response = response.into();
        self.response_url()?;
        let conversation = self.inner.source.conversation();
        let settle = match (&response.kind, &conversation) {
            (RespondKind::InChannel, Some((channel, _))) => Settle::Lookup {
                channel,
                thread_ts: response.body["thread_ts"].as_str(),
            },
            (RespondKind::Replace | RespondKind::Delete, _) => Settle::Idempotent,
            _ => Settle::AtMostOnce,
        };
        self.step(
            RESPOND,
            response.body.clone(),
            settle,
            &[],
            Returns::Nothing,
        )
        .await
        .map(|_| ())
    }

    /// The request's `response_url`, if it is one that may be followed.
    fn response_url(&self) -> Result<http::Uri, Error> {
        let refused = |code: &str| Error::Slack(SlackError::Api { code: code.into() });
        let Some(url) = self.interaction().and_then(|i| i.response_url.as_deref()) else {
            return Err(refused("no_response_url"));
        };
        allowed_response_url(url, self.inner.slack.base_url()).map_err(|why| {
            // The URL itself is a credential for 30 minutes: only why it was refused is logged.
            tracing::warn!(reason = why, "a response_url was refused: not followed");
            crate::metrics::count("ResponseUrlRefused");
            refused("response_url_refused")
        })
    }
}

/// Views (modals), opened with the request's `trigger_id`, pushed and updated, each a step.
impl Ctx {
    /// Opens a modal with the request's `trigger_id` (`views.open`); returns the view's id.
    /// Only before [`Ctx::ack`]: a `trigger_id` lives 3 s and works once, so after the
    /// acknowledgement (and on a deferred worker) the call is not made and fails with
    /// `expired_trigger_id`. A takeover that does not know whether an earlier run opened it
    /// asks again: the same `trigger_id` cannot open a second one (`exchanged_trigger_id`).
    ///
    /// # Example
    ///
    /// ```
    /// use serde_json::json;
    /// use slack_once::app::{Ack, App, Ctx, Shortcut};
    ///
    /// let _app = App::new().shortcut("new_ticket", |ctx: Ctx, _s: Shortcut| async move {
    ///     let view = json!({
    ///         "type": "modal",
    ///         "callback_id": "ticket_modal",
    ///         "title": {"type": "plain_text", "text": "New ticket"},
    ///         "submit": {"type": "plain_text", "text": "File"},
    ///         "blocks": [{
    ///             "type": "input",
    ///             "block_id": "summary",
    ///             "label": {"type": "plain_text", "text": "Summary"},
    ///             "element": {"type": "plain_text_input", "action_id": "summary_text"}
    ///         }]
    ///     });
    ///     ctx.open_view(view).await?; // before the acknowledgement: the trigger_id lives 3 s
    ///     ctx.ack(Ack::empty()).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn open_view(&self, view: Value) -> Result<String, Error> {
        self.trigger_view("views.open", view).await
    }

    /// Pushes a view onto the open modal's stack with the request's `trigger_id`
    /// (`views.push`), under the same rules as [`Ctx::open_view`].
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{Ack, App, BlockAction, Ctx, blocks};
    ///
    /// // A button in a modal: a confirmation on top of it.
    /// let _app = App::new().action("delete_ticket", |ctx: Ctx, _click: BlockAction| async move {
    ///     let warning = blocks::section("Delete the ticket? This cannot be undone.");
    ///     let confirm = blocks::modal("confirm_delete", "Delete?", "Delete", [warning]);
    ///     ctx.push_view(confirm.into()).await?;
    ///     ctx.ack(Ack::empty()).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn push_view(&self, view: Value) -> Result<String, Error> {
        self.trigger_view("views.push", view).await
    }

    async fn trigger_view(&self, method: &str, view: Value) -> Result<String, Error> {
        let trigger = self
            .interaction()
            .and_then(|i| i.trigger_id.clone())
            .ok_or_else(|| {
                Error::Slack(SlackError::Api {
                    code: "invalid_trigger_id".into(),
                })
            })?;
        let args = json!({"trigger_id": trigger, "view": view});
        let answer = self
            .step(method, args, Settle::View, &[], Returns::Ids)
            .await?;
        Ok(answer["view"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// Replaces the view `view_id` (`views.update`): made again harmlessly on a takeover.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, BlockAction, Ctx, blocks};
    ///
    /// let _app = App::new().action("add_item", |ctx: Ctx, click: BlockAction| async move {
    ///     let Some(view_id) = &click.view_id else {
    ///         return Ok(()); // not in a modal
    ///     };
    ///     let view = blocks::modal("order_modal", "Order", "Send", [
    ///         blocks::input("item_1", "Item", blocks::text_input("item")),
    ///         blocks::input("item_2", "Another item", blocks::text_input("item")),
    ///     ]);
    ///     ctx.update_view(view_id, view.into()).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn update_view(&self, view_id: &str, view: Value) -> Result<(), Error> {
        let args = json!({"view_id": view_id, "view": view});
        self.step(
            "views.update",
            args,
            Settle::Idempotent,
            &[],
            Returns::Nothing,
        )
        .await
        .map(|_| ())
    }

    // ------------------------------------------------------------ remembered results
}

/// What a request computes once (`remember`), and reads from Slack, which are not steps: a
/// run that reads again may see newer data, and writes nothing.
impl Ctx {
    /// Runs `compute` once per event and remembers its result (any serialisable value, such as
    /// a model's answer) in the event's journal, written before this returns: a takeover, a
    /// retry or a redelivery that runs the listener again gets the remembered value and does
    /// not run `compute` again, so a listener that branches on it stays deterministic. It is a
    /// step like a write: `name` must be the same, at the same place, each time the listener
    /// runs. A result larger than 16 KiB serialised is not remembered (a
    /// warning says so): a later run computes it again.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, Ctx, MessageEvent};
    /// # async fn ask_model(question: &str) -> String { format!("You asked: {question}") }
    ///
    /// let _app = App::new().assistant_message(|ctx: Ctx, q: MessageEvent| async move {
    ///     // Asked once: a later run of the listener gets the remembered answer.
    ///     let answer: String = ctx.remember("answer", ask_model(&q.text)).await?;
    ///     ctx.reply(answer).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn remember<T, F>(&self, name: &str, compute: F) -> Result<T, Error>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
        F: std::future::Future<Output = T>,
    {
        journal::remember(&self.inner.steps, self.inner.deadline, name, compute).await
    }

    /// Writes what the steps learnt since the ledger was last written (a stream's `ts`, say)
    /// now, rather than with the next step: a takeover then knows it.
    pub(crate) async fn record_now(&self) -> Result<(), Error> {
        let mut steps = self.inner.steps.lock().await;
        steps.record_now(self.inner.deadline).await
    }

    // ------------------------------------------------------------ reads, straight to Slack

    /// Any read method (`users.info`, `conversations.info`, `conversations.replies`…), not
    /// journaled: it runs again each time the listener does. A method that writes
    /// (`chat.postMessage`…) is refused before anything is sent ([`Error::NotARead`]: see
    /// [`crate::slack::is_read_method`] for what counts as a read): a write goes through the
    /// journal, with [`Ctx::call`] or the typed calls.
    ///
    /// # Example
    ///
    /// ```
    /// use serde_json::json;
    /// use slack_once::app::{App, AppMention, Ctx};
    ///
    /// let _app = App::new().app_mention(|ctx: Ctx, m: AppMention| async move {
    ///     let thread = m.thread_ts.as_deref().unwrap_or(&m.ts);
    ///     let args = json!({"channel": m.channel, "ts": thread, "limit": 200});
    ///     let replies = ctx.read("conversations.replies", args).await?;
    ///     let n = replies["messages"].as_array().map_or(0, Vec::len);
    ///     ctx.reply(format!("This thread has {n} messages.")).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn read(&self, method: &str, args: Value) -> Result<Value, Error> {
        if !crate::slack::is_read_method(method) {
            return Err(Error::NotARead {
                method: method.to_string(),
            });
        }
        self.inner
            .slack
            .api(method, &Args::form_from(&args), self.inner.deadline)
            .await
            .map_err(Error::Slack)
    }

    /// A paginated read (`conversations.list`, `users.list`, `conversations.members`,
    /// `conversations.history`…), its pages followed by `response_metadata.next_cursor`: the
    /// items under `items` of every page, at most `max_pages` pages (each counts against the
    /// method's rate tier; reads run again each time the listener does). `limit` in `args`
    /// sets the page size.
    ///
    /// ```
    /// # async fn f(ctx: slack_once::app::Ctx) -> Result<(), slack_once::app::Error> {
    /// let channels = ctx
    ///     .read_pages("conversations.list", serde_json::json!({"limit": 200}), "channels", 5)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn read_pages(
        &self,
        method: &str,
        args: Value,
        items: &str,
        max_pages: usize,
    ) -> Result<Vec<Value>, Error> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..max_pages.max(1) {
            let mut page_args = args.clone();
            if let (Some(c), Some(map)) = (&cursor, page_args.as_object_mut()) {
                map.insert("cursor".into(), json!(c));
            }
            let page = self.read(method, page_args).await?;
            if let Some(list) = page[items].as_array() {
                all.extend(list.iter().cloned());
            }
            cursor = page["response_metadata"]["next_cursor"]
                .as_str()
                .filter(|c| !c.is_empty())
                .map(str::to_string);
            if cursor.is_none() {
                break;
            }
        }
        Ok(all)
    }

    /// `users.info`: the user object.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AppMention, Ctx};
    ///
    /// let _app = App::new().app_mention(|ctx: Ctx, m: AppMention| async move {
    ///     let Some(user) = &m.user else {
    ///         return Ok(());
    ///     };
    ///     let profile = ctx.user_info(user).await?;
    ///     let tz = profile["tz"].as_str().unwrap_or("UTC");
    ///     ctx.reply(format!("Your time zone is {tz}.")).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn user_info(&self, user: &str) -> Result<Value, Error> {
        let answer = self.read("users.info", json!({"user": user})).await?;
        Ok(answer["user"].clone())
    }

    /// `conversations.info`: the channel object.
    ///
    /// # Example
    ///
    /// ```
    /// use slack_once::app::{App, AppMention, Ctx, safe_text};
    ///
    /// let _app = App::new().app_mention(|ctx: Ctx, m: AppMention| async move {
    ///     let channel = ctx.conversation_info(&m.channel).await?;
    ///     let purpose = channel["purpose"]["value"].as_str().unwrap_or_default();
    ///     ctx.reply(format!("This channel is for: {}", safe_text(purpose))).await?;
    ///     Ok(())
    /// });
    /// ```
    pub async fn conversation_info(&self, channel: &str) -> Result<Value, Error> {
        let answer = self
            .read("conversations.info", json!({"channel": channel}))
            .await?;
        Ok(answer["channel"].clone())
    }

    // ------------------------------------------------------------ the engine

    fn conversation(&self) -> Result<(String, Option<String>), Error> {
        self.inner.source.conversation().ok_or_else(no_conversation)
    }

    /// A journaled write, for the other modules of the bot API (streams, assistants).
    pub(crate) async fn journaled(
        &self,
        method: &str,
        args: Value,
        settle: Settle<'_>,
        benign: &[&str],
        returns: Returns,
    ) -> Result<Value, Error> {
        self.step(method, args, settle, benign, returns).await
    }

    /// A journaled write for which Slack's answers `benign_if_announced` mean made already when
    /// it was announced before (by an earlier run, or `announced_elsewhere`): a completion.
    pub(crate) async fn journaled_announced(
        &self,
        method: &str,
        args: Value,
        settle: Settle<'_>,
        benign_if_announced: &[&str],
        announced_elsewhere: bool,
        returns: Returns,
    ) -> Result<Value, Error> {
        self.step_with(
            method,
            args,
            settle,
            (&[], benign_if_announced, announced_elsewhere),
            returns,
        )
        .await
    }

    /// Takes the number of a step this run does not make (a completion another request made
    /// for this one), so that the steps after it keep the numbers they have on every run.
    pub(crate) async fn pass_step(&self, method: &str, args: &Value) -> Result<(), Error> {
        let op = crate::journal::step_identity(method, args);
        self.inner.steps.lock().await.take(&op).map(|_| ())
    }

    /// Whether the app hears the stop button: its streams read a session's stop.
    pub(crate) fn hears_stops(&self) -> bool {
        self.inner.agent
    }

    /// As [`Ctx::pass_step`], giving what an earlier run recorded there as done (its ids),
    /// if it did.
    pub(crate) async fn pass_recorded(
        &self,
        method: &str,
        args: &Value,
    ) -> Result<Option<Value>, Error> {
        let op = crate::journal::step_identity(method, args);
        let (_, record) = self.inner.steps.lock().await.take(&op)?;
        Ok(match record {
            Some(crate::journal::record::StepRecord::Done { result, .. }) => {
                serde_json::from_str(&result).ok()
            }
            _ => None,
        })
    }

    /// Keeps a person's stop of the answer streamed in `parts` (in the thread `thread_ts` of
    /// `channel`) beside the claims, as its event does, where a run learnt of it from Slack
    /// first (`stopped_by_user`): so that every later run of the answer knows it. The stop
    /// names the answer's parts: no other answer of the thread is stopped by it. Best effort.
    pub(crate) async fn note_stop(&self, channel: &str, thread_ts: &str, parts: Vec<String>) {
        let Some(keys) = self
            .team()
            .and_then(|t| crate::keys::session_stop_keys(t, channel, thread_ts, self.app_id()))
        else {
            return;
        };
        // Stamped with a time the stop cannot be earlier than: this request's (the stop came
        // while its answer streamed). The stop's own event (its real time) is kept beside it.
        let now_ms = crate::clock::now_ms();
        let at_ms = self.request_ms().unwrap_or(now_ms).min(now_ms);
        let stop = crate::keys::StopNote::pressed(at_ms, parts);
        let expires_at_s = now_ms / 1000 + 7 * 86_400;
        let ledger = self.inner.steps.lock().await.ledger.clone();
        let write = crate::keys::keep_stop(ledger.as_ref(), &keys, stop, expires_at_s, now_ms);
        if let Err(e) | Ok(Err(e)) = tokio::time::timeout_at(self.inner.deadline, write)
            .await
            .map_err(|_| LedgerError::Unavailable("the deadline passed".into()))
        {
            tracing::warn!(error = %crate::errors::error_chain(&e), "the stop could not be kept");
        }
    }

    /// The function (Workflow Builder step) registered under `callback_id`.
    pub(crate) fn function(&self, callback_id: &str) -> Option<&super::function::Function> {
        self.inner
            .functions
            .iter()
            .find(|f| f.callback_id() == callback_id)
    }

    /// The request's ledger key.
    pub(crate) fn ledger_key(&self) -> &str {
        self.inner.key.as_str()
    }

    /// The number the next step will have.
    pub(crate) async fn next_step(&self) -> u32 {
        self.inner.steps.lock().await.next
    }

    /// slack-once's names for a message made at `step` (for its metadata).
    pub(crate) fn names(&self, step: u32) -> Value {
        json!({
            "key": self.inner.key.as_str(),
            "event_id": self.inner.source.id(),
            "step": step,
            "version": self.inner.version,
        })
    }

    /// What the journal holds for the next `n` steps (what an earlier run of the listener did
    /// at this point): per step, `None` where it has no record, `Some(None)` where it has one
    /// without an identity (an earlier claim's began window), else the step's identity.
    pub(crate) async fn records_ahead(&self, n: u32) -> Vec<Option<Option<String>>> {
        let steps = self.inner.steps.lock().await;
        (0..n)
            .map(|i| {
                let record = steps.journal.get(&(steps.next + i))?;
                Some(record.op().map(str::to_string))
            })
            .collect()
    }

    /// How many writes this claim has made to Slack so far.
    pub(crate) async fn made(&self) -> u32 {
        self.inner.steps.lock().await.tally.made
    }

    /// The last write made counted as not made: Slack refused it as a recorded result that
    /// made nothing (a stream's refused recipient).
    pub(crate) async fn unmade(&self) {
        let mut steps = self.inner.steps.lock().await;
        steps.tally.made = steps.tally.made.saturating_sub(1);
    }

    /// The request as Slack sent it, byte for byte, and its content type: an event's envelope
    /// (JSON), or a command's or an interaction's form. What the gateway forwards to a bot.
    pub(crate) fn delivered(&self) -> Option<(Arc<str>, &'static str)> {
        const JSON: &str = "application/json";
        const FORM: &str = "application/x-www-form-urlencoded";
        match &self.inner.source {
            Source::Event(cb) => cb.delivered.clone().map(|body| (body, JSON)),
            Source::Interaction { interaction, .. } => {
                interaction.delivered.clone().map(|body| (body, FORM))
            }
        }
    }

    /// Deferred mode's ingress: the request is handed to a worker here (acknowledged empty on
    /// the listener's behalf, so that a message it acknowledges with on the worker goes
    /// through the `response_url`). Elsewhere, nothing.
    pub(crate) async fn to_a_worker_from_the_ingress(&self) -> Result<(), Error> {
        let mode = self.inner.acking.lock().expect("ack lock").mode;
        match mode {
            AckMode::StopAfter => self.hand_off().await,
            _ => Ok(()),
        }
    }

    /// The listener is run again under this claim (the gateway's forward to another replica):
    /// its steps are numbered from the first again, so those this claim made replay.
    pub(crate) async fn run_again_from_first_step(&self) {
        self.inner.steps.lock().await.rewind();
    }

    /// The Web API client (for calls that are not steps: a stream's appends).
    pub(crate) fn slack(&self) -> &SlackClient {
        &self.inner.slack
    }

    /// One journaled write: see [`crate::journal`].
    async fn step(
        &self,
        method: &str,
        args: Value,
        settle: Settle<'_>,
        benign: &[&str],
        returns: Returns,
    ) -> Result<Value, Error> {
        self.step_with(method, args, settle, (benign, &[], false), returns)
            .await
    }

    async fn step_with(
        &self,
        method: &str,
        args: Value,
        settle: Settle<'_>,
        (benign, benign_if_announced, announced_elsewhere): (&[&str], &[&str], bool),
        returns: Returns,
    ) -> Result<Value, Error> {
        let source = &self.inner.source;
        let response_url = match method {
            RESPOND => Some(self.response_url()?),
            _ => None,
        };
        let r = For {
            slack: &self.inner.slack,
            deadline: self.inner.deadline,
            source_id: source.id(),
            version: &self.inner.version,
            app: OurApp {
                app_id: source.app_id(),
                bot_user_id: source.bot_user_id(),
            },
            since_ts: source.since_ts(),
            own_channel: match source {
                Source::Event(cb) => cb.event.channel.as_deref(),
                Source::Interaction { .. } => None,
            },
            past_ack: self.past_ack(),
            response_url,
        };
        let call = Call {
            method,
            args,
            settle,
            benign,
            benign_if_announced,
            announced_elsewhere,
            returns,
        };
        match journal::make(&self.inner.steps, &r, call).await? {
            Made::Answer(answer) => Ok(answer),
            Made::HandOff => self.hand_off().await,
        }
    }

    /// Deferred mode's ingress: what follows is a worker's. Acknowledged now (with the
    /// listener's acknowledgement, or an empty one), and this run goes no further.
    async fn hand_off<T>(&self) -> Result<T, Error> {
        let ack = self.chosen_ack().is_none().then(Ack::empty);
        if let Some(ack) = ack {
            self.inner.acking.lock().expect("ack lock").implicit = true;
            self.ack(ack).await?;
        }
        std::future::pending::<()>().await;
        unreachable!("the pipeline drops this run");
    }

    /// Before a use of the app's state (`write`: a change; else a read). Deferred mode's
    /// ingress runs a listener with no claim behind it: a change is a worker's, and so is a read
    /// where the ingress's ledger is its own memory (no table): the request is handed off
    /// here, as at a write that is not a view. A read from the table goes on (a listener may
    /// read state, then open a view with the trigger).
    pub(crate) async fn state_is_a_workers(&self, write: bool) -> Result<(), Error> {
        let mode = self.inner.acking.lock().expect("ack lock").mode;
        if mode != AckMode::StopAfter {
            return Ok(());
        }
        if write || !self.ledger().await.is_shared() {
            return self.hand_off().await;
        }
        Ok(())
    }
}

/// What a `response_url` post does, which decides how a takeover settles it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RespondKind {
    Ephemeral,
    InChannel,
    Replace,
    Delete,
}

/// A post to the request's `response_url` ([`Ctx::respond`]). How a takeover that does not
/// know whether an earlier run's post reached Slack settles it:
/// - [`Respond::in_channel`]: a message in the conversation, carrying slack-once's metadata
///   like every post, so it is looked for among the app's messages, and posted only if absent;
/// - [`Respond::replace`] / [`Respond::delete`]: made again (the same result twice);
/// - [`Respond::ephemeral`] (also a bare string): Slack keeps no trace of it that can be
///   looked up, so it is not sent again: at most once.
#[derive(Clone, Debug, PartialEq)]
pub struct Respond {
    kind: RespondKind,
    body: Value,
}

impl Respond {
    /// A message only the user who made the request sees (`response_type: ephemeral`); sent at most
    /// once.
    pub fn ephemeral(message: impl Into<Message>) -> Self {
        Self {
            kind: RespondKind::Ephemeral,
            body: response_body(message.into(), "ephemeral"),
        }
    }

    /// A message everyone in the conversation sees (`response_type: in_channel`).
    pub fn in_channel(message: impl Into<Message>) -> Self {
        Self {
            kind: RespondKind::InChannel,
            body: response_body(message.into(), "in_channel"),
        }
    }

    /// Replaces the message the request came from (a button's message).
    pub fn replace(message: impl Into<Message>) -> Self {
        let mut body = serde_json::to_value(message.into()).unwrap_or_else(|_| json!({}));
        body["replace_original"] = true.into();
        Self {
            kind: RespondKind::Replace,
            body,
        }
    }

    /// Deletes the message the request came from.
    pub fn delete() -> Self {
        Self {
            kind: RespondKind::Delete,
            body: json!({"delete_original": true}),
        }
    }
}

impl Respond {
    /// A `response_url` body as a bot sends it: its kind read from `delete_original`,
    /// `replace_original` and `response_type`.
    pub(crate) fn from_body(body: Value) -> Self {
        let flag = |key: &str| body[key] == true || body[key] == "true";
        let kind = if flag("delete_original") {
            RespondKind::Delete
        } else if flag("replace_original") {
            RespondKind::Replace
        } else if body["response_type"] == "in_channel" {
            RespondKind::InChannel
        } else {
            RespondKind::Ephemeral
        };
        Self { kind, body }
    }
}

impl From<&str> for Respond {
    fn from(text: &str) -> Self {
        Respond::ephemeral(text)
    }
}

impl From<String> for Respond {
    fn from(text: String) -> Self {
        Respond::ephemeral(text)
    }
}

fn no_conversation() -> Error {
    Error::Slack(SlackError::Api {
        code: "no_conversation_in_event".into(),
    })
}
