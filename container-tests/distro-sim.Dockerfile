# A Debian image laid out as another distribution lays out iptables
# (distro-sim.sh), for the recipes of docs/images/. Built by build-base.sh.
ARG SRC
FROM ${SRC}
ARG DISTRO
COPY distro-sim.sh /tmp/distro-sim.sh
RUN bash /tmp/distro-sim.sh "$DISTRO" && rm /tmp/distro-sim.sh
LABEL iptables-wrapper-sim=${DISTRO}
