#!/usr/bin/env bash
# The soak (tests/api/soak/): a seeded mix of requests at a steady rate through two synchronous
# ingresses, a deferred ingress and two workers of the soak bot (examples/soak.rs), on DynamoDB
# Local and the SQS server (started here if nothing answers on their ports, stopped after), with
# Slack's and DynamoDB's faults, SIGKILLs and a rolling deploy from the bot built on the previous
# release; checked from the stand-in's and the ledger's records, the dead-letter queue redriven,
# and the cost per million printed. Loopback only; bounded by --events.
#   scripts/soak.sh [--events N] [--rate PER_SECOND] [--seed S] [--kill-every SECONDS]
#                   [--deploy-at PERCENT] [--calm] [--keep] [--release] [--store postgres]
# --store postgres (or SOAK_STORE=postgres): the same fleet on PostgreSQL (started here with
#   scripts/postgres-local.sh if nothing answers on its port, stopped after): DATABASE_URL (a
#   fresh schema) and WORK_QUEUE_NAME, no AWS variable; the database's connections cut before a
#   statement or after its answer, and answers slowed, by a proxy; the deploy rolls this release
#   onto itself (the previous release has no PostgreSQL support); no cost per million.
# --calm: no faults and no kills (the deploy still rolls): the cost per million's baseline.
# --release: the bot, the driver and the stand-ins built optimised (the release-fast profile):
#   a third of the CPU a request, for long runs at a higher --rate (the calibration of
#   scripts/simulate.sh in docs/internals/evidence.md); the previous release's bot is still a debug build.
# --keep: the table, the queues and the dead letters are left (not redriven), with the command
#   that redrives them: start DynamoDB Local and the SQS server first (scripts/dynamodb-local.sh
#   start, scripts/sqs-local.sh start), or this script stops them, and what they held, at its end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
profile=()
while [ $# -gt 0 ]; do
  case "$1" in
    --events) export SOAK_EVENTS="$2"; shift 2 ;;
    --rate) export SOAK_RATE="$2"; shift 2 ;;
    --seed) export SOAK_SEED="$2"; shift 2 ;;
    --kill-every) export SOAK_KILL_SECONDS="$2"; shift 2 ;;
    --deploy-at) export SOAK_DEPLOY_AT="$2"; shift 2 ;;
    --calm) export SOAK_CALM=1; shift ;;
    --keep) export SOAK_KEEP=1; shift ;;
    --release) profile=(--profile release-fast); shift ;;
    --store) export SOAK_STORE="$2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "soak.sh: unexpected argument $1" >&2; exit 2 ;;
  esac
done
case "${SOAK_STORE:-dynamodb}" in
  dynamodb|postgres) ;;
  *) echo "soak.sh: --store takes dynamodb or postgres, not ${SOAK_STORE}" >&2; exit 2 ;;
esac
# The bot the fleet runs (`cargo test` builds it, `--test api` alone does not).
cargo build --locked --quiet "${profile[@]}" --example soak
soak=(cargo test --locked "${profile[@]}" --test api soak::soak -- --ignored --nocapture --test-threads 1)
case "${SOAK_STORE:-dynamodb}" in
  postgres)
    exec scripts/postgres-local.sh run "${soak[@]}" ;;
  dynamodb)
    # The older binary of the rolling deploy: this checkout's soak bot built on the previous release.
    SOAK_PREVIOUS_BIN="$(scripts/previous-release.sh --example soak)"
    export SOAK_PREVIOUS_BIN
    exec scripts/dynamodb-local.sh run scripts/sqs-local.sh run "${soak[@]}" ;;
esac
