//! How a step is settled: what a claim does with each step it makes, given what the journal
//! holds of it and, for a step that can be looked for, what Slack shows. One table, which the
//! engine follows ([`verdict`]) and RELIABILITY.md prints ([`RULES`]).

/// How a step whose fate is unknown is settled by a later claim: given by each write.
#[derive(Clone, Copy, Debug)]
pub enum Settle<'a> {
    /// A message: looked for in Slack by its metadata.
    Lookup {
        channel: &'a str,
        thread_ts: Option<&'a str>,
    },
    /// A streamed message (`chat.startStream` takes no metadata): looked for among the app's
    /// messages of the thread, in the claim's window, that carry no slack-once names yet.
    Stream {
        channel: &'a str,
        thread_ts: &'a str,
    },
    /// Made again: doing it twice changes nothing.
    Idempotent,
    /// Not made again: it can be neither looked for nor repeated harmlessly.
    AtMostOnce,
}

/// The kind of a step's settle rule (a row's first column).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Looked for in Slack: a message by its metadata, a stream among the thread's unmarked
    /// messages.
    LookedFor,
    Idempotent,
    AtMostOnce,
}

impl Settle<'_> {
    pub fn kind(&self) -> Kind {
        match self {
            Settle::Lookup { .. } | Settle::Stream { .. } => Kind::LookedFor,
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
    /// An earlier claim's began window: its claim stood for this step's intent.
    Began,
}

/// What Slack shows of a step that is looked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shows {
    /// The write is there: its ids.
    Found,
    /// It is not there, in the window it could be in.
    Absent,
    /// Slack refuses the look-up, and no later delivery would get further (the bot is not in
    /// the conversation, the app lacks the history scope).
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
    /// Does not make it again, and records it as done with an unknown result.
    TakenUnknown,
    /// Releases the claim before the call: a later delivery settles it.
    Hold,
}

/// One row of the table.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    pub kind: Option<Kind>,
    pub record: &'static [Record],
    pub shows: Option<Shows>,
    /// Only on a request's last chance (`Some(true)`), only before it (`Some(false)`).
    pub last_chance: Option<bool>,
    pub verdict: Verdict,
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
        why: "recorded done: its result is returned, no call",
    },
    Rule {
        kind: None,
        record: &[Record::None],
        shows: None,
        last_chance: None,
        verdict: Verdict::Make,
        why: "never announced: no earlier claim can have made it",
    },
    Rule {
        kind: Some(Kind::LookedFor),
        record: ANNOUNCED,
        shows: Some(Shows::Found),
        last_chance: None,
        verdict: Verdict::Taken,
        why: "the earlier claim's write is in Slack: not made again",
    },
    Rule {
        kind: Some(Kind::LookedFor),
        record: ANNOUNCED,
        shows: Some(Shows::Absent),
        last_chance: None,
        verdict: Verdict::Make,
        why: "not in Slack in the window it could be in: made",
    },
    Rule {
        kind: Some(Kind::LookedFor),
        record: ANNOUNCED,
        shows: Some(Shows::RefusedForGood),
        last_chance: None,
        verdict: Verdict::TakenUnknown,
        why: "a response_url post in a conversation that cannot be read: not made again",
    },
    Rule {
        kind: Some(Kind::LookedFor),
        record: ANNOUNCED,
        shows: Some(Shows::Unavailable),
        last_chance: Some(true),
        verdict: Verdict::Make,
        why: "no delivery follows: made (it may be a second answer)",
    },
    Rule {
        kind: Some(Kind::LookedFor),
        record: ANNOUNCED,
        shows: Some(Shows::Unavailable),
        last_chance: None,
        verdict: Verdict::Hold,
        why: "Slack could not be asked: released, a later delivery looks again",
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
        record: &[Record::Intent],
        shows: None,
        last_chance: None,
        verdict: Verdict::TakenUnknown,
        why: "can be neither looked for nor repeated: not made again",
    },
    Rule {
        kind: Some(Kind::AtMostOnce),
        record: &[Record::Began],
        shows: None,
        last_chance: None,
        verdict: Verdict::Make,
        why:
            "an at-most-once step always writes its own intent: the began window never stood for it",
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

/// Whether a step of `kind` found as `record` is to be looked for before the verdict.
pub fn looks(kind: Kind, record: Record) -> bool {
    kind == Kind::LookedFor && ANNOUNCED.contains(&record)
}
