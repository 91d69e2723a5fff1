//! The wall clock: the system's, or a simulation's.
//!
//! Everything that reads the time of day (a request's arrival, a message's `ts`, a metrics
//! line's timestamp) reads it here. In production this is `SystemTime::now()`. The crash explorer
//! (the `explore` feature) runs each schedule on a runtime of its own whose timers are paused
//! (tokio's virtual time), and sets the wall clock of that thread to follow them: a lease
//! of 10 s, Slack's retry after 5 minutes and a `response_url`'s 30 minutes all pass at once and
//! in the same order every run.

use std::cell::Cell;
use std::time::SystemTime;

use tokio::time::Instant;

thread_local! {
    /// The simulated wall time at the runtime's `Instant` `start`, if this thread simulates.
    static VIRTUAL: Cell<Option<(SystemTime, Instant)>> = const { Cell::new(None) };
}

/// The wall-clock time now.
pub fn now() -> SystemTime {
    match VIRTUAL.with(Cell::get) {
        Some((base, start)) => base + Instant::now().saturating_duration_since(start),
        None => SystemTime::now(),
    }
}

/// A Slack `ts` (`"1700000000.123456"`) as epoch milliseconds.
pub(crate) fn ts_ms(ts: &str) -> Option<u64> {
    let (secs, frac) = ts.split_once('.').unwrap_or((ts, "0"));
    let ms = format!("{frac:0<3}");
    Some(secs.parse::<u64>().ok()? * 1000 + ms.get(..3)?.parse::<u64>().ok()?)
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> u64 {
    now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// While the guard lives, this thread's wall clock is `base` plus the time tokio's clock has
/// moved since now (call it inside the runtime whose clock is to be followed).
#[cfg_attr(not(feature = "explore"), allow(dead_code))]
pub(crate) fn simulate(base: SystemTime) -> Simulated {
    let previous = VIRTUAL.with(|v| v.replace(Some((base, Instant::now()))));
    Simulated { previous }
}

/// Restores the clock it replaced when dropped.
#[cfg_attr(not(feature = "explore"), allow(dead_code))]
pub(crate) struct Simulated {
    previous: Option<(SystemTime, Instant)>,
}

impl Drop for Simulated {
    fn drop(&mut self) {
        VIRTUAL.with(|v| v.set(self.previous));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_simulated_clock_follows_tokios_paused_time() {
        let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        let guard = simulate(base);
        assert_eq!(now(), base);
        tokio::time::sleep(Duration::from_secs(300)).await;
        assert_eq!(now(), base + Duration::from_secs(300));
        drop(guard);
        assert!(
            now() > base + Duration::from_secs(86_400 * 300),
            "the system's again"
        );
    }
}
