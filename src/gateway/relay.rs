//! The bot's calls relayed through the ledger, for a gateway whose proxy may be another process
//! than the one that holds the run: on Lambda each of the bot's calls is an invocation of its
//! own, in whichever environment is free, never the busy one that holds the run.
//!
//! The run's holder opens an inbox for it (a note in the ledger, `gwrun-RUN`) and reads it while
//! the bot runs. A proxy that gets a call of a run it does not hold appends the call to the
//! inbox (a conditional write: the inbox as read), and waits for its answer, a note of its own
//! (`gwcall-RUN-CALL`). The holder takes the calls in the order they were appended (a
//! conditional write again, so that a call is taken once, its name kept among those taken: a
//! write whose answer was lost is read back), makes them as it makes its own
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
/// A proxy with a deadline of its own (a Lambda invocation's) answers this long before it, so
/// that its answer gets out before Lambda ends it.
pub(crate) const OWN_DEADLINE_MARGIN: Duration = Duration::from_millis(500);
/// How many times the holder tries to close its run's inbox.
const CLOSING_TRIES: u32 = 4;
/// An inbox or an answer outlives the run by this long before the table's TTL removes it.
const KEPT_AFTER_THE_DEADLINE_S: u64 = 600;
/// An inbox holds at most this much of calls not yet taken, and names of calls taken
/// (DynamoDB's items end at 400 KB): a call waits for room.
const MAX_INBOX_BYTES: usize = 300 * 1024;

/// A run's inbox, as the note holds it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Inbox {
    /// Calls are taken while it is open; once closed, a call is refused.
    open: bool,
    /// The run's deadline (epoch ms): a proxy waits no longer.
    deadline_ms: u64,
    /// The installation the run is answered with (many-workspace mode: the id of its key, a
    /// workspace's team or an org-wide install's enterprise): a read is made with its token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    installation: Option<String>,
    /// The names of the calls the holder has taken, in order: a call is taken once, and a
    /// proxy or a holder whose write's answer was lost reads here whether it was written.
    taken: Vec<String>,
    /// The calls appended and not yet taken, in order.
    calls: Vec<Posted>,
}

impl Inbox {
    /// Whether call `id` was appended (and is waiting, or taken).
    fn holds(&self, id: &str) -> bool {
        self.taken.iter().any(|t| t == id) || self.calls.iter().any(|c| c.id == id)
    }
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

/// The calls a holder's take may have taken, its write's answer lost: whether the write was
/// made is read at the next take, in the names the inbox holds as taken.
#[derive(Default)]
pub(crate) struct Takes {
    unconfirmed: Vec<Posted>,
}

/// What a proxy learns of a run it does not hold.
#[derive(Debug)]
pub(crate) enum Found {
    /// The run is open, answered with `installation`, until `deadline_ms`.
    Open {
        installation: Option<String>,
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

    /// The holder opens run `run`'s inbox, answered with `installation`, until `deadline_ms`.
    pub(crate) async fn open(
        &self,
        run: &str,
        installation: Option<&str>,
        deadline_ms: u64,
    ) -> Result<(), LedgerError> {
        let inbox = Inbox {
            open: true,
            deadline_ms,
            installation: installation.map(str::to_string),
            taken: Vec::new(),
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
    /// and closes the inbox with them, so that a later call is refused. A take whose write's
    /// answer was lost (an error, or a conflict with itself sent again) is kept in `takes`: its
    /// calls are returned once the inbox shows them taken. A closing that fails is tried again
    /// (there is no next reading to leave it to).
    pub(crate) async fn take(
        &self,
        run: &str,
        closing: bool,
        takes: &mut Takes,
    ) -> Result<Vec<Posted>, LedgerError> {
        let mut pause = RELAY_POLL;
        let mut tries = 1;
        loop {
            match self.take_once(run, closing, takes).await {
                Err(error) if closing && tries < CLOSING_TRIES => {
                    tracing::warn!(error = %error, "the run's inbox could not be closed: trying again");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                    tries += 1;
                }
                taken => return taken,
            }
        }
    }

    async fn take_once(
        &self,
        run: &str,
        closing: bool,
        takes: &mut Takes,
    ) -> Result<Vec<Posted>, LedgerError> {
        let key = inbox_key(run);
        loop {
            let now = crate::clock::now_ms();
            let Some((read, mut inbox)) = self.inbox(&key, now).await? else {
                return Ok(Vec::new());
            };
            let mut taken: Vec<Posted> = std::mem::take(&mut takes.unconfirmed)
                .into_iter()
                .filter(|call| inbox.taken.contains(&call.id))
                .collect();
            if inbox.calls.is_empty() && (!closing || !inbox.open) {
                return Ok(taken);
            }
            let new: Vec<Posted> = inbox.calls.drain(..).collect();
            inbox.taken.extend(new.iter().map(|call| call.id.clone()));
            inbox.open &= !closing;
            taken.extend(new);
            let until = kept_until(inbox.deadline_ms);
            match self
                .ledger
                .replace_note(&key, Some(&read), &to_json(&inbox), now, until, now)
                .await
            {
                Ok(NotePut::Written) => return Ok(taken),
                Ok(NotePut::Conflict) => takes.unconfirmed = taken,
                Err(error) => {
                    takes.unconfirmed = taken;
                    return Err(error);
                }
            }
        }
    }

    /// The holder writes the answer to call `id` of run `run`. A write that fails is tried
    /// again until the run's deadline (its proxy waits for it a little longer).
    pub(crate) async fn answer(
        &self,
        run: &str,
        id: &str,
        answered: &Answered,
        deadline_ms: u64,
    ) -> Result<(), LedgerError> {
        let key = answer_key(run, id);
        let value = answered.0.to_string();
        let mut pause = RELAY_POLL;
        loop {
            let now = crate::clock::now_ms();
            match self
                .ledger
                .set_note(&key, &value, now, kept_until(deadline_ms))
                .await
            {
                Ok(()) => return Ok(()),
                // Until the run's deadline only: past it, the holder's time is its claim's.
                Err(error @ LedgerError::Unavailable(_)) if now < deadline_ms => {
                    tracing::warn!(error = %error, "a relayed call's answer could not be written: writing it again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// What a proxy finds of run `run`.
    pub(crate) async fn find(&self, run: &str) -> Result<Found, LedgerError> {
        let now = crate::clock::now_ms();
        Ok(match self.inbox(&inbox_key(run), now).await? {
            Some((_, inbox)) if inbox.open && now < inbox.deadline_ms => Found::Open {
                installation: inbox.installation,
                deadline_ms: inbox.deadline_ms,
            },
            _ => Found::Ended,
        })
    }

    /// A proxy hands `method(args)` to run `run`'s holder and waits for its answer: the
    /// holder's, or the refusal of a call of an ended request; by `answer_by_ms` (its own
    /// deadline, epoch ms) at the latest.
    pub(crate) async fn call(
        &self,
        run: &str,
        method: &str,
        args: Value,
        answer_by_ms: Option<u64>,
    ) -> Answered {
        let answer_by_ms = answer_by_ms.map(|by| by - OWN_DEADLINE_MARGIN.as_millis() as u64);
        match self.post_and_wait(run, method, args, answer_by_ms).await {
            Ok(answered) => answered,
            Err(LedgerError::ItemTooLarge(why)) => {
                tracing::warn!(method, error = %why, "a call too large to relay: refused");
                Answered::error("request_too_large")
            }
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
        answer_by_ms: Option<u64>,
    ) -> Result<Answered, LedgerError> {
        let posted = Posted {
            id: uuid::Uuid::new_v4().simple().to_string(),
            method: method.to_string(),
            args,
        };
        let Some(deadline_ms) = self.post(run, &posted, answer_by_ms).await? else {
            tracing::debug!(run, method, "a call of a run that is not open: refused");
            return Ok(Answered::error("slack_once_request_ended"));
        };
        tracing::debug!(run, method, "a call relayed to its run's holder");
        let answer = answer_key(run, &posted.id);
        let grace = TAKEN_GRACE.as_millis() as u64;
        let mut taken_at = None;
        loop {
            tokio::time::sleep(RELAY_POLL).await;
            let now = crate::clock::now_ms();
            match self.ledger.note(&answer, now).await {
                Ok(Some(answered)) => {
                    let body = serde_json::from_str(&answered).unwrap_or_else(
                        |_| serde_json::json!({"ok": false, "error": "slack_once_unavailable"}),
                    );
                    return Ok(Answered(body));
                }
                Ok(None) => {}
                // The call is in the inbox, or made: a read that failed is read again, the
                // call not given up while its holder may make it.
                Err(error) => {
                    tracing::debug!(error = %error, "a relayed call's answer could not be read")
                }
            }
            if answer_by_ms.is_some_and(|by| now >= by) {
                // This proxy's own time ends first: the call is withdrawn if it can be, and
                // answered before Lambda ends the invocation with a 502 an SDK sends again.
                return Ok(match self.withdraw(run, &posted.id).await {
                    Ok(true) if now >= deadline_ms => Answered::error("slack_once_request_ended"),
                    // Not made, its run still under way: the bot may make it again.
                    Ok(true) => Answered::error("slack_once_unavailable"),
                    // Taken, or its fate unread: it may be made.
                    Ok(false) | Err(_) => {
                        tracing::warn!(
                            method,
                            "a relayed call's invocation ran out of time before its answer: it may have been made"
                        );
                        Answered::error("slack_once_unavailable")
                    }
                });
            }
            if now < deadline_ms {
                continue;
            }
            // Past the run's deadline: the holder is gone, or about to end the run.
            match taken_at {
                None => match self.withdraw(run, &posted.id).await {
                    Ok(true) => {
                        tracing::debug!(run, method, "a call its holder never took: withdrawn");
                        return Ok(Answered::error("slack_once_request_ended"));
                    }
                    // Taken: its answer is on the way, unless the holder died making it.
                    Ok(false) => taken_at = Some(now),
                    Err(error) if now > deadline_ms + grace => return Err(error),
                    Err(_) => {}
                },
                // Its fate is unknown (`slack_once_request_ended` would tell the bot that it
                // was not made): the request's next run finds it out before writing.
                Some(at) if now > at + grace => {
                    tracing::warn!(
                        method,
                        "the run's holder took a call and wrote no answer: it may have been made"
                    );
                    return Ok(Answered::error("slack_once_unavailable"));
                }
                Some(_) => {}
            }
        }
    }

    /// Appends `posted` to the open inbox of run `run`, waiting for room until `answer_by_ms`:
    /// the run's deadline; `None` when the run is not open. A write whose answer was lost
    /// (a conflict with itself sent again, or an error) is read in the inbox: appended once,
    /// whether taken since or not.
    async fn post(
        &self,
        run: &str,
        posted: &Posted,
        answer_by_ms: Option<u64>,
    ) -> Result<Option<u64>, LedgerError> {
        let key = inbox_key(run);
        let mut tried = false;
        loop {
            let now = crate::clock::now_ms();
            let Some((read, mut inbox)) = self.inbox(&key, now).await? else {
                return Ok(None);
            };
            if tried && inbox.holds(&posted.id) {
                return Ok(Some(inbox.deadline_ms));
            }
            if !inbox.open || now >= inbox.deadline_ms {
                return Ok(None);
            }
            if answer_by_ms.is_some_and(|by| now >= by) {
                return Err(LedgerError::Unavailable(
                    "the run's inbox had no room in this invocation's time".into(),
                ));
            }
            inbox.calls.push(posted.clone());
            let value = to_json(&inbox);
            if value.len() > MAX_INBOX_BYTES {
                let alone = Inbox {
                    taken: Vec::new(),
                    calls: vec![posted.clone()],
                    ..inbox
                };
                if to_json(&alone).len() > MAX_INBOX_BYTES {
                    return Err(LedgerError::ItemTooLarge(
                        "the call is larger than a run's inbox holds".into(),
                    ));
                }
                // Full of calls its holder has not taken yet (it is making a slow one): this
                // one waits for room, as a sidecar's proxy waits for its run to take it.
                tokio::time::sleep(RELAY_POLL).await;
                continue;
            }
            let until = kept_until(inbox.deadline_ms);
            match self
                .ledger
                .replace_note(&key, Some(&read), &value, now, until, now)
                .await
            {
                Ok(NotePut::Written) => return Ok(Some(inbox.deadline_ms)),
                Ok(NotePut::Conflict) => tried = true,
                Err(error) => {
                    let now = crate::clock::now_ms();
                    return match self.inbox(&key, now).await {
                        Ok(Some((_, inbox))) if inbox.holds(&posted.id) => {
                            Ok(Some(inbox.deadline_ms))
                        }
                        _ => Err(error),
                    };
                }
            }
        }
    }

    /// Withdraws call `id` from run `run`'s inbox unless it was taken: whether it was
    /// withdrawn (or its inbox is gone), so that it will never be made.
    async fn withdraw(&self, run: &str, id: &str) -> Result<bool, LedgerError> {
        let key = inbox_key(run);
        loop {
            let now = crate::clock::now_ms();
            let Some((read, mut inbox)) = self.inbox(&key, now).await? else {
                return Ok(true);
            };
            if inbox.taken.iter().any(|t| t == id) {
                return Ok(false);
            }
            if !inbox.calls.iter().any(|call| call.id == id) {
                // Withdrawn already: this very write, its answer lost.
                return Ok(true);
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
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::ledger::{
        Alias, AliasRequest, Claim, ClaimRequest, Finish, Held, MemoryLedger, Settled, StateItem,
        StatePut, StateWrite, StepRecord,
    };

    const RUN: &str = "0123456789abcdef0123456789abcdef";

    fn relay() -> Relay {
        Relay::new(Arc::new(MemoryLedger::new()))
    }

    /// A note operation of the ledger.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum NoteOp {
        Read,
        Set,
        Replace,
    }

    /// What happens to a note operation, as DynamoDB and its SDK can make it happen.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Fault {
        /// Refused, not applied (throttled past the SDK's own retries).
        Refused,
        /// Applied, its answer lost: the SDK sends it again, and the retry's condition finds
        /// the write applied (a conflict).
        AppliedThenConflict,
        /// Applied, and every answer lost: an error.
        AppliedThenRefused,
    }

    /// The memory ledger, with a fault on the next note operation of a kind on keys that start
    /// with a prefix.
    struct FaultyLedger {
        inner: MemoryLedger,
        armed: Mutex<Option<(NoteOp, &'static str, Fault)>>,
    }

    impl FaultyLedger {
        fn new() -> Arc<Self> {
            Arc::new(Self {
                inner: MemoryLedger::new(),
                armed: Mutex::new(None),
            })
        }

        fn arm(&self, op: NoteOp, prefix: &'static str, fault: Fault) {
            *self.armed.lock().unwrap() = Some((op, prefix, fault));
        }

        fn fired(&self) -> bool {
            self.armed.lock().unwrap().is_none()
        }

        fn fault(&self, op: NoteOp, key: &EventId) -> Option<Fault> {
            let mut armed = self.armed.lock().unwrap();
            match *armed {
                Some((o, prefix, fault)) if o == op && key.as_str().starts_with(prefix) => {
                    *armed = None;
                    Some(fault)
                }
                _ => None,
            }
        }
    }

    fn refused() -> LedgerError {
        LedgerError::Unavailable("ProvisionedThroughputExceededException".into())
    }

    #[async_trait]
    impl Ledger for FaultyLedger {
        async fn claim(&self, request: &ClaimRequest<'_>) -> Result<Claim, LedgerError> {
            self.inner.claim(request).await
        }
        async fn begin_step(
            &self,
            held: Held<'_>,
            step: u32,
            intent: &StepRecord,
            settled: &[Settled],
            now_ms: u64,
        ) -> Result<(), LedgerError> {
            self.inner
                .begin_step(held, step, intent, settled, now_ms)
                .await
        }
        async fn alias(&self, request: &AliasRequest<'_>) -> Result<Alias, LedgerError> {
            self.inner.alias(request).await
        }
        async fn set_note(
            &self,
            key: &EventId,
            value: &str,
            at_ms: u64,
            expires_at_s: u64,
        ) -> Result<(), LedgerError> {
            let fault = self.fault(NoteOp::Set, key);
            if fault == Some(Fault::Refused) {
                return Err(refused());
            }
            self.inner.set_note(key, value, at_ms, expires_at_s).await?;
            match fault {
                Some(Fault::AppliedThenRefused) => Err(refused()),
                _ => Ok(()),
            }
        }
        async fn replace_note(
            &self,
            key: &EventId,
            read: Option<&str>,
            value: &str,
            at_ms: u64,
            expires_at_s: u64,
            now_ms: u64,
        ) -> Result<NotePut, LedgerError> {
            let fault = self.fault(NoteOp::Replace, key);
            if fault == Some(Fault::Refused) {
                return Err(refused());
            }
            let put = self
                .inner
                .replace_note(key, read, value, at_ms, expires_at_s, now_ms)
                .await?;
            match (fault, put) {
                (Some(Fault::AppliedThenConflict), NotePut::Written) => Ok(NotePut::Conflict),
                (Some(Fault::AppliedThenRefused), NotePut::Written) => Err(refused()),
                (_, put) => Ok(put),
            }
        }
        async fn note(&self, key: &EventId, now_ms: u64) -> Result<Option<String>, LedgerError> {
            if self.fault(NoteOp::Read, key).is_some() {
                return Err(refused());
            }
            self.inner.note(key, now_ms).await
        }
        async fn state_changes(&self, key: &EventId) -> Result<BTreeMap<String, u64>, LedgerError> {
            self.inner.state_changes(key).await
        }
        async fn state(
            &self,
            key: &EventId,
            now_ms: u64,
        ) -> Result<Option<StateItem>, LedgerError> {
            self.inner.state(key, now_ms).await
        }
        async fn put_state(
            &self,
            key: &EventId,
            write: &StateWrite<'_>,
            now_ms: u64,
        ) -> Result<StatePut, LedgerError> {
            self.inner.put_state(key, write, now_ms).await
        }
        async fn finish(
            &self,
            held: Held<'_>,
            to: &Finish,
            settled: &[Settled],
            now_ms: u64,
        ) -> Result<(), LedgerError> {
            self.inner.finish(held, to, settled, now_ms).await
        }
    }

    fn calling(relay: &Relay, method: &'static str) -> tokio::task::JoinHandle<Answered> {
        let relay = relay.clone();
        tokio::spawn(async move { relay.call(RUN, method, serde_json::json!({}), None).await })
    }

    /// Whether the holder's take (`closing`: and close) finds no call.
    async fn takes_nothing(relay: &Relay, closing: bool) -> bool {
        relay
            .take(RUN, closing, &mut Takes::default())
            .await
            .unwrap()
            .is_empty()
    }

    fn ok() -> Answered {
        Answered(serde_json::json!({"ok": true}))
    }

    fn in_a_minute() -> u64 {
        crate::clock::now_ms() + 60_000
    }

    #[tokio::test]
    async fn a_call_of_a_run_no_holder_opened_is_refused_at_once() {
        let relay = relay();
        let answered = relay
            .call(RUN, "chat.postMessage", serde_json::json!({}), None)
            .await;
        assert_eq!(answered.0["error"], "slack_once_request_ended");
        assert!(matches!(relay.find(RUN).await.unwrap(), Found::Ended));
    }

    #[tokio::test]
    async fn the_holder_takes_calls_in_order_and_its_answers_reach_their_proxies() {
        let relay = relay();
        relay.open(RUN, Some("T1"), in_a_minute()).await.unwrap();
        assert!(
            matches!(relay.find(RUN).await.unwrap(), Found::Open { installation: Some(t), .. } if t == "T1")
        );
        let first = tokio::spawn({
            let relay = relay.clone();
            async move {
                relay
                    .call(RUN, "reactions.add", serde_json::json!({"n": 1}), None)
                    .await
            }
        });
        tokio::time::sleep(RELAY_POLL * 3).await;
        let second = tokio::spawn({
            let relay = relay.clone();
            async move {
                relay
                    .call(RUN, "chat.postMessage", serde_json::json!({"n": 2}), None)
                    .await
            }
        });
        tokio::time::sleep(RELAY_POLL * 3).await;
        let taken = relay.take(RUN, false, &mut Takes::default()).await.unwrap();
        let methods: Vec<&str> = taken.iter().map(|c| c.method.as_str()).collect();
        assert_eq!(methods, ["reactions.add", "chat.postMessage"]);
        assert!(
            takes_nothing(&relay, false).await,
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
                    .call(RUN, "chat.postMessage", serde_json::json!({}), None)
                    .await
            }
        });
        tokio::time::sleep(RELAY_POLL * 3).await;
        let left = relay.take(RUN, true, &mut Takes::default()).await.unwrap();
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
            .call(RUN, "chat.postMessage", serde_json::json!({}), None)
            .await;
        assert_eq!(late.0["error"], "slack_once_request_ended");
        assert!(takes_nothing(&relay, true).await);
    }

    #[tokio::test]
    async fn a_call_whose_holder_died_is_withdrawn_after_the_deadline_and_never_taken() {
        let relay = relay();
        let deadline = crate::clock::now_ms() + 200;
        relay.open(RUN, None, deadline).await.unwrap();
        let answered = relay
            .call(RUN, "chat.postMessage", serde_json::json!({}), None)
            .await;
        assert_eq!(answered.0["error"], "slack_once_request_ended");
        assert!(
            takes_nothing(&relay, true).await,
            "a withdrawn call is never made"
        );
    }

    /// Waits until the inbox holds `n` calls not taken.
    async fn until_posted(ledger: &dyn Ledger, n: usize) {
        for _ in 0..250 {
            let read = ledger
                .note(&inbox_key(RUN), crate::clock::now_ms())
                .await
                .unwrap();
            let inbox: Option<Inbox> = read.map(|r| serde_json::from_str(&r).unwrap());
            if inbox.is_some_and(|i| i.calls.len() >= n) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no call was posted");
    }

    #[tokio::test]
    async fn a_call_taken_after_an_earlier_one_was_withdrawn_is_known_taken() {
        let relay = relay();
        relay.open(RUN, None, in_a_minute()).await.unwrap();
        let posted = |n: u32| Posted {
            id: format!("{n:032x}"),
            method: "chat.postMessage".into(),
            args: serde_json::json!({ "n": n }),
        };
        let (first, second) = (posted(1), posted(2));
        relay.post(RUN, &first, None).await.unwrap().unwrap();
        relay.post(RUN, &second, None).await.unwrap().unwrap();
        // The first call's proxy, its clock ahead of the holder's, withdraws it at what it
        // reads as the deadline; the holder, its run not over yet, takes the second.
        assert!(relay.withdraw(RUN, &first.id).await.unwrap());
        let taken = relay.take(RUN, false, &mut Takes::default()).await.unwrap();
        assert_eq!(taken.len(), 1);
        assert!(
            !relay.withdraw(RUN, &second.id).await.unwrap(),
            "the second call was taken: it is made, and its proxy waits for its answer"
        );
    }

    #[tokio::test]
    async fn a_read_of_the_answer_that_failed_is_read_again() {
        let ledger = FaultyLedger::new();
        let relay = Relay::new(ledger.clone());
        relay.open(RUN, None, in_a_minute()).await.unwrap();
        ledger.arm(NoteOp::Read, "gwcall-", Fault::Refused);
        let call = calling(&relay, "chat.postMessage");
        until_posted(&*ledger, 1).await;
        for _ in 0..100 {
            if ledger.fired() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            ledger.fired(),
            "the proxy's first read of its answer failed"
        );
        let taken = relay.take(RUN, false, &mut Takes::default()).await.unwrap();
        relay
            .answer(RUN, &taken[0].id, &ok(), in_a_minute())
            .await
            .unwrap();
        assert_eq!(
            call.await.unwrap(),
            ok(),
            "the call is made: its answer is the holder's"
        );
    }

    #[tokio::test]
    async fn a_take_whose_answer_was_lost_makes_its_calls() {
        let ledger = FaultyLedger::new();
        let relay = Relay::new(ledger.clone());
        relay.open(RUN, None, in_a_minute()).await.unwrap();
        let _call = calling(&relay, "chat.postMessage");
        until_posted(&*ledger, 1).await;
        ledger.arm(NoteOp::Replace, "gwrun-", Fault::AppliedThenConflict);
        let taken = relay.take(RUN, false, &mut Takes::default()).await.unwrap();
        assert!(ledger.fired());
        assert_eq!(taken.len(), 1, "the call taken is the holder's to make");
    }

    #[tokio::test]
    async fn a_take_that_failed_once_written_makes_its_calls_at_the_next_reading() {
        let ledger = FaultyLedger::new();
        let relay = Relay::new(ledger.clone());
        relay.open(RUN, None, in_a_minute()).await.unwrap();
        let _call = calling(&relay, "chat.postMessage");
        until_posted(&*ledger, 1).await;
        ledger.arm(NoteOp::Replace, "gwrun-", Fault::AppliedThenRefused);
        let mut takes = Takes::default();
        assert!(relay.take(RUN, false, &mut takes).await.is_err());
        let taken = relay.take(RUN, false, &mut takes).await.unwrap();
        assert_eq!(taken.len(), 1, "the call taken is the holder's to make");
    }

    #[tokio::test]
    async fn an_answer_whose_first_write_failed_reaches_its_proxy() {
        let ledger = FaultyLedger::new();
        let relay = Relay::new(ledger.clone());
        let deadline = crate::clock::now_ms() + 1_000;
        relay.open(RUN, None, deadline).await.unwrap();
        let call = calling(&relay, "chat.postMessage");
        until_posted(&*ledger, 1).await;
        let taken = relay.take(RUN, false, &mut Takes::default()).await.unwrap();
        ledger.arm(NoteOp::Set, "gwcall-", Fault::Refused);
        let _ = relay.answer(RUN, &taken[0].id, &ok(), deadline).await;
        assert!(ledger.fired());
        assert_eq!(call.await.unwrap(), ok(), "the call was made");
    }

    #[tokio::test]
    async fn a_post_whose_answer_was_lost_is_in_the_inbox_once() {
        let ledger = FaultyLedger::new();
        let relay = Relay::new(ledger.clone());
        relay.open(RUN, None, in_a_minute()).await.unwrap();
        ledger.arm(NoteOp::Replace, "gwrun-", Fault::AppliedThenConflict);
        let _call = calling(&relay, "chat.postMessage");
        until_posted(&*ledger, 1).await;
        tokio::time::sleep(RELAY_POLL * 3).await;
        assert!(ledger.fired());
        let taken = relay.take(RUN, false, &mut Takes::default()).await.unwrap();
        assert_eq!(taken.len(), 1, "one call, made once");
    }

    #[tokio::test]
    async fn a_post_that_failed_once_written_waits_for_its_answer() {
        let ledger = FaultyLedger::new();
        let relay = Relay::new(ledger.clone());
        relay.open(RUN, None, in_a_minute()).await.unwrap();
        ledger.arm(NoteOp::Replace, "gwrun-", Fault::AppliedThenRefused);
        let call = calling(&relay, "chat.postMessage");
        until_posted(&*ledger, 1).await;
        let taken = relay.take(RUN, false, &mut Takes::default()).await.unwrap();
        assert_eq!(taken.len(), 1, "the holder makes the call");
        relay
            .answer(RUN, &taken[0].id, &ok(), in_a_minute())
            .await
            .unwrap();
        assert_eq!(
            call.await.unwrap(),
            ok(),
            "its proxy answers as the holder made it"
        );
    }

    #[tokio::test]
    async fn a_call_taken_by_a_holder_that_died_unanswered_has_an_unknown_fate() {
        let relay = relay();
        let deadline = crate::clock::now_ms() + 300;
        relay.open(RUN, None, deadline).await.unwrap();
        let call = calling(&relay, "chat.postMessage");
        until_posted(&*relay.ledger, 1).await;
        // The holder takes the call and dies before it writes the answer: it may have made it.
        let taken = relay.take(RUN, false, &mut Takes::default()).await.unwrap();
        assert_eq!(taken.len(), 1);
        assert_eq!(
            call.await.unwrap().0["error"],
            "slack_once_unavailable",
            "not `slack_once_request_ended`, which tells the bot the write was not made"
        );
    }

    #[tokio::test]
    async fn a_call_larger_than_an_inbox_holds_is_refused_as_too_large_and_not_posted() {
        let relay = relay();
        relay.open(RUN, None, in_a_minute()).await.unwrap();
        let text = "x".repeat(MAX_INBOX_BYTES);
        let answered = relay
            .call(
                RUN,
                "chat.postMessage",
                serde_json::json!({ "text": text }),
                None,
            )
            .await;
        assert_eq!(answered.0["error"], "request_too_large");
        assert!(takes_nothing(&relay, false).await);
    }

    #[tokio::test]
    async fn a_call_that_finds_the_inbox_full_waits_for_the_holder_to_take() {
        let relay = relay();
        relay.open(RUN, None, in_a_minute()).await.unwrap();
        let third = "x".repeat(MAX_INBOX_BYTES / 3);
        let calls: Vec<_> = (0..3)
            .map(|n| {
                let (relay, text) = (relay.clone(), third.clone());
                tokio::spawn(async move {
                    relay
                        .call(
                            RUN,
                            "chat.postMessage",
                            serde_json::json!({"n": n, "text": text}),
                            None,
                        )
                        .await
                })
            })
            .collect();
        // The holder, slow (a write waiting out a 429), has not taken the first two yet.
        until_posted(&*relay.ledger, 2).await;
        tokio::time::sleep(RELAY_POLL * 5).await;
        let mut takes = Takes::default();
        for _ in 0..50 {
            if calls.iter().all(|call| call.is_finished()) {
                break;
            }
            for call in relay.take(RUN, false, &mut takes).await.unwrap() {
                relay
                    .answer(RUN, &call.id, &ok(), in_a_minute())
                    .await
                    .unwrap();
            }
            tokio::time::sleep(RELAY_POLL).await;
        }
        for call in calls {
            assert_eq!(
                call.await.unwrap(),
                ok(),
                "every call is made, as on a sidecar"
            );
        }
    }

    #[tokio::test]
    async fn a_proxy_answers_by_its_own_deadline_withdrawing_the_call_it_can() {
        let relay = relay();
        relay.open(RUN, None, in_a_minute()).await.unwrap();
        let answer_by =
            || Some(crate::clock::now_ms() + OWN_DEADLINE_MARGIN.as_millis() as u64 + 200);
        // Not taken by then: withdrawn, never made, its run still under way.
        let started = std::time::Instant::now();
        let answered = relay
            .call(RUN, "chat.postMessage", serde_json::json!({}), answer_by())
            .await;
        assert_eq!(answered.0["error"], "slack_once_unavailable");
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(takes_nothing(&relay, false).await);
        // Taken and not answered by then: its fate unknown.
        let call = tokio::spawn({
            let (relay, by) = (relay.clone(), answer_by());
            async move {
                relay
                    .call(RUN, "chat.postMessage", serde_json::json!({}), by)
                    .await
            }
        });
        until_posted(&*relay.ledger, 1).await;
        assert_eq!(
            relay
                .take(RUN, false, &mut Takes::default())
                .await
                .unwrap()
                .len(),
            1
        );
        assert_eq!(call.await.unwrap().0["error"], "slack_once_unavailable");
    }

    #[tokio::test]
    async fn a_closing_that_failed_once_is_tried_again_and_takes_the_calls_left() {
        let ledger = FaultyLedger::new();
        let relay = Relay::new(ledger.clone());
        relay.open(RUN, None, in_a_minute()).await.unwrap();
        let _call = calling(&relay, "chat.postMessage");
        until_posted(&*ledger, 1).await;
        ledger.arm(NoteOp::Replace, "gwrun-", Fault::Refused);
        let left = relay.take(RUN, true, &mut Takes::default()).await.unwrap();
        assert!(ledger.fired());
        assert_eq!(left.len(), 1, "the call left is made");
        let late = relay
            .call(RUN, "chat.postMessage", serde_json::json!({}), None)
            .await;
        assert_eq!(
            late.0["error"], "slack_once_request_ended",
            "a later call is refused at once, not left to wait for the run's deadline"
        );
    }
}
