//! Test helpers: `SlackStandin`, the API tests' view of [`slack_once::testing::FakeSlack`] (the
//! one HTTP stand-in for Slack's Web API): the app the tests' events are for, the messages
//! those events are about in every conversation, and the faults the tests script (statuses,
//! delays, hangs, outages, random faults, look-up refusals), all served by the test kit.

use super::*;
use slack_once::testing::{FakeSlack, Workspace};
pub use slack_once::testing::{RandomFaults, SlackFailure};

#[derive(Clone, Debug)]
pub struct Post {
    pub authorization: Option<String>,
    /// The message as Slack holds it (a posted one), or the request's arguments (received).
    pub body: serde_json::Value,
    /// The `ts` Slack gave the message (empty until posted).
    pub ts: String,
}

/// The app the tests' events are for (their `api_app_id`, team and bot user).
pub const APP_ID: &str = "A0001";
pub const TEAM: &str = "T0001";
pub const BOT_ID: &str = "B0001";

/// The messages the tests' events are about, by channel: every stand-in's conversations hold
/// them, as Slack's do (the message an event is about exists in its conversation).
static EVENT_MESSAGES: Mutex<Option<HashMap<String, Vec<serde_json::Value>>>> = Mutex::new(None);

/// Records the message a signed event body is about (see [`EVENT_MESSAGES`]), when a person
/// posted it (the tests' bots' messages are the stand-ins' own).
pub fn register_event_message(body: &[u8]) {
    let by_a_bot = serde_json::from_slice::<serde_json::Value>(body)
        .is_ok_and(|v| !v["event"]["bot_id"].is_null() || !v["event"]["app_id"].is_null());
    if by_a_bot {
        return;
    }
    let mut scratch = Workspace::new(identity());
    scratch.add_event_message(body);
    let mut all = EVENT_MESSAGES.lock().unwrap();
    let all = all.get_or_insert_with(HashMap::new);
    for message in scratch.messages() {
        let channel = message["channel"].as_str().unwrap_or_default().to_string();
        all.entry(channel).or_default().push(message.clone());
    }
}

fn identity() -> slack_once::testing::Identity {
    slack_once::testing::Identity {
        team: TEAM.into(),
        app_id: APP_ID.into(),
        bot_id: BOT_ID.into(),
        bot_user: BOT_USER.into(),
    }
}

/// How many of each channel's event messages a workspace holds already.
type Synced = Arc<Mutex<HashMap<String, usize>>>;

/// The event messages of `channel` are in the conversation (see [`EVENT_MESSAGES`]): those
/// registered since the last sync (a soak registers thousands).
fn sync(synced: &Synced, workspace: &mut Workspace, channel: &str) {
    let all = EVENT_MESSAGES.lock().unwrap();
    if let Some(messages) = all.as_ref().and_then(|a| a.get(channel)) {
        let mut synced = synced.lock().unwrap();
        let synced = synced.entry(channel.to_string()).or_insert(0);
        for m in &messages[(*synced).min(messages.len())..] {
            workspace.add_message(m.clone());
        }
        *synced = messages.len();
    }
}

fn is_read(method: &str) -> bool {
    matches!(method, "conversations.history" | "conversations.replies")
}

/// [`FakeSlack`] on 127.0.0.1 for the tests' app, its conversations holding the messages the
/// tests' events are about.
pub struct SlackStandin {
    pub base_url: String,
    slack: FakeSlack,
    synced: Synced,
}

impl SlackStandin {
    pub async fn start() -> Self {
        let slack = FakeSlack::start_for(identity()).await;
        let synced = Synced::default();
        let before = synced.clone();
        slack.before_each_call(move |workspace, args| {
            sync(
                &before,
                workspace,
                args["channel"].as_str().unwrap_or_default(),
            );
        });
        Self {
            base_url: slack.base_url().to_string(),
            slack,
            synced,
        }
    }

    /// Slack's Socket Mode for the tests' app ([`FakeSlack::socket_mode`]).
    pub fn socket_mode(&self) -> slack_once::testing::SocketMode {
        self.slack.socket_mode()
    }

    /// From now on, only `token` is good: any other gets `ok:false` with `invalid_auth` (as
    /// after a rotation) and changes nothing.
    pub fn require_token(&self, token: &str) {
        self.slack.require_bot_token(Some(token));
    }

    /// Queues failures for the next calls of `method` (or `response_url`), one each (`None`
    /// in the queue: answered as ever); after the queue, calls are answered.
    pub fn script_method<F: Into<Option<SlackFailure>>>(
        &self,
        method: &str,
        failures: impl IntoIterator<Item = F>,
    ) {
        self.slack.script(method, failures);
    }

    /// A workflow reaches a step of this app's (`callback_id`): Slack starts an execution.
    pub fn start_execution(
        &self,
        callback_id: &str,
        inputs: serde_json::Value,
    ) -> slack_once::testing::StartedExecution {
        self.slack.start_execution(callback_id, inputs)
    }

    /// A new token of the execution `id`, as Slack sends one with each click or submission in
    /// the step ([`FakeSlack::execution_token`]).
    pub fn execution_token(&self, id: &str) -> String {
        self.slack.execution_token(id).expect("a started execution")
    }

    /// Each Web API call's method and the token it came with ([`FakeSlack::tokens_used`]).
    pub fn tokens_used(&self) -> Vec<(String, String)> {
        self.slack.tokens_used()
    }

    /// The executions, as [`FakeSlack::executions`] shows them.
    pub fn executions(&self) -> Vec<serde_json::Value> {
        self.slack.executions()
    }

    /// The stand-in's origin (`http://127.0.0.1:PORT`): its response URLs live there.
    pub fn origin(&self) -> String {
        self.base_url.trim_end_matches("/api").to_string()
    }

    /// Streams stop taking appends this long after they start (Slack: about 5 minutes).
    pub fn set_stream_expiry(&self, expiry: Duration) {
        self.slack.set_stream_expiry(expiry);
    }

    /// Works on the stand-in's workspace directly (a session's statuses, a person's stop).
    pub fn with_workspace<T>(&self, f: impl FnOnce(&mut Workspace) -> T) -> T {
        self.slack.with_workspace(f)
    }

    /// The assistant calls: (method, channel, thread_ts, arguments).
    pub fn assistant_calls(&self) -> Vec<(String, String, String, serde_json::Value)> {
        self.slack.assistant_calls()
    }

    /// The views open or pushed, as Slack shows them.
    pub fn views(&self) -> Vec<serde_json::Value> {
        self.slack.views()
    }

    /// Every other write method called, in order: (method, arguments). Posts to a response
    /// URL are the method `response_url`.
    pub fn calls(&self) -> Vec<(String, serde_json::Value)> {
        self.slack
            .requests()
            .into_iter()
            .filter(|r| r.method != "chat.postMessage" && !is_read(&r.method))
            .map(|r| (r.method, r.args))
            .collect()
    }

    /// How many times `method` was called.
    pub fn calls_of(&self, method: &str) -> usize {
        self.calls().iter().filter(|(m, _)| m == method).count()
    }

    /// The reactions in place: (channel, ts, name).
    pub fn reactions(&self) -> Vec<(String, String, String)> {
        self.slack.reactions()
    }

    pub fn ephemerals(&self) -> Vec<serde_json::Value> {
        self.slack.ephemerals()
    }

    /// Queues failures for the next posts (chat.postMessage), as [`Self::script_method`].
    pub fn script<F: Into<Option<SlackFailure>>>(&self, failures: impl IntoIterator<Item = F>) {
        self.script_method("chat.postMessage", failures);
    }

    /// For `duration` from now, every chat.postMessage answers HTTP 500 and posts nothing.
    pub fn outage(&self, duration: Duration) {
        self.slack.outage("chat.postMessage", duration);
    }

    /// Makes conversations.replies / .history fail with this Slack error code.
    pub fn fail_lookups(&self, code: &'static str) {
        self.slack.fail_reads(Some(code));
    }

    /// Queues failures for the next look-ups (conversations.replies or .history, whichever
    /// comes); after the queue, look-ups are answered.
    pub fn script_lookups(&self, failures: impl IntoIterator<Item = SlackFailure>) {
        self.slack.fail_next_reads(failures);
    }

    /// Slack's 2025 limits for commercially distributed apps outside the Marketplace: `n`
    /// look-ups a minute per method (15 messages a page always).
    pub fn limit_lookups_per_minute(&self, n: usize) {
        self.slack.limit_reads_per_minute(n);
    }

    /// How many conversations.replies / .history calls were answered.
    pub fn lookups(&self) -> usize {
        self.slack.reads_answered()
    }

    /// The query of every look-up request received, answered or refused.
    pub fn lookup_queries(&self) -> Vec<HashMap<String, String>> {
        self.slack
            .requests()
            .into_iter()
            .filter(|r| is_read(&r.method))
            .map(|r| {
                r.args
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| {
                        let v = match v {
                            serde_json::Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        (k.clone(), v)
                    })
                    .collect()
            })
            .collect()
    }

    /// Works on the workspace with `channel`'s event messages in it.
    fn with_synced<T>(&self, channel: &str, f: impl FnOnce(&mut Workspace) -> T) -> T {
        self.slack.with_workspace(|w| {
            sync(&self.synced, w, channel);
            f(w)
        })
    }

    /// Adds `count` messages of people to `channel` (in the thread `thread_ts`), newer than
    /// everything, so that a look-up has pages to turn.
    pub fn add_other_messages(&self, channel: &str, thread_ts: Option<&str>, count: usize) {
        self.with_synced(channel, |w| w.add_chatter(channel, thread_ts, count));
    }

    /// Adds a message of another app carrying `metadata` (see
    /// [`slack_once::testing::Workspace::add_foreign`]); returns its `ts`.
    pub fn add_foreign_message(
        &self,
        channel: &str,
        thread_ts: Option<&str>,
        metadata: serde_json::Value,
    ) -> String {
        self.with_synced(channel, |w| w.add_foreign(channel, thread_ts, metadata))
    }

    /// From now on, every call no script decides draws its fault from `faults` (`None`: no
    /// more random faults).
    pub fn random_faults(&self, faults: Option<RandomFaults>) {
        self.slack.random_faults(faults);
    }

    /// The random faults drawn so far: (method, failure) → count.
    pub fn faults_drawn(&self) -> HashMap<(String, String), u64> {
        self.slack.faults_drawn()
    }

    /// From now on only the count of requests per method is kept, not their arguments: for a
    /// soak of a million.
    pub fn keep_counts_only(&self) {
        self.slack.keep_counts_only();
    }

    /// Requests received per method so far (`response_url` for posts to a response URL).
    pub fn counts(&self) -> HashMap<String, usize> {
        self.slack.counts()
    }

    /// A message of `channel` and its thread's replies, as Slack holds them.
    pub fn thread(&self, channel: &str, ts: &str) -> Vec<serde_json::Value> {
        self.with_synced(channel, |w| w.thread(channel, ts))
    }

    /// How many messages this app has in Slack now.
    pub fn posted_count(&self) -> usize {
        self.slack.with_workspace(|w| w.ours_count())
    }

    /// This app's messages in Slack (what a user sees of the bot: updates applied, deletions
    /// removed), oldest first.
    pub fn posted(&self) -> Vec<Post> {
        self.posted_from(0)
    }

    /// This app's messages from the `first`-th (0: the oldest) on, as [`Self::posted`].
    pub fn posted_from(&self, first: usize) -> Vec<Post> {
        self.slack
            .with_workspace(|w| w.ours_from(first))
            .into_iter()
            .map(|m| {
                let ts = m["ts"].as_str().unwrap_or_default().to_string();
                Post {
                    authorization: self
                        .slack
                        .token_of_message(&ts)
                        .map(|t| format!("Bearer {t}")),
                    body: m,
                    ts,
                }
            })
            .collect()
    }

    /// How many times a connection was opened ahead of a first call (`HEAD api.test`).
    pub fn warm_ups(&self) -> usize {
        self.slack.warm_ups()
    }

    /// Every chat.postMessage request received, in order, answered or not.
    pub fn received(&self) -> Vec<Post> {
        self.slack
            .requests()
            .into_iter()
            .filter(|r| r.method == "chat.postMessage")
            .map(|r| Post {
                authorization: r.token.map(|t| format!("Bearer {t}")),
                body: r.args,
                ts: String::new(),
            })
            .collect()
    }

    /// Posts per event id, read from the metadata slack-once attaches to each reply.
    pub fn posts_per_event(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for post in self.posted() {
            let id = post.body["metadata"]["event_payload"]["slack_once"]["event_id"]
                .as_str()
                .unwrap_or("?")
                .to_string();
            *counts.entry(id).or_default() += 1;
        }
        counts
    }
}
