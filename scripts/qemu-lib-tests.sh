#!/usr/bin/env bash
# Runs the crate's unit tests (cargo test --lib, debug build) for the cross
# targets under qemu-user on this machine: aarch64, armv7, ppc64le, riscv64
# and s390x (big-endian). They hold the byte fixtures and the layout checks
# of every codec; none reads the kernel (those are the integration tests in
# tests/, which run natively only). Installs qemu-user-static when missing.
#
#   scripts/qemu-lib-tests.sh [ARCH...]     (default: all five)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ "$(uname -m)" == x86_64 ]] || { echo "qemu-lib-tests: not an x86_64 machine: skipped" >&2; exit 0; }
arches=("$@")
((${#arches[@]})) || arches=(aarch64 armv7 ppc64le riscv64 s390x)
command -v qemu-s390x-static >/dev/null || bash scripts/apt-install.sh qemu-lib-tests qemu-user-static
for arch in "${arches[@]}"; do
    target=$(bash scripts/static-target.sh "$arch")
    qemu_arch=${target%%-*}
    qemu_arch=${qemu_arch/armv7/arm}
    qemu_arch=${qemu_arch/powerpc64le/ppc64le}
    qemu_arch=${qemu_arch/riscv64gc/riscv64}
    runner_var="CARGO_TARGET_$(echo "$target" | tr 'a-z-' 'A-Z_')_RUNNER"
    echo "qemu-lib-tests: $target under qemu-$qemu_arch-static" >&2
    env "$runner_var=qemu-$qemu_arch-static" cargo test --quiet --lib --target "$target"
done
