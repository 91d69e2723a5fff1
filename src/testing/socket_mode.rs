//! Slack's Socket Mode, served by [`FakeSlack`] beside its Web API and over the same workspace:
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
//!
//! Where Slack is not documented the stand-in chooses, and says so: a ticket opens one
//! connection (a used or unknown one is refused with HTTP 401); an acknowledgement is taken from
//! any connection; a late one, once the next attempt is due but not yet sent, cancels it; a ghost
//! stays until [`SocketMode::forget_ghost`]; opens after `link_disabled` still succeed (a client
//! that reconnects shows in `counts()["apps.connections.open"]`).

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::recorded::Recorded;
use super::workspace::Identity;

/// How many connections Slack holds for one app; the next is refused with `too_many_websockets`.
pub const MAX_CONNECTIONS: usize = 10;
/// How long Slack waits for an envelope's acknowledgement.
pub const ACK_DEADLINE: Duration = Duration::from_secs(3);
/// How many times Slack sends an unacknowledged Events API envelope again.
pub const EVENT_RETRIES: u32 = 3;
/// How long a connection lives (the docs' `approximate_connection_time`: 3600 s).
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(3600);
/// How long a connection opened with `debug_reconnects=true` lives (Slack: 360 s).
pub const DEBUG_CONNECTION_LIFETIME: Duration = Duration::from_secs(360);
/// From a `disconnect` notice to Slack's close (Slack: a `warning` comes about 10 s before).
pub const NOTICE_GRACE: Duration = Duration::from_secs(10);

/// What Slack sends a connection before it goes: `disconnect` with this `reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// `refresh_requested`: the routine recycling, every few hours.
    RefreshRequested,
    /// `warning`: the connection closes in about 10 s.
    Warning,
}

impl Notice {
    fn reason(self) -> &'static str {
        match self {
            Notice::RefreshRequested => "refresh_requested",
            Notice::Warning => "warning",
        }
    }
}

/// When Slack recycles the connections opened from now on ([`SocketMode::set_recycling`]).
#[derive(Clone, Debug)]
pub struct Recycling {
    /// A connection's life, announced in its `hello` (`approximate_connection_time`).
    pub lifetime: Duration,
    /// The life of one opened with `debug_reconnects=true`.
    pub debug_lifetime: Duration,
    /// What is sent at the end of its life.
    pub notice: Notice,
    /// From the notice to the close.
    pub grace: Duration,
}

impl Default for Recycling {
    /// As Slack: [`CONNECTION_LIFETIME`], [`DEBUG_CONNECTION_LIFETIME`], `refresh_requested`,
    /// [`NOTICE_GRACE`].
    fn default() -> Self {
        Self {
            lifetime: CONNECTION_LIFETIME,
            debug_lifetime: DEBUG_CONNECTION_LIFETIME,
            notice: Notice::RefreshRequested,
            grace: NOTICE_GRACE,
        }
    }
}

/// An envelope's `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvelopeKind {
    /// `events_api`: an event callback; redelivered when not acknowledged.
    EventsApi,
    /// `slash_commands`: a command's fields; never redelivered, the ack may carry the answer.
    SlashCommands,
    /// `interactive`: a click, a submission, a shortcut, a menu's options; never redelivered,
    /// the ack may carry the answer.
    Interactive,
}

impl EnvelopeKind {
    /// The `type` on the wire.
    pub fn wire_name(self) -> &'static str {
        match self {
            EnvelopeKind::EventsApi => "events_api",
            EnvelopeKind::SlashCommands => "slash_commands",
            EnvelopeKind::Interactive => "interactive",
        }
    }

    /// `accepts_response_payload`: whether the ack's `payload` is the answer.
    pub fn accepts_response_payload(self) -> bool {
        self != EnvelopeKind::EventsApi
    }
}

/// A copy of an event Slack sends besides its redeliveries, as users report
/// ([`EventDelivery::copies`]): its own delivery, `retry_attempt` 0, redelivered in turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventCopy {
    /// The same `envelope_id` again with `retry_attempt` 0 (bolt-js#2487).
    SameEnvelope,
    /// A new `envelope_id` for the same event callback.
    NewEnvelope,
}

/// How an Events API envelope is delivered ([`SocketMode::send_event_with`]).
#[derive(Clone, Debug)]
pub struct EventDelivery {
    /// How long each attempt waits for its ack ([`ACK_DEADLINE`]).
    pub ack_deadline: Duration,
    /// From an attempt's deadline to the next attempt (none by default: users see a retry about
    /// 4 s after the first delivery; over HTTP Slack waits 1 and 5 minutes before the 2nd and 3rd).
    pub retry_gaps: [Duration; EVENT_RETRIES as usize],
    /// Copies sent this long after the first delivery.
    pub copies: Vec<(Duration, EventCopy)>,
}

impl Default for EventDelivery {
    fn default() -> Self {
        Self {
            ack_deadline: ACK_DEADLINE,
            retry_gaps: [Duration::ZERO; EVENT_RETRIES as usize],
            copies: Vec::new(),
        }
    }
}

/// What became of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionState {
    /// Open, and registered.
    Open,
    /// A registration Slack keeps with no client reading it: it swallows what it is sent.
    Ghost,
    /// The client closed it (or its TCP connection went).
    ClosedByClient,
    /// Slack closed it (recycled, `link_disabled`).
    ClosedBySlack,
    /// Refused with `too_many_websockets`.
    Refused,
    /// A ghost Slack finally dropped ([`SocketMode::forget_ghost`]).
    Forgotten,
}

/// One connection, as Slack saw it ([`SocketMode::connections`]).
#[derive(Clone, Debug)]
pub struct Connection {
    /// Its number (1, 2, …) in the order they opened; ghosts made by
    /// [`SocketMode::add_ghost`] are numbered too.
    pub id: u64,
    /// Opened with `debug_reconnects=true`.
    pub debug_reconnects: bool,
    /// The `hello` it was sent (`None`: refused, or a ghost from [`SocketMode::add_ghost`]).
    pub hello: Option<Value>,
    /// What became of it.
    pub state: ConnectionState,
    /// The `disconnect` reasons it was sent, in order.
    pub notices: Vec<String>,
}

/// One envelope sent (a first delivery, a redelivery or a copy) ([`SocketMode::deliveries`]).
#[derive(Clone, Debug)]
pub struct Delivery {
    /// Its `envelope_id`.
    pub envelope_id: String,
    /// Its `type`.
    pub kind: EnvelopeKind,
    /// The connection it went to (`None`: the app held none, so it went nowhere).
    pub connection: Option<u64>,
    /// That connection was a ghost: nobody read it.
    pub to_ghost: bool,
    /// `retry_attempt` (0 for commands and interactive payloads, which carry none).
    pub retry_attempt: u32,
    /// The envelope as sent.
    pub message: Value,
}

/// One acknowledgement read from a connection ([`SocketMode::acks`]).
#[derive(Clone, Debug)]
pub struct SocketAck {
    /// The `envelope_id` it named.
    pub envelope_id: String,
    /// The connection it came on.
    pub connection: u64,
    /// Its `payload` (the answer, for a command or an interactive payload).
    pub payload: Option<Value>,
    /// It settled an envelope still waiting for it; `false`: too late (a command already lost,
    /// an event already acknowledged or given up) or naming no envelope.
    pub settled: bool,
}

/// An envelope Slack gave up on ([`SocketMode::lost`]).
#[derive(Clone, Debug)]
pub struct LostEnvelope {
    /// Its `envelope_id`.
    pub envelope_id: String,
    /// Its `type`.
    pub kind: EnvelopeKind,
    /// What it carried.
    pub payload: Value,
    /// Its last delivery's connection (`None`: the app held none).
    pub connection: Option<u64>,
    /// Its last delivery went to a ghost.
    pub to_ghost: bool,
    /// Its last `retry_attempt`.
    pub retry_attempt: u32,
}

/// What a connection's task is told.
enum Outgoing {
    Text(String),
    Close,
    /// Become half-open: read and write nothing more, hold the socket until forgotten.
    Ghost,
}

/// An app's registration with Slack: a live connection's outbox, or a ghost.
struct Registration {
    /// `None`: a ghost with no socket at all ([`SocketMode::add_ghost`]).
    outbox: Option<mpsc::UnboundedSender<Outgoing>>,
    ghost: bool,
}

#[derive(Clone, Debug, PartialEq)]
enum ChainState {
    Awaiting,
    Acknowledged,
    Lost,
}

/// One envelope's deliveries: its first, and for an event its redeliveries.
struct Chain {
    envelope_id: String,
    kind: EnvelopeKind,
    payload: Value,
    attempt: u32,
    state: ChainState,
    ack_deadline: Duration,
    retry_gaps: [Duration; EVENT_RETRIES as usize],
    last: Option<(Option<u64>, bool)>,
}

/// What Slack's Socket Mode keeps for the app, inside the stand-in's [`Recorded`].
pub(crate) struct Links {
    identity: Identity,
    /// `ws://127.0.0.1:PORT` of the stand-in's router.
    ws_base: String,
    tickets: HashSet<String>,
    registrations: BTreeMap<u64, Registration>,
    connections: Vec<Connection>,
    chains: Vec<Chain>,
    deliveries: Vec<Delivery>,
    acks: Vec<SocketAck>,
    lost: Vec<LostEnvelope>,
    recycling: Recycling,
    ack_deadline: Duration,
    routes: VecDeque<u64>,
    random: u64,
    made: u64,
}

impl Links {
    pub(crate) fn new(identity: Identity, base_url: &str) -> Self {
        let host = base_url.trim_end_matches("/api");
        let ws_base = host.replacen("http://", "ws://", 1);
        Self {
            identity,
            ws_base,
            tickets: HashSet::new(),
            registrations: BTreeMap::new(),
            connections: Vec::new(),
            chains: Vec::new(),
            deliveries: Vec::new(),
            acks: Vec::new(),
            lost: Vec::new(),
            recycling: Recycling::default(),
            ack_deadline: ACK_DEADLINE,
            routes: VecDeque::new(),
            random: 0x5EED_50C3,
            made: 0,
        }
    }

    fn app_token(&self) -> String {
        format!("xapp-1-{}-1-standin", self.identity.app_id)
    }

    /// `apps.connections.open`, as Slack answers it: only the app-level token opens a
    /// connection; a bot's, a user's or a step's token is `not_allowed_token_type`, an unknown
    /// one `invalid_auth`, none `not_authed`.
    pub(crate) fn open(&mut self, token: Option<&str>) -> Value {
        let Some(token) = token else {
            return json!({"ok": false, "error": "not_authed"});
        };
        if token != self.app_token() {
            let error = if token.starts_with("xox") || token.starts_with("xwfp-") {
                "not_allowed_token_type"
            } else {
                "invalid_auth"
            };
            return json!({"ok": false, "error": error});
        }
        let ticket = uuid::Uuid::new_v4().to_string();
        self.tickets.insert(ticket.clone());
        let url = format!(
            "{}/link/?ticket={ticket}&app_id={}",
            self.ws_base, self.identity.app_id
        );
        json!({"ok": true, "url": url})
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64: a seed replays the same draws.
        let mut x = self.random;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.random = x;
        x
    }

    /// The registration the next envelope goes to: a routed one, or one drawn at random.
    fn pick(&mut self) -> Option<u64> {
        while let Some(id) = self.routes.pop_front() {
            if self.registrations.contains_key(&id) {
                return Some(id);
            }
        }
        let ids: Vec<u64> = self.registrations.keys().copied().collect();
        if ids.is_empty() {
            return None;
        }
        let drawn = self.next_random() % ids.len() as u64;
        Some(ids[drawn as usize])
    }

    /// A new connection: refused past [`MAX_CONNECTIONS`], else registered, with its `hello`
    /// and how long it lives.
    fn admit(
        &mut self,
        debug_reconnects: bool,
        outbox: mpsc::UnboundedSender<Outgoing>,
    ) -> Admitted {
        let id = self.connections.len() as u64 + 1;
        if self.registrations.len() >= MAX_CONNECTIONS {
            self.connections.push(Connection {
                id,
                debug_reconnects,
                hello: None,
                state: ConnectionState::Refused,
                notices: vec!["too_many_websockets".into()],
            });
            return Admitted::Refused(disconnect("too_many_websockets", id));
        }
        let lifetime = if debug_reconnects {
            self.recycling.debug_lifetime
        } else {
            self.recycling.lifetime
        };
        self.registrations.insert(
            id,
            Registration {
                outbox: Some(outbox),
                ghost: false,
            },
        );
        let hello = json!({
            "type": "hello",
            "num_connections": self.registrations.len(),
            "debug_info": {
                "host": host(id),
                "build_number": 1,
                "approximate_connection_time": lifetime.as_secs_f64().ceil() as u64,
            },
            "connection_info": {"app_id": self.identity.app_id},
        });
        self.connections.push(Connection {
            id,
            debug_reconnects,
            hello: Some(hello.clone()),
            state: ConnectionState::Open,
            notices: Vec::new(),
        });
        Admitted::Open {
            id,
            hello: hello.to_string(),
            lifetime,
            notice: self.recycling.notice,
            grace: self.recycling.grace,
        }
    }

    fn connection_mut(&mut self, id: u64) -> Option<&mut Connection> {
        self.connections.get_mut((id as usize).checked_sub(1)?)
    }

    /// Tells a live connection's task `what`; false when it is gone or a ghost.
    fn tell(&self, id: u64, what: Outgoing) -> bool {
        match self.registrations.get(&id) {
            Some(Registration {
                outbox: Some(outbox),
                ghost: false,
            }) => outbox.send(what).is_ok(),
            _ => false,
        }
    }

    /// Sends `disconnect` with `reason` to a live connection; false when there is none.
    fn notify(&mut self, id: u64, reason: &str) -> bool {
        let sent = self.tell(id, Outgoing::Text(disconnect(reason, id)));
        if sent && let Some(c) = self.connection_mut(id) {
            c.notices.push(reason.to_string());
        }
        sent
    }

    /// Slack closes a live connection.
    fn close(&mut self, id: u64) {
        if self.tell(id, Outgoing::Close) {
            self.registrations.remove(&id);
            if let Some(c) = self.connection_mut(id) {
                c.state = ConnectionState::ClosedBySlack;
            }
        }
    }

    /// The connection's task ended: the client closed it, unless Slack did or it is a ghost.
    fn ended(&mut self, id: u64) {
        let ghost = self.registrations.get(&id).is_some_and(|r| r.ghost);
        if ghost {
            return;
        }
        self.registrations.remove(&id);
        if let Some(c) = self.connection_mut(id)
            && c.state == ConnectionState::Open
        {
            c.state = ConnectionState::ClosedByClient;
        }
    }

    fn start_chain(
        &mut self,
        kind: EnvelopeKind,
        payload: Value,
        envelope_id: Option<String>,
        delivery: &EventDelivery,
    ) -> (usize, String) {
        let envelope_id = envelope_id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        self.chains.push(Chain {
            envelope_id: envelope_id.clone(),
            kind,
            payload,
            attempt: 0,
            state: ChainState::Awaiting,
            ack_deadline: delivery.ack_deadline,
            retry_gaps: delivery.retry_gaps,
            last: None,
        });
        (self.chains.len() - 1, envelope_id)
    }

    /// Sends the chain's current attempt to a registration: its attempt and deadline, or
    /// `None` when nothing more is to be sent (acknowledged meanwhile, or lost for want of a
    /// connection).
    fn deliver(&mut self, chain: usize) -> Option<(u32, Duration)> {
        if self.chains[chain].state != ChainState::Awaiting {
            return None;
        }
        let target = self.pick();
        let c = &self.chains[chain];
        let mut message = json!({
            "envelope_id": c.envelope_id,
            "payload": c.payload,
            "type": c.kind.wire_name(),
            "accepts_response_payload": c.kind.accepts_response_payload(),
        });
        if c.kind == EnvelopeKind::EventsApi {
            message["retry_attempt"] = c.attempt.into();
            message["retry_reason"] = if c.attempt == 0 { "" } else { "timeout" }.into();
        }
        let to_ghost = target
            .and_then(|id| self.registrations.get(&id))
            .is_some_and(|r| r.ghost);
        if let Some(id) = target
            && !to_ghost
        {
            self.tell(id, Outgoing::Text(message.to_string()));
        }
        let (envelope_id, kind, attempt, deadline) =
            (c.envelope_id.clone(), c.kind, c.attempt, c.ack_deadline);
        self.deliveries.push(Delivery {
            envelope_id,
            kind,
            connection: target,
            to_ghost,
            retry_attempt: attempt,
            message,
        });
        self.chains[chain].last = Some((target, to_ghost));
        if target.is_none() && kind != EnvelopeKind::EventsApi {
            self.give_up(chain);
            return None;
        }
        Some((attempt, deadline))
    }

    /// The deadline of the chain's attempt `attempt` passed: the gap to its redelivery, or
    /// `None` (acknowledged, or given up: a command, an interactive payload, an event's last).
    fn expire(&mut self, chain: usize, attempt: u32) -> Option<Duration> {
        let c = &mut self.chains[chain];
        if c.state != ChainState::Awaiting || c.attempt != attempt {
            return None;
        }
        if c.kind == EnvelopeKind::EventsApi && c.attempt < EVENT_RETRIES {
            let gap = c.retry_gaps[c.attempt as usize];
            c.attempt += 1;
            return Some(gap);
        }
        self.give_up(chain);
        None
    }

    fn give_up(&mut self, chain: usize) {
        let c = &mut self.chains[chain];
        c.state = ChainState::Lost;
        let (connection, to_ghost) = c.last.unwrap_or((None, false));
        self.lost.push(LostEnvelope {
            envelope_id: c.envelope_id.clone(),
            kind: c.kind,
            payload: c.payload.clone(),
            connection,
            to_ghost,
            retry_attempt: c.attempt,
        });
    }

    /// An acknowledgement read on connection `id`: it settles every delivery of its envelope
    /// still waiting for one.
    fn acknowledge(&mut self, id: u64, text: &str) {
        let Ok(ack) = serde_json::from_str::<Value>(text) else {
            return;
        };
        let Some(envelope_id) = ack["envelope_id"].as_str() else {
            return;
        };
        let mut settled = false;
        for c in self.chains.iter_mut() {
            if c.envelope_id == envelope_id && c.state == ChainState::Awaiting {
                c.state = ChainState::Acknowledged;
                settled = true;
            }
        }
        self.acks.push(SocketAck {
            envelope_id: envelope_id.to_string(),
            connection: id,
            payload: ack.get("payload").cloned(),
            settled,
        });
    }
}

/// What [`Links::admit`] decided.
enum Admitted {
    Refused(String),
    Open {
        id: u64,
        hello: String,
        lifetime: Duration,
        notice: Notice,
        grace: Duration,
    },
}

fn host(id: u64) -> String {
    format!("applink-standin-{id}")
}

fn disconnect(reason: &str, id: u64) -> String {
    json!({"type": "disconnect", "reason": reason, "debug_info": {"host": host(id)}}).to_string()
}

/// `GET /link/?ticket=…`: the WebSocket of a ticket `apps.connections.open` issued (once).
pub(crate) async fn link(
    State(state): State<Arc<Mutex<Recorded>>>,
    RawQuery(query): RawQuery,
    upgrade: WebSocketUpgrade,
) -> Response {
    let query = super::slack::form(query.as_deref().unwrap_or(""));
    let ticket = query
        .get("ticket")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let debug_reconnects = query.get("debug_reconnects").and_then(Value::as_str) == Some("true");
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
    let (id, hello, lifetime, notice, grace) = match admitted {
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
        } => (id, hello, lifetime, notice, grace),
    };
    if socket.send(Message::Text(hello.into())).await.is_err() {
        state.lock().expect("lock").socket.ended(id);
        return;
    }
    tokio::spawn(recycle(state.clone(), id, lifetime, notice, grace));
    loop {
        tokio::select! {
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
fn deliver(state: Arc<Mutex<Recorded>>, chain: usize) {
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
