# shellcheck shell=bash
# One node of the two-node cluster, run INSIDE a network and mount namespace
# of its own (kube-nodes.sh starts it with unshare -n -m):
#   node.sh WORK N BACKEND STALE
# N is 1 or 2 (address 192.0.2.1N on eth0, the veth kube-nodes.sh moves in
# from the control plane's bridge). BACKEND (nft or legacy) is the host's
# choice: a copy of /etc/alternatives whose iptables and ip6tables links
# point to it is bind-mounted over /etc/alternatives, so the node's own
# iptables (the kubelet's) and the pods' /host see that link. STALE=1 first
# writes the other backend's rules (an old kube-proxy's chain and a FORWARD
# DROP policy), as on a node that switched backends.
# Then containerd (Debian's, CRI, runc, cgroupfs; its root, state and socket
# are the node's), the locally built images imported into it, node-exporter
# (the textfile collector on the node's /run/node-exporter/textfile) and the
# kubelet (cgroup root WORK's cgroup name, given by kube-nodes.sh). What the
# node writes on the machine's file system it writes in WORK/node-N: /run is
# a tmpfs of its own, /var/log a bind of WORK/node-N/log, /var/lib and
# /usr/libexec overlays writing into WORK/node-N, and the six kernel
# settings the kubelet would set for the whole machine (vm.overcommit_memory,
# kernel.panic, ...) are files of WORK/node-N bind-mounted over their
# /proc/sys entries. WORK/node-N/ready appears when the kubelet runs.
set -euo pipefail
WORK="$1" N="$2" BACKEND="$3" STALE="$4"
ND="$WORK/node-$N"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
mkdir -p "$ND"/{log,sysctl,containerd,kubelet,volume-plugins,cni}
wait_for 30 "eth0 (the veth from the control plane)" ip link show eth0
ip link set lo up
ip addr add "192.0.2.1$N/24" dev eth0
ip link set eth0 up
ip route add default via 192.0.2.1
mount -t tmpfs -o mode=0755 tmpfs /run

cp -a /etc/alternatives "$ND/alternatives"
for v in iptables ip6tables; do
    ln -sfn "/usr/sbin/$v-$BACKEND" "$ND/alternatives/$v"
    ln -sfn "/usr/sbin/$v-$BACKEND-restore" "$ND/alternatives/$v-restore"
    ln -sfn "/usr/sbin/$v-$BACKEND-save" "$ND/alternatives/$v-save"
done
mount --bind "$ND/alternatives" /etc/alternatives
mount --bind "$ND/log" /var/log
# The kubelet makes /var/lib/kubelet/device-plugins whatever --root-dir
# says (a fixed path in 1.20): /var/lib and /usr/libexec as the node sees
# them are overlays whose writes land in WORK/node-N.
for d in /var/lib /usr/libexec; do
    name=${d//\//-}
    mkdir -p "$ND/overlay$name/upper" "$ND/overlay$name/work"
    mount -t overlay overlay -o "lowerdir=$d,upperdir=$ND/overlay$name/upper,workdir=$ND/overlay$name/work" "$d"
done
for f in vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops \
    kernel/keys/root_maxkeys kernel/keys/root_maxbytes; do
    copy="$ND/sysctl/${f//\//.}"
    cat "/proc/sys/$f" >"$copy"
    mount --bind "$copy" "/proc/sys/$f"
done

if [[ "$STALE" == 1 ]]; then
    other=legacy
    [[ "$BACKEND" == legacy ]] && other=nft
    "iptables-$other-restore" <<'RULES'
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FORWARD - [0:0]
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m mark --mark 0x4000/0x4000 -j ACCEPT
COMMIT
RULES
fi

cat >"$ND/containerd.toml" <<TOML
version = 2
root = "$ND/containerd/root"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$ND/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$KN_PAUSE_IMAGE"
  # No score below containerd's own: lowering one needs CAP_SYS_RESOURCE,
  # which this machine's bounding set may lack (runc's start then fails).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$ND/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
TOML
# The pods are all hostNetwork; a loopback-only network makes the runtime
# report its network ready (and the node Ready) without a pod network.
echo '{"cniVersion": "0.4.0", "name": "loopback-only", "plugins": [{"type": "loopback"}]}' \
    >"$ND/cni/10-loopback.conflist"

PIDS=()
trap stop_all EXIT
trap 'exit 0' TERM INT
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
containerd --config "$ND/containerd.toml" >"$ND/containerd.log" 2>&1 &
PIDS+=($!)
wait_for 30 containerd ctr --address /run/containerd/containerd.sock version
ctr_images() { ctr --address /run/containerd/containerd.sock -n k8s.io images "$@"; }
for tar in "$WORK"/images/*.tar; do
    ctr_images import "$tar" >>"$ND/images.log"
done
# The pods' image also by digest, as the example names an image: the name
# REPO@sha256:<digest> that a pull by digest would have made.
ref="docker.io/$KN_POD_IMAGE"
digest=$(ctr_images ls | awk -v ref="$ref" '$1 == ref { print $3 }')
[[ "$digest" == sha256:* ]] || { echo "node-$N: no digest for $ref" >&2; exit 1; }
ctr_images tag "$ref" "${ref%:*}@$digest" >>"$ND/images.log"
echo "$digest" >"$ND/pod-image-digest"
mkdir -p /run/node-exporter/textfile
prometheus-node-exporter --collector.disable-defaults --collector.textfile \
    --collector.textfile.directory=/run/node-exporter/textfile \
    --web.listen-address="192.0.2.1$N:9100" >"$ND/node-exporter.log" 2>&1 &
PIDS+=($!)
# The eviction thresholds at 1%: this machine's disk and memory are shared
# with other work, and an eviction would be a test of the machine.
"$KUBE_BIN/kubelet" --kubeconfig="$WORK/kubeconfig" --container-runtime=remote \
    --container-runtime-endpoint=unix:///run/containerd/containerd.sock \
    --hostname-override="node-$N" --node-ip="192.0.2.1$N" --address="192.0.2.1$N" \
    --root-dir="$ND/kubelet" --cert-dir="$ND/kubelet/pki" --volume-plugin-dir="$ND/volume-plugins" \
    --cgroup-driver=cgroupfs --cgroup-root="/$KN_CGROUP-node-$N" --fail-swap-on=false \
    --read-only-port=0 --anonymous-auth=true --authorization-mode=AlwaysAllow \
    --eviction-hard='memory.available<1%,nodefs.available<1%,imagefs.available<1%,nodefs.inodesFree<1%' \
    --image-gc-high-threshold=100 --image-gc-low-threshold=99 \
    --pod-infra-container-image="$KN_PAUSE_IMAGE" --node-status-update-frequency=4s \
    --sync-frequency=10s --v=2 >"$ND/kubelet.log" 2>&1 &
PIDS+=($!)
touch "$ND/ready"
while sleep 1; do
    kill -0 "${PIDS[@]}" 2>/dev/null || { echo "node-$N: a daemon exited (see $ND/*.log)" >&2; exit 1; }
done
