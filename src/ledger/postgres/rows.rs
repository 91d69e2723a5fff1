//! The claim row's JSON columns as stored and read back (the journal, look-ups, began
//! windows, state changes), the journal's edits as parameters, and times between the
//! database's clock and the caller's.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::journal::record::{BeganWindow, Journal, Looked, StepRecord};
use crate::ledger::JournalEdit;

/// The journal column (step -> `StepRecord::encode`); a record that does not parse is read as
/// an intent of an unknown attempt (the safe reading: someone looks before writing again).
pub(super) fn journal_of(column: &Value) -> Journal {
    let Some(entries) = column.as_object() else {
        return Journal::new();
    };
    entries
        .iter()
        .filter_map(|(step, record)| {
            let step: u32 = step.parse().ok()?;
            let unknown = StepRecord::Intent {
                attempt: 0,
                op: None,
                at_ms: None,
                lease_until_ms: None,
                looked: None,
            };
            let record = record.as_str().and_then(StepRecord::decode);
            Some((step, record.unwrap_or(unknown)))
        })
        .collect()
}

/// The look-ups column (step -> `Looked::encode`).
pub(super) fn looked_of(column: &Value) -> BTreeMap<u32, Looked> {
    let Some(entries) = column.as_object() else {
        return BTreeMap::new();
    };
    entries
        .iter()
        .filter_map(|(step, looked)| Some((step.parse().ok()?, Looked::decode(looked.as_str()?)?)))
        .collect()
}

/// The began windows column, without its last `skip` (a claim's own). Every window of this
/// store is of a release that announces its own steps.
pub(super) fn began_of(column: &Value, skip: usize) -> Vec<BeganWindow> {
    let windows = column.as_array().map(Vec::as_slice).unwrap_or_default();
    let keep = windows.len().saturating_sub(skip);
    windows[..keep]
        .iter()
        .map(|w| {
            // Unreadable: the widest window, so a look-up searches everything.
            let mut window = w
                .as_str()
                .and_then(BeganWindow::decode)
                .unwrap_or(BeganWindow {
                    at_ms: 0,
                    lease_until_ms: u64::MAX / 2,
                    announces: true,
                });
            window.announces = true;
            window
        })
        .collect()
}

/// The state changes column (change id -> version).
pub(super) fn changes_of(column: &Value) -> BTreeMap<String, u64> {
    let Some(entries) = column.as_object() else {
        return BTreeMap::new();
    };
    entries
        .iter()
        .filter_map(|(change, version)| Some((change.clone(), version.as_u64()?)))
        .collect()
}

/// A journal edit as an update's parameters: the steps removed, the records written (an object
/// merged into the column), the look-ups removed and written, and the listeners that ran.
pub(super) struct EditParams {
    pub removed: Vec<String>,
    pub records: Value,
    pub looked_removed: Vec<String>,
    pub looked: Value,
    pub ran: Option<Vec<String>>,
}

impl EditParams {
    pub fn of(edit: &JournalEdit) -> Self {
        let mut removed = Vec::new();
        let mut records = Map::new();
        for (step, record) in &edit.records {
            match record {
                Some(record) => {
                    records.insert(step.to_string(), Value::String(record.encode()));
                }
                None => removed.push(step.to_string()),
            }
        }
        let mut looked_removed = Vec::new();
        let mut looked = Map::new();
        for (step, progress) in &edit.looked {
            match progress {
                Some(progress) => {
                    looked.insert(step.to_string(), Value::String(progress.encode()));
                }
                None => looked_removed.push(step.to_string()),
            }
        }
        Self {
            removed,
            records: Value::Object(records),
            looked_removed,
            looked: Value::Object(looked),
            ran: edit.ran.clone(),
        }
    }
}

/// `db_ms` (a time on the database's clock, read when the database's now was `db_now`) on the
/// caller's clock, whose now is `caller_now`: the same distance from now.
pub(super) fn to_caller(db_ms: i64, db_now: i64, caller_now: u64) -> u64 {
    let ahead = db_ms.saturating_sub(db_now);
    if ahead >= 0 {
        caller_now.saturating_add(ahead as u64)
    } else {
        caller_now.saturating_sub(ahead.unsigned_abs())
    }
}

/// How far `until` is after `now` (both the caller's), as a `bigint` to add to the database's
/// now (negative where it is before).
pub(super) fn after(until: u64, now: u64) -> i64 {
    crate::postgres::ms(until).saturating_sub(crate::postgres::ms(now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::record::Settled;

    #[test]
    fn a_time_keeps_its_distance_from_now_across_clocks() {
        assert_eq!(to_caller(1_500, 1_000, 10_000), 10_500);
        assert_eq!(to_caller(500, 1_000, 10_000), 9_500);
        assert_eq!(to_caller(0, 1_000, 10), 0);
        assert_eq!(after(10_500, 10_000), 500);
        assert_eq!(after(9_000, 10_000), -1_000);
    }

    #[test]
    fn an_edit_becomes_the_steps_removed_and_the_records_merged() {
        let edit = JournalEdit::of(&[
            Settled::Done {
                step: 1,
                result: "{}".into(),
                op: None,
            },
            Settled::NotDone { step: 2 },
        ]);
        let params = EditParams::of(&edit);
        assert_eq!(params.removed, ["2"]);
        assert_eq!(params.records, serde_json::json!({"1": "d - {}"}));
        assert_eq!(params.looked_removed, ["1", "2"]);
        assert_eq!(journal_of(&params.records).len(), 1);
    }

    #[test]
    fn unreadable_records_and_windows_are_read_the_safe_way() {
        let journal = journal_of(&serde_json::json!({"1": "garbage", "x": "d - {}"}));
        assert!(matches!(
            journal.get(&1),
            Some(StepRecord::Intent { attempt: 0, .. })
        ));
        assert_eq!(journal.len(), 1);
        let began = began_of(&serde_json::json!(["5 9", "bad", "7 8"]), 1);
        assert_eq!(began.len(), 2);
        assert_eq!((began[0].at_ms, began[0].lease_until_ms), (5, 9));
        assert_eq!(began[1].at_ms, 0, "the widest window");
    }
}
