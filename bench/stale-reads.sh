#!/usr/bin/env bash
# How often one `stale --remove` reads the stale tables: a stale legacy
# family (filter and nat) beside its nft twins, removed under strace in a
# network namespace of its own. Prints, per table, the GET_ENTRIES reads in
# the wrapper's own process, and the save and restore tools it ran.
#
#   bash bench/stale-reads.sh [WRAPPER]
set -euo pipefail
cd "$(dirname "$0")/.."
wrapper=$(realpath "${1:-target/x86_64-unknown-linux-musl/release/iptables-wrapper}")
if [ "${IN_NAMESPACE:-}" != 1 ]; then
    exec env IN_NAMESPACE=1 unshare -n bash "$0" "$wrapper"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for backend in legacy nft; do
    iptables-$backend -N X
    iptables-$backend -A INPUT -j X
    iptables-$backend -A X -p udp --dport 9 -j DROP
    iptables-$backend -t nat -A OUTPUT -p tcp --dport 1 -j RETURN
done
IPTABLES_MODE=nft strace -f -qq -e trace=getsockopt,execve -o "$work/trace" \
    "$wrapper" stale --remove --backup-dir "$work/backup" >"$work/out" 2>&1 || true
tail -n 1 "$work/out"
pid=$(grep -m 1 "execve(\"$wrapper\"" "$work/trace" | cut -d ' ' -f 1)
echo "GET_ENTRIES in the wrapper's own process, per table:"
grep "^$pid " "$work/trace" | grep -o 'IPT_SO_GET_ENTRIES, "[a-z]*' | sed 's/.*"/  /' | sort | uniq -c
echo "save and restore tools run:"
grep 'execve(' "$work/trace" | grep -v ENOENT | grep -o 'execve("[^"]*"' | grep -v "\"$wrapper\"" |
    sed 's/execve("//; s/"$//' | sort | uniq -c
