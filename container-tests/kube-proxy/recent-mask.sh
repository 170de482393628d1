#!/usr/bin/env bash
# The smallest case of what the kube-proxy upgrade check found: `stale
# --remove` refuses to empty a legacy nat table holding kube-proxy's ClientIP
# session affinity rule.
#
#   bash container-tests/kube-proxy/recent-mask.sh [WRAPPER]
#
# kube-proxy 1.20 writes `-m recent --name NAME --set` without --mask; the
# iptables extension then sets all 16 bytes of xt_recent (revision 1)'s mask
# to ff. iptables-legacy-save prints the rule as `--mask 255.255.255.255`,
# and restoring that sets only the first 4 bytes (the rest 0): the same rule
# for IPv4, other bytes in the kernel's blob. The wrapper's proof (restore the
# backup into a scratch namespace, compare byte for byte) then fails and the
# table is left as it was. Prints what `stale --remove` said for both forms;
# exits 0 when both tables were emptied, 1 otherwise (today: the first is
# left). Runs each case in its own network + mount namespace.
set -euo pipefail
WRAPPER="${1:-${IPTW_WRAPPER:-$(bash "$(dirname "$0")/../../scripts/build-static.sh" | tail -n1)}}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cp "$WRAPPER" "$T/iptables-wrapper"
rc=0
for form in "--name KUBE-SEP-X --set" "--set --name KUBE-SEP-X --mask 255.255.255.255 --rsource"; do
    printf '*nat\n:KUBE-SEP-X - [0:0]\n-A KUBE-SEP-X -p tcp -m recent %s -m tcp -j DNAT --to-destination 198.19.3.10:9090\nCOMMIT\n' \
        "$form" >"$T/rules"
    # shellcheck disable=SC2016 # expanded by the inner shell
    out=$(unshare -n -m --propagation private bash -c '
        mount -t tmpfs tmpfs /run
        iptables-legacy-restore <"$1/rules"
        IPTABLES_MODE=nft IPTABLES_WRAPPER_RUN_DIR=/run/iptables-wrapper "$1/iptables-wrapper" stale --remove 2>&1 \
            | grep -E "^(emptied|left as it was)"' _ "$T" || true)
    echo "-m recent $form: $out"
    [[ "$out" == emptied* ]] || rc=1
done
exit "$rc"
