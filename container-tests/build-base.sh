#!/usr/bin/env bash
# Build (or find in the cache) the base images of the container-test matrix.
#
#   container-tests/build-base.sh [FLAVOUR...]     (default: all flavours)
#
# Prints one line per flavour: "FLAVOUR IMAGE". Flavours: bullseye, bookworm,
# trixie (Debian with the iptables package) and distroless (no package manager,
# no alternatives system: the iptables binaries, their libraries and a static
# busybox for the test script). Besides the matrix's flavours, these names
# give images of their own:
#   distroless-src  the Debian image the distroless one is cut from (handed
#                   into a docker-in-docker engine along with it)
#   dind            bookworm with Debian's docker.io and fuse-overlayfs: the
#                   engine container-tests/dind.sh runs the matrix in, and the
#                   real iptables client of scenario 9 (Docker's engine)
#   nonroot         bookworm with iptables and libcap2-bin, for backends with
#                   file capabilities (scenario 10)
#   ipset           bookworm with iptables, ipset, iproute2 and ping: the
#                   Calico-like upgrade of scenario 15 (pods, sets)
#   clients         bookworm with the real clients of container-tests/clients.sh
#                   (ufw, firewalld, fail2ban, wg-quick, ferm, podman with
#                   netavark, netfilter-persistent) and what runs them
#   alpine-3.22, alpine-3.23, fedora-42, ubi-9, wolfi
#                   bookworm laid out as that distribution lays out iptables,
#                   with a stub of its package manager (distro-sim.sh), for
#                   the recipes of README.md and docs/images/ (distro-recipes.sh, scenario 13)
#
# IPTW_BASE_SOURCE selects where the Debian root file systems come from:
#   local (default)  mmdebstrap from this machine's configured apt sources,
#                    then `docker import`; no registry is contacted.
#   pull             `FROM ${IPTW_DEBIAN_IMAGE:-debian}:SUITE` plus apt-get,
#                    for docker-in-docker CI that can pull images.
# Images are tagged with a content key of their recipe, so an unchanged recipe
# is never rebuilt, and also by name alone (iptables-wrapper-base:bookworm,
# :bullseye, :trixie, :distroless, :distroless-src, :dind, :nonroot), the
# newest build of each, so that the recipes (README.md, docs/images/) can be built offline
# from them (`FROM iptables-wrapper-base:bookworm` for `FROM
# debian:bookworm-slim`: minbase with iptables, no registry).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BASE_SOURCE="${IPTW_BASE_SOURCE:-local}"
DEBIAN_IMAGE="${IPTW_DEBIAN_IMAGE:-debian}"

# How `docker import` completes an imported root file system into an image.
IMPORT_CHANGES=(--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
  --change 'CMD ["/bin/bash"]')

# Packages of each Debian flavour. minbase already has bash, coreutils, grep
# and sed, which is all the test script needs besides iptables.
DEBIAN_PACKAGES=(iptables)
# The distroless image is cut out of a Debian root that also has busybox.
DISTROLESS_SRC_PACKAGES=(iptables busybox-static)
# The docker-in-docker engine: dockerd (with containerd and runc), its
# iptables, and fuse-overlayfs for a storage driver faster than vfs.
DIND_SUITE=bookworm
DIND_PACKAGES=(docker.io iptables fuse-overlayfs)
# The Calico-like upgrade (scenario 15): its sets, its pods' network
# namespaces and veth pairs, and ping through them.
IPSET_PACKAGES=(iptables ipset iproute2 iputils-ping)
# The real clients (container-tests/clients.sh), each from Debian's own
# packages, and what the suite needs to run them: dbus for firewalld,
# wireguard-go for wg-quick (the kernel may lack WireGuard), podman's runtime
# and its netavark with aardvark-dns, busybox-static for podman's one image,
# nftables (wg-quick and fail2ban look for nft), strace to see what each runs.
CLIENTS_SUITE=bookworm
CLIENTS_PACKAGES=(iptables ufw firewalld dbus fail2ban wireguard-tools wireguard-go
  ferm podman netavark aardvark-dns crun conmon catatonit busybox-static
  nftables iproute2 procps strace)

# prune_older NAME KEEP: remove the images of NAME built from older recipes.
prune_older() {
  docker images --format '{{.Repository}}:{{.Tag}}' "$BASE_REPO" \
    | grep "^$BASE_REPO:$1-[0-9a-f]*\$" | grep -vxF "$2" \
    | xargs -r docker rmi >/dev/null 2>&1 || true
}

# tag_by_name NAME TAG: also tag TAG as $BASE_REPO:NAME (the name alone,
# which always names the newest build of NAME's recipe).
tag_by_name() {
  docker tag "$2" "$BASE_REPO:$1"
}

# ensure_mmdebstrap: install mmdebstrap from the machine's Debian packages
# when it is missing (a fresh CI machine), where we may.
ensure_mmdebstrap() {
  command -v mmdebstrap >/dev/null && return
  [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null \
    || die "mmdebstrap is missing: install it (Debian package mmdebstrap) or use IPTW_BASE_SOURCE=pull"
  bash "$REPO_DIR/scripts/apt-install.sh" build-base.sh mmdebstrap
}

# debian_image NAME SUITE PACKAGE...: print the image NAME of SUITE with
# PACKAGEs, building it first unless the content-keyed tag exists.
debian_image() {
  local name="$1" suite="$2"; shift 2
  local packages; packages="$(IFS=,; echo "$*")"
  local key
  if [[ "$BASE_SOURCE" == pull ]]; then
    key="$(content_key pull "$DEBIAN_IMAGE" "$suite" "$packages" "$CT_DIR/debian-pull.Dockerfile")"
  else
    key="$(content_key local "$suite" "$packages" "$CT_DIR/mkrootfs.sh" "${IMPORT_CHANGES[@]}")"
  fi
  local tag="$BASE_REPO:$name-$key"
  if image_exists "$tag"; then
    log "cached: $tag"
  elif [[ "$BASE_SOURCE" == pull ]]; then
    log "building $tag from $DEBIAN_IMAGE:$suite (+ $packages)"
    quietly docker build --force-rm -t "$tag" -f "$CT_DIR/debian-pull.Dockerfile" \
      --build-arg "BASE=$DEBIAN_IMAGE:$suite" --build-arg "PACKAGES=$*" \
      "$CT_DIR"
  else
    ensure_mmdebstrap
    local mirror; mirror="$(debian_mirror)"
    check_suite_reachable "$mirror" "$suite"
    log "building $tag with mmdebstrap ($suite + $packages)"
    # Imported untagged and tagged only when mmdebstrap succeeded: a failed
    # build would otherwise leave an empty image under the cached tag.
    local id
    id="$("$CT_DIR/mkrootfs.sh" "$mirror" "$suite" "$packages" | docker import "${IMPORT_CHANGES[@]}" -)" \
      || { [[ -z "${id:-}" ]] || docker rmi "$id" >/dev/null 2>&1 || true; die "building $tag failed"; }
    docker tag "$id" "$tag"
  fi
  prune_older "$name" "$tag"
  tag_by_name "$name" "$tag"
  printf '%s\n' "$tag"
}

# distroless_image: print the distroless-style image, built from a Debian
# image with iptables and busybox-static by distroless.Dockerfile.
distroless_image() {
  local src tag
  src="$(debian_image distroless-src "$DISTROLESS_SUITE" "${DISTROLESS_SRC_PACKAGES[@]}")"
  tag="$BASE_REPO:distroless-$(content_key "$src" \
    "$CT_DIR/distroless.Dockerfile" "$CT_DIR/distroless-collect.sh")"
  if image_exists "$tag"; then
    log "cached: $tag"
  else
    log "building $tag from $src"
    quietly docker build --force-rm -t "$tag" -f "$CT_DIR/distroless.Dockerfile" \
      --build-arg "SRC=$src" "$CT_DIR"
  fi
  prune_older distroless "$tag"
  tag_by_name distroless "$tag"
  printf '%s\n' "$tag"
}

# sim_image DISTRO: print the simulated DISTRO image, built from bookworm
# by distro-sim.Dockerfile.
sim_image() {
  local src tag
  src="$(debian_image bookworm bookworm "${DEBIAN_PACKAGES[@]}")"
  tag="$BASE_REPO:$1-$(content_key "$src" "$1" "$CT_DIR/distro-sim.Dockerfile" "$CT_DIR/distro-sim.sh")"
  if image_exists "$tag"; then
    log "cached: $tag"
  else
    log "building $tag from $src (simulated $1)"
    quietly docker build --force-rm -t "$tag" -f "$CT_DIR/distro-sim.Dockerfile" \
      --build-arg "SRC=$src" --build-arg "DISTRO=$1" "$CT_DIR"
  fi
  prune_older "$1" "$tag"
  printf '%s\n' "$tag"
}

main() {
  local flavours=("$@") flavour image
  [[ ${#flavours[@]} -gt 0 ]] || flavours=("${ALL_FLAVOURS[@]}")
  for flavour in "${flavours[@]}"; do
    case "$flavour" in
      bullseye|bookworm|trixie) image="$(debian_image "$flavour" "$flavour" "${DEBIAN_PACKAGES[@]}")" ;;
      distroless) image="$(distroless_image)" ;;
      distroless-src) image="$(debian_image distroless-src "$DISTROLESS_SUITE" "${DISTROLESS_SRC_PACKAGES[@]}")" ;;
      dind) image="$(debian_image dind "$DIND_SUITE" "${DIND_PACKAGES[@]}")" ;;
      nonroot) image="$(debian_image nonroot bookworm iptables libcap2-bin)" ;;
      ipset) image="$(debian_image ipset bookworm "${IPSET_PACKAGES[@]}")" ;;
      clients) image="$(debian_image clients "$CLIENTS_SUITE" "${CLIENTS_PACKAGES[@]}")" ;;
      alpine-3.22|alpine-3.23|fedora-42|ubi-9|wolfi) image="$(sim_image "$flavour")" ;;
      *) die "unknown flavour '$flavour' (known: ${ALL_FLAVOURS[*]}; images of their own: distroless-src, dind, nonroot, ipset, clients)" ;;
    esac
    printf '%s %s\n' "$flavour" "$image"
  done
}

main "$@"
