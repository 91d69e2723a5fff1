//! Regressions: each test failed on a defect a production review found, and is named for what it
//! guards. Against DynamoDB Local, the SQS server, the built binary and `slack-once standin`,
//! or in process against `FakeSlack`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::StatusCode;
use serde_json::{Value, json};
use slack_once::app::function::Execution;
use slack_once::app::{
    AgentSessionStopped, App, AppMention, BlockAction, Ctx, MessageEvent, SessionStatus,
};
use slack_once::ledger::Ledger;
use slack_once::testing::TestBot;

use crate::agent::parts_in;
use crate::helpers::*;
use crate::steps_processes::{APPROVER, click_on, dm as dms, execution, script, start_step, vars};

fn with_cmid(body: &str, cmid: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(body).unwrap();
    v["event"]["client_msg_id"] = cmid.into();
    v.to_string()
}

// ================================================================ copies under another ts

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn a_copy_under_another_ts_never_answers_again_in_its_own_thread() {
    let endpoint = dynamodb_endpoint();
    let (table, direct) = fresh_table(&endpoint).await;
    let proxy = LedgerProxy::start(&endpoint).await;
    let app = spawn_app_on_ledger(
        &proxy.url,
        table,
        vec![("DEDUP_LEASE_SECONDS", "1".to_string())],
    )
    .await;
    let cmid = "c0ffee16-0000-4000-8000-0000000000b1";
    let original = with_cmid(&app_mention("EvRt16TwoTsA", "hello"), cmid);
    let copy = with_cmid(&app_mention("EvRt16TwoTsB", "hello"), cmid);

    // The original is answered, but its completion never reaches DynamoDB (as when the
    // instance dies right after posting): the item keeps the claim's began window.
    proxy.hold_next(LedgerOp::Complete, HoldAt::BeforeForwarding);
    let first = app.send(&original, None).await;
    assert_eq!(first.outcome(), "answered", "{}", first.body);
    assert_eq!(app.slack.posted().len(), 1);
    let item = direct
        .get_item(&mention_key("EvRt16TwoTsA"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(item["status"].as_s().unwrap(), "in_progress");

    // After the lease, the copy Slack sends under another ts (typeclaw/typeclaw#49: ~20 s later).
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let second = app.send(&copy, None).await;
    assert_eq!(
        app.slack.posted().len(),
        1,
        "the copy took the original's claim over, looked in its own thread ({:?}) and answered \
         again: {} {}",
        app.slack.lookup_queries(),
        second.status,
        second.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn a_copy_under_another_ts_does_not_fail_the_message_for_good() {
    let endpoint = dynamodb_endpoint();
    let (_, ledger) = fresh_table(&endpoint).await;
    let app = spawn_app_with(Options {
        vars: vec![("DEDUP_LEASE_SECONDS", "1".to_string())],
        ledger: Some(ledger as Arc<dyn Ledger>),
        app: None,
    })
    .await;
    let cmid = "c0ffee16-0000-4000-8000-0000000000b2";
    let original = with_cmid(&app_mention("EvRt16TwoTsC", "hello"), cmid);
    let copy = with_cmid(&app_mention("EvRt16TwoTsD", "hello"), cmid);

    // Slack neither answers nor makes the original's post: the claim is released with the
    // post's intent (fate unknown), its identity naming the original's thread.
    app.slack.script([SlackFailure::Unanswered]);
    let first = app.send(&original, None).await;
    assert!(!first.status.is_success(), "{}", first.body);

    let second = app.send(&copy, None).await;
    let retry = app.send(&original, Some(1)).await;
    assert_eq!(
        app.slack.posted().len(),
        1,
        "nobody answered: the copy got {} {} and the original's retry {} {}",
        second.status,
        second.body,
        retry.status,
        retry.body
    );
}

// ================================================================ events that disagree on client_msg_id

/// The `message` event of the mention `mention_id` (same channel and ts, the bot mentioned):
/// a file share, as Slack's FileShareMessageEvent (no client_msg_id), or a plain message.
fn message_of(mention_id: &str, event_id: &str, file_share: bool) -> serde_json::Value {
    let ts = ts_of(mention_id);
    let mut event = serde_json::json!({
        "type": "message", "user": "U0001", "text": format!("<@{BOT_USER}> summarize this"),
        "ts": ts, "channel": "C0001", "channel_type": "channel", "event_ts": ts
    });
    if file_share {
        event["subtype"] = "file_share".into();
        event["upload"] = false.into();
        event["display_as_bot"] = false.into();
        event["files"] = serde_json::json!([{"id": "F0RT16", "name": "deploy.log"}]);
    }
    serde_json::json!({
        "token": "unused", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
        "event_id": event_id, "event_time": 1_700_000_000, "event": event,
        "authorizations": [{"team_id": "T0001", "user_id": BOT_USER, "is_bot": true}]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn one_message_is_one_answer_whichever_of_its_events_carries_the_client_msg_id() {
    let endpoint = dynamodb_endpoint();
    // 0: the app_mention carries it, the file_share message does not (Slack's types, the
    //    project's fixtures); 1: the message carries it, the app_mention does not
    //    (typeclaw/typeclaw#49).
    for (k, mention_has_it) in [(0, true), (1, false)] {
        let (_, ledger) = fresh_table(&endpoint).await;
        let app = spawn_app_with(Options {
            ledger: Some(ledger as Arc<dyn Ledger>),
            ..Default::default()
        })
        .await;
        let cmid = format!("c0ffee16-0000-4000-8000-00000000f00{k}");
        let mention_id = format!("EvRt16Mention{k}");
        let plain = app_mention(&mention_id, "summarize this");
        let mention = if mention_has_it {
            with_cmid(&plain, &cmid)
        } else {
            plain
        };
        let mut message = message_of(&mention_id, &format!("EvRt16Message{k}"), mention_has_it);
        if !mention_has_it {
            message["event"]["client_msg_id"] = cmid.clone().into();
        }
        let first = app.send(&mention, None).await;
        assert_eq!(first.outcome(), "answered", "{k}: {}", first.body);
        let second = app.send(&message.to_string(), None).await;
        assert_eq!(
            (second.outcome().as_str(), app.slack.posted().len()),
            ("duplicate", 1),
            "case {k}: the two events of one message were claimed under two keys: {}",
            second.body
        );
    }
}

// ================================================================ connection poisoning

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_500_after_the_write_is_retried_without_an_error_line() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let slack = SlackStandin::start().await;
    let proxy = LedgerProxy::start(&endpoint).await;
    let bot = BotProcess::spawn(&bot_vars(&slack, &proxy.url, &table));
    proxy.hold_next(LedgerOp::Claim, HoldAt::Error500AfterForwarding);
    let http = HttpClient::default();
    let answer = deliver(&http, &bot.url(), &app_mention("EvRt16Poison", "hi"), None).await;
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);
    assert_eq!(slack.posted().len(), 1);
    let log = bot.log_after(1).await;
    assert!(
        !log.contains("unable to mark the connection for closure"),
        "the SDK's ConnectionPoisoningInterceptor found no connection to poison (our connector \
         never sets one): an ERROR line per transient response, and the retry reused the \
         connection:\n{log}"
    );
}

// ================================================================ message patterns on non-ASCII text

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn patterns_that_matched_non_ascii_text_still_do() {
    let endpoint = dynamodb_endpoint();
    let (_, ledger) = fresh_table(&endpoint).await;
    let app = App::new()
        .message(r"(?i)^привет", |ctx: Ctx, _m: MessageEvent| async move {
            ctx.reply("здравствуйте").await?;
            Ok(())
        })
        .message(r"^deploy (\w+)$", |ctx: Ctx, m: MessageEvent| async move {
            let service = m.capture(1).unwrap_or_default().to_string();
            ctx.reply(format!("deploying {service}")).await?;
            Ok(())
        });
    let test = spawn_app_with(Options {
        ledger: Some(ledger as Arc<dyn Ledger>),
        app: Some(app),
        ..Default::default()
    })
    .await;
    for (id, text) in [
        ("EvRt16Cyrillic", "Привет"),
        ("EvRt16Accent", "deploy café"),
    ] {
        let answer = test.send(&app_mention(id, text), None).await;
        assert_eq!(
            answer.outcome(),
            "answered",
            "{text:?} no longer matches (regex-lite: ASCII-only (?i) and \\w): {}",
            answer.body
        );
    }
}

// ================================================================ Workflow Builder steps

/// The DM of execution number `index` (in posting order).
async fn dm_at(standin: &StandinProcess, index: usize) -> Value {
    dms(standin).await.remove(index)
}

fn has_buttons(message: &Value) -> bool {
    message.to_string().contains("approval_approve")
}

/// Synchronous mode: a click's completion that fails in a way a retry would fix (Slack's
/// answer lost, a 429) after the example has already replaced the DM (buttons gone, "Approved
/// by …"). Slack never retries a block_actions, the claim is released, and no click can come
/// any more: the step stays running for ever while the DM says it was approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_click_whose_completion_answer_is_lost_never_strands_the_step() {
    stranded(1, json!(["hang"])).await;
}

/// As the test above, with Slack answering the completion `ratelimited` (Tier 3) for longer than
/// the click's 2.5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_click_whose_completion_is_rate_limited_never_strands_the_step() {
    let many: Vec<&str> = std::iter::repeat_n("fail:ratelimited", 40).collect();
    stranded(2, json!(many)).await;
}

async fn stranded(n: u32, behaviours: Value) {
    {
        let endpoint = dynamodb_endpoint();
        let (table, _) = fresh_table(&endpoint).await;
        let standin = StandinProcess::start().await;
        let vars = vars(&standin, &endpoint, &table);
        let a = BotProcess::spawn_example("approval", &[], &vars);
        let http = HttpClient::default();
        let (id, body) = start_step(&standin, 100 + n).await;
        assert_eq!(
            deliver(&http, &a.url(), &body, None).await.outcome(),
            "answered"
        );
        script(&standin, "functions.completeSuccess", behaviours.clone()).await;
        let message = dm_at(&standin, 0).await;
        let alice = click_on(&standin, &message, &id, "U0ALICE", "approval_approve", 1).await;
        let answer = deliver_form(&http, &a.url(), &alice, None).await;
        eprintln!(
            "[F1 {behaviours}] the click's answer: {} {}",
            answer.status, answer.body
        );
        tokio::time::sleep(Duration::from_secs(4)).await;
        let e = execution(&standin, &id).await;
        let shown = dm_at(&standin, 0).await;
        eprintln!("[F1 {behaviours}] execution: {e}\nDM now: {shown}");
        assert!(
            e["state"] == "completed" || has_buttons(&shown),
            "[{behaviours}] the step is running, nothing will retry the click (Slack does not \
             retry block_actions), and the DM no longer has buttons for anyone to click: \
             stuck for good.\nexecution: {e}\nDM: {shown}\nlog:\n{}",
            a.log()
        );
    }
}

/// The decider's request runs again (deferred mode's redelivery; here the same form sent
/// again) after another click, past the decider's lease, completed the step WITH THE DECIDER'S
/// DECISION. Its own completion step was never announced, Slack answers not-running (or its
/// token is revoked): `Completion::Ended`, and the example replaces the DM with "ended before a
/// decision" although the workflow went on with that very decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_decider_run_again_after_another_click_sent_its_decision_is_not_told_ended() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let standin = StandinProcess::start().await;
    let vars = vars(&standin, &endpoint, &table);
    let a = BotProcess::spawn_example("approval", &[], &vars);
    let b = BotProcess::spawn_example("approval", &[], &vars);
    let http = HttpClient::default();
    let (id, body) = start_step(&standin, 200).await;
    assert_eq!(
        deliver(&http, &a.url(), &body, None).await.outcome(),
        "answered"
    );
    let message = dm_at(&standin, 0).await;
    // Alice's click decides, then its chat.update never answers: the request dies after its
    // decision (deadline), released.
    script(&standin, "chat.update", json!(["hang"])).await;
    let alice = click_on(&standin, &message, &id, "U0ALICE", "approval_approve", 1).await;
    let first = deliver_form(&http, &a.url(), &alice, None).await;
    eprintln!("[F2] alice's first run: {} {}", first.status, first.body);
    tokio::time::sleep(Duration::from_millis(800)).await;
    // Bob, past Alice's lease: sends Alice's decision for her.
    let bob = click_on(&standin, &message, &id, "U0BOB", "approval_approve", 2).await;
    let second = deliver_form(&http, &b.url(), &bob, None).await;
    eprintln!("[F2] bob: {} {}", second.status, second.body);
    let e = execution(&standin, &id).await;
    assert_eq!(e["state"], "completed", "{e}\n{}", b.log());
    assert_eq!(e["outputs"]["decided_by"], "U0ALICE", "{e}");
    let shown = dm_at(&standin, 0).await;
    assert!(
        shown.to_string().contains("Approved by <@U0ALICE>"),
        "{shown}"
    );
    // Alice's request again (the queue's redelivery of it).
    let again = deliver_form(&http, &a.url(), &alice, None).await;
    eprintln!("[F2] alice again: {} {}", again.status, again.body);
    let shown = dm_at(&standin, 0).await;
    let e = execution(&standin, &id).await;
    eprintln!("[F2] execution: {e}\nDM: {shown}");
    assert!(
        shown.to_string().contains("Approved by <@U0ALICE>"),
        "the workflow went on with Alice's approval, and the DM says: {shown}\nexecution: {e}\n\
         A:\n{}",
        a.log()
    );
}

/// A decider died after its decision; the workflow is then stopped; a later click sends the
/// dead decider's decision with `announced_elsewhere`, Slack answers not-running, and that is
/// taken as the decision's completion: the record is closed `completed`, the clicker is told
/// "Decided already: Approved by …" though nothing was ever completed (expected: Ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_click_on_a_workflow_stopped_after_a_dead_deciders_decision_reads_ended() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let standin = StandinProcess::start().await;
    let vars = vars(&standin, &endpoint, &table);
    let a = BotProcess::spawn_example("approval", &[], &vars);
    let http = HttpClient::default();
    let (id, body) = start_step(&standin, 300).await;
    assert_eq!(
        deliver(&http, &a.url(), &body, None).await.outcome(),
        "answered"
    );
    let message = dm_at(&standin, 0).await;
    script(&standin, "chat.update", json!(["hang"])).await;
    let alice = click_on(&standin, &message, &id, "U0ALICE", "approval_approve", 1).await;
    deliver_form(&http, &a.url(), &alice, None).await;
    standin
        .post("execution/end", json!({"function_execution_id": id}))
        .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let bob = click_on(&standin, &message, &id, "U0BOB", "approval_approve", 2).await;
    deliver_form(&http, &a.url(), &bob, None).await;
    let state = standin.state().await;
    let e = execution(&standin, &id).await;
    eprintln!("[F3] execution: {e}\nephemerals: {}", state["ephemerals"]);
    assert_eq!(e["completions"], 0, "{e}");
    let told = state["ephemerals"].to_string() + &dm_at(&standin, 0).await.to_string();
    assert!(
        !told.contains("Decided already"),
        "the workflow was stopped and never completed, and Bob is told: {told}\nlog:\n{}",
        a.log()
    );
}

/// A decider died after its decision (its lease over); the next click is Reject: the
/// example shows the dead decider's decision (the buttons go) and returns without sending it.
/// Nothing is left to click; the step runs for ever, the DM saying it was approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_reject_after_a_dead_deciders_decision_sends_that_decision() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let standin = StandinProcess::start().await;
    let vars = vars(&standin, &endpoint, &table);
    let a = BotProcess::spawn_example("approval", &[], &vars);
    let http = HttpClient::default();
    let (id, body) = start_step(&standin, 400).await;
    assert_eq!(
        deliver(&http, &a.url(), &body, None).await.outcome(),
        "answered"
    );
    let message = dm_at(&standin, 0).await;
    script(&standin, "chat.update", json!(["hang"])).await;
    let alice = click_on(&standin, &message, &id, "U0ALICE", "approval_approve", 1).await;
    deliver_form(&http, &a.url(), &alice, None).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let bob = click_on(&standin, &message, &id, "U0BOB", "approval_reject", 2).await;
    deliver_form(&http, &a.url(), &bob, None).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let e = execution(&standin, &id).await;
    let shown = dm_at(&standin, 0).await;
    eprintln!("[F4] execution: {e}\nDM: {shown}");
    assert!(
        e["state"] == "completed" || has_buttons(&shown),
        "the DM shows a decision without buttons and the step still runs: {e}\n{shown}"
    );
}

/// A step declared by its bare callback id ("a bare &str declares none": outputs are not
/// checked, per `impl From<&str> for Function`) cannot complete with any output at all.
#[tokio::test]
async fn a_step_declared_by_its_bare_callback_id_completes_with_outputs() {
    let app = App::new().function("greet", |ctx: Ctx, _ex: Execution| async move {
        ctx.complete(json!({"greeting": "hello"})).await?;
        Ok(())
    });
    let bot = TestBot::start(app).await;
    let (outcome, ex) = bot.run_step("greet", json!({})).await;
    let e = bot
        .slack()
        .executions()
        .into_iter()
        .find(|e| e["function_execution_id"] == ex.function_execution_id.as_str())
        .unwrap();
    assert_eq!(
        (outcome.as_str(), e["state"].as_str()),
        ("answered", Some("completed")),
        "{e}"
    );
}

/// The step's token reaches the listener in `raw` (BlockAction, Event): any `?click` an
/// author logs leaks it ("the token is never logged").
#[tokio::test]
async fn the_execution_token_never_reaches_listeners_in_raw() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let kept = seen.clone();
    let app = App::new()
        .function("wait", |ctx: Ctx, _ex: Execution| async move {
            ctx.post("C0TEST", "waiting").await?;
            Ok(())
        })
        .action("go", move |_ctx: Ctx, click: BlockAction| {
            let kept = kept.clone();
            async move {
                *kept.lock().unwrap() = format!("{click:?}");
                Ok(())
            }
        });
    let bot = TestBot::start(app).await;
    let (_, ex) = bot.run_step("wait", json!({})).await;
    bot.as_user("U0ALICE")
        .in_step(&ex.function_execution_id)
        .click("go", "x", None)
        .await;
    let text = seen.lock().unwrap().clone();
    assert!(
        !text.contains("xwfp-"),
        "a listener's `{{click:?}}` shows the execution token: {}",
        &text[text.find("xwfp-").unwrap_or(0)..][..40.min(text.len())]
    );
}

/// In deferred mode: the worker's completion of a click is lost (not applied); the queue
/// redelivers the click after the visibility timeout (= DEDUP_LEASE_SECONDS, up to 900 s),
/// by which time the click's token (15 min; scaled here to 2 s) has expired: the redelivery's
/// completion is refused for good (`token_expired`), the click ends failed, and the DM already
/// says "Approved by …" with no buttons left: the step runs for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn a_deferred_click_redelivered_after_its_token_expired_never_strands_the_step() {
    let sqs = sqs_endpoint();
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let queue = TestQueue::create(&sqs, 5).await;
    let standin = StandinProcess::start_with(&["--workflow-token-seconds", "2"]).await;
    let mut worker_vars = vars(&standin, &endpoint, &table);
    worker_vars.extend([
        ("AWS_ENDPOINT_URL_SQS", sqs.clone()),
        ("WORK_QUEUE_URL", queue.url.clone()),
        ("DEDUP_LEASE_SECONDS", "3".to_string()),
        ("WORK_QUEUE_MAX_RECEIVES", "5".to_string()),
    ]);
    let ingress = BotProcess::spawn_example("approval", &[], &worker_vars);
    let worker = BotProcess::spawn_example("approval", &["worker"], &worker_vars);
    let http = HttpClient::default();
    let (id, body) = start_step(&standin, 700).await;
    assert_eq!(
        deliver(&http, &ingress.url(), &body, None).await.outcome(),
        "queued"
    );
    assert!(
        eventually_async(Duration::from_secs(20), || async {
            dms(&standin).await.len() == 1
        })
        .await,
        "the DM:\n{}",
        worker.log()
    );
    script(&standin, "functions.completeSuccess", json!(["hang"])).await;
    let message = dm_at(&standin, 0).await;
    let approve = click_on(&standin, &message, &id, APPROVER, "approval_approve", 5).await;
    let acked = deliver_form(&http, &ingress.url(), &approve, None).await;
    assert_eq!(acked.status, http::StatusCode::OK, "{}", acked.body);
    let settled = || async { queue.depth(&queue.url).await == 0 };
    let _ = eventually_async(Duration::from_secs(40), settled).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let e = execution(&standin, &id).await;
    let shown = dm_at(&standin, 0).await;
    eprintln!(
        "[F1c] execution: {e}\nDM: {shown}\nworker:\n{}",
        worker.log()
    );
    assert!(
        e["state"] == "completed" || has_buttons(&shown),
        "the click's redelivery came after its token expired: the step runs for ever and the \
         DM says approved, with no buttons: {e}\n{shown}"
    );
}

// ================================================================ agents: answers in parts, stops

/// A plain one-part answer streamed in several appends (outside `remember`, as
/// examples/assistant.rs streams), then `after` runs: on the first run it fails the listener
/// (a write of the app's own after the answer failing, a crash after the end's update: the
/// journal then ends with the end's `chat.stopStream` and `chat.update`).
fn one_part(runs: Arc<AtomicUsize>) -> App {
    App::new().assistant_message(move |ctx: Ctx, q: MessageEvent| {
        let runs = runs.clone();
        async move {
            let run = runs.fetch_add(1, Ordering::SeqCst);
            let (channel, thread) = (q.channel.clone(), q.thread().to_string());
            let mut stream = ctx.stream(&channel, &thread, None).await?;
            let mut text = String::new();
            for word in ["One", " answer", " in", " four", " appends."] {
                text.push_str(word);
                stream.append(word).await;
            }
            stream.finish_answer(&text, vec![]).await?;
            if run == 0 {
                // Anything after the answer that fails once (a DB write of the app's own, a
                // lost answer of a later step): the event is tried again.
                return Err("the app's own bookkeeping failed once".into());
            }
            Ok(())
        }
    })
}

/// `Stream::due` takes the journal's records of the END of a one-part answer
/// (`chat.stopStream` of the part, `chat.update` of the part, nothing after) for a SWITCH:
/// a later run (the retry of a listener that failed after `finish_answer`, a takeover after a
/// crash during the end's update) "replays" a switch at its second append and starts a new
/// stream that the first run never started: the answer is two messages.
#[tokio::test]
async fn a_replay_of_a_one_part_answers_end_starts_no_second_stream() {
    let runs = Arc::new(AtomicUsize::new(0));
    let bot = TestBot::start(one_part(runs.clone())).await;
    let first = bot.dm("one part please").await;
    eprintln!("[F1] first run: {first}");
    let thread = bot.slack().messages()[0]["thread_ts"]
        .as_str()
        .unwrap()
        .to_string();
    let before = parts_in(&bot.slack().messages(), "D0TEST", &thread);
    assert_eq!(before.len(), 1, "one part after the first run: {before:#?}");
    let again = bot.retry(1).await;
    eprintln!("[F1] retry: {again}");
    let after = parts_in(&bot.slack().messages(), "D0TEST", &thread);
    let starts = bot
        .slack()
        .calls()
        .iter()
        .filter(|(m, _)| m == "chat.startStream")
        .count();
    assert!(runs.load(Ordering::SeqCst) >= 2, "the listener ran again");
    assert_eq!(
        (after.len(), starts),
        (1, 1),
        "the retry started a second stream for a one-part answer: {:#?}",
        after
            .iter()
            .map(|m| (&m["ts"], &m["text"]))
            .collect::<Vec<(&Value, &Value)>>()
    );
}

/// The first question's answer waits at `gate` between its two appends (a model's pause, a
/// tool call); any other question is answered at once with "second answer".
fn gated(gate: Arc<tokio::sync::Notify>) -> App {
    App::new()
        .assistant_message(move |ctx: Ctx, q: MessageEvent| {
            let gate = gate.clone();
            async move {
                let (channel, thread) = (q.channel.clone(), q.thread().to_string());
                let mut stream = ctx.stream(&channel, &thread, None).await?;
                if q.text == "first" {
                    let a = "a".repeat(300);
                    stream.append(&a).await; // sent: more than 256 buffered
                    gate.notified().await;
                    let b = "b".repeat(300);
                    stream.append(&b).await; // Slack answers stopped_by_user
                    stream.finish_answer(&format!("{a}{b}"), vec![]).await?;
                } else {
                    stream.append("second answer").await;
                    stream.finish_answer("second answer", vec![]).await?;
                }
                Ok(())
            }
        })
        .agent_session_stopped(|_ctx: Ctx, _stop: AgentSessionStopped| async move { Ok(()) })
}

fn now_ts() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    format!("{}.{:06}", d.as_secs(), d.subsec_micros())
}

/// A run that learns of a stop from Slack (`stopped_by_user` on an append) keeps the stop
/// as a note stamped with the run's CLOCK (`Ctx::note_stop`: `now_ms`), not with when the
/// person stopped. `session_stopped` takes every request of the thread that began before that
/// stamp as stopped: a follow-up question the person asked in the same thread after pressing
/// stop (and before the first answer's run next appended: a model's pause, a tool call, a
/// takeover minutes later) is never answered; its stream is not even started.
#[tokio::test]
async fn a_follow_up_asked_after_a_stop_learnt_late_from_slack_is_answered() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let bot = TestBot::start(gated(gate.clone())).await;
    let slack = bot.slack().clone();
    let asked_at = std::sync::Mutex::new(String::new());
    let stop_and_ask = async {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        let thread = loop {
            if let Some(m) = slack
                .messages()
                .into_iter()
                .find(|m| m["streaming"] == true)
            {
                break m["thread_ts"].as_str().unwrap().to_string();
            }
            assert!(tokio::time::Instant::now() < deadline, "a stream");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        };
        // The person presses stop (Slack stops the stream and sends the event).
        let stopped = bot.stop_session(&thread).await;
        assert!(
            ["answered", "no_reply"].contains(&stopped.as_str()),
            "{stopped}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        // ... then asks a follow-up in the same thread.
        *asked_at.lock().unwrap() = now_ts();
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        // The first answer's model goes on: its next append hears stopped_by_user.
        gate.notify_one();
        thread
    };
    let (first, thread) = tokio::join!(bot.dm("first"), stop_and_ask);
    eprintln!("[F2] first: {first}");
    let ts = asked_at.lock().unwrap().clone();
    // The follow-up's delivery (processed after the first run ended; its first delivery may
    // as well have crashed after starting its stream: the retry then finds it "stopped").
    let outcome = bot
        .send(
            serde_json::json!({"type": "message", "channel_type": "im", "user": "U0USER",
            "text": "second", "channel": "D0TEST", "ts": ts, "thread_ts": thread,
            "event_ts": ts}),
        )
        .await;
    eprintln!("[F2] follow-up: {outcome}");
    let answered = parts_in(&bot.slack().messages(), "D0TEST", &thread)
        .iter()
        .any(|m| m["text"] == "second answer");
    assert!(
        answered,
        "the follow-up asked AFTER the stop was taken as stopped ({outcome}): never answered"
    );
}

/// An answer whose parts switch at once (`rotate_after` 1 ms): 300 characters, `gates[0]`,
/// one more word (the switch comes before it), `gates[1]`, the end.
fn switching(gates: Arc<[tokio::sync::Notify; 2]>) -> App {
    use slack_once::app::StreamOptions;
    App::new()
        .assistant_message(move |ctx: Ctx, q: MessageEvent| {
            let gates = gates.clone();
            async move {
                let (channel, thread) = (q.channel.clone(), q.thread().to_string());
                let options =
                    StreamOptions::new().rotate_after(std::time::Duration::from_millis(1));
                let mut stream = ctx.stream_with(&channel, &thread, None, options).await?;
                let a = "a".repeat(300);
                stream.append(&a).await;
                gates[0].notified().await;
                stream.append(" b").await; // the part is due: switched first
                gates[1].notified().await;
                stream.finish_answer(&format!("{a} b"), vec![]).await?;
                Ok(())
            }
        })
        .agent_session_stopped(|_ctx: Ctx, _stop: AgentSessionStopped| async move { Ok(()) })
}

/// The person presses stop while a part is due for its switch, and the switch runs
/// before `agent_session_stopped` is delivered (the event lags Slack's own stop). The
/// switch's `chat.stopStream` is answered `message_not_in_streaming_state` (Slack stopped the
/// stream), which the switch takes for an expiry; its flush had nothing buffered, so no
/// `stopped_by_user` was heard: it starts a NEW part after the person's stop (and
/// `chat.startStream` sets the session processing again). The end then reads the stop and
/// passes every step: the new part is left streaming, unmarked, the session processing.
#[tokio::test]
async fn a_stop_during_a_switch_starts_no_part_after_it() {
    let gates = Arc::new([tokio::sync::Notify::new(), tokio::sync::Notify::new()]);
    let bot = TestBot::start(switching(gates.clone())).await;
    let slack = bot.slack().clone();
    let press = async {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        let thread = loop {
            if let Some(m) = slack
                .messages()
                .into_iter()
                .find(|m| m["streaming"] == true)
            {
                break m["thread_ts"].as_str().unwrap().to_string();
            }
            assert!(tokio::time::Instant::now() < deadline, "a stream");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        };
        // Slack stops the stream at once; its event is on its way.
        let event = slack.with_workspace(|w| w.stop_session("D0TEST", &thread, "U0USER"));
        gates[0].notify_one();
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let _ = bot.send(event).await;
        gates[1].notify_one();
        thread
    };
    let (outcome, thread) = tokio::join!(bot.dm("stop me mid-switch"), press);
    eprintln!("[F3] outcome {outcome}");
    let starts = bot
        .slack()
        .calls()
        .iter()
        .filter(|(m, _)| m == "chat.startStream")
        .count();
    let parts = parts_in(&bot.slack().messages(), "D0TEST", &thread);
    let session = bot
        .slack()
        .with_workspace(|w| w.session("D0TEST", &thread))
        .unwrap_or_default();
    eprintln!("[F3] parts {parts:#?}\nsession {session}");
    assert!(
        starts == 1 && parts.iter().all(|p| p["streaming"] != true),
        "a part started after the person's stop ({starts} starts), left streaming: {parts:#?}"
    );
}

/// A workspace of another organisation: Slack refuses its user as a stream's recipient.
const OTHER_TEAM: &str = "T0OTHERORG";

/// An answer to a recipient Slack refuses (the refusal recorded: the answer is one post, made
/// at the end), then the session set active; the first run fails after it (an app's own
/// write failing once), so the event is tried again.
fn refused_then_active(runs: Arc<AtomicUsize>, thread: Arc<Mutex<String>>) -> App {
    App::new()
        .assistant_message(move |ctx: Ctx, q: MessageEvent| {
            let (runs, thread_out) = (runs.clone(), thread.clone());
            async move {
                let run = runs.fetch_add(1, Ordering::SeqCst);
                let (channel, thread) = (q.channel.clone(), q.thread().to_string());
                *thread_out.lock().unwrap() = thread.clone();
                let user = q.user.clone().unwrap_or_default();
                let mut stream = ctx
                    .stream(&channel, &thread, Some((user.as_str(), OTHER_TEAM)))
                    .await?;
                stream.append("The whole answer.").await;
                stream.finish_answer("The whole answer.", vec![]).await?;
                ctx.set_session_status(&channel, Some(&thread), SessionStatus::Active, None)
                    .await?;
                if run == 0 {
                    return Err("the app's own bookkeeping failed once".into());
                }
                Ok(())
            }
        })
        .agent_session_stopped(|_ctx: Ctx, _stop: AgentSessionStopped| async move { Ok(()) })
}

/// A refused recipient's answer is a post made by `end` (a step). A later run that sees a
/// stop passes the start with `pass_recorded`, which finds no `ts` in the recorded refusal:
/// `refused` stays false, `parts` empty, and `end` returns before passing the post's step.
/// Every step after the answer then lands one number early: the retry's
/// `agents.sessions.setStatus` meets the recorded `chat.postMessage` and the request ends
/// `nondeterministic_listener` (a failure that no retry can fix).
#[tokio::test]
async fn a_stop_after_a_refused_recipients_post_keeps_the_steps_numbered() {
    let runs = Arc::new(AtomicUsize::new(0));
    let thread = Arc::new(Mutex::new(String::new()));
    let ledger = Arc::new(slack_once::ledger::MemoryLedger::new());
    let bot = TestBot::start_with_ledger(
        refused_then_active(runs.clone(), thread.clone()),
        ledger.clone(),
    )
    .await;
    let ts = "1767225600.900001";
    let envelope = serde_json::json!({
        "type": "event_callback", "team_id": "T0TEST", "api_app_id": "A0TEST",
        "event_id": "EvB1QUESTION", "event_time": 1_767_225_600,
        "event": {"type": "message", "channel_type": "im", "user": "U0USER",
                  "text": "a question from afar", "channel": "D0TEST", "ts": ts, "event_ts": ts},
        "authorizations": [{"team_id": "T0TEST", "user_id": "U0BOT", "is_bot": true}]
    });
    let first = bot.send_envelope(envelope.clone()).await;
    eprintln!("[B1] first run: {first}");
    let posts = bot
        .slack()
        .calls()
        .iter()
        .filter(|(m, _)| m == "chat.postMessage")
        .count();
    assert_eq!(posts, 1, "the refused answer was posted whole");
    // The person presses stop (the session is processing in their eyes) before the retry.
    let thread = thread.lock().unwrap().clone();
    let stopped = bot.stop_session(&thread).await;
    eprintln!("[B1] stop: {stopped}");
    let again = bot.send_envelope(envelope).await;
    eprintln!("[B1] retry: {again}");
    for (id, status) in ledger.statuses() {
        eprintln!("[B1] {id:?}: {status:?} {:?}", ledger.journal(&id));
    }
    assert!(runs.load(Ordering::SeqCst) >= 2, "the listener ran again");
    assert!(
        ["answered", "recovered", "no_reply"].contains(&again.as_str()),
        "the retry after a stop ended {again}: the stopped run passed one step fewer than \
         the first run made (the refused answer's post), shifting every later step"
    );
}

// ================================================================ a token refused before the secret was updated
struct WithSecrets {
    slack: SlackStandin,
    client: aws_sdk_secretsmanager::Client,
    name: String,
    proxy: LedgerProxy,
    bot: BotProcess,
}

impl WithSecrets {
    async fn start(token: &str, refresh: &str) -> Self {
        let sqs = sqs_endpoint(); // moto serves Secrets Manager too
        let client = secrets_client(&sqs);
        let name = format!("slack-once/rt-{}", uuid::Uuid::new_v4().simple());
        client
            .create_secret()
            .name(&name)
            .secret_string(
                serde_json::json!({"signing_secret": "signing", "bot_token": token}).to_string(),
            )
            .send()
            .await
            .expect("create the secret on the Secrets Manager stand-in");
        let proxy = LedgerProxy::start(&sqs).await; // counts the reads
        let slack = SlackStandin::start().await;
        slack.require_token(token);
        let vars = vec![
            ("SLACK_SECRETS_ARN", name.clone()),
            ("SLACK_SECRETS_REFRESH_SECONDS", refresh.to_string()),
            ("AWS_ENDPOINT_URL_SECRETS_MANAGER", proxy.url.clone()),
            ("AWS_REGION", "us-east-1".to_string()),
            ("AWS_ACCESS_KEY_ID", "test".to_string()),
            ("AWS_SECRET_ACCESS_KEY", "test".to_string()),
            ("AWS_CONFIG_FILE", "/dev/null".to_string()),
            ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null".to_string()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
            ("SLACK_API_URL", slack.base_url.clone()),
        ];
        let bot = BotProcess::spawn(&vars);
        Self {
            slack,
            client,
            name,
            proxy,
            bot,
        }
    }

    async fn put_token(&self, token: &str) {
        self.client
            .put_secret_value()
            .secret_id(&self.name)
            .secret_string(
                serde_json::json!({"signing_secret": "signing", "bot_token": token}).to_string(),
            )
            .send()
            .await
            .unwrap();
    }

    async fn send(&self, body: &str) -> Answer {
        let headers = signed_headers("signing", now_unix(), body.as_bytes());
        HttpClient::default()
            .request("POST", &self.bot.url(), &headers, body.as_bytes().to_vec())
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the SQS server and the built binary"]
async fn a_token_refused_before_the_secret_was_updated_releases_the_event_and_the_next_delivery_uses_the_new_one()
 {
    // The app was reinstalled (or its token revoked, or rotation expired it): Slack takes only
    // the new token, and the operator has not put it into the secret yet.
    let s = WithSecrets::start("xoxb-old", "30").await;
    s.slack.require_token("xoxb-new");
    let body = app_mention("EvRtTokenGap1", "x");
    let first = s.send(&body).await;
    assert_eq!(
        first.status,
        StatusCode::BAD_GATEWAY,
        "refused while the secret still holds the old token: released, not ended: {}",
        first.body
    );
    // The operator puts the new token into the secret; Slack's retry meets it.
    s.put_token("xoxb-new").await;
    let retry = s.send(&body).await;
    let mut outcomes = vec![retry.outcome()];
    for n in 2..=3 {
        let answer = s.send(&app_mention(&format!("EvRtTokenGap{n}"), "x")).await;
        outcomes.push(answer.outcome());
    }
    let reads = s.proxy.seen().len() - 1;
    println!("outcomes after the secret was fixed: {outcomes:?}; reads since start: {reads}");
    assert_eq!(
        outcomes,
        ["answered", "answered", "answered"],
        "the retry read the secret again and used the new token; reads since start: {reads}\n{}",
        s.bot.log()
    );
    assert_eq!(
        reads, 2,
        "one read per refusal, none after the new token is cached"
    );
    assert_eq!(s.slack.posted().len(), 3);
}

// ================================================================ listeners that only one event of a message selects

#[tokio::test]
async fn a_listener_only_the_message_event_selects_still_runs_once_when_the_app_mention_arrives_first()
 {
    let bot = App::new()
        .app_mention(|ctx: Ctx, _m: AppMention| async move {
            ctx.reply("On it.").await?;
            Ok(())
        })
        // "Public channels only": Slack's message.channels events say so; app_mention events
        // carry no channel_type.
        .message_where(
            |m: &MessageEvent| m.channel_type.as_deref() == Some("channel"),
            |ctx: Ctx, m: MessageEvent| async move {
                ctx.react(&m.channel, &m.ts, "eyes").await?;
                Ok(())
            },
        );
    let app = spawn_bot(bot).await;
    let ts = "1600002000.000100";
    let text = format!("<@{BOT_USER}> deploy please");
    let event = |kind: &str, id: &str| {
        let mut event = serde_json::json!({
            "type": kind, "user": "U0001", "text": text, "ts": ts, "channel": "C0001",
            "event_ts": ts, "client_msg_id": "c0ffee00-0000-4000-8000-000000000004"
        });
        if kind == "message" {
            event["channel_type"] = "channel".into();
        }
        serde_json::json!({
            "token": "unused", "team_id": TEAM, "api_app_id": APP_ID, "type": "event_callback",
            "event_id": id, "event_time": 1_700_000_000, "event": event,
            "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": true}]
        })
        .to_string()
    };
    let mention = app.send(&event("app_mention", "EvRtFormM"), None).await;
    let message = app.send(&event("message", "EvRtFormC"), None).await;
    println!("app_mention: {}; message: {}", mention.body, message.body);
    let replies = app
        .slack
        .posted()
        .iter()
        .filter(|p| p.body["text"] == "On it.")
        .count();
    let eyes = app
        .slack
        .reactions()
        .iter()
        .filter(|(_, t, n)| t == ts && n == "eyes")
        .count();
    assert_eq!(
        (replies, eyes),
        (1, 1),
        "the message's claim ran the listeners its first event selected (the app_mention has \
         no channel_type); the message.channels event ran the other one under a claim of its own"
    );
    // Copies of both events change nothing.
    for (kind, id) in [("app_mention", "EvRtFormM"), ("message", "EvRtFormC")] {
        let copy = app.send(&event(kind, id), Some(1)).await;
        assert_eq!(copy.outcome(), "duplicate", "{kind}: {}", copy.body);
    }
    assert_eq!(app.slack.reactions().len(), 1);
    assert_eq!(app.slack.posted().len(), 1);
}
