//! The look-up of an earlier post by its metadata: every post slack-once makes names the claim
//! and step that made it, so that a later claim finds it in the conversation's history.

use bytes::Bytes;
use http::header::AUTHORIZATION;
use http::{Method, Request};
use http_body_util::Full;
use serde::Deserialize;
use tokio::time::Instant;

use super::client::percent_encode;
use super::{Args, SlackClient, SlackError};

/// The `event_type` of the metadata attached to every reply, naming the event it answers.
pub const REPLY_METADATA_TYPE: &str = "slack_once_reply";

/// conversations.history / .replies page size: since 2025-05-29, new commercially distributed
/// apps outside the Marketplace get at most 15 items a call (and 1 call a minute).
pub const LOOKUP_PAGE_SIZE: u32 = 15;

#[derive(Deserialize)]
struct History {
    #[serde(default)]
    messages: Vec<HistoryMessage>,
    #[serde(default)]
    has_more: bool,
    #[serde(default)]
    response_metadata: Option<ResponseMetadata>,
}

#[derive(Deserialize)]
struct ResponseMetadata {
    #[serde(default)]
    next_cursor: Option<String>,
}

#[derive(Deserialize)]
struct HistoryMessage {
    ts: String,
    #[serde(default)]
    metadata: Option<MessageMetadata>,
    #[serde(default)]
    app_id: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    bot_profile: Option<BotProfile>,
}

#[derive(Deserialize)]
struct BotProfile {
    #[serde(default)]
    app_id: Option<String>,
}

/// This app, as an event names it: its `api_app_id` and its bot user in the workspace.
#[derive(Clone, Copy, Debug, Default)]
pub struct OurApp<'a> {
    /// The app's id (`api_app_id`), when the event names it.
    pub app_id: Option<&'a str>,
    /// The bot's user id in the workspace, when known.
    pub bot_user_id: Option<&'a str>,
}

impl OurApp<'_> {
    /// Whether `message` was posted by this app: by its app id when the event names it (a
    /// staging and a production app in one channel have different ids), else by its bot user.
    fn posted(&self, message: &HistoryMessage) -> bool {
        match (self.app_id, self.bot_user_id) {
            (Some(app), _) => {
                message.app_id.as_deref() == Some(app)
                    || message
                        .bot_profile
                        .as_ref()
                        .and_then(|p| p.app_id.as_deref())
                        == Some(app)
            }
            (None, Some(user)) => message.user.as_deref() == Some(user),
            (None, None) => false,
        }
    }
}

/// A message slack-once posted, found in Slack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The conversation it is in (for a post to a user, the DM's id).
    pub channel: String,
    /// The message's `ts`.
    pub ts: String,
}

#[derive(Deserialize)]
struct MessageMetadata {
    event_type: String,
    #[serde(default)]
    event_payload: serde_json::Map<String, serde_json::Value>,
}

/// Where to look for a message slack-once may have posted.
#[derive(Clone, Copy, Debug)]
pub struct ReplyQuery<'a> {
    /// A conversation's id, or a user's (`U…`, `W…`): a post to a user goes to the DM with the
    /// bot, which is looked in.
    pub channel: &'a str,
    /// The thread's parent `ts`, for a reply in a thread.
    pub thread_ts: Option<&'a str>,
    /// Nothing older can be the message (its claim's intent, less a margin).
    pub oldest: Option<&'a str>,
    /// Nothing newer can be it (its claim's lease end, plus a margin).
    pub latest: Option<&'a str>,
    /// The ledger key of the claim that posted (the event id, or the message's identity).
    pub key: &'a str,
    /// The journal step that posted it (numbered from 1).
    pub step: u32,
    /// Only this app's messages can be the one.
    pub app: OurApp<'a>,
    /// Also take this app's message that carries no slack-once names (a stream not yet
    /// stopped: `chat.startStream` takes no metadata), in the window and the thread.
    pub adopt_unmarked: bool,
    /// Where an earlier look-up of the same window stopped ([`Lookup::reached`]: `>TS` when it
    /// searched the window up to TS, `<TS` from TS on): searched on from there.
    pub resume: Option<&'a str>,
}

/// What a look-up came to: its result, and how far it got (the edge of the window the pages it
/// read in full cover: `<TS`, the oldest `ts` read when pages come newest first, as
/// `conversations.history`'s do; `>TS`, the newest when oldest first), so that one cut short
/// can be gone on with.
#[derive(Debug)]
pub struct Lookup {
    /// The message found; `Ok(None)`: not in the window; `Err`: Slack could not be asked, which
    /// is no "not found".
    pub result: Result<Option<Found>, SlackError>,
    /// How far it got (`<TS` or `>TS`), for [`ReplyQuery::resume`]; `None`: no page was read
    /// far enough to say.
    pub reached: Option<String>,
}

/// The key under which slack-once keeps its own names in a message's metadata
/// (`event_payload.slack_once`): reserved, a bot's own metadata cannot use it.
pub const METADATA_KEY: &str = "slack_once";

/// The metadata a post carries: the bot's own `{event_type, event_payload}` (or slack-once's
/// default type) with `event_payload.slack_once` naming the claim and step that posted it.
pub fn post_metadata(
    own: Option<&serde_json::Value>,
    names: serde_json::Value,
) -> serde_json::Value {
    let mut metadata = match own {
        Some(own @ serde_json::Value::Object(_)) => own.clone(),
        _ => serde_json::json!({"event_type": REPLY_METADATA_TYPE, "event_payload": {}}),
    };
    if !metadata["event_payload"].is_object() {
        metadata["event_payload"] = serde_json::json!({});
    }
    metadata["event_payload"][METADATA_KEY] = names;
    metadata
}

/// The (ledger key, step) a message's metadata names, if slack-once posted it. Replies of
/// versions before the step journal carry `event_payload.event_id` and no step (step 1).
fn metadata_names(metadata: &MessageMetadata) -> Option<(&str, u64)> {
    let payload = &metadata.event_payload;
    match payload.get(METADATA_KEY).and_then(|v| v.as_object()) {
        Some(names) => Some((
            names.get("key")?.as_str()?,
            names.get("step").and_then(|s| s.as_u64()).unwrap_or(1),
        )),
        None if metadata.event_type == REPLY_METADATA_TYPE => Some((
            payload.get("event_id")?.as_str()?,
            payload.get("step").and_then(|s| s.as_u64()).unwrap_or(1),
        )),
        None => None,
    }
}

impl SlackClient {
    /// Looks for the message slack-once posted as step `step` of `key`, by the metadata every
    /// post carries, among this app's messages in `channel` (of the thread `thread_ts`, when
    /// set) between `oldest` and `latest`: `conversations.replies` or `conversations.history`
    /// with `include_all_metadata=true`, at most [`LOOKUP_PAGE_SIZE`] messages a page (newest
    /// first in a channel), page after page within the window (from [`ReplyQuery::resume`]
    /// when an earlier look-up got that far), waiting out 429s while `deadline` allows.
    /// A message of another app never matches, whatever its metadata says. Used only where an
    /// earlier claim may have posted. An `Err` result means Slack could not be asked: the
    /// caller must not take "not found" from it; [`Lookup::reached`] says how far it got.
    pub async fn find_reply(&self, query: &ReplyQuery<'_>, deadline: Instant) -> Lookup {
        let mut reached = None;
        let result = self.search(query, deadline, &mut reached).await;
        Lookup { result, reached }
    }

    /// [`Self::find_reply`]'s pages: within the window's bounds, the next one by Slack's
    /// cursor (or, without one, past the edge read); `reached` moved after each page read in
    /// full to the edge of the window the pages cover, with its direction (`>TS`, `<TS`), so
    /// that where it got to means the same to a later look-up, which goes on by bound.
    async fn search(
        &self,
        query: &ReplyQuery<'_>,
        deadline: Instant,
        reached: &mut Option<String>,
    ) -> Result<Option<Found>, SlackError> {
        // Local mode without a token logs its calls: nothing was posted to look for.
        if let Some(without) = self.without_token("a look-up", String::new) {
            return without.map(|()| None);
        }
        if query.app.app_id.is_none() && query.app.bot_user_id.is_none() {
            return Err(SlackError::Unidentified);
        }
        let channel = self.conversation_of(query.channel, deadline).await?;
        let mut pages = Pages::new(query);
        // Adopting a stream: this app's messages without slack-once's names, in the window,
        // other than the thread's parent. One is the stream; several cannot be told apart.
        let mut unmarked: Vec<String> = Vec::new();
        loop {
            let history = self.page(query, &channel, &pages, deadline).await?;
            let read = match scan(query, &history.messages, &mut unmarked) {
                Scanned::Found(ts) => return Ok(Some(Found { channel, ts })),
                Scanned::Read(read) => read,
            };
            if !history.has_more {
                return adopted(channel, unmarked);
            }
            let next = history
                .response_metadata
                .and_then(|m| m.next_cursor)
                .filter(|c| !c.is_empty());
            pages.go_on(&read, next, reached)?;
        }
    }

    /// The conversation a post to `channel` went to: a post to a user went to the DM between
    /// the bot and that user (`conversations.open` finds it).
    async fn conversation_of(
        &self,
        channel: &str,
        deadline: Instant,
    ) -> Result<String, SlackError> {
        if !is_user_id(channel) {
            return Ok(channel.to_string());
        }
        let args = Args::Form(vec![("users".into(), channel.to_string())]);
        let opened = self.api("conversations.open", &args, deadline).await?;
        Ok(opened["channel"]["id"]
            .as_str()
            .ok_or_else(|| {
                SlackError::InvalidResponse("conversations.open without a channel id".into())
            })?
            .to_string())
    }

    /// The page `pages` stands at, of `channel`'s history (or the thread's replies), once the
    /// app's turn to read comes.
    async fn page(
        &self,
        query: &ReplyQuery<'_>,
        channel: &str,
        pages: &Pages,
        deadline: Instant,
    ) -> Result<History, SlackError> {
        let limit = LOOKUP_PAGE_SIZE.to_string();
        let mut params = vec![
            ("channel", channel),
            ("include_all_metadata", "true"),
            ("limit", limit.as_str()),
        ];
        params.extend(query.thread_ts.map(|ts| ("ts", ts)));
        params.extend(pages.oldest.as_deref().map(|o| ("oldest", o)));
        params.extend(pages.latest.as_deref().map(|l| ("latest", l)));
        params.extend(pages.cursor.as_deref().map(|c| ("cursor", c)));
        let encoded: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", percent_encode(v)))
            .collect();
        let method = pages.method;
        let uri = format!("{}/{method}?{}", self.base_url(), encoded.join("&"));
        // A distributed app's history reads are few a minute per workspace: each page
        // waits for its turn, shared by every instance (or gives up within the deadline).
        self.secrets.lookup_slot(method, deadline).await?;
        self.authorized(method, deadline, |token| {
            Request::builder()
                .method(Method::GET)
                .uri(&uri)
                .header(AUTHORIZATION, format!("Bearer {}", token.expose()))
                .body(Full::new(Bytes::new()))
                .expect("a valid request")
        })
        .await
    }
}

/// Where a look-up's pages are: the method that reads them, the window's bounds (exclusive),
/// Slack's cursor, and the order the pages come in once seen.
struct Pages {
    method: &'static str,
    /// The order Slack's method is documented to give (history: newest first).
    newest_first: bool,
    oldest: Option<String>,
    latest: Option<String>,
    /// Within this look-up, pages follow Slack's cursor.
    cursor: Option<String>,
    /// Read off the first page with two messages: where the pages reach is kept as the edge
    /// of the window they cover, so that a later look-up goes on from it with a bound,
    /// whatever order Slack gives.
    oldest_first: Option<bool>,
}

impl Pages {
    /// The first page of `query`'s window, narrowed by where an earlier look-up got to.
    fn new(query: &ReplyQuery<'_>) -> Self {
        let (method, newest_first) = match query.thread_ts {
            Some(_) => ("conversations.replies", false),
            None => ("conversations.history", true),
        };
        let mut oldest = query.oldest.map(str::to_string);
        let mut latest = query.latest.map(str::to_string);
        // `>TS`: the window up to TS was searched (pages oldest first); `<TS`: from TS on
        // (newest first).
        match query.resume.map(|r| r.split_at(1)) {
            Some((">", ts)) => oldest = Some(ts.to_string()),
            Some(("<", ts)) => latest = Some(ts.to_string()),
            _ => {}
        }
        Self {
            method,
            newest_first,
            oldest,
            latest,
            cursor: None,
            oldest_first: None,
        }
    }

    /// On from a page that had more after it (`read`: the `ts` of its messages, as micros;
    /// `next`: Slack's cursor), `reached` moved to the edge the pages read cover.
    fn go_on(
        &mut self,
        read: &[u128],
        next: Option<String>,
        reached: &mut Option<String>,
    ) -> Result<(), SlackError> {
        // How far the pages read reach, in the order they come.
        if self.oldest_first.is_none() && read.len() >= 2 {
            self.oldest_first = Some(read.first() < read.last());
        }
        let ascending = self.oldest_first.unwrap_or(!self.newest_first);
        let edge = match ascending {
            true => read.iter().max(),
            false => read.iter().min(),
        };
        let ts = edge.map(|m| format!("{}.{:06}", m / 1_000_000, m % 1_000_000));
        let mark = |ts: &str| format!("{}{ts}", if ascending { ">" } else { "<" });
        match (next, ts) {
            // The edge is kept only once the pages' order is seen (two messages): a bound
            // on the wrong side would skip what was not read.
            (Some(next), ts) => {
                self.cursor = Some(next);
                if let (Some(ts), Some(_)) = (ts, self.oldest_first) {
                    *reached = Some(mark(&ts));
                }
            }
            // No cursor: on past the edge, by the bound (a cursor is for its own bounds).
            (None, Some(ts)) => {
                self.cursor = None;
                match ascending {
                    true => self.oldest = Some(ts.clone()),
                    false => self.latest = Some(ts.clone()),
                }
                if self.oldest_first.is_some() {
                    *reached = Some(mark(&ts));
                }
            }
            // More messages that cannot be reached: "not found" would be a guess.
            (None, None) => {
                return Err(SlackError::InvalidResponse(
                    "has_more without a next_cursor or a message to go on from".into(),
                ));
            }
        }
        Ok(())
    }
}

/// What one page came to: the message looked for (its `ts`), or the `ts` of every message
/// read (as micros), the thread's parent aside.
enum Scanned {
    Found(String),
    Read(Vec<u128>),
}

/// Looks through one page for the message `query` names by its metadata, keeping this app's
/// unmarked messages in the window in `unmarked` when a stream may be adopted.
fn scan(
    query: &ReplyQuery<'_>,
    messages: &[HistoryMessage],
    unmarked: &mut Vec<String>,
) -> Scanned {
    let after_oldest = |ts: &str| match (query.oldest.and_then(ts_micros), ts_micros(ts)) {
        (Some(oldest), Some(ts)) => ts >= oldest,
        _ => true,
    };
    let mut read: Vec<u128> = Vec::new();
    for m in messages {
        // The thread's parent comes first on every page of conversations.replies.
        if Some(m.ts.as_str()) == query.thread_ts {
            continue;
        }
        read.extend(ts_micros(&m.ts));
        if !query.app.posted(m) {
            continue;
        }
        match m.metadata.as_ref().and_then(metadata_names) {
            Some(names) if names == (query.key, u64::from(query.step)) => {
                return Scanned::Found(m.ts.clone());
            }
            Some(_) => {}
            // A stream carries no metadata until it is stopped.
            None if query.adopt_unmarked && after_oldest(&m.ts) => unmarked.push(m.ts.clone()),
            None => {}
        }
    }
    Scanned::Read(read)
}

/// The end of the window without the message's names: the one unmarked message of this app
/// there (a stream), if a stream was to be adopted; none, "not found".
fn adopted(channel: String, mut unmarked: Vec<String>) -> Result<Option<Found>, SlackError> {
    match unmarked.len() {
        0 => Ok(None),
        1 => Ok(Some(Found {
            channel,
            ts: unmarked.remove(0),
        })),
        n => Err(SlackError::InvalidResponse(
            format!(
                "{n} unmarked messages of this app in the window: which is the stream cannot be told"
            )
            .into(),
        )),
    }
}

/// A Slack `ts` as microseconds (`"1700000000.000100"` → 1700000000000100).
fn ts_micros(ts: &str) -> Option<u128> {
    let (secs, frac) = ts.split_once('.').unwrap_or((ts, "0"));
    let frac = format!("{frac:0<6}");
    Some(secs.parse::<u128>().ok()? * 1_000_000 + frac.get(..6)?.parse::<u128>().ok()?)
}

/// A user's id (`U…`, or `W…` on Enterprise Grid), where Slack takes one for a channel.
fn is_user_id(channel: &str) -> bool {
    channel.len() > 1
        && channel.starts_with(['U', 'W'])
        && channel[1..]
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_posts_metadata_keeps_the_bots_own_and_names_the_claim_and_step() {
        let names = serde_json::json!({"key": "msg-T1-C1-1_2", "step": 2});
        let ours = post_metadata(None, names.clone());
        assert_eq!(ours["event_type"], REPLY_METADATA_TYPE);
        assert_eq!(ours["event_payload"]["slack_once"], names);
        let own = serde_json::json!({"event_type": "order", "event_payload": {"id": 7, "slack_once": "mine"}});
        let merged = post_metadata(Some(&own), names.clone());
        assert_eq!(merged["event_type"], "order");
        assert_eq!(merged["event_payload"]["id"], 7);
        assert_eq!(
            merged["event_payload"]["slack_once"], names,
            "the key is reserved"
        );
        let read: MessageMetadata = serde_json::from_value(merged).unwrap();
        assert_eq!(metadata_names(&read), Some(("msg-T1-C1-1_2", 2)));
        // A reply of a version before the journal: its event id, step 1.
        let old: MessageMetadata = serde_json::from_value(serde_json::json!({
            "event_type": REPLY_METADATA_TYPE, "event_payload": {"event_id": "Ev1", "attempt": 1}
        }))
        .unwrap();
        assert_eq!(metadata_names(&old), Some(("Ev1", 1)));
        let foreign: MessageMetadata = serde_json::from_value(
            serde_json::json!({"event_type": "order", "event_payload": {"id": 7}}),
        )
        .unwrap();
        assert_eq!(metadata_names(&foreign), None);
    }
}
