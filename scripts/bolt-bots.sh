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

install_bolt_js
