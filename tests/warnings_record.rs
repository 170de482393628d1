//! The warnings record where it cannot be kept, and where an earlier one was
//! not written by the wrapper: each test in a network namespace of its own,
//! with stale legacy rules under an nft host link (a warning that needs reads
//! of its own: the legacy table lists).

mod common;

use common::Node;
use common::OutputWithin as _;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

/// A node whose wrapped calls have a warning to record, when they look.
fn node_with_stale_rules(name: &str) -> Node {
    let node = Node::new(name);
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh("iptables-legacy -A INPUT -s 192.0.2.1 -j DROP");
    node
}

/// The file-name system calls of a wrapped `iptables -V` until it execs the
/// backend, run as `sh -ec SETUP; exec strace ...` in a mount namespace of
/// its own (`unshare -m`), with the node's environment and `run_dir` as the
/// runtime directory.
fn looked_at(node: &Node, setup: &str, run_dir: &std::path::Path) -> String {
    let trace = node.path("trace");
    let mut command = Command::new("unshare");
    command
        .args(["-m", "sh", "-ec"])
        .arg(format!(
            "{setup}\nexec strace -f -qq -e trace=%file -o \"$TRACE\" \"$@\""
        ))
        .arg("sh")
        .arg(node.bin.join("iptables"))
        .arg("-V");
    node.isolate(&mut command);
    command
        .env("TRACE", &trace)
        .env("RUN", run_dir)
        .env("IPTABLES_WRAPPER_RUN_DIR", run_dir);
    let out = command.output_within_limit().expect("unshare runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    common::until_backend(&std::fs::read_to_string(trace).unwrap())
}

#[test]
fn a_record_that_cannot_be_kept_is_not_paid_for() {
    common::root_or_skip!();
    let node = node_with_stale_rules("rorecord");
    let looked_for_stale_rules = |seen: &str| seen.contains("ip_tables_names");
    let run_dir = node.path("run");
    std::fs::create_dir(&run_dir).unwrap();
    std::fs::set_permissions(&run_dir, std::fs::Permissions::from_mode(0o700)).unwrap();

    // Writable: the first call looks (no record yet), as a control.
    let writable = looked_at(&node, "", &run_dir);
    assert!(looked_for_stale_rules(&writable), "{writable}");
    std::fs::remove_file(run_dir.join("warnings")).unwrap();

    // Baked into a read-only image: a private directory on a read-only mount.
    let read_only = looked_at(
        &node,
        r#"mount --bind "$RUN" "$RUN"; mount -o remount,bind,ro "$RUN" "$RUN""#,
        &run_dir,
    );
    assert!(!looked_for_stale_rules(&read_only), "{read_only}");
    assert!(
        read_only.contains("\"warnings\""),
        "the record's age was checked: {read_only}"
    );
    assert!(!run_dir.join("warnings").exists());

    // Made 0500 (umask 0277) for a user other than root: not writable either.
    let user_dir = node.path("user-run");
    std::fs::create_dir(&user_dir).unwrap();
    std::os::unix::fs::chown(&user_dir, Some(65532), Some(65532)).unwrap();
    std::fs::set_permissions(&user_dir, std::fs::Permissions::from_mode(0o500)).unwrap();
    std::fs::set_permissions(&node.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let as_user = looked_at(
        &node,
        "set -- setpriv --reuid=65532 --regid=65532 --clear-groups \"$@\"",
        &user_dir,
    );
    assert!(
        as_user.contains("\"warnings\""),
        "the record's age was checked: {as_user}"
    );
    assert!(!looked_for_stale_rules(&as_user), "{as_user}");
}

#[test]
fn an_earlier_record_is_cleaned_when_rewritten() {
    common::root_or_skip!();
    // A record the wrapper did not write: a line with terminal escapes, a
    // 50,000-byte line, a line without a time, duplicates and more lines
    // than the record keeps.
    let node = node_with_stale_rules("dirtyrecord");
    let run_dir = node.path("run");
    std::fs::create_dir(&run_dir).unwrap();
    std::fs::set_permissions(&run_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let record = run_dir.join("warnings");
    let mut dirty =
        String::from("# iptables-wrapper warnings, most recently seen first (UTC); written at unix time 1\n");
    dirty.push_str("2026-11-29T22:40:01Z \u{1b}]0;owned\u{7}\u{1b}[2J forged \r line\n");
    dirty.push_str(&format!("2026-11-29T22:40:01Z {}\n", "y".repeat(50_000)));
    dirty.push_str("no time at all\n");
    for i in 0..40 {
        dirty.push_str(&format!("2026-11-29T22:40:01Z old warning {}\n", i % 35));
    }
    std::fs::write(&record, &dirty).unwrap();
    std::fs::set_permissions(&record, std::fs::Permissions::from_mode(0o600)).unwrap();
    let minute_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(61);
    common::set_modified(&record, minute_ago);

    let out = node.command("iptables").arg("-V").output_within_limit().unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    let cleaned = std::fs::read_to_string(&record).unwrap();
    assert!(
        cleaned.contains("stale legacy rules may still apply"),
        "the call looked"
    );
    let with_control = cleaned.lines().find(|line| line.chars().any(char::is_control));
    assert_eq!(with_control, None, "no control character survives");
    let lines: Vec<&str> = cleaned.lines().collect();
    assert!(lines.len() <= 33, "at most 32 warnings: {}", lines.len());
    for line in &lines[1..] {
        assert!(
            line.len() <= "2026-11-29T22:40:01Z ".len() + 1024 + " [cut]".len(),
            "a line of {} bytes",
            line.len()
        );
        assert!(
            line.as_bytes()[..4].iter().all(u8::is_ascii_digit),
            "every line is dated: {line}"
        );
    }
    assert!(cleaned.contains("\\u{1b}[2J forged"), "escaped, not dropped");
    assert!(lines.iter().any(|line| line.ends_with("y [cut]")), "cut, not dropped");
    let distinct: std::collections::BTreeSet<&&str> = lines.iter().collect();
    assert_eq!(distinct.len(), lines.len(), "no duplicates");
}
