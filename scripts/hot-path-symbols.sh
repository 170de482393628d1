#!/usr/bin/env bash
# Writes link/hot-path.symbols: the functions a wrapped call runs, which
# build.rs has the linker place together at the start of .text (lld's
# --symbol-ordering-file; x86_64 musl). A call then maps its code in two or
# three page faults instead of ten: the kernel maps a binary's text 64 KiB
# around each fault, and the hot functions otherwise lie all over its 900 KB
# (bench/README.md, "Where a wrapped call's time goes").
#
#   sudo bash scripts/hot-path-symbols.sh           # rewrites link/hot-path.symbols
#   sudo bash scripts/hot-path-symbols.sh --check   # how many of its names this build has
#
# Builds the release binary unstripped (in target/hot-path), then runs one
# wrapped `iptables -V` (and `ip6tables -V`) per decision tier under
# callgrind, up to the backend's exec, in a network namespace of its own
# (unshare -n: every iptables command here runs inside it): the override,
# the host link to each backend, the hint chain in nft and in legacy, no
# legacy table, and rule counts with the count cache; the functions are
# listed in that order, each where it first appears.
#
# The names carry hashes of the compiler version and the crate's metadata:
# after a toolchain or dependency update they stop matching (the build still
# works, only without the order; --check says how many match), so run this
# again then. Needs root, valgrind, iptables (both backends), unshare and nm
# (--check only nm).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=link/hot-path.symbols
TARGET=x86_64-unknown-linux-musl
TARGET_DIR=target/hot-path

die() { echo "hot-path-symbols.sh: $*" >&2; exit 1; }

[[ $(uname -m) == x86_64 ]] || die "the order is made for $TARGET: run it on an x86_64 machine"
command -v nm >/dev/null || die "nm not found (binutils)"

# The release build, unstripped: the same code and symbol names as the
# shipped one. Not by changing the profile: cargo hashes the profile into
# every crate's metadata, and so into every symbol name; flags given to the
# binary's own rustc (as RUSTFLAGS) are not hashed.
cargo rustc --release --quiet --target "$TARGET" --target-dir "$TARGET_DIR" --bin iptables-wrapper -- -C strip=none
BIN=$PWD/$TARGET_DIR/$TARGET/release/iptables-wrapper

if [[ ${1:-} == --check ]]; then
    listed=$(grep -v '^#' "$OUT" | sort -u)
    found=$(comm -12 <(echo "$listed") <(nm --defined-only "$BIN" | awk '{print $3}' | sort -u) | wc -l)
    total=$(echo "$listed" | wc -l)
    echo "$OUT: $found of $total names are in this build"
    ((found * 10 >= total * 9)) || die "fewer than 90% match: run scripts/hot-path-symbols.sh to write it again"
    exit 0
fi
[[ -z ${1:-} ]] || die "unknown argument '$1' (expected nothing or --check)"
[[ $(id -u) == 0 ]] || die "needs root (network namespaces, iptables)"
for tool in valgrind unshare iptables-legacy iptables-nft; do
    command -v "$tool" >/dev/null || die "$tool not found (valgrind, util-linux, iptables)"
done

WORK=$(mktemp -d /tmp/iptw-hot-path.XXXXXX)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$WORK"' EXIT
mkdir -p "$WORK/bin" "$WORK/sbin" "$WORK/host-none" "$WORK/cg"
cp "$BIN" "$WORK/bin/iptables-wrapper"
ln -s iptables-wrapper "$WORK/bin/iptables"
ln -s iptables-wrapper "$WORK/bin/ip6tables"
# Stand-ins for the backends: the run ends at their exec anyway.
for name in iptables-nft iptables-legacy ip6tables-nft ip6tables-legacy; do ln -s /bin/true "$WORK/sbin/$name"; done
for mode in nft legacy; do
    mkdir -p "$WORK/host-$mode/etc/alternatives"
    ln -s "/usr/sbin/iptables-$mode" "$WORK/host-$mode/etc/alternatives/iptables"
    ln -s "/usr/sbin/ip6tables-$mode" "$WORK/host-$mode/etc/alternatives/ip6tables"
done

# Inside the namespace: one tier after the other. The wrapper sees a lock
# file that does not exist; rules are loaded under another.
unshare -n env WORK="$WORK" bash -euo pipefail <<'EOF'
export IPTABLES_WRAPPER_SBIN=$WORK/sbin IPTABLES_WRAPPER_RUN_DIR=$WORK/run XTABLES_LOCKFILE=$WORK/xtables.lock
unset IPTABLES_MODE IPTABLES_WRAPPER_LOG
n=0
profile() {  # [VAR=value...] command: one call under callgrind, after one that fills the warnings record
    env "$@" -V >/dev/null 2>&1 || true
    n=$((n + 1))
    env "${@:1:$#-1}" valgrind --tool=callgrind --demangle=no --dump-before=execve \
        --callgrind-out-file="$WORK/cg/$(printf %02d $n).%p" "${@: -1}" -V >/dev/null 2>&1 || true
}
load() { XTABLES_LOCKFILE=$WORK/load.lock "$@"; }
root=IPTABLES_WRAPPER_HOST_ROOT
profile IPTABLES_MODE=nft $root=$WORK/host-none "$WORK/bin/iptables"
profile IPTABLES_MODE=legacy $root=$WORK/host-none "$WORK/bin/iptables"
for mode in nft legacy; do
    profile $root=$WORK/host-$mode "$WORK/bin/iptables"
    profile $root=$WORK/host-$mode "$WORK/bin/ip6tables"
done
# No legacy table (nft decides), then the hint chains, then counts.
profile $root=$WORK/host-none "$WORK/bin/iptables"
load iptables-nft -t mangle -N KUBE-IPTABLES-HINT
profile $root=$WORK/host-none "$WORK/bin/iptables"
load iptables-nft -t mangle -X KUBE-IPTABLES-HINT
load iptables-legacy -t mangle -N KUBE-IPTABLES-HINT
profile $root=$WORK/host-none "$WORK/bin/iptables"
profile $root=$WORK/host-none "$WORK/bin/ip6tables"
load iptables-legacy -t mangle -X KUBE-IPTABLES-HINT
for backend in legacy nft; do
    for rule in 1 2 3; do load "iptables-$backend" -A INPUT -s "10.0.0.$rule" -j ACCEPT; done
done
load iptables-nft -A INPUT -s 10.0.0.4 -j ACCEPT
profile $root=$WORK/host-none "$WORK/bin/iptables"
profile $root=$WORK/host-none "$WORK/bin/iptables"
EOF

ls "$WORK"/cg/* >/dev/null 2>&1 || die "no callgrind output (valgrind failed?)"
{
    echo "# The functions a wrapped call runs, placed first in .text by build.rs"
    echo "# (lld --symbol-ordering-file). Written by scripts/hot-path-symbols.sh"
    echo "# with $(rustc --version | cut -d" " -f1-2). The names carry hashes of the compiler"
    echo "# and the crate's metadata: write it again after a toolchain or dependency"
    echo "# update (--check counts the names that still match)."
    # musl's start-up, which callgrind names by address or as "(below main)",
    # and its assembly functions, which it names by address; then the tiers
    # in order (the files' names), each function where it first appears.
    {
        printf '%s\n' _start _start_c __libc_start_main __init_libc libc_start_main_stage2 __set_thread_area \
            memcpy memset memmove
        for file in $(ls "$WORK"/cg/* | sort); do
            sed -n 's/^c\{0,1\}fn=([0-9]*) \(.*\)$/\1/p' "$file"
        done | grep -v '^0x\|^(below main)$'
    } | awk '!seen[$0]++'
} >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "$OUT: $(grep -vc '^#' "$OUT") functions"
