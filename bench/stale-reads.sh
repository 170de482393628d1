#!/usr/bin/env bash
# How often one `stale --remove` reads the stale tables. For each
# direction, a stale family (filter and nat) beside its twins in the host's
# backend, removed under strace in a network namespace of its own. Prints
# the reads in the wrapper's own process (legacy: GET_ENTRIES per table;
# nf_tables: the netlink requests, both families), and the save and restore
# tools it ran.
#
#   bash bench/stale-reads.sh [WRAPPER]
set -euo pipefail
cd "$(dirname "$0")/.."
wrapper=$(realpath "${1:-target/x86_64-unknown-linux-musl/release/iptables-wrapper}")
if [ "${IN_NAMESPACE:-}" != 1 ]; then
    for host in nft legacy; do
        env IN_NAMESPACE=1 HOST_BACKEND=$host unshare -n bash "$0" "$wrapper"
    done
    exit
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for backend in legacy nft; do
    iptables-$backend -N X
    iptables-$backend -A INPUT -j X
    iptables-$backend -A X -p udp --dport 9 -j DROP
    iptables-$backend -t nat -A OUTPUT -p tcp --dport 1 -j RETURN
done
IPTABLES_MODE=$HOST_BACKEND strace -f -qq -e trace=getsockopt,sendmsg,sendto,execve -o "$work/trace" \
    "$wrapper" stale --remove --backup-dir "$work/backup" >"$work/out" 2>&1 || true
echo "host $HOST_BACKEND: $(tail -n 1 "$work/out")"
pid=$(grep -m 1 "execve(\"$wrapper\"" "$work/trace" | cut -d ' ' -f 1)
echo "  reads in the wrapper's own process:"
grep "^$pid " "$work/trace" | grep -oE 'IPT_SO_GET_ENTRIES, "[a-z]*|NFT_MSG_GET[A-Z]*' |
    sed 's/IPT_SO_GET_ENTRIES, "/GET_ENTRIES /; s/^/    /' | sort | uniq -c
echo "  save and restore tools run:"
grep 'execve(' "$work/trace" | grep -v ENOENT | grep -o 'execve("[^"]*"' | grep -v "\"$wrapper\"" |
    sed 's/execve("//; s/"$//; s/^/    /' | sort | uniq -c
