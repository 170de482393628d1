//! What the DaemonSet's containers run, without a shell: `metrics
//! --textfile` (the textfile loop: written whole, removed when the wrapper
//! cannot answer and on SIGTERM) and `stale --backups-in --keep-backups`
//! (the backups' rotation, ordered by number, not the clock). Each test in a
//! network namespace of its own, against the real iptables-legacy /
//! iptables-nft.

mod common;

use common::OutputWithin as _;

use common::Node;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Waits (up to 30 s) until `done` holds; false if it never did.
fn eventually(done: impl Fn() -> bool) -> bool {
    for _ in 0..300 {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// How long a loop may take to end once signalled.
const ENDS_WITHIN: Duration = Duration::from_secs(30);

fn terminate(child: Child) -> std::process::Output {
    // SAFETY: kill(2) on a child of ours that has not been waited for.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    common::wait_within(child, ENDS_WITHIN, "the loop did not end on SIGTERM")
}

fn textfile_loop(node: &Node, path: &std::path::Path, mode: Option<&str>) -> Child {
    let mut command: Command = node.wrapper();
    common::default_signals(&mut command);
    if let Some(mode) = mode {
        command.env("IPTABLES_MODE", mode);
    }
    command
        .args(["metrics", "--textfile"])
        .arg(path)
        .args(["--interval", "1s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn the_textfile_is_written_whole_and_removed_on_sigterm() {
    common::root_or_skip!();
    let node = Node::new("textfile");
    node.sh("iptables-nft -A INPUT -s 192.0.2.2/32 -j ACCEPT");
    std::fs::create_dir_all(node.path("textfile")).unwrap();
    let path = node.path("textfile/iptables_wrapper.prom");
    let child = textfile_loop(&node, &path, None);
    assert!(eventually(|| path.exists()), "no textfile written");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("iptables_wrapper_detect_timestamp_seconds"), "{text}");
    assert!(text.ends_with('\n'), "a whole file ends with a newline: {text}");
    let first = std::fs::metadata(&path).unwrap().modified().unwrap();
    assert!(
        eventually(|| std::fs::metadata(&path)
            .map(|m| m.modified().unwrap() != first)
            .unwrap_or(false)),
        "the textfile was not written again"
    );
    let out = terminate(child);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty());
    assert!(!path.exists(), "the textfile outlived the loop");
    let left: Vec<_> = std::fs::read_dir(node.path("textfile")).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Sends `signal` to the loop and waits for it; SIGKILL first if `ready`
/// never held (a loop that hangs must not outlive the test).
fn signal_when(mut child: Child, ready: bool, signal: libc::c_int, what: &str) -> std::process::Output {
    if !ready {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!("{what}; stderr: {}", String::from_utf8_lossy(&out.stderr));
    }
    // SAFETY: kill(2) on a child of ours that has not been waited for.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
    common::wait_within(child, ENDS_WITHIN, &format!("the loop did not end on signal {signal}"))
}

#[test]
fn sighup_ends_the_loop_as_sigterm_does() {
    common::root_or_skip!();
    let node = Node::new("textfile-hup");
    std::fs::create_dir_all(node.path("textfile")).unwrap();
    let path = node.path("textfile/iptables_wrapper.prom");
    let child = textfile_loop(&node, &path, None);
    let out = signal_when(child, eventually(|| path.exists()), libc::SIGHUP, "no textfile written");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{:?} {stderr}", out.status);
    assert!(stderr.contains("SIGHUP"), "{stderr}");
    assert!(!path.exists(), "the textfile outlived the loop");
}

#[test]
fn a_fifo_beside_the_textfile_blocks_nothing() {
    common::root_or_skip!();
    let node = Node::new("textfile-fifo");
    std::fs::create_dir_all(node.path("textfile")).unwrap();
    let path = node.path("textfile/iptables_wrapper.prom");
    // Where the loop once wrote its temporary file, and the names a
    // per-process temporary file would take.
    let fifos = ["iptables_wrapper.prom.tmp", ".iptables_wrapper.prom.1.tmp"];
    for fifo in fifos {
        let fifo =
            std::ffi::CString::new(node.path("textfile").join(fifo).into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; mkfifo only reads it.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    }
    let child = textfile_loop(&node, &path, None);
    let out = signal_when(
        child,
        eventually(|| path.exists()),
        libc::SIGTERM,
        "no textfile written",
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!path.exists(), "the textfile outlived the loop");
    let mut left: Vec<_> = std::fs::read_dir(node.path("textfile"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [".iptables_wrapper.prom.1.tmp", "iptables_wrapper.prom.tmp"],
        "the FIFOs, and nothing else"
    );
}

#[test]
fn a_setting_it_cannot_read_removes_the_textfile() {
    common::root_or_skip!();
    let node = Node::new("textfile-bad");
    let path = node.path("iptables_wrapper.prom");
    std::fs::write(&path, "iptables_wrapper_detect_timestamp_seconds 1\n").unwrap();
    let child = textfile_loop(&node, &path, Some("bogus"));
    assert!(eventually(|| !path.exists()), "the old textfile is still served");
    let out = terminate(child);
    assert_eq!(out.status.code(), Some(0));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("IPTABLES_MODE=\"bogus\"") && log.contains("removed"),
        "{log}"
    );
}

#[test]
fn keep_backups_keeps_the_newest_numbers_whatever_the_clock_says() {
    common::root_or_skip!();
    let node = Node::new("rotation");
    node.sh("iptables-legacy -A INPUT -s 192.0.2.1/32 -j DROP; iptables-legacy -P FORWARD DROP");
    // The live backend enforces the same, as after an upgrade: removing opens nothing.
    node.sh("iptables-nft -A INPUT -s 192.0.2.1/32 -j DROP; iptables-nft -P FORWARD DROP");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.set_host_link("ip6tables", "/usr/sbin/ip6tables-nft");
    let backups = node.path("backups");
    // Written before the clock was stepped back: dated in the future.
    for name in [
        "stale-backup-20990101T000000Z",
        "stale-backup-000003-20990101T000000Z",
        "stale-backup-000007-20990102T000000Z",
    ] {
        std::fs::create_dir_all(backups.join(name)).unwrap();
    }
    let out = node
        .wrapper()
        .args(["stale", "--remove=true", "--backups-in"])
        .arg(&backups)
        .args(["--keep-backups", "2"])
        .output_within_limit()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{log}");
    let mut kept: Vec<String> = std::fs::read_dir(&backups)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    kept.sort();
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_eq!(kept[0], "stale-backup-000007-20990102T000000Z");
    assert!(kept[1].starts_with("stale-backup-000008-20"), "{kept:?}");
    let rules = std::fs::read_to_string(backups.join(&kept[1]).join("iptables-legacy.rules")).unwrap();
    assert!(rules.contains("-A INPUT -s 192.0.2.1/32 -j DROP"), "{rules}");
    assert!(
        log.contains("removed the old backup") && log.contains("stale-backup-000003-"),
        "{log}"
    );
}

#[test]
fn a_backup_numbered_at_the_largest_is_refused_not_wrapped() {
    common::root_or_skip!();
    let node = Node::new("rotation-wrap");
    node.sh("iptables-legacy -A INPUT -s 192.0.2.1/32 -j DROP");
    node.sh("iptables-nft -A INPUT -s 192.0.2.1/32 -j DROP");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.set_host_link("ip6tables", "/usr/sbin/ip6tables-nft");
    let backups = node.path("backups");
    let largest = "stale-backup-18446744073709551615-20261202T120000Z";
    std::fs::create_dir_all(backups.join(largest)).unwrap();
    let out = node
        .wrapper()
        .args(["stale", "--remove=true", "--backups-in"])
        .arg(&backups)
        .args(["--keep-backups", "1"])
        .output_within_limit()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.contains(largest) && log.contains("no next one"), "{log}");
    let kept: Vec<_> = std::fs::read_dir(&backups).unwrap().collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(
        common::save_rule_lines("iptables-legacy-save"),
        1,
        "nothing was removed"
    );
}

#[test]
fn exit_zero_says_the_status_it_stands_for() {
    common::root_or_skip!();
    // Legacy rules and no host link: which backend is stale is not certain.
    let node = Node::new("exit-zero");
    node.sh("iptables-legacy -A INPUT -j ACCEPT");
    let backups = node.path("backups");
    let out = node
        .wrapper()
        .args(["stale", "--remove=true", "--exit-zero", "--backups-in"])
        .arg(&backups)
        .args(["--keep-backups", "1"])
        .output_within_limit()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(log.contains("refused") && log.contains("exit status 2"), "{log}");
    assert!(
        common::save_rule_lines("iptables-legacy-save") == 1,
        "legacy changed while not certain"
    );
}

#[test]
fn keep_backups_below_one_is_refused_on_one_line() {
    for bad in ["0", "-1", "ten", ""] {
        let out = Command::new(common::WRAPPER)
            .args(["stale", "--backups-in", "/nonexistent", "--keep-backups", bad])
            .output_within_limit()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("--keep-backups needs a whole number of backups to keep, 1 or more"),
            "{err}"
        );
        assert!(out.stdout.is_empty());
    }
}
