# The kernel matrix's checks for a kernel without legacy x_tables: sourced
# by checks.sh (whose helpers it uses) in the guests whose initramfs leaves
# the legacy modules out, as a kernel built without
# CONFIG_NETFILTER_XTABLES_LEGACY (Linux 6.17 and later) offers userspace.
# Prints "check CHECK|OBSERVED" lines as checks.sh does; expected values:
# container-tests/kernels/expected-without-legacy.txt, fixed from what
# docs/how-it-decides.md and docs/node-os.md promise for such a kernel:
# every call goes to nft, a host link or IPTABLES_MODE naming legacy is
# obeyed with a warning and the backend's own error, detect names legacy as
# not in this kernel, and nothing loads or creates a legacy table.

# The legacy x_tables modules (build-initramfs.sh leaves the same out).
LEGACY_MODULE='^(ip_tables|ip6_tables|arp_tables|ebtables|iptable_[a-z]+|ip6table_[a-z]+|arptable_[a-z]+|ebtable_[a-z]+)$'
RELEASE="$(uname -r)"
export LEGACY_MODULE RELEASE

# legacy_state: the legacy modules loaded (/proc/modules) and the legacy
# tables' lists (/proc/net/*_tables_names: absent, empty or what they list).
legacy_state() {
    local module _ loaded=() file lists=() names
    while read -r module _; do
        [[ "$module" =~ $LEGACY_MODULE ]] && loaded+=("$module")
    done </proc/modules
    for file in ip_tables_names ip6_tables_names arp_tables_names; do
        if [[ ! -e "/proc/net/$file" ]]; then
            lists+=("$file absent")
        else
            names="$(</proc/net/"$file")"
            if [[ -n "$names" ]]; then lists+=("$file lists ${names//$'\n'/ }"); else lists+=("$file empty"); fi
        fi
    done
    echo "loaded: ${loaded[*]:-none}; ${lists[0]}, ${lists[1]}, ${lists[2]}"
}
# unreleased: stdin with the running kernel's release as RELEASE.
unreleased() {
    local line
    while IFS= read -r line; do echo "${line//$RELEASE/RELEASE}"; done
}
# warned [ENV...]: detect's warning lines, one line.
warned() {
    local line out=()
    while IFS= read -r line; do
        [[ "$line" == "warning: "* ]] && out+=("$line")
    done < <(env "$@" "$W" detect 2>&1 | unreleased)
    echo "${out[*]:-no warning}"
}
# every_call_nft: the decision, then each of the six names through
# install's links: which backend each runs (--version), rules written by
# the four writing names, and where they went.
every_call_nft() {
    local decision name nft=0 saves in_nft
    decision="$(decided)"
    mkdir -p /tmp/w && "$W" install --dir /tmp/w >/dev/null
    for name in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
        [[ "$("/tmp/w/$name" --version 2>&1)" == *"(nf_tables)"* ]] && nft=$((nft + 1))
    done
    /tmp/w/iptables -A INPUT -s 10.9.0.1 -j ACCEPT
    printf '*filter\n-A INPUT -s 10.9.0.2/32 -j ACCEPT\nCOMMIT\n' | /tmp/w/iptables-restore --noflush
    /tmp/w/ip6tables -A INPUT -s 2001:db8::1 -j ACCEPT
    printf '*filter\n-A INPUT -s 2001:db8::2/128 -j ACCEPT\nCOMMIT\n' | /tmp/w/ip6tables-restore --noflush
    saves="$({ /tmp/w/iptables-save; /tmp/w/ip6tables-save; } | grep -c '^-A INPUT -s ')"
    in_nft="$(nft list ruleset | grep -c 'saddr .* accept')"
    echo "$decision; $nft of 6 names ran nf_tables; the saves show $saves rules, nft holds $in_nft"
}
# stated_call ENV...: a wrapped `iptables -S` where ENV names legacy: its
# exit status and stderr beside iptables-legacy's own (the name each was
# called by made alike; the kernel's release as RELEASE), the warning its
# record holds (a record of its own), and the lines IPTABLES_WRAPPER_LOG=warn
# adds on stderr, the rest as before.
stated_call() {
    local rc direct record added lines shown
    mkdir -p /tmp/w && "$W" install --dir /tmp/w >/dev/null
    rm -rf /tmp/rec /tmp/rec2
    env "$@" IPTABLES_WRAPPER_RUN_DIR=/tmp/rec /tmp/w/iptables -S 2>&1 >/dev/null | alike >/tmp/wrapped.err
    rc="${PIPESTATUS[0]}"
    iptables-legacy -S 2>&1 >/dev/null | alike >/tmp/direct.err
    direct="${PIPESTATUS[0]}"
    record="$(grep -v '^#' /tmp/rec/warnings | cut -d' ' -f2- | unreleased | paste -sd' ')"
    env "$@" IPTABLES_WRAPPER_LOG=warn IPTABLES_WRAPPER_RUN_DIR=/tmp/rec2 /tmp/w/iptables -S 2>/tmp/warn.err >/dev/null
    added="$(grep '^iptables-wrapper: ' /tmp/warn.err | unreleased | paste -sd' ')"
    grep -v '^iptables-wrapper: ' /tmp/warn.err | alike >/tmp/warn.rest
    mapfile -t lines < <(unreleased </tmp/direct.err)
    printf -v shown '%s / ' "${lines[@]}"
    echo "exit $rc (iptables-legacy: $direct), stderr $(cmp -s /tmp/direct.err /tmp/wrapped.err && echo "as its own" || echo differs): ${shown% / }; record: ${record:-none}; IPTABLES_WRAPPER_LOG=warn adds: ${added:-nothing}, the rest $(cmp -s /tmp/direct.err /tmp/warn.rest && echo "as its own" || echo differs)"
}
# stale_on LINK: nft holds a chain and rules, the host link (if LINK is
# not "none") names LINK's backend; `stale`, `stale --remove`, and what
# nft holds after.
stale_on() {
    local found removed
    if [[ "$1" != none ]]; then
        host /tmp/h "$1"
        export IPTABLES_WRAPPER_HOST_ROOT=/tmp/h
    fi
    printf '*filter\n:OLD - [0:0]\n-A INPUT -p tcp --dport 23 -j DROP\n-A INPUT -s 10.1.0.0/16 -j OLD\n-A OLD -j ACCEPT\nCOMMIT\n' | iptables-nft-restore
    "$W" stale >/tmp/stale.out 2>&1
    found=$?
    "$W" stale --remove --backup-dir /tmp/backup >/tmp/remove.out 2>&1
    removed=$?
    cat /tmp/stale.out /tmp/remove.out >&2
    echo "stale exit $found; --remove exit $removed; nft holds $(iptables-nft-save | grep -c '^-A') rules; $(tail -n1 /tmp/remove.out | unreleased)"
}
export -f legacy_state unreleased warned every_call_nft stated_call stale_on alike

# --- What the kernel offers, before anything ran ----------------------------
listed=() kept=()
while IFS=: read -r path _; do
    module="${path##*/}" module="${module%%.ko*}"
    [[ "$module" =~ $LEGACY_MODULE ]] && listed+=("$module")
    [[ "$module" == nf_tables || "$module" == nft_compat || "$module" == x_tables ]] && kept+=("$module")
done <"/lib/modules/$RELEASE/modules.dep"
mapfile -t kept < <(printf '%s\n' "${kept[@]}" | sort)
echo "check legacy x_tables: the kernel's modules.dep|legacy: ${listed[*]:-none}; kept: ${kept[*]:-none}"
echo "check legacy x_tables: before the checks|$(legacy_state)"

# --- Every call to nft ---------------------------------------------------------
# The first: nothing has loaded nf_tables yet, and the default decides;
# from then on no legacy table exists, and the counts decide nft
# (docs/how-it-decides.md), whatever the lock file says.
in_netns "the default, nf_tables not loaded yet: every wrapped call" 'every_call_nft'
in_netns "/run/xtables.lock present: every wrapped call" \
    'install -m 0600 /dev/null /run/xtables.lock; every_call_nft; rm -f /run/xtables.lock'

# --- detect names legacy as lacking --------------------------------------------
in_netns "detect: text" \
    'echo "$(decided); $("$W" detect -v | unreleased | grep "\[backend-presence\] ip6\{0,1\}_tables" | sed -e "s/^ *//" -e "s/  (.*//" | paste -sd";")"'
in_netns "detect: --json" \
    'json="$("$W" detect --json | unreleased)"; out="mode ${json#*\"mode\":\"}"; out="${out%%\"*}"
     for module in ip_tables ip6_tables; do
         [[ "$json" =~ \"location\":\"$module\ \([^\"]*\)\ in\ the\ running\ kernel\",\"value\":\"([^\"]*)\",\"state\":\"([a-z]*)\" ]] \
             && out+="; $module: ${BASH_REMATCH[2]}, ${BASH_REMATCH[1]}" || out+="; $module: not shown"
     done
     echo "$out"'
in_netns "detect: --format prometheus" \
    '"$W" detect --format prometheus | grep -e "^iptables_wrapper_rules{backend=\"legacy\"}" -e "^iptables_wrapper_rules_state{backend=\"legacy\"" \
         -e "^iptables_wrapper_stale_state{family=\"ipv[46]\",backend=\"legacy\",state=\"absent\"}" -e "^iptables_wrapper_warnings" | LC_ALL=C sort | paste -sd";"'

# --- A host link or IPTABLES_MODE naming legacy: obeyed, warned, the backend's error ---
in_netns "IPTABLES_MODE=legacy: detect" 'echo "$(decided IPTABLES_MODE=legacy); $(warned IPTABLES_MODE=legacy)"'
in_netns "host link to legacy: detect" \
    'host /tmp/h legacy; echo "$(decided IPTABLES_WRAPPER_HOST_ROOT=/tmp/h); $(warned IPTABLES_WRAPPER_HOST_ROOT=/tmp/h)"'
in_netns "IPTABLES_MODE=legacy: a wrapped call" 'stated_call IPTABLES_MODE=legacy'
in_netns "host link to legacy: a wrapped call" 'host /tmp/h legacy; stated_call IPTABLES_WRAPPER_HOST_ROOT=/tmp/h'
compare_wrapped legacy "a kernel without legacy, IPTABLES_MODE=legacy" IPTABLES_MODE=legacy
host /tmp/hl legacy
compare_wrapped legacy "a kernel without legacy, a host link to legacy" IPTABLES_WRAPPER_HOST_ROOT=/tmp/hl

# --- stale, stale --remove and install ----------------------------------------
in_netns "stale: the host on nft by its link" 'stale_on nft'
in_netns "stale: the host on legacy by its link" 'stale_on legacy'
in_netns "stale: no host link" 'stale_on none'
in_netns "install" \
    'rm -rf /tmp/wi; mkdir /tmp/wi; "$W" install --dir /tmp/wi >/dev/null; first=$?; "$W" install --dir /tmp/wi >/dev/null; again=$?
     n=0; for name in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
         [[ "$(readlink -f "/tmp/wi/$name")" == "$(readlink -f "$W")" ]] && n=$((n + 1)); done
     echo "exit $first; again exit $again; $n of 6 names resolve to the wrapper"'

# --- Nothing loaded or created a legacy table ----------------------------------
echo "check legacy x_tables: after the checks|$(legacy_state)"
