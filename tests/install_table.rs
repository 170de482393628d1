//! docs/reference.md states `install`'s rule once, as a table: what it does
//! with what it finds at a name, with and without `--force`. Each row is
//! built here (at `iptables`, the other five names free) and `install` run
//! both ways; what it did must be what the row's cells say.

mod common;

use common::OutputWithin as _;

use common::{copy_program, Node, WRAPPER};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The table's rows: the first cell, and the two outcomes' first words
/// ("linked", "left as it is", "replaced", "refused, exit N").
fn documented_rows() -> Vec<(String, String, String)> {
    let reference = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reference.md")).unwrap();
    let table = reference
        .split("| found at the name | without `--force` | with `--force` |")
        .nth(1)
        .expect("docs/reference.md has install's table");
    let outcome = |cell: &str| cell.split(':').next().unwrap().trim().to_string();
    table
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            assert_eq!(cells.len(), 3, "{line}");
            (cells[0].trim().to_string(), outcome(cells[1]), outcome(cells[2]))
        })
        .collect()
}

/// Makes what the row names at `at` (an alternatives link registered to
/// the wrapper is not built: this machine's /etc/alternatives is never
/// touched).
fn build(row: &str, at: &Path, wrapper: &Path, node: &Node) {
    let symlink = |to: &Path| std::os::unix::fs::symlink(to, at).unwrap();
    match row {
        r if r.starts_with("nothing") => {}
        r if r.starts_with("the link install writes") => symlink(wrapper),
        r if r.starts_with("a link to a backend") => symlink(Path::new("/usr/sbin/xtables-nft-multi")),
        r if r.starts_with("an alternatives link") => symlink(Path::new("/etc/alternatives/iptables")),
        r if r.starts_with("a link to another program") => {
            let other = node.path("other-program");
            if !other.exists() {
                std::fs::write(&other, "#!/bin/sh\nexit 1\n").unwrap();
            }
            symlink(&other)
        }
        r if r.starts_with("a regular file") => std::fs::write(at, "a real iptables").unwrap(),
        r if r.starts_with("the wrapper's own file") => std::fs::hard_link(wrapper, at).unwrap(),
        r if r.starts_with("anything else") => std::fs::create_dir(at).unwrap(),
        other => panic!("a row this test does not know: {other}"),
    }
}

/// What stands at `at`, to tell a change.
fn what_is(at: &Path) -> Option<(u64, Option<PathBuf>)> {
    let meta = std::fs::symlink_metadata(at).ok()?;
    Some((std::os::unix::fs::MetadataExt::ino(&meta), std::fs::read_link(at).ok()))
}

#[test]
fn install_does_what_its_table_in_docs_reference_says() {
    common::root_or_skip!();
    let node = Node::new("install-table");
    let wrapper = node.path("wrapper/iptables-wrapper");
    std::fs::create_dir_all(wrapper.parent().unwrap()).unwrap();
    copy_program(Path::new(WRAPPER), &wrapper);
    let rows = documented_rows();
    assert!(rows.len() >= 8, "{rows:?}");
    for (index, (row, without_force, with_force)) in rows.iter().enumerate() {
        for (force, documented) in [(false, without_force), (true, with_force)] {
            let dir = node.path(&format!("sbin-{index}-{force}"));
            std::fs::create_dir_all(&dir).unwrap();
            let at = dir.join("iptables");
            build(row, &at, &wrapper, &node);
            let before = what_is(&at);
            let mut install = Command::new(&wrapper);
            install.args(["install", "--dir"]).arg(&dir);
            if force {
                install.arg("--force");
            }
            let out = install.output_within_limit().unwrap();
            let after = what_is(&at);
            let did = match out.status.code() {
                Some(0) if before.is_none() => "linked".to_string(),
                Some(0) if before == after => "left as it is".to_string(),
                Some(0) => "replaced".to_string(),
                Some(code) => {
                    assert_eq!(before, after, "{row}: refused, yet changed");
                    format!("refused, exit {code}")
                }
                None => panic!("{row}: {out:?}"),
            };
            assert!(
                documented.starts_with(&did),
                "{row} (--force: {force}): documented {documented:?}, did {did:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            if did != "linked" && did != "left as it is" && did != "replaced" {
                continue;
            }
            let resolved = std::fs::canonicalize(&at).unwrap();
            assert_eq!(resolved, std::fs::canonicalize(&wrapper).unwrap(), "{row}");
        }
    }
}
