//! A failover of PostgreSQL to a replica, as docs/postgres.md asks it to be run: replication
//! synchronous (`synchronous_standby_names`), so a claim the replica lacks was never
//! acknowledged to the bot, which never acted on it. The bot's `DATABASE_URL` names both servers
//! (`target_session_attrs=read-write`), as a managed service's endpoint follows its primary.

use std::time::Duration;

use http::StatusCode;

use crate::helpers::*;

/// Runs `sql` on the server at `url`.
async fn execute(url: &str, sql: &str) {
    let database = slack_once::postgres::Database::connect(url, 1).unwrap();
    database
        .client()
        .await
        .unwrap()
        .batch_execute(sql)
        .await
        .unwrap();
}

/// Whether the server at `url` has a synchronous standby streaming from it.
async fn has_synchronous_standby(url: &str) -> bool {
    let database = slack_once::postgres::Database::connect(url, 1).unwrap();
    let client = database.client().await.unwrap();
    let rows = client
        .query(
            "SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'",
            &[],
        )
        .await
        .unwrap();
    !rows.is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL and the built binary"]
async fn a_claim_the_replica_lacks_is_never_acknowledged_and_after_the_failover_is_answered_once() {
    let mut primary = PrivatePostgres::start();
    let mut replica = primary.replica();
    let slack = SlackStandin::start().await;
    // While the replica streams asynchronously (PostgreSQL's default), a process starting says
    // a failover could lose what it acted on.
    assert!(
        eventually_async(Duration::from_secs(20), || async {
            BotProcess::spawn(&postgres_bot_vars(&slack, &primary.url()))
                .log_when(Duration::from_secs(5), |log| log.contains("listening"))
                .await
                .contains("replicate asynchronously")
        })
        .await,
        "the start warns of asynchronous standbys"
    );
    execute(
        &primary.url(),
        "ALTER SYSTEM SET synchronous_standby_names = '*'",
    )
    .await;
    execute(&primary.url(), "SELECT pg_reload_conf()").await;
    let primary_url = primary.url();
    assert!(
        eventually_async(Duration::from_secs(20), || has_synchronous_standby(
            &primary_url
        ))
        .await,
        "the replica streams synchronously"
    );
    let both = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port(),
        replica.port()
    );
    let bot = BotProcess::spawn(&postgres_bot_vars(&slack, &both));

    let http = HttpClient::default();

    let before = app_mention("EvFailover1", "before the failover");
    assert_eq!(
        deliver(&http, &bot.url(), &before, None).await.outcome(),
        "answered",
        "{}",
        bot.log()
    );

    // The replica stops: the primary commits a claim locally but cannot have the replica
    // confirm it, so the claim is never acknowledged: the bot answers 503 and writes nothing.
    replica.stop();
    let during = app_mention("EvFailover2", "while the replica is away");
    let answer = deliver(&http, &bot.url(), &during, None).await;
    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}\n{}",
        answer.body,
        bot.log()
    );
    assert_eq!(
        slack.posted().len(),
        1,
        "nothing written for an unacknowledged claim"
    );

    // The failover: the primary goes, the replica (lacking that claim) is promoted. The bot's
    // pool finds the new primary; Slack's retry is claimed there and answered once, and the
    // event answered before the failover stays answered.
    primary.stop();
    replica.restart();
    replica.promote();
    let retry = deliver(&http, &bot.url(), &during, Some(1)).await;
    let retry = match retry.status {
        StatusCode::OK => retry,
        // The pool's first connections may still be the old primary's, broken.
        _ => deliver(&http, &bot.url(), &during, Some(2)).await,
    };
    assert_eq!(retry.outcome(), "answered", "{}\n{}", retry.body, bot.log());
    assert_eq!(
        deliver(&http, &bot.url(), &before, Some(1)).await.outcome(),
        "duplicate",
        "a claim the replica confirmed survives the failover"
    );
    let per_event = slack.posts_per_event();
    assert_eq!(
        (per_event["EvFailover1"], per_event["EvFailover2"]),
        (1, 1),
        "{per_event:?}"
    );
}
