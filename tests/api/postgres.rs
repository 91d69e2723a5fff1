//! PostgreSQL (`DATABASE_URL`) at 127.0.0.1: the schema's migrations.

use slack_once::postgres::{Database, DatabaseError, SCHEMA_VERSION};

use crate::helpers::*;

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn migrations_apply_once_and_a_release_refuses_a_schema_behind_it() {
    let url = fresh_schema_url().await;
    let database = Database::connect(&url, 4).unwrap();
    assert!(matches!(
        database.require_schema().await,
        Err(DatabaseError::SchemaBehind {
            found: 0,
            needed: SCHEMA_VERSION
        })
    ));
    // Two processes migrating at once: each migration applied once, by one of them.
    let other = Database::connect(&url, 4).unwrap();
    let (a, b) = tokio::join!(database.migrate(), other.migrate());
    let mut applied = [a.unwrap(), b.unwrap()].concat();
    applied.sort();
    assert_eq!(applied, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    assert_eq!(database.schema_version().await.unwrap(), SCHEMA_VERSION);
    database.require_schema().await.unwrap();
    assert!(database.migrate().await.unwrap().is_empty());
}

/// A later release's migration, as migrations are written (only adding: a column with a
/// default on every table, a table of its own, the next version recorded): this release, beside
/// it during a rolling deploy, still starts (its schema is at least its own), claims, journals,
/// keeps state, queues and dead-letters on it; and reads a claim the later release answered.
#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn this_release_runs_on_the_schema_a_later_release_migrated() {
    use slack_once::ledger::{Claim, Ledger, OwnerToken, PostgresLedger, contract};
    use slack_once::queue::{PostgresQueue, WorkQueue};
    let (_, database) = fresh_schema().await;
    let client = database.client().await.unwrap();
    let tables: Vec<String> = client
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_name LIKE 'slack_once_%'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(tables.len() >= 9, "{tables:?}");
    for table in &tables {
        client
            .batch_execute(&format!(
                "ALTER TABLE {table} ADD COLUMN later_release text NOT NULL DEFAULT 'next'"
            ))
            .await
            .unwrap();
    }
    client
        .batch_execute(&format!(
            "CREATE TABLE slack_once_later_release (key text PRIMARY KEY);
             INSERT INTO slack_once_schema (version, name) VALUES ({}, 'a later release')",
            SCHEMA_VERSION + 1
        ))
        .await
        .unwrap();
    database.require_schema().await.unwrap();
    assert!(database.migrate().await.unwrap().is_empty());

    let ledger = PostgresLedger::new(database.clone());
    let key = |k: &str| slack_once::slack::envelope::EventId::try_from(k.to_string()).unwrap();
    contract::the_journal_survives_a_takeover(&ledger, &key("EvLaterJournal")).await;
    contract::state_is_written_once_per_version_read(&ledger, &key("state-later")).await;
    contract::a_state_change_is_made_once_per_request(
        &ledger,
        &key("EvLaterE"),
        &key("EvLaterF"),
        &key("state-later-request"),
    )
    .await;
    contract::an_alias_belongs_to_the_first_message_that_writes_it(
        &ledger,
        &key("cmid-later"),
        &key("EvLaterA"),
        &key("EvLaterB"),
    )
    .await;
    // A claim the later release answered (its column set as it sets it): done here too.
    let answered = key("EvLaterDone");
    let owner = OwnerToken::random();
    let request = contract::request(&answered, &owner, contract::NOW);
    assert!(matches!(
        ledger.claim(&request).await.unwrap(),
        Claim::Acquired { .. }
    ));
    ledger
        .complete(&answered, &owner, contract::NOW)
        .await
        .unwrap();
    client
        .batch_execute(
            "UPDATE slack_once_claims SET later_release = 'written by it' \
             WHERE key = 'EvLaterDone'",
        )
        .await
        .unwrap();
    let copy = OwnerToken::random();
    assert!(matches!(
        ledger
            .claim(&contract::request(&answered, &copy, contract::NOW + 1))
            .await
            .unwrap(),
        Claim::AlreadyDone { .. }
    ));
    let queue = PostgresQueue::new(database, "work", 1);
    queue.send("a request").await.unwrap();
    let got = queue
        .receive(
            10,
            std::time::Duration::from_secs(30),
            std::time::Duration::ZERO,
        )
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    queue.delete(&got[0].receipt_handle).await.unwrap();
}
