#!/usr/bin/env bash
# Prints the Rust target the static wrapper is built for on an architecture:
# ARCH-unknown-linux-musl (static musl, the build to ship; see
# .cargo/config.toml for why not glibc) on x86_64 and aarch64, static glibc
# on armv7, ppc64le, riscv64 and s390x (docs/building.md says why).
#
#   scripts/static-target.sh [ARCH]      ARCH: x86_64, aarch64, armv7, ppc64le,
#                                        riscv64 or s390x, or Docker's name for
#                                        one (amd64, arm64, arm, ppc64le, riscv64,
#                                        s390x); default: this machine's
#   scripts/static-target.sh --linker ARCH
#                                        the Debian cross gcc the target links
#                                        with, or nothing (rust-lld)
set -euo pipefail
linker=0
[[ "${1:-}" == --linker ]] && { linker=1; shift; }
arch="${1:-$(uname -m)}"
case "$arch" in
    x86_64 | amd64) target=x86_64-unknown-linux-musl gcc= ;;
    aarch64 | arm64) target=aarch64-unknown-linux-musl gcc= ;;
    armv7 | armv7l | arm) target=armv7-unknown-linux-gnueabihf gcc=arm-linux-gnueabihf-gcc ;;
    ppc64le) target=powerpc64le-unknown-linux-gnu gcc=powerpc64le-linux-gnu-gcc ;;
    riscv64) target=riscv64gc-unknown-linux-gnu gcc=riscv64-linux-gnu-gcc ;;
    s390x) target=s390x-unknown-linux-gnu gcc=s390x-linux-gnu-gcc ;;
    *)
        echo "static-target.sh: unsupported architecture '$arch' (supported: x86_64, aarch64, armv7, ppc64le, riscv64, s390x)" >&2
        exit 2
        ;;
esac
if ((linker)); then echo "$gcc"; else echo "$target"; fi
