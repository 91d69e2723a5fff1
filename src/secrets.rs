//! The Slack secrets: from the environment (`SLACK_SIGNING_SECRET`, `SLACK_BOT_TOKEN`), or read
//! at run time from AWS Secrets Manager (`SLACK_SECRETS_ARN`: a secret whose JSON holds
//! `signing_secret`, `bot_token` and, for distributed apps, `client_secret`). The secret is read
//! once at start and cached, and read again on two occasions, each with its own bound:
//! - a well-formed, fresh signature matches none of the cached signing secrets: at most once
//!   per `SLACK_SECRETS_REFRESH_SECONDS`, so that forged requests cannot turn into Secrets
//!   Manager calls;
//! - Slack refuses the bot token in a call made for a verified request: read again unless a
//!   read that began after the refused call has already ended, concurrent refusals sharing one
//!   read (single flight), so a rotation is picked up by the first call that meets it, however
//!   recently the secret was read, and forged requests can neither spend nor delay it.
//!
//! A value read again that lacks what this process needs (the signing secret of an ingress, the
//! bot token of a process that answers) is not taken: the cached values stay, with an error in
//! the log. A rotation needs no redeploy, and no value sits in the function's configuration.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::config::{Secret, SigningSecrets};

/// The secrets in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SecretValues {
    /// The signing secrets (`SLACK_SIGNING_SECRET`, or the secret's `signing_secret`); `None`
    /// when neither gives them.
    pub signing: Option<SigningSecrets>,
    /// The bot token (`SLACK_BOT_TOKEN`, or the secret's `bot_token`); `None` when neither
    /// gives one.
    pub bot_token: Option<Secret>,
    /// The OAuth client secret, from the secret's `client_secret` (never from the environment:
    /// `SLACK_CLIENT_SECRET` is in [`crate::config::OAuthConfig`]).
    pub client_secret: Option<Secret>,
    /// Multi-workspace mode's install settings, where the environment does not give them
    /// (`scopes`, `user_scopes`, `redirect_uri`: the SAM template keeps them here, so that a
    /// change needs no new version).
    pub install: InstallSettings,
}

/// The install flow's settings as the secret holds them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct InstallSettings {
    /// The secret's `scopes`: bot scopes, comma-separated; `None` when absent or empty.
    pub scopes: Option<String>,
    /// The secret's `user_scopes`: user scopes, comma-separated; `None` when absent or empty.
    pub user_scopes: Option<String>,
    /// The secret's `redirect_uri` (checked where it is used); `None` when absent or empty.
    pub redirect_uri: Option<String>,
}

/// Why the Secrets Manager secret cannot give the Slack secrets.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// Secrets Manager did not give the secret (not found, not allowed, not reachable).
    #[error(
        "SLACK_SECRETS_ARN: the secret {id:?} could not be read: check its name or ARN, the region, and that the role may call secretsmanager:GetSecretValue on it"
    )]
    Unreadable {
        /// The secret's name or ARN (`SLACK_SECRETS_ARN`).
        id: String,
        /// Secrets Manager's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The secret is not the JSON object expected, or lacks a value this process needs.
    #[error(
        "SLACK_SECRETS_ARN: the secret {id:?} is not the JSON object expected ({{\"signing_secret\": …, \"bot_token\": …}}): {reason}"
    )]
    Invalid {
        /// The secret's name or ARN (`SLACK_SECRETS_ARN`).
        id: String,
        /// What is wrong with it.
        reason: String,
    },
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
    #[serde(default)]
    scopes: Option<String>,
    #[serde(default)]
    user_scopes: Option<String>,
    #[serde(default)]
    redirect_uri: Option<String>,
}

/// What a process needs of the secret: a value read again without it is not taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Needs {
    /// An ingress verifies requests.
    pub signing_secret: bool,
    /// A process that answers events (a synchronous ingress, a worker) on Lambda posts: it
    /// cannot start without a token.
    pub bot_token: bool,
    /// A process that answers events: once it has a token (in local mode it may start without
    /// one, and log each call instead), a value read again without one is not taken.
    pub answers: bool,
}

impl Needs {
    /// The first field `values` lacks, if any.
    pub fn missing(&self, values: &SecretValues) -> Option<&'static str> {
        if self.signing_secret && values.signing.is_none() {
            Some("signing_secret")
        } else if self.bot_token && values.bot_token.is_none() {
            Some("bot_token")
        } else {
            None
        }
    }
}

/// What a token Slack refused comes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The secret holds another token now: the call can be made again with it.
    Renewed(Secret),
    /// Read after the refusal, the secret still holds the refused token (or cannot be read
    /// again at all: it came from the environment): the refusal stands.
    Confirmed,
    /// The secret could not be read again, or what it holds now is unusable: unknown.
    Unknown,
}

struct Manager {
    client: aws_sdk_secretsmanager::Client,
    id: String,
    min_interval: Duration,
    needs: Needs,
    /// When the signature path last read the secret (its own bound).
    last_read: Mutex<Instant>,
    /// When the latest read that ended had begun.
    fresh_from: std::sync::Mutex<Instant>,
    /// A token Slack refused that a read of the secret (begun at that instant) found still
    /// there: a call sent after that with it, refused again, is still refused after a fresh
    /// read.
    confirmed: std::sync::Mutex<Option<(Secret, Instant)>>,
    /// One read at a time for the token path.
    token_read: Mutex<()>,
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
                install: InstallSettings::default(),
            })),
            manager: None,
        }
    }

    /// Reads the secret `id` (a name or an ARN) from Secrets Manager, where the environment
    /// points the client (`AWS_ENDPOINT_URL_SECRETS_MANAGER` for a local server). A secret that
    /// lacks what `needs` names stops the start, naming the field.
    pub(crate) async fn from_manager(
        id: &str,
        min_interval: Duration,
        needs: Needs,
    ) -> Result<Self, SecretsError> {
        let config = aws_sdk_secretsmanager::config::Builder::from(crate::aws::sdk_config().await)
            .timeout_config(crate::aws::timeouts(
                Duration::from_secs(2),
                Duration::from_secs(5),
            ))
            .build();
        let client = aws_sdk_secretsmanager::Client::from_conf(config);
        let started = Instant::now();
        let values = read(&client, id).await?;
        if let Some(field) = needs.missing(&values) {
            return Err(SecretsError::Invalid {
                id: id.to_string(),
                reason: format!(
                    "it has no {field}, which this process needs ({})",
                    needs.why(field)
                ),
            });
        }
        // Once this process has a token it posts with, a value read again without one is not
        // taken (see [`Needs::answers`]).
        let needs = Needs {
            bot_token: needs.bot_token || (needs.answers && values.bot_token.is_some()),
            ..needs
        };
        tracing::info!(secret = id, "Slack secrets read from Secrets Manager");
        Ok(Self {
            current: RwLock::new(Arc::new(values)),
            manager: Some(Manager {
                client,
                id: id.to_string(),
                min_interval,
                needs,
                last_read: Mutex::new(started),
                fresh_from: std::sync::Mutex::new(started),
                confirmed: std::sync::Mutex::new(None),
                token_read: Mutex::new(()),
            }),
        })
    }

    /// The secrets in use now.
    pub(crate) fn current(&self) -> Arc<SecretValues> {
        self.current.read().expect("secrets lock").clone()
    }

    /// For a signature that matched none of `seen` (the values it was checked against): reads
    /// the secret again, if it comes from Secrets Manager, at most once per
    /// `SLACK_SECRETS_REFRESH_SECONDS` on this path, so forged requests cannot turn into
    /// Secrets Manager calls. A request that comes while a read is in flight waits for it, and
    /// one that comes within the bound waits for the next read allowed, as long as `until`
    /// allows; concurrent ones share one read. Returns whether the values in use now differ
    /// from `seen` (then the signature is worth checking again). `why` is logged.
    pub(crate) async fn refresh(
        &self,
        why: &'static str,
        seen: &Arc<SecretValues>,
        until: Instant,
    ) -> bool {
        let Some(manager) = &self.manager else {
            return false;
        };
        let changed = || !Arc::ptr_eq(seen, &self.current());
        let Ok(mut last_read) = tokio::time::timeout_at(until, manager.last_read.lock()).await
        else {
            return changed();
        };
        if changed() {
            // A read this request waited for (or one that ended just before) has them.
            return true;
        }
        let allowed = *last_read + manager.min_interval;
        if allowed > Instant::now() {
            if allowed > until {
                tracing::debug!(
                    why,
                    "Slack secrets read less than the refresh interval ago: not again before \
                     this request's budget ends"
                );
                return false;
            }
            // Those that come meanwhile wait behind this one and share its read.
            tokio::time::sleep_until(allowed).await;
        }
        *last_read = Instant::now();
        self.read_again(manager, why).await;
        changed()
    }

    /// Slack refused `refused`, the bot token of a call sent at `sent_at` for a verified
    /// request. Unless a read of the secret began after the call was sent, read it (one read
    /// at a time: concurrent refusals wait for it and share it). Then: the secret holds another
    /// token → [`Refused::Renewed`], make the call again with it. It still holds the refused
    /// one → [`Refused::Confirmed`] if an earlier read had already found it there before this
    /// call was sent (still refused after a fresh read: the event ends), else
    /// [`Refused::Unknown`] (the event is released, and Slack's next delivery meets the secret
    /// as it is then: a token revoked before the new one was put in the secret is not the end).
    pub async fn token_refused(&self, refused: &Secret, sent_at: Instant) -> Refused {
        let renewed = |current: &SecretValues| match &current.bot_token {
            Some(token) if token != refused => Some(token.clone()),
            _ => None,
        };
        if let Some(token) = renewed(&self.current()) {
            return Refused::Renewed(token);
        }
        let Some(manager) = &self.manager else {
            return Refused::Confirmed;
        };
        let _one_read = manager.token_read.lock().await;
        if let Some(token) = renewed(&self.current()) {
            return Refused::Renewed(token);
        }
        let fresh_from = *manager.fresh_from.lock().expect("secrets lock");
        if fresh_from <= sent_at {
            match self
                .read_again(manager, "Slack refused the bot token")
                .await
            {
                Some(_) => {}
                None => return Refused::Unknown,
            }
        }
        if let Some(token) = renewed(&self.current()) {
            return Refused::Renewed(token);
        }
        if self.current().bot_token.as_ref() != Some(refused) {
            return Refused::Unknown;
        }
        // Read after this call was sent, the secret still holds the refused token.
        let confirmed_at = *manager.fresh_from.lock().expect("secrets lock");
        let mut confirmed = manager.confirmed.lock().expect("secrets lock");
        let before = matches!(&*confirmed, Some((token, at)) if token == refused && *at < sent_at);
        *confirmed = Some((refused.clone(), confirmed_at));
        if before {
            Refused::Confirmed
        } else {
            Refused::Unknown
        }
    }

    /// One read of the secret: `Some(changed)`, or `None` when it could not be read or what
    /// it holds lacks what this process needs (the cached values stay).
    async fn read_again(&self, manager: &Manager, why: &'static str) -> Option<bool> {
        let started = Instant::now();
        crate::metrics::count("SecretsRefreshes");
        let values = match read(&manager.client, &manager.id).await {
            Ok(values) => values,
            Err(error) => {
                tracing::warn!(error = %crate::errors::error_chain(&error), why, "reading the Slack secrets again failed: keeping the cached ones");
                return None;
            }
        };
        if let Some(field) = manager.needs.missing(&values) {
            tracing::error!(
                why,
                secret = manager.id,
                field,
                "the Slack secret read again has no {field}, which this process needs: keeping \
                 the cached values (put the field back into the secret)"
            );
            return None;
        }
        {
            let mut fresh_from = manager.fresh_from.lock().expect("secrets lock");
            *fresh_from = (*fresh_from).max(started);
        }
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
        Some(changed)
    }
}

impl Needs {
    fn why(&self, field: &str) -> &'static str {
        match field {
            "signing_secret" => "an ingress verifies every request with it",
            _ => "this process answers events on Lambda and posts with it",
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
        install: InstallSettings {
            scopes: nonempty(stored.scopes),
            user_scopes: nonempty(stored.user_scopes),
            redirect_uri: nonempty(stored.redirect_uri),
        },
    })
}
