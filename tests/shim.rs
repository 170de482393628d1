//! The wrapper as a transparent shim: a wrapped call's backend inherits
//! exactly what the caller gave the wrapper, the wrapper adds nothing to
//! stdout or stderr unless asked (its warnings go to the warnings record),
//! and the backend search runs nothing from an unintended place, with or
//! without `/proc`. A stand-in backend (tests/shim/stub_backend.rs, compiled
//! here with rustc) reports what it inherited, wrapped and run directly.

mod common;

use common::seccomp::{refuse_syscall, refuse_wrapper_raw_sockets};
use common::OutputWithin as _;
use common::{copy_program, stub_backend as stub, without_proc, Node, WRAPPER};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A node whose nft backend is the stand-in: `wrapped` is the wrapper's
/// `iptables` link, `direct` the stand-in itself under the name `iptables`.
struct Shim {
    node: Node,
    sbin: PathBuf,
    direct: PathBuf,
    report: PathBuf,
}

impl Shim {
    fn new(name: &str) -> Shim {
        let node = Node::new(name);
        let sbin = node.path("sbin");
        let direct = node.path("direct/iptables");
        std::fs::create_dir_all(&sbin).unwrap();
        std::fs::create_dir_all(direct.parent().unwrap()).unwrap();
        copy_program(stub(), &sbin.join("xtables-nft-multi"));
        // The backend's own link for the command, as packages install it.
        std::os::unix::fs::symlink("xtables-nft-multi", sbin.join("iptables-nft")).unwrap();
        copy_program(stub(), &direct);
        let report = node.path("report");
        Shim {
            node,
            sbin,
            direct,
            report,
        }
    }

    fn wrapped(&self) -> PathBuf {
        self.node.bin.join("iptables")
    }

    /// `program` run through `via` (a command that execs its arguments),
    /// with a fixed environment and standard streams on /dev/null.
    fn command(&self, via: &[&str], program: &Path, args: &[&str]) -> Command {
        let mut command = match via.split_first() {
            Some((first, rest)) => {
                let mut command = Command::new(first);
                command.args(rest).arg(program);
                command
            }
            None => Command::new(program),
        };
        command
            .args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("IPTABLES_MODE", "nft")
            .env("IPTABLES_WRAPPER_SBIN", &self.sbin)
            .env("IPTABLES_WRAPPER_RUN_DIR", self.node.path("run"))
            .env("PROBE", "a b\tc")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    }

    /// The stand-in's report when run wrapped or directly.
    fn report(&self, wrapped: bool, via: &[&str], customize: &dyn Fn(&mut Command)) -> String {
        let _ = std::fs::remove_file(&self.report);
        let program = if wrapped { self.wrapped() } else { self.direct.clone() };
        let mut command = self.command(via, &program, &["report", self.report.to_str().unwrap()]);
        customize(&mut command);
        let status = command.status_within_limit().unwrap();
        assert!(status.success(), "{status:?}");
        std::fs::read_to_string(&self.report).unwrap()
    }

    /// Wrapped and direct reports, which must be equal; returns one.
    fn same_both_ways(&self, via: &[&str], customize: &dyn Fn(&mut Command)) -> String {
        let wrapped = self.report(true, via, customize);
        let direct = self.report(false, via, customize);
        self.assert_same(&wrapped, &direct, via);
        wrapped
    }

    /// Wrapped and direct reports are equal but for argv[0], the program
    /// each was run by (see `argv0`), and the process name (`comm`).
    fn assert_same(&self, wrapped: &str, direct: &str, via: &[&str]) {
        assert_eq!(argv0(wrapped).1, argv0(direct).1, "via {via:?}");
        let without_argv = |report: &str| {
            report
                .lines()
                .filter(|l| !l.starts_with("argv ") && !l.starts_with("comm "))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(without_argv(wrapped), without_argv(direct), "via {via:?}");
    }
}

/// A report's argv, split into argv[0] and the rest.
fn argv0(report: &str) -> (String, String) {
    let argv = report.lines().find_map(|l| l.strip_prefix("argv [")).unwrap();
    let (argv0, rest) = argv.split_once(", ").unwrap();
    (argv0.trim_matches('"').to_string(), rest.to_string())
}

fn status_bits(report: &str, key: &str) -> u64 {
    let line = report.lines().find(|l| l.starts_with(key)).unwrap();
    u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
}

fn has_fd(report: &str, fd: u32) -> bool {
    report.lines().any(|l| l.starts_with(&format!("fd {fd} ")))
}

const SIGHUP_BIT: u64 = 1 << (libc::SIGHUP - 1);
const SIGPIPE_BIT: u64 = 1 << (libc::SIGPIPE - 1);

#[test]
fn backend_inherits_signals_descriptors_environment_cwd_and_limits() {
    common::root_or_skip!();
    let shim = Shim::new("inherit");
    let plain = shim.same_both_ways(&[], &|_| {});
    assert_eq!(
        status_bits(&plain, "SigIgn") & SIGPIPE_BIT,
        0,
        "SIGPIPE is not ignored: {plain}"
    );
    assert!(plain.contains("env \"PROBE\"=\"a b\\tc\""), "{plain}");

    // nohup: SIGHUP ignored, and still ignored in the backend.
    let nohup = shim.same_both_ways(&["nohup"], &|_| {});
    let ignored_here = status_bits(&plain, "SigIgn");
    assert_eq!(status_bits(&nohup, "SigIgn"), ignored_here | SIGHUP_BIT, "{nohup}");

    // Closed descriptors stay closed.
    let no_stdin = shim.same_both_ways(&["sh", "-c", "exec \"$@\" <&-", "sh"], &|_| {});
    assert!(!has_fd(&no_stdin, 0) && has_fd(&no_stdin, 1), "{no_stdin}");
    let none = shim.same_both_ways(&["sh", "-c", "exec \"$@\" <&- >&- 2>&-", "sh"], &|_| {});
    assert!(!(0..3).any(|fd| has_fd(&none, fd)), "{none}");

    // A blocked mask, ignored signals, umask, limits, an extra descriptor
    // and a working directory of the caller's own.
    let cwd = shim.node.path("direct");
    let custom = shim.same_both_ways(&[], &|command| {
        command.current_dir(&cwd);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(|| {
                let mut blocked: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut blocked);
                libc::sigaddset(&mut blocked, libc::SIGUSR1);
                libc::sigaddset(&mut blocked, libc::SIGTERM);
                libc::sigprocmask(libc::SIG_BLOCK, &blocked, std::ptr::null_mut());
                libc::signal(libc::SIGINT, libc::SIG_IGN);
                libc::signal(libc::SIGPIPE, libc::SIG_IGN);
                libc::umask(0o027);
                let limit = libc::rlimit {
                    rlim_cur: 512,
                    rlim_max: 4096,
                };
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
                let fd = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_APPEND);
                if fd != 7 {
                    libc::dup2(fd, 7);
                    libc::close(fd);
                }
                Ok(())
            });
        }
    });
    let blocked = (1 << (libc::SIGUSR1 - 1)) | (1 << (libc::SIGTERM - 1));
    assert_eq!(status_bits(&custom, "SigBlk"), blocked, "{custom}");
    assert_eq!(
        status_bits(&custom, "SigIgn"),
        ignored_here | (1 << (libc::SIGINT - 1)) | SIGPIPE_BIT,
        "{custom}"
    );
    assert!(
        custom.contains("Umask:\t0027") && custom.contains("fd 7 -> /dev/null"),
        "{custom}"
    );
    assert!(custom.contains(&format!("cwd Some({cwd:?})")), "{custom}");
}

#[test]
fn a_closed_pipe_kills_the_backend_as_it_would_directly() {
    common::root_or_skip!();
    // `iptables-save | head -1`: the backend dies of SIGPIPE (status 141 in
    // the pipeline), through the wrapper as directly.
    let shim = Shim::new("sigpipe");
    for program in [shim.wrapped(), shim.direct.clone()] {
        let out = shim
            .command(
                &[
                    "bash",
                    "-c",
                    "\"$@\" | head -1 >/dev/null; echo ${PIPESTATUS[0]}",
                    "bash",
                ],
                &program,
                &["flood"],
            )
            .stdout(Stdio::piped())
            .output_within_limit()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "141", "{program:?}");
    }
}

/// What a wrapped `iptables -V` looked at before it ran the backend: its
/// file-name system calls, traced (the backend's own are cut off).
fn looked_at(node: &Node, customize: &dyn Fn(&mut Command)) -> String {
    let trace = node.path("trace");
    let mut command = Command::new("strace");
    command
        .args(["-f", "-qq", "-e", "trace=%file", "-o"])
        .arg(&trace)
        .arg(node.bin.join("iptables"))
        .arg("-V");
    node.isolate(&mut command);
    customize(&mut command);
    let out = command.output_within_limit().expect("strace runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    common::until_backend(&std::fs::read_to_string(trace).unwrap())
}

#[test]
fn warnings_that_need_reads_of_their_own_are_looked_for_once_a_minute() {
    common::root_or_skip!();
    // Stale legacy rules while the host link says nft: seeing them takes
    // the legacy table lists, which the decision itself does not need.
    let node = Node::new("looks");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh("iptables-legacy -A INPUT -s 192.0.2.1 -j DROP");
    let record = node.path("run/warnings");
    let looked_for_stale_rules = |seen: &str| seen.contains("ip_tables_names");

    let first = looked_at(&node, &|_| {});
    assert!(looked_for_stale_rules(&first), "no record yet: a call looks\n{first}");
    let recorded = std::fs::read_to_string(&record).unwrap();
    assert!(recorded.contains("stale legacy rules may still apply"), "{recorded}");

    let within_a_minute = looked_at(&node, &|_| {});
    assert!(
        !looked_for_stale_rules(&within_a_minute) && within_a_minute.contains("run/warnings\""),
        "a fresh record: the call only checks its age\n{within_a_minute}"
    );
    // A warning asked for on stderr is always looked for.
    let asked = looked_at(&node, &|command| {
        command.env("IPTABLES_WRAPPER_LOG", "warn");
    });
    assert!(looked_for_stale_rules(&asked), "{asked}");

    // A minute later the next call looks again and refreshes the record.
    let minute_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(61);
    common::set_modified(&record, minute_ago);
    let later = looked_at(&node, &|_| {});
    assert!(looked_for_stale_rules(&later), "{later}");
    let age = std::fs::metadata(&record)
        .unwrap()
        .modified()
        .unwrap()
        .elapsed()
        .unwrap_or_default();
    assert!(age.as_secs() < 30, "refreshed: {age:?}");

    // Where no record can be kept and stderr shows nothing, nobody would
    // see the warning: no call looks.
    let open_dir = node.path("open-run");
    std::fs::create_dir_all(&open_dir).unwrap();
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let unseen = looked_at(&node, &|command| {
        command.env("IPTABLES_WRAPPER_RUN_DIR", &open_dir);
    });
    assert!(!looked_for_stale_rules(&unseen), "{unseen}");

    // Once the stale rules are gone, the next look leaves the record's
    // earlier warning as it was seen, with its time, and adds nothing.
    node.sh("iptables-legacy -F INPUT");
    common::set_modified(&record, minute_ago);
    let before = std::fs::read_to_string(&record).unwrap();
    assert!(looked_for_stale_rules(&looked_at(&node, &|_| {})));
    let after = std::fs::read_to_string(&record).unwrap();
    assert_eq!(
        before.lines().skip(1).collect::<Vec<_>>(),
        after.lines().skip(1).collect::<Vec<_>>()
    );
}

#[test]
fn the_record_keeps_true_times_where_the_clock_syscall_is_refused() {
    common::root_or_skip!();
    // The record's clock is a plain clock_gettime syscall; under a seccomp
    // filter that refuses it, the vDSO's answer dates the record instead.
    let node = Node::new("clock");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh("iptables-legacy -A INPUT -s 192.0.2.1 -j DROP");
    let mut command = node.command("iptables");
    command.arg("-V");
    let out = refuse_syscall(&mut command, libc::SYS_clock_gettime, &[])
        .output_within_limit()
        .unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    let recorded = std::fs::read_to_string(node.path("run/warnings")).unwrap();
    let written_at: u64 = recorded
        .lines()
        .next()
        .and_then(|header| header.rsplit(' ').next())
        .and_then(|time| time.parse().ok())
        .unwrap_or_else(|| panic!("{recorded}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(now.abs_diff(written_at) < 60, "{recorded}");
    assert!(recorded.contains("stale legacy rules may still apply"), "{recorded}");
}

#[test]
fn own_messages_with_stderr_closed_write_nothing_and_do_not_crash() {
    common::root_or_skip!();
    let shim = Shim::new("nostderr");
    // Stale legacy rules while the host link says nft: a warning.
    shim.node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    shim.node.sh("iptables-legacy -A INPUT -j ACCEPT");
    let closed = ["sh", "-c", "exec \"$@\" 2>&-", "sh"];
    let run = |program: &Path, env: &[(&str, &str)]| {
        let mut command = shim.command(&closed, program, &["-V"]);
        command
            .env("IPTABLES_WRAPPER_HOST_ROOT", &shim.node.host_root)
            .env("IPTABLES_WRAPPER_LOG", "debug");
        for (name, value) in env {
            command.env(name, value);
        }
        command.status_within_limit().unwrap()
    };
    // Bad input and a missing backend: the status says it, nothing crashes.
    let bad = run(&shim.wrapped(), &[("IPTABLES_MODE", "bogus")]);
    assert_eq!(bad.code(), Some(2), "{bad:?}");
    let empty = shim.node.path("empty");
    std::fs::create_dir_all(&empty).unwrap();
    // A warning is recorded, then the backend is missing. Nothing meant for
    // stderr lands in a file.
    let missing = run(
        &shim.wrapped(),
        &[
            ("IPTABLES_MODE", ""),
            ("IPTABLES_WRAPPER_SBIN", empty.to_str().unwrap()),
        ],
    );
    assert_eq!(missing.code(), Some(1), "{missing:?}");
    assert_eq!(missing.signal(), None);
    let record = std::fs::read_to_string(shim.node.path("run/warnings")).unwrap();
    assert!(
        record.lines().skip(1).all(|l| l.contains("stale legacy rules")),
        "{record}"
    );
    assert!(!record.contains("iptables-wrapper:"), "{record}");
}

#[test]
fn wrapped_calls_print_only_what_the_backend_prints_and_record_warnings() {
    common::root_or_skip!();
    // The Docker case: the host link says nft, stale legacy rules remain.
    let node = Node::new("silent");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh("iptables-legacy -A INPUT -s 192.0.2.1 -j DROP");
    let record = node.path("run/warnings");
    let out = node
        .command("iptables")
        .args(["-t", "nat", "-N", "DOCKER"])
        .output_within_limit()
        .unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    assert!(node.sh("iptables-nft -t nat -S").contains("-N DOCKER"));
    let recorded = std::fs::read_to_string(&record).unwrap();
    assert!(recorded.starts_with("# iptables-wrapper warnings"), "{recorded}");
    assert!(
        recorded
            .lines()
            .nth(1)
            .unwrap()
            .contains("stale legacy rules may still apply"),
        "{recorded}"
    );
    assert_eq!(
        std::fs::metadata(node.path("run")).unwrap().permissions().mode() & 0o777,
        0o700
    );
    // The same warnings again within a minute: the record is left alone.
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(&record).unwrap().ino();
    assert!(node
        .command("iptables")
        .arg("-V")
        .output_within_limit()
        .unwrap()
        .stderr
        .is_empty());
    assert_eq!(std::fs::metadata(&record).unwrap().ino(), inode, "not rewritten");

    // Asked for: the warning on stderr, at the level asked.
    let loud = node.version_with_warnings("iptables");
    let stderr = String::from_utf8_lossy(&loud.stderr);
    assert!(
        stderr.starts_with("iptables-wrapper: warn: ") && stderr.contains("stale legacy"),
        "{stderr}"
    );
    let off = node
        .command("iptables")
        .env("IPTABLES_WRAPPER_LOG", "off")
        .arg("-V")
        .output_within_limit()
        .unwrap();
    assert!(off.stderr.is_empty());
    // A person at a terminal sees warnings without asking.
    let on_terminal = Command::new("script")
        .args(["-qec"])
        .arg(format!("{} -V", node.bin.join("iptables").display()))
        .arg("/dev/null")
        .env("IPTABLES_WRAPPER_HOST_ROOT", &node.host_root)
        .env("XTABLES_LOCKFILE", &node.lockfile)
        .env("IPTABLES_WRAPPER_RUN_DIR", node.path("run"))
        .env_remove("IPTABLES_WRAPPER_LOG")
        .env_remove("IPTABLES_MODE")
        .stdin(Stdio::null())
        .output_within_limit()
        .unwrap();
    let shown = String::from_utf8_lossy(&on_terminal.stdout);
    assert!(
        shown.contains("iptables-wrapper: warn: ") && shown.contains("(nf_tables)"),
        "{shown}"
    );

    // An unusable runtime directory: no record, the call still silent and fine.
    let open_dir = node.path("open-run");
    std::fs::create_dir_all(&open_dir).unwrap();
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = node
        .command("iptables")
        .env("IPTABLES_WRAPPER_RUN_DIR", &open_dir)
        .arg("-V")
        .output_within_limit()
        .unwrap();
    assert!(out.status.success() && out.stderr.is_empty());
    assert!(
        std::fs::read_dir(&open_dir).unwrap().next().is_none(),
        "nothing written"
    );
}

#[test]
fn empty_and_relative_search_entries_are_ignored() {
    common::root_or_skip!();
    let shim = Shim::new("relative");
    // A planted backend in the caller's working directory, and under a
    // relative entry.
    let cwd = shim.node.path("cwd");
    std::fs::create_dir_all(cwd.join("rel")).unwrap();
    for dir in [cwd.clone(), cwd.join("rel")] {
        copy_program(stub(), &dir.join("xtables-nft-multi"));
    }
    for sbin in ["/nonexistent:", ":/nonexistent", "rel", "."] {
        let _ = std::fs::remove_file(&shim.report);
        let out = shim
            .command(&[], &shim.wrapped(), &["report", shim.report.to_str().unwrap()])
            .current_dir(&cwd)
            .env("IPTABLES_WRAPPER_SBIN", sbin)
            .env("IPTABLES_WRAPPER_LOG", "debug")
            .stderr(Stdio::piped())
            .output_within_limit()
            .unwrap();
        assert!(!shim.report.exists(), "{sbin:?}: the planted backend ran");
        assert_eq!(out.status.code(), Some(1), "{sbin:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("ignored: not an absolute path"), "{sbin:?}: {stderr}");
    }
}

#[test]
fn candidates_that_cannot_run_are_skipped() {
    common::root_or_skip!();
    let shim = Shim::new("unrunnable");
    let first = shim.node.path("first");
    std::fs::create_dir_all(first.join("iptables-nft")).unwrap();
    copy_program(stub(), &first.join("xtables-nft-multi"));
    std::fs::set_permissions(first.join("xtables-nft-multi"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let sbin = format!("{}:{}", first.display(), shim.sbin.display());
    let out = shim
        .command(&[], &shim.wrapped(), &["report", shim.report.to_str().unwrap()])
        .env("IPTABLES_WRAPPER_SBIN", &sbin)
        .stderr(Stdio::piped())
        .output_within_limit()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(shim.report.exists(), "the good backend in the next directory ran");
    // With nothing runnable at all, the error names what was skipped and why.
    let out = shim
        .command(&[], &shim.wrapped(), &["-V"])
        .env("IPTABLES_WRAPPER_SBIN", &first)
        .stderr(Stdio::piped())
        .output_within_limit()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not executable") && stderr.contains("not a regular file"),
        "{stderr}"
    );
    assert!(!stderr.contains("tried ;"), "no empty list of tried paths: {stderr}");
}

#[test]
fn the_loop_guard_works_without_proc() {
    common::root_or_skip!();
    let shim = Shim::new("noproc");
    let looping = shim.node.path("loop-sbin");
    std::fs::create_dir_all(&looping).unwrap();
    std::os::unix::fs::symlink(WRAPPER, looping.join("xtables-nft-multi")).unwrap();
    let mut command = shim.command(&[], &shim.wrapped(), &["-V"]);
    command.env("IPTABLES_WRAPPER_SBIN", &looping);
    let out = without_proc(&command);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("would run the wrapper itself (a loop)"), "{stderr}");
    // And without /proc a good backend still runs.
    let command = shim.command(&[], &shim.wrapped(), &["report", shim.report.to_str().unwrap()]);
    let out = without_proc(&command);
    assert!(out.status.success(), "{out:?}");
    assert!(shim.report.exists());
}

/// How a caller leaves one signal before it execs the wrapper (or the
/// backend directly): ignored or not, blocked or not, and whether one is
/// pending, for the process (`kill`) or for its thread (`raise`).
#[derive(Clone, Copy, Debug)]
struct CallerSignal {
    signal: libc::c_int,
    ignored: bool,
    blocked: bool,
    pending: Pending,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Pending {
    No,
    Process,
    Thread,
}

impl CallerSignal {
    /// Every state a caller can exec in: a pending signal needs it blocked.
    fn all(signal: libc::c_int) -> Vec<CallerSignal> {
        let mut all = Vec::new();
        for ignored in [false, true] {
            for (blocked, pending) in [
                (false, Pending::No),
                (true, Pending::No),
                (true, Pending::Process),
                (true, Pending::Thread),
            ] {
                all.push(CallerSignal {
                    signal,
                    ignored,
                    blocked,
                    pending,
                });
            }
        }
        all
    }

    fn bit(&self) -> u64 {
        1 << (self.signal - 1)
    }

    fn apply<'a>(&self, command: &'a mut Command) -> &'a mut Command {
        let state = *self;
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(move || {
                if state.ignored {
                    libc::signal(state.signal, libc::SIG_IGN);
                }
                if state.blocked {
                    let mut set: libc::sigset_t = std::mem::zeroed();
                    libc::sigemptyset(&mut set);
                    libc::sigaddset(&mut set, state.signal);
                    libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
                }
                match state.pending {
                    Pending::No => {}
                    Pending::Process => {
                        libc::kill(libc::getpid(), state.signal);
                    }
                    Pending::Thread => {
                        libc::raise(state.signal);
                    }
                }
                Ok(())
            })
        }
    }

    /// The backend's report shows exactly this state.
    fn assert_in(&self, report: &str) {
        let has = |key| status_bits(report, key) & self.bit() != 0;
        assert_eq!(has("SigIgn"), self.ignored, "{self:?}: {report}");
        assert_eq!(has("SigBlk"), self.blocked, "{self:?}: {report}");
        assert_eq!(has("ShdPnd"), self.pending == Pending::Process, "{self:?}: {report}");
        assert_eq!(has("SigPnd"), self.pending == Pending::Thread, "{self:?}: {report}");
    }
}

#[test]
fn the_save_tool_fallback_works_whatever_the_callers_sigchld() {
    common::root_or_skip!();
    // A legacy host read through iptables-legacy-save: a caller that ignores
    // SIGCHLD (the kernel would reap the save tool before the wrapper waits
    // for it) or blocks it still gets legacy, by the counts.
    let node = Node::new("sigchld-decides");
    node.sh("for i in 1 2 3; do iptables-legacy -A INPUT -j ACCEPT; done");
    for caller in CallerSignal::all(libc::SIGCHLD) {
        let mut command = node.command("iptables");
        command.env("IPTABLES_WRAPPER_LOG", "debug").arg("-V");
        let out = refuse_wrapper_raw_sockets(caller.apply(&mut command))
            .output_within_limit()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{caller:?}: {stderr}");
        assert!(
            stderr.contains("falling back to iptables-legacy-save")
                && stderr.contains("mode=legacy source=rule-counts"),
            "{caller:?}: {stderr}"
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("(legacy)"), "{caller:?}");
    }
}

#[test]
fn after_the_save_tool_fallback_the_backend_has_the_callers_sigchld_state() {
    common::root_or_skip!();
    // The stand-in nft backend beside the real legacy one: legacy is read
    // through its save tool, nft (more rules) decides, the stand-in reports
    // what it inherited: the caller's disposition, mask and pending SIGCHLD,
    // no more, as when the caller runs it directly.
    let shim = Shim::new("sigchld-inherits");
    std::os::unix::fs::symlink("/usr/sbin/xtables-legacy-multi", shim.sbin.join("xtables-legacy-multi")).unwrap();
    shim.node
        .sh("iptables-legacy -A INPUT -j ACCEPT\nfor i in 1 2 3; do iptables-nft -A INPUT -j ACCEPT; done");
    let log = shim.node.path("log");
    for caller in CallerSignal::all(libc::SIGCHLD) {
        let customize = |command: &mut Command| {
            command
                .env_remove("IPTABLES_MODE")
                .env("IPTABLES_WRAPPER_HOST_ROOT", &shim.node.host_root)
                .env("XTABLES_LOCKFILE", &shim.node.lockfile)
                .env("IPTABLES_WRAPPER_LOG", "debug")
                .stderr(std::fs::File::create(&log).unwrap());
            refuse_wrapper_raw_sockets(caller.apply(command));
        };
        let wrapped = shim.report(true, &[], &customize);
        let logged = std::fs::read_to_string(&log).unwrap();
        assert!(
            logged.contains("falling back to iptables-legacy-save") && logged.contains("mode=nft source=rule-counts"),
            "{caller:?}: {logged}"
        );
        let direct = shim.report(false, &[], &customize);
        shim.assert_same(&wrapped, &direct, &[]);
        caller.assert_in(&wrapped);
    }
}

/// A pipe whose reader has gone (close-on-exec until the child's dup2, so
/// no other test's child holds its reading end).
fn pipe_without_reader() -> Stdio {
    let mut ends = [-1; 2];
    // SAFETY: pipe2 fills a live array; both ends are owned below.
    assert_eq!(unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors nothing else owns.
    let (read_end, write_end) = unsafe {
        use std::os::fd::FromRawFd;
        (
            std::os::fd::OwnedFd::from_raw_fd(ends[0]),
            std::os::fd::OwnedFd::from_raw_fd(ends[1]),
        )
    };
    drop(read_end);
    Stdio::from(write_end)
}

/// A socket whose peer has gone.
fn socket_without_peer() -> Stdio {
    let (ours, peer) = std::os::unix::net::UnixStream::pair().unwrap();
    drop(peer);
    Stdio::from(std::os::fd::OwnedFd::from(ours))
}

#[test]
fn logging_to_a_stderr_nobody_reads_never_costs_the_call() {
    common::root_or_skip!();
    // IPTABLES_WRAPPER_LOG=debug with stderr a pipe (or socket) whose reader
    // has gone: the wrapper's log lines are lost, the caller's rule is added.
    let node = Node::new("deafstderr");
    let mut rule = 0;
    for caller in CallerSignal::all(libc::SIGPIPE) {
        for stderr in [pipe_without_reader as fn() -> Stdio, socket_without_peer] {
            rule += 1;
            let source = format!("192.0.2.{rule}");
            let mut command = node.command("iptables");
            command
                .env("IPTABLES_WRAPPER_LOG", "debug")
                .args(["-A", "INPUT", "-s", &source, "-j", "ACCEPT"])
                .stderr(stderr());
            let status = caller.apply(&mut command).status_within_limit().unwrap();
            assert!(status.success(), "{caller:?}: {status:?}");
            assert!(node.sh("iptables-nft -S INPUT").contains(&source), "{caller:?}");
        }
    }
}

#[test]
fn logging_to_a_stderr_nobody_reads_leaves_no_sigpipe_for_the_backend() {
    common::root_or_skip!();
    // A caller that blocks SIGPIPE: the wrapper's failed writes raise it,
    // and the backend must not inherit one the caller did not have.
    let shim = Shim::new("deafsigpipe");
    for caller in CallerSignal::all(libc::SIGPIPE) {
        for stderr in [pipe_without_reader as fn() -> Stdio, socket_without_peer] {
            let customize = |command: &mut Command| {
                command.env("IPTABLES_WRAPPER_LOG", "debug").stderr(stderr());
                caller.apply(command);
            };
            let wrapped = shim.report(true, &[], &customize);
            caller.assert_in(&wrapped);
            // The direct call writes nothing to stderr: the same state.
            caller.assert_in(&shim.report(false, &[], &customize));
        }
    }
}

#[test]
fn o_path_standard_descriptors_are_open_for_the_backend() {
    common::root_or_skip!();
    // An O_PATH descriptor cannot be read or written, and poll calls it
    // invalid, but it is open: the backend gets it as the caller gave it.
    let shim = Shim::new("opath");
    for fd in 0..3 {
        let report = shim.same_both_ways(&[], &|command| {
            // SAFETY: only async-signal-safe calls between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    let path = libc::open(c"/etc".as_ptr(), libc::O_PATH);
                    libc::dup2(path, fd);
                    libc::close(path);
                    Ok(())
                });
            }
        });
        let line = report
            .lines()
            .find(|l| l.starts_with(&format!("fd {fd} ")))
            .unwrap_or_else(|| panic!("fd {fd} closed: {report}"));
        let status_flags = line.rsplit("status_flags=").next().unwrap();
        let o_path = libc::O_PATH as u32;
        assert!(
            line.starts_with(&format!("fd {fd} -> /etc "))
                && u32::from_str_radix(status_flags, 8).unwrap() & o_path == o_path,
            "{report}"
        );
    }
}

#[test]
fn argv0_reaches_the_backend_as_given_and_the_name_is_the_backends_command() {
    common::root_or_skip!();
    let shim = Shim::new("argv0");
    // argv[0] is the path the caller ran, exactly, through whatever execs it.
    for via in [&[][..], &["nohup"], &["sh", "-c", "exec \"$@\"", "sh"]] {
        let report = shim.same_both_ways(via, &|_| {});
        assert_eq!(argv0(&report).0, shim.wrapped().to_str().unwrap(), "{report}");
        // The process name is the backend's own link for the command, not
        // the multi-call binary's file name (a direct call is `iptables`).
        assert!(report.contains("\ncomm iptables-nft\n"), "{report}");
    }
    // A bare name found in PATH is argv[0] as the caller gave it, too.
    let status = shim
        .command(&[], Path::new("iptables"), &["report", shim.report.to_str().unwrap()])
        .env("PATH", &shim.node.bin)
        .status_within_limit()
        .unwrap();
    assert!(status.success(), "{status:?}");
    let report = std::fs::read_to_string(&shim.report).unwrap();
    assert_eq!(argv0(&report).0, "iptables", "{report}");

    // The real backends: their getopt messages name argv[0], so a wrapped
    // call's error reads as a direct call's.
    let node = &shim.node;
    for name in ["iptables-restore", "ip6tables-save"] {
        let wrapped = node
            .command(name)
            .env("IPTABLES_MODE", "nft")
            .arg("--no-such-option")
            .output_within_limit()
            .unwrap();
        let direct = Command::new("/usr/sbin/xtables-nft-multi")
            .arg0(node.bin.join(name))
            .arg("--no-such-option")
            .output_within_limit()
            .unwrap();
        let stderr = String::from_utf8_lossy(&wrapped.stderr);
        assert!(
            stderr.starts_with(&format!("{}: unrecognized option", node.bin.join(name).display())),
            "{stderr}"
        );
        assert_eq!(wrapped.stderr, direct.stderr);
        assert_eq!(wrapped.status.code(), direct.status.code());
    }
}
