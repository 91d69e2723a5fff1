//! `slack-once sign FILE`: signs a request the way Slack would, with a fresh timestamp.
//!
//! Slack signatures expire after five minutes, so sample events cannot be stored signed. Given
//! a Lambda HTTP event (API Gateway v2, Function URL or REST v1), it prints the event with new
//! `x-slack-request-timestamp` and `x-slack-signature` headers, for `cargo lambda invoke
//! --data-file`. Given a plain Slack body, it prints a `curl` command for the local server. A
//! form (a slash command's, or an interaction's `payload=…`) is sent as a form, and, as Slack
//! does for each request, with a fresh `trigger_id` (valid 3 s) and a fresh `response_url`
//! (the last segment of the file's one renewed, its origin kept: point it at the stand-in). An
//! interaction's payload given as JSON (`{"type": "block_actions", …}`: a click on the bot's
//! button, a view submitted) is sent as Slack sends it, as the form field `payload`.

use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use serde_json::Value;

use super::args::{Args, Item, Spec};
use crate::config::{Secret, SigningSecrets};
use crate::pipeline::{RETRY_NUM_HEADER, RETRY_REASON_HEADER};
use crate::slack::signature::{SIGNATURE_HEADER, TIMESTAMP_HEADER, sign};

/// Where the printed `curl` command sends the body when neither `--url` nor `LISTEN_ADDR` is set.
pub const DEFAULT_URL: &str = "http://127.0.0.1:3000/slack/events";

/// Re-signs a Lambda HTTP event in place: the signature covers the decoded body bytes.
pub fn resign_lambda_event(
    event: &mut Value,
    secret: &Secret,
    timestamp: u64,
) -> Result<(), String> {
    let object = event
        .as_object_mut()
        .ok_or("the event is not a JSON object")?;
    let body = object.get("body").and_then(Value::as_str).unwrap_or("");
    let encoded = object
        .get("isBase64Encoded")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let bytes = if encoded {
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .map_err(|e| format!("the body is marked base64 but does not decode: {e}"))?
    } else {
        body.as_bytes().to_vec()
    };
    let signature = sign(secret, timestamp, &bytes);
    let timestamp = timestamp.to_string();

    let headers = object
        .entry("headers")
        .or_insert_with(|| Value::Object(Default::default()))
        .as_object_mut()
        .ok_or("headers is not an object")?;
    headers.retain(|k, _| {
        !k.eq_ignore_ascii_case(TIMESTAMP_HEADER) && !k.eq_ignore_ascii_case(SIGNATURE_HEADER)
    });
    headers.insert(TIMESTAMP_HEADER.into(), Value::String(timestamp.clone()));
    headers.insert(SIGNATURE_HEADER.into(), Value::String(signature.clone()));

    // REST API (v1) events carry every header twice.
    if let Some(multi) = object
        .get_mut("multiValueHeaders")
        .and_then(Value::as_object_mut)
    {
        multi.retain(|k, _| {
            !k.eq_ignore_ascii_case(TIMESTAMP_HEADER) && !k.eq_ignore_ascii_case(SIGNATURE_HEADER)
        });
        multi.insert(
            TIMESTAMP_HEADER.into(),
            Value::Array(vec![Value::String(timestamp)]),
        );
        multi.insert(
            SIGNATURE_HEADER.into(),
            Value::Array(vec![Value::String(signature)]),
        );
    }
    Ok(())
}

/// Whether a JSON value is a Lambda HTTP event rather than a Slack body.
pub fn is_lambda_event(value: &Value) -> bool {
    value.get("requestContext").is_some() && value.get("body").is_some()
}

/// A `curl` command that sends the file's exact bytes, signed at `timestamp`, as Slack's
/// retry number `retry` when given.
pub fn curl_command(
    url: &str,
    path: &str,
    secret: &Secret,
    timestamp: u64,
    body: &[u8],
    retry: Option<u32>,
) -> String {
    let retry = retry
        .map(|n| {
            format!(
                "  -H '{RETRY_NUM_HEADER}: {n}' \\\n  -H '{RETRY_REASON_HEADER}: http_timeout' \\\n"
            )
        })
        .unwrap_or_default();
    format!(
        "curl -sS -i -X POST {url} \\\n  -H 'Content-Type: application/json' \\\n  -H '{TIMESTAMP_HEADER}: {timestamp}' \\\n  -H '{SIGNATURE_HEADER}: {sig}' \\\n{retry}  --data-binary @{path}",
        url = shell_quote(url),
        sig = sign(secret, timestamp, body),
        path = shell_quote(path),
    )
}

/// Whether `value` is an interaction's payload (a click, a view submitted, a shortcut), which
/// Slack sends as a form's `payload` field, not as JSON.
pub fn is_interaction(value: &Value) -> bool {
    matches!(
        value["type"].as_str(),
        Some(
            "block_actions"
                | "view_submission"
                | "view_closed"
                | "shortcut"
                | "message_action"
                | "block_suggestion"
        )
    )
}

/// An interaction's payload as Slack sends it at `now_ms`: the form field `payload`, with a
/// fresh `trigger_id` and `response_url`.
pub fn interaction_form(payload: &Value, now_ms: u64) -> String {
    let form = form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish();
    freshen_form(form.as_bytes(), now_ms)
}

/// Whether `bytes` are a form (a command's, an interaction's) rather than JSON.
pub fn is_form(bytes: &[u8]) -> bool {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    first.is_some_and(|b| *b != b'{') && bytes.contains(&b'=')
}

/// A form as Slack would send it now: a fresh `trigger_id` and `response_url` (last path
/// segment renewed), in its fields or in its `payload`'s JSON.
pub fn freshen_form(bytes: &[u8], now_ms: u64) -> String {
    let n = uuid::Uuid::new_v4().simple().to_string();
    let trigger = format!("{now_ms}.{}.{}", &n[..9], &n[9..29]);
    let renew_url = |url: &str| match url.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{}", &n[..12]),
        None => url.to_string(),
    };
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (k, v) in form_urlencoded::parse(bytes.trim_ascii()) {
        let v = match k.as_ref() {
            "trigger_id" => trigger.clone(),
            "response_url" => renew_url(&v),
            "payload" => match serde_json::from_str::<Value>(&v) {
                Ok(mut payload) => {
                    // Each click (each shortcut) is another, with its own `action_ts`: the
                    // second signing of one file is a second click, not Slack's same one.
                    // A view submitted is the same submission however often it is sent.
                    if payload["type"] != "view_submission" && payload["type"] != "view_closed" {
                        let action_ts = format!("{}.{}", now_ms / 1000, &n[..6]);
                        // `get_mut`: indexing a missing key would add it, as `null` (Bolt then
                        // fails on a shortcut's `actions: null`, which Slack never sends).
                        if let Some(actions) =
                            payload.get_mut("actions").and_then(Value::as_array_mut)
                        {
                            for action in actions {
                                action["action_ts"] = action_ts.clone().into();
                            }
                        }
                        if payload.get("action_ts").is_some() || payload.get("actions").is_none() {
                            payload["action_ts"] = action_ts.clone().into();
                        }
                    }
                    if payload.get("trigger_id").is_some() {
                        payload["trigger_id"] = trigger.clone().into();
                    }
                    if let Some(url) = payload.get("response_url").and_then(Value::as_str) {
                        payload["response_url"] = renew_url(url).into();
                    }
                    payload.to_string()
                }
                Err(_) => v.into_owned(),
            },
            _ => v.into_owned(),
        };
        out.append_pair(&k, &v);
    }
    out.finish()
}

/// A `curl` command that sends `body` (a form) signed at `timestamp`.
pub fn curl_form_command(url: &str, secret: &Secret, timestamp: u64, body: &str) -> String {
    format!(
        "curl -sS -i -X POST {url} \\\n  -H 'Content-Type: application/x-www-form-urlencoded' \\\n  -H '{TIMESTAMP_HEADER}: {timestamp}' \\\n  -H '{SIGNATURE_HEADER}: {sig}' \\\n  --data-binary {body}",
        url = shell_quote(url),
        sig = sign(secret, timestamp, body.as_bytes()),
        body = shell_quote(body),
    )
}

/// Marks a Lambda event as Slack's retry number `n` (reason `http_timeout`).
pub fn set_retry(event: &mut Value, n: u32) {
    for (name, value) in [
        (RETRY_NUM_HEADER, n.to_string()),
        (RETRY_REASON_HEADER, "http_timeout".to_string()),
    ] {
        if let Some(headers) = event.get_mut("headers").and_then(Value::as_object_mut) {
            headers.retain(|k, _| !k.eq_ignore_ascii_case(name));
            headers.insert(name.into(), Value::String(value.clone()));
        }
        if let Some(multi) = event
            .get_mut("multiValueHeaders")
            .and_then(Value::as_object_mut)
        {
            multi.retain(|k, _| !k.eq_ignore_ascii_case(name));
            multi.insert(name.into(), Value::Array(vec![Value::String(value)]));
        }
    }
}

fn shell_quote(s: &str) -> String {
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-:@=".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// `sign FILE [--secret S] [--url URL] [--retry N]`.
pub static SPEC: Spec = Spec {
    name: "sign",
    about: "re-sign a Slack body or Lambda event file with a fresh timestamp",
    operands: &[Item {
        name: "FILE",
        help: "a Lambda HTTP event (events/*.json): printed re-signed, for cargo lambda invoke \
               --data-file; or a Slack request body (an event, a command's form): a curl \
               command that sends it signed; or an interaction's payload as JSON (a click on \
               the bot's button, a view submitted): sent as Slack sends it, a payload form \
               (each click signed is another: a fresh action_ts)",
    }],
    options: &[
        Item {
            name: "--secret S",
            help: "the signing secret (default: the first of SLACK_SIGNING_SECRET)",
        },
        Item {
            name: "--url URL",
            help: "where the curl command sends the body (default: http://LISTEN_ADDR/slack/events)",
        },
        Item {
            name: "--retry N",
            help: "send it as Slack's retry N (X-Slack-Retry-Num: N, X-Slack-Retry-Reason: http_timeout)",
        },
    ],
    env: &[
        Item {
            name: "SLACK_SIGNING_SECRET",
            help: "the signing secret, when --secret is not given",
        },
        Item {
            name: "LISTEN_ADDR",
            help: "the local server the curl command sends to (default 127.0.0.1:3000)",
        },
    ],
};

fn default_url() -> String {
    match std::env::var("LISTEN_ADDR") {
        Ok(addr) if !addr.trim().is_empty() => format!("http://{}/slack/events", addr.trim()),
        _ => DEFAULT_URL.to_string(),
    }
}

/// Runs `sign` with its arguments.
pub fn run(args: &Args) -> ExitCode {
    let file = args.operand(0).unwrap_or_default().to_string();
    let url = args.value("--url").map(str::to_string);
    let retry = match args.parsed::<u32>("--retry", "a number (Slack sends 1 to 3)") {
        Ok(retry) => retry,
        Err(code) => return code,
    };
    let secret = args.value("--secret").map(str::to_string);
    let secret = match secret.or_else(|| std::env::var("SLACK_SIGNING_SECRET").ok()) {
        Some(list) => match SigningSecrets::parse(&list) {
            Ok(secrets) => secrets.primary().clone(),
            Err(e) => return args.fail(&format!("the signing secret is invalid: {e}")),
        },
        None => return args.fail("give --secret or set SLACK_SIGNING_SECRET"),
    };
    let bytes = match std::fs::read(&file) {
        Ok(bytes) => bytes,
        Err(e) => return args.fail(&format!("cannot read {file}: {e}")),
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(mut event) if is_lambda_event(&event) => {
            if let Err(e) = resign_lambda_event(&mut event, &secret, now) {
                return args.fail(&format!("{file}: {e}"));
            }
            if let Some(n) = retry {
                set_retry(&mut event, n);
            }
            say!(
                "{}",
                serde_json::to_string_pretty(&event).expect("JSON serialises")
            );
        }
        // An interaction's payload as JSON (a click on the bot's button, a view submitted):
        // sent as Slack sends it, a form whose `payload` field is the JSON.
        Ok(payload) if is_interaction(&payload) => {
            let url = url.unwrap_or_else(default_url);
            let body = interaction_form(&payload, now * 1000);
            say!("{}", curl_form_command(&url, &secret, now, &body));
        }
        _ if is_form(&bytes) => {
            let url = url.unwrap_or_else(default_url);
            let body = freshen_form(&bytes, now * 1000);
            say!("{}", curl_form_command(&url, &secret, now, &body));
        }
        _ => {
            let url = url.unwrap_or_else(default_url);
            say!("{}", curl_command(&url, &file, &secret, now, &bytes, retry));
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slack::signature::verify_at;

    #[test]
    fn a_resigned_lambda_event_verifies_at_its_new_timestamp() {
        let mut event = serde_json::json!({
            "version": "2.0",
            "headers": {"X-Slack-Signature": "v0=old", "content-type": "application/json"},
            "requestContext": {"http": {"method": "POST"}},
            "body": base64::engine::general_purpose::STANDARD.encode("{\"type\":\"x\"} — ünïcode"),
            "isBase64Encoded": true,
            "multiValueHeaders": {"x-slack-signature": ["v0=old"]}
        });
        let secret = Secret::new("s3cret");
        resign_lambda_event(&mut event, &secret, 1_700_000_000).unwrap();
        let headers = event["headers"].as_object().unwrap();
        assert!(!headers.contains_key("X-Slack-Signature"));
        let mut map = http::HeaderMap::new();
        for name in [TIMESTAMP_HEADER, SIGNATURE_HEADER] {
            map.insert(name, headers[name].as_str().unwrap().parse().unwrap());
        }
        let secrets = SigningSecrets::parse("s3cret").unwrap();
        let body = "{\"type\":\"x\"} — ünïcode".as_bytes();
        assert_eq!(verify_at(&secrets, &map, body, 1_700_000_000), Ok(()));
        assert_eq!(
            event["multiValueHeaders"][SIGNATURE_HEADER][0],
            headers[SIGNATURE_HEADER]
        );
    }

    #[test]
    fn a_shortcut_signed_again_gets_no_field_slack_does_not_send() {
        let shortcut = serde_json::json!({
            "type": "shortcut", "callback_id": "new_ticket", "trigger_id": "1.2.3",
            "team": {"id": "T1"}, "user": {"id": "U1"}
        });
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &shortcut.to_string())
            .finish();
        let sent = freshen_form(form.as_bytes(), 1_767_225_600_000);
        let payload: Value = form_urlencoded::parse(sent.as_bytes())
            .find(|(k, _)| k == "payload")
            .map(|(_, v)| serde_json::from_str(&v).unwrap())
            .unwrap();
        assert!(payload.get("actions").is_none(), "{payload}");
        assert_ne!(
            payload["action_ts"],
            Value::Null,
            "a new shortcut, its own action_ts"
        );
    }

    #[test]
    fn a_click_given_as_json_is_sent_as_slacks_payload_form_with_a_fresh_trigger() {
        let click = serde_json::json!({
            "type": "block_actions", "trigger_id": "1.2.3", "user": {"id": "U1"},
            "actions": [{"action_id": "handoff_acknowledge", "value": "h1"}],
            "response_url": "http://127.0.0.1:4000/actions/T1/C1/1/1"
        });
        assert!(is_interaction(&click));
        assert!(!is_interaction(
            &serde_json::json!({"type": "event_callback"})
        ));
        let body = interaction_form(&click, 1_767_225_600_000);
        assert!(is_form(body.as_bytes()), "{body}");
        let fields: Vec<(String, String)> = form_urlencoded::parse(body.as_bytes())
            .into_owned()
            .collect();
        assert_eq!(fields.len(), 1, "{fields:?}");
        assert_eq!(fields[0].0, "payload");
        let sent: Value = serde_json::from_str(&fields[0].1).unwrap();
        assert_eq!(sent["actions"][0]["action_id"], "handoff_acknowledge");
        assert!(
            sent["trigger_id"]
                .as_str()
                .unwrap()
                .starts_with("1767225600000.")
        );
        assert_ne!(sent["response_url"], click["response_url"]);
        // Signed again, it is another click: another `action_ts`, another ledger key.
        let again = interaction_form(&click, 1_767_225_700_000);
        let key = |form: &str| {
            crate::slack::interaction::Interaction::from_form(form.as_bytes())
                .ok()
                .and_then(|i| i.key())
                .map(|k| k.as_str().to_string())
                .unwrap()
        };
        assert_ne!(key(&body), key(&again));
    }

    #[test]
    fn the_curl_command_quotes_what_the_shell_would_split() {
        let cmd = curl_command(
            "http://127.0.0.1:3000/slack/events",
            "my file.json",
            &Secret::new("s"),
            1,
            b"{}",
            Some(2),
        );
        assert!(cmd.contains("-H 'x-slack-retry-num: 2'"), "{cmd}");
        assert!(cmd.contains("--data-binary @'my file.json'"), "{cmd}");
        assert!(cmd.contains(&sign(&Secret::new("s"), 1, b"{}")));
    }
}
