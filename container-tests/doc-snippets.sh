#!/usr/bin/env bash
# Prints a code snippet of the project's Markdown pages exactly as printed
# there, found by its marker: an HTML comment, invisible when the Markdown is
# rendered, on the line right before the snippet's opening fence:
#
#   <!-- snippet: distroless -->
#   ```dockerfile
#   FROM ...
#   ```
#
#   container-tests/doc-snippets.sh NAME [FILE...]     the lines between the fences
#   container-tests/doc-snippets.sh --list [FILE...]   "NAME LANGUAGE FILE" per marker
#
# FILE: default README.md and every docs/*.md and docs/images/*.md (the Debian
# recipe is on the front page, each other distribution's on a page of its
# own in docs/images/). Names are unique across all of them. Checks
# (container-tests/doc-recipe.sh, distro-recipes.sh, the matrix) take the
# recipes from here rather than keeping copies of their own, so what is
# checked is what a reader copies. A marker not followed by a fence, a fence
# never closed, a name used twice or a name not found is one line on stderr
# and exit 1.
set -euo pipefail

usage() {
  echo "usage: doc-snippets.sh NAME [FILE...] | --list [FILE...]" >&2
  exit 2
}

[[ $# -ge 1 ]] || usage
WANT="$1"
shift
[[ -n "$WANT" ]] || usage
FILES=("$@")
if [[ ${#FILES[@]} -eq 0 ]]; then
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  FILES=(README.md)
  for page in docs/*.md docs/images/*.md; do
    [[ -e "$page" ]] && FILES+=("$page")
  done
fi
for file in "${FILES[@]}"; do
  [[ -r "$file" ]] || { echo "doc-snippets.sh: cannot read $file" >&2; exit 1; }
done

# One pass: every marker is checked (so a broken one fails any call, and
# nothing is printed then); at the end the wanted snippet's lines are
# printed, or with --list every name, its fence's language and its file.
awk -v want="$WANT" '
  function fail(msg) { printf "doc-snippets.sh: %s:%d: %s\n", FILENAME, FNR, msg > "/dev/stderr"; failed = 1; exit 1 }
  function unfinished() {
    if (pending != "") { printf "doc-snippets.sh: %s: the marker for \"%s\" ends the file\n", last, pending > "/dev/stderr"; failed = 1; exit 1 }
    if (inside) { printf "doc-snippets.sh: %s: the snippet \"%s\" is never closed by a ``` fence\n", last, name > "/dev/stderr"; failed = 1; exit 1 }
  }
  FNR == 1 { unfinished(); last = FILENAME }
  pending != "" {
    if ($0 !~ /^```/) fail("the marker for \"" pending "\" is not followed by an opening ``` fence")
    name = pending; pending = ""; inside = 1
    lang = substr($0, 4); sub(/[ \t].*/, "", lang)
    if (want == "--list") out = out name " " (lang == "" ? "-" : lang) " " FILENAME "\n"
    next
  }
  inside {
    if ($0 ~ /^```[ \t]*$/) { inside = 0; if (name == want) found = 1; next }
    if (name == want) out = out $0 "\n"
    next
  }
  /^<!-- snippet: [A-Za-z0-9._-]+ -->[ \t]*$/ {
    pending = $3
    if (pending in seen) fail("snippet name \"" pending "\" used twice (also in " seen[pending] ")")
    seen[pending] = FILENAME
    next
  }
  /^<!-- snippet:/ { fail("a snippet marker must read <!-- snippet: NAME --> (NAME: letters, digits, . _ -)") }
  END {
    if (failed) exit 1
    unfinished()
    if (want != "--list" && !found) { printf "doc-snippets.sh: no snippet named \"%s\" in README.md or docs/ (markers: <!-- snippet: NAME -->; --list shows them)\n", want > "/dev/stderr"; exit 1 }
    printf "%s", out
  }' "${FILES[@]}"
