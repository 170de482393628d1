#!/usr/bin/env bash
# Builds the static (musl) release binary.
#
#   scripts/build-static.sh          this machine's architecture; prints the
#                                    binary's path last on stdout
#   scripts/build-static.sh --all    all six: writes dist/iptables-wrapper-ARCH
#                                    for x86_64, aarch64, armv7, ppc64le,
#                                    riscv64 and s390x, and dist/SHA256SUMS
#                                    (check: cd dist && sha256sum -c SHA256SUMS)
#
# Installs a missing Rust target with rustup. x86_64 and aarch64 (musl) link
# with rust-lld, no cross C toolchain needed; armv7, ppc64le, riscv64 and
# s390x (static glibc) with Debian's cross gcc (.cargo/config.toml;
# scripts/install-deps.sh installs it; docs/building.md says why).
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_ARCHES=(x86_64 aarch64 armv7 ppc64le riscv64 s390x)

# build ARCH: builds the binary for ARCH, checks it is static, prints its path.
build() {
    local target path
    local linker
    target=$(bash scripts/static-target.sh "$1")
    linker=$(bash scripts/static-target.sh --linker "$1")
    bash scripts/ensure-target.sh "$target"
    if [[ -n "$linker" ]] && ! command -v "$linker" >/dev/null; then
        echo "build-static.sh: $target links with $linker, which is missing (bash scripts/install-deps.sh installs it)" >&2
        exit 1
    fi
    cargo build --release --quiet --target "$target" >&2
    path="$PWD/target/$target/release/iptables-wrapper"
    if readelf -lW "$path" 2>/dev/null | grep -q INTERP; then
        echo "build-static.sh: $path asks for a dynamic loader; it must be static" >&2
        exit 1
    fi
    echo "$path"
}

case "${1:-}" in
    "")
        build "$(uname -m)"
        ;;
    --all)
        mkdir -p dist
        names=()
        for arch in "${ALL_ARCHES[@]}"; do
            cp "$(build "$arch")" "dist/iptables-wrapper-$arch.tmp"
            mv "dist/iptables-wrapper-$arch.tmp" "dist/iptables-wrapper-$arch"
            names+=("iptables-wrapper-$arch")
        done
        (cd dist && sha256sum "${names[@]}" >SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)
        for name in "${names[@]}" SHA256SUMS; do echo "$PWD/dist/$name"; done
        ;;
    *)
        echo "build-static.sh: unknown argument '$1' (expected nothing or --all)" >&2
        exit 2
        ;;
esac
