//! The [`Ledger`] trait's contract as scenarios any implementation must pass. The in-memory
//! ledger's unit tests and the DynamoDB Local tests run the same ones, and each then checks
//! what its own storage holds.

use super::{Claim, ClaimRequest, Finish, Held, Journal, Ledger, LedgerError, OwnerToken};
use super::{Settled, StepRecord};
use crate::envelope::EventId;

/// The scenarios' clock: every write is at `NOW` plus a few milliseconds.
pub const NOW: u64 = 1_700_000_000_000;
/// The lease every scenario's claim asks for.
pub const LEASE: u64 = 30_000;
/// How long every scenario's event is remembered, in seconds.
pub const TTL_S: u64 = 90_000;

/// A claim of `event_id` by `owner` at `now_ms`, for `LEASE` and `TTL_S`, as Slack's retry 2.
pub fn request<'a>(event_id: &'a EventId, owner: &'a OwnerToken, now_ms: u64) -> ClaimRequest<'a> {
    ClaimRequest {
        event_id,
        owner,
        now_ms,
        lease_until_ms: now_ms + LEASE,
        expires_at_s: now_ms / 1000 + TTL_S,
        team_id: Some("T0001"),
        retry_num: Some(2),
        retry_reason: Some("http_timeout"),
    }
}

/// A claim sent again after its answer was lost finds its own claim and acquires it with the
/// stored attempt. Leaves `e` claimed, attempt 2.
pub async fn a_claim_sent_again_acquires_with_the_stored_attempt(ledger: &dyn Ledger, e: &EventId) {
    let (a, b) = (OwnerToken::random(), OwnerToken::random());
    ledger.claim(&request(e, &a, NOW)).await.unwrap();
    ledger.release(e, &a, NOW + 1).await.unwrap();
    let first = ledger.claim(&request(e, &b, NOW + 2)).await.unwrap();
    // The same write again, as the SDK sends it when the answer was lost.
    let again = ledger.claim(&request(e, &b, NOW + 2)).await.unwrap();
    assert_eq!(
        first, again,
        "the same owner's claim, with its stored attempt"
    );
    assert!(matches!(again, Claim::Acquired { attempt: 2, .. }));
}

/// Intents and results are journaled with writes conditioned on the owner, a settlement rides
/// on the next write, a takeover sees the journal, the old owner can journal nothing more, and
/// a step certainly not done loses its intent. Leaves `e` released with step 1 done.
pub async fn the_journal_survives_a_takeover(ledger: &dyn Ledger, e: &EventId) {
    let (a, b) = (OwnerToken::random(), OwnerToken::random());
    ledger.claim(&request(e, &a, NOW)).await.unwrap();
    let held_a = Held {
        event_id: e,
        owner: &a,
    };
    ledger
        .begin_step(held_a, 1, 1, None, None, NOW)
        .await
        .unwrap();
    ledger
        .begin_step(held_a, 1, 1, None, None, NOW)
        .await
        .expect("an intent sent twice is the same write");
    let done = Settled::Done {
        step: 1,
        result: r#"{"ts":"1.5"}"#.into(),
        op: None,
    };
    ledger
        .begin_step(held_a, 2, 1, None, Some(&done), NOW + 1)
        .await
        .unwrap();
    // A dies; B takes over after the lease and sees step 1 done, step 2 attempted.
    let Claim::Acquired { attempt, journal } =
        ledger.claim(&request(e, &b, NOW + LEASE)).await.unwrap()
    else {
        panic!("not acquired")
    };
    assert_eq!(attempt, 2);
    assert_eq!(
        journal,
        Journal::from([
            (
                1,
                StepRecord::Done {
                    result: r#"{"ts":"1.5"}"#.into(),
                    op: None
                }
            ),
            (
                2,
                StepRecord::Intent {
                    attempt: 1,
                    op: None
                }
            ),
        ])
    );
    assert!(
        matches!(
            ledger
                .begin_step(held_a, 3, 1, None, None, NOW + LEASE)
                .await,
            Err(LedgerError::NotOwner { .. })
        ),
        "the old owner journals nothing more"
    );
    // B learns step 2 never happened: its intent goes with the release.
    let held_b = Held {
        event_id: e,
        owner: &b,
    };
    ledger
        .finish(
            held_b,
            &Finish::Released,
            Some(&Settled::NotDone { step: 2 }),
            NOW + LEASE + 1,
        )
        .await
        .unwrap();
}

/// A failure is recorded once (sent again, it finds itself applied) and blocks every later copy
/// with its error. Leaves `e` failed with `channel_not_found` at `NOW + 3`.
pub async fn a_failed_event_blocks_every_later_copy(ledger: &dyn Ledger, e: &EventId) {
    let (a, b) = (OwnerToken::random(), OwnerToken::random());
    ledger.claim(&request(e, &a, NOW)).await.unwrap();
    let held = Held {
        event_id: e,
        owner: &a,
    };
    let failed = Finish::Failed {
        error: "channel_not_found".into(),
        retryable: false,
    };
    ledger.finish(held, &failed, None, NOW + 3).await.unwrap();
    ledger
        .finish(held, &failed, None, NOW + 3)
        .await
        .expect("sent again: applied already");
    assert_eq!(
        ledger
            .claim(&request(e, &b, NOW + 10 * LEASE))
            .await
            .unwrap(),
        Claim::AlreadyFailed {
            error: "channel_not_found".into()
        }
    );
}
