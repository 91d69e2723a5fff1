//! `slack-once gateway`: exactly once for a bot in any language. The gateway is a bot of this
//! crate whose listeners forward each request, claimed, to the bot's own HTTP server (re-signed,
//! `forward.rs`), and whose Web API proxy (`proxy.rs`) makes every write the bot makes while
//! handling it a step of the request's journal (`writes.rs`). The contract with the bot is
//! `docs/gateway-protocol.md`; how to deploy it, `docs/gateway.md`.
//!
//! One run: the claim's listener opens the run (a name the bot sends back on each call) in
//! `Runs`, forwards, and, until the bot answers, makes the calls the proxy hands it, in the
//! order they arrive. A replica that fails before answering is followed by the next, under the
//! same claim (a run name of its own, so that the first's late calls are refused), its steps
//! numbered from the first again so that what the first made replays.

mod config;
mod forward;
mod proxy;
mod relay;
mod writes;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

pub use config::{GatewayConfig, GatewayConfigError, api_url_on};

use crate::app::{Ack, App, Ctx, HandlerResult, InteractiveListener, Listener};
use crate::slack::envelope::Event;
use crate::slack::interaction::{Interaction, Kind};
use forward::{BotAnswer, BotClient};
use relay::{Posted, Relay};
use writes::RunWrites;

/// The event types a message arrives under: each its own listener, so that a message's
/// `message` and `app_mention` both reach the bot, each once.
const MESSAGE_EVENT_TYPES: [&str; 2] = ["message", "app_mention"];
/// A forward to another replica is not started with less of the run's time left than this.
const LEAST_TIME_FOR_A_FORWARD: Duration = Duration::from_millis(300);

/// The gateway: its configuration, the bot's replicas, and the runs under way.
pub struct Gateway {
    config: GatewayConfig,
    /// The proxy's base URL the forwards name: the configured one, or the one on the address
    /// the gateway listens on.
    api_url: std::sync::OnceLock<String>,
    bot: BotClient,
    runs: Runs,
    /// The ledger's inboxes of runs: where a call of a run held by another process goes.
    relay: std::sync::OnceLock<Relay>,
    next_replica: AtomicUsize,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("bot_urls", &self.config.bot_urls)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// The gateway for `config`.
    pub fn new(config: GatewayConfig) -> Arc<Self> {
        let api_url = std::sync::OnceLock::new();
        if let Some(url) = &config.api_url {
            let _ = api_url.set(url.clone());
        }
        Arc::new(Self {
            api_url,
            bot: BotClient::new(),
            config,
            runs: Runs::default(),
            relay: std::sync::OnceLock::new(),
            next_replica: AtomicUsize::new(0),
        })
    }

    /// The gateway listens on `addr`: without `SLACK_ONCE_API_URL`, its proxy is reached there.
    pub fn listening_on(&self, addr: std::net::SocketAddr) {
        let _ = self.api_url.set(api_url_on(addr));
    }

    /// The gateway's runs are in `ledger`: a call of a run this process does not hold is handed
    /// to its holder there and, with `SLACK_ONCE_RELAY_CALLS`, this process's runs take calls
    /// from there.
    pub(crate) fn relay_through(&self, ledger: Arc<dyn crate::ledger::Ledger>) {
        let _ = self.relay.set(Relay::new(ledger));
    }

    /// Whether this process's runs take calls from the ledger too (`SLACK_ONCE_RELAY_CALLS`).
    pub fn relays_calls(&self) -> bool {
        self.config.relay_calls
    }

    /// Where this process's runs take calls from the ledger too.
    fn relay_for_runs(&self) -> Option<&Relay> {
        self.relay.get().filter(|_| self.config.relay_calls)
    }

    /// The app whose listeners forward every request to the bot: one per message event type,
    /// one for the changes of messages (each by its event id), one for every other event, one
    /// for every command and interaction.
    pub fn app(self: &Arc<Self>) -> App {
        let mut app = App::new();
        for kind in MESSAGE_EVENT_TYPES {
            let gateway = self.clone();
            app = app.listen(Listener::of_type(kind, move |ctx: Ctx, _: Event| {
                let gateway = gateway.clone();
                async move { gateway.run(ctx, None).await }
            }));
        }
        let gateway = self.clone();
        app = app.listen(Listener::message_changes(move |ctx: Ctx, _: Event| {
            let gateway = gateway.clone();
            async move { gateway.run(ctx, None).await }
        }));
        let gateway = self.clone();
        app = app.listen(Listener::of_types_other_than(
            &MESSAGE_EVENT_TYPES,
            move |ctx: Ctx, _: Event| {
                let gateway = gateway.clone();
                async move { gateway.run(ctx, None).await }
            },
        ));
        let gateway = self.clone();
        app.listen_interactive(InteractiveListener::any(
            move |ctx: Ctx, interaction: Interaction| {
                let gateway = gateway.clone();
                async move { gateway.run(ctx, Some(interaction.kind)).await }
            },
        ))
    }

    /// The replicas in the order this run tries them: each run starts at the next one, so
    /// that requests spread over them.
    fn replica_order(&self) -> Vec<&http::Uri> {
        let urls = &self.config.bot_urls;
        let first = self.next_replica.fetch_add(1, Ordering::Relaxed) % urls.len();
        urls.iter().cycle().skip(first).take(urls.len()).collect()
    }

    /// One run of a request: forwarded to a replica, the bot's calls made as they come, until
    /// a replica answers; then the acknowledgement the bot chose.
    async fn run(self: Arc<Self>, ctx: Ctx, kind: Option<Kind>) -> HandlerResult {
        // Deferred mode: the bot is a worker's to call, with the worker's lease.
        ctx.to_a_worker_from_the_ingress().await?;
        let Some((delivered, content_type)) = ctx.delivered() else {
            return Err("the request's body as Slack sent it is not at hand".into());
        };
        let body = forward::without_step_token(&delivered, content_type, &self.config.proxy_token);
        let mut writes = RunWrites::default();
        let mut answered = None;
        let mut unanswered = String::from("no replica was tried in the time left");
        for (n, url) in self.replica_order().into_iter().enumerate() {
            if n > 0 {
                if ctx.remaining() < LEAST_TIME_FOR_A_FORWARD {
                    break;
                }
                tracing::warn!(replica = %url, "forwarding to the next replica");
                ctx.run_again_from_first_step().await;
                writes.run_again();
            }
            // A run name of its own for each forward: a replica given up on may still be
            // running, and its late calls must end refused rather than be made as the next
            // replica's steps. Both are dropped when this forward's turn ends.
            let (calls, mut queued) = mpsc::channel(16);
            let run = self.runs.open(calls);
            let request = forward::Forward {
                url,
                run: run.name(),
                api_url: self.api_url.get().map_or("", String::as_str),
                secret: &self.config.secret,
                body: body.as_bytes(),
                content_type,
            };
            let relay = self.relay_for_runs();
            let deadline_ms = epoch_ms(ctx.deadline_at());
            if let Some(relay) = relay {
                relay
                    .open(run.name(), ctx.installation(), deadline_ms)
                    .await?;
            }
            let mut takes = relay::Takes::default();
            tracing::debug!(replica = %url, run = run.name(), "forwarding to the bot");
            let forwarded = self.bot.forward(&ctx, request);
            tokio::pin!(forwarded);
            let mut inbox = tokio::time::interval(relay::RELAY_POLL);
            inbox.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let result = loop {
                tokio::select! {
                    biased;
                    Some(call) = queued.recv() => writes.make(&ctx, call).await,
                    result = &mut forwarded => break result,
                    _ = inbox.tick(), if relay.is_some() => {
                        let relay = relay.expect("relaying");
                        relayed(relay, run.name(), false, &mut takes, &mut writes, &ctx, deadline_ms).await;
                    }
                }
            };
            // Calls that came in before the answer: the bot made them.
            while let Ok(call) = queued.try_recv() {
                writes.make(&ctx, call).await;
            }
            if let Some(relay) = relay {
                relayed(
                    relay,
                    run.name(),
                    true,
                    &mut takes,
                    &mut writes,
                    &ctx,
                    deadline_ms,
                )
                .await;
            }
            match result {
                Ok(answer) if answer.status.is_success() => {
                    answered = Some(answer);
                    break;
                }
                Ok(answer) => {
                    tracing::warn!(replica = %url, status = %answer.status, "the bot answered with a failure");
                    unanswered = format!("the bot answered HTTP {}", answer.status.as_u16());
                    if writes.failed_step().is_some() {
                        // It failed at a write: another replica would fail there too.
                        break;
                    }
                }
                Err(why) => {
                    tracing::warn!(replica = %url, reason = why, "the bot did not answer");
                    unanswered = format!("no replica of the bot answered ({why})");
                }
            }
        }
        match answered {
            Some(answer) => {
                if let Some(kind) = kind {
                    ctx.ack(acknowledgement(kind, &answer)).await?;
                }
                // The journal's own record of doubtful steps decides whether it is done.
                Ok(())
            }
            None => Err(writes.failure_or(&unanswered)),
        }
    }
}

/// Takes the calls in run `run`'s inbox (`closing`: and closes it), makes them in order, and
/// writes their answers. A ledger that fails leaves them to the next reading (`takes`: those a
/// take may have taken); a closing that fails again and again leaves them to their proxies,
/// which withdraw them once the run's deadline passed.
async fn relayed(
    relay: &Relay,
    run: &str,
    closing: bool,
    takes: &mut relay::Takes,
    writes: &mut RunWrites,
    ctx: &Ctx,
    deadline_ms: u64,
) {
    let taken = match relay.take(run, closing, takes).await {
        Ok(taken) => taken,
        Err(error) => {
            tracing::warn!(error = %error, "the run's inbox could not be read");
            return;
        }
    };
    for Posted { id, method, args } in taken {
        let (answer, answered) = oneshot::channel();
        writes
            .make(
                ctx,
                Call {
                    method,
                    args,
                    answer,
                },
            )
            .await;
        let answered = answered
            .await
            .unwrap_or_else(|_| Answered::error("slack_once_request_ended"));
        if let Err(error) = relay.answer(run, &id, &answered, deadline_ms).await {
            tracing::warn!(error = %error, "a relayed call's answer could not be written");
        }
    }
}

fn epoch_ms(at: std::time::SystemTime) -> u64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The acknowledgement Slack gets for a command or an interaction: the bot's answer where
/// Slack reads one.
fn acknowledgement(kind: Kind, answer: &BotAnswer) -> Ack {
    let text = String::from_utf8_lossy(&answer.body);
    let text = text.trim();
    if text.is_empty() {
        return Ack::Empty;
    }
    let json: Option<Value> = serde_json::from_str(text).ok().filter(Value::is_object);
    match kind {
        Kind::Command | Kind::Shortcut | Kind::MessageShortcut => match json {
            Some(message) => Ack::Message(message),
            None => Ack::Message(serde_json::json!({ "text": text })),
        },
        Kind::ViewSubmission => match json {
            Some(action) if action.get("response_action").is_some() => Ack::ResponseAction(action),
            _ => Ack::Empty,
        },
        Kind::BlockSuggestion => Ack::Options(json.unwrap_or_else(|| serde_json::json!({}))),
        Kind::BlockActions | Kind::ViewClosed => Ack::Empty,
    }
}

/// A call of the bot's, handed by the proxy to the run it names.
pub(crate) struct Call {
    /// The Web API method, or [`writes::RESPOND_METHOD`].
    pub method: String,
    /// Its arguments, as one JSON object.
    pub args: Value,
    /// Where its answer goes.
    pub answer: oneshot::Sender<Answered>,
}

/// The proxy's answer to one call: Slack's answer, or the gateway's Slack-shaped error
/// (always HTTP 200, so that no SDK retries it).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Answered(pub Value);

impl Answered {
    fn ok(body: Value) -> Self {
        Self(body)
    }

    fn error(code: &str) -> Self {
        Self(serde_json::json!({"ok": false, "error": code}))
    }
}

/// The runs under way in this process, by name: where the proxy hands a call.
#[derive(Default)]
pub(crate) struct Runs {
    live: Mutex<HashMap<String, mpsc::Sender<Call>>>,
}

impl Runs {
    /// A run, named by a fresh random name, open until the guard drops.
    fn open(&self, calls: mpsc::Sender<Call>) -> OpenRun<'_> {
        let name = uuid::Uuid::new_v4().simple().to_string();
        self.live
            .lock()
            .expect("runs lock")
            .insert(name.clone(), calls);
        OpenRun { runs: self, name }
    }

    /// Where the calls of run `name` go, while it is open.
    pub(crate) fn calls_of(&self, name: &str) -> Option<mpsc::Sender<Call>> {
        self.live.lock().expect("runs lock").get(name).cloned()
    }
}

/// A run open in [`Runs`]; closed when dropped, so that a later call is refused.
struct OpenRun<'a> {
    runs: &'a Runs,
    name: String,
}

impl OpenRun<'_> {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for OpenRun<'_> {
    fn drop(&mut self) {
        self.runs.live.lock().expect("runs lock").remove(&self.name);
    }
}

pub(crate) use proxy::routes;
