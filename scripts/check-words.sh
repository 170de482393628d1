#!/usr/bin/env bash
# Checks that the repository speaks of the project only, never of how its
# work was organised: no sessions, rounds, leads, issue numbers ("issue 20",
# "#20"), "this issue", "the previous stop". A figure says what it was
# measured on (machine, date, commit), not when or by whom. Also checks that
# README.md has at most 250 lines (a front page read in minutes).
#
#   scripts/check-words.sh        prints each hit as FILE:LINE: TEXT, exit 1 on any
#
# Read: the Markdown pages (README.md, docs/, bench/), examples/ and the CI
# files whole; of the sources, their comments only (Rust `//`, C `/* */` and
# `//` lines, shell, Python, awk, YAML and Dockerfile `#`), without their
# `quoted` identifiers: a code identifier is not prose. Legitimate words stay legitimate: "session
# affinity" (kube-proxy's), "round trip", "round-trip"; a repeated step of
# a benchmark or test is an "iteration", so "round" is never needed.
set -euo pipefail
cd "$(dirname "$0")/.."

MAX_README_LINES=250

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    list() { git ls-files "$@"; }
else
    list() { local p; for p in "$@"; do find . -path "./$p" -type f -not -path './target/*' | sed 's|^\./||'; done; }
fi
mapfile -t whole < <(list 'README.md' 'docs/*.md' 'docs/**/*.md' 'bench/*.md' 'examples/*' \
    '.github/*' '.gitlab-ci.yml' '.ci/*' | sort -u)
mapfile -t slash < <(list 'src/*.rs' 'src/**/*.rs' 'tests/*.rs' 'tests/**/*.rs' 'build.rs' 'bench/*.c' | sort -u)
mapfile -t hash < <(list 'scripts/*' 'container-tests/*' 'container-tests/**/*' 'bench/*.sh' 'bench/*.awk' \
    'Dockerfile' 'Dockerfile.test' '.cargo/config.toml' 'Cargo.toml' 'link/*' | grep -v -e '\.c$' -e '^scripts/check-words.sh$' | sort -u)

# The prose to read, as FILE:LINE:TEXT.
prose() {
    [[ ${#whole[@]} -eq 0 ]] || awk '{ print FILENAME ":" FNR ":" $0 }' "${whole[@]}"
    [[ ${#slash[@]} -eq 0 ]] || awk '
        { line = $0; text = "" }
        match(line, /\/\/.*/) { text = substr(line, RSTART) }
        line ~ /^[ \t]*(\/\*|\*)/ { text = line }
        text != "" { gsub(/`[^`]*`/, "``", text); print FILENAME ":" FNR ":" text }' "${slash[@]}"
    [[ ${#hash[@]} -eq 0 ]] || awk '
        FNR == 1 && /^#!/ { next }
        match($0, /(^|[ \t])#.*/) { text = substr($0, RSTART); gsub(/`[^`]*`/, "``", text); print FILENAME ":" FNR ":" text }' "${hash[@]}"
}

# Each pattern (Perl syntax, case-insensitive) is a way of speaking about
# the work instead of the project.
patterns=(
    '\bsessions?\b(?! affinity)'
    '\brounds?\b(?![ -]trip)'
    "\\blead('s)?\\b"
    '\bissues? ?#?[0-9]+'
    "\\b(this|that|the|an|the same) issue('s)?\\b"
    '(^|[\s(\[])#[0-9]+\b'
    '\b(this|last|previous|next|earlier|that) stop\b'
    '\bcoordinator'
)
joined=$(IFS='|'; echo "${patterns[*]}")
hits=$(prose | grep -P -i -- "^[^:]*:[0-9]+:.*($joined)" || true)
status=0
if [[ -n "$hits" ]]; then
    echo "$hits" | cut -c1-240
    echo "check-words: $(wc -l <<<"$hits") line(s) speak of how the work was organised (sessions, rounds, leads, issue numbers): say what the project does, and give a figure its machine, date and commit" >&2
    status=1
fi
readme_lines=$(wc -l <README.md)
if ((readme_lines > MAX_README_LINES)); then
    echo "README.md:$readme_lines: $readme_lines lines, more than $MAX_README_LINES: move detail to docs/" >&2
    status=1
fi
[[ $status -ne 0 ]] || echo "words: no session, round, lead or issue number in $(( ${#whole[@]} + ${#slash[@]} + ${#hash[@]} )) files; README.md $readme_lines lines (at most $MAX_README_LINES)"
exit "$status"
