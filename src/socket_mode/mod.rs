//! Socket Mode's ingress (`SLACK_APP_TOKEN`): requests over WebSockets this process opens, for
//! a bot with no public URL. A thin transport over the pipeline the HTTP ingress uses: each
//! envelope is the HTTP request Slack would have sent (`envelope.rs`), run through the same
//! claim, and acknowledged exactly where HTTP would answer 2xx, with the answer as the
//! acknowledgement's payload where the envelope accepts one. So an event whose claim could not
//! be written is not acknowledged and Slack redelivers it, and requests are identified as over
//! HTTP (the message, the event's id, a command's or a click's own), never by `envelope_id`.
//!
//! The process holds [`SocketModeConfig::connections`] connections (`link.rs`), each in a slot
//! that keeps one open: a connection Slack recycles (`refresh_requested`, `warning`) is
//! replaced before it is closed, so the slot never goes without one; one that falls silent
//! (a half-open TCP connection) is replaced within [`link::SILENCE_LIMIT`];
//! `too_many_websockets` and failures to open back off; `link_disabled` waits and tries again.

mod dispatch;
pub mod envelope;
mod link;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::task::TaskTracker;

use crate::config::SocketModeConfig;
use crate::pipeline::Processor;
use crate::slack::SlackClient;
pub(crate) use dispatch::Dispatch;
pub use dispatch::Readiness;
use dispatch::Shared;
use envelope::Disconnect;
use link::{End, Link, LinkEvent};

use link::SILENCE_LIMIT;

/// A failure to open a connection is tried again after this long, doubled up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait between tries to open a connection.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// After `too_many_websockets` (the app holds Slack's 10 connections), the backoff is at least
/// this long: every replica's tries count against `apps.connections.open`'s rate limit.
const TOO_MANY_BACKOFF: Duration = Duration::from_secs(5);
/// After `link_disabled` (Socket Mode turned off in the app's settings), tried again this often.
const LINK_DISABLED_WAIT: Duration = Duration::from_secs(60);
/// A recycled connection's envelopes get this long to be acknowledged before it is closed.
const RECYCLED_CLOSE: Duration = Duration::from_secs(5);
/// At shutdown, the envelopes in flight get this long to be acknowledged.
pub const DRAIN: Duration = Duration::from_secs(10);

/// The Socket Mode ingress of one process.
pub struct SocketModeIngress {
    shared: Arc<Shared>,
    connections: usize,
    stop: watch::Sender<bool>,
    slots: TaskTracker,
}

impl SocketModeIngress {
    /// The ingress for `processor`, its deliveries tracked by `in_flight` (waited for at
    /// shutdown); Slack's Web API at `api_base`; the claims' lease `lease`. Nothing is opened
    /// before [`Self::start`].
    pub(crate) fn new(
        processor: Arc<Processor>,
        config: &SocketModeConfig,
        api_base: &str,
        lease: Duration,
        in_flight: TaskTracker,
    ) -> Self {
        let shared = Arc::new(Shared {
            slack: SlackClient::new(api_base, None),
            app_token: config.app_token.clone(),
            dispatch: Dispatch {
                processor,
                lease,
                keep_held: true,
            },
            in_flight,
            readiness: Readiness::default(),
            next_id: AtomicU64::new(1),
            fleet_connections: config.fleet_connections,
        });
        Self {
            shared,
            connections: config.connections,
            stop: watch::channel(false).0,
            slots: TaskTracker::new(),
        }
    }

    /// Whether it holds a connection.
    pub fn readiness(&self) -> Readiness {
        self.shared.readiness.clone()
    }

    /// Opens the connections, each slot on a task of its own.
    pub fn start(&self) {
        for slot in 0..self.connections {
            let (shared, stop) = (self.shared.clone(), self.stop.subscribe());
            self.slots.spawn(hold(shared, slot, stop));
        }
    }

    /// Stops taking envelopes: not ready from now; each connection closes once what it read
    /// is acknowledged (at most [`DRAIN`]), what Slack sends down it until then run too. An
    /// envelope Slack sends after that is not read: an event comes again, to another
    /// process's connection.
    pub async fn drain(&self) {
        self.shared.readiness.draining.store(true, Ordering::SeqCst);
        let _ = self.stop.send(true);
        self.slots.close();
        if tokio::time::timeout(DRAIN + Duration::from_secs(1), self.slots.wait())
            .await
            .is_err()
        {
            tracing::warn!("Socket Mode connections still open after the drain");
        }
    }
}

/// Keeps one connection open until `stop`: replaced before it is closed when Slack recycles
/// it, opened again when it ends.
async fn hold(shared: Arc<Shared>, slot: usize, mut stop: watch::Receiver<bool>) {
    let mut backoff = FIRST_BACKOFF;
    let mut held: Option<Link> = None;
    while !*stop.borrow() {
        let mut link = match held.take() {
            Some(link) => link,
            None => match open(&shared, slot, &mut stop, &mut backoff).await {
                Some(link) => link,
                None => break,
            },
        };
        let event = tokio::select! {
            event = link.next() => event,
            _ = stop.changed() => {
                link.close(DRAIN).await;
                break;
            }
        };
        match event {
            LinkEvent::Recycled => {
                // Its replacement first: the slot is never without a connection.
                match open(&shared, slot, &mut stop, &mut backoff).await {
                    Some(next) => {
                        tokio::spawn(link.close(RECYCLED_CLOSE));
                        held = Some(next);
                    }
                    None => {
                        link.close(DRAIN).await;
                        break;
                    }
                }
            }
            LinkEvent::Ended(End::TooMany) => {
                tracing::warn!(
                    slot,
                    "too_many_websockets: the app holds Slack's 10 connections (every \
                     process's together, ghosts included); trying again later"
                );
                backoff = backoff.max(TOO_MANY_BACKOFF);
                pause(&mut stop, jittered(backoff)).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            LinkEvent::Ended(End::LinkDisabled) => {
                tracing::error!(
                    slot,
                    "link_disabled: Socket Mode is off in the app's settings; trying again \
                     every minute"
                );
                pause(&mut stop, LINK_DISABLED_WAIT).await;
            }
            LinkEvent::Ended(End::Silent) => tracing::warn!(
                slot,
                connection = link.id,
                "nothing read for {SILENCE_LIMIT:?} (no ping, no pong): the connection is taken \
                 for dead and replaced"
            ),
            LinkEvent::Ended(End::Closed) => {}
        }
    }
}

/// Opens a connection, trying again with a growing backoff until one opens or `stop`.
async fn open(
    shared: &Arc<Shared>,
    slot: usize,
    stop: &mut watch::Receiver<bool>,
    backoff: &mut Duration,
) -> Option<Link> {
    loop {
        if *stop.borrow() {
            return None;
        }
        let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
        match link::open(shared, id).await {
            Ok(link) => {
                *backoff = FIRST_BACKOFF;
                return Some(link);
            }
            Err(error) => {
                if matches!(error, link::OpenError::Refused(Disconnect::TooMany)) {
                    // Refused before its `hello`: the same limit as after one.
                    *backoff = (*backoff).max(TOO_MANY_BACKOFF);
                }
                tracing::warn!(
                    slot,
                    error = %crate::errors::error_chain(&error),
                    retry_in = ?*backoff,
                    "a Socket Mode connection did not open"
                );
                pause(stop, jittered(*backoff)).await;
                *backoff = (*backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Waits `wait`, or until `stop`.
async fn pause(stop: &mut watch::Receiver<bool>, wait: Duration) {
    tokio::select! {
        _ = tokio::time::sleep(wait) => {}
        _ = stop.changed() => {}
    }
}

/// `wait`, give or take a quarter at random: processes that lost their connections together
/// do not all try again at once.
fn jittered(wait: Duration) -> Duration {
    let random = uuid::Uuid::new_v4().as_u128() as u64 % 1000;
    let quarter = wait / 4;
    wait - quarter + quarter * 2 * random as u32 / 1000
}
