//! What the connections of one process share: the Slack client and app-level token they open
//! with, readiness, and the dispatch that runs each envelope through the pipeline and says
//! what acknowledges it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::envelope::{Envelope, Kind};
use crate::config::Secret;
use crate::metrics::Metrics;
use crate::pipeline::{Delivery, Processor, Transport};
use crate::slack::SlackClient;

/// Whether the process holds a Socket Mode connection (`GET /readyz`).
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    pub(super) open: Arc<AtomicUsize>,
    pub(super) draining: Arc<std::sync::atomic::AtomicBool>,
}

impl Readiness {
    /// Ready: at least one connection is open, and the process is not draining.
    pub fn ready(&self) -> bool {
        self.open.load(Ordering::SeqCst) > 0 && !self.draining.load(Ordering::SeqCst)
    }
}

/// What the slots and their connections share.
pub(crate) struct Shared {
    pub(super) slack: SlackClient,
    pub(super) app_token: Secret,
    pub(super) dispatch: Dispatch,
    pub(super) in_flight: TaskTracker,
    pub(super) readiness: Readiness,
    pub(super) next_id: AtomicU64,
    /// `SLACK_SOCKET_FLEET_CONNECTIONS`: what every process holds together, at most.
    pub(super) fleet_connections: Option<usize>,
}

impl Shared {
    /// A connection's `hello`: counted open; Slack's count of the app's connections logged
    /// and kept as a metric beside this process's (more at Slack than all processes hold
    /// together: ghost registrations, where envelopes are lost).
    pub(super) fn hello(&self, id: u64, num_connections: Option<u64>) {
        let held = self.readiness.open.fetch_add(1, Ordering::SeqCst) + 1;
        let metrics = Metrics::new();
        metrics.count("SocketConnectionsOpened");
        if let Some(n) = num_connections {
            metrics.time_ms("SocketConnectionsAtSlack", n as f64);
        }
        metrics.time_ms("SocketConnectionsHeld", held as f64);
        let ghosts = match (num_connections, self.fleet_connections) {
            (Some(at_slack), Some(fleet)) => at_slack.saturating_sub(fleet as u64),
            _ => 0,
        };
        if ghosts > 0 {
            metrics.time_ms("SocketGhostConnections", ghosts as f64);
            tracing::warn!(
                at_slack = num_connections,
                fleet = self.fleet_connections,
                "Slack counts more connections than the app's processes hold together \
                 (SLACK_SOCKET_FLEET_CONNECTIONS): ghost registrations, which swallow what \
                 Slack sends them until Slack drops them"
            );
        }
        self.dispatch.processor.emit_metrics(&metrics, &[]);
        tracing::info!(
            connection = id,
            held_by_this_process = held,
            at_slack = num_connections,
            "Socket Mode connection open"
        );
    }

    pub(super) fn closed(&self, id: u64) {
        let left = self.readiness.open.fetch_sub(1, Ordering::SeqCst) - 1;
        tracing::info!(
            connection = id,
            held_by_this_process = left,
            "Socket Mode connection closed"
        );
    }
}

/// Runs each envelope through the pipeline (the crash explorer runs its deliveries through it
/// too, under `Explorer::socket_mode`).
pub(crate) struct Dispatch {
    pub(crate) processor: Arc<Processor>,
    /// The claims' lease: how long an event found held elsewhere is kept in hand.
    pub(crate) lease: Duration,
    /// Whether an event found held elsewhere is kept in hand (always, but in the explorer's
    /// planted defect that checks the checker finds the event lost without it).
    pub(crate) keep_held: bool,
}

/// An event found held by another delivery is run again this often while it is kept in hand,
/// for its first [`HELD_FAST_TRIES`] tries (a claimant answering), then every
/// [`HELD_SLOW_RETRY`] (a claimant that died, its lease running out).
const HELD_RETRY: Duration = Duration::from_millis(500);
const HELD_FAST_TRIES: u32 = 10;
const HELD_SLOW_RETRY: Duration = Duration::from_secs(2);

impl Dispatch {
    /// The acknowledgement of `envelope` once the pipeline has run it (`None`: none).
    ///
    /// An event whose claim another delivery holds live is kept in hand, run again until that
    /// claim ends (acknowledged then: answered) or lapses (taken over here, and answered), for
    /// at most the longest lease a synchronous claim may have and a margin. Slack redelivers an unacknowledged event within seconds,
    /// all of its tries perhaps inside the lease of a claimant that died: the envelope in hand
    /// is the delivery left, and the event is not lost with the claimant.
    pub(crate) async fn run(&self, envelope: &Envelope) -> Option<String> {
        let (headers, body) = envelope.as_http();
        // The claimant may be another process with a longer lease than this one's (an HTTP
        // ingress on the same table): kept for the longest lease a claim answering inside
        // Slack's request may have.
        let kept_until =
            Instant::now() + self.lease.max(crate::config::MAX_SYNC_LEASE) + Duration::from_secs(2);
        let mut tries = 0u32;
        loop {
            tries += 1;
            let metrics = Metrics::new();
            let result = metrics
                .scope(self.processor.handle(Delivery {
                    headers: &headers,
                    body: &body,
                    now: crate::clock::now(),
                    started: Instant::now(),
                    invocation_deadline: None,
                    request_id: None,
                    transport: Transport::SocketMode,
                }))
                .await;
            metrics.count("SocketEnvelopes");
            let ack = envelope.acknowledgement(&result);
            let held = matches!(result, Ok(crate::pipeline::Outcome::InProgress));
            if ack.is_none() {
                metrics.count("SocketUnacknowledged");
            }
            self.processor.emit_metrics(&metrics, &[]);
            let kept = self.keep_held && envelope.kind == Kind::EventsApi;
            if !(held && kept && Instant::now() < kept_until) {
                return ack;
            }
            let wait = match tries <= HELD_FAST_TRIES {
                true => HELD_RETRY,
                false => HELD_SLOW_RETRY,
            };
            tokio::time::sleep(wait).await;
        }
    }
}
