//! The simulation of a fleet's traffic: [`Simulation`], documented there.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::run::{Seeds, Spec, Start, Step};
use super::schedule::{Fault, FaultRates, Rng, Schedule, SiteKind, Story};
use super::store::{Schemas, Store};
use super::tenants::Tenant;
use super::world::{Plan, RunEnd, RunKind};
use super::{End, Explorer, Failure, door};
use crate::app::App;
use crate::testing::explore::Request;

/// The SAM template's longest `WorkerTimeout` (the last of its `AllowedValues`): the
/// simulation's workers run with it, so a queue's redeliveries are as late as a deployed stack
/// lets them be.
pub const LONGEST_WORKER_TIMEOUT: Duration = Duration::from_secs(900);

/// The simulation: a fleet's traffic, many requests of a mix, each with its copies, retries,
/// redeliveries and faults drawn from a seed, run through the explorer's world on virtual
/// time and checked by every invariant the explorer checks.
///
/// ```no_run
/// use slack_once::app::App;
/// use slack_once::testing::explore::{Request, Simulation};
///
/// fn app() -> App {
///     App::new()
/// }
///
/// let report = Simulation::new(app)
///     .mix(30, [("mention", Request::mention("hi"))])
///     .mix(10, [("slash command", Request::command("/once", "now"))])
///     .requests(10_000)
///     .seed(1)
///     .run();
/// println!("{report}");
/// report.assert_ok();
/// ```
///
/// Each *schedule* of the simulation is one scene of the mix (a request, or a sequence of
/// requests: a mention, then a click on the answer it posted) in one mode (synchronous, or
/// deferred: an ingress, the work queue, workers), with a story drawn for how Slack delivers
/// it (one copy after another, every copy at once to instances of their own, a repeat, the
/// first delivery to the old version of a rolling deploy, a replay by someone who captured
/// it) and faults drawn at every call it makes: processes killed before or after a call, and
/// at their deadline as Lambda kills them, answers lost, the ledger's SDK sending a call
/// twice, DynamoDB throttling, Slack's 5xx, 429s with `Retry-After` and refusals, the
/// queue's redeliveries (after a released run's backoff, or a killed worker's visibility
/// timeout, with the template's longest `WorkerTimeout`) and the dead-letter queue after
/// `maxReceiveCount` receives, redriven an hour later by an operator. Each run is a process
/// of its own (an instance of the fleet), on one ledger and one Slack.
///
/// Every schedule is checked as the explorer checks one (answered at most once, complete when
/// claimed or counted when lost, failed only for a reason, acknowledgements kept, tokens in
/// their place, no claim outliving the process that holds it…), and every request's fate is
/// tallied by kind: answered, failed with its reason, dead-lettered, Slack gave up, not taken;
/// with the ledger's reads and writes, Slack's calls and the queue's, per request. The first
/// schedule that breaks an invariant (the lowest-numbered, whatever the threads: the report is
/// the same for the same seed) is shrunk to the fewest faults that still break it, and printed
/// with its trace and the schedule to replay.
///
/// Each schedule draws from its own generator (the seed and its number), so the threads
/// ([`Simulation::threads`]) change how fast, not what.
pub struct Simulation {
    explorer: Explorer,
    scenes: Vec<Scene>,
    requests: u64,
    threads: usize,
    rates: Arc<FaultRates>,
    deferred_per_mille: u64,
    installed_per_mille: u64,
    socket_mode_per_mille: u64,
    lease_past_deadline: Duration,
    drop_takeover_finish: bool,
    other_apps_token: bool,
    state_of_other_workspace: bool,
    progress: bool,
    replay: Option<String>,
    only: Option<u64>,
    store: Store,
}

/// One scene of the mix: requests a person makes one after the other, each named by its kind.
#[derive(Clone)]
struct Scene {
    weight: u32,
    kinds: Vec<String>,
    steps: Vec<Step>,
}

/// A schedule of the simulation, as its number draws it.
#[derive(Clone, Debug)]
struct Drawn {
    scene: usize,
    /// Bit 0 deferred mode, bit 1 installed through OAuth, bit 2 delivered over Socket Mode.
    setting: usize,
    story: Story,
    plan_seed: u64,
    /// Whose requests: bit 0 the app (of two), bit 1 the workspace (of two).
    tenant: usize,
}

impl Simulation {
    /// Simulates traffic to the bot `app` builds (once per process).
    pub fn new(app: impl Fn() -> App + Send + Sync + 'static) -> Self {
        Self {
            explorer: Explorer::new(app)
                .invariant(
                    "nothing claimed past its lease at the end",
                    claims_left_explained,
                )
                .invariant(
                    "every request answered, or failed with its reason",
                    every_request_explained,
                ),
            scenes: Vec::new(),
            requests: 10_000,
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            rates: Arc::new(FaultRates::soak()),
            deferred_per_mille: 500,
            installed_per_mille: 0,
            socket_mode_per_mille: 0,
            lease_past_deadline: Duration::ZERO,
            drop_takeover_finish: false,
            other_apps_token: false,
            state_of_other_workspace: false,
            progress: false,
            replay: None,
            only: None,
            store: Store::Memory,
        }
    }

    /// A scene of the mix, drawn `weight` times in the sum of the weights: `requests` a
    /// person makes one after the other (as [`Explorer::sequence`] sends them), each with the
    /// kind the report tallies it under.
    pub fn mix<K: Into<String>>(
        mut self,
        weight: u32,
        requests: impl IntoIterator<Item = (K, Request)>,
    ) -> Self {
        let (kinds, steps): (Vec<String>, Vec<Step>) = requests
            .into_iter()
            .enumerate()
            .map(|(i, (kind, request))| {
                let start = if i == 0 || request.with_previous {
                    Start::AtOnce
                } else {
                    Start::AfterPrevious
                };
                (kind.into(), Step { request, start })
            })
            .unzip();
        assert!(!steps.is_empty(), "Simulation::mix: give it a request");
        self.scenes.push(Scene {
            weight,
            kinds,
            steps,
        });
        self
    }

    /// The version a rolling deploy replaces: [`Story::Deploy`]'s first delivery is its.
    pub fn old_version(mut self, app: impl Fn() -> App + Send + Sync + 'static) -> Self {
        self.explorer = self.explorer.old_version(app);
        self
    }

    /// How many requests to simulate (at least: the last scene is whole). 10,000 unless set.
    pub fn requests(mut self, n: u64) -> Self {
        self.requests = n;
        self
    }

    /// The seed every schedule's draws come from.
    pub fn seed(mut self, seed: u64) -> Self {
        self.explorer = self.explorer.seed(seed);
        self
    }

    /// How many threads run schedules (the machine's cores unless set): the same report
    /// whatever the number.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n.max(1);
        self
    }

    /// The chance of each fault at each kind of call ([`FaultRates::soak`] unless set).
    pub fn faults(mut self, rates: FaultRates) -> Self {
        self.rates = Arc::new(rates);
        self
    }

    /// The share of schedules Slack delivers over Socket Mode, per mille (none unless set):
    /// as [`Explorer::socket_mode`] delivers them.
    pub fn socket_mode(mut self, per_mille: u64) -> Self {
        self.socket_mode_per_mille = per_mille.min(1000);
        self
    }

    /// The share of schedules in deferred mode, per mille (500 unless set).
    pub fn deferred(mut self, per_mille: u64) -> Self {
        self.deferred_per_mille = per_mille.min(1000);
        self
    }

    /// The share of schedules, per mille (none unless set), in which the app is installed in
    /// the workspace through OAuth (multi-workspace mode): its token rotating, within the
    /// refresh window, so that each request refreshes it beside its work (Slack's token
    /// endpoint a site of faults like any call; every call must carry a token Slack issued,
    /// and the installation must work at the end), and Slack's 2025 history limit on
    /// look-ups (one a minute, a 429 with `Retry-After` for the rest).
    pub fn installed(mut self, per_mille: u64) -> Self {
        self.installed_per_mille = per_mille.min(1000);
        self
    }

    /// An invariant of your own, checked after every schedule (see [`Explorer::invariant`]).
    pub fn invariant(
        mut self,
        name: &str,
        check: impl Fn(&End) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.explorer = self.explorer.invariant(name, check);
        self
    }

    /// A defect planted in the runtime, to see the simulation find it: every process is told
    /// a deadline `extra` later than the one it is killed at, so the leases of its claims
    /// outlive it.
    pub fn plant_lease_past_deadline(mut self, extra: Duration) -> Self {
        self.lease_past_deadline = extra;
        self
    }

    /// A defect planted in the ledger, to see the simulation find it: a run that took a claim
    /// over has its completion (or release) dropped and answered as made, so the claim stays
    /// in progress though its holder ended well.
    pub fn plant_dropped_takeover_finish(mut self) -> Self {
        self.drop_takeover_finish = true;
        self
    }

    /// A defect planted in the runtime, to see the simulation find it: every process of a
    /// single-workspace install is given the other app's bot token.
    pub fn plant_other_apps_token(mut self) -> Self {
        self.other_apps_token = true;
        self
    }

    /// A defect planted in the ledger, to see the simulation find it: in multi-workspace
    /// mode, a workspace's state values ([`crate::app::Ctx::state`]'s) are read and written
    /// under the other workspace's keys.
    pub fn plant_state_of_other_workspace(mut self) -> Self {
        self.state_of_other_workspace = true;
        self
    }

    /// Runs schedule `n` of the seed only (as a failure names it), and shrinks it if it
    /// breaks an invariant: its trace, again.
    pub fn only(mut self, n: u64) -> Self {
        self.only = Some(n);
        self
    }

    /// Each schedule's ledger on PostgreSQL (the database `url` names, `postgres://…`) rather
    /// than in memory: [`crate::ledger::PostgresLedger`] on a schema of its own per schedule
    /// running at once (made, migrated and dropped by the simulation, emptied before each
    /// schedule), its leases and TTLs judged on the times the pipeline passes (the schedule's
    /// virtual ones). Each call is made with the schedule's clock stopped: it takes no virtual
    /// time, as an in-memory call takes none. The installation store and the queue stay the
    /// simulation's own.
    pub fn on_postgres(mut self, url: &str) -> Self {
        self.store = Store::Postgres(Arc::new(Schemas::on(url)));
        self
    }

    /// Prints a line of progress to stderr at every tenth of the requests.
    pub fn progress(mut self) -> Self {
        self.progress = true;
        self
    }

    /// The command a failure's report says runs it again, `--only N` added (by default
    /// `scripts/simulate.sh --seed S`): what chose the mix, the bot and the rates, so that
    /// schedule N is the same schedule.
    pub fn replay_command(mut self, command: impl Into<String>) -> Self {
        self.replay = Some(command.into());
        self
    }

    /// Runs the simulation (on threads of its own: call it from a test, async or not).
    pub fn run(self) -> SimulationReport {
        assert!(
            !self.scenes.is_empty(),
            "Simulation: give it a mix (Simulation::mix)"
        );
        super::on_a_thread_of_its_own(move || self.run_here())
    }

    /// What schedule `n` is: its scene, mode, story and the seed of its faults.
    fn draw(&self, n: u64) -> Drawn {
        let mut rng = Rng::new(self.explorer.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let total: u64 = self.scenes.iter().map(|s| u64::from(s.weight)).sum();
        let mut pick = rng.next_u64() % total.max(1);
        let mut scene = 0;
        for (i, s) in self.scenes.iter().enumerate() {
            if pick < u64::from(s.weight) {
                scene = i;
                break;
            }
            pick -= u64::from(s.weight);
        }
        let deferred = rng.next_u64() % 1000 < self.deferred_per_mille;
        let installed = rng.next_u64() % 1000 < self.installed_per_mille;
        let event = self.scenes[scene].steps[0].request.is_event();
        // Most schedules have their copies and retries as Slack sends them; the others every
        // copy at once, a repeat, a deploy's old version first, or (an event) a replay.
        let story = match rng.below(100) {
            0..=64 => Story::Plain,
            65..=76 => Story::Together,
            77..=86 => Story::Repeated,
            87..=97 => Story::Deploy,
            _ if event => Story::Forged,
            _ => Story::Plain,
        };
        let plan_seed = rng.next_u64();
        let tenant = rng.below(4);
        // Drawn last, and only when asked for: the other draws of a seed stay as they were.
        let socket_mode =
            self.socket_mode_per_mille > 0 && rng.next_u64() % 1000 < self.socket_mode_per_mille;
        Drawn {
            scene,
            setting: usize::from(deferred)
                | (usize::from(installed) << 1)
                | (usize::from(socket_mode) << 2),
            // A replayed HTTP signature is no story over Socket Mode.
            story: match story {
                Story::Forged if socket_mode => Story::Plain,
                story => story,
            },
            plan_seed,
            tenant,
        }
    }

    /// Setting: bit 0 deferred mode, bit 1 installed through OAuth (multi-workspace mode,
    /// its token within the refresh window, Slack's history limit), bit 2 delivered over
    /// Socket Mode; tenant: bit 0 the app (of
    /// two), bit 1 the workspace (of two) the requests come from.
    fn spec(&self, explorer_id: u64, scene: &Scene, setting: usize, tenant: usize) -> Arc<Spec> {
        let (deferred, installed) = (setting & 1 == 1, setting & 2 == 2);
        Arc::new(Spec {
            explorer: explorer_id,
            steps: scene.steps.clone(),
            seeds: Seeds::default(),
            deferred,
            app: self.explorer.app.clone(),
            old_app: self.explorer.old_app.clone(),
            timeout: Duration::from_secs(10),
            // The longest the template allows: every Slack deadline must hold even then.
            worker_timeout: LONGEST_WORKER_TIMEOUT,
            // The soak's (the template's is 5), so that faults dead-letter some requests for
            // the redrive to bring back.
            max_receives: 3,
            busy: 0,
            history_per_minute: installed,
            // Within the refresh window (SLACK_TOKEN_REFRESH_MINUTES, 120): every request
            // refreshes the token beside its work, the refresh a site of faults like any call.
            installed: installed.then_some(Duration::from_secs(90 * 60)),
            redrive: true,
            tenant: Tenant::of(tenant & 1, tenant >> 1),
            other_apps_token: self.other_apps_token,
            state_of_other_workspace: self.state_of_other_workspace,
            lease_past_deadline: self.lease_past_deadline,
            drop_takeover_finish: self.drop_takeover_finish,
            socket_mode: setting & 4 == 4,
            socket_lets_held_go: false,
            store: self.store.clone(),
        })
    }

    fn run_here(self) -> SimulationReport {
        super::hooks::install();
        let running = door::Running::start();
        let began = Instant::now();
        let cpu_before = cpu_seconds();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let _guard = tracing::subscriber::set_default(super::log_to(logs.clone()));
        let seed = self.explorer.seed;
        let mut report = SimulationReport {
            seed,
            requests: 0,
            schedules: 0,
            socket_mode: 0,
            tenants: BTreeMap::new(),
            kinds: BTreeMap::new(),
            order: Vec::new(),
            elapsed: Duration::ZERO,
            cpu: None,
            threads: self.threads,
            failure: None,
            trace: None,
            replay: self
                .replay
                .clone()
                .unwrap_or_else(|| format!("scripts/simulate.sh --seed {seed}")),
        };
        for scene in &self.scenes {
            for kind in &scene.kinds {
                if !report.order.contains(kind) {
                    report.order.push(kind.clone());
                }
            }
        }

        // The fault-free run of each scene in each setting (synchronous or deferred; one
        // workspace's token, or installed through OAuth) for each tenant (app and workspace):
        // the measure of what it writes.
        type References = Vec<Vec<Vec<(Arc<Spec>, Arc<End>)>>>;
        let mut references: References = Vec::new();
        for scene in &self.scenes {
            let mut settings = Vec::new();
            let modes = if self.socket_mode_per_mille > 0 { 8 } else { 4 };
            for (setting, tenant) in (0..modes).flat_map(|s| (0..4).map(move |t| (s, t))) {
                if tenant == 0 {
                    settings.push(Vec::new());
                }
                let spec = self.spec(running.0, scene, setting, tenant);
                match self.explorer.fault_free(&spec, &logs) {
                    Ok(reference) => settings[setting].push((spec, Arc::new(reference))),
                    Err(failed) => {
                        let (broken, reference) = *failed;
                        report.failure = Some(SimFailure {
                            schedule_number: None,
                            scene: describe_scene(scene, &spec),
                            mode: mode_name(setting),
                            failure: Failure::new(Schedule::plain(), broken, &reference),
                            drawn_faults: 0,
                        });
                        report.elapsed = began.elapsed();
                        return report;
                    }
                }
            }
            references.push(settings);
        }

        // How many schedules make the requests asked for.
        let mut draws = Vec::new();
        let mut planned = 0u64;
        match self.only {
            Some(n) => draws.push((n, self.draw(n))),
            None => {
                while planned < self.requests {
                    let n = draws.len() as u64;
                    let drawn = self.draw(n);
                    planned += self.scenes[drawn.scene].steps.len() as u64;
                    draws.push((n, drawn));
                }
            }
        }

        let next = AtomicUsize::new(0);
        let lowest_failure = AtomicUsize::new(usize::MAX);
        let done = AtomicUsize::new(0);
        let this = &self;
        let (references, draws) = (&references, &draws);
        let results: Vec<Partial> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..self.threads)
                .map(|_| {
                    let (next, lowest_failure, done) = (&next, &lowest_failure, &done);
                    scope.spawn(move || {
                        let logs = Arc::new(Mutex::new(Vec::new()));
                        let _guard = tracing::subscriber::set_default(super::log_to(logs.clone()));
                        let mut partial = Partial::default();
                        loop {
                            let n = next.fetch_add(1, Ordering::Relaxed);
                            if n >= draws.len() || n > lowest_failure.load(Ordering::Relaxed) {
                                break;
                            }
                            let drawn = &draws[n].1;
                            let (spec, reference) =
                                &references[drawn.scene][drawn.setting][drawn.tenant];
                            let plan = Plan::Rates {
                                rng: Rng::new(drawn.plan_seed),
                                rates: this.rates.clone(),
                                drawn: BTreeMap::new(),
                            };
                            let (end, broken) =
                                this.explorer
                                    .try_one(spec, reference, drawn.story, plan, &logs);
                            if !broken.is_empty() {
                                lowest_failure.fetch_min(n, Ordering::Relaxed);
                                partial.failures.push((n, broken, end));
                                continue;
                            }
                            tally(
                                &mut partial,
                                draws[n].0,
                                &this.scenes[drawn.scene],
                                reference,
                                &end,
                            );
                            if this.only.is_some() {
                                partial.trace = Some(super::trace_text(&end));
                            }
                            partial.schedules += 1;
                            if drawn.setting & 4 == 4 {
                                partial.socket_mode += 1;
                            }
                            let tenant = &spec.tenant;
                            *partial
                                .tenants
                                .entry(format!("{} in {}", tenant.app_id, tenant.team))
                                .or_default() += 1;
                            let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                            if this.progress && finished % (draws.len() / 10).max(1) == 0 {
                                eprintln!(
                                    "simulate: {finished} of {} schedules, {:.0} s",
                                    draws.len(),
                                    began.elapsed().as_secs_f64()
                                );
                            }
                        }
                        partial
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        });

        let lowest = lowest_failure.load(Ordering::Relaxed);
        let mut failure = None;
        for partial in results {
            for (kind, tally) in partial.kinds {
                report.kinds.entry(kind).or_default().add(&tally);
            }
            report.schedules += partial.schedules;
            report.socket_mode += partial.socket_mode;
            for (tenant, n) in partial.tenants {
                *report.tenants.entry(tenant).or_default() += n;
            }
            report.trace = report.trace.take().or(partial.trace);
            for (n, broken, end) in partial.failures {
                if n == lowest {
                    failure = Some((n, broken, end));
                }
            }
        }
        if let Some((n, broken, end)) = failure {
            // The tallies are dropped: which schedules after the first failure ran depends on
            // the threads, and the report must not.
            report.kinds.clear();
            report.tenants.clear();
            report.schedules = 0;
            report.socket_mode = 0;
            let (number, drawn) = &draws[n];
            let (spec, reference) = &references[drawn.scene][drawn.setting][drawn.tenant];
            let schedule = Schedule {
                story: drawn.story,
                faults: end.faults.clone(),
            };
            let drawn_faults = schedule.faults.len();
            let (schedule, broken, end) = self
                .explorer
                .shrink(spec, reference, schedule, broken, end, &logs);
            report.failure = Some(SimFailure {
                schedule_number: Some(*number),
                scene: describe_scene(&self.scenes[drawn.scene], spec),
                mode: mode_name(drawn.setting),
                failure: Failure::new(schedule, broken, &end),
                drawn_faults,
            });
        }
        report.requests = report.kinds.values().map(|t| t.requests).sum();
        report.elapsed = began.elapsed();
        report.cpu = cpu_before.zip(cpu_seconds()).map(|(a, b)| b - a);
        drop(running);
        report
    }
}

/// What the simulation found.
pub struct SimulationReport {
    /// The seed.
    pub seed: u64,
    /// Requests simulated (and checked).
    pub requests: u64,
    /// Schedules run (each a scene of the mix).
    pub schedules: u64,
    /// Of which delivered over Socket Mode ([`Simulation::socket_mode`]).
    pub socket_mode: u64,
    /// Schedules run per tenant their requests came from: `A… in T…` (an app of two, in a
    /// workspace of two, on one ledger).
    pub tenants: BTreeMap<String, u64>,
    /// Per kind of request, what became of them.
    pub kinds: BTreeMap<String, Tally>,
    order: Vec<String>,
    /// How long it took (wall time).
    pub elapsed: Duration,
    /// The CPU time it took (the process's, where the system says), in seconds.
    pub cpu: Option<f64>,
    threads: usize,
    /// The first schedule that broke an invariant, shrunk.
    pub failure: Option<SimFailure>,
    /// With [`Simulation::only`], the schedule's trace.
    pub trace: Option<String>,
    /// The command that runs it again ([`Simulation::replay_command`]), without `--only`.
    pub replay: String,
}

/// The first schedule of a simulation that broke an invariant.
pub struct SimFailure {
    /// Its number (`None`: the fault-free run of its scene broke it).
    pub schedule_number: Option<u64>,
    /// The scene's requests, as a person reads them.
    pub scene: String,
    /// `synchronous` or `deferred`, and whether installed through OAuth.
    pub mode: &'static str,
    /// The shortest schedule found that breaks it, and its trace.
    pub failure: Failure,
    /// How many faults the schedule drew before it was shrunk.
    pub drawn_faults: usize,
}

/// What became of the requests of one kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    /// Requests.
    pub requests: u64,
    /// Answered: their claim done, or every write the fault-free run made for them in Slack
    /// (as the soak counts, from what the person sees).
    pub answered: u64,
    /// Of those answered, the ones whose claim the ledger records failed all the same, by
    /// reason: a last write Slack applied and answered with an error (`internal_error`, or no
    /// answer within the deadline). The person saw the answer; the ledger says why it was not
    /// confirmed.
    pub answered_failed: BTreeMap<String, u64>,
    /// Failed, by reason (a failed claim's code, the dead-letter queue after its redrive,
    /// the process holding the last chance killed, Slack's retries run out).
    pub failed: BTreeMap<String, u64>,
    /// Taken by no listener (as intended: [`Request::unhandled`]).
    pub not_taken: u64,
    /// Not sent (a click on a message no earlier request posted).
    pub not_sent: u64,
    /// Their queued messages dead-lettered, then redriven.
    pub redriven: u64,
    /// Invocations: deliveries to an ingress and receives by a worker.
    pub invocations: u64,
    /// The invocations' virtual time, in milliseconds.
    pub invocation_ms: u64,
    /// Ledger calls that read.
    pub ledger_reads: u64,
    /// Ledger calls that write.
    pub ledger_writes: u64,
    /// Slack Web API calls that write (a `response_url` post among them).
    pub slack_writes: u64,
    /// Slack Web API calls that read.
    pub slack_reads: u64,
    /// Work-queue sends, receives and deletes.
    pub queue_calls: u64,
    /// For each reason requests failed, the first schedule that shows it (its number, for
    /// [`Simulation::only`]).
    pub examples: BTreeMap<String, u64>,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.requests += other.requests;
        self.answered += other.answered;
        for (why, n) in &other.answered_failed {
            *self.answered_failed.entry(why.clone()).or_default() += n;
        }
        for (why, n) in &other.failed {
            *self.failed.entry(why.clone()).or_default() += n;
        }
        self.not_taken += other.not_taken;
        self.not_sent += other.not_sent;
        self.redriven += other.redriven;
        self.invocations += other.invocations;
        self.invocation_ms += other.invocation_ms;
        self.ledger_reads += other.ledger_reads;
        self.ledger_writes += other.ledger_writes;
        self.slack_writes += other.slack_writes;
        self.slack_reads += other.slack_reads;
        self.queue_calls += other.queue_calls;
        for (why, n) in &other.examples {
            let first = self.examples.entry(why.clone()).or_insert(*n);
            *first = (*first).min(*n);
        }
    }

    /// Requests failed, for any reason.
    pub fn failed_total(&self) -> u64 {
        self.failed.values().sum()
    }
}

/// What one thread ran.
#[derive(Default)]
struct Partial {
    kinds: BTreeMap<String, Tally>,
    schedules: u64,
    socket_mode: u64,
    tenants: BTreeMap<String, u64>,
    failures: Vec<(usize, Vec<String>, End)>,
    trace: Option<String>,
}

/// Adds what became of each request of a schedule of `scene` to `partial`.
fn tally(partial: &mut Partial, number: u64, scene: &Scene, reference: &End, end: &End) {
    let run_request: Vec<usize> = end.runs.iter().map(|r| r.request).collect();
    for (n, kind) in scene.kinds.iter().enumerate() {
        let t = partial.kinds.entry(kind.clone()).or_default();
        t.requests += 1;
        // The calls of its runs.
        for r in end.runs.iter().filter(|r| r.request == n) {
            t.invocations += 1;
            if let (Some(end_at), started) = (r.ended_at, r.started) {
                t.invocation_ms += end_at.saturating_sub(started).as_millis() as u64;
            }
            for kind in &r.sites {
                match kind {
                    SiteKind::SlackWrite | SiteKind::ResponseUrl => t.slack_writes += 1,
                    SiteKind::SlackRead => t.slack_reads += 1,
                    SiteKind::QueueSend => t.queue_calls += 1,
                    SiteKind::Ledger => {}
                }
            }
            if let RunKind::Receive { .. } = r.kind {
                // The receive, and the delete of a message handled.
                t.queue_calls += 1;
                if matches!(r.end, Some(RunEnd::Handled { deleted: true, .. })) {
                    t.queue_calls += 1;
                }
            }
        }
        for line in &end.trace {
            let (Some(run), Some(_)) = (line.run, line.site) else {
                continue;
            };
            if run_request.get(run as usize - 1) != Some(&n) {
                continue;
            }
            if line.text.starts_with("ledger read") || line.text.starts_with("installations find") {
                t.ledger_reads += 1;
            } else if line.text.starts_with("ledger ") || line.text.starts_with("installations ") {
                t.ledger_writes += 1;
            }
        }
        if end
            .redriven
            .iter()
            .any(|i| end.by_request.queued_by.get(*i) == Some(&n))
        {
            t.redriven += 1;
        }
        match fate(reference, end, n, scene.steps[n].request.is_event()) {
            Fate::Answered => t.answered += 1,
            Fate::AnsweredFailed(why) => {
                t.answered += 1;
                *t.answered_failed.entry(why).or_default() += 1;
            }
            Fate::NotTaken => t.not_taken += 1,
            Fate::NotSent => t.not_sent += 1,
            Fate::Failed(why) => {
                let first = t.examples.entry(why.clone()).or_insert(number);
                *first = (*first).min(number);
                *t.failed.entry(why).or_default() += 1;
            }
        }
    }
}

enum Fate {
    Answered,
    /// Every write in Slack, its claim failed (the reason).
    AnsweredFailed(String),
    NotTaken,
    NotSent,
    Failed(String),
}

/// What became of request `n` of a schedule, from the ledger's records and its runs' ends.
fn fate(reference: &End, end: &End, n: usize, event: bool) -> Fate {
    use crate::ledger::Status;
    if end.by_request.unsent.contains_key(&n) {
        return Fate::NotSent;
    }
    let statuses: Vec<Status> = end
        .ledger
        .iter()
        .filter(|(key, _)| end.by_request.keys.get(key) == Some(&n))
        .map(|(_, s)| *s)
        .collect();
    let runs: Vec<&super::RunView> = end.runs.iter().filter(|r| r.request == n).collect();
    // Done in the ledger, or a run that made every write and said so (its finish then lost:
    // the claim's lease runs out, and a later copy would look in Slack first).
    let said_answered = runs.iter().any(|r| {
        r.end.as_ref().is_some_and(|e| {
            matches!(
                super::check::outcome(e),
                "answered" | "recovered" | "no_reply"
            )
        })
    });
    if statuses.contains(&Status::Done) || said_answered {
        return Fate::Answered;
    }
    let taken_in_reference = reference
        .ledger
        .iter()
        .any(|(key, _)| reference.by_request.keys.get(key) == Some(&n));
    if !taken_in_reference {
        return Fate::NotTaken;
    }
    // The last run that could decide: one that met a live claim or a done one decided nothing.
    let last = runs.iter().rev().find(|r| {
        r.end.as_ref().is_some_and(|e| {
            !matches!(
                super::check::outcome(e),
                "in_progress" | "duplicate" | "skipped"
            )
        })
    });
    // Ended by the redrive that refused its dead letter (as `slack-once redrive` does).
    let refused = end
        .ledger
        .iter()
        .filter(|(key, s)| *s == Status::Failed && end.by_request.keys.get(key) == Some(&n))
        .filter_map(|(key, _)| crate::slack::envelope::EventId::try_from(key.clone()).ok())
        .any(|id| {
            end.state.ledger.error(&id).as_deref()
                == Some(crate::tools::redrive::DEAD_LETTER_REFUSED)
        });
    if refused {
        return Fate::Failed(format!(
            "failed ({})",
            crate::tools::redrive::DEAD_LETTER_REFUSED
        ));
    }
    if statuses.contains(&Status::Failed) {
        let code = last
            .and_then(|r| Some((r.number, r.end.as_ref()?)))
            .map(
                |(number, e)| match super::check::failure_code(&end.logs, number) {
                    code if code == "see the log" => super::check::outcome(e).to_string(),
                    code => code,
                },
            )
            .unwrap_or_else(|| "failed".into());
        // What the person sees decides whether it was answered, as the soak judges: every
        // write of the fault-free run's in Slack (a last write applied, its answer an error).
        if writes_cover(reference, end, n) {
            return Fate::AnsweredFailed(code);
        }
        return Fate::Failed(format!("failed ({code})"));
    }
    if end
        .dead_lettered
        .iter()
        .any(|i| end.by_request.queued_by.get(*i) == Some(&n))
    {
        return Fate::Failed(match event {
            true => "dead-lettered, and again after its redrive".into(),
            // `slack-once redrive` refuses a form past its response_url's life: a dead
            // letter is at least maxReceiveCount visibility timeouts old.
            false => "dead-lettered; the redrive refuses it (its response_url expired)".into(),
        });
    }
    match last.and_then(|r| r.end.as_ref()) {
        Some(RunEnd::Died) => Fate::Failed("its last chance's process killed".into()),
        Some(RunEnd::Answered { status, .. }) if !(200..300).contains(status) => {
            Fate::Failed(match event {
                true => format!("Slack gave up (the last retry answered {status})"),
                false => format!("the person saw an error (its one delivery answered {status})"),
            })
        }
        Some(e) => Fate::Failed(format!("not answered ({})", super::check::outcome(e))),
        None => Fate::Failed("Slack gave up (its claim held by a process killed)".into()),
    }
}

/// The soak's check per request: each is answered, or failed with a reason its records show
/// (its claim's failure, the dead-letter queue, its last chance's process killed, an error the
/// person or Slack was answered), or taken by no listener; never left unanswered with nothing
/// to say why (a run that answered Slack 2xx and did not answer the request, or no run that
/// decided it and none killed).
fn every_request_explained(end: &End) -> Result<(), String> {
    let mut unexplained = Vec::new();
    for n in 0..end.requests.len() {
        // The schedule as its own reference: taken if it touched the ledger.
        if let Fate::Failed(why) = fate(end, end, n, false) {
            let killed = || {
                end.runs
                    .iter()
                    .any(|r| r.request == n && matches!(r.end, Some(RunEnd::Died)))
            };
            if why.starts_with("not answered")
                || (why.starts_with("Slack gave up (its claim held") && !killed())
            {
                unexplained.push(format!("request {} ({why})", n + 1));
            }
        }
    }
    match unexplained.is_empty() {
        true => Ok(()),
        false => Err(format!(
            "{} neither answered nor failed with a reason its records show",
            unexplained.join(", ")
        )),
    }
}

/// Whether Slack holds, for request `n`, at least as many writes of each method as the
/// fault-free run made for it (and it made some).
fn writes_cover(reference: &End, end: &End, n: usize) -> bool {
    fn count(e: &End, n: usize) -> BTreeMap<&str, usize> {
        let mut by_method: BTreeMap<&str, usize> = BTreeMap::new();
        for (r, method, _) in &e.by_request.origins.writes {
            if *r == n {
                *by_method.entry(method.as_str()).or_default() += 1;
            }
        }
        by_method
    }
    let (wanted, made) = (count(reference, n), count(end, n));
    !wanted.is_empty()
        && wanted
            .iter()
            .all(|(method, k)| made.get(method).copied().unwrap_or(0) >= *k)
}

/// The soak's check after its sweep: a claim still in progress at the end (its lease long
/// past: nothing runs past 6 hours) was left by the run that owns it dying (a kill, its
/// deadline), or by a ledger call of that run failing (a completion refused, its answer lost,
/// slow past the deadline), and by nothing else: a run that died or met a ledger fault does
/// not excuse a claim another run took and left.
fn claims_left_explained(end: &End) -> Result<(), String> {
    use crate::ledger::Status;
    let mut left = Vec::new();
    for (key, status) in &end.ledger {
        if *status != Status::InProgress || !end.by_request.keys.contains_key(key) {
            continue;
        }
        let Some(owner) = end.by_request.claimers.get(key).copied() else {
            left.push(format!("{key} (claimed by no run)"));
            continue;
        };
        let died = end
            .runs
            .iter()
            .any(|r| r.number == owner && matches!(r.end, Some(RunEnd::Died)));
        let ledger_failed =
            end.struck
                .iter()
                .zip(&end.by_request.struck_runs)
                .any(|((fault, kind, ..), run)| {
                    *run == owner && *kind == SiteKind::Ledger && *fault != Fault::SdkRetry
                });
        if !died && !ledger_failed {
            left.push(format!("{key} (run {owner}'s claim)"));
        }
    }
    match left.is_empty() {
        true => Ok(()),
        false => Err(format!(
            "{} in progress at the end, and the run that holds it neither died nor met a \
             ledger call failing",
            left.join(", ")
        )),
    }
}

/// The scene's requests, and whose they are (the app, the workspace).
fn describe_scene(scene: &Scene, spec: &Spec) -> String {
    format!(
        "{}, from {} in {}",
        super::describe(&scene.steps),
        spec.tenant.app_id,
        spec.tenant.team
    )
}

/// A setting's name: bit 0 deferred mode, bit 1 installed through OAuth, bit 2 over Socket
/// Mode.
fn mode_name(setting: usize) -> &'static str {
    match setting {
        0 => "synchronous",
        1 => "deferred",
        2 => "synchronous, installed through OAuth (its token rotating, Slack's history limit)",
        3 => "deferred, installed through OAuth (its token rotating, Slack's history limit)",
        4 => "synchronous over Socket Mode",
        5 => "deferred over Socket Mode",
        6 => {
            "synchronous over Socket Mode, installed through OAuth (its token rotating, \
              Slack's history limit)"
        }
        _ => {
            "deferred over Socket Mode, installed through OAuth (its token rotating, Slack's \
              history limit)"
        }
    }
}

/// The process's CPU time (user and system), in seconds, where `/proc` says.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command's closing parenthesis: utime and stime are 14th and 15th.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // Linux's USER_HZ is 100 on every architecture it runs Lambda's and this project's on.
    Some((utime + stime) / 100.0)
}

impl SimulationReport {
    /// Simulated requests per second of CPU time (of wall time where the CPU's is unknown).
    pub fn rate(&self) -> f64 {
        let seconds = self.cpu.unwrap_or(self.elapsed.as_secs_f64()).max(1e-9);
        self.requests as f64 / seconds
    }

    /// Panics with the failure, if there is one.
    pub fn assert_ok(&self) {
        if self.failure.is_some() {
            panic!("{self}");
        }
    }

    /// What a million requests of this mix count, per unit priced (see docs/cost-and-scale.md), and their
    /// cost in US dollars.
    pub fn per_million(&self) -> PerMillion {
        let all = self.kinds.values().fold(Tally::default(), |mut a, t| {
            a.add(t);
            a
        });
        let scale = 1_000_000.0 / (all.requests.max(1) as f64);
        PerMillion {
            invocations: all.invocations as f64 * scale,
            ledger_writes: all.ledger_writes as f64 * scale,
            ledger_reads: all.ledger_reads as f64 * scale,
            queue_calls: all.queue_calls as f64 * scale,
            slack_calls: (all.slack_writes + all.slack_reads) as f64 * scale,
        }
    }
}

/// The counted units of a million requests of a simulation's mix.
#[derive(Clone, Copy, Debug)]
pub struct PerMillion {
    /// Lambda invocations.
    pub invocations: f64,
    /// DynamoDB writes (each a write request unit: the ledger's items are under 1 KB).
    pub ledger_writes: f64,
    /// DynamoDB reads (strongly consistent: one read request unit each).
    pub ledger_reads: f64,
    /// SQS requests (send, receive, delete).
    pub queue_calls: f64,
    /// Slack Web API calls (free, but rate-limited).
    pub slack_calls: f64,
}

impl PerMillion {
    /// Their price in US dollars at us-east-1's on-demand prices (docs/cost-and-scale.md's): Lambda
    /// $0.20 per million requests, DynamoDB $0.625 per million write and $0.125 per million
    /// read request units, SQS $0.40 per million requests (duration not included: virtual
    /// time is not CPU time).
    pub fn dollars(&self) -> f64 {
        (self.invocations * 0.20
            + self.ledger_writes * 0.625
            + self.ledger_reads * 0.125
            + self.queue_calls * 0.40)
            / 1_000_000.0
    }
}

impl fmt::Display for SimulationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.failure.is_some() {
            writeln!(
                f,
                "stopped at the first schedule that broke an invariant (seed {}, {:.1} s)",
                self.seed,
                self.elapsed.as_secs_f64()
            )?;
        } else {
            writeln!(
                f,
                "simulated {} requests in {} schedules (seed {}, {} threads): {:.1} s wall, {}",
                self.requests,
                self.schedules,
                self.seed,
                self.threads,
                self.elapsed.as_secs_f64(),
                match self.cpu {
                    Some(cpu) =>
                        format!("{cpu:.1} s CPU, {:.0} requests per CPU second", self.rate()),
                    None => format!("{:.0} requests a second", self.rate()),
                }
            )?;
            let tenants: Vec<String> = self
                .tenants
                .iter()
                .map(|(tenant, n)| format!("{tenant}: {n}"))
                .collect();
            writeln!(
                f,
                "schedules by the app and workspace their requests came from (one ledger): {}",
                tenants.join(", ")
            )?;
            if self.socket_mode > 0 {
                writeln!(
                    f,
                    "of which delivered over Socket Mode: {}",
                    self.socket_mode
                )?;
            }
        }
        if self.requests > 0 {
            writeln!(
                f,
                "\n| kind | requests | answered | failed (reasons below) | not taken | not sent | redriven | invocations | ledger writes | ledger reads | Slack calls | queue calls |"
            )?;
            writeln!(
                f,
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
            )?;
            let per = |n: u64, t: &Tally| n as f64 / t.requests.max(1) as f64;
            for kind in &self.order {
                let Some(t) = self.kinds.get(kind) else {
                    continue;
                };
                writeln!(
                    f,
                    "| {kind} | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                    t.requests,
                    t.answered,
                    t.failed_total(),
                    t.not_taken,
                    t.not_sent,
                    t.redriven,
                    per(t.invocations, t),
                    per(t.ledger_writes, t),
                    per(t.ledger_reads, t),
                    per(t.slack_writes + t.slack_reads, t),
                    per(t.queue_calls, t),
                )?;
            }
        }
        let mut reasons: BTreeMap<(&str, &str), (u64, u64)> = BTreeMap::new();
        for (kind, t) in &self.kinds {
            for (why, n) in &t.failed {
                let first = t.examples.get(why).copied().unwrap_or_default();
                reasons.insert((kind.as_str(), why.as_str()), (*n, first));
            }
        }
        if !reasons.is_empty() {
            writeln!(
                f,
                "\nfailed, by reason (and the first schedule that shows it: --only N):"
            )?;
            for ((kind, why), (n, first)) in reasons {
                writeln!(f, "  {kind}: {why}: {n} (schedule {first})")?;
            }
        }
        let answered_failed: Vec<(&str, &str, u64)> = self
            .kinds
            .iter()
            .flat_map(|(kind, t)| {
                t.answered_failed
                    .iter()
                    .map(move |(why, n)| (kind.as_str(), why.as_str(), *n))
            })
            .collect();
        if !answered_failed.is_empty() {
            writeln!(
                f,
                "\nanswered in Slack, though the ledger records the claim failed (its last write \
                 applied, Slack's answer an error):"
            )?;
            for (kind, why, n) in answered_failed {
                writeln!(f, "  {kind}: {why}: {n}")?;
            }
        }
        if let Some(trace) = &self.trace {
            writeln!(f, "\nthe schedule's trace:\n{trace}")?;
        }
        if self.requests > 0 {
            let m = self.per_million();
            writeln!(
                f,
                "\na million requests of this mix: {:.0} invocations, {:.0} ledger writes, {:.0} \
                 ledger reads, {:.0} queue calls, {:.0} Slack calls: ${:.2} (Lambda requests, \
                 DynamoDB, SQS; not duration)",
                m.invocations,
                m.ledger_writes,
                m.ledger_reads,
                m.queue_calls,
                m.slack_calls,
                m.dollars()
            )?;
        }
        match &self.failure {
            None => writeln!(f, "\nevery invariant held in every schedule"),
            Some(sf) => {
                let number = match sf.schedule_number {
                    Some(n) => format!(
                        "schedule {n} (of seed {}; drew {} fault(s), shrunk to {})",
                        self.seed,
                        sf.drawn_faults,
                        sf.failure.schedule.faults.len()
                    ),
                    None => "the fault-free run".into(),
                };
                writeln!(f, "\nFAILED: {number}: {} in {} mode", sf.scene, sf.mode)?;
                for why in &sf.failure.broken {
                    writeln!(f, "  broken: {why}")?;
                }
                writeln!(f, "  the trace:\n{}", sf.failure.trace)?;
                if let Some(n) = sf.schedule_number {
                    writeln!(f, "  run it again: {} --only {n}", self.replay)?;
                }
                writeln!(
                    f,
                    "  or explore it: an Explorer of the scene's requests{}, with .replay({:?})",
                    if sf.mode.starts_with("deferred") {
                        " in deferred mode"
                    } else {
                        ""
                    },
                    sf.failure.schedule.to_text()
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// The simulation's worker timeout is the template's longest: a template that allows a
    /// longer one fails here until the simulation runs with it.
    #[test]
    fn the_simulation_runs_with_the_templates_longest_worker_timeout() {
        let template = include_str!("../../../template.yaml");
        let allowed = template
            .split("\n  WorkerTimeout:\n")
            .nth(1)
            .and_then(|rest| rest.lines().find(|l| l.contains("AllowedValues:")))
            .expect("WorkerTimeout's AllowedValues in template.yaml");
        let longest = allowed
            .split(['[', ']', ','])
            .filter_map(|v| v.trim().parse::<u64>().ok())
            .max()
            .expect("numbers in WorkerTimeout's AllowedValues");
        assert_eq!(
            super::LONGEST_WORKER_TIMEOUT.as_secs(),
            longest,
            "{allowed}"
        );
    }
}
