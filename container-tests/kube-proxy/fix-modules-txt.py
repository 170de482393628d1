#!/usr/bin/env python3
"""Rewrite Kubernetes 1.20's vendor/modules.txt so Go 1.21 reads it as Go 1.15 did.

Kubernetes' hack/update-vendor.sh sorts modules.txt, which puts some of a
module's package lines under its wildcard-replacement line
("# path => path version") instead of under its versioned line
("# path version => path version"). Go 1.21's reader takes packages under a
wildcard line as the module at version "", so the build list lacks the
module's version and every build stops with "updates to go.mod needed,
disabled by -mod=vendor". This moves each module's wildcard line first and
all its package and "##" lines under its versioned line: the same modules,
packages and replacements, in the order Go expects.

Usage: fix-modules-txt.py vendor/modules.txt (rewrites the file in place).
"""
import sys


def blocks(lines):
    """Yield (header, body) for each "# " line and the lines that follow it."""
    header, body = None, []
    for line in lines:
        if line.startswith("# "):
            if header is not None or body:
                yield header, body
            header, body = line, []
        else:
            body.append(line)
    if header is not None or body:
        yield header, body


def main(path):
    with open(path) as f:
        lines = f.read().splitlines()
    out, group, group_path = [], [], None

    def flush():
        wildcards = [h for h, _ in group if h.split()[2] == "=>"]
        versioned = [(h, b) for h, b in group if h.split()[2] != "=>"]
        if len(versioned) != 1:  # nothing to merge: keep as it was
            for h, b in group:
                out.append(h)
                out.extend(b)
            return
        out.extend(wildcards)
        out.append(versioned[0][0])
        bodies = [line for _, b in group for line in b]
        out.extend(line for line in bodies if line.startswith("## "))
        out.extend(line for line in bodies if not line.startswith("## "))

    for header, body in blocks(lines):
        if header is None:  # lines before the first module line
            out.extend(body)
            continue
        fields = header.split()
        if len(fields) < 3:
            flush() if group else None
            group, group_path = [], None
            out.append(header)
            out.extend(body)
            continue
        if fields[1] != group_path and group:
            flush()
            group = []
        group_path = fields[1]
        group.append((header, body))
    if group:
        flush()
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
