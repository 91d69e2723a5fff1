//! What the benches share: a Slack stand-in, signed requests, a Lambda Runtime API stand-in and
//! a request-counting proxy in front of DynamoDB Local. Everything listens on 127.0.0.1.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use slack_once::config::Secret;
use tokio::sync::{mpsc, oneshot};

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

pub fn signed_headers(body: &[u8]) -> Vec<(&'static str, String)> {
    let ts = now_unix();
    vec![
        ("content-type", "application/json".into()),
        ("x-slack-request-timestamp", ts.to_string()),
        (
            "x-slack-signature",
            slack_once::signature::sign(&Secret::new(SECRET), ts, body),
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

/// Answers chat.postMessage and auth.test as Slack would, counting posts.
pub struct SlackStub {
    pub base_url: String,
    pub posts: Arc<AtomicUsize>,
}

impl SlackStub {
    pub async fn start() -> Self {
        let posts = Arc::new(AtomicUsize::new(0));
        let router = Router::new()
            .route("/api/chat.postMessage", post(post_message))
            .route("/api/auth.test", post(auth_test).get(auth_test))
            .with_state(posts.clone());
        let addr = serve_loopback(router).await;
        Self {
            base_url: format!("http://{addr}/api"),
            posts,
        }
    }

    pub fn posts(&self) -> usize {
        self.posts.load(Ordering::Relaxed)
    }
}

async fn post_message(State(posts): State<Arc<AtomicUsize>>) -> Response {
    let n = posts.fetch_add(1, Ordering::Relaxed) + 1;
    json(serde_json::json!({"ok": true, "channel": "C0001", "ts": format!("1800000000.{n:06}")}))
}

async fn auth_test() -> Response {
    json(
        serde_json::json!({"ok": true, "user_id": "UBOT", "bot_id": "B0BENCH", "team_id": "T0001"}),
    )
}

fn json(value: serde_json::Value) -> Response {
    ([("content-type", "application/json")], value.to_string()).into_response()
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

// ---------------------------------------------------------------- Lambda Runtime API stand-in

type Waiters = Arc<Mutex<std::collections::VecDeque<oneshot::Sender<String>>>>;

/// The smallest Lambda Runtime API: hands out queued events one at a time, as Lambda does, and
/// passes each response to its waiter, in order.
pub struct RuntimeStub {
    pub addr: SocketAddr,
    queue: mpsc::UnboundedSender<String>,
    waiters: Waiters,
}

#[derive(Clone)]
struct RuntimeCtx {
    next: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>>,
    waiters: Waiters,
    ids: Arc<AtomicUsize>,
}

impl RuntimeStub {
    pub async fn start() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let waiters: Waiters = Arc::default();
        let ctx = RuntimeCtx {
            next: Arc::new(tokio::sync::Mutex::new(rx)),
            waiters: waiters.clone(),
            ids: Arc::new(AtomicUsize::new(0)),
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
        }
    }

    /// Queues an invocation; the receiver yields the function's response.
    pub fn invoke(&self, event: String) -> oneshot::Receiver<String> {
        let (tx, rx) = oneshot::channel();
        self.waiters.lock().unwrap().push_back(tx);
        self.queue.send(event).unwrap();
        rx
    }
}

async fn next(State(ctx): State<RuntimeCtx>) -> Response {
    let Some(event) = ctx.next.lock().await.recv().await else {
        return http::StatusCode::GONE.into_response();
    };
    let id = format!("req-{}", ctx.ids.fetch_add(1, Ordering::Relaxed));
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

async fn response(State(ctx): State<RuntimeCtx>, body: Bytes) -> &'static str {
    if let Some(tx) = ctx.waiters.lock().unwrap().pop_front() {
        let _ = tx.send(String::from_utf8_lossy(&body).into_owned());
    }
    "{}"
}

// ---------------------------------------------------------------- DynamoDB request counter

/// Forwards to DynamoDB Local, counting requests per operation (`X-Amz-Target`).
pub struct CountingProxy {
    pub url: String,
    pub counts: Arc<Mutex<HashMap<String, usize>>>,
}

#[derive(Clone)]
struct ProxyCtx {
    upstream: String,
    client: Client<HttpConnector, Full<Bytes>>,
    counts: Arc<Mutex<HashMap<String, usize>>>,
}

impl CountingProxy {
    pub async fn start(upstream: &str) -> Self {
        let counts = Arc::new(Mutex::new(HashMap::new()));
        let ctx = ProxyCtx {
            upstream: upstream.to_string(),
            client: Client::builder(TokioExecutor::new()).build_http(),
            counts: counts.clone(),
        };
        let addr = serve_loopback(Router::new().fallback(forward).with_state(ctx)).await;
        Self {
            url: format!("http://{addr}"),
            counts,
        }
    }

    pub fn snapshot(&self) -> HashMap<String, usize> {
        self.counts.lock().unwrap().clone()
    }
}

async fn forward(State(ctx): State<ProxyCtx>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let op = parts
        .headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.rsplit('.').next())
        .unwrap_or("?")
        .to_string();
    *ctx.counts.lock().unwrap().entry(op).or_default() += 1;
    let body = body.collect().await.unwrap().to_bytes();
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
        upstream = upstream.header(k, v);
    }
    match ctx
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
            Response::from_parts(parts, Body::from(body))
        }
        Err(_) => http::StatusCode::BAD_GATEWAY.into_response(),
    }
}
