#!/usr/bin/env bash
# The steps of the Calico-like upgrade (scenario 15), run inside a container
# of the ipset image (bookworm with iptables, ipset, iproute2 and ping) by
# scenario.sh, which mounts this file as /usr/local/bin/calico-test and
# plays the host (its alternatives link). The container's network namespace
# is the node; two network namespaces in it are pods, each behind a veth
# pair, as Calico wires them.
#
#   calico-test node            the node's ipsets and its two pods
#   calico-test rules MODE      Calico's rules written into MODE's backend
#   calico-test packets ADDR    what the rules do to the pods' packets, ADDR
#                               the allowed source it pings from
#   calico-test remove ADDR     stale --remove takes legacy's rules, leaves
#                               every set and nft as they were; the packets
#                               behave as before (from ADDR, new to the
#                               SET target); the backup restores
#
# The sets: cali40all-ipam-pools and cali40masq-ipam-pools (the pod pool),
# cali40blocked (10.244.1.2, a policy's denied source), cali40seen (what
# the SET target adds to), cali60all-ipam-pools (IPv6). Made after a set
# that is gone, so their indices start at 1: the proof's scratch namespace
# must give them the same ones.
set -euo pipefail

STATE=/dev/shm/calico-test
mkdir -p "$STATE"
WORK="$(mktemp -d /dev/shm/calico-test.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

ok() { echo "  ok: $*"; }
fail() { echo "  FAIL: $*" >&2; exit 1; }

# backend MODE COMMAND ARGS...: iptables COMMAND of MODE, without the wrapper.
backend() {
  local mode="$1"; shift
  "xtables-$mode-multi" "$@"
}

FILTER_V4='*filter
:cali-INPUT - [0:0]
:cali-FORWARD - [0:0]
-A INPUT -m comment --comment "cali:Cz_u1IQiXIMmKD4c" -j cali-INPUT
-A FORWARD -m comment --comment "cali:wUHhoiAYhphO9Mso" -j cali-FORWARD
-A cali-INPUT -p icmp -m set --match-set cali40blocked src -j DROP
-A cali-INPUT -p icmp -j SET --add-set cali40seen src --exist
-A cali-INPUT -m set --match-set cali40all-ipam-pools src -j ACCEPT
-A cali-FORWARD -m set --match-set cali40blocked src -m set --match-set cali40all-ipam-pools dst -j DROP
-A cali-FORWARD -m set --match-set cali40all-ipam-pools src -j ACCEPT
COMMIT
*nat
:cali-POSTROUTING - [0:0]
:cali-nat-outgoing - [0:0]
-A POSTROUTING -m comment --comment "cali:O3lYWMrLQYEMJtB5" -j cali-POSTROUTING
-A cali-POSTROUTING -j cali-nat-outgoing
-A cali-nat-outgoing -m set --match-set cali40masq-ipam-pools src -m set ! --match-set cali40all-ipam-pools dst -j MASQUERADE
COMMIT
'
FILTER_V6='*filter
:cali-INPUT - [0:0]
-A INPUT -j cali-INPUT
-A cali-INPUT -m set --match-set cali60all-ipam-pools src -j ACCEPT
COMMIT
'

# saves MODE: both families' saves of MODE, without comments and counters.
saves() {
  { backend "$1" iptables-save; backend "$1" ip6tables-save; } | grep -v '^#' | sed -E 's/\[[0-9]+:[0-9]+\]/[0:0]/'
}

# pod NAME HOST-ADDR POD-ADDR...: a pod network namespace behind a veth
# pair, its first address's /24 routed through HOST-ADDR.
pod() {
  local name="$1" host="$2" addr; shift 2
  ip netns add "$name"
  ip link add "cali-$name" type veth peer name eth0 netns "$name"
  ip addr add "$host/24" dev "cali-$name"
  ip link set "cali-$name" up
  for addr in "$@"; do ip -n "$name" addr add "$addr/24" dev eth0; done
  ip -n "$name" link set eth0 up
  ip -n "$name" link set lo up
  ip -n "$name" route add default via "$host"
}

cmd_node() {
  ipset create gone hash:ip
  ipset create cali40all-ipam-pools hash:net
  ipset add cali40all-ipam-pools 10.244.0.0/16
  ipset create cali40masq-ipam-pools hash:net
  ipset add cali40masq-ipam-pools 10.244.0.0/16
  ipset create cali40blocked hash:ip
  ipset add cali40blocked 10.244.1.2
  ipset create cali40seen hash:ip
  ipset create cali60all-ipam-pools hash:net family inet6
  ipset add cali60all-ipam-pools fd00:10:244::/48
  ipset destroy gone
  # /proc/sys is read-only in a container without --privileged: scenario.sh
  # turns forwarding on with docker run --sysctl.
  [ "$(cat /proc/sys/net/ipv4/ip_forward)" = 1 ] || fail "forwarding is off (docker run --sysctl net.ipv4.ip_forward=1)"
  pod a 10.244.1.1 10.244.1.2 10.244.1.3 10.244.1.4
  pod b 10.244.2.1 10.244.2.2
  ok "5 ipsets (indices from 1), pods a (10.244.1.2-4) and b (10.244.2.2), forwarding on"
}

cmd_rules() {
  printf '%s' "$FILTER_V4" | backend "$1" iptables-restore -w --noflush || fail "$1 iptables-restore exited $?"
  printf '%s' "$FILTER_V6" | backend "$1" ip6tables-restore -w --noflush || fail "$1 ip6tables-restore exited $?"
  ok "Calico's cali- chains, -m set matches and SET target in $1 ($(saves "$1" | grep -c -- '--match-set\|--add-set') rules naming sets)"
}

# reaches FROM TO: whether pod a, from source FROM, gets an answer from TO.
reaches() { ip netns exec a ping -c 1 -W 2 -I "$1" "$2" >/dev/null 2>&1; }

cmd_packets() {
  local allowed="$1"
  if reaches 10.244.1.2 10.244.1.1; then fail "the blocked source 10.244.1.2 reaches the node"; fi
  if reaches 10.244.1.2 10.244.2.2; then fail "the blocked source 10.244.1.2 reaches pod b"; fi
  reaches "$allowed" 10.244.1.1 || fail "$allowed does not reach the node"
  reaches "$allowed" 10.244.2.2 || fail "$allowed does not reach pod b"
  ipset test cali40seen "$allowed" 2>/dev/null || fail "the SET target did not add $allowed to cali40seen"
  ok "10.244.1.2 stopped (node and pod b), $allowed passes both, and the SET target added it to cali40seen"
}

cmd_remove() {
  local rc=0 dir
  saves legacy >"$STATE/legacy-before"
  saves nft >"$WORK/nft-before"
  ipset save >"$WORK/sets-before"
  iptables-wrapper stale --remove >"$WORK/remove" 2>"$WORK/err" || rc=$?
  [ "$rc" -eq 0 ] || fail "stale --remove exited $rc: $(cat "$WORK/remove" "$WORK/err")"
  dir="$(sed -n 's/^backup: //p' "$WORK/remove")"
  ok "stale --remove (exit 0): $(grep -c '^emptied:' "$WORK/remove") tables emptied, backup in $dir"
  ipset save >"$WORK/sets-after"
  cmp "$WORK/sets-before" "$WORK/sets-after" || fail "the sets changed: $(diff "$WORK/sets-before" "$WORK/sets-after")"
  ok "every set as it was ($(grep -c '^create' "$WORK/sets-after") sets, $(grep -c '^add' "$WORK/sets-after") members)"
  if saves legacy | grep -q -e '^-A' -e 'cali-'; then fail "legacy still holds Calico's rules: $(saves legacy)"; fi
  ok "legacy holds nothing"
  saves nft >"$WORK/nft-after"
  cmp "$WORK/nft-before" "$WORK/nft-after" || fail "nft changed: $(diff "$WORK/nft-before" "$WORK/nft-after")"
  ok "nft is what it was ($(grep -c '^-A' "$WORK/nft-after") rules)"
  cmd_packets "$1"
  backend legacy iptables-restore -w <"$dir/iptables-legacy.rules" || fail "restoring $dir/iptables-legacy.rules exited $?"
  backend legacy ip6tables-restore -w <"$dir/ip6tables-legacy.rules" || fail "restoring $dir/ip6tables-legacy.rules exited $?"
  saves legacy >"$WORK/legacy-restored"
  cmp "$STATE/legacy-before" "$WORK/legacy-restored" \
    || fail "the backup did not restore legacy: $(diff "$STATE/legacy-before" "$WORK/legacy-restored")"
  ok "restoring the backup brought legacy back exactly ($(grep -c '^-A' "$WORK/legacy-restored") rules)"
}

case "${1:-}" in
  node) cmd_node ;;
  rules) cmd_rules "$2" ;;
  packets) cmd_packets "$2" ;;
  remove) cmd_remove "$2" ;;
  *) echo "usage: calico-test node|rules MODE|packets ADDR|remove ADDR" >&2; exit 2 ;;
esac
