#!/usr/bin/env bash
# The benchmark report (benches/report.rs): starts DynamoDB Local (127.0.0.1:8000) and the SQS
# server (127.0.0.1:9324) if nothing answers there, installs Bolt for JavaScript into benches/bolt/node_modules
# and Bolt for Python with Powertools into .tools/bolt-python (neither committed), the Bolt test
# bots and adapters (scripts/bolt-bots.sh, for the gateway's part), builds the
# release binary, the no-op lambda_http fixture and the arm64 Lambda bootstrap (cargo-lambda,
# into .tools/lambda), prints the report and writes it to BENCHMARKS.md; stops only what it started.
#   scripts/bench.sh            the report
#   scripts/bench.sh micro      the criterion micro-benchmarks as well
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export DYNAMODB_LOCAL_PORT="${DYNAMODB_LOCAL_PORT:-8000}"
export SQS_LOCAL_PORT="${SQS_LOCAL_PORT:-9324}"

if [ ! -d benches/bolt/node_modules/@slack/bolt ]; then
  echo "bench: installing Bolt for JavaScript into benches/bolt" >&2
  (cd benches/bolt && npm install --no-audit --no-fund --no-package-lock --loglevel=error)
fi

# The gateway's part runs the Bolt for JavaScript test bot's install and the adapter.
scripts/bolt-bots.sh >&2

# The venv keeps a copy of the requirements it was installed from: a change reinstalls.
if ! cmp -s benches/bolt-python/requirements.txt .tools/bolt-python/requirements.txt; then
  echo "bench: installing Bolt for Python and Powertools into .tools/bolt-python" >&2
  [ -x .tools/bolt-python/bin/pip ] || "${PYTHON:-python3}" -m venv .tools/bolt-python
  .tools/bolt-python/bin/pip install --quiet --disable-pip-version-check -r benches/bolt-python/requirements.txt
  cp benches/bolt-python/requirements.txt .tools/bolt-python/requirements.txt
fi
export BOLT_PYTHON="$PWD/.tools/bolt-python/bin/python"

# The cold start's yardstick, and the arm64 package whose size the report gives (unless
# BENCH_ARM64_BOOTSTRAP names one already built).
cargo build --release --locked --example bench-noop-lambda
cargo build --profile release-o3 --locked --bin slack-once
if [ -z "${BENCH_ARM64_BOOTSTRAP:-}" ]; then
  scripts/tools.sh lambda
  if ! rustup target list --installed | grep -q '^aarch64-unknown-linux-gnu$'; then
    timeout 300 rustup target add aarch64-unknown-linux-gnu || true
  fi
  # The release build (opt-level "s", what SAM deploys) and the same at opt-level 3.
  PATH="$PWD/.tools/lambda/bin:$PATH" cargo lambda build --release --arm64 --locked --bin slack-once \
    && PATH="$PWD/.tools/lambda/bin:$PATH" cargo lambda build --profile release-o3 --arm64 --locked \
      --bin slack-once --lambda-dir target/lambda-o3 \
    || echo "bench: the arm64 build failed; the report gives the x86_64 sizes only" >&2
fi

benches() {
  cargo bench --locked --bench report || return
  if [ "${1:-}" = micro ]; then
    cargo bench --locked --bench micro || return
  fi
}
export -f benches
exec scripts/dynamodb-local.sh run scripts/sqs-local.sh run bash -c 'benches "$@"' bench "$@"
