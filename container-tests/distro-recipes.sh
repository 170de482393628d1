#!/usr/bin/env bash
# Builds the Dockerfile recipes for each distribution as printed (Debian's
# in README.md, each other's on its page in docs/images/; found by their
# markers, container-tests/doc-snippets.sh), on images
# laid out as those distributions lay out iptables (distro-sim.sh; no
# registry here), then runs the host states of the matrix in each.
#
#   container-tests/distro-recipes.sh WRAPPER_IMAGE [RECIPE...]
#   container-tests/distro-recipes.sh --names   # the recipes it builds
#
# RECIPE: debian alpine-3.22 alpine-3.23 fedora-42 ubi-9 wolfi (default:
# all). Only image names are stood in (the log shows the difference): the
# recipe's `FROM` image by the base build-base.sh makes for it, and
# `--from=iptables-wrapper` by WRAPPER_IMAGE. Each builds without a network
# from the repository root, then, with the test helper added, runs
# scenarios 1-3 (host on legacy, on nft, switched without a restart; UBI:
# nft, and a legacy host's error naming EPEL) and its distribution's own
# checks: Fedora's `install --dir /usr/sbin` refuses the alternatives link
# and a reinstalled iptables-nft leaves the wrapper registered; on Wolfi,
# with the iptables-wrappers package added, `install` refuses its links.
# Containers get IPTW_PRIVILEGE's rights, as in scenario.sh (run-matrix.sh
# sets it). Prints one line per recipe; exit 0 when all passed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ALL_RECIPES=(debian alpine-3.22 alpine-3.23 fedora-42 ubi-9 wolfi)
if [[ "${1:-}" == --names ]]; then printf '%s\n' "${ALL_RECIPES[@]}"; exit 0; fi
WRAPPER_IMAGE="${1:?usage: distro-recipes.sh WRAPPER_IMAGE [RECIPE...] | --names}"
shift
RECIPES=("$@")
[[ ${#RECIPES[@]} -gt 0 ]] || RECIPES=("${ALL_RECIPES[@]}")
RUN="${IPTW_RUN_ID:-$$}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/iptw-distro.XXXXXX")"
MADE=()
cleanup() {
  if [[ "${IPTW_KEEP_IMAGES:-0}" != 1 && ${#MADE[@]} -gt 0 ]]; then docker rmi "${MADE[@]}" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# base_of RECIPE: the build-base.sh image standing in for its FROM.
base_of() {
  case "$1" in
    debian) echo bookworm ;;
    *) echo "$1" ;;
  esac
}

mkdir -p "$WORK/helper/container-tests"
cp "$CT_DIR/in-container.sh" "$WORK/helper/container-tests/in-container.sh"

# recipe NAME: build and check one recipe; its log goes to stdout.
recipe() {
  local name="$1" base page printed="$WORK/$1.printed" dockerfile="$WORK/$1.Dockerfile"
  local image="iptables-wrapper-recipe:$1-$RUN" test_image="$TEST_REPO:recipe-$1-$RUN"
  base="$("$CT_DIR/build-base.sh" "$(base_of "$name")" | awk '{print $2}')" || return 1
  [[ -n "$base" ]] || return 1
  "$CT_DIR/doc-snippets.sh" "$name" >"$printed" || return 1
  page="$("$CT_DIR/doc-snippets.sh" --list | awk -v name="$name" '$1 == name { print $3 }')"
  # The stand-ins: the first FROM's image, and the wrapper image; nothing else.
  sed -e "0,/^FROM [^ ]*/s##FROM $base#" \
    -e "s#--from=iptables-wrapper\\([[:space:]]\\)#--from=$WRAPPER_IMAGE\\1#" "$printed" >"$dockerfile"
  echo "recipe '$name' from $page, image names replaced:"
  diff "$printed" "$dockerfile" | sed -n 's/^[<>]/  &/p' || true
  MADE+=("$image" "$test_image")
  quietly docker build --force-rm --network none -t "$image" -f "$dockerfile" "$REPO_DIR" \
    || { echo "FAIL: recipe '$name' does not build as printed in $page"; return 1; }
  printf 'FROM %s\nCOPY container-tests/in-container.sh /usr/local/bin/wrapper-test\n' "$image" >"$WORK/helper/Dockerfile"
  quietly docker build --force-rm -t "$test_image" "$WORK/helper" || return 1
  # Every step returns its failure: this function runs as an `if`'s
  # condition, where set -e does not stop it.
  local s
  if [[ "$name" == ubi-9 ]]; then
    "$CT_DIR/scenario.sh" "$test_image" only-nft || return 1
  else
    for s in 1 2 3; do "$CT_DIR/scenario.sh" "$test_image" "$s" || return 1; done
  fi
  case "$name" in
    fedora-42)
      echo "- install --dir /usr/sbin leaves the alternatives link alone; a reinstall keeps the wrapper"
      docker run --rm --network none --entrypoint bash "$test_image" -c '
        set -u
        # As before the recipe registered the wrapper: the group on iptables-nft.
        alternatives --set iptables /usr/bin/iptables-nft
        if iptables-wrapper install --dir /usr/sbin 2>/tmp/err; then echo "FAIL: install replaced the alternatives link"; exit 1; fi
        grep -q "alternatives link" /tmp/err || { echo "FAIL: the refusal does not say why: $(cat /tmp/err)"; exit 1; }
        [ "$(readlink /usr/bin/iptables)" = /etc/alternatives/iptables ] || { echo "FAIL: /usr/bin/iptables changed: $(ls -l /usr/bin/iptables)"; exit 1; }
        echo "  ok: $(cat /tmp/err)"
        alternatives --set iptables /usr/bin/iptables-wrapper
        iptables-wrapper install --dir /usr/sbin >/tmp/out || { echo "FAIL: install on the registered group: $(cat /tmp/out)"; exit 1; }
        [ "$(grep -c "already in place" /tmp/out)" = 6 ] || { echo "FAIL: registered, yet: $(cat /tmp/out)"; exit 1; }
        echo "  ok: with the wrapper registered, install finds the six names already in place"
        dnf reinstall -y iptables-nft iptables-legacy
        [ "$(readlink /etc/alternatives/iptables)" = /usr/bin/iptables-wrapper ] \
          && [ "$(readlink /etc/alternatives/ip6tables-save)" = /usr/bin/iptables-wrapper ] \
          || { echo "FAIL: after a reinstall: $(alternatives --display iptables)"; exit 1; }
        echo "  ok: after reinstalling iptables-nft and iptables-legacy the group stays on the wrapper"' || return 1 ;;
    wolfi)
      echo "- with Wolfi's iptables-wrappers installed, install refuses its links"
      docker run --rm --network none --entrypoint bash "$test_image" -c '
        set -u; apk add iptables-wrappers
        if iptables-wrapper install --dir /usr/bin 2>/tmp/err; then echo "FAIL: install replaced iptables-wrappers'"'"' links"; exit 1; fi
        grep -q "another program" /tmp/err || { echo "FAIL: the refusal does not say why: $(cat /tmp/err)"; exit 1; }
        [ "$(readlink /usr/bin/iptables)" = iptables-wrapper ] || { echo "FAIL: /usr/bin/iptables changed"; exit 1; }
        cmp -s /usr/local/sbin/iptables-wrapper /usr/bin/iptables-wrapper && { echo "FAIL: ours was replaced"; exit 1; }
        echo "  ok: $(cat /tmp/err)"' || return 1 ;;
  esac
}

failed=()
for name in "${RECIPES[@]}"; do
  start=$SECONDS
  if recipe "$name" >"$WORK/$name.log" 2>&1; then
    log "recipe $name: pass ($((SECONDS - start))s)"
  else
    log "recipe $name: FAIL ($((SECONDS - start))s)"
    cat "$WORK/$name.log"
    failed+=("$name")
  fi
  [[ -z "${IPTW_LOG_DIR:-}" ]] || cp "$WORK/$name.log" "$IPTW_LOG_DIR/recipe-$name.log"
done
[[ ${#failed[@]} -eq 0 ]] || { echo "recipes that failed: ${failed[*]}"; exit 1; }
echo "recipes passed: ${RECIPES[*]}"
