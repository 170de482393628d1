#!/usr/bin/env bash
# examples/daemonset.yaml on a real two-node Kubernetes v1.20.2: kubelet,
# kube-apiserver, kube-controller-manager and kube-scheduler built from
# Debian's `kubernetes` source (container-tests/kube-proxy-build.sh), etcd,
# containerd 1.6 and runc, Prometheus and node-exporter from Debian's
# packages, the images built here and imported (the distroless recipe of
# docs/images/distroless.md as printed, and a pause image from the
# kubernetes source's pause.c).
#
#   bash container-tests/kube-nodes.sh [--keep]    (--keep: leave WORK for reading;
#                                                   IPTW_DAEMONSET_YAML: another manifest)
#
# Layout: the control plane (kube-nodes/control-plane.sh) in a network and
# mount namespace of its own, with a bridge; each node (kube-nodes/node.sh:
# containerd, node-exporter, kubelet) in a network and mount namespace of its
# own, joined to the bridge by a veth. node-1's host link says nft and its
# legacy tables hold stale rules; node-2's host link says legacy. The machine
# gets no iptables, nft or netlink write: every one happens inside those
# namespaces (the veths are made inside the control plane's). Cgroups: each
# kubelet's cgroup root is a cgroup of this run, removed at the end (cgroup
# v1 and cgroupfs here; Docker's engine is not involved in running pods).
#
# The example is applied exactly as written, only its image reference
# substituted. Checked, one PASS/FAIL line each:
#   K1 both nodes Ready (kubelet v1.20.2 on containerd)
#   K2 the DaemonSet's pods Ready on both nodes, on the distroless image,
#      which has no shell
#   K3 the host's choice read through the mounts as written: `detect` in
#      each pod says nft from node-1's host link and legacy from node-2's,
#      where each kubelet's own rules went
#   K4 the init container showed node-1's stale legacy rules and left them
#   K5 each node's metrics textfile, served by node-exporter, in Prometheus
#   K6 a settings change with a bad value (iptables-wrapper-settings-2 with
#      IPTABLES_MODE: bogus, the DaemonSet pointed at it, as
#      docs/kubernetes.md says to change settings) rolls to one pod, which
#      is not Ready; the other pod stays on the old settings, Ready, and its
#      iptables and ip6tables calls work; the rollout stops there
#   K7 for the bad node, Prometheus's IptablesWrapperMetricsMissing is
#      pending (its condition holds), and not for the good node
#   K8 `kubectl rollout undo` brings the pod back Ready
#   K9 the DaemonSet deleted (every sidecar stops): the alert's condition
#      holds for both nodes
#   K10 nothing was left on the machine: no process, cgroup or mount of the
#      run, and the paths a kubelet or containerd would make by default
#      (/var/lib/kubelet, /var/lib/containerd, /etc/cni, ...) as they were
# Needs root, a Docker engine (to build the images), IPTW_WRAPPER (the
# static wrapper binary). Exit 0 when every check passed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$CT_DIR/kube-nodes/common.sh"
KEEP=0
[[ "${1:-}" == --keep ]] && KEEP=1
[[ -x "${IPTW_WRAPPER:-}" ]] || die "IPTW_WRAPPER must name the static wrapper binary"
[[ $EUID -eq 0 ]] || die "kube-nodes.sh needs root (namespaces, cgroups)"

bash "$REPO_DIR/scripts/apt-install.sh" kube-nodes.sh containerd runc containernetworking-plugins \
    prometheus prometheus-node-exporter etcd-server openssl curl iproute2 util-linux
PY="$(ls -d "${IPTW_DEV_TOOLS:-$REPO_DIR/target/dev-tools}"/kubernetes-validate-*/bin/python 2>/dev/null | sort -V | tail -n1 || true)"
[[ -n "$PY" ]] || PY=python3
"$PY" -c 'import yaml' 2>/dev/null || die "PyYAML is needed (scripts/install-deps.sh installs it in its venv)"
KUBE_BIN="${IPTW_KUBE_BIN:-$(bash "$CT_DIR/kube-proxy-build.sh" | tail -n1)}"
export KUBE_BIN
for b in kubelet kube-apiserver kube-controller-manager kube-scheduler kubectl pause; do
    [[ -x "$KUBE_BIN/$b" ]] || die "$KUBE_BIN has no $b (container-tests/kube-proxy-build.sh builds it)"
done

# Paths a kubelet, containerd or CNI would make by default: none may appear.
DEFAULT_PATHS=(/var/lib/kubelet /var/lib/containerd /run/containerd /etc/cni /opt/cni /opt/containerd
    /usr/libexec/kubernetes /var/log/pods /var/log/containers /etc/kubernetes /run/node-exporter
    /run/iptables-wrapper-stale-backups)
before_paths=$(for p in "${DEFAULT_PATHS[@]}"; do [[ -e "$p" ]] && echo "$p"; done || true)

ID="$$"
# Under TMPDIR: in scripts/test-in-container.sh's container /tmp is a volume
# on the machine's file system, where containerd's overlayfs snapshots work
# (not on the container's own overlay root).
WORK="$(mktemp -d "${TMPDIR:-/tmp}/iptw-kube-nodes.XXXXXX")"
export KN_CGROUP="iptw-kube-nodes-$ID"
export KN_PAUSE_IMAGE="iptables-wrapper-test/pause:v1.20.2-$ID"
export KN_POD_IMAGE="iptables-wrapper-test/kube-nodes-distroless:$ID"
POD_IMAGE="$KN_POD_IMAGE"
WRAPPER_IMAGE="iptables-wrapper:kube-nodes-$ID"
PIDS=() NETNS=()
failed=0
# check NAME DESCRIPTION COMMAND...: COMMAND in a subshell with errexit (an
# `if` would switch errexit off inside it), its output in WORK/NAME.out.
check() {
    local name="$1" what="$2" rc
    shift 2
    set +e
    (set -e; "$@") >"$WORK/$name.out" 2>&1
    rc=$?
    set -e
    if ((rc == 0)); then echo "PASS $name $what"; else
        echo "FAIL $name $what"; sed 's/^/    /' "$WORK/$name.out" | tail -n 25; failed=1
    fi
}

sweep() { # kills every process in the run's namespaces
    local p ns n
    for p in /proc/[0-9]*; do
        ns=$(readlink "$p/ns/net" 2>/dev/null) || continue
        for n in "${NETNS[@]}"; do [[ "$ns" == "$n" ]] && kill -KILL "${p#/proc/}" 2>/dev/null; done
    done
    true
}
left_processes() {
    local p ns n
    for p in /proc/[0-9]*; do
        ns=$(readlink "$p/ns/net" 2>/dev/null) || continue
        for n in "${NETNS[@]}"; do [[ "$ns" == "$n" ]] && echo "${p#/proc/}"; done
    done
    true
}
remove_cgroups() {
    local d
    for d in /sys/fs/cgroup/*/"$KN_CGROUP"-node-*; do
        [[ -d "$d" ]] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    true
}
teardown() {
    local p i
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for ((i = 0; i < 50; i++)); do [[ -z "$(left_processes)" ]] && break; sleep 0.2; done
    sweep
    for ((i = 0; i < 50; i++)); do [[ -z "$(left_processes)" ]] && break; sleep 0.2; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    remove_cgroups
}
cleanup() {
    teardown
    if [[ "${IPTW_KEEP_IMAGES:-0}" != 1 ]]; then
        docker rmi "$POD_IMAGE" "$KN_PAUSE_IMAGE" "$WRAPPER_IMAGE" >/dev/null 2>&1 || true
    fi
    if ((KEEP)); then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the images ---------------------------------------------------------------
log "images: the wrapper (Dockerfile), the distroless recipe as printed, pause"
mkdir -p "$WORK/wrapper-context/dist" "$WORK/pause-context" "$WORK/images"
case "$(uname -m)" in
    x86_64) docker_arch=amd64 ;; aarch64) docker_arch=arm64 ;;
    *) die "kube-nodes.sh runs on x86_64 or aarch64 machines" ;;
esac
cp "$IPTW_WRAPPER" "$WORK/wrapper-context/dist/iptables-wrapper-$(uname -m)"
quietly docker build --force-rm -t "$WRAPPER_IMAGE" --build-arg "TARGETARCH=$docker_arch" \
    -f "$REPO_DIR/Dockerfile" "$WORK/wrapper-context"
IPTW_KEEP_IMAGES=1 bash "$CT_DIR/doc-recipe.sh" distroless "$WRAPPER_IMAGE" "$POD_IMAGE" >"$WORK/recipe.log" 2>&1 \
    || { cat "$WORK/recipe.log" >&2; die "the distroless recipe did not build"; }
cp "$KUBE_BIN/pause" "$WORK/pause-context/pause"
printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' >"$WORK/pause-context/Dockerfile"
quietly docker build --force-rm -t "$KN_PAUSE_IMAGE" "$WORK/pause-context"
docker save "$POD_IMAGE" >"$WORK/images/distroless.tar"
docker save "$KN_PAUSE_IMAGE" >"$WORK/images/pause.tar"
cid=$(docker create "$POD_IMAGE" /none)
docker export "$cid" | tar -t | grep -E '(^|/)(sh|bash|dash|ash|busybox)$' >"$WORK/image-shells.txt" || true
docker rm "$cid" >/dev/null

# --- the cluster ----------------------------------------------------------------
cp "$REPO_DIR/examples/prometheus-rules.yaml" "$WORK/prometheus-rules.yaml"
cat >"$WORK/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "https://192.0.2.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: $KN_TOKEN}}]
contexts: [{name: local, context: {cluster: local, user: admin}}]
current-context: local
KC
for c in /sys/fs/cgroup/*/; do
    [[ "$c" == */unified/ ]] && continue
    for n in 1 2; do
        mkdir -p "$c$KN_CGROUP-node-$n"
        if [[ -e "${c}cpuset.cpus" ]]; then
            cat "${c}cpuset.cpus" >"$c$KN_CGROUP-node-$n/cpuset.cpus"
            cat "${c}cpuset.mems" >"$c$KN_CGROUP-node-$n/cpuset.mems"
        fi
    done
done
log "control plane"
unshare -n -m --propagation private bash "$CT_DIR/kube-nodes/control-plane.sh" "$WORK" >"$WORK/cp.log" 2>&1 &
CP_PID=$! PIDS+=($!)
sleep 0.5
NETNS+=("$(readlink /proc/$CP_PID/ns/net)")
wait_for 180 "the control plane ($WORK/cp/*.log)" test -e "$WORK/cp/ready" || { cat "$WORK/cp.log" >&2; exit 1; }
declare -A NODE_PID
for n in 1 2; do
    backend=nft stale=1
    [[ $n == 2 ]] && backend=legacy stale=0
    log "node-$n (host link: $backend)"
    unshare -n -m --propagation private bash "$CT_DIR/kube-nodes/node.sh" "$WORK" "$n" "$backend" "$stale" \
        >"$WORK/node-$n.log" 2>&1 &
    NODE_PID[$n]=$! PIDS+=($!)
    sleep 0.5
    NETNS+=("$(readlink /proc/${NODE_PID[$n]}/ns/net)")
    nsenter -t "$CP_PID" -n ip link add "vnode$n" type veth peer name eth0 netns "${NODE_PID[$n]}"
    nsenter -t "$CP_PID" -n ip link set "vnode$n" master br0 up
done
kc() { nsenter -t "$CP_PID" -n "$KUBE_BIN/kubectl" --kubeconfig "$WORK/kubeconfig" "$@"; }
on_node() { local n="$1"; shift; nsenter -t "${NODE_PID[$n]}" -n -m "$@"; }
prom() { nsenter -t "$CP_PID" -n curl -sf "http://127.0.0.1:9090/api/v1/query" --data-urlencode "query=$1"; }
for n in 1 2; do wait_for 120 "node-$n ($WORK/node-$n/*.log)" test -e "$WORK/node-$n/ready" \
    || { cat "$WORK/node-$n.log" >&2; exit 1; }; done

nodes_ready() {
    wait_for 120 "the nodes' registration" kc get node node-1 node-2
    kc wait --for=condition=Ready node/node-1 node/node-2 --timeout=180s
    kc get nodes -o wide
    [[ "$(kc get nodes -o jsonpath='{range .items[*]}{.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion}{"\n"}{end}' \
        | sed 's/containerd:\/\/1\.6\.[0-9]*$/containerd 1.6/' | paste -sd,)" == "v1.20.2 containerd 1.6,v1.20.2 containerd 1.6" ]]
}
check K1 "both nodes Ready (kubelet v1.20.2, containerd 1.6)" nodes_ready

# --- the example, as written --------------------------------------------------
# By digest, as the example asks: the same on both nodes (one image, imported
# into each).
digests=$(cat "$WORK"/node-?/pod-image-digest | sort -u)
[[ "$digests" == sha256:* && "$digests" != *$'\n'* ]] || die "the nodes hold different pod images: $digests"
POD_REF="${POD_IMAGE%:*}@$digests"
sed "s#REPO/your-image-with-iptables-wrapper@sha256:<digest>#$POD_REF#" \
    "${IPTW_DAEMONSET_YAML:-$REPO_DIR/examples/daemonset.yaml}" >"$WORK/daemonset.yaml"
grep -q "image: $POD_REF" "$WORK/daemonset.yaml" || die "no image reference REPO/your-image-with-iptables-wrapper@sha256:<digest> to substitute"
grep -q 'your-image-with-iptables-wrapper' "$WORK/daemonset.yaml" && die "an image reference was left unsubstituted"
kc apply -f "$WORK/daemonset.yaml" >"$WORK/apply.log"
# pods_table: NAME NODE GENERATION READY (the pod's Ready condition), one pod a line
pods_table() {
    kc -n kube-system get pods -l app=iptables-wrapper-example -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName} {.metadata.labels.pod-template-generation} {range .status.conditions[?(@.type=="Ready")]}{.status}{end}{"\n"}{end}'
}
pod_on() { pods_table | awk -v node="node-$1" '$2 == node { print $1; exit }'; }
pods_ready() {
    local i
    for ((i = 0; i < 180; i++)); do
        [[ "$(pods_table | awk '$4 == "True"' | wc -l)" == 2 ]] && break
        sleep 1
    done
    pods_table
    kc -n kube-system get pods -o wide
    [[ "$(pods_table | awk '$4 == "True" { print $2 }' | sort | paste -sd' ')" == "node-1 node-2" ]] || return 1
    [[ "$(kc -n kube-system get pods -l app=iptables-wrapper-example -o jsonpath='{.items[*].spec.containers[*].image}')" \
        == "$POD_REF $POD_REF" ]] || { echo "the pods' image is not $POD_REF"; return 1; }
    echo "image: $POD_REF"
    [[ ! -s "$WORK/image-shells.txt" ]] || { echo "the image has a shell:"; cat "$WORK/image-shells.txt"; return 1; }
    # The first rollout done (each pod Ready for minReadySeconds): a change
    # made before then replaces the pods not yet available all at once.
    kc -n kube-system rollout status ds/iptables-wrapper-example --timeout=120s
}
check K2 "the DaemonSet's pods Ready on both nodes, on the distroless image (no shell)" pods_ready

host_choice() {
    local n want pod line
    for n in 1 2; do
        want=nft
        [[ $n == 2 ]] && want=legacy
        pod=$(pod_on "$n")
        line=$(kc -n kube-system exec "$pod" -c metrics -- /usr/sbin/iptables-wrapper detect | head -n1)
        echo "node-$n: $line"
        [[ "$line" == "$want for iptables: host link /host/etc/alternatives/iptables -> /usr/sbin/iptables-$want" ]] || return 1
        # The kubelet's own calls went through the same link.
        on_node "$n" "iptables-$want-save" -t mangle | grep -q ':KUBE-KUBELET-CANARY' \
            || { echo "node-$n: no KUBE-KUBELET-CANARY in $want"; return 1; }
    done
}
check K3 "each pod reads its host's link through the mounts as written (node-1 nft, node-2 legacy)" host_choice

stale_shown() {
    local pod
    pod=$(pod_on 1)
    kc -n kube-system logs "$pod" -c stale-rules | tee "$WORK/stale-rules.log"
    grep -q 'KUBE-FORWARD' "$WORK/stale-rules.log"
    on_node 1 iptables-legacy-save -t filter | grep -q '^-A KUBE-FORWARD' || { echo "node-1's legacy rules are gone"; return 1; }
}
check K4 "node-1's init container showed its stale legacy rules and left them" stale_shown

textfiles() {
    local n i
    for n in 1 2; do on_node "$n" grep -m1 '^iptables_wrapper_detect_timestamp_seconds' /run/node-exporter/textfile/iptables_wrapper.prom; done
    for ((i = 0; i < 60; i++)); do
        [[ "$(prom 'count(iptables_wrapper_detect_timestamp_seconds)' | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)')" == 2 ]] && return 0
        sleep 1
    done
    prom 'iptables_wrapper_detect_timestamp_seconds'
    return 1
}
check K5 "each node's textfile served by node-exporter and scraped by Prometheus" textfiles

# --- a bad settings change ------------------------------------------------------
alerting() { # alerting NODE...: exactly these instances have MetricsMissing pending or firing
    local want="$*" got i
    for ((i = 0; i < 60; i++)); do
        got=$(prom 'ALERTS{alertname="IptablesWrapperMetricsMissing"}' \
            | python3 -c 'import json,sys; print(" ".join(sorted(r["metric"]["instance"] for r in json.load(sys.stdin)["data"]["result"])))')
        [[ "$got" == "$want" ]] && { echo "MetricsMissing for: ${got:-none}"; return 0; }
        sleep 1
    done
    echo "MetricsMissing for: ${got:-none}, expected: ${want:-none}"
    return 1
}
bad_rollout() {
    "$PY" - "$WORK/daemonset.yaml" >"$WORK/settings-2.yaml" <<'PY'
import sys, yaml
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc and doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "iptables-wrapper-settings-1":
        doc["metadata"]["name"] = "iptables-wrapper-settings-2"
        doc["data"]["IPTABLES_MODE"] = "bogus"
        print(yaml.safe_dump(doc))
PY
    kc apply -f "$WORK/settings-2.yaml"
    [[ "$(kc -n kube-system get ds iptables-wrapper-example -o jsonpath='{.spec.template.spec.volumes[0].name}')" == settings ]]
    kc -n kube-system patch ds iptables-wrapper-example --type=json \
        -p '[{"op": "replace", "path": "/spec/template/spec/volumes/0/configMap/name", "value": "iptables-wrapper-settings-2"}]'
    local i new="" bad_node good_node good
    for ((i = 0; i < 120; i++)); do
        new=$(pods_table | awk '$3 == 2 { print $1 }')
        [[ -n "$new" ]] && [[ "$(kc -n kube-system get pod "$new" -o jsonpath='{.status.containerStatuses[0].state.running.startedAt}')" ]] && break
        sleep 1
    done
    [[ -n "$new" ]] || { echo "no pod of the new settings appeared"; return 1; }
    # Longer than minReadySeconds (30 s) and three readiness periods.
    sleep 45
    pods_table
    bad_node=$(pods_table | awk '$3 == 2 { print $2 }')
    good=$(pods_table | awk '$3 == 1 { print $1 }')
    good_node=$(pods_table | awk '$3 == 1 { print $2 }')
    [[ "$(pods_table | awk '$3 == 2' | wc -l)" == 1 && -n "$good" ]] || { echo "the rollout went past one pod"; return 1; }
    [[ "$(pods_table | awk '$3 == 2 { print $4 }')" == False ]] || { echo "the bad pod is Ready"; return 1; }
    [[ "$(pods_table | awk '$3 == 1 { print $4 }')" == True ]] || { echo "the good pod is not Ready"; return 1; }
    kc -n kube-system describe pod "$new" | grep -i 'readiness probe failed' | tail -n2
    kc -n kube-system exec "$good" -c metrics -- /usr/sbin/iptables -w -S >"$WORK/good-iptables.txt"
    kc -n kube-system exec "$good" -c metrics -- /usr/sbin/ip6tables -w -S >/dev/null
    grep -q KUBE-FIREWALL "$WORK/good-iptables.txt" || { echo "iptables -S in $good lists no kubelet rule"; return 1; }
    echo "calls in $good (on $good_node) work"
    if kc -n kube-system rollout status ds/iptables-wrapper-example --timeout=5s; then echo "the rollout completed"; return 1; fi
    echo "$bad_node" >"$WORK/bad-node"
    echo "$good_node" >"$WORK/good-node"
}
check K6 "a bad settings value rolls to one pod, not Ready; the other pod's calls work; the rollout stops" bad_rollout
check K7 "MetricsMissing's condition holds for the bad node only" alerting "$(cat "$WORK/bad-node" 2>/dev/null)"
undo() {
    kc -n kube-system rollout undo ds/iptables-wrapper-example
    kc -n kube-system rollout status ds/iptables-wrapper-example --timeout=180s
    pods_table
    [[ "$(pods_table | awk '$4 == "True"' | wc -l)" == 2 ]]
}
check K8 "kubectl rollout undo: both pods Ready again" undo
stopped() {
    kc -n kube-system delete ds iptables-wrapper-example --wait=true --timeout=60s
    alerting node-1 node-2
}
check K9 "every sidecar stopped: MetricsMissing's condition holds for both nodes" stopped

nothing_left() {
    teardown
    local after rest
    rest=$(left_processes)
    [[ -z "$rest" ]] || { echo "processes left: $rest"; return 1; }
    ls -d /sys/fs/cgroup/*/"$KN_CGROUP"-node-* 2>/dev/null && { echo "cgroups left"; return 1; }
    grep -q "$WORK" /proc/self/mountinfo && { echo "mounts left under $WORK"; return 1; }
    after=$(for p in "${DEFAULT_PATHS[@]}"; do [[ -e "$p" ]] && echo "$p"; done || true)
    [[ "$after" == "$before_paths" ]] || { echo "default paths before: $before_paths; after: $after"; return 1; }
}
check K10 "nothing of the cluster left on the machine" nothing_left
if ((failed)); then
    for f in "$WORK"/cp/*.log "$WORK"/node-?/*.log "$WORK"/node-?.log "$WORK"/cp.log; do
        [[ -s "$f" ]] && { echo "--- the end of $f"; tail -n 15 "$f"; }
    done
    log "kube-nodes: FAILED (logs in $WORK; run with --keep to keep them)"
    exit 1
fi
log "kube-nodes: all checks passed"
