#!/usr/bin/env bash
# Builds the FROM scratch image of the Dockerfile (only
# /usr/sbin/iptables-wrapper) for all six platforms as one multi-platform
# OCI image index, offline: an OCI image layout written by hand (one layer
# tar, config and manifest per platform, then the index), no registry, no
# builder, no base image. Then reads it back: every blob's digest and size,
# and in each platform's manifest the binary's ELF machine and byte order
# (readelf -h) against that platform.
#
#   scripts/oci-image.sh [DIST_DIR [OUT_DIR]]   (default: dist, dist/oci)
#
# When a Docker engine answers, the Dockerfile's own recipe is checked for the
# six as well: each platform's image built offline (TARGETARCH, the classic
# builder) holds that platform's binary, byte for byte.
#
# Push it with any OCI tool, e.g. `skopeo copy --all oci:dist/oci:latest
# docker://REPO/iptables-wrapper:TAG`, or load it into a local registry.
set -euo pipefail
cd "$(dirname "$0")/.."
DIST="${1:-dist}"
OUT="${2:-$DIST/oci}"

fail() { echo "oci-image: FAIL: $*" >&2; exit 1; }

# Docker platform, binary name, readelf's Machine and byte order.
PLATFORMS=(
    "amd64 x86_64 Advanced Micro Devices X86-64:little"
    "arm64 aarch64 AArch64:little"
    "arm/v7 armv7 ARM:little"
    "ppc64le ppc64le PowerPC64:little"
    "riscv64 riscv64 RISC-V:little"
    "s390x s390x IBM S/390:big"
)

rm -rf "$OUT"
mkdir -p "$OUT/blobs/sha256"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/iptw-oci.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# blob FILE: stores FILE as a blob; prints "DIGEST SIZE".
blob() {
    local digest size
    digest=$(sha256sum "$1" | cut -d' ' -f1)
    size=$(stat -c %s "$1")
    cp "$1" "$OUT/blobs/sha256/$digest"
    echo "sha256:$digest $size"
}

manifests=()
for line in "${PLATFORMS[@]}"; do
    read -r platform arch _ <<<"$line"
    binary="$DIST/iptables-wrapper-$arch"
    [[ -x "$binary" ]] || fail "$binary is missing (bash scripts/build-static.sh --all)"
    os_arch=${platform%/*} variant=
    [[ "$platform" == */* ]] && variant=${platform#*/}
    # The layer: usr/sbin/iptables-wrapper, root-owned, fixed time, so the
    # same binaries give the same digests.
    rm -rf "$WORK/root" && mkdir -p "$WORK/root/usr/sbin"
    cp "$binary" "$WORK/root/usr/sbin/iptables-wrapper"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$WORK/root" -cf "$WORK/layer.tar" usr
    gzip -n -9 -c "$WORK/layer.tar" >"$WORK/layer.tar.gz"
    read -r layer layer_size < <(blob "$WORK/layer.tar.gz")
    diff_id="sha256:$(sha256sum "$WORK/layer.tar" | cut -d' ' -f1)"
    variant_json=${variant:+,\"variant\":\"$variant\"}
    printf '{"architecture":"%s","os":"linux"%s,"config":{"Env":["WRAPPER_ARCH=%s"]},"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
        "$os_arch" "$variant_json" "$arch" "$diff_id" >"$WORK/config.json"
    read -r config config_size < <(blob "$WORK/config.json")
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"%s","size":%s}]}' \
        "$config" "$config_size" "$layer" "$layer_size" >"$WORK/manifest.json"
    read -r manifest manifest_size < <(blob "$WORK/manifest.json")
    manifests+=("$(printf '{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"platform":{"architecture":"%s","os":"linux"%s}}' \
        "$manifest" "$manifest_size" "$os_arch" "$variant_json")")
done
printf '{"imageLayoutVersion":"1.0.0"}' >"$OUT/oci-layout"
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s],"annotations":{"org.opencontainers.image.ref.name":"latest"}}' \
    "$(IFS=,; echo "${manifests[*]}")" >"$WORK/index.json"
read -r index index_size < <(blob "$WORK/index.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"%s","size":%s,"annotations":{"org.opencontainers.image.ref.name":"latest"}}]}' \
    "$index" "$index_size" >"$OUT/index.json"

# Read back, from the layout alone.
python3 - "$OUT" "$WORK" "${PLATFORMS[@]}" <<'PY'
import gzip, hashlib, json, os, subprocess, sys, tarfile
out, work, platforms = sys.argv[1], sys.argv[2], sys.argv[3:]
def blob(digest, size):
    data = open(os.path.join(out, "blobs", *digest.split(":")), "rb").read()
    assert len(data) == size, f"{digest}: {len(data)} bytes, the descriptor says {size}"
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest, f"{digest}: content does not match"
    return data
top = json.load(open(os.path.join(out, "index.json")))
[ref] = top["manifests"]
index = json.loads(blob(ref["digest"], ref["size"]))
assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
want = {}
for line in platforms:
    platform, arch, elf = line.split(" ", 2)
    want[platform] = (arch, elf)
seen = []
for desc in index["manifests"]:
    p = desc["platform"]
    platform = p["architecture"] + ("/" + p["variant"] if "variant" in p else "")
    manifest = json.loads(blob(desc["digest"], desc["size"]))
    config = json.loads(blob(manifest["config"]["digest"], manifest["config"]["size"]))
    assert (config["architecture"], config.get("variant")) == (p["architecture"], p.get("variant")), platform
    [layer] = manifest["layers"]
    data = gzip.decompress(blob(layer["digest"], layer["size"]))
    assert "sha256:" + hashlib.sha256(data).hexdigest() == config["rootfs"]["diff_ids"][0], f"{platform}: diff_id"
    path = os.path.join(work, "read-back")
    with tarfile.open(fileobj=__import__("io").BytesIO(data)) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
        assert names == ["usr/sbin/iptables-wrapper"], f"{platform}: layer holds {names}"
        open(path, "wb").write(tar.extractfile(names[0]).read())
    header = subprocess.run(["readelf", "-h", path], capture_output=True, text=True, check=True).stdout
    fields = dict(l.strip().split(":", 1) for l in header.splitlines() if ":" in l)
    machine = fields["Machine"].strip()
    order = "big" if "big endian" in fields["Data"] else "little"
    arch, elf = want[platform]
    assert f"{machine}:{order}" == elf, f"{platform}: the binary is {machine} {order} endian, expected {elf}"
    seen.append(platform)
    print(f"oci-image: {platform}: {machine}, {order} endian, {layer['digest'][:19]}", file=sys.stderr)
assert sorted(seen) == sorted(want), f"platforms {seen}, expected {list(want)}"
PY
# And by an OCI tool of its own where one is installed (skopeo: Debian's
# package): the index and a copy of all six platforms.
if command -v skopeo >/dev/null; then
    [[ "$(skopeo inspect --raw "oci:$OUT:latest" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["manifests"]))')" == 6 ]] \
        || fail "skopeo does not read six manifests from oci:$OUT:latest"
    skopeo copy --quiet --all "oci:$OUT:latest" "oci:$WORK/copy:latest" >/dev/null \
        || fail "skopeo could not copy oci:$OUT:latest"
    echo "oci-image: skopeo reads and copies all six" >&2
fi
if docker info >/dev/null 2>&1; then
    for line in "${PLATFORMS[@]}"; do
        read -r platform arch _ <<<"$line"
        docker_arch=${platform%/*}
        tag="iptables-wrapper-oci-check:$docker_arch"
        DOCKER_BUILDKIT=0 docker build --quiet --build-arg "TARGETARCH=$docker_arch" -t "$tag" . >/dev/null 2>"$WORK/docker.err" \
            || fail "docker build --build-arg TARGETARCH=$docker_arch failed: $(cat "$WORK/docker.err")"
        container=$(docker create "$tag" /usr/sbin/iptables-wrapper)
        docker cp "$container:/usr/sbin/iptables-wrapper" "$WORK/from-docker" >/dev/null
        docker rm "$container" >/dev/null
        docker rmi "$tag" >/dev/null
        cmp -s "$WORK/from-docker" "$DIST/iptables-wrapper-$arch" \
            || fail "the Dockerfile's $docker_arch image does not hold $DIST/iptables-wrapper-$arch"
    done
    echo "oci-image: the Dockerfile's image of each of the six holds its binary" >&2
fi
echo "$OUT"
