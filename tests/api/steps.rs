//! Workflow Builder steps: the approval example's step run through `TestBot` and
//! `FakeSlack` (each execution running → completed, failed or ended; its tokens revoked at its
//! end): one DM however often `function_executed` comes, one completion however many clicks,
//! the first decision kept, a click after the end completing nothing, every call for an
//! execution made with that execution's own token. The same against `slack-once standin`, the
//! real binaries, DynamoDB Local and the SQS server are in `steps_processes`.

use serde_json::{Value, json};
use slack_once::app::function::{Completion, Execution, Function, types};
use slack_once::app::{App, BlockAction, Ctx};
use slack_once::testing::TestBot;

#[allow(dead_code)]
#[path = "../../examples/approval.rs"]
mod example;

const APPROVER: &str = "U0APPROVER";

fn inputs() -> Value {
    json!({"approver": APPROVER, "summary": "Ship the release"})
}

/// The DM the step posted to the approver.
fn dm(bot: &TestBot) -> Vec<Value> {
    bot.slack()
        .messages()
        .into_iter()
        .filter(|m| m["channel"] == format!("D{APPROVER}"))
        .collect()
}

fn execution(bot: &TestBot, id: &str) -> Value {
    bot.slack()
        .executions()
        .into_iter()
        .find(|e| e["function_execution_id"] == id)
        .expect("the execution exists")
}

#[tokio::test]
async fn function_executed_and_its_retries_send_one_dm_and_leave_the_step_open() {
    let bot = TestBot::start(example::app()).await;
    let (outcome, ex) = bot.run_step(example::CALLBACK_ID, inputs()).await;
    assert_eq!(outcome, "answered");
    for n in 1..=3 {
        assert_eq!(bot.retry(n).await, "duplicate", "Slack's retry {n}");
    }
    let dms = dm(&bot);
    assert_eq!(dms.len(), 1, "{dms:?}");
    assert!(
        dms[0]["text"]
            .as_str()
            .unwrap()
            .contains("Ship the release")
    );
    let e = execution(&bot, &ex.function_execution_id);
    assert_eq!(e["state"], "running", "waiting for the approver: {e}");
    assert_eq!(e["completions"], 0);
    // The DM went with the execution's own token, never the installation's.
    let used: Vec<_> = bot
        .slack()
        .tokens_used()
        .into_iter()
        .filter(|(m, _)| m == "chat.postMessage")
        .collect();
    assert_eq!(used.len(), 1);
    assert_eq!(used[0].1, ex.bot_access_token);
}

#[tokio::test]
async fn two_approvers_at_once_and_a_double_click_complete_the_step_once_with_the_first_decision() {
    let bot = TestBot::start(example::app()).await;
    let (_, ex) = bot.run_step(example::CALLBACK_ID, inputs()).await;
    let message = dm(&bot).remove(0);
    let id = ex.function_execution_id.clone();
    let alice = bot.as_user("U0ALICE").in_step(&id);
    let bob = bot.as_user("U0BOB").in_step(&id);
    let (a, b, a2) = tokio::join!(
        alice.click(example::APPROVE, "approve", Some(&message)),
        bob.click(example::REJECT, "reject", Some(&message)),
        alice.click(example::APPROVE, "approve", Some(&message)),
    );
    for acked in [&a, &b, &a2] {
        assert_eq!(acked.status, 200, "{acked:?}");
        assert_eq!(
            acked.outcome, "answered",
            "each click done, none left to retry: {acked:?}"
        );
    }
    let e = execution(&bot, &id);
    assert_eq!(e["state"], "completed", "{e}");
    assert_eq!(e["completions"], 1, "one completion: {e}");
    assert_eq!(e["refused"], 0, "no second completion was even sent: {e}");
    assert_eq!(e["outputs"]["decision"], "approved", "{e}");
    assert_eq!(e["outputs"]["decided_by"], "U0ALICE");
    let completions = bot
        .slack()
        .calls()
        .iter()
        .filter(|(m, _)| m.starts_with("functions.complete"))
        .count();
    assert_eq!(completions, 1);
    // The message names who decided; no modal was opened for Bob (decided already), or if his
    // click came first, its modal was never submitted: either way one decision.
    let shown = bot.slack().messages();
    let dm = shown
        .iter()
        .find(|m| m["ts"] == message["ts"])
        .expect("the DM is still there");
    assert!(
        dm.to_string().contains("Approved by <@U0ALICE>"),
        "the DM shows the decision: {dm}"
    );
    // Every call for the execution used one of its own tokens.
    for (method, token) in bot.slack().tokens_used() {
        if method != "chat.postMessage"
            && !method.starts_with("functions.")
            && method != "views.open"
        {
            continue;
        }
        assert!(
            token.starts_with("xwfp-"),
            "{method} used the installation's token"
        );
    }
    // A later click, after the end: told, nothing completed (its token was born revoked).
    let late = bot
        .as_user("U0CAROL")
        .in_step(&id)
        .click(example::APPROVE, "approve", Some(&message))
        .await;
    assert_eq!(
        (late.status, late.outcome.as_str()),
        (200, "answered"),
        "{late:?}"
    );
    assert_eq!(execution(&bot, &id)["completions"], 1);
}

/// A click as a step's message may bring it: its trigger only as the interactivity pointer,
/// and no response_url. Approve shows the decision with the click's token and completes;
/// Reject opens its modal with the pointer.
#[tokio::test]
async fn a_click_without_trigger_id_or_response_url_still_decides_and_shows_it() {
    let bot = TestBot::start(example::app()).await;
    let (_, ex) = bot.run_step(example::CALLBACK_ID, inputs()).await;
    let message = dm(&bot).remove(0);
    let token = bot
        .slack()
        .execution_token(&ex.function_execution_id)
        .unwrap();
    let click = |action: &str| {
        json!({
            "type": "block_actions",
            "user": {"id": APPROVER, "team_id": slack_once::testing::TEAM},
            "team": {"id": slack_once::testing::TEAM},
            "api_app_id": slack_once::testing::APP_ID,
            "container": {"type": "message", "message_ts": message["ts"], "channel_id": message["channel"]},
            "channel": {"id": message["channel"]},
            "message": message,
            "actions": [{"type": "button", "action_id": action, "block_id": "approval",
                         "value": "x", "action_ts": format!("1767225700.{:06}", action.len())}],
            "trigger_id": null,
            "bot_access_token": token,
            "function_data": {"execution_id": ex.function_execution_id,
                              "function": {"callback_id": example::CALLBACK_ID}, "inputs": inputs()},
            "interactivity": {"interactor": {"id": APPROVER, "secret": "s"},
                              "interactivity_pointer": slack_once::testing::Workspace::trigger_id()},
        })
    };
    let rejected = bot.send_interaction(click(example::REJECT)).await;
    assert_eq!(
        (rejected.status, rejected.outcome.as_str()),
        (200, "answered"),
        "{rejected:?}"
    );
    assert_eq!(
        bot.slack().views().len(),
        1,
        "the modal opened with the pointer"
    );
    let approved = bot.send_interaction(click(example::APPROVE)).await;
    assert_eq!(
        (approved.status, approved.outcome.as_str()),
        (200, "answered"),
        "{approved:?}"
    );
    let e = execution(&bot, &ex.function_execution_id);
    assert_eq!(
        (e["state"].as_str(), e["completions"].as_u64()),
        (Some("completed"), Some(1))
    );
    let shown = bot
        .slack()
        .messages()
        .into_iter()
        .find(|m| m["ts"] == message["ts"])
        .unwrap();
    assert!(
        shown.to_string().contains("Approved by <@U0APPROVER>"),
        "{shown}"
    );
    assert!(
        bot.slack().calls().iter().all(|(m, _)| m != "response_url"),
        "no response_url to use"
    );
}

#[tokio::test]
async fn a_rejection_through_the_modal_completes_with_its_reason_and_shows_it() {
    let bot = TestBot::start(example::app()).await;
    let (_, ex) = bot.run_step(example::CALLBACK_ID, inputs()).await;
    let message = dm(&bot).remove(0);
    let id = ex.function_execution_id.clone();
    let approver = bot
        .as_user(APPROVER)
        .in_channel(&format!("D{APPROVER}"))
        .in_step(&id);
    let clicked = approver
        .click(example::REJECT, "reject", Some(&message))
        .await;
    assert_eq!(clicked.status, 200, "{clicked:?}");
    let views = bot.slack().views();
    assert_eq!(views.len(), 1, "the modal opened");
    // An empty reason is refused in the modal; nothing is decided.
    let empty = approver
        .submit_view(
            &views[0],
            json!({"reason": {"reason_text": {"type": "plain_text_input", "value": " "}}}),
        )
        .await;
    assert_eq!(empty.body["response_action"], "errors", "{empty:?}");
    assert_eq!(execution(&bot, &id)["completions"], 0);
    let submitted = approver
        .submit_view(
            &views[0],
            json!({"reason": {"reason_text": {"type": "plain_text_input", "value": "Not this week"}}}),
        )
        .await;
    assert_eq!(submitted.status, 200, "{submitted:?}");
    let e = execution(&bot, &id);
    assert_eq!(e["state"], "completed", "{e}");
    assert_eq!(
        e["outputs"],
        json!({"decision": "rejected", "decided_by": APPROVER, "reason": "Not this week"})
    );
    let dm = bot
        .slack()
        .messages()
        .into_iter()
        .find(|m| m["ts"] == message["ts"])
        .unwrap();
    assert!(dm.to_string().contains("Rejected: Not this week"), "{dm}");
    // The same submission again (a person's client repeating it): nothing more.
    let again = bot.repeat().await;
    assert_eq!(again.status, 200);
    assert_eq!(execution(&bot, &id)["completions"], 1);
}

#[tokio::test]
async fn a_click_after_the_workflow_stopped_says_so_and_completes_nothing() {
    let bot = TestBot::start(example::app()).await;
    let (_, ex) = bot.run_step(example::CALLBACK_ID, inputs()).await;
    let message = dm(&bot).remove(0);
    assert!(bot.slack().end_execution(&ex.function_execution_id));
    let clicked = bot
        .as_user(APPROVER)
        .in_step(&ex.function_execution_id)
        .click(example::APPROVE, "approve", Some(&message))
        .await;
    assert_eq!(clicked.status, 200, "{clicked:?}");
    assert_eq!(clicked.outcome, "answered", "told, and done: {clicked:?}");
    let e = execution(&bot, &ex.function_execution_id);
    assert_eq!(
        (e["state"].as_str(), e["completions"].as_u64()),
        (Some("ended"), Some(0))
    );
    let dm = bot
        .slack()
        .messages()
        .into_iter()
        .find(|m| m["ts"] == message["ts"])
        .unwrap();
    assert!(dm.to_string().contains(example::ENDED), "{dm}");
    // Reject after the end: no modal (its token is revoked), the message says so.
    let reject = bot
        .as_user(APPROVER)
        .in_step(&ex.function_execution_id)
        .click(example::REJECT, "reject", Some(&message))
        .await;
    assert_eq!(reject.status, 200);
    assert!(bot.slack().views().is_empty());
}

/// A step that completes in its own request: outputs checked against the declaration before
/// anything is sent (outputs that do not match fail the step with the reason, once); inputs
/// that are not the author's type fail the step once.
#[tokio::test]
async fn outputs_are_checked_before_they_are_sent_and_unreadable_inputs_fail_the_step_once() {
    #[derive(serde::Deserialize)]
    struct Numbers {
        a: i64,
        b: i64,
    }
    let sum = Function::new("sum", "Sum")
        .input("a", types::INTEGER, "A")
        .input("b", types::INTEGER, "B")
        .output("total", types::INTEGER, "Total");
    let broken = Function::new("broken", "Broken").output("total", types::INTEGER, "Total");
    let app = App::new()
        .function(sum, |ctx: Ctx, ex: Execution<Numbers>| async move {
            let c = ctx
                .complete(json!({"total": ex.inputs.a + ex.inputs.b}))
                .await?;
            assert_eq!(c, Completion::Completed);
            Ok(())
        })
        .function(broken, |ctx: Ctx, _ex: Execution| async move {
            // A typo'd output name: the author's clear error, nothing sent.
            ctx.complete(json!({"totl": 3})).await?;
            Ok(())
        });
    let bot = TestBot::start(app).await;
    let (outcome, ok) = bot.run_step("sum", json!({"a": 2, "b": 40})).await;
    assert_eq!(outcome, "answered");
    assert_eq!(bot.retry(1).await, "duplicate");
    let e = execution(&bot, &ok.function_execution_id);
    assert_eq!(
        (e["outputs"]["total"].as_i64(), e["completions"].as_u64()),
        (Some(42), Some(1))
    );

    let (outcome, bad) = bot.run_step("broken", json!({})).await;
    assert_eq!(
        outcome, "internal_error",
        "the author's error, as any listener's"
    );
    // Never the typo'd outputs: the step failed with the reason, once, so the workflow stops
    // and says why; Slack's retries (the request ended in an error) fail nothing more.
    for n in 1..=3 {
        assert_eq!(bot.retry(n).await, "internal_error");
    }
    let e = execution(&bot, &bad.function_execution_id);
    assert_eq!(
        (
            e["state"].as_str(),
            e["completions"].as_u64(),
            e["refused"].as_u64()
        ),
        (Some("failed"), Some(1), Some(0)),
        "{e}"
    );
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("\"totl\" is not a declared output"),
        "{e}"
    );
    assert!(
        bot.slack()
            .calls()
            .iter()
            .all(|(m, a)| m != "functions.completeSuccess" || a["outputs"].get("totl").is_none()),
        "the outputs Slack would refuse were never sent"
    );

    let (outcome, unreadable) = bot.run_step("sum", json!({"a": "two", "b": 40})).await;
    assert_eq!(outcome, "answered", "the step failed, as a decision");
    assert_eq!(bot.retry(1).await, "duplicate");
    let e = execution(&bot, &unreadable.function_execution_id);
    assert_eq!(e["state"], "failed", "{e}");
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("inputs could not be read"),
        "{e}"
    );
    let sent = bot
        .slack()
        .calls()
        .iter()
        .filter(|(m, _)| m.starts_with("functions.complete"))
        .count();
    assert_eq!(
        sent, 3,
        "the sum's completion, the typo's and the unreadable inputs' errors, once each"
    );
}

/// Completing outside a step is refused, nothing recorded or sent.
#[tokio::test]
async fn completing_outside_a_step_is_a_clear_error() {
    let app = App::new().action("approve_anything", |ctx: Ctx, _c: BlockAction| async move {
        let refused = ctx.complete(json!({})).await.unwrap_err();
        assert!(
            refused.to_string().contains("Workflow Builder step"),
            "{refused}"
        );
        Ok(())
    });
    let bot = TestBot::start(app).await;
    let acked = bot.click("approve_anything", "x", None).await;
    assert_eq!(acked.status, 200);
    assert!(bot.slack().calls().is_empty());
}

/// `BOT manifest` from the code: the approval step with its parameters, what steps need
/// (`function_executed`, interactivity, org deploy, the remote runtime), and `--check`.
#[test]
#[ignore = "needs the built binary"]
fn the_manifest_declares_the_step_with_its_parameters() {
    let manifest = example::app().manifest();
    let f = &manifest["functions"][example::CALLBACK_ID];
    assert_eq!(f["title"], "Request approval");
    assert_eq!(
        f["input_parameters"]["approver"],
        json!({"type": "slack#/types/user_id", "title": "Approver", "is_required": true})
    );
    assert_eq!(f["input_parameters"]["summary"]["type"], "string");
    assert_eq!(f["output_parameters"]["decision"]["is_required"], true);
    assert_eq!(
        f["output_parameters"]["decided_by"]["type"],
        "slack#/types/user_id"
    );
    assert_eq!(f["output_parameters"]["reason"]["is_required"], false);
    let settings = &manifest["settings"];
    assert_eq!(settings["org_deploy_enabled"], true);
    assert_eq!(settings["function_runtime"], "remote");
    assert_eq!(settings["interactivity"]["is_enabled"], true);
    assert!(
        settings["event_subscriptions"]["bot_events"]
            .as_array()
            .unwrap()
            .contains(&json!("function_executed"))
    );

    // The example's binary prints it, and checks a file against it.
    let binary = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("examples").join("approval"))
        .unwrap();
    let out = std::process::Command::new(&binary)
        .arg("manifest")
        .output()
        .expect("the example runs");
    assert!(out.status.success());
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, manifest);
    let dir = std::env::temp_dir().join(format!("manifest-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("slack-app-manifest.json");
    std::fs::write(&file, &out.stdout).unwrap();
    let check = |path: &std::path::Path| {
        std::process::Command::new(&binary)
            .args(["manifest", "--check"])
            .arg(path)
            .output()
            .unwrap()
    };
    assert!(check(&file).status.success());
    let mut stale = printed.clone();
    stale["functions"][example::CALLBACK_ID]["output_parameters"]
        .as_object_mut()
        .unwrap()
        .remove("reason");
    std::fs::write(&file, stale.to_string()).unwrap();
    let refused = check(&file);
    assert_eq!(refused.status.code(), Some(1));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains(".functions.request_approval.output_parameters.reason"),
        "{said}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
