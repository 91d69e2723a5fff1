//! Part 8 of the report: what `slack-once gateway` adds to a Bolt app's answer. Three HTTP
//! services answer the same signed app_mentions (a person's message each) with a reaction, then
//! a reply in its thread, on the report's Slack stand-in, side by side in one run:
//!
//! 1. the Bolt for JavaScript app (`benches/bolt/gateway-bot.js`) straight: Slack's signing
//!    secret, a bot token to the stand-in, no slack-once;
//! 2. the same app behind `slack-once gateway` (this build's binary, its ledger on DynamoDB
//!    Local), with the adapter's few lines: the gateway's secret and placeholder token;
//! 3. Bolt for Python with Powertools' idempotency on DynamoDB Local (`bench.py serve`: the
//!    report's Powertools peer behind an HTTP server).
//!
//! All three answer Slack only when the listener has ended (`processBeforeResponse`), so the
//! sender's latency covers both writes. Sequential events go to the three in turn, one by one;
//! then each takes a bounded load at a fixed concurrency from a second process, in rounds, the
//! three in turn. Memory is each
//! process's RSS from `/proc`. The gateway's ledger requests are counted at the counting proxy
//! by a second gateway, in front of the same bot, whose DynamoDB endpoint is the proxy.

use super::*;

/// The knobs of part 8 (environment).
pub struct Knobs {
    /// Sequential events per service (`BENCH_GATEWAY_EVENTS`).
    pub events: usize,
    /// Events per service under load (`BENCH_GATEWAY_LOAD_EVENTS`).
    pub load_events: usize,
    /// In flight under load (`BENCH_GATEWAY_CONCURRENCY`).
    pub concurrency: usize,
    /// The most a phase may take, in seconds; a phase past it stops sending and says how many
    /// it sent (`BENCH_GATEWAY_SECONDS`).
    pub seconds: u64,
    /// Events whose ledger requests are counted (`BENCH_GATEWAY_COST_EVENTS`).
    pub cost_events: usize,
}

impl Knobs {
    pub fn from_env() -> Self {
        Self {
            events: env_usize("BENCH_GATEWAY_EVENTS", 500),
            load_events: env_usize("BENCH_GATEWAY_LOAD_EVENTS", 2000),
            concurrency: env_usize("BENCH_GATEWAY_CONCURRENCY", 16),
            seconds: env_usize("BENCH_GATEWAY_SECONDS", 120) as u64,
            cost_events: env_usize("BENCH_GATEWAY_COST_EVENTS", 100),
        }
    }
}

/// The secret the gateway signs its forwards with, which the bot behind it verifies them with.
const GATEWAY_SECRET: &str = "bench-gateway-secret-shared-with-the-bot";
/// The placeholder the bot behind the gateway is given as its bot token.
const PROXY_TOKEN: &str = "xoxb-bench-placeholder-for-the-gateway";

/// One service under measure: where Slack's requests go, and its processes.
struct Service {
    name: &'static str,
    /// Part of its events' ids.
    tag: &'static str,
    url: String,
    processes: Vec<(&'static str, Started)>,
}

/// A process this part started, stopped (by its PID) when dropped, a failed phase's included.
struct Started(Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What one service measured.
struct Measured {
    sequential: Latency,
    sequential_sent: usize,
    slack_calls_per_request: f64,
    load: Option<Load>,
    /// Per process: (name, RSS after the warm-up, peak RSS), KiB.
    rss_kib: Vec<(&'static str, u64, u64)>,
}

/// A bounded concurrent load, as its sender saw it.
struct Load {
    sent: usize,
    per_s: f64,
    lat: Latency,
    slack_calls_per_request: f64,
}

/// A process's stderr, kept for when a phase fails: in the system's temporary directory.
fn log_to(name: &str) -> Stdio {
    let path = std::env::temp_dir().join(format!(
        "slack-once-bench-{name}-{}.log",
        std::process::id()
    ));
    std::fs::File::create(path)
        .map(Stdio::from)
        .unwrap_or_else(|_| Stdio::null())
}

fn spawn_js_bot(port: u16, vars: &[(&str, String)], log: &str) -> Started {
    let mut command = Command::new("node");
    command
        .arg(Path::new(ROOT).join("benches/bolt/gateway-bot.js"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(log_to(log));
    for (k, v) in vars {
        command.env(k, v);
    }
    Started(command.spawn().expect("node starts"))
}

/// `slack-once gateway` forwarding to the bot on `bot_port`, its ledger `table` at `dynamodb`.
fn spawn_gateway(slack: &SlackStub, dynamodb: &str, table: &str, bot_port: u16) -> (Started, u16) {
    let port = free_port();
    let mut command = Command::new(BIN);
    command
        .arg("gateway")
        .env_clear()
        .env("SLACK_SIGNING_SECRET", SECRET)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log_to(&format!("gateway-{port}")));
    for (k, v) in aws_env(dynamodb) {
        command.env(k, v);
    }
    command
        .env("LISTEN_ADDR", format!("127.0.0.1:{port}"))
        .env("SLACK_BOT_TOKEN", "xoxb-bench")
        .env("SLACK_API_URL", &slack.base_url)
        .env("DEDUP_TABLE", table)
        .env(
            "SLACK_ONCE_BOT_URL",
            format!("http://127.0.0.1:{bot_port}/slack/events"),
        )
        .env("SLACK_ONCE_GATEWAY_SECRET", GATEWAY_SECRET)
        .env("SLACK_ONCE_PROXY_TOKEN", PROXY_TOKEN);
    (Started(command.spawn().expect("the gateway starts")), port)
}

/// Bolt for Python with Powertools (`bench.py serve`), its idempotency table `table`.
fn spawn_powertools(slack: &SlackStub, dynamodb: &str, table: &str) -> (Started, u16) {
    let port = free_port();
    let mut command = peer_command(Peer::Python, slack, dynamodb);
    command
        .env("BENCH_TABLE", table)
        .args(["serve", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(log_to(&format!("powertools-{port}")));
    (
        Started(command.spawn().expect("Bolt for Python starts")),
        port,
    )
}

/// Waits until something accepts connections on `port` (a probe that is a request would be
/// answered late: a signed body Bolt cannot route waits out its 3 s before its 404).
async fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn events_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/slack/events")
}

/// Sends `n` events to each service, unmeasured: connections, Bolt's start-up `auth.test`, the
/// JIT of node and of DynamoDB Local's paths.
async fn warm_up(services: &[Service], slack: &SlackStub, n: usize) {
    let http = HttpClient::default();
    for service in services {
        for i in 0..n {
            let body = person_message(&format!("EvGwWarm{}{i}", service.tag));
            slack.saw(&body);
            let status = http.send_event(&service.url, &body).await;
            assert_eq!(status, 200, "{} did not answer its warm-up", service.name);
        }
    }
}

/// `n` events to each service, one at a time, the services in turn (the first of each turn
/// rotating), within `budget`: each service's latencies and the Slack calls each request made.
async fn sequential(
    services: &[Service],
    slack: &SlackStub,
    n: usize,
    budget: Duration,
) -> Vec<(Vec<f64>, usize)> {
    let http = HttpClient::default();
    let mut measured: Vec<(Vec<f64>, usize)> = services
        .iter()
        .map(|_| (Vec::with_capacity(n), 0))
        .collect();
    let started = Instant::now();
    for i in 0..n {
        if started.elapsed() > budget {
            break;
        }
        for turn in 0..services.len() {
            let s = (i + turn) % services.len();
            let body = person_message(&format!("EvGwSeq{}{i}", services[s].tag));
            slack.saw(&body);
            let calls = slack.posts();
            let sent = Instant::now();
            let status = http.send_event(&services[s].url, &body).await;
            let us = since_us(sent);
            assert_eq!(status, 200, "{}: event {i}", services[s].name);
            measured[s].0.push(us);
            measured[s].1 += slack.posts() - calls;
        }
    }
    measured
}

/// The load is sent in this many rounds, the services in turn within each, so that each service
/// sees the same machine (the others' builds and tests on it come and go).
const LOAD_ROUNDS: usize = 4;

/// One run of the load generator against `service`: `n` events at `concurrency` in flight from
/// a second process (this bench binary again, as [`throughput`] runs it), within `budget`.
/// Returns every event's latency (µs) and the seconds the run took.
async fn load_run(
    service: &Service,
    slack: &SlackStub,
    prefix: &str,
    n: usize,
    concurrency: usize,
    budget: Duration,
) -> (Vec<f64>, f64) {
    for i in 0..n {
        slack.saw(&person_message(&format!("{prefix}{i}")));
    }
    let spec = format!(
        "{} {n} {concurrency} {prefix} {}",
        service.url,
        budget.as_secs_f64()
    );
    let out = tokio::task::spawn_blocking(move || {
        Command::new(std::env::current_exe().unwrap())
            .env("SLACK_ONCE_LOAD", spec)
            .output()
            .expect("the load generator runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    let summary: Vec<f64> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    let lat: Vec<f64> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    let [per_s, sent, ..] = summary[..] else {
        panic!(
            "load generator for {}: {stdout} {}",
            service.name,
            String::from_utf8_lossy(&out.stderr)
        );
    };
    assert_eq!(lat.len(), sent as usize, "{}: {stdout}", service.name);
    (lat, sent / per_s.max(f64::MIN_POSITIVE))
}

/// The bounded load: `n` events to each service in [`LOAD_ROUNDS`] rounds, within `budget`
/// per service.
async fn load(
    services: &[Service],
    slack: &SlackStub,
    n: usize,
    concurrency: usize,
    budget: Duration,
) -> Vec<Load> {
    let per_round = n.div_ceil(LOAD_ROUNDS);
    let mut runs: Vec<(Vec<f64>, f64, usize)> =
        services.iter().map(|_| (Vec::new(), 0.0, 0)).collect();
    for round in 0..LOAD_ROUNDS {
        for turn in 0..services.len() {
            let s = (round + turn) % services.len();
            let (lat, seconds, calls) = &mut runs[s];
            let left = n.saturating_sub(lat.len()).min(per_round);
            let time_left = budget.saturating_sub(Duration::from_secs_f64(*seconds));
            if left == 0 || time_left.is_zero() {
                continue;
            }
            let prefix = format!("EvGwLoad{}R{round}-", services[s].tag);
            let before = slack.posts();
            let (run, took) =
                load_run(&services[s], slack, &prefix, left, concurrency, time_left).await;
            *calls += slack.posts() - before;
            *seconds += took;
            lat.extend(run);
        }
    }
    runs.into_iter()
        .map(|(lat, seconds, calls)| {
            let sent = lat.len();
            Load {
                sent,
                per_s: sent as f64 / seconds.max(f64::MIN_POSITIVE),
                lat: latency(lat),
                slack_calls_per_request: calls as f64 / sent.max(1) as f64,
            }
        })
        .collect()
}

/// The ledger requests of `n` first deliveries to `url`, then of the same `n` again (Slack's
/// retries), each counted at `proxy`.
async fn ledger_requests(
    url: &str,
    proxy: &CountingProxy,
    slack: &SlackStub,
    tag: &str,
    n: usize,
) -> (Cost, Cost) {
    let http = HttpClient::default();
    let mut phases = Vec::new();
    for _ in 0..2 {
        let mut per_event = Vec::with_capacity(n);
        for i in 0..n {
            let body = person_message(&format!("EvGwCost{tag}{i}"));
            slack.saw(&body);
            let mark = proxy.len();
            assert_eq!(http.send_event(url, &body).await, 200, "{tag}: event {i}");
            per_event.push(proxy.since(mark));
        }
        phases.push(cost_of(&per_event));
    }
    (phases[0], phases[1])
}

fn rss_now(services: &[Service]) -> Vec<u64> {
    services
        .iter()
        .flat_map(|s| &s.processes)
        .map(|(_, process)| rss_kib(process.0.id(), "VmRSS:"))
        .collect()
}

/// Runs part 8 and returns its section of the report.
pub async fn gateway_section(slack: &SlackStub, endpoint: &str, knobs: &Knobs) -> String {
    assert!(
        Path::new(ROOT)
            .join("tests/bots/bolt-js/node_modules/slack-once-bolt")
            .exists(),
        "the Bolt for JavaScript test bot is not installed: run scripts/bolt-bots.sh"
    );
    let budget = Duration::from_secs(knobs.seconds);
    let table = fresh_table(endpoint, "gateway").await;
    let powertools_table = format!("bench-gateway-powertools-{}", std::process::id());

    let direct_port = free_port();
    let direct_bot = spawn_js_bot(
        direct_port,
        &[
            ("SLACK_SIGNING_SECRET", SECRET.into()),
            ("SLACK_BOT_TOKEN", "xoxb-bench".into()),
            ("SLACK_API_URL", format!("{}/", slack.base_url)),
        ],
        "bolt-js-straight",
    );
    let bot_port = free_port();
    let (gateway, gateway_port) = spawn_gateway(slack, endpoint, &table, bot_port);
    let behind_bot = spawn_js_bot(
        bot_port,
        &[
            ("SLACK_SIGNING_SECRET", GATEWAY_SECRET.into()),
            ("SLACK_BOT_TOKEN", PROXY_TOKEN.into()),
            (
                "SLACK_ONCE_API_URL",
                format!("http://127.0.0.1:{gateway_port}/api/"),
            ),
        ],
        "bolt-js-behind-gateway",
    );
    let (powertools, powertools_port) = spawn_powertools(slack, endpoint, &powertools_table);
    for port in [direct_port, gateway_port, bot_port, powertools_port] {
        wait_listening(port).await;
    }
    let services = [
        Service {
            name: "1. Bolt for JavaScript, straight",
            tag: "Straight",
            url: events_url(direct_port),
            processes: vec![("bot", direct_bot)],
        },
        Service {
            name: "2. the same app behind `slack-once gateway`",
            tag: "Gateway",
            url: events_url(gateway_port),
            processes: vec![("gateway", gateway), ("bot", behind_bot)],
        },
        Service {
            name: "3. Bolt for Python + Powertools idempotency",
            tag: "Powertools",
            url: events_url(powertools_port),
            processes: vec![("bot", powertools)],
        },
    ];
    warm_up(&services, slack, 100).await;
    let rss_start = rss_now(&services);

    eprintln!(
        "gateway: {} sequential events each, then {} at {} in flight each…",
        knobs.events, knobs.load_events, knobs.concurrency
    );
    let sequential = sequential(&services, slack, knobs.events, budget).await;
    let mut measured: Vec<Measured> = Vec::new();
    for (lat, calls) in sequential {
        let sent = lat.len();
        measured.push(Measured {
            sequential: latency(lat),
            sequential_sent: sent,
            slack_calls_per_request: calls as f64 / sent.max(1) as f64,
            load: None,
            rss_kib: Vec::new(),
        });
    }
    if knobs.load_events > 0 {
        let loads = load(
            &services,
            slack,
            knobs.load_events,
            knobs.concurrency,
            budget,
        )
        .await;
        for (m, l) in measured.iter_mut().zip(loads) {
            m.load = Some(l);
        }
    }
    let mut start = rss_start.into_iter();
    for (service, m) in services.iter().zip(&mut measured) {
        for (name, process) in &service.processes {
            let idle = start.next().unwrap_or(0);
            m.rss_kib
                .push((name, idle, rss_kib(process.0.id(), "VmHWM:")));
        }
    }

    // The ledger's requests: a second gateway and a second Powertools process, each with the
    // counting proxy as its DynamoDB endpoint; the second gateway forwards to the same bot,
    // whose calls follow each forward's gateway.
    eprintln!(
        "gateway: counting ledger requests ({} events)…",
        knobs.cost_events
    );
    let proxy = CountingProxy::start(endpoint).await;
    let (counted_gateway, counted_port) = spawn_gateway(slack, &proxy.url, &table, bot_port);
    let (counted_powertools, counted_powertools_port) =
        spawn_powertools(slack, &proxy.url, &powertools_table);
    wait_listening(counted_port).await;
    wait_listening(counted_powertools_port).await;
    let gateway_costs = ledger_requests(
        &events_url(counted_port),
        &proxy,
        slack,
        "Gateway",
        knobs.cost_events,
    )
    .await;
    let powertools_costs = ledger_requests(
        &events_url(counted_powertools_port),
        &proxy,
        slack,
        "Powertools",
        knobs.cost_events,
    )
    .await;
    let names: Vec<&str> = services.iter().map(|s| s.name).collect();
    drop((counted_gateway, counted_powertools, services));
    let client = dynamodb_client(endpoint);
    for table in [&table, &powertools_table] {
        let _ = client.delete_table().table_name(table).send().await;
    }

    print_gateway(&names, &measured, gateway_costs, powertools_costs, knobs)
}

fn rss_cell(rss: &[(&'static str, u64, u64)]) -> String {
    rss.iter()
        .map(|(name, idle, peak)| format!("{name} {:.1} → **{:.1}**", mib(*idle), mib(*peak)))
        .collect::<Vec<_>>()
        .join("; ")
}

fn added(ours: f64, base: f64) -> String {
    format!("+{:.0} µs ({:.2}×)", ours - base, ours / base)
}

fn ledger_row(what: &str, c: &Cost) -> String {
    let at_dynamodb: Vec<String> = c
        .at_dynamodb_us
        .iter()
        .take(c.requests.round() as usize)
        .map(|t| format!("{t:.0}"))
        .collect();
    format!(
        "| {what} | {:.2} | {:.2} (max {}) | {:.2} | {:.2} | {} |",
        c.requests,
        c.sequential,
        c.max_sequential,
        c.write_units,
        c.reads,
        at_dynamodb.join(", ")
    )
}

fn print_gateway(
    names: &[&str],
    m: &[Measured],
    gateway_costs: (Cost, Cost),
    powertools_costs: (Cost, Cost),
    knobs: &Knobs,
) -> String {
    let mut md = String::new();
    out!(
        md,
        "\n### 8. A Bolt app behind `slack-once gateway` (µs p50 / p99, from the sender's side)\n"
    );
    out!(
        md,
        "Each service answers a signed `app_mention` (a person's message) with a reaction, then a \
         reply in its thread, on the same Slack stand-in, and answers the HTTP request once both \
         are made. Sequential: {} events each, the three in turn, one at a time. Load: {} events \
         each at {} in flight from a second process, in {LOAD_ROUNDS} rounds, the three in turn. RSS from \
         `/proc`: after the warm-up → **peak** (MiB).\n",
        knobs.events,
        knobs.load_events,
        knobs.concurrency
    );
    out!(
        md,
        "| service | sequential | under load | load, events/s | Slack calls per request | RSS (MiB) |"
    );
    out!(md, "|---|---|---|---|---|---|");
    for (name, m) in names.iter().zip(m) {
        let (load, rate) = match &m.load {
            Some(l) => (
                format!("{} ({} sent)", l.lat, l.sent),
                format!("{:.0}", l.per_s),
            ),
            None => ("–".into(), "–".into()),
        };
        let calls = match &m.load {
            Some(l) => format!(
                "{:.2} / {:.2}",
                m.slack_calls_per_request, l.slack_calls_per_request
            ),
            None => format!("{:.2}", m.slack_calls_per_request),
        };
        out!(
            md,
            "| {name} | {} ({} sent) | {load} | {rate} | {calls} | {} |",
            m.sequential,
            m.sequential_sent,
            rss_cell(&m.rss_kib)
        );
    }
    let (straight, gateway, powertools) = (&m[0], &m[1], &m[2]);
    out!(md, "\nThe gateway's added latency (2 − 1, and 2 / 1):\n");
    out!(md, "| | p50 | p99 |");
    out!(md, "|---|---|---|");
    out!(
        md,
        "| sequential | {} | {} |",
        added(gateway.sequential.p50_us, straight.sequential.p50_us),
        added(gateway.sequential.p99_us, straight.sequential.p99_us)
    );
    if let (Some(g), Some(s)) = (&gateway.load, &straight.load) {
        out!(
            md,
            "| under load | {} | {} |",
            added(g.lat.p50_us, s.lat.p50_us),
            added(g.lat.p99_us, s.lat.p99_us)
        );
    }
    out!(
        md,
        "\nBolt for Python + Powertools against the gateway (3 / 2): sequential p50 {}, p99 {}{}.",
        ratio(powertools.sequential.p50_us, gateway.sequential.p50_us),
        ratio(powertools.sequential.p99_us, gateway.sequential.p99_us),
        match (&powertools.load, &gateway.load) {
            (Some(p), Some(g)) => format!(
                "; under load p50 {}, p99 {}",
                ratio(p.lat.p50_us, g.lat.p50_us),
                ratio(p.lat.p99_us, g.lat.p99_us)
            ),
            _ => String::new(),
        }
    );
    out!(
        md,
        "\nLedger requests per request, counted at the proxy ({} events, then the same again as \
         Slack's retries; a second gateway and a second Powertools process, their DynamoDB \
         endpoint the proxy):\n",
        knobs.cost_events
    );
    out!(
        md,
        "| | requests | sequential round trips | write units | reads | each request at the proxy, in order (µs) |"
    );
    out!(md, "|---|---|---|---|---|---|");
    out!(
        md,
        "{}",
        ledger_row(
            "the gateway, first delivery (a reaction and a reply: two journaled steps)",
            &gateway_costs.0
        )
    );
    out!(
        md,
        "{}",
        ledger_row("the gateway, the same event again", &gateway_costs.1)
    );
    out!(
        md,
        "{}",
        ledger_row("Powertools, first delivery", &powertools_costs.0)
    );
    out!(
        md,
        "{}",
        ledger_row("Powertools, the same event again", &powertools_costs.1)
    );
    out!(
        md,
        "\nknobs: BENCH_GATEWAY_EVENTS={}, BENCH_GATEWAY_LOAD_EVENTS={}, BENCH_GATEWAY_CONCURRENCY={}, \
         BENCH_GATEWAY_SECONDS={} (per phase), BENCH_GATEWAY_COST_EVENTS={}",
        knobs.events,
        knobs.load_events,
        knobs.concurrency,
        knobs.seconds,
        knobs.cost_events
    );
    md
}
