#!/usr/bin/env bash
# Builds the static wrapper and prints its decision for this machine.
# `detect` only reads: it creates no table and changes no kernel state.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release --quiet
exec target/x86_64-unknown-linux-gnu/release/iptables-wrapper detect "$@"
