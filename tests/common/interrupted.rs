//! The stale backend of an interrupted removal's tests: a node holding
//! the same rules in both backends, its saves, and stand-in backend tools
//! that run the real one and then act on the wrapper.

use super::stale::{stale, stderr, uncounted};
use super::{write_program, Node};
use iptables_wrapper::save_text;
use std::path::{Path, PathBuf};

/// What each family holds in the stale backend (and its twin in the host's).
pub const RULES: &str = "-t mangle -A PREROUTING -p tcp --dport 8080 -j MARK --set-mark 0x4000
-t nat -A PREROUTING -p tcp --dport 80 -j REDIRECT --to-ports 8080
-A INPUT -p tcp --dport 9 -j DROP";

/// A node whose host uses `host` with `stale` holding [`RULES`] in both
/// families, twinned in `host`.
pub fn node(name: &str, host: &str, stale: &str) -> Node {
    let node = Node::new(name);
    node.set_host_link("iptables", &format!("/usr/sbin/iptables-{host}"));
    let mut script = String::new();
    for program in ["iptables", "ip6tables"] {
        for backend in [host, stale] {
            for rule in RULES.lines() {
                script.push_str(&format!("{program}-{backend} {rule}\n"));
            }
        }
    }
    node.sh(&script);
    node
}

/// Each family's save of `backend`, without headers and counters.
pub fn saves(node: &Node, backend: &str) -> [String; 2] {
    ["iptables", "ip6tables"].map(|program| uncounted(&node.sh(&format!("{program}-{backend}-save"))))
}

/// Whether a family's save holds no rule.
pub fn emptied(save: &str) -> bool {
    !save_text::lines(save.as_bytes()).any(|line| matches!(line, save_text::Line::Rule { .. }))
}

/// A directory of the real backends where each of `tools` is a stand-in
/// that runs the real one and then, when it runs in the wrapper's own (the
/// live) namespace, counts the runs of all of them in `node`'s file
/// `count` and runs the shell commands `at` gives for that run's number.
pub fn stand_ins(node: &Node, tools: &[&str], count: &str, at: &[(usize, String)]) -> PathBuf {
    let dir = node.path("sbin");
    std::fs::create_dir_all(&dir).unwrap();
    for multi in ["xtables-nft-multi", "xtables-legacy-multi"] {
        std::os::unix::fs::symlink(Path::new("/usr/sbin").join(multi), dir.join(multi)).unwrap();
    }
    let count = node.path(count);
    let cases: String = at
        .iter()
        .map(|(run, commands)| format!("{run}) {commands} ;;\n"))
        .collect();
    for tool in tools {
        let body = format!(
            "#!/bin/sh\n/usr/sbin/{tool} \"$@\" || exit\n\
             [ \"$(readlink /proc/self/ns/net)\" = \"$(readlink /proc/$PPID/ns/net)\" ] || exit 0\n\
             echo >> {count}\ncase \"$(wc -l < {count})\" in\n{cases}esac\nexit 0\n",
            count = count.display()
        );
        write_program(&dir.join(tool), &body);
    }
    dir
}

/// The line the next `stale` prints of an interrupted removal (after
/// `stale: `), and the backup and the undo commands it names.
pub fn interrupted_line(node: &Node, case: &str) -> (String, String, Vec<String>) {
    let said = stderr(&stale(node, &[]));
    let line = said
        .lines()
        .find(|l| l.contains("an interrupted removal ("))
        .and_then(|l| l.split_once("stale: "))
        .unwrap_or_else(|| panic!("{case}: stale names no interrupted removal: {said}"))
        .1
        .to_string();
    let backup = line
        .split("; backup ")
        .nth(1)
        .and_then(|rest| rest.split("; undo: ").next());
    let backup = backup
        .unwrap_or_else(|| panic!("{case}: no backup named: {line}"))
        .to_string();
    let undo = line
        .split("; undo: ")
        .nth(1)
        .unwrap()
        .split("; ")
        .map(str::to_string)
        .collect();
    (line, backup, undo)
}
