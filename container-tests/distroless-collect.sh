#!/usr/bin/env bash
# Runs inside distroless.Dockerfile's source stage (a Debian root with
# iptables, and busybox-static for the tests): copies into OUT what a
# distroless-style image needs to run iptables through the wrapper, and
# nothing else: no package manager, no alternatives system, no
# /etc/alternatives. Usable in your own multi-stage build, too.
set -euo pipefail
OUT="${1:?usage: distroless-collect.sh OUTDIR}"
mkdir -p "$OUT"

# The two multi-call backends and the extensions they dlopen (from
# /usr/lib/<multiarch triplet>/xtables).
files=(/usr/sbin/xtables-legacy-multi /usr/sbin/xtables-nft-multi /usr/lib/*/xtables/*.so)

# Every shared library those need (ldd resolves the whole closure), the
# dynamic loader included. With several files ldd prints a "FILE:" header
# before each list; those are skipped.
mapfile -t libs < <(ldd "${files[@]}" \
  | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\/.*[^:]$/ { print $1 }' | sort -u)

# cp --parents keeps the paths; -L stores the libraries as files, so the
# distroless image needs no /lib -> usr/lib links to find them.
cp --parents -L "${files[@]}" "${libs[@]}" "$OUT"/

# A static busybox, when the source has one (the test image installs
# busybox-static for its test script; a production image leaves it out):
# sh, grep, sed, mktemp, sleep, ... as applet links in /bin. Its own
# iptables-like applets, if any, are left out so that only the wrapper answers
# to those names.
if [[ -x /bin/busybox ]]; then
  mkdir -p "$OUT/bin"
  cp /bin/busybox "$OUT/bin/busybox"
  for applet in $(/bin/busybox --list); do
    case "$applet" in busybox|*iptables*) continue ;; esac
    ln -s busybox "$OUT/bin/$applet"
  done
fi

# Directories a process expects: /run for legacy iptables' xtables.lock,
# /tmp, and an empty /etc with the protocol names iptables may look up.
mkdir -p "$OUT/run" "$OUT/tmp" "$OUT/etc" "$OUT/usr/local/bin"
chmod 1777 "$OUT/tmp"
if [[ -e /etc/protocols ]]; then cp /etc/protocols "$OUT/etc/"; fi
