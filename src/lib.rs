//! slack-once: a Slack Events API bot that answers every event exactly once, however many
//! copies of it arrive, by passing each event through one ledger (DynamoDB in production).

pub mod bot;
pub mod config;
pub mod envelope;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod ledger;
pub mod process;
pub mod server;
pub mod sign;
pub mod signature;
pub mod slack;

use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

use crate::bot::{Bot, ReferenceBot};
use crate::config::Config;
use crate::ledger::{DynamoLedger, Ledger, MemoryLedger};
use crate::process::Processor;
use crate::slack::SlackClient;

pub use crate::server::LocalServer;

/// The wired application: configuration, ledger, Slack client and bot, built once per process.
pub struct Application {
    config: Config,
    processor: Arc<Processor>,
    in_flight: TaskTracker,
}

impl Application {
    /// Wires the configured ledger (DynamoDB when `DEDUP_TABLE` is set, else in memory) and the
    /// reference bot.
    pub async fn build(config: Config) -> Self {
        Self::build_with_bot(config, Arc::new(ReferenceBot)).await
    }

    /// As [`Application::build`], with your own bot.
    pub async fn build_with_bot(config: Config, bot: Arc<dyn Bot>) -> Self {
        let ledger: Arc<dyn Ledger> = match &config.dedup_table {
            Some(table) => {
                tracing::info!(table = %table, "ledger: DynamoDB");
                Arc::new(DynamoLedger::from_env(table.clone()).await)
            }
            None => {
                tracing::info!(
                    "ledger: in memory (this process only; set DEDUP_TABLE to share one)"
                );
                Arc::new(MemoryLedger::new())
            }
        };
        Self::with_parts(config, ledger, bot)
    }

    /// Wires a given ledger and bot: the seam for tests and for users' own bots.
    pub fn with_parts(config: Config, ledger: Arc<dyn Ledger>, bot: Arc<dyn Bot>) -> Self {
        let slack = SlackClient::new(config.slack_api_url.clone(), config.bot_token.clone());
        let processor = Arc::new(Processor::new(
            config.signing_secrets.clone(),
            ledger,
            slack,
            bot,
            config.ttl,
            config.lease,
            config.function_version.clone(),
        ));
        Self {
            config,
            processor,
            in_flight: TaskTracker::new(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn router(&self) -> Router {
        http::router(http::AppState {
            processor: self.processor.clone(),
            in_flight: self.in_flight.clone(),
        })
    }

    /// Binds `LISTEN_ADDR` (port 0 picks a free port: see [`LocalServer::local_addr`]).
    pub async fn bind(self) -> std::io::Result<LocalServer> {
        let listener = TcpListener::bind(self.config.listen_addr).await?;
        Ok(LocalServer {
            listener,
            router: self.router(),
            in_flight: self.in_flight.clone(),
            max_connections: self.config.max_connections,
        })
    }
}
