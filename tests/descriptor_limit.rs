//! A tight descriptor limit (`RLIMIT_NOFILE` of 4 to 6, set as the caller
//! would with `prlimit --nofile=N`) on a node whose rules are in legacy:
//! a wrapped call decides as it does without the limit (legacy), or
//! refuses on one line naming the limit (exit 2); it never falls to nft
//! by default past a read that failed for want of a descriptor. And what
//! the warning about an unknown state gives as its cause is the real one:
//! no `/proc` is not a missing CAP_NET_ADMIN. Each test in a network
//! namespace of its own, against the real backends.

mod common;

use common::OutputWithin as _;

use common::{without_proc, Node};
use std::os::unix::process::CommandExt;

#[test]
fn a_tight_descriptor_limit_never_defaults_past_a_failed_read() {
    common::root_or_skip!();
    let node = Node::new("nofile");
    node.sh("iptables-legacy -A INPUT -s 192.0.2.1/32 -j DROP");
    for limit in 4..=8 {
        let mut command = node.command("iptables");
        command.env("IPTABLES_WRAPPER_LOG", "warn").arg("-V");
        // SAFETY: setrlimit is async-signal-safe and changes only the child.
        unsafe {
            command.pre_exec(move || {
                let rlimit = libc::rlimit {
                    rlim_cur: limit as libc::rlim_t,
                    rlim_max: limit as libc::rlim_t,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = command.output_within_limit().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        match out.status.code() {
            Some(0) => assert!(stdout.contains("(legacy)"), "limit {limit}: {stdout} {stderr}"),
            Some(2) => {
                assert_eq!(stderr.lines().count(), 1, "limit {limit}: {stderr}");
                assert!(
                    stderr.contains(&format!("RLIMIT_NOFILE {limit}")) && stderr.contains("nothing was run"),
                    "limit {limit}: {stderr}"
                );
                assert!(stdout.is_empty(), "limit {limit}: {stdout}");
            }
            other => panic!("limit {limit}: exit {other:?}: {stdout} {stderr}"),
        }
    }
}

#[test]
fn without_proc_root_is_not_told_it_needs_cap_net_admin() {
    common::root_or_skip!();
    let node = Node::new("noproc-cause");
    node.sh("iptables-legacy -A INPUT -s 192.0.2.1/32 -j DROP");
    let mut command = node.wrapper();
    command.arg("detect");
    let out = without_proc(&command);
    let text = String::from_utf8_lossy(&out.stdout);
    let warning = text
        .lines()
        .find(|line| line.contains("part of the kernel's state is unknown"))
        .unwrap_or_else(|| panic!("{out:?}"));
    assert!(
        !warning.contains("CAP_NET_ADMIN") && warning.contains("/proc is not the kernel's procfs"),
        "{warning}"
    );
}
