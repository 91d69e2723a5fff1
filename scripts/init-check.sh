#!/usr/bin/env bash
# `slack-once init` as a new user runs it: writes a bot (slack-once as a path dependency on this
# checkout), runs its fmt check, clippy and tests, and `sam validate --lint` and cfn-lint on its
# template; checks that the longest name (31 characters) still formats; and, when cargo-lambda is in .tools,
# that `cargo lambda new --template templates/bot` writes the same files. The bot builds into
# this checkout's target/ with this checkout's Cargo.lock, so only the bot itself is compiled.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}"
work="$(mktemp -d)"
pid=
trap '[ -z "$pid" ] || kill "$pid" 2> /dev/null; rm -rf "$work"' EXIT
cargo build --locked --quiet --bin slack-once
bin="$ROOT/target/debug/slack-once"

"$bin" init mybot --dir "$work/mybot"
"$bin" init abcdefghijklmnopqrstuvwxyz01234 --dir "$work/long" > /dev/null
(cd "$work/long" && cargo fmt --check)
if "$bin" init mybot --dir "$work/mybot" 2> /dev/null; then
  echo "init wrote over a bot" >&2; exit 1
fi

cd "$work/mybot"
cp "$ROOT/Cargo.lock" .
export CARGO_TARGET_DIR="$ROOT/target"
cargo fmt --check
cargo clippy --quiet --all-targets -- -D warnings
cargo test --quiet
# The binary's build shares the tests' build of every dependency: only the bot and slack-once
# (without the explorer) are compiled again.
rebuilt="$(cargo build --message-format=json 2> /dev/null | python3 -c '
import json, sys
names = set()
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and not m.get("fresh"):
        names.add(m["target"]["name"])
print(" ".join(sorted(names)))')"
for name in $rebuilt; do
  case "$name" in mybot|slack_once|slack-once|build-script-build) ;;
    *) echo "cargo build compiled $name again after cargo test (rebuilt: $rebuilt)" >&2; exit 1 ;;
  esac
done
echo "cargo build after cargo test compiled only: ${rebuilt:-nothing}"
# The bot's own build (the features its Lambda build has) links none of slack-once's test kit,
# and its `standin` says which build has the stand-in.
if nm -C "$CARGO_TARGET_DIR/debug/mybot" | grep -q 'slack_once::testing::'; then
  echo "mybot links slack-once's test kit, built without the testing feature" >&2; exit 1
fi
standin="$("$CARGO_TARGET_DIR/debug/mybot" standin 2>&1 || true)"
grep -q -- "--features slack-once/testing" <<< "$standin" || { echo "mybot standin: $standin" >&2; exit 1; }
echo "mybot's own build links no test kit; its standin names the feature that has it"
# The checked-in manifest is the one the bot's code needs (as the bot's own CI checks it).
"$CARGO_TARGET_DIR/debug/mybot" manifest --check slack-app-manifest.json
# The README's try-it: the bot's own binary serves, signs, and answers once.
"$CARGO_TARGET_DIR/debug/mybot" --help | grep -q "mybot create-table"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
SLACK_SIGNING_SECRET=dev-secret LISTEN_ADDR="127.0.0.1:$port" "$CARGO_TARGET_DIR/debug/mybot" > "$work/mybot.log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -sf "127.0.0.1:$port/healthz" > /dev/null && break; sleep 0.1; done
curl -sf "127.0.0.1:$port/healthz" > /dev/null || { echo "mybot did not start:" >&2; cat "$work/mybot.log" >&2; exit 1; }
url="http://127.0.0.1:$port/slack/events"
export SLACK_SIGNING_SECRET=dev-secret    # as the README's try-it does
first="$(cargo run -q -- sign events/app_mention.json --url "$url" | sh)"
again="$(cargo run -q -- sign events/app_mention.json --url "$url" --retry 1 | sh)"
unset SLACK_SIGNING_SECRET
kill "$pid"; wait "$pid" || true; pid=
grep -q '"outcome":"answered"' <<< "$first" || { echo "the mention was not answered: $first" >&2; cat "$work/mybot.log" >&2; exit 1; }
grep -q '"outcome":"duplicate"' <<< "$again" || { echo "the retry was not a duplicate: $again" >&2; exit 1; }
echo "mybot answered the mention once, and its retry was a duplicate"
if [ -x "$ROOT/.tools/sam/bin/sam" ]; then
  "$ROOT/.tools/sam/bin/sam" validate --lint
  "$ROOT/.tools/sam/bin/cfn-lint" template.yaml
else
  echo "no .tools/sam (scripts/tools.sh sam): sam validate skipped"
fi
if [ -x "$ROOT/.tools/lambda/bin/cargo-lambda" ]; then
  cd "$work"
  "$ROOT/.tools/lambda/bin/cargo-lambda" lambda new mybot-lambda --template "$ROOT/templates/bot" \
    --no-interactive --render-var "slack_once=path = \"$ROOT\"" > /dev/null
  "$bin" init mybot-lambda --dir "$work/mybot-init" > /dev/null
  diff -r "$work/mybot-lambda" "$work/mybot-init"
  echo "cargo lambda new --template templates/bot writes what init writes"
fi
echo "== init-check passed"
