//! The soak (`scripts/soak.sh`): a seeded mix of requests at a steady rate through two
//! synchronous ingresses, a deferred ingress and two workers of one bot (`examples/soak.rs`), on
//! one table (DynamoDB Local) and one queue (the SQS server), with faults throughout and one
//! rolling deploy from the bot built on the previous release to the bot built on this one;
//! checked at the end from the stand-in's and the ledger's records, never from the bot's logs;
//! then the dead-letter queue redriven and checked again; then the cost per million requests,
//! from what the run counted. Ignored by `cargo test`: it takes minutes.
//!
//! Settings (environment): `SOAK_EVENTS` (requests, 1,000), `SOAK_RATE` (requests a second,
//! 45), `SOAK_SEED` (1), `SOAK_KILL_SECONDS` (a SIGKILL every so often, 5), `SOAK_DEPLOY_AT`
//! (the rolling deploy starts after this percentage of the requests, 10), `SOAK_PREVIOUS_BIN`
//! (the bot built on the previous release: `scripts/soak.sh` builds it), `SOAK_CALM=1` (no
//! faults and no kills: the baseline the cost per million is read from), `SOAK_KEEP=1` (the
//! table, the queues and the dead letters left, not redriven, with the command that redrives
//! them). The rate is a ceiling:
//! the driver holds back while the work queue, the deliveries in flight or the synchronous
//! ingress's median latency say the machine is at its knee, so a slower machine runs longer
//! rather than failing requests of its own overload.
//!
//! **The mix** ([`mix::MIX`]): 30 % a person's mention in one of 32 channels (half of them
//! also delivered as its `message` event), 12 % a question to the assistant in a DM (answered
//! by a stream), 15 % `/once`, 12 % a click on the button of an earlier answer, 10 % the note
//! modal's submission (15 % of them submitted twice), 21 % an event no listener takes (a
//! reaction, a message nobody asked the bot about). 10 % of mentions and questions have a
//! phantom copy under another `ts` with the same `client_msg_id`, 0.5 to 3 s later. Events are
//! retried as Slack does when a delivery fails or is not answered within 3 s (on a scaled
//! clock: 0.2 s, 4 s, 10 s), and 5 % of them once more though answered (the acknowledgement
//! lost on its way to Slack); a form is sent once (a failure is an error the person sees).
//! Each delivery goes to a synchronous or the deferred ingress at random.
//!
//! **Faults** ([`SLACK_FAULTS`], [`proxy::DYNAMO_FAULTS`]), per 10,000 calls: a Slack write
//! answered 500 (150), 429 with `Retry-After: 1` (150), `internal_error` though applied (80),
//! never answered (30), applied then never answered (30); a `response_url` post answered 500
//! (150); a look-up answered 429 (200) or `ratelimited` (50); DynamoDB's answer lost after the
//! write (50), a 500 after it (30), a throttle before it (50), a slow answer (50); an SQS
//! send, receive, delete or visibility change applied and its answer lost (50) or a 500 (30)
//! ([`proxy::SQS_FAULTS`]); a SIGKILL of
//! one of the three killable processes every `SOAK_KILL_SECONDS`, restarted 300 ms later; the
//! rolling deploy, each process replaced in turn 2 s apart, the old one finishing what it
//! holds.
//!
//! **Checked**: no request answered twice; every request answered (a stream complete, a click's
//! message marked), or failed in the ledger with its reason, or never acknowledged at all
//! (Slack gave up, and the person saw an error); no claim left in progress past its lease once
//! the sweep an operator runs has run; what the dead-letter queue held redriven and answered
//! once; the memory of the processes that ran from the deploy to the end flat.
//!
//! **On PostgreSQL** (`SOAK_STORE=postgres`, `scripts/soak.sh --store postgres`): the same
//! fleet, mix, Slack faults, kills and checks, with `DATABASE_URL` (a fresh schema) and
//! `WORK_QUEUE_NAME` in place of `DEDUP_TABLE` and `WORK_QUEUE_URL`, and no AWS variable at
//! all (the signing secret and the token in `SLACK_SIGNING_SECRET`, `SLACK_BOT_TOKEN`). The
//! database's faults ([`stack::POSTGRES_FAULTS`]) replace DynamoDB's and SQS's: a TCP proxy
//! (`helpers::CuttingProxy`) cuts a connection before a statement (50 per 10,000 statements),
//! after the server answered but before the answer reaches the process (50: the lost answer),
//! or slows an answer by 300 to 800 ms (50). The ledger is read with
//! `PostgresLedger::claim_record`; the sweep is `slack-once sweep` and the redrive `slack-once
//! redrive` with `DATABASE_URL` (and `WORK_QUEUE_NAME`). The rolling deploy rolls this release
//! onto itself (each process replaced in turn, as above): the previous release has no
//! PostgreSQL support (an older and a newer release on one database are tried by their own
//! tests, not here). No cost per million is printed: AWS's prices do not apply.

mod cost;
mod fleet;
mod mix;
mod proxy;
mod stack;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::Semaphore;

use crate::helpers::*;
use fleet::{Fleet, Role, Version};
use mix::{Clickable, Kind, Rng};
use proxy::Registry;
use stack::{Stack, Store};

/// Deliveries in flight at most (each with its retries): far more than a steady rate needs.
const MAX_IN_FLIGHT: usize = 4096;
/// The pacing's bounds: visible messages in the work queue, and deliveries in flight.
const MAX_BACKLOG: usize = 60;
const MAX_ACTIVE: usize = 150;
/// And the median latency of the recent mentions answered synchronously (at a rate this
/// machine keeps up with, 30 to 60 ms).
const MAX_MEDIAN: Duration = Duration::from_millis(100);
/// The work queue's `maxReceiveCount`: 3 (the template's is 5), so that Slack's faults
/// dead-letter some requests for the redrive to bring back.
const MAX_RECEIVES: u32 = 3;
/// How often a line of progress is printed while sending.
const PROGRESS_EVERY: Duration = Duration::from_secs(60);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Slack's faults, per 10,000 calls.
fn slack_faults(seed: u64) -> RandomFaults {
    RandomFaults {
        writes: vec![
            (150, SlackFailure::Status(500)),
            (150, SlackFailure::RateLimited(1)),
            (80, SlackFailure::MadeThenCode("internal_error")),
            (30, SlackFailure::Unanswered),
            (30, SlackFailure::MadeUnanswered),
        ],
        hooks: vec![(150, SlackFailure::Status(500))],
        reads: vec![
            (200, SlackFailure::RateLimited(1)),
            (50, SlackFailure::Code("ratelimited")),
        ],
        seed,
    }
}

/// What the soak knows of one request: what it is and what became of its deliveries.
struct Record {
    kind: Kind,
    marker: Option<String>,
    keys: Vec<String>,
    clicked: Option<(String, String)>,
    /// When its first delivery was sent (epoch µs).
    sent_us: u64,
    /// Whether any delivery was answered 2xx.
    acknowledged: bool,
    /// Whether every delivery went out while the previous release still served somewhere.
    before_deploy_done: bool,
    /// Each delivery: (which of the request's bodies, attempt, where, the version serving
    /// there, its status or none within Slack's 3 s, whether a process took it), for the
    /// verdicts and a failure's report.
    trail: Vec<Delivery>,
}

/// One delivery of a request: which of its bodies, the attempt, where it went, the version
/// serving there, its status (none within Slack's 3 s), whether a process took it.
type Delivery = (usize, usize, &'static str, Version, Option<u16>, bool);

/// Ingress answers: per kind, the latency of each answered delivery (µs).
#[derive(Default)]
struct Deliveries {
    latency_us: HashMap<Kind, Vec<u32>>,
    /// Per kind, deliveries that reached a process (answered, or timed out), and their time.
    invocations: HashMap<Kind, (u64, Duration)>,
    /// Deliveries answered, by status.
    statuses: BTreeMap<u16, u64>,
    /// Deliveries that got no answer (connection refused: a process down; or 3 s passed).
    unanswered: u64,
    /// The latency of the last answered deliveries (µs), whatever their kind: the pacing's
    /// measure of how busy the machine is.
    recent_us: std::collections::VecDeque<u32>,
}

/// How many recent answers the pacing's median is taken over.
const RECENT: usize = 50;

impl Deliveries {
    /// The median of the recent answers' latency.
    fn recent_median(&self) -> Duration {
        let mut recent: Vec<u32> = self.recent_us.iter().copied().collect();
        recent.sort_unstable();
        Duration::from_micros(recent.get(recent.len() / 2).copied().unwrap_or(0) as u64)
    }
}

fn epoch_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// Delivers `body` signed now: the status, or `None` when no answer came within Slack's 3 s.
async fn send(
    http: &HttpClient,
    url: &str,
    body: &str,
    form: bool,
    retry: Option<u32>,
) -> (Option<u16>, bool) {
    let mut headers = signed_headers(SECRET, now_unix(), body.as_bytes());
    if form {
        headers[0].1 = "application/x-www-form-urlencoded".into();
    }
    if let Some(n) = retry {
        headers.push(("x-slack-retry-num".into(), n.to_string()));
        headers.push(("x-slack-retry-reason".into(), "http_timeout".into()));
    }
    match tokio::time::timeout(
        Duration::from_secs(3),
        http.try_request("POST", url, &headers, body.as_bytes().to_vec()),
    )
    .await
    {
        Ok(Ok(answer)) => (Some(answer.status.as_u16()), true),
        Ok(Err(_)) => (None, false),
        // Timed out: the process took it (an invocation), Slack stopped waiting.
        Err(_) => (None, true),
    }
}

fn percentile(sorted: &[u32], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    Duration::from_micros(sorted[((sorted.len() - 1) as f64 * p).round() as usize] as u64)
}

/// Runs the soak bot's `tool` (redrive, sweep) against the stack; its report.
fn tool(binary: &std::path::Path, args: &[&str], vars: &[(&'static str, String)]) -> String {
    let out = std::process::Command::new(binary)
        .args(args)
        .env_clear()
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("the soak bot's tool runs");
    let report = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{args:?} failed: {report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a soak of minutes: scripts/soak.sh runs it"]
async fn soak() {
    let events = env_u64("SOAK_EVENTS", 1000);
    let rate = env_u64("SOAK_RATE", 45).max(1);
    let kill_every = Duration::from_secs(env_u64("SOAK_KILL_SECONDS", 5).max(1));
    let seed = env_u64("SOAK_SEED", 1) | 1;
    let deploy_at = events * env_u64("SOAK_DEPLOY_AT", 10).clamp(1, 90) / 100;
    // A calm day: no fault and no kill (the deploy still rolls): the cost's baseline.
    let calm = env_u64("SOAK_CALM", 0) == 1;
    // Leave the stack and the dead letters for a redrive by hand.
    let keep = env_u64("SOAK_KEEP", 0) == 1;
    let store = Store::from_env();
    let current = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("examples/soak"))
        .unwrap();
    // On PostgreSQL the deploy rolls this release onto itself: the previous one has no
    // PostgreSQL support.
    let previous = match store {
        Store::DynamoDb => std::path::PathBuf::from(std::env::var("SOAK_PREVIOUS_BIN").expect(
            "SOAK_PREVIOUS_BIN is not set: run the soak with scripts/soak.sh, which builds the \
             soak bot on the previous release (scripts/previous-release.sh --example soak)",
        )),
        Store::Postgres => current.clone(),
    };
    assert!(previous.exists(), "no binary at {}", previous.display());
    assert!(
        current.exists(),
        "the soak bot is not built at {}: `cargo test` builds the examples",
        current.display()
    );
    println!(
        "SOAK_STORE={store:?} SOAK_EVENTS={events} SOAK_RATE={rate} SOAK_SEED={seed} \
         SOAK_KILL_SECONDS={} deploy after request {deploy_at}{}",
        kill_every.as_secs(),
        if calm {
            "; SOAK_CALM=1: no faults, no kills"
        } else {
            ""
        }
    );
    let mut rng = Rng(seed);

    // ---- the stack: the stores and their proxies, Slack
    let registry: Arc<Mutex<Registry>> = Default::default();
    let stack = Arc::new(Stack::start(store, registry.clone(), seed, calm).await);
    let slack = SlackStandin::start().await;
    slack.keep_counts_only();
    if !calm {
        slack.random_faults(Some(slack_faults(seed.wrapping_mul(7) | 1)));
    }
    let common = stack.common_vars(&slack);
    let with = |extra: &[(&'static str, String)]| {
        let mut vars = common.clone();
        vars.extend(extra.iter().cloned());
        vars
    };
    let sync_vars = with(&[("DEDUP_LEASE_SECONDS", "2".into())]);
    let ingress_vars = with(&[stack.queue_var()]);
    // 32 messages in flight per worker: a batch of 10 on a few concurrent invocations, what an
    // operator sets for this rate (the default 8 falls behind the deferred half of 60 a second).
    // A lease of 10 s (the template's worker timeout is 120 s): on two busy cores a message's
    // work can take seconds, and a shorter lease would hand it out again while it runs.
    let worker_vars = with(&[
        stack.queue_var(),
        ("DEDUP_LEASE_SECONDS", "10".into()),
        ("WORK_QUEUE_MAX_RECEIVES", MAX_RECEIVES.to_string()),
        ("WORKER_CONCURRENCY", "32".into()),
    ]);
    let fleet = {
        let (previous, current) = (previous.clone(), current.clone());
        let slots = vec![
            ("sync A", Role::SyncIngress, true, sync_vars.clone()),
            ("sync B", Role::SyncIngress, false, sync_vars),
            ("deferred", Role::DeferredIngress, true, ingress_vars),
            ("worker 1", Role::Worker, true, worker_vars.clone()),
            ("worker 2", Role::Worker, false, worker_vars),
        ];
        Arc::new(
            tokio::task::spawn_blocking(move || Fleet::start(previous, current, slots))
                .await
                .unwrap(),
        )
    };

    // ---- chaos and memory samples until the sending ends
    let sending = Arc::new(AtomicBool::new(true));
    let rolling = Arc::new(AtomicBool::new(false));
    let chaos = {
        let (fleet, sending, rolling) = (fleet.clone(), sending.clone(), rolling.clone());
        let mut rng = Rng(seed.wrapping_mul(31) | 1);
        tokio::spawn(async move {
            let mut next_kill = Instant::now() + kill_every;
            while sending.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_secs(1)).await;
                fleet.sample_rss();
                if !calm && Instant::now() >= next_kill && !rolling.load(Ordering::Relaxed) {
                    let killable = fleet.killable();
                    fleet
                        .kill_and_restart(killable[rng.below(killable.len())])
                        .await;
                    next_kill = Instant::now() + kill_every;
                }
            }
        })
    };

    // ---- the requests
    let http = HttpClient::default();
    let started = Instant::now();
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let records: Arc<Mutex<Vec<Record>>> = Default::default();
    let deliveries: Arc<Mutex<Deliveries>> = Default::default();
    let deploy_done = Arc::new(AtomicBool::new(false));
    let mut deploy_task = None;
    let mut clickable: Vec<Clickable> = Vec::new();
    let mut seen_posts = 0;
    let mut next_pool = Instant::now();
    let mut next_progress = Instant::now() + PROGRESS_EVERY;
    // The work queue's backlog (visible messages), read every half second: the pacing's brake.
    let backlog = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let backlog_reader = {
        let (backlog, sending, stack) = (backlog.clone(), sending.clone(), stack.clone());
        tokio::spawn(async move {
            while sending.load(Ordering::Relaxed) {
                if let Some(n) = stack.backlog().await {
                    backlog.store(n, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let interval = Duration::from_micros(1_000_000 / rate);
    let mut next_at = Instant::now();
    let mut braked = Duration::ZERO;
    let mut median = Duration::ZERO;
    for i in 0..events {
        // The steady rate, unless the machine has fallen behind: then the next request waits
        // until the work queue's backlog and the deliveries in flight are back under their
        // bounds, and the rate goes on from there (no burst to catch up). A soak measures the
        // product's faults, not a machine's overload.
        tokio::time::sleep_until(next_at.into()).await;
        let brake = Instant::now();
        if i % 50 == 0 {
            median = deliveries.lock().unwrap().recent_median();
        }
        while backlog.load(Ordering::Relaxed) > MAX_BACKLOG
            || MAX_IN_FLIGHT - in_flight.available_permits() > MAX_ACTIVE
            || median > MAX_MEDIAN
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
            median = deliveries.lock().unwrap().recent_median();
            if median > MAX_MEDIAN {
                // Its answers are old: the next ones tell whether the machine has caught up.
                deliveries.lock().unwrap().recent_us.clear();
                tokio::time::sleep(Duration::from_millis(200)).await;
                median = Duration::ZERO;
            }
        }
        braked += brake.elapsed();
        next_at = (next_at + interval).max(Instant::now());
        if i == deploy_at && deploy_task.is_none() {
            let (fleet, rolling, done) = (fleet.clone(), rolling.clone(), deploy_done.clone());
            rolling.store(true, Ordering::Relaxed);
            deploy_task = Some(tokio::spawn(async move {
                fleet.roll(Duration::from_secs(2)).await;
                rolling.store(false, Ordering::Relaxed);
                done.store(true, Ordering::Relaxed);
            }));
        }
        if Instant::now() >= next_pool {
            // New answers with the button join the pool of what people may click.
            let posts = slack.posted_from(seen_posts);
            seen_posts += posts.len();
            for p in posts {
                let has_button = p.body["blocks"]
                    .as_array()
                    .is_some_and(|b| b.iter().any(|b| b["type"] == "actions"));
                if has_button {
                    let channel = p.body["channel"].as_str().unwrap_or_default().to_string();
                    clickable.push((channel, p.ts.clone(), p.body.clone()));
                }
            }
            // Slack keeps a message clickable; people click recent ones.
            if clickable.len() > 2000 {
                clickable.drain(..clickable.len() - 2000);
            }
            next_pool = Instant::now() + Duration::from_millis(500);
        }
        let kind = mix::draw(&mut rng);
        let planned = mix::plan(i, kind, &mut rng, &slack.origin(), &mut clickable);
        {
            let mut registry = registry.lock().unwrap();
            for key in &planned.keys {
                registry.keys.insert(key.clone(), planned.kind);
            }
            registry.kinds.push(planned.kind);
        }
        let before_deploy_done = !deploy_done.load(Ordering::Relaxed);
        records.lock().unwrap().push(Record {
            kind: planned.kind,
            marker: planned.marker.clone(),
            keys: planned.keys.clone(),
            clicked: planned.clicked.clone(),
            sent_us: epoch_us(),
            acknowledged: false,
            before_deploy_done,
            trail: Vec::new(),
        });
        for (body, delivery) in planned.deliveries.into_iter().enumerate() {
            // Where each attempt goes: a synchronous ingress (A or B) or the deferred one.
            let picks: Vec<(Role, usize)> = (0..5)
                .map(|_| match rng.below(4) {
                    0 | 1 => (Role::DeferredIngress, 0),
                    n => (Role::SyncIngress, n),
                })
                .collect();
            let permit = in_flight.clone().acquire_owned().await.unwrap();
            let (http, fleet, records, deliveries, deploy_done) = (
                http.clone(),
                fleet.clone(),
                records.clone(),
                deliveries.clone(),
                deploy_done.clone(),
            );
            let (kind, ack_lost) = (planned.kind, planned.ack_lost);
            tokio::spawn(async move {
                let _permit = permit;
                tokio::time::sleep(delivery.after).await;
                // Slack retries an event; a form it sends once.
                let attempts = if delivery.form { 1 } else { 4 };
                let mut lost_once = ack_lost;
                for (attempt, &(role, pick)) in picks.iter().enumerate().take(attempts) {
                    if attempt > 0 {
                        tokio::time::sleep(mix::RETRY_AFTER[attempt - 1]).await;
                    }
                    let (url, version) = fleet.url(role, pick);
                    let retry = (attempt > 0).then_some(attempt as u32);
                    let sent = Instant::now();
                    let (status, reached) =
                        send(&http, &url, &delivery.body, delivery.form, retry).await;
                    let took = sent.elapsed();
                    {
                        let mut records = records.lock().unwrap();
                        let r = &mut records[i as usize];
                        if !deploy_done.load(Ordering::Relaxed) {
                            r.before_deploy_done = true;
                        }
                        let place = match (role, pick % 2) {
                            (Role::DeferredIngress, _) => "deferred",
                            (_, 0) => "sync A",
                            _ => "sync B",
                        };
                        r.trail
                            .push((body, attempt, place, version, status, reached));
                    }
                    {
                        let mut d = deliveries.lock().unwrap();
                        if reached {
                            let inv = d.invocations.entry(kind).or_default();
                            inv.0 += 1;
                            inv.1 += took;
                        }
                        match status {
                            Some(s) => *d.statuses.entry(s).or_default() += 1,
                            None => d.unanswered += 1,
                        }
                        if status.is_some_and(|s| (200..300).contains(&s)) {
                            let us = took.as_micros().min(u32::MAX as u128) as u32;
                            d.latency_us.entry(kind).or_default().push(us);
                            // The pacing watches one path: a mention answered in a synchronous
                            // ingress (its claim, its post, its completion).
                            if kind == Kind::Mention && role == Role::SyncIngress {
                                if d.recent_us.len() == RECENT {
                                    d.recent_us.pop_front();
                                }
                                d.recent_us.push_back(us);
                            }
                        }
                    }
                    if status.is_some_and(|s| (200..300).contains(&s)) {
                        records.lock().unwrap()[i as usize].acknowledged = true;
                        if lost_once && attempt + 1 < attempts {
                            // Slack did not get this answer: it sends the next retry.
                            lost_once = false;
                            continue;
                        }
                        return;
                    }
                }
            });
        }
        if Instant::now() >= next_progress {
            next_progress = Instant::now() + PROGRESS_EVERY;
            let acknowledged = records
                .lock()
                .unwrap()
                .iter()
                .filter(|r| r.acknowledged)
                .count();
            println!(
                "  [{:.0} s] {} of {events} sent, {acknowledged} acknowledged, {} deliveries in \
                 flight, work queue {}, {} kills, Slack holds {} of our messages",
                started.elapsed().as_secs_f64(),
                i + 1,
                MAX_IN_FLIGHT - in_flight.available_permits(),
                stack.depth().await,
                fleet.kills.load(Ordering::Relaxed),
                slack.posted_count(),
            );
        }
    }
    let sent_in = started.elapsed();
    backlog_reader.abort();
    // Every delivery's task holds a permit until it ends: all of them back, all have ended.
    let _all = in_flight.acquire_many(MAX_IN_FLIGHT as u32).await.unwrap();
    let settled_in = started.elapsed();
    sending.store(false, Ordering::Relaxed);
    chaos.await.unwrap();
    if let Some(deploy) = deploy_task {
        deploy.await.unwrap();
    }
    println!(
        "{events} requests sent in {:.1} s ({:.1}/s; the pacing held back {:.1} s in all), their \
         last delivery answered after {:.1} s; {} kills, {} process starts ({} failed and tried \
         again); versions now {:?}",
        sent_in.as_secs_f64(),
        events as f64 / sent_in.as_secs_f64(),
        braked.as_secs_f64(),
        settled_in.as_secs_f64(),
        fleet.kills.load(Ordering::Relaxed),
        fleet.starts.load(Ordering::Relaxed),
        fleet.failed_starts.load(Ordering::Relaxed),
        fleet.versions()
    );

    // ---- the queue drains; what is left is dead-lettered
    let drain = Duration::from_secs(180).max(Duration::from_millis(events * 5));
    assert!(
        eventually_async(drain, || async { stack.depth().await == 0 }).await,
        "the work queue did not drain within {drain:?}"
    );
    // A synchronous delivery Slack stopped waiting for may still run, within its lease.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let drained_in = started.elapsed();

    // What an operator runs now and then (docs/operations.md): claims left in progress past their
    // lease (a process killed during a request's last delivery) end failed, retryable.
    let stuck = stack.lapsed().await;
    for key in stuck.keys.iter().take(8) {
        println!("  stuck: {}", stack.describe(key).await);
    }
    let swept = stack.sweep(&current).await;
    println!(
        "in progress past their lease before the sweep: {} ({:?}); swept: {}",
        stuck.keys.len(),
        &stuck.keys[..stuck.keys.len().min(10)],
        swept.len()
    );

    // ---- the dead-letter queue, redriven once Slack and DynamoDB are well again (as an
    // operator would, after the incident)
    let records = Arc::try_unwrap(records)
        .ok()
        .expect("every delivery has ended")
        .into_inner()
        .unwrap();
    let first = Answers::read(&slack, &records);
    slack.random_faults(None);
    stack.stop_faults();
    let direct = stack.operator_vars();
    let dead_letters = stack.dead_letters().await;
    // Every dead letter in one run (the default stops at 1,000).
    let max = (dead_letters + 10).to_string();
    let dry = tool(&current, &["redrive", "--dry-run", "--max", &max], &direct);
    assert_eq!(
        stack.dead_letters().await,
        dead_letters,
        "a dry run moves nothing"
    );
    println!("\nslack-once redrive --dry-run on the dead-letter queue:");
    for line in dry.lines().take(20) {
        println!("  {line}");
    }
    if dry.lines().count() > 20 {
        println!("  … ({} lines in all)", dry.lines().count());
    }
    // --keep: the dead letters stay where they are, for the operator's own redrive.
    let redriven = if keep {
        String::new()
    } else {
        tool(&current, &["redrive", "--max", &max], &direct)
    };
    // Each dead letter has its line, and what was not moved is still there.
    let lines: Vec<&str> = redriven
        .lines()
        .filter(|l| {
            ["moved", "left", "refused"]
                .iter()
                .any(|w| l.starts_with(w))
        })
        .collect();
    assert_eq!(
        lines.len(),
        if keep { 0 } else { dead_letters },
        "a line per dead letter:\n{redriven}"
    );
    let kept = match keep {
        true => dead_letters,
        false => lines.iter().filter(|l| !l.starts_with("moved")).count(),
    };
    // Refused only for what Slack or the ledger no longer honours.
    for l in lines.iter().filter(|l| l.starts_with("refused")) {
        assert!(
            ["response_url expired", "trigger_id", "unconfirmed_write"]
                .iter()
                .any(|why| l.contains(why)),
            "a refusal the soak cannot cause: {l}"
        );
    }
    let by_key: HashMap<&str, usize> = records
        .iter()
        .enumerate()
        .flat_map(|(i, r)| r.keys.iter().map(move |k| (k.as_str(), i)))
        .collect();
    // A claim is left past its lease only by a process that stopped while holding it (a kill:
    // a delivery that got no answer, or a worker's message), or by a claim DynamoDB applied
    // while every answer to it was lost (its delivery answered 5xx, the ledger unavailable);
    // never in a calm run, never by a delivery answered 2xx or 4xx. Or by an answer whose
    // completion DynamoDB failed (its writes out, the 2xx sent, the item left in progress for a
    // later copy to find answered; the sweep ends it `abandoned` all the same): counted.
    let mut answered_unrecorded = 0;
    for key in &swept {
        let r = by_key.get(key.as_str()).map(|&i| &records[i]);
        if r.is_some_and(|r| first.count(r) == 1) {
            answered_unrecorded += 1;
            continue;
        }
        let explained = r.is_some_and(|r| {
            r.trail
                .iter()
                .any(|t| t.4.is_none_or(|s| s >= 500) || t.2 == "deferred")
        });
        assert!(
            explained && !calm,
            "{key} was left in progress past its lease with no kill to explain it: {:?}",
            r.map(|r| &r.trail)
        );
    }
    println!(
        "swept: {} answered whose completion {} failed (2xx sent, the item left in \
         progress), {} left by a kill or a lost ledger answer",
        answered_unrecorded,
        match store {
            Store::DynamoDb => "DynamoDB",
            Store::Postgres => "PostgreSQL",
        },
        swept.len() - answered_unrecorded
    );
    // Each dead letter's request, and what the redrive did with it (its report's line).
    let mut redrive: HashMap<usize, String> = HashMap::new();
    for line in redriven.lines() {
        let request = line
            .split_whitespace()
            .filter_map(|w| w.trim_start_matches('[').split('=').next())
            .find_map(|k| by_key.get(k).copied());
        if let Some(i) = request {
            redrive.insert(i, line.to_string());
        }
    }
    assert!(
        eventually_async(drain, || async { stack.depth().await == 0 }).await,
        "the redriven messages were not handled within {drain:?}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        stack.dead_letters().await,
        kept,
        "the redrive left in the dead-letter queue what it did not move, and only that"
    );
    let after = Answers::read(&slack, &records);

    // ---- the checks, from the stand-in's and the ledger's records
    let mut verdicts = Verdicts::default();
    for (i, record) in records.iter().enumerate() {
        let lost_before = verdicts.unanswered.len();
        verdicts
            .judge(i as u64, record, &first, &after, redrive.get(&i), &stack)
            .await;
        if verdicts.unanswered.len() > lost_before && lost_before < 20 {
            println!(
                "  the queue saw of {:?}: {:?}",
                record.marker,
                stack.journey(i as u64).await
            );
            // The conversation its message is in: a message's key is msg-TEAM-CHANNEL-TS.
            for key in record.keys.iter().filter(|k| k.starts_with("msg-")) {
                let parts: Vec<&str> = key.splitn(4, '-').collect();
                if let [_, _, channel, ts] = parts[..] {
                    for m in slack.thread(channel, &ts.replace('_', ".")) {
                        println!(
                            "    in Slack, {channel} {}: {} (app {}, streaming {})",
                            m["ts"], m["text"], m["app_id"], m["streaming"]
                        );
                    }
                }
            }
        }
    }
    let left_in_progress = stack.lapsed().await;

    // ---- the figures
    println!(
        "drained {:.1} s after the start; Slack's faults drawn: {:?}",
        drained_in.as_secs_f64(),
        {
            let mut f: Vec<_> = slack.faults_drawn().into_iter().collect();
            f.sort();
            f
        }
    );
    println!("Slack requests by method: {:?}", {
        let mut c: Vec<_> = slack.counts().into_iter().collect();
        c.sort();
        c
    });
    let deliveries = Arc::try_unwrap(deliveries)
        .ok()
        .expect("every delivery has ended")
        .into_inner()
        .unwrap();
    println!(
        "{}; ingress answers by status: {:?}, {} unanswered (a process down, or 3 s passed)",
        stack.faults_injected(),
        deliveries.statuses,
        deliveries.unanswered
    );
    verdicts.print(&records, &deliveries, sent_in);
    println!(
        "dead-lettered: {dead_letters}; redrive --dry-run: {}; redrive: {}",
        dry.lines().last().unwrap_or_default(),
        redriven.lines().last().unwrap_or_default(),
    );
    let rss_flat = rss_report(&fleet);

    // ---- the cost per million requests (on AWS: its list prices apply to what was counted)
    let aws_usage = match &*stack {
        Stack::Aws(aws) => Some(aws_usage(aws, &records, &deliveries)),
        Stack::Postgres(_) => None,
    };
    let fleet_cpu = fleet.cpu_seconds();
    fleet.stop();
    let own_cpu = fleet::cpu_ticks(std::process::id()) as f64 / 100.0;
    println!(
        "CPU: the fleet {fleet_cpu:.0} s ({:.1} ms a request), this process (Slack, the proxies, \
         the driver) {own_cpu:.0} s ({:.1} ms a request)",
        fleet_cpu * 1000.0 / events as f64,
        own_cpu * 1000.0 / events as f64
    );
    let (log_bytes, _lines, metric_lines) = fleet.printed();
    if let Some((usage, secret_reads)) = aws_usage {
        cost::report(
            &usage,
            &cost::Fleetwide {
                secret_reads,
                starts: fleet.starts.load(Ordering::Relaxed),
                log_bytes,
                metric_lines,
                requests: events,
            },
        );
    }

    // What the run made, removed: the stores' servers keep serving the next run.
    if keep {
        let vars: Vec<String> = direct
            .iter()
            .filter(|(k, _)| !k.starts_with("AWS_CONFIG") && !k.starts_with("AWS_SHARED"))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        println!(
            "\n--keep: {} and their {dead_letters} dead letters are left. The redrive an \
             operator runs:\n  env {} {} redrive --dry-run\n(then without --dry-run; {})",
            stack.describe_stores(),
            vars.join(" "),
            current.display(),
            match store {
                Store::DynamoDb =>
                    "DynamoDB Local and the SQS server keep them only while they run",
                Store::Postgres => "the schema stays until dropped",
            }
        );
    } else {
        stack.remove().await;
    }

    // ---- the verdict
    assert!(
        verdicts.twice.is_empty(),
        "answered twice: {:?}",
        verdicts.twice
    );
    assert!(
        verdicts.unanswered.is_empty(),
        "{} neither answered nor failed with a reason: {:?}",
        verdicts.unanswered.len(),
        &verdicts.unanswered[..verdicts.unanswered.len().min(20)]
    );
    assert!(
        left_in_progress.keys.is_empty() && left_in_progress.redelivery_due == 0,
        "in progress past its lease after the sweep: {:?}, and {} of queued requests whose \
         redelivery never came",
        left_in_progress.keys,
        left_in_progress.redelivery_due
    );
    assert!(rss_flat, "a process's memory grew over the run (above)");
}

fn now_ms() -> u64 {
    slack_once::clock::now_ms()
}

/// What each kind of request used on AWS, from the deliveries and the proxies' counts; and the
/// secret's reads.
fn aws_usage(
    aws: &stack::Aws,
    records: &[Record],
    deliveries: &Deliveries,
) -> (HashMap<Option<Kind>, cost::Usage>, u64) {
    let mut usage: HashMap<Option<Kind>, cost::Usage> = HashMap::new();
    for r in records {
        usage.entry(Some(r.kind)).or_default().requests += 1;
    }
    for (kind, (n, time)) in &deliveries.invocations {
        let u = usage.entry(Some(*kind)).or_default();
        u.ingress_invocations += n;
        u.ingress_time += *time;
    }
    let (handled, left) = aws.aws_proxy.worker_time();
    for (kind, (n, time)) in handled {
        let u = usage.entry(kind).or_default();
        u.worker_invocations += n;
        u.worker_time += time;
    }
    for (kind, n) in left {
        let u = usage.entry(kind).or_default();
        u.worker_invocations += n;
        u.worker_time += Duration::from_secs(10) * n as u32;
    }
    let (dynamo_counts, sqs_counts) = (aws.dynamo_proxy.counts(), aws.aws_proxy.counts());
    cost::add_counts(&mut usage, &dynamo_counts, &sqs_counts);
    let secret_reads = sqs_counts
        .iter()
        .filter(|((_, op), _)| op == "GetSecretValue")
        .map(|(_, t)| t.requests)
        .sum();
    (usage, secret_reads)
}

/// This app's messages in Slack, read once: each request's answers, by its marker.
struct Answers {
    /// Request index → (answers, the first answer's `ts` in µs).
    count: HashMap<u64, (usize, u64)>,
    /// Question requests whose answer is complete (the whole text, the stream stopped).
    complete: HashSet<u64>,
    /// Messages clicked and marked, by (channel, ts): the marks' request indexes.
    marked: HashMap<(String, String), Vec<u64>>,
}

impl Answers {
    fn read(slack: &SlackStandin, records: &[Record]) -> Self {
        let mut answers = Answers {
            count: HashMap::new(),
            complete: HashSet::new(),
            marked: HashMap::new(),
        };
        for post in slack.posted() {
            let text = post.body["text"].as_str().unwrap_or_default();
            let ts_us = slack_once::testing::micros(&post.ts).unwrap_or(0) as u64;
            // A message answers the request its text names first (a click's reply names the
            // clicker; the message clicked keeps its own text).
            if let Some(i) = mix::markers_in(text).next() {
                let entry = answers.count.entry(i).or_insert((0, ts_us));
                entry.0 += 1;
                entry.1 = entry.1.min(ts_us);
                let question = records
                    .get(i as usize)
                    .is_some_and(|r| r.kind == Kind::Question);
                if question && post.body["streaming"] != true && text.ends_with(" w6") {
                    answers.complete.insert(i);
                }
            }
            let blocks = post.body["blocks"].to_string();
            if blocks.contains("found this helpful") {
                let channel = post.body["channel"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                answers
                    .marked
                    .entry((channel, post.ts.clone()))
                    .or_default()
                    .extend(mix::markers_in(&blocks));
            }
        }
        answers
    }

    fn count(&self, r: &Record) -> usize {
        r.marker
            .as_deref()
            .and_then(|m| mix::markers_in(m).next())
            .and_then(|i| self.count.get(&i))
            .map_or(0, |c| c.0)
    }
}

#[derive(Default)]
struct Verdicts {
    twice: Vec<String>,
    unanswered: Vec<String>,
    /// Per kind: answered once (before the redrive).
    answered: HashMap<Kind, u64>,
    /// Per kind: answered once by the redrive of its dead letter.
    redriven: HashMap<Kind, u64>,
    /// Answered once, but only after the first reading of Slack (a delivery still running).
    late: u64,
    /// Per kind: time from the request to its first answer in Slack (µs).
    to_answer_us: HashMap<Kind, Vec<u32>>,
    /// Failures recorded in the ledger, by reason.
    failed: BTreeMap<String, u64>,
    /// Never acknowledged by any delivery, nothing claimed: Slack gave up, the person saw an
    /// error.
    never_acknowledged: HashMap<Kind, u64>,
    /// Never acknowledged, claimed by an earlier delivery and released, its last delivery
    /// lost on the way (Slack gave up): its message's stream may stay empty.
    gave_up_released: HashMap<Kind, u64>,
    /// Dead-lettered and refused by the redrive, with its reason.
    refused: Vec<String>,
    /// Lost while the previous release served, with its known signature (a form's claim
    /// released, no reason, no delivery to follow; fixed in this release).
    lost_by_previous: Vec<String>,
}

impl Verdicts {
    /// What became of request `i`: `first` is Slack read once the queue drained, `after` once
    /// the dead letters were redriven and handled; `redrive` the redrive's line for it.
    async fn judge(
        &mut self,
        i: u64,
        r: &Record,
        first: &Answers,
        after: &Answers,
        redrive: Option<&String>,
        stack: &Stack,
    ) {
        let Some(marker) = &r.marker else { return };
        let (before, at_end) = (first.count(r), after.count(r));
        if at_end > 1 {
            self.twice.push(format!(
                "{:?} {marker}: {at_end} answers ({before} before the redrive)",
                r.kind
            ));
            return;
        }
        if at_end == 1 {
            let whole = match r.kind {
                Kind::Question => after.complete.contains(&i),
                Kind::Click => r
                    .clicked
                    .as_ref()
                    .is_some_and(|c| after.marked.get(c).is_some_and(|marks| marks.contains(&i))),
                _ => true,
            };
            if !whole {
                // A stream not finished, a click's message not marked: the request must have
                // ended failed, and say why (the answer's text may be in Slack all the same).
                match stack.ledger_status(&r.keys).await {
                    Some((s, error)) if s == "failed" && !error.is_empty() => {
                        *self
                            .failed
                            .entry(format!("{error} (partly answered)"))
                            .or_default() += 1;
                    }
                    other => self.unanswered.push(format!(
                        "{:?} {marker}: answered but not whole (a stream not finished, a \
                         click's message not marked): {other:?}",
                        r.kind
                    )),
                }
                return;
            }
            let redriven = redrive.is_some_and(|line| line.starts_with("moved"));
            match (before, redriven) {
                (1, _) => *self.answered.entry(r.kind).or_default() += 1,
                (_, true) => *self.redriven.entry(r.kind).or_default() += 1,
                _ => {
                    self.late += 1;
                    *self.answered.entry(r.kind).or_default() += 1;
                }
            }
            let at = after.count[&i].1;
            self.to_answer_us
                .entry(r.kind)
                .or_default()
                .push(at.saturating_sub(r.sent_us).min(u32::MAX as u64) as u32);
            return;
        }
        // No answer: the ledger says why.
        let status = stack.ledger_status(&r.keys).await;
        // Slack gave up: no delivery was acknowledged, and no process took the last one (its
        // process down): no delivery of it could end it failed. (A last delivery a process
        // took ends it failed with its reason, answered or not within Slack's 3 s; one killed
        // while holding it leaves a claim the sweep ends `abandoned`.)
        let last_lost = r
            .trail
            .iter()
            .rfind(|t| t.0 == 0)
            .is_some_and(|t| t.4.is_none() && !t.5);
        // The previous release's known defect: a form answered synchronously by it (on
        // PostgreSQL the deploy rolls this release onto itself: no previous release served).
        let previous_sync = matches!(stack, Stack::Aws(_))
            && r.trail
                .iter()
                .any(|t| t.3 == Version::Previous && t.2 != "deferred");
        match (status, redrive) {
            // Moved back to the work queue by the redrive (faults over by then): it must have
            // been answered.
            (status, Some(line)) if line.starts_with("moved") => self.unanswered.push(format!(
                "{:?} {marker}: redriven but not answered ({status:?}): {line}",
                r.kind
            )),
            (Some((s, error)), _) if s == "failed" && !error.is_empty() => {
                *self.failed.entry(error).or_default() += 1;
            }
            (_, Some(line)) if !line.starts_with("moved") => self.refused.push(line.clone()),
            (None, None) if !r.acknowledged => {
                *self.never_acknowledged.entry(r.kind).or_default() += 1;
            }
            (Some((s, _)), None) if s == "released" && !r.acknowledged && last_lost => {
                *self.gave_up_released.entry(r.kind).or_default() += 1;
            }
            (Some((s, error)), None)
                if s == "released"
                    && error.is_empty()
                    && !r.kind.is_event()
                    && r.before_deploy_done
                    && previous_sync =>
            {
                self.lost_by_previous.push(format!(
                    "{:?} {marker}: released by the previous release",
                    r.kind
                ));
            }
            (other, line) => {
                self.unanswered.push(format!(
                    "{:?} {marker} (acknowledged: {}, a delivery before the deploy ended: {}, \
                     dead letter: {line:?}, deliveries (body, attempt, where, version, status): {:?}, \
                     keys {:?}): {other:?}",
                    r.kind, r.acknowledged, r.before_deploy_done, r.trail, r.keys
                ));
            }
        }
    }

    fn print(&self, records: &[Record], d: &Deliveries, sent_in: Duration) {
        let mut total: HashMap<Kind, u64> = HashMap::new();
        for r in records {
            *total.entry(r.kind).or_default() += 1;
        }
        println!(
            "\n| kind | requests | answered once | answered twice | Slack gave up (no delivery \
             acknowledged) | throughput (answered/s) | ingress answer p50 / p99 | time to the \
             answer in Slack p50 / p99 |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for kind in Kind::ALL {
            let n = total.get(&kind).copied().unwrap_or(0);
            let mut lat = d.latency_us.get(&kind).cloned().unwrap_or_default();
            lat.sort_unstable();
            let mut to = self.to_answer_us.get(&kind).cloned().unwrap_or_default();
            to.sort_unstable();
            let answered = self.answered.get(&kind).copied().unwrap_or(0);
            let twice = self
                .twice
                .iter()
                .filter(|t| t.starts_with(&format!("{kind:?}")))
                .count();
            let gave_up = self.never_acknowledged.get(&kind).copied().unwrap_or(0)
                + self.gave_up_released.get(&kind).copied().unwrap_or(0);
            println!(
                "| {} | {n} | {} | {twice} | {gave_up} | {:.1} | {:?} / {:?} | {} |",
                kind.name(),
                if kind == Kind::Bare {
                    "(nothing to answer)".to_string()
                } else {
                    answered.to_string()
                },
                answered as f64 / sent_in.as_secs_f64(),
                percentile(&lat, 0.5),
                percentile(&lat, 0.99),
                if to.is_empty() {
                    "–".to_string()
                } else {
                    format!("{:?} / {:?}", percentile(&to, 0.5), percentile(&to, 0.99))
                }
            );
        }
        println!(
            "answered by the redrive of their dead letter: {:?}; answered after Slack was first \
             read: {}; failed in the ledger, with their reasons: {:?}; Slack gave up after an \
             earlier delivery had claimed and released it: {:?}; dead letters the redrive \
             refused: {} {:?}; lost by the previous release during the deploy (its known \
             defect): {} {:?}",
            self.redriven,
            self.late,
            self.failed,
            self.gave_up_released,
            self.refused.len(),
            &self.refused[..self.refused.len().min(5)],
            self.lost_by_previous.len(),
            &self.lost_by_previous[..self.lost_by_previous.len().min(5)]
        );
    }
}

/// Prints each slot's memory; whether the processes that lived from the deploy to the end
/// (never killed) stayed flat: their largest RSS in the last tenth of their life within
/// 8 MiB or 15 % of their largest after the first minute's warm-up (or first tenth).
fn rss_report(fleet: &Fleet) -> bool {
    let samples = fleet.rss.lock().unwrap().clone();
    let mut flat = true;
    let mut by_pid: BTreeMap<(&str, u32), Vec<&fleet::RssSample>> = BTreeMap::new();
    for s in &samples {
        by_pid.entry((s.slot, s.pid)).or_default().push(s);
    }
    for ((slot, pid), life) in by_pid {
        let longest = life.last().map(|s| s.age).unwrap_or_default();
        if longest < Duration::from_secs(60) {
            continue;
        }
        let warm = Duration::from_secs(60).min(longest / 10);
        let early = life
            .iter()
            .filter(|s| s.age >= warm && s.age < warm + longest / 10)
            .map(|s| s.kib)
            .max()
            .unwrap_or(0);
        let late = life
            .iter()
            .filter(|s| s.age >= longest - longest / 10)
            .map(|s| s.kib)
            .max()
            .unwrap_or(0);
        let max = life.iter().map(|s| s.kib).max().unwrap_or(0);
        let version = life[0].version;
        let grew = late.saturating_sub(early);
        let ok = grew <= (8 * 1024).max(early * 15 / 100);
        println!(
            "RSS {slot} (pid {pid}, {version:?}, {:.0} s, {} samples): {early} KiB after warm-up, \
             {late} KiB at the end, {max} KiB at most{}",
            longest.as_secs_f64(),
            life.len(),
            if ok { "" } else { ": GREW" }
        );
        if version == Version::Current && !ok {
            flat = false;
        }
    }
    flat
}
