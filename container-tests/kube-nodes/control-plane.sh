# shellcheck shell=bash
# The control plane of the two-node cluster, run INSIDE a network and mount
# namespace of its own (kube-nodes.sh starts it with unshare -n -m):
#   control-plane.sh WORK
# A bridge br0 (192.0.2.1/24, a documentation range) that the nodes' veths
# join; etcd on loopback; kube-apiserver on 192.0.2.1:6443; kube-controller-
# manager and kube-scheduler; Prometheus scraping each node's node-exporter
# with examples/prometheus-rules.yaml loaded. WORK/cp/ready appears when the
# API server answers; SIGTERM stops everything.
set -euo pipefail
WORK="$1"
CP="$WORK/cp"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
mkdir -p "$CP"
mount -t tmpfs -o mode=0755 tmpfs /run
ip link set lo up
ip link add br0 type bridge
ip addr add 192.0.2.1/24 dev br0
ip link set br0 up

PIDS=()
trap stop_all EXIT
trap 'exit 0' TERM INT

etcd --data-dir "$CP/etcd" --listen-client-urls http://127.0.0.1:2379 \
    --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
    >"$CP/etcd.log" 2>&1 &
PIDS+=($!)
openssl genrsa -out "$CP/sa.key" 2048 2>/dev/null
openssl rsa -in "$CP/sa.key" -pubout -out "$CP/sa.pub" 2>/dev/null
echo "$KN_TOKEN,admin,admin,system:masters" >"$CP/tokens.csv"
wait_for 30 etcd curl -sf http://127.0.0.1:2379/health
# --kubelet-preferred-address-types: the nodes' names resolve nowhere; logs
# and exec reach a kubelet at its InternalIP.
"$KUBE_BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 --bind-address=192.0.2.1 \
    --advertise-address=192.0.2.1 --secure-port=6443 --cert-dir="$CP/certs" \
    --token-auth-file="$CP/tokens.csv" --authorization-mode=AlwaysAllow \
    --service-cluster-ip-range=198.18.0.0/16 --service-node-port-range=30000-32767 \
    --service-account-key-file="$CP/sa.pub" --service-account-signing-key-file="$CP/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc --endpoint-reconciler-type=none \
    --kubelet-preferred-address-types=InternalIP \
    --disable-admission-plugins=ServiceAccount >"$CP/apiserver.log" 2>&1 &
PIDS+=($!)
wait_for 120 kube-apiserver curl -sfk -H "Authorization: Bearer $KN_TOKEN" https://192.0.2.1:6443/readyz
"$KUBE_BIN/kube-controller-manager" --kubeconfig="$WORK/kubeconfig" --leader-elect=false \
    --bind-address=127.0.0.1 --port=0 --service-account-private-key-file="$CP/sa.key" \
    --use-service-account-credentials=false --controllers='*,-csrsigning' \
    --flex-volume-plugin-dir="$CP/flex-volume" \
    >"$CP/controller-manager.log" 2>&1 &
PIDS+=($!)
"$KUBE_BIN/kube-scheduler" --kubeconfig="$WORK/kubeconfig" --leader-elect=false \
    --bind-address=127.0.0.1 --port=0 >"$CP/scheduler.log" 2>&1 &
PIDS+=($!)
cat >"$CP/prometheus.yml" <<YAML
global: {scrape_interval: 2s, evaluation_interval: 2s}
rule_files: ["$WORK/prometheus-rules.yaml"]
scrape_configs:
  - job_name: node
    static_configs:
      - {targets: ["192.0.2.11:9100"], labels: {instance: node-1}}
      - {targets: ["192.0.2.12:9100"], labels: {instance: node-2}}
YAML
prometheus --config.file="$CP/prometheus.yml" --storage.tsdb.path="$CP/prometheus" \
    --web.listen-address=127.0.0.1:9090 >"$CP/prometheus.log" 2>&1 &
PIDS+=($!)
wait_for 30 prometheus curl -sf http://127.0.0.1:9090/-/ready
touch "$CP/ready"
while sleep 1; do :; done
