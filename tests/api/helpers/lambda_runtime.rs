//! Test helpers: Lambda as the built binary meets it: a stand-in of the Lambda Runtime API
//! (`RuntimeApi`: each invocation to whichever environment asks for the next one), a function
//! URL in front of it (`FunctionUrl`: each HTTP request an invocation, its payload and answer as
//! a function URL's), and the binary as environments of one function (`LambdaEnvironment`).

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use tokio::sync::mpsc;

use super::*;

type Invocation = (String, String, u64);
type Waiting = Arc<Mutex<HashMap<String, oneshot::Sender<Result<String, String>>>>>;

#[derive(Clone)]
pub struct RuntimeState {
    next: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Invocation>>>,
    waiting: Waiting,
}

/// Serves `/2018-06-01/runtime/...` as Lambda does, one invocation at a time.
pub struct RuntimeApi {
    pub addr: std::net::SocketAddr,
    queue: mpsc::UnboundedSender<Invocation>,
    state: RuntimeState,
    _shutdown: oneshot::Sender<()>,
}

impl RuntimeApi {
    pub async fn start() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let state = RuntimeState {
            next: Arc::new(tokio::sync::Mutex::new(rx)),
            waiting: Arc::new(Mutex::new(HashMap::new())),
        };
        let app = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(response),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(state.clone());
        let (addr, shutdown) = serve_loopback(app).await;
        Self {
            addr,
            queue: tx,
            state,
            _shutdown: shutdown,
        }
    }

    /// Invokes the function with `event`, `timeout` from now as its deadline; returns the
    /// function's response (the API Gateway v2 response JSON) and the deadline in epoch ms.
    pub async fn invoke(
        &self,
        event: &serde_json::Value,
        timeout: Duration,
    ) -> (serde_json::Value, u64) {
        let id = uuid::Uuid::new_v4().to_string();
        let deadline = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
            + timeout.as_millis() as u64;
        let (tx, rx) = oneshot::channel();
        self.state.waiting.lock().unwrap().insert(id.clone(), tx);
        self.queue.send((id, event.to_string(), deadline)).unwrap();
        let answer = tokio::time::timeout(timeout + Duration::from_secs(5), rx)
            .await
            .expect("the function answered")
            .unwrap()
            .unwrap_or_else(|e| panic!("the invocation failed: {e}"));
        (serde_json::from_str(&answer).unwrap(), deadline)
    }
}

async fn next(State(state): State<RuntimeState>) -> Response {
    let Some((id, event, deadline)) = state.next.lock().await.recv().await else {
        return http::StatusCode::GONE.into_response();
    };
    (
        [
            ("lambda-runtime-aws-request-id", id),
            ("lambda-runtime-deadline-ms", deadline.to_string()),
            (
                "lambda-runtime-invoked-function-arn",
                "arn:aws:lambda:us-east-1:123456789012:function:slack-once".to_string(),
            ),
            (
                "lambda-runtime-trace-id",
                "Root=1-5bef4de7-ad49b0e87f6ef6c87fc2e700".to_string(),
            ),
            ("content-type", "application/json".to_string()),
        ],
        event,
    )
        .into_response()
}

async fn response(
    State(state): State<RuntimeState>,
    Path(id): Path<String>,
    body: Bytes,
) -> &'static str {
    if let Some(tx) = state.waiting.lock().unwrap().remove(&id) {
        let _ = tx.send(Ok(String::from_utf8_lossy(&body).into_owned()));
    }
    "{}"
}

async fn init_error(body: Bytes) -> &'static str {
    eprintln!(
        "the function reported an init error: {}",
        String::from_utf8_lossy(&body)
    );
    "{}"
}

async fn error(
    State(state): State<RuntimeState>,
    Path(id): Path<String>,
    body: Bytes,
) -> &'static str {
    if let Some(tx) = state.waiting.lock().unwrap().remove(&id) {
        let _ = tx.send(Err(String::from_utf8_lossy(&body).into_owned()));
    }
    "{}"
}

impl RuntimeApi {
    /// Invokes the function with `event` without waiting for more than `timeout` (as Lambda's
    /// own timeout): its answer, or `None` when the function gave none in time (its
    /// environment died, or it ran out of time).
    pub async fn try_invoke(&self, event: &serde_json::Value, timeout: Duration) -> Option<String> {
        let id = uuid::Uuid::new_v4().to_string();
        let deadline = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
            + timeout.as_millis() as u64;
        let (tx, rx) = oneshot::channel();
        self.state.waiting.lock().unwrap().insert(id.clone(), tx);
        self.queue
            .send((id.clone(), event.to_string(), deadline))
            .unwrap();
        let answer = tokio::time::timeout(timeout, rx).await;
        self.state.waiting.lock().unwrap().remove(&id);
        answer.ok()?.ok()?.ok()
    }
}

/// An SQS record as the event source mapping hands it to the function.
pub fn sqs_record(message_id: &str, body: &str, receive_count: u32) -> serde_json::Value {
    serde_json::json!({
        "messageId": message_id,
        "receiptHandle": format!("handle-{message_id}"),
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": receive_count.to_string(),
            "SentTimestamp": "1767225600000",
            "SenderId": "AIDAEXAMPLE",
            "ApproximateFirstReceiveTimestamp": "1767225600001"
        },
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:slack-once-work",
        "awsRegion": "us-east-1"
    })
}

/// A function URL on 127.0.0.1: each request made an invocation of the function behind
/// `runtime`, with `timeout` as the function's; a function that gives no answer in time is a
/// 502, as Lambda's URL answers it.
pub struct FunctionUrl {
    pub addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

impl FunctionUrl {
    pub async fn start(runtime: Arc<RuntimeApi>, timeout: Duration) -> Self {
        let router = Router::new().fallback(move |request: axum::extract::Request| {
            let runtime = runtime.clone();
            async move {
                let event = function_url_event(request).await;
                match runtime.try_invoke(&event, timeout).await {
                    Some(answer) => function_url_answer(&answer),
                    None => http::StatusCode::BAD_GATEWAY.into_response(),
                }
            }
        });
        let (addr, stop) = serve_loopback(router).await;
        Self { addr, _stop: stop }
    }

    /// Where Slack sends the app's requests.
    pub fn events_url(&self) -> String {
        format!("http://{}/slack/events", self.addr)
    }

    /// The gateway's proxy, as the bot reaches it.
    pub fn api_url(&self) -> String {
        format!("http://{}/api/", self.addr)
    }
}

/// A request as a function URL hands it to the function (payload format 2.0).
async fn function_url_event(request: axum::extract::Request) -> serde_json::Value {
    let (parts, body) = request.into_parts();
    let body = http_body_util::BodyExt::collect(body)
        .await
        .unwrap()
        .to_bytes();
    let mut headers = serde_json::Map::new();
    for (name, value) in &parts.headers {
        headers.insert(
            name.as_str().to_string(),
            value.to_str().unwrap_or_default().into(),
        );
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    serde_json::json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": parts.uri.path(),
        "rawQueryString": parts.uri.query().unwrap_or_default(),
        "headers": headers,
        "requestContext": {
            "accountId": "anonymous",
            "apiId": "abcdefghij",
            "domainName": "abcdefghij.lambda-url.us-east-1.on.aws",
            "domainPrefix": "abcdefghij",
            "http": {
                "method": parts.method.as_str(),
                "path": parts.uri.path(),
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": "test"
            },
            "requestId": uuid::Uuid::new_v4().to_string(),
            "routeKey": "$default",
            "stage": "$default",
            "time": "01/Jan/2026:00:00:00 +0000",
            "timeEpoch": now_ms
        },
        "body": base64::engine::general_purpose::STANDARD.encode(&body),
        "isBase64Encoded": true
    })
}

/// The function's answer (a function URL's response JSON) as the URL's HTTP response.
fn function_url_answer(answer: &str) -> Response {
    let answer: serde_json::Value = serde_json::from_str(answer).unwrap_or_default();
    let status = answer["statusCode"].as_u64().unwrap_or(502) as u16;
    let body = answer["body"].as_str().unwrap_or_default();
    let body = match answer["isBase64Encoded"].as_bool() {
        Some(true) => base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap_or_default(),
        _ => body.as_bytes().to_vec(),
    };
    let mut response = (http::StatusCode::from_u16(status).unwrap(), body).into_response();
    if let Some(headers) = answer["headers"].as_object() {
        for (name, value) in headers {
            if let (Ok(name), Some(Ok(value))) = (
                http::HeaderName::from_bytes(name.as_bytes()),
                value.as_str().map(http::HeaderValue::from_str),
            ) {
                response.headers_mut().insert(name, value);
            }
        }
    }
    response
}

/// One environment of a function: the built binary with `args` under the Runtime API at
/// `runtime`, one invocation at a time; its log in a file of its own. Killed (by its PID) when
/// dropped.
pub struct LambdaEnvironment {
    child: std::process::Child,
    log: std::path::PathBuf,
}

impl LambdaEnvironment {
    pub fn start(runtime: &RuntimeApi, args: &[&str], vars: &[(&'static str, String)]) -> Self {
        let log = std::env::temp_dir().join(format!(
            "slack-once-lambda-{}.log",
            uuid::Uuid::new_v4().simple()
        ));
        let file = std::fs::File::create(&log).unwrap();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"));
        command
            .args(args)
            .env_clear()
            .env("SLACK_SIGNING_SECRET", SECRET)
            .env("RUST_LOG", "info")
            .env("AWS_LAMBDA_RUNTIME_API", runtime.addr.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", "slack-once-gateway")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "test-stream")
            .env(
                "AWS_LAMBDA_LOG_GROUP_NAME",
                "/aws/lambda/slack-once-gateway",
            )
            .stdout(file.try_clone().unwrap())
            .stderr(file);
        for (k, v) in vars {
            command.env(k, v);
        }
        let child = command.spawn().expect("the binary starts");
        Self { child, log }
    }

    /// What it printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, as when Lambda ends an environment.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether it has exited (a configuration error ends it at once), and with what code.
    pub fn exit_code(&mut self) -> Option<i32> {
        self.child.try_wait().ok().flatten().and_then(|s| s.code())
    }
}

impl Drop for LambdaEnvironment {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.log);
    }
}
