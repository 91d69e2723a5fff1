//! The benchmark report: one table of cold start, warm latency, throughput, memory, sizes and
//! DynamoDB round trips, beside Bolt for JavaScript measured in the same run on the same machine.
//!
//!   scripts/bench.sh              (starts DynamoDB Local and the SQS server, installs Bolt, then runs this)
//!   cargo bench --bench report    (when both are already there)
//!
//! Everything runs on 127.0.0.1. Figures are medians of repeated runs; on a noisy 2-core machine
//! read the ratios, measured side by side in one run, rather than the absolute numbers.

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use slack_once::app::reference_app;
use slack_once::config::Config;
use slack_once::ledger::{DynamoLedger, MemoryLedger};
use slack_once::Application;
use support::*;
use tower::ServiceExt;

const BIN: &str = env!("CARGO_BIN_EXE_slack-once");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; a load-generator child is started with SLACK_ONCE_LOAD.
    if let Ok(spec) = std::env::var("SLACK_ONCE_LOAD") {
        return load_generator(&spec);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(report());
}

// ---------------------------------------------------------------- statistics

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((p / 100.0) * sorted.len() as f64)
        .floor()
        .min(sorted.len() as f64 - 1.0) as usize]
}

struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

fn spread(mut xs: Vec<f64>) -> Spread {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Spread {
        median: percentile(&xs, 50.0),
        min: xs[0],
        max: xs[xs.len() - 1],
    }
}

// ---------------------------------------------------------------- processes

fn dynamodb_endpoint() -> String {
    let port = env_usize("DYNAMODB_LOCAL_PORT", 8000);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port as u16));
    if std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
        panic!("DynamoDB Local is not answering on {addr}: run scripts/bench.sh (or scripts/dynamodb-local.sh start)");
    }
    format!("http://{addr}")
}

fn sqs_endpoint() -> String {
    let port = env_usize("SQS_LOCAL_PORT", 9324);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port as u16));
    if std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
        panic!("the SQS server is not answering on {addr}: run scripts/bench.sh (or scripts/sqs-local.sh start)");
    }
    format!("http://{addr}")
}

fn aws_env(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint.to_string()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID", "bench".into()),
        ("AWS_SECRET_ACCESS_KEY", "bench".into()),
        ("AWS_CONFIG_FILE", "/dev/null".into()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]
}

fn spawn_bot(vars: &[(&str, String)]) -> Child {
    let mut command = Command::new(BIN);
    command
        .env_clear()
        .env("SLACK_SIGNING_SECRET", SECRET)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in vars {
        command.env(k, v);
    }
    command.spawn().expect("the release binary starts")
}

/// A local-mode process posting to `slack`, its ledger in `table` at `dynamodb` when given (else
/// in memory), listening on a free port: the process and its events URL.
fn spawn_local(slack: &SlackStub, ledger: Option<(&str, &str)>) -> (Child, u16) {
    let port = free_port();
    let mut vars = ledger
        .map(|(endpoint, _)| aws_env(endpoint))
        .unwrap_or_default();
    vars.extend([
        ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
        ("SLACK_BOT_TOKEN", "xoxb-bench".into()),
        ("SLACK_API_URL", slack.base_url.clone()),
    ]);
    if let Some((_, table)) = ledger {
        vars.push(("DEDUP_TABLE", table.to_string()));
    }
    (spawn_bot(&vars), port)
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn wait_ready(http: &HttpClient, port: u16) {
    let url = format!("http://127.0.0.1:{port}/slack/events");
    let deadline = Instant::now() + Duration::from_secs(10);
    while http.send_event(&url, "{}").await == 0 {
        assert!(Instant::now() < deadline, "the server did not start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

// ---------------------------------------------------------------- the measurements

/// Spawn → first signed app_mention answered 200, in local mode (in-memory ledger).
async fn cold_start_local(slack: &SlackStub, runs: usize) -> Spread {
    let http = HttpClient::default();
    let mut times = Vec::new();
    for i in 0..runs {
        let port = free_port();
        let body = app_mention(&format!("EvCold{i}"));
        let url = format!("http://127.0.0.1:{port}/slack/events");
        let started = Instant::now();
        let child = spawn_bot(&[
            ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
            ("SLACK_BOT_TOKEN", "xoxb-bench".into()),
            ("SLACK_API_URL", slack.base_url.clone()),
        ]);
        loop {
            match http.send_event(&url, &body).await {
                200 => break,
                0 => tokio::time::sleep(Duration::from_micros(200)).await,
                other => panic!("cold start answered {other}"),
            }
            assert!(started.elapsed() < Duration::from_secs(10));
        }
        times.push(started.elapsed().as_secs_f64() * 1e3);
        stop(child);
    }
    spread(times)
}

/// Spawn → the first invocation's response at a Lambda Runtime API stand-in (DynamoDB ledger),
/// with `extra` variables (the secrets read from Secrets Manager, say).
async fn cold_start_lambda(
    slack: &SlackStub,
    endpoint: &str,
    table: &str,
    runs: usize,
    extra: &[(&'static str, String)],
) -> Spread {
    let mut times = Vec::new();
    for i in 0..runs {
        let runtime = RuntimeStub::start().await;
        let answer = runtime.invoke(lambda_event(&app_mention(&format!("EvLambdaCold{i}"))));
        let mut vars = aws_env(endpoint);
        vars.extend([
            ("AWS_LAMBDA_RUNTIME_API", runtime.addr.to_string()),
            ("AWS_LAMBDA_FUNCTION_NAME", "bench".into()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256".into()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "1".into()),
            ("AWS_LAMBDA_LOG_STREAM_NAME", "bench".into()),
            ("AWS_LAMBDA_LOG_GROUP_NAME", "bench".into()),
            ("SLACK_BOT_TOKEN", "xoxb-bench".into()),
            ("SLACK_API_URL", slack.base_url.clone()),
            ("DEDUP_TABLE", table.to_string()),
        ]);
        vars.extend(extra.iter().cloned());
        let started = Instant::now();
        let child = spawn_bot(&vars);
        let response = tokio::time::timeout(Duration::from_secs(20), answer)
            .await
            .expect("the function answered")
            .unwrap();
        times.push(started.elapsed().as_secs_f64() * 1e3);
        assert!(response.contains("\"statusCode\":200"), "{response}");
        stop(child);
    }
    spread(times)
}

fn bolt_dir() -> PathBuf {
    Path::new(ROOT).join("bench/bolt")
}

/// Spawn `node bench.js cold` → it printed that the first event was answered.
fn cold_start_bolt(slack: &SlackStub, runs: usize) -> Spread {
    let mut times = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        let out = Command::new("node")
            .arg("bench.js")
            .arg("cold")
            .current_dir(bolt_dir())
            .env("SLACK_API_URL", format!("{}/", slack.base_url))
            .env("SECRET", SECRET)
            .output()
            .expect("node runs");
        let elapsed = started.elapsed().as_secs_f64() * 1e3;
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("\"answered\":true"),
            "Bolt: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        times.push(elapsed);
    }
    spread(times)
}

struct Latency {
    p50_us: f64,
    p99_us: f64,
}

/// Sequential signed events over HTTP to a running process.
async fn warm_http(url: &str, n: usize, prefix: &str) -> Latency {
    let http = HttpClient::default();
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let body = app_mention(&format!("{prefix}{i}"));
        let started = Instant::now();
        assert_eq!(http.send_event(url, &body).await, 200);
        lat.push(started.elapsed().as_secs_f64() * 1e6);
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Latency {
        p50_us: percentile(&lat, 50.0),
        p99_us: percentile(&lat, 99.0),
    }
}

/// Sequential signed events through the router in-process (as Lambda calls it).
async fn warm_in_process(slack: Option<&SlackStub>, n: usize, prefix: &str) -> Latency {
    // The metrics lines would be written into this report: off here (the HTTP measures, whose
    // processes write them to /dev/null, include them; `cargo bench --bench micro` prices one).
    let mut vars: HashMap<&str, String> = HashMap::from([
        ("SLACK_SIGNING_SECRET", SECRET.to_string()),
        ("METRICS", "off".to_string()),
    ]);
    if let Some(slack) = slack {
        vars.insert("SLACK_BOT_TOKEN", "xoxb-bench".into());
        vars.insert("SLACK_API_URL", slack.base_url.clone());
    }
    let config = Config::from_lookup(|k| vars.get(k).cloned()).unwrap();
    let router =
        Application::with_parts(config, Arc::new(MemoryLedger::new()), reference_app()).router();
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let body = app_mention(&format!("{prefix}{i}"));
        let mut request = http::Request::builder().method("POST").uri("/slack/events");
        for (k, v) in signed_headers(body.as_bytes()) {
            request = request.header(k, v);
        }
        let request = request.body(axum::body::Body::from(body)).unwrap();
        let started = Instant::now();
        let response = router.clone().oneshot(request).await.unwrap();
        lat.push(started.elapsed().as_secs_f64() * 1e6);
        assert_eq!(response.status(), 200);
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Latency {
        p50_us: percentile(&lat, 50.0),
        p99_us: percentile(&lat, 99.0),
    }
}

struct BoltWarm {
    p50_us: f64,
    p99_us: f64,
    idle_rss_kib: f64,
    peak_rss_kib: f64,
}

fn warm_bolt(slack: &SlackStub, n: usize) -> BoltWarm {
    let out = Command::new("node")
        .args(["bench.js", "warm", &n.to_string()])
        .current_dir(bolt_dir())
        .env("SLACK_API_URL", format!("{}/", slack.base_url))
        .env("SECRET", SECRET)
        .output()
        .expect("node runs");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("Bolt: {}", String::from_utf8_lossy(&out.stderr)));
    BoltWarm {
        p50_us: v["p50_us"].as_f64().unwrap(),
        p99_us: v["p99_us"].as_f64().unwrap(),
        idle_rss_kib: v["idle_rss"].as_f64().unwrap() / 1024.0,
        peak_rss_kib: v["peak_rss"].as_f64().unwrap() / 1024.0,
    }
}

/// Runs this bench binary again as a load generator: a second process sending `n` events with
/// `concurrency` in flight. Returns events per second.
fn throughput(url: &str, n: usize, concurrency: usize, prefix: &str) -> f64 {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .env(
            "SLACK_ONCE_LOAD",
            format!("{url} {n} {concurrency} {prefix}"),
        )
        .output()
        .expect("the load generator runs");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("load generator: {}", String::from_utf8_lossy(&out.stderr)))
}

fn load_generator(spec: &str) {
    let parts: Vec<&str> = spec.split_whitespace().collect();
    let (url, n, concurrency, prefix) = (
        parts[0].to_string(),
        parts[1].parse::<usize>().unwrap(),
        parts[2].parse::<usize>().unwrap(),
        parts[3].to_string(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let rate = rt.block_on(async move {
        let http = HttpClient::default();
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let started = Instant::now();
        let workers: Vec<_> = (0..concurrency)
            .map(|_| {
                let (http, next, url, prefix) =
                    (http.clone(), next.clone(), url.clone(), prefix.clone());
                tokio::spawn(async move {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= n {
                            break;
                        }
                        let status = http
                            .send_event(&url, &app_mention(&format!("{prefix}{i}")))
                            .await;
                        assert_eq!(status, 200);
                    }
                })
            })
            .collect();
        for w in workers {
            w.await.unwrap();
        }
        n as f64 / started.elapsed().as_secs_f64()
    });
    println!("{rate:.0}");
}

/// Requests to DynamoDB per first delivery and per duplicate, counted at a proxy.
async fn round_trips(
    slack: &SlackStub,
    endpoint: &str,
    table: &str,
) -> (f64, f64, HashMap<String, usize>) {
    let proxy = CountingProxy::start(endpoint).await;
    let (child, port) = spawn_local(slack, Some((&proxy.url, table)));
    let http = HttpClient::default();
    wait_ready(&http, port).await;
    let url = format!("http://127.0.0.1:{port}/slack/events");
    const N: usize = 100;
    let before: usize = proxy.snapshot().values().sum();
    for i in 0..N {
        assert_eq!(
            http.send_event(&url, &app_mention(&format!("EvTrip{i}")))
                .await,
            200
        );
    }
    let after_first: usize = proxy.snapshot().values().sum();
    for i in 0..N {
        assert_eq!(
            http.send_event(&url, &app_mention(&format!("EvTrip{i}")))
                .await,
            200
        );
    }
    let after_dup: usize = proxy.snapshot().values().sum();
    let ops = proxy.snapshot();
    stop(child);
    (
        (after_first - before) as f64 / N as f64,
        (after_dup - after_first) as f64 / N as f64,
        ops,
    )
}

/// A secret on the SQS server's Secrets Manager (moto serves both) holding the bench's secrets;
/// the variables that make the binary read it.
async fn bench_secret() -> Vec<(&'static str, String)> {
    use aws_sdk_secretsmanager::config::{BehaviorVersion, Credentials, Region};
    let endpoint = sqs_endpoint();
    let client = aws_sdk_secretsmanager::Client::from_conf(
        aws_sdk_secretsmanager::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url(&endpoint)
            .credentials_provider(Credentials::new("bench", "bench", None, None, "bench"))
            .http_client(slack_once::ledger::dynamo::http_client())
            .build(),
    );
    let name = format!("slack-once/bench-{}-{}", std::process::id(), now_unix());
    client
        .create_secret()
        .name(&name)
        .secret_string(
            serde_json::json!({"signing_secret": SECRET, "bot_token": "xoxb-bench"}).to_string(),
        )
        .send()
        .await
        .expect("create the bench secret");
    vec![
        ("SLACK_SECRETS_ARN", name),
        ("AWS_ENDPOINT_URL_SECRETS_MANAGER", endpoint),
    ]
}

struct DeferredFigures {
    ack: Latency,
    end_to_end: Latency,
    drain_per_s: f64,
    ledger_per_event: f64,
    ledger_per_duplicate: f64,
    sqs_per_event: f64,
}

/// Deferred mode: an ingress sending to the SQS server, one worker on DynamoDB Local, both
/// behind counting proxies. `n` events are queued (acknowledgement latency), then drained by one
/// worker (events per second); `m` more go one at a time from the ingress to the post (end to
/// end); the same `m` again count what a duplicate costs.
async fn deferred(
    slack: &SlackStub,
    dynamodb: &str,
    table: &str,
    n: usize,
    m: usize,
) -> DeferredFigures {
    let sqs = sqs_endpoint();
    let client = {
        use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
        aws_sdk_sqs::Client::from_conf(
            aws_sdk_sqs::Config::builder()
                .behavior_version(BehaviorVersion::latest())
                .region(Region::new("us-east-1"))
                .endpoint_url(&sqs)
                .credentials_provider(Credentials::new("bench", "bench", None, None, "bench"))
                .http_client(slack_once::ledger::dynamo::http_client())
                .build(),
        )
    };
    let name = format!("bench-{}-{}", std::process::id(), now_unix());
    let (queue_url, _) = slack_once::queue::SqsQueue::create_with_dead_letters(
        &client,
        &name,
        5,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let sqs_proxy = CountingProxy::start(&sqs).await;
    let ddb_proxy = CountingProxy::start(dynamodb).await;
    let port = free_port();
    let mut vars = aws_env("http://127.0.0.1:9");
    vars.extend([
        ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
        ("AWS_ENDPOINT_URL_SQS", sqs_proxy.url.clone()),
        ("WORK_QUEUE_URL", queue_url.clone()),
    ]);
    let ingress = spawn_bot(&vars);
    let http = HttpClient::default();
    wait_ready(&http, port).await;
    let url = format!("http://127.0.0.1:{port}/slack/events");

    // Acknowledgement latency, nothing consuming the queue yet.
    let ack = warm_http(&url, n, "EvDefAck").await;

    // One worker drains the n events.
    let posts_before = slack.posts();
    let mut worker_vars = aws_env(&ddb_proxy.url);
    worker_vars.extend([
        ("AWS_ENDPOINT_URL_SQS", sqs_proxy.url.clone()),
        ("WORK_QUEUE_URL", queue_url.clone()),
        ("DEDUP_TABLE", table.to_string()),
        ("SLACK_BOT_TOKEN", "xoxb-bench".into()),
        ("SLACK_API_URL", slack.base_url.clone()),
        ("SLACK_ONCE_ROLE", "worker".into()),
    ]);
    let started = Instant::now();
    let worker = spawn_bot(&worker_vars);
    while slack.posts() < posts_before + n {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the worker did not drain the queue"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let drain_per_s = n as f64 / started.elapsed().as_secs_f64();

    // End to end, one event at a time; then the same events again as duplicates.
    let count = |proxy: &CountingProxy, op: &str| proxy.snapshot().get(op).copied().unwrap_or(0);
    let ledger_before: usize = ddb_proxy.snapshot().values().sum();
    let sends_before = count(&sqs_proxy, "SendMessage") + count(&sqs_proxy, "DeleteMessage");
    let mut lat = Vec::with_capacity(m);
    for i in 0..m {
        let before = slack.posts();
        let started = Instant::now();
        assert_eq!(
            http.send_event(&url, &app_mention(&format!("EvDefE2e{i}")))
                .await,
            200
        );
        while slack.posts() == before {
            assert!(started.elapsed() < Duration::from_secs(30), "no post");
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        lat.push(started.elapsed().as_secs_f64() * 1e6);
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let ledger_after_first: usize = ddb_proxy.snapshot().values().sum();
    let sqs_per_event = (count(&sqs_proxy, "SendMessage") + count(&sqs_proxy, "DeleteMessage")
        - sends_before) as f64
        / m as f64;
    for i in 0..m {
        assert_eq!(
            http.send_event(&url, &app_mention(&format!("EvDefE2e{i}")))
                .await,
            200
        );
    }
    // Wait for the duplicates to be taken and deleted.
    let deletes = count(&sqs_proxy, "DeleteMessage");
    let started = Instant::now();
    while count(&sqs_proxy, "DeleteMessage") < deletes + m
        && started.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ledger_after_dup: usize = ddb_proxy.snapshot().values().sum();
    stop(worker);
    stop(ingress);
    DeferredFigures {
        ack,
        end_to_end: Latency {
            p50_us: percentile(&lat, 50.0),
            p99_us: percentile(&lat, 99.0),
        },
        drain_per_s,
        ledger_per_event: (ledger_after_first - ledger_before) as f64 / m as f64,
        ledger_per_duplicate: (ledger_after_dup - ledger_after_first) as f64 / m as f64,
        sqs_per_event,
    }
}

fn file_size(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.len())
}

/// The Lambda package: `bootstrap` zipped with deflate, as cargo-lambda and SAM upload it.
fn zip_size(binary: &Path) -> Option<u64> {
    let zip = std::env::temp_dir().join(format!("slack-once-bench-{}.zip", std::process::id()));
    let script = "import sys, zipfile\nwith zipfile.ZipFile(sys.argv[2], 'w', zipfile.ZIP_DEFLATED) as z:\n    z.write(sys.argv[1], 'bootstrap')\n";
    let ok = Command::new("python3")
        .args(["-c", script])
        .arg(binary)
        .arg(&zip)
        .status()
        .ok()?
        .success();
    let size = ok.then(|| file_size(&zip)).flatten();
    let _ = std::fs::remove_file(zip);
    size
}

fn dynamodb_client(endpoint: &str) -> aws_sdk_dynamodb::Client {
    use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("bench", "bench", None, None, "bench"))
        .http_client(slack_once::ledger::dynamo::http_client())
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

async fn fresh_table(endpoint: &str) -> String {
    let client = dynamodb_client(endpoint);
    let table = format!("bench-{}", std::process::id());
    let _ = client.delete_table().table_name(&table).send().await;
    DynamoLedger::create_table(&client, &table).await.unwrap();
    table
}

/// DynamoDB Local is a JVM: its first few hundred requests run interpreted. Warm it up so that
/// the figures measure slack-once, not the emulator's JIT.
async fn warm_up_dynamodb_local(endpoint: &str, table: &str) {
    use aws_sdk_dynamodb::types::AttributeValue;
    let client = dynamodb_client(endpoint);
    for i in 0..500 {
        client
            .update_item()
            .table_name(table)
            .key("pk", AttributeValue::S(format!("warm-up-{}", i % 50)))
            .update_expression("SET n = :n")
            .expression_attribute_values(":n", AttributeValue::N(i.to_string()))
            .send()
            .await
            .expect("DynamoDB Local answers");
    }
}

// ---------------------------------------------------------------- the table

fn ratio(bolt: f64, ours: f64) -> String {
    if ours > 0.0 && bolt.is_finite() {
        format!("{:.1}×", bolt / ours)
    } else {
        "–".into()
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "meets"
    } else {
        "misses"
    }
}

async fn report() {
    let runs = env_usize("BENCH_COLD_RUNS", 15);
    let n = env_usize("BENCH_WARM_EVENTS", 2000);
    let load_n = env_usize("BENCH_LOAD_EVENTS", 5000);
    let concurrency = env_usize("BENCH_LOAD_CONCURRENCY", 32);
    let endpoint = dynamodb_endpoint();
    assert!(
        bolt_dir().join("node_modules/@slack/bolt").exists(),
        "Bolt is not installed in bench/bolt: run scripts/bench.sh"
    );
    let slack = SlackStub::start().await;
    let table = fresh_table(&endpoint).await;
    warm_up_dynamodb_local(&endpoint, &table).await;
    eprintln!("measuring… (cold starts: {runs} runs each; warm: {n} events; load: {load_n} events, {concurrency} in flight)");

    let cold_local = cold_start_local(&slack, runs).await;
    let cold_lambda = cold_start_lambda(&slack, &endpoint, &table, runs, &[]).await;
    let secret_vars = bench_secret().await;
    let cold_lambda_secrets =
        cold_start_lambda(&slack, &endpoint, &table, runs, &secret_vars).await;
    let cold_bolt = cold_start_bolt(&slack, runs);

    // Long-running processes: in-memory ledger and DynamoDB ledger.
    let (mem, mem_port) = spawn_local(&slack, None);
    let (ddb, ddb_port) = spawn_local(&slack, Some((&endpoint, &table)));
    let http = HttpClient::default();
    wait_ready(&http, mem_port).await;
    wait_ready(&http, ddb_port).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let idle_mem = rss_kib(mem.id(), "VmRSS:");
    let idle_ddb = rss_kib(ddb.id(), "VmRSS:");
    let mem_url = format!("http://127.0.0.1:{mem_port}/slack/events");
    let ddb_url = format!("http://127.0.0.1:{ddb_port}/slack/events");

    let warm_mem = warm_http(&mem_url, n, "EvWarmMem").await;
    let warm_ddb = warm_http(&ddb_url, n, "EvWarmDdb").await;
    let in_proc = warm_in_process(Some(&slack), n, "EvInProc").await;
    let overhead = warm_in_process(None, n, "EvNoNet").await;
    let bolt = warm_bolt(&slack, n);
    let tput_mem = throughput(&mem_url, load_n, concurrency, "EvLoadMem");
    let tput_ddb = throughput(&ddb_url, load_n, concurrency, "EvLoadDdb");
    let peak_mem = rss_kib(mem.id(), "VmHWM:");
    let peak_ddb = rss_kib(ddb.id(), "VmHWM:");
    stop(mem);
    stop(ddb);

    let (first_trips, dup_trips, ops) = round_trips(&slack, &endpoint, &table).await;
    let deferred_n = env_usize("BENCH_DEFERRED_EVENTS", 200);
    let deferred_m = env_usize("BENCH_DEFERRED_E2E", 200);
    let def = deferred(&slack, &endpoint, &table, deferred_n, deferred_m).await;
    let release = Path::new(BIN);
    let bin_size = file_size(release).unwrap_or(0);
    let zip = zip_size(release);
    // SAM builds the one binary once (`SlackOnceFunction-Shared` when the worker exists too).
    let arm = ["SlackOnceFunction", "SlackOnceFunction-Shared"]
        .iter()
        .map(|dir| {
            Path::new(ROOT)
                .join(".aws-sam/build")
                .join(dir)
                .join("bootstrap")
        })
        .find(|path| path.exists())
        .unwrap_or_default();
    let arm_sizes = file_size(&arm).map(|s| (s, zip_size(&arm)));

    let machine = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let node = Command::new("node")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!("\n## slack-once benchmark report\n");
    println!(
        "machine: {} cores, {machine}; node {node}; Bolt {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        bolt_version()
    );
    println!("ratio = Bolt ÷ slack-once (above 1× means slack-once is faster or smaller)\n");
    println!("| measure | slack-once | Bolt for JavaScript | ratio | bar |");
    println!("|---|---|---|---|---|");
    println!(
        "| cold start → first event answered, local mode (ms, median [min–max] of {runs}) | {:.1} [{:.1}–{:.1}] | {:.1} [{:.1}–{:.1}] (node start → AwsLambdaReceiver) | {} | ≤ 15 ms: {} |",
        cold_local.median, cold_local.min, cold_local.max, cold_bolt.median, cold_bolt.min, cold_bolt.max,
        ratio(cold_bolt.median, cold_local.median), verdict(cold_local.median <= 15.0)
    );
    println!(
        "| cold start under a Lambda Runtime API stand-in, DynamoDB ledger (ms) | {:.1} [{:.1}–{:.1}] | – | {} | |",
        cold_lambda.median, cold_lambda.min, cold_lambda.max, ratio(cold_bolt.median, cold_lambda.median)
    );
    println!(
        "| cold start under the Lambda stand-in, Slack secrets read from Secrets Manager (moto) at start (ms) | {:.1} [{:.1}–{:.1}] | – | | + {:.1} ms median against the secrets in the environment |",
        cold_lambda_secrets.median, cold_lambda_secrets.min, cold_lambda_secrets.max,
        cold_lambda_secrets.median - cold_lambda.median
    );
    println!(
        "| warm latency in-process, reply posted to the stand-in (µs p50 / p99) | {:.0} / {:.0} | {:.0} / {:.0} | {} / {} | |",
        in_proc.p50_us, in_proc.p99_us, bolt.p50_us, bolt.p99_us, ratio(bolt.p50_us, in_proc.p50_us), ratio(bolt.p99_us, in_proc.p99_us)
    );
    println!(
        "| handler overhead without network (µs p50 / p99) | {:.0} / {:.0} | – | | ≤ 100 µs p50: {} |",
        overhead.p50_us, overhead.p99_us, verdict(overhead.p50_us <= 100.0)
    );
    println!("| warm latency over HTTP, in-memory ledger (µs p50 / p99, {n} sequential) | {:.0} / {:.0} | – | | |", warm_mem.p50_us, warm_mem.p99_us);
    println!(
        "| warm latency over HTTP, DynamoDB Local ledger (µs p50 / p99) | {:.0} / {:.0} | – | | |",
        warm_ddb.p50_us, warm_ddb.p99_us
    );
    println!("| throughput, {concurrency} in flight from a second process, in-memory ledger (events/s) | {tput_mem:.0} | – | | |");
    println!("| throughput, DynamoDB Local ledger (events/s) | {tput_ddb:.0} | – | | |");
    println!(
        "| idle RSS (MiB) | {:.1} (in-memory) / {:.1} (DynamoDB) | {:.1} | {} | ≤ 16 MB: {} |",
        idle_mem as f64 / 1024.0,
        idle_ddb as f64 / 1024.0,
        bolt.idle_rss_kib / 1024.0,
        ratio(bolt.idle_rss_kib, idle_ddb as f64),
        verdict((idle_mem.max(idle_ddb) as f64) * 1024.0 <= 16e6)
    );
    println!(
        "| peak RSS after the load (MiB) | {:.1} / {:.1} | {:.1} (after {n} events) | {} | |",
        peak_mem as f64 / 1024.0,
        peak_ddb as f64 / 1024.0,
        bolt.peak_rss_kib / 1024.0,
        ratio(bolt.peak_rss_kib, peak_ddb as f64)
    );
    println!(
        "| release binary (MiB), {} | {:.2} | – | | |",
        std::env::consts::ARCH,
        bin_size as f64 / 1048576.0
    );
    if let Some(zip) = zip {
        println!(
            "| Lambda zip (MiB), {} | {:.2} | – | | |",
            std::env::consts::ARCH,
            zip as f64 / 1048576.0
        );
    }
    if let Some((size, zip)) = arm_sizes {
        println!(
            "| arm64 bootstrap from `sam build` (MiB): binary / zip | {:.2} / {} | – | | |",
            size as f64 / 1048576.0,
            zip.map(|z| format!("{:.2}", z as f64 / 1048576.0))
                .unwrap_or("–".into())
        );
    }
    println!(
        "| DynamoDB requests per first delivery (counted) | {first_trips:.2} | – (no ledger) | | |"
    );
    println!(
        "| DynamoDB requests per duplicate (counted) | {dup_trips:.2} | – (answers every copy) | | 1 write, 0 reads: {} |",
        verdict(dup_trips == 1.0 && !ops.contains_key("GetItem") && !ops.contains_key("Query"))
    );
    println!(
        "| deferred mode: acknowledgement latency, ingress → SQS server (µs p50 / p99, {deferred_n} sequential) | {:.0} / {:.0} | – | | |",
        def.ack.p50_us, def.ack.p99_us
    );
    println!(
        "| deferred mode: end to end, Slack's request → the post by a worker (µs p50 / p99, {deferred_m} sequential) | {:.0} / {:.0} | – | | |",
        def.end_to_end.p50_us, def.end_to_end.p99_us
    );
    println!(
        "| deferred mode: events per second through one worker (8 in flight), DynamoDB Local | {:.0} | – | | |",
        def.drain_per_s
    );
    println!(
        "| deferred mode: DynamoDB requests per event / per duplicate (counted) | {:.2} / {:.2} | – | | |",
        def.ledger_per_event, def.ledger_per_duplicate
    );
    println!(
        "| deferred mode: SQS SendMessage + DeleteMessage per event (counted; and one ReceiveMessage per message) | {:.2} | – | | |",
        def.sqs_per_event
    );
    println!("\nDynamoDB operations seen by the counting proxy: {ops:?}");
    println!("posts at the Slack stand-in: {}", slack.posts());
}

fn bolt_version() -> String {
    std::fs::read_to_string(bolt_dir().join("node_modules/@slack/bolt/package.json"))
        .ok()
        .and_then(|p| serde_json::from_str::<serde_json::Value>(&p).ok())
        .and_then(|v| v["version"].as_str().map(str::to_string))
        .unwrap_or_default()
}
