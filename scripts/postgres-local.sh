#!/usr/bin/env bash
# A PostgreSQL server for the tests and for running the bot on a laptop with DATABASE_URL: the
# server of Debian's `postgresql` package (installed with apt-get when missing), a cluster of its
# own under $POSTGRES_LOCAL_DIR (default /tmp/slack-once-postgres-$PORT, owned by the `postgres`
# user: the server refuses to run as root), on 127.0.0.1:$POSTGRES_LOCAL_PORT (default 5433, so as
# not to meet a system cluster on 5432), trusting local connections. Nothing of it is committed.
#
#   scripts/postgres-local.sh install   install Debian's postgresql package if initdb is missing
#   scripts/postgres-local.sh start     install if needed, create the cluster, start it, wait until ready
#   scripts/postgres-local.sh stop      stop the server this script started (by its PID file)
#   scripts/postgres-local.sh status    say whether it answers
#   scripts/postgres-local.sh url       print the DATABASE_URL of its `postgres` database
#   scripts/postgres-local.sh run CMD…  start it unless something answers already, run CMD,
#                                       then stop it if this call started it
#
# The tests' cluster runs with fsync off (a test server's data need not survive the machine's
# crash; every client-visible behaviour is the same); `start` with POSTGRES_LOCAL_FSYNC=on keeps it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${POSTGRES_LOCAL_PORT:-5433}"
DIR="${POSTGRES_LOCAL_DIR:-/tmp/slack-once-postgres-$PORT}"
DATA="$DIR/data"
PIDFILE="$DIR/postgres-$PORT.pid"
LOGFILE="$DIR/postgres-$PORT.log"
NAME=postgres-local

bin_dir() {
  local found
  found="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  [ -n "$found" ] && echo "$found"
}

answers() {
  local bin
  bin="$(bin_dir)" || return 1
  "$bin/pg_isready" -q -h 127.0.0.1 -p "$PORT" -t 1 2>/dev/null
}

as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

install() {
  if bin_dir >/dev/null; then return 0; fi
  echo "$NAME: installing Debian's postgresql package" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  bin_dir >/dev/null || { echo "$NAME: initdb is missing after the install" >&2; exit 1; }
}

start() {
  if answers; then
    echo "$NAME: already answering on 127.0.0.1:$PORT" >&2
    return 0
  fi
  install
  local bin
  bin="$(bin_dir)"
  mkdir -p "$DIR"
  [ "$(id -u)" -eq 0 ] && chown postgres: "$DIR"
  if [ ! -f "$DATA/PG_VERSION" ]; then
    as_postgres "$bin/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
  fi
  local fsync="${POSTGRES_LOCAL_FSYNC:-off}"
  # The server's own PID (postmaster.pid's first line) is what `stop` stops.
  as_postgres "$bin/pg_ctl" -D "$DATA" -l "$LOGFILE" -w -t 30 \
    -o "-p $PORT -c listen_addresses=127.0.0.1 -k $DIR -c fsync=$fsync -c max_connections=300 -c full_page_writes=$fsync" \
    start >/dev/null
  head -n 1 "$DATA/postmaster.pid" >"$PIDFILE"
  wait_ready 300
}

# shellcheck source=scripts/server-lib.sh
. "$ROOT/scripts/server-lib.sh"

# Stops the server this script started, by its PID file: a fast shutdown (SIGINT: connected
# clients are disconnected, not waited for), and SIGKILL only if it has not ended in 10 s.
stop() {
  if [ -f "$PIDFILE" ]; then
    pid="$(cat "$PIDFILE")"
    if kill -0 "$pid" 2>/dev/null; then
      kill -INT "$pid"
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
      echo "$NAME: stopped (pid $pid)" >&2
    fi
    rm -f "$PIDFILE"
  fi
}

case "${1:-}" in
  url) echo "postgres://postgres@127.0.0.1:$PORT/postgres" ;;
  run) shift; run "$@" ;;
  *) dispatch "$@" ;;
esac
