#!/usr/bin/env bash
# Where a wrapped call's time goes, tier by tier, for one or more builds side
# by side: each build's `iptables -V` through a static stand-in backend that
# only exits (bench/stub-backend.c), so the figures are the wrapper's own,
# against the stand-in alone and the stand-in behind one bare exec hop
# (bench/exec-hop.c, the floor of any wrapper that decides, then execs).
#
#   sudo bash bench/tiers.sh [--iterations N] [--faults] [--real] [BINARY...]
#
# --real: behind the real iptables-legacy instead of the stand-in (the
# tiers that pick legacy: the override, the host link to legacy, C), against
# `iptables-legacy -V` spawned directly and behind the exec hop.
#
# Without a BINARY it builds this checkout (scripts/build-static.sh). Tiers:
# the override (IPTABLES_MODE=legacy) and the host link (to nft) in an empty
# namespace; B, the hint chain in nft; C, the hint chain in legacy only; D, no
# legacy table; each with 1,000 kube-proxy-like rules per backend that has
# rules (bench/gen-rules.awk). All commands of all tiers run interleaved in
# one bench/abtime.c run (N iterations, default 2000), so background load hits
# them alike. Prints, per command, the median wall time and the median CPU
# time (user + system, from wait4) in microseconds, and each build's figure
# over the stand-in alone; --faults adds each tier's page faults (perf stat,
# the median of 9 calls, the stand-in's own and execve's included).
#
# Each build is copied into the work directory at the same moment: the same
# binary costs more the longer its file has sat in the page cache
# (bench/README.md, "Comparing two builds"). Every iptables command runs in
# network namespaces this script creates and deletes on exit.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH_DIR")
ITERATIONS=2000
FAULTS=
REAL=
BINARIES=()
NS_PREFIX=iptwt-$$
NAMESPACES=()

die() { echo "tiers.sh: $*" >&2; exit 1; }

while (($#)); do
    case $1 in
        --iterations) ITERATIONS=${2:?--iterations needs a number}; shift 2 ;;
        --faults) FAULTS=1; shift ;;
        --real) REAL=1; shift ;;
        -*) die "unknown option '$1' (expected --iterations N, --faults, --real, or binaries)" ;;
        *) [[ -x $1 ]] || die "$1: not an executable file"; BINARIES+=("$(realpath "$1")"); shift ;;
    esac
done
[[ $ITERATIONS =~ ^[1-9][0-9]*$ ]] || die "--iterations $ITERATIONS: expected a positive whole number"
[[ $(id -u) == 0 ]] || die "needs root (network namespaces, iptables)"
((${#BINARIES[@]} <= 2)) || die "at most two builds (bench/abtime.c times at most 16 commands at once)"
for tool in gcc ip iptables-legacy iptables-nft; do
    command -v "$tool" >/dev/null || die "$tool not found (gcc, iproute2, iptables; bench/run.sh installs them)"
done
PERF=$(command -v perf || true)
[[ -z $FAULTS || -n $PERF ]] || die "--faults needs perf (Debian's linux-perf)"

unset IPTABLES_MODE IPTABLES_WRAPPER_HOST_ROOT IPTABLES_WRAPPER_SBIN IPTABLES_WRAPPER_LOG XTABLES_LOCKFILE \
    IPTABLES_WRAPPER_RUN_DIR

WORK=$(mktemp -d /tmp/iptables-wrapper-tiers.XXXXXX)
cleanup() {
    local ns
    for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

if ((${#BINARIES[@]} == 0)); then
    BINARIES=("$(bash "$REPO/scripts/build-static.sh")")
fi
gcc -O2 -o "$WORK/abtime" "$BENCH_DIR/abtime.c"
gcc -static -nostdlib -Os -fno-stack-protector -o "$WORK/exec-hop" "$BENCH_DIR/exec-hop.c"
mkdir -p "$WORK/stub" "$WORK/host-none" "$WORK/host-nft/etc/alternatives" "$WORK/host-legacy/etc/alternatives" "$WORK/run"
chmod 700 "$WORK/run"
gcc -static -nostdlib -Os -fno-stack-protector -o "$WORK/stub/xtables-legacy-multi" "$BENCH_DIR/stub-backend.c"
ln "$WORK/stub/xtables-legacy-multi" "$WORK/stub/xtables-nft-multi"
for mode in legacy nft; do
    ln -s "xtables-$mode-multi" "$WORK/stub/iptables-$mode"
    ln -s "xtables-$mode-multi" "$WORK/stub/ip6tables-$mode"
done
ln -s "$WORK/stub/iptables-nft" "$WORK/host-nft/etc/alternatives/iptables"
ln -s /usr/sbin/iptables-legacy "$WORK/host-legacy/etc/alternatives/iptables"
# The builds, copied at the same moment, each with its iptables link.
for i in "${!BINARIES[@]}"; do mkdir -p "$WORK/build$i"; done
for i in "${!BINARIES[@]}"; do cp "${BINARIES[$i]}" "$WORK/build$i/iptables-wrapper" & done
wait
for i in "${!BINARIES[@]}"; do ln -s iptables-wrapper "$WORK/build$i/iptables"; done

# The namespaces, each in its tier's state. Rules are loaded under a lock
# path of their own; the wrapper sees one that does not exist.
awk -v N=1000 -f "$BENCH_DIR/gen-rules.awk" >"$WORK/rules.v4"
load() { local ns=$1; shift; XTABLES_LOCKFILE=$WORK/load.lock ip netns exec "$ns" "$@"; }
for tier in empty B C D; do
    ip netns add "$NS_PREFIX-$tier"
    NAMESPACES+=("$NS_PREFIX-$tier")
    [[ $(ip netns exec "$NS_PREFIX-$tier" readlink /proc/self/ns/net) != "$(readlink /proc/self/ns/net)" ]] \
        || die "namespace $NS_PREFIX-$tier is not isolated"
done
for tier in B C; do load "$NS_PREFIX-$tier" iptables-legacy-restore <"$WORK/rules.v4"; done
for tier in B C D; do load "$NS_PREFIX-$tier" iptables-nft-restore <"$WORK/rules.v4"; done
load "$NS_PREFIX-B" iptables-nft -t mangle -N KUBE-IPTABLES-HINT
load "$NS_PREFIX-C" iptables-legacy -t mangle -N KUBE-IPTABLES-HINT

# tier name, namespace, the setting that makes the tier.
TIERS=(
    "override empty IPTABLES_MODE=legacy"
    "link empty IPTABLES_WRAPPER_HOST_ROOT=$WORK/host-nft"
    "B B -"
    "C C -"
    "D D -"
)
COMMON=(IPTABLES_WRAPPER_HOST_ROOT="$WORK/host-none" XTABLES_LOCKFILE="$WORK/xtables.lock"
    IPTABLES_WRAPPER_RUN_DIR="$WORK/run" IPTABLES_WRAPPER_SBIN="$WORK/stub")
BACKEND=$WORK/stub/iptables-legacy FLOOR="stand-in"
if [[ -n $REAL ]]; then
    TIERS=(
        "override empty IPTABLES_MODE=legacy"
        "link empty IPTABLES_WRAPPER_HOST_ROOT=$WORK/host-legacy"
        "C C -"
    )
    COMMON=(IPTABLES_WRAPPER_HOST_ROOT="$WORK/host-none" XTABLES_LOCKFILE="$WORK/xtables.lock"
        IPTABLES_WRAPPER_RUN_DIR="$WORK/run")
    BACKEND=/usr/sbin/iptables-legacy FLOOR="backend"
fi

ns_path() { echo "/run/netns/$NS_PREFIX-$1"; }
args=("@ns=$(ns_path empty)" XTABLES_LOCKFILE="$WORK/xtables.lock" "$BACKEND" -V
    ::: "@ns=$(ns_path empty)" XTABLES_LOCKFILE="$WORK/xtables.lock" "$WORK/exec-hop" "$BACKEND" -V)
names=("$FLOOR alone" "one exec hop")
for entry in "${TIERS[@]}"; do
    read -r tier ns setting <<<"$entry"
    [[ $setting == - ]] && setting=()
    for i in "${!BINARIES[@]}"; do
        args+=(::: "@ns=$(ns_path "$ns")" ${setting[@]+"${setting[@]}"} "${COMMON[@]}" "$WORK/build$i/iptables" -V)
        names+=("$tier, build $i")
    done
done

echo "builds:"
for i in "${!BINARIES[@]}"; do echo "  $i: ${BINARIES[$i]} ($(stat -c %s "${BINARIES[$i]}") bytes)"; done
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $ITERATIONS interleaved iterations"
echo
echo "| command | wall µs | CPU µs | wall over the $FLOOR | CPU over the $FLOOR |"
echo "|---|---:|---:|---:|---:|"
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$WORK/abtime" -w 50 -n "$ITERATIONS" -- "${args[@]}" \
    | paste -d'\t' <(printf '%s\n' "${names[@]}") - \
    | awk -F'\t' 'NR == 1 { w0 = $2; c0 = $7 }
        { printf "| %s | %.1f | %.1f | %s | %s |\n", $1, $2, $7,
            NR == 1 ? "" : sprintf("%+.1f", $2 - w0), NR == 1 ? "" : sprintf("%+.1f", $7 - c0) }'

if [[ -n $FAULTS ]]; then
    echo
    echo "| tier | $(for i in "${!BINARIES[@]}"; do printf 'build %s page faults | ' "$i"; done)"
    echo "|---|$(for _ in "${BINARIES[@]}"; do printf -- '---:|'; done)"
    for entry in "${TIERS[@]}"; do
        read -r tier ns setting <<<"$entry"
        [[ $setting == - ]] && setting=()
        row="| $tier |"
        for i in "${!BINARIES[@]}"; do
            # env(1) sets its words in order, so the tier's setting goes
            # last; perf counts only the call it starts, not env.
            call=(ip netns exec "$NS_PREFIX-$ns" env -i "${COMMON[@]}" ${setting[@]+"${setting[@]}"})
            "${call[@]}" "$WORK/build$i/iptables" -V >/dev/null   # the warnings record fresh
            median=$(for _ in $(seq 9); do
                "${call[@]}" "$PERF" stat -x, -e page-faults "$WORK/build$i/iptables" -V 2>&1 >/dev/null | cut -d, -f1
            done | sort -n | sed -n 5p)
            row+=" $median |"
        done
        echo "$row"
    done
fi
