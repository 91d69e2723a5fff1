//! The forward: a request, as Slack sent it, `POST`ed to a replica of the bot, signed again
//! with the gateway's secret and a fresh timestamp, with the run's name and the proxy's
//! address; the bot's answer read within the run's deadline.

use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::app::Ctx;
use crate::config::Secret;

/// The headers of the protocol (`docs/gateway-protocol.md`).
pub(crate) const RUN_HEADER: &str = "x-slack-once-request";
const API_URL_HEADER: &str = "x-slack-once-api-url";
const KEY_HEADER: &str = "x-slack-once-key";
const ATTEMPT_HEADER: &str = "x-slack-once-attempt";
const DEADLINE_HEADER: &str = "x-slack-once-deadline";
/// The workspace the request is for, and the bot's user there (an event names it): what a
/// bot's framework would otherwise ask `auth.test` (Bolt's authorization).
const TEAM_HEADER: &str = "x-slack-once-team";
const BOT_USER_HEADER: &str = "x-slack-once-bot-user";
/// The run's name and the proxy's address, signed: a bot follows the address only if this
/// verifies, so that a forward replayed with another address cannot send its token elsewhere.
const HEADERS_SIGNATURE_HEADER: &str = "x-slack-once-signature";
/// A bot's answer is an acknowledgement: a few KB at most. Above this it is not read.
const MAX_ANSWER_BYTES: usize = 1 << 20;
/// How long a connection to a replica may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The body the bot gets: Slack's, with a Workflow Builder step's own token (`bot_access_token`
/// of `function_executed`, or of a click or a submission in a step) replaced by the placeholder,
/// so that the bot's calls with it go through the proxy, which makes them with the step's
/// token, and a write around the gateway fails at Slack. Every other body is Slack's, byte for
/// byte.
pub(crate) fn without_step_token<'b>(
    body: &'b str,
    content_type: &str,
    placeholder: &Secret,
) -> std::borrow::Cow<'b, str> {
    let form = content_type.starts_with("application/x-www-form-urlencoded");
    let token = match form {
        true => form_urlencoded::parse(body.as_bytes())
            .find(|(k, _)| k == "payload")
            .and_then(|(_, payload)| serde_json::from_str::<serde_json::Value>(&payload).ok())
            .and_then(|p| p["bot_access_token"].as_str().map(str::to_string)),
        false => serde_json::from_str::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["event"]["bot_access_token"].as_str().map(str::to_string)),
    };
    // Slack's tokens are letters, digits and dashes: the same bytes in a form and in JSON.
    let Some(token) =
        token.filter(|t| t.len() >= 8 && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    else {
        return std::borrow::Cow::Borrowed(body);
    };
    let placeholder = match form {
        true => form_urlencoded::byte_serialize(placeholder.expose().as_bytes()).collect(),
        false => {
            let quoted = serde_json::Value::from(placeholder.expose()).to_string();
            quoted[1..quoted.len() - 1].to_string()
        }
    };
    std::borrow::Cow::Owned(body.replace(&token, &placeholder))
}

/// The HTTP client the forwards go through: plain HTTP or TLS, one pool per process.
pub(crate) struct BotClient {
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

/// One forward's request.
pub(crate) struct Forward<'a> {
    pub url: &'a http::Uri,
    pub run: &'a str,
    pub api_url: &'a str,
    pub secret: &'a Secret,
    pub body: &'a [u8],
    pub content_type: &'static str,
}

/// What a replica answered.
#[derive(Debug)]
pub(crate) struct BotAnswer {
    pub status: StatusCode,
    pub body: Bytes,
}

impl BotClient {
    pub(crate) fn new() -> Self {
        let http = Client::builder(TokioExecutor::new())
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(crate::aws::https_connector(CONNECT_TIMEOUT));
        Self { http }
    }

    /// Forwards the request to one replica and reads its answer, by the run's deadline. An
    /// error says why no answer came.
    pub(crate) async fn forward(&self, ctx: &Ctx, f: Forward<'_>) -> Result<BotAnswer, String> {
        let request = request(ctx, &f).await?;
        let answer = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| crate::errors::error_chain(&e))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| format!("the answer could not be read: {e}"))?
                .to_bytes();
            Ok(BotAnswer { status, body })
        };
        tokio::time::timeout_at(ctx.deadline(), answer)
            .await
            .map_err(|_| "no answer before the run's deadline".to_string())?
    }
}

async fn request(ctx: &Ctx, f: &Forward<'_>) -> Result<Request<Full<Bytes>>, String> {
    let now = crate::clock::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let deadline_ms = ctx
        .deadline_at()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let mut request = Request::post(f.url.clone());
    for (name, value) in [
        (TEAM_HEADER, ctx.team()),
        (BOT_USER_HEADER, ctx.bot_user_id()),
    ] {
        if let Some(value) = value.filter(|v| v.bytes().all(|b| b.is_ascii_alphanumeric())) {
            request = request.header(name, value);
        }
    }
    request
        .header(http::header::CONTENT_TYPE, f.content_type)
        .header(crate::slack::signature::TIMESTAMP_HEADER, now)
        .header(
            crate::slack::signature::SIGNATURE_HEADER,
            crate::slack::signature::sign(f.secret, now, f.body),
        )
        .header(RUN_HEADER, f.run)
        .header(API_URL_HEADER, f.api_url)
        .header(
            HEADERS_SIGNATURE_HEADER,
            headers_signature(f.secret, now, f.run, f.api_url),
        )
        .header(KEY_HEADER, ctx.ledger_key())
        .header(ATTEMPT_HEADER, ctx.attempt().await)
        .header(DEADLINE_HEADER, deadline_ms.to_string())
        .body(Full::new(Bytes::copy_from_slice(f.body)))
        .map_err(|e| format!("the forward could not be built: {e}"))
}

/// `v0=` and the hex HMAC-SHA256 of `v0:{timestamp}:{run}:{api_url}` under the gateway's
/// secret: the protocol's signature of the headers a bot acts on.
pub(crate) fn headers_signature(
    secret: &Secret,
    timestamp: u64,
    run: &str,
    api_url: &str,
) -> String {
    let signed = format!("{run}:{api_url}");
    crate::slack::signature::sign(secret, timestamp, signed.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steps_token_is_replaced_by_the_placeholder_in_an_event_and_in_a_click() {
        let placeholder = Secret::new("xoxb-place/holder+of=the-gateway");
        let event = r#"{"type":"event_callback","event":{"type":"function_executed","bot_access_token":"xwfp-123-abc"}}"#;
        let forwarded = without_step_token(event, "application/json", &placeholder);
        assert_eq!(
            forwarded,
            event.replace("xwfp-123-abc", "xoxb-place/holder+of=the-gateway")
        );
        let payload =
            r#"{"type":"block_actions","bot_access_token":"xwfp-123-abc","function_data":{}}"#;
        let form: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", payload)
            .finish();
        let forwarded =
            without_step_token(&form, "application/x-www-form-urlencoded", &placeholder);
        let (_, sent) = form_urlencoded::parse(forwarded.as_bytes()).next().unwrap();
        let sent: serde_json::Value = serde_json::from_str(&sent).unwrap();
        assert_eq!(sent["bot_access_token"], "xoxb-place/holder+of=the-gateway");
        let message =
            r#"{"type":"event_callback","event":{"type":"app_mention","text":"xwfp-123-abc"}}"#;
        assert!(
            matches!(
                without_step_token(message, "application/json", &placeholder),
                std::borrow::Cow::Borrowed(_)
            ),
            "a body without a step's token is Slack's, byte for byte"
        );
    }

    #[test]
    fn the_headers_signature_is_slacks_scheme_over_the_run_and_the_address() {
        let secret = Secret::new("gateway-secret-shared-with-the-bot");
        let signature =
            headers_signature(&secret, 1_700_000_000, "abc", "http://127.0.0.1:3000/api/");
        // printf 'v0:1700000000:abc:http://127.0.0.1:3000/api/' | openssl dgst -sha256 -hmac …
        assert_eq!(
            signature,
            "v0=f8721d2d12c8ea818ecd3513490f8dfad69cebff714c1cf0e457ceaec749e28d"
        );
    }
}
