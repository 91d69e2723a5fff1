#!/usr/bin/env bash
# Installs the deploy tools into .tools/ (ignored by git), each in its own virtual environment
# (the machine's awscli may pin another botocore than aws-sam-cli wants):
#   .tools/sam     aws-sam-cli and cfn-lint   -> .tools/sam/bin/sam, .tools/sam/bin/cfn-lint
#   .tools/lambda  cargo-lambda (brings zig)  -> .tools/lambda/bin/cargo-lambda
# Usage: scripts/tools.sh [sam|lambda|all]   (default: all)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
PY="${PYTHON:-python3}"

venv() {
  local name="$1"; shift
  if [ ! -x "$TOOLS/$name/bin/pip" ]; then
    "$PY" -m venv "$TOOLS/$name"
  fi
  "$TOOLS/$name/bin/pip" install --quiet --disable-pip-version-check "$@"
}

case "${1:-all}" in
  sam) venv sam aws-sam-cli cfn-lint ;;
  lambda) venv lambda cargo-lambda ;;
  all) venv sam aws-sam-cli cfn-lint; venv lambda cargo-lambda ;;
  *) echo "usage: $0 [sam|lambda|all]" >&2; exit 2 ;;
esac
