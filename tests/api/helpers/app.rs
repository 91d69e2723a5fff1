//! Test helpers: the app.

use super::*;

pub struct TestApp {
    pub addr: SocketAddr,
    pub slack: SlackStandin,
    pub http: HttpClient,
    _shutdown: oneshot::Sender<()>,
}

#[derive(Default)]
pub struct Options {
    pub vars: Vec<(&'static str, String)>,
    pub ledger: Option<Arc<dyn Ledger>>,
    /// The app answering (the reference bot when unset).
    pub app: Option<slack_once::app::App>,
}

/// The reference bot on a DynamoDB ledger reached at `url` (DynamoDB Local, or a proxy in front
/// of it), table `table`, with `vars` beside the test configuration.
pub async fn spawn_app_on_ledger(
    url: &str,
    table: impl Into<String>,
    vars: Vec<(&'static str, String)>,
) -> TestApp {
    let ledger = Arc::new(DynamoLedger::new(dynamodb_client(url), table));
    spawn_app_with(Options {
        vars,
        ledger: Some(ledger as Arc<dyn Ledger>),
        app: None,
    })
    .await
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(Options::default()).await
}

/// `app` answering, with the defaults otherwise.
pub async fn spawn_bot(app: slack_once::app::App) -> TestApp {
    spawn_app_with(Options {
        app: Some(app),
        ..Default::default()
    })
    .await
}

/// The test configuration (the test secret and token, `slack` as the Web API, port 0), with
/// `extra` over it.
pub fn test_config(slack: &SlackStandin, extra: &[(&str, &str)]) -> Config {
    let mut vars: HashMap<String, String> = [
        ("SLACK_SIGNING_SECRET", SECRET.to_string()),
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
        ("LISTEN_ADDR", "127.0.0.1:0".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for (k, v) in extra {
        vars.insert(k.to_string(), v.to_string());
    }
    Config::from_lookup(|k| vars.get(k).cloned()).expect("test configuration")
}

pub async fn spawn_app_with(options: Options) -> TestApp {
    let slack = SlackStandin::start().await;
    let vars: Vec<(&str, &str)> = options.vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let config = test_config(&slack, &vars);
    let ledger = options
        .ledger
        .unwrap_or_else(|| Arc::new(MemoryLedger::new()) as Arc<dyn Ledger>);
    let app = options.app.unwrap_or_else(slack_once::reference_app);
    let app = Application::with_parts(config, ledger, app);
    let server = app.bind().await.unwrap();
    let addr = server.local_addr();
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(server.run_until(async {
        let _ = rx.await;
    }));
    TestApp {
        addr,
        slack,
        http: HttpClient::default(),
        _shutdown: tx,
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Sends `body` signed now, as Slack would, with `X-Slack-Retry-Num` when `retry` is set.
    pub async fn send(&self, body: &str, retry: Option<u32>) -> Answer {
        let mut headers = signed_headers(SECRET, now_unix(), body.as_bytes());
        if let Some(n) = retry {
            headers.push(("x-slack-retry-num".into(), n.to_string()));
            headers.push(("x-slack-retry-reason".into(), "http_timeout".into()));
        }
        self.send_raw(&headers, body.as_bytes().to_vec()).await
    }

    pub async fn send_raw(&self, headers: &[(String, String)], body: Vec<u8>) -> Answer {
        self.http
            .request("POST", &self.url("/slack/events"), headers, body)
            .await
    }
}
