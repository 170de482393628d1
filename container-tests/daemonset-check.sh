#!/usr/bin/env bash
# Runs the containers of examples/daemonset.yaml as a node would, in docker:
# each with the securityContext, environment, command, readinessProbe and
# volumes (mounted exactly as written) the manifest gives it
# (container-tests/daemonset-pod.py renders them; the node's file system is
# a fake root in a temporary directory, its network a container of its own
# with --network none). The pods run on a copy of IMAGE with every shell
# taken out (busybox and its links, sh, bash, dash), as the distroless
# recipe's image has none; the node and the checks use IMAGE itself.
#
#   container-tests/daemonset-check.sh IMAGE     (IPTW_DAEMONSET_YAML: another manifest)
#
# Checks, in the upgrade's mixed state (legacy rules and a FORWARD DROP
# policy left behind, the host's link saying nft), on a node whose / is a
# private mount (made so when it is not: a host without systemd):
#   0 the pod image has no shell; the host refuses HostToContainer
#     propagation, as such a node's runtime does;
#   1 the init container by default only shows: exit 0, the report in its
#     log, legacy untouched, no backup;
#   2 with REMOVE_STALE=true: exit 0, legacy emptied, its rules in a new
#     numbered backup, old backups pruned to KEEP_BACKUPS (12 made beforehand);
#   3 with REMOVE_STALE=true and the host's backend not certain (no host
#     link): exit 0, refused in the log, legacy untouched;
#   4 the capabilities: the init container's (SYS_ADMIN) can make a scratch
#     network namespace under the default seccomp profile, the main
#     container's cannot;
#   5 the metrics container with only its capabilities on a read-only root:
#     ready (its readinessProbe, run in it as kubelet runs it, exits 0), a
#     wrapped iptables -S in it lists nft's rule, iptables_wrapper.prom
#     written with no temporary file left, and on docker stop (SIGTERM)
#     exit 0 and the file removed;
#   6 a rollout with bad settings (IPTABLES_MODE: bogus; a misspelled key)
#     on a second node: that pod is not ready and writes no textfile, while
#     the first node's pod stays ready and its calls keep working;
#   7 on the node, nothing is created outside /run.
# Needs PyYAML (the venv scripts/install-deps.sh makes, or the system's),
# and root on the docker engine's machine to make a mount private.
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
NODE="" POD_IMAGE="iptables-wrapper-test:shell-less-${IPTW_RUN_ID:-manual}-$$" PRIVATE_MOUNT=0 PODS=()
cleanup() {
  if [[ ${#PODS[@]} -gt 0 ]]; then docker rm -f "${PODS[@]}" >/dev/null 2>&1 || true; fi
  if [[ -n "$NODE" ]]; then docker rm -f "$NODE" >/dev/null 2>&1 || true; fi
  docker rmi -f "$POD_IMAGE" >/dev/null 2>&1 || true
  if [[ "$PRIVATE_MOUNT" == 1 ]]; then umount "$WORK/host" || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

failed=0
fail() { echo "  FAIL: $*"; failed=1; }
ok() { echo "  ok: $*"; }

# The pods' image: IMAGE without a shell.
shell_less_image() {
  local cid
  cid="$(docker create "$IMAGE" true)"
  docker export "$cid" | "$PY" -c '
import sys, tarfile
shells = {"sh", "bash", "dash", "ash", "busybox", "rbash"}
src = tarfile.open(fileobj=sys.stdin.buffer, mode="r|")
dst = tarfile.open(fileobj=sys.stdout.buffer, mode="w|")
for m in src:
    base = m.name.rstrip("/").rsplit("/", 1)[-1]
    if base in shells or (m.issym() and m.linkname.rsplit("/", 1)[-1] == "busybox") \
            or (m.islnk() and m.linkname.rsplit("/", 1)[-1] in shells):
        continue
    dst.addfile(m, src.extractfile(m) if m.isreg() else None)
dst.close()' | docker import --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" - "$POD_IMAGE" >/dev/null
  docker rm "$cid" >/dev/null
}
shell_less_image

# The node: its root file system (a Debian host on nft: the alternatives
# link is what the wrapper reads) and its network namespace, where `node`
# runs the host's own iptables commands. make_host DIR lays one out.
make_host() {
  mkdir -p "$1/etc/alternatives" "$1/run" "$1/usr/sbin" "$1/lib/modules"
  ln -s /usr/sbin/iptables-nft "$1/etc/alternatives/iptables"
  ln -s /usr/sbin/ip6tables-nft "$1/etc/alternatives/ip6tables"
}
make_host "$WORK/host"
if [[ "$(findmnt -no PROPAGATION -T "$WORK/host")" != private ]]; then
  mount --bind "$WORK/host" "$WORK/host" && PRIVATE_MOUNT=1 && mount --make-private "$WORK/host" \
    || die "cannot make $WORK/host a private mount (needs root where the docker engine runs)"
fi
(cd "$WORK/host" && find . | sort) >"$WORK/host-before"
NODE="$(docker run -d --network none "${PRIVILEGE[@]}" --label "iptables-wrapper-test=${IPTW_RUN_ID:-manual}" \
  --entrypoint sleep "$IMAGE" 600)"
node() { docker exec "$NODE" "$@"; }
mixed_state() {
  node xtables-legacy-multi iptables -w -F
  node xtables-legacy-multi iptables -w -A INPUT -s 192.0.2.1 -j DROP
  node xtables-legacy-multi iptables -w -P FORWARD DROP
  node xtables-nft-multi iptables -F INPUT
  # The live backend enforces the same filtering, as after an upgrade:
  # removing legacy opens nothing.
  node xtables-nft-multi iptables -A INPUT -s 192.0.2.1 -j DROP
  node xtables-nft-multi iptables -A INPUT -s 192.0.2.2 -j ACCEPT
  node xtables-nft-multi iptables -P FORWARD DROP
}
legacy_rules() { node xtables-legacy-multi iptables-save | grep -c '^-A' || true; }

# pod_args CONTAINER [KEY=VALUE | settings:KEY=VALUE ...]: ARGS, the docker
# run arguments of CONTAINER of the manifest, as the node would run it
# (POD_WORK: the node's directory, default WORK).
pod_args() {
  ARGS=()
  mapfile -d '' -t ARGS < <("$PY" "$CT_DIR/daemonset-pod.py" "$YAML" "$1" "$POD_IMAGE" "$NODE" "${POD_WORK:-$WORK}" "${@:2}")
  [[ ${#ARGS[@]} -gt 0 ]] || die "daemonset-pod.py rendered nothing for $1"
}
# pod CONTAINER [...]: run it to its end (at most 60 s); prints its log,
# returns its status.
pod() {
  pod_args "$@"
  timeout 60 docker run --rm "${ARGS[@]}" 2>&1
}
# start CONTAINER [...]: POD, the id of the container started (it never
# ends; created first, so that one the engine refuses to start is removed too).
start() {
  pod_args "$@"
  POD="$(docker create "${ARGS[@]}")"
  PODS+=("$POD")
  docker start "$POD" >/dev/null
}
# ready ID CONTAINER: its readinessProbe, run in it as kubelet runs it.
ready() {
  local probe=()
  mapfile -d '' -t probe < <("$PY" "$CT_DIR/daemonset-pod.py" --probe "$YAML" "$2")
  [[ ${#probe[@]} -gt 0 ]] || die "no readinessProbe for $2"
  timeout 30 docker exec "$1" "${probe[@]}" >/dev/null 2>&1
}
# eventually SECONDS COMMAND...: COMMAND succeeds within SECONDS.
eventually() {
  local until=$((SECONDS + $1))
  shift
  until "$@"; do ((SECONDS < until)) || return 1; sleep 0.5; done
}

echo "0 the pod image has no shell; the node's / is private"
if docker run --rm --entrypoint /bin/sh "$POD_IMAGE" -c true >/dev/null 2>&1; then fail "$POD_IMAGE has a /bin/sh"; else ok "no /bin/sh in the pods' image"; fi
rc=0; out="$(docker run --rm --network none -v "$WORK/host:/host:ro,rslave" --entrypoint /usr/sbin/iptables-wrapper "$POD_IMAGE" --version 2>&1)" || rc=$?
[[ $rc -ne 0 && "$out" == *"not a shared or slave mount"* ]] && ok "HostToContainer on this node refused, as on a host without systemd" \
  || fail "the runtime accepted rslave on $WORK/host: the node's / is not private (exit $rc: $out)"

echo "1 the init container, defaults: shows only"
mixed_state
rc=0; out="$(pod stale-rules)" || rc=$?
echo "$out" | sed 's/^/    | /'
[[ $rc -eq 0 ]] && ok "exit 0" || fail "exit $rc (an init container must never fail)"
[[ "$out" == *"exit status 1 (something stale"* ]] && ok "the report says something is stale" || fail "no report of the stale state in the log"
[[ "$(legacy_rules)" == 1 ]] && ok "legacy untouched" || fail "legacy changed without REMOVE_STALE"
[[ -z "$(ls -A "$WORK/host/run/iptables-wrapper-stale-backups" 2>/dev/null)" ]] && ok "no backup" || fail "a backup was made without REMOVE_STALE"

echo "2 REMOVE_STALE=true: removes, backs up (numbered), prunes"
backups="$WORK/host/run/iptables-wrapper-stale-backups"
mkdir -p "$backups"
for i in $(seq -w 1 12); do mkdir "$backups/stale-backup-200001${i}T000000Z"; done
rc=0; out="$(pod stale-rules REMOVE_STALE=true)" || rc=$?
echo "$out" | sed 's/^/    | /'
[[ $rc -eq 0 ]] && ok "exit 0" || fail "exit $rc"
[[ "$(legacy_rules)" == 0 ]] && ok "legacy emptied" || fail "legacy still holds $(legacy_rules) rules"
node xtables-legacy-multi iptables -S FORWARD | grep -qx -- '-P FORWARD ACCEPT' && ok "FORWARD policy ACCEPT" || fail "FORWARD policy still DROP"
new=$(ls -d "$backups"/stale-backup-000001-* 2>/dev/null || true)
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
[[ "$out" == *"refused"* && "$out" == *"exit status 2"* ]] && ok "the removal refused" || fail "no refusal in the log"
[[ "$(legacy_rules)" == 1 ]] && ok "legacy untouched" || fail "legacy changed while not certain"

echo "4 capabilities: only the init container can make a scratch network namespace"
# The manifest's security contexts, with unshare for the command: the
# removal's proof of its backup needs unshare(CLONE_NEWNET).
scratch_netns() {
  local i
  pod_args "$1"
  for ((i = 0; i < ${#ARGS[@]}; i++)); do [[ "${ARGS[i]}" == --entrypoint ]] && break; done
  docker run --rm "${ARGS[@]:0:i}" --entrypoint unshare "$IMAGE" -n true >/dev/null 2>&1
  # (IMAGE, not the pods' image: unshare is the test's tool.)
}
scratch_netns stale-rules && ok "stale-rules: unshare -n works (SYS_ADMIN, RuntimeDefault seccomp)" \
  || fail "stale-rules cannot make a network namespace: the removal cannot prove its backup"
if scratch_netns metrics; then fail "metrics can make a network namespace: it has more than it needs"; else ok "metrics: unshare -n refused"; fi

echo "5 the metrics container"
mixed_state
textfile="$WORK/host/run/node-exporter/textfile"
start metrics
good="$POD"
eventually 30 ready "$good" metrics && ok "ready: its readinessProbe exits 0" || fail "not ready: $(docker logs "$good" 2>&1 | tail -3)"
out="$(docker exec "$good" iptables -w -S 2>&1 || true)"
[[ "$out" == *"-A INPUT -s 192.0.2.2/32 -j ACCEPT"* ]] && ok "iptables -S through the wrapper listed nft's rule" || fail "iptables -S: $out"
eventually 30 test -s "$textfile/iptables_wrapper.prom" && ok "iptables_wrapper.prom written" || fail "no iptables_wrapper.prom: $(docker logs "$good" 2>&1 | tail -3)"
grep -q '^iptables_wrapper_host_backend_info{family="ipv4",backend="nft",decided_by="host-link"} 1' "$textfile/iptables_wrapper.prom" \
  && ok "it says nft, by the host link read through the mounts as written" || fail "the textfile does not say nft by host-link: $(head -5 "$textfile/iptables_wrapper.prom")"
[[ -z "$(ls "$textfile" | grep -v '^iptables_wrapper.prom$' || true)" ]] && ok "no temporary file left" || fail "left: $(ls "$textfile")"

echo "6 a rollout with bad settings reaches a second node: that pod is not ready, the first keeps working"
mkdir -p "$WORK/node-b"
make_host "$WORK/node-b/host"
for bad in IPTABLES_MODE=bogus IPTABLES_MOD=nft; do
  POD_WORK="$WORK/node-b" start metrics "settings:$bad"
  sleep 3
  if ready "$POD" metrics; then fail "$bad: the pod is ready"; else ok "$bad: the pod is not ready (its probe fails)"; fi
  [[ ! -e "$WORK/node-b/host/run/node-exporter/textfile/iptables_wrapper.prom" ]] && ok "$bad: no textfile on its node" || fail "$bad: a textfile was written"
  docker logs "$POD" 2>&1 | grep -q "removed" && ok "$bad: its log says why" || fail "$bad: its log is silent: $(docker logs "$POD" 2>&1 | tail -2)"
  docker rm -f "$POD" >/dev/null
  ready "$good" metrics && ok "$bad: the first node's pod is still ready" || fail "$bad: the first node's pod is not ready"
  out="$(docker exec "$good" iptables -w -S INPUT 2>&1 || true)"
  [[ "$out" == *"192.0.2.2/32"* ]] && ok "$bad: its calls keep working" || fail "$bad: its iptables -S: $out"
done

echo "5b the metrics container on SIGTERM"
rc=0; docker stop -t 20 "$good" >/dev/null; rc="$(docker inspect -f '{{.State.ExitCode}}' "$good")"
[[ "$rc" == 0 ]] && ok "exit 0 on SIGTERM" || fail "exit $rc on SIGTERM"
[[ ! -e "$textfile/iptables_wrapper.prom" ]] && ok "the textfile removed" || fail "the textfile outlived its container"

echo "7 on the node, nothing created outside /run"
created=$(cd "$WORK/host" && find . | sort | comm -13 "$WORK/host-before" - | grep -v '^\./run/' || true)
[[ -z "$created" ]] && ok "nothing" || fail "created outside /run: $created"

[[ $failed -eq 0 ]] && echo "daemonset: pass"
exit "$failed"
