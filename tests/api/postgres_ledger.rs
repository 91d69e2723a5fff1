//! The PostgreSQL ledger on the local server at 127.0.0.1 (scripts/postgres-local.sh): every
//! scenario of the ledger's contract, what the rows hold, 200 concurrent claims of one key, the
//! database's clock against claimants' clocks, a claim whose answer is lost, a connection cut
//! in a state change, the server restarted under the pool, and the upkeep (expired rows
//! deleted, abandoned claims swept).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use slack_once::ledger::contract::{self, LEASE, NOW, TTL_S, request};
use slack_once::ledger::{
    Alias, AliasRequest, Claim, ClaimRequest, Finish, Held, Journal, Ledger, LedgerError,
    OwnerToken, PostgresLedger, RequestChange, StatePut, StateWrite, Status, StepRecord, Sweep,
};
use slack_once::postgres::{Clock, Database};
use slack_once::slack::envelope::EventId;

use crate::helpers::*;

fn id(s: &str) -> EventId {
    EventId::try_from(s.to_string()).unwrap()
}

async fn ledger() -> (PostgresLedger, Database) {
    let (_, database) = fresh_schema().await;
    (PostgresLedger::new(database.clone()), database)
}

/// The claim row of `key` as stored.
async fn stored(database: &Database, key: &str) -> Option<tokio_postgres::Row> {
    database
        .client()
        .await
        .unwrap()
        .query_opt("SELECT * FROM slack_once_claims WHERE key = $1", &[&key])
        .await
        .unwrap()
}

async fn count(database: &Database, sql: &str) -> i64 {
    database
        .client()
        .await
        .unwrap()
        .query_one(sql, &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn an_absent_key_is_acquired_and_the_row_holds_the_claim() {
    let (ledger, database) = ledger().await;
    let (e, a, b) = (id("EvP1"), OwnerToken::random(), OwnerToken::random());
    assert_eq!(
        ledger.claim(&request(&e, &a, NOW)).await.unwrap(),
        Claim::Acquired {
            attempt: 1,
            journal: Journal::new()
        }
    );
    let row = stored(&database, "EvP1").await.expect("the row");
    assert_eq!(row.get::<_, &str>("status"), "in_progress");
    assert_eq!(row.get::<_, &str>("owner"), a.as_str());
    assert_eq!(row.get::<_, i64>("lease_until"), (NOW + LEASE) as i64);
    assert_eq!(
        row.get::<_, i64>("expires_at"),
        ((NOW / 1000 + TTL_S) * 1000) as i64
    );
    assert_eq!(row.get::<_, Option<&str>>("team_id"), Some("T0001"));
    assert_eq!(row.get::<_, Option<i32>>("retry_num"), Some(2));
    assert_eq!(row.get::<_, Option<&str>>("app"), Some(contract::APP));
    assert_eq!(
        ledger
            .claim(&request(&e, &b, NOW + LEASE - 1))
            .await
            .unwrap(),
        Claim::InProgress {
            lease_until_ms: NOW + LEASE
        }
    );
    ledger.complete(&e, &a, NOW + 7).await.unwrap();
    assert_eq!(
        ledger
            .claim(&request(&e, &b, NOW + 100 * LEASE))
            .await
            .unwrap(),
        Claim::AlreadyDone { ran: None },
        "done until the TTL"
    );
    let row = stored(&database, "EvP1").await.unwrap();
    assert_eq!(row.get::<_, &str>("status"), "done");
    assert_eq!(
        row.get::<_, Option<i64>>("finished_at"),
        Some((NOW + 7) as i64)
    );
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn every_operation_of_a_request_is_one_round_trip() {
    let (ledger, _) = ledger().await;
    let (e, a, b) = (id("EvTrips"), OwnerToken::random(), OwnerToken::random());
    let mut sent = ledger.statements_sent();
    let mut trips = |what: &str, ledger: &PostgresLedger| {
        let now = ledger.statements_sent();
        assert_eq!(now - sent, 1, "{what}");
        sent = now;
    };
    ledger.claim(&request(&e, &a, NOW)).await.unwrap();
    trips("a first claim", &ledger);
    ledger.claim(&request(&e, &b, NOW + 1)).await.unwrap();
    trips("a duplicate", &ledger);
    let held = Held {
        event_id: &e,
        owner: &a,
    };
    let intent = contract::intent(1, NOW + 2, "chat.postMessage#00000001");
    ledger
        .begin_step(held, 1, &intent, &[], NOW + 2)
        .await
        .unwrap();
    trips("a step's intent", &ledger);
    let write = StateWrite {
        value: "1",
        expected: 0,
        writer: "w",
        read_writers: &[],
        expires_at_s: NOW / 1000 + 60,
        request: Some(RequestChange {
            held,
            change: "c#1",
        }),
    };
    ledger
        .put_state(&id("state-A-trips"), &write, NOW + 3)
        .await
        .unwrap();
    trips("a state change with its record", &ledger);
    ledger.complete(&e, &a, NOW + 4).await.unwrap();
    trips("the completion", &ledger);
    ledger.claim(&request(&e, &b, NOW + 5)).await.unwrap();
    trips("a copy of an answered request", &ledger);
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn a_lapsed_claim_is_taken_over_and_the_old_owner_is_refused() {
    let (ledger, database) = ledger().await;
    let (e, a, b) = (id("EvP2"), OwnerToken::random(), OwnerToken::random());
    ledger.claim(&request(&e, &a, NOW)).await.unwrap();
    assert_eq!(
        ledger.claim(&request(&e, &b, NOW + LEASE)).await.unwrap(),
        Claim::Acquired {
            attempt: 2,
            journal: Journal::from([(
                1,
                StepRecord::Began {
                    at_ms: NOW,
                    lease_until_ms: NOW + LEASE,
                    announces: true,
                    looked: None,
                }
            )])
        }
    );
    assert!(matches!(
        ledger.complete(&e, &a, NOW + LEASE + 1).await,
        Err(LedgerError::NotOwner { .. })
    ));
    assert!(matches!(
        ledger.release(&e, &a, NOW + LEASE + 1).await,
        Err(LedgerError::NotOwner { .. })
    ));
    ledger.complete(&e, &b, NOW + LEASE + 2).await.unwrap();
    let row = stored(&database, "EvP2").await.unwrap();
    assert_eq!(
        (row.get::<_, &str>("status"), row.get::<_, &str>("owner")),
        ("done", b.as_str())
    );
    assert_eq!(
        row.get::<_, i64>("created_at"),
        NOW as i64,
        "the first claim's time"
    );
    assert_eq!(
        row.get::<_, serde_json::Value>("began"),
        serde_json::json!([])
    );
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn a_released_claim_or_one_past_its_ttl_is_taken_and_strangers_are_refused() {
    let (ledger, database) = ledger().await;
    let (e, a, b, stranger) = (
        id("EvP3"),
        OwnerToken::random(),
        OwnerToken::random(),
        OwnerToken::random(),
    );
    assert!(
        matches!(
            ledger.complete(&e, &a, NOW).await,
            Err(LedgerError::NotOwner { .. })
        ),
        "nothing claimed yet"
    );
    ledger.claim(&request(&e, &a, NOW)).await.unwrap();
    assert!(matches!(
        ledger.complete(&e, &stranger, NOW).await,
        Err(LedgerError::NotOwner { .. })
    ));
    ledger.release(&e, &a, NOW + 1).await.unwrap();
    ledger
        .release(&e, &a, NOW + 1)
        .await
        .expect("sent again: applied already");
    let bare = ClaimRequest {
        team_id: None,
        retry_num: None,
        retry_reason: None,
        ..request(&e, &b, NOW + 2)
    };
    assert_eq!(
        ledger.claim(&bare).await.unwrap(),
        Claim::Acquired {
            attempt: 2,
            journal: Journal::new()
        }
    );
    let row = stored(&database, "EvP3").await.unwrap();
    assert_eq!(
        row.get::<_, Option<&str>>("team_id"),
        None,
        "an earlier delivery's, gone"
    );
    assert_eq!(row.get::<_, Option<i64>>("finished_at"), None);
    ledger.complete(&e, &b, NOW + 3).await.unwrap();
    assert!(
        matches!(
            ledger.release(&e, &b, NOW + 4).await,
            Err(LedgerError::NotOwner { .. })
        ),
        "a done claim is not released"
    );
    let after_ttl = NOW + TTL_S * 1000 + 2;
    assert!(matches!(
        ledger.claim(&request(&e, &a, after_ttl)).await.unwrap(),
        Claim::Acquired { attempt: 3, .. }
    ));
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn a_claim_that_finds_its_own_claim_acquires_it_with_the_stored_attempt() {
    let (ledger, database) = ledger().await;
    contract::a_claim_sent_again_acquires_with_the_stored_attempt(&ledger, &id("EvP4")).await;
    let row = stored(&database, "EvP4").await.unwrap();
    assert_eq!(row.get::<_, i32>("attempts"), 2, "not counted twice");
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn the_journal_records_intents_and_results_and_survives_a_takeover() {
    let (ledger, database) = ledger().await;
    contract::the_journal_survives_a_takeover(&ledger, &id("EvP5")).await;
    let row = stored(&database, "EvP5").await.unwrap();
    let journal: serde_json::Value = row.get("journal");
    assert_eq!(
        journal.as_object().unwrap().len(),
        1,
        "step 2 certainly not done: its intent is gone: {journal}"
    );
    assert_eq!(row.get::<_, &str>("status"), "released");
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn two_fates_of_one_step_in_one_write_record_the_last() {
    let (ledger, database) = ledger().await;
    contract::two_fates_of_one_step_in_one_write_record_the_last(&ledger, &id("EvP6")).await;
    let journal: serde_json::Value = stored(&database, "EvP6").await.unwrap().get("journal");
    let step1 = journal["1"].as_str().unwrap();
    assert!(step1.starts_with("d ") && step1.contains("V1"), "{step1}");
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn a_claim_stands_for_its_first_steps_intent_until_its_claimant_writes() {
    let (ledger, database) = ledger().await;
    contract::began_windows_stand_for_the_first_step_until_the_claimant_writes(
        &ledger,
        &id("EvP7"),
    )
    .await;
    let row = stored(&database, "EvP7").await.unwrap();
    assert_eq!(
        row.get::<_, serde_json::Value>("began"),
        serde_json::json!([])
    );
    assert_eq!(
        row.get::<_, serde_json::Value>("journal")
            .as_object()
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn a_failed_event_keeps_its_error_and_blocks_every_later_copy() {
    let (ledger, database) = ledger().await;
    contract::a_failed_event_blocks_every_later_copy(&ledger, &id("EvP8")).await;
    let row = stored(&database, "EvP8").await.unwrap();
    assert_eq!(row.get::<_, &str>("status"), "failed");
    assert_eq!(
        row.get::<_, Option<&str>>("error"),
        Some("channel_not_found")
    );
    assert!(!row.get::<_, bool>("retryable"));
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn aliases_belong_to_the_first_message_and_live_as_long_as_its_latest_claim() {
    let (ledger, database) = ledger().await;
    contract::an_alias_belongs_to_the_first_message_that_writes_it(
        &ledger,
        &id("cmid-T1-P1"),
        &id("msg-T1-C1-1"),
        &id("msg-T1-C1-2"),
    )
    .await;
    contract::an_alias_lives_as_long_as_its_messages_latest_claim(
        &ledger,
        &id("cmid-T1-P2"),
        &id("msg-T1-C1-3"),
        &id("msg-T1-C1-4"),
    )
    .await;
    let client = database.client().await.unwrap();
    let of: String = client
        .query_one(
            "SELECT alias_of FROM slack_once_aliases WHERE key = 'cmid-T1-P1'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(of, "msg-T1-C1-2", "rewritten past its TTL");
    // A write seconds later never moves the alias's TTL back.
    let alias = id("cmid-T1-P2");
    let first = id("msg-T1-C1-3");
    let earlier = AliasRequest {
        alias: &alias,
        of: &first,
        now_ms: NOW + 1,
        expires_at_s: NOW / 1000 + 1,
        app_id: Some(contract::APP),
    };
    assert_eq!(ledger.alias(&earlier).await.unwrap(), Alias::Ours);
    let expires: i64 = client
        .query_one(
            "SELECT expires_at FROM slack_once_aliases WHERE key = 'cmid-T1-P2'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        expires as u64,
        (NOW + 2 * 3600 * 1000) / 1000 * 1000 + TTL_S * 1000
    );
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn another_apps_key_and_alias_are_never_taken_and_a_row_of_no_app_is_anyones() {
    let (ledger, database) = ledger().await;
    contract::another_apps_key_is_never_taken(&ledger, &id("EvP20")).await;
    let row = stored(&database, "EvP20").await.unwrap();
    assert_eq!(row.get::<_, Option<&str>>("app"), Some(contract::OTHER_APP));
    assert_eq!(row.get::<_, &str>("status"), "done");
    let scoped = format!("EvP20-{}", contract::APP);
    let here = stored(&database, &scoped).await.unwrap();
    assert_eq!(here.get::<_, Option<&str>>("app"), Some(contract::APP));
    contract::an_item_of_no_app_is_anyones(&ledger, &id("EvP21")).await;
    let row = stored(&database, "EvP21").await.unwrap();
    assert_eq!(
        row.get::<_, Option<&str>>("app"),
        None,
        "a takeover leaves a row of no app anyone's"
    );
    contract::another_apps_alias_is_never_taken(&ledger, &id("cmid-T1-P20")).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn notes_are_replaced_only_where_they_are_as_read_and_a_later_note_stands() {
    let (ledger, _) = ledger().await;
    let key = id("astop-T1-D1-1_5-A0001");
    contract::a_note_is_replaced_only_where_it_is_as_read(&ledger, &key).await;
    let note = id("actx-T1-D1");
    let expires = NOW / 1000 + TTL_S;
    ledger
        .set_note(&note, "later", NOW + 10, expires)
        .await
        .unwrap();
    ledger
        .set_note(&note, "earlier", NOW + 5, expires)
        .await
        .unwrap();
    assert_eq!(
        ledger.note(&note, NOW + 11).await.unwrap().as_deref(),
        Some("later"),
        "an older write never replaces a newer one"
    );
    ledger
        .set_note(&note, "newest", NOW + 20, expires)
        .await
        .unwrap();
    assert_eq!(
        ledger.note(&note, NOW + 21).await.unwrap().as_deref(),
        Some("newest")
    );
    assert_eq!(
        ledger.note(&note, expires * 1000).await.unwrap(),
        None,
        "past its TTL"
    );
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn state_is_written_once_per_version_read_and_once_per_request() {
    let (ledger, database) = ledger().await;
    contract::state_is_written_once_per_version_read(&ledger, &id("state-A0001-poll")).await;
    contract::a_state_change_is_made_once_per_request(
        &ledger,
        &id("EvP40"),
        &id("EvP41"),
        &id("state-A0001-count"),
    )
    .await;
    let changes: serde_json::Value = stored(&database, "EvP40")
        .await
        .unwrap()
        .get("state_changes");
    assert_eq!(changes, serde_json::json!({"c#1": 1, "c#2": 7}));
    assert_eq!(
        ledger.state_changes(&id("EvP40")).await.unwrap(),
        [("c#1".to_string(), 1), ("c#2".to_string(), 7)].into()
    );
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn a_journal_or_a_value_past_its_bound_is_too_large_and_changes_nothing() {
    let (ledger, database) = ledger().await;
    let (e, a) = (id("EvP50"), OwnerToken::random());
    ledger.claim(&request(&e, &a, NOW)).await.unwrap();
    let held = Held {
        event_id: &e,
        owner: &a,
    };
    let huge = Finish::Done;
    let settled = [slack_once::ledger::Settled::Done {
        step: 1,
        result: "x".repeat(410 * 1024),
        op: None,
    }];
    assert!(matches!(
        ledger.finish(held, &huge, &settled, NOW + 1).await,
        Err(LedgerError::ItemTooLarge(_))
    ));
    let row = stored(&database, "EvP50").await.unwrap();
    assert_eq!(
        row.get::<_, &str>("status"),
        "in_progress",
        "nothing written"
    );
    let note = ledger
        .set_note(
            &id("actx-big"),
            &"y".repeat(410 * 1024),
            NOW,
            NOW / 1000 + 60,
        )
        .await;
    assert!(
        matches!(note, Err(LedgerError::ItemTooLarge(_))),
        "{note:?}"
    );
    ledger.complete(&e, &a, NOW + 2).await.unwrap();
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn two_hundred_concurrent_claims_of_one_key_have_exactly_one_winner() {
    let (url, _) = fresh_schema().await;
    // Many connections (not 200: the server's 300 are shared with the other tests), so that
    // many claims' statements run at once.
    let database = Database::connect(&url, 64)
        .unwrap()
        .with_clock(Clock::Given);
    let ledger = Arc::new(PostgresLedger::new(database));
    let e = id("EvRace");
    let start = Arc::new(tokio::sync::Barrier::new(200));
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let (ledger, e, start) = (ledger.clone(), e.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            let owner = OwnerToken::random();
            start.wait().await;
            ledger.claim(&request(&e, &owner, NOW)).await.unwrap()
        }));
    }
    let (mut acquired, mut in_progress) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Claim::Acquired { .. } => acquired += 1,
            Claim::InProgress { .. } => in_progress += 1,
            other => panic!("nobody finished: {other:?}"),
        }
    }
    assert_eq!((acquired, in_progress), (1, 199));
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn a_claim_committed_after_the_statement_began_is_read_by_the_statement_sent_again() {
    let (ledger, database) = ledger().await;
    let ledger = Arc::new(ledger);
    // Another claimant's transaction inserts the key and has not committed yet.
    let mut other = database.client().await.unwrap();
    let transaction = other.transaction().await.unwrap();
    transaction
        .execute(
            "INSERT INTO slack_once_claims (key, status, owner, lease_until, expires_at, \
             attempts, created_at, claimed_at) VALUES ('EvHidden', 'in_progress', 'someone', \
             $1, $2, 1, $3, $3)",
            &[
                &((NOW + LEASE) as i64),
                &((NOW / 1000 + TTL_S) as i64 * 1000),
                &(NOW as i64),
            ],
        )
        .await
        .unwrap();
    let before = ledger.statements_sent();
    let claim = {
        let ledger = ledger.clone();
        tokio::spawn(async move {
            let (e, b) = (id("EvHidden"), OwnerToken::random());
            ledger.claim(&request(&e, &b, NOW + 1)).await
        })
    };
    // The claim's statement waits for the other insert, its snapshot taken before the commit.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !claim.is_finished(),
        "the claim waits for the other transaction"
    );
    transaction.commit().await.unwrap();
    assert_eq!(
        claim.await.unwrap().unwrap(),
        Claim::InProgress {
            lease_until_ms: NOW + LEASE
        }
    );
    assert_eq!(
        ledger.statements_sent() - before,
        2,
        "the first statement saw the row in its conflict, not in its read: sent again"
    );
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn an_alias_committed_after_the_statement_began_is_read_by_the_statement_sent_again() {
    let (ledger, database) = ledger().await;
    let ledger = Arc::new(ledger);
    let mut other = database.client().await.unwrap();
    let transaction = other.transaction().await.unwrap();
    transaction
        .execute(
            "INSERT INTO slack_once_aliases (key, alias_of, expires_at) \
             VALUES ('cmid-T1-hidden', 'msg-T1-C1-1', $1)",
            &[&((NOW / 1000 + TTL_S) as i64 * 1000)],
        )
        .await
        .unwrap();
    let before = ledger.statements_sent();
    let alias = {
        let ledger = ledger.clone();
        tokio::spawn(async move {
            let (alias, of) = (id("cmid-T1-hidden"), id("msg-T1-C1-2"));
            let write = AliasRequest {
                alias: &alias,
                of: &of,
                now_ms: NOW,
                expires_at_s: NOW / 1000 + TTL_S,
                app_id: Some(contract::APP),
            };
            ledger.alias(&write).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !alias.is_finished(),
        "the alias waits for the other transaction"
    );
    transaction.commit().await.unwrap();
    assert_eq!(
        alias.await.unwrap().unwrap(),
        Alias::CopyOf {
            key: "msg-T1-C1-1".into()
        }
    );
    assert_eq!(ledger.statements_sent() - before, 2, "sent again once");
}

/// The current time in epoch ms, by this machine's clock (which the local database shares).
fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

const HOUR: u64 = 3_600_000;

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn leases_are_judged_on_the_databases_clock_not_a_claimants() {
    let (url, _) = fresh_schema().await;
    let database = Database::connect(&url, 4)
        .unwrap()
        .with_clock(Clock::Database);
    let ledger = PostgresLedger::new(database);
    let at = |e, owner, now_ms, lease_ms: u64| ClaimRequest {
        lease_until_ms: now_ms + lease_ms,
        ..request(e, owner, now_ms)
    };
    // A live claim, and a claimant whose clock is an hour ahead: still held, and the lease it
    // is told ends as far ahead of its own clock as the claim's really does.
    let (e, a, b) = (id("EvClock1"), OwnerToken::random(), OwnerToken::random());
    let now = wall_ms();
    assert!(matches!(
        ledger.claim(&at(&e, &a, now, LEASE)).await.unwrap(),
        Claim::Acquired { attempt: 1, .. }
    ));
    let ahead = wall_ms() + HOUR;
    let Claim::InProgress { lease_until_ms } =
        ledger.claim(&at(&e, &b, ahead, LEASE)).await.unwrap()
    else {
        panic!("an hour ahead took over a live claim")
    };
    let left = lease_until_ms as i64 - ahead as i64;
    assert!(
        (LEASE as i64 - 5_000..=LEASE as i64).contains(&left),
        "the lease left, on the claimant's clock: {left} ms"
    );
    // A lapsed claim, and a claimant whose clock is an hour behind: taken over.
    let (f, c, d) = (id("EvClock2"), OwnerToken::random(), OwnerToken::random());
    ledger.claim(&at(&f, &c, wall_ms(), 300)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let behind = wall_ms() - HOUR;
    assert!(
        matches!(
            ledger.claim(&at(&f, &d, behind, LEASE)).await.unwrap(),
            Claim::Acquired { attempt: 2, .. }
        ),
        "an hour behind, a lapsed claim is still lapsed"
    );
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn a_claim_whose_answer_was_lost_is_sent_again_and_finds_itself_acquired() {
    let (url, direct) = fresh_schema().await;
    let proxy = CuttingProxy::start(postgres_port()).await;
    let database = Database::connect(&proxy.url(&url), 2)
        .unwrap()
        .with_clock(Clock::Given);
    let ledger = PostgresLedger::new(database);
    let (e, a) = (id("EvLost1"), OwnerToken::random());
    proxy.arm("INSERT INTO slack_once_claims", Cut::DropAnswer);
    assert_eq!(
        ledger.claim(&request(&e, &a, NOW)).await.unwrap(),
        Claim::Acquired {
            attempt: 1,
            journal: Journal::new()
        },
        "not InProgress: the claim sent again knows its own"
    );
    assert_eq!(
        proxy.cuts.load(Ordering::SeqCst),
        1,
        "the first answer was lost"
    );
    let row = stored(&direct, "EvLost1").await.unwrap();
    assert_eq!(row.get::<_, i32>("attempts"), 1);
    assert_eq!(
        row.get::<_, serde_json::Value>("began")
            .as_array()
            .unwrap()
            .len(),
        1,
        "one claim, one window"
    );
    // A takeover whose answer is lost too: attempt 2, once.
    ledger.release(&e, &a, NOW + 1).await.unwrap();
    let b = OwnerToken::random();
    proxy.arm("INSERT INTO slack_once_claims", Cut::DropAnswer);
    assert!(matches!(
        ledger.claim(&request(&e, &b, NOW + 2)).await.unwrap(),
        Claim::Acquired { attempt: 2, .. }
    ));
    assert_eq!(proxy.cuts.load(Ordering::SeqCst), 2);
    // A completion whose answer is lost: applied already.
    proxy.arm("UPDATE slack_once_claims", Cut::DropAnswer);
    ledger.complete(&e, &b, NOW + 3).await.unwrap();
    assert_eq!(proxy.cuts.load(Ordering::SeqCst), 3);
    let row = stored(&direct, "EvLost1").await.unwrap();
    assert_eq!(row.get::<_, &str>("status"), "done");
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn a_connection_cut_in_a_state_change_leaves_both_or_neither_and_sent_again_makes_it_once() {
    let (url, direct) = fresh_schema().await;
    let proxy = CuttingProxy::start(postgres_port()).await;
    let database = Database::connect(&proxy.url(&url), 2)
        .unwrap()
        .with_clock(Clock::Given);
    let ledger = PostgresLedger::new(database);
    let (e, a) = (id("EvCut1"), OwnerToken::random());
    ledger.claim(&request(&e, &a, NOW)).await.unwrap();
    let write =
        |value: &'static str, expected, change: &'static str, e: &'static EventId| StateWrite {
            value,
            expected,
            writer: "w",
            read_writers: &[],
            expires_at_s: NOW / 1000 + 3600,
            request: Some(RequestChange {
                held: Held {
                    event_id: e,
                    owner: Box::leak(Box::new(a.clone())),
                },
                change,
            }),
        };
    let e: &'static EventId = Box::leak(Box::new(e));
    let key = id("state-A0001-cut");
    let made = |direct: Database| async move {
        let client = direct.client().await.unwrap();
        let version: Option<i64> = client
            .query_opt(
                "SELECT version FROM slack_once_state WHERE key = 'state-A0001-cut'",
                &[],
            )
            .await
            .unwrap()
            .map(|r| r.get(0));
        let changes: serde_json::Value = client
            .query_one(
                "SELECT state_changes FROM slack_once_claims WHERE key = 'EvCut1'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        (version, changes)
    };
    // Cut before the statement was whole: neither; sent again, written once.
    proxy.arm("INSERT INTO slack_once_state", Cut::HalfStatement);
    assert_eq!(
        ledger
            .put_state(&key, &write("1", 0, "c#1", e), NOW + 1)
            .await
            .unwrap(),
        StatePut::Written { version: 1 },
        "the cut wrote nothing: sent again, the change is made"
    );
    assert_eq!(proxy.cuts.load(Ordering::SeqCst), 1);
    assert_eq!(
        made(direct.clone()).await,
        (Some(1), serde_json::json!({"c#1": 1}))
    );
    // Committed, its answer lost: both; sent again, made already, not twice.
    proxy.arm("UPDATE slack_once_state", Cut::DropAnswer);
    assert_eq!(
        ledger
            .put_state(&key, &write("2", 1, "c#2", e), NOW + 2)
            .await
            .unwrap(),
        StatePut::MadeAlready { version: 2 }
    );
    assert_eq!(proxy.cuts.load(Ordering::SeqCst), 2);
    assert_eq!(
        made(direct.clone()).await,
        (Some(2), serde_json::json!({"c#1": 1, "c#2": 2}))
    );
    let value = ledger.state(&key, NOW + 3).await.unwrap().unwrap();
    assert_eq!((value.value.as_str(), value.version), ("2", 2));
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn a_restarted_server_finds_its_claims_and_the_same_pool_answers_the_next_call() {
    let server = OwnCluster { port: 5471 };
    server.script("start");
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", server.port);
    let database = Database::connect(&url, 2).unwrap().with_clock(Clock::Given);
    database.migrate().await.unwrap();
    let ledger = PostgresLedger::new(database);
    let e = id(&format!("EvRestart{}", uuid::Uuid::new_v4().simple()));
    let (a, b) = (OwnerToken::random(), OwnerToken::random());
    assert!(matches!(
        ledger.claim(&request(&e, &a, NOW)).await.unwrap(),
        Claim::Acquired { attempt: 1, .. }
    ));
    server.restart();
    assert_eq!(
        ledger.claim(&request(&e, &b, NOW + 1)).await.unwrap(),
        Claim::InProgress {
            lease_until_ms: NOW + LEASE
        },
        "the claim survived the restart, and the pool connected again"
    );
    ledger.complete(&e, &a, NOW + 2).await.unwrap();
}

/// A PostgreSQL cluster of this test's own (scripts/postgres-local.sh on `port`), stopped when
/// the test ends, however it ends.
struct OwnCluster {
    port: u16,
}

impl OwnCluster {
    fn dir(&self) -> String {
        format!("/tmp/slack-once-pg-ledger-{}", self.port)
    }

    /// Stops the server as an operator's restart does (a fast shutdown: the server ends every
    /// connection, the pool's included) and starts it again on the same data.
    fn restart(&self) {
        self.shut_down_fast();
        self.script("start");
    }

    /// SIGINT to the server (`pg_ctl stop -m fast`), then waits until it is gone. The script's
    /// own stop asks for a smart shutdown, which waits for the pool's connections to close.
    fn shut_down_fast(&self) {
        let pidfile = format!("{}/postgres-{}.pid", self.dir(), self.port);
        let Ok(pid) = std::fs::read_to_string(&pidfile) else {
            return;
        };
        let pid = pid.trim().to_string();
        let signal = |args: &[&str]| {
            std::process::Command::new("kill")
                .args(args)
                .arg(&pid)
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        signal(&["-INT"]);
        for _ in 0..100 {
            if !signal(&["-0"]) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn script(&self, command: &str) {
        let status = std::process::Command::new("bash")
            .arg("scripts/postgres-local.sh")
            .arg(command)
            .env("POSTGRES_LOCAL_PORT", self.port.to_string())
            .env("POSTGRES_LOCAL_DIR", self.dir())
            .status()
            .unwrap();
        assert!(status.success(), "postgres-local.sh {command}");
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        self.shut_down_fast();
        self.script("stop");
    }
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn expired_rows_are_deleted_in_batches_and_live_ones_kept() {
    let (ledger, database) = ledger().await;
    let owner = OwnerToken::random();
    let short = |e, now_ms| ClaimRequest {
        expires_at_s: now_ms / 1000 + 60,
        ..request(e, &owner, now_ms)
    };
    let keys: Vec<EventId> = (0..5).map(|i| id(&format!("EvOld{i}"))).collect();
    for e in &keys {
        ledger.claim(&short(e, NOW)).await.unwrap();
    }
    let live = id("EvLive");
    ledger.claim(&request(&live, &owner, NOW)).await.unwrap();
    let (alias, of) = (id("cmid-T1-old"), id("msg-T1-C1-9"));
    let aliased = AliasRequest {
        alias: &alias,
        of: &of,
        now_ms: NOW,
        expires_at_s: NOW / 1000 + 60,
        app_id: None,
    };
    ledger.alias(&aliased).await.unwrap();
    ledger
        .set_note(&id("actx-old"), "{}", NOW, NOW / 1000 + 60)
        .await
        .unwrap();
    let state = StateWrite {
        value: "1",
        expected: 0,
        writer: "w",
        read_writers: &[],
        expires_at_s: NOW / 1000 + 60,
        request: None,
    };
    ledger
        .put_state(&id("state-A-old"), &state, NOW)
        .await
        .unwrap();
    let later = NOW + 61_000;
    assert_eq!(ledger.delete_expired(later, 2).await.unwrap(), 8);
    assert_eq!(
        count(&database, "SELECT count(*) FROM slack_once_claims").await,
        1
    );
    assert!(stored(&database, "EvLive").await.is_some());
    for table in ["slack_once_aliases", "slack_once_notes", "slack_once_state"] {
        assert_eq!(
            count(&database, &format!("SELECT count(*) FROM {table}")).await,
            0
        );
    }
    assert_eq!(ledger.delete_expired(later, 2).await.unwrap(), 0);
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn abandoned_claims_are_swept_failed_and_retryable_and_redeliveries_left_a_while() {
    let (ledger, _) = ledger().await;
    let older_than = Duration::from_secs(600);
    let within = Duration::from_secs(12 * 3600);
    let claim = |key: &str, lease_ends: u64, redelivery_due: bool| {
        let ledger = &ledger;
        let key = id(key);
        async move {
            let owner = OwnerToken::random();
            let now_ms = lease_ends - LEASE;
            let request = ClaimRequest {
                redelivery_due,
                expires_at_s: (NOW + 3 * HOUR * 24) / 1000,
                ..request(&key, &owner, now_ms)
            };
            ledger.claim(&request).await.unwrap();
            owner
        }
    };
    let now = NOW + 24 * HOUR;
    let cutoff = now - 600_000;
    claim("EvAbandoned", cutoff - 1, false).await;
    claim("EvRecent", cutoff + 1, false).await;
    claim("EvQueued", cutoff - 1, true).await;
    claim("EvQueuedLong", cutoff - 12 * HOUR - 1, true).await;
    let done = claim("EvDone", cutoff - 1, false).await;
    ledger.complete(&id("EvDone"), &done, cutoff).await.unwrap();
    let sweep = |app, dry_run| Sweep {
        older_than,
        redelivery_within: within,
        app,
        code: "abandoned",
        dry_run,
    };
    // Another app's sweep (or one that names none) passes this app's claims over.
    let others = ledger
        .sweep_abandoned(now, &sweep(Some("AOTHER"), false))
        .await
        .unwrap();
    assert!(others.keys.is_empty());
    assert_eq!((others.other_apps, others.redelivery_due), (2, 1));
    let listed = ledger
        .sweep_abandoned(now, &sweep(Some(contract::APP), true))
        .await
        .unwrap();
    assert_eq!(
        listed.keys,
        ["EvAbandoned", "EvQueuedLong"],
        "a dry run lists"
    );
    assert_eq!(
        ledger
            .claim_record(&id("EvAbandoned"))
            .await
            .unwrap()
            .unwrap()
            .status,
        Status::InProgress,
        "and changes nothing"
    );
    let swept = ledger
        .sweep_abandoned(now, &sweep(Some(contract::APP), false))
        .await
        .unwrap();
    assert_eq!(swept.keys, ["EvAbandoned", "EvQueuedLong"]);
    assert_eq!((swept.redelivery_due, swept.other_apps), (1, 0));
    for (key, status) in [
        ("EvAbandoned", Status::Failed),
        ("EvRecent", Status::InProgress),
        ("EvQueued", Status::InProgress),
        ("EvQueuedLong", Status::Failed),
        ("EvDone", Status::Done),
    ] {
        let record = ledger.claim_record(&id(key)).await.unwrap().unwrap();
        assert_eq!(record.status, status, "{key}");
    }
    let record = ledger
        .claim_record(&id("EvAbandoned"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.error.as_deref(), Some("abandoned"));
    assert!(record.retryable && !record.redelivery);
    assert_eq!(record.lease_until_ms, cutoff - 1);
    assert!(
        ledger
            .sweep_abandoned(now, &sweep(Some(contract::APP), false))
            .await
            .unwrap()
            .keys
            .is_empty()
    );
    // A later delivery takes the swept claim over, as a lapsed one.
    assert!(matches!(
        ledger
            .claim(&request(&id("EvAbandoned"), &OwnerToken::random(), now))
            .await
            .unwrap(),
        Claim::Acquired { attempt: 2, .. }
    ));
    assert_eq!(ledger.claim_record(&id("EvNever")).await.unwrap(), None);
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn a_failed_claim_made_retryable_is_claimed_again_with_its_ttl_extended() {
    let (ledger, _) = ledger().await;
    let (e, a) = (id("EvRedrive"), OwnerToken::random());
    assert!(
        !ledger.make_retryable(&e, NOW).await.unwrap(),
        "nothing there"
    );
    ledger.claim(&request(&e, &a, NOW)).await.unwrap();
    assert!(
        !ledger.make_retryable(&e, NOW).await.unwrap(),
        "in progress: not failed"
    );
    let failed = Finish::Failed {
        error: "slack_failed".into(),
        retryable: false,
    };
    ledger
        .finish(
            Held {
                event_id: &e,
                owner: &a,
            },
            &failed,
            &[],
            NOW + 1,
        )
        .await
        .unwrap();
    let b = OwnerToken::random();
    assert!(matches!(
        ledger.claim(&request(&e, &b, NOW + 2)).await.unwrap(),
        Claim::AlreadyFailed { .. }
    ));
    let extended = NOW + (TTL_S + 3600) * 1000;
    assert!(ledger.make_retryable(&e, extended).await.unwrap());
    let record = ledger.claim_record(&e).await.unwrap().unwrap();
    assert!(record.retryable);
    assert_eq!(record.expires_at_ms, extended);
    assert!(matches!(
        ledger.claim(&request(&e, &b, NOW + 3)).await.unwrap(),
        Claim::Acquired { attempt: 2, .. }
    ));
}
