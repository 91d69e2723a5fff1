//! Processes of the built binary on PostgreSQL (`DATABASE_URL`, and no AWS variable at all):
//! several instances sharing one database, a claimant killed, the server stopped and started
//! again, deferred mode with the queue in the database (a worker killed mid-post, a dead letter
//! redriven), and a schema behind the release.

use std::time::Duration;

use http::StatusCode;

use crate::deferred::deliver_as_slack;
use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL and the built binary"]
async fn four_processes_on_one_database_receiving_the_same_copies_answer_each_event_once() {
    let url = fresh_schema_url().await;
    let slack = SlackStandin::start().await;
    let vars = postgres_bot_vars(&slack, &url);
    let bots: Vec<BotProcess> = (0..4).map(|_| BotProcess::spawn(&vars)).collect();
    let urls: Vec<String> = bots.iter().map(BotProcess::url).collect();
    let http = HttpClient::default();

    const EVENTS: usize = 25;
    let mut tasks = Vec::new();
    for e in 0..EVENTS {
        let body = app_mention(&format!("EvPg{e:03}"), "hello");
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
            "{} {}\n{}",
            answer.status,
            answer.body,
            bots[0].log()
        );
    }
    let per_event = slack.posts_per_event();
    assert_eq!(per_event.len(), EVENTS, "every event answered");
    assert!(per_event.values().all(|&n| n == 1), "{per_event:?}");
    let log = bots[0].log();
    assert!(log.contains("ledger: PostgreSQL"), "{log}");
    assert!(!log.contains("DynamoDB"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL and the built binary"]
async fn a_claimant_killed_before_replying_on_postgresql_is_taken_over_and_answered_once() {
    let url = fresh_schema_url().await;
    let slack = SlackStandin::start().await;
    let mut vars = postgres_bot_vars(&slack, &url);
    vars.push(("DEDUP_LEASE_SECONDS", "2".into()));
    let mut a = BotProcess::spawn(&vars);
    let b = BotProcess::spawn(&vars);
    let http = HttpClient::default();
    let body = app_mention("EvPgCrash", "are you there?");

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
    assert!(
        eventually(Duration::from_secs(10), || !slack.received().is_empty()).await,
        "A never called Slack:\n{}",
        a.log()
    );
    a.kill();
    assert!(
        original.await.unwrap().is_err(),
        "the killed process never answered"
    );

    // Slack's first retry at once: the lease is live (on the database's clock).
    let retry1 = deliver(&http, &b.url(), &body, Some(1)).await;
    assert_eq!(retry1.status, StatusCode::CONFLICT, "{}", retry1.body);
    // After the lease: B takes it over, looks in Slack (the hung call never posted) and
    // answers once.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let retry2 = deliver(&http, &b.url(), &body, Some(2)).await;
    assert_eq!(retry2.outcome(), "answered", "{}\n{}", retry2.body, b.log());
    let retry3 = deliver(&http, &b.url(), &body, Some(3)).await;
    assert_eq!(retry3.outcome(), "duplicate");
    assert_eq!(slack.posts_per_event()["EvPgCrash"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL and the built binary"]
async fn with_postgresql_stopped_deliveries_get_503_and_after_a_restart_the_retry_is_answered_once()
{
    let mut server = PrivatePostgres::start();
    let slack = SlackStandin::start().await;
    let bot = BotProcess::spawn(&postgres_bot_vars(&slack, &server.url()));
    let http = HttpClient::default();

    let before = app_mention("EvPgOutage1", "before the outage");
    assert_eq!(
        deliver(&http, &bot.url(), &before, None).await.outcome(),
        "answered",
        "{}",
        bot.log()
    );

    server.stop();
    let during = app_mention("EvPgOutage2", "during the outage");
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

    // The same process, its pool's connections broken by the restart, answers the retry.
    server.restart();
    let retry = deliver(&http, &bot.url(), &during, Some(1)).await;
    assert_eq!(retry.outcome(), "answered", "{}\n{}", retry.body, bot.log());
    assert_eq!(
        deliver(&http, &bot.url(), &before, Some(2)).await.outcome(),
        "duplicate"
    );
    let per_event = slack.posts_per_event();
    assert_eq!((per_event["EvPgOutage1"], per_event["EvPgOutage2"]), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL and the built binary"]
async fn a_release_told_not_to_migrate_refuses_a_schema_behind_it_and_create_table_migrates_it() {
    let url = fresh_schema_url().await;
    let slack = SlackStandin::start().await;
    let mut vars = postgres_bot_vars(&slack, &url);
    vars.push(("DATABASE_MIGRATE", "off".into()));
    let refused = run_binary(&[], &vars);
    let said = format!("{}{}", refused.stdout, refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(said.contains("slack-once create-table"), "{said}");
    assert!(!said.contains("listening"), "{said}");
    let migrated = run_binary(&["create-table"], &[("DATABASE_URL", url.clone())]);
    assert_eq!(migrated.status.code(), Some(0), "{}", migrated.stderr);
    assert!(migrated.stdout.contains("migrated"), "{}", migrated.stdout);
    let again = run_binary(&["create-table"], &[("DATABASE_URL", url.clone())]);
    assert!(again.stdout.contains("already"), "{}", again.stdout);
    let bot = BotProcess::spawn(&vars);
    let http = HttpClient::default();
    let answer = deliver(&http, &bot.url(), &app_mention("EvPgMigrated", "hi"), None).await;
    assert_eq!(answer.outcome(), "answered", "{}", bot.log());
}

/// Deferred mode with the queue in the database: an ingress and workers, nothing of AWS.
struct DeferredOnPostgres {
    slack: SlackStandin,
    url: String,
    ingress: BotProcess,
}

impl DeferredOnPostgres {
    async fn start() -> Self {
        let url = fresh_schema_url().await;
        let slack = SlackStandin::start().await;
        let ingress = BotProcess::spawn(&[
            ("DATABASE_URL", url.clone()),
            ("WORK_QUEUE_NAME", "work".into()),
        ]);
        Self {
            slack,
            url,
            ingress,
        }
    }

    fn worker_vars(&self, lease_s: u64, max_receives: u32) -> Vec<(&'static str, String)> {
        let mut vars = postgres_bot_vars(&self.slack, &self.url);
        vars.extend([
            ("WORK_QUEUE_NAME", "work".to_string()),
            ("DEDUP_LEASE_SECONDS", lease_s.to_string()),
            ("WORK_QUEUE_MAX_RECEIVES", max_receives.to_string()),
            ("WORK_QUEUE_POLL_SECONDS", "1".to_string()),
        ]);
        vars
    }

    fn worker(&self, lease_s: u64, max_receives: u32) -> BotProcess {
        BotProcess::spawn_worker(&self.worker_vars(lease_s, max_receives))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL and the built binary"]
async fn deferred_mode_on_postgresql_answers_copies_once_through_a_worker_killed_mid_post() {
    let d = DeferredOnPostgres::start().await;
    let http = HttpClient::default();
    // Slack posts, and its answer never comes back: then the worker dies.
    d.slack.script([SlackFailure::MadeUnanswered]);
    let mut a = d.worker(3, 5);
    let answer = deliver_as_slack(&http, &d.ingress.url(), &app_mention("EvPgKilled", "x")).await;
    assert_eq!(answer.outcome(), "queued", "{}", d.ingress.log());
    assert!(
        eventually(Duration::from_secs(20), || !d.slack.received().is_empty()).await,
        "{}",
        a.log()
    );
    a.kill();
    let b = d.worker(3, 5);
    let c = d.worker(3, 5);
    // More events, each queued with Slack's copies, while the message comes back to b or c.
    for e in 0..10 {
        let body = app_mention(&format!("EvPgQueued{e}"), "hello");
        for retry in [None, Some(1), Some(2)] {
            let answer = deliver(&http, &d.ingress.url(), &body, retry).await;
            assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        }
    }
    assert!(
        eventually(Duration::from_secs(40), || d.slack.posts_per_event().len()
            == 11)
        .await,
        "{:?}\n{}\n{}",
        d.slack.posts_per_event(),
        b.log(),
        c.log()
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let per_event = d.slack.posts_per_event();
    assert!(per_event.values().all(|&n| n == 1), "{per_event:?}");
    assert_eq!(
        per_event["EvPgKilled"], 1,
        "found in Slack, not posted again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL and the built binary"]
async fn a_dead_letter_in_postgresql_is_redriven_and_answered_once() {
    let d = DeferredOnPostgres::start().await;
    d.slack.outage(Duration::from_secs(3600));
    let worker = d.worker(1, 3);
    let http = HttpClient::default();
    let answer = deliver_as_slack(&http, &d.ingress.url(), &app_mention("EvPgDead", "x")).await;
    assert_eq!(answer.outcome(), "queued");
    let redrive_vars = [
        ("DATABASE_URL", d.url.clone()),
        ("WORK_QUEUE_NAME", "work".to_string()),
    ];
    assert!(
        eventually(Duration::from_secs(40), || {
            run_binary(&["redrive", "--dry-run"], &redrive_vars)
                .stdout
                .contains("1 would move")
        })
        .await,
        "{}",
        worker.log()
    );
    assert_eq!(d.slack.posted().len(), 0);
    assert_eq!(d.slack.received().len(), 3, "one post attempt per receive");

    // Slack is back; an operator redrives the dead letter, twice (the second finds none).
    d.slack.outage(Duration::ZERO);
    let redriven = run_binary(&["redrive"], &redrive_vars);
    assert_eq!(redriven.status.code(), Some(0), "{}", redriven.stderr);
    assert!(
        eventually(Duration::from_secs(20), || d.slack.posted().len() == 1).await,
        "the redriven event is answered:\n{}",
        worker.log()
    );
    let again = run_binary(&["redrive"], &redrive_vars);
    assert_eq!(again.status.code(), Some(0), "{}", again.stderr);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(d.slack.posts_per_event()["EvPgDead"], 1);
}

/// Two Slack apps whose deployments share one database, each installed through the OAuth flow
/// in one workspace with rotating tokens, refreshed at every request: each answers with its own
/// token, and no token, refresh token or user token is anywhere in the database (sealed with
/// the operator's key, `SLACK_TOKEN_KEYS`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL and the built binary"]
async fn two_apps_on_one_database_answer_with_their_own_rotated_tokens_and_it_holds_no_token() {
    use crate::postgres_installations::{KEY_A, every_row_text};
    use crate::tenants::{A, B, Tenant};
    let url = fresh_schema_url().await;
    let mut extra: Vec<(&'static str, String)> = vec![
        ("DATABASE_URL", url.clone()),
        ("SLACK_TOKEN_KEYS", KEY_A.to_string()),
        ("SLACK_TOKEN_REFRESH_MINUTES", "600".to_string()),
    ];
    // No AWS variable: emptied, they count as unset.
    for (name, _) in dynamodb_env("http://127.0.0.1:9") {
        extra.push((name, String::new()));
    }
    extra.push(("DEDUP_TABLE", String::new()));
    let (a, b) = tokio::join!(
        Tenant::start(A, "http://127.0.0.1:9", "", &extra),
        Tenant::start(B, "http://127.0.0.1:9", "", &extra)
    );
    a.slack.same_slack_as(&b.slack);
    for t in [&a, &b] {
        t.slack.with_grants(|g| g.set_lifetime(600));
    }
    const TEAM: &str = "T0000PGONE";
    assert_eq!(a.install(TEAM, true).await.status, 200, "{}", a.bot.log());
    assert_eq!(b.install(TEAM, true).await.status, 200, "{}", b.bot.log());
    for n in 1..=2 {
        let (ma, mb) = (a.mention(TEAM, n), b.mention(TEAM, n));
        let (ra, rb) = tokio::join!(a.send(&ma), b.send(&mb));
        assert_eq!(
            (ra.outcome(), rb.outcome()),
            ("answered".into(), "answered".into()),
            "A: {}\n{}\nB: {}",
            ra.body,
            a.bot.log(),
            rb.body
        );
    }
    assert_eq!((a.answers_in(TEAM), b.answers_in(TEAM)), (2, 2));
    for m in a.slack.messages_of(TEAM) {
        let app = m["app_id"].as_str().unwrap_or_default().to_string();
        assert!(app == A.0 || app == B.0, "{m}");
    }
    let refreshed = a.slack.with_grants(|g| {
        g.exchanges()
            .iter()
            .filter(|e| e.grant_type == "refresh_token" && e.ok)
            .count()
    });
    assert!(refreshed >= 2, "both apps' tokens refreshed: {refreshed}");

    let database = slack_once::postgres::Database::connect(&url, 1).unwrap();
    let rows = every_row_text(&database).await.join("\n");
    let tokens = a.slack.with_grants(|g| g.secrets_of(TEAM));
    assert!(
        tokens.len() >= 4,
        "both apps' bot and refresh tokens: {tokens:?}"
    );
    for token in &tokens {
        assert!(
            !rows.contains(token.as_str()),
            "a token in the database:\n{rows}"
        );
    }
    // The seal's key id, `key:a`, is kept as bytes (shown as hex).
    let key_id: String = "key:a".bytes().map(|b| format!("{b:02x}")).collect();
    assert!(
        rows.contains(&key_id),
        "sealed under the operator's key a:\n{rows}"
    );
}

/// `import-token` on PostgreSQL (`DATABASE_URL`): a single workspace's token kept, sealed, as
/// the app's installation there, once; the app then answers there with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL and the built binary"]
async fn import_token_on_postgresql_keeps_the_token_sealed_once_and_the_app_answers_with_it() {
    use crate::postgres_installations::{KEY_A, every_row_text};
    use crate::tenants::{A, Tenant};
    let url = fresh_schema_url().await;
    let mut extra: Vec<(&'static str, String)> = vec![
        ("DATABASE_URL", url.clone()),
        ("SLACK_TOKEN_KEYS", KEY_A.to_string()),
        ("DEDUP_TABLE", String::new()),
    ];
    for (name, _) in dynamodb_env("http://127.0.0.1:9") {
        extra.push((name, String::new()));
    }
    let a = Tenant::start(A, "http://127.0.0.1:9", "", &extra).await;
    let token = format!("xoxb-{}-single-workspace", A.0);
    a.slack.with_grants(|g| g.accept(&token, "T0000PGIMP"));
    a.slack.with_workspace_of("T0000PGIMP", |_| ());
    let mut vars = a.vars.clone();
    vars.push(("SLACK_BOT_TOKEN", token.clone()));
    let first = run_binary(&["import-token"], &vars);
    let said = format!("{}{}", first.stdout, first.stderr);
    assert_eq!(first.status.code(), Some(0), "{said}");
    assert!(
        said.contains("imported the installation of T0000PGIMP"),
        "{said}"
    );
    assert!(!said.contains(&token), "{said}");
    let again = run_binary(&["import-token"], &vars);
    assert!(
        again.stdout.contains("nothing imported"),
        "{}",
        again.stdout
    );
    let answer = a.send(&a.mention("T0000PGIMP", 1)).await;
    assert_eq!(
        answer.outcome(),
        "answered",
        "{}\n{}",
        answer.body,
        a.bot.log()
    );
    let database = slack_once::postgres::Database::connect(&url, 1).unwrap();
    let rows = every_row_text(&database).await.join("\n");
    assert!(!rows.contains(&token), "the token in the database:\n{rows}");
}
