//! The invariants every schedule is checked against, per listener write, with the fault-free
//! run of the same request as the measure of what the listener writes. A write is compared as
//! [`Compare`] says: by default as the journal compares it, a message of slack-once's by its
//! identity (the request's key and the step that posted it), an ephemeral by whom it was for
//! and where, a view by what it shows; what a message shows only where the test asks for it:
//! - at most once: no write visible more often than the fault-free run makes it, and none
//!   another path made (a reply on an error path) more than once (no message, ephemeral or
//!   view twice; no slack-once step's message twice);
//! - complete when claimed: once any run says `answered` or `recovered`, Slack shows what the
//!   fault-free run leaves (every message with its final text and blocks, a stream stopped
//!   with the whole answer, each ephemeral, view and reaction);
//! - counted when lost: a request whose writes are not all visible never said `answered`,
//!   `recovered` or `no_reply`, and ended counted as failed (a `failed` outcome or ledger item,
//!   an error answered to Slack or left on the queue, the dead-letter queue), or with the
//!   process that held its last chance dead (over Socket Mode, an event delivered again after
//!   its holder died had a chance left: the dispatch keeps it in hand until the claim lapses);
//! - `failed` only for a reason: no run ends `failed` unless a fault that no retry fixes was
//!   placed (Slack refused for good), or a fault left unknown the fate of a write that can be
//!   neither looked for nor made again (`unconfirmed_write`), or faults delayed the request
//!   past one of Slack's limits (a `response_url`'s 30 minutes, a trigger's 3 s), or the
//!   fault-free run fails too;
//! - the fault-free run ends no run in an error (a deadline, a listener's failure);
//! - the acknowledgement: what Slack showed at once is what the listener chose, or the request
//!   says why not (no 2xx in time, a failure counted) or its message came through the
//!   `response_url`;
//! - a remembered result is computed again only where it was not yet recorded;
//! - tokens: every call carries this workspace's token, and no token, signing secret or
//!   `response_url` reaches the logs;
//! - the request's life ends (nothing runs past 6 hours of virtual time).

use std::collections::BTreeMap;

use std::sync::Arc;

use serde_json::Value;

use super::end::{End, RunView};
use super::schedule::{Fault, SiteKind};
use super::tenants::{BOT_TOKEN, CLIENT_SECRET, SIGNING_SECRET};
use super::world::{RunEnd, RunKind};

/// What the explorer compares of a write between the fault-free run and a schedule
/// ([`super::Explorer::compare_content_by`]).
#[derive(Clone, Default)]
pub enum Compare {
    /// What the journal compares: a message of slack-once's by its identity (the request's key
    /// and the step that posted it: its text may differ between runs, a time it shows, a
    /// count, and it is still the one message), an ephemeral by whom and where it was for, a
    /// view and a message slack-once did not name (a stream's) by what they show. The default.
    #[default]
    Identity,
    /// Every write by what it shows (its text, blocks and attachments), as normalized: for a
    /// bot whose messages must be the same in every run.
    Content(Arc<dyn Fn(&Value) -> Value + Send + Sync>),
}

impl std::fmt::Debug for Compare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Compare::Identity => f.write_str("Identity"),
            Compare::Content(_) => f.write_str("Content(…)"),
        }
    }
}

impl Compare {
    /// What `v` (a `kind` of write) is compared by.
    fn key(&self, kind: &str, v: &Value) -> String {
        match self {
            Compare::Content(normalize) => content(&normalize(v)),
            Compare::Identity => match (kind, names(v)) {
                ("message", Some((key, step))) => format!("step {step} of {key}"),
                ("ephemeral message", _) => format!(
                    "to {} in {}",
                    v["user"].as_str().unwrap_or("the person of the request"),
                    v["channel"].as_str().unwrap_or("?")
                ),
                _ => content(v),
            },
        }
    }
}

/// What a visible write shows. A message naming its own `ts` (a poll whose buttons name it)
/// shows it as `{own ts}`: the fault-free run's message has another `ts`, and the same content.
fn content(v: &Value) -> String {
    let mut shown = serde_json::Map::new();
    for key in ["text", "blocks", "attachments", "title", "callback_id"] {
        if !v[key].is_null() {
            shown.insert(key.into(), v[key].clone());
        }
    }
    if v["streaming"] == true {
        shown.insert("streaming".into(), true.into());
    }
    let shown = Value::Object(shown).to_string();
    match v["ts"].as_str().filter(|ts| !ts.is_empty()) {
        Some(ts) => shown.replace(ts, "{own ts}"),
        None => shown,
    }
}

fn multiset<'a>(
    compare: &Compare,
    kind: &str,
    items: impl Iterator<Item = &'a Value>,
) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for item in items {
        *counts.entry(compare.key(kind, item)).or_insert(0) += 1;
    }
    counts
}

/// The slack-once names (claim key, step) a message carries, if any.
fn names(m: &Value) -> Option<(String, u64)> {
    let names = &m["metadata"]["event_payload"]["slack_once"];
    Some((names["key"].as_str()?.to_string(), names["step"].as_u64()?))
}

/// A JSON value in a few words (a call's arguments in a report).
pub(crate) fn brief_value(v: &Value) -> String {
    brief(&v.to_string())
}

fn brief(text: &str) -> String {
    let cut: String = text.chars().take(120).collect();
    if cut.len() < text.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

/// The last status set per thread (the assistant's "is thinking…", cleared at the end).
fn statuses(end: &End) -> BTreeMap<(String, String), String> {
    end.assistant
        .iter()
        .filter(|(m, ..)| m == "assistant.threads.setStatus")
        .map(|(_, c, t, args)| {
            (
                (c.clone(), t.clone()),
                args["status"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

pub(crate) fn outcome(end: &RunEnd) -> &str {
    match end {
        RunEnd::Answered { outcome, .. } | RunEnd::Handled { outcome, .. } => outcome,
        RunEnd::Died => "died",
    }
}

/// The writes Slack shows, kind by kind: (what, the fault-free run's, `end`'s, how many copies
/// of a write the fault-free run does not leave one of them may show: a message or a view an
/// update did not reach, a write another path made, the reply on an error path).
fn visible(
    compare: &Compare,
    reference: &End,
    end: &End,
) -> [(&'static str, Counts, Counts, usize); 3] {
    let sets = |kind: &'static str, want: &[Value], have: &[Value]| {
        (
            kind,
            multiset(compare, kind, want.iter()),
            multiset(compare, kind, have.iter()),
            1,
        )
    };
    [
        sets("message", &reference.messages, &end.messages),
        sets("ephemeral message", &reference.ephemerals, &end.ephemerals),
        sets("view", &reference.views, &end.views),
    ]
}

type Counts = BTreeMap<String, usize>;

/// What is missing from `end` that the fault-free run leaves (empty: complete).
fn missing(compare: &Compare, reference: &End, end: &End) -> Vec<String> {
    let mut gaps = Vec::new();
    let sets = visible(compare, reference, end);
    for (what, want, have, _) in &sets {
        for (shown, n) in want {
            let got = have.get(shown).copied().unwrap_or(0);
            if got < *n {
                gaps.push(format!("the {what} {} is not in Slack", brief(shown)));
            }
        }
    }
    // A message compared by its identity alone still shows every update the fault-free run
    // made to it: each update is a step of the journal, made at least once (a takeover may
    // make one again).
    if matches!(compare, Compare::Identity) {
        let (want, have) = (updates(reference), updates(end));
        for (message, n) in &want {
            let got = have.get(message).copied().unwrap_or(0);
            if got < *n {
                gaps.push(format!(
                    "the message {message} was updated {got} times; the fault-free run updates \
                     it {n} times"
                ));
            }
        }
    }
    for r in &reference.reactions {
        if !end.reactions.contains(r) {
            gaps.push(format!("the reaction :{}: on {} is not in Slack", r.2, r.1));
        }
    }
    let (want, have) = (statuses(reference), statuses(end));
    for (thread, status) in &want {
        if have.get(thread) != Some(status) {
            gaps.push(format!(
                "the assistant's status in {}/{} is {:?}, not {:?}",
                thread.0,
                thread.1,
                have.get(thread).map(String::as_str).unwrap_or("unset"),
                status
            ));
        }
    }
    gaps
}

/// How many `chat.update` calls reached each of slack-once's messages (by its identity).
fn updates(end: &End) -> BTreeMap<String, usize> {
    let mut by_ts: BTreeMap<(String, String), String> = BTreeMap::new();
    for m in &end.messages {
        if let (Some((key, step)), Some(channel), Some(ts)) =
            (names(m), m["channel"].as_str(), m["ts"].as_str())
        {
            by_ts.insert(
                (channel.to_string(), ts.to_string()),
                format!("step {step} of {key}"),
            );
        }
    }
    let mut counts = BTreeMap::new();
    // A `chat.update`, or a `response_url` post replacing the message it came with (its
    // channel and `ts` are the URL's).
    let flag = |v: &Value| v.as_bool() == Some(true) || v == "true";
    for (_, method, args) in &end.by_request.origins.writes {
        let replaces = method == "response_url" && flag(&args["replace_original"]);
        if method != "chat.update" && !replaces {
            continue;
        }
        let target = (
            args["channel"].as_str().unwrap_or_default().to_string(),
            args["ts"].as_str().unwrap_or_default().to_string(),
        );
        if let Some(identity) = by_ts.get(&target) {
            *counts.entry(identity.clone()).or_insert(0) += 1;
        }
    }
    // An answer in parts is updated at a switch and at its end, as many times as its parts
    // were switched, which differs between runs: its first part once at least.
    for m in &end.messages {
        if m["metadata"]["event_payload"]["slack_once"]["stream"].is_u64()
            && let Some((key, step)) = names(m)
            && let Some(n) = counts.get_mut(&format!("step {step} of {key}"))
        {
            *n = (*n).min(1);
        }
    }
    counts
}

/// `end` as the requests see it: a phantom copy (another `ts`, the same `client_msg_id`) is
/// the same message, so an answer made for it (in its thread, a reaction on it) counts as the
/// message's.
fn as_one_message(end: &End) -> End {
    let mut end = end.clone();
    // With several requests, a person's message's `ts` is when it was sent, which faults
    // move: each is named by its request's place instead (`0000000000.00000N`), in both runs.
    let canonical: Vec<(String, String)> = match end.requests.len() {
        0 | 1 => Vec::new(),
        _ => end
            .by_request
            .phantoms
            .iter()
            .flat_map(|(phantom, message)| {
                let n = message.rsplit('.').next().unwrap_or_default().to_string();
                let named = format!("0000000000.{n}");
                [(phantom.clone(), named.clone()), (message.clone(), named)]
            })
            .collect(),
    };
    let pairs: Vec<(String, String)> = if canonical.is_empty() {
        end.by_request.phantoms.clone()
    } else {
        canonical
    };
    for (phantom, message) in pairs {
        let same = |ts: &str| {
            if ts == phantom {
                message.clone()
            } else {
                ts.to_string()
            }
        };
        // A message's key names its `ts` (`msg-T-C-1767225600_000100`): the phantom copy's
        // key is the message's.
        let key_ts = |ts: &str| ts.replace('.', "_");
        let (phantom_key, message_key) = (key_ts(&phantom), key_ts(&message));
        for m in &mut end.messages {
            if let Some(thread) = m["thread_ts"].as_str().map(same) {
                m["thread_ts"] = thread.into();
            }
            let names = &mut m["metadata"]["event_payload"]["slack_once"]["key"];
            if let Some(key) = names.as_str().filter(|k| k.contains(&phantom_key)) {
                *names = key.replace(&phantom_key, &message_key).into();
            }
        }
        for r in &mut end.reactions {
            r.1 = same(&r.1);
        }
        for a in &mut end.assistant {
            a.2 = same(&a.2);
        }
    }
    end
}

impl End {
    /// What of `self` is request `n`'s (its place in the exploration): its runs, what they
    /// made in Slack (a message it posted or changed, its ephemerals, views and reactions),
    /// its ledger items, its logs, the faults that struck its runs.
    pub(crate) fn for_request(&self, n: usize) -> End {
        use std::collections::BTreeSet;
        let mut e = self.clone();
        let runs: BTreeSet<u32> = self
            .runs
            .iter()
            .filter(|r| r.request == n)
            .map(|r| r.number)
            .collect();
        let writes: Vec<&(usize, String, Value)> = self
            .by_request
            .origins
            .writes
            .iter()
            .filter(|(r, ..)| *r == n)
            .collect();
        let place = |v: &Value, ts: &str| {
            (
                v["channel"].as_str().unwrap_or_default().to_string(),
                v[ts].as_str().unwrap_or_default().to_string(),
            )
        };
        // The messages it changed: updated, or replaced through its response_url.
        let flag = |v: &Value| v.as_bool() == Some(true) || v == "true";
        let touched: BTreeSet<(String, String)> = writes
            .iter()
            .filter(|(_, m, a)| {
                m == "chat.update" || (m == "response_url" && flag(&a["replace_original"]))
            })
            .map(|(_, _, args)| place(args, "ts"))
            .collect();
        e.messages.retain(|m| {
            let at = place(m, "ts");
            self.by_request.origins.messages.get(&at) == Some(&n) || touched.contains(&at)
        });
        let mine = |origins: &[usize], items: &[Value]| -> Vec<Value> {
            items
                .iter()
                .zip(origins.iter().chain(std::iter::repeat(&usize::MAX)))
                .filter(|(_, o)| **o == n)
                .map(|(v, _)| v.clone())
                .collect()
        };
        e.ephemerals = mine(&self.by_request.origins.ephemerals, &self.ephemerals);
        e.views = mine(&self.by_request.origins.views, &self.views);
        let reacted: BTreeSet<(String, String, String)> = writes
            .iter()
            .filter(|(_, m, _)| m == "reactions.add")
            .map(|(_, _, a)| {
                let (c, t) = place(a, "timestamp");
                (c, t, a["name"].as_str().unwrap_or_default().to_string())
            })
            .collect();
        e.reactions.retain(|r| reacted.contains(r));
        e.assistant.retain(|(method, channel, thread, _)| {
            writes.iter().any(|(_, m, a)| {
                m == method
                    && a["channel_id"].as_str() == Some(channel.as_str())
                    && a["thread_ts"].as_str() == Some(thread.as_str())
            })
        });
        e.calls = writes
            .iter()
            .map(|(_, m, a)| (m.clone(), a.clone()))
            .collect();
        e.by_request.origins.writes = writes.iter().map(|w| (*w).clone()).collect();
        e.ledger
            .retain(|(key, _)| self.by_request.keys.get(key).is_some_and(|r| *r == n));
        let ids: Vec<String> = runs
            .iter()
            .map(|r| format!("request_id=\"run-{r}\""))
            .collect();
        e.logs
            .retain(|l| ids.iter().any(|id| l.contains(id.as_str())));
        e.dead_lettered
            .retain(|i| self.by_request.queued_by.get(*i) == Some(&n));
        e.dead_letters = e.dead_lettered.len();
        e.redriven
            .retain(|i| self.by_request.queued_by.get(*i) == Some(&n));
        let acks: Vec<Option<String>> = self
            .acks
            .iter()
            .zip(&self.by_request.acked_by)
            .filter(|(_, r)| **r == n)
            .map(|(a, _)| a.clone())
            .collect();
        e.acks = acks;
        let struck: Vec<_> = self
            .struck
            .iter()
            .zip(&self.by_request.struck_runs)
            .filter(|(_, r)| runs.contains(r))
            .map(|(s, _)| s.clone())
            .collect();
        e.struck = struck;
        e.faults.retain(|at, _| runs.contains(&at.run));
        e.tokens.retain(|(r, _)| runs.contains(r));
        e.runs.retain(|r| r.request == n);
        // What the whole schedule broke is checked once, not per request.
        e.violations.clear();
        e.unfinished = false;
        e.installation = None;
        e
    }
}

/// The invariants `end` breaks, given the fault-free run `reference`, its writes compared as
/// `compare` says: each request's (of several, each against its own part of the fault-free
/// run), then the whole schedule's.
pub(crate) fn check(compare: &Compare, reference: &End, end: &End) -> Vec<String> {
    let end = &as_one_message(end);
    let mut broken = Vec::new();
    match end.requests.len() {
        0 | 1 => broken.extend(check_request(compare, reference, end, false, &held(end))),
        _ => {
            let reference = &named_by_request(&as_one_message(reference));
            let end = &named_by_request(end);
            // Once a request did not go as in the fault-free run (it failed, counted, or was
            // lost), the requests after it may take another path (a mention that finds no
            // handoff): they are held to at most once, not to the fault-free run's writes.
            let mut deviated = false;
            for group in &end.groups {
                let (found, group_deviated) = check_group(compare, reference, end, group, deviated);
                broken.extend(found);
                deviated |= group_deviated;
            }
        }
    }
    broken.extend(check_schedule(end));
    broken.extend(tenant_invariants(end));
    broken
}

/// The tenants' invariants: the schedule's requests come from one app in one workspace (a
/// simulation draws which of two of each), the other tenants' state values on the same
/// ledger. Every state value a run read or wrote is its app's, and in multi-workspace mode its
/// workspace's (`statew-APP-TEAM-…`) or its app's shared one (`state-APP-…`), never another
/// app's nor another workspace's; and each other tenant's value is at the end as it was
/// seeded (not written, not deleted). Its tokens are checked with every call's (the tenant's
/// own bot token, or one Slack issued to its installation).
fn tenant_invariants(end: &End) -> Vec<String> {
    let app = &end.tenant.app_id;
    let shared = format!("state-{app}-");
    let workspaces = format!("statew-{app}-{}-", end.tenant.team);
    let mut broken = Vec::new();
    for key in &end.state_keys {
        let ours = key.starts_with(&shared)
            || (end.state.tenant.is_some() && key.starts_with(&workspaces));
        if !ours {
            broken.push(format!(
                "tenants: a request of {app} in {} read or wrote the state value {key}, \
                 not its own{}",
                end.tenant.team,
                if end.other_tenants.iter().any(|(k, _)| k == key) {
                    " (another tenant's, on the same ledger)"
                } else {
                    ""
                }
            ));
        }
    }
    for (key, seeded) in &end.other_tenants {
        let Ok(id) = crate::slack::envelope::EventId::try_from(key.clone()) else {
            continue;
        };
        let item = end.state.ledger.state(&id, end.state.now_ms);
        match item {
            Ok(Some(item)) if item.value == *seeded && item.version == 1 => {}
            Ok(Some(item)) => broken.push(format!(
                "tenants: another tenant's state value {key} was written (v{}: {}) by a \
                 request of {app} in {}",
                item.version, item.value, end.tenant.team
            )),
            Ok(None) => broken.push(format!(
                "tenants: another tenant's state value {key} is gone after requests of {app} \
                 in {}",
                end.tenant.team
            )),
            Err(e) => broken.push(format!("tenants: {key} could not be read: {e}")),
        }
    }
    broken
}

/// The invariants a group of requests sent at once breaks, each request against its part of
/// the fault-free run, and whether one of them did not go as there (so the requests after the
/// group may take other paths). Requests sent at once race (two clicks on one button: either
/// may be first), so each may have taken another's path: the group holds if its requests hold
/// against the fault-free run's parts in some order, each part's names made the request's.
/// `relaxed`: a request before the group did not go as in the fault-free run.
fn check_group(
    compare: &Compare,
    reference: &End,
    end: &End,
    group: &[usize],
    relaxed: bool,
) -> (Vec<String>, bool) {
    let parts: Vec<(usize, End)> = group.iter().map(|i| (*i, end.for_request(*i))).collect();
    let measures: Vec<(usize, End)> = group
        .iter()
        .map(|i| (*i, reference.for_request(*i)))
        .collect();
    let judge = |order: &[usize]| -> (Vec<String>, bool) {
        let pairs: Vec<(usize, &End, End)> = parts
            .iter()
            .zip(order)
            .map(|((i, part), j)| {
                let measure = &measures.iter().find(|(k, _)| k == j).expect("a part").1;
                (*i, part, renamed(measure, *j, *i))
            })
            .collect();
        // A request whose write Slack refused for good went on another path (a step failed
        // for it, a reply saying why), and the requests after it may meet that path (a
        // click in a step that ended).
        let off: Vec<bool> = pairs
            .iter()
            .map(|(i, part, measure)| {
                end.by_request.unsent.contains_key(i)
                    || !missing(compare, measure, part).is_empty()
                    || counted_failed(part)
                    || refused_write(part)
            })
            .collect();
        let mut broken = Vec::new();
        for (k, (i, part, measure)) in pairs.iter().enumerate() {
            // A request not sent (a click on a message that never came): the request that
            // was to post it answers for it.
            if end.by_request.unsent.contains_key(i) {
                continue;
            }
            let others_off = off.iter().enumerate().any(|(m, o)| m != k && *o);
            broken.extend(
                check_request(compare, measure, part, relaxed || others_off, &held(end))
                    .into_iter()
                    .map(|b| format!("request {} ({}): {b}", i + 1, end.requests[*i])),
            );
        }
        (broken, off.iter().any(|o| *o))
    };
    let first = judge(group);
    if first.0.is_empty() || group.len() > 5 {
        return first;
    }
    let mut order = group.to_vec();
    while next_permutation(&mut order) {
        let other = judge(&order);
        if other.0.is_empty() {
            return other;
        }
    }
    first
}

/// The name a message of request `n` carries once its key is made its request's.
fn request_name(n: usize) -> String {
    format!("request#{}#", n + 1)
}

/// `end` with each message's slack-once key made its request's name: a request's keys (a
/// click's, a command's) are made of when it was sent, which faults move.
fn named_by_request(end: &End) -> End {
    let mut end = end.clone();
    for m in &mut end.messages {
        let names = &mut m["metadata"]["event_payload"]["slack_once"]["key"];
        if let Some(n) = names.as_str().and_then(|k| end.by_request.keys.get(k)) {
            *names = request_name(*n).into();
        }
    }
    end
}

/// `measure` (request `from`'s part of the fault-free run) as request `to`'s: its names made
/// `to`'s.
fn renamed(measure: &End, from: usize, to: usize) -> End {
    let mut measure = measure.clone();
    if from != to {
        let (old, new) = (request_name(from), request_name(to));
        for m in &mut measure.messages {
            let names = &mut m["metadata"]["event_payload"]["slack_once"]["key"];
            if names.as_str() == Some(old.as_str()) {
                *names = new.clone().into();
            }
        }
    }
    measure
}

/// The next order of `items` in lexicographic order; `false` after the last (they are then
/// left as they were).
fn next_permutation(items: &mut [usize]) -> bool {
    let Some(i) = (1..items.len()).rev().find(|&i| items[i - 1] < items[i]) else {
        return false;
    };
    let j = (i..items.len())
        .rev()
        .find(|&j| items[j] > items[i - 1])
        .expect("a larger item");
    items.swap(i - 1, j);
    items[i..].reverse();
    true
}

/// Whether Slack refused one of the writes of `end` for good: it certainly did not happen.
fn refused_write(end: &End) -> bool {
    end.struck.iter().any(|(fault, kind, ..)| {
        *fault == Fault::Refused && matches!(kind, SiteKind::SlackWrite | SiteKind::ResponseUrl)
    })
}

/// The invariants one request's part of a schedule breaks. `relaxed`: a request before it (or
/// beside it) did not go as in the fault-free run, so it may take another path: it is held to
/// at most once (no write twice, no step twice) and to failing only for a reason, not to the
/// fault-free run's writes.
/// The runs of the schedule (any request's) that a worker held to its deadline: killed (its
/// message waits out the visibility timeout) or stopped at its deadline. A request that waits
/// for another's run to complete a step (a double click) is delayed by it as much as that
/// run's own request.
fn held(end: &End) -> Vec<u32> {
    end.runs
        .iter()
        .filter(|d| {
            matches!(d.kind, RunKind::Receive { .. })
                && (matches!(d.end, Some(RunEnd::Died))
                    || d.counts.contains_key("DeadlineExceeded"))
        })
        .map(|d| d.number)
        .collect()
}

fn check_request(
    compare: &Compare,
    reference: &End,
    end: &End,
    relaxed: bool,
    held: &[u32],
) -> Vec<String> {
    let mut broken = Vec::new();
    // A write Slack refused for good certainly did not happen: a listener may go on without
    // it, on another path than the fault-free run's (a reply saying why).
    let refused_write = refused_write(end);

    // At most once: no more messages (or views) than the fault-free run leaves, none shown
    // twice, no ephemeral sent more often.
    let sets = visible(compare, reference, end);
    for (what, want, have, changed) in &sets {
        for (shown, n) in have {
            // A message (a view) may be seen with other content than the fault-free run
            // leaves (an update not made after a failure), but not twice.
            let allowed = want.get(shown).copied().unwrap_or(0).max(*changed);
            if *n > allowed {
                broken.push(format!(
                    "at most once: the {what} {} is in Slack {n} times; the fault-free run leaves it {} times",
                    brief(shown),
                    want.get(shown).copied().unwrap_or(0)
                ));
            }
        }
    }
    if end.views.len() > reference.views.len() && !relaxed {
        broken.push(format!(
            "at most once: {} views are open; the fault-free run opens {}",
            end.views.len(),
            reference.views.len()
        ));
    }
    let mut by_names: BTreeMap<(String, u64), Vec<String>> = BTreeMap::new();
    for m in &end.messages {
        if let Some(n) = names(m) {
            by_names
                .entry(n)
                .or_default()
                .push(m["ts"].as_str().unwrap_or("?").to_string());
        }
    }
    for ((key, step), ts) in &by_names {
        if ts.len() > 1 {
            broken.push(format!(
                "at most once: step {step} of {key} is visible {} times (ts {})",
                ts.len(),
                ts.join(", ")
            ));
        }
    }
    if end.messages.len() > reference.messages.len() && !refused_write && !relaxed {
        broken.push(format!(
            "at most once: {} messages of this app are in Slack; the fault-free run leaves {}",
            end.messages.len(),
            reference.messages.len()
        ));
    }

    // Complete when claimed; counted when lost.
    let gaps = missing(compare, reference, end);
    let wrote = !reference.messages.is_empty()
        || !reference.ephemerals.is_empty()
        || !reference.views.is_empty()
        || !reference.reactions.is_empty();
    let said = |outcomes: &[&str]| {
        end.runs
            .iter()
            .filter_map(|r| r.end.as_ref().map(|e| (r, e)))
            .filter(|(_, e)| outcomes.contains(&outcome(e)))
            .map(|(r, e)| format!("{} ({})", r.label, outcome(e)))
            .collect::<Vec<_>>()
    };
    if !gaps.is_empty() && wrote && !relaxed {
        let claimed = said(&["answered", "recovered", "no_reply"]);
        if !claimed.is_empty() && refused_write {
            // The listener chose to carry on past a refusal: what it claimed is what it did.
        } else if !claimed.is_empty() {
            broken.push(format!(
                "complete when claimed: {} said so, but {}",
                claimed.join(", "),
                gaps.join("; ")
            ));
        } else if !counted_failed(end) {
            broken.push(format!(
                "counted when lost: {}, and the request ended without a failure counted",
                gaps.join("; ")
            ));
        }
    }

    // `failed` only for a reason: a fault no retry fixes, or (for a write whose fate a fault
    // left unknown and that can be neither looked for nor made again) `unconfirmed_write`.
    let permanent = end.faults.values().any(|f| *f == Fault::Refused);
    // A write's fate is left unknown only by a fault at its own call, at the ledger write
    // that announces it, or after its run announced or made a write (its result perhaps never
    // recorded), or by a look-up refused: not by a crash before any write.
    let unknowable = end.struck.iter().any(|(fault, kind, what, wrote_before)| {
        let stops = !matches!(fault, Fault::RateLimited | Fault::Refused);
        match kind {
            SiteKind::SlackWrite | SiteKind::ResponseUrl => stops,
            SiteKind::SlackRead if *fault == Fault::Refused => true,
            SiteKind::Ledger if what.starts_with("ledger write") => stops,
            _ => stops && *wrote_before,
        }
    });
    let failed_before = reference
        .runs
        .iter()
        .any(|r| r.end.as_ref().is_some_and(|e| outcome(e) == "failed"));
    if !permanent && !failed_before {
        for r in &end.runs {
            if let Some(e) = &r.end
                && outcome(e) == "failed"
            {
                // The run that ended failed is judged by its own reason, not by the first
                // failure any run logged (an earlier run's transient one).
                let code = failure_code(&end.logs, r.number);
                if code == "unconfirmed_write" && unknowable {
                    continue;
                }
                // Slack's own limits (a response_url's 30 minutes and 5 posts, a trigger_id's
                // 3 s, a step token's 15 minutes) excuse no passing failure: its retry comes
                // within a minute. Only a worker that held the request (or the run it waited
                // for: another click completing the same step) to its deadline delays it past
                // them: killed, its message waits out the visibility timeout (6 x
                // WorkerTimeout); stopped at its deadline, it released the claim WorkerTimeout
                // after its receive. For the template's longer timeouts either outlasts them
                // (docs/cost-and-scale.md says which).
                let limit = [
                    "expired_url",
                    "used_url",
                    "expired_trigger_id",
                    "token_expired",
                ];
                let held_to_its_deadline = held.iter().any(|d| *d < r.number);
                if limit.contains(&code.as_str()) && held_to_its_deadline {
                    continue;
                }
                // A trigger_id works once, within 3 s and before the acknowledgement: a fault
                // at the call that uses it (views.open, views.push) leaves no time to retry it.
                let trigger_call_struck = end.struck.iter().any(|(_, kind, what, _)| {
                    matches!(kind, SiteKind::SlackWrite)
                        && (what.contains("views.open") || what.contains("views.push"))
                });
                if code == "expired_trigger_id" && trigger_call_struck {
                    continue;
                }
                broken.push(format!(
                    "failed only for a reason: {} ended failed ({code}) though no fault \
                         was one that no retry fixes",
                    r.label
                ));
            }
        }
    }

    // The acknowledgement the listener chose reaches Slack: in the first answer Slack took
    // (a 2xx within 3 s), or through the response_url, or the request says why not.
    if let Some(chosen) = reference.acks.first().filter(|_| !relaxed) {
        let want: Value = chosen
            .as_deref()
            .and_then(|b| serde_json::from_str(b).ok())
            .unwrap_or(Value::Null);
        // The request's first copy's first delivery.
        let first_chain = end
            .runs
            .iter()
            .filter_map(|r| match r.kind {
                RunKind::Delivery { chain, .. } => Some(chain),
                RunKind::Receive { .. } => None,
            })
            .min();
        let first = end.runs.iter().find(
            |r| matches!(r.kind, RunKind::Delivery { chain, .. } if Some(chain) == first_chain),
        );
        if let Some(RunView {
            end: Some(RunEnd::Answered { status, body, .. }),
            started,
            ended_at,
            ..
        }) = first
        {
            let in_time =
                ended_at.is_some_and(|at| at.saturating_sub(*started).as_millis() <= 3000);
            if (200..300).contains(status)
                && in_time
                && *body != want
                && !ack_followed_up(&want, end)
                && !counted_failed(end)
            {
                broken.push(format!(
                    "the acknowledgement: the listener chose {}, Slack was shown {}, and the \
                     request says nothing of it",
                    brief(&want.to_string()),
                    if body.is_null() {
                        "an empty one".to_string()
                    } else {
                        brief(&body.to_string())
                    }
                ));
            }
        }
    }

    broken
}

/// The invariants of the whole schedule: every call's token, the installation, secrets in the
/// logs, what broke as it happened, the schedule's end.
fn check_schedule(end: &End) -> Vec<String> {
    let mut broken = end.agents.clone();
    // Tokens.
    for (run, token) in &end.tokens {
        let request = end
            .runs
            .get(*run as usize - 1)
            .map(|r| r.request)
            .unwrap_or(usize::MAX);
        if let Some(execution) = end.by_request.executions.get(&request) {
            // A step's request: every call with a token of its own execution.
            let of = token.as_ref().and_then(|t| {
                end.execution_tokens
                    .iter()
                    .find(|(issued, _)| issued == t)
                    .map(|(_, e)| e)
            });
            if of != Some(execution) {
                broken.push(format!(
                    "tokens: run {run}, of the step execution {execution}, called Slack with {}",
                    match (token, of) {
                        (None, _) => "no token",
                        (Some(_), Some(_)) => "another execution's token",
                        (Some(_), None) =>
                            "a token that is not its execution's (the installation's?)",
                    }
                ));
            }
            continue;
        }
        let ours = match (&end.issued, token) {
            (Some(issued), Some(token)) => issued.contains(token),
            (None, Some(token)) => *token == end.tenant.token,
            (_, None) => false,
        };
        if !ours {
            broken.push(format!(
                "tokens: run {run} called Slack with {}",
                match token {
                    Some(_) => "another token than this workspace's",
                    None => "no token",
                }
            ));
        }
    }
    if let Some(Err(why)) = &end.installation {
        broken.push(format!("the installation: {why}"));
    }
    for line in &end.logs {
        for secret in end.issued.iter().flatten() {
            if line.contains(secret.as_str()) {
                broken.push(format!(
                    "tokens: a token Slack issued is in the logs: {}",
                    brief(line)
                ));
            }
        }
        for (secret, _) in &end.execution_tokens {
            if line.contains(secret.as_str()) {
                broken.push(format!(
                    "tokens: a step execution's token is in the logs: {}",
                    brief(line)
                ));
            }
        }
        if line.contains(CLIENT_SECRET) {
            broken.push(format!(
                "tokens: the client secret is in the logs: {}",
                brief(line)
            ));
        }
        let hooks = [
            format!("/commands/{}/", end.tenant.team),
            format!("/actions/{}/", end.tenant.team),
        ];
        for (secret, what) in [
            (end.tenant.token.as_str(), "the bot token"),
            (BOT_TOKEN, "the bot token"),
            (SIGNING_SECRET, "the signing secret"),
            (hooks[0].as_str(), "a response_url"),
            (hooks[1].as_str(), "a response_url"),
        ] {
            if line.contains(secret) {
                broken.push(format!("tokens: {what} is in the logs: {}", brief(line)));
            }
        }
    }

    broken.extend(check_steps(end));
    broken.extend(end.violations.iter().cloned());
    if end.unfinished {
        broken.push("the request's life did not end within 6 hours (virtual)".into());
    }
    broken
}

/// Workflow Builder steps: at most one completion per execution (a completion sent after
/// one was made is allowed only where a fault may have lost a completion's answer: the one
/// announced and sent again, which Slack answers `execution_not_in_running_state`), every
/// completion with the execution's own token, and a request reported answered only when its
/// completion is in Slack (the execution's record says completed only where Slack does).
fn check_steps(end: &End) -> Vec<String> {
    let mut broken = Vec::new();
    // The completions Slack was sent, in order: (run, what Slack answered).
    let sent: Vec<(u32, &str)> = end
        .trace
        .iter()
        .filter(|l| l.text.starts_with("slack functions.complete"))
        .filter_map(|l| Some((l.run?, l.text.as_str())))
        .collect();
    // A run whose completion may have gone out unconfirmed: it died, a fault struck it, or it
    // did not end with its request answered (released, the queue's message kept).
    let unconfirmed = |run: u32| {
        let struck = end.by_request.struck_runs.contains(&run);
        let ended_well = end
            .runs
            .get(run as usize - 1)
            .and_then(|r| r.end.as_ref())
            .is_some_and(|e| match e {
                RunEnd::Answered { status, .. } => (200..300).contains(status),
                RunEnd::Handled { deleted, .. } => *deleted,
                RunEnd::Died => false,
            });
        struck || !ended_well
    };
    let sent_again_unwarranted = sent.iter().enumerate().any(|(i, (run, text))| {
        text.contains("execution_not_in_running_state")
            && !sent[..i]
                .iter()
                .any(|(earlier, _)| earlier != run && unconfirmed(*earlier))
    });
    for e in &end.executions {
        let id = e["function_execution_id"].as_str().unwrap_or_default();
        let refusals: Vec<&str> = e["refusals"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let again = refusals
            .iter()
            .filter(|c| **c == "execution_not_in_running_state")
            .count();
        let state = e["state"].as_str().unwrap_or_default();
        if again > 0 && state != "ended" && sent_again_unwarranted {
            broken.push(format!(
                "steps: at most one completion per execution: {id} was sent {again} more after its completion, though no completion's answer was lost"
            ));
        }
        if refusals.contains(&"access_denied") {
            broken.push(format!(
                "steps: {id} was sent a completion with a token that is not the execution's"
            ));
        }
        #[derive(serde::Deserialize)]
        struct Record {
            #[serde(default)]
            closed: Option<String>,
            #[serde(default)]
            key: String,
        }
        let record: Option<Record> = end.state(&format!("slack-once/execution/{id}"));
        let decider = record
            .as_ref()
            .and_then(|r| end.by_request.keys.get(&r.key).copied());
        let closed = record.and_then(|r| r.closed);
        let answered = |n: usize| {
            end.runs
                .iter()
                .rev()
                .find(|r| r.request == n && r.end.is_some())
                .and_then(|r| r.end.as_ref())
                .is_some_and(|e| matches!(outcome(e), "answered" | "no_reply"))
        };
        if let Some(n) = decider
            && closed.is_none()
            && state == "running"
            && answered(n)
        {
            broken.push(format!(
                "steps: request {} decided {id} and was reported answered, and never completed it \
                 (the execution is still running)",
                n + 1
            ));
        }
        if closed.as_deref() == Some("completed") && !matches!(state, "completed" | "failed") {
            broken.push(format!(
                "steps: the ledger says {id} was completed, and Slack shows it {state}"
            ));
        }
        // The requests of the execution that sent a completion, and ended answered.
        for (n, of) in &end.by_request.executions {
            if of != id {
                continue;
            }
            let completed_by_n = end.by_request.origins.writes.iter().any(|(r, m, a)| {
                r == n
                    && m.starts_with("functions.complete")
                    && a["function_execution_id"].as_str() == Some(id)
            });
            let answered = end
                .runs
                .iter()
                .rev()
                .find(|r| r.request == *n && r.end.is_some())
                .and_then(|r| r.end.as_ref())
                .is_some_and(|e| outcome(e) == "answered");
            if completed_by_n
                && answered
                && state == "running"
                && closed.as_deref() != Some("ended")
            {
                broken.push(format!(
                    "steps: request {} was reported answered, and its completion of {id} is not in Slack (the execution is still running)",
                    n + 1
                ));
            }
        }
    }
    broken
}

/// What the fault-free run must not do: end a run in an error (a deadline, a listener's
/// failure, a refusal of Slack's), which no fault explains. A `failed` outcome the listener
/// chose (a permanent error it met, an acknowledgement too late) is an answer, not an error.
pub(crate) fn clean(reference: &End) -> Vec<String> {
    reference
        .runs
        .iter()
        .filter_map(|r| {
            let e = r.end.as_ref()?;
            let bad = match e {
                RunEnd::Answered { status, .. } => !(200..300).contains(status) && *status != 409,
                RunEnd::Handled { deleted, outcome } => !deleted && outcome != "in_progress",
                RunEnd::Died => true,
            };
            bad.then(|| format!("the fault-free run fails: {} ended {}", r.label, outcome(e)))
        })
        .collect()
}

/// The code of the first `failed` the run numbered `run` logged (its lines carry its request
/// id, `run-N`); of any run's where it logged none.
pub(crate) fn failure_code(logs: &[String], run: u32) -> String {
    let id = format!("request_id=\"run-{run}\"");
    let own: Vec<String> = logs.iter().filter(|l| l.contains(&id)).cloned().collect();
    match failure_code_in(&own) {
        Some(code) => code,
        None => failure_code_in(logs).unwrap_or_else(|| "see the log".into()),
    }
}

/// The code of the first `failed` in `logs`.
fn failure_code_in(logs: &[String]) -> Option<String> {
    logs.iter()
        .find_map(|l| {
            let i = l.find("failure=")?;
            Some(
                l[i + 8..]
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .trim_matches('"')
                    .to_string(),
            )
        })
        .or_else(|| {
            logs.iter().find_map(|l| {
                let i = l.find("slack_error=")?;
                Some(
                    l[i + 12..]
                        .split_whitespace()
                        .next()?
                        .trim_matches('"')
                        .to_string(),
                )
            })
        })
}

/// Whether the request ended counted as failed: a `failed` outcome or ledger item, the
/// dead-letter queue, the last run of a copy answering Slack with an error or leaving its
/// message, or dying (the process that held the last chance is gone: nothing could count it).
/// Over Socket Mode, an event delivered again after its holder died is not lost with it (the
/// dispatch keeps the later delivery in hand until the dead holder's claim lapses).
pub(crate) fn counted_failed(end: &End) -> bool {
    if end.dead_letters > 0
        || end
            .ledger
            .iter()
            .any(|(_, s)| *s == crate::ledger::Status::Failed)
    {
        return true;
    }
    // Each copy's (and queued message's) last run that held the request: one that found it
    // in progress or answered elsewhere decided nothing.
    let chain_of = |r: &RunView| match r.kind {
        RunKind::Delivery { chain, .. } => (0, chain),
        RunKind::Receive { message, .. } => (1, message),
    };
    let mut last: BTreeMap<(u8, usize), (&RunEnd, &RunView)> = BTreeMap::new();
    for r in &end.runs {
        let Some(e) = &r.end else { continue };
        if matches!(outcome(e), "in_progress" | "duplicate") {
            continue;
        }
        last.insert(chain_of(r), (e, r));
    }
    // Over Socket Mode, an event delivered again after its holder died was kept in hand
    // until the dead holder's claim lapsed: that holder did not hold its last chance.
    let delivered_after = |died: &RunView| {
        end.kept_in_hand.get(died.request) == Some(&true)
            && end
                .runs
                .iter()
                .any(|r| r.number > died.number && chain_of(r) == chain_of(died))
    };
    last.values().any(|(e, r)| match e {
        RunEnd::Died => !delivered_after(r),
        RunEnd::Answered {
            status, outcome, ..
        } => !(200..300).contains(status) || outcome == "failed" || outcome == "already_failed",
        RunEnd::Handled { deleted, outcome } => {
            !deleted || outcome == "failed" || outcome == "already_failed"
        }
    })
}

/// Whether an acknowledgement's message reached the person another way: through the
/// `response_url` (as an ephemeral message, or in the channel).
fn ack_followed_up(ack: &Value, end: &End) -> bool {
    let text = &ack["text"];
    !text.is_null()
        && end
            .calls
            .iter()
            .any(|(m, args)| m == "response_url" && args["text"] == *text)
}

/// An answer in parts ([`crate::app::Stream`]) as one message: the parts of one answer (their
/// metadata names the answer's first step, `stream`) folded into the first, its text theirs in
/// order, its `markdown` blocks one with their texts, its other blocks theirs; streaming if
/// any part is. So an answer is compared whole, however a run split it.
pub(crate) fn merge_parts(messages: Vec<Value>) -> Vec<Value> {
    let answer_of = |m: &Value| {
        let names = &m["metadata"]["event_payload"]["slack_once"];
        Some((
            m["channel"].as_str()?.to_string(),
            m["thread_ts"].as_str()?.to_string(),
            names["key"].as_str()?.to_string(),
            names["stream"].as_u64()?,
            names["part"].as_u64()?,
        ))
    };
    let mut out: Vec<Value> = Vec::new();
    let mut firsts: BTreeMap<(String, String, String, u64), usize> = BTreeMap::new();
    let mut parts: BTreeMap<usize, Vec<(u64, Value)>> = BTreeMap::new();
    for m in messages {
        match answer_of(&m) {
            Some((c, t, k, stream, part)) => {
                let at = *firsts.entry((c, t, k, stream)).or_insert_with(|| {
                    out.push(Value::Null);
                    out.len() - 1
                });
                parts.entry(at).or_default().push((part, m));
            }
            None => out.push(m),
        }
    }
    for (at, mut list) in parts {
        list.sort_by_key(|(part, _)| *part);
        let mut merged = list[0].1.clone();
        let mut text = String::new();
        let mut markdown = String::new();
        let mut blocks: Vec<Value> = Vec::new();
        let mut streaming = false;
        for (_, m) in &list {
            text.push_str(m["text"].as_str().unwrap_or_default());
            streaming |= m["streaming"] == true;
            for b in m["blocks"].as_array().into_iter().flatten() {
                if b["type"] == "markdown" {
                    markdown.push_str(b["text"].as_str().unwrap_or_default());
                } else {
                    blocks.push(b.clone());
                }
            }
        }
        if !markdown.is_empty() {
            blocks.push(serde_json::json!({"type": "markdown", "text": markdown}));
        }
        merged["text"] = text.into();
        if !blocks.is_empty() {
            merged["blocks"] = blocks.into();
        }
        merged["streaming"] = streaming.into();
        merged["parts"] = list.len().into();
        out[at] = merged;
    }
    out
}

/// What Slack shows of an agent's answers that no run may break, whatever struck it: a
/// person's stop ends the answer (a stopped message shows what it showed at the stop, and no
/// message of the app appears in its thread after it; its session is never made processing
/// again); a task's updates in a stream go forward only.
pub(crate) fn agent_invariants(w: &crate::testing::Workspace) -> Vec<String> {
    let mut broken = Vec::new();
    let ours = w.ours();
    for m in ours.iter().filter(|m| !m["stopped_at"].is_null()) {
        let (channel, thread) = (
            m["channel"].as_str().unwrap_or_default(),
            m["thread_ts"].as_str().unwrap_or_default(),
        );
        let at = m["stopped_at"].as_str().unwrap_or_default();
        if m["text"] != m["stopped_text"] || m["blocks"] != m["stopped_blocks"] {
            broken.push(format!(
                "a person's stop: the stopped answer {channel}/{} changed after the stop",
                m["ts"].as_str().unwrap_or_default()
            ));
        }
        let later = ours.iter().any(|o| {
            o["channel"] == channel
                && o["thread_ts"] == thread
                && crate::testing::micros(o["ts"].as_str().unwrap_or_default())
                    > crate::testing::micros(at)
        });
        if later {
            broken.push(format!(
                "a person's stop: a message of the app appeared in {channel}/{thread} after it"
            ));
        }
    }
    for ((channel, thread), session) in w.sessions() {
        let Some(after) = session["stopped_after"].as_u64() else {
            continue;
        };
        let statuses = session["statuses"].as_array().cloned().unwrap_or_default();
        if statuses
            .iter()
            .skip(after as usize)
            .any(|s| s == "processing")
        {
            broken.push(format!(
                "a person's stop: the session {channel}/{thread} was made processing again after it"
            ));
        }
    }
    let order = ["pending", "in_progress", "complete", "error"];
    let mut updates: Vec<_> = w.task_updates().iter().collect();
    updates.sort();
    for ((_, ts, id), statuses) in updates {
        let ranks: Vec<usize> = statuses
            .iter()
            .map(|s| order.iter().position(|o| o == s).unwrap_or(0))
            .collect();
        // The same update again (its fate left unknown by a crash: made again, shown in
        // place by its id) is not a move.
        if !ranks.windows(2).all(|p| p[0] <= p[1]) {
            broken.push(format!(
                "tasks: the task {id} in the stream {ts} went {statuses:?} (forward only)"
            ));
        }
    }
    broken
}
