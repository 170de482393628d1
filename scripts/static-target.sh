#!/usr/bin/env bash
# Prints the Rust target the static wrapper is built for: musl when its
# standard library is installed, otherwise glibc linked statically.
set -euo pipefail
if [ -d "$(rustc --print sysroot)/lib/rustlib/x86_64-unknown-linux-musl/lib" ]; then
    echo x86_64-unknown-linux-musl
else
    echo x86_64-unknown-linux-gnu
fi
