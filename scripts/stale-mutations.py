#!/usr/bin/env python3
"""Mutations of `stale --remove`'s judgement, each one plausible one-line
mistake against one principle of docs/mixed-state.md, and the tests that
must catch it. Each is applied to a copy of the working tree (this checkout
is never changed), its tests run, and the line says which failed; a
mutation no test catches prints NOT CAUGHT and the exit is 1.

    python3 scripts/stale-mutations.py [M1 M2 ...]
    python3 scripts/stale-mutations.py --check   # each still applies (the quick tier)

Needs what `cargo test` needs (the integration tests run as root, in
network namespaces of their own); about 45 minutes for all 21 on 2
shared cores (docs/testing.md has the figures).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

# (name, [(file, text, its mutation)], [cargo test arguments])
MUTATIONS = [
 ("M1 hashlimit keeps no shared state (code and docs)",
  [("src/stale/effects.rs", '"hashlimit",\n        Match,\n        Reads,\n        ByName,', '"hashlimit",\n        Match,\n        Reads,\n        Nothing,'),
   ("docs/mixed-state.md", "| `hashlimit` | match | reads | by name |", "| `hashlimit` | match | reads | none |")],
  ["--test stale_effects every_match_that_shares_state"]),
 ("M2 the order check counts the rules before a block instead of comparing them",
  [("src/stale/same_way.rs", ".all(|&i| stale_significant.next() == Some(live_rules[i]) && live.same_chains[i])", ".all(|&i| stale_significant.next().is_some() && live.same_chains[i])")],
  ["--lib stale::", "--test stale_judge"]),
 ("M3 MARK only observes (code and docs)",
  [("src/stale/effects.rs", '"MARK",\n        Target,\n        Changes,', '"MARK",\n        Target,\n        Observes,'),
   ("docs/mixed-state.md", "| `MARK` | target | changes |", "| `MARK` | target | observes |")],
  ["--test stale_effects every_target"]),
 ("M4 REJECT accepts (code and docs)",
  [("src/stale/effects.rs", 'row("REJECT", Target, Blocks,', 'row("REJECT", Target, Accepts,'),
   ("docs/mixed-state.md", "| `REJECT` | target | blocks |", "| `REJECT` | target | accepts |")],
  ["--test stale_effects every_target"]),
 ("M5 conntrack keeps nothing on (code and docs)",
  [("src/stale/effects.rs", 'reads("conntrack", Conntrack,', 'reads("conntrack", Off,'),
   ("docs/mixed-state.md", "| `conntrack` | match | reads | none | conntrack |", "| `conntrack` | match | reads | none | - |")],
  ["--test stale_effects every_name_the_kernel"]),
 ("M6 a DROP policy goes without its twin",
  [("src/stale/opening.rs", 'if policy.as_slice() == b"-" || policy.as_slice() == b"ACCEPT" {', 'if policy.as_slice() == b"-" || policy.as_slice() == b"ACCEPT" || policy.as_slice() == b"DROP" {')],
  ["--lib stale::", "--test stale"]),
 ("M7 a family's other tables are not left with a held one",
  [("src/stale/judge.rs", "    for verdict in verdicts.iter_mut().filter(|v| v.is_ok()) {\n        *verdict = Err(left_with(&held));\n    }\n    (Vec::new(), verdicts)", "    (Vec::new(), verdicts)")],
  ["--lib stale::", "--test stale_judge a_held_filter"]),
 ("M8 an unreachable chain's rule goes whatever it keeps alive",
  [("src/stale/opening.rs", "let only_loaded = keeps(line) <= kept_live && names_nothing_shared(line, table);", "let only_loaded = true;")],
  ["--lib stale::"]),
 ("M9 the security table's twin counts",
  [("src/stale/opening.rs", 'const NO_TWIN_ACROSS_BACKENDS: [&[u8]; 1] = [b"security"];', 'const NO_TWIN_ACROSS_BACKENDS: [&[u8]; 1] = [b"nosuch"];')],
  ["--lib stale::"]),
 ("M10 a user chain behind a rule may return early, stale",
  [("src/stale/same_way.rs", "same_way_in(live, live.read.rules.len(), stale, stale.read.rules.len(), true)", "same_way_in(live, live.read.rules.len(), stale, stale.read.rules.len(), false)")],
  ["--lib stale::", "--test stale_judge"]),
 ("M11 a limit reached through a jump is not counted",
  [("src/stale/same_way.rs", "keeps_own_state(r)\n                        || targets(r)", "keeps_own_state(r)\n                        && targets(r)")],
  ["--lib stale::"]),
 ("M12 a rule fed own state is judged by which rules come before, not all",
  [("src/stale/same_way.rs", "let fed = stale.read.own_state[at];", "let fed = false;")],
  ["--lib stale::"]),
 ("M13 'may open' whatever the held item",
  [("src/stale/opening.rs", "let blocks_alone = items\n        .iter()\n        .find(|item| counted && blocks_alone(item, table, live))\n        .cloned();", "let blocks_alone = items.first().cloned();")],
  ["--lib stale::", "--test stale_effects every_target"]),
 ("M14 DNAT does not go in nat (code and docs)",
  [("src/stale/effects.rs", '"DNAT",\n        Target,\n        Translates,\n        Nothing,\n        Conntrack,\n        true,', '"DNAT",\n        Target,\n        Translates,\n        Nothing,\n        Conntrack,\n        false,'),
   ("docs/mixed-state.md", "| `DNAT` | target | translates | none | conntrack | goes |", "| `DNAT` | target | translates | none | conntrack | - |")],
  ["--test stale_effects every_target"]),
 ("M15 a chain keeping state is taken as fed alike wherever it is fed",
  [("src/stale/same_way.rs", "    fn fed_alike(&mut self, chain: &[u8]) -> bool {\n", "    fn fed_alike(&mut self, chain: &[u8]) -> bool {\n        #[allow(unreachable_code)]\n        return true;\n")],
  ["--lib stale::"]),
 ("M16 NFQUEUE only blocks (code and docs)",
  [("src/stale/effects.rs", '"NFQUEUE",\n        Target,\n        Queues,', '"NFQUEUE",\n        Target,\n        Blocks,'),
   ("docs/mixed-state.md", "| `NFQUEUE` | target | queues |", "| `NFQUEUE` | target | blocks |")],
  ["--test stale_rows_verdicts nfqueue"]),
 ("M17 mark keeps conntrack on (code and docs)",
  [("src/stale/effects.rs", 'reads("mark", Off,', 'reads("mark", Conntrack,'),
   ("docs/mixed-state.md", "| `mark` | match | reads | none | - |", "| `mark` | match | reads | none | conntrack |")],
  ["--test stale_rows_state mark", "--test stale_effects every_name_the_kernel"]),
 ("M18 socket writes nothing (code and docs)",
  [("src/stale/effects.rs", 'row("socket", Match, Reads, Writes,', 'row("socket", Match, Reads, Nothing,'),
   ("docs/mixed-state.md", "| `socket` | match | reads | writes |", "| `socket` | match | reads | none |")],
  ["--test stale_rows_state socket"]),
 ("M19 the legacy tables emptied along a packet's path, not against it",
  [("src/stale/remove/legacy.rs", '["security", "filter", "nat", "mangle", "raw"];', '["raw", "mangle", "nat", "filter", "security"];')],
  ["--test stale_interrupted_midway"]),
 ("M20 the record not written again for a later nft attempt that empties other tables",
  [("src/stale/remove.rs", "if under_way.part.tables != part.tables {", "if false {")],
  ["--test stale_interrupted_midway"]),
 ("M21 the exit status after a signal that came once something was emptied is the report's",
  [("src/stale/remove.rs", 'reported first"\n            ));\n            signals::exit_status().unwrap_or(status)', 'reported first"\n            ));\n            status')],
  ["--test stale_interrupted a_signal_after"]),
]


def stale_texts(root):
    """The mutations whose text to mutate is no longer in its file."""
    return [f"{name}: {path} no longer holds {text[:60]!r}"
            for name, edits, _ in MUTATIONS
            for path, text, _ in edits
            if text not in open(os.path.join(root, path)).read()]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if sys.argv[1:] == ["--check"]:
        stale = stale_texts(root)
        for line in stale:
            print(f"stale-mutations.py: {line}: update the mutation", file=sys.stderr)
        sys.exit(1 if stale else 0)
    only = sys.argv[1:]
    target = os.path.join(root, "target", "mutations")
    missed = 0
    with tempfile.TemporaryDirectory(prefix="iptw-mutations.") as scratch:
        copy = os.path.join(scratch, "tree")
        files = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
        for name in filter(None, files.decode().split("\0")):
            os.makedirs(os.path.dirname(os.path.join(copy, name)), exist_ok=True)
            shutil.copy2(os.path.join(root, name), os.path.join(copy, name), follow_symlinks=False)
        for name, edits, tests in MUTATIONS:
            if only and name.split()[0] not in only:
                continue
            kept = {}
            for path, text, mutated in edits:
                full = os.path.join(copy, path)
                kept.setdefault(full, open(full).read())
                now = open(full).read()
                if text not in now:
                    sys.exit(f"{name}: {path} no longer holds {text[:60]!r}: update the mutation")
                open(full, "w").write(now.replace(text, mutated, 1))
            failed = []
            for args in tests:
                out = subprocess.run(
                    f"cargo test --release {args} 2>&1",
                    shell=True, cwd=copy, capture_output=True, text=True,
                    env=dict(os.environ, CARGO_TARGET_DIR=target),
                ).stdout
                if "could not compile" in out:
                    failed.append(f"{args}: does not compile")
                failed += [f"{args}: {t}" for t in re.findall(r"^test (\S+) \.\.\. FAILED", out, re.M)]
            for full, text in kept.items():
                open(full, "w").write(text)
            missed += not failed
            print(f"{name}: " + ("caught by " + "; ".join(failed) if failed else "NOT CAUGHT"), flush=True)
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
