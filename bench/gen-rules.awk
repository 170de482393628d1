# Generates a kube-proxy-like iptables-restore file with exactly N "-A" rules,
# split between the filter table (about a tenth) and the nat table.
#
#   awk -v N=50000 -f gen-rules.awk > rules.v4
#
# nat: per service one KUBE-SERVICES jump into KUBE-SVC-*, a masquerade-mark
# rule, one statistic-balanced jump per endpoint into KUBE-SEP-*, and per
# endpoint a KUBE-MARK-MASQ jump and a DNAT.  filter: the usual fixed jumps plus
# "has no endpoints" REJECT rules.  Every rule a kube-proxy would write carries
# a comment and most carry a tcp match.

# Unique 16-character suffixes in the style of kube-proxy's chain names.
function hash(prefix, i) { return sprintf("%s-%08X%08X", prefix, (i * 40503 + 12345) % 2147483647, i) }
function cluster_ip(i)   { return sprintf("10.96.%d.%d", int(i / 250) % 250, i % 250 + 1) }
function pod_ip(i)       { return sprintf("10.244.%d.%d", int(i / 250) % 250, i % 250 + 1) }

# Appends a rule while the table's budget lasts; returns 0 once it is spent.
function add(table, rule) {
    if (budget[table] <= 0) return 0
    rules[table, ++nrules[table]] = "-A " rule
    budget[table]--
    return 1
}
function chain(table, name) { chains[table, ++nchains[table]] = ":" name " - [0:0]" }

function emit(table, builtin,    n, i, b) {
    printf "*%s\n", table
    n = split(builtin, b, " ")
    for (i = 1; i <= n; i++) printf ":%s ACCEPT [0:0]\n", b[i]
    for (i = 1; i <= nchains[table]; i++) print chains[table, i]
    for (i = 1; i <= nrules[table]; i++) print rules[table, i]
    print "COMMIT"
}

BEGIN {
    if (N + 0 <= 0) exit
    budget["filter"] = int(N / 10)
    budget["nat"] = N - budget["filter"]
    ENDPOINTS = 2

    chain("filter", "KUBE-SERVICES"); chain("filter", "KUBE-FORWARD"); chain("filter", "KUBE-FIREWALL")
    add("filter", "INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
    add("filter", "FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD")
    add("filter", "OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
    add("filter", "KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP")
    add("filter", "KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT")
    for (s = 0; budget["filter"] > 0; s++)
        add("filter", sprintf("KUBE-SERVICES -d %s/32 -p tcp -m comment --comment \"ns-%d/svc-%d:http has no endpoints\" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable", cluster_ip(s), s % 97, s))

    chain("nat", "KUBE-SERVICES"); chain("nat", "KUBE-POSTROUTING"); chain("nat", "KUBE-MARK-MASQ")
    add("nat", "PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
    add("nat", "OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
    add("nat", "POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING")
    add("nat", "KUBE-MARK-MASQ -j MARK --or-mark 0x4000")
    add("nat", "KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN")
    add("nat", "KUBE-POSTROUTING -j MARK --xor-mark 0x4000")
    add("nat", "KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully")
    ep = 0
    for (s = 0; budget["nat"] > 0; s++) {
        svc = hash("KUBE-SVC", s); name = sprintf("ns-%d/svc-%d:http", s % 97, s)
        chain("nat", svc)
        add("nat", sprintf("KUBE-SERVICES -d %s/32 -p tcp -m comment --comment \"%s cluster IP\" -m tcp --dport 80 -j %s", cluster_ip(s), name, svc))
        add("nat", sprintf("%s ! -s 10.244.0.0/16 -d %s/32 -p tcp -m comment --comment \"%s cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ", svc, cluster_ip(s), name))
        for (e = 0; e < ENDPOINTS && budget["nat"] > 0; e++) {
            sep = hash("KUBE-SEP", ep); ip = pod_ip(ep++)
            chain("nat", sep)
            if (e < ENDPOINTS - 1)
                add("nat", sprintf("%s -m comment --comment \"%s -> %s:8080\" -m statistic --mode random --probability %.11f -j %s", svc, name, ip, 1 / (ENDPOINTS - e), sep))
            else
                add("nat", sprintf("%s -m comment --comment \"%s -> %s:8080\" -j %s", svc, name, ip, sep))
            add("nat", sprintf("%s -s %s/32 -m comment --comment \"%s\" -j KUBE-MARK-MASQ", sep, ip, name))
            add("nat", sprintf("%s -p tcp -m comment --comment \"%s\" -m tcp -j DNAT --to-destination %s:8080", sep, name, ip))
        }
    }
    emit("filter", "INPUT FORWARD OUTPUT")
    emit("nat", "PREROUTING INPUT OUTPUT POSTROUTING")
}
