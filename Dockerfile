# The image to copy the wrapper from: FROM scratch, holding only the static
# binary at /usr/sbin/iptables-wrapper, for the build's platform. Build it,
# offline (no base image, no network), after the binaries:
#
#   bash scripts/build-static.sh --all
#   docker build -t iptables-wrapper .                          # this machine's builder
#   docker build --build-arg TARGETARCH=arm64 -t iptables-wrapper:arm64 .
#   docker buildx build --platform linux/amd64,linux/arm64,linux/arm/v7,linux/ppc64le,linux/riscv64,linux/s390x \
#       -t REPO/iptables-wrapper --push .
#
# or all six as one OCI image index without any builder:
# bash scripts/oci-image.sh (docs/building.md).
#
# and use it as:   COPY --from=iptables-wrapper /usr/sbin/iptables-wrapper /usr/sbin/iptables-wrapper
#
# BuildKit and buildx set TARGETARCH from the platform; the classic builder
# does not, and amd64 is the fallback. The arch stages map Docker's
# architecture names to the binaries' (dist/iptables-wrapper-x86_64,
# -aarch64, -armv7, -ppc64le, -riscv64, -s390x); the image keeps that name in
# WRAPPER_ARCH. .dockerignore keeps the build context to those six files.
ARG TARGETARCH
ARG WRAPPER_PLATFORM_ARCH=${TARGETARCH:-amd64}

FROM scratch AS arch-amd64
ENV WRAPPER_ARCH=x86_64

FROM scratch AS arch-arm64
ENV WRAPPER_ARCH=aarch64

FROM scratch AS arch-arm
ENV WRAPPER_ARCH=armv7

FROM scratch AS arch-ppc64le
ENV WRAPPER_ARCH=ppc64le

FROM scratch AS arch-riscv64
ENV WRAPPER_ARCH=riscv64

FROM scratch AS arch-s390x
ENV WRAPPER_ARCH=s390x

FROM arch-${WRAPPER_PLATFORM_ARCH}
COPY dist/iptables-wrapper-${WRAPPER_ARCH} /usr/sbin/iptables-wrapper
