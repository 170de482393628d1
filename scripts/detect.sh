#!/usr/bin/env bash
# Builds the static wrapper and prints its decision for this machine.
# `detect` only reads: it creates no table and changes no kernel state.
#
# Needs a Rust toolchain first (cargo and rustc, installed with rustup; see
# "Two commands" in README.md). Installs only what this needs: Debian's
# iptables package (the two backends, which `detect` reads through when the
# kernel cannot be asked directly) and this machine's musl target (rustup
# target add). What the test suite needs besides is scripts/install-deps.sh's.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || {
    echo "detect.sh: cargo is not installed: install a Rust toolchain with rustup first (README.md, \"Two commands\")" >&2
    exit 1
}
# has_tool NAME: NAME is a command here, /usr/sbin and /sbin included.
has_tool() { PATH="$PATH:/usr/sbin:/sbin" command -v "$1" >/dev/null 2>&1; }
if ! has_tool xtables-legacy-multi || ! has_tool xtables-nft-multi; then
    bash scripts/apt-install.sh detect.sh iptables
fi
echo "detect.sh: building the wrapper (cargo build --release; a minute or two the first time)" >&2
start=$SECONDS
wrapper=$(bash scripts/build-static.sh)
echo "detect.sh: built $wrapper in $((SECONDS - start)) s; its decision for this machine:" >&2
exec "$wrapper" detect "$@"
