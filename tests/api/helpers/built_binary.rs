//! Test helpers: the built binary: the bot (`BotProcess`) and `slack-once standin`
//! (`StandinProcess`) as processes.

use super::*;

/// One `slack-once` process in local mode, killed (by its PID) when dropped.
pub struct BotProcess {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    pub log: Arc<Mutex<LogBook>>,
}

/// What a process printed: its last lines (all of them unless the spawn said how many to
/// keep), and counts of everything it printed.
#[derive(Default)]
pub struct LogBook {
    lines: VecDeque<String>,
    /// At most this many lines are kept (the oldest go first); 0: all.
    keep: usize,
    /// Bytes printed, newlines included.
    pub bytes: u64,
    /// Lines printed.
    pub printed: u64,
    /// Embedded-metric-format lines printed (one per delivery or message).
    pub metric_lines: u64,
    /// What was read in chunks once the process had started (lean spawns), its last 64 KiB.
    tail: Vec<u8>,
}

impl LogBook {
    fn push(&mut self, line: String) {
        self.bytes += line.len() as u64 + 1;
        self.printed += 1;
        if line.starts_with('{') && line.contains("\"_aws\"") {
            self.metric_lines += 1;
        }
        if self.keep > 0 && self.lines.len() == self.keep {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    /// Output read in chunks (not split into lines): counted, and its last 64 KiB kept.
    fn push_chunk(&mut self, chunk: &[u8]) {
        const TAIL: usize = 64 * 1024;
        self.bytes += chunk.len() as u64;
        self.printed += chunk.iter().filter(|b| **b == b'\n').count() as u64;
        // A metric line holds one "_aws" member; the tail's end is searched with the chunk, so
        // one cut in two is still found.
        let carry = self.tail.len().min(8);
        let mut seen = self.tail[self.tail.len() - carry..].to_vec();
        seen.extend_from_slice(chunk);
        self.metric_lines += seen.windows(8).filter(|w| *w == b"\"_aws\":{").count() as u64;
        self.tail.extend_from_slice(chunk);
        if self.tail.len() > TAIL {
            self.tail.drain(..self.tail.len() - TAIL);
        }
    }

    /// The lines kept (and the tail of what was read in chunks), joined.
    pub fn join(&self, separator: &str) -> String {
        let mut all: Vec<String> = self.lines.iter().cloned().collect();
        if !self.tail.is_empty() {
            all.push(String::from_utf8_lossy(&self.tail).into_owned());
        }
        all.join(separator)
    }
}

/// How [`BotProcess::spawn_program_with`] starts a process.
#[derive(Clone, Debug)]
pub struct Spawn {
    /// Lines of its log to keep (0: all).
    pub keep_lines: usize,
    /// Whether SLACK_SIGNING_SECRET is the tests' secret (else only `vars` give secrets, as
    /// `SLACK_SECRETS_ARN` does).
    pub signing_secret_env: bool,
}

impl Default for Spawn {
    fn default() -> Self {
        Self {
            keep_lines: 0,
            signing_secret_env: true,
        }
    }
}

impl BotProcess {
    /// Starts the binary with `vars` (plus the test secret and LISTEN_ADDR=127.0.0.1:0) and
    /// waits until it says where it listens.
    pub fn spawn(vars: &[(&str, String)]) -> Self {
        Self::spawn_with(&[], vars)
    }

    /// Starts `slack-once gateway` with `vars` and waits until it says where it listens.
    pub fn spawn_gateway(vars: &[(&str, String)]) -> Self {
        Self::spawn_with(&["gateway"], vars)
    }

    /// Starts `slack-once gateway worker` with `vars` and waits until it says where it listens
    /// (the bot's calls).
    pub fn spawn_gateway_worker(vars: &[(&str, String)]) -> Self {
        Self::spawn_with(&["gateway", "worker"], vars)
    }

    /// Starts `slack-once worker` with `vars` and waits until it receives.
    pub fn spawn_worker(vars: &[(&str, String)]) -> Self {
        Self::spawn_with(&["worker"], vars)
    }

    /// Starts the example bot `name` (built by `cargo test` into target/…/examples/) with `vars`;
    /// `args` may be `["worker"]`.
    pub fn spawn_example(name: &str, args: &[&str], vars: &[(&str, String)]) -> Self {
        let examples = std::env::current_exe()
            .unwrap()
            .parent()
            .and_then(|deps| deps.parent())
            .map(|dir| dir.join("examples"))
            .unwrap();
        let binary = examples.join(name);
        assert!(
            binary.exists(),
            "the example {name} is not built at {}: `cargo test` builds the examples",
            binary.display()
        );
        Self::spawn_program(&binary, args, vars)
    }

    /// Starts the previous release's binary (`args` may be `["worker"]`), which
    /// `scripts/previous-release.sh` builds and `scripts/test.sh` names in
    /// `SLACK_ONCE_PREVIOUS_BIN`.
    pub fn spawn_previous(args: &[&str], vars: &[(&str, String)]) -> Self {
        let binary = std::env::var_os("SLACK_ONCE_PREVIOUS_BIN").expect(
            "SLACK_ONCE_PREVIOUS_BIN is not set: run the tests with scripts/test.sh, which \
             builds the previous release's binary (scripts/previous-release.sh) and names it",
        );
        let binary = std::path::PathBuf::from(binary);
        assert!(binary.exists(), "no binary at {}", binary.display());
        Self::spawn_program(&binary, args, vars)
    }

    fn spawn_with(args: &[&str], vars: &[(&str, String)]) -> Self {
        Self::spawn_program(
            std::path::Path::new(env!("CARGO_BIN_EXE_slack-once")),
            args,
            vars,
        )
    }

    fn spawn_program(program: &std::path::Path, args: &[&str], vars: &[(&str, String)]) -> Self {
        Self::spawn_program_with(program, args, vars, &Spawn::default())
    }

    /// Starts `program` with `args` and `vars` as `how` says, and waits until it says where it
    /// listens (a worker: until it receives).
    pub fn spawn_program_with(
        program: &std::path::Path,
        args: &[&str],
        vars: &[(&str, String)],
        how: &Spawn,
    ) -> Self {
        Self::try_spawn_program_with(program, args, vars, how).unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`Self::spawn_program_with`]; a process that does not start is an error, with its log.
    pub fn try_spawn_program_with(
        program: &std::path::Path,
        args: &[&str],
        vars: &[(&str, String)],
        how: &Spawn,
    ) -> Result<Self, String> {
        use std::io::BufRead;
        let worker = args.first() == Some(&"worker");
        let mut command = std::process::Command::new(program);
        command
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default());
        if how.signing_secret_env {
            command.env("SLACK_SIGNING_SECRET", SECRET);
        }
        command
            .env("LISTEN_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for (k, v) in vars {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("the slack-once binary starts");
        let log = Arc::new(Mutex::new(LogBook {
            keep: how.keep_lines,
            ..LogBook::default()
        }));
        let (tx, rx) = std::sync::mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let (log, tx) = (log.clone(), tx.clone());
            let lean = how.keep_lines > 0;
            std::thread::spawn(move || {
                use std::io::Read;
                let mut reader = std::io::BufReader::new(stream);
                let mut line = String::new();
                let mut started = false;
                loop {
                    if lean && started {
                        // Started: from now on only counted, and its tail kept (a soak's
                        // processes print thousands of lines a second).
                        let mut chunk = [0u8; 64 * 1024];
                        match reader.read(&mut chunk) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => log.lock().unwrap().push_chunk(&chunk[..n]),
                        }
                        continue;
                    }
                    line.clear();
                    match reader.read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                    let line = line.trim_end_matches(['\n', '\r']).to_string();
                    if let Some(addr) = line
                        .split("addr=")
                        .nth(1)
                        .and_then(|rest| rest.split_whitespace().next())
                        .and_then(|a| a.parse::<SocketAddr>().ok())
                    {
                        let _ = tx.send(addr);
                        started = true;
                    }
                    if worker && line.contains("worker: receiving") {
                        let _ = tx.send(SocketAddr::from(([127, 0, 0, 1], 0)));
                        started = true;
                    }
                    log.lock().unwrap().push(line);
                }
            });
        }
        // A process that exits before it listens closes both streams: its readers' senders
        // go, and the wait ends then rather than after 20 s.
        drop(tx);
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(addr) => Ok(Self { child, addr, log }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!(
                    "slack-once did not start; its log:\n{}",
                    log.lock().unwrap().join("\n")
                ))
            }
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/slack/events", self.addr)
    }

    /// SIGKILL: no cleanup, no release, as when an instance dies.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, as Lambda or a process manager sends it: the process drains and exits.
    pub fn terminate(&self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits, off the runtime's threads, until the process exits: its exit code and its log.
    pub async fn exited(mut self) -> (Option<i32>, String) {
        tokio::task::spawn_blocking(move || {
            let status = self.child.wait().unwrap();
            (status.code(), self.log())
        })
        .await
        .unwrap()
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Bytes, lines and metric lines printed so far.
    pub fn printed(&self) -> (u64, u64, u64) {
        let log = self.log.lock().unwrap();
        (log.bytes, log.printed, log.metric_lines)
    }

    /// The log once `ready` holds of it, or as it is after `limit`: the process's lines are
    /// read from its pipes by other threads, so a line written just before an answer or a
    /// ledger write the test has seen may not be here yet.
    pub async fn log_when(&self, limit: Duration, ready: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let log = self.log();
            if ready(&log) || tokio::time::Instant::now() >= deadline {
                return log;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The log once it holds `deliveries` metrics lines: each delivery prints its line last,
    /// after everything else it logs, so a check for what is absent is then sound.
    pub async fn log_after(&self, deliveries: usize) -> String {
        self.log_when(Duration::from_secs(10), |log| {
            metric_lines(log).len() >= deliveries
        })
        .await
    }
}

impl Drop for BotProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `COMMAND TEXT` by U0001 in C0001 of T0001 (app A0001), as Slack posts it: answered through
/// a response URL on `slack`, with a trigger of its own (the request's identity: Slack's retry
/// of it carries the same).
pub fn command_form(slack: &SlackStandin, command: &str, text: &str) -> String {
    let trigger = slack_once::testing::Workspace::trigger_id();
    let url = format!(
        "{}/commands/T0001/C0001/{}",
        slack.origin(),
        uuid::Uuid::new_v4().simple()
    );
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("command", command),
            ("text", text),
            ("team_id", "T0001"),
            ("api_app_id", "A0001"),
            ("user_id", "U0001"),
            ("channel_id", "C0001"),
            ("trigger_id", &trigger),
            ("response_url", &url),
        ])
        .finish()
}

/// `user` clicking the button `action_id` (with `value`) on this app's message `message` in
/// Slack, as Slack posts the click (`payload=…`), its response URL on `slack`.
pub fn click_form(
    slack: &SlackStandin,
    user: &str,
    action_id: &str,
    value: &str,
    message: &serde_json::Value,
) -> String {
    let channel = message["channel"].as_str().unwrap_or("C0001");
    let ts = message["ts"].as_str().unwrap_or_default();
    let payload = serde_json::json!({
        "type": "block_actions",
        "team": {"id": "T0001"},
        "user": {"id": user, "team_id": "T0001"},
        "api_app_id": "A0001",
        "trigger_id": slack_once::testing::Workspace::trigger_id(),
        "actions": [{"type": "button", "action_id": action_id, "block_id": "b", "value": value,
            "action_ts": format!("{}.{:06}", now_unix(), rand_u32() % 1_000_000)}],
        "container": {"type": "message", "message_ts": ts, "channel_id": channel},
        "channel": {"id": channel},
        "message": message,
        "response_url": format!("{}/actions/T0001/{channel}/{}", slack.origin(),
            uuid::Uuid::new_v4().simple()),
    });
    form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish()
}

fn rand_u32() -> u32 {
    u32::from_le_bytes(uuid::Uuid::new_v4().as_bytes()[..4].try_into().unwrap())
}

/// Delivers a form (a command, an interaction) to `url`, signed now; Slack's retry of it when
/// `retry` is set.
pub async fn deliver_form(http: &HttpClient, url: &str, body: &str, retry: Option<u32>) -> Answer {
    let mut headers = signed_headers(SECRET, now_unix(), body.as_bytes());
    headers[0].1 = "application/x-www-form-urlencoded".into();
    if let Some(n) = retry {
        headers.push(("x-slack-retry-num".into(), n.to_string()));
        headers.push(("x-slack-retry-reason".into(), "http_timeout".into()));
    }
    http.request("POST", url, &headers, body.as_bytes().to_vec())
        .await
}

/// Sends `body` signed now to `url`, with `X-Slack-Retry-Num` when `retry` is set.
/// Delivers `body` to `url` signed now, as Slack would.
pub async fn deliver(http: &HttpClient, url: &str, body: &str, retry: Option<u32>) -> Answer {
    let mut headers = signed_headers(SECRET, now_unix(), body.as_bytes());
    if let Some(n) = retry {
        headers.push(("x-slack-retry-num".into(), n.to_string()));
        headers.push(("x-slack-retry-reason".into(), "http_timeout".into()));
    }
    http.request("POST", url, &headers, body.as_bytes().to_vec())
        .await
}

/// `slack-once standin` (the built binary's stand-in for Slack) on a free port, as the
/// guide's walk-throughs run it, for the app [`slack_once::testing::TestBot`] is (`T0TEST`,
/// `A0TEST`, `B0TEST`, `U0BOT`); killed (by its handle) when dropped.
pub struct StandinProcess {
    child: std::process::Child,
    /// Its Web API base (`http://127.0.0.1:PORT/api`).
    pub base_url: String,
}

impl StandinProcess {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// Started with more options (`--workflow-token-seconds 2`).
    pub async fn start_with(options: &[&str]) -> Self {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"))
            .args(["standin", &port.to_string()])
            .args([
                "--team", "T0TEST", "--app-id", "A0TEST", "--bot-id", "B0TEST",
            ])
            .args(["--bot-user", "U0BOT"])
            .args(options)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the built binary runs its stand-in");
        // Owned from here: dropped (killed and waited for) whatever happens next.
        let standin = Self {
            child,
            base_url: format!("http://127.0.0.1:{port}/api"),
        };
        let http = HttpClient::default();
        for _ in 0..200 {
            let url = format!("http://127.0.0.1:{port}/_standin/state");
            if http.try_request("GET", &url, &[], Vec::new()).await.is_ok() {
                return standin;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("slack-once standin did not start");
    }

    /// Its origin (`http://127.0.0.1:PORT`), where response URLs and `/_standin/` are.
    pub fn origin(&self) -> String {
        self.base_url.trim_end_matches("/api").to_string()
    }

    /// A script endpoint: `POST /_standin/<path>` with a JSON body.
    pub async fn post(&self, path: &str, body: serde_json::Value) -> serde_json::Value {
        let headers = [("content-type".to_string(), "application/json".to_string())];
        HttpClient::default()
            .request(
                "POST",
                &format!("{}/_standin/{path}", self.origin()),
                &headers,
                body.to_string(),
            )
            .await
            .json()
    }

    /// `GET /_standin/state`.
    pub async fn state(&self) -> serde_json::Value {
        HttpClient::default()
            .request(
                "GET",
                &format!("{}/_standin/state", self.origin()),
                &[],
                Vec::new(),
            )
            .await
            .json()
    }
}

impl Drop for StandinProcess {
    fn drop(&mut self) {
        // Only the process this test started, by its handle.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a run of the built binary to its end printed, and how it ended.
pub struct Ran {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the built binary with `args` and only `vars` (and PATH) to its end, within 60 s (killed
/// past them: a server that should have refused to start fails the test, it does not hang it).
pub fn run_binary(args: &[&str], vars: &[(&str, String)]) -> Ran {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("LISTEN_ADDR", "127.0.0.1:0")
        .env("SLACK_SIGNING_SECRET", SECRET)
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the built binary");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    Ran {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
