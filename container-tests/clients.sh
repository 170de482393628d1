#!/usr/bin/env bash
# The real clients through the wrapper: ufw, firewalld
# (FirewallBackend=iptables), fail2ban, wg-quick, ferm and podman with
# netavark, each installed from Debian's packages (the `clients` image of
# build-base.sh), run unchanged in fresh containers (their own network
# namespaces) in three host states, each three ways, and compared.
#
#   container-tests/clients.sh IMAGE [--clients LIST] [--states LIST]
#
# IMAGE is the test image of the `clients` base (run-matrix.sh builds it;
# `run-matrix.sh --flavours none --scenarios 14 --recipes none` runs this
# suite alone). States: clean (a new node on nft), upgraded (on nft, legacy
# still holds the old rules, kubelet's old hint chain and a FORWARD DROP: the
# kernel's evidence says legacy), legacy (a legacy host). Ways: direct (no
# wrapper: the image's iptables is the host's backend), link (the wrapper,
# the host's /etc/alternatives/iptables link visible at /host) and settings
# (the wrapper, the mode pinned in /etc/iptables-wrapper/IPTABLES_MODE, no
# host link). A cell (client, state, way) passes when, against the direct
# run of the same client and state: the steps' exit codes and output are the
# same, its rules changed the same way at each snapshot (for the daemons also
# after their own stop), the other backend gained nothing, it ran the same
# iptables programs, and each of those calls the wrapper ran became the host
# backend and never the other one. A client that calls a backend by name
# (ferm: iptables-legacy-restore; wg-quick with nft installed: nft) passes
# only as "bypasses": the wrapper is not on its path.
#
# One more cell runs every time and must fail its comparison: ufw in the
# upgraded state through a wrapper pinned to the wrong backend. If that cell
# "passes", the suite cannot tell, and fails.
#
# The results go to the file $IPTW_CLIENTS_RESULTS (default: a temporary
# file, printed), and the README's "Tested with" table, between its
# `<!-- tested-with: begin -->` and `<!-- tested-with: end -->` markers, is
# generated from them: after a full run (all clients, all states) the suite
# fails if README.md's table differs from the one it produced, and prints
# both. IPTW_CLIENTS_UPDATE_README=1 writes the produced table into README.md
# instead. A partial run (--clients, --states) skips that check.
#
# Environment: IPTW_LOG_DIR keeps every cell's report in its clients/; IPTW_RUN_ID
# labels the containers (run-matrix.sh sets it). Exit 0 when every cell passed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/host-layouts.sh"

ALL_CLIENTS=(ufw firewalld fail2ban wg-quick wg-quick-nft ferm podman)
ALL_STATES=(clean upgraded legacy)
ROUTES=(direct link settings)

IMAGE="${1:?usage: clients.sh IMAGE [--clients LIST] [--states LIST]}"
shift
CLIENTS=("${ALL_CLIENTS[@]}") STATES=("${ALL_STATES[@]}") FULL=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --clients) IFS=, read -r -a CLIENTS <<<"$2"; FULL=0; shift 2 ;;
    --states) IFS=, read -r -a STATES <<<"$2"; FULL=0; shift 2 ;;
    *) die "unknown argument '$1'" ;;
  esac
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/iptw-clients.XXXXXX")"
REPORTS="${IPTW_LOG_DIR:+$IPTW_LOG_DIR/clients}"
REPORTS="${REPORTS:-$WORK/reports}"
RESULTS="${IPTW_CLIENTS_RESULTS:-$WORK/results}"
mkdir -p "$REPORTS"
CONTAINER=""
cleanup() {
  if [[ -n "$CONTAINER" ]]; then docker rm -f "$CONTAINER" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

host_of() { if [[ "$1" == legacy ]]; then echo legacy; else echo nft; fi; }
other() { if [[ "$1" == nft ]]; then echo legacy; else echo nft; fi; }

# in_ctr ARGS...: a client-test step in the running container.
STEP_TIMEOUT="${IPTW_STEP_TIMEOUT:-180}"
in_ctr() { timeout "$STEP_TIMEOUT" docker exec "$CONTAINER" client-test "$@"; }

# cell CLIENT STATE ROUTE [PIN]: one run in a fresh container; its report in
# $REPORTS/CLIENT.STATE.ROUTE. PIN (only for the wrong-backend cell) is the
# mode written into the settings file instead of the host's.
cell() {
  local client="$1" state="$2" route="$3" pin="${4:-}" host root opts rc=0
  local report="$REPORTS/$client.$state.$route${pin:+-$pin}"
  rm -f "$report" "$report".*
  host="$(host_of "$state")"
  opts=(--detach "${DAEMON_PRIVILEGE[@]}" --network none
    --label "iptables-wrapper-test=${IPTW_RUN_ID:-manual}"
    --device /dev/net/tun --sysctl net.ipv4.conf.all.src_valid_mark=1
    --sysctl net.ipv6.conf.all.disable_ipv6=0 --sysctl net.ipv6.conf.default.disable_ipv6=0
    --volume "$CT_DIR/clients-in-container.sh:/usr/local/bin/client-test:ro")
  if [[ "$route" == link ]]; then
    # The host's root as a Debian node lays it out, its link choosing HOST.
    root="$WORK/host-$client-$state"
    rm -rf "$root"; mkdir -p "$root"
    layout_build "$root" debian "$host"
    opts+=(--volume "$root:/host:ro")
  fi
  CONTAINER="$(docker run "${opts[@]}" "$IMAGE" sleep 3600)"
  {
    in_ctr prepare "$state" && in_ctr route "$route" "${pin:-$host}" && in_ctr run "$client" "$host"
  } >"$report" 2>"$report.err" || rc=$?
  docker rm -f "$CONTAINER" >/dev/null 2>&1 || true
  CONTAINER=""
  [[ $rc -eq 0 ]] || { echo "the run stopped (exit $rc): $(tail -n 5 "$report.err" | tr "\n" "|")" >"$report.fail"; return 1; }
}

# comparable REPORT: the report without the wrapper's own execs (the direct
# run has none: its iptables is a symbolic link) and the route line.
comparable() { grep -vE '^(wrapper ran |route )' "$1"; }

# section REPORT NAME-REGEX: the lines of the sections whose titles match.
section() { awk -v re="$2" '/^== / { on = ($0 ~ re); next } on' "$1"; }

# judge CLIENT STATE ROUTE: compare a wrapped cell with its direct run;
# prints pass, bypass or FAIL and why.
judge() {
  local client="$1" state="$2" route="$3" host base cell bypass
  host="$(host_of "$state")"
  base="$REPORTS/$client.$state.direct" cell="$REPORTS/$client.$state.$route"
  [[ ! -e "$cell.fail" ]] || { echo "FAIL $(cat "$cell.fail")"; return; }
  [[ ! -e "$base.fail" ]] || { echo "FAIL direct: $(cat "$base.fail")"; return; }
  if ! diff <(comparable "$base") <(comparable "$cell") >"$cell.diff"; then
    echo "FAIL differs from the direct run: $(head -c 600 "$cell.diff" | tr '\n' '|')"; return
  fi
  # A client that runs a backend (or nft) by its own name bypasses the
  # wrapper there: say so, and where its rules landed (as in the direct run).
  bypass="$(section "$cell" '^== calls' | grep -oE '^(ip6?tables-(legacy|nft)(-save|-restore)?|nft)\b' | sort -u | paste -sd, - || true)"
  # Every call of the six names the wrapper answers ran the host's backend.
  local wrapped ran_host ran_other landed
  wrapped="$(section "$cell" '^== calls' | awk -F': ' '$1 ~ /^ip6?tables(-save|-restore)?( |,)/ { n += $NF } END { print n + 0 }')"
  ran_host="$(section "$cell" '^== calls' | awk -F': ' -v b="wrapper ran $host" '$1 == b { n += $NF } END { print n + 0 }')"
  ran_other="$(section "$cell" '^== calls' | awk -F': ' -v b="wrapper ran $(other "$host")" '$1 == b { n += $NF } END { print n + 0 }')"
  [[ "$ran_other" -eq 0 ]] || { echo "FAIL the wrapper ran the $(other "$host") backend $ran_other times"; return; }
  [[ "$ran_host" -eq "$wrapped" ]] || { echo "FAIL $wrapped wrapped calls, $ran_host runs of the $host backend"; return; }
  if [[ -n "$bypass" ]]; then
    landed=""
    [[ -z "$(section "$cell" 'host backend')" ]] || landed+=" $host"
    [[ -z "$(section "$cell" 'other backend')" ]] || landed+=" $(other "$host")"
    [[ -z "$(section "$cell" "nftables' own")" ]] || landed+=" nftables"
    echo "bypass runs $bypass by name, as in the direct run; its rules changed in:${landed:- nothing}; $wrapped calls through the wrapper"
    return
  fi
  if section "$base" '^== steps' | grep -qE '^exit [1-9]'; then
    echo "FAIL a step failed in the direct run too: $(grep -B3 -E '^exit [1-9]' "$base" | head -n 8 | tr '\n' '|')"; return
  fi
  if [[ -n "$(section "$cell" 'other backend')" ]]; then
    echo "FAIL the other backend changed: $(section "$cell" 'other backend' | head -n 3 | tr '\n' '|')"; return
  fi
  [[ "$wrapped" -gt 0 ]] || { echo "FAIL the client made no call the wrapper answers"; return; }
  echo "pass $wrapped calls, all to $host"
}

START=$SECONDS
: >"$RESULTS"
for client in "${CLIENTS[@]}"; do
  for state in "${STATES[@]}"; do
    for route in "${ROUTES[@]}"; do
      t=$SECONDS
      cell "$client" "$state" "$route" || true
      [[ "$route" == direct ]] && { log "$client $state direct: ran ($((SECONDS - t))s)"; continue; }
      verdict="$(judge "$client" "$state" "$route")"
      printf '%s %s %s %s\n' "$client" "$state" "$route" "$verdict" >>"$RESULTS"
      log "$client $state $route: $verdict ($((SECONDS - t))s)"
    done
  done
done

# The wrong-backend cell: must FAIL its comparison.
t=$SECONDS
if [[ -e "$REPORTS/ufw.upgraded.direct" ]] || cell ufw upgraded direct; then
  cell ufw upgraded settings "$(other "$(host_of upgraded)")" || true
  mv "$REPORTS/ufw.upgraded.settings-legacy" "$REPORTS/ufw.upgraded.wrong"
  [[ ! -e "$REPORTS/ufw.upgraded.settings-legacy.fail" ]] || mv "$REPORTS/ufw.upgraded.settings-legacy.fail" "$REPORTS/ufw.upgraded.wrong.fail"
  verdict="$(judge ufw upgraded wrong)"
else
  verdict="FAIL no direct run"
fi
case "$verdict" in
  FAIL*) printf 'self-check upgraded wrong pass a wrapper pinned to legacy on an nft host is caught: %s\n' "${verdict#FAIL }" >>"$RESULTS" ;;
  *) printf 'self-check upgraded wrong FAIL a wrapper pinned to legacy on an nft host was not caught: %s\n' "$verdict" >>"$RESULTS" ;;
esac
log "self-check (ufw through a wrapper pinned to the wrong backend): $(awk '$1 == "self-check" { print $4 }' "$RESULTS") ($((SECONDS - t))s)"

echo
column -t -s ' ' -o ' ' <(cut -d' ' -f1-4 "$RESULTS") 2>/dev/null || cut -d' ' -f1-4 "$RESULTS"
echo
# The failures, with why.
awk '$4 != "pass" && $4 != "bypass"' "$RESULTS"

# The table, from the results and the packages' versions.
TABLE="$WORK/table.md"
"$CT_DIR/clients-table.sh" "$RESULTS" "$REPORTS" >"$TABLE"
echo
cat "$TABLE"
echo
readme="$REPO_DIR/README.md"
if [[ "$FULL" == 1 && -r "$readme" ]]; then
  if [[ "${IPTW_CLIENTS_UPDATE_README:-0}" == 1 ]]; then
    "$CT_DIR/clients-table.sh" --write "$readme" "$TABLE"
    echo "README.md: the Tested with table written"
  elif ! "$CT_DIR/clients-table.sh" --check "$readme" "$TABLE"; then
    printf 'self-check readme table FAIL README.md differs from this run (IPTW_CLIENTS_UPDATE_README=1 writes it)\n' >>"$RESULTS"
  else
    printf 'self-check readme table pass README.md has the table this run produced\n' >>"$RESULTS"
  fi
fi
[[ -z "${IPTW_CLIENTS_RESULTS:-}" ]] || echo "results: $RESULTS"
passed="$(grep -c ' pass \| bypass ' "$RESULTS" || true)"
failed="$(grep -vc ' pass \| bypass ' "$RESULTS" || true)"
echo "clients: $((SECONDS - START))s"
echo "$passed passed, $failed failed"
[[ "$failed" -eq 0 ]]
