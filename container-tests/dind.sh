#!/usr/bin/env bash
# The container test matrix inside a Docker-in-Docker engine, the way a CI job
# with a docker:dind service runs it: an inner dockerd (Debian's docker.io,
# image built offline by build-base.sh like the base images) in a container
# of this machine's engine, and run-matrix.sh talking to that inner engine.
#
#   container-tests/dind.sh [--storage-driver DRIVER] [--bases load|inner] [RUN-MATRIX OPTIONS...]
#
#   --storage-driver  the inner engine's: overlay2, fuse-overlayfs (needs
#                     /dev/fuse) or vfs (works anywhere, slowest); default
#                     auto: the first of these that starts
#   --bases load      (default) build the base images here (cached) and hand
#                     them in with `docker save | docker load`; the dind
#                     container then has no network at all (--network none)
#   --bases inner     let run-matrix.sh build them inside (IPTW_BASE_SOURCE=pull
#                     or local, passed through); the dind container gets the
#                     default network for that
#   everything else goes to run-matrix.sh (--flavours, --scenarios)
#
# The outer engine need not grant --privileged: when it cannot (a daemon whose
# own capability bounding set lacks something, as in a sandbox), the dind
# container gets every capability the engine has, no seccomp or AppArmor
# profile, /dev/fuse and the host's cgroup tree, which is what dockerd needs.
# IPTW_DIND_PRIVILEGE overrides these docker run options.
#
# Environment passed through to run-matrix.sh: IPTW_BASE_SOURCE,
# IPTW_DEBIAN_IMAGE, IPTW_DEBIAN_MIRROR, IPTW_STEP_TIMEOUT. IPTW_WRAPPER: the
# binary to test (default: scripts/build-static.sh, built here). Nothing is
# bind-mounted from this machine's file system except the cgroup tree, so an
# outer engine on another host (DOCKER_HOST) works too.
# Exit status: run-matrix.sh's (0 when every cell passed).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STORAGE_DRIVER=auto
BASES=load
MATRIX_ARGS=()
FLAVOURS=("${ALL_FLAVOURS[@]}")
SCENARIOS=(1 2 3 4 5 6 7 8 9 10 11)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --storage-driver) STORAGE_DRIVER="$2"; shift 2 ;;
    --bases) BASES="$2"; shift 2 ;;
    --flavours) IFS=, read -r -a FLAVOURS <<<"$2"; MATRIX_ARGS+=("$1" "$2"); shift 2 ;;
    --scenarios) IFS=, read -r -a SCENARIOS <<<"$2"; MATRIX_ARGS+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) MATRIX_ARGS+=("$1"); shift ;;
  esac
done
case "$STORAGE_DRIVER" in
  overlay2|fuse-overlayfs|vfs) DRIVERS=("$STORAGE_DRIVER") ;;
  auto) DRIVERS=(overlay2 fuse-overlayfs vfs) ;;
  *) die "unknown storage driver '$STORAGE_DRIVER' (auto, overlay2, fuse-overlayfs or vfs)" ;;
esac
[[ "$BASES" == load || "$BASES" == inner ]] || die "unknown --bases '$BASES' (load or inner)"

docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed)"
START=$SECONDS

RUN_ID="$$-$(date +%s)"
CONTAINER="iptw-dind-$RUN_ID"
cleanup() { docker rm -fv "$CONTAINER" >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -z "${IPTW_WRAPPER:-}" ]]; then
  log "building the static release binary (scripts/build-static.sh)"
  IPTW_WRAPPER=$(bash "$REPO_DIR/scripts/build-static.sh")
fi
[[ -x "$IPTW_WRAPPER" ]] || die "wrapper binary not found: $IPTW_WRAPPER"

DIND_IMAGE="$("$CT_DIR/build-base.sh" dind | awk '{print $2}')"
LOAD_IMAGES=()
if [[ "$BASES" == load ]]; then
  names=("${FLAVOURS[@]}")
  [[ " ${FLAVOURS[*]} " == *" distroless "* ]] && names+=(distroless-src)
  # Scenarios 9, 10, 14 and 15 run in images of their own (see run-matrix.sh).
  [[ " ${SCENARIOS[*]} " == *" 9 "* ]] && names+=(dind)
  [[ " ${SCENARIOS[*]} " == *" 10 "* ]] && names+=(nonroot)
  [[ " ${SCENARIOS[*]} " == *" 14 "* ]] && names+=(clients)
  [[ " ${SCENARIOS[*]} " == *" 15 "* ]] && names+=(ipset)
  while read -r _ image; do LOAD_IMAGES+=("$image"); done < <("$CT_DIR/build-base.sh" "${names[@]}")
fi
PREPARED=$SECONDS

# The dind container's rights.
if [[ -n "${IPTW_DIND_PRIVILEGE:-}" ]]; then
  read -r -a privilege <<<"$IPTW_DIND_PRIVILEGE"
elif docker run --rm --privileged --network none "$DIND_IMAGE" true >/dev/null 2>&1; then
  privilege=(--privileged)
else
  # Every capability the engine can grant: --cap-add ALL minus those missing
  # from the engine's own bounding set (SYS_RESOURCE in a sandbox like this).
  privilege=(--cap-add ALL --security-opt seccomp=unconfined --security-opt apparmor=unconfined
    -v /sys/fs/cgroup:/sys/fs/cgroup)
  for cap in SYS_RESOURCE SYS_MODULE SYS_TIME SYS_BOOT SYS_RAWIO MAC_ADMIN MAC_OVERRIDE PERFMON BPF; do
    docker run --rm --network none "${privilege[@]}" "$DIND_IMAGE" true >/dev/null 2>&1 && break
    privilege+=(--cap-drop "$cap")
  done
  # /dev/fuse for fuse-overlayfs, where the engine's machine has one.
  if docker run --rm --network none "${privilege[@]}" --device /dev/fuse "$DIND_IMAGE" true >/dev/null 2>&1; then
    privilege+=(--device /dev/fuse)
  fi
  log "this engine cannot start --privileged containers; the dind container gets: ${privilege[*]}"
fi
network=(--network none)
[[ "$BASES" == inner ]] && network=()

# start_engine DRIVER: starts the dind container with an inner dockerd on
# DRIVER and waits for it; fails (container removed, log kept in $WORK_LOG)
# when it does not come up. /var/lib/docker is a volume (as in the
# docker:dind image): the inner engine's storage must not sit on the outer
# container's own overlay.
WORK_LOG="$(mktemp "${TMPDIR:-/tmp}/iptw-dind.XXXXXX")"
trap 'cleanup; rm -f "$WORK_LOG"' EXIT
start_engine() {
  log "starting the inner engine ($DIND_IMAGE, storage driver $1)"
  docker run -d --name "$CONTAINER" --label "iptables-wrapper-dind=$RUN_ID" \
    "${privilege[@]}" "${network[@]}" -v /var/lib/docker \
    "$DIND_IMAGE" dockerd --storage-driver="$1" --host=unix:///var/run/docker.sock >/dev/null
  for _ in $(seq 60); do
    docker exec "$CONTAINER" docker info >/dev/null 2>&1 && return 0
    [[ "$(docker inspect -f '{{.State.Running}}' "$CONTAINER")" == true ]] || break
    sleep 1
  done
  docker logs "$CONTAINER" >"$WORK_LOG" 2>&1 || true
  cleanup
  return 1
}
STORAGE_DRIVER=""
for driver in "${DRIVERS[@]}"; do
  if start_engine "$driver"; then STORAGE_DRIVER="$driver"; break; fi
  log "the inner dockerd did not come up with storage driver $driver; its log ends:"
  tail -5 "$WORK_LOG" >&2
done
[[ -n "$STORAGE_DRIVER" ]] || die "no storage driver worked for the inner dockerd (tried ${DRIVERS[*]})"
ENGINE_UP=$SECONDS

# What run-matrix.sh needs, copied in (no bind mount: the engine may be remote);
# README.md and docs/ for the recipes printed there.
tar -C "$REPO_DIR" --exclude=container-tests/.cache -cf - Dockerfile Dockerfile.test .dockerignore README.md docs container-tests \
  | docker exec -i "$CONTAINER" sh -c 'mkdir -p /src && tar -C /src -xf -'
docker cp "$IPTW_WRAPPER" "$CONTAINER:/src/iptables-wrapper" >/dev/null
if [[ ${#LOAD_IMAGES[@]} -gt 0 ]]; then
  log "handing in ${#LOAD_IMAGES[@]} base images (docker save | docker load)"
  docker save "${LOAD_IMAGES[@]}" | docker exec -i "$CONTAINER" docker load >/dev/null
fi
LOADED=$SECONDS

env_args=(-e IPTW_WRAPPER=/src/iptables-wrapper)
for name in IPTW_BASE_SOURCE IPTW_DEBIAN_IMAGE IPTW_DEBIAN_MIRROR IPTW_STEP_TIMEOUT; do
  [[ -n "${!name:-}" ]] && env_args+=(-e "$name=${!name}")
done
log "run-matrix.sh ${MATRIX_ARGS[*]} inside"
rc=0
docker exec "${env_args[@]}" "$CONTAINER" bash /src/container-tests/run-matrix.sh "${MATRIX_ARGS[@]}" || rc=$?
echo "dind: storage driver $STORAGE_DRIVER; time: preparing $((PREPARED - START))s, inner engine start" \
  "$((ENGINE_UP - PREPARED))s, hand-in $((LOADED - ENGINE_UP))s, matrix $((SECONDS - LOADED))s, total $((SECONDS - START))s"
exit "$rc"
