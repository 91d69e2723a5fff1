//! The poll example (`examples/poll.rs`) on DynamoDB Local: votes cast at once are all counted
//! (the app's state is written conditioned on the version read), one of them forced to find
//! the other's write in between; a closed poll takes no vote; only its author closes it; in
//! deferred mode, the votes are the worker's (the ingress keeps no state of its own).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use serde_json::{Value, json};
use slack_once::ledger::{
    Alias, AliasRequest, Claim, ClaimRequest, Finish, Held, Ledger, LedgerError, NotePut,
    StateItem, StatePut, StateWrite,
};
use slack_once::ledger::{Settled, StepRecord};
use slack_once::slack::envelope::EventId;
use slack_once::testing::TestBot;
use tokio::sync::Barrier;

use crate::helpers::{
    BotProcess, DeferredStack, HttpClient, SlackStandin, click_form, command_form, deliver_form,
    dynamodb_endpoint, eventually, fresh_table,
};

#[path = "../../examples/poll.rs"]
#[allow(dead_code)]
mod example;

/// A ledger that, once armed, holds the first two state writes back until both have arrived:
/// both were read at the same version, so one of them must find the other's write.
struct Gate {
    inner: Arc<dyn Ledger>,
    armed: AtomicUsize,
    barrier: Barrier,
    conflicts: AtomicUsize,
}

#[async_trait]
impl Ledger for Gate {
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
        at: u64,
        exp: u64,
    ) -> Result<(), LedgerError> {
        self.inner.set_note(key, value, at, exp).await
    }
    async fn note(&self, key: &EventId, now_ms: u64) -> Result<Option<String>, LedgerError> {
        self.inner.note(key, now_ms).await
    }
    async fn replace_note(
        &self,
        key: &EventId,
        read: Option<&str>,
        value: &str,
        at: u64,
        exp: u64,
        now_ms: u64,
    ) -> Result<NotePut, LedgerError> {
        self.inner
            .replace_note(key, read, value, at, exp, now_ms)
            .await
    }
    async fn state(&self, key: &EventId, now_ms: u64) -> Result<Option<StateItem>, LedgerError> {
        self.inner.state(key, now_ms).await
    }
    async fn state_changes(
        &self,
        key: &EventId,
    ) -> Result<std::collections::BTreeMap<String, u64>, LedgerError> {
        self.inner.state_changes(key).await
    }
    async fn put_state(
        &self,
        key: &EventId,
        write: &StateWrite<'_>,
        now_ms: u64,
    ) -> Result<StatePut, LedgerError> {
        let held = self
            .armed
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if held {
            self.barrier.wait().await;
        }
        let put = self.inner.put_state(key, write, now_ms).await?;
        if put == StatePut::Conflict {
            self.conflicts.fetch_add(1, Ordering::SeqCst);
        }
        Ok(put)
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

async fn gate() -> Arc<Gate> {
    let (_, ledger) = fresh_table(&dynamodb_endpoint()).await;
    Arc::new(Gate {
        inner: ledger,
        armed: AtomicUsize::new(0),
        barrier: Barrier::new(2),
        conflicts: AtomicUsize::new(0),
    })
}

/// The poll's name, as its Close button carries it.
fn poll_name(message: &Value) -> String {
    message["blocks"][2]["elements"][0]["value"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The poll's message (the bot's other messages are its answers to "polls").
fn the_poll(bot: &TestBot) -> Value {
    let messages: Vec<Value> = bot
        .slack()
        .messages()
        .into_iter()
        .filter(|m| {
            !m["text"]
                .as_str()
                .unwrap_or_default()
                .ends_with("open polls.")
        })
        .collect();
    assert_eq!(messages.len(), 1, "one poll message: {messages:?}");
    messages[0].clone()
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn two_votes_cast_at_once_are_both_counted() {
    let gate = gate().await;
    let bot = TestBot::start_with_ledger(example::app(), gate.clone()).await;
    let acked = bot
        .command(example::COMMAND, "Lunch? | Pizza | Sushi")
        .await;
    assert_eq!(acked.body["text"], "Poll posted.");
    let message = the_poll(&bot);
    assert_eq!(message["text"], "Lunch? (0 votes)");

    let name = poll_name(&message);
    gate.armed.store(2, Ordering::SeqCst);
    let (alice, bob) = (bot.as_user("U0ALICE"), bot.as_user("U0BOB"));
    let (first, second) = (format!("{name} 0"), format!("{name} 1"));
    let (a, b) = tokio::join!(
        alice.click(example::VOTE, &first, Some(&message)),
        bob.click(example::VOTE, &second, Some(&message)),
    );
    assert_eq!(
        (a.outcome.as_str(), b.outcome.as_str()),
        ("answered", "answered")
    );
    assert!(
        gate.conflicts.load(Ordering::SeqCst) >= 1,
        "both votes were read at one version: one found the other's write"
    );
    let message = the_poll(&bot);
    assert_eq!(message["text"], "Lunch? (2 votes)", "{message}");
    let buttons = &message["blocks"][1]["elements"];
    assert_eq!(buttons[0]["text"]["text"], "Pizza (1)");
    assert_eq!(buttons[1]["text"]["text"], "Sushi (1)");
    assert_eq!(buttons[0]["style"], "primary");
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn many_votes_at_once_are_all_counted_and_a_closed_poll_takes_none() {
    let gate = gate().await;
    let bot = TestBot::start_with_ledger(example::app(), gate.clone()).await;
    bot.command(example::COMMAND, "Ship it? | Yes | No | Later")
        .await;
    let message = the_poll(&bot);
    let name = poll_name(&message);
    let voters: Vec<String> = (0..8).map(|i| format!("U0VOTER{i}")).collect();
    let clicks = voters.iter().enumerate().map(|(i, voter)| {
        let (message, name) = (message.clone(), name.clone());
        let bot = &bot;
        async move {
            bot.as_user(voter)
                .click(example::VOTE, &format!("{name} {}", i % 3), Some(&message))
                .await
        }
    });
    for acked in futures_join_all(clicks).await {
        assert_eq!(acked.outcome, "answered");
    }
    assert_eq!(the_poll(&bot)["text"], "Ship it? (8 votes)");
    assert_eq!(bot.mention("how many polls?").await, "answered");
    assert_said(&bot, "1 open polls.");

    // Only the author (U0USER, who ran the command) may close it: anyone else is told so.
    let message = the_poll(&bot);
    bot.as_user("U0VOTER1")
        .click(example::CLOSE, &name, Some(&message))
        .await;
    assert!(bot.slack().views().is_empty(), "no modal for another user");
    bot.click(example::CLOSE, &name, Some(&message)).await;
    let views = bot.slack().views();
    assert_eq!(views.len(), 1, "the close modal");
    let metadata = views[0]["private_metadata"].as_str().unwrap();
    assert!(metadata.starts_with(&format!("{name} C")), "{metadata}");
    let acked = bot.submit_view(&views[0], json!({})).await;
    assert_eq!(acked.outcome, "answered");
    let closed = the_poll(&bot);
    assert_eq!(closed["text"], "Closed: Ship it? (8 votes)");
    bot.as_user("U0LATE")
        .click(example::VOTE, &format!("{name} 0"), Some(&message))
        .await;
    assert_eq!(
        the_poll(&bot),
        closed,
        "a vote on a closed poll changes nothing"
    );
    assert_eq!(bot.mention("polls?").await, "answered");
    assert_said(&bot, "0 open polls.");
}

/// The bot said `text` in one of its messages.
fn assert_said(bot: &TestBot, text: &str) {
    let said: Vec<String> = bot
        .slack()
        .messages()
        .iter()
        .map(|m| m["text"].to_string())
        .collect();
    assert!(said.iter().any(|t| t.contains(text)), "{said:?}");
}

/// All of `futures` at once, in one task (so that they interleave at every await).
async fn futures_join_all<F: std::future::Future>(
    futures: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    let mut set: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|v| v.expect("ready")).collect()
}

/// The poll message in the stand-in, once it says `text`.
async fn poll_saying(slack: &SlackStandin, text: &str) -> Option<Value> {
    let mut found = None;
    eventually(std::time::Duration::from_secs(20), || {
        found = slack
            .posted()
            .into_iter()
            .map(|p| p.body)
            .find(|m| m["text"] == text);
        found.is_some()
    })
    .await;
    found
}

/// Deferred mode as the template deploys it: the ingress has no table (its ledger is its own
/// memory), so a listener's state is a worker's. Each vote is handed to the queue at its first
/// state call, acknowledged empty, and counted by a worker; two at once are both counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn in_deferred_mode_votes_are_counted_by_the_worker() {
    let stack = DeferredStack::start(5).await;
    let ingress = BotProcess::spawn_example("poll", &[], &stack.ingress_vars());
    let worker = BotProcess::spawn_example("poll", &["worker"], &stack.worker_vars(30, 5));
    let http = HttpClient::default();
    let form = command_form(&stack.slack, example::COMMAND, "Lunch? | Pizza | Sushi");
    let answer = deliver_form(&http, &ingress.url(), &form, None).await;
    assert_eq!(answer.status, http::StatusCode::OK, "{}", answer.body);
    let message = poll_saying(&stack.slack, "Lunch? (0 votes)")
        .await
        .expect("the poll is posted by the worker");

    let name = poll_name(&message);
    let (first, second) = (format!("{name} 0"), format!("{name} 1"));
    let alice = click_form(&stack.slack, "U0ALICE", example::VOTE, &first, &message);
    let bob = click_form(&stack.slack, "U0BOB", example::VOTE, &second, &message);
    let url = ingress.url();
    let (a, b) = tokio::join!(
        deliver_form(&http, &url, &alice, None),
        deliver_form(&http, &url, &bob, None),
    );
    assert_eq!(a.status, http::StatusCode::OK, "{}", a.body);
    assert_eq!(b.status, http::StatusCode::OK, "{}", b.body);
    let message = poll_saying(&stack.slack, "Lunch? (2 votes)").await;
    let message = message.unwrap_or_else(|| {
        panic!(
            "both votes counted: {:?}\ningress:\n{}\nworker:\n{}",
            stack
                .slack
                .posted()
                .iter()
                .map(|p| &p.body["text"])
                .collect::<Vec<_>>(),
            ingress.log(),
            worker.log()
        )
    });
    let buttons = &message["blocks"][1]["elements"];
    assert_eq!(buttons[0]["text"]["text"], "Pizza (1)");
    assert_eq!(buttons[1]["text"]["text"], "Sushi (1)");
}

/// The workspace's open list stays bounded: a poll past its time leaves it, and only the
/// newest `MAX_LISTED` are kept however many are never closed.
#[test]
fn the_open_list_drops_polls_past_their_time_and_keeps_the_newest() {
    let mut open = None;
    for i in 0..(example::MAX_LISTED as u64 + 10) {
        open = Some(example::listed(
            open,
            &format!("poll-{i}"),
            1_000 + i,
            10_000 + i,
        ));
    }
    let open = open.unwrap();
    assert_eq!(open.len(), example::MAX_LISTED);
    assert_eq!(open[0].name, "poll-10", "the oldest went first");
    let later = example::listed(Some(open), "poll-new", 10_000 + 200, 90_000);
    assert!(later.iter().all(|l| l.until_ms > 10_200));
    assert_eq!(later.last().unwrap().name, "poll-new");
    assert_eq!(later.len(), example::MAX_LISTED - 200 + 10);
}

/// Deferred mode with the ingress reading the table, as the template deploys it: Close reads
/// the poll's state in the ingress and opens its modal there with the click's trigger (which a
/// worker could not: it expires in 3 s), and the submission closes the poll on a worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn in_deferred_mode_the_author_closes_the_poll_through_its_modal() {
    let stack = DeferredStack::start(5).await;
    // The template's ingress: the table, the queue, Slack's token (views open from it).
    let ingress = BotProcess::spawn_example("poll", &[], &stack.worker_vars(30, 5));
    let worker = BotProcess::spawn_example("poll", &["worker"], &stack.worker_vars(30, 5));
    let http = HttpClient::default();
    let form = command_form(&stack.slack, example::COMMAND, "Lunch? | Pizza | Sushi");
    deliver_form(&http, &ingress.url(), &form, None).await;
    let message = poll_saying(&stack.slack, "Lunch? (0 votes)")
        .await
        .expect("the poll is posted by the worker");
    let name = poll_name(&message);

    // The author (U0001, who ran the command) clicks Close: the modal opens from the ingress.
    let click = click_form(&stack.slack, "U0001", example::CLOSE, &name, &message);
    let answer = deliver_form(&http, &ingress.url(), &click, None).await;
    assert_eq!(answer.status, http::StatusCode::OK, "{}", answer.body);
    let views = stack.slack.views();
    assert_eq!(views.len(), 1, "the modal opened once: {}", ingress.log());
    let view = &views[0];
    assert_eq!(view["callback_id"], example::CLOSE_VIEW);

    let payload = json!({
        "type": "view_submission",
        "team": {"id": "T0001"},
        "user": {"id": "U0001", "team_id": "T0001"},
        "api_app_id": "A0001",
        "trigger_id": slack_once::testing::Workspace::trigger_id(),
        "view": {
            "id": view["id"], "callback_id": example::CLOSE_VIEW, "team_id": "T0001",
            "private_metadata": view["private_metadata"], "app_id": "A0001",
            "state": {"values": {}}
        },
    });
    let form = form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish();
    let answer = deliver_form(&http, &ingress.url(), &form, None).await;
    assert_eq!(answer.status, http::StatusCode::OK, "{}", answer.body);
    assert!(
        poll_saying(&stack.slack, "Closed: Lunch? (0 votes)")
            .await
            .is_some(),
        "the poll is closed: {:?}\ningress:\n{}\nworker:\n{}",
        stack
            .slack
            .posted()
            .iter()
            .map(|p| &p.body["text"])
            .collect::<Vec<_>>(),
        ingress.log(),
        worker.log()
    );
}
