//! The soak's mix: what each request is, drawn from the seed, how Slack delivers it, and what
//! its answer carries in Slack.
//!
//! Every request `i` carries the marker `Soak{i:08}`, and so does its answer (the text it is
//! about is echoed; a click's reply names its clicker, `USoak{i:08}`), so one pass over this
//! app's messages counts each request's answers. The marker is also in every queue message a
//! request becomes (an event's id, a form's response URL or view id), which is how the queue's
//! proxy tells a message's kind.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{APP_ID, BOT_USER, TEAM, message_key, now_unix};

/// xorshift64*, reproducible from the printed seed.
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// True with probability `per_mille` / 1000.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The kinds of request in the mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A person's message mentioning the bot in a channel: a reply in its thread.
    Mention,
    /// A question to the assistant (a DM): an answer streamed into its thread.
    Question,
    /// `/once`: an ephemeral acknowledgement, then an answer through its `response_url`.
    Command,
    /// A click on the button of an earlier answer: the message marked, a reply in its thread.
    Click,
    /// The note modal's submission: the note posted to the submitter's DM.
    Note,
    /// An event no listener takes (a reaction, a message nobody asked the bot about).
    Bare,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Mention,
        Kind::Question,
        Kind::Command,
        Kind::Click,
        Kind::Note,
        Kind::Bare,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Mention => "mention",
            Kind::Question => "assistant question",
            Kind::Command => "slash command",
            Kind::Click => "button click",
            Kind::Note => "view submission",
            Kind::Bare => "event no listener takes",
        }
    }

    /// Whether Slack sends it as an event (retried on failure) or a form (sent once: a
    /// failure is an error the person sees).
    pub fn is_event(self) -> bool {
        matches!(self, Kind::Mention | Kind::Question | Kind::Bare)
    }
}

/// The mix, per mille of requests. A click needs an earlier answer to click on: until there is
/// one, a click drawn is a mention.
pub const MIX: [(Kind, u64); 6] = [
    (Kind::Mention, 300),
    (Kind::Question, 120),
    (Kind::Command, 150),
    (Kind::Click, 120),
    (Kind::Note, 100),
    (Kind::Bare, 210),
];
/// Of mentions, per mille: also delivered as the `message` event Slack sends beside the
/// `app_mention` (another `event_id`, the same message).
pub const ALSO_AS_MESSAGE: u64 = 500;
/// Of mentions and questions, per mille: a phantom copy, another message under another `ts`
/// with the same `client_msg_id`, 0.5 to 3 s later (slackapi/node-slack-sdk#2141).
pub const PHANTOM: u64 = 100;
/// Of events, per mille: Slack did not get the acknowledgement (lost on its way back) and
/// sends retry 1 although the delivery was answered 2xx.
pub const ACK_LOST: u64 = 50;
/// Of view submissions, per mille: submitted twice (a double-click on Submit: the same form).
pub const DOUBLE_SUBMIT: u64 = 150;
/// Slack's retry schedule, on a scaled clock (Slack: at once, 1 min, 5 min): the later two
/// after the synchronous ingress's lease (2 s) has ended, as Slack's minutes are after any
/// invocation's, so that a retry that meets a live claim is the first one only, as in
/// production.
pub const RETRY_AFTER: [Duration; 3] = [
    Duration::from_millis(200),
    Duration::from_secs(4),
    Duration::from_secs(10),
];
/// Channels the mentions and other people's messages are in.
const CHANNELS: usize = 32;
/// People asking the assistant (each in the DM with the bot).
const ASKERS: usize = 64;

/// One body Slack delivers for a request.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub body: String,
    /// A form (a command, an interaction), else an event's JSON.
    pub form: bool,
    /// How long after the request's first delivery this one starts.
    pub after: Duration,
}

/// One request of the mix.
pub struct Planned {
    pub kind: Kind,
    pub deliveries: Vec<Delivery>,
    /// The marker its answer carries (none for a bare event).
    pub marker: Option<String>,
    /// The ledger keys it is claimed under (a message: its claim and, with a
    /// `client_msg_id`, the alias; a phantom copy's as well): where its failure is recorded,
    /// and how the ledger's proxy tells which kind a write is for.
    pub keys: Vec<String>,
    /// The message a click is on: (channel, ts).
    pub clicked: Option<(String, String)>,
    /// Slack sends retry 1 of its first delivery although answered (events only).
    pub ack_lost: bool,
}

/// A clickable answer of the bot: its channel, its `ts` and the message as Slack shows it.
pub type Clickable = (String, String, Value);

/// The marker of request `i`.
pub fn marker(i: u64) -> String {
    format!("Soak{i:08}")
}

/// The request index a text's marker names, if it has one.
pub fn markers_in(text: &str) -> impl Iterator<Item = u64> + '_ {
    text.match_indices("Soak").filter_map(|(at, _)| {
        let digits = text.get(at + 4..at + 12)?;
        digits
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| digits.parse().ok())
            .flatten()
    })
}

/// A `ts` for a new message of a person, from the clock: unique (a counter in its micros).
fn new_ts() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{}.{:06}", now_unix(), n % 1_000_000)
}

/// An event as Slack sends it. Its `event_time` is set 5 minutes back: on the soak's scaled
/// clock Slack's last retry comes 10 s after the first delivery, where Slack's own comes 5
/// minutes after the event, and slack-once takes a retry 3 for the last only when it is signed
/// at least 4 minutes after `event_time` (a forged retry header cannot make a delivery the last).
fn envelope(event_id: &str, event: Value) -> String {
    json!({
        "token": "unused", "team_id": TEAM, "api_app_id": APP_ID, "type": "event_callback",
        "event_id": event_id, "event_time": now_unix() - 300, "event": event,
        "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": true}]
    })
    .to_string()
}

fn form(pairs: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

fn interaction(payload: Value) -> String {
    form(&[("payload", &payload.to_string())])
}

/// A `client_msg_id` (a UUID's shape) of request `i`.
fn client_msg_id(i: u64) -> String {
    format!("50a40000-0000-4000-8000-{i:012}")
}

/// The kind to draw for the next request.
pub fn draw(rng: &mut Rng) -> Kind {
    let roll = rng.below(1000) as u64;
    let mut upto = 0;
    for (kind, per_mille) in MIX {
        upto += per_mille;
        if roll < upto {
            return kind;
        }
    }
    Kind::Bare
}

/// Plans request `i` of kind `kind`, drawn from `rng`. `origin` is the stand-in's (response
/// URLs live there); `clickable` gives a click its message (taken from the pool).
pub fn plan(
    i: u64,
    kind: Kind,
    rng: &mut Rng,
    origin: &str,
    clickable: &mut Vec<Clickable>,
) -> Planned {
    let m = marker(i);
    let kind = match kind {
        Kind::Click if clickable.is_empty() => Kind::Mention,
        kind => kind,
    };
    let first = |body: String, form: bool| Delivery {
        body,
        form,
        after: Duration::ZERO,
    };
    let mut planned = Planned {
        kind,
        deliveries: Vec::new(),
        marker: Some(m.clone()),
        keys: Vec::new(),
        clicked: None,
        ack_lost: kind.is_event() && rng.chance(ACK_LOST),
    };
    match kind {
        Kind::Mention | Kind::Question => {
            let (channel, user, channel_type) = if kind == Kind::Mention {
                let c = format!("C{:04}", 1 + rng.below(CHANNELS));
                (c, format!("U{:04}", 1 + rng.below(500)), "channel")
            } else {
                let n = 1 + rng.below(ASKERS);
                (format!("D{n:04}"), format!("U{n:04}"), "im")
            };
            let ts = new_ts();
            let text = match kind {
                Kind::Mention => format!("<@{BOT_USER}> question {m}"),
                _ => format!("what is {m}"),
            };
            let event = |ts: &str, kind: &str| {
                let mut e = json!({
                    "type": kind, "user": user, "text": text, "ts": ts, "channel": channel,
                    "event_ts": ts, "client_msg_id": client_msg_id(i), "team": TEAM,
                });
                if kind == "message" {
                    e["channel_type"] = channel_type.into();
                }
                e
            };
            let event_type = if kind == Kind::Mention {
                "app_mention"
            } else {
                "message"
            };
            planned.deliveries.push(first(
                envelope(&format!("Ev{m}"), event(&ts, event_type)),
                false,
            ));
            if kind == Kind::Mention && rng.chance(ALSO_AS_MESSAGE) {
                planned.deliveries.push(Delivery {
                    body: envelope(&format!("Ev{m}m"), event(&ts, "message")),
                    form: false,
                    after: Duration::from_millis(rng.below(1500) as u64),
                });
            }
            planned.keys.push(message_key(TEAM, &channel, &ts));
            planned
                .keys
                .push(format!("cmid-{TEAM}-{}", client_msg_id(i)));
            if rng.chance(PHANTOM) {
                let phantom_ts = new_ts();
                planned.deliveries.push(Delivery {
                    body: envelope(&format!("Ev{m}p"), event(&phantom_ts, event_type)),
                    form: false,
                    after: Duration::from_millis(500 + rng.below(2500) as u64),
                });
                planned.keys.push(message_key(TEAM, &channel, &phantom_ts));
            }
        }
        Kind::Bare => {
            planned.marker = None;
            let channel = format!("C{:04}", 1 + rng.below(CHANNELS));
            let event = if rng.chance(500) {
                // A reaction to a person's message in the channel (which exists: it is the
                // one posted here first).
                let ts = new_ts();
                let said = envelope(
                    &format!("Ev{m}s"),
                    json!({"type": "message", "channel_type": "channel", "user": "U0002",
                        "text": "just chatting", "ts": ts, "channel": channel, "event_ts": ts}),
                );
                crate::helpers::register_event_message(said.as_bytes());
                json!({"type": "reaction_added", "user": "U0003", "reaction": "tada",
                    "item": {"type": "message", "channel": channel, "ts": ts},
                    "item_user": "U0002", "event_ts": new_ts()})
            } else {
                // A person's message nobody asked the bot about.
                let ts = new_ts();
                json!({"type": "message", "channel_type": "channel", "user": "U0002",
                    "text": format!("chatting {m}"), "ts": ts, "channel": channel,
                    "event_ts": ts, "client_msg_id": client_msg_id(i)})
            };
            planned
                .deliveries
                .push(first(envelope(&format!("Ev{m}"), event), false));
        }
        Kind::Command => {
            let channel = format!("C{:04}", 1 + rng.below(CHANNELS));
            let url = format!("{origin}/commands/{TEAM}/{channel}/{m}");
            let trigger = slack_once::testing::Workspace::trigger_id();
            let body = form(&[
                ("command", "/once"),
                ("text", &m),
                ("team_id", TEAM),
                ("api_app_id", APP_ID),
                ("user_id", "U0001"),
                ("channel_id", &channel),
                ("trigger_id", &trigger),
                ("response_url", &url),
            ]);
            planned.keys.extend(interaction_key(&body));
            planned.deliveries.push(first(body, true));
        }
        Kind::Click => {
            let (channel, ts, message) = clickable.swap_remove(rng.below(clickable.len()));
            let user = format!("U{m}");
            let body = interaction(json!({
                "type": "block_actions",
                "team": {"id": TEAM},
                "user": {"id": user, "team_id": TEAM},
                "api_app_id": APP_ID,
                "trigger_id": slack_once::testing::Workspace::trigger_id(),
                "actions": [{"type": "button", "action_id": "soak_helpful", "block_id": "b",
                    "value": "helpful", "action_ts": format!("{}.{:06}", now_unix(), i % 1_000_000)}],
                "container": {"type": "message", "message_ts": ts, "channel_id": channel},
                "channel": {"id": channel},
                "message": message,
                "response_url": format!("{origin}/actions/{TEAM}/{channel}/{ts}/{m}"),
            }));
            planned.keys.extend(interaction_key(&body));
            planned.deliveries.push(first(body, true));
            planned.clicked = Some((channel, ts));
        }
        Kind::Note => {
            let user = format!("U{:04}", 1 + rng.below(500));
            let body = interaction(json!({
                "type": "view_submission",
                "team": {"id": TEAM},
                "user": {"id": user, "team_id": TEAM},
                "api_app_id": APP_ID,
                "trigger_id": slack_once::testing::Workspace::trigger_id(),
                "view": {
                    "id": format!("V{m}"), "team_id": TEAM, "type": "modal",
                    "callback_id": "soak_note", "hash": format!("{}.hash", now_unix()),
                    "app_id": APP_ID, "app_installed_team_id": TEAM,
                    "state": {"values": {"note": {"note_text":
                        {"type": "plain_text_input", "value": format!("note {m}")}}}},
                },
                "response_urls": [],
            }));
            planned.keys.extend(interaction_key(&body));
            planned.deliveries.push(first(body.clone(), true));
            if rng.chance(DOUBLE_SUBMIT) {
                planned.deliveries.push(Delivery {
                    body,
                    form: true,
                    after: Duration::from_millis(50 + rng.below(450) as u64),
                });
            }
        }
    }
    planned
}

/// The ledger key of an interaction's form.
fn interaction_key(form: &str) -> Option<String> {
    slack_once::slack::Interaction::from_form(form.as_bytes())
        .ok()
        .and_then(|c| c.key())
        .map(|k| k.to_string())
}
