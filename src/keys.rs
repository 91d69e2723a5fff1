//! The ledger's keys, for every kind of request: a claim's own key and a message's alias
//! ([`LedgerKeys`]), and the keys of the notes an agent keeps beside the claims (what a person
//! looks at, a stop: [`NoteKeys`]) with what a stop stops ([`StopNote`]). The pipeline claims
//! under these keys and the app reads and writes the notes under them; both import them from
//! here.

use serde_json::{Value, json};

use crate::ledger::{Ledger, LedgerError, NotePut, app_scoped};
use crate::slack::envelope::{EventCallback, EventId};

/// The ledger keys of one claim: its own (`primary`, holding the step journal) and the alias
/// it writes with it (a message's `client_msg_id`).
pub(crate) struct LedgerKeys {
    pub primary: EventId,
    pub alias: Option<EventId>,
}

impl LedgerKeys {
    /// A message is keyed by its identity (team, channel, `ts`), so every event that carries
    /// it (an `app_mention` and a `message.channels`, phantom copies with new event ids) is one
    /// claim; its `client_msg_id`, when present, is written as an alias of that key, so a copy
    /// under another `ts` is the same message. Anything else, or listeners that asked for it,
    /// are keyed by `event_id`.
    pub(crate) fn of(callback: &EventCallback, by_message: bool) -> Self {
        let by_event = || Self {
            primary: callback.event_id.clone(),
            alias: None,
        };
        let event = &callback.event;
        if event.kind == "function_executed" {
            // One step execution, however many events (retries, copies) carry it.
            return match event.raw["function_execution_id"]
                .as_str()
                .and_then(|id| ledger_key(&format!("fx-{id}")))
            {
                Some(primary) => Self {
                    primary,
                    alias: None,
                },
                None => by_event(),
            };
        }
        if event.kind == "assistant_thread_started" {
            // One assistant thread, however many events carry its start.
            let team = callback.team().unwrap_or("-");
            let (Some(channel), Some(thread)) =
                (event.channel.as_deref(), event.thread_ts.as_deref())
            else {
                return by_event();
            };
            return match ledger_key(&format!("asst-{team}-{channel}-{thread}")) {
                Some(primary) => Self {
                    primary,
                    alias: None,
                },
                None => by_event(),
            };
        }
        if !by_message || !matches!(event.kind.as_str(), "message" | "app_mention") {
            return by_event();
        }
        let (Some(channel), Some(ts)) = (event.channel.as_deref(), event.ts.as_deref()) else {
            return by_event();
        };
        let team = callback.team().unwrap_or("-");
        let Some(primary) = ledger_key(&format!("msg-{team}-{channel}-{ts}")) else {
            return by_event();
        };
        let alias = event
            .client_msg_id
            .as_deref()
            .and_then(|id| ledger_key(&format!("cmid-{team}-{id}")));
        Self { primary, alias }
    }
}

/// The keys of an assistant thread's context note for the app `app`: team, channel and the
/// thread's `ts`, the app's ([`NoteKeys`]).
pub(crate) fn thread_context_keys(
    team: &str,
    channel: &str,
    thread_ts: &str,
    app: Option<&str>,
) -> Option<NoteKeys> {
    NoteKeys::of(
        ledger_key(&format!("actx-{team}-{channel}-{thread_ts}")),
        app,
    )
}

/// The keys of the note that keeps a conversation's latest agent context
/// (`app_context_changed`) for the app `app`: team and the app's DM with the person (or the
/// person: `user-U…`), the app's ([`NoteKeys`]).
pub(crate) fn agent_context_keys(team: &str, place: &str, app: Option<&str>) -> Option<NoteKeys> {
    NoteKeys::of(ledger_key(&format!("agctx-{team}-{place}")), app)
}

/// The keys of the note that keeps the stops of an agent session (`agent_session_stopped`)
/// for the app `app`: team, channel and the session's thread, the app's ([`NoteKeys`]).
pub(crate) fn session_stop_keys(
    team: &str,
    channel: &str,
    thread_ts: &str,
    app: Option<&str>,
) -> Option<NoteKeys> {
    NoteKeys::of(
        ledger_key(&format!("astop-{team}-{channel}-{thread_ts}")),
        app,
    )
}

/// The ledger keys of `callback` (primary, alias), as a claim derives them: for the fuzzers and
/// `redrive`.
pub(crate) fn ledger_keys(
    callback: &EventCallback,
    by_message: bool,
) -> (EventId, Option<EventId>) {
    let keys = LedgerKeys::of(callback, by_message);
    (keys.primary, keys.alias)
}

/// A ledger key from `raw`: the characters of an event id (others become `_`), at most 128.
pub(crate) fn ledger_key(raw: &str) -> Option<EventId> {
    let key: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    EventId::try_from(key).ok()
}

/// Where an app's note is: its key followed by the app (`…-A0123`, as a claim of a key another
/// app holds is kept: [`app_scoped`]), so two apps whose deployments share a table never read
/// or overwrite each other's; a request without `api_app_id` keeps it under the key alone.
/// Releases before the app was in the key kept every app's note under the key alone: that
/// unscoped note (`unscoped`) is read while a deploy overlaps, when the app's own is absent,
/// never written.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NoteKeys {
    pub own: EventId,
    pub unscoped: Option<EventId>,
}

impl NoteKeys {
    pub(crate) fn of(key: Option<EventId>, app: Option<&str>) -> Option<Self> {
        let key = key?;
        Some(match app.and_then(|app| app_scoped(&key, app)) {
            Some(own) => Self {
                own,
                unscoped: Some(key),
            },
            None => Self {
                own: key,
                unscoped: None,
            },
        })
    }
}

/// A person's stops of an agent session's thread, as kept beside the claims. A stop names
/// the streams Slack stopped (`agent_session_stopped`'s `streaming_message_ts`; the one part
/// Slack answered `stopped_by_user`): it stops the answers those streams are parts of, and
/// no other answer of the thread. A stop that names none (Slack sends an empty list when no
/// stream was active: the person stopped work that is not a stream yet) stops every answer
/// of the thread whose request began at or before it.
///
/// Kept as `{"at_ms", "value"}` (the latest stop's time, and its `streaming_message_ts` as
/// the releases before kept it, which read every stop as the whole thread's), with `streams`
/// (every stream a stop of the thread named) and `unnamed_at_ms` (the latest stop that named
/// none): a later stop adds to the note, never hiding an earlier one.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct StopNote {
    at_ms: u64,
    latest: Vec<String>,
    streams: Vec<String>,
    unnamed_at_ms: Option<u64>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().filter(|s| !s.is_empty()).map(str::to_string))
        .collect()
}

impl StopNote {
    /// A stop at `at_ms` naming `streams` (none: the whole thread's work begun before it).
    pub(crate) fn pressed(at_ms: u64, streams: Vec<String>) -> Self {
        Self {
            at_ms,
            unnamed_at_ms: streams.is_empty().then_some(at_ms),
            latest: streams.clone(),
            streams,
        }
    }

    /// The note as kept (with `streams`, or of `value` alone); `None` when it is not one.
    pub(crate) fn read(note: &str) -> Option<Self> {
        let kept: Value = serde_json::from_str(note).ok()?;
        let at_ms = kept["at_ms"].as_u64()?;
        let latest = kept["value"]
            .as_str()
            .and_then(|v| serde_json::from_str::<Value>(v).ok())
            .map(|v| strings(&v))
            .unwrap_or_default();
        if kept.get("streams").is_none() {
            return Some(Self::pressed(at_ms, latest));
        }
        Some(Self {
            at_ms,
            latest,
            streams: strings(&kept["streams"]),
            unnamed_at_ms: kept["unnamed_at_ms"].as_u64(),
        })
    }

    /// This stop with the ones `earlier` kept (a stop's event delivered late included).
    fn with(mut self, earlier: Option<Self>) -> Self {
        let Some(earlier) = earlier else {
            return self;
        };
        if earlier.at_ms > self.at_ms {
            self.at_ms = earlier.at_ms;
            self.latest = earlier.latest;
        }
        // The earlier streams first: a stop kept already leaves the note as it is.
        let mut streams = earlier.streams;
        for stream in self.streams {
            if !streams.contains(&stream) {
                streams.push(stream);
            }
        }
        self.streams = streams;
        self.unnamed_at_ms = self.unnamed_at_ms.max(earlier.unnamed_at_ms);
        self
    }

    fn kept(&self) -> String {
        let mut kept = json!({"at_ms": self.at_ms, "value": json!(self.latest).to_string(),
                              "streams": self.streams});
        if let Some(at) = self.unnamed_at_ms {
            kept["unnamed_at_ms"] = at.into();
        }
        kept.to_string()
    }

    /// Whether it stops the answer streamed in `parts` (none yet: only a stop naming no
    /// stream can), whose request began at `since_ms`.
    pub(crate) fn stops(&self, parts: &[&str], since_ms: u64) -> bool {
        parts.iter().any(|p| self.streams.iter().any(|s| s == p)) || self.stops_work(since_ms)
    }

    /// Whether a stop that named no stream came at or after `since_ms`.
    pub(crate) fn stops_work(&self, since_ms: u64) -> bool {
        self.unnamed_at_ms.is_some_and(|at| at >= since_ms)
    }
}

/// How many times a stop is read and written again where another stop of the thread came
/// between the read and the write (each such write keeps a stop of its own: only a burst
/// of stops in one thread outlasts them).
const STOP_WRITE_ATTEMPTS: u32 = 16;

/// Keeps `stop` under `key`, with the stops kept there already: a `GetItem`, then a `PutItem`
/// conditioned on the note being still as read ([`Ledger::replace_note`]), again from the
/// read where another stop came in between, so two stops of one thread kept at the same
/// instant both stand. None is written where the note has it already (a stop's event sent
/// again, a write whose answer was lost). Where the app's own note is absent, the stops of the
/// unscoped note (kept without the app) are kept with it: a reader of the app's own note no
/// longer reads those.
pub(crate) async fn keep_stop(
    ledger: &dyn Ledger,
    keys: &NoteKeys,
    stop: StopNote,
    expires_at_s: u64,
    now_ms: u64,
) -> Result<(), LedgerError> {
    let key = &keys.own;
    for _ in 0..STOP_WRITE_ATTEMPTS {
        let read = ledger.note(key, now_ms).await?;
        let earlier = match (&read, &keys.unscoped) {
            (None, Some(unscoped)) => ledger.note(unscoped, now_ms).await?,
            _ => read.clone(),
        };
        let kept = stop
            .clone()
            .with(earlier.as_deref().and_then(StopNote::read));
        let value = kept.kept();
        if read.as_deref() == Some(value.as_str()) {
            return Ok(());
        }
        let put = ledger
            .replace_note(
                key,
                read.as_deref(),
                &value,
                kept.at_ms,
                expires_at_s,
                now_ms,
            )
            .await?;
        match put {
            NotePut::Written => return Ok(()),
            NotePut::Conflict => continue,
        }
    }
    Err(LedgerError::Unavailable(
        format!("the stops of {key} kept changing: {STOP_WRITE_ATTEMPTS} writes came in between")
            .into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_stops_the_streams_it_names_and_one_naming_none_the_work_begun_before_it() {
        let named = StopNote::pressed(2_000, vec!["1.5".into()]);
        assert!(named.stops(&["1.5"], 1_000));
        assert!(!named.stops(&["1.7"], 1_000), "another answer's stream");
        assert!(!named.stops(&[], 1_000), "an answer not streaming yet");
        let unnamed = StopNote::pressed(2_000, vec![]);
        assert!(unnamed.stops(&["1.7"], 1_000));
        assert!(!unnamed.stops(&["1.7"], 3_000), "asked after the stop");
    }

    #[test]
    fn a_later_stop_keeps_the_earlier_ones_and_a_note_of_value_alone_is_read() {
        let earlier = StopNote::pressed(1_000, vec!["1.5".into()]);
        let later = StopNote::pressed(3_000, vec!["1.7".into()]).with(Some(earlier.clone()));
        let read = StopNote::read(&later.kept()).unwrap();
        assert_eq!(read, later);
        assert!(read.stops(&["1.5"], 0) && read.stops(&["1.7"], 0));
        // Delivered late: the later stop's time stands.
        let late = StopNote::pressed(500, vec![]).with(Some(read));
        assert_eq!((late.at_ms, late.unnamed_at_ms), (3_000, Some(500)));
        // A note of `value` alone (no `streams`), as releases before `streams` kept it, which
        // named its streams.
        let value_alone = StopNote::read(r#"{"at_ms": 2000, "value": "[\"1.5\"]"}"#).unwrap();
        assert!(value_alone.stops(&["1.5"], 0) && !value_alone.stops(&["1.7"], 0));
        let value_alone = StopNote::read(r#"{"at_ms": 2000, "value": "[]"}"#).unwrap();
        assert!(value_alone.stops(&[], 1_500) && !value_alone.stops(&[], 2_500));
    }

    #[tokio::test]
    async fn a_stop_kept_already_leaves_the_note_as_it_is_and_a_new_one_is_added() {
        let ledger = crate::ledger::MemoryLedger::new();
        let key = EventId::try_from("astop-T1-D1-1_1".to_string()).ok();
        let keys = NoteKeys::of(key, Some("A1")).unwrap();
        let (now_ms, expires_at_s) = (10_000, 100);
        let keep = |stop: StopNote| keep_stop(&ledger, &keys, stop, expires_at_s, now_ms);
        keep(StopNote::pressed(2_000, vec!["1.5".into()]))
            .await
            .unwrap();
        keep(StopNote::pressed(3_000, vec!["1.7".into()]))
            .await
            .unwrap();
        let kept = ledger.note(&keys.own, now_ms).await.unwrap().unwrap();
        // Either stop's event sent again: the note is as it was.
        for (at_ms, stream) in [(2_000, "1.5"), (3_000, "1.7")] {
            keep(StopNote::pressed(at_ms, vec![stream.into()]))
                .await
                .unwrap();
            let now = ledger.note(&keys.own, now_ms).await.unwrap();
            assert_eq!(now.as_deref(), Some(kept.as_str()), "{stream} again");
        }
        let note = StopNote::read(&kept).unwrap();
        assert!(note.stops(&["1.5"], 0) && note.stops(&["1.7"], 0) && !note.stops(&["1.9"], 0));
    }

    #[tokio::test]
    async fn the_app_s_first_stop_keeps_the_stops_of_the_unscoped_note() {
        let ledger = crate::ledger::MemoryLedger::new();
        let key = EventId::try_from("astop-T1-D1-1_1".to_string()).ok();
        let keys = NoteKeys::of(key, Some("A1")).unwrap();
        let unscoped = keys.unscoped.clone().unwrap();
        let (now_ms, expires_at_s) = (10_000, 100);
        // As releases before the app was in the key kept a stop: `value` alone, naming its
        // stream, without the app.
        let before = r#"{"at_ms": 2000, "value": "[\"1.5\"]"}"#;
        ledger
            .set_note(&unscoped, before, 2_000, expires_at_s)
            .await
            .unwrap();
        let stop = StopNote::pressed(3_000, vec!["1.7".into()]);
        keep_stop(&ledger, &keys, stop, expires_at_s, now_ms)
            .await
            .unwrap();
        let own = ledger.note(&keys.own, now_ms).await.unwrap().unwrap();
        let own = StopNote::read(&own).unwrap();
        assert!(own.stops(&["1.5"], 0), "the unscoped note's stop: {own:?}");
        assert!(own.stops(&["1.7"], 0));
        let unscoped_now = ledger.note(&unscoped, now_ms).await.unwrap();
        assert_eq!(unscoped_now.as_deref(), Some(before), "never written");
    }
}
