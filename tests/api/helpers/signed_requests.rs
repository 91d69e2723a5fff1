//! Test helpers: signed requests.

use super::*;

pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The headers Slack signs `body` with at `timestamp`. The message the body is about is in
/// Slack's conversations from then on, as it would be ([`register_event_message`]).
pub fn signed_headers(secret: &str, timestamp: u64, body: &[u8]) -> Vec<(String, String)> {
    register_event_message(body);
    vec![
        ("content-type".into(), "application/json".into()),
        ("x-slack-request-timestamp".into(), timestamp.to_string()),
        (
            "x-slack-signature".into(),
            slack_once::slack::signature::sign(&Secret::new(secret), timestamp, body),
        ),
    ]
}

/// The `ts` of the message an event id of these tests carries: one message per event id, as in
/// Slack (every copy of one event carries the same message; two events, two messages).
pub fn ts_of(event_id: &str) -> String {
    let h = event_id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    // Between 2020 and 2023: an event's message is older than anything the bot posts.
    format!(
        "{}.{:06}",
        1_600_000_000 + h % 100_000_000,
        (h >> 40) % 1_000_000
    )
}

/// The ledger key of a message: its identity (team, channel, `ts`).
pub fn message_key(team: &str, channel: &str, ts: &str) -> String {
    format!("msg-{team}-{channel}-{}", ts.replace('.', "_"))
}

/// The ledger key of the message an [`app_mention`] of this event id carries.
pub fn mention_key(event_id: &str) -> String {
    message_key("T0001", "C0001", &ts_of(event_id))
}

/// An `app_mention` envelope, as Slack sends it.
pub fn app_mention(event_id: &str, text: &str) -> String {
    let ts = ts_of(event_id);
    serde_json::json!({
        "token": "unused", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
        "event_id": event_id, "event_time": 1_700_000_000,
        "event": {
            "type": "app_mention", "user": "U0001", "text": format!("<@{BOT_USER}> {text}"),
            "ts": ts, "channel": "C0001", "event_ts": ts
        },
        "authorizations": [{"enterprise_id": null, "team_id": "T0001", "user_id": BOT_USER, "is_bot": true}]
    })
    .to_string()
}

/// A direct message to the bot (`message.im`) with the given author.
pub fn direct_message(event_id: &str, user: &str, text: &str) -> String {
    let ts = ts_of(event_id);
    serde_json::json!({
        "token": "unused", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
        "event_id": event_id, "event_time": 1_700_000_000,
        "event": {
            "type": "message", "channel_type": "im", "user": user, "text": text,
            "ts": ts, "channel": "D0001", "event_ts": ts
        },
        "authorizations": [{"team_id": "T0001", "user_id": BOT_USER, "is_bot": true}]
    })
    .to_string()
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }

    pub fn outcome(&self) -> String {
        self.json()["outcome"].as_str().unwrap_or("").to_string()
    }
}

/// A plain HTTP client for 127.0.0.1.
#[derive(Clone)]
pub struct HttpClient(Client<HttpConnector, Full<Bytes>>);

impl Default for HttpClient {
    fn default() -> Self {
        // Idle connections are dropped well before the server closes them (it waits
        // HEADER_READ_TIMEOUT, 10 s, for a next request): reusing one the server is closing
        // fails the request (`SendRequest`) on a loaded machine.
        Self(
            Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(4))
                .build_http(),
        )
    }
}

impl HttpClient {
    pub async fn request(
        &self,
        method: &str,
        url: &str,
        headers: &[(String, String)],
        body: impl Into<Bytes>,
    ) -> Answer {
        self.try_request(method, url, headers, body)
            .await
            .unwrap_or_else(|e| panic!("request to {url} failed: {e}"))
    }

    pub async fn try_request(
        &self,
        method: &str,
        url: &str,
        headers: &[(String, String)],
        body: impl Into<Bytes>,
    ) -> Result<Answer, Box<dyn std::error::Error + Send + Sync>> {
        let mut request = http::Request::builder().method(method).uri(url);
        for (k, v) in headers {
            request = request.header(k.as_str(), v.as_str());
        }
        let response = self
            .0
            .request(request.body(Full::new(body.into()))?)
            .await?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await?.to_bytes();
        Ok(Answer {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }
}
