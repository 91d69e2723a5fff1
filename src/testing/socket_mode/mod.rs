//! Slack's Socket Mode, served by [`FakeSlack`](super::FakeSlack) beside its Web API and over the same workspace:
//! `apps.connections.open` answers a WebSocket URL of the stand-in's own router
//! (`ws://127.0.0.1:PORT/link/?ticket=…`), the connection opens with a `hello`, and a test sends
//! envelopes through [`SocketMode`] (`slack.socket_mode()`), each to one of the app's
//! connections; what was sent where, acknowledged with what, redelivered and lost is kept for the
//! test to read.
//!
//! What Slack does, and so the stand-in (docs.slack.dev, "Using Socket Mode"; the Slack SDKs'
//! sources; users' reports: bolt-js#2487, python-slack-sdk#1940):
//! - an app holds up to [`MAX_CONNECTIONS`]; the next one is sent `disconnect`
//!   `too_many_websockets` and closed. Ghost registrations count, as in Slack.
//! - each envelope goes to any one registration, drawn at random (a seed: [`SocketMode::seed`]),
//!   ghosts and connections about to be closed included.
//! - an Events API envelope not acknowledged within its deadline ([`ACK_DEADLINE`]) is sent again,
//!   up to [`EVENT_RETRIES`] times, with `retry_attempt` 1..3 and `retry_reason: "timeout"`, under
//!   the same `envelope_id`, to a connection drawn again; slash commands and interactive payloads
//!   are never sent again.
//! - connections are recycled: after their lifetime (the `hello`'s `approximate_connection_time`;
//!   360 s with `debug_reconnects=true`) Slack sends `disconnect` `refresh_requested` (or
//!   `warning`), and closes the connection a grace period later ([`Recycling`]).
//! - Slack pings live connections ([`SERVER_PING_INTERVAL`]); a ghost is neither pinged nor
//!   answers a ping, so a client finds a half-open connection by the pings that stop.
//!
//! Where Slack is not documented the stand-in chooses, and says so: a ticket opens one
//! connection (a used or unknown one is refused with HTTP 401); an acknowledgement is taken from
//! any connection; a late one, once the next attempt is due but not yet sent, cancels it; a ghost
//! stays until [`SocketMode::forget_ghost`]; opens after `link_disabled` still succeed (a client
//! that reconnects shows in `counts()["apps.connections.open"]`).
//!
//! Here the handle a test holds; in `protocol.rs` the limits, kinds, schedules and records; in
//! `links.rs` Slack's side, without I/O; in `connection.rs` the WebSockets and the timers.
//! `tests/api/socket_mode.rs` drives it with a tokio-tungstenite client, as an ingress would.

mod connection;
pub(super) mod links;
mod protocol;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::recorded::Recorded;
use super::workspace::Identity;
use connection::deliver;
pub(crate) use connection::link;
use links::{Links, Outgoing, Registration};
pub use protocol::{
    ACK_DEADLINE, CONNECTION_LIFETIME, Connection, ConnectionState, DEBUG_CONNECTION_LIFETIME,
    Delivery, EVENT_RETRIES, EnvelopeKind, EventCopy, EventDelivery, LostEnvelope, MAX_CONNECTIONS,
    NOTICE_GRACE, Notice, Recycling, SERVER_PING_INTERVAL, SocketAck,
};

/// Slack's Socket Mode for the app of a [`FakeSlack`](super::FakeSlack)
/// (`slack.socket_mode()`): its app-level token, the envelopes a test sends, and what became of
/// them. Sending needs a tokio runtime (deadlines and redeliveries run on tasks of their own).
#[derive(Clone)]
pub struct SocketMode {
    state: Arc<Mutex<Recorded>>,
}

impl SocketMode {
    pub(crate) fn new(state: Arc<Mutex<Recorded>>) -> Self {
        Self { state }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Links) -> T) -> T {
        f(&mut self.state.lock().expect("lock").socket)
    }

    /// The app-level token (`xapp-…`) `apps.connections.open` takes (`SLACK_APP_TOKEN`).
    pub fn app_token(&self) -> String {
        self.with(|l| l.app_token())
    }

    /// The draws of connections start again from `seed` (not 0).
    pub fn seed(&self, seed: u64) {
        self.with(|l| l.random = seed.max(1));
    }

    /// How connections opened from now on are recycled.
    pub fn set_recycling(&self, recycling: Recycling) {
        self.with(|l| l.recycling = recycling);
    }

    /// How often live connections opened from now on are pinged ([`SERVER_PING_INTERVAL`];
    /// `None`: never). A ghost is never pinged.
    pub fn set_server_ping(&self, interval: Option<Duration>) {
        self.with(|l| l.server_ping = interval);
    }

    /// The ack deadline of commands and interactive payloads sent from now on ([`ACK_DEADLINE`];
    /// an event's is its [`EventDelivery::ack_deadline`]).
    pub fn set_ack_deadline(&self, deadline: Duration) {
        self.with(|l| l.ack_deadline = deadline);
    }

    /// The next delivery (an envelope, or a redelivery) goes to connection `id` rather than one
    /// drawn at random (each call routes one; ignored if `id` is no longer registered).
    pub fn route_next(&self, id: u64) {
        self.with(|l| l.routes.push_back(id));
    }

    /// `event` (an event's own JSON: `{"type": "app_mention", …}`) in the event callback Slack
    /// wraps it in for this app and workspace, with a new `event_id`.
    pub fn event_callback(&self, event: Value) -> Value {
        self.with(|l| {
            l.made += 1;
            let Identity {
                team,
                app_id,
                bot_user,
                ..
            } = &l.identity;
            json!({
                "token": "standin-verification-token",
                "team_id": team,
                "api_app_id": app_id,
                "event": event,
                "type": "event_callback",
                "event_id": format!("Ev0SOCKET{:06}", l.made),
                "event_time": crate::clock::now_ms() / 1000,
                "authorizations": [{"enterprise_id": null, "team_id": team, "user_id": bot_user,
                                    "is_bot": true, "is_enterprise_install": false}],
                "is_ext_shared_channel": false,
            })
        })
    }

    /// Sends an Events API envelope carrying `callback` (an event callback:
    /// [`SocketMode::event_callback`]) as Slack does ([`EventDelivery::default`]); its
    /// `envelope_id`.
    pub fn send_event(&self, callback: Value) -> String {
        self.send_event_with(callback, EventDelivery::default())
    }

    /// Sends an Events API envelope carrying `callback`, with its deadline, the gaps before its
    /// redeliveries and the copies `delivery` names; its `envelope_id`.
    pub fn send_event_with(&self, callback: Value, delivery: EventDelivery) -> String {
        let (chain, envelope_id) = self
            .with(|l| l.start_chain(EnvelopeKind::EventsApi, callback.clone(), None, &delivery));
        deliver(self.state.clone(), chain);
        for (after, copy) in delivery.copies.clone() {
            let (state, callback, delivery) =
                (self.state.clone(), callback.clone(), delivery.clone());
            let same = (copy == EventCopy::SameEnvelope).then(|| envelope_id.clone());
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                let (chain, _) = state.lock().expect("lock").socket.start_chain(
                    EnvelopeKind::EventsApi,
                    callback,
                    same,
                    &delivery,
                );
                deliver(state, chain);
            });
        }
        envelope_id
    }

    /// Sends a `slash_commands` envelope carrying `fields` (`command`, `text`, `user_id`,
    /// `channel_id`, …; `team_id`, `api_app_id`, `trigger_id` and a `response_url` of this
    /// stand-in filled in when absent); its `envelope_id`. Never redelivered.
    pub fn send_command(&self, fields: Value) -> String {
        let fields = self.with(|l| {
            let mut fields = fields;
            l.made += 1;
            let channel = fields["channel_id"]
                .as_str()
                .unwrap_or("C0SOCKET")
                .to_string();
            let defaults = [
                ("team_id", l.identity.team.clone()),
                ("api_app_id", l.identity.app_id.clone()),
                ("is_enterprise_install", "false".into()),
                ("trigger_id", super::Workspace::trigger_id()),
                (
                    "response_url",
                    format!(
                        "{}/commands/{}/{channel}/{}",
                        l.ws_base.replacen("ws://", "http://", 1),
                        l.identity.team,
                        l.made
                    ),
                ),
            ];
            for (key, value) in defaults {
                if fields.get(key).is_none() {
                    fields[key] = value.into();
                }
            }
            fields
        });
        self.send_once(EnvelopeKind::SlashCommands, fields)
    }

    /// Sends an `interactive` envelope carrying `payload` (`block_actions`, `view_submission`,
    /// `shortcut`, `block_suggestion`…; `api_app_id` and `team` filled in when absent); its
    /// `envelope_id`. Never redelivered.
    pub fn send_interactive(&self, payload: Value) -> String {
        let payload = self.with(|l| {
            let mut payload = payload;
            if payload.get("api_app_id").is_none() {
                payload["api_app_id"] = l.identity.app_id.clone().into();
            }
            if payload.get("team").is_none() {
                payload["team"] = json!({"id": l.identity.team});
            }
            payload
        });
        self.send_once(EnvelopeKind::Interactive, payload)
    }

    fn send_once(&self, kind: EnvelopeKind, payload: Value) -> String {
        let (chain, envelope_id) = self.with(|l| {
            let delivery = EventDelivery {
                ack_deadline: l.ack_deadline,
                ..EventDelivery::default()
            };
            l.start_chain(kind, payload, None, &delivery)
        });
        deliver(self.state.clone(), chain);
        envelope_id
    }

    /// Sends connection `id` a `disconnect` `notice` now, and closes it `grace` later; false when
    /// it is not open.
    pub fn disconnect(&self, id: u64, notice: Notice, grace: Duration) -> bool {
        if !self.with(|l| l.notify(id, notice.reason())) {
            return false;
        }
        let state = self.state.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            state.lock().expect("lock").socket.close(id);
        });
        true
    }

    /// Socket Mode is turned off in the app's settings: every open connection is sent
    /// `disconnect` `link_disabled` and closed, and every ghost dropped.
    pub fn disable_link(&self) {
        self.with(|l| {
            let ids: Vec<u64> = l.registrations.keys().copied().collect();
            for id in ids {
                if l.notify(id, "link_disabled") {
                    l.close(id);
                } else {
                    l.registrations.remove(&id);
                    if let Some(c) = l.connection_mut(id) {
                        c.state = ConnectionState::Forgotten;
                    }
                }
            }
        });
    }

    /// A registration Slack keeps with no client at all (a process gone without closing): it
    /// counts in `num_connections` and swallows what it is sent. Its id.
    pub fn add_ghost(&self) -> u64 {
        self.with(|l| {
            let id = l.connections.len() as u64 + 1;
            l.registrations.insert(
                id,
                Registration {
                    outbox: None,
                    ghost: true,
                },
            );
            l.connections.push(Connection {
                id,
                debug_reconnects: false,
                hello: None,
                state: ConnectionState::Ghost,
                notices: Vec::new(),
            });
            id
        })
    }

    /// Connection `id` goes half-open: Slack neither writes to it nor reads from it (no pong
    /// either), keeps its registration after the client goes, and swallows what it is sent;
    /// false when it is not open.
    pub fn make_ghost(&self, id: u64) -> bool {
        self.with(|l| {
            if !l.tell(id, Outgoing::Ghost) {
                return false;
            }
            if let Some(r) = l.registrations.get_mut(&id) {
                r.ghost = true;
            }
            if let Some(c) = l.connection_mut(id) {
                c.state = ConnectionState::Ghost;
            }
            true
        })
    }

    /// Slack drops the ghost `id` (its socket, if any, goes without a close frame).
    pub fn forget_ghost(&self, id: u64) -> bool {
        self.with(|l| {
            if !l.registrations.get(&id).is_some_and(|r| r.ghost) {
                return false;
            }
            l.registrations.remove(&id);
            if let Some(c) = l.connection_mut(id) {
                c.state = ConnectionState::Forgotten;
            }
            true
        })
    }

    /// The registrations Slack holds for the app now, ghosts included (what the next `hello`
    /// counts, less the new connection).
    pub fn num_connections(&self) -> usize {
        self.with(|l| l.registrations.len())
    }

    /// Every connection, in the order they opened (refused ones and ghosts too).
    pub fn connections(&self) -> Vec<Connection> {
        self.with(|l| l.connections.clone())
    }

    /// Every envelope sent, in order: first deliveries, redeliveries and copies.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.with(|l| l.deliveries.clone())
    }

    /// Every acknowledgement read, in order.
    pub fn acks(&self) -> Vec<SocketAck> {
        self.with(|l| l.acks.clone())
    }

    /// The envelopes Slack gave up on, in order: a command or an interactive payload not
    /// acknowledged in time (or sent when the app held no connection), an event whose last
    /// redelivery was not acknowledged.
    pub fn lost(&self) -> Vec<LostEnvelope> {
        self.with(|l| l.lost.clone())
    }

    /// Waits up to `within` for `done` to hold; whether it did.
    pub async fn wait_for(&self, within: Duration, done: impl Fn(&SocketMode) -> bool) -> bool {
        let until = tokio::time::Instant::now() + within;
        loop {
            if done(self) {
                return true;
            }
            if tokio::time::Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
