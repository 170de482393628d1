# The non-root test image (scenario 10). BASE is the test image
# (Dockerfile.test) of the nonroot base: bookworm with iptables and
# libcap2-bin. The backends get the capabilities iptables needs as file
# capabilities; the wrapper, installed as iptables by Dockerfile.test, gets
# none. (The build runs without CAP_NET_ADMIN in its bounding set, where the
# kernel refuses to exec a file whose capabilities it cannot grant in full:
# nothing runs after setcap.) A second copy of the wrapper with file capabilities of its own, and
# its six links made by `install`, lets the scenario compare the two setups.
ARG BASE
FROM ${BASE}
RUN set -e; \
    for backend in xtables-nft-multi xtables-legacy-multi; do \
      setcap cap_net_admin,cap_net_raw+ep /usr/sbin/$backend; \
    done; \
    mkdir /opt/wrapper-with-caps; \
    cp /usr/sbin/iptables-wrapper /opt/wrapper-with-caps/; \
    /opt/wrapper-with-caps/iptables-wrapper install --dir /opt/wrapper-with-caps; \
    setcap cap_net_admin,cap_net_raw+ep /opt/wrapper-with-caps/iptables-wrapper
# Any user id; no passwd entry is needed.
USER 65532:65532
