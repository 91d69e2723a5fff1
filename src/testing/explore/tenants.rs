//! Who a schedule's requests come from: the explorer's apps and workspaces (one of each is the
//! explorer's own, the others the tenants beside it on the same ledger), their secrets and
//! their OAuth credentials.

use crate::testing::Identity;

/// The signing secret and the bot token of the explorer's app.
pub(crate) const SIGNING_SECRET: &str = "explorer-signing-secret";
pub(crate) const BOT_TOKEN: &str = "xoxb-explorer-T0TEST";

/// The apps a simulation's schedules draw from: two apps (two `api_app_id`s, bots and tokens).
pub(crate) const APPS: [&str; 2] = [crate::testing::APP_ID, "A0SECOND"];
/// The workspaces they are installed in.
pub(crate) const TEAMS: [&str; 2] = [crate::testing::TEAM, "T0SECOND"];

/// Who a schedule's requests come from: one of [`APPS`], in one of [`TEAMS`]. Its requests
/// name them, Slack's workspace is its, its bot token (or its installation's) is its own, and
/// the other tenants' state is on the same ledger beside its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Tenant {
    pub app_id: String,
    pub team: String,
    pub bot_id: String,
    pub bot_user: String,
    /// The bot token of a single-workspace install.
    pub token: String,
    /// The app's OAuth client id (multi-workspace mode).
    pub client_id: String,
}

impl Tenant {
    /// App `app` of [`APPS`] in workspace `team` of [`TEAMS`]; `(0, 0)` is the explorer's.
    pub(crate) fn of(app: usize, team: usize) -> Self {
        let (app, team) = (app % 2, team % 2);
        let (app_id, team_id) = (APPS[app], TEAMS[team]);
        let first = (app, team) == (0, 0);
        Self {
            app_id: app_id.into(),
            team: team_id.into(),
            bot_id: match first {
                true => crate::testing::BOT_ID.into(),
                false => crate::testing::bot_id_for(app_id, team_id),
            },
            bot_user: match first {
                true => crate::testing::BOT_USER.into(),
                false => crate::testing::bot_user_for(app_id, team_id),
            },
            token: match first {
                true => BOT_TOKEN.into(),
                false => format!("xoxb-explorer-{app_id}-{team_id}"),
            },
            client_id: match app {
                0 => CLIENT_ID.into(),
                _ => "1111.3333".into(),
            },
        }
    }

    /// The three other tenants: each other app in each workspace, and this app in the other.
    pub(crate) fn others(&self) -> Vec<Tenant> {
        (0..4)
            .map(|i| Tenant::of(i & 1, i >> 1))
            .filter(|t| t != self)
            .collect()
    }

    pub(crate) fn identity(&self) -> Identity {
        Identity {
            team: self.team.clone(),
            app_id: self.app_id.clone(),
            bot_id: self.bot_id.clone(),
            bot_user: self.bot_user.clone(),
        }
    }
}

/// The explorer's app's OAuth credentials (multi-workspace mode).
pub(crate) const CLIENT_ID: &str = "1111.2222";
pub(crate) const CLIENT_SECRET: &str = "explorer-client-secret";
