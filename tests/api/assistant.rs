//! The legacy assistant-view example (`examples/assistant_view.rs`) as processes against the Slack stand-in:
//! streamed answers, suggested prompts, the agent view; SIGKILLed before its stream starts,
//! after `chat.startStream`, mid-appends and after `chat.stopStream`, a stream Slack expires
//! mid-answer, a redelivered finished answer: each time one answer message, complete.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use slack_once::app::{App, Ctx, MessageEvent};

use crate::helpers::*;

/// The answer the stand-in model gives to `question` with `words` words.
fn expected(question: &str, words: usize) -> String {
    let mut answer = format!("You asked: {question}.");
    for n in 1..=words {
        answer.push_str(&format!(" w{n}"));
    }
    answer
}

/// A person's question in the DM `D0001` (the agent view's: it starts its thread; the answer
/// goes in the thread under it, `ts_of(event_id)`).
fn question(event_id: &str, text: &str) -> String {
    let ts = ts_of(event_id);
    json!({
        "token": "unused", "team_id": TEAM, "api_app_id": APP_ID, "type": "event_callback",
        "event_id": event_id, "event_time": 1_700_000_000,
        "event": {"type": "message", "channel_type": "im", "user": "U0001", "text": text,
                  "ts": ts, "channel": "D0001", "event_ts": ts},
        "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": true}]
    })
    .to_string()
}

/// A workspace of another organisation, as a Slack Connect author's is.
const OTHER_TEAM: &str = "T0OTHERORG";

/// The same question from a Slack Connect author: a user of another organisation, whom Slack
/// does not take as this app's stream recipient.
fn connect_question(event_id: &str, text: &str) -> String {
    let mut v: Value = serde_json::from_str(&question(event_id, text)).unwrap();
    v["event"]["user_team"] = OTHER_TEAM.into();
    v["event"]["team"] = OTHER_TEAM.into();
    v.to_string()
}

/// The streams Slack started: `chat.startStream` calls but those refused for a recipient of
/// another workspace.
fn streams_started(slack: &SlackStandin) -> usize {
    slack
        .calls()
        .iter()
        .filter(|(m, args)| m == "chat.startStream" && args["recipient_team_id"] != OTHER_TEAM)
        .count()
}

fn thread_started(event_id: &str, thread_ts: &str) -> String {
    json!({
        "token": "unused", "team_id": TEAM, "api_app_id": APP_ID, "type": "event_callback",
        "event_id": event_id, "event_time": 1_700_000_000,
        "event": {"type": "assistant_thread_started", "event_ts": "1700000000.000200",
                  "assistant_thread": {"user_id": "U0001", "channel_id": "D0001", "thread_ts": thread_ts,
                                       "context": {"channel_id": "C0001", "team_id": TEAM}}},
        "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": true}]
    })
    .to_string()
}

fn home_opened(event_id: &str, tab: &str) -> String {
    json!({
        "token": "unused", "team_id": TEAM, "api_app_id": APP_ID, "type": "event_callback",
        "event_id": event_id, "event_time": 1_700_000_000,
        "event": {"type": "app_home_opened", "user": "U0001", "channel": "D0001", "tab": tab,
                  "event_ts": "1700000000.000300"},
        "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": true}]
    })
    .to_string()
}

/// The bot's messages in the thread, as a user sees them.
fn answers(slack: &SlackStandin, thread_ts: &str) -> Vec<Value> {
    slack
        .posted()
        .into_iter()
        .map(|p| p.body)
        .filter(|m| m["thread_ts"] == thread_ts)
        .collect()
}

fn model_calls(logs: &[&BotProcess]) -> usize {
    logs.iter()
        .map(|p| p.log().matches("model: answering").count())
        .sum()
}

fn model_vars(words: usize, word_ms: u64) -> Vec<(&'static str, String)> {
    vec![
        ("MODEL_WORDS", words.to_string()),
        ("MODEL_WORD_MS", word_ms.to_string()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn a_question_gets_one_streamed_answer_complete_with_its_feedback_and_status_cleared() {
    let slack = SlackStandin::start().await;
    let mut vars = model_vars(12, 10);
    vars.extend([
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
    ]);
    let bot = BotProcess::spawn_example("assistant_view", &[], &vars);
    let http = HttpClient::default();
    let thread = &ts_of("EvQ1");
    let answer = deliver(&http, &bot.url(), &question("EvQ1", "what is once"), None).await;
    assert_eq!(answer.outcome(), "answered", "{}", bot.log());
    let again = deliver(
        &http,
        &bot.url(),
        &question("EvQ1", "what is once"),
        Some(1),
    )
    .await;
    assert_eq!(again.outcome(), "duplicate");
    let messages = answers(&slack, thread);
    assert_eq!(messages.len(), 1, "one answer: {messages:?}");
    assert_eq!(messages[0]["text"], expected("what is once", 12));
    assert_ne!(messages[0]["streaming"], true, "stopped");
    assert!(
        messages[0]["blocks"]
            .to_string()
            .contains("feedback_buttons")
    );
    assert!(
        slack.calls_of("chat.appendStream") >= 1,
        "streamed as written"
    );
    let statuses: Vec<String> = slack
        .assistant_calls()
        .into_iter()
        .filter(|(m, ..)| m == "assistant.threads.setStatus")
        .map(|(.., args)| args["status"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(statuses, ["is thinking…", ""], "set, then cleared");
    assert_eq!(model_calls(&[&bot]), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn a_thread_start_sets_its_prompts_once_whichever_events_carry_it_and_the_agent_view_is_claimed_only_with_a_listener()
 {
    let slack = SlackStandin::start().await;
    let vars = vec![
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
    ];
    let assistant = BotProcess::spawn_example("assistant_view", &[], &vars);
    let http = HttpClient::default();
    let url = assistant.url();
    let thread = "1700000000.000900";
    assert_eq!(
        deliver(&http, &url, &thread_started("EvT1", thread), None)
            .await
            .outcome(),
        "answered"
    );
    // The same start under another event id (a phantom copy): one thread, one start.
    assert_eq!(
        deliver(&http, &url, &thread_started("EvT2", thread), None)
            .await
            .outcome(),
        "duplicate"
    );
    let prompts: Vec<_> = slack
        .assistant_calls()
        .into_iter()
        .filter(|(m, ..)| m == "assistant.threads.setSuggestedPrompts")
        .collect();
    assert_eq!(prompts.len(), 1);
    assert_eq!(prompts[0].2, thread);
    // The agent view: app_home_opened on the Messages tab is a thread start; the Home tab is not.
    assert_eq!(
        deliver(&http, &url, &home_opened("EvH1", "messages"), None)
            .await
            .outcome(),
        "no_reply"
    );
    assert_eq!(
        deliver(&http, &url, &home_opened("EvH2", "home"), None)
            .await
            .outcome(),
        "no_listener"
    );
    // Without a listener (the reference bot), never claimed.
    let reference = BotProcess::spawn(&vars);
    assert_eq!(
        deliver(
            &http,
            &reference.url(),
            &home_opened("EvH3", "messages"),
            None
        )
        .await
        .outcome(),
        "no_listener"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn a_stream_slack_expires_mid_answer_is_finished_by_an_update_one_message_complete() {
    let slack = SlackStandin::start().await;
    slack.set_stream_expiry(Duration::from_millis(300));
    let mut vars = model_vars(120, 8);
    vars.extend([
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
    ]);
    let bot = BotProcess::spawn_example("assistant_view", &[], &vars);
    let http = HttpClient::default();
    let thread = &ts_of("EvX1");
    let answer = deliver(&http, &bot.url(), &question("EvX1", "long"), None).await;
    assert_eq!(answer.outcome(), "answered", "{}", bot.log());
    let messages = answers(&slack, thread);
    assert_eq!(messages.len(), 1);
    assert_eq!(
        messages[0]["text"],
        expected("long", 120),
        "complete, by chat.update"
    );
    assert!(
        bot.log().contains("Slack ended the stream"),
        "{}",
        bot.log()
    );
}

// ---------------------------------------------------------------- deferred, killed

struct Deferred {
    stack: DeferredStack,
    ingress: BotProcess,
    words: usize,
}

impl std::ops::Deref for Deferred {
    type Target = DeferredStack;

    fn deref(&self) -> &DeferredStack {
        &self.stack
    }
}

impl Deferred {
    async fn start(words: usize) -> Self {
        let stack = DeferredStack::start(5).await;
        let ingress = BotProcess::spawn_example("assistant_view", &[], &stack.ingress_vars());
        Self {
            stack,
            ingress,
            words,
        }
    }

    fn worker(&self) -> BotProcess {
        let mut vars = self.worker_vars(3, 5);
        vars.extend(model_vars(self.words, 5));
        BotProcess::spawn_example("assistant_view", &["worker"], &vars)
    }
}

/// The assistant in deferred mode, its worker SIGKILLed once `killed_at` holds of the stand-in,
/// then another worker: one answer, complete; the model asked `model_asked` times in all.
async fn killed(
    event_id: &str,
    words: usize,
    script: (&str, Vec<Option<SlackFailure>>),
    killed_at: impl Fn(&SlackStandin) -> bool,
    model_asked: usize,
) {
    killed_asking(
        question,
        event_id,
        words,
        script,
        killed_at,
        (model_asked, 1),
    )
    .await
}

/// [`killed`], with the question `ask` makes.
async fn killed_asking(
    ask: fn(&str, &str) -> String,
    event_id: &str,
    words: usize,
    script: (&str, Vec<Option<SlackFailure>>),
    killed_at: impl Fn(&SlackStandin) -> bool,
    (model_asked, streams): (usize, usize),
) {
    let d = Deferred::start(words).await;
    match script.0 {
        "chat.postMessage" => d.slack.script(script.1),
        method => d.slack.script_method(method, script.1),
    }
    let mut a = d.worker();
    let http = HttpClient::default();
    let thread = &ts_of(event_id);
    let sent = deliver(&http, &d.ingress.url(), &ask(event_id, "kill me"), None).await;
    assert_eq!(sent.outcome(), "queued");
    assert!(
        eventually(Duration::from_secs(20), || killed_at(&d.slack)).await,
        "the point to kill at:\n{}",
        a.log()
    );
    a.kill();
    let b = d.worker();
    let complete = expected("kill me", words);
    assert!(
        eventually(Duration::from_secs(40), || {
            let m = answers(&d.slack, thread);
            m.len() == 1 && m[0]["text"] == complete.as_str()
        })
        .await,
        "one complete answer: {:?}\n{}",
        answers(&d.slack, thread),
        b.log()
    );
    let log = b
        .log_when(Duration::from_secs(10), |l| {
            l.contains("outcome=\"answered\"") || l.contains("outcome=\"recovered\"")
        })
        .await;
    assert!(log.contains("queued event handled"), "{log}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(answers(&d.slack, thread).len(), 1, "one answer message");
    assert_eq!(streams_started(&d.slack), streams, "never a second stream");
    assert_eq!(
        model_calls(&[&a, &b]),
        model_asked,
        "{}\n{}",
        a.log(),
        b.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn killed_before_the_stream_starts_one_answer() {
    killed(
        "EvKillA",
        10,
        (
            "assistant.threads.setStatus",
            vec![Some(SlackFailure::Unanswered)],
        ),
        |s| s.calls_of("assistant.threads.setStatus") >= 1,
        1,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn killed_after_start_stream_whose_answer_was_lost_the_stream_is_found_and_finished() {
    // Slack starts the stream and its answer never comes back: the ts is not journaled, so
    // the takeover finds the stream among the app's messages of the thread.
    killed(
        "EvKillB",
        10,
        ("chat.startStream", vec![Some(SlackFailure::MadeUnanswered)]),
        |s| s.calls_of("chat.startStream") >= 1,
        1,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn killed_at_the_first_append_the_journaled_stream_is_finished() {
    // 90 words: the first append goes out while the model writes, and never comes back.
    killed(
        "EvKillC",
        90,
        ("chat.appendStream", vec![Some(SlackFailure::Unanswered)]),
        |s| s.calls_of("chat.appendStream") >= 1,
        2,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn killed_mid_appends_the_same_stream_is_finished_complete() {
    // 150 words: several appends; the second never comes back.
    killed(
        "EvKillD",
        150,
        (
            "chat.appendStream",
            vec![None, Some(SlackFailure::Unanswered)],
        ),
        |s| s.calls_of("chat.appendStream") >= 2,
        2,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn a_slack_connect_author_is_answered_in_one_whole_post_when_slack_refuses_the_recipient() {
    let slack = SlackStandin::start().await;
    let mut vars = model_vars(12, 10);
    vars.extend([
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
    ]);
    let bot = BotProcess::spawn_example("assistant_view", &[], &vars);
    let http = HttpClient::default();
    let thread = &ts_of("EvConnect1");
    let sent = deliver(
        &http,
        &bot.url(),
        &connect_question("EvConnect1", "from afar"),
        None,
    )
    .await;
    assert_eq!(sent.outcome(), "answered", "{}", bot.log());
    let again = deliver(
        &http,
        &bot.url(),
        &connect_question("EvConnect1", "from afar"),
        Some(1),
    )
    .await;
    assert_eq!(again.outcome(), "duplicate");
    let messages = answers(&slack, thread);
    assert_eq!(messages.len(), 1, "one answer: {messages:?}");
    assert_eq!(messages[0]["text"], expected("from afar", 12));
    assert!(
        messages[0]["blocks"]
            .to_string()
            .contains("feedback_buttons")
    );
    let starts: Vec<Value> = slack
        .calls()
        .into_iter()
        .filter(|(m, _)| m == "chat.startStream")
        .map(|(_, args)| args)
        .collect();
    assert_eq!(starts.len(), 1, "refused once, never again: {starts:?}");
    assert_eq!(
        (
            &starts[0]["recipient_team_id"],
            &starts[0]["recipient_user_id"]
        ),
        (&json!(OTHER_TEAM), &json!("U0001")),
        "the author's team"
    );
    assert_eq!(slack.received().len(), 1, "one post");
    assert_eq!(slack.calls_of("chat.appendStream"), 0);
    assert!(
        bot.log().contains("refused the stream's recipient"),
        "{}",
        bot.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn killed_while_the_model_answers_a_slack_connect_author_the_recorded_refusal_is_replayed() {
    // Killed between the refused start and the remembered answer: the refusal is in the
    // ledger already, so the takeover neither starts nor looks for a stream, and it cannot
    // take an unmarked message of the app in the thread (another answer's stream) for one.
    let d = Deferred::start(200).await;
    let a = d.worker();
    let http = HttpClient::default();
    let thread = ts_of("EvKillG");
    let sent = deliver(
        &http,
        &d.ingress.url(),
        &connect_question("EvKillG", "kill me"),
        None,
    )
    .await;
    assert_eq!(sent.outcome(), "queued");
    assert!(
        eventually(Duration::from_secs(20), || a
            .log()
            .contains("model: answering"))
        .await,
        "{}",
        a.log()
    );
    let mut a = a;
    a.kill();
    // An unmarked message of the app in the same thread: another answer still streaming.
    let other = json!({"channel": "D0001", "thread_ts": thread});
    let started = HttpClient::default()
        .request(
            "POST",
            &format!("{}/chat.startStream", d.slack.base_url),
            &[
                ("authorization".into(), format!("Bearer {TOKEN}")),
                ("content-type".into(), "application/json".into()),
            ],
            other.to_string(),
        )
        .await;
    assert_eq!(started.json()["ok"], true, "{}", started.body);
    let b = d.worker();
    let complete = expected("kill me", 200);
    assert!(
        eventually(Duration::from_secs(40), || answers(&d.slack, &thread)
            .iter()
            .any(|m| m["text"] == complete.as_str()))
        .await,
        "the whole answer: {:?}\n{}",
        answers(&d.slack, &thread),
        b.log()
    );
    let messages = answers(&d.slack, &thread);
    assert_eq!(
        messages.len(),
        2,
        "the other stream and the answer: {messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m["streaming"] == true && m["text"] == ""),
        "the other stream untouched: {messages:?}"
    );
    assert_eq!(
        d.slack.calls_of("chat.startStream"),
        2,
        "the refused one and the other answer's: the takeover starts none"
    );
    assert_eq!(d.slack.lookups(), 0, "nothing to look for");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn killed_with_the_whole_answer_to_a_slack_connect_author_posted_unanswered_one_answer() {
    // The refusal is the start's recorded result: the takeover never starts a stream, finds
    // the post by its metadata, and the remembered answer is not asked again.
    killed_asking(
        connect_question,
        "EvKillF",
        40,
        ("chat.postMessage", vec![Some(SlackFailure::MadeUnanswered)]),
        |s| !s.received().is_empty(),
        (1, 0),
    )
    .await;
}

/// A listener answering a mention in its channel's thread with a stream for its author.
fn channel_streamer(recipient: bool) -> App {
    App::new().app_mention(move |ctx: Ctx, m: slack_once::app::AppMention| async move {
        let user = m.user.clone().unwrap_or_default();
        let team = m.user_team().or(ctx.team()).unwrap_or_default().to_string();
        let thread = m.thread_ts.clone().unwrap_or(m.ts.clone());
        let who = recipient.then_some((user.as_str(), team.as_str()));
        ctx.set_status(&m.channel, &thread, "is thinking…", &[])
            .await?;
        let mut stream = ctx.stream(&m.channel, &thread, who).await?;
        let text = ctx
            .remember("answer", async {
                stream.append("An answer").await;
                "An answer, whole.".to_string()
            })
            .await?;
        stream.finish(&text, None).await?;
        Ok(())
    })
}

fn connect_mention(event_id: &str) -> String {
    let mut v: Value = serde_json::from_str(&app_mention(event_id, "from afar")).unwrap();
    v["event"]["user_team"] = OTHER_TEAM.into();
    v.to_string()
}

#[tokio::test]
async fn in_a_channel_a_stream_names_its_author_and_a_slack_connect_author_gets_a_whole_post() {
    let app = spawn_bot(channel_streamer(true)).await;
    let local = app.send(&app_mention("EvChan1", "hello"), None).await;
    assert_eq!(local.outcome(), "answered", "{}", local.body);
    let remote = app.send(&connect_mention("EvChan2"), None).await;
    assert_eq!(remote.outcome(), "answered", "{}", remote.body);
    for (id, streamed) in [("EvChan1", true), ("EvChan2", false)] {
        let messages = answers(&app.slack, &ts_of(id));
        assert_eq!(messages.len(), 1, "{id}: {messages:?}");
        assert_eq!(messages[0]["text"], "An answer, whole.", "{id}");
        assert_eq!(messages[0].get("streaming").is_some(), streamed, "{id}");
    }
    assert_eq!(app.slack.calls_of("chat.startStream"), 2, "one each");
    assert_eq!(app.slack.received().len(), 1, "the remote one's post");
    for id in ["EvChan1", "EvChan2"] {
        let again = app.send(&app_mention(id, "hello"), Some(1)).await;
        assert_eq!(again.outcome(), "duplicate", "{id}");
    }
}

#[tokio::test]
async fn a_refused_stream_left_unfinished_is_no_reply_not_an_answer() {
    let app = spawn_bot(App::new().app_mention(
        |ctx: Ctx, m: slack_once::app::AppMention| async move {
            let team = m.user_team().unwrap_or_default().to_string();
            let user = m.user.clone().unwrap_or_default();
            let _stream = ctx
                .stream(&m.channel, &m.ts, Some((user.as_str(), team.as_str())))
                .await?;
            Ok(())
        },
    ))
    .await;
    let sent = app.send(&connect_mention("EvChan5"), None).await;
    assert_eq!(sent.outcome(), "no_reply", "{}", sent.body);
    assert_eq!(app.slack.calls_of("chat.startStream"), 1);
    assert!(answers(&app.slack, &ts_of("EvChan5")).is_empty());
}

#[tokio::test]
async fn in_a_channel_a_stream_without_a_recipient_fails_for_good_not_retried() {
    let app = spawn_bot(channel_streamer(false)).await;
    let sent = app.send(&app_mention("EvChan3", "hello"), None).await;
    assert_eq!(sent.outcome(), "failed", "{}", sent.body);
    let retry = app.send(&app_mention("EvChan3", "hello"), Some(1)).await;
    assert_eq!(retry.outcome(), "already_failed", "{}", retry.body);
    assert_eq!(app.slack.calls_of("chat.startStream"), 1);
    assert!(answers(&app.slack, &ts_of("EvChan3")).is_empty());
}

#[tokio::test]
async fn a_refused_recipient_after_an_ambiguous_start_is_recorded_and_its_post_found_not_remade() {
    // The first start's fate unknown (a 500); the retry looks, finds no stream, is refused the
    // recipient (recorded), and its post's answer is lost; the next retry replays the refusal,
    // looks for the post and finds it: one answer, never a stream.
    let app = spawn_app_with(Options {
        vars: vec![("DEDUP_LEASE_SECONDS", "2".to_string())],
        app: Some(channel_streamer(true)),
        ..Default::default()
    })
    .await;
    app.slack
        .script_method("chat.startStream", [SlackFailure::Status(500)]);
    let first = app.send(&connect_mention("EvChan4"), None).await;
    assert!(!first.status.is_success(), "{}", first.body);
    app.slack.script([SlackFailure::MadeUnanswered]);
    let second = app.send(&connect_mention("EvChan4"), Some(1)).await;
    assert!(!second.status.is_success(), "{}", second.body);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let third = app.send(&connect_mention("EvChan4"), Some(2)).await;
    assert_eq!(third.outcome(), "recovered", "{}", third.body);
    let messages = answers(&app.slack, &ts_of("EvChan4"));
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0]["text"], "An answer, whole.");
    assert_eq!(
        app.slack.calls_of("chat.startStream"),
        2,
        "the ambiguous one and the refused one; the replay makes none"
    );
    assert_eq!(app.slack.received().len(), 1, "one post");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn killed_after_stop_stream_the_remembered_answer_is_not_asked_again() {
    killed(
        "EvKillE",
        10,
        ("chat.update", vec![Some(SlackFailure::Unanswered)]),
        |s| s.calls_of("chat.update") >= 1,
        1,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn a_redelivered_finished_answer_writes_nothing() {
    let d = Deferred::start(5).await;
    let worker = d.worker();
    let http = HttpClient::default();
    let thread = &ts_of("EvR1");
    let body = question("EvR1", "once");
    assert_eq!(
        deliver(&http, &d.ingress.url(), &body, None)
            .await
            .outcome(),
        "queued"
    );
    assert!(
        eventually(Duration::from_secs(20), || answers(&d.slack, thread).len()
            == 1)
        .await
    );
    assert!(
        eventually(Duration::from_secs(10), || worker
            .log()
            .contains("outcome=\"answered\""))
        .await
    );
    let calls = d.slack.calls().len();
    // Slack's retry of the same event: queued again, and the worker writes nothing.
    assert_eq!(
        deliver(&http, &d.ingress.url(), &body, Some(1))
            .await
            .outcome(),
        "queued"
    );
    assert!(
        eventually(Duration::from_secs(20), || worker
            .log()
            .contains("outcome=\"duplicate\""))
        .await,
        "{}",
        worker.log()
    );
    assert_eq!(d.slack.calls().len(), calls, "nothing written");
    assert_eq!(answers(&d.slack, thread).len(), 1);
    assert_eq!(model_calls(&[&worker]), 1);
}

// ---------------------------------------------------------------- remembered results

#[tokio::test]
async fn a_remembered_result_is_reused_by_the_retry_after_a_failed_post() {
    let computed = Arc::new(AtomicUsize::new(0));
    let count = computed.clone();
    let app = App::new().message_where(
        |m: &MessageEvent| m.mention,
        move |ctx: Ctx, _m: MessageEvent| {
            let count = count.clone();
            async move {
                let n: usize = ctx
                    .remember("slow answer", async {
                        count.fetch_add(1, Ordering::SeqCst) + 1
                    })
                    .await?;
                ctx.reply(format!("computed {n}")).await?;
                Ok(())
            }
        },
    );
    let app = spawn_bot(app).await;
    // The post fails (Slack 503, nothing posted): released; Slack's retry answers.
    app.slack.script([SlackFailure::Status(503)]);
    let first = app.send(&app_mention("EvRem", "hi"), None).await;
    assert_eq!(first.status.as_u16(), 502, "{}", first.body);
    let retry = app.send(&app_mention("EvRem", "hi"), Some(1)).await;
    assert_eq!(retry.outcome(), "answered", "{}", retry.body);
    assert_eq!(
        computed.load(Ordering::SeqCst),
        1,
        "computed once, remembered"
    );
    assert_eq!(app.slack.posted()[0].body["text"], "computed 1");
}

// ---------------------------------------------------------------- in-process

/// The README's assistant, with a model of `words` words.
fn assistant_app(words: usize) -> App {
    App::new().assistant_message(move |ctx: Ctx, q: MessageEvent| async move {
        let (channel, thread) = (q.channel.clone(), q.thread().to_string());
        let mut stream = ctx.stream(&channel, &thread, None).await?;
        let text = ctx
            .remember("answer", async {
                let mut text = format!("You asked: {}.", q.text);
                stream.append(&text.clone()).await;
                for n in 1..=words {
                    let word = format!(" w{n}");
                    text.push_str(&word);
                    stream.append(&word).await;
                }
                text
            })
            .await?;
        stream.finish(&text, None).await?;
        Ok(())
    })
}

/// A question in the thread `thread_ts` of D0001 (a follow-up).
fn follow_up(event_id: &str, text: &str, thread_ts: &str) -> String {
    let mut v: Value = serde_json::from_str(&question(event_id, text)).unwrap();
    v["event"]["thread_ts"] = thread_ts.into();
    v.to_string()
}

#[tokio::test]
async fn a_lost_stream_start_is_found_among_unmarked_messages_never_taking_an_earlier_answer() {
    let app = spawn_app_with(Options {
        vars: vec![("DEDUP_LEASE_SECONDS", "2".to_string())],
        app: Some(assistant_app(8)),
        ..Default::default()
    })
    .await;
    // The first question is answered, its stream finished and marked.
    let thread = ts_of("EvF1");
    assert_eq!(
        app.send(&question("EvF1", "first"), None).await.outcome(),
        "answered"
    );
    // A follow-up in the same thread: Slack starts its stream and the answer never comes back.
    app.slack
        .script_method("chat.startStream", [SlackFailure::MadeUnanswered]);
    let hung = app.send(&follow_up("EvF2", "second", &thread), None).await;
    assert_eq!(hung.status.as_u16(), 504, "{}", hung.body);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let retry = app
        .send(&follow_up("EvF2", "second", &thread), Some(1))
        .await;
    assert_eq!(retry.status.as_u16(), 200, "{}", retry.body);
    let texts: Vec<String> = answers(&app.slack, &thread)
        .iter()
        .map(|m| m["text"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        texts,
        [expected("first", 8), expected("second", 8)],
        "each answer whole, the first untouched"
    );
    assert_eq!(app.slack.calls_of("chat.startStream"), 2, "no third stream");
}

#[tokio::test]
async fn a_write_inside_a_remembered_computation_is_refused_at_once() {
    let app = spawn_bot(
        App::new().assistant_message(|ctx: Ctx, q: MessageEvent| async move {
            let inner = ctx.clone();
            let _: String = ctx
                .remember("answer", async move {
                    // A write here would be skipped by a run that finds the result remembered.
                    let _ = inner.say("inside").await;
                    "x".to_string()
                })
                .await?;
            ctx.say(format!("after {}", q.text)).await?;
            Ok(())
        }),
    )
    .await;
    let started = std::time::Instant::now();
    let answer = app.send(&question("EvIn", "q"), None).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "no wait for a deadline"
    );
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);
    let posted: Vec<String> = app
        .slack
        .posted()
        .iter()
        .map(|p| p.body["text"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        posted,
        ["after q"],
        "the write inside was refused, not made"
    );
}

fn context_changed(event_id: &str, thread_ts: &str, channel: &str, event_ts: &str) -> String {
    let mut v: Value = serde_json::from_str(&thread_started(event_id, thread_ts)).unwrap();
    v["event"]["type"] = "assistant_thread_context_changed".into();
    v["event"]["event_ts"] = event_ts.into();
    v["event"]["assistant_thread"]["context"]["channel_id"] = channel.into();
    v.to_string()
}

/// An assistant that says which channel the user is looking at.
fn context_app() -> App {
    App::new()
        .assistant_thread_started(|_ctx: Ctx, _t: slack_once::app::AssistantThread| async {
            Ok(())
        })
        .assistant_message(|ctx: Ctx, _q: MessageEvent| async move {
            let context = ctx.thread_context().await?;
            let channel = context
                .as_ref()
                .and_then(|c| c["channel_id"].as_str())
                .unwrap_or("nowhere");
            ctx.reply(format!("you are looking at {channel}")).await?;
            Ok(())
        })
}

async fn the_thread_context_follows_the_thread(ledger: Arc<dyn slack_once::ledger::Ledger>) {
    let app = spawn_app_with(Options {
        ledger: Some(ledger),
        app: Some(context_app()),
        ..Default::default()
    })
    .await;
    let thread = "1700000000.000111";
    assert_eq!(
        app.send(&thread_started("EvC1", thread), None)
            .await
            .outcome(),
        "no_reply"
    );
    let said = |n: usize| {
        app.slack.posted()[n].body["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        app.send(&follow_up("EvC2", "where", thread), None)
            .await
            .outcome(),
        "answered"
    );
    assert_eq!(said(0), "you are looking at C0001");
    // The user looks at another channel; a retry of an older change comes late.
    let newer = context_changed("EvC3", thread, "C0002", "1700000100.000100");
    let older = context_changed("EvC4", thread, "C0009", "1700000050.000100");
    assert_eq!(app.send(&newer, None).await.outcome(), "no_listener");
    assert_eq!(app.send(&older, None).await.outcome(), "no_listener");
    assert_eq!(
        app.send(&follow_up("EvC5", "and now", thread), None)
            .await
            .outcome(),
        "answered"
    );
    assert_eq!(
        said(1),
        "you are looking at C0002",
        "the latest change, not the late one"
    );
    // Another thread has a context of its own, or none.
    assert_eq!(
        app.send(&follow_up("EvC6", "elsewhere", "1700000000.000999"), None)
            .await
            .outcome(),
        "answered"
    );
    assert_eq!(said(2), "you are looking at nowhere");
}

#[tokio::test]
async fn the_thread_context_follows_the_thread_in_memory() {
    the_thread_context_follows_the_thread(Arc::new(slack_once::ledger::MemoryLedger::new())).await;
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn the_thread_context_follows_the_thread_on_dynamodb() {
    let (_table, ledger) = fresh_table(&dynamodb_endpoint()).await;
    the_thread_context_follows_the_thread(ledger).await;
}
