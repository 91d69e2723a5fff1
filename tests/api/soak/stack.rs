//! The stores the soak's fleet runs on, behind their faulting proxies: DynamoDB Local and the
//! SQS server (`SOAK_STORE=dynamodb`, the default), or PostgreSQL (`SOAK_STORE=postgres`): a
//! fresh schema for the ledger and the work queue, no AWS variable at all. What the soak reads
//! of them (the queue's depth, the dead letters, a request's claim, the claims left past their
//! lease) it reads around the proxies.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use slack_once::ledger::PostgresLedger;
use slack_once::postgres::{DB_NOW_MS, Database};
use slack_once::queue::PostgresQueue;
use slack_once::slack::envelope::EventId;

use super::proxy::{self, AwsProxy, Registry};
use super::{MAX_RECEIVES, tool};
use crate::helpers::*;

/// The database's faults, each per 10,000 statements of the fleet (the soak's own reads and
/// the operator's tools go around the proxy): every one a fault `Database::run` tries once
/// more on a new connection, so what is tried is that a statement run twice, or a transaction
/// cut before its end, is harmless.
pub const POSTGRES_FAULTS: PostgresFaults = PostgresFaults {
    cut_before: 50,
    answer_lost: 50,
    slow: 50,
};

/// Which store the soak runs on (`SOAK_STORE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    DynamoDb,
    Postgres,
}

impl Store {
    /// `SOAK_STORE`: `dynamodb` (the default) or `postgres`.
    pub fn from_env() -> Self {
        match std::env::var("SOAK_STORE").as_deref() {
            Err(_) | Ok("" | "dynamodb") => Store::DynamoDb,
            Ok("postgres") => Store::Postgres,
            Ok(other) => panic!("SOAK_STORE={other}: dynamodb or postgres"),
        }
    }
}

/// The ledger and the work queue the fleet shares, and the proxies in front of them.
pub enum Stack {
    Aws(Box<Aws>),
    Postgres(Box<Postgres>),
}

pub struct Aws {
    pub dynamodb: String,
    pub sqs: String,
    pub table: String,
    pub queue: TestQueue,
    pub secret_name: String,
    /// The soak's own reads, around the proxy.
    pub ddb: aws_sdk_dynamodb::Client,
    pub ledger: slack_once::ledger::DynamoLedger,
    pub dynamo_proxy: AwsProxy,
    pub aws_proxy: AwsProxy,
}

pub struct Postgres {
    /// The fresh schema's `DATABASE_URL` (direct, not through the proxy).
    pub url: String,
    pub queue_name: String,
    /// The soak's own reads, around the proxy.
    pub ledger: PostgresLedger,
    pub queue: PostgresQueue,
    pub proxy: CuttingProxy,
}

/// Claims left in progress past their lease: their keys, and the queued requests' claims left
/// to the queue's redelivery.
pub struct Lapsed {
    pub keys: Vec<String>,
    pub redelivery_due: usize,
}

impl Stack {
    /// A new table and queues (and the secret), or a new schema, with their proxies; faults
    /// drawn from `seed` unless `calm`.
    pub async fn start(
        store: Store,
        registry: Arc<Mutex<Registry>>,
        seed: u64,
        calm: bool,
    ) -> Self {
        match store {
            Store::DynamoDb => Stack::Aws(Box::new(Aws::start(registry, seed, calm).await)),
            Store::Postgres => Stack::Postgres(Box::new(Postgres::start(seed, calm).await)),
        }
    }

    /// Every process's variables: its stores (through the proxies), its secrets, Slack.
    pub fn common_vars(&self, slack: &SlackStandin) -> Vec<(&'static str, String)> {
        let mut vars = match self {
            Stack::Aws(aws) => {
                let mut vars = dynamodb_env(&aws.dynamo_proxy.url);
                vars.extend([
                    ("AWS_ENDPOINT_URL_SQS", aws.aws_proxy.url.clone()),
                    (
                        "AWS_ENDPOINT_URL_SECRETS_MANAGER",
                        aws.aws_proxy.url.clone(),
                    ),
                    ("SLACK_SECRETS_ARN", aws.secret_name.clone()),
                    ("SLACK_API_URL", slack.base_url.clone()),
                    ("DEDUP_TABLE", aws.table.clone()),
                ]);
                vars
            }
            Stack::Postgres(pg) => {
                let mut vars = postgres_bot_vars(slack, &pg.proxy.url(&pg.url));
                vars.push(("SLACK_SIGNING_SECRET", SECRET.to_string()));
                vars
            }
        };
        vars.extend([("MODEL_WORDS", "6".into()), ("MODEL_WORD_MS", "20".into())]);
        vars
    }

    /// The work queue's variable.
    pub fn queue_var(&self) -> (&'static str, String) {
        match self {
            Stack::Aws(aws) => ("WORK_QUEUE_URL", aws.queue.url.clone()),
            Stack::Postgres(pg) => ("WORK_QUEUE_NAME", pg.queue_name.clone()),
        }
    }

    /// What an operator's tools (`redrive`) are run with: the stores directly.
    pub fn operator_vars(&self) -> Vec<(&'static str, String)> {
        match self {
            Stack::Aws(aws) => {
                let mut vars = dynamodb_env(&aws.dynamodb);
                vars.extend([
                    ("AWS_ENDPOINT_URL_SQS", aws.sqs.clone()),
                    ("WORK_QUEUE_URL", aws.queue.url.clone()),
                    ("DEAD_LETTER_QUEUE_URL", aws.queue.dlq_url.clone()),
                    ("DEDUP_TABLE", aws.table.clone()),
                ]);
                vars
            }
            Stack::Postgres(pg) => vec![
                ("DATABASE_URL", pg.url.clone()),
                ("WORK_QUEUE_NAME", pg.queue_name.clone()),
            ],
        }
    }

    /// The work queue's visible messages (the pacing's brake), if it could be read.
    pub async fn backlog(&self) -> Option<usize> {
        match self {
            Stack::Aws(aws) => {
                use aws_sdk_sqs::types::QueueAttributeName as A;
                aws.queue
                    .client
                    .get_queue_attributes()
                    .queue_url(&aws.queue.url)
                    .attribute_names(A::ApproximateNumberOfMessages)
                    .send()
                    .await
                    .ok()
                    .and_then(|out| {
                        out.attributes()?
                            .get(&A::ApproximateNumberOfMessages)?
                            .parse()
                            .ok()
                    })
            }
            Stack::Postgres(pg) => {
                let client = pg.ledger.database().client().await.ok()?;
                let row = client
                    .query_one(
                        &format!(
                            "SELECT count(*) FROM slack_once_queue WHERE queue = $1 \
                             AND visible_at_ms <= {DB_NOW_MS}"
                        ),
                        &[&pg.queue_name],
                    )
                    .await
                    .ok()?;
                usize::try_from(row.get::<_, i64>(0)).ok()
            }
        }
    }

    /// Messages in the work queue, visible or not.
    pub async fn depth(&self) -> usize {
        match self {
            Stack::Aws(aws) => aws.queue.depth(&aws.queue.url).await,
            Stack::Postgres(pg) => pg.queue.depth().await.unwrap() as usize,
        }
    }

    /// Messages in the dead-letter queue.
    pub async fn dead_letters(&self) -> usize {
        match self {
            Stack::Aws(aws) => aws.queue.depth(&aws.queue.dlq_url).await,
            Stack::Postgres(pg) => pg.queue.dead_letters(1_000_000).await.unwrap().len(),
        }
    }

    /// The claims of the soak's app left in progress past their lease, listed.
    pub async fn lapsed(&self) -> Lapsed {
        match self {
            Stack::Aws(aws) => {
                let swept = slack_once::tools::sweep::sweep(
                    &aws.ddb,
                    &aws.table,
                    Some(APP_ID),
                    Duration::ZERO,
                    super::now_ms(),
                    true,
                )
                .await
                .unwrap();
                Lapsed {
                    keys: swept.keys,
                    redelivery_due: swept.redelivery_due,
                }
            }
            Stack::Postgres(pg) => {
                let sweep = slack_once::ledger::Sweep {
                    older_than: Duration::ZERO,
                    redelivery_within: slack_once::tools::sweep::REDELIVERY_WITHIN,
                    app: Some(APP_ID),
                    code: slack_once::tools::sweep::ABANDONED,
                    dry_run: true,
                };
                let swept = pg
                    .ledger
                    .sweep_abandoned(super::now_ms(), &sweep)
                    .await
                    .unwrap();
                Lapsed {
                    keys: swept.keys,
                    redelivery_due: swept.redelivery_due,
                }
            }
        }
    }

    /// The sweep an operator runs now and then: the claims left in progress past their lease
    /// ended failed (`abandoned`); their keys. On PostgreSQL, `slack-once sweep` itself
    /// (`binary`, DATABASE_URL).
    pub async fn sweep(&self, binary: &Path) -> Vec<String> {
        match self {
            Stack::Aws(aws) => {
                slack_once::tools::sweep::sweep(
                    &aws.ddb,
                    &aws.table,
                    Some(APP_ID),
                    Duration::ZERO,
                    super::now_ms(),
                    false,
                )
                .await
                .unwrap()
                .keys
            }
            Stack::Postgres(pg) => {
                let vars = [("DATABASE_URL", pg.url.clone())];
                let report = tool(
                    binary,
                    &["sweep", "--older-than", "0", "--app", APP_ID],
                    &vars,
                );
                report
                    .lines()
                    .filter_map(|l| l.strip_prefix("ended failed "))
                    .map(str::to_string)
                    .collect()
            }
        }
    }

    /// A stuck claim's fields as stored (its journal apart), for a failure's report.
    pub async fn describe(&self, key: &str) -> String {
        match self {
            Stack::Aws(aws) => {
                let item = aws.ledger.get_item(key).await.unwrap();
                let mut fields: Vec<String> = item
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(k, _)| k != "journal")
                    .map(|(k, v)| format!("{k}={v:?}"))
                    .collect();
                fields.sort();
                fields.join(" ")
            }
            Stack::Postgres(pg) => {
                let record = match EventId::try_from(key.to_string()) {
                    Ok(id) => pg.ledger.claim_record(&id).await.unwrap(),
                    Err(_) => None,
                };
                format!("key={key} {record:?}")
            }
        }
    }

    /// What the ledger holds of a request under `keys`: its claim's status and error (its
    /// message's claim, not the alias that names it).
    pub async fn ledger_status(&self, keys: &[String]) -> Option<(String, String)> {
        match self {
            Stack::Aws(aws) => {
                for key in keys {
                    if let Some(item) = aws.ledger.get_item(key).await.unwrap() {
                        if item.contains_key("alias_of") {
                            continue;
                        }
                        let text = |name: &str| {
                            item.get(name)
                                .and_then(|s| s.as_s().ok())
                                .cloned()
                                .unwrap_or_default()
                        };
                        return Some((text("status"), text("error")));
                    }
                }
                None
            }
            Stack::Postgres(pg) => {
                // Aliases are rows of their own table: a claim is only ever the message's.
                for key in keys {
                    let Ok(id) = EventId::try_from(key.clone()) else {
                        continue;
                    };
                    if let Some(record) = pg.ledger.claim_record(&id).await.unwrap() {
                        return Some((
                            record.status.as_str().to_string(),
                            record.error.unwrap_or_default(),
                        ));
                    }
                }
                None
            }
        }
    }

    /// No more faults of the store from now on.
    pub fn stop_faults(&self) {
        match self {
            Stack::Aws(aws) => {
                aws.dynamo_proxy.stop_faults();
                aws.aws_proxy.stop_faults();
            }
            Stack::Postgres(pg) => pg.proxy.stop_faults(),
        }
    }

    /// The store's faults injected, said in a line.
    pub fn faults_injected(&self) -> String {
        match self {
            Stack::Aws(aws) => format!(
                "DynamoDB faults injected: {:?}; SQS's: {:?}",
                aws.dynamo_proxy.injected(),
                aws.aws_proxy.injected()
            ),
            Stack::Postgres(pg) => format!(
                "PostgreSQL faults injected: {:?} (over {} connections through the proxy)",
                pg.proxy.injected(),
                pg.proxy.connections()
            ),
        }
    }

    /// What the queue saw of request `i`'s messages: on SQS what its proxy followed; on
    /// PostgreSQL what the queue's tables still hold of them (a dead letter, a message left).
    pub async fn journey(&self, i: u64) -> Vec<String> {
        match self {
            Stack::Aws(aws) => aws.aws_proxy.journey(i),
            Stack::Postgres(pg) => {
                let Ok(client) = pg.ledger.database().client().await else {
                    return vec!["(the database could not be read)".into()];
                };
                let rows = client
                    .query(
                        "SELECT 'queued', id, receive_count, sent_at_ms FROM slack_once_queue \
                         WHERE queue = $1 AND position(convert_to($2, 'UTF8') in body) > 0 \
                         UNION ALL SELECT 'dead letter', id, receive_count, sent_at_ms \
                         FROM slack_once_queue_dead_letters \
                         WHERE queue = $1 AND position(convert_to($2, 'UTF8') in body) > 0",
                        &[&pg.queue_name, &super::mix::marker(i)],
                    )
                    .await
                    .unwrap_or_default();
                rows.iter()
                    .map(|row| {
                        format!(
                            "{} {} ({} receives, sent at {})",
                            row.get::<_, &str>(0),
                            row.get::<_, i64>(1),
                            row.get::<_, i32>(2),
                            row.get::<_, i64>(3)
                        )
                    })
                    .collect()
            }
        }
    }

    /// The stores' names, for a failure to name where to look.
    pub fn describe_stores(&self) -> String {
        match self {
            Stack::Aws(aws) => format!("table {}, queue {}", aws.table, aws.queue.url),
            Stack::Postgres(pg) => format!("DATABASE_URL {}, queue {}", pg.url, pg.queue_name),
        }
    }

    /// What the run made, removed (DynamoDB Local, the SQS server and PostgreSQL keep serving
    /// the next run).
    pub async fn remove(&self) {
        match self {
            Stack::Aws(aws) => {
                let _ = aws.ddb.delete_table().table_name(&aws.table).send().await;
                for url in [&aws.queue.url, &aws.queue.dlq_url] {
                    let _ = aws.queue.client.delete_queue().queue_url(url).send().await;
                }
                let _ = secrets_client(&aws.sqs)
                    .delete_secret()
                    .secret_id(&aws.secret_name)
                    .force_delete_without_recovery(true)
                    .send()
                    .await;
            }
            Stack::Postgres(pg) => {
                let schema = pg
                    .url
                    .rsplit("search_path%3D")
                    .next()
                    .unwrap_or_default()
                    .to_string();
                if let Ok(client) = pg.ledger.database().client().await {
                    let _ = client
                        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
                        .await;
                }
            }
        }
    }
}

impl Aws {
    async fn start(registry: Arc<Mutex<Registry>>, seed: u64, calm: bool) -> Self {
        let dynamodb = dynamodb_endpoint();
        let sqs = sqs_endpoint();
        let (table, _) = fresh_table(&dynamodb).await;
        let queue = TestQueue::create(&sqs, MAX_RECEIVES).await;
        let secret_name = format!("soak-{}", uuid::Uuid::new_v4().simple());
        secrets_client(&sqs)
            .create_secret()
            .name(&secret_name)
            .secret_string(
                serde_json::json!({"signing_secret": SECRET, "bot_token": TOKEN}).to_string(),
            )
            .send()
            .await
            .expect("the secret is created on the SQS server's Secrets Manager");
        let dynamo_proxy = AwsProxy::start(
            &dynamodb,
            registry.clone(),
            true,
            (!calm).then_some(proxy::DYNAMO_FAULTS),
            seed.wrapping_mul(11),
        )
        .await;
        let aws_proxy = AwsProxy::start(
            &sqs,
            registry,
            false,
            (!calm).then_some(proxy::SQS_FAULTS),
            seed.wrapping_mul(13),
        )
        .await;
        let ddb = dynamodb_client(&dynamodb);
        Self {
            ledger: slack_once::ledger::DynamoLedger::new(ddb.clone(), table.clone()),
            ddb,
            dynamodb,
            sqs,
            table,
            queue,
            secret_name,
            dynamo_proxy,
            aws_proxy,
        }
    }
}

impl Postgres {
    async fn start(seed: u64, calm: bool) -> Self {
        let url = fresh_schema_url().await;
        // The soak's own reads: a pool of its own, on the database's clock as the fleet's.
        let database = Database::connect(&url, 4).expect("the schema's URL");
        database.migrate().await.expect("migrate the soak's schema");
        let queue_name = format!("soak-{}", uuid::Uuid::new_v4().simple());
        let proxy = CuttingProxy::start_random(
            postgres_port(),
            (!calm).then_some(POSTGRES_FAULTS),
            seed.wrapping_mul(11),
        )
        .await;
        Self {
            ledger: PostgresLedger::new(database.clone()),
            queue: PostgresQueue::new(database, queue_name.clone(), MAX_RECEIVES),
            url,
            queue_name,
            proxy,
        }
    }
}
