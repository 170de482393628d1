#!/usr/bin/env bash
# Makes sure a Rust target's standard library is installed: installs it with
# rustup where missing, or says in one line how to get it (exit 1).
#
#   scripts/ensure-target.sh TARGET
set -euo pipefail
target="${1:?usage: scripts/ensure-target.sh TARGET}"
[ -d "$(rustc --print sysroot)/lib/rustlib/$target/lib" ] && exit 0
if command -v rustup >/dev/null; then
    echo "installing the Rust target $target" >&2
    timeout 300 rustup target add "$target" >&2 && exit 0
fi
echo "the Rust target $target is not installed and could not be: run 'rustup target add $target' as the toolchain's owner" >&2
exit 1
