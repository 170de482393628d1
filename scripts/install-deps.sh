#!/usr/bin/env bash
# Installs what building and testing the wrapper needs on a Debian-like
# machine: the distribution's iptables (both backends) and nftables.
set -euo pipefail

missing=()
for tool in iptables-legacy iptables-nft xtables-legacy-multi nft unshare; do
    command -v "$tool" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})); then
    echo "installing iptables and nftables (missing: ${missing[*]})" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq iptables nftables util-linux >/dev/null
fi
command -v cargo >/dev/null || { echo "cargo is required" >&2; exit 1; }
# The musl target gives the cheapest start-up; without it the build falls
# back to static glibc (scripts/static-target.sh), so this is best effort.
if [ "$(bash "$(dirname "$0")/static-target.sh")" != x86_64-unknown-linux-musl ] && command -v rustup >/dev/null; then
    timeout 120 rustup target add x86_64-unknown-linux-musl >&2 \
        || echo "the musl target could not be installed: building with static glibc" >&2
fi
