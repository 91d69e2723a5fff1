//! An event's route: the bot's own messages and edits skipped, then its listeners grouped by
//! the claim they run under (the message the event carries, or the event itself), each group
//! claimed, worked and finished.

use crate::workspaces::Requester;
use std::sync::Arc;

use super::claim::{Claimant, Claimed, Times};
use super::work::Work;
use super::{EventDelivery, Outcome, ProcessError, Processor, unix_ms};
use crate::app::{AckMode, Identity, Route, Run, Source, Unit};
use crate::keys::{LedgerKeys, StopNote, keep_stop, ledger_key};
use crate::ledger::OwnerToken;
use crate::slack::SlackClient;
use crate::slack::envelope::EventCallback;

impl Processor {
    /// Notes kept beside the claims, before the event is routed, when the app has an
    /// assistant's or an agent's listener: an assistant thread's context at its start or
    /// change ([`crate::app::Ctx::thread_context`]); the agent view's latest context of a DM
    /// (`app_context_changed`: [`crate::app::Ctx::app_context`]); a session a person stopped
    /// (`agent_session_stopped`: a stream of an answer begun before it writes nothing more). A
    /// failure is logged: the event is answered all the same.
    async fn keep_thread_context(&self, callback: &EventCallback, delivery: &EventDelivery<'_>) {
        let event = &callback.event;
        if !(self.app.keeps_thread_contexts() || self.app.hears_stops())
            || callback.skip_reason().is_some()
        {
            return;
        }
        let team = callback.team().unwrap_or("-");
        // The agent's notes are the app's: two apps sharing the table keep their own.
        let app = callback.api_app_id.as_deref();
        let channel = event.channel.as_deref();
        let (keys, value) = match (event.kind.as_str(), channel) {
            ("assistant_thread_started" | "assistant_thread_context_changed", Some(channel)) => {
                let Some(thread) = event.thread_ts.as_deref() else {
                    return;
                };
                let context = event.raw["assistant_thread"]["context"].clone();
                let keys = crate::keys::thread_context_keys(team, channel, thread, app);
                (keys, context.to_string())
            }
            ("app_context_changed", _) => {
                let context = event.raw["context"].clone();
                let context = if context.is_object() {
                    context
                } else {
                    serde_json::json!({})
                };
                // The app's DM with the person; Slack's documented example names neither it
                // nor the person in the event: then the person the event is authorized for.
                let user = event.raw["user"].as_str().map(str::to_string).or_else(|| {
                    callback
                        .authorizations
                        .iter()
                        .find(|a| !a.is_bot)
                        .and_then(|a| a.user_id.clone())
                });
                let place = match (channel, user) {
                    (Some(channel), _) => channel.to_string(),
                    (None, Some(user)) => format!("user-{user}"),
                    (None, None) => return,
                };
                let keys = crate::keys::agent_context_keys(team, &place, app);
                (keys, context.to_string())
            }
            ("agent_session_stopped", Some(channel)) => {
                let Some(thread) = event.raw["thread_ts"].as_str() else {
                    return;
                };
                let keys = crate::keys::session_stop_keys(team, channel, thread, app);
                (keys, event.raw["streaming_message_ts"].to_string())
            }
            _ => return,
        };
        let Some(keys) = keys else {
            return;
        };
        // Ordered by the event's own time: a retry of an older change does not undo a newer.
        let at_ms = event
            .event_ts
            .as_deref()
            .and_then(crate::clock::ts_ms)
            .or(callback
                .event_time
                .and_then(|t| u64::try_from(t).ok())
                .map(|t| t * 1000))
            .unwrap_or_else(|| unix_ms(delivery.now));
        let expires_at_s = (unix_ms(delivery.now) + self.ttl.as_millis() as u64).div_ceil(1000);
        // The agent's notes carry their time (a session's stop is compared with a request's);
        // an assistant thread's context is kept as the versions before wrote it.
        let value = if event.kind.starts_with("assistant_thread_") {
            value
        } else {
            serde_json::json!({"at_ms": at_ms, "value": value}).to_string()
        };
        let write = async {
            if event.kind != "agent_session_stopped" {
                return self
                    .ledger
                    .set_note(&keys.own, &value, at_ms, expires_at_s)
                    .await;
            }
            // A stop names the streams Slack stopped; kept with the thread's earlier stops.
            let streams = event.raw["streaming_message_ts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect();
            let stop = StopNote::pressed(at_ms, streams);
            let now_ms = unix_ms(delivery.now);
            keep_stop(self.ledger.as_ref(), &keys, stop, expires_at_s, now_ms).await
        };
        match tokio::time::timeout(std::time::Duration::from_millis(800), write).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %super::error_chain(&e), kind = %event.kind, "a note could not be kept")
            }
            Err(_) => tracing::warn!(kind = %event.kind, "a note could not be kept in time"),
        }
    }
    /// Names the event on the current span, then routes it to the listeners that take it; the
    /// outcome instead when it is not to be answered (the bot's own message, an edit…, or no
    /// listener takes it): it is then neither queued nor claimed.
    pub(super) fn screen(&self, callback: &Arc<EventCallback>) -> Result<Route, Outcome> {
        let span = tracing::Span::current();
        span.record("event_id", callback.event_id.as_str());
        if let Some(team) = callback.team() {
            span.record("team", team);
        }
        if let Some(reason) = callback.skip_reason() {
            let heard = reason == crate::slack::envelope::SkipReason::NotANewMessage
                && self.app.hears_message_changes();
            if !heard {
                tracing::debug!(reason = reason.as_str(), "not answering this event");
                return Err(Outcome::Skipped(reason));
            }
        }
        let route = self.app.route(callback);
        if route.is_empty() {
            tracing::debug!(kind = %callback.event.kind, "no listener takes this event");
            return Err(Outcome::NoListener);
        }
        Ok(route)
    }

    /// The protocol for one verified event, shared by every path that runs one: skip → route
    /// to the listeners → for each group of them (those keyed by the message the event carries,
    /// those keyed by the event): claim → run them (their Slack writes as journaled steps) →
    /// finish.
    pub async fn run_event(
        &self,
        callback: &Arc<EventCallback>,
        delivery: &EventDelivery<'_>,
    ) -> Result<Outcome, ProcessError> {
        let span = tracing::Span::current();
        if let Some(reason) = delivery.retry_reason {
            span.record("retry_reason", reason);
        }
        self.keep_thread_context(callback, delivery).await;
        let route = match self.screen(callback) {
            Ok(route) => route,
            Err(outcome) => return Ok(outcome),
        };
        let Some(times) = Times::new(delivery, self.lease) else {
            tracing::warn!(
                deadline_ms = delivery.invocation_deadline.map(unix_ms),
                now_ms = unix_ms(delivery.now),
                "the invocation deadline has passed already: not claiming"
            );
            return Err(ProcessError::Deadline);
        };
        // The installation's client (multi-workspace mode), or the process's.
        let who = Requester {
            app_id: callback.api_app_id.as_deref(),
            bot_user: callback.bot_user_id(),
        };
        let slack = match self.client_for(callback.installation(), &who).await? {
            Ok(slack) => slack,
            Err(outcome) => return Ok(outcome),
        };
        // A step's execution: its own token, for every call made for it.
        let slack = slack.for_execution(callback.event.execution_token.as_ref());
        // A cold start's connection to Slack opens while the claim is made.
        slack.warm_up();
        let mut result: Option<Result<Outcome, ProcessError>> = None;
        for unit in route.units {
            let keys = LedgerKeys::of(callback, unit.identity == Identity::Message);
            if keys.primary != callback.event_id {
                span.record("key", keys.primary.as_str());
            }
            let ran = self
                .run_unit(callback, delivery, &times, &keys, unit, &slack)
                .await;
            result = Some(match result {
                None => ran,
                Some(earlier) => combine(earlier, ran),
            });
        }
        result.unwrap_or(Ok(Outcome::NoListener))
    }

    /// One group of listeners under one claim: claim its key (and its alias, in the same round
    /// trip), run the listeners, finish. A message answered already by other listeners than
    /// some of these (Slack's other event of the message carried it, and a listener selects on
    /// what only this one says) runs those others, each under a claim of its own.
    async fn run_unit(
        &self,
        callback: &Arc<EventCallback>,
        delivery: &EventDelivery<'_>,
        times: &Times,
        keys: &LedgerKeys,
        unit: Unit,
        slack: &SlackClient,
    ) -> Result<Outcome, ProcessError> {
        let owner = OwnerToken::random();
        let app = callback.api_app_id.as_deref();
        let (attempt, journal, key) = match self
            .claim(
                keys,
                &Claimant {
                    owner: &owner,
                    team: callback.team(),
                    app,
                },
                delivery,
                times,
            )
            .await?
        {
            Claimed::Acquired {
                attempt,
                journal,
                key,
            } => (attempt, journal, key),
            Claimed::Done { ran: Some(ran) } if unit.identity == Identity::Message => {
                let missing: Vec<Run> = unit
                    .runs
                    .into_iter()
                    .filter(|r| !ran.contains(&r.id))
                    .collect();
                if missing.is_empty() {
                    return Ok(Outcome::Duplicate);
                }
                return Box::pin(
                    self.run_stragglers(callback, delivery, times, keys, missing, slack),
                )
                .await;
            }
            Claimed::Done { .. } => return Ok(Outcome::Duplicate),
            Claimed::Ended(outcome) => return Ok(outcome),
        };
        let work = Work {
            source: Source::Event(callback.clone()),
            ack_mode: AckMode::NotAsked,
            delivery,
            times,
            key: &key,
            owner,
            attempt,
            journal,
            unit,
            seed: Vec::new(),
            slack: slack.clone(),
        };
        self.work(work).await.result
    }

    /// Listeners of a message that its answer did not run (they take only this event of it),
    /// each under a claim keyed by the message and the listener, so each runs once.
    async fn run_stragglers(
        &self,
        callback: &Arc<EventCallback>,
        delivery: &EventDelivery<'_>,
        times: &Times,
        keys: &LedgerKeys,
        missing: Vec<Run>,
        slack: &SlackClient,
    ) -> Result<Outcome, ProcessError> {
        let mut result: Option<Result<Outcome, ProcessError>> = None;
        for run in missing {
            let Some(key) = ledger_key(&format!("{}-{}", keys.primary, run.id)) else {
                continue;
            };
            tracing::info!(
                listener = run.name,
                key = %key,
                "the message was answered by its other event's listeners: running this one"
            );
            let keys = LedgerKeys {
                primary: key,
                alias: None,
            };
            let unit = Unit {
                identity: Identity::Event,
                runs: vec![run],
            };
            let ran = self
                .run_unit(callback, delivery, times, &keys, unit, slack)
                .await;
            result = Some(match result {
                None => ran,
                Some(earlier) => combine(earlier, ran),
            });
        }
        result.unwrap_or(Ok(Outcome::Duplicate))
    }
}

/// The result of a delivery whose listeners ran under two claims (the message's, and the
/// event's for listeners that opted out): a failure first (Slack retries; the claim that
/// finished finds itself done), then a live claim elsewhere, then what was written.
pub(super) fn combine(
    a: Result<Outcome, ProcessError>,
    b: Result<Outcome, ProcessError>,
) -> Result<Outcome, ProcessError> {
    fn rank(result: &Result<Outcome, ProcessError>) -> u8 {
        match result {
            Err(_) => 0,
            Ok(Outcome::InProgress) => 1,
            Ok(Outcome::Failed { .. }) => 2,
            Ok(Outcome::Answered { .. }) => 3,
            Ok(Outcome::Recovered) => 4,
            Ok(Outcome::NoReply) => 5,
            Ok(Outcome::AlreadyFailed) => 6,
            Ok(_) => 7,
        }
    }
    if rank(&b) < rank(&a) { b } else { a }
}
