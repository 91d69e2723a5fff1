//! The two Slack stand-ins agree: `slack_once::testing::FakeSlack` (what `TestBot` and the
//! crash explorer run on) and `scripts/slack-standin.py` (what the README's manual steps run
//! on) answer the same calls the same way: every method with its arguments as Slack takes them
//! (a JSON body, a form, a GET query), history newest first, replies parent first, our posts
//! with our ids, streams, views and their `external_id`.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use slack_once::testing::{FakeSlack, Identity, Workspace};

use crate::helpers::HttpClient;

pub(crate) struct PythonStandin {
    child: Child,
    pub(crate) base_url: String,
}

impl PythonStandin {
    pub(crate) async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// Started with more options (`--workflow-token-seconds 2`).
    pub(crate) async fn start_with(options: &[&str]) -> Self {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/scripts/slack-standin.py"
            ))
            .arg(port.to_string())
            .args([
                "--team", "T0TEST", "--app-id", "A0TEST", "--bot-id", "B0TEST",
            ])
            .args(["--bot-user", "U0BOT"])
            .args(options)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs the stand-in");
        // Owned from here: dropped (killed and waited for) whatever happens next.
        let standin = Self {
            child,
            base_url: format!("http://127.0.0.1:{port}/api"),
        };
        let http = HttpClient::default();
        for _ in 0..100 {
            let url = format!("http://127.0.0.1:{port}/_standin/state");
            if http.try_request("GET", &url, &[], Vec::new()).await.is_ok() {
                return standin;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the Python stand-in did not start");
    }
}

impl Drop for PythonStandin {
    fn drop(&mut self) {
        // Only the process this test started, by its handle.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One call: the method, how its arguments travel, and the arguments.
#[derive(Clone, Copy)]
enum As {
    Json,
    Form,
    Query,
}

async fn call(base: &str, method: &str, how: As, args: &Value) -> Value {
    let http = HttpClient::default();
    let auth = ("authorization".to_string(), "Bearer xoxb-agree".to_string());
    let pairs = || -> String {
        let mut s = form_urlencoded::Serializer::new(String::new());
        for (k, v) in args.as_object().unwrap() {
            let v = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            s.append_pair(k, &v);
        }
        s.finish()
    };
    let answer = match how {
        As::Json => {
            let headers = [
                auth,
                (
                    "content-type".into(),
                    "application/json; charset=utf-8".into(),
                ),
            ];
            http.request(
                "POST",
                &format!("{base}/{method}"),
                &headers,
                args.to_string(),
            )
            .await
        }
        As::Form => {
            let headers = [
                auth,
                (
                    "content-type".into(),
                    "application/x-www-form-urlencoded".into(),
                ),
            ];
            http.request("POST", &format!("{base}/{method}"), &headers, pairs())
                .await
        }
        As::Query => {
            http.request(
                "GET",
                &format!("{base}/{method}?{}", pairs()),
                &[auth],
                Vec::new(),
            )
            .await
        }
    };
    answer.json()
}

/// What of an answer a bot depends on, with `ts` and ids numbered in order of appearance.
struct Shape {
    seen: Vec<String>,
}

impl Shape {
    fn id(&mut self, v: &str) -> String {
        let i = match self.seen.iter().position(|s| s == v) {
            Some(i) => i,
            None => {
                self.seen.push(v.to_string());
                self.seen.len() - 1
            }
        };
        format!("#{i}")
    }

    fn of(&mut self, answer: &Value) -> Value {
        let mut shape = json!({"ok": answer["ok"], "error": answer["error"]});
        if let Some(ts) = answer["ts"].as_str() {
            shape["ts"] = self.id(ts).into();
        }
        match &answer["channel"] {
            Value::String(c) => shape["channel"] = c.clone().into(),
            Value::Object(o) => shape["channel"] = o.get("id").cloned().unwrap_or_default(),
            _ => {}
        }
        if let Some(view) = answer["view"].as_object() {
            shape["view"] = json!({
                "id": view.get("id").and_then(Value::as_str).map(|v| self.id(v)),
                "external_id": view.get("external_id"),
                "title": view.get("title"),
            });
        }
        if let Some(messages) = answer["messages"].as_array() {
            shape["messages"] = messages
                .iter()
                .map(|m| {
                    json!({
                        "ts": m["ts"].as_str().map(|t| self.id(t)),
                        "text": m["text"],
                        "app_id": m["app_id"],
                        "bot_id": m["bot_id"],
                        "user": m["user"],
                        "metadata_type": m["metadata"]["event_type"],
                    })
                })
                .collect();
            shape["has_more"] = answer["has_more"].clone();
        }
        shape
    }
}

/// The script: each call's arguments may name an earlier answer's `ts` as `"$N"`.
async fn run(base: &str) -> Vec<Value> {
    let trigger = || Workspace::trigger_id();
    let metadata = json!({"event_type": "order", "event_payload": {"id": 7}});
    let script: Vec<(&str, As, Value)> = vec![
        (
            "chat.postMessage",
            As::Json,
            json!({"channel": "C1", "text": "hello", "metadata": metadata}),
        ),
        (
            "chat.postMessage",
            As::Form,
            json!({"channel": "C1", "thread_ts": "$0", "text": "in the thread"}),
        ),
        (
            "conversations.history",
            As::Query,
            json!({"channel": "C1", "include_all_metadata": "true"}),
        ),
        (
            "conversations.history",
            As::Form,
            json!({"channel": "C1", "include_all_metadata": "true"}),
        ),
        ("conversations.history", As::Form, json!({"channel": "C1"})),
        (
            "conversations.replies",
            As::Form,
            json!({"channel": "C1", "ts": "$0"}),
        ),
        (
            "conversations.replies",
            As::Query,
            json!({"channel": "C1", "ts": "$0"}),
        ),
        (
            "chat.update",
            As::Json,
            json!({"channel": "C1", "ts": "$0", "text": "edited"}),
        ),
        (
            "chat.update",
            As::Json,
            json!({"channel": "C1", "ts": "1.000001", "text": "x"}),
        ),
        (
            "reactions.add",
            As::Form,
            json!({"channel": "C1", "timestamp": "$0", "name": "eyes"}),
        ),
        (
            "reactions.add",
            As::Form,
            json!({"channel": "C1", "timestamp": "$0", "name": "eyes"}),
        ),
        (
            "chat.postMessage",
            As::Json,
            json!({"channel": "U7", "text": "to a user"}),
        ),
        ("conversations.open", As::Form, json!({"users": "U7"})),
        ("chat.postMessage", As::Json, json!({"channel": "C1"})),
        (
            "views.open",
            As::Json,
            json!({"trigger_id": trigger(), "view": {"type": "modal", "title": {"type": "plain_text", "text": "One"}, "external_id": "x1"}}),
        ),
        (
            "views.open",
            As::Json,
            json!({"trigger_id": trigger(), "view": {"type": "modal", "title": {"type": "plain_text", "text": "Two"}, "external_id": "x1"}}),
        ),
        (
            "views.update",
            As::Json,
            json!({"external_id": "x1", "view": {"type": "modal", "title": {"type": "plain_text", "text": "One again"}}}),
        ),
        (
            "views.update",
            As::Json,
            json!({"external_id": "nope", "view": {"type": "modal"}}),
        ),
        (
            "chat.startStream",
            As::Json,
            json!({"channel": "D1", "thread_ts": "$0", "markdown_text": "Str"}),
        ),
        (
            "chat.appendStream",
            As::Json,
            json!({"channel": "D1", "ts": "$last", "markdown_text": "eam"}),
        ),
        (
            "chat.stopStream",
            As::Json,
            json!({"channel": "D1", "ts": "$last"}),
        ),
        (
            "chat.appendStream",
            As::Json,
            json!({"channel": "D1", "ts": "$last", "markdown_text": "!"}),
        ),
        (
            "chat.startStream",
            As::Json,
            json!({"channel": "C1", "thread_ts": "$0"}),
        ),
        (
            "conversations.replies",
            As::Form,
            json!({"channel": "D1", "ts": "$0"}),
        ),
    ];
    let mut answers: Vec<Value> = Vec::new();
    let mut stream_ts = String::new();
    for (method, how, mut args) in script {
        for (_, v) in args.as_object_mut().unwrap().iter_mut() {
            match v.as_str() {
                Some("$0") => *v = answers[0]["ts"].clone(),
                Some("$last") => *v = stream_ts.clone().into(),
                _ => {}
            }
        }
        let answer = call(base, method, how, &args).await;
        if method == "chat.startStream" && answer["ok"] == true {
            stream_ts = answer["ts"].as_str().unwrap_or_default().to_string();
        }
        answers.push(answer);
    }
    answers
}

#[tokio::test]
#[ignore = "needs the Python stand-in"]
async fn fake_slack_and_the_python_stand_in_answer_every_call_alike() {
    let fake = FakeSlack::start_for(Identity {
        team: "T0TEST".into(),
        app_id: "A0TEST".into(),
        bot_id: "B0TEST".into(),
        bot_user: "U0BOT".into(),
    })
    .await;
    let python = PythonStandin::start().await;
    let (ours, theirs) = (run(fake.base_url()).await, run(&python.base_url).await);
    let (mut a, mut b) = (Shape { seen: Vec::new() }, Shape { seen: Vec::new() });
    for (i, (x, y)) in ours.iter().zip(&theirs).enumerate() {
        let (x, y) = (a.of(x), b.of(y));
        assert_eq!(
            x, y,
            "call {i}: FakeSlack answered {x}, the Python stand-in {y}"
        );
    }
    assert_eq!(ours.len(), theirs.len());
    // Reads by POST (as Ctx::read sends them) are answered, not refused.
    assert_eq!(ours[3]["messages"].as_array().map(Vec::len), Some(1));
}

impl PythonStandin {
    /// Its origin (`http://127.0.0.1:PORT`).
    pub(crate) fn origin(&self) -> String {
        self.base_url.trim_end_matches("/api").to_string()
    }

    /// A script endpoint: `POST /_standin/<path>` with a JSON body.
    pub(crate) async fn post(&self, path: &str, body: Value) -> Value {
        let http = HttpClient::default();
        let headers = [("content-type".to_string(), "application/json".to_string())];
        http.request(
            "POST",
            &format!("{}/_standin/{path}", self.origin()),
            &headers,
            body.to_string(),
        )
        .await
        .json()
    }

    /// `GET /_standin/state`.
    pub(crate) async fn state(&self) -> Value {
        HttpClient::default()
            .request(
                "GET",
                &format!("{}/_standin/state", self.origin()),
                &[],
                Vec::new(),
            )
            .await
            .json()
    }
}

/// A call with `token` (JSON, or a form when `form`).
async fn call_with(base: &str, method: &str, token: &str, form: bool, args: &Value) -> Value {
    let http = HttpClient::default();
    let auth = ("authorization".to_string(), format!("Bearer {token}"));
    let (content_type, body) = if form {
        let mut s = form_urlencoded::Serializer::new(String::new());
        for (k, v) in args.as_object().unwrap() {
            let v = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            s.append_pair(k, &v);
        }
        ("application/x-www-form-urlencoded", s.finish())
    } else {
        ("application/json; charset=utf-8", args.to_string())
    };
    http.request(
        "POST",
        &format!("{base}/{method}"),
        &[auth, ("content-type".into(), content_type.into())],
        body,
    )
    .await
    .json()
}

/// Step executions, as both stand-ins model them (scripts/slack-standin.py's
/// `/_standin/execution…`, `FakeSlack::start_execution`…): running until completed, failed or
/// ended; the execution's tokens act as the bot while it runs and are revoked at its end; a
/// completion checked as Slack does (`access_denied` for a token not the execution's,
/// `execution_not_in_running_state` after the end, `function_execution_not_found`,
/// `invalid_arguments`).
#[tokio::test]
#[ignore = "needs the Python stand-in"]
async fn both_stand_ins_model_step_executions_alike() {
    let fake = FakeSlack::start_for(Identity {
        team: "T0TEST".into(),
        app_id: "A0TEST".into(),
        bot_id: "B0TEST".into(),
        bot_user: "U0BOT".into(),
    })
    .await;
    let python = PythonStandin::start().await;

    /// Starts an execution in a stand-in: (id, token).
    enum Standin<'a> {
        Fake(&'a FakeSlack),
        Python(&'a PythonStandin),
    }
    impl Standin<'_> {
        async fn start(&self) -> (String, String) {
            match self {
                Standin::Fake(f) => {
                    let e = f.start_execution("approve", json!({"who": "U1"}));
                    (e.function_execution_id, e.bot_access_token)
                }
                Standin::Python(p) => {
                    let e = p
                        .post(
                            "execution",
                            json!({"callback_id": "approve", "inputs": {"who": "U1"}}),
                        )
                        .await;
                    (
                        e["function_execution_id"].as_str().unwrap().to_string(),
                        e["bot_access_token"].as_str().unwrap().to_string(),
                    )
                }
            }
        }
        async fn token(&self, id: &str) -> String {
            match self {
                Standin::Fake(f) => f.execution_token(id).unwrap(),
                Standin::Python(p) => p
                    .post("execution/token", json!({"function_execution_id": id}))
                    .await["bot_access_token"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            }
        }
        async fn end(&self, id: &str) {
            match self {
                Standin::Fake(f) => assert!(f.end_execution(id)),
                Standin::Python(p) => {
                    p.post("execution/end", json!({"function_execution_id": id}))
                        .await;
                }
            }
        }
        async fn executions(&self) -> Vec<Value> {
            match self {
                Standin::Fake(f) => f.executions(),
                Standin::Python(p) => p.state().await["executions"].as_array().unwrap().clone(),
            }
        }
        fn base(&self) -> String {
            match self {
                Standin::Fake(f) => f.base_url().to_string(),
                Standin::Python(p) => p.base_url.clone(),
            }
        }
    }
    async fn script(s: Standin<'_>) -> (Vec<Value>, Vec<Value>) {
        let base = s.base();
        let mut answers = Vec::new();
        let mut kept = |a: Value| {
            answers.push(json!({"ok": a["ok"], "error": a["error"], "bot_id": a["message"]["bot_id"], "app_id": a["message"]["app_id"]}));
        };
        let (one, t1) = s.start().await;
        let post = json!({"channel": "DU1", "text": "Approve?"});
        kept(call_with(&base, "chat.postMessage", &t1, false, &post).await);
        let done = |id: &str| json!({"function_execution_id": id, "outputs": {"ok": true}});
        kept(
            call_with(
                &base,
                "functions.completeSuccess",
                "xoxb-installation",
                false,
                &done(&one),
            )
            .await,
        );
        kept(
            call_with(
                &base,
                "functions.completeSuccess",
                &t1,
                false,
                &json!({"function_execution_id": one, "outputs": [1]}),
            )
            .await,
        );
        let t1b = s.token(&one).await;
        kept(call_with(&base, "functions.completeSuccess", &t1b, false, &done(&one)).await);
        kept(call_with(&base, "functions.completeSuccess", &t1, false, &done(&one)).await);
        kept(call_with(&base, "chat.postMessage", &t1, false, &post).await);
        let late = s.token(&one).await;
        kept(call_with(&base, "chat.postMessage", &late, false, &post).await);
        let (two, t2) = s.start().await;
        kept(
            call_with(
                &base,
                "functions.completeError",
                &t1,
                true,
                &json!({"function_execution_id": two, "error": "no"}),
            )
            .await,
        );
        kept(
            call_with(
                &base,
                "functions.completeError",
                &t2,
                true,
                &json!({"function_execution_id": two, "error": "no"}),
            )
            .await,
        );
        let (three, t3) = s.start().await;
        s.end(&three).await;
        kept(call_with(&base, "chat.postMessage", &t3, false, &post).await);
        kept(
            call_with(
                &base,
                "functions.completeSuccess",
                &t3,
                true,
                &json!({"function_execution_id": three, "outputs": "{\"ok\": true}"}),
            )
            .await,
        );
        kept(
            call_with(
                &base,
                "functions.completeSuccess",
                &t3,
                false,
                &done("Fx0NOTHERE0"),
            )
            .await,
        );
        kept(call_with(&base, "chat.postMessage", "xwfp-never-issued", false, &post).await);
        let states = s
            .executions()
            .await
            .into_iter()
            .map(|e| {
                json!({"state": e["state"], "outputs": e["outputs"], "error": e["error"],
                            "completions": e["completions"], "refused": e["refused"],
                            "refusals": e["refusals"]})
            })
            .collect();
        (answers, states)
    }
    let ours = script(Standin::Fake(&fake)).await;
    let theirs = script(Standin::Python(&python)).await;
    assert_eq!(
        ours.0, theirs.0,
        "the answers: FakeSlack, then the Python stand-in"
    );
    assert_eq!(
        ours.1, theirs.1,
        "the executions: FakeSlack, then the Python stand-in"
    );
    // What the script is about, in case both are wrong alike.
    let codes: Vec<&Value> = ours.0.iter().map(|a| &a["error"]).collect();
    assert_eq!(
        codes,
        vec![
            &Value::Null,
            &json!("access_denied"),
            &json!("invalid_arguments"),
            &Value::Null,
            &json!("execution_not_in_running_state"),
            &json!("token_revoked"),
            &json!("token_revoked"),
            &json!("access_denied"),
            &Value::Null,
            &json!("token_revoked"),
            &json!("execution_not_in_running_state"),
            &json!("function_execution_not_found"),
            &json!("invalid_auth"),
        ]
    );
    assert_eq!(
        ours.0[0]["bot_id"], "B0TEST",
        "a step's post is the app's bot's"
    );
}

/// The agent view's calls, alike in both stand-ins: a stream's chunks (a plan, tasks changed in
/// place by id, a status Slack refuses), sessions' statuses and titles (a title only where a
/// call creates the session, `session_not_found`), the Messages tab's prompts without a thread,
/// a person's stop (appends `stopped_by_user`, stops `message_not_in_streaming_state`, the
/// message still updated), and what each leaves.
#[tokio::test]
#[ignore = "needs the Python stand-in"]
async fn both_stand_ins_model_agents_alike() {
    let fake = FakeSlack::start_for(Identity {
        team: "T0TEST".into(),
        app_id: "A0TEST".into(),
        bot_id: "B0TEST".into(),
        bot_user: "U0BOT".into(),
    })
    .await;
    let python = PythonStandin::start().await;
    let thread = "1700000000.000100";
    let script = |stream: &str| -> Vec<(&'static str, As, Value)> {
        let chunk = |id: &str, status: &str| json!({"type": "task_update", "id": id, "title": "Read", "status": status});
        vec![
            (
                "chat.appendStream",
                As::Json,
                json!({"channel": "D1", "ts": stream,
                       "chunks": [chunk("t1", "complete").as_object().cloned().map(|mut o| {
                           o.insert("output".into(), "3 results".into());
                           Value::Object(o)
                       }).unwrap()]}),
            ),
            (
                "chat.appendStream",
                As::Form,
                json!({"channel": "D1", "ts": stream,
                       "chunks": json!([chunk("t2", "completed")]).to_string()}),
            ),
            (
                "agents.sessions.setStatus",
                As::Json,
                json!({"channel_id": "D1", "thread_ts": thread, "status": "processing", "title": "T"}),
            ),
            (
                "agents.sessions.setStatus",
                As::Form,
                json!({"channel_id": "D1", "thread_ts": thread, "status": "thinking"}),
            ),
            (
                "agents.sessions.rename",
                As::Json,
                json!({"channel_id": "D1", "thread_ts": thread, "title": "New"}),
            ),
            (
                "agents.sessions.rename",
                As::Json,
                json!({"channel_id": "D1", "thread_ts": "1700000000.000999", "title": "X"}),
            ),
            (
                "assistant.threads.setSuggestedPrompts",
                As::Json,
                json!({"channel_id": "D1", "prompts": [{"title": "Hi", "message": "Hello"}]}),
            ),
        ]
    };
    let after_stop = |stream: &str| -> Vec<(&'static str, As, Value)> {
        vec![
            (
                "chat.appendStream",
                As::Json,
                json!({"channel": "D1", "ts": stream, "markdown_text": " more"}),
            ),
            (
                "chat.stopStream",
                As::Json,
                json!({"channel": "D1", "ts": stream}),
            ),
            (
                "chat.update",
                As::Json,
                json!({"channel": "D1", "ts": stream, "text": "final"}),
            ),
        ]
    };
    let shape = |a: &Value| {
        json!({"ok": a["ok"], "error": a["error"], "status": a["status"], "title": a["title"],
               "type": a["type"], "stopped": a["streaming_message_ts"].as_array().map(Vec::len)})
    };
    let start = json!({"channel": "D1", "thread_ts": thread, "task_display_mode": "plan",
        "chunks": [{"type": "plan_update", "title": "Plan"},
                   {"type": "task_update", "id": "t1", "title": "Read", "status": "in_progress"}]});
    let mut seen: Vec<Vec<Value>> = Vec::new();
    for python_side in [false, true] {
        let base = if python_side {
            python.base_url.clone()
        } else {
            fake.base_url().to_string()
        };
        let mut answers = Vec::new();
        let started = call(&base, "chat.startStream", As::Json, &start).await;
        let stream = started["ts"].as_str().unwrap_or_default().to_string();
        answers.push(shape(&started));
        for (method, how, args) in script(&stream) {
            answers.push(shape(&call(&base, method, how, &args).await));
        }
        let stop = if python_side {
            python
                .post(
                    "stop",
                    json!({"channel": "D1", "thread_ts": thread, "user": "U1"}),
                )
                .await["event"]
                .clone()
        } else {
            fake.with_workspace(|w| w.stop_session("D1", thread, "U1"))
        };
        answers.push(shape(&stop));
        for (method, how, args) in after_stop(&stream) {
            answers.push(shape(&call(&base, method, how, &args).await));
        }
        // What each leaves: the session, and the message's plan as it was before the update.
        let (session, updates) = if python_side {
            let state = python.state().await;
            let session = state["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["thread_ts"] == thread)
                .cloned()
                .unwrap();
            let updates = state["task_updates"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.rsplit(' ').next().unwrap().to_string(), v.clone()))
                .collect::<std::collections::BTreeMap<_, _>>();
            (session, updates)
        } else {
            fake.with_workspace(|w| {
                let updates = w
                    .task_updates()
                    .iter()
                    .map(|((_, _, id), v)| (id.clone(), json!(v)))
                    .collect::<std::collections::BTreeMap<_, _>>();
                (w.session("D1", thread).unwrap(), updates)
            })
        };
        answers.push(
            json!({"status": session["status"], "title": session["title"],
            "statuses": session["statuses"], "titles": session["titles"],
            "stopped_after": session["stopped_after"], "task_updates": updates}),
        );
        seen.push(answers);
    }
    for (i, (x, y)) in seen[0].iter().zip(&seen[1]).enumerate() {
        assert_eq!(x, y, "step {i}: FakeSlack {x}, the Python stand-in {y}");
    }
    assert_eq!(seen[0].len(), seen[1].len());
    // And what both show is Slack's: the refusals where Slack refuses.
    let errors: Vec<&Value> = seen[0].iter().map(|a| &a["error"]).collect();
    assert_eq!(errors[2], "invalid_chunks");
    assert_eq!(errors[4], "invalid_arguments");
    assert_eq!(errors[6], "session_not_found");
    assert_eq!(errors[9], "stopped_by_user");
    assert_eq!(errors[10], "message_not_in_streaming_state");
    assert_eq!(seen[0].last().unwrap()["titles"], json!(["New"]));
}
