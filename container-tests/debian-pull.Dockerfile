# A Debian base image with iptables, for CI that can pull images
# (IPTW_BASE_SOURCE=pull). The default, offline, recipe is mmdebstrap in
# build-base.sh; both give the same contents.
ARG BASE=debian:bookworm
FROM ${BASE}
ARG PACKAGES=iptables
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${PACKAGES} \
 && rm -rf /var/lib/apt/lists/*
