//! Socket Mode's messages, without I/O: what a connection reads (`hello`, `disconnect`, an
//! envelope), an envelope as the HTTP delivery the pipeline already handles, and the
//! acknowledgement a pipeline's result earns (docs.slack.dev, "Using Socket Mode").

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue};
use serde_json::Value;

use crate::pipeline::{Outcome, ProcessError, RETRY_NUM_HEADER, RETRY_REASON_HEADER};

/// One message read from a Socket Mode connection.
#[derive(Debug, PartialEq)]
pub enum Received {
    /// `hello`: the connection is registered; Slack counts the app's connections
    /// (`num_connections`, ghosts included).
    Hello {
        /// The app's connections as Slack counts them.
        num_connections: Option<u64>,
    },
    /// `disconnect` with its `reason`: `refresh_requested` and `warning` (the connection goes
    /// soon), `too_many_websockets`, `link_disabled`.
    Disconnect(Disconnect),
    /// A request: an Events API envelope, a slash command or an interactive payload.
    Envelope(Envelope),
    /// An envelope whose `payload` is missing or not an object: no request, and no retry can
    /// make one (over HTTP: 400 with `x-slack-no-retry`). Acknowledged, so Slack does not send
    /// it again.
    Unreadable {
        /// What the acknowledgement names.
        envelope_id: String,
    },
    /// Anything else (a type Slack adds later): read and ignored.
    Other,
}

/// Why Slack is closing a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Disconnect {
    /// `refresh_requested` or `warning`: the connection closes soon; open its replacement first.
    Recycled,
    /// `too_many_websockets`: the app holds Slack's limit (10) already; try again later.
    TooMany,
    /// `link_disabled`: Socket Mode was turned off in the app's settings.
    LinkDisabled,
    /// A reason this client does not know: treated as a recycling.
    Other(String),
}

/// An envelope's kind, as its `type` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `events_api`: an event callback; Slack redelivers it when it is not acknowledged.
    EventsApi,
    /// `slash_commands`: a command's fields; never redelivered.
    SlashCommands,
    /// `interactive`: a click, a submission, a shortcut, a menu's options; never redelivered.
    Interactive,
}

/// A request read from a connection.
#[derive(Debug, PartialEq)]
pub struct Envelope {
    /// What the acknowledgement names. Never the request's identity: Slack sends one event
    /// under several envelopes, and one envelope again with `retry_attempt` 0.
    pub envelope_id: String,
    /// Its kind.
    pub kind: Kind,
    /// What it carries (an event callback, a command's fields, an interaction).
    pub payload: Value,
    /// Whether the acknowledgement's `payload` is the answer (commands and interactions).
    pub accepts_response_payload: bool,
    /// `retry_attempt` (Events API), as `X-Slack-Retry-Num` over HTTP.
    pub retry_attempt: u32,
    /// `retry_reason` (Events API), as `X-Slack-Retry-Reason` over HTTP.
    pub retry_reason: Option<String>,
}

/// Why a message read could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReadError {
    /// Not JSON, or not an object with a `type`.
    #[error("not a Socket Mode message: {0}")]
    Malformed(String),
}

impl Received {
    /// Parses one text message of a connection.
    pub fn parse(text: &str) -> Result<Self, ReadError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| ReadError::Malformed(e.to_string()))?;
        let kind = value["type"]
            .as_str()
            .ok_or_else(|| ReadError::Malformed("no type".into()))?;
        let envelope_kind = match kind {
            "hello" => {
                return Ok(Received::Hello {
                    num_connections: value["num_connections"].as_u64(),
                });
            }
            "disconnect" => {
                let reason = value["reason"].as_str().unwrap_or("");
                return Ok(Received::Disconnect(match reason {
                    "refresh_requested" | "warning" => Disconnect::Recycled,
                    "too_many_websockets" => Disconnect::TooMany,
                    "link_disabled" => Disconnect::LinkDisabled,
                    other => Disconnect::Other(other.chars().take(64).collect()),
                }));
            }
            "events_api" => Kind::EventsApi,
            "slash_commands" => Kind::SlashCommands,
            "interactive" => Kind::Interactive,
            _ => return Ok(Received::Other),
        };
        let envelope_id = value["envelope_id"]
            .as_str()
            .filter(|id| !id.is_empty() && id.len() <= 128)
            .ok_or_else(|| ReadError::Malformed("an envelope without its envelope_id".into()))?
            .to_string();
        let Some(payload) = value.get("payload").filter(|p| p.is_object()).cloned() else {
            return Ok(Received::Unreadable { envelope_id });
        };
        Ok(Received::Envelope(Envelope {
            envelope_id,
            kind: envelope_kind,
            payload,
            accepts_response_payload: value["accepts_response_payload"].as_bool().unwrap_or(false),
            retry_attempt: value["retry_attempt"].as_u64().unwrap_or(0) as u32,
            retry_reason: value["retry_reason"]
                .as_str()
                .filter(|r| !r.is_empty())
                .map(str::to_string),
        }))
    }
}

impl Envelope {
    /// The envelope as the HTTP request Slack would have sent: its headers and body (an event
    /// callback as JSON, a command's fields as a form, an interaction as a form's `payload`),
    /// with `retry_attempt` and `retry_reason` as Slack's retry headers. Unsigned: over Socket
    /// Mode the connection authenticates it.
    pub fn as_http(&self) -> (HeaderMap, Vec<u8>) {
        let mut headers = HeaderMap::new();
        let (content_type, body) = match self.kind {
            Kind::EventsApi => ("application/json", self.payload.to_string().into_bytes()),
            Kind::SlashCommands => {
                let mut form = form_urlencoded::Serializer::new(String::new());
                if let Some(fields) = self.payload.as_object() {
                    for (name, value) in fields {
                        match value {
                            Value::String(s) => form.append_pair(name, s),
                            Value::Null => form.append_pair(name, ""),
                            other => form.append_pair(name, &other.to_string()),
                        };
                    }
                }
                (
                    "application/x-www-form-urlencoded",
                    form.finish().into_bytes(),
                )
            }
            Kind::Interactive => {
                let body = form_urlencoded::Serializer::new(String::new())
                    .append_pair("payload", &self.payload.to_string())
                    .finish();
                ("application/x-www-form-urlencoded", body.into_bytes())
            }
        };
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        if self.retry_attempt > 0 {
            headers.insert(RETRY_NUM_HEADER, HeaderValue::from(self.retry_attempt));
            if let Some(reason) = self
                .retry_reason
                .as_deref()
                .and_then(|r| HeaderValue::from_str(r).ok())
            {
                headers.insert(RETRY_REASON_HEADER, reason);
            }
        }
        (headers, body)
    }

    /// The acknowledgement `result` earns, as the text to send, or `None` for none: exactly
    /// where the HTTP ingress would answer 2xx, or tell Slack not to retry. A request the ledger does not hold (its claim
    /// could not be written, or another delivery holds it live) is not acknowledged, so Slack
    /// redelivers an event; a command's or an interaction's answer is the `payload` where
    /// the envelope accepts one.
    pub fn acknowledgement(&self, result: &Result<Outcome, ProcessError>) -> Option<String> {
        let answer = match result {
            Ok(Outcome::InProgress) => return None,
            Ok(Outcome::Acked { body, .. }) => body.as_deref(),
            Ok(_) => None,
            Err(error)
                if crate::http::status_of(error).is_success()
                    || crate::http::no_retry_can_fix(error) =>
            {
                None
            }
            Err(_) => return None,
        };
        let mut ack = serde_json::json!({ "envelope_id": self.envelope_id });
        if self.accepts_response_payload
            && let Some(payload) = answer.and_then(|b| serde_json::from_str::<Value>(b).ok())
        {
            ack["payload"] = payload;
        }
        Some(ack.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn envelope(kind: &str, payload: Value, extra: Value) -> Envelope {
        let mut message = json!({"envelope_id": "e-1", "type": kind, "payload": payload});
        for (k, v) in extra.as_object().unwrap() {
            message[k] = v.clone();
        }
        match Received::parse(&message.to_string()).unwrap() {
            Received::Envelope(envelope) => envelope,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hello_and_disconnects_read_as_slack_sends_them() {
        let hello = r#"{"type":"hello","num_connections":3,"debug_info":{"approximate_connection_time":18060}}"#;
        assert_eq!(
            Received::parse(hello).unwrap(),
            Received::Hello {
                num_connections: Some(3)
            }
        );
        for (reason, want) in [
            ("refresh_requested", Disconnect::Recycled),
            ("warning", Disconnect::Recycled),
            ("too_many_websockets", Disconnect::TooMany),
            ("link_disabled", Disconnect::LinkDisabled),
        ] {
            let text = json!({"type": "disconnect", "reason": reason}).to_string();
            assert_eq!(Received::parse(&text).unwrap(), Received::Disconnect(want));
        }
        assert!(Received::parse("not json").is_err());
        assert!(Received::parse(r#"{"type":"events_api","payload":{}}"#).is_err());
        assert_eq!(
            Received::parse(r#"{"type":"events_api","envelope_id":"e-1","payload":[1]}"#).unwrap(),
            Received::Unreadable {
                envelope_id: "e-1".into()
            }
        );
    }

    #[test]
    fn an_event_becomes_its_callback_with_slacks_retry_headers() {
        let callback = json!({"type": "event_callback", "event_id": "Ev1"});
        let e = envelope(
            "events_api",
            callback.clone(),
            json!({"retry_attempt": 2, "retry_reason": "timeout"}),
        );
        let (headers, body) = e.as_http();
        assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), callback);
        assert_eq!(headers[RETRY_NUM_HEADER], "2");
        assert_eq!(headers[RETRY_REASON_HEADER], "timeout");
        assert_eq!(headers[CONTENT_TYPE], "application/json");
        let first = envelope("events_api", callback, json!({"retry_attempt": 0}));
        assert!(first.as_http().0.get(RETRY_NUM_HEADER).is_none());
    }

    #[test]
    fn a_command_becomes_its_form_and_an_interaction_its_payload_field() {
        let command = envelope(
            "slash_commands",
            json!({"command": "/once", "text": "a b&c", "team_id": "T1"}),
            json!({"accepts_response_payload": true}),
        );
        let (_, body) = command.as_http();
        let fields: std::collections::HashMap<String, String> =
            form_urlencoded::parse(&body).into_owned().collect();
        assert_eq!(fields["text"], "a b&c");
        assert_eq!(fields["command"], "/once");
        let click = json!({"type": "block_actions", "team": {"id": "T1"}});
        let interaction = envelope("interactive", click.clone(), json!({}));
        let (_, body) = interaction.as_http();
        let fields: std::collections::HashMap<String, String> =
            form_urlencoded::parse(&body).into_owned().collect();
        assert_eq!(
            serde_json::from_str::<Value>(&fields["payload"]).unwrap(),
            click
        );
    }

    #[test]
    fn acknowledged_only_where_http_would_answer_2xx_with_the_answer_as_payload() {
        let command = envelope(
            "slash_commands",
            json!({"command": "/once"}),
            json!({"accepts_response_payload": true}),
        );
        let acked = Ok(Outcome::Acked {
            body: Some(r#"{"text":"on it"}"#.into()),
            outcome: Box::new(Outcome::NoReply),
        });
        let ack: Value = serde_json::from_str(&command.acknowledgement(&acked).unwrap()).unwrap();
        assert_eq!(
            ack,
            json!({"envelope_id": "e-1", "payload": {"text": "on it"}})
        );
        assert_eq!(command.acknowledgement(&Ok(Outcome::InProgress)), None);
        let unavailable = Err(ProcessError::Deadline);
        assert_eq!(command.acknowledgement(&unavailable), None);
        let event = envelope("events_api", json!({"type": "event_callback"}), json!({}));
        let ack: Value =
            serde_json::from_str(&event.acknowledgement(&Ok(Outcome::Duplicate)).unwrap()).unwrap();
        assert_eq!(ack, json!({"envelope_id": "e-1"}));
        let malformed = Err(ProcessError::Malformed(
            serde_json::from_str::<Value>("{").unwrap_err(),
        ));
        assert!(
            event.acknowledgement(&malformed).is_some(),
            "no retry can fix it"
        );
    }
}
