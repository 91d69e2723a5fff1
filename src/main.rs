//! The `slack-once` binary: wiring only. The role (ingress, or the worker of deferred mode)
//! comes from `SLACK_ONCE_ROLE` or the `worker` subcommand; the runtime is Lambda when
//! `AWS_LAMBDA_RUNTIME_API` is set, otherwise local (a server on `LISTEN_ADDR`, or a worker
//! long-polling `WORK_QUEUE_URL`). Subcommands: `worker`, `sign`, `create-table`, `create-queue`.

use std::process::ExitCode;
use std::sync::Arc;

use slack_once::config::{Config, Mode, Role};
use slack_once::ledger::DynamoLedger;
use slack_once::queue::sqs::{self, CallBudget};
use slack_once::queue::SqsQueue;
use slack_once::{sign, Application};

const USAGE: &str = "\
usage: slack-once                 serve (Lambda when AWS_LAMBDA_RUNTIME_API is set, else LISTEN_ADDR);
                                  SLACK_ONCE_ROLE=worker runs the worker instead
       slack-once worker          the worker of deferred mode: long-poll WORK_QUEUE_URL, answer each event
       slack-once sign FILE [--secret S] [--url URL]
                                  re-sign a Slack body or Lambda event file with a fresh timestamp
       slack-once create-table [TABLE]
                                  create the ledger table (DEDUP_TABLE) where AWS_ENDPOINT_URL points
       slack-once create-queue NAME
                                  create the work queue NAME and its dead-letter queue NAME-dlq
                                  where AWS_ENDPOINT_URL_SQS points; prints WORK_QUEUE_URL";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut role = None;
    match args.first().map(String::as_str) {
        None => {}
        Some("worker") if args.len() == 1 => role = Some(Role::Worker),
        Some("sign") => return sign::run(&args[1..]),
        Some("create-table") => return runtime().block_on(create_table(args.get(1).cloned())),
        Some("create-queue") => return runtime().block_on(create_queue(args.get(1).cloned())),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!("slack-once: unknown command {other:?}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    runtime().block_on(serve(role))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts")
}

async fn serve(role: Option<Role>) -> ExitCode {
    let on_lambda = std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some();
    if on_lambda {
        // The Lambda log format: JSON when AWS_LAMBDA_LOG_FORMAT=JSON, level from AWS_LAMBDA_LOG_LEVEL/RUST_LOG.
        lambda_http::tracing::init_default_subscriber();
    } else {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_target(false)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .init();
    }

    let config = match Config::from_lookup(|name| match (name, role) {
        ("SLACK_ONCE_ROLE", Some(Role::Worker)) => Some("worker".to_string()),
        _ => std::env::var(name).ok(),
    }) {
        Ok(config) => config,
        Err(error) => {
            tracing::error!("configuration error: {error}");
            return ExitCode::from(2);
        }
    };
    let (mode, role) = (config.mode, config.role);
    let app = Application::build(config).await;
    match (role, mode) {
        (Role::Ingress, Mode::Lambda) => match lambda_http::run(app.router()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                tracing::error!(error = %error, "the Lambda runtime stopped");
                ExitCode::FAILURE
            }
        },
        (Role::Ingress, Mode::Local) => {
            let server = match app.bind().await {
                Ok(server) => server,
                Err(error) => {
                    tracing::error!(error = %error, "cannot listen on LISTEN_ADDR");
                    return ExitCode::FAILURE;
                }
            };
            tracing::info!(addr = %server.local_addr(), "listening: POST /slack/events, GET /healthz");
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
        (Role::Worker, Mode::Lambda) => {
            let worker = app.worker();
            let handler = lambda_http::service_fn(
                move |event: lambda_http::LambdaEvent<aws_lambda_events::event::sqs::SqsEvent>| {
                    let worker = worker.clone();
                    async move {
                        let deadline =
                            slack_once::http::invocation_deadline(event.context.deadline);
                        Ok::<_, lambda_http::Error>(
                            worker.handle_batch(event.payload, deadline).await,
                        )
                    }
                },
            );
            match lambda_http::lambda_runtime::run(handler).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!(error = %error, "the Lambda runtime stopped");
                    ExitCode::FAILURE
                }
            }
        }
        (Role::Worker, Mode::Local) => {
            let config = app.config();
            let url = config
                .work_queue_url
                .clone()
                .expect("the configuration requires WORK_QUEUE_URL for a local worker");
            let queue = Arc::new(SqsQueue::from_env(url.clone(), CallBudget::Worker).await);
            tracing::info!(
                queue = %url,
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
    }
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

async fn create_table(table: Option<String>) -> ExitCode {
    let Some(table) = table.or_else(|| std::env::var("DEDUP_TABLE").ok()) else {
        eprintln!("slack-once create-table: name the table, or set DEDUP_TABLE");
        return ExitCode::from(2);
    };
    let client = slack_once::ledger::dynamo::client_from_env().await;
    match DynamoLedger::create_table(&client, &table).await {
        Ok(()) => {
            println!("created table {table}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!(
                "slack-once create-table: {}",
                slack_once::process::error_chain(&error)
            );
            ExitCode::FAILURE
        }
    }
}

async fn create_queue(name: Option<String>) -> ExitCode {
    let Some(name) = name else {
        eprintln!("slack-once create-queue: name the queue");
        return ExitCode::from(2);
    };
    let max_receives = std::env::var("WORK_QUEUE_MAX_RECEIVES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(slack_once::config::DEFAULT_MAX_RECEIVES);
    let client = sqs::client_from_env(CallBudget::Ingress).await;
    let visibility = slack_once::config::DEFAULT_LEASE;
    match SqsQueue::create_with_dead_letters(&client, &name, max_receives, visibility).await {
        Ok((url, dlq)) => {
            eprintln!("created {name} (dead-letter queue {dlq}, after {max_receives} receives)");
            println!("{url}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!(
                "slack-once create-queue: {}",
                slack_once::process::error_chain(&error)
            );
            ExitCode::FAILURE
        }
    }
}
