#!/usr/bin/env bash
# Installs what the test suite (scripts/test.sh) needs on a Debian-like
# machine, on top of a Rust toolchain installed with rustup (README.md,
# "Two commands"):
#   - Debian packages (scripts/apt-install.sh: only these, waiting for
#     another apt's lock): iptables (both backends) and nftables, util-linux
#     (unshare), ipset (stale --remove's proof reads the sets rules name,
#     and the tests make some), strace (a test checks what a call looks at), libcap2-bin
#     (setcap: the non-root tests give backends file capabilities),
#     qemu-user-static on x86_64 (the cross binaries' smoke and unit tests,
#     scripts/qemu-smoke.sh and scripts/qemu-lib-tests.sh), the cross gcc
#     and libc of armv7, ppc64le, riscv64 and s390x (their static glibc
#     builds link with it), python3-venv where python3 cannot make a venv,
#     prometheus (promtool: the alert rules' tests), and conntrack, ipset,
#     ebtables and arptables, which a node usually has (kube-proxy runs
#     conntrack from its syncs where it is installed: the suite passes on a
#     machine set up like a node, not only on a bare one). arptables is
#     looked for as arptables-legacy, the package's own: iptables' package
#     already links /usr/sbin/arptables to arptables-nft (an alternative at
#     priority 20, above the package's arptables-legacy at 10, so
#     installing it leaves the link where it was);
#   - the Rust targets of all six shipped architectures (.cargo/config.toml
#     builds for x86_64 musl by default, so `cargo test` needs it;
#     scripts/build-static.sh --all all six), rustfmt and clippy (the style
#     checks);
#   - kubernetes-validate from PyPI, pinned, in a venv of its own under
#     target/dev-tools (the example DaemonSet's schema check,
#     scripts/check-daemonset.sh); IPTW_DEV_TOOLS moves it.
# scripts/detect.sh needs only a part of this and installs that itself.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBERNETES_VALIDATE_VERSION=1.37.0

# has_tool NAME: NAME is a command here, /usr/sbin and /sbin included.
has_tool() { PATH="$PATH:/usr/sbin:/sbin" command -v "$1" >/dev/null 2>&1; }

packages=()
for pair in iptables-legacy:iptables iptables-nft:iptables xtables-legacy-multi:iptables \
    xtables-nft-multi:iptables nft:nftables unshare:util-linux strace:strace promtool:prometheus \
    setcap:libcap2-bin conntrack:conntrack ipset:ipset ebtables:ebtables \
    arptables-legacy:arptables; do
    has_tool "${pair%%:*}" || packages+=("${pair#*:}")
done
if [[ "$(uname -m)" == x86_64 ]] && ! has_tool qemu-s390x-static; then packages+=(qemu-user-static); fi
for pair in arm-linux-gnueabihf-gcc:gcc-arm-linux-gnueabihf:libc6-dev-armhf-cross \
    powerpc64le-linux-gnu-gcc:gcc-powerpc64le-linux-gnu:libc6-dev-ppc64el-cross \
    riscv64-linux-gnu-gcc:gcc-riscv64-linux-gnu:libc6-dev-riscv64-cross \
    s390x-linux-gnu-gcc:gcc-s390x-linux-gnu:libc6-dev-s390x-cross; do
    IFS=: read -r gcc gcc_package libc_package <<<"$pair"
    has_tool "$gcc" || packages+=("$gcc_package" "$libc_package")
done
venv_probe=$(mktemp -d "${TMPDIR:-/tmp}/iptw-venv.XXXXXX")
python=python3
if ! python3 -m venv --without-pip "$venv_probe/v" >/dev/null 2>&1 \
    || ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
    packages+=(python3-venv)
    python=/usr/bin/python3
fi
rm -rf "$venv_probe"
if ((${#packages[@]})); then
    mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
    bash scripts/apt-install.sh install-deps.sh "${packages[@]}"
fi

command -v cargo >/dev/null && command -v rustc >/dev/null || {
    echo "install-deps.sh: cargo and rustc are needed: install a Rust toolchain with rustup first (README.md, \"Two commands\")" >&2
    exit 1
}
for arch in x86_64 aarch64 armv7 ppc64le riscv64 s390x; do
    bash scripts/ensure-target.sh "$(bash scripts/static-target.sh "$arch")"
done
for component in rustfmt clippy; do
    cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1 && continue
    if ! command -v rustup >/dev/null || ! timeout 300 rustup component add "$component" >&2; then
        echo "install-deps.sh: cargo ${component/rustfmt/fmt} is missing and rustup could not add it (rustup component add $component)" >&2
        exit 1
    fi
done

# The schema validator, in a venv of its own (never the system's Python).
tools="${IPTW_DEV_TOOLS:-$PWD/target/dev-tools}"
venv="$tools/kubernetes-validate-$KUBERNETES_VALIDATE_VERSION"
# A venv cannot be moved (its scripts name their own path), so a complete
# one is marked by a file written last.
if [[ ! -e "$venv/installed" ]]; then
    echo "install-deps.sh: installing kubernetes-validate $KUBERNETES_VALIDATE_VERSION into $venv" >&2
    rm -rf "$venv"
    mkdir -p "$tools"
    if ! "$python" -m venv "$venv" \
        || ! "$venv/bin/pip" install --quiet --disable-pip-version-check \
            "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" >&2; then
        rm -rf "$venv"
        echo "install-deps.sh: could not install kubernetes-validate $KUBERNETES_VALIDATE_VERSION from PyPI into $venv (pip install kubernetes-validate==$KUBERNETES_VALIDATE_VERSION)" >&2
        exit 1
    fi
    echo "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" >"$venv/installed"
fi
