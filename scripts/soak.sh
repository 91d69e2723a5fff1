#!/usr/bin/env bash
# The soak (tests/api/soak.rs): requests at a steady rate through a synchronous ingress, a
# deferred ingress and two workers on DynamoDB Local and the SQS server (started here if nothing
# answers on their ports, stopped after), with Slack's faults and SIGKILLs throughout, checked
# at the end from the stand-in's and the ledger's records. Loopback only; bounded by --events.
#   scripts/soak.sh [--events N] [--rate PER_SECOND] [--seed S] [--kill-every SECONDS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
while [ $# -gt 0 ]; do
  case "$1" in
    --events) export SOAK_EVENTS="$2"; shift 2 ;;
    --rate) export SOAK_RATE="$2"; shift 2 ;;
    --seed) export SOAK_SEED="$2"; shift 2 ;;
    --kill-every) export SOAK_KILL_SECONDS="$2"; shift 2 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "soak.sh: unexpected argument $1" >&2; exit 2 ;;
  esac
done
exec scripts/test.sh --test api soak::soak -- --ignored --nocapture --test-threads 1
