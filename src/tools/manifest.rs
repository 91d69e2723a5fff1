//! `BOT manifest`: the app manifest the bot's [`App`] needs ([`App::manifest`]: its events,
//! commands, shortcuts, interactivity, Workflow Builder steps with their parameters, and the
//! scopes they imply), printed as JSON to paste into Slack's app settings; with `--check FILE`,
//! whether `FILE` (the checked-in `slack-app-manifest.json`) says the same, for CI.

use std::process::ExitCode;

use super::args::{Args, Item, Spec};
use crate::app::App;
use crate::app::manifest::differences;

/// `manifest [--check FILE]`.
pub static SPEC: Spec = Spec {
    name: "manifest",
    about: "prints the Slack app manifest the bot's code needs (events, commands,\n\
            interactivity, workflow steps, scopes); --check FILE fails where FILE differs",
    operands: &[],
    options: &[Item {
        name: "--check FILE",
        help: "compare with FILE (slack-app-manifest.json) instead of printing: exit 1 on a difference",
    }],
    env: &[],
};

/// Runs `manifest` for `app` with its arguments.
pub fn run(app: &App, args: &Args) -> ExitCode {
    let manifest = app.manifest();
    let Some(path) = args.value("--check") else {
        say!(
            "{}",
            serde_json::to_string_pretty(&manifest).expect("JSON serialises")
        );
        return ExitCode::SUCCESS;
    };
    let found: serde_json::Value = match std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|text| serde_json::from_str(&text).map_err(|e| e.to_string()))
    {
        Ok(found) => found,
        Err(e) => return args.fail(&format!("--check {path}: {e}")),
    };
    let diff = differences(&manifest, &found);
    if diff.is_empty() {
        say!("{path} is the manifest the code needs");
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "{path} is not the manifest the code needs ({} difference{}; `manifest > {path}` writes it):",
        diff.len(),
        if diff.len() == 1 { "" } else { "s" }
    );
    for line in diff {
        eprintln!("  {line}");
    }
    ExitCode::FAILURE
}
