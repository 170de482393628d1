#!/bin/bash
# Lays out a Debian root (with Debian's iptables package) as another
# distribution lays out its iptables, for the recipes of docs/images/ to be built
# on as printed (no registry here). Run inside the image being built, by
# distro-sim.Dockerfile:
#
#   distro-sim.sh alpine-3.22|alpine-3.23|fedora-42|ubi-9|wolfi
#
# What is simulated, and from what (docs/node-os.md has the sources):
# - Debian's two backends, xtables-nft-multi and xtables-legacy-multi, are
#   moved aside: the image has no iptables until the recipe installs it.
# - The distribution's package manager is a stub (apk; dnf and microdnf)
#   that installs the named packages by laying out those binaries under the
#   distribution's names and directories, with its alternatives calls where
#   it has them; any other package name fails, as an unknown package would.
# - /etc/os-release says which distribution it is (the wrapper reads its ID
#   on the missing-backend error). The rest of the image stays Debian's.
set -euo pipefail
DISTRO="${1:?usage: distro-sim.sh alpine-3.22|alpine-3.23|fedora-42|ubi-9|wolfi}"
SIM=/usr/lib/distro-sim
mkdir -p "$SIM/bin"

# Debian's iptables out of the way: the backends kept for the stub, every
# name and alternatives entry removed.
mv /usr/sbin/xtables-nft-multi /usr/sbin/xtables-legacy-multi "$SIM/bin/"
for group in iptables ip6tables; do update-alternatives --remove-all "$group" >/dev/null 2>&1 || true; done
rm -f /usr/sbin/ip6tables* /usr/sbin/iptables* /usr/sbin/xtables-* /usr/sbin/arptables* /usr/sbin/ebtables*

# merge_sbin: /usr/sbin -> bin (Fedora 42+, Wolfi): Debian's /usr/sbin
# moves into /usr/bin; /sbin (-> usr/sbin) then reaches it too.
merge_sbin() {
  cp -a /usr/sbin/. /usr/bin/
  rm -rf /usr/sbin
  ln -s bin /usr/sbin
}

os_release() { rm -f /etc/os-release /usr/lib/os-release; printf '%s\n' "$@" >/etc/os-release; }

# The package manager stub: PACKAGE.install scripts in $SIM/packages.
mkdir -p "$SIM/packages"
package() { cat >"$SIM/packages/$1.install"; }

# links DIR MODE: the six command names (and the -MODE names) in DIR as
# links to xtables-MODE-multi, as iptables's make install and these
# distributions' packages make them.
cat >"$SIM/links.sh" <<'LINKS'
plain_links() { # DIR MODE: iptables, ip6tables, -save, -restore
  for v in iptables ip6tables; do for f in "" -save -restore; do ln -sfn "xtables-$2-multi" "$1/$v$f"; done; done
}
mode_links() { # DIR MODE: iptables-MODE, ip6tables-MODE-save, ...
  for v in iptables ip6tables; do for f in "" -save -restore; do ln -sfn "xtables-$2-multi" "$1/$v-$2$f"; done; done
}
backend() { # DIR MODE: the multi-call binary
  mkdir -p "$1" && cp /usr/lib/distro-sim/bin/"xtables-$2-multi" "$1/"
}
alternatives_group() { # DIR MODE PRIORITY: Fedora's and RHEL's %post
  alternatives --install "$1/iptables" iptables "$1/iptables-$2" "$3" \
    --slave "$1/iptables-save" iptables-save "$1/iptables-$2-save" \
    --slave "$1/iptables-restore" iptables-restore "$1/iptables-$2-restore" \
    --slave "$1/ip6tables" ip6tables "$1/ip6tables-$2" \
    --slave "$1/ip6tables-save" ip6tables-save "$1/ip6tables-$2-save" \
    --slave "$1/ip6tables-restore" ip6tables-restore "$1/ip6tables-$2-restore" >/dev/null
}
LINKS

# The stub itself, under the distribution's command names.
cat >"$SIM/pm" <<'PM'
#!/bin/bash
# A package manager stub (container-tests/distro-sim.sh): installs the
# packages named on the command line from /usr/lib/distro-sim/packages.
set -euo pipefail
. /usr/lib/distro-sim/links.sh
action=""
for arg in "$@"; do
  case "$arg" in
    add|install|reinstall|upgrade) action=install ;;
    del|remove|erase) action=remove ;;
    clean|update|makecache) exit 0 ;;
    -*) ;;
    *)
      [[ -n "$action" ]] || { echo "$(basename "$0"): unknown command '$arg'" >&2; exit 1; }
      script="/usr/lib/distro-sim/packages/$arg.$action"
      if [[ -f "$script" ]]; then . "$script"
      elif [[ "$action" == remove ]]; then echo "$(basename "$0"): $arg is not installed" >&2
      else echo "$(basename "$0"): no package named '$arg' (simulated $(. /etc/os-release; echo "$ID"))" >&2; exit 1
      fi ;;
  esac
done
PM
chmod 0755 "$SIM/pm"

case "$DISTRO" in
  alpine-3.22) # /sbin real; iptables-legacy a package of its own, in /usr/sbin since 3.21
    os_release 'NAME="Alpine Linux"' ID=alpine VERSION_ID=3.22.2 'PRETTY_NAME="Alpine Linux v3.22 (simulated from Debian binaries)"'
    rm /sbin && mkdir /sbin
    package iptables <<<'backend /sbin nft; plain_links /sbin nft; mode_links /sbin nft'
    package iptables-legacy <<<'backend /usr/sbin legacy; mode_links /usr/sbin legacy'
    ln -s "$SIM/pm" /sbin/apk ;;
  alpine-3.23) # merged /usr: /sbin -> usr/sbin, everything in /usr/sbin
    os_release 'NAME="Alpine Linux"' ID=alpine VERSION_ID=3.23.0 'PRETTY_NAME="Alpine Linux v3.23 (simulated from Debian binaries)"'
    package iptables <<<'backend /usr/sbin nft; plain_links /usr/sbin nft; mode_links /usr/sbin nft'
    package iptables-legacy <<<'backend /usr/sbin legacy; mode_links /usr/sbin legacy'
    ln -s "$SIM/pm" /usr/sbin/apk ;;
  fedora-42) # /usr/sbin -> bin; alternatives group iptables (ip6tables a follower), master in /usr/bin
    os_release 'NAME="Fedora Linux"' ID=fedora VERSION_ID=42 'PRETTY_NAME="Fedora Linux 42 (simulated from Debian binaries)"'
    merge_sbin
    package iptables-nft <<<'backend /usr/bin nft; mode_links /usr/bin nft; alternatives_group /usr/bin nft 10'
    package iptables-legacy <<<'backend /usr/bin legacy; mode_links /usr/bin legacy; alternatives_group /usr/bin legacy 10'
    ln -s "$SIM/pm" /usr/bin/dnf ;;
  ubi-9) # iptables-nft only (legacy is in EPEL alone); /usr/sbin a directory
    os_release 'NAME="Red Hat Enterprise Linux"' ID=rhel ID_LIKE=fedora VERSION_ID=9.6 'PRETTY_NAME="Red Hat Enterprise Linux 9.6 (simulated from Debian binaries)"'
    package iptables-nft <<<'backend /usr/sbin nft; mode_links /usr/sbin nft; alternatives_group /usr/sbin nft 10'
    ln -s "$SIM/pm" /usr/bin/microdnf ;;
  wolfi) # /usr/sbin -> bin; iptables has both backends, its plain names -> legacy (make install's)
    os_release 'NAME="Wolfi"' ID=wolfi VERSION_ID=20230201 'PRETTY_NAME="Wolfi (simulated from Debian binaries)"'
    merge_sbin
    package iptables <<<'backend /usr/bin nft; backend /usr/bin legacy; mode_links /usr/bin nft; mode_links /usr/bin legacy; plain_links /usr/bin legacy'
    # iptables-wrappers: a regular file named iptables-wrapper (kubernetes-sigs'
    # Go program there; a stand-in here) and the six names linked to it.
    package iptables-wrappers <<'W'
printf '#!/bin/sh\necho "kubernetes-sigs iptables-wrapper (simulated stand-in)" >&2\nexit 1\n' >/usr/bin/iptables-wrapper
chmod 0755 /usr/bin/iptables-wrapper
for v in iptables ip6tables; do for f in "" -save -restore; do ln -sfn iptables-wrapper "/usr/bin/$v$f"; done; done
W
    package iptables-wrappers.remove <<'W'
rm -f /usr/bin/iptables-wrapper
for v in iptables ip6tables; do for f in "" -save -restore; do rm -f "/usr/bin/$v$f"; done; done
W
    mv "$SIM/packages/iptables-wrappers.remove.install" "$SIM/packages/iptables-wrappers.remove"
    ln -s "$SIM/pm" /usr/bin/apk ;;
  *) echo "distro-sim.sh: unknown distribution '$DISTRO'" >&2; exit 1 ;;
esac

# Fedora's and RHEL's alternatives (chkconfig) keeps its state in
# /var/lib/alternatives; Debian's update-alternatives does the same job.
cat >/usr/bin/alternatives <<'ALT'
#!/bin/sh
mkdir -p /var/lib/alternatives
exec update-alternatives --admindir /var/lib/alternatives "$@"
ALT
chmod 0755 /usr/bin/alternatives
case "$DISTRO" in fedora-*|ubi-*) ;; *) rm /usr/bin/alternatives ;; esac
echo "simulated $DISTRO"
