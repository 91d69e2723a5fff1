//! Multi-workspace mode: one installation per app and workspace (or enterprise, for an
//! org-wide install), each with its own bot token, kept in the ledger's table without a TTL.
//!
//! - [`InstallationStore`]: the seam, with a memory ([`MemoryInstallations`]), a DynamoDB
//!   ([`DynamoInstallations`]) and a PostgreSQL ([`PostgresInstallations`]) implementation
//!   sharing its semantics; a store is one app's
//!   (named by its client id), and touches no other app's items in a table they share;
//! - [`Workspaces`]: which installation serves a request, its client, and the one refresh of a
//!   rotating token across every instance (`tokens`);
//! - [`oauth`]: the install flow (`/slack/install`, `/slack/oauth_redirect`).
//!
//! **Apps sharing a table.** Every key the store writes names the app by its client id
//! (`install#CLIENT#WORKSPACE#T…`, `install-pace#CLIENT#…`, `oauth-state#CLIENT#…`): the
//! client id is the one name of the app that every part of a deployment has (the install flow,
//! a refresh outside any request, the tools).
//!
//! **Unscoped items.** Releases before the app was in the key wrote installations without it
//! (`install#WORKSPACE#T…`: [`Place::Unscoped`]), and may still serve during a rolling deploy.
//! An unscoped item is read where the app has none of its own, and used, in place, only when
//! it is this app's (the app the item names is the request's; an item that names none,
//! imported with `import-token`, is this app's when its bot user is the one the request names,
//! or the request names none), so that both releases serve and refresh one installation during
//! a rolling deploy. A new install, a reinstall or an import writes the app's own key, which
//! wins from then on: that is how unscoped items are moved.
//!
//! Keys cannot collide with the ledger's: an event's key is Slack's `Ev…` id or a `msg-`,
//! `cmid-`, `asst-`, `actx-`, `cmd-`… name, never `install#…` or `oauth-state#…`.

mod dynamo;
mod memory;
pub mod oauth;
mod postgres;
pub mod seal;
pub(crate) mod tokens;

use seal::ReadyKey;

pub use dynamo::{DynamoInstallations, Sealing};
pub use memory::MemoryInstallations;
pub use postgres::PostgresInstallations;
pub use tokens::{Authorized, NO_APP, Workspaces};

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

    /// `WORKSPACE#T…` or `ENTERPRISE#E…`.
    fn scope(&self) -> String {
        match self {
            InstallationKey::Workspace(team) => format!("WORKSPACE#{team}"),
            InstallationKey::Enterprise(e) => format!("ENTERPRISE#{e}"),
        }
    }

    /// The key of the app `app`'s (its client id) item of this installation in the table, at
    /// `place`.
    pub fn item_key(&self, app: &str, place: Place) -> String {
        match place {
            Place::Own => format!("install#{app}#{}", self.scope()),
            Place::Unscoped => format!("install#{}", self.scope()),
        }
    }

    /// The key of the item that paces the app `app`'s history reads in this workspace with
    /// `method` (Slack's limit is per app, workspace and method).
    pub fn pace_key(&self, app: &str, method: &str) -> String {
        format!("install-pace#{app}#{}#{method}", self.scope())
    }

    /// The id it is named by (a team's or an enterprise's), for the logs.
    pub fn id(&self) -> &str {
        match self {
            InstallationKey::Workspace(id) | InstallationKey::Enterprise(id) => id,
        }
    }
}

/// The key of the app `app`'s (its client id) OAuth `state`'s item.
pub fn state_key(app: &str, state: &str) -> String {
    format!("oauth-state#{app}#{state}")
}

/// Where an installation's item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    /// Under the app's own key (`install#CLIENT#…`), the one every write of this store makes.
    Own,
    /// Under the unscoped key, without the app (`install#WORKSPACE#T…`), as releases before the
    /// app was in the key wrote it: used in place only where it is this app's (see the
    /// module's documentation).
    Unscoped,
}

/// Who asks for an installation: what a verified request says of its app and its bot, which
/// decides whether an unscoped item (written without the app) is this app's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Requester<'a> {
    /// The request's `api_app_id`.
    pub app_id: Option<&'a str>,
    /// The bot user the request names (an event's `authorizations`), if any.
    pub bot_user: Option<&'a str>,
}

impl Requester<'_> {
    /// Whether `stored`, an unscoped item, is the requester's (`our_app`: the app learnt from
    /// earlier requests, where this one names none):
    /// - an item that names its app (an OAuth install's, or one tagged since), when that app
    ///   is the requester's;
    /// - one that names none (an `import-token` of a release before the app was in the key),
    ///   when its bot user is the one the request names (each app has its own bot user in a
    ///   workspace).
    ///
    /// `None` when this cannot tell (an untagged import, a request that names no bot user):
    /// the caller asks Slack whose token it is ([`Workspaces`] does, with `auth.test`, and
    /// tags the item), or, where it cannot ask, takes it as not the requester's.
    pub fn owns_unscoped(&self, stored: &Stored, our_app: Option<&str>) -> Option<bool> {
        let app = stored
            .installation
            .app_id
            .as_deref()
            .or(stored.tag.as_deref());
        match app {
            Some(app) => Some(self.app_id.or(our_app) == Some(app)),
            None => match (self.bot_user, stored.installation.bot_user_id.as_deref()) {
                (Some(asked), Some(kept)) => Some(asked == kept),
                _ => None,
            },
        }
    }

    /// Whether an item under the app's own key may serve or be changed for the requester: not
    /// where its installation names another app than the request's (a deployment given another
    /// app's `SLACK_CLIENT_ID`, on a table the two share). One rule for authorization, the
    /// uninstall and `tokens_revoked`.
    pub fn may_use_own(&self, stored: &Stored) -> bool {
        match (stored.installation.app_id.as_deref(), self.app_id) {
            (Some(installed), Some(asker)) => installed == asker,
            _ => true,
        }
    }

    /// Whether `stored` may be removed or changed for the requester (an uninstall, a
    /// revocation), wherever it is: under the app's own key, [`Requester::may_use_own`]; an
    /// unscoped item, only when surely the requester's ([`Requester::owns_unscoped`]).
    pub fn may_change(&self, stored: &Stored, our_app: Option<&str>) -> bool {
        match stored.place {
            Place::Own => self.may_use_own(stored),
            Place::Unscoped => self.owns_unscoped(stored, our_app) == Some(true),
        }
    }
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
    /// Where it was found: the app's own key, or the unscoped one.
    pub place: Place,
    /// The app the item is tagged with (its `app` attribute), where its installation names
    /// none: an unscoped import, whose app `auth.test` has told since.
    pub tag: Option<String>,
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
            .field("place", &self.place)
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

/// Whether an unscoped item is the asker's: see [`Requester::owns_unscoped`].
pub type Owns<'a> = &'a (dyn Fn(&Stored) -> bool + Send + Sync);

/// What a `tokens_revoked` event revokes of one installation: the user tokens of `users`, the
/// whole installation where its bot user is among `bots`; only for an installation made before
/// the event (`before_ms`).
#[derive(Clone, Copy, Debug)]
pub struct Revoked<'a> {
    /// The users whose tokens were revoked.
    pub users: &'a [String],
    /// The bot users whose tokens were revoked.
    pub bots: &'a [String],
    /// When the event happened (epoch ms): a later installation is not revoked.
    pub before_ms: u64,
}

/// A hold on a token's refresh, as an instance asks for it: its owner, from `now_ms` (a hold
/// of another owner that ends before is over) until `until_ms` (epoch ms).
#[derive(Clone, Copy, Debug)]
pub struct RefreshHold<'a> {
    /// Who holds the refresh.
    pub owner: &'a str,
    /// Now (epoch ms).
    pub now_ms: u64,
    /// When the hold ends (epoch ms).
    pub until_ms: u64,
}

/// The installation store's seam: the memory and DynamoDB implementations share these
/// semantics (a contract test runs both). A store is one app's ([`InstallationStore::app`]):
/// every item it writes is keyed by that app, and it never writes another app's.
#[async_trait]
pub trait InstallationStore: Send + Sync + 'static {
    /// The app whose installations these are: its client id.
    fn app(&self) -> &str;

    /// Keeps an install under the app's own key (a reinstall replaces the earlier one, and
    /// clears `broken`).
    async fn save(&self, installation: &Installation) -> Result<(), StoreError>;

    /// Keeps an install under the app's own key only where none is stored there: whether
    /// kept.
    async fn save_new(&self, installation: &Installation) -> Result<bool, StoreError>;

    /// The installation `key` names, read strongly: the app's own; where it has none, the
    /// unscoped one, without the app ([`Place::Unscoped`]), whichever app's it is (the caller
    /// decides whether it is its own).
    async fn find(&self, key: &InstallationKey) -> Result<Option<Stored>, StoreError>;

    /// Removes the installation at `place` if it was installed before `before_ms` (an
    /// `app_uninstalled` event's time): a late uninstall never removes a later reinstall. Only
    /// one `owns` says is the asker's (at either place: [`Requester::may_change`]), as read,
    /// its tokens maybe left sealed (whose it is needs none). Whether it removed one.
    async fn delete(
        &self,
        key: &InstallationKey,
        place: Place,
        before_ms: u64,
        owns: Owns<'_>,
    ) -> Result<bool, StoreError>;

    /// Removes the tokens of `users` (a `tokens_revoked` event's) from the installation at
    /// `place`: the installing user's token when that user is named; the whole installation
    /// when its bot user is. Only for an installation made before `before_ms`, and one `owns`
    /// says is the asker's (at either place: [`Requester::may_change`]). Whether it changed
    /// anything.
    async fn revoke(
        &self,
        key: &InstallationKey,
        place: Place,
        revoked: Revoked<'_>,
        owns: Owns<'_>,
    ) -> Result<bool, StoreError>;

    /// Takes the refresh of the bot token whose refresh token `rotation` names (at `place`),
    /// for `owner` until `until_ms`: only when no other owner holds it past `now_ms`. Whether
    /// taken.
    async fn take_refresh(
        &self,
        key: &InstallationKey,
        place: Place,
        rotation: &str,
        hold: RefreshHold<'_>,
    ) -> Result<bool, StoreError>;

    /// Readies the writes of the installation at `place` (a refresh's store, next): what they
    /// need from elsewhere (a KMS data key) is had now, before the refresh exchanges its token,
    /// and handed to [`InstallationStore::store_refreshed`], which then needs nothing more.
    async fn ready_to_store(
        &self,
        _key: &InstallationKey,
        _place: Place,
    ) -> Result<ReadyKey, StoreError> {
        Ok(ReadyKey::none())
    }

    /// Gives up the refresh `owner` holds (a failed exchange), so the next try need not wait.
    async fn release_refresh(
        &self,
        key: &InstallationKey,
        place: Place,
        owner: &str,
    ) -> Result<(), StoreError>;

    /// Stores a refreshed installation at `place`: only over the refresh token it replaces
    /// (`replaced`, at `revision`) while `owner` holds the refresh, or over itself (this write
    /// sent again after its answer was lost), sealed with `ready`
    /// ([`InstallationStore::ready_to_store`]'s) where tokens are sealed. Whether stored.
    async fn store_refreshed(
        &self,
        key: &InstallationKey,
        place: Place,
        replaced: (&str, u64),
        owner: &str,
        refreshed: &Installation,
        ready: &ReadyKey,
    ) -> Result<bool, StoreError>;

    /// Marks the installation at `place` whose refresh token `rotation` names as broken with
    /// `code`. Whether marked (`false`: another refresh replaced it, or it is gone or marked).
    async fn mark_broken(
        &self,
        key: &InstallationKey,
        place: Place,
        rotation: &str,
        code: &str,
    ) -> Result<bool, StoreError>;

    /// Takes the next of `per_minute` history reads a minute with `method` for the app in the
    /// workspace `key` names: `None` when taken, or when the next one is free (epoch ms).
    async fn take_read(
        &self,
        key: &InstallationKey,
        method: &str,
        now_ms: u64,
        per_minute: u32,
    ) -> Result<Option<u64>, StoreError>;

    /// Tags the unscoped item of `key` that names no app (an import) as the app
    /// `app_id`'s, as `auth.test` with its token told: later reads need not ask again. Only
    /// where it is untagged and still names no app. Whether tagged.
    async fn tag_unscoped(&self, key: &InstallationKey, app_id: &str) -> Result<bool, StoreError>;

    /// Spends the app's OAuth state's nonce (the state itself is signed, and checked before
    /// this: an unsigned request never reaches the table), kept until `expires_at_ms`: whether
    /// it was unspent. Spent once: a second callback with it gets `false`, while this call
    /// sent again (its answer lost) gets `true` (`spender` is this callback's).
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

/// What `import-token` found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Imported {
    /// The installation the token makes (its workspace and bot as `auth.test` names them).
    pub installation: Installation,
    /// Whether it was kept: `false` when the app has an installation there already (an OAuth
    /// install's rotating token, an earlier import), which stays.
    pub kept: bool,
    /// The unscoped item there (kept without the app), if any.
    pub unscoped: Option<UnscopedFound>,
}

/// An unscoped installation (kept without the app), as `import-token` judged it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnscopedFound {
    /// This app's (its bot user is the token's): the app's own item now takes its place.
    Ours,
    /// Another app's (its bot user is not the token's): left to it; its app, where it names one.
    OtherApp(Option<String>),
}

/// Keeps a single workspace's bot token (`SLACK_BOT_TOKEN`) as that workspace's installation of
/// the store's app, unless the app has one stored there already: moving a single-workspace app
/// to multi-workspace mode without a window in which its workspace has no installation
/// (`slack-once import-token`). The workspace and the bot are as `auth.test` names them;
/// another app's installation in the workspace is never touched, and is reported.
pub async fn import_token(
    store: &dyn InstallationStore,
    slack: &crate::slack::SlackClient,
    token: &Secret,
) -> Result<Imported, ImportError> {
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
        app_id: text("app_id"),
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
    let key = installation.key().ok_or(ImportError::NoTeam)?;
    let unscoped = match store.find(&key).await? {
        Some(found) if found.place == Place::Unscoped => {
            let asker = Requester {
                app_id: installation.app_id.as_deref(),
                bot_user: installation.bot_user_id.as_deref(),
            };
            Some(match asker.owns_unscoped(&found, None) {
                Some(true) => UnscopedFound::Ours,
                _ => {
                    UnscopedFound::OtherApp(found.installation.app_id.clone().or(found.tag.clone()))
                }
            })
        }
        _ => None,
    };
    // Never over an installation of the app stored meanwhile (an OAuth install's rotating
    // token).
    let kept = store.save_new(&installation).await?;
    Ok(Imported {
        installation,
        kept,
        unscoped,
    })
}

/// The interval between history reads at `per_minute` a minute.
pub(crate) fn read_interval_ms(per_minute: u32) -> u64 {
    60_000u64.div_ceil(u64::from(per_minute.max(1)))
}
