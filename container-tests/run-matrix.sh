#!/usr/bin/env bash
# The container test matrix: every scenario in every image, each in fresh
# privileged containers, then a summary table and "N passed, M failed".
#
#   container-tests/run-matrix.sh [--flavours LIST] [--scenarios LIST] [--recipes LIST]
#
# LIST is comma-separated: flavours bullseye,bookworm,trixie,distroless;
# scenarios 1..15 (see scenario.sh); recipes: the Dockerfile snippets by
# marker in README.md and docs/ that scenario 13 does not build
# (container-tests/doc-snippets.sh --list), each built as printed from the
# repository root and checked by doc-recipe.sh, or none. Default: all of each
# (recipes: none when there is no README.md beside container-tests). With
# bookworm or distroless in the run, the example DaemonSet's containers also
# run there, without a shell, as a node would run them (daemonset-check.sh).
# Scenarios 1-8 and
# 11 run in every flavour; 9 (Docker's engine as a client) and 10 (a non-root
# image) each need an image of their own and run once, in it; 12 (every node
# OS's host layout: it tests the host side, not the image) runs once, in
# bookworm; 13 builds the recipe for each distribution as printed (README.md, docs/images/),
# on images laid out as those distributions do (distro-recipes.sh), and runs
# the host states in each; 14 (the real clients: ufw, firewalld, fail2ban,
# wg-quick, ferm, podman with netavark, from Debian's packages, wrapped and
# direct, clients.sh) runs once, in the clients image, and checks the
# README's "Tested with" table against its results; 15 (a Calico-like
# upgrade: ipsets, packets through pods) runs once, in the ipset image.
#
# Environment:
#   IPTW_WRAPPER      the static wrapper binary (for this machine's
#                     architecture) to test (default: build it with
#                     scripts/build-static.sh); the matrix puts it into the
#                     image users copy from (the top-level Dockerfile) and
#                     builds each test image from that image (COPY --from)
#   IPTW_WRAPPER_IMAGE test this wrapper image (built from the top-level
#                     Dockerfile, e.g. a released one) instead of building one
#   IPTW_KEEP_IMAGES  1: keep this run's wrapper and test images (tags
#                     iptables-wrapper:matrix-RUN and iptables-wrapper-test:FLAVOUR-RUN)
#   IPTW_BASE_SOURCE  local (default: mmdebstrap from this machine's apt
#                     sources, no registry) or pull (FROM debian:SUITE)
#   IPTW_DEBIAN_IMAGE with pull: the image repository (default: debian)
#   IPTW_DEBIAN_MIRROR with local: the Debian archive URI (default: the
#                     one this machine's apt uses)
#   IPTW_PRIVILEGE    docker run options that give a container the rights of
#                     the host's iptables (default: --privileged when the
#                     engine grants it, else --cap-add NET_ADMIN --cap-add NET_RAW)
#   IPTW_STEP_TIMEOUT seconds one step inside a container may take (120)
#   IPTW_LOG_DIR      keep every cell's log there (default: logs of failed
#                     cells are printed, then all are removed)
# Exit status: 0 when every cell passed, 1 otherwise.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FLAVOURS=("${ALL_FLAVOURS[@]}")
SCENARIOS=(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
RECIPES=()
if [[ -r "$REPO_DIR/README.md" ]]; then
  # A broken marker fails the run here; pages without any other marked
  # Dockerfile snippet would leave its recipes unchecked, so that fails too.
  snippets="$("$CT_DIR/doc-snippets.sh" --list)"
  # Scenario 13 builds each distribution's recipe (distro-recipes.sh
  # --names); the rest are built here.
  distro_recipes=" $("$CT_DIR/distro-recipes.sh" --names | tr '\n' ' ') "
  mapfile -t RECIPES < <(awk -v skip="$distro_recipes" '$2 == "dockerfile" && index(skip, " " $1 " ") == 0 { print $1 }' <<<"$snippets")
  [[ ${#RECIPES[@]} -gt 0 ]] || die "README.md and docs/ have no Dockerfile snippet marked <!-- snippet: NAME --> besides scenario 13's (doc-snippets.sh --list)"
fi
while [[ $# -gt 0 ]]; do
  case "$1" in
    --flavours) IFS=, read -r -a FLAVOURS <<<"$2"; shift 2 ;;
    --scenarios) IFS=, read -r -a SCENARIOS <<<"$2"; shift 2 ;;
    --recipes) IFS=, read -r -a RECIPES <<<"$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

# The image of each single-image scenario (a base of build-base.sh that is
# not a flavour); the other scenarios run in every flavour.
declare -A SOLO_IMAGE=([9]=dind [10]=nonroot [12]=bookworm [14]=clients [15]=ipset)
FLAVOUR_SCENARIOS=() SOLO_SCENARIOS=() DISTRO_RECIPES=0
for s in "${SCENARIOS[@]}"; do
  case "$s" in
    13) DISTRO_RECIPES=1 ;;
    [1-8]|11) FLAVOUR_SCENARIOS+=("$s") ;;
    9|10|12|14|15) SOLO_SCENARIOS+=("$s") ;;
    *) die "unknown scenario '$s' (see --help)" ;;
  esac
done
[[ ${#FLAVOUR_SCENARIOS[@]} -gt 0 ]] || FLAVOURS=()
IMAGES=("${FLAVOURS[@]}")
for s in "${SOLO_SCENARIOS[@]}"; do
  [[ " ${IMAGES[*]} " == *" ${SOLO_IMAGE[$s]} "* ]] || IMAGES+=("${SOLO_IMAGE[$s]}")
done

export IPTW_RUN_ID="$$-$(date +%s)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/iptw-matrix.XXXXXX")"
RUN_IMAGES=()
cleanup() {
  # Containers of this run that a killed scenario.sh could not remove.
  local left
  left="$(docker ps -aq --filter "label=iptables-wrapper-test=$IPTW_RUN_ID" 2>/dev/null || true)"
  if [[ -n "$left" ]]; then docker rm -f $left >/dev/null 2>&1 || true; fi
  # This run's images are tagged with its id, so concurrent runs (of other
  # wrappers) never test each other's images; the tags go with the run.
  if [[ "${IPTW_KEEP_IMAGES:-0}" != 1 && ${#RUN_IMAGES[@]} -gt 0 ]]; then
    docker rmi "${RUN_IMAGES[@]}" >/dev/null 2>&1 || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed)"

START=$SECONDS

# The wrapper under test, as the image users copy it from: the top-level
# Dockerfile, built from a staged context holding only the binary at the path
# that Dockerfile expects (not the repository with its target/ directory).
if [[ -n "${IPTW_WRAPPER_IMAGE:-}" ]]; then
  WRAPPER_IMAGE="$IPTW_WRAPPER_IMAGE"
  log "testing the wrapper image $WRAPPER_IMAGE"
else
  if [[ -z "${IPTW_WRAPPER:-}" ]]; then
    log "building the static release binary (scripts/build-static.sh)"
    IPTW_WRAPPER=$(bash "$REPO_DIR/scripts/build-static.sh")
  fi
  [[ -x "$IPTW_WRAPPER" ]] || die "wrapper binary not found: $IPTW_WRAPPER"
  if [[ "$(ldd "$IPTW_WRAPPER" 2>&1 || true)" == *"=>"* ]]; then
    die "$IPTW_WRAPPER is dynamically linked; the distroless image needs a static binary"
  fi
  # Docker's architecture, and the binary's name in the Dockerfile's context.
  binary_arch=$(uname -m)
  case "$binary_arch" in
    x86_64) docker_arch=amd64 ;;
    aarch64) docker_arch=arm64 ;;
    armv7l) docker_arch=arm binary_arch=armv7 ;;
    ppc64le | riscv64 | s390x) docker_arch=$binary_arch ;;
    *) die "no wrapper image recipe for this machine's architecture $(uname -m)" ;;
  esac
  WRAPPER_CONTEXT="$WORK/wrapper-context"
  mkdir -p "$WRAPPER_CONTEXT/dist"
  cp "$IPTW_WRAPPER" "$WRAPPER_CONTEXT/dist/iptables-wrapper-$binary_arch"
  WRAPPER_IMAGE="iptables-wrapper:matrix-$IPTW_RUN_ID"
  RUN_IMAGES+=("$WRAPPER_IMAGE")
  log "wrapper image $WRAPPER_IMAGE (Dockerfile, TARGETARCH=$docker_arch)"
  quietly docker build --force-rm -t "$WRAPPER_IMAGE" -f "$REPO_DIR/Dockerfile" \
    --build-arg "TARGETARCH=$docker_arch" "$WRAPPER_CONTEXT"
fi

# Base images (cached by content key), then one test image per flavour, built
# by Dockerfile.test from the base and the wrapper image, from a context of
# the test helper alone.
log "base images"
declare -A BASE
while read -r flavour image; do
  BASE[$flavour]="$image"
done < <([[ ${#IMAGES[@]} -eq 0 ]] || "$CT_DIR/build-base.sh" "${IMAGES[@]}")
BASES_DONE=$SECONDS

CONTEXT="$WORK/context"
mkdir -p "$CONTEXT/container-tests"
cp "$CT_DIR/in-container.sh" "$CONTEXT/container-tests/in-container.sh"
declare -A TEST_IMAGE
for flavour in "${IMAGES[@]}"; do
  TEST_IMAGE[$flavour]="$TEST_REPO:$flavour-$IPTW_RUN_ID"
  RUN_IMAGES+=("${TEST_IMAGE[$flavour]}")
  log "test image ${TEST_IMAGE[$flavour]} from ${BASE[$flavour]} and $WRAPPER_IMAGE"
  quietly docker build --force-rm -t "${TEST_IMAGE[$flavour]}" -f "$REPO_DIR/Dockerfile.test" \
    --build-arg "BASE=${BASE[$flavour]}" --build-arg "WRAPPER_IMAGE=$WRAPPER_IMAGE" "$CONTEXT"
done
# The non-root image: that test image with file capabilities and a user.
if [[ -n "${TEST_IMAGE[nonroot]:-}" ]]; then
  nonroot_user="$TEST_REPO:nonroot-user-$IPTW_RUN_ID"
  RUN_IMAGES+=("$nonroot_user")
  log "test image $nonroot_user from ${TEST_IMAGE[nonroot]}"
  quietly docker build --force-rm -t "$nonroot_user" -f "$CT_DIR/nonroot.Dockerfile" \
    --build-arg "BASE=${TEST_IMAGE[nonroot]}" "$CONTEXT"
  TEST_IMAGE[nonroot]="$nonroot_user"
fi
IMAGES_DONE=$SECONDS

# --privileged fails on an engine that lacks some capability itself (a
# daemon inside a restricted sandbox: "unable to apply caps"). Then fall back
# to what iptables needs, the capabilities a Kubernetes pod would be granted
# (SYS_ADMIN as the init container that runs `stale --remove` gets it: the
# removal proves its backup in a scratch network namespace of its own).
# (Scenarios 9 and 10 set their own.)
# The probe runs the wrapper image's static binary, there whatever runs.
if [[ -z "${IPTW_PRIVILEGE:-}" ]]; then
  if docker run --rm --privileged --network none --entrypoint /usr/sbin/iptables-wrapper \
    "$WRAPPER_IMAGE" --version >/dev/null 2>&1; then
    IPTW_PRIVILEGE="--privileged"
  else
    IPTW_PRIVILEGE="--cap-add NET_ADMIN --cap-add NET_RAW --cap-add SYS_ADMIN"
    log "this engine cannot start --privileged containers; using $IPTW_PRIVILEGE"
  fi
fi
export IPTW_PRIVILEGE

# The matrix. Each cell is a child process (scenario.sh), so a failing step
# ends that cell only.
LOGS="${IPTW_LOG_DIR:-$WORK/logs}"
mkdir -p "$LOGS"
declare -A RESULT
passed=0 failed=0
# run_cell IMAGE SCENARIO: one cell; IMAGE is a flavour or a single-image
# scenario's image.
CELLS=()
run_cell() {
  local image="$1" s="$2" cell_start=$SECONDS
  CELLS+=("$image,$s")
  if "$CT_DIR/scenario.sh" "${TEST_IMAGE[$image]}" "$s" >"$LOGS/$image-$s.log" 2>&1; then
    RESULT[$image,$s]=pass; passed=$((passed + 1))
  else
    RESULT[$image,$s]=FAIL; failed=$((failed + 1))
  fi
  log "$image scenario $s: ${RESULT[$image,$s]} ($((SECONDS - cell_start))s)"
}
for flavour in "${FLAVOURS[@]}"; do
  for s in "${FLAVOUR_SCENARIOS[@]}"; do run_cell "$flavour" "$s"; done
done
for s in "${SOLO_SCENARIOS[@]}"; do run_cell "${SOLO_IMAGE[$s]}" "$s"; done
[[ "${RECIPES[*]}" != none ]] || RECIPES=()
for recipe in "${RECIPES[@]}"; do
  cell_start=$SECONDS
  CELLS+=("recipe,$recipe")
  if "$CT_DIR/doc-recipe.sh" "$recipe" "$WRAPPER_IMAGE" >"$LOGS/recipe-$recipe.log" 2>&1; then
    RESULT[recipe,$recipe]=pass; passed=$((passed + 1))
  else
    RESULT[recipe,$recipe]=FAIL; failed=$((failed + 1))
  fi
  log "recipe $recipe (README.md, docs/): ${RESULT[recipe,$recipe]} ($((SECONDS - cell_start))s)"
done
# The example DaemonSet's containers as a node runs them, on a node whose /
# is a private mount, from the bookworm (the README's Debian recipe) and
# distroless test images of this run, each with every shell taken out
# (daemonset-check.sh), as the distroless recipe's image has none.
DAEMONSET_CELLS=()
for flavour in bookworm distroless; do
  [[ -n "${TEST_IMAGE[$flavour]:-}" && -r "$REPO_DIR/examples/daemonset.yaml" ]] || continue
  cell_start=$SECONDS
  CELLS+=("daemonset,$flavour") DAEMONSET_CELLS+=("$flavour")
  if "$CT_DIR/daemonset-check.sh" "${TEST_IMAGE[$flavour]}" >"$LOGS/daemonset-$flavour.log" 2>&1; then
    RESULT[daemonset,$flavour]=pass; passed=$((passed + 1))
  else
    RESULT[daemonset,$flavour]=FAIL; failed=$((failed + 1))
  fi
  log "examples/daemonset.yaml in $flavour: ${RESULT[daemonset,$flavour]} ($((SECONDS - cell_start))s)"
done
if [[ "$DISTRO_RECIPES" == 1 ]]; then
  cell_start=$SECONDS
  CELLS+=("recipes,13")
  if "$CT_DIR/distro-recipes.sh" "$WRAPPER_IMAGE" >"$LOGS/recipes-13.log" 2>&1; then
    RESULT[recipes,13]=pass; passed=$((passed + 1))
  else
    RESULT[recipes,13]=FAIL; failed=$((failed + 1))
  fi
  log "distribution recipes, scenario 13: ${RESULT[recipes,13]} ($((SECONDS - cell_start))s)"
fi

# Failed cells' logs, then the table.
for cell in "${CELLS[@]}"; do
  [[ "${RESULT[$cell]}" == FAIL ]] || continue
  printf '\n----- %s, scenario %s -----\n' "${cell%,*}" "${cell#*,}"
  cat "$LOGS/${cell%,*}-${cell#*,}.log"
done

echo
if [[ ${#FLAVOURS[@]} -gt 0 ]]; then
  printf '%-14s' image; printf ' %5s' "${FLAVOUR_SCENARIOS[@]}"; echo
  for flavour in "${FLAVOURS[@]}"; do
    printf '%-14s' "$flavour"
    for s in "${FLAVOUR_SCENARIOS[@]}"; do printf ' %5s' "${RESULT[$flavour,$s]}"; done
    echo
  done
fi
for s in "${SOLO_SCENARIOS[@]}"; do
  printf '%-14s %5s: %s\n' "${SOLO_IMAGE[$s]}" "$s" "${RESULT[${SOLO_IMAGE[$s]},$s]}"
done
for recipe in "${RECIPES[@]}"; do
  printf 'recipe %s (built as printed from its page): %s\n' "$recipe" "${RESULT[recipe,$recipe]}"
done
for flavour in "${DAEMONSET_CELLS[@]}"; do
  printf 'examples/daemonset.yaml, its containers as a node runs them, in %s: %s\n' "$flavour" "${RESULT[daemonset,$flavour]}"
done
[[ "$DISTRO_RECIPES" == 0 ]] || printf '%-14s %5s: %s\n' recipes 13 "${RESULT[recipes,13]}"
echo "scenarios: 1 host legacy, 2 host nft, 3 upgrade without restart, 4 stale legacy outnumbers nft,"
echo "           5 IPTABLES_MODE, 6 restore/save, 7 read-only root (1-6, 8, 11), 8 50 concurrent calls while flipping,"
echo "           9 Docker's engine starts in the stale-legacy state (own image),"
echo "           10 non-root user, backends with file capabilities (own image),"
echo "           11 the upgrade's stale legacy state removed without a reboot (stale --remove, backup restored),"
echo "           12 every node OS's host layout at /host, legacy, nft and switched (bookworm),"
echo "           13 the distribution recipes of README.md and docs/images/ (Debian, Alpine 3.22/3.23, Fedora 42, UBI 9, Wolfi) built as printed, states 1-3,"
echo "           14 real clients from Debian's packages, wrapped and direct, in three host states (clients image, clients.sh),"
echo "           15 a Calico-like upgrade: ipsets both backends read, legacy's rules removed, packets as before (ipset image)"
echo "containers: --network none${IPTW_PRIVILEGE:+ $IPTW_PRIVILEGE} (9 and 10: their own, see scenario.sh)"
echo "time: base images $((BASES_DONE - START))s, test images $((IMAGES_DONE - BASES_DONE))s, scenarios $((SECONDS - IMAGES_DONE))s, total $((SECONDS - START))s"
[[ -n "${IPTW_LOG_DIR:-}" ]] && echo "logs: $IPTW_LOG_DIR"
echo
echo "$passed passed, $failed failed"
[[ "$failed" -eq 0 ]]
