# A distroless-style image: no package manager, no alternatives system, only
# the iptables backends (xtables-legacy-multi, xtables-nft-multi), their
# libraries and extensions, and a static busybox for the test script.
# SRC is a Debian image with the iptables and busybox-static packages
# (build-base.sh builds it offline, or from a pulled debian image).
ARG SRC
FROM ${SRC} AS src
COPY distroless-collect.sh /distroless-collect.sh
RUN bash /distroless-collect.sh /out

FROM scratch
COPY --from=src /out/ /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CMD ["/bin/sh"]
