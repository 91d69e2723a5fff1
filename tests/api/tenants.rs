//! Tenants: two Slack apps whose deployments share one DynamoDB table, and many workspaces of
//! one app. Each app is the built binary in a process of its own, with its own signing secret,
//! client credentials and Slack stand-in (its own app id, its own tokens: a token one app's
//! stand-in issued is refused by the other's, as Slack refuses another app's token), installed
//! through the OAuth flow over HTTP. They must never use, delete or break each other's
//! installations, nor read each other's state.

use std::collections::HashMap;

use serde_json::json;
use slack_once::testing::{FakeSlack, Identity, bot_id_for, bot_user_for};

use crate::helpers::*;

/// One app's deployment: its stand-in, its process, its credentials.
pub struct Tenant {
    pub app_id: &'static str,
    pub signing_secret: &'static str,
    pub slack: FakeSlack,
    pub bot: BotProcess,
    pub http: HttpClient,
    pub vars: Vec<(&'static str, String)>,
}

/// App A and app B.
pub const A: (&str, &str, &str, &str) = (
    "A0000APPA",
    "1111.0001",
    "client-secret-a",
    "signing-secret-a",
);
pub const B: (&str, &str, &str, &str) = (
    "A0000APPB",
    "2222.0002",
    "client-secret-b",
    "signing-secret-b",
);

/// The variables of app `app` ((app id, client id, client secret, signing secret)) on `table`,
/// its Slack at `slack`.
pub fn tenant_vars(
    app: (&str, &str, &str, &str),
    slack: &FakeSlack,
    endpoint: &str,
    table: &str,
) -> Vec<(&'static str, String)> {
    let mut vars = dynamodb_env(endpoint);
    vars.extend([
        ("SLACK_SIGNING_SECRET", app.3.to_string()),
        ("SLACK_CLIENT_ID", app.1.to_string()),
        ("SLACK_CLIENT_SECRET", app.2.to_string()),
        (
            "SLACK_SCOPES",
            "app_mentions:read,chat:write,commands".into(),
        ),
        ("SLACK_API_URL", slack.base_url().to_string()),
        ("DEDUP_TABLE", table.to_string()),
    ]);
    vars
}

impl Tenant {
    /// The app `app` on `table`, `extra` added to its variables (or replacing them).
    pub async fn start(
        app: (&'static str, &'static str, &'static str, &'static str),
        endpoint: &str,
        table: &str,
        extra: &[(&'static str, String)],
    ) -> Self {
        let slack = FakeSlack::start_for(Identity {
            team: "T0000HOME".into(),
            app_id: app.0.into(),
            bot_id: bot_id_for(app.0, "T0000HOME"),
            bot_user: bot_user_for(app.0, "T0000HOME"),
        })
        .await
        .with_oauth(app.1, app.2);
        let mut vars = tenant_vars(app, &slack, endpoint, table);
        for (k, v) in extra {
            vars.retain(|(name, _)| name != k);
            vars.push((k, v.clone()));
        }
        let bot = spawn_tenant(&vars, false);
        Self {
            app_id: app.0,
            signing_secret: app.3,
            slack,
            bot,
            http: HttpClient::default(),
            vars,
        }
    }

    /// Another process of this app: this release's, or the previous release's (`previous`).
    pub fn process(&self, previous: bool) -> BotProcess {
        spawn_tenant(&self.vars, previous)
    }

    /// Sends `body` signed with this app's secret.
    pub async fn send(&self, body: &str) -> Answer {
        self.send_to(&self.bot, body).await
    }

    /// Sends `body` signed with this app's secret to its process `bot`.
    pub async fn send_to(&self, bot: &BotProcess, body: &str) -> Answer {
        let headers = signed_headers(self.signing_secret, now_unix(), body.as_bytes());
        self.http
            .request(
                "POST",
                &format!("http://{}/slack/events", bot.addr),
                &headers,
                body.as_bytes().to_vec(),
            )
            .await
    }

    /// Installs the app in `team` through the flow, as a browser does (`rotation`: its tokens
    /// expire and are refreshed).
    pub async fn install(&self, team: &str, rotation: bool) -> Answer {
        self.install_via(&self.bot, team, rotation).await
    }

    /// As [`Tenant::install`], through the process `bot`.
    pub async fn install_via(&self, bot: &BotProcess, team: &str, rotation: bool) -> Answer {
        let code = self
            .slack
            .with_grants(|g| g.grant(team, "app_mentions:read,chat:write,commands", "", rotation));
        self.install_code(bot, &code).await
    }

    /// Installs through the process `bot` with the code of a person's approval, `code`.
    pub async fn install_code(&self, bot: &BotProcess, code: &str) -> Answer {
        let url = |path: &str| format!("http://{}{}", bot.addr, path);
        let page = self
            .http
            .request("GET", &url("/slack/install"), &[], Vec::new())
            .await;
        assert_eq!(page.status, 302, "{}", page.body);
        let location = page.headers["location"].to_str().unwrap().to_string();
        let cookie = page.headers["set-cookie"].to_str().unwrap().to_string();
        let state = query_of(&location)["state"].clone();
        let pair = cookie.split(';').next().unwrap().to_string();
        self.http
            .request(
                "GET",
                &url(&format!("/slack/oauth_redirect?code={code}&state={state}")),
                &[("cookie".to_string(), pair)],
                Vec::new(),
            )
            .await
    }

    /// A mention of this app's bot in `team`'s channel `C1`, its message in that workspace.
    pub fn mention(&self, team: &str, n: u32) -> String {
        let bot = bot_user_for(self.app_id, team);
        let ts = format!("1700001{n:03}.000100");
        let body = json!({
            "token": "unused", "team_id": team, "api_app_id": self.app_id,
            "type": "event_callback", "event_id": format!("Ev{}{team}{n:04}", self.app_id),
            "event_time": now_unix(),
            "event": {
                "type": "app_mention", "user": "U0PERSON", "text": format!("<@{bot}> hello"),
                "ts": ts, "channel": "C1", "event_ts": ts
            },
            "authorizations": [{"team_id": team, "user_id": bot, "is_bot": true}]
        })
        .to_string();
        self.slack
            .with_workspace_of(team, |w| w.add_event_message(body.as_bytes()));
        body
    }

    /// This app's `app_uninstalled` in `team`, now.
    pub fn uninstalled(&self, team: &str) -> String {
        let at = now_unix() + 1;
        json!({
            "token": "unused", "team_id": team, "api_app_id": self.app_id, "type": "event_callback",
            "event_id": format!("Ev{}gone{team}", self.app_id), "event_time": at,
            "event": {"type": "app_uninstalled", "event_ts": format!("{at}.000100")},
            "authorizations": [{"team_id": team, "user_id": bot_user_for(self.app_id, team), "is_bot": true}]
        })
        .to_string()
    }

    /// A click of this app's "Helpful" button on its message `message` in `team` (a
    /// `block_actions`, which names no bot user).
    pub fn click(&self, team: &str, message: &serde_json::Value) -> String {
        let channel = message["channel"].as_str().unwrap_or("C1");
        let ts = message["ts"].as_str().unwrap_or_default();
        let origin = self.slack.base_url().trim_end_matches("/api").to_string();
        let payload = json!({
            "type": "block_actions", "team": {"id": team},
            "user": {"id": "U0PERSON", "team_id": team}, "api_app_id": self.app_id,
            "trigger_id": slack_once::testing::Workspace::trigger_id(),
            "actions": [{"type": "button", "action_id": "once_thanks",
                "block_id": "b", "value": "helpful", "action_ts": format!("{}.000200", now_unix())}],
            "container": {"type": "message", "message_ts": ts, "channel_id": channel},
            "channel": {"id": channel}, "message": message,
            "response_url": format!("{origin}/actions/{team}/{channel}/{ts}/{}", uuid::Uuid::new_v4().simple()),
        });
        form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &payload.to_string())
            .finish()
    }

    /// Sends the form `body` signed with this app's secret.
    pub async fn send_form(&self, body: &str) -> Answer {
        let mut headers = signed_headers(self.signing_secret, now_unix(), body.as_bytes());
        headers[0].1 = "application/x-www-form-urlencoded".into();
        self.http
            .request(
                "POST",
                &format!("http://{}/slack/events", self.bot.addr),
                &headers,
                body.as_bytes().to_vec(),
            )
            .await
    }

    /// This app's messages in `team`.
    pub fn answers_in(&self, team: &str) -> usize {
        self.slack.messages_of(team).len()
    }
}

/// A process of the app `vars` configure: this release's binary, or the previous release's.
fn spawn_tenant(vars: &[(&'static str, String)], previous: bool) -> BotProcess {
    let how = Spawn {
        signing_secret_env: false,
        ..Spawn::default()
    };
    let program = match previous {
        false => std::path::PathBuf::from(env!("CARGO_BIN_EXE_slack-once")),
        true => std::path::PathBuf::from(std::env::var_os("SLACK_ONCE_PREVIOUS_BIN").expect(
            "SLACK_ONCE_PREVIOUS_BIN is not set: run the tests with scripts/test.sh, which \
             builds the previous release's binary (scripts/previous-release.sh) and names it",
        )),
    };
    BotProcess::spawn_program_with(&program, &[], vars, &how)
}

fn query_of(url: &str) -> HashMap<String, String> {
    let query = url.split_once('?').map(|(_, q)| q).unwrap_or("");
    form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

async fn two_apps() -> (Tenant, Tenant, String) {
    two_apps_with(&[]).await
}

/// Two apps whose tokens live 10 minutes and are refreshed at every request (11 hours before).
async fn two_rotating_apps() -> (Tenant, Tenant, String) {
    let refresh = [("SLACK_TOKEN_REFRESH_MINUTES", "600".to_string())];
    let (a, b, table) = two_apps_with(&refresh).await;
    for t in [&a, &b] {
        t.slack.with_grants(|g| g.set_lifetime(600));
    }
    (a, b, table)
}

/// Whether each of `t`'s refresh exchanges was taken (none refused), and there was one.
fn refreshes_all_taken(t: &Tenant) -> Result<(), String> {
    let exchanges = t.slack.with_grants(|g| {
        g.exchanges()
            .iter()
            .filter(|e| e.grant_type == "refresh_token")
            .map(|e| e.ok)
            .collect::<Vec<_>>()
    });
    match !exchanges.is_empty() && exchanges.iter().all(|ok| *ok) {
        true => Ok(()),
        false => Err(format!("{exchanges:?}")),
    }
}

async fn two_apps_with(extra: &[(&'static str, String)]) -> (Tenant, Tenant, String) {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let (a, b) = tokio::join!(
        Tenant::start(A, &endpoint, &table, extra),
        Tenant::start(B, &endpoint, &table, extra)
    );
    // One Slack: a token of either app acts as that app wherever it is presented.
    a.slack.same_slack_as(&b.slack);
    (a, b, table)
}

/// Sequence 1: both apps installed in one workspace; each answers its mentions there with its
/// own token (before, the second install replaced the first's: app A posted with B's token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the previous release and the built binary"]
async fn two_apps_installed_in_one_workspace_each_answer_with_their_own_token() {
    let (a, b, _) = two_apps().await;
    assert_eq!(a.install("T0000ONE", false).await.status, 200);
    assert_eq!(b.install("T0000ONE", false).await.status, 200);
    let (ma, mb) = (a.mention("T0000ONE", 1), b.mention("T0000ONE", 1));
    let (ra, rb) = tokio::join!(a.send(&ma), b.send(&mb));
    assert_eq!(
        (ra.outcome(), rb.outcome()),
        ("answered".into(), "answered".into()),
        "A: {} B: {}",
        ra.body,
        rb.body
    );
    assert_eq!((a.answers_in("T0000ONE"), b.answers_in("T0000ONE")), (1, 1));
    for m in a.slack.messages_of("T0000ONE") {
        assert_eq!(m["app_id"], A.0, "{m}");
    }
}

/// Sequence 2: app B uninstalled from a workspace where app A stays installed: A's mentions
/// there are still answered (before, B's `app_uninstalled` deleted A's installation, and A's
/// events ended `200 skipped`: lost, while Slack was told they were taken).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the previous release and the built binary"]
async fn another_apps_uninstall_leaves_this_apps_installation() {
    let (a, b, _) = two_apps().await;
    assert_eq!(b.install("T0000TWO", false).await.status, 200);
    assert_eq!(a.install("T0000TWO", false).await.status, 200);
    b.slack.with_grants(|g| g.revoke_all("T0000TWO"));
    let gone = b.send(&b.uninstalled("T0000TWO")).await;
    assert_eq!(gone.status, 200, "{}", gone.body);
    let answered = a.send(&a.mention("T0000TWO", 2)).await;
    assert_eq!(answered.outcome(), "answered", "{}", answered.body);
    assert_eq!(a.answers_in("T0000TWO"), 1);
    // And B's next mention there (it is uninstalled) is B's own to skip.
    let skipped = b.send(&b.mention("T0000TWO", 3)).await;
    assert_eq!(skipped.outcome(), "skipped", "{}", skipped.body);
}

/// Sequence 3: both apps with rotating tokens in one workspace, each refreshing its own: app
/// A's refresh never exchanges B's refresh token, so B's installation is never marked broken
/// (before, A read B's installation from the one item both shared, was refused B's token,
/// refreshed with B's refresh token at its own client, was refused again, and marked the item
/// broken: B's events were skipped until B was installed again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the previous release and the built binary"]
async fn another_apps_refresh_never_breaks_this_apps_installation() {
    let (a, b, _) = two_rotating_apps().await;
    assert_eq!(a.install("T0000THREE", true).await.status, 200);
    assert_eq!(b.install("T0000THREE", true).await.status, 200);
    for n in 1..=2 {
        let ra = a.send(&a.mention("T0000THREE", n)).await;
        assert_eq!(ra.outcome(), "answered", "A: {}", ra.body);
        // The refresh runs beside the request: let it end.
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    }
    for n in 3..=4 {
        let rb = b.send(&b.mention("T0000THREE", n)).await;
        assert_eq!(rb.outcome(), "answered", "B: {}", rb.body);
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    }
    for (name, t) in [("A", &a), ("B", &b)] {
        if let Err(exchanges) = refreshes_all_taken(t) {
            panic!("{name} refreshed its own tokens, each exchange taken: {exchanges}");
        }
    }
    assert_eq!(
        (a.answers_in("T0000THREE"), b.answers_in("T0000THREE")),
        (2, 2)
    );
}

/// Sequence 4: `import-token` of app A where app B is installed in the workspace: A's token is
/// kept as A's installation (before, it found B's item, said "an installation is stored
/// already", imported nothing, and A then answered with B's token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the previous release and the built binary"]
async fn import_token_keeps_this_apps_installation_beside_another_apps() {
    let (a, b, table) = two_apps().await;
    assert_eq!(b.install("T0000FOUR", false).await.status, 200);
    let token = format!("xoxb-{}-single-workspace", A.0);
    a.slack.with_grants(|g| g.accept(&token, "T0000FOUR"));
    // auth.test, in A's stand-in, names T0000FOUR's bot of app A.
    a.slack.with_workspace_of("T0000FOUR", |_| ());
    let endpoint = dynamodb_endpoint();
    let run = || {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"));
        command.env_clear().args(["import-token", "--plaintext"]);
        for (k, v) in tenant_vars(A, &a.slack, &endpoint, &table) {
            command.env(k, v);
        }
        command.env("SLACK_BOT_TOKEN", &token);
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
    let (code, text) = run();
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("imported the installation of T0000FOUR"),
        "{text}"
    );
    assert!(!text.contains(&token), "{text}");
    let (code, text) = run();
    assert_eq!(
        (code, text.contains("nothing imported")),
        (Some(0), true),
        "{text}"
    );
    let ra = a.send(&a.mention("T0000FOUR", 4)).await;
    assert_eq!(ra.outcome(), "answered", "{}", ra.body);
    let rb = b.send(&b.mention("T0000FOUR", 4)).await;
    assert_eq!(rb.outcome(), "answered", "{}", rb.body);
}

/// A rolling deploy: app A installed (rotating tokens) through the previous release, which kept
/// the installation without the app; this release, serving beside it on the same table, uses
/// that item in place (both answer, and every refresh of either is one exchange of the one
/// refresh token: none is refused), while app B (this release) installed in the same workspace
/// never touches it. A's uninstall through this release removes it for both releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the previous release and the built binary"]
async fn the_previous_releases_installation_serves_both_releases_of_its_app_and_no_other() {
    let (a, b, table) = two_rotating_apps().await;
    let old = a.process(true);
    let installed = a.install_via(&old, "T0000ROLL", true).await;
    assert_eq!(installed.status, 200, "{}", installed.body);
    let endpoint = dynamodb_endpoint();
    let items = scan_keys(&endpoint, &table).await;
    assert!(
        items.iter().any(|k| k == "install#WORKSPACE#T0000ROLL"),
        "the previous release keeps it without the app: {items:?}"
    );
    assert_eq!(b.install("T0000ROLL", true).await.status, 200);
    for n in 1..=6u32 {
        let to = if n % 2 == 0 { &old } else { &a.bot };
        let answer = a.send_to(to, &a.mention("T0000ROLL", n)).await;
        assert_eq!(answer.outcome(), "answered", "A {n}: {}", answer.body);
        let answer = b.send(&b.mention("T0000ROLL", n)).await;
        assert_eq!(answer.outcome(), "answered", "B {n}: {}", answer.body);
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    }
    assert_eq!(
        (a.answers_in("T0000ROLL"), b.answers_in("T0000ROLL")),
        (6, 6)
    );
    for (name, t) in [("A", &a), ("B", &b)] {
        if let Err(exchanges) = refreshes_all_taken(t) {
            panic!("{name}'s refreshes, each taken: {exchanges}");
        }
    }
    // A uninstalled, through this release: its installation is gone for both releases; B's
    // stays.
    a.slack.with_grants(|g| g.revoke_all("T0000ROLL"));
    assert_eq!(a.send(&a.uninstalled("T0000ROLL")).await.status, 200);
    let items = scan_keys(&endpoint, &table).await;
    assert!(
        !items.iter().any(|k| k == "install#WORKSPACE#T0000ROLL"),
        "{items:?}"
    );
    // (The previous release reads the table again within its cache's 30 s.)
    let answer = b.send(&b.mention("T0000ROLL", 9)).await;
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);
}

/// The previous release's `import-token` of `token` for the app `tenant` (A) into `table`.
fn import_with_the_previous_release(tenant: &Tenant, table: &str, token: &str) {
    let previous = std::env::var_os("SLACK_ONCE_PREVIOUS_BIN")
        .expect("SLACK_ONCE_PREVIOUS_BIN is not set: run the tests with scripts/test.sh");
    let mut command = std::process::Command::new(previous);
    command.env_clear().arg("import-token");
    for (k, v) in tenant_vars(A, &tenant.slack, &dynamodb_endpoint(), table) {
        command.env(k, v);
    }
    let out = command.env("SLACK_BOT_TOKEN", token).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every key in `table`.
async fn scan_keys(endpoint: &str, table: &str) -> Vec<String> {
    let client = dynamodb_client(endpoint);
    let mut keys = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        for item in page.items() {
            if let Some(k) = item.get("pk").and_then(|v| v.as_s().ok()) {
                keys.push(k.clone());
            }
        }
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return keys;
        }
    }
}

/// The previous release's `import-token` kept app A's token without the app (nor, from that
/// release, its app id). This release's A uses it in place: a mention names A's bot user; a
/// click names none, and `auth.test` with the item's token says it is A's (the item is tagged,
/// so no later request asks). App B, never installed in that workspace, never uses it: its
/// mention names another bot user, and its click's `auth.test` names app A.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the previous release and the built binary"]
async fn the_previous_releases_import_is_used_by_its_own_app_only() {
    let (a, b, table) = two_apps().await;
    let token = format!("xoxb-{}-imported-by-the-previous-release", A.0);
    a.slack.with_grants(|g| g.accept(&token, "T0000IMP"));
    let endpoint = dynamodb_endpoint();
    import_with_the_previous_release(&a, &table, &token);
    assert!(
        scan_keys(&endpoint, &table)
            .await
            .iter()
            .any(|k| k == "install#WORKSPACE#T0000IMP")
    );

    // B first: neither its mention nor its click is answered with A's token.
    let rb = b.send(&b.mention("T0000IMP", 1)).await;
    assert_eq!(rb.outcome(), "skipped", "B's mention: {}", rb.body);
    let fake = json!({"channel": "C1", "ts": "1700000900.000100", "text": "B's message"});
    let rb = b.send_form(&b.click("T0000IMP", &fake)).await;
    assert_eq!(rb.status, 200, "{}", rb.body);
    assert_eq!(b.answers_in("T0000IMP"), 0);
    assert_eq!(a.answers_in("T0000IMP"), 0, "nothing posted with A's token");
    let b_calls_with_a_token = a
        .slack
        .calls()
        .iter()
        .filter(|(m, _)| m != "auth.test")
        .count();
    assert_eq!(b_calls_with_a_token, 0, "{:?}", a.slack.calls());

    // A: its mention, then a click on its answer, both with its imported token.
    let ra = a.send(&a.mention("T0000IMP", 2)).await;
    assert_eq!(ra.outcome(), "answered", "A's mention: {}", ra.body);
    let answer = a.slack.messages_of("T0000IMP")[0].clone();
    let ra = a.send_form(&a.click("T0000IMP", &answer)).await;
    assert_eq!(ra.status, 200, "{}", ra.body);
    let updated = a.slack.messages_of("T0000IMP");
    assert_eq!(updated.len(), 1);
    assert!(
        updated[0].to_string().contains("found this helpful"),
        "the click updated A's answer: {}",
        updated[0]
    );
}

/// Every item of `table`, as text (attribute names and values; binary values as bytes).
async fn table_text(endpoint: &str, table: &str) -> String {
    let client = dynamodb_client(endpoint);
    let mut text = String::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        for item in page.items() {
            for (k, v) in item {
                text.push_str(&format!("{k}={v:?}\n"));
                if let Ok(b) = v.as_b() {
                    text.push_str(&String::from_utf8_lossy(b.as_ref()));
                    text.push('\n');
                }
            }
        }
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return text;
        }
    }
}

/// Every token the app's Slack issued in `owner`'s workspace (bot, refresh and user tokens).
fn tokens_of(t: &Tenant, owner: &str) -> Vec<String> {
    t.slack.with_grants(|g| g.secrets_of(owner))
}

/// Tokens sealed with KMS (the moto server's): after installs into two workspaces (rotating
/// bot tokens, a user token each), a scan of the whole table holds no token text; a restarted
/// instance still answers both; a sealed text copied onto the other workspace's item opens for
/// neither (KMS and GCM both refuse it: never the other workspace's token); a process without
/// the key refuses to answer rather than use anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server, the previous release and the built binary"]
async fn tokens_are_sealed_at_rest_and_open_only_for_their_own_item() {
    let kms = kms_key_vars().await;
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let a = Tenant::start(A, &endpoint, &table, &kms).await;
    for team in ["T0000KMS1", "T0000KMS2"] {
        let code = a
            .slack
            .with_grants(|g| g.grant(team, "app_mentions:read,chat:write", "search:read", true));
        let page = a.install_code(&a.bot, &code).await;
        assert_eq!(page.status, 200, "{}", page.body);
    }
    let text = table_text(&endpoint, &table).await;
    for team in ["T0000KMS1", "T0000KMS2"] {
        let tokens = tokens_of(&a, team);
        assert!(
            tokens.len() >= 3,
            "bot, refresh and user tokens: {tokens:?}"
        );
        for token in tokens {
            assert!(!text.contains(&token), "a token in the table:\n{text}");
        }
    }
    assert!(text.contains("sealed_key="), "{text}");

    // A restarted instance (another process: no key, nothing cached) answers both.
    let b = a.process(false);
    for (n, team) in ["T0000KMS1", "T0000KMS2"].into_iter().enumerate() {
        let answer = a.send_to(&b, &a.mention(team, n as u32 + 1)).await;
        assert_eq!(answer.outcome(), "answered", "{team}: {}", answer.body);
        assert_eq!(a.answers_in(team), 1);
    }

    // T1's sealed text and key copied onto T2's item: it opens for neither.
    let client = dynamodb_client(&endpoint);
    let item = |pk: String| {
        let client = client.clone();
        let table = table.clone();
        async move {
            client
                .get_item()
                .table_name(&table)
                .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(pk))
                .send()
                .await
                .unwrap()
                .item
                .unwrap()
        }
    };
    let one = item(format!("install#{}#WORKSPACE#T0000KMS1", A.1)).await;
    let mut two = item(format!("install#{}#WORKSPACE#T0000KMS2", A.1)).await;
    for name in ["sealed", "sealed_key"] {
        two.insert(name.to_string(), one[name].clone());
    }
    client
        .put_item()
        .table_name(&table)
        .set_item(Some(two))
        .send()
        .await
        .unwrap();
    let c = a.process(false);
    let answer = a.send_to(&c, &a.mention("T0000KMS2", 3)).await;
    assert_ne!(answer.outcome(), "answered", "{}", answer.body);
    assert_eq!(a.answers_in("T0000KMS1"), 1, "never with T1's token");
    assert_eq!(a.answers_in("T0000KMS2"), 1);

    // Without the key, a sealed installation is not used: the request is refused, not answered
    // with nothing, and the process says what to set.
    let keyless: Vec<(&'static str, String)> = a
        .vars
        .iter()
        .filter(|(k, _)| *k != "SLACK_TOKEN_KEY_ID")
        .cloned()
        .collect();
    let d = spawn_tenant(&keyless, false);
    let answer = a.send_to(&d, &a.mention("T0000KMS1", 4)).await;
    assert_ne!(answer.outcome(), "answered", "{}", answer.body);
    // The process's log reaches the test a moment after its answer (a loaded machine).
    let said = d
        .log_when(std::time::Duration::from_secs(10), |log| {
            log.contains("sealed with KMS and this process has no key")
        })
        .await;
    assert!(
        said.contains("sealed with KMS and this process has no key"),
        "{}",
        said
    );
}

/// The previous release's installation (kept as it is, without the app) and one of this app
/// kept as it is (installed before the key was set) are read as ever; the latter is sealed at
/// its first read with the key (and its refresh's pair too); `seal-installations`, run once the previous release no longer
/// runs, moves the former to the app's own key, sealed; the table then holds no token, and the
/// app still answers both workspaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server, the previous release and the built binary"]
async fn plaintext_installations_are_read_then_sealed_at_their_next_write_or_by_the_tool() {
    let kms = kms_key_vars().await;
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let refresh = ("SLACK_TOKEN_REFRESH_MINUTES", "600".to_string());
    let plain = Tenant::start(A, &endpoint, &table, std::slice::from_ref(&refresh)).await;
    plain.slack.with_grants(|g| g.set_lifetime(600));
    let old = plain.process(true);
    assert_eq!(plain.install_via(&old, "T0000OLD", false).await.status, 200);
    assert_eq!(plain.install("T0000NEW", true).await.status, 200);
    drop(old);
    let text = table_text(&endpoint, &table).await;
    assert!(
        tokens_of(&plain, "T0000NEW")
            .iter()
            .any(|t| text.contains(t)),
        "kept as it is before the key"
    );

    // The key set: both read as ever; the app's own is sealed at that read, and refreshed sealed.
    let mut vars = plain.vars.clone();
    vars.extend(kms.iter().cloned());
    let sealing = spawn_tenant(&vars, false);
    for (n, team) in ["T0000OLD", "T0000NEW"].into_iter().enumerate() {
        let answer = plain
            .send_to(&sealing, &plain.mention(team, n as u32 + 1))
            .await;
        assert_eq!(answer.outcome(), "answered", "{team}: {}", answer.body);
    }
    let own_new = format!("install#{}#WORKSPACE#T0000NEW", A.1);
    assert!(
        eventually_async(std::time::Duration::from_secs(10), || async {
            table_text(&endpoint, &table).await.contains("sealed=")
        })
        .await
    );
    let text = table_text(&endpoint, &table).await;
    for token in tokens_of(&plain, "T0000NEW") {
        assert!(!text.contains(&token), "sealed at its read:\n{text}");
    }
    assert!(text.contains(&own_new));
    assert!(
        text.contains("install#WORKSPACE#T0000OLD"),
        "left where the previous release reads it"
    );

    // seal-installations: a dry run changes nothing; the run moves the previous release's.
    let tool = |args: &[&str]| seal_installations(&vars, args);
    let said = tool(&["--dry-run"]);
    assert!(
        said.contains("would move install#WORKSPACE#T0000OLD"),
        "{said}"
    );
    assert!(said.contains("a dry run, nothing changed"), "{said}");
    let said = tool(&[]);
    assert!(said.contains("moved install#WORKSPACE#T0000OLD"), "{said}");
    let text = table_text(&endpoint, &table).await;
    assert!(!text.contains("install#WORKSPACE#T0000OLD"), "{text}");
    for team in ["T0000OLD", "T0000NEW"] {
        for token in tokens_of(&plain, team) {
            assert!(!text.contains(&token), "no token left:\n{text}");
        }
    }
    let fresh = spawn_tenant(&vars, false);
    for (n, team) in ["T0000OLD", "T0000NEW"].into_iter().enumerate() {
        let answer = plain
            .send_to(&fresh, &plain.mention(team, n as u32 + 5))
            .await;
        assert_eq!(answer.outcome(), "answered", "{team}: {}", answer.body);
    }
}

/// What `slack-once seal-installations ARGS` said, run with `vars` (it succeeded).
fn seal_installations(vars: &[(&'static str, String)], args: &[&str]) -> String {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_slack-once"));
    command.env_clear().arg("seal-installations").args(args);
    for (k, v) in vars {
        command.env(k, v);
    }
    let out = command.output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    said
}

/// Once `seal-installations` has run (the operator saying no previous release runs), an
/// installation the previous release made later (a rollback, a straggler) is refreshed sealed
/// in place: its new pair is never kept as it is. It still answers, read sealed, and another
/// app on the same table that reads that workspace's unscoped item is told "not installed",
/// never an error. A dry run sets nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server, the previous release and the built binary"]
async fn after_seal_installations_a_refresh_of_the_previous_releases_item_is_stored_sealed() {
    let mut vars = kms_key_vars().await;
    vars.push(("SLACK_TOKEN_REFRESH_MINUTES", "600".to_string()));
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let (a, b) = tokio::join!(
        Tenant::start(A, &endpoint, &table, &vars),
        Tenant::start(B, &endpoint, &table, &vars)
    );
    a.slack.same_slack_as(&b.slack);
    a.slack.with_grants(|g| g.set_lifetime(600));
    seal_installations(&a.vars, &["--dry-run", "--app", A.0]);
    assert!(
        !scan_keys(&endpoint, &table)
            .await
            .iter()
            .any(|k| k.starts_with("install-sealed#")),
        "a dry run sets no mark"
    );
    let said = seal_installations(&a.vars, &["--app", A.0]);
    assert!(said.contains("0 moved"), "{said}");

    let old = a.process(true);
    let installed = a.install_via(&old, "T0000LATE", true).await;
    assert_eq!(installed.status, 200, "{}", installed.body);
    let unscoped = "install#WORKSPACE#T0000LATE";
    assert!(
        scan_keys(&endpoint, &table)
            .await
            .iter()
            .any(|k| k == unscoped)
    );
    drop(old);

    for n in 1..=2u32 {
        let answer = a.send(&a.mention("T0000LATE", n)).await;
        assert_eq!(answer.outcome(), "answered", "A {n}: {}", answer.body);
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    }
    assert_eq!(a.answers_in("T0000LATE"), 2);
    if let Err(exchanges) = refreshes_all_taken(&a) {
        panic!("the refreshes, each taken: {exchanges}");
    }
    let text = table_text(&endpoint, &table).await;
    assert!(
        has_attribute(&endpoint, &table, unscoped, "sealed").await,
        "refreshed sealed, in place:\n{text}"
    );
    for token in tokens_of(&a, "T0000LATE") {
        assert!(!text.contains(&token), "no token kept as it is:\n{text}");
    }

    let other = b.send(&b.mention("T0000LATE", 1)).await;
    assert_eq!(other.status, 200, "{}", other.body);
    assert_ne!(other.outcome(), "answered", "{}", other.body);
    assert_eq!(b.answers_in("T0000LATE"), 0);
}

/// After `seal-installations`, a `tokens_revoked` of the installing person's token for an
/// installation the previous release made later, refreshed sealed in place since, keeps the
/// item sealed: the bot token and its refresh token are never written back as they are (before,
/// the revocation rewrote the unscoped item without its seal, every token readable in the
/// table), and the app still answers there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server, the previous release and the built binary"]
async fn a_revocation_of_an_unscoped_item_sealed_in_place_keeps_its_tokens_sealed() {
    let mut vars = kms_key_vars().await;
    vars.push(("SLACK_TOKEN_REFRESH_MINUTES", "600".to_string()));
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let a = Tenant::start(A, &endpoint, &table, &vars).await;
    a.slack.with_grants(|g| g.set_lifetime(600));
    seal_installations(&a.vars, &["--app", A.0]);
    let team = "T0000REVS";
    let old = a.process(true);
    let code = a.slack.with_grants(|g| {
        g.grant(
            team,
            "app_mentions:read,chat:write,commands",
            "search:read",
            true,
        )
    });
    let installed = a.install_code(&old, &code).await;
    assert_eq!(installed.status, 200, "{}", installed.body);
    drop(old);
    let unscoped = format!("install#WORKSPACE#{team}");
    let answer = a.send(&a.mention(team, 1)).await;
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);
    assert!(
        eventually_async(std::time::Duration::from_secs(10), || async {
            has_attribute(&endpoint, &table, &unscoped, "sealed").await
        })
        .await,
        "refreshed sealed, in place"
    );

    let at = now_unix() + 1;
    let revoked = json!({
        "token": "unused", "team_id": team, "api_app_id": A.0, "type": "event_callback",
        "event_id": format!("Ev{}revoked{team}", A.0), "event_time": at,
        "event": {"type": "tokens_revoked", "event_ts": format!("{at}.000100"),
            "tokens": {"oauth": ["U0INSTALLER"]}},
        "authorizations": [{"team_id": team, "user_id": bot_user_for(A.0, team), "is_bot": true}]
    })
    .to_string();
    let answer = a.send(&revoked).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let json = attribute_of(&endpoint, &table, &unscoped, "installation")
        .await
        .unwrap();
    let installation: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(
        installation["user"].is_null(),
        "the user token revoked: {json}"
    );
    let text = table_text(&endpoint, &table).await;
    assert!(
        has_attribute(&endpoint, &table, &unscoped, "sealed").await,
        "still sealed after the revocation:\n{text}"
    );
    for token in tokens_of(&a, team) {
        assert!(!text.contains(&token), "no token kept as it is:\n{text}");
    }
    let answer = a.send_to(&a.process(false), &a.mention(team, 2)).await;
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);
}

/// Another app's `seal-installations` given this app's id by mistake (`--app`), on the table
/// both share: an unscoped item this app refreshed sealed in place, whose tokens that app cannot
/// open, is passed over, never moved (before, it was moved under that app's key with every
/// token empty and removed: this app's installation was gone, its tokens with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server, the previous release and the built binary"]
async fn another_apps_seal_installations_never_moves_an_item_sealed_by_this_app() {
    let mut vars = kms_key_vars().await;
    vars.push(("SLACK_TOKEN_REFRESH_MINUTES", "600".to_string()));
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let (a, b) = tokio::join!(
        Tenant::start(A, &endpoint, &table, &vars),
        Tenant::start(B, &endpoint, &table, &vars)
    );
    a.slack.same_slack_as(&b.slack);
    a.slack.with_grants(|g| g.set_lifetime(600));
    seal_installations(&a.vars, &["--app", A.0]);
    let team = "T0000MOVE";
    let old = a.process(true);
    let installed = a.install_via(&old, team, true).await;
    assert_eq!(installed.status, 200, "{}", installed.body);
    drop(old);
    let unscoped = format!("install#WORKSPACE#{team}");
    let answer = a.send(&a.mention(team, 1)).await;
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);
    assert!(
        eventually_async(std::time::Duration::from_secs(10), || async {
            has_attribute(&endpoint, &table, &unscoped, "sealed").await
        })
        .await,
        "refreshed sealed, in place"
    );

    let said = seal_installations(&b.vars, &["--app", A.0]);
    assert!(said.contains("0 moved"), "{said}");
    let keys = scan_keys(&endpoint, &table).await;
    assert!(keys.contains(&unscoped), "{said}\n{keys:?}");
    assert!(
        !keys.contains(&format!("install#{}#WORKSPACE#{team}", B.1)),
        "{keys:?}"
    );
    let answer = a.send_to(&a.process(false), &a.mention(team, 2)).await;
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);
}

/// `seal-installations` with no `--app`, on a table where the app has no item of its own to learn
/// its id from: the previous release's installation, which names the app, cannot be told the
/// app's, so it is left (its tokens readable in the table), and the tool says to give `--app`
/// (before, it reported it as another app's, passed over, as if nothing of the app's were left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server, the previous release and the built binary"]
async fn seal_installations_not_knowing_the_apps_id_says_to_give_it() {
    let vars = kms_key_vars().await;
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let a = Tenant::start(A, &endpoint, &table, &vars).await;
    let old = a.process(true);
    let installed = a.install_via(&old, "T0000NOID", false).await;
    assert_eq!(installed.status, 200, "{}", installed.body);
    drop(old);
    for args in [&["--dry-run"][..], &[]] {
        let said = seal_installations(&a.vars, args);
        assert!(said.contains("give --app"), "{args:?}: {said}");
        assert!(!said.contains("to the app's own key"), "{args:?}: {said}");
    }
    let said = seal_installations(&a.vars, &["--app", A.0]);
    assert!(said.contains("moved install#WORKSPACE#T0000NOID"), "{said}");
}

/// `seal-installations` run while two instances answer mentions in six workspaces the previous
/// release installed (rotating tokens, each mention refreshing its workspace's): every mention is
/// answered, no refresh exchanges a spent refresh token (an item under a refresh's lease, or
/// changed since the scan, is left and reported, never moved under it), and a second run moves
/// what the first left: the table then holds no token, and a fresh instance answers each
/// workspace.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs DynamoDB Local, the SQS server, the previous release and the built binary"]
async fn seal_installations_beside_refreshing_instances_loses_no_pair_and_leaves_no_token() {
    let mut vars = kms_key_vars().await;
    vars.push(("SLACK_TOKEN_REFRESH_MINUTES", "600".to_string()));
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let a = Tenant::start(A, &endpoint, &table, &vars).await;
    a.slack.with_grants(|g| g.set_lifetime(600));
    let old = a.process(true);
    let teams: Vec<String> = (0..6).map(|i| format!("T0000CC{i:02}")).collect();
    for t in &teams {
        assert_eq!(a.install_via(&old, t, true).await.status, 200);
    }
    drop(old);
    let second = a.process(false);
    let sender = async {
        let mut n = 0;
        for round in 1..=6u32 {
            for (i, t) in teams.iter().enumerate() {
                let to = if i % 2 == 0 { &a.bot } else { &second };
                let answer = a.send_to(to, &a.mention(t, round)).await;
                assert_eq!(answer.outcome(), "answered", "{t} {round}: {}", answer.body);
                n += 1;
            }
        }
        n
    };
    let vars = a.vars.clone();
    let tool = tokio::task::spawn_blocking(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        seal_installations(&vars, &["--app", A.0])
    });
    let (sent, first) = tokio::join!(sender, tool);
    assert_eq!(sent, 36);
    let first = first.unwrap();
    let second = seal_installations(&a.vars, &["--app", A.0]);
    assert!(second.contains(", 0 left"), "{first}\n{second}");
    let text = table_text(&endpoint, &table).await;
    for t in &teams {
        for token in tokens_of(&a, t) {
            assert!(!text.contains(&token), "{t}: {first}\n{second}\n{text}");
        }
        assert_eq!(a.answers_in(t), 6);
    }
    if let Err(exchanges) = refreshes_all_taken(&a) {
        panic!("the refreshes, each taken: {exchanges}");
    }
    let fresh = a.process(false);
    for t in &teams {
        let answer = a.send_to(&fresh, &a.mention(t, 7)).await;
        assert_eq!(answer.outcome(), "answered", "{t}: {}", answer.body);
    }
}

/// The KMS key changed (`SLACK_TOKEN_KEY_ID` names another key): what the first sealed still
/// opens (the wrapped key names its own), and new writes seal with the new one. KMS down (every
/// call refused, through a proxy in front of moto's): a request is refused with a 5xx before
/// anything is claimed or written, nothing is posted, and Slack's retry once KMS is back is
/// answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server, the previous release and the built binary"]
async fn a_changed_key_still_opens_and_kms_down_refuses_before_anything_then_answers_once() {
    let kms = kms_key_vars().await;
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let a = Tenant::start(A, &endpoint, &table, &kms).await;
    assert_eq!(a.install("T0000KEY", false).await.status, 200);

    let second = kms_key_vars().await;
    let mut vars = a.vars.clone();
    vars.retain(|(k, _)| *k != "SLACK_TOKEN_KEY_ID");
    vars.extend(
        second
            .iter()
            .filter(|(k, _)| *k == "SLACK_TOKEN_KEY_ID")
            .cloned(),
    );
    let rekeyed = spawn_tenant(&vars, false);
    let answer = a.send_to(&rekeyed, &a.mention("T0000KEY", 1)).await;
    assert_eq!(answer.outcome(), "answered", "{}", answer.body);

    // KMS down for a process that has opened nothing yet.
    let proxy = LedgerProxy::start(&sqs_endpoint()).await;
    let mut vars = a.vars.clone();
    vars.retain(|(k, _)| *k != "AWS_ENDPOINT_URL_KMS");
    vars.push(("AWS_ENDPOINT_URL_KMS", proxy.url.clone()));
    let cut_off = spawn_tenant(&vars, false);
    proxy.set_down(true);
    let body = a.mention("T0000KEY", 2);
    let refused = a.send_to(&cut_off, &body).await;
    assert!(
        refused.status.is_server_error(),
        "{} {}",
        refused.status,
        refused.body
    );
    assert_eq!(a.answers_in("T0000KEY"), 1, "nothing posted");
    proxy.set_down(false);
    let headers = {
        let mut h = signed_headers(a.signing_secret, now_unix(), body.as_bytes());
        h.push(("x-slack-retry-num".into(), "1".into()));
        h.push(("x-slack-retry-reason".into(), "http_error".into()));
        h
    };
    let retried = a
        .http
        .request(
            "POST",
            &format!("http://{}/slack/events", cut_off.addr),
            &headers,
            body.as_bytes().to_vec(),
        )
        .await;
    assert_eq!(retried.outcome(), "answered", "{}", retried.body);
    assert_eq!(a.answers_in("T0000KEY"), 2);
}

/// The previous release's import, where Slack's `auth.test` names no app: whose token it is
/// cannot be told from a request that names no bot user, so it is never used for one (another
/// app's click is not answered with it, nor is this app's before it is known); this app's
/// mention, naming its bot user, shows it this app's and tags it, and its clicks then use it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the previous release and the built binary"]
async fn an_import_whose_app_slack_does_not_name_is_used_only_once_shown_its_own() {
    let (a, b, table) = two_apps().await;
    for t in [&a, &b] {
        t.slack.auth_test_without_app();
    }
    let token = format!("xoxb-{}-imported-unnamed", A.0);
    a.slack.with_grants(|g| g.accept(&token, "T0000UNN"));
    import_with_the_previous_release(&a, &table, &token);

    let fake = json!({"channel": "C1", "ts": "1700000900.000100", "text": "a message"});
    let rb = b.send_form(&b.click("T0000UNN", &fake)).await;
    assert_eq!(rb.status, 200, "{}", rb.body);
    let ra = a.send_form(&a.click("T0000UNN", &fake)).await;
    assert_eq!(ra.status, 200, "{}", ra.body);
    assert!(
        !a.slack.calls().iter().any(|(m, _)| m == "chat.update"),
        "nobody's click used the token: {:?}",
        a.slack.calls()
    );
    let ra = a.send(&a.mention("T0000UNN", 1)).await;
    assert_eq!(ra.outcome(), "answered", "{}", ra.body);
    let answer = a.slack.messages_of("T0000UNN")[0].clone();
    let ra = a.send_form(&a.click("T0000UNN", &answer)).await;
    assert_eq!(ra.status, 200, "{}", ra.body);
    assert!(
        a.slack.messages_of("T0000UNN")[0]
            .to_string()
            .contains("found this helpful"),
        "the click, after the mention tagged the import"
    );
}

/// Keeps `token` in `table` as the previous release's `import-token` kept it: under the key
/// without the app (`install#WORKSPACE#T…`), naming no app, its bot user `bot_user`.
async fn seed_previous_import(
    endpoint: &str,
    table: &str,
    team: &str,
    token: &str,
    bot_user: &str,
) {
    use aws_sdk_dynamodb::types::AttributeValue;
    let installation = slack_once::workspaces::Installation {
        team_id: Some(team.into()),
        team_name: None,
        enterprise_id: None,
        enterprise_name: None,
        enterprise_url: None,
        is_enterprise_install: false,
        app_id: None,
        bot_id: None,
        bot_user_id: Some(bot_user.into()),
        bot_scopes: Vec::new(),
        bot: slack_once::workspaces::Token {
            token: token.into(),
            refresh_token: None,
            expires_at_ms: None,
        },
        user_id: None,
        user_scopes: Vec::new(),
        user: None,
        installed_at_ms: (now_unix() - 3600) * 1000,
    };
    let s = |v: &str| AttributeValue::S(v.to_string());
    dynamodb_client(endpoint)
        .put_item()
        .table_name(table)
        .item("pk", s(&format!("install#WORKSPACE#{team}")))
        .item("kind", s("installation"))
        .item(
            "installation",
            s(&serde_json::to_string(&installation).unwrap()),
        )
        .item("rotation", s(&installation.bot.rotation()))
        .item(
            "installed_at",
            AttributeValue::N(installation.installed_at_ms.to_string()),
        )
        .send()
        .await
        .unwrap();
}

/// Whether the item `pk` of `table` has the attribute `name`, of any type.
async fn has_attribute(endpoint: &str, table: &str, pk: &str, name: &str) -> bool {
    let item = dynamodb_client(endpoint)
        .get_item()
        .table_name(table)
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(pk.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item;
    item.is_some_and(|item| item.contains_key(name))
}

/// The attribute `name` of the item `pk` in `table`, if there is one.
async fn attribute_of(endpoint: &str, table: &str, pk: &str, name: &str) -> Option<String> {
    let item = dynamodb_client(endpoint)
        .get_item()
        .table_name(table)
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(pk.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item?;
    item.get(name).and_then(|v| v.as_s().ok()).cloned()
}

/// The previous release's import (naming no app), asked for by a click (which names no bot
/// user): Slack failing `auth.test` in passing (`internal_error`, `fatal_error`, `ratelimited`,
/// `request_timeout`, a 5xx) settles nothing: each click is refused with a 5xx (Slack sends it
/// again), the item stays untagged, and the app's own mention is answered with it once Slack
/// answers (before, the first passing failure tagged it no app's for good, and every later
/// event of the workspace got 200 and no answer). A token Slack refuses (`invalid_auth`) is
/// settled: tagged no app's, and acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the previous release and the built binary"]
async fn a_passing_failure_of_auth_test_never_disowns_the_previous_releases_import() {
    use slack_once::testing::SlackFailure;
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let a = Tenant::start(A, &endpoint, &table, &[]).await;
    let token = format!("xoxb-{}-imported-passing", A.0);
    a.slack.with_grants(|g| g.accept(&token, "T0000PASS"));
    let bot_user = bot_user_for(A.0, "T0000PASS");
    seed_previous_import(&endpoint, &table, "T0000PASS", &token, &bot_user).await;
    let item = "install#WORKSPACE#T0000PASS";

    let failures = [
        SlackFailure::Code("internal_error"),
        SlackFailure::Code("fatal_error"),
        SlackFailure::Code("ratelimited"),
        SlackFailure::Code("request_timeout"),
        SlackFailure::Status(500),
        SlackFailure::Status(503),
    ];
    a.slack.fail_next("auth.test", failures.clone());
    let fake = json!({"channel": "C1", "ts": "1700000900.000100", "text": "a message"});
    for failure in &failures {
        let answer = a.send_form(&a.click("T0000PASS", &fake)).await;
        assert!(
            answer.status.is_server_error(),
            "{failure:?}: {} {}",
            answer.status,
            answer.body
        );
        assert_eq!(
            attribute_of(&endpoint, &table, item, "app").await,
            None,
            "{failure:?}: nothing settled"
        );
    }
    let asked = a
        .slack
        .calls()
        .iter()
        .filter(|(m, _)| m == "auth.test")
        .count();
    assert_eq!(asked, failures.len(), "each click asked Slack again");
    let ra = a.send(&a.mention("T0000PASS", 1)).await;
    assert_eq!(ra.outcome(), "answered", "{}", ra.body);
    assert_eq!(a.answers_in("T0000PASS"), 1);
    assert_eq!(
        attribute_of(&endpoint, &table, item, "app")
            .await
            .as_deref(),
        Some(A.0)
    );

    // A token Slack refuses for good: settled, no app's, and the click acknowledged.
    let dead = format!("xoxb-{}-imported-revoked", A.0);
    seed_previous_import(
        &endpoint,
        &table,
        "T0000DEAD",
        &dead,
        &bot_user_for(A.0, "T0000DEAD"),
    )
    .await;
    let answer = a.send_form(&a.click("T0000DEAD", &fake)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        attribute_of(&endpoint, &table, "install#WORKSPACE#T0000DEAD", "app")
            .await
            .as_deref(),
        Some(slack_once::workspaces::NO_APP)
    );
}

/// App B's deployment given app A's client id by mistake, on the table both share: B's
/// `app_uninstalled` and B's `tokens_revoked` (naming the person who installed both apps) in a
/// workspace where A is installed under that key leave A's installation whole, as B's requests
/// never use it (before, the uninstall removed A's installation, and the revocation A's user
/// token: A's events there were then acknowledged and never answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the previous release and the built binary"]
async fn another_apps_uninstall_under_this_apps_key_leaves_its_installation() {
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let a = Tenant::start(A, &endpoint, &table, &[]).await;
    let b = Tenant::start(
        B,
        &endpoint,
        &table,
        &[("SLACK_CLIENT_ID", A.1.to_string())],
    )
    .await;
    a.slack.same_slack_as(&b.slack);
    let team = "T0000MIS";
    let code = a.slack.with_grants(|g| {
        g.grant(
            team,
            "app_mentions:read,chat:write,commands",
            "search:read",
            false,
        )
    });
    let page = a.install_code(&a.bot, &code).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let item = format!("install#{}#WORKSPACE#{team}", A.1);
    let user_token = || async {
        let json = attribute_of(&endpoint, &table, &item, "installation").await?;
        let installation: serde_json::Value = serde_json::from_str(&json).unwrap();
        installation["user"]["token"].as_str().map(str::to_string)
    };
    assert!(user_token().await.is_some(), "installed with a user token");

    let at = now_unix() + 1;
    let revoked = json!({
        "token": "unused", "team_id": team, "api_app_id": B.0, "type": "event_callback",
        "event_id": format!("Ev{}revoked{team}", B.0), "event_time": at,
        "event": {"type": "tokens_revoked", "event_ts": format!("{at}.000100"),
            "tokens": {"oauth": ["U0INSTALLER"], "bot": [bot_user_for(B.0, team)]}},
        "authorizations": [{"team_id": team, "user_id": bot_user_for(B.0, team), "is_bot": true}]
    })
    .to_string();
    for (what, body) in [("uninstall", b.uninstalled(team)), ("revocation", revoked)] {
        let answer = b.send(&body).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert!(
            user_token().await.is_some(),
            "after B's {what}, A's installation, with its user token, is whole"
        );
    }
    let ra = a.send(&a.mention(team, 1)).await;
    assert_eq!(ra.outcome(), "answered", "{}", ra.body);
    assert_eq!(a.answers_in(team), 1);
}

/// A rolling deploy with the token key set: app A installed (rotating tokens, refreshed at
/// every request) through the previous release, which keeps the installation without the app
/// and reads it in place; this release serving beside it on the same table. Every mention, to
/// either release, is answered once, and no refresh exchanges a spent refresh token (Slack
/// revokes the one a refresh used).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local, the SQS server, the previous release and the built binary"]
async fn a_rolling_deploy_with_the_token_key_set_answers_through_both_releases() {
    let mut vars = kms_key_vars().await;
    vars.push(("SLACK_TOKEN_REFRESH_MINUTES", "600".to_string()));
    let endpoint = dynamodb_endpoint();
    let (table, _) = fresh_table(&endpoint).await;
    let a = Tenant::start(A, &endpoint, &table, &vars).await;
    a.slack.with_grants(|g| g.set_lifetime(600));
    let old = a.process(true);
    let installed = a.install_via(&old, "T0000ROLK", true).await;
    assert_eq!(installed.status, 200, "{}", installed.body);
    assert!(
        scan_keys(&endpoint, &table)
            .await
            .iter()
            .any(|k| k == "install#WORKSPACE#T0000ROLK"),
        "the previous release keeps it without the app"
    );
    for n in 1..=6u32 {
        let to = if n % 2 == 0 { &old } else { &a.bot };
        let answer = a.send_to(to, &a.mention("T0000ROLK", n)).await;
        assert_eq!(answer.outcome(), "answered", "A {n}: {}", answer.body);
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    }
    assert_eq!(a.answers_in("T0000ROLK"), 6);
    if let Err(exchanges) = refreshes_all_taken(&a) {
        panic!("the refreshes, each taken: {exchanges}");
    }
}
