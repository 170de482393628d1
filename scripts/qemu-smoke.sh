#!/usr/bin/env bash
# Runs each cross-built wrapper (aarch64, armv7, ppc64le, riscv64, s390x) on
# this (x86_64) machine under qemu-user (qemu-ARCH-static, Debian package
# qemu-user-static, installed here when missing): --version, dispatch to
# stub backends by IPTABLES_MODE and by the host link, and `detect` in fresh
# network namespaces against the machine's real iptables-legacy and
# iptables-nft.
#
#   scripts/qemu-smoke.sh [DIST_DIR [ARCH...]]   (default: dist, from
#                                                 scripts/build-static.sh --all; all five)
#
# qemu-user refuses NETLINK_NETFILTER sockets (EPROTONOSUPPORT) and the
# x_tables getsockopts, so under qemu `detect` goes through the save-tool
# fallbacks (the machine's own x86_64 iptables-*-save, run natively by qemu's
# execve): its decisions must match the native x86_64 binary's, which reads the
# kernel directly. Every iptables call here runs inside `unshare -n`.
set -euo pipefail
cd "$(dirname "$0")/.."
DIST="${1:-dist}"
shift || true
ARCHES=("$@")
((${#ARCHES[@]})) || ARCHES=(aarch64 armv7 ppc64le riscv64 s390x)
NATIVE="$(realpath -m "$DIST/iptables-wrapper-x86_64")"

fail() { echo "qemu-smoke: FAIL: $*" >&2; exit 1; }
step() { echo "qemu-smoke: $*" >&2; }

[[ "$(uname -m)" == x86_64 ]] || { step "not an x86_64 machine: skipped"; exit 0; }
if ! command -v qemu-s390x-static >/dev/null; then
    bash scripts/apt-install.sh qemu-smoke qemu-user-static
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/iptw-qemu.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# ELF machine (readelf -h) and byte order of each architecture's binary, and
# its qemu: running it natively is impossible, so qemu is what runs it.
declare -A MACHINE=([aarch64]="AArch64 little" [armv7]="ARM little" [ppc64le]="PowerPC64 little"
    [riscv64]="RISC-V little" [s390x]="IBM S/390 big")
declare -A QEMU_NAME=([aarch64]=aarch64 [armv7]=arm [ppc64le]=ppc64le [riscv64]=riscv64 [s390x]=s390x)

# smoke ARCH: the whole smoke for one architecture's binary.
smoke() {
    ARCH_NAME="$1"
    BINARY="$(realpath -m "$DIST/iptables-wrapper-$ARCH_NAME")"
    TARGET=$(bash scripts/static-target.sh "$ARCH_NAME")
    [[ -x "$BINARY" && -x "$NATIVE" ]] || fail "$BINARY and $NATIVE are needed (bash scripts/build-static.sh --all)"
    QEMU=$(command -v "qemu-${QEMU_NAME[$ARCH_NAME]}-static")
    elf="$(readelf -h "$BINARY" | sed -n 's/^ *Machine: *//p') $(readelf -h "$BINARY" | sed -n 's/^ *Data: *2.s complement, \([a-z]*\) endian/\1/p')"
    [[ "$elf" == "${MACHINE[$ARCH_NAME]}" ]] || fail "$BINARY is '$elf', not ${MACHINE[$ARCH_NAME]} endian"
    rm -rf "${WORK:?}"/*
    step "$ARCH_NAME: $elf endian, under $(basename "$QEMU")"

    step "--version"
    version=$("$QEMU" "$BINARY" --version)
    [[ "$version" =~ ^iptables-wrapper\ [0-9][^\ ]*\ commit\ [0-9a-f]{12}\ target\ $TARGET$ \
        || "$version" =~ ^iptables-wrapper\ [0-9][^\ ]*\ commit\ unknown\ target\ $TARGET$ ]] \
        || fail "unexpected --version output: $version"

    step "dispatch to stub backends"
    mkdir -p "$WORK/stub" "$WORK/bin" "$WORK/host/etc/alternatives"
    for mode in nft legacy; do
        printf '#!/bin/sh\necho "%s $*"\nexit 3\n' "$mode" >"$WORK/stub/xtables-$mode-multi"
        chmod +x "$WORK/stub/xtables-$mode-multi"
    done
    ln -s "$BINARY" "$WORK/bin/iptables"
    ln -s "$BINARY" "$WORK/bin/ip6tables-save"
    # expect_dispatch WANT COMMAND [ENV...]: the wrapper, invoked as COMMAND,
    # execs the WANT stub with the same arguments and passes on its exit status.
    expect_dispatch() {
        local want="$1" command="$2" out rc=0; shift 2
        out=$(env IPTABLES_WRAPPER_SBIN="$WORK/stub" IPTABLES_WRAPPER_HOST_ROOT="$WORK/host" \
            IPTABLES_WRAPPER_RUN_DIR="$WORK/run" "$@" \
            "$QEMU" "$WORK/bin/$command" -L -n 2>"$WORK/stderr") || rc=$?
        [[ "$out" == "$want -L -n" && $rc -eq 3 ]] \
            || fail "$command ($*): expected '$want -L -n' and status 3, got '$out' status $rc; stderr: $(cat "$WORK/stderr")"
    }
    expect_dispatch legacy iptables IPTABLES_MODE=legacy
    expect_dispatch nft iptables IPTABLES_MODE=nft
    expect_dispatch legacy ip6tables-save IPTABLES_MODE=Legacy
    ln -sfn /usr/sbin/iptables-legacy "$WORK/host/etc/alternatives/iptables"
    expect_dispatch legacy iptables
    expect_dispatch legacy ip6tables-save   # falls back to the iptables link
    ln -sfn /usr/sbin/iptables-nft "$WORK/host/etc/alternatives/iptables"
    expect_dispatch nft iptables
    ln -sfn /usr/sbin/ip6tables-legacy "$WORK/host/etc/alternatives/ip6tables"
    expect_dispatch legacy ip6tables-save
    expect_dispatch nft iptables IPTABLES_MODE=nft

    step "detect in fresh network namespaces (save-tool fallbacks)"
    # check_detect NAME WANT_MODE WANT_SOURCE SETUP: in a new network namespace,
    # SETUP (shell, real iptables) builds a state; the emulated wrapper must
    # decide WANT_MODE by WANT_SOURCE through the save tools, and agree with the
    # native wrapper.
    check_detect() {
        local name="$1" want_mode="$2" want_source="$3" setup="$4"
        XTABLES_LOCKFILE="$WORK/xtables.lock" IPTABLES_WRAPPER_HOST_ROOT="$WORK/nohost" \
            IPTABLES_WRAPPER_RUN_DIR="$WORK/run" IPTABLES_WRAPPER_LOG=debug \
            unshare -n bash -c "set -e; $setup
                $QEMU $BINARY detect -v >$WORK/emulated.out 2>$WORK/emulated.err
                $NATIVE detect -v >$WORK/native.out 2>/dev/null" \
            || fail "$name: detect failed: $(cat "$WORK/emulated.err" 2>/dev/null)"
        local mode source
        mode=$(sed -n '1{s/ .*//;p;}' "$WORK/emulated.out")
        source=$(sed -n 's/^decided by: \([a-z-]*\).*/\1/p' "$WORK/emulated.out")
        [[ "$mode" == "$want_mode" && "$source" == "$want_source" ]] \
            || fail "$name: expected $want_mode by $want_source, got:"$'\n'"$(cat "$WORK/emulated.out")"
        grep -q 'falling back to iptables-nft-save' "$WORK/emulated.err" \
            || fail "$name: the nf_tables query was not refused under qemu: not the fallback path"
        if [[ "$setup" == *iptables-legacy* ]]; then
            grep -q 'iptables-legacy-save output' "$WORK/emulated.out" \
                || fail "$name: the legacy rules were not read through iptables-legacy-save:"$'\n'"$(cat "$WORK/emulated.out")"
        fi
        [[ "$(head -n3 "$WORK/native.out")" == "$(head -n3 "$WORK/emulated.out")" ]] \
            || fail "$name: emulated and native decisions differ:"$'\n'"$(cat "$WORK/emulated.out")"$'\n'"---"$'\n'"$(cat "$WORK/native.out")"
        # The emulated wrapper's rule counts came from the save tools and match
        # the native reader's.
        diff <(grep '\[rule-counts\]' "$WORK/emulated.out" | sed 's/  (.*//') \
            <(grep '\[rule-counts\]' "$WORK/native.out" | sed 's/  (.*//') >/dev/null \
            || fail "$name: rule counts differ:"$'\n'"$(cat "$WORK/emulated.out")"$'\n'"---"$'\n'"$(cat "$WORK/native.out")"
        step "  $name: $mode by $source"
    }
    check_detect "empty namespace (no legacy table)" nft rule-counts ""
    check_detect "a tie" nft default \
        "iptables-legacy -A INPUT -j ACCEPT; iptables-nft -A INPUT -j ACCEPT; rm -f $WORK/xtables.lock"
    check_detect "more legacy rules" legacy rule-counts \
        "for i in 1 2 3; do iptables-legacy -A INPUT -j ACCEPT; done; ip6tables-legacy -A INPUT -j ACCEPT; iptables-nft -A INPUT -j ACCEPT"
    check_detect "more nft rules" nft rule-counts \
        "iptables-legacy -A INPUT -j ACCEPT; for i in 1 2 3; do iptables-nft -A INPUT -j ACCEPT; done; ip6tables-nft -A FORWARD -j DROP"
    check_detect "hint chain in nft" nft hint-chain \
        "for i in 1 2 3; do iptables-legacy -A INPUT -j ACCEPT; done; iptables-nft -t mangle -N KUBE-IPTABLES-HINT"
    check_detect "hint chain in legacy" legacy hint-chain \
        "for i in 1 2 3; do iptables-nft -A INPUT -j ACCEPT; done; iptables-legacy -t mangle -N KUBE-IPTABLES-HINT"
    step "$ARCH_NAME passed"
}

for arch in "${ARCHES[@]}"; do smoke "$arch"; done
step "passed"
