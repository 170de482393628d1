//! The errors a new user meets first, each said so that the next step is
//! plain: `detect` when the chosen backend's program is missing (a warning
//! naming it, exit 3, `iptables_wrapper_backend_runnable`, `backend` in
//! JSON), a name the wrapper does not answer to, `detect`'s warning without
//! the privilege to read the kernel, `detect --format prometheus -v`, the
//! one rule for "; nothing was run", and the undo lines of `stale
//! --backups-in` as the node names them (`--backups-on-host`).

mod common;

use common::OutputWithin as _;
use common::{copy_program, write_program, Node, WRAPPER};
use std::path::Path;
use std::process::{Command, Output};

/// One line on stderr, nothing on stdout, this exit status; the line.
fn one_line_error(out: &Output, status: i32) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(status), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("iptables-wrapper: "), "{stderr}");
    stderr
}

#[test]
fn detect_says_when_the_chosen_backend_cannot_run() {
    common::root_or_skip!();
    let node = Node::new("backend-missing");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.set_host_link("ip6tables", "/usr/sbin/ip6tables-nft");
    let empty = node.path("empty-sbin");
    std::fs::create_dir_all(&empty).unwrap();
    let detect = |args: &[&str]| {
        node.wrapper()
            .env("IPTABLES_WRAPPER_SBIN", &empty)
            .arg("detect")
            .args(args)
            .output_within_limit()
            .unwrap()
    };
    let missing = empty.join("iptables-nft").display().to_string();

    let out = detect(&[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("nft for iptables: "), "{text}");
    let warning = lines.next().unwrap_or_default();
    assert!(
        warning.starts_with("warning: every iptables call will fail: no nft backend for iptables: tried ")
            && warning.contains(&missing),
        "{text}"
    );

    let out = detect(&["--json"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["backend"]["runnable"], false, "{json}");
    assert!(json["backend"]["error"].as_str().unwrap().contains(&missing), "{json}");
    assert!(json["warnings"][0].as_str().unwrap().contains(&missing), "{json}");

    let out = detect(&["-v"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\nbackend:    none found\n"),
        "{out:?}"
    );

    // The metrics still answer (exit 0): the gauge says it.
    let out = detect(&["--format", "prometheus"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for family in ["ipv4", "ipv6"] {
        let sample = format!("iptables_wrapper_backend_runnable{{family=\"{family}\",backend=\"nft\"}} 0\n");
        assert!(text.contains(&sample), "{text}");
    }

    // What detect foretold: the call fails.
    let out = node
        .command("iptables")
        .env("IPTABLES_WRAPPER_SBIN", &empty)
        .arg("-S")
        .output_within_limit()
        .unwrap();
    assert!(one_line_error(&out, 1).contains("no nft backend for iptables"));

    // With the backends where they are: 1, exit 0, the program named.
    let out = node
        .wrapper()
        .args(["detect", "--format", "prometheus"])
        .output_within_limit()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("iptables_wrapper_backend_runnable{family=\"ipv4\",backend=\"nft\"} 1\n"),
        "{out:?}"
    );
    let json = node.detect();
    assert_eq!(json["backend"]["runnable"], true, "{json}");
    assert!(
        json["backend"]["path"].as_str().unwrap().ends_with("/iptables-nft"),
        "{json}"
    );
}

#[test]
fn detect_names_a_backend_that_is_not_executable() {
    common::root_or_skip!();
    let node = Node::new("backend-not-executable");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    let sbin = node.path("sbin");
    std::fs::create_dir_all(&sbin).unwrap();
    std::fs::write(sbin.join("iptables-nft"), "not a program").unwrap();
    let out = node
        .wrapper()
        .env("IPTABLES_WRAPPER_SBIN", &sbin)
        .arg("detect")
        .output_within_limit()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "skipped {} (not executable)",
            sbin.join("iptables-nft").display()
        )),
        "{text}"
    );
}

#[test]
fn a_name_it_does_not_answer_to_is_named_with_the_ones_it_does() {
    common::root_or_skip!();
    let node = Node::new("other-names");
    for name in ["ebtables", "arptables-nft"] {
        let link = node.path(name);
        std::os::unix::fs::symlink(WRAPPER, &link).unwrap();
        let out = Command::new(&link).arg("-L").output_within_limit().unwrap();
        let line = one_line_error(&out, 2);
        assert!(
            line.contains(&format!("invoked as \"{name}\""))
                && line.contains("iptables, iptables-save, iptables-restore, ip6tables")
                && line.ends_with("; nothing was run\n")
                && !line.contains("\"-L\""),
            "{line}"
        );
    }
    let out = Command::new(WRAPPER)
        .args(["iptables-legacy", "-L"])
        .output_within_limit()
        .unwrap();
    let line = one_line_error(&out, 2);
    assert!(
        line.contains("\"iptables-legacy\" is not a command the wrapper runs")
            && line.contains("COMMAND is one of iptables, iptables-save")
            && !line.contains("unknown command"),
        "{line}"
    );
}

#[test]
fn without_privilege_detect_says_what_would_make_the_state_known() {
    common::root_or_skip!();
    let node = Node::new("detect-unprivileged");
    let mut command = Command::new("setpriv");
    command.args(["--inh-caps=-all", "--bounding-set=-all", "--", WRAPPER, "detect"]);
    node.isolate(&mut command);
    let out = command.output_within_limit().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let warning = text
        .lines()
        .find(|line| line.contains("part of the kernel's state is unknown"))
        .unwrap_or_else(|| panic!("{out:?}"));
    assert!(
        !warning.contains("see iptables-wrapper detect")
            && warning.contains("needs CAP_NET_ADMIN")
            && warning.contains("IPTABLES_MODE"),
        "{warning}"
    );
}

#[test]
fn prometheus_with_verbose_is_refused() {
    for args in [
        &["detect", "--format", "prometheus", "-v"][..],
        &["detect", "-v", "--format=prometheus"],
    ] {
        let out = Command::new(WRAPPER).args(args).output_within_limit().unwrap();
        let line = one_line_error(&out, 2);
        assert!(
            line.contains("-v goes with the text report") && line.ends_with("; see iptables-wrapper --help\n"),
            "{args:?}: {line}"
        );
    }
}

/// Every error of a wrapped call that ran no backend ends "; nothing was
/// run"; the wrapper's own command line's errors never do.
#[test]
fn nothing_was_run_ends_every_wrapped_call_error_and_no_other() {
    common::root_or_skip!();
    let node = Node::new("nothing-was-run");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    let empty = node.path("empty-sbin");
    std::fs::create_dir_all(&empty).unwrap();
    // The kernel refuses it: an interpreter that does not exist.
    let refused = node.path("refused-sbin");
    std::fs::create_dir_all(&refused).unwrap();
    write_program(&refused.join("iptables-nft"), "#!/nonexistent/interpreter\n");
    let copies = node.path("copies");
    std::fs::create_dir_all(&copies).unwrap();
    copy_program(Path::new(WRAPPER), &copies.join("iptables-nft"));
    let call = |sbin: &Path| {
        node.command("iptables")
            .env("IPTABLES_WRAPPER_SBIN", sbin)
            .arg("-S")
            .output_within_limit()
            .unwrap()
    };
    let mut standing_in = Command::new(copies.join("iptables-nft"));
    node.isolate(&mut standing_in);
    for (what, out, status) in [
        ("missing", call(&empty), 1),
        ("exec refused", call(&refused), 126),
        (
            "bad mode",
            node.command("iptables")
                .env("IPTABLES_MODE", "bogus")
                .output_within_limit()
                .unwrap(),
            2,
        ),
        ("standing in", standing_in.arg("-S").output_within_limit().unwrap(), 1),
    ] {
        let line = one_line_error(&out, status);
        assert!(line.ends_with("; nothing was run\n"), "{what}: {line}");
    }
    for args in [&["detect", "--bogus"][..], &["stale", "--bogus"], &["nonsense"]] {
        let out = node.wrapper().args(args).output_within_limit().unwrap();
        let line = one_line_error(&out, 2);
        assert!(!line.contains("nothing was run"), "{args:?}: {line}");
    }
}

#[test]
fn backups_on_host_names_the_undo_as_the_node_types_it() {
    common::root_or_skip!();
    let node = Node::new("backups-on-host");
    node.sh("iptables-legacy -A INPUT -s 192.0.2.1/32 -j DROP");
    // The live backend enforces the same, as after an upgrade: removing opens nothing.
    node.sh("iptables-nft -A INPUT -s 192.0.2.1/32 -j DROP");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.set_host_link("ip6tables", "/usr/sbin/ip6tables-nft");
    let backups = node.path("backups");
    std::fs::create_dir_all(backups.join("stale-backup-000001-20260101T000000Z")).unwrap();
    let out = node
        .wrapper()
        .args(["stale", "--remove=true", "--backups-in"])
        .arg(&backups)
        .args([
            "--keep-backups",
            "1",
            "--backups-on-host",
            "/run/iptables-wrapper-stale-backups",
        ])
        .output_within_limit()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let undo = log
        .lines()
        .find(|line| line.starts_with("iptables-wrapper: stale: undo on the node: iptables-legacy-restore < "))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        undo.contains("< /run/iptables-wrapper-stale-backups/stale-backup-000002-")
            && undo.ends_with("/iptables-legacy.rules"),
        "{undo}"
    );
    assert!(
        log.contains("removed the old backup")
            && log.contains("(on the node: /run/iptables-wrapper-stale-backups/stale-backup-000001-20260101T000000Z)"),
        "{log}"
    );
    for args in [
        &["stale", "--backups-on-host", "/run/x"][..],
        &["stale", "--backups-in", "/x", "--backups-on-host", "relative"],
    ] {
        let out = Command::new(WRAPPER).args(args).output_within_limit().unwrap();
        assert!(one_line_error(&out, 2).contains("--backups-on-host"), "{args:?}");
    }
}
