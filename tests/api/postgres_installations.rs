//! The installation store on PostgreSQL (scripts/postgres-local.sh): the stores' one contract,
//! two instances refreshing one token, OAuth states spent once under concurrency, writes whose
//! answer was lost (a proxy drops it after the commit) finding themselves when sent again, and
//! tokens sealed under keys the operator gives: none in any row of the schema, rotated keys,
//! a missing key said clearly, a sealed row bound to its app and workspace.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use slack_once::ledger::{Ledger, MemoryLedger};
use slack_once::postgres::{Clock, Database};
use slack_once::workspaces::seal::{ReadyKey, Seal, TokenKeys};
use slack_once::workspaces::{
    InstallationKey, InstallationStore, Place, PostgresInstallations, RefreshHold, StoreError,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::helpers::*;
use crate::workspaces::{
    CLIENT_ID, contract, fake_slack_oauth, install, installation, mention_in, rotating_install,
    send_all, spawn,
};

pub(crate) const KEY_A: &str = "a=AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
const KEY_B: &str = "b=AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";

fn sealed_by(keys: &str) -> Arc<Seal> {
    Arc::new(Seal::local(TokenKeys::parse(keys).expect("test keys")))
}

/// A database on `url` judged on the database's own clock, as a deployment runs.
async fn on_database_clock(url: &str) -> Database {
    let database = Database::connect(url, 4).expect("the test URL");
    database.migrate().await.expect("migrate");
    database
}

/// Every text of every row of every table of the schema `database` is on.
pub(crate) async fn every_row_text(database: &Database) -> Vec<String> {
    let client = database.client().await.unwrap();
    let tables: Vec<String> = client
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema()",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        tables.iter().any(|t| t == "slack_once_installations"),
        "{tables:?}"
    );
    let mut texts = Vec::new();
    for table in tables {
        for row in client
            .query(&format!("SELECT t::text FROM {table} t"), &[])
            .await
            .unwrap()
        {
            texts.push(row.get::<_, String>(0));
        }
    }
    texts
}

/// The key id the row of `team` is sealed under (`key:ID`), if sealed.
async fn sealed_key_of(database: &Database, client_id: &str, team: &str) -> Option<String> {
    let client = database.client().await.unwrap();
    let row = client
        .query_one(
            "SELECT convert_from(sealed_key, 'UTF8') FROM slack_once_installations \
             WHERE client = $1 AND scope = $2",
            &[&client_id, &format!("WORKSPACE#{team}")],
        )
        .await
        .unwrap();
    row.get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL"]
async fn the_installation_stores_contract_holds_on_postgresql_sealed_or_not() {
    let (_, database) = fresh_schema().await;
    contract(&PostgresInstallations::new(database, CLIENT_ID)).await;
    let (_, database) = fresh_schema().await;
    contract(&PostgresInstallations::new(database, CLIENT_ID).with_seal(sealed_by(KEY_A))).await;
}

/// Two instances, each its own pool on one database, with a token due to refresh: one
/// exchange, and both answer with the new token; then an install through the flow. Nowhere in
/// the schema is any token Slack issued, in clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL"]
async fn two_instances_refresh_one_token_once_and_the_database_holds_no_token() {
    let slack = fake_slack_oauth().await;
    let url = fresh_schema_url().await;
    let store = |database| {
        Arc::new(PostgresInstallations::new(database, CLIENT_ID).with_seal(sealed_by(KEY_A)))
    };
    let store_one = store(on_database_clock(&url).await);
    let store_two = store(on_database_clock(&url).await);
    let ledger: Arc<dyn Ledger> = Arc::new(MemoryLedger::new());
    // 30 minutes left: within the refresh window, refreshed beside the requests.
    rotating_install(&slack, &*store_one, "T0002", 1800).await;
    let one = spawn(&slack, ledger.clone(), store_one.clone()).await;
    let two = spawn(&slack, ledger.clone(), store_two.clone()).await;
    let sends = (1..=6)
        .map(|n| {
            let app = if n % 2 == 0 { &one } else { &two };
            let body = mention_in(&slack, "T0002", None, false, "C0002", n);
            (app.url("/slack/events"), body)
        })
        .collect();
    for answer in send_all(sends).await {
        assert_eq!(answer.outcome(), "answered", "{}", answer.body);
    }
    let refreshes = || {
        slack.with_grants(|g| {
            g.exchanges()
                .iter()
                .filter(|e| e.grant_type == "refresh_token")
                .count()
        })
    };
    for _ in 0..50 {
        if refreshes() >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(refreshes(), 1, "one refresh across both instances");
    let key = InstallationKey::Workspace("T0002".into());
    let stored = store_two.find(&key).await.unwrap().unwrap();
    let now = slack_once::clock::now_ms();
    assert!(slack.with_grants(|g| g.is_live(&stored.installation.bot.token, now)));
    assert_eq!(
        two.send(&mention_in(&slack, "T0002", None, false, "C0002", 7))
            .await
            .outcome(),
        "answered"
    );
    // An install through the flow (its OAuth state spent in the database too).
    let code = slack.with_grants(|g| g.grant("T0003", "chat:write", "", true));
    assert_eq!(install(&one, code).await.status, 200);

    let database = on_database_clock(&url).await;
    let texts = every_row_text(&database).await;
    let tokens: Vec<String> = ["T0002", "T0003"]
        .iter()
        .flat_map(|team| slack.with_grants(|g| g.secrets_of(team)))
        .collect();
    assert!(tokens.len() >= 6, "{}", tokens.len());
    assert!(texts.len() >= 3, "{texts:?}");
    for token in &tokens {
        assert!(
            texts.iter().all(|text| !text.contains(token.as_str())),
            "a token in clear in the database"
        );
    }
    // The scan sees a token where none is sealed: the same store without a key.
    let (_, plain) = fresh_schema().await;
    PostgresInstallations::new(plain.clone(), CLIENT_ID)
        .save(&installation("T1", "r-plain", 1_000))
        .await
        .unwrap();
    assert!(
        every_row_text(&plain)
            .await
            .iter()
            .any(|text| text.contains("r-plain"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL"]
async fn an_oauth_state_is_spent_once_by_racing_callbacks_and_again_by_its_spender() {
    let url = fresh_schema_url().await;
    let mut racers = Vec::new();
    for n in 0..8 {
        let store = PostgresInstallations::new(on_database_clock(&url).await, CLIENT_ID);
        racers.push(tokio::spawn(async move {
            let spender = format!("callback-{n}");
            let spent = store
                .consume_state("nonce-1", &spender, slack_once::clock::now_ms() + 600_000)
                .await
                .unwrap();
            (spender, spent, store)
        }));
    }
    let mut winners = Vec::new();
    let mut stores = Vec::new();
    for racer in racers {
        let (spender, spent, store) = racer.await.unwrap();
        if spent {
            winners.push(spender.clone());
        }
        stores.push((spender, store));
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    for (spender, store) in &stores {
        let again = store
            .consume_state("nonce-1", spender, slack_once::clock::now_ms() + 600_000)
            .await
            .unwrap();
        assert_eq!(again, winners.contains(spender), "{spender}");
    }
    // Another app's state of the same nonce is its own.
    let other = PostgresInstallations::new(on_database_clock(&url).await, "9999.1111");
    assert!(
        other
            .consume_state(
                "nonce-1",
                "callback-x",
                slack_once::clock::now_ms() + 600_000
            )
            .await
            .unwrap()
    );
}

/// A TCP proxy to the local PostgreSQL that, when armed, lets the next statement reach the
/// server and run, then drops its answer (everything up to its `ReadyForQuery`: the commit
/// made) and closes the connection.
struct AnswerDropper {
    addr: std::net::SocketAddr,
    armed: Arc<AtomicBool>,
    dropped: Arc<AtomicUsize>,
}

impl AnswerDropper {
    async fn start(server_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let armed = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicUsize::new(0));
        let (armed_in, dropped_in) = (armed.clone(), dropped.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(("127.0.0.1", server_port))
                    .await
                    .unwrap();
                tokio::spawn(relay(client, server, armed_in.clone(), dropped_in.clone()));
            }
        });
        Self {
            addr,
            armed,
            dropped,
        }
    }
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    armed: Arc<AtomicBool>,
    dropped: Arc<AtomicUsize>,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
    });
    let mut buffer = vec![0u8; 64 * 1024];
    let mut dropping = false;
    loop {
        let n = match server_read.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buffer[..n];
        if !dropping && armed.swap(false, Ordering::SeqCst) {
            dropping = true;
        }
        if dropping {
            // The answer ends with ReadyForQuery ('Z', length 5, status): by then the
            // statement has committed. Drop it all and close.
            if n >= 6 && chunk[n - 6] == b'Z' {
                dropped.fetch_add(1, Ordering::SeqCst);
                break;
            }
            continue;
        }
        if client_write.write_all(chunk).await.is_err() {
            break;
        }
    }
    upstream.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL"]
async fn a_write_whose_answer_was_lost_is_sent_again_and_finds_itself() {
    let url = fresh_schema_url().await;
    let port = std::env::var("POSTGRES_LOCAL_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(5433u16);
    let proxy = AnswerDropper::start(port).await;
    let through = url.replace(&format!("127.0.0.1:{port}"), &proxy.addr.to_string());
    assert_ne!(through, url);
    let database = Database::connect(&through, 2)
        .unwrap()
        .with_clock(Clock::Given);
    database.migrate().await.unwrap();
    let store = PostgresInstallations::new(database, CLIENT_ID).with_seal(sealed_by(KEY_A));
    let key = InstallationKey::Workspace("T1".into());
    let lost = |what: &str| {
        assert_eq!(
            proxy.dropped.swap(0, Ordering::SeqCst),
            1,
            "the answer to {what} was dropped"
        );
    };

    let first = installation("T1", "r1", 1_000);
    proxy.armed.store(true, Ordering::SeqCst);
    assert!(store.save_new(&first).await.unwrap(), "a new install");
    lost("save_new");
    assert!(
        !store
            .save_new(&installation("T1", "r9", 2_000))
            .await
            .unwrap()
    );

    let r1 = first.bot.rotation();
    let hold = RefreshHold {
        owner: "a",
        now_ms: 2_000,
        until_ms: 22_000,
    };
    proxy.armed.store(true, Ordering::SeqCst);
    assert!(
        store
            .take_refresh(&key, Place::Own, &r1, hold)
            .await
            .unwrap()
    );
    lost("take_refresh");

    let second = installation("T1", "r2", 1_000);
    proxy.armed.store(true, Ordering::SeqCst);
    assert!(
        store
            .store_refreshed(&key, Place::Own, (&r1, 0), "a", &second, &ReadyKey::none())
            .await
            .unwrap()
    );
    lost("store_refreshed");
    assert_eq!(
        store.find(&key).await.unwrap().unwrap().installation,
        second
    );

    proxy.armed.store(true, Ordering::SeqCst);
    assert!(store.consume_state("s1", "n1", 10_000).await.unwrap());
    lost("consume_state");
    assert!(!store.consume_state("s1", "n2", 10_000).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL"]
async fn rows_sealed_under_an_older_key_open_after_rotation_and_are_sealed_under_the_new_one() {
    let (_, database) = fresh_schema().await;
    let under_a =
        PostgresInstallations::new(database.clone(), CLIENT_ID).with_seal(sealed_by(KEY_A));
    let rotated = PostgresInstallations::new(database.clone(), CLIENT_ID)
        .with_seal(sealed_by(&format!("{KEY_B}\n{KEY_A}")));
    let (t1, t2) = (
        installation("T1", "r1", 1_000),
        installation("T2", "r1", 1_000),
    );
    under_a.save(&t1).await.unwrap();
    under_a.save(&t2).await.unwrap();
    assert_eq!(
        sealed_key_of(&database, CLIENT_ID, "T1").await.as_deref(),
        Some("key:a")
    );

    // A refresh after the rotation, with no read first: the refreshed pair sealed under B.
    let k1 = InstallationKey::Workspace("T1".into());
    let r1 = t1.bot.rotation();
    let hold = RefreshHold {
        owner: "a",
        now_ms: 2_000,
        until_ms: 22_000,
    };
    assert!(
        rotated
            .take_refresh(&k1, Place::Own, &r1, hold)
            .await
            .unwrap()
    );
    let ready = rotated.ready_to_store(&k1, Place::Own).await.unwrap();
    let refreshed = installation("T1", "r2", 1_000);
    assert!(
        rotated
            .store_refreshed(&k1, Place::Own, (&r1, 0), "a", &refreshed, &ready)
            .await
            .unwrap()
    );
    assert_eq!(
        sealed_key_of(&database, CLIENT_ID, "T1").await.as_deref(),
        Some("key:b")
    );
    assert_eq!(
        rotated.find(&k1).await.unwrap().unwrap().installation,
        refreshed
    );

    // A row under A opens after the rotation, and its read seals it under B.
    let k2 = InstallationKey::Workspace("T2".into());
    assert_eq!(rotated.find(&k2).await.unwrap().unwrap().installation, t2);
    assert_eq!(
        sealed_key_of(&database, CLIENT_ID, "T2").await.as_deref(),
        Some("key:b")
    );

    // A process given only A, or no keys: a clear error naming the key and the variables.
    let corrupt = |found: Result<_, StoreError>| match found {
        Err(StoreError::Corrupt(said)) => said,
        other => panic!("{:?}", other.map(|_: Option<_>| ())),
    };
    let said = corrupt(under_a.find(&k1).await);
    assert!(
        said.contains("`b`") && said.contains("SLACK_TOKEN_KEYS"),
        "{said}"
    );
    assert!(!said.contains(&KEY_B[2..]), "{said}");
    let keyless = PostgresInstallations::new(database.clone(), CLIENT_ID);
    let said = corrupt(keyless.find(&k1).await);
    assert!(said.contains("SLACK_TOKEN_KEYS"), "{said}");
    // The same id with another key's bytes: does not open.
    let wrong = PostgresInstallations::new(database.clone(), CLIENT_ID)
        .with_seal(sealed_by(&KEY_A.replacen("a=", "b=", 1)));
    corrupt(wrong.find(&k1).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL"]
async fn a_sealed_row_copied_to_another_workspace_or_app_does_not_open() {
    let (_, database) = fresh_schema().await;
    let seal = sealed_by(KEY_A);
    let ours = PostgresInstallations::new(database.clone(), CLIENT_ID).with_seal(seal.clone());
    let theirs = PostgresInstallations::new(database.clone(), "9999.1111").with_seal(seal);
    ours.save(&installation("T1", "r1", 1_000)).await.unwrap();
    ours.save(&installation("T2", "r2", 1_000)).await.unwrap();
    theirs.save(&installation("T1", "r3", 1_000)).await.unwrap();
    let client = database.client().await.unwrap();
    let copy = "UPDATE slack_once_installations t SET sealed = s.sealed, \
                sealed_key = s.sealed_key FROM slack_once_installations s \
                WHERE s.client = $1 AND s.scope = 'WORKSPACE#T1' \
                AND t.client = $2 AND t.scope = $3";
    // T1's tokens copied over T2's row, and over the other app's T1.
    client
        .execute(copy, &[&CLIENT_ID, &CLIENT_ID, &"WORKSPACE#T2"])
        .await
        .unwrap();
    client
        .execute(copy, &[&CLIENT_ID, &"9999.1111", &"WORKSPACE#T1"])
        .await
        .unwrap();
    for (store, team) in [(&ours, "T2"), (&theirs, "T1")] {
        match store.find(&InstallationKey::Workspace(team.into())).await {
            Err(StoreError::Corrupt(said)) => assert!(said.contains("do not open"), "{said}"),
            other => panic!("{team}: {:?}", other.map(|_| ())),
        }
    }
    // The row itself still opens where it is.
    assert!(
        ours.find(&InstallationKey::Workspace("T1".into()))
            .await
            .unwrap()
            .is_some()
    );
}

/// The seal is the store's, not the table's: the operator's keys seal on DynamoDB too, and
/// `seal-installations`' sweep seals again, under the current key, what an older key sealed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn the_operators_keys_seal_on_dynamodb_too_and_sealing_all_moves_rows_to_the_current_key() {
    use slack_once::workspaces::DynamoInstallations;
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let client = dynamodb_client(&endpoint);
    let store = |keys: &str| {
        DynamoInstallations::new(client.clone(), table.clone(), CLIENT_ID)
            .with_seal(sealed_by(keys))
    };
    let t1 = installation("T1", "r-dynamo", 1_000);
    store(KEY_A).save(&t1).await.unwrap();
    let pk = format!("install#{CLIENT_ID}#WORKSPACE#T1");
    let item = || async {
        client
            .get_item()
            .table_name(&table)
            .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(pk.clone()))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
            .unwrap()
    };
    let sealed_key =
        |item: &std::collections::HashMap<_, aws_sdk_dynamodb::types::AttributeValue>| {
            String::from_utf8(item["sealed_key"].as_b().unwrap().as_ref().to_vec()).unwrap()
        };
    let kept = item().await;
    assert_eq!(sealed_key(&kept), "key:a");
    let text = format!("{kept:?}");
    for token in ["xoxe.xoxb-r-dynamo", "r-dynamo\"", "xoxp-1"] {
        assert!(!text.contains(token), "{token} in the table");
    }
    let key = InstallationKey::Workspace("T1".into());
    let rotated = store(&format!("{KEY_B},{KEY_A}"));
    assert_eq!(rotated.find(&key).await.unwrap().unwrap().installation, t1);
    let done = rotated.seal_all(None, false).await.unwrap();
    assert_eq!(done.sealed, vec![pk.clone()]);
    assert_eq!(sealed_key(&item().await), "key:b");
    assert_eq!(rotated.find(&key).await.unwrap().unwrap().installation, t1);
    let again = rotated.seal_all(None, false).await.unwrap();
    assert_eq!((again.sealed.len(), again.sealed_already), (0, 1));
    match store(KEY_A).find(&key).await {
        Err(StoreError::Corrupt(said)) => assert!(said.contains("`b`"), "{said}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
}

/// `slack-once new-token-key` prints a new entry for SLACK_TOKEN_KEYS, read back as the server
/// reads it; an id the keys would refuse is refused.
#[test]
fn new_token_key_prints_an_entry_the_keys_accept_and_refuses_a_bad_id() {
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"))
            .env_clear()
            .arg("new-token-key")
            .args(args)
            .output()
            .unwrap()
    };
    let made = run(&["--id", "k2"]);
    assert!(made.status.success());
    let entry = String::from_utf8(made.stdout).unwrap();
    let keys = TokenKeys::parse(entry.trim()).unwrap();
    assert_eq!(keys.ids(), ["k2"]);
    let other = String::from_utf8(run(&["--id", "k2"]).stdout).unwrap();
    assert_ne!(entry, other, "each key is new");
    let dated = String::from_utf8(run(&[]).stdout).unwrap();
    assert!(dated.starts_with("key-20"), "{dated}");
    let refused = run(&["--id", "a b"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(refused.stdout.is_empty());
    let said = String::from_utf8(refused.stderr).unwrap();
    assert!(said.contains("--id"), "{said}");
}

/// Expired OAuth states and pacing rows count as absent and are deleted: the app's own, in
/// batches, by `sweep_expired`; a spend sweeps the app's expired states on its way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL"]
async fn expired_states_and_pacing_rows_are_swept_and_only_the_apps_own() {
    let (_, database) = fresh_schema().await;
    let ours = PostgresInstallations::new(database.clone(), CLIENT_ID);
    let theirs = PostgresInstallations::new(database.clone(), "9999.1111");
    let count = |table: &'static str, client_id: &'static str| {
        let database = database.clone();
        async move {
            let client = database.client().await.unwrap();
            let row = client
                .query_one(
                    &format!("SELECT count(*) FROM {table} WHERE client = $1"),
                    &[&client_id],
                )
                .await
                .unwrap();
            row.get::<_, i64>(0)
        }
    };
    // Long expired (epoch 10 s), and one still live.
    for n in 0..3 {
        assert!(
            ours.consume_state(&format!("old-{n}"), "x", 10_000)
                .await
                .unwrap()
        );
    }
    assert!(theirs.consume_state("old-t", "x", 10_000).await.unwrap());
    let live = slack_once::clock::now_ms() + 600_000;
    let workspace = InstallationKey::Workspace("T1".into());
    assert_eq!(
        ours.take_read(&workspace, "conversations.history", 1_000, 1)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        theirs
            .take_read(&workspace, "conversations.history", 1_000, 1)
            .await
            .unwrap(),
        None
    );
    // A spend sweeps the app's expired states on its way (the other app's stay).
    assert!(ours.consume_state("new", "y", live).await.unwrap());
    assert_eq!(count("slack_once_oauth_states", CLIENT_ID).await, 1);
    assert_eq!(count("slack_once_oauth_states", "9999.1111").await, 1);
    // The pacing row, expired an hour after its read, swept with a batch; the other app's stays.
    let now = slack_once::clock::now_ms();
    assert_eq!(ours.sweep_expired(now, 100).await.unwrap(), 1);
    assert_eq!(count("slack_once_read_pace", CLIENT_ID).await, 0);
    assert_eq!(count("slack_once_read_pace", "9999.1111").await, 1);
    assert_eq!(count("slack_once_oauth_states", CLIENT_ID).await, 1);
    assert_eq!(theirs.sweep_expired(now, 1).await.unwrap(), 2);
    assert_eq!(theirs.sweep_expired(now, 1).await.unwrap(), 0);
}

/// The built binary with its keys in a file (as a mounted Kubernetes Secret gives them), on
/// DynamoDB: an install through the flow leaves no token in the table; a process given the
/// rotated keys (`b`, then `a`) answers with the row sealed under `a`; one given only `b` refuses
/// and says which key it lacks; one given a KMS key too does not start, naming both variables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn the_binary_seals_with_the_keys_of_its_file_and_opens_an_older_keys_rows_after_rotation() {
    use crate::tenants::{A, Tenant};
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let file = |keys: &str| {
        let path = std::env::temp_dir().join(format!("token-keys-{}", uuid::Uuid::new_v4()));
        std::fs::write(&path, format!("# slack-once token keys\n{keys}\n")).unwrap();
        path.to_str().unwrap().to_string()
    };
    let (only_a, rotated) = (file(KEY_A), file(&format!("{KEY_B}\n{KEY_A}")));
    let a = Tenant::start(
        A,
        &endpoint,
        &table,
        &[("SLACK_TOKEN_KEYS_FILE", only_a.clone())],
    )
    .await;
    let team = "T0000KEYS";
    let code = a
        .slack
        .with_grants(|g| g.grant(team, "app_mentions:read,chat:write", "search:read", true));
    let page = a.install_code(&a.bot, &code).await;
    assert_eq!(page.status, 200, "{}", page.body);

    let client = dynamodb_client(&endpoint);
    let items = client.scan().table_name(&table).send().await.unwrap();
    let mut text = String::new();
    for item in items.items() {
        for (name, value) in item {
            text.push_str(&format!("{name}={value:?}\n"));
            if let Ok(bytes) = value.as_b() {
                text.push_str(&String::from_utf8_lossy(bytes.as_ref()));
                text.push('\n');
            }
        }
    }
    let tokens = a.slack.with_grants(|g| g.secrets_of(team));
    assert!(
        tokens.len() >= 3,
        "bot, refresh and user tokens: {tokens:?}"
    );
    for token in &tokens {
        assert!(
            !text.contains(token.as_str()),
            "a token in the table:\n{text}"
        );
    }
    assert!(text.contains("key:a"), "{text}");

    let program = std::path::PathBuf::from(env!("CARGO_BIN_EXE_slack-once"));
    let how = Spawn {
        signing_secret_env: false,
        ..Spawn::default()
    };
    let with = |extra: &[(&'static str, String)]| {
        let mut vars: Vec<(&str, String)> = a
            .vars
            .iter()
            .filter(|(k, _)| *k != "SLACK_TOKEN_KEYS_FILE")
            .cloned()
            .collect();
        vars.extend_from_slice(extra);
        vars
    };
    let b = BotProcess::spawn_program_with(
        &program,
        &[],
        &with(&[("SLACK_TOKEN_KEYS_FILE", rotated.clone())]),
        &how,
    );
    let answer = a.send_to(&b, &a.mention(team, 1)).await;
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);

    let c = BotProcess::spawn_program_with(
        &program,
        &[],
        &with(&[("SLACK_TOKEN_KEYS", KEY_B.to_string())]),
        &how,
    );
    let answer = a.send_to(&c, &a.mention(team, 2)).await;
    assert_ne!(answer.outcome(), "answered", "{}", answer.body);
    let said = c
        .log_when(Duration::from_secs(10), |log| log.contains("token key `a`"))
        .await;
    assert!(
        said.contains("token key `a`") && said.contains("SLACK_TOKEN_KEYS"),
        "{said}"
    );
    assert!(!said.contains(&KEY_B[2..]), "a key in the log");

    let refused = BotProcess::try_spawn_program_with(
        &program,
        &[],
        &with(&[
            ("SLACK_TOKEN_KEYS_FILE", rotated.clone()),
            ("SLACK_TOKEN_KEY_ID", "alias/slack-once".to_string()),
        ]),
        &how,
    )
    .err()
    .expect("a KMS key and keys of one's own: no start");
    assert!(
        refused.contains("SLACK_TOKEN_KEY_ID, SLACK_TOKEN_KEYS_FILE"),
        "{refused}"
    );
    assert!(!refused.contains(&KEY_A[2..]), "a key in the log");
    for path in [only_a, rotated] {
        std::fs::remove_file(path).unwrap();
    }
}
