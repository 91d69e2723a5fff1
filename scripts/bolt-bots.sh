#!/usr/bin/env bash
# Installs the Bolt adapters and the Bolt test bots that the gateway's tests run, from their
# committed lockfiles (node_modules/ is never committed). Idempotent: an install that is up to date
# is left as it is.
#
#   scripts/bolt-bots.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# ---- Bolt for JavaScript: adapters/bolt-js and tests/bots/bolt-js -----------------------------

# npm ci in $1 (relative to the repository), unless its install is newer than every file after it.
bolt_js_npm_ci() {
  local dir="$1"; shift
  local stamp="$ROOT/$dir/node_modules/.package-lock.json"
  if [ -f "$stamp" ] && [ -z "$(find "$@" -newer "$stamp")" ]; then
    echo "bolt-bots: $dir is up to date"
    return 0
  fi
  echo "bolt-bots: npm ci --prefix $dir"
  npm ci --prefix "$ROOT/$dir" --no-audit --no-fund --loglevel=error
}

install_bolt_js() {
  if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "bolt-bots: node and npm are needed for Bolt for JavaScript (Node.js 20 or later)" >&2
    return 1
  fi
  if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'; then
    echo "bolt-bots: Node.js 20 or later is needed for Bolt for JavaScript, found $(node --version)" >&2
    return 1
  fi
  local adapter="adapters/bolt-js" bot="tests/bots/bolt-js"
  bolt_js_npm_ci "$adapter" "$ROOT/$adapter/package.json" "$ROOT/$adapter/package-lock.json"
  # The bot installs a copy of the adapter's package: a change to it is a reinstall.
  bolt_js_npm_ci "$bot" "$ROOT/$bot/package.json" "$ROOT/$bot/package-lock.json" \
    "$ROOT/$adapter/package.json" "$ROOT/$adapter/index.js" "$ROOT/$adapter/index.d.ts" "$ROOT/$adapter/README.md"
}

# ---- end of Bolt for JavaScript ---------------------------------------------------------------


# ---- Bolt for Python: adapters/bolt-python and tests/bots/bolt-python -------------------------

# .venv-bolt/ (ignored by git): slack_bolt 1.30.0 and slack_sdk pinned by
# tests/bots/bolt-python/requirements.txt, the adapter slack-once-bolt (editable, from
# adapters/bolt-python), pytest. The bot runs as `.venv-bolt/bin/python tests/bots/bolt-python/app.py`;
# the tests as `.venv-bolt/bin/python -m pytest adapters/bolt-python/tests tests/bots/bolt-python`.
install_bolt_python() {
  local venv="$ROOT/.venv-bolt" py="${PYTHON:-python3}"
  local requirements="$ROOT/tests/bots/bolt-python/requirements.txt"
  local pytest_pin="pytest>=8,<10"
  # What the environment was installed from: a change to any of it installs again.
  local stamp
  stamp="$(cat "$requirements" "$ROOT/adapters/bolt-python/pyproject.toml" <(echo "$pytest_pin") | sha256sum)"
  stamp="${stamp%% *}"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.installed" 2>/dev/null)" = "$stamp" ]; then
    echo "bolt-bots: .venv-bolt is up to date"
    return 0
  fi
  if [ ! -x "$venv/bin/python" ]; then
    echo "bolt-bots: $py -m venv .venv-bolt"
    "$py" -m venv "$venv"
  fi
  echo "bolt-bots: pip install -r tests/bots/bolt-python/requirements.txt '$pytest_pin' into .venv-bolt"
  # The requirements name the adapter by a path from the repository root.
  (cd "$ROOT" && "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" "$pytest_pin")
  echo "$stamp" > "$venv/.installed"
  echo "bolt-bots: .venv-bolt has $("$venv/bin/python" -c \
    'import slack_bolt, slack_sdk, slack_once_bolt; print("slack_bolt", slack_bolt.version.__version__, "slack_sdk", slack_sdk.version.__version__, "slack-once-bolt")')"
}

# ---- end of Bolt for Python -------------------------------------------------------------------


install_bolt_js
install_bolt_python
