//! Slack's OAuth v2 install flow (multi-workspace mode):
//!
//! - `GET /slack/install` answers 302 to Slack's authorize page with the client id, the scopes,
//!   the redirect URI and a fresh `state`: a nonce and its expiry ([`STATE_LIFETIME`]),
//!   signed with a key derived from the client secret (the page writes nothing), single use
//!   (its nonce spent in the ledger's table at the callback), and tied to the browser that
//!   asked by a cookie
//!   ([`STATE_COOKIE`], `Path=/`, so it works under an API Gateway stage and on a function URL
//!   alike: the redirect must come to the same host as the install page).
//! - `GET /slack/oauth_redirect?code=…&state=…` checks the cookie against the state, spends
//!   the state with a conditional write (a second callback, or a concurrent one, gets 400 and
//!   stores nothing), exchanges the code (`oauth.v2.access`), asks `auth.test` for the bot's
//!   ids, stores the installation, and answers a small page; once the state is spent, every
//!   answer clears the cookie. Nothing secret is ever shown.

use std::sync::Arc;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use hmac::Mac;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use http::{HeaderMap, StatusCode};
use tokio::time::Instant;

use crate::slack::SlackError;
use crate::workspaces::{Installation, Token, Workspaces};

/// The state cookie, named as Bolt names it.
pub const STATE_COOKIE: &str = "slack-app-oauth-state";
/// How long an install may take, from the install page to the redirect.
pub const STATE_LIFETIME: Duration = Duration::from_secs(600);
/// Slack's authorize page.
pub const AUTHORIZE_URL: &str = "https://slack.com/oauth/v2/authorize";
/// The exchanges' budget.
const EXCHANGE_BUDGET: Duration = Duration::from_secs(8);

/// The install flow, on a process's installations.
pub struct OAuthFlow {
    workspaces: Arc<Workspaces>,
}

impl OAuthFlow {
    /// The install flow on `workspaces`.
    pub fn new(workspaces: Arc<Workspaces>) -> Self {
        Self { workspaces }
    }

    /// `GET /slack/install`.
    pub async fn install(&self) -> Response {
        let oauth = self.workspaces.oauth();
        let (scopes, user_scopes, redirect_uri) = match self.workspaces.install_settings() {
            Ok(s) => (s.scopes, s.user_scopes, s.redirect_uri),
            Err(e) => {
                tracing::error!(error = %e, "the install flow is not configured");
                return page(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "The installation could not start",
                    "The app's install settings are incomplete: its operator must fix them.",
                );
            }
        };
        // A signed state: the install page writes nothing (no request without a valid state
        // ever reaches the table), and the callback spends its nonce once.
        let Some(key) = self.state_key() else {
            return page(
                StatusCode::SERVICE_UNAVAILABLE,
                "The installation could not start",
                "The app has no client secret: its operator must set it.",
            );
        };
        let expires_s = (crate::clock::now_ms() + STATE_LIFETIME.as_millis() as u64) / 1000;
        let state = sign_state(&key, &uuid::Uuid::new_v4().simple().to_string(), expires_s);
        let mut query = vec![
            ("client_id", oauth.client_id.clone()),
            ("scope", scopes.join(",")),
            ("user_scope", user_scopes.join(",")),
        ];
        if let Some(uri) = redirect_uri {
            query.push(("redirect_uri", uri));
        }
        query.push(("state", state.clone()));
        let query: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(query)
            .finish();
        let cookie = format!(
            "{STATE_COOKIE}={state}; Path=/; Max-Age={}; HttpOnly; Secure; SameSite=Lax",
            STATE_LIFETIME.as_secs()
        );
        crate::metrics::count("InstallsStarted");
        (
            StatusCode::FOUND,
            [
                (LOCATION, format!("{AUTHORIZE_URL}?{query}")),
                (SET_COOKIE, cookie),
                (CACHE_CONTROL, "no-store".to_string()),
            ],
        )
            .into_response()
    }

    /// `GET /slack/oauth_redirect`.
    pub async fn redirect(&self, query: Option<&str>, headers: &HeaderMap) -> Response {
        let pairs: Vec<(String, String)> = form_urlencoded::parse(query.unwrap_or("").as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let param = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        if let Some(error) = param("error") {
            let error: String = error
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
                .take(64)
                .collect();
            return refused(&format!("Slack answered: {error}."));
        }
        let present = |name: &str| param(name).filter(|v| !v.is_empty());
        let (Some(code), Some(state)) = (present("code"), present("state")) else {
            return refused("The link has no code or no state.");
        };
        let cookie = cookie_value(headers, STATE_COOKIE);
        let Some(cookie) = cookie else {
            return refused("This browser did not start the install (its cookie is missing).");
        };
        if !constant_time_eq(cookie.as_bytes(), state.as_bytes()) {
            return refused("This browser started another install (its cookie does not match).");
        }
        let now = crate::clock::now_ms();
        let Some((nonce, expires_s)) = self
            .state_key()
            .and_then(|key| verify_state(&key, state, now / 1000))
        else {
            return refused("The install link has expired or was used already.");
        };
        let spender = uuid::Uuid::new_v4().simple().to_string();
        match self
            .workspaces
            .store()
            .consume_state(&nonce, &spender, expires_s * 1000)
            .await
        {
            Ok(true) => {}
            Ok(false) => return refused("The install link has expired or was used already."),
            Err(e) => {
                tracing::error!(error = %crate::errors::error_chain(&e), "an install's state could not be spent");
                return page(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "The app was not installed",
                    "The app could not reach its table. Start again from the install page.",
                );
            }
        }
        let mut answer = self.installed(code).await;
        // The state is spent: the browser's cookie goes with it, as Bolt clears it.
        let cleared = format!("{STATE_COOKIE}=; Path=/; Max-Age=0; HttpOnly; Secure; SameSite=Lax");
        if let Ok(cleared) = http::HeaderValue::from_str(&cleared) {
            answer.headers_mut().append(SET_COOKIE, cleared);
        }
        answer
    }

    /// A callback whose state is spent: the code's exchange, the installation stored, the page.
    async fn installed(&self, code: &str) -> Response {
        match self.exchange(code).await {
            Ok(installation) => {
                self.workspaces.learn_app(installation.app_id.as_deref());
                let key = installation.key();
                if let Err(e) = self.workspaces.store().save(&installation).await {
                    tracing::error!(error = %crate::errors::error_chain(&e), "an installation could not be stored");
                    return page(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "The app was not installed",
                        "The app could not store its installation. Start again from the install page.",
                    );
                }
                if let Some(key) = &key {
                    self.workspaces.forget(key);
                }
                crate::metrics::count("Installs");
                let name = installation
                    .team_name
                    .clone()
                    .or(installation.enterprise_name.clone())
                    .or(installation.team_id.clone())
                    .unwrap_or_default();
                tracing::info!(
                    installation = key.as_ref().map(|k| k.id()).unwrap_or(""),
                    scopes = %installation.bot_scopes.join(","),
                    rotates = installation.bot.refresh_token.is_some(),
                    "installed"
                );
                page(
                    StatusCode::OK,
                    "Installed",
                    &format!(
                        "The app is installed in {name}. You can close this page and go back to Slack."
                    ),
                )
            }
            Err(Failed::Refused(code)) => refused(&format!("Slack refused the exchange: {code}.")),
            Err(Failed::Unavailable(why)) => {
                tracing::error!(reason = %why, "an install's exchange failed");
                page(
                    StatusCode::BAD_GATEWAY,
                    "The app was not installed",
                    "Slack could not be reached. Start again from the install page.",
                )
            }
        }
    }

    /// The key states are signed with: derived from the client secret.
    fn state_key(&self) -> Option<Vec<u8>> {
        let secret = self.workspaces.client_secret()?;
        let mut mac = HmacSha256::new_from_slice(secret.expose().as_bytes()).ok()?;
        mac.update(b"slack-once oauth state v1");
        Some(mac.finalize().into_bytes().to_vec())
    }

    /// The code's exchange, and the bot's ids.
    async fn exchange(&self, code: &str) -> Result<Installation, Failed> {
        let oauth = self.workspaces.oauth();
        let deadline = Instant::now() + EXCHANGE_BUDGET;
        let secret = self
            .workspaces
            .client_secret()
            .ok_or_else(|| Failed::Unavailable("no client secret".into()))?;
        let redirect_uri = self
            .workspaces
            .install_settings()
            .ok()
            .and_then(|s| s.redirect_uri);
        let mut form = vec![
            ("client_id", oauth.client_id.as_str()),
            ("client_secret", secret.expose()),
            ("code", code),
        ];
        if let Some(uri) = &redirect_uri {
            form.push(("redirect_uri", uri.as_str()));
        }
        let slack = self.workspaces.base_client();
        let answer = slack
            .call_with("oauth.v2.access", &form, None, deadline)
            .await
            .map_err(Failed::of)?;
        let installation = installation_of(&answer, crate::clock::now_ms()).ok_or_else(|| {
            Failed::Unavailable("oauth.v2.access answered without a bot token".into())
        })?;
        let bot = installation.bot.secret();
        let me = slack
            .call_with("auth.test", &[], Some(&bot), deadline)
            .await
            .map_err(Failed::of)?;
        let mut installation = installation;
        installation.bot_id = me["bot_id"].as_str().map(str::to_string);
        if installation.bot_user_id.is_none() {
            installation.bot_user_id = me["user_id"].as_str().map(str::to_string);
        }
        if installation.enterprise_url.is_none() {
            installation.enterprise_url = me["url"]
                .as_str()
                .filter(|_| installation.is_enterprise_install)
                .map(str::to_string);
        }
        Ok(installation)
    }
}

enum Failed {
    Refused(String),
    Unavailable(String),
}

impl Failed {
    fn of(e: SlackError) -> Self {
        match e {
            SlackError::Api { code } => Failed::Refused(code),
            other => Failed::Unavailable(crate::errors::error_chain(&other)),
        }
    }
}

/// The installation `oauth.v2.access` answered (with a code), at `now_ms`.
pub fn installation_of(answer: &serde_json::Value, now_ms: u64) -> Option<Installation> {
    let text = |v: &serde_json::Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let scopes = |v: &serde_json::Value| -> Vec<String> {
        v.as_str()
            .unwrap_or("")
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    let expires = |v: &serde_json::Value| v.as_u64().map(|s| now_ms + s * 1000);
    let user = &answer["authed_user"];
    Some(Installation {
        team_id: text(&answer["team"]["id"]),
        team_name: text(&answer["team"]["name"]),
        enterprise_id: text(&answer["enterprise"]["id"]),
        enterprise_name: text(&answer["enterprise"]["name"]),
        enterprise_url: None,
        is_enterprise_install: answer["is_enterprise_install"].as_bool().unwrap_or(false),
        app_id: text(&answer["app_id"]),
        bot_id: None,
        bot_user_id: text(&answer["bot_user_id"]),
        bot_scopes: scopes(&answer["scope"]),
        bot: Token {
            token: text(&answer["access_token"])?,
            refresh_token: text(&answer["refresh_token"]),
            expires_at_ms: expires(&answer["expires_in"]),
        },
        user_id: text(&user["id"]),
        user_scopes: scopes(&user["scope"]),
        user: text(&user["access_token"]).map(|token| Token {
            token,
            refresh_token: text(&user["refresh_token"]),
            expires_at_ms: expires(&user["expires_in"]),
        }),
        installed_at_ms: now_ms,
    })
}

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

fn state_mac(key: &[u8], nonce: &str, expires_s: u64) -> String {
    let mut mac = HmacSha256::new_from_slice(key).expect("any key length");
    mac.update(format!("{nonce}.{expires_s}").as_bytes());
    hex::encode(&mac.finalize().into_bytes()[..16])
}

/// A state: a nonce, when it expires (epoch seconds), and their signature.
fn sign_state(key: &[u8], nonce: &str, expires_s: u64) -> String {
    format!("{nonce}.{expires_s}.{}", state_mac(key, nonce, expires_s))
}

/// The nonce and expiry of a state signed with `key` and unexpired at `now_s`.
fn verify_state(key: &[u8], state: &str, now_s: u64) -> Option<(String, u64)> {
    let mut parts = state.split('.');
    let (nonce, expires, mac) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || nonce.len() != 32 || !nonce.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return None;
    }
    let expires_s: u64 = expires.parse().ok()?;
    let want = state_mac(key, nonce, expires_s);
    if !constant_time_eq(want.as_bytes(), mac.as_bytes()) || expires_s <= now_s {
        return None;
    }
    Some((nonce.to_string(), expires_s))
}

/// The value of the cookie `name` in the request's `Cookie` headers.
fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim().to_string())
}

/// The page of a refused callback, saying `why`.
fn refused(why: &str) -> Response {
    crate::metrics::count("InstallsRefused");
    tracing::warn!(reason = why, "an install's redirect was refused");
    page(
        StatusCode::BAD_REQUEST,
        "The app was not installed",
        &format!("{why} Start again from the install page."),
    )
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// A small HTML page. Every value it shows is escaped here (a workspace's name, Slack's error
/// code, a reason): none can make markup.
fn page(status: StatusCode, title: &str, text: &str) -> Response {
    let (title, text) = (escape(title), escape(text));
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title></head>\
         <body style=\"font-family: sans-serif; max-width: 36em; margin: 4em auto\">\
         <h1>{title}</h1><p>{text}</p></body></html>"
    );
    (
        status,
        [
            (CONTENT_TYPE, "text/html; charset=utf-8"),
            (CACHE_CONTROL, "no-store"),
        ],
        html,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_is_signed_expires_and_cannot_be_altered() {
        let key = b"key".to_vec();
        let nonce = "0123456789abcdef0123456789abcdef";
        let state = sign_state(&key, nonce, 1_000);
        assert_eq!(verify_state(&key, &state, 999), Some((nonce.into(), 1_000)));
        assert_eq!(verify_state(&key, &state, 1_000), None, "expired");
        assert_eq!(verify_state(b"other", &state, 999), None, "another key");
        let later = state.replace(".1000.", ".2000.");
        assert_eq!(verify_state(&key, &later, 999), None, "its expiry altered");
        assert_eq!(verify_state(&key, "x.1.y", 0), None);
    }

    #[test]
    fn the_state_cookie_is_read_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            COOKIE,
            "a=1; slack-app-oauth-state=abc; b=2".parse().unwrap(),
        );
        assert_eq!(cookie_value(&headers, STATE_COOKIE).as_deref(), Some("abc"));
        assert_eq!(cookie_value(&HeaderMap::new(), STATE_COOKIE), None);
    }

    #[test]
    fn an_access_answer_becomes_an_installation() {
        let answer = serde_json::json!({
            "ok": true, "access_token": "xoxb-1", "refresh_token": "xoxe-1", "expires_in": 43200,
            "scope": "chat:write,commands", "bot_user_id": "U2", "app_id": "A1",
            "team": null, "enterprise": {"id": "E1", "name": "Corp"}, "is_enterprise_install": true,
            "authed_user": {"id": "U9", "scope": "", "token_type": "user"}
        });
        let i = installation_of(&answer, 1000).unwrap();
        assert_eq!(
            i.key(),
            Some(crate::workspaces::InstallationKey::Enterprise("E1".into()))
        );
        assert_eq!(i.bot.expires_at_ms, Some(1000 + 43_200_000));
        assert_eq!(i.bot_scopes, ["chat:write", "commands"]);
        assert!(i.user.is_none());
        assert!(!format!("{i:?}").contains("xoxb-1"));
    }
}
