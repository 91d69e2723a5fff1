//! The crash explorer: your bot's listeners, run through every way a request's life can go
//! wrong, with what Slack and the ledger show checked after each.
//!
//! ```no_run
//! use slack_once::app::{App, Ctx, MessageEvent};
//! use slack_once::testing::explore::{Explorer, Request};
//!
//! fn app() -> App {
//!     App::new().message_where(|m: &MessageEvent| m.mention, |ctx: Ctx, _m| async move {
//!         ctx.reply("hello").await?;
//!         Ok(())
//!     })
//! }
//!
//! #[test]
//! fn every_crash_leaves_one_answer() {
//!     Explorer::new(app).request(Request::mention("hi")).run().assert_ok();
//! }
//! ```
//!
//! For each request (an event, a person's message with its copies, a slash command, a button,
//! a view submission, a shortcut, an assistant's question) and each mode (synchronous, and
//! deferred with [`Explorer::deferred`]), the explorer runs the request's whole life once per
//! *schedule*, in process and on virtual time (a lease, Slack's retry after five minutes, the
//! queue's redelivery after twelve all pass at once), against the in-memory ledger and
//! [`crate::testing::FakeSlack`]: every delivery Slack makes, each to a process of its own,
//! every receive of the work queue, each to a worker of its own, every process killed at its
//! deadline as Lambda kills it. A schedule picks:
//! - where a process dies: before or after each ledger call, before a Slack call, after Slack
//!   applied a call and before its answer arrived ([`Fault`]);
//! - which answers are lost or slow (the ledger's, Slack's, a `response_url`'s, the queue's),
//!   the ledger's SDK sending a call twice;
//! - what Slack answers: a transient error, a 429 with `Retry-After` (60 s for a look-up, as
//!   Slack's 2025 history limit), `internal_error` after taking effect, a refusal for good
//!   (a look-up refused: `missing_scope`);
//! - how the request comes again ([`Story`]): Slack's three retries after each failure it sees
//!   (the last with no delivery after it), the queue's redeliveries up to `maxReceiveCount`,
//!   an interaction Slack never retries or the same request sent twice, every copy at once
//!   to instances of their own, an old version answering first during a deploy.
//!
//! First the fault-free run, which is the measure of what the listeners write; then every
//! story without faults; then every single fault at every site the runs reach; then a second
//! fault at every site of the runs that follow a crash (every crash point of a takeover);
//! then schedules drawn from the seed, until the budget is spent. After each schedule the
//! invariants (the `check` module's list, and yours: [`Explorer::invariant`]) are checked. The first
//! schedule that breaks one is shrunk to the fewest faults that still break it, and
//! [`Report::assert_ok`] panics with its trace: each delivery, each ledger call, each Slack
//! call and its answer, where the process died, and the schedule as text to give
//! [`Explorer::replay`].
//!
//! Several requests are explored as one life with [`Explorer::sequence`] (a command, a click on
//! the message it posted, a mention later, each on processes of their own) or
//! [`Explorer::together`] (sent at the same moment, their runs interleaved at every call); each
//! is checked against its own part of the fault-free run. The world can be seeded before the
//! first request ([`Explorer::with_state`], [`Explorer::with_message`]) and the app's state read
//! at the end ([`End::state`]). The report says what the fault-free run did (each run, each
//! write and Slack's answer); a request no listener takes fails unless the test says so
//! ([`Request::unhandled`]); a write made around slack-once's client, through
//! [`crate::slack::api_url`], is named as broken.
//!
//! A fleet's traffic, many requests of a mix each with faults drawn at given rates, is
//! [`Simulation`]'s: every schedule checked by the same invariants, the fates tallied per kind.
//! It and its report have one path each, here:
//!
//! ```compile_fail,E0603
//! use slack_once::testing::explore::simulate::Simulation;
//! ```
//!
//! The budget: `SLACK_ONCE_EXPLORE` unset gives each exploration 250 schedules or 20 s,
//! whichever ends first; `long`, 20,000 or 10 minutes; a number, that many schedules (within
//! an hour). [`Explorer::schedules`] sets it in code. The seed is printed; `SLACK_ONCE_SEED`
//! or [`Explorer::seed`] sets it.

pub(crate) mod check;
mod door;
mod end;
mod hooks;
mod ledger;
mod request;
mod run;
mod schedule;
mod simulate;
mod slack;
mod store;
mod tenants;
mod world;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use check::Compare;
pub use end::{End, RunView};
pub use request::Request;
pub use run::AppFactory;
pub use schedule::{At, Fault, FaultRates, Schedule, SiteKind, Story};
pub use simulate::{PerMillion, SimFailure, Simulation, SimulationReport, Tally};
pub use world::{RunEnd, RunKind};

use crate::app::App;
use run::{Seeds, Spec, Start, Step};
use world::Plan;

/// An invariant of your own bot: `Err` says what broke.
pub type Invariant = Arc<dyn Fn(&End) -> Result<(), String> + Send + Sync>;

/// How much exploring one request in one mode may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// How many schedules to explore per request and mode.
    pub schedules: usize,
    /// How long exploring may take (wall time): it stops at the first of the two limits.
    pub time: Duration,
}

impl Budget {
    /// From `SLACK_ONCE_EXPLORE`: unset, 250 schedules or 20 s; `long`, 20,000 or 10
    /// minutes; a number, that many (within an hour).
    pub fn from_env() -> Self {
        match std::env::var("SLACK_ONCE_EXPLORE")
            .ok()
            .as_deref()
            .map(str::trim)
        {
            Some("long") => Budget {
                schedules: 20_000,
                time: Duration::from_secs(600),
            },
            Some(n) if n.parse::<usize>().is_ok() => Budget {
                schedules: n.parse().unwrap_or(250),
                time: Duration::from_secs(3600),
            },
            _ => Budget {
                schedules: 250,
                time: Duration::from_secs(20),
            },
        }
    }
}

/// The explorer: see the [module](self).
pub struct Explorer {
    app: AppFactory,
    old_app: Option<AppFactory>,
    /// Each exploration's requests, in the order they are sent.
    explorations: Vec<Vec<Step>>,
    seeds: Seeds,
    modes: Vec<bool>,
    budget: Budget,
    seed: u64,
    invariants: Vec<(String, Invariant)>,
    replay: Option<Schedule>,
    busy: usize,
    history_per_minute: bool,
    installed: Option<Duration>,
    compare: check::Compare,
    socket_mode: bool,
    socket_lets_held_go: bool,
}

impl Explorer {
    /// Explores the bot `app` builds (once per process, so state of its own starts afresh in
    /// each).
    pub fn new(app: impl Fn() -> App + Send + Sync + 'static) -> Self {
        let seed = std::env::var("SLACK_ONCE_SEED")
            .ok()
            .and_then(|s| {
                let s = s.trim();
                match s.strip_prefix("0x") {
                    Some(hex) => u64::from_str_radix(hex, 16).ok(),
                    None => s.parse().ok(),
                }
            })
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        Self {
            app: Arc::new(app),
            old_app: None,
            explorations: Vec::new(),
            seeds: Seeds::default(),
            modes: vec![false],
            budget: Budget::from_env(),
            seed,
            invariants: Vec::new(),
            replay: None,
            busy: 0,
            history_per_minute: false,
            installed: None,
            compare: check::Compare::Identity,
            socket_mode: false,
            socket_lets_held_go: false,
        }
    }

    /// Compares what the bot's messages show between the fault-free run and each schedule,
    /// not only which messages they are: for a bot whose messages must read the same in
    /// every run (by default, as the journal does, a message of slack-once's is compared by
    /// its identity, and may show another time or count in another run).
    pub fn compare_content(self) -> Self {
        self.compare_content_by(|v| v.clone())
    }

    /// As [`Explorer::compare_content`], each write first made what `normalize` makes of it
    /// (a message or ephemeral's JSON: `text`, `blocks`, `attachments`…): drop or mask what
    /// may differ between runs (a time it shows, an id it makes up).
    ///
    /// ```
    /// # use slack_once::testing::explore::Explorer;
    /// # fn app() -> slack_once::app::App { slack_once::app::App::new() }
    /// let explorer = Explorer::new(app).compare_content_by(|m| {
    ///     let mut m = m.clone();
    ///     // "Noted at <!date^1767225600^{time}|now>.": every run notes another time.
    ///     if let Some(text) = m["text"].as_str() {
    ///         m["text"] = text.split("<!date").next().unwrap_or("").into();
    ///     }
    ///     m
    /// });
    /// ```
    pub fn compare_content_by(
        mut self,
        normalize: impl Fn(&serde_json::Value) -> serde_json::Value + Send + Sync + 'static,
    ) -> Self {
        self.compare = check::Compare::Content(Arc::new(normalize));
        self
    }

    /// Multi-workspace mode: the app is installed in the workspace through OAuth, with token
    /// rotation on and `left` before its token expires (within `SLACK_TOKEN_REFRESH_MINUTES`'
    /// default of 120, a request refreshes it: beside the request with more than a minute
    /// left; at its first call, after the claim, with less). Every call must carry a token Slack issued to this
    /// workspace, the refresh must leave the installation working, and Slack's token
    /// endpoint (`oauth.v2.access`) is a site of faults like any other call.
    pub fn installed(mut self, left: Duration) -> Self {
        self.installed = Some(left);
        self
    }

    /// A busy conversation: after the bot's first post in a conversation, `people` messages
    /// of people follow it there (a look-up for the post then pages back through them).
    pub fn busy(mut self, people: usize) -> Self {
        self.busy = people;
        self
    }

    /// Slack's 2025 history limit for distributed apps outside the Marketplace: one
    /// `conversations.history` and one `conversations.replies` a minute (a 429 with
    /// `Retry-After` for the rest of the minute), 15 messages a page.
    pub fn history_limit(mut self) -> Self {
        self.history_per_minute = true;
        self
    }

    /// A request to explore (several: each is explored in turn, on its own).
    pub fn request(mut self, request: Request) -> Self {
        self.explorations.push(vec![Step {
            request,
            start: Start::AtOnce,
        }]);
        self
    }

    /// Requests explored together, one after the other, as people make them: a click on the
    /// bot's message ([`Request::on_posted_message`]) or the submission of a view it opened
    /// ([`Request::submit_opened_view`]) once that is in Slack (and the person took 5 s to
    /// read it), any other request 30 s after the one before (virtual time). Each runs on
    /// processes of its own, with its own retries and faults, while the requests before it
    /// may still be running (a takeover, a retry, a redelivery). Each request is checked
    /// against its own part of the fault-free run; an invariant of your own sees them all.
    ///
    /// ```
    /// # use slack_once::testing::explore::{Explorer, Request};
    /// # fn app() -> slack_once::app::App { slack_once::app::App::new() }
    /// let explorer = Explorer::new(app).sequence([
    ///     Request::command("/handoff", "<@U0BOB|bob> the database is slow"),
    ///     Request::click("acknowledge", "").as_user("U0BOB").on_posted_message(),
    ///     Request::mention("who is on call?"),
    /// ]);
    /// ```
    pub fn sequence(mut self, requests: impl IntoIterator<Item = Request>) -> Self {
        let steps: Vec<Step> = requests
            .into_iter()
            .enumerate()
            .map(|(i, request)| Step {
                start: if i == 0 || request.with_previous {
                    Start::AtOnce
                } else {
                    Start::AfterPrevious
                },
                request,
            })
            .collect();
        assert!(!steps.is_empty(), "Explorer::sequence: give it a request");
        self.explorations.push(steps);
        self
    }

    /// Requests explored together, all sent at the same moment (two people's commands in one
    /// channel): their runs interleave at every call to the ledger and to Slack.
    pub fn together(mut self, requests: impl IntoIterator<Item = Request>) -> Self {
        let steps: Vec<Step> = requests
            .into_iter()
            .map(|request| Step {
                request,
                start: Start::AtOnce,
            })
            .collect();
        assert!(!steps.is_empty(), "Explorer::together: give it a request");
        self.explorations.push(steps);
        self
    }

    /// The app's state holds `value` under `name` before the first request
    /// ([`crate::app::Ctx::state`]'s: the workspace's, with [`Explorer::installed`]).
    pub fn with_state(mut self, name: &str, value: impl serde::Serialize) -> Self {
        let value = serde_json::to_value(value).expect("Explorer::with_state: a JSON value");
        self.seeds.state.push((name.to_string(), false, value));
        self
    }

    /// The app's state shared by every workspace ([`crate::app::Ctx::shared_state`]) holds
    /// `value` under `name` before the first request.
    pub fn with_shared_state(mut self, name: &str, value: impl serde::Serialize) -> Self {
        let value = serde_json::to_value(value).expect("Explorer::with_shared_state: a JSON value");
        self.seeds.state.push((name.to_string(), true, value));
        self
    }

    /// A message in Slack before the first request: `{"channel": …, "ts": …, "user": …,
    /// "text": …}` (a person's), or the bot's own earlier one (with `"bot_id":
    /// slack_once::testing::BOT_ID`, `"app_id": slack_once::testing::APP_ID`).
    pub fn with_message(mut self, message: serde_json::Value) -> Self {
        assert!(
            message["channel"].is_string() && message["ts"].is_string(),
            "Explorer::with_message: a message has a channel and a ts"
        );
        self.seeds.messages.push(message);
        self
    }

    /// A Workflow Builder step execution of `callback_id` with `inputs` is running before the
    /// first request (its `function_executed` answered earlier: seed what it posted with
    /// [`Explorer::with_message`]), for requests [`Request::in_step`] in it.
    pub fn with_execution(mut self, callback_id: &str, inputs: serde_json::Value) -> Self {
        self.seeds
            .executions
            .push((callback_id.to_string(), inputs));
        self
    }

    /// In deferred mode only (an ingress that hands each request to the work queue, workers
    /// that answer it).
    pub fn deferred(mut self) -> Self {
        self.modes = vec![true];
        self
    }

    /// In synchronous mode, then in deferred mode.
    pub fn both_modes(mut self) -> Self {
        self.modes = vec![false, true];
        self
    }

    /// Slack delivers over Socket Mode, not HTTP: each delivery is an envelope to a connection
    /// of a long-lived process (of its own), run through the Socket Mode dispatch and
    /// acknowledged or not. Slack's 3 s for an acknowledgement, then an event again at once,
    /// up to 3 times (all perhaps inside the lease of a claimant that died: the dispatch keeps
    /// the last in hand); a command or an interaction never again. Besides the faults of every
    /// run, each delivery of the fault-free run is tried sent to a ghost connection (a dead
    /// process's registration), which swallows it. The `forged` story (a replayed signature)
    /// is HTTP's, left out.
    pub fn socket_mode(mut self) -> Self {
        self.socket_mode = true;
        self
    }

    /// With [`Explorer::socket_mode`], a defect planted in the dispatch, for checking the
    /// checker: an event found held by another delivery is let go unacknowledged at once, not
    /// kept in hand until the claim ends or lapses.
    pub fn plant_socket_lets_held_go(mut self) -> Self {
        self.socket_lets_held_go = true;
        self
    }

    /// The version a deploy replaces: [`Story::Deploy`] has it answer first.
    pub fn old_version(mut self, app: impl Fn() -> App + Send + Sync + 'static) -> Self {
        self.old_app = Some(Arc::new(app));
        self
    }

    /// At most `n` schedules per request and mode.
    pub fn schedules(mut self, n: usize) -> Self {
        self.budget.schedules = n;
        self
    }

    /// At most this long per request and mode.
    pub fn time(mut self, time: Duration) -> Self {
        self.budget.time = time;
        self
    }

    /// The seed of the drawn schedules.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// An invariant of your own, checked after every schedule.
    pub fn invariant(
        mut self,
        name: &str,
        check: impl Fn(&End) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.invariants.push((name.to_string(), Arc::new(check)));
        self
    }

    /// Runs exactly this schedule (as a failure printed it: `plain; 1.3=dies-after`), and
    /// no other.
    pub fn replay(mut self, schedule: &str) -> Self {
        match Schedule::parse(schedule) {
            Ok(s) => self.replay = Some(s),
            Err(e) => panic!("Explorer::replay: {e}"),
        }
        self
    }

    /// Explores every request in every mode (on a thread of its own: call it from a test,
    /// async or not).
    pub fn run(self) -> Report {
        assert!(
            !self.explorations.is_empty(),
            "Explorer: give it a request (Explorer::request)"
        );
        on_a_thread_of_its_own(move || self.run_here())
    }

    fn run_here(self) -> Report {
        hooks::install();
        let running = door::Running::start();
        let began = Instant::now();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let _guard = tracing::subscriber::set_default(log_to(logs.clone()));
        let mut explored = Vec::new();
        for steps in &self.explorations {
            for deferred in &self.modes {
                let spec = Arc::new(Spec {
                    explorer: running.0,
                    steps: steps.clone(),
                    seeds: self.seeds.clone(),
                    deferred: *deferred,
                    app: self.app.clone(),
                    old_app: self.old_app.clone(),
                    timeout: Duration::from_secs(10),
                    worker_timeout: Duration::from_secs(120),
                    max_receives: 5,
                    busy: self.busy,
                    history_per_minute: self.history_per_minute,
                    installed: self.installed,
                    tenant: tenants::Tenant::of(0, 0),
                    other_apps_token: false,
                    state_of_other_workspace: false,
                    redrive: false,
                    lease_past_deadline: Duration::ZERO,
                    drop_takeover_finish: false,
                    socket_mode: self.socket_mode,
                    socket_lets_held_go: self.socket_lets_held_go,
                    store: store::Store::Memory,
                });
                explored.push(self.explore(spec, &logs));
            }
        }
        Report {
            explored,
            around: door::orphans_of(running.0, began),
        }
    }

    /// Runs one schedule and checks it; the broken invariants.
    fn try_one(
        &self,
        spec: &Arc<Spec>,
        reference: &End,
        story: Story,
        plan: Plan,
        logs: &Arc<Mutex<Vec<u8>>>,
    ) -> (End, Vec<String>) {
        let end = run::run(spec.clone(), story, plan, logs.clone());
        let mut broken = check::check(&self.compare, reference, &end);
        for (name, invariant) in &self.invariants {
            if let Err(why) = invariant(&end) {
                broken.push(format!("{name}: {why}"));
            }
        }
        (end, broken)
    }

    fn explore(&self, spec: Arc<Spec>, logs: &Arc<Mutex<Vec<u8>>>) -> Exploration {
        let started = Instant::now();
        let mode = match (spec.deferred, spec.socket_mode) {
            (false, false) => "synchronous",
            (true, false) => "deferred",
            (false, true) => "synchronous Socket Mode",
            (true, true) => "deferred Socket Mode",
        };
        let mut exploration = Exploration {
            request: describe(&spec.steps),
            fault_free: String::new(),
            mode,
            seed: self.seed,
            schedules: 0,
            enumerated: 0,
            drawn: 0,
            untried: 0,
            untried_single_faults: 0,
            lost_with_last_chance: 0,
            elapsed: Duration::ZERO,
            failure: None,
            replayed: None,
            budget: self.budget,
        };
        let reference = match self.fault_free(&spec, logs) {
            Ok(reference) => reference,
            Err(failed) => {
                let (broken, reference) = *failed;
                exploration.fault_free = fault_free_text(&reference);
                exploration.failure = Some(Failure::new(Schedule::plain(), broken, &reference));
                return exploration;
            }
        };
        exploration.fault_free = fault_free_text(&reference);

        let mut failing: Option<(Schedule, Vec<String>, End)> = None;
        let out_of_budget =
            |n: usize| n >= self.budget.schedules || started.elapsed() >= self.budget.time;
        if let Some(schedule) = &self.replay {
            let (end, broken) = self.try_one(
                &spec,
                &reference,
                schedule.story,
                Plan::Fixed(schedule.faults.clone()),
                logs,
            );
            exploration.schedules = 1;
            exploration.enumerated = 1;
            if !broken.is_empty() {
                exploration.failure = Some(Failure::new(schedule.clone(), broken, &end));
            } else {
                exploration.failure = None;
                exploration.replayed = Some(trace_text(&end));
            }
            exploration.elapsed = started.elapsed();
            return exploration;
        }

        // Every story without faults, then every single fault at every site of the
        // fault-free runs, then a crash at each site of the runs a crash leads to.
        let stories: Vec<Story> = Story::ALL
            .into_iter()
            .filter(|s| {
                *s != Story::Forged || (spec.steps[0].request.is_event() && !spec.socket_mode)
            })
            .collect();
        let mut queue: VecDeque<Schedule> = VecDeque::new();
        for story in &stories {
            if *story != Story::Plain {
                queue.push_back(Schedule {
                    story: *story,
                    faults: BTreeMap::new(),
                });
            }
        }
        for (i, run) in reference.runs.iter().enumerate() {
            // Over Socket Mode, the delivery sent to a ghost connection.
            if spec.socket_mode && matches!(run.kind, RunKind::Delivery { .. }) {
                let at = At {
                    run: i as u32 + 1,
                    site: 0,
                };
                queue.push_back(Schedule {
                    story: Story::Plain,
                    faults: BTreeMap::from([(at, Fault::DiesBefore)]),
                });
            }
            for (j, kind) in run.sites.iter().enumerate() {
                for fault in Fault::at(*kind) {
                    let mut faults = BTreeMap::new();
                    faults.insert(
                        At {
                            run: i as u32 + 1,
                            site: j as u32 + 1,
                        },
                        *fault,
                    );
                    queue.push_back(Schedule {
                        story: Story::Plain,
                        faults,
                    });
                }
            }
        }
        let mut seen: BTreeSet<String> = BTreeSet::new();
        while let Some(schedule) = queue.pop_front() {
            if out_of_budget(exploration.schedules) {
                // The budget cuts the enumeration short: the report says what it left.
                queue.push_front(schedule);
                let mut left = BTreeSet::new();
                for schedule in &queue {
                    let text = schedule.to_text();
                    if seen.contains(&text) || !left.insert(text) {
                        continue;
                    }
                    exploration.untried += 1;
                    if schedule.story == Story::Plain && schedule.faults.len() == 1 {
                        exploration.untried_single_faults += 1;
                    }
                }
                break;
            }
            if !seen.insert(schedule.to_text()) {
                continue;
            }
            let (end, broken) = self.try_one(
                &spec,
                &reference,
                schedule.story,
                Plan::Fixed(schedule.faults.clone()),
                logs,
            );
            exploration.schedules += 1;
            exploration.enumerated += 1;
            if lost_with_last_chance(&end) {
                exploration.lost_with_last_chance += 1;
            }
            if !broken.is_empty() {
                failing = Some((schedule, broken, end));
                break;
            }
            // A crash: each site of each run after it meets a crash in turn.
            if schedule.faults.len() == 1 && schedule.story == Story::Plain {
                let (at, fault) = schedule
                    .faults
                    .iter()
                    .next()
                    .map(|(a, f)| (*a, *f))
                    .unwrap();
                if fault.is_crash() {
                    for (i, run) in end.runs.iter().enumerate().skip(at.run as usize) {
                        for (j, kind) in run.sites.iter().enumerate() {
                            let second_faults = Fault::at(*kind)
                                .iter()
                                .filter(|f| f.is_crash() || **f == Fault::Refused);
                            for second in second_faults {
                                let mut faults = schedule.faults.clone();
                                faults.insert(
                                    At {
                                        run: i as u32 + 1,
                                        site: j as u32 + 1,
                                    },
                                    *second,
                                );
                                queue.push_back(Schedule {
                                    story: Story::Plain,
                                    faults,
                                });
                            }
                        }
                    }
                }
            }
        }
        // Then schedules drawn from the seed.
        let mut rng = schedule::Rng::new(self.seed);
        while failing.is_none() && !out_of_budget(exploration.schedules) {
            let story = stories[rng.below(stories.len())];
            let plan = Plan::Drawn {
                rng: schedule::Rng::new(rng.next_u64()),
                rate: 0.15,
                max: 1 + rng.below(4),
                drawn: BTreeMap::new(),
            };
            let (end, broken) = self.try_one(&spec, &reference, story, plan, logs);
            exploration.schedules += 1;
            exploration.drawn += 1;
            if lost_with_last_chance(&end) {
                exploration.lost_with_last_chance += 1;
            }
            if !broken.is_empty() {
                let schedule = Schedule {
                    story,
                    faults: end.faults.clone(),
                };
                failing = Some((schedule, broken, end));
            }
        }
        if let Some((schedule, broken, end)) = failing {
            let (schedule, broken, end) =
                self.shrink(&spec, &reference, schedule, broken, end, logs);
            exploration.failure = Some(Failure::new(schedule, broken, &end));
        }
        exploration.elapsed = started.elapsed();
        exploration
    }

    /// The fault-free run of `spec`, which must keep every invariant of its own (an
    /// acknowledgement dropped, a remembered result computed twice, a token in the logs need
    /// no fault): `Err` with what it broke.
    fn fault_free(
        &self,
        spec: &Arc<Spec>,
        logs: &Arc<Mutex<Vec<u8>>>,
    ) -> Result<End, Box<(Vec<String>, End)>> {
        let reference = run::run(
            spec.clone(),
            Story::Plain,
            Plan::Fixed(BTreeMap::new()),
            logs.clone(),
        );
        if reference.unfinished {
            return Err(Box::new((
                vec!["the fault-free run did not end".into()],
                reference,
            )));
        }
        let mut own = check::check(&self.compare, &reference, &reference);
        own.extend(check::clean(&reference));
        own.extend(taken(&spec.steps, &reference));
        // A replay's own invariants are about the schedule replayed.
        let invariants = if self.replay.is_some() {
            &[][..]
        } else {
            &self.invariants[..]
        };
        for (name, invariant) in invariants {
            if let Err(why) = invariant(&reference) {
                own.push(format!("{name}: {why}"));
            }
        }
        match own.is_empty() {
            true => Ok(reference),
            false => Err(Box::new((own, reference))),
        }
    }

    /// The fewest faults (and the plainest story) that still break an invariant.
    fn shrink(
        &self,
        spec: &Arc<Spec>,
        reference: &End,
        mut schedule: Schedule,
        mut broken: Vec<String>,
        mut end: End,
        logs: &Arc<Mutex<Vec<u8>>>,
    ) -> (Schedule, Vec<String>, End) {
        loop {
            let mut candidates = Vec::new();
            if schedule.story != Story::Plain {
                candidates.push(Schedule {
                    story: Story::Plain,
                    faults: schedule.faults.clone(),
                });
            }
            for at in schedule.faults.keys() {
                let mut fewer = schedule.clone();
                fewer.faults.remove(at);
                candidates.push(fewer);
            }
            let mut smaller = None;
            for candidate in candidates {
                let (e, b) = self.try_one(
                    spec,
                    reference,
                    candidate.story,
                    Plan::Fixed(candidate.faults.clone()),
                    logs,
                );
                if !b.is_empty() {
                    smaller = Some((candidate, b, e));
                    break;
                }
            }
            match smaller {
                Some((s, b, e)) => {
                    schedule = s;
                    broken = b;
                    end = e;
                }
                None => return (schedule, broken, end),
            }
        }
    }
}

/// What the requests of an exploration are, as a person reads them.
fn describe(steps: &[Step]) -> String {
    let mut text = String::new();
    for (i, step) in steps.iter().enumerate() {
        if i > 0 {
            text.push_str(match step.start {
                Start::AtOnce => " and, at once, ",
                Start::AfterPrevious => ", then ",
            });
        }
        text.push_str(&step.request.describe());
    }
    text
}

/// What the fault-free run must show of each request: that it was sent, and that a listener
/// took it (unless the test says none is to).
fn taken(steps: &[Step], reference: &End) -> Vec<String> {
    let mut broken = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let what = if steps.len() > 1 {
            format!("request {} ({})", i + 1, step.request.describe())
        } else {
            step.request.describe()
        };
        if let Some(why) = reference.by_request.unsent.get(&i) {
            broken.push(format!(
                "sent: in the fault-free run, {what} cannot be sent: {why}"
            ));
            continue;
        }
        // A copy no listener takes while another is taken (an `app_mention` listener and the
        // mention's `message` event) is a request taken.
        let outcomes: Vec<&str> = reference
            .runs
            .iter()
            .filter(|r| r.request == i)
            .filter_map(|r| match &r.end {
                Some(RunEnd::Answered { outcome, .. } | RunEnd::Handled { outcome, .. }) => {
                    Some(outcome.as_str())
                }
                _ => None,
            })
            .collect();
        let untaken = outcomes.contains(&"no_listener")
            && !outcomes
                .iter()
                .any(|o| ["answered", "no_reply", "recovered", "failed"].contains(o));
        if untaken && !step.request.unhandled {
            broken.push(format!(
                "taken by a listener: no listener takes {what} (a typo in its action id, \
                 callback id or command?); if none is meant to, say so with \
                 Request::unhandled()"
            ));
        }
    }
    broken
}

/// What the fault-free run did, as the report shows it: how each run ended, and each write
/// it made to Slack, with Slack's answer.
fn fault_free_text(reference: &End) -> String {
    let mut out = String::new();
    for r in &reference.runs {
        let end = match &r.end {
            Some(RunEnd::Answered {
                status, outcome, ..
            }) => format!("answers Slack {status} {outcome}"),
            Some(RunEnd::Handled { deleted, outcome }) => format!(
                "{outcome}: the message is {}",
                if *deleted {
                    "deleted"
                } else {
                    "left on the queue"
                }
            ),
            Some(RunEnd::Died) => "dies".into(),
            None => "does not end".into(),
        };
        out.push_str(&format!("    run {} ({}): {end}\n", r.number, r.label));
    }
    let mut writes = 0;
    for line in &reference.trace {
        if let (Some(run), Some(site)) = (line.run, line.site) {
            let kind = reference
                .runs
                .get(run as usize - 1)
                .and_then(|r| r.sites.get(site as usize - 1));
            if matches!(kind, Some(SiteKind::SlackWrite | SiteKind::ResponseUrl)) {
                writes += 1;
                out.push_str(&format!("    run {run} writes {}\n", line.text));
            }
        }
    }
    for (method, args) in reference.calls_around_the_crate() {
        writes += 1;
        out.push_str(&format!(
            "    around slack-once's client: {method} {}\n",
            check::brief_value(args)
        ));
    }
    if writes == 0 {
        out.push_str(
            "    it writes nothing to Slack: every invariant about the bot's writes holds \
             because there are none (an invariant of your own can say what it must do)\n",
        );
    }
    out
}

/// Whether the request's last chance died with its process (the window no retry covers).
fn lost_with_last_chance(end: &End) -> bool {
    end.runs
        .last()
        .is_some_and(|r| matches!(r.end, Some(RunEnd::Died)))
}

/// Runs `f` on a thread of its own (its runtimes never nest in the caller's), its panic the
/// caller's.
fn on_a_thread_of_its_own<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(f)
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// The subscriber the processes of a schedule log through: INFO and above, into `logs`.
fn log_to(logs: Arc<Mutex<Vec<u8>>>) -> impl tracing::Subscriber + Send + Sync {
    tracing_subscriber::fmt()
        .with_writer(move || LogWriter(logs.clone()))
        .with_ansi(false)
        .with_target(false)
        .without_time()
        .with_max_level(tracing::Level::INFO)
        .finish()
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What exploring one request in one mode came to.
pub struct Exploration {
    /// The request explored (the requests, in order), as a person reads it.
    pub request: String,
    /// What the fault-free run did: how each run ended, each write it made and Slack's answer.
    pub fault_free: String,
    /// The mode: `synchronous` or `deferred`, followed by ` Socket Mode` over Socket Mode.
    pub mode: &'static str,
    /// The seed of the drawn schedules (`SLACK_ONCE_SEED` replays them).
    pub seed: u64,
    /// Schedules run (the fault-free run not counted).
    pub schedules: usize,
    /// Of which enumerated (every story, every fault at every site, crashes after crashes).
    pub enumerated: usize,
    /// Of which drawn from the seed.
    pub drawn: usize,
    /// Enumerated schedules the budget left untried (0: the enumeration ran to its end).
    pub untried: usize,
    /// Of which a single fault at a site of the fault-free run.
    pub untried_single_faults: usize,
    /// Schedules in which the process holding the request's last chance died (Slack had no
    /// retry left, the queue no receive): lost with it, which no protocol can prevent.
    pub lost_with_last_chance: usize,
    /// How long the exploration took (wall time).
    pub elapsed: Duration,
    /// The budget it ran under.
    pub budget: Budget,
    /// The shortest schedule found that breaks an invariant.
    pub failure: Option<Failure>,
    /// With [`Explorer::replay`], the trace of the schedule replayed when it broke nothing.
    pub replayed: Option<String>,
}

/// A schedule that breaks an invariant.
pub struct Failure {
    /// The schedule, as `replay` takes it.
    pub schedule: Schedule,
    /// The invariants it breaks, each with why.
    pub broken: Vec<String>,
    /// What happened, as a person reads it.
    pub trace: String,
}

impl Failure {
    fn new(schedule: Schedule, broken: Vec<String>, end: &End) -> Self {
        Self {
            schedule,
            broken,
            trace: trace_text(end),
        }
    }
}

/// The trace of a schedule, then the warnings and errors its processes logged.
fn trace_text(end: &End) -> String {
    let mut out = String::new();
    for line in &end.trace {
        let t = format!("+{:.3}s", line.at.as_secs_f64());
        let who = match (line.run, line.site) {
            (Some(r), Some(s)) => format!("  run {r} · {s:<2} "),
            (Some(r), None) => format!("run {r}  "),
            (None, _) => String::new(),
        };
        out.push_str(&format!("  {t:>10}  {who}{}\n", line.text));
    }
    out.push_str("  at the end:\n");
    out.push_str(&format!(
        "    Slack shows {} message(s) of this app{}\n",
        end.messages.len(),
        end.messages
            .iter()
            .map(|m| format!(
                "\n      {} {}{}: {}",
                m["channel"].as_str().unwrap_or("?"),
                m["ts"].as_str().unwrap_or("?"),
                match m["thread_ts"].as_str() {
                    Some(t) => format!(" (thread {t})"),
                    None => String::new(),
                },
                check_brief(m)
            ))
            .collect::<String>()
    ));
    if !end.ephemerals.is_empty() || !end.views.is_empty() {
        out.push_str(&format!(
            "    {} ephemeral message(s), {} view(s)\n",
            end.ephemerals.len(),
            end.views.len()
        ));
    }
    for (key, status) in &end.ledger {
        out.push_str(&format!("    ledger {key}: {}\n", status.as_str()));
    }
    let warnings: Vec<&String> = end
        .logs
        .iter()
        .filter(|l| {
            l.contains(" WARN ")
                || l.contains(" ERROR ")
                || l.starts_with("WARN")
                || l.starts_with("ERROR")
        })
        .collect();
    if !warnings.is_empty() {
        out.push_str("  the processes' warnings and errors:\n");
        for line in warnings.iter().take(40) {
            out.push_str(&format!("    {}\n", line.trim()));
        }
    }
    out
}

fn check_brief(m: &serde_json::Value) -> String {
    let text = m["text"].as_str().unwrap_or("");
    let cut: String = text.chars().take(60).collect();
    let streaming = if m["streaming"] == true {
        " (still streaming)"
    } else {
        ""
    };
    format!("{cut:?}{streaming}")
}

/// Everything the explorer found.
pub struct Report {
    /// Every exploration: one per request and mode.
    pub explored: Vec<Exploration>,
    /// Writes through `slack_once::slack::api_url()` that no schedule knew (from a thread the
    /// bot started, or under a base kept from a schedule that had ended), made while this
    /// explorer ran: never sent, each a failure.
    pub around: Vec<String>,
}

impl Report {
    /// The schedules that broke an invariant.
    pub fn failures(&self) -> impl Iterator<Item = (&Exploration, &Failure)> {
        self.explored
            .iter()
            .filter_map(|e| e.failure.as_ref().map(|f| (e, f)))
    }

    /// Panics with the shortest failing schedule of each exploration that found one (and
    /// with the writes no schedule knew).
    pub fn assert_ok(&self) {
        if self.failures().next().is_some() || !self.around.is_empty() {
            panic!("{self}");
        }
        eprintln!("{self}");
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for what in &self.around {
            writeln!(
                f,
                "slack-once explorer: broken: a Slack call that is not a step of the journal, \
                 and that no schedule knows: {what}"
            )?;
        }
        for e in &self.explored {
            writeln!(
                f,
                "slack-once explorer: {} in {} mode: {} schedules ({} enumerated, {} drawn from seed {:#x}) in {:.1}s{}",
                e.request,
                e.mode,
                e.schedules,
                e.enumerated,
                e.drawn,
                e.seed,
                e.elapsed.as_secs_f64(),
                match &e.failure {
                    None => ": every invariant held".to_string(),
                    Some(_) => ": an invariant broke".to_string(),
                }
            )?;
            if e.untried > 0 {
                writeln!(
                    f,
                    "  the budget ended the enumeration short: {} single fault(s) at a site of \
                     the fault-free run and {} other schedule(s) left untried (more: \
                     SLACK_ONCE_EXPLORE=long, or Explorer::schedules)",
                    e.untried_single_faults,
                    e.untried - e.untried_single_faults
                )?;
            }
            write!(f, "  the fault-free run:\n{}", e.fault_free)?;
            if e.lost_with_last_chance > 0 {
                writeln!(
                    f,
                    "  ({} schedules lost the request with the process that held its last chance)",
                    e.lost_with_last_chance
                )?;
            }
            if let Some(trace) = &e.replayed {
                writeln!(f, "{trace}")?;
            }
            if let Some(failure) = &e.failure {
                writeln!(
                    f,
                    "\nthe shortest schedule that breaks it: {}",
                    failure.schedule
                )?;
                writeln!(f, "broken:")?;
                for b in &failure.broken {
                    writeln!(f, "  - {b}")?;
                }
                writeln!(f, "what happened (virtual time since the request):")?;
                write!(f, "{}", failure.trace)?;
                writeln!(
                    f,
                    "replay it: Explorer::new(app).request(…).replay({:?}), or SLACK_ONCE_SEED={:#x} for the same draws\n",
                    failure.schedule.to_text(),
                    e.seed
                )?;
            }
        }
        Ok(())
    }
}
