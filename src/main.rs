//! The `slack-once` binary: wiring only. Under the Lambda runtime when `AWS_LAMBDA_RUNTIME_API`
//! is set, otherwise a local server on `LISTEN_ADDR`. Subcommands: `sign`, `create-table`.

use std::process::ExitCode;

use slack_once::config::{Config, Mode};
use slack_once::ledger::DynamoLedger;
use slack_once::{sign, Application};

const USAGE: &str = "\
usage: slack-once                 serve (Lambda when AWS_LAMBDA_RUNTIME_API is set, else LISTEN_ADDR)
       slack-once sign FILE [--secret S] [--url URL]
                                  re-sign a Slack body or Lambda event file with a fresh timestamp
       slack-once create-table [TABLE]
                                  create the ledger table (DEDUP_TABLE) where AWS_ENDPOINT_URL points";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        None => {}
        Some("sign") => return sign::run(&args[1..]),
        Some("create-table") => return runtime().block_on(create_table(args.get(1).cloned())),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!("slack-once: unknown command {other:?}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    runtime().block_on(serve())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts")
}

async fn serve() -> ExitCode {
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

    let config = match Config::from_env() {
        Ok(config) => config,
        Err(error) => {
            tracing::error!("configuration error: {error}");
            return ExitCode::from(2);
        }
    };
    let mode = config.mode;
    let app = Application::build(config).await;
    match mode {
        Mode::Lambda => match lambda_http::run(app.router()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                tracing::error!(error = %error, "the Lambda runtime stopped");
                ExitCode::FAILURE
            }
        },
        Mode::Local => {
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
