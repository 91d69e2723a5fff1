//! One Socket Mode connection: opened with `apps.connections.open` and a WebSocket handshake,
//! each under a timeout; read until Slack recycles or closes it, or until it falls silent
//! (a half-open TCP connection: Slack's pings, and the answers to ours, stop); each envelope
//! handed to the pipeline on a task of its own, and its acknowledgement sent on this
//! connection once the pipeline's result allows one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use super::dispatch::Shared;
use super::envelope::{Disconnect, Envelope, Received};
use crate::slack::SlackError;

/// `apps.connections.open` gets this long (clients without it went deaf for hours).
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(10);
/// The WebSocket handshake, and the `hello` after it, get this long.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// This client pings every this long; Slack pings too.
pub const PING_INTERVAL: Duration = Duration::from_secs(5);
/// A connection from which nothing was read for this long (no envelope, no ping, no pong) is
/// taken for dead and replaced.
pub const SILENCE_LIMIT: Duration = Duration::from_secs(15);

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// `apps.connections.open` failed (a refused token is named as Slack names it).
    #[error("apps.connections.open failed")]
    Open(#[source] SlackError),
    /// Slack answered a URL that is not Slack's (nor, against a local stand-in, 127.0.0.1).
    #[error("apps.connections.open answered a URL that is not Slack's: not followed")]
    NotSlack,
    /// The handshake failed, or no `hello` came.
    #[error("the WebSocket did not open: {0}")]
    Handshake(String),
    /// Slack refused it at once (`too_many_websockets`, `link_disabled`).
    #[error("Slack refused the connection: {0:?}")]
    Refused(Disconnect),
    /// It took longer than its timeout.
    #[error("timed out")]
    TimedOut,
}

/// What a connection tells the slot that holds it.
#[derive(Debug)]
pub enum LinkEvent {
    /// `disconnect` `refresh_requested` or `warning`: it closes soon; open its replacement.
    Recycled,
    /// It ended.
    Ended(End),
}

/// How a connection ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// Slack sent `too_many_websockets`.
    TooMany,
    /// Slack sent `link_disabled`.
    LinkDisabled,
    /// Closed (by Slack, or by this process).
    Closed,
    /// Nothing read for [`SILENCE_LIMIT`].
    Silent,
}

/// An open connection, read on a task of its own.
pub struct Link {
    /// Its number in this process (for the logs).
    pub id: u64,
    events: mpsc::Receiver<LinkEvent>,
    close: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Link {
    /// The next thing the connection tells; `Ended(Closed)` once its task is gone.
    pub async fn next(&mut self) -> LinkEvent {
        self.events
            .recv()
            .await
            .unwrap_or(LinkEvent::Ended(End::Closed))
    }

    /// Closes it once the envelopes it read have been acknowledged (or given up), waiting at
    /// most `within`: until it closes, what Slack sends down it is still run and acknowledged
    /// (a command or an interaction comes only once).
    pub async fn close(mut self, within: Duration) {
        if let Some(close) = self.close.take() {
            let _ = close.send(());
        }
        if tokio::time::timeout(within, &mut self.task).await.is_err() {
            self.task.abort();
        }
    }
}

/// Opens a connection: `apps.connections.open` with the app-level token, the handshake, the
/// `hello`; each within its timeout.
pub async fn open(shared: &Arc<Shared>, id: u64) -> Result<Link, OpenError> {
    let answer = shared.slack.call_with(
        "apps.connections.open",
        &[],
        Some(&shared.app_token),
        Instant::now() + OPEN_TIMEOUT,
    );
    let answer = tokio::time::timeout(OPEN_TIMEOUT, answer)
        .await
        .map_err(|_| OpenError::TimedOut)?
        .map_err(OpenError::Open)?;
    let url = answer["url"].as_str().unwrap_or_default();
    if !is_slacks(url, shared.slack.base_url()) {
        return Err(OpenError::NotSlack);
    }
    let (mut socket, _) =
        tokio::time::timeout(HANDSHAKE_TIMEOUT, tokio_tungstenite::connect_async(url))
            .await
            .map_err(|_| OpenError::TimedOut)?
            .map_err(|e| OpenError::Handshake(e.to_string()))?;
    let hello = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        while let Some(message) = socket.next().await {
            let message = message.map_err(|e| OpenError::Handshake(e.to_string()))?;
            let Message::Text(text) = message else {
                continue;
            };
            match Received::parse(&text) {
                Ok(Received::Hello { num_connections }) => return Ok(num_connections),
                Ok(Received::Disconnect(reason)) => return Err(OpenError::Refused(reason)),
                _ => continue,
            }
        }
        Err(OpenError::Handshake("closed before its hello".into()))
    })
    .await
    .map_err(|_| OpenError::TimedOut)??;
    shared.hello(id, hello);
    let counted = Counted {
        shared: shared.clone(),
        id,
    };
    let (events_tx, events) = mpsc::channel(4);
    let (close, closing) = oneshot::channel();
    let task = tokio::spawn(read(counted, socket, events_tx, closing));
    Ok(Link {
        id,
        events,
        close: Some(close),
        task,
    })
}

/// Whether `url` is Slack's WebSocket (`wss://…slack.com`), or, where the Web API itself is a
/// stand-in on 127.0.0.1, a WebSocket there.
fn is_slacks(url: &str, api_base: &str) -> bool {
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let name = host.split(':').next().unwrap_or_default();
    match scheme {
        "wss" => name == "slack.com" || name.ends_with(".slack.com"),
        "ws" => name == "127.0.0.1" && api_base.starts_with("http://127.0.0.1"),
        _ => false,
    }
}

/// An open connection as counted in [`super::Readiness`]: uncounted when dropped, even with
/// its task aborted (a close that gave up on an envelope in hand), so that `GET /readyz` never
/// says ready for a connection that is gone.
struct Counted {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.shared.closed(self.id);
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Reads the connection until it ends, handing each envelope to the pipeline and sending the
/// acknowledgements back; pings every [`PING_INTERVAL`]; ends when nothing was read for
/// [`SILENCE_LIMIT`], or once `closing` fires and no envelope is left unacknowledged (an
/// envelope read meanwhile is run too: Slack still sends to a connection until it closes).
async fn read(
    counted: Counted,
    socket: Socket,
    events: mpsc::Sender<LinkEvent>,
    mut closing: oneshot::Receiver<()>,
) {
    let (shared, id) = (counted.shared.clone(), counted.id);
    let (mut sink, mut stream) = socket.split();
    let (acks_tx, mut acks) = mpsc::channel::<Option<String>>(64);
    let pending = Arc::new(AtomicUsize::new(0));
    let mut last_read = Instant::now();
    let mut pings = tokio::time::interval(PING_INTERVAL);
    pings.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut close_asked = false;
    let end = loop {
        if close_asked && pending.load(Ordering::SeqCst) == 0 {
            break End::Closed;
        }
        tokio::select! {
            message = stream.next(), if !close_asked || pending.load(Ordering::SeqCst) > 0 => {
                let Some(Ok(message)) = message else { break End::Closed };
                last_read = Instant::now();
                let text = match message {
                    Message::Text(text) => text,
                    Message::Close(_) => break End::Closed,
                    _ => continue,
                };
                match Received::parse(&text) {
                    Ok(Received::Envelope(envelope)) => {
                        pending.fetch_add(1, Ordering::SeqCst);
                        dispatch(&shared, envelope, acks_tx.clone(), pending.clone());
                    }
                    Ok(Received::Unreadable { envelope_id }) => {
                        tracing::warn!(
                            connection = id,
                            %envelope_id,
                            "an envelope without an object as its payload: acknowledged, so \
                             that Slack does not send it again"
                        );
                        let ack = serde_json::json!({ "envelope_id": envelope_id });
                        if sink.send(Message::text(ack.to_string())).await.is_err() {
                            break End::Closed;
                        }
                    }
                    Ok(Received::Disconnect(Disconnect::TooMany)) => break End::TooMany,
                    Ok(Received::Disconnect(Disconnect::LinkDisabled)) => break End::LinkDisabled,
                    Ok(Received::Disconnect(reason)) => {
                        tracing::info!(connection = id, ?reason, "Slack recycles this connection");
                        let _ = events.send(LinkEvent::Recycled).await;
                    }
                    Ok(Received::Hello { .. }) => {}
                    Ok(Received::Other) => {}
                    Err(error) => tracing::warn!(connection = id, %error, "a message not read"),
                }
            }
            Some(ack) = acks.recv() => {
                pending.fetch_sub(1, Ordering::SeqCst);
                if let Some(ack) = ack
                    && sink.send(Message::text(ack)).await.is_err()
                {
                    break End::Closed;
                }
            }
            _ = pings.tick() => {
                if last_read.elapsed() >= SILENCE_LIMIT {
                    break End::Silent;
                }
                if sink.send(Message::Ping(Vec::new().into())).await.is_err() {
                    break End::Closed;
                }
            }
            _ = &mut closing, if !close_asked => close_asked = true,
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), sink.close()).await;
    drop(counted);
    let _ = events.send(LinkEvent::Ended(end)).await;
}

/// Runs `envelope` through the pipeline on a task of its own, sending its acknowledgement (or
/// `None`: none) to `acks` when the result allows one.
fn dispatch(
    shared: &Arc<Shared>,
    envelope: Envelope,
    acks: mpsc::Sender<Option<String>>,
    pending: Arc<AtomicUsize>,
) {
    let shared = shared.clone();
    shared.clone().in_flight.spawn(async move {
        let ack = shared.dispatch.run(&envelope).await;
        if acks.send(ack).await.is_err() {
            // The connection is gone: Slack redelivers an event to another.
            pending.fetch_sub(1, Ordering::SeqCst);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::is_slacks;

    #[test]
    fn only_slacks_websockets_are_followed() {
        let api = "https://slack.com/api";
        assert!(is_slacks("wss://wss-primary.slack.com/link/?ticket=1", api));
        assert!(is_slacks("wss://slack.com/link/?ticket=1", api));
        assert!(!is_slacks("wss://slack.com.evil.example/link", api));
        assert!(!is_slacks("wss://evil.example/?x=.slack.com", api));
        assert!(!is_slacks("wss://user@evil.example/.slack.com", api));
        assert!(!is_slacks("ws://wss-primary.slack.com/link", api));
        assert!(!is_slacks("ws://127.0.0.1:9/link", api));
        assert!(is_slacks(
            "ws://127.0.0.1:9/link/?ticket=1",
            "http://127.0.0.1:9/api"
        ));
        assert!(!is_slacks(
            "ws://localhost:9/link",
            "http://127.0.0.1:9/api"
        ));
    }
}
