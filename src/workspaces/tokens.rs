//! Which installation serves a request, and its token, refreshed once across every instance.
//!
//! - Found installations are cached in the process for [`CACHE_FOR`]: an uninstall (its
//!   `app_uninstalled` or `tokens_revoked` event, handled by whichever instance receives it)
//!   removes the installation from the table at once and from that instance's cache; every
//!   other instance reads the table again within [`CACHE_FOR`], and sooner if Slack refuses
//!   the token it holds (a refused token always reads the table again).
//! - **One refresh.** A rotating token with fewer than `SLACK_TOKEN_REFRESH_MINUTES` left is
//!   refreshed: concurrent requests of one process share one refresh (a lock per
//!   installation); across processes, a lease in the installation's item ([`REFRESH_LEASE`])
//!   whose holder reads the item again after taking it (another instance may have refreshed
//!   already), exchanges the refresh token, and stores the new pair with a write conditioned
//!   on the refresh token it replaces, before any use of the new token. An instance that finds
//!   a refresh under way keeps using the current token, valid until it expires. A refresh
//!   whose answer was lost, or whose store failed, left the new pair unused: the next try
//!   exchanges the same refresh token again (Slack revokes the unused pair).
//! - With more than [`INLINE_BELOW`] left the refresh runs beside the request, never in front
//!   of it (a command's 3 s acknowledgement does not wait on `oauth.v2.access`, and a copy of
//!   a request never loses its place in the ledger to another for it). With less (a workspace
//!   idle for half a day), the first call the request makes waits for it, after the claim, at
//!   most [`INLINE_BUDGET`]; a token that expires during a request is refused by Slack, which
//!   did nothing, and the call is made again once it is refreshed.
//! - `invalid_refresh_token`, `invalid_auth` or `token_revoked` mark the installation broken
//!   (logged once): its later requests are acknowledged without a claim, until it is
//!   installed again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use super::{
    Installation, InstallationKey, InstallationStore, Place, ReadyKey, RefreshHold, Requester,
    Revoked, StoreError, Stored, Token,
};
use crate::config::{OAuthConfig, Secret};
use crate::secrets::{Refused, SlackSecrets};
use crate::slack::{SlackClient, SlackError, TokenSource};

/// The tag of an unscoped import whose token Slack refuses: no app's.
pub const NO_APP: &str = "-";

/// How long a found installation (or its absence) is used without reading the table again.
pub const CACHE_FOR: Duration = Duration::from_secs(30);
/// A refresh's lease in the installation's item.
pub const REFRESH_LEASE: Duration = Duration::from_secs(20);
/// With less than this left of its token, a request's first call waits for the refresh.
pub const INLINE_BELOW: Duration = Duration::from_secs(60);
/// The longest a request waits for a refresh.
pub const INLINE_BUDGET: Duration = Duration::from_millis(1500);
/// A refresh's own budget (it runs on a task of its own), well within its lease.
pub const REFRESH_BUDGET: Duration = Duration::from_secs(10);
/// After a failed refresh, none is tried for this long (the current token serves meanwhile).
pub const REFRESH_BACKOFF: Duration = Duration::from_secs(30);

/// Ends a refresh task's entry, however the task ends.
struct Ended {
    workspaces: Arc<Workspaces>,
    key: InstallationKey,
    tx: tokio::sync::watch::Sender<bool>,
}

impl Drop for Ended {
    fn drop(&mut self) {
        if let Ok(mut running) = self.workspaces.refreshing.lock() {
            // Only this task's own entry (a later one may have replaced it).
            if running
                .get(&self.key)
                .is_some_and(|rx| rx.same_channel(&self.tx.subscribe()))
            {
                running.remove(&self.key);
            }
        }
        let _ = self.tx.send(true);
    }
}
/// Slack's answers to a refresh that mean the installation must be installed again.
pub const BROKEN_CODES: &[&str] = &["invalid_refresh_token", "invalid_auth", "token_revoked"];

/// The install flow's settings, as they apply now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallSettings {
    /// The bot scopes an install asks for (never empty).
    pub scopes: Vec<String>,
    /// The user scopes an install asks for; often none.
    pub user_scopes: Vec<String>,
    /// Sent at authorize and at the exchange; `None`: the app's configured redirect URL applies.
    pub redirect_uri: Option<String>,
}

/// Which installation serves a request.
#[derive(Clone, Debug)]
pub enum Authorized {
    /// An installation serves the request.
    Installed {
        /// Which installation.
        key: InstallationKey,
        /// The installation, as this process knows it now.
        installation: Arc<Installation>,
        /// The Web API client with this installation's token.
        client: SlackClient,
    },
    /// No installation serves the request's workspace.
    NotInstalled,
    /// The installation's token can no longer be refreshed: installed again, it works again.
    Broken {
        /// Which installation.
        key: InstallationKey,
        /// Slack's answer to the refresh that broke it (one of `BROKEN_CODES`).
        code: String,
    },
}

/// One installation as this process knows it: shared by every client made for it, so a
/// refresh reaches them all.
struct Known {
    key: InstallationKey,
    /// The installation, and where its item is.
    current: RwLock<(Arc<Installation>, Place)>,
}

/// The refresh lease an instance took on an installation's item: the token it refreshes (by
/// its rotation), the item it is stored in, the lease's owner, and the time left for it all.
struct RefreshLease {
    rotation: String,
    place: Place,
    owner: String,
    budget: Instant,
}

impl Known {
    fn get(&self) -> Arc<Installation> {
        self.current.read().expect("installation lock").0.clone()
    }

    fn place(&self) -> Place {
        self.current.read().expect("installation lock").1
    }

    fn set(&self, installation: Installation, place: Place) {
        *self.current.write().expect("installation lock") = (Arc::new(installation), place);
    }
}

enum Cached {
    Found(Arc<Known>),
    Absent,
    Broken(String),
}

/// Multi-workspace mode's installations: built once per process.
pub struct Workspaces {
    store: Arc<dyn InstallationStore>,
    slack: SlackClient,
    oauth: OAuthConfig,
    /// Where `client_secret` is read when the configuration does not hold it.
    secrets: Arc<SlackSecrets>,
    cache: Mutex<HashMap<InstallationKey, (Instant, Cached)>>,
    /// The refresh running in this process, per installation (its receiver turns `true` when
    /// it ends).
    refreshing: Mutex<HashMap<InstallationKey, tokio::sync::watch::Receiver<bool>>>,
    /// Installations logged broken by this process (logged once).
    said_broken: Mutex<std::collections::HashSet<InstallationKey>>,
    /// After a failed refresh, the next is not tried before this (per installation).
    retry_after: Mutex<HashMap<InstallationKey, Instant>>,
    /// Where a refresh's own metrics line goes (it runs outside any request), and the version.
    metrics: Mutex<(crate::metrics::MetricsOut, String)>,
    /// The app's id (`A…`), as its verified requests and its installs name it: what decides
    /// whether an unscoped item is this app's where a caller names no app.
    app_id: Mutex<Option<String>>,
    me: std::sync::Weak<Workspaces>,
}

impl std::fmt::Debug for Workspaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workspaces")
            .field("client_id", &self.oauth.client_id)
            .finish()
    }
}

impl Workspaces {
    /// The installations in `store`, their clients made from `slack`; the client secret and
    /// the install settings from `oauth`, or else from `secrets`.
    pub fn new(
        store: Arc<dyn InstallationStore>,
        slack: SlackClient,
        oauth: OAuthConfig,
        secrets: Arc<SlackSecrets>,
    ) -> Arc<Self> {
        let app_id = oauth.app_id.clone();
        Arc::new_cyclic(|me| Self {
            store,
            slack,
            oauth,
            secrets,
            cache: Mutex::default(),
            refreshing: Mutex::default(),
            said_broken: Mutex::default(),
            retry_after: Mutex::default(),
            metrics: Mutex::new((crate::metrics::MetricsOut::Off, String::new())),
            app_id: Mutex::new(app_id),
            me: me.clone(),
        })
    }

    /// Where a refresh's metrics line goes (the processor's settings).
    pub(crate) fn set_metrics(&self, out: crate::metrics::MetricsOut, version: &str) {
        *self.metrics.lock().expect("lock") = (out, version.to_string());
    }

    /// Waits, until `deadline`, for the refreshes this process is running: on Lambda an
    /// invocation's environment is frozen once it answers, and a refresh frozen mid-exchange
    /// loses its answer, so a request waits for one it began (bounded by its own budget).
    pub async fn settle(&self, deadline: Instant) {
        let running: Vec<tokio::sync::watch::Receiver<bool>> = self
            .refreshing
            .lock()
            .expect("lock")
            .values()
            .cloned()
            .collect();
        for mut rx in running {
            let _ = tokio::time::timeout_at(deadline, rx.wait_for(|ended| *ended)).await;
        }
    }

    /// The installation store.
    pub fn store(&self) -> &Arc<dyn InstallationStore> {
        &self.store
    }

    /// The OAuth settings from the configuration.
    pub fn oauth(&self) -> &OAuthConfig {
        &self.oauth
    }

    /// The client secret: the configuration's, or the Secrets Manager secret's.
    pub fn client_secret(&self) -> Option<Secret> {
        self.oauth
            .client_secret
            .clone()
            .or_else(|| self.secrets.current().client_secret.clone())
    }

    /// The install flow's scopes, user scopes and redirect URI: the environment's, or else the
    /// secret's (read at run time: the SAM template keeps them there). `Err` names what is
    /// wrong.
    pub(crate) fn install_settings(&self) -> Result<InstallSettings, crate::config::ConfigError> {
        use crate::config::{redirect_of, scopes_of};
        let from_secret = self.secrets.current().install.clone();
        let scopes = match self.oauth.scopes.is_empty() {
            false => self.oauth.scopes.clone(),
            true => scopes_of("scopes (in the secret)", from_secret.scopes.as_deref())?,
        };
        if scopes.is_empty() {
            return Err(crate::config::ConfigError::Missing {
                var: "SLACK_SCOPES",
                hint: "SLACK_CLIENT_ID is set: name the bot scopes an install asks for, \
                       comma-separated, in SLACK_SCOPES or as scopes in the secret \
                       SLACK_SECRETS_ARN names",
            });
        }
        let user_scopes = match (self.oauth.user_scopes.is_empty(), &from_secret.user_scopes) {
            (true, Some(v)) => scopes_of("user_scopes (in the secret)", Some(v))?,
            _ => self.oauth.user_scopes.clone(),
        };
        let redirect_uri = match (&self.oauth.redirect_uri, &from_secret.redirect_uri) {
            (Some(uri), _) => Some(uri.clone()),
            (None, Some(uri)) => Some(redirect_of("redirect_uri (in the secret)", uri)?),
            (None, None) => None,
        };
        Ok(InstallSettings {
            scopes,
            user_scopes,
            redirect_uri,
        })
    }

    /// The base client (no token): the OAuth exchanges go through it.
    pub fn base_client(&self) -> &SlackClient {
        &self.slack
    }

    /// Drops what this process knows of `key`: the next request reads the table.
    pub fn forget(&self, key: &InstallationKey) {
        self.cache.lock().expect("cache lock").remove(key);
    }

    /// Keeps the app's id (`A…`) as a verified request or an install names it.
    pub fn learn_app(&self, app_id: Option<&str>) {
        if let Some(app) = app_id.filter(|a| !a.is_empty()) {
            let mut known = self.app_id.lock().expect("lock");
            if known.as_deref() != Some(app) {
                *known = Some(app.to_string());
            }
        }
    }

    /// The app's id, as learnt ([`Workspaces::learn_app`]).
    pub fn app_id(&self) -> Option<String> {
        self.app_id.lock().expect("lock").clone()
    }

    /// What the table holds for `key`, as `who` may use it: an unscoped item is dropped unless
    /// it is `who`'s ([`Requester::owns_unscoped`]; where that cannot tell, `auth.test` with
    /// the item's token names its app, and the item is tagged with it), and an item of the
    /// app's own whose installation names another app than the request's is refused (a
    /// deployment given another app's client id).
    async fn judged(
        &self,
        key: &InstallationKey,
        found: Option<Stored>,
        who: &Requester<'_>,
    ) -> Result<Option<Stored>, StoreError> {
        let Some(found) = found else {
            return Ok(None);
        };
        let our_app = self.app_id();
        let asker = who.app_id.or(our_app.as_deref());
        let app_of = found.installation.app_id.as_deref();
        match found.place {
            Place::Unscoped => {
                let ours = match who.owns_unscoped(&found, our_app.as_deref()) {
                    // An import that names no app, shown the requester's by its bot user: tagged
                    // with the request's app, so that requests naming no bot user (clicks,
                    // commands) know it too.
                    Some(true) if found.installation.app_id.is_none() && found.tag.is_none() => {
                        if let Some(app) = who.app_id {
                            self.store.tag_unscoped(key, app).await?;
                        }
                        true
                    }
                    Some(ours) => ours,
                    None => match self.app_of_token(key, &found).await? {
                        Some(app) => asker == Some(app.as_str()),
                        // Slack named no app: whose it is cannot be told, and a token never
                        // crosses apps. Its own app's events (naming its bot user) use it, and
                        // `import-token` with it makes it the app's own.
                        None => {
                            tracing::warn!(
                                installation = key.id(),
                                "the unscoped import here names no app, and Slack did \
                                 not say whose token it is: not used for a request that names no \
                                 bot user; run import-token with that workspace's token"
                            );
                            false
                        }
                    },
                };
                Ok(ours.then_some(found))
            }
            Place::Own if !who.may_use_own(&found) => {
                tracing::error!(
                    installation = key.id(),
                    installed_app = app_of.unwrap_or(""),
                    request_app = who.app_id.unwrap_or(""),
                    "this deployment's installation is another app's than the request's: is \
                     SLACK_CLIENT_ID this app's? The request is not answered"
                );
                Ok(None)
            }
            Place::Own => Ok(Some(found)),
        }
    }

    /// The app whose token the unscoped import `found` holds, as `auth.test` names
    /// it, tagged on the item so that no later read asks again. `None` where Slack names none.
    /// A token Slack refuses ([`SlackError::refuses_token`]: `invalid_auth`, `token_revoked`,
    /// `account_inactive`, …) is nobody's to use here: tagged and answered [`NO_APP`]. Any
    /// other failure (`internal_error`, `fatal_error`, `ratelimited`, `request_timeout`, a 5xx,
    /// no answer) says nothing of whose the token is: nothing is tagged, and the request is
    /// refused as unavailable (503), so that Slack sends it again.
    async fn app_of_token(
        &self,
        key: &InstallationKey,
        found: &Stored,
    ) -> Result<Option<String>, StoreError> {
        let deadline = Instant::now() + Duration::from_secs(2);
        let token = found.installation.bot.secret();
        match self
            .slack
            .call_with("auth.test", &[], Some(&token), deadline)
            .await
        {
            Ok(me) => match me["app_id"].as_str().filter(|a| !a.is_empty()) {
                Some(app) => {
                    self.store.tag_unscoped(key, app).await?;
                    Ok(Some(app.to_string()))
                }
                None => Ok(None),
            },
            Err(e) if e.refuses_token() => {
                tracing::warn!(
                    installation = key.id(),
                    code = e.code().unwrap_or_default(),
                    "the unscoped import here holds a token Slack refuses: not used"
                );
                // Tagged as no app's: no later request asks Slack again.
                self.store.tag_unscoped(key, NO_APP).await?;
                Ok(Some(NO_APP.to_string()))
            }
            Err(e) => {
                tracing::warn!(
                    installation = key.id(),
                    error = %crate::errors::error_chain(&e),
                    "Slack could not say whose token the unscoped import here holds: \
                     the request is refused for Slack to send again"
                );
                Err(StoreError::Unavailable(Box::new(e)))
            }
        }
    }

    /// The installation serving a request of `team` (of `enterprise`, org-wide when
    /// `is_enterprise_install`) made by `who`, with its client; its token refreshed if it is
    /// due.
    pub async fn authorize(
        &self,
        team: Option<&str>,
        enterprise: Option<&str>,
        is_enterprise_install: bool,
        who: &Requester<'_>,
    ) -> Result<Authorized, StoreError> {
        self.learn_app(who.app_id);
        for key in InstallationKey::candidates(team, enterprise, is_enterprise_install) {
            match self.known(&key, who).await? {
                Cached::Found(known) => {
                    let installation = self.fresh(&known).await;
                    // Slack's history limit is per workspace: an org-wide install's
                    // workspaces each have their own.
                    let pace = team
                        .map(|t| InstallationKey::Workspace(t.to_string()))
                        .unwrap_or_else(|| key.clone());
                    let client = self.slack.with_tokens(Arc::new(InstalledToken {
                        known: known.clone(),
                        workspaces: self.me.upgrade().expect("workspaces alive"),
                        pace,
                    }));
                    return Ok(Authorized::Installed {
                        key,
                        installation,
                        client,
                    });
                }
                Cached::Broken(code) => {
                    self.say_broken(&key, &code);
                    return Ok(Authorized::Broken { key, code });
                }
                Cached::Absent => continue,
            }
        }
        Ok(Authorized::NotInstalled)
    }

    /// The client for `team`'s installation (of `enterprise`: a Grid workspace may be served
    /// by its enterprise's org-wide install), outside any request (an app's own jobs): `None`
    /// when none serves it.
    pub async fn client_for(
        &self,
        team: &str,
        enterprise: Option<&str>,
    ) -> Result<Option<SlackClient>, StoreError> {
        match self
            .authorize(Some(team), enterprise, false, &Requester::default())
            .await?
        {
            Authorized::Installed { client, .. } => Ok(Some(client)),
            _ => Ok(None),
        }
    }

    fn say_broken(&self, key: &InstallationKey, code: &str) {
        if self.said_broken.lock().expect("lock").insert(key.clone()) {
            tracing::error!(
                installation = key.id(),
                code,
                "this workspace's token can no longer be refreshed: its events are acknowledged \
                 and not answered until the app is installed there again"
            );
        }
    }

    async fn known(
        &self,
        key: &InstallationKey,
        who: &Requester<'_>,
    ) -> Result<Cached, StoreError> {
        {
            let cache = self.cache.lock().expect("cache lock");
            if let Some((at, cached)) = cache.get(key)
                && at.elapsed() < CACHE_FOR
            {
                return Ok(match cached {
                    Cached::Found(k) => Cached::Found(k.clone()),
                    Cached::Absent => Cached::Absent,
                    Cached::Broken(c) => Cached::Broken(c.clone()),
                });
            }
        }
        let found = self.store.find(key).await?;
        let judged = self.judged(key, found, who).await?;
        Ok(self.remember(key, judged))
    }

    /// What the table holds for the installation `known`, as a refresh or a refused token (on
    /// the app's behalf, its bot user the known one's) may use it.
    async fn judge_for(
        &self,
        key: &InstallationKey,
        found: Option<Stored>,
        known: &Known,
    ) -> Result<Option<Stored>, StoreError> {
        let bot_user = known.get().bot_user_id.clone();
        let who = Requester {
            app_id: None,
            bot_user: bot_user.as_deref(),
        };
        self.judged(key, found, &who).await
    }

    /// Keeps what the table holds for `key` (the same [`Known`] when it is still there, so the
    /// clients made for it see the change).
    fn remember(&self, key: &InstallationKey, found: Option<Stored>) -> Cached {
        let mut cache = self.cache.lock().expect("cache lock");
        let cached = match found {
            None => Cached::Absent,
            Some(Stored {
                broken: Some(code), ..
            }) => Cached::Broken(code),
            Some(Stored {
                installation,
                place,
                ..
            }) => {
                let known = match cache.get(key) {
                    Some((_, Cached::Found(known))) => {
                        known.set(installation, place);
                        known.clone()
                    }
                    _ => Arc::new(Known {
                        key: key.clone(),
                        current: RwLock::new((Arc::new(installation), place)),
                    }),
                };
                Cached::Found(known)
            }
        };
        let copy = match &cached {
            Cached::Found(k) => Cached::Found(k.clone()),
            Cached::Absent => Cached::Absent,
            Cached::Broken(c) => Cached::Broken(c.clone()),
        };
        // Only a found installation is kept: an absent or a broken one is read again by the
        // next request (a reinstall through another instance counts at once).
        match copy {
            Cached::Found(_) => {
                cache.insert(key.clone(), (Instant::now(), copy));
            }
            _ => {
                cache.remove(key);
            }
        }
        cached
    }

    /// The installation, its refresh begun beside the request if it is due (with less than
    /// [`INLINE_BELOW`] left, the request's first call refreshes it: [`InstalledToken`]).
    async fn fresh(&self, known: &Arc<Known>) -> Arc<Installation> {
        let installation = known.get();
        let Some(left) = self.left(&installation.bot) else {
            return installation;
        };
        if left <= self.oauth.refresh_before && left > INLINE_BELOW {
            // Begun, not waited for.
            self.refresh(known, Instant::now()).await;
        }
        installation
    }

    /// How long the token has left (`None`: it does not expire).
    fn left(&self, token: &Token) -> Option<Duration> {
        token.refresh_token.as_ref()?;
        let expires = token.expires_at_ms?;
        Some(Duration::from_millis(
            expires.saturating_sub(crate::clock::now_ms()),
        ))
    }

    /// Refreshes `known`'s bot token, waiting for it until `deadline`: see the module's docs.
    /// The refresh itself runs on a task of its own, one per installation in this process,
    /// with a budget of its own ([`REFRESH_BUDGET`]): a caller that stops waiting never cuts
    /// an exchange short, and the lease is always given back when a refresh fails. Whatever
    /// happens, `known` ends holding the best token known.
    async fn refresh(&self, known: &Arc<Known>, deadline: Instant) {
        let Some(me) = self.me.upgrade() else {
            return;
        };
        // A refresh that just failed is not tried again at once, by any request.
        let backing_off = self
            .retry_after
            .lock()
            .expect("lock")
            .get(&known.key)
            .is_some_and(|until| Instant::now() < *until);
        if backing_off {
            return;
        }
        let mut done = {
            let mut running = self.refreshing.lock().expect("lock");
            // A receiver whose task is gone (ended, or dropped) is not waited on.
            match running.get(&known.key) {
                Some(rx) if !*rx.borrow() && rx.has_changed().is_ok() => rx.clone(),
                _ => {
                    let (tx, rx) = tokio::sync::watch::channel(false);
                    running.insert(known.key.clone(), rx.clone());
                    let known = known.clone();
                    let (out, version) = self.metrics.lock().expect("lock").clone();
                    tokio::spawn(async move {
                        // Whatever becomes of the task, its entry goes and its waiters wake.
                        let _ended = Ended {
                            workspaces: me.clone(),
                            key: known.key.clone(),
                            tx,
                        };
                        let metrics = crate::metrics::Metrics::new();
                        let seen = known.get();
                        let result = metrics.scope(me.refresh_held(&known, &seen)).await;
                        if let Err(e) = result {
                            metrics.count("TokenRefreshFailures");
                            me.retry_after
                                .lock()
                                .expect("lock")
                                .insert(known.key.clone(), Instant::now() + REFRESH_BACKOFF);
                            tracing::warn!(installation = known.key.id(), error = %crate::errors::error_chain(&*e), "the token refresh failed: the current token is used while it lasts");
                        } else {
                            me.retry_after.lock().expect("lock").remove(&known.key);
                        }
                        metrics.emit_to(&out, &version, &[("Installation", known.key.id())]);
                    });
                    rx
                }
            }
        };
        let _ = tokio::time::timeout_at(deadline, done.wait_for(|ended| *ended)).await;
    }

    /// Another instance is refreshing: the current token serves until it expires. One about to
    /// expire waits for the other's pair, within `budget`.
    async fn wait_for_other(
        &self,
        known: &Arc<Known>,
        rotation: &str,
        place: Place,
        budget: Instant,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let key = &known.key;
        crate::metrics::count("TokenRefreshesDeferred");
        while self
            .left(&known.get().bot)
            .is_some_and(|l| l <= INLINE_BELOW)
            && Instant::now() + Duration::from_millis(250) < budget
        {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = self
                .judge_for(key, self.store.find(key).await?, known)
                .await?;
            let changed = now.as_ref().is_none_or(|s| {
                s.installation.bot.rotation() != rotation || s.broken.is_some() || s.place != place
            });
            if changed {
                self.remember(key, now);
                break;
            }
        }
        Ok(())
    }

    async fn refresh_held(
        &self,
        known: &Arc<Known>,
        seen: &Installation,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let key = &known.key;
        let budget = Instant::now() + REFRESH_BUDGET;
        let rotation = seen.bot.rotation();
        // The table may hold a newer token already (another instance refreshed).
        let stored = self
            .judge_for(key, self.store.find(key).await?, known)
            .await?;
        let Some(stored) = stored else {
            self.remember(key, None);
            return Ok(());
        };
        if stored.installation.bot.rotation() != rotation
            || stored.broken.is_some()
            || stored.place != known.place()
        {
            self.remember(key, Some(stored));
            return Ok(());
        }
        // The item the pair is stored in: the app's own, or the unscoped one (in place, so that
        // a release that reads it there and this one refresh one installation once).
        let place = stored.place;
        let owner = uuid::Uuid::new_v4().simple().to_string();
        let now = crate::clock::now_ms();
        let until = now + REFRESH_LEASE.as_millis() as u64;
        if !self
            .store
            .take_refresh(
                key,
                place,
                &rotation,
                RefreshHold {
                    owner: &owner,
                    now_ms: now,
                    until_ms: until,
                },
            )
            .await?
        {
            return self.wait_for_other(known, &rotation, place, budget).await;
        }
        let lease = RefreshLease {
            rotation,
            place,
            owner,
            budget,
        };
        self.refresh_leased(known, &lease).await
    }

    /// Refreshes the installation's token under the refresh lease this instance took: read
    /// again, exchanged with Slack, stored before any use; the lease released on any failure.
    async fn refresh_leased(
        &self,
        known: &Arc<Known>,
        lease: &RefreshLease,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let RefreshLease {
            rotation,
            place,
            owner,
            budget,
        } = lease;
        let (key, place, budget) = (&known.key, *place, *budget);
        let released = || async {
            let _ = self.store.release_refresh(key, place, owner).await;
        };
        // Taken: read again (a refresh may have ended between the read and the lease). The
        // pair is stored over what this read found, and nothing else.
        let due = |i: &Installation| {
            self.left(&i.bot)
                .is_some_and(|l| l <= self.oauth.refresh_before)
        };
        let found = match self.store.find(key).await {
            Ok(found) => self.judge_for(key, found, known).await,
            Err(e) => Err(e),
        };
        let held = match found {
            Ok(Some(s))
                if s.installation.bot.rotation() == *rotation
                    && s.broken.is_none()
                    && s.place == place
                    && due(&s.installation) =>
            {
                s
            }
            Ok(other) => {
                released().await;
                self.remember(key, other);
                return Ok(());
            }
            Err(e) => {
                released().await;
                return Err(Box::new(e));
            }
        };
        // What storing the new pair needs (a KMS data key) is had before the exchange: KMS
        // down stops the refresh here, not between the exchange and the store.
        let ready = match self.store.ready_to_store(key, place).await {
            Ok(ready) => ready,
            Err(e) => {
                released().await;
                return Err(Box::new(e));
            }
        };
        let Some(secret) = self.client_secret() else {
            released().await;
            return Err(
                "no client secret (SLACK_CLIENT_SECRET, or client_secret in the secret)".into(),
            );
        };
        let refresh_token = held
            .installation
            .bot
            .refresh_token
            .clone()
            .unwrap_or_default();
        let answer = self
            .exchange(refresh_token.as_str(), secret.expose(), budget)
            .await;
        let answer = match answer {
            Ok(answer) => answer,
            Err(SlackError::Api { code }) if BROKEN_CODES.contains(&code.as_str()) => {
                // Only if no other refresh replaced the token meanwhile.
                if self.store.mark_broken(key, place, rotation, &code).await? {
                    crate::metrics::count("InstallationsBroken");
                    self.say_broken(key, &code);
                }
                released().await;
                let now = self
                    .judge_for(key, self.store.find(key).await?, known)
                    .await?;
                self.remember(key, now);
                return Ok(());
            }
            Err(e) => {
                released().await;
                return Err(Box::new(e));
            }
        };
        let (Some(token), Some(refresh)) = (
            answer["access_token"].as_str(),
            answer["refresh_token"].as_str(),
        ) else {
            released().await;
            return Err("oauth.v2.access answered without a token pair".into());
        };
        let mut refreshed = held.installation.clone();
        refreshed.bot = Token {
            token: token.to_string(),
            refresh_token: Some(refresh.to_string()),
            expires_at_ms: answer["expires_in"]
                .as_u64()
                .map(|s| crate::clock::now_ms().saturating_add(s.saturating_mul(1000))),
        };
        self.store_pair(known, lease, &held, refreshed, &ready)
            .await
    }

    /// Exchanges a refresh token for a new pair (`oauth.v2.access`, `grant_type=refresh_token`).
    async fn exchange(
        &self,
        refresh_token: &str,
        client_secret: &str,
        budget: Instant,
    ) -> Result<serde_json::Value, SlackError> {
        self.slack
            .call_with(
                "oauth.v2.access",
                &[
                    ("client_id", self.oauth.client_id.as_str()),
                    ("client_secret", client_secret),
                    ("grant_type", "refresh_token"),
                    ("refresh_token", refresh_token),
                ],
                None,
                budget,
            )
            .await
    }

    /// Stores the refreshed pair over the item as it was read, and takes it into use; the
    /// lease released where it was not stored.
    async fn store_pair(
        &self,
        known: &Arc<Known>,
        lease: &RefreshLease,
        held: &Stored,
        refreshed: Installation,
        ready: &ReadyKey,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let RefreshLease {
            rotation,
            place,
            owner,
            ..
        } = lease;
        let (key, place) = (&known.key, *place);
        let released = || async {
            let _ = self.store.release_refresh(key, place, owner).await;
        };
        // Stored before any use: a pair not stored is never used, and the next try exchanges
        // the same refresh token again.
        match self
            .store
            .store_refreshed(
                key,
                place,
                (rotation, held.revision),
                owner,
                &refreshed,
                ready,
            )
            .await
        {
            Ok(true) => {
                crate::metrics::count("TokensRefreshed");
                tracing::info!(installation = key.id(), "token refreshed");
                known.set(refreshed.clone(), place);
                // And the cache's, should it hold another copy (a forget since).
                self.remember(
                    key,
                    Some(Stored {
                        installation: refreshed,
                        broken: None,
                        revision: held.revision,
                        place,
                        tag: held.tag.clone(),
                    }),
                );
                Ok(())
            }
            Ok(false) => {
                released().await;
                let now = self
                    .judge_for(key, self.store.find(key).await?, known)
                    .await?;
                self.remember(key, now);
                Ok(())
            }
            Err(e) => {
                // Stored or not: the table says.
                released().await;
                if let Ok(now) = self.store.find(key).await
                    && let Ok(now) = self.judge_for(key, now, known).await
                {
                    self.remember(key, now);
                }
                Err(Box::new(e))
            }
        }
    }

    /// Whether `who`'s uninstall or revocation may change `stored` ([`Requester::may_change`]),
    /// said in the log where an item of the app's own key is another app's.
    fn may_change(
        &self,
        key: &InstallationKey,
        stored: &Stored,
        who: &Requester<'_>,
        our_app: Option<&str>,
    ) -> bool {
        let may = who.may_change(stored, our_app);
        if !may && stored.place == Place::Own {
            tracing::error!(
                installation = key.id(),
                installed_app = stored.installation.app_id.as_deref().unwrap_or(""),
                request_app = who.app_id.unwrap_or(""),
                "an uninstall or revocation of another app than this deployment's installation: \
                 is SLACK_CLIENT_ID this app's? The installation is left as it is"
            );
        }
        may
    }

    /// An `app_uninstalled` event (at `event_ms`) of `who`: removes the app's installation
    /// (its own item, and the unscoped one where that one is `who`'s).
    pub async fn uninstalled(
        &self,
        key: &InstallationKey,
        event_ms: u64,
        who: &Requester<'_>,
    ) -> Result<bool, StoreError> {
        self.learn_app(who.app_id);
        let our_app = self.app_id();
        // Only what is surely this app's: an undecided import stays (its app's own uninstall
        // removes it, or a reinstall's own item takes its place), and so does an item of the
        // app's own key whose installation is another app's.
        let owns = |s: &Stored| self.may_change(key, s, who, our_app.as_deref());
        let own = self.store.delete(key, Place::Own, event_ms, &owns).await?;
        let unscoped = self
            .store
            .delete(key, Place::Unscoped, event_ms, &owns)
            .await?;
        self.forget(key);
        Ok(own || unscoped)
    }

    /// A `tokens_revoked` event (at `event_ms`) of `who`: removes the revoked tokens from the
    /// app's installation (its own item, and the unscoped one where that one is `who`'s).
    pub async fn revoked(
        &self,
        key: &InstallationKey,
        users: &[String],
        bots: &[String],
        event_ms: u64,
        who: &Requester<'_>,
    ) -> Result<bool, StoreError> {
        self.learn_app(who.app_id);
        let our_app = self.app_id();
        let owns = |s: &Stored| self.may_change(key, s, who, our_app.as_deref());
        let mut changed = false;
        for place in [Place::Own, Place::Unscoped] {
            changed |= self
                .store
                .revoke(
                    key,
                    place,
                    Revoked {
                        users,
                        bots,
                        before_ms: event_ms,
                    },
                    &owns,
                )
                .await?;
        }
        self.forget(key);
        Ok(changed)
    }

    /// Waits for the next history read `key` may make (see
    /// `SLACK_HISTORY_READS_PER_MINUTE`), until `deadline`.
    async fn read_slot(
        &self,
        key: &InstallationKey,
        method: &str,
        deadline: Instant,
    ) -> Result<(), SlackError> {
        let per_minute = self.oauth.history_reads_per_minute;
        if per_minute == 0 {
            return Ok(());
        }
        let mut waited = false;
        loop {
            let now = crate::clock::now_ms();
            let free_at = match self.store.take_read(key, method, now, per_minute).await {
                Ok(None) => {
                    if waited {
                        crate::metrics::count("LookupsPaced");
                    }
                    return Ok(());
                }
                Ok(Some(at)) => at,
                // Pacing is a courtesy to Slack's limit: Slack enforces it with a 429.
                Err(e) => {
                    tracing::warn!(error = %crate::errors::error_chain(&e), "history reads could not be paced");
                    return Ok(());
                }
            };
            let wait = Duration::from_millis(free_at.saturating_sub(now).max(1));
            if Instant::now() + wait >= deadline {
                crate::metrics::count("LookupsPaced");
                return Err(SlackError::RateLimited { retry_after: wait });
            }
            waited = true;
            tokio::time::sleep(wait).await;
        }
    }
}

/// An installation's token, as a client's [`TokenSource`].
struct InstalledToken {
    known: Arc<Known>,
    workspaces: Arc<Workspaces>,
    /// Whose history reads are paced: the request's workspace.
    pace: InstallationKey,
}

#[async_trait::async_trait]
impl TokenSource for InstalledToken {
    fn current(&self) -> Option<Secret> {
        Some(self.known.get().bot.secret())
    }

    /// Slack refused the token: the table is read again (a refresh elsewhere, a reinstall); a
    /// rotating token is refreshed if the table holds no other.
    async fn refused(&self, used: &Secret, _sent_at: Instant) -> Refused {
        let w = &self.workspaces;
        let key = &self.known.key;
        let found = match w.store.find(key).await {
            Ok(found) => match w.judge_for(key, found, &self.known).await {
                Ok(found) => found,
                Err(_) => return Refused::Unknown,
            },
            Err(_) => return Refused::Unknown,
        };
        if found.is_none() {
            // Uninstalled: the refusal stands.
            w.remember(key, None);
            return Refused::Confirmed;
        }
        if let Cached::Found(known) = w.remember(key, found)
            && !Arc::ptr_eq(&known, &self.known)
        {
            self.known.set((*known.get()).clone(), known.place());
        }
        let now = self.known.get();
        if now.bot.token != used.expose() {
            return Refused::Renewed(now.bot.secret());
        }
        if now.bot.refresh_token.is_some() {
            w.refresh(&self.known, Instant::now() + INLINE_BUDGET).await;
            let after = self.known.get();
            if after.bot.token != used.expose() {
                return Refused::Renewed(after.bot.secret());
            }
            return Refused::Unknown;
        }
        Refused::Confirmed
    }

    async fn prepare(&self, deadline: Instant) {
        let w = &self.workspaces;
        let due = w
            .left(&self.known.get().bot)
            .is_some_and(|left| left <= INLINE_BELOW);
        if due {
            let budget = (Instant::now() + INLINE_BUDGET).min(deadline);
            w.refresh(&self.known, budget).await;
        }
    }

    fn installation(&self) -> Option<&str> {
        Some(self.known.key.id())
    }

    async fn lookup_slot(&self, method: &str, deadline: Instant) -> Result<(), SlackError> {
        self.workspaces
            .read_slot(&self.pace, method, deadline)
            .await
    }
}
