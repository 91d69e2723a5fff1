//! The world one schedule runs in: the ledger and Slack every run shares, the runs (each a
//! process: an ingress's delivery, a worker's receive), the faults placed or drawn, and the
//! trace of everything that happened, in virtual time.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::schedule::{At, Fault, FaultRates, Rng, SiteKind};
use super::store::SimStore;
use crate::testing::FakeSlack;

/// Where the faults of a run come from.
pub(crate) enum Plan {
    /// Placed: this fault at this site.
    Fixed(BTreeMap<At, Fault>),
    /// Drawn at each site from a seeded generator, at most `max` in all.
    Drawn {
        rng: Rng,
        rate: f64,
        max: usize,
        drawn: BTreeMap<At, Fault>,
    },
    /// Drawn at each site from a seeded generator, each fault with its own chance at a site of
    /// its kind ([`FaultRates`]).
    Rates {
        rng: Rng,
        rates: Arc<FaultRates>,
        drawn: BTreeMap<At, Fault>,
    },
}

/// What a site does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Made as it comes.
    Proceed,
    /// Made under this fault.
    Fault(Fault),
    /// The run is dead: nothing it sends arrives.
    Dead,
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq)]
pub enum RunEnd {
    /// An ingress answered Slack: the status, the outcome (`answered`, `duplicate`…, or the
    /// error's code), the body (an acknowledgement's JSON; `Null` when empty).
    Answered {
        /// The HTTP status. Over Socket Mode: 200 for an acknowledgement; without one, 409
        /// for an event found held elsewhere, 503 otherwise.
        status: u16,
        /// The outcome, or the error's code.
        outcome: String,
        /// The body: an acknowledgement's JSON; `Null` when empty.
        body: Value,
    },
    /// A worker handled its message: what it did with it, and the outcome.
    Handled {
        /// Whether it deleted the message (else left it to come back).
        deleted: bool,
        /// The outcome.
        outcome: String,
    },
    /// The process died (a fault), or was killed at its deadline.
    Died,
}

/// What a run is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunKind {
    /// A delivery of Slack's to an ingress: which chain (a copy of the request), and which
    /// try of it (0 the original, then Slack's retries, or a repeat).
    Delivery {
        /// Which copy of the request (from 0).
        chain: usize,
        /// Which try of it: 0 the original, then Slack's retries or a repeat.
        try_: u32,
    },
    /// A worker's receive of a queued message (its receive count, from 1).
    Receive {
        /// Which queued message (from 0).
        message: usize,
        /// Its receive count, from 1.
        count: u32,
    },
}

/// One run: one process's life.
pub struct Run {
    pub label: String,
    /// The request it is for (its place in the exploration, from 0).
    pub request: usize,
    pub kind: RunKind,
    pub started: Duration,
    pub ended_at: Option<Duration>,
    pub end: Option<RunEnd>,
    /// The metrics it counted.
    pub counts: BTreeMap<String, f64>,
    /// Its sites' kinds, in order.
    pub sites_seen: Vec<SiteKind>,
    /// When Lambda kills its process (epoch ms; the explorer's runs all have one).
    pub deadline_ms: Option<u64>,
    /// It has announced a step in the ledger or sent Slack a write.
    wrote: bool,
    sites: u32,
    dead: bool,
    abort: Option<AbortHandle>,
}

/// One line of the trace.
#[derive(Clone, Debug)]
pub struct Line {
    pub at: Duration,
    pub run: Option<u32>,
    pub site: Option<u32>,
    pub text: String,
}

pub(crate) struct State {
    plan: Plan,
    pub(crate) runs: Vec<Run>,
    pub(crate) trace: Vec<Line>,
    /// Broken as it happened (a remembered result computed again).
    pub(crate) violations: Vec<String>,
    /// Each call's bearer token, by run.
    pub(crate) tokens: Vec<(u32, Option<String>)>,
    /// The messages sent to the work queue, in order.
    pub(crate) queued: Vec<String>,
    /// Those dead-lettered (their index in `queued`), and not redriven.
    pub(crate) dead_letters: Vec<usize>,
    /// Those an operator redrove from the dead-letter queue.
    pub(crate) redriven: Vec<usize>,
    /// The acknowledgements the listener chose, in order (`None`: an empty one).
    pub(crate) acks: Vec<Option<String>>,
    /// Reads Slack refused for good: (method, conversation). Refused again, as Slack would
    /// (a scope the app lacks stays lacking).
    pub(crate) refused: std::collections::BTreeSet<(String, String)>,
    /// The faults that struck: the fault, its site's kind, the call, and whether its run had
    /// announced or made a write before (a write's fate then may be unknown).
    pub(crate) struck: Vec<(Fault, SiteKind, String, bool)>,
    /// When each conversation read was last let through (Slack's 2025 limit for distributed
    /// apps: one a minute per method).
    pub(crate) last_read: BTreeMap<String, Duration>,
    /// Conversations made busy already: (channel, thread).
    pub(crate) busy: std::collections::BTreeSet<(String, String)>,
    /// What is whose, of several requests.
    pub(crate) by_request: ByRequest,
    /// The ledger keys of the other tenants' state values, seeded beside this one's, and the
    /// value each was seeded with.
    pub(crate) other_tenants: Vec<(String, String)>,
    /// The ledger keys of every state value a run read or wrote.
    pub(crate) state_keys: std::collections::BTreeSet<String>,
}

/// What is whose, of an exploration's requests.
#[derive(Clone, Debug, Default)]
pub(crate) struct ByRequest {
    /// Which request made what Slack shows, and each write it made.
    pub origins: Origins,
    /// The request that first touched each ledger key.
    pub keys: BTreeMap<String, usize>,
    /// The request each queued message is for (by its index in `queued`).
    pub queued_by: Vec<usize>,
    /// The request each acknowledgement in `acks` is for.
    pub acked_by: Vec<usize>,
    /// The run each fault in `struck` struck.
    pub struck_runs: Vec<u32>,
    /// A person's message's `ts` and its phantom copy's, per request that is one.
    pub phantoms: Vec<(String, String)>,
    /// The requests that could not be sent, and why (a click on a message never posted).
    pub unsent: BTreeMap<usize, String>,
    /// Calls to Slack that reached it around the crate's client (the bot's own HTTP client):
    /// (request, method, arguments).
    pub around: Vec<(Option<usize>, String, Value)>,
    /// The step execution each request is in (a step's own, or an interaction in one).
    pub executions: BTreeMap<usize, String>,
    /// The run that last acquired each ledger key's claim (its owner now, while it is in
    /// progress).
    pub claimers: BTreeMap<String, u32>,
}

/// Which request made each thing Slack shows: its messages (by channel and `ts`), its
/// ephemeral messages and views (by their place in Slack's lists), and every write it made.
#[derive(Clone, Debug, Default)]
pub(crate) struct Origins {
    pub messages: BTreeMap<(String, String), usize>,
    pub ephemerals: Vec<usize>,
    pub views: Vec<usize>,
    /// Every write Slack applied: (request, method, arguments).
    pub writes: Vec<(usize, String, Value)>,
}

/// What Slack shows before a write, to tell what the write added.
pub(crate) struct Shown {
    messages: std::collections::BTreeSet<(String, String)>,
    ephemerals: usize,
    views: usize,
}

tokio::task_local! {
    /// The run a task is part of (a delivery's, a receive's): what the bot API reports to the
    /// explorer (an acknowledgement) is its run's.
    pub(crate) static RUN: u32;
}

/// The world of one schedule. Shared by every run of it.
pub struct World {
    pub(crate) state: Mutex<State>,
    pub(crate) ledger: Arc<dyn SimStore>,
    pub(crate) slack: FakeSlack,
    start: Instant,
    /// People's messages that follow the bot's first post in each conversation.
    pub(crate) busy: usize,
    pub(crate) history_per_minute: bool,
    /// Its path at the side door ([`super::door`]), once a bot asked for it.
    pub(crate) door_id: std::sync::OnceLock<u64>,
}

impl World {
    pub(crate) fn new(plan: Plan, slack: FakeSlack, ledger: Arc<dyn SimStore>) -> Self {
        Self {
            state: Mutex::new(State {
                plan,
                runs: Vec::new(),
                trace: Vec::new(),
                violations: Vec::new(),
                tokens: Vec::new(),
                queued: Vec::new(),
                dead_letters: Vec::new(),
                redriven: Vec::new(),
                acks: Vec::new(),
                refused: Default::default(),
                last_read: BTreeMap::new(),
                struck: Vec::new(),
                busy: Default::default(),
                by_request: ByRequest::default(),
                other_tenants: Vec::new(),
                state_keys: Default::default(),
            }),
            ledger,
            slack,
            start: Instant::now(),
            busy: 0,
            history_per_minute: false,
            door_id: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn spec_history_per_minute(&self) -> bool {
        self.history_per_minute
    }

    /// After the bot's first post in a conversation, `busy` people's messages follow it there
    /// (a busy channel: a look-up for the post then needs pages).
    pub(crate) fn make_busy(&self, method: &str, args: &Value, answer: &[u8]) {
        if self.busy == 0 || method != "chat.postMessage" {
            return;
        }
        let Ok(answer) = serde_json::from_slice::<Value>(answer) else {
            return;
        };
        let channel = answer["channel"].as_str().unwrap_or_default().to_string();
        let thread = args["thread_ts"].as_str().map(str::to_string);
        if answer["ok"] != true || channel.is_empty() {
            return;
        }
        let place = (channel.clone(), thread.clone().unwrap_or_default());
        if !self.lock().busy.insert(place) {
            return;
        }
        self.slack
            .with_workspace(|w| w.add_chatter(&channel, thread.as_deref(), self.busy));
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The virtual time since the schedule began.
    pub fn elapsed(&self) -> Duration {
        Instant::now().saturating_duration_since(self.start)
    }

    /// What Slack shows now (to tell, after a write, what it added).
    pub(crate) fn shown(&self) -> Shown {
        self.slack.with_workspace(|w| Shown {
            messages: w
                .ours()
                .iter()
                .map(|m| {
                    (
                        m["channel"].as_str().unwrap_or_default().to_string(),
                        m["ts"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect(),
            ephemerals: w.ephemerals().len(),
            views: w.views().len(),
        })
    }

    /// What Slack shows that it did not at `before` is `request`'s.
    pub(crate) fn made_by(&self, request: usize, before: &Shown) {
        let now = self.shown();
        let mut s = self.lock();
        let origins = &mut s.by_request.origins;
        for m in now.messages {
            if !before.messages.contains(&m) {
                origins.messages.entry(m).or_insert(request);
            }
        }
        while origins.ephemerals.len() < now.ephemerals {
            let i = origins.ephemerals.len();
            origins.ephemerals.push(if i >= before.ephemerals {
                request
            } else {
                usize::MAX
            });
        }
        while origins.views.len() < now.views {
            let i = origins.views.len();
            origins.views.push(if i >= before.views {
                request
            } else {
                usize::MAX
            });
        }
    }

    /// A write Slack applied for `run`.
    pub(crate) fn wrote(&self, run: u32, method: &str, args: &Value) {
        let mut s = self.lock();
        let request = s.runs[run as usize - 1].request;
        s.by_request
            .origins
            .writes
            .push((request, method.to_string(), args.clone()));
    }

    /// The request `run` is for.
    pub(crate) fn request_of(&self, run: u32) -> usize {
        self.lock().runs[run as usize - 1].request
    }

    /// `run` touched the ledger key `key`: the request it is for owns it, unless another
    /// touched it first.
    pub(crate) fn touch(&self, run: u32, key: &str) {
        let mut s = self.lock();
        let request = s.runs[run as usize - 1].request;
        s.by_request.keys.entry(key.to_string()).or_insert(request);
    }

    /// Whether the instance a delivery of `run` goes to is down (killed, and not started
    /// again yet): placed as `dies-before` at site 0 of the run, or drawn.
    pub(crate) fn down(&self, run: u32) -> bool {
        let at = At { run, site: 0 };
        let mut s = self.lock();
        match &mut s.plan {
            Plan::Fixed(faults) => faults.get(&at) == Some(&Fault::DiesBefore),
            Plan::Drawn { .. } => false,
            Plan::Rates { rng, rates, drawn } => {
                let down = rates.down() > 0 && (rng.below(1_000_000) as u32) < rates.down();
                if down {
                    drawn.insert(at, Fault::DiesBefore);
                }
                down
            }
        }
    }

    /// Lambda kills `run`'s process at `deadline_ms` (epoch ms).
    pub(crate) fn set_deadline(&self, run: u32, deadline_ms: u64) {
        self.lock().runs[run as usize - 1].deadline_ms = Some(deadline_ms);
    }

    /// A claim `run` makes on `key`, live until `lease_until_ms`: a lease that outlives the
    /// process that holds it keeps every other copy away from a request nobody is answering
    /// (Slack's retries meet a live claim until they run out), so it breaks an invariant.
    pub(crate) fn check_lease(&self, run: u32, key: &str, lease_until_ms: u64) {
        let deadline = self.lock().runs[run as usize - 1].deadline_ms;
        if let Some(deadline) = deadline.filter(|d| lease_until_ms > *d) {
            self.violate(format!(
                "processing never outlives its lease: run {run} claims {key} until {} s after \
                 the deadline its process is killed at",
                (lease_until_ms - deadline) as f64 / 1000.0
            ));
        }
    }

    /// A new run for `request`; returns its number (from 1).
    pub(crate) fn begin_run(&self, label: String, kind: RunKind, request: usize) -> u32 {
        let at = self.elapsed();
        let mut s = self.lock();
        s.runs.push(Run {
            request,
            label: label.clone(),
            kind,
            started: at,
            ended_at: None,
            end: None,
            counts: BTreeMap::new(),
            sites_seen: Vec::new(),
            deadline_ms: None,
            wrote: false,
            sites: 0,
            dead: false,
            abort: None,
        });
        let run = s.runs.len() as u32;
        s.trace.push(Line {
            at,
            run: Some(run),
            site: None,
            text: label,
        });
        run
    }

    pub(crate) fn set_abort(&self, run: u32, abort: AbortHandle) {
        let mut s = self.lock();
        let r = &mut s.runs[run as usize - 1];
        if r.dead {
            abort.abort();
        }
        r.abort = Some(abort);
    }

    /// A run's end, as it was seen (the first end recorded stands).
    pub(crate) fn end_run(&self, run: u32, end: RunEnd, counts: BTreeMap<String, f64>) {
        let at = self.elapsed();
        let mut s = self.lock();
        let r = &mut s.runs[run as usize - 1];
        if r.end.is_some() {
            return;
        }
        let text = match &end {
            RunEnd::Answered {
                status, outcome, ..
            } => format!("answers Slack {status} {outcome}"),
            RunEnd::Handled { deleted, outcome } => format!(
                "{outcome}: the message is {}",
                if *deleted {
                    "deleted"
                } else {
                    "left on the queue"
                }
            ),
            RunEnd::Died => "dead".into(),
        };
        r.end = Some(end);
        r.ended_at = Some(at);
        r.counts = counts;
        s.trace.push(Line {
            at,
            run: Some(run),
            site: None,
            text,
        });
    }

    /// The process of `run` dies now: nothing it sends from now on arrives, and its task is
    /// stopped.
    pub(crate) fn die(&self, run: u32, why: &str) {
        let at = self.elapsed();
        let mut s = self.lock();
        let r = &mut s.runs[run as usize - 1];
        if r.dead {
            return;
        }
        r.dead = true;
        if let Some(abort) = &r.abort {
            abort.abort();
        }
        s.trace.push(Line {
            at,
            run: Some(run),
            site: None,
            text: format!("the process dies ({why})"),
        });
        let r = &mut s.runs[run as usize - 1];
        if r.end.is_none() {
            r.end = Some(RunEnd::Died);
            r.ended_at = Some(at);
        }
    }

    /// The next site of `run`, described by `what`: what to do there. Returns the trace line's
    /// index, to add the call's result to.
    pub(crate) fn decide(&self, run: u32, kind: SiteKind, what: String) -> (Decision, usize) {
        let at_time = self.elapsed();
        let mut s = self.lock();
        let s = &mut *s;
        let r = &mut s.runs[run as usize - 1];
        if r.dead {
            return (Decision::Dead, usize::MAX);
        }
        r.sites += 1;
        r.sites_seen.push(kind);
        let at = At { run, site: r.sites };
        let possible = Fault::at(kind);
        let fault = match &mut s.plan {
            Plan::Fixed(faults) => faults.get(&at).copied().filter(|f| possible.contains(f)),
            Plan::Drawn {
                rng,
                rate,
                max,
                drawn,
            } => {
                if drawn.len() < *max && rng.chance(*rate) {
                    let fault = possible[rng.below(possible.len())];
                    drawn.insert(at, fault);
                    Some(fault)
                } else {
                    None
                }
            }
            Plan::Rates { rng, rates, drawn } => {
                let fault = rates.draw(kind, rng.below(1_000_000) as u32);
                let fault = fault.filter(|f| possible.contains(f));
                if let Some(f) = fault {
                    drawn.insert(at, f);
                }
                fault
            }
        };
        let wrote_before = r.wrote;
        r.wrote |= matches!(kind, SiteKind::SlackWrite | SiteKind::ResponseUrl)
            || (kind == SiteKind::Ledger && what.starts_with("ledger write"));
        if let Some(fault) = fault {
            s.struck.push((fault, kind, what.clone(), wrote_before));
            s.by_request.struck_runs.push(run);
        }
        let mut text = what;
        if let Some(fault) = fault {
            text.push_str(&format!("  ✗ {}: {}", fault.name(), fault.story()));
        }
        s.trace.push(Line {
            at: at_time,
            run: Some(run),
            site: Some(at.site),
            text,
        });
        let line = s.trace.len() - 1;
        (fault.map_or(Decision::Proceed, Decision::Fault), line)
    }

    /// Adds what a call came to, to its trace line.
    pub(crate) fn note(&self, line: usize, text: &str) {
        let mut s = self.lock();
        if let Some(l) = s.trace.get_mut(line) {
            l.text.push_str(" → ");
            l.text.push_str(text);
        }
    }

    /// A line of the story (no run).
    pub(crate) fn say(&self, run: Option<u32>, text: String) {
        let at = self.elapsed();
        self.lock().trace.push(Line {
            at,
            run,
            site: None,
            text,
        });
    }

    pub(crate) fn violate(&self, text: String) {
        self.lock().violations.push(text);
    }

    /// The faults this schedule met, placed or drawn.
    pub(crate) fn faults(&self) -> BTreeMap<At, Fault> {
        match &self.lock().plan {
            Plan::Fixed(faults) => faults.clone(),
            Plan::Drawn { drawn, .. } | Plan::Rates { drawn, .. } => drawn.clone(),
        }
    }
}

/// The world of the schedule running on this thread, for what the bot API reports to it (a
/// remembered result being computed).
pub(crate) mod current {
    use super::World;
    use std::cell::RefCell;
    use std::sync::Arc;

    thread_local! {
        static WORLD: RefCell<Option<Arc<World>>> = const { RefCell::new(None) };
    }

    pub(crate) fn set(world: Option<Arc<World>>) {
        WORLD.with(|w| *w.borrow_mut() = world);
    }

    pub(crate) fn get() -> Option<Arc<World>> {
        WORLD.with(|w| w.borrow().clone())
    }
}
