//! Fuzzes the signature check with arbitrary headers, bodies and clocks: it must never panic,
//! and it must accept exactly the requests signed with the configured secret.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slack_once::fuzzing::check_signature;

fuzz_target!(|data: &[u8]| check_signature(data));
