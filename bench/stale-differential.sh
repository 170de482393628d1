#!/usr/bin/env bash
# The differential run of `stale --remove`'s judgement (tests/stale_differential.rs):
# builds the older wrapper from a git worktree of OLD_COMMIT (359e0f0) made in a
# temporary directory (removed after, with its build), then runs the ignored test
# with --nocapture against it. It prints the states and families judged, the
# families and tables whose verdict changed (old → new) per kind, the witnesses
# found, replayed, confirmed, wrong and unreplayable, and the wall time.
#
#   sudo bash bench/stale-differential.sh
#   sudo IPTW_DIFF_STATES=20000 IPTW_DIFF_MINUTES=40 bash bench/stale-differential.sh
#
# Knobs (passed on to the test): IPTW_DIFF_STATES (20000), IPTW_DIFF_SEED
# (20261207), IPTW_DIFF_WORKERS (3), IPTW_DIFF_REPLAY (1200), IPTW_DIFF_MINUTES
# (stop judging new states after that long; 0: never), IPTW_DIFF_REPORT (the
# list of every changed family); OLD_COMMIT; IPTW_OLD_WRAPPER (a prebuilt older
# binary instead of building OLD_COMMIT). Needs root (network namespaces) and
# the real backends; every netfilter change happens in namespaces of its own.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
old_commit=${OLD_COMMIT:-359e0f0}
tmp=$(mktemp -d)
cleanup() {
    git -C "$repo" worktree remove --force "$tmp/old" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

start=$(date +%s)
if [ -z "${IPTW_OLD_WRAPPER:-}" ]; then
    git -C "$repo" worktree add --detach "$tmp/old" "$old_commit" >/dev/null
    echo "building the older wrapper ($old_commit) in $tmp/old"
    (cd "$tmp/old" && CARGO_TARGET_DIR="$tmp/target" nice cargo build --release -j1 --quiet)
    IPTW_OLD_WRAPPER=$tmp/target/x86_64-unknown-linux-musl/release/iptables-wrapper
fi
export IPTW_OLD_WRAPPER

cd "$repo"
nice cargo build --release -j1 --quiet --test stale_differential
status=0
cargo test --release -j1 --quiet --test stale_differential -- --ignored --nocapture || status=$?
echo "stale-differential: wall time $(($(date +%s) - start)) s (the older wrapper's build included), exit $status"
exit "$status"
