#!/usr/bin/env bash
# Checks that every relative link in every tracked Markdown file resolves: the
# target file exists, and a `#anchor` names a heading of the target file by
# GitHub's slug rules (lowercase; spaces to '-'; punctuation other than '-'
# and '_' dropped; a repeated heading gets -1, -2, ...). Links with a scheme
# (https:, mailto:) are not checked: no network. Code blocks and inline code
# are skipped. Prints each broken link as FILE:LINE: LINK and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."

# Tracked files; outside a git checkout, every .md file but the build's.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -t files < <(git ls-files '*.md')
else
    mapfile -t files < <(find . -name '*.md' -not -path './target/*' -not -path './dist/*' | sed 's|^\./||' | sort)
fi
[[ ${#files[@]} -gt 0 ]] || { echo "check-links: no Markdown files found" >&2; exit 1; }

awk '
# slug: GitHub anchor of a heading text.
function slug(t) {
    t = tolower(t)
    gsub(/`/, "", t)
    gsub(/[^a-z0-9 _-]/, "", t)   # keeps letters, digits, space, _ and -
    gsub(/ /, "-", t)
    return t
}
function exists(p,   line) {
    if (p in seen_exists) return seen_exists[p]
    seen_exists[p] = ((getline line < p) >= 0 || system("test -e \"" p "\"") == 0)
    close(p)
    return seen_exists[p]
}
# anchors_of: load the headings of file p into anchors[p, slug].
function anchors_of(p,   line, fence, t, s, n) {
    if (p in loaded) return
    loaded[p] = 1
    fence = 0
    while ((getline line < p) > 0) {
        if (line ~ /^[ \t]*(```|~~~)/) { fence = !fence; continue }
        if (fence || line !~ /^#+[ \t]/) continue
        t = line
        sub(/^#+[ \t]+/, "", t); sub(/[ \t]+#*[ \t]*$/, "", t)
        s = slug(t)
        n = count[p, s]++
        anchors[p, (n ? s "-" n : s)] = 1
    }
    close(p)
}
function dirname(p) { return (p ~ /\//) ? substr(p, 1, match(p, /\/[^\/]*$/) - 1) : "." }
# normalize: resolve . and .. in a relative path.
function normalize(p,   parts, n, i, out, k) {
    n = split(p, parts, "/"); k = 0
    for (i = 1; i <= n; i++) {
        if (parts[i] == "" || parts[i] == ".") continue
        if (parts[i] == "..") { if (k > 0) k--; else return "../" ; continue }
        out[++k] = parts[i]
    }
    p = ""
    for (i = 1; i <= k; i++) p = p (i > 1 ? "/" : "") out[i]
    return p == "" ? "." : p
}
FNR == 1 { fence = 0 }
{
    if ($0 ~ /^[ \t]*(```|~~~)/) { fence = !fence; next }
    if (fence) next
    line = $0
    gsub(/`[^`]*`/, "", line)          # inline code
    n = 0
    if (match(line, /^ *\[[^]]+\]:[ \t]+[^ \t]+/)) {   # a reference definition: [name]: target
        def = substr(line, RSTART, RLENGTH); sub(/^ *\[[^]]+\]:[ \t]+/, "", def)
        gsub(/^<|>$/, "", def)
        links[++n] = def
    }
    while (match(line, /\]\([^)]*\)/)) {               # an inline link or image: [text](target)
        links[++n] = substr(line, RSTART + 2, RLENGTH - 3)
        line = substr(line, RSTART + RLENGTH)
    }
    for (j = 1; j <= n; j++) {
        link = links[j]
        gsub(/^<|>$/, "", link)
        sub(/[ \t]+"[^"]*"$/, "", link)   # a title
        if (link ~ /^[a-zA-Z][a-zA-Z0-9+.-]*:/ || link == "") continue
        path = link; anchor = ""
        if ((i = index(link, "#")) > 0) { path = substr(link, 1, i - 1); anchor = substr(link, i + 1) }
        target = (path == "") ? FILENAME : normalize(dirname(FILENAME) "/" path)
        if (target == "../" || !exists(target)) { print FILENAME ":" FNR ": " link; bad++; continue }
        if (anchor != "") {
            anchors_of(target)
            if (!((target, anchor) in anchors)) { print FILENAME ":" FNR ": " link; bad++ }
        }
    }
}
END {
    if (bad) { print bad " broken link(s)" > "/dev/stderr"; exit 1 }
}
' "${files[@]}"
echo "links: all relative links in ${#files[@]} Markdown files resolve"
