#!/usr/bin/env bash
# The whole test suite: unit and integration tests against the real
# iptables-legacy, iptables-nft and kernel (each test in a network namespace
# of its own; needs root), then the container matrix when a Docker engine
# answers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo test --release --target "$(bash scripts/static-target.sh)"
if docker info >/dev/null 2>&1; then
    bash container-tests/run-matrix.sh
else
    echo "no Docker engine answers: skipping the container matrix (container-tests/run-matrix.sh)"
fi
