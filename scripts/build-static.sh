#!/usr/bin/env bash
# Builds the `slack-once` binary for x86_64-unknown-linux-musl in release: one statically linked
# file for a minimal container (deploy/container/Dockerfile copies it into an image FROM scratch).
#
# Needs: the Rust target (`rustup target add x86_64-unknown-linux-musl`) and a C compiler for ring's
# C and assembly. Plain gcc does (Debian 12's gcc 12 built it; rustc links with the target's own
# musl crt and libc, so no musl toolchain is needed). If it does not on your machine, install
# Debian's musl-tools (`apt-get install musl-tools`): this script prefers its `musl-gcc` when it is
# on PATH. CC_x86_64_unknown_linux_musl, when set, wins over both.
# No CA bundle is needed in the image: every TLS client (Slack's Web API, Socket Mode's WebSockets,
# AWS) trusts webpki-roots, compiled in (Cargo.toml: webpki-roots, tokio-tungstenite's
# rustls-tls-webpki-roots; src/aws.rs: tls_config).
#
# The release profile (lto, one codegen unit): 3.5 minutes from nothing on two cores, more on a
# busy machine. Not part of CI (docs/socket-mode.md, "Deploying replicas", says how to use it).
# Usage: scripts/build-static.sh            (CARGO_TARGET_DIR is honoured, as cargo does)
# Prints the binary's path, size and `file` output; exits 1 if the binary is not statically linked.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

target=x86_64-unknown-linux-musl
if ! rustup target list --installed | grep -qx "$target"; then
  echo "build-static: the Rust target $target is not installed: rustup target add $target" >&2
  exit 2
fi
if [ -z "${CC_x86_64_unknown_linux_musl:-}" ]; then
  if command -v musl-gcc >/dev/null; then
    export CC_x86_64_unknown_linux_musl=musl-gcc
  elif command -v gcc >/dev/null; then
    export CC_x86_64_unknown_linux_musl=gcc
  else
    echo "build-static: no C compiler for ring: apt-get install musl-tools (or gcc)" >&2
    exit 2
  fi
fi
echo "build-static: C compiler for $target: $CC_x86_64_unknown_linux_musl"

if ! cargo build --locked --release --target "$target" --bin slack-once; then
  echo "build-static: the build failed; if ring's C did not compile with $CC_x86_64_unknown_linux_musl," \
    "install musl-tools (apt-get install musl-tools) and run again" >&2
  exit 1
fi

binary="${CARGO_TARGET_DIR:-target}/$target/release/slack-once"
description="$(file -b "$binary")"
echo "$binary: $(du -h "$binary" | cut -f1) ($(stat -c %s "$binary") bytes)"
echo "file: $description"
# `file` says "statically linked" or, for a static position-independent executable, "static-pie linked".
case "$description" in
  *"statically linked"* | *"static-pie linked"*) echo "build-static: statically linked: ok" ;;
  *)
    echo "build-static: $binary is not statically linked" >&2
    exit 1
    ;;
esac
