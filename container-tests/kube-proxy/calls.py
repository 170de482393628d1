#!/usr/bin/env python3
"""Turns `strace -ff -ttt -v -e trace=execve -o PREFIX kube-proxy ...` output
into the list of commands kube-proxy ran, in time order.

Usage: calls.py PREFIX CALLS_OUT BACKENDS_OUT
       calls.py compare CALLS_A CALLS_B     (exit 0: the same calls)

Each traced process has its own file PREFIX.<pid>. A process's first
successful execve is the call as kube-proxy made it (the kube-proxy process
itself is skipped: its first execve is kube-proxy); when the command was the
wrapper, the same process then execs the backend it chose. Written:
- CALLS_OUT: one line per call, "basename(argv0) arg1 arg2 ...", time order;
- BACKENDS_OUT: one line per call of the six iptables commands (the names
  the wrapper stands in for), the real file the call ended in (the last
  execve's path with every symlink resolved), e.g.
  /usr/sbin/xtables-nft-multi. kube-proxy's other commands (`conntrack`
  from its syncs where it is installed, as on a node) are not wrapped
  calls and are left out.
"""
import ast
import glob
import os
import re
import sys

LINE = re.compile(r'^(\d+\.\d+) execve\("((?:[^"\\]|\\.)*)", (\[.*?\]), \[.*\) = 0$')


# The commands the wrapper stands in for (`iptables-wrapper install`).
WRAPPED = {"iptables", "iptables-save", "iptables-restore",
           "ip6tables", "ip6tables-save", "ip6tables-restore"}


def parse_argv(text):
    # strace prints argv as a list of C-escaped strings; close enough to
    # Python's literal syntax for the arguments kube-proxy passes.
    return ast.literal_eval(text)


def main(prefix, calls_out, backends_out):
    calls = []
    for path in glob.glob(prefix + ".*"):
        execs = []
        with open(path, errors="replace") as f:
            for line in f:
                m = LINE.match(line.rstrip("\n"))
                if m:
                    execs.append((float(m.group(1)), m.group(2), parse_argv(m.group(3))))
        if not execs:
            continue
        first_path = os.path.basename(execs[0][1])
        if first_path == "kube-proxy":
            continue
        t, _, argv = execs[0]
        final = os.path.realpath(execs[-1][1])
        calls.append((t, " ".join([os.path.basename(argv[0])] + argv[1:]), final))
    calls.sort()
    with open(calls_out, "w") as f:
        for _, call, _ in calls:
            f.write(call + "\n")
    with open(backends_out, "w") as f:
        for _, call, final in calls:
            if call.partition(" ")[0] in WRAPPED:
                f.write(final + "\n")


# A sync of kube-proxy 1.20's iptables proxier, per family: it starts by
# ensuring its first chain and ends with one iptables-restore.
SYNC_START = "-w 5 -W 100000 -N KUBE-EXTERNAL-SERVICES -t filter"


def shape(path):
    """(other calls, {sync block: count}) of one calls file, per family.

    kube-proxy makes one or two syncs at start-up depending on when its
    informers' events arrive, so two runs can differ in the number of syncs
    but not in what a sync calls. The IPv4 and IPv6 proxiers of dual-stack
    sync concurrently: their calls are split by command family first."""
    with open(path) as f:
        calls = [line.rstrip("\n") for line in f if line.strip()]
    other, blocks = [], {}
    for fam in ("iptables", "ip6tables"):
        current = None
        for call in calls:
            cmd, _, args = call.partition(" ")
            if not (cmd == fam or cmd.startswith(fam + "-")):
                continue
            if cmd == fam and args == SYNC_START and current is None:
                current = []
            if current is None:
                other.append(call)
                continue
            current.append(call)
            if cmd == fam + "-restore":
                key = tuple(current)
                blocks[key] = blocks.get(key, 0) + 1
                current = None
        if current:
            other.extend(current)
    for call in calls:
        if not call.startswith(("iptables", "ip6tables")):
            other.append(call)
    return sorted(other), blocks


def compare(path_a, path_b):
    other_a, blocks_a = shape(path_a)
    other_b, blocks_b = shape(path_b)
    for name, other, blocks in (("direct", other_a, blocks_a), ("wrapped", other_b, blocks_b)):
        kinds = ", ".join(
            "%d x %d calls (%s)" % (n, len(b), "first: -N, -C, -I" if any(" -I " in c for c in b) else "-N, -C")
            for b, n in sorted(blocks.items(), key=lambda kv: -len(kv[0])))
        print("%s: %d calls = %d outside syncs + syncs: %s" % (
            name, len(other) + sum(len(b) * n for b, n in blocks.items()), len(other), kinds))
    same = other_a == other_b and set(blocks_a) == set(blocks_b)
    if other_a != other_b:
        print("calls outside syncs differ:")
        for c in sorted(set(other_a) ^ set(other_b)):
            print("  " + c)
    if set(blocks_a) != set(blocks_b):
        print("a sync calls differently")
    return 0 if same else 1


if __name__ == "__main__":
    if sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    main(*sys.argv[1:4])
