//! Deploy-time guarantees: old and new versions overlapping on one table answer each event
//! once; the Slack app manifest subscribes to what the bot answers.

use std::time::Duration;

use http::StatusCode;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_and_new_versions_overlapping_on_one_table_answer_each_event_once() {
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
    let old = BotProcess::spawn(&with_version("1"));
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

#[test]
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
            "message.im",
            "app_uninstalled",
            "tokens_revoked"
        ])
    );
    let scopes = &manifest["oauth_config"]["scopes"]["bot"];
    assert_eq!(
        scopes,
        &serde_json::json!([
            "app_mentions:read",
            "chat:write",
            "commands",
            "im:history",
            "mpim:history",
            "im:write",
            "channels:history",
            "groups:history"
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
    assert_eq!(
        manifest["features"]["shortcuts"][0]["callback_id"],
        "new_note"
    );
    assert_eq!(
        manifest["features"]["app_home"]["messages_tab_enabled"], true,
        "DMs need the messages tab"
    );
}
