//! Multi-workspace mode: one installation per workspace (or per enterprise, for an org-wide
//! install), each with its own bot token, kept in the ledger's table without a TTL.
//!
//! - [`InstallationStore`]: the seam, with a memory ([`MemoryInstallations`]) and a DynamoDB
//!   ([`DynamoInstallations`]) implementation sharing its semantics;
//! - [`Workspaces`]: which installation serves a request, its client, and the one refresh of a
//!   rotating token across every instance ([`tokens`]).
//!
//! Keys cannot collide with the ledger's: an event's key is Slack's `Ev…` id or a `msg-`,
//! `cmid-`, `asst-`, `actx-`, `cmd-`… name, never `install#…` or `oauth-state#…`.

mod dynamo;
mod memory;
pub mod oauth;
pub mod tokens;

pub use dynamo::DynamoInstallations;
pub use memory::MemoryInstallations;
pub use tokens::{Authorized, Workspaces};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::config::Secret;

/// Which installation: a workspace's, or an enterprise's (an org-wide install serves every
/// workspace of its enterprise).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum InstallationKey {
    /// A workspace's installation, named by its team id (`T…`).
    Workspace(String),
    /// An enterprise's org-wide install, named by its enterprise id (`E…`).
    Enterprise(String),
}

impl InstallationKey {
    /// The installations that may serve a request, in the order to try: an org-wide install's
    /// request names its enterprise; any other its workspace first, then the enterprise's
    /// org-wide install (Grid workspaces of an org-wide install send their own team id).
    pub fn candidates(
        team: Option<&str>,
        enterprise: Option<&str>,
        is_enterprise_install: bool,
    ) -> Vec<InstallationKey> {
        let mut keys = Vec::new();
        if is_enterprise_install {
            keys.extend(enterprise.map(|e| InstallationKey::Enterprise(e.to_string())));
            return keys;
        }
        keys.extend(team.map(|t| InstallationKey::Workspace(t.to_string())));
        keys.extend(enterprise.map(|e| InstallationKey::Enterprise(e.to_string())));
        keys
    }

    /// The item's key in the table.
    pub fn item_key(&self) -> String {
        match self {
            InstallationKey::Workspace(team) => format!("install#WORKSPACE#{team}"),
            InstallationKey::Enterprise(e) => format!("install#ENTERPRISE#{e}"),
        }
    }

    /// The key of the item that paces this workspace's history reads with `method` (Slack's
    /// limit is per method: `conversations.history` and `.replies` each their own).
    pub fn pace_key(&self, method: &str) -> String {
        format!(
            "install-pace#{}#{method}",
            &self.item_key()["install#".len()..]
        )
    }

    /// The id it is named by (a team's or an enterprise's), for the logs.
    pub fn id(&self) -> &str {
        match self {
            InstallationKey::Workspace(id) | InstallationKey::Enterprise(id) => id,
        }
    }
}

/// The key of an OAuth `state`'s item.
pub fn state_key(state: &str) -> String {
    format!("oauth-state#{state}")
}

/// A token, with its rotation: the refresh token and when the token expires (epoch ms), when
/// token rotation is on.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    /// The token itself (its `Debug` prints it redacted).
    pub token: String,
    /// The refresh token, with token rotation; `None` without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// When the token expires (epoch ms), with token rotation; `None`: it does not expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("token", &"[redacted]")
            .field("rotates", &self.refresh_token.is_some())
            .field("expires_at_ms", &self.expires_at_ms)
            .finish()
    }
}

impl Token {
    /// The token as a [`Secret`], for a call's Authorization header.
    pub fn secret(&self) -> Secret {
        Secret::new(self.token.clone())
    }

    /// Names the refresh token without holding it: what a refreshed pair is conditioned on
    /// (`-` without rotation).
    pub fn rotation(&self) -> String {
        use sha2::{Digest, Sha256};
        match &self.refresh_token {
            Some(refresh) => hex::encode(&Sha256::digest(refresh.as_bytes())[..12]),
            None => "-".into(),
        }
    }
}

/// What an install keeps, as Bolt's stores do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Installation {
    /// `None` for an org-wide install.
    pub team_id: Option<String>,
    /// The workspace's name, as `oauth.v2.access` gave it.
    #[serde(default)]
    pub team_name: Option<String>,
    /// The enterprise's id (`E…`), for a workspace of an Enterprise Grid organization.
    #[serde(default)]
    pub enterprise_id: Option<String>,
    /// The enterprise's name, as `oauth.v2.access` gave it.
    #[serde(default)]
    pub enterprise_name: Option<String>,
    /// The enterprise's URL, for an org-wide install (as `auth.test` gave it).
    #[serde(default)]
    pub enterprise_url: Option<String>,
    /// Whether this is an org-wide install, serving every workspace of its enterprise.
    #[serde(default)]
    pub is_enterprise_install: bool,
    /// The Slack app's id (`A…`).
    #[serde(default)]
    pub app_id: Option<String>,
    /// The bot's id (`B…`), as `auth.test` gave it.
    pub bot_id: Option<String>,
    /// The bot's user id (`U…`).
    pub bot_user_id: Option<String>,
    /// The scopes actually granted (an install may grant fewer optional ones).
    #[serde(default)]
    pub bot_scopes: Vec<String>,
    /// The bot token.
    pub bot: Token,
    /// The installing user.
    #[serde(default)]
    pub user_id: Option<String>,
    /// The scopes granted to the installing user's token.
    #[serde(default)]
    pub user_scopes: Vec<String>,
    /// The installing user's token, where user scopes were asked for.
    #[serde(default)]
    pub user: Option<Token>,
    /// When it was installed (epoch ms): an uninstall older than this is not for it.
    pub installed_at_ms: u64,
}

impl Installation {
    /// Which installation this is: its enterprise's for an org-wide install, else its
    /// workspace's. `None` when the id that would name it is missing.
    pub fn key(&self) -> Option<InstallationKey> {
        match (
            self.is_enterprise_install,
            &self.enterprise_id,
            &self.team_id,
        ) {
            (true, Some(e), _) => Some(InstallationKey::Enterprise(e.clone())),
            (_, _, Some(t)) => Some(InstallationKey::Workspace(t.clone())),
            _ => None,
        }
    }
}

/// An installation as the store holds it.
#[derive(Clone, PartialEq, Eq)]
pub struct Stored {
    /// The installation itself.
    pub installation: Installation,
    /// Set when its token can no longer be refreshed (Slack's code): it must be installed
    /// again.
    pub broken: Option<String>,
    /// Counts the changes other than a refresh (a revoked user token): a refresh stores its
    /// pair only over the revision it read, so it never undoes one.
    pub revision: u64,
}

impl std::fmt::Debug for Stored {
    /// Brief (no token): which installation, its rotation, whether broken, its revision.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let i = &self.installation;
        f.debug_struct("Stored")
            .field("team", &i.team_id)
            .field("enterprise", &i.enterprise_id)
            .field("rotation", &i.bot.rotation())
            .field("user_token", &i.user.is_some())
            .field("broken", &self.broken)
            .field("revision", &self.revision)
            .finish()
    }
}

/// Why the store could not answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store did not answer, or kept changing under a write (the cause inside): a later
    /// try may succeed.
    #[error("the installation store is unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// An item is not a readable installation, or an installation has no team or enterprise
    /// to be keyed by: what is wrong.
    #[error("an installation's item could not be read: {0}")]
    Corrupt(String),
}

/// The installation store's seam: the memory and DynamoDB implementations share these
/// semantics (a contract test runs both).
#[async_trait]
pub trait InstallationStore: Send + Sync + 'static {
    /// Keeps an install (a reinstall replaces the earlier one, and clears `broken`).
    async fn save(&self, installation: &Installation) -> Result<(), StoreError>;

    /// Keeps an install only where none is stored: whether kept.
    async fn save_new(&self, installation: &Installation) -> Result<bool, StoreError>;

    /// The installation `key` names, read strongly.
    async fn find(&self, key: &InstallationKey) -> Result<Option<Stored>, StoreError>;

    /// Removes the installation if it was installed before `before_ms` (an `app_uninstalled`
    /// event's time): a late uninstall never removes a later reinstall. Whether it removed one.
    async fn delete(&self, key: &InstallationKey, before_ms: u64) -> Result<bool, StoreError>;

    /// Removes the tokens of `users` (a `tokens_revoked` event's): the installing user's token
    /// when that user is named; the whole installation when its bot user is. Only for an
    /// installation made before `before_ms`. Whether it changed anything.
    async fn revoke(
        &self,
        key: &InstallationKey,
        users: &[String],
        bots: &[String],
        before_ms: u64,
    ) -> Result<bool, StoreError>;

    /// Takes the refresh of the bot token whose refresh token `rotation` names, for `owner`
    /// until `until_ms`: only when no other owner holds it past `now_ms`. Whether taken.
    async fn take_refresh(
        &self,
        key: &InstallationKey,
        rotation: &str,
        owner: &str,
        now_ms: u64,
        until_ms: u64,
    ) -> Result<bool, StoreError>;

    /// Gives up the refresh `owner` holds (a failed exchange), so the next try need not wait.
    async fn release_refresh(&self, key: &InstallationKey, owner: &str) -> Result<(), StoreError>;

    /// Stores a refreshed installation: only over the refresh token it replaces (`replaced`,
    /// at `revision`) while `owner` holds the refresh, or over itself (this write sent again
    /// after its answer was lost). Whether stored.
    async fn store_refreshed(
        &self,
        key: &InstallationKey,
        replaced: (&str, u64),
        owner: &str,
        refreshed: &Installation,
    ) -> Result<bool, StoreError>;

    /// Marks the installation whose refresh token `rotation` names as broken with `code`.
    /// Whether marked (`false`: another refresh replaced it, or it is gone or marked).
    async fn mark_broken(
        &self,
        key: &InstallationKey,
        rotation: &str,
        code: &str,
    ) -> Result<bool, StoreError>;

    /// Takes the next of `per_minute` history reads a minute with `method` for the workspace
    /// `key` names: `None` when taken, or when the next one is free (epoch ms).
    async fn take_read(
        &self,
        key: &InstallationKey,
        method: &str,
        now_ms: u64,
        per_minute: u32,
    ) -> Result<Option<u64>, StoreError>;

    /// Spends an OAuth state's nonce (the state itself is signed, and checked before this: an
    /// unsigned request never reaches the table), kept until `expires_at_ms`: whether it was
    /// unspent. Spent once: a second callback with it gets `false`, while this call sent again
    /// (its answer lost) gets `true` (`spender` is this callback's).
    async fn consume_state(
        &self,
        nonce: &str,
        spender: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StoreError>;
}

/// Why a token could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// `auth.test` failed with the token: Slack refused it, or could not be reached.
    #[error("Slack refused the token (auth.test)")]
    Slack(#[source] crate::slack::SlackError),
    /// `auth.test` named neither a team nor an enterprise for the token.
    #[error("auth.test named no team or enterprise for the token")]
    NoTeam,
    /// The installation store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Keeps a single workspace's bot token (`SLACK_BOT_TOKEN`) as that workspace's installation,
/// unless one is stored already (`Ok(None)`): moving a single-workspace app to multi-workspace
/// mode without a window in which its workspace has no installation (`slack-once
/// import-token`). The workspace and the bot are as `auth.test` names them.
pub async fn import_token(
    store: &dyn InstallationStore,
    slack: &crate::slack::SlackClient,
    token: &Secret,
) -> Result<Option<Installation>, ImportError> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let me = slack
        .call_with("auth.test", &[], Some(token), deadline)
        .await
        .map_err(ImportError::Slack)?;
    let text = |k: &str| me[k].as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let org_wide = me["is_enterprise_install"].as_bool().unwrap_or(false);
    let installation = Installation {
        team_id: text("team_id").filter(|_| !org_wide),
        team_name: text("team"),
        enterprise_id: text("enterprise_id"),
        enterprise_name: None,
        enterprise_url: None,
        is_enterprise_install: org_wide,
        app_id: None,
        bot_id: text("bot_id"),
        bot_user_id: text("user_id"),
        bot_scopes: Vec::new(),
        bot: Token {
            token: token.expose().to_string(),
            refresh_token: None,
            expires_at_ms: None,
        },
        user_id: None,
        user_scopes: Vec::new(),
        user: None,
        installed_at_ms: crate::clock::now_ms(),
    };
    installation.key().ok_or(ImportError::NoTeam)?;
    // Never over an installation stored meanwhile (an OAuth install's rotating token).
    match store.save_new(&installation).await? {
        true => Ok(Some(installation)),
        false => Ok(None),
    }
}

/// The interval between history reads at `per_minute` a minute.
pub(crate) fn read_interval_ms(per_minute: u32) -> u64 {
    60_000u64.div_ceil(u64::from(per_minute.max(1)))
}
