//! The Socket Mode ingress (`SLACK_APP_TOKEN`): the built binary's processes, each holding its
//! connections to the Socket Mode stand-in (`FakeSlack::socket_mode`), on one DynamoDB Local
//! table. Slack's redeliveries, copies of one event, recycled connections, a claim whose answer
//! is lost with its process killed, and a drain at SIGTERM: every request answered once, and
//! none lost while Slack has a delivery left.

use std::time::Duration;

use serde_json::{Value, json};
use slack_once::testing::{
    ConnectionState, EnvelopeKind, EventCopy, EventDelivery, FakeSlack, Notice, Recycling,
    default_identity,
};

use crate::helpers::*;

/// The app's Socket Mode deployment: its Slack, its table, its processes' variables.
struct SocketApp {
    slack: FakeSlack,
    vars: Vec<(&'static str, String)>,
}

impl SocketApp {
    /// The reference bot over Socket Mode on a fresh table, its ledger reached through
    /// `ledger_endpoint` (DynamoDB Local, or a proxy in front of it), `extra` added.
    async fn start(ledger_endpoint: Option<&str>, extra: &[(&'static str, &str)]) -> Self {
        let slack = FakeSlack::start_for(default_identity()).await;
        let endpoint = dynamodb_endpoint();
        let (table, _) = fresh_table(&endpoint).await;
        let mut vars = dynamodb_env(ledger_endpoint.unwrap_or(&endpoint));
        vars.extend([
            ("DEDUP_TABLE", table),
            ("SLACK_APP_TOKEN", slack.socket_mode().app_token()),
            ("SLACK_API_URL", slack.base_url().to_string()),
            ("SLACK_BOT_TOKEN", "xoxb-socket-mode-test".to_string()),
        ]);
        for (k, v) in extra {
            vars.retain(|(name, _)| name != k);
            vars.push((k, v.to_string()));
        }
        Self { slack, vars }
    }

    /// A process of the app (no signing secret: Socket Mode needs none), once it holds a
    /// connection.
    async fn process(&self) -> BotProcess {
        let bot = self.spawn();
        let log = bot
            .log_when(Duration::from_secs(15), |log| {
                log.contains("Socket Mode connection open")
            })
            .await;
        assert!(
            log.contains("Socket Mode connection open"),
            "a connection opened; its log:\n{log}"
        );
        bot
    }

    /// A process of the app, not waited for.
    fn spawn(&self) -> BotProcess {
        self.spawn_with(&[])
    }

    /// A process of the app run with `args` (`["worker"]`: deferred mode's worker), not
    /// waited for.
    fn spawn_with(&self, args: &[&str]) -> BotProcess {
        let how = Spawn {
            signing_secret_env: false,
            ..Spawn::default()
        };
        let program = std::path::PathBuf::from(env!("CARGO_BIN_EXE_slack-once"));
        BotProcess::spawn_program_with(&program, args, &self.vars, &how)
    }

    /// `GET /readyz`'s status on `process`.
    async fn readyz(&self, process: &BotProcess) -> u16 {
        HttpClient::default()
            .request(
                "GET",
                &format!("http://{}/readyz", process.addr),
                &[],
                Vec::new(),
            )
            .await
            .status
            .as_u16()
    }

    /// An `app_mention` of the bot, `n`, as its event callback (its own message in `C0SOCKET`).
    fn mention(&self, n: u32) -> Value {
        let ts = format!("1700002{n:03}.000100");
        self.slack.with_workspace(|w| {
            w.add_message(json!({
                "channel": "C0SOCKET", "user": "U0PERSON", "text": format!("hello {n}"), "ts": ts,
            }))
        });
        self.slack.socket_mode().event_callback(json!({
            "type": "app_mention", "user": "U0PERSON", "text": format!("<@U0BOT> hello {n}"),
            "channel": "C0SOCKET", "ts": ts, "event_ts": ts,
        }))
    }

    /// The bot's answers in the thread of mention `n`.
    fn answers_to(&self, n: u32) -> usize {
        let ts = format!("1700002{n:03}.000100");
        self.slack
            .messages()
            .iter()
            .filter(|m| m["thread_ts"] == ts.as_str())
            .count()
    }
}

/// Three processes of two connections each on one table; 1,000 mentions (a test may set
/// `SLACK_ONCE_SOCKET_MENTIONS`) sent with Slack's copies (the same envelope again with
/// `retry_attempt` 0, and a new envelope) while every connection is recycled every 2 s
/// (`refresh_requested`, closed 1 s later); one process killed, and then every process
/// replaced one by one (a rolling deploy: the new one up before the old one's SIGTERM): every
/// mention answered exactly once, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn mentions_are_answered_once_through_copies_recycling_a_kill_and_a_rolling_deploy() {
    let app = SocketApp::start(None, &[("DEDUP_LEASE_SECONDS", "5")]).await;
    let socket = app.slack.socket_mode();
    socket.set_recycling(Recycling {
        lifetime: Duration::from_secs(2),
        debug_lifetime: Duration::from_secs(2),
        notice: Notice::RefreshRequested,
        grace: Duration::from_secs(1),
    });
    let mut old = Vec::new();
    for _ in 0..3 {
        old.push(app.process().await);
    }
    let mut new = Vec::new();
    let mentions: u32 = std::env::var("SLACK_ONCE_SOCKET_MENTIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let delivery = EventDelivery {
        retry_gaps: [
            Duration::from_secs(1),
            Duration::from_secs(3),
            Duration::from_secs(5),
        ],
        copies: vec![
            (Duration::from_millis(300), EventCopy::SameEnvelope),
            (Duration::from_millis(700), EventCopy::NewEnvelope),
        ],
        ..EventDelivery::default()
    };
    for n in 1..=mentions {
        socket.send_event_with(app.mention(n), delivery.clone());
        // A quarter in, one process dies; then each is replaced in turn, its successor up
        // before it is told to go.
        let step = mentions / 8;
        match n {
            _ if n == 2 * step => old[0].kill(),
            _ if n == 3 * step || n == 4 * step || n == 5 * step => {
                new.push(app.process().await);
                let i = (n / step - 3) as usize;
                if i > 0 {
                    old[i].terminate();
                }
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(8)).await;
    }
    let all = socket
        .wait_for(Duration::from_secs(90), |_| {
            (1..=mentions).all(|n| app.answers_to(n) >= 1)
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let unanswered: Vec<u32> = (1..=mentions).filter(|n| app.answers_to(*n) == 0).collect();
    let twice: Vec<u32> = (1..=mentions).filter(|n| app.answers_to(*n) > 1).collect();
    assert!(all && unanswered.is_empty(), "unanswered: {unanswered:?}");
    assert!(twice.is_empty(), "answered more than once: {twice:?}");
    for (i, process) in old.into_iter().enumerate().skip(1) {
        let (code, log) = process.exited().await;
        assert_eq!(code, Some(0), "old process {i} drained and exited:\n{log}");
    }
    let opened = app.slack.counts().get("apps.connections.open").copied();
    assert!(
        opened.unwrap_or(0) > 12,
        "the recycled connections were replaced: {opened:?} opens"
    );
}

/// One of a process's connections goes half-open (Slack neither reads nor writes it, nor
/// answers its pings) and keeps its registration, swallowing the event first sent there: the
/// process finds the silence and opens a replacement within its limit; once Slack drops the
/// ghost, the event's redelivery is answered, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_half_open_connection_is_replaced_and_what_it_swallowed_comes_again() {
    let app = SocketApp::start(None, &[]).await;
    let bot = app.process().await;
    let socket = app.slack.socket_mode();
    let ghost = socket.connections()[0].id;
    assert!(socket.make_ghost(ghost));
    socket.route_next(ghost);
    let delivery = EventDelivery {
        retry_gaps: [
            Duration::from_secs(1),
            Duration::from_secs(5),
            Duration::from_secs(15),
        ],
        ..EventDelivery::default()
    };
    socket.send_event_with(app.mention(1), delivery);
    let log = bot
        .log_when(Duration::from_secs(30), |log| {
            log.contains("taken for dead")
        })
        .await;
    assert!(log.contains("taken for dead"), "{log}");
    assert!(socket.forget_ghost(ghost));
    let replaced = socket
        .wait_for(Duration::from_secs(10), |s| {
            s.connections()
                .iter()
                .filter(|c| c.state == ConnectionState::Open)
                .count()
                >= 2
        })
        .await;
    assert!(replaced, "{:?}", socket.connections());
    let answered = socket
        .wait_for(Duration::from_secs(30), |_| app.answers_to(1) >= 1)
        .await;
    assert!(answered, "{:?}", socket.deliveries());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(app.answers_to(1), 1);
    let first = &socket.deliveries()[0];
    assert!(
        first.to_ghost,
        "the first delivery was swallowed: {first:?}"
    );
}

/// `/once` over Socket Mode: acknowledged with the listener's answer as the acknowledgement's
/// payload (the ephemeral "On it"), then answered once in the channel through its
/// `response_url`, though two processes hold connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_command_is_acknowledged_with_its_answer_and_answered_once() {
    let app = SocketApp::start(None, &[]).await;
    let (_a, _b) = (app.process().await, app.process().await);
    let socket = app.slack.socket_mode();
    let envelope_id = socket.send_command(json!({
        "command": "/once", "text": "over a socket", "user_id": "U0PERSON",
        "channel_id": "C0SOCKET",
    }));
    let acked = socket
        .wait_for(Duration::from_secs(10), |s| {
            s.acks().iter().any(|a| a.envelope_id == envelope_id)
        })
        .await;
    assert!(acked, "acknowledged");
    let ack = socket
        .acks()
        .into_iter()
        .find(|a| a.envelope_id == envelope_id)
        .unwrap();
    assert!(ack.settled, "in time");
    let payload = ack.payload.expect("the answer as its payload");
    assert!(
        payload["text"].as_str().unwrap_or("").contains("On it"),
        "{payload}"
    );
    let answered = socket
        .wait_for(Duration::from_secs(10), |_| {
            app.slack
                .messages()
                .iter()
                .any(|m| m["text"].as_str().unwrap_or("").contains("over a socket"))
        })
        .await;
    assert!(answered, "answered in the channel");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let answers = app
        .slack
        .messages()
        .iter()
        .filter(|m| m["text"].as_str().unwrap_or("").contains("over a socket"))
        .count();
    assert_eq!(answers, 1);
    assert!(socket.lost().is_empty(), "{:?}", socket.lost());
}

/// The process holding an event's claim killed after DynamoDB wrote the claim and before its
/// answer came back: no acknowledgement went out, so Slack redelivers the event to another
/// connection, every try (as Slack's defaults: back to back, 3 s apart) inside the dead claim's
/// 10 s lease; the redelivery kept in hand takes the claim over once it lapses and answers,
/// once. Fails if an envelope is acknowledged before the ledger holds it, or if a redelivery
/// that finds the claim live is let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_process_killed_between_its_claim_and_the_acknowledgement_loses_nothing() {
    let proxy = LedgerProxy::start(&dynamodb_endpoint()).await;
    let app = SocketApp::start(Some(&proxy.url), &[]).await;
    let mut first = app.process().await;
    proxy.hold_next(LedgerOp::Claim, HoldAt::AfterForwarding);
    let socket = app.slack.socket_mode();
    socket.send_event(app.mention(1));
    proxy.wait_held().await;
    first.kill();
    let _second = app.process().await;
    let answered = socket
        .wait_for(Duration::from_secs(30), |_| app.answers_to(1) >= 1)
        .await;
    assert!(
        answered,
        "answered after the kill: {:?}",
        socket.deliveries()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(app.answers_to(1), 1);
    let attempts: Vec<u32> = socket
        .deliveries()
        .iter()
        .filter(|d| d.kind == EnvelopeKind::EventsApi)
        .map(|d| d.retry_attempt)
        .collect();
    assert!(attempts.len() >= 2, "redelivered: {attempts:?}");
}

/// `GET /readyz` answers 200 while a connection is open; at SIGTERM the process stops taking
/// envelopes, closes its connections itself and exits 0; a mention sent after is answered by
/// the process left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn at_sigterm_a_process_closes_its_connections_and_another_answers() {
    let app = SocketApp::start(None, &[]).await;
    let leaving = app.process().await;
    let staying = app.process().await;
    let http = HttpClient::default();
    let ready = http
        .request(
            "GET",
            &format!("http://{}/readyz", leaving.addr),
            &[],
            Vec::new(),
        )
        .await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    leaving.terminate();
    let (code, log) = leaving.exited().await;
    assert_eq!(code, Some(0), "{log}");
    let socket = app.slack.socket_mode();
    let closed = socket
        .connections()
        .iter()
        .filter(|c| c.state == ConnectionState::ClosedByClient)
        .count();
    assert_eq!(closed, 2, "{:?}", socket.connections());
    socket.send_event(app.mention(7));
    let answered = socket
        .wait_for(Duration::from_secs(10), |_| app.answers_to(7) == 1)
        .await;
    assert!(
        answered,
        "answered by the process left; its log:\n{}",
        staying.log()
    );
}

/// The guide's walk-through (docs/socket-mode.md), as a new user runs it: `slack-once standin`,
/// three replicas of the reference bot on DynamoDB Local with its app-level token, mentions
/// sent through `POST /_standin/socket/mention` with Slack's copies while the stand-in recycles
/// connections every 3 s; one replica killed, another restarted: `GET /_standin/state` shows
/// one answer in each mention's thread, and nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn the_guides_three_replicas_against_slack_once_standin_answer_each_mention_once() {
    let standin = StandinProcess::start().await;
    let http = HttpClient::default();
    let state = || async {
        http.request(
            "GET",
            &format!("{}/_standin/state", standin.origin()),
            &[],
            Vec::new(),
        )
        .await
        .json()
    };
    let token = state().await["socket_mode"]["app_token"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        standin
            .post("socket/recycle", json!({"every_seconds": 3}))
            .await["ok"],
        true
    );
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let mut vars = dynamodb_env(&endpoint);
    vars.extend([
        ("DEDUP_TABLE", table),
        ("SLACK_APP_TOKEN", token),
        ("SLACK_API_URL", standin.base_url.clone()),
        ("SLACK_BOT_TOKEN", "xoxb-walk-through".to_string()),
    ]);
    let how = Spawn {
        signing_secret_env: false,
        ..Spawn::default()
    };
    let program = std::path::PathBuf::from(env!("CARGO_BIN_EXE_slack-once"));
    let replica = || {
        let bot = BotProcess::spawn_program_with(&program, &[], &vars, &how);
        async move {
            bot.log_when(Duration::from_secs(15), |l| {
                l.contains("Socket Mode connection open")
            })
            .await;
            bot
        }
    };
    let mut replicas = vec![replica().await, replica().await, replica().await];
    let mut threads = Vec::new();
    for n in 0..20 {
        let sent = standin
            .post(
                "socket/mention",
                json!({"channel": "C0WALK", "text": format!("question {n}"), "copies": true}),
            )
            .await;
        assert_eq!(sent["ok"], true, "{sent}");
        threads.push(sent["ts"].as_str().unwrap().to_string());
        if n == 6 {
            replicas[0].kill();
        }
        if n == 12 {
            replicas[1].terminate();
            replicas.push(replica().await);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answers_in = |state: &Value, thread: &str| {
        state["messages"]["C0WALK"]
            .as_array()
            .map(|all| {
                all.iter()
                    .filter(|m| m["thread_ts"] == thread && !m["bot_id"].is_null())
                    .count()
            })
            .unwrap_or(0)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut shown = state().await;
    while threads.iter().any(|t| answers_in(&shown, t) == 0)
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(250)).await;
        shown = state().await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let shown = state().await;
    let counts: Vec<usize> = threads.iter().map(|t| answers_in(&shown, t)).collect();
    assert!(
        counts.iter().all(|c| *c == 1),
        "answers per mention: {counts:?}\nSocket Mode: {}\nreplica 2:\n{}",
        shown["socket_mode"],
        replicas[2].log()
    );
    let lost = &shown["socket_mode"]["lost"];
    assert!(
        lost.as_array().is_none_or(|l| l.is_empty()),
        "Slack gave up on: {lost}"
    );
}

/// Commands and clicks, which Slack never redelivers, sent while two processes' connections
/// are recycled every second: each acknowledged in time on some connection, with the
/// command's answer as the acknowledgement's payload; each command answered once in the
/// channel, and each click on an answer's button updating that answer once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn commands_and_clicks_during_recycling_are_each_answered_once() {
    let app = SocketApp::start(None, &[]).await;
    let socket = app.slack.socket_mode();
    socket.set_recycling(Recycling {
        lifetime: Duration::from_secs(1),
        debug_lifetime: Duration::from_secs(1),
        notice: Notice::RefreshRequested,
        grace: Duration::from_secs(1),
    });
    let (_a, _b) = (app.process().await, app.process().await);
    const COMMANDS: usize = 8;
    let mut envelopes = Vec::new();
    for i in 0..COMMANDS {
        envelopes.push(socket.send_command(json!({
            "command": "/once", "text": format!("during a refresh {i}"),
            "user_id": "U0PERSON", "channel_id": "C0SOCKET",
        })));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let answer_of = |i: usize| {
        let said = format!("during a refresh {i}”");
        app.slack
            .messages()
            .into_iter()
            .filter(|m| m["text"].as_str().unwrap_or("").contains(&said))
            .collect::<Vec<_>>()
    };
    let answered = socket
        .wait_for(Duration::from_secs(20), |_| {
            (0..COMMANDS).all(|i| !answer_of(i).is_empty())
        })
        .await;
    assert!(answered, "lost: {:?}", socket.lost());
    let mut clicks = Vec::new();
    for i in 0..COMMANDS {
        let answers = answer_of(i);
        assert_eq!(answers.len(), 1, "command {i}: {answers:?}");
        let message = &answers[0];
        let (channel, ts) = (message["channel"].clone(), message["ts"].clone());
        clicks.push(socket.send_interactive(json!({
            "type": "block_actions", "user": {"id": "U0CLICKER"},
            "trigger_id": slack_once::testing::Workspace::trigger_id(),
            "actions": [{"type": "button", "action_id": "once_thanks", "block_id": "b",
                         "value": "helpful", "action_ts": format!("1700003000.{i:06}")}],
            "container": {"type": "message", "message_ts": ts, "channel_id": channel},
            "channel": {"id": channel}, "message": message,
        })));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let all_acked = socket
        .wait_for(Duration::from_secs(20), |s| {
            envelopes
                .iter()
                .chain(&clicks)
                .all(|e| s.acks().iter().any(|a| &a.envelope_id == e && a.settled))
        })
        .await;
    assert!(
        all_acked,
        "acks: {:?}\nlost: {:?}",
        socket.acks(),
        socket.lost()
    );
    for e in &envelopes {
        let ack = socket
            .acks()
            .into_iter()
            .find(|a| &a.envelope_id == e)
            .unwrap();
        assert!(
            ack.payload.is_some(),
            "a command's answer in its ack: {ack:?}"
        );
    }
    let updated = socket
        .wait_for(Duration::from_secs(20), |_| {
            app.slack
                .calls()
                .iter()
                .filter(|(m, _)| m == "chat.update")
                .count()
                >= COMMANDS
        })
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let updates = app
        .slack
        .calls()
        .iter()
        .filter(|(m, _)| m == "chat.update")
        .count();
    assert!(
        updated && updates == COMMANDS,
        "{updates} updates for {COMMANDS} clicks"
    );
    assert!(socket.lost().is_empty(), "{:?}", socket.lost());
}

/// `SLACK_SOCKET_FLEET_CONNECTIONS` says what every process holds together: a `hello` that
/// counts more at Slack (a ghost registration kept after a half-open connection) is logged as
/// a warning and counted (`SocketGhostConnections`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_ghost_registration_is_warned_of_when_slack_counts_more_than_the_fleet_holds() {
    let app = SocketApp::start(None, &[("SLACK_SOCKET_FLEET_CONNECTIONS", "2")]).await;
    app.slack.socket_mode().add_ghost();
    let bot = app.process().await;
    let log = bot
        .log_when(Duration::from_secs(10), |log| {
            log.contains("SocketGhostConnections")
        })
        .await;
    assert!(
        log.contains("Slack counts more connections than the app's processes hold"),
        "{log}"
    );
    assert!(log.contains("SocketGhostConnections"), "{log}");
}

/// One process (`SLACK_SOCKET_CONNECTIONS=1`) holding in hand the redelivery of an event whose
/// claim a killed process left live: the process, and the id of the connection it came on.
async fn holding_an_event_in_hand(app: &SocketApp, proxy: &LedgerProxy) -> (BotProcess, u64) {
    let socket = app.slack.socket_mode();
    let mut first = app.process().await;
    proxy.hold_next(LedgerOp::Claim, HoldAt::AfterForwarding);
    socket.send_event(app.mention(1));
    proxy.wait_held().await;
    first.kill();
    let second = app.process().await;
    let open = |s: &slack_once::testing::SocketMode| {
        s.connections()
            .iter()
            .filter(|c| c.state == ConnectionState::Open)
            .map(|c| c.id)
            .max()
    };
    let held = open(&socket).expect("the second process's connection");
    let redelivered = socket
        .wait_for(Duration::from_secs(15), |s| {
            s.deliveries()
                .iter()
                .any(|d| d.connection == Some(held) && d.retry_attempt >= 1)
        })
        .await;
    assert!(redelivered, "{:?}", socket.deliveries());
    tokio::time::sleep(Duration::from_millis(300)).await;
    (second, held)
}

/// [`holding_an_event_in_hand`] (a 20 s lease), when Slack recycles the connection the event
/// came on (`warning`, closed 30 s later): the process, once its replacement is open, and the
/// ids of the recycled connection and of its replacement.
async fn recycled_while_an_event_is_held(
    app: &SocketApp,
    proxy: &LedgerProxy,
) -> (BotProcess, u64, u64) {
    let socket = app.slack.socket_mode();
    let (second, held) = holding_an_event_in_hand(app, proxy).await;
    let open = |s: &slack_once::testing::SocketMode| {
        s.connections()
            .iter()
            .filter(|c| c.state == ConnectionState::Open)
            .map(|c| c.id)
            .max()
    };
    assert!(socket.disconnect(held, Notice::Warning, Duration::from_secs(30)));
    let replaced = socket
        .wait_for(Duration::from_secs(10), |s| open(s) > Some(held))
        .await;
    assert!(replaced, "{:?}", socket.connections());
    tokio::time::sleep(Duration::from_millis(300)).await;
    (second, held, open(&socket).unwrap())
}

/// The app of one connection a process (`SLACK_SOCKET_CONNECTIONS=1`, a 20 s lease), its
/// ledger behind a proxy that can hold a claim's answer.
async fn one_connection_behind_a_proxy() -> (LedgerProxy, SocketApp) {
    let proxy = LedgerProxy::start(&dynamodb_endpoint()).await;
    let app = SocketApp::start(
        Some(&proxy.url),
        &[
            ("SLACK_SOCKET_CONNECTIONS", "1"),
            ("DEDUP_LEASE_SECONDS", "20"),
        ],
    )
    .await;
    (proxy, app)
}

/// A command Slack sends down a connection it is recycling, while that connection still
/// waits for an event in hand: processed and acknowledged with its answer there (Slack never
/// sends a command again; read and dropped, it was lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_command_read_on_a_connection_being_replaced_is_answered() {
    let (proxy, app) = one_connection_behind_a_proxy().await;
    let (bot, recycled, _) = recycled_while_an_event_is_held(&app, &proxy).await;
    let socket = app.slack.socket_mode();
    socket.route_next(recycled);
    let envelope_id = socket.send_command(json!({
        "command": "/once", "text": "while recycled", "user_id": "U0PERSON",
        "channel_id": "C0SOCKET",
    }));
    let acked = socket
        .wait_for(Duration::from_secs(10), |s| {
            s.acks()
                .iter()
                .any(|a| a.envelope_id == envelope_id && a.settled)
        })
        .await;
    let sent_to: Vec<_> = socket
        .deliveries()
        .into_iter()
        .filter(|d| d.envelope_id == envelope_id)
        .map(|d| d.connection)
        .collect();
    assert_eq!(sent_to, vec![Some(recycled)]);
    assert!(acked, "lost: {:?}\nits log:\n{}", socket.lost(), bot.log());
    let ack = socket
        .acks()
        .into_iter()
        .find(|a| a.envelope_id == envelope_id)
        .unwrap();
    assert_eq!(ack.connection, recycled);
    let text = ack.payload.expect("the answer")["text"].to_string();
    assert!(text.contains("On it"), "{text}");
}

/// A recycled connection given up on while an event was kept in hand (its close waits 5 s,
/// the event up to its lease) is counted closed: once its replacement goes too (Socket Mode
/// turned off), `GET /readyz` says 503, not ready with no connection at all. Nothing the
/// process logs holds the app-level token or a connection's ticket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_connection_closed_with_an_event_in_hand_no_longer_counts_as_ready() {
    let (proxy, app) = one_connection_behind_a_proxy().await;
    let (bot, recycled, _) = recycled_while_an_event_is_held(&app, &proxy).await;
    let socket = app.slack.socket_mode();
    let closed = socket
        .wait_for(Duration::from_secs(10), |s| {
            s.connections()[recycled as usize - 1].state == ConnectionState::ClosedByClient
        })
        .await;
    assert!(closed, "{:?}", socket.connections());
    socket.disable_link();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut status = app.readyz(&bot).await;
    while status != 503 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        status = app.readyz(&bot).await;
    }
    let log = bot.log();
    assert_eq!(
        status,
        503,
        "no connection open: {:?}\nits log:\n{log}",
        socket.connections()
    );
    assert!(
        !log.contains(&socket.app_token()),
        "the app-level token logged"
    );
    assert!(!log.contains("ticket="), "a connection's ticket logged");
}

/// The app at Slack's 10 connections (ghosts): a process refused `too_many_websockets` tries
/// again from 5 s (jittered), not every half second, and opens its connections once Slack
/// drops the ghosts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn too_many_websockets_at_the_handshake_backs_off_from_five_seconds() {
    let app = SocketApp::start(None, &[]).await;
    let socket = app.slack.socket_mode();
    let ghosts: Vec<u64> = (0..10).map(|_| socket.add_ghost()).collect();
    let bot = app.spawn();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let opens = app.slack.counts().get("apps.connections.open").copied();
    let log = bot.log();
    assert!(
        opens.is_some_and(|n| (2..=4).contains(&n)),
        "two slots, each tried at once and again after 5 s ± 25 %: {opens:?} opens\n{log}"
    );
    assert!(log.contains("TooMany"), "{log}");
    for ghost in ghosts {
        assert!(socket.forget_ghost(ghost));
    }
    let opened = socket
        .wait_for(Duration::from_secs(25), |s| {
            s.connections()
                .iter()
                .filter(|c| c.state == ConnectionState::Open)
                .count()
                == 2
        })
        .await;
    assert!(opened, "{:?}\n{}", socket.connections(), bot.log());
}

/// An Events API envelope whose `payload` is not an object: acknowledged (as HTTP answers a
/// body that is not a request with `x-slack-no-retry`), so Slack does not send it again, and
/// nothing else happens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn an_envelope_whose_payload_is_not_an_object_is_acknowledged_once() {
    let app = SocketApp::start(None, &[]).await;
    let bot = app.process().await;
    let socket = app.slack.socket_mode();
    let envelope_id =
        socket.send_event_with(json!(["not", "an", "object"]), EventDelivery::default());
    let acked = socket
        .wait_for(Duration::from_secs(5), |s| {
            s.acks().iter().any(|a| a.envelope_id == envelope_id)
        })
        .await;
    assert!(acked, "{:?}\n{}", socket.deliveries(), bot.log());
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(socket.deliveries().len(), 1, "{:?}", socket.deliveries());
    assert!(socket.lost().is_empty(), "{:?}", socket.lost());
    assert!(app.slack.messages().is_empty());
}

/// Deferred mode over Socket Mode (`WORK_QUEUE_URL`): a mention, sent as two envelopes, is
/// acknowledged once it is on the queue, before any worker runs; the worker started then
/// answers it, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn in_deferred_mode_an_event_is_acknowledged_once_queued_and_answered_once_by_the_worker() {
    let sqs = sqs_endpoint();
    let queue = TestQueue::create(&sqs, 5).await;
    let app = SocketApp::start(
        None,
        &[
            ("WORK_QUEUE_URL", &queue.url),
            ("AWS_ENDPOINT_URL_SQS", &sqs),
        ],
    )
    .await;
    let ingress = app.process().await;
    let socket = app.slack.socket_mode();
    let delivery = EventDelivery {
        copies: vec![(Duration::from_millis(300), EventCopy::NewEnvelope)],
        ..EventDelivery::default()
    };
    socket.send_event_with(app.mention(1), delivery);
    let acked = socket
        .wait_for(Duration::from_secs(5), |s| {
            s.acks().iter().filter(|a| a.settled).count() == 2
        })
        .await;
    assert!(acked, "{:?}\n{}", socket.acks(), ingress.log());
    assert_eq!(app.answers_to(1), 0, "no worker yet");
    let worker = app.spawn_with(&["worker"]);
    let answered = socket
        .wait_for(Duration::from_secs(20), |_| app.answers_to(1) >= 1)
        .await;
    assert!(answered, "the worker's log:\n{}", worker.log());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(app.answers_to(1), 1);
    assert!(socket.lost().is_empty(), "{:?}", socket.lost());
}

/// At SIGTERM, with an event kept in hand: a command Slack sends down the draining connection
/// before it closes is answered there; the process exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_command_read_on_a_draining_connection_is_answered() {
    let proxy = LedgerProxy::start(&dynamodb_endpoint()).await;
    let app = SocketApp::start(Some(&proxy.url), &[("SLACK_SOCKET_CONNECTIONS", "1")]).await;
    let (bot, draining) = holding_an_event_in_hand(&app, &proxy).await;
    bot.terminate();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let socket = app.slack.socket_mode();
    socket.route_next(draining);
    let envelope_id = socket.send_command(json!({
        "command": "/once", "text": "while draining", "user_id": "U0PERSON",
        "channel_id": "C0SOCKET",
    }));
    let acked = socket
        .wait_for(Duration::from_secs(5), |s| {
            s.acks()
                .iter()
                .any(|a| a.envelope_id == envelope_id && a.settled)
        })
        .await;
    let (code, log) = bot.exited().await;
    assert!(acked, "lost: {:?}\nits log:\n{log}", socket.lost());
    assert_eq!(code, Some(0), "{log}");
}

/// An HTTP ingress on the same table (its lease the HTTP default, 30 s, three times the Socket
/// Mode process's) killed after DynamoDB wrote its claim of an event and before the answer came
/// back; Slack also sends the event over Socket Mode, every try inside that 30 s: the
/// redelivery kept in hand outlasts the other ingress's lease, takes the claim over and
/// answers, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn an_event_claimed_by_a_dead_http_ingress_with_a_longer_lease_is_answered_over_socket_mode()
{
    let proxy = LedgerProxy::start(&dynamodb_endpoint()).await;
    let app = SocketApp::start(Some(&proxy.url), &[]).await;
    let socket_process = app.process().await;
    let http_vars: Vec<(&'static str, String)> = app
        .vars
        .iter()
        .filter(|(k, _)| *k != "SLACK_APP_TOKEN")
        .cloned()
        .collect();
    let mut http_ingress = BotProcess::spawn(&http_vars);
    let callback = app.mention(1);
    proxy.hold_next(LedgerOp::Claim, HoldAt::AfterForwarding);
    let (url, body) = (http_ingress.url(), callback.to_string());
    tokio::spawn(async move { deliver(&HttpClient::default(), &url, &body, None).await });
    proxy.wait_held().await;
    http_ingress.kill();
    let socket = app.slack.socket_mode();
    socket.send_event(callback);
    let answered = socket
        .wait_for(Duration::from_secs(50), |_| app.answers_to(1) >= 1)
        .await;
    assert!(
        answered,
        "answered: {:?}\n{}",
        socket.lost(),
        socket_process.log()
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(app.answers_to(1), 1);
}

/// DynamoDB unavailable when an event arrives (every request refused, through the proxy): the
/// claim cannot be written, so the envelope is not acknowledged (`SocketUnacknowledged`) and
/// nothing is posted; Slack's redelivery once DynamoDB is back is answered, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn an_event_whose_claim_cannot_be_written_is_not_acknowledged_and_its_redelivery_answered() {
    let proxy = LedgerProxy::start(&dynamodb_endpoint()).await;
    let app = SocketApp::start(Some(&proxy.url), &[]).await;
    let bot = app.process().await;
    let socket = app.slack.socket_mode();
    proxy.set_down(true);
    let envelope_id = socket.send_event(app.mention(1));
    let unacknowledged = bot
        .log_when(Duration::from_secs(10), |log| {
            log.contains("SocketUnacknowledged")
        })
        .await;
    assert!(
        unacknowledged.contains("SocketUnacknowledged"),
        "{unacknowledged}"
    );
    assert!(
        !socket.acks().iter().any(|a| a.envelope_id == envelope_id),
        "not acknowledged while the ledger is down"
    );
    assert_eq!(app.answers_to(1), 0);
    proxy.set_down(false);
    let answered = socket
        .wait_for(Duration::from_secs(20), |_| app.answers_to(1) >= 1)
        .await;
    assert!(answered, "{:?}", socket.deliveries());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(app.answers_to(1), 1);
    let retried = socket
        .acks()
        .iter()
        .any(|a| a.envelope_id == envelope_id && a.settled);
    assert!(retried, "a redelivery acknowledged: {:?}", socket.acks());
}
