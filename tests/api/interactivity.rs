//! Slash commands, buttons, modals, shortcuts and options on the events' Request URL: signed
//! forms against the app, the Slack stand-in's response URLs and views, the ledger; in deferred
//! mode over the built binary, a worker SIGKILLed between the acknowledgement and the
//! follow-up.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::StatusCode;
use serde_json::{Value, json};
use slack_once::app::{
    Ack, App, BlockAction, Ctx, OptionsRequest, Respond, Shortcut, ViewSubmission,
};
use slack_once::testing::Workspace;

use crate::helpers::*;

fn form(pairs: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

fn form_headers(body: &str) -> Vec<(String, String)> {
    let now = now_unix();
    vec![
        (
            "content-type".into(),
            "application/x-www-form-urlencoded".into(),
        ),
        ("x-slack-request-timestamp".into(), now.to_string()),
        (
            "x-slack-signature".into(),
            slack_once::slack::signature::sign(
                &slack_once::config::Secret::new(SECRET),
                now,
                body.as_bytes(),
            ),
        ),
    ]
}

/// `/once <text>` by U0001 in C0001, its response URL on `slack`, with `trigger`.
fn command(slack: &SlackStandin, text: &str, trigger: &str) -> String {
    let url = format!(
        "{}/commands/{TEAM}/C0001/{}",
        slack.origin(),
        uuid::Uuid::new_v4().simple()
    );
    form(&[
        ("command", "/once"),
        ("text", text),
        ("team_id", TEAM),
        ("api_app_id", APP_ID),
        ("user_id", "U0001"),
        ("channel_id", "C0001"),
        ("trigger_id", trigger),
        ("response_url", &url),
    ])
}

fn interaction(payload: Value) -> String {
    let mut payload = payload;
    for (key, value) in [
        ("team", json!({"id": TEAM})),
        ("user", json!({"id": "U0001", "team_id": TEAM})),
        ("api_app_id", json!(APP_ID)),
        ("trigger_id", json!(Workspace::trigger_id())),
    ] {
        if payload.get(key).is_none() {
            payload[key] = value;
        }
    }
    form(&[("payload", &payload.to_string())])
}

/// A click on `action_id` in our message `message` (as the stand-in shows it).
fn click(slack: &SlackStandin, action_id: &str, message: &Value) -> String {
    let channel = message["channel"].as_str().unwrap_or("C0001");
    let ts = message["ts"].as_str().unwrap();
    let url = format!(
        "{}/actions/{TEAM}/{channel}/{ts}/{}",
        slack.origin(),
        uuid::Uuid::new_v4().simple()
    );
    interaction(json!({
        "type": "block_actions",
        "container": {"type": "message", "message_ts": ts, "channel_id": channel},
        "channel": {"id": channel}, "message": message, "response_url": url,
        "actions": [{"type": "button", "action_id": action_id, "block_id": "b", "value": "v",
                     "action_ts": format!("{}.{:06}", now_unix(), rand_micros())}],
    }))
}

fn rand_micros() -> u32 {
    uuid::Uuid::new_v4().as_u128() as u32 % 1_000_000
}

async fn send_form(http: &HttpClient, url: &str, body: &str) -> (Answer, Duration) {
    let started = Instant::now();
    let answer = http
        .request("POST", url, &form_headers(body), body.as_bytes().to_vec())
        .await;
    (answer, started.elapsed())
}

fn outcome(answer: &Answer) -> String {
    answer
        .headers
        .get(slack_once::OUTCOME_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn once_is_acknowledged_ephemerally_then_answered_in_the_channel_once_and_its_button_updates_the_answer()
 {
    let app = spawn_app().await;
    let body = command(&app.slack, "hello there", &Workspace::trigger_id());
    let (answer, took) = send_form(&app.http, &app.url("/slack/events"), &body).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(
        answer.json(),
        json!({"response_type": "ephemeral", "text": "On it: one answer is coming."})
    );
    assert_eq!(outcome(&answer), "answered");
    let posted = app.slack.posted();
    assert_eq!(posted.len(), 1, "one answer in the channel");
    let message = &posted[0].body;
    assert_eq!(message["channel"], "C0001");
    assert!(message["text"].as_str().unwrap().contains("“hello there”"));
    assert_eq!(message["app_id"], APP_ID, "posted as our app");
    assert!(
        message["metadata"]["event_payload"]["slack_once"]["key"]
            .as_str()
            .unwrap()
            .starts_with("cmd-"),
        "the answer names its claim: {message}"
    );

    // The same request again (a repeated trigger_id): acknowledged, nothing run again.
    let (again, _) = send_form(&app.http, &app.url("/slack/events"), &body).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(outcome(&again), "duplicate");
    assert!(again.body.is_empty(), "{}", again.body);
    assert_eq!(app.slack.posted().len(), 1);
    assert_eq!(app.slack.calls_of("response_url"), 1);

    // The button on the answer updates that message, once however often it is clicked.
    let click_body = click(&app.slack, "once_thanks", message);
    let (clicked, took) = send_form(&app.http, &app.url("/slack/events"), &click_body).await;
    assert_eq!(clicked.status, StatusCode::OK);
    assert!(took < Duration::from_secs(3));
    assert!(
        clicked.body.is_empty(),
        "an action's acknowledgement is empty"
    );
    assert_eq!(outcome(&clicked), "answered");
    let (twice, _) = send_form(&app.http, &app.url("/slack/events"), &click_body).await;
    assert_eq!(outcome(&twice), "duplicate");
    let updated = app.slack.posted();
    assert_eq!(updated.len(), 1);
    assert!(
        updated[0].body["blocks"]
            .to_string()
            .contains("U0001> found this helpful"),
        "{}",
        updated[0].body
    );
    assert_eq!(app.slack.calls_of("chat.update"), 1);
}

fn note_modal() -> Value {
    json!({"type": "modal", "callback_id": "note", "title": {"type": "plain_text", "text": "Note"},
           "blocks": [{"type": "input", "block_id": "title", "optional": true,
                       "label": {"type": "plain_text", "text": "Title"},
                       "element": {"type": "plain_text_input", "action_id": "t"}}]})
}

/// A bot with a listener of each kind.
fn every_kind(closed: Arc<AtomicUsize>) -> App {
    App::new()
        .shortcut("new_note", |ctx: Ctx, _s: Shortcut| async move {
            ctx.open_view(note_modal()).await?;
            ctx.ack(Ack::empty()).await?;
            Ok(())
        })
        .view_submission("note", |ctx: Ctx, view: ViewSubmission| async move {
            let Some(title) = view.values.get("title", "t") else {
                ctx.ack(Ack::errors([("title", "Give it a title")])).await?;
                return Ok(());
            };
            ctx.ack(Ack::clear()).await?;
            ctx.post(&view.user_id, format!("Saved “{title}”.")).await?;
            Ok(())
        })
        .view_closed("note", move |ctx: Ctx, _view: ViewSubmission| {
            let closed = closed.clone();
            async move {
                closed.fetch_add(1, Ordering::SeqCst);
                ctx.ack(Ack::empty()).await?;
                Ok(())
            }
        })
        .message_shortcut("quote", |ctx: Ctx, s: Shortcut| async move {
            ctx.ack(Ack::empty()).await?;
            let text = s
                .message
                .as_ref()
                .and_then(|m| m["text"].as_str())
                .unwrap_or("");
            ctx.respond(Respond::ephemeral(format!("Quoted: {text}")))
                .await?;
            Ok(())
        })
        .options("pick", |ctx: Ctx, req: OptionsRequest| async move {
            let all = ["apple", "apricot", "banana"];
            let found = all
                .iter()
                .filter(|o| o.starts_with(&req.value))
                .map(|o| (*o, *o));
            ctx.ack(Ack::options(found)).await?;
            Ok(())
        })
        .action(
            regex::Regex::new("^vote_").unwrap(),
            |ctx: Ctx, a: BlockAction| async move {
                ctx.say(format!("{} voted {}", a.user_id, a.action_id))
                    .await?;
                Ok(())
            },
        )
}

#[tokio::test]
async fn every_kind_is_acknowledged_with_its_body_and_followed_up_once() {
    let closed = Arc::new(AtomicUsize::new(0));
    let app = spawn_bot(every_kind(closed.clone())).await;
    let url = app.url("/slack/events");

    // A global shortcut opens the modal with its trigger_id, before the acknowledgement.
    let (opened, took) = send_form(
        &app.http,
        &url,
        &interaction(json!({"type": "shortcut", "callback_id": "new_note", "action_ts": "1.2"})),
    )
    .await;
    assert_eq!((opened.status, opened.body.as_str()), (StatusCode::OK, ""));
    assert!(took < Duration::from_secs(3));
    let views = app.slack.views();
    assert_eq!(views.len(), 1, "one modal");
    let view = views[0].clone();

    // An empty title: errors, the modal stays; the same again: validated again.
    let submit = |title: &str| {
        let mut v = view.clone();
        v["state"] =
            json!({"values": {"title": {"t": {"type": "plain_text_input", "value": title}}}});
        interaction(json!({"type": "view_submission", "view": v}))
    };
    for _ in 0..2 {
        let (refused, _) = send_form(&app.http, &url, &submit("")).await;
        assert_eq!(refused.status, StatusCode::OK);
        assert_eq!(refused.json()["response_action"], "errors");
        assert_eq!(refused.json()["errors"]["title"], "Give it a title");
    }
    assert!(app.slack.posted().is_empty());
    // A title: the modal clears, the note is posted once, a double submit changes nothing.
    let good = submit("Groceries");
    let (taken, _) = send_form(&app.http, &url, &good).await;
    assert_eq!(taken.json(), json!({"response_action": "clear"}));
    assert_eq!(outcome(&taken), "answered");
    let (double, _) = send_form(&app.http, &url, &good).await;
    assert_eq!(outcome(&double), "duplicate");
    let posted = app.slack.posted();
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0].body["text"], "Saved “Groceries”.");
    assert_eq!(posted[0].body["channel"], "DU0001", "in the user's DM");

    // Closed: its listener runs once.
    let closing = interaction(json!({"type": "view_closed", "view": view, "is_cleared": false}));
    let (closed_answer, _) = send_form(&app.http, &url, &closing).await;
    assert_eq!(
        (closed_answer.status, closed_answer.body.as_str()),
        (StatusCode::OK, "")
    );
    send_form(&app.http, &url, &closing).await;
    assert_eq!(closed.load(Ordering::SeqCst), 1);

    // A message shortcut answers through its response_url, ephemerally.
    let hook = format!("{}/commands/{TEAM}/C0001/{}", app.slack.origin(), 7);
    let (quoted, _) = send_form(
        &app.http,
        &url,
        &interaction(json!({
            "type": "message_action", "callback_id": "quote", "channel": {"id": "C0001"},
            "message": {"ts": "1.000001", "text": "ship it"}, "message_ts": "1.000001",
            "response_url": hook, "action_ts": "1.3"
        })),
    )
    .await;
    assert_eq!(quoted.status, StatusCode::OK);
    let ephemerals = app.slack.ephemerals();
    assert_eq!(ephemerals.len(), 1, "{ephemerals:?}");
    assert_eq!(ephemerals[0]["text"], "Quoted: ship it");

    // Options: the list, never claimed.
    let (options, took) = send_form(&app.http, &url, &interaction(json!({"type": "block_suggestion", "action_id": "pick", "block_id": "b", "value": "ap"}))).await;
    assert!(took < Duration::from_secs(3));
    let options = options.json();
    let values: Vec<&str> = options["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["value"].as_str().unwrap())
        .collect();
    assert_eq!(values, ["apple", "apricot"]);

    // An action by pattern, without an explicit acknowledgement: an empty 200 after its work.
    let (voted, _) = send_form(&app.http, &url, &interaction(json!({
        "type": "block_actions", "channel": {"id": "C0001"},
        "container": {"type": "message", "message_ts": "1.000001", "channel_id": "C0001"},
        "actions": [{"action_id": "vote_yes", "block_id": "b", "value": "y", "action_ts": "5.5"}]
    }))).await;
    assert_eq!((voted.status, voted.body.as_str()), (StatusCode::OK, ""));
    assert_eq!(outcome(&voted), "answered");
    assert_eq!(app.slack.posted().len(), 2);
}

#[tokio::test]
async fn a_view_opened_after_the_acknowledgement_is_not_opened() {
    let app = spawn_bot(
        App::new().shortcut("late", |ctx: Ctx, _s: Shortcut| async move {
            ctx.ack(Ack::empty()).await?;
            ctx.open_view(note_modal()).await?;
            Ok(())
        }),
    )
    .await;
    let (answer, _) = send_form(
        &app.http,
        &app.url("/slack/events"),
        &interaction(json!({"type": "shortcut", "callback_id": "late", "action_ts": "1.2"})),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(outcome(&answer), "failed");
    assert_eq!(app.slack.calls_of("views.open"), 0, "never called");
}

#[tokio::test]
async fn a_response_url_on_another_host_is_refused_before_any_connection() {
    // A listener on 127.0.0.1 that counts connections: the response_url points there.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((_socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    let app = spawn_app().await;
    for url in [
        format!("http://127.0.0.1:{port}/commands/{TEAM}/C0001/1"),
        format!("https://hooks.slack.com.127.0.0.1.nip.io:{port}/commands/x"),
        "https://evil.example/commands/x".to_string(),
    ] {
        let body = form(&[
            ("command", "/once"),
            ("text", "x"),
            ("team_id", TEAM),
            ("api_app_id", APP_ID),
            ("user_id", "U0001"),
            ("channel_id", "C0001"),
            ("trigger_id", &Workspace::trigger_id()),
            ("response_url", &url),
        ]);
        let (answer, _) = send_form(&app.http, &app.url("/slack/events"), &body).await;
        assert_eq!(answer.status, StatusCode::OK, "{url}: {}", answer.body);
        assert_eq!(outcome(&answer), "failed", "{url}");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(connections.load(Ordering::SeqCst), 0, "no connection made");
    assert!(app.slack.posted().is_empty());
    assert_eq!(app.slack.calls_of("response_url"), 0);
}

#[tokio::test]
#[ignore = "needs the built binary"]
async fn a_tampered_form_is_401_and_a_payload_that_is_not_json_is_400_without_retry() {
    let app = spawn_app().await;
    let body = command(&app.slack, "x", &Workspace::trigger_id());
    let headers = form_headers(&body);
    let tampered = body.replace("text=x", "text=y");
    let answer = app
        .http
        .request(
            "POST",
            &app.url("/slack/events"),
            &headers,
            tampered.into_bytes(),
        )
        .await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert_eq!(answer.json()["error"], "invalid_signature");

    let not_json = form(&[("payload", "{not json")]);
    let (answer, _) = send_form(&app.http, &app.url("/slack/events"), &not_json).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.json()["error"], "invalid_payload");
    assert_eq!(answer.headers.get("x-slack-no-retry").unwrap(), "1");
    assert!(app.slack.calls().is_empty() && app.slack.posted().is_empty());
}

#[tokio::test]
async fn slack_once_testing_drives_commands_clicks_views_and_options_in_process() {
    let closed = Arc::new(AtomicUsize::new(0));
    let bot = slack_once::testing::TestBot::start(every_kind(closed).command(
        "/once",
        |ctx: Ctx, c: slack_once::app::Command| async move {
            ctx.ack(Ack::ephemeral("soon")).await?;
            ctx.respond(Respond::in_channel(format!("once: {}", c.text)))
                .await?;
            Ok(())
        },
    ))
    .await;
    let acked = bot.command("/once", "hi").await;
    assert_eq!(acked.body["text"], "soon");
    assert_eq!(acked.outcome, "answered");
    assert_eq!(bot.slack().messages()[0]["text"], "once: hi");
    assert_eq!(bot.shortcut("new_note").await.status, 200);
    let view = bot.slack().views()[0].clone();
    let refused = bot
        .submit_view(&view, json!({"title": {"t": {"value": ""}}}))
        .await;
    assert_eq!(refused.body["response_action"], "errors");
    let taken = bot
        .submit_view(&view, json!({"title": {"t": {"value": "x"}}}))
        .await;
    assert_eq!(taken.body["response_action"], "clear");
    let options = bot.options("pick", "b").await;
    assert_eq!(options.body["options"][0]["value"], "banana");
    let message = bot.slack().messages()[0].clone();
    assert_eq!(
        bot.click("vote_no", "n", Some(&message)).await.outcome,
        "answered"
    );
}

// ---------------------------------------------------------------- deferred mode, processes

/// An ingress's variables with the Slack stand-in and the token: it opens views itself.
fn opening_ingress_vars(stack: &DeferredStack) -> Vec<(&'static str, String)> {
    let mut vars = stack.ingress_vars();
    vars.push(("SLACK_API_URL", stack.slack.base_url.clone()));
    vars.push(("SLACK_BOT_TOKEN", TOKEN.to_string()));
    vars
}

struct DeferredBot {
    stack: DeferredStack,
    ingress: BotProcess,
}

impl std::ops::Deref for DeferredBot {
    type Target = DeferredStack;

    fn deref(&self) -> &DeferredStack {
        &self.stack
    }
}

impl DeferredBot {
    async fn start() -> Self {
        let stack = DeferredStack::start(5).await;
        let ingress = BotProcess::spawn(&opening_ingress_vars(&stack));
        Self { stack, ingress }
    }

    fn worker(&self) -> BotProcess {
        BotProcess::spawn_worker(&self.worker_vars(3, 5))
    }
}

/// A worker killed while its follow-up's post to the response_url is out (`behaviour`: never
/// made, or made and never answered): the queue's redelivery, taken by another worker after
/// the lease, leaves exactly one answer in the channel.
async fn killed_between_ack_and_follow_up(behaviour: SlackFailure) {
    let d = DeferredBot::start().await;
    d.slack.script_method("response_url", [behaviour]);
    let mut a = d.worker();
    let http = HttpClient::default();
    let body = command(&d.slack, "deferred", &Workspace::trigger_id());
    let (answer, took) = send_form(&http, &d.ingress.url(), &body).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert!(took < Duration::from_secs(3));
    assert_eq!(answer.json()["response_type"], "ephemeral");
    assert_eq!(outcome(&answer), "queued");
    assert!(
        eventually(Duration::from_secs(20), || d.slack.calls_of("response_url")
            == 1)
        .await,
        "the worker's follow-up:\n{}",
        a.log()
    );
    a.kill();
    let b = d.worker();
    assert!(
        eventually(Duration::from_secs(30), || d.slack.posted().len() == 1).await,
        "taken over:\n{}",
        b.log()
    );
    // Settled for good: nothing more comes (the message deleted, the claim done).
    let log = b
        .log_when(Duration::from_secs(15), |log| {
            log.contains("outcome=\"answered\"") || log.contains("outcome=\"recovered\"")
        })
        .await;
    assert!(
        log.contains("outcome=\"answered\"") || log.contains("outcome=\"recovered\""),
        "{log}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(d.slack.posted().len(), 1, "one answer");
    assert!(
        d.slack.posted()[0].body["text"]
            .as_str()
            .unwrap()
            .contains("deferred")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn a_worker_killed_before_its_follow_up_reached_slack_leaves_one_answer_after_redelivery() {
    killed_between_ack_and_follow_up(SlackFailure::Unanswered).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn a_worker_killed_after_its_follow_up_reached_slack_leaves_one_answer_after_redelivery() {
    killed_between_ack_and_follow_up(SlackFailure::MadeUnanswered).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn the_modal_example_opens_validates_and_posts_once_in_deferred_mode() {
    let d = DeferredStack::start(5).await;
    let ingress = BotProcess::spawn_example("modal", &[], &opening_ingress_vars(&d));
    let worker = BotProcess::spawn_example("modal", &["worker"], &d.worker_vars(3, 5));
    let http = HttpClient::default();
    let url = ingress.url();
    let (opened, _) = send_form(
        &http,
        &url,
        &interaction(json!({"type": "shortcut", "callback_id": "new_note", "action_ts": "1.2"})),
    )
    .await;
    assert_eq!(
        (opened.status, opened.body.as_str()),
        (StatusCode::OK, ""),
        "{}",
        ingress.log()
    );
    assert_eq!(
        outcome(&opened),
        "queued",
        "the view opened in the ingress; the rest is a worker's"
    );
    let view = d.slack.views()[0].clone();
    let submit = |title: &str| {
        let mut v = view.clone();
        v["state"] = json!({"values": {"title": {"title_input": {"type": "plain_text_input", "value": title}}}});
        interaction(json!({"type": "view_submission", "view": v}))
    };
    let (refused, _) = send_form(&http, &url, &submit(" ")).await;
    assert_eq!(refused.json()["errors"]["title"], "Give the note a title");
    let good = submit("Milk");
    let (taken, _) = send_form(&http, &url, &good).await;
    assert_eq!(
        (taken.status, outcome(&taken).as_str()),
        (StatusCode::OK, "queued")
    );
    send_form(&http, &url, &good).await; // a double submit
    assert!(
        eventually(Duration::from_secs(20), || d.slack.posted().len() == 1).await,
        "{}",
        worker.log()
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let posted = d.slack.posted();
    assert_eq!(posted.len(), 1, "once");
    assert_eq!(posted[0].body["text"], "Saved your note “Milk”.");
    assert_eq!(d.slack.calls_of("views.open"), 1);
}

#[test]
fn every_sample_form_is_the_kind_its_name_says() {
    use slack_once::slack::{Incoming, Kind};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/interactions");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        let body = std::fs::read(&path).unwrap();
        let Ok(Incoming::Interaction(i)) =
            Incoming::parse(Some("application/x-www-form-urlencoded"), &body)
        else {
            panic!("{name} does not parse")
        };
        let kind = match i.kind {
            Kind::Command => "command",
            other => other.as_str(),
        };
        assert!(name.starts_with(kind), "{name} is a {kind}");
        assert_eq!(i.team(), Some("T0001TEAM"), "{name}");
        seen += 1;
    }
    assert_eq!(seen, 12);
}

#[tokio::test]
async fn the_lambda_sample_command_and_submission_are_acknowledged_through_lambda_http() {
    use tower::ServiceExt;
    let vars: std::collections::HashMap<&str, String> = [
        ("SLACK_SIGNING_SECRET", SECRET.to_string()),
        // No token: the follow-ups are logged, not made; the samples' response_url is the
        // stand-in's origin.
        ("SLACK_API_URL", "http://127.0.0.1:4000/api".to_string()),
    ]
    .into_iter()
    .collect();
    let config = slack_once::config::Config::from_lookup(|k| vars.get(k).cloned()).unwrap();
    let app = slack_once::Application::with_parts(
        config,
        Arc::new(slack_once::ledger::MemoryLedger::new()),
        slack_once::reference_app().view_submission(
            "note_modal",
            |ctx: Ctx, _v: ViewSubmission| async move {
                ctx.ack(Ack::clear()).await?;
                Ok(())
            },
        ),
    );
    for (file, body, expected) in [
        (
            "slash_command.json",
            json!({"response_type": "ephemeral", "text": "On it: one answer is coming."}),
            "answered",
        ),
        (
            "view_submission.json",
            json!({"response_action": "clear"}),
            "no_reply",
        ),
    ] {
        let path = format!("{}/events/{file}", env!("CARGO_MANIFEST_DIR"));
        let mut event: Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(
            event["isBase64Encoded"], true,
            "Function URLs encode form bodies"
        );
        slack_once::tools::sign::resign_lambda_event(
            &mut event,
            &slack_once::config::Secret::new(SECRET),
            now_unix(),
        )
        .unwrap();
        let request = lambda_http::request::from_str(&event.to_string()).unwrap();
        let response = app.router().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{file}");
        assert_eq!(
            response.headers()[slack_once::OUTCOME_HEADER],
            expected,
            "{file}"
        );
        let bytes = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(
            serde_json::from_slice::<Value>(&bytes).unwrap(),
            body,
            "{file}"
        );
    }
}

#[tokio::test]
async fn sign_renews_a_forms_trigger_id_and_response_url_and_its_signature_holds() {
    let app = spawn_app().await;
    let sample = std::fs::read(format!(
        "{}/tests/data/interactions/command.form",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    assert!(slack_once::tools::sign::is_form(&sample));
    let now_ms = now_unix() * 1000;
    let fresh = slack_once::tools::sign::freshen_form(&sample, now_ms).replace(
        "http%3A%2F%2F127.0.0.1%3A4000",
        &urlencode(&app.slack.origin()),
    );
    let again = slack_once::tools::sign::freshen_form(&sample, now_ms);
    let field = |body: &str, key: &str| {
        form_urlencoded::parse(body.as_bytes())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
            .unwrap()
    };
    assert!(field(&fresh, "trigger_id").starts_with(&now_ms.to_string()));
    assert_ne!(field(&fresh, "trigger_id"), field(&again, "trigger_id"));
    assert_ne!(
        field(&fresh, "response_url").rsplit('/').next(),
        field(&again, "response_url").rsplit('/').next()
    );
    let command = slack_once::tools::sign::curl_form_command(
        &app.url("/slack/events"),
        &slack_once::config::Secret::new(SECRET),
        now_unix(),
        &fresh,
    );
    assert!(command.contains("application/x-www-form-urlencoded"));
    let (answer, _) = send_form(&app.http, &app.url("/slack/events"), &fresh).await;
    assert_eq!(outcome(&answer), "answered", "{}", answer.body);
    assert_eq!(app.slack.posted().len(), 1);
}

fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

// ---------------------------------------------------------------- deferred mode, in-process

const WORKER: &[(&str, &str)] = &[
    ("SLACK_ONCE_ROLE", "worker"),
    ("DEDUP_TABLE", "in-memory"),
    (
        "WORK_QUEUE_URL",
        "http://127.0.0.1:9/000000000000/in-memory",
    ),
    ("DEDUP_LEASE_SECONDS", "10"),
];

/// A v2 queue message holding `form`, as a deferred ingress sends it.
fn queued_form(form: &str, receive_count: u32) -> slack_once::queue::Received {
    slack_once::queue::Received {
        message_id: "m1".into(),
        receipt_handle: "r1".into(),
        body: json!({"v": 2, "form": form, "received_at_ms": 1}).to_string(),
        receive_count,
    }
}

fn slow_command(pause: Duration) -> App {
    App::new().command(
        "/slow",
        move |ctx: Ctx, c: slack_once::app::Command| async move {
            tokio::time::sleep(pause).await; // the model's call, say: before any write
            ctx.respond(Respond::in_channel(format!("slow: {}", c.text)))
                .await?;
            Ok(())
        },
    )
}

fn slow_form(slack: &SlackStandin) -> String {
    command(slack, "x", &Workspace::trigger_id()).replace("%2Fonce", "%2Fslow")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_interaction_whose_claim_is_live_elsewhere_is_left_on_the_queue() {
    let slack = SlackStandin::start().await;
    let ledger: Arc<dyn slack_once::ledger::Ledger> =
        Arc::new(slack_once::ledger::MemoryLedger::new());
    let app = slack_once::Application::with_parts(
        test_config(&slack, WORKER),
        ledger,
        slow_command(Duration::from_millis(800)),
    );
    let worker = app.worker();
    let message = queued_form(&slow_form(&slack), 1);
    let now = std::time::SystemTime::now();
    let first = {
        let (worker, message) = (worker.clone(), message.clone());
        tokio::spawn(async move {
            worker
                .handle(&message, now, tokio::time::Instant::now(), None, None)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // SQS hands the same message out again while the first worker holds the claim.
    let again = worker
        .handle(
            &queued_form(&form_of(&message), 2),
            now,
            tokio::time::Instant::now(),
            None,
            None,
        )
        .await;
    assert_eq!(
        again,
        slack_once::queue::worker::Disposition::Leave,
        "a live claim elsewhere: left, to come back"
    );
    assert_eq!(
        first.await.unwrap(),
        slack_once::queue::worker::Disposition::Delete
    );
    assert_eq!(slack.posted().len(), 1, "answered once, by the first");
}

fn form_of(message: &slack_once::queue::Received) -> String {
    let v: Value = serde_json::from_str(&message.body).unwrap();
    v["form"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_slower_than_the_hand_off_is_acknowledged_in_time_and_answered_from_the_queue() {
    let slack = SlackStandin::start().await;
    let queue = Arc::new(slack_once::queue::MemoryQueue::new(5));
    let ingress = slack_once::Application::with_queue(
        test_config(&slack, &[]),
        Arc::new(slack_once::ledger::MemoryLedger::new()),
        slow_command(Duration::from_millis(2300)),
        Some(queue.clone() as Arc<dyn slack_once::queue::WorkQueue>),
    );
    let server = ingress.bind().await.unwrap();
    let url = format!("http://{}/slack/events", server.local_addr());
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run_until(async {
        let _ = stopped.await;
    }));
    let http = HttpClient::default();
    let (answer, took) = send_form(&http, &url, &slow_form(&slack)).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert!(took < Duration::from_millis(2900), "{took:?}");
    assert!(answer.body.is_empty(), "acknowledged empty");
    assert_eq!(outcome(&answer), "queued");
    assert_eq!(queue.len(), 1);

    let worker_app = slack_once::Application::with_parts(
        test_config(&slack, WORKER),
        Arc::new(slack_once::ledger::MemoryLedger::new()),
        slow_command(Duration::from_millis(2300)),
    );
    let (stop_worker, worker_stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker_app.worker().run_local(
        queue.clone(),
        2,
        Duration::from_secs(10),
        async {
            let _ = worker_stopped.await;
        },
    ));
    assert!(eventually(Duration::from_secs(10), || slack.posted().len() == 1).await);
    assert!(eventually(Duration::from_secs(5), || queue.is_empty()).await);
    let _ = stop_worker.send(());
    running.await.unwrap();
    assert_eq!(slack.posted().len(), 1);
    assert_eq!(slack.posted()[0].body["text"], "slow: x");
}

#[tokio::test]
async fn slacks_refusal_of_a_used_up_response_url_ends_the_request_failed() {
    let app = spawn_app().await;
    let hook = format!("{}/commands/{TEAM}/C0001/used-up", app.slack.origin());
    for _ in 0..5 {
        let answer = app
            .http
            .request(
                "POST",
                &hook,
                &[("content-type".into(), "application/json".into())],
                br#"{"text":"x"}"#.to_vec(),
            )
            .await;
        assert_eq!(
            answer.body, "ok",
            "Slack answers a response URL with the text ok"
        );
    }
    let body = form(&[
        ("command", "/once"),
        ("text", "late"),
        ("team_id", TEAM),
        ("api_app_id", APP_ID),
        ("user_id", "U0001"),
        ("channel_id", "C0001"),
        ("trigger_id", &Workspace::trigger_id()),
        ("response_url", &hook),
    ]);
    let (answer, _) = send_form(&app.http, &app.url("/slack/events"), &body).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(outcome(&answer), "failed", "used_url: no retry can fix it");
    assert!(app.slack.posted().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_may_have_gone_out_where_the_bot_cannot_read_is_not_sent_again() {
    let slack = SlackStandin::start().await;
    // The first run's post reaches Slack and its answer never comes back.
    slack.script_method("response_url", [SlackFailure::MadeUnanswered]);
    let mut vars = WORKER.to_vec();
    vars.retain(|(k, _)| *k != "DEDUP_LEASE_SECONDS");
    vars.push(("DEDUP_LEASE_SECONDS", "2"));
    let app = slack_once::Application::with_parts(
        test_config(&slack, &vars),
        Arc::new(slack_once::ledger::MemoryLedger::new()),
        slow_command(Duration::ZERO),
    );
    let worker = app.worker();
    let message = queued_form(&slow_form(&slack), 1);
    let handle = |m: slack_once::queue::Received| {
        let worker = worker.clone();
        async move {
            worker
                .handle(
                    &m,
                    std::time::SystemTime::now(),
                    tokio::time::Instant::now(),
                    None,
                    None,
                )
                .await
        }
    };
    assert!(
        matches!(
            handle(message.clone()).await,
            slack_once::queue::worker::Disposition::Retry { .. }
        ),
        "its fate unknown: released, handed back for a redelivery soon"
    );
    assert_eq!(slack.posted().len(), 1);
    // A command run where the bot is not a member: its history cannot be read, now or later.
    slack.fail_lookups("not_in_channel");
    let second = queued_form(&form_of(&message), 2);
    assert!(
        matches!(
            handle(second).await,
            slack_once::queue::worker::Disposition::Retry { .. }
        ),
        "held: a later receive may be let in (the bot invited)"
    );
    assert_eq!(slack.posted().len(), 1, "not sent again");
    // The last receive: no receive follows, none could look.
    let last = queued_form(&form_of(&message), slack_once::config::DEFAULT_MAX_RECEIVES);
    assert_eq!(
        handle(last).await,
        slack_once::queue::worker::Disposition::Delete,
        "settled at most once on the last receive rather than posted blind"
    );
    assert_eq!(slack.posted().len(), 1, "not sent again");
    assert_eq!(slack.calls_of("response_url"), 1);
}

#[tokio::test]
async fn an_acknowledgement_chosen_by_an_event_listener_changes_nothing() {
    let app = spawn_bot(App::new().app_mention(
        |ctx: Ctx, _m: slack_once::app::AppMention| async move {
            // Events are acknowledged by the pipeline: an Ack here is ignored, errors or not.
            ctx.ack(Ack::errors([("b", "no")])).await?;
            ctx.reply("answered").await?;
            Ok(())
        },
    ))
    .await;
    assert_eq!(
        app.send(&app_mention("EvAckEv", "hi"), None)
            .await
            .outcome(),
        "answered"
    );
    assert_eq!(
        app.send(&app_mention("EvAckEv", "hi"), Some(1))
            .await
            .outcome(),
        "duplicate",
        "done, not released"
    );
    assert_eq!(app.slack.posted().len(), 1);
}

/// On Lambda, a deferred ingress with no bot token cannot open a view: the call fails and says
/// why, rather than being logged as local mode logs calls, taken as made and handed on done.
#[tokio::test]
async fn on_lambda_a_deferred_ingress_without_a_token_does_not_take_a_view_for_opened() {
    use slack_once::config::Config;
    use slack_once::ledger::MemoryLedger;
    use slack_once::queue::{MemoryQueue, WorkQueue};
    use tower::ServiceExt;
    let vars = [
        ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9".to_string()),
        ("SLACK_SIGNING_SECRET", "lambda-secret".to_string()),
        (
            "WORK_QUEUE_URL",
            "http://127.0.0.1:9/000000000000/work".to_string(),
        ),
    ];
    let config = Config::from_lookup(|k| {
        vars.iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| v.clone())
    })
    .expect("a Lambda deferred ingress's configuration");
    let app = App::new().shortcut("new_note", |ctx: Ctx, _s: Shortcut| async move {
        ctx.open_view(note_modal()).await?;
        ctx.ack(Ack::empty()).await?;
        Ok(())
    });
    let queue = Arc::new(MemoryQueue::new(5));
    let router = slack_once::Application::with_queue(
        config,
        Arc::new(MemoryLedger::new()),
        app,
        Some(queue.clone() as Arc<dyn WorkQueue>),
    )
    .router();
    let body = interaction(json!({
        "type": "shortcut", "callback_id": "new_note", "action_ts": "1767225600.000300",
        "team": {"id": "T0001"}, "user": {"id": "U0001", "team_id": "T0001"},
        "api_app_id": "A0001", "trigger_id": Workspace::trigger_id(),
    }));
    let now = slack_once::clock::now_ms() / 1000;
    let signature = slack_once::slack::signature::sign(
        &slack_once::config::Secret::new("lambda-secret"),
        now,
        body.as_bytes(),
    );
    let mut context = lambda_http::Context::default();
    context.deadline = slack_once::clock::now_ms() + 10_000;
    let mut request = http::Request::post("/slack/events")
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-slack-request-timestamp", now.to_string())
        .header("x-slack-signature", signature)
        .body(axum::body::Body::from(body))
        .unwrap();
    request.extensions_mut().insert(context);
    let response = router.oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    assert!(
        !status.is_success(),
        "{status}: {}",
        String::from_utf8_lossy(&bytes)
    );
    assert!(queue.is_empty(), "nothing handed on as done");
}

/// Synchronous mode: Slack sends a command once, so a transient failure of its follow-up (the
/// `response_url` post answered 500) ends it failed, with its reason, rather than released for
/// a delivery that never comes (the soak found it released, with no reason recorded).
#[tokio::test]
async fn a_commands_one_delivery_is_its_last_a_transient_failure_ends_it_failed_with_its_reason() {
    let ledger = Arc::new(slack_once::ledger::MemoryLedger::new());
    let app = spawn_app_with(Options {
        ledger: Some(ledger.clone()),
        ..Default::default()
    })
    .await;
    app.slack
        .script_method("response_url", [SlackFailure::Status(500)]);
    let body = command(&app.slack, "hello", &Workspace::trigger_id());
    let (answer, _) = send_form(&app.http, &app.url("/slack/events"), &body).await;
    assert!(!answer.status.is_success(), "{}", answer.body);
    let statuses = ledger.statuses();
    assert_eq!(statuses.len(), 1, "{statuses:?}");
    assert_eq!(
        statuses[0].1,
        slack_once::ledger::Status::Failed,
        "{statuses:?}"
    );
    assert!(app.slack.posted().is_empty());
}

/// An options request (`block_suggestion`) is never claimed: a state change there has no claim
/// to be recorded with, so it is refused with an error that says why, every time (before, every
/// suggestion shared one key, and an `update` there was applied once ever, then silently
/// skipped as made); a read goes on; the action that follows the choice changes state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_change_in_an_options_request_is_refused_not_skipped() {
    use slack_once::app::{App, BlockAction, Ctx, OptionsRequest};
    let errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = errors.clone();
    let day = Duration::from_secs(86_400);
    let app = App::new()
        .options("pick", move |ctx: Ctx, _q: OptionsRequest| {
            let seen = seen.clone();
            async move {
                let changed = ctx
                    .state()
                    .update("typed", day, |n: Option<u64>| n.unwrap_or(0) + 1)
                    .await;
                seen.lock().unwrap().push(match changed {
                    Ok(n) => format!("changed to {n}"),
                    Err(e) => e.to_string(),
                });
                let read = ctx.state().get::<u64>("typed").await?;
                ctx.ack(slack_once::app::Ack::options([(
                    format!("{:?}", read.map(|r| r.value)),
                    "x".to_string(),
                )]))
                .await?;
                Ok(())
            }
        })
        .action("chosen", move |ctx: Ctx, _a: BlockAction| async move {
            ctx.state()
                .update("typed", day, |n: Option<u64>| n.unwrap_or(0) + 1)
                .await?;
            Ok(())
        });
    let bot = slack_once::testing::TestBot::start(app).await;
    for _ in 0..2 {
        let options = bot.options("pick", "a").await;
        assert_eq!(
            options.body["options"][0]["text"]["text"], "None",
            "{:?}",
            options.body
        );
    }
    let errors = errors.lock().unwrap().clone();
    assert_eq!(errors.len(), 2);
    for e in &errors {
        assert!(e.contains("block_suggestion"), "a clear error: {e}");
        assert!(e.contains("\"typed\""), "{e}");
    }
    assert_eq!(bot.click("chosen", "x", None).await.outcome, "no_reply");
    let options = bot.options("pick", "a").await;
    assert_eq!(options.body["options"][0]["text"]["text"], "Some(1)");
}
