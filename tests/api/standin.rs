//! `slack-once standin` (the built binary's stand-in for Slack, what the guide's walk-throughs
//! and the process tests run on) as a script drives it: the faults `/_standin/script` puts on
//! the next calls, workflow executions and their tokens, OAuth grants and revocations, the
//! token rule (`--token`), Slack's rate limit of reads (`--history-per-minute`), and a call
//! log without tokens or secrets.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{HttpClient, StandinProcess};

/// A Web API call with `token` (a JSON body), or with none.
async fn call(standin: &StandinProcess, method: &str, token: Option<&str>, args: Value) -> Value {
    let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
    if let Some(token) = token {
        headers.push(("authorization".into(), format!("Bearer {token}")));
    }
    let url = format!("{}/{method}", standin.base_url);
    HttpClient::default()
        .request("POST", &url, &headers, args.to_string())
        .await
        .json()
}

#[tokio::test]
#[ignore = "needs the built binary"]
async fn scripted_behaviours_meet_the_next_calls_one_each() {
    let standin = StandinProcess::start().await;
    let scripted = standin
        .post(
            "script",
            json!({"method": "chat.postMessage",
                   "behaviours": ["fail:ratelimited", "post_then_hang", "hang", "ok"]}),
        )
        .await;
    assert_eq!(scripted["ok"], true, "{scripted}");
    let post = |text: &'static str| {
        let (base, text) = (standin.base_url.clone(), text.to_string());
        async move {
            let headers = [
                ("content-type".to_string(), "application/json".to_string()),
                ("authorization".to_string(), "Bearer xoxb-local".to_string()),
            ];
            let body = json!({"channel": "C1", "text": text}).to_string();
            let (http, url) = (HttpClient::default(), format!("{base}/chat.postMessage"));
            let request = http.try_request("POST", &url, &headers, body);
            tokio::time::timeout(Duration::from_millis(700), request)
                .await
                .ok()
                .map(|answer| answer.unwrap().json())
        }
    };
    let failed = post("one").await.expect("answered");
    assert_eq!(failed["error"], "ratelimited", "{failed}");
    assert_eq!(post("two").await, None, "post_then_hang never answers");
    assert_eq!(post("three").await, None, "hang never answers");
    let answered = post("four").await.expect("answered");
    assert_eq!(answered["ok"], true, "{answered}");
    let texts: Vec<Value> = standin.state().await["messages"]["C1"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].clone())
        .collect();
    assert_eq!(
        texts,
        [json!("two"), json!("four")],
        "made: post_then_hang and ok"
    );
    let refused = standin
        .post(
            "script",
            json!({"method": "chat.update", "behaviours": ["explode"]}),
        )
        .await;
    assert_eq!(refused["error"], "invalid_arguments", "{refused}");
}

#[tokio::test]
#[ignore = "needs the built binary"]
async fn scripted_statuses_rate_limits_slow_answers_and_posts_refused_after_posting() {
    let standin = StandinProcess::start().await;
    let scripted = standin
        .post(
            "script",
            json!({"method": "chat.postMessage",
                   "behaviours": ["status:503", "ratelimited:7", "post_then_fail:internal_error",
                                  "slow:600"]}),
        )
        .await;
    assert_eq!(scripted["ok"], true, "{scripted}");
    let headers = [
        ("content-type".to_string(), "application/json".to_string()),
        ("authorization".to_string(), "Bearer xoxb-local".to_string()),
    ];
    let url = format!("{}/chat.postMessage", standin.base_url);
    let http = HttpClient::default();
    let post = |text: &str| {
        let body = json!({"channel": "C1", "text": text}).to_string();
        http.request("POST", &url, &headers, body)
    };
    let unavailable = post("one").await;
    assert_eq!(unavailable.status.as_u16(), 503, "{}", unavailable.body);
    let limited = post("two").await;
    assert_eq!(limited.status.as_u16(), 429, "{}", limited.body);
    assert_eq!(limited.headers["retry-after"], "7");
    let refused = post("three").await;
    assert_eq!(
        refused.json()["error"],
        "internal_error",
        "{}",
        refused.body
    );
    let started = std::time::Instant::now();
    let slow = post("four").await;
    assert_eq!(slow.json()["ok"], true, "{}", slow.body);
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "answered late"
    );
    let texts: Vec<Value> = standin.state().await["messages"]["C1"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].clone())
        .collect();
    assert_eq!(
        texts,
        [json!("three"), json!("four")],
        "made: post_then_fail and slow; not the 503 or the 429"
    );
    for unknown in ["status:abc", "status:99", "slow:", "ratelimited:-1"] {
        let refused = standin
            .post(
                "script",
                json!({"method": "chat.update", "behaviours": [unknown]}),
            )
            .await;
        assert_eq!(
            refused["error"], "invalid_arguments",
            "{unknown}: {refused}"
        );
    }
}

#[tokio::test]
#[ignore = "needs the built binary"]
async fn an_executions_tokens_act_while_it_runs_and_expire() {
    let standin = StandinProcess::start_with(&["--workflow-token-seconds", "1"]).await;
    let started = standin
        .post(
            "execution",
            json!({"callback_id": "approve", "inputs": {"a": 1}}),
        )
        .await;
    let id = started["function_execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    let first = started["bot_access_token"].as_str().unwrap().to_string();
    assert!(first.starts_with("xwfp-"), "{started}");
    let who = call(&standin, "auth.test", Some(&first), json!({})).await;
    assert_eq!(
        (who["ok"].clone(), who["user_id"].clone()),
        (json!(true), json!("U0BOT")),
        "{who}"
    );
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let expired = call(&standin, "auth.test", Some(&first), json!({})).await;
    assert_eq!(expired["error"], "token_expired", "{expired}");
    let second = standin
        .post("execution/token", json!({"function_execution_id": id}))
        .await["bot_access_token"]
        .as_str()
        .unwrap()
        .to_string();
    let ended = standin
        .post("execution/end", json!({"function_execution_id": id}))
        .await;
    assert_eq!(ended["ok"], true, "{ended}");
    let revoked = call(
        &standin,
        "chat.postMessage",
        Some(&second),
        json!({"channel": "C1", "text": "x"}),
    )
    .await;
    assert_eq!(revoked["error"], "token_revoked", "{revoked}");
    let completed = call(
        &standin,
        "functions.completeSuccess",
        Some(&second),
        json!({"function_execution_id": id, "outputs": {}}),
    )
    .await;
    assert_eq!(
        completed["error"], "execution_not_in_running_state",
        "{completed}"
    );
    let unknown = standin
        .post(
            "execution/token",
            json!({"function_execution_id": "Fx0NONE"}),
        )
        .await;
    assert_eq!(
        unknown["error"], "function_execution_not_found",
        "{unknown}"
    );
    let state = standin.state().await;
    assert_eq!(state["executions"][0]["state"], "ended", "{state}");
    assert!(
        !state["calls"].to_string().contains("xwfp-"),
        "no token in the call log: {state}"
    );
}

#[tokio::test]
#[ignore = "needs the built binary"]
async fn an_oauth_grant_installs_the_app_until_a_person_removes_it() {
    let standin =
        StandinProcess::start_with(&["--client-id", "1234.5678", "--client-secret", "s3cret"])
            .await;
    let code = standin
        .post("grant", json!({"team": "T0002", "scope": "chat:write"}))
        .await["code"]
        .as_str()
        .unwrap()
        .to_string();
    let form = form_urlencoded::Serializer::new(String::new())
        .append_pair("client_id", "1234.5678")
        .append_pair("client_secret", "s3cret")
        .append_pair("code", &code)
        .finish();
    let headers = [(
        "content-type".to_string(),
        "application/x-www-form-urlencoded".to_string(),
    )];
    let url = format!("{}/oauth.v2.access", standin.base_url);
    let granted = HttpClient::default()
        .request("POST", &url, &headers, form.clone())
        .await
        .json();
    let token = granted["access_token"].as_str().unwrap().to_string();
    let again = HttpClient::default()
        .request("POST", &url, &headers, form)
        .await
        .json();
    assert_eq!(again["ok"], false, "a code works once: {again}");
    let who = call(&standin, "auth.test", Some(&token), json!({})).await;
    assert_eq!(who["team_id"], "T0002", "{who}");
    let revoked = standin.post("revoke", json!({"team": "T0002"})).await;
    assert_eq!(revoked["ok"], true, "{revoked}");
    let refused = call(&standin, "auth.test", Some(&token), json!({})).await;
    assert_eq!(refused["error"], "token_revoked", "{refused}");
    let state = standin.state().await;
    assert_eq!(state["oauth_exchanges"][0]["team"], "T0002", "{state}");
    let shown = state["calls"].to_string();
    assert!(
        !shown.contains("s3cret") && !shown.contains(&code),
        "{shown}"
    );
}

#[tokio::test]
#[ignore = "needs the built binary"]
async fn only_the_bot_token_given_is_taken() {
    let standin = StandinProcess::start_with(&["--token", "xoxb-the-one"]).await;
    let ok = call(&standin, "auth.test", Some("xoxb-the-one"), json!({})).await;
    assert_eq!(ok["ok"], true, "{ok}");
    let rotated = call(&standin, "auth.test", Some("xoxb-an-old-one"), json!({})).await;
    assert_eq!(rotated["error"], "invalid_auth", "{rotated}");
    let none = call(&standin, "auth.test", None, json!({})).await;
    assert_eq!(none["error"], "not_authed", "{none}");
}

#[tokio::test]
#[ignore = "needs the built binary"]
async fn reads_past_the_minutes_allowance_answer_429_with_retry_after() {
    let standin = StandinProcess::start_with(&["--history-per-minute", "1"]).await;
    let headers = [("authorization".to_string(), "Bearer xoxb-local".to_string())];
    let url = format!("{}/conversations.history?channel=C1", standin.base_url);
    let http = HttpClient::default();
    let first = http.request("GET", &url, &headers, Vec::new()).await;
    assert_eq!(first.status, http::StatusCode::OK, "{}", first.body);
    let second = http.request("GET", &url, &headers, Vec::new()).await;
    assert_eq!(
        second.status,
        http::StatusCode::TOO_MANY_REQUESTS,
        "{}",
        second.body
    );
    assert!(
        second.headers.contains_key("retry-after"),
        "{:?}",
        second.headers
    );
    let replies = format!(
        "{}/conversations.replies?channel=C1&ts=1.000001",
        standin.base_url
    );
    let other = http.request("GET", &replies, &headers, Vec::new()).await;
    assert_eq!(
        other.status,
        http::StatusCode::OK,
        ".replies counts apart: {}",
        other.body
    );
}
