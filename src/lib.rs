//! slack-once: a Slack Events API bot that answers every event exactly once, however many
//! copies of it arrive, by passing each event through one ledger (DynamoDB in production).

pub mod app;
pub mod config;
pub mod envelope;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod ledger;
pub mod process;
pub mod queue;
mod run;
pub mod server;
pub mod sign;
pub mod signature;
pub mod slack;
pub mod testing;

use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

use crate::app::{reference_app, App};
use crate::config::{Config, Role};
use crate::ledger::{DynamoLedger, Ledger, MemoryLedger};
use crate::process::{Processor, Settings};
use crate::queue::sqs::CallBudget;
use crate::queue::worker::Worker;
use crate::queue::{SqsQueue, WorkQueue};
use crate::slack::SlackClient;

pub use crate::run::{run, serve};
pub use crate::server::LocalServer;

/// The wired application: configuration, ledger, Slack client, work queue and the bot's
/// [`App`], built once per process.
pub struct Application {
    config: Config,
    processor: Arc<Processor>,
    in_flight: TaskTracker,
}

impl Application {
    /// Wires the configured ledger (DynamoDB when `DEDUP_TABLE` is set, else in memory), the
    /// work queue (deferred mode, when `WORK_QUEUE_URL` is set) and the reference bot.
    pub async fn build(config: Config) -> Self {
        Self::build_with_app(config, reference_app()).await
    }

    /// As [`Application::build`], with your own [`App`].
    pub async fn build_with_app(config: Config, app: App) -> Self {
        let ledger: Arc<dyn Ledger> = match &config.dedup_table {
            Some(table) => {
                tracing::info!(table = %table, "ledger: DynamoDB");
                Arc::new(DynamoLedger::from_env(table.clone()).await)
            }
            None => {
                if config.answers_synchronously() {
                    tracing::info!(
                        "ledger: in memory (this process only; set DEDUP_TABLE to share one)"
                    );
                }
                Arc::new(MemoryLedger::new())
            }
        };
        let queue: Option<Arc<dyn WorkQueue>> = match (&config.work_queue_url, config.role) {
            (Some(url), Role::Ingress) => {
                tracing::info!(queue = %url, "deferred mode: events go to the work queue");
                Some(Arc::new(
                    SqsQueue::from_env(url.clone(), CallBudget::Ingress).await,
                ))
            }
            _ => None,
        };
        Self::with_queue(config, ledger, app, queue)
    }

    /// Wires a given ledger and app: the seam for tests.
    pub fn with_parts(config: Config, ledger: Arc<dyn Ledger>, app: App) -> Self {
        Self::with_queue(config, ledger, app, None)
    }

    /// As [`Application::with_parts`], with the ingress's work queue (deferred mode).
    pub fn with_queue(
        config: Config,
        ledger: Arc<dyn Ledger>,
        app: App,
        queue: Option<Arc<dyn WorkQueue>>,
    ) -> Self {
        let slack = SlackClient::new(config.slack_api_url.clone(), config.bot_token.clone());
        let settings = Settings {
            ttl: config.ttl,
            lease: config.lease,
            version: config.function_version.clone(),
        };
        let mut processor = Processor::new(ledger, slack, Arc::new(app), settings);
        if let Some(secrets) = config.signing_secrets.clone() {
            processor = processor.with_secrets(secrets);
        }
        if let Some(queue) = queue {
            processor = processor.with_queue(queue);
        }
        Self {
            config,
            processor: Arc::new(processor),
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

    /// The worker of deferred mode, on this application's ledger, Slack client and bot.
    pub fn worker(&self) -> Arc<Worker> {
        Arc::new(Worker::new(
            self.processor.clone(),
            self.config.max_receives,
        ))
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
