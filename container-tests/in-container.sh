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
  detected="$(sed -n '1{s/ .*//;p;}' "$WORK/detect")"
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
# the decision's report names the disagreeing evidence. A dispatched call
# keeps stdout and stderr the backend's alone (callers such as Docker's
# engine take any output as a failure) and records its warning that legacy
# tables remain in the runtime directory's `warnings` file instead; it
# writes the warning on stderr only when IPTABLES_WRAPPER_LOG asks for it.
cmd_disagrees() {
  local record warning
  record="${IPTABLES_WRAPPER_RUN_DIR:-/run/iptables-wrapper}/warnings"
  iptables-wrapper detect --json >"$WORK/json" || fail "detect --json exited $?"
  grep -o '"warnings":\[[^]]*\]' "$WORK/json" >"$WORK/warnings" || true
  grep -q legacy "$WORK/warnings" \
    || fail "detect --json has no warning about the legacy evidence: $(cat "$WORK/json")"
  ok "detect --json warns: $(grep -o '"warnings":\["[^"]*' "$WORK/json" | cut -c14-)"
  iptables-wrapper detect >"$WORK/detect" || fail "detect exited $?"
  grep -q '^warning: points to legacy: ' "$WORK/detect" \
    || fail "detect's report shows no warning about the legacy evidence: $(cat "$WORK/detect")"
  ok "detect's report shows the warnings"
  # The record as this call leaves it: earlier steps' calls may have written
  # it already, and it is rewritten at most once a second.
  rm -f "$record"
  iptables -V >"$WORK/out" 2>"$WORK/err" || fail "iptables -V exited $?"
  [ ! -s "$WORK/err" ] || fail "a plain dispatched call wrote on stderr: '$(cat "$WORK/err")'"
  grep -q '(nf_tables)' "$WORK/out" || fail "stdout is not the backend's: '$(cat "$WORK/out")'"
  ok "a plain dispatched call: stdout the backend's, stderr empty"
  [ -f "$record" ] || fail "the dispatched call recorded no warning: $record is missing"
  grep -v '^#' "$record" | grep -q legacy || fail "$record has no warning about legacy: $(cat "$record")"
  ok "$record: $(grep -v '^#' "$record" | head -n 1)"
  IPTABLES_WRAPPER_LOG=warn iptables -V >"$WORK/out" 2>"$WORK/err" || fail "IPTABLES_WRAPPER_LOG=warn iptables -V exited $?"
  grep -q 'warn.*legacy' "$WORK/err" || fail "with IPTABLES_WRAPPER_LOG=warn the call did not warn: '$(cat "$WORK/err")'"
  grep -q '(nf_tables)' "$WORK/out" || fail "stdout is not the backend's: '$(cat "$WORK/out")'"
  ok "with IPTABLES_WRAPPER_LOG=warn it warns on stderr: $(cat "$WORK/err")"
  warning="$(sed -n 's/^.*warn[a-z]*: //p' "$WORK/err" | head -n 1)"
  grep -qF -- "$warning" "$record" || fail "the warning on stderr is not in $record: '$warning' vs $(cat "$record")"
  ok "the record holds that same warning"
}

# Docker's engine as a client (scenario 9). Its state lives in /dev/shm
# (a tmpfs of Docker's), so it outlives the step that started it.
DOCKERD_DIR=/dev/shm/dockerd

# no_route_count: packets this network namespace could not route, IPv4 plus
# IPv6. The container has only loopback (and the bridge dockerd makes), so
# any attempt to reach the network counts here.
no_route_count() {
  local v4 v6
  v4="$(awk '$1 == "Ip:" { if (!n) { for (i = 2; i <= NF; i++) if ($i == "OutNoRoutes") f = i; n = 1 } else print $f }' /proc/net/snmp)"
  v6="$(awk '$1 == "Ip6OutNoRoutes" { print $2 }' /proc/net/snmp6 2>/dev/null || true)"
  echo $((v4 + ${v6:-0}))
}

# dockerd-start: Docker's engine, whose iptables is the wrapper, starts in
# this container and comes up: its API answers. It fails to start when an
# `iptables -N` it runs prints anything (it takes any output as an error).
cmd_dockerd_start() {
  local waited=0 pid iptables_path
  mkdir -p "$DOCKERD_DIR"
  iptables_path="$(readlink -f "$(command -v iptables)")"
  [ "$iptables_path" = /usr/sbin/iptables-wrapper ] \
    || fail "dockerd would run $iptables_path as iptables, not the wrapper"
  no_route_count >"$DOCKERD_DIR/no-routes-before"
  # No inner containers are run: the vfs driver needs no kernel support.
  setsid dockerd --storage-driver=vfs --data-root "$DOCKERD_DIR/data" \
    --exec-root "$DOCKERD_DIR/exec" --pidfile "$DOCKERD_DIR/pid" \
    </dev/null >"$DOCKERD_DIR/log" 2>&1 &
  pid=$!
  until docker version >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "  dockerd's log (without its grpc chatter), last lines:" >&2
      grep -v 'module=grpc' "$DOCKERD_DIR/log" | tail -n 15 | sed 's/^/    /' >&2
      fail "dockerd exited before its API answered"
    fi
    [ "$waited" -lt 60 ] || fail "dockerd's API did not answer within 60 s: $(tail -n 5 "$DOCKERD_DIR/log")"
    sleep 1
    waited=$((waited + 1))
  done
  ok "dockerd $(docker version --format '{{.Server.Version}}') is up after ${waited} s (its iptables: $iptables_path)"
}

# table_chains FILE TABLE: the chains a save declares in TABLE.
table_chains() {
  awk -v t="*$2" '/^\*/ { in_t = ($0 == t) } in_t && /^:/ { print substr($1, 2) }' "$1"
}

# dockerd-chains MODE: dockerd's chains and rules are in MODE's ruleset and
# not in the other backend's, dockerd said nothing about iptables, and it
# tried to reach no network.
cmd_dockerd_chains() {
  local mode="$1" spec chain table
  # (iptables-nft-save's note that legacy tables exist is expected here.)
  backend "$mode" iptables-save >"$WORK/mine" 2>/dev/null
  backend "$(other "$mode")" iptables-save >"$WORK/other" 2>/dev/null
  for spec in filter:DOCKER filter:DOCKER-USER filter:DOCKER-ISOLATION-STAGE-1 \
    filter:DOCKER-ISOLATION-STAGE-2 nat:DOCKER; do
    table="${spec%%:*}" chain="${spec#*:}"
    table_chains "$WORK/mine" "$table" | grep -qxF "$chain" \
      || fail "dockerd's $table chain $chain is not in $mode: $(cat "$WORK/mine")"
  done
  grep -qxF -- '-A FORWARD -j DOCKER-USER' "$WORK/mine" || fail "dockerd's FORWARD jump is not in $mode"
  grep -q -- '-j MASQUERADE' "$WORK/mine" || fail "dockerd's MASQUERADE rule is not in $mode"
  if grep -q DOCKER "$WORK/other"; then
    fail "dockerd's chains landed in $(other "$mode") too: $(grep DOCKER "$WORK/other")"
  fi
  ok "dockerd's chains are in $mode ($(grep -c '^-A' "$WORK/mine") rules), none in $(other "$mode")"
  grep -E 'level=(warning|error|fatal)' "$DOCKERD_DIR/log" >"$WORK/warnings" || true
  if grep -iE 'iptables|chain' "$WORK/warnings" >"$WORK/complaints"; then
    fail "dockerd's log has iptables complaints: $(cat "$WORK/complaints")"
  fi
  ok "dockerd's log has no iptables complaint"
  if grep -iE 'dial tcp|lookup .*(no such host|server misbehaving)|network is unreachable' \
    "$DOCKERD_DIR/log" >"$WORK/net"; then
    fail "dockerd tried to reach the network: $(cat "$WORK/net")"
  fi
  [ "$(no_route_count)" = "$(cat "$DOCKERD_DIR/no-routes-before")" ] \
    || fail "dockerd sent packets without a route (OutNoRoutes $(cat "$DOCKERD_DIR/no-routes-before") -> $(no_route_count))"
  ok "dockerd tried no network (OutNoRoutes unchanged: $(no_route_count))"
}

# The non-root image (scenario 10, nonroot.Dockerfile): the wrapper as
# installed, and a copy with file capabilities of its own and its links.
WRAPPER_WITH_CAPS_DIR=/opt/wrapper-with-caps

# cap_field NAME: a capability set of this shell from /proc/self/status.
cap_field() { awk -v f="$1:" '$1 == f { print $2 }' /proc/self/status; }

# nonroot-setup: what scenario 10 stands on. The caller is not root and has
# no capabilities; the bounding set holds only CAP_NET_ADMIN and CAP_NET_RAW;
# the backends carry them as file capabilities and the wrapper carries none.
cmd_nonroot_setup() {
  local backend_path
  [ "$(id -u)" != 0 ] || fail "the container runs as root"
  [ "$(cap_field CapEff)" = 0000000000000000 ] && [ "$(cap_field CapPrm)" = 0000000000000000 ] \
    || fail "the caller has capabilities: CapPrm $(cap_field CapPrm), CapEff $(cap_field CapEff)"
  # CAP_NET_ADMIN is bit 12, CAP_NET_RAW bit 13.
  [ "$(cap_field CapBnd)" = 0000000000003000 ] \
    || fail "bounding set $(cap_field CapBnd), expected NET_ADMIN and NET_RAW only (0000000000003000)"
  for backend_path in /usr/sbin/xtables-nft-multi /usr/sbin/xtables-legacy-multi; do
    getcap "$backend_path" >"$WORK/caps"
    grep -q 'cap_net_admin,cap_net_raw[+=]ep' "$WORK/caps" || fail "$backend_path lacks its file capabilities: '$(cat "$WORK/caps")'"
  done
  getcap /usr/sbin/iptables-wrapper >"$WORK/caps"
  [ ! -s "$WORK/caps" ] || fail "the installed wrapper has file capabilities: $(cat "$WORK/caps")"
  ok "uid $(id -u), groups $(id -G); no capabilities, bounding set NET_ADMIN+NET_RAW; backends cap_net_admin,cap_net_raw+ep; wrapper none"
}

# reads save-tools|kernel: how the wrapper read the kernel state. The
# installed wrapper has no capabilities: the kernel refuses its netlink and
# getsockopt reads, and it reads the backends' save tools (which carry file
# capabilities) instead. The copy with file capabilities reads the kernel
# itself and decides the same.
cmd_reads() {
  local mode with_caps
  iptables-wrapper detect -v >"$WORK/detect" || fail "iptables-wrapper detect -v exited $?"
  mode="$(sed -n '1{s/ .*//;p;}' "$WORK/detect")"
  case "$1" in
    save-tools)
      grep -q 'iptables-nft-save' "$WORK/detect" && grep -q 'iptables-legacy-save' "$WORK/detect" \
        || fail "detect does not show the save tools as the method: $(cat "$WORK/detect")"
      ok "without capabilities the wrapper read both save tools and decided $mode"
      ;;
    kernel)
      PATH="$WRAPPER_WITH_CAPS_DIR:$PATH" iptables-wrapper detect -v >"$WORK/detect-caps" \
        || fail "$WRAPPER_WITH_CAPS_DIR/iptables-wrapper detect -v exited $?"
      with_caps="$(sed -n '1{s/ .*//;p;}' "$WORK/detect-caps")"
      if grep -q -- '-save' "$WORK/detect-caps"; then
        fail "with file capabilities the wrapper still read a save tool: $(cat "$WORK/detect-caps")"
      fi
      [ "$with_caps" = "$mode" ] || fail "with file capabilities the wrapper decided $with_caps, without $mode"
      PATH="$WRAPPER_WITH_CAPS_DIR:$PATH" check_version "$mode" iptables
      ok "with file capabilities the wrapper read the kernel itself and decided $mode too"
      ;;
    *) fail "reads: $1" ;;
  esac
}

# quiet MODE: where a call has warnings to give (stale legacy tables while
# the host link says MODE), a plain call prints only the backend's output.
# A non-root user cannot make the default runtime directory under /run, so
# the warnings are recorded only where IPTABLES_WRAPPER_RUN_DIR names a
# directory the user may create.
cmd_quiet() {
  local run_dir="$WORK/run"
  iptables -V >"$WORK/out" 2>"$WORK/err" || fail "iptables -V exited $?"
  [ ! -s "$WORK/err" ] || fail "a plain call wrote on stderr: '$(cat "$WORK/err")'"
  grep -qF "$(version_tag "$1")" "$WORK/out" || fail "stdout is not $1's: '$(cat "$WORK/out")'"
  ok "a plain call: stdout $1's, stderr empty"
  IPTABLES_WRAPPER_RUN_DIR="$run_dir" iptables -V >"$WORK/out" 2>"$WORK/err" \
    || fail "IPTABLES_WRAPPER_RUN_DIR=$run_dir iptables -V exited $?"
  [ ! -s "$WORK/err" ] || fail "a plain call wrote on stderr: '$(cat "$WORK/err")'"
  [ -f "$run_dir/warnings" ] && grep -v '^#' "$run_dir/warnings" | grep -q legacy \
    || fail "IPTABLES_WRAPPER_RUN_DIR=$run_dir: no warning about legacy recorded"
  ok "IPTABLES_WRAPPER_RUN_DIR=$run_dir: recorded $(grep -v '^#' "$run_dir/warnings" | head -n 1)"
}

# stale-legacy-state: what an old Docker or Calico and kube-proxy leave in
# legacy besides plain rules: a FORWARD DROP policy, a user chain jumped to
# in nat, an IPv6 rule.
cmd_stale_legacy_state() {
  backend legacy iptables -w -P FORWARD DROP
  backend legacy iptables -w -t nat -N KUBE-SERVICES
  backend legacy iptables -w -t nat -A PREROUTING -j KUBE-SERVICES
  backend legacy iptables -w -t nat -A KUBE-SERVICES -d 10.96.0.1/32 -p tcp --dport 443 -j DNAT --to-destination 10.244.0.9:6443
  backend legacy ip6tables -w -A INPUT -s 2001:db8::1/128 -j DROP
  ok "legacy FORWARD DROP, nat KUBE-SERVICES, an IPv6 rule"
}

# saves MODE: both families' saves of MODE without their comment lines
# (the header's time, iptables-nft-save's note that legacy tables exist).
saves() {
  backend "$1" iptables-save | grep -v '^#' || true
  backend "$1" ip6tables-save | grep -v '^#' || true
}

# stale-remove: the host now says nft and legacy holds the state the upgrade
# left, while the new Docker and kube-proxy wrote the same filtering (the
# FORWARD DROP policy, the IPv6 DROP) and the same Service rule into nft,
# as an upgrade does: so
# removing legacy opens nothing. `stale` shows it (exit 1); `stale --remove` saves legacy into a
# backup directory, empties the stale tables (exit 0); the next calls go to
# nft, legacy holds nothing, nft is what it was, a second removal has
# nothing to do, and restoring the backup brings legacy back exactly.
cmd_stale_remove() {
  local rc=0 dir
  backend nft iptables -w -P FORWARD DROP
  backend nft iptables -w -t nat -N KUBE-SERVICES
  backend nft iptables -w -t nat -A PREROUTING -j KUBE-SERVICES
  backend nft iptables -w -t nat -A KUBE-SERVICES -d 10.96.0.1/32 -p tcp --dport 443 -j DNAT --to-destination 10.244.0.9:6443
  backend nft ip6tables -w -A INPUT -s 2001:db8::1/128 -j DROP
  iptables-wrapper stale >"$WORK/show" 2>"$WORK/err" || rc=$?
  [ "$rc" -eq 1 ] || fail "stale exited $rc, expected 1: $(cat "$WORK/show" "$WORK/err")"
  grep -q 'FORWARD: .*policy DROP' "$WORK/show" && grep -q 'KUBE-IPTABLES-HINT (user chain)' "$WORK/show" \
    && grep -q 'stale legacy ipv4 nat' "$WORK/show" && grep -q 'stale legacy ipv6 filter' "$WORK/show" \
    || fail "stale does not show the legacy state: $(cat "$WORK/show")"
  ok "stale (exit 1): $(grep -c '^stale legacy' "$WORK/show") stale legacy tables"
  iptables-wrapper detect >"$WORK/detect" || fail "detect exited $?"
  grep -q 'iptables-wrapper stale --remove' "$WORK/detect" || fail "detect's warning does not name the command: $(cat "$WORK/detect")"
  ok "detect's stale warning names iptables-wrapper stale --remove"
  saves legacy >"$WORK/legacy-before"
  saves nft >"$WORK/nft-before"
  rc=0
  iptables-wrapper stale --remove >"$WORK/remove" 2>"$WORK/err" || rc=$?
  [ "$rc" -eq 0 ] || fail "stale --remove exited $rc: $(cat "$WORK/remove" "$WORK/err")"
  dir="$(sed -n 's/^backup: //p' "$WORK/remove")"
  [ -s "$dir/iptables-legacy.rules" ] && [ -s "$dir/ip6tables-legacy.rules" ] || fail "no backup in '$dir': $(cat "$WORK/remove")"
  ok "stale --remove (exit 0), backup in $dir"
  saves legacy >"$WORK/legacy-after"
  if grep -q -e '^-A' -e ' - \[' -e 'DROP' "$WORK/legacy-after"; then
    fail "legacy still holds state: $(cat "$WORK/legacy-after")"
  fi
  ok "legacy holds nothing ($(grep -c '^\*' "$WORK/legacy-after") empty tables)"
  saves nft >"$WORK/nft-after"
  cmp "$WORK/nft-before" "$WORK/nft-after" || fail "nft changed: $(diff "$WORK/nft-before" "$WORK/nft-after")"
  ok "nft is what it was ($(grep -c '^-A' "$WORK/nft-after") rules)"
  cmd_expect nft
  iptables-wrapper detect >"$WORK/detect" || fail "detect exited $?"
  if grep -q 'iptables-wrapper stale' "$WORK/detect"; then fail "detect still warns: $(cat "$WORK/detect")"; fi
  ok "detect no longer warns about legacy"
  rc=0
  iptables-wrapper stale --remove >"$WORK/again" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] && grep -q 'nothing removed' "$WORK/again" || fail "a second removal: exit $rc: $(cat "$WORK/again")"
  ok "a second removal has nothing to do"
  backend legacy iptables-restore -w <"$dir/iptables-legacy.rules" || fail "restoring $dir/iptables-legacy.rules exited $?"
  backend legacy ip6tables-restore -w <"$dir/ip6tables-legacy.rules" || fail "restoring $dir/ip6tables-legacy.rules exited $?"
  # A restore without -c sets no counters; nothing flows here anyway.
  saves legacy | normalise >"$WORK/legacy-restored"
  normalise <"$WORK/legacy-before" >"$WORK/legacy-before.n"
  cmp "$WORK/legacy-before.n" "$WORK/legacy-restored" \
    || fail "the backup did not restore legacy: $(diff "$WORK/legacy-before.n" "$WORK/legacy-restored")"
  ok "restoring the backup brought legacy back exactly ($(grep -c '^-A' "$WORK/legacy-restored") rules)"
}

# expect-only MODE: iptables and ip6tables run MODE and detect says so (an
# image with one backend, where the other's tools to cross-check are absent).
cmd_expect_only() {
  local detected
  check_version "$1" iptables
  check_version "$1" ip6tables
  iptables-wrapper detect >"$WORK/detect" || fail "iptables-wrapper detect exited $?"
  detected="$(sed -n '1{s/ .*//;p;}' "$WORK/detect")"  # the verdict's first word
  [ "$detected" = "$1" ] || fail "iptables-wrapper detect said '$detected', expected $1"
  ok "iptables-wrapper detect: $detected"
}

# missing-backend MODE WORD: with the image lacking MODE's backend and the
# host on MODE, a call fails (exit 1) with one line that names WORD (the
# package to install) and prints nothing on stdout.
cmd_missing_backend() {
  local rc=0
  iptables -V >"$WORK/out" 2>"$WORK/err" || rc=$?
  [ "$rc" -ne 0 ] || fail "iptables -V succeeded without a $1 backend: $(cat "$WORK/out")"
  [ ! -s "$WORK/out" ] || fail "the failing call printed on stdout: $(cat "$WORK/out")"
  grep -q "no $1 backend" "$WORK/err" && grep -qF "$2" "$WORK/err" \
    || fail "the error does not say 'no $1 backend' and name $2: $(cat "$WORK/err")"
  ok "exit $rc: $(cat "$WORK/err")"
}

# decided-by SOURCE LOCATION: detect, for iptables and for ip6tables, says
# SOURCE decided, for a reason that names LOCATION (for iptables; ip6tables's
# own link sits next to it).
cmd_decided_by() {
  local command where
  for command in iptables ip6tables; do
    where="$2"
    [ "$command" = iptables ] || where="$(dirname "$2")/ip6tables"
    iptables-wrapper detect --json --for "$command" >"$WORK/json" || fail "detect --json --for $command exited $?"
    grep -qF "\"decided_by\":\"$1\"" "$WORK/json" || fail "detect --for $command: not decided by $1: $(cat "$WORK/json")"
    grep -o '"reason":"[^"]*"' "$WORK/json" >"$WORK/reason" || true
    grep -qF "$where" "$WORK/reason" || fail "detect --for $command: the reason does not name $where: $(cat "$WORK/reason")"
    ok "$command decided by $1: $(cut -c11- "$WORK/reason")"
  done
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
# answered. An iteration whose calls all saw the same mode did not overlap a
# flip and proves little, so iterations are repeated (at most 5) until one saw both.
cmd_concurrent() {
  local n="$1" iteration=1
  while ! concurrent_iteration "$n" "$iteration"; do
    [ "$iteration" -lt 5 ] || fail "in 5 iterations of $n calls none saw the host link flip"
    iteration=$((iteration + 1))
  done
}

# concurrent_iteration N ITERATION: one iteration; fails the script on a bad call, returns
# 1 when all calls used the same mode.
concurrent_iteration() {
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
  ok "iteration $2: $n concurrent calls succeeded, each ran the mode it logged ($nft nft, $legacy legacy)"
  [ "$nft" -gt 0 ] && [ "$legacy" -gt 0 ]
}

case "${1:-}" in
  expect) cmd_expect "$2" ;;
  hint) cmd_hint "$2" ;;
  rules) cmd_rules "$2" "$3" ;;
  disagrees) cmd_disagrees ;;
  mode-env) cmd_mode_env "$2" "$3" ;;
  decided-by) cmd_decided_by "$2" "$3" ;;
  expect-only) cmd_expect_only "$2" ;;
  missing-backend) cmd_missing_backend "$2" "$3" ;;
  bogus) cmd_bogus ;;
  restore) cmd_restore "$2" ;;
  concurrent) cmd_concurrent "$2" ;;
  dockerd-start) cmd_dockerd_start ;;
  dockerd-chains) cmd_dockerd_chains "$2" ;;
  nonroot-setup) cmd_nonroot_setup ;;
  reads) cmd_reads "$2" ;;
  quiet) cmd_quiet "$2" ;;
  stale-legacy-state) cmd_stale_legacy_state ;;
  stale-remove) cmd_stale_remove ;;
  *) echo "usage: wrapper-test expect|hint|rules|disagrees|decided-by|expect-only|missing-backend|mode-env|bogus|restore|concurrent|dockerd-start|dockerd-chains|nonroot-setup|reads|quiet|stale-legacy-state|stale-remove ..." >&2; exit 2 ;;
esac
