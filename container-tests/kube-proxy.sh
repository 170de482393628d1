#!/usr/bin/env bash
# A real kube-proxy (v1.20.2, iptables mode) through the wrapper, compared
# with the same kube-proxy on plain iptables-nft.
#
#   bash container-tests/kube-proxy.sh [--families "ipv4 dual"] [--wrong-backend] [--keep DIR]
#
# Each run is a fresh network + mount namespace (unshare -n -m, a tmpfs on
# /run) holding etcd (Debian's etcd-server), kube-apiserver and kube-proxy on
# loopback; Services and EndpointSlices come from kube-proxy/objects.sh with
# fixed addresses and node ports. kube-proxy, kube-apiserver and kubectl are
# built from Debian's `kubernetes` source package by kube-proxy-build.sh
# (cached outside the repository). In each run kube-proxy starts on the
# objects, syncs, then two changes are made (3 endpoints added to svc-0,
# svc-8 deleted, its EndpointSlice left), each waited for by its sync count on /metrics, and
# kube-proxy is stopped. Its execve calls are traced (strace -ff), its log
# kept, the rules of both backends saved.
#
# Runs per family (ipv4: kube-proxy's default; dual: the IPv6DualStack alpha
# gate on apiserver and kube-proxy, plus three IPv6 Services):
#   direct   the six command names link to iptables-nft*
#   wrapped  the six names link to the wrapper (`iptables-wrapper install
#            --dir`, as the README's install does); no host root mounted,
#            so the wrapper decides from the kernel's state
# Checked, wrapped against direct: the same nft rules (iptables-save without
# counters and comment lines, sorted: kube-proxy 1.20 writes Services in Go
# map order), nothing in legacy; the same distinct log lines (klog header,
# durations and pointers masked); the same calls: kube-proxy makes one or two
# syncs at start-up depending on when its informers' events arrive, so the
# calls are compared as the start-up calls plus what each sync calls
# (kube-proxy/calls.py); every wrapped call ending in xtables-nft-multi; of
# the hint chains only KUBE-PROXY-CANARY is made.
# Then, ipv4 only:
#   upgrade  legacy holds an old kube-proxy's rules (the same kube-proxy run
#            first on iptables-legacy*, then stopped), the host's link says
#            nft (a host root whose etc/alternatives/ip{,6}tables point to
#            iptables-nft, IPTABLES_WRAPPER_HOST_ROOT): kube-proxy through the
#            wrapper must write nft, and `iptables-wrapper stale --remove`, run
#            while it runs, must exit 0 and leave legacy empty; kube-proxy's
#            nft rules must equal the direct run's. (kube-proxy's ClientIP
#            session affinity writes `-m recent --set` without --mask, which
#            sets all 16 bytes of xt_recent's mask, while the saved `--mask
#            255.255.255.255` restores 4: the proof leaves out the 12 an
#            IPv4 rule never reads, see docs/mixed-state.md.)
#   upgrade-no-affinity  the same without svc-3's ClientIP session affinity,
#            checked for the removal, legacy empty and the nft rules.
# --wrong-backend sets IPTABLES_MODE=legacy for the wrapped runs (a wrapper
# that picks the wrong backend): the checks must then fail, and this script
# exits 1. Prints one "PASS"/"FAIL" line per check and a summary; exit 0 only
# if all pass. Needs root (namespaces), strace, etcd-server, openssl, curl,
# dpkg-dev (installed when missing).
#
# SAFETY: every iptables, nft and kube-proxy call happens inside the
# namespaces made here; the host's network namespace is only ever read.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
KP="$HERE/kube-proxy"

# ---------------------------------------------------------------------------
# Inside one namespace: `kube-proxy.sh --inside MODE FAMILY OUT`
# ---------------------------------------------------------------------------
inside() {
    local mode="$1" family="$2" out="$3"
    # shellcheck source=kube-proxy/node.sh
    source "$KP/node.sh"
    trap node_down EXIT
    node_up "$family" "$out"
    local kubectl=("$KUBE_BIN/kubectl" --kubeconfig "$out/kubeconfig")
    bash "$KP/objects.sh" "$family" 0 >"$out/objects.yaml"
    "${kubectl[@]}" apply -f "$out/objects.yaml" >"$out/kubectl.log"

    # The command names kube-proxy finds first in PATH.
    local bindir env=()
    case "$mode" in
        direct) bindir="$CMD_DIRS/direct" ;;
        wrapped) bindir="$CMD_DIRS/wrapped" ;;
        upgrade*) bindir="$CMD_DIRS/wrapped" env=(IPTABLES_WRAPPER_HOST_ROOT="$CMD_DIRS/host-nft") ;;
    esac
    [[ "${WRONG_BACKEND:-0}" == 1 && "$mode" != direct ]] && env+=(IPTABLES_MODE=legacy)

    if [[ "$mode" == upgrade* ]]; then
        # Before the upgrade: the same kube-proxy on legacy, stopped; its
        # rules stay in the legacy tables, as on a node that switched.
        kp_start "$out/old" "$CMD_DIRS/legacy" "$family"
        wait_syncs "$out/old" 1
        kp_stop
        save_rules "$out/old"
    fi

    kp_start "$out" "$bindir" "$family" "${env[@]}"
    wait_syncs "$out" 1
    local n
    n=$(sync_count)
    bash "$KP/objects.sh" "$family" 3 >"$out/objects-3.yaml"
    "${kubectl[@]}" apply -f "$out/objects-3.yaml" >>"$out/kubectl.log"
    wait_syncs "$out" $((n + 1))
    n=$(sync_count)
    "${kubectl[@]}" delete service svc-8 >>"$out/kubectl.log"
    wait_syncs "$out" $((n + 1))
    if [[ "$mode" == upgrade* ]]; then
        # While kube-proxy runs: the wrapper's own stale removal.
        local rc=0
        env "${env[@]}" IPTABLES_WRAPPER_RUN_DIR=/run/iptables-wrapper \
            "$CMD_DIRS/wrapped/iptables-wrapper" stale --remove >"$out/stale-remove.txt" 2>&1 || rc=$?
        echo "$rc" >"$out/stale-remove.rc"
        # The same two changes again after the removal (svc-0 back to 15
        # endpoints and svc-8 back, then as before): they must land in nft.
        n=$(sync_count)
        "${kubectl[@]}" apply -f "$out/objects.yaml" >>"$out/kubectl.log"
        wait_syncs "$out" $((n + 1))
        n=$(sync_count)
        "${kubectl[@]}" apply -f "$out/objects-3.yaml" >>"$out/kubectl.log"
        "${kubectl[@]}" delete service svc-8 >>"$out/kubectl.log"
        wait_syncs "$out" $((n + 1))
    fi
    curl -sf http://127.0.0.1:10249/metrics >"$out/metrics.txt" || true
    kp_stop
    save_rules "$out"
}

if [[ "${1:-}" == --inside ]]; then
    [[ "$2" == upgrade-no-affinity ]] && export OBJ_AFFINITY=0
    inside "$2" "$3" "$4"
    exit 0
fi

# ---------------------------------------------------------------------------
# Outside: build, run, compare.
# ---------------------------------------------------------------------------
FAMILIES="ipv4 dual"
KEEP=""
WRONG_BACKEND=0
while (($#)); do
    case "$1" in
        --families) FAMILIES="$2"; shift 2 ;;
        --keep) KEEP="$2"; shift 2 ;;
        --wrong-backend) WRONG_BACKEND=1; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "kube-proxy.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ $EUID -eq 0 ]] || { echo "kube-proxy.sh: needs root (network namespaces)" >&2; exit 2; }
# What the runs need, from Debian's packages when missing.
bash "$REPO/scripts/apt-install.sh" kube-proxy.sh strace etcd-server openssl curl util-linux nftables python3 iproute2 dpkg-dev xz-utils

KUBE_BIN="${IPTW_KUBE_BIN:-$(bash "$HERE/kube-proxy-build.sh" | tail -n1)}" # IPTW_KUBE_BIN: a directory with the three binaries
WRAPPER="${IPTW_WRAPPER:-$(bash "$REPO/scripts/build-static.sh" | tail -n1)}"
T=$(mktemp -d /tmp/iptw-kube-proxy.XXXXXX)
cleanup() { [[ -n "$KEEP" ]] && { rm -rf "$KEEP"; cp -a "$T" "$KEEP"; }; rm -rf "$T"; }
trap cleanup EXIT

# The command directories: the six names to iptables-nft, to iptables-legacy,
# and to the wrapper (installed as the README says); a host root whose
# alternatives links say nft.
CMD_DIRS="$T/cmd"
mkdir -p "$CMD_DIRS"/{direct,legacy,wrapped} "$CMD_DIRS/host-nft/etc/alternatives"
for v in iptables ip6tables; do
    for s in "" -save -restore; do
        ln -s "/usr/sbin/$v-nft$s" "$CMD_DIRS/direct/$v$s"
        ln -s "/usr/sbin/$v-legacy$s" "$CMD_DIRS/legacy/$v$s"
    done
    ln -s "/usr/sbin/$v-nft" "$CMD_DIRS/host-nft/etc/alternatives/$v"
done
cp "$WRAPPER" "$CMD_DIRS/wrapped/iptables-wrapper"
"$CMD_DIRS/wrapped/iptables-wrapper" install --dir "$CMD_DIRS/wrapped" >/dev/null
export KUBE_BIN CMD_DIRS WRONG_BACKEND

PASS=0 FAIL=0
check() { # check NAME CONDITION-COMMAND...
    local name="$1"
    shift
    if "$@"; then echo "PASS $name"; PASS=$((PASS + 1)); else echo "FAIL $name"; FAIL=$((FAIL + 1)); fi
}
# run MODE FAMILY: one fresh namespace.
run() {
    local start=$SECONDS
    unshare -n -m --propagation private bash "$0" --inside "$1" "$2" "$T/$2-$1" \
        >"$T/$2-$1.out" 2>&1 || { echo "run $2 $1 failed:" >&2; tail -30 "$T/$2-$1.out" >&2; return 1; }
    python3 "$KP/calls.py" "$T/$2-$1/strace/trace" "$T/$2-$1/calls.txt" "$T/$2-$1/backends.txt"
    echo "run $2 $1: $((SECONDS - start))s" >&2
}
# norm_rules FILE: iptables-save output without comments and counters,
# sorted: kube-proxy 1.20 writes its Services in Go map order, which differs
# from run to run (the rules of one endpoint chain keep their order).
norm_rules() { { grep -v '^#' "$1" || true; } | sed 's/^\(:[^ ]* [^ ]*\) \[[0-9]*:[0-9]*\]$/\1/' | sort; }
rule_count() { grep -c '^-A' "$1" || true; }
# norm_log FILE: kube-proxy's distinct log lines, the klog header reduced to
# severity and source line, durations and pointers masked. Distinct: a run
# with one more start-up sync repeats a sync's lines (see calls.py).
# Two lines depend on when its syncs fall, not on iptables, and are left
# out: the errors of a missing `conntrack` (not installed: with it,
# kube-proxy runs it from its syncs), and "Not syncing iptables until
# Services and Endpoints have been received", logged only when a sync is
# due before the informers' first events arrive.
norm_log() {
    grep -v -e 'error looking for path of conntrack' -e 'Not syncing iptables until' "$1" \
        | sed -E 's/^([IWEF])[0-9]{4} [0-9:.]+ +[0-9]+ /\1 /; s/[0-9]+(\.[0-9]+)?(ns|µs|us|ms|s)\b/DUR/g; s/0x[0-9a-f]+/PTR/g' | sort -u
}
same() { diff -q "$1" "$2" >/dev/null; }
all_nft() { [[ -s "$1" ]] && ! grep -vqx /usr/sbin/xtables-nft-multi "$1"; } # every wrapped call's last exec (calls.py: the six iptables commands)
rc_zero() { [[ "$(cat "$1")" == 0 ]]; }
canary_only() { grep -q KUBE-PROXY-CANARY "$1" && ! grep -q KUBE-IPTABLES-HINT "$1"; }
rules_over() { (($(grep -c "^-A${3:-}" "$2" || true) > $1)); } # rules_over N FILE [CHAIN-PREFIX]
calls_same() { python3 "$KP/calls.py" compare "$1" "$2" >/dev/null; }
empty_rules() { ! grep -q '^-A\|^:KUBE' "$1"; }

for family in $FAMILIES; do
    run direct "$family"
    run wrapped "$family"
    d="$T/$family-direct" w="$T/$family-wrapped"
    for f in nft4 nft6 legacy4 legacy6; do
        norm_rules "$d/$f.rules" >"$d/$f.norm"
        norm_rules "$w/$f.rules" >"$w/$f.norm"
    done
    norm_log "$d/kube-proxy.log" >"$d/log.norm"
    norm_log "$w/kube-proxy.log" >"$w/log.norm"
    echo "$family: direct: $(rule_count "$d/nft4.rules") IPv4 + $(rule_count "$d/nft6.rules") IPv6 nft rules, $(wc -l <"$d/calls.txt") calls ($(cut -d' ' -f1 "$d/calls.txt" | sort | uniq -c | awk '{printf "%s%s %s", s, $1, $2; s=", "}')), $(wc -l <"$d/kube-proxy.log") log lines ($(wc -l <"$d/log.norm") distinct), $(grep sync_proxy_rules_duration_seconds_count "$d/metrics.txt" | cut -d' ' -f2) syncs"
    echo "$family: wrapped: $(rule_count "$w/nft4.rules") IPv4 + $(rule_count "$w/nft6.rules") IPv6 nft rules, $(wc -l <"$w/calls.txt") calls, $(wc -l <"$w/kube-proxy.log") log lines ($(wc -l <"$w/log.norm") distinct), $(grep sync_proxy_rules_duration_seconds_count "$w/metrics.txt" | cut -d' ' -f2) syncs, legacy tables: $(paste -sd, "$w/legacy-tables.txt")"
    check "$family: the same IPv4 nft rules wrapped as direct" same "$d/nft4.norm" "$w/nft4.norm"
    check "$family: the same IPv6 nft rules wrapped as direct" same "$d/nft6.norm" "$w/nft6.norm"
    check "$family: nothing in legacy, wrapped" empty_rules "$w/legacy4.norm"
    check "$family: nothing in legacy IPv6, wrapped" empty_rules "$w/legacy6.norm"
    check "$family: the same log lines (distinct, normalized)" same "$d/log.norm" "$w/log.norm"
    python3 "$KP/calls.py" compare "$d/calls.txt" "$w/calls.txt" >"$w/calls-compare.txt" || true
    sed "s/^/$family: /" "$w/calls-compare.txt"
    check "$family: the same calls (start-up calls, and what each sync calls)" \
        calls_same "$d/calls.txt" "$w/calls.txt"
    check "$family: every wrapped call ended in xtables-nft-multi" \
        all_nft "$w/backends.txt"
    check "$family: kube-proxy made only KUBE-PROXY-CANARY of the hint chains" \
        canary_only "$w/calls.txt"
    ip6=$(grep -c '^ip6tables' "$d/calls.txt" || true)
    echo "$family: ip6tables calls: $ip6 of $(wc -l <"$d/calls.txt")"
    for f in nft4 nft6; do diff "$d/$f.norm" "$w/$f.norm" | head -5 || true; done
    diff "$d/log.norm" "$w/log.norm" | head -10 || true
done

if [[ " $FAMILIES " == *" ipv4 "* ]]; then
    run upgrade ipv4
    u="$T/ipv4-upgrade" d="$T/ipv4-direct"
    for f in nft4 nft6 legacy4 legacy6; do norm_rules "$u/$f.rules" >"$u/$f.norm"; done
    norm_rules "$u/old/legacy4.rules" >"$u/old/legacy4.norm"
    echo "upgrade: legacy held $(rule_count "$u/old/legacy4.rules") old kube-proxy rules; stale --remove exited $(cat "$u/stale-remove.rc"): $(head -n1 "$u/stale-remove.txt")"
    grep '^left as it was' "$u/stale-remove.txt" | sed 's/^/upgrade: stale --remove: /' || true
    echo "upgrade: after: $(rule_count "$u/nft4.rules") nft rules, $(rule_count "$u/legacy4.rules") legacy rules, $(wc -l <"$u/calls.txt") calls"
    check "upgrade: legacy held the old kube-proxy's rules" rules_over 500 "$u/old/legacy4.rules" " KUBE"
    check "upgrade: stale --remove exited 0" rc_zero "$u/stale-remove.rc"
    check "upgrade: legacy empty after stale --remove" empty_rules "$u/legacy4.norm"
    check "upgrade: kube-proxy's rules in nft, the same as the direct run's" same "$d/nft4.norm" "$u/nft4.norm"
    check "upgrade: every wrapped call ended in xtables-nft-multi" \
        all_nft "$u/backends.txt"
    # The same upgrade without svc-3's session affinity (no `-m recent`).
    run upgrade-no-affinity ipv4
    u="$T/ipv4-upgrade-no-affinity"
    norm_rules "$u/legacy4.rules" >"$u/legacy4.norm"
    echo "upgrade, no affinity: legacy held $(rule_count "$u/old/legacy4.rules") old rules; stale --remove exited $(cat "$u/stale-remove.rc"); after: $(rule_count "$u/nft4.rules") nft rules, $(rule_count "$u/legacy4.rules") legacy rules"
    check "upgrade, no affinity: stale --remove exited 0" rc_zero "$u/stale-remove.rc"
    check "upgrade, no affinity: legacy empty after stale --remove" empty_rules "$u/legacy4.norm"
    check "upgrade, no affinity: kube-proxy's rules in nft (over 900)" rules_over 900 "$u/nft4.rules"
    check "upgrade, no affinity: every wrapped call ended in xtables-nft-multi" \
        all_nft "$u/backends.txt"
fi

# The README's "Tested with" row for kube-proxy, from this run: what its
# wrapped calls exercised (calls.txt of every wrapped run) and the states
# that passed. Made and checked only by a full run (both families, the
# upgrades) in which every check passed: a failing run fails anyway.
tested_with_table() {
    local version source exercises
    version="$("$KUBE_BIN/kube-proxy" --version 2>/dev/null | awk '{print $NF}')"
    source="$(basename "$KUBE_BIN" | sed 's/-go\([0-9.]*\)-.*$/ with Go \1/')"
    exercises="$(cat "$T"/*-wrapped/calls.txt "$T"/ipv4-upgrade*/calls.txt | awk '
        { names[$1] = 1
          if ($1 ~ /restore$/ && / --noflush( |$)/) noflush = 1
          if (/ (-w|--wait)( |$)/) wait = 1
          if (/ (-C|--check)( |$)/) check = 1 }
        END {
          split("iptables ip6tables iptables-save ip6tables-save iptables-restore ip6tables-restore", order, " ")
          for (i = 1; i <= 6; i++) if (order[i] in names) out = out (out == "" ? "" : ", ") "`" order[i] "`"
          if (noflush) out = out "; restore `--noflush`"
          if (wait) out = out "; `-w`"
          if (check) out = out "; `-C` checks"
          print out
        }')"
    echo '| client | version | what it exercises through the wrapper | states passed (against the same kube-proxy on plain iptables-nft) |'
    echo '|---|---|---|---|'
    # shellcheck disable=SC2016 # the backquotes are Markdown's
    printf '| kube-proxy (iptables mode; with Services and EndpointSlices, IPv4 and dual-stack) | %s, built from Debian 12'"'"'s `kubernetes` %s | %s | clean, IPv4 and dual-stack (no host root: the decision from the kernel'"'"'s state); upgraded (an old kube-proxy'"'"'s rules in legacy, the host link to nft, `iptables-wrapper stale --remove` while it runs), with and without ClientIP session affinity |\n' \
        "$version" "$source" "$exercises"
}

if [[ $FAIL == 0 && $WRONG_BACKEND == 0 && "$FAMILIES" == "ipv4 dual" ]]; then
    tested_with_table >"$T/table.md"
    echo
    cat "$T/table.md"
    echo
    if [[ "${IPTW_KUBE_PROXY_UPDATE_README:-0}" == 1 ]]; then
        bash "$HERE/clients-table.sh" --write "$REPO/README.md" "$T/table.md" kube-proxy
        echo "README.md: the kube-proxy Tested with row written"
    else
        check "README.md has the kube-proxy Tested with row this run produced (IPTW_KUBE_PROXY_UPDATE_README=1 writes it)" \
            bash "$HERE/clients-table.sh" --check "$REPO/README.md" "$T/table.md" kube-proxy
    fi
fi

echo "kube-proxy: $PASS passed, $FAIL failed$([[ $WRONG_BACKEND == 1 ]] && echo ' (--wrong-backend: failures expected)')"
((FAIL == 0))
