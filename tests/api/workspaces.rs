//! Many workspaces (multi-workspace mode): the OAuth install flow over HTTP, the installation
//! store on DynamoDB Local (and in memory: one contract for both), each request answered with
//! its workspace's token, one token refresh across two instances, uninstalls in either order.
//! Slack is `slack_once::testing::FakeSlack` on 127.0.0.1 with OAuth on: it issues codes and
//! tokens as Slack does, refuses a token Slack would refuse, and serves each workspace's
//! conversations to that workspace's token only.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use slack_once::Application;
use slack_once::config::Config;
use slack_once::ledger::{DynamoLedger, Ledger};
use slack_once::testing::FakeSlack;
use slack_once::workspaces::seal::ReadyKey;
use slack_once::workspaces::{
    DynamoInstallations, Installation, InstallationKey, InstallationStore, MemoryInstallations,
    Place, RefreshHold, Revoked, Stored, Token,
};
use tokio::sync::oneshot;

use crate::helpers::*;

pub(crate) const CLIENT_ID: &str = "1234.5678";
const CLIENT_SECRET: &str = "test-client-secret";

pub(crate) struct Distributed {
    addr: std::net::SocketAddr,
    http: HttpClient,
    _shutdown: oneshot::Sender<()>,
}

impl Distributed {
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub(crate) async fn send(&self, body: &str) -> Answer {
        let headers = signed_headers(SECRET, now_unix(), body.as_bytes());
        self.http
            .request(
                "POST",
                &self.url("/slack/events"),
                &headers,
                body.as_bytes().to_vec(),
            )
            .await
    }

    async fn get(&self, path: &str, cookie: Option<&str>) -> Answer {
        let headers: Vec<(String, String)> = cookie
            .map(|c| vec![("cookie".to_string(), c.to_string())])
            .unwrap_or_default();
        self.http
            .request("GET", &self.url(path), &headers, Vec::new())
            .await
    }
}

fn config(slack: &FakeSlack, extra: &[(&str, &str)]) -> Config {
    let mut vars: HashMap<String, String> = [
        ("SLACK_SIGNING_SECRET", SECRET),
        ("SLACK_CLIENT_ID", CLIENT_ID),
        ("SLACK_CLIENT_SECRET", CLIENT_SECRET),
        ("SLACK_SCOPES", "app_mentions:read,chat:write,commands"),
        ("SLACK_API_URL", slack.base_url()),
        ("LISTEN_ADDR", "127.0.0.1:0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in extra {
        vars.insert(k.to_string(), v.to_string());
    }
    Config::from_lookup(|k| vars.get(k).cloned()).expect("a multi-workspace configuration")
}

/// The reference bot in multi-workspace mode on `ledger` and `store`.
pub(crate) async fn spawn(
    slack: &FakeSlack,
    ledger: Arc<dyn Ledger>,
    store: Arc<dyn InstallationStore>,
) -> Distributed {
    spawn_bot(slack, ledger, store, slack_once::reference_app()).await
}

/// The bot `bot` in multi-workspace mode on `ledger` and `store`.
async fn spawn_bot(
    slack: &FakeSlack,
    ledger: Arc<dyn Ledger>,
    store: Arc<dyn InstallationStore>,
    bot: slack_once::app::App,
) -> Distributed {
    spawn_configured(config(slack, &[]), ledger, store, bot).await
}

/// The bot `bot` as `config` says, on `ledger` and `store`.
async fn spawn_configured(
    config: Config,
    ledger: Arc<dyn Ledger>,
    store: Arc<dyn InstallationStore>,
    bot: slack_once::app::App,
) -> Distributed {
    let app = Application::with_parts(config, ledger, bot).with_store(store);
    let server = app.bind().await.unwrap();
    let addr = server.local_addr();
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(server.run_until(async {
        let _ = rx.await;
    }));
    Distributed {
        addr,
        http: HttpClient::default(),
        _shutdown: tx,
    }
}

async fn on_dynamo() -> (Arc<DynamoLedger>, Arc<DynamoInstallations>) {
    let endpoint = dynamodb_endpoint();
    let (table, ledger) = fresh_table(&endpoint).await;
    let store = DynamoInstallations::new(dynamodb_client(&endpoint), table, CLIENT_ID);
    (ledger, Arc::new(store))
}

/// A mention of the bot in `team`'s channel `channel`, its message in that workspace.
pub(crate) fn mention_in(
    slack: &FakeSlack,
    team: &str,
    enterprise: Option<&str>,
    org_wide: bool,
    channel: &str,
    n: u32,
) -> String {
    let event_id = format!("Ev{team}{n:04}");
    let ts = format!("1700000{n:03}.000100");
    let body = json!({
        "token": "unused", "team_id": team, "enterprise_id": enterprise, "api_app_id": slack_once::testing::APP_ID,
        "type": "event_callback", "event_id": event_id, "event_time": 1_700_000_000,
        "event": {
            "type": "app_mention", "user": "U0PERSON", "text": format!("<@{}> hello", slack_once::testing::bot_user_of(team)),
            "ts": ts, "channel": channel, "event_ts": ts
        },
        "authorizations": [{"enterprise_id": enterprise, "team_id": team, "user_id": slack_once::testing::bot_user_of(team), "is_bot": true, "is_enterprise_install": org_wide}]
    })
    .to_string();
    let owner = if org_wide { enterprise.unwrap() } else { team };
    slack.with_workspace_of(owner, |w| w.add_event_message(body.as_bytes()));
    body
}

/// Installs the app in `team` through the flow, as a browser would: the install page, Slack's
/// approval (a code), the redirect with the state's cookie.
pub(crate) async fn install(app: &Distributed, code: String) -> Answer {
    let page = app.get("/slack/install", None).await;
    assert_eq!(page.status, 302, "{}", page.body);
    let location = page.headers["location"].to_str().unwrap().to_string();
    let cookie = page.headers["set-cookie"].to_str().unwrap().to_string();
    let state = query_of(&location)["state"].clone();
    let pair = cookie.split(';').next().unwrap().to_string();
    app.get(
        &format!("/slack/oauth_redirect?code={code}&state={state}"),
        Some(&pair),
    )
    .await
}

fn query_of(url: &str) -> HashMap<String, String> {
    let query = url.split_once('?').map(|(_, q)| q).unwrap_or("");
    form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

pub(crate) async fn fake_slack_oauth() -> FakeSlack {
    FakeSlack::start()
        .await
        .with_oauth(CLIENT_ID, CLIENT_SECRET)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn an_install_through_the_flow_is_stored_and_each_workspace_is_answered_with_its_own_token() {
    let slack = fake_slack_oauth().await;
    let (ledger, store) = on_dynamo().await;
    let app = spawn(&slack, ledger, store.clone()).await;

    // The install page: a 302 to Slack's authorize page, with the state in a cookie.
    let page = app.get("/slack/install", None).await;
    assert_eq!(page.status, 302);
    let location = page.headers["location"].to_str().unwrap();
    assert!(
        location.starts_with("https://slack.com/oauth/v2/authorize?"),
        "{location}"
    );
    let query = query_of(location);
    assert_eq!(query["client_id"], CLIENT_ID);
    assert_eq!(query["scope"], "app_mentions:read,chat:write,commands");
    assert!(
        query["state"].len() > 64,
        "a nonce, its expiry, their signature"
    );
    let cookie = page.headers["set-cookie"].to_str().unwrap();
    for part in [
        "slack-app-oauth-state=",
        "HttpOnly",
        "Secure",
        "SameSite=Lax",
        "Path=/",
        "Max-Age=600",
    ] {
        assert!(cookie.contains(part), "{cookie}");
    }

    for team in ["T0002", "T0003"] {
        let code = slack.with_grants(|g| g.grant(team, "app_mentions:read,chat:write", "", false));
        let done = install(&app, code).await;
        assert_eq!(done.status, 200, "{}", done.body);
        assert!(done.body.contains("installed in Team"), "{}", done.body);
        let stored = store
            .find(&InstallationKey::Workspace(team.into()))
            .await
            .unwrap()
            .expect("stored");
        assert_eq!(
            stored.installation.bot_id.as_deref(),
            Some(slack_once::testing::bot_id_of(team).as_str())
        );
        assert_eq!(
            stored.installation.bot_scopes,
            ["app_mentions:read", "chat:write"]
        );
        assert!(
            !done.body.contains(&stored.installation.bot.token),
            "no token on the page"
        );
    }

    // Each workspace's mention is answered there, with its own token.
    let (a, b) = (
        mention_in(&slack, "T0002", None, false, "C0002", 1),
        mention_in(&slack, "T0003", None, false, "C0003", 2),
    );
    let (ra, rb) = tokio::join!(app.send(&a), app.send(&b));
    assert_eq!(
        (ra.outcome(), rb.outcome()),
        ("answered".into(), "answered".into()),
        "{} {}",
        ra.body,
        rb.body
    );
    assert_eq!(slack.messages_of("T0002").len(), 1);
    assert_eq!(slack.messages_of("T0003").len(), 1);
    assert!(
        slack.messages().is_empty(),
        "nothing in the first workspace"
    );
    let posts: Vec<String> = slack
        .callers()
        .into_iter()
        .filter(|(m, _)| m == "chat.postMessage")
        .map(|(_, team)| team)
        .collect();
    assert_eq!(posts.len(), 2);
    for m in slack.messages_of("T0002") {
        assert_eq!(m["bot_id"], slack_once::testing::bot_id_of("T0002"));
        assert_eq!(m["channel"], "C0002");
    }
    // A copy is a duplicate.
    assert_eq!(app.send(&a).await.outcome(), "duplicate");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_without_its_cookie_with_a_spent_or_unknown_state_or_an_error_stores_nothing() {
    let slack = fake_slack_oauth().await;
    let store = Arc::new(MemoryInstallations::of_app(CLIENT_ID));
    let app = spawn(
        &slack,
        Arc::new(slack_once::ledger::MemoryLedger::new()),
        store.clone(),
    )
    .await;
    let page = app.get("/slack/install", None).await;
    let state = query_of(page.headers["location"].to_str().unwrap())["state"].clone();
    let cookie = format!("slack-app-oauth-state={state}");
    let code = slack.with_grants(|g| g.grant("T0002", "chat:write", "", false));

    let cases = [
        (
            format!("/slack/oauth_redirect?code={code}&state={state}"),
            None,
            "cookie is missing",
        ),
        (
            format!("/slack/oauth_redirect?code={code}&state={state}"),
            Some("slack-app-oauth-state=other".to_string()),
            "does not match",
        ),
        (
            format!("/slack/oauth_redirect?code={code}&state=unknown"),
            Some("slack-app-oauth-state=unknown".to_string()),
            "expired or was used",
        ),
        (
            format!("/slack/oauth_redirect?error=access_denied&state={state}"),
            Some(cookie.clone()),
            "access_denied",
        ),
        (
            "/slack/oauth_redirect".to_string(),
            Some(cookie.clone()),
            "no code",
        ),
    ];
    for (path, cookie, says) in cases {
        let answer = app.get(&path, cookie.as_deref()).await;
        assert_eq!(answer.status, 400, "{path}: {}", answer.body);
        assert!(answer.body.contains(says), "{path}: {}", answer.body);
        assert!(!answer.body.contains(CLIENT_SECRET));
    }
    assert!(store.all().is_empty());
    assert!(
        slack.with_grants(|g| g.exchanges().is_empty()),
        "no code was exchanged"
    );

    // The state still works once, then never again.
    let path = format!("/slack/oauth_redirect?code={code}&state={state}");
    assert_eq!(app.get(&path, Some(&cookie)).await.status, 200);
    let again = app.get(&path, Some(&cookie)).await;
    assert_eq!(again.status, 400);
    assert_eq!(slack.with_grants(|g| g.exchanges().len()), 1);

    // Without OAuth configured, the routes say so.
    let single = spawn_app().await;
    let answer = single
        .http
        .request("GET", &single.url("/slack/install"), &[], Vec::new())
        .await;
    assert_eq!(answer.status, 404);
    assert_eq!(answer.json()["error"], "not_distributed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn two_callbacks_with_one_state_at_once_install_once() {
    let slack = fake_slack_oauth().await;
    let (ledger, store) = on_dynamo().await;
    let app = spawn(&slack, ledger, store.clone()).await;
    let page = app.get("/slack/install", None).await;
    let state = query_of(page.headers["location"].to_str().unwrap())["state"].clone();
    let cookie = format!("slack-app-oauth-state={state}");
    let code = slack.with_grants(|g| g.grant("T0002", "chat:write", "", false));
    let path = format!("/slack/oauth_redirect?code={code}&state={state}");
    let (a, b) = tokio::join!(app.get(&path, Some(&cookie)), app.get(&path, Some(&cookie)));
    let mut statuses = [a.status.as_u16(), b.status.as_u16()];
    statuses.sort();
    assert_eq!(statuses, [200, 400]);
    assert_eq!(slack.with_grants(|g| g.exchanges().len()), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn an_event_of_a_workspace_without_an_installation_is_acknowledged_and_never_claimed() {
    let slack = fake_slack_oauth().await;
    let (ledger, store) = on_dynamo().await;
    let app = spawn(&slack, ledger.clone(), store).await;
    let body = mention_in(&slack, "T0404", None, false, "C0404", 1);
    let answer = app.send(&body).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.outcome(), "skipped");
    let key = message_key("T0404", "C0404", "1700000001.000100");
    let item = dynamodb_client(&dynamodb_endpoint())
        .get_item()
        .table_name(ledger.table())
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(key))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    assert!(item.item().is_none(), "never claimed");
    assert!(slack.calls().is_empty(), "nothing written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn an_org_wide_install_serves_every_workspace_of_its_enterprise() {
    let slack = fake_slack_oauth().await;
    let (ledger, store) = on_dynamo().await;
    let app = spawn(&slack, ledger, store.clone()).await;
    let code = slack.with_grants(|g| g.grant_org("E0001", "chat:write", false));
    assert_eq!(install(&app, code).await.status, 200);
    assert!(
        store
            .find(&InstallationKey::Enterprise("E0001".into()))
            .await
            .unwrap()
            .is_some()
    );
    for (n, team) in ["T0005", "T0006"].into_iter().enumerate() {
        let body = mention_in(
            &slack,
            team,
            Some("E0001"),
            true,
            &format!("C{team}"),
            n as u32 + 1,
        );
        assert_eq!(app.send(&body).await.outcome(), "answered");
    }
    assert_eq!(slack.messages_of("E0001").len(), 2);
}

fn uninstall_event(kind: &str, team: &str, at: i64, tokens: serde_json::Value) -> String {
    let mut event = json!({"type": kind, "event_ts": format!("{at}.000100")});
    if kind == "tokens_revoked" {
        event["tokens"] = tokens;
    }
    json!({
        "token": "unused", "team_id": team, "api_app_id": slack_once::testing::APP_ID, "type": "event_callback",
        "event_id": format!("Ev{kind}{team}{at}"), "event_time": at, "event": event,
        "authorizations": [{"team_id": team, "user_id": slack_once::testing::bot_user_of(team), "is_bot": true}]
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn uninstalls_and_revocations_remove_once_in_either_order_and_never_a_later_reinstall() {
    let slack = fake_slack_oauth().await;
    let (ledger, store) = on_dynamo().await;
    let app = spawn(&slack, ledger, store.clone()).await;
    let key = |t: &str| InstallationKey::Workspace(t.to_string());
    let now = (now_unix() + 5) as i64;
    for team in ["T0002", "T0003"] {
        let code = slack.with_grants(|g| g.grant(team, "chat:write", "chat:write", false));
        assert_eq!(install(&app, code).await.status, 200);
    }
    // T0002: the installer's token revoked first (the installation stays, without it), then
    // the bot's, then the uninstall: gone, and each event again changes nothing.
    let user = uninstall_event(
        "tokens_revoked",
        "T0002",
        now,
        json!({"oauth": ["U0INSTALLER"], "bot": []}),
    );
    assert_eq!(app.send(&user).await.status, 200);
    let kept = store.find(&key("T0002")).await.unwrap().expect("kept");
    assert!(kept.installation.user.is_none(), "the user token is gone");
    let bot = uninstall_event(
        "tokens_revoked",
        "T0002",
        now,
        json!({"oauth": [], "bot": [slack_once::testing::bot_user_of("T0002")]}),
    );
    let gone = uninstall_event("app_uninstalled", "T0002", now, json!(null));
    for body in [&bot, &gone, &bot, &gone] {
        assert_eq!(app.send(body).await.status, 200);
    }
    assert!(store.find(&key("T0002")).await.unwrap().is_none());
    // T0003: the uninstall first, then the revocation.
    for body in [
        uninstall_event("app_uninstalled", "T0003", now, json!(null)),
        uninstall_event(
            "tokens_revoked",
            "T0003",
            now,
            json!({"oauth": ["U0INSTALLER"], "bot": [slack_once::testing::bot_user_of("T0003")]}),
        ),
    ] {
        assert_eq!(app.send(&body).await.status, 200);
    }
    assert!(store.find(&key("T0003")).await.unwrap().is_none());
    // Its events are now acknowledged, not answered.
    let body = mention_in(&slack, "T0003", None, false, "C0003", 9);
    assert_eq!(app.send(&body).await.outcome(), "skipped");

    // Installed again: an uninstall that happened before it (a late retry) removes nothing.
    let code = slack.with_grants(|g| g.grant("T0003", "chat:write", "", false));
    assert_eq!(install(&app, code).await.status, 200);
    let late = uninstall_event("app_uninstalled", "T0003", now - 3600, json!(null));
    assert_eq!(app.send(&late).await.status, 200);
    assert!(store.find(&key("T0003")).await.unwrap().is_some());
}

/// An installation with a rotating token that `left_s` seconds remain of, issued by `slack`.
pub(crate) async fn rotating_install(
    slack: &FakeSlack,
    store: &dyn InstallationStore,
    team: &str,
    left_s: u64,
) {
    let now = slack_once::clock::now_ms();
    let answer = slack.with_grants(|g| {
        g.set_lifetime(left_s);
        let code = g.grant(team, "chat:write", "", true);
        let a = g.exchange(
            &json!({"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "code": code}),
            now,
        );
        g.set_lifetime(slack_once::testing::TOKEN_LIFETIME_S);
        a
    });
    let mut installation = slack_once::workspaces::oauth::installation_of(&answer, now).unwrap();
    installation.bot_id = Some(slack_once::testing::bot_id_of(team));
    store.save(&installation).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn two_instances_due_to_refresh_one_token_refresh_it_once_and_keep_answering() {
    let slack = fake_slack_oauth().await;
    let (ledger, store) = on_dynamo().await;
    // 30 minutes left: within the 120-minute window, refreshed beside the requests.
    rotating_install(&slack, &*store, "T0002", 1800).await;
    let one = spawn(&slack, ledger.clone(), store.clone()).await;
    let two = spawn(&slack, ledger.clone(), store.clone()).await;
    let bodies: Vec<String> = (1..=6)
        .map(|n| mention_in(&slack, "T0002", None, false, "C0002", n))
        .collect();
    let sends = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let app = if i % 2 == 0 { &one } else { &two };
            (app.url("/slack/events"), b.clone())
        })
        .collect();
    let answers = send_all(sends).await;
    for a in &answers {
        assert_eq!(a.outcome(), "answered", "{}", a.body);
    }
    // The refreshes run beside the requests: wait for them to end.
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
    let stored = store
        .find(&InstallationKey::Workspace("T0002".into()))
        .await
        .unwrap()
        .unwrap();
    assert!(stored.broken.is_none());
    let now = slack_once::clock::now_ms();
    assert!(slack.with_grants(|g| g.is_live(&stored.installation.bot.token, now)));
    assert!(stored.installation.bot.expires_at_ms.unwrap() > now + 11 * 3600 * 1000);
    // Both instances answer with the new token (a refused old one reads the table again).
    let body = mention_in(&slack, "T0002", None, false, "C0002", 7);
    assert_eq!(two.send(&body).await.outcome(), "answered");
    assert_eq!(slack.messages_of("T0002").len(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn a_refused_refresh_token_marks_the_installation_broken_and_its_events_are_not_claimed() {
    let slack = fake_slack_oauth().await;
    let (ledger, store) = on_dynamo().await;
    // 30 seconds left: the first call refreshes first.
    rotating_install(&slack, &*store, "T0002", 30).await;
    slack.with_grants(|g| g.revoke_all("T0002"));
    let app = spawn(&slack, ledger, store.clone()).await;
    let body = mention_in(&slack, "T0002", None, false, "C0002", 1);
    let first = app.send(&body).await;
    assert_ne!(first.outcome(), "answered", "{}", first.body);
    let stored = store
        .find(&InstallationKey::Workspace("T0002".into()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.broken.as_deref(), Some("invalid_refresh_token"));
    let later = mention_in(&slack, "T0002", None, false, "C0002", 2);
    let answer = app.send(&later).await;
    assert_eq!(
        (answer.status.as_u16(), answer.outcome()),
        (200, "skipped".to_string())
    );
    // Installed again, it works again.
    let code = slack.with_grants(|g| g.grant("T0002", "chat:write", "", false));
    assert_eq!(install(&app, code).await.status, 200);
    let again = mention_in(&slack, "T0002", None, false, "C0002", 3);
    assert_eq!(app.send(&again).await.outcome(), "answered");
}

/// Sends each body to its URL, signed, all at once.
pub(crate) async fn send_all(sends: Vec<(String, String)>) -> Vec<Answer> {
    let http = HttpClient::default();
    let tasks: Vec<_> = sends
        .into_iter()
        .map(|(url, body)| {
            let http = http.clone();
            tokio::spawn(async move {
                let headers = signed_headers(SECRET, now_unix(), body.as_bytes());
                http.request("POST", &url, &headers, body.into_bytes())
                    .await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    answers
}

/// The store's contract, on DynamoDB Local and in memory alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn the_installation_stores_keep_one_contract() {
    let (_, dynamo) = on_dynamo().await;
    let memory = Arc::new(MemoryInstallations::of_app(CLIENT_ID));
    for store in [
        dynamo as Arc<dyn InstallationStore>,
        memory as Arc<dyn InstallationStore>,
    ] {
        contract(&*store).await;
    }
}

pub(crate) fn installation(team: &str, refresh: &str, at: u64) -> Installation {
    Installation {
        team_id: Some(team.into()),
        team_name: None,
        enterprise_id: None,
        enterprise_name: None,
        enterprise_url: None,
        is_enterprise_install: false,
        app_id: Some("A1".into()),
        bot_id: Some("B1".into()),
        bot_user_id: Some("UBOT1".into()),
        bot_scopes: vec!["chat:write".into()],
        bot: Token {
            token: format!("xoxe.xoxb-{refresh}"),
            refresh_token: Some(refresh.into()),
            expires_at_ms: Some(at + 3_600_000),
        },
        user_id: Some("U1".into()),
        user_scopes: vec!["search:read".into()],
        user: Some(Token {
            token: "xoxp-1".into(),
            refresh_token: None,
            expires_at_ms: None,
        }),
        installed_at_ms: at,
    }
}

pub(crate) async fn contract(store: &dyn InstallationStore) {
    let key = InstallationKey::Workspace("T1".into());
    let first = installation("T1", "r1", 1_000);
    store.save(&first).await.unwrap();
    assert_eq!(store.find(&key).await.unwrap().unwrap().installation, first);
    let r1 = first.bot.rotation();

    // One refresh holder at a time; the lease taken again by its holder (a write sent again).
    assert!(
        store
            .take_refresh(
                &key,
                Place::Own,
                &r1,
                RefreshHold {
                    owner: "a",
                    now_ms: 2_000,
                    until_ms: 22_000
                }
            )
            .await
            .unwrap()
    );
    assert!(
        store
            .take_refresh(
                &key,
                Place::Own,
                &r1,
                RefreshHold {
                    owner: "a",
                    now_ms: 2_000,
                    until_ms: 22_000
                }
            )
            .await
            .unwrap()
    );
    assert!(
        !store
            .take_refresh(
                &key,
                Place::Own,
                &r1,
                RefreshHold {
                    owner: "b",
                    now_ms: 3_000,
                    until_ms: 23_000
                }
            )
            .await
            .unwrap()
    );
    // The refreshed pair: only its holder stores it, over the token it replaces; sent again,
    // it is stored still.
    let second = installation("T1", "r2", 1_000);
    assert!(
        !store
            .store_refreshed(&key, Place::Own, (&r1, 0), "b", &second, &ReadyKey::none())
            .await
            .unwrap()
    );
    assert!(
        store
            .store_refreshed(&key, Place::Own, (&r1, 0), "a", &second, &ReadyKey::none())
            .await
            .unwrap()
    );
    assert!(
        store
            .store_refreshed(&key, Place::Own, (&r1, 0), "a", &second, &ReadyKey::none())
            .await
            .unwrap()
    );
    assert_eq!(
        store.find(&key).await.unwrap().unwrap().installation,
        second
    );
    // A refresh of the replaced token can no longer be taken; an expired lease can.
    assert!(
        !store
            .take_refresh(
                &key,
                Place::Own,
                &r1,
                RefreshHold {
                    owner: "c",
                    now_ms: 30_000,
                    until_ms: 50_000
                }
            )
            .await
            .unwrap()
    );
    let r2 = second.bot.rotation();
    assert!(
        store
            .take_refresh(
                &key,
                Place::Own,
                &r2,
                RefreshHold {
                    owner: "c",
                    now_ms: 30_000,
                    until_ms: 50_000
                }
            )
            .await
            .unwrap()
    );
    assert!(
        store
            .take_refresh(
                &key,
                Place::Own,
                &r2,
                RefreshHold {
                    owner: "d",
                    now_ms: 50_001,
                    until_ms: 70_000
                }
            )
            .await
            .unwrap()
    );
    store.release_refresh(&key, Place::Own, "d").await.unwrap();
    assert!(
        store
            .take_refresh(
                &key,
                Place::Own,
                &r2,
                RefreshHold {
                    owner: "e",
                    now_ms: 50_002,
                    until_ms: 70_000
                }
            )
            .await
            .unwrap()
    );

    // Broken only over the token it was for.
    assert!(
        !store
            .mark_broken(&key, Place::Own, &r1, "invalid_refresh_token")
            .await
            .unwrap()
    );
    assert!(
        store
            .mark_broken(&key, Place::Own, &r2, "invalid_refresh_token")
            .await
            .unwrap()
    );
    assert!(
        !store
            .mark_broken(&key, Place::Own, &r2, "invalid_refresh_token")
            .await
            .unwrap()
    );
    assert!(
        !store
            .take_refresh(
                &key,
                Place::Own,
                &r2,
                RefreshHold {
                    owner: "f",
                    now_ms: 90_000,
                    until_ms: 99_000
                }
            )
            .await
            .unwrap()
    );
    assert_eq!(
        store.find(&key).await.unwrap().unwrap().broken.as_deref(),
        Some("invalid_refresh_token")
    );
    // A reinstall clears it.
    let third = installation("T1", "r3", 5_000);
    store.save(&third).await.unwrap();
    assert!(store.find(&key).await.unwrap().unwrap().broken.is_none());

    // Revocations: the installer's token, then the bot's (the whole installation); none for
    // an installation made after the event.
    assert!(
        !store
            .revoke(
                &key,
                Place::Own,
                Revoked {
                    users: &["U1".into()],
                    bots: &[],
                    before_ms: 4_000
                },
                &|_| true
            )
            .await
            .unwrap()
    );
    assert!(
        store
            .revoke(
                &key,
                Place::Own,
                Revoked {
                    users: &["U1".into()],
                    bots: &[],
                    before_ms: 6_000
                },
                &|_| true
            )
            .await
            .unwrap()
    );
    assert!(
        store
            .find(&key)
            .await
            .unwrap()
            .unwrap()
            .installation
            .user
            .is_none()
    );
    assert!(
        !store
            .revoke(
                &key,
                Place::Own,
                Revoked {
                    users: &["U1".into()],
                    bots: &[],
                    before_ms: 6_000
                },
                &|_| true
            )
            .await
            .unwrap()
    );
    assert!(
        store
            .revoke(
                &key,
                Place::Own,
                Revoked {
                    users: &[],
                    bots: &["UBOT1".into()],
                    before_ms: 6_000
                },
                &|_| true
            )
            .await
            .unwrap()
    );
    assert!(store.find(&key).await.unwrap().is_none());
    // Uninstalls: not over a later install.
    store.save(&third).await.unwrap();
    // Nor of an installation the asker does not own (another app's, under this key): the
    // uninstall and the revocations leave it whole.
    let others = |s: &Stored| s.installation.app_id.as_deref() != Some("A1");
    assert!(
        !store
            .revoke(
                &key,
                Place::Own,
                Revoked {
                    users: &["U1".into()],
                    bots: &["UBOT1".into()],
                    before_ms: 6_000
                },
                &others
            )
            .await
            .unwrap()
    );
    assert!(
        !store
            .delete(&key, Place::Own, 6_000, &others)
            .await
            .unwrap()
    );
    assert_eq!(store.find(&key).await.unwrap().unwrap().installation, third);
    assert!(
        !store
            .delete(&key, Place::Own, 4_000, &|_| true)
            .await
            .unwrap()
    );
    assert!(
        store
            .delete(&key, Place::Own, 6_000, &|_| true)
            .await
            .unwrap()
    );
    assert!(
        !store
            .delete(&key, Place::Own, 6_000, &|_| true)
            .await
            .unwrap()
    );

    // States' nonces: single use; the same spender again (its answer lost) is told yes.
    assert!(store.consume_state("s1", "n1", 10_000).await.unwrap());
    assert!(store.consume_state("s1", "n1", 10_000).await.unwrap());
    assert!(!store.consume_state("s1", "n2", 10_000).await.unwrap());

    // History reads: one a minute, shared.
    let pace = InstallationKey::Workspace("T9".into());
    let history = "conversations.history";
    assert_eq!(
        store.take_read(&pace, history, 100_000, 1).await.unwrap(),
        None
    );
    assert_eq!(
        store.take_read(&pace, history, 130_000, 1).await.unwrap(),
        Some(160_000)
    );
    // Each method its own.
    let replies = "conversations.replies";
    assert_eq!(
        store.take_read(&pace, replies, 130_000, 1).await.unwrap(),
        None
    );
    assert_eq!(
        store.take_read(&pace, history, 160_000, 1).await.unwrap(),
        None
    );
}

/// The binary in multi-workspace mode with its install settings in the secret (as the SAM
/// template keeps them): the install page asks for the secret's scopes; settings that
/// contradict each other, or are missing, stop the start with exit 2 naming them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the SQS server and the built binary"]
async fn the_binary_takes_its_install_settings_from_the_secret_and_refuses_contradictions() {
    let sqs = sqs_endpoint(); // moto serves Secrets Manager too
    let client = secrets_client(&sqs);
    let secret = |value: serde_json::Value| {
        let client = client.clone();
        async move {
            let name = format!("slack-once/oauth-{}", uuid::Uuid::new_v4().simple());
            client
                .create_secret()
                .name(&name)
                .secret_string(value.to_string())
                .send()
                .await
                .unwrap();
            name
        }
    };
    let aws = |name: &str| -> Vec<(&'static str, String)> {
        vec![
            ("SLACK_SECRETS_ARN", name.to_string()),
            ("AWS_ENDPOINT_URL_SECRETS_MANAGER", sqs.clone()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_CONFIG_FILE", "/dev/null".into()),
            ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null".into()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
            ("SLACK_CLIENT_ID", CLIENT_ID.into()),
        ]
    };
    let good = secret(json!({
        "signing_secret": SECRET, "client_secret": "secret-of-the-client",
        "scopes": "app_mentions:read,chat:write", "redirect_uri": "https://bot.example.com/slack/oauth_redirect"
    }))
    .await;
    let bot = BotProcess::spawn(&aws(&good));
    let page = HttpClient::default()
        .request(
            "GET",
            &format!(
                "{}/slack/install",
                bot.url().trim_end_matches("/slack/events")
            ),
            &[],
            Vec::new(),
        )
        .await;
    assert_eq!(page.status, 302, "{}", page.body);
    let query = query_of(page.headers["location"].to_str().unwrap());
    assert_eq!(query["scope"], "app_mentions:read,chat:write");
    assert_eq!(
        query["redirect_uri"],
        "https://bot.example.com/slack/oauth_redirect"
    );
    assert!(!bot.log().contains("secret-of-the-client"));
    drop(bot);

    let exits = |vars: Vec<(&'static str, String)>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"));
        command
            .env_clear()
            .env("LISTEN_ADDR", "127.0.0.1:0")
            .env("SLACK_SIGNING_SECRET", SECRET);
        for (k, v) in vars {
            command.env(k, v);
        }
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
    let no_scopes = secret(json!({"signing_secret": SECRET, "client_secret": "c"})).await;
    let no_client_secret = secret(json!({"signing_secret": SECRET, "scopes": "chat:write"})).await;
    let cases: Vec<(Vec<(&'static str, String)>, &str)> = vec![
        (aws(&no_scopes), "SLACK_SCOPES"),
        (aws(&no_client_secret), "client secret"),
        (
            vec![
                ("SLACK_CLIENT_ID", CLIENT_ID.into()),
                ("SLACK_CLIENT_SECRET", "c".into()),
                ("SLACK_SCOPES", "chat:write".into()),
                ("SLACK_BOT_TOKEN", "xoxb-a-secret-token".into()),
            ],
            "SLACK_BOT_TOKEN, SLACK_CLIENT_ID",
        ),
        (
            vec![
                ("SLACK_CLIENT_ID", CLIENT_ID.into()),
                ("SLACK_CLIENT_SECRET", "c".into()),
            ],
            "SLACK_SCOPES",
        ),
        (
            vec![("SLACK_SCOPES", "chat:write".into())],
            "SLACK_CLIENT_ID",
        ),
    ];
    for (vars, names) in cases {
        let (code, text) = exits(vars);
        assert_eq!(code, Some(2), "{names}: {text}");
        assert!(text.contains(names), "{names}: {text}");
        assert!(!text.contains("xoxb-a-secret-token"), "{text}");
    }
}

/// A channel shared with another organisation (Slack Connect): the event's `team_id` is the
/// writer's team; the installation is the one `authorizations` names, even where the other
/// team has installed the app too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn in_a_shared_channel_the_installation_is_the_one_authorizations_names() {
    let slack = fake_slack_oauth().await;
    let (ledger, store) = on_dynamo().await;
    let app = spawn(&slack, ledger, store).await;
    let ours = slack.with_grants(|g| g.grant("T0002", "chat:write", "", false));
    assert_eq!(install(&app, ours).await.status, 200);
    for (n, other_installed) in [(1, false), (2, true)] {
        if other_installed {
            let theirs = slack.with_grants(|g| g.grant("T0OTHER", "chat:write", "", false));
            assert_eq!(install(&app, theirs).await.status, 200);
        }
        let body = mention_in(&slack, "T0002", None, false, "C0SHARED", n);
        let mut envelope: serde_json::Value = serde_json::from_str(&body).unwrap();
        envelope["team_id"] = json!("T0OTHER");
        envelope["event"]["team"] = json!("T0OTHER");
        let answer = app.send(&envelope.to_string()).await;
        assert_eq!(answer.outcome(), "answered", "{}", answer.body);
    }
    assert_eq!(slack.messages_of("T0002").len(), 2);
    assert!(
        slack.messages_of("T0OTHER").is_empty(),
        "never the other team's token"
    );
}

/// An uninstall seen by one instance, a reinstall through another: the next event on the
/// first is answered (an absent installation is never cached). In a Grid enterprise, a
/// workspace's uninstall (sent twice) leaves the enterprise's org-wide install alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn a_reinstall_counts_at_once_everywhere_and_a_workspaces_uninstall_spares_its_enterprise() {
    let slack = fake_slack_oauth().await;
    let (ledger, store) = on_dynamo().await;
    let a = spawn(&slack, ledger.clone(), store.clone()).await;
    let b = spawn(&slack, ledger, store.clone()).await;
    let code = slack.with_grants(|g| g.grant("T0002", "chat:write", "", false));
    assert_eq!(install(&a, code).await.status, 200);
    let now = (now_unix() + 1) as i64;
    let gone = uninstall_event("app_uninstalled", "T0002", now, json!(null));
    assert_eq!(b.send(&gone).await.status, 200);
    let first = mention_in(&slack, "T0002", None, false, "C0002", 1);
    assert_eq!(b.send(&first).await.outcome(), "skipped");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let code = slack.with_grants(|g| g.grant("T0002", "chat:write", "", false));
    assert_eq!(install(&a, code).await.status, 200);
    let second = mention_in(&slack, "T0002", None, false, "C0002", 2);
    assert_eq!(b.send(&second).await.outcome(), "answered");

    let org = slack.with_grants(|g| g.grant_org("E0001", "chat:write", false));
    assert_eq!(install(&a, org).await.status, 200);
    let workspace = slack.with_grants(|g| g.grant("T0007", "chat:write", "", false));
    assert_eq!(install(&a, workspace).await.status, 200);
    let mut gone: serde_json::Value = serde_json::from_str(&uninstall_event(
        "app_uninstalled",
        "T0007",
        (now_unix() + 1) as i64,
        json!(null),
    ))
    .unwrap();
    gone["enterprise_id"] = json!("E0001");
    gone["authorizations"][0]["enterprise_id"] = json!("E0001");
    for _ in 0..2 {
        assert_eq!(a.send(&gone.to_string()).await.status, 200);
    }
    assert!(
        store
            .find(&InstallationKey::Workspace("T0007".into()))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .find(&InstallationKey::Enterprise("E0001".into()))
            .await
            .unwrap()
            .is_some(),
        "the enterprise's org-wide install stays"
    );
}

/// Moving a single-workspace app over: `slack-once import-token` keeps its bot token as its
/// workspace's installation (the workspace and bot as auth.test names them), once; the app in
/// multi-workspace mode then answers that workspace with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and the built binary"]
async fn the_binary_imports_a_single_workspaces_token_and_the_app_answers_with_it() {
    let slack = fake_slack_oauth().await;
    // A token Slack issued when the app was installed in its one workspace.
    slack.with_grants(|g| g.accept("xoxb-the-one-workspace", "T0TEST"));
    let endpoint = dynamodb_endpoint();
    let (ledger, store) = on_dynamo().await;
    let run = || {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"));
        command.env_clear().args(["import-token", "--plaintext"]);
        for (k, v) in dynamodb_env(&endpoint) {
            command.env(k, v);
        }
        command
            .env("SLACK_BOT_TOKEN", "xoxb-the-one-workspace")
            .env("SLACK_CLIENT_ID", CLIENT_ID)
            .env("SLACK_API_URL", slack.base_url())
            .env("DEDUP_TABLE", ledger.table());
        let out = command.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (code, text) = run();
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("imported the installation of T0TEST"),
        "{text}"
    );
    assert!(!text.contains("xoxb-the-one-workspace"));
    let (code, text) = run();
    assert_eq!(
        (code, text.contains("nothing imported")),
        (Some(0), true),
        "{text}"
    );
    let stored = store
        .find(&InstallationKey::Workspace("T0TEST".into()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.installation.bot_user_id.as_deref(), Some("U0BOT"));
    let app = spawn(&slack, ledger, store).await;
    let body = json!({
        "token": "unused", "team_id": "T0TEST", "api_app_id": slack_once::testing::APP_ID,
        "type": "event_callback", "event_id": "EvImported1", "event_time": 1_700_000_000,
        "event": {"type": "app_mention", "user": "U0PERSON", "text": "<@U0BOT> hi", "ts": "1700000001.000100", "channel": "C0TEST", "event_ts": "1700000001.000100"},
        "authorizations": [{"team_id": "T0TEST", "user_id": "U0BOT", "is_bot": true}]
    })
    .to_string();
    slack.with_workspace(|w| w.add_event_message(body.as_bytes()));
    assert_eq!(app.send(&body).await.outcome(), "answered");
    assert_eq!(slack.messages().len(), 1);
}

/// A refresh runs outside any request: its own metrics line says what it came to (the
/// template's alarm watches `InstallationsBroken`), and a failed one is not tried again by
/// every request at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_counts_its_own_metrics_and_a_failed_one_backs_off() {
    use slack_once::workspaces::{Authorized, Workspaces};
    let slack = fake_slack_oauth().await;
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let workspaces = |secret: &str, store: Arc<MemoryInstallations>| {
        let mut oauth = config(&slack, &[]).oauth.unwrap();
        oauth.client_secret = Some(slack_once::config::Secret::new(secret));
        let w = Workspaces::new(
            store,
            slack_once::slack::SlackClient::new(slack.base_url(), None),
            oauth,
            Arc::new(slack_once::secrets::SlackSecrets::fixed(None, None)),
        );
        slack_once::testing::wiring::keep_metrics(
            &w,
            slack_once::testing::wiring::MetricsOut::Kept(lines.clone()),
            "test",
        );
        w
    };
    let call = |w: Arc<Workspaces>| async move {
        let Authorized::Installed { client, .. } = w
            .authorize(Some("T0002"), None, false, &Default::default())
            .await
            .unwrap()
        else {
            panic!("installed");
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let _ = client
            .api(
                "auth.test",
                &slack_once::slack::Args::Form(Vec::new()),
                deadline,
            )
            .await;
    };
    // Refused for good: marked broken, counted on the refresh's own line.
    let store = Arc::new(MemoryInstallations::of_app(CLIENT_ID));
    rotating_install(&slack, &*store, "T0002", 30).await;
    slack.with_grants(|g| g.revoke_all("T0002"));
    call(workspaces(CLIENT_SECRET, store.clone())).await;
    let text = lines.lock().unwrap().join("\n");
    assert!(text.contains("InstallationsBroken"), "{text}");
    assert!(store.all()[0].broken.is_some());

    // A refresh that fails (a wrong client secret) is tried once, not by each request after.
    let other = fake_slack_oauth().await;
    let store = Arc::new(MemoryInstallations::of_app(CLIENT_ID));
    rotating_install(&other, &*store, "T0002", 30).await;
    let slack = other;
    let w = {
        let mut oauth = config(&slack, &[]).oauth.unwrap();
        oauth.client_secret = Some(slack_once::config::Secret::new("wrong"));
        Workspaces::new(
            store,
            slack_once::slack::SlackClient::new(slack.base_url(), None),
            oauth,
            Arc::new(slack_once::secrets::SlackSecrets::fixed(None, None)),
        )
    };
    for _ in 0..3 {
        call(w.clone()).await;
    }
    let refreshes = slack.with_grants(|g| {
        g.exchanges()
            .iter()
            .filter(|e| e.grant_type == "refresh_token")
            .count()
    });
    assert_eq!(refreshes, 1, "one exchange, then 30 s without");
}

/// A bot of settings: a mention `set VALUE` keeps VALUE under "settings" in the workspace's
/// state, `get NAME` says what the workspace's state holds under NAME, `share VALUE` keeps
/// VALUE in the state every workspace shares, `shared` says what it holds.
fn settings_bot() -> slack_once::app::App {
    use slack_once::app::{App, AppMention, Ctx};
    let day = Duration::from_secs(86_400);
    App::new().app_mention(move |ctx: Ctx, m: AppMention| async move {
        let said = m.text.split_once("> ").map(|(_, t)| t).unwrap_or_default();
        let (verb, rest) = said.split_once(' ').unwrap_or((said, ""));
        let rest = rest.to_string();
        let answer = match verb {
            "set" => {
                let v: String = ctx
                    .state()
                    .update("settings", day, |_: Option<String>| rest.clone())
                    .await?;
                format!("set {v}")
            }
            "get" => match ctx.state().get::<String>(&rest).await? {
                Some(v) => format!("got {}", v.value),
                None => "got none".to_string(),
            },
            "share" => {
                let v: String = ctx
                    .shared_state()
                    .update("motd", day, |_: Option<String>| rest.clone())
                    .await?;
                format!("shared {v}")
            }
            "shared" => match ctx.shared_state().get::<String>("motd").await? {
                Some(v) => format!("motd {}", v.value),
                None => "motd none".to_string(),
            },
            _ => "?".to_string(),
        };
        ctx.reply(answer).await?;
        Ok(())
    })
}

/// State is per workspace: two workspaces write and read "settings", each sees its own; no
/// name a listener can give (another workspace's id in it, the other item's key itself, a path)
/// reaches the other's value; the shared state is one value for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn two_workspaces_each_keep_their_own_state_and_share_only_the_shared() {
    let slack = fake_slack_oauth().await;
    let (ledger, store) = on_dynamo().await;
    let table = ledger.table().to_string();
    let app = spawn_bot(&slack, ledger.clone(), store, settings_bot()).await;
    for team in ["T0002", "T0003"] {
        let code = slack.with_grants(|g| g.grant(team, "app_mentions:read,chat:write", "", false));
        assert_eq!(install(&app, code).await.status, 200);
    }
    let n = std::sync::atomic::AtomicU32::new(0);
    let say = |team: &'static str, text: String| {
        let i = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let body = mention_in(&slack, team, None, false, "C1", 100 + i);
        let mut body: serde_json::Value = serde_json::from_str(&body).unwrap();
        let bot = slack_once::testing::bot_user_of(team);
        body["event"]["text"] = json!(format!("<@{bot}> {text}"));
        let body = body.to_string();
        slack.with_workspace_of(team, |w| w.add_event_message(body.as_bytes()));
        let (app, slack) = (&app, &slack);
        async move {
            let answer = app.send(&body).await;
            assert_eq!(answer.outcome(), "answered", "{}", answer.body);
            let said = slack.messages_of(team);
            said.last().unwrap()["text"].as_str().unwrap().to_string()
        }
    };
    assert_eq!(say("T0002", "set blue".into()).await, "set blue");
    assert_eq!(say("T0003", "set green".into()).await, "set green");
    assert_eq!(say("T0002", "get settings".into()).await, "got blue");
    assert_eq!(say("T0003", "get settings".into()).await, "got green");

    // The two values are two items, each keyed by its workspace.
    let keys: Vec<String> = dynamodb_client(&dynamodb_endpoint())
        .scan()
        .table_name(&table)
        .send()
        .await
        .unwrap()
        .items()
        .iter()
        .filter_map(|i| i.get("pk").and_then(|v| v.as_s().ok()).cloned())
        .filter(|k| k.starts_with("state"))
        .collect();
    let t3 = keys
        .iter()
        .find(|k| k.contains("-T0003-"))
        .unwrap_or_else(|| panic!("{keys:?}"))
        .clone();
    assert!(keys.iter().any(|k| k.contains("-T0002-")), "{keys:?}");
    // No name given in T0002 reaches T0003's value.
    for forged in [
        "T0003-settings".to_string(),
        "T0003/settings".to_string(),
        "../T0003/settings".to_string(),
        "settings\u{0}T0003".to_string(),
        t3.clone(),
        t3.split_once("-T0003-").unwrap().1.to_string(),
    ] {
        assert_eq!(
            say("T0002", format!("get {forged}")).await,
            "got none",
            "{forged:?} from T0002"
        );
    }
    assert_eq!(say("T0002", "get settings".into()).await, "got blue");
    // The shared state: one value, whichever workspace wrote it.
    assert_eq!(
        say("T0002", "share lunch at noon".into()).await,
        "shared lunch at noon"
    );
    assert_eq!(say("T0003", "shared".into()).await, "motd lunch at noon");
}

/// A flood of callbacks to `/slack/oauth_redirect` with made-up states (random text, the
/// state's shape with a forged signature, an expired one, each with a cookie that matches it)
/// spends no `oauth.v2.access` and writes nothing to the table: a state is checked by its
/// signature before anything else happens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn a_flood_of_callbacks_with_made_up_states_spends_no_exchange_and_no_write() {
    let slack = fake_slack_oauth().await;
    let (ledger, store) = on_dynamo().await;
    let table = ledger.table().to_string();
    let app = spawn(&slack, ledger, store).await;
    let nonce = |i: usize| format!("{:032x}", 0xfeed_0000_u128 + i as u128);
    let future = now_unix() + 300;
    let states: Vec<String> = (0..200)
        .map(|i| match i % 4 {
            0 => format!("made-up-{i}"),
            1 => format!("{}.{future}.{:032x}", nonce(i), i),
            2 => format!("{}.{}.{:032x}", nonce(i), now_unix() - 10, i),
            _ => format!("{}.{future}", nonce(i)),
        })
        .collect();
    let mut tasks = Vec::new();
    for (i, state) in states.into_iter().enumerate() {
        let (http, url) = (
            app.http.clone(),
            app.url(&format!(
                "/slack/oauth_redirect?code=code-{i}&state={state}"
            )),
        );
        tasks.push(tokio::spawn(async move {
            let cookie = vec![(
                "cookie".to_string(),
                format!("slack-app-oauth-state={state}"),
            )];
            http.request("GET", &url, &cookie, Vec::new()).await
        }));
    }
    for task in tasks {
        let answer = task.await.unwrap();
        assert_eq!(answer.status, 400, "{}", answer.body);
    }
    assert_eq!(slack.with_grants(|g| g.exchanges().len()), 0, "no exchange");
    let items = dynamodb_client(&dynamodb_endpoint())
        .scan()
        .table_name(&table)
        .send()
        .await
        .unwrap();
    assert_eq!(items.count(), 0, "nothing written: {:?}", items.items());
}

/// Every value an OAuth page shows is escaped: the workspace's name as Slack gives it, Slack's
/// error code, a refused exchange's code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_value_an_oauth_page_shows_is_escaped() {
    let slack = fake_slack_oauth().await;
    let store = Arc::new(MemoryInstallations::of_app(CLIENT_ID));
    let app = spawn(
        &slack,
        Arc::new(slack_once::ledger::MemoryLedger::new()),
        store,
    )
    .await;
    // A workspace whose name (as the stand-in makes it, "Team " and the id) holds markup.
    let code = slack.with_grants(|g| g.grant("T<b>\"x\"</b>", "chat:write", "", false));
    let done = install(&app, code).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(
        done.body.contains("Team T&lt;b&gt;&quot;x&quot;&lt;/b&gt;"),
        "{}",
        done.body
    );
    assert!(!done.body.contains("<b>"), "{}", done.body);
    // Slack's error, as the redirect carries it.
    let page = app.get("/slack/install", None).await;
    let state = query_of(page.headers["location"].to_str().unwrap())["state"].clone();
    let cookie = format!("slack-app-oauth-state={state}");
    let refused = app
        .get(
            &format!(
                "/slack/oauth_redirect?error=%3Cscript%3Ealert(1)%3C%2Fscript%3E&state={state}"
            ),
            Some(&cookie),
        )
        .await;
    assert_eq!(refused.status, 400);
    assert!(!refused.body.contains("<script>"), "{}", refused.body);
    // A code Slack refuses: its error code shown, escaped.
    let page = app.get("/slack/install", None).await;
    let state = query_of(page.headers["location"].to_str().unwrap())["state"].clone();
    let cookie = format!("slack-app-oauth-state={state}");
    let refused = app
        .get(
            &format!("/slack/oauth_redirect?code=not-a-code&state={state}"),
            Some(&cookie),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("invalid_code"), "{}", refused.body);
    // Whatever Slack's answer holds.
    slack.with_grants(|g| g.refuse_next("<img src=x onerror=alert(1)>"));
    let page = app.get("/slack/install", None).await;
    let state = query_of(page.headers["location"].to_str().unwrap())["state"].clone();
    let cookie = format!("slack-app-oauth-state={state}");
    let code = slack.with_grants(|g| g.grant("T0009", "chat:write", "", false));
    let refused = app
        .get(
            &format!("/slack/oauth_redirect?code={code}&state={state}"),
            Some(&cookie),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("&lt;img src=x"), "{}", refused.body);
    assert!(!refused.body.contains("<img"), "{}", refused.body);
}

/// Two apps on one table, both installed in one workspace, never read each other's state:
/// neither the workspace's (`ctx.state()`) nor the app-wide (`ctx.shared_state()`), under the
/// same names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn two_apps_on_one_table_never_read_each_others_state() {
    use slack_once::testing::{Identity, bot_id_for, bot_user_for};
    let endpoint = dynamodb_endpoint();
    let (table, ledger) = fresh_table(&endpoint).await;
    let a_slack = fake_slack_oauth().await;
    let b_app = "A0000OTHER";
    let b_slack = FakeSlack::start_for(Identity {
        team: "T0BHOME".into(),
        app_id: b_app.into(),
        bot_id: bot_id_for(b_app, "T0BHOME"),
        bot_user: bot_user_for(b_app, "T0BHOME"),
    })
    .await
    .with_oauth("9999.0009", "client-secret-b");
    a_slack.same_slack_as(&b_slack);
    let store_a = DynamoInstallations::new(dynamodb_client(&endpoint), table.clone(), CLIENT_ID);
    let store_b = DynamoInstallations::new(dynamodb_client(&endpoint), table.clone(), "9999.0009");
    let a = spawn_bot(&a_slack, ledger.clone(), Arc::new(store_a), settings_bot()).await;
    let b_config = config(
        &b_slack,
        &[
            ("SLACK_CLIENT_ID", "9999.0009"),
            ("SLACK_CLIENT_SECRET", "client-secret-b"),
        ],
    );
    let b = spawn_configured(b_config, ledger.clone(), Arc::new(store_b), settings_bot()).await;
    let code = a_slack.with_grants(|g| g.grant("T0002", "app_mentions:read,chat:write", "", false));
    assert_eq!(install(&a, code).await.status, 200);
    let code = b_slack.with_grants(|g| g.grant("T0002", "app_mentions:read,chat:write", "", false));
    assert_eq!(install(&b, code).await.status, 200);
    let n = std::sync::atomic::AtomicU32::new(0);
    let say = |which: &'static str, text: &str| {
        let i = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (app, slack, app_id) = match which {
            "A" => (&a, &a_slack, slack_once::testing::APP_ID),
            _ => (&b, &b_slack, b_app),
        };
        let bot = bot_user_for(app_id, "T0002");
        let ts = format!("1700003{i:03}.000100");
        let body = json!({
            "token": "unused", "team_id": "T0002", "api_app_id": app_id,
            "type": "event_callback", "event_id": format!("EvTwoApps{i:04}"), "event_time": 1_700_000_000,
            "event": {"type": "app_mention", "user": "U0PERSON", "text": format!("<@{bot}> {text}"),
                "ts": ts, "channel": "C1", "event_ts": ts},
            "authorizations": [{"team_id": "T0002", "user_id": bot, "is_bot": true}]
        })
        .to_string();
        slack.with_workspace_of("T0002", |w| w.add_event_message(body.as_bytes()));
        async move {
            let answer = app.send(&body).await;
            assert_eq!(answer.outcome(), "answered", "{which}: {}", answer.body);
            let said = slack.messages_of("T0002");
            said.last().unwrap()["text"].as_str().unwrap().to_string()
        }
    };
    assert_eq!(say("A", "set blue").await, "set blue");
    assert_eq!(say("B", "get settings").await, "got none");
    assert_eq!(say("B", "set green").await, "set green");
    assert_eq!(say("A", "get settings").await, "got blue");
    assert_eq!(say("A", "share from A").await, "shared from A");
    assert_eq!(say("B", "shared").await, "motd none");
}

/// The install page costs nothing until a person comes back: 500 loads of `/slack/install`
/// write nothing to the table and spend no `oauth.v2.access` (each state is signed, carries its
/// own expiry, 10 minutes on, and is set as the browser's cookie). A state that verifies but
/// comes without its cookie, or with another load's, and one signed with the app's key whose
/// time is past, are refused with no exchange and no write. The callback spends its state once
/// (one item, expiring with the state) and clears the browser's cookie, and the same callback
/// again is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local"]
async fn loads_of_the_install_page_write_nothing_and_only_its_callback_spends_the_state_once() {
    use hmac::Mac;
    let slack = fake_slack_oauth().await;
    let (ledger, store) = on_dynamo().await;
    let table = ledger.table().to_string();
    let app = spawn(&slack, ledger, store).await;
    let scan = || async {
        dynamodb_client(&dynamodb_endpoint())
            .scan()
            .table_name(&table)
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .items()
            .to_vec()
    };
    let mut states = std::collections::HashSet::new();
    for _ in 0..10 {
        let mut loads = Vec::new();
        for _ in 0..50 {
            let (http, url) = (app.http.clone(), app.url("/slack/install"));
            loads.push(tokio::spawn(async move {
                http.request("GET", &url, &[], Vec::new()).await
            }));
        }
        for load in loads {
            let page = load.await.unwrap();
            assert_eq!(page.status, 302, "{}", page.body);
            let state = query_of(page.headers["location"].to_str().unwrap())["state"].clone();
            let cookie = page.headers["set-cookie"].to_str().unwrap();
            assert!(
                cookie.starts_with(&format!("slack-app-oauth-state={state};")),
                "{cookie}"
            );
            assert!(cookie.contains("Max-Age=600") && cookie.contains("HttpOnly"));
            let expires: u64 = state.split('.').nth(1).unwrap().parse().unwrap();
            assert!(expires.abs_diff(now_unix() + 600) <= 5, "{state}");
            states.insert(state);
        }
    }
    assert_eq!(states.len(), 500, "every load its own state");
    assert!(scan().await.is_empty(), "the install page writes nothing");
    assert_eq!(slack.with_grants(|g| g.exchanges().len()), 0);

    let mut states = states.into_iter();
    let (state, other) = (states.next().unwrap(), states.next().unwrap());
    // Signed as the app signs (its client secret's derived key), its time past.
    let expired = {
        let mut derive = hmac::Hmac::<sha2::Sha256>::new_from_slice(CLIENT_SECRET.as_bytes())
            .expect("any key length");
        derive.update(b"slack-once oauth state v1");
        let key = derive.finalize().into_bytes();
        let nonce = "0123456789abcdef0123456789abcdef";
        let expires = now_unix() - 1;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
        mac.update(format!("{nonce}.{expires}").as_bytes());
        let mac = hex::encode(&mac.finalize().into_bytes()[..16]);
        format!("{nonce}.{expires}.{mac}")
    };
    let code = slack.with_grants(|g| g.grant("T0002", "chat:write", "", false));
    let callback = |state: &str| format!("/slack/oauth_redirect?code={code}&state={state}");
    let cookie = |state: &str| format!("slack-app-oauth-state={state}");
    for (path, cookie, says) in [
        (callback(&state), None, "cookie is missing"),
        (callback(&state), Some(cookie(&other)), "does not match"),
        (
            callback(&expired),
            Some(cookie(&expired)),
            "expired or was used",
        ),
    ] {
        let answer = app.get(&path, cookie.as_deref()).await;
        assert_eq!(answer.status, 400, "{}", answer.body);
        assert!(answer.body.contains(says), "{}", answer.body);
    }
    assert!(scan().await.is_empty(), "refused: nothing written");
    assert_eq!(slack.with_grants(|g| g.exchanges().len()), 0);

    // The person comes back: the state spent once, recorded until the state's own expiry.
    let done = app.get(&callback(&state), Some(&cookie(&state))).await;
    assert_eq!(done.status, 200, "{}", done.body);
    let cleared = done.headers["set-cookie"].to_str().unwrap();
    assert!(
        cleared.starts_with("slack-app-oauth-state=;") && cleared.contains("Max-Age=0"),
        "the spent state's cookie cleared: {cleared}"
    );
    let items = scan().await;
    let spent: Vec<_> = items
        .iter()
        .filter(|i| i["pk"].as_s().unwrap().starts_with("oauth-state#"))
        .collect();
    assert_eq!(spent.len(), 1, "{items:?}");
    let expires: u64 = state.split('.').nth(1).unwrap().parse().unwrap();
    let ttl: u64 = spent[0]["expires_at"].as_n().unwrap().parse().unwrap();
    assert!(
        ttl >= expires && ttl <= expires + 120,
        "{ttl} for {expires}"
    );
    let again = app.get(&callback(&state), Some(&cookie(&state))).await;
    assert_eq!(again.status, 400, "{}", again.body);
    assert!(again.body.contains("used already"), "{}", again.body);
    assert_eq!(slack.with_grants(|g| g.exchanges().len()), 1);
    assert_eq!(scan().await.len(), items.len(), "the replay writes nothing");
}
