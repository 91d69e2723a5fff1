#!/usr/bin/env bash
# Installs the Bolt apps the gateway's tests run (tests/bots/) and their adapters (adapters/):
#   install_bolt_python   .venv-bolt/ (ignored by git): slack_bolt 1.30.0, the adapter
#                         slack-once-bolt (editable, from adapters/bolt-python), pytest
# Idempotent: a step already done (the same pinned files) is skipped.
# Usage: scripts/bolt-bots.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# Bolt for Python: the test bot tests/bots/bolt-python/app.py runs as
# `.venv-bolt/bin/python tests/bots/bolt-python/app.py`; the adapter's tests as
# `.venv-bolt/bin/python -m pytest adapters/bolt-python/tests`.
install_bolt_python() {
  local venv="$ROOT/.venv-bolt" py="${PYTHON:-python3}"
  local requirements="tests/bots/bolt-python/requirements.txt"
  local pins=(slack_bolt==1.30.0 "pytest>=8,<10")
  # What the environment was installed from: a change to any of it installs again.
  local stamp
  stamp="$(cat "$requirements" adapters/bolt-python/pyproject.toml <(printf '%s\n' "${pins[@]}") | sha256sum | cut -d' ' -f1)"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.installed" 2>/dev/null)" = "$stamp" ]; then
    echo "bolt-python: .venv-bolt is up to date (slack_bolt 1.30.0, slack-once-bolt, pytest)"
    return
  fi
  if [ ! -x "$venv/bin/python" ]; then
    echo "bolt-python: creating the virtual environment .venv-bolt"
    "$py" -m venv "$venv"
  fi
  echo "bolt-python: installing ${pins[*]} and -r $requirements (the adapter from adapters/bolt-python)"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}" -r "$requirements"
  echo "$stamp" > "$venv/.installed"
  echo "bolt-python: installed: $("$venv/bin/python" -c 'import slack_bolt, slack_once_bolt; print("slack_bolt", slack_bolt.version.__version__)')"
}

install_bolt_python
