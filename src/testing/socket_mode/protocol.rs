//! Socket Mode as Slack runs it, in the stand-in's words: its limits and deadlines, the envelope
//! kinds and `disconnect` notices, the schedules a test sets ([`Recycling`], [`EventDelivery`])
//! and the records it reads ([`Connection`], [`Delivery`], [`SocketAck`], [`LostEnvelope`]).

use std::time::Duration;

use serde_json::Value;

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
/// How often the stand-in pings each live connection (a WebSocket ping frame). Slack pings its
/// clients: node-slack-sdk deems a connection stale after 30 s without a ping
/// (`serverPingTimeoutMS`); the interval itself is not documented, this one is the stand-in's.
pub const SERVER_PING_INTERVAL: Duration = Duration::from_secs(10);
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
    pub(super) fn reason(self) -> &'static str {
        match self {
            Notice::RefreshRequested => "refresh_requested",
            Notice::Warning => "warning",
        }
    }
}

/// When Slack recycles the connections opened from now on (`SocketMode::set_recycling`).
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

/// How an Events API envelope is delivered (`SocketMode::send_event_with`).
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
    /// A ghost Slack finally dropped (`SocketMode::forget_ghost`).
    Forgotten,
}

/// One connection, as Slack saw it (`SocketMode::connections`).
#[derive(Clone, Debug)]
pub struct Connection {
    /// Its number (1, 2, …) in the order they opened; ghosts made by
    /// `SocketMode::add_ghost` are numbered too.
    pub id: u64,
    /// Opened with `debug_reconnects=true`.
    pub debug_reconnects: bool,
    /// The `hello` it was sent (`None`: refused, or a ghost from `SocketMode::add_ghost`).
    pub hello: Option<Value>,
    /// What became of it.
    pub state: ConnectionState,
    /// The `disconnect` reasons it was sent, in order.
    pub notices: Vec<String>,
}

/// One envelope sent (a first delivery, a redelivery or a copy) (`SocketMode::deliveries`).
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
    /// When it was handed to the connection's writer.
    pub sent_at: std::time::Instant,
}

/// One acknowledgement read from a connection (`SocketMode::acks`).
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
    /// When it was read (less its delivery's `sent_at`: the time from envelope to ack).
    pub read_at: std::time::Instant,
}

/// An envelope Slack gave up on (`SocketMode::lost`).
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
