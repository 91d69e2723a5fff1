//! Testing a bot without Slack: [`TestBot`] runs an [`App`](crate::app::App) in-process on the in-memory ledger,
//! sends it signed events as Slack would, and points it at [`FakeSlack`], a Web API on
//! 127.0.0.1 that keeps what the bot wrote (messages, updates, deletions, reactions, every
//! call) and answers look-ups by metadata like Slack.
//!
//! ```no_run
//! # async fn demo() {
//! use slack_once::app::{App, Ctx, MessageEvent};
//! use slack_once::testing::TestBot;
//!
//! let app = App::new().message_where(|m: &MessageEvent| m.mention, |ctx: Ctx, _m| async move {
//!     ctx.reply("hello").await?;
//!     Ok(())
//! });
//! let bot = TestBot::start(app).await;
//! assert_eq!(bot.mention("hi").await, "answered");
//! assert_eq!(bot.slack().messages()[0]["text"], "hello");
//! # }
//! ```
#![warn(missing_docs)]

mod bot;
#[cfg(feature = "explore")]
pub mod explore;
mod functions;
mod oauth;
mod recorded;
mod scripts;
mod slack;
mod socket_mode;
pub mod wiring;
mod workspace;

pub use bot::{Acked, Actor, CHANNEL, TestBot, USER};
pub use functions::{StartedExecution, WORKFLOW_TOKEN_MS};
pub use oauth::{
    Exchange, OAuthGrants, TOKEN_LIFETIME_S, bot_id_for, bot_id_of, bot_user_for, bot_user_of,
};
pub use recorded::{RandomFaults, SlackFailure, SlackRequest};
pub use slack::{FakeSlack, IN_PROCESS_BASE, default_identity};
pub use socket_mode::{
    ACK_DEADLINE, CONNECTION_LIFETIME, Connection, ConnectionState, DEBUG_CONNECTION_LIFETIME,
    Delivery, EVENT_RETRIES, EnvelopeKind, EventCopy, EventDelivery, LostEnvelope, MAX_CONNECTIONS,
    NOTICE_GRACE, Notice, Recycling, SERVER_PING_INTERVAL, SocketAck, SocketMode,
};
pub use workspace::{Identity, OTHER_APP, PAGE_CAP, Workspace, hook_answer, micros};

/// The workspace a [`TestBot`] runs in: its team, its app and its bot.
pub const TEAM: &str = "T0TEST";
/// The app's id (`api_app_id`).
pub const APP_ID: &str = "A0TEST";
/// The bot's `bot_id`, on every message the app posts.
pub const BOT_ID: &str = "B0TEST";
/// The bot user's id: the author of the app's messages, and who a mention names.
pub const BOT_USER: &str = "U0BOT";
