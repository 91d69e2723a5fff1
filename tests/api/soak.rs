//! The soak (`scripts/soak.sh`): many requests at a steady rate through a synchronous ingress,
//! a deferred ingress and two workers on one table (DynamoDB Local) and one queue (the SQS
//! server), with Slack's faults and SIGKILLs throughout; checked at the end from the stand-in's
//! and the ledger's records, never from the bot's logs. Ignored by `cargo test`: it takes
//! minutes. `SOAK_EVENTS` (1,000), `SOAK_RATE` (requests a second, 40), `SOAK_SEED`.
//!
//! The mix, per request (drawn from the seed): 40 % a person's mention, half of them also
//! delivered as the `message` event Slack sends beside it (another `event_id`, the same
//! message), 15 % a DM, 20 % an event no listener takes (`reaction_added`), 25 % a slash
//! command. Each goes to the synchronous or the deferred ingress at random, and Slack's retries
//! of an event (on a scaled clock: 0.2 s, 3 s, 6 s) to either; a command is sent once, as Slack
//! sends it (a failed delivery is an error the person sees, with nothing claimed).
//!
//! Faults, each at its rate: a Slack write answered 500 (2 %), 429 with `Retry-After: 1`
//! (2 %), `internal_error` though posted (1 %), no answer (0.5 %), posted then no answer
//! (0.5 %); a `response_url` post answered 500 (2 %); a look-up answered 429 (3 %); a SIGKILL
//! of one of the four processes every `SOAK_KILL_SECONDS` (5), restarted 300 ms later.
//!
//! Checked: no request answered twice; every request answered or its ledger item `failed`
//! with its reason; no ledger item in progress past its lease; each process's memory (RSS)
//! sampled; throughput and the ingress's p50/p99 per kind.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::helpers::*;

/// xorshift64*, reproducible from the printed seed.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// True with probability `per_mille` / 1000.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    Mention,
    Dm,
    Bare,
    Command,
}

/// One request of the mix: what is delivered, and the text its answer carries (none for a bare
/// event).
struct Planned {
    kind: Kind,
    bodies: Vec<(String, bool)>,
    said: Option<String>,
    /// Its ledger key, for a request with an answer.
    key: Option<String>,
}

fn plan(i: u64, rng: &mut Rng, slack: &SlackStandin) -> Planned {
    let roll = rng.below(100);
    let id = format!("EvSoak{i:07}");
    if roll < 40 {
        let text = format!("mention {i:07}");
        let body = app_mention(&id, &text);
        let mut bodies = vec![(body.clone(), false)];
        if rng.chance(500) {
            // The `message` event Slack sends beside the mention: the same message.
            let mut copy: serde_json::Value = serde_json::from_str(&body).unwrap();
            copy["event_id"] = format!("{id}m").into();
            copy["event"]["type"] = "message".into();
            copy["event"]["channel_type"] = "channel".into();
            bodies.push((copy.to_string(), false));
        }
        Planned {
            kind: Kind::Mention,
            bodies,
            said: Some(text),
            key: Some(mention_key(&id)),
        }
    } else if roll < 55 {
        let text = format!("dm {i:07}");
        Planned {
            kind: Kind::Dm,
            bodies: vec![(direct_message(&id, "U0002", &text), false)],
            said: Some(text),
            key: Some(message_key("T0001", "D0001", &ts_of(&id))),
        }
    } else if roll < 75 {
        let body = serde_json::json!({
            "token": "unused", "team_id": "T0001", "api_app_id": "A0001",
            "type": "event_callback", "event_id": id, "event_time": 1_700_000_000,
            "event": {"type": "reaction_added", "user": "U0001", "reaction": "tada",
                "item": {"type": "message", "channel": "C0001", "ts": "1700000000.000100"},
                "event_ts": ts_of(&id)},
            "authorizations": [{"team_id": "T0001", "user_id": BOT_USER, "is_bot": true}]
        })
        .to_string();
        Planned {
            kind: Kind::Bare,
            bodies: vec![(body, false)],
            said: None,
            key: None,
        }
    } else {
        let text = format!("command {i:07}");
        let form = command_form(slack, "/once", &text);
        let key = slack_once::interaction::Interaction::from_form(form.as_bytes())
            .ok()
            .and_then(|c| c.key())
            .map(|k| k.to_string());
        Planned {
            kind: Kind::Command,
            bodies: vec![(form, true)],
            said: Some(text),
            key,
        }
    }
}

/// A process of the fleet: its role, its variables, and the process while it runs.
type Slot = (
    &'static str,
    Vec<(&'static str, String)>,
    Option<BotProcess>,
);

/// The four processes, restarted after each kill; the ingresses' URLs as they are now.
struct Fleet {
    slots: Mutex<Vec<Slot>>,
    kills: Mutex<usize>,
    rss_kib: Mutex<Vec<(&'static str, u64)>>,
}

impl Fleet {
    fn spawn(role: &'static str, vars: &[(&'static str, String)]) -> BotProcess {
        match role {
            "worker 1" | "worker 2" => BotProcess::spawn_worker(vars),
            _ => BotProcess::spawn(vars),
        }
    }

    fn url(&self, role: &str) -> String {
        let slots = self.slots.lock().unwrap();
        slots
            .iter()
            .find(|(r, _, _)| *r == role)
            .and_then(|(_, _, p)| p.as_ref().map(BotProcess::url))
            .unwrap_or_else(|| "http://127.0.0.1:9/slack/events".into())
    }

    /// SIGKILLs `slot`'s process; restarts it 300 ms later.
    async fn kill_and_restart(&self, slot: usize) {
        let (role, vars) = {
            let mut slots = self.slots.lock().unwrap();
            let (role, vars, process) = &mut slots[slot];
            if let Some(mut p) = process.take() {
                p.kill();
            }
            (*role, vars.clone())
        };
        *self.kills.lock().unwrap() += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let process = tokio::task::spawn_blocking(move || Fleet::spawn(role, &vars))
            .await
            .unwrap();
        self.slots.lock().unwrap()[slot].2 = Some(process);
    }

    fn sample_rss(&self) {
        let slots = self.slots.lock().unwrap();
        let mut rss = self.rss_kib.lock().unwrap();
        for (role, _, process) in slots.iter() {
            if let Some(p) = process {
                let status = std::fs::read_to_string(format!("/proc/{}/status", p.child.id()))
                    .unwrap_or_default();
                if let Some(kib) = status
                    .lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse().ok())
                {
                    rss.push((role, kib));
                }
            }
        }
    }
}

/// Slack's retry schedule on the scaled clock, each delivery to either ingress.
const RETRY_AFTER: [Duration; 3] = [
    Duration::from_millis(200),
    Duration::from_secs(3),
    Duration::from_secs(6),
];

/// Delivers `body` (a form when `form`) signed now, Slack's retry `retry` of it: the status, or
/// `None` when the connection failed (a process killed), as Slack counts a failure.
async fn send(
    http: &HttpClient,
    url: &str,
    body: &str,
    form: bool,
    retry: Option<u32>,
) -> Option<u16> {
    let mut headers = signed_headers(SECRET, now_unix(), body.as_bytes());
    if form {
        headers[0].1 = "application/x-www-form-urlencoded".into();
    }
    if let Some(n) = retry {
        headers.push(("x-slack-retry-num".into(), n.to_string()));
        headers.push(("x-slack-retry-reason".into(), "http_timeout".into()));
    }
    http.try_request("POST", url, &headers, body.as_bytes().to_vec())
        .await
        .ok()
        .map(|a| a.status.as_u16())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a soak of minutes: scripts/soak.sh runs it"]
async fn soak() {
    let events = env_u64("SOAK_EVENTS", 1000);
    let rate = env_u64("SOAK_RATE", 40).max(1);
    let kill_every = Duration::from_secs(env_u64("SOAK_KILL_SECONDS", 5).max(1));
    let seed = env_u64("SOAK_SEED", 1) | 1;
    println!("SOAK_EVENTS={events} SOAK_RATE={rate} SOAK_SEED={seed}");
    let mut rng = Rng(seed);

    let stack = DeferredStack::start(4).await;
    // Slack's faults, drawn ahead for as many writes as the run can make.
    let writes = (events * 3) as usize;
    let mut faults: HashMap<&str, usize> = HashMap::new();
    let mut script = Vec::with_capacity(writes);
    for _ in 0..writes {
        let roll = rng.below(1000);
        let (name, behaviour) = match roll {
            0..20 => ("500", Behaviour::Status(500)),
            20..40 => ("429", Behaviour::RateLimited(1)),
            40..50 => (
                "internal_error, posted",
                Behaviour::OkFalse {
                    code: "internal_error",
                    posted: true,
                },
            ),
            50..55 => ("no answer", Behaviour::Hang),
            55..60 => ("posted, no answer", Behaviour::PostThenHang),
            _ => ("ok", Behaviour::Ok),
        };
        *faults.entry(name).or_default() += 1;
        script.push(behaviour);
    }
    stack.slack.script(script);
    stack.slack.script_method(
        "response_url",
        (0..events).map(|_| {
            if rng.chance(20) {
                Behaviour::Status(500)
            } else {
                Behaviour::Ok
            }
        }),
    );
    stack.slack.script_lookups(
        (0..events).filter_map(|_| rng.chance(30).then_some(LookupBehaviour::RateLimited(1))),
    );

    let mut sync_vars = bot_vars(&stack.slack, &stack.dynamodb, &stack.table);
    sync_vars.push(("DEDUP_LEASE_SECONDS", "2".into()));
    let worker_vars = stack.worker_vars(3, 4);
    let fleet = Arc::new(Fleet {
        slots: Mutex::new(vec![
            (
                "sync ingress",
                sync_vars.clone(),
                Some(BotProcess::spawn(&sync_vars)),
            ),
            (
                "deferred ingress",
                stack.ingress_vars(),
                Some(BotProcess::spawn(&stack.ingress_vars())),
            ),
            (
                "worker 1",
                worker_vars.clone(),
                Some(BotProcess::spawn_worker(&worker_vars)),
            ),
            (
                "worker 2",
                worker_vars.clone(),
                Some(BotProcess::spawn_worker(&worker_vars)),
            ),
        ]),
        kills: Mutex::new(0),
        rss_kib: Mutex::new(Vec::new()),
    });

    // Chaos and RSS samples until the sending ends.
    let sending = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let chaos = {
        let (fleet, sending) = (fleet.clone(), sending.clone());
        let mut rng = Rng(seed.wrapping_mul(31) | 1);
        tokio::spawn(async move {
            let mut next_kill = Instant::now() + kill_every;
            while sending.load(std::sync::atomic::Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_secs(1)).await;
                fleet.sample_rss();
                if Instant::now() >= next_kill {
                    fleet.kill_and_restart(rng.below(4)).await;
                    next_kill = Instant::now() + kill_every;
                }
            }
        })
    };

    let http = HttpClient::default();
    let started = Instant::now();
    let in_flight = Arc::new(Semaphore::new(128));
    let latencies: Arc<Mutex<HashMap<Kind, Vec<Duration>>>> = Default::default();
    let unacked: Arc<Mutex<Vec<(u64, Kind)>>> = Default::default();
    let mut planned = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..events {
        let at = started + Duration::from_micros(i * 1_000_000 / rate);
        tokio::time::sleep_until(at.into()).await;
        let request = plan(i, &mut rng, &stack.slack);
        let picks: Vec<bool> = (0..4 * request.bodies.len())
            .map(|_| rng.chance(500))
            .collect();
        let delays: Vec<u64> = request
            .bodies
            .iter()
            .map(|_| rng.below(1500) as u64)
            .collect();
        for (n, (body, form)) in request.bodies.iter().enumerate() {
            let permit = in_flight.clone().acquire_owned().await.unwrap();
            let (http, fleet, latencies, unacked) = (
                http.clone(),
                fleet.clone(),
                latencies.clone(),
                unacked.clone(),
            );
            let (body, form, kind) = (body.clone(), *form, request.kind);
            let picks = picks[n * 4..n * 4 + 4].to_vec();
            let delay = Duration::from_millis(if n == 0 { 0 } else { delays[n] });
            tasks.push(tokio::spawn(async move {
                let _permit = permit;
                tokio::time::sleep(delay).await;
                // Slack retries events; a command it sends once (a failure is an error the
                // person sees).
                let deliveries = if form { 1 } else { 4 };
                for attempt in 0..deliveries {
                    if attempt > 0 {
                        tokio::time::sleep(RETRY_AFTER[attempt as usize - 1]).await;
                    }
                    let role = if picks[attempt as usize] {
                        "sync ingress"
                    } else {
                        "deferred ingress"
                    };
                    let url = fleet.url(role);
                    let retry = (attempt > 0).then_some(attempt);
                    let sent = Instant::now();
                    let answer = tokio::time::timeout(
                        Duration::from_secs(3),
                        send(&http, &url, &body, form, retry),
                    )
                    .await;
                    if let Ok(Some(status)) = answer
                        && (200..300).contains(&status)
                    {
                        latencies
                            .lock()
                            .unwrap()
                            .entry(kind)
                            .or_default()
                            .push(sent.elapsed());
                        return;
                    }
                }
                unacked.lock().unwrap().push((i, kind));
            }));
        }
        planned.push(request);
    }
    for task in tasks {
        task.await.unwrap();
    }
    let sent_in = started.elapsed();
    sending.store(false, std::sync::atomic::Ordering::Relaxed);
    chaos.await.unwrap();
    // The queue drains (workers that were killed are back): what is left is dead-lettered.
    // Checked only once nothing is in flight: an answer made after the stand-in's records are
    // read would count as missing.
    let drain = Duration::from_secs(120).max(Duration::from_millis(events * 40));
    assert!(
        eventually_async(drain, || async {
            stack.queue.depth(&stack.queue.url).await == 0
        })
        .await,
        "the work queue did not drain within {drain:?}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    let drained_in = started.elapsed();

    // What an operator runs now and then (DEPLOY.md): claims killed on their last delivery,
    // left in progress, end failed with their reason (here at once: the run is short).
    let swept = slack_once::sweep::sweep(
        &dynamodb_client(&stack.dynamodb),
        &stack.table,
        Duration::ZERO,
        slack_once::clock::now_ms(),
        false,
    )
    .await
    .unwrap();
    println!("swept (killed on their last delivery): {:?}", swept.keys);
    // ---- the checks, from the stand-in's and the ledger's records
    let posted: Vec<String> = stack
        .slack
        .posted()
        .iter()
        .filter_map(|p| p.body["text"].as_str().map(str::to_string))
        .collect();
    let answers_of = |said: &str| posted.iter().filter(|t| t.contains(said)).count();
    let ledger = slack_once::ledger::DynamoLedger::new(
        dynamodb_client(&stack.dynamodb),
        stack.table.clone(),
    );
    let mut twice = Vec::new();
    let mut unanswered = Vec::new();
    let mut failed: HashMap<String, usize> = HashMap::new();
    let mut answered: HashMap<Kind, usize> = HashMap::new();
    let mut total: HashMap<Kind, usize> = HashMap::new();
    let never_acked: Vec<(u64, Kind)> = unacked.lock().unwrap().clone();
    let mut refused_commands = 0;
    for (i, request) in planned.iter().enumerate() {
        *total.entry(request.kind).or_default() += 1;
        // A command no delivery of which was acknowledged: Slack showed the person an error,
        // and there is nothing to answer.
        let refused_to_slack =
            request.kind == Kind::Command && never_acked.iter().any(|(n, _)| *n == i as u64);
        let Some(said) = &request.said else { continue };
        match answers_of(said) {
            0 => {
                let item = match &request.key {
                    Some(key) => ledger.get_item(key).await.unwrap(),
                    None => None,
                };
                let status = item
                    .as_ref()
                    .and_then(|i| i.get("status"))
                    .and_then(|s| s.as_s().ok())
                    .cloned();
                match status.as_deref() {
                    // Never claimed (its ingress was down): the person saw Slack's error. One
                    // claimed whose follow-up failed ends failed, with its reason (below).
                    None if refused_to_slack => refused_commands += 1,
                    Some("failed") => {
                        let error = item.as_ref().unwrap()["error"].as_s().unwrap().clone();
                        *failed.entry(error).or_default() += 1;
                    }
                    _ => unanswered.push(format!("{said}: {status:?}")),
                }
            }
            1 => *answered.entry(request.kind).or_default() += 1,
            n => twice.push(format!("{said}: {n} answers")),
        }
    }
    // No item in progress past its lease.
    let now_ms = slack_once::clock::now_ms();
    let mut stuck = Vec::new();
    let mut start_key = None;
    loop {
        let page = dynamodb_client(&stack.dynamodb)
            .scan()
            .table_name(&stack.table)
            .set_exclusive_start_key(start_key)
            .send()
            .await
            .unwrap();
        for item in page.items() {
            let status = item.get("status").and_then(|s| s.as_s().ok());
            let lease = item
                .get("lease_until")
                .and_then(|n| n.as_n().ok())
                .and_then(|n| n.parse::<u64>().ok());
            if status.map(String::as_str) == Some("in_progress")
                && lease.is_some_and(|l| l < now_ms)
            {
                stuck.push(
                    item.get("pk")
                        .and_then(|k| k.as_s().ok())
                        .cloned()
                        .unwrap_or_default(),
                );
            }
        }
        start_key = page.last_evaluated_key().cloned();
        if start_key.is_none() {
            break;
        }
    }
    let dead_letters = stack.queue.depth(&stack.queue.dlq_url).await;

    // ---- the figures
    println!(
        "{events} requests in {:.1} s ({:.0}/s), drained in {:.1} s; {} kills",
        sent_in.as_secs_f64(),
        events as f64 / sent_in.as_secs_f64(),
        drained_in.as_secs_f64(),
        fleet.kills.lock().unwrap()
    );
    let mut faults: Vec<_> = faults.into_iter().collect();
    faults.sort();
    println!("Slack write behaviours drawn: {faults:?}");
    for (kind, n) in {
        let mut t: Vec<_> = total.iter().collect();
        t.sort();
        t
    } {
        let mut lat = latencies
            .lock()
            .unwrap()
            .get(kind)
            .cloned()
            .unwrap_or_default();
        lat.sort();
        println!(
            "{kind:?}: {n} requests, {} answered once; ingress answer p50 {:?} p99 {:?}",
            answered.get(kind).copied().unwrap_or(0),
            percentile(&lat, 0.5),
            percentile(&lat, 0.99)
        );
    }
    println!(
        "failed (with their reason): {failed:?}; dead-lettered: {dead_letters}; never \
         acknowledged: {} ({refused_commands} commands, which Slack showed the person as \
         failed)",
        never_acked.len()
    );
    let rss = fleet.rss_kib.lock().unwrap().clone();
    for role in ["sync ingress", "deferred ingress", "worker 1", "worker 2"] {
        let samples: Vec<u64> = rss
            .iter()
            .filter(|(r, _)| *r == role)
            .map(|(_, k)| *k)
            .collect();
        if let (Some(first), Some(max)) = (samples.first(), samples.iter().max()) {
            println!(
                "RSS {role}: first {first} KiB, max {max} KiB, last {} KiB ({} samples)",
                samples.last().unwrap(),
                samples.len()
            );
        }
    }
    assert!(twice.is_empty(), "answered twice: {twice:?}");
    assert!(stuck.is_empty(), "in progress past its lease: {stuck:?}");
    assert!(
        unanswered.is_empty(),
        "{} neither answered nor failed: {:?}",
        unanswered.len(),
        &unanswered[..unanswered.len().min(20)]
    );
}
