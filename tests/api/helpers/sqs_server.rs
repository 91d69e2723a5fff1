//! Test helpers: the SQS server (moto).

use super::*;

pub const SQS_SCRIPT: &str = "scripts/sqs-local.sh start";

/// The SQS server's endpoint on 127.0.0.1 (port from SQS_LOCAL_PORT, default 9324). Fails the
/// test, naming the script, when nothing answers there: never skips silently.
/// A new KMS key on the SQS server (moto serves KMS too), under the alias `alias/NAME-…`: the
/// variables that make a process seal its tokens with it.
pub async fn kms_key_vars() -> Vec<(&'static str, String)> {
    let endpoint = sqs_endpoint();
    let kms = local_client!(aws_sdk_kms, &endpoint);
    let key = kms
        .create_key()
        .description("slack-once tests: installations' tokens")
        .send()
        .await
        .expect("a KMS key on the moto server")
        .key_metadata
        .unwrap()
        .key_id;
    let alias = format!("alias/slack-once-test-{}", uuid::Uuid::new_v4().simple());
    kms.create_alias()
        .alias_name(&alias)
        .target_key_id(&key)
        .send()
        .await
        .unwrap();
    vec![
        ("SLACK_TOKEN_KEY_ID", alias),
        ("AWS_ENDPOINT_URL_KMS", endpoint),
    ]
}

pub fn sqs_endpoint() -> String {
    let port: u16 = std::env::var("SQS_LOCAL_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(9324);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    if std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
        panic!(
            "the SQS server is not answering on 127.0.0.1:{port}: start it with `{SQS_SCRIPT}` \
             (scripts/test.sh starts and stops it for you)"
        );
    }
    format!("http://{addr}")
}

pub fn sqs_client(endpoint: &str) -> aws_sdk_sqs::Client {
    local_client!(aws_sdk_sqs, endpoint)
}

/// A fresh work queue and its dead-letter queue on the SQS server.
pub struct TestQueue {
    pub url: String,
    pub dlq_url: String,
    pub client: aws_sdk_sqs::Client,
}

impl TestQueue {
    pub async fn create(endpoint: &str, max_receives: u32) -> Self {
        let client = sqs_client(endpoint);
        let name = format!("test-{}", uuid::Uuid::new_v4().simple());
        let (url, dlq_url) = slack_once::queue::SqsQueue::create_with_dead_letters(
            &client,
            &name,
            max_receives,
            Duration::from_secs(30),
        )
        .await
        .expect("create the test queues on the SQS server");
        Self {
            url,
            dlq_url,
            client,
        }
    }

    /// Messages in the queue, visible or in flight (SQS's approximate counts, exact on moto).
    pub async fn depth(&self, url: &str) -> usize {
        use aws_sdk_sqs::types::QueueAttributeName as A;
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(A::ApproximateNumberOfMessages)
            .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .unwrap();
        let attrs = out.attributes().unwrap();
        [
            A::ApproximateNumberOfMessages,
            A::ApproximateNumberOfMessagesNotVisible,
        ]
        .iter()
        .map(|a| {
            attrs
                .get(a)
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0)
        })
        .sum()
    }

    /// The bodies waiting in the dead-letter queue (received, then left there).
    pub async fn dead_letters(&self) -> Vec<String> {
        let out = self
            .client
            .receive_message()
            .queue_url(&self.dlq_url)
            .max_number_of_messages(10)
            .visibility_timeout(1)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        out.messages()
            .iter()
            .filter_map(|m| m.body().map(str::to_string))
            .collect()
    }
}

/// The variables of a deferred-mode ingress sending to `queue` at `endpoint`: no ledger.
pub fn ingress_vars(queue: &TestQueue, sqs: &str) -> Vec<(&'static str, String)> {
    let mut vars = dynamodb_env("http://127.0.0.1:9");
    vars.extend([
        ("AWS_ENDPOINT_URL_SQS", sqs.to_string()),
        ("WORK_QUEUE_URL", queue.url.clone()),
    ]);
    vars
}

/// The variables of a worker on `queue`, ledger `table`, posting to `slack`.
pub fn worker_vars(
    slack: &SlackStandin,
    dynamodb: &str,
    table: &str,
    queue: &TestQueue,
    sqs: &str,
    lease_s: u64,
    max_receives: u32,
) -> Vec<(&'static str, String)> {
    let mut vars = bot_vars(slack, dynamodb, table);
    vars.extend([
        ("AWS_ENDPOINT_URL_SQS", sqs.to_string()),
        ("WORK_QUEUE_URL", queue.url.clone()),
        ("DEDUP_LEASE_SECONDS", lease_s.to_string()),
        ("WORK_QUEUE_MAX_RECEIVES", max_receives.to_string()),
    ]);
    vars
}

/// What a deferred-mode test runs against: the Slack stand-in, a fresh table on DynamoDB
/// Local, a fresh queue (and its dead-letter queue) on the SQS server.
pub struct DeferredStack {
    pub slack: SlackStandin,
    pub dynamodb: String,
    pub table: String,
    pub sqs: String,
    pub queue: TestQueue,
}

impl DeferredStack {
    pub async fn start(max_receives: u32) -> Self {
        let dynamodb = dynamodb_endpoint();
        let sqs = sqs_endpoint();
        let (table, _ledger) = fresh_table(&dynamodb).await;
        Self {
            slack: SlackStandin::start().await,
            queue: TestQueue::create(&sqs, max_receives).await,
            dynamodb,
            table,
            sqs,
        }
    }

    /// An ingress's variables (no ledger: it only sends to the queue).
    pub fn ingress_vars(&self) -> Vec<(&'static str, String)> {
        ingress_vars(&self.queue, &self.sqs)
    }

    /// A worker's variables, with its lease and the queue's `maxReceiveCount`.
    pub fn worker_vars(&self, lease_s: u64, max_receives: u32) -> Vec<(&'static str, String)> {
        worker_vars(
            &self.slack,
            &self.dynamodb,
            &self.table,
            &self.queue,
            &self.sqs,
            lease_s,
            max_receives,
        )
    }
}

/// Waits until `check` holds, polling every 50 ms, for at most `limit`.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check()
}

/// Waits until the asynchronous `check` holds, polling every 100 ms, for at most `limit`.
pub async fn eventually_async<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
