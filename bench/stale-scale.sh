#!/usr/bin/env bash
# What `stale` and `stale --remove` cost at the scale a large Kubernetes node
# runs, beside the backends' own save tools on the same state. Each row in a
# network namespace of its own (unshare -n), deleted with it.
#
#   bash bench/stale-scale.sh [WRAPPER...]
#
# Per row: both families hold the same ruleset (bench/gen-scale.awk: SHAPE
# kube or calico, about RULES rules a family in raw, mangle, filter and nat)
# in both backends; the host link says nft (HOST=legacy: legacy), so the
# other backend's copy is stale. DRIFT=K makes every K-th endpoint of the
# live copy differ (its family is then held, not removed). Printed, medians
# of RUNS (default 3) runs: `stale` (seconds, peak memory of the wrapper and
# the tools it runs, /usr/bin/time's maximum resident set), the four save
# tools one after the other (`ip{,6}tables-{legacy,nft}-save`), their ratio;
# then one `stale --remove` (seconds, peak memory, what it left) on the same
# state. STRACE=1 adds the system calls of one `stale` (strace -c -f: all,
# netlink sends and receives, sockets, mmap and munmap). Several wrappers
# (a baseline's binary first) are timed in the same iterations, interleaved.
#
# Knobs: ROWS (default "kube:10000 kube:30000 kube:100000 calico:100000
# kube:100000:drift"), RUNS, HOST, STRACE. A row is SHAPE:RULES[:drift].
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${IN_NAMESPACE:-}" != 1 ]; then
    for tool in ipset iptables-legacy-restore iptables-nft-restore /usr/bin/time; do
        command -v "$tool" >/dev/null || { echo "$tool is missing: apt-get install ipset iptables time strace" >&2; exit 1; }
    done
    wrappers=()
    for w in "${@:-target/x86_64-unknown-linux-musl/release/iptables-wrapper}"; do wrappers+=("$(realpath "$w")"); done
    echo "| row | rules a family | user chains a family | wrapper | \`stale\` s | save tools s | ratio | peak MB | \`--remove\` s | peak MB | left | syscalls (netlink send/recv, sockets, mmap+munmap) |"
    echo "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---|"
    for row in ${ROWS:-kube:10000 kube:30000 kube:100000 calico:100000 kube:100000:drift}; do
        env IN_NAMESPACE=1 ROW="$row" unshare -n bash "$0" "${wrappers[@]}"
    done
    exit
fi

IFS=: read -r shape rules drift <<<"$ROW"
drift_every=0
[ "${drift:-}" = drift ] && drift_every=500
host=${HOST:-nft}
stale_backend=$([ "$host" = nft ] && echo legacy || echo nft)
runs=${RUNS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/host/etc/alternatives"
ln -s "/usr/sbin/iptables-$host" "$work/host/etc/alternatives/iptables"
export IPTABLES_WRAPPER_HOST_ROOT="$work/host" XTABLES_LOCKFILE="$work/xtables.lock" IPTABLES_WRAPPER_RUN_DIR="$work/run"

for f in 4 6; do
    for i in $(seq 0 49); do
        ipset create "cali${f}s:set-$i" hash:net family "$([ $f = 4 ] && echo inet || echo inet6)"
        ipset add "cali${f}s:set-$i" "$([ $f = 4 ] && echo "10.$i.0.0/16" || echo "fd00:$i::/64")"
    done
    awk -v N="$rules" -v FAMILY=$f -v SHAPE="$shape" -f bench/gen-scale.awk >"$work/rules$f"
    awk -v N="$rules" -v FAMILY=$f -v SHAPE="$shape" -v DRIFT="$drift_every" -f bench/gen-scale.awk >"$work/live$f"
done
restore() { # restore BACKEND FAMILY FILE
    if [ "$2" = 4 ]; then "iptables-$1-restore" <"$3"; else "ip6tables-$1-restore" <"$3"; fi
}
load() {
    for f in 4 6; do restore "$host" $f "$work/live$f"; restore "$stale_backend" $f "$work/rules$f"; done
}
load
count=$(grep -c '^-A' "$work/rules4")
chains=$(grep -c '^:.* - ' "$work/rules4")

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
saves() {
    for tool in iptables-legacy-save ip6tables-legacy-save iptables-nft-save ip6tables-nft-save; do
        "$tool" >/dev/null 2>&1
    done
}
# timed OUT CMD...: /usr/bin/time's elapsed seconds and peak kilobytes into OUT.
timed() { local out=$1; shift; /usr/bin/time -f "%e %M" -o "$out" "$@"; }

declare -A stale_s peak verdict
save_s=()
for run in $(seq "$runs"); do
    start=$(date +%s.%N); saves; end=$(date +%s.%N)
    save_s+=("$(seconds "$start" "$end")")
    for w in "$@"; do
        timed "$work/time" "$w" stale >"$work/out" 2>&1 || true
        read -r s kb < <(tail -n 1 "$work/time")
        stale_s[$w]+="$s "
        peak[$w]+="$((kb / 1024)) "
        verdict[$w]=$(grep -cE '^  removing it opens nothing' "$work/out" || true)/$(grep -cE '^stale (legacy|nft) ' "$work/out" || true)
    done
done
save_median=$(printf '%s\n' "${save_s[@]}" | median)

for w in "$@"; do
    s=$(tr ' ' '\n' <<<"${stale_s[$w]}" | grep . | median)
    mb=$(tr ' ' '\n' <<<"${peak[$w]}" | grep . | median)
    calls="–"
    if [ "${STRACE:-}" = 1 ]; then
        strace -c -f -o "$work/strace" "$w" stale >/dev/null 2>&1 || true
        calls=$(awk '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ { c[$NF] = $4 }
            END { printf "%d (%d/%d, %d, %d)", c["total"], c["sendmsg"] + c["sendto"], c["recvmsg"] + c["recvfrom"], c["socket"], c["mmap"] + c["munmap"] }' "$work/strace")
    fi
    # The removal empties the stale copy: loaded again for the next wrapper.
    timed "$work/time" "$w" stale --remove --backup-dir "$work/backup-$RANDOM" >"$work/out" 2>&1 || true
    read -r rs rkb < <(tail -n 1 "$work/time")
    left=$(( $(iptables-$stale_backend-save | grep -c '^-A' || true) + $(ip6tables-$stale_backend-save | grep -c '^-A' || true) ))
    for f in 4 6; do restore "$stale_backend" $f "$work/rules$f"; done
    ratio=$(awk -v a="$s" -v b="$save_median" 'BEGIN { printf "%.2f", a / b }')
    echo "| $ROW, host $host (opens nothing/stale tables: ${verdict[$w]}) | $count | $chains | $(basename "$(dirname "$w")") | $s | $save_median | $ratio | $mb | $rs | $((rkb / 1024)) | $left rules | $calls |"
done
