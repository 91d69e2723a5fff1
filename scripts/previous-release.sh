#!/usr/bin/env bash
# Builds the previous release's binary (the commit in tests/data/formats/previous/release) as
# target/debug/slack-once-previous and prints its path, for the tests in which the previous
# release and this one serve side by side (tests/api/deploy.rs). Its source comes from this
# repository's history (git archive: no worktree, no change to .git); it shares this checkout's
# target/ and Cargo.lock, so only the crate itself is compiled again.
#
#   scripts/previous-release.sh                 the previous release's slack-once binary
#   scripts/previous-release.sh --example NAME  this checkout's examples/NAME.rs built on the
#                                               previous release's library, as
#                                               target/debug/examples/NAME_previous (a bot of
#                                               one's own at its older version: the soak's
#                                               rolling deploy)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
example=""
if [ "${1:-}" = "--example" ]; then
  example="${2:?previous-release.sh: --example needs a name}"
fi
rev="$(tr -d '[:space:]' < tests/data/formats/previous/release)"
if ! git cat-file -e "$rev^{commit}" 2>/dev/null; then
  # A shallow clone: the commit may still be fetched from where this one came from.
  git fetch --quiet --depth 1 origin "$rev" 2>/dev/null || true
fi
if ! git cat-file -e "$rev^{commit}" 2>/dev/null; then
  echo "previous-release: commit $rev is not in this clone's history (a shallow clone?):" \
    "run git fetch --unshallow, or the side-by-side tests fail naming this" >&2
  exit 1
fi
src="target/previous-release/$rev"
if [ ! -f "$src/.complete" ]; then
  rm -rf "$src"
  mkdir -p "$src"
  git archive "$rev" | tar -x -C "$src"
  # Its own package and binary name, so neither collides with this checkout's in target/; the
  # library keeps its crate name (src/main.rs uses slack_once::). Its dev-dependencies go (one
  # names this package by path); tokio takes the features `cargo test` unifies here, so the
  # dependencies already built are reused.
  python3 - "$src/Cargo.toml" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read().split("\n[dev-dependencies]")[0]
text = text.replace('name = "slack-once"', 'name = "slack-once-previous"')
text = text.replace('default-run = "slack-once"', 'default-run = "slack-once-previous"')
text = text.replace('[lib]\n', '[lib]\nname = "slack_once"\n', 1)
text = re.sub(r'^tokio = \{[^\n]*\}$', 'tokio = { version = "1", features = ["full", "test-util"] }',
              text, count=1, flags=re.M)
open(path, "w").write(text + "\n[workspace]\n")
PY
  cp Cargo.lock "$src/Cargo.lock"
  touch "$src/.complete"
fi
if [ -n "$example" ]; then
  cp "examples/$example.rs" "$src/examples/${example}_previous.rs"
  cargo build --quiet --manifest-path "$src/Cargo.toml" --example "${example}_previous" \
    --target-dir "$PWD/target" >&2
  echo "$PWD/target/debug/examples/${example}_previous"
  exit 0
fi
cargo build --quiet --manifest-path "$src/Cargo.toml" --bin slack-once-previous \
  --target-dir "$PWD/target" >&2
echo "$PWD/target/debug/slack-once-previous"
