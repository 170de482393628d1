//! What a careful user notices on the command line: write failures and
//! extra arguments of `--version` and `--help`, relative paths in settings,
//! how values from outside are shown in errors (escaped once, in one way),
//! and the multi-call form `iptables-wrapper iptables ...`.

mod common;
use common::{Node, WRAPPER};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output, Stdio};

/// One line on stderr, nothing on stdout, this exit status.
fn assert_one_line_error(out: &Output, status: i32) -> String {
    assert_eq!(out.status.code(), Some(status), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("iptables-wrapper: "), "{stderr}");
    stderr
}

#[test]
fn version_and_help_to_a_full_stdout_are_one_line_errors() {
    for option in ["--version", "--help"] {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let out = Command::new(WRAPPER)
            .arg(option)
            .stdout(Stdio::from(full))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{option}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{option}: {stderr}");
        assert!(stderr.contains("cannot write to stdout"), "{option}: {stderr}");
        assert!(!stderr.contains("panicked"), "{option}: {stderr}");
    }
}

#[test]
fn version_and_help_take_no_arguments() {
    for args in [
        &["--version", "extra"][..],
        &["-V", "--json"],
        &["--help", "detect"],
        &["-h", ""],
    ] {
        let out = Command::new(WRAPPER).args(args).output().unwrap();
        let stderr = assert_one_line_error(&out, 2);
        assert!(
            stderr.contains("takes no arguments") && stderr.contains("see iptables-wrapper --help"),
            "{args:?}: {stderr}"
        );
    }
    // Alone they still work.
    for option in ["--version", "--help"] {
        let out = Command::new(WRAPPER).arg(option).output().unwrap();
        assert!(out.status.success() && !out.stdout.is_empty(), "{option}: {out:?}");
    }
}

#[test]
fn a_relative_host_root_is_ignored_wherever_the_caller_stands() {
    let node = Node::new("relative-root");
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    // "host" is the host root seen from the node's directory, nothing elsewhere.
    let from = |cwd: &std::path::Path| {
        let out = node
            .command("iptables")
            .env("IPTABLES_WRAPPER_HOST_ROOT", "host")
            .env("IPTABLES_WRAPPER_LOG", "debug")
            .arg("-V")
            .current_dir(cwd)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (stdout, stderr)
    };
    let (inside, said) = from(&node.dir);
    let (elsewhere, _) = from(std::path::Path::new("/"));
    assert_eq!(inside, elsewhere, "the same decision from both directories");
    assert!(
        inside.contains("(nf_tables)"),
        "the link under ./host is not read: {inside}"
    );
    assert!(
        said.contains("IPTABLES_WRAPPER_HOST_ROOT=\"host\" ignored: not an absolute path"),
        "said at debug level: {said}"
    );
}

#[test]
fn sbin_of_only_relative_entries_names_what_was_ignored() {
    let node = Node::new("relative-sbin");
    let out = node
        .command("iptables")
        .env("IPTABLES_WRAPPER_SBIN", "sbin:./bin::")
        .arg("-V")
        .current_dir(&node.dir)
        .output()
        .unwrap();
    let stderr = assert_one_line_error(&out, 1);
    for expected in [
        "IPTABLES_WRAPPER_SBIN names no absolute directory",
        "\"sbin\"",
        "\"./bin\"",
        "\"\"",
        "not absolute",
    ] {
        assert!(stderr.contains(expected), "{expected:?} missing from: {stderr}");
    }
    assert!(!stderr.contains("tried ;"), "{stderr}");
}

#[test]
fn values_from_outside_are_escaped_once_and_bytes_shown_the_same_way() {
    let node = Node::new("escape-once");
    let cases: [(&str, &[u8], &str); 4] = [
        (
            "IPTABLES_MODE",
            b"n\x1b[31mft",
            "invalid IPTABLES_MODE=\"n\\u{1b}[31mft\": expected",
        ),
        (
            "IPTABLES_MODE",
            b"legacy\xff",
            "invalid IPTABLES_MODE=\"legacy\\xff\": not valid UTF-8",
        ),
        (
            "IPTABLES_WRAPPER_LOG",
            b"de\x1b[2Kbug",
            "invalid IPTABLES_WRAPPER_LOG=\"de\\u{1b}[2Kbug\": expected",
        ),
        (
            "IPTABLES_WRAPPER_LOG",
            b"debug\xff",
            "invalid IPTABLES_WRAPPER_LOG=\"debug\\xff\": not valid UTF-8",
        ),
    ];
    for (var, value, expected) in cases {
        let out = node
            .command("iptables")
            .env(var, OsStr::from_bytes(value))
            .arg("-V")
            .output()
            .unwrap();
        let stderr = assert_one_line_error(&out, 2);
        assert!(stderr.contains(expected), "{expected:?} missing from: {stderr}");
        assert!(!stderr.contains('\u{fffd}') && !stderr.contains("\\\\"), "{stderr}");
    }
    // The wrapper's own command line shows arguments the same way.
    for (arg, expected) in [
        (&b"frob\x1bnicate"[..], "\"frob\\u{1b}nicate\""),
        (b"frob\xffnicate", "\"frob\\xffnicate\""),
    ] {
        let out = Command::new(WRAPPER).arg(OsStr::from_bytes(arg)).output().unwrap();
        let stderr = assert_one_line_error(&out, 2);
        assert!(stderr.contains(expected), "{expected:?} missing from: {stderr}");
    }
}

#[test]
fn multi_call_form_runs_the_named_command() {
    let node = Node::new("multicall");
    for name in ["iptables", "ip6tables", "iptables-save", "ip6tables-restore"] {
        let linked = node.command(name).arg("-V").output().unwrap();
        let multi = node.wrapper().args([name, "-V"]).output().unwrap();
        assert!(linked.status.success(), "{linked:?}");
        assert_eq!(multi.status.code(), linked.status.code(), "{name}: {multi:?}");
        assert_eq!(multi.stdout, linked.stdout, "{name}");
        assert_eq!(multi.stderr, linked.stderr, "{name}");
    }
    // Arguments reach the backend; as xtables-*-multi, a path names it too.
    let out = node
        .wrapper()
        .args(["/usr/sbin/iptables", "-N", "MULTI-CALL"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(common::sh("iptables-nft -S").contains("-N MULTI-CALL"));
    // Through a symlink named as $XT_MULTI scripts expect.
    let multi = node.path("xtables-multi");
    std::os::unix::fs::symlink(WRAPPER, &multi).unwrap();
    let mut command = Command::new(&multi);
    node.isolate(&mut command);
    let out = command.args(["ip6tables-save"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    // A name that is none of the six is still a usage error.
    let out = node.wrapper().args(["iptables-nft", "-V"]).output().unwrap();
    assert_one_line_error(&out, 2);
}
