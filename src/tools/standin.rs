//! `slack-once standin`: a stand-in for Slack's Web API on 127.0.0.1, for a bot run locally
//! (`SLACK_API_URL=http://127.0.0.1:4000/api`), in every bot's binary: the same stand-in its
//! tests run against (`slack_once::testing::FakeSlack`), which keeps what the bot posts as Slack
//! would (conversations, threads, history newest first, the bot's `bot_id` and `app_id` on its
//! messages, streams, agent sessions, views and their trigger ids, ephemerals, reactions,
//! workflow executions and their tokens, OAuth installs with `--client-id`) and prints each
//! call as it comes (a `response_url`'s posts too; never a token or a secret). `GET
//! /_standin/state` serves what Slack shows now; the `POST /_standin/…` endpoints play what
//! people and Slack do (a person's message, a grant, a stop, a workflow reaching a step, the
//! faults of the next calls): see the `testing::scripts` module. `--seed` puts the message a
//! sample event is about in its conversation, as Slack's would be, before the bot is asked
//! about it.

use std::process::ExitCode;
#[cfg(feature = "testing")]
use std::time::Duration;

use super::args::{Args, Item, Spec};
#[cfg(feature = "testing")]
use crate::testing::{FakeSlack, Identity};

/// `standin [PORT] [--seed FILE]… [--team T] [--app-id A] [--bot-id B] [--bot-user U] …`.
pub static SPEC: Spec = Spec {
    name: "standin",
    about: "a stand-in for Slack's Web API on 127.0.0.1:PORT (default 4000) for\n\
            the bot run locally (SLACK_API_URL=http://127.0.0.1:PORT/api): it keeps\n\
            what the bot posts as Slack would and prints each call; GET\n\
            /_standin/state shows what Slack holds now, POST /_standin/… plays\n\
            people and faults (messages, grant, stop, execution, script); Ctrl-C stops it",
    operands: &[Item {
        name: "[PORT]",
        help: "the port on 127.0.0.1 (default 4000; 0: a free one)",
    }],
    options: &[
        Item {
            name: "--seed FILE",
            help: "(repeatable) an Events API body (events/app_mention.json): its message is in Slack",
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
        Item {
            name: "--token TOKEN",
            help: "the one bot token taken (others: invalid_auth); default any xoxb- token",
        },
        Item {
            name: "--page-cap N",
            help: "most messages a conversations.history/.replies page holds (default 15)",
        },
        Item {
            name: "--history-per-minute N",
            help: "calls of conversations.history, and of .replies, a rolling minute allows\n\
                   (more: HTTP 429 + Retry-After; default unlimited)",
        },
        Item {
            name: "--stream-expiry SECONDS",
            help: "a stream takes appends this long after it starts (default 300)",
        },
        Item {
            name: "--workflow-token-seconds SECONDS",
            help: "a workflow token (xwfp-) expires this long after it is issued (default 900)",
        },
        Item {
            name: "--client-id ID",
            help: "with --client-secret: OAuth installs (oauth.v2.access, POST /_standin/grant)",
        },
        Item {
            name: "--client-secret SECRET",
            help: "the app's client secret (never printed)",
        },
    ],
    env: &[],
};

#[cfg(feature = "testing")]
/// What `standin` was asked for, read from its arguments.
struct Options {
    port: u16,
    seeds: Vec<Vec<u8>>,
    identity: Identity,
    token: Option<String>,
    page_cap: Option<usize>,
    history_per_minute: Option<usize>,
    stream_expiry: Option<f64>,
    workflow_token_seconds: Option<f64>,
    oauth: Option<(String, String)>,
}

#[cfg(feature = "testing")]
fn options(args: &Args) -> Result<Options, ExitCode> {
    let port = match args.operand(0).map(str::parse::<u16>) {
        None => 4000,
        Some(Ok(port)) => port,
        Some(Err(_)) => return Err(args.fail("PORT is a port number (1 to 65535)")),
    };
    let mut seeds = Vec::new();
    for path in args.values("--seed") {
        match std::fs::read(path) {
            Ok(body) => seeds.push(body),
            Err(e) => return Err(args.fail(&format!("--seed {path}: {e}"))),
        }
    }
    let seconds = |name: &str| -> Result<Option<f64>, ExitCode> {
        match args.parsed::<f64>(name, "a number of seconds")? {
            Some(s) if !(s.is_finite() && s > 0.0) => {
                Err(args.fail(&format!("{name} takes a positive number of seconds")))
            }
            other => Ok(other),
        }
    };
    let oauth = match (args.value("--client-id"), args.value("--client-secret")) {
        (Some(id), Some(secret)) => Some((id.to_string(), secret.to_string())),
        (None, None) => None,
        _ => return Err(args.fail("--client-id and --client-secret go together")),
    };
    Ok(Options {
        port,
        seeds,
        identity: Identity {
            team: args.value("--team").unwrap_or("T0001TEAM").into(),
            app_id: args.value("--app-id").unwrap_or("A0001APP").into(),
            bot_id: args.value("--bot-id").unwrap_or("B0001BOT").into(),
            bot_user: args.value("--bot-user").unwrap_or("U0456BOT").into(),
        },
        token: args.value("--token").map(str::to_string),
        page_cap: args.parsed("--page-cap", "a number of messages")?,
        history_per_minute: args.parsed("--history-per-minute", "a number of calls")?,
        stream_expiry: seconds("--stream-expiry")?,
        workflow_token_seconds: seconds("--workflow-token-seconds")?,
        oauth,
    })
}

#[cfg(feature = "testing")]
/// Sets `slack` up as `options` say.
fn configure(slack: FakeSlack, options: &Options) -> FakeSlack {
    let slack = match &options.oauth {
        Some((id, secret)) => slack.with_oauth(id, secret),
        None => {
            slack.require_bot_token(options.token.as_deref());
            slack
        }
    };
    for body in &options.seeds {
        slack.with_workspace(|w| w.add_event_message(body));
    }
    if let Some(cap) = options.page_cap {
        slack.with_workspace(|w| w.set_page_cap(cap));
    }
    if let Some(calls) = options.history_per_minute {
        slack.limit_reads_per_minute(calls);
    }
    if let Some(expiry) = options.stream_expiry {
        slack.set_stream_expiry(Duration::from_secs_f64(expiry));
    }
    if let Some(lifetime) = options.workflow_token_seconds {
        slack.set_workflow_token_lifetime(Duration::from_secs_f64(lifetime));
    }
    slack
}

/// Runs `standin` with its arguments (until Ctrl-C). The stand-in is the test kit's
/// (`slack_once::testing::FakeSlack`): a binary built without the `testing` feature (a bot's Lambda
/// build) says which build has it.
pub fn run(args: &Args) -> ExitCode {
    #[cfg(feature = "testing")]
    return serve(args);
    #[cfg(not(feature = "testing"))]
    args.failed(
        "this binary was built without the Slack stand-in, which is slack-once's test kit: \
         run it from a build with the `testing` feature (in a bot: \
         `cargo run --features slack-once/testing -- standin`; in slack-once: \
         `cargo run --features testing -- standin`)",
    )
}

/// The stand-in on its port, printing each call, until Ctrl-C.
#[cfg(feature = "testing")]
fn serve(args: &Args) -> ExitCode {
    let options = match options(args) {
        Ok(options) => options,
        Err(code) => return code,
    };
    super::runtime().block_on(async move {
        let port = options.port;
        let slack = match FakeSlack::start_on(options.identity.clone(), port).await {
            Ok(slack) => configure(slack, &options),
            Err(e) => return args.fail(&format!("127.0.0.1:{port}: {e}")),
        };
        let (token, oauth) = match &options.oauth {
            Some((id, _)) => (
                String::new(),
                format!("\n  OAuth installs for client id {id}"),
            ),
            None => (" SLACK_BOT_TOKEN=xoxb-local".to_string(), String::new()),
        };
        super::say(format_args!(
            "Slack stand-in on {0}\n  export SLACK_API_URL={0}{token}\n  \
             what Slack holds now: curl -s {1}/_standin/state{oauth}",
            slack.base_url(),
            slack.base_url().trim_end_matches("/api")
        ));
        let mut shown = 0;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return ExitCode::SUCCESS,
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
            let calls = slack.call_log_from(shown);
            for call in &calls {
                super::say(format_args!("{}", line(call)));
            }
            shown += calls.len();
        }
    })
}

#[cfg(feature = "testing")]
/// A call as the stand-in prints it: the method, where, the text, and Slack's refusal if any
/// (tokens and secrets are `***` already).
fn line(call: &serde_json::Value) -> String {
    let method = call["method"].as_str().unwrap_or_default();
    let args = &call["args"];
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
        "function_execution_id",
        "callback_id",
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
    let from_the_web_api = !method.starts_with("_standin/") && method != "response_url";
    if from_the_web_api && call["bearer"] != true {
        parts.push("(no bearer token)".into());
    }
    if let Some(error) = call["error"].as_str() {
        parts.push(format!("-> {error}"));
    }
    parts.join(" ")
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_printed_with_its_refusal_and_never_a_secret() {
        let call = serde_json::json!({
            "n": 3, "method": "chat.postMessage", "bearer": true,
            "args": {"channel": "C1", "text": "hi", "token": "***"}, "error": "invalid_auth",
        });
        assert_eq!(
            line(&call),
            "chat.postMessage channel=C1 \"hi\" -> invalid_auth"
        );
        let call = serde_json::json!({"method": "auth.test", "bearer": false, "args": {}});
        assert_eq!(line(&call), "auth.test (no bearer token)");
    }
}
