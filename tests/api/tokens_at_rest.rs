//! Tokens at rest with `SLACK_TOKEN_KEY_ID` (KMS on moto's server, the installations on
//! DynamoDB Local): a data key handed out before a refresh's exchange seals the store after it
//! however late that comes; an installation the app's key keeps as it is is sealed at its first
//! read; `import-token` seals, or keeps a token as it is only when told to; the write guards
//! tell apart two items whose sealed tokens alone differ.

use std::sync::Arc;
use std::time::Duration;

use slack_once::testing::FakeSlack;
use slack_once::workspaces::seal::{DATA_KEY_AGE, ReadyKey, Seal, Tokens};
use slack_once::workspaces::{
    DynamoInstallations, Installation, InstallationKey, InstallationStore, Token,
};

use crate::helpers::*;

const CLIENT_ID: &str = "4321.8765";

/// A new KMS key on moto's server, its id, and a client for it.
async fn kms_key() -> (aws_sdk_kms::Client, String) {
    let kms = kms_client(&sqs_endpoint());
    let key = kms
        .create_key()
        .description("slack-once tests: tokens at rest")
        .send()
        .await
        .expect("a KMS key on the moto server")
        .key_metadata
        .unwrap()
        .key_id;
    (kms, key)
}

/// A KMS client of `endpoint` (moto's server, or a proxy in front of it that can refuse every
/// call: moto serves a disabled key's data keys as any other's).
fn kms_client(endpoint: &str) -> aws_sdk_kms::Client {
    use aws_sdk_kms::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_kms::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
        .http_client(slack_once::testing::wiring::new_aws_http_client())
        .build();
    aws_sdk_kms::Client::from_conf(config)
}

/// Everything the table holds, as text.
async fn table_text(table: &str) -> String {
    let scanned = dynamodb_client(&dynamodb_endpoint())
        .scan()
        .table_name(table)
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    format!("{:?}", scanned.items())
}

fn installation(team: &str, bot: &str, user: &str) -> Installation {
    Installation {
        team_id: Some(team.into()),
        team_name: Some("Team".into()),
        enterprise_id: None,
        enterprise_name: None,
        enterprise_url: None,
        is_enterprise_install: false,
        app_id: Some("A0000SEAL".into()),
        bot_id: Some("B1".into()),
        bot_user_id: Some("U0BOT".into()),
        bot_scopes: vec!["chat:write".into()],
        bot: Token {
            token: bot.into(),
            refresh_token: Some(format!("{bot}-refresh")),
            expires_at_ms: Some(1_900_000_000_000),
        },
        user_id: Some("U0USER".into()),
        user_scopes: vec!["search:read".into()],
        user: Some(Token {
            token: user.into(),
            refresh_token: None,
            expires_at_ms: None,
        }),
        installed_at_ms: 1_700_000_000_000,
    }
}

/// `Seal::ready` hands out a data key for the write that follows: however late that write
/// comes (past `DATA_KEY_AGE`, a refresh's exchange having taken its time) it seals with that
/// key and asks KMS for nothing, so KMS refusing by then (every call answered 503) cannot stop
/// the store of a pair Slack has already issued. Without the key handed out, the same write
/// needs KMS and fails: what the refresh used to meet between its exchange and its store.
#[tokio::test]
#[ignore = "needs the SQS server"]
async fn a_data_key_handed_out_before_an_exchange_seals_the_store_however_late_it_comes() {
    let (kms, key) = kms_key().await;
    let proxy = LedgerProxy::start(&sqs_endpoint()).await;
    let seal = Seal::kms(kms_client(&proxy.url), key.clone());
    let item = format!("install#{CLIENT_ID}#WORKSPACE#T0READY");
    let tokens = Tokens {
        bot: "xoxb-ready-new".into(),
        bot_refresh: Some("xoxe-ready-new".into()),
        user: None,
        user_refresh: None,
    };
    let ready = seal.ready(CLIENT_ID, &item).await.unwrap();
    proxy.set_down(true);
    // The exchange outlasts the data key's age (tokio's clock: the key's age is kept on it).
    tokio::time::pause();
    tokio::time::advance(DATA_KEY_AGE + Duration::from_secs(1)).await;
    let sealed = seal
        .seal_ready(&ready, CLIENT_ID, &item, &tokens)
        .await
        .expect("sealed with the key handed out, KMS not asked")
        .expect("a key is set");
    tokio::time::resume();
    // Not a key kept anyway: without the one handed out, KMS is needed now, and refuses.
    assert!(
        seal.seal(CLIENT_ID, &item, &tokens).await.is_err(),
        "an aged key is not used past its age unless handed out"
    );
    assert!(
        seal.seal_ready(&ReadyKey::none(), CLIENT_ID, &item, &tokens)
            .await
            .is_err()
    );
    // What it sealed opens, in another process (nothing cached), once KMS answers again.
    proxy.set_down(false);
    let other = Seal::kms(kms.clone(), key.clone());
    assert_eq!(other.open(CLIENT_ID, &item, &sealed).await.unwrap(), tokens);
    // And for its own item only.
    let elsewhere = format!("install#{CLIENT_ID}#WORKSPACE#T0OTHER");
    assert!(other.open(CLIENT_ID, &elsewhere, &sealed).await.is_err());
}

/// An installation kept as it is at the app's own key (written by a process without
/// `SLACK_TOKEN_KEY_ID`) is sealed by the first read of a process with the key: the table then
/// holds none of its tokens, a fresh process opens them, and a process without the key refuses
/// it. KMS refusing at that read: the installation is read as it is, within the read's budget
/// (the request is served in time), and sealed at a later read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the SQS server"]
async fn a_plaintext_installation_at_the_apps_key_is_sealed_at_its_first_read_with_the_key() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let (kms, key) = kms_key().await;
    let proxy = LedgerProxy::start(&sqs_endpoint()).await;
    let store = |seal: Seal| {
        DynamoInstallations::new(dynamodb_client(&endpoint), table.clone(), CLIENT_ID)
            .with_seal(Arc::new(seal))
    };
    let plain = store(Seal::none());
    let kept = installation("T0PLAIN", "xoxb-plain-bot", "xoxp-plain-user");
    plain.save(&kept).await.unwrap();
    let id = InstallationKey::Workspace("T0PLAIN".into());
    let text = table_text(&table).await;
    assert!(text.contains("xoxb-plain-bot"), "kept as it is: {text}");

    // KMS refusing: read as it is, still kept as it is.
    proxy.set_down(true);
    let found = store(Seal::kms(kms_client(&proxy.url), key.clone()))
        .find(&id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.installation, kept);
    assert!(table_text(&table).await.contains("xoxb-plain-bot"));
    // KMS never answering: read as it is within the read's budget, not when KMS answers.
    proxy.set_down(false);
    proxy.hold_next(LedgerOp::Other, HoldAt::BeforeForwarding);
    let started = std::time::Instant::now();
    let found = store(Seal::kms(kms_client(&proxy.url), key.clone()))
        .find(&id)
        .await
        .unwrap()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(proxy.held(), 1, "KMS was asked, and never answered");
    assert_eq!(found.installation, kept);
    assert!(table_text(&table).await.contains("xoxb-plain-bot"));

    // KMS answering: the first read seals it.
    let sealing = store(Seal::kms(kms.clone(), key.clone()));
    let found = sealing.find(&id).await.unwrap().unwrap();
    assert_eq!(found.installation, kept);
    let text = table_text(&table).await;
    for token in [
        "xoxb-plain-bot",
        "xoxb-plain-bot-refresh",
        "xoxp-plain-user",
    ] {
        assert!(!text.contains(token), "sealed at its read: {text}");
    }
    assert!(text.contains("sealed_key"), "{text}");
    let fresh = store(Seal::kms(kms.clone(), key.clone()));
    let found = fresh.find(&id).await.unwrap().unwrap();
    assert_eq!(found.installation, kept, "opens in a fresh process");
    assert!(
        plain.find(&id).await.is_err(),
        "a process without the key refuses a sealed item"
    );
}

/// Two items whose JSON is the same and whose sealed tokens differ are two items to every
/// write guard: `save_new` (kept only where none is, or over itself when sent again) keeps
/// the first token and never writes the second over it. The first, its answer turned into a
/// 500 after DynamoDB applied it (the SDK sends the same bytes again), is still taken as
/// itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the SQS server"]
async fn a_write_guard_tells_apart_two_installations_whose_sealed_tokens_alone_differ() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let proxy = LedgerProxy::start(&endpoint).await;
    let (kms, key) = kms_key().await;
    let store = DynamoInstallations::new(dynamodb_client(&proxy.url), table.clone(), CLIENT_ID)
        .with_seal(Arc::new(Seal::kms(kms, key)));
    let first = installation("T0GUARD", "xoxb-guard-first", "xoxp-guard-user");
    // A conditional put: the proxy counts it as a claim.
    proxy.hold_next(LedgerOp::Claim, HoldAt::Error500AfterForwarding);
    assert!(store.save_new(&first).await.unwrap(), "sent again: itself");
    assert_eq!(proxy.held(), 1, "the answer was lost once");
    // The same installation with another bot token: the same JSON once the tokens are out.
    let second = installation("T0GUARD", "xoxb-guard-second", "xoxp-guard-user");
    assert!(
        !store.save_new(&second).await.unwrap(),
        "not over an installation whose tokens differ"
    );
    let id = InstallationKey::Workspace("T0GUARD".into());
    let found = store.find(&id).await.unwrap().unwrap();
    assert_eq!(found.installation.bot.token, "xoxb-guard-first");
}

/// `import-token` seals the token with `SLACK_TOKEN_KEY_ID`; without it, it refuses (exit 2,
/// nothing written) unless told `--plaintext`, and refuses both at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server and the built binary"]
async fn import_token_seals_the_token_and_keeps_one_as_it_is_only_when_told() {
    let slack = FakeSlack::start()
        .await
        .with_oauth(CLIENT_ID, "import-client-secret");
    let token = "xoxb-imported-at-rest";
    slack.with_grants(|g| g.accept(token, "T0TEST"));
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let kms = kms_key_vars().await;
    let run = |args: &[&str], sealed: bool| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"));
        command.env_clear().arg("import-token").args(args);
        for (k, v) in dynamodb_env(&endpoint) {
            command.env(k, v);
        }
        if sealed {
            for (k, v) in &kms {
                command.env(k, v);
            }
        }
        command
            .env("SLACK_BOT_TOKEN", token)
            .env("SLACK_CLIENT_ID", CLIENT_ID)
            .env("SLACK_API_URL", slack.base_url())
            .env("DEDUP_TABLE", &table);
        let out = command.output().unwrap();
        (
            out.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (code, said) = run(&[], false);
    assert_eq!(code, Some(2), "{said}");
    assert!(
        said.contains("SLACK_TOKEN_KEY_ID") && said.contains("--plaintext"),
        "{said}"
    );
    let (code, said) = run(&["--plaintext"], true);
    assert_eq!(code, Some(2), "{said}");
    assert_eq!(table_text(&table).await, "[]", "nothing written");

    let (code, said) = run(&[], true);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("imported the installation of T0TEST, sealed"),
        "{said}"
    );
    assert!(!said.contains(token), "{said}");
    let text = table_text(&table).await;
    assert!(!text.contains(token), "sealed: {text}");
    assert!(text.contains("sealed_key"), "{text}");

    // Told --plaintext, into another table: kept as it is, and it says so.
    let (other, _) = fresh_table(&endpoint).await;
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"));
    command.env_clear().args(["import-token", "--plaintext"]);
    for (k, v) in dynamodb_env(&endpoint) {
        command.env(k, v);
    }
    let out = command
        .env("SLACK_BOT_TOKEN", token)
        .env("SLACK_CLIENT_ID", CLIENT_ID)
        .env("SLACK_API_URL", slack.base_url())
        .env("DEDUP_TABLE", &other)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("kept as it is"), "{said}");
    assert!(table_text(&other).await.contains(token));
}
