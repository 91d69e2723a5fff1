//! The ledger as a run sees it: the schedule's one in-memory ledger, each call a site where
//! the schedule's fault strikes.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;

use super::schedule::{Fault, SiteKind};
use super::world::{Decision, World};
use crate::journal::record::{Settled, StepRecord};
use crate::ledger::{Alias, AliasRequest, Claim, ClaimRequest, Finish, Held, Ledger, LedgerError};
use crate::slack::envelope::EventId;
use crate::workspaces::{
    Installation, InstallationKey, InstallationStore, Owns, Place, RefreshHold, Revoked,
    StoreError, Stored,
};

pub(crate) struct SimLedger {
    pub world: Arc<World>,
    pub run: u32,
    /// The planted defect of [`super::run::Spec::drop_takeover_finish`].
    pub drop_takeover_finish: bool,
    /// The keys this run took over (an attempt above 1), for that defect.
    pub took_over: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// The planted defect of [`super::run::Spec::state_of_other_workspace`]: the workspace
    /// whose state values are read and written under the other workspace's keys.
    pub state_of_other_workspace: Option<String>,
}

/// The planted defect's key: the state value `key` of workspace `team` (`statew-APP-TEAM-
/// NAME-DIGEST`), the other workspace's of the same name (exactly where the name is its
/// readable part: letters, digits, `-` and `_`, up to 40).
fn other_workspaces(key: &EventId, team: &str) -> Option<EventId> {
    let rest = key.as_str().strip_prefix("statew-")?;
    let (app, rest) = rest.split_once('-')?;
    let rest = rest.strip_prefix(team)?.strip_prefix('-')?;
    let (name, _digest) = rest.rsplit_once('-')?;
    let other = super::tenants::TEAMS.iter().find(|t| **t != team)?;
    crate::app::state_key(Some(app), Some(other), name).ok()
}

fn unavailable(why: &str) -> LedgerError {
    LedgerError::Unavailable(why.to_string().into())
}

impl SimLedger {
    /// The key a state call of this run is made under (recorded for the tenant invariants):
    /// `key`, or with the planted defect, the other workspace's.
    fn state_key(&self, key: &EventId) -> EventId {
        let key = match &self.state_of_other_workspace {
            Some(team) => other_workspaces(key, team).unwrap_or_else(|| key.clone()),
            None => key.clone(),
        };
        self.world
            .lock()
            .state_keys
            .insert(key.as_str().to_string());
        key
    }

    /// One ledger call, `call` making it (again for an SDK's retry), under the schedule.
    async fn site<T: Debug, F, Fut>(&self, what: String, call: F) -> Result<T, LedgerError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, LedgerError>>,
    {
        site(
            &self.world,
            self.run,
            format!("ledger {what}"),
            call,
            unavailable,
        )
        .await
    }
}

/// One call to the ledger's table (the ledger's, or the installation store's in it), `call`
/// making it (again for an SDK's retry), under the schedule; `unavailable` makes the error of
/// a call refused or whose answer was lost.
pub(crate) async fn site<T, E, F, Fut>(
    world: &World,
    run: u32,
    what: String,
    call: F,
    unavailable: fn(&str) -> E,
) -> Result<T, E>
where
    T: Debug,
    E: std::error::Error + 'static,
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    // Other runs go on between any two calls (two requests at once interleave).
    tokio::task::yield_now().await;
    let (decision, line) = world.decide(run, SiteKind::Ledger, what);
    let shown = |r: &Result<T, E>| match r {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("error: {}", crate::errors::error_chain(e)),
    };
    match decision {
        Decision::Dead => std::future::pending().await,
        Decision::Proceed => {
            let result = call().await;
            world.note(line, &shown(&result));
            result
        }
        Decision::Fault(fault) => match fault {
            Fault::DiesBefore => {
                world.die(run, "before a ledger call");
                std::future::pending().await
            }
            Fault::DiesAfter => {
                let result = call().await;
                world.note(line, &format!("applied: {}", shown(&result)));
                world.die(run, "after a ledger call took effect");
                std::future::pending().await
            }
            Fault::AnswerLost => {
                let result = call().await;
                world.note(line, &format!("applied ({}), answer lost", shown(&result)));
                Err(unavailable("the ledger's answer was lost"))
            }
            Fault::SdkRetry => {
                let first = call().await;
                let second = call().await;
                world.note(
                    line,
                    &format!(
                        "applied ({}), sent again: {}",
                        shown(&first),
                        shown(&second)
                    ),
                );
                second
            }
            Fault::Slow => std::future::pending().await,
            // Unavailable, and anything a ledger call cannot meet.
            _ => Err(unavailable("the ledger refused the call (throttled)")),
        },
    }
}

/// The installation store as a run sees it (multi-workspace mode): the schedule's one store in
/// memory, in the ledger's table, each call a site of the ledger's faults.
pub(crate) struct SimInstallations {
    pub world: Arc<World>,
    pub run: u32,
    pub store: Arc<crate::workspaces::MemoryInstallations>,
}

fn store_unavailable(why: &str) -> StoreError {
    StoreError::Unavailable(why.to_string().into())
}

impl SimInstallations {
    async fn site<T: Debug, F, Fut>(&self, what: String, call: F) -> Result<T, StoreError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        site(
            &self.world,
            self.run,
            format!("installations {what}"),
            call,
            store_unavailable,
        )
        .await
    }
}

#[async_trait]
impl InstallationStore for SimInstallations {
    fn app(&self) -> &str {
        self.store.app()
    }

    async fn save(&self, installation: &Installation) -> Result<(), StoreError> {
        self.site("save".into(), || self.store.save(installation))
            .await
    }

    async fn save_new(&self, installation: &Installation) -> Result<bool, StoreError> {
        self.site("save a new installation".into(), || {
            self.store.save_new(installation)
        })
        .await
    }

    async fn find(&self, key: &InstallationKey) -> Result<Option<Stored>, StoreError> {
        let found = self
            .site(format!("find {}", key.id()), || self.store.find(key))
            .await?;
        Ok(found)
    }

    async fn delete(
        &self,
        key: &InstallationKey,
        place: Place,
        before_ms: u64,
        owns: Owns<'_>,
    ) -> Result<bool, StoreError> {
        self.site(format!("delete {} ({place:?})", key.id()), || {
            self.store.delete(key, place, before_ms, owns)
        })
        .await
    }

    async fn revoke(
        &self,
        key: &InstallationKey,
        place: Place,
        revoked: Revoked<'_>,
        owns: Owns<'_>,
    ) -> Result<bool, StoreError> {
        self.site(format!("revoke {} ({place:?})", key.id()), || {
            self.store.revoke(key, place, revoked, owns)
        })
        .await
    }

    async fn take_refresh(
        &self,
        key: &InstallationKey,
        place: Place,
        rotation: &str,
        hold: RefreshHold<'_>,
    ) -> Result<bool, StoreError> {
        self.site(format!("take the refresh of {}", key.id()), || {
            self.store.take_refresh(key, place, rotation, hold)
        })
        .await
    }

    async fn ready_to_store(
        &self,
        key: &InstallationKey,
        place: Place,
    ) -> Result<crate::workspaces::seal::ReadyKey, StoreError> {
        self.store.ready_to_store(key, place).await
    }

    async fn release_refresh(
        &self,
        key: &InstallationKey,
        place: Place,
        owner: &str,
    ) -> Result<(), StoreError> {
        self.site(format!("release the refresh of {}", key.id()), || {
            self.store.release_refresh(key, place, owner)
        })
        .await
    }

    async fn store_refreshed(
        &self,
        key: &InstallationKey,
        place: Place,
        replaced: (&str, u64),
        owner: &str,
        refreshed: &Installation,
        ready: &crate::workspaces::seal::ReadyKey,
    ) -> Result<bool, StoreError> {
        self.site(format!("store the refreshed pair of {}", key.id()), || {
            self.store
                .store_refreshed(key, place, replaced, owner, refreshed, ready)
        })
        .await
    }

    async fn mark_broken(
        &self,
        key: &InstallationKey,
        place: Place,
        rotation: &str,
        code: &str,
    ) -> Result<bool, StoreError> {
        self.site(format!("mark {} broken ({code})", key.id()), || {
            self.store.mark_broken(key, place, rotation, code)
        })
        .await
    }

    async fn tag_unscoped(&self, key: &InstallationKey, app_id: &str) -> Result<bool, StoreError> {
        self.site(format!("tag {} as {app_id}'s", key.id()), || {
            self.store.tag_unscoped(key, app_id)
        })
        .await
    }

    async fn take_read(
        &self,
        key: &InstallationKey,
        method: &str,
        now_ms: u64,
        per_minute: u32,
    ) -> Result<Option<u64>, StoreError> {
        self.site(format!("take a history read of {}", key.id()), || {
            self.store.take_read(key, method, now_ms, per_minute)
        })
        .await
    }

    async fn consume_state(
        &self,
        nonce: &str,
        spender: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StoreError> {
        self.site("spend a state".into(), || {
            self.store.consume_state(nonce, spender, expires_at_ms)
        })
        .await
    }
}

/// What DynamoDB refuses that the in-memory ledger would take: one update setting a journal
/// step twice ("Two document paths overlap"). The DynamoDB ledger collapses a write's fates per
/// step as a second guard; the engine must not send two fates of one step, nor a fate of the
/// step it writes, in one write.
fn overlapping(world: &World, step: Option<u32>, settled: &[Settled]) {
    let mut seen: Vec<u32> = step.into_iter().collect();
    for fate in settled {
        let s = match fate {
            Settled::Done { step, .. }
            | Settled::NotDone { step }
            | Settled::Unknown { step, .. }
            | Settled::Looked { step, .. } => *step,
            Settled::Ran { .. } => continue,
        };
        if seen.contains(&s) {
            world.violate(format!(
                "a ledger write DynamoDB refuses: step {s} is set twice in one update"
            ));
        }
        seen.push(s);
    }
}

fn step_text(step: u32, record: &StepRecord, settled: &[Settled]) -> String {
    let mut text = format!("step {step}: {}", record.encode());
    if !settled.is_empty() {
        text.push_str(&format!(", with {}", settled_text(settled)));
    }
    text
}

fn settled_text(settled: &[Settled]) -> String {
    settled
        .iter()
        .map(|s| match s {
            Settled::Done { step, .. } => format!("step {step} done"),
            Settled::NotDone { step } => format!("step {step} not done"),
            Settled::Unknown { step, .. } => format!("step {step} unknown"),
            Settled::Ran { .. } => "the listeners that ran".to_string(),
            Settled::Looked { step, looked } => {
                format!("step {step}'s look-up got to {}", looked.to)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[async_trait]
impl Ledger for SimLedger {
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<Claim, LedgerError> {
        let inner = self.world.ledger.clone();
        self.world.touch(self.run, request.event_id.as_str());
        self.world
            .check_lease(self.run, request.event_id.as_str(), request.lease_until_ms);
        let (world, run) = (self.world.clone(), self.run);
        let took_over = &self.took_over;
        self.site(format!("claim {}", request.event_id), || {
            let (inner, world) = (inner.clone(), world.clone());
            async move {
                let claim = inner.claim(request).await;
                // Applied (its answer may yet be lost): this run owns the claim now.
                if let Ok(Claim::Acquired { attempt, .. }) = &claim {
                    world
                        .lock()
                        .by_request
                        .claimers
                        .insert(request.event_id.to_string(), run);
                    if *attempt > 1 {
                        took_over
                            .lock()
                            .expect("took_over")
                            .insert(request.event_id.to_string());
                    }
                }
                claim
            }
        })
        .await
    }

    async fn begin_step(
        &self,
        held: Held<'_>,
        step: u32,
        intent: &StepRecord,
        settled: &[Settled],
        now_ms: u64,
    ) -> Result<(), LedgerError> {
        let inner = self.world.ledger.clone();
        overlapping(&self.world, Some(step), settled);
        self.site(
            format!("write {}", step_text(step, intent, settled)),
            || {
                let inner = inner.clone();
                async move { inner.begin_step(held, step, intent, settled, now_ms).await }
            },
        )
        .await
    }

    async fn alias(&self, request: &AliasRequest<'_>) -> Result<Alias, LedgerError> {
        let inner = self.world.ledger.clone();
        self.world.touch(self.run, request.alias.as_str());
        self.world.touch(self.run, request.of.as_str());
        self.site(format!("alias {} of {}", request.alias, request.of), || {
            let inner = inner.clone();
            async move { inner.alias(request).await }
        })
        .await
    }

    async fn set_note(
        &self,
        key: &EventId,
        value: &str,
        at_ms: u64,
        expires_at_s: u64,
    ) -> Result<(), LedgerError> {
        let inner = self.world.ledger.clone();
        self.site(format!("note {key}"), || {
            let inner = inner.clone();
            async move { inner.set_note(key, value, at_ms, expires_at_s).await }
        })
        .await
    }

    async fn replace_note(
        &self,
        key: &EventId,
        read: Option<&str>,
        value: &str,
        at_ms: u64,
        expires_at_s: u64,
        now_ms: u64,
    ) -> Result<crate::ledger::NotePut, LedgerError> {
        let inner = self.world.ledger.clone();
        self.site(format!("replace note {key}"), || {
            let inner = inner.clone();
            async move {
                inner
                    .replace_note(key, read, value, at_ms, expires_at_s, now_ms)
                    .await
            }
        })
        .await
    }

    async fn state(
        &self,
        key: &EventId,
        now_ms: u64,
    ) -> Result<Option<crate::ledger::StateItem>, LedgerError> {
        let inner = self.world.ledger.clone();
        let key = &self.state_key(key);
        self.site(format!("read state {key}"), || {
            let inner = inner.clone();
            async move { inner.state(key, now_ms).await }
        })
        .await
    }

    async fn state_changes(
        &self,
        key: &EventId,
    ) -> Result<std::collections::BTreeMap<String, u64>, LedgerError> {
        let inner = self.world.ledger.clone();
        self.site(format!("read the state changes of {key}"), || {
            let inner = inner.clone();
            async move { inner.state_changes(key).await }
        })
        .await
    }

    async fn put_state(
        &self,
        key: &EventId,
        write: &crate::ledger::StateWrite<'_>,
        now_ms: u64,
    ) -> Result<crate::ledger::StatePut, LedgerError> {
        let inner = self.world.ledger.clone();
        let key = &self.state_key(key);
        self.site(format!("state {key} v{}", write.expected + 1), || {
            let inner = inner.clone();
            async move { inner.put_state(key, write, now_ms).await }
        })
        .await
    }

    async fn note(&self, key: &EventId, now_ms: u64) -> Result<Option<String>, LedgerError> {
        let inner = self.world.ledger.clone();
        self.site(format!("read note {key}"), || {
            let inner = inner.clone();
            async move { inner.note(key, now_ms).await }
        })
        .await
    }

    async fn finish(
        &self,
        held: Held<'_>,
        to: &Finish,
        settled: &[Settled],
        now_ms: u64,
    ) -> Result<(), LedgerError> {
        let inner = self.world.ledger.clone();
        overlapping(&self.world, None, settled);
        let mut what = format!("finish {} {to:?}", held.event_id);
        if !settled.is_empty() {
            what.push_str(&format!(", with {}", settled_text(settled)));
        }
        if self.drop_takeover_finish
            && self
                .took_over
                .lock()
                .expect("took_over")
                .contains(held.event_id.as_str())
        {
            // The planted defect: answered as made, never written.
            what.push_str(" (dropped: the planted defect)");
            return self.site(what, || async { Ok(()) }).await;
        }
        self.site(what, || {
            let inner = inner.clone();
            async move { inner.finish(held, to, settled, now_ms).await }
        })
        .await
    }
}
