#!/usr/bin/env bash
# Runs every test: starts DynamoDB Local on 127.0.0.1 if nothing answers there, runs
# `cargo test`, and stops the server it started (only that one, by its PID).
# Extra arguments go to cargo test, e.g. `scripts/test.sh processes`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export DYNAMODB_LOCAL_PORT="${DYNAMODB_LOCAL_PORT:-8000}"
exec scripts/dynamodb-local.sh run cargo test --locked "$@"
