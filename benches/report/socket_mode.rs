//! Part 9 of the report: Socket Mode. The reference bot's process takes the same app_mentions
//! over Socket Mode (`SLACK_APP_TOKEN`, two connections to the test kit's Socket Mode stand-in)
//! and over HTTP (signed `POST /slack/events`), side by side in one run, its ledger in memory and
//! then on DynamoDB Local, answering each (a reply in its thread on the same stand-in) before it
//! acknowledges. Over Socket Mode the time is the stand-in's, from the envelope handed to the
//! connection to its acknowledgement read back; over HTTP, the sender's round trip. Memory per
//! connection is the RSS of a process holding nine connections less one holding one, over eight.

use super::*;
use slack_once::testing::{FakeSlack, Identity};

/// Events per transport and ledger (`BENCH_SOCKET_EVENTS`).
fn events() -> usize {
    env_usize("BENCH_SOCKET_EVENTS", 300)
}

/// A process this part started, stopped (by its PID) when dropped, a failed phase's included.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A process of the reference bot posting to `slack`, with `extra` variables; its ledger on
/// `ledger` when given.
fn spawn_on(
    slack: &FakeSlack,
    ledger: Option<(&str, &str)>,
    extra: &[(&'static str, String)],
) -> (Running, u16) {
    let port = free_port();
    let mut vars = ledger
        .map(|(endpoint, _)| aws_env(endpoint))
        .unwrap_or_default();
    vars.extend([
        ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
        ("SLACK_BOT_TOKEN", "xoxb-bench".into()),
        ("SLACK_API_URL", slack.base_url().to_string()),
    ]);
    if let Some((_, table)) = ledger {
        vars.push(("DEDUP_TABLE", table.to_string()));
    }
    vars.extend(extra.iter().cloned());
    let mut command = Command::new(BIN);
    command
        .env_clear()
        .env("SLACK_SIGNING_SECRET", SECRET)
        .env("RUST_LOG", "warn")
        .env("METRICS", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in &vars {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("the binary starts");
    // Its warnings, for a phase that fails: printed as they come.
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if !line.contains("delivery refused") {
                eprintln!("  socket-mode bench process: {line}");
            }
        }
    });
    (Running(child), port)
}

/// Until `slack`'s Socket Mode holds `n` open connections (the part's one process at a time).
async fn wait_connections(slack: &FakeSlack, n: usize) {
    let socket = slack.socket_mode();
    let open = || {
        socket
            .connections()
            .iter()
            .filter(|c| c.state == slack_once::testing::ConnectionState::Open)
            .count()
    };
    let ok = socket
        .wait_for(Duration::from_secs(20), |_| open() >= n)
        .await;
    assert!(ok, "the Socket Mode connections did not open");
}

/// The mention `id` whose message is in `slack`'s conversation (as Slack's would be).
fn mention_on(slack: &FakeSlack, id: &str) -> String {
    let body = app_mention(id);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    slack.with_workspace(|w| {
        w.add_message(serde_json::json!({
            "channel": v["event"]["channel"], "ts": v["event"]["ts"], "user": "U0001",
            "text": v["event"]["text"],
        }))
    });
    body
}

/// `n` mentions over Socket Mode, one at a time: the time from each envelope to its ack (µs).
async fn over_socket(slack: &FakeSlack, tag: &str, n: usize) -> Latency {
    let socket = slack.socket_mode();
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let body = mention_on(slack, &format!("EvSock{tag}{i}"));
        let envelope_id = socket.send_event(serde_json::from_str(&body).unwrap());
        let acked = socket
            .wait_for(Duration::from_secs(10), |s| {
                s.acks().iter().rev().any(|a| a.envelope_id == envelope_id)
            })
            .await;
        assert!(acked, "envelope {envelope_id} acknowledged");
        let sent = socket
            .deliveries()
            .iter()
            .find(|d| d.envelope_id == envelope_id)
            .map(|d| d.sent_at)
            .unwrap();
        let read = socket
            .acks()
            .iter()
            .find(|a| a.envelope_id == envelope_id)
            .map(|a| a.read_at)
            .unwrap();
        times.push(read.duration_since(sent).as_secs_f64() * 1e6);
    }
    latency(times)
}

/// `n` mentions over HTTP to `port`, one at a time: the sender's round trip (µs).
async fn over_http(slack: &FakeSlack, port: u16, tag: &str, n: usize) -> Latency {
    let http = HttpClient::default();
    let url = format!("http://127.0.0.1:{port}/slack/events");
    wait_ready(&http, port).await;
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let body = mention_on(slack, &format!("EvHttp{tag}{i}"));
        let t = Instant::now();
        let status = http.send_event(&url, &body).await;
        assert_eq!(status, 200, "HTTP delivery {i}");
        times.push(since_us(t));
    }
    latency(times)
}

/// The RSS (KiB) of a Socket Mode process holding `connections` connections, settled.
async fn rss_with(slack: &FakeSlack, connections: usize) -> u64 {
    let before = slack.socket_mode().connections().len();
    let vars = [
        ("SLACK_APP_TOKEN", slack.socket_mode().app_token()),
        ("SLACK_SOCKET_CONNECTIONS", connections.to_string()),
    ];
    let (child, _) = spawn_on(slack, None, &vars);
    let socket = slack.socket_mode();
    let ok = socket
        .wait_for(Duration::from_secs(20), |s| {
            s.connections().len() >= before + connections
        })
        .await;
    assert!(ok, "{connections} connections opened");
    tokio::time::sleep(Duration::from_millis(500)).await;
    rss_kib(child.0.id(), "VmRSS:")
}

/// Part 9, as Markdown.
pub async fn socket_mode_section(endpoint: &str) -> String {
    let n = events();
    let slack = FakeSlack::start_for(Identity {
        team: "T0001".into(),
        app_id: "A0001".into(),
        bot_id: "B0001".into(),
        bot_user: "UBOT".into(),
    })
    .await;
    let app_token = slack.socket_mode().app_token();
    let table = fresh_table(endpoint, "socket").await;
    let mut rows = Vec::new();
    for (ledger_name, ledger) in [
        ("in memory", None),
        ("DynamoDB Local", Some((endpoint, table.as_str()))),
    ] {
        let (socket_child, _) = spawn_on(&slack, ledger, &[("SLACK_APP_TOKEN", app_token.clone())]);
        wait_connections(&slack, 2).await;
        let (http_child, port) = spawn_on(&slack, ledger, &[]);
        // Warm both, then measure them in turn, twice.
        let tag = ledger_name.replace(' ', "");
        over_socket(&slack, &format!("{tag}w"), 20).await;
        over_http(&slack, port, &format!("{tag}w"), 20).await;
        let mut socket_runs = Vec::new();
        let mut http_runs = Vec::new();
        for round in 0..2 {
            socket_runs.push(over_socket(&slack, &format!("{tag}{round}"), n / 2).await);
            http_runs.push(over_http(&slack, port, &format!("{tag}{round}"), n / 2).await);
        }
        let socket_rss = rss_kib(socket_child.0.id(), "VmRSS:");
        let http_rss = rss_kib(http_child.0.id(), "VmRSS:");
        drop((socket_child, http_child));
        rows.push((ledger_name, socket_runs, http_runs, socket_rss, http_rss));
    }
    let one = rss_with(&slack, 1).await;
    let nine = rss_with(&slack, 9).await;
    let per_connection = nine.saturating_sub(one) as f64 / 8.0;

    let mut md = String::new();
    out!(
        md,
        "\n### 9. Socket Mode: from the envelope to its acknowledgement (µs p50 / p99, {n} sequential events per transport, two rounds)\n"
    );
    out!(
        md,
        "The reference bot answers each mention (a reply in its thread) before it acknowledges. \
         Over Socket Mode the time runs from the stand-in handing the envelope to a connection \
         to its reading the acknowledgement; over HTTP it is the sender's round trip of a \
         signed request. Both processes run at once, against one stand-in.\n"
    );
    out!(
        md,
        "| ledger | Socket Mode, round 1 | round 2 | HTTP, round 1 | round 2 | RSS Socket Mode / HTTP (MiB) |"
    );
    out!(md, "|---|---|---|---|---|---|");
    for (ledger, socket, http, srss, hrss) in &rows {
        out!(
            md,
            "| {ledger} | {} | {} | {} | {} | {:.1} / {:.1} |",
            socket[0],
            socket[1],
            http[0],
            http[1],
            mib(*srss),
            mib(*hrss)
        );
    }
    out!(
        md,
        "\nMemory per connection: a process holding 9 connections {:.1} MiB, holding 1 {:.1} MiB: {:.0} KiB a connection.",
        mib(nine),
        mib(one),
        per_connection
    );
    md
}
