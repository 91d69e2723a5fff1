//! What the benches share: a Slack stand-in, signed requests, a Lambda Runtime API stand-in and
//! a request-counting proxy in front of DynamoDB Local. Everything listens on 127.0.0.1.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use slack_once::config::Secret;
use slack_once::testing::{FakeSlack, Identity};
use tokio::sync::{mpsc, oneshot};

mod capacity;
pub use capacity::{consumed, item_size};

pub const SECRET: &str = "bench-signing-secret";

pub async fn serve_loopback(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An app_mention with its own event id and its own message (`ts`), as Slack sends it.
pub fn app_mention(event_id: &str) -> String {
    let h = event_id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    let ts = format!(
        "{}.{:06}",
        1_700_000_000 + h % 100_000_000,
        (h >> 40) % 1_000_000
    );
    serde_json::json!({
        "token": "unused", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
        "event_id": event_id, "event_time": 1_700_000_000,
        "event": {"type": "app_mention", "user": "U0001", "text": "<@UBOT> benchmark",
                  "ts": ts, "channel": "C0001", "event_ts": ts},
        "authorizations": [{"team_id": "T0001", "user_id": "UBOT", "is_bot": true}]
    })
    .to_string()
}

/// The same app_mention as a person's message carries it: with its own `client_msg_id`.
pub fn person_message(event_id: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&app_mention(event_id)).unwrap();
    let h = event_id.bytes().fold(0x811c_9dc5_u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    });
    v["event"]["client_msg_id"] = format!(
        "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
        h >> 32,
        (h >> 16) & 0xffff,
        h & 0xfff,
        (h >> 20) & 0xfff,
        h.rotate_left(17) & 0xffff_ffff_ffff
    )
    .into();
    v.to_string()
}

pub fn signed_headers(body: &[u8]) -> Vec<(&'static str, String)> {
    let ts = now_unix();
    vec![
        ("content-type", "application/json".into()),
        ("x-slack-request-timestamp", ts.to_string()),
        (
            "x-slack-signature",
            slack_once::slack::signature::sign(&Secret::new(SECRET), ts, body),
        ),
    ]
}

/// A Function URL (API Gateway v2) event carrying a signed body.
pub fn lambda_event(body: &str) -> String {
    let headers: serde_json::Map<String, serde_json::Value> = signed_headers(body.as_bytes())
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.into()))
        .collect();
    serde_json::json!({
        "version": "2.0", "routeKey": "$default", "rawPath": "/slack/events", "rawQueryString": "",
        "headers": headers,
        "requestContext": {"accountId": "anonymous", "apiId": "bench", "domainName": "bench.lambda-url.us-east-1.on.aws",
            "domainPrefix": "bench", "http": {"method": "POST", "path": "/slack/events", "protocol": "HTTP/1.1",
            "sourceIp": "127.0.0.1", "userAgent": "Slackbot 1.0"}, "requestId": "bench", "routeKey": "$default",
            "stage": "$default", "time": "01/Jan/2026:00:00:00 +0000", "timeEpoch": 0},
        "body": body, "isBase64Encoded": false
    })
    .to_string()
}

// ---------------------------------------------------------------- Slack stand-in

/// The bench's Slack: the tests' stand-in ([`FakeSlack`], one workspace modelled as Slack keeps
/// it: our posts carry our `bot_id` and `app_id`, each its own `ts` from the clock) for the bench
/// events' app (team `T0001`, app `A0001`, bot user `UBOT`).
pub struct SlackStub {
    pub base_url: String,
    slack: FakeSlack,
}

impl SlackStub {
    pub async fn start() -> Self {
        let slack = FakeSlack::start_for(Identity {
            team: "T0001".into(),
            app_id: "A0001".into(),
            bot_id: "B0BENCH".into(),
            bot_user: "UBOT".into(),
        })
        .await;
        Self {
            base_url: slack.base_url().to_string(),
            slack,
        }
    }

    /// The message a signed event is about is in its conversation, as in Slack (for listeners
    /// that react to it or update it).
    pub fn saw(&self, body: &str) {
        self.slack
            .with_workspace(|w| w.add_event_message(body.as_bytes()));
    }

    /// Web API calls made so far: posts, in every measure that counts them.
    pub fn posts(&self) -> usize {
        self.slack.call_count()
    }
}

// ---------------------------------------------------------------- HTTP client

#[derive(Clone)]
pub struct HttpClient(Client<HttpConnector, Full<Bytes>>);

impl Default for HttpClient {
    fn default() -> Self {
        Self(Client::builder(TokioExecutor::new()).build_http())
    }
}

impl HttpClient {
    /// Sends a signed event; returns the status (0 when the connection failed).
    pub async fn send_event(&self, url: &str, body: &str) -> u16 {
        let mut request = http::Request::builder().method("POST").uri(url);
        for (k, v) in signed_headers(body.as_bytes()) {
            request = request.header(k, v);
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        match self.0.request(request).await {
            Ok(response) => {
                let status = response.status().as_u16();
                let _ = response.into_body().collect().await;
                status
            }
            Err(_) => 0,
        }
    }
}

impl HttpClient {
    /// A Web API call as a Slack client makes it (JSON, a bearer token); returns the status.
    pub async fn post_json(&self, url: &str, body: &str, token: &str) -> u16 {
        let request = http::Request::builder()
            .method("POST")
            .uri(url)
            .header("content-type", "application/json; charset=utf-8")
            .header("authorization", format!("Bearer {token}"))
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        match self.0.request(request).await {
            Ok(response) => {
                let status = response.status().as_u16();
                let _ = response.into_body().collect().await;
                status
            }
            Err(_) => 0,
        }
    }
}

// ---------------------------------------------------------------- Lambda Runtime API stand-in

type Waiters = Arc<Mutex<HashMap<String, oneshot::Sender<String>>>>;

/// The Lambda Runtime API as a function sees it: hands each queued event to the next
/// `/invocation/next` (several may wait at once, as under Lambda Managed Instances) and passes
/// each response to the waiter of its request id. It records when the function first asked for
/// an event: the end of its init.
pub struct RuntimeStub {
    pub addr: SocketAddr,
    queue: mpsc::UnboundedSender<(String, String)>,
    waiters: Waiters,
    ids: AtomicUsize,
    first_next: Arc<Mutex<Option<Instant>>>,
}

#[derive(Clone)]
struct RuntimeCtx {
    next: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<(String, String)>>>,
    waiters: Waiters,
    first_next: Arc<Mutex<Option<Instant>>>,
}

impl RuntimeStub {
    pub async fn start() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let waiters: Waiters = Arc::default();
        let first_next = Arc::new(Mutex::new(None));
        let ctx = RuntimeCtx {
            next: Arc::new(tokio::sync::Mutex::new(rx)),
            waiters: waiters.clone(),
            first_next: first_next.clone(),
        };
        let router = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(response),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(response))
            .route("/2018-06-01/runtime/init/error", post(|| async { "{}" }))
            .with_state(ctx);
        let addr = serve_loopback(router).await;
        Self {
            addr,
            queue: tx,
            waiters,
            ids: AtomicUsize::new(0),
            first_next,
        }
    }

    /// Queues an invocation; the receiver yields the function's response.
    pub fn invoke(&self, event: String) -> oneshot::Receiver<String> {
        let (tx, rx) = oneshot::channel();
        let id = format!("req-{}", self.ids.fetch_add(1, Ordering::Relaxed));
        self.waiters.lock().unwrap().insert(id.clone(), tx);
        self.queue.send((id, event)).unwrap();
        rx
    }

    /// When the function first asked for an event (its init done), if it has.
    pub fn first_next(&self) -> Option<Instant> {
        *self.first_next.lock().unwrap()
    }
}

async fn next(State(ctx): State<RuntimeCtx>) -> Response {
    ctx.first_next
        .lock()
        .unwrap()
        .get_or_insert_with(Instant::now);
    // One waiting request takes the next event; the others wait their turn for the lock.
    let Some((id, event)) = ctx.next.lock().await.recv().await else {
        return http::StatusCode::GONE.into_response();
    };
    let deadline = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 10_000;
    (
        [
            ("lambda-runtime-aws-request-id", id),
            ("lambda-runtime-deadline-ms", deadline.to_string()),
            (
                "lambda-runtime-invoked-function-arn",
                "arn:aws:lambda:us-east-1:123456789012:function:bench".into(),
            ),
            (
                "lambda-runtime-trace-id",
                "Root=1-00000000-000000000000000000000000".into(),
            ),
            ("content-type", "application/json".into()),
        ],
        event,
    )
        .into_response()
}

async fn response(
    State(ctx): State<RuntimeCtx>,
    axum::extract::Path(id): axum::extract::Path<String>,
    body: Bytes,
) -> &'static str {
    if let Some(tx) = ctx.waiters.lock().unwrap().remove(&id) {
        let _ = tx.send(String::from_utf8_lossy(&body).into_owned());
    }
    "{}"
}

// ---------------------------------------------------------------- DynamoDB request counter

/// One request the proxy forwarded.
#[derive(Clone, Debug)]
pub struct Forwarded {
    /// The operation (`UpdateItem`, …) or, for SQS's JSON protocol, its action.
    pub op: String,
    pub start: Instant,
    pub end: Instant,
    /// Write capacity units, as DynamoDB reports them (`ReturnConsumedCapacity=TOTAL`, added by
    /// the proxy to every write) or, for a conditional write that failed, which DynamoDB bills
    /// but does not report, from the size of the item it returned (1 unit per KB, at least 1).
    pub write_units: f64,
    pub condition_failed: bool,
}

const WRITES: [&str; 5] = [
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "TransactWriteItems",
    "BatchWriteItem",
];

/// Forwards to DynamoDB Local (or the SQS server), recording each request: its operation
/// (`X-Amz-Target`), when it was received and answered, and what a write cost.
pub struct CountingProxy {
    pub url: String,
    log: Arc<Mutex<Vec<Forwarded>>>,
}

#[derive(Clone)]
struct ProxyCtx {
    upstream: String,
    client: Client<HttpConnector, Full<Bytes>>,
    log: Arc<Mutex<Vec<Forwarded>>>,
}

impl CountingProxy {
    pub async fn start(upstream: &str) -> Self {
        let log = Arc::new(Mutex::new(Vec::new()));
        let ctx = ProxyCtx {
            upstream: upstream.to_string(),
            client: Client::builder(TokioExecutor::new()).build_http(),
            log: log.clone(),
        };
        let addr = serve_loopback(Router::new().fallback(forward).with_state(ctx)).await;
        Self {
            url: format!("http://{addr}"),
            log,
        }
    }

    /// Requests per operation so far.
    pub fn snapshot(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for f in self.log.lock().unwrap().iter() {
            *counts.entry(f.op.clone()).or_default() += 1;
        }
        counts
    }

    pub fn len(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    /// The requests received from `from` on.
    pub fn since(&self, from: usize) -> Vec<Forwarded> {
        self.log.lock().unwrap()[from..].to_vec()
    }
}

/// How many requests of `requests` were made one after another: overlapping requests (sent
/// together) count once.
pub fn sequential(requests: &[Forwarded]) -> usize {
    let mut spans: Vec<(Instant, Instant)> = requests.iter().map(|r| (r.start, r.end)).collect();
    spans.sort();
    let mut count = 0;
    let mut until: Option<Instant> = None;
    for (start, end) in spans {
        match until {
            Some(u) if start < u => until = Some(u.max(end)),
            _ => {
                count += 1;
                until = Some(end);
            }
        }
    }
    count
}

async fn forward(State(ctx): State<ProxyCtx>, request: Request) -> Response {
    let start = Instant::now();
    let (parts, body) = request.into_parts();
    let op = parts
        .headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.rsplit('.').next())
        .unwrap_or("?")
        .to_string();
    let mut body = body.collect().await.unwrap().to_bytes();
    let write = WRITES.contains(&op.as_str());
    if write {
        // DynamoDB Local checks no signature: the body may be changed.
        if let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(&body) {
            v["ReturnConsumedCapacity"] = "TOTAL".into();
            body = Bytes::from(v.to_string());
        }
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
    let mut upstream = http::Request::builder().method(parts.method).uri(uri);
    for (k, v) in &parts.headers {
        if k != http::header::CONTENT_LENGTH {
            upstream = upstream.header(k, v);
        }
    }
    let answer = match ctx
        .client
        .request(upstream.body(Full::new(body)).unwrap())
        .await
    {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            Ok((parts, body))
        }
        Err(_) => Err(()),
    };
    let end = Instant::now();
    let (mut write_units, mut condition_failed) = (0.0, false);
    if let Ok((_, body)) = &answer
        && write
    {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        write_units = consumed(&v["ConsumedCapacity"]);
        if v["__type"]
            .as_str()
            .is_some_and(|t| t.ends_with("ConditionalCheckFailedException"))
        {
            condition_failed = true;
            let size = item_size(&v["Item"]);
            write_units = (size as f64 / 1024.0).ceil().max(1.0);
        }
    }
    ctx.log.lock().unwrap().push(Forwarded {
        op,
        start,
        end,
        write_units,
        condition_failed,
    });
    match answer {
        Ok((parts, body)) => Response::from_parts(parts, Body::from(body)),
        Err(()) => http::StatusCode::BAD_GATEWAY.into_response(),
    }
}
