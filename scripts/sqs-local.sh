#!/usr/bin/env bash
# An SQS-compatible server for the tests and for deferred mode on a laptop: moto's server mode
# (from PyPI), in its own virtual environment under .tools/moto (never committed), started by
# scripts/sqs-server.py (moto's application served by waitress, with moto's per-message costs
# removed, behaviour unchanged: see there). Only its SQS and Secrets Manager APIs are used: moto's DynamoDB is not atomic,
# the ledger stays on DynamoDB Local.
#
#   scripts/sqs-local.sh install   create .tools/moto and install moto[server] into it
#   scripts/sqs-local.sh start     install if needed, start on 127.0.0.1:$SQS_LOCAL_PORT, wait until ready
#   scripts/sqs-local.sh stop      stop the server this script started (by its PID file)
#   scripts/sqs-local.sh status    say whether it answers
#   scripts/sqs-local.sh run CMD…  start it unless something answers already, run CMD,
#                                  then stop it if this call started it
set -euo pipefail

MOTO_VERSION="${MOTO_VERSION:-5.2.5}"
WAITRESS_VERSION=3.0.2
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SQS_LOCAL_VENV:-$ROOT/.tools/moto}"
PORT="${SQS_LOCAL_PORT:-9324}"
RUN_DIR="$ROOT/.tools/run"
PIDFILE="$RUN_DIR/sqs-local-$PORT.pid"
LOGFILE="$RUN_DIR/sqs-local-$PORT.log"
PY="${PYTHON:-python3}"

answers() {
  curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$PORT/moto-api/" 2>/dev/null
}

install() {
  if [ -x "$VENV/bin/moto_server" ] && "$VENV/bin/python" -c "import waitress" 2>/dev/null; then
    return 0
  fi
  echo "sqs-local: installing moto[server]==$MOTO_VERSION into $VENV" >&2
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION" \
    "waitress==$WAITRESS_VERSION"
  [ -x "$VENV/bin/moto_server" ] || { echo "sqs-local: moto_server is missing after the install" >&2; exit 1; }
}

start() {
  if answers; then
    echo "sqs-local: already answering on 127.0.0.1:$PORT" >&2
    return 0
  fi
  install
  mkdir -p "$RUN_DIR"
  # Loopback only; no credentials or region are checked by moto.
  (cd "$RUN_DIR" && exec nohup "$VENV/bin/python" "$ROOT/scripts/sqs-server.py" -H 127.0.0.1 -p "$PORT" >"$LOGFILE" 2>&1) &
  echo $! >"$PIDFILE"
  wait_ready 300
}

NAME=sqs-local
# shellcheck source=scripts/server-lib.sh
. "$ROOT/scripts/server-lib.sh"
dispatch "$@"
