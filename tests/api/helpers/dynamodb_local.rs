//! Test helpers: DynamoDB Local.

use super::*;

pub const DYNAMODB_SCRIPT: &str = "scripts/dynamodb-local.sh start";

/// An SDK client for a local server at `endpoint`, with test credentials, in us-east-1.
macro_rules! local_client {
    ($sdk:ident, $endpoint:expr_2021) => {{
        use $sdk::config::{BehaviorVersion, Credentials, Region};
        let config = $sdk::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url($endpoint)
            .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
            .http_client(slack_once::testing::wiring::new_aws_http_client())
            .build();
        $sdk::Client::from_conf(config)
    }};
}

/// DynamoDB Local's endpoint on 127.0.0.1 (port from DYNAMODB_LOCAL_PORT, default 8000).
/// Fails the test, naming the script, when nothing answers there: never skips silently.
pub fn dynamodb_endpoint() -> String {
    let port: u16 = std::env::var("DYNAMODB_LOCAL_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(8000);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    if std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
        panic!(
            "DynamoDB Local is not answering on 127.0.0.1:{port}: start it with `{DYNAMODB_SCRIPT}` \
             (scripts/test.sh starts and stops it for you)"
        );
    }
    format!("http://{addr}")
}

/// The variables of a `slack-once` process posting to `slack` with its ledger in `table` at
/// `endpoint`.
pub fn bot_vars(slack: &SlackStandin, endpoint: &str, table: &str) -> Vec<(&'static str, String)> {
    let mut vars = dynamodb_env(endpoint);
    vars.extend([
        ("SLACK_BOT_TOKEN", TOKEN.to_string()),
        ("SLACK_API_URL", slack.base_url.clone()),
        ("DEDUP_TABLE", table.to_string()),
    ]);
    vars
}

/// The variables that point the SDK (and the binary) at DynamoDB Local.
pub fn dynamodb_env(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint.to_string()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        // Keep the SDK away from ~/.aws and the instance metadata service.
        ("AWS_CONFIG_FILE", "/dev/null".into()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]
}

pub fn dynamodb_client(endpoint: &str) -> aws_sdk_dynamodb::Client {
    local_client!(aws_sdk_dynamodb, endpoint)
}

/// A fresh table on DynamoDB Local, and a ledger on it.
pub async fn fresh_table(endpoint: &str) -> (String, Arc<DynamoLedger>) {
    let client = dynamodb_client(endpoint);
    let table = format!("test-{}", uuid::Uuid::new_v4().simple());
    DynamoLedger::create_table(&client, &table)
        .await
        .expect("create the test table on DynamoDB Local");
    (table.clone(), Arc::new(DynamoLedger::new(client, table)))
}
