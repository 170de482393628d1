//! Shared test helpers: every test that touches iptables first moves its own
//! thread into a fresh network namespace, so nothing reaches the machine's.
#![allow(dead_code)]

use std::process::{Command, Output};

/// Moves the calling thread into a new, empty network namespace.
/// Child processes spawned from this thread inherit it.
pub fn enter_new_netns() {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET) needs root");
}

/// Runs a shell script (in the caller's namespace) and panics if it fails.
pub fn sh(script: &str) -> String {
    let out = sh_output(script);
    assert!(
        out.status.success(),
        "script failed: {script}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn sh_output(script: &str) -> Output {
    Command::new("sh").arg("-ec").arg(script).output().expect("run sh")
}

/// `-A` lines printed by a save tool (e.g. `iptables-legacy-save`).
pub fn save_rule_lines(save_tool: &str) -> u64 {
    sh(save_tool).lines().filter(|l| l.starts_with("-A ")).count() as u64
}
