//! The in-memory ledger: local mode's default and the reference for the shared semantics.
//! It de-duplicates within one process only; several processes need the DynamoDB ledger.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use async_trait::async_trait;

use super::{
    Alias, AliasRequest, Blocked, Claim, ClaimRequest, Finish, Held, JournalEdit, Ledger,
    LedgerError, OwnerToken, Status, applied_already, existing_blocks_claim, other_app,
};
use crate::journal::record::{
    BeganWindow, Journal, Looked, Settled, StepRecord, with_began, with_looked,
};
use crate::slack::envelope::EventId;

#[derive(Clone, Debug)]
struct Entry {
    status: Status,
    owner: OwnerToken,
    lease_until_ms: u64,
    expires_at_s: u64,
    attempts: u32,
    journal: Journal,
    /// The began windows of claims that have written nothing since (see the ledger's rules).
    began: Vec<BeganWindow>,
    /// A message's listeners that ran, as its completion recorded them.
    ran: Option<Vec<String>>,
    error: Option<String>,
    retryable: bool,
    /// The Slack app whose claim it is (another app's is never taken).
    app: Option<String>,
    /// Look-ups' progress, by step (see [`super::Looked`]).
    looked: BTreeMap<u32, Looked>,
    /// The request's state changes made, by change id, with the version each wrote.
    changes: BTreeMap<String, u64>,
}

/// From this many entries on, a claim first drops the expired ones, so memory stays bounded by
/// the events of one TTL rather than growing for the life of the process. The next sweep waits
/// until the map has doubled, so sweeping costs O(1) per claim, amortized.
const SWEEP_THRESHOLD: usize = 10_000;

#[derive(Debug, Default)]
struct Entries {
    map: HashMap<EventId, Entry>,
    /// Aliases: the key each belongs to, when it expires (epoch seconds), and its app.
    aliases: HashMap<EventId, (EventId, u64, Option<String>)>,
    /// Notes: the value, when it was written (epoch ms) and when it expires (epoch seconds).
    notes: HashMap<EventId, (String, u64, u64)>,
    /// The app's state values, with their TTL (epoch seconds).
    states: HashMap<EventId, (super::StateItem, u64)>,
    /// Size at which the next claim sweeps (0 until the first claim sets it).
    sweep_at: usize,
}

/// The ledger in this process's memory (see the module's documentation).
#[derive(Debug, Default)]
pub struct MemoryLedger {
    entries: Mutex<Entries>,
}

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of entries held, expired ones included until the next sweep.
    pub fn len(&self) -> usize {
        self.entries.lock().expect("ledger lock").map.len()
    }

    /// Whether it holds no entries, expired ones included ([`MemoryLedger::len`] is 0).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The journal of an event, as stored (for tests).
    pub fn journal(&self, event_id: &EventId) -> Option<Journal> {
        let entries = self.entries.lock().expect("ledger lock");
        entries.map.get(event_id).map(|e| e.journal.clone())
    }

    /// Every claim's key and status, as stored (for tests), in key order.
    pub fn statuses(&self) -> Vec<(EventId, Status)> {
        let entries = self.entries.lock().expect("ledger lock");
        let mut all: Vec<(EventId, Status)> = entries
            .map
            .iter()
            .map(|(k, e)| (k.clone(), e.status))
            .collect();
        all.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        all
    }

    /// The status of an event, as stored (for tests).
    pub fn status(&self, event_id: &EventId) -> Option<Status> {
        let entries = self.entries.lock().expect("ledger lock");
        entries.map.get(event_id).map(|e| e.status)
    }

    #[cfg(feature = "explore")]
    /// The failure code an event's claim ended with, as stored (for tests).
    pub(crate) fn error(&self, event_id: &EventId) -> Option<String> {
        let entries = self.entries.lock().expect("ledger lock");
        entries.map.get(event_id).and_then(|e| e.error.clone())
    }

    #[cfg(feature = "explore")]
    /// Ends `failed` (`code`, retryable) the claim of `event_id` if it is in progress past its
    /// lease at `now_ms`, as `slack-once redrive` ends a refused dead letter's claim (for the
    /// simulation); whether it did.
    pub(crate) fn end_lapsed(&self, event_id: &EventId, code: &str, now_ms: u64) -> bool {
        let mut entries = self.entries.lock().expect("ledger lock");
        match entries.map.get_mut(event_id) {
            Some(e) if e.status == Status::InProgress && e.lease_until_ms <= now_ms => {
                e.status = Status::Failed;
                e.error = Some(code.to_string());
                e.retryable = true;
                true
            }
            _ => false,
        }
    }
}

fn record(entry: &mut Entry, edit: &JournalEdit) {
    // Any write of the claimant ends the began windows: what they stood for is recorded now.
    entry.began.clear();
    edit.apply(&mut entry.journal, &mut entry.looked, &mut entry.ran);
}

#[async_trait]
impl Ledger for MemoryLedger {
    /// This process's memory: no other process reads it.
    fn is_shared(&self) -> bool {
        false
    }

    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<Claim, LedgerError> {
        let mut guard = self.entries.lock().expect("ledger lock");
        let entries = &mut *guard;
        if entries.map.len() >= entries.sweep_at.max(SWEEP_THRESHOLD) {
            let now_s = request.now_ms / 1000;
            entries.map.retain(|_, e| e.expires_at_s > now_s);
            entries
                .aliases
                .retain(|_, (_, expires_at_s, _)| *expires_at_s > now_s);
            entries.sweep_at = (entries.map.len() * 2).max(SWEEP_THRESHOLD);
        }
        let entries = &mut entries.map;
        let mut attempts = 0;
        let mut journal = Journal::new();
        let mut began = Vec::new();
        let mut looked = BTreeMap::new();
        let mut changes = BTreeMap::new();
        let mut app = request.app_id.map(str::to_string);
        let window = BeganWindow {
            at_ms: request.now_ms,
            lease_until_ms: request.lease_until_ms,
            announces: true,
        };
        if let Some(existing) = entries.get(request.event_id) {
            if existing.owner == *request.owner && existing.status == Status::InProgress {
                // This request's own claim, already applied (its window is the last).
                let earlier = &existing.began[..existing.began.len().saturating_sub(1)];
                return Ok(Claim::Acquired {
                    attempt: existing.attempts,
                    journal: with_looked(
                        with_began(existing.journal.clone(), earlier),
                        &existing.looked,
                    ),
                });
            }
            if let Some(other) = other_app(existing.app.as_deref(), request.app_id) {
                return Ok(Claim::OtherApp {
                    app_id: other.to_string(),
                });
            }
            match existing_blocks_claim(
                existing.status,
                existing.lease_until_ms,
                existing.expires_at_s,
                request.now_ms,
                existing.retryable,
            ) {
                Some(Blocked::Done) => {
                    return Ok(Claim::AlreadyDone {
                        ran: existing.ran.clone(),
                    });
                }
                Some(Blocked::Failed) => {
                    return Ok(Claim::AlreadyFailed {
                        error: existing.error.clone().unwrap_or_default(),
                    });
                }
                Some(Blocked::InProgress { lease_until_ms }) => {
                    return Ok(Claim::InProgress { lease_until_ms });
                }
                None => {}
            }
            // As in DynamoDB's `if_not_exists(attempts, 0) + 1`: the count, the journal and
            // the began windows go on.
            attempts = existing.attempts;
            journal = existing.journal.clone();
            began = existing.began.clone();
            looked = existing.looked.clone();
            changes = existing.changes.clone();
            // An item of no app (a version before apps) stays anyone's.
            app = existing.app.clone();
        }
        let attempt = attempts + 1;
        let seen = with_looked(with_began(journal.clone(), &began), &looked);
        began.push(window);
        entries.insert(
            request.event_id.clone(),
            Entry {
                status: Status::InProgress,
                owner: request.owner.clone(),
                lease_until_ms: request.lease_until_ms,
                expires_at_s: request.expires_at_s,
                attempts: attempt,
                journal,
                began,
                ran: None,
                error: None,
                retryable: false,
                app,
                looked,
                changes,
            },
        );
        Ok(Claim::Acquired {
            attempt,
            journal: seen,
        })
    }

    async fn begin_step(
        &self,
        held: Held<'_>,
        step: u32,
        intent: &StepRecord,
        settled: &[Settled],
        _now_ms: u64,
    ) -> Result<(), LedgerError> {
        let mut entries = self.entries.lock().expect("ledger lock");
        match entries.map.get_mut(held.event_id) {
            Some(entry) if entry.owner == *held.owner && entry.status == Status::InProgress => {
                record(entry, &JournalEdit::of(settled).with_intent(step, intent));
                Ok(())
            }
            _ => Err(LedgerError::NotOwner {
                event_id: held.event_id.clone(),
            }),
        }
    }

    async fn alias(&self, request: &AliasRequest<'_>) -> Result<Alias, LedgerError> {
        let mut entries = self.entries.lock().expect("ledger lock");
        let now_s = request.now_ms / 1000;
        let found = entries.aliases.get(request.alias);
        if let Some(other) = found.and_then(|(_, _, app)| other_app(app.as_deref(), request.app_id))
        {
            return Ok(Alias::OtherApp {
                app_id: other.to_string(),
            });
        }
        match found {
            Some((of, expires_at_s, _)) if *expires_at_s > now_s && of != request.of => {
                Ok(Alias::CopyOf {
                    key: of.to_string(),
                })
            }
            _ => {
                // An alias of no app (a version before apps) is written as this app's.
                let app = request
                    .app_id
                    .map(str::to_string)
                    .or_else(|| found.and_then(|(_, _, app)| app.clone()));
                entries.aliases.insert(
                    request.alias.clone(),
                    (request.of.clone(), request.expires_at_s, app),
                );
                Ok(Alias::Ours)
            }
        }
    }

    async fn set_note(
        &self,
        key: &EventId,
        value: &str,
        at_ms: u64,
        expires_at_s: u64,
    ) -> Result<(), LedgerError> {
        let mut entries = self.entries.lock().expect("ledger lock");
        let newer = entries
            .notes
            .get(key)
            .is_some_and(|(_, written, expires)| *written > at_ms && *expires > at_ms / 1000);
        if !newer {
            entries
                .notes
                .insert(key.clone(), (value.to_string(), at_ms, expires_at_s));
        }
        Ok(())
    }

    async fn replace_note(
        &self,
        key: &EventId,
        read: Option<&str>,
        value: &str,
        at_ms: u64,
        expires_at_s: u64,
        now_ms: u64,
    ) -> Result<super::NotePut, LedgerError> {
        let mut entries = self.entries.lock().expect("ledger lock");
        let found = entries
            .notes
            .get(key)
            .filter(|(_, _, expires)| *expires > now_ms / 1000)
            .map(|(value, ..)| value.as_str());
        if found != read {
            return Ok(super::NotePut::Conflict);
        }
        entries
            .notes
            .insert(key.clone(), (value.to_string(), at_ms, expires_at_s));
        Ok(super::NotePut::Written)
    }

    async fn state(
        &self,
        key: &EventId,
        now_ms: u64,
    ) -> Result<Option<super::StateItem>, LedgerError> {
        let entries = self.entries.lock().expect("ledger lock");
        Ok(entries
            .states
            .get(key)
            .filter(|(_, expires)| *expires >= now_ms / 1000)
            .map(|(item, _)| item.clone()))
    }

    async fn state_changes(&self, key: &EventId) -> Result<BTreeMap<String, u64>, LedgerError> {
        let entries = self.entries.lock().expect("ledger lock");
        Ok(entries
            .map
            .get(key)
            .map(|e| e.changes.clone())
            .unwrap_or_default())
    }

    async fn put_state(
        &self,
        key: &EventId,
        write: &super::StateWrite<'_>,
        now_ms: u64,
    ) -> Result<super::StatePut, LedgerError> {
        let mut guard = self.entries.lock().expect("ledger lock");
        let entries = &mut *guard;
        // The request's record first, as DynamoDB's transaction evaluates both conditions.
        if let Some(request) = &write.request {
            let held = request.held;
            let entry = entries.map.get(held.event_id);
            // Made already whoever holds the claim now (a takeover keeps the record), as
            // DynamoDB's cancelled transaction is read: the record first, then the owner.
            if let Some(version) = entry.and_then(|e| e.changes.get(request.change)) {
                return Ok(super::StatePut::MadeAlready { version: *version });
            }
            if !entry.is_some_and(|e| e.owner == *held.owner && e.status == Status::InProgress) {
                return Err(LedgerError::NotOwner {
                    event_id: held.event_id.clone(),
                });
            }
        }
        let live = entries
            .states
            .get(key)
            .filter(|(_, expires)| *expires >= now_ms / 1000);
        let (found, writers) = match live {
            Some((item, _)) => (item.version, item.writers.clone()),
            None => (0, Vec::new()),
        };
        if found != write.expected {
            return Ok(super::StatePut::Conflict);
        }
        let item = super::StateItem {
            value: write.value.to_string(),
            version: found + 1,
            writers: super::state_writers_after(writers, write.writer),
        };
        entries
            .states
            .insert(key.clone(), (item, write.expires_at_s));
        if let Some(request) = &write.request
            && let Some(entry) = entries.map.get_mut(request.held.event_id)
        {
            entry.changes.insert(request.change.to_string(), found + 1);
        }
        Ok(super::StatePut::Written { version: found + 1 })
    }

    async fn note(&self, key: &EventId, now_ms: u64) -> Result<Option<String>, LedgerError> {
        let entries = self.entries.lock().expect("ledger lock");
        Ok(entries
            .notes
            .get(key)
            .filter(|(_, _, expires)| *expires > now_ms / 1000)
            .map(|(value, ..)| value.clone()))
    }

    async fn finish(
        &self,
        held: Held<'_>,
        to: &Finish,
        settled: &[Settled],
        _now_ms: u64,
    ) -> Result<(), LedgerError> {
        let mut entries = self.entries.lock().expect("ledger lock");
        match entries.map.get_mut(held.event_id) {
            Some(entry) if entry.owner == *held.owner && entry.status == Status::InProgress => {
                record(entry, &JournalEdit::of(settled));
                entry.status = to.status();
                if let Finish::Failed { error, retryable } = to {
                    entry.error = Some(error.clone());
                    entry.retryable = *retryable;
                }
                Ok(())
            }
            Some(entry)
                if applied_already(
                    Some(entry.owner.as_str()),
                    Some(entry.status),
                    held.owner,
                    to.status(),
                ) =>
            {
                Ok(())
            }
            _ => Err(LedgerError::NotOwner {
                event_id: held.event_id.clone(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::contract::{self, LEASE, NOW, request};

    fn id(s: &str) -> EventId {
        EventId::try_from(s.to_string()).unwrap()
    }

    #[tokio::test]
    async fn the_first_claim_acquires_and_a_copy_finds_it_in_progress() {
        let ledger = MemoryLedger::new();
        let (e, a, b) = (id("Ev1"), OwnerToken::random(), OwnerToken::random());
        assert_eq!(
            ledger.claim(&request(&e, &a, NOW)).await.unwrap(),
            Claim::Acquired {
                attempt: 1,
                journal: Journal::new()
            }
        );
        assert_eq!(
            ledger.claim(&request(&e, &b, NOW + 1)).await.unwrap(),
            Claim::InProgress {
                lease_until_ms: NOW + LEASE
            }
        );
    }

    #[tokio::test]
    async fn a_completed_event_is_done_for_every_later_copy() {
        let ledger = MemoryLedger::new();
        let (e, a, b) = (id("Ev1"), OwnerToken::random(), OwnerToken::random());
        ledger.claim(&request(&e, &a, NOW)).await.unwrap();
        ledger.complete(&e, &a, NOW + 5).await.unwrap();
        assert_eq!(
            ledger.claim(&request(&e, &b, NOW + 6)).await.unwrap(),
            Claim::AlreadyDone { ran: None }
        );
        // Even long after the lease: done stays done until the TTL.
        assert_eq!(
            ledger
                .claim(&request(&e, &b, NOW + 10 * LEASE))
                .await
                .unwrap(),
            Claim::AlreadyDone { ran: None }
        );
    }

    #[tokio::test]
    async fn an_expired_lease_is_taken_over_and_the_old_owner_is_refused() {
        let ledger = MemoryLedger::new();
        let (e, a, b) = (id("Ev1"), OwnerToken::random(), OwnerToken::random());
        ledger.claim(&request(&e, &a, NOW)).await.unwrap();
        // A wrote nothing after its claim: it may have made step 1 in its window.
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
    }

    #[tokio::test]
    async fn a_released_claim_is_taken_at_once() {
        let ledger = MemoryLedger::new();
        let (e, a, b) = (id("Ev1"), OwnerToken::random(), OwnerToken::random());
        ledger.claim(&request(&e, &a, NOW)).await.unwrap();
        ledger.release(&e, &a, NOW + 1).await.unwrap();
        assert_eq!(
            ledger.claim(&request(&e, &b, NOW + 2)).await.unwrap(),
            Claim::Acquired {
                attempt: 2,
                journal: Journal::new()
            }
        );
        // A released claim cannot be completed by its old owner either.
        assert!(ledger.complete(&e, &a, NOW + 3).await.is_err());
    }

    #[tokio::test]
    async fn an_entry_past_its_ttl_counts_as_absent() {
        let ledger = MemoryLedger::new();
        let (e, a, b) = (id("Ev1"), OwnerToken::random(), OwnerToken::random());
        ledger.claim(&request(&e, &a, NOW)).await.unwrap();
        ledger.complete(&e, &a, NOW).await.unwrap();
        let after_ttl = NOW + 90_000 * 1000;
        assert_eq!(
            ledger.claim(&request(&e, &b, after_ttl)).await.unwrap(),
            Claim::Acquired {
                attempt: 2,
                journal: Journal::new()
            }
        );
    }

    #[tokio::test]
    async fn complete_and_release_by_a_stranger_are_refused() {
        let ledger = MemoryLedger::new();
        let (e, a, stranger) = (id("Ev1"), OwnerToken::random(), OwnerToken::random());
        assert!(
            ledger.complete(&e, &a, NOW).await.is_err(),
            "nothing claimed yet"
        );
        ledger.claim(&request(&e, &a, NOW)).await.unwrap();
        assert!(ledger.complete(&e, &stranger, NOW).await.is_err());
        assert!(ledger.release(&e, &stranger, NOW).await.is_err());
        ledger.complete(&e, &a, NOW).await.unwrap();
        ledger
            .complete(&e, &a, NOW)
            .await
            .expect("a completion sent again finds itself applied");
        assert!(
            ledger.release(&e, &a, NOW).await.is_err(),
            "a done claim is not released"
        );
    }

    #[tokio::test]
    async fn a_claim_sent_again_finds_its_own_claim_and_acquires_it() {
        let ledger = MemoryLedger::new();
        contract::a_claim_sent_again_acquires_with_the_stored_attempt(&ledger, &id("Ev1")).await;
    }

    #[tokio::test]
    async fn the_journal_survives_a_takeover_and_settlements_ride_on_the_next_write() {
        let (ledger, e) = (MemoryLedger::new(), id("Ev1"));
        contract::the_journal_survives_a_takeover(&ledger, &e).await;
        let v = id("Ev-two-fates");
        contract::two_fates_of_one_step_in_one_write_record_the_last(&ledger, &v).await;
        let journal = ledger.journal(&v).unwrap();
        assert!(
            matches!(journal.get(&1), Some(StepRecord::Done { result, .. }) if result.contains("V1")),
            "{journal:?}"
        );
        assert_eq!(
            ledger.journal(&e).unwrap().len(),
            1,
            "step 2 certainly not done: its intent is gone"
        );
    }

    #[tokio::test]
    async fn began_windows_stand_for_the_first_step_until_the_claimant_writes() {
        let (ledger, e) = (MemoryLedger::new(), id("Ev1"));
        contract::began_windows_stand_for_the_first_step_until_the_claimant_writes(&ledger, &e)
            .await;
        assert_eq!(ledger.journal(&e).unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_note_is_replaced_only_where_it_is_as_read() {
        let (ledger, key) = (MemoryLedger::new(), id("astop-T1-D1-1_5-A1"));
        contract::a_note_is_replaced_only_where_it_is_as_read(&ledger, &key).await;
    }

    #[tokio::test]
    async fn an_alias_belongs_to_the_first_message_that_writes_it() {
        let ledger = MemoryLedger::new();
        contract::an_alias_belongs_to_the_first_message_that_writes_it(
            &ledger,
            &id("cmid-T1-X"),
            &id("msg-T1-C1-1"),
            &id("msg-T1-C1-2"),
        )
        .await;
    }

    #[tokio::test]
    async fn an_alias_lives_as_long_as_its_messages_latest_claim() {
        let ledger = MemoryLedger::new();
        contract::an_alias_lives_as_long_as_its_messages_latest_claim(
            &ledger,
            &id("cmid-T1-Y"),
            &id("msg-T1-C1-1"),
            &id("msg-T1-C1-2"),
        )
        .await;
    }

    #[tokio::test]
    async fn state_is_written_once_per_version_read() {
        let ledger = MemoryLedger::new();
        contract::state_is_written_once_per_version_read(&ledger, &id("state-A1-poll")).await;
    }

    #[tokio::test]
    async fn a_state_change_is_made_once_per_request() {
        let ledger = MemoryLedger::new();
        contract::a_state_change_is_made_once_per_request(
            &ledger,
            &id("Ev1"),
            &id("Ev2"),
            &id("state-A1-count"),
        )
        .await;
    }

    #[tokio::test]
    async fn a_failed_event_blocks_every_later_copy_with_its_error() {
        let ledger = MemoryLedger::new();
        contract::a_failed_event_blocks_every_later_copy(&ledger, &id("Ev1")).await;
    }

    #[tokio::test]
    async fn another_apps_key_and_alias_are_never_taken_and_no_app_is_anyones() {
        let ledger = MemoryLedger::new();
        contract::another_apps_key_is_never_taken(&ledger, &id("Ev1")).await;
        contract::an_item_of_no_app_is_anyones(&ledger, &id("Ev2")).await;
        contract::another_apps_alias_is_never_taken(&ledger, &id("cmid-T1-Z")).await;
    }

    #[tokio::test]
    async fn expired_entries_are_swept_so_memory_stays_bounded() {
        let ledger = MemoryLedger::new();
        let owner = OwnerToken::random();
        for i in 0..SWEEP_THRESHOLD {
            let e = id(&format!("Ev{i}"));
            ledger.claim(&request(&e, &owner, NOW)).await.unwrap();
        }
        assert_eq!(ledger.len(), SWEEP_THRESHOLD);
        let later = NOW + 90_001 * 1000;
        ledger
            .claim(&request(&id("EvLate"), &owner, later))
            .await
            .unwrap();
        assert_eq!(ledger.len(), 1);
    }

    #[tokio::test]
    async fn with_nothing_expired_the_next_sweep_waits_until_the_map_doubles() {
        let ledger = MemoryLedger::new();
        let owner = OwnerToken::random();
        for i in 0..=SWEEP_THRESHOLD {
            let e = id(&format!("Ev{i}"));
            ledger.claim(&request(&e, &owner, NOW)).await.unwrap();
        }
        let sweep_at = ledger.entries.lock().unwrap().sweep_at;
        assert_eq!(
            sweep_at,
            2 * SWEEP_THRESHOLD,
            "one sweep found nothing to drop"
        );
    }

    #[tokio::test]
    async fn concurrent_claims_of_one_event_have_one_winner() {
        let ledger = std::sync::Arc::new(MemoryLedger::new());
        let e = id("EvRace");
        let mut tasks = Vec::new();
        for _ in 0..200 {
            let (ledger, e) = (ledger.clone(), e.clone());
            tasks.push(tokio::spawn(async move {
                let owner = OwnerToken::random();
                ledger.claim(&request(&e, &owner, NOW)).await.unwrap()
            }));
        }
        let mut acquired = 0;
        for t in tasks {
            if matches!(t.await.unwrap(), Claim::Acquired { .. }) {
                acquired += 1;
            }
        }
        assert_eq!(acquired, 1);
    }
}
