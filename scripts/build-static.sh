#!/usr/bin/env bash
# Builds the static release binary and prints its path on stdout.
# Target: x86_64-unknown-linux-musl when that Rust target is installed (musl's
# start-up is far cheaper than glibc's, and every iptables call pays it),
# otherwise x86_64-unknown-linux-gnu linked statically (.cargo/config.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(bash scripts/static-target.sh)
cargo build --release --quiet --target "$target" >&2
echo "$PWD/target/$target/release/iptables-wrapper"
