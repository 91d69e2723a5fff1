//! The [`Ledger`] trait's contract as scenarios any implementation must pass. The in-memory
//! ledger's unit tests and the DynamoDB Local tests run the same ones, and each then checks
//! what its own storage holds.

use super::{Alias, AliasRequest, Claim, ClaimRequest, Finish, Held, Ledger};
use super::{LedgerError, NotePut, OwnerToken};
use crate::journal::record::{Journal, Settled, StepRecord};
use crate::slack::envelope::EventId;

/// The scenarios' clock: every write is at `NOW` plus a few milliseconds.
pub const NOW: u64 = 1_700_000_000_000;
/// The lease every scenario's claim asks for.
pub const LEASE: u64 = 30_000;
/// How long every scenario's event is remembered, in seconds.
pub const TTL_S: u64 = 90_000;
/// The Slack app of every scenario's claim, but those of two apps.
pub const APP: &str = "A0001";
/// Another Slack app, whose deployment shares the table.
pub const OTHER_APP: &str = "A0OTHER";

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
        app_id: Some(APP),
        redelivery_due: false,
    }
}

/// The intent of a step by claim `attempt` at `at_ms` (leased for `LEASE`), calling `op`.
pub fn intent(attempt: u32, at_ms: u64, op: &str) -> StepRecord {
    StepRecord::Intent {
        attempt,
        op: Some(op.to_string()),
        at_ms: Some(at_ms),
        lease_until_ms: Some(at_ms + LEASE),
        looked: None,
    }
}

/// A claim sent again after its answer was lost finds its own claim and acquires it with the
/// stored attempt. Leaves `e` claimed, attempt 2.
pub async fn a_claim_sent_again_acquires_with_the_stored_attempt(ledger: &dyn Ledger, e: &EventId) {
    let (a, b) = (OwnerToken::random(), OwnerToken::random());
    let new = ledger.claim(&request(e, &a, NOW)).await.unwrap();
    assert_eq!(
        ledger.claim(&request(e, &a, NOW)).await.unwrap(),
        new,
        "the first claim of a key, sent again"
    );
    assert!(matches!(new, Claim::Acquired { attempt: 1, ref journal } if journal.is_empty()));
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
        .begin_step(
            held_a,
            1,
            &intent(1, NOW, "chat.postMessage#00000001"),
            &[],
            NOW,
        )
        .await
        .unwrap();
    ledger
        .begin_step(
            held_a,
            1,
            &intent(1, NOW, "chat.postMessage#00000001"),
            &[],
            NOW,
        )
        .await
        .expect("an intent sent twice is the same write");
    let done = Settled::Done {
        step: 1,
        result: r#"{"channel":"C1","ts":"1.5"}"#.into(),
        op: Some("chat.postMessage#00000001".into()),
    };
    ledger
        .begin_step(
            held_a,
            2,
            &intent(1, NOW + 1, "chat.update#00000002"),
            &[done],
            NOW + 1,
        )
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
                    result: r#"{"channel":"C1","ts":"1.5"}"#.into(),
                    op: Some("chat.postMessage#00000001".into()),
                }
            ),
            (2, intent(1, NOW + 1, "chat.update#00000002")),
        ])
    );
    assert!(
        matches!(
            ledger
                .begin_step(held_a, 3, &intent(1, NOW + LEASE, "x#0"), &[], NOW + LEASE)
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
            &[Settled::NotDone { step: 2 }],
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
    ledger.finish(held, &failed, &[], NOW + 3).await.unwrap();
    ledger
        .finish(held, &failed, &[], NOW + 3)
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

/// An alias belongs to the first key that writes it: the same key writing it again (a copy of
/// the same message, or the write sent again) finds it its own, another key finds a copy of
/// the first; past its TTL it counts as absent.
pub async fn an_alias_belongs_to_the_first_message_that_writes_it(
    ledger: &dyn Ledger,
    alias: &EventId,
    first: &EventId,
    second: &EventId,
) {
    let write = |of, now_ms| AliasRequest {
        alias,
        of,
        now_ms,
        expires_at_s: NOW / 1000 + TTL_S,
        app_id: Some(APP),
    };
    assert_eq!(ledger.alias(&write(first, NOW)).await.unwrap(), Alias::Ours);
    assert_eq!(
        ledger.alias(&write(first, NOW + 1)).await.unwrap(),
        Alias::Ours,
        "the same message again"
    );
    assert_eq!(
        ledger.alias(&write(second, NOW + 2)).await.unwrap(),
        Alias::CopyOf {
            key: first.to_string()
        }
    );
    let after_ttl = (NOW / 1000 + TTL_S) * 1000;
    let later = AliasRequest {
        expires_at_s: after_ttl / 1000 + TTL_S,
        ..write(second, after_ttl)
    };
    assert_eq!(
        ledger.alias(&later).await.unwrap(),
        Alias::Ours,
        "past its TTL the alias counts as absent"
    );
}

/// An alias lives as long as its message's latest claim: written again by its message hours
/// later (a delivery that claims it anew), its expiry moves with that claim's, so a copy under
/// another `ts` after the first expiry still finds it. A write seconds later need not move it.
pub async fn an_alias_lives_as_long_as_its_messages_latest_claim(
    ledger: &dyn Ledger,
    alias: &EventId,
    first: &EventId,
    second: &EventId,
) {
    let write = |of, now_ms: u64| AliasRequest {
        alias,
        of,
        now_ms,
        expires_at_s: now_ms / 1000 + TTL_S,
        app_id: Some(APP),
    };
    assert_eq!(ledger.alias(&write(first, NOW)).await.unwrap(), Alias::Ours);
    let later = NOW + 2 * 3600 * 1000;
    assert_eq!(
        ledger.alias(&write(first, later)).await.unwrap(),
        Alias::Ours
    );
    let after_first_expiry = (NOW / 1000 + TTL_S + 60) * 1000;
    assert_eq!(
        ledger
            .alias(&write(second, after_first_expiry))
            .await
            .unwrap(),
        Alias::CopyOf {
            key: first.to_string()
        },
        "the alias expired with the message's first claim, not its latest"
    );
}

/// A claim stands for the intent of the lowest absent step until its claimant writes: claims
/// that crashed having written nothing are seen by the next claim as one window spanning
/// them (a claim sent again does not see its own), and a claimant's write ends them. A step
/// made on the claim's standing whose fate is unknown is recorded as an intent by the finish.
/// Leaves `e` released with step 1 done and step 2's intent recorded.
pub async fn began_windows_stand_for_the_first_step_until_the_claimant_writes(
    ledger: &dyn Ledger,
    e: &EventId,
) {
    let (a, b, c) = (
        OwnerToken::random(),
        OwnerToken::random(),
        OwnerToken::random(),
    );
    ledger.claim(&request(e, &a, NOW)).await.unwrap();
    // A dies after its claim; B takes over after A's lease and dies too.
    let Claim::Acquired { journal, .. } = ledger.claim(&request(e, &b, NOW + LEASE)).await.unwrap()
    else {
        panic!("not acquired")
    };
    let began = |at_ms, lease_until_ms| StepRecord::Began {
        at_ms,
        lease_until_ms,
        announces: true,
        looked: None,
    };
    assert_eq!(journal, Journal::from([(1, began(NOW, NOW + LEASE))]));
    let later = NOW + 2 * LEASE;
    let Claim::Acquired { attempt, journal } = ledger.claim(&request(e, &c, later)).await.unwrap()
    else {
        panic!("not acquired")
    };
    assert_eq!(attempt, 3);
    assert_eq!(
        journal,
        Journal::from([(1, began(NOW, NOW + 2 * LEASE))]),
        "one window spanning both crashed claims"
    );
    assert_eq!(
        ledger.claim(&request(e, &c, later)).await.unwrap(),
        Claim::Acquired { attempt, journal },
        "sent again, the claim sees the earlier windows and not its own"
    );
    // C made step 1 on its claim's standing, then step 2 with an intent of its own (which
    // records step 1 and ends the windows), whose fate it never learnt; then it released.
    let held_c = Held {
        event_id: e,
        owner: &c,
    };
    let done = Settled::Done {
        step: 1,
        result: r#"{"channel":"C1","ts":"1.5"}"#.into(),
        op: Some("chat.postMessage#00000001".into()),
    };
    ledger
        .begin_step(
            held_c,
            2,
            &intent(3, later + 5, "chat.update#00000002"),
            &[done],
            later + 5,
        )
        .await
        .unwrap();
    let unknown = Settled::Unknown {
        step: 3,
        intent: intent(3, later + 6, "reactions.add#00000003"),
    };
    ledger
        .finish(held_c, &Finish::Released, &[unknown], later + 7)
        .await
        .unwrap();
    let d = OwnerToken::random();
    let Claim::Acquired { journal, .. } = ledger.claim(&request(e, &d, later + 8)).await.unwrap()
    else {
        panic!("not acquired")
    };
    assert_eq!(
        journal,
        Journal::from([
            (
                1,
                StepRecord::Done {
                    result: r#"{"channel":"C1","ts":"1.5"}"#.into(),
                    op: Some("chat.postMessage#00000001".into()),
                }
            ),
            (2, intent(3, later + 5, "chat.update#00000002")),
            (3, intent(3, later + 6, "reactions.add#00000003")),
        ]),
        "C's writes ended the windows: no Began"
    );
    let held_d = Held {
        event_id: e,
        owner: &d,
    };
    ledger
        .finish(
            held_d,
            &Finish::Released,
            &[Settled::NotDone { step: 3 }],
            later + 9,
        )
        .await
        .unwrap();
}

/// Two Slack apps whose deployments share the table, each sent the same key (a message that
/// mentions both; Slack gives their callbacks the same `event_id` too): neither takes the
/// other's, whatever its state, and an item written by a version before apps is anyone's.
/// Leaves `e` the other app's, done.
pub async fn another_apps_key_is_never_taken(ledger: &dyn Ledger, e: &EventId) {
    let (ours, theirs) = (OwnerToken::random(), OwnerToken::random());
    let as_app = |owner, app, now_ms| ClaimRequest {
        app_id: Some(app),
        ..request(e, owner, now_ms)
    };
    assert!(matches!(
        ledger
            .claim(&as_app(&theirs, OTHER_APP, NOW))
            .await
            .unwrap(),
        Claim::Acquired { attempt: 1, .. }
    ));
    let other = Claim::OtherApp {
        app_id: OTHER_APP.into(),
    };
    assert_eq!(
        ledger.claim(&as_app(&ours, APP, NOW + 1)).await.unwrap(),
        other,
        "held live by the other app"
    );
    // Its lease over, released, answered: still the other app's.
    assert_eq!(
        ledger
            .claim(&as_app(&ours, APP, NOW + LEASE + 1))
            .await
            .unwrap(),
        other,
        "its lease over"
    );
    ledger.release(e, &theirs, NOW + 2).await.unwrap();
    assert_eq!(
        ledger.claim(&as_app(&ours, APP, NOW + 3)).await.unwrap(),
        other,
        "released"
    );
    let again = OwnerToken::random();
    assert!(matches!(
        ledger
            .claim(&as_app(&again, OTHER_APP, NOW + 4))
            .await
            .unwrap(),
        Claim::Acquired { attempt: 2, .. }
    ));
    ledger
        .finish(
            Held {
                event_id: e,
                owner: &again,
            },
            &Finish::Done,
            &[],
            NOW + 5,
        )
        .await
        .unwrap();
    assert_eq!(
        ledger.claim(&as_app(&ours, APP, NOW + 6)).await.unwrap(),
        other,
        "answered by the other app: not this one's answer"
    );
    // The app's own key is its own.
    let scoped = super::app_scoped(e, APP).expect("a key");
    let here = ClaimRequest {
        app_id: Some(APP),
        ..request(&scoped, &ours, NOW + 7)
    };
    assert!(matches!(
        ledger.claim(&here).await.unwrap(),
        Claim::Acquired { attempt: 1, .. }
    ));
    // A claim that names no app (a version before apps) finds an app's item as before.
    let unnamed = ClaimRequest {
        app_id: None,
        ..request(e, &ours, NOW + 8)
    };
    assert!(matches!(
        ledger.claim(&unnamed).await.unwrap(),
        Claim::AlreadyDone { .. }
    ));
}

/// An item a version before apps wrote (no app) is taken by a claim that names its app, as
/// the same app's, and stays anyone's: the app whose old version wrote it may be another,
/// whose next delivery must find it held (or answered), never another app's. Leaves `e`
/// claimed by `APP`.
pub async fn an_item_of_no_app_is_anyones(ledger: &dyn Ledger, e: &EventId) {
    let (old, new) = (OwnerToken::random(), OwnerToken::random());
    let unnamed = ClaimRequest {
        app_id: None,
        ..request(e, &old, NOW)
    };
    assert!(matches!(
        ledger.claim(&unnamed).await.unwrap(),
        Claim::Acquired { attempt: 1, .. }
    ));
    assert!(matches!(
        ledger.claim(&request(e, &new, NOW + 1)).await.unwrap(),
        Claim::InProgress { .. }
    ));
    assert!(matches!(
        ledger
            .claim(&request(e, &new, NOW + LEASE + 1))
            .await
            .unwrap(),
        Claim::Acquired { attempt: 2, .. }
    ));
    let other = ClaimRequest {
        app_id: Some(OTHER_APP),
        ..request(e, &old, NOW + LEASE + 2)
    };
    assert!(
        matches!(
            ledger.claim(&other).await.unwrap(),
            Claim::InProgress { .. }
        ),
        "still anyone's: held, not another app's"
    );
}

/// The same for aliases: another app's alias is never this app's, nor a copy of its message.
pub async fn another_apps_alias_is_never_taken(ledger: &dyn Ledger, alias: &EventId) {
    let of = EventId::try_from("msg-T0001-C0001-1700000000_000100".to_string()).unwrap();
    let write = |app, now_ms: u64| AliasRequest {
        alias,
        of: &of,
        now_ms,
        expires_at_s: now_ms / 1000 + TTL_S,
        app_id: Some(app),
    };
    assert_eq!(
        ledger.alias(&write(OTHER_APP, NOW)).await.unwrap(),
        Alias::Ours
    );
    assert_eq!(
        ledger.alias(&write(APP, NOW + 1)).await.unwrap(),
        Alias::OtherApp {
            app_id: OTHER_APP.into()
        }
    );
    let after_ttl = NOW + (TTL_S + 1) * 1000;
    assert_eq!(
        ledger.alias(&write(APP, after_ttl)).await.unwrap(),
        Alias::OtherApp {
            app_id: OTHER_APP.into()
        },
        "past its TTL too"
    );
    assert_eq!(
        ledger.alias(&write(OTHER_APP, NOW + 2)).await.unwrap(),
        Alias::Ours,
        "the other app's own"
    );
}

/// One write that carries two fates of one step (a view the ingress handed on unknown, then
/// found by the worker) records the last, and is one valid write. Leaves `e` done.
pub async fn two_fates_of_one_step_in_one_write_record_the_last(ledger: &dyn Ledger, e: &EventId) {
    let a = OwnerToken::random();
    let Claim::Acquired { .. } = ledger.claim(&request(e, &a, NOW)).await.unwrap() else {
        panic!("not acquired")
    };
    let held = Held {
        event_id: e,
        owner: &a,
    };
    let fates = [
        Settled::Unknown {
            step: 1,
            intent: intent(0, NOW, "views.open#00000001"),
        },
        Settled::Done {
            step: 1,
            result: r#"{"ok":true,"view":{"id":"V1"}}"#.into(),
            op: Some("views.open#00000001".into()),
        },
    ];
    ledger
        .begin_step(
            held,
            2,
            &intent(1, NOW + 1, "chat.postMessage#00000002"),
            &fates,
            NOW + 1,
        )
        .await
        .expect("one write with two fates of a step");
    ledger
        .finish(held, &Finish::Done, &[], NOW + 2)
        .await
        .unwrap();
    // A later claim of another owner would see the journal: read it through a takeover of a
    // released copy instead: the test of each ledger reads its storage.
    assert!(matches!(
        ledger
            .claim(&request(e, &OwnerToken::random(), NOW + 3))
            .await
            .unwrap(),
        Claim::AlreadyDone { .. }
    ));
}

/// The app's state: a first write where nothing is, a write conditioned on the version read, a
/// conflict for a stale version (nothing written), the writers kept, and a value past its TTL
/// counted as absent (and written again from version 0).
pub async fn state_is_written_once_per_version_read(ledger: &dyn Ledger, key: &EventId) {
    use super::{StatePut, StateWrite};
    let expires_at_s = NOW / 1000 + 60;
    let write =
        |value: &'static str, expected: u64, writer: &'static str, read: &'static [String]| {
            StateWrite {
                value,
                expected,
                writer,
                read_writers: read,
                expires_at_s,
                request: None,
            }
        };
    assert_eq!(ledger.state(key, NOW).await.unwrap(), None);
    let first = ledger
        .put_state(key, &write("{\"n\":1}", 0, "w1", &[]), NOW)
        .await
        .unwrap();
    assert_eq!(first, StatePut::Written { version: 1 });
    let again = ledger
        .put_state(key, &write("{\"n\":9}", 0, "w9", &[]), NOW + 1)
        .await
        .unwrap();
    assert_eq!(
        again,
        StatePut::Conflict,
        "a first write finds the value there"
    );
    let read = ledger
        .state(key, NOW + 2)
        .await
        .unwrap()
        .expect("the value");
    assert_eq!((read.value.as_str(), read.version), ("{\"n\":1}", 1));
    assert_eq!(read.writers, ["w1"]);
    let writers: &'static [String] = Box::leak(read.writers.into_boxed_slice());
    let second = ledger
        .put_state(key, &write("{\"n\":2}", 1, "w2", writers), NOW + 3)
        .await;
    assert_eq!(second.unwrap(), StatePut::Written { version: 2 });
    let stale = ledger
        .put_state(key, &write("{\"n\":7}", 1, "w7", writers), NOW + 4)
        .await;
    assert_eq!(
        stale.unwrap(),
        StatePut::Conflict,
        "the version read is stale"
    );
    let read = ledger
        .state(key, NOW + 5)
        .await
        .unwrap()
        .expect("the value");
    assert_eq!((read.value.as_str(), read.version), ("{\"n\":2}", 2));
    assert_eq!(read.writers, ["w1", "w2"]);
    let later = NOW + 61_000;
    assert_eq!(
        ledger.state(key, later).await.unwrap(),
        None,
        "past its TTL"
    );
    let fresh = ledger
        .put_state(
            key,
            &StateWrite {
                expires_at_s: later / 1000 + 60,
                ..write("{\"n\":1}", 0, "w3", &[])
            },
            later,
        )
        .await
        .unwrap();
    assert_eq!(
        fresh,
        StatePut::Written { version: 1 },
        "written again from nothing"
    );
    assert_eq!(
        ledger.state(key, later).await.unwrap().unwrap().writers,
        ["w3"]
    );
}

/// A state change recorded with its request's claim: made once however often, and whenever,
/// the request runs again (its write sent again after a lost answer, a takeover, the request
/// failed and claimed again by a redrive, whatever other writes came to the value meanwhile);
/// refused for a claim no longer the writer's; and nothing of a refused transaction is kept.
/// `e` and `f` are requests' keys; `key` the value's.
pub async fn a_state_change_is_made_once_per_request(
    ledger: &dyn Ledger,
    e: &EventId,
    f: &EventId,
    key: &EventId,
) {
    use super::{RequestChange, StatePut, StateWrite};
    let expires_at_s = NOW / 1000 + 7_200;
    let leak = |o: OwnerToken| -> &'static OwnerToken { Box::leak(Box::new(o)) };
    let key_of = |k: &EventId| -> &'static EventId { Box::leak(Box::new(k.clone())) };
    let (a, b, c) = (
        leak(OwnerToken::random()),
        leak(OwnerToken::random()),
        leak(OwnerToken::random()),
    );
    let (e, f) = (key_of(e), key_of(f));
    let put =
        |value: &'static str, expected: u64, event_id, owner, change: &'static str| StateWrite {
            value,
            expected,
            writer: "w",
            read_writers: &[],
            expires_at_s,
            request: Some(RequestChange {
                held: Held { event_id, owner },
                change,
            }),
        };
    ledger.claim(&request(e, a, NOW)).await.unwrap();
    ledger.claim(&request(f, b, NOW)).await.unwrap();
    let first = ledger
        .put_state(key, &put("1", 0, e, a, "c#1"), NOW + 1)
        .await
        .unwrap();
    assert_eq!(first, StatePut::Written { version: 1 });
    // The same change sent again (its answer lost), over the version it finds now.
    let again = ledger
        .put_state(key, &put("2", 1, e, a, "c#1"), NOW + 2)
        .await
        .unwrap();
    assert_eq!(again, StatePut::MadeAlready { version: 1 });
    // Another request's changes, many of them.
    for v in 1..=5u64 {
        let value: &'static str = Box::leak(format!("{}", v + 1).into_boxed_str());
        let change: &'static str = Box::leak(format!("c#{v}").into_boxed_str());
        let made = ledger
            .put_state(key, &put(value, v, f, b, change), NOW + 3)
            .await
            .unwrap();
        assert_eq!(made, StatePut::Written { version: v + 1 });
    }
    // A stale version with a change not made yet: a conflict, and nothing recorded.
    let stale = ledger
        .put_state(key, &put("9", 1, e, a, "c#2"), NOW + 4)
        .await
        .unwrap();
    assert_eq!(stale, StatePut::Conflict);
    let made = ledger
        .put_state(key, &put("7", 6, e, a, "c#2"), NOW + 5)
        .await
        .unwrap();
    assert_eq!(
        made,
        StatePut::Written { version: 7 },
        "not recorded by the conflict"
    );
    // The request fails for now (retryable), and is claimed again later (a redrive): its
    // changes are still its own, the first found made.
    ledger
        .finish(
            Held {
                event_id: e,
                owner: a,
            },
            &super::Finish::Failed {
                error: "slack_failed".into(),
                retryable: true,
            },
            &[],
            NOW + 6,
        )
        .await
        .unwrap();
    let later = NOW + 3_600_000;
    assert!(matches!(
        ledger.claim(&request(e, c, later)).await.unwrap(),
        Claim::Acquired { .. }
    ));
    let redriven = ledger
        .put_state(key, &put("8", 7, e, c, "c#1"), later + 1)
        .await
        .unwrap();
    assert_eq!(redriven, StatePut::MadeAlready { version: 1 });
    // The earlier owner's claim is gone: its write is refused, and nothing is written.
    let lost = ledger
        .put_state(key, &put("8", 7, e, a, "c#3"), later + 2)
        .await;
    assert!(
        matches!(lost, Err(LedgerError::NotOwner { .. })),
        "{lost:?}"
    );
    let read = ledger.state(key, later + 3).await.unwrap().unwrap();
    assert_eq!((read.value.as_str(), read.version), ("7", 7));
}

/// A note is replaced only where it is still as read: absent, the first write of two that
/// read it absent stands; present, only a write that read its value replaces it; sent again
/// after its answer was lost, a replace finds the note changed (by itself) and writes nothing;
/// a note past its TTL counts as absent. Leaves `key` holding `"c"`.
pub async fn a_note_is_replaced_only_where_it_is_as_read(ledger: &dyn Ledger, key: &EventId) {
    let expires = NOW / 1000 + TTL_S;
    let replace = |read: Option<&'static str>, value: &'static str, now_ms: u64| async move {
        let exp = now_ms / 1000 + TTL_S;
        let put = ledger.replace_note(key, read, value, now_ms, exp, now_ms);
        put.await.unwrap()
    };
    assert_eq!(replace(None, "a", NOW).await, NotePut::Written);
    assert_eq!(
        replace(None, "b", NOW + 1).await,
        NotePut::Conflict,
        "read absent, then written"
    );
    assert_eq!(
        ledger.note(key, NOW + 2).await.unwrap().as_deref(),
        Some("a")
    );
    assert_eq!(
        replace(Some("x"), "b", NOW + 3).await,
        NotePut::Conflict,
        "read as another value"
    );
    assert_eq!(replace(Some("a"), "b", NOW + 4).await, NotePut::Written);
    assert_eq!(
        replace(Some("a"), "b", NOW + 4).await,
        NotePut::Conflict,
        "sent again"
    );
    assert_eq!(
        ledger.note(key, NOW + 5).await.unwrap().as_deref(),
        Some("b")
    );
    // Past its TTL, the note is absent: replaced as read absent, not as its stale value.
    let later = (expires + TTL_S + 10) * 1000;
    assert_eq!(ledger.note(key, later).await.unwrap(), None);
    assert_eq!(
        replace(Some("b"), "c", later).await,
        NotePut::Conflict,
        "read before it expired"
    );
    assert_eq!(replace(None, "c", later).await, NotePut::Written);
    assert_eq!(
        ledger.note(key, later + 1).await.unwrap().as_deref(),
        Some("c")
    );
}
