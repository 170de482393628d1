//! A removal (`stale --remove`) killed at each of its steps: after each
//! backup, after its record is written, after each family's emptying (so
//! between the families too), after the last one; stale legacy and stale
//! nft, both families holding a mangle MARK, a nat REDIRECT and a filter
//! DROP, each with its twin in the host's backend. In every case no family
//! is left partly emptied; where anything was emptied, the next `stale`
//! names the backup and the undo, and the undo gives back the bytes saved
//! before (counters aside). Then the signals a removal is sent: before its
//! first emptying it stops with nothing changed, after it, it finishes and
//! reports.
//!
//! The removal is killed two ways. Where a tool of the backend commits (the
//! legacy emptying), by a stand-in `<family>-legacy-restore` placed first
//! in `IPTABLES_WRAPPER_SBIN` that runs the real one and then sends SIGKILL
//! to the wrapper after the Nth commit to the live namespace. Where the
//! wrapper acts alone (a backup it writes, the nft emptying it sends as one
//! netlink batch), by the wrapper's test seam
//! `IPTABLES_WRAPPER_STALE_KILL_AFTER=STEP`. Each test in a network
//! namespace of its own, against the real iptables-legacy / iptables-nft.

mod common;

use common::OutputWithin as _;

use common::interrupted::{emptied, interrupted_line, node, saves, stand_ins};
use common::stale::{stale, stderr, stdout};
use common::{write_program, Node};
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Stand-in `iptables-legacy-restore` and `ip6tables-legacy-restore` that,
/// after the `nth` run in the live namespace, SIGKILL the wrapper.
fn killing_restores(node: &Node, nth: usize) -> PathBuf {
    let tools = ["iptables-legacy-restore", "ip6tables-legacy-restore"];
    stand_ins(node, &tools, "live-commits", &[(nth, "kill -KILL $PPID".into())])
}

/// The wrapper's command line, with the signals these tests send at their
/// defaults whatever the runner left them as (`nohup`, a background job).
fn wrapper(node: &Node) -> Command {
    let mut command = node.wrapper();
    common::default_signals(&mut command);
    command
}

/// `stale --remove` killed by the seam after `step`.
fn killed_after(node: &Node, step: &str) -> Output {
    wrapper(node)
        .env("IPTABLES_WRAPPER_STALE_KILL_AFTER", step)
        .args(["stale", "--remove"])
        .output_within_limit()
        .unwrap()
}

/// The checks every case makes once the removal was killed: it was, no
/// family of `backend` is partly emptied, the next `stale` names the backup
/// and the undo whenever something was emptied, and the undo restores what
/// was saved before.
fn after_the_kill(node: &Node, backend: &str, before: &[String; 2], out: &Output, case: &str) {
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "{case}: the removal was not killed: {}{}",
        stdout(out),
        stderr(out)
    );
    let now = saves(node, backend);
    for (family, (now, before)) in now.iter().zip(before).enumerate() {
        assert!(
            now == before || emptied(now),
            "{case}: family {family} partly emptied:\n{now}\nwas:\n{before}"
        );
    }
    if now == *before {
        return;
    }
    let (line, backup, undo) = interrupted_line(node, case);
    assert!(Path::new(&backup).is_dir(), "{case}: {line}");
    for command in &undo {
        assert!(command.contains(&backup), "{case}: {line}");
        node.sh(command);
    }
    assert_eq!(saves(node, backend), *before, "{case}: the undo ({undo:?})");
}

#[test]
fn a_legacy_removal_killed_after_any_step_leaves_no_family_half_and_says_so() {
    common::root_or_skip!();
    for step in [
        "backup:iptables-legacy.rules",
        "backup:ip6tables-legacy.rules",
        "record",
        "emptied:legacy:ipv4",
        "emptied:legacy:ipv6",
    ] {
        let node = node("killed-legacy", "nft", "legacy");
        let before = saves(&node, "legacy");
        let out = killed_after(&node, step);
        after_the_kill(&node, "legacy", &before, &out, step);
    }
}

#[test]
fn a_legacy_removal_killed_after_each_commit_of_its_restore_tool_leaves_no_family_half() {
    common::root_or_skip!();
    for nth in 1..=6 {
        let node = node("killed-legacy-tool", "nft", "legacy");
        let before = saves(&node, "legacy");
        let sbin = killing_restores(&node, nth);
        let out = wrapper(&node)
            .env("IPTABLES_WRAPPER_SBIN", &sbin)
            .args(["stale", "--remove"])
            .output_within_limit()
            .unwrap();
        if out.status.signal().is_none() {
            // Fewer live restores than nth: the removal ended whole.
            assert!(nth > 2, "after restore {nth}: {}{}", stdout(&out), stderr(&out));
            assert!(saves(&node, "legacy").iter().all(|s| emptied(s)));
            continue;
        }
        after_the_kill(&node, "legacy", &before, &out, &format!("after live restore {nth}"));
    }
}

#[test]
fn an_nft_removal_killed_after_any_step_leaves_no_family_half_and_says_so() {
    common::root_or_skip!();
    for step in [
        "backup:iptables-nft.rules",
        "backup:ip6tables-nft.rules",
        "record",
        "emptied:nft",
    ] {
        let node = node("killed-nft", "legacy", "nft");
        let before = saves(&node, "nft");
        let out = killed_after(&node, step);
        after_the_kill(&node, "nft", &before, &out, step);
    }
}

/// The shell commands that commit to nf_tables once (its generation moves).
const MOVE_THE_GENERATION: &str = "nft add table inet iptw-moved && nft delete table inet iptw-moved";

/// A stand-in `iptables-nft-save` that, the second time it runs in the
/// wrapper's own namespace (the removal's first nft judgement, after the
/// first look), commits to nf_tables once, so that judgement reads a moving
/// generation and the removal tries again; then sends `signal` to the
/// wrapper, if any.
fn moving_the_generation(node: &Node, signal: Option<&str>) -> PathBuf {
    let kill = signal.map_or(String::new(), |signal| format!("; kill -{signal} $PPID"));
    stand_ins(
        node,
        &["iptables-nft-save"],
        "nft-saves",
        &[(2, format!("{MOVE_THE_GENERATION}{kill}"))],
    )
}

/// An nft removal whose first judgement read a moving generation empties
/// in a later attempt: the record is written before that emptying too, so
/// a kill right after it leaves a removal the next `stale` names.
#[test]
fn a_later_nft_attempt_writes_the_record_before_it_empties() {
    common::root_or_skip!();
    let node = node("later-attempt", "legacy", "nft");
    let before = saves(&node, "nft");
    let out = wrapper(&node)
        .env("IPTABLES_WRAPPER_SBIN", moving_the_generation(&node, None))
        .env("IPTABLES_WRAPPER_STALE_KILL_AFTER", "emptied:nft")
        .args(["stale", "--remove"])
        .output_within_limit()
        .unwrap();
    let saves_run = std::fs::read_to_string(node.path("nft-saves")).unwrap_or_default();
    assert!(saves_run.lines().count() >= 3, "no later attempt: {}", stderr(&out));
    assert!(saves(&node, "nft").iter().all(|save| emptied(save)), "{}", stderr(&out));
    after_the_kill(&node, "nft", &before, &out, "emptied:nft in a later attempt");
}

/// A signal that came before a later nft attempt's emptying (the first
/// attempt read a moving generation and emptied nothing) stops the
/// removal with nothing changed, as before the first attempt's.
#[test]
fn a_signal_before_a_later_nft_attempt_stops_with_nothing_changed() {
    common::root_or_skip!();
    let node = node("signal-later", "legacy", "nft");
    let before = saves(&node, "nft");
    let out = wrapper(&node)
        .env("IPTABLES_WRAPPER_SBIN", moving_the_generation(&node, Some("TERM")))
        .args(["stale", "--remove"])
        .output_within_limit()
        .unwrap();
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("stopped by SIGTERM before anything was emptied"),
        "{}",
        stderr(&out)
    );
    assert_eq!(saves(&node, "nft"), before);
    assert!(!node.path("run/stale-removal").exists());
}

/// A signal that came after the record, while nothing was emptied (the
/// kernel refused the first nft attempt's commit: a stand-in
/// `iptables-legacy-save`, the live save the first judgement reads, commits
/// to nf_tables; its second run, the next attempt's, sends SIGTERM), stops
/// the removal with nothing changed, and the record goes.
#[test]
fn a_signal_after_a_refused_nft_attempt_stops_with_nothing_changed() {
    common::root_or_skip!();
    let node = node("signal-refused", "legacy", "nft");
    let before = saves(&node, "nft");
    let dir = stand_ins(
        &node,
        &["iptables-legacy-save"],
        "live-saves",
        &[(1, MOVE_THE_GENERATION.into()), (2, "kill -TERM $PPID".into())],
    );
    let count = node.path("live-saves");
    let out = wrapper(&node)
        .env("IPTABLES_WRAPPER_SBIN", &dir)
        .args(["stale", "--remove"])
        .output_within_limit()
        .unwrap();
    let runs = std::fs::read_to_string(&count).unwrap_or_default().lines().count();
    assert!(runs >= 2, "no second attempt ({runs} live saves): {}", stderr(&out));
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("stopped by SIGTERM before anything was emptied"),
        "{}",
        stderr(&out)
    );
    assert_eq!(saves(&node, "nft"), before);
    assert!(!node.path("run/stale-removal").exists());
}

/// `detect`'s metric of interrupted removals.
fn interrupted_metric(node: &Node) -> String {
    let metrics = wrapper(node)
        .args(["detect", "--format", "prometheus"])
        .output_within_limit()
        .unwrap();
    let text = stdout(&metrics);
    text.lines()
        .find(|l| l.starts_with("iptables_wrapper_stale_removal_interrupted "))
        .unwrap_or_else(|| panic!("no metric: {text}"))
        .to_string()
}

/// A removal killed after emptying IPv4 (its backup in a directory whose
/// name a shell must be given quoted), then a removal that empties IPv6:
/// the first one's backup, the only copy of IPv4's rules, stays named by
/// `stale`, `detect` and the metric, its undo runs as printed and gives
/// IPv4 back, until the backup is removed by hand; then nothing names it
/// and the next removal drops the record.
#[test]
fn an_interrupted_removals_backup_stays_named_until_it_is_removed() {
    common::root_or_skip!();
    let node = node("finish-interrupted", "nft", "legacy");
    let before = saves(&node, "legacy");
    std::fs::create_dir(node.path("my dir")).unwrap();
    let first_backup = node.path("my dir/b;x");
    let out = wrapper(&node)
        .env("IPTABLES_WRAPPER_STALE_KILL_AFTER", "emptied:legacy:ipv4")
        .args(["stale", "--remove", "--backup-dir", first_backup.to_str().unwrap()])
        .output_within_limit()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{}", stderr(&out));
    let [ipv4, ipv6] = saves(&node, "legacy");
    assert!(emptied(&ipv4) && !emptied(&ipv6), "{ipv4}{ipv6}");
    let out = stale(&node, &["--remove"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("an interrupted removal ("), "{}", stderr(&out));
    assert!(saves(&node, "legacy").iter().all(|s| emptied(s)));
    // The second removal printed only its own backup; the first one's is
    // still named everywhere.
    let (line, backup, undo) = interrupted_line(&node, "after the second removal");
    assert_eq!(Path::new(&backup), first_backup, "{line}");
    let detect = wrapper(&node).arg("detect").output_within_limit().unwrap();
    assert!(
        stderr(&detect).contains(&format!("detect: {line}")),
        "{line}\n{}",
        stderr(&detect)
    );
    assert_eq!(
        interrupted_metric(&node),
        "iptables_wrapper_stale_removal_interrupted 1"
    );
    for command in &undo {
        node.sh(command);
    }
    assert_eq!(saves(&node, "legacy"), before, "the undo ({undo:?})");
    // Still named after its undo ran, until its backup is removed.
    interrupted_line(&node, "after the undo");
    std::fs::remove_dir_all(&first_backup).unwrap();
    let next = stale(&node, &[]);
    assert!(!stderr(&next).contains("interrupted"), "{}", stderr(&next));
    assert_eq!(
        interrupted_metric(&node),
        "iptables_wrapper_stale_removal_interrupted 0"
    );
    let out = stale(&node, &["--remove"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(!node.path("run/stale-removal").exists());
}

/// A stand-in `name` that sends `signal` to the wrapper the first time it
/// runs in the wrapper's own namespace, leaving `node`'s file `signalled`.
fn signalling(node: &Node, name: &str, signal: &str) -> PathBuf {
    let marker = node.path("signalled");
    let commands = format!(": > {}; kill -{signal} $PPID", marker.display());
    stand_ins(node, &[name], "signalling-runs", &[(1, commands)])
}

/// The exit status after SIG`signal` came: 128 + its number.
fn exit_after(signal: &str) -> i32 {
    128 + match signal {
        "TERM" => libc::SIGTERM,
        "INT" => libc::SIGINT,
        _ => libc::SIGHUP,
    }
}

#[test]
fn a_signal_before_the_first_emptying_stops_with_nothing_changed() {
    common::root_or_skip!();
    for signal in ["TERM", "INT", "HUP"] {
        let node = node("signal-before", "nft", "legacy");
        let before = saves(&node, "legacy");
        let sbin = signalling(&node, "iptables-legacy-save", signal);
        let out = wrapper(&node)
            .env("IPTABLES_WRAPPER_SBIN", &sbin)
            .args(["stale", "--remove"])
            .output_within_limit()
            .unwrap();
        assert!(node.path("signalled").exists(), "{signal}: {}", stderr(&out));
        assert_eq!(
            out.status.code(),
            Some(exit_after(signal)),
            "{signal}: {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains(&format!("stopped by SIG{signal} before anything was emptied")),
            "{}",
            stderr(&out)
        );
        assert_eq!(saves(&node, "legacy"), before, "{signal}");
        assert!(!node.path("run/stale-removal").exists(), "{signal}");
    }
}

#[test]
fn a_signal_after_the_first_emptying_waits_for_both_families_and_the_report() {
    common::root_or_skip!();
    for signal in ["TERM", "INT", "HUP"] {
        let node = node("signal-after", "nft", "legacy");
        let sbin = signalling(&node, "iptables-legacy-restore", signal);
        let out = wrapper(&node)
            .env("IPTABLES_WRAPPER_SBIN", &sbin)
            .args(["stale", "--remove"])
            .output_within_limit()
            .unwrap();
        assert!(node.path("signalled").exists(), "{signal}: {}", stderr(&out));
        assert!(saves(&node, "legacy").iter().all(|s| emptied(s)), "{signal}");
        assert!(stdout(&out).contains("nothing stale remains"), "{}", stdout(&out));
        assert_eq!(
            out.status.code(),
            Some(exit_after(signal)),
            "{signal}: {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains(&format!("SIG{signal} came during the removal")),
            "{}",
            stderr(&out)
        );
        assert!(!node.path("run/stale-removal").exists(), "{signal}");
    }
}

#[test]
fn a_signal_the_caller_ignores_stays_ignored() {
    common::root_or_skip!();
    use std::os::unix::process::CommandExt as _;
    let node = node("signal-ignored", "nft", "legacy");
    let sbin = signalling(&node, "iptables-legacy-save", "HUP");
    let mut removal = wrapper(&node);
    removal.env("IPTABLES_WRAPPER_SBIN", &sbin).args(["stale", "--remove"]);
    // SAFETY: only signal(2), async-signal-safe, between fork and exec.
    unsafe {
        removal.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let out = removal.output_within_limit().unwrap();
    assert!(node.path("signalled").exists(), "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(!stderr(&out).contains("SIGHUP"), "{}", stderr(&out));
    assert!(saves(&node, "legacy").iter().all(|s| emptied(s)));
}

#[test]
fn a_restore_left_running_by_a_killed_wrapper_keeps_locking_writers_waiting() {
    common::root_or_skip!();
    // The stand-in takes its input, kills the wrapper, and empties the
    // family a second later: a writer that takes the xtables lock meanwhile
    // must wait for it, or the emptying would delete the writer's rule.
    let node = node("orphaned-restore", "nft", "legacy");
    let dir = node.path("sbin");
    std::fs::create_dir_all(&dir).unwrap();
    for multi in ["xtables-nft-multi", "xtables-legacy-multi"] {
        std::os::unix::fs::symlink(Path::new("/usr/sbin").join(multi), dir.join(multi)).unwrap();
    }
    let input = node.path("restore-input");
    for program in ["iptables", "ip6tables"] {
        let body = format!(
            "#!/bin/sh\n[ \"$(readlink /proc/self/ns/net)\" = \"$(readlink /proc/$PPID/ns/net)\" ] || exec /usr/sbin/{program}-legacy-restore \"$@\"\n\
             cat > {input}\nkill -KILL $PPID\nsleep 1\nexec /usr/sbin/{program}-legacy-restore \"$@\" < {input}\n",
            input = input.display()
        );
        write_program(&dir.join(format!("{program}-legacy-restore")), &body);
    }
    let out = wrapper(&node)
        .env("IPTABLES_WRAPPER_SBIN", &dir)
        .args(["stale", "--remove"])
        .output_within_limit()
        .unwrap();
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    node.sh("iptables-legacy -w 10 -t mangle -A POSTROUTING -j MARK --set-mark 0x7");
    std::thread::sleep(std::time::Duration::from_secs(2));
    let mangle = node.sh("iptables-legacy-save -t mangle");
    assert!(
        mangle.contains("--set-xmark 0x7/0xffffffff"),
        "the writer's rule is kept: {mangle}"
    );
}

#[test]
fn a_record_that_cannot_be_read_is_shown_and_stops_a_removal() {
    common::root_or_skip!();
    for (case, spoil) in [
        ("mode", "chmod 0644 {r}"),
        ("byte", "printf '\\377\\n' >> {r}"),
        ("link", "mv {r} {r}.real; ln -s {r}.real {r}"),
    ] {
        let node = node(&format!("unreadable-{case}"), "nft", "legacy");
        let out = killed_after(&node, "emptied:legacy:ipv4");
        assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{case}");
        let record = node.path("run/stale-removal");
        node.sh(&spoil.replace("{r}", &record.display().to_string()));
        let shown = stderr(&stale(&node, &[]));
        let before = saves(&node, "legacy");
        let out = stale(&node, &["--remove"]);
        if case == "byte" {
            // One odd byte spoils nothing: the record is read and finished.
            assert!(shown.contains("an interrupted removal ("), "{case}: {shown}");
            assert_eq!(out.status.code(), Some(0), "{case}: {}{}", stdout(&out), stderr(&out));
            continue;
        }
        assert!(
            shown.contains("is not a private regular file of this user"),
            "{case}: {shown}"
        );
        assert_ne!(out.status.code(), Some(0), "{case}");
        assert!(
            stderr(&out).contains(&format!("{}", record.display()))
                || stdout(&out).contains(&format!("{}", record.display())),
            "{case}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        assert_eq!(saves(&node, "legacy"), before, "{case}: nothing changed");
    }
}
