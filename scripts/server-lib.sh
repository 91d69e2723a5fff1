# Sourced by scripts/dynamodb-local.sh and scripts/sqs-local.sh: what a local test server's
# script does beyond installing and starting it. The sourcing script sets NAME, PIDFILE and
# LOGFILE and defines `answers` (does the server answer?) and `start`.

# Waits until the server started as `$(cat "$PIDFILE")` answers, or it exits, or `$1` tenths
# of seconds pass (default 150).
wait_ready() {
  for _ in $(seq 1 "${1:-150}"); do
    if answers; then
      echo "$NAME: ready on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))" >&2
      return 0
    fi
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      echo "$NAME: the server exited; its log:" >&2
      cat "$LOGFILE" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "$NAME: not ready in time; see $LOGFILE" >&2
  exit 1
}

# Stops the server this script started (by its PID file), and only that one.
stop() {
  if [ -f "$PIDFILE" ]; then
    pid="$(cat "$PIDFILE")"
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
      echo "$NAME: stopped (pid $pid)" >&2
    fi
    rm -f "$PIDFILE"
  fi
}

# Starts the server unless something answers already, runs the command, then stops the server
# if this call started it; returns the command's status.
run() {
  local started=""
  if ! answers; then
    start
    started=1
  fi
  local status=0
  "$@" || status=$?
  if [ -n "$started" ]; then stop; fi
  return "$status"
}

# The command line: install|start|stop|status|run CMD…
dispatch() {
  case "${1:-}" in
    install) install ;;
    run) shift; run "$@" ;;
    start) start ;;
    stop) stop ;;
    status) if answers; then echo "answering on 127.0.0.1:$PORT"; else echo "not answering on 127.0.0.1:$PORT"; exit 1; fi ;;
    *) echo "usage: $0 install|start|stop|status|run CMD..." >&2; exit 2 ;;
  esac
}
