//! The ledger as a run sees it: the schedule's one in-memory ledger, each call a site where
//! the schedule's fault strikes.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;

use super::schedule::{Fault, SiteKind};
use super::world::{Decision, World};
use crate::envelope::EventId;
use crate::ledger::{
    Alias, AliasRequest, Claim, ClaimRequest, Finish, Held, Ledger, LedgerError, Settled,
    StepRecord,
};

pub(crate) struct SimLedger {
    pub world: Arc<World>,
    pub run: u32,
}

fn unavailable(why: &str) -> LedgerError {
    LedgerError::Unavailable(why.to_string().into())
}

impl SimLedger {
    /// One ledger call, `call` making it (again for an SDK's retry), under the schedule.
    async fn site<T: Debug, F, Fut>(&self, what: String, call: F) -> Result<T, LedgerError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, LedgerError>>,
    {
        let (decision, line) =
            self.world
                .decide(self.run, SiteKind::Ledger, format!("ledger {what}"));
        let shown = |r: &Result<T, LedgerError>| match r {
            Ok(v) => format!("{v:?}"),
            Err(e) => format!("error: {}", crate::process::error_chain(e)),
        };
        match decision {
            Decision::Dead => std::future::pending().await,
            Decision::Proceed => {
                let result = call().await;
                self.world.note(line, &shown(&result));
                result
            }
            Decision::Fault(fault) => match fault {
                Fault::DiesBefore => {
                    self.world.die(self.run, "before a ledger call");
                    std::future::pending().await
                }
                Fault::DiesAfter => {
                    let result = call().await;
                    self.world
                        .note(line, &format!("applied: {}", shown(&result)));
                    self.world.die(self.run, "after a ledger call took effect");
                    std::future::pending().await
                }
                Fault::AnswerLost => {
                    let result = call().await;
                    self.world
                        .note(line, &format!("applied ({}), answer lost", shown(&result)));
                    Err(unavailable("the ledger's answer was lost"))
                }
                Fault::SdkRetry => {
                    let first = call().await;
                    let second = call().await;
                    self.world.note(
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
        self.site(format!("claim {}", request.event_id), || {
            let inner = inner.clone();
            async move { inner.claim(request).await }
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
        self.site(what, || {
            let inner = inner.clone();
            async move { inner.finish(held, to, settled, now_ms).await }
        })
        .await
    }
}
