#!/usr/bin/env bash
# Runs every test: starts DynamoDB Local on 127.0.0.1 if nothing answers there, runs
# `cargo test`, and stops the server it started (only that one, by its PID).
# Extra arguments go to cargo test, e.g. `scripts/test.sh processes`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export DYNAMODB_LOCAL_PORT="${DYNAMODB_LOCAL_PORT:-8000}"

started=""
if ! scripts/dynamodb-local.sh status >/dev/null 2>&1; then
  scripts/dynamodb-local.sh start
  started=1
fi
# DynamoDB Local needs its jar even when already running: the outage test starts its own.
scripts/dynamodb-local.sh install
cleanup() { if [ -n "$started" ]; then scripts/dynamodb-local.sh stop; fi; }
trap cleanup EXIT

cargo test --locked "$@"
