//! Faults on the PostgreSQL stores that a single statement's snapshot or a pooler in front of
//! the server bring about: a statement that waits for another transaction's commit and reads
//! the row as it was before it, and statements whose names outlive one transaction.

use std::sync::Arc;
use std::time::Duration;

use slack_once::ledger::contract::{LEASE, NOW, request};
use slack_once::ledger::{Claim, Ledger, OwnerToken, PostgresLedger};
use slack_once::slack::envelope::EventId;

use crate::helpers::*;

fn id(s: &str) -> EventId {
    EventId::try_from(s.to_string()).unwrap()
}

#[tokio::test]
#[ignore = "needs PostgreSQL"]
async fn a_claim_sent_again_while_another_takes_it_over_answers_the_takeover_not_its_own_claim() {
    let (_, database) = fresh_schema().await;
    let ledger = Arc::new(PostgresLedger::new(database.clone()));
    let (e, a) = (id("EvResentClaim"), OwnerToken::random());
    // A's claim commits; its answer is lost, and A sends it again once A's lease has lapsed.
    assert!(matches!(
        ledger.claim(&request(&e, &a, NOW)).await.unwrap(),
        Claim::Acquired { attempt: 1, .. }
    ));
    // Meanwhile B takes the lapsed claim over: its transaction has written, not committed.
    let b_lease_until = NOW + LEASE + 1 + LEASE;
    let mut other = database.client().await.unwrap();
    let takeover = other.transaction().await.unwrap();
    takeover
        .execute(
            "UPDATE slack_once_claims SET owner = 'B', lease_until = $2, claimed_at = $3, \
             attempts = attempts + 1 WHERE key = $1",
            &[
                &e.as_str(),
                &(b_lease_until as i64),
                &((NOW + LEASE + 1) as i64),
            ],
        )
        .await
        .unwrap();
    // A's claim, sent again, starts while B's is uncommitted: its snapshot holds A's own row.
    let resent = {
        let (ledger, e, a) = (ledger.clone(), e.clone(), a.clone());
        tokio::spawn(async move { ledger.claim(&request(&e, &a, NOW + LEASE + 2)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !resent.is_finished(),
        "the claim sent again waits for B's transaction"
    );
    takeover.commit().await.unwrap();
    assert_eq!(
        resent.await.unwrap().unwrap(),
        Claim::InProgress {
            lease_until_ms: b_lease_until
        },
        "B holds the claim: A, whose first answer was lost, must not think it holds it too"
    );
}
