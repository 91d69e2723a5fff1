//! The approval step (examples/approval.rs) as a new user runs it: the example's binary, two
//! processes on one table in DynamoDB Local (or an ingress and workers on the SQS server), and
//! `slack-once standin` as Slack (executions, their tokens, their
//! completions). Slack's retries of `function_executed` send one DM; two approvers at once and
//! a double click complete the step once, with the first decision; a rejection through the
//! modal completes with its reason; a click after the workflow stopped completes nothing; a
//! worker killed between a click's claim and its completion still gives exactly one.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;

pub(crate) const APPROVER: &str = "U0APPROVER";
pub(crate) const DM: &str = "DU0APPROVER";

pub(crate) fn inputs() -> Value {
    json!({"approver": APPROVER, "summary": "Ship the release"})
}

pub(crate) fn vars(
    standin: &StandinProcess,
    endpoint: &str,
    table: &str,
) -> Vec<(&'static str, String)> {
    let mut vars = dynamodb_env(endpoint);
    vars.extend([
        ("SLACK_BOT_TOKEN", "xoxb-installation".to_string()),
        ("SLACK_API_URL", standin.base_url.clone()),
        ("DEDUP_TABLE", table.to_string()),
    ]);
    vars
}

/// A workflow reaches the step: the stand-in starts an execution; its `function_executed`.
pub(crate) async fn start_step(standin: &StandinProcess, n: u32) -> (String, String) {
    let e = standin
        .post(
            "execution",
            json!({"callback_id": "request_approval", "inputs": inputs()}),
        )
        .await;
    let id = e["function_execution_id"].as_str().unwrap().to_string();
    let body = json!({
        "token": "unused", "team_id": "T0TEST", "api_app_id": "A0TEST",
        "type": "event_callback", "event_id": format!("EvStep{n}"), "event_time": now_unix(),
        "event": {
            "type": "function_executed",
            "function": {"id": "Fn0APPROVAL", "callback_id": "request_approval",
                         "title": "Request approval", "type": "app", "app_id": "A0TEST",
                         "input_parameters": [], "output_parameters": []},
            "inputs": inputs(),
            "function_execution_id": id,
            "workflow_execution_id": e["workflow_execution_id"],
            "event_ts": format!("{}.000100", now_unix()),
            "bot_access_token": e["bot_access_token"],
        },
        "authorizations": [{"team_id": "T0TEST", "user_id": "U0BOT", "is_bot": true}]
    });
    (id, body.to_string())
}

pub(crate) async fn execution(standin: &StandinProcess, id: &str) -> Value {
    standin.state().await["executions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["function_execution_id"] == id)
        .cloned()
        .expect("the execution")
}

pub(crate) async fn dm(standin: &StandinProcess) -> Vec<Value> {
    standin.state().await["messages"][DM]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// `user`'s click on the DM's button `action_id`, as Slack sends it in the step (its
/// `function_data`, a new token of the execution, the response_url).
async fn click(standin: &StandinProcess, id: &str, user: &str, action_id: &str, n: u32) -> String {
    let message = dm(standin).await.remove(0);
    click_on(standin, &message, id, user, action_id, n).await
}

/// `user`'s click on `message`'s button `action_id` in the execution `id`.
pub(crate) async fn click_on(
    standin: &StandinProcess,
    message: &Value,
    id: &str,
    user: &str,
    action_id: &str,
    n: u32,
) -> String {
    let ts = message["ts"].as_str().unwrap().to_string();
    let token = standin
        .post("execution/token", json!({"function_execution_id": id}))
        .await["bot_access_token"]
        .clone();
    let payload = json!({
        "type": "block_actions",
        "team": {"id": "T0TEST"}, "user": {"id": user, "team_id": "T0TEST"},
        "api_app_id": "A0TEST",
        "container": {"type": "message", "message_ts": ts, "channel_id": DM},
        "channel": {"id": DM}, "message": message,
        "actions": [{"type": "button", "action_id": action_id, "block_id": "approval",
                     "value": "x", "action_ts": format!("{}.{:06}", now_unix(), n)}],
        "trigger_id": slack_once::testing::Workspace::trigger_id(),
        "response_url": format!("{}/actions/T0TEST/{DM}/{ts}/{n}", standin.origin()),
        "bot_access_token": token,
        "function_data": {"execution_id": id, "function": {"callback_id": "request_approval"},
                          "inputs": inputs()},
        "interactivity": {"interactor": {"id": user, "secret": "s"},
                          "interactivity_pointer": slack_once::testing::Workspace::trigger_id()},
    });
    form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn the_approval_step_against_slack_once_standin_completes_once_whatever_arrives() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let standin = StandinProcess::start().await;
    let vars = vars(&standin, &endpoint, &table);
    let a = BotProcess::spawn_example("approval", &[], &vars);
    let b = BotProcess::spawn_example("approval", &[], &vars);
    let http = HttpClient::default();

    // function_executed, and Slack's three retries, to either process: one DM.
    let (id, body) = start_step(&standin, 1).await;
    let first = deliver(&http, &a.url(), &body, None).await;
    assert_eq!(first.outcome(), "answered", "{}\n{}", first.body, a.log());
    for (n, bot) in [(1, &b), (2, &a), (3, &b)] {
        let retry = deliver(&http, &bot.url(), &body, Some(n)).await;
        assert_eq!(retry.outcome(), "duplicate", "retry {n}: {}", retry.body);
    }
    let dms = dm(&standin).await;
    assert_eq!(dms.len(), 1, "one DM: {dms:?}");
    assert_eq!(dms[0]["bot_id"], "B0TEST", "the app's bot posted it");
    assert_eq!(execution(&standin, &id).await["state"], "running");

    // Two approvers at once, one of them twice: one completion, the first decision.
    let (alice, bob, alice2) = (
        click(&standin, &id, "U0ALICE", "approval_approve", 11).await,
        click(&standin, &id, "U0BOB", "approval_approve", 12).await,
        click(&standin, &id, "U0ALICE", "approval_approve", 13).await,
    );
    let (url_a, url_b) = (a.url(), b.url());
    let (x, y, z) = tokio::join!(
        deliver_form(&http, &url_a, &alice, None),
        deliver_form(&http, &url_b, &bob, None),
        deliver_form(&http, &url_b, &alice2, None),
    );
    for answer in [&x, &y, &z] {
        assert_eq!(answer.status, http::StatusCode::OK, "{}", answer.body);
    }
    let e = execution(&standin, &id).await;
    assert_eq!(
        e["state"],
        "completed",
        "{e}\nA:\n{}\nB:\n{}",
        a.log(),
        b.log()
    );
    assert_eq!(e["completions"], 1, "{e}");
    let decider = e["outputs"]["decided_by"].as_str().unwrap().to_string();
    assert!(["U0ALICE", "U0BOB"].contains(&decider.as_str()), "{e}");
    let shown = dm(&standin).await.remove(0);
    assert!(
        shown
            .to_string()
            .contains(&format!("Approved by <@{decider}>")),
        "the DM names who decided: {shown}"
    );

    // A rejection through the modal: its own execution.
    let (rid, body) = start_step(&standin, 2).await;
    assert_eq!(
        deliver(&http, &b.url(), &body, None).await.outcome(),
        "answered"
    );
    let reject = click(&standin, &rid, APPROVER, "approval_reject", 21).await;
    let opened = deliver_form(&http, &a.url(), &reject, None).await;
    assert_eq!(opened.status, http::StatusCode::OK, "{}", opened.body);
    let views = standin.state().await["views"].as_array().cloned().unwrap();
    let view = views
        .iter()
        .find(|v| v["callback_id"] == "approval_reject_view")
        .expect("the modal opened")
        .clone();
    let token = standin
        .post("execution/token", json!({"function_execution_id": rid}))
        .await["bot_access_token"]
        .clone();
    let payload = json!({
        "type": "view_submission", "team": {"id": "T0TEST"},
        "user": {"id": APPROVER, "team_id": "T0TEST"}, "api_app_id": "A0TEST",
        "trigger_id": slack_once::testing::Workspace::trigger_id(),
        "view": {"id": view["id"], "callback_id": "approval_reject_view", "team_id": "T0TEST",
                 "hash": "h1", "private_metadata": view["private_metadata"], "app_id": "A0TEST",
                 "state": {"values": {"reason": {"reason_text": {"type": "plain_text_input",
                                                                  "value": "Not this week"}}}}},
        "bot_access_token": token,
        "function_data": {"execution_id": rid, "function": {"callback_id": "request_approval"},
                          "inputs": inputs()},
    });
    let form = form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish();
    let submitted = deliver_form(&http, &b.url(), &form, None).await;
    assert_eq!(submitted.status, http::StatusCode::OK, "{}", submitted.body);
    let again = deliver_form(&http, &a.url(), &form, None).await;
    assert_eq!(again.status, http::StatusCode::OK);
    let e = execution(&standin, &rid).await;
    assert_eq!(
        (e["state"].as_str(), e["completions"].as_u64()),
        (Some("completed"), Some(1)),
        "{e}\n{}",
        b.log()
    );
    assert_eq!(
        e["outputs"],
        json!({"decision": "rejected", "decided_by": APPROVER, "reason": "Not this week"})
    );

    // A click after the workflow stopped: nothing completed, and the DM says so.
    let (eid, body) = start_step(&standin, 3).await;
    deliver(&http, &a.url(), &body, None).await;
    standin
        .post("execution/end", json!({"function_execution_id": eid}))
        .await;
    let late = click(&standin, &eid, APPROVER, "approval_approve", 31).await;
    let answer = deliver_form(&http, &b.url(), &late, None).await;
    assert_eq!(answer.status, http::StatusCode::OK, "{}", answer.body);
    let e = execution(&standin, &eid).await;
    assert_eq!(
        (e["state"].as_str(), e["completions"].as_u64()),
        (Some("ended"), Some(0))
    );
    // The stand-in's calls: never a token in them, and every completion with the execution's.
    let calls = standin.state().await["calls"].as_array().cloned().unwrap();
    assert!(
        !serde_json::to_string(&calls).unwrap().contains("xwfp-"),
        "no token in the stand-in's record of calls"
    );
    for log in [a.log(), b.log()] {
        assert!(!log.contains("xwfp-"), "a step's token is in a log:\n{log}");
    }
}

/// Deferred mode: the ingress acknowledges the click at once and a worker completes it. The
/// worker's completion reaches Slack and its answer never comes back (the stand-in applies it
/// and hangs); the worker is killed there, after the click's claim and before it knew. The
/// queue's redelivery to another worker settles it from the journal: exactly one completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn a_worker_killed_between_a_clicks_claim_and_its_completion_still_completes_once() {
    killed_at_the_completion("post_then_hang").await;
}

/// As above, the completion never reaching Slack (the stand-in hangs without applying it):
/// the redelivery makes it, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn a_worker_killed_before_its_completion_reached_slack_completes_once_on_redelivery() {
    killed_at_the_completion("hang").await;
}

async fn killed_at_the_completion(behaviour: &str) {
    let applied = behaviour == "post_then_hang";
    let sqs = sqs_endpoint();
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let queue = TestQueue::create(&sqs, 5).await;
    let standin = StandinProcess::start().await;
    let mut worker_vars = vars(&standin, &endpoint, &table);
    worker_vars.extend([
        ("AWS_ENDPOINT_URL_SQS", sqs.clone()),
        ("WORK_QUEUE_URL", queue.url.clone()),
        ("DEDUP_LEASE_SECONDS", "3".to_string()),
        ("WORK_QUEUE_MAX_RECEIVES", "5".to_string()),
    ]);
    // The ingress: the queue, and Slack for the views it opens before its acknowledgement.
    let ingress = BotProcess::spawn_example("approval", &[], &worker_vars);
    let mut first = BotProcess::spawn_example("approval", &["worker"], &worker_vars);
    let http = HttpClient::default();
    let (id, body) = start_step(&standin, 1).await;
    assert_eq!(
        deliver(&http, &ingress.url(), &body, None).await.outcome(),
        "queued"
    );
    assert!(
        eventually_async(Duration::from_secs(20), || async {
            dm(&standin).await.len() == 1
        })
        .await,
        "the worker sent the DM:\n{}",
        first.log()
    );
    standin
        .post(
            "script",
            json!({"method": "functions.completeSuccess", "behaviours": ["post_then_hang"]}),
        )
        .await;
    let approve = click(&standin, &id, APPROVER, "approval_approve", 5).await;
    let acked = deliver_form(&http, &ingress.url(), &approve, None).await;
    assert_eq!(acked.status, http::StatusCode::OK, "{}", acked.body);
    if applied {
        // Slack applied it, and its answer never comes back.
        assert!(
            eventually_async(Duration::from_secs(20), || async {
                execution(&standin, &id).await["state"] == "completed"
            })
            .await,
            "the completion reached Slack:\n{}",
            first.log()
        );
    } else {
        // The call hangs, unapplied: the worker waits for it until its deadline, and is
        // killed meanwhile (or, past its deadline, released the click to the queue, whose
        // redelivery made the completion: once either way).
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    first.kill();
    let second = BotProcess::spawn_example("approval", &["worker"], &worker_vars);
    let key_done = || async {
        let e = execution(&standin, &id).await;
        // Settled: the redelivered click found the completion made (Slack answered its
        // announced repeat `execution_not_in_running_state`), or made it, and finished.
        e["state"] == "completed" && queue.depth(&queue.url).await == 0
    };
    assert!(
        eventually_async(Duration::from_secs(40), key_done).await,
        "the redelivery settled the click:\n{}\n{}",
        serde_json::to_string(&execution(&standin, &id).await).unwrap(),
        second.log()
    );
    let e = execution(&standin, &id).await;
    assert_eq!(e["completions"], 1, "exactly one completion: {e}");
    // Applied and unanswered: the redelivery's announced repeat answered not-running, taken
    // as made. Never applied: a later run made it (the first worker's own, past its deadline,
    // or the redelivery's), and a run after that one, if the worker died before finishing,
    // repeated it once, answered not-running: never a second completion.
    let refusals = e["refusals"].as_array().unwrap().clone();
    match applied {
        true => assert_eq!(
            refusals,
            vec![json!("execution_not_in_running_state")],
            "{e}"
        ),
        false => assert!(
            refusals.len() <= 1
                && refusals
                    .iter()
                    .all(|r| r == "execution_not_in_running_state"),
            "{e}"
        ),
    }
    assert_eq!(e["outputs"]["decided_by"], APPROVER);
    let shown = dm(&standin).await.remove(0);
    assert!(
        shown.to_string().contains("Approved by <@U0APPROVER>"),
        "{shown}"
    );
}

pub(crate) async fn script(standin: &StandinProcess, method: &str, behaviours: Value) {
    standin
        .post(
            "script",
            json!({"method": method, "behaviours": behaviours}),
        )
        .await;
}

/// The step's DM (chat.postMessage to the approver's USER id) whose answer is lost: Slack's
/// retry of function_executed must find it (one DM) or post it (not applied): never two, never
/// none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_steps_dm_whose_answer_was_lost_is_posted_once() {
    for (n, behaviour) in [(1u32, "post_then_hang"), (2, "hang")] {
        let endpoint = dynamodb_endpoint();
        let (table, _) = fresh_table(&endpoint).await;
        let standin = StandinProcess::start().await;
        let vars = vars(&standin, &endpoint, &table);
        let a = BotProcess::spawn_example("approval", &[], &vars);
        let b = BotProcess::spawn_example("approval", &[], &vars);
        let http = HttpClient::default();
        let (id, body) = start_step(&standin, 500 + n).await;
        script(&standin, "chat.postMessage", json!([behaviour])).await;
        let first = deliver(&http, &a.url(), &body, None).await;
        eprintln!("[F5 {behaviour}] first: {} {}", first.status, first.body);
        let mut outcomes = Vec::new();
        for retry in 1..=3u32 {
            let r = deliver(&http, &b.url(), &body, Some(retry)).await;
            eprintln!("[F5 {behaviour}] retry {retry}: {} {}", r.status, r.body);
            outcomes.push(r.outcome());
            if dm(&standin).await.len() == 1 && r.status.is_success() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let e = execution(&standin, &id).await;
        let d = dm(&standin).await;
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
