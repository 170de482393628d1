#!/usr/bin/env bash
# Builds one guest's kernel and initramfs from the kernel matrix's cache,
# offline (container-tests/kernels/fetch.sh filled it):
#
#   container-tests/kernels/build-initramfs.sh DIR WRAPPER PAYLOAD OUT [LEGACY]
#
# DIR holds the guest's debs and manifest; every deb is checked against the
# manifest's sha256 first. The userland debs are unpacked (not configured:
# no maintainer script runs, so no binfmt is needed) into a root with
# merged /usr; of the kernel's modules, those under net/*/netfilter and
# net/netfilter, and crypto, lib and arch (what the kernel asks for by name
# at run time, as libcrc32c does for crc32c: no symbol dependency shows
# it), with everything they depend on (the kernel's modules.dep, made by
# depmod here), then depmod again for the guest. LEGACY "removed" leaves
# out the legacy x_tables modules (ip_tables, ip6_tables, arp_tables,
# ebtables, iptable_*, ip6table_*, arptable_*, ebtable_*) and every module
# that depends on one: what a kernel built without
# CONFIG_NETFILTER_XTABLES_LEGACY (Linux 6.17 and later) offers userspace,
# nf_tables, nft_compat and x_tables' matches kept. The wrapper goes to
# /usr/local/bin/iptables-wrapper, the files under PAYLOAD (the guest's
# /init and checks, the cross-built test binaries) to the same paths in the
# root. Written: OUT/kernel (the image qemu boots) and OUT/initrd.cpio
# (newc, uncompressed: unpacking costs the emulated guest less than a
# decompression would), OUT/kernel-release.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

dir="$1" wrapper="$2" payload="$3" out="$4" legacy="${5:-present}"
[[ "$legacy" == present || "$legacy" == removed ]] || die "LEGACY is present or removed, not '$legacy'"
[[ -s "$dir/manifest" ]] || die "no manifest in $dir: container-tests/kernels/fetch.sh fills it"
(cd "$dir/debs" && awk '{print $2 "  " $1}' ../manifest | sha256sum --quiet -c -) \
  || die "a cached deb in $dir/debs does not match its manifest: remove $dir and run again to fetch it anew"
work="$(mktemp -d "${TMPDIR:-/tmp}/iptw-initrd.XXXXXX")"
trap 'rm -rf "$work"' EXIT
root="$work/root" kernel="$work/kernel"
mkdir -p "$root/usr"/{bin,sbin,lib,lib64} "$kernel"
for link in bin sbin lib lib64; do ln -s "usr/$link" "$root/$link"; done

# unpack DEB DEST: the deb's files, through the merged-/usr links.
unpack() { dpkg-deb --fsys-tarfile "$1" | tar -x --keep-directory-symlink -C "$2"; }
kernel_deb="$(head -n1 "$dir/manifest" | cut -d' ' -f1)"
unpack "$dir/debs/$kernel_deb" "$kernel"
while read -r file _; do
  [[ "$file" == "$kernel_deb" ]] || unpack "$dir/debs/$file" "$root"
done <"$dir/manifest"
# What the checks never run (perl, pulled in by dependencies; gconv's
# character sets; documentation): less for the emulated guest to unpack.
rm -rf "$root/usr/share"/{doc,man,info,locale,zoneinfo,bug,lintian,perl,perl5,bash-completion} \
  "$root/usr/lib"/*/{perl,perl-base,perl5,gconv} "$root/usr/bin/perl"*

modules="$(find "$kernel" -maxdepth 4 -type d -path '*/modules/*' -name '[0-9]*' | head -n1)"
release="$(basename "$modules")"
[[ -n "$release" ]] || die "$kernel_deb holds no lib/modules/RELEASE"
image="$(find "$kernel/boot" -name "vmlinu[xz]-$release" | head -n1)"
[[ -n "$image" ]] || die "$kernel_deb holds no /boot/vmlinuz-$release or vmlinux-$release"
depmod -b "$(dirname "$(dirname "$(dirname "$modules")")")" "$release"
# The netfilter modules and, recursively, what they depend on; with LEGACY
# "removed", none of the legacy x_tables modules nor any that needs one
# (listed in modules.removed).
: >"$work/modules.removed"
awk -v legacy="$legacy" -v removed="$work/modules.removed" '
  { sub(/:$/, "", $1); key = $1; deps[key] = ""; for (i = 2; i <= NF; i++) deps[key] = deps[key] " " $i }
  key ~ /^kernel\/net\/(netfilter|ipv4\/netfilter|ipv6\/netfilter|bridge\/netfilter)\// { want[key] = 1 }
  key ~ /^kernel\/(crypto|lib|arch)\// { want[key] = 1 }
  legacy == "removed" && key ~ /\/(ip_tables|ip6_tables|arp_tables|ebtables|iptable_[a-z]+|ip6table_[a-z]+|arptable_[a-z]+|ebtable_[a-z]+)\.ko/ { drop[key] = 1 }
  END {
    do { added = 0
      for (m in deps) if (!(m in drop)) { n = split(deps[m], d, " "); for (i = 1; i <= n; i++) if (d[i] in drop) { drop[m] = 1; added = 1; break } }
    } while (added)
    for (m in drop) { delete want[m]; print m >removed }
    do { added = 0
      for (m in want) { n = split(deps[m], d, " "); for (i = 1; i <= n; i++) if (!(d[i] in want)) { want[d[i]] = 1; added = 1 } }
    } while (added)
    for (m in want) print m
  }' "$modules/modules.dep" >"$work/modules.list"
# A legacy table built into the kernel cannot be left out.
if [[ "$legacy" == removed ]] && grep -E '/(ip_tables|ip6_tables|iptable_[a-z]+|ip6table_[a-z]+)\.ko' "$modules/modules.builtin"; then
  die "$kernel_deb builds legacy x_tables in (above): no initramfs can leave them out"
fi
guest_modules="$root/usr/lib/modules/$release"
mkdir -p "$guest_modules"
(cd "$modules" && xargs -a "$work/modules.list" cp --parents -t "$guest_modules" && cp modules.order modules.builtin* "$guest_modules/")
depmod -b "$root/usr" "$release" 2>/dev/null || depmod -b "$root" "$release"

install -D -m 0755 "$wrapper" "$root/usr/local/bin/iptables-wrapper"
cp -a "$payload/." "$root/"
mkdir -p "$root"/{proc,sys,dev,tmp,run,etc,var/lib,root}
mkdir -p "$out"
cp "$image" "$out/kernel"
printf '%s\n' "$release" >"$out/kernel-release"
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) >"$out/initrd.cpio.tmp"
mv "$out/initrd.cpio.tmp" "$out/initrd.cpio"
log "$(basename "$dir"): kernel $release, $(wc -l <"$work/modules.list") modules$([[ "$legacy" == removed ]] && echo " ($(wc -l <"$work/modules.removed") legacy x_tables modules left out: $(sed 's,.*/,,; s,\.ko.*,,' "$work/modules.removed" | sort | paste -sd' '))"), initramfs $(du -h "$out/initrd.cpio" | cut -f1)"
