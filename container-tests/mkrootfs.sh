#!/usr/bin/env bash
# The recipe of the offline Debian base images: a minimal Debian root file
# system of SUITE with PACKAGES, as a tar stream on stdout, from MIRROR
# (build-base.sh passes the archive this machine's apt uses). No registry is
# contacted. build-base.sh hashes this file into the image tag, so changing
# the recipe rebuilds the images.
#
#   container-tests/mkrootfs.sh MIRROR SUITE PACKAGE[,PACKAGE...] | docker import - TAG
set -euo pipefail
MIRROR="${1:?usage: mkrootfs.sh MIRROR SUITE PACKAGES}"
SUITE="${2:?usage: mkrootfs.sh MIRROR SUITE PACKAGES}"
PACKAGES="${3:?usage: mkrootfs.sh MIRROR SUITE PACKAGES}"

# minbase brings bash, coreutils, grep and sed. Documentation and locales are
# left out: smaller images, faster imports.
exec mmdebstrap --quiet --variant=minbase --include="$PACKAGES" \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --format=tar "$SUITE" - "deb $MIRROR $SUITE main"
