//! The step record's format and what it means: a step's record as a claim leaves it (an
//! intent, done, or an earlier claim's began window), the fates a claim learns before its next
//! write, and the doubt a claim keeps for began windows it never reached. The ledger stores
//! these records; this module says what they are and how they read back.

use std::collections::BTreeMap;

/// What the ledger knows of one Slack write of an event (a numbered step of its claims).
///
/// A record holds what a later claim needs to replay or settle the step, and nothing more (an
/// item is billed one write unit per KB on every write): the step's identity (`op`: the Web API
/// method and a short hash of its target, see `step_op`), and for an intent the window in
/// which its call could have reached Slack; for a done step the ids the call returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepRecord {
    /// The claim numbered `attempt` was about to make the call `op`, at `at_ms`, its lease
    /// ending at `lease_until_ms` (epoch ms): whether it reached Slack is unknown until someone
    /// looks, and a look-up need search only that window. Records of versions before this one
    /// carry neither time.
    Intent {
        /// The number of the claim that wrote it (as [`Claim::Acquired`](crate::ledger::Claim::Acquired) counts); 0 where no
        /// claim's number is known. A kept doubt (`kept_doubt`) has 0 or
        /// `KEPT_BY_ANNOUNCING`.
        attempt: u32,
        /// The step's identity (`step_op`); `None` where unknown (older records, a record
        /// that does not parse) and in kept doubts.
        op: Option<String>,
        /// When the claim was about to make the call (epoch ms); `None` where unknown.
        at_ms: Option<u64>,
        /// When the claim's lease ended (epoch ms): the call reached Slack before then if at
        /// all. `None` where unknown.
        lease_until_ms: Option<u64>,
        /// How far a later claim's look-up for it got, in the window it searched.
        looked: Option<Looked>,
    },
    /// The call `op` took effect; what a replay returns as JSON text (for a post,
    /// `{"channel": …, "ts": …}`).
    Done {
        /// What a replay returns, as JSON text.
        result: String,
        /// The step's identity (`step_op`); `None` in records of versions before it.
        op: Option<String>,
    },
    /// Never stored as a step: earlier claims that may have made this step (the lowest absent
    /// from the journal) without an intent of its own, their claim standing for it; the window
    /// spans their claims' times and lease ends. `announces`: every one of those claims was of
    /// a version that announces each step a look-up might not settle with an intent of its
    /// own (see `BeganWindow::announces`), so the window stands only for a step a later claim
    /// can settle by looking.
    Began {
        /// The earliest of those claims' times (epoch ms).
        at_ms: u64,
        /// The latest of those claims' lease ends (epoch ms).
        lease_until_ms: u64,
        /// Every one of those claims announced its own steps a look-up might not settle.
        announces: bool,
        /// How far a later claim's look-up for it got, in the window it searched.
        looked: Option<Looked>,
    },
}

/// How far a look-up for a step's message got before Slack stopped answering (a 429 for the
/// rest of the minute, an error): in the window `oldest`..`latest` (Slack `ts`), every message
/// up to `to` was searched: `>TS` from the window's start (pages oldest first, as
/// `conversations.replies`' come), `<TS` from its end (newest first, as
/// `conversations.history`'s); a `to` without either (an earlier version's) is searched again.
/// A later claim searching the same window goes on from `to`, so a busy conversation under
/// Slack's one call a minute is searched a page a delivery rather than its first page on every
/// delivery. Stored apart from the step's record (DynamoDB: the journal key `lN`, which
/// versions before it do not read), and dropped when the step is written again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Looked {
    /// The window's start, as a Slack `ts` (empty: the window has none).
    pub oldest: String,
    /// The window's end, as a Slack `ts` (empty: the window has none).
    pub latest: String,
    /// How far the search got: `>TS` or `<TS` (see above).
    pub to: String,
}

impl Looked {
    /// As stored: `"OLDEST LATEST TO"`.
    pub fn encode(&self) -> String {
        format!("{} {} {}", self.oldest, self.latest, self.to)
    }

    /// Reads [`Looked::encode`]'s form. Anything else is `None`.
    pub fn decode(text: &str) -> Option<Self> {
        let mut parts = text.split(' ');
        let looked = Self {
            oldest: parts.next()?.to_string(),
            latest: parts.next()?.to_string(),
            to: parts.next()?.to_string(),
        };
        parts.next().is_none().then_some(looked)
    }
}

/// The window of one claim that may have begun the lowest step absent from the journal:
/// when it claimed, and when its lease ended (epoch ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BeganWindow {
    /// When the claim was made (epoch ms).
    pub at_ms: u64,
    /// When its lease ended (epoch ms).
    pub lease_until_ms: u64,
    /// The claim announces every step a look-up might not settle (a `response_url` post, a
    /// post outside the request's own conversation, an at-most-once write) with an intent of
    /// its own before making it, so its window stands only for steps a later claim settles by
    /// looking: all claims of this version. Windows of earlier versions may stand for any step.
    /// Stored beside the windows (DynamoDB: the `began_by` list), so earlier versions read the
    /// windows as they always have.
    pub announces: bool,
}

impl BeganWindow {
    /// As stored: `"AT_MS LEASE_UNTIL_MS"`.
    pub fn encode(&self) -> String {
        format!("{} {}", self.at_ms, self.lease_until_ms)
    }

    /// Reads [`BeganWindow::encode`]'s form (`announces` is stored apart: false here).
    pub fn decode(text: &str) -> Option<Self> {
        let (at, until) = text.split_once(' ')?;
        Some(Self {
            at_ms: at.parse().ok()?,
            lease_until_ms: until.parse().ok()?,
            announces: false,
        })
    }
}

/// The lowest step number with no record in `journal` (the step a claim's began window
/// stands for).
pub fn first_absent_step(journal: &Journal) -> u32 {
    (1..)
        .find(|n| {
            !matches!(
                journal.get(n),
                Some(StepRecord::Intent { .. } | StepRecord::Done { .. })
            )
        })
        .expect("a journal has fewer than u32::MAX steps")
}

/// `journal` with the look-ups' progress (by step) on the records it was made for.
pub fn with_looked(mut journal: Journal, looked: &BTreeMap<u32, Looked>) -> Journal {
    for (step, progress) in looked {
        if let Some(StepRecord::Intent { looked, .. } | StepRecord::Began { looked, .. }) =
            journal.get_mut(step)
        {
            *looked = Some(progress.clone())
        }
    }
    journal
}

/// `journal` as a claim sees it: with the began windows of earlier claims (if any) as one
/// [`StepRecord::Began`] spanning them, at the lowest absent step.
pub fn with_began(mut journal: Journal, earlier: &[BeganWindow]) -> Journal {
    if let (Some(at_ms), Some(lease_until_ms)) = (
        earlier.iter().map(|w| w.at_ms).min(),
        earlier.iter().map(|w| w.lease_until_ms).max(),
    ) {
        let step = first_absent_step(&journal);
        journal.insert(
            step,
            StepRecord::Began {
                at_ms,
                lease_until_ms,
                announces: earlier.iter().all(|w| w.announces),
                looked: None,
            },
        );
    }
    journal
}

impl StepRecord {
    /// The record as the DynamoDB ledger stores it: one short string,
    /// `i ATTEMPT AT_MS LEASE_UNTIL_MS OP` or `d OP RESULT` (`-` for what is unknown).
    pub fn encode(&self) -> String {
        let op = |op: &Option<String>| op.clone().unwrap_or_else(|| "-".into());
        let time = |t: &Option<u64>| t.map_or_else(|| "-".into(), |t| t.to_string());
        match self {
            StepRecord::Intent {
                attempt,
                op: o,
                at_ms,
                lease_until_ms,
                ..
            } => format!(
                "i {attempt} {} {} {}",
                time(at_ms),
                time(lease_until_ms),
                op(o)
            ),
            StepRecord::Done { result, op: o } => format!("d {} {result}", op(o)),
            StepRecord::Began {
                at_ms,
                lease_until_ms,
                ..
            } => format!("b {at_ms} {lease_until_ms}"),
        }
    }

    /// Reads [`StepRecord::encode`]'s form. Anything else is `None` (the caller reads it as an
    /// intent of an unknown attempt: the safe reading, someone looks before writing again).
    pub fn decode(text: &str) -> Option<Self> {
        let known = |t: &str| (t != "-").then(|| t.to_string());
        let (kind, rest) = text.split_once(' ')?;
        match kind {
            "i" => {
                let mut parts = rest.splitn(4, ' ');
                let attempt = parts.next()?.parse().ok()?;
                let at_ms = known(parts.next()?).and_then(|t| t.parse().ok());
                let lease_until_ms = known(parts.next()?).and_then(|t| t.parse().ok());
                let op = known(parts.next()?);
                Some(StepRecord::Intent {
                    attempt,
                    op,
                    at_ms,
                    lease_until_ms,
                    looked: None,
                })
            }
            "d" => {
                let (op, result) = rest.split_once(' ')?;
                Some(StepRecord::Done {
                    result: result.to_string(),
                    op: known(op),
                })
            }
            "b" => {
                let window = BeganWindow::decode(rest)?;
                Some(StepRecord::Began {
                    at_ms: window.at_ms,
                    lease_until_ms: window.lease_until_ms,
                    announces: false,
                    looked: None,
                })
            }
            _ => None,
        }
    }

    /// The step's identity, if recorded.
    pub fn op(&self) -> Option<&str> {
        match self {
            StepRecord::Intent { op, .. } | StepRecord::Done { op, .. } => op.as_deref(),
            StepRecord::Began { .. } => None,
        }
    }
}

/// A step's identity: its Web API `method` and a short hash of the conversation and message it
/// writes to (`channel`, and the thread or message `target`), so a replay that writes somewhere
/// else is told apart from the first run: `chat.postMessage#1a2b3c4d`.
pub fn step_op(method: &str, channel: &str, target: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(method)
        .chain_update([0])
        .chain_update(channel)
        .chain_update([0])
        .chain_update(target)
        .finalize();
    format!("{method}#{}", hex::encode(&digest[..4]))
}

/// Whether `recorded` (a step's stored identity) is the same step as `now`. A record of a
/// version before the identity hash names its method alone: then only the method is compared.
pub fn same_step(recorded: &str, now: &str) -> bool {
    if recorded.contains('#') {
        recorded == now
    } else {
        now.split('#').next() == Some(recorded)
    }
}

/// The steps of an event, by number (1, 2, …).
pub type Journal = BTreeMap<u32, StepRecord>;

/// A step's fate learnt since the ledger was last written; the next write of the claim (the
/// next step's intent, or the finish) records it, so a step costs one write, not two.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// The call `op` took effect, with this result.
    Done {
        /// The step's number.
        step: u32,
        /// What a replay returns, as JSON text.
        result: String,
        /// The step's identity (`step_op`); `None` where it is not known.
        op: Option<String>,
    },
    /// The call certainly did not take effect: its intent is removed, so no later claim looks.
    NotDone {
        /// The step's number.
        step: u32,
    },
    /// The call was made without an intent of its own (the claim stood for it) and its fate
    /// is unknown: `intent` is recorded, so a later claim looks.
    Unknown {
        /// The step's number.
        step: u32,
        /// The record written for it: a [`StepRecord::Intent`].
        intent: StepRecord,
    },
    /// The listeners that ran under this claim (a message's, by their ids), recorded with the
    /// completion: an event of the message that others would take runs only those.
    Ran {
        /// The ids of the listeners that ran.
        listeners: Vec<String>,
    },
    /// A look-up for step `step` stopped at `looked`: the next claim goes on from there.
    Looked {
        /// The step's number.
        step: u32,
        /// How far the look-up got.
        looked: Looked,
    },
}

/// `settled` as one write records it: of several fates of one step (a view seeded unknown by
/// the ingress, then found), the last; every record of the listeners that ran. A DynamoDB
/// update cannot set one attribute twice.
pub fn last_per_step(settled: &[Settled]) -> Vec<&Settled> {
    let step_of = |fate: &Settled| match fate {
        Settled::Done { step, .. }
        | Settled::NotDone { step }
        | Settled::Unknown { step, .. }
        | Settled::Looked { step, .. } => Some(*step),
        Settled::Ran { .. } => None,
    };
    settled
        .iter()
        .enumerate()
        .filter(|(i, fate)| {
            step_of(fate).is_none_or(|step| {
                !settled[i + 1..]
                    .iter()
                    .any(|later| step_of(later) == Some(step))
            })
        })
        .map(|(_, fate)| fate)
        .collect()
}

/// The attempt of a doubt kept from began windows ([`keep_doubt`]) that all announce their own
/// steps ([`BeganWindow::announces`]). A kept doubt has no `op`; one of attempt 0 (what every
/// version before wrote) may stand for any step. Versions before read the attempt only for
/// their logs.
pub const KEPT_BY_ANNOUNCING: u32 = u32::MAX;

/// Whether `record` is a doubt kept from began windows, and then whether they announced their
/// own steps: it stands for a step the way a [`StepRecord::Began`] does.
pub fn kept_doubt(record: &StepRecord) -> Option<bool> {
    match record {
        // A kept doubt always spans its windows; a record read as an unknown intent (one that
        // did not parse) carries no times, and is an intent like any other.
        StepRecord::Intent {
            attempt,
            op: None,
            at_ms: Some(_),
            lease_until_ms: Some(_),
            ..
        } if *attempt == 0 || *attempt == KEPT_BY_ANNOUNCING => {
            Some(*attempt == KEPT_BY_ANNOUNCING)
        }
        _ => None,
    }
}

/// What a claim that ends without reaching the step its earlier claims' began windows stand
/// for must record so that their doubt is not lost: an intent spanning their window, which
/// says whether they announced their own steps.
pub fn keep_doubt(journal: &Journal) -> Option<Settled> {
    let step = first_absent_step(journal);
    match journal.get(&step) {
        Some(StepRecord::Began {
            at_ms,
            lease_until_ms,
            announces,
            ..
        }) => Some(Settled::Unknown {
            step,
            intent: StepRecord::Intent {
                attempt: if *announces { KEPT_BY_ANNOUNCING } else { 0 },
                op: None,
                at_ms: Some(*at_ms),
                lease_until_ms: Some(*lease_until_ms),
                looked: None,
            },
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_doubt_spans_its_windows_and_an_unreadable_record_is_not_one() {
        let began = |announces| StepRecord::Began {
            at_ms: 10,
            lease_until_ms: 20,
            announces,
            looked: None,
        };
        for announces in [false, true] {
            let journal: Journal = [(1, began(announces))].into_iter().collect();
            let Some(Settled::Unknown { intent, .. }) = keep_doubt(&journal) else {
                panic!("a began window's doubt is kept");
            };
            assert_eq!(kept_doubt(&intent), Some(announces));
        }
        // What a record that does not parse is read as: an intent, never a kept doubt (which
        // could stand for an at-most-once write that was in fact announced and perhaps made).
        let unreadable = StepRecord::Intent {
            attempt: 0,
            op: None,
            at_ms: None,
            lease_until_ms: None,
            looked: None,
        };
        assert_eq!(kept_doubt(&unreadable), None);
    }

    #[test]
    fn a_step_record_is_one_short_string_and_reads_back() {
        let intent = StepRecord::Intent {
            attempt: 2,
            op: Some(step_op("chat.postMessage", "C1", "1.5")),
            at_ms: Some(1_700_000_000_123),
            lease_until_ms: Some(1_700_000_010_000),
            looked: None,
        };
        let text = intent.encode();
        assert!(
            text.starts_with("i 2 1700000000123 1700000010000 chat.postMessage#"),
            "{text}"
        );
        assert_eq!(StepRecord::decode(&text), Some(intent));
        let done = StepRecord::Done {
            result: r#"{"channel":"C1","ts":"1.6 x"}"#.into(),
            op: Some("chat.update#01020304".into()),
        };
        assert_eq!(StepRecord::decode(&done.encode()), Some(done));
        let unknown = StepRecord::Intent {
            attempt: 1,
            op: None,
            at_ms: None,
            lease_until_ms: None,
            looked: None,
        };
        assert_eq!(unknown.encode(), "i 1 - - -");
        assert_eq!(StepRecord::decode("i 1 - - -"), Some(unknown));
        for bad in ["", "x", "i", "i two - - -", "d", "q 1 2 3 4"] {
            assert_eq!(StepRecord::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_step_is_the_same_only_with_the_same_method_channel_and_thread() {
        let op = step_op("chat.postMessage", "C1", "1.5");
        assert_eq!(op, step_op("chat.postMessage", "C1", "1.5"));
        assert!(same_step(&op, &step_op("chat.postMessage", "C1", "1.5")));
        assert!(!same_step(&op, &step_op("chat.postMessage", "C2", "1.5")));
        assert!(!same_step(&op, &step_op("chat.postMessage", "C1", "1.6")));
        assert!(!same_step(&op, &step_op("chat.update", "C1", "1.5")));
        // A record of a version before the hash: the method alone.
        assert!(same_step("chat.postMessage", &op));
        assert!(!same_step("chat.update", &op));
    }

    #[test]
    fn every_record_reads_back_as_it_was_written() {
        // What the stored form keeps of each state: a look-up's progress is stored apart
        // (`Looked`), and a began window's `announces` beside the windows.
        let looked = Looked {
            oldest: "1.1".into(),
            latest: "2.2".into(),
            to: ">1.5".into(),
        };
        let records = [
            StepRecord::Intent {
                attempt: 3,
                op: Some(step_op("views.open", "", "")),
                at_ms: Some(5),
                lease_until_ms: Some(9),
                looked: None,
            },
            StepRecord::Intent {
                attempt: KEPT_BY_ANNOUNCING,
                op: None,
                at_ms: Some(5),
                lease_until_ms: Some(9),
                looked: None,
            },
            StepRecord::Done {
                result: "{}".into(),
                op: Some(step_op("reactions.add", "C1", "1.5")),
            },
            StepRecord::Done {
                result: r#"{"ts":"1.6"}"#.into(),
                op: None,
            },
            StepRecord::Began {
                at_ms: 5,
                lease_until_ms: 9,
                announces: false,
                looked: None,
            },
        ];
        for record in records {
            assert_eq!(StepRecord::decode(&record.encode()), Some(record.clone()));
            let with_progress = match record.clone() {
                StepRecord::Intent {
                    attempt,
                    op,
                    at_ms,
                    lease_until_ms,
                    ..
                } => StepRecord::Intent {
                    attempt,
                    op,
                    at_ms,
                    lease_until_ms,
                    looked: Some(looked.clone()),
                },
                other => other,
            };
            assert_eq!(
                with_progress.encode(),
                record.encode(),
                "progress is stored apart"
            );
        }
        assert_eq!(Looked::decode(&looked.encode()), Some(looked));
        assert_eq!(Looked::decode("1.1 2.2"), None);
        let window = BeganWindow {
            at_ms: 5,
            lease_until_ms: 9,
            announces: false,
        };
        assert_eq!(BeganWindow::decode(&window.encode()), Some(window));
        assert_eq!(BeganWindow::decode("5"), None);
    }
}
