//! The explorer's answers at the runtime's seams ([`crate::hooks`]): what a listener
//! acknowledges, a remembered result computed again, a state conflict left unanswered, and the
//! side door's base for a bot's own Slack client. Installed as an exploration starts.

use super::world::{RUN, current};

/// The explorer's answers at the runtime's seams ([`crate::hooks`]): each watches the schedule
/// this thread runs, and does nothing on a thread no schedule runs.
struct ExplorerHooks;

impl crate::hooks::Hooks for ExplorerHooks {
    fn acknowledging(&self, key: &str, body: Option<String>) {
        acknowledging(key, body);
    }

    fn computing(&self, key: &str, step: u32, name: &str) {
        computing(key, step, name);
    }

    fn state_conflict_ignored(&self, key: &str, name: &str) {
        state_conflict_ignored(key, name);
    }

    fn side_door_url(&self) -> Option<String> {
        super::door::url()
    }
}

/// Switches the runtime's seams on for the rest of the process: called as an exploration (or
/// a simulation) starts.
pub(crate) fn install() {
    static HOOKS: ExplorerHooks = ExplorerHooks;
    crate::hooks::install(&HOOKS);
}

/// The listener chose its acknowledgement (`body`: `None` for an empty one).
fn acknowledging(key: &str, body: Option<String>) {
    let Some(world) = current::get() else {
        return;
    };
    world.say(
        None,
        format!(
            "the listener acknowledges {key} with {}",
            body.as_deref().unwrap_or("an empty body")
        ),
    );
    let request = RUN
        .try_with(|run| *run)
        .ok()
        .map_or(0, |run| world.request_of(run));
    let mut s = world.lock();
    s.acks.push(body);
    s.by_request.acked_by.push(request);
}

/// The listeners of the claim `key` ended, their work done, with the conflict of a `put` of
/// the state value `name` unanswered: a lost update, whatever the schedule.
fn state_conflict_ignored(key: &str, name: &str) {
    let Some(world) = current::get() else {
        return;
    };
    let run = RUN.try_with(|run| *run).ok();
    world.say(
        run,
        format!("the listeners of {key} end with the state conflict of {name:?} unanswered"),
    );
    world.violate(format!(
        "no lost update: a put of the state value {name:?} met Conflict (another request wrote          it between this request's read and its put: nothing was written), and the listeners of          {key}{} ended without reading it again: this request's change is lost. Use          ctx.state().update(…) (or change(…)), or on Put::Conflict read again and put again",
        match run {
            Some(r) => format!(" (run {r})"),
            None => String::new(),
        }
    ));
}

/// The listener is computing a remembered result (step `step` of the claim `key`): the
/// explorer checks that its result was not recorded already.
fn computing(key: &str, step: u32, name: &str) {
    let Some(world) = current::get() else {
        return;
    };
    let recorded = crate::slack::envelope::EventId::try_from(key.to_string())
        .ok()
        .and_then(|k| world.ledger.journal(&k))
        .is_some_and(|j| {
            matches!(
                j.get(&step),
                Some(crate::journal::record::StepRecord::Done { .. })
            )
        });
    world.say(
        None,
        format!("the listener computes the result it remembers as {name:?} (step {step} of {key})"),
    );
    if recorded {
        world.violate(format!(
            "remembered once: {name:?} (step {step} of {key}) was computed again though its \
             result was recorded"
        ));
    }
}
