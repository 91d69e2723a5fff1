//! The sockets: `GET /link/?ticket=…` upgraded to a WebSocket, one task per connection (its
//! `hello`, what [`Links`](super::links::Links) tells it to write, the acknowledgements it reads), and the timers of
//! recycling and of each delivery's deadline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;

use super::links::{Admitted, Outgoing};
use super::protocol::Notice;
use crate::testing::recorded::Recorded;

/// `GET /link/?ticket=…`: the WebSocket of a ticket `apps.connections.open` issued (once).
pub(crate) async fn link(
    State(state): State<Arc<Mutex<Recorded>>>,
    RawQuery(query): RawQuery,
    upgrade: WebSocketUpgrade,
) -> Response {
    let query: HashMap<String, String> =
        form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let ticket = query.get("ticket").map(String::as_str).unwrap_or_default();
    let debug_reconnects = query.get("debug_reconnects").map(String::as_str) == Some("true");
    if !state.lock().expect("lock").socket.tickets.remove(ticket) {
        return (http::StatusCode::UNAUTHORIZED, "invalid_ticket").into_response();
    }
    upgrade.on_upgrade(move |socket| serve_link(state, socket, debug_reconnects))
}

/// One connection, from its `hello` to its close: writes what it is told, reads the client's
/// acknowledgements.
async fn serve_link(state: Arc<Mutex<Recorded>>, mut socket: WebSocket, debug_reconnects: bool) {
    let (outbox, mut told) = mpsc::unbounded_channel();
    let admitted = state
        .lock()
        .expect("lock")
        .socket
        .admit(debug_reconnects, outbox);
    let (id, hello, lifetime, notice, grace, ping) = match admitted {
        Admitted::Refused(text) => {
            let _ = socket.send(Message::Text(text.into())).await;
            let _ = socket.send(close_frame()).await;
            return;
        }
        Admitted::Open {
            id,
            hello,
            lifetime,
            notice,
            grace,
            ping,
        } => (id, hello, lifetime, notice, grace, ping),
    };
    if socket.send(Message::Text(hello.into())).await.is_err() {
        state.lock().expect("lock").socket.ended(id);
        return;
    }
    tokio::spawn(recycle(state.clone(), id, lifetime, notice, grace));
    // A connection never pinged still needs an interval to build: a day's is never reached.
    let mut pings = tokio::time::interval(ping.unwrap_or(Duration::from_secs(86_400)));
    pings.tick().await;
    loop {
        tokio::select! {
            _ = pings.tick(), if ping.is_some() => {
                if socket.send(Message::Ping(b"standin"[..].into())).await.is_err() {
                    break;
                }
            }
            what = told.recv() => match what {
                Some(Outgoing::Text(text)) => {
                    if socket.send(Message::Text(text.into())).await.is_err() {
                        break;
                    }
                }
                Some(Outgoing::Close) => {
                    let _ = socket.send(close_frame()).await;
                    break;
                }
                Some(Outgoing::Ghost) | None => {
                    // Half-open: nothing read (so no pong), nothing written, the socket held
                    // until Slack forgets the registration.
                    while told.recv().await.is_some() {}
                    return;
                }
            },
            read = socket.recv() => match read {
                Some(Ok(Message::Text(text))) => {
                    state.lock().expect("lock").socket.acknowledge(id, text.as_str());
                }
                Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
        }
    }
    state.lock().expect("lock").socket.ended(id);
}

fn close_frame() -> Message {
    Message::Close(Some(CloseFrame {
        code: 1000,
        reason: "".into(),
    }))
}

/// A connection's end of life: its notice, and its close `grace` later.
async fn recycle(
    state: Arc<Mutex<Recorded>>,
    id: u64,
    lifetime: Duration,
    notice: Notice,
    grace: Duration,
) {
    tokio::time::sleep(lifetime).await;
    if !state
        .lock()
        .expect("lock")
        .socket
        .notify(id, notice.reason())
    {
        return;
    }
    tokio::time::sleep(grace).await;
    state.lock().expect("lock").socket.close(id);
}

/// Sends the chain's current attempt, and waits for its deadline on a task of its own.
pub(super) fn deliver(state: Arc<Mutex<Recorded>>, chain: usize) {
    let Some((attempt, deadline)) = state.lock().expect("lock").socket.deliver(chain) else {
        return;
    };
    tokio::spawn(async move {
        tokio::time::sleep(deadline).await;
        let gap = state.lock().expect("lock").socket.expire(chain, attempt);
        if let Some(gap) = gap {
            tokio::time::sleep(gap).await;
            deliver(state, chain);
        }
    });
}
