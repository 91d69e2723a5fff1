//! The whole path on the in-memory ledger: real signed requests to the app on port 0, replies
//! at a real HTTP stand-in for Slack.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::StatusCode;
use slack_once::app::App;

use crate::helpers::*;

#[tokio::test]
async fn url_verification_is_answered_with_its_challenge() {
    let app = spawn_app().await;
    let answer = app
        .send(r#"{"token":"t","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#, None)
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.json()["challenge"],
        "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    );
    assert!(app.slack.received().is_empty());
}

#[tokio::test]
async fn healthz_answers_once_ready() {
    let app = spawn_app().await;
    let answer = app.http.request("GET", &app.url("/healthz"), &[], "").await;
    assert_eq!(answer.status, StatusCode::OK);
}

#[tokio::test]
async fn a_mention_gets_one_reply_in_its_thread_with_the_bot_token() {
    let app = spawn_app().await;
    let answer = app
        .send(&app_mention("Ev0001", "what time is it?"), None)
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.outcome(), "answered");

    let posted = app.slack.posted();
    assert_eq!(posted.len(), 1);
    let post = &posted[0];
    assert_eq!(
        post.authorization.as_deref(),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert_eq!(post.body["channel"], "C0001");
    assert_eq!(post.body["thread_ts"], ts_of("Ev0001").as_str());
    assert!(
        post.body["text"]
            .as_str()
            .unwrap()
            .contains("what time is it?")
    );
    assert_eq!(post.body["metadata"]["event_type"], "slack_once_reply");
    let names = &post.body["metadata"]["event_payload"]["slack_once"];
    assert_eq!(names["event_id"], "Ev0001");
    assert_eq!(names["key"], mention_key("Ev0001").as_str());
    assert_eq!(names["step"], 1);
}

#[tokio::test]
async fn the_original_and_three_retries_get_exactly_one_reply() {
    let app = spawn_app().await;
    let body = app_mention("Ev0002", "hello");
    let first = app.send(&body, None).await;
    assert_eq!(first.outcome(), "answered");
    for retry in 1..=3 {
        let answer = app.send(&body, Some(retry)).await;
        assert_eq!(
            answer.status,
            StatusCode::OK,
            "retry {retry}: {}",
            answer.body
        );
        assert_eq!(answer.outcome(), "duplicate");
    }
    assert_eq!(app.slack.posted().len(), 1);
}

#[tokio::test]
async fn four_concurrent_copies_get_exactly_one_reply() {
    let app = spawn_app().await;
    // A slow Slack keeps the first claim live while the copies arrive.
    app.slack
        .script([SlackFailure::Slow(Duration::from_millis(300))]);
    let body = app_mention("Ev0003", "hello");
    let (a, b, c, d) = tokio::join!(
        app.send(&body, None),
        app.send(&body, Some(1)),
        app.send(&body, Some(2)),
        app.send(&body, Some(3)),
    );
    let answers = [a, b, c, d];
    let answered = answers.iter().filter(|a| a.outcome() == "answered").count();
    assert_eq!(
        answered,
        1,
        "{:?}",
        answers.iter().map(|a| &a.body).collect::<Vec<_>>()
    );
    for a in &answers {
        // The others found the event done (200) or a live claim (409, so Slack retries).
        assert!(
            a.status == StatusCode::OK || a.status == StatusCode::CONFLICT,
            "{} {}",
            a.status,
            a.body
        );
    }
    // Slack's next retry finds it done.
    assert_eq!(app.send(&body, Some(3)).await.outcome(), "duplicate");
    assert_eq!(app.slack.posted().len(), 1);
}

#[tokio::test]
async fn a_copy_that_finds_a_live_claim_gets_409_and_no_reply() {
    let app = spawn_app().await;
    app.slack
        .script([SlackFailure::Slow(Duration::from_millis(800))]);
    let body = app_mention("Ev0004", "slow");
    let (first, copy) = tokio::join!(app.send(&body, None), async {
        // Once the first holds the claim and is posting (Slack takes 800 ms to answer).
        assert!(eventually(Duration::from_secs(5), || !app.slack.received().is_empty()).await);
        app.send(&body, Some(1)).await
    });
    assert_eq!(first.outcome(), "answered");
    assert_eq!(copy.status, StatusCode::CONFLICT, "{}", copy.body);
    assert!(copy.headers.get("x-slack-no-retry").is_none());
    assert_eq!(app.slack.posted().len(), 1);
}

#[tokio::test]
async fn the_bots_own_messages_and_edits_are_not_answered() {
    let app = spawn_app().await;
    let own = direct_message("Ev0005", BOT_USER, "I am the bot");
    let answer = app.send(&own, None).await;
    assert_eq!(
        (answer.status, answer.outcome().as_str()),
        (StatusCode::OK, "skipped")
    );

    let mut with_bot_id: serde_json::Value =
        serde_json::from_str(&direct_message("Ev0006", "U0001", "hi")).unwrap();
    with_bot_id["event"]["bot_id"] = "B0001".into();
    let answer = app.send(&with_bot_id.to_string(), None).await;
    assert_eq!(answer.outcome(), "skipped");

    let mut edit: serde_json::Value =
        serde_json::from_str(&direct_message("Ev0007", "U0001", "hi")).unwrap();
    edit["event"]["subtype"] = "message_changed".into();
    let answer = app.send(&edit.to_string(), None).await;
    assert_eq!(answer.outcome(), "skipped");

    assert!(app.slack.received().is_empty());
}

#[tokio::test]
async fn a_direct_message_is_answered_in_the_conversation() {
    let app = spawn_app().await;
    let answer = app
        .send(&direct_message("Ev0008", "U0001", "ping"), None)
        .await;
    assert_eq!(answer.outcome(), "answered");
    let posted = app.slack.posted();
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0].body["channel"], "D0001");
    assert!(posted[0].body.get("thread_ts").is_none());
}

#[tokio::test]
async fn app_rate_limited_and_unknown_envelopes_are_acknowledged() {
    let app = spawn_app().await;
    let limited = app
        .send(r#"{"token":"t","type":"app_rate_limited","team_id":"T1","minute_rate_limited":1518467820,"api_app_id":"A1"}"#, None)
        .await;
    assert_eq!(
        (limited.status, limited.outcome().as_str()),
        (StatusCode::OK, "app_rate_limited")
    );
    let unknown = app.send(r#"{"type":"brand_new_thing"}"#, None).await;
    assert_eq!(
        (unknown.status, unknown.outcome().as_str()),
        (StatusCode::OK, "ignored")
    );
    assert!(app.slack.received().is_empty());
}

// ---------------------------------------------------------------- Slack failures

#[tokio::test]
async fn a_429_is_waited_out_within_the_deadline_and_then_answered() {
    let app = spawn_app().await;
    app.slack.script([SlackFailure::RateLimited(1)]);
    let started = std::time::Instant::now();
    let answer = app.send(&app_mention("Ev0010", "busy"), None).await;
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After was honoured"
    );
    assert_eq!(app.slack.received().len(), 2);
    assert_eq!(app.slack.posted().len(), 1);
}

#[tokio::test]
async fn a_429_longer_than_the_lease_releases_the_claim_for_the_next_copy() {
    let app = spawn_app_with(Options {
        vars: vec![("DEDUP_LEASE_SECONDS", "2".into())],
        ..Default::default()
    })
    .await;
    app.slack.script([SlackFailure::RateLimited(30)]);
    let body = app_mention("Ev0011", "busy");
    let answer = app.send(&body, None).await;
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY, "{}", answer.body);
    assert_eq!(app.slack.posted().len(), 0);
    // Released: Slack's retry takes it over at once and answers.
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(retry.outcome(), "answered", "{}", retry.body);
    assert_eq!(app.slack.posted().len(), 1);
}

#[tokio::test]
async fn a_slack_call_still_running_at_the_deadline_is_abandoned_and_released() {
    let app = spawn_app_with(Options {
        vars: vec![("DEDUP_LEASE_SECONDS", "2".into())],
        ..Default::default()
    })
    .await;
    app.slack
        .script([SlackFailure::Slow(Duration::from_secs(10))]);
    let body = app_mention("Ev0013", "slow");
    let started = std::time::Instant::now();
    let answer = app.send(&body, None).await;
    let took = started.elapsed();
    assert_eq!(
        answer.status,
        StatusCode::GATEWAY_TIMEOUT,
        "{}",
        answer.body
    );
    assert!(
        took < Duration::from_secs(2),
        "processing outlived its 2 s lease: {took:?}"
    );
    // The claim was released: the next copy answers at once.
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(retry.outcome(), "answered", "{}", retry.body);
    assert_eq!(app.slack.posted().len(), 1);
}

#[tokio::test]
async fn without_a_bot_token_local_mode_logs_the_reply_instead_of_posting() {
    let app = spawn_app_with(Options {
        vars: vec![("SLACK_BOT_TOKEN", String::new())],
        ..Default::default()
    })
    .await;
    let answer = app.send(&app_mention("Ev0014", "hi"), None).await;
    assert_eq!(answer.outcome(), "answered");
    assert!(app.slack.received().is_empty());
}

// ---------------------------------------------------------------- takeovers look before posting

#[tokio::test]
async fn a_takeover_finds_the_earlier_claims_reply_in_slack_and_does_not_post_again() {
    let app = spawn_app().await;
    // Slack posted the message but answered internal_error: the first delivery cannot know.
    app.slack
        .script([SlackFailure::MadeThenCode("internal_error")]);
    let body = app_mention("Ev0020", "did it post?");
    let first = app.send(&body, None).await;
    assert_eq!(first.status, StatusCode::BAD_GATEWAY, "{}", first.body);
    assert_eq!(app.slack.posted().len(), 1);

    let retry = app.send(&body, Some(1)).await;
    assert_eq!(
        (retry.status, retry.outcome().as_str()),
        (StatusCode::OK, "recovered"),
        "{}",
        retry.body
    );
    assert_eq!(app.slack.lookups(), 1);
    assert_eq!(app.slack.posted().len(), 1, "no second answer");
    assert_eq!(
        app.send(&body, Some(2)).await.outcome(),
        "duplicate",
        "marked done"
    );
}

#[tokio::test]
async fn a_first_claim_never_looks_in_slack() {
    let app = spawn_app().await;
    app.send(&app_mention("Ev0021", "hi"), None).await;
    app.send(&direct_message("Ev0022", "U0001", "hi"), None)
        .await;
    assert_eq!(app.slack.lookups(), 0);
    assert_eq!(app.slack.posted().len(), 2);
}

#[tokio::test]
async fn a_takeover_in_a_direct_message_looks_in_the_conversations_history() {
    let app = spawn_app().await;
    app.slack
        .script([SlackFailure::MadeThenCode("fatal_error")]);
    let body = direct_message("Ev0023", "U0001", "ping");
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    assert_eq!(app.send(&body, Some(1)).await.outcome(), "recovered");
    assert_eq!(app.slack.posted().len(), 1);
}

/// An event as the bot saw it: type, user, channel, the raw event.
type Seen = (String, Option<String>, Option<String>, serde_json::Value);

/// An app that records what each event looked like to it, and writes nothing.
fn recorder() -> (App, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = App::new().any_event({
        let seen = seen.clone();
        move |_ctx, e| {
            seen.lock().unwrap().push((
                e.kind.clone(),
                e.user.clone(),
                e.channel.clone(),
                e.raw.clone(),
            ));
            async { Ok(()) }
        }
    });
    (app, seen)
}

#[tokio::test]
async fn every_documented_event_shape_is_accepted_and_reaches_the_bot_whole() {
    let (bot, recorder) = recorder();
    let app = spawn_bot(bot).await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/events");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 12, "at least twelve event types: {files:?}");
    for file in &files {
        let body = std::fs::read_to_string(file).unwrap();
        let sent: serde_json::Value = serde_json::from_str(&body).unwrap();
        let answer = app.send(&body, None).await;
        assert_eq!(
            answer.status,
            StatusCode::OK,
            "{}: {}",
            file.display(),
            answer.body
        );
        assert_eq!(answer.outcome(), "no_reply", "{}", file.display());
        let seen = recorder.lock().unwrap().last().cloned().unwrap();
        assert_eq!(seen.0, sent["event"]["type"].as_str().unwrap());
        assert_eq!(seen.3, sent["event"], "{}: the whole event", file.display());
    }
    let seen = recorder.lock().unwrap().clone();
    let by_kind = |kind: &str| seen.iter().find(|s| s.0 == kind).cloned().unwrap();
    // Object-valued fields read as ids.
    assert_eq!(by_kind("team_join").1.as_deref(), Some("W0NEWUSER"));
    assert_eq!(by_kind("user_change").1.as_deref(), Some("U0CHANGED"));
    assert_eq!(by_kind("channel_created").2.as_deref(), Some("C0NEWCHAN"));
    assert_eq!(by_kind("channel_rename").2.as_deref(), Some("C0RENAMED"));
    assert_eq!(by_kind("im_created").2.as_deref(), Some("D0NEWIM"));
    assert_eq!(by_kind("reaction_added").2.as_deref(), Some("C0789CHAN"));
    assert_eq!(app.slack.received().len(), 0);
}

#[tokio::test]
async fn the_reference_bot_never_pings_a_channel_or_a_group() {
    let app = spawn_app().await;
    let body = app_mention(
        "EvPing",
        "<!channel> <!here> <!subteam^S0123|@oncall> wake up",
    );
    assert_eq!(app.send(&body, None).await.outcome(), "answered");
    let text = app.slack.posted()[0].body["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!text.contains("<!"), "{text}");
    assert!(text.contains("wake up"), "{text}");
}
