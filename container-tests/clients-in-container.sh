#!/usr/bin/env bash
# The real clients' side of container-tests/clients.sh, run inside a test
# container of the `clients` image (build-base.sh: bookworm with ufw,
# firewalld, fail2ban, wireguard-tools, ferm, podman with netavark, each from
# Debian's packages, and the wrapper installed as Dockerfile.test installs
# it). The driver mounts this file as /usr/local/bin/client-test and calls:
#
#   client-test prepare STATE        the host's kernel state: clean (nothing),
#                                    upgraded (legacy still holds the old
#                                    rules, its hint chain and a FORWARD DROP)
#                                    or legacy (a legacy host's rules and hint)
#   client-test route ROUTE HOST     how iptables reaches HOST's backend:
#                                    direct (the image's alternatives point at
#                                    iptables-HOST, no wrapper), link (the
#                                    wrapper, with the host's link that the
#                                    driver mounts at /host), settings (the
#                                    wrapper, with HOST pinned in
#                                    /etc/iptables-wrapper/IPTABLES_MODE)
#   client-test run CLIENT HOST      run CLIENT's steps under strace, then
#                                    print the report the driver compares
#   client-test version CLIENT       the Debian package and version of CLIENT
#
# The report is plain text in sections: the steps with their exit codes and
# output (normalised: no times, ids, keys or addresses that differ run to
# run), what changed in HOST's rules and in the other backend's at each
# snapshot, nftables' own tables, the iptables-family programs the client
# ran (from an execve trace, with whether the environment it was started
# with reached them) and which backend the wrapper ran for each call.
set -euo pipefail
shopt -s inherit_errexit

OUT=/dev/shm/client-test
mkdir -p "$OUT"
# A marker in the environment the client is started with: a call that does
# not carry it was made by a caller that cleared the environment.
MARK=IPTW_CLIENT_ENV_MARK
TRACE="$OUT/trace"

fail() { echo "FAIL: $*" >&2; exit 1; }
other() { if [[ "$1" == nft ]]; then echo legacy; else echo nft; fi; }

# The Debian package of each client.
package_of() {
  case "$1" in
    ufw) echo ufw ;; firewalld) echo firewalld ;; fail2ban) echo fail2ban ;;
    wg-quick|wg-quick-nft) echo wireguard-tools ;; ferm) echo ferm ;;
    podman) echo podman ;;
    *) fail "unknown client '$1'" ;;
  esac
}

cmd_version() {
  local pkg; pkg="$(package_of "$1")"
  printf '%s %s\n' "$pkg" "$(dpkg-query -W -f '${Version}' "$pkg")"
  if [[ "$1" == podman ]]; then printf 'netavark %s\n' "$(dpkg-query -W -f '${Version}' netavark)"; fi
}

cmd_prepare() {
  case "$1" in
    clean) ;;
    upgraded)
      wrapper-test hint legacy >/dev/null
      wrapper-test rules legacy 5 >/dev/null
      wrapper-test stale-legacy-state >/dev/null ;;
    legacy)
      wrapper-test hint legacy >/dev/null
      wrapper-test rules legacy 5 >/dev/null ;;
    *) fail "unknown state '$1'" ;;
  esac
  echo "state $1 prepared"
}

cmd_route() {
  local route="$1" host="$2" v
  case "$route" in
    direct)
      for v in iptables ip6tables; do update-alternatives --quiet --set "$v" "/usr/sbin/$v-$host"; done ;;
    settings)
      mkdir -p /etc/iptables-wrapper
      echo "$host" >/etc/iptables-wrapper/IPTABLES_MODE ;;
    link)
      [[ -L /host/etc/alternatives/iptables ]] || fail "no host link mounted at /host/etc/alternatives/iptables" ;;
    *) fail "unknown route '$route'" ;;
  esac
  echo "route $route: iptables is $(readlink -f /usr/sbin/iptables)"
}

# --- snapshots --------------------------------------------------------------

# save MODE: both families' rules of MODE as their save tools print them,
# without comments and counters. Run directly, not through the wrapper.
save() {
  local f
  for f in iptables ip6tables; do
    IPTW_SUITE_OWN=1 "xtables-$1-multi" "$f-save" 2>/dev/null | grep -v '^#' | sed -E 's/\[[0-9]+:[0-9]+\]/[0:0]/' || true
  done
}

# snap NAME: what each backend and nftables' own tables hold now.
snap() {
  save nft >"$OUT/snap.$1.nft"
  save legacy >"$OUT/snap.$1.legacy"
  # Tables iptables-nft did not make: nftables' own (wg-quick, fail2ban's
  # nftables actions), shown with their rules, handles off.
  IPTW_SUITE_OWN=1 nft -s list ruleset 2>/dev/null | awk '
    /^table / { keep = ($0 !~ /^table (ip|ip6) (filter|nat|mangle|raw|security) \{/) }
    keep' | grep -v '# handle' >"$OUT/snap.$1.native" || true
  SNAPS+=("$1")
}

# changes BEFORE AFTER: the lines added (+) and removed (-), in order.
changes() {
  diff "$1" "$2" | sed -n 's/^> /+ /p; s/^< /- /p' | normalise || true
}

# --- steps ------------------------------------------------------------------

# The steps' transcript. `step CMD...` runs a command, records it, its exit
# code and its normalised output; a step's own failure is recorded, not
# fatal (the exit code is compared between the routes).
STEPS="$OUT/steps"
: >"$STEPS"
step() {
  local rc=0
  printf '$ %s\n' "$*" >>"$STEPS"
  "$@" >"$OUT/step.out" 2>&1 || rc=$?
  normalise <"$OUT/step.out" >>"$STEPS"
  printf 'exit %s\n' "$rc" >>"$STEPS"
  return 0
}
note() { printf '# %s\n' "$*" >>"$STEPS"; }

# normalise: output without what differs from run to run.
normalise() {
  sed -E \
    -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9:,.]+( ?[+-][0-9]{2}:?[0-9]{2}|Z)?/<time>/g' \
    -e 's/\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} +[0-9]+ [0-9:]{8} [0-9]{4}/<time>/g' \
    -e 's/\b[0-9a-f]{64}\b/<id>/g' -e 's/\b[0-9a-f]{12}\b/<id>/g' \
    -e 's#[A-Za-z0-9+/]{43}=#<key>#g' \
    -e 's/\bfe80::[0-9a-f:]+/fe80::<addr>/g' \
    -e 's/\bpid [0-9]+/pid <n>/g; s/\[[0-9]+\]:/[<n>]:/g' \
    -e 's/ in [0-9.]+ ?m?s\b/ in <t>/g'
}

# wait_for SECONDS CMD...: until CMD succeeds; 1 on time-out.
# rules_have ADDR / rules_lack ADDR: whether either backend holds ADDR.
rules_have() { { save nft; save legacy; } | grep -qF -- "$1"; }
rules_lack() { ! rules_have "$1"; }
wait_for() {
  local limit=$(($1 * 10)) i=0; shift
  until "$@" >/dev/null 2>&1; do
    i=$((i + 1)); [[ $i -lt $limit ]] || return 1
    sleep 0.1
  done
}

# --- the clients ------------------------------------------------------------

client_ufw() {
  step ufw --force enable
  step ufw allow 22/tcp
  step ufw deny from 203.0.113.7
  step ufw allow proto udp from 2001:db8::/64 to any port 53
  step ufw limit 2222/tcp
  step ufw status verbose
  snap enabled
  step ufw delete allow 22/tcp
  step ufw reload
  step ufw status numbered
  snap reloaded
  step ufw disable
  snap disabled
}

# firewalld with its iptables backend, on the system bus, started and
# stopped as its unit does (firewalld --nofork), each change checked.
FIREWALLD_PID=""
firewalld_start() {
  local i
  "$@" --nofork --nopid &
  FIREWALLD_PID=$!
  for i in $(seq 1 300); do
    firewall-cmd --state >/dev/null 2>&1 && { echo "firewalld is running"; return 0; }
    kill -0 "$FIREWALLD_PID" 2>/dev/null || { echo "firewalld exited"; wait "$FIREWALLD_PID" || return $?; return 1; }
    sleep 0.1
  done
  echo "firewalld did not answer within 30 s"; return 1
}
firewalld_stop() {
  local rc=0
  kill -TERM "$FIREWALLD_PID"
  wait "$FIREWALLD_PID" || rc=$?
  echo "firewalld exited $rc"
  return "$rc"
}
# Before the trace (strace waits for every process it follows, and the bus
# outlives the client): the system bus, the iptables backend chosen.
before_firewalld() {
  sed -i -E 's/^FirewallBackend=.*/FirewallBackend=iptables/' /etc/firewalld/firewalld.conf
  grep -q '^FirewallBackend=iptables$' /etc/firewalld/firewalld.conf || fail "FirewallBackend=iptables not set"
  mkdir -p /run/dbus
  dbus-daemon --system --fork --nopidfile
  rm -f /var/log/firewalld
}
client_firewalld() {
  step firewalld_start firewalld
  step firewall-cmd --get-default-zone
  step firewall-cmd --add-port=8080/tcp
  step firewall-cmd --add-service=https
  step firewall-cmd --add-rich-rule='rule family="ipv4" source address="203.0.113.7" reject'
  step firewall-cmd --add-masquerade
  step firewall-cmd --list-all
  snap running
  step firewall-cmd --reload
  step firewall-cmd --list-all
  snap reloaded
  step firewalld_stop
  note "firewalld's log, warnings and errors"
  grep -E 'WARNING|ERROR' /var/log/firewalld | normalise >>"$STEPS" || true
  snap stopped
}

# f2b_gone: the server has exited (its comm is the script's name; the
# container's init, `sleep`, reaps nothing, so its zombies do not count).
# shellcheck disable=SC2009 # pgrep would count the zombies
f2b_gone() { ! ps -C fail2ban-server -o stat= | grep -qv '^Z'; }

# fail2ban with the sshd jail on a log file of its own, the default
# iptables-multiport ban action; the server started and stopped by its client.
client_fail2ban() {
  local log=/var/log/iptw-auth.log
  : >"$log"
  cat >/etc/fail2ban/jail.local <<EOF
[DEFAULT]
backend = polling
banaction = iptables-multiport
banaction_allports = iptables-allports
[sshd]
enabled = true
logpath = $log
port = ssh
maxretry = 2
findtime = 600
EOF
  rm -f /etc/fail2ban/jail.d/defaults-debian.conf
  mkdir -p /run/fail2ban
  step fail2ban-client -x start
  wait_for 30 fail2ban-client ping || note "fail2ban did not answer ping"
  step fail2ban-client status sshd
  step fail2ban-client set sshd banip 203.0.113.7
  step fail2ban-client set sshd banip 203.0.113.8
  wait_for 20 rules_have 203.0.113.8 || note "no ban rule appeared"
  step fail2ban-client get sshd banned
  snap banned
  step fail2ban-client set sshd unbanip 203.0.113.7
  wait_for 20 rules_lack 203.0.113.7 || note "the unban rule stayed"
  snap unbanned
  step fail2ban-client stop
  wait_for 20 f2b_gone || note "fail2ban-server still runs"
  note "fail2ban's log, warnings and errors"
  grep -E 'WARNING|ERROR' /var/log/fail2ban.log | sed -E 's/^[^ ]+ [^ ]+ //' | normalise >>"$STEPS" || true
  snap stopped
}

# wg-quick with a peer routing everything (0.0.0.0/0, ::/0): it then marks
# its own packets and writes the raw and mangle rules for that. Without the
# kernel's WireGuard it falls back to wireguard-go (a tun device).
WG_CONF=/etc/wireguard/wg0.conf
wg_conf() {
  mkdir -p /etc/wireguard
  umask 077
  cat >"$WG_CONF" <<EOF
[Interface]
PrivateKey = $(wg genkey)
Address = 10.200.0.1/24, fd00:200::1/64
[Peer]
PublicKey = $(wg genkey | wg pubkey)
AllowedIPs = 0.0.0.0/0, ::/0
EOF
}
client_wg_quick() {
  wg_conf
  # As found in wg-quick: with `nft` in PATH it writes nftables itself and
  # runs no iptables at all; hidden here so that its iptables path runs.
  # (Client wg-quick-nft runs it as installed.)
  mv /usr/sbin/nft /usr/sbin/nft.hidden
  step wg-quick up wg0
  snap up
  step wg-quick down wg0
  snap down
  mv /usr/sbin/nft.hidden /usr/sbin/nft
}
client_wg_quick_nft() {
  wg_conf
  step wg-quick up wg0
  snap up
  step wg-quick down wg0
  snap down
}

# ferm as Debian configures it, plus a few rules of both families.
client_ferm() {
  cat >/etc/ferm/ferm.conf <<'EOF'
domain (ip ip6) {
  table filter {
    chain INPUT {
      policy ACCEPT;
      mod state state INVALID DROP;
      mod state state (ESTABLISHED RELATED) ACCEPT;
      interface lo ACCEPT;
      proto tcp dport (ssh http https) ACCEPT;
    }
    chain IPTW-FERM { proto udp dport 53 ACCEPT; }
    chain FORWARD jump IPTW-FERM;
  }
}
domain ip table nat chain POSTROUTING saddr 10.201.0.0/24 MASQUERADE;
EOF
  step ferm /etc/ferm/ferm.conf
  snap applied
  step ferm --noexec --lines /etc/ferm/ferm.conf
  step ferm --flush /etc/ferm/ferm.conf
  snap flushed
}

# podman with netavark's iptables driver: a container on the default bridge
# network with a published port, killed, then removed; its network torn
# down by conmon's exit command (podman container cleanup).
PODMAN=(podman --storage-driver vfs --cgroup-manager cgroupfs --events-backend file
  --network-backend netavark)
# crun refuses a hybrid cgroup layout (v1 controllers beside a v2 hierarchy
# with controllers, as this machine's): the v2 one hidden in the container's
# own mount namespace; the container runs with --cgroups disabled anyway.
before_podman() {
  if [[ "$(stat -f -c %T /sys/fs/cgroup/unified 2>/dev/null)" == cgroup2fs ]]; then
    mount -t tmpfs -o size=1m tmpfs /sys/fs/cgroup/unified
  fi
}
client_podman() {
  mkdir -p "$OUT/bb/bin"
  cp /bin/busybox "$OUT/bb/bin/busybox"
  ln -s busybox "$OUT/bb/bin/sh"; ln -s busybox "$OUT/bb/bin/sleep"
  tar -C "$OUT/bb" -cf "$OUT/bb.tar" .
  "${PODMAN[@]}" import -q "$OUT/bb.tar" localhost/bb >/dev/null
  step "${PODMAN[@]}" run -d --cgroups disabled --name iptw -p 8080:80 localhost/bb sleep 600
  snap running
  step "${PODMAN[@]}" port iptw
  # Killed, not stopped: the network is then torn down by conmon's exit
  # command alone (podman container cleanup), not by whichever of it and
  # `podman stop` comes first.
  step "${PODMAN[@]}" kill iptw
  wait_for 20 rules_lack NETAVARK-DN || note "netavark's DNAT rules stayed"
  step "${PODMAN[@]}" wait iptw
  snap stopped
  step "${PODMAN[@]}" rm iptw
  snap removed
}

# --- the report ---------------------------------------------------------------

# calls: the iptables-family programs the client ran, from the execve trace:
# each with its flags, its count and whether the marker reached it (env kept
# or cleared). An exec of a backend by a process whose previous exec was one
# of the six names the wrapper answers is the wrapper's dispatch: counted as
# "wrapper ran MODE" (the direct route, whose iptables is a symbolic link,
# has none). The suite's own reads (snapshots, waits) carry IPTW_SUITE_OWN
# and are left out.
WRAPPED='ip6?tables(-save|-restore)?'
CALLED='ip6?tables(-legacy|-nft)?(-save|-restore)?|nft|ebtables[a-z-]*|arptables[a-z-]*|ipset|xtables-(legacy|nft)-multi'
calls_report() {
  # strace -ff -v: one file per process, TRACE.PID, lines
  # execve("PATH", [argv...], [envp...]) = 0; only successful execs count.
  grep -E '^execve\(.*\) = 0$' "$TRACE".* | awk -v mark="\"$MARK=1\"" \
    -v called="^($CALLED)\$" -v wrapped="^($WRAPPED)\$" '
    {
      pid = $0; sub(/:execve\(.*/, "", pid)
      path = $0; sub(/^[^:]*:execve\("/, "", path); sub(/".*/, "", path)
      n = split(path, p, "/"); name = p[n]
      prev = last[pid]; last[pid] = name
      if (index($0, "\"IPTW_SUITE_OWN=1\"")) next
      if (prev ~ wrapped && name ~ /^(ip6?tables-(nft|legacy)|xtables-(nft|legacy)-multi)/) {
        mode = (name ~ /nft/) ? "nft" : "legacy"
        count["wrapper ran " mode]++
        next
      }
      if (name !~ called) next
      env = index($0, mark) ? "env kept" : "env cleared"
      flags = ""
      if (name ~ /restore/ && $0 ~ /"(-n|--noflush)"/) flags = flags " --noflush"
      if ($0 ~ /"(-w|--wait)"/) flags = flags " -w"
      if ($0 ~ /"(-C|--check)"/) flags = flags " -C"
      count[name (flags == "" ? "" : " [" substr(flags, 2) "]") ", " env]++
    }
    END { for (k in count) print k ": " count[k] }' | sort
}

cmd_run() {
  local client="$1" host="$2" s rc=0
  SNAPS=()
  # wg-quick and netavark set their network namespace's sysctls
  # (src_valid_mark, ip_forward), which Docker mounts read-only; they are the
  # container's own.
  mount -o remount,rw /proc/sys
  if declare -F "before_${client//-/_}" >/dev/null; then "before_${client//-/_}"; fi
  snap before
  # The client runs with the marker in its environment, under strace
  # (following every child, printing environments).
  export "$MARK=1"
  rm -f "$TRACE".*
  strace -ff --seccomp-bpf -qq -v -s 256 -e trace=execve -e signal=none -o "$TRACE" \
    bash "$0" __client "$client" || rc=$?
  unset "$MARK"
  [[ $rc -eq 0 ]] || fail "the $client steps stopped (exit $rc)"
  echo "== package"
  cmd_version "$client"
  echo "== steps"
  cat "$STEPS"
  # The snapshots were taken inside the traced run; read them back.
  mapfile -t SNAPS <"$OUT/snaps"
  for s in "${SNAPS[@]}"; do
    [[ "$s" != before ]] || continue
    echo "== $s: host backend ($host) rules"
    changes "$OUT/snap.before.$host" "$OUT/snap.$s.$host"
    echo "== $s: other backend ($(other "$host")) rules"
    changes "$OUT/snap.before.$(other "$host")" "$OUT/snap.$s.$(other "$host")"
    echo "== $s: nftables' own tables"
    changes "$OUT/snap.before.native" "$OUT/snap.$s.native"
  done
  echo "== calls"
  calls_report
}

# __client CLIENT: the traced part (strace runs this script again).
cmd_client() {
  local fn="client_${1//-/_}"
  SNAPS=(before)
  "$fn"
  printf '%s\n' "${SNAPS[@]}" >"$OUT/snaps"
}

case "${1:-}" in
  prepare) cmd_prepare "$2" ;;
  route) cmd_route "$2" "$3" ;;
  run) cmd_run "$2" "$3" ;;
  __client) cmd_client "$2" ;;
  version) cmd_version "$2" ;;
  *) echo "usage: client-test prepare STATE | route ROUTE HOST | run CLIENT HOST | version CLIENT" >&2; exit 2 ;;
esac
