//! Configuration from the environment: one `Config::from_env`, errors that name the variable.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// A secret string whose `Debug` and `Display` never print its value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself: call only where it is used (HMAC key, Authorization header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// Slack's signing secrets: several during a rotation, any one of them verifies a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SigningSecrets(Vec<Secret>);

impl SigningSecrets {
    /// The secrets in order, the first one the primary. An error when the list is empty or
    /// one of them is.
    pub fn new(secrets: Vec<Secret>) -> Result<Self, &'static str> {
        if secrets.is_empty() {
            return Err("at least one signing secret is needed");
        }
        if secrets.iter().any(|s| s.expose().is_empty()) {
            return Err("a signing secret is empty");
        }
        Ok(Self(secrets))
    }

    /// Parses a comma-separated list, as `SLACK_SIGNING_SECRET` holds during a rotation.
    pub fn parse(list: &str) -> Result<Self, &'static str> {
        Self::new(list.split(',').map(|s| Secret::new(s.trim())).collect())
    }

    /// Every secret, the primary first.
    pub fn iter(&self) -> impl Iterator<Item = &Secret> {
        self.0.iter()
    }

    /// The secret new signatures are made with (the first one listed).
    pub fn primary(&self) -> &Secret {
        &self.0[0]
    }
}

/// Where the process runs: decided by `AWS_LAMBDA_RUNTIME_API`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// On AWS Lambda (`AWS_LAMBDA_RUNTIME_API` set).
    Lambda,
    /// A local HTTP server (`AWS_LAMBDA_RUNTIME_API` unset).
    Local,
}

/// What the process does: decided by `SLACK_ONCE_ROLE` (or the `worker` subcommand).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Receives Slack's requests: answers each event itself, or in deferred mode
    /// (`WORK_QUEUE_URL` set) puts it on the work queue and acknowledges.
    Ingress,
    /// Takes events from the work queue and answers them.
    Worker,
}

/// Slack's "Delayed Events" option retries hourly for 24 hours: remember events a little longer.
pub const MIN_TTL: Duration = Duration::from_secs(25 * 3600);
/// The claim's lease when `DEDUP_LEASE_SECONDS` is unset.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// The lease where a Socket Mode ingress answers events itself: Slack redelivers an
/// unacknowledged Events API envelope within seconds (every 3 s or so, three times), so a
/// claim whose process died must lapse before the last redelivery comes, or the event is lost.
pub const DEFAULT_SOCKET_LEASE: Duration = Duration::from_secs(10);
/// Longer than Lambda's 15-minute maximum timeout makes no sense for a lease.
pub const MAX_LEASE: Duration = Duration::from_secs(900);
/// Answering inside Slack's request, a lease must end before Slack's one-minute retry (with
/// room for clock skew): a longer one lets a crashed claim swallow that retry, and the
/// five-minute one with it if the claimant dies again.
pub const MAX_SYNC_LEASE: Duration = Duration::from_secs(50);
/// Local mode's connections served at once when `MAX_CONNECTIONS` is unset.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// `WORK_QUEUE_MAX_RECEIVES` when unset, and the `maxReceiveCount` `create-queue` gives a queue
/// (the SAM template has its own, `MaxReceiveCount`, and sets the variable): room for the
/// retries of passing failures and for the receives spent on the long polls of local workers
/// killed meanwhile (each such poll may be handed a message once).
pub const DEFAULT_MAX_RECEIVES: u32 = 10;
/// The local worker's long poll when `WORK_QUEUE_POLL_SECONDS` is unset: short, because SQS
/// keeps a killed worker's poll open this long and may hand it a message.
pub const DEFAULT_WORKER_POLL: Duration = Duration::from_secs(5);
/// The local worker's messages in flight at once when `WORKER_CONCURRENCY` is unset.
pub const DEFAULT_WORKER_CONCURRENCY: usize = 8;
/// A signature that matches no cached signing secret reads the secret again at most this often
/// (a request that comes sooner waits for the next read allowed, within its budget).
pub const DEFAULT_SECRETS_REFRESH: Duration = Duration::from_secs(1);
/// Slack's Web API base when `SLACK_API_URL` is unset.
pub const DEFAULT_SLACK_API_URL: &str = "https://slack.com/api";
/// The local server's address when `LISTEN_ADDR` is unset.
pub const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:3000";

/// Bolt's default: a token is refreshed once fewer than 120 minutes of it remain.
pub const DEFAULT_TOKEN_REFRESH: Duration = Duration::from_secs(120 * 60);
/// Slack's access tokens live 12 hours: a refresh window past 11 would refresh at every use.
pub const MAX_TOKEN_REFRESH_MINUTES: u64 = 660;
/// A distributed app outside the Marketplace: 1 history read a minute per workspace.
pub const DEFAULT_HISTORY_READS_PER_MINUTE: u32 = 1;

/// Multi-workspace mode (`SLACK_CLIENT_ID` and its secret set): an OAuth install per
/// workspace, each with its own bot token, kept in the installation store.
#[derive(Clone, Debug)]
pub struct OAuthConfig {
    /// The Slack app's client ID, from `SLACK_CLIENT_ID`.
    pub client_id: String,
    /// `None` when the Secrets Manager secret holds it (`client_secret`).
    pub client_secret: Option<Secret>,
    /// Bot scopes asked for at install (`SLACK_SCOPES`, comma-separated).
    pub scopes: Vec<String>,
    /// The installing user's scopes (`SLACK_USER_SCOPES`); none by default.
    pub user_scopes: Vec<String>,
    /// Sent to Slack at authorize and at the exchange (`SLACK_REDIRECT_URI`); without it, the
    /// app's configured redirect URL applies.
    pub redirect_uri: Option<String>,
    /// A token with fewer than this left is refreshed (`SLACK_TOKEN_REFRESH_MINUTES`).
    pub refresh_before: Duration,
    /// Look-ups' history reads per workspace a minute, shared by every instance through the
    /// table (`SLACK_HISTORY_READS_PER_MINUTE`; 0: not paced).
    pub history_reads_per_minute: u32,
    /// The KMS key the installations' tokens are sealed with in the table
    /// (`SLACK_TOKEN_KEY_ID`: a key id, an ARN or `alias/…`); `None`: kept as they are.
    pub token_key_id: Option<String>,
    /// The keys the installations' tokens are sealed with where there is no KMS
    /// (`SLACK_TOKEN_KEYS`, or the file `SLACK_TOKEN_KEYS_FILE` names): the first seals, every
    /// one opens. Never with `token_key_id`.
    pub token_keys: Option<crate::token_keys::TokenKeys>,
    /// The Slack app's id (`SLACK_APP_ID`, `A…`), where it is given: which unscoped
    /// installations are this app's, for the app's own work outside a request before
    /// any request has named the app (requests and installs name it otherwise).
    pub app_id: Option<String>,
}

/// The process's configuration, read once at start by [`Config::from_env`].
#[derive(Clone, Debug)]
pub struct Config {
    /// Where the process runs, from `AWS_LAMBDA_RUNTIME_API`.
    pub mode: Mode,
    /// What the process does, from `SLACK_ONCE_ROLE` (`ingress`, the default, or `worker`; the
    /// `worker` argument sets it too).
    pub role: Role,
    /// Required by an ingress; a worker verifies nothing (the queue is private).
    pub signing_secrets: Option<SigningSecrets>,
    /// `None` only in local mode (replies are then logged instead of posted), or for a
    /// deferred-mode ingress, which posts nothing.
    pub bot_token: Option<Secret>,
    /// Web API base without a trailing slash; method names are appended.
    pub slack_api_url: String,
    /// `None` only where no ledger is needed (a deferred-mode ingress) or in local mode (the
    /// in-memory ledger is used).
    pub dedup_table: Option<String>,
    /// How long the ledger remembers an event (`DEDUP_TTL_SECONDS`; at least [`MIN_TTL`],
    /// the default).
    pub ttl: Duration,
    /// The claim's lease where the runtime gives no deadline (local mode; the local worker,
    /// which also hides each message this long); on Lambda the invocation deadline is used.
    pub lease: Duration,
    /// Local mode: the address the server binds (`LISTEN_ADDR`; port 0 picks a free port).
    pub listen_addr: SocketAddr,
    /// Local mode: connections served at once.
    pub max_connections: usize,
    /// The deployed version answering (Lambda sets `AWS_LAMBDA_FUNCTION_VERSION`), written into
    /// each reply's metadata, so it shows which version answered during a gradual deploy.
    pub function_version: String,
    /// Deferred mode's work queue: the ingress sends to it, the local worker receives from it,
    /// and a worker on Lambda hands back on it what it released for a passing failure.
    pub work_queue: Option<WorkQueueConfig>,
    /// PostgreSQL as the store of everything a DynamoDB table holds otherwise (`DATABASE_URL`):
    /// the ledger, the app's state, the installations; and the work queue with
    /// `WORK_QUEUE_NAME`.
    pub database: Option<DatabaseConfig>,
    /// The queue's `maxReceiveCount`: a receive with this count is a message's last.
    pub max_receives: u32,
    /// The local worker: messages in flight at once.
    pub worker_concurrency: usize,
    /// The local worker: how long each long poll waits for a message (1–20 s).
    pub worker_poll: Duration,
    /// Secrets Manager's secret (name or ARN) holding the Slack secrets: read at run time
    /// instead of `SLACK_SIGNING_SECRET` / `SLACK_BOT_TOKEN`.
    pub secrets_arn: Option<String>,
    /// The secret is read again at most once per this long.
    pub secrets_refresh: Duration,
    /// Whether each invocation prints its metrics line (`METRICS=emf`, the default; `off`).
    pub metrics: bool,
    /// Multi-workspace mode: `None` with a single bot token (`SLACK_BOT_TOKEN`).
    pub oauth: Option<OAuthConfig>,
    /// Socket Mode (`SLACK_APP_TOKEN`): requests come over WebSockets this process opens,
    /// instead of (or beside) `POST /slack/events`.
    pub socket_mode: Option<SocketModeConfig>,
}

/// Socket Mode's settings: the app-level token and how many connections a process holds.
#[derive(Clone, Debug)]
pub struct SocketModeConfig {
    /// The app-level token (`xapp-…`, scope `connections:write`): `SLACK_APP_TOKEN`.
    pub app_token: Secret,
    /// Connections this process holds at once (`SLACK_SOCKET_CONNECTIONS`, 2 by default, at
    /// most 10: Slack's limit for the app, every process's together).
    pub connections: usize,
    /// The most connections all of the app's processes hold together, a rolling update's
    /// included (`SLACK_SOCKET_FLEET_CONNECTIONS`): a `hello` counting more at Slack means
    /// ghost registrations, which swallow envelopes, and is logged as a warning and counted.
    pub fleet_connections: Option<usize>,
}

/// Connections a Socket Mode process holds by default: one can be recycled while the other
/// serves.
pub const DEFAULT_SOCKET_CONNECTIONS: usize = 2;

impl Config {
    /// Whether this ingress answers events itself, inside Slack's request.
    pub fn answers_synchronously(&self) -> bool {
        self.role == Role::Ingress && self.work_queue.is_none()
    }

    /// Whether the ledger is one every process of the deployment shares (a DynamoDB table or
    /// a PostgreSQL database), not this process's memory.
    pub fn shared_store(&self) -> bool {
        self.dedup_table.is_some() || self.database.is_some()
    }
}

/// Deferred mode's work queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkQueueConfig {
    /// A standard SQS queue (`WORK_QUEUE_URL`), with its dead-letter queue.
    Sqs {
        /// The queue's URL.
        url: String,
    },
    /// A queue in the PostgreSQL database (`WORK_QUEUE_NAME`, with `DATABASE_URL`), with its
    /// dead letters beside it.
    Postgres {
        /// The queue's name: several apps (and releases) share one database, each its queue.
        name: String,
    },
}

impl WorkQueueConfig {
    /// Where the queue is, for the logs.
    pub fn describe(&self) -> String {
        match self {
            WorkQueueConfig::Sqs { url } => url.clone(),
            WorkQueueConfig::Postgres { name } => format!("PostgreSQL queue {name:?}"),
        }
    }
}

/// PostgreSQL's settings (`DATABASE_URL`).
#[derive(Clone, Debug)]
pub struct DatabaseConfig {
    /// `postgres://user:password@host:port/database?sslmode=require`: redacted in `Debug`,
    /// since it may hold a password.
    pub url: Secret,
    /// Connections this process keeps open at most (`DATABASE_POOL_SIZE`).
    pub pool_size: usize,
    /// Whether the process applies the migrations its release needs as it starts
    /// (`DATABASE_MIGRATE`: `on`, the default, or `off`: then it only checks the schema, and
    /// `slack-once create-table` migrates).
    pub migrate: bool,
}

/// A configuration the process cannot start with; the message names the variable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A variable this configuration needs is unset.
    #[error("{var} is not set: {hint}")]
    Missing {
        /// The variable's name.
        var: &'static str,
        /// How to set it.
        hint: &'static str,
    },
    /// A variable's value is not accepted, or two variables contradict each other.
    #[error("{var} is invalid: {reason}")]
    Invalid {
        /// The variable's name (both names, comma-separated, when two contradict each other).
        var: &'static str,
        /// Why the value is not accepted.
        reason: String,
    },
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads configuration through `lookup`, so tests need not touch the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let mode = if get("AWS_LAMBDA_RUNTIME_API").is_some() {
            Mode::Lambda
        } else {
            Mode::Local
        };
        let role = role_of(&get)?;

        let database = database_of(&get)?;
        let work_queue = work_queue_of(&get, role, mode, database.is_some())?;
        // Where the ledger and Slack are used: a worker, or an ingress answering itself.
        let answers = role == Role::Worker || work_queue.is_none();

        let secrets_arn = get("SLACK_SECRETS_ARN").map(|v| v.trim().to_string());
        let secrets_refresh = secrets_refresh_of(&get)?;
        // From Secrets Manager, the values are checked when the secret is read.
        let from_manager = secrets_arn.is_some();

        let socket_mode = socket_mode_of(&get, role, mode)?;
        // Over Socket Mode the connection authenticates the requests: no signature to check.
        let signing_secrets =
            signing_secrets_of(&get, role, from_manager || socket_mode.is_some())?;

        let bot_token = get("SLACK_BOT_TOKEN").map(|t| Secret::new(t.trim()));
        let oauth = oauth_of(&get, from_manager, bot_token.is_some())?;
        if bot_token.is_none()
            && mode == Mode::Lambda
            && answers
            && !from_manager
            && oauth.is_none()
        {
            return Err(ConfigError::Missing {
                var: "SLACK_BOT_TOKEN",
                hint: "on Lambda the bot must post its replies: set the bot token (xoxb-…) \
                       from your Slack app's OAuth & Permissions page",
            });
        }

        let slack_api_url = slack_api_url_of(&get)?;

        let dedup_table = match database {
            Some(_) if get("DEDUP_TABLE").is_some() => {
                return Err(ConfigError::Invalid {
                    var: "DATABASE_URL, DEDUP_TABLE",
                    reason: "name one store: DEDUP_TABLE for DynamoDB, DATABASE_URL for \
                             PostgreSQL"
                        .into(),
                });
            }
            Some(_) => None,
            None => dedup_table_of(&get, role, mode, answers, oauth.is_some())?,
        };

        let ttl = ttl_of(&get)?;

        let lease = lease_of(&get, role, work_queue.is_some(), socket_mode.is_some())?;

        let max_connections = parse_count(
            "MAX_CONNECTIONS",
            get("MAX_CONNECTIONS"),
            DEFAULT_MAX_CONNECTIONS,
            65_536,
        )?;
        let max_receives = parse_count(
            "WORK_QUEUE_MAX_RECEIVES",
            get("WORK_QUEUE_MAX_RECEIVES"),
            DEFAULT_MAX_RECEIVES as usize,
            1_000,
        )? as u32;
        let worker_concurrency = parse_count(
            "WORKER_CONCURRENCY",
            get("WORKER_CONCURRENCY"),
            DEFAULT_WORKER_CONCURRENCY,
            1_000,
        )?;
        let worker_poll = Duration::from_secs(parse_count(
            "WORK_QUEUE_POLL_SECONDS",
            get("WORK_QUEUE_POLL_SECONDS"),
            DEFAULT_WORKER_POLL.as_secs() as usize,
            crate::queue::sqs::MAX_WAIT.as_secs() as usize,
        )? as u64);

        let metrics = metrics_of(&get)?;

        let listen_addr = listen_addr_of(&get)?;

        let function_version = get("AWS_LAMBDA_FUNCTION_VERSION")
            .map(|v| v.trim().chars().take(64).collect())
            .unwrap_or_else(|| "local".to_string());

        Ok(Self {
            mode,
            role,
            signing_secrets,
            bot_token,
            slack_api_url,
            socket_mode,
            dedup_table,
            ttl,
            lease,
            listen_addr,
            max_connections,
            function_version,
            work_queue,
            database,
            max_receives,
            worker_concurrency,
            worker_poll,
            secrets_arn,
            secrets_refresh,
            metrics,
            oauth,
        })
    }
}

/// A comma-separated list of scopes (empty when unset).
pub fn scopes_of(var: &'static str, value: Option<&str>) -> Result<Vec<String>, ConfigError> {
    let scopes: Vec<String> = value
        .unwrap_or("")
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let valid = |s: &String| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'.' | b'_' | b'-'))
    };
    match scopes.iter().find(|s| !valid(s)) {
        Some(bad) => Err(ConfigError::Invalid {
            var,
            reason: format!("{bad:?} is not a scope name"),
        }),
        None => Ok(scopes),
    }
}

/// A redirect URI: https, or http on this machine.
pub fn redirect_of(var: &'static str, value: &str) -> Result<String, ConfigError> {
    let uri = value.trim().to_string();
    let parsed = uri.parse::<http::Uri>().ok();
    let ok = match parsed.as_ref().and_then(|u| u.scheme_str().zip(u.host())) {
        Some(("https", _)) => true,
        Some(("http", host)) => is_loopback(host),
        _ => false,
    };
    let path_ok = parsed
        .as_ref()
        .is_some_and(|u| u.path().ends_with("/slack/oauth_redirect"));
    if !ok || !path_ok {
        return Err(ConfigError::Invalid {
            var,
            reason: "must be an https:// URL (http:// only on this machine), the one your Slack \
                     app's OAuth & Permissions page lists, ending in /slack/oauth_redirect (the \
                     path this app serves)"
                .into(),
        });
    }
    Ok(uri)
}

/// `SLACK_ONCE_ROLE`: an ingress unless it says worker.
fn role_of(get: &impl Fn(&str) -> Option<String>) -> Result<Role, ConfigError> {
    let role = match get("SLACK_ONCE_ROLE").as_deref().map(str::trim) {
        None | Some("ingress") => Role::Ingress,
        Some("worker") => Role::Worker,
        Some(other) => {
            return Err(ConfigError::Invalid {
                var: "SLACK_ONCE_ROLE",
                reason: format!("{other:?} is neither ingress nor worker"),
            });
        }
    };
    Ok(role)
}

/// `WORK_QUEUE_URL`: deferred mode's standard SQS queue; `WORK_QUEUE_NAME`, its queue in
/// PostgreSQL (with `DATABASE_URL`). A local worker needs one.
fn work_queue_of(
    get: &impl Fn(&str) -> Option<String>,
    role: Role,
    mode: Mode,
    database: bool,
) -> Result<Option<WorkQueueConfig>, ConfigError> {
    if let Some(name) = get("WORK_QUEUE_NAME").map(|n| n.trim().to_string()) {
        return postgres_queue_of(get, name, mode, database).map(Some);
    }
    let work_queue_url = get("WORK_QUEUE_URL").map(|u| u.trim().to_string());
    if let Some(url) = &work_queue_url {
        let valid = (url.starts_with("https://") || url.starts_with("http://"))
            && url.parse::<http::Uri>().is_ok();
        if !valid {
            return Err(ConfigError::Invalid {
                var: "WORK_QUEUE_URL",
                reason: "must be an SQS queue URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME, \
                         or http:// for a local server)"
                    .into(),
            });
        }
        if url.trim_end_matches('/').ends_with(".fifo") {
            return Err(ConfigError::Invalid {
                var: "WORK_QUEUE_URL",
                reason: "is a FIFO queue: deferred mode needs a standard queue (a FIFO \
                         queue's message groups would hold every event of a group behind one \
                         that is still being answered, and its de-duplication is the \
                         ledger's job here); create a standard queue with its dead-letter \
                         queue (the SAM template does)"
                    .into(),
            });
        }
    } else if role == Role::Worker && mode == Mode::Local {
        return Err(ConfigError::Missing {
            var: "WORK_QUEUE_URL",
            hint: "the local worker long-polls this SQS queue: set its URL \
                   (`slack-once create-queue NAME` prints one for a local server), or, with \
                   DATABASE_URL, name its queue in PostgreSQL with WORK_QUEUE_NAME",
        });
    }
    Ok(work_queue_url.map(|url| WorkQueueConfig::Sqs { url }))
}

/// `WORK_QUEUE_NAME`: deferred mode's queue in the PostgreSQL database `DATABASE_URL` names.
fn postgres_queue_of(
    get: &impl Fn(&str) -> Option<String>,
    name: String,
    mode: Mode,
    database: bool,
) -> Result<WorkQueueConfig, ConfigError> {
    if get("WORK_QUEUE_URL").is_some() {
        return Err(ConfigError::Invalid {
            var: "WORK_QUEUE_NAME, WORK_QUEUE_URL",
            reason: "name one work queue: WORK_QUEUE_URL for SQS, WORK_QUEUE_NAME for a queue \
                     in PostgreSQL"
                .into(),
        });
    }
    if !database {
        return Err(ConfigError::Missing {
            var: "DATABASE_URL",
            hint: "WORK_QUEUE_NAME names a queue in PostgreSQL: set DATABASE_URL to the \
                   database (postgres://user:password@host:5432/database)",
        });
    }
    if mode == Mode::Lambda {
        return Err(ConfigError::Invalid {
            var: "WORK_QUEUE_NAME",
            reason: "a queue in PostgreSQL is for processes that poll it (containers, \
                     servers); on Lambda, deferred mode's queue is SQS (WORK_QUEUE_URL)"
                .into(),
        });
    }
    let valid = (1..=80).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
    if !valid {
        return Err(ConfigError::Invalid {
            var: "WORK_QUEUE_NAME",
            reason: "a queue's name is 1-80 characters of a-z, A-Z, 0-9, _ and -".into(),
        });
    }
    Ok(WorkQueueConfig::Postgres { name })
}

/// `DATABASE_URL`: PostgreSQL as the store; `DATABASE_POOL_SIZE`, `DATABASE_MIGRATE`.
fn database_of(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Option<DatabaseConfig>, ConfigError> {
    let Some(url) = get("DATABASE_URL").map(|u| u.trim().to_string()) else {
        return Ok(None);
    };
    // Never echoed: the URL may hold a password.
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://"))
        || url.parse::<tokio_postgres::Config>().is_err()
    {
        return Err(ConfigError::Invalid {
            var: "DATABASE_URL",
            reason: "must be a PostgreSQL URL: postgres://user:password@host:5432/database \
                     (?sslmode=require for TLS)"
                .into(),
        });
    }
    let pool_size = parse_count(
        "DATABASE_POOL_SIZE",
        get("DATABASE_POOL_SIZE"),
        crate::postgres::DEFAULT_POOL_SIZE,
        1_000,
    )?;
    let migrate = match get("DATABASE_MIGRATE").as_deref().map(str::trim) {
        None | Some("on") => true,
        Some("off") => false,
        Some(_) => {
            return Err(ConfigError::Invalid {
                var: "DATABASE_MIGRATE",
                reason: "must be on (the process migrates the schema as it starts) or off \
                         (`slack-once create-table` migrates it)"
                    .into(),
            });
        }
    };
    Ok(Some(DatabaseConfig {
        url: Secret::new(url),
        pool_size,
        migrate,
    }))
}

/// `SLACK_SECRETS_REFRESH_SECONDS`: how often the Secrets Manager secret is read again.
fn secrets_refresh_of(get: &impl Fn(&str) -> Option<String>) -> Result<Duration, ConfigError> {
    let secrets_refresh = match get("SLACK_SECRETS_REFRESH_SECONDS") {
        None => DEFAULT_SECRETS_REFRESH,
        Some(v) => {
            let secs = parse_seconds("SLACK_SECRETS_REFRESH_SECONDS", &v)?;
            if !(1..=86_400).contains(&secs) {
                return Err(ConfigError::Invalid {
                    var: "SLACK_SECRETS_REFRESH_SECONDS",
                    reason: "must be between 1 and 86400".into(),
                });
            }
            Duration::from_secs(secs)
        }
    };
    Ok(secrets_refresh)
}

/// `SLACK_APP_TOKEN` and `SLACK_SOCKET_CONNECTIONS`: Socket Mode, for a local ingress (a
/// long-running process: Lambda cannot hold a WebSocket between invocations).
fn socket_mode_of(
    get: &impl Fn(&str) -> Option<String>,
    role: Role,
    mode: Mode,
) -> Result<Option<SocketModeConfig>, ConfigError> {
    let Some(token) = get("SLACK_APP_TOKEN") else {
        return Ok(None);
    };
    let token = token.trim();
    if !token.starts_with("xapp-") {
        return Err(ConfigError::Invalid {
            var: "SLACK_APP_TOKEN",
            reason: "an app-level token starts with xapp- (Basic Information, App-Level \
                     Tokens, with the scope connections:write)"
                .into(),
        });
    }
    if mode == Mode::Lambda {
        return Err(ConfigError::Invalid {
            var: "SLACK_APP_TOKEN",
            reason: "Socket Mode needs a process that keeps its connections open; on Lambda \
                     Slack sends requests to the function URL (unset SLACK_APP_TOKEN)"
                .into(),
        });
    }
    if role == Role::Worker {
        return Ok(None);
    }
    let connections = parse_count(
        "SLACK_SOCKET_CONNECTIONS",
        get("SLACK_SOCKET_CONNECTIONS"),
        DEFAULT_SOCKET_CONNECTIONS,
        10,
    )?;
    let fleet_connections = match get("SLACK_SOCKET_FLEET_CONNECTIONS") {
        None => None,
        Some(v) => Some(parse_count(
            "SLACK_SOCKET_FLEET_CONNECTIONS",
            Some(v),
            0,
            10,
        )?),
    };
    Ok(Some(SocketModeConfig {
        app_token: Secret::new(token),
        connections,
        fleet_connections,
    }))
}

/// `SLACK_SIGNING_SECRET`: an ingress needs it, unless the secret in Secrets Manager holds it.
fn signing_secrets_of(
    get: &impl Fn(&str) -> Option<String>,
    role: Role,
    from_manager: bool,
) -> Result<Option<SigningSecrets>, ConfigError> {
    let signing_secrets = match (get("SLACK_SIGNING_SECRET"), role) {
        (None, Role::Ingress) if from_manager => None,
        (None, Role::Ingress) => {
            return Err(ConfigError::Missing {
                var: "SLACK_SIGNING_SECRET",
                hint: "copy it from your Slack app's Basic Information page \
                       (several may be given, comma-separated, during a rotation), \
                       or name a Secrets Manager secret holding it in SLACK_SECRETS_ARN",
            });
        }
        (None, Role::Worker) => None,
        (Some(list), _) => {
            Some(
                SigningSecrets::parse(&list).map_err(|reason| ConfigError::Invalid {
                    var: "SLACK_SIGNING_SECRET",
                    reason: reason.to_string(),
                })?,
            )
        }
    };
    Ok(signing_secrets)
}

/// `SLACK_API_URL`: https, or http only to this machine (a local stand-in).
fn slack_api_url_of(get: &impl Fn(&str) -> Option<String>) -> Result<String, ConfigError> {
    let slack_api_url = get("SLACK_API_URL")
        .map(|u| u.trim().trim_end_matches('/').to_string())
        .unwrap_or_else(|| DEFAULT_SLACK_API_URL.to_string());
    if !(slack_api_url.starts_with("https://") || slack_api_url.starts_with("http://")) {
        return Err(ConfigError::Invalid {
            var: "SLACK_API_URL",
            reason: "must start with https:// (or http:// for a local stand-in)".into(),
        });
    }
    let Ok(api_uri) = slack_api_url.parse::<http::Uri>() else {
        return Err(ConfigError::Invalid {
            var: "SLACK_API_URL",
            reason: "is not a valid URL".into(),
        });
    };
    if api_uri.scheme_str() == Some("http") && !is_loopback(api_uri.host().unwrap_or("")) {
        return Err(ConfigError::Invalid {
            var: "SLACK_API_URL",
            reason: "uses http:// for a host that is not this machine: the bot token would \
                     travel in clear text. Use https://, or http:// only for a local \
                     stand-in on 127.0.0.1, ::1 or localhost"
                .into(),
        });
    }
    Ok(slack_api_url)
}

/// `DEDUP_TABLE`: a DynamoDB table's name; needed wherever instances share the ledger.
fn dedup_table_of(
    get: &impl Fn(&str) -> Option<String>,
    role: Role,
    mode: Mode,
    answers: bool,
    oauth: bool,
) -> Result<Option<String>, ConfigError> {
    let dedup_table = get("DEDUP_TABLE").map(|t| t.trim().to_string());
    if let Some(table) = &dedup_table {
        let valid = (3..=255).contains(&table.len())
            && table
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid {
            return Err(ConfigError::Invalid {
                var: "DEDUP_TABLE",
                reason: "a DynamoDB table name is 3-255 characters of a-z, A-Z, 0-9, _ - .".into(),
            });
        }
    } else if role == Role::Worker {
        return Err(ConfigError::Missing {
            var: "DEDUP_TABLE",
            hint: "a worker shares the ledger with every other worker: name the DynamoDB \
                   table (the SAM template sets it)",
        });
    } else if mode == Mode::Lambda && answers {
        return Err(ConfigError::Missing {
            var: "DEDUP_TABLE",
            hint: "on Lambda the ledger must be shared by every instance: \
                   name the DynamoDB table (the SAM template sets it)",
        });
    } else if mode == Mode::Lambda && oauth {
        return Err(ConfigError::Missing {
            var: "DEDUP_TABLE",
            hint: "with SLACK_CLIENT_ID set, the installations (each workspace's bot token) \
                   live in the ledger's table, which every instance shares, a deferred \
                   ingress too: name the DynamoDB table (the SAM template sets it)",
        });
    }
    Ok(dedup_table)
}

/// `DEDUP_TTL_SECONDS`: at least 25 h, as Slack's Delayed Events retry for 24 h.
fn ttl_of(get: &impl Fn(&str) -> Option<String>) -> Result<Duration, ConfigError> {
    let ttl = match get("DEDUP_TTL_SECONDS") {
        None => MIN_TTL,
        Some(v) => {
            let ttl = Duration::from_secs(parse_seconds("DEDUP_TTL_SECONDS", &v)?);
            if ttl < MIN_TTL {
                return Err(ConfigError::Invalid {
                    var: "DEDUP_TTL_SECONDS",
                    reason: format!(
                        "must be at least {} (25 h): Slack's Delayed Events retry for 24 h",
                        MIN_TTL.as_secs()
                    ),
                });
            }
            ttl
        }
    };
    Ok(ttl)
}

/// `DEDUP_LEASE_SECONDS`: at most [`MAX_SYNC_LEASE`] where events are answered inside Slack's
/// request.
fn lease_of(
    get: &impl Fn(&str) -> Option<String>,
    role: Role,
    deferred: bool,
    socket_mode: bool,
) -> Result<Duration, ConfigError> {
    let lease = match get("DEDUP_LEASE_SECONDS") {
        None if socket_mode && role == Role::Ingress && !deferred => DEFAULT_SOCKET_LEASE,
        None => DEFAULT_LEASE,
        Some(v) => {
            let lease = Duration::from_secs(parse_seconds("DEDUP_LEASE_SECONDS", &v)?);
            if lease.is_zero() || lease > MAX_LEASE {
                return Err(ConfigError::Invalid {
                    var: "DEDUP_LEASE_SECONDS",
                    reason: format!("must be between 1 and {}", MAX_LEASE.as_secs()),
                });
            }
            if role == Role::Ingress && !deferred && lease > MAX_SYNC_LEASE {
                return Err(ConfigError::Invalid {
                    var: "DEDUP_LEASE_SECONDS",
                    reason: format!(
                        "must be at most {} when events are answered inside Slack's request: \
                         a lease that outlives Slack's one-minute retry lets a crashed claim \
                         swallow the later retries (a worker of deferred mode may take up \
                         to {})",
                        MAX_SYNC_LEASE.as_secs(),
                        MAX_LEASE.as_secs()
                    ),
                });
            }
            lease
        }
    };
    Ok(lease)
}

/// `METRICS`: `emf` (the default) or `off`.
fn metrics_of(get: &impl Fn(&str) -> Option<String>) -> Result<bool, ConfigError> {
    let metrics = match get("METRICS").as_deref().map(str::trim) {
        None | Some("emf") => true,
        Some("off") => false,
        Some(other) => {
            return Err(ConfigError::Invalid {
                var: "METRICS",
                reason: format!("{other:?} is neither emf nor off"),
            });
        }
    };
    Ok(metrics)
}

/// `LISTEN_ADDR`: local mode's address and port.
fn listen_addr_of(get: &impl Fn(&str) -> Option<String>) -> Result<SocketAddr, ConfigError> {
    let listen_addr = get("LISTEN_ADDR")
        .unwrap_or_else(|| DEFAULT_LISTEN_ADDR.to_string())
        .trim()
        .parse()
        .map_err(|_| ConfigError::Invalid {
            var: "LISTEN_ADDR",
            reason: "must be an IP address and port, such as 127.0.0.1:3000".into(),
        })?;
    Ok(listen_addr)
}

/// The OAuth settings: `None` without `SLACK_CLIENT_ID`. Settings that contradict each other
/// stop the start, naming the variables.
fn oauth_of(
    get: &impl Fn(&str) -> Option<String>,
    from_manager: bool,
    has_bot_token: bool,
) -> Result<Option<OAuthConfig>, ConfigError> {
    const DEPENDENT: &[&str] = &[
        "SLACK_CLIENT_SECRET",
        "SLACK_SCOPES",
        "SLACK_USER_SCOPES",
        "SLACK_REDIRECT_URI",
        "SLACK_TOKEN_REFRESH_MINUTES",
        "SLACK_HISTORY_READS_PER_MINUTE",
        "SLACK_TOKEN_KEY_ID",
        "SLACK_TOKEN_KEYS",
        "SLACK_TOKEN_KEYS_FILE",
        "SLACK_APP_ID",
    ];
    let Some(client_id) = get("SLACK_CLIENT_ID").map(|v| v.trim().to_string()) else {
        if let Some(var) = DEPENDENT.iter().find(|v| get(v).is_some()) {
            return Err(ConfigError::Invalid {
                var,
                reason: format!(
                    "is set but SLACK_CLIENT_ID is not: it is a multi-workspace setting. Set \
                     SLACK_CLIENT_ID, or unset {var}"
                ),
            });
        }
        return Ok(None);
    };
    if has_bot_token {
        return Err(ConfigError::Invalid {
            var: "SLACK_BOT_TOKEN, SLACK_CLIENT_ID",
            reason: "both set (they contradict each other): SLACK_CLIENT_ID installs the app in \
                     many workspaces, each with its own token, and SLACK_BOT_TOKEN is one \
                     workspace's. Unset one of them (moving over: `slack-once import-token`)"
                .into(),
        });
    }
    let client_secret = get("SLACK_CLIENT_SECRET").map(|v| Secret::new(v.trim()));
    if client_secret.is_none() && !from_manager {
        return Err(ConfigError::Missing {
            var: "SLACK_CLIENT_SECRET",
            hint: "SLACK_CLIENT_ID is set: copy the client secret from your Slack app's Basic \
                   Information page, or keep it as client_secret in the secret \
                   SLACK_SECRETS_ARN names",
        });
    }
    let scopes = scopes_of("SLACK_SCOPES", get("SLACK_SCOPES").as_deref())?;
    if scopes.is_empty() && !from_manager {
        return Err(ConfigError::Missing {
            var: "SLACK_SCOPES",
            hint: "SLACK_CLIENT_ID is set: name the bot scopes an install asks for, \
                   comma-separated (the manifest's, such as app_mentions:read,chat:write,\
                   channels:history,commands), or keep them as scopes in the secret \
                   SLACK_SECRETS_ARN names",
        });
    }
    let user_scopes = scopes_of("SLACK_USER_SCOPES", get("SLACK_USER_SCOPES").as_deref())?;
    let redirect_uri = get("SLACK_REDIRECT_URI")
        .map(|v| redirect_of("SLACK_REDIRECT_URI", &v))
        .transpose()?;
    let refresh_before = refresh_before_of(get)?;
    let history_reads_per_minute = history_reads_per_minute_of(get)?;
    let token_key_id = token_key_id_of(get)?;
    let token_keys = token_keys_of(get, token_key_id.is_some())?;
    let app_id = app_id_of(get)?;
    Ok(Some(OAuthConfig {
        client_id,
        client_secret,
        scopes,
        user_scopes,
        redirect_uri,
        refresh_before,
        history_reads_per_minute,
        token_key_id,
        token_keys,
        app_id,
    }))
}

/// `SLACK_TOKEN_REFRESH_MINUTES`: how long before a token expires it is refreshed.
fn refresh_before_of(get: &impl Fn(&str) -> Option<String>) -> Result<Duration, ConfigError> {
    let refresh_before = match get("SLACK_TOKEN_REFRESH_MINUTES") {
        None => DEFAULT_TOKEN_REFRESH,
        Some(v) => match v.trim().parse::<u64>() {
            Ok(m) if (1..=MAX_TOKEN_REFRESH_MINUTES).contains(&m) => Duration::from_secs(m * 60),
            _ => {
                return Err(ConfigError::Invalid {
                    var: "SLACK_TOKEN_REFRESH_MINUTES",
                    reason: format!(
                        "must be a whole number of minutes from 1 to {MAX_TOKEN_REFRESH_MINUTES} \
                         (Slack's tokens live 12 hours)"
                    ),
                });
            }
        },
    };
    Ok(refresh_before)
}

/// `SLACK_HISTORY_READS_PER_MINUTE`: the pace of history reads per workspace (0: none).
fn history_reads_per_minute_of(get: &impl Fn(&str) -> Option<String>) -> Result<u32, ConfigError> {
    let history_reads_per_minute = match get("SLACK_HISTORY_READS_PER_MINUTE") {
        None => DEFAULT_HISTORY_READS_PER_MINUTE,
        Some(v) => {
            v.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n <= 1000)
                .ok_or(ConfigError::Invalid {
                    var: "SLACK_HISTORY_READS_PER_MINUTE",
                    reason: "must be a whole number from 0 (not paced) to 1000".into(),
                })?
        }
    };
    Ok(history_reads_per_minute)
}

/// `SLACK_TOKEN_KEY_ID`: the KMS key that seals the installations' tokens.
pub(crate) fn token_key_id_of(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, ConfigError> {
    let token_key_id = get("SLACK_TOKEN_KEY_ID")
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty());
    if let Some(key) = &token_key_id
        && key.chars().any(char::is_whitespace)
    {
        return Err(ConfigError::Invalid {
            var: "SLACK_TOKEN_KEY_ID",
            reason: "must name one KMS key: its id, its ARN, or alias/NAME".into(),
        });
    }
    Ok(token_key_id)
}

/// `SLACK_TOKEN_KEYS` (the keys themselves) or `SLACK_TOKEN_KEYS_FILE` (a file holding them,
/// such as a mounted Kubernetes Secret): the keys that seal the installations' tokens without
/// KMS ([`crate::token_keys::TokenKeys`]). One of them at most, and neither beside
/// `SLACK_TOKEN_KEY_ID` (`kms`: it is set). A refusal names the variable and the entry, never a
/// key.
pub(crate) fn token_keys_of(
    get: &impl Fn(&str) -> Option<String>,
    kms: bool,
) -> Result<Option<crate::token_keys::TokenKeys>, ConfigError> {
    let given = |var: &str| get(var).filter(|v| !v.trim().is_empty());
    let (var, text) = match (given("SLACK_TOKEN_KEYS"), given("SLACK_TOKEN_KEYS_FILE")) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            return Err(ConfigError::Invalid {
                var: "SLACK_TOKEN_KEYS, SLACK_TOKEN_KEYS_FILE",
                reason: "both set: give the keys in one of them (the file, or the value)".into(),
            });
        }
        (Some(keys), None) => ("SLACK_TOKEN_KEYS", keys),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path.trim()).map_err(|e| ConfigError::Invalid {
                var: "SLACK_TOKEN_KEYS_FILE",
                reason: format!("the file {} cannot be read: {e}", path.trim()),
            })?;
            ("SLACK_TOKEN_KEYS_FILE", text)
        }
    };
    if kms {
        return Err(ConfigError::Invalid {
            var: if var == "SLACK_TOKEN_KEYS" {
                "SLACK_TOKEN_KEY_ID, SLACK_TOKEN_KEYS"
            } else {
                "SLACK_TOKEN_KEY_ID, SLACK_TOKEN_KEYS_FILE"
            },
            reason: "both set (they contradict each other): SLACK_TOKEN_KEY_ID seals tokens \
                     with KMS, the other with keys you give. Unset one of them"
                .into(),
        });
    }
    crate::token_keys::TokenKeys::parse(&text)
        .map(Some)
        .map_err(|e| ConfigError::Invalid {
            var,
            reason: e.to_string(),
        })
}

/// `SLACK_APP_ID`: the app's id, as Basic Information shows it.
fn app_id_of(get: &impl Fn(&str) -> Option<String>) -> Result<Option<String>, ConfigError> {
    let app_id = get("SLACK_APP_ID")
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty());
    if let Some(app) = &app_id
        && !(app.starts_with('A') && app.chars().all(|c| c.is_ascii_alphanumeric()))
    {
        return Err(ConfigError::Invalid {
            var: "SLACK_APP_ID",
            reason: "must be the app's id as Basic Information shows it (A… , letters and \
                     digits)"
                .into(),
        });
    }
    Ok(app_id)
}

/// Whether `host` (from a URL) is this machine: `localhost`, 127.0.0.0/8 or ::1.
pub fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A whole number from 1 to `max`, or `default` when unset.
fn parse_count(
    var: &'static str,
    value: Option<String>,
    default: usize,
    max: usize,
) -> Result<usize, ConfigError> {
    match value {
        None => Ok(default),
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(ConfigError::Invalid {
                var,
                reason: format!("must be a whole number from 1 to {max}"),
            }),
        },
    }
}

fn parse_seconds(var: &'static str, value: &str) -> Result<u64, ConfigError> {
    value.trim().parse().map_err(|_| ConfigError::Invalid {
        var,
        reason: format!("{value:?} is not a whole number of seconds"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    /// The variable a `Missing` error names.
    fn missing(err: &ConfigError) -> Option<&'static str> {
        match err {
            ConfigError::Missing { var, .. } => Some(var),
            ConfigError::Invalid { .. } => None,
        }
    }

    #[test]
    fn token_keys_come_from_the_value_or_a_file_never_beside_kms_and_are_never_printed() {
        const KEY: &str = "b=AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";
        const SHORT: &str = "a=AQEBAQEBAQEBAQEBAQEBAQ==";
        let base = [
            ("SLACK_SIGNING_SECRET", "s"),
            ("SLACK_CLIENT_ID", "111.222"),
            ("SLACK_CLIENT_SECRET", "cs"),
            ("SLACK_SCOPES", "chat:write"),
        ];
        let with = |extra: &[(&str, &str)]| {
            let mut vars: Vec<(&str, &str)> = base.to_vec();
            vars.extend_from_slice(extra);
            config(&vars)
        };
        let keys = with(&[("SLACK_TOKEN_KEYS", KEY)]).unwrap().oauth.unwrap();
        assert_eq!(keys.token_keys.unwrap().ids(), ["b"]);
        let file = std::env::temp_dir().join(format!("token-keys-{}", uuid::Uuid::new_v4()));
        std::fs::write(&file, format!("{KEY}\n")).unwrap();
        let path = file.to_str().unwrap();
        let from_file = with(&[("SLACK_TOKEN_KEYS_FILE", path)]).unwrap();
        assert_eq!(
            from_file.oauth.unwrap().token_keys.unwrap().current_id(),
            "b"
        );
        let refused = [
            (
                vec![("SLACK_TOKEN_KEYS", KEY), ("SLACK_TOKEN_KEYS_FILE", path)],
                "SLACK_TOKEN_KEYS, SLACK_TOKEN_KEYS_FILE",
            ),
            (
                vec![("SLACK_TOKEN_KEYS", KEY), ("SLACK_TOKEN_KEY_ID", "alias/x")],
                "SLACK_TOKEN_KEY_ID, SLACK_TOKEN_KEYS",
            ),
            (
                vec![
                    ("SLACK_TOKEN_KEYS_FILE", path),
                    ("SLACK_TOKEN_KEY_ID", "alias/x"),
                ],
                "SLACK_TOKEN_KEY_ID, SLACK_TOKEN_KEYS_FILE",
            ),
            (
                vec![("SLACK_TOKEN_KEYS", SHORT)],
                "SLACK_TOKEN_KEYS is invalid: key `a` is 16",
            ),
            (
                vec![("SLACK_TOKEN_KEYS_FILE", "/nonexistent/token-keys")],
                "SLACK_TOKEN_KEYS_FILE is invalid: the file /nonexistent/token-keys",
            ),
        ];
        for (extra, said) in refused {
            let err = with(&extra).unwrap_err().to_string();
            assert!(err.contains(said), "{err}");
            assert!(
                !err.contains(&KEY[2..]) && !err.contains(&SHORT[2..]),
                "{err}"
            );
        }
        std::fs::remove_file(&file).unwrap();
        let alone = config(&[("SLACK_SIGNING_SECRET", "s"), ("SLACK_TOKEN_KEYS", KEY)]);
        assert!(
            alone
                .unwrap_err()
                .to_string()
                .contains("SLACK_TOKEN_KEYS is invalid: is set but SLACK_CLIENT_ID")
        );
    }

    #[test]
    fn oauth_settings_that_contradict_each_other_name_the_variables() {
        let base = [
            ("SLACK_SIGNING_SECRET", "s"),
            ("SLACK_CLIENT_ID", "111.222"),
            ("SLACK_CLIENT_SECRET", "cs"),
            ("SLACK_SCOPES", "chat:write, commands"),
        ];
        let c = config(&base).unwrap();
        let oauth = c.oauth.unwrap();
        assert_eq!(oauth.scopes, ["chat:write", "commands"]);
        assert_eq!(oauth.refresh_before, DEFAULT_TOKEN_REFRESH);
        assert_eq!(oauth.history_reads_per_minute, 1);
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut vars: Vec<(&str, &str)> = base.to_vec();
            for (k, v) in extra {
                vars.retain(|(name, _)| name != k);
                vars.push((k, v));
            }
            config(&vars).unwrap_err()
        };
        let err = with(&[("SLACK_BOT_TOKEN", "xoxb-1")]);
        assert!(
            err.to_string().contains("SLACK_BOT_TOKEN, SLACK_CLIENT_ID"),
            "{err}"
        );
        assert_eq!(
            missing(&with(&[("SLACK_SCOPES", "")])),
            Some("SLACK_SCOPES")
        );
        assert_eq!(
            missing(&with(&[("SLACK_CLIENT_SECRET", "")])),
            Some("SLACK_CLIENT_SECRET")
        );
        let err = with(&[("SLACK_CLIENT_ID", "")]);
        assert!(err.to_string().starts_with("SLACK_CLIENT_SECRET"), "{err}");
        assert!(err.to_string().contains("SLACK_CLIENT_ID"), "{err}");
        let err = with(&[(
            "SLACK_REDIRECT_URI",
            "http://example.com/slack/oauth_redirect",
        )]);
        assert!(err.to_string().starts_with("SLACK_REDIRECT_URI"), "{err}");
        let err = with(&[("SLACK_TOKEN_REFRESH_MINUTES", "700")]);
        assert!(
            err.to_string().starts_with("SLACK_TOKEN_REFRESH_MINUTES"),
            "{err}"
        );
        let err = with(&[("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001")]);
        assert_eq!(missing(&err), Some("DEDUP_TABLE"), "{err}");
        // The client secret may come from the secret instead.
        let mut vars: Vec<(&str, &str)> = base.to_vec();
        vars.retain(|(k, _)| *k != "SLACK_CLIENT_SECRET");
        vars.push(("SLACK_SECRETS_ARN", "slack"));
        assert!(
            config(&vars)
                .unwrap()
                .oauth
                .unwrap()
                .client_secret
                .is_none()
        );
        // On Lambda with a table, no bot token is needed.
        let mut vars: Vec<(&str, &str)> = base.to_vec();
        vars.push(("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"));
        vars.push(("DEDUP_TABLE", "slack-once"));
        assert!(config(&vars).is_ok());
    }

    #[test]
    fn socket_mode_needs_the_app_token_and_no_signing_secret_and_leases_10_s() {
        let c = config(&[("SLACK_APP_TOKEN", "xapp-1-A1-1-x")]).unwrap();
        let socket = c.socket_mode.expect("Socket Mode");
        assert_eq!(socket.connections, DEFAULT_SOCKET_CONNECTIONS);
        assert!(c.signing_secrets.is_none());
        assert_eq!(c.lease, DEFAULT_SOCKET_LEASE);
        let c = config(&[
            ("SLACK_APP_TOKEN", "xapp-1-A1-1-x"),
            ("DEDUP_LEASE_SECONDS", "20"),
            ("SLACK_SOCKET_CONNECTIONS", "3"),
        ])
        .unwrap();
        assert_eq!(c.lease, Duration::from_secs(20));
        assert_eq!(c.socket_mode.unwrap().connections, 3);
        for (var, value) in [
            ("SLACK_APP_TOKEN", "xoxb-a-bot-token"),
            ("SLACK_SOCKET_CONNECTIONS", "11"),
        ] {
            let mut vars = vec![("SLACK_APP_TOKEN", "xapp-1-A1-1-x")];
            vars.retain(|(k, _)| *k != var);
            vars.push((var, value));
            let error = config(&vars).unwrap_err().to_string();
            assert!(error.contains(var), "{error}");
            assert!(
                !error.contains(value) || var != "SLACK_APP_TOKEN",
                "{error}"
            );
        }
        let lambda = config(&[
            ("SLACK_APP_TOKEN", "xapp-1-A1-1-x"),
            ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
            ("SLACK_SIGNING_SECRET", "s"),
            ("SLACK_BOT_TOKEN", "xoxb-1"),
            ("DEDUP_TABLE", "t"),
        ])
        .unwrap_err()
        .to_string();
        assert!(lambda.contains("SLACK_APP_TOKEN"), "{lambda}");
    }

    #[test]
    fn database_url_selects_postgresql_for_the_ledger_and_its_queue() {
        const URL: &str = "postgres://bot:pw-never-printed@127.0.0.1:5433/slack";
        let lambda = [
            ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
            ("SLACK_SIGNING_SECRET", "s"),
            ("SLACK_BOT_TOKEN", "xoxb-1"),
        ];
        // On Lambda, the database is the shared ledger DEDUP_TABLE otherwise is.
        let c = config(&[lambda.as_slice(), &[("DATABASE_URL", URL)]].concat()).unwrap();
        assert!(c.dedup_table.is_none() && c.shared_store());
        let database = c.database.unwrap();
        assert!(database.migrate);
        assert_eq!(database.pool_size, crate::postgres::DEFAULT_POOL_SIZE);
        assert!(!format!("{database:?}").contains("pw-never-printed"));
        // A local worker on the database's queue needs no AWS variable.
        let worker = config(&[
            ("SLACK_ONCE_ROLE", "worker"),
            ("DATABASE_URL", URL),
            ("WORK_QUEUE_NAME", "work"),
            ("DATABASE_POOL_SIZE", "3"),
            ("DATABASE_MIGRATE", "off"),
        ])
        .unwrap();
        assert_eq!(
            worker.work_queue,
            Some(WorkQueueConfig::Postgres {
                name: "work".into()
            })
        );
        let database = worker.database.unwrap();
        assert_eq!((database.pool_size, database.migrate), (3, false));
        // What is refused, naming the variables and never the password.
        for (vars, named) in [
            (
                vec![("DATABASE_URL", "mysql://bot:pw-never-printed@h/d")],
                "DATABASE_URL",
            ),
            (
                vec![("DATABASE_URL", URL), ("DEDUP_TABLE", "t")],
                "DATABASE_URL, DEDUP_TABLE",
            ),
            (vec![("WORK_QUEUE_NAME", "work")], "DATABASE_URL"),
            (
                vec![
                    ("DATABASE_URL", URL),
                    ("WORK_QUEUE_NAME", "work"),
                    ("WORK_QUEUE_URL", "http://127.0.0.1:9324/1/work"),
                ],
                "WORK_QUEUE_NAME, WORK_QUEUE_URL",
            ),
            (
                vec![("DATABASE_URL", URL), ("WORK_QUEUE_NAME", "no spaces")],
                "WORK_QUEUE_NAME",
            ),
            (
                vec![("DATABASE_URL", URL), ("DATABASE_MIGRATE", "yes")],
                "DATABASE_MIGRATE",
            ),
            (
                vec![("DATABASE_URL", URL), ("DATABASE_POOL_SIZE", "0")],
                "DATABASE_POOL_SIZE",
            ),
        ] {
            let vars = [&[("SLACK_SIGNING_SECRET", "s")][..], &vars].concat();
            let error = config(&vars).unwrap_err();
            let text = error.to_string();
            assert!(text.contains(named), "{named}: {text}");
            assert!(!text.contains("pw-never-printed"), "{text}");
        }
        let queue_on_lambda = config(
            &[
                lambda.as_slice(),
                &[("DATABASE_URL", URL), ("WORK_QUEUE_NAME", "work")],
            ]
            .concat(),
        )
        .unwrap_err();
        assert!(queue_on_lambda.to_string().contains("WORK_QUEUE_NAME"));
    }

    #[test]
    fn local_mode_needs_only_the_signing_secret() {
        let c = config(&[("SLACK_SIGNING_SECRET", "s3cret")]).unwrap();
        assert_eq!(c.mode, Mode::Local);
        assert!(c.bot_token.is_none());
        assert!(c.dedup_table.is_none());
        assert_eq!(c.slack_api_url, "https://slack.com/api");
        assert_eq!(c.ttl, Duration::from_secs(90_000));
        assert_eq!(c.lease, Duration::from_secs(30));
        assert_eq!(c.listen_addr, "127.0.0.1:3000".parse().unwrap());
    }

    #[test]
    fn plain_http_to_slack_is_refused_unless_the_host_is_this_machine() {
        for url in [
            "http://127.0.0.1:4000/api",
            "http://localhost:4000/api",
            "http://[::1]:4000/api",
            "https://slack.com/api",
            "https://proxy.example.com/slack",
        ] {
            let c = config(&[("SLACK_SIGNING_SECRET", "s"), ("SLACK_API_URL", url)]);
            assert!(c.is_ok(), "{url}: {c:?}");
        }
        for url in [
            "http://slack.com/api",
            "http://10.0.0.5/api",
            "http://127.0.0.1.evil.com/api",
        ] {
            let err = config(&[("SLACK_SIGNING_SECRET", "s"), ("SLACK_API_URL", url)]).unwrap_err();
            assert!(
                matches!(&err, ConfigError::Invalid { var: "SLACK_API_URL", reason } if reason.contains("clear text")),
                "{url}: {err}"
            );
        }
    }

    #[test]
    fn a_fifo_work_queue_is_refused_at_start() {
        let err = config(&[
            ("SLACK_SIGNING_SECRET", "s"),
            (
                "WORK_QUEUE_URL",
                "https://sqs.us-east-1.amazonaws.com/1/work.fifo",
            ),
        ])
        .unwrap_err();
        assert!(
            matches!(&err, ConfigError::Invalid { var: "WORK_QUEUE_URL", reason } if reason.contains("FIFO")),
            "{err}"
        );
    }

    #[test]
    fn a_missing_signing_secret_names_the_variable() {
        let err = config(&[]).unwrap_err();
        assert_eq!(missing(&err), Some("SLACK_SIGNING_SECRET"));
        assert!(
            err.to_string()
                .starts_with("SLACK_SIGNING_SECRET is not set")
        );
    }

    #[test]
    fn lambda_mode_requires_token_and_table() {
        let err = config(&[
            ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
            ("SLACK_SIGNING_SECRET", "s"),
        ])
        .unwrap_err();
        assert_eq!(missing(&err), Some("SLACK_BOT_TOKEN"));
        let err = config(&[
            ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
            ("SLACK_SIGNING_SECRET", "s"),
            ("SLACK_BOT_TOKEN", "xoxb-1"),
        ])
        .unwrap_err();
        assert_eq!(missing(&err), Some("DEDUP_TABLE"));
        let c = config(&[
            ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
            ("SLACK_SIGNING_SECRET", "s"),
            ("SLACK_BOT_TOKEN", "xoxb-1"),
            ("DEDUP_TABLE", "slack-once-ledger"),
        ])
        .unwrap();
        assert_eq!(c.mode, Mode::Lambda);
    }

    #[test]
    fn several_signing_secrets_are_accepted_during_a_rotation() {
        let c = config(&[("SLACK_SIGNING_SECRET", "old, new")]).unwrap();
        let all: Vec<_> = c
            .signing_secrets
            .unwrap()
            .iter()
            .map(|s| s.expose().to_string())
            .collect();
        assert_eq!(all, ["old", "new"]);
        let err = config(&[("SLACK_SIGNING_SECRET", "old,,new")]).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Invalid {
                var: "SLACK_SIGNING_SECRET",
                ..
            }
        ));
    }

    #[test]
    fn invalid_values_are_refused_with_the_variable_named() {
        for (var, value) in [
            ("DEDUP_TTL_SECONDS", "3600"),
            ("DEDUP_TTL_SECONDS", "a day"),
            ("DEDUP_LEASE_SECONDS", "0"),
            ("DEDUP_LEASE_SECONDS", "901"),
            ("DEDUP_LEASE_SECONDS", "51"),
            ("MAX_CONNECTIONS", "0"),
            ("SLACK_ONCE_ROLE", "both"),
            ("WORK_QUEUE_URL", "sqs/queue"),
            ("WORK_QUEUE_MAX_RECEIVES", "0"),
            ("WORKER_CONCURRENCY", "many"),
            ("WORK_QUEUE_POLL_SECONDS", "0"),
            ("WORK_QUEUE_POLL_SECONDS", "21"),
            ("LISTEN_ADDR", "localhost"),
            ("SLACK_API_URL", "slack.com/api"),
            ("DEDUP_TABLE", "a b"),
        ] {
            let err = config(&[("SLACK_SIGNING_SECRET", "s"), (var, value)]).unwrap_err();
            match err {
                ConfigError::Invalid { var: named, .. } => assert_eq!(named, var),
                other => panic!("{var}={value}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_worker_needs_the_table_and_locally_the_queue_but_no_signing_secret() {
        let err = config(&[("SLACK_ONCE_ROLE", "worker")]).unwrap_err();
        assert_eq!(missing(&err), Some("WORK_QUEUE_URL"));
        let err = config(&[
            ("SLACK_ONCE_ROLE", "worker"),
            ("WORK_QUEUE_URL", "http://127.0.0.1:9324/123456789012/work"),
        ])
        .unwrap_err();
        assert_eq!(missing(&err), Some("DEDUP_TABLE"));
        let c = config(&[
            ("SLACK_ONCE_ROLE", "worker"),
            ("WORK_QUEUE_URL", "http://127.0.0.1:9324/123456789012/work"),
            ("DEDUP_TABLE", "ledger"),
            ("DEDUP_LEASE_SECONDS", "600"),
        ])
        .unwrap();
        assert_eq!(c.role, Role::Worker);
        assert!(c.signing_secrets.is_none());
        assert_eq!(
            c.lease,
            Duration::from_secs(600),
            "a worker may lease up to 900 s"
        );
        assert_eq!(
            (c.max_receives, c.worker_concurrency, c.worker_poll),
            (10, 8, Duration::from_secs(5))
        );
        // On Lambda the event source mapping feeds it: no queue URL needed, but a token.
        let err = config(&[
            ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
            ("SLACK_ONCE_ROLE", "worker"),
            ("DEDUP_TABLE", "ledger"),
        ])
        .unwrap_err();
        assert_eq!(missing(&err), Some("SLACK_BOT_TOKEN"));
    }

    #[test]
    fn a_deferred_ingress_on_lambda_needs_neither_table_nor_token() {
        let c = config(&[
            ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
            ("SLACK_SIGNING_SECRET", "s"),
            (
                "WORK_QUEUE_URL",
                "https://sqs.us-east-1.amazonaws.com/123456789012/work",
            ),
        ])
        .unwrap();
        assert!(!c.answers_synchronously());
        assert!(c.dedup_table.is_none() && c.bot_token.is_none());
    }

    #[test]
    fn the_api_url_loses_its_trailing_slash() {
        let c = config(&[
            ("SLACK_SIGNING_SECRET", "s"),
            ("SLACK_API_URL", "http://127.0.0.1:9/api/"),
        ])
        .unwrap();
        assert_eq!(c.slack_api_url, "http://127.0.0.1:9/api");
    }

    #[test]
    fn secrets_never_appear_in_debug_output() {
        let c = config(&[
            ("SLACK_SIGNING_SECRET", "signing-value-1,signing-value-2"),
            ("SLACK_BOT_TOKEN", "xoxb-token-value"),
        ])
        .unwrap();
        let printed = format!("{c:?}");
        assert!(!printed.contains("signing-value"), "{printed}");
        assert!(!printed.contains("xoxb-token-value"), "{printed}");
        assert!(printed.contains("redacted"));
    }
}
