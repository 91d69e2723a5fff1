//! Fuzzes the Events API envelope parser: it must never panic, and what it accepts must hold
//! the invariants the ledger relies on (a bounded, plain `event_id`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use slack_once::fuzzing::check_envelope;

fuzz_target!(|data: &[u8]| check_envelope(data));
