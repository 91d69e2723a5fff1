//! Real Bolt apps behind `slack-once gateway`: Bolt for JavaScript 5 and Bolt for Python 1.30
//! (`tests/bots/`, installed from npm and PyPI by `scripts/bolt-bots.sh`), changed by the few
//! lines of their adapter, on DynamoDB Local (and PostgreSQL) and the Slack stand-in: Slack's
//! retries and copies, a replica killed between its two writes (on either store), two versions
//! during a deploy, a command, a modal.

use std::time::Duration;

use http::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

/// The gateway's proxy, as a bot reaches it.
fn api_url(gateway: &BotProcess) -> String {
    gateway.url().replace("/slack/events", "/api/")
}

async fn mentions_through_retries_and_copies(bolt: Bolt) {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let port = free_port();
    let gateway = spawn_gateway(&slack, &table, &[BoltReplica::url_on(port)]);
    let bot = BoltReplica::start(bolt, port, &api_url(&gateway), &[]);
    let http = HttpClient::default();

    for n in 0..3 {
        let event_id = format!("EvBolt{bolt:?}Retry{n}");
        deliver_with_retries(&http, &gateway.url(), &event_id).await;
        assert_eq!(
            answered(&slack, &event_id),
            (1, 1),
            "bot:\n{}\ngateway:\n{}",
            bot.log(),
            gateway.log()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_js_answers_each_mention_once_through_slacks_retries_and_a_copy() {
    mentions_through_retries_and_copies(Bolt::JavaScript).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_python_answers_each_mention_once_through_slacks_retries_and_a_copy() {
    mentions_through_retries_and_copies(Bolt::Python).await;
}

/// Where the gateway keeps its ledger.
#[derive(Clone, Copy, Debug)]
enum Store {
    DynamoDb,
    /// `DATABASE_URL`, and no AWS variable.
    Postgres,
}

async fn a_replica_killed_between_its_writes(bolt: Bolt, store: Store) {
    let slack = SlackStandin::start().await;
    let (dying_port, healthy_port) = (free_port(), free_port());
    let urls = [
        BoltReplica::url_on(dying_port),
        BoltReplica::url_on(healthy_port),
    ];
    let gateway = match store {
        Store::DynamoDb => {
            let (table, _) = fresh_table(&dynamodb_endpoint()).await;
            spawn_gateway(&slack, &table, &urls)
        }
        Store::Postgres => {
            let url = fresh_schema_url().await;
            let mut vars = postgres_bot_vars(&slack, &url);
            vars.extend(gateway_vars(&urls));
            BotProcess::spawn_gateway(&vars)
        }
    };
    let api = api_url(&gateway);
    let exits = [("BOT_EXIT_AFTER_REACTION", "1")];
    let mut dying = BoltReplica::start(bolt, dying_port, &api, &exits);
    let healthy = BoltReplica::start(bolt, healthy_port, &api, &[]);
    let http = HttpClient::default();

    // The first mention goes to the first replica, which reacts and is killed before it
    // replies; the others find it gone. Slack retries all the while.
    for n in 0..3 {
        let event_id = format!("EvBolt{bolt:?}Kill{n}");
        deliver_with_retries(&http, &gateway.url(), &event_id).await;
        assert_eq!(
            answered(&slack, &event_id),
            (1, 1),
            "healthy:\n{}\ndying:\n{}\ngateway:\n{}",
            healthy.log(),
            dying.log(),
            gateway.log()
        );
    }
    assert!(
        dying.ended_within(Duration::from_secs(5)),
        "the replica was killed"
    );
    assert_eq!(slack.calls_of("reactions.add"), 3, "no reaction made twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_js_replica_killed_between_reaction_and_reply_leaves_one_of_each() {
    a_replica_killed_between_its_writes(Bolt::JavaScript, Store::DynamoDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_python_replica_killed_between_reaction_and_reply_leaves_one_of_each() {
    a_replica_killed_between_its_writes(Bolt::Python, Store::DynamoDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_js_on_postgresql_replica_killed_between_reaction_and_reply_leaves_one_of_each() {
    a_replica_killed_between_its_writes(Bolt::JavaScript, Store::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_python_on_postgresql_replica_killed_between_reaction_and_reply_leaves_one_of_each() {
    a_replica_killed_between_its_writes(Bolt::Python, Store::Postgres).await;
}

async fn two_versions_during_a_deploy(old: Bolt, new: Bolt) {
    // Two gateways (each a sidecar of its own replica) on one table: the old version and the
    // new, each delivery of a mention to either.
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let (old_port, new_port) = (free_port(), free_port());
    let old_gateway = spawn_gateway(&slack, &table, &[BoltReplica::url_on(old_port)]);
    let new_gateway = spawn_gateway(&slack, &table, &[BoltReplica::url_on(new_port)]);
    let _old = BoltReplica::start(old, old_port, &api_url(&old_gateway), &[]);
    let _new = BoltReplica::start(new, new_port, &api_url(&new_gateway), &[]);
    let http = HttpClient::default();

    for n in 0..6 {
        let event_id = format!("EvBoltDeploy{n}");
        let body = app_mention(&event_id, "during the deploy");
        let (first, second) = match n % 2 {
            0 => (old_gateway.url(), new_gateway.url()),
            _ => (new_gateway.url(), old_gateway.url()),
        };
        let (a, b) = tokio::join!(
            deliver(&http, &first, &body, None),
            deliver(&http, &second, &body, Some(1))
        );
        if !a.status.is_success() && !b.status.is_success() {
            deliver(&http, &first, &body, Some(2)).await;
        }
        assert_eq!(answered(&slack, &event_id), (1, 1), "{event_id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_js_old_and_new_versions_during_a_deploy_answer_each_mention_once() {
    two_versions_during_a_deploy(Bolt::JavaScript, Bolt::JavaScript).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_python_old_and_new_versions_during_a_deploy_answer_each_mention_once() {
    two_versions_during_a_deploy(Bolt::Python, Bolt::Python).await;
}

async fn a_command_answered_with_content_and_a_respond(bolt: Bolt) {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let port = free_port();
    let gateway = spawn_gateway(&slack, &table, &[BoltReplica::url_on(port)]);
    let bot = BoltReplica::start(bolt, port, &api_url(&gateway), &[]);
    let http = HttpClient::default();

    let form = command_form(&slack, "/ticket", "printer on fire");
    let answer = deliver_form(&http, &gateway.url(), &form, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", bot.log());
    assert_eq!(
        answer.json()["text"],
        "Filing your ticket…",
        "{}",
        answer.body
    );
    assert_eq!(answer.json()["response_type"], "ephemeral");
    let responded: Vec<Value> = slack
        .calls()
        .into_iter()
        .filter(|(m, _)| m == "response_url")
        .map(|(_, args)| args)
        .collect();
    assert_eq!(responded.len(), 1, "{}\n{}", bot.log(), gateway.log());
    assert_eq!(responded[0]["text"], "Ticket: printer on fire");
    assert_eq!(responded[0]["response_type"], "in_channel");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_js_command_is_answered_with_content_and_a_respond_through_the_gateway() {
    a_command_answered_with_content_and_a_respond(Bolt::JavaScript).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_python_command_is_answered_with_content_and_a_respond_through_the_gateway() {
    a_command_answered_with_content_and_a_respond(Bolt::Python).await;
}

fn interaction_form(payload: Value) -> String {
    let mut payload = payload;
    payload["team"] = json!({"id": TEAM});
    payload["user"] = json!({"id": "U0001", "team_id": TEAM});
    payload["api_app_id"] = json!(APP_ID);
    payload["trigger_id"] = json!(slack_once::testing::Workspace::trigger_id());
    form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish()
}

fn submission(view: &Value, summary: &str) -> String {
    interaction_form(json!({
        "type": "view_submission",
        "view": {
            "id": view["id"], "type": "modal", "callback_id": "ticket_modal", "team_id": TEAM, "app_id": APP_ID,
            "hash": format!("{}.{}", now_unix(), summary.len()),
            "private_metadata": "",
            "state": {"values": {"summary": {"summary_text": {
                "type": "plain_text_input", "value": summary
            }}}}
        }
    }))
}

async fn a_modal_refused_then_submitted(bolt: Bolt) {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let port = free_port();
    let gateway = spawn_gateway(&slack, &table, &[BoltReplica::url_on(port)]);
    let bot = BoltReplica::start(bolt, port, &api_url(&gateway), &[]);
    let http = HttpClient::default();

    let shortcut = interaction_form(json!({"type": "shortcut", "callback_id": "new_ticket"}));
    let answer = deliver_form(&http, &gateway.url(), &shortcut, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", bot.log());
    let views = slack.views();
    assert_eq!(views.len(), 1, "{}\n{}", bot.log(), gateway.log());
    assert_eq!(views[0]["callback_id"], "ticket_modal");

    let short = deliver_form(&http, &gateway.url(), &submission(&views[0], "ab"), None).await;
    assert_eq!(
        short.status,
        StatusCode::OK,
        "{}\n{}",
        bot.log(),
        gateway.log()
    );
    assert_eq!(short.json()["response_action"], "errors", "{}", short.body);
    assert_eq!(short.json()["errors"]["summary"], "Say a little more");

    let good = submission(&views[0], "Printer on fire");
    let url = gateway.url();
    let (a, b) = tokio::join!(
        deliver_form(&http, &url, &good, None),
        deliver_form(&http, &url, &good, None)
    );
    assert!(a.status.is_success() || b.status.is_success());
    let tickets = slack
        .posted()
        .iter()
        .filter(|p| p.body["text"] == "New ticket: Printer on fire")
        .count();
    assert_eq!(tickets, 1, "{}\n{}", bot.log(), gateway.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_js_modal_submission_answered_with_errors_then_taken_once() {
    a_modal_refused_then_submitted(Bolt::JavaScript).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_python_modal_submission_answered_with_errors_then_taken_once() {
    a_modal_refused_then_submitted(Bolt::Python).await;
}

async fn a_post_made_but_answered_5xx(bolt: Bolt) {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    slack.script_method("chat.postMessage", [SlackFailure::MadeThenStatus(503)]);
    let port = free_port();
    let gateway = spawn_gateway(&slack, &table, &[BoltReplica::url_on(port)]);
    let bot = BoltReplica::start(bolt, port, &api_url(&gateway), &[]);
    let http = HttpClient::default();

    let event_id = format!("EvBolt{bolt:?}5xx");
    let body = app_mention(&event_id, "hello");
    for retry in [None, Some(1), Some(2), Some(3)] {
        if deliver(&http, &gateway.url(), &body, retry)
            .await
            .status
            .is_success()
            && answered(&slack, &event_id).1 == 1
        {
            break;
        }
    }
    assert_eq!(
        answered(&slack, &event_id),
        (1, 1),
        "{}\n{}",
        bot.log(),
        gateway.log()
    );
    assert_eq!(
        slack.received().len(),
        1,
        "found in Slack, not posted again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_js_post_slack_made_but_answered_5xx_is_not_posted_again() {
    a_post_made_but_answered_5xx(Bolt::JavaScript).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_python_post_slack_made_but_answered_5xx_is_not_posted_again() {
    a_post_made_but_answered_5xx(Bolt::Python).await;
}

async fn a_slow_bot_in_deferred_mode(bolt: Bolt) {
    let stack = DeferredStack::start(5).await;
    let port = free_port();
    let (ingress, worker) = spawn_deferred_gateway(&stack, &[BoltReplica::url_on(port)], 60);
    let api = worker.url().replace("/slack/events", "/api/");
    // An LLM's answer: four seconds between the reaction and the reply.
    let bot = BoltReplica::start(bolt, port, &api, &[("BOT_REPLY_DELAY_MS", "4000")]);
    let http = HttpClient::default();

    let event_id = format!("EvBolt{bolt:?}Slow");
    let body = app_mention(&event_id, "take your time");
    let started = std::time::Instant::now();
    let answer = deliver(&http, &ingress.url(), &body, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", ingress.log());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "acknowledged within Slack's 3 s"
    );
    let slack = &stack.slack;
    let done = eventually(Duration::from_secs(30), || {
        answered(slack, &event_id) == (1, 1)
    })
    .await;
    assert!(done, "bot:\n{}\nworker:\n{}", bot.log(), worker.log());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(answered(slack, &event_id), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_js_slower_than_slacks_3_s_answers_once_behind_the_deferred_gateway() {
    a_slow_bot_in_deferred_mode(Bolt::JavaScript).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_python_slower_than_slacks_3_s_answers_once_behind_the_deferred_gateway() {
    a_slow_bot_in_deferred_mode(Bolt::Python).await;
}

async fn two_gateway_instances_sharing_two_replicas(bolt: Bolt) {
    // One gateway service of two instances on one table, in front of the same two replicas:
    // each forward names its instance, so each replica's calls reach the instance that holds
    // their request, whichever instance Slack's delivery (or its retry) came to.
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let ports = [free_port(), free_port()];
    let urls: Vec<String> = ports.iter().map(|p| BoltReplica::url_on(*p)).collect();
    let first = spawn_gateway(&slack, &table, &urls);
    let second = spawn_gateway(&slack, &table, &urls);
    // The replicas' own setting names the first instance only.
    let _replicas: Vec<BoltReplica> = ports
        .iter()
        .map(|p| BoltReplica::start(bolt, *p, &api_url(&first), &[]))
        .collect();
    let http = HttpClient::default();

    for n in 0..6 {
        let event_id = format!("EvBolt{bolt:?}Instances{n}");
        let body = app_mention(&event_id, "hello");
        let (one, other) = match n % 2 {
            0 => (first.url(), second.url()),
            _ => (second.url(), first.url()),
        };
        let (a, b) = tokio::join!(
            deliver(&http, &one, &body, None),
            deliver(&http, &other, &body, Some(1))
        );
        if !a.status.is_success() && !b.status.is_success() {
            deliver(&http, &one, &body, Some(2)).await;
        }
        assert_eq!(
            answered(&slack, &event_id),
            (1, 1),
            "{event_id}\n{}\n{}",
            first.log(),
            second.log()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_js_replicas_behind_two_gateway_instances_call_the_one_holding_each_request() {
    two_gateway_instances_sharing_two_replicas(Bolt::JavaScript).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_python_replicas_behind_two_gateway_instances_call_the_one_holding_each_request() {
    two_gateway_instances_sharing_two_replicas(Bolt::Python).await;
}

/// A Workflow Builder step behind the gateway, in Bolt's own `app.function` with `complete()`:
/// Bolt builds the step's client from the event's `bot_access_token`, which the gateway gave as
/// the placeholder, so its post and its completion still go through the proxy under the run,
/// made with the step's own token; Slack's retry finds both made.
async fn a_step_completed_by_bolts_function_listener(bolt: Bolt) {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let execution = slack.start_execution("summarize", json!({"text": "the quarter"}));
    let port = free_port();
    let gateway = spawn_gateway(&slack, &table, &[BoltReplica::url_on(port)]);
    let bot = BoltReplica::start(bolt, port, &api_url(&gateway), &[]);
    let http = HttpClient::default();
    slack.script_method(
        "functions.completeSuccess",
        [SlackFailure::MadeThenStatus(500)],
    );

    let body = crate::gateway::step_executed(&format!("EvBolt{bolt:?}Step"), &execution);
    let first = deliver(&http, &gateway.url(), &body, None).await;
    let retry = deliver(&http, &gateway.url(), &body, Some(1)).await;
    assert_eq!(
        retry.status,
        StatusCode::OK,
        "first: {:?}\nbot:\n{}\ngateway:\n{}",
        first.status,
        bot.log(),
        gateway.log()
    );

    let shown = slack.executions();
    assert_eq!(shown[0]["state"], "completed", "{shown:?}\n{}", bot.log());
    assert_eq!(shown[0]["outputs"], json!({"summary": "the quarter: up"}));
    assert_eq!(shown[0]["completions"], 1, "{shown:?}");
    let posts: Vec<_> = slack
        .posted()
        .into_iter()
        .filter(|p| p.body["text"] == "Summary of the quarter")
        .collect();
    assert_eq!(posts.len(), 1, "{}", gateway.log());
    let used: Vec<_> = slack
        .tokens_used()
        .into_iter()
        .filter(|(m, _)| m == "chat.postMessage" || m.starts_with("functions."))
        .collect();
    assert!(
        !used.is_empty() && used.iter().all(|(_, token)| token.starts_with("xwfp-")),
        "the step's own token made them: {used:?}"
    );
    assert!(
        !bot.log().contains("xwfp-"),
        "the bot never held the step's token"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_js_function_listener_completes_its_step_once_through_the_gateway() {
    a_step_completed_by_bolts_function_listener(Bolt::JavaScript).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_python_function_listener_completes_its_step_once_through_the_gateway() {
    a_step_completed_by_bolts_function_listener(Bolt::Python).await;
}

/// `slack-once gateway` over Socket Mode (`SLACK_APP_TOKEN`) in front of a real Bolt app: three
/// gateway processes of two connections each, sharing one table, forwarding to one Bolt
/// replica each; mentions sent with Slack's copies and redeliveries while the connections are
/// recycled and one gateway is killed: each mention gets one reaction and one reply.
async fn mentions_over_socket_mode(bolt: Bolt) {
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    let socket = slack.socket_mode();
    socket.set_recycling(slack_once::testing::Recycling {
        lifetime: Duration::from_secs(2),
        debug_lifetime: Duration::from_secs(2),
        notice: slack_once::testing::Notice::RefreshRequested,
        grace: Duration::from_secs(1),
    });
    let mut gateways = Vec::new();
    let mut replicas = Vec::new();
    for _ in 0..3 {
        let port = free_port();
        let vars = [
            ("SLACK_APP_TOKEN", socket.app_token()),
            ("DEDUP_LEASE_SECONDS", "5".to_string()),
        ];
        let gateway = spawn_gateway_with(&slack, &table, &[BoltReplica::url_on(port)], &vars);
        replicas.push(BoltReplica::start(bolt, port, &api_url(&gateway), &[]));
        let up = gateway
            .log_when(Duration::from_secs(15), |log| {
                log.contains("Socket Mode connection open")
            })
            .await;
        assert!(up.contains("Socket Mode connection open"), "{up}");
        gateways.push(gateway);
    }
    let delivery = slack_once::testing::EventDelivery {
        retry_gaps: [
            Duration::from_secs(1),
            Duration::from_secs(3),
            Duration::from_secs(5),
        ],
        copies: vec![
            (
                Duration::from_millis(200),
                slack_once::testing::EventCopy::SameEnvelope,
            ),
            (
                Duration::from_millis(500),
                slack_once::testing::EventCopy::NewEnvelope,
            ),
        ],
        ..slack_once::testing::EventDelivery::default()
    };
    const MENTIONS: usize = 30;
    let ids: Vec<String> = (0..MENTIONS)
        .map(|n| format!("EvBolt{bolt:?}Socket{n}"))
        .collect();
    for (n, event_id) in ids.iter().enumerate() {
        let body = app_mention(event_id, "hello");
        register_event_message(body.as_bytes());
        socket.send_event_with(serde_json::from_str(&body).unwrap(), delivery.clone());
        if n == MENTIONS / 2 {
            gateways[0].kill();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all = socket
        .wait_for(Duration::from_secs(60), |_| {
            ids.iter().all(|id| answered(&slack, id).1 >= 1)
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let wrong: Vec<(&String, (usize, usize))> = ids
        .iter()
        .map(|id| (id, answered(&slack, id)))
        .filter(|(_, a)| *a != (1, 1))
        .collect();
    assert!(
        all && wrong.is_empty(),
        "not one reaction and one reply: {wrong:?}\ngateway:\n{}",
        gateways[1].log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_js_behind_the_gateway_over_socket_mode_answers_each_mention_once() {
    mentions_over_socket_mode(Bolt::JavaScript).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the built binary and the Bolt apps (scripts/bolt-bots.sh)"]
async fn bolt_python_behind_the_gateway_over_socket_mode_answers_each_mention_once() {
    mentions_over_socket_mode(Bolt::Python).await;
}
