//! Test helpers: `slack-once gateway` (the built binary) and the bots behind it: the Bolt for
//! JavaScript and Bolt for Python apps of `tests/bots/` (real Bolt, installed by
//! `scripts/bolt-bots.sh`), and bots written here as plain HTTP servers, for the protocol's
//! edges.

use std::io::BufRead;
use std::path::PathBuf;

use super::*;

/// The secret the gateway signs its forwards with, which the bots verify them with.
pub const GATEWAY_SECRET: &str = "gateway-secret-shared-with-the-bot";
/// The placeholder the bots are given as their bot token.
pub const PROXY_TOKEN: &str = "xoxb-placeholder-for-the-gateway";

/// How many `eyes` reactions Slack holds on the message `ts`.
pub fn eyes(slack: &SlackStandin, ts: &str) -> usize {
    slack
        .reactions()
        .iter()
        .filter(|(_, t, n)| t == ts && n == "eyes")
        .count()
}

/// A free port of 127.0.0.1 for a bot to listen on, told to the gateway before the bot starts.
/// It is taken below the kernel's ephemeral range (32768 and up here, `ip_local_port_range`),
/// where nothing binding port 0 and no outgoing connection can take it in the meantime, and
/// each call of this process takes another.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    const FIRST: u16 = 20_000;
    const SPAN: u16 = 12_000;
    // Each test process starts at its own place in the range (by its PID).
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = (std::process::id() % u32::from(SPAN)) as u16;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST + (start + n) % SPAN;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// `slack-once gateway` on DynamoDB Local's `table`, Slack at `slack`, forwarding to `bots`.
pub fn spawn_gateway(slack: &SlackStandin, table: &str, bots: &[String]) -> BotProcess {
    spawn_gateway_with(slack, table, bots, &[])
}

/// As [`spawn_gateway`], with `extra` variables.
pub fn spawn_gateway_with(
    slack: &SlackStandin,
    table: &str,
    bots: &[String],
    extra: &[(&'static str, String)],
) -> BotProcess {
    let mut vars = bot_vars(slack, &dynamodb_endpoint(), table);
    vars.extend(gateway_vars(bots));
    vars.extend(extra.iter().cloned());
    BotProcess::spawn_gateway(&vars)
}

/// The variables that make a `slack-once` process a gateway forwarding to `bots`.
pub fn gateway_vars(bots: &[String]) -> Vec<(&'static str, String)> {
    vec![
        ("SLACK_ONCE_BOT_URL", bots.join(",")),
        ("SLACK_ONCE_GATEWAY_SECRET", GATEWAY_SECRET.to_string()),
        ("SLACK_ONCE_PROXY_TOKEN", PROXY_TOKEN.to_string()),
    ]
}

/// A deferred-mode gateway: its ingress, acknowledging Slack once the queue holds each request,
/// and its worker, forwarding from the queue with a lease of `lease_s`.
pub fn spawn_deferred_gateway(
    stack: &DeferredStack,
    bots: &[String],
    lease_s: u64,
) -> (BotProcess, BotProcess) {
    let mut ingress = stack.ingress_vars();
    ingress.extend(gateway_vars(bots));
    let mut worker = stack.worker_vars(lease_s, 5);
    worker.extend(gateway_vars(bots));
    (
        BotProcess::spawn_gateway(&ingress),
        BotProcess::spawn_gateway_worker(&worker),
    )
}

/// The Bolt apps' answer to a mention by U0001: `eyes` on it, `Hello <@U0001>` in its thread.
pub fn answered(slack: &SlackStandin, event_id: &str) -> (usize, usize) {
    let ts = ts_of(event_id);
    let eyes = slack
        .reactions()
        .iter()
        .filter(|(_, t, n)| *t == ts && n == "eyes")
        .count();
    let replies = slack
        .posted()
        .iter()
        .filter(|p| p.body["thread_ts"] == ts.as_str() && p.body["text"] == "Hello <@U0001>")
        .count();
    (eyes, replies)
}

/// The same message as `body` delivered under another event id (a copy Slack sends as another
/// event).
pub fn copy_of(body: &str, event_id: &str) -> String {
    let mut copy: serde_json::Value = serde_json::from_str(body).unwrap();
    copy["event_id"] = event_id.into();
    copy.to_string()
}

/// Delivers a mention as Slack does when its first answer is slow: the original and a retry
/// at once, two later retries, and a copy under another event id.
pub async fn deliver_with_retries(http: &HttpClient, url: &str, event_id: &str) {
    let body = app_mention(event_id, "hello");
    let (first, retry) = tokio::join!(
        deliver(http, url, &body, None),
        deliver(http, url, &body, Some(1))
    );
    let mut statuses = vec![first.status, retry.status];
    for retry in [Some(2), Some(3)] {
        statuses.push(deliver(http, url, &body, retry).await.status);
    }
    let copy = copy_of(&body, &format!("{event_id}Copy"));
    statuses.push(deliver(http, url, &copy, None).await.status);
    assert!(statuses.iter().any(StatusCode::is_success), "{statuses:?}");
}

/// Which Bolt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bolt {
    /// Bolt for JavaScript 5 (`tests/bots/bolt-js/app.js`).
    JavaScript,
    /// Bolt for Python 1.30 (`tests/bots/bolt-python/app.py`).
    Python,
}

/// A replica of a Bolt app of `tests/bots/`, listening on 127.0.0.1; killed (by its PID) when
/// dropped.
pub struct BoltReplica {
    child: std::process::Child,
    log: Arc<Mutex<Vec<String>>>,
}

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

impl BoltReplica {
    /// Starts `bolt`'s app on a free port, calling the gateway at `api_url` outside requests,
    /// with `extra` variables (`BOT_EXIT_AFTER_REACTION`, `BOT_REPLY_DELAY_MS`…); waits until it
    /// listens.
    pub fn start(bolt: Bolt, port: u16, api_url: &str, extra: &[(&str, &str)]) -> Self {
        let root = repository();
        let (program, script): (PathBuf, PathBuf) = match bolt {
            Bolt::JavaScript => (
                PathBuf::from("node"),
                root.join("tests/bots/bolt-js/app.js"),
            ),
            Bolt::Python => (
                root.join(".venv-bolt/bin/python"),
                root.join("tests/bots/bolt-python/app.py"),
            ),
        };
        let installed = match bolt {
            Bolt::JavaScript => root.join("tests/bots/bolt-js/node_modules/@slack/bolt"),
            Bolt::Python => root.join(".venv-bolt/bin/python"),
        };
        assert!(
            installed.exists(),
            "{bolt:?}'s Bolt app is not installed ({} is missing): run scripts/bolt-bots.sh \
             (scripts/test.sh runs it for you)",
            installed.display()
        );
        let mut command = std::process::Command::new(&program);
        command
            .arg(&script)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("PORT", port.to_string())
            .env("SLACK_SIGNING_SECRET", GATEWAY_SECRET)
            .env("SLACK_BOT_TOKEN", PROXY_TOKEN)
            .env("SLACK_ONCE_API_URL", api_url)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for (k, v) in extra {
            command.env(k, v);
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", program.display()));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (ready, listening) = std::sync::mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let (log, ready) = (log.clone(), ready.clone());
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    if line.starts_with("listening on") {
                        let _ = ready.send(());
                    }
                    log.lock().unwrap().push(line);
                }
            });
        }
        if listening.recv_timeout(Duration::from_secs(30)).is_err() {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{bolt:?}'s Bolt app did not start; its log:\n{}",
                log.lock().unwrap().join("\n")
            );
        }
        Self { child, log }
    }

    /// The URL of a replica on `port`.
    pub fn url_on(port: u16) -> String {
        format!("http://127.0.0.1:{port}/slack/events")
    }

    /// What it printed so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Whether the process has ended (killed itself, say), waiting up to `limit`.
    pub fn ended_within(&mut self, limit: Duration) -> bool {
        let until = std::time::Instant::now() + limit;
        while std::time::Instant::now() < until {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for BoltReplica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A request as a bot behind the gateway received it.
#[derive(Clone, Debug)]
pub struct Forwarded {
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Forwarded {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// Whether it carries a signature of the gateway's secret over its exact bytes.
    pub fn signed_by_the_gateway(&self) -> bool {
        let secrets =
            slack_once::config::SigningSecrets::new(vec![Secret::new(GATEWAY_SECRET)]).unwrap();
        slack_once::slack::signature::verify_at(&secrets, &self.headers, &self.body, now_unix())
            .is_ok()
    }

    /// The JSON body (an event's envelope).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }

    /// The channel and `ts` of the message the forwarded event is about.
    pub fn message(&self) -> (serde_json::Value, serde_json::Value) {
        let event = self.json()["event"].clone();
        (event["channel"].clone(), event["ts"].clone())
    }

    /// `eyes` on the event's message, through the gateway's proxy.
    pub async fn react(&self) -> serde_json::Value {
        let (channel, ts) = self.message();
        let eyes = serde_json::json!({"channel": channel, "timestamp": ts, "name": "eyes"});
        self.call("reactions.add", eyes).await
    }

    /// `text` in the thread of the event's message, through the gateway's proxy.
    pub async fn reply(&self, text: &str) -> serde_json::Value {
        let (channel, ts) = self.message();
        let reply = serde_json::json!({"channel": channel, "thread_ts": ts, "text": text});
        self.call("chat.postMessage", reply).await
    }

    /// Calls `method` on the gateway's proxy as this request's run, as an SDK does (a JSON
    /// body, the placeholder token).
    pub async fn call(&self, method: &str, args: serde_json::Value) -> serde_json::Value {
        self.call_as(method, args, PROXY_TOKEN).await
    }

    /// As [`Forwarded::call`], with `token` as the bot token.
    pub async fn call_as(
        &self,
        method: &str,
        args: serde_json::Value,
        token: &str,
    ) -> serde_json::Value {
        let url = format!("{}{method}", self.header("x-slack-once-api-url"));
        let headers = [
            ("content-type".to_string(), "application/json".to_string()),
            ("authorization".to_string(), format!("Bearer {token}")),
            (
                "x-slack-once-request".to_string(),
                self.header("x-slack-once-request").to_string(),
            ),
        ];
        let answer = HttpClient::default()
            .request("POST", &url, &headers, args.to_string())
            .await;
        assert_eq!(answer.status, StatusCode::OK, "the proxy answers 200");
        answer.json()
    }
}

/// A bot that reacts to the mention's message, then replies `Hello` in its thread: answering
/// 500 when a call fails, and dying (its connection dropped unanswered) after the reaction when
/// `dies`; telling `posting`, if given, before it replies.
pub async fn reacting_bot(dies: bool, posting: Option<Arc<tokio::sync::Notify>>) -> HttpBot {
    HttpBot::start(move |f: Forwarded| {
        let posting = posting.clone();
        async move {
            let reacted = f.react().await;
            if dies {
                panic!("killed between its two writes");
            }
            if let Some(posting) = posting {
                posting.notify_one();
            }
            let replied = f.reply("Hello").await;
            match reacted["ok"] == true && replied["ok"] == true {
                true => (StatusCode::OK, String::new()),
                false => (StatusCode::INTERNAL_SERVER_ERROR, replied.to_string()),
            }
        }
    })
    .await
}

type BotHandler = Arc<
    dyn Fn(Forwarded) -> std::pin::Pin<Box<dyn Future<Output = (StatusCode, String)> + Send>>
        + Send
        + Sync,
>;

/// A bot written here: a real HTTP server on 127.0.0.1 that hands each forward to `handler`,
/// which answers it (or panics, dropping the connection unanswered: a process killed
/// mid-request). Every forward is kept.
pub struct HttpBot {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<Forwarded>>>,
    _stop: oneshot::Sender<()>,
}

use std::future::Future;

impl HttpBot {
    pub async fn start<F, Fut>(handler: F) -> Self
    where
        F: Fn(Forwarded) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = (StatusCode, String)> + Send + 'static,
    {
        let handler: BotHandler = Arc::new(move |f| Box::pin(handler(f)));
        let received: Arc<Mutex<Vec<Forwarded>>> = Arc::default();
        let kept = received.clone();
        let router = Router::new().route(
            "/slack/events",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let (handler, kept) = (handler.clone(), kept.clone());
                async move {
                    let forwarded = Forwarded { headers, body };
                    kept.lock().unwrap().push(forwarded.clone());
                    handler(forwarded).await
                }
            }),
        );
        let (addr, stop) = serve_loopback(router).await;
        Self {
            addr,
            received,
            _stop: stop,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/slack/events", self.addr)
    }

    pub fn received(&self) -> Vec<Forwarded> {
        self.received.lock().unwrap().clone()
    }
}

/// Slack (a stand-in of many workspaces, the app's client id `1234.5678`) and a fresh table
/// holding each of `installed` (a bot token, its team), imported as an operator does: the
/// variables of a gateway serving them all, but the gateway's own.
pub async fn many_workspaces(
    installed: &[(&str, &str)],
) -> (
    slack_once::testing::FakeSlack,
    String,
    Vec<(&'static str, String)>,
) {
    const CLIENT_ID: &str = "1234.5678";
    let slack = slack_once::testing::FakeSlack::start()
        .await
        .with_oauth(CLIENT_ID, "test-client-secret");
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let mut vars = dynamodb_env(&endpoint);
    vars.extend([
        ("DEDUP_TABLE", table.clone()),
        ("SLACK_CLIENT_ID", CLIENT_ID.to_string()),
        ("SLACK_API_URL", slack.base_url().to_string()),
    ]);
    for (token, team) in installed {
        slack.with_grants(|g| g.accept(token, team));
        let imported = std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"))
            .env_clear()
            .args(["import-token", "--plaintext"])
            .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
            .env("SLACK_BOT_TOKEN", token)
            .output()
            .unwrap();
        assert!(imported.status.success(), "{imported:?}");
    }
    vars.extend([
        ("SLACK_CLIENT_SECRET", "test-client-secret".to_string()),
        (
            "SLACK_SCOPES",
            "app_mentions:read,chat:write,reactions:write,channels:history".to_string(),
        ),
    ]);
    (slack, table, vars)
}
