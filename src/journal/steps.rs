//! A claim's steps as it makes them: their numbers, what the claim found in the journal and
//! has learnt since, its began window, and the ledger writes that record them.

use std::sync::Arc;

use serde_json::Value;
use tokio::time::Instant;

use super::{Error, Tally};
use crate::journal::record::{
    Journal, Settled, StepRecord, first_absent_step, keep_doubt, same_step,
};
use crate::ledger::{Held, Ledger, LedgerError, OwnerToken};
use crate::slack::envelope::EventId;

pub(crate) struct Steps {
    pub ledger: Arc<dyn Ledger>,
    pub key: EventId,
    pub owner: OwnerToken,
    pub attempt: u32,
    /// As the claim found it (with earlier claims' began windows as [`StepRecord::Began`]),
    /// kept up to date with what this claim writes.
    pub journal: Journal,
    pub next: u32,
    /// Fates learnt since the ledger was last written: the next write records them.
    pub unrecorded: Vec<Settled>,
    pub last_chance: bool,
    pub closed: bool,
    pub tally: Tally,
    pub now_ms: u64,
    pub started: Instant,
    /// The claim's lease end (epoch ms), written into each intent.
    pub lease_until_ms: u64,
    /// The step of a [`Ctx::remember`] whose computation is running: no write may be made
    /// from inside it.

    /// The step this claim's own began window stands for (the lowest absent from the journal):
    /// while the claim has written nothing since, that step needs no intent of its own.
    pub(super) covered: u32,
    /// No ledger write since the claim: its began window still stands.
    pub(super) began_stands: bool,
    /// The earlier claims' began windows at the covered step (a [`StepRecord::Began`]) were
    /// settled: looked for, made again, or skipped. Until then the claim may not end without
    /// keeping them as an intent, or a later claim would never look for what they may have
    /// posted.
    pub(super) began_settled: bool,
    /// A claim behind these steps: `false` for a request the ledger never claims (an options
    /// request) and for deferred mode's ingress before the acknowledgement.
    pub claimed: bool,
    /// No claim behind these steps (deferred mode's ingress, before the acknowledgement): only
    /// the `trigger_id`'s views may be opened (Slack itself takes a trigger once); any other
    /// write is where the listener hands off to a worker (an implicit empty acknowledgement).
    pub provisional: bool,
    /// The covered step while its call is out, made without an intent of its own: should the
    /// claim end before the call returns, its intent goes with the finish.
    pub(super) in_flight: Option<(u32, StepRecord)>,
    /// A step was held back (Slack could not be asked whether an earlier claim made it): the
    /// claim makes no further write (one would end the began windows the doubt stands on),
    /// and cannot end done, even should the listener carry on past the error.
    pub(crate) held: bool,
    /// A write failed in a way a retry could fix, or that may have taken effect, and the
    /// listener carried on: the claim cannot end done (a later delivery
    /// makes, or settles by its rule, that step).
    pub(crate) doubtful: bool,
    /// Steps under way (counted for their whole making): one still counted when the claim ends,
    /// the listener dropped it mid-way, and its fate is open.
    pub(crate) in_step: u32,
}

impl Steps {
    pub(crate) fn new(
        ledger: Arc<dyn Ledger>,
        key: EventId,
        owner: OwnerToken,
        claim: (u32, Journal),
        last_chance: bool,
        times: (u64, Instant, u64),
    ) -> Self {
        let (attempt, journal) = claim;
        let (now_ms, started, lease_until_ms) = times;
        Self {
            covered: first_absent_step(&journal),
            ledger,
            key,
            owner,
            attempt,
            journal,
            next: 1,
            unrecorded: Vec::new(),
            last_chance,
            closed: false,
            tally: Tally::default(),
            now_ms,
            started,
            lease_until_ms,
            began_stands: true,
            began_settled: false,
            claimed: true,
            provisional: false,
            in_flight: None,
            held: false,
            doubtful: false,
            in_step: 0,
        }
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.now_ms + self.started.elapsed().as_millis() as u64
    }

    /// Numbers the next step, `op`, and gives what earlier claims recorded at that number: a
    /// record of another step there is [`Error::Nondeterministic`].
    pub(crate) fn take(&mut self, op: &str) -> Result<(u32, Option<StepRecord>), Error> {
        self.dropped_in_flight();
        let step = self.next;
        self.next += 1;
        let earlier = self.journal.get(&step).cloned();
        if let Some(recorded) = earlier.as_ref().and_then(StepRecord::op)
            && !same_step(recorded, op)
        {
            return Err(Error::Nondeterministic {
                step,
                recorded: recorded.to_string(),
                now: op.to_string(),
            });
        }
        Ok((step, earlier))
    }

    /// Writes `record` as step `step`, conditioned on the owner, with the fates learnt since the
    /// last write, by `deadline`: then the ledger holds them all.
    pub(crate) async fn write(
        &mut self,
        step: u32,
        record: &StepRecord,
        deadline: Instant,
    ) -> Result<(), Error> {
        self.dropped_in_flight();
        self.keep_earlier_doubt();
        // A fate of this very step is written as the record itself, not twice in one update.
        let is_this = |fate: &Settled| matches!(fate, Settled::Done { step: s, .. } if *s == step);
        let others: Vec<Settled>;
        let settled: &[Settled] = if self.unrecorded.iter().any(is_this) {
            others = self
                .unrecorded
                .iter()
                .filter(|f| !is_this(f))
                .cloned()
                .collect();
            &others
        } else {
            &self.unrecorded
        };
        let now_ms = self.now_ms();
        let held = Held {
            event_id: &self.key,
            owner: &self.owner,
        };
        let write = self.ledger.begin_step(held, step, record, settled, now_ms);
        match tokio::time::timeout_at(deadline, write).await {
            Ok(Ok(())) => {
                self.recorded();
                Ok(())
            }
            Ok(Err(LedgerError::ItemTooLarge(_))) => Err(Error::JournalFull { step }),
            Ok(Err(e)) => Err(Error::Ledger(e)),
            Err(_) => Err(Error::Ledger(LedgerError::Unavailable(
                "the ledger did not answer before the deadline".into(),
            ))),
        }
    }

    /// Numbers the steps from the first again, for the same claim's listener run again: the
    /// steps this claim made are in the journal, and replay.
    /// The steps made since the ledger was last written are in the journal (kept, too, for
    /// the next write); the step the claim's began window stands for stays the one it was, so
    /// that every later step is announced before it is made.
    pub(crate) fn rewind(&mut self) {
        self.dropped_in_flight();
        let fates = self.unrecorded.clone();
        apply(&mut self.journal, &fates);
        self.next = 1;
    }

    /// A covered step whose call the listener dropped while it was out (a timeout or a select
    /// around it): its fate is unknown, and the next write records it so (it ends the began
    /// window that stood for it).
    fn dropped_in_flight(&mut self) {
        if let Some((step, intent)) = self.in_flight.take() {
            self.unrecorded.push(Settled::Unknown { step, intent });
        }
    }

    /// Ends the steps: later writes fail with [`Error::Closed`]. Returns the fates for the
    /// finishing write (a covered step whose call never returned among them, as an intent),
    /// and the tally.
    pub(crate) fn close(&mut self) -> (Vec<Settled>, Tally) {
        self.closed = true;
        self.dropped_in_flight();
        self.keep_earlier_doubt();
        (std::mem::take(&mut self.unrecorded), self.tally)
    }

    /// The earlier claims' began windows, should this claim not have settled the step they
    /// stand for (not reached yet, a failure before it, a look-up that could not be made or
    /// that the listener dropped): kept as a doubt by the claim's next write, which ends the
    /// windows (so a later step's window outlives a write this claim makes before it).
    fn keep_earlier_doubt(&mut self) {
        if let (false, Some(Settled::Unknown { step, mut intent })) =
            (self.began_settled, keep_doubt(&self.journal))
        {
            // Kept already, for a write that has not gone through.
            if self
                .unrecorded
                .iter()
                .any(|f| matches!(f, Settled::Unknown { step: s, .. } if *s == step))
            {
                return;
            }
            // Not reached (a failure before it, a look-up that could not be made): what the
            // earlier claims may have done there stays in doubt, as an intent of their window,
            // with how far a look-up of it got.
            let cut_short = self
                .unrecorded
                .iter()
                .position(|f| matches!(f, Settled::Looked { step: s, .. } if *s == step));
            if let Some(Settled::Looked { looked, .. }) =
                cut_short.map(|i| self.unrecorded.remove(i))
                && let StepRecord::Intent { looked: kept, .. } = &mut intent
            {
                *kept = Some(looked);
            }
            self.unrecorded.push(Settled::Unknown { step, intent });
        }
    }

    /// Steps made before this claim existed (by deferred mode's ingress, before the
    /// acknowledgement), each done: a replay returns them, and the claim's next write records
    /// them. That write is an intent of its own (the claim's began window stood for the
    /// lowest step absent from the ledger, not for the first after these).
    pub(crate) fn seed(&mut self, done: Vec<Settled>) {
        for fate in done {
            let record = match &fate {
                Settled::Done { result, op, .. } => StepRecord::Done {
                    result: result.clone(),
                    op: op.clone(),
                },
                // A view whose answer the hand-off cut off: settled by looking for it.
                Settled::Unknown { intent, .. } => intent.clone(),
                _ => continue,
            };
            let step = match &fate {
                Settled::Done { step, .. } | Settled::Unknown { step, .. } => *step,
                _ => continue,
            };
            if matches!(self.journal.get(&step), Some(StepRecord::Done { .. })) {
                continue;
            }
            self.journal.insert(step, record);
            self.unrecorded.push(fate);
            self.began_stands = false;
        }
        self.covered = first_absent_step(&self.journal);
    }

    /// The journal as the ledger holds it once `intent` (step `step`) and the unrecorded fates
    /// are written.
    pub(crate) fn after(&self, step: u32, intent: &StepRecord) -> Journal {
        let mut journal: Journal = self
            .journal
            .iter()
            .filter(|(_, r)| !matches!(r, StepRecord::Began { .. }))
            .map(|(s, r)| (*s, r.clone()))
            .collect();
        apply(&mut journal, &self.unrecorded);
        journal.insert(step, intent.clone());
        journal
    }

    /// The ledger now holds the unrecorded fates, and this claim's began window is gone.
    fn recorded(&mut self) {
        let fates = std::mem::take(&mut self.unrecorded);
        self.journal
            .retain(|_, r| !matches!(r, StepRecord::Began { .. }));
        apply(&mut self.journal, &fates);
        self.began_stands = false;
    }

    /// Step `step` (its identity `op`) was found done for an earlier claim: `answer` stands
    /// for its result and is recorded with the claim's next write.
    pub(super) fn settled_earlier(&mut self, step: u32, op: &str, answer: Value) -> Value {
        // What was learnt of it before (an unknown the ingress handed on) is replaced.
        self.unrecorded.retain(
            |f| !matches!(f, Settled::Unknown { step: s, .. } | Settled::NotDone { step: s } if *s == step),
        );
        self.unrecorded.push(Settled::Done {
            step,
            result: super::recordable(&answer),
            op: Some(op.to_string()),
        });
        self.tally.settled += 1;
        answer
    }
}

/// `fates` applied to `journal`, as a ledger write records them.
pub(super) fn apply(journal: &mut Journal, fates: &[Settled]) {
    for fate in fates {
        match fate {
            Settled::Done { step, result, op } => {
                journal.insert(
                    *step,
                    StepRecord::Done {
                        result: result.clone(),
                        op: op.clone(),
                    },
                );
            }
            Settled::NotDone { step } => {
                journal.remove(step);
            }
            Settled::Unknown { step, intent } => {
                journal.insert(*step, intent.clone());
            }
            Settled::Ran { .. } => {}
            Settled::Looked {
                step,
                looked: progress,
            } => {
                if let Some(StepRecord::Intent { looked, .. } | StepRecord::Began { looked, .. }) =
                    journal.get_mut(step)
                {
                    *looked = Some(progress.clone());
                }
            }
        }
    }
}

/// The journal's size as the DynamoDB ledger stores it.
pub(crate) fn journal_bytes(journal: &Journal) -> usize {
    journal
        .iter()
        .map(|(s, r)| s.to_string().len() + r.encode().len() + 4)
        .sum()
}

impl Steps {
    /// Writes what the steps learnt since the ledger was last written (a stream's `ts`, say)
    /// now, rather than with the next step: a takeover then knows it.
    pub(crate) async fn record_now(&mut self, deadline: Instant) -> Result<(), Error> {
        if self.provisional || self.closed {
            return Ok(());
        }
        let last_done = self.unrecorded.iter().rev().find_map(|fate| match fate {
            Settled::Done { step, result, op } => Some((
                *step,
                StepRecord::Done {
                    result: result.clone(),
                    op: op.clone(),
                },
            )),
            _ => None,
        });
        let Some((step, record)) = last_done else {
            return Ok(());
        };
        self.write(step, &record, deadline).await
    }
}
