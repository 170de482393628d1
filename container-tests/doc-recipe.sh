#!/usr/bin/env bash
# Builds a Dockerfile recipe of README.md or docs/ as printed there, from the
# repository root (the context a reader builds it in, with the repository's
# .dockerignore), then checks the image it made.
#
#   container-tests/doc-recipe.sh NAME WRAPPER_IMAGE [TAG]
#
# NAME is the recipe's snippet marker (container-tests/doc-snippets.sh
# --list). The snippet is taken from its page each time, never copied, so
# the check cannot drift from what is printed. Two image names in it are
# stand-ins, and only they are replaced (the log shows the difference):
#   --from=iptables-wrapper   the image to copy the wrapper from: WRAPPER_IMAGE
#                             (the matrix's build of the top-level Dockerfile)
#   FROM debian:SUITE-slim    with IPTW_BASE_SOURCE=local (the default), the
#                             offline base build-base.sh tags
#                             iptables-wrapper-base:SUITE (minbase with
#                             iptables), as docs/building.md tells a reader without
#                             a registry to do, and the build runs without a
#                             network (--network none); with pull, left as
#                             printed
# The image is then run without a network and without capabilities: each of
# the six commands, with IPTABLES_MODE=nft and =legacy, must answer `-V` from
# that backend (only the wrapper can answer for both, and the backends'
# libraries must be in the image; -V asks the kernel nothing). TAG (default
# iptables-wrapper-recipe:NAME-PID) is removed at the end unless
# IPTW_KEEP_IMAGES=1. Exit 0 when the recipe built and its image passed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NAME="${1:?usage: doc-recipe.sh NAME WRAPPER_IMAGE [TAG]}"
WRAPPER_IMAGE="${2:?usage: doc-recipe.sh NAME WRAPPER_IMAGE [TAG]}"
TAG="${3:-iptables-wrapper-recipe:$NAME-$$}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/iptw-recipe.XXXXXX")"
cleanup() {
  if [[ "${IPTW_KEEP_IMAGES:-0}" != 1 ]]; then docker rmi "$TAG" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

"$CT_DIR/doc-snippets.sh" "$NAME" >"$WORK/printed.Dockerfile"
PAGE="$("$CT_DIR/doc-snippets.sh" --list | awk -v name="$NAME" '$1 == name { print $3 }')"
# The stand-ins: whole image references only, nothing else in the text.
sed_args=(-e "s#--from=iptables-wrapper\\([[:space:]]\\)#--from=$WRAPPER_IMAGE\\1#")
build_opts=()
if [[ "${IPTW_BASE_SOURCE:-local}" == local ]]; then
  sed_args+=(-e "s#^FROM debian:\\([a-z]*\\)-slim\\([[:space:]]\\|\$\\)#FROM $BASE_REPO:\\1\\2#")
  # Offline, as docs/building.md promises: the base already has what the
  # recipe's apt-get installs (apt-get update only warns without a network).
  build_opts+=(--network none)
fi
sed "${sed_args[@]}" "$WORK/printed.Dockerfile" >"$WORK/Dockerfile"
# The offline bases the recipe now names (cached by build-base.sh).
mapfile -t suites < <(sed -n "s#^FROM $BASE_REPO:\([a-z]*\).*#\1#p" "$WORK/Dockerfile" | sort -u)
if ((${#suites[@]})); then "$CT_DIR/build-base.sh" "${suites[@]}" >/dev/null; fi
echo "recipe '$NAME' from $PAGE, image names replaced:"
diff "$WORK/printed.Dockerfile" "$WORK/Dockerfile" | sed -n 's/^[<>]/  &/p' || true

# As a reader builds it: the repository root as the context.
log "building recipe '$NAME' as $TAG"
quietly docker build --force-rm "${build_opts[@]}" -t "$TAG" -f "$WORK/Dockerfile" "$REPO_DIR" \
  || { echo "FAIL: recipe '$NAME' does not build from the repository root as printed in $PAGE"; exit 1; }

# Each of the six names, run without a network, capabilities or a shell,
# must answer for the mode it is given: only the wrapper can (a link
# straight to a backend answers for that backend alone).
failed=0
for command in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
  for mode in nft legacy; do
    want="(legacy)"; [[ $mode == nft ]] && want="(nf_tables)"
    out="$(docker run --rm --network none --cap-drop ALL -e IPTABLES_MODE="$mode" \
      --entrypoint "$command" "$TAG" -V 2>&1)" || true
    if [[ "$out" == "$command v"*" $want"* ]]; then
      echo "ok: IPTABLES_MODE=$mode $command -V: $out"
    else
      echo "FAIL: IPTABLES_MODE=$mode $command -V printed: $out"
      failed=1
    fi
  done
done
[[ $failed -eq 0 ]] && echo "recipe '$NAME': pass"
exit "$failed"
