#!/usr/bin/env bash
# What the optional AWS parts cost a bot that does not use them: the SQS SDK (deferred mode),
# the Secrets Manager SDK (runtime secrets) and aws_lambda_events (the worker's SQS events).
# Builds slack-once from scratch in a target directory of its own (cargo --timings), debug and
# release (the Lambda profile, unstripped so that symbols can be counted), and prints each
# part's share of the compile time (CPU seconds, summed over crates) and of the release
# binary's symbols. About 4 minutes on 2 cores. Whether they should be cargo features is
# decided from this (docs/library.md, "Features").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
cargo build --quiet --locked --timings --target-dir "$dir" --bin slack-once 2> /dev/null
mv "$dir/cargo-timings/cargo-timing.html" "$dir/debug.html"
CARGO_PROFILE_RELEASE_STRIP=false cargo build --quiet --locked --release --timings \
  --target-dir "$dir" --bin slack-once 2> /dev/null
mv "$dir/cargo-timings/cargo-timing.html" "$dir/release.html"
nm -S --size-sort -C "$dir/release/slack-once" > "$dir/symbols.txt"
strip -o "$dir/stripped" "$dir/release/slack-once"
python3 - "$dir" <<'PY'
import json, os, re, sys
d = sys.argv[1]
parts = {"aws-sdk-sqs": "aws_sdk_sqs", "aws-sdk-secretsmanager": "aws_sdk_secretsmanager",
         "aws_lambda_events": "aws_lambda_events"}
for profile in ("debug", "release"):
    html = open(f"{d}/{profile}.html").read()
    units = json.loads(re.search(r"const UNIT_DATA = (\[.*?\]);\n", html, re.S).group(1))
    total = sum(u["duration"] for u in units)
    print(f"{profile}: {total:.0f} CPU s over {len(units)} crates")
    for crate in parts:
        t = sum(u["duration"] for u in units if u["name"] == crate)
        print(f"  {crate:24} {t:5.1f} s  {100 * t / total:4.1f} %")
sizes = {k: 0 for k in parts}
all_symbols = 0
for line in open(f"{d}/symbols.txt"):
    fields = line.split(None, 3)
    if len(fields) < 4:
        continue
    size = int(fields[1], 16)
    all_symbols += size
    for crate, path in parts.items():
        if path in fields[3]:
            sizes[crate] += size
            break
stripped = os.path.getsize(f"{d}/stripped")
print(f"release binary {stripped / 1e6:.2f} MB stripped; symbols {all_symbols / 1024:.0f} KiB")
for crate, size in sizes.items():
    print(f"  {crate:24} {size / 1024:5.0f} KiB  {100 * size / stripped:4.1f} % of the binary")
PY
