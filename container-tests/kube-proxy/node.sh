# shellcheck shell=bash
# A one-node control plane for kube-proxy, for use INSIDE a fresh network and
# mount namespace (unshare -n -m --propagation private): source it, then
#   node_up FAMILY DIR          tmpfs on /run, lo up, etcd + kube-apiserver on
#                               loopback, DIR/kubeconfig (a static admin token)
#   kp_start DIR BINDIR FAMILY [VAR=VALUE...]
#                               kube-proxy in iptables mode in the background,
#                               the six command names found first in BINDIR,
#                               its log in DIR/kube-proxy.log; traced with
#                               strace (execve only) into DIR/strace/ unless
#                               KP_STRACE=0; KP_SYNC_PERIOD (default 1h) is
#                               --iptables-sync-period
#   kp_stop                     SIGTERM to kube-proxy, wait for it
#   sync_count, sync_stats      kube-proxy's completed syncs ("COUNT SUM":
#                               and their summed duration in s), from /metrics
#   wait_syncs DIR N            until N syncs are done and none follows for 3 s
#   save_rules DIR              both backends' rules, both families
#   node_down                   stops everything node_up and kp_start started
# Needs KUBE_BIN (kube-proxy, kube-apiserver, kubectl) in the environment.
# Addresses: loopback only; the Service and Pod ranges are reserved
# documentation/benchmark ranges written into rules, never sent to.

# wait_for, from the two-node cluster's helpers.
# shellcheck source=../kube-nodes/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../kube-nodes/common.sh"
NODE_PIDS=()
kp_pid=""
NODE_TOKEN=iptw-test-token

node_up() {
    local family="$1" out="$2" gates="" cidr="198.18.0.0/16"
    mkdir -p "$out"
    mount -t tmpfs -o mode=0755 tmpfs /run
    ip link set lo up
    if [[ "$family" == dual ]]; then gates="--feature-gates=IPv6DualStack=true" cidr="198.18.0.0/16,2001:db8:42::/112"; fi
    etcd --data-dir "$out/etcd" --listen-client-urls http://127.0.0.1:2379 \
        --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
        >"$out/etcd.log" 2>&1 &
    NODE_PIDS+=($!)
    openssl genrsa -out "$out/sa.key" 2048 2>/dev/null
    openssl rsa -in "$out/sa.key" -pubout -out "$out/sa.pub" 2>/dev/null
    echo "$NODE_TOKEN,admin,admin,system:masters" >"$out/tokens.csv"
    cat >"$out/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: $NODE_TOKEN}}]
contexts: [{name: local, context: {cluster: local, user: admin}}]
current-context: local
EOF
    # kube-proxy is given the copy on /run (this namespace's own tmpfs): the
    # same path in every run, so its logged flags are the same too.
    mkdir -p /run/iptw-node
    cp "$out/kubeconfig" /run/iptw-node/kubeconfig
    NODE_KUBECONFIG=/run/iptw-node/kubeconfig
    wait_for 30 "etcd" curl -sf http://127.0.0.1:2379/health
    # --endpoint-reconciler-type=none: the "kubernetes" Service gets no
    # endpoints (its address would be loopback, which Endpoints refuse).
    # shellcheck disable=SC2086 # $gates: empty or one flag
    "$KUBE_BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 --bind-address=127.0.0.1 \
        --advertise-address=127.0.0.1 --secure-port=6443 --cert-dir="$out/certs" \
        --token-auth-file="$out/tokens.csv" --authorization-mode=AlwaysAllow \
        --service-cluster-ip-range="$cidr" --service-node-port-range=30000-32767 \
        --service-account-key-file="$out/sa.pub" --service-account-signing-key-file="$out/sa.key" \
        --service-account-issuer=https://kubernetes.default.svc --endpoint-reconciler-type=none \
        --disable-admission-plugins=ServiceAccount $gates >"$out/apiserver.log" 2>&1 &
    NODE_PIDS+=($!)
    wait_for 120 "kube-apiserver" curl -sfk -H "Authorization: Bearer $NODE_TOKEN" https://127.0.0.1:6443/readyz
    wait_for 30 "the default namespace" "$KUBE_BIN/kubectl" --kubeconfig "$NODE_KUBECONFIG" get namespace default
}

node_down() {
    local p
    [[ -n "$kp_pid" ]] && kp_stop
    for p in "${NODE_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${NODE_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    NODE_PIDS=()
}

kp_start() {
    local dir="$1" bindir="$2" family="$3" gates="" cluster_cidr=198.19.0.0/16 trace=()
    shift 3
    mkdir -p "$dir"
    if [[ "$family" == dual ]]; then
        gates="--feature-gates=IPv6DualStack=true" cluster_cidr=198.19.0.0/16,2001:db8:43::/48
    fi
    if [[ "${KP_STRACE:-1}" == 1 ]]; then
        mkdir -p "$dir/strace"
        trace=(strace -qq -ff --seccomp-bpf -ttt -v -s 4096 -e trace=execve -o "$dir/strace/trace")
    fi
    # The conntrack flags at 0: kube-proxy then writes no conntrack sysctl
    # (nf_conntrack_max and the hash size are the whole machine's).
    # shellcheck disable=SC2086 # $gates: empty or one flag
    env "$@" PATH="$bindir:/usr/sbin:/usr/bin:/sbin:/bin" "${trace[@]}" \
        "$KUBE_BIN/kube-proxy" --kubeconfig="$NODE_KUBECONFIG" --proxy-mode=iptables \
        --hostname-override=node-1 --bind-address=127.0.0.1 \
        --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 \
        --cluster-cidr="$cluster_cidr" \
        --conntrack-max-per-core=0 --conntrack-min=0 \
        --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
        --iptables-sync-period="${KP_SYNC_PERIOD:-1h}" --iptables-min-sync-period=1s --v=2 $gates \
        >"$dir/kube-proxy.log" 2>&1 &
    kp_pid=$!
}

kp_stop() {
    # Under strace, kp_pid is strace and kube-proxy its child: signal both.
    # Its children from /proc (pkill is procps's, which a minimal machine,
    # such as the suite's own container, lacks).
    local child
    for child in $(cat /proc/"$kp_pid"/task/*/children 2>/dev/null || true); do
        kill -TERM "$child" 2>/dev/null || true
    done
    kill -TERM "$kp_pid" 2>/dev/null || true
    wait "$kp_pid" 2>/dev/null || true
    kp_pid=""
}

kp_metric() {
    { curl -sf http://127.0.0.1:10249/metrics 2>/dev/null || true; } \
        | awk -v m="$1" '$1 == m { print $2; f = 1 } END { if (!f) print 0 }'
}
sync_count() { kp_metric kubeproxy_sync_proxy_rules_duration_seconds_count; }
# sync_stats: "COUNT SUM" from one scrape (two scrapes could straddle a sync).
sync_stats() {
    { curl -sf http://127.0.0.1:10249/metrics 2>/dev/null || true; } | awk '
        $1 == "kubeproxy_sync_proxy_rules_duration_seconds_count" { c = $2 }
        $1 == "kubeproxy_sync_proxy_rules_duration_seconds_sum" { s = $2 }
        END { print (c == "" ? 0 : c), (s == "" ? 0 : s) }'
}

wait_syncs() {
    local dir="$1" want="$2" i c=0 last
    for ((i = 0; i < 600; i++)); do
        c=$(sync_count)
        ((c >= want)) && break
        kill -0 "$kp_pid" 2>/dev/null || { echo "kube-proxy exited; its log:" >&2; tail -20 "$dir/kube-proxy.log" >&2; return 1; }
        sleep 0.1
    done
    ((c >= want)) || { echo "kube-proxy did not reach $want syncs in 60 s (at $c)" >&2; tail -20 "$dir/kube-proxy.log" >&2; return 1; }
    last=$c
    while sleep 3; c=$(sync_count); ((c != last)); do last=$c; done
}

save_rules() {
    local dir="$1"
    iptables-nft-save >"$dir/nft4.rules"
    ip6tables-nft-save >"$dir/nft6.rules"
    iptables-legacy-save >"$dir/legacy4.rules" # without -t: reads only the existing tables' names
    ip6tables-legacy-save >"$dir/legacy6.rules"
    cat /proc/net/ip_tables_names /proc/net/ip6_tables_names 2>/dev/null | sort -u >"$dir/legacy-tables.txt" || true
}
