//! The `slack-once` binary: the reference bot run by [`slack_once::run`] (so `cargo run` serves
//! it, with every tool a bot's binary has: `sign`, `create-table`, `create-queue`,
//! `import-token`, `worker`, `--version`), and `slack-once init NAME`, which writes a new bot.

#![warn(clippy::too_many_lines)]

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("init") => slack_once::tools::init::run(&args[1..]),
        Some("gateway") => slack_once::run_gateway(),
        // On Lambda, a zip's handler names the gateway (a container image's CMD is an argument).
        _ if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some()
            && std::env::var("_HANDLER").is_ok_and(|h| h == "gateway") =>
        {
            slack_once::run_gateway()
        }
        Some("-h" | "--help" | "help") if args.len() == 1 => {
            slack_once::tools::say(format_args!(
                "{}\n{}",
                slack_once::usage(),
                slack_once::tools::init::usage_lines()
            ));
            ExitCode::SUCCESS
        }
        _ => slack_once::run(slack_once::reference_app()),
    }
}
