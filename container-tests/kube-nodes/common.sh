# shellcheck shell=bash
# What kube-nodes.sh, control-plane.sh, node.sh and kube-proxy/node.sh share.
KN_TOKEN=iptw-test-token
# wait_for SECONDS WHAT COMMAND...: until COMMAND succeeds, or fails saying WHAT.
wait_for() {
    local secs="$1" what="$2" i
    shift 2
    for ((i = 0; i < secs * 5; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "$what did not answer in ${secs}s" >&2
    return 1
}
# stop_all: SIGTERM to every pid in PIDS, then waits for them.
stop_all() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
