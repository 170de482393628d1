#!/usr/bin/env bash
# Builds the static wrapper and prints its decision for this machine.
# `detect` only reads: it creates no table and changes no kernel state.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
wrapper=$(bash scripts/build-static.sh)
exec "$wrapper" detect "$@"
