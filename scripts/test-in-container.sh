#!/usr/bin/env bash
# The whole test suite (scripts/test.sh) inside a container, for a machine
# that must stay as it is: every package, binfmt-free qemu, etcd and its
# user, venv, Rust target, cache and image that test.sh installs or builds
# goes into that container and its own Docker engine (docker-in-docker, as
# container-tests/dind.sh runs the matrix), and goes with it.
#
#   scripts/test-in-container.sh [VAR=VALUE...]    (passed to test.sh, e.g. IPTW_KUBE_PROXY=0)
#
# Needs on this machine: a Docker engine, and a Rust toolchain installed with
# rustup with both musl targets, rustfmt and clippy (`rustc --print sysroot`
# is mounted read-only into the container: no toolchain is downloaded).
# What it leaves here:
#   - the image iptables-wrapper-suite:KEY (the dind base below plus gcc,
#     libc6-dev, python3-venv, git, ca-certificates and this machine's own
#     certificate authorities from /usr/local/share/ca-certificates: what
#     test.sh takes for granted), kept as a cache (`docker rmi` removes it);
#   - the base image iptables-wrapper-base:dind (container-tests/build-base.sh
#     dind: Debian bookworm with docker.io, from this machine's apt sources by
#     mmdebstrap, which build-base.sh installs when missing; with
#     IPTW_BASE_SOURCE=pull it starts from ${IPTW_DEBIAN_IMAGE:-debian}:bookworm
#     instead and installs nothing here);
#   - nothing else: the repository is copied in (a read-only mount, copied
#     to /src without target/ and dist/), the container and its volumes
#     (the inner engine's images, cargo's downloads, the kube-proxy build
#     cache, /src and /tmp) are removed at the end.
# /src and /tmp are volumes, on this machine's own file system, not on the
# container's root: on an engine whose storage driver is fuse-overlayfs a
# rename over an existing name there is not atomic, and the test of
# `install` beside concurrent callers saw the name missing.
# The container gets the rights a daemon needs (lib.sh's DAEMON_PRIVILEGE:
# every capability the engine can grant, no seccomp or AppArmor profile, the
# cgroup tree) and the default network (apt, crates.io and PyPI are reached
# from inside). binfmt_misc is not mounted in it, and update-binfmts is
# diverted to a no-op there, so qemu-user-static registers nothing in this
# machine's kernel (qemu-smoke.sh runs qemu-aarch64-static by name).
# IPTW_SUITE_RUN_OPTS: more docker run options (e.g. --cpu-shares 256 on a
# shared machine). Exit status: test.sh's. Prints the time taken.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../container-tests/lib.sh"

for arg in "$@"; do
  [[ "$arg" == [A-Z_]*=* ]] || die "test-in-container.sh takes only VAR=VALUE arguments for test.sh, not '$arg'"
done
docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed)"
command -v rustc >/dev/null || die "rustc is needed: install a Rust toolchain with rustup first"
SYSROOT="$(rustc --print sysroot)"
for tool in cargo cargo-fmt cargo-clippy; do
  [[ -x "$SYSROOT/bin/$tool" ]] || die "$SYSROOT/bin/$tool is missing (rustup component add rustfmt clippy)"
done
START=$SECONDS

DIND_BASE="$("$CT_DIR/build-base.sh" dind | awk '{print $2}')"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/iptw-suite.XXXXXX")"
CONTAINER="iptw-suite-$$-$(date +%s)"
cleanup() {
  docker rm -fv "$CONTAINER" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The certificate authorities this machine adds to Debian's (a proxy it
# trusts), trusted inside too: by apt, cargo, and pip (PIP_CERT).
mkdir -p "$WORK/ca"
cp /usr/local/share/ca-certificates/*.crt "$WORK/ca/" 2>/dev/null || true
cat >"$WORK/Dockerfile" <<EOF
FROM $DIND_BASE
COPY ca/ /usr/local/share/ca-certificates/
RUN dpkg-divert --local --rename --add /usr/sbin/update-binfmts \\
 && ln -s /bin/true /usr/sbin/update-binfmts \\
 && apt-get update \\
 && apt-get install -y --no-install-recommends gcc libc6-dev python3-venv git ca-certificates \\
 && update-ca-certificates \\
 && rm -rf /var/lib/apt/lists/*
ENV PATH=/opt/rust/bin:/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
EOF
SUITE_IMAGE="iptables-wrapper-suite:$(content_key "$WORK/Dockerfile" "$WORK"/ca/*)"
if ! docker image inspect "$SUITE_IMAGE" >/dev/null 2>&1; then
  log "building $SUITE_IMAGE"
  quietly docker build --force-rm -t "$SUITE_IMAGE" "$WORK"
fi
PREPARED=$SECONDS

# Inside: an engine of its own on the first storage driver that starts,
# the repository copied in, then test.sh.
inner='set -euo pipefail
for driver in overlay2 fuse-overlayfs vfs; do
  dockerd --storage-driver="$driver" >/var/log/dockerd.log 2>&1 &
  for _ in $(seq 30); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 && { echo "test-in-container: inner engine on $driver"; break; }
  kill %1 2>/dev/null || true; wait || true
done
docker info >/dev/null 2>&1 || { tail -5 /var/log/dockerd.log; echo "test-in-container: no storage driver worked" >&2; exit 1; }
mkdir -p /src
tar -C /repo --exclude=./target --exclude=./dist --exclude=./container-tests/.cache -cf - . | tar -C /src -xf -
cd /src
env "$@" bash scripts/test.sh'
# /dev/fuse for fuse-overlayfs; /dev/net/tun for the clients scenario's
# wireguard-go, whose containers the inner engine gives it; /dev/kmsg for
# the kubelets of kube-nodes.sh (kubelet 1.20 does not start without its
# OOM watcher, which reads it).
device=()
[[ -e /dev/fuse ]] && device+=(--device /dev/fuse)
[[ -e /dev/net/tun ]] && device+=(--device /dev/net/tun)
[[ -e /dev/kmsg ]] && device+=(--device /dev/kmsg)
# /proc/sys writable: the real kube-proxy sets route_localnet in the
# namespaces kube-proxy.sh makes (read-only there, it stops at once).
device+=(--security-opt systempaths=unconfined)
log "running scripts/test.sh in $CONTAINER ($SUITE_IMAGE)"
rc=0
read -r -a run_opts <<<"${IPTW_SUITE_RUN_OPTS:-}"
docker run --name "$CONTAINER" "${DAEMON_PRIVILEGE[@]}" "${device[@]}" "${run_opts[@]}" \
  -v /var/lib/docker -v /root/.cargo -v /var/cache/iptables-wrapper-kube-proxy -v /src -v /tmp \
  -v "$SYSROOT:/opt/rust:ro" -v "$REPO_DIR:/repo:ro" \
  "$SUITE_IMAGE" bash -c "$inner" inner "$@" &
# In the background, so that an interrupt removes the container at once.
wait $! || rc=$?
echo "test-in-container: exit $rc; time: image $((PREPARED - START))s, suite $((SECONDS - PREPARED))s, total $((SECONDS - START))s"
exit "$rc"
