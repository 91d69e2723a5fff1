//! Proxies on 127.0.0.1 between the fleet and AWS's stand-ins: DynamoDB Local, and the server
//! of SQS and Secrets Manager. Each request is counted as AWS bills it, for the kind of request
//! it was made for; DynamoDB's answers are lost, refused or slowed, and SQS's lost or answered
//! with an error after the request was applied, at stated rates.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::oneshot;

use super::mix::{Kind, Rng, markers_in};

#[path = "../../../benches/support/capacity.rs"]
#[allow(dead_code)]
mod capacity;

/// DynamoDB's faults, each per 10,000 requests of the fleet (the soak's own reads go around the
/// proxy). Every one of them is a fault the AWS SDK retries: what is tried is that its retry is
/// harmless (a write applied twice, a claim found taken by itself).
#[derive(Clone, Copy, Debug)]
pub struct DynamoFaults {
    /// The request is applied; its answer never comes back (the connection closes).
    pub answer_lost: u64,
    /// The request is applied; the answer is a 500 InternalServerError.
    pub error_after_applying: u64,
    /// Refused before DynamoDB sees it: 400 ProvisionedThroughputExceededException.
    pub throttled: u64,
    /// Forwarded after 300 to 800 ms.
    pub slow: u64,
}

/// SQS's faults, per 10,000 `SendMessage`, `ReceiveMessage`, `DeleteMessage` and
/// `ChangeMessageVisibility` requests (Secrets Manager's are left alone): each applied, then its
/// answer lost or a 500. The SDK sends again: a message enqueued twice, a receive's messages
/// hidden until their visibility timeout ends, a delete made twice.
pub const SQS_FAULTS: DynamoFaults = DynamoFaults {
    answer_lost: 50,
    error_after_applying: 30,
    throttled: 0,
    slow: 0,
};

/// The SQS operations faults are drawn for.
const SQS_FAULTED: [&str; 4] = [
    "SendMessage",
    "ReceiveMessage",
    "DeleteMessage",
    "ChangeMessageVisibility",
];

pub const DYNAMO_FAULTS: DynamoFaults = DynamoFaults {
    answer_lost: 50,
    error_after_applying: 30,
    throttled: 50,
    slow: 50,
};

/// Which kind of request each ledger key and each marker belongs to: the driver registers
/// them as it plans; the proxies read them.
#[derive(Default)]
pub struct Registry {
    pub keys: HashMap<String, Kind>,
    /// By request index.
    pub kinds: Vec<Kind>,
}

impl Registry {
    /// The kind a ledger key is for: itself, or the message key it extends
    /// (`msg-T-C-TS-LISTENER`).
    fn kind_of_key(&self, key: &str) -> Option<Kind> {
        if let Some(kind) = self.keys.get(key) {
            return Some(*kind);
        }
        let message: Vec<&str> = key.splitn(5, '-').collect();
        if message.len() == 5 && message[0] == "msg" {
            return self.keys.get(&message[..4].join("-")).copied();
        }
        None
    }

    /// The kind of the request a queue message is: the latest request its text names (a
    /// click's payload carries the message clicked, which names the earlier request it answers).
    fn kind_of_text(&self, text: &str) -> Option<Kind> {
        markers_in(text)
            .max()
            .and_then(|i| self.kinds.get(i as usize).copied())
    }
}

/// What one kind of request (or none: `None` is the fleet's own, such as sweeps and polls)
/// cost one AWS operation.
impl SqsState {
    /// Seconds since the first thing the queue saw (a journey's clock).
    fn elapsed(&mut self) -> String {
        let started = *self.started.get_or_insert_with(Instant::now);
        format!("{:.3}s", started.elapsed().as_secs_f64())
    }
}

#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub requests: u64,
    /// Billed request units (SQS: one per 64 KB of payload).
    pub units: u64,
    pub write_units: f64,
    pub read_units: f64,
    pub condition_failed: u64,
}

/// Messages deleted by a worker, and their time from receipt to delete, by kind.
pub type Handled = HashMap<Option<Kind>, (u64, Duration)>;

/// Counts, by (kind, operation).
pub type Counts = HashMap<(Option<Kind>, String), Tally>;

#[derive(Default)]
struct SqsState {
    /// A sent message's kind, by message id.
    sent: HashMap<String, Option<Kind>>,
    /// A received message's kind and when it was handed out, by receipt handle.
    received: HashMap<String, (Option<Kind>, Instant)>,
    /// Worker time per kind: from a message's receipt to its delete.
    handled: Handled,
    /// Each request's messages, by request index: what happened to them (sent, received,
    /// deleted, with the message id), for a failure's report.
    journeys: HashMap<u64, Vec<String>>,
    /// A received message's request index, by receipt handle.
    receipt_request: HashMap<String, u64>,
    started: Option<Instant>,
}

struct ProxyState {
    registry: Arc<Mutex<Registry>>,
    counts: Mutex<Counts>,
    rng: Mutex<Rng>,
    /// DynamoDB's proxy (else the SQS and Secrets Manager server's).
    dynamo: bool,
    faults: Option<DynamoFaults>,
    /// Whether faults are still drawn (the redrive runs once DynamoDB is well again).
    faulting: std::sync::atomic::AtomicBool,
    injected: Mutex<HashMap<&'static str, u64>>,
    sqs: Mutex<SqsState>,
}

/// A counting (and, for DynamoDB, faulting) proxy.
pub struct AwsProxy {
    pub url: String,
    state: Arc<ProxyState>,
    _shutdown: oneshot::Sender<()>,
}

#[derive(Clone)]
struct Ctx {
    upstream: String,
    client: Client<HttpConnector, Full<Bytes>>,
    state: Arc<ProxyState>,
}

type ProxyError = Box<dyn std::error::Error + Send + Sync>;

impl AwsProxy {
    /// A proxy to `upstream`: DynamoDB's when `dynamo`, else the SQS and Secrets Manager
    /// server's; `faults` drawn from `seed` (for SQS, on its queue operations only).
    pub async fn start(
        upstream: &str,
        registry: Arc<Mutex<Registry>>,
        dynamo: bool,
        faults: Option<DynamoFaults>,
        seed: u64,
    ) -> Self {
        let state = Arc::new(ProxyState {
            registry,
            counts: Mutex::new(HashMap::new()),
            rng: Mutex::new(Rng(seed | 1)),
            dynamo,
            faults,
            faulting: std::sync::atomic::AtomicBool::new(true),
            injected: Mutex::new(HashMap::new()),
            sqs: Mutex::new(SqsState::default()),
        });
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let ctx = Ctx {
            upstream: upstream.to_string(),
            client: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .build(connector),
            state: state.clone(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, mut rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => stream,
                        Err(_) => continue,
                    },
                    _ = &mut rx => return,
                };
                let _ = stream.set_nodelay(true);
                let ctx = ctx.clone();
                tokio::spawn(async move {
                    let service =
                        hyper::service::service_fn(move |request| forward(ctx.clone(), request));
                    // A service error closes the connection without an answer: a lost answer.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            url: format!("http://{addr}"),
            state,
            _shutdown: tx,
        }
    }

    pub fn counts(&self) -> Counts {
        self.state.counts.lock().unwrap().clone()
    }

    /// What the queue saw of request `i`'s messages.
    pub fn journey(&self, i: u64) -> Vec<String> {
        let sqs = self.state.sqs.lock().unwrap();
        sqs.journeys.get(&i).cloned().unwrap_or_default()
    }

    /// No more faults from now on.
    pub fn stop_faults(&self) {
        self.state
            .faulting
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// The faults injected so far, by name.
    pub fn injected(&self) -> HashMap<&'static str, u64> {
        self.state.injected.lock().unwrap().clone()
    }

    /// Worker time per kind (messages deleted, their time from receipt to delete), and the
    /// messages received but never deleted (left for SQS to hand out again) per kind.
    pub fn worker_time(&self) -> (Handled, HashMap<Option<Kind>, u64>) {
        let sqs = self.state.sqs.lock().unwrap();
        let mut left: HashMap<Option<Kind>, u64> = HashMap::new();
        for (kind, _) in sqs.received.values() {
            *left.entry(*kind).or_default() += 1;
        }
        (sqs.handled.clone(), left)
    }
}

fn op_of(parts: &http::request::Parts) -> String {
    parts
        .headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.rsplit('.').next())
        .unwrap_or("?")
        .to_string()
}

const DYNAMO_WRITES: [&str; 5] = [
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "TransactWriteItems",
    "BatchWriteItem",
];
const DYNAMO_READS: [&str; 5] = [
    "GetItem",
    "Query",
    "Scan",
    "BatchGetItem",
    "TransactGetItems",
];

/// The fault to inject into this DynamoDB request, if any.
fn draw_fault(state: &ProxyState) -> Option<&'static str> {
    let faults = state.faults?;
    if !state.faulting.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    let roll = state.rng.lock().unwrap().next() % 10_000;
    let mut upto = 0;
    for (name, rate) in [
        ("answer lost", faults.answer_lost),
        ("500 after applying", faults.error_after_applying),
        ("throttled", faults.throttled),
        ("slow", faults.slow),
    ] {
        upto += rate;
        if roll < upto {
            return Some(name);
        }
    }
    None
}

/// The string value of `"field":"…"` in a JSON text, found without parsing it (the proxies see
/// thousands of requests a second on a busy core): the first occurrence, its escapes left as
/// they are (the values read so are ids, keys and receipt handles, which have none).
fn json_str<'a>(text: &'a str, field: &str) -> Option<&'a str> {
    let needle = format!("\"{field}\":\"");
    let at = text.find(&needle)? + needle.len();
    let rest = &text[at..];
    rest.find('"').map(|end| &rest[..end])
}

/// The partition key a DynamoDB request is about: its `Key`'s or `Item`'s `pk` (the first).
fn key_in(text: &str) -> Option<&str> {
    let at = text.find("\"pk\":")?;
    json_str(&text[at..], "S")
}

/// The capacity units a DynamoDB answer reports, read without parsing it: every
/// `"CapacityUnits":N` (a transaction reports one per table).
fn capacity_in(text: &str) -> f64 {
    text.match_indices("\"CapacityUnits\":")
        .filter_map(|(at, m)| {
            let rest = &text[at + m.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(rest.len());
            rest[..end].parse::<f64>().ok()
        })
        .sum()
}

async fn forward(
    ctx: Ctx,
    request: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<Full<Bytes>>, ProxyError> {
    let (parts, body) = request.into_parts();
    let mut body = body.collect().await?.to_bytes();
    let op = op_of(&parts);
    let state = &ctx.state;
    let dynamo = state.dynamo;
    let text = String::from_utf8_lossy(&body).into_owned();
    let write = DYNAMO_WRITES.contains(&op.as_str());
    let read = DYNAMO_READS.contains(&op.as_str());
    let mut kind = None;
    if dynamo {
        kind = key_in(&text).and_then(|k| state.registry.lock().unwrap().kind_of_key(k));
        if (write || read)
            && text.starts_with('{')
            && text.len() > 2
            && !text.contains("ReturnConsumedCapacity")
        {
            // DynamoDB Local checks no signature: the body may be changed.
            body = Bytes::from(format!(
                "{{\"ReturnConsumedCapacity\":\"TOTAL\",{}",
                &text[1..]
            ));
        }
    } else if op == "SendMessage" {
        kind = state.registry.lock().unwrap().kind_of_text(&text);
    } else if op == "DeleteMessage" {
        let receipt = json_str(&text, "ReceiptHandle").unwrap_or_default();
        let mut sqs = state.sqs.lock().unwrap();
        if let Some(i) = sqs.receipt_request.remove(receipt) {
            let at = sqs.elapsed();
            sqs.journeys
                .entry(i)
                .or_default()
                .push(format!("{at} deleted"));
        }
        if let Some((k, at)) = sqs.received.remove(receipt) {
            kind = k;
            let handled = sqs.handled.entry(k).or_default();
            handled.0 += 1;
            handled.1 += at.elapsed();
        }
    }
    let fault = if dynamo || SQS_FAULTED.contains(&op.as_str()) {
        draw_fault(state)
    } else {
        None
    };
    if let Some(name) = fault {
        *state.injected.lock().unwrap().entry(name).or_default() += 1;
    }
    match fault {
        Some("throttled") => {
            count(state, kind, &op, 1, 0.0, 0.0, false);
            return Ok(dynamo_error(
                StatusCode::BAD_REQUEST,
                "ProvisionedThroughputExceededException",
                "injected: the request rate is too high",
            ));
        }
        Some("slow") => {
            let ms = 300 + state.rng.lock().unwrap().next() % 500;
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        _ => {}
    }
    let uri = format!(
        "{}{}",
        ctx.upstream,
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
    );
    let mut upstream = http::Request::builder()
        .method(parts.method.clone())
        .uri(uri);
    for (k, v) in &parts.headers {
        if k != http::header::CONTENT_LENGTH {
            upstream = upstream.header(k, v);
        }
    }
    let request_bytes = body.len();
    let response = match ctx.client.request(upstream.body(Full::new(body))?).await {
        Ok(r) => r,
        Err(_) => {
            return Ok(http::Response::builder()
                .status(StatusCode::BAD_GATEWAY)
                .body(Full::new(Bytes::new()))?);
        }
    };
    let (answer_parts, answer) = response.into_parts();
    let answer = answer.collect().await?.to_bytes();
    let answer_text = String::from_utf8_lossy(&answer);
    // What it cost.
    let (mut write_units, mut read_units, mut failed) = (0.0, 0.0, false);
    let mut units = 1;
    if dynamo {
        if answer_text.contains("ConditionalCheckFailedException") {
            // Billed, not reported: 1 unit per KB of the item it found (at least 1).
            failed = true;
            let answer_json: serde_json::Value =
                serde_json::from_slice(&answer).unwrap_or_default();
            let size = capacity::item_size(&answer_json["Item"]);
            write_units = (size as f64 / 1024.0).ceil().max(1.0);
        } else if write {
            write_units = capacity_in(&answer_text);
        } else {
            read_units = capacity_in(&answer_text);
        }
    } else {
        let payload = request_bytes.max(answer.len()) as u64;
        units = payload.div_ceil(64 * 1024).max(1);
        match op.as_str() {
            "SendMessage" => {
                let id = json_str(&answer_text, "MessageId");
                let mut sqs = state.sqs.lock().unwrap();
                if let Some(id) = id {
                    sqs.sent.insert(id.to_string(), kind);
                }
                if let Some(i) = markers_in(&text).max() {
                    let at = sqs.elapsed();
                    let line = format!("{at} sent {id:?} ({})", answer_parts.status);
                    sqs.journeys.entry(i).or_default().push(line);
                }
            }
            "ReceiveMessage" => {
                let now = Instant::now();
                let answer_json: serde_json::Value =
                    serde_json::from_slice(&answer).unwrap_or_default();
                let messages = answer_json["Messages"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let mut sqs = state.sqs.lock().unwrap();
                let registry = state.registry.lock().unwrap();
                for m in &messages {
                    let (Some(id), Some(receipt)) =
                        (m["MessageId"].as_str(), m["ReceiptHandle"].as_str())
                    else {
                        continue;
                    };
                    let k = sqs.sent.get(id).copied().unwrap_or_else(|| {
                        m["Body"].as_str().and_then(|b| registry.kind_of_text(b))
                    });
                    sqs.received.insert(receipt.to_string(), (k, now));
                    if let Some(i) = m["Body"].as_str().and_then(|b| markers_in(b).max()) {
                        let at = sqs.elapsed();
                        sqs.receipt_request.insert(receipt.to_string(), i);
                        let count = &m["Attributes"]["ApproximateReceiveCount"];
                        sqs.journeys
                            .entry(i)
                            .or_default()
                            .push(format!("{at} received {id} (receive {count})"));
                    }
                    // A receive is billed once: it counts for the kind of its first message.
                    if kind.is_none() {
                        kind = k;
                    }
                }
            }
            _ => {}
        }
    }
    count(state, kind, &op, units, write_units, read_units, failed);
    match fault {
        Some("answer lost") => Err("injected: the answer is lost (the connection closes)".into()),
        Some("500 after applying") => Ok(dynamo_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            if dynamo {
                "InternalServerError"
            } else {
                "InternalError"
            },
            "injected after the request was applied",
        )),
        _ => Ok(http::Response::from_parts(answer_parts, Full::new(answer))),
    }
}

#[allow(clippy::too_many_arguments)]
fn count(
    state: &ProxyState,
    kind: Option<Kind>,
    op: &str,
    units: u64,
    write_units: f64,
    read_units: f64,
    failed: bool,
) {
    let mut counts = state.counts.lock().unwrap();
    let tally = counts.entry((kind, op.to_string())).or_default();
    tally.requests += 1;
    tally.units += units;
    tally.write_units += write_units;
    tally.read_units += read_units;
    tally.condition_failed += u64::from(failed);
}

fn dynamo_error(status: StatusCode, kind: &str, message: &str) -> http::Response<Full<Bytes>> {
    http::Response::builder()
        .status(status)
        .header("content-type", "application/x-amz-json-1.0")
        .body(Full::new(Bytes::from(format!(
            r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{kind}","message":"{message}"}}"#
        ))))
        .unwrap()
}
