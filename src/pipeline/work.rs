//! The work under a claim: the listeners run with a [`Ctx`] whose Slack writes are journaled
//! steps, within the claim's deadline; a command's or interaction's listener also chooses the
//! acknowledgement, and in deferred mode's ingress stops there. Then the claim is finished.

use tokio::time::Instant;

use super::claim::Times;
use super::finish::WorkEnded;
use super::{EventDelivery, Outcome, ProcessError, Processor, metrics};
use crate::app::{
    Ack, AckMode, BotError, Ctx, Error as StepError, Identity, Run, Source, Steps, Unit,
};
use crate::journal::record::{Journal, Settled};
use crate::ledger::{Held, OwnerToken};
use crate::slack::SlackError;
use crate::slack::envelope::EventId;

/// One claimed group of listeners, ready to run.
pub(super) struct Work<'a> {
    pub source: Source,
    pub ack_mode: AckMode,
    pub delivery: &'a EventDelivery<'a>,
    pub times: &'a Times,
    pub key: &'a EventId,
    pub owner: OwnerToken,
    pub attempt: u32,
    pub journal: Journal,
    pub unit: Unit,
    /// Steps made before the claim (deferred mode's ingress, before the acknowledgement).
    pub seed: Vec<Settled>,
    /// The request's workspace's client.
    pub slack: crate::slack::SlackClient,
}

/// What the work came to: the result (after the finish), the acknowledgement the listener
/// chose, and whether it stopped there to go on from the queue (deferred mode's ingress).
pub(super) struct Worked {
    pub result: Result<Outcome, ProcessError>,
    pub ack: Option<Ack>,
    pub handed_off: bool,
}

impl Processor {
    /// Runs the listeners of `work.unit` in order, then finishes the claim: done, failed or
    /// released (a deferred ingress's hand-off, and a view submission refused with errors,
    /// release it with their steps recorded, so the next claim goes on from there).
    pub(super) async fn work(&self, work: Work<'_>) -> Worked {
        let Work {
            source,
            ack_mode,
            delivery,
            times,
            key,
            owner,
            attempt,
            journal,
            unit,
            seed,
            slack,
        } = work;
        let ids: Vec<String> = unit.runs.iter().map(|r| r.id.clone()).collect();
        let mut steps = Steps::new(
            self.ledger.clone(),
            key.clone(),
            owner.clone(),
            (attempt, journal),
            delivery.last_chance,
            (times.now_ms, times.started, times.lease_until_ms),
        );
        steps.seed(seed);
        let ctx = Ctx::new(
            source,
            ack_mode,
            slack,
            times.work_deadline,
            self.version.clone(),
            steps,
            (self.app.functions(), self.app.hears_stops()),
        );
        let (worked, handed_off) =
            run_listeners(&ctx, unit.runs, ack_mode, times.work_deadline).await;
        if worked.is_ok() && !handed_off {
            warn_lost_updates(&ctx, key);
        }
        let worked = judged(&ctx, worked).await;
        let (mut settled, tally) = ctx.close().await;
        if unit.identity == Identity::Message && worked.is_ok() {
            // Which listeners answered the message: another of its events runs only others.
            settled.push(Settled::Ran { listeners: ids });
        }
        let ack = ctx.chosen_ack();
        // Errors shown to the person (the modal stays open): released, so corrected values
        // are a new submission. Errors that came too late were shown nothing.
        let refused = ack.as_ref().is_some_and(Ack::is_errors) && ctx.lost_ack().is_none();
        if refused && worked.is_ok() {
            tracing::info!("the view's submission was refused with errors: released");
        }
        let held = Held {
            event_id: key,
            owner: &owner,
        };
        let result = self
            .finish(
                held,
                attempt,
                delivery.last_chance,
                times,
                WorkEnded {
                    worked,
                    settled,
                    tally,
                    handoff: handed_off || refused,
                },
            )
            .await;
        Worked {
            result,
            ack,
            handed_off,
        }
    }
}

/// Runs the listeners in order, within the claim's deadline: what they came to, and whether
/// they stopped at the acknowledgement to go on from the queue (deferred mode's ingress).
async fn run_listeners(
    ctx: &Ctx,
    runs: Vec<Run>,
    ack_mode: AckMode,
    deadline: Instant,
) -> (Result<(), ProcessError>, bool) {
    let listeners = async {
        for run in runs {
            ctx.set_listener(&run.id);
            if let Err(error) = (run.work)(ctx.clone()).await {
                return Err(listener_failed(&run.name, error));
            }
        }
        Ok(())
    };
    let until_ack = async {
        if ack_mode != AckMode::StopAfter {
            return (listeners.await, false);
        }
        tokio::select! {
            worked = listeners => (worked, false),
            () = ctx.acknowledged() => (Ok(()), true),
        }
    };
    let working = Instant::now();
    let (worked, handed_off) = match tokio::time::timeout_at(deadline, until_ack).await {
        Ok(ran) => ran,
        Err(_) => (Err(ProcessError::Deadline), false),
    };
    metrics::time_ms("HandlerLatency", working.elapsed().as_secs_f64() * 1e3);
    (worked, handed_off)
}

/// Says each state change the listeners lost: a put that met a conflict and was never read
/// again.
fn warn_lost_updates(ctx: &Ctx, key: &EventId) {
    for name in ctx.unanswered_state_conflicts() {
        // A lost update: another request wrote the value between this one's read and
        // its `put`, and the listeners ended without reading it again.
        tracing::warn!(
            state = %name,
            "a state put met a conflict and the listener ended without reading the \
             value again: this request's change is lost (use State::update or \
             State::change, or read again and put again on Put::Conflict)"
        );
        if let Some(hooks) = crate::hooks::installed() {
            hooks.state_conflict_ignored(key.as_str(), &name);
        }
    }
}

/// What the listeners' result means to the claim, with what they left behind.
async fn judged(ctx: &Ctx, worked: Result<(), ProcessError>) -> Result<(), ProcessError> {
    // An acknowledgement chosen too late to reach Slack: the request says so. A step held
    // back (the listener carried on past the error): released, never done.
    let held = ctx.held_back().await;
    match (worked, ctx.lost_ack()) {
        (Ok(()), _) if held => Err(ProcessError::LookupUnavailable(
            crate::slack::SlackError::InvalidResponse(
                "a step was held back, or a write failed in a way a retry could fix (or \
                 its fate is unknown), and the listener went on"
                    .into(),
            ),
        )),
        (Ok(()), Some(_)) => Err(ProcessError::AckTooLate),
        (worked, _) => worked,
    }
}

/// What a failed listener means to the protocol: a failed step's error as the step's failure,
/// anything else as the bot's.
pub(super) fn listener_failed(name: &str, error: BotError) -> ProcessError {
    match error.downcast::<StepError>() {
        Ok(step) => match *step {
            StepError::Slack(SlackError::Timeout) => ProcessError::Deadline,
            StepError::Slack(e) => ProcessError::Slack(e),
            StepError::LookupUnavailable(e) => ProcessError::LookupUnavailable(e),
            StepError::Ledger(e) => ProcessError::Ledger(e),
            StepError::Closed => ProcessError::Deadline,
            e @ StepError::Nondeterministic { .. } => ProcessError::Nondeterministic(Box::new(e)),
            e @ StepError::JournalFull { .. } => ProcessError::JournalFull(Box::new(e)),
            e @ StepError::InsideRemember { .. } => ProcessError::Nondeterministic(Box::new(e)),
            // Claimed work never meets it (only an unclaimed options request does): a bug.
            e @ StepError::Unclaimed { .. } => ProcessError::Bot(Box::new(e)),
            e @ (StepError::NotARead { .. }
            | StepError::NotAStep { .. }
            | StepError::InvalidOutputs { .. }
            | StepError::TaskMovedBack { .. }) => {
                tracing::warn!(listener = name, error = %e, "the listener failed");
                ProcessError::Bot(Box::new(e))
            }
        },
        Err(error) => {
            tracing::warn!(listener = name, error = %error, "the listener failed");
            ProcessError::Bot(error)
        }
    }
}
