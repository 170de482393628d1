//! A removal (`stale --remove`) killed in the middle of one step: between
//! two table commits of one legacy restore (the tables that feed others
//! are the ones left), and after an nft attempt later than the first that
//! empties more than the first would have (the record names what it
//! emptied). Each in a network namespace of its own, against the real
//! iptables-legacy / iptables-nft; the stand-in tools are
//! tests/common/interrupted.rs's.

mod common;

use common::OutputWithin as _;

use common::interrupted::{interrupted_line, node, saves, stand_ins};
use common::stale::{stderr, stdout};
use common::{write_program, Node};
use std::os::unix::process::ExitStatusExt as _;
use std::process::Output;

/// Runs the undo `line` names and checks each family of `backend` holds
/// what it held before (`before`).
fn undo_gives_back(node: &Node, line: &str, backend: &str, before: &[String; 2]) {
    let undo = line.split("; undo: ").nth(1).unwrap();
    for command in undo.split("; ") {
        node.sh(command);
    }
    assert_eq!(saves(node, backend), *before, "the undo ({undo})");
}

fn killed(out: &Output) {
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "the removal was not killed: {}{}",
        stdout(out),
        stderr(out)
    );
}

/// The legacy emptying is one restore, one commit per table, against the
/// path of a packet: killed after its first commit, filter (which reads
/// the mark and the translation) is gone and the mangle and nat tables
/// that feed it are kept, so no kept table meets packets otherwise than it
/// did. A stand-in `iptables-legacy-restore` commits only the first table
/// of what the wrapper feeds it in the live namespace, then kills it.
#[test]
fn a_legacy_restore_killed_between_two_table_commits_keeps_the_tables_that_feed() {
    common::root_or_skip!();
    let node = node("midway-legacy", "nft", "legacy");
    let before = saves(&node, "legacy");
    let sbin = stand_ins(&node, &[], "unused", &[]);
    write_program(
        &sbin.join("iptables-legacy-restore"),
        "#!/bin/sh\n\
         [ \"$(readlink /proc/self/ns/net)\" = \"$(readlink /proc/$PPID/ns/net)\" ] || exec /usr/sbin/iptables-legacy-restore \"$@\"\n\
         sed '/^COMMIT$/q' | /usr/sbin/iptables-legacy-restore \"$@\"\n\
         kill -KILL $PPID\n",
    );
    let out = node
        .wrapper()
        .env("IPTABLES_WRAPPER_SBIN", &sbin)
        .args(["stale", "--remove"])
        .output_within_limit()
        .unwrap();
    killed(&out);
    let ipv4 = node.sh("iptables-legacy-save");
    let holds = |table: &str| {
        ipv4.split("\n*")
            .find(|t| t.starts_with(table))
            .is_some_and(|t| t.contains("\n-A "))
    };
    assert!(!holds("filter"), "filter, which reads, goes first:\n{ipv4}");
    assert!(holds("nat") && holds("mangle"), "the tables that feed it stay:\n{ipv4}");
    let (line, _, _) = interrupted_line(&node, "killed midway");
    assert!(
        line.contains(" emptied legacy ipv4 filter, left legacy ipv4 nat, legacy ipv4 mangle, "),
        "{line}"
    );
    undo_gives_back(&node, &line, "legacy", &before);
}

/// An nft attempt the kernel refused (a stand-in `iptables-legacy-save`,
/// the live save the first judgement reads, adds a stale nft raw rule whose
/// twin legacy holds: the generation moves) is judged again, and the next
/// attempt empties raw too: the record is written again first, so a kill
/// right after that emptying leaves a record naming raw, and its undo.
#[test]
fn a_later_nft_attempt_emptying_more_names_it_in_the_record() {
    common::root_or_skip!();
    let notrack = "-t raw -A PREROUTING -p tcp --dport 7 -j CT --notrack";
    let node = node("midway-nft", "legacy", "nft");
    node.sh(&format!("iptables-legacy {notrack}"));
    let sbin = stand_ins(
        &node,
        &["iptables-legacy-save"],
        "live-saves",
        &[(1, format!("iptables-nft {notrack}"))],
    );
    let out = node
        .wrapper()
        .env("IPTABLES_WRAPPER_SBIN", &sbin)
        .env("IPTABLES_WRAPPER_STALE_KILL_AFTER", "emptied:nft")
        .args(["stale", "--remove"])
        .output_within_limit()
        .unwrap();
    let runs = std::fs::read_to_string(node.path("live-saves")).unwrap_or_default();
    assert!(runs.lines().count() >= 2, "no later attempt: {}", stderr(&out));
    killed(&out);
    let (line, _, _) = interrupted_line(&node, "killed midway");
    assert!(line.contains("nft ipv4 raw"), "the record names raw: {line}");
    let undo = line.split("; undo: ").nth(1).unwrap();
    for command in undo.split("; ") {
        node.sh(command);
    }
    let [ipv4, _] = saves(&node, "nft");
    assert!(
        ipv4.contains("--dport 7 -j CT --notrack") && ipv4.contains("--dport 9 -j DROP"),
        "the undo ({undo}) gives back raw with the rest:\n{ipv4}"
    );
}
