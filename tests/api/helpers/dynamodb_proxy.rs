//! Test helpers: a proxy in front of DynamoDB.

use super::*;

/// The ledger write a DynamoDB request is, read from its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LedgerOp {
    Claim,
    /// A message's alias (its `client_msg_id`), written with its claim.
    Alias,
    /// A step's intent (`begin_step`).
    Intent,
    Complete,
    Release,
    Fail,
    /// A write of a run's inbox (`gwrun-…`): the gateway's calls relayed through the ledger.
    RunInbox,
    /// A relayed call's answer (`gwcall-…`), written by its run's holder.
    RunAnswer,
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldAt {
    /// The request never reaches DynamoDB, and no answer comes.
    BeforeForwarding,
    /// DynamoDB applies the write; its answer never comes back.
    AfterForwarding,
    /// DynamoDB applies the write; the proxy reads its answer and closes the client's
    /// connection without returning it (the SDK sees a lost answer and sends the write again).
    DropAnswer,
    /// DynamoDB applies the write; the client gets a 500 InternalServerError instead of the
    /// answer (the SDK retries it).
    Error500AfterForwarding,
    /// The request is forwarded after this long (a slow service).
    DelayForwarding(Duration),
    /// The request never reaches DynamoDB, and is refused as DynamoDB refuses a write to an
    /// item a transaction is under way on (`TransactionConflictException`, HTTP 400, which the
    /// SDK does not send again).
    TransactionConflict,
}

#[derive(Default)]
struct ProxyState {
    /// Every request is answered 503 and none forwarded: the service is down.
    down: bool,
    /// The kind of request to hold, how many more of that kind pass first, and how.
    hold: Option<(LedgerOp, usize, HoldAt)>,
    held: usize,
    seen: Vec<LedgerOp>,
}

/// A proxy on 127.0.0.1 in front of DynamoDB Local that can hold, or lose the answer of, the
/// next claim, intent, completion or release: a crash point, or a lost answer, on demand.
pub struct LedgerProxy {
    pub url: String,
    state: Arc<Mutex<ProxyState>>,
    held: Arc<tokio::sync::Notify>,
    _shutdown: oneshot::Sender<()>,
}

#[derive(Clone)]
struct ProxyCtx {
    upstream: String,
    client: Client<HttpConnector, Full<Bytes>>,
    state: Arc<Mutex<ProxyState>>,
    held: Arc<tokio::sync::Notify>,
}

impl LedgerProxy {
    pub async fn start(upstream: &str) -> Self {
        let state = Arc::new(Mutex::new(ProxyState::default()));
        let held = Arc::new(tokio::sync::Notify::new());
        let ctx = ProxyCtx {
            upstream: upstream.to_string(),
            client: Client::builder(TokioExecutor::new()).build_http(),
            state: state.clone(),
            held: held.clone(),
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
                let ctx = ctx.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        proxy_forward(ctx.clone(), request)
                    });
                    // A service error closes the connection without an answer: what DropAnswer needs.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            url: format!("http://{addr}"),
            state,
            held,
            _shutdown: tx,
        }
    }

    /// The next request of kind `op` is held (or its answer lost) as `at` says; later ones pass.
    pub fn hold_next(&self, op: LedgerOp, at: HoldAt) {
        self.hold_nth(op, 1, at);
    }

    /// The `n`-th request of kind `op` from now (1: the next) is held as `at` says.
    pub fn hold_nth(&self, op: LedgerOp, n: usize, at: HoldAt) {
        self.state.lock().unwrap().hold = Some((op, n.saturating_sub(1), at));
    }

    /// Waits until the request to hold has arrived (and, after forwarding, DynamoDB answered).
    pub async fn wait_held(&self) {
        let notified = self.held.notified();
        if self.state.lock().unwrap().held > 0 {
            return;
        }
        tokio::time::timeout(Duration::from_secs(10), notified)
            .await
            .expect("the held request arrived");
    }

    /// While `down`, every request is answered 503 (ServiceUnavailable) and none forwarded.
    pub fn set_down(&self, down: bool) {
        self.state.lock().unwrap().down = down;
    }

    /// How many requests were held so far.
    pub fn held(&self) -> usize {
        self.state.lock().unwrap().held
    }

    /// The ledger writes seen, in order.
    pub fn seen(&self) -> Vec<LedgerOp> {
        self.state.lock().unwrap().seen.clone()
    }
}

/// Which ledger write a DynamoDB request body is.
pub fn classify(body: &[u8]) -> LedgerOp {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return LedgerOp::Other;
    };
    match v["Item"]["pk"]["S"].as_str() {
        Some(key) if key.starts_with("gwrun-") => return LedgerOp::RunInbox,
        Some(key) if key.starts_with("gwcall-") => return LedgerOp::RunAnswer,
        _ => {}
    }
    // An alias: the put of a new one, or the update of one that exists.
    if v["Item"]["alias_of"].is_object() || v["ExpressionAttributeValues"][":of"].is_object() {
        return LedgerOp::Alias;
    }
    if v["ConditionExpression"]
        .as_str()
        .is_some_and(|c| c.contains("attribute_not_exists"))
    {
        return LedgerOp::Claim;
    }
    if v["ExpressionAttributeValues"][":intent"].is_object() {
        return LedgerOp::Intent;
    }
    match v["ExpressionAttributeValues"][":to"]["S"].as_str() {
        Some("done") => LedgerOp::Complete,
        Some("released") => LedgerOp::Release,
        Some("failed") => LedgerOp::Fail,
        _ => LedgerOp::Other,
    }
}

type ProxyError = Box<dyn std::error::Error + Send + Sync>;

async fn proxy_forward(
    ctx: ProxyCtx,
    request: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<Full<Bytes>>, ProxyError> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let op = classify(&body);
    if ctx.state.lock().unwrap().down {
        return Ok(http::Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .header("content-type", "application/x-amz-json-1.1")
            .body(Full::new(Bytes::from_static(
                br#"{"__type":"ServiceUnavailableException","message":"down"}"#,
            )))?);
    }
    let hold = {
        let mut s = ctx.state.lock().unwrap();
        s.seen.push(op);
        match s.hold {
            Some((wanted, 0, at)) if wanted == op => {
                s.hold = None;
                s.held += 1;
                Some(at)
            }
            Some((wanted, more, at)) if wanted == op => {
                s.hold = Some((wanted, more - 1, at));
                None
            }
            _ => None,
        }
    };
    match hold {
        Some(HoldAt::BeforeForwarding) => {
            ctx.held.notify_waiters();
            return std::future::pending().await;
        }
        Some(HoldAt::DelayForwarding(delay)) => {
            ctx.held.notify_waiters();
            tokio::time::sleep(delay).await;
        }
        Some(HoldAt::TransactionConflict) => {
            ctx.held.notify_waiters();
            return Ok(http::Response::builder()
                .status(StatusCode::BAD_REQUEST)
                .header("content-type", "application/x-amz-json-1.0")
                .body(Full::new(Bytes::from_static(
                    br#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionConflictException","message":"Transaction is ongoing for the item"}"#,
                )))?);
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
    let mut upstream = http::Request::builder().method(parts.method).uri(uri);
    for (k, v) in &parts.headers {
        upstream = upstream.header(k, v);
    }
    let response = match ctx.client.request(upstream.body(Full::new(body))?).await {
        Ok(r) => r,
        Err(_) => {
            return Ok(http::Response::builder()
                .status(StatusCode::BAD_GATEWAY)
                .body(Full::new(Bytes::new()))?);
        }
    };
    let (parts, body) = response.into_parts();
    let body = body.collect().await?.to_bytes();
    match hold {
        Some(HoldAt::AfterForwarding) => {
            ctx.held.notify_waiters();
            std::future::pending().await
        }
        Some(HoldAt::DropAnswer) => {
            ctx.held.notify_waiters();
            Err("the answer is dropped: the connection closes".into())
        }
        Some(HoldAt::Error500AfterForwarding) => {
            ctx.held.notify_waiters();
            Ok(http::Response::builder()
                .status(StatusCode::INTERNAL_SERVER_ERROR)
                .header("content-type", "application/x-amz-json-1.0")
                .body(Full::new(Bytes::from_static(
                    br#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"injected after the write"}"#,
                )))?)
        }
        _ => Ok(http::Response::from_parts(parts, Full::new(body))),
    }
}
