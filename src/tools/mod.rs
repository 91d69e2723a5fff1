//! What every bot built on slack-once can do besides serving, each tool a module with its
//! [`args::Spec`] read by the one parser ([`args`]), each answering `--help`:
//!
//! - `sign` ([`sign`]): re-sign a Slack body or a Lambda event file;
//! - `create-table`, `create-queue` ([`setup`]): the ledger table, deferred mode's queues;
//! - `import-token` ([`setup`]): keep `SLACK_BOT_TOKEN` as its workspace's installation;
//! - `seal-installations` ([`setup`]): seal the tokens kept as they are, move the unscoped
//!   installations to the app's own keys;
//! - `new-token-key` ([`setup`]): a key to seal tokens without KMS (`SLACK_TOKEN_KEYS`);
//! - `redrive` ([`redrive`]): the dead-letter queue back to the work queue;
//! - `sweep` ([`sweep`]): claims left in progress past their lease ended failed;
//! - `manifest` ([`manifest`]): the app manifest the bot's code needs (run by the bot's
//!   `run`, which has the app);
//! - `standin` ([`standin`]): a stand-in for Slack's Web API on 127.0.0.1, for the bot run
//!   locally;
//! - `init` ([`init`], the `slack-once` binary only): a new bot in a repository of its own.
//!
//! `mybot create-table` does what `slack-once create-table` does: a bot needs no second binary
//! to be set up.

pub mod args;
pub mod init;
pub mod manifest;
pub mod redrive;
pub mod setup;
pub mod sign;
pub mod standin;
pub mod sweep;

use std::process::ExitCode;

use args::{Args, Spec};

/// The binary's name as it was run (`mybot`), for its usage and its tools' messages.
pub(crate) fn program() -> String {
    std::env::args_os()
        .next()
        .and_then(|arg0| {
            std::path::Path::new(&arg0)
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "slack-once".to_string())
}

/// Writes `text` and a newline to standard output, as `println!` does, but a reader that has
/// gone (`mybot --help | grep -q create-table`, `| head -1`) is no error: what it did not read
/// it did not want, and a tool must not panic on a closed pipe.
pub fn say(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// A tool: what it takes, and what runs it.
struct Tool {
    spec: &'static Spec,
    run: fn(&Args) -> ExitCode,
}

/// Every bot's tools, in the order the usage lists them (`init` is the `slack-once` binary's).
const TOOLS: &[Tool] = &[
    Tool {
        spec: &sign::SPEC,
        run: sign::run,
    },
    Tool {
        spec: &setup::CREATE_TABLE,
        run: setup::create_table,
    },
    Tool {
        spec: &setup::CREATE_QUEUE,
        run: setup::create_queue,
    },
    Tool {
        spec: &setup::IMPORT_TOKEN,
        run: setup::import_token,
    },
    Tool {
        spec: &setup::SEAL_INSTALLATIONS,
        run: setup::seal_installations,
    },
    Tool {
        spec: &setup::NEW_TOKEN_KEY,
        run: setup::new_token_key,
    },
    Tool {
        spec: &redrive::SPEC,
        run: redrive::run,
    },
    Tool {
        spec: &sweep::SPEC,
        run: sweep::run,
    },
    Tool {
        spec: &standin::SPEC,
        run: standin::run,
    },
];

/// The tools' lines of a bot's usage text (`BOT` for the binary's name).
pub(crate) fn usage_lines() -> String {
    TOOLS
        .iter()
        .map(|tool| tool.spec)
        .chain([&manifest::SPEC])
        .map(|spec| overview(spec, "BOT"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A tool's synopsis and what it does, as the binary's usage lists each.
pub(crate) fn overview(spec: &Spec, program: &str) -> String {
    let mut text = format!("       {program} {}", spec.synopsis());
    for line in spec.about.lines() {
        text.push_str(&format!("\n                     {}", line.trim()));
    }
    text
}

/// Runs the tool `args[0]` names with the rest of `args`; `None` when `args[0]` names none.
pub(crate) fn dispatch(args: &[String]) -> Option<ExitCode> {
    let name = args.first()?;
    let tool = TOOLS.iter().find(|t| t.spec.name == name)?;
    Some(run_tool(tool.spec, tool.run, &args[1..]))
}

/// Reads `args` by `spec` and runs the tool (`--help` and refused arguments end here).
pub fn run_tool(spec: &'static Spec, run: fn(&Args) -> ExitCode, args: &[String]) -> ExitCode {
    match spec.parse(args) {
        Ok(parsed) => run(&parsed),
        Err(code) => code,
    }
}

/// The runtime an asynchronous tool runs on.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts")
}
