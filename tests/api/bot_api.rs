//! The bot API: listeners, several Slack writes per event as journaled steps, one answer per
//! message across event ids, and the examples, each run as a process against the Slack
//! stand-in.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::StatusCode;
use slack_once::app::{App, Ctx, Listener, MessageEvent, Settle};
use slack_once::ledger::{Ledger, MemoryLedger, Status};

use crate::helpers::*;

/// A `message` event (`message.channels`, or `message.im` with `channel_type` "im").
fn message(
    event_id: &str,
    channel: &str,
    channel_type: &str,
    ts: &str,
    text: &str,
    client_msg_id: Option<&str>,
) -> String {
    let mut event = serde_json::json!({
        "type": "message", "channel": channel, "channel_type": channel_type, "user": "U0001",
        "text": text, "ts": ts, "event_ts": ts, "team": "T0001"
    });
    if let Some(id) = client_msg_id {
        event["client_msg_id"] = id.into();
    }
    serde_json::json!({
        "token": "unused", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
        "event_id": event_id, "event_time": 1_700_000_000, "event": event,
        "authorizations": [{"team_id": "T0001", "user_id": BOT_USER, "is_bot": true}]
    })
    .to_string()
}

/// An `app_mention` of the message `ts` in `channel`.
fn mention_of(
    event_id: &str,
    channel: &str,
    ts: &str,
    text: &str,
    client_msg_id: Option<&str>,
) -> String {
    let mut body: serde_json::Value = serde_json::from_str(&app_mention(event_id, text)).unwrap();
    body["event"]["channel"] = channel.into();
    body["event"]["ts"] = ts.into();
    body["event"]["event_ts"] = ts.into();
    if let Some(id) = client_msg_id {
        body["event"]["client_msg_id"] = id.into();
    }
    body.to_string()
}

/// A fixture of tests/data/events with its own event id.
fn fixture(name: &str, event_id: &str) -> String {
    let path = format!(
        "{}/tests/data/events/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut body: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    body["event_id"] = event_id.into();
    body["api_app_id"] = APP_ID.into();
    body["authorizations"][0]["user_id"] = BOT_USER.into();
    body.to_string()
}

/// An app that replies "heard" in the thread of every message it hears.
fn replier(per_event_id: bool) -> App {
    let listener = Listener::message_where(
        |_: &MessageEvent| true,
        |ctx: Ctx, _m: MessageEvent| async move {
            ctx.reply("heard").await?;
            Ok(())
        },
    );
    App::new().listen(if per_event_id {
        listener.per_event_id()
    } else {
        listener
    })
}

// ---------------------------------------------------------------- one message, one answer

#[tokio::test]
async fn an_app_mention_and_a_message_event_for_the_same_ts_get_one_answer() {
    let app = spawn_bot(replier(false)).await;
    let ts = "1700000123.000100";
    let mention = mention_of("EvTwinA", "C0001", ts, "hello", None);
    let channel_message = message("EvTwinB", "C0001", "channel", ts, "<@UBOT> hello", None);
    let (a, b) = tokio::join!(app.send(&mention, None), app.send(&channel_message, None));
    let outcomes = [a.outcome(), b.outcome()];
    assert!(
        outcomes.contains(&"answered".to_string()),
        "{outcomes:?}: {} / {}",
        a.body,
        b.body
    );
    // The loser either found the message answered or saw the live claim (Slack then retries).
    for answer in [&a, &b] {
        assert!(
            matches!(answer.outcome().as_str(), "answered" | "duplicate" | "")
                && matches!(answer.status, StatusCode::OK | StatusCode::CONFLICT),
            "{}",
            answer.body
        );
    }
    let retry = app.send(&channel_message, Some(1)).await;
    assert_eq!(retry.outcome(), "duplicate");
    assert_eq!(app.slack.posted().len(), 1, "one message, one answer");
}

#[tokio::test]
async fn a_listener_that_opts_out_answers_each_event_of_a_message() {
    let app = spawn_bot(replier(true)).await;
    let ts = "1700000124.000100";
    app.send(&mention_of("EvOptA", "C0001", ts, "hello", None), None)
        .await;
    app.send(
        &message("EvOptB", "C0001", "channel", ts, "hello", None),
        None,
    )
    .await;
    assert_eq!(
        app.slack.posted().len(),
        2,
        "keyed by event id: two answers"
    );
}

#[tokio::test]
async fn a_phantom_copy_with_a_new_event_id_and_no_retry_header_gets_no_second_answer() {
    let app = spawn_app().await;
    let ts = "1700000125.000100";
    let first = app
        .send(&mention_of("EvPhantom1", "C0001", ts, "once", None), None)
        .await;
    assert_eq!(first.outcome(), "answered");
    // Minutes later (here at once) Slack sends the same message again under new event ids.
    for n in 2..=11 {
        let copy = app
            .send(
                &mention_of(&format!("EvPhantom{n}"), "C0001", ts, "once", None),
                None,
            )
            .await;
        assert_eq!(copy.outcome(), "duplicate", "copy {n}: {}", copy.body);
    }
    assert_eq!(app.slack.posted().len(), 1);
}

#[tokio::test]
async fn copies_of_one_client_message_under_another_ts_get_one_answer() {
    let app = spawn_bot(replier(false)).await;
    let client_msg_id = "5f0c2a57-3c4e-4a8e-9c1f-2b8b0f7a1e99";
    let first = message(
        "EvCmid1",
        "D0001",
        "im",
        "1700000126.000100",
        "hi",
        Some(client_msg_id),
    );
    let again = message(
        "EvCmid2",
        "D0001",
        "im",
        "1700000127.000200",
        "hi",
        Some(client_msg_id),
    );
    assert_eq!(app.send(&first, None).await.outcome(), "answered");
    assert_eq!(app.send(&again, None).await.outcome(), "duplicate");
    assert_eq!(app.slack.posted().len(), 1);
}

#[tokio::test]
async fn an_event_no_listener_takes_is_acknowledged_and_never_claimed() {
    let ledger = Arc::new(MemoryLedger::new());
    let app = spawn_app_with(Options {
        ledger: Some(ledger.clone() as Arc<dyn Ledger>),
        ..Default::default()
    })
    .await;
    let answer = app.send(&fixture("reaction_added", "EvNobody"), None).await;
    assert_eq!(
        (answer.status, answer.outcome().as_str()),
        (StatusCode::OK, "no_listener")
    );
    assert!(ledger.is_empty(), "nothing claimed");
}

// ---------------------------------------------------------------- steps

#[tokio::test]
async fn a_handler_that_fails_after_step_1_is_released_and_the_retry_resumes_at_step_2() {
    let runs = Arc::new(Mutex::new(0));
    let bot = App::new().message_where(|_: &MessageEvent| true, {
        let runs = runs.clone();
        move |ctx: Ctx, m: MessageEvent| {
            let runs = runs.clone();
            async move {
                ctx.react(&m.channel, &m.ts, "eyes").await?;
                let first = {
                    let mut runs = runs.lock().unwrap();
                    *runs += 1;
                    *runs == 1
                };
                if first {
                    return Err("the model timed out".into());
                }
                ctx.reply("done").await?;
                Ok(())
            }
        }
    });
    let app = spawn_bot(bot).await;
    let body = message(
        "EvResume",
        "C0001",
        "channel",
        "1700000128.000100",
        "go",
        None,
    );
    assert_eq!(
        app.send(&body, None).await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(retry.outcome(), "answered", "{}", retry.body);
    assert_eq!(
        app.slack.calls_of("reactions.add"),
        1,
        "step 1 replayed from the journal"
    );
    assert_eq!(app.slack.posted().len(), 1);
    assert_eq!(*runs.lock().unwrap(), 2, "the handler ran twice");
}

#[tokio::test]
async fn an_ephemeral_whose_fate_is_unknown_is_not_sent_again() {
    let bot = App::new().message_where(
        |_: &MessageEvent| true,
        |ctx: Ctx, m: MessageEvent| async move {
            ctx.post_ephemeral(&m.channel, "U0001", "only you see this")
                .await?;
            ctx.reply("public").await?;
            Ok(())
        },
    );
    let app = spawn_bot(bot).await;
    // Sent, but Slack answers internal_error: the delivery cannot know.
    app.slack.script_method(
        "chat.postEphemeral",
        [SlackFailure::MadeThenCode("internal_error")],
    );
    let body = message(
        "EvEphemeral",
        "C0001",
        "channel",
        "1700000129.000100",
        "x",
        None,
    );
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    // Not sent again, the listener goes on (its reply is made), and the event ends failed:
    // whether the person saw the ephemeral cannot be known, so it is never said answered.
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(
        (retry.status, retry.outcome()),
        (StatusCode::OK, "failed".to_string()),
        "{}",
        retry.body
    );
    assert_eq!(app.slack.ephemerals().len(), 1, "at most once");
    assert_eq!(app.slack.posted().len(), 1);
    assert_eq!(
        app.send(&body, Some(2)).await.outcome(),
        "already_failed",
        "and stays so"
    );
}

#[tokio::test]
async fn a_listener_whose_writes_change_between_runs_ends_the_event_failed() {
    let runs = Arc::new(Mutex::new(0));
    let bot = App::new().message_where(|_: &MessageEvent| true, {
        let runs = runs.clone();
        move |ctx: Ctx, m: MessageEvent| {
            let runs = runs.clone();
            async move {
                let first = {
                    let mut runs = runs.lock().unwrap();
                    *runs += 1;
                    *runs == 1
                };
                if first {
                    ctx.react(&m.channel, &m.ts, "eyes").await?;
                } else {
                    ctx.reply("something else").await?;
                }
                Ok(())
            }
        }
    });
    let ledger = Arc::new(MemoryLedger::new());
    let app = spawn_app_with(Options {
        app: Some(bot),
        ledger: Some(ledger.clone() as Arc<dyn Ledger>),
        ..Default::default()
    })
    .await;
    app.slack
        .script_method("reactions.add", [SlackFailure::Status(500)]);
    let body = message(
        "EvNondet",
        "C0001",
        "channel",
        "1700000130.000100",
        "x",
        None,
    );
    assert_eq!(app.send(&body, None).await.status, StatusCode::BAD_GATEWAY);
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(
        (retry.status, retry.outcome().as_str()),
        (StatusCode::OK, "failed"),
        "{}",
        retry.body
    );
    let key = slack_once::slack::envelope::EventId::try_from(message_key(
        "T0001",
        "C0001",
        "1700000130.000100",
    ))
    .unwrap();
    assert_eq!(ledger.status(&key), Some(Status::Failed));
    assert_eq!(app.slack.posted().len(), 0);
}

#[tokio::test]
async fn reads_go_straight_to_slack_and_the_context_knows_its_deadline() {
    let seen = Arc::new(Mutex::new(None));
    let bot = App::new().message_where(|_: &MessageEvent| true, {
        let seen = seen.clone();
        move |ctx: Ctx, m: MessageEvent| {
            let seen = seen.clone();
            async move {
                let user = ctx.user_info(m.user.as_deref().unwrap_or("U0001")).await?;
                let channel = ctx.conversation_info(&m.channel).await?;
                *seen.lock().unwrap() = Some((user, channel, ctx.remaining()));
                let generic = ctx
                    .call(
                        "pins.add",
                        serde_json::json!({"channel": m.channel, "timestamp": m.ts}),
                        Settle::Idempotent,
                    )
                    .await?;
                assert_eq!(generic["ok"], true);
                Ok(())
            }
        }
    });
    let app = spawn_app_with(Options {
        app: Some(bot),
        vars: vec![("DEDUP_LEASE_SECONDS", "8".into())],
        ..Default::default()
    })
    .await;
    let body = message(
        "EvReads",
        "C0001",
        "channel",
        "1700000131.000100",
        "x",
        None,
    );
    assert_eq!(app.send(&body, None).await.outcome(), "answered");
    let (user, channel, remaining) = seen.lock().unwrap().clone().unwrap();
    assert_eq!(user["name"], "name-of-U0001");
    assert_eq!(channel["name"], "general");
    assert!(
        remaining <= Duration::from_secs(8) && remaining > Duration::from_secs(4),
        "{remaining:?}"
    );
    assert_eq!(app.slack.calls_of("pins.add"), 1);
    assert_eq!(app.slack.calls_of("users.info"), 1);
}

#[tokio::test]
#[ignore = "needs DynamoDB Local"]
async fn the_first_step_rides_on_the_claim_and_each_further_step_costs_one_ledger_write() {
    let endpoint = dynamodb_endpoint();
    let (_, ledger) = fresh_table(&endpoint).await;
    let bot = App::new().message_where(
        |_: &MessageEvent| true,
        |ctx: Ctx, m: MessageEvent| async move {
            ctx.react(&m.channel, &m.ts, "eyes").await?;
            let posted = ctx.reply("thinking").await?;
            ctx.update(&posted.channel, &posted.ts, "done").await?;
            Ok(())
        },
    );
    let app = spawn_app_with(Options {
        app: Some(bot),
        ledger: Some(ledger.clone() as Arc<dyn Ledger>),
        ..Default::default()
    })
    .await;
    let body = message("EvCost", "C0001", "channel", "1700000132.000100", "x", None);
    let before = ledger.requests_sent();
    assert_eq!(app.send(&body, None).await.outcome(), "answered");
    let writes = ledger.requests_sent() - before;
    println!("bot API: 3 steps cost {writes} ledger writes (claim + 2 intents + completion)");
    assert_eq!(
        writes, 4,
        "the claim stands for step 1's intent; one write per further step; the completion"
    );
    let before = ledger.requests_sent();
    assert_eq!(app.send(&body, Some(1)).await.outcome(), "duplicate");
    assert_eq!(ledger.requests_sent() - before, 1);
}

// ---------------------------------------------------------------- the examples

async fn example_app(name: &str, vars: &[(&'static str, String)]) -> (SlackStandin, BotProcess) {
    let slack = SlackStandin::start().await;
    let mut all = vec![
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
    ];
    all.extend(vars.iter().cloned());
    let bot = BotProcess::spawn_example(name, &[], &all);
    (slack, bot)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn the_echo_example_answers_a_mention_in_its_thread() {
    let (slack, bot) = example_app("echo", &[]).await;
    let http = HttpClient::default();
    let answer = deliver(
        &http,
        &bot.url(),
        &app_mention("EvEcho", "<!here> ping"),
        None,
    )
    .await;
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);
    let post = &slack.posted()[0];
    assert_eq!(post.body["text"], "You said: @\u{200B}here ping");
    assert_eq!(post.body["thread_ts"], ts_of("EvEcho").as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn the_thinking_example_posts_a_placeholder_and_updates_it_with_the_answer() {
    let (slack, bot) = example_app("thinking", &[("THINKING_MS", "300".into())]).await;
    let http = HttpClient::default();
    let answer = deliver(&http, &bot.url(), &app_mention("EvThink", "why?"), None).await;
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);
    let posted = slack.posted();
    assert_eq!(posted.len(), 1);
    assert!(
        posted[0].body["text"]
            .as_str()
            .unwrap()
            .starts_with("Here is what I think about “why?”")
    );
    assert_eq!(
        slack.reactions(),
        [("C0001".into(), ts_of("EvThink"), "eyes".into())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn the_reactions_example_reacts_to_ship_and_waves_back() {
    let (slack, bot) = example_app("reactions", &[]).await;
    let http = HttpClient::default();
    let body = message(
        "EvShip",
        "C0789CHAN",
        "channel",
        "1700000133.000100",
        "we ship today",
        None,
    );
    assert_eq!(
        deliver(&http, &bot.url(), &body, None).await.outcome(),
        "answered"
    );
    assert_eq!(
        slack.reactions(),
        [(
            "C0789CHAN".into(),
            "1700000133.000100".into(),
            "rocket".into()
        )]
    );
    let mut wave: serde_json::Value =
        serde_json::from_str(&fixture("reaction_added", "EvWave")).unwrap();
    wave["event"]["reaction"] = "wave".into();
    let answer = deliver(&http, &bot.url(), &wave.to_string(), None).await;
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);
    let post = &slack.posted()[0];
    assert_eq!(post.body["thread_ts"], "1767225601.000200");
    assert!(post.body["text"].as_str().unwrap().contains(":wave: back"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn the_welcome_example_greets_a_new_member_from_the_user_object_in_a_dm() {
    let (slack, bot) = example_app("welcome", &[]).await;
    let http = HttpClient::default();
    let body = fixture("team_join", "EvJoin");
    assert_eq!(
        deliver(&http, &bot.url(), &body, None).await.outcome(),
        "answered"
    );
    assert_eq!(
        deliver(&http, &bot.url(), &body, Some(1)).await.outcome(),
        "duplicate"
    );
    let opened = slack.calls();
    assert_eq!(opened[0].0, "conversations.open");
    assert_eq!(opened[0].1["users"], "W0NEWUSER");
    let posted = slack.posted();
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0].body["channel"], "DW0NEWUSER");
    assert_eq!(posted[0].body["blocks"][0]["type"], "header");
    assert_eq!(posted[0].body["text"], "Welcome, New Person!");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn the_deploy_example_takes_a_command_like_message_and_makes_five_writes() {
    let (slack, bot) = example_app("deploy", &[]).await;
    let http = HttpClient::default();
    let body = message(
        "EvDeploy",
        "C0001",
        "channel",
        "1700000134.000100",
        "deploy api to prod",
        None,
    );
    assert_eq!(
        deliver(&http, &bot.url(), &body, None).await.outcome(),
        "answered"
    );
    let other = message(
        "EvChat",
        "C0001",
        "channel",
        "1700000135.000100",
        "deploying is fun",
        None,
    );
    assert_eq!(
        deliver(&http, &bot.url(), &other, None).await.outcome(),
        "no_listener"
    );
    let posted = slack.posted();
    assert_eq!(posted.len(), 1);
    assert!(
        posted[0].body["text"].as_str().unwrap().contains("api v1."),
        "{}",
        posted[0].body
    );
    assert!(
        posted[0].body["text"]
            .as_str()
            .unwrap()
            .ends_with("is live on prod")
    );
    let names: Vec<String> = slack.reactions().into_iter().map(|r| r.2).collect();
    assert_eq!(names, ["eyes", "white_check_mark"]);
}

// ---------------------------------------------------------------- a crash at each step

/// Where process A dies while the thinking example answers: at an intent (before or after
/// DynamoDB applies it), during a Slack call that was applied, or before the completion.
#[derive(Clone, Copy, Debug)]
enum KillAt {
    /// The claim (which stands for the reaction's intent), held as `HoldAt` says.
    Claim(HoldAt),
    /// The reaction is made, its answer never comes back.
    ReactionMade,
    /// The `n`-th step write (1: the placeholder's intent, 2: the remembered answer, 3: the
    /// update's intent).
    Intent(usize, HoldAt),
    /// The placeholder is posted, its answer never comes back.
    PlaceholderPosted,
    BeforeCompletion,
}

/// The thinking example on DynamoDB Local: A gets the original and is SIGKILLed at `at`;
/// Slack's retries go to B. The writes Slack saw must be those of one answer.
async fn thinking_killed(at: KillAt) {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let slack = SlackStandin::start().await;
    let proxy = LedgerProxy::start(&endpoint).await;
    let vars = |via: &str| {
        let mut vars = bot_vars(&slack, via, &table);
        vars.push(("DEDUP_LEASE_SECONDS", "2".to_string()));
        vars.push(("THINKING_MS", "200".to_string()));
        vars
    };
    let mut a = BotProcess::spawn_example("thinking", &[], &vars(&proxy.url));
    let b = BotProcess::spawn_example("thinking", &[], &vars(&endpoint));
    let id = format!("EvKill{at:?}").replace(|c: char| !c.is_ascii_alphanumeric(), "");
    let body = app_mention(&id, "what now?");
    match at {
        KillAt::Claim(how) => proxy.hold_next(LedgerOp::Claim, how),
        KillAt::ReactionMade => {
            slack.script_method("reactions.add", [SlackFailure::MadeUnanswered])
        }
        KillAt::Intent(n, how) => proxy.hold_nth(LedgerOp::Intent, n, how),
        KillAt::PlaceholderPosted => slack.script([SlackFailure::MadeUnanswered]),
        KillAt::BeforeCompletion => proxy.hold_next(LedgerOp::Complete, HoldAt::BeforeForwarding),
    }
    let original = {
        let (http, url, body) = (HttpClient::default(), a.url(), body.clone());
        let headers = signed_headers(SECRET, now_unix(), body.as_bytes());
        tokio::spawn(async move {
            http.try_request("POST", &url, &headers, body.into_bytes())
                .await
        })
    };
    match at {
        KillAt::PlaceholderPosted => {
            assert!(eventually(Duration::from_secs(10), || !slack.posted().is_empty()).await);
        }
        KillAt::ReactionMade => {
            assert!(eventually(Duration::from_secs(10), || !slack.reactions().is_empty()).await);
        }
        _ => proxy.wait_held().await,
    }
    a.kill();
    original.abort();

    // Slack's retries, to B: retry 1 may meet A's live lease; the next comes after it.
    let http = HttpClient::default();
    let mut statuses = Vec::new();
    for retry in 1..=3 {
        tokio::time::sleep(if retry == 1 {
            Duration::from_millis(200)
        } else {
            Duration::from_millis(2600)
        })
        .await;
        let answer = deliver(&http, &b.url(), &body, Some(retry)).await;
        statuses.push(answer.status.as_u16());
        if answer.status.is_success() {
            break;
        }
    }
    let posted = slack.posted();
    println!(
        "thinking, killed at {at:?}: deliveries {statuses:?}; placeholders {}; reactions.add calls {}, chat.update calls {}, look-ups {}",
        posted.len(),
        slack.calls_of("reactions.add"),
        slack.calls_of("chat.update"),
        slack.lookup_queries().len()
    );
    assert_eq!(
        statuses.last(),
        Some(&200),
        "answered: {statuses:?}\n{}",
        b.log()
    );
    assert_eq!(posted.len(), 1, "{at:?}: no second placeholder");
    assert!(
        posted[0].body["text"]
            .as_str()
            .unwrap()
            .starts_with("Here is what I think"),
        "{at:?}: the placeholder was updated with the answer: {}",
        posted[0].body
    );
    assert_eq!(
        slack.reactions(),
        [("C0001".to_string(), ts_of(&id), "eyes".to_string())],
        "{at:?}: one reaction"
    );
}

/// One test per crash point.
macro_rules! killed_at {
    ($($name:ident: $at:expr_2021;)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "needs DynamoDB Local and the built binary"]
            async fn $name() {
                thinking_killed($at).await;
            }
        )*
    };
}

killed_at! {
    killed_before_the_claim: KillAt::Claim(HoldAt::BeforeForwarding);
    killed_after_the_claim_before_reacting: KillAt::Claim(HoldAt::AfterForwarding);
    killed_after_the_reaction_was_made_before_its_answer: KillAt::ReactionMade;
    killed_after_reacting_before_the_placeholders_intent: KillAt::Intent(1, HoldAt::BeforeForwarding);
    killed_after_the_placeholders_intent_before_posting: KillAt::Intent(1, HoldAt::AfterForwarding);
    killed_after_the_placeholder_was_posted_the_takeover_updates_the_same_message: KillAt::PlaceholderPosted;
    killed_before_the_answer_is_remembered: KillAt::Intent(2, HoldAt::BeforeForwarding);
    killed_after_the_answer_is_remembered: KillAt::Intent(2, HoldAt::AfterForwarding);
    killed_before_the_updates_intent: KillAt::Intent(3, HoldAt::BeforeForwarding);
    killed_after_the_updates_intent: KillAt::Intent(3, HoldAt::AfterForwarding);
    killed_before_the_completion: KillAt::BeforeCompletion;
}

// ---------------------------------------------------------------- deferred mode

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn in_deferred_mode_a_four_second_handler_is_acknowledged_at_once_and_answered_once() {
    let dynamodb = dynamodb_endpoint();
    let sqs = sqs_endpoint();
    let (table, _) = fresh_table(&dynamodb).await;
    let slack = SlackStandin::start().await;
    let queue = TestQueue::create(&sqs, 5).await;
    // The same example binary in both roles, as on Lambda.
    let ingress = BotProcess::spawn_example("thinking", &[], &ingress_vars(&queue, &sqs));
    let mut vars = worker_vars(&slack, &dynamodb, &table, &queue, &sqs, 60, 5);
    vars.push(("THINKING_MS", "4000".to_string()));
    let _worker = BotProcess::spawn_example("thinking", &["worker"], &vars);
    let http = HttpClient::default();
    let started = std::time::Instant::now();
    let answer = deliver(
        &http,
        &ingress.url(),
        &app_mention("EvSlowThink", "hmm"),
        None,
    )
    .await;
    assert_eq!(answer.outcome(), "queued");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        eventually(Duration::from_secs(30), || slack
            .posted()
            .first()
            .is_some_and(|p| p.body["text"]
                .as_str()
                .unwrap_or("")
                .starts_with("Here is what")))
        .await,
        "answered by the worker"
    );
    assert_eq!(slack.posted().len(), 1);
    assert_eq!(slack.calls_of("reactions.add"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn the_welcome_example_killed_after_its_dm_is_taken_over_without_a_second_welcome() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let slack = SlackStandin::start().await;
    // The DM is posted, its answer never comes back: then A dies.
    slack.script([SlackFailure::MadeUnanswered]);
    let vars = || {
        let mut vars = bot_vars(&slack, &endpoint, &table);
        vars.push(("DEDUP_LEASE_SECONDS", "2".to_string()));
        vars
    };
    let mut a = BotProcess::spawn_example("welcome", &[], &vars());
    let b = BotProcess::spawn_example("welcome", &[], &vars());
    let body = fixture("team_join", "EvJoinKilled");
    let original = {
        let (http, url, body) = (HttpClient::default(), a.url(), body.clone());
        let headers = signed_headers(SECRET, now_unix(), body.as_bytes());
        tokio::spawn(async move {
            http.try_request("POST", &url, &headers, body.into_bytes())
                .await
        })
    };
    assert!(eventually(Duration::from_secs(10), || !slack.posted().is_empty()).await);
    a.kill();
    original.abort();
    // Slack's retry after the lease, to B: `team_join` is keyed by its event id.
    tokio::time::sleep(Duration::from_millis(2600)).await;
    let http = HttpClient::default();
    let retry = deliver(&http, &b.url(), &body, Some(1)).await;
    assert_eq!(retry.outcome(), "recovered", "{}\n{}", retry.body, b.log());
    assert_eq!(slack.posted().len(), 1, "no second welcome");
    let looked = slack.lookup_queries();
    assert_eq!(looked.len(), 1, "the DM's history was read once");
    assert_eq!(looked[0]["channel"], "DW0NEWUSER");
    assert!(!looked[0].contains_key("ts"), "a DM, not a thread");
    let at = |key: &str| slack_once::testing::micros(&looked[0][key]).unwrap();
    assert!(
        at("oldest") > slack_once::testing::micros("1767225608.000900").unwrap()
            && at("oldest") < at("latest"),
        "the earlier claim's window, after the event's own time: {:?}",
        looked[0]
    );
    assert_eq!(
        slack.calls_of("conversations.open"),
        1,
        "step 1's result (the DM's id) was recorded with step 2's intent: replayed, not called"
    );
}

#[tokio::test]
async fn test_bot_acts_as_anyone_anywhere_sends_again_and_keeps_its_metrics_lines() {
    use slack_once::testing::TestBot;
    let bot = TestBot::start(
        App::new()
            .message_where(
                |m: &MessageEvent| m.mention,
                |ctx: Ctx, m: MessageEvent| async move {
                    let who = m.user.clone().unwrap_or_default();
                    ctx.reply(format!("hi {who} in {}", m.channel)).await?;
                    Ok(())
                },
            )
            .command(
                "/where",
                |ctx: Ctx, c: slack_once::app::Command| async move {
                    ctx.ack(slack_once::app::Ack::ephemeral(format!(
                        "{} in {}",
                        c.user_id, c.channel_id
                    )))
                    .await?;
                    Ok(())
                },
            ),
    )
    .await;
    assert_eq!(
        bot.as_user("U0ALICE")
            .in_channel("C0OPS")
            .mention("x")
            .await,
        "answered"
    );
    let texts: Vec<String> = bot
        .slack()
        .messages()
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(texts, ["hi U0ALICE in C0OPS"]);
    // Slack's retry of the same event, and the same request sent again: nothing more.
    assert_eq!(bot.retry(1).await, "duplicate");
    assert_eq!(bot.repeat().await.outcome, "duplicate");
    assert_eq!(bot.slack().messages().len(), 1);
    // A command as another person elsewhere.
    let acked = bot
        .as_user("U0BOB")
        .in_channel("C0DEV")
        .command("/where", "")
        .await;
    assert_eq!(acked.body["text"], "U0BOB in C0DEV");
    assert_eq!(
        bot.repeat().await.outcome,
        "duplicate",
        "the same command again"
    );
    // Metrics lines kept for the test (not printed): one per request.
    let lines = bot.metrics();
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert_eq!(lines[0]["Answered"], 1.0);
    assert_eq!(lines[1]["Duplicate"], 1.0);
}

/// A call whose deadline passed before it was sent is certainly not made: it says so
/// (`NotSent`, not a timeout whose fate is unknown), and Slack sees nothing, so a later claim
/// makes it rather than taking an at-most-once write for perhaps sent.
#[tokio::test]
async fn a_call_past_its_deadline_is_not_sent_and_says_so() {
    let slack = SlackStandin::start().await;
    let client = slack_once::slack::SlackClient::new(
        slack.base_url.clone(),
        Some(slack_once::config::Secret::new(TOKEN)),
    );
    let deadline = tokio::time::Instant::now();
    let args = slack_once::slack::Args::Json(serde_json::json!({"channel": "C0001", "text": "x"}));
    let sent = client.api("chat.postEphemeral", &args, deadline).await;
    let error = sent.expect_err("past its deadline");
    assert!(
        matches!(error, slack_once::slack::SlackError::NotSent),
        "{error:?}"
    );
    assert!(!error.may_have_posted());
    assert_eq!(slack.calls_of("chat.postEphemeral"), 0);
    let hook: http::Uri = format!("{}/commands/T0001/C0001/hook", slack.origin())
        .parse()
        .unwrap();
    let answered = client
        .respond(&hook, &serde_json::json!({"text": "x"}), deadline)
        .await;
    assert!(
        matches!(answered, Err(slack_once::slack::SlackError::NotSent)),
        "{answered:?}"
    );
    assert_eq!(slack.calls_of("response_url"), 0);
}

/// One message's events can run different listeners under its one claim: here the first
/// listener takes only the `app_mention`, the second every event of a mention. The mention
/// runs both: the first counts, the second fails (the claim is released). The message event of
/// the same message then runs only the second, under the same claim: its change is its own, not
/// taken for the first's (made already by the mention), and is made: the count is 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_listeners_state_changes_are_its_own_under_one_messages_claim() {
    use slack_once::app::{App, Ctx, MessageEvent};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let day = Duration::from_secs(86_400);
    let failures = Arc::new(AtomicUsize::new(1));
    let left = failures.clone();
    let app = App::new()
        .message_where(
            |m: &MessageEvent| m.raw["type"] == "app_mention",
            move |ctx: Ctx, _m: MessageEvent| async move {
                ctx.state()
                    .update("count", day, |n: Option<u64>| n.unwrap_or(0) + 1)
                    .await?;
                Ok(())
            },
        )
        .message_where(
            |m: &MessageEvent| m.mention,
            move |ctx: Ctx, _m: MessageEvent| {
                let left = left.clone();
                async move {
                    if left
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok()
                    {
                        return Err("not yet".into());
                    }
                    let n = ctx
                        .state()
                        .update("count", day, |n: Option<u64>| n.unwrap_or(0) + 1)
                        .await?;
                    ctx.reply(format!("count {n}")).await?;
                    Ok(())
                }
            },
        );
    let bot = slack_once::testing::TestBot::start(app).await;
    let (ts, channel, user) = (
        "1767225600.000100",
        slack_once::testing::CHANNEL,
        slack_once::testing::USER,
    );
    let text = format!("<@{}> count", slack_once::testing::BOT_USER);
    let cmid = "8d5c0c0e-0000-4000-8000-000000000001";
    let mention = serde_json::json!({
        "type": "app_mention", "user": user, "text": text, "ts": ts, "channel": channel,
        "event_ts": ts, "client_msg_id": cmid
    });
    let message = serde_json::json!({
        "type": "message", "channel_type": "channel", "user": user, "text": text, "ts": ts,
        "channel": channel, "event_ts": ts, "client_msg_id": cmid
    });
    assert_ne!(
        bot.send(mention).await,
        "answered",
        "the second listener failed"
    );
    assert_eq!(bot.send(message).await, "answered");
    let said: Vec<String> = bot
        .slack()
        .messages()
        .iter()
        .map(|m| m["text"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(said, ["count 2"], "each listener's change made once");
}
