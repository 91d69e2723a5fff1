//! The gateway's settings, from the environment: where the bot is, the secret it verifies the
//! forwards with, the placeholder token it calls the proxy with, and the proxy's address.

use std::net::SocketAddr;

use crate::config::Secret;

/// The gateway's settings (see `docs/configuration.md`).
#[derive(Clone)]
pub struct GatewayConfig {
    /// `SLACK_ONCE_BOT_URL`: the bot's request URL, or each replica's (comma-separated).
    pub bot_urls: Vec<http::Uri>,
    /// `SLACK_ONCE_GATEWAY_SECRET`: the forwards are signed with it; the bot verifies them with
    /// it as its signing secret.
    pub secret: Secret,
    /// `SLACK_ONCE_PROXY_TOKEN`: the placeholder the bot is given as its bot token; every
    /// call to the proxy carries it.
    pub proxy_token: Secret,
    /// `SLACK_ONCE_API_URL`: the proxy's base URL as the bot reaches it (ends with `/`).
    /// `None`: `http://` and the address the gateway listens on (127.0.0.1 for an address on
    /// every interface), then `/api/` (see [`api_url_on`]).
    pub api_url: Option<String>,
    /// `SLACK_ONCE_RELAY_CALLS`: the bot's calls may reach another process of the gateway than
    /// the one that holds their request (on Lambda, where it is the default; several gateway
    /// processes behind one address), so the holder takes them from the ledger too.
    pub relay_calls: bool,
}

impl std::fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayConfig")
            .field("bot_urls", &self.bot_urls)
            .field("api_url", &self.api_url)
            .field("relay_calls", &self.relay_calls)
            .finish_non_exhaustive()
    }
}

/// A setting missing or wrong: which, and why.
#[derive(Debug, thiserror::Error)]
#[error("{variable}: {why}")]
pub struct GatewayConfigError {
    /// The environment variable.
    pub variable: &'static str,
    /// What is wrong with it.
    pub why: String,
}

/// The shortest secret or placeholder accepted: guessing it must be out of reach.
const LEAST_SECRET_CHARS: usize = 16;

impl GatewayConfig {
    /// Reads the settings through `lookup` (the environment).
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, GatewayConfigError> {
        let get = |variable: &'static str| {
            lookup(variable)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| GatewayConfigError {
                    variable,
                    why: "is required by the gateway".into(),
                })
        };
        let bot_urls = bot_urls(&get("SLACK_ONCE_BOT_URL")?)?;
        let secret = random_string(
            "SLACK_ONCE_GATEWAY_SECRET",
            get("SLACK_ONCE_GATEWAY_SECRET")?,
        )?;
        let proxy_token = random_string("SLACK_ONCE_PROXY_TOKEN", get("SLACK_ONCE_PROXY_TOKEN")?)?;
        let api_url = match lookup("SLACK_ONCE_API_URL").filter(|v| !v.trim().is_empty()) {
            Some(url) => Some(api_url(url.trim())?),
            None => None,
        };
        let on_lambda = lookup("AWS_LAMBDA_RUNTIME_API").is_some();
        let relay_calls = match lookup("SLACK_ONCE_RELAY_CALLS").as_deref().map(str::trim) {
            None | Some("") => on_lambda,
            Some("1" | "true") => true,
            Some("0" | "false") => false,
            Some(other) => {
                return Err(GatewayConfigError {
                    variable: "SLACK_ONCE_RELAY_CALLS",
                    why: format!("is {other:?}: true or false"),
                });
            }
        };
        if on_lambda && !relay_calls {
            return Err(GatewayConfigError {
                variable: "SLACK_ONCE_RELAY_CALLS",
                why: "cannot be false on Lambda: each of the bot's calls is an invocation of its \
                      own, in another environment than the one that holds its request"
                    .into(),
            });
        }
        if on_lambda && api_url.is_none() {
            return Err(GatewayConfigError {
                variable: "SLACK_ONCE_API_URL",
                why: "is required on Lambda: the function's URL, then `/api/`, where the bot \
                      reaches the proxy"
                    .into(),
            });
        }
        Ok(Self {
            bot_urls,
            secret,
            proxy_token,
            api_url,
            relay_calls,
        })
    }
}

/// The proxy's base URL on the address the gateway listens on.
pub fn api_url_on(mut addr: SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    format!("http://{addr}/api/")
}

fn bot_urls(list: &str) -> Result<Vec<http::Uri>, GatewayConfigError> {
    let wrong = |why: String| GatewayConfigError {
        variable: "SLACK_ONCE_BOT_URL",
        why,
    };
    list.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| {
            let uri: http::Uri = u.parse().map_err(|e| wrong(format!("{u:?}: {e}")))?;
            match (uri.scheme_str(), uri.host()) {
                (Some("http" | "https"), Some(_)) => Ok(uri),
                _ => Err(wrong(format!("{u:?} is not an http:// or https:// URL"))),
            }
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|urls| match urls.is_empty() {
            true => Err(wrong("names no URL".into())),
            false => Ok(urls),
        })
}

fn random_string(variable: &'static str, value: String) -> Result<Secret, GatewayConfigError> {
    if value.chars().count() < LEAST_SECRET_CHARS {
        return Err(GatewayConfigError {
            variable,
            why: format!("must be at least {LEAST_SECRET_CHARS} characters (a random string)"),
        });
    }
    Ok(Secret::new(value))
}

fn api_url(url: &str) -> Result<String, GatewayConfigError> {
    let uri: http::Uri = url.parse().map_err(|e| GatewayConfigError {
        variable: "SLACK_ONCE_API_URL",
        why: format!("{url:?}: {e}"),
    })?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(GatewayConfigError {
            variable: "SLACK_ONCE_API_URL",
            why: format!("{url:?} is not an http:// or https:// URL"),
        });
    }
    Ok(format!("{}/", url.trim_end_matches('/')))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<GatewayConfig, GatewayConfigError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        GatewayConfig::from_lookup(|k| vars.get(k).cloned())
    }
    use std::collections::HashMap;

    const SECRETS: [(&str, &str); 2] = [
        (
            "SLACK_ONCE_GATEWAY_SECRET",
            "a-gateway-secret-of-some-length",
        ),
        ("SLACK_ONCE_PROXY_TOKEN", "xoxb-placeholder-for-the-proxy"),
    ];

    #[test]
    fn replicas_are_read_in_order_and_the_proxy_defaults_to_this_machine() {
        let mut vars = SECRETS.to_vec();
        vars.push((
            "SLACK_ONCE_BOT_URL",
            "http://127.0.0.1:3100/slack/events, http://127.0.0.1:3101/slack/events",
        ));
        let c = config(&vars).unwrap();
        assert_eq!(c.bot_urls.len(), 2);
        assert_eq!(c.bot_urls[1].port_u16(), Some(3101));
        assert_eq!(c.api_url, None);
        let on = api_url_on("0.0.0.0:3000".parse().unwrap());
        assert_eq!(on, "http://127.0.0.1:3000/api/");
    }

    #[test]
    fn a_missing_or_weak_setting_is_named() {
        let e = config(&SECRETS).unwrap_err();
        assert_eq!(e.variable, "SLACK_ONCE_BOT_URL");
        let e = config(&[
            ("SLACK_ONCE_BOT_URL", "http://127.0.0.1:3100/"),
            ("SLACK_ONCE_GATEWAY_SECRET", "short"),
            SECRETS[1],
        ])
        .unwrap_err();
        assert_eq!(e.variable, "SLACK_ONCE_GATEWAY_SECRET");
        let mut vars = SECRETS.to_vec();
        vars.push(("SLACK_ONCE_BOT_URL", "ftp://127.0.0.1/"));
        assert!(config(&vars).unwrap_err().why.contains("not an http"));
        vars.pop();
        vars.push(("SLACK_ONCE_BOT_URL", "http://127.0.0.1:3100/"));
        vars.push(("SLACK_ONCE_API_URL", "http://10.0.0.5:3000/api"));
        let api_url = config(&vars).unwrap().api_url;
        assert_eq!(api_url.as_deref(), Some("http://10.0.0.5:3000/api/"));
    }

    #[test]
    fn on_lambda_calls_are_relayed_and_the_functions_url_is_required() {
        let mut vars = SECRETS.to_vec();
        vars.push(("SLACK_ONCE_BOT_URL", "https://bot.example.com/slack/events"));
        assert!(
            !config(&vars).unwrap().relay_calls,
            "a process of its own holds its runs"
        );
        vars.push(("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"));
        let missing = config(&vars).unwrap_err();
        assert_eq!(missing.variable, "SLACK_ONCE_API_URL");
        vars.push((
            "SLACK_ONCE_API_URL",
            "https://abc.lambda-url.us-east-1.on.aws/api/",
        ));
        assert!(config(&vars).unwrap().relay_calls);
        vars.push(("SLACK_ONCE_RELAY_CALLS", "false"));
        assert_eq!(
            config(&vars).unwrap_err().variable,
            "SLACK_ONCE_RELAY_CALLS"
        );
        vars.pop();
        vars.push(("SLACK_ONCE_RELAY_CALLS", "sometimes"));
        assert_eq!(
            config(&vars).unwrap_err().variable,
            "SLACK_ONCE_RELAY_CALLS"
        );
    }
}
