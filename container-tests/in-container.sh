#!/bin/sh
# The test helper carried by the test image (Dockerfile.test installs it as
# /usr/local/bin/wrapper-test). The driver on the machine (scenario.sh) plays
# the host: it mounts and flips the host's alternatives link and calls the
# steps below with `docker exec`. The container's own network namespace plays
# the host's kernel state.
#
# It is POSIX sh because the distroless image has only busybox: it runs under
# bash where there is one (Debian's dash has no pipefail) and under busybox sh
# otherwise.
if [ -z "${BASH_VERSION:-}" ] && command -v bash >/dev/null 2>&1; then
  exec bash "$0" "$@"
fi
set -eu
set -o pipefail

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
  mode="$1"; shift
  "xtables-$mode-multi" "$@"
}

# check_mode MODE NAME: `NAME -V` through the wrapper reports the MODE backend.
check_version() {
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
  mode="$1" name="$2" save="$3" addr="$4"
  rule="-A INPUT -s $addr -j ACCEPT"
  "$name" -w -A INPUT -s "$addr" -j ACCEPT || fail "$name -A exited $?"
  backend "$mode" "$save" | grep -qxF -- "$rule" \
    || fail "rule added by '$name' is not in $mode's ruleset"
  if backend "$(other "$mode")" "$save" | grep -qxF -- "$rule"; then
    fail "rule added by '$name' landed in $(other "$mode")'s ruleset"
  fi
  backend "$mode" "$name" -w -D INPUT -s "$addr" -j ACCEPT
  ok "$name rule landed in $mode"
}

# expect MODE: every way of looking says the wrapper runs MODE now.
cmd_expect() {
  mode="$1"
  check_version "$mode" iptables
  check_version "$mode" ip6tables
  check_rule_lands "$mode" iptables iptables-save 203.0.113.99/32
  check_rule_lands "$mode" ip6tables ip6tables-save 2001:db8::99/128
  detected="$(iptables-wrapper detect | head -n1)"
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
  i=1
  while [ "$i" -le "$2" ]; do
    backend "$1" iptables -w -A FORWARD -s "198.51.100.$i/32" -j ACCEPT
    i=$((i + 1))
  done
  ok "$2 rules added to $1"
}

# warns: at the default log level the wrapper warns on stderr (the decision
# disagrees with other evidence read, e.g. the link says nft while legacy
# holds more rules).
cmd_warns() {
  IPTABLES_WRAPPER_LOG='' iptables -V >/dev/null 2>"$WORK/err" || fail "iptables -V exited $?"
  [ -s "$WORK/err" ] || fail "no warning on stderr about the disagreeing evidence"
  ok "warning: $(head -n1 "$WORK/err")"
}

# mode-env VALUE EXPECTED: IPTABLES_MODE=VALUE selects EXPECTED.
cmd_mode_env() {
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
  before="$(legacy_state)"
  rc=0
  IPTABLES_MODE=bogus iptables -w -A INPUT -s 203.0.113.98/32 -j ACCEPT \
    >"$WORK/out" 2>"$WORK/err" || rc=$?
  [ "$rc" -eq 2 ] || fail "IPTABLES_MODE=bogus: exit $rc, expected 2"
  [ ! -s "$WORK/out" ] || fail "IPTABLES_MODE=bogus printed on stdout: $(cat "$WORK/out")"
  grep -q IPTABLES_MODE "$WORK/err" && grep -q bogus "$WORK/err" \
    || fail "the error does not name IPTABLES_MODE and its value: $(cat "$WORK/err")"
  for mode in nft legacy; do
    if backend "$mode" iptables-save | grep -qF 203.0.113.98; then
      fail "IPTABLES_MODE=bogus still added the rule in $mode"
    fi
  done
  [ "$(legacy_state)" = "$before" ] || fail "IPTABLES_MODE=bogus touched legacy iptables"
  rc=0
  IPTABLES_MODE=bogus iptables -V >"$WORK/out" 2>/dev/null || rc=$?
  [ "$rc" -eq 2 ] && [ ! -s "$WORK/out" ] || fail "IPTABLES_MODE=bogus iptables -V: exit $rc, stdout '$(cat "$WORK/out")'"
  ok "IPTABLES_MODE=bogus: exit 2, ran nothing: $(head -n1 "$WORK/err")"
}

# Rulesets for restore: a user chain, a jump, a match, in filter and nat.
ruleset() { # FAMILY(4|6)
  if [ "$1" = 4 ]; then net=192.0.2; else net=2001:db8::; fi
  if [ "$1" = 4 ]; then a="$net.1/32" b="$net.2/32"; else a="${net}1/128" b="${net}2/128"; fi
  cat <<EOF
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:WRAPPER-TEST - [0:0]
-A INPUT -j WRAPPER-TEST
-A WRAPPER-TEST -s $a -p tcp -m tcp --dport 8080 -j ACCEPT
-A WRAPPER-TEST -s $b -j DROP
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
  mode="$1"
  for fam in 4 6; do
    if [ "$fam" = 4 ]; then cmd=iptables; else cmd=ip6tables; fi
    ruleset "$fam" | "$cmd-restore" || fail "$cmd-restore exited $?"
    "$cmd-save" >"$WORK/save1" || fail "$cmd-save exited $?"
    ruleset "$fam" | grep '^-A' | while IFS= read -r rule; do
      grep -qxF -- "$rule" "$WORK/save1" || fail "$cmd-save lacks '$rule'"
      backend "$mode" "$cmd-save" | grep -qxF -- "$rule" || fail "'$rule' is not in $mode"
    done
    "$cmd-restore" <"$WORK/save1" || fail "$cmd-restore of the save exited $?"
    "$cmd-save" | normalise >"$WORK/save2"
    normalise <"$WORK/save1" | diff - "$WORK/save2" || fail "$cmd-save did not round-trip"
    ok "$cmd-restore / $cmd-save round trip in $mode ($(grep -c '^-A' "$WORK/save1") rules)"
  done
}

# concurrent N: N wrapper calls at once (iptables -V and ip6tables -V
# alternately) with debug logging; each must succeed, and the mode its
# decision logged must be the backend that answered.
cmd_concurrent() {
  n="$1" i=0
  while [ "$i" -lt "$n" ]; do
    name=iptables
    [ $((i % 2)) -eq 0 ] || name=ip6tables
    (
      rc=0
      IPTABLES_WRAPPER_LOG=debug "$name" -V >"$WORK/$i.out" 2>"$WORK/$i.err" || rc=$?
      echo "$rc" >"$WORK/$i.rc"
    ) &
    i=$((i + 1))
  done
  wait
  i=0 nft=0 legacy=0
  while [ "$i" -lt "$n" ]; do
    rc="$(cat "$WORK/$i.rc")"
    [ "$rc" -eq 0 ] || fail "call $i exited $rc: $(cat "$WORK/$i.err")"
    logged="$(grep -oE 'mode=(nft|legacy)' "$WORK/$i.err" | sort -u)"
    case "$logged" in
      mode=nft|mode=legacy) logged="${logged#mode=}" ;;
      *) fail "call $i: no single mode= in its debug log: $(cat "$WORK/$i.err")" ;;
    esac
    grep -qF "$(version_tag "$logged")" "$WORK/$i.out" \
      || fail "call $i logged mode=$logged but the backend printed '$(cat "$WORK/$i.out")'"
    if [ "$logged" = nft ]; then nft=$((nft + 1)); else legacy=$((legacy + 1)); fi
    i=$((i + 1))
  done
  ok "$n concurrent calls succeeded, each ran the mode it logged ($nft nft, $legacy legacy)"
}

case "${1:-}" in
  expect) cmd_expect "$2" ;;
  hint) cmd_hint "$2" ;;
  rules) cmd_rules "$2" "$3" ;;
  warns) cmd_warns ;;
  mode-env) cmd_mode_env "$2" "$3" ;;
  bogus) cmd_bogus ;;
  restore) cmd_restore "$2" ;;
  concurrent) cmd_concurrent "$2" ;;
  *) echo "usage: wrapper-test expect|hint|rules|warns|mode-env|bogus|restore|concurrent ..." >&2; exit 2 ;;
esac
