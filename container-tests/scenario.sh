#!/usr/bin/env bash
# Run one scenario of the matrix in fresh privileged containers of one image
# (IPTW_PRIVILEGE: the docker run options for that, default --privileged).
#
#   container-tests/scenario.sh IMAGE SCENARIO [--read-only]
#
# The machine plays the host: a temporary directory mounted read-only at
# /host/etc/alternatives holds the host's `iptables` alternatives link, and
# this script sets and flips it. The container's own network namespace
# (--network none) plays the host's kernel state; the machine's firewall is
# never touched. Steps inside the container are `wrapper-test` commands
# (in-container.sh). Exit 0 when the scenario passed.
#
# Scenarios:
#   1 host on legacy   2 host on nft   3 upgrade without restart
#   4 stale legacy rules outnumber nft   5 IPTABLES_MODE   6 restore/save
#   7 = 1-6, 8 and 11 again with a read-only root file system
#   8 50 concurrent calls while the host link flips
#   9 Docker's engine as a client, started in the stale-legacy state (needs
#     the dind image: Debian's docker.io and the wrapper as its iptables)
#   10 a non-root user, backends with file capabilities (needs the nonroot
#     image, nonroot.Dockerfile)
#   11 the upgrade's stale legacy state removed without a reboot
#   only-nft an image with iptables-nft alone (distro-recipes.sh, UBI 9)
#   12 every node OS's host layout (host-layouts.sh), the host's / mounted
#      read-only at /host as the DaemonSet mounts it, in the three states of
#      1-3: on legacy, on nft, switched to nft without a restart
#   14 the real clients (clients.sh: its own cells, containers and report;
#      needs the clients image)
#   15 a Calico-like upgrade: cali- chains matching ipsets, in legacy, then
#      in nft; stale --remove takes legacy's, every set stays, packets
#      behave as before (calico-in-container.sh; needs the ipset image)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/host-layouts.sh"

IMAGE="${1:?usage: scenario.sh IMAGE SCENARIO [--read-only]}"
SCENARIO="${2:?usage: scenario.sh IMAGE SCENARIO [--read-only]}"
READ_ONLY="${3:-}"

CONTAINER=""
FLIPPER=""
LOCK_FILE=""
HOST_DIR="$(mktemp -d "${TMPDIR:-/tmp}/iptw-host.XXXXXX")"
# As the host's /etc/alternatives is: a non-root user may read it too.
chmod 0755 "$HOST_DIR"
cleanup() {
  if [[ -n "$FLIPPER" ]]; then kill "$FLIPPER" 2>/dev/null || true; wait "$FLIPPER" 2>/dev/null || true; fi
  if [[ -n "$CONTAINER" ]]; then docker rm -f "$CONTAINER" >/dev/null 2>&1 || true; fi
  rm -rf "$HOST_DIR"
  if [[ -n "$LOCK_FILE" ]]; then rm -f "$LOCK_FILE"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The docker run options that give the container its rights; scenarios 9
# and 10 set their own before `start`.
read -r -a PRIVILEGE <<<"${IPTW_PRIVILEGE:---privileged}"

# start [DOCKER-RUN-OPTION...]: a fresh container for this scenario.
start() {
  local opts=(--detach "${PRIVILEGE[@]}" --network none
    --label "iptables-wrapper-test=${IPTW_RUN_ID:-manual}"
    --volume "$HOST_DIR:/host/etc/alternatives:ro")
  if [[ "$READ_ONLY" == --read-only ]]; then
    # Legacy iptables creates and flocks /run/xtables.lock before it touches
    # the kernel and fails ("can't open lock file") when it cannot. Kubernetes
    # gives it a hostPath mount there; a tmpfs on /run plays that part.
    opts+=(--read-only --tmpfs /run)
  fi
  CONTAINER="$(docker run "${opts[@]}" "$@" "$IMAGE" sleep 3600)"
  echo "container ${CONTAINER:0:12} (${READ_ONLY:-read-write}) $*"
}

# ctr STEP ARGS...: a wrapper-test step inside the running container. A
# step that hangs (a wrapper waiting forever) fails after STEP_TIMEOUT
# seconds; the cleanup then removes the container with what still runs in it.
STEP_TIMEOUT="${IPTW_STEP_TIMEOUT:-120}"
ctr() {
  echo "- $*"
  local rc=0
  timeout "$STEP_TIMEOUT" docker exec "$CONTAINER" wrapper-test "$@" || rc=$?
  [[ $rc -ne 124 ]] || echo "  FAIL: step timed out after ${STEP_TIMEOUT}s"
  return "$rc"
}

# host_link legacy|nft|none: what the host's /etc/alternatives/iptables says.
# The new link is made under a temporary name and renamed over the old one, as
# update-alternatives does, so the container never sees it missing.
host_link() {
  case "$1" in
    none) rm -f "$HOST_DIR/iptables" ;;
    legacy|nft)
      ln -sfn "/usr/sbin/iptables-$1" "$HOST_DIR/.iptables.new"
      mv -T "$HOST_DIR/.iptables.new" "$HOST_DIR/iptables" ;;
    *) die "host_link: $1" ;;
  esac
}

scenario_1() { # host on legacy: with its link, then by kernel evidence alone
  start
  host_link legacy
  ctr hint legacy
  ctr rules legacy 5
  ctr expect legacy
  echo "- host link removed: the hint chain in legacy decides"
  host_link none
  ctr expect legacy
}

scenario_2() { # host on nft: with its link, then by kernel evidence alone
  start
  host_link nft
  ctr hint nft
  ctr rules nft 5
  ctr expect nft
  echo "- host link removed: the hint chain in nft decides"
  host_link none
  ctr expect nft
}

scenario_3() { # the upgrade without restart (RKE report)
  start
  host_link legacy
  ctr hint legacy
  ctr rules legacy 5
  ctr expect legacy
  echo "- the host switches to nft; its legacy rules stay behind"
  host_link nft
  ctr expect nft
}

scenario_4() { # stale legacy rules outnumber nft (Calico report)
  start
  ctr rules legacy 30
  ctr rules nft 3
  host_link nft
  ctr expect nft
  ctr disagrees
  echo "- control: no host link, no hint: the rule counts say legacy"
  host_link none
  ctr expect legacy
  echo "- kubelet's hint chain in nft outweighs the counts"
  ctr hint nft
  ctr expect nft
}

scenario_5() { # IPTABLES_MODE set in the image overrides a legacy-looking host
  start --env IPTABLES_MODE=nft
  host_link legacy
  ctr hint legacy
  ctr rules legacy 5
  ctr expect nft
  ctr mode-env NF_TABLES nft
  ctr mode-env Legacy legacy
  ctr mode-env auto legacy
  ctr bogus
}

scenario_6() { # restore fed on stdin, save round-trips, in both modes
  start
  host_link legacy
  ctr restore legacy
  host_link nft
  ctr restore nft
}

scenario_8() { # 50 concurrent calls while the host link flips
  start
  host_link legacy
  # Flip as fast as the machine can for as long as the calls run.
  ( while :; do host_link nft; host_link legacy; done ) &
  FLIPPER=$!
  ctr concurrent 50
  kill "$FLIPPER"; wait "$FLIPPER" 2>/dev/null || true; FLIPPER=""
}

scenario_9() { # Docker's engine as a client, started in the stale-legacy state
  # An inner dockerd needs more than iptables does (lib.sh).
  PRIVILEGE=("${DAEMON_PRIVILEGE[@]}")
  start
  ctr rules legacy 30
  ctr rules nft 3
  host_link nft
  ctr dockerd-start
  ctr dockerd-chains nft
}

scenario_10() { # a non-root image, backends with file capabilities
  # Only what iptables needs: the backends get CAP_NET_ADMIN and CAP_NET_RAW
  # from their files, which the kernel grants only within the bounding set
  # (it refuses to exec them otherwise). Group 0 lets the user read
  # /proc/net/ip*_tables_names (mode 0440, root's group): without it neither
  # the wrapper nor iptables-legacy-save can list the legacy tables.
  PRIVILEGE=(--cap-drop ALL --cap-add NET_ADMIN --cap-add NET_RAW --group-add 0)
  # The lock file as Kubernetes mounts it (hostPath FileOrCreate: made by
  # kubelet, root's, mode 0644). Legacy iptables opens it read-only, so the
  # non-root user can lock it; a mode 0600 file would refuse it.
  LOCK_FILE="$(mktemp "${TMPDIR:-/tmp}/iptw-lock.XXXXXX")"
  chmod 0644 "$LOCK_FILE"
  start --volume "$LOCK_FILE:/run/xtables.lock"
  ctr nonroot-setup
  echo "- no host link: the kernel's state decides, read through the save tools"
  host_link none
  ctr rules legacy 3
  ctr expect legacy
  ctr reads save-tools
  ctr rules nft 6
  ctr expect nft
  echo "- kubelet's hint chain in legacy outweighs the counts, one in nft outweighs that"
  ctr hint legacy
  ctr expect legacy
  ctr reads kernel
  ctr hint nft
  ctr expect nft
  ctr reads kernel
  echo "- the host link (readable by the user) outweighs the hint chains"
  host_link legacy
  ctr expect legacy
  echo "- the host link says nft; legacy's rules are stale: calls stay silent"
  host_link nft
  ctr expect nft
  ctr quiet nft
}

scenario_11() { # the upgrade's stale legacy state removed without a reboot
  start
  host_link legacy
  ctr hint legacy
  ctr rules legacy 5
  ctr stale-legacy-state
  ctr expect legacy
  echo "- the host switches to nft; its legacy rules, hint chain and FORWARD DROP stay behind"
  host_link nft
  ctr hint nft
  ctr rules nft 3
  ctr stale-remove
}

scenario_only_nft() { # an image with iptables-nft alone (UBI 9): nft, and on a legacy host the error
  start
  host_link nft
  ctr hint nft
  ctr expect-only nft
  echo "- the host on legacy: the image cannot serve it, and says which package would"
  host_link legacy
  ctr missing-backend legacy EPEL
}

scenario_12() { # every node OS's host layout, in the three states
  local layout failed=()
  for layout in "${HOST_LAYOUTS[@]}"; do
    echo "=== host layout $layout"
    # A child process per layout: its own host root, container and set -e.
    "${BASH_SOURCE[0]}" "$IMAGE" "12:$layout" || failed+=("$layout")
  done
  [[ ${#failed[@]} -eq 0 ]] || { echo "host layouts that failed: ${failed[*]}"; return 1; }
}

# host_layout_states LAYOUT: on legacy, then switched to nft without a
# restart (its legacy rules and hint stay), in one container; on nft from
# the start in another. Each time the host link must be what decided, read
# from the layout's own place: the kernel's evidence says legacy in the
# switched state, so only the link can make it nft.
host_layout_states() {
  local layout="$1" root="$HOST_DIR/root" where
  where="/host/$(layout_link "$layout")"
  mkdir -p "$root"
  layout_build "$root" "$layout" legacy
  start_with_host_root "$root"
  ctr hint legacy
  ctr rules legacy 5
  ctr expect legacy
  ctr decided-by host-link "$where"
  echo "- the host switches to nft; its legacy rules and hint stay behind"
  layout_choose "$root" "$layout" nft
  ctr expect nft
  ctr decided-by host-link "$where"
  docker rm -f "$CONTAINER" >/dev/null
  echo "- on nft from the start"
  start_with_host_root "$root"
  ctr hint nft
  ctr expect nft
  ctr decided-by host-link "$where"
}

# start_with_host_root DIR: a fresh container with DIR as the host's / at
# /host (read-only) instead of the alternatives directory alone.
start_with_host_root() {
  CONTAINER="$(docker run --detach "${PRIVILEGE[@]}" --network none \
    --label "iptables-wrapper-test=${IPTW_RUN_ID:-manual}" \
    --volume "$1:/host:ro" "$IMAGE" sleep 3600)"
  echo "container ${CONTAINER:0:12} with the host root $1 at /host"
}

scenario_7() { # everything again on a read-only root file system
  local s failed=()
  for s in 1 2 3 4 5 6 8 11; do
    echo "=== scenario $s --read-only"
    # A child process per scenario: each gets its own fresh container and
    # its own set -e.
    "${BASH_SOURCE[0]}" "$IMAGE" "$s" --read-only || failed+=("$s")
  done
  [[ ${#failed[@]} -eq 0 ]] || { echo "read-only failures: ${failed[*]}"; return 1; }
}

scenario_14() { # the real clients, wrapped and direct
  "$CT_DIR/clients.sh" "$IMAGE"
}

# calico STEP ARGS...: a calico-in-container.sh step in the running container.
calico() {
  echo "- calico $*"
  local rc=0
  timeout "$STEP_TIMEOUT" docker exec "$CONTAINER" calico-test "$@" || rc=$?
  [[ $rc -ne 124 ]] || echo "  FAIL: step timed out after ${STEP_TIMEOUT}s"
  return "$rc"
}

scenario_15() { # a Calico-like upgrade: ipsets both backends read, legacy's rules removed
  # The node forwards between its pods (/proc/sys is read-only inside).
  start --sysctl net.ipv4.ip_forward=1 --volume "$CT_DIR/calico-in-container.sh:/usr/local/bin/calico-test:ro"
  host_link legacy
  calico node
  calico rules legacy
  calico packets 10.244.1.3
  echo "- the host switches to nft; Calico writes its rules again there, legacy's stay"
  host_link nft
  calico rules nft
  calico packets 10.244.1.3
  calico remove 10.244.1.4
}

case "$SCENARIO" in
  [1-9]|10|11|12|14|15) "scenario_$SCENARIO" ;;
  12:*) host_layout_states "${SCENARIO#12:}" ;;
  only-nft) scenario_only_nft ;;
  *) die "unknown scenario '$SCENARIO'" ;;
esac
echo "scenario $SCENARIO passed"
