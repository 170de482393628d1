//! How a wrapped call runs its backend, how it fails, and the wrapper's own
//! command line (`detect`, `install`), through the real binary in a fresh
//! network namespace per test.

mod common;

use common::OutputWithin as _;
use common::{copy_program, legacy_tables, output_within, stub_backend, write_program, Node, WRAPPER};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn restore_reads_stdin_on_the_first_call() {
    common::root_or_skip!();
    let node = Node::new("restore");
    for (restore, save, rule) in [
        (
            "iptables-restore",
            "iptables-save",
            "-A INPUT -s 192.0.2.1/32 -j ACCEPT",
        ),
        (
            "ip6tables-restore",
            "ip6tables-save",
            "-A INPUT -s 2001:db8::1/128 -j ACCEPT",
        ),
    ] {
        let mut child = node.command(restore).stdin(Stdio::piped()).spawn().unwrap();
        use std::io::Write;
        let rules =
            format!("*filter\n:INPUT ACCEPT [0:0]\n:KUBE-TEST - [0:0]\n{rule}\n-A KUBE-TEST -j RETURN\nCOMMIT\n");
        child.stdin.take().unwrap().write_all(rules.as_bytes()).unwrap();
        assert!(common::wait_within(child, common::CHILD_LIMIT, "child did not end")
            .status
            .success());
        let saved = node.command(save).output_within_limit().unwrap();
        let saved = String::from_utf8_lossy(&saved.stdout);
        assert!(saved.contains(rule) && saved.contains(":KUBE-TEST"), "{saved}");
    }
    // Both went to nft (empty namespace: the default), none to legacy.
    assert!(legacy_tables("ip_tables_names").is_empty());
}

#[test]
fn exit_status_and_output_pass_through() {
    common::root_or_skip!();
    let node = Node::new("status");
    let direct = Command::new("iptables-nft")
        .args(["-C", "INPUT", "-j", "ACCEPT"])
        .output_within_limit()
        .unwrap();
    let wrapped = node
        .command("iptables")
        .args(["-C", "INPUT", "-j", "ACCEPT"])
        .output_within_limit()
        .unwrap();
    assert_eq!(wrapped.status.code(), direct.status.code());
    assert_ne!(wrapped.status.code(), Some(0));
    assert_eq!(wrapped.stderr, direct.stderr);
    let bad = node
        .command("iptables")
        .arg("--no-such-option")
        .output_within_limit()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "iptables' own usage error code");
}

#[test]
fn backend_gets_pid_arguments_environment_and_argv0() {
    common::root_or_skip!();
    // A stand-in backend that reports what it received.
    let node = Node::new("execve");
    let sbin = node.path("sbin");
    std::fs::create_dir_all(&sbin).unwrap();
    let fake = sbin.join("xtables-legacy-multi");
    write_program(
        &fake,
        "#!/bin/sh\necho \"pid=$$ argv0=$(basename $0) args=$* probe=$PROBE\"\nexit 7\n",
    );
    let child = node
        .command("iptables-save")
        .env("IPTABLES_MODE", "legacy")
        .env("IPTABLES_WRAPPER_SBIN", &sbin)
        .env("PROBE", "kept")
        .args(["-t", "nat"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = common::wait_within(child, common::CHILD_LIMIT, "child did not end");
    assert_eq!(out.status.code(), Some(7));
    // A shell script is run through its interpreter, so its $0 is the
    // script's path, whatever argv[0] the wrapper gave.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("pid={pid} argv0=xtables-legacy-multi args=-t nat probe=kept")
    );
    // argv[0], seen by a compiled backend: the caller's own, as given (the
    // multi-call binary picks its applet by argv[0]'s file name).
    copy_program(stub_backend(), &fake);
    let report = node.path("argv-report");
    let given = node.bin.join("iptables-save");
    for argv0 in [
        given.as_os_str(),
        "iptables-save".as_ref(),
        "./renamed/iptables-save".as_ref(),
    ] {
        let _ = std::fs::remove_file(&report);
        let status = node
            .command("iptables-save")
            .arg0(argv0)
            .env("IPTABLES_MODE", "legacy")
            .env("IPTABLES_WRAPPER_SBIN", &sbin)
            .arg("report")
            .arg(&report)
            .status_within_limit()
            .unwrap();
        assert!(status.success(), "{argv0:?}: {status}");
        let seen = std::fs::read_to_string(&report).unwrap();
        let expected = format!("argv [{:?}, \"report\", {:?}]", argv0, report.as_os_str());
        assert!(
            seen.lines().any(|line| line == expected),
            "{expected} missing from: {seen}"
        );
    }
}

/// Bad input: exit 2, nothing on stdout, one line on stderr naming `words`.
fn assert_bad_input(out: &std::process::Output, words: &[&str]) {
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    for word in words {
        assert!(stderr.contains(word), "{word:?} missing from: {stderr}");
    }
}

#[test]
fn invalid_override_fails_clearly_and_runs_nothing() {
    common::root_or_skip!();
    let node = Node::new("badmode");
    let out = node
        .command("iptables")
        .env("IPTABLES_MODE", "bogus")
        .args(["-A", "INPUT", "-j", "ACCEPT"])
        .output_within_limit()
        .unwrap();
    assert_bad_input(&out, &["IPTABLES_MODE", "bogus", "nft", "legacy"]);
    assert!(legacy_tables("ip_tables_names").is_empty(), "no backend ran");
    let nft = Command::new("nft")
        .args(["list", "ruleset"])
        .output_within_limit()
        .unwrap();
    assert!(nft.stdout.is_empty(), "no backend ran");
    let detect = node
        .wrapper()
        .env("IPTABLES_MODE", "bogus")
        .arg("detect")
        .output_within_limit()
        .unwrap();
    assert_eq!(detect.status.code(), Some(2));
    // A log level that is no level is bad input too.
    let out = node
        .command("iptables")
        .env("IPTABLES_WRAPPER_LOG", "verbose")
        .arg("-V")
        .output_within_limit()
        .unwrap();
    assert_bad_input(&out, &["IPTABLES_WRAPPER_LOG", "verbose", "debug"]);
}

#[test]
fn missing_backend_names_mode_reason_paths_and_package() {
    common::root_or_skip!();
    let node = Node::new("missing");
    let empty = node.path("empty-sbin");
    std::fs::create_dir_all(&empty).unwrap();
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    let out = node
        .command("iptables-save")
        .env("IPTABLES_WRAPPER_SBIN", &empty)
        .output_within_limit()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    for expected in [
        "legacy",
        "host link",
        "xtables-legacy-multi",
        "iptables-legacy-save",
        "iptables-legacy",
        "package",
    ] {
        assert!(stderr.contains(expected), "{expected:?} missing from: {stderr}");
    }
    assert!(!stderr.contains("nf_tables"), "no silent fallback to nft");
}

#[test]
fn a_backend_that_is_the_wrapper_is_a_loop_error() {
    common::root_or_skip!();
    let node = Node::new("loop");
    let sbin = node.path("loop-sbin");
    std::fs::create_dir_all(&sbin).unwrap();
    std::os::unix::fs::symlink(WRAPPER, sbin.join("xtables-nft-multi")).unwrap();
    std::fs::hard_link(WRAPPER, sbin.join("iptables-nft")).unwrap_or_else(|_| {
        std::os::unix::fs::symlink(WRAPPER, sbin.join("iptables-nft")).unwrap();
    });
    let mut command = node.command("iptables");
    command.env("IPTABLES_WRAPPER_SBIN", &sbin).arg("-V");
    let out = output_within(&mut command, Duration::from_secs(10), "the wrapper hangs in a loop");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("loop") && stderr.contains("xtables-nft-multi"),
        "{stderr}"
    );
}

/// Copies of the wrapper installed in a backend's place find each other as
/// backends: the link to the wrapper under one backend name is the wrapper
/// itself and skipped, the copy under the other is another file and run.
/// The copy, run under a backend's name, runs nothing, with one line; the
/// old code exec'd the two in turn without end.
#[test]
fn a_copy_of_the_wrapper_in_a_backends_place_runs_nothing() {
    common::root_or_skip!();
    let node = Node::new("copy-loop");
    for (linked, copied) in [
        ("iptables-nft", "xtables-nft-multi"),
        ("xtables-nft-multi", "iptables-nft"),
    ] {
        let sbin = node.path(&format!("copy-sbin-{copied}"));
        std::fs::create_dir_all(&sbin).unwrap();
        std::os::unix::fs::symlink(WRAPPER, sbin.join(linked)).unwrap();
        copy_program(Path::new(WRAPPER), &sbin.join(copied));
        let mut command = node.command("iptables");
        command
            .env("IPTABLES_MODE", "nft")
            .env("IPTABLES_WRAPPER_SBIN", &sbin)
            .arg("-V");
        let hangs = format!("{copied} (a copy) and {linked} (a link) run each other without end");
        let out = output_within(&mut command, Duration::from_secs(10), &hangs);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(out.stdout.is_empty(), "{out:?}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!("{copied} is the wrapper")) && stderr.contains("in the place of the nft backend"),
            "{stderr}"
        );
    }
}

/// A copy of the wrapper in a save tool's place. A caller the kernel
/// refuses (here: a user without CAP_NET_ADMIN) reads the kernel through the backends'
/// save tools; each copy, run as the save tool, decided in turn, was refused
/// in turn and ran the next copy as its save tool: a chain of processes each
/// waiting on the next, which grew until process creation failed (27,000 in
/// 2 s). Now a copy run under a backend's name runs nothing: one save tool
/// run and one exec of a copy, whatever the arguments.
#[test]
fn a_copy_of_the_wrapper_in_a_save_tools_place_starts_no_chain_of_processes() {
    common::root_or_skip!();
    use std::os::unix::fs::PermissionsExt;
    let node = Node::new("copy-chain");
    let copies = node.path("copies");
    std::fs::create_dir_all(&copies).unwrap();
    for name in ["iptables-nft-save", "xtables-nft-multi"] {
        copy_program(Path::new(WRAPPER), &copies.join(name));
    }
    for dir in [&node.dir, &copies] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let trace = node.path("execve.trace");
    let mut command = Command::new("timeout");
    // Bounded, should the chain come back: at most 40 processes of a user
    // nothing else runs as.
    command
        .args(["-s", "KILL", "20", "strace", "-f", "-qq", "-e", "trace=execve", "-o"])
        .arg(&trace)
        .args([
            "prlimit",
            "--nproc=40",
            "setpriv",
            "--reuid=65531",
            "--regid=65531",
            "--clear-groups",
        ])
        .arg(node.bin.join("iptables"))
        .arg("-V");
    node.isolate(&mut command);
    let out = command
        .env("IPTABLES_WRAPPER_SBIN", &copies)
        .env("IPTABLES_WRAPPER_RUN_DIR", node.path("user-run"))
        .output_within_limit()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("xtables-nft-multi is the wrapper") && stderr.contains("in the place of the nft backend"),
        "{stderr}"
    );
    let traced = std::fs::read_to_string(&trace).unwrap();
    let copies_run = traced
        .lines()
        .filter(|line| line.contains(&format!("execve(\"{}/", copies.display())))
        .count();
    assert_eq!(copies_run, 2, "the save tool once, the backend once: {traced}");
}

#[test]
fn detect_json_parses_and_explains() {
    common::root_or_skip!();
    let node = Node::new("json");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh("iptables-legacy -A INPUT -j ACCEPT; iptables-legacy -A INPUT -j DROP");
    let report = node.detect();
    assert_eq!(report["mode"], "nft");
    assert_eq!(report["command"], "iptables");
    assert_eq!(report["decided_by"], "host-link");
    assert!(report["reason"].as_str().unwrap().contains("iptables-nft"));
    let evidence = report["evidence"].as_array().unwrap();
    assert!(evidence
        .iter()
        .any(|e| e["source"] == "host-link" && e["points_to"] == "nft"));
    assert!(evidence
        .iter()
        .any(|e| e["source"] == "rule-counts" && e["points_to"] == "legacy"));
    assert!(evidence
        .iter()
        .all(|e| e["method"].is_string() && e["location"].is_string()));
    assert_eq!(report["rule_counts"]["legacy"]["exact"], 2);
    assert!(report["took_ms"].is_number());
    // The text report says the same: the verdict, mode first, and the
    // warning; -v adds the source, each piece of evidence and how it was read.
    let text = node.wrapper().arg("detect").output_within_limit().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    let verdict = format!(
        "nft for iptables: host link {} -> /usr/sbin/iptables-nft",
        node.host_root.join("etc/alternatives/iptables").display()
    );
    assert_eq!(text.lines().next(), Some(verdict.as_str()), "{text}");
    assert!(text.contains("warning: points to legacy: "), "{text}");
    let verbose = node.wrapper().args(["detect", "-v"]).output_within_limit().unwrap();
    let verbose = String::from_utf8_lossy(&verbose.stdout);
    assert_eq!(verbose.lines().next(), Some(verdict.as_str()), "{verbose}");
    assert!(
        verbose.contains("decided by: host-link") && verbose.contains("disagrees") && verbose.contains("getsockopt"),
        "{verbose}"
    );
}

#[test]
fn detect_changes_no_kernel_state() {
    common::root_or_skip!();
    let node = Node::new("sideeffects");
    let generation = || {
        iptables_wrapper::kernel::nft::NftSocket::open()
            .unwrap()
            .generation()
            .unwrap()
    };
    let before = generation();
    for _ in 0..3 {
        node.detect();
        assert_eq!(node.version_mode("iptables"), "nft");
    }
    assert_eq!(generation(), before, "the nf_tables generation did not move");
    assert!(
        legacy_tables("ip_tables_names").is_empty(),
        "no legacy table was created"
    );
    assert!(
        legacy_tables("ip6_tables_names").is_empty(),
        "no legacy table was created"
    );
    // With only legacy mangle present, nothing else is looked up.
    node.sh("iptables-legacy -t mangle -N KUBE-IPTABLES-HINT");
    let before = generation();
    assert_eq!(node.detect()["mode"], "legacy");
    assert_eq!(legacy_tables("ip_tables_names").trim(), "mangle");
    assert!(legacy_tables("ip6_tables_names").is_empty());
    assert_eq!(generation(), before);
}

#[test]
fn detect_counts_equal_the_save_tools() {
    common::root_or_skip!();
    let node = Node::new("exactcounts");
    let ruleset = |family: &str| {
        let addr = if family == "6" { "2001:db8::1" } else { "192.0.2.1" };
        format!(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n\
             -A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
             -A KUBE-SERVICES -d {addr} -p tcp -m tcp --dport 80 -j KUBE-SVC-A\n\
             -A KUBE-SVC-A -m statistic --mode random --probability 0.5 -j RETURN\nCOMMIT\n\
             *filter\n:INPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n:KUBE-FIREWALL-END - [0:0]\n\
             -A INPUT -j KUBE-FIREWALL\n-A INPUT -p tcp -m multiport --dports 22,443 -j ACCEPT\n\
             -A KUBE-FIREWALL -m conntrack --ctstate INVALID -j DROP\n-A KUBE-FIREWALL -g KUBE-FIREWALL-END\n\
             -A KUBE-FIREWALL-END -j RETURN\nCOMMIT\n\
             *mangle\n:KUBE-MARK - [0:0]\n-A KUBE-MARK -j MARK --set-xmark 0x4000/0x4000\nCOMMIT\n"
        )
    };
    node.sh(&format!("iptables-legacy-restore <<'EOF'\n{}EOF\nip6tables-nft-restore <<'EOF'\n{}EOF\niptables-nft-restore <<'EOF'\n{}EOF", ruleset("4"), ruleset("6"), ruleset("4")));
    let report = node.detect();
    let legacy = common::save_rule_lines("iptables-legacy-save") + common::save_rule_lines("ip6tables-legacy-save");
    let nft = common::save_rule_lines("iptables-nft-save") + common::save_rule_lines("ip6tables-nft-save");
    assert_eq!(report["rule_counts"]["legacy"]["exact"], legacy);
    assert_eq!(report["rule_counts"]["nft"]["exact"], nft);
    assert_eq!(nft, 2 * legacy);
    assert_eq!(report["mode"], "nft");
}

#[test]
fn install_is_idempotent_and_refuses_regular_files() {
    common::root_or_skip!();
    let node = Node::new("install");
    let dir = node.path("usr-sbin");
    std::fs::create_dir_all(&dir).unwrap();
    let install = |extra: &[&str]| {
        node.wrapper()
            .arg("install")
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .output_within_limit()
            .unwrap()
    };
    assert!(install(&[]).status.success());
    let second = install(&[]);
    assert!(second.status.success());
    assert_eq!(
        String::from_utf8_lossy(&second.stdout)
            .matches("already in place")
            .count(),
        6
    );
    for name in iptables_wrapper::command::COMMAND_NAMES {
        assert_eq!(
            std::fs::read_link(dir.join(name)).unwrap(),
            std::path::Path::new(WRAPPER)
        );
    }
    // An existing symlink (Alpine's iptables -> xtables-nft-multi) is replaced.
    std::fs::remove_file(dir.join("iptables")).unwrap();
    std::os::unix::fs::symlink("xtables-nft-multi", dir.join("iptables")).unwrap();
    assert!(install(&[]).status.success());
    assert_eq!(
        std::fs::read_link(dir.join("iptables")).unwrap(),
        std::path::Path::new(WRAPPER)
    );
    // A regular file is kept unless --force.
    std::fs::remove_file(dir.join("iptables-save")).unwrap();
    std::fs::write(dir.join("iptables-save"), "real binary").unwrap();
    std::fs::remove_file(dir.join("ip6tables")).unwrap();
    std::os::unix::fs::symlink("xtables-nft-multi", dir.join("ip6tables")).unwrap();
    let refused = install(&[]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--force"));
    assert_eq!(
        std::fs::read_to_string(dir.join("iptables-save")).unwrap(),
        "real binary"
    );
    assert_eq!(
        std::fs::read_link(dir.join("ip6tables")).unwrap(),
        std::path::Path::new("xtables-nft-multi"),
        "a refusal changes nothing"
    );
    assert!(install(&["--force"]).status.success());
    assert!(std::fs::symlink_metadata(dir.join("iptables-save"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn install_leaves_alternatives_links_and_other_wrappers_alone() {
    common::root_or_skip!();
    // Fedora 42+'s /usr/sbin/iptables is (through /usr/sbin -> bin) the
    // alternatives group's master link, and Wolfi's iptables-wrappers links
    // the six names to a file of its own: a package upgrade would put either
    // back, so install refuses both without --force and changes nothing.
    let node = Node::new("install-other");
    let dir = node.path("usr-bin");
    std::fs::create_dir_all(&dir).unwrap();
    let install = |extra: &[&str]| {
        node.wrapper()
            .arg("install")
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .output_within_limit()
            .unwrap()
    };
    let other = dir.join("iptables-wrapper");
    std::fs::write(&other, "#!/bin/sh\nexit 1\n").unwrap();
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for name in iptables_wrapper::command::COMMAND_NAMES {
        std::os::unix::fs::symlink("iptables-wrapper", dir.join(name)).unwrap();
    }
    let refused = install(&[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("another program") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_link(dir.join("iptables")).unwrap(),
        std::path::Path::new("iptables-wrapper")
    );
    // The machine's own alternatives directory is only pointed at, never touched.
    assert!(
        std::path::Path::new("/etc/alternatives").is_dir(),
        "this test needs /etc/alternatives"
    );
    std::fs::remove_file(dir.join("iptables")).unwrap();
    std::os::unix::fs::symlink("/etc/alternatives/iptables", dir.join("iptables")).unwrap();
    let forced = install(&["--force"]);
    assert!(forced.status.success(), "{}", String::from_utf8_lossy(&forced.stderr));
    std::fs::remove_file(dir.join("iptables")).unwrap();
    std::os::unix::fs::symlink("/etc/alternatives/iptables", dir.join("iptables")).unwrap();
    std::fs::remove_file(dir.join("ip6tables")).unwrap();
    std::os::unix::fs::symlink("iptables-wrapper", dir.join("ip6tables")).unwrap();
    let refused = install(&[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("alternatives link") && stderr.contains("nothing was changed"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_link(dir.join("iptables")).unwrap(),
        std::path::Path::new("/etc/alternatives/iptables")
    );
}

#[test]
fn install_under_concurrent_callers() {
    common::root_or_skip!();
    let node = Node::new("concurrent");
    let bin = node.bin.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let installer = {
        let (stop, bin) = (stop.clone(), bin.clone());
        std::thread::spawn(move || {
            let mut rounds = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || rounds < 20 {
                let out = Command::new(WRAPPER)
                    .arg("install")
                    .arg("--dir")
                    .arg(&bin)
                    .arg("--force")
                    .output_within_limit()
                    .unwrap();
                assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                // Alternate the link text so every iteration really replaces it.
                for name in ["iptables", "ip6tables-save"] {
                    let tmp = bin.join(format!("{name}.tmp"));
                    std::os::unix::fs::symlink(WRAPPER, &tmp).unwrap();
                    std::fs::rename(&tmp, bin.join(name)).unwrap();
                }
                rounds += 1;
            }
            rounds
        })
    };
    // The callers run in this thread's namespace; the installer touches only files.
    for _ in 0..60 {
        for name in ["iptables", "ip6tables-save"] {
            let out = node.command(name).arg("-V").output_within_limit().unwrap();
            assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(installer.join().unwrap() >= 20);
}

#[test]
fn cli_usage_errors_and_version() {
    let out = Command::new(WRAPPER).arg("--version").output_within_limit().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("iptables-wrapper "));
    assert!(Command::new(WRAPPER)
        .arg("--help")
        .output_within_limit()
        .unwrap()
        .status
        .success());
    for args in [
        &["frobnicate"][..],
        &["--bogus"],
        &[],
        &["detect", "--yaml"],
        &["install", "--dir"],
    ] {
        let out = Command::new(WRAPPER).args(args).output_within_limit().unwrap();
        // One line naming the problem, pointing at --help (not the whole usage).
        assert_bad_input(&out, &["see iptables-wrapper --help"]);
    }
}

#[test]
fn non_utf8_override_and_log_level_are_bad_input() {
    common::root_or_skip!();
    use std::os::unix::ffi::OsStrExt;
    let node = Node::new("nonutf8");
    let bad = std::ffi::OsStr::from_bytes(b"legacy\xff");
    for var in ["IPTABLES_MODE", "IPTABLES_WRAPPER_LOG"] {
        let out = node
            .command("iptables")
            .env(var, bad)
            .args(["-A", "INPUT", "-j", "ACCEPT"])
            .output_within_limit()
            .unwrap();
        assert_bad_input(&out, &[var, "legacy"]);
    }
    assert!(legacy_tables("ip_tables_names").is_empty(), "no backend ran");
    let nft = Command::new("nft")
        .args(["list", "ruleset"])
        .output_within_limit()
        .unwrap();
    assert!(nft.stdout.is_empty(), "no backend ran");
}

/// The names in `dir`, each with what it is (link target or file contents).
fn snapshot(dir: &std::path::Path) -> Vec<(String, String)> {
    let mut entries: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let what = match std::fs::read_link(&path) {
                Ok(target) => format!("-> {}", target.display()),
                Err(_) if path.is_dir() => "directory".into(),
                Err(_) => format!("file of {} bytes", std::fs::metadata(&path).unwrap().len()),
            };
            (path.file_name().unwrap().to_string_lossy().into_owned(), what)
        })
        .collect();
    entries.sort();
    entries
}

#[test]
fn install_never_replaces_the_wrappers_own_file() {
    common::root_or_skip!();
    let node = Node::new("ownfile");
    let dir = node.path("image-sbin");
    std::fs::create_dir_all(&dir).unwrap();
    // The wrapper's file is itself one of the six names, run under another name.
    copy_program(Path::new(WRAPPER), &dir.join("iptables-save"));
    std::os::unix::fs::symlink("iptables-save", dir.join("iptables-wrapper")).unwrap();
    std::os::unix::fs::symlink("xtables-nft-multi", dir.join("iptables")).unwrap();
    let before = snapshot(&dir);
    for extra in [&["--force"][..], &[]] {
        let out = Command::new(dir.join("iptables-wrapper"))
            .args(["install", "--dir"])
            .arg(&dir)
            .args(extra)
            .output_within_limit()
            .unwrap();
        assert_bad_input(&out, &["iptables-save", "wrapper's own file", "nothing was changed"]);
        assert_eq!(snapshot(&dir), before, "nothing changed");
    }
    // The same through a hard link of the wrapper's file.
    let other = node.path("other-sbin");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::hard_link(dir.join("iptables-save"), other.join("ip6tables")).unwrap();
    let out = Command::new(dir.join("iptables-wrapper"))
        .args(["install", "--force", "--dir"])
        .arg(&other)
        .output_within_limit()
        .unwrap();
    assert_bad_input(&out, &["ip6tables", "wrapper's own file"]);
    assert_eq!(snapshot(&other).len(), 1);
}

#[test]
fn install_dir_must_not_be_empty() {
    common::root_or_skip!();
    let node = Node::new("emptydir");
    let cwd = node.path("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let out = node
        .wrapper()
        .args(["install", "--dir", ""])
        .current_dir(&cwd)
        .output_within_limit()
        .unwrap();
    assert_bad_input(&out, &["--dir", "empty", "see iptables-wrapper --help"]);
    assert!(
        snapshot(&cwd).is_empty(),
        "nothing installed into the working directory"
    );
}

#[test]
fn install_does_not_advise_force_where_it_cannot_help() {
    common::root_or_skip!();
    let node = Node::new("dirinway");
    let dir = node.path("sbin");
    std::fs::create_dir_all(dir.join("ip6tables")).unwrap();
    let before = snapshot(&dir);
    for extra in [&["--force"][..], &[]] {
        let out = node
            .wrapper()
            .args(["install", "--dir"])
            .arg(&dir)
            .args(extra)
            .output_within_limit()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("ip6tables") && !stderr.contains("--force"), "{stderr}");
        assert_eq!(snapshot(&dir), before);
    }
}

#[test]
fn install_puts_back_what_it_changed_when_a_name_fails_midway() {
    common::root_or_skip!();
    // ip6tables, the fourth name, is a file with another file mounted over it:
    // it passes the checks, and replacing it fails (EXDEV/EBUSY) after the
    // first three names were changed.
    let node = Node::new("rollback");
    let dir = node.path("sbin");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink("xtables-nft-multi", dir.join("iptables")).unwrap();
    std::fs::write(dir.join("iptables-save"), "a real iptables-save").unwrap();
    std::fs::write(dir.join("ip6tables"), "a real ip6tables").unwrap();
    std::fs::write(node.path("mounted"), "mounted over").unwrap();
    let before = snapshot(&dir);
    let out = Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            "mount --bind \"$1\" \"$2/ip6tables\" && exec \"$3\" install --force --dir \"$2\"",
            "sh",
        ])
        .arg(node.path("mounted"))
        .arg(&dir)
        .arg(WRAPPER)
        .output_within_limit()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("ip6tables") && stderr.contains("nothing is changed"),
        "{stderr}"
    );
    assert_eq!(
        snapshot(&dir),
        before,
        "every name is as it was, no temporary file is left"
    );
}

#[test]
fn control_characters_in_evidence_are_escaped() {
    common::root_or_skip!();
    // A host link target that tries to forge a log line and colour the terminal.
    let node = Node::new("escape");
    let target = "/usr/sbin\n\u{1b}[2Kiptables-wrapper: info: all fine\u{1b}[0m/iptables-nft";
    node.set_host_link("iptables", target);
    node.sh("iptables-legacy -A INPUT -j ACCEPT");
    let clean = |text: &str| !text.chars().any(|c| c.is_control() && c != '\n');
    let out = node.version_with_warnings("iptables");
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.is_empty() && clean(&stderr), "{stderr:?}");
    assert!(
        stderr.lines().all(|l| l.starts_with("iptables-wrapper: warn: ")),
        "{stderr:?}"
    );
    assert!(stderr.contains("\\n\\u{1b}[2K"), "{stderr:?}");
    let record = std::fs::read_to_string(node.path("run/warnings")).unwrap();
    assert!(clean(&record) && record.lines().count() == 2, "{record:?}");
    let report = node.wrapper().arg("detect").output_within_limit().unwrap();
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(clean(&report), "{report:?}");
    assert!(
        report.lines().all(|l| !l.starts_with("iptables-wrapper: info")),
        "{report}"
    );
}
