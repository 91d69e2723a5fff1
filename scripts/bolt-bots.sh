#!/usr/bin/env bash
# Installs the Bolt adapters and the Bolt test bots that the gateway's tests run, from their
# committed lockfiles (node_modules/ is never committed). Idempotent: an install that is up to date
# is left as it is.
#
#   scripts/bolt-bots.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

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

install_bolt_python
