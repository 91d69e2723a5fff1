//! slack-once: a Slack Events API bot that answers every event exactly once, however many
//! copies of it arrive, by passing each event through one ledger (DynamoDB in production).
#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]
#![warn(unnameable_types)]

/// `println!` for the tools' output, through [`tools::say`]: a reader that has gone
/// (`mybot --help | grep -q …`, `| head -1`) ends nothing with a panic.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::tools::say(format_args!($($arg)*))
    };
}

pub mod app;
mod aws;
pub mod clock;
pub mod config;
mod errors;
#[doc(hidden)]
pub mod fuzzing;
pub mod gateway;
mod hooks;
mod http;
mod journal;
mod keys;
pub mod ledger;
mod metrics;
mod net;
mod pipeline;
pub mod postgres;
pub mod queue;
mod reference;
mod run;
pub mod secrets;
mod server;
pub mod slack;
mod socket_mode;
mod stores;
#[cfg(feature = "testing")]
#[allow(clippy::too_many_lines)]
pub mod testing;
pub mod token_keys;
pub mod tools;
pub mod workspaces;

use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

use crate::app::App;
use crate::config::{Config, Role};
use crate::ledger::Ledger;
use crate::pipeline::{Processor, Settings};
use crate::workspaces::{InstallationStore, MemoryInstallations, Workspaces};

use crate::queue::WorkQueue;
use crate::queue::sqs::CallBudget;
use crate::queue::worker::Worker;
use crate::secrets::{Needs, SecretsError, SlackSecrets};
use crate::slack::SlackClient;

pub use crate::http::OUTCOME_HEADER;
pub use crate::reference::reference_app;
pub use crate::run::{VERSION, run, run_gateway, serve, usage};
pub use crate::server::LocalServer;

/// What can stop the start once the configuration is read.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The Slack secrets could not be read from Secrets Manager, or are not usable.
    #[error(transparent)]
    Secrets(#[from] SecretsError),
    /// Multi-workspace mode without a client secret, in the environment or the secret.
    #[error(
        "SLACK_CLIENT_ID is set and there is no client secret: set SLACK_CLIENT_SECRET, or keep client_secret in the secret SLACK_SECRETS_ARN names"
    )]
    NoClientSecret,
    /// The install flow's settings are missing or invalid (scopes, redirect URI).
    #[error(transparent)]
    Install(#[from] config::ConfigError),
    /// The PostgreSQL database (`DATABASE_URL`) could not be opened, or its schema is behind
    /// this release and not to be migrated (`DATABASE_MIGRATE=off`).
    #[error(transparent)]
    Database(#[from] crate::postgres::DatabaseError),
}

/// The wired application: configuration, ledger, Slack client, work queue and the bot's
/// [`App`], built once per process.
pub struct Application {
    config: Config,
    processor: Arc<Processor>,
    in_flight: TaskTracker,
    /// Routes served beside Slack's (the gateway's Web API proxy).
    routes: Option<Router>,
    /// The PostgreSQL database the stores are on (`DATABASE_URL`), whose pool a worker's
    /// queue shares.
    database: Option<crate::postgres::Database>,
}

impl Application {
    /// Wires the configured ledger (DynamoDB when `DEDUP_TABLE` is set, else in memory), the
    /// work queue (deferred mode, when `WORK_QUEUE_URL` is set), the Slack secrets (from
    /// Secrets Manager when `SLACK_SECRETS_ARN` is set) and the reference bot.
    pub async fn build(config: Config) -> Result<Self, StartError> {
        Self::build_with_app(config, reference_app()).await
    }

    /// As [`Application::build`], with your own [`App`].
    pub async fn build_with_app(config: Config, app: App) -> Result<Self, StartError> {
        // The secrets' read (the one network call of a start, when SLACK_SECRETS_ARN is set)
        // and the stores' opening overlap.
        let secrets = async {
            Ok::<_, SecretsError>(match &config.secrets_arn {
                Some(id) => {
                    // An ingress verifies; where events are answered on Lambda, the bot posts (in
                    // local mode a missing token logs each call instead).
                    let answers = config.role == Role::Worker || config.answers_synchronously();
                    // Multi-workspace mode: each installation has its token, the secret none.
                    let single = config.oauth.is_none();
                    let needs = Needs {
                        signing_secret: config.role == Role::Ingress,
                        bot_token: config.mode == config::Mode::Lambda && answers && single,
                        answers: answers && single,
                    };
                    SlackSecrets::from_manager(id, config.secrets_refresh, needs).await?
                }
                None => {
                    SlackSecrets::fixed(config.signing_secrets.clone(), config.bot_token.clone())
                }
            })
        };
        let stores = crate::stores::open(&config);
        // The ingress's queue (a worker opens its own to receive from).
        let sqs = async {
            match config.role {
                Role::Ingress => crate::stores::sqs_queue(&config, CallBudget::Ingress).await,
                Role::Worker => None,
            }
        };
        let (secrets, stores, sqs) = tokio::join!(secrets, stores, sqs);
        let (secrets, stores) = (secrets?, stores?);
        let queue = match (sqs, &stores.database, config.role) {
            (Some(queue), _, _) => Some(queue),
            (None, Some(database), Role::Ingress) => {
                crate::stores::postgres_queue(&config, database)
            }
            _ => None,
        };
        if let Some(queue) = &config.work_queue
            && config.role == Role::Ingress
        {
            tracing::info!(queue = %queue.describe(), "deferred mode: events go to the work queue");
        }
        if let Some(oauth) = &config.oauth
            && oauth.client_secret.is_none()
            && secrets.current().client_secret.is_none()
        {
            return Err(StartError::NoClientSecret);
        }
        let mut application = Self::assemble(config, Arc::new(secrets), stores.ledger, app, queue);
        application.database = stores.database;
        if let Some(store) = stores.installations {
            application = application.with_store(store);
        }
        if let Some(workspaces) = application.processor.workspaces() {
            workspaces.install_settings()?;
        }
        Ok(application)
    }

    /// Multi-workspace mode on `store` (the configuration's OAuth settings): each request is
    /// answered with its workspace's installation. Without `SLACK_CLIENT_ID`, unchanged.
    pub fn with_store(mut self, store: Arc<dyn InstallationStore>) -> Self {
        let Some(oauth) = self.config.oauth.clone() else {
            return self;
        };
        let processor = Arc::get_mut(&mut self.processor)
            .expect("the processor is not shared before the application serves");
        let workspaces = Workspaces::new(
            store,
            processor.base_slack().clone(),
            oauth,
            processor.secrets().clone(),
        );
        processor.set_workspaces(workspaces);
        self
    }

    /// The client for `team`'s installation (multi-workspace mode; `enterprise`: a Grid
    /// workspace may be served by its enterprise's org-wide install), or the one bot token's:
    /// for an app's own work outside a listener. `None`: the app is not installed there.
    pub async fn client_for(
        &self,
        team: &str,
        enterprise: Option<&str>,
    ) -> Result<Option<SlackClient>, crate::workspaces::StoreError> {
        match self.processor.workspaces() {
            Some(workspaces) => workspaces.client_for(team, enterprise).await,
            None => Ok(Some(self.processor.base_slack().clone())),
        }
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
        let secrets = SlackSecrets::fixed(config.signing_secrets.clone(), config.bot_token.clone());
        Self::assemble(config, Arc::new(secrets), ledger, app, queue)
    }

    fn assemble(
        config: Config,
        secrets: Arc<SlackSecrets>,
        ledger: Arc<dyn Ledger>,
        app: App,
        queue: Option<Arc<dyn WorkQueue>>,
    ) -> Self {
        let mut slack = SlackClient::with_secrets(config.slack_api_url.clone(), secrets.clone());
        if config.mode == config::Mode::Lambda {
            // A call logged would be taken for made: on Lambda it fails instead.
            slack = slack.calls_need_a_token();
        }
        let settings = Settings {
            ttl: config.ttl,
            lease: config.lease,
            version: config.function_version.clone(),
            metrics: if config.metrics {
                metrics::MetricsOut::Stdout
            } else {
                metrics::MetricsOut::Off
            },
        };
        let mut processor =
            Processor::new(ledger, slack, Arc::new(app), settings).with_secrets(secrets.clone());
        if let Some(queue) = queue {
            processor = processor.with_queue(queue);
        }
        if let Some(oauth) = &config.oauth {
            tracing::info!(
                client_id = %oauth.client_id,
                store = if config.database.is_some() {
                    "PostgreSQL"
                } else if config.dedup_table.is_some() {
                    "DynamoDB"
                } else {
                    "in memory"
                },
                "multi-workspace mode: each workspace's installation from the installation store"
            );
            if !config.shared_store()
                && (oauth.token_key_id.is_some() || oauth.token_keys.is_some())
            {
                tracing::info!(
                    "a token key is set but the installations are in this process's \
                     memory (no DATABASE_URL or DEDUP_TABLE): nothing is written at rest to seal"
                );
            }
            // Without a table: in memory (local mode; [`Self::with_store`] replaces it).
            let workspaces = Workspaces::new(
                Arc::new(MemoryInstallations::of_app(&oauth.client_id)),
                processor.base_slack().clone(),
                oauth.clone(),
                secrets,
            );
            processor = processor.with_workspaces(workspaces);
        }
        Self {
            config,
            processor: Arc::new(processor),
            in_flight: TaskTracker::new(),
            routes: None,
            database: None,
        }
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Deferred mode's work queue, as the configuration names it, for a caller with `budget`
    /// (on PostgreSQL, on the stores' pool); `None`: not deferred.
    pub(crate) async fn work_queue(&self, budget: CallBudget) -> Option<Arc<dyn WorkQueue>> {
        crate::stores::work_queue(&self.config, self.database.as_ref(), budget).await
    }

    /// The router, each delivery run inline (Lambda: the invocation is the request).
    pub fn router(&self) -> Router {
        self.with_own_routes(http::router(http::AppState {
            processor: self.processor.clone(),
            in_flight: None,
            readiness: None,
        }))
    }

    /// `slack-once gateway`: this application forwards to the bot `gateway` names, and serves
    /// the gateway's Web API proxy beside Slack's routes.
    pub fn with_gateway(mut self, gateway: Arc<gateway::Gateway>) -> Self {
        gateway.relay_through(self.processor.ledger().clone());
        self.routes = Some(gateway::routes(gateway, self.processor.clone()));
        self
    }

    fn with_own_routes(&self, router: Router) -> Router {
        match &self.routes {
            Some(routes) => router.merge(routes.clone()),
            None => router,
        }
    }

    /// The worker of deferred mode, on this application's ledger, Slack client and bot.
    pub fn worker(&self) -> Arc<Worker> {
        Arc::new(
            Worker::new(self.processor.clone(), self.config.max_receives)
                .with_poll_wait(self.config.worker_poll),
        )
    }

    /// Binds `LISTEN_ADDR` (port 0 picks a free port: see [`LocalServer::local_addr`]).
    pub async fn bind(self) -> std::io::Result<LocalServer> {
        let listener = TcpListener::bind(self.config.listen_addr).await?;
        // Local mode: clients can go away mid-request; deliveries run detached.
        let socket_mode = self.config.socket_mode.as_ref().map(|socket_mode| {
            socket_mode::SocketModeIngress::new(
                self.processor.clone(),
                socket_mode,
                &self.config.slack_api_url,
                self.config.lease,
                self.in_flight.clone(),
            )
        });
        let router = self.with_own_routes(http::router(http::AppState {
            processor: self.processor.clone(),
            in_flight: Some(self.in_flight.clone()),
            readiness: socket_mode.as_ref().map(|s| {
                let readiness = s.readiness();
                std::sync::Arc::new(move || readiness.ready()) as http::Readiness
            }),
        }));
        Ok(LocalServer {
            listener,
            router,
            in_flight: self.in_flight.clone(),
            max_connections: self.config.max_connections,
            socket_mode,
        })
    }
}
