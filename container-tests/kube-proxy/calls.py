#!/usr/bin/env python3
"""Turns `strace -ff -ttt -v -e trace=execve -o PREFIX kube-proxy ...` output
into the list of commands kube-proxy ran, in time order.

Usage: calls.py PREFIX CALLS_OUT BACKENDS_OUT

Each traced process has its own file PREFIX.<pid>. A process's first
successful execve is the call as kube-proxy made it (the kube-proxy process
itself is skipped: its first execve is kube-proxy); when the command was the
wrapper, the same process then execs the backend it chose. Written:
- CALLS_OUT: one line per call, "basename(argv0) arg1 arg2 ...", time order;
- BACKENDS_OUT: one line per call, the real file the call ended in (the
  last execve's path with every symlink resolved), e.g.
  /usr/sbin/xtables-nft-multi.
"""
import ast
import glob
import os
import re
import sys

LINE = re.compile(r'^(\d+\.\d+) execve\("((?:[^"\\]|\\.)*)", (\[.*?\]), \[.*\) = 0$')


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
        for _, _, final in calls:
            f.write(final + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
