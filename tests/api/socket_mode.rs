//! The Socket Mode stand-in (`FakeSlack::socket_mode`) as a Socket Mode client meets it, over
//! real WebSockets on 127.0.0.1 (a tokio-tungstenite client): `apps.connections.open` and its
//! token rule, the `hello`'s count, envelopes spread over connections, an unacknowledged event
//! redelivered with `retry_attempt` and a command never, copies of an event, recycling
//! (`refresh_requested`, `warning`, the close after it), `too_many_websockets`, `link_disabled`,
//! and a ghost connection swallowing what it is sent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use slack_once::testing::{
    APP_ID, ConnectionState, EnvelopeKind, EventCopy, EventDelivery, FakeSlack, MAX_CONNECTIONS,
    Notice, Recycling,
};
use tokio_tungstenite::tungstenite::Message;

use crate::helpers::HttpClient;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// `apps.connections.open` with `token` (in `Authorization`, as Slack asks), or with none.
async fn open(slack: &FakeSlack, token: Option<&str>) -> Value {
    let mut headers = vec![(
        "content-type".to_string(),
        "application/x-www-form-urlencoded".to_string(),
    )];
    if let Some(token) = token {
        headers.push(("authorization".into(), format!("Bearer {token}")));
    }
    let url = format!("{}/apps.connections.open", slack.base_url());
    HttpClient::default()
        .request("POST", &url, &headers, "")
        .await
        .json()
}

/// A new connection of the app (its URL with `query` appended), and the first message it read.
async fn connect_with(slack: &FakeSlack, query: &str) -> (Socket, Value) {
    let opened = open(slack, Some(&slack.socket_mode().app_token())).await;
    assert_eq!(opened["ok"], true, "{opened}");
    let url = format!("{}{query}", opened["url"].as_str().expect("a url"));
    let (mut socket, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("the WebSocket opens");
    let first = next_json(&mut socket, Duration::from_secs(5))
        .await
        .expect("a first message");
    (socket, first)
}

async fn connect(slack: &FakeSlack) -> (Socket, Value) {
    connect_with(slack, "").await
}

/// The next text message as JSON; `None` when none comes within `within` or the socket closes.
async fn next_json(socket: &mut Socket, within: Duration) -> Option<Value> {
    tokio::time::timeout(within, async {
        while let Some(Ok(message)) = socket.next().await {
            match message {
                Message::Text(text) => return serde_json::from_str(text.as_str()).ok(),
                Message::Close(_) => return None,
                _ => {}
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
}

/// Whether the server closes the socket within `within` (a close frame, or the end).
async fn closed_within(socket: &mut Socket, within: Duration) -> bool {
    tokio::time::timeout(within, async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return true,
                Some(Ok(_)) => {}
            }
        }
    })
    .await
    .unwrap_or(false)
}

/// Whether a ping frame comes within `within`.
async fn pinged_within(socket: &mut Socket, within: Duration) -> bool {
    tokio::time::timeout(within, async {
        while let Some(Ok(message)) = socket.next().await {
            if let Message::Ping(_) = message {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false)
}

async fn ack(socket: &mut Socket, envelope: &Value, payload: Option<Value>) {
    let mut ack = json!({"envelope_id": envelope["envelope_id"]});
    if let Some(payload) = payload {
        ack["payload"] = payload;
    }
    socket
        .send(Message::Text(ack.to_string().into()))
        .await
        .expect("the ack is sent");
}

/// Reads `socket` (connection `id`) until it closes, acknowledging every envelope at once and
/// keeping (connection, envelope).
fn acknowledge_all(
    mut socket: Socket,
    id: u64,
    seen: Arc<Mutex<Vec<(u64, Value)>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(envelope) = next_json(&mut socket, Duration::from_secs(30)).await {
            if envelope["envelope_id"].is_string() {
                ack(&mut socket, &envelope, None).await;
                seen.lock().unwrap().push((id, envelope));
            }
        }
    })
}

fn mention(slack: &FakeSlack, text: &str) -> Value {
    slack
        .socket_mode()
        .event_callback(json!({"type": "app_mention", "text": text, "user": "U1", "channel": "C1", "ts": "1.000001"}))
}

#[tokio::test]
async fn apps_connections_open_takes_only_the_app_level_token() {
    let slack = FakeSlack::start().await;
    let bot = open(&slack, Some("xoxb-1-bot")).await;
    assert_eq!(bot["error"], "not_allowed_token_type", "{bot}");
    let unknown = open(&slack, Some("xapp-1-A0OTHER-1-made-up")).await;
    assert_eq!(unknown["error"], "invalid_auth", "{unknown}");
    let none = open(&slack, None).await;
    assert_eq!(none["error"], "not_authed", "{none}");

    let opened = open(&slack, Some(&slack.socket_mode().app_token())).await;
    assert_eq!(opened["ok"], true, "{opened}");
    let url = opened["url"].as_str().unwrap();
    assert!(url.starts_with("ws://127.0.0.1:"), "{url}");
    assert!(url.contains("/link/?ticket="), "{url}");
    let (_socket, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("the ticket opens a connection");
    let again = tokio_tungstenite::connect_async(url).await;
    assert!(again.is_err(), "a ticket opens one connection");
    assert_eq!(slack.counts()["apps.connections.open"], 4);

    // Whatever rule the Web API's tokens follow, the app-level token opens connections.
    slack.require_bot_token(None);
    let ruled = open(&slack, Some(&slack.socket_mode().app_token())).await;
    assert_eq!(ruled["ok"], true, "{ruled}");
    let oauth = FakeSlack::start().await.with_oauth("1.2", "secret");
    let installed = open(&oauth, Some(&oauth.socket_mode().app_token())).await;
    assert_eq!(installed["ok"], true, "{installed}");
}

#[tokio::test]
async fn hello_counts_every_connection_the_app_holds_ghosts_included() {
    let slack = FakeSlack::start().await;
    let socket_mode = slack.socket_mode();
    let (_first, hello) = connect(&slack).await;
    assert_eq!(hello["type"], "hello", "{hello}");
    assert_eq!(hello["num_connections"], 1, "{hello}");
    assert_eq!(hello["connection_info"]["app_id"], APP_ID, "{hello}");
    assert_eq!(hello["debug_info"]["approximate_connection_time"], 3600);
    assert!(hello["debug_info"]["host"].is_string(), "{hello}");

    socket_mode.add_ghost();
    let (_second, hello) = connect_with(&slack, "&debug_reconnects=true").await;
    assert_eq!(hello["num_connections"], 3, "a ghost counts: {hello}");
    assert_eq!(
        hello["debug_info"]["approximate_connection_time"], 360,
        "debug_reconnects shortens the connection's life: {hello}"
    );
    assert_eq!(socket_mode.num_connections(), 3);
}

#[tokio::test]
async fn envelopes_are_spread_over_the_connections_and_each_ack_is_kept() {
    let slack = FakeSlack::start().await;
    let socket_mode = slack.socket_mode();
    let seen = Arc::new(Mutex::new(Vec::new()));
    for id in 1..=3 {
        let (socket, _) = connect(&slack).await;
        acknowledge_all(socket, id, seen.clone());
    }
    let sent: Vec<String> = (0..30)
        .map(|n| socket_mode.send_event(mention(&slack, &format!("hi {n}"))))
        .collect();
    let acked = socket_mode.wait_for(Duration::from_secs(10), |s| s.acks().len() == 30);
    assert!(acked.await, "every envelope acknowledged");

    let seen = seen.lock().unwrap().clone();
    for id in 1..=3 {
        assert!(
            seen.iter().any(|(c, _)| *c == id),
            "connection {id} got none of 30"
        );
    }
    let deliveries = socket_mode.deliveries();
    assert_eq!(
        deliveries.len(),
        30,
        "each sent once: all acknowledged in time"
    );
    for (connection, envelope) in &seen {
        let id = envelope["envelope_id"].as_str().unwrap();
        assert!(sent.iter().any(|s| s == id));
        let delivery = deliveries.iter().find(|d| d.envelope_id == id).unwrap();
        assert_eq!(delivery.connection, Some(*connection));
        assert_eq!(envelope["type"], "events_api");
        assert_eq!(envelope["accepts_response_payload"], false);
        assert_eq!(envelope["retry_attempt"], 0);
        assert_eq!(envelope["retry_reason"], "");
        assert_eq!(envelope["payload"]["type"], "event_callback");
    }
    assert!(socket_mode.acks().iter().all(|a| a.settled));
    assert!(socket_mode.lost().is_empty());
}

#[tokio::test]
async fn an_unacknowledged_event_is_redelivered_with_retry_attempt_and_a_command_never() {
    let slack = FakeSlack::start().await;
    let socket_mode = slack.socket_mode();
    let (mut socket, _) = connect(&slack).await;
    let short = Duration::from_millis(300);
    let delivery = EventDelivery {
        ack_deadline: short,
        ..EventDelivery::default()
    };
    let envelope_id = socket_mode.send_event_with(mention(&slack, "hi"), delivery.clone());
    let mut attempts = Vec::new();
    for _ in 0..3 {
        let envelope = next_json(&mut socket, Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(envelope["envelope_id"], envelope_id.as_str());
        attempts.push((
            envelope["retry_attempt"].clone(),
            envelope["retry_reason"].clone(),
        ));
        if attempts.len() == 3 {
            ack(&mut socket, &envelope, None).await;
        }
    }
    assert_eq!(
        attempts,
        [
            (json!(0), json!("")),
            (json!(1), json!("timeout")),
            (json!(2), json!("timeout"))
        ]
    );
    assert_eq!(
        next_json(&mut socket, Duration::from_millis(500)).await,
        None,
        "acknowledged: not sent again"
    );

    // Never acknowledged: the first delivery and three redeliveries, then given up.
    let unanswered = socket_mode.send_event_with(mention(&slack, "again"), delivery);
    for attempt in 0..=3 {
        let envelope = next_json(&mut socket, Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(envelope["retry_attempt"], attempt, "{envelope}");
    }
    assert_eq!(
        next_json(&mut socket, Duration::from_millis(500)).await,
        None
    );
    let lost = socket_mode.lost();
    assert_eq!(lost.len(), 1);
    assert_eq!(
        (lost[0].envelope_id.as_str(), lost[0].retry_attempt),
        (unanswered.as_str(), 3)
    );

    socket_mode.set_ack_deadline(short);
    let command = socket_mode.send_command(
        json!({"command": "/once", "text": "go", "user_id": "U1", "channel_id": "C1"}),
    );
    let envelope = next_json(&mut socket, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(envelope["type"], "slash_commands");
    assert_eq!(envelope["accepts_response_payload"], true);
    assert!(envelope.get("retry_attempt").is_none(), "{envelope}");
    assert_eq!(envelope["payload"]["command"], "/once");
    assert!(
        envelope["payload"]["response_url"]
            .as_str()
            .unwrap()
            .contains("/commands/")
    );
    assert_eq!(
        next_json(&mut socket, Duration::from_millis(600)).await,
        None,
        "a command is never sent again"
    );
    let lost = socket_mode.lost();
    assert_eq!(lost.len(), 2);
    assert_eq!(
        (lost[1].envelope_id.as_str(), lost[1].kind),
        (command.as_str(), EnvelopeKind::SlashCommands)
    );

    // Answered in time: the ack's payload is kept.
    let click = socket_mode.send_interactive(json!({"type": "block_actions", "actions": []}));
    let envelope = next_json(&mut socket, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(envelope["type"], "interactive");
    ack(&mut socket, &envelope, Some(json!({"text": "done"}))).await;
    assert!(
        socket_mode
            .wait_for(Duration::from_secs(2), |s| s.acks().len() == 2)
            .await
    );
    let answered = socket_mode.acks().pop().unwrap();
    assert_eq!(answered.envelope_id, click);
    assert_eq!(answered.payload, Some(json!({"text": "done"})));
    assert!(answered.settled);
}

#[tokio::test]
async fn copies_of_an_event_come_as_users_report_them() {
    let slack = FakeSlack::start().await;
    let socket_mode = slack.socket_mode();
    let (mut socket, _) = connect(&slack).await;
    let callback = mention(&slack, "hi");
    let delivery = EventDelivery {
        copies: vec![
            (Duration::from_millis(100), EventCopy::SameEnvelope),
            (Duration::from_millis(200), EventCopy::NewEnvelope),
        ],
        ..EventDelivery::default()
    };
    let envelope_id = socket_mode.send_event_with(callback.clone(), delivery);
    let mut envelopes = Vec::new();
    for _ in 0..3 {
        let envelope = next_json(&mut socket, Duration::from_secs(2))
            .await
            .unwrap();
        ack(&mut socket, &envelope, None).await;
        envelopes.push(envelope);
    }
    assert!(
        envelopes
            .iter()
            .all(|e| e["retry_attempt"] == 0 && e["payload"] == callback)
    );
    assert_eq!(envelopes[0]["envelope_id"], envelope_id.as_str());
    assert_eq!(
        envelopes[1]["envelope_id"],
        envelope_id.as_str(),
        "the same envelope again"
    );
    assert_ne!(
        envelopes[2]["envelope_id"],
        envelope_id.as_str(),
        "a new envelope"
    );
}

#[tokio::test]
async fn a_connection_is_refreshed_on_schedule_then_closed_and_warned_on_demand() {
    let slack = FakeSlack::start().await;
    let socket_mode = slack.socket_mode();
    socket_mode.set_recycling(Recycling {
        lifetime: Duration::from_millis(300),
        grace: Duration::from_millis(300),
        ..Recycling::default()
    });
    let (mut recycled, hello) = connect(&slack).await;
    assert_eq!(hello["debug_info"]["approximate_connection_time"], 1);
    let notice = next_json(&mut recycled, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(notice["type"], "disconnect");
    assert_eq!(notice["reason"], "refresh_requested");
    // Still open through the grace: an envelope sent now reaches it.
    socket_mode.route_next(1);
    socket_mode.send_command(json!({"command": "/once"}));
    let envelope = next_json(&mut recycled, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(envelope["type"], "slash_commands");
    assert!(
        closed_within(&mut recycled, Duration::from_secs(2)).await,
        "closed after the grace"
    );
    assert_eq!(
        socket_mode.connections()[0].state,
        ConnectionState::ClosedBySlack
    );
    assert_eq!(socket_mode.num_connections(), 0);

    // debug_reconnects: a life of its own, shorter.
    socket_mode.set_recycling(Recycling {
        debug_lifetime: Duration::from_millis(200),
        grace: Duration::from_millis(200),
        ..Recycling::default()
    });
    let (mut lasting, _) = connect(&slack).await;
    let (mut debugged, _) = connect_with(&slack, "&debug_reconnects=true").await;
    let notice = next_json(&mut debugged, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(notice["reason"], "refresh_requested");
    assert!(closed_within(&mut debugged, Duration::from_secs(2)).await);
    assert_eq!(
        next_json(&mut lasting, Duration::from_millis(200)).await,
        None
    );
    lasting.close(None).await.unwrap();

    socket_mode.set_recycling(Recycling::default());
    let (mut warned, _) = connect(&slack).await;
    assert!(socket_mode.disconnect(4, Notice::Warning, Duration::from_millis(200)));
    let notice = next_json(&mut warned, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(notice["reason"], "warning");
    assert!(closed_within(&mut warned, Duration::from_secs(2)).await);
    assert_eq!(socket_mode.connections()[3].notices, ["warning"]);

    let (mut disabled, _) = connect(&slack).await;
    socket_mode.disable_link();
    let notice = next_json(&mut disabled, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(notice["reason"], "link_disabled");
    assert!(closed_within(&mut disabled, Duration::from_secs(2)).await);
}

#[tokio::test]
async fn an_eleventh_connection_is_refused_with_too_many_websockets() {
    let slack = FakeSlack::start().await;
    let socket_mode = slack.socket_mode();
    let mut held = Vec::new();
    for n in 1..=MAX_CONNECTIONS {
        let (socket, hello) = connect(&slack).await;
        assert_eq!(hello["num_connections"], n);
        held.push(socket);
    }
    let (mut refused, notice) = connect(&slack).await;
    assert_eq!(notice["type"], "disconnect");
    assert_eq!(notice["reason"], "too_many_websockets");
    assert!(closed_within(&mut refused, Duration::from_secs(2)).await);
    assert_eq!(socket_mode.num_connections(), MAX_CONNECTIONS);
    assert_eq!(
        socket_mode.connections()[10].state,
        ConnectionState::Refused
    );

    let mut first = held.remove(0);
    first.close(None).await.unwrap();
    assert!(
        socket_mode
            .wait_for(Duration::from_secs(2), |s| s.num_connections() == 9)
            .await
    );
    let (_again, hello) = connect(&slack).await;
    assert_eq!(hello["num_connections"], 10, "room again once one closed");
}

#[tokio::test]
async fn a_ghost_swallows_what_it_is_sent_and_only_events_come_back() {
    let slack = FakeSlack::start().await;
    let socket_mode = slack.socket_mode();
    socket_mode.set_server_ping(Some(Duration::from_millis(100)));
    let (mut live, _) = connect(&slack).await;
    let (mut half_open, _) = connect(&slack).await;
    assert!(
        pinged_within(&mut half_open, Duration::from_secs(2)).await,
        "Slack pings"
    );
    assert!(socket_mode.make_ghost(2));
    // Half-open from here: what was written before is read, then nothing, not even a ping.
    let mut buffered = 0;
    while tokio::time::timeout(Duration::from_millis(300), half_open.next())
        .await
        .is_ok()
    {
        buffered += 1;
        assert!(buffered < 5, "the ghost still writes");
    }
    socket_mode.set_ack_deadline(Duration::from_millis(200));

    socket_mode.route_next(2);
    let command = socket_mode.send_command(json!({"command": "/once"}));
    socket_mode.route_next(2);
    let click = socket_mode.send_interactive(json!({"type": "block_actions", "actions": []}));
    socket_mode.route_next(2);
    socket_mode.route_next(1);
    let event = socket_mode.send_event_with(
        mention(&slack, "hi"),
        EventDelivery {
            ack_deadline: Duration::from_millis(200),
            ..EventDelivery::default()
        },
    );
    let redelivered = next_json(&mut live, Duration::from_secs(2)).await.unwrap();
    assert_eq!(redelivered["envelope_id"], event.as_str());
    assert_eq!(redelivered["retry_attempt"], 1);
    assert_eq!(redelivered["retry_reason"], "timeout");
    ack(&mut live, &redelivered, None).await;
    assert!(
        socket_mode
            .wait_for(Duration::from_secs(2), |s| s.lost().len() == 2)
            .await
    );

    let lost: Vec<(String, bool)> = socket_mode
        .lost()
        .into_iter()
        .map(|l| (l.envelope_id, l.to_ghost))
        .collect();
    assert_eq!(lost, [(command, true), (click, true)]);
    let deliveries = socket_mode.deliveries();
    assert!(
        deliveries[..3]
            .iter()
            .all(|d| d.to_ghost && d.connection == Some(2))
    );
    assert_eq!(next_json(&mut live, Duration::from_millis(300)).await, None);

    // Unrouted, envelopes are drawn among the registrations, the ghost's too: of 20 commands
    // the live connection acknowledges, some go to the ghost and are lost there.
    socket_mode.set_ack_deadline(Duration::from_secs(1));
    let commands: Vec<String> = (0..20)
        .map(|_| socket_mode.send_command(json!({"command": "/once"})))
        .collect();
    let mut acked = 0;
    while let Some(envelope) = next_json(&mut live, Duration::from_millis(400)).await {
        ack(&mut live, &envelope, None).await;
        acked += 1;
    }
    let all_settled = |s: &slack_once::testing::SocketMode| s.lost().len() - 2 + acked == 20;
    assert!(
        socket_mode
            .wait_for(Duration::from_secs(3), all_settled)
            .await
    );
    let swallowed = socket_mode.lost().len() - 2;
    assert!(
        acked > 0 && swallowed > 0,
        "{acked} acked, {swallowed} swallowed"
    );
    assert_eq!(acked + swallowed, commands.len());
    assert!(socket_mode.lost()[2..].iter().all(|l| l.to_ghost));

    // The half-open side reads nothing, and its ping goes unanswered.
    half_open.send(Message::Ping(vec![1].into())).await.unwrap();
    let answered = tokio::time::timeout(Duration::from_millis(500), half_open.next()).await;
    assert!(answered.is_err(), "nothing comes back: {answered:?}");
    drop(half_open);

    // Slack keeps the registration after the client is gone, until it forgets it.
    let (_next, hello) = connect(&slack).await;
    assert_eq!(hello["num_connections"], 3, "{hello}");
    assert!(socket_mode.forget_ghost(2));
    assert_eq!(socket_mode.num_connections(), 2);
}

#[tokio::test]
async fn with_no_connection_a_command_is_lost_and_an_event_waits_for_its_redelivery() {
    // The gap of a client that closes its connection before opening the next.
    let slack = FakeSlack::start().await;
    let socket_mode = slack.socket_mode();
    let event = socket_mode.send_event_with(
        mention(&slack, "hi"),
        EventDelivery {
            ack_deadline: Duration::from_millis(300),
            ..EventDelivery::default()
        },
    );
    let command = socket_mode.send_command(json!({"command": "/once"}));
    let lost = socket_mode.lost();
    assert_eq!(lost.len(), 1, "the command at once: {lost:?}");
    assert_eq!(
        (lost[0].envelope_id.as_str(), lost[0].connection),
        (command.as_str(), None)
    );

    let (mut socket, _) = connect(&slack).await;
    let redelivered = next_json(&mut socket, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(redelivered["envelope_id"], event.as_str());
    assert_eq!(redelivered["retry_attempt"], 1);
    assert_eq!(socket_mode.deliveries()[0].connection, None);
}
