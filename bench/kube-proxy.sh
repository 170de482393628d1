#!/usr/bin/env bash
# kube-proxy's own figure: sync_proxy_rules_duration_seconds, wrapped and
# direct, side by side in one run.
#
#   sudo bash bench/kube-proxy.sh [--iterations N] [--syncs N]
#
# One fresh network + mount namespace holds etcd and kube-apiserver on
# loopback with the Services and EndpointSlices of
# container-tests/kube-proxy/objects.sh (about 800 rules). Then, ITERATIONS times
# (default 6), kube-proxy v1.20.2 (container-tests/kube-proxy-build.sh, cached)
# runs once with the six command names linked to iptables-nft ("direct") and
# once linked to the wrapper ("wrapped"), in alternating order (ABBA...), each
# time on an emptied ruleset (`nft flush ruleset` in the namespace): after
# its start-up syncs, SYNCS changes (default 15: one endpoint of svc-0 made
# not ready, then ready again, by a JSON patch to the API) each make one
# full sync, sampled from its /metrics (the change of
# kubeproxy_sync_proxy_rules_duration_seconds_sum over one increment of
# _count), so each sample is exactly one sync. (kube-proxy 1.20 has no
# periodic sync to sample: its --iptables-sync-period only paces the canary
# checks, and its forced resync is hourly.)
#
# Reported per iteration: the median sync of each side; then each side's median
# of iteration medians, the wrapper's share (wrapped - direct) and the direct
# side's run-to-run noise: the range (max - min) of its iteration medians.
# Target: the wrapper's share <= the direct noise. Exits 1 if missed.
#
# SAFETY: every iptables and kube-proxy call runs inside the namespace made
# here; nothing outside it is written.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
CT="$REPO/container-tests"
ITERATIONS=6
SYNCS=15

if [[ "${1:-}" == --inside ]]; then
    # inside OUT ITERATIONS SYNCS: the measurement, in the namespace.
    out="$2" ITERATIONS="$3" SYNCS="$4"
    # shellcheck source=../container-tests/kube-proxy/node.sh
    source "$CT/kube-proxy/node.sh"
    trap node_down EXIT
    node_up ipv4 "$out"
    bash "$CT/kube-proxy/objects.sh" ipv4 0 >"$out/objects.yaml"
    "$KUBE_BIN/kubectl" --kubeconfig "$out/kubeconfig" apply -f "$out/objects.yaml" >/dev/null
    export KP_STRACE=0
    api=https://127.0.0.1:6443/apis/discovery.k8s.io/v1beta1/namespaces/default/endpointslices/svc-0-slice
    # toggle K: endpoint 1 of svc-0 not ready (K odd) or ready (K even); each
    # toggle is one change kube-proxy syncs.
    toggle() {
        local ready=true
        (($1 % 2)) && ready=false
        curl -sfk -o /dev/null -X PATCH -H "Authorization: Bearer $NODE_TOKEN" \
            -H 'Content-Type: application/json-patch+json' \
            -d "[{\"op\": \"replace\", \"path\": \"/endpoints/0/conditions/ready\", \"value\": $ready}]" "$api"
    }
    for ((r = 1; r <= ITERATIONS; r++)); do
        order=(direct wrapped)
        ((r % 2 == 0)) && order=(wrapped direct)
        for side in "${order[@]}"; do
            nft flush ruleset
            dir="$out/$side-$r"
            kp_start "$dir" "$CMD_DIRS/$side" ipv4
            wait_syncs "$dir" 1 # the start-up syncs, then 3 s without one
            : >"$dir/syncs.txt"
            for ((k = 1; k <= SYNCS; k++)); do
                read -r c0 s0 < <(sync_stats)
                toggle "$k"
                for ((i = 0; i < 200; i++)); do
                    sleep 0.05
                    read -r c s < <(sync_stats)
                    ((c > c0)) && break
                done
                ((c == c0 + 1)) || { echo "iteration $r $side: toggle $k gave $((c - c0)) syncs" >&2; continue; }
                awk -v a="$s" -v b="$s0" 'BEGIN { printf "%.6f\n", (a - b) * 1000 }' >>"$dir/syncs.txt"
            done
            kp_stop
            rules=$(iptables-nft-save | grep -c '^-A' || true)
            echo "$side $r $rules $(sort -n "$dir/syncs.txt" | paste -sd' ')" >>"$out/samples.txt"
        done
    done
    exit 0
fi

while (($#)); do
    case "$1" in
        --iterations) ITERATIONS="$2"; shift 2 ;;
        --syncs) SYNCS="$2"; shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench/kube-proxy.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ $EUID -eq 0 ]] || { echo "bench/kube-proxy.sh: needs root (network namespaces)" >&2; exit 2; }
# What the runs need, from Debian's packages when missing.
bash "$REPO/scripts/apt-install.sh" bench/kube-proxy.sh etcd-server openssl curl util-linux nftables python3 iproute2
KUBE_BIN="${IPTW_KUBE_BIN:-$(bash "$CT/kube-proxy-build.sh" | tail -n1)}"
WRAPPER="${IPTW_WRAPPER:-$(bash "$REPO/scripts/build-static.sh" | tail -n1)}"
T=$(mktemp -d /tmp/iptw-kube-proxy-bench.XXXXXX)
trap 'rm -rf "$T"' EXIT
CMD_DIRS="$T/cmd"
mkdir -p "$CMD_DIRS"/{direct,wrapped}
for v in iptables ip6tables; do
    for s in "" -save -restore; do ln -s "/usr/sbin/$v-nft$s" "$CMD_DIRS/direct/$v$s"; done
done
cp "$WRAPPER" "$CMD_DIRS/wrapped/iptables-wrapper"
"$CMD_DIRS/wrapped/iptables-wrapper" install --dir "$CMD_DIRS/wrapped" >/dev/null
export KUBE_BIN CMD_DIRS
unshare -n -m --propagation private bash "$0" --inside "$T/run" "$ITERATIONS" "$SYNCS" >"$T/inside.log" 2>&1 \
    || { tail -30 "$T/inside.log" >&2; exit 1; }

grep 'gave' "$T/inside.log" || true # toggles not sampled (not exactly one sync)

# The report.
awk -v iterations="$ITERATIONS" -v syncs="$SYNCS" -v bin="$KUBE_BIN" '
function median(a, n,    i, j, t) {
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
    side = $1; r = $2; rules[side] = $3; n = 0
    for (i = 4; i <= NF; i++) v[++n] = $i
    m = median(v, n); med[side, r] = m; cnt[side, r] = n
    lo[side, r] = v[1]; hi[side, r] = v[n]
}
END {
    printf "kube-proxy v1.20.2 (%s), %d iterations of %d syncs per side, alternating; %d / %d nft rules (direct / wrapped)\n\n", bin, iterations, syncs, rules["direct"], rules["wrapped"]
    print "| iteration | direct median ms (min-max) | wrapped median ms (min-max) |"
    print "|---|---|---|"
    for (r = 1; r <= iterations; r++) {
        printf "| %d | %.2f (%.2f-%.2f, %d syncs) | %.2f (%.2f-%.2f, %d syncs) |\n", r, med["direct", r], lo["direct", r], hi["direct", r], cnt["direct", r], med["wrapped", r], lo["wrapped", r], hi["wrapped", r], cnt["wrapped", r]
        d[r] = med["direct", r]; w[r] = med["wrapped", r]
    }
    dmin = dmax = d[1]
    for (r = 1; r <= iterations; r++) { if (d[r] < dmin) dmin = d[r]; if (d[r] > dmax) dmax = d[r] }
    dm = median(d, iterations); wm = median(w, iterations)
    share = wm - dm; noise = dmax - dmin
    printf "\ndirect: median of iteration medians %.2f ms, run-to-run noise (range of iteration medians) %.2f ms (%.2f-%.2f)\n", dm, noise, dmin, dmax
    printf "wrapped: median of iteration medians %.2f ms; the wrapper'"'"'s share of a sync: %+.2f ms (%+.1f%%)\n", wm, share, dm ? 100 * share / dm : 0
    ok = share <= noise
    printf "target: share <= direct noise: %s\n", ok ? "met" : "MISSED"
    exit !ok
}' "$T/run/samples.txt"
