#!/usr/bin/env bash
# Runs every test: installs the Bolt apps the gateway's tests run (scripts/bolt-bots.sh: Bolt for
# JavaScript and Python from npm and PyPI, up to date in a second), runs the Bolt adapters' own
# suites (when run with no arguments), starts DynamoDB Local, the SQS server (moto) and
# PostgreSQL (Debian's package, scripts/postgres-local.sh) on 127.0.0.1 if nothing answers there, runs `cargo test` with the ignored tests included, and
# stops the servers it started (only those, by PID). A plain `cargo test` runs only the hermetic tests: the others
# are `#[ignore = "needs …"]` (DynamoDB Local, the SQS server, the built binary,
# the previous release), and this script runs them too (docs/test-suite.md, "Tiers").
# Extra arguments go to cargo test, e.g. `scripts/test.sh processes` or
# `scripts/test.sh --test api -- takeovers::`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export DYNAMODB_LOCAL_PORT="${DYNAMODB_LOCAL_PORT:-8000}"
export SQS_LOCAL_PORT="${SQS_LOCAL_PORT:-9324}"
export POSTGRES_LOCAL_PORT="${POSTGRES_LOCAL_PORT:-5433}"
# The previous release's binary, for the tests in which it serves beside this one.
# Should it not build (no history, no python3), only those tests fail, naming why.
if [ -z "${SLACK_ONCE_PREVIOUS_BIN:-}" ]; then
  if previous="$(scripts/previous-release.sh)"; then
    export SLACK_ONCE_PREVIOUS_BIN="$previous"
  else
    echo "test.sh: the previous release's binary could not be built (above): the tests" \
      "that run it beside this release will fail" >&2
  fi
fi
# With no arguments (CI), the tests build while the Bolt apps install (mostly the network's
# time); the adapters' suites, which time their stand-ins, run once the build is done.
build=""
if [ "$#" -eq 0 ]; then
  build_log="$(mktemp)"
  # In a process group of its own (set -m), which the script ends with its compilers should it
  # stop before the build (Ctrl-C, a CI timeout's SIGTERM): a build in the background ignores
  # Ctrl-C and outlives its script, still writing target/.
  set -m
  cargo test --locked --no-run >"$build_log" 2>&1 &
  build=$!
  set +m
  trap 'kill -- -"$build" 2>/dev/null || true; rm -f "$build_log"' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
fi
installed=yes
scripts/bolt-bots.sh || installed=no
if [ -n "$build" ]; then
  if ! wait "$build"; then
    cat "$build_log" >&2
    exit 1
  fi
  tail -n 1 "$build_log"
  rm -f "$build_log"
  trap - EXIT INT TERM
fi
[ "$installed" = yes ] || { echo "test.sh: the Bolt apps did not install (above)" >&2; exit 1; }
if [ "$#" -eq 0 ]; then
  echo "test.sh: the Bolt adapters' own tests (real Bolt against a gateway stand-in)"
  npm test --prefix adapters/bolt-js --silent
  npm test --prefix tests/bots/bolt-js --silent
  .venv-bolt/bin/python -m pytest -q adapters/bolt-python/tests tests/bots/bolt-python
fi
# Most tests wait (on leases, on Slack's retries, on a process to start) rather than compute:
# eight at a time on two cores takes the API tests from about 210 s to 70 s.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-8}"
# Every ignored test but the soak (minutes long: scripts/soak.sh runs it).
tier=(--include-ignored --skip soak::soak)
args=("$@")
separator=no
for arg in "$@"; do [ "$arg" = "--" ] && separator=yes; done
if [ "$separator" = yes ]; then args+=("${tier[@]}"); else args+=(-- "${tier[@]}"); fi
exec scripts/dynamodb-local.sh run scripts/sqs-local.sh run scripts/postgres-local.sh run cargo test --locked "${args[@]}"
