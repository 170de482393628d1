#!/usr/bin/env bash
# Checks examples/daemonset.yaml offline: against the Kubernetes schemas of
# every version from 1.28 to the newest that the pinned kubernetes-validate
# bundles (strict: an unknown field fails), then against the choices
# docs/kubernetes.md describes (scripts/check-daemonset.py, with its
# self-test: each property broken on purpose must be caught).
# scripts/install-deps.sh installs kubernetes-validate into its own venv.
#
#   scripts/check-daemonset.sh [FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
FILE="${1:-examples/daemonset.yaml}"
OLDEST_MINOR=28

venv=$(ls -d "${IPTW_DEV_TOOLS:-$PWD/target/dev-tools}"/kubernetes-validate-*/ 2>/dev/null | sort -V | tail -n1 || true)
[[ -n "$venv" && -e "$venv/installed" ]] || {
    echo "check-daemonset.sh: kubernetes-validate is not installed: run scripts/install-deps.sh" >&2
    exit 1
}
# The versions it bundles: its schema directories, v1.N.0-local-strict.
schemas=$("$venv/bin/python" -c 'import kubernetes_validate, os; print(os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema"))')
newest_minor=$(ls "$schemas" | sed -n 's/^v1\.\([0-9]*\)\.0-local-strict$/\1/p' | sort -n | tail -n1)
[[ -n "$newest_minor" && "$newest_minor" -ge "$OLDEST_MINOR" ]] \
    || { echo "check-daemonset.sh: kubernetes-validate in $venv bundles no schema from 1.$OLDEST_MINOR on" >&2; exit 1; }

failed=()
for minor in $(seq "$OLDEST_MINOR" "$newest_minor"); do
    if ! out=$("$venv/bin/kubernetes-validate" --strict --quiet -k "1.$minor.0" "$FILE" 2>&1); then
        echo "$out" >&2
        failed+=("1.$minor")
    fi
done
if ((${#failed[@]})); then
    echo "check-daemonset.sh: $FILE fails the schema of Kubernetes ${failed[*]}" >&2
    exit 1
fi
echo "check-daemonset.sh: $FILE is valid for Kubernetes 1.$OLDEST_MINOR to 1.$newest_minor (strict)"
"$venv/bin/python" scripts/check-daemonset.py "$FILE"
"$venv/bin/python" scripts/check-daemonset.py --self-test "$FILE"
