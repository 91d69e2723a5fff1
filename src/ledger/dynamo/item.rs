//! The ledger item's schema and codec: its attribute names, its formats, and the journal,
//! began windows and look-ups as they are stored and read back.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::ledger::ClaimRequest;

use crate::journal::record::{BeganWindow, Journal, StepRecord};

/// Attribute names of the ledger item (docs/ledger.md's item schema).
pub mod attr {
    /// The partition key (a string): Slack's `event_id`, or a message's identity (`msg-…`),
    /// an alias's (`cmid-…`), a note's (`actx-…`) or a state value's (`state-…`).
    pub const PK: &str = "pk";
    /// The claim's status, as [`crate::ledger::Status::as_str`] writes it.
    pub const STATUS: &str = "status";
    /// The item's format ([`super::ITEM_FORMAT`] as this release writes it; absent: format 1,
    /// as every release before the attribute wrote it).
    pub const FORMAT: &str = "fmt";
    /// The owner token of the latest claim: only it journals a step or finishes the claim.
    pub const OWNER: &str = "owner";
    /// The claim is live until then (epoch milliseconds).
    pub const LEASE_UNTIL: &str = "lease_until";
    /// The table's TTL attribute (epoch seconds): past it the item counts as absent.
    pub const EXPIRES_AT: &str = "expires_at";
    /// The claims of the event so far: above 1, a takeover or a claim after a release.
    pub const ATTEMPTS: &str = "attempts";
    /// The workspace of the request that claimed it.
    pub const TEAM_ID: &str = "team_id";
    /// `X-Slack-Retry-Num` of the delivery that claimed it (absent for an original).
    pub const RETRY_NUM: &str = "retry_num";
    /// `X-Slack-Retry-Reason` of the delivery that claimed it (absent for an original).
    pub const RETRY_REASON: &str = "retry_reason";
    /// `true` where the claim came from the work queue with receives left: should it end
    /// with its process, the queue hands the request out again (or dead-letters it), so
    /// `sweep` leaves it ([`crate::ledger::ClaimRequest::redelivery_due`]).
    pub const REDELIVERY: &str = "redelivery";
    /// When the event was first claimed (epoch ms).
    pub const CREATED_AT: &str = "created_at";
    /// When the latest claim was made (epoch ms).
    pub const CLAIMED_AT: &str = "claimed_at";
    /// When the claim was completed (epoch ms).
    pub const COMPLETED_AT: &str = "completed_at";
    /// When the claim was released (epoch ms).
    pub const RELEASED_AT: &str = "released_at";
    /// When the event ended `failed` (epoch ms).
    pub const FAILED_AT: &str = "failed_at";
    /// Slack's error code of a `failed` event.
    pub const ERROR: &str = "error";
    /// A `failed` event whose failure was not final (the work queue's receives ran out): a copy
    /// redriven from the dead-letter queue may claim it again.
    pub const RETRYABLE: &str = "retryable";
    /// The step journal: a map from step number ("1", "2", …) to the step's record, one
    /// string ([`crate::journal::record::StepRecord::encode`]). Versions before it wrote a map
    /// of the fields below, still read.
    pub const JOURNAL: &str = "journal";
    /// An older journal record's state: `done` for a done step; anything else (`intent`) is
    /// read as an intent.
    pub const STEP_STATE: &str = "state";
    /// An older journal record's attempt: the number of the claim whose intent it is.
    pub const STEP_ATTEMPT: &str = "attempt";
    /// An older journal record's result: what a replay of a done step returns (JSON text).
    pub const STEP_RESULT: &str = "result";
    /// The Web API method of the step.
    pub const STEP_OP: &str = "op";
    /// An alias item (`cmid-…`): the key of the message it is an identity of.
    pub const ALIAS_OF: &str = "alias_of";
    /// The began windows (`"AT_MS LEASE_UNTIL_MS"`, a list) of claims that have written
    /// nothing since: each may have made the lowest step absent from the journal. Appended by
    /// every claim, removed by the claimant's next write.
    pub const BEGAN: &str = "began";
    /// Those of the began windows whose claims announce every step a look-up might not settle
    /// ([`crate::journal::record::BeganWindow::announces`]): beside `began`, which versions before it
    /// read as they always have.
    pub const BEGAN_BY: &str = "began_by";
    /// A message's completion: the ids of the listeners that ran (space-separated).
    pub const RAN: &str = "ran";
    /// A note's value (`actx-…`: an assistant thread's context, as JSON).
    pub const NOTE: &str = "note";
    /// An app's state value (`state-APP-…` items, [`crate::app::State`]): its JSON, its version
    /// (a number, one more each write) and its latest writers (a list of strings).
    pub const APP_STATE: &str = "app_state";
    /// A state value's version (see [`APP_STATE`]).
    pub const APP_STATE_VERSION: &str = "app_state_version";
    /// A state value's latest writers (see [`APP_STATE`]).
    pub const APP_STATE_WRITERS: &str = "app_state_writers";
    /// When the note was written (epoch ms): an older write never replaces a newer one.
    pub const NOTE_AT: &str = "note_at";
    /// A claim's state changes made ([`crate::ledger::RequestChange`]): a map from the change's
    /// id to the version it wrote, set in the same transaction as the value. Made (empty) by
    /// every claim of this release; kept across takeovers, as the journal is.
    pub const STATE_CHANGES: &str = "state_changes";
    /// The Slack app (`api_app_id`) whose claim or alias the item is: another app's is never
    /// taken (two apps whose deployments share the table).
    pub const APP: &str = "app";
}

pub(super) const STEP_DONE: &str = "done";

/// The format of the claim items this release writes (the `fmt` attribute). A takeover keeps
/// the format an item has (it never lowers it) and gives one to an item of a release before the
/// attribute. A new format takes two releases, as the queue's do: one that reads it
/// ([`ITEM_FORMAT_READ`]), then one that writes it.
pub const ITEM_FORMAT: u64 = 1;

/// The highest item format this release takes over. An item of a later format inside its TTL
/// is its writer's: this release reads its `done` and `failed` as every format means them
/// (answered; failed), but never takes it over (released, retryable, its lease ended): it is
/// left for a delivery to a release that reads it.
pub const ITEM_FORMAT_READ: u64 = 1;

/// The look-ups' progress of a stored item, by step (journal keys `lN`).
pub(super) fn looked_of(
    item: Option<&HashMap<String, AttributeValue>>,
) -> std::collections::BTreeMap<u32, crate::journal::record::Looked> {
    let Some(AttributeValue::M(entries)) = item.and_then(|i| i.get(attr::JOURNAL)) else {
        return Default::default();
    };
    entries
        .iter()
        .filter_map(|(key, value)| {
            let step: u32 = key.strip_prefix('l')?.parse().ok()?;
            let looked = crate::journal::record::Looked::decode(value.as_s().ok()?)?;
            Some((step, looked))
        })
        .collect()
}

/// The journal of a stored item; records that do not parse are read as intents of an unknown
/// attempt (the safe reading: someone looks before writing again).
pub(super) fn journal_of(item: Option<&HashMap<String, AttributeValue>>) -> Journal {
    let Some(AttributeValue::M(entries)) = item.and_then(|i| i.get(attr::JOURNAL)) else {
        return Journal::new();
    };
    entries
        .iter()
        .filter_map(|(step, record)| {
            let step: u32 = step.parse().ok()?;
            if let AttributeValue::S(text) = record {
                let unknown = StepRecord::Intent {
                    attempt: 0,
                    op: None,
                    at_ms: None,
                    lease_until_ms: None,
                    looked: None,
                };
                return Some((step, StepRecord::decode(text).unwrap_or(unknown)));
            }
            // A record of a version before the one-string form.
            let fields = record.as_m().ok();
            let field = |k: &str| fields.and_then(|f| f.get(k));
            let state = field(attr::STEP_STATE).and_then(|v| v.as_s().ok());
            let op = field(attr::STEP_OP).and_then(|v| v.as_s().ok()).cloned();
            let record = match (state.map(String::as_str), field(attr::STEP_RESULT)) {
                (Some(STEP_DONE), Some(AttributeValue::S(result))) => StepRecord::Done {
                    result: result.clone(),
                    op,
                },
                _ => StepRecord::Intent {
                    attempt: field(attr::STEP_ATTEMPT)
                        .and_then(number)
                        .unwrap_or(0)
                        .try_into()
                        .unwrap_or(u32::MAX),
                    op,
                    at_ms: None,
                    lease_until_ms: None,
                    looked: None,
                },
            };
            Some((step, record))
        })
        .collect()
}

/// The began windows of a stored item, without its last `skip` (a claim's own).
pub(super) fn began_of(
    item: Option<&HashMap<String, AttributeValue>>,
    skip: usize,
) -> Vec<BeganWindow> {
    let Some(AttributeValue::L(windows)) = item.and_then(|i| i.get(attr::BEGAN)) else {
        return Vec::new();
    };
    // The windows of claims that announce their own steps, listed again beside.
    let announcing: Vec<&str> = match item.and_then(|i| i.get(attr::BEGAN_BY)) {
        Some(AttributeValue::L(by)) => by
            .iter()
            .filter_map(|w| w.as_s().ok())
            .map(String::as_str)
            .collect(),
        _ => Vec::new(),
    };
    let keep = windows.len().saturating_sub(skip);
    windows[..keep]
        .iter()
        .map(|w| {
            let text = w.as_s().ok();
            // Unreadable: the widest window, so a look-up searches everything.
            let mut window = text
                .and_then(|t| BeganWindow::decode(t))
                .unwrap_or(BeganWindow {
                    at_ms: 0,
                    lease_until_ms: u64::MAX / 2,
                    announces: false,
                });
            window.announces = text.is_some_and(|t| announcing.contains(&t.as_str()));
            window
        })
        .collect()
}

/// The began window a claim writes: this version announces its own steps.
pub(super) fn window_of(request: &ClaimRequest<'_>) -> BeganWindow {
    BeganWindow {
        at_ms: request.now_ms,
        lease_until_ms: request.lease_until_ms,
        announces: true,
    }
}

pub(super) fn attempts_of(item: Option<&HashMap<String, AttributeValue>>) -> u32 {
    item.and_then(|a| a.get(attr::ATTEMPTS))
        .and_then(number)
        .unwrap_or(1)
        .try_into()
        .unwrap_or(u32::MAX)
}

pub(super) fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_string())
}

pub(super) fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

pub(super) fn number(value: &AttributeValue) -> Option<u64> {
    value.as_n().ok()?.parse().ok()
}

/// The journal key under which DynamoDB keeps step `step`'s look-up progress (not a number:
/// versions before it skip it).
pub(super) fn looked_key(step: u32) -> String {
    format!("l{step}")
}
