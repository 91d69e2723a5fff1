//! Test helpers: PostgreSQL on 127.0.0.1 (scripts/postgres-local.sh), a schema of its own per
//! test.

use super::*;

use slack_once::postgres::{Clock, Database};

pub const POSTGRES_SCRIPT: &str = "scripts/postgres-local.sh start";

/// The URL of the local PostgreSQL's `postgres` database (port from POSTGRES_LOCAL_PORT,
/// default 5433). Fails the test, naming the script, when nothing answers there: never skips
/// silently.
pub fn postgres_url() -> String {
    let port: u16 = std::env::var("POSTGRES_LOCAL_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(5433);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    if std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
        panic!(
            "PostgreSQL is not answering on 127.0.0.1:{port}: start it with `{POSTGRES_SCRIPT}` \
             (scripts/test.sh starts and stops it for you)"
        );
    }
    format!("postgres://postgres@127.0.0.1:{port}/postgres")
}

/// A schema of its own on the local PostgreSQL, migrated: its `DATABASE_URL` (the schema on
/// the connection's `search_path`, so every table the stores name is its own), and a
/// database on it whose clock is given by each call (the contract tests move time by hand).
pub async fn fresh_schema() -> (String, Database) {
    let url = fresh_schema_url().await;
    let database = Database::connect(&url, 8)
        .expect("the test URL")
        .with_clock(Clock::Given);
    database.migrate().await.expect("migrate the test schema");
    (url, database)
}

/// A new empty schema's `DATABASE_URL`, nothing migrated.
pub async fn fresh_schema_url() -> String {
    let base = postgres_url();
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let admin = Database::connect(&base, 1).expect("the local URL");
    admin
        .client()
        .await
        .expect("connect to the local PostgreSQL")
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .expect("create the test schema");
    format!("{base}?options=-c%20search_path%3D{schema}")
}

/// A PostgreSQL cluster of its own (scripts/postgres-local.sh on a free port, its data in a
/// directory of its own), for a test that stops or restarts the server; stopped (by its PID
/// file) and removed when dropped.
pub struct PrivatePostgres {
    port: u16,
    dir: std::path::PathBuf,
}

impl PrivatePostgres {
    /// Creates the cluster and starts it.
    pub fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("slack-once-pg-{}", uuid::Uuid::new_v4()));
        let server = Self { port, dir };
        server.script("start");
        server
    }

    /// Its `DATABASE_URL`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A streaming replica of it (`pg_basebackup -R`: a standby following it), started: a
    /// cluster of its own, dropped as this one is.
    pub fn replica(&self) -> PrivatePostgres {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("slack-once-pg-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let as_postgres = |program: &str, args: &[&str]| {
            let bin = postgres_bin_dir().join(program);
            let mut command = if running_as_root() {
                let mut c = std::process::Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(&bin);
                c
            } else {
                std::process::Command::new(&bin)
            };
            let status = command
                .args(args)
                .stdout(std::process::Stdio::null())
                .status()
                .unwrap_or_else(|e| panic!("run {program}: {e}"));
            assert!(status.success(), "{program} {args:?} failed");
        };
        if running_as_root() {
            let status = std::process::Command::new("chown")
                .args(["postgres:", dir.to_str().unwrap()])
                .status()
                .unwrap();
            assert!(status.success());
        }
        let data = dir.join("data");
        as_postgres(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-D",
                data.to_str().unwrap(),
                "-R",
                "-X",
                "stream",
            ],
        );
        let replica = Self { port, dir };
        replica.script("start");
        replica
    }

    /// Promotes this replica to a primary (`pg_ctl promote`, waiting until it is one).
    pub fn promote(&self) {
        let bin = postgres_bin_dir().join("pg_ctl");
        let data = self.dir.join("data");
        let mut command = if running_as_root() {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&bin);
            c
        } else {
            std::process::Command::new(&bin)
        };
        let status = command
            .args(["-D", data.to_str().unwrap(), "-w", "promote"])
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "pg_ctl promote failed");
    }

    /// Stops the server (its data stays).
    pub fn stop(&mut self) {
        self.script("stop");
    }

    /// Starts it again on the same port and data.
    pub fn restart(&mut self) {
        self.script("start");
    }

    fn script(&self, command: &str) {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let status = std::process::Command::new(root.join("scripts/postgres-local.sh"))
            .arg(command)
            .env("POSTGRES_LOCAL_PORT", self.port.to_string())
            .env("POSTGRES_LOCAL_DIR", &self.dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run scripts/postgres-local.sh");
        assert!(
            status.success(),
            "scripts/postgres-local.sh {command} failed"
        );
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        self.script("stop");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The variables of a `slack-once` process posting to `slack` with its ledger in the
/// PostgreSQL database `url`: no AWS variable at all.
pub fn postgres_bot_vars(slack: &SlackStandin, url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
        ("DATABASE_URL", url.to_string()),
    ]
}

/// The directory of Debian's PostgreSQL programs (the newest installed).
pub fn postgres_bin_dir() -> std::path::PathBuf {
    let mut found: Vec<std::path::PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL from Debian's package (scripts/postgres-local.sh install)")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("pg_ctl").exists())
        .collect();
    found.sort();
    found.pop().expect("a PostgreSQL under /usr/lib/postgresql")
}

/// Whether this process runs as root (the server then runs as `postgres`).
fn running_as_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}
