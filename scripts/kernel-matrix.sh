#!/usr/bin/env bash
# The kernel matrix: the wrapper against real Debian kernels of six
# architectures, each booted under qemu-system full emulation (TCG; no KVM
# needed), with the checks of container-tests/kernels/guest/iptw/checks.sh
# and the cross-built kernel-facing integration tests inside. Two guests
# (amd64-6.12-nolegacy, arm64-6.12-nolegacy; "removed" in guests.txt's
# last column) boot trixie's 6.12 without the legacy x_tables modules in
# their initramfs, as a kernel built without CONFIG_NETFILTER_XTABLES_LEGACY
# (6.17 and later) offers userspace, and run the checks for such a kernel
# instead (guest/iptw/without-legacy.sh; expected values:
# container-tests/kernels/expected-without-legacy.txt).
#
#   scripts/kernel-matrix.sh [GUEST...]     (default: every guest of
#                                            container-tests/kernels/guests.txt)
#   scripts/kernel-matrix.sh --fetch [GUEST...]
#                                           step 1 only: what it installs, and
#                                           the cache (scripts/test.sh runs it
#                                           beside the steps before the matrix)
#
# Prints one "PASS GUEST: CHECK" or "FAIL GUEST: CHECK: ..." line per guest
# and check (expected values: container-tests/kernels/expected.txt, or
# expected-without-legacy.txt for the guests without legacy x_tables), then
# each guest's times; exit 1 if any failed.
#
# Steps, per guest:
# 1. The cache (IPTW_KERNEL_CACHE, default /var/cache/iptables-wrapper-kernels,
#    outside the repository): the kernel and userland debs, fetched once by
#    apt with a private configuration and pinned with their sha256
#    (container-tests/kernels/fetch.sh).
# 2. The wrapper for its architecture (dist/iptables-wrapper-ARCH, from
#    scripts/build-static.sh --all; only the architectures of the guests
#    run are needed) and the test binaries GUEST_TESTS names for the
#    guests run (of tests/kernel_evidence.rs, kernel_legacy.rs, kernel_nft.rs,
#    stale_safety.rs and count_cache.rs), cross-built by cargo for their
#    guests' architectures (profile kernel-matrix: unoptimised, no debug
#    information; the wrapper they run goes to the path cargo built it at).
# 3. Kernel and initramfs, offline from the cache
#    (container-tests/kernels/build-initramfs.sh; without the legacy
#    x_tables modules where guests.txt says "removed"), kept under a key of
#    everything that goes in: built again only when something changed.
# 4. Boot under qemu-system-ARCH (-smp 1, 1 GiB), IPTW_KERNEL_JOBS guests
#    at once (2), in the order of guests.txt, which lists the longest
#    first (the short ones fill in at the end); the console goes to target/kernel-matrix/GUEST.console,
#    and only its checksummed lines count (container-tests/kernels/guest/init).
#
# Installs what it needs (scripts/apt-install.sh): qemu-system-x86,
# qemu-system-arm, qemu-system-ppc, qemu-system-misc, kmod (depmod), cpio,
# debian-archive-keyring.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
KDIR="$REPO/container-tests/kernels"
CACHE="${IPTW_KERNEL_CACHE:-/var/cache/iptables-wrapper-kernels}"
JOBS="${IPTW_KERNEL_JOBS:-2}"
OUT="$REPO/target/kernel-matrix"
TESTS=(kernel_evidence kernel_legacy kernel_nft stale_safety count_cache)
# The integration tests each guest runs (the other guests run none): the
# kernel-facing three on the oldest kernel (5.10, no netns cookie), on
# 32-bit armv7 (the x_tables walk of its own layout) and on big-endian
# s390x; the removal's safety tests on 5.10 (the oldest kernel's lock
# and generation) and on amd64 6.12 (trixie's iptables 1.8.11 and its
# save tool; every guest runs the stale checks), the count
# cache's on s390x only (its file and the cookie in the other byte order;
# every guest but 5.10 runs the count cache check). Each architecture
# costs a cross build of the crate and its test dependencies, each test
# minutes of emulation on armv7 and s390x; docs/testing.md says what the
# others run instead.
declare -A GUEST_TESTS=(
    [amd64-5.10]="kernel_evidence kernel_legacy kernel_nft stale_safety"
    [armv7-6.12]="kernel_evidence kernel_legacy kernel_nft"
    [s390x-6.12]="kernel_evidence kernel_legacy kernel_nft count_cache"
    [amd64-6.12]="stale_safety"
)
# A guest that has not powered off by then has hung.
BOOT_TIMEOUT="${IPTW_KERNEL_TIMEOUT:-900}"

log() { echo "kernel-matrix: $*" >&2; }

# guest_line NAME: the guest's line of guests.txt.
guest_line() { awk -v n="$1" '$1 == n' "$KDIR/guests.txt"; }

# qemu_command DEBIAN-ARCH KERNEL INITRD TESTS LEGACY: sets QEMU to the
# command booting it; on the kernel's command line, TESTS (the names,
# comma separated, or "none") says which integration tests the guest runs,
# LEGACY ("present" or "removed") which checks.
qemu_command() {
    local arch="$1" append="quiet loglevel=1 panic=-1 rdinit=/init iptw.tests=$4 iptw.legacy=$5"
    local common=(-m 1024 -smp 1 -nographic -no-reboot -nic none -kernel "$2" -initrd "$3")
    case "$arch" in
        amd64) QEMU=(qemu-system-x86_64 -M pc "${common[@]}" -append "console=ttyS0 $append") ;;
        arm64) QEMU=(qemu-system-aarch64 -M virt -cpu cortex-a57 "${common[@]}" -append "console=ttyAMA0 $append") ;;
        armhf) QEMU=(qemu-system-arm -M virt -cpu cortex-a15 "${common[@]}" -append "console=ttyAMA0 $append") ;;
        ppc64el) QEMU=(qemu-system-ppc64 -M pseries,x-vof=on -cpu power9 -vga none "${common[@]}" -append "console=hvc0 $append") ;;
        s390x) QEMU=(qemu-system-s390x -M s390-ccw-virtio "${common[@]}" -append "console=ttysclp0 $append") ;;
        riscv64) QEMU=(qemu-system-riscv64 -M virt "${common[@]}" -append "console=ttyS0 $append") ;;
        *) log "no qemu command for $arch"; return 1 ;;
    esac
}

# test_binaries ARCH PAYLOAD GUEST...: cross-builds the integration tests
# the GUESTs of ARCH run and lays them out under PAYLOAD (/iptw/tests/NAME,
# and the wrapper they run at the path cargo built it at).
test_binaries() {
    local arch="$1" payload="$2" target json guest more wanted=()
    shift 2
    target="$(bash scripts/static-target.sh "$arch")"
    mkdir -p "$payload/iptw/tests"
    printf '%s\n' "${TESTS[@]}" >"$payload/iptw/tests.list"
    for guest in "$@"; do
        [[ -v "GUEST_TESTS[$guest]" ]] || continue
        [[ "$(guest_line "$guest" | awk '{print $6}')" == "$arch" ]] || continue
        read -ra more <<<"${GUEST_TESTS[$guest]}"
        wanted+=("${more[@]}")
    done
    ((${#wanted[@]})) || return 0
    mapfile -t wanted < <(printf '%s\n' "${wanted[@]}" | sort -u)
    local build=(cargo test --no-run --profile kernel-matrix --target "$target" "${wanted[@]/#/--test=}")
    json="$(nice "${build[@]}" --quiet --message-format=json 2>/dev/null)" || { "${build[@]}" >&2; return 1; }
    local name path
    for name in "${wanted[@]}"; do
        path="$(grep -F "\"name\":\"$name\"" <<<"$json" | grep -F '"kind":["test"]' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n1)"
        [[ -x "$path" ]] || { log "cargo built no test binary for $name ($target)"; return 1; }
        cp "$path" "$payload/iptw/tests/$name"
    done
    local wrapper="${CARGO_TARGET_DIR:-$REPO/target}/$target/kernel-matrix/iptables-wrapper"
    install -D -m 0755 "$wrapper" "$payload$wrapper"
}

# fetch NAME: fills the cache with what guest NAME boots (step 1).
fetch() {
    local name="$1" arch userland_suite kernel_suite kernel_meta
    read -r _ arch userland_suite kernel_suite kernel_meta _ < <(guest_line "$name")
    bash "$KDIR/fetch.sh" "$name" "$arch" "$userland_suite" "$kernel_suite" "$kernel_meta" "$CACHE/$name"
}

# prepare NAME: fetches and builds what guest NAME boots; prints its image directory.
prepare() {
    local name="$1" wrapper_arch legacy
    read -r _ _ _ _ _ wrapper_arch legacy < <(guest_line "$name")
    fetch "$name"
    local wrapper="$REPO/dist/iptables-wrapper-$wrapper_arch"
    [[ -x "$wrapper" ]] || { log "$wrapper is missing: run scripts/build-static.sh --all first"; return 1; }
    local payload="$OUT/payload-$wrapper_arch"
    local key
    key="$( (echo "$legacy"; cat "$CACHE/$name/manifest" "$wrapper" "$KDIR/build-initramfs.sh"
        find "$payload" -type f | LC_ALL=C sort | xargs cat) | sha256sum | cut -c1-16)"
    local image="$CACHE/$name/image-$key"
    if [[ ! -s "$image/initrd.cpio" ]]; then
        rm -rf "$CACHE/$name"/image-*
        bash "$KDIR/build-initramfs.sh" "$CACHE/$name" "$wrapper" "$payload" "$image" "$legacy" || return 1
    fi
    echo "$image"
}

# boot NAME IMAGE: boots it; the console to OUT/NAME.console.
boot() {
    local name="$1" image="$2" arch legacy
    read -r _ arch _ _ _ _ legacy < <(guest_line "$name")
    local QEMU
    local tests="${GUEST_TESTS[$name]:-none}"
    tests="${tests// /,}"
    qemu_command "$arch" "$image/kernel" "$image/initrd.cpio" "$tests" "$legacy"
    timeout "$BOOT_TIMEOUT" "${QEMU[@]}" </dev/null >"$OUT/$name.console" 2>&1 \
        || log "$name: qemu exited $? (timeout: ${BOOT_TIMEOUT}s)"
}

# expected NAME: the file of the checks guest NAME must print.
expected() {
    if [[ "$(guest_line "$1" | awk '{print $7}')" == removed ]]; then
        echo "$KDIR/expected-without-legacy.txt"
    else
        echo "$KDIR/expected.txt"
    fi
}

# judge NAME: PASS/FAIL lines from its console; returns 1 on any FAIL.
judge() {
    local name="$1" fails=0 crc text lines=0 end="" expected
    expected="$(expected "$name")"
    local got="$OUT/$name.checks"
    : >"$got"
    while IFS= read -r line; do
        line="${line%$'\r'}"
        # Anywhere in the line: the kernel's own output may precede it.
        [[ "$line" =~ IPTW\ ([0-9]+)\ (.*)$ ]] || continue
        crc="${BASH_REMATCH[1]}" text="${BASH_REMATCH[2]}"
        [[ "$(printf '%s' "$text" | cksum | cut -d' ' -f1)" == "$crc" ]] || { echo "FAIL $name: a console line failed its checksum: $text"; fails=1; continue; }
        if [[ "$text" =~ ^end\ ([0-9]+)$ ]]; then end="${BASH_REMATCH[1]}"; continue; fi
        lines=$((lines + 1))
        [[ "$text" == "check "* ]] && printf '%s\n' "${text#check }" >>"$got"
    done <"$OUT/$name.console"
    [[ -n "$end" && "$end" == "$lines" ]] || { echo "FAIL $name: the guest's output is incomplete ($lines lines, its end line says ${end:-nothing}; see $OUT/$name.console)"; fails=1; }
    local check want have
    while IFS= read -r check; do
        want="$(awk -v c="$check@$name" 'index($0, c "|") == 1 { sub(/^[^|]*\|/, ""); print; f = 1; exit } END { exit !f }' "$expected" \
            || awk -v c="$check" 'index($0, c "|") == 1 { sub(/^[^|]*\|/, ""); print; exit }' "$expected")"
        have="$(awk -v c="$check" 'index($0, c "|") == 1 { sub(/^[^|]*\|/, ""); print; exit }' "$got")"
        if ! grep -qF "$check|" "$got"; then
            echo "FAIL $name: $check: the guest did not report it"; fails=1
        elif [[ "$have" == "$want" ]]; then
            echo "PASS $name: $check"
        else
            echo "FAIL $name: $check: got '$have', expected '$want'"; fails=1
        fi
    done < <(grep -v '^#' "$expected" | cut -d'|' -f1 | sed 's/@.*//' | awk '!seen[$0]++')
    while IFS= read -r check; do
        grep -v '^#' "$expected" | cut -d'|' -f1 | sed 's/@.*//' | grep -qxF "$check" \
            || { echo "FAIL $name: $check: reported but not in ${expected#"$REPO/"}"; fails=1; }
    done < <(cut -d'|' -f1 "$got")
    return "$fails"
}

# one NAME: prepare, boot and judge one guest; its lines to OUT/NAME.result.
one() {
    local name="$1" start=$SECONDS image rc=0
    image="$(prepare "$name")" || { echo "FAIL $name: could not build its image (see above)" >"$OUT/$name.result"; return 1; }
    local built=$((SECONDS - start))
    boot "$name" "$image"
    judge "$name" >"$OUT/$name.result" || rc=1
    echo "$name: $(cat "$image/../manifest" | head -n1 | cut -d_ -f1,2), image ${built}s, boot and checks $((SECONDS - start - built))s" >"$OUT/$name.time"
    return "$rc"
}

if [[ "${1:-}" == --one ]]; then
    one "$2"
    exit
fi

fetch_only=0
if [[ "${1:-}" == --fetch ]]; then
    fetch_only=1
    shift
fi
guests=("$@")
((${#guests[@]})) || mapfile -t guests < <(grep -v '^#' "$KDIR/guests.txt" | awk 'NF {print $1}')
for name in "${guests[@]}"; do
    [[ -n "$(guest_line "$name")" ]] || { log "unknown guest '$name' (known: $(grep -v '^#' "$KDIR/guests.txt" | awk 'NF {print $1}' | paste -sd' '))"; exit 2; }
done
[[ $EUID -eq 0 ]] || { log "needs root (unpacking the guests' roots as root's files, apt's private configuration)"; exit 1; }
bash scripts/apt-install.sh kernel-matrix.sh qemu-system-x86 qemu-system-arm qemu-system-ppc qemu-system-misc \
    kmod cpio debian-archive-keyring
mkdir -p "$OUT" "$CACHE"
if ((fetch_only)); then
    for name in "${guests[@]}"; do fetch "$name"; done
    exit 0
fi
start=$SECONDS
# The test binaries of each architecture first (cargo builds one at a time).
for arch in $(for name in "${guests[@]}"; do guest_line "$name" | awk '{print $6}'; done | sort -u); do
    rm -rf "$OUT/payload-$arch"
    mkdir -p "$OUT/payload-$arch"
    cp -a "$KDIR/guest/." "$OUT/payload-$arch/"
    test_binaries "$arch" "$OUT/payload-$arch" "${guests[@]}" || { log "cross-building the integration tests for $arch failed"; exit 1; }
done
log "test binaries: $((SECONDS - start))s"
rm -f "$OUT"/*.result "$OUT"/*.time
printf '%s\n' "${guests[@]}" | xargs -P "$JOBS" -I{} bash "$0" --one {} || true
failed=0
for name in "${guests[@]}"; do
    cat "$OUT/$name.result" 2>/dev/null || { echo "FAIL $name: no result"; failed=1; }
    grep -q '^FAIL' "$OUT/$name.result" 2>/dev/null && failed=1
done
for name in "${guests[@]}"; do cat "$OUT/$name.time" 2>/dev/null || true; done
echo "kernel matrix: ${#guests[@]} guests in $((SECONDS - start))s, $(cat "$OUT"/*.result 2>/dev/null | grep -c '^PASS') checks passed, $(cat "$OUT"/*.result 2>/dev/null | grep -c '^FAIL') failed"
exit "$failed"
