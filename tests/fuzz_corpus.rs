//! Replays the fuzz targets' seed corpus and every crash input found so far (`fuzz/regressions/`)
//! through the same checks the fuzzers run, on the stable toolchain.

use std::path::Path;

use slack_once::fuzzing::{check_envelope, check_interaction, check_signature};

fn replay(target: &str, check: fn(&[u8])) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut count = 0;
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_file() && path.file_name().is_some_and(|n| n != ".gitkeep") {
                let data = std::fs::read(&path).unwrap();
                let outcome = std::panic::catch_unwind(|| check(&data));
                assert!(outcome.is_ok(), "{} fails its check", path.display());
                count += 1;
            }
        }
    }
    count
}

#[test]
fn the_signature_corpus_and_regressions_pass_their_checks() {
    assert!(replay("signature", check_signature) >= 5);
}

#[test]
fn the_envelope_corpus_and_regressions_pass_their_checks() {
    assert!(replay("envelope", check_envelope) >= 8);
}

#[test]
fn the_interaction_corpus_and_regressions_pass_their_checks() {
    assert!(replay("interaction", check_interaction) >= 10);
}
