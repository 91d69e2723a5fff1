//! One schedule, run: a runtime of its own on virtual time, the world, Slack's deliveries of
//! each copy of the request (and its retries), the queue's receives, every run a process of
//! its own, killed at its deadline as Lambda kills it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use super::end::{End, RunView, StateView, at_once};
use super::ledger::SimLedger;
use super::request::{Copy, Request, prepare};
use super::schedule::Story;
use super::slack::{SimQueue, SimSlack};
use super::store::Store;
use super::tenants::{APPS, CLIENT_SECRET, SIGNING_SECRET, TEAMS, Tenant};
use super::world::RUN;
use super::world::{Plan, RunEnd, RunKind, World, current};
use crate::app::App;
use crate::config::{Secret, SigningSecrets};
use crate::http::AppState;
use crate::metrics::{Metrics, MetricsOut};
use crate::net::Connector;
use crate::pipeline::{Processor, Settings};
use crate::queue::Received;
use crate::queue::worker::{Disposition, Worker};
use crate::secrets::SlackSecrets;
use crate::slack::SlackClient;
use crate::testing::{FakeSlack, IN_PROCESS_BASE};

/// Builds the bot, once per process.
pub type AppFactory = Arc<dyn Fn() -> App + Send + Sync>;

/// The schedule starts at 2026-01-01 00:00:01 UTC (virtual).
const START: u64 = 1_767_225_601;
/// Slack waits this long for a 2xx.
const SLACK_WAITS: Duration = Duration::from_secs(3);
/// Slack's retries: nearly at once, after a minute, after five (after the failure it saw).
const RETRY_AFTER: [Duration; 3] = [
    Duration::from_secs(1),
    Duration::from_secs(60),
    Duration::from_secs(300),
];
/// Socket Mode: an unacknowledged event is redelivered as soon as its 3 s are out, up to 3
/// times (`retry_attempt` 1..3, `retry_reason` `timeout`); a command or an interaction never.
const SOCKET_RETRY_AFTER: Duration = Duration::ZERO;
/// A queued message reaches a worker this long after it is sent.
const RECEIVE_AFTER: Duration = Duration::from_millis(20);
/// Nothing of a request's life lasts longer (virtual time): past it, what still runs is cut.
const HORIZON: Duration = Duration::from_secs(6 * 3600);

/// One request of an exploration, and when it is sent.
#[derive(Clone, Debug)]
pub(crate) struct Step {
    pub request: Request,
    pub start: Start,
}

/// When a request of an exploration is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// At once (the first request; every request of [`super::Explorer::together`]).
    AtOnce,
    /// After the one before ([`super::Explorer::sequence`]): a click on a message or the
    /// submission of a view once the bot's message or view is there (and the person took 5 s
    /// to read it); any other request 30 s after the one before was sent.
    AfterPrevious,
}

/// A later request of a sequence is sent this long after the one before.
const THEN_AFTER: Duration = Duration::from_secs(30);
/// A person clicks (submits) this long after the message (view) is there.
const READS_FOR: Duration = Duration::from_secs(5);

/// What the world holds before the first request.
#[derive(Clone, Debug, Default)]
pub(crate) struct Seeds {
    /// State values: (name, shared by every workspace, the value).
    pub state: Vec<(String, bool, Value)>,
    /// Messages in Slack (people's, the bot's earlier ones).
    pub messages: Vec<Value>,
    /// Workflow Builder step executions running: (callback id, inputs).
    pub executions: Vec<(String, Value)>,
}

/// The name under which each other tenant holds a state value on the schedule's ledger: it
/// must be as seeded at the end (never written nor deleted by this tenant's requests).
pub(crate) const OTHER_TENANTS_STATE: &str = "count";

/// What stays the same across the schedules of one exploration.
#[derive(Clone)]
pub(crate) struct Spec {
    /// The exploration's id (the side door's).
    pub explorer: u64,
    pub steps: Vec<Step>,
    pub seeds: Seeds,
    pub deferred: bool,
    pub app: AppFactory,
    pub old_app: Option<AppFactory>,
    /// An ingress's invocation timeout (the template's: 10 s): its lease.
    pub timeout: Duration,
    /// A worker's (the template's default: 120 s); the queue hides a message six times it.
    pub worker_timeout: Duration,
    pub max_receives: u32,
    /// People's messages that follow each of the bot's first post in a conversation.
    pub busy: usize,
    /// Slack's 2025 history limit: one `conversations.history` (and one `.replies`) a minute.
    pub history_per_minute: bool,
    /// Multi-workspace mode: installed through OAuth, its token with this long left.
    pub installed: Option<Duration>,
    /// Whose requests they are (the explorer's: [`Tenant::of`] `(0, 0)`).
    pub tenant: Tenant,
    /// A defect planted, for checking the checker: each process is given another app's bot
    /// token (single-workspace mode).
    pub other_apps_token: bool,
    /// A defect planted in the ledger, for checking the checker: a workspace's state value is
    /// read and written under the other workspace's key.
    pub state_of_other_workspace: bool,
    /// An operator redrives the dead-letter queue [`REDRIVE_AFTER`] after a message lands
    /// there (once): the simulation's, as the soak's redrive at its end.
    pub redrive: bool,
    /// A defect planted in the runtime, for checking the checker: each process is told its
    /// deadline is this much later than the one it is killed at, so its claims' leases
    /// outlive it (zero: none).
    pub lease_past_deadline: Duration,
    /// A defect planted in the ledger, for checking the checker: a run that took a claim
    /// over (its attempt above 1) has its completion or release dropped, answered as if made.
    pub drop_takeover_finish: bool,
    /// Slack delivers over Socket Mode ([`super::Explorer::socket_mode`]): each delivery an
    /// envelope to a connection of a long-lived process, through the Socket Mode dispatch.
    pub socket_mode: bool,
    /// A defect planted in the Socket Mode dispatch, for checking the checker: an event found
    /// held by another delivery is let go at once, not kept in hand.
    pub socket_lets_held_go: bool,
    /// Where each schedule's ledger is: a new one in memory, or on PostgreSQL.
    pub store: Store,
}

/// An operator redrives a dead letter this long after it lands in the dead-letter queue.
pub(crate) const REDRIVE_AFTER: Duration = Duration::from_secs(3600);

struct Shared {
    spec: Arc<Spec>,
    world: Arc<World>,
    /// Multi-workspace mode: the installation store every process shares.
    installations: Arc<crate::workspaces::MemoryInstallations>,
    tracker: TaskTracker,
    story: Story,
    logs: Arc<Mutex<Vec<u8>>>,
    /// Copies sent so far (each copy's deliveries are a chain).
    chains: Mutex<usize>,
    /// Each request's tasks (its deliveries, its queued messages' receives).
    trackers: Mutex<BTreeMap<usize, TaskTracker>>,
}

impl Shared {
    /// Runs `task` as one of `request`'s.
    fn spawn_for<T: Send + 'static>(
        &self,
        request: usize,
        task: impl std::future::Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        let tracker = self
            .trackers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(request)
            .or_default()
            .clone();
        self.tracker.spawn(tracker.track_future(task))
    }

    /// Whether every task of `request` has ended.
    fn request_over(&self, request: usize) -> bool {
        self.trackers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&request)
            .is_none_or(|t| t.is_empty())
    }
}

/// The world before the first request: the seeded state values and messages.
fn seed(spec: &Spec, world: &World) {
    let tenant = spec.installed.map(|_| spec.tenant.team.as_str());
    let now = crate::clock::now_ms();
    // The other tenants' values, on the same ledger (the app's state is per app, and per
    // workspace in multi-workspace mode).
    let others: Vec<(String, Option<String>)> = spec
        .tenant
        .others()
        .into_iter()
        .map(|t| (t.app_id, spec.installed.map(|_| t.team)))
        .filter(|(app, team)| *app != spec.tenant.app_id || team.is_some())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let seeded = spec
        .seeds
        .state
        .iter()
        .map(|(name, shared, value)| {
            let app = spec.tenant.app_id.clone();
            let team = if *shared {
                None
            } else {
                tenant.map(str::to_string)
            };
            (app, team, name.clone(), value.clone())
        })
        .chain(others.into_iter().map(|(app, team)| {
            let value = Value::from(other_tenants_value(&app, team.as_deref()));
            (app, team, OTHER_TENANTS_STATE.to_string(), value)
        }));
    for (app, team, name, value) in seeded {
        let key = crate::app::state_key(Some(&app), team.as_deref(), &name).expect("a state key");
        let text = value.to_string();
        let write = crate::ledger::StateWrite {
            value: &text,
            expected: 0,
            writer: "seeded",
            read_writers: &[],
            expires_at_s: now / 1000 + 30 * 86_400,
            request: None,
        };
        let ledger = world.ledger.clone();
        let key_text = key.as_str().to_string();
        let written = at_once(async move { ledger.put_state(&key, &write, now).await });
        if app != spec.tenant.app_id || team.as_deref().is_some_and(|t| Some(t) != tenant) {
            world.lock().other_tenants.push((key_text, text));
        }
        assert!(
            matches!(written, Ok(crate::ledger::StatePut::Written { .. })),
            "Explorer::with_state({name:?}): seeded twice"
        );
    }
    for message in &spec.seeds.messages {
        world
            .slack
            .with_workspace(|w| w.add_message(message.clone()));
    }
    for (callback_id, inputs) in &spec.seeds.executions {
        world.slack.start_execution(callback_id, inputs.clone());
    }
}

/// What another tenant (`app`, in `team` in multi-workspace mode) holds under
/// [`OTHER_TENANTS_STATE`] before the schedule: a count of its own, unlike any other's.
fn other_tenants_value(app: &str, team: Option<&str>) -> u64 {
    1000 + 100 * u64::from(app != APPS[0]) + 10 * u64::from(team.is_some_and(|t| t != TEAMS[0]))
}

/// Sends each request of the exploration when its time comes (see [`Start`]).
async fn send_all(shared: Arc<Shared>) {
    let world = shared.world.clone();
    let origin = IN_PROCESS_BASE.trim_end_matches("/api").to_string();
    let mut previous: Option<Instant> = None;
    for (n, step) in shared.spec.steps.iter().enumerate() {
        let waits = step.request.waits_for_slack();
        if let (Start::AfterPrevious, Some(sent)) = (step.start, previous) {
            if waits {
                // The person clicks (submits) what the bot showed, once it is there, while
                // the request before may still be running (a takeover, a retry).
                let at_once = world
                    .slack
                    .with_workspace(|w| step.request.ready(w))
                    .is_some();
                loop {
                    let there = world.slack.with_workspace(|w| {
                        step.request.ready(w).unwrap_or_else(|| {
                            prepare(&step.request, n, w, crate::clock::now_ms(), &origin).is_ok()
                        })
                    });
                    if there || shared.request_over(n - 1) {
                        break;
                    }
                    // A stop is pressed while the answer streams: looked for more often.
                    let poll = if at_once { 100 } else { 1000 };
                    tokio::time::sleep(Duration::from_millis(poll)).await;
                }
                if !at_once {
                    tokio::time::sleep(READS_FOR).await;
                }
            } else {
                tokio::time::sleep_until(sent + THEN_AFTER).await;
            }
        }
        let before = world.shown();
        let prepared = world
            .slack
            .with_workspace(|w| prepare(&step.request, n, w, crate::clock::now_ms(), &origin));
        world.made_by(n, &before);
        match prepared {
            Err(why) => {
                world.say(
                    None,
                    format!("{} is not sent: {why}", step.request.describe()),
                );
                world.lock().by_request.unsent.insert(n, why);
            }
            Ok(prepared) => {
                {
                    let mut s = world.lock();
                    if let Some(pair) = prepared.phantom {
                        s.by_request.phantoms.push(pair);
                    }
                    if let Some(execution) = prepared.execution {
                        s.by_request.executions.insert(n, execution);
                    }
                }
                if shared.spec.steps.len() > 1 {
                    world.say(
                        None,
                        format!("request {}: {}", n + 1, step.request.describe()),
                    );
                }
                for copy in prepared.copies {
                    let chain = {
                        let mut chains = shared.chains.lock().unwrap_or_else(|e| e.into_inner());
                        *chains += 1;
                        *chains - 1
                    };
                    drop(shared.spawn_for(n, deliveries(shared.clone(), n, chain, copy)));
                }
            }
        }
        previous = Some(Instant::now());
    }
}

/// Runs one schedule (its story, its plan of faults), on a runtime of its own.
pub(crate) fn run(spec: Arc<Spec>, story: Story, plan: Plan, logs: Arc<Mutex<Vec<u8>>>) -> End {
    // With I/O: a bot's own HTTP client reaches the side door ([`super::door`]); its threads
    // (a blocking task of the bot's) named after the schedule, so that the door knows them.
    let (door_id, threads) = super::door::reserve();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .thread_name(threads)
        .enable_time()
        .enable_io()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let end = runtime.block_on(async move {
        let _clock = crate::clock::simulate(UNIX_EPOCH + Duration::from_secs(START));
        let tenant = &spec.tenant;
        let mut slack = FakeSlack::in_process(tenant.identity());
        let installations = Arc::new(crate::workspaces::MemoryInstallations::of_app(
            &tenant.client_id,
        ));
        if let Some(left) = spec.installed {
            slack = slack.with_oauth(&tenant.client_id, CLIENT_SECRET);
            install(&slack, &installations, tenant, left).await;
        }
        let mut world = World::new(plan, slack, spec.store.ledger());
        world.busy = spec.busy;
        world.history_per_minute = spec.history_per_minute;
        let _ = world.door_id.set(door_id);
        let world = Arc::new(world);
        super::door::register(&world, spec.explorer);
        seed(&spec, &world);
        super::hooks::install();
        current::set(Some(world.clone()));
        let shared = Arc::new(Shared {
            spec,
            world: world.clone(),
            installations,
            tracker: TaskTracker::new(),
            story,
            logs,
            chains: Mutex::new(0),
            trackers: Mutex::new(BTreeMap::new()),
        });
        shared.tracker.spawn(send_all(shared.clone()));
        shared.tracker.close();
        let unfinished = tokio::time::timeout(HORIZON, shared.tracker.wait())
            .await
            .is_err();
        current::set(None);
        super::door::forget(&world);
        collect(&shared, unfinished)
    });
    drop(runtime);
    end
}

/// Installs the app in the workspace (a person approved it; its token has `left`): what the
/// install flow would store.
async fn install(
    slack: &FakeSlack,
    store: &crate::workspaces::MemoryInstallations,
    tenant: &Tenant,
    left: Duration,
) {
    use crate::workspaces::InstallationStore;
    let now = crate::clock::now_ms();
    let answer = slack.with_grants(|g| {
        g.set_lifetime(left.as_secs());
        let code = g.grant(&tenant.team, "chat:write,commands", "", true);
        let answer = g.exchange(
            &serde_json::json!({"client_id": tenant.client_id, "client_secret": CLIENT_SECRET, "code": code}),
            now,
        );
        g.set_lifetime(crate::testing::TOKEN_LIFETIME_S);
        answer
    });
    let mut installation = crate::workspaces::oauth::installation_of(&answer, now)
        .expect("the exchange answers a token");
    installation.bot_id = Some(tenant.bot_id.clone());
    installation.bot_user_id = Some(tenant.bot_user.clone());
    store.save(&installation).await.expect("kept");
}

/// Multi-workspace mode: whether the installation still works at the end.
fn installation_at_end(shared: &Shared) -> Option<Result<(), String>> {
    shared.spec.installed?;
    let all = shared.installations.all();
    let Some(stored) = all.first() else {
        return Some(Err("the installation is gone".into()));
    };
    if let Some(code) = &stored.broken {
        return Some(Err(format!("the installation was marked broken ({code})")));
    }
    let now = crate::clock::now_ms();
    let token = stored.installation.bot.token.clone();
    let refresh = stored.installation.bot.refresh_token.clone();
    Some(shared.world.slack.with_grants(|g| {
        // A token may expire after the request's life; the refresh token must still work.
        match refresh.as_deref().map(|r| g.refresh_is_live(r)) {
            Some(true) => Ok(()),
            None if g.is_live(&token, now) => Ok(()),
            None => Err("the stored token no longer works".into()),
            Some(false) => Err(
                "the stored refresh token no longer works: the installation \
                                cannot be refreshed again"
                    .into(),
            ),
        }
    }))
}

fn collect(shared: &Shared, unfinished: bool) -> End {
    let world = &shared.world;
    let slack = &world.slack;
    let faults = world.faults();
    let issued = shared
        .spec
        .installed
        .map(|_| slack.with_grants(|g| g.secrets_of(&shared.spec.tenant.team)));
    let installation = installation_at_end(shared);
    let s = world.lock();
    let runs = s
        .runs
        .iter()
        .enumerate()
        .map(|(i, r)| RunView {
            number: i as u32 + 1,
            request: r.request,
            label: r.label.clone(),
            kind: r.kind.clone(),
            started: r.started,
            ended_at: r.ended_at,
            end: r.end.clone(),
            counts: r.counts.clone(),
            sites: r.sites_seen.clone(),
        })
        .collect();
    let logs = String::from_utf8_lossy(&std::mem::take(
        &mut *shared.logs.lock().unwrap_or_else(|e| e.into_inner()),
    ))
    .lines()
    .map(str::to_string)
    .collect();
    End {
        requests: shared
            .spec
            .steps
            .iter()
            .map(|s| s.request.describe())
            .collect(),
        by_request: s.by_request.clone(),
        state: StateView {
            ledger: world.ledger.clone().at_end(crate::clock::now_ms()),
            app: shared.spec.tenant.app_id.clone(),
            tenant: shared
                .spec
                .installed
                .map(|_| shared.spec.tenant.team.clone()),
            now_ms: crate::clock::now_ms(),
        },
        runs,
        messages: super::check::merge_parts(slack.messages()),
        ephemerals: slack.ephemerals(),
        views: slack.views(),
        reactions: slack.reactions(),
        assistant: slack.assistant_calls(),
        calls: slack.calls(),
        ledger: world
            .ledger
            .statuses()
            .into_iter()
            .map(|(k, s)| (k.as_str().to_string(), s))
            .collect(),
        logs,
        dead_letters: s.dead_letters.len(),
        dead_lettered: s.dead_letters.clone(),
        redriven: s.redriven.clone(),
        groups: {
            let mut groups: Vec<Vec<usize>> = Vec::new();
            for (i, step) in shared.spec.steps.iter().enumerate() {
                match (step.start, groups.last_mut()) {
                    (Start::AtOnce, Some(group)) => group.push(i),
                    _ => groups.push(vec![i]),
                }
            }
            groups
        },
        queued: s.queued.clone(),
        trace: s.trace.clone(),
        violations: s.violations.clone(),
        tokens: s.tokens.clone(),
        issued,
        installation,
        faults,
        unfinished,
        acks: s.acks.clone(),
        struck: s.struck.clone(),
        executions: slack.executions(),
        execution_tokens: slack.with_workspace(|w| w.executions.issued()),
        agents: slack.with_workspace(|w| super::check::agent_invariants(w)),
        tenant: shared.spec.tenant.clone(),
        other_tenants: s.other_tenants.clone(),
        state_keys: s.state_keys.clone(),
        kept_in_hand: shared
            .spec
            .steps
            .iter()
            .map(|step| shared.spec.socket_mode && step.request.is_event())
            .collect(),
    }
}

/// The counts of a run's metrics lines.
fn counts_of(lines: &Mutex<Vec<String>>) -> BTreeMap<String, f64> {
    let mut counts = BTreeMap::new();
    for line in lines.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        for (name, value) in fields {
            if let Some(n) = value.as_f64() {
                *counts.entry(name).or_insert(0.0) += n;
            }
        }
    }
    counts
}

/// What a run's metrics say became of its request.
fn outcome_of(counts: &BTreeMap<String, f64>) -> String {
    const OUTCOMES: &[(&str, &str)] = &[
        ("Answered", "answered"),
        ("Recovered", "recovered"),
        ("NoReply", "no_reply"),
        ("NoListener", "no_listener"),
        ("Duplicate", "duplicate"),
        ("Failed", "failed"),
        ("AlreadyFailed", "already_failed"),
        ("InProgress", "in_progress"),
        ("Skipped", "skipped"),
        ("Ignored", "ignored"),
    ];
    for (metric, outcome) in OUTCOMES {
        if counts.contains_key(*metric) {
            return outcome.to_string();
        }
    }
    const ERRORS: &[&str] = &[
        "LedgerErrors",
        "SlackErrorsAmbiguous",
        "SlackErrorsTransient",
        "SlackLookupUnavailable",
        "ListenerErrors",
        "NondeterministicListeners",
        "JournalFull",
        "DeadlineExceeded",
        "QueueErrors",
    ];
    ERRORS
        .iter()
        .find(|e| counts.contains_key(**e))
        .map(|e| format!("error ({e})"))
        .unwrap_or_else(|| "unknown".into())
}

/// Which process a run is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Ingress,
    Worker,
}

impl Shared {
    /// A process for `run`: the bot (the old version's for the first run of a deploy), on the
    /// schedule's ledger and Slack (and queue, for a deferred ingress).
    fn processor(
        self: &Arc<Self>,
        run: u32,
        role: Role,
    ) -> (Arc<Processor>, Arc<Mutex<Vec<String>>>) {
        let old = self.story == Story::Deploy && run == 1;
        let app = match (&self.spec.old_app, old) {
            (Some(old_app), true) => old_app(),
            _ => (self.spec.app)(),
        };
        let version = match (self.story, old) {
            (Story::Deploy, true) => "v1",
            (Story::Deploy, false) => "v2",
            _ => "v1",
        };
        let secrets = Arc::new(SlackSecrets::fixed(
            Some(SigningSecrets::parse(SIGNING_SECRET).expect("a valid secret")),
            match self.spec.installed {
                Some(_) => None,
                // The planted defect: another app's token.
                None if self.spec.other_apps_token => Some(Secret::new(
                    Tenant::of(usize::from(self.spec.tenant.app_id == APPS[0]), 0).token,
                )),
                None => Some(Secret::new(self.spec.tenant.token.as_str())),
            },
        ));
        let connector = Connector::Memory(crate::net::serve_http(SimSlack {
            world: self.world.clone(),
            run,
        }));
        let slack = SlackClient::with_connector(IN_PROCESS_BASE, secrets.clone(), connector);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let settings = Settings {
            ttl: Duration::from_secs(90_000),
            lease: match role {
                Role::Ingress if self.spec.socket_mode => self.socket_lease(),
                _ => Duration::from_secs(30),
            },
            version: version.into(),
            metrics: MetricsOut::Kept(lines.clone()),
        };
        // As the template deploys it, a single-workspace deferred ingress has no table: its
        // ledger is its own memory, gone with it (what a listener keeps there is lost).
        let ledger: Arc<dyn crate::ledger::Ledger> =
            if role == Role::Ingress && self.spec.deferred && self.spec.installed.is_none() {
                Arc::new(crate::ledger::MemoryLedger::new())
            } else {
                Arc::new(SimLedger {
                    world: self.world.clone(),
                    run,
                    drop_takeover_finish: self.spec.drop_takeover_finish,
                    state_of_other_workspace: self
                        .spec
                        .state_of_other_workspace
                        .then(|| self.spec.tenant.team.clone()),
                    took_over: Default::default(),
                })
            };
        let workspaces = self.spec.installed.map(|_| {
            let oauth = crate::config::OAuthConfig {
                client_id: self.spec.tenant.client_id.clone(),
                client_secret: Some(Secret::new(CLIENT_SECRET)),
                scopes: vec!["chat:write".into(), "commands".into()],
                user_scopes: Vec::new(),
                redirect_uri: None,
                refresh_before: crate::config::DEFAULT_TOKEN_REFRESH,
                // With Slack's history limit, look-ups are paced through the store, as
                // SLACK_HISTORY_READS_PER_MINUTE's default does.
                history_reads_per_minute: u32::from(self.spec.history_per_minute),
                token_key_id: None,
                token_keys: None,
                app_id: None,
            };
            crate::workspaces::Workspaces::new(
                Arc::new(super::ledger::SimInstallations {
                    world: self.world.clone(),
                    run,
                    store: self.installations.clone(),
                }),
                slack.clone(),
                oauth,
                secrets.clone(),
            )
        });
        let mut processor =
            Processor::new(ledger, slack, Arc::new(app), settings).with_secrets(secrets);
        if let Some(workspaces) = workspaces {
            processor = processor.with_workspaces(workspaces);
        }
        if role == Role::Ingress && self.spec.deferred {
            let shared = self.clone();
            let request = self.world.request_of(run);
            let sent = Arc::new(move |body: String| {
                let index = {
                    let mut s = shared.world.lock();
                    s.queued.push(body.clone());
                    s.by_request.queued_by.push(request);
                    s.queued.len() - 1
                };
                let shared2 = shared.clone();
                drop(shared.spawn_for(request, receives(shared2, request, index, body)));
            });
            processor = processor.with_queue(Arc::new(SimQueue {
                world: self.world.clone(),
                run,
                sent,
            }));
        }
        (Arc::new(processor), lines)
    }

    /// A Socket Mode ingress's lease, as its configuration defaults it: 10 s where it answers
    /// events itself, 30 s where it hands them to the work queue.
    fn socket_lease(&self) -> Duration {
        match self.spec.deferred {
            true => crate::config::DEFAULT_LEASE,
            false => crate::config::DEFAULT_SOCKET_LEASE,
        }
    }

    /// Kills `run` at `deadline` unless it has ended (Lambda stops an invocation at its
    /// timeout).
    fn kill_at(self: &Arc<Self>, run: u32, deadline: Instant) {
        let world = self.world.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(deadline).await;
            let ended = world.lock().runs[run as usize - 1].end.is_some();
            if !ended {
                world.die(run, "killed at its deadline");
            }
        });
    }
}

/// Slack's deliveries of one copy: the first, and (for an event) a retry after each failure
/// Slack sees (no 2xx within 3 s), up to 3; for [`Story::Repeated`], a second delivery 1 s
/// after the first whatever it came to.
async fn deliveries(shared: Arc<Shared>, request: usize, chain: usize, copy: Copy) {
    let story = shared.story;
    let start = Instant::now();
    let delay = match story {
        Story::Together => Duration::ZERO,
        _ => copy.offset,
    };
    tokio::time::sleep_until(start + delay).await;
    let event = shared.spec.steps[request].request.is_event();
    if story == Story::Repeated && chain == 0 {
        let (again, copy2) = (shared.clone(), copy.clone());
        drop(shared.spawn_for(request, async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let label = format!("{} again, the same request (a repeat)", copy2.label);
            let retry = event.then_some(1);
            deliver(&again, &copy2, request, chain, 1, label, retry, None).await;
        }));
    }
    if story == Story::Forged && chain == 0 {
        let (again, copy2) = (shared.clone(), copy.clone());
        let signed_at = crate::clock::now_ms() / 1000;
        drop(shared.spawn_for(request, async move {
            tokio::time::sleep(Duration::from_secs(61)).await;
            let label = format!(
                "someone replays {} as signed 61 s ago, with X-Slack-Retry-Num: 3",
                copy2.label
            );
            deliver(
                &again,
                &copy2,
                request,
                chain,
                9,
                label,
                Some(3),
                Some(signed_at),
            )
            .await;
        }));
    }
    let tries = if event { 4 } else { 1 };
    for try_ in 0..tries {
        let label = match try_ {
            0 => format!("Slack sends {}", copy.label),
            n => format!("Slack retries {} (retry {n})", copy.label),
        };
        let retry = (try_ > 0).then_some(try_);
        let seen = deliver(&shared, &copy, request, chain, try_, label, retry, None).await;
        let accepted = matches!(&seen, Some((status, _, _)) if (200..300).contains(status));
        if accepted || try_ + 1 == tries {
            if !accepted && event {
                shared.world.say(
                    None,
                    format!("Slack gives up on {} (no retry left)", copy.label),
                );
            }
            break;
        }
        if shared.spec.socket_mode {
            shared.world.say(
                None,
                format!("Slack got no acknowledgement of {} within 3 s", copy.label),
            );
            tokio::time::sleep(SOCKET_RETRY_AFTER).await;
            continue;
        }
        if seen.is_none() {
            shared.world.say(
                None,
                format!("Slack got no answer to {} within 3 s", copy.label),
            );
        }
        tokio::time::sleep(RETRY_AFTER[try_ as usize]).await;
    }
}

/// One delivery to a new ingress: what Slack saw within 3 s (status, body, outcome), if
/// anything.
#[allow(clippy::too_many_arguments)]
async fn deliver(
    shared: &Arc<Shared>,
    copy: &Copy,
    request_of: usize,
    chain: usize,
    try_: u32,
    label: String,
    retry: Option<u32>,
    signed_at: Option<u64>,
) -> Option<(u16, Value, String)> {
    if shared.spec.socket_mode {
        return deliver_envelope(shared, copy, request_of, chain, try_, label, retry).await;
    }
    let world = &shared.world;
    let run = world.begin_run(label, RunKind::Delivery { chain, try_ }, request_of);
    if world.down(run) {
        // Connection refused: Slack sees a failure at once.
        world.die(
            run,
            "its instance is down, killed and not started again yet",
        );
        return None;
    }
    let (processor, lines) = shared.processor(run, Role::Ingress);
    let router = crate::http::router(AppState {
        processor,
        in_flight: None,
        readiness: None,
    });
    let now_ms = crate::clock::now_ms();
    let deadline_ms = now_ms + shared.spec.timeout.as_millis() as u64;
    world.set_deadline(run, deadline_ms);
    let secret = Secret::new(SIGNING_SECRET);
    let signed_at = signed_at.unwrap_or(now_ms / 1000);
    let signature = crate::slack::signature::sign(&secret, signed_at, copy.body.as_bytes());
    let mut request = http::Request::post("/slack/events")
        .header(
            "content-type",
            if copy.form {
                "application/x-www-form-urlencoded"
            } else {
                "application/json"
            },
        )
        .header("x-slack-request-timestamp", signed_at.to_string())
        .header("x-slack-signature", signature);
    if let Some(n) = retry {
        request = request
            .header(crate::pipeline::RETRY_NUM_HEADER, n.to_string())
            .header(crate::pipeline::RETRY_REASON_HEADER, "http_timeout");
    }
    let mut request = request
        .body(axum::body::Body::from(copy.body.clone()))
        .expect("a valid request");
    let mut context = lambda_http::Context::default();
    context.deadline = deadline_ms + shared.spec.lease_past_deadline.as_millis() as u64;
    context.request_id = format!("run-{run}");
    request.extensions_mut().insert(context);
    let world2 = world.clone();
    let task = shared.spawn_for(request_of, async move {
        let response = RUN
            .scope(run, router.oneshot(request))
            .await
            .expect("the router answers");
        let status = response.status().as_u16();
        let header = response
            .headers()
            .get(crate::http::OUTCOME_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let outcome = header
            .or_else(|| body["outcome"].as_str().map(str::to_string))
            .or_else(|| body["error"].as_str().map(str::to_string))
            .unwrap_or_default();
        let counts = counts_of(&lines);
        world2.end_run(
            run,
            RunEnd::Answered {
                status,
                outcome: outcome.clone(),
                body: body.clone(),
            },
            counts,
        );
        (status, body, outcome)
    });
    world.set_abort(run, task.abort_handle());
    let deadline = Instant::now() + shared.spec.timeout;
    shared.kill_at(run, deadline);
    let mut task = task;
    tokio::select! {
        done = &mut task => done.ok(),
        () = tokio::time::sleep(SLACK_WAITS) => None,
    }
}

/// One delivery over Socket Mode: the copy as an envelope to a connection of a process of
/// its own, run through the Socket Mode dispatch; what Slack saw within its 3 s (200 with the
/// acknowledgement's payload; without an acknowledgement, 409 for an event found held, 503
/// otherwise, seen only once the 3 s are out), if anything. A process is not killed at a
/// deadline (it is long-lived); a delivery to a process that is down went to a ghost
/// connection (a dead process's registration Slack still holds), which swallows it.
async fn deliver_envelope(
    shared: &Arc<Shared>,
    copy: &Copy,
    request_of: usize,
    chain: usize,
    try_: u32,
    label: String,
    retry: Option<u32>,
) -> Option<(u16, Value, String)> {
    let world = &shared.world;
    let started = Instant::now();
    let run = world.begin_run(label, RunKind::Delivery { chain, try_ }, request_of);
    if world.down(run) {
        world.die(
            run,
            "it went to a ghost connection (a dead process's, still registered at Slack), \
             which swallows it",
        );
        tokio::time::sleep(SLACK_WAITS).await;
        return None;
    }
    let envelope = envelope_of(copy, run, retry);
    let (processor, lines) = shared.processor(run, Role::Ingress);
    let dispatch = crate::socket_mode::Dispatch {
        processor,
        lease: shared.socket_lease(),
        keep_held: !shared.spec.socket_lets_held_go,
    };
    let world2 = world.clone();
    let task = shared.spawn_for(request_of, async move {
        let ack = RUN.scope(run, dispatch.run(&envelope)).await;
        let outcome = outcome_of(&counts_of(&lines));
        let (status, body) = match &ack {
            Some(text) => (
                200,
                serde_json::from_str::<Value>(text)
                    .ok()
                    .map(|a| a["payload"].clone())
                    .unwrap_or(Value::Null),
            ),
            None if outcome == "in_progress" => (409, Value::Null),
            None => (503, Value::Null),
        };
        world2.end_run(
            run,
            RunEnd::Answered {
                status,
                outcome: outcome.clone(),
                body: body.clone(),
            },
            counts_of(&lines),
        );
        (status, body, outcome)
    });
    world.set_abort(run, task.abort_handle());
    let mut task = task;
    let seen = tokio::select! {
        done = &mut task => done.ok(),
        () = tokio::time::sleep(SLACK_WAITS) => None,
    };
    // No acknowledgement is silence: Slack waits out its 3 s before it redelivers.
    if !matches!(&seen, Some((status, _, _)) if (200..300).contains(status)) {
        tokio::time::sleep_until(started + SLACK_WAITS).await;
    }
    seen
}

/// The envelope Slack sends for `copy` (an event callback, a command's fields, an
/// interaction), as a Socket Mode connection reads it.
fn envelope_of(
    copy: &Copy,
    run: u32,
    retry: Option<u32>,
) -> crate::socket_mode::envelope::Envelope {
    use crate::socket_mode::envelope::{Envelope, Kind};
    let (kind, payload) = if copy.form {
        let fields: serde_json::Map<String, Value> = form_urlencoded::parse(copy.body.as_bytes())
            .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
            .collect();
        match fields.get("payload").and_then(Value::as_str) {
            Some(payload) => (
                Kind::Interactive,
                serde_json::from_str(payload).unwrap_or(Value::Null),
            ),
            None => (Kind::SlashCommands, Value::Object(fields)),
        }
    } else {
        (
            Kind::EventsApi,
            serde_json::from_str(&copy.body).unwrap_or(Value::Null),
        )
    };
    Envelope {
        envelope_id: format!("envelope-{run}"),
        kind,
        payload,
        accepts_response_payload: kind != Kind::EventsApi,
        retry_attempt: retry.unwrap_or(0),
        retry_reason: retry.map(|_| "timeout".to_string()),
    }
}

/// The queue's receives of one message: to a new worker each time, until one deletes it or
/// `maxReceiveCount` receives have passed (then it is dead-lettered, and with a redrive sent
/// again an hour later, once). In [`Story::Together`], the queue hands the first receive to
/// two workers at once, as SQS's at-least-once delivery now and then does.
async fn receives(shared: Arc<Shared>, request: usize, index: usize, body: String) {
    let spec = shared.spec.clone();
    let visibility = spec.worker_timeout * 6;
    let sent_at = Instant::now();
    let mut visible_at = sent_at + RECEIVE_AFTER;
    let deleted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The receives of the message as sent, then (with a redrive) of the message the redrive
    // sends again: a new message, its receive count from 1.
    let passes = if spec.redrive { 2 } else { 1 };
    for pass in 0..passes {
        for count in 1..=spec.max_receives + 1 {
            tokio::time::sleep_until(visible_at).await;
            if deleted.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            if count > spec.max_receives {
                shared.world.lock().dead_letters.push(index);
                shared.world.say(
                    None,
                    format!(
                        "the queue moves message {} to the dead-letter queue",
                        index + 1
                    ),
                );
                break;
            }
            let received_at = Instant::now();
            let receive = Receive {
                request,
                index,
                pass,
                count,
                twin: false,
            };
            let twin = (shared.story == Story::Together && pass == 0 && count == 1).then(|| {
                let (twin_shared, twin_body, twin_deleted) =
                    (shared.clone(), body.clone(), deleted.clone());
                let twin = Receive {
                    twin: true,
                    ..receive
                };
                shared.spawn_for(request, async move {
                    let disposition = receive_once(&twin_shared, twin, &twin_body).await;
                    if let Some(Disposition::Delete) = disposition {
                        twin_deleted.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                    disposition
                })
            });
            // When it is visible again, as each worker that received it left it: after the
            // visibility timeout, or after its backoff when handed back
            // (ChangeMessageVisibility). Two copies each have their own: the earlier counts.
            let visible_again = |disposition: Option<Disposition>| match disposition {
                Some(Disposition::Retry { after }) => Some(
                    Instant::now() + after.min(visibility.saturating_sub(received_at.elapsed())),
                ),
                Some(Disposition::Delete) => None,
                Some(Disposition::Leave) | None => Some(received_at + visibility),
            };
            let Some(mut next) = visible_again(receive_once(&shared, receive, &body).await) else {
                return;
            };
            if let Some(twin) = twin {
                match visible_again(twin.await.ok().flatten()) {
                    None => return,
                    Some(at) => next = next.min(at),
                }
            }
            visible_at = next;
        }
        if pass + 1 < passes {
            // The operator's redrive (`slack-once redrive`): the dead letter sent again.
            tokio::time::sleep(REDRIVE_AFTER).await;
            // As the tool judges a form: its response_url (and so its answer) expired.
            let form = !spec.steps[request].request.is_event();
            if form && sent_at.elapsed() > crate::tools::redrive::REDRIVE_RESPONSE_URL_WITHIN {
                // As the tool does: a claim of it left in progress past its lease ends failed
                // (`dead_letter_refused`), nothing bringing the request back.
                let keys: Vec<String> = {
                    let s = shared.world.lock();
                    s.by_request
                        .keys
                        .iter()
                        .filter(|(_, r)| **r == request)
                        .map(|(k, _)| k.clone())
                        .collect()
                };
                let now_ms = crate::clock::now_ms();
                let ended: Vec<String> = keys
                    .into_iter()
                    .filter(|k| {
                        crate::slack::envelope::EventId::try_from(k.clone()).is_ok_and(|id| {
                            shared.world.ledger.end_lapsed(
                                &id,
                                crate::tools::redrive::DEAD_LETTER_REFUSED,
                                now_ms,
                            )
                        })
                    })
                    .collect();
                shared.world.say(
                    None,
                    format!(
                        "an operator redrives the dead-letter queue: message {} is refused \
                         (a form whose response_url expired){}",
                        index + 1,
                        match ended.is_empty() {
                            true => String::new(),
                            false => format!(
                                "; its claim left in progress ended failed \
                                 (dead_letter_refused): {}",
                                ended.join(", ")
                            ),
                        }
                    ),
                );
                return;
            }
            {
                let mut s = shared.world.lock();
                if let Some(at) = s.dead_letters.iter().rposition(|i| *i == index) {
                    s.dead_letters.remove(at);
                }
                s.redriven.push(index);
            }
            shared.world.say(
                None,
                format!(
                    "an operator redrives the dead-letter queue: message {} is sent again",
                    index + 1
                ),
            );
            visible_at = Instant::now() + RECEIVE_AFTER;
        }
    }
}

/// One receive of a queued message.
#[derive(Clone, Copy)]
struct Receive {
    request: usize,
    /// The message (its index in `queued`).
    index: usize,
    /// 0 as sent, 1 as the redrive sent it again.
    pass: u32,
    /// The receive count SQS gives it.
    count: u32,
    /// The second worker the queue handed the same receive to.
    twin: bool,
}

/// A worker's receive of a queued message, to its end (or its deadline): what the worker did
/// with the message, unless it died.
async fn receive_once(shared: &Arc<Shared>, receive: Receive, body: &str) -> Option<Disposition> {
    let spec = shared.spec.clone();
    let Receive {
        request,
        index,
        pass,
        count,
        twin,
    } = receive;
    let received_at = Instant::now();
    let (label, seen) = match (pass, twin) {
        (0, false) => (
            format!("a worker receives message {} (receive {count})", index + 1),
            count,
        ),
        (0, true) => (
            format!(
                "a second worker receives message {} at once (receive {count}, SQS's \
                 at-least-once)",
                index + 1
            ),
            100 + count,
        ),
        _ => (
            format!(
                "a worker receives message {} redriven (receive {count})",
                index + 1
            ),
            spec.max_receives + count,
        ),
    };
    let run = shared.world.begin_run(
        label,
        RunKind::Receive {
            message: index,
            count: seen,
        },
        request,
    );
    let (processor, _lines) = shared.processor(run, Role::Worker);
    let worker = Arc::new(Worker::new(processor, spec.max_receives));
    let message = Received {
        message_id: format!("m{}-{pass}", index + 1),
        receipt_handle: format!("r{}-{pass}-{count}-{twin}", index + 1),
        body: body.to_string(),
        receive_count: count,
    };
    let now = crate::clock::now();
    let deadline: SystemTime = now + spec.worker_timeout;
    shared.world.set_deadline(
        run,
        crate::clock::now_ms() + spec.worker_timeout.as_millis() as u64,
    );
    let told = deadline + spec.lease_past_deadline;
    let world = shared.world.clone();
    let task = shared.spawn_for(request, async move {
        let metrics = Metrics::new();
        let disposition = RUN
            .scope(
                run,
                metrics.scope(worker.handle(
                    &message,
                    now,
                    Instant::now(),
                    Some(told),
                    Some(&format!("run-{run}")),
                )),
            )
            .await;
        let counts: BTreeMap<String, f64> = metrics
            .counts()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let outcome = outcome_of(&counts);
        world.end_run(
            run,
            RunEnd::Handled {
                deleted: disposition == Disposition::Delete,
                outcome,
            },
            counts,
        );
        disposition
    });
    shared.world.set_abort(run, task.abort_handle());
    shared.kill_at(run, received_at + spec.worker_timeout);
    task.await.ok()
}
