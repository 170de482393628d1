#!/usr/bin/env bash
# The README's "Tested with" table, made from the results of
# container-tests/clients.sh, so that it cannot drift from what the suite saw.
#
#   clients-table.sh RESULTS REPORTS          print the table (Markdown)
#   clients-table.sh --check README TABLE [kube-proxy]
#                                             exit 1, with a diff, when the
#                                             block between README's markers
#                                             differs from TABLE
#   clients-table.sh --write README TABLE [kube-proxy]
#                                             put TABLE between the markers
#
# With `kube-proxy`, --check and --write take the markers of the table
# container-tests/kube-proxy.sh makes from its own results (one row, the
# real kube-proxy's), `<!-- tested-with kube-proxy: begin ... -->` and
# `<!-- tested-with kube-proxy: end -->`.
#
# RESULTS has one line per cell: CLIENT STATE ROUTE VERDICT DETAIL...;
# REPORTS holds each cell's report (clients-in-container.sh `run`): the
# package and version, and the calls, from which the "exercises" column is
# made (the names called, restore with --noflush, -w, -C, and whether the
# caller cleared the environment). The markers are the lines
# `<!-- tested-with: begin -->` and `<!-- tested-with: end -->`.
set -euo pipefail

if [[ "${4:-}" == kube-proxy ]]; then
  BEGIN='<!-- tested-with kube-proxy: begin (made by container-tests/kube-proxy.sh from its results; do not edit) -->'
  END='<!-- tested-with kube-proxy: end -->'
elif [[ -n "${4:-}" ]]; then
  echo "clients-table.sh: unknown table '$4' (expected nothing or kube-proxy)" >&2; exit 2
else
  BEGIN='<!-- tested-with: begin (made by container-tests/clients.sh from its results; do not edit) -->'
  END='<!-- tested-with: end -->'
fi

# block README: the lines between the markers.
block() {
  awk -v b="$BEGIN" -v e="$END" '$0 == e { on = 0 } on { print } $0 == b { on = 1; found = 1 } END { exit !found }' "$1"
}

case "${1:-}" in
  --check)
    if ! block "$2" >"$3.readme"; then
      echo "README.md has no line '$BEGIN'" >&2; exit 1
    fi
    if ! diff -u "$3.readme" "$3" >"$3.diff"; then
      echo "README.md's Tested with table${4:+ ($4)} is not the one this run produced (- README, + this run):" >&2
      cat "$3.diff" >&2
      exit 1
    fi
    exit 0 ;;
  --write)
    block "$2" >/dev/null || { echo "README.md has no line '$BEGIN'" >&2; exit 1; }
    awk -v b="$BEGIN" -v e="$END" -v t="$3" '
      $0 == e { while ((getline l < t) > 0) print l; on = 0 }
      !on { print } $0 == b { on = 1 }' "$2" >"$2.new"
    mv "$2.new" "$2"
    exit 0 ;;
esac

RESULTS="${1:?usage: clients-table.sh RESULTS REPORTS}"
REPORTS="${2:?usage: clients-table.sh RESULTS REPORTS}"

# section REPORT NAME: the lines of a report's section.
section() { awk -v re="$2" '/^== / { on = ($0 ~ re); next } on' "$1"; }

# exercises CLIENT: what its calls through the wrapper exercised, over all
# its wrapped cells.
exercises() {
  local f calls
  calls="$(for f in "$REPORTS/$1".*.link "$REPORTS/$1".*.settings; do
    [[ -e "$f" ]] && section "$f" '^== calls'
  done | grep -v '^wrapper ran ' || true)"
  awk -F': ' '
    {
      split($1, a, ", "); call = a[1]; env = a[2]
      name = call; sub(/ \[.*/, "", name)
      if (name ~ /^ip6?tables(-save|-restore)?$/) names[name] = 1
      else if (name ~ /^(ebtables|arptables|ipset)/) unwrapped[name] = 1
      else bypass[name] = 1
      if (call ~ /restore \[.*--noflush/) noflush = 1
      if (call ~ /\[.*-w/) wait = 1
      if (call ~ /\[.*-C/) check = 1
      if (env == "env cleared") cleared++; else kept++
    }
    END {
      n = 0
      for (k in names) list[++n] = k
      # A fixed order: iptables, ip6tables, then -save, -restore.
      out = ""
      split("iptables ip6tables iptables-save ip6tables-save iptables-restore ip6tables-restore", order, " ")
      for (i = 1; i <= 6; i++) if (order[i] in names) out = out (out == "" ? "" : ", ") "`" order[i] "`"
      if (noflush) out = out "; restore `--noflush`"
      if (wait) out = out "; `-w`"
      if (check) out = out "; `-C` checks"
      if (cleared && !kept) out = out "; clears the environment"
      else if (cleared) out = out "; some calls with the environment cleared"
      b = ""
      split("iptables-legacy iptables-legacy-save iptables-legacy-restore ip6tables-legacy ip6tables-legacy-save ip6tables-legacy-restore iptables-nft iptables-nft-save iptables-nft-restore ip6tables-nft ip6tables-nft-save ip6tables-nft-restore nft", border, " ")
      for (i = 1; i <= 13; i++) if (border[i] in bypass) b = b (b == "" ? "" : ", ") "`" border[i] "`"
      if (b != "") out = out (out == "" ? "" : "; ") "runs " b " itself"
      u = ""
      split("ebtables ebtables-restore ebtables-save arptables arptables-restore ipset", uorder, " ")
      for (i = 1; i <= 6; i++) if (uorder[i] in unwrapped) u = u (u == "" ? "" : ", ") "`" uorder[i] "`"
      if (u != "") out = out "; also " u ", which no wrapper answers"
      print (out == "" ? "no iptables call" : out)
    }' <<<"$calls"
}

# passed CLIENT: the states and ways it passed in, from the results.
passed() {
  awk -v c="$1" '
    $1 == c { v[$2, $3] = $4; if (!($2 in seen)) { seen[$2] = 1; states[++n] = $2 }
              if ($4 == "bypass") { d = $0; sub(/.*its rules changed in: */, "", d); sub(/;.*/, "", d); land[$2] = d } }
    END {
      all = 1; byp = 0
      for (i = 1; i <= n; i++) for (r = 1; r <= 2; r++) {
        route = (r == 1) ? "link" : "settings"
        if (v[states[i], route] != "pass") all = 0
        if (v[states[i], route] == "bypass") byp++
      }
      if (all) {
        s = ""; for (i = 1; i <= n; i++) s = s (s == "" ? "" : ", ") label(states[i])
        print s "; host link and settings file"; exit
      }
      if (byp == 2 * n) {
        same = 1; for (i = 2; i <= n; i++) if (land[states[i]] != land[states[1]]) same = 0
        if (same) {
          s = ""; for (i = 1; i <= n; i++) s = s (s == "" ? "" : ", ") label(states[i])
          print "bypassed in " s ": its rules in " land[states[1]] ", as without the wrapper"; exit
        }
      }
      out = ""
      for (i = 1; i <= n; i++) {
        st = states[i]; l = v[st, "link"]; p = v[st, "settings"]
        if (l == "bypass" && p == "bypass") w = "bypassed, rules in " land[st] " as without the wrapper"
        else if (l == "pass" && p == "pass") w = "passed"
        else w = "link " l ", settings " p
        out = out (out == "" ? "" : "; ") label(st) ": " w
      }
      print out
    }
    function label(s) { return s == "clean" ? "clean" : s == "upgraded" ? "upgraded (stale legacy)" : s == "legacy" ? "legacy host" : s }
  ' "$RESULTS"
}

echo '| client | version (Debian 12) | what it exercises through the wrapper | states passed (each through the host link and the settings file, against the same client run directly) |'
echo '|---|---|---|---|'
awk '$1 != "self-check" { print $1 }' "$RESULTS" | awk '!seen[$0]++' | while read -r client; do
  version="$(f=("$REPORTS/$client".*.direct); section "${f[0]}" '^== package' | paste -sd, - | sed 's/,/, /g')"
  # shellcheck disable=SC2016 # the backquotes are Markdown's
  case "$client" in
    wg-quick) name='wg-quick (no `nft` in PATH)' ;;
    wg-quick-nft) name='wg-quick (`nft` installed)' ;;
    firewalld) name='firewalld (`FirewallBackend=iptables`)' ;;
    podman) name='podman with netavark' ;;
    *) name="$client" ;;
  esac
  printf '| %s | %s | %s | %s |\n' "$name" "$version" "$(exercises "$client")" "$(passed "$client")"
done
