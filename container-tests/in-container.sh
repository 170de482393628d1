#!/bin/sh
# The test helper carried by the test image (Dockerfile.test installs it as
# /usr/local/bin/wrapper-test). The driver on the machine (scenario.sh) plays
# the host: it mounts and flips the host's alternatives link and calls the
# steps below with `docker exec`. The container's own network namespace plays
# the host's kernel state.
#
# It is plain sh (plus `local`) because the distroless image has only
# busybox: it runs under bash where there is one (Debian's dash has no
# pipefail) and under busybox sh otherwise.
if [ -z "${BASH_VERSION:-}" ] && command -v bash >/dev/null 2>&1; then
  exec bash "$0" "$@"
fi
set -eu
set -o pipefail

# Output is checked from files, not with `... | grep -q` (grep -q may exit
# before the writer is done, and pipefail then reports SIGPIPE as a failure).
# Scratch files live in /dev/shm: Docker mounts a tmpfs there, so they work
# with a read-only root file system too.
WORK="$(mktemp -d /dev/shm/wrapper-test.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
export TMPDIR="$WORK"

ok() { echo "  ok: $*"; }
fail() { echo "  FAIL: $*" >&2; exit 1; }

other() { if [ "$1" = nft ]; then echo legacy; else echo nft; fi; }

# What `iptables -V` prints for each mode: "iptables v1.8.9 (nf_tables)".
version_tag() { if [ "$1" = nft ]; then echo '(nf_tables)'; else echo '(legacy)'; fi; }

# backend MODE COMMAND ARGS...: run iptables COMMAND of MODE directly, without
# the wrapper. The multi-call binaries take the applet name as first argument,
# which works the same in every image (distroless has no iptables-legacy-save).
backend() {
  local backend_mode="$1"; shift
  "xtables-$backend_mode-multi" "$@"
}

# check_version MODE NAME: `NAME -V` through the wrapper reports MODE.
check_version() {
  local out
  out="$("$2" -V)" || fail "$2 -V exited $?"
  case "$out" in
    *"$(version_tag "$1")"*) ok "$2 -V: $out" ;;
    *) fail "$2 -V printed '$out', expected $(version_tag "$1")" ;;
  esac
}

# check_rule_lands MODE NAME SAVE ADDR: a rule added through the wrapper as
# NAME appears in MODE's ruleset and not in the other one; then it is removed
# again (directly, so that it does not linger in the rule counts).
check_rule_lands() {
  local mode="$1" name="$2" save="$3" addr="$4" rule
  rule="-A INPUT -s $addr -j ACCEPT"
  "$name" -w -A INPUT -s "$addr" -j ACCEPT || fail "$name -A exited $?"
  backend "$mode" "$save" >"$WORK/mine"
  backend "$(other "$mode")" "$save" >"$WORK/other"
  grep -qxF -- "$rule" "$WORK/mine" || fail "rule added by '$name' is not in $mode's ruleset"
  if grep -qxF -- "$rule" "$WORK/other"; then
    fail "rule added by '$name' landed in $(other "$mode")'s ruleset"
  fi
  backend "$mode" "$name" -w -D INPUT -s "$addr" -j ACCEPT
  ok "$name rule landed in $mode"
}

# expect MODE: every way of looking says the wrapper runs MODE now.
cmd_expect() {
  local mode="$1" detected
  check_version "$mode" iptables
  check_version "$mode" ip6tables
  check_rule_lands "$mode" iptables iptables-save 203.0.113.99/32
  check_rule_lands "$mode" ip6tables ip6tables-save 2001:db8::99/128
  iptables-wrapper detect >"$WORK/detect" || fail "iptables-wrapper detect exited $?"
  detected="$(sed -n 1p "$WORK/detect")"
  [ "$detected" = "$mode" ] || fail "iptables-wrapper detect said '$detected', expected $mode"
  ok "iptables-wrapper detect: $detected"
}

# hint MODE: kubelet's hint chain, as the host's kubelet creates it.
cmd_hint() {
  backend "$1" iptables -w -t mangle -N KUBE-IPTABLES-HINT
  backend "$1" ip6tables -w -t mangle -N KUBE-IPTABLES-HINT
  ok "KUBE-IPTABLES-HINT created in $1"
}

# rules MODE N: N filter rules in MODE, as the host's components leave them.
cmd_rules() {
  local i=1
  while [ "$i" -le "$2" ]; do
    backend "$1" iptables -w -A FORWARD -s "198.51.100.$i/32" -j ACCEPT
    i=$((i + 1))
  done
  ok "$2 rules added to $1"
}

# disagrees: with the host link saying nft while legacy holds more rules,
# the decision's report names the disagreeing evidence, and a dispatched call
# warns on stderr that legacy tables remain (it lists them without a kernel
# query) while its stdout stays the backend's alone.
cmd_disagrees() {
  iptables-wrapper detect --json >"$WORK/json" || fail "detect --json exited $?"
  grep -o '"warnings":\[[^]]*\]' "$WORK/json" >"$WORK/warnings" || true
  grep -q legacy "$WORK/warnings" \
    || fail "detect --json has no warning about the legacy evidence: $(cat "$WORK/json")"
  ok "detect --json warns: $(grep -o '"warnings":\["[^"]*' "$WORK/json" | cut -c14-)"
  iptables -V >"$WORK/out" 2>"$WORK/err" || fail "iptables -V exited $?"
  grep -q 'warn.*legacy' "$WORK/err" || fail "a dispatched call did not warn: '$(cat "$WORK/err")'"
  grep -q '(nf_tables)' "$WORK/out" || fail "stdout is not the backend's: '$(cat "$WORK/out")'"
  ok "dispatched call warns: $(cat "$WORK/err")"
}

# mode-env VALUE EXPECTED: IPTABLES_MODE=VALUE selects EXPECTED.
cmd_mode_env() {
  local out
  out="$(IPTABLES_MODE="$1" iptables -V)" || fail "IPTABLES_MODE=$1 iptables -V exited $?"
  case "$out" in
    *"$(version_tag "$2")"*) ok "IPTABLES_MODE=$1: $out" ;;
    *) fail "IPTABLES_MODE=$1 gave '$out', expected $2" ;;
  esac
}

# legacy_state: what would show that a legacy command ran: its tables and
# its lock file.
legacy_state() {
  cat /proc/net/ip_tables_names /proc/net/ip6_tables_names 2>/dev/null || true
  ls -l /run/xtables.lock 2>/dev/null || true
}

# bogus: IPTABLES_MODE=bogus fails with exit 2, names the variable and the
# value, and runs no backend at all.
cmd_bogus() {
  local before rc=0 mode
  before="$(legacy_state)"
  IPTABLES_MODE=bogus iptables -w -A INPUT -s 203.0.113.98/32 -j ACCEPT \
    >"$WORK/out" 2>"$WORK/err" || rc=$?
  [ "$rc" -eq 2 ] || fail "IPTABLES_MODE=bogus: exit $rc, expected 2"
  [ ! -s "$WORK/out" ] || fail "IPTABLES_MODE=bogus printed on stdout: $(cat "$WORK/out")"
  grep -q IPTABLES_MODE "$WORK/err" && grep -q bogus "$WORK/err" \
    || fail "the error does not name IPTABLES_MODE and its value: $(cat "$WORK/err")"
  for mode in nft legacy; do
    backend "$mode" iptables-save >"$WORK/save"
    if grep -qF 203.0.113.98 "$WORK/save"; then
      fail "IPTABLES_MODE=bogus still added the rule in $mode"
    fi
  done
  [ "$(legacy_state)" = "$before" ] || fail "IPTABLES_MODE=bogus touched legacy iptables"
  rc=0
  IPTABLES_MODE=bogus iptables -V >"$WORK/out" 2>/dev/null || rc=$?
  [ "$rc" -eq 2 ] && [ ! -s "$WORK/out" ] || fail "IPTABLES_MODE=bogus iptables -V: exit $rc, stdout '$(cat "$WORK/out")'"
  ok "IPTABLES_MODE=bogus: exit 2, ran nothing: $(head -n1 "$WORK/err")"
}

# ruleset FAMILY(4|6) MODE: a ruleset for restore, with a user chain, a jump
# and a match, in filter and nat. Addresses and chain name differ per MODE, so
# that rules restored in one mode can be told from those of the other.
ruleset() {
  local n chain a b
  if [ "$2" = nft ]; then n=1; chain=WRAPPER-TEST-NFT; else n=2; chain=WRAPPER-TEST-LEGACY; fi
  if [ "$1" = 4 ]; then a="192.0.2.${n}1/32" b="192.0.2.${n}2/32"; else a="2001:db8::${n}1/128" b="2001:db8::${n}2/128"; fi
  cat <<EOF
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:$chain - [0:0]
-A INPUT -j $chain
-A $chain -s $a -p tcp -m tcp --dport 8080 -j ACCEPT
-A $chain -s $b -j DROP
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A POSTROUTING -s $a -j MASQUERADE
COMMIT
EOF
}

# The comparable part of a save: no comments, no counters.
normalise() { grep -v '^#' | sed -E 's/\[[0-9]+:[0-9]+\]/[0:0]/'; }

# restore MODE: X-restore fed on stdin through the wrapper (as the first
# wrapper call of the container when it is the first step), the rules land in
# MODE, X-save through the wrapper prints them, and restoring that save gives
# the same save again.
cmd_restore() {
  local mode="$1" fam cmd
  for fam in 4 6; do
    if [ "$fam" = 4 ]; then cmd=iptables; else cmd=ip6tables; fi
    ruleset "$fam" "$mode" | "$cmd-restore" || fail "$cmd-restore exited $?"
    "$cmd-save" >"$WORK/save1" || fail "$cmd-save exited $?"
    backend "$mode" "$cmd-save" >"$WORK/mine"
    backend "$(other "$mode")" "$cmd-save" >"$WORK/other"
    ruleset "$fam" "$mode" | grep '^-A' | while IFS= read -r rule; do
      grep -qxF -- "$rule" "$WORK/save1" || fail "$cmd-save lacks '$rule'"
      grep -qxF -- "$rule" "$WORK/mine" || fail "'$rule' is not in $mode"
      if grep -qxF -- "$rule" "$WORK/other"; then fail "'$rule' landed in $(other "$mode")"; fi
    done
    "$cmd-restore" <"$WORK/save1" || fail "$cmd-restore of the save exited $?"
    "$cmd-save" | normalise >"$WORK/save2"
    # Two files: busybox diff puts stdin in a temporary file under /tmp,
    # which a read-only root file system does not have.
    normalise <"$WORK/save1" >"$WORK/save1.n"
    diff "$WORK/save1.n" "$WORK/save2" || fail "$cmd-save did not round-trip"
    ok "$cmd-restore / $cmd-save round trip in $mode ($(grep -c '^-A' "$WORK/save1") rules)"
  done
}

# concurrent N: N wrapper calls at once (iptables -V and ip6tables -V
# alternately) with debug logging while the driver flips the host link; each
# must succeed, and the mode its decision logged must be the backend that
# answered. A round whose calls all saw the same mode did not overlap a flip
# and proves little, so rounds are repeated (at most 5) until one saw both.
cmd_concurrent() {
  local n="$1" round=1
  while ! concurrent_round "$n" "$round"; do
    [ "$round" -lt 5 ] || fail "in 5 rounds of $n calls no round saw the host link flip"
    round=$((round + 1))
  done
}

# concurrent_round N ROUND: one round; fails the script on a bad call, returns
# 1 when all calls used the same mode.
concurrent_round() {
  local n="$1" i=0 name rc logged nft=0 legacy=0
  rm -f "$WORK"/call.*
  while [ "$i" -lt "$n" ]; do
    name=iptables
    [ $((i % 2)) -eq 0 ] || name=ip6tables
    (
      rc=0
      IPTABLES_WRAPPER_LOG=debug "$name" -V >"$WORK/call.$i.out" 2>"$WORK/call.$i.err" || rc=$?
      echo "$rc" >"$WORK/call.$i.rc"
    ) &
    i=$((i + 1))
  done
  wait
  i=0
  while [ "$i" -lt "$n" ]; do
    rc="$(cat "$WORK/call.$i.rc")"
    [ "$rc" -eq 0 ] || fail "call $i exited $rc: $(cat "$WORK/call.$i.err")"
    logged="$(grep -oE 'mode=(nft|legacy)' "$WORK/call.$i.err" | sort -u)"
    case "$logged" in
      mode=nft|mode=legacy) logged="${logged#mode=}" ;;
      *) fail "call $i: no single mode= in its debug log: $(cat "$WORK/call.$i.err")" ;;
    esac
    grep -qF "$(version_tag "$logged")" "$WORK/call.$i.out" \
      || fail "call $i logged mode=$logged but the backend printed '$(cat "$WORK/call.$i.out")'"
    if [ "$logged" = nft ]; then nft=$((nft + 1)); else legacy=$((legacy + 1)); fi
    i=$((i + 1))
  done
  ok "round $2: $n concurrent calls succeeded, each ran the mode it logged ($nft nft, $legacy legacy)"
  [ "$nft" -gt 0 ] && [ "$legacy" -gt 0 ]
}

case "${1:-}" in
  expect) cmd_expect "$2" ;;
  hint) cmd_hint "$2" ;;
  rules) cmd_rules "$2" "$3" ;;
  disagrees) cmd_disagrees ;;
  mode-env) cmd_mode_env "$2" "$3" ;;
  bogus) cmd_bogus ;;
  restore) cmd_restore "$2" ;;
  concurrent) cmd_concurrent "$2" ;;
  *) echo "usage: wrapper-test expect|hint|rules|disagrees|mode-env|bogus|restore|concurrent ..." >&2; exit 2 ;;
esac
