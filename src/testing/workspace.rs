//! A Slack workspace as its Web API shows it, for stand-ins: the conversations and their
//! messages (people's, this app's, other apps'), reactions and ephemeral messages, and the
//! answers Slack gives to the methods a bot uses. No HTTP here: [`super::FakeSlack`] and the
//! integration tests' stand-in serve it.
//!
//! Where a bot's correctness depends on Slack, this behaves as Slack does:
//! - the message an event is about exists in its conversation ([`Workspace::add_message`]);
//! - every message this app posts carries its `bot_id`, `app_id`, bot user and `bot_profile`,
//!   and another app's carry that app's ([`Workspace::add_foreign`]), whatever their metadata;
//! - `ts` come from the clock, strictly increasing;
//! - `conversations.history` pages top-level messages newest first, `conversations.replies`
//!   a thread's parent and then its replies oldest first, both within `oldest`/`latest`
//!   (exclusive, both included with `inclusive`), at most `limit` (capped at 15, Slack's 2025
//!   cap for commercially distributed apps outside the Marketplace) a page, behind an opaque
//!   `cursor`, metadata only with `include_all_metadata`;
//! - a post to a user's id lands in that user's DM with the bot;
//! - a `response_url` ([`Workspace::respond`]) takes at most 5 posts within 30 minutes: an
//!   `in_channel` one is a message of this app in its conversation (with its metadata), an
//!   `ephemeral` one is seen by the user only, `replace_original` / `delete_original` change
//!   the message the request came from. Stand-ins' response URLs name their conversation:
//!   `/commands/{team}/{channel}/{id}` and `/actions/{team}/{channel}/{message_ts}/{id}`;
//! - a stream (`chat.startStream`) is a message of this app in its thread, without metadata
//!   (outside a DM it needs `recipient_team_id` and `recipient_user_id`:
//!   `missing_recipient_team_id` / `_user_id`; a recipient of another workspace, as a Slack
//!   Connect author is: `user_not_found`), that `chat.appendStream` extends and `chat.stopStream` ends (with its final text, blocks
//!   and metadata); once stopped, or older than the stream expiry (Slack: about 5 minutes;
//!   [`Workspace::set_stream_expiry`]), both answer `message_not_in_streaming_state`;
//!   `assistant.threads.setStatus` / `setSuggestedPrompts` / `setTitle` are kept per thread
//!   (suggested prompts also without a thread: the agent view's Messages tab);
//! - a stream's `chunks` are shown as Slack shows them: `markdown_text` extends its text,
//!   `plan_update` titles its plan, `task_update` adds a task or changes it in place (by its
//!   `id`; a status other than `pending`, `in_progress`, `complete`, `error` is
//!   `invalid_chunks`), `blocks` adds blocks; each task's updates are counted
//!   ([`Workspace::task_updates`]). `chat.update` replaces what the message shows (its plan
//!   and streamed blocks with it). A person's stop ([`Workspace::stop_session`]) stops the
//!   app's streams of the session's thread: appends answer `stopped_by_user`, stops
//!   `message_not_in_streaming_state`;
//! - an agent session per thread (`agents.sessions.setStatus`: `processing`, `active`,
//!   `suspended`, `closed`, and a title when it creates one; `agents.sessions.rename`; a
//!   stream's start makes it `processing`, its stop `session_status`, `active` by default),
//!   each status kept in order ([`Workspace::session`]);
//! - a `trigger_id` ([`Workspace::trigger_id`]: `{epoch ms}.{n}.{hex}`, as Slack mints one per
//!   request) opens or pushes one view, within 3 s of its minting: after that
//!   `expired_trigger_id`, a second use `exchanged_trigger_id`; a view's `external_id` is one
//!   view's in the workspace (`duplicate_external_id`), and `views.update` finds a view by it
//!   as by its `view_id`.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::time::SystemTime;

use base64::Engine;
use serde_json::{Value, json};

/// Slack's 2025 cap on `limit` for conversations.history / .replies (new commercially
/// distributed apps outside the Marketplace).
pub const PAGE_CAP: usize = 15;

/// Who this workspace's app is.
#[derive(Clone, Debug)]
pub struct Identity {
    /// The workspace's team id (`T…`).
    pub team: String,
    /// This app's id (`A…`), on every message it posts.
    pub app_id: String,
    /// This app's bot id (`B…`), on every message it posts.
    pub bot_id: String,
    /// This app's bot user (`U…`), the author of its messages.
    pub bot_user: String,
}

/// The app another bot's messages come from (see [`Workspace::add_foreign`]).
pub const OTHER_APP: &str = "A0999OTHER";
const OTHER_BOT: &str = "B0999OTHER";

/// One workspace's conversations.
#[derive(Debug)]
pub struct Workspace {
    /// Who this workspace's app is.
    pub identity: Identity,
    /// Every message, in the order added.
    messages: Vec<Value>,
    /// Where each message is in `messages`, and how the conversation methods list them: kept
    /// beside `messages` so that a look-up costs what its page does, however long the
    /// conversation (a soak's channels hold hundreds of thousands).
    index: Index,
    reactions: BTreeSet<(String, String, String)>,
    ephemerals: Vec<Value>,
    last_micros: u128,
    /// How far Slack's clock (the `ts` it gives messages) runs behind this process's.
    clock_behind_micros: u128,
    /// Each response URL's uses so far, and when it was first used (epoch ms).
    hooks: HashMap<String, (u32, u64)>,
    /// The trigger ids spent.
    triggers: BTreeSet<String>,
    /// The views open: id → the view as Slack shows it.
    views: Vec<Value>,
    /// How long a stream takes appends (epoch ms of its start are kept on its message).
    stream_expiry_ms: u64,
    /// The most messages a `conversations.history` / `.replies` page holds.
    page_cap: usize,
    /// The assistant threads' status, prompts and titles: (method, channel, thread_ts, args).
    assistant: Vec<(String, String, String, Value)>,
    /// Agent sessions by (channel, thread_ts): `{status, title, statuses: [...]}`.
    sessions: HashMap<(String, String), Value>,
    /// Each task's updates: (channel, stream ts, task id) → the statuses sent, in order.
    task_updates: HashMap<(String, String, String), Vec<String>>,
    /// Workflow Builder step executions and their tokens (the default workspace's stand-in
    /// keeps every team's: an execution names its team).
    pub(crate) executions: super::functions::Executions,
}

/// Positions in [`Workspace`]'s `messages`, by what the methods look messages up by.
#[derive(Debug, Default)]
struct Index {
    /// (channel, ts) → position.
    at: HashMap<(String, String), usize>,
    /// Per channel, what `conversations.history` lists (top-level messages, thread parents and
    /// replies broadcast to the channel), ordered by (`ts` in microseconds, position).
    listed: HashMap<String, BTreeSet<Place>>,
    /// Per (channel, thread_ts), the thread's replies, ordered the same way.
    replies: HashMap<(String, String), BTreeSet<Place>>,
    /// The positions of this app's messages, oldest first.
    ours: Vec<usize>,
}

impl Index {
    fn add(&mut self, message: &Value, position: usize, app_id: &str) {
        let (channel, ts) = (text(&message["channel"]), text(&message["ts"]));
        let at = (micros(&ts).unwrap_or(0), position);
        let thread = text(&message["thread_ts"]);
        if thread.is_empty() || thread == ts || message["reply_broadcast"] == true {
            self.listed.entry(channel.clone()).or_default().insert(at);
        }
        if !thread.is_empty() && thread != ts {
            self.replies
                .entry((channel.clone(), thread))
                .or_default()
                .insert(at);
        }
        if message["app_id"] == app_id {
            self.ours.push(position);
        }
        self.at.insert((channel, ts), position);
    }
}

/// A message's place in a conversation's order: its `ts` in microseconds, its position.
type Place = (u128, usize);

/// The range of a conversation's ordered positions within a look-up's `oldest` / `latest`
/// (exclusive, both included with `inclusive`).
fn window(query: &HashMap<String, String>) -> (Bound<Place>, Bound<Place>) {
    let bound = |key: &str| query.get(key).and_then(|t| micros(t));
    let inclusive = matches!(
        query.get("inclusive").map(String::as_str),
        Some("true" | "1")
    );
    let lower = match bound("oldest") {
        None => Bound::Unbounded,
        Some(o) if inclusive => Bound::Included((o, 0)),
        Some(o) => Bound::Excluded((o, usize::MAX)),
    };
    let upper = match bound("latest") {
        None => Bound::Unbounded,
        Some(l) if inclusive => Bound::Included((l, usize::MAX)),
        Some(l) => Bound::Excluded((l, 0)),
    };
    (lower, upper)
}

/// The places of `set` within `bounds` ([`window`]), in order; none for an empty window (a
/// `latest` before `oldest`, which `BTreeSet::range` does not take).
fn within(
    set: &BTreeSet<Place>,
    (lower, upper): (Bound<Place>, Bound<Place>),
) -> impl DoubleEndedIterator<Item = &Place> {
    let start = match lower {
        Bound::Included(p) | Bound::Excluded(p) => Some(p),
        Bound::Unbounded => None,
    };
    let end = match upper {
        Bound::Included(p) | Bound::Excluded(p) => Some(p),
        Bound::Unbounded => None,
    };
    let both_excluded = matches!((lower, upper), (Bound::Excluded(_), Bound::Excluded(_)));
    let empty = match (start, end) {
        (Some(a), Some(b)) => a > b || (a == b && both_excluded),
        _ => false,
    };
    (!empty)
        .then(|| set.range((lower, upper)))
        .into_iter()
        .flatten()
}

/// What Slack's response URLs answer over HTTP: the text `ok`, or the error's code as text.
pub fn hook_answer(answer: &Value) -> String {
    if answer["ok"] == true {
        "ok".into()
    } else {
        answer["error"].as_str().unwrap_or("invalid_payload").into()
    }
}

/// How many posts one `response_url` takes, and for how long (Slack: 5, 30 minutes).
pub const RESPONSE_URL_USES: u32 = 5;
const RESPONSE_URL_LIFE_MS: u64 = 30 * 60 * 1000;
/// A trigger_id's life.
const TRIGGER_LIFE_MS: u64 = 3000;

fn epoch_ms() -> u64 {
    crate::clock::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A JSON argument as sent: JSON, or a form's JSON string.
fn json_value(v: &Value) -> Value {
    match v {
        Value::String(s) => serde_json::from_str(s).unwrap_or(Value::Null),
        v => v.clone(),
    }
}

/// Whether a stream's `chunks` are what Slack takes: an array of known types, tasks with an
/// id, a title and one of the four statuses.
fn chunks_valid(chunks: &Value) -> bool {
    let Some(chunks) = chunks.as_array() else {
        return chunks.is_null();
    };
    chunks.iter().all(|c| match c["type"].as_str() {
        Some("markdown_text") => c["text"].is_string(),
        Some("plan_update") => c["title"].is_string(),
        Some("task_update") => {
            c["id"].as_str().is_some_and(|s| !s.is_empty())
                && c["title"].is_string()
                && ["pending", "in_progress", "complete", "error"]
                    .contains(&c["status"].as_str().unwrap_or_default())
        }
        Some("blocks") => c["blocks"].is_array(),
        _ => false,
    })
}

/// A `ts` as microseconds, for ordering (`"1700000000.000100"` → 1700000000000100).
pub fn micros(ts: &str) -> Option<u128> {
    let (secs, frac) = ts.split_once('.').unwrap_or((ts, "0"));
    let frac = format!("{frac:0<6}");
    Some(secs.parse::<u128>().ok()? * 1_000_000 + frac.get(..6)?.parse::<u128>().ok()?)
}

fn ts_of_micros(m: u128) -> String {
    format!("{}.{:06}", m / 1_000_000, m % 1_000_000)
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

impl Workspace {
    /// An empty workspace of the app `identity` (streams expire after 5 minutes).
    pub fn new(identity: Identity) -> Self {
        Self {
            identity,
            messages: Vec::new(),
            index: Index::default(),
            reactions: BTreeSet::new(),
            ephemerals: Vec::new(),
            last_micros: 0,
            clock_behind_micros: 0,
            hooks: HashMap::new(),
            triggers: BTreeSet::new(),
            views: Vec::new(),
            stream_expiry_ms: 5 * 60 * 1000,
            page_cap: PAGE_CAP,
            assistant: Vec::new(),
            sessions: HashMap::new(),
            task_updates: HashMap::new(),
            executions: Default::default(),
        }
    }

    /// Slack's clock runs `behind` the bot's: the `ts` of each new message is that much
    /// earlier than the bot's clock says (a message's `ts` is Slack's time of posting).
    pub fn set_clock_behind(&mut self, behind: std::time::Duration) {
        self.clock_behind_micros = behind.as_micros();
    }

    /// Streams stop taking appends this long after they start (Slack: about 5 minutes).
    pub fn set_stream_expiry(&mut self, expiry: std::time::Duration) {
        self.stream_expiry_ms = expiry.as_millis() as u64;
    }

    /// The most messages a `conversations.history` / `.replies` page holds ([`PAGE_CAP`]:
    /// Slack's for new commercially distributed apps outside the Marketplace; 999 for others).
    pub fn set_page_cap(&mut self, cap: usize) {
        self.page_cap = cap.max(1);
    }

    /// Takes the stream expiry and the page cap of `other` (another workspace of one Slack).
    pub(crate) fn take_settings_of(&mut self, other: &Workspace) {
        self.stream_expiry_ms = other.stream_expiry_ms;
        self.page_cap = other.page_cap;
    }

    /// The assistant calls made: (method, channel, thread_ts, arguments), in order.
    pub fn assistant_calls(&self) -> &[(String, String, String, Value)] {
        &self.assistant
    }

    /// A fresh `trigger_id`, as Slack mints one for each command, shortcut or action.
    pub fn trigger_id() -> String {
        let n = uuid::Uuid::new_v4().simple().to_string();
        format!("{}.{}.{}", epoch_ms(), &n[..9], &n[9..29])
    }

    /// The views open or pushed, as Slack shows them (updates applied).
    pub fn views(&self) -> &[Value] {
        &self.views
    }

    /// A post to the response URL at `path` (see the module's rules): Slack's HTTP status and
    /// answer (`{"ok": true}`, or `ok: false` with the error; over HTTP a stand-in answers as
    /// Slack does, with the text `ok` or the error's code: [`hook_answer`]).
    pub fn respond(&mut self, path: &str, body: &Value) -> (u16, Value) {
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (channel, message_ts) = match parts.as_slice() {
            ["commands", _team, channel, _id] => (channel.to_string(), None),
            ["actions", _team, channel, ts, _id] => (channel.to_string(), Some(ts.to_string())),
            _ => return (404, json!({"ok": false, "error": "invalid_url"})),
        };
        let now = epoch_ms();
        let (uses, first) = self.hooks.entry(path.to_string()).or_insert((0, now));
        if now.saturating_sub(*first) > RESPONSE_URL_LIFE_MS {
            return (404, json!({"ok": false, "error": "expired_url"}));
        }
        if *uses >= RESPONSE_URL_USES {
            return (404, json!({"ok": false, "error": "used_url"}));
        }
        *uses += 1;
        let flag = |key: &str| body[key].as_bool() == Some(true) || body[key] == "true";
        if flag("delete_original") {
            if let Some(i) = message_ts.and_then(|ts| self.find(&channel, &ts)) {
                self.remove(i);
            }
            return (200, json!({"ok": true}));
        }
        if flag("replace_original") {
            let Some(i) = message_ts.and_then(|ts| self.find(&channel, &ts)) else {
                return (404, json!({"ok": false, "error": "message_not_found"}));
            };
            let m = &mut self.messages[i];
            for key in ["text", "blocks", "attachments"] {
                m[key] = body[key].clone();
            }
            return (200, json!({"ok": true}));
        }
        if body["text"].is_null() && body["blocks"].is_null() {
            return (400, json!({"ok": false, "error": "no_text"}));
        }
        if body["response_type"] == "in_channel" {
            let mut args = body.clone();
            args["channel"] = channel.into();
            self.call("chat.postMessage", &args);
        } else {
            let mut shown = body.clone();
            shown["channel"] = channel.into();
            self.ephemerals.push(shown);
        }
        (200, json!({"ok": true}))
    }

    /// A new `ts` from the clock, later than every one given before.
    pub fn next_ts(&mut self) -> String {
        let now = crate::clock::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0)
            .saturating_sub(self.clock_behind_micros);
        self.last_micros = now.max(self.last_micros + 1);
        ts_of_micros(self.last_micros)
    }

    /// Adds a message as Slack holds it (it needs `channel` and `ts`; a person's when it has
    /// no `bot_id`). Adding one already there changes nothing: every copy of an event is about
    /// the same message.
    pub fn add_message(&mut self, mut message: Value) {
        let (channel, ts) = (text(&message["channel"]), text(&message["ts"]));
        if channel.is_empty() || ts.is_empty() || self.find(&channel, &ts).is_some() {
            return;
        }
        message["type"] = "message".into();
        self.push(message);
    }

    /// Adds a message at the end, indexed.
    fn push(&mut self, message: Value) {
        self.index
            .add(&message, self.messages.len(), &self.identity.app_id);
        self.messages.push(message);
    }

    /// Removes the message at `position` (a deletion: rare), and indexes the rest again.
    fn remove(&mut self, position: usize) {
        self.messages.remove(position);
        self.index = Index::default();
        for (i, message) in self.messages.iter().enumerate() {
            self.index.add(message, i, &self.identity.app_id);
        }
    }

    /// Adds the message a signed event body is about (an `event_callback` whose event has a
    /// `channel` and a `ts`: a message, a mention), as a person posted it.
    pub fn add_event_message(&mut self, body: &[u8]) {
        let Ok(envelope) = serde_json::from_slice::<Value>(body) else {
            return;
        };
        let event = &envelope["event"];
        if !matches!(event["type"].as_str(), Some("message" | "app_mention")) {
            return;
        }
        if event["channel"].is_string() && event["ts"].is_string() {
            let mut message = json!({
                "channel": event["channel"], "ts": event["ts"], "user": event["user"],
                "text": event["text"],
            });
            for key in ["thread_ts", "bot_id", "app_id", "client_msg_id"] {
                if !event[key].is_null() {
                    message[key] = event[key].clone();
                }
            }
            self.add_message(message);
        }
    }

    /// Adds a message of another app (`OTHER_APP`) to `channel` (in the thread `thread_ts`),
    /// with `metadata`: the kind of message this app must never take for its own.
    pub fn add_foreign(
        &mut self,
        channel: &str,
        thread_ts: Option<&str>,
        metadata: Value,
    ) -> String {
        let ts = self.next_ts();
        let mut message = json!({
            "channel": channel, "ts": ts, "text": "posted by another app", "user": "U0999OTHER",
            "bot_id": OTHER_BOT, "app_id": OTHER_APP,
            "bot_profile": {"id": OTHER_BOT, "app_id": OTHER_APP, "name": "other"},
            "metadata": metadata,
        });
        if let Some(thread) = thread_ts {
            message["thread_ts"] = thread.into();
        }
        self.add_message(message);
        ts
    }

    /// Adds `count` messages of people to `channel` (in the thread `thread_ts`), newer than
    /// everything, to make a conversation busy.
    pub fn add_chatter(&mut self, channel: &str, thread_ts: Option<&str>, count: usize) {
        for i in 0..count {
            let ts = self.next_ts();
            let mut message = json!({"channel": channel, "ts": ts, "user": "U0CHATTER", "text": format!("chatter {i}")});
            if let Some(thread) = thread_ts {
                message["thread_ts"] = thread.into();
            }
            self.add_message(message);
        }
    }

    /// Every message now (updates applied, deletions removed).
    pub fn messages(&self) -> &[Value] {
        &self.messages
    }

    /// The messages this app posted (what a user sees of the bot), oldest first.
    pub fn ours(&self) -> Vec<Value> {
        self.ours_from(0)
    }

    /// The messages this app posted, from the `first`-th (0: the oldest) on: what a long test
    /// reads of them as they come, without copying them all each time.
    pub fn ours_from(&self, first: usize) -> Vec<Value> {
        self.index
            .ours
            .iter()
            .skip(first)
            .map(|&i| self.messages[i].clone())
            .collect()
    }

    /// A message and its thread's replies, oldest first (nothing when there is no such
    /// message): what a test reports of a conversation when a check fails.
    pub fn thread(&self, channel: &str, ts: &str) -> Vec<Value> {
        let Some(parent) = self.find(channel, ts) else {
            return Vec::new();
        };
        let replies = self
            .index
            .replies
            .get(&(channel.to_string(), ts.to_string()));
        std::iter::once(parent)
            .chain(replies.into_iter().flatten().map(|&(_, i)| i))
            .map(|i| self.messages[i].clone())
            .collect()
    }

    /// How many messages this app has in the workspace now.
    pub fn ours_count(&self) -> usize {
        self.index.ours.len()
    }

    /// The reactions now on messages: (channel, message `ts`, emoji name), sorted.
    pub fn reactions(&self) -> Vec<(String, String, String)> {
        self.reactions.iter().cloned().collect()
    }

    /// The ephemeral messages posted (`chat.postEphemeral`, ephemeral `response_url` posts), in
    /// order.
    pub fn ephemerals(&self) -> &[Value] {
        &self.ephemerals
    }

    fn find(&self, channel: &str, ts: &str) -> Option<usize> {
        self.index
            .at
            .get(&(channel.to_string(), ts.to_string()))
            .copied()
    }

    /// Shows a stream's `chunks` on its message: text, a plan's title, tasks (in place, by
    /// id: each update counted), blocks.
    fn apply_chunks(&mut self, m: &mut Value, chunks: &Value) {
        let (channel, ts) = (text(&m["channel"]), text(&m["ts"]));
        for chunk in chunks.as_array().into_iter().flatten() {
            match chunk["type"].as_str() {
                Some("markdown_text") => {
                    let so_far = text(&m["text"]);
                    m["text"] = format!("{so_far}{}", text(&chunk["text"])).into();
                }
                Some("plan_update") => {
                    if m["plan"].is_null() {
                        m["plan"] = json!({"tasks": []});
                    }
                    m["plan"]["title"] = chunk["title"].clone();
                }
                Some("task_update") => {
                    if m["plan"].is_null() {
                        m["plan"] = json!({"tasks": []});
                    }
                    let id = text(&chunk["id"]);
                    let tasks = m["plan"]["tasks"].as_array_mut().expect("tasks");
                    match tasks.iter_mut().find(|t| t["id"] == id.as_str()) {
                        Some(task) => {
                            for (k, v) in chunk.as_object().into_iter().flatten() {
                                task[k] = v.clone();
                            }
                        }
                        None => tasks.push(chunk.clone()),
                    }
                    self.task_updates
                        .entry((channel.clone(), ts.clone(), id))
                        .or_default()
                        .push(text(&chunk["status"]));
                }
                Some("blocks") => {
                    if m["stream_blocks"].is_null() {
                        m["stream_blocks"] = json!([]);
                    }
                    let shown = m["stream_blocks"].as_array_mut().expect("blocks");
                    shown.extend(chunk["blocks"].as_array().into_iter().flatten().cloned());
                }
                _ => {}
            }
        }
    }

    /// The session of `thread` in `channel` gets `status` (kept in order) and `title` (only
    /// when this creates it, unless `rename`).
    fn set_session(
        &mut self,
        channel: &str,
        thread: &str,
        status: Option<&str>,
        title: Option<&str>,
        rename: bool,
    ) {
        let key = (channel.to_string(), thread.to_string());
        let new = !self.sessions.contains_key(&key);
        let session = self.sessions.entry(key).or_insert_with(
            || json!({"status": null, "title": null, "statuses": [], "titles": []}),
        );
        if let Some(title) = title
            && (new || rename)
        {
            session["title"] = title.into();
            session["titles"]
                .as_array_mut()
                .expect("titles")
                .push(title.into());
        }
        if let Some(status) = status {
            session["status"] = status.into();
            session["statuses"]
                .as_array_mut()
                .expect("statuses")
                .push(status.into());
        }
    }

    /// The agent session of `thread_ts` in `channel`: `{status, title, statuses, titles}`
    /// (every status and title it was given, in order).
    pub fn session(&self, channel: &str, thread_ts: &str) -> Option<Value> {
        self.sessions
            .get(&(channel.to_string(), thread_ts.to_string()))
            .cloned()
    }

    /// Every agent session: ((channel, thread_ts), the session as [`Workspace::session`]
    /// shows it, with `stopped_after`: how many statuses it had when a person stopped it).
    pub fn sessions(&self) -> Vec<((String, String), Value)> {
        let mut all: Vec<_> = self
            .sessions
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Each task's updates as streams showed them: (channel, stream ts, task id) → statuses.
    pub fn task_updates(&self) -> &HashMap<(String, String, String), Vec<String>> {
        &self.task_updates
    }

    /// A person presses the stop button of the session of `thread_ts` in `channel`: Slack
    /// stops the app's streams in that thread (appends then answer `stopped_by_user`) and
    /// sends `agent_session_stopped`, which this returns (the event, not its envelope). The
    /// session's status is left as it is.
    pub fn stop_session(&mut self, channel: &str, thread_ts: &str, user: &str) -> Value {
        self.stop(channel, thread_ts, None, user)
    }

    /// A person presses stop on the app's stream `stream_ts` in the thread `thread_ts` of
    /// `channel`, while another answer of the thread streams on: Slack stops that stream
    /// only, and its `agent_session_stopped` names it alone (`streaming_message_ts`).
    pub fn stop_stream(
        &mut self,
        channel: &str,
        thread_ts: &str,
        stream_ts: &str,
        user: &str,
    ) -> Value {
        self.stop(channel, thread_ts, Some(stream_ts), user)
    }

    fn stop(&mut self, channel: &str, thread_ts: &str, only: Option<&str>, user: &str) -> Value {
        let app = self.identity.app_id.clone();
        let mut stopped = Vec::new();
        for m in self.messages.iter_mut() {
            if text(&m["channel"]) == channel
                && text(&m["thread_ts"]) == thread_ts
                && m["app_id"] == app.as_str()
                && m["streaming"] == true
                && only.is_none_or(|ts| m["ts"] == ts)
            {
                m["streaming"] = false.into();
                m["stopped_by_user"] = true.into();
                stopped.push(text(&m["ts"]));
            }
        }
        let event_ts = self.next_ts();
        // What the person saw when they stopped it: nothing may change after.
        for m in self.messages.iter_mut() {
            if m["stopped_by_user"] == true && m["stopped_at"].is_null() {
                m["stopped_at"] = event_ts.clone().into();
                m["stopped_text"] = m["text"].clone();
                m["stopped_blocks"] = m["blocks"].clone();
            }
        }
        if let Some(session) = self
            .sessions
            .get_mut(&(channel.to_string(), thread_ts.to_string()))
        {
            let n = session["statuses"].as_array().map_or(0, Vec::len);
            session["stopped_after"] = n.into();
        }
        json!({"type": "agent_session_stopped", "channel": channel, "user": user,
               "thread_ts": thread_ts, "streaming_message_ts": stopped, "event_ts": event_ts})
    }

    /// A write or simple read method, answered as Slack answers it; the conversation methods
    /// with [`Workspace::history`] and [`Workspace::replies`].
    pub fn call(&mut self, method: &str, args: &Value) -> Value {
        let mut channel = text(&args["channel"]);
        if channel.starts_with(['U', 'W']) {
            // A post to a user goes to the DM between the bot and that user.
            channel = format!("D{channel}");
        }
        match method {
            "chat.postMessage" => {
                let has_content = ["text", "blocks", "attachments"]
                    .iter()
                    .any(|k| !args[*k].is_null());
                if channel.is_empty() {
                    return json!({"ok": false, "error": "channel_not_found"});
                }
                if !has_content {
                    return json!({"ok": false, "error": "no_text"});
                }
                let ts = self.next_ts();
                let id = &self.identity;
                let mut message = json!({
                    "channel": channel, "ts": ts, "user": id.bot_user, "bot_id": id.bot_id,
                    "app_id": id.app_id, "team": id.team,
                    "bot_profile": {"id": id.bot_id, "app_id": id.app_id, "name": "slack-once", "team_id": id.team},
                });
                for key in [
                    "text",
                    "blocks",
                    "attachments",
                    "thread_ts",
                    "metadata",
                    "reply_broadcast",
                ] {
                    if !args[key].is_null() {
                        let value = match (key, &args[key]) {
                            // Form-encoded calls carry metadata as a JSON string.
                            ("metadata", Value::String(s)) => {
                                serde_json::from_str(s).unwrap_or(Value::Null)
                            }
                            (_, v) => v.clone(),
                        };
                        message[key] = value;
                    }
                }
                let answer_message = message.clone();
                self.push(message);
                json!({"ok": true, "channel": channel, "ts": ts, "message": answer_message})
            }
            "chat.update" => {
                let ts = text(&args["ts"]);
                let app = self.identity.app_id.clone();
                match self.find(&channel, &ts) {
                    None => json!({"ok": false, "error": "message_not_found"}),
                    Some(i) if self.messages[i]["app_id"] != app.as_str() => {
                        json!({"ok": false, "error": "cant_update_message"})
                    }
                    Some(i) => {
                        let m = &mut self.messages[i];
                        for key in ["text", "blocks", "attachments", "metadata"] {
                            if !args[key].is_null() {
                                m[key] = args[key].clone();
                            }
                        }
                        m["edited"] = json!({"user": self.identity.bot_user});
                        m["streaming"] = false.into();
                        // What the stream showed beside its text is replaced too.
                        if let Some(m) = m.as_object_mut() {
                            m.remove("plan");
                            m.remove("stream_blocks");
                        }
                        json!({"ok": true, "channel": channel, "ts": ts, "text": m["text"], "message": m.clone()})
                    }
                }
            }
            "chat.delete" => {
                let ts = text(&args["ts"]);
                let app = self.identity.app_id.clone();
                match self.find(&channel, &ts) {
                    None => json!({"ok": false, "error": "message_not_found"}),
                    Some(i) if self.messages[i]["app_id"] != app.as_str() => {
                        json!({"ok": false, "error": "cant_delete_message"})
                    }
                    Some(i) => {
                        self.remove(i);
                        json!({"ok": true, "channel": channel, "ts": ts})
                    }
                }
            }
            "reactions.add" | "reactions.remove" => {
                let key = (channel, text(&args["timestamp"]), text(&args["name"]));
                if self.find(&key.0, &key.1).is_none() {
                    return json!({"ok": false, "error": "message_not_found"});
                }
                let adding = method == "reactions.add";
                let changed = if adding {
                    self.reactions.insert(key)
                } else {
                    self.reactions.remove(&key)
                };
                match (changed, adding) {
                    (true, _) => json!({"ok": true}),
                    (false, true) => json!({"ok": false, "error": "already_reacted"}),
                    (false, false) => json!({"ok": false, "error": "no_reaction"}),
                }
            }
            "chat.postEphemeral" => {
                self.ephemerals.push(args.clone());
                let ts = self.next_ts();
                json!({"ok": true, "message_ts": ts})
            }
            "chat.startStream" => {
                let thread = text(&args["thread_ts"]);
                if channel.is_empty() {
                    return json!({"ok": false, "error": "channel_not_found"});
                }
                if thread.is_empty() {
                    return json!({"ok": false, "error": "invalid_arguments"});
                }
                let (team, user) = (
                    text(&args["recipient_team_id"]),
                    text(&args["recipient_user_id"]),
                );
                if !channel.starts_with('D') {
                    // Outside a DM Slack asks whom the stream is for.
                    if team.is_empty() {
                        return json!({"ok": false, "error": "missing_recipient_team_id"});
                    }
                    if user.is_empty() {
                        return json!({"ok": false, "error": "missing_recipient_user_id"});
                    }
                }
                if !team.is_empty() && team != self.identity.team {
                    // A Slack Connect author: Slack does not resolve another organisation's
                    // user as this app's stream recipient.
                    return json!({"ok": false, "error": "user_not_found"});
                }
                let chunks = json_value(&args["chunks"]);
                if !chunks_valid(&chunks) {
                    return json!({"ok": false, "error": "invalid_chunks"});
                }
                let ts = self.next_ts();
                let id = &self.identity;
                let mut message = json!({
                    "channel": channel, "ts": ts, "thread_ts": thread, "user": id.bot_user,
                    "bot_id": id.bot_id, "app_id": id.app_id, "team": id.team,
                    "bot_profile": {"id": id.bot_id, "app_id": id.app_id, "name": "slack-once", "team_id": id.team},
                    "text": text(&args["markdown_text"]),
                    "streaming": true, "stream_started_ms": epoch_ms(),
                });
                if !args["task_display_mode"].is_null() {
                    message["task_display_mode"] = args["task_display_mode"].clone();
                }
                self.apply_chunks(&mut message, &chunks);
                self.push(message);
                // A stream makes its thread's session processing (creating it).
                self.set_session(&channel, &thread, Some("processing"), None, false);
                json!({"ok": true, "channel": channel, "ts": ts})
            }
            "chat.appendStream" | "chat.stopStream" => {
                let ts = text(&args["ts"]);
                let expiry = self.stream_expiry_ms;
                let Some(i) = self.find(&channel, &ts) else {
                    return json!({"ok": false, "error": "message_not_found"});
                };
                let chunks = json_value(&args["chunks"]);
                let m = &mut self.messages[i];
                if m["stopped_by_user"] == true && method == "chat.appendStream" {
                    return json!({"ok": false, "error": "stopped_by_user"});
                }
                let started = m["stream_started_ms"].as_u64().unwrap_or(0);
                if m["streaming"] != true || epoch_ms().saturating_sub(started) > expiry {
                    m["streaming"] = false.into();
                    return json!({"ok": false, "error": "message_not_in_streaming_state"});
                }
                if !chunks_valid(&chunks) {
                    return json!({"ok": false, "error": "invalid_chunks"});
                }
                let more = text(&args["markdown_text"]);
                let so_far = text(&m["text"]);
                m["text"] = format!("{so_far}{more}").into();
                let mut message = std::mem::take(m);
                self.apply_chunks(&mut message, &chunks);
                let thread = text(&message["thread_ts"]);
                if method == "chat.stopStream" {
                    message["streaming"] = false.into();
                    for key in ["blocks", "metadata"] {
                        if !args[key].is_null() {
                            message[key] = json_value(&args[key]);
                        }
                    }
                    let status = match text(&args["session_status"]) {
                        s if s.is_empty() => "active".to_string(),
                        s => s,
                    };
                    self.set_session(&channel, &thread, Some(&status), None, false);
                }
                self.messages[i] = message;
                json!({"ok": true, "channel": channel, "ts": ts})
            }
            "agents.sessions.setStatus" | "agents.sessions.rename" => {
                let channel = text(&args["channel_id"]);
                let thread = text(&args["thread_ts"]);
                if channel.is_empty() {
                    return json!({"ok": false, "error": "invalid_arguments"});
                }
                if method == "agents.sessions.rename" {
                    let title = text(&args["title"]);
                    if title.is_empty() || title.chars().count() > 200 {
                        return json!({"ok": false, "error": "invalid_arguments"});
                    }
                    if !self
                        .sessions
                        .contains_key(&(channel.clone(), thread.clone()))
                    {
                        return json!({"ok": false, "error": "session_not_found"});
                    }
                    self.set_session(&channel, &thread, None, Some(&title), true);
                    return json!({"ok": true, "title": title});
                }
                let status = text(&args["status"]);
                if !["processing", "active", "suspended", "closed"].contains(&status.as_str()) {
                    return json!({"ok": false, "error": "invalid_arguments"});
                }
                let title = text(&args["title"]);
                let title = (!title.is_empty()).then_some(title.as_str());
                self.set_session(&channel, &thread, Some(&status), title, false);
                json!({"ok": true, "status": status, "agent_status": status})
            }
            "assistant.threads.setStatus"
            | "assistant.threads.setSuggestedPrompts"
            | "assistant.threads.setTitle" => {
                let channel = text(&args["channel_id"]);
                let thread = text(&args["thread_ts"]);
                // The agent view's suggested prompts are the Messages tab's: no thread.
                let threadless = method == "assistant.threads.setSuggestedPrompts";
                if channel.is_empty() || (thread.is_empty() && !threadless) {
                    return json!({"ok": false, "error": "invalid_arguments"});
                }
                self.assistant
                    .push((method.to_string(), channel, thread, args.clone()));
                json!({"ok": true})
            }
            "views.open" | "views.push" => {
                let trigger = text(&args["trigger_id"]);
                let minted = trigger
                    .split('.')
                    .next()
                    .and_then(|ms| ms.parse::<u64>().ok());
                let Some(minted) = minted else {
                    return json!({"ok": false, "error": "invalid_trigger_id"});
                };
                if self.triggers.contains(&trigger) {
                    return json!({"ok": false, "error": "exchanged_trigger_id"});
                }
                if epoch_ms().saturating_sub(minted) > TRIGGER_LIFE_MS {
                    return json!({"ok": false, "error": "expired_trigger_id"});
                }
                let view = match &args["view"] {
                    Value::String(s) => serde_json::from_str(s).unwrap_or(Value::Null),
                    v => v.clone(),
                };
                if !view.is_object() {
                    return json!({"ok": false, "error": "invalid_arguments"});
                }
                // An `external_id` names one view of the app in the workspace.
                let external = text(&view["external_id"]);
                if !external.is_empty()
                    && self
                        .views
                        .iter()
                        .any(|v| v["external_id"] == external.as_str())
                {
                    return json!({"ok": false, "error": "duplicate_external_id"});
                }
                self.triggers.insert(trigger);
                let mut shown = view;
                shown["id"] = format!("V{:010}", self.views.len() + 1).into();
                shown["hash"] = format!("{}.hash", epoch_ms()).into();
                shown["app_id"] = self.identity.app_id.clone().into();
                shown["team_id"] = self.identity.team.clone().into();
                self.views.push(shown.clone());
                json!({"ok": true, "view": shown})
            }
            "views.update" => {
                // By its id, or by the `external_id` the app gave it.
                let (key, id) = match text(&args["view_id"]) {
                    id if !id.is_empty() => ("id", id),
                    _ => ("external_id", text(&args["external_id"])),
                };
                let found = (!id.is_empty())
                    .then(|| self.views.iter().position(|v| v[key] == id.as_str()))
                    .flatten();
                let Some(i) = found else {
                    return json!({"ok": false, "error": "not_found"});
                };
                let id = text(&self.views[i]["id"]);
                let external = self.views[i]["external_id"].clone();
                let view = match &args["view"] {
                    Value::String(s) => serde_json::from_str(s).unwrap_or(Value::Null),
                    v => v.clone(),
                };
                let mut shown = view;
                shown["id"] = id.into();
                if shown["external_id"].is_null() && !external.is_null() {
                    shown["external_id"] = external;
                }
                shown["hash"] = format!("{}.hash", epoch_ms()).into();
                self.views[i] = shown.clone();
                json!({"ok": true, "view": shown})
            }
            "conversations.open" => {
                let users = text(&args["users"]);
                json!({"ok": true, "channel": {"id": format!("D{}", users.replace(',', ""))}})
            }
            "users.info" => {
                let user = text(&args["user"]);
                json!({"ok": true, "user": {"id": user, "name": format!("name-of-{user}"), "real_name": format!("Real {user}")}})
            }
            "conversations.info" => {
                json!({"ok": true, "channel": {"id": channel, "name": "general"}})
            }
            "auth.test" => {
                let id = &self.identity;
                json!({"ok": true, "team_id": id.team, "user_id": id.bot_user, "bot_id": id.bot_id, "app_id": id.app_id})
            }
            _ => json!({"ok": true}),
        }
    }

    /// `conversations.history`: the channel's top-level messages (and replies broadcast to it),
    /// newest first.
    pub fn history(&self, query: &HashMap<String, String>) -> Value {
        let channel = query.get("channel").cloned().unwrap_or_default();
        let listed = self.index.listed.get(&channel);
        let within = listed
            .into_iter()
            .flat_map(|l| within(l, window(query)).rev())
            .map(|&(_, i)| &self.messages[i]);
        self.page(within, None, query)
    }

    /// `conversations.replies`: the thread's parent, then its replies oldest first.
    pub fn replies(&self, query: &HashMap<String, String>) -> Value {
        let channel = query.get("channel").cloned().unwrap_or_default();
        let ts = query.get("ts").cloned().unwrap_or_default();
        let Some(parent) = self.find(&channel, &ts).map(|i| &self.messages[i]) else {
            return json!({"ok": false, "error": "thread_not_found"});
        };
        let replies = self.index.replies.get(&(channel, ts));
        let within = replies
            .into_iter()
            .flat_map(|r| within(r, window(query)))
            .map(|&(_, i)| &self.messages[i]);
        self.page(within, Some(parent), query)
    }

    /// One page of `within` (the listed messages inside the query's window, in the method's
    /// order), at most `limit` (capped), behind the cursor; `parent` first on the first page
    /// (conversations.replies).
    fn page<'a>(
        &self,
        within: impl Iterator<Item = &'a Value>,
        parent: Option<&Value>,
        query: &HashMap<String, String>,
    ) -> Value {
        let limit = query
            .get("limit")
            .and_then(|l| l.parse::<usize>().ok())
            .filter(|l| *l > 0)
            .unwrap_or(100)
            .min(self.page_cap);
        let offset = match query.get("cursor").filter(|c| !c.is_empty()) {
            None => 0,
            Some(cursor) => {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(cursor)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .and_then(|s| {
                        s.strip_prefix("next:")
                            .and_then(|n| n.parse::<usize>().ok())
                    });
                match decoded {
                    Some(offset) => offset,
                    None => return json!({"ok": false, "error": "invalid_cursor"}),
                }
            }
        };
        let with_metadata = matches!(
            query.get("include_all_metadata").map(String::as_str),
            Some("true" | "1")
        );
        let shown = |m: &Value| {
            let mut m = m.clone();
            if !with_metadata && let Some(o) = m.as_object_mut() {
                o.remove("metadata");
            }
            m
        };
        let mut page: Vec<Value> = Vec::new();
        let mut room = limit;
        if let (Some(parent), 0) = (parent, offset) {
            page.push(shown(parent));
            room = room.saturating_sub(1).max(1);
        }
        // One more than the page holds: whether there is more.
        let mut rest = within.skip(offset).take(room + 1);
        page.extend(rest.by_ref().take(room).map(shown));
        let has_more = rest.next().is_some();
        let next = offset + room;
        let next_cursor = if has_more {
            base64::engine::general_purpose::STANDARD.encode(format!("next:{next}"))
        } else {
            String::new()
        };
        json!({
            "ok": true, "messages": page, "has_more": has_more,
            "response_metadata": {"next_cursor": next_cursor}
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> Workspace {
        Workspace::new(Identity {
            team: "T1".into(),
            app_id: "A1".into(),
            bot_id: "B1".into(),
            bot_user: "UBOT".into(),
        })
    }

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn history_pages_newest_first_within_the_window_at_most_15_a_page() {
        let mut w = workspace();
        w.add_message(json!({"channel": "C1", "ts": "1600000000.000100", "user": "U1", "text": "the event's message"}));
        let first = w.next_ts();
        w.add_chatter("C1", None, 40);
        let all = |cursor: &str| {
            w.history(&query(&[
                ("channel", "C1"),
                ("limit", "100"),
                ("cursor", cursor),
            ]))
        };
        let page = all("");
        assert_eq!(page["messages"].as_array().unwrap().len(), PAGE_CAP);
        assert_eq!(page["messages"][0]["text"], "chatter 39", "newest first");
        let mut seen = 0;
        let mut cursor = String::new();
        loop {
            let page = all(&cursor);
            seen += page["messages"].as_array().unwrap().len();
            if page["has_more"] != true {
                break;
            }
            cursor = page["response_metadata"]["next_cursor"]
                .as_str()
                .unwrap()
                .to_string();
        }
        assert_eq!(seen, 41, "every message once, the event's own included");
        // A window: only what lies in it, bounds exclusive unless inclusive.
        let old = w.history(&query(&[("channel", "C1"), ("latest", &first)]));
        assert_eq!(old["messages"].as_array().unwrap().len(), 1);
        assert_eq!(old["messages"][0]["text"], "the event's message");
        let none = w.history(&query(&[
            ("channel", "C1"),
            ("oldest", "1600000000.000100"),
            ("latest", "1600000000.000100"),
        ]));
        assert_eq!(none["messages"].as_array().unwrap().len(), 0);
        let one = w.history(&query(&[
            ("channel", "C1"),
            ("oldest", "1600000000.000100"),
            ("latest", "1600000000.000100"),
            ("inclusive", "true"),
        ]));
        assert_eq!(one["messages"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn our_posts_carry_our_ids_and_a_foreign_apps_carry_its_own() {
        let mut w = workspace();
        let ours = w.call("chat.postMessage", &json!({"channel": "C1", "text": "hi", "metadata": {"event_type": "x", "event_payload": {}}}));
        let ts = ours["ts"].as_str().unwrap().to_string();
        w.add_foreign("C1", None, json!({"event_type": "x", "event_payload": {}}));
        let page = w.history(&query(&[
            ("channel", "C1"),
            ("include_all_metadata", "true"),
        ]));
        let messages = page["messages"].as_array().unwrap();
        assert_eq!(messages[1]["ts"], ts.as_str());
        assert_eq!(
            (
                messages[1]["app_id"].as_str(),
                messages[1]["bot_id"].as_str(),
                messages[1]["user"].as_str()
            ),
            (Some("A1"), Some("B1"), Some("UBOT"))
        );
        assert_eq!(messages[0]["app_id"], OTHER_APP);
        assert!(messages[0]["metadata"].is_object());
        let bare = w.history(&query(&[("channel", "C1")]));
        assert!(
            bare["messages"][0]["metadata"].is_null(),
            "metadata only when asked for"
        );
        assert_eq!(
            w.call(
                "chat.update",
                &json!({"channel": "C1", "ts": messages[0]["ts"], "text": "x"})
            )["error"],
            "cant_update_message"
        );
    }

    #[test]
    fn replies_show_the_parent_first_then_the_thread_oldest_first() {
        let mut w = workspace();
        w.add_message(
            json!({"channel": "C1", "ts": "1600000000.000100", "user": "U1", "text": "question"}),
        );
        let reply = w.call(
            "chat.postMessage",
            &json!({"channel": "C1", "thread_ts": "1600000000.000100", "text": "answer"}),
        );
        w.add_chatter("C1", Some("1600000000.000100"), 3);
        let page = w.replies(&query(&[("channel", "C1"), ("ts", "1600000000.000100")]));
        let messages = page["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 5);
        assert_eq!(messages[0]["text"], "question");
        assert_eq!(messages[1]["ts"], reply["ts"]);
        assert_eq!(
            w.replies(&query(&[("channel", "C1"), ("ts", "1.2")]))["error"],
            "thread_not_found"
        );
        // A reply in a thread is not in the channel's history.
        let history = w.history(&query(&[("channel", "C1")]));
        assert_eq!(history["messages"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn a_deleted_message_leaves_its_conversation_and_the_others_stay_where_they_were() {
        let mut w = workspace();
        w.add_message(
            json!({"channel": "C1", "ts": "1600000000.000100", "user": "U1", "text": "q"}),
        );
        let posted: Vec<String> = (0..3)
            .map(|n| {
                let args = json!({"channel": "C1", "thread_ts": "1600000000.000100", "text": n.to_string()});
                w.call("chat.postMessage", &args)["ts"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        let top = w.call("chat.postMessage", &json!({"channel": "C1", "text": "top"}));
        assert_eq!(w.ours_count(), 4);
        assert_eq!(
            w.call("chat.delete", &json!({"channel": "C1", "ts": posted[1]}))["ok"],
            true
        );
        let thread = w.replies(&query(&[("channel", "C1"), ("ts", "1600000000.000100")]));
        let texts: Vec<&str> = thread["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["text"].as_str().unwrap())
            .collect();
        assert_eq!(texts, ["q", "0", "2"]);
        let history = w.history(&query(&[("channel", "C1")]));
        assert_eq!(history["messages"][0]["ts"], top["ts"]);
        assert_eq!(history["messages"].as_array().unwrap().len(), 2);
        // Found by its ts still, and ours from the second on.
        let updated = w.call(
            "chat.update",
            &json!({"channel": "C1", "ts": posted[2], "text": "two"}),
        );
        assert_eq!(updated["ok"], true);
        let ours: Vec<String> = w
            .ours_from(1)
            .iter()
            .map(|m| m["text"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ours, ["two", "top"]);
    }

    #[test]
    fn a_post_to_a_user_lands_in_their_dm() {
        let mut w = workspace();
        let posted = w.call(
            "chat.postMessage",
            &json!({"channel": "U7", "text": "welcome"}),
        );
        assert_eq!(posted["channel"], "DU7");
        let opened = w.call("conversations.open", &json!({"users": "U7"}));
        assert_eq!(opened["channel"]["id"], "DU7");
        assert_eq!(
            w.history(&query(&[("channel", "DU7")]))["messages"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }
}
