//! The runtime's seams for a simulator: the fault points where the crash explorer watches the
//! protocol (a listener's acknowledgement, a remembered result computed, a state conflict left
//! unanswered) and the side door's base URL a bot's own Slack client takes during an
//! exploration. As FoundationDB's `BUGGIFY`, they belong to the runtime and do nothing until a
//! simulator installs its [`Hooks`] for the process (the explorer does, when an exploration
//! starts); uninstalled, each costs one `OnceLock` read. The runtime never names the simulator.

use std::sync::OnceLock;

/// What a simulator watches and answers at the runtime's fault points. Each method is called
/// only once hooks are installed, and each does nothing by default.
pub(crate) trait Hooks: Send + Sync {
    /// The listener of the claim `key` chose its acknowledgement (`body`: `None` for an empty
    /// one).
    fn acknowledging(&self, _key: &str, _body: Option<String>) {}

    /// The listener is computing a remembered result (step `step` of the claim `key`).
    fn computing(&self, _key: &str, _step: u32, _name: &str) {}

    /// The listeners of the claim `key` ended, their work done, with the conflict of a `put`
    /// of the state value `name` unanswered.
    fn state_conflict_ignored(&self, _key: &str, _name: &str) {}

    /// The Web API base a bot's own client calls in place of Slack's (the side door), if this
    /// thread is a simulation's; `None`: no simulation is running.
    fn side_door_url(&self) -> Option<String> {
        None
    }
}

static INSTALLED: OnceLock<&'static dyn Hooks> = OnceLock::new();

/// Installs `hooks` for the rest of the process; the first installed stays.
#[cfg_attr(not(feature = "explore"), allow(dead_code))]
pub(crate) fn install(hooks: &'static dyn Hooks) {
    let _ = INSTALLED.set(hooks);
}

/// The installed hooks, if a simulator installed any.
#[inline]
pub(crate) fn installed() -> Option<&'static dyn Hooks> {
    INSTALLED.get().copied()
}
