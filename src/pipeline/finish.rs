//! The claim's end: done after the work, `failed` after an error no retry can fix, released
//! after any other failure (or when the work is handed on), each with the steps' fates.

use super::claim::{Times, before};
use super::{Outcome, ProcessError, Processor, error_chain, metrics};
use crate::app::Tally;
use crate::journal::record::Settled;
use crate::ledger::{Finish, Held, LedgerError};

impl Processor {
    /// Ends the claim: done after the work, `failed` after an error no retry can fix, released
    /// after any other failure (`failed`, retryable, when no delivery follows). The finishing
    /// write carries the last step's result and must end before the lease (on Lambda: early
    /// enough to return the answer).
    /// Ends the claim: done after the work, `failed` after an error no retry can fix, released
    /// after any other failure (`failed`, retryable, when no delivery follows). The finishing
    /// write carries the last step's result and must end before the lease (on Lambda: early
    /// enough to return the answer).
    pub(super) async fn finish(
        &self,
        held: Held<'_>,
        attempt: u32,
        last_chance: bool,
        times: &Times,
        ended: WorkEnded,
    ) -> Result<Outcome, ProcessError> {
        let WorkEnded {
            worked,
            settled,
            tally,
            handoff,
        } = ended;
        let now_ms = times.now_ms();
        let (to, result) = match worked {
            Ok(()) => worked_to(tally, handoff, attempt),
            Err(error) if error.is_final() => failed_for_good(error),
            Err(error) => failed_for_now(error, last_chance),
        };
        let write = self.ledger.finish(held, &to, &settled, now_ms);
        let written = before(times.finish_deadline, write).await;
        finish_written(written, to, result)
    }
}

/// What a claim's work came to, as its finish records it.
pub(super) struct WorkEnded {
    /// The listeners' result.
    pub worked: Result<(), ProcessError>,
    /// The steps' fates not written yet: the finish records them.
    pub settled: Vec<Settled>,
    pub tally: Tally,
    /// Handed on (to a worker, or to a corrected submission): released, not done.
    pub handoff: bool,
}

/// How work that ran to its end finishes: done (or released, handed on), unless a write's fate
/// cannot be known.
fn worked_to(tally: Tally, handoff: bool, attempt: u32) -> (Finish, Result<Outcome, ProcessError>) {
    if tally.unconfirmed > 0 && !handoff {
        // A write whose fate cannot be known: not made twice, and not said answered.
        let code = "unconfirmed_write".to_string();
        metrics::count("UnconfirmedWrites");
        tracing::error!(
            unconfirmed = tally.unconfirmed,
            failure = code.as_str(),
            "an earlier claim may have made a write that can be neither looked for nor made \
             again: it was not made twice, and the request ends failed (it may or may not show \
             in Slack)"
        );
        return (
            Finish::Failed {
                error: code.clone(),
                retryable: false,
            },
            Ok(Outcome::Failed { code }),
        );
    }
    (
        // Handed on (to a worker, or to a corrected submission): released, with what its
        // steps did recorded, so the next claim goes on from there.
        if handoff {
            Finish::Released
        } else {
            Finish::Done
        },
        Ok(if tally.made > 0 {
            Outcome::Answered { attempt }
        } else if tally.settled > 0 {
            Outcome::Recovered
        } else {
            Outcome::NoReply
        }),
    )
}

/// How work that failed with an error no retry can fix finishes: failed for good.
fn failed_for_good(error: ProcessError) -> (Finish, Result<Outcome, ProcessError>) {
    let code = error.failure_code();
    match &error {
        ProcessError::Slack(_) => {
            metrics::count("SlackErrorsPermanent");
            tracing::error!(
                slack_error = code.as_str(),
                "Slack refused a write with an error no retry can fix: the event \
                 ends failed, and no copy of it is answered"
            );
        }
        _ => tracing::error!(
            error = %error_chain(&error),
            failure = code.as_str(),
            "the event ends failed: no retry can change this (see the error)"
        ),
    }
    (
        Finish::Failed {
            error: code.clone(),
            retryable: false,
        },
        Ok(Outcome::Failed { code }),
    )
}

/// How work that failed with an error a retry may fix finishes: released for the next
/// delivery, or, with none to follow, failed (retryable).
fn failed_for_now(
    error: ProcessError,
    last_chance: bool,
) -> (Finish, Result<Outcome, ProcessError>) {
    let ambiguous = match &error {
        ProcessError::Slack(slack) => slack.may_have_posted(),
        ProcessError::Deadline => true,
        _ => false,
    };
    if ambiguous {
        tracing::warn!(
            "it is unknown whether the last write reached Slack; releasing: the next \
             delivery takes over and looks in Slack before writing again"
        );
    }
    // No delivery follows: the event ends failed, and says why. Not for good: a
    // copy redriven from a dead-letter queue may claim it again.
    let to = if last_chance {
        tracing::error!(
            error = %error_chain(&error),
            failure = error.failure_code(),
            "the last delivery of this event failed: it ends failed, unanswered"
        );
        Finish::Failed {
            error: error.failure_code(),
            retryable: true,
        }
    } else {
        Finish::Released
    };
    (to, Err(error))
}

/// The outcome once the finishing write is sent: what it could not write decides only where a
/// retry must run the work again.
fn finish_written(
    written: Result<(), String>,
    to: Finish,
    result: Result<Outcome, ProcessError>,
) -> Result<Outcome, ProcessError> {
    match (written, to, result) {
        (Ok(()), _, result) => result,
        (Err(e), Finish::Done, result) => {
            // The writes are out: answer 2xx all the same so Slack stops redelivering.
            tracing::error!(
                error = e,
                "the event's writes are out but it could not be marked done; a copy arriving \
                 after the lease takes over and looks in Slack first"
            );
            result
        }
        (
            Err(e),
            Finish::Failed {
                retryable: false, ..
            },
            _,
        ) => {
            tracing::warn!(
                error = e,
                "could not mark the event failed: the next copy runs it again"
            );
            Err(ProcessError::Ledger(LedgerError::Unavailable(e.into())))
        }
        (Err(e), _, result) => {
            tracing::warn!(
                error = e,
                "could not release the claim: the next copy waits for the lease to end"
            );
            result
        }
    }
}
