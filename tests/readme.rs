//! The README's "Write your own bot" section, compiled and run: the "thinking… then update"
//! bot and its test, exactly as shown there; and every relative link of the repository's Markdown
//! resolves (the `links` module).

use std::time::Duration;

use slack_once::app::{App, Ctx, HandlerResult, MessageEvent};
use slack_once::testing::TestBot;

// ---- README: the bot ----
async fn think(ctx: Ctx, m: MessageEvent) -> HandlerResult {
    ctx.react_to_event("eyes").await?; // step 1
    let placeholder = ctx.reply("Thinking… :hourglass:").await?; // step 2
    let answer = ask_the_model(&m.text, ctx.remaining()).await; // runs again on a takeover
    ctx.update(&placeholder.channel, &placeholder.ts, answer)
        .await?; // step 3
    Ok(())
}

async fn ask_the_model(question: &str, budget: Duration) -> String {
    tokio::time::sleep(Duration::from_millis(200).min(budget)).await; // your LLM call here
    format!("You asked: {question}")
}

fn app() -> App {
    App::new().message_where(|m: &MessageEvent| m.mention || m.is_dm(), think)
}
// ---- end of the bot ----

// ---- README: its test ----
#[tokio::test]
async fn a_mention_gets_a_placeholder_then_the_answer_once() {
    let bot = TestBot::start(app()).await;
    assert_eq!(bot.mention("what is 6 x 7?").await, "answered");
    let messages = bot.slack().messages();
    assert_eq!(messages.len(), 1, "one message: the placeholder, updated");
    assert_eq!(messages[0]["text"], "You asked: what is 6 x 7?");
    assert_eq!(bot.slack().reactions().len(), 1);
}
// ---- end of the test ----

// ---- README: the explorer ----
#[test]
fn every_crash_and_every_copy_leaves_one_answer() {
    use slack_once::testing::explore::{Explorer, Request};
    Explorer::new(app)
        .request(Request::mention("what is 6 x 7?")) // its copies and Slack's retries included
        .both_modes() // synchronous, then deferred (the queue's redeliveries)
        .run()
        .assert_ok(); // panics with the shortest failing schedule's trace
}
// ---- end of the explorer ----

#[tokio::test]
async fn a_retry_of_the_same_event_writes_nothing_more() {
    let bot = TestBot::start(app()).await;
    let envelope = serde_json::json!({
        "type": "event_callback", "team_id": "T0TEST", "event_id": "EvReadme1",
        "event": {"type": "app_mention", "user": "U0USER", "text": "<@U0BOT> again?",
                  "channel": "C0TEST", "ts": "1767225600.000001"},
        "authorizations": [{"team_id": "T0TEST", "user_id": "U0BOT", "is_bot": true}]
    });
    assert_eq!(bot.send_envelope(envelope.clone()).await, "answered");
    assert_eq!(bot.send_envelope(envelope).await, "duplicate");
    assert_eq!(
        bot.slack().calls().len(),
        3,
        "react, post, update: once each"
    );
}

// ---- README: /once and its button ----
mod commands {
    use slack_once::app::{
        Ack, App, BlockAction, Command, Ctx, HandlerResult, Message, Respond, blocks,
    };

    async fn once(ctx: Ctx, command: Command) -> HandlerResult {
        ctx.ack(Ack::ephemeral("On it: one answer is coming."))
            .await?; // what Slack shows at once
        let text = format!("<@{}> ran /once: “{}”.", command.user_id, command.text);
        let button = blocks::actions([blocks::button("Helpful", "once_thanks", "helpful")]);
        ctx.respond(Respond::in_channel(
            Message::text(text.clone()).blocks([blocks::section(text), button]),
        ))
        .await?; // through the response_url, once
        Ok(())
    }

    async fn thanks(ctx: Ctx, click: BlockAction) -> HandlerResult {
        let (Some(channel), Some(ts)) = (click.channel_id, click.message_ts) else {
            return Ok(());
        };
        ctx.update(
            &channel,
            &ts,
            format!("<@{}> found this helpful.", click.user_id),
        )
        .await?;
        Ok(()) // no ack: an empty 200 when the listener returns
    }

    fn app() -> App {
        App::new()
            .command("/once", once)
            .action("once_thanks", thanks)
    }

    #[test]
    fn once_and_its_button_leave_one_answer_whatever_fails() {
        use slack_once::testing::explore::{Explorer, Request};
        Explorer::new(app)
            .request(Request::command("/once", "hi"))
            .request(Request::click("once_thanks", "helpful").on_message("<@U0USER> ran /once"))
            .both_modes()
            .run()
            .assert_ok();
    }

    #[tokio::test]
    async fn once_answers_in_the_channel_and_its_button_updates_the_answer() {
        let bot = slack_once::testing::TestBot::start(app()).await;
        let acked = bot.command("/once", "hi").await; // also click, shortcut, submit_view, options
        assert_eq!(acked.body["response_type"], "ephemeral");
        assert_eq!(bot.slack().messages().len(), 1); // the in-channel answer, once
        let click = bot
            .click("once_thanks", "helpful", Some(&bot.slack().messages()[0]))
            .await;
        assert_eq!(click.outcome, "answered");
        assert_eq!(
            bot.slack().messages()[0]["text"],
            "<@U0USER> found this helpful."
        );
    }
}
// ---- end of /once ----

// ---- README: the assistant ----
mod assistant {
    use serde_json::{Value, json};
    use slack_once::app::{App, AssistantThread, Ctx, HandlerResult, MessageEvent};

    async fn model(question: &str) -> Vec<String> {
        let mut words = vec![format!("You asked: {question}.")];
        words.extend((1..=5).map(|n| format!(" w{n}")));
        words
    }

    fn feedback() -> Value {
        json!({"type": "context_actions", "elements": [{"type": "feedback_buttons", "action_id": "feedback",
            "positive_button": {"text": {"type": "plain_text", "text": "Good"}, "value": "good"},
            "negative_button": {"text": {"type": "plain_text", "text": "Bad"}, "value": "bad"}}]})
    }

    async fn started(ctx: Ctx, thread: AssistantThread) -> HandlerResult {
        if let Some(ts) = thread.thread_ts.as_deref() {
            let prompts = [("What is slack-once?", "What is slack-once?")];
            ctx.set_suggested_prompts(&thread.channel_id, ts, Some("Try one of these"), &prompts)
                .await?;
        }
        Ok(())
    }

    async fn answer(ctx: Ctx, question: MessageEvent) -> HandlerResult {
        let (channel, thread) = (question.channel.as_str(), question.thread());
        ctx.set_status(channel, thread, "is thinking…", &["Reading your question…"])
            .await?;
        let team = question.user_team().or(ctx.team()); // the author's: Slack Connect's differs
        let recipient = question.user.as_deref().zip(team); // asked for outside a DM
        let mut stream = ctx.stream(channel, thread, recipient).await?; // its ts journaled at once
        let text = ctx
            .remember("answer", async {
                let mut text = String::new();
                for word in model(&question.text).await {
                    text.push_str(&word);
                    stream.append(&word).await; // buffered, 256 characters an append
                }
                text
            })
            .await?; // the model is asked once: a takeover gets the remembered answer
        let blocks = vec![json!({"type": "markdown", "text": text}), feedback()];
        stream.finish(&text, Some(blocks)).await?; // stopped, then the whole answer
        ctx.set_status(channel, thread, "", &[]).await?;
        Ok(())
    }

    fn app() -> App {
        App::new()
            .assistant_thread_started(started)
            .assistant_message(answer)
    }

    #[test]
    fn the_assistant_leaves_one_complete_answer_whatever_fails() {
        use slack_once::testing::explore::{Explorer, Request};
        Explorer::new(app)
            .request(Request::assistant_question("what is once"))
            .request(Request::event(json!({
                "type": "assistant_thread_started",
                "assistant_thread": {"user_id": "U0USER", "channel_id": "D0TEST",
                                     "thread_ts": "1767225600.000100"}
            })))
            .both_modes()
            .run()
            .assert_ok();
    }

    #[tokio::test]
    async fn the_assistant_answers_once_streamed_and_complete() {
        let bot = slack_once::testing::TestBot::start(app()).await;
        assert_eq!(bot.dm("what is once").await, "answered");
        let messages = bot.slack().messages();
        assert_eq!(messages.len(), 1);
        assert_eq!(
            messages[0]["text"],
            "You asked: what is once. w1 w2 w3 w4 w5"
        );
        assert_eq!(
            bot.slack().assistant_calls().len(),
            2,
            "the status, set and cleared"
        );
    }
}
// ---- end of the assistant ----

// ---- README: an AI agent ----
mod agent {
    use slack_once::app::SessionStatus::{Active, Processing};
    use slack_once::app::TaskStatus::{Complete, InProgress};
    use slack_once::app::{AgentSessionStopped, App, Ctx, Feedback, HandlerResult, MessageEvent};
    use slack_once::app::{StreamOptions, Task, TaskDisplay, feedback_buttons};

    async fn read_the_runbook() -> String {
        "deploys at 10:00".to_string()
    }

    async fn model(question: &str, found: &str) -> Vec<String> {
        // A model takes its time (virtual time in the explorer): a person can press stop.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let mut words = vec![format!("You asked: {question} ({found}).")];
        words.extend((1..=5).map(|n| format!(" w{n}")));
        words
    }

    async fn answer(ctx: Ctx, q: MessageEvent) -> HandlerResult {
        let (channel, thread) = (q.channel.as_str(), q.thread()); // each DM message its own thread
        ctx.set_session_status(channel, Some(thread), Processing, Some("Deploys"))
            .await?;
        let plan = StreamOptions::new().tasks(TaskDisplay::Plan);
        let mut stream = ctx.stream_with(channel, thread, None, plan).await?; // its ts journaled at once
        stream.plan("Looking it up").await?;
        stream
            .task(Task::new("docs", "Read the runbook", InProgress))
            .await?; // each chunk once
        let found = ctx.remember("docs", read_the_runbook()).await?; // done once, whoever takes over
        stream
            .task(Task::new("docs", "Read the runbook", Complete).output(&found))
            .await?;
        let mut text = String::new();
        for word in model(&q.text, &found).await {
            text.push_str(&word);
            stream.append(&word).await; // past the stream's life: the next part, no gap, no repeat
        }
        let footer = vec![feedback_buttons("feedback", "Good", "Bad")];
        stream.finish_answer(&text, footer).await?; // each part whole; nothing after a stop
        ctx.set_session_status(channel, Some(thread), Active, None)
            .await?;
        Ok(())
    }

    async fn stopped(ctx: Ctx, stop: AgentSessionStopped) -> HandlerResult {
        // The answer's own run, wherever it runs, writes nothing more; the session is ours to set.
        ctx.set_session_status(&stop.channel, stop.thread_ts.as_deref(), Active, None)
            .await?;
        Ok(())
    }

    async fn rated(ctx: Ctx, f: Feedback) -> HandlerResult {
        let name = if f.positive { "up" } else { "down" }; // once per click, however often sent
        let year = std::time::Duration::from_secs(365 * 86_400);
        ctx.state()
            .update(name, year, |n: Option<u64>| n.unwrap_or(0) + 1)
            .await?;
        Ok(())
    }

    fn app() -> App {
        App::new()
            .assistant_message(answer)
            .agent_session_stopped(stopped)
            .feedback("feedback", rated)
    }

    #[tokio::test]
    async fn the_agent_answers_once_with_its_plan_and_hears_its_feedback() {
        let bot = slack_once::testing::TestBot::start(app()).await;
        assert_eq!(bot.dm("when").await, "answered");
        let answer = bot.slack().messages().pop().unwrap();
        assert_eq!(
            answer["text"],
            "You asked: when (deploys at 10:00). w1 w2 w3 w4 w5"
        );
        assert_eq!(answer["blocks"][0]["type"], "plan");
        assert_eq!(
            bot.feedback("feedback", true, &answer).await.outcome,
            "no_reply"
        );
        assert_eq!(bot.repeat().await.outcome, "duplicate");
    }

    #[test]
    fn the_agent_leaves_one_whole_answer_whatever_fails_and_nothing_after_a_stop() {
        use slack_once::testing::explore::{Explorer, Request};
        Explorer::new(app)
            .request(Request::assistant_question("when"))
            .sequence([
                Request::assistant_question("when").without_copies(),
                Request::stop_session(),
            ])
            .run()
            .assert_ok();
    }
}
// ---- end of the agent ----

// ---- README: a workflow step ----
mod workflow_step {
    use serde_json::json;
    use slack_once::app::blocks::{actions, button, section};
    use slack_once::app::function::{Execution, Function, types};
    use slack_once::app::{App, BlockAction, Ctx, HandlerResult, Message};

    async fn ask(ctx: Ctx, ex: Execution) -> HandlerResult {
        let approver = ex.inputs["approver"].as_str().unwrap_or_default();
        let buttons = actions([button("Approve", "approve", "yes")]);
        let dm = Message::text("Approve the release?")
            .blocks([section("Approve the release?"), buttons]);
        ctx.post(approver, dm).await?; // with the step's own token; the step stays open
        Ok(())
    }

    async fn approve(ctx: Ctx, click: BlockAction) -> HandlerResult {
        // Two approvers at once, a double click, a crash and its retry: one completion.
        ctx.complete(json!({"decided_by": click.user_id})).await?;
        Ok(())
    }

    pub fn app() -> App {
        let step = Function::new("request_approval", "Request approval")
            .input("approver", types::USER_ID, "Approver")
            .output("decided_by", types::USER_ID, "Decided by");
        App::new().function(step, ask).action("approve", approve)
    }
    // ---- end of the step ----

    #[tokio::test]
    async fn the_step_completes_once_for_two_approvers_at_once() {
        let bot = slack_once::testing::TestBot::start(app()).await;
        let (outcome, ex) = bot
            .run_step("request_approval", json!({"approver": "U0APPROVER"}))
            .await;
        assert_eq!(outcome, "answered");
        assert_eq!(bot.retry(1).await, "duplicate");
        let dm = bot.slack().messages().remove(0);
        let id = ex.function_execution_id.clone();
        let (alice, bob) = (
            bot.as_user("U0ALICE").in_step(&id),
            bot.as_user("U0BOB").in_step(&id),
        );
        tokio::join!(
            alice.click("approve", "yes", Some(&dm)),
            bob.click("approve", "yes", Some(&dm)),
            alice.click("approve", "yes", Some(&dm)),
        );
        let e = &bot.slack().executions()[0];
        assert_eq!(
            (e["state"].as_str(), e["completions"].as_u64()),
            (Some("completed"), Some(1))
        );
        assert_eq!(e["outputs"], json!({"decided_by": "U0ALICE"}));
    }

    #[test]
    fn the_step_is_explored_with_every_fault() {
        use slack_once::testing::explore::{Explorer, Request};
        Explorer::new(app)
            .sequence([
                Request::step("request_approval", json!({"approver": "U0APPROVER"})),
                Request::click("approve", "yes")
                    .as_user("U0APPROVER")
                    .in_channel("DU0APPROVER")
                    .on_posted_message()
                    .in_step(),
            ])
            .both_modes()
            .run()
            .assert_ok();
    }
}

/// Every relative link in the repository's Markdown (README, DEPLOY, RELIABILITY, BENCHMARKS,
/// the guide, the internals) names a file that exists, and a `#fragment` names a heading of
/// that file as GitHub renders its anchor.
mod links {
    use std::collections::{BTreeSet, HashMap};
    use std::path::{Path, PathBuf};

    const ROOT: &str = env!("CARGO_MANIFEST_DIR");
    const SKIPPED: &[&str] = &[
        "target",
        ".git",
        ".tools",
        "node_modules",
        ".aws-sam",
        ".dynamodb-local",
    ];

    fn markdown_files(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if path.is_dir() {
                if !SKIPPED.contains(&name.as_str()) {
                    markdown_files(&path, found);
                }
            } else if name.ends_with(".md") {
                found.push(path);
            }
        }
    }

    /// The text outside fenced code blocks.
    fn prose(text: &str) -> Vec<&str> {
        let mut fenced = false;
        text.lines()
            .filter(|line| {
                if line.trim_start().starts_with("```") {
                    fenced = !fenced;
                    return false;
                }
                !fenced
            })
            .collect()
    }

    /// GitHub's anchor of a heading: lower case, links and code marks dropped, every character
    /// that is not a letter, a digit, `_`, `-` or a space removed, spaces made `-`; a repeated
    /// heading gets `-1`, `-2`….
    fn anchors(text: &str) -> BTreeSet<String> {
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut anchors = BTreeSet::new();
        for line in prose(text) {
            let Some(title) = line
                .strip_prefix('#')
                .map(|rest| rest.trim_start_matches('#'))
                .and_then(|rest| rest.strip_prefix(' '))
            else {
                continue;
            };
            let mut plain = String::new();
            let mut rest = title;
            while let Some(open) = rest.find('[') {
                plain.push_str(&rest[..open]);
                let after = &rest[open + 1..];
                match after.find("](").zip(after.find(')')) {
                    Some((close, end)) if close < end => {
                        plain.push_str(&after[..close]);
                        rest = &after[end + 1..];
                    }
                    _ => {
                        plain.push('[');
                        rest = after;
                    }
                }
            }
            plain.push_str(rest);
            let slug: String = plain
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect();
            let n = seen.entry(slug.clone()).or_insert(0);
            anchors.insert(if *n == 0 {
                slug.clone()
            } else {
                format!("{slug}-{n}")
            });
            *n += 1;
        }
        anchors
    }

    /// The targets of the `[text](target)` links of a page.
    fn links(text: &str) -> Vec<String> {
        let mut found = Vec::new();
        for line in prose(text) {
            let mut rest = line;
            while let Some(at) = rest.find("](") {
                let after = &rest[at + 2..];
                let end = after.find(')').unwrap_or(after.len());
                let target = after[..end].split_whitespace().next().unwrap_or("");
                found.push(target.to_string());
                rest = &after[end..];
            }
        }
        found
    }

    #[test]
    fn every_relative_link_in_the_markdown_resolves() {
        let mut files = Vec::new();
        markdown_files(Path::new(ROOT), &mut files);
        assert!(files.len() > 20, "found only {files:?}");
        let mut broken = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for target in links(&text) {
                if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                    continue;
                }
                let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
                let linked = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().unwrap().join(path)
                };
                let shown = file.strip_prefix(ROOT).unwrap().display().to_string();
                if !linked.exists() {
                    broken.push(format!("{shown}: {target} (no such file)"));
                } else if !fragment.is_empty() && linked.extension().is_some_and(|e| e == "md") {
                    let text = std::fs::read_to_string(&linked).unwrap();
                    if !anchors(&text).contains(fragment) {
                        broken.push(format!("{shown}: {target} (no such heading)"));
                    }
                }
            }
        }
        assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    }

    #[test]
    fn anchors_are_the_ones_github_renders() {
        let page = "# Slack's `chat.postMessage`\n## The windows that remain — measured\n\
                    ```\n# not a heading\n```\n## [The ledger](x.md) again\n## Twice\n## Twice\n";
        let found = anchors(page);
        let expected = [
            "slacks-chatpostmessage",
            "the-windows-that-remain--measured",
            "the-ledger-again",
            "twice",
            "twice-1",
        ];
        assert_eq!(found, expected.iter().map(|s| s.to_string()).collect());
    }
}

/// ARCHITECTURE.md is the map of the code: every file under `src/` is named in it, by its path
/// from the repository's root, so a file added without its entry fails here.
mod architecture {
    use std::path::Path;

    const ROOT: &str = env!("CARGO_MANIFEST_DIR");

    fn rust_files(dir: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                rust_files(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(ROOT).unwrap();
                found.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }

    /// Every `src/….rs` the docs name exists (in this crate, or in the bot `slack-once init`
    /// writes, `templates/bot/`): a file moved without its docs fails here. The findings log
    /// under `docs/internals/` keeps the paths of its day.
    #[test]
    fn every_source_path_the_docs_name_exists() {
        let root = Path::new(ROOT);
        let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
        pages.extend(["RELIABILITY.md", "DEPLOY.md", "BENCHMARKS.md"].map(|p| root.join(p)));
        for entry in std::fs::read_dir(root.join("docs")).unwrap().flatten() {
            if entry.path().extension().is_some_and(|e| e == "md") {
                pages.push(entry.path());
            }
        }
        let mut missing = Vec::new();
        for page in &pages {
            let text = std::fs::read_to_string(page).unwrap();
            for (at, _) in text.match_indices("src/") {
                let rest = &text[at..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "_/.".contains(c)))
                    .unwrap_or(rest.len());
                let path = rest[..end].trim_end_matches('.');
                let preceded = text[..at].chars().last();
                if !path.ends_with(".rs") || preceded.is_some_and(|c| c.is_ascii_alphanumeric()) {
                    continue;
                }
                let named = |base: &Path| base.join(path).exists();
                if !named(root) && !named(&root.join("templates/bot")) {
                    missing.push(format!("{}: {path}", page.display()));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "source paths the docs name that do not exist: {missing:#?}"
        );
    }

    #[test]
    fn every_file_under_src_is_named_in_the_map() {
        let map = std::fs::read_to_string(Path::new(ROOT).join("ARCHITECTURE.md")).unwrap();
        let mut files = Vec::new();
        rust_files(&Path::new(ROOT).join("src"), &mut files);
        assert!(files.len() > 50, "the walk found the sources: {files:?}");
        let missing: Vec<&String> = files
            .iter()
            .filter(|f| !map.contains(&format!("`{f}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "files under src/ that ARCHITECTURE.md does not name (as `src/…`): {missing:?}"
        );
    }
}

/// RELIABILITY.md is the evidence a sceptic reads whole: each guarantee, its mechanism, its tests
/// and what remains. The full scenarios and the figures live in `docs/internals/`.
#[test]
fn reliability_md_stays_short_enough_to_read_whole() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/RELIABILITY.md");
    let bytes = std::fs::metadata(path).unwrap().len();
    assert!(
        bytes <= 40_000,
        "RELIABILITY.md is {bytes} bytes: move detail to docs/internals/evidence.md"
    );
}
