# Generates an iptables-restore file with exactly N "-A" rules in one long
# chain of the filter table (IPv4).
#
#   awk -v N=100000 -v CHAIN=LONG -f gen-long-chain.awk > long.v4
#
# CHAIN=INPUT: all N rules in the built-in INPUT chain (the easier case: a
# base chain's rule count is one point lookup away).  Any other name: a user
# chain of N - 1 rules that INPUT jumps to (the harder case: its use count
# mixes rules and references).

BEGIN {
    if (N + 0 <= 0) exit
    if (CHAIN == "") CHAIN = "INPUT"
    print "*filter"
    print ":INPUT ACCEPT [0:0]"
    rules = N
    if (CHAIN != "INPUT") {
        printf ":%s - [0:0]\n", CHAIN
        printf "-A INPUT -j %s\n", CHAIN
        rules = N - 1
    }
    for (i = 0; i < rules; i++)
        printf "-A %s -s 10.%d.%d.%d/32 -p tcp -m tcp --dport 80 -m comment --comment \"host %d\" -j ACCEPT\n", CHAIN, int(i / 65536) % 256, int(i / 256) % 256, i % 256, i
    print "COMMIT"
}
