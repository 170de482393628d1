#!/usr/bin/env bash
# Benchmark: what a call through iptables-wrapper costs over calling the backend
# directly, on kube-proxy-like rule sets of 0, 1,000, 50,000 and 100,000 rules
# per backend, and on one long chain of 50,000 and 100,000 rules per backend
# (first and repeated calls).
#
#   sudo bash bench/run.sh                   # builds, measures, prints the report (and keeps it in a temporary file)
#   sudo bash bench/run.sh --write-results   # ... and writes it to bench/results.md (tracked: only when asked)
#
# Every iptables/nft command runs inside network namespaces this script creates
# (and deletes on exit); the machine's own namespace, /host and /run/xtables.lock
# are never touched or consulted.  Exits non-zero when a target is missed.
#
# Environment knobs (defaults in brackets):
#   BENCH_RUNS [400]       iterations per row for the -V comparisons
#   BENCH_WARMUP [20]      discarded iterations before those
#   BENCH_SLOW_RUNS [7]    iterations per row when save-and-count is measured
#   BENCH_LONG_RUNS [3]    iterations (no warm-up) for the first calls at BENCH_LONG rules
#   BENCH_LONG [100000]    the long chain's size (BENCH_LONG_HALF [50000] the smaller),
#                          and the larger kube-proxy-like tie
#   BENCH_LARGE [50000]    the large rule-set size (BENCH_SMALL [1000] the small)
#   BENCH_RESULTS [a new temporary file; bench/results.md with --write-results]
#   BENCH_WRAPPER          use this binary instead of building with cargo
#   BENCH_SCENARIOS [growing large long]
#                          which scenarios to run (growing: A, E 50k L + 1k N;
#                          large: B-D, E 1k L + 50k N and the ties, G 50k;
#                          long: F and G on one long chain)
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH_DIR")
RESULTS=${BENCH_RESULTS:-}   # where the report goes; set in main
RUNS=${BENCH_RUNS:-400}
WARMUP=${BENCH_WARMUP:-20}
SLOW_RUNS=${BENCH_SLOW_RUNS:-7}
LONG_RUNS=${BENCH_LONG_RUNS:-3}
LONG=${BENCH_LONG:-100000}
LONG_HALF=${BENCH_LONG_HALF:-50000}
SMALL=${BENCH_SMALL:-1000}
LARGE=${BENCH_LARGE:-50000}
SBIN=/usr/sbin                    # where the real backends live
HINT=KUBE-IPTABLES-HINT
NS_PREFIX=iptwb-$$

# Nothing inherited may steer the wrapper; each measurement sets its own.
unset IPTABLES_MODE IPTABLES_WRAPPER_HOST_ROOT IPTABLES_WRAPPER_SBIN IPTABLES_WRAPPER_LOG XTABLES_LOCKFILE \
    IPTABLES_WRAPPER_RUN_DIR

log() { printf '[bench %(%T)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- setup ----

ensure_tools() {
    local missing=() pair
    for pair in gcc:gcc strace:strace ip:iproute2 awk:mawk \
                iptables-legacy:iptables iptables-nft:iptables; do
        command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
    done
    [[ -e /usr/lib/x86_64-linux-gnu/libc.a ]] || missing+=(libc6-dev)
    if ((${#missing[@]})); then
        bash "$REPO/scripts/apt-install.sh" bench "${missing[@]}"
    fi
}

build_wrapper() {
    if [[ -n ${BENCH_WRAPPER:-} ]]; then
        WRAPPER_BIN=$BENCH_WRAPPER
        log "using prebuilt wrapper $WRAPPER_BIN"
        return
    fi
    command -v cargo >/dev/null || die "cargo not found"
    log "building the static release binary (scripts/build-static.sh)"
    WRAPPER_BIN=$(bash "$REPO/scripts/build-static.sh")
    log "building the crate's default release binary (plain cargo build --release)"
    PLAIN_BIN=$(cd "$REPO" && cargo build --release --quiet --message-format=json \
        | grep -o '"executable":"[^"]*iptables-wrapper"' | cut -d'"' -f4)
    [[ -x $PLAIN_BIN ]] || die "plain cargo build --release made no iptables-wrapper executable"
}

cleanup() {
    local ns
    for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
    [[ -n ${WORK:-} ]] && rm -rf "$WORK"
}

# Tools, the wrapper with its six links, fake host roots, lock paths, rule files.
prepare_workdir() {
    WORK=$(mktemp -d /tmp/iptables-wrapper-bench.XXXXXX)
    mkdir -p "$WORK/bin" "$WORK/stub" "$WORK/out"

    gcc -static -O2 -o "$WORK/abtime" "$BENCH_DIR/abtime.c"
    gcc -static -nostdlib -Os -fno-stack-protector -o "$WORK/stub/xtables-nft-multi" "$BENCH_DIR/stub-backend.c"
    gcc -static -nostdlib -Os -fno-stack-protector -o "$WORK/exec-hop" "$BENCH_DIR/exec-hop.c"
    ln "$WORK/stub/xtables-nft-multi" "$WORK/stub/xtables-legacy-multi"
    echo 'int main(void) { return 0; }' | gcc -static -O2 -x c -o "$WORK/empty-glibc" -

    cp "$WRAPPER_BIN" "$WORK/bin/iptables-wrapper"
    "$WORK/bin/iptables-wrapper" install --dir "$WORK/bin"
    [[ -L $WORK/bin/iptables ]] || die "iptables-wrapper install did not create $WORK/bin/iptables"
    WRAPPED=$WORK/bin/iptables
    if [[ -n ${PLAIN_BIN:-} ]]; then
        mkdir -p "$WORK/plain"
        cp "$PLAIN_BIN" "$WORK/plain/iptables-wrapper"
        "$WORK/plain/iptables-wrapper" install --dir "$WORK/plain" >/dev/null
        PLAIN_WRAPPED=$WORK/plain/iptables
    fi

    local mode
    mkdir -p "$WORK/host-none"
    for mode in nft legacy; do
        mkdir -p "$WORK/host-$mode/etc/alternatives"
        ln -s "$SBIN/iptables-$mode" "$WORK/host-$mode/etc/alternatives/iptables"
        ln -s "$SBIN/ip6tables-$mode" "$WORK/host-$mode/etc/alternatives/ip6tables"
    done

    LOAD_LOCK=$WORK/load.lock      # legacy tools create this while we load rules
    BENCH_LOCK=$WORK/xtables.lock  # what the wrapper sees: never created

    # The wrapper's runtime directory (its count cache) for the "auto" setups;
    # "first" points it below a regular file, so no call finds a count cached.
    RUN_DIR=$WORK/run
    : > "$WORK/no-run-dir"

    local n chain chain_n
    for n in "$SMALL" "$LARGE" "$LONG"; do
        awk -v N="$n" -f "$BENCH_DIR/gen-rules.awk" > "$WORK/rules-$n.v4"
        [[ $(grep -c '^-A' "$WORK/rules-$n.v4") == "$n" ]] || die "generator did not make $n rules"
    done
    for chain_n in "INPUT $LONG_HALF" "LONG $LONG_HALF" "LONG $LONG"; do
        read -r chain n <<<"$chain_n"
        awk -v N="$n" -v CHAIN="$chain" -f "$BENCH_DIR/gen-long-chain.awk" > "$WORK/long-$chain-$n.v4"
        [[ $(grep -c '^-A' "$WORK/long-$chain-$n.v4") == "$n" ]] || die "generator did not make $n rules"
    done
}

# ----------------------------------------------------------- namespaces ----

NAMESPACES=()

ns_create() {
    local ns=$1
    ip netns add "$ns"
    NAMESPACES+=("$ns")
    [[ $(ip netns exec "$ns" readlink /proc/self/ns/net) != "$(readlink /proc/self/ns/net)" ]] \
        || die "namespace $ns is not isolated"
}

# The only way this script runs anything netfilter-related.
in_ns() { local ns=$1; shift; XTABLES_LOCKFILE=$LOAD_LOCK ip netns exec "$ns" "$@"; }

count_rules() {  # ns backend -> "-A" lines of iptables-<backend>-save (IPv4)
    in_ns "$1" "iptables-$2-save" 2>/dev/null | grep -c '^-A' || true
}

load_rules() {  # ns backend n [file]: replace the file's tables with its n rules, verify
    local ns=$1 backend=$2 n=$3 file=${4:-$WORK/rules-$3.v4} got
    log "$ns: loading $n rules into $backend ($(basename "$file"))"
    in_ns "$ns" "iptables-$backend-restore" < "$file"
    got=$(count_rules "$ns" "$backend")
    [[ $got == "$n" ]] || die "$ns: $backend holds $got rules, expected $n"
}

hint_chain() {  # ns backend -N|-X
    in_ns "$1" "iptables-$2" -t mangle "$3" "$HINT"
}

legacy_tables() {  # ns -> the legacy tables that exist, one line
    { in_ns "$1" cat /proc/net/ip_tables_names /proc/net/ip6_tables_names 2>/dev/null || true; } | sort | tr '\n' ' '
}

# ---------------------------------------------------------- measurement ----

ROWS=()      # "<case>\t<markdown row>", sorted by case when printed
MEMROWS=()
DETAILS=()
FAILURES=0

k() { awk -v n="$1" 'BEGIN { printf (n >= 1000 ? "%dk" : "%d"), (n >= 1000 ? n / 1000 : n) }'; }
ms() { awk -v us="$1" 'BEGIN { printf (us >= 100000 ? "%.0f" : us >= 10000 ? "%.1f" : "%.3f"), us / 1000 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

# The environment of one setup: override, host link or detection (with the
# count cache, or "first": none, so every call is a first call).
setup_env() {  # setup -> words for env(1)
    local root=$WORK/host-none run_dir=$RUN_DIR
    case $1 in
        override-*) echo "IPTABLES_MODE=${1#override-}" ;;
        link-*) root=$WORK/host-${1#link-} ;;
        auto) ;;
        first) run_dir=$WORK/no-run-dir/run ;;
        *) die "unknown setup $1" ;;
    esac
    echo "IPTABLES_WRAPPER_HOST_ROOT=$root XTABLES_LOCKFILE=$BENCH_LOCK IPTABLES_WRAPPER_RUN_DIR=$run_dir"
}

# Runs "$@" in the namespace under the setup's environment, nothing else set.
run_as() {  # ns setup cmd...
    local ns=$1 setup=$2; shift 2
    # shellcheck disable=SC2046 # setup_env's words are meant to split
    env $(setup_env "$setup") ip netns exec "$ns" "$@"
}

# One wrapped call at debug level, its execs traced (seccomp-bpf: only execve
# stops): sets GOT (nft|legacy|?, from the backend's -V line), EXECS (execve
# calls, the wrapper's included) and DEBUG (its log, one line).
probe_call() {  # ns setup
    local trace=$WORK/out/execve.trace out=$WORK/out/probe.stdout
    DEBUG=$(IPTABLES_WRAPPER_LOG=debug run_as "$1" "$2" \
        strace --seccomp-bpf -f -qq -e trace=execve -o "$trace" "$WRAPPED" -V 2>&1 >"$out" | tr '\n' ' ')
    case $(cat "$out") in
        *"(nf_tables)"*) GOT=nft ;;
        *"(legacy)"*) GOT=legacy ;;
        *) GOT="?" ;;
    esac
    EXECS=$(grep -c 'execve(' "$trace" || true)
}

# One row of the table.  Cases A-D compare with the backend's own -V (target:
# the ratio); case E compares with save-and-count on the same state; case F
# (one long chain, bound by the kernel's rule dump) with the backend's own
# iptables-nft-save of the same ruleset, timed in the same iterations, and shows
# save-and-count beside it; both show the backend's -V for scale; case G (a
# repeated call) compares with the save-and-count time of the E or F row just
# before it, on the same state.
measure() {  # case ns state setup expected target [iterations [warm-up iterations]]
    local case=$1 ns=$2 state=$3 setup=$4 expected=$5 target=$6 iterations=${7:-$SLOW_RUNS}
    local got execs before after debug line result notes=()
    log "case $case: $state, $setup"

    before=$(legacy_tables "$ns")
    probe_call "$ns" "$setup"
    got=$GOT execs=$EXECS debug=$DEBUG
    DETAILS+=("$case | $state | $setup: ${debug:-(no debug output)}")
    local decided
    decided=$(grep -o 'decided in [0-9.]* ms' <<<"$debug" | grep -o '[0-9.]\+' || echo "?")

    local backend=$SBIN/iptables-${got/\?/nft}
    local cmds=("$WRAPPED" -V ::: "$backend" -V) runs=$RUNS warmup=$WARMUP
    case $case in
        E* | F*)
            local save_count='for t in iptables-legacy iptables-nft ip6tables-legacy ip6tables-nft; do "$t-save" | grep -c "^-A"; done; exit 0'
            cmds+=(::: /bin/bash -c "$save_count")
            # F: iptables-nft-save alone, the floor of what the kernel's dump costs.
            [[ $case == F* ]] && cmds+=(::: "$SBIN/iptables-nft-save")
            runs=$iterations warmup=${8:-1}
            ;;
        G*) runs=$iterations warmup=1 ;;
    esac
    local out t
    out=$(run_as "$ns" "$setup" "$WORK/abtime" -w "$warmup" -n "$runs" -- "${cmds[@]}")
    mapfile -t t < <(cut -f1 <<<"$out")
    local cpu
    mapfile -t cpu < <(cut -f6 <<<"$out")

    local wrapper_us=${t[0]} backend_us=${t[1]} save_us= r
    LAST_WRAPPER_US=$wrapper_us
    if [[ $case == [EF]* ]]; then
        save_us=${t[2]}
        LAST_SAVE_US=$save_us
        LAST_NFT_SAVE_US=${t[3]:-}
        if [[ $case == F* ]]; then
            r=$(ratio "$wrapper_us" "$LAST_NFT_SAVE_US")
        else
            r=$(ratio "$wrapper_us" "$save_us")
        fi
    elif [[ $case == G* ]]; then
        save_us=$LAST_SAVE_US
        r=$(ratio "$wrapper_us" "$save_us")
    else
        r=$(ratio "$wrapper_us" "$backend_us")
    fi
    # The same ratio in CPU time (abtime's sixth column), which waiting for
    # a CPU another process holds does not move (A-D only; reported).
    local cpu_r=–
    [[ $case == [ABCD]* ]] && cpu_r=$(ratio "${cpu[0]}" "${cpu[1]}")
    after=$(legacy_tables "$ns")

    le "$r" "$target" || notes+=("ratio over target")
    [[ $got == "$expected" ]] || notes+=("picked $got, expected $expected")
    [[ $execs == 2 ]] || notes+=("$execs execs")
    [[ $before == "$after" ]] || notes+=("legacy tables changed: [$before] -> [$after]")
    if ((${#notes[@]})); then
        result=$(printf '; %s' "${notes[@]}")
        result="**FAIL** (${result#; })"
        FAILURES=$((FAILURES + 1))
    else
        result=pass
    fi
    local save_col=–
    [[ -n $save_us ]] && save_col=$(ms "$save_us")
    line="| $case | $state | $setup | $got | $(ms "$wrapper_us") | $(ms "$backend_us") | $save_col | $decided | $r | $cpu_r | ≤ $target | $execs | $result |"
    ROWS+=("$case"$'\t'"$line")
    log "  -> $line"
}

# Peak RSS of the wrapper with the stand-in backend (see stub-backend.c).
measure_memory() {  # ns state setup
    local ns=$1 state=$2 setup=$3 rss
    log "memory: $state, $setup"
    rss=$(IPTABLES_WRAPPER_SBIN=$WORK/stub run_as "$ns" "$setup" \
        "$WORK/abtime" -w 1 -n 5 -- "$WRAPPED" -V ::: "$WORK/stub/xtables-nft-multi")
    mapfile -t rss < <(cut -f5 <<<"$rss")
    MEMROWS+=("| $state | $setup | ${rss[0]} | ${rss[1]} |")
}

# What starting a process costs here, whatever it then does: the stand-in (no
# libc), the stand-in reached through one extra exec (exec-hop.c, no libc),
# an empty static glibc program, the backend's -V.
measure_floor() {
    local ns=$1 t
    log "process start-up floor"
    t=$(run_as "$ns" auto "$WORK/abtime" -w "$WARMUP" -n "$RUNS" -- "$WORK/stub/xtables-nft-multi" \
        ::: "$WORK/exec-hop" "$WORK/stub/xtables-nft-multi" \
        ::: "$WORK/empty-glibc" ::: "$SBIN/iptables-nft" -V ::: "$SBIN/iptables-legacy" -V)
    mapfile -t t < <(cut -f1 <<<"$t")
    local hop glibc
    hop=$(awk -v a="${t[1]}" -v b="${t[0]}" 'BEGIN { print a - b }')
    glibc=$(awk -v a="${t[2]}" -v b="${t[0]}" 'BEGIN { print a - b }')
    FLOOR="| $(ms "${t[0]}") | $(ms "$hop") | $(ms "${t[2]}") | $(ms "$glibc") | $(ms "${t[3]}") | $(ms "${t[4]}") |"
}

# ------------------------------------------------------------ scenarios ----

A_TARGET=1.15    # override and host link: wrapper / the backend's own -V (1.2 until 2 Dec 2026)
BCD_TARGET=1.3   # hint chains and no legacy table: likewise (1.4 until 2 Dec 2026)
E_TARGET=1.0
F_TARGET=1.0      # first call, one long chain: wrapper / iptables-nft-save (the dump's floor)
G_TARGET=0.1      # repeated call on an unchanged ruleset

case_a() {  # ns state: override and host link, both modes
    local setup
    for setup in override-nft override-legacy link-nft link-legacy; do
        measure A "$1" "$2" "$setup" "${setup#*-}" "$A_TARGET"
    done
}

# Namespace 1 grows: empty, then SMALL + SMALL, then LARGE legacy + SMALL nft.
scenario_growing() {
    local ns=$NS_PREFIX-grow s l
    s=$(k "$SMALL") l=$(k "$LARGE")
    ns_create "$ns"
    measure_floor "$ns"
    case_a "$ns" "0 + 0"
    case_plain_build "$ns" "0 + 0"
    measure_memory "$ns" "0 + 0 (empty namespace)" auto

    load_rules "$ns" legacy "$SMALL"
    load_rules "$ns" nft "$SMALL"
    case_a "$ns" "$s + $s"

    load_rules "$ns" legacy "$LARGE"
    measure E "$ns" "$l L + $s N" first legacy "$E_TARGET"
    measure_memory "$ns" "$l L + $s N" auto
}

# Namespace 2: LARGE nft only, then SMALL legacy beside it, then LARGE + LARGE
# with no hint, the hint in nft, and the hint in legacy only.
scenario_large() {
    local ns=$NS_PREFIX-large s l
    s=$(k "$SMALL") l=$(k "$LARGE")
    ns_create "$ns"
    load_rules "$ns" nft "$LARGE"
    [[ -z $(legacy_tables "$ns") ]] || die "$ns: legacy tables exist before case D"
    measure D "$ns" "0 L (no table) + $l N" auto nft "$BCD_TARGET"

    load_rules "$ns" legacy "$SMALL"
    measure E "$ns" "$s L + $l N" first nft "$E_TARGET"
    measure_memory "$ns" "$s L + $l N" auto

    load_rules "$ns" legacy "$LARGE"
    case_a "$ns" "$l + $l"
    measure E "$ns" "$l L + $l N (tie)" first nft "$E_TARGET"
    local tie_us=$LAST_WRAPPER_US
    measure G "$ns" "$l L + $l N (tie), repeated" auto nft "$G_TARGET"
    measure_memory "$ns" "$l L + $l N (tie)" first

    hint_chain "$ns" nft -N
    measure B "$ns" "$l + $l, hint in nft" auto nft "$BCD_TARGET"
    hint_chain "$ns" nft -X
    hint_chain "$ns" legacy -N
    measure C "$ns" "$l + $l, hint in legacy" auto legacy "$BCD_TARGET"

    # The kube-proxy shape at LONG rules per backend: the first call, and how
    # it grows over the LARGE tie (reported; the growth target is the long
    # chain's).
    local long
    long=$(k "$LONG")
    hint_chain "$ns" legacy -X
    load_rules "$ns" legacy "$LONG"
    load_rules "$ns" nft "$LONG"
    measure E "$ns" "$long L + $long N (tie)" first nft "$E_TARGET" "$LONG_RUNS" 0
    KP_GROWTH=$(ratio "$LAST_WRAPPER_US" "$tie_us")
}

# Namespace 3: one long chain per backend (IPv4), a tie, so the nft rules must
# be counted whole: all LONG_HALF rules in INPUT itself (the easier case), then
# a user chain jumped to from INPUT (the harder one, which the targets refer
# to) at LONG_HALF and LONG rules, and the repeated call at LONG.
scenario_long() {
    local ns=$NS_PREFIX-long half=$(k "$LONG_HALF") long=$(k "$LONG") backend half_us
    ns_create "$ns"
    for backend in legacy nft; do load_rules "$ns" "$backend" "$LONG_HALF" "$WORK/long-INPUT-$LONG_HALF.v4"; done
    measure F "$ns" "$half + $half (tie), one long built-in chain" first nft "$F_TARGET"

    for backend in legacy nft; do load_rules "$ns" "$backend" "$LONG_HALF" "$WORK/long-LONG-$LONG_HALF.v4"; done
    measure F "$ns" "$half + $half (tie), one long user chain" first nft "$F_TARGET"
    half_us=$LAST_WRAPPER_US

    for backend in legacy nft; do load_rules "$ns" "$backend" "$LONG" "$WORK/long-LONG-$LONG.v4"; done
    measure F "$ns" "$long + $long (tie), one long user chain" first nft "$F_TARGET" "$LONG_RUNS" 0
    GROWTH=$(ratio "$LAST_WRAPPER_US" "$half_us")
    LONG_WRAPPER_US=$LAST_WRAPPER_US LONG_NFT_SAVE_US=$LAST_NFT_SAVE_US
    measure G "$ns" "$long + $long (tie), one long user chain, repeated" auto nft "$G_TARGET" "$SLOW_RUNS"
}

# What a user gets from plain `cargo build --release` (no --target, no
# script): the crate's default build, measured like case A. Skipped when the
# benchmark was handed a prebuilt binary.
case_plain_build() {  # ns state
    [[ -n ${PLAIN_WRAPPED:-} ]] || return 0
    local wrapped=$WRAPPED
    WRAPPED=$PLAIN_WRAPPED
    measure A "$1" "$2, plain \`cargo build --release\`" override-nft nft "$A_TARGET"
    WRAPPED=$wrapped
}

# --------------------------------------------------------------- report ----

machine_description() {
    local cpu os
    cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
    os=$(. /etc/os-release && echo "$PRETTY_NAME")
    cat <<EOF
| | |
|---|---|
| CPU | $cpu, $(nproc) cores$(grep -q hypervisor /proc/cpuinfo && echo " (virtual machine)") |
| Memory | $(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) |
| OS, kernel | $os, Linux $(uname -r) |
| iptables | $("$SBIN/iptables-legacy" -V | cut -d' ' -f2) (legacy and nf_tables) |
| wrapper | $(git -C "$REPO" describe --always --dirty 2>/dev/null || echo unknown), $(stat -c %s "$WRAPPER_BIN") bytes, $(readelf -lW "$WRAPPER_BIN" | grep -q 'program interpreter' && echo dynamic || echo static) |
| load average at start | $LOAD_AT_START |
| date | $(date -u '+%Y-%m-%d %H:%M UTC') |
EOF
}

write_report() {
    local elapsed=$1
    {
        echo "# iptables-wrapper benchmark"
        echo
        echo "Produced by \`bash bench/run.sh\` in $elapsed s."
        echo
        machine_description
        echo
        echo "Rule sets are kube-proxy-like (\`bench/gen-rules.awk\`): per service a"
        echo "KUBE-SERVICES jump into KUBE-SVC-*, statistic-balanced jumps into two"
        echo "KUBE-SEP-* chains with MARK and DNAT rules, comments and tcp matches on"
        echo "nearly every rule, about a tenth of the rules in filter (REJECT, conntrack,"
        echo "mark); $(k "$LARGE") rules make $(grep -c '^:KUBE' "$WORK/rules-$LARGE.v4") user chains. \"L\" and \"N\" count the"
        echo "\`-A\` lines of iptables-legacy-save and iptables-nft-save (IPv4; IPv6 empty)."
        echo
        echo "Times are medians over interleaved iterations (\`bench/abtime.c\`: posix_spawn, no"
        echo "shell; $RUNS iterations after $WARMUP warm-up for -V, $SLOW_RUNS for case E)."
        echo "*wrapper*: \`iptables -V\` through the wrapper's link; *backend*: the picked"
        echo "backend's own \`iptables-<mode> -V\`; *save-and-count*: \`iptables-legacy-save\`,"
        echo "\`iptables-nft-save\`, \`ip6tables-legacy-save\`, \`ip6tables-nft-save\` each"
        echo "piped to \`grep -c '^-A'\` (what earlier wrappers do before running the backend)."
        echo "Ratio: wrapper / backend for A-D, wrapper / save-and-count for E and G,"
        echo "wrapper / \`iptables-nft-save\` alone (timed in the same iterations) for F: one long"
        echo "chain is bound by the kernel's GETRULE dump, which the backend's own save pays too."
        echo "E and F are first calls (*first*: no runtime directory, so nothing is cached and"
        echo "every iteration counts afresh); G repeats the call on an unchanged ruleset with the"
        echo "count cache (*auto*: a private runtime directory; the warm-up iteration fills it)."
        echo "One long chain (IPv4, \`bench/gen-long-chain.awk\`). $LONG_RUNS iterations without warm-up for"
        echo "the first calls at $(k "$LONG") (both shapes); G reuses the save-and-count time of the row before it."
        echo "*decided in*: the time the wrapper logs for its decision at \`debug\` (one call)."
        echo "*execs*: execve calls in one wrapped call (strace -f), the wrapper's own included."
        echo "*CPU ratio* (A-D): the same medians in CPU time (user + system, from wait4), which"
        echo "waiting for a CPU another process holds does not move; reported, the target is the ratio's."
        echo
        echo "| case | state (legacy + nft rules) | setup | picked | wrapper ms | backend ms | save-and-count ms | decided in (log) ms | ratio | CPU ratio | target | execs | result |"
        echo "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|"
        printf '%s\n' "${ROWS[@]}" | sort -s -t$'\t' -k1,1 | cut -f2-
        echo
        [[ -n ${GROWTH:-} ]] && echo "First call, one long user chain, $(k "$LONG") over $(k "$LONG_HALF"): ${GROWTH}x (reported: the kernel's dump resumes each batch from the chain's start)" && echo
        [[ -n ${KP_GROWTH:-} ]] && echo "First call, kube-proxy-like tie, $(k "$LONG") over $(k "$LARGE"): ${KP_GROWTH}x (reported)" && echo
        if [[ -n ${LONG_WRAPPER_US:-} ]]; then
            echo "First call, one long user chain, $(k "$LONG") + $(k "$LONG"): the wrapper $(ms "$LONG_WRAPPER_US") ms against"
            echo "$(ms "$LONG_NFT_SAVE_US") ms for \`iptables-nft-save\` alone in the same iterations ($(ratio "$LONG_WRAPPER_US" "$LONG_NFT_SAVE_US")x): both pay the kernel's"
            echo "GETRULE dump, whose every batch walks the chain from its start."
        fi
        echo
        echo "Setups: *override-M* sets \`IPTABLES_MODE=M\`; *link-M* points the fake host"
        echo "root's \`etc/alternatives/iptables\` at \`iptables-M\`; *auto* has neither (no host"
        echo "link, \`XTABLES_LOCKFILE\` at a path that does not exist); *first* is *auto* without"
        echo "a usable runtime directory."
        echo
        echo "## Process start-up on this machine (median ms, same method)"
        echo
        echo "| stand-in (static, no libc) | one more exec before it | empty static glibc program | difference: glibc start-up | iptables-nft -V | iptables-legacy -V |"
        echo "|---:|---:|---:|---:|---:|---:|"
        echo "${FLOOR:-| (scenario growing not run) | | | | | |}"
        echo
        echo "Before \`main\`, every glibc program (static or dynamic) runs glibc's CPU"
        echo "feature and cache detection, dozens of CPUID instructions. Where the hypervisor"
        echo "traps CPUID this is the glibc start-up above: the backends pay it once, and a"
        echo "wrapper built on static glibc would pay it a second time on every call. That is"
        echo "why the crate's default build (\`cargo build --release\`) is static musl."
        echo "*One more exec before it*: the stand-in started through \`bench/exec-hop.c\`, a"
        echo "program that only execs, minus the stand-in alone: the floor under any wrapper"
        echo "that decides and then execs."
        echo
        echo "## Peak memory (max RSS, KiB)"
        echo
        echo "The wrapper execs a static stand-in backend (\`bench/stub-backend.c\`) so that"
        echo "ru_maxrss is the wrapper's own; the stand-in run alone the same way is the floor."
        echo
        echo "| state | setup | wrapper | floor (stand-in alone) |"
        echo "|---|---|---:|---:|"
        printf '%s\n' "${MEMROWS[@]}"
        echo
        echo "## The wrapper's own account (IPTABLES_WRAPPER_LOG=debug, one call per row)"
        echo
        echo '```'
        printf '%s\n' "${DETAILS[@]}"
        echo '```'
    } > "$RESULTS"
}

main() {
    case "${1:-}" in
        "") [[ -n $RESULTS ]] || RESULTS=$(mktemp "${TMPDIR:-/tmp}/iptables-wrapper-bench-results.XXXXXX") ;;
        --write-results) [[ $# -eq 1 ]] || die "--write-results takes nothing after it"; RESULTS=${RESULTS:-$BENCH_DIR/results.md} ;;
        *) die "unknown argument '$1' (expected nothing, or --write-results to write bench/results.md)" ;;
    esac
    [[ $(id -u) == 0 ]] || die "run as root (network namespaces, netfilter)"
    local start=$SECONDS
    LOAD_AT_START=$(cut -d' ' -f1-3 /proc/loadavg)
    trap cleanup EXIT
    trap 'exit 130' INT TERM
    ensure_tools
    build_wrapper
    prepare_workdir

    local scenario
    for scenario in ${BENCH_SCENARIOS:-growing large long}; do
        case $scenario in
            growing | large | long) "scenario_$scenario" ;;
            *) die "unknown scenario $scenario (growing, large, long)" ;;
        esac
    done

    write_report $((SECONDS - start))
    cat "$RESULTS"
    log "results written to $RESULTS${1:+ (--write-results)}"
    [[ -n ${1:-} || -n ${BENCH_RESULTS:-} ]] || log "bench/results.md is untouched (--write-results writes it)"
    if ((FAILURES)); then
        log "$FAILURES row(s) missed their target"
        exit 1
    fi
}

main "$@"
