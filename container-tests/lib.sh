# shellcheck shell=bash
# Helpers shared by the container-test scripts. Source it; do not run it.

# `set -e` also inside $(...), so that a failing build in a function whose
# output is captured fails the script.
shopt -s inherit_errexit

# The directory of these scripts and the repository root.
CT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$CT_DIR/.." && pwd)"

# Image names. Base images are tagged with a content key (see content_key).
BASE_REPO="${IPTW_BASE_REPO:-iptables-wrapper-base}"
TEST_REPO="${IPTW_TEST_REPO:-iptables-wrapper-test}"

# The flavours of the matrix: three Debian suites and a distroless-style image
# built from the bookworm packages.
ALL_FLAVOURS=(bullseye bookworm trixie distroless)
DISTROLESS_SUITE=bookworm

# Builds use the classic builder unless DOCKER_BUILDKIT says otherwise. It
# takes `FROM` images from the local image store, which is all there is when
# nothing can be pulled. Here the client (28) has no buildx: with
# DOCKER_BUILDKIT=1 it refuses to build, unset it falls back to the classic
# builder with a deprecation notice. (With buildx, its default "docker"
# driver also sees local images; a "docker-container" driver does not.)
export DOCKER_BUILDKIT="${DOCKER_BUILDKIT:-0}"

# The docker run options of a container that runs daemons of its own (Docker's
# engine in scenario 9, the real clients of clients.sh). --privileged would
# do, but an engine that lacks a capability itself (CAP_SYS_RESOURCE here)
# cannot grant it; this is enough for a daemon, and for crun to start a
# container inside (podman).
DAEMON_PRIVILEGE=(--cap-add ALL --cap-drop SYS_RESOURCE --security-opt seccomp=unconfined
  --security-opt apparmor=unconfined --volume /sys/fs/cgroup:/sys/fs/cgroup)

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# content_key STRING... FILE...: a short hash of the given strings and of the
# contents of the given files (arguments that name a readable file are hashed
# by content, anything else as text). Used as the image tag, so changing a
# recipe, a suite or a package list makes a new image and an unchanged one is
# found again.
content_key() {
  local arg
  for arg in "$@"; do
    if [[ -f "$arg" ]]; then
      printf 'file:%s\n' "$(basename "$arg")"
      cat "$arg"
    else
      printf 'text:%s\n' "$arg"
    fi
  done | sha256sum | cut -c1-16
}

# quietly COMMAND...: run COMMAND with its output kept aside; print that
# output only if it fails (docker build is chatty).
quietly() {
  local out rc=0
  out="$(mktemp "${TMPDIR:-/tmp}/iptw-out.XXXXXX")"
  "$@" >"$out" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then cat "$out" >&2; log "failed ($rc): $*"; fi
  rm -f "$out"
  return "$rc"
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# debian_mirror: print the URI of the Debian archive this machine's apt uses.
# Nothing is hard-coded: IPTW_DEBIAN_MIRROR wins, then the first deb source in
# /etc/apt/sources.list(.d) that carries a plain release suite (no "-updates",
# no "-security") with the "main" component. Both the one-line (*.list) and
# the deb822 (*.sources) formats are read.
debian_mirror() {
  if [[ -n "${IPTW_DEBIAN_MIRROR:-}" ]]; then
    printf '%s\n' "$IPTW_DEBIAN_MIRROR"
    return
  fi
  local f uri
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -r "$f" ]] || continue
    # deb [options] URI SUITE COMPONENT...
    uri="$(sed -E 's/\[[^]]*\]//' "$f" | awk '
      $1 == "deb" && $3 !~ /[-\/]/ {
        for (i = 4; i <= NF; i++) if ($i == "main") { print $2; exit }
      }')"
    [[ -n "$uri" ]] && { printf '%s\n' "${uri%/}"; return; }
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -r "$f" ]] || continue
    # deb822: paragraphs separated by blank lines; fields Types/URIs/Suites/
    # Components/Enabled. Comment lines are skipped.
    uri="$(awk '
      function flush() {
        if (!found && types ~ /(^| )deb( |$)/ && enabled != "no" && comps ~ /(^| )main( |$)/) {
          n = split(suites, s, " ")
          for (i = 1; i <= n; i++) if (s[i] !~ /[-\/]/) { split(uris, u, " "); print u[1]; found = 1; exit }
        }
        types = uris = suites = comps = ""; enabled = "yes"
      }
      BEGIN { enabled = "yes" }
      /^#/ { next }
      /^[ \t]*$/ { flush(); next }
      {
        key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
        if (key == "types") types = $0
        else if (key == "uris") uris = $0
        else if (key == "suites") suites = $0
        else if (key == "components") comps = $0
        else if (key == "enabled") enabled = tolower($0)
      }
      END { flush() }' "$f")"
    [[ -n "$uri" ]] && { printf '%s\n' "${uri%/}"; return; }
  done
  die "no Debian archive found in /etc/apt/sources.list(.d); set IPTW_DEBIAN_MIRROR"
}

# check_suite_reachable MIRROR SUITE: fail early, with a clear message, when
# the mirror does not serve the suite (e.g. an old release moved to an archive).
check_suite_reachable() {
  local mirror="$1" suite="$2"
  command -v curl >/dev/null || return 0 # mmdebstrap will say so itself
  curl -fsS --max-time 30 -o /dev/null "$mirror/dists/$suite/InRelease" \
    || die "the configured Debian mirror does not serve '$suite' (set IPTW_DEBIAN_MIRROR, or IPTW_BASE_SOURCE=pull)"
}
