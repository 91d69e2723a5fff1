#!/usr/bin/env bash
# The simulation (examples/simulate.rs, slack_once::testing::explore::Simulation): the soak's
# mix of requests through the soak bot, in one process on virtual time, every request with its
# copies, Slack's retries, the queue's redeliveries, the dead-letter queue and its redrive, and
# faults drawn from the seed at every call; checked by every invariant the explorer checks,
# per kind of request what became of them, and the first failure shrunk to its trace.
# Nothing listens or is sent outside the process but to 127.0.0.1.
#   scripts/simulate.sh [--requests N] [--seed S] [--threads N] [--faults RATE] [--only N]
#                       [--plant lease|around|finish] [--mix fleet|soak] [--installed PER_MILLE]
# --requests: 100,000 unless given (a million takes three to four minutes here); --only N: schedule
# N of the seed alone, with its trace; --plant: a defect planted, to see it found.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
case "${1:-}" in -h|--help) sed -n '2,11p' "$0"; exit 0 ;; esac
cargo build --locked --quiet --profile release-fast --example simulate
exec target/release-fast/examples/simulate "$@"
