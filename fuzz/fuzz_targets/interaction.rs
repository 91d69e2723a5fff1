//! Fuzzes the parsing of slash commands' and interactions' forms and payloads, and the check
//! of a `response_url`: never a panic, keys bounded, URLs only Slack's (see the check).
#![no_main]

use libfuzzer_sys::fuzz_target;
use slack_once::fuzzing::check_interaction;

fuzz_target!(|data: &[u8]| check_interaction(data));
