#!/usr/bin/env bash
# Installs what building and testing the wrapper needs on a Debian-like
# machine: the distribution's iptables (both backends) and nftables, strace
# (a test checks what a call looks at), and the
# Rust musl targets of both shipped architectures (.cargo/config.toml builds
# for musl by default, so `cargo test` needs the machine's own), and rustfmt
# and clippy (scripts/test.sh checks the crate's style with both).
set -euo pipefail

missing=()
for tool in iptables-legacy iptables-nft xtables-legacy-multi nft unshare strace; do
    command -v "$tool" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})); then
    echo "installing iptables, nftables and strace (missing: ${missing[*]})" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq iptables nftables util-linux strace >/dev/null
fi
command -v cargo >/dev/null || { echo "cargo is required" >&2; exit 1; }
sysroot=$(rustc --print sysroot)
for arch in x86_64 aarch64; do
    target=$(bash "$(dirname "$0")/static-target.sh" "$arch")
    [ -d "$sysroot/lib/rustlib/$target/lib" ] && continue
    if ! command -v rustup >/dev/null || ! timeout 300 rustup target add "$target" >&2; then
        echo "install-deps.sh: the Rust target $target is missing and rustup could not add it (rustup target add $target)" >&2
        exit 1
    fi
done
for component in rustfmt clippy; do
    cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1 && continue
    if ! command -v rustup >/dev/null || ! timeout 300 rustup component add "$component" >&2; then
        echo "install-deps.sh: cargo ${component/rustfmt/fmt} is missing and rustup could not add it (rustup component add $component)" >&2
        exit 1
    fi
done
