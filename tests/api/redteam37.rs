//! What a production review of Workflow Builder steps (issue 37) found, each test failing
//! before its fix (named after the defect it showed), against the approval example's binary,
//! DynamoDB Local, the SQS server and `slack-once standin`'s faults: a click whose completion
//! failed transiently (a lost answer, `ratelimited`, an expired token on a redelivery) left the
//! DM without buttons and the step running for good; a decider run again after another click
//! sent its decision reported the step ended; a dead decider's decision sent after the
//! workflow stopped was taken for completed; Reject after a dead decider never sent its
//! decision; a step declared by its bare callback id could not complete with outputs; a
//! step's token reached listeners in `raw`. The step's DM whose answer was lost was sound.

use std::time::Duration;

use serde_json::{Value, json};
use slack_once::app::function::Execution;
use slack_once::app::{App, BlockAction, Ctx};
use slack_once::testing::TestBot;

use crate::helpers::*;

use crate::steps_processes::{APPROVER, click_on, dm as dms, execution, start_step, vars};

/// The DM of execution number `index` (in posting order).
async fn dm_at(python: &StandinProcess, index: usize) -> Value {
    dms(python).await.remove(index)
}

async fn script(python: &StandinProcess, method: &str, behaviours: Value) {
    python
        .post(
            "script",
            json!({"method": method, "behaviours": behaviours}),
        )
        .await;
}

fn has_buttons(message: &Value) -> bool {
    message.to_string().contains("approval_approve")
}

// ------------------------------------------------------------------------------------- F1

/// F1. Synchronous mode: a click's completion that fails in a way a retry would fix (Slack's
/// answer lost, a 429) after the example has already replaced the DM (buttons gone, "Approved
/// by …"). Slack never retries a block_actions, the claim is released, and no click can come
/// any more: the step stays running for ever while the DM says it was approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt37_f1_sync_click_whose_completion_fails_transiently_is_never_completed() {
    stranded(1, json!(["hang"])).await;
}

/// F1, the same with Slack answering the completion `ratelimited` (Tier 3) for longer than
/// the click's 2.5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt37_f1b_sync_click_whose_completion_is_rate_limited_is_never_completed() {
    let many: Vec<&str> = std::iter::repeat_n("fail:ratelimited", 40).collect();
    stranded(2, json!(many)).await;
}

async fn stranded(n: u32, behaviours: Value) {
    {
        let endpoint = dynamodb_endpoint();
        let (table, _) = fresh_table(&endpoint).await;
        let python = StandinProcess::start().await;
        let vars = vars(&python, &endpoint, &table);
        let a = BotProcess::spawn_example("approval", &[], &vars);
        let http = HttpClient::default();
        let (id, body) = start_step(&python, 100 + n).await;
        assert_eq!(
            deliver(&http, &a.url(), &body, None).await.outcome(),
            "answered"
        );
        script(&python, "functions.completeSuccess", behaviours.clone()).await;
        let message = dm_at(&python, 0).await;
        let alice = click_on(&python, &message, &id, "U0ALICE", "approval_approve", 1).await;
        let answer = deliver_form(&http, &a.url(), &alice, None).await;
        eprintln!(
            "[F1 {behaviours}] the click's answer: {} {}",
            answer.status, answer.body
        );
        tokio::time::sleep(Duration::from_secs(4)).await;
        let e = execution(&python, &id).await;
        let shown = dm_at(&python, 0).await;
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

// ------------------------------------------------------------------------------------- F2

/// F2. The decider's request runs again (deferred mode's redelivery; here the same form sent
/// again) after another click, past the decider's lease, completed the step WITH THE DECIDER'S
/// DECISION. Its own completion step was never announced, Slack answers not-running (or its
/// token is revoked): `Completion::Ended`, and the example replaces the DM with "ended before a
/// decision" although the workflow went on with that very decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt37_f2_decider_run_again_after_its_decision_was_sent_for_it_reports_ended() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let python = StandinProcess::start().await;
    let vars = vars(&python, &endpoint, &table);
    let a = BotProcess::spawn_example("approval", &[], &vars);
    let b = BotProcess::spawn_example("approval", &[], &vars);
    let http = HttpClient::default();
    let (id, body) = start_step(&python, 200).await;
    assert_eq!(
        deliver(&http, &a.url(), &body, None).await.outcome(),
        "answered"
    );
    let message = dm_at(&python, 0).await;
    // Alice's click decides, then its chat.update never answers: the request dies after its
    // decision (deadline), released.
    script(&python, "chat.update", json!(["hang"])).await;
    let alice = click_on(&python, &message, &id, "U0ALICE", "approval_approve", 1).await;
    let first = deliver_form(&http, &a.url(), &alice, None).await;
    eprintln!("[F2] alice's first run: {} {}", first.status, first.body);
    tokio::time::sleep(Duration::from_millis(800)).await;
    // Bob, past Alice's lease: sends Alice's decision for her.
    let bob = click_on(&python, &message, &id, "U0BOB", "approval_approve", 2).await;
    let second = deliver_form(&http, &b.url(), &bob, None).await;
    eprintln!("[F2] bob: {} {}", second.status, second.body);
    let e = execution(&python, &id).await;
    assert_eq!(e["state"], "completed", "{e}\n{}", b.log());
    assert_eq!(e["outputs"]["decided_by"], "U0ALICE", "{e}");
    let shown = dm_at(&python, 0).await;
    assert!(
        shown.to_string().contains("Approved by <@U0ALICE>"),
        "{shown}"
    );
    // Alice's request again (the queue's redelivery of it).
    let again = deliver_form(&http, &a.url(), &alice, None).await;
    eprintln!("[F2] alice again: {} {}", again.status, again.body);
    let shown = dm_at(&python, 0).await;
    let e = execution(&python, &id).await;
    eprintln!("[F2] execution: {e}\nDM: {shown}");
    assert!(
        shown.to_string().contains("Approved by <@U0ALICE>"),
        "the workflow went on with Alice's approval, and the DM says: {shown}\nexecution: {e}\n\
         A:\n{}",
        a.log()
    );
}

// ------------------------------------------------------------------------------------- F3

/// F3. A decider died after its decision; the workflow is then stopped; a later click sends the
/// dead decider's decision with `announced_elsewhere`, Slack answers not-running, and that is
/// taken as the decision's completion: the record is closed `completed`, the clicker is told
/// "Decided already: Approved by …" though nothing was ever completed (expected: Ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt37_f3_workflow_stopped_after_a_dead_deciders_decision_is_reported_decided() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let python = StandinProcess::start().await;
    let vars = vars(&python, &endpoint, &table);
    let a = BotProcess::spawn_example("approval", &[], &vars);
    let http = HttpClient::default();
    let (id, body) = start_step(&python, 300).await;
    assert_eq!(
        deliver(&http, &a.url(), &body, None).await.outcome(),
        "answered"
    );
    let message = dm_at(&python, 0).await;
    script(&python, "chat.update", json!(["hang"])).await;
    let alice = click_on(&python, &message, &id, "U0ALICE", "approval_approve", 1).await;
    deliver_form(&http, &a.url(), &alice, None).await;
    python
        .post("execution/end", json!({"function_execution_id": id}))
        .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let bob = click_on(&python, &message, &id, "U0BOB", "approval_approve", 2).await;
    deliver_form(&http, &a.url(), &bob, None).await;
    let state = python.state().await;
    let e = execution(&python, &id).await;
    eprintln!("[F3] execution: {e}\nephemerals: {}", state["ephemerals"]);
    assert_eq!(e["completions"], 0, "{e}");
    let told = state["ephemerals"].to_string() + &dm_at(&python, 0).await.to_string();
    assert!(
        !told.contains("Decided already"),
        "the workflow was stopped and never completed, and Bob is told: {told}\nlog:\n{}",
        a.log()
    );
}

// ------------------------------------------------------------------------------------- F4

/// F4. A decider died after its decision (its lease over); the next click is Reject: the
/// example shows the dead decider's decision (the buttons go) and returns without sending it.
/// Nothing is left to click; the step runs for ever, the DM saying it was approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt37_f4_reject_after_a_dead_deciders_decision_never_sends_it() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let python = StandinProcess::start().await;
    let vars = vars(&python, &endpoint, &table);
    let a = BotProcess::spawn_example("approval", &[], &vars);
    let http = HttpClient::default();
    let (id, body) = start_step(&python, 400).await;
    assert_eq!(
        deliver(&http, &a.url(), &body, None).await.outcome(),
        "answered"
    );
    let message = dm_at(&python, 0).await;
    script(&python, "chat.update", json!(["hang"])).await;
    let alice = click_on(&python, &message, &id, "U0ALICE", "approval_approve", 1).await;
    deliver_form(&http, &a.url(), &alice, None).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let bob = click_on(&python, &message, &id, "U0BOB", "approval_reject", 2).await;
    deliver_form(&http, &a.url(), &bob, None).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let e = execution(&python, &id).await;
    let shown = dm_at(&python, 0).await;
    eprintln!("[F4] execution: {e}\nDM: {shown}");
    assert!(
        e["state"] == "completed" || has_buttons(&shown),
        "the DM shows a decision without buttons and the step still runs: {e}\n{shown}"
    );
}

// ------------------------------------------------------------------------------------- F5

/// F5. The step's DM (chat.postMessage to the approver's USER id) whose answer is lost: Slack's
/// retry of function_executed must find it (one DM) or post it (not applied): never two, never
/// none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt37_f5_the_steps_dm_whose_answer_was_lost() {
    for (n, behaviour) in [(1u32, "post_then_hang"), (2, "hang")] {
        let endpoint = dynamodb_endpoint();
        let (table, _) = fresh_table(&endpoint).await;
        let python = StandinProcess::start().await;
        let vars = vars(&python, &endpoint, &table);
        let a = BotProcess::spawn_example("approval", &[], &vars);
        let b = BotProcess::spawn_example("approval", &[], &vars);
        let http = HttpClient::default();
        let (id, body) = start_step(&python, 500 + n).await;
        script(&python, "chat.postMessage", json!([behaviour])).await;
        let first = deliver(&http, &a.url(), &body, None).await;
        eprintln!("[F5 {behaviour}] first: {} {}", first.status, first.body);
        let mut outcomes = Vec::new();
        for retry in 1..=3u32 {
            let r = deliver(&http, &b.url(), &body, Some(retry)).await;
            eprintln!("[F5 {behaviour}] retry {retry}: {} {}", r.status, r.body);
            outcomes.push(r.outcome());
            if dms(&python).await.len() == 1 && r.status.is_success() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let e = execution(&python, &id).await;
        let d = dms(&python).await;
        eprintln!(
            "[F5 {behaviour}] DMs: {}  execution: {e}\nB:\n{}",
            d.len(),
            b.log()
        );
        assert_eq!(
            d.len(),
            1,
            "[{behaviour}] one DM to the approver (retries: {outcomes:?}); execution {e}\nB:\n{}",
            b.log()
        );
    }
}

// ------------------------------------------------------------------------------------- F6

/// F6. A step declared by its bare callback id ("a bare &str declares none": outputs are not
/// checked, per `impl From<&str> for Function`) cannot complete with any output at all.
#[tokio::test]
async fn rt37_f6_a_step_declared_by_its_bare_callback_id_completes_with_outputs() {
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

// ------------------------------------------------------------------------------------- F7

/// F7. The step's token reaches the listener in `raw` (BlockAction, Event): any `?click` an
/// author logs leaks it ("the token is never logged").
#[tokio::test]
async fn rt37_f7_the_execution_token_is_handed_to_listeners_in_raw() {
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

// ------------------------------------------------------------------------------------- F1c

/// F1 in deferred mode: the worker's completion of a click is lost (not applied); the queue
/// redelivers the click after the visibility timeout (= DEDUP_LEASE_SECONDS, up to 900 s),
/// by which time the click's token (15 min; scaled here to 2 s) has expired: the redelivery's
/// completion is refused for good (`token_expired`), the click ends failed, and the DM already
/// says "Approved by …" with no buttons left: the step runs for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt37_f1c_deferred_redelivery_after_the_clicks_token_expired_strands_the_step() {
    let sqs = sqs_endpoint();
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let queue = TestQueue::create(&sqs, 5).await;
    let python = StandinProcess::start_with(&["--workflow-token-seconds", "2"]).await;
    let mut worker_vars = vars(&python, &endpoint, &table);
    worker_vars.extend([
        ("AWS_ENDPOINT_URL_SQS", sqs.clone()),
        ("WORK_QUEUE_URL", queue.url.clone()),
        ("DEDUP_LEASE_SECONDS", "3".to_string()),
        ("WORK_QUEUE_MAX_RECEIVES", "5".to_string()),
    ]);
    let ingress = BotProcess::spawn_example("approval", &[], &worker_vars);
    let worker = BotProcess::spawn_example("approval", &["worker"], &worker_vars);
    let http = HttpClient::default();
    let (id, body) = start_step(&python, 700).await;
    assert_eq!(
        deliver(&http, &ingress.url(), &body, None).await.outcome(),
        "queued"
    );
    assert!(
        eventually_async(Duration::from_secs(20), || async {
            dms(&python).await.len() == 1
        })
        .await,
        "the DM:\n{}",
        worker.log()
    );
    script(&python, "functions.completeSuccess", json!(["hang"])).await;
    let message = dm_at(&python, 0).await;
    let approve = click_on(&python, &message, &id, APPROVER, "approval_approve", 5).await;
    let acked = deliver_form(&http, &ingress.url(), &approve, None).await;
    assert_eq!(acked.status, http::StatusCode::OK, "{}", acked.body);
    let settled = || async { queue.depth(&queue.url).await == 0 };
    let _ = eventually_async(Duration::from_secs(40), settled).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let e = execution(&python, &id).await;
    let shown = dm_at(&python, 0).await;
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
