#!/usr/bin/env bash
# Prints the Services and EndpointSlices the kube-proxy runs use, as one
# kubectl List (YAML), on stdout. Everything is fixed (cluster IPs, node
# ports, endpoint addresses), so two fresh API servers give byte-identical
# rules and a wrapped run can be compared line by line with a direct one.
#
#   objects.sh ipv4 [EXTRA]   ten IPv4 Services, two ports each, 18 endpoints
#                             per Service: ClusterIP and NodePort, one with
#                             ClientIP session affinity, one with
#                             externalTrafficPolicy Local, one with an external
#                             IP, one UDP port, one without endpoints (REJECT)
#                             and one headless (no rules)
#   objects.sh dual [EXTRA]   the same, plus three IPv6 Services with IPv6
#                             EndpointSlices (needs the IPv6DualStack gate)
# EXTRA (a number, default 0) adds that many endpoints to svc-0: the harness
# applies EXTRA=3 during a run to make kube-proxy sync a change.
# OBJ_AFFINITY=0 in the environment leaves out svc-3's
# ClientIP session affinity (its `-m recent` rules).
#
# Addresses come from ranges reserved for documentation and benchmarks
# (198.18.0.0/15, 198.51.100.0/24, 2001:db8::/32): they are only written into
# rules inside a test network namespace, and no packet is ever sent to them.
set -euo pipefail
family="${1:-ipv4}"
extra="${2:-0}"

echo "apiVersion: v1"
echo "kind: List"
echo "items:"

# service NAME INDEX FAMILY: one Service with ports http (TCP 80->8080) and
# metrics (TCP 9090, or UDP 53 for svc-1); its shape depends on INDEX.
service() {
    local name="$1" i="$2" fam="$3" ip type="ClusterIP" proto2=TCP port2=9090
    if [[ "$fam" == IPv6 ]]; then ip="2001:db8:42::$((i + 16))"; else ip="198.18.0.$((i + 16))"; fi
    ((i % 2 == 1)) && type=NodePort
    [[ "$name" == svc-1 ]] && { proto2=UDP port2=53; }
    cat <<EOF
- apiVersion: v1
  kind: Service
  metadata: {name: $name, namespace: default}
  spec:
    type: $type
    clusterIP: "$ip"
EOF
    if [[ "$fam" == IPv6 ]]; then
        echo "    ipFamilies: [IPv6]"
        echo "    ipFamilyPolicy: SingleStack"
    fi
    [[ "$name" == svc-3 && "${OBJ_AFFINITY:-1}" == 1 ]] && echo "    sessionAffinity: ClientIP"
    [[ "$name" == svc-5 ]] && echo "    externalTrafficPolicy: Local"
    [[ "$name" == svc-7 ]] && echo "    externalIPs: [198.51.100.7]"
    echo "    ports:"
    echo "    - {name: http, protocol: TCP, port: 80, targetPort: 8080$([[ $type == NodePort ]] && echo ", nodePort: $((30000 + 2 * i + ${4:-0}))")}"
    echo "    - {name: metrics, protocol: $proto2, port: $port2, targetPort: $port2$([[ $type == NodePort ]] && echo ", nodePort: $((30001 + 2 * i + ${4:-0}))")}"
}

# slice NAME INDEX FAMILY COUNT: an EndpointSlice for Service NAME with COUNT
# ready endpoints; every third one is on this node (node-1).
slice() {
    local name="$1" i="$2" fam="$3" count="$4" n addr proto2=TCP port2=9090
    [[ "$name" == svc-1 ]] && { proto2=UDP port2=53; }
    cat <<EOF
- apiVersion: discovery.k8s.io/v1beta1
  kind: EndpointSlice
  metadata:
    name: $name-slice
    namespace: default
    labels: {kubernetes.io/service-name: $name}
  addressType: $fam
  ports:
  - {name: http, protocol: TCP, port: 8080}
  - {name: metrics, protocol: $proto2, port: $port2}
  endpoints:
EOF
    for ((n = 1; n <= count; n++)); do
        if [[ "$fam" == IPv6 ]]; then addr="2001:db8:43:$i::$n"; else addr="198.19.$i.$n"; fi
        echo "  - addresses: [\"$addr\"]"
        echo "    conditions: {ready: true}"
        echo "    topology: {kubernetes.io/hostname: node-$((n % 3 == 0 ? 1 : 2))}"
    done
}

for i in 0 1 2 3 4 5 6 7 8 9; do
    service "svc-$i" "$i" IPv4
    count=18
    ((i == 0)) && count=$((18 + extra))
    ((i == 9)) && continue # no endpoints: kube-proxy REJECTs its cluster IP
    slice "svc-$i" "$i" IPv4 "$count"
done
cat <<EOF
- apiVersion: v1
  kind: Service
  metadata: {name: headless, namespace: default}
  spec:
    clusterIP: None
    ports: [{name: http, protocol: TCP, port: 80}]
EOF

if [[ "$family" == dual ]]; then
    for i in 10 11 12; do
        service "svc6-$i" "$i" IPv6 100
        slice "svc6-$i" "$i" IPv6 15
    done
fi
