//! How a step is settled: what a claim does with each step it makes, given what the journal
//! holds of it and, for a step that can be looked for, what Slack shows. One table, which the
//! engine follows ([`verdict`]) and RELIABILITY.md prints ([`RULES`]).

/// How a step whose fate is unknown is settled by a later claim: given by each write.
#[derive(Clone, Copy, Debug)]
pub enum Settle<'a> {
    /// A message: looked for in Slack by its metadata.
    Lookup {
        /// The conversation the message is posted in.
        channel: &'a str,
        /// The thread it is posted in; `None`: the conversation itself, not a thread.
        thread_ts: Option<&'a str>,
    },
    /// A streamed message (`chat.startStream` takes no metadata): looked for among the app's
    /// messages of the thread, in the claim's window, that carry no slack-once names yet.
    Stream {
        /// The conversation the stream is in.
        channel: &'a str,
        /// The thread the stream is in.
        thread_ts: &'a str,
    },
    /// A view opened or pushed with the request's `trigger_id`: looked for by the
    /// `external_id` every view of slack-once carries (`views.update` with it and the same
    /// view: Slack answers the view, or `not_found`), since a trigger opens one view once and
    /// expires in 3 s.
    View,
    /// Made again: doing it twice changes nothing.
    Idempotent,
    /// Not made again: it can be neither looked for nor repeated harmlessly.
    AtMostOnce,
}

/// The kind of a step's settle rule (a row's first column).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Looked for in Slack: a message by its metadata, a stream among the thread's unmarked
    /// messages, a view by its `external_id`.
    LookedFor,
    /// Made again: doing it twice changes nothing (an update, a reaction).
    Idempotent,
    /// Not made again: it can be neither looked for nor repeated harmlessly (an ephemeral
    /// message).
    AtMostOnce,
}

impl Settle<'_> {
    /// The kind of rule the step is settled by.
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Settle::Lookup { .. } | Settle::Stream { .. } | Settle::View => Kind::LookedFor,
            Settle::Idempotent => Kind::Idempotent,
            Settle::AtMostOnce => Kind::AtMostOnce,
        }
    }
}

/// What the journal holds of the step when the claim makes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// Nothing: no claim announced it.
    None,
    /// Done, with its result.
    Done,
    /// An earlier claim's intent: it was about to make the call.
    Intent,
    /// Earlier claims' began window, which may stand for this step: their claims stood for
    /// its intent.
    Began,
    /// Earlier claims' began window, at a step it cannot stand for: the step is one that
    /// announces itself (an at-most-once write; or, by claims of this version, a write a
    /// look-up might not settle), so those claims would have written its intent first.
    BeganNotForIt,
}

/// What Slack shows of a step that is looked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shows {
    /// The write is there: its ids.
    Found,
    /// It is not there, in the window it could be in.
    Absent,
    /// Slack refuses the look-up, and no later delivery would get further (the bot is not in
    /// the conversation, the app lacks the scope): whether it was made cannot be known.
    RefusedForGood,
    /// Slack could not be asked now (a 429 past the deadline, an error).
    Unavailable,
}

/// What the claim does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Returns the recorded result; no call.
    Replay,
    /// Makes the call.
    Make,
    /// Takes the earlier claim's write for done (found in Slack): its ids are recorded, no
    /// call.
    Taken,
    /// Does not make it again, and cannot say it was made: recorded as done with an unknown
    /// result, the listener goes on, and the request ends `failed` (`unconfirmed_write`),
    /// counted, never `answered` or `recovered`.
    Unconfirmed,
    /// Releases the claim before the call: a later delivery settles it (going on where this
    /// look-up stopped). Where no delivery follows, the request ends `failed` (retryable).
    Hold,
}

impl Verdict {
    /// The verdict as RELIABILITY.md's table names it (its "the claim" column).
    #[cfg(test)]
    fn name(self) -> &'static str {
        match self {
            Verdict::Replay => "replayed",
            Verdict::Make => "made",
            Verdict::Taken => "taken as made",
            Verdict::Unconfirmed => "not made again: unconfirmed",
            Verdict::Hold => "held: released for a later delivery",
        }
    }
}

/// One row of the table.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// `None`: every kind.
    pub kind: Option<Kind>,
    /// What the journal holds of the step: any of these.
    pub record: &'static [Record],
    /// For a step looked for: what Slack shows.
    pub shows: Option<Shows>,
    /// Only on the request's last chance (`Some(true)`: no delivery follows), only before it
    /// (`Some(false)`), or either (`None`).
    pub last_chance: Option<bool>,
    /// What the claim does.
    pub verdict: Verdict,
    /// Why, as RELIABILITY.md prints it (read by the test that keeps its table in step).
    #[cfg_attr(not(test), allow(dead_code))]
    pub why: &'static str,
}

const ANNOUNCED: &[Record] = &[Record::Intent, Record::Began];

/// The table, first matching row wins.
pub const RULES: &[Rule] = &[
    Rule {
        kind: None,
        record: &[Record::Done],
        shows: None,
        last_chance: None,
        verdict: Verdict::Replay,
        why: "its recorded result is returned; no call",
    },
    Rule {
        kind: None,
        record: &[Record::None, Record::BeganNotForIt],
        shows: None,
        last_chance: None,
        verdict: Verdict::Make,
        why: "no earlier claim announced it, so none made it",
    },
    Rule {
        kind: Some(Kind::LookedFor),
        record: ANNOUNCED,
        shows: Some(Shows::Found),
        last_chance: None,
        verdict: Verdict::Taken,
        why: "the earlier claim's write is in Slack: its ids are recorded",
    },
    Rule {
        kind: Some(Kind::LookedFor),
        record: ANNOUNCED,
        shows: Some(Shows::Absent),
        last_chance: None,
        verdict: Verdict::Make,
        why: "it is not in Slack, in the window it could be in",
    },
    Rule {
        kind: Some(Kind::LookedFor),
        record: ANNOUNCED,
        shows: Some(Shows::RefusedForGood),
        last_chance: Some(false),
        verdict: Verdict::Hold,
        why: "a later delivery may be let in (the bot invited, the scope granted): it looks again",
    },
    Rule {
        kind: Some(Kind::LookedFor),
        record: ANNOUNCED,
        shows: Some(Shows::RefusedForGood),
        last_chance: Some(true),
        verdict: Verdict::Unconfirmed,
        why: "no delivery follows, none could look: never written twice, never said to be answered",
    },
    Rule {
        kind: Some(Kind::LookedFor),
        record: ANNOUNCED,
        shows: Some(Shows::Unavailable),
        last_chance: None,
        verdict: Verdict::Hold,
        why: "a later delivery looks again, from where this look-up stopped; none writes blind",
    },
    Rule {
        kind: Some(Kind::Idempotent),
        record: ANNOUNCED,
        shows: None,
        last_chance: None,
        verdict: Verdict::Make,
        why: "made again: twice is the same as once",
    },
    Rule {
        kind: Some(Kind::AtMostOnce),
        record: ANNOUNCED,
        shows: None,
        last_chance: None,
        verdict: Verdict::Unconfirmed,
        why: "it can be neither looked for nor made again",
    },
];

/// The verdict for a step of `kind` whose journal holds `record`, Slack showing `shows`
/// (for a step looked for, once looked), on the request's last chance or not.
pub fn verdict(kind: Kind, record: Record, shows: Option<Shows>, last_chance: bool) -> Verdict {
    RULES
        .iter()
        .find(|r| {
            r.kind.is_none_or(|k| k == kind)
                && r.record.contains(&record)
                && (r.shows.is_none() || r.shows == shows)
                && r.last_chance.is_none_or(|l| l == last_chance)
        })
        .map(|r| r.verdict)
        .expect("the table covers every step")
}

/// Whether a step of `kind` found as `record` is looked for before its verdict.
pub fn looks(kind: Kind, record: Record) -> bool {
    kind == Kind::LookedFor && ANNOUNCED.contains(&record)
}

/// Whether a claim's began window may stand for a step (the claim announcing it, without a
/// ledger write of its own): only where every later delivery can settle the step without it.
/// A write made twice harmlessly, and a message in the request's own conversation (an event's:
/// the bot is in it, and reads it with the manifest's history scopes), yes. A `response_url`
/// post (a command works in a DM between people), a post to another conversation or to a
/// user's DM (which `conversations.open` may not open), and an at-most-once write announce
/// themselves: a look-up refused later then still tells "never made" from "may be made".
pub fn may_stand(kind: Kind, in_own_conversation: bool) -> bool {
    match kind {
        Kind::Idempotent => true,
        Kind::LookedFor => in_own_conversation,
        Kind::AtMostOnce => false,
    }
}

/// The table as RELIABILITY.md prints it (a test keeps the two in step).
#[cfg(test)]
fn markdown() -> String {
    let kind = |k: Option<Kind>| match k {
        None => "any",
        Some(Kind::LookedFor) => "looked for (a message, a stream, a view)",
        Some(Kind::Idempotent) => "made again (an update, a reaction)",
        Some(Kind::AtMostOnce) => "at most once (an ephemeral message)",
    };
    let record = |r: &[Record]| {
        r.iter()
            .map(|r| match r {
                Record::None => "nothing",
                Record::Done => "done",
                Record::Intent => "an intent",
                Record::Began => "a began window",
                Record::BeganNotForIt => "a began window that cannot stand for it",
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let shows = |s: Option<Shows>| match s {
        None => "—",
        Some(Shows::Found) => "found",
        Some(Shows::Absent) => "not there",
        Some(Shows::RefusedForGood) => "refused for good",
        Some(Shows::Unavailable) => "cannot be asked now",
    };
    let when = |l: Option<bool>| match l {
        None => "any",
        Some(true) => "the last",
        Some(false) => "one with a later delivery",
    };
    let mut table = String::from(
        "| step | the journal holds | Slack shows | delivery | the claim | why |\n|---|---|---|---|---|---|\n",
    );
    for r in RULES {
        table.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            kind(r.kind),
            record(r.record),
            shows(r.shows),
            when(r.last_chance),
            r.verdict.name(),
            r.why
        ));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_and_record_has_a_verdict_and_none_writes_blind() {
        let shows = [
            None,
            Some(Shows::Found),
            Some(Shows::Absent),
            Some(Shows::RefusedForGood),
            Some(Shows::Unavailable),
        ];
        for kind in [Kind::LookedFor, Kind::Idempotent, Kind::AtMostOnce] {
            for record in [
                Record::None,
                Record::Done,
                Record::Intent,
                Record::Began,
                Record::BeganNotForIt,
            ] {
                for (seen, last) in shows.iter().flat_map(|s| [(*s, false), (*s, true)]) {
                    if looks(kind, record) != seen.is_some() {
                        continue;
                    }
                    let v = verdict(kind, record, seen, last);
                    // A write whose earlier claim may have made it is made again only where
                    // Slack showed it absent, or twice is once.
                    if v == Verdict::Make && matches!(record, Record::Intent | Record::Began) {
                        assert!(
                            kind == Kind::Idempotent || seen == Some(Shows::Absent),
                            "{kind:?} {record:?} {seen:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn reliability_md_prints_the_table_the_engine_follows() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/RELIABILITY.md"))
            .expect("RELIABILITY.md");
        assert!(
            text.contains(&markdown()),
            "RELIABILITY.md's settle table differs from the engine's; it is:\n{}",
            markdown()
        );
    }
}
