//! The bot's tests: one request at a time against a stand-in for Slack (`TestBot`), and the
//! crash explorer, which runs every request through every crash point, copy and Slack fault
//! and checks that each is answered exactly once.

use slack_once::testing::TestBot;
use slack_once::testing::explore::{Explorer, Request};

use super::{COMMAND, app};

#[tokio::test]
async fn a_mention_is_answered_once() {
    let bot = TestBot::start(app()).await;
    assert_eq!(bot.mention("hi there").await, "answered");
    let texts = texts(&bot);
    assert_eq!(texts.len(), 1, "one reply: {texts:?}");
    assert!(texts[0].contains("hi there"));
}

#[tokio::test]
async fn the_command_acks_then_answers_in_the_channel() {
    let bot = TestBot::start(app()).await;
    let acked = bot.command(COMMAND, "what is up?").await;
    assert_eq!(acked.body["response_type"], "ephemeral");
    let texts = texts(&bot);
    assert_eq!(texts.len(), 1, "one answer in the channel: {texts:?}");
    assert!(texts[0].contains("what is up?"));
}

/// The texts of the messages in the stand-in's conversations.
fn texts(bot: &TestBot) -> Vec<String> {
    let messages = bot.slack().messages();
    messages
        .iter()
        .map(|m| m["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn every_crash_and_every_copy_leaves_one_answer() {
    Explorer::new(app)
        .request(Request::mention("hi there"))
        .request(Request::command(COMMAND, "what is up?"))
        .both_modes()
        .run()
        .assert_ok();
}
