//! Slack's side of Socket Mode for one app: the tickets issued, the registrations (live
//! connections and ghosts), each envelope's deliveries and their acknowledgements, and the
//! decisions Slack makes on them (who gets an envelope, when it is sent again, when it is lost).
//! No I/O here: [`super::connection`] serves the sockets and runs the timers.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::protocol::{
    ACK_DEADLINE, Connection, ConnectionState, Delivery, EVENT_RETRIES, EnvelopeKind,
    EventDelivery, LostEnvelope, MAX_CONNECTIONS, Notice, Recycling, SERVER_PING_INTERVAL,
    SocketAck,
};
use crate::testing::workspace::Identity;

/// What a connection's task is told.
pub(super) enum Outgoing {
    Text(String),
    Close,
    /// Become half-open: read and write nothing more, hold the socket until forgotten.
    Ghost,
}

/// An app's registration with Slack: a live connection's outbox, or a ghost.
pub(super) struct Registration {
    /// `None`: a ghost with no socket at all (`SocketMode::add_ghost`).
    pub(super) outbox: Option<mpsc::UnboundedSender<Outgoing>>,
    pub(super) ghost: bool,
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

/// What Slack's Socket Mode keeps for the app, inside the stand-in's [`Recorded`](crate::testing::recorded::Recorded).
pub(crate) struct Links {
    pub(super) identity: Identity,
    /// `ws://127.0.0.1:PORT` of the stand-in's router.
    pub(super) ws_base: String,
    pub(super) tickets: HashSet<String>,
    pub(super) registrations: BTreeMap<u64, Registration>,
    pub(super) connections: Vec<Connection>,
    chains: Vec<Chain>,
    pub(super) deliveries: Vec<Delivery>,
    pub(super) acks: Vec<SocketAck>,
    pub(super) lost: Vec<LostEnvelope>,
    pub(super) recycling: Recycling,
    pub(super) ack_deadline: Duration,
    /// How often Slack pings each live connection (`None`: never).
    pub(super) server_ping: Option<Duration>,
    pub(super) routes: VecDeque<u64>,
    pub(super) random: u64,
    pub(super) made: u64,
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
            server_ping: Some(SERVER_PING_INTERVAL),
            routes: VecDeque::new(),
            random: 0x5EED_50C3,
            made: 0,
        }
    }

    pub(super) fn app_token(&self) -> String {
        format!("xapp-1-{}-1-standin", self.identity.app_id)
    }

    /// What `/_standin/state` shows of Socket Mode: the app-level token, each connection's
    /// state, the registrations Slack counts, the acknowledgements and what Slack gave up on.
    pub(crate) fn shown(&self) -> Value {
        let connections: Vec<Value> = self
            .connections
            .iter()
            .map(|c| json!({"id": c.id, "state": format!("{:?}", c.state), "notices": c.notices}))
            .collect();
        let lost: Vec<Value> = self
            .lost
            .iter()
            .map(|l| {
                json!({"envelope_id": l.envelope_id, "type": l.kind.wire_name(),
                       "retry_attempt": l.retry_attempt, "to_ghost": l.to_ghost})
            })
            .collect();
        json!({
            "app_token": self.app_token(),
            "num_connections": self.registrations.len(),
            "connections": connections,
            "envelopes": self.deliveries.len(),
            "acks": self.acks.len(),
            "lost": lost,
        })
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
    pub(super) fn admit(
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
            ping: self.server_ping,
        }
    }

    pub(super) fn connection_mut(&mut self, id: u64) -> Option<&mut Connection> {
        self.connections.get_mut((id as usize).checked_sub(1)?)
    }

    /// Tells a live connection's task `what`; false when it is gone or a ghost.
    pub(super) fn tell(&self, id: u64, what: Outgoing) -> bool {
        match self.registrations.get(&id) {
            Some(Registration {
                outbox: Some(outbox),
                ghost: false,
            }) => outbox.send(what).is_ok(),
            _ => false,
        }
    }

    /// Sends `disconnect` with `reason` to a live connection; false when there is none.
    pub(super) fn notify(&mut self, id: u64, reason: &str) -> bool {
        let sent = self.tell(id, Outgoing::Text(disconnect(reason, id)));
        if sent && let Some(c) = self.connection_mut(id) {
            c.notices.push(reason.to_string());
        }
        sent
    }

    /// Slack closes a live connection.
    pub(super) fn close(&mut self, id: u64) {
        if self.tell(id, Outgoing::Close) {
            self.registrations.remove(&id);
            if let Some(c) = self.connection_mut(id) {
                c.state = ConnectionState::ClosedBySlack;
            }
        }
    }

    /// The connection's task ended: the client closed it, unless Slack did or it is a ghost.
    pub(super) fn ended(&mut self, id: u64) {
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

    pub(super) fn start_chain(
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
    pub(super) fn deliver(&mut self, chain: usize) -> Option<(u32, Duration)> {
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
            sent_at: std::time::Instant::now(),
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
    pub(super) fn expire(&mut self, chain: usize, attempt: u32) -> Option<Duration> {
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
    pub(super) fn acknowledge(&mut self, id: u64, text: &str) {
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
            read_at: std::time::Instant::now(),
        });
    }
}

/// What [`Links::admit`] decided.
pub(super) enum Admitted {
    Refused(String),
    Open {
        id: u64,
        hello: String,
        lifetime: Duration,
        notice: Notice,
        grace: Duration,
        ping: Option<Duration>,
    },
}

fn host(id: u64) -> String {
    format!("applink-standin-{id}")
}

pub(super) fn disconnect(reason: &str, id: u64) -> String {
    json!({"type": "disconnect", "reason": reason, "debug_info": {"host": host(id)}}).to_string()
}
