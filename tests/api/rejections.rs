//! Bad input gets a clear 4xx and changes nothing: nothing is claimed, nothing is posted.

use std::sync::Arc;

use http::StatusCode;
use slack_once::ledger::{Ledger, MemoryLedger};

use crate::helpers::*;

struct Rejection {
    name: &'static str,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    status: StatusCode,
}

fn rejections(event_id: &str) -> Vec<Rejection> {
    let body = app_mention(event_id, "forged?");
    let now = now_unix();
    let valid = |ts: u64, body: &[u8]| signed_headers(SECRET, ts, body);
    let replace = |mut h: Vec<(String, String)>, name: &str, value: &str| {
        h.retain(|(k, _)| k != name);
        h.push((name.to_string(), value.to_string()));
        h
    };
    let remove = |mut h: Vec<(String, String)>, name: &str| {
        h.retain(|(k, _)| k != name);
        h
    };
    let bytes = body.as_bytes().to_vec();
    // The same event id twice, the second one another event's: refused, not "last one wins".
    let duplicate_keys = body.replacen(
        &format!("\"event_id\":\"{event_id}\""),
        &format!("\"event_id\":\"{event_id}\",\"event_id\":\"EvOther\""),
        1,
    );
    assert_ne!(duplicate_keys, body);
    let reserialised = {
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        serde_json::to_vec_pretty(&v).unwrap()
    };
    let mut out = vec![
        Rejection {
            name: "signed with another secret",
            headers: signed_headers("not-the-secret", now, &bytes),
            body: bytes.clone(),
            status: StatusCode::UNAUTHORIZED,
        },
        Rejection {
            name: "stale timestamp (6 minutes old)",
            headers: valid(now - 360, &bytes),
            body: bytes.clone(),
            status: StatusCode::UNAUTHORIZED,
        },
        Rejection {
            name: "future-dated timestamp (6 minutes ahead)",
            headers: valid(now + 360, &bytes),
            body: bytes.clone(),
            status: StatusCode::UNAUTHORIZED,
        },
        Rejection {
            name: "missing signature",
            headers: remove(valid(now, &bytes), "x-slack-signature"),
            body: bytes.clone(),
            status: StatusCode::UNAUTHORIZED,
        },
        Rejection {
            name: "missing timestamp",
            headers: remove(valid(now, &bytes), "x-slack-request-timestamp"),
            body: bytes.clone(),
            status: StatusCode::UNAUTHORIZED,
        },
        Rejection {
            name: "non-numeric timestamp",
            headers: replace(valid(now, &bytes), "x-slack-request-timestamp", "yesterday"),
            body: bytes.clone(),
            status: StatusCode::UNAUTHORIZED,
        },
        Rejection {
            name: "v1= signature",
            headers: {
                let h = valid(now, &bytes);
                let sig = h
                    .iter()
                    .find(|(k, _)| k == "x-slack-signature")
                    .unwrap()
                    .1
                    .replacen("v0=", "v1=", 1);
                replace(h, "x-slack-signature", &sig)
            },
            body: bytes.clone(),
            status: StatusCode::UNAUTHORIZED,
        },
        Rejection {
            name: "repeated timestamp header",
            headers: {
                let mut h = valid(now, &bytes);
                h.push(("x-slack-request-timestamp".into(), now.to_string()));
                h
            },
            body: bytes.clone(),
            status: StatusCode::UNAUTHORIZED,
        },
        Rejection {
            name: "signature over a re-serialised body",
            headers: valid(now, &reserialised),
            body: bytes.clone(),
            status: StatusCode::UNAUTHORIZED,
        },
        Rejection {
            name: "validly signed duplicate JSON keys",
            headers: valid(now, duplicate_keys.as_bytes()),
            body: duplicate_keys.clone().into_bytes(),
            status: StatusCode::BAD_REQUEST,
        },
        Rejection {
            name: "validly signed malformed JSON",
            headers: valid(now, b"{\"type\":\"event_callback\","),
            body: b"{\"type\":\"event_callback\",".to_vec(),
            status: StatusCode::BAD_REQUEST,
        },
    ];
    let oversized = {
        let mut v = body.clone().into_bytes();
        v.resize(1024 * 1024 + 1, b' ');
        v
    };
    out.push(Rejection {
        name: "validly signed body of 1 MiB + 1",
        headers: valid(now, &oversized),
        body: oversized,
        status: StatusCode::PAYLOAD_TOO_LARGE,
    });
    out
}

#[tokio::test]
async fn every_rejection_gets_its_4xx_and_changes_nothing() {
    let ledger = Arc::new(MemoryLedger::new());
    let app = spawn_app_with(Options {
        ledger: Some(ledger.clone() as Arc<dyn Ledger>),
        ..Default::default()
    })
    .await;
    for r in rejections("Ev0100") {
        let sent = app
            .http
            .try_request("POST", &app.url("/slack/events"), &r.headers, r.body)
            .await;
        match sent {
            Ok(answer) => {
                assert_eq!(answer.status, r.status, "{}: {}", r.name, answer.body);
                assert_eq!(answer.json()["ok"], false, "{}", r.name);
            }
            // The 413 is sent before the body is read and the connection closed: a client
            // still sending may see the close first.
            Err(_) if r.status == StatusCode::PAYLOAD_TOO_LARGE => {}
            Err(e) => panic!("{}: {e}", r.name),
        }
        assert!(ledger.is_empty(), "{} touched the ledger", r.name);
    }
    assert!(app.slack.received().is_empty());

    // None of them claimed, poisoned or blocked the real event.
    let answer = app.send(&app_mention("Ev0100", "real"), None).await;
    assert_eq!(answer.outcome(), "answered");
    assert_eq!(app.slack.posted().len(), 1);
}

#[tokio::test]
async fn an_oversized_body_is_refused_from_its_declared_length() {
    let app = spawn_app().await;
    let headers = vec![
        ("content-type".to_string(), "application/json".to_string()),
        ("content-length".to_string(), (64 * 1024 * 1024).to_string()),
    ];
    // Declares 64 MiB but sends nothing: refused at once, before any body is read.
    let mut request = http::Request::builder()
        .method("POST")
        .uri(app.url("/slack/events"));
    for (k, v) in &headers {
        request = request.header(k.as_str(), v.as_str());
    }
    let stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<
        _,
        http_body_util::Empty<bytes::Bytes>,
    >(hyper_util::rt::TokioIo::new(stream))
    .await
    .unwrap();
    tokio::spawn(conn);
    let response = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        sender.send_request(request.body(http_body_util::Empty::new()).unwrap()),
    )
    .await
    .expect("answered without waiting for the body")
    .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(response.headers()["x-slack-no-retry"], "1");
}

#[tokio::test]
async fn invalid_utf8_and_deep_nesting_are_refused_without_a_panic() {
    let app = spawn_app().await;
    let now = now_unix();
    let invalid_utf8 = b"{\"type\":\"event_callback\",\"event_id\":\"Ev\xff\xfe\"}".to_vec();
    let deep = format!(
        r#"{{"type":"event_callback","event_id":"Ev1","event":{{"type":"message","x":{}{}}}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    )
    .into_bytes();
    let huge_id = app_mention(&"E".repeat(10_000), "x").into_bytes();
    for body in [invalid_utf8, deep, huge_id] {
        let answer = app
            .send_raw(&signed_headers(SECRET, now, &body), body)
            .await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    }
    // Still serving.
    assert_eq!(
        app.send(&app_mention("Ev0101", "ok"), None).await.outcome(),
        "answered"
    );
}

#[tokio::test]
async fn unknown_routes_and_methods_are_refused() {
    let app = spawn_app().await;
    let answer = app
        .http
        .request("GET", &app.url("/slack/events"), &[], "")
        .await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    let answer = app.http.request("POST", &app.url("/nope"), &[], "").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn only_an_envelope_without_what_the_protocol_needs_is_refused() {
    let app = spawn_app().await;
    for body in [
        r#"{"type":"event_callback","event":{"type":"team_join","user":{"id":"W1"}}}"#,
        r#"{"type":"event_callback","event_id":"Ev1","event":{"user":{"id":"W1"}}}"#,
        r#"{"event_id":"Ev1","event":{"type":"team_join"}}"#,
    ] {
        let answer = app.send(body, None).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body}");
    }
    // Odd types in fields the protocol does not need are no reason to refuse.
    let odd = r#"{"type":"event_callback","event_id":"EvOdd","team_id":7,"event_time":"later",
        "authorizations":{"x":1},"event":{"type":"app_mention","user":{"id":"U1"},"ts":1,
        "channel":"C1","text":"<@UBOT> hi"}}"#;
    let answer = app.send(odd, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
}
