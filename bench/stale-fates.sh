#!/usr/bin/env bash
# What the fates of packets add to `stale`: the judgement (`stale`, which
# reads, judges by twins and tries at most 256 packets per family) over a
# large state, each WRAPPER given timed on the same state, in a network
# namespace of its own.
#
#   bash bench/stale-fates.sh WRAPPER...
#
# The state, both families: CHAINS (default 10,000) user chains, each
# reached from INPUT by its address and port, holding two rules (an
# ACCEPT of one source, a DROP): 3 x CHAINS rules a family. Stale legacy
# and live nft hold the same, but every DIFFER-th (default 100) chain,
# whose live DROP is an ACCEPT (so the fates find witnesses, and try all
# the packets they may). Prints per wrapper the seconds `stale` took and
# what it said of the filter tables.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 WRAPPER..." >&2; exit 2; }
chains=${CHAINS:-10000}
differ=${DIFFER:-100}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/host/etc/alternatives"

ruleset() { # ruleset FAMILY LIVE: an iptables-restore input
    awk -v n="$chains" -v differ="$differ" -v family="$1" -v live="$2" 'BEGIN {
        print "*filter"
        for (c = 0; c < n; c++) printf ":CH-%05d - [0:0]\n", c
        for (c = 0; c < n; c++) {
            if (family == 4) d = sprintf("10.%d.%d.1/32", c / 250 % 250, c % 250)
            else d = sprintf("fd00:%x::1/128", c)
            printf "-A INPUT -d %s -p tcp -m tcp --dport %d -j CH-%05d\n", d, 1000 + c % 50000, c
        }
        for (c = 0; c < n; c++) {
            if (family == 4) s = sprintf("10.250.%d.%d/32", c / 250 % 250, c % 250 + 1)
            else s = sprintf("fd01:%x::1/128", c)
            printf "-A CH-%05d -s %s -j ACCEPT\n", c, s
            printf "-A CH-%05d -j %s\n", c, (live && c % differ == 0) ? "ACCEPT" : "DROP"
        }
        print "COMMIT" }'
}
for family in 4 6; do
    ruleset "$family" 0 >"$work/stale$family"
    ruleset "$family" 1 >"$work/live$family"
done

for wrapper in "$@"; do
    unshare -n bash -c '
        set -e
        export XTABLES_LOCKFILE="$0/lock" IPTABLES_WRAPPER_HOST_ROOT="$0/host" IPTABLES_WRAPPER_RUN_DIR="$0/run"
        ln -sfn /usr/sbin/iptables-nft "$0/host/etc/alternatives/iptables"
        ln -sfn /usr/sbin/ip6tables-nft "$0/host/etc/alternatives/ip6tables"
        iptables-legacy-restore <"$0/stale4"
        ip6tables-legacy-restore <"$0/stale6"
        iptables-nft-restore <"$0/live4"
        ip6tables-nft-restore <"$0/live6"
        start=$(date +%s.%N)
        "$1" stale >"$0/out" || true
        end=$(date +%s.%N)
        echo "$1: $(grep -c "^-A" "$0/stale4") rules a family: stale judged in $(awk -v a="$start" -v b="$end" "BEGIN { printf \"%.2f\", b - a }") s"
        grep -o "removing it [a-z ]*\(: [a-z]* [a-z]* → [^,]*\)\?" "$0/out" | sort | uniq -c
    ' "$work" "$(realpath "$wrapper")"
done
