//! Running an [`App`]: the role (ingress, or the worker of deferred mode) comes from
//! `SLACK_ONCE_ROLE` or the `worker` argument; the runtime is Lambda when
//! `AWS_LAMBDA_RUNTIME_API` is set, otherwise local (a server on `LISTEN_ADDR`, or a worker
//! long-polling `WORK_QUEUE_URL`). `main` of a bot is one line: `slack_once::run(app())`.

use std::process::ExitCode;
use std::sync::Arc;
use tracing_subscriber::filter::{LevelFilter, Targets};

use crate::Application;
use crate::app::App;
use crate::config::{Config, Mode, Role, WorkQueueConfig};
use crate::gateway::{Gateway, GatewayConfig};
use crate::queue::SqsQueue;
use crate::queue::sqs::CallBudget;

/// slack-once's version (the crate's), in the startup line and `--version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

const USAGE: &str = "\
usage: BOT           serve Slack's requests (Lambda when AWS_LAMBDA_RUNTIME_API is set, else on LISTEN_ADDR);
                     SLACK_ONCE_ROLE=worker runs the worker instead
       BOT worker    the worker of deferred mode: receive from WORK_QUEUE_URL (SQS) or
                     WORK_QUEUE_NAME (PostgreSQL), answer each event
       BOT --version";

/// The usage text of a bot's binary (named as it was run): serving, `worker`, and the tools.
pub fn usage() -> String {
    let program = crate::tools::program();
    format!("{USAGE}\n{}", crate::tools::usage_lines())
        .replace("BOT          ", &format!("{program:<13}"))
        .replace("BOT ", &format!("{program} "))
}

/// Runs `app` as the process's arguments and environment say, until SIGTERM (locally) or for
/// the life of the Lambda environment. Exit code 2 on a configuration error, named.
///
/// The same arguments work for every bot built on slack-once: none (serve), `worker`,
/// `--version`, `--help`, and the tools `sign`, `create-table`, `create-queue`,
/// `import-token`, `redrive` and `sweep` (see [`crate::tools`]).
///
/// ```no_run
/// use slack_once::app::{App, Ctx, HandlerResult, MessageEvent};
///
/// async fn hello(ctx: Ctx, _message: MessageEvent) -> HandlerResult {
///     ctx.reply("Hello!").await?;
///     Ok(())
/// }
///
/// fn main() -> std::process::ExitCode {
///     slack_once::run(App::new().message("hello", hello))
/// }
/// ```
pub fn run(app: App) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(code) = crate::tools::dispatch(&args) {
        return code;
    }
    if args.first().map(String::as_str) == Some(crate::tools::manifest::SPEC.name) {
        return match crate::tools::manifest::SPEC.parse(&args[1..]) {
            Ok(parsed) => crate::tools::manifest::run(&app, &parsed),
            Err(code) => code,
        };
    }
    match role_of(&args, &usage()) {
        Ok(role) => block_on(serve(app, role)),
        Err(code) => code,
    }
}

/// The role the arguments name (none: serve; `worker`), or the exit code when they ask for
/// the usage or the version, or are unknown (on Lambda, a container image's command, the
/// handler's name, is served as ever).
fn role_of(args: &[String], usage: &str) -> Result<Option<Role>, ExitCode> {
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] => Ok(None),
        ["worker"] => Ok(Some(Role::Worker)),
        ["-h" | "--help" | "help"] => {
            say!("{usage}");
            Err(ExitCode::SUCCESS)
        }
        ["-V" | "--version"] => {
            say!("slack-once {VERSION}");
            Err(ExitCode::SUCCESS)
        }
        _ if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some() => Ok(None),
        other => {
            eprintln!("unknown arguments {other:?}\n{usage}");
            Err(ExitCode::from(2))
        }
    }
}

/// Runs `serving` to its exit code on a runtime of one thread (see [`one_thread`]) or of every
/// core.
fn block_on(serving: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    let one_thread = one_thread(
        std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some(),
        std::env::var("AWS_LAMBDA_MAX_CONCURRENCY").ok().as_deref(),
    );
    let mut builder = if one_thread {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    builder
        .enable_all()
        .build()
        .expect("the tokio runtime starts")
        .block_on(serving)
}

/// Whether the process runs on one thread: on Lambda with one invocation at a time (no
/// `AWS_LAMBDA_MAX_CONCURRENCY` above 1), where an event's work is a few requests in sequence
/// and a second thread only adds wake-ups across threads (measured in docs/benchmarks.md: the warm
/// path under the Runtime API about 15 % faster). Several invocations at once (Lambda Managed
/// Instances, several vCPUs) and the local server use every core.
fn one_thread(on_lambda: bool, max_concurrency: Option<&str>) -> bool {
    on_lambda
        && max_concurrency
            .and_then(|n| n.trim().parse::<u32>().ok())
            .is_none_or(|n| n <= 1)
}

/// What is logged: `RUST_LOG`'s directives when it has any, as `tracing_subscriber`'s `Targets`
/// (`warn`, `info,slack_once::run=warn`, …), and, where it gives no default level, Lambda's
/// (`AWS_LAMBDA_LOG_LEVEL`, which Lambda's log-level setting sets) or `info`; without
/// `RUST_LOG`, Lambda's level or `info`: as `EnvFilter` did, with Lambda's level as the default
/// directive. A `RUST_LOG` that does not parse is reported on stderr and ignored.
fn log_filter(lambda_level: Option<&str>, rust_log: Option<&str>) -> Targets {
    let default = lambda_level
        .and_then(|l| l.trim().parse::<LevelFilter>().ok())
        .unwrap_or(LevelFilter::INFO);
    let Some(spec) = rust_log.map(str::trim).filter(|spec| !spec.is_empty()) else {
        return Targets::new().with_default(default);
    };
    match spec.parse::<Targets>() {
        Ok(targets) if targets.default_level().is_some() => targets,
        Ok(targets) if targets.iter().next().is_some() => targets.with_default(default),
        Ok(_) => Targets::new().with_default(default),
        Err(error) => {
            eprintln!(
                "RUST_LOG={spec:?} is not a filter slack-once reads (levels, and target=level \
                 pairs: {error}): ignored"
            );
            Targets::new().with_default(default)
        }
    }
}

/// On Lambda, its log format: JSON lines when `AWS_LAMBDA_LOG_FORMAT=JSON`, else text, without
/// time stamps (Lambda adds its own); locally, text with time stamps, coloured on a terminal.
fn init_logging(on_lambda: bool) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let lambda_level = std::env::var("AWS_LAMBDA_LOG_LEVEL").ok();
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = log_filter(
        lambda_level.as_deref().filter(|_| on_lambda),
        rust_log.as_deref(),
    );
    let registry = tracing_subscriber::registry().with(filter);
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    if on_lambda && json {
        let layer = tracing_subscriber::fmt::layer()
            .json()
            .with_target(false)
            .without_time();
        let _ = registry.with(layer).try_init();
    } else if on_lambda {
        let layer = tracing_subscriber::fmt::layer()
            .with_target(false)
            .without_time()
            .with_ansi(false);
        let _ = registry.with(layer).try_init();
    } else {
        let layer = tracing_subscriber::fmt::layer()
            .with_target(false)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()));
        let _ = registry.with(layer).try_init();
    }
}

/// Serves `app` in `role` (or `SLACK_ONCE_ROLE`'s).
pub async fn serve(app: App, role: Option<Role>) -> ExitCode {
    init_logging(std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some());
    let mut config = match configured(role) {
        Ok(config) => config,
        Err(code) => return code,
    };
    learn_max_receives(&mut config).await;
    let (mode, role) = (config.mode, config.role);
    let app = match built(config, app).await {
        Ok(app) => app,
        Err(code) => return code,
    };
    match (role, mode) {
        // Several invocations at once when Lambda says so (`AWS_LAMBDA_MAX_CONCURRENCY`, set
        // on Lambda Managed Instances); one at a time otherwise. Nothing per process is per
        // invocation: each has its own deadline, claim owner and metrics line.
        (Role::Ingress, Mode::Lambda) => ingress_on_lambda(app).await,
        (Role::Ingress, Mode::Local) => ingress_locally(app).await,
        (Role::Worker, Mode::Lambda) => worker_on_lambda(app).await,
        (Role::Worker, Mode::Local) => worker_locally(app).await,
    }
}

/// The configuration from the environment (`role` overriding `SLACK_ONCE_ROLE`), or the
/// exit code of a configuration error, logged.
fn configured(role: Option<Role>) -> Result<Config, ExitCode> {
    let config = Config::from_lookup(|name| match (name, role) {
        ("SLACK_ONCE_ROLE", Some(Role::Worker)) => Some("worker".to_string()),
        _ => std::env::var(name).ok(),
    })
    .map_err(|error| {
        tracing::error!("configuration error: {error}");
        ExitCode::from(2)
    })?;
    tracing::info!(
        version = VERSION,
        function_version = %config.function_version,
        role = ?config.role,
        runtime = ?config.mode,
        "slack-once starting"
    );
    Ok(config)
}

/// A local worker told no `WORK_QUEUE_MAX_RECEIVES` reads its queue's own `maxReceiveCount`
/// (a queue made before the default changed has another): its last-chance receive is then the
/// queue's, whatever made the queue. Where the queue cannot say, the default stands, logged.
async fn learn_max_receives(config: &mut Config) {
    let (Role::Worker, Mode::Local, Some(WorkQueueConfig::Sqs { url })) =
        (config.role, config.mode, &config.work_queue)
    else {
        // A queue in PostgreSQL dead-letters at this process's WORK_QUEUE_MAX_RECEIVES.
        return;
    };
    if std::env::var_os("WORK_QUEUE_MAX_RECEIVES").is_some() {
        return;
    }
    let queue = SqsQueue::from_env(url.clone(), CallBudget::Worker).await;
    match queue.max_receives().await {
        Ok(Some(n)) if n > 0 => {
            if n != config.max_receives {
                tracing::info!(
                    max_receives = n,
                    "the queue's maxReceiveCount, read from its redrive policy"
                );
            }
            config.max_receives = n;
        }
        Ok(_) => tracing::warn!(
            max_receives = config.max_receives,
            "the work queue has no redrive policy: set WORK_QUEUE_MAX_RECEIVES to its receive budget"
        ),
        Err(error) => tracing::warn!(
            error = %crate::errors::error_chain(&error),
            max_receives = config.max_receives,
            "the work queue's redrive policy could not be read: assuming the default"
        ),
    }
}

/// The application wired for `config` and `app`, or the exit code of why it cannot start.
async fn built(config: Config, app: App) -> Result<Application, ExitCode> {
    Application::build_with_app(config, app)
        .await
        .map_err(|error| {
            tracing::error!("cannot start: {}", crate::errors::error_chain(&error));
            ExitCode::from(2)
        })
}

/// `slack-once gateway`: the gateway in front of a bot in any language (see
/// `docs/gateway.md`), served on `LISTEN_ADDR` until SIGTERM, or on Lambda (the function's
/// handler, or its image's command, `gateway`). Exit code 2 on a configuration
/// error, named.
pub fn run_gateway() -> ExitCode {
    // After the program's own name, which may be `gateway` too (a binary installed so).
    let args: Vec<String> = std::env::args()
        .skip(1)
        .skip_while(|arg| arg != "gateway")
        .skip(1)
        .collect();
    match role_of(&args, GATEWAY_USAGE) {
        Ok(role) => block_on(serve_gateway(role)),
        Err(code) => code,
    }
}

const GATEWAY_USAGE: &str = "\
usage: slack-once gateway          verify, claim and forward Slack's requests to SLACK_ONCE_BOT_URL
                                   (with WORK_QUEUE_URL: acknowledge them and queue them), and serve
                                   the bot's Web API calls on /api/ (docs/gateway.md)
       slack-once gateway worker   deferred mode's worker: forward each queued request to the bot,
                                   with DEDUP_LEASE_SECONDS to answer, serving its calls on /api/";

async fn serve_gateway(role: Option<Role>) -> ExitCode {
    init_logging(std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some());
    let mut config = match configured(role) {
        Ok(config) => config,
        Err(code) => return code,
    };
    learn_max_receives(&mut config).await;
    let lookup = |name: &str| std::env::var(name).ok();
    let gateway = match GatewayConfig::from_lookup(lookup) {
        Ok(gateway) => Gateway::new(gateway),
        Err(error) => {
            tracing::error!("configuration error: {error}");
            return ExitCode::from(2);
        }
    };
    if gateway.relays_calls() && !config.shared_store() {
        tracing::error!(
            "configuration error: DATABASE_URL or DEDUP_TABLE: the bot's calls are relayed through the ledger \
             (on Lambda, or with SLACK_ONCE_RELAY_CALLS), which every process must share"
        );
        return ExitCode::from(2);
    }
    let (role, mode) = (config.role, config.mode);
    let app = match built(config, gateway.app()).await {
        Ok(app) => app.with_gateway(gateway.clone()),
        Err(code) => return code,
    };
    match (role, mode) {
        (Role::Ingress, Mode::Lambda) => return ingress_on_lambda(app).await,
        (Role::Worker, Mode::Lambda) => return worker_on_lambda(app).await,
        _ => {}
    }
    let worker = match role {
        Role::Worker => Some((
            app.worker(),
            app.config().clone(),
            app.work_queue(CallBudget::Worker).await,
        )),
        Role::Ingress => None,
    };
    let server = match app.bind().await {
        Ok(server) => server,
        Err(error) => {
            tracing::error!(error = %error, "cannot listen on LISTEN_ADDR");
            return ExitCode::FAILURE;
        }
    };
    gateway.listening_on(server.local_addr());
    tracing::info!(addr = %server.local_addr(), "listening: POST /slack/events (Slack), POST /api/{{method}} (the bot's Web API calls), GET /healthz");
    match worker {
        None => serve_until_stopped(server).await,
        Some((worker, config, queue)) => gateway_worker(server, worker, &config, queue).await,
    }
}

/// The gateway's worker: the queue long-polled, and the bot's calls served, until SIGTERM.
async fn gateway_worker(
    server: crate::LocalServer,
    worker: Arc<crate::Worker>,
    config: &Config,
    queue: Option<Arc<dyn crate::queue::WorkQueue>>,
) -> ExitCode {
    let (Some(queue), Some(named)) = (queue, &config.work_queue) else {
        tracing::error!(
            "configuration error: WORK_QUEUE_URL (or WORK_QUEUE_NAME) is required by the worker"
        );
        return ExitCode::from(2);
    };
    let (stop, stopping) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop.send(true);
    });
    let until = |mut stopping: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopping.wait_for(|stop| *stop).await;
    };
    tracing::info!(
        queue = %named.describe(),
        lease_s = config.lease.as_secs(),
        "worker: receiving"
    );
    let polled = worker.run_local(
        queue,
        config.worker_concurrency,
        config.lease,
        until(stopping.clone()),
    );
    let (_, served) = tokio::join!(polled, server.run_until(until(stopping)));
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = %error, "the server failed");
            ExitCode::FAILURE
        }
    }
}

/// The ingress on Lambda: the router as the function's handler, until the runtime stops.
async fn ingress_on_lambda(app: Application) -> ExitCode {
    match lambda_http::run_concurrent(lambda_service(app.router())).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = %error, "the Lambda runtime stopped");
            ExitCode::FAILURE
        }
    }
}

/// The ingress locally: a server on `LISTEN_ADDR`, until SIGTERM.
async fn ingress_locally(app: Application) -> ExitCode {
    let distributed = app.config().oauth.is_some();
    let server = match app.bind().await {
        Ok(server) => server,
        Err(error) => {
            tracing::error!(error = %error, "cannot listen on LISTEN_ADDR");
            return ExitCode::FAILURE;
        }
    };
    if distributed {
        tracing::info!(addr = %server.local_addr(), "listening: POST /slack/events, GET /healthz, and the install flow: GET /slack/install, GET /slack/oauth_redirect");
    } else {
        tracing::info!(addr = %server.local_addr(), "listening: POST /slack/events, GET /healthz");
    }
    serve_until_stopped(server).await
}

/// Serves until SIGTERM.
async fn serve_until_stopped(server: crate::LocalServer) -> ExitCode {
    match server.run_until(shutdown_signal()).await {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(error) => {
            tracing::error!(error = %error, "the server failed");
            ExitCode::FAILURE
        }
    }
}

/// The worker on Lambda: each SQS batch handled, until the runtime stops.
async fn worker_on_lambda(app: Application) -> ExitCode {
    let worker = app.worker();
    // The queue the records come from, to hand a released record back after its
    // backoff rather than the queue's visibility timeout (the template sets it).
    let queue = match app.work_queue(CallBudget::Worker).await {
        Some(queue) => Some(queue),
        None => {
            tracing::warn!(
                "WORK_QUEUE_URL is not set: a record released for a passing failure \
                 comes back only after the queue's visibility timeout (set it to the \
                 worker's queue, as the SAM template does, to retry it within seconds)"
            );
            None
        }
    };
    let handler = lambda_http::service_fn(
        move |event: lambda_http::LambdaEvent<aws_lambda_events::event::sqs::SqsEvent>| {
            let (worker, queue) = (worker.clone(), queue.clone());
            async move {
                let deadline = crate::http::invocation_deadline(event.context.deadline);
                let request_id = event.context.request_id.clone();
                Ok::<_, lambda_http::Error>(
                    worker
                        .handle_batch(event.payload, queue, deadline, &request_id)
                        .await,
                )
            }
        },
    );
    match lambda_http::lambda_runtime::run_concurrent(handler).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = %error, "the Lambda runtime stopped");
            ExitCode::FAILURE
        }
    }
}

/// The worker locally: long-polls `WORK_QUEUE_URL`, until SIGTERM.
async fn worker_locally(app: Application) -> ExitCode {
    let config = app.config();
    let (Some(queue), Some(named)) = (app.work_queue(CallBudget::Worker).await, &config.work_queue)
    else {
        tracing::error!(
            "configuration error: WORK_QUEUE_URL (or WORK_QUEUE_NAME) is required by the worker"
        );
        return ExitCode::from(2);
    };
    tracing::info!(
        queue = %named.describe(),
        concurrency = config.worker_concurrency,
        lease_s = config.lease.as_secs(),
        "worker: receiving"
    );
    app.worker()
        .run_local(
            queue,
            config.worker_concurrency,
            config.lease,
            shutdown_signal(),
        )
        .await;
    tracing::info!("stopped");
    ExitCode::SUCCESS
}

/// The router as a Lambda handler: its answers are small JSON bodies, collected into the
/// runtime's own body type (which concurrent invocations need to be `Sync`).
fn lambda_service(
    router: axum::Router,
) -> impl tower::Service<
    lambda_http::Request,
    Response = lambda_http::Response<lambda_http::Body>,
    Error = std::convert::Infallible,
    Future = impl std::future::Future<
        Output = Result<lambda_http::Response<lambda_http::Body>, std::convert::Infallible>,
    > + Send,
> + Clone
+ Send
+ 'static {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    tower::service_fn(move |request: lambda_http::Request| {
        let router = router.clone();
        async move {
            let response = router.oneshot(request).await?;
            let (parts, body) = response.into_parts();
            let body = match body.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(error) => {
                    tracing::error!(error = %error, "the answer's body could not be read");
                    bytes::Bytes::new()
                }
            };
            let body = match String::from_utf8(body.to_vec()) {
                Ok(text) if text.is_empty() => lambda_http::Body::Empty,
                Ok(text) => lambda_http::Body::Text(text),
                Err(e) => lambda_http::Body::Binary(e.into_bytes()),
            };
            Ok(lambda_http::Response::from_parts(parts, body))
        }
    })
}

/// SIGTERM or Ctrl-C: stop accepting, finish what is in flight.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM can be handled");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down: finishing in-flight requests");
}

#[cfg(test)]
mod tests {
    use super::{log_filter, one_thread};

    #[test]
    fn one_thread_on_lambda_with_one_invocation_at_a_time_only() {
        assert!(one_thread(true, None));
        assert!(one_thread(true, Some("1")));
        assert!(
            !one_thread(true, Some("8")),
            "Lambda Managed Instances: every core"
        );
        assert!(!one_thread(false, None), "the local server: every core");
        assert!(!one_thread(false, Some("1")));
    }
    use tracing::Level;
    use tracing_subscriber::filter::LevelFilter;

    #[test]
    fn rust_logs_directives_apply_with_lambdas_level_as_the_default() {
        // RUST_LOG's directives, as EnvFilter applied them.
        let f = log_filter(Some("INFO"), Some("info,slack_once::run=warn"));
        assert!(!f.would_enable("slack_once::run", &Level::INFO));
        assert!(f.would_enable("slack_once::process", &Level::INFO));
        let f = log_filter(None, Some("warn,slack_once=debug"));
        assert_eq!(f.default_level(), Some(LevelFilter::WARN));
        assert!(f.would_enable("slack_once::process", &Level::DEBUG));
        assert!(!f.would_enable("aws_smithy_runtime", &Level::INFO));
        let f = log_filter(None, Some("WARN"));
        assert_eq!(f.default_level(), Some(LevelFilter::WARN));
        // Target directives alone: Lambda's level for everything else.
        let f = log_filter(Some("ERROR"), Some("slack_once=debug"));
        assert!(f.would_enable("slack_once::process", &Level::DEBUG));
        assert!(!f.would_enable("aws_config", &Level::WARN));
        // No RUST_LOG: Lambda's level; nothing usable: info.
        let f = log_filter(Some("DEBUG"), None);
        assert_eq!(f.default_level(), Some(LevelFilter::DEBUG));
        for (lambda, rust) in [
            (None, None),
            (Some("loud"), Some("")),
            (None, Some("x=y=z")),
        ] {
            let f = log_filter(lambda, rust);
            assert_eq!(
                f.default_level(),
                Some(LevelFilter::INFO),
                "{lambda:?} {rust:?}"
            );
        }
    }
}
