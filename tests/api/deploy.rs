//! Deploy-time guarantees: the previous release (its own binary, built from this repository's
//! history by `scripts/previous-release.sh`) and this one overlapping on one table, and on one
//! queue in deferred mode, answer each request once; the Slack app manifest subscribes to what
//! the bot answers.

use std::time::Duration;

use http::StatusCode;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the previous release and the built binary"]
async fn the_previous_release_and_this_one_overlapping_on_one_table_answer_each_event_once() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let slack = SlackStandin::start().await;
    let mut vars = dynamodb_env(&endpoint);
    vars.extend([
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
        ("DEDUP_TABLE", table),
    ]);
    let with_version = |v: &str| {
        let mut vars = vars.clone();
        vars.push(("AWS_LAMBDA_FUNCTION_VERSION", v.to_string()));
        vars
    };
    let old = BotProcess::spawn_previous(&[], &with_version("1"));
    let new = BotProcess::spawn(&with_version("2"));
    let http = HttpClient::default();

    // A linear traffic shift: event i goes to the new version with probability i/N; Slack's
    // retry of it, sent at the same moment, lands on the other version.
    const EVENTS: usize = 40;
    let mut tasks = Vec::new();
    for i in 0..EVENTS {
        let body = app_mention(&format!("EvShift{i:03}"), "during the deploy");
        let to_new = (i * 7919 % EVENTS) < i;
        let (first, second) = if to_new {
            (new.url(), old.url())
        } else {
            (old.url(), new.url())
        };
        for (url, retry) in [(first, None), (second, Some(1))] {
            let (http, body) = (http.clone(), body.clone());
            tasks.push(tokio::spawn(async move {
                deliver(&http, &url, &body, retry).await
            }));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for task in tasks {
        let answer = task.await.unwrap();
        assert!(
            matches!(answer.status, StatusCode::OK | StatusCode::CONFLICT),
            "{}",
            answer.body
        );
    }
    // The old version drains and stops; late retries reach the new one and find the events done.
    drop(old);
    for i in (0..EVENTS).step_by(5) {
        let body = app_mention(&format!("EvShift{i:03}"), "during the deploy");
        let answer = deliver(&http, &new.url(), &body, Some(2)).await;
        assert_eq!(answer.outcome(), "duplicate", "{}", answer.body);
    }

    let per_event = slack.posts_per_event();
    assert_eq!(per_event.len(), EVENTS, "every event answered");
    assert!(per_event.values().all(|&n| n == 1), "{per_event:?}");
    let versions: std::collections::HashSet<String> = slack
        .posted()
        .iter()
        .map(|p| {
            p.body["metadata"]["event_payload"]["slack_once"]["version"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        versions.len(),
        2,
        "both versions answered some events: {versions:?}"
    );
}

/// How many of this app's messages in Slack contain `text`.
fn said(slack: &SlackStandin, text: &str) -> usize {
    slack
        .posted()
        .iter()
        .filter(|p| p.body["text"].as_str().is_some_and(|t| t.contains(text)))
        .count()
}

/// Deferred mode during a gradual deploy: the previous release's ingress and worker and this
/// release's on one queue and one table. What this release's ingress queues, the previous
/// release's worker answers, and the other way round; then, with both workers on the queue,
/// each request and Slack's retry of it sent to different ingresses, every request is answered
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the previous release and the built binary"]
async fn the_previous_release_and_this_one_share_a_queue_and_a_table_and_answer_each_request_once()
{
    let stack = DeferredStack::start(5).await;
    let labelled = |mut vars: Vec<(&'static str, String)>, version: &str| {
        vars.push(("AWS_LAMBDA_FUNCTION_VERSION", version.to_string()));
        vars
    };
    let old_ingress = BotProcess::spawn_previous(&[], &labelled(stack.ingress_vars(), "1"));
    let new_ingress = BotProcess::spawn(&labelled(stack.ingress_vars(), "2"));
    let http = HttpClient::default();
    let slack = &stack.slack;
    // What (url, mention's event id, command's text) each phase sends.
    let send = |ingress: String, other: String, tag: String| {
        let http = http.clone();
        let body = app_mention(&format!("Ev{tag}"), &format!("mention {tag}"));
        let form = command_form(slack, "/once", &format!("command {tag}"));
        async move {
            for (url, retry) in [(&ingress, None), (&other, Some(1))] {
                let answer = deliver(&http, url, &body, retry).await;
                assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
                let answer = deliver_form(&http, url, &form, retry).await;
                assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
            }
        }
    };
    let answered = |tags: &[String]| {
        tags.iter().all(|tag| {
            said(slack, &format!("mention {tag}")) >= 1
                && said(slack, &format!("command {tag}")) >= 1
        })
    };
    let version_of = |tag: &str| -> Vec<String> {
        slack
            .posted()
            .iter()
            .filter(|p| {
                p.body["text"]
                    .as_str()
                    .is_some_and(|t| t.contains(&format!("mention {tag}")))
            })
            .map(|p| {
                p.body["metadata"]["event_payload"]["slack_once"]["version"]
                    .as_str()
                    .unwrap_or("?")
                    .to_string()
            })
            .collect()
    };

    // This release's ingress queues (its retry reaching the previous release's); only the
    // previous release's worker receives.
    let tags: Vec<String> = (0..4).map(|i| format!("ToOld{i:02}")).collect();
    for tag in &tags {
        send(new_ingress.url(), old_ingress.url(), tag.clone()).await;
    }
    let mut old_worker =
        BotProcess::spawn_previous(&["worker"], &labelled(stack.worker_vars(30, 5), "1"));
    assert!(
        eventually(Duration::from_secs(20), || answered(&tags)).await,
        "the previous release's worker answered what this release queued: {:?}\n{}",
        slack
            .posted()
            .iter()
            .map(|p| p.body["text"].clone())
            .collect::<Vec<_>>(),
        old_worker.log()
    );
    for tag in &tags {
        assert_eq!(version_of(tag), ["1"], "{tag}");
    }
    old_worker.terminate();
    let _ = old_worker.child.wait();

    // The previous release's ingress queues; only this release's worker receives.
    let back: Vec<String> = (0..4).map(|i| format!("ToNew{i:02}")).collect();
    for tag in &back {
        send(old_ingress.url(), new_ingress.url(), tag.clone()).await;
    }
    let new_worker = BotProcess::spawn_worker(&labelled(stack.worker_vars(30, 5), "2"));
    assert!(
        eventually(Duration::from_secs(20), || answered(&back)).await,
        "this release's worker answered what the previous one queued\n{}",
        new_worker.log()
    );
    for tag in &back {
        assert_eq!(version_of(tag), ["2"], "{tag}");
    }

    // Both workers on the queue, each request to one ingress and its retry to the other.
    let _old_worker =
        BotProcess::spawn_previous(&["worker"], &labelled(stack.worker_vars(30, 5), "1"));
    let both: Vec<String> = (0..12).map(|i| format!("Both{i:02}")).collect();
    for (i, tag) in both.iter().enumerate() {
        let (first, second) = if i % 2 == 0 {
            (old_ingress.url(), new_ingress.url())
        } else {
            (new_ingress.url(), old_ingress.url())
        };
        send(first, second, tag.clone()).await;
    }
    assert!(
        eventually(Duration::from_secs(30), || answered(&both)).await,
        "every request answered"
    );
    // Slack's retries and the queue's copies have all been taken by now, or find the requests
    // done: nothing more comes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for tag in tags.iter().chain(&back).chain(&both) {
        assert_eq!(said(slack, &format!("mention {tag}")), 1, "{tag}");
        assert_eq!(said(slack, &format!("command {tag}")), 1, "{tag}");
    }
}

#[test]
#[ignore = "needs the built binary"]
fn the_slack_app_manifest_subscribes_to_what_the_bot_answers() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/slack-app-manifest.json");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let events = &manifest["settings"]["event_subscriptions"]["bot_events"];
    // The last two tell a distributed app to forget an installation (acknowledged otherwise).
    assert_eq!(
        events,
        &serde_json::json!([
            "app_mention",
            "app_uninstalled",
            "message.im",
            "tokens_revoked"
        ])
    );
    let scopes = &manifest["oauth_config"]["scopes"]["bot"];
    assert_eq!(
        scopes,
        &serde_json::json!([
            "app_mentions:read",
            "channels:history",
            "chat:write",
            "commands",
            "groups:history",
            "im:history",
            "im:write",
            "mpim:history"
        ]),
        "commands for /once; the history scopes for the look-ups of a takeover; im:write for \
         conversations.open, which finds the DM of a post made to a user's id"
    );
    // One Request URL for events, the command and interactivity.
    let urls = [
        &manifest["settings"]["event_subscriptions"]["request_url"],
        &manifest["settings"]["interactivity"]["request_url"],
        &manifest["features"]["slash_commands"][0]["url"],
    ];
    for url in urls {
        let url = url.as_str().unwrap();
        assert!(
            url.starts_with("https://") && url.ends_with("/slack/events"),
            "{url}"
        );
    }
    assert_eq!(manifest["settings"]["interactivity"]["is_enabled"], true);
    assert_eq!(
        manifest["features"]["slash_commands"][0]["command"],
        "/once"
    );
    // The reference bot handles no shortcut (examples/modal.rs's `new_note` is that example's:
    // `cargo run --example modal -- manifest` declares it).
    assert!(manifest["features"]["shortcuts"].is_null());
    let modal = std::process::Command::new(
        std::env::current_exe()
            .unwrap()
            .parent()
            .and_then(|deps| deps.parent())
            .map(|dir| dir.join("examples").join("modal"))
            .unwrap(),
    )
    .arg("manifest")
    .output()
    .expect("the modal example runs");
    let modal: serde_json::Value = serde_json::from_slice(&modal.stdout).unwrap();
    assert_eq!(modal["features"]["shortcuts"][0]["callback_id"], "new_note");
    assert_eq!(modal["features"]["shortcuts"][0]["type"], "global");
    assert_eq!(
        manifest["features"]["app_home"]["messages_tab_enabled"], true,
        "DMs need the messages tab"
    );
}
