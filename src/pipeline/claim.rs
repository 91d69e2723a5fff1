//! The claim: a request's ledger keys, the times of its lease, and the conditional write that
//! makes one delivery its owner (with a message's alias in the same round trip).

use std::time::Duration;

use tokio::time::Instant;

use super::{
    ANSWER_MARGIN, EventDelivery, MAX_LEASE_MARGIN, Outcome, ProcessError, Processor, error_chain,
    metrics, unix_ms,
};
use crate::journal::record::{Journal, Settled, keep_doubt};
use crate::keys::LedgerKeys;
use crate::ledger::{
    Alias, AliasRequest, Claim, ClaimRequest, Finish, Held, LedgerError, OwnerToken, app_scoped,
};
use crate::slack::envelope::EventId;

impl Processor {
    /// Claims `keys.primary` in the ledger and, in the same round trip, writes its alias (the
    /// message's `client_msg_id`): a message whose alias belongs to another one is a copy of
    /// it under another `ts`, and is finished as a duplicate. Within the processing deadline.
    /// A key (or an alias) another Slack app holds, two apps sharing the table, is claimed
    /// under this app's own ([`app_scoped`]) instead: one more round trip, for that app only.
    pub(super) async fn claim(
        &self,
        keys: &LedgerKeys,
        claimant: &Claimant<'_>,
        delivery: &EventDelivery<'_>,
        times: &Times,
    ) -> Result<Claimed, ProcessError> {
        let Claimant { owner, team, app } = *claimant;
        let unscoped = &keys.primary;
        let expires_at_s = (unix_ms(delivery.now) + self.ttl.as_millis() as u64).div_ceil(1000);
        let first = ClaimRequest {
            event_id: unscoped,
            owner,
            now_ms: times.now_ms,
            lease_until_ms: times.lease_until_ms,
            expires_at_s,
            team_id: team,
            retry_num: delivery.retry_num,
            retry_reason: delivery.retry_reason,
            app_id: app,
            redelivery_due: delivery.queued && !delivery.last_chance,
        };
        // The alias always names the message's key as every app derives it.
        let first_alias = keys.alias.as_ref().map(|alias| AliasRequest {
            alias,
            of: unscoped,
            now_ms: times.now_ms,
            expires_at_s,
            app_id: app,
        });
        let both = self.claim_with_alias(&first, first_alias, app);
        let (claim, alias, claim_here) = tokio::time::timeout_at(times.work_deadline, both)
            .await
            .map_err(|_| ledger_timeout())?;
        let key = claim_here.as_ref().unwrap_or(unscoped);
        let claim = claim.map_err(ProcessError::Ledger)?;
        let (attempt, journal) = match acquired(claim, key) {
            Ok(acquired) => acquired,
            Err(claimed) => return Ok(claimed),
        };
        if key != unscoped {
            tracing::info!(
                key = %key,
                "this key is another Slack app's (the table is shared): claimed under this app's own"
            );
        }
        // The claim is this delivery's: whether it is a copy of another message decides.
        let held = Held {
            event_id: key,
            owner,
        };
        let ended = alias_ends(alias);
        if let Some((to, ended)) = ended {
            // Released before the listeners ran: what earlier claims may have posted stays in
            // doubt, as an intent.
            let doubt: Vec<Settled> = match to {
                Finish::Released => keep_doubt(&journal).into_iter().collect(),
                _ => Vec::new(),
            };
            let write = self.ledger.finish(held, &to, &doubt, times.now_ms());
            if let Err(e) = before(times.finish_deadline, write).await {
                tracing::warn!(error = e, key = %key, "could not end the claim");
            }
            return ended;
        }
        if attempt > 1 {
            metrics::count("Takeovers");
            tracing::info!(
                attempt,
                key = %key,
                steps_recorded = journal.len(),
                "taking over an event whose earlier claim expired or was released"
            );
        }
        Ok(Claimed::Acquired {
            attempt,
            journal,
            key: key.clone(),
        })
    }

    /// The claim of `first`, with its alias written in the same round trip; either part
    /// another app holds is claimed again under this app's own key. With the key claimed
    /// under this app's, where it is not `first`'s.
    async fn claim_with_alias(
        &self,
        first: &ClaimRequest<'_>,
        first_alias: Option<AliasRequest<'_>>,
        app: Option<&str>,
    ) -> (
        Result<Claim, LedgerError>,
        Option<Result<Alias, LedgerError>>,
        Option<EventId>,
    ) {
        let unscoped = first.event_id;
        // Only where a key is another app's: never on the path of every claim.
        let scoped = |key: &EventId| app.and_then(|app| app_scoped(key, app));
        let claim = self.ledger.claim(first);
        let (claim, alias) = match &first_alias {
            Some(alias) => {
                let (claim, alias) = tokio::join!(claim, self.ledger.alias(alias));
                (claim, Some(alias))
            }
            None => (claim.await, None),
        };
        // Another app's: each part it holds is claimed again under this app's key.
        let claim_here = matches!(claim, Ok(Claim::OtherApp { .. }))
            .then(|| scoped(unscoped))
            .flatten();
        let alias_here = first_alias
            .filter(|_| matches!(alias, Some(Ok(Alias::OtherApp { .. }))))
            .and_then(|first| Some((scoped(first.alias)?, first)));
        let (claim_again, alias_again) = tokio::join!(
            async {
                match &claim_here {
                    Some(key) => Some(
                        self.ledger
                            .claim(&ClaimRequest {
                                event_id: key,
                                ..first.clone()
                            })
                            .await,
                    ),
                    None => None,
                }
            },
            async {
                match &alias_here {
                    Some((alias, first)) => {
                        Some(self.ledger.alias(&AliasRequest { alias, ..*first }).await)
                    }
                    None => None,
                }
            },
        );
        (
            claim_again.unwrap_or(claim),
            alias_again.or(alias),
            claim_here,
        )
    }
}

/// Who claims: the delivery's owner token, and the workspace and Slack app the request is for
/// (a key another app holds is claimed under this app's own).
#[derive(Clone, Copy)]
pub(super) struct Claimant<'a> {
    pub owner: &'a OwnerToken,
    pub team: Option<&'a str>,
    pub app: Option<&'a str>,
}

/// The claim's attempt and the journal it found, or how the request ends without one (done
/// already, failed, held by another delivery, another app's).
fn acquired(claim: Claim, key: &EventId) -> Result<(u32, Journal), Claimed> {
    match claim {
        Claim::AlreadyDone { ran } => Err(Claimed::Done { ran }),
        Claim::AlreadyFailed { error } => {
            tracing::info!(error, key = %key, "this event ended failed already: not answering");
            Err(Claimed::Ended(Outcome::AlreadyFailed))
        }
        Claim::InProgress { lease_until_ms } => {
            tracing::info!(
                lease_until_ms,
                key = %key,
                "another delivery holds a live claim: not answering"
            );
            Err(Claimed::Ended(Outcome::InProgress))
        }
        Claim::OtherApp { app_id } => {
            // Even its own key another app's, or no key of its own: never another's.
            tracing::error!(
                other_app = app_id,
                key = %key,
                "the ledger key is another Slack app's and this app has no key of its own: \
                 not answering (give each app its own DEDUP_TABLE)"
            );
            Err(Claimed::Ended(Outcome::InProgress))
        }
        Claim::Acquired { attempt, journal } => Ok((attempt, journal)),
    }
}

/// How the request ends when its message's alias says it is not this claim's to answer: with
/// the claim's finish, and what the request comes to.
fn alias_ends(
    alias: Option<Result<Alias, LedgerError>>,
) -> Option<(Finish, Result<Claimed, ProcessError>)> {
    match alias {
        None | Some(Ok(Alias::Ours)) => None,
        Some(Ok(Alias::CopyOf { key: of })) => {
            tracing::info!(
                copy_of = of,
                "this message is a copy of another one (the same client_msg_id under \
                 another ts): answered there, not here"
            );
            Some((Finish::Done, Ok(Claimed::Ended(Outcome::Duplicate))))
        }
        Some(Ok(Alias::Busy { lease_until_ms })) => {
            tracing::info!(
                lease_until_ms,
                "a live claim is kept at this message's client_msg_id key (an alias written as a \
                 claim, not a pointer)"
            );
            Some((Finish::Released, Ok(Claimed::Ended(Outcome::InProgress))))
        }
        Some(Ok(Alias::OtherApp { app_id })) => {
            tracing::error!(
                other_app = app_id,
                "this message's client_msg_id is another Slack app's and this app has no \
                 alias of its own: not answering (give each app its own DEDUP_TABLE)"
            );
            Some((Finish::Released, Ok(Claimed::Ended(Outcome::InProgress))))
        }
        Some(Err(error)) => Some((Finish::Released, Err(ProcessError::Ledger(error)))),
    }
}

/// What a claim attempt came to.
pub(super) enum Claimed {
    Acquired {
        attempt: u32,
        journal: Journal,
        /// The key held: the request's, or this app's own where the request's is another's.
        key: EventId,
    },
    /// Answered already (by the listeners `ran` names, when recorded).
    Done { ran: Option<Vec<String>> },
    /// No work for this delivery: done, failed or in progress elsewhere.
    Ended(Outcome),
}

/// The times of one claim.
pub(super) struct Times {
    pub now_ms: u64,
    pub started: Instant,
    /// Written to the ledger: the claim is live until then.
    pub lease_until_ms: u64,
    /// Monotonic instants: bot, Slack and the step writes must finish by `work_deadline`; the
    /// finishing write by `finish_deadline`, which leaves the answer time to get out.
    pub work_deadline: Instant,
    pub finish_deadline: Instant,
}

impl Times {
    /// Ends the work and the finish by `until` (Slack waiting for an acknowledgement), if
    /// that is sooner: the work a margin before it, so the finish still fits.
    pub fn cap(&mut self, until: Instant) {
        if until < self.finish_deadline {
            let margin = until
                .saturating_duration_since(self.started)
                .min(Duration::from_millis(250))
                / 2;
            self.finish_deadline = until;
            self.work_deadline = self.work_deadline.min(until - margin);
        }
    }

    /// The wall-clock time now (epoch ms), as measured from the delivery's arrival.
    pub fn now_ms(&self) -> u64 {
        self.now_ms + self.started.elapsed().as_millis() as u64
    }

    /// `None` when the invocation deadline has already passed.
    pub fn new(delivery: &EventDelivery<'_>, configured_lease: Duration) -> Option<Self> {
        let lease = match delivery.invocation_deadline {
            Some(deadline) => deadline.duration_since(delivery.now).ok()?,
            None => configured_lease,
        };
        // On Lambda the response must be returned before the deadline, or Lambda answers 502
        // itself and Slack redelivers an event already answered.
        let answer_margin = match delivery.invocation_deadline {
            Some(_) => ANSWER_MARGIN.min(lease / 4),
            None => Duration::ZERO,
        };
        let usable = lease.checked_sub(answer_margin)?;
        if usable.is_zero() {
            return None;
        }
        let margin = (usable / 4).min(MAX_LEASE_MARGIN);
        let now_ms = unix_ms(delivery.now);
        let lease_until_ms = match delivery.invocation_deadline {
            Some(deadline) => unix_ms(deadline),
            None => now_ms + lease.as_millis() as u64,
        };
        Some(Self {
            now_ms,
            started: delivery.started,
            lease_until_ms,
            work_deadline: delivery.started + (usable - margin),
            finish_deadline: delivery.started + usable,
        })
    }
}

/// A ledger write that must finish by `deadline`.
pub(super) async fn before(
    deadline: Instant,
    call: impl std::future::Future<Output = Result<(), LedgerError>>,
) -> Result<(), String> {
    match tokio::time::timeout_at(deadline, call).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(error_chain(&e)),
        Err(_) => Err("no answer before the lease ended".into()),
    }
}

fn ledger_timeout() -> ProcessError {
    ProcessError::Ledger(LedgerError::Unavailable(
        "the ledger did not answer before the processing deadline".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_is_the_invocation_deadline_on_lambda_and_the_answer_keeps_a_margin() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let started = Instant::now();
        let delivery = EventDelivery {
            retry_num: None,
            retry_reason: None,
            last_chance: false,
            queued: false,
            now,
            started,
            invocation_deadline: Some(now + Duration::from_secs(10)),
        };
        let t = Times::new(&delivery, Duration::from_secs(30)).unwrap();
        assert_eq!(t.lease_until_ms, 1_700_000_010_000);
        // The ledger writes end 250 ms before the deadline; the work 1 s before that.
        assert_eq!(t.finish_deadline, started + Duration::from_millis(9_750));
        assert_eq!(t.work_deadline, started + Duration::from_millis(8_750));

        let local = EventDelivery {
            invocation_deadline: None,
            ..delivery
        };
        let t = Times::new(&local, Duration::from_secs(2)).unwrap();
        assert_eq!(t.lease_until_ms, 1_700_000_002_000);
        assert_eq!(t.work_deadline, started + Duration::from_millis(1500));
        assert_eq!(t.finish_deadline, started + Duration::from_secs(2));

        let late = EventDelivery {
            invocation_deadline: Some(now - Duration::from_secs(1)),
            ..delivery
        };
        assert!(Times::new(&late, Duration::from_secs(30)).is_none());
    }
}
