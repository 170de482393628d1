#!/usr/bin/env bash
# Checks scripts/apt-install.sh, which every apt step of the scripts goes
# through, where apt is hard to be kind to: in a container of the bookworm
# base image without a network, from a local package archive made here
# (so nothing is fetched), it must
#   1 wait while another apt holds the package lists' lock (apt-get update
#     does not honour DPkg::Lock::Timeout), then install;
#   2 install beside an unrelated package whose postinst fails (a warning
#     naming it, exit 0);
#   3 refuse a package the sources do not have: exit 1, one line naming it;
#   4 after an interrupted dpkg run, exit 1 saying that and what to run,
#     without running dpkg --configure -a itself;
#   5 run nothing at all when the packages are there.
#
#   container-tests/apt-install-check.sh
# Exit 0 when every check passed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BASE="$("$CT_DIR/build-base.sh" bookworm | awk '{print $2}')"
log "apt-install.sh in $BASE (no network)"
docker run --rm --network none -i \
  --label "iptables-wrapper-test=${IPTW_RUN_ID:-manual}" \
  -v "$REPO_DIR/scripts/apt-install.sh:/apt-install.sh:ro" \
  -e IPTW_APT_LOCK_WAIT=60 "$BASE" bash -s <<'EOF'
set -u
failed=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; failed=1; fi; }

# package NAME [POSTINST-STATUS]: a .deb of nothing, into the archive /repo.
mkdir -p /repo
package() {
  local d=/tmp/pkg-$1
  mkdir -p "$d/DEBIAN"
  printf 'Package: %s\nVersion: 1\nArchitecture: all\nMaintainer: test <test@localhost>\nDescription: test package\n' "$1" >"$d/DEBIAN/control"
  if [ -n "${2:-}" ]; then printf '#!/bin/sh\nexit %s\n' "$2" >"$d/DEBIAN/postinst"; chmod 755 "$d/DEBIAN/postinst"; fi
  dpkg-deb -b "$d" "/repo/$1.deb" >/dev/null
}
package iptw-wanted
package iptw-other
package iptw-broken 1
( cd /repo
  for deb in *.deb; do
    dpkg-deb -f "$deb"
    printf 'Filename: ./%s\nSize: %s\nSHA256: %s\n\n' "$deb" "$(stat -c %s "$deb")" "$(sha256sum "$deb" | cut -d' ' -f1)"
  done >Packages )
echo 'deb [trusted=yes] file:/repo ./' >/etc/apt/sources.list.d/local.list

# A lock held the way apt holds it (fcntl), for 8 s.
hold() {
  perl -e 'use Fcntl; open(my $f, ">>", $ARGV[0]) or die; my $lock = pack("s s x4 q q i x4", F_WRLCK, 0, 0, 0, 0); fcntl($f, F_SETLK, $lock) or die "lock: $!"; sleep $ARGV[1]' "$1" "$2" &
  sleep 1
}

hold /var/lib/apt/lists/lock 8
start=$SECONDS; out=$(bash /apt-install.sh check iptw-wanted 2>&1); rc=$?
echo "$out" | sed 's/^/  | /'
check "1 waited for the lists lock ($((SECONDS - start)) s), then installed" '[ $rc = 0 ] && [ $((SECONDS - start)) -ge 6 ] && dpkg-query -W iptw-wanted >/dev/null 2>&1'
wait

dpkg -i /repo/iptw-broken.deb >/dev/null 2>&1
out=$(bash /apt-install.sh check iptw-other 2>&1); rc=$?
echo "$out" | sed 's/^/  | /'
check "2 installed beside a broken package, which the warning names" '[ $rc = 0 ] && echo "$out" | grep -q "warning: .*failed: iptw-broken"'
dpkg --remove --force-remove-reinstreq iptw-broken >/dev/null 2>&1

out=$(bash /apt-install.sh check iptw-missing 2>&1); rc=$?
echo "$out" | sed 's/^/  | /'
check "3 a package the sources lack: exit 1, named" '[ $rc = 1 ] && [ "$(echo "$out" | grep -c "could not install iptw-missing")" = 1 ]'

echo garbage >/var/lib/dpkg/updates/0001
out=$(bash /apt-install.sh check iptw-third 2>&1); rc=$?
echo "$out" | sed 's/^/  | /'
check "4 dpkg interrupted: exit 1, saying what to run" '[ $rc = 1 ] && echo "$out" | grep -q "dpkg --configure -a"'
check "4 ... and not run here" '[ -e /var/lib/dpkg/updates/0001 ]'
rm -f /var/lib/dpkg/updates/0001

hold /var/lib/apt/lists/lock 8
start=$SECONDS; out=$(bash /apt-install.sh check iptw-wanted 2>&1); rc=$?
check "5 nothing run when the packages are there (no wait for the held lock, no output)" '[ $rc = 0 ] && [ -z "$out" ] && [ $((SECONDS - start)) -lt 3 ]'
wait
[ $failed = 0 ] && echo "apt-install.sh: pass"
exit $failed
EOF
