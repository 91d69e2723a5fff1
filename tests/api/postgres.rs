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
