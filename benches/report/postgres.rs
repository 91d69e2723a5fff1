//! Part 10 of the report: the ledger on PostgreSQL against DynamoDB Local. The same bots, in
//! process (the test kit's `TestBot`, as Slack sends requests, writing to its Slack stand-in),
//! on a `DynamoLedger` on DynamoDB Local and on a `PostgresLedger` on a schema of its own on the
//! local PostgreSQL, interleaved in blocks in one run: each request's latency (sent → answered
//! in Slack) and the ledger round trips it made (DynamoDB: the requests its SDK client sent,
//! counted by an interceptor in process; PostgreSQL: `PostgresLedger::statements_sent()`), both
//! without a proxy's hop. Then deferred mode's queue: one worker process draining the SQS
//! server's queue (its ledger on DynamoDB Local) against one draining `WORK_QUEUE_NAME` on
//! PostgreSQL (its ledger there too).

use super::*;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use slack_once::ledger::PostgresLedger;
use slack_once::postgres::Database;
use slack_once::queue::{PostgresQueue, SqsQueue, WorkQueue};
use slack_once::testing::TestBot;

/// Requests per kind and ledger (`BENCH_POSTGRES_EVENTS`), sent in 4 blocks per ledger.
fn events() -> usize {
    env_usize("BENCH_POSTGRES_EVENTS", 300)
}

/// Messages drained by each worker (`BENCH_POSTGRES_QUEUE_EVENTS`).
fn queue_events() -> usize {
    env_usize("BENCH_POSTGRES_QUEUE_EVENTS", 400)
}

/// The local PostgreSQL's `postgres` database (`POSTGRES_LOCAL_PORT`, 5433).
fn postgres_url() -> String {
    let port = env_usize("POSTGRES_LOCAL_PORT", 5433) as u16;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    if std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
        panic!(
            "PostgreSQL is not answering on {addr}: start it with scripts/postgres-local.sh start"
        );
    }
    format!("postgres://postgres@127.0.0.1:{port}/postgres")
}

/// A schema of the run's own on the local PostgreSQL, migrated: its `DATABASE_URL` (the schema
/// on the connection's `search_path`) and its name, dropped at the end of the part.
async fn fresh_schema(base: &str, name: &str) -> (String, String) {
    let schema = format!("bench_{name}_{}_{}", std::process::id(), now_unix());
    let admin = Database::connect(base, 1).expect("the local URL");
    admin
        .client()
        .await
        .expect("connect to the local PostgreSQL")
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .expect("create the bench's schema");
    let url = format!("{base}?options=-c%20search_path%3D{schema}");
    Database::connect(&url, 1)
        .unwrap()
        .migrate()
        .await
        .expect("migrate the bench's schema");
    (url, schema)
}

async fn drop_schema(base: &str, schema: &str) {
    let admin = Database::connect(base, 1).expect("the local URL");
    if let Ok(client) = admin.client().await {
        let _ = client
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await;
    }
}

/// Counts the requests a DynamoDB client sends (each attempt, a retry's included), in process.
#[derive(Clone, Debug, Default)]
struct RequestCounter(Arc<AtomicU64>);

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "BenchRequestCounter"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// A ledger of this part and how its round trips are counted.
enum Counted {
    Dynamo(RequestCounter),
    Postgres(PostgresLedger),
}

impl Counted {
    fn round_trips(&self) -> u64 {
        match self {
            Counted::Dynamo(counter) => counter.0.load(Ordering::Relaxed),
            Counted::Postgres(ledger) => ledger.statements_sent(),
        }
    }
}

/// A kind of request this part measures.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// A person's `app_mention` (with its `client_msg_id`), the reference bot replying once.
    Mention,
    /// `/once`, the reference bot: its acknowledgement, then one response.
    Command,
    /// The bench's bot: an `app_mention` that replies once, nothing else.
    Reply,
    /// The same bot's other listener: one `ctx.state()` update, then the same reply.
    StateChange,
}

const KINDS: [Kind; 4] = [Kind::Mention, Kind::Command, Kind::Reply, Kind::StateChange];

/// The bench's bot: in `C0REPLY` it replies; in `C0STATE` it increments a counter in the
/// app's state, then replies with it.
fn state_bot() -> App {
    App::new().app_mention(|ctx: Ctx, m: AppMention| async move {
        if m.channel == "C0STATE" {
            let n = ctx
                .state()
                .update("count", Duration::from_secs(3600), |n: Option<u64>| {
                    n.unwrap_or(0) + 1
                })
                .await?;
            ctx.reply(format!("{n}")).await?;
        } else {
            ctx.reply("1").await?;
        }
        Ok(())
    })
}

/// One side of the comparison: the two bots on one ledger, and how its round trips are counted.
struct Side {
    name: &'static str,
    reference: TestBot,
    state: TestBot,
    counted: Counted,
}

/// A person's message mentioning the bot in `channel`, as Slack sends it.
fn mention_event(channel: &str, tag: &str) -> serde_json::Value {
    let h = tag.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    let ts = format!(
        "{}.{:06}",
        1_767_225_600 + h % 10_000_000,
        (h >> 40) % 1_000_000
    );
    serde_json::json!({
        "type": "app_mention", "user": "U0USER", "text": "<@UBOT> benchmark",
        "channel": channel, "ts": ts, "event_ts": ts,
        "client_msg_id": uuid::Uuid::new_v4().to_string(),
    })
}

/// One request of `kind` to `side`, sent → answered in Slack (µs). A command's answer (its
/// response) is made after its acknowledgement: the time runs until the stand-in has it.
async fn one(side: &Side, kind: Kind, tag: &str) -> f64 {
    let started = Instant::now();
    match kind {
        Kind::Mention => {
            let outcome = side.reference.send(mention_event("C0TEST", tag)).await;
            assert_eq!(outcome, "answered", "{} mention {tag}", side.name);
        }
        Kind::Command => {
            let slack = side.reference.slack();
            let responses = || slack.counts().get("response_url").copied().unwrap_or(0);
            let before = responses();
            let acked = side.reference.command("/once", "benchmark").await;
            assert_eq!(acked.status, 200, "{} command {tag}", side.name);
            // The acknowledgement (its ephemeral) is the HTTP answer; the answer is one post to
            // the command's response URL.
            while responses() == before {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "{}: /once {tag} was not answered",
                    side.name
                );
                tokio::time::sleep(Duration::from_micros(50)).await;
            }
        }
        Kind::Reply | Kind::StateChange => {
            let channel = if kind == Kind::Reply {
                "C0REPLY"
            } else {
                "C0STATE"
            };
            let outcome = side.state.send(mention_event(channel, tag)).await;
            assert_eq!(outcome, "answered", "{} {channel} {tag}", side.name);
        }
    }
    since_us(started)
}

/// What one kind cost on one side: every request's latency, and the round trips in all.
#[derive(Default)]
struct Cell {
    times: Vec<f64>,
    round_trips: u64,
}

async fn side_on(
    name: &'static str,
    ledger: Arc<dyn slack_once::ledger::Ledger>,
    counted: Counted,
) -> Side {
    let reference = TestBot::start_with_ledger(reference_app(), ledger.clone()).await;
    let state = TestBot::start_with_ledger(state_bot(), ledger).await;
    Side {
        name,
        reference,
        state,
        counted,
    }
}

/// Every kind on both sides: `n` requests each, in 4 blocks a side, the sides alternating.
async fn ledgers(dynamodb: &str, table: &str, postgres: &str) -> (Vec<[Cell; 2]>, usize) {
    let n = events();
    let counter = RequestCounter::default();
    let client = {
        use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
        aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::Config::builder()
                .behavior_version(BehaviorVersion::latest())
                .region(Region::new("us-east-1"))
                .endpoint_url(dynamodb)
                .credentials_provider(Credentials::new("bench", "bench", None, None, "bench"))
                .http_client(slack_once::testing::wiring::aws_http_client())
                .interceptor(counter.clone())
                .build(),
        )
    };
    let dynamo = side_on(
        "DynamoDB Local",
        Arc::new(DynamoLedger::new(client, table)),
        Counted::Dynamo(counter),
    )
    .await;
    // A pool as the binary's default would hold for one request at a time.
    let database = Database::connect(postgres, 4).expect("the schema's URL");
    let pg_ledger = PostgresLedger::new(database);
    let postgres = side_on(
        "PostgreSQL",
        Arc::new(pg_ledger.clone()),
        Counted::Postgres(pg_ledger),
    )
    .await;
    let sides = [&dynamo, &postgres];

    // Each connection's first use, and the servers' caches, out of the figures.
    for side in sides {
        for kind in KINDS {
            for i in 0..20 {
                one(side, kind, &format!("w{i}")).await;
            }
        }
    }
    let mut cells: Vec<[Cell; 2]> = KINDS.iter().map(|_| Default::default()).collect();
    for (k, kind) in KINDS.iter().enumerate() {
        for block in 0..4 {
            for (s, side) in sides.iter().enumerate() {
                let before = side.counted.round_trips();
                for i in 0..n / 4 {
                    let t = one(side, *kind, &format!("{k}-{block}-{i}")).await;
                    cells[k][s].times.push(t);
                }
                // A command's completion may follow its answer: let it land in this block.
                tokio::time::sleep(Duration::from_millis(50)).await;
                cells[k][s].round_trips += side.counted.round_trips() - before;
            }
        }
    }
    (cells, n / 4 * 4)
}

/// A process this part started, stopped (by its PID) when dropped, a failed phase's included.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `n` person's messages queued through the ingress in process (the router with `queue`),
/// then one worker process with `vars` draining them: messages a second, from its first
/// answer in Slack to its last.
async fn drain(
    slack: &SlackStub,
    ingress_vars: &[(&str, String)],
    queue: Arc<dyn WorkQueue>,
    worker_vars: Vec<(&'static str, String)>,
    tag: &str,
    n: usize,
) -> f64 {
    let mut vars: HashMap<&str, String> = HashMap::from([
        ("SLACK_SIGNING_SECRET", SECRET.to_string()),
        ("METRICS", "off".to_string()),
    ]);
    vars.extend(ingress_vars.iter().cloned());
    let config = Config::from_lookup(|k| vars.get(k).cloned()).unwrap();
    let router = Application::with_queue(
        config,
        Arc::new(MemoryLedger::new()),
        reference_app(),
        Some(queue),
    )
    .router();
    for i in 0..n {
        oneshot(&router, &person_message(&format!("EvPgQ{tag}{i}"))).await;
    }
    let posts_before = slack.posts();
    let mut vars = worker_vars;
    vars.extend([
        ("SLACK_BOT_TOKEN", "xoxb-bench".into()),
        ("SLACK_API_URL", slack.base_url.clone()),
        ("SLACK_ONCE_ROLE", "worker".into()),
    ]);
    let spawned = Instant::now();
    let worker = Running(spawn_bot(&vars));
    // From its first answer to its last: the process's start and first poll left out.
    let mut first = None;
    while slack.posts() < posts_before + n {
        assert!(
            spawned.elapsed() < Duration::from_secs(120),
            "the {tag} worker did not drain its queue ({} of {n} answered)",
            slack.posts() - posts_before
        );
        if first.is_none() && slack.posts() > posts_before {
            first = Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let per_s = (n - 1) as f64 / first.unwrap_or(spawned).elapsed().as_secs_f64();
    drop(worker);
    per_s
}

/// Deferred mode's queue: SQS (the SQS server) and DynamoDB Local against `WORK_QUEUE_NAME`
/// and the ledger on PostgreSQL, one worker each, in turn, twice. Messages a second per run.
async fn queues(dynamodb: &str, table: &str, postgres: &str) -> Vec<[f64; 2]> {
    let n = queue_events();
    let slack = SlackStub::start().await;
    let sqs = sqs_endpoint();
    let sqs_client = sqs_client(&sqs);
    let mut rounds = Vec::new();
    for round in 0..2 {
        let url = fresh_queue(&sqs_client, &format!("-pg{round}")).await;
        let sqs_queue = Arc::new(SqsQueue::new(sqs_client.clone(), url.clone()));
        let mut worker = aws_env(dynamodb);
        worker.extend([
            ("AWS_ENDPOINT_URL_SQS", sqs.clone()),
            ("WORK_QUEUE_URL", url.clone()),
            ("DEDUP_TABLE", table.to_string()),
        ]);
        let on_sqs = drain(
            &slack,
            &[("WORK_QUEUE_URL", url)],
            sqs_queue,
            worker,
            &format!("Sqs{round}"),
            n,
        )
        .await;

        let name = format!("bench-{round}");
        let database = Database::connect(postgres, 2).expect("the schema's URL");
        let pg_queue = Arc::new(PostgresQueue::new(database, name.clone(), 5));
        let ingress = [
            ("DATABASE_URL", postgres.to_string()),
            ("WORK_QUEUE_NAME", name.clone()),
        ];
        let worker = vec![
            ("DATABASE_URL", postgres.to_string()),
            ("WORK_QUEUE_NAME", name),
        ];
        let on_postgres = drain(&slack, &ingress, pg_queue, worker, &format!("Pg{round}"), n).await;
        rounds.push([on_sqs, on_postgres]);
    }
    rounds
}

const KIND_NAMES: [&str; 4] = [
    "a person's `app_mention`, the reference bot replying once",
    "`/once`, the reference bot (its acknowledgement, then one response)",
    "the bench's bot: an `app_mention` replied to once",
    "the same bot: one `ctx.state()` update, then the same reply",
];

/// Part 10, as Markdown.
pub async fn postgres_section(dynamodb: &str) -> String {
    let base = postgres_url();
    let table = fresh_table(dynamodb, "pg-compare").await;
    let (url, schema) = fresh_schema(&base, "ledger").await;
    let (cells, n) = ledgers(dynamodb, &table, &url).await;
    let drained = queues(dynamodb, &table, &url).await;
    drop_schema(&base, &schema).await;

    let summary = |c: &Cell| {
        let lat = latency(c.times.clone());
        (lat, c.round_trips as f64 / c.times.len() as f64)
    };
    let mut md = String::new();
    out!(
        md,
        "\n### 10. The ledger on PostgreSQL against DynamoDB Local (µs p50 / p99, {n} sequential requests per kind and ledger)\n"
    );
    out!(
        md,
        "The same bots in process (the test kit's `TestBot`, requests signed as Slack signs \
         them, its Slack stand-in answering), one on a `DynamoLedger` on DynamoDB Local, one on \
         a `PostgresLedger` on a schema of its own on the local PostgreSQL (a pool of 4), in 4 \
         blocks a kind, the two ledgers alternating. Latency runs from the request sent to its \
         answer in Slack. Round trips per request are counted in process, without a proxy: the \
         DynamoDB client's requests (an interceptor), the PostgreSQL ledger's statements \
         (`statements_sent()`); two sent together (a claim and its alias) count 2.\n"
    );
    out!(
        md,
        "| request | DynamoDB Local: round trips | p50 / p99 | PostgreSQL: round trips | p50 / p99 | PostgreSQL ÷ DynamoDB Local (p50, p99) |"
    );
    out!(md, "|---|---|---|---|---|---|");
    let mut figures = Vec::new();
    for (k, name) in KIND_NAMES.iter().enumerate() {
        let (d, dt) = summary(&cells[k][0]);
        let (p, pt) = summary(&cells[k][1]);
        out!(
            md,
            "| {name} | {dt:.2} | {d} | {pt:.2} | {p} | {:.2}×, {:.2}× |",
            p.p50_us / d.p50_us,
            p.p99_us / d.p99_us
        );
        figures.push(((d, dt), (p, pt)));
    }
    let ((dr, drt), (pr, prt)) = figures[2];
    let ((ds, dst), (ps, pst)) = figures[3];
    out!(
        md,
        "\nA state change, the last row less the one before it: on DynamoDB Local {:+.2} round \
         trips, {:+.0} µs p50 ({:+.0} p99); on PostgreSQL {:+.2} round trips, {:+.0} µs p50 \
         ({:+.0} p99).",
        dst - drt,
        ds.p50_us - dr.p50_us,
        ds.p99_us - dr.p99_us,
        pst - prt,
        ps.p50_us - pr.p50_us,
        ps.p99_us - pr.p99_us
    );
    let runs: Vec<String> = drained
        .iter()
        .enumerate()
        .map(|(i, [sqs, pg])| {
            format!(
                "run {}: the SQS server with the ledger on DynamoDB Local {sqs:.0}, \
                 `WORK_QUEUE_NAME` with the ledger on PostgreSQL {pg:.0} ({:.2}×)",
                i + 1,
                pg / sqs
            )
        })
        .collect();
    out!(
        md,
        "\nDeferred mode's queue, one worker process draining {} queued person's messages \
         (the reference bot replying to each), messages a second from its first answer to its \
         last: {}.",
        queue_events(),
        runs.join("; ")
    );
    out!(
        md,
        "\nknobs: BENCH_POSTGRES_EVENTS={}, BENCH_POSTGRES_QUEUE_EVENTS={}",
        events(),
        queue_events()
    );
    md
}
