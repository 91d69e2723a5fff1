//! The tools every bot built on slack-once carries, run by [`crate::run`] before it serves:
//! `sign` (re-sign a Slack body or a Lambda event file), `create-table` (the ledger table),
//! `create-queue` (deferred mode's work queue and its dead-letter queue), `import-token`
//! (keep `SLACK_BOT_TOKEN` as its workspace's installation), `redrive` (the dead-letter queue
//! back to the work queue, [`crate::redrive`]) and `sweep` (claims left in progress past their
//! lease ended failed, [`crate::sweep`]). `mybot create-table` does what
//! `slack-once create-table` does: a bot needs no second binary to be set up.

use std::process::ExitCode;

use crate::ledger::DynamoLedger;
use crate::queue::SqsQueue;
use crate::queue::sqs::{self, CallBudget};

/// Writes `text` and a newline to standard output, as `println!` does, but a reader that has
/// gone (`mybot --help | grep -q create-table`, `| head -1`) is no error: what it did not read
/// it did not want, and a tool must not panic on a closed pipe.
pub fn say(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// The tools' lines of the usage text.
pub(crate) const USAGE: &str = "       BOT sign FILE [--secret S] [--url URL] [--retry N]
                     re-sign a Slack body or Lambda event file with a fresh timestamp
       BOT create-table [TABLE]
                     create the ledger table (DEDUP_TABLE) where AWS_ENDPOINT_URL points
       BOT create-queue NAME
                     create the work queue NAME and its dead-letter queue NAME-dlq
                     where AWS_ENDPOINT_URL_SQS points; prints WORK_QUEUE_URL
       BOT import-token
                     keep SLACK_BOT_TOKEN as its workspace's installation in DEDUP_TABLE
                     (moving to multi-workspace mode: DEPLOY.md); nothing if one is there
       BOT redrive [--dry-run] [--max N]
                     move deferred mode's dead letters (DEAD_LETTER_QUEUE_URL, else
                     WORK_QUEUE_URL-dlq) back to WORK_QUEUE_URL, their failed items in
                     DEDUP_TABLE made claimable; what Slack or the ledger no longer honours
                     is refused and left; prints what it did and why each had failed
       BOT sweep [--dry-run] [--older-than MINUTES]
                     end failed (abandoned, retryable) the claims in DEDUP_TABLE left in
                     progress past their lease (10 minutes by default): a request killed
                     on its last delivery, counted; a later delivery still takes it over";

/// Runs the tool `args[0]` names with the rest of `args`; `None` when `args[0]` names none.
pub(crate) fn dispatch(args: &[String]) -> Option<ExitCode> {
    let rest = args.get(1..).unwrap_or_default();
    Some(match args.first()?.as_str() {
        "sign" => crate::sign::run(rest),
        "create-table" => runtime().block_on(create_table(rest.first().cloned())),
        "create-queue" => runtime().block_on(create_queue(rest.first().cloned())),
        "import-token" => runtime().block_on(import_token()),
        "redrive" => runtime().block_on(redrive(rest)),
        "sweep" => runtime().block_on(sweep(rest)),
        _ => return None,
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts")
}

async fn create_table(table: Option<String>) -> ExitCode {
    let Some(table) = table.or_else(|| std::env::var("DEDUP_TABLE").ok()) else {
        eprintln!(
            "{} create-table: name the table, or set DEDUP_TABLE",
            crate::run::program()
        );
        return ExitCode::from(2);
    };
    let client = crate::ledger::dynamo::client_from_env().await;
    match DynamoLedger::create_table(&client, &table).await {
        Ok(()) => {
            say!("created table {table}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!(
                "{} create-table: {}",
                crate::run::program(),
                crate::process::error_chain(&error)
            );
            ExitCode::FAILURE
        }
    }
}

async fn create_queue(name: Option<String>) -> ExitCode {
    let Some(name) = name else {
        eprintln!("{} create-queue: name the queue", crate::run::program());
        return ExitCode::from(2);
    };
    let max_receives = std::env::var("WORK_QUEUE_MAX_RECEIVES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(crate::config::DEFAULT_MAX_RECEIVES);
    let client = sqs::client_from_env(CallBudget::Ingress).await;
    let visibility = crate::config::DEFAULT_LEASE;
    match SqsQueue::create_with_dead_letters(&client, &name, max_receives, visibility).await {
        Ok((url, dlq)) => {
            eprintln!("created {name} (dead-letter queue {dlq}, after {max_receives} receives)");
            say!("{url}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!(
                "{} create-queue: {}",
                crate::run::program(),
                crate::process::error_chain(&error)
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
            "{} import-token: set SLACK_BOT_TOKEN (the token to keep) and DEDUP_TABLE",
            crate::run::program()
        );
        return ExitCode::from(2);
    };
    let api = std::env::var("SLACK_API_URL")
        .unwrap_or_else(|_| crate::config::DEFAULT_SLACK_API_URL.to_string());
    let client = crate::ledger::dynamo::client_from_env().await;
    let store = crate::installations::DynamoInstallations::new(client, table);
    let slack = crate::slack::SlackClient::new(api, None);
    let token = crate::config::Secret::new(token);
    match crate::installations::import_token(&store, &slack, &token).await {
        Ok(Some(installation)) => {
            let key = installation.key().expect("a key");
            say!("imported the installation of {}", key.id());
            ExitCode::SUCCESS
        }
        Ok(None) => {
            say!("an installation is stored already: nothing imported");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!(
                "{} import-token: {}",
                crate::run::program(),
                crate::process::error_chain(&error)
            );
            ExitCode::FAILURE
        }
    }
}

async fn redrive(args: &[String]) -> ExitCode {
    let program = crate::run::program();
    let (mut dry_run, mut max) = (false, 1000usize);
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dry-run" => dry_run = true,
            "--max" => match args.next().and_then(|n| n.parse().ok()).filter(|n| *n > 0) {
                Some(n) => max = n,
                None => {
                    eprintln!("{program} redrive: --max takes a number of messages (1 or more)");
                    return ExitCode::from(2);
                }
            },
            other => {
                eprintln!("{program} redrive: unexpected argument {other:?}");
                return ExitCode::from(2);
            }
        }
    }
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let (Some(work), Some(table)) = (var("WORK_QUEUE_URL"), var("DEDUP_TABLE")) else {
        eprintln!(
            "{program} redrive: set WORK_QUEUE_URL and DEDUP_TABLE (the stack's outputs \
             WorkQueueUrl and LedgerTableName), and DEAD_LETTER_QUEUE_URL unless it is \
             WORK_QUEUE_URL-dlq"
        );
        return ExitCode::from(2);
    };
    let dead_letters = var("DEAD_LETTER_QUEUE_URL").unwrap_or_else(|| format!("{work}-dlq"));
    let ttl = match var("DEDUP_TTL_SECONDS").map(|v| v.parse::<u64>()) {
        None => crate::config::MIN_TTL,
        Some(Ok(s)) => std::time::Duration::from_secs(s),
        Some(Err(_)) => {
            eprintln!("{program} redrive: DEDUP_TTL_SECONDS is a number of seconds");
            return ExitCode::from(2);
        }
    };
    let sqs = sqs::client_from_env(CallBudget::Worker).await;
    let dynamodb = crate::ledger::dynamo::client_from_env().await;
    let queues = crate::redrive::Queues {
        sqs: &sqs,
        dead_letters: &dead_letters,
        work: &work,
        dynamodb: &dynamodb,
        table: &table,
    };
    let options = crate::redrive::Options {
        dry_run,
        max,
        ttl,
        now_ms: crate::clock::now_ms(),
    };
    let report = crate::redrive::redrive(&queues, &options).await;
    say!("{report}");
    match &report.error {
        None => ExitCode::SUCCESS,
        Some(error) => {
            eprintln!("{program} redrive: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn sweep(args: &[String]) -> ExitCode {
    let program = crate::run::program();
    let (mut dry_run, mut older_than) = (false, crate::sweep::DEFAULT_OLDER_THAN);
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dry-run" => dry_run = true,
            "--older-than" => match args.next().and_then(|n| n.parse::<u64>().ok()) {
                Some(minutes) => older_than = std::time::Duration::from_secs(minutes * 60),
                None => {
                    eprintln!("{program} sweep: --older-than takes a number of minutes");
                    return ExitCode::from(2);
                }
            },
            other => {
                eprintln!("{program} sweep: unexpected argument {other:?}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(table) = std::env::var("DEDUP_TABLE").ok().filter(|t| !t.is_empty()) else {
        eprintln!("{program} sweep: set DEDUP_TABLE (the stack's output LedgerTableName)");
        return ExitCode::from(2);
    };
    let dynamodb = crate::ledger::dynamo::client_from_env().await;
    let now_ms = crate::clock::now_ms();
    match crate::sweep::sweep(&dynamodb, &table, older_than, now_ms, dry_run).await {
        Ok(swept) => {
            for key in &swept.keys {
                say!(
                    "{} {key}",
                    if dry_run {
                        "would end failed"
                    } else {
                        "ended failed"
                    }
                );
            }
            say!(
                "{} claims left in progress past their lease{} ({} items scanned)",
                swept.keys.len(),
                if dry_run {
                    ": a dry run, nothing changed"
                } else {
                    " ended failed (abandoned, retryable)"
                },
                swept.scanned
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{program} sweep: {error}");
            ExitCode::FAILURE
        }
    }
}
