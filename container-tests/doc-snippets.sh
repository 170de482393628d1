#!/usr/bin/env bash
# Prints a code snippet of README.md (or another Markdown file) exactly as
# printed there, found by its marker: an HTML comment, invisible when the
# Markdown is rendered, on the line right before the snippet's opening fence:
#
#   <!-- snippet: distroless -->
#   ```dockerfile
#   FROM ...
#   ```
#
#   container-tests/readme-snippets.sh NAME [FILE]        the lines between the fences
#   container-tests/readme-snippets.sh --list [FILE]      "NAME LANGUAGE" per marker
#
# Checks (container-tests/readme-recipe.sh, the matrix) take the recipes from
# here rather than keeping copies of their own, so what is checked is what a
# reader copies. A marker not followed by a fence, a fence never closed, a
# name used twice or a name not found is one line on stderr and exit 1.
set -euo pipefail

usage() {
  echo "usage: readme-snippets.sh NAME [FILE] | --list [FILE]" >&2
  exit 2
}

[[ $# -ge 1 && $# -le 2 ]] || usage
WANT="$1"
[[ -n "$WANT" ]] || usage
FILE="${2:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/README.md}"
[[ -r "$FILE" ]] || { echo "readme-snippets.sh: cannot read $FILE" >&2; exit 1; }

# One pass: every marker is checked (so a broken one fails any call, and
# nothing is printed then); at the end the wanted snippet's lines are
# printed, or with --list every name and its fence's language.
awk -v want="$WANT" -v file="$FILE" '
  function fail(msg) { printf "readme-snippets.sh: %s:%d: %s\n", file, NR, msg > "/dev/stderr"; failed = 1; exit 1 }
  pending != "" {
    if ($0 !~ /^```/) fail("the marker for \"" pending "\" is not followed by an opening ``` fence")
    name = pending; pending = ""; inside = 1
    lang = substr($0, 4); sub(/[ \t].*/, "", lang)
    if (want == "--list") out = out name " " (lang == "" ? "-" : lang) "\n"
    next
  }
  inside {
    if ($0 ~ /^```[ \t]*$/) { inside = 0; if (name == want) found = 1; next }
    if (name == want) out = out $0 "\n"
    next
  }
  /^<!-- snippet: [A-Za-z0-9._-]+ -->[ \t]*$/ {
    pending = $3
    if (pending in seen) fail("snippet name \"" pending "\" used twice")
    seen[pending] = 1
    next
  }
  /^<!-- snippet:/ { fail("a snippet marker must read <!-- snippet: NAME --> (NAME: letters, digits, . _ -)") }
  END {
    if (failed) exit 1
    if (pending != "") { printf "readme-snippets.sh: %s: the marker for \"%s\" ends the file\n", file, pending > "/dev/stderr"; exit 1 }
    if (inside) { printf "readme-snippets.sh: %s: the snippet \"%s\" is never closed by a ``` fence\n", file, name > "/dev/stderr"; exit 1 }
    if (want != "--list" && !found) { printf "readme-snippets.sh: %s has no snippet named \"%s\" (markers: <!-- snippet: NAME -->; --list shows them)\n", file, want > "/dev/stderr"; exit 1 }
    printf "%s", out
  }' "$FILE"
