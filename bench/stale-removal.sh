#!/usr/bin/env bash
# What `stale --remove` costs, and what a writer that bypasses the xtables
# lock can still lose. Each measurement in a network namespace of its own.
#
#   bash bench/stale-removal.sh [WRAPPER]
#
# 1. nft direction: a legacy host whose nft holds RULES (default 55,000)
#    iptables-nft rules in 50 user chains, removed (backup, proof in a scratch
#    namespace, one transaction); prints the seconds it took.
# 2. legacy direction: the same number of stale legacy rules.
# 3. A legacy writer that bypasses the lock (its own XTABLES_LOCKFILE) adding
#    a rule every 50 ms beside ITERATIONS (default 20) removals of a stale DROP whose twin
#    nft holds: how many of the rules it was told were added are in neither a
#    backup nor the kernel afterwards, and how many removals emptied legacy.
# 4. `stale` (the judgement alone) over one chain of BLOCKING (default 2,000)
#    stale legacy DROP rules, each with its twin in nft, in order: the
#    xtables lock is held that long during a removal.
set -euo pipefail
cd "$(dirname "$0")/.."
wrapper=${1:-target/x86_64-unknown-linux-musl/release/iptables-wrapper}
rules=${RULES:-55000}
iterations=${ITERATIONS:-20}
blocking=${BLOCKING:-2000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/host/etc/alternatives"

ruleset() { # ruleset N: an iptables-restore input of N rules in 50 chains
    awk -v n="$1" 'BEGIN {
        print "*filter"; for (c = 0; c < 50; c++) printf ":KUBE-SVC-%02d - [0:0]\n", c
        for (c = 0; c < 50; c++) printf "-A INPUT -j KUBE-SVC-%02d\n", c
        for (i = 0; i < n - 50; i++) printf "-A KUBE-SVC-%02d -s 10.%d.%d.%d/32 -m comment --comment \"svc %d\" -j ACCEPT\n", i % 50, i / 65025 % 250, i / 255 % 255, i % 255, i
        print "COMMIT" }'
}
ruleset "$rules" >"$work/rules"

removal() { # removal BACKEND-HOST STALE-BACKEND
    unshare -n bash -c '
        set -e
        export XTABLES_LOCKFILE="$0/lock" IPTABLES_WRAPPER_HOST_ROOT="$0/host" IPTABLES_WRAPPER_RUN_DIR="$0/run-$1"
        ln -sfn "/usr/sbin/iptables-$1" "$0/host/etc/alternatives/iptables"
        iptables-$1 -A INPUT -j ACCEPT
        iptables-$2-restore < "$0/rules"
        start=$(date +%s.%N)
        "$3" stale --remove >"$0/out-$1" || { cat "$0/out-$1"; exit 1; }
        end=$(date +%s.%N)
        left=$(iptables-$2-save | grep -c "^-A" || true)
        echo "$4 stale $2 rules, host $1: removed in $(awk -v a="$start" -v b="$end" "BEGIN { printf \"%.2f\", b - a }") s, $left rules left"
    ' "$work" "$1" "$2" "$(realpath "$wrapper")" "$rules"
}
removal legacy nft
removal nft legacy

unshare -n bash -c '
    set -e
    export XTABLES_LOCKFILE="$0/lock" IPTABLES_WRAPPER_HOST_ROOT="$0/host" IPTABLES_WRAPPER_RUN_DIR="$0/run-bypass"
    ln -sfn /usr/sbin/iptables-nft "$0/host/etc/alternatives/iptables"
    iptables-nft -A INPUT -s 10.9.0.1 -j DROP
    iptables-legacy -A INPUT -s 10.9.0.1 -j DROP
    : >"$0/added"
    ( i=0; while [ ! -e "$0/stop" ]; do
        rule="10.40.$((i / 250 % 250)).$((i % 250 + 1))"
        XTABLES_LOCKFILE="$0/other-lock" iptables-legacy -w -A INPUT -s "$rule" -j ACCEPT 2>/dev/null && echo "$rule/32" >>"$0/added"
        i=$((i + 1))
        sleep 0.05
      done ) &
    emptied=0
    for r in $(seq "$2"); do
        "$1" stale --remove >"$0/out-bypass" || true
        grep -q "^emptied: legacy" "$0/out-bypass" && emptied=$((emptied + 1))
        iptables-legacy -C INPUT -s 10.9.0.1 -j DROP 2>/dev/null || iptables-legacy -I INPUT -s 10.9.0.1 -j DROP
    done
    touch "$0/stop"; wait
    cat "$0"/run-bypass/stale-backup-*/* 2>/dev/null >"$0/backups" || true
    iptables-legacy-save >"$0/kernel"
    lost=0; total=0
    while read -r rule; do
        total=$((total + 1))
        grep -qF -- "-s $rule " "$0/backups" "$0/kernel" || lost=$((lost + 1))
    done <"$0/added"
    echo "a writer bypassing the xtables lock beside $2 removals ($emptied emptied legacy): $lost of $total rules lost"
' "$work" "$(realpath "$wrapper")" "$iterations"

unshare -n bash -c '
    set -e
    export IPTABLES_WRAPPER_HOST_ROOT="$0/host" IPTABLES_WRAPPER_RUN_DIR="$0/run-blocking"
    ln -sfn /usr/sbin/iptables-nft "$0/host/etc/alternatives/iptables"
    awk -v n="$2" '"'"'BEGIN { print "*filter"; for (i = 0; i < n; i++) printf "-A INPUT -s 10.%d.%d.%d/32 -j DROP\n", i / 65025 % 250, i / 255 % 255, i % 255 + 1; print "COMMIT" }'"'"' >"$0/blocking"
    iptables-legacy-restore <"$0/blocking"
    iptables-nft-restore <"$0/blocking"
    start=$(date +%s.%N)
    "$1" stale >"$0/out-blocking" || true
    end=$(date +%s.%N)
    grep -q "removing it opens nothing" "$0/out-blocking" || { cat "$0/out-blocking"; exit 1; }
    echo "$2 stale legacy DROP rules in one chain, each with its twin: judged in $(awk -v a="$start" -v b="$end" "BEGIN { printf \"%.2f\", b - a }") s"
' "$work" "$(realpath "$wrapper")" "$blocking"
