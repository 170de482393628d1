# Generates an iptables-restore file of about N "-A" rules for one family in
# four tables (raw, mangle, filter, nat), shaped like a large Kubernetes node:
#
#   awk -v N=100000 -v FAMILY=4 -v SHAPE=kube -v DRIFT=0 -f gen-scale.awk > rules
#
# SHAPE=kube: kube-proxy's iptables mode (as gen-rules.awk, in both
# families): per Service a KUBE-SERVICES jump into KUBE-SVC-*, a
# masquerade-mark rule and a statistic-balanced jump per endpoint into
# KUBE-SEP-*, each with a KUBE-MARK-MASQ jump and a DNAT; filter's
# "has no endpoints" REJECTs and KUBE-FORWARD; raw and mangle hold a few.
# About one user chain for every three rules.
# SHAPE=calico: Calico's iptables dataplane: per workload interface a
# cali-tw-/cali-fw- chain pair dispatched from cali-FORWARD, per policy a
# cali-pi-/cali-po- chain with ipset matches (`-m set --match-set
# cali4<v>s:NAME src`; the sets are made by gen-scale-sets.sh), marks set
# and tested, mangle's and raw's cali-PREROUTING; half of it kube-proxy's.
# DRIFT=K: every K-th endpoint's address, and every K-th Service's REJECT
# port, differ (the copy a writer changed after the host switched): the
# same chains, some rules not twins (filter's REJECTs hold the family).
function ip(i) {
    if (FAMILY == 6) return sprintf("fd00:10:244::%x:%x", int(i / 65000) % 65000, i % 65000 + 1)
    return sprintf("10.%d.%d.%d", 100 + int(i / 62500) % 100, int(i / 250) % 250, i % 250 + 1)
}
function cluster_ip(i) {
    if (FAMILY == 6) return sprintf("fd00:10:96::%x:%x", int(i / 65000) % 65000, i % 65000 + 1)
    return sprintf("10.96.%d.%d", int(i / 250) % 250, i % 250 + 1)
}
function host(a) { return FAMILY == 6 ? a "/128" : a "/32" }
function hash(prefix, i) { return sprintf("%s-%08X%08X", prefix, (i * 40503 + 12345) % 2147483647, i) }
function chain(table, name) { chains[table, ++nchains[table]] = ":" name " - [0:0]" }
function add(table, rule) { rules[table, ++nrules[table]] = "-A " rule; total++ }
function emit(table, builtin,    n, i, b) {
    printf "*%s\n", table
    n = split(builtin, b, " ")
    for (i = 1; i <= n; i++) printf ":%s ACCEPT [0:0]\n", b[i]
    for (i = 1; i <= nchains[table]; i++) print chains[table, i]
    for (i = 1; i <= nrules[table]; i++) print rules[table, i]
    print "COMMIT"
}

# One Service with two endpoints: 11 rules, 3 user chains.
function service(s,    svc, name, e, sep, a) {
    svc = hash("KUBE-SVC", s); name = sprintf("ns-%d/svc-%d:http", s % 97, s)
    chain("nat", svc)
    add("nat", sprintf("KUBE-SERVICES -d %s -p tcp -m comment --comment \"%s cluster IP\" -m tcp --dport 80 -j %s", host(cluster_ip(s)), name, svc))
    add("nat", sprintf("%s ! -s %s -d %s -p tcp -m comment --comment \"%s cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ", svc, FAMILY == 6 ? "fd00:10:244::/64" : "10.96.0.0/12", host(cluster_ip(s)), name))
    for (e = 0; e < 2; e++) {
        sep = hash("KUBE-SEP", 2 * s + e); a = ip(2 * s + e)
        if (DRIFT > 0 && (2 * s + e) % DRIFT == DRIFT - 1) a = ip(2 * s + e + 7000000)
        chain("nat", sep)
        if (e == 0)
            add("nat", sprintf("%s -m comment --comment \"%s -> %s\" -m statistic --mode random --probability 0.50000000000 -j %s", svc, name, a, sep))
        else
            add("nat", sprintf("%s -m comment --comment \"%s -> %s\" -j %s", svc, name, a, sep))
        add("nat", sprintf("%s -s %s -m comment --comment \"%s\" -j KUBE-MARK-MASQ", sep, host(a), name))
        add("nat", sprintf("%s -p tcp -m comment --comment \"%s\" -m tcp -j DNAT --to-destination %s", sep, name, FAMILY == 6 ? "[" a "]:8080" : a ":8080"))
    }
    if (s % 10 == 0)
        add("filter", sprintf("KUBE-SERVICES -d %s -p tcp -m comment --comment \"%s has no endpoints\" -m tcp --dport %d -j REJECT --reject-with %s", host(cluster_ip(s)), name, DRIFT > 0 && s % DRIFT == 0 ? 82 : 81, FAMILY == 6 ? "icmp6-port-unreachable" : "icmp-port-unreachable"))
}

# One Calico workload with its policy: 12 rules, 4 user chains.
function workload(w,    iface, tw, fw, pi, po, set) {
    iface = sprintf("cali%05x%06x", w % 1048576, (w * 40503 + 977) % 16777216)
    tw = "cali-tw-" iface; fw = "cali-fw-" iface
    pi = sprintf("cali-pi-_%016X", w); po = sprintf("cali-po-_%016X", w)
    set = sprintf("cali%ds:set-%d", FAMILY, w % SETS)
    chain("filter", tw); chain("filter", fw); chain("filter", pi); chain("filter", po)
    add("filter", sprintf("cali-to-wl-dispatch -o %s -m comment --comment \"cali:%08x\" -g %s", iface, w, tw))
    add("filter", sprintf("cali-from-wl-dispatch -i %s -m comment --comment \"cali:%08x\" -g %s", iface, w, fw))
    add("filter", sprintf("%s -m comment --comment \"cali:a%07x\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT", tw, w))
    add("filter", sprintf("%s -m comment --comment \"cali:b%07x\" -m conntrack --ctstate INVALID -j DROP", tw, w))
    add("filter", sprintf("%s -m comment --comment \"cali:c%07x\" -j MARK --set-xmark 0x0/0x10000", tw, w))
    add("filter", sprintf("%s -m comment --comment \"cali:d%07x\" -j %s", tw, w, pi))
    add("filter", sprintf("%s -m comment --comment \"cali:e%07x\" -m mark --mark 0x10000/0x10000 -j RETURN", tw, w))
    add("filter", sprintf("%s -m comment --comment \"cali:f%07x\" -j DROP", tw, w))
    add("filter", sprintf("%s -p tcp -m comment --comment \"cali:g%07x\" -m set --match-set %s src -m multiport --dports 80,443 -j MARK --set-xmark 0x10000/0x10000", pi, w, set))
    add("filter", sprintf("%s -m comment --comment \"cali:h%07x\" -m conntrack --ctstate INVALID -j DROP", fw, w))
    add("filter", sprintf("%s -m comment --comment \"cali:i%07x\" -j %s", fw, w, po))
    add("filter", sprintf("%s -m comment --comment \"cali:j%07x\" -m set --match-set %s dst -j MARK --set-xmark 0x10000/0x10000", po, w, set))
}

BEGIN {
    if (N + 0 <= 0 || (FAMILY != 4 && FAMILY != 6)) exit 1
    if (SETS + 0 <= 0) SETS = 50
    if (SHAPE == "") SHAPE = "kube"
    # raw and mangle: what both shapes keep there.
    chain("raw", "cali-PREROUTING"); chain("mangle", "cali-PREROUTING"); chain("mangle", "KUBE-KUBELET-CANARY")
    add("raw", "PREROUTING -m comment --comment \"cali:6gwbT8clXdHdC1b1\" -j cali-PREROUTING")
    add("raw", "cali-PREROUTING -m comment --comment \"cali:XFX5xbM8B9qR10JG\" -j MARK --set-xmark 0x0/0xf0000")
    add("raw", "cali-PREROUTING -i cali+ -m comment --comment \"cali:EWMPb0zVROM-woQp\" -j MARK --set-xmark 0x40000/0x40000")
    add("mangle", "PREROUTING -m comment --comment \"cali:6gwbT8clXdHdC1b1\" -j cali-PREROUTING")
    add("mangle", "cali-PREROUTING -m comment --comment \"cali:6BJqBjBC7crtA-7-\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT")
    add("mangle", "cali-PREROUTING -m comment --comment \"cali:KX7AGNd6rMcDUai6\" -m mark --mark 0x10000/0x10000 -j ACCEPT")
    # The fixed chains of kube-proxy.
    chain("filter", "KUBE-SERVICES"); chain("filter", "KUBE-FORWARD")
    add("filter", "INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
    add("filter", "FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD")
    add("filter", "KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP")
    add("filter", "KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT")
    chain("nat", "KUBE-SERVICES"); chain("nat", "KUBE-POSTROUTING"); chain("nat", "KUBE-MARK-MASQ")
    add("nat", "PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
    add("nat", "OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
    add("nat", "POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING")
    add("nat", "KUBE-MARK-MASQ -j MARK --or-mark 0x4000")
    add("nat", "KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN")
    add("nat", "KUBE-POSTROUTING -j MARK --xor-mark 0x4000")
    add("nat", "KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully")
    if (SHAPE == "calico") {
        chain("filter", "cali-FORWARD"); chain("filter", "cali-to-wl-dispatch"); chain("filter", "cali-from-wl-dispatch")
        add("filter", "FORWARD -m comment --comment \"cali:wUHhoiAYhphO9Mso\" -j cali-FORWARD")
        add("filter", "cali-FORWARD -m comment --comment \"cali:vjrMJCRpqwy5oRoX\" -j MARK --set-xmark 0x0/0xe0000")
        add("filter", "cali-FORWARD -o cali+ -m comment --comment \"cali:A_sPAO0mcxbT9mOV\" -j cali-to-wl-dispatch")
        add("filter", "cali-FORWARD -i cali+ -m comment --comment \"cali:8ZoYfO5HKXWbB3pk\" -j cali-from-wl-dispatch")
        for (w = 0; total < N / 2; w++) workload(w)
    }
    for (s = 0; total < N; s++) service(s)
    emit("raw", "PREROUTING OUTPUT")
    emit("mangle", "PREROUTING INPUT FORWARD OUTPUT POSTROUTING")
    emit("filter", "INPUT FORWARD OUTPUT")
    emit("nat", "PREROUTING INPUT OUTPUT POSTROUTING")
}
