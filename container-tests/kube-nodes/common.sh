# shellcheck shell=bash
# What kube-nodes.sh, control-plane.sh and node.sh share.
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
