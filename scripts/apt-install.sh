#!/usr/bin/env bash
# Installs the named Debian packages, and only them (with their
# dependencies, without recommends), on a Debian-like machine:
#
#   scripts/apt-install.sh WHO PACKAGE...
#
# WHO names the caller in messages. Packages already installed are left
# alone; when all are, apt is not run at all.
#
# - It waits for another apt or dpkg (unattended-upgrades, a second job):
#   `-o DPkg::Lock::Timeout` makes apt-get install wait for dpkg's lock, but
#   apt-get update does not honour it for its lists lock (checked on apt 2.6:
#   "Could not get lock /var/lib/apt/lists/lock" at once), nor is the
#   archives lock covered, so a call that fails on a lock is retried until
#   IPTW_APT_LOCK_WAIT seconds (600) have passed.
# - A package that is broken but unrelated does not stop it: when apt-get
#   fails but every named package is installed and configured afterwards
#   (say a half-configured package of the machine's own whose postinst
#   fails again), that is a warning with apt's error lines, and it goes on.
# - What it cannot avoid (dpkg interrupted earlier: apt refuses everything
#   until `dpkg --configure -a`, which would configure every pending package,
#   not only ours, so it is not run here) is one message naming the packages
#   it needed, apt's own error lines and what to run; exit 1.
# - apt-get update failing for one source (a third-party repository that is
#   down) is a warning; the install then says whether our packages could be
#   had without it.
set -euo pipefail

WHO="${1:?usage: apt-install.sh WHO PACKAGE...}"
shift
[[ $# -gt 0 ]] || { echo "usage: apt-install.sh WHO PACKAGE..." >&2; exit 2; }
LOCK_WAIT="${IPTW_APT_LOCK_WAIT:-600}"

# installed PACKAGE: dpkg has it installed and configured.
installed() {
    [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]
}

missing=()
for package in "$@"; do installed "$package" || missing+=("$package"); done
((${#missing[@]})) || exit 0

command -v apt-get >/dev/null || {
    echo "$WHO: needs the packages ${missing[*]} and this machine has no apt-get: install them with its package manager" >&2
    exit 1
}
[[ $EUID -eq 0 ]] || {
    echo "$WHO: needs the packages ${missing[*]}: run as root, or install them first (apt-get install ${missing[*]})" >&2
    exit 1
}
export DEBIAN_FRONTEND=noninteractive

OUT="$(mktemp "${TMPDIR:-/tmp}/iptw-apt.XXXXXX")"
trap 'rm -f "$OUT"' EXIT

# apt_get ARG...: apt-get ARG..., retried while another apt or dpkg holds a
# lock, for at most LOCK_WAIT seconds in all; its output goes to OUT. The
# status is apt-get's last.
deadline=$((SECONDS + LOCK_WAIT))
apt_get() {
    local rc said=0
    while :; do
        rc=0
        apt-get -o DPkg::Lock::Timeout="$LOCK_WAIT" -o Dpkg::Use-Pty=0 "$@" >"$OUT" 2>&1 || rc=$?
        ((rc != 0)) && grep -qE '^E: (Could not get lock|Unable to lock|Unable to acquire the dpkg frontend lock)' "$OUT" \
            && ((SECONDS < deadline)) || return "$rc"
        ((said)) || { echo "$WHO: another apt or dpkg holds its lock; waiting (at most ${LOCK_WAIT}s): $(grep -m1 '^E:' "$OUT")" >&2; said=1; }
        sleep 5
    done
}

# apt_errors: apt's error lines of the last call, on one line.
# dpkg's list of the packages it failed on comes after its own line.
apt_errors() {
    { grep -E '^(E|W): ' "$OUT" | sed 's/^[EW]: //'
      sed -n '/^Errors were encountered while processing:/,/^[^ ]/s/^ \+/failed: /p' "$OUT"; } \
        | paste -sd';' - | sed 's/;/; /g' | cut -c1-600
}

echo "$WHO: installing ${missing[*]}" >&2
if ! apt_get update -qq; then
    echo "$WHO: warning: apt-get update failed (going on with the package lists there are): $(apt_errors)" >&2
fi
rc=0
apt_get install -y -qq --no-install-recommends "${missing[@]}" || rc=$?
still=()
for package in "${missing[@]}"; do installed "$package" || still+=("$package"); done
if ((${#still[@]} == 0)); then
    ((rc == 0)) || echo "$WHO: warning: apt-get failed (status $rc) on something else, but ${missing[*]} installed: $(apt_errors)" >&2
    exit 0
fi
hint=""
if grep -q 'dpkg was interrupted' "$OUT"; then
    hint=" (an earlier dpkg run was interrupted and apt refuses to install anything until 'dpkg --configure -a' has been run; that configures every pending package, so it is left to you)"
elif grep -q 'Could not get lock\|Unable to lock\|Unable to acquire' "$OUT"; then
    hint=" (another apt or dpkg still held its lock after ${LOCK_WAIT}s: IPTW_APT_LOCK_WAIT sets the wait)"
elif grep -q 'Unable to locate package\|has no installation candidate' "$OUT"; then
    hint=" (this machine's apt sources do not have them)"
fi
echo "$WHO: could not install ${still[*]} with apt-get (status $rc)$hint: $(apt_errors)" >&2
exit 1
