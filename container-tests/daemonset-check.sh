#!/usr/bin/env bash
# Runs the containers of examples/daemonset.yaml as a node would, in docker:
# each with the securityContext, environment, command and volumes the
# manifest gives it (container-tests/daemonset-pod.py renders them; the
# node's file system is a fake root in a temporary directory, its network a
# container of its own with --network none), in an image with the wrapper
# and a shell (the matrix's bookworm test image, built the way the README's
# Debian recipe builds one, and its distroless one, with busybox's sh).
#
#   container-tests/daemonset-check.sh IMAGE     (IPTW_DAEMONSET_YAML: another manifest)
#
# Checks, in the upgrade's mixed state (legacy rules and a FORWARD DROP
# policy left behind, the host's link saying nft):
#   1 the init container by default only shows: exit 0, the report in its
#     log, legacy untouched, no backup;
#   2 with REMOVE_STALE=true: exit 0, legacy emptied, its rules in a new
#     backup, old backups pruned to KEEP_BACKUPS (12 made beforehand);
#   3 with REMOVE_STALE=true and the host's backend not certain (no host
#     link): exit 0, refused in the log, legacy untouched;
#   4 the capabilities: the init container's (SYS_ADMIN) can make a scratch
#     network namespace under the default seccomp profile, the main
#     container's cannot;
#   5 the main container's command runs with only its capabilities on a
#     read-only root (detect, then iptables -S through the wrapper);
#   6 the metrics sidecar writes iptables_wrapper.prom (when the wrapper has
#     `detect --format prometheus`; without it, no file and a log line);
#   7 on the node, nothing is created outside /run.
# Needs PyYAML (the venv scripts/install-deps.sh makes, or the system's).
# Exit 0 when every check passed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

IMAGE="${1:?usage: daemonset-check.sh IMAGE}"
YAML="${IPTW_DAEMONSET_YAML:-$REPO_DIR/examples/daemonset.yaml}"
PY="$(ls -d "${IPTW_DEV_TOOLS:-$REPO_DIR/target/dev-tools}"/kubernetes-validate-*/bin/python 2>/dev/null | sort -V | tail -n1 || true)"
[[ -n "$PY" ]] || PY=python3
"$PY" -c 'import yaml' 2>/dev/null || die "PyYAML is needed (scripts/install-deps.sh installs it in its venv)"
read -r -a PRIVILEGE <<<"${IPTW_PRIVILEGE:---cap-add NET_ADMIN --cap-add NET_RAW}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/iptw-daemonset.XXXXXX")"
NODE=""
cleanup() {
  if [[ -n "$NODE" ]]; then docker rm -f "$NODE" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

failed=0
fail() { echo "  FAIL: $*"; failed=1; }
ok() { echo "  ok: $*"; }

# The node: its root file system (a Debian host on nft: the alternatives
# link is what the wrapper reads) and its network namespace, where `node`
# runs the host's own iptables commands.
mkdir -p "$WORK/host/etc/alternatives" "$WORK/host/run" "$WORK/host/usr/sbin" "$WORK/host/lib/modules"
ln -s /usr/sbin/iptables-nft "$WORK/host/etc/alternatives/iptables"
ln -s /usr/sbin/ip6tables-nft "$WORK/host/etc/alternatives/ip6tables"
(cd "$WORK/host" && find . | sort) >"$WORK/host-before"
NODE="$(docker run -d --network none "${PRIVILEGE[@]}" --label "iptables-wrapper-test=${IPTW_RUN_ID:-manual}" \
  --entrypoint sleep "$IMAGE" 600)"
node() { docker exec "$NODE" "$@"; }
mixed_state() {
  node xtables-legacy-multi iptables -w -F
  node xtables-legacy-multi iptables -w -A INPUT -s 192.0.2.1 -j DROP
  node xtables-legacy-multi iptables -w -P FORWARD DROP
  node xtables-nft-multi iptables -F INPUT
  node xtables-nft-multi iptables -A INPUT -s 192.0.2.2 -j ACCEPT
}
legacy_rules() { node xtables-legacy-multi iptables-save | grep -c '^-A' || true; }

# pod_args CONTAINER [KEY=VALUE...]: ARGS, the docker run arguments of
# CONTAINER of the manifest, as the node would run it.
pod_args() {
  ARGS=()
  mapfile -d '' -t ARGS < <("$PY" "$CT_DIR/daemonset-pod.py" "$YAML" "$1" "$IMAGE" "$NODE" "$WORK" "${@:2}")
  [[ ${#ARGS[@]} -gt 0 ]] || die "daemonset-pod.py rendered nothing for $1"
}
# pod CONTAINER [KEY=VALUE...]: run it to its end (at most 60 s); prints its
# log, returns its status.
pod() {
  pod_args "$@"
  timeout 60 docker run --rm "${ARGS[@]}" 2>&1
}
# pod_for SECONDS CONTAINER: run a container that never ends for SECONDS;
# prints its log.
pod_for() {
  local id
  pod_args "$2"
  id="$(docker run -d "${ARGS[@]}")"
  sleep "$1"
  docker logs "$id" 2>&1 || true
  docker rm -f "$id" >/dev/null 2>&1 || true
}

echo "1 the init container, defaults: shows only"
mixed_state
rc=0; out="$(pod stale-rules)" || rc=$?
echo "$out" | sed 's/^/    | /'
[[ $rc -eq 0 ]] && ok "exit 0" || fail "exit $rc (an init container must never fail)"
[[ "$out" == *"stale exited 1"* ]] && ok "the report says something is stale" || fail "no report of the stale state in the log"
[[ "$(legacy_rules)" == 1 ]] && ok "legacy untouched" || fail "legacy changed without REMOVE_STALE"
[[ -z "$(ls -A "$WORK/host/run/iptables-wrapper-stale-backups" 2>/dev/null)" ]] && ok "no backup" || fail "a backup was made without REMOVE_STALE"

echo "2 REMOVE_STALE=true: removes, backs up, prunes"
backups="$WORK/host/run/iptables-wrapper-stale-backups"
mkdir -p "$backups"
for i in $(seq -w 1 12); do mkdir "$backups/stale-backup-200001${i}T000000Z"; done
rc=0; out="$(pod stale-rules REMOVE_STALE=true)" || rc=$?
echo "$out" | sed 's/^/    | /'
[[ $rc -eq 0 ]] && ok "exit 0" || fail "exit $rc"
[[ "$(legacy_rules)" == 0 ]] && ok "legacy emptied" || fail "legacy still holds $(legacy_rules) rules"
node xtables-legacy-multi iptables -S FORWARD | grep -qx -- '-P FORWARD ACCEPT' && ok "FORWARD policy ACCEPT" || fail "FORWARD policy still DROP"
new=$(ls -d "$backups"/stale-backup-2* 2>/dev/null | grep -v '/stale-backup-2000' || true)
if [[ -n "$new" ]] && grep -q -- '-A INPUT -s 192.0.2.1/32 -j DROP' "$new/iptables-legacy.rules" 2>/dev/null; then
  ok "backup $(basename "$new") holds the removed rule"
else
  fail "no new backup holding the removed rule (found: $(ls "$backups" | tr '\n' ' '))"
fi
kept=$(ls "$backups" | wc -l)
[[ $kept == 10 ]] && ok "10 backups kept, the newest" || fail "$kept backups kept, expected 10"
[[ -e "$backups/stale-backup-20000104T000000Z" && ! -e "$backups/stale-backup-20000103T000000Z" ]] \
  && ok "the oldest ones pruned" || fail "pruned the wrong ones: $(ls "$backups" | tr '\n' ' ')"

echo "3 REMOVE_STALE=true, the host's backend not certain: refused, never blocking"
mixed_state
mv "$WORK/host/etc/alternatives" "$WORK/host/etc/alternatives.away"
rc=0; out="$(pod stale-rules REMOVE_STALE=true)" || rc=$?
mv "$WORK/host/etc/alternatives.away" "$WORK/host/etc/alternatives"
echo "$out" | sed 's/^/    | /'
[[ $rc -eq 0 ]] && ok "exit 0" || fail "exit $rc"
[[ "$out" == *"--remove exited 2"* ]] && ok "the removal refused" || fail "no refusal in the log"
[[ "$(legacy_rules)" == 1 ]] && ok "legacy untouched" || fail "legacy changed while not certain"

echo "4 capabilities: only the init container can make a scratch network namespace"
# The manifest's security contexts, with unshare for the command: the
# removal's proof of its backup needs unshare(CLONE_NEWNET).
scratch_netns() {
  local i
  pod_args "$1"
  for ((i = 0; i < ${#ARGS[@]}; i++)); do [[ "${ARGS[i]}" == --entrypoint ]] && break; done
  docker run --rm "${ARGS[@]:0:i}" --entrypoint unshare "$IMAGE" -n true >/dev/null 2>&1
}
scratch_netns stale-rules && ok "stale-rules: unshare -n works (SYS_ADMIN, RuntimeDefault seccomp)" \
  || fail "stale-rules cannot make a network namespace: the removal cannot prove its backup"
if scratch_netns example; then fail "example can make a network namespace: it has more than it needs"; else ok "example: unshare -n refused"; fi

echo "5 the main container"
mixed_state
out="$(pod_for 8 example)"
echo "${out:0:3000}" | sed 's/^/    | /'
[[ "$out" == nft* ]] && ok "detect decided nft (the host link)" || fail "detect did not decide nft"
[[ "$out" == *"-A INPUT -s 192.0.2.2/32 -j ACCEPT"* ]] && ok "iptables -S through the wrapper listed nft's rule" || fail "iptables -S did not list nft's rule"

echo "6 the metrics sidecar"
textfile="$WORK/host/run/node-exporter/textfile"
out="$(pod_for 6 metrics)"
echo "${out:0:2000}" | sed 's/^/    | /'
if docker run --rm --network none --entrypoint iptables-wrapper "$IMAGE" detect --format prometheus >/dev/null 2>&1; then
  [[ -s "$textfile/iptables_wrapper.prom" ]] && ok "iptables_wrapper.prom written" || fail "no iptables_wrapper.prom"
else
  [[ ! -e "$textfile/iptables_wrapper.prom" && "$out" == *"exited"* ]] \
    && ok "this wrapper has no --format prometheus: no file, and the log says so" \
    || fail "without --format prometheus: a file was left or the log is silent"
fi
[[ -z "$(ls "$textfile" | grep -v '^iptables_wrapper.prom$' || true)" ]] && ok "no temporary file left" || fail "left: $(ls "$textfile")"

echo "7 on the node, nothing created outside /run"
created=$(cd "$WORK/host" && find . | sort | comm -13 "$WORK/host-before" - | grep -v '^\./run/' || true)
[[ -z "$created" ]] && ok "nothing" || fail "created outside /run: $created"

[[ $failed -eq 0 ]] && echo "daemonset: pass"
exit "$failed"
