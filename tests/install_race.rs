//! Two `install` runs into one directory at once, each PID 1 of its own PID
//! namespace (two containers of one pod sharing a volume, two image builds
//! sharing a directory): their temporary names must not collide, a run that
//! fails must put back only what it changed itself, and a run that exits 0
//! must leave all six names leading to the wrapper. Counted over a bounded
//! loop (`IPTW_INSTALL_RACE_TRIES`, 200 by default): no run may exit 0 with
//! a name missing or leading elsewhere.

mod common;

use common::{Node, WRAPPER};
use std::path::Path;
use std::process::{Command, Stdio};

const NAMES: [&str; 6] = [
    "iptables",
    "iptables-save",
    "iptables-restore",
    "ip6tables",
    "ip6tables-save",
    "ip6tables-restore",
];

/// The names in `dir` that do not resolve to the wrapper.
fn not_leading_to_the_wrapper(dir: &Path) -> Vec<&'static str> {
    let wrapper = std::fs::canonicalize(WRAPPER).unwrap();
    NAMES
        .into_iter()
        .filter(|name| std::fs::canonicalize(dir.join(name)).ok().as_deref() != Some(wrapper.as_path()))
        .collect()
}

#[test]
fn concurrent_installs_in_separate_pid_namespaces_never_succeed_with_a_name_missing() {
    let tries: usize = std::env::var("IPTW_INSTALL_RACE_TRIES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let node = Node::new("install-race");
    let mut succeeded_incomplete = Vec::new();
    let (mut succeeded, mut failed) = (0, 0);
    for attempt in 0..tries {
        let dir = node.path(&format!("sbin-{attempt}"));
        std::fs::create_dir(&dir).unwrap();
        let runs: Vec<_> = (0..2)
            .map(|_| {
                Command::new("unshare")
                    .args(["--pid", "--fork", "--mount-proc", WRAPPER, "install", "--dir"])
                    .arg(&dir)
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for run in runs {
            let out = run.wait_with_output().unwrap();
            if out.status.success() {
                succeeded += 1;
                let missing = not_leading_to_the_wrapper(&dir);
                if !missing.is_empty() {
                    succeeded_incomplete.push((attempt, missing));
                }
            } else {
                failed += 1;
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert_eq!(stderr.lines().count(), 1, "attempt {attempt}: {stderr}");
            }
        }
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| !NAMES.contains(&name.as_str()))
            .collect();
        assert!(left.is_empty(), "attempt {attempt}: temporary files left: {left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    eprintln!("{tries} tries: {succeeded} runs exited 0, {failed} failed");
    assert!(
        succeeded_incomplete.is_empty(),
        "runs that exited 0 with names not leading to the wrapper (attempt, names): {succeeded_incomplete:?}"
    );
}
