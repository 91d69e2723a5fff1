//! The built binary as a user runs it: start-up errors, graceful shutdown, `slack-once sign`.

use std::process::Command;
use std::time::Duration;

use crate::helpers::*;

const BIN: &str = env!("CARGO_BIN_EXE_slack-once");

#[test]
#[ignore = "needs the built binary"]
fn a_missing_signing_secret_stops_the_start_with_a_message_naming_it() {
    let out = Command::new(BIN)
        .env_clear()
        .env("LISTEN_ADDR", "127.0.0.1:0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("SLACK_SIGNING_SECRET is not set"), "{text}");
}

#[test]
#[ignore = "needs the built binary"]
fn an_invalid_value_stops_the_start_naming_the_variable_and_no_secret_is_printed() {
    let out = Command::new(BIN)
        .env_clear()
        .env("SLACK_SIGNING_SECRET", "super-secret-value")
        .env("SLACK_BOT_TOKEN", "xoxb-secret-token")
        .env("DEDUP_LEASE_SECONDS", "forever")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("DEDUP_LEASE_SECONDS is invalid"), "{text}");
    assert!(!text.contains("super-secret-value") && !text.contains("xoxb-secret-token"));
}

#[test]
#[ignore = "needs the built binary"]
fn on_lambda_a_missing_table_stops_the_start() {
    let out = Command::new(BIN)
        .env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9")
        .env("SLACK_SIGNING_SECRET", "s")
        .env("SLACK_BOT_TOKEN", "xoxb-1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("DEDUP_TABLE is not set"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn sigterm_finishes_the_request_in_flight_and_exits_0() {
    let slack = SlackStandin::start().await;
    slack.script([SlackFailure::Slow(Duration::from_millis(700))]);
    let bot = BotProcess::spawn(&[
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
    ]);
    let http = HttpClient::default();
    let url = bot.url();
    let in_flight = tokio::spawn(async move {
        deliver(&http, &url, &app_mention("EvTerm", "slow one"), None).await
    });
    while slack.received().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bot.terminate();
    let answer = in_flight.await.unwrap();
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);
    let (code, log) = bot.exited().await;
    assert_eq!(code, Some(0), "{}", log);
    assert_eq!(slack.posted().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn the_curl_command_printed_by_sign_is_accepted_by_the_local_server() {
    let slack = SlackStandin::start().await;
    let bot = BotProcess::spawn(&[
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
    ]);
    let file =
        std::env::temp_dir().join(format!("slack-once-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, app_mention("EvSign", "signed by the CLI")).unwrap();
    let out = Command::new(BIN)
        .args(["sign", file.to_str().unwrap(), "--url", &bot.url()])
        .env("SLACK_SIGNING_SECRET", SECRET)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let curl = String::from_utf8(out.stdout).unwrap();
    assert!(curl.contains(&bot.url()), "{curl}");
    let sent = Command::new("sh").arg("-c").arg(&curl).output().unwrap();
    let response = String::from_utf8_lossy(&sent.stdout);
    assert!(response.contains("\"outcome\":\"answered\""), "{response}");
    let _ = std::fs::remove_file(file);
    assert_eq!(slack.posted().len(), 1);
}

#[test]
#[ignore = "needs the built binary"]
fn a_reader_gone_before_the_tools_print_is_no_panic() {
    // `mybot --help | grep -q create-table`: grep goes at its first match, and the rest of the
    // text meets a closed pipe. A reader closed before the binary starts makes that certain.
    for args in [
        &["--help"][..],
        &["--version"],
        &["sign", "events/app_mention.json"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(BIN)
            .args(args)
            .env("SLACK_SIGNING_SECRET", "dev-secret")
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?} {stderr}", out.status);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// Every bot's `standin`: the Slack stand-in for a bot run locally outside this checkout. The
/// bot, pointed at it, answers a mention whose message the stand-in was seeded with, and the
/// stand-in prints the reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn the_standin_tool_serves_a_bot_run_locally_and_prints_its_writes() {
    use std::io::{BufRead, BufReader};
    let body = app_mention("EvStandin", "who is there?");
    let file =
        std::env::temp_dir().join(format!("slack-once-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, &body).unwrap();
    let mut standin = Command::new(BIN)
        .args(["standin", "0", "--seed", file.to_str().unwrap()])
        .args([
            "--team",
            "T0001",
            "--app-id",
            "A0001",
            "--bot-user",
            BOT_USER,
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let out = standin.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let first = lines.recv_timeout(Duration::from_secs(10)).unwrap();
    let url = first
        .strip_prefix("Slack stand-in on ")
        .unwrap_or_else(|| panic!("{first}"))
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let bot = BotProcess::spawn(&[
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", url.clone()),
    ]);
    let answer = deliver(&HttpClient::default(), &bot.url(), &body, None).await;
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);
    let printed = std::iter::from_fn(|| lines.recv_timeout(Duration::from_secs(5)).ok())
        .find(|l| l.starts_with("chat.postMessage"));
    // What Slack holds now, served for a person or a script: the seeded message and the reply
    // in its thread, with the app's identity.
    let state_url = format!("{}/_standin/state", url.trim_end_matches("/api"));
    let state = HttpClient::default()
        .request("GET", &state_url, &[], "")
        .await;
    let state: serde_json::Value = serde_json::from_str(&state.body).unwrap();
    let _ = standin.kill();
    let _ = standin.wait();
    let _ = std::fs::remove_file(file);
    let printed = printed.expect("the stand-in prints the bot's reply");
    assert!(printed.contains("channel=C0001"), "{printed}");
    let messages = state["messages"]["C0001"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(messages.len(), 2, "{state}");
    assert_eq!(messages[1]["app_id"], "A0001", "{state}");
    assert_eq!(messages[1]["thread_ts"], messages[0]["ts"], "{state}");
    assert!(
        state["calls"]
            .as_array()
            .is_some_and(|calls| calls.iter().any(|c| c["method"] == "chat.postMessage")),
        "{state}"
    );
}

/// The click sample of the guide (`docs/library.md`, "saved as `click.json`"), as written but
/// for the stand-in's port and the two values it says to fill in, is a click Slack would send:
/// the handoff example, run against `standin` as `docs/local.md` runs a bot, takes it and
/// acknowledges the handoff it posted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn the_guides_click_sample_is_sendable_as_written() {
    use std::io::{BufRead, BufReader};
    let guide =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/library.md")).unwrap();
    let after = guide
        .split_once("saved as `click.json`")
        .expect("the click sample")
        .1;
    let sample = after
        .split_once("```json\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("its JSON block")
        .0
        .to_string();
    let mut standin = Command::new(BIN)
        .args(["standin", "0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = standin.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    let first = lines.next().unwrap().unwrap();
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    let api = first
        .strip_prefix("Slack stand-in on ")
        .unwrap_or_else(|| panic!("{first}"))
        .to_string();
    let host = api.trim_end_matches("/api").to_string();
    let bot = BotProcess::spawn_example(
        "handoff",
        &[],
        &[
            ("SLACK_BOT_TOKEN", TOKEN.to_string()),
            ("SLACK_API_URL", api.clone()),
        ],
    );
    let http = HttpClient::default();
    let command = form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("command", "/handoff"),
            ("text", "<@U0123USER|alice> the database is slow"),
            ("team_id", "T0001TEAM"),
            ("api_app_id", "A0001APP"),
            ("user_id", "U0DAN"),
            ("channel_id", "C0789CHAN"),
            ("trigger_id", "1767225600000.1.0"),
            (
                "response_url",
                &format!("{host}/commands/T0001TEAM/C0789CHAN/1"),
            ),
        ])
        .finish();
    let answer = deliver_form(&http, &bot.url(), &command, None).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let state_url = format!("{host}/_standin/state");
    let mut posted = None;
    for _ in 0..100 {
        let state = http.request("GET", &state_url, &[], "").await;
        let state: serde_json::Value = serde_json::from_str(&state.body).unwrap();
        let ours = state["messages"]["C0789CHAN"]
            .as_array()
            .into_iter()
            .flatten()
            .rfind(|m| m["bot_id"].is_string())
            .cloned();
        if ours.is_some() {
            posted = ours;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let posted = posted.expect("the handoff is posted");
    let ts = posted["ts"].as_str().unwrap().to_string();
    let value = posted["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|b| b["elements"].as_array().into_iter().flatten())
        .find(|e| e["action_id"] == "handoff_acknowledge")
        .and_then(|e| e["value"].as_str())
        .expect("its Acknowledge button")
        .to_string();
    let click: serde_json::Value = serde_json::from_str(
        &sample
            .replace("http://127.0.0.1:4000", &host)
            .replace("MESSAGE_TS", &ts)
            .replace("BUTTON_VALUE", &value),
    )
    .unwrap_or_else(|e| panic!("{e}: {sample}"));
    // As `sign` sends it: the form field `payload`, a fresh trigger_id and response_url.
    let form = slack_once::tools::sign::interaction_form(&click, now_unix() * 1000);
    let answer = deliver_form(&http, &bot.url(), &form, None).await;
    let state = http.request("GET", &state_url, &[], "").await;
    let _ = standin.kill();
    let _ = standin.wait();
    assert_eq!(answer.status, 200, "{}", answer.body);
    let outcome = answer
        .headers
        .get("x-slack-once-outcome")
        .and_then(|v| v.to_str().ok());
    assert_eq!(outcome, Some("answered"), "{:?}", answer.headers);
    let state: serde_json::Value = serde_json::from_str(&state.body).unwrap();
    let updates: Vec<&serde_json::Value> = state["calls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["method"] == "chat.update" && c["args"]["ts"] == ts.as_str())
        .collect();
    assert_eq!(updates.len(), 1, "{state}");
    assert!(
        updates[0]["args"]
            .to_string()
            .contains("Acknowledged by <@U0123USER>"),
        "{state}"
    );
}

#[test]
#[ignore = "needs the built binary"]
fn a_lease_longer_than_slacks_one_minute_retry_allows_is_refused_at_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_slack-once"))
        .env_clear()
        .env("SLACK_SIGNING_SECRET", "s")
        .env("DEDUP_LEASE_SECONDS", "60")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("DEDUP_LEASE_SECONDS is invalid"), "{text}");
    assert!(text.contains("one-minute retry"), "{text}");
}
