//! The `slack-once` binary: the reference bot run by [`slack_once::run`] (an ingress, or with
//! `worker` the worker of deferred mode; Lambda or local), and the tools: `sign`,
//! `create-table`, `create-queue`.

use std::process::ExitCode;

use slack_once::app::reference_app;
use slack_once::ledger::DynamoLedger;
use slack_once::queue::sqs::{self, CallBudget};
use slack_once::queue::SqsQueue;
use slack_once::sign;

const USAGE: &str = "\
usage: slack-once                 serve (Lambda when AWS_LAMBDA_RUNTIME_API is set, else LISTEN_ADDR);
                                  SLACK_ONCE_ROLE=worker runs the worker instead
       slack-once worker          the worker of deferred mode: long-poll WORK_QUEUE_URL, answer each event
       slack-once --version
       slack-once sign FILE [--secret S] [--url URL]
                                  re-sign a Slack body or Lambda event file with a fresh timestamp
       slack-once create-table [TABLE]
                                  create the ledger table (DEDUP_TABLE) where AWS_ENDPOINT_URL points
       slack-once import-token    keep SLACK_BOT_TOKEN as its workspace's installation in DEDUP_TABLE
                                  (moving to multi-workspace mode: DEPLOY.md); nothing if one is there
       slack-once create-queue NAME
                                  create the work queue NAME and its dead-letter queue NAME-dlq
                                  where AWS_ENDPOINT_URL_SQS points; prints WORK_QUEUE_URL";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        // Serving (`worker` and `--version` included) is the library's: every bot binary runs
        // the same way.
        None | Some("worker" | "-V" | "--version") => {}
        Some("sign") => return sign::run(&args[1..]),
        Some("create-table") => return runtime().block_on(create_table(args.get(1).cloned())),
        Some("create-queue") => return runtime().block_on(create_queue(args.get(1).cloned())),
        Some("import-token") => return runtime().block_on(import_token()),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!("slack-once: unknown command {other:?}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    slack_once::run(reference_app())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts")
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

async fn import_token() -> ExitCode {
    let (Some(token), Some(table)) = (
        std::env::var("SLACK_BOT_TOKEN")
            .ok()
            .filter(|t| !t.is_empty()),
        std::env::var("DEDUP_TABLE").ok().filter(|t| !t.is_empty()),
    ) else {
        eprintln!(
            "slack-once import-token: set SLACK_BOT_TOKEN (the token to keep) and DEDUP_TABLE"
        );
        return ExitCode::from(2);
    };
    let api = std::env::var("SLACK_API_URL")
        .unwrap_or_else(|_| slack_once::config::DEFAULT_SLACK_API_URL.to_string());
    let client = slack_once::ledger::dynamo::client_from_env().await;
    let store = slack_once::installations::DynamoInstallations::new(client, table);
    let slack = slack_once::slack::SlackClient::new(api, None);
    let token = slack_once::config::Secret::new(token);
    match slack_once::installations::import_token(&store, &slack, &token).await {
        Ok(Some(installation)) => {
            let key = installation.key().expect("a key");
            println!("imported the installation of {}", key.id());
            ExitCode::SUCCESS
        }
        Ok(None) => {
            println!("an installation is stored already: nothing imported");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!(
                "slack-once import-token: {}",
                slack_once::process::error_chain(&error)
            );
            ExitCode::FAILURE
        }
    }
}
