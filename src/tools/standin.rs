//! `slack-once standin`: a stand-in for Slack's Web API on 127.0.0.1, for a bot run locally
//! (`SLACK_API_URL=http://127.0.0.1:4000/api`), in every bot's binary: the same stand-in its
//! tests run against ([`crate::testing::FakeSlack`]), which keeps what the bot posts as Slack
//! would (conversations, threads, history newest first, the bot's `bot_id` and `app_id` on its
//! messages, views and their trigger ids, ephemerals, reactions) and prints each write as it
//! comes (a `response_url`'s posts too); `GET /_standin/state` serves what Slack shows now (the
//! messages by conversation, the ephemerals, reactions, views, and every call), as the Python
//! stand-in does. `--seed` puts the message a sample event is about in its conversation, as
//! Slack's would be, before the bot is asked about it.

use std::process::ExitCode;
use std::time::Duration;

use super::args::{Args, Item, Spec};
use crate::testing::{FakeSlack, Identity};

/// `standin [PORT] [--seed FILE] [--team T] [--app-id A] [--bot-id B] [--bot-user U]`.
pub static SPEC: Spec = Spec {
    name: "standin",
    about: "a stand-in for Slack's Web API on 127.0.0.1:PORT (default 4000) for\n\
            the bot run locally (SLACK_API_URL=http://127.0.0.1:PORT/api): it keeps\n\
            what the bot posts as Slack would and prints each write; GET\n\
            /_standin/state shows what Slack holds now; Ctrl-C stops it",
    operands: &[Item {
        name: "[PORT]",
        help: "the port on 127.0.0.1 (default 4000; 0: a free one)",
    }],
    options: &[
        Item {
            name: "--seed FILE",
            help: "an Events API body (events/app_mention.json): its message is in Slack",
        },
        Item {
            name: "--team TEAM_ID",
            help: "the workspace (default T0001TEAM, as the sample events)",
        },
        Item {
            name: "--app-id APP_ID",
            help: "the app its messages carry (default A0001APP)",
        },
        Item {
            name: "--bot-id BOT_ID",
            help: "the bot id its messages carry (default B0001BOT)",
        },
        Item {
            name: "--bot-user USER_ID",
            help: "the bot's user (default U0456BOT)",
        },
    ],
    env: &[],
};

/// Runs `standin` with its arguments (until Ctrl-C).
pub fn run(args: &Args) -> ExitCode {
    let port = match args.operand(0).map(str::parse::<u16>) {
        None => 4000,
        Some(Ok(port)) => port,
        Some(Err(_)) => return args.fail("PORT is a port number (1 to 65535)"),
    };
    let seed = match args.value("--seed").map(std::fs::read) {
        None => None,
        Some(Ok(body)) => Some(body),
        Some(Err(e)) => return args.fail(&format!("--seed: {e}")),
    };
    let identity = Identity {
        team: args.value("--team").unwrap_or("T0001TEAM").into(),
        app_id: args.value("--app-id").unwrap_or("A0001APP").into(),
        bot_id: args.value("--bot-id").unwrap_or("B0001BOT").into(),
        bot_user: args.value("--bot-user").unwrap_or("U0456BOT").into(),
    };
    super::runtime().block_on(async move {
        let slack = match FakeSlack::start_on(identity, port).await {
            Ok(slack) => slack,
            Err(e) => return args.fail(&format!("127.0.0.1:{port}: {e}")),
        };
        if let Some(body) = &seed {
            slack.with_workspace(|w| w.add_event_message(body));
        }
        super::say(format_args!(
            "Slack stand-in on {0}\n  export SLACK_API_URL={0} SLACK_BOT_TOKEN=xoxb-local\n  \
             what Slack holds now: curl -s {1}/_standin/state",
            slack.base_url(),
            slack.base_url().trim_end_matches("/api")
        ));
        let mut shown = 0;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return ExitCode::SUCCESS,
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
            let calls = slack.calls();
            for (method, args) in calls.iter().skip(shown) {
                super::say(format_args!("{}", line(method, args)));
            }
            shown = calls.len();
        }
    })
}

/// A write as the stand-in prints it: the method, where, and the text.
fn line(method: &str, args: &serde_json::Value) -> String {
    let mut parts = vec![method.to_string()];
    for key in [
        "channel",
        "thread_ts",
        "ts",
        "name",
        "view_id",
        "response_type",
        "replace_original",
        "delete_original",
    ] {
        if let Some(yes) = args[key].as_bool().filter(|yes| *yes) {
            parts.push(format!("{key}={yes}"));
            continue;
        }
        if let Some(v) = args[key].as_str().filter(|v| !v.is_empty()) {
            parts.push(format!("{key}={v}"));
        }
    }
    if let Some(text) = args["text"].as_str().or(args["markdown_text"].as_str()) {
        let cut: String = text.chars().take(100).collect();
        parts.push(format!("{cut:?}"));
    }
    parts.join(" ")
}
