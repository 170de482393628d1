#!/usr/bin/env bash
# Prints the Rust target the static wrapper is built for on an architecture:
# ARCH-unknown-linux-musl (static musl, the build to ship; see
# .cargo/config.toml for why not glibc).
#
#   scripts/static-target.sh [ARCH]      ARCH: x86_64 or aarch64 (default: this machine's)
set -euo pipefail
arch="${1:-$(uname -m)}"
case "$arch" in
    x86_64 | amd64) echo x86_64-unknown-linux-musl ;;
    aarch64 | arm64) echo aarch64-unknown-linux-musl ;;
    *)
        echo "static-target.sh: unsupported architecture '$arch' (supported: x86_64, aarch64)" >&2
        exit 2
        ;;
esac
