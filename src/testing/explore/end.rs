//! What one schedule came to, as the invariants read it: [`End`] (Slack, the ledger, the
//! queue and every run at the end) and [`RunView`] (one run as it ended).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::tenants::Tenant;
use super::world::{Line, RunEnd, RunKind};

/// What one schedule came to.
#[derive(Clone)]
pub struct End {
    /// The requests of the exploration, as a person reads them, in order.
    pub requests: Vec<String>,
    /// Every run, in the order they started.
    pub runs: Vec<RunView>,
    /// This app's messages in Slack at the end (updates applied, deletions removed).
    pub messages: Vec<Value>,
    /// The ephemeral messages (`chat.postEphemeral`, ephemeral `response_url` posts).
    pub ephemerals: Vec<Value>,
    /// The views opened (updates applied).
    pub views: Vec<Value>,
    /// The reactions in place: (channel, ts, name).
    pub reactions: Vec<(String, String, String)>,
    /// The assistant calls: (method, channel, thread, arguments).
    pub assistant: Vec<(String, String, String, Value)>,
    /// Every write Slack received, in order: (method, arguments).
    pub calls: Vec<(String, Value)>,
    /// Every ledger key and its status.
    pub ledger: Vec<(String, crate::ledger::Status)>,
    /// The log lines of every run.
    pub logs: Vec<String>,
    /// Messages the queue dead-lettered.
    pub dead_letters: usize,
    /// The bodies of the messages the ingress put on the queue, in order.
    pub queued: Vec<String>,
    pub(crate) trace: Vec<Line>,
    pub(crate) violations: Vec<String>,
    pub(crate) tokens: Vec<(u32, Option<String>)>,
    /// Multi-workspace mode: every token Slack issued to the workspace (access and refresh).
    pub(crate) issued: Option<Vec<String>>,
    /// Multi-workspace mode: what the installation came to (`Err`: why it no longer works).
    pub(crate) installation: Option<Result<(), String>>,
    pub(crate) faults: BTreeMap<super::schedule::At, super::schedule::Fault>,
    pub(crate) unfinished: bool,
    /// The acknowledgements the listener chose (`None`: empty), in order.
    pub acks: Vec<Option<String>>,
    /// The faults that struck: the fault, its site's kind, the call, and whether its run had
    /// announced or made a write before.
    pub struck: Vec<(
        super::schedule::Fault,
        super::schedule::SiteKind,
        String,
        bool,
    )>,
    pub(crate) by_request: super::world::ByRequest,
    pub(crate) state: StateView,
    /// The queued messages dead-lettered (their index in `queued`), and not redriven.
    pub(crate) dead_lettered: Vec<usize>,
    /// The queued messages an operator redrove from the dead-letter queue.
    pub(crate) redriven: Vec<usize>,
    /// The requests, in groups sent at once (a sequence: one each).
    pub(crate) groups: Vec<Vec<usize>>,
    /// The step executions Slack ran, as [`crate::testing::FakeSlack::executions`] shows
    /// them (`state`, `completions`, `refusals`…).
    pub executions: Vec<Value>,
    /// Every token of a step execution Slack issued, with its execution.
    pub(crate) execution_tokens: Vec<(String, String)>,
    /// What agents' answers broke, as Slack shows them (a stop, tasks).
    pub(crate) agents: Vec<String>,
    /// Whose requests they were.
    pub(crate) tenant: Tenant,
    /// The ledger keys of the other tenants' state values, seeded beside this one's, and the
    /// value each was seeded with.
    pub(crate) other_tenants: Vec<(String, String)>,
    /// The ledger keys of every state value a run read or wrote.
    pub(crate) state_keys: std::collections::BTreeSet<String>,
    /// Per request: whether a delivery that finds it held elsewhere is kept in hand until
    /// the claim ends or lapses (an event over Socket Mode).
    pub(crate) kept_in_hand: Vec<bool>,
}

/// The app's state at the end of a schedule, for invariants to read ([`End::state`]).
#[derive(Clone)]
pub(crate) struct StateView {
    pub ledger: Arc<dyn super::store::AtEnd>,
    /// The app the requests were for (`api_app_id`).
    pub app: String,
    /// The tenant [`crate::app::Ctx::state`] is for (multi-workspace mode: the workspace).
    pub tenant: Option<String>,
    pub now_ms: u64,
}

impl End {
    /// The value the app's state holds under `name` at the end ([`crate::app::Ctx::state`]'s,
    /// the workspace's), if any (and if it is a `T`).
    pub fn state<T: serde::de::DeserializeOwned>(&self, name: &str) -> Option<T> {
        self.state_value(self.state.tenant.as_deref(), name)
    }

    /// The value the app's state shared by every workspace holds under `name` at the end
    /// ([`crate::app::Ctx::shared_state`]'s), if any.
    pub fn shared_state<T: serde::de::DeserializeOwned>(&self, name: &str) -> Option<T> {
        self.state_value(None, name)
    }

    fn state_value<T: serde::de::DeserializeOwned>(
        &self,
        tenant: Option<&str>,
        name: &str,
    ) -> Option<T> {
        let key = crate::app::state_key(Some(&self.state.app), tenant, name).ok()?;
        let item = self.state.ledger.state(&key, self.state.now_ms).ok()??;
        serde_json::from_str(&item.value).ok()
    }

    /// Whether request `n` (from 0) was sent; `Err` says why not (a click on a message no
    /// earlier request posted).
    pub fn was_sent(&self, n: usize) -> Result<(), String> {
        match self.by_request.unsent.get(&n) {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    /// The calls to Slack that went around slack-once's client (a bot's own HTTP client):
    /// (method, arguments).
    pub fn calls_around_the_crate(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.by_request
            .around
            .iter()
            .map(|(_, m, a)| (m.as_str(), a))
    }
}

/// The output of a future that needs no waiting (the in-memory ledger's calls).
pub(crate) fn at_once<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => panic!("an in-memory ledger call waited"),
    }
}

/// One run, as it ended.
#[derive(Clone, Debug)]
pub struct RunView {
    /// Its number in the schedule (from 1), as the trace and a schedule name it.
    pub number: u32,
    /// The request it is for (its place in the exploration, from 0).
    pub request: usize,
    /// What the run is, as the trace names it (`run 2`, `Slack retries …`).
    pub label: String,
    /// A delivery to an ingress, or a worker's receive.
    pub kind: RunKind,
    /// When it started (virtual time since the request).
    pub started: Duration,
    /// When it ended, if it did.
    pub ended_at: Option<Duration>,
    /// How it ended, if it did.
    pub end: Option<RunEnd>,
    /// Its metrics line's counts, by name.
    pub counts: BTreeMap<String, f64>,
    /// The kinds of its sites, in order (site 1 first).
    pub sites: Vec<super::schedule::SiteKind>,
}
