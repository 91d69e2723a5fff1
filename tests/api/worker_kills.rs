//! Local workers (`slack-once worker`, a container's replicas) killed while their long poll is
//! pending. SQS keeps such a poll open after its caller is gone and may hand it a message: a
//! receive spent (`ApproximateReceiveCount` + 1), the message hidden for the visibility
//! timeout that poll asked for. The SQS server (moto) does the same: a request's thread keeps
//! polling after its client's socket closed. A request sent while only dead polls wait must
//! still be answered, soon and once, by a worker that lives, and never be dead-lettered.

use std::time::{Duration, Instant};

use http::StatusCode;

use crate::helpers::*;

/// Workers killed mid-poll before each request.
const KILLED_PER_ROUND: usize = 3;
/// Requests, each sent while only killed workers' polls wait.
const ROUNDS: usize = 3;
/// The worker's lease and visibility timeout: the default (`DEDUP_LEASE_SECONDS`).
const LEASE_S: u64 = 30;
/// How soon after it was queued a request handed to a dead poll is answered by a live worker:
/// well inside a lease, which is how long such a message stayed hidden when the poll hid it
/// for the lease.
const ANSWERED_WITHIN: Duration = Duration::from_secs(15);
/// When the live worker starts, after the request was queued.
const REPLACEMENT_STARTS_AFTER: Duration = Duration::from_secs(7);

/// Sends `body` to the ingress as Slack does (retried at once while the answer is not 2xx).
async fn queue_through_ingress(http: &HttpClient, url: &str, body: &str) {
    let mut retry = None;
    loop {
        let answer = deliver(http, url, body, retry).await;
        if answer.status == StatusCode::OK {
            assert_eq!(answer.outcome(), "queued", "{}", answer.body);
            return;
        }
        assert!(retry.unwrap_or(0) < 3, "not queued: {}", answer.body);
        retry = Some(retry.map_or(1, |n| n + 1));
    }
}

/// The `receive_count` of the run a worker's log shows for `event_id`.
fn receive_count_in(log: &str, event_id: &str) -> Option<u32> {
    log.lines()
        .filter(|line| line.contains(event_id))
        .find_map(|line| line.split("receive_count=").nth(1))
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn workers_killed_mid_poll_leave_each_request_to_a_live_worker_soon_and_never_dead_lettered()
{
    let max_receives = slack_once::config::DEFAULT_MAX_RECEIVES;
    let stack = DeferredStack::start(max_receives).await;
    let ingress = BotProcess::spawn(&stack.ingress_vars());
    let vars = stack.worker_vars(LEASE_S, max_receives);
    let http = HttpClient::default();
    for round in 0..ROUNDS {
        // Replicas that start polling the empty queue, then die one after the other.
        let mut killed: Vec<BotProcess> = (0..KILLED_PER_ROUND)
            .map(|_| BotProcess::spawn_worker(&vars))
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        for worker in &mut killed {
            worker.kill();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // No live poll: the request goes to one of the dead ones.
        let event_id = format!("EvDeadPoll{round}");
        let sent = Instant::now();
        queue_through_ingress(&http, &ingress.url(), &app_mention(&event_id, "x")).await;
        // Their replacement starts a few seconds later, as a container restarts: until then
        // only the dead polls could take the message again.
        tokio::time::sleep(REPLACEMENT_STARTS_AFTER).await;
        let live = BotProcess::spawn_worker(&vars);
        let answered = eventually(ANSWERED_WITHIN.saturating_sub(sent.elapsed()), || {
            stack.slack.posts_per_event().contains_key(&event_id)
        })
        .await;
        let log = live
            .log_when(Duration::from_secs(2), |log| log.contains(&event_id))
            .await;
        assert!(
            answered,
            "round {round}: {event_id} not answered within {ANSWERED_WITHIN:?} of being \
             queued; the live worker's log:\n{log}"
        );
        let receives = receive_count_in(&log, &event_id);
        println!(
            "round {round}: answered {:.1} s after it was queued, on receive {receives:?} \
             of {max_receives}",
            sent.elapsed().as_secs_f64()
        );
        // One receive for the dead polls, however many died: the message is visible again
        // only once every poll open when it was handed out has ended.
        assert_eq!(
            receives,
            Some(2),
            "round {round}: receives spent on {KILLED_PER_ROUND} killed workers' polls, of \
             the {max_receives} a message has"
        );
        assert!(
            eventually_async(Duration::from_secs(10), || async {
                stack.queue.depth(&stack.queue.url).await == 0
            })
            .await,
            "round {round}: the message deleted"
        );
        // The next round's killed replicas poll while this one's live worker is gone too.
        drop(live);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let per_event = stack.slack.posts_per_event();
    assert_eq!(per_event.len(), ROUNDS, "{per_event:?}");
    assert!(
        per_event.values().all(|&n| n == 1),
        "answered once each: {per_event:?}"
    );
    assert!(
        stack.queue.dead_letters().await.is_empty(),
        "nothing dead-lettered"
    );
}

/// A local worker told no `WORK_QUEUE_MAX_RECEIVES` takes its queue's own `maxReceiveCount`
/// (a queue made with another budget than the default, as one made before the default
/// changed): its last-chance receive is the queue's, not a count SQS never reaches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn a_worker_without_a_receive_budget_reads_its_queues_own() {
    let stack = DeferredStack::start(3).await;
    let mut vars = stack.worker_vars(LEASE_S, 3);
    vars.retain(|(k, _)| *k != "WORK_QUEUE_MAX_RECEIVES");
    let worker = BotProcess::spawn_worker(&vars);
    let log = worker
        .log_when(Duration::from_secs(10), |log| log.contains("max_receives="))
        .await;
    assert!(
        log.contains("max_receives=3") && log.contains("redrive policy"),
        "{log}"
    );
}
