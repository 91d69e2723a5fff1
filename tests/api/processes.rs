//! Several processes of the built binary sharing one DynamoDB table: the deployment's shape.

use std::time::Duration;

use http::StatusCode;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn four_processes_receiving_the_same_copies_concurrently_answer_each_event_once() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let slack = SlackStandin::start().await;
    let vars = bot_vars(&slack, &endpoint, &table);
    let bots: Vec<BotProcess> = (0..4).map(|_| BotProcess::spawn(&vars)).collect();
    let urls: Vec<String> = bots.iter().map(BotProcess::url).collect();
    let http = HttpClient::default();

    const EVENTS: usize = 25;
    let mut tasks = Vec::new();
    for e in 0..EVENTS {
        let body = app_mention(&format!("EvProc{e:03}"), "hello");
        // The original and three retries, each to a different process, all at once.
        for copy in 0..4usize {
            let (http, url, body) = (http.clone(), urls[(e + copy) % 4].clone(), body.clone());
            let retry = (copy > 0).then_some(copy as u32);
            tasks.push(tokio::spawn(async move {
                deliver(&http, &url, &body, retry).await
            }));
        }
    }
    for task in tasks {
        let answer = task.await.unwrap();
        assert!(
            answer.status == StatusCode::OK || answer.status == StatusCode::CONFLICT,
            "{} {}",
            answer.status,
            answer.body
        );
    }
    let per_event = slack.posts_per_event();
    assert_eq!(per_event.len(), EVENTS, "every event answered");
    assert!(per_event.values().all(|&n| n == 1), "{per_event:?}");
    assert_eq!(slack.posted().len(), EVENTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_claimant_killed_before_replying_is_taken_over_after_its_lease_and_answered_once() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let slack = SlackStandin::start().await;
    let mut vars = bot_vars(&slack, &endpoint, &table);
    vars.push(("DEDUP_LEASE_SECONDS", "2".into()));
    let mut a = BotProcess::spawn(&vars);
    let b = BotProcess::spawn(&vars);
    let http = HttpClient::default();
    let body = app_mention("EvCrash", "are you there?");

    // A claims, then its Slack call hangs: kill it there, after the claim, before any reply.
    slack.script([SlackFailure::Unanswered]);
    let url_a = a.url();
    let (h, bd) = (http.clone(), body.clone());
    let original = tokio::spawn(async move {
        let mut headers = signed_headers(SECRET, now_unix(), bd.as_bytes());
        headers.push(("connection".into(), "close".into()));
        h.try_request("POST", &url_a, &headers, bd.into_bytes())
            .await
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while slack.received().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "A never called Slack:\n{}",
            a.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.kill();
    assert!(
        original.await.unwrap().is_err(),
        "the killed process never answered"
    );

    // Slack's first retry arrives at once: the lease is live, so B must not answer.
    let retry1 = deliver(&http, &b.url(), &body, Some(1)).await;
    assert_eq!(retry1.status, StatusCode::CONFLICT, "{}", retry1.body);

    // A later retry, after the lease: B takes the event over and answers once.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let retry2 = deliver(&http, &b.url(), &body, Some(2)).await;
    assert_eq!(retry2.outcome(), "answered", "{}\n{}", retry2.body, b.log());
    let retry3 = deliver(&http, &b.url(), &body, Some(3)).await;
    assert_eq!(retry3.outcome(), "duplicate");
    assert_eq!(slack.posted().len(), 1);
    assert_eq!(slack.posts_per_event()["EvCrash"], 1);
    let item = fresh_ledger_view(&endpoint, &table, &mention_key("EvCrash")).await;
    assert_eq!(
        item["attempts"].as_n().unwrap(),
        "2",
        "the takeover counted"
    );
}

async fn fresh_ledger_view(
    endpoint: &str,
    table: &str,
    event_id: &str,
) -> std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue> {
    slack_once::ledger::DynamoLedger::new(dynamodb_client(endpoint), table)
        .get_item(event_id)
        .await
        .unwrap()
        .expect("the item exists")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn with_dynamodb_stopped_deliveries_get_503_and_after_a_restart_the_retry_is_answered_once() {
    let mut db = PrivateDynamoDb::start();
    let endpoint = db.endpoint();
    let client = dynamodb_client(&endpoint);
    slack_once::ledger::DynamoLedger::create_table(&client, "ledger")
        .await
        .unwrap();
    let slack = SlackStandin::start().await;
    let bot = BotProcess::spawn(&bot_vars(&slack, &endpoint, "ledger"));
    let http = HttpClient::default();

    let before = app_mention("EvOutage1", "before the outage");
    assert_eq!(
        deliver(&http, &bot.url(), &before, None).await.outcome(),
        "answered"
    );

    db.stop();
    let during = app_mention("EvOutage2", "during the outage");
    let answer = deliver(&http, &bot.url(), &during, None).await;
    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        answer.body
    );
    let answer = deliver(&http, &bot.url(), &before, Some(1)).await;
    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        answer.body
    );
    assert_eq!(slack.posted().len(), 1, "never a reply without a claim");

    db.restart();
    let retry = deliver(&http, &bot.url(), &during, Some(1)).await;
    assert_eq!(retry.outcome(), "answered", "{}\n{}", retry.body, bot.log());
    assert_eq!(
        deliver(&http, &bot.url(), &before, Some(2)).await.outcome(),
        "duplicate"
    );
    let per_event = slack.posts_per_event();
    assert_eq!((per_event["EvOutage1"], per_event["EvOutage2"]), (1, 1));
}
