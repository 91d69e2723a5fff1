//! The bot's calls relayed through the ledger, for a gateway whose proxy may be another process
//! than the one that holds the run: on Lambda each of the bot's calls is an invocation of its
//! own, in whichever environment is free, never the busy one that holds the run.
//!
//! The run's holder opens an inbox for it (a note in the ledger, `gwrun-RUN`) and reads it while
//! the bot runs. A proxy that gets a call of a run it does not hold appends the call to the
//! inbox (a conditional write: the inbox as read), and waits for its answer, a note of its own
//! (`gwcall-RUN-CALL`). The holder takes the calls in the order they were appended (a
//! conditional write again, so that a call is taken once), makes them as it makes its own
//! process's, and writes their answers. When the bot has answered, the holder closes the inbox,
//! taking the calls still in it: a call is either taken, and answered, or refused as a call of an
//! ended request, never both. A call its holder never took (the holder's process died) is
//! withdrawn by its proxy once the run's deadline has passed. Reads need no holder: the proxy
//! makes them itself, with the run's workspace, while the inbox is open.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Answered;
use crate::ledger::{Ledger, LedgerError, NotePut};
use crate::slack::envelope::EventId;

/// How often the holder reads the inbox while the bot runs, and a proxy its call's answer.
pub(crate) const RELAY_POLL: Duration = Duration::from_millis(20);
/// How long past the run's deadline a proxy waits for the answer of a call its holder took.
const TAKEN_GRACE: Duration = Duration::from_secs(3);
/// An inbox or an answer outlives the run by this long before the table's TTL removes it.
const KEPT_AFTER_THE_DEADLINE_S: u64 = 600;
/// An inbox holds at most this much of calls not yet taken (DynamoDB's items end at 400 KB).
const MAX_INBOX_BYTES: usize = 300 * 1024;

/// A run's inbox, as the note holds it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Inbox {
    /// Calls are taken while it is open; once closed, a call is refused.
    open: bool,
    /// The run's deadline (epoch ms): a proxy waits no longer.
    deadline_ms: u64,
    /// The workspace the run answers (a read is made with its token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    team: Option<String>,
    /// How many calls the holder has taken.
    taken: usize,
    /// The calls appended and not yet taken, in order.
    calls: Vec<Posted>,
}

/// A call appended to an inbox.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Posted {
    /// The call's own name: its answer's note is named for it.
    pub id: String,
    /// The Web API method, or the `response_url` post.
    pub method: String,
    /// Its arguments, as one JSON object.
    pub args: Value,
}

/// What a proxy learns of a run it does not hold.
#[derive(Debug)]
pub(crate) enum Found {
    /// The run is open, for `team`'s workspace, until `deadline_ms`.
    Open {
        team: Option<String>,
        deadline_ms: u64,
    },
    /// No such run, or it has ended.
    Ended,
}

/// The inboxes and answers in a ledger.
#[derive(Clone)]
pub(crate) struct Relay {
    ledger: Arc<dyn Ledger>,
}

impl Relay {
    pub(crate) fn new(ledger: Arc<dyn Ledger>) -> Self {
        Self { ledger }
    }

    /// The holder opens run `run`'s inbox, until `deadline_ms`.
    pub(crate) async fn open(
        &self,
        run: &str,
        team: Option<&str>,
        deadline_ms: u64,
    ) -> Result<(), LedgerError> {
        let inbox = Inbox {
            open: true,
            deadline_ms,
            team: team.map(str::to_string),
            taken: 0,
            calls: Vec::new(),
        };
        let now = crate::clock::now_ms();
        self.ledger
            .set_note(
                &inbox_key(run),
                &to_json(&inbox),
                now,
                kept_until(deadline_ms),
            )
            .await
    }

    /// The holder takes the calls appended since it last took (none read: no write); `closing`,
    /// and closes the inbox with them, so that a later call is refused.
    pub(crate) async fn take(&self, run: &str, closing: bool) -> Result<Vec<Posted>, LedgerError> {
        let key = inbox_key(run);
        loop {
            let now = crate::clock::now_ms();
            let Some((read, mut inbox)) = self.inbox(&key, now).await? else {
                return Ok(Vec::new());
            };
            if inbox.calls.is_empty() && (!closing || !inbox.open) {
                return Ok(Vec::new());
            }
            let taken: Vec<Posted> = inbox.calls.drain(..).collect();
            inbox.taken += taken.len();
            inbox.open &= !closing;
            let until = kept_until(inbox.deadline_ms);
            match self
                .ledger
                .replace_note(&key, Some(&read), &to_json(&inbox), now, until, now)
                .await?
            {
                NotePut::Written => return Ok(taken),
                NotePut::Conflict => continue,
            }
        }
    }

    /// The holder writes the answer to call `id` of run `run`.
    pub(crate) async fn answer(
        &self,
        run: &str,
        id: &str,
        answered: &Answered,
        deadline_ms: u64,
    ) -> Result<(), LedgerError> {
        let now = crate::clock::now_ms();
        self.ledger
            .set_note(
                &answer_key(run, id),
                &answered.0.to_string(),
                now,
                kept_until(deadline_ms),
            )
            .await
    }

    /// What a proxy finds of run `run`.
    pub(crate) async fn find(&self, run: &str) -> Result<Found, LedgerError> {
        let now = crate::clock::now_ms();
        Ok(match self.inbox(&inbox_key(run), now).await? {
            Some((_, inbox)) if inbox.open && now < inbox.deadline_ms => Found::Open {
                team: inbox.team,
                deadline_ms: inbox.deadline_ms,
            },
            _ => Found::Ended,
        })
    }

    /// A proxy hands `method(args)` to run `run`'s holder and waits for its answer: the
    /// holder's, or the refusal of a call of an ended request.
    pub(crate) async fn call(&self, run: &str, method: &str, args: Value) -> Answered {
        match self.post_and_wait(run, method, args).await {
            Ok(answered) => answered,
            Err(error) => {
                tracing::warn!(error = %error, "the ledger failed while relaying a call");
                Answered::error("slack_once_unavailable")
            }
        }
    }

    async fn post_and_wait(
        &self,
        run: &str,
        method: &str,
        args: Value,
    ) -> Result<Answered, LedgerError> {
        let posted = Posted {
            id: uuid::Uuid::new_v4().simple().to_string(),
            method: method.to_string(),
            args,
        };
        let Some((index, deadline_ms)) = self.post(run, &posted).await? else {
            tracing::debug!(run, method, "a call of a run that is not open: refused");
            return Ok(Answered::error("slack_once_request_ended"));
        };
        tracing::debug!(run, method, index, "a call relayed to its run's holder");
        let answer = answer_key(run, &posted.id);
        let mut withdrawn_at = None;
        loop {
            tokio::time::sleep(RELAY_POLL).await;
            let now = crate::clock::now_ms();
            if let Some(answered) = self.ledger.note(&answer, now).await? {
                let body = serde_json::from_str(&answered).unwrap_or_else(
                    |_| serde_json::json!({"ok": false, "error": "slack_once_unavailable"}),
                );
                return Ok(Answered(body));
            }
            if now < deadline_ms {
                continue;
            }
            // Past the run's deadline: the holder is gone, or about to end the run.
            match withdrawn_at {
                None if self.withdraw(run, &posted.id, index).await? => {
                    tracing::debug!(run, method, "a call its holder never took: withdrawn");
                    return Ok(Answered::error("slack_once_request_ended"));
                }
                // Taken: its answer is on the way, unless the holder died making it.
                None => withdrawn_at = Some(now),
                Some(at) if now > at + TAKEN_GRACE.as_millis() as u64 => {
                    tracing::warn!(
                        method,
                        "the run's holder took a call and wrote no answer: it may have been made"
                    );
                    return Ok(Answered::error("slack_once_request_ended"));
                }
                Some(_) => {}
            }
        }
    }

    /// Appends `posted` to the open inbox of run `run`: its place among the run's calls, and the
    /// run's deadline; `None` when the run is not open.
    async fn post(&self, run: &str, posted: &Posted) -> Result<Option<(usize, u64)>, LedgerError> {
        let key = inbox_key(run);
        loop {
            let now = crate::clock::now_ms();
            let Some((read, mut inbox)) = self.inbox(&key, now).await? else {
                return Ok(None);
            };
            if !inbox.open || now >= inbox.deadline_ms {
                return Ok(None);
            }
            let index = inbox.taken + inbox.calls.len();
            inbox.calls.push(posted.clone());
            let value = to_json(&inbox);
            if value.len() > MAX_INBOX_BYTES {
                return Err(LedgerError::Unavailable(
                    "the run's inbox is full: its holder takes no calls".into(),
                ));
            }
            let until = kept_until(inbox.deadline_ms);
            match self
                .ledger
                .replace_note(&key, Some(&read), &value, now, until, now)
                .await?
            {
                NotePut::Written => return Ok(Some((index, inbox.deadline_ms))),
                NotePut::Conflict => continue,
            }
        }
    }

    /// Withdraws call `id` (at `index`) from run `run`'s inbox unless it was taken: whether it
    /// was withdrawn (or its inbox is gone), so that it will never be made.
    async fn withdraw(&self, run: &str, id: &str, index: usize) -> Result<bool, LedgerError> {
        let key = inbox_key(run);
        loop {
            let now = crate::clock::now_ms();
            let Some((read, mut inbox)) = self.inbox(&key, now).await? else {
                return Ok(true);
            };
            if inbox.taken > index {
                return Ok(false);
            }
            inbox.calls.retain(|call| call.id != id);
            let until = kept_until(inbox.deadline_ms);
            match self
                .ledger
                .replace_note(&key, Some(&read), &to_json(&inbox), now, until, now)
                .await?
            {
                NotePut::Written => return Ok(true),
                NotePut::Conflict => continue,
            }
        }
    }

    /// The inbox under `key`, as read and as parsed.
    async fn inbox(
        &self,
        key: &EventId,
        now_ms: u64,
    ) -> Result<Option<(String, Inbox)>, LedgerError> {
        let Some(read) = self.ledger.note(key, now_ms).await? else {
            return Ok(None);
        };
        match serde_json::from_str(&read) {
            Ok(inbox) => Ok(Some((read, inbox))),
            Err(_) => Err(LedgerError::Unavailable(
                "a run's inbox in the ledger does not parse".into(),
            )),
        }
    }
}

fn inbox_key(run: &str) -> EventId {
    EventId::try_from(format!("gwrun-{run}")).expect("a run's name is letters and digits")
}

fn answer_key(run: &str, id: &str) -> EventId {
    EventId::try_from(format!("gwcall-{run}-{id}")).expect("a call's name is letters and digits")
}

fn kept_until(deadline_ms: u64) -> u64 {
    deadline_ms / 1000 + KEPT_AFTER_THE_DEADLINE_S
}

fn to_json(inbox: &Inbox) -> String {
    serde_json::to_string(inbox).expect("an inbox serializes")
}

/// Whether `run` is a name the gateway could have given (32 hex digits): anything else is not
/// looked up.
pub(crate) fn is_run_name(run: &str) -> bool {
    run.len() == 32 && run.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::MemoryLedger;

    const RUN: &str = "0123456789abcdef0123456789abcdef";

    fn relay() -> Relay {
        Relay::new(Arc::new(MemoryLedger::new()))
    }

    fn in_a_minute() -> u64 {
        crate::clock::now_ms() + 60_000
    }

    #[tokio::test]
    async fn a_call_of_a_run_no_holder_opened_is_refused_at_once() {
        let relay = relay();
        let answered = relay
            .call(RUN, "chat.postMessage", serde_json::json!({}))
            .await;
        assert_eq!(answered.0["error"], "slack_once_request_ended");
        assert!(matches!(relay.find(RUN).await.unwrap(), Found::Ended));
    }

    #[tokio::test]
    async fn the_holder_takes_calls_in_order_and_its_answers_reach_their_proxies() {
        let relay = relay();
        relay.open(RUN, Some("T1"), in_a_minute()).await.unwrap();
        assert!(
            matches!(relay.find(RUN).await.unwrap(), Found::Open { team: Some(t), .. } if t == "T1")
        );
        let first = tokio::spawn({
            let relay = relay.clone();
            async move {
                relay
                    .call(RUN, "reactions.add", serde_json::json!({"n": 1}))
                    .await
            }
        });
        tokio::time::sleep(RELAY_POLL * 3).await;
        let second = tokio::spawn({
            let relay = relay.clone();
            async move {
                relay
                    .call(RUN, "chat.postMessage", serde_json::json!({"n": 2}))
                    .await
            }
        });
        tokio::time::sleep(RELAY_POLL * 3).await;
        let taken = relay.take(RUN, false).await.unwrap();
        let methods: Vec<&str> = taken.iter().map(|c| c.method.as_str()).collect();
        assert_eq!(methods, ["reactions.add", "chat.postMessage"]);
        assert!(
            relay.take(RUN, false).await.unwrap().is_empty(),
            "each call is taken once"
        );
        for (n, call) in taken.iter().enumerate() {
            let answered = Answered(serde_json::json!({"ok": true, "n": n + 1}));
            relay
                .answer(RUN, &call.id, &answered, in_a_minute())
                .await
                .unwrap();
        }
        assert_eq!(first.await.unwrap().0["n"], 1);
        assert_eq!(second.await.unwrap().0["n"], 2);
    }

    #[tokio::test]
    async fn closing_takes_the_calls_left_and_refuses_every_later_one() {
        let relay = relay();
        relay.open(RUN, None, in_a_minute()).await.unwrap();
        let early = tokio::spawn({
            let relay = relay.clone();
            async move {
                relay
                    .call(RUN, "chat.postMessage", serde_json::json!({}))
                    .await
            }
        });
        tokio::time::sleep(RELAY_POLL * 3).await;
        let left = relay.take(RUN, true).await.unwrap();
        assert_eq!(left.len(), 1, "a call that came before the close is made");
        relay
            .answer(
                RUN,
                &left[0].id,
                &Answered(serde_json::json!({"ok": true})),
                in_a_minute(),
            )
            .await
            .unwrap();
        assert_eq!(early.await.unwrap().0["ok"], true);
        let late = relay
            .call(RUN, "chat.postMessage", serde_json::json!({}))
            .await;
        assert_eq!(late.0["error"], "slack_once_request_ended");
        assert!(relay.take(RUN, true).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_call_whose_holder_died_is_withdrawn_after_the_deadline_and_never_taken() {
        let relay = relay();
        let deadline = crate::clock::now_ms() + 200;
        relay.open(RUN, None, deadline).await.unwrap();
        let answered = relay
            .call(RUN, "chat.postMessage", serde_json::json!({}))
            .await;
        assert_eq!(answered.0["error"], "slack_once_request_ended");
        assert!(
            relay.take(RUN, true).await.unwrap().is_empty(),
            "a withdrawn call is never made"
        );
    }
}
