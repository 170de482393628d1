#!/usr/bin/env bash
# What a wrapped call costs in the non-root image (docs/nonroot.md, "Non-root images"):
# the wrapper without capabilities (its kernel reads refused, it runs the
# backends' save tools) against a copy with file capabilities of its own, with
# and without the host link mounted. Needs the image that run-matrix.sh builds
# for scenario 10, kept after the run:
#
#   IPTW_KEEP_IMAGES=1 container-tests/run-matrix.sh --scenarios 10
#   container-tests/nonroot-cost.sh IMAGE [ITERATIONS]     (default 61 iterations)
#
# IMAGE is the iptables-wrapper-test:nonroot-user-RUN tag that run printed.
#
# Prints the median milliseconds of `iptables -V` per setup and state. Every
# state is loaded in a fresh --network none container; nothing else is touched.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

IMAGE="${1:?usage: nonroot-cost.sh IMAGE [ITERATIONS] (see the top of this file)}"
ITERATIONS="${2:-61}"
image_exists "$IMAGE" || die "no image $IMAGE: run IPTW_KEEP_IMAGES=1 container-tests/run-matrix.sh --scenarios 10 first"

HOST_DIR="$(mktemp -d "${TMPDIR:-/tmp}/iptw-cost.XXXXXX")"
CONTAINER=""
cleanup() {
  if [[ -n "$CONTAINER" ]]; then docker rm -f "$CONTAINER" >/dev/null 2>&1 || true; fi
  rm -rf "$HOST_DIR"
}
trap cleanup EXIT
mkdir "$HOST_DIR/alternatives"
ln -s /usr/sbin/iptables-nft "$HOST_DIR/alternatives/iptables"
touch "$HOST_DIR/xtables.lock"
chmod 0644 "$HOST_DIR/xtables.lock"

# Runs inside the container (bash): load the state, time the calls.
MEASURE='
set -euo pipefail
legacy=$1 nft=$2 iterations=$3
ruleset() {
  echo "*filter"; echo ":INPUT ACCEPT [0:0]"; echo ":FORWARD ACCEPT [0:0]"; echo ":OUTPUT ACCEPT [0:0]"
  for ((i = 0; i < $1; i++)); do
    echo "-A FORWARD -s 10.$2.$((i / 250)).$((i % 250 + 1))/32 -p tcp -m tcp --dport 80 -m comment --comment svc-$i -j ACCEPT"
  done
  echo COMMIT
}
ruleset "$legacy" 1 | xtables-legacy-multi iptables-restore -w
ruleset "$nft" 2 | xtables-nft-multi iptables-restore
median_ms() {
  local start end r
  for ((r = 0; r < iterations; r++)); do
    start=${EPOCHREALTIME/./}; "$@" >/dev/null 2>&1; end=${EPOCHREALTIME/./}
    echo $((end - start))
  done | sort -n | awk "{ a[NR] = \$1 } END { printf \"%.2f\", a[int((NR + 1) / 2)] / 1000 }"
}
picked() { "$@" 2>/dev/null | grep -o "(.*)"; }
printf "%6s + %6s  %-9s  %8s %8s  %8s %-13s  %8s %s\n" "$legacy" "$nft" "$4" \
  "$(median_ms xtables-nft-multi iptables -V)" "$(median_ms xtables-legacy-multi iptables -V)" \
  "$(median_ms iptables -V)" "$(picked iptables -V)" \
  "$(median_ms /opt/wrapper-with-caps/iptables -V)" "$(picked /opt/wrapper-with-caps/iptables -V)"
'

echo "median ms of $ITERATIONS calls of -V as uid 65532 (--cap-drop ALL --cap-add NET_ADMIN --cap-add NET_RAW --group-add 0)"
printf "%15s  %-9s  %8s %8s  %8s %-13s  %8s %s\n" "legacy + nft" "host link" "nft" "legacy" \
  "no caps" "(picked)" "caps" "(picked)"
for state in "1000 100" "100 1000" "10000 1000" "1000 10000"; do
  for link in none nft; do
    opts=(--detach --network none --cap-drop ALL --cap-add NET_ADMIN --cap-add NET_RAW --group-add 0
      --label "iptables-wrapper-test=cost-$$" --volume "$HOST_DIR/xtables.lock:/run/xtables.lock")
    [[ "$link" == none ]] || opts+=(--volume "$HOST_DIR/alternatives:/host/etc/alternatives:ro")
    CONTAINER="$(docker run "${opts[@]}" "$IMAGE" sleep 3600)"
    # shellcheck disable=SC2086
    docker exec "$CONTAINER" bash -c "$MEASURE" measure $state "$ITERATIONS" "$link"
    docker rm -f "$CONTAINER" >/dev/null
    CONTAINER=""
  done
done
