#!/usr/bin/env bash
# AWS's DynamoDB Local (the real engine, Java), for the tests and for local mode with DEDUP_TABLE.
#
#   scripts/dynamodb-local.sh install   fetch the jar from the npm package amplify-dynamodb-simulator
#   scripts/dynamodb-local.sh start     install if needed, start in memory on 127.0.0.1:$DYNAMODB_LOCAL_PORT, wait until ready
#   scripts/dynamodb-local.sh stop      stop the server this script started (by its PID file)
#   scripts/dynamodb-local.sh status    say whether it answers
#   scripts/dynamodb-local.sh run CMD…  start it unless something answers already, run CMD,
#                                       then stop it if this call started it
#
# DynamoDB Local listens on all interfaces; everything here connects to 127.0.0.1 only.
# The jar is never committed: it is installed under .dynamodb-local/ (ignored by git).
set -euo pipefail

PKG_VERSION=2.9.30
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${DYNAMODB_LOCAL_DIR:-$ROOT/.dynamodb-local}"
PORT="${DYNAMODB_LOCAL_PORT:-8000}"
PIDFILE="$DIR/dynamodb-local-$PORT.pid"
LOGFILE="$DIR/dynamodb-local-$PORT.log"
JAR_DIR="$DIR/package/emulator"

answers() {
  # Any HTTP answer means the server is up (it answers 400 to a bare GET).
  curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$PORT/" 2>/dev/null
}

install() {
  if [ -f "$JAR_DIR/DynamoDBLocal.jar" ]; then return 0; fi
  if ! command -v java >/dev/null 2>&1; then
    echo "dynamodb-local: installing a Java runtime (openjdk-17-jre-headless)" >&2
    apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  fi
  command -v npm >/dev/null 2>&1 || { echo "dynamodb-local: npm is needed to fetch the jar" >&2; exit 1; }
  mkdir -p "$DIR"
  echo "dynamodb-local: fetching amplify-dynamodb-simulator@$PKG_VERSION (DynamoDB Local jar)" >&2
  (cd "$DIR" && npm pack --silent "amplify-dynamodb-simulator@$PKG_VERSION" >/dev/null \
     && tar xzf "amplify-dynamodb-simulator-$PKG_VERSION.tgz" \
     && rm -f "amplify-dynamodb-simulator-$PKG_VERSION.tgz")
  [ -f "$JAR_DIR/DynamoDBLocal.jar" ] || { echo "dynamodb-local: the jar is missing from the package" >&2; exit 1; }
}

start() {
  if answers; then
    echo "dynamodb-local: already answering on 127.0.0.1:$PORT" >&2
    return 0
  fi
  install
  mkdir -p "$DIR"
  # -disableTelemetry and DDB_LOCAL_TELEMETRY=0: DynamoDB Local would otherwise try to reach AWS
  # (and it writes its metadata file into the working directory, hence the cd).
  (cd "$DIR" && DDB_LOCAL_TELEMETRY=0 exec nohup java -Djava.library.path="$JAR_DIR/DynamoDBLocal_lib" -jar "$JAR_DIR/DynamoDBLocal.jar" \
    -inMemory -sharedDb -disableTelemetry -port "$PORT" >"$LOGFILE" 2>&1) &
  echo $! >"$PIDFILE"
  wait_ready 200
}

# `run` installs the jar even when a server already answers: some tests start their own.
install_then() { install; "$@"; }

NAME=dynamodb-local
# shellcheck source=scripts/server-lib.sh
. "$ROOT/scripts/server-lib.sh"
if [ "${1:-}" = run ]; then
  shift
  run install_then "$@"
else
  dispatch "$@"
fi
