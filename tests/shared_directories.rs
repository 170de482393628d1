//! Two processes writing into one directory at once, each PID 1 of its own
//! PID namespace (two containers of one pod sharing a volume or a `/run`
//! emptyDir, two image builds sharing a directory): their temporary names
//! must not collide. Counted over bounded loops (`IPTW_SHARED_DIR_TRIES`,
//! 200 by default, more for a longer hunt):
//!
//! - `install`: a run that fails must put back only what it changed itself,
//!   and no run may exit 0 with a name missing or leading elsewhere;
//! - the runtime directory: no wrapped call's count cache store may fail
//!   for want of its temporary file (another took it).

mod common;

use common::{Node, WRAPPER};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// How many times each race is run.
fn tries() -> usize {
    std::env::var("IPTW_SHARED_DIR_TRIES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200)
}

/// `program` with `args`, started as PID 1 of a PID namespace of its own
/// (with its own `/proc`), its stderr piped.
fn as_pid_1(program: &Path, args: &[&std::ffi::OsStr], prepare: impl FnOnce(&mut Command)) -> Child {
    let mut command = Command::new("unshare");
    command
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    prepare(&mut command);
    command.spawn().unwrap()
}

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
    common::root_or_skip!();
    let tries = tries();
    let node = Node::new("install-race");
    let mut succeeded_incomplete = Vec::new();
    let (mut succeeded, mut failed) = (0, 0);
    for attempt in 0..tries {
        let dir = node.path(&format!("sbin-{attempt}"));
        std::fs::create_dir(&dir).unwrap();
        let runs: Vec<_> = (0..2)
            .map(|_| {
                as_pid_1(
                    Path::new(WRAPPER),
                    &["install".as_ref(), "--dir".as_ref(), dir.as_os_str()],
                    |_| {},
                )
            })
            .collect();
        for run in runs {
            let out = common::wait_within(run, common::CHILD_LIMIT, "run did not end");
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

#[test]
fn concurrent_calls_in_separate_pid_namespaces_store_their_counts() {
    common::root_or_skip!();
    let node = Node::new("run-dir-race");
    // Rules in both backends, no hint chain, no host link: every call with
    // a fresh runtime directory counts nft's rules and stores the count.
    node.sh("iptables-legacy -A INPUT -s 192.0.2.1/32 -j DROP; iptables-nft -A INPUT -s 192.0.2.1/32 -j DROP");
    let iptables = node.bin.join("iptables");
    let mut failed_stores = Vec::new();
    for attempt in 0..tries() {
        let run_dir = node.path(&format!("run-{attempt}"));
        let calls: Vec<_> = (0..2)
            .map(|_| {
                as_pid_1(&iptables, &["-V".as_ref()], |command| {
                    node.isolate(command);
                    command
                        .env("IPTABLES_WRAPPER_RUN_DIR", &run_dir)
                        .env("IPTABLES_WRAPPER_LOG", "debug");
                })
            })
            .collect();
        for call in calls {
            let out = common::wait_within(call, common::CHILD_LIMIT, "call did not end");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "attempt {attempt}: {stderr}");
            failed_stores.extend(
                stderr
                    .lines()
                    .filter(|line| line.contains("not stored") || line.contains("not written"))
                    .map(|line| format!("attempt {attempt}: {line}")),
            );
        }
        let left: Vec<_> = std::fs::read_dir(&run_dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.starts_with('.'))
            .collect();
        assert!(left.is_empty(), "attempt {attempt}: temporary files left: {left:?}");
        std::fs::remove_dir_all(&run_dir).unwrap();
    }
    assert!(failed_stores.is_empty(), "{failed_stores:#?}");
}

#[test]
fn a_failing_install_puts_back_only_what_it_changed_itself() {
    common::root_or_skip!();
    // install --force changes iptables, iptables-save and iptables-restore,
    // then fails on ip6tables (a file with another mounted over it, in the
    // run's own mount namespace: keeping it by a hard link fails), that
    // link held back 2 s by strace. In
    // that time another process replaces iptables with a link of its own:
    // the put-back must leave that link and undo only the other two.
    let node = Node::new("install-put-back");
    let dir = node.path("sbin");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ip6tables"), "a real ip6tables").unwrap();
    std::fs::write(node.path("mounted"), "mounted over").unwrap();
    let run = Command::new("unshare")
        .args([
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount --bind \"$1\" \"$2/ip6tables\" && exec strace -o /dev/null -e inject=linkat:delay_enter=2000000 \"$3\" install --force --dir \"$2\"",
            "sh",
        ])
        .arg(node.path("mounted"))
        .arg(&dir)
        .arg(WRAPPER)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let changed_three = (0..2000).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(2));
        std::fs::read_link(dir.join("iptables-restore")).is_ok()
    });
    assert!(changed_three, "install never changed the first three names");
    let other = dir.join(".another-process");
    std::os::unix::fs::symlink("/usr/sbin/xtables-nft-multi", &other).unwrap();
    std::fs::rename(&other, dir.join("iptables")).unwrap();
    let out = common::wait_within(run, common::CHILD_LIMIT, "run did not end");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(
        std::fs::read_link(dir.join("iptables")).ok().as_deref(),
        Some(Path::new("/usr/sbin/xtables-nft-multi")),
        "the other process's link is gone: {stderr}"
    );
    let mut left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["ip6tables", "iptables"], "{stderr}");
    assert_eq!(std::fs::read(dir.join("ip6tables")).unwrap(), b"a real ip6tables");
}
