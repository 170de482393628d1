//! Helpers of the `stale` tests: running it, reading its output, and what
//! each backend holds.

use super::Node;
use std::path::PathBuf;
use std::process::Output;

pub fn stale(node: &Node, args: &[&str]) -> Output {
    node.wrapper().arg("stale").args(args).output().unwrap()
}

/// `stale` with `IPTABLES_MODE=nft`.
pub fn stale_by_override(node: &Node, args: &[&str]) -> Output {
    node.wrapper()
        .env("IPTABLES_MODE", "nft")
        .arg("stale")
        .args(args)
        .output()
        .unwrap()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)))
}

/// Both families' legacy saves, without the header lines.
pub fn legacy_saves(node: &Node) -> String {
    without_headers(&node.sh("iptables-legacy-save; ip6tables-legacy-save"))
}

pub fn nft_ruleset(node: &Node) -> String {
    node.sh("nft list ruleset")
}

pub fn without_headers(save: &str) -> String {
    save.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The backup directory a removal printed.
pub fn backup_dir_of(out: &Output) -> PathBuf {
    let text = stdout(out);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("backup: "))
        .unwrap_or_else(|| panic!("no backup line: {text}"));
    PathBuf::from(line)
}
