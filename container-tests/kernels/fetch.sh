#!/usr/bin/env bash
# Fills the kernel matrix's cache for one guest by apt, once:
#
#   container-tests/kernels/fetch.sh NAME DEBIAN-ARCH USERLAND-SUITE KERNEL-SUITE KERNEL-META DIR
#
# A private apt configuration under DIR/apt (its own sources, lists and
# empty dpkg status, the guest's architecture only; the machine's own apt
# is left alone) resolves the userland (USERLAND_PACKAGES with their
# dependencies, from USERLAND-SUITE) and the versioned kernel image that
# KERNEL-META depends on in KERNEL-SUITE, and downloads exactly those
# versions into DIR/debs (apt checks each against the signed index). The
# archive's address is this machine's own (container-tests/lib.sh,
# debian_mirror). DIR/manifest, written last, pins what was fetched: one
# line per package, "FILE SHA256", the kernel first; the build
# (container-tests/kernels/build-initramfs.sh) checks every file against it
# and never contacts the archive. A package the index lists but the archive
# does not serve (404) is one error naming it. A guest whose request another
# guest's cache under DIR's parent already fills links that one's files.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# What each guest's userland holds: both iptables backends, nft, ip,
# the shells and tools the checks and the integration tests run.
USERLAND_PACKAGES=(iptables nftables iproute2 bash dash coreutils util-linux mount bsdutils
  bsdextrautils kmod busybox-static grep sed diffutils strace)

name="$1" arch="$2" userland_suite="$3" kernel_suite="$4" kernel_meta="$5" dir="$6"
# What was asked for: a cache filled for another list is filled again.
request="$arch $userland_suite $kernel_suite $kernel_meta ${USERLAND_PACKAGES[*]}"
[[ -s "$dir/manifest" && "$(cat "$dir/request" 2>/dev/null)" == "$request" ]] && exit 0
rm -f "$dir/manifest"
# A guest of the same request fetched already (the guests without legacy
# x_tables boot their sibling's packages): its files, linked, not fetched again.
for sibling in "$(dirname "$dir")"/*/; do
  sibling="${sibling%/}"
  [[ "$sibling" != "$dir" && -s "$sibling/manifest" && "$(cat "$sibling/request" 2>/dev/null)" == "$request" ]] || continue
  rm -rf "$dir/debs"
  mkdir -p "$dir"
  cp -al "$sibling/debs" "$dir/debs"
  printf '%s\n' "$request" >"$dir/request"
  cp "$sibling/manifest" "$dir/manifest"
  log "$name: the packages of $(basename "$sibling") (the same request), linked"
  exit 0
done
mirror="$(debian_mirror)"
apt_dir="$dir/apt"
rm -rf "$apt_dir" "$dir/debs"
mkdir -p "$apt_dir"/{etc/apt/apt.conf.d,etc/apt/preferences.d,etc/apt/sources.list.d,var/lib/apt/lists/partial,var/cache/apt/archives/partial,var/lib/dpkg} "$dir/debs"
: >"$apt_dir/var/lib/dpkg/status"
for suite in $(printf '%s\n' "$userland_suite" "$kernel_suite" | sort -u); do
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main"
done >"$apt_dir/etc/apt/sources.list"
APT=(-o "Dir=$apt_dir" -o "Dir::State::status=$apt_dir/var/lib/dpkg/status"
  -o "APT::Architecture=$arch" -o "APT::Architectures=$arch" -o Debug::NoLocking=1
  -o Acquire::Retries=3 -o APT::Get::AllowUnauthenticated=false)

log "$name: resolving ${USERLAND_PACKAGES[*]} ($userland_suite) and $kernel_meta ($kernel_suite) for $arch"
apt-get "${APT[@]}" update -qq || die "$name: apt-get update of $userland_suite/$kernel_suite for $arch failed"
kernel_pkg="$(apt-cache "${APT[@]}" show "$kernel_meta/$kernel_suite" \
  | sed -n 's/^Depends: .*\(linux-image-[0-9][^ ,]*\).*/\1/p' | head -n1)"
[[ -n "$kernel_pkg" ]] || die "$name: $kernel_meta in $kernel_suite depends on no linux-image-VERSION package"
kernel_version="$(apt-cache "${APT[@]}" madison "$kernel_pkg" \
  | awk -F' *[|] *' -v s="$kernel_suite/" 'index($3, s) {print $2; exit}')"
mapfile -t wanted < <(apt-get "${APT[@]}" install -s -qq -t "$userland_suite" "${USERLAND_PACKAGES[@]}" \
  | awk '/^Inst /{print $2 "=" substr($3, 2)}')
((${#wanted[@]})) || die "$name: apt resolved nothing for ${USERLAND_PACKAGES[*]}"
wanted=("$kernel_pkg=$kernel_version" "${wanted[@]}")
(cd "$dir/debs" && apt-get "${APT[@]}" download -qq "${wanted[@]}" >"$dir/download.log" 2>&1) || true
missing=()
for item in "${wanted[@]}"; do
  pkg="${item%%=*}" version="${item#*=}"
  compgen -G "$dir/debs/${pkg}_*.deb" >/dev/null || missing+=("$pkg $version")
done
((${#missing[@]} == 0)) || die "$name: the archive did not serve ${missing[*]} (listed in $userland_suite/$kernel_suite's index for $arch): $(grep -m3 -o 'Failed to fetch [^ ]*' "$dir/download.log" | paste -sd' ')"
{
  for item in "${wanted[@]}"; do
    file="$(cd "$dir/debs" && ls "${item%%=*}"_*.deb)"
    printf '%s %s\n' "$file" "$(sha256sum "$dir/debs/$file" | cut -d' ' -f1)"
  done
} >"$dir/manifest.tmp"
printf '%s\n' "$request" >"$dir/request"
mv "$dir/manifest.tmp" "$dir/manifest"
log "$name: fetched ${#wanted[@]} packages ($(du -sh "$dir/debs" | cut -f1)), kernel $kernel_pkg $kernel_version"
