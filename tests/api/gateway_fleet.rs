//! The bot as a black box behind `slack-once gateway`: for each mention, a bot whose writes (a
//! reaction, posts, an update of its own post, in an order of its own) are its plan, two
//! replicas of it either of which may die before any of its writes, Slack answering some writes
//! with faults (made but answered 5xx, refused with 5xx), and Slack's retries. However the runs
//! go, each write of a plan is in Slack at most once, and every mention whose last delivery was
//! answered has all of its plan in Slack.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

/// One write of a bot's plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Write {
    /// `reactions.add` of this name on the mention.
    React(&'static str),
    /// `chat.postMessage` of this text in the mention's thread.
    Post(&'static str),
    /// `chat.update` of the plan's first post to this text.
    UpdateFirstPost(&'static str),
}

const WRITES: [Write; 6] = [
    Write::React("eyes"),
    Write::React("tada"),
    Write::Post("first"),
    Write::Post("second"),
    Write::Post("third"),
    Write::UpdateFirstPost("first, edited"),
];

/// A small deterministic hash: the bot's plan and its replicas' deaths, from the event and the
/// forward.
fn mix(text: &str, n: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h ^ (h >> 29)
}

/// The plan of the bot for `event_id`: 1 to 4 writes, in an order of its own, the same on every
/// run (a bot's code is the same each time it runs).
fn plan(event_id: &str) -> Vec<Write> {
    let len = 1 + (mix(event_id, 1) % 4) as usize;
    let mut pool: Vec<Write> = WRITES.to_vec();
    let mut chosen = Vec::new();
    for i in 0..len {
        let pick = (mix(event_id, 10 + i as u64) % pool.len() as u64) as usize;
        chosen.push(pool.remove(pick));
    }
    // An update needs its post before it.
    let posts_first = chosen.iter().position(|w| matches!(w, Write::Post(_)));
    let update = chosen
        .iter()
        .position(|w| matches!(w, Write::UpdateFirstPost(_)));
    match (posts_first, update) {
        (Some(p), Some(u)) if u < p => chosen.swap(p, u),
        (None, Some(u)) => chosen[u] = Write::Post("first"),
        _ => {}
    }
    chosen
}

/// The bot: its plan's writes in order, through the gateway; dying (its connection dropped
/// unanswered) before one of them on some forwards; answering 500 when a write failed.
async fn black_box_bot(forwards: Arc<Mutex<HashMap<String, u64>>>) -> HttpBot {
    HttpBot::start(move |f: Forwarded| {
        let forwards = forwards.clone();
        async move {
            let envelope = f.json();
            let event_id = envelope["event_id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let event = &envelope["event"];
            let (channel, ts) = (event["channel"].clone(), event["ts"].clone());
            let n = {
                let mut forwards = forwards.lock().unwrap();
                let n = forwards.entry(event_id.clone()).or_default();
                *n += 1;
                *n
            };
            let plan = plan(&event_id);
            // Half the forwards die after one of their writes (or after the last, before
            // the answer): the next replica runs the bot again under the same claim.
            let dies_before = mix(&event_id, 100 + n)
                .is_multiple_of(2)
                .then(|| 1 + (mix(&event_id, 200 + n) % plan.len() as u64) as usize);
            let mut first_post: Option<Value> = None;
            for (i, write) in plan.iter().enumerate() {
                if dies_before == Some(i) {
                    panic!("the replica died before write {i}");
                }
                let answer = match write {
                    Write::React(name) => {
                        let args = json!({"channel": channel, "timestamp": ts, "name": name});
                        f.call("reactions.add", args).await
                    }
                    Write::Post(text) => {
                        let args = json!({"channel": channel, "thread_ts": ts, "text": text});
                        let answer = f.call("chat.postMessage", args).await;
                        if first_post.is_none() {
                            first_post = Some(answer["ts"].clone());
                        }
                        answer
                    }
                    Write::UpdateFirstPost(text) => {
                        let post_ts = first_post.clone().unwrap_or_default();
                        let args = json!({"channel": channel, "ts": post_ts, "text": text});
                        f.call("chat.update", args).await
                    }
                };
                if answer["ok"] != true {
                    return (StatusCode::INTERNAL_SERVER_ERROR, answer.to_string());
                }
            }
            if dies_before == Some(plan.len()) {
                panic!("the replica died after its last write, before its answer");
            }
            (StatusCode::OK, String::new())
        }
    })
    .await
}

/// What Slack holds of `event_id`'s plan: the posts in its thread by text, and its reactions.
fn in_slack(slack: &SlackStandin, event_id: &str) -> (HashMap<String, usize>, Vec<String>) {
    let ts = ts_of(event_id);
    let mut posts = HashMap::new();
    for post in slack.posted() {
        if post.body["thread_ts"] == ts.as_str() {
            let text = post.body["text"].as_str().unwrap_or_default().to_string();
            *posts.entry(text).or_default() += 1;
        }
    }
    let reactions = slack
        .reactions()
        .into_iter()
        .filter(|(_, t, _)| *t == ts)
        .map(|(_, _, name)| name)
        .collect();
    (posts, reactions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn a_black_box_bot_dying_between_any_two_writes_under_slacks_faults_writes_each_once() {
    const MENTIONS: usize = 60;
    let (table, _) = fresh_table(&dynamodb_endpoint()).await;
    let slack = SlackStandin::start().await;
    slack.random_faults(Some(RandomFaults {
        writes: vec![
            (700, SlackFailure::MadeThenStatus(503)),
            (500, SlackFailure::Status(500)),
        ],
        hooks: Vec::new(),
        reads: vec![(300, SlackFailure::Status(500))],
        seed: 0x5eed_6a7e,
    }));
    let forwards = Arc::new(Mutex::new(HashMap::new()));
    let (a, b) = (
        black_box_bot(forwards.clone()).await,
        black_box_bot(forwards.clone()).await,
    );
    let gateway = spawn_gateway(&slack, &table, &[a.url(), b.url()]);
    let http = HttpClient::default();

    let mut answered = Vec::new();
    for m in 0..MENTIONS {
        let event_id = format!("EvGwFleet{m:03}");
        let body = app_mention(&event_id, "hello");
        // The original and Slack's three retries, until one is answered with a 2xx.
        for retry in [None, Some(1), Some(2), Some(3)] {
            let answer = deliver(&http, &gateway.url(), &body, retry).await;
            if answer.status.is_success() {
                answered.push(event_id.clone());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    let mut complete = 0;
    for m in 0..MENTIONS {
        let event_id = format!("EvGwFleet{m:03}");
        let plan = plan(&event_id);
        let (posts, reactions) = in_slack(&slack, &event_id);
        for (text, n) in &posts {
            assert_eq!(
                *n, 1,
                "{event_id}: {text:?} posted {n} times; plan {plan:?}"
            );
        }
        let mut names = reactions.clone();
        names.dedup();
        assert_eq!(names.len(), reactions.len(), "{event_id}: a reaction twice");
        let posted = plan.iter().filter(|w| matches!(w, Write::Post(_))).count();
        let reacted = plan.iter().filter(|w| matches!(w, Write::React(_))).count();
        let whole = posts.len() == posted && reactions.len() == reacted;
        if answered.contains(&event_id) {
            assert!(
                whole,
                "{event_id} was answered but Slack holds {posts:?} {reactions:?} of {plan:?}\n{}",
                gateway.log()
            );
        }
        complete += usize::from(whole);
    }
    // The faults are drawn at rates every mention survives with four deliveries, mostly.
    assert!(
        answered.len() >= MENTIONS * 3 / 4,
        "answered {} of {MENTIONS}",
        answered.len()
    );
    assert!(complete >= answered.len());
    let died = forwards
        .lock()
        .unwrap()
        .values()
        .filter(|n| **n > 1)
        .count();
    assert!(died > 0, "some replica died mid-answer");
    assert!(
        !slack.faults_drawn().is_empty(),
        "Slack's faults were drawn"
    );
}
