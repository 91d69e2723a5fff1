#!/usr/bin/env bash
# Fuzzes the signature check, the envelope parser and the form/payload parser with cargo-fuzz.
#   scripts/fuzz.sh [SECONDS] [TARGET...]     default: 60 s each, targets signature, envelope and interaction
# cargo-fuzz needs nightly features; on the stable toolchain RUSTC_BOOTSTRAP=1 enables them.
# New corpus entries go to a temporary folder; crash inputs land in fuzz/artifacts/TARGET/:
# copy each into fuzz/regressions/TARGET/ so `cargo test` (tests/fuzz_corpus.rs) replays it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SECONDS_EACH="${1:-60}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(signature envelope interaction)

command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
if rustc --version | grep -q nightly; then :; else export RUSTC_BOOTSTRAP=1; fi

for target in "${TARGETS[@]}"; do
  work="$(mktemp -d)"
  echo "== fuzzing $target for ${SECONDS_EACH}s (corpus: $work + fuzz/corpus/$target)"
  cargo fuzz run --fuzz-dir fuzz "$target" "$work" "fuzz/corpus/$target" -- \
    -max_total_time="$SECONDS_EACH" -max_len=65536 -print_final_stats=1
  rm -rf "$work"
done
