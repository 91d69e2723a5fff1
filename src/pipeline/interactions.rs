//! A slash command's or an interaction's route: the one listener that takes it, a claim of its
//! identity ([`Interaction::key`]), the listener up to its acknowledgement while Slack waits,
//! then what follows it (inline in synchronous mode; from the queue in deferred mode). A
//! `block_suggestion` only asks for options: it is answered, never claimed.

use crate::workspaces::Requester;
use std::sync::Arc;
use std::time::Duration;

use super::claim::{Claimant, Claimed, Times};
use super::work::listener_failed;
use super::work::{Work, Worked};
use super::{Delivery, EventDelivery, Outcome, ProcessError, Processor, unix_ms};
use crate::app::{Ack, AckMode, Ctx, Identity, Run, Source, Steps, Unit};
use crate::journal::record::Settled;
use crate::keys::LedgerKeys;
use crate::ledger::OwnerToken;
use crate::queue::QueuedStep;
use crate::slack::SlackClient;
use crate::slack::envelope::EventId;
use crate::slack::interaction::Interaction;

/// Slack waits 3 s for a command's or an interaction's acknowledgement: what runs before it
/// (everything, in synchronous mode) must be done this long after the request arrived.
pub const ACK_BUDGET: Duration = Duration::from_millis(2500);
/// Deferred mode's ingress: the listener's part before the acknowledgement ends this long
/// after the request arrived (or is cut there, acknowledged empty, and handed to a worker
/// whole), leaving the queue's send its time within [`super::ENQUEUE_BUDGET`].
pub const HANDOFF_BUDGET: Duration = Duration::from_millis(2000);

impl Processor {
    /// Runs `interaction`'s listener. `mode` says where: the ingress in synchronous mode
    /// ([`AckMode::Inline`]: the whole listener, then the acknowledgement), the ingress in
    /// deferred mode ([`AckMode::StopAfter`]: up to the acknowledgement, then the request goes
    /// to the queue, `delivery` being what is sent), or a worker ([`AckMode::Given`]: the whole
    /// listener again, its steps before the acknowledgement replayed from the journal).
    pub(super) async fn run_interaction(
        &self,
        interaction: &Arc<Interaction>,
        delivery: &EventDelivery<'_>,
        mode: AckMode,
        request: Option<&Delivery<'_>>,
        before_ack: Vec<Settled>,
    ) -> Result<Outcome, ProcessError> {
        let span = tracing::Span::current();
        span.record("kind", interaction.kind.as_str());
        if let Some(team) = interaction.team() {
            span.record("team", team);
        }
        let acked = |ack: Option<Ack>, outcome: Outcome| Outcome::Acked {
            body: ack.and_then(|a| a.body()),
            outcome: Box::new(outcome),
        };
        let Some(run) = self.app.route_interaction(interaction) else {
            tracing::warn!(
                kind = interaction.kind.as_str(),
                selector = interaction.selector().unwrap_or_default(),
                "no listener takes this request: acknowledged with nothing"
            );
            return Ok(acked(None, Outcome::NoListener));
        };
        let who = Requester {
            app_id: interaction.api_app_id.as_deref(),
            bot_user: None,
        };
        let slack = match self.client_for(interaction.installation(), &who).await? {
            Ok(slack) => slack,
            Err(outcome) => return Ok(acked(None, outcome)),
        };
        // A click or submission in a step's execution: the token Slack sent with it.
        let slack = slack.for_execution(interaction.execution_token.as_ref());
        let Some(key) = interaction.key() else {
            return Ok(self.suggest(interaction, run, delivery, &slack).await);
        };
        span.record("event_id", key.as_str());
        span.record("key", key.as_str());
        if let (AckMode::StopAfter, Some(request)) = (mode, request) {
            return self
                .hand_off(interaction, run, &key, delivery, request, &slack)
                .await;
        }
        let Some(mut times) = Times::new(delivery, self.lease) else {
            return Err(ProcessError::Deadline);
        };
        if !matches!(mode, AckMode::Given | AckMode::GivenEmpty) {
            // Slack is waiting: the acknowledgement must get out within its 3 s.
            times.cap(delivery.started + ACK_BUDGET);
        }
        let keys = LedgerKeys {
            primary: key.clone(),
            alias: None,
        };
        let owner = OwnerToken::random();
        let app = interaction.api_app_id.as_deref();
        let claimed = self
            .claim(
                &keys,
                &Claimant {
                    owner: &owner,
                    team: interaction.team(),
                    app,
                },
                delivery,
                &times,
            )
            .await?;
        let (attempt, journal, key) = match claimed {
            Claimed::Acquired {
                attempt,
                journal,
                key,
            } => (attempt, journal, key),
            // A double-click, a request sent twice, a redelivery: answered once already, or
            // being answered now. Slack is told nothing new.
            Claimed::Done { .. } => return Ok(acked(None, Outcome::Duplicate)),
            Claimed::Ended(outcome) => return Ok(acked(None, outcome)),
        };
        let source = Source::Interaction {
            interaction: interaction.clone(),
            key: key.as_str().to_string(),
        };
        let unit = Unit {
            identity: Identity::Event,
            runs: vec![run],
        };
        let work = Work {
            source,
            ack_mode: mode,
            delivery,
            times: &times,
            key: &key,
            owner,
            attempt,
            journal,
            unit,
            seed: before_ack,
            slack,
        };
        let Worked {
            result,
            ack,
            handed_off,
        } = self.work(work).await;
        debug_assert!(!handed_off, "only deferred mode's ingress hands off");
        Ok(acked(ack, result?))
    }

    /// Deferred mode's ingress: the listener runs, unclaimed, up to its acknowledgement (or its
    /// first write that is not a view opened with the `trigger_id`: the acknowledgement is then
    /// empty); the request goes to the queue with those views' ids, and a worker claims it and
    /// runs the listener again, those steps replayed. A listener that returns first is done
    /// here (it made no write a claim would guard: a `trigger_id` opens one view, once).
    async fn hand_off(
        &self,
        interaction: &Arc<Interaction>,
        run: Run,
        key: &EventId,
        delivery: &EventDelivery<'_>,
        request: &Delivery<'_>,
        slack: &SlackClient,
    ) -> Result<Outcome, ProcessError> {
        let deadline = delivery.started + HANDOFF_BUDGET;
        let ctx = self.unclaimed(
            interaction,
            key,
            AckMode::StopAfter,
            delivery,
            deadline,
            slack,
        );
        let name = run.name.clone();
        let until_ack = async {
            tokio::select! {
                worked = (run.work)(ctx.clone()) => (worked.map_err(|e| listener_failed(&name, e)), false),
                () = ctx.acknowledged() => (Ok(()), true),
            }
        };
        let (worked, handed_off) = match tokio::time::timeout_at(deadline, until_ack).await {
            Ok(ran) => ran,
            // Still before its acknowledgement: acknowledged empty, and the whole listener is a
            // worker's (it runs again from the start there).
            Err(_) => {
                tracing::info!(
                    "the listener had not acknowledged 2 s after the request arrived: \
                     acknowledged empty, the rest handed to a worker"
                );
                (Ok(()), true)
            }
        };
        let (settled, tally) = ctx.close().await;
        worked?;
        let ack = ctx.chosen_ack();
        let body = ack.as_ref().and_then(Ack::body);
        let acked = |outcome| Outcome::Acked {
            body: body.clone(),
            outcome: Box::new(outcome),
        };
        // A refused submission (validation errors) is not taken: nothing follows it.
        if !handed_off || ack.as_ref().is_some_and(Ack::is_errors) {
            let outcome = if tally.made > 0 {
                Outcome::Answered { attempt: 1 }
            } else {
                Outcome::NoReply
            };
            return Ok(acked(outcome));
        }
        let Some(queue) = &self.queue else {
            return Ok(acked(Outcome::NoReply));
        };
        let done: Vec<QueuedStep> = settled
            .into_iter()
            .filter_map(|fate| match fate {
                Settled::Done { step, result, op } => Some(QueuedStep {
                    step,
                    result,
                    op,
                    unknown: false,
                }),
                // A view whose answer the hand-off cut off: the worker looks for it.
                Settled::Unknown { step, intent } => Some(QueuedStep {
                    step,
                    result: String::new(),
                    op: intent.op().map(str::to_string),
                    unknown: true,
                }),
                _ => None,
            })
            .collect();
        // Slack gets an empty acknowledgement unless the listener chose one before handing off.
        let implicit = ctx.acked_implicitly();
        let queued = self
            .enqueue_with_steps(&**queue, request, done, implicit)
            .await?;
        Ok(acked(queued))
    }

    /// A context with no claim behind it, until `deadline`: deferred mode's ingress before the
    /// acknowledgement (`StopAfter`: its steps provisional, only views with the trigger), or a
    /// suggestion (`Inline`: its writes fail).
    fn unclaimed(
        &self,
        interaction: &Arc<Interaction>,
        key: &EventId,
        mode: AckMode,
        delivery: &EventDelivery<'_>,
        deadline: tokio::time::Instant,
        slack: &SlackClient,
    ) -> Ctx {
        let now_ms = unix_ms(delivery.now);
        let until_ms = now_ms
            + deadline
                .saturating_duration_since(delivery.started)
                .as_millis() as u64;
        let mut steps = Steps::new(
            self.ledger.clone(),
            key.clone(),
            OwnerToken::random(),
            (1, Default::default()),
            false,
            (now_ms, delivery.started, until_ms),
        );
        steps.claimed = false;
        if mode == AckMode::StopAfter {
            steps.provisional = true;
        } else {
            steps.closed = true;
        }
        Ctx::new(
            Source::Interaction {
                interaction: interaction.clone(),
                key: key.as_str().to_string(),
            },
            mode,
            slack.clone(),
            deadline,
            self.version.clone(),
            steps,
            (self.app.functions(), self.app.hears_stops()),
        )
    }

    /// A `block_suggestion`: the listener's options, with a context whose writes fail (it is
    /// never claimed: a suggestion must only answer), within Slack's 3 s.
    async fn suggest(
        &self,
        interaction: &Arc<Interaction>,
        run: crate::app::Run,
        delivery: &EventDelivery<'_>,
        slack: &SlackClient,
    ) -> Outcome {
        let deadline = delivery.started + ACK_BUDGET;
        let key = crate::slack::envelope::EventId::try_from("suggestion".to_string())
            .expect("a valid key");
        let ctx = self.unclaimed(
            interaction,
            &key,
            AckMode::Inline,
            delivery,
            deadline,
            slack,
        );
        let outcome = match tokio::time::timeout_at(deadline, (run.work)(ctx.clone())).await {
            Ok(Ok(())) => Outcome::NoReply,
            Ok(Err(error)) => {
                tracing::warn!(error = %error, "the options listener failed: no options");
                Outcome::NoReply
            }
            Err(_) => {
                tracing::warn!("the options listener did not answer within Slack's 3 s");
                Outcome::NoReply
            }
        };
        Outcome::Acked {
            body: ctx.chosen_ack().and_then(|a| a.body()),
            outcome: Box::new(outcome),
        }
    }
}
