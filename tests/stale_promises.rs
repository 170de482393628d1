//! `iptables-wrapper stale --remove`'s promises where they are easiest to
//! break: a backup directory reached through someone else's link, one JSON
//! object on every path, a removal that never reads a steady nf_tables
//! ruleset saying that it gave up and why (beside a writer that interrupts
//! its dumps too), a backup that restores without error into another
//! table than the live one, and the nf_tables generation moving between the
//! proof and the emptying (no backup of an attempt that did not happen is
//! offered as an undo, nor kept where a backup cannot be written), and a
//! legacy writer that bypasses the lock during the judgement. Each test in a network namespace of its own,
//! against the real iptables-legacy / iptables-nft.
//!
//! Where a backend tool must misbehave (a save that prints another rule than
//! the kernel holds, a save or a restore that commits to the live ruleset as
//! a busy writer would), the wrapper is given, by `IPTABLES_WRAPPER_SBIN` in
//! its environment, a directory of the real backends in which that one tool
//! is a script around the real one.

mod common;

use common::OutputWithin as _;

use common::stale::{json, legacy_saves, nft_ruleset, stale, stderr, stdout};
use common::{write_program, Node};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

/// A host on nft with stale legacy rules that open nothing (nft's rule
/// keeps defragmentation on without them).
fn legacy_stale_node(name: &str) -> Node {
    let node = Node::new(name);
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh("iptables-legacy -A INPUT -s 10.0.0.1/32 -j ACCEPT
iptables-legacy -t nat -A POSTROUTING -s 10.0.0.0/8 -j MASQUERADE
iptables-nft -A INPUT -s 10.9.9.9/32 -m conntrack --ctstate NEW -j ACCEPT");
    node
}

/// A host on legacy with stale nft rules that open nothing (legacy's rule
/// keeps defragmentation on without them).
fn nft_stale_node(name: &str) -> Node {
    let node = Node::new(name);
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    node.sh(
        "iptables-legacy -A INPUT -s 10.1.1.1/32 -m conntrack --ctstate NEW -j ACCEPT
iptables-nft -A INPUT -s 10.0.0.1/32 -j ACCEPT
iptables-nft -t nat -A POSTROUTING -s 10.0.0.0/8 -j MASQUERADE",
    );
    node
}

/// A directory of the real backends (links to both multi-call binaries),
/// with `scripts` (name, body) as programs of their own.
fn backends_with(node: &Node, scripts: &[(&str, &str)]) -> PathBuf {
    let dir = node.path("sbin");
    std::fs::create_dir_all(&dir).unwrap();
    for multi in ["xtables-nft-multi", "xtables-legacy-multi"] {
        std::os::unix::fs::symlink(Path::new("/usr/sbin").join(multi), dir.join(multi)).unwrap();
    }
    for (name, body) in scripts {
        write_program(&dir.join(name), &format!("#!/bin/sh\n{body}\n"));
    }
    dir
}

fn stale_with_backends(node: &Node, sbin: &Path, args: &[&str]) -> Output {
    node.wrapper()
        .env("IPTABLES_WRAPPER_SBIN", sbin)
        .arg("stale")
        .args(args)
        .output_within_limit()
        .unwrap()
}

/// A commit to the live ruleset that leaves it as it was: the generation moves.
const COMMIT_NOTHING: &str = "nft 'add table ip iptw-moved; delete table ip iptw-moved'";

/// `stale --remove --json --backup-dir NODE/backups`, with
/// `iptables-<backend>-restore` a script that, the first time it runs (the
/// first proof's, in the removal's scratch namespace), ends by running
/// `iptables-<backend> WRITE` in the live namespace (the wrapper's, its
/// parent's) with the lock file the restore tools are given: a writer
/// between the proof and the emptying. Asserts that the write was made.
fn remove_with_a_write_after_the_first_proof(node: &Node, backend: &str, write: &str) -> Output {
    let marker = node.path("written");
    let restore = format!(
        "/usr/sbin/iptables-{backend}-restore \"$@\" || exit\n[ -e {m} ] && exit 0\n: > {m}\nnsenter --net=/proc/$PPID/ns/net /usr/sbin/iptables-{backend} {write}",
        m = marker.display()
    );
    let sbin = backends_with(node, &[(&format!("iptables-{backend}-restore"), &restore)]);
    let backups = node.path("backups");
    let dir = backups.to_str().unwrap();
    let out = stale_with_backends(node, &sbin, &["--remove", "--json", "--backup-dir", dir]);
    assert!(marker.exists(), "the restore never ran: {}", stderr(&out));
    out
}

#[test]
fn a_backup_dir_through_another_users_link_is_resolved_and_printed_resolved() {
    common::root_or_skip!();
    let node = legacy_stale_node("backup-link");
    let sticky = node.path("sticky");
    let root_only = node.path("root-only");
    std::fs::create_dir_all(&sticky).unwrap();
    std::fs::create_dir_all(&root_only).unwrap();
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::set_permissions(&root_only, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = sticky.join("link");
    std::os::unix::fs::symlink(&root_only, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
    let out = stale(
        &node,
        &["--remove", "--backup-dir", link.join("backup").to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    let resolved = std::fs::canonicalize(&root_only).unwrap().join("backup");
    assert!(text.contains(&format!("backup: {}\n", resolved.display())), "{text}");
    let undo = format!(
        "(undo: iptables-legacy-restore < {}/iptables-legacy.rules)",
        resolved.display()
    );
    assert!(text.contains(&undo), "{text}");
    // The link's owner re-points it: the printed undo still names the backup.
    assert!(!text.contains("sticky"), "the link is never printed: {text}");
    std::fs::remove_file(&link).unwrap();
    assert!(resolved.join("iptables-legacy.rules").is_file());
}

#[test]
fn every_early_stop_prints_one_json_object() {
    common::root_or_skip!();
    let node = legacy_stale_node("json-stops");
    let legacy_before = legacy_saves(&node);
    let one_object = |out: &Output, why: &str| {
        assert_eq!(out.status.code(), Some(1), "{}{}", stdout(out), stderr(out));
        let report = json(out);
        let stopped = report["removal"]["stopped"]
            .as_str()
            .unwrap_or_else(|| panic!("{report}"));
        assert!(
            stopped.contains(why) && stopped.contains("nothing was changed"),
            "{report}"
        );
        assert_eq!(report["removal"]["emptied"], serde_json::json!([]), "{report}");
        assert_eq!(stdout(out).lines().count(), 1, "one object, one line: {}", stdout(out));
        assert_eq!(stderr(out).lines().count(), 1, "{}", stderr(out));
        assert!(stderr(out).contains(why), "{}", stderr(out));
    };
    // A backup directory another user owns.
    let theirs = node.path("theirs");
    std::fs::create_dir_all(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let out = stale(&node, &["--remove", "--json", "--backup-dir", theirs.to_str().unwrap()]);
    one_object(&out, "owned by uid 65534");
    // A backup that cannot be written.
    std::fs::write(node.path("a-file"), "").unwrap();
    let under_file = node.path("a-file/backup");
    let out = stale(
        &node,
        &["--remove", "--json", "--backup-dir", under_file.to_str().unwrap()],
    );
    one_object(&out, "Not a directory");
    assert_eq!(legacy_saves(&node), legacy_before);
    // The first reading fails (nf_tables refuses the wrapper's socket).
    let node = nft_stale_node("json-stops-read");
    let nft_before = nft_ruleset(&node);
    let mut command = node.wrapper();
    command.args(["stale", "--remove", "--json"]);
    let out = common::seccomp::refuse_sockets(&mut command, |call| call.domain == libc::AF_NETLINK)
        .output_within_limit()
        .unwrap();
    one_object(&out, "nf_tables cannot be read");
    assert_eq!(nft_ruleset(&node), nft_before);
}

#[test]
fn a_save_tool_that_fails_leaves_each_table_it_cannot_save() {
    common::root_or_skip!();
    // Each table's own save fails: no backup, so each is left, and said.
    let node = nft_stale_node("save-fails");
    let nft_before = nft_ruleset(&node);
    let sbin = backends_with(&node, &[("iptables-nft-save", "echo the save broke >&2; exit 3")]);
    let out = stale_with_backends(&node, &sbin, &["--remove", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let report = json(&out);
    assert_eq!(report["removal"]["backup_files"], serde_json::json!([]), "{report}");
    let failed = report["removal"]["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 2, "{report}");
    for (entry, table) in failed.iter().zip(["filter", "nat"]) {
        assert_eq!(entry["table"], table, "{report}");
        let error = entry["error"].as_str().unwrap();
        assert!(
            error.contains("iptables-nft-save cannot save it")
                && error.contains(&format!("-t {table}) exit status: 3: the save broke")),
            "{report}"
        );
    }
    assert_eq!(nft_ruleset(&node), nft_before);
}

#[test]
fn an_nft_removal_that_never_reads_a_steady_ruleset_says_why() {
    common::root_or_skip!();
    let node = nft_stale_node("never-steady");
    let nft_before = nft_ruleset(&node);
    // Each save commits to the live ruleset as it ends, as a writer that
    // never pauses would: no attempt reads the tables and the save at one
    // generation.
    let save = format!("/usr/sbin/iptables-nft-save \"$@\" || exit\n{COMMIT_NOTHING}");
    let sbin = backends_with(&node, &[("iptables-nft-save", &save)]);
    let why = "gave up after 5 attempts: in each, the nf_tables ruleset changed while it was being read";
    let out = stale_with_backends(&node, &sbin, &["--remove"]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    for table in ["filter", "nat"] {
        let line = format!("left as it was: nft ipv4 {table}: {why}");
        assert!(stdout(&out).contains(&line), "{line:?} missing from: {}", stdout(&out));
    }
    assert_eq!(nft_ruleset(&node), nft_before);
    let out = stale_with_backends(&node, &sbin, &["--remove", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&out);
    let failed = report["removal"]["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 2, "{report}");
    for entry in failed {
        assert!(entry["error"].as_str().unwrap().contains(why), "{report}");
    }
    assert_eq!(nft_ruleset(&node), nft_before);
}

#[test]
fn a_backup_that_restores_another_legacy_table_is_refused() {
    common::root_or_skip!();
    let node = legacy_stale_node("legacy-inexact");
    let legacy_before = legacy_saves(&node);
    // A save that prints another address than the kernel holds, as a save
    // tool that cannot express a rule's bytes would: its output restores
    // without an error, into another rule.
    let save = "/usr/sbin/iptables-legacy-save \"$@\" | sed 's#-s 10.0.0.1/32#-s 10.0.0.2/32#'";
    let sbin = backends_with(&node, &[("iptables-legacy-save", save)]);
    let out = stale_with_backends(&node, &sbin, &["--remove"]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    let left = "left as it was: legacy ipv4 filter: the backup does not restore it exactly";
    assert!(text.contains(left), "{text}");
    // nat's backup restores it exactly, but it is left with filter: one
    // family's tables go together or not at all.
    assert!(
        text.contains("left as it was: legacy ipv4 nat: left with the filter table of its family"),
        "{text}"
    );
    assert!(text.contains("no backup written"), "{text}");
    assert_eq!(legacy_saves(&node), legacy_before);
}

#[test]
fn the_nft_generation_moving_between_the_proof_and_the_emptying_changes_nothing() {
    common::root_or_skip!();
    let node = nft_stale_node("moved-after-proof");
    let nft_before = nft_ruleset(&node);
    let legacy_before = legacy_saves(&node);
    // The proof's restore runs in the removal's scratch namespace; as it
    // ends, it commits to the live one (the wrapper's, its parent's), as a
    // writer would between the proof and the emptying, in every attempt.
    let restore =
        format!("/usr/sbin/iptables-nft-restore \"$@\" || exit\nnsenter --net=/proc/$PPID/ns/net {COMMIT_NOTHING}");
    let sbin = backends_with(&node, &[("iptables-nft-restore", &restore)]);
    let out = stale_with_backends(&node, &sbin, &["--remove", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let report = json(&out);
    assert_eq!(report["removal"]["emptied"], serde_json::json!([]), "{report}");
    // Each attempt wrote a backup, none was applied: none is offered.
    assert_eq!(report["removal"]["backup_files"], serde_json::json!([]), "{report}");
    let failed = report["removal"]["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 2, "{report}");
    for entry in failed {
        let why = entry["error"].as_str().unwrap();
        assert!(
            why.contains("changed between the backup and the removal") && why.contains("nothing removed"),
            "{report}"
        );
    }
    assert_eq!(nft_ruleset(&node), nft_before);
    assert_eq!(legacy_saves(&node), legacy_before);
}

#[test]
fn a_family_a_later_attempt_leaves_keeps_no_backup_and_offers_no_undo() {
    common::root_or_skip!();
    let node = nft_stale_node("later-attempt-left");
    // The first proof's restore ends by committing, to the live ruleset, a
    // stale nft rule with no twin, once, as a writer still on nft would
    // between the proof and the emptying: the first attempt's backup is
    // written, its emptying finds the generation moved, and the next
    // attempt leaves the family for that rule.
    let out = remove_with_a_write_after_the_first_proof(&node, "nft", "-A INPUT -s 10.66.0.1/32 -j DROP");
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let nft_held = nft_ruleset(&node);
    assert!(nft_held.contains("10.66.0.1"), "{nft_held}");
    let report = json(&out);
    let removal = &report["removal"];
    assert_eq!(removal["emptied"], serde_json::json!([]), "{report}");
    assert!(
        removal["failed"].to_string().contains("10.66.0.1"),
        "the rule with no twin is not named: {report}"
    );
    // Nothing went, so there is nothing to undo: the first attempt's
    // backup, which lacks the new rule, is neither offered nor kept.
    assert_eq!(removal["backup_files"], serde_json::json!([]), "{report}");
    let kept: Vec<_> = std::fs::read_dir(node.path("backups"))
        .map(|entries| entries.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(kept.is_empty(), "files left in the backup directory: {kept:?}");
    assert_eq!(nft_ruleset(&node), nft_held);
}

#[test]
fn a_legacy_write_that_bypasses_the_lock_during_the_judgement_leaves_the_family() {
    common::root_or_skip!();
    // To a stale table, and to a table of the family that held nothing
    // (one family's tables go together or not at all).
    for (name, write) in [
        ("bypass-stale-table", "-A INPUT -s 10.66.0.1/32 -j DROP"),
        (
            "bypass-empty-table",
            "-t mangle -A PREROUTING -j MARK --set-xmark 0x7/0xffffffff",
        ),
    ] {
        let node = legacy_stale_node(name);
        // The first restore writes to the live legacy tables with the lock
        // file the restore tools are given, not the xtables lock the
        // removal holds: a writer that bypasses the lock, after the
        // readings the judgement rests on and before the emptying.
        let out = remove_with_a_write_after_the_first_proof(&node, "legacy", write);
        assert_eq!(out.status.code(), Some(1), "{name}: {}{}", stdout(&out), stderr(&out));
        let report = json(&out);
        let removal = &report["removal"];
        assert_eq!(removal["emptied"], serde_json::json!([]), "{name}: {report}");
        let failed = removal["failed"].as_array().unwrap();
        assert_eq!(failed.len(), 2, "{name}: {report}");
        for entry in failed {
            let why = entry["error"].as_str().unwrap();
            assert!(why.contains("changed after they were judged"), "{name}: {report}");
        }
        assert_eq!(removal["backup_files"], serde_json::json!([]), "{name}: {report}");
        // The write is kept, beside what was there.
        let legacy = legacy_saves(&node);
        let written = write.split_once("-A ").unwrap().1;
        for rule in [written, "-A INPUT -s 10.0.0.1/32 -j ACCEPT", "MASQUERADE"] {
            assert!(legacy.contains(rule), "{name}: {rule} lost: {legacy}");
        }
    }
}

#[test]
fn a_backup_that_cannot_be_written_leaves_no_backup_of_the_removal_behind() {
    common::root_or_skip!();
    let node = legacy_stale_node("backup-unwritable");
    node.sh("ip6tables-legacy -A INPUT -s 2001:db8::1/128 -j ACCEPT
ip6tables-nft -A INPUT -s 2001:db8::9/128 -m conntrack --ctstate NEW -j ACCEPT");
    let legacy_before = legacy_saves(&node);
    // The IPv6 backup's name is taken (a backup is never written over a
    // file that was there): the IPv4 one is written, the IPv6 one fails,
    // and the removal stops before anything is emptied.
    let backups = node.path("backups");
    std::fs::create_dir(&backups).unwrap();
    std::fs::write(backups.join("ip6tables-legacy.rules"), "taken\n").unwrap();
    let out = stale(&node, &["--remove", "--backup-dir", backups.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("nothing was changed"), "{}", stderr(&out));
    assert_eq!(legacy_saves(&node), legacy_before);
    let mut kept: Vec<_> = std::fs::read_dir(&backups)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    kept.sort();
    // What was there stays; what this removal wrote goes: it undoes nothing.
    assert_eq!(kept, ["ip6tables-legacy.rules"], "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(backups.join("ip6tables-legacy.rules")).unwrap(),
        "taken\n"
    );
}

/// The undo a removal prints runs as printed whatever the backup
/// directory's name (a blank, a `;`, a quote): each `(undo: ...)` line, fed
/// to `sh -c`, gives the emptied tables back; a name no line carries as it
/// is (a newline) is refused.
#[test]
fn the_printed_undo_runs_as_printed_for_any_directory_name() {
    common::root_or_skip!();
    let node = legacy_stale_node("undo-quoted");
    let before = common::stale::uncounted(&legacy_saves(&node));
    // A name no printed line carries as it is (a newline) is refused
    // before anything changes.
    let unprintable = node.path("new\nline");
    let out = stale(&node, &["--remove", "--backup-dir", unprintable.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("a printed undo cannot carry"), "{}", stderr(&out));
    assert_eq!(common::stale::uncounted(&legacy_saves(&node)), before);
    std::fs::create_dir(node.path("my dir")).unwrap();
    let backups = node.path("my dir/b;x'y");
    let out = stale(&node, &["--remove", "--backup-dir", backups.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert_ne!(
        common::stale::uncounted(&legacy_saves(&node)),
        before,
        "nothing emptied"
    );
    let report = stdout(&out);
    let undo: Vec<&str> = report
        .lines()
        .filter_map(|line| line.split_once("(undo: ")?.1.strip_suffix(')'))
        .collect();
    assert!(!undo.is_empty(), "no undo printed: {report}");
    for command in undo {
        node.sh(command);
    }
    assert_eq!(common::stale::uncounted(&legacy_saves(&node)), before, "{report}");
}

/// An nft removal beside a writer that never pauses (a commit after each
/// save, and, from the removal's first judgement on, commits in a loop
/// while the wrapper runs, so the tables' dumps are interrupted too) gives
/// up, and each table's reason says so: after how many attempts, why, and
/// to run again when writers are quiet; never "read again".
#[test]
fn an_nft_removal_that_gives_up_says_it_gave_up_and_why() {
    common::root_or_skip!();
    let node = nft_stale_node("gives-up");
    // Enough chains and rules that each dump takes several reads of the
    // socket, for the loop's commits to interrupt.
    let chains: String = (0..1000).map(|n| format!(":C{n} - [0:0]\n")).collect();
    let rules: String = (0..1000)
        .map(|n| format!("-A C{n} -s 10.2.{}.{}/32 -j ACCEPT\n", n / 250, n % 250))
        .collect();
    std::fs::write(node.path("rules"), format!("*filter\n{chains}{rules}COMMIT\n")).unwrap();
    node.sh(&format!(
        "iptables-nft-restore --noflush < {rules}",
        rules = node.path("rules").display()
    ));
    let nft_before = nft_ruleset(&node);
    let count = node.path("saves");
    let save = format!(
        "/usr/sbin/iptables-nft-save \"$@\" || exit\n{COMMIT_NOTHING}\n\
         echo >> {count}\n[ \"$(wc -l < {count})\" = 2 ] || exit 0\n\
         wrapper=$PPID\n\
         ( while [ -d /proc/$wrapper ]; do {COMMIT_NOTHING}; done ) < /dev/null > /dev/null 2>&1 &",
        count = count.display()
    );
    let sbin = backends_with(&node, &[("iptables-nft-save", &save)]);
    let out = stale_with_backends(&node, &sbin, &["--remove"]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let report = stdout(&out);
    let left: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("left as it was: nft "))
        .collect();
    assert!(!left.is_empty(), "{report}");
    for line in left {
        assert!(
            line.contains("gave up after 5 attempts")
                && line.contains("run `iptables-wrapper stale --remove` again when"),
            "{line}"
        );
        assert!(!line.contains("read again"), "{line}");
    }
    assert_eq!(nft_ruleset(&node), nft_before);
}
