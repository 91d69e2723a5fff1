//! The Slack secrets: from the environment (`SLACK_SIGNING_SECRET`, `SLACK_BOT_TOKEN`), or read
//! at run time from AWS Secrets Manager (`SLACK_SECRETS_ARN`: a secret whose JSON holds
//! `signing_secret`, `bot_token` and, for distributed apps, `client_secret`). The secret is read
//! once at start and cached; it is read again when Slack says the token is invalid, or when a
//! well-formed, fresh signature matches none of the cached signing secrets: at most once per
//! `SLACK_SECRETS_REFRESH_SECONDS`, so that forged requests cannot turn into Secrets Manager
//! calls. A rotation therefore needs no redeploy, and no value sits in the function's
//! configuration.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::config::{Secret, SigningSecrets};

/// The secrets in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretValues {
    pub signing: Option<SigningSecrets>,
    pub bot_token: Option<Secret>,
    pub client_secret: Option<Secret>,
}

#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error("SLACK_SECRETS_ARN: the secret {id:?} could not be read: check its name or ARN, the region, and that the role may call secretsmanager:GetSecretValue on it")]
    Unreadable {
        id: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("SLACK_SECRETS_ARN: the secret {id:?} is not the JSON object expected ({{\"signing_secret\": …, \"bot_token\": …}}): {reason}")]
    Invalid { id: String, reason: String },
}

/// The JSON of the secret.
#[derive(Deserialize)]
struct Stored {
    #[serde(default)]
    signing_secret: Option<String>,
    #[serde(default)]
    bot_token: Option<String>,
    #[serde(default)]
    client_secret: Option<String>,
}

struct Manager {
    client: aws_sdk_secretsmanager::Client,
    id: String,
    min_interval: Duration,
    /// When the secret was last read.
    last_read: Mutex<Instant>,
}

/// The secrets, cached, with what it takes to read them again.
pub struct SlackSecrets {
    current: RwLock<Arc<SecretValues>>,
    manager: Option<Manager>,
}

impl std::fmt::Debug for SlackSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackSecrets")
            .field("from", &self.manager.as_ref().map(|m| m.id.as_str()))
            .finish()
    }
}

impl SlackSecrets {
    /// Fixed values (from the environment).
    pub fn fixed(signing: Option<SigningSecrets>, bot_token: Option<Secret>) -> Self {
        Self {
            current: RwLock::new(Arc::new(SecretValues {
                signing,
                bot_token,
                client_secret: None,
            })),
            manager: None,
        }
    }

    /// Reads the secret `id` (a name or an ARN) from Secrets Manager, where the environment
    /// points the client (`AWS_ENDPOINT_URL_SECRETS_MANAGER` for a local server).
    pub async fn from_manager(id: &str, min_interval: Duration) -> Result<Self, SecretsError> {
        let config = crate::aws::sdk_config(Duration::from_secs(2), Duration::from_secs(5)).await;
        let client = aws_sdk_secretsmanager::Client::new(&config);
        let values = read(&client, id).await?;
        tracing::info!(secret = id, "Slack secrets read from Secrets Manager");
        Ok(Self {
            current: RwLock::new(Arc::new(values)),
            manager: Some(Manager {
                client,
                id: id.to_string(),
                min_interval,
                last_read: Mutex::new(Instant::now()),
            }),
        })
    }

    /// The secrets in use now.
    pub fn current(&self) -> Arc<SecretValues> {
        self.current.read().expect("secrets lock").clone()
    }

    /// Reads the secret again, if it comes from Secrets Manager and was not read in the last
    /// `SLACK_SECRETS_REFRESH_SECONDS`. Returns whether the values changed. `why` is logged.
    pub async fn refresh(&self, why: &'static str) -> bool {
        let Some(manager) = &self.manager else {
            return false;
        };
        let mut last_read = manager.last_read.lock().await;
        if last_read.elapsed() < manager.min_interval {
            tracing::debug!(
                why,
                "Slack secrets read less than the refresh interval ago: not again"
            );
            return false;
        }
        *last_read = Instant::now();
        crate::metrics::count("SecretsRefreshes");
        match read(&manager.client, &manager.id).await {
            Ok(values) => {
                let changed = *self.current() != values;
                if changed {
                    tracing::info!(
                        why,
                        secret = manager.id,
                        "Slack secrets read again: they changed"
                    );
                    *self.current.write().expect("secrets lock") = Arc::new(values);
                } else {
                    tracing::info!(
                        why,
                        secret = manager.id,
                        "Slack secrets read again: unchanged"
                    );
                }
                changed
            }
            Err(error) => {
                tracing::warn!(error = %crate::process::error_chain(&error), "reading the Slack secrets again failed: keeping the cached ones");
                false
            }
        }
    }
}

async fn read(
    client: &aws_sdk_secretsmanager::Client,
    id: &str,
) -> Result<SecretValues, SecretsError> {
    let out = client
        .get_secret_value()
        .secret_id(id)
        .send()
        .await
        .map_err(|e| SecretsError::Unreadable {
            id: id.to_string(),
            source: Box::new(e.into_service_error()),
        })?;
    let invalid = |reason: &str| SecretsError::Invalid {
        id: id.to_string(),
        reason: reason.to_string(),
    };
    let text = out
        .secret_string()
        .ok_or_else(|| invalid("it has no SecretString"))?;
    let stored: Stored =
        serde_json::from_str(text).map_err(|_| invalid("it does not parse as a JSON object"))?;
    let nonempty = |v: Option<String>| v.map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    let signing = match nonempty(stored.signing_secret) {
        Some(list) => Some(SigningSecrets::parse(&list).map_err(invalid)?),
        None => None,
    };
    Ok(SecretValues {
        signing,
        bot_token: nonempty(stored.bot_token).map(Secret::new),
        client_secret: nonempty(stored.client_secret).map(Secret::new),
    })
}
