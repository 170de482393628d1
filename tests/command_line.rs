//! What a careful user notices on the command line: write failures and
//! extra arguments of `--version` and `--help`, relative paths in settings,
//! how values from outside are shown in errors (escaped once, in one way),
//! the multi-call form `iptables-wrapper iptables ...`, what `detect` says
//! in a mixed state (a verdict and a line per warning; `-v` for how each
//! piece was read), and the errors one meets first (options given twice, a
//! missing install directory, a `stale` without the privilege it needs).

mod common;

use common::OutputWithin as _;
use common::{copy_program, Node, WRAPPER};
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
        let run = Command::new(WRAPPER)
            .arg(option)
            .stdout(Stdio::from(full))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = common::wait_within(run, common::CHILD_LIMIT, "the wrapper did not end");
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
        let out = Command::new(WRAPPER).args(args).output_within_limit().unwrap();
        let stderr = assert_one_line_error(&out, 2);
        assert!(
            stderr.contains("takes no arguments") && stderr.contains("see iptables-wrapper --help"),
            "{args:?}: {stderr}"
        );
    }
    // Alone they still work.
    for option in ["--version", "--help"] {
        let out = Command::new(WRAPPER).arg(option).output_within_limit().unwrap();
        assert!(out.status.success() && !out.stdout.is_empty(), "{option}: {out:?}");
    }
}

#[test]
fn a_relative_host_root_is_ignored_wherever_the_caller_stands() {
    common::root_or_skip!();
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
            .output_within_limit()
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
    common::root_or_skip!();
    let node = Node::new("relative-sbin");
    let out = node
        .command("iptables")
        .env("IPTABLES_WRAPPER_SBIN", "sbin:./bin::")
        .arg("-V")
        .current_dir(&node.dir)
        .output_within_limit()
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
    common::root_or_skip!();
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
            .output_within_limit()
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
        let out = Command::new(WRAPPER)
            .arg(OsStr::from_bytes(arg))
            .output_within_limit()
            .unwrap();
        let stderr = assert_one_line_error(&out, 2);
        assert!(stderr.contains(expected), "{expected:?} missing from: {stderr}");
    }
}

#[test]
fn multi_call_form_runs_the_named_command() {
    common::root_or_skip!();
    let node = Node::new("multicall");
    for name in ["iptables", "ip6tables", "iptables-save", "ip6tables-restore"] {
        let linked = node.command(name).arg("-V").output_within_limit().unwrap();
        let multi = node.wrapper().args([name, "-V"]).output_within_limit().unwrap();
        assert!(linked.status.success(), "{linked:?}");
        assert_eq!(multi.status.code(), linked.status.code(), "{name}: {multi:?}");
        assert_eq!(multi.stdout, linked.stdout, "{name}");
        assert_eq!(multi.stderr, linked.stderr, "{name}");
    }
    // Arguments reach the backend; as xtables-*-multi, a path names it too.
    let out = node
        .wrapper()
        .args(["/usr/sbin/iptables", "-N", "MULTI-CALL"])
        .output_within_limit()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(common::sh("iptables-nft -S").contains("-N MULTI-CALL"));
    // Through a symlink named as $XT_MULTI scripts expect.
    let multi = node.path("xtables-multi");
    std::os::unix::fs::symlink(WRAPPER, &multi).unwrap();
    let mut command = Command::new(&multi);
    node.isolate(&mut command);
    let out = command.args(["ip6tables-save"]).output_within_limit().unwrap();
    assert!(out.status.success(), "{out:?}");
    // A name that is none of the six is still a usage error.
    let out = node
        .wrapper()
        .args(["iptables-nft", "-V"])
        .output_within_limit()
        .unwrap();
    assert_one_line_error(&out, 2);
}

/// The state an upgrade leaves: the host link says nft, and legacy still
/// holds rules in both families, a DROP policy and the hint chain, beside
/// nft's own rules and hint chain.
fn mixed_node(name: &str) -> Node {
    let node = Node::new(name);
    node.sh("iptables-legacy -A INPUT -s 10.0.0.1/32 -j DROP
iptables-legacy -t nat -A PREROUTING -d 10.96.0.1/32 -j ACCEPT
iptables-legacy -P FORWARD DROP
iptables-legacy -t mangle -N KUBE-IPTABLES-HINT
ip6tables-legacy -A INPUT -s 2001:db8::1 -j DROP
iptables-nft -A INPUT -s 10.9.9.9/32 -j ACCEPT
iptables-nft -t mangle -N KUBE-IPTABLES-HINT");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node
}

fn stdout_of(out: &Output) -> String {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn detect_in_a_mixed_state_is_a_verdict_and_a_line_per_warning() {
    common::root_or_skip!();
    let node = mixed_node("detect-3am");
    let text = stdout_of(&node.wrapper().arg("detect").output_within_limit().unwrap());
    let lines: Vec<&str> = text.lines().collect();
    let link = node.host_root.join("etc/alternatives/iptables");
    assert_eq!(
        lines[0],
        format!(
            "nft for iptables: host link {} -> /usr/sbin/iptables-nft",
            link.display()
        ),
        "{text}"
    );
    let report = node.detect();
    let warnings = report["warnings"].as_array().unwrap();
    // One line per warning, and the advice the stale tables' evidence ends
    // with said once (the JSON keeps it in each).
    assert_eq!(lines.len(), 1 + warnings.len() + 1, "{text}");
    assert!(lines[1..].iter().all(|l| l.starts_with("warning: ")), "{text}");
    assert_eq!(text.matches("iptables-wrapper stale --remove").count(), 1, "{text}");
    assert!(
        !text.contains("iptables uses nft"),
        "the verdict is not repeated: {text}"
    );
    for expected in [
        "warning: points to legacy: legacy ipv4 tables: nat holds 1 rule, filter holds 1 rule, policy FORWARD DROP",
        "warning: points to legacy: legacy ipv6 tables: filter holds 1 rule",
        "warning: points to legacy: legacy ipv4 mangle chain KUBE-IPTABLES-HINT: present",
    ] {
        assert!(lines.contains(&expected), "{expected:?} not a line of:\n{text}");
    }
    // Only a path from outside (the lock file's) makes a line long.
    let lockfile = node.lockfile.display().to_string();
    for line in &lines {
        assert!(line.replace(&lockfile, "").len() <= 160, "{line}");
    }
    // How each piece was read is in -v and in the JSON.
    let verbose = stdout_of(&node.wrapper().args(["detect", "-v"]).output_within_limit().unwrap());
    assert!(verbose.starts_with(&format!("{}\n", lines[0])), "{verbose}");
    for method in ["readlink", "netlink", "getsockopt", "/proc/net/ip*_tables_names"] {
        assert!(verbose.contains(method), "{method:?} not in:\n{verbose}");
    }
    assert!(
        verbose.contains("decided by: host-link") && verbose.contains("settings:"),
        "{verbose}"
    );
    for line in &lines[1..] {
        assert!(verbose.contains(line), "{line:?} not in:\n{verbose}");
    }
    let keys: Vec<&str> = report.as_object().unwrap().keys().map(String::as_str).collect();
    for key in [
        "mode",
        "command",
        "decided_by",
        "reason",
        "settings",
        "evidence",
        "rule_counts",
        "warnings",
        "took_ms",
    ] {
        assert!(keys.contains(&key), "{key} missing from {report}");
    }
    assert!(warnings
        .iter()
        .all(|w| w.as_str().unwrap().starts_with("iptables uses nft (")));
}

#[test]
fn options_given_twice_are_one_line_usage_errors() {
    common::root_or_skip!();
    let node = Node::new("twice");
    for (args, named) in [
        (&["detect", "--json", "--json"][..], "--json given twice"),
        (
            &["detect", "--for", "iptables", "--for", "ip6tables"],
            "--for given twice",
        ),
        (&["detect", "-v", "--verbose"], "-v (--verbose) given twice"),
        (&["stale", "--json", "--json"], "--json given twice"),
        (&["stale", "-v", "-v"], "-v (--verbose) given twice"),
        (&["stale", "--remove", "--remove"], "--remove given twice"),
        (&["install", "--force", "--force"], "--force given twice"),
        (&["install", "--dir", "/a", "--dir", "/b"], "--dir given twice"),
    ] {
        let out = node.wrapper().args(args).output_within_limit().unwrap();
        let stderr = assert_one_line_error(&out, 2);
        assert!(
            stderr.contains(named) && stderr.ends_with("; see iptables-wrapper --help\n"),
            "{args:?}: {stderr}"
        );
    }
    // A value that is none of the six says what was given.
    let out = node
        .wrapper()
        .args(["detect", "--for", "iptables-nft"])
        .output_within_limit()
        .unwrap();
    let stderr = assert_one_line_error(&out, 2);
    assert!(
        stderr.contains("--for \"iptables-nft\": not one of iptables,"),
        "{stderr}"
    );
}

#[test]
fn the_empty_command_names_every_command() {
    let out = Command::new(WRAPPER).output_within_limit().unwrap();
    let stderr = assert_one_line_error(&out, 2);
    for command in ["detect", "install", "stale", "one of the six iptables commands"] {
        assert!(stderr.contains(command), "{command:?} missing from: {stderr}");
    }
}

#[test]
fn install_into_a_missing_directory_says_so_and_that_nothing_changed() {
    common::root_or_skip!();
    let node = Node::new("install-missing");
    let missing = node.path("missing");
    let out = node
        .wrapper()
        .arg("install")
        .arg("--dir")
        .arg(&missing)
        .output_within_limit()
        .unwrap();
    let stderr = assert_one_line_error(&out, 1);
    assert!(
        stderr.contains(&format!("install: {}: no such directory", missing.display()))
            && stderr.ends_with("; nothing was changed\n"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("No such file") && !stderr.contains("put back"),
        "{stderr}"
    );
    assert!(!missing.exists());
    // A file where the directory should be.
    let file = node.path("a-file");
    std::fs::write(&file, "").unwrap();
    let out = node
        .wrapper()
        .arg("install")
        .arg("--dir")
        .arg(&file)
        .output_within_limit()
        .unwrap();
    let stderr = assert_one_line_error(&out, 1);
    assert!(
        stderr.contains(&format!("install: {}: not a directory;", file.display())),
        "{stderr}"
    );
}

#[test]
fn install_prints_the_target_it_wrote() {
    common::root_or_skip!();
    let node = Node::new("install-relative");
    let dir = node.path("sbin");
    std::fs::create_dir_all(&dir).unwrap();
    copy_program(std::path::Path::new(WRAPPER), &dir.join("iptables-wrapper"));
    let mut install = Command::new(dir.join("iptables-wrapper"));
    node.isolate(&mut install);
    let printed = stdout_of(&install.arg("install").output_within_limit().unwrap());
    for name in iptables_wrapper::command::COMMAND_NAMES {
        let written = std::fs::read_link(dir.join(name)).unwrap();
        assert_eq!(written, std::path::Path::new("iptables-wrapper"));
        let line = format!("created: {} -> iptables-wrapper", dir.join(name).display());
        assert!(printed.lines().any(|l| l == line), "{line:?} not in:\n{printed}");
    }
    // Elsewhere it writes, and prints, the absolute path.
    let other = node.path("other");
    std::fs::create_dir_all(&other).unwrap();
    let mut install = Command::new(dir.join("iptables-wrapper"));
    node.isolate(&mut install);
    let printed = stdout_of(
        &install
            .arg("install")
            .arg("--dir")
            .arg(&other)
            .output_within_limit()
            .unwrap(),
    );
    let target = std::fs::read_link(other.join("iptables")).unwrap();
    assert!(target.is_absolute(), "{target:?}");
    assert!(printed.contains(&format!("-> {}\n", target.display())), "{printed}");
}

#[test]
fn stale_without_cap_net_admin_says_what_it_needs() {
    common::root_or_skip!();
    let node = mixed_node("stale-unprivileged");
    for args in [&["stale"][..], &["stale", "--remove"]] {
        let mut command = Command::new("setpriv");
        command.args(["--bounding-set=-net_admin", "--", WRAPPER]).args(args);
        node.isolate(&mut command);
        let out = command.output_within_limit().unwrap();
        assert_ne!(out.status.code(), Some(0), "{args:?}: {out:?}");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            said.contains("Operation not permitted (os error 1); reading them needs root or CAP_NET_ADMIN"),
            "{args:?}: {said}"
        );
    }
}
