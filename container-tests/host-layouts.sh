# shellcheck shell=bash
# Fake host roots, one per node OS, for scenario 12 (scenario.sh). Source it.
# Each layout is the host's iptables links as that OS lays them out
# (docs/node-os.md has the sources), symlinks only: no binary is needed on
# the host side, since the wrapper only reads links there.
#
#   layout_build DIR LAYOUT MODE   lay out LAYOUT in DIR, choosing MODE
#   layout_choose DIR LAYOUT MODE  switch the host to MODE as the OS does
#                                  (an alternatives update, a relink, a
#                                  new NixOS generation), atomically
#   layout_link LAYOUT             the candidate the wrapper should answer
#                                  from, relative to the host root

HOST_LAYOUTS=(debian fedora flatcar talos bottlerocket alpine nixos k3s)

# swap_link TARGET PATH: make PATH a symlink to TARGET by a rename, as
# update-alternatives does, so a reader never finds it missing.
swap_link() {
  mkdir -p "$(dirname "$2")"
  ln -sfn "$1" "$2.new"
  mv -T "$2.new" "$2"
}

layout_link() {
  case "$1" in
    debian|fedora) echo etc/alternatives/iptables ;;
    flatcar|bottlerocket|talos) echo usr/sbin/iptables ;;
    alpine) echo sbin/iptables ;;
    nixos) echo run/current-system/sw/bin/iptables ;;
    k3s) echo var/lib/rancher/k3s/data/current/bin/aux/iptables ;;
    *) echo "unknown layout '$1'" >&2; return 1 ;;
  esac
}

layout_build() {
  local dir="$1" layout="$2" mode="$3" v
  mkdir -p "$dir/etc" "$dir/run" "$dir/usr/bin" "$dir/var/lib"
  case "$layout" in
    debian) # /usr/sbin/iptables -> /etc/alternatives/iptables -> /usr/sbin/iptables-MODE
      mkdir -p "$dir/usr/sbin" && ln -sfn usr/sbin "$dir/sbin"
      for v in iptables ip6tables; do ln -sfn "/etc/alternatives/$v" "$dir/usr/sbin/$v"; done ;;
    fedora) # 42+: /usr/sbin -> bin; the master link in /usr/bin; ip6tables a follower
      ln -sfn bin "$dir/usr/sbin" && ln -sfn usr/bin "$dir/sbin"
      for v in iptables ip6tables; do ln -sfn "/etc/alternatives/$v" "$dir/usr/bin/$v"; done ;;
    flatcar|bottlerocket) # /usr/sbin/iptables -> xtables-MODE-multi, no alternatives
      mkdir -p "$dir/usr/sbin" && ln -sfn usr/sbin "$dir/sbin" ;;
    talos) # /usr/sbin -> bin, /usr/bin/iptables -> xtables-nft-multi, read-only /etc
      ln -sfn bin "$dir/usr/sbin" && ln -sfn usr/bin "$dir/sbin" ;;
    alpine) # 3.19-3.22 hosts: /sbin/iptables -> xtables-nft-multi
      mkdir -p "$dir/sbin" "$dir/usr/sbin" ;;
    nixos) # two generations of the system profile, one per backend
      mkdir -p "$dir/nix/store"
      for v in iptables ip6tables; do
        mkdir -p "$dir/nix/store/n1-iptables-1.8.11/bin" "$dir/nix/store/l1-iptables-legacy-1.8.11/bin"
        ln -sfn xtables-nft-multi "$dir/nix/store/n1-iptables-1.8.11/bin/$v"
        ln -sfn xtables-legacy-multi "$dir/nix/store/l1-iptables-legacy-1.8.11/bin/$v"
        mkdir -p "$dir/nix/store/n2-system-path/bin" "$dir/nix/store/l2-system-path/bin"
        ln -sfn "/nix/store/n1-iptables-1.8.11/bin/$v" "$dir/nix/store/n2-system-path/bin/$v"
        ln -sfn "/nix/store/l1-iptables-legacy-1.8.11/bin/$v" "$dir/nix/store/l2-system-path/bin/$v"
      done
      mkdir -p "$dir/nix/store/n3-nixos-system" "$dir/nix/store/l3-nixos-system"
      ln -sfn /nix/store/n2-system-path "$dir/nix/store/n3-nixos-system/sw"
      ln -sfn /nix/store/l2-system-path "$dir/nix/store/l3-nixos-system/sw" ;;
    k3s) # the bundled binaries of one k3s data directory, reached through `current`
      mkdir -p "$dir/var/lib/rancher/k3s/data/3f2a9c/bin/aux"
      ln -sfn /var/lib/rancher/k3s/data/3f2a9c "$dir/var/lib/rancher/k3s/data/current" ;;
    *) echo "unknown layout '$layout'" >&2; return 1 ;;
  esac
  layout_choose "$dir" "$layout" "$mode"
}

layout_choose() {
  local dir="$1" layout="$2" mode="$3" v
  case "$mode" in nft|legacy) ;; *) echo "layout_choose: mode '$mode'" >&2; return 1 ;; esac
  for v in iptables ip6tables; do
    case "$layout" in
      debian) swap_link "/usr/sbin/$v-$mode" "$dir/etc/alternatives/$v" ;;
      fedora) swap_link "/usr/bin/$v-$mode" "$dir/etc/alternatives/$v" ;;
      flatcar|bottlerocket) swap_link "xtables-$mode-multi" "$dir/usr/sbin/$v" ;;
      talos) swap_link "xtables-$mode-multi" "$dir/usr/bin/$v" ;;
      alpine) swap_link "xtables-$mode-multi" "$dir/sbin/$v" ;;
      k3s) swap_link "xtables-$mode-multi" "$dir/var/lib/rancher/k3s/data/3f2a9c/bin/aux/$v" ;; # xtables-set-mode.sh
      nixos) ;;
    esac
  done
  if [[ "$layout" == nixos ]]; then
    if [[ "$mode" == nft ]]; then v=n3; else v=l3; fi
    swap_link "/nix/store/$v-nixos-system" "$dir/run/current-system"
  fi
}
