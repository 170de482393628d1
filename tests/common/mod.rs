//! Shared test helpers: every test that touches iptables first moves its own
//! thread into a fresh network namespace, so nothing reaches the machine's.
#![allow(dead_code)]

pub mod arrival;
pub mod diff_motifs;
pub mod diff_tally;
pub mod differential;
pub mod interrupted;
pub mod netns_topology;
pub mod packet_run;
pub mod replay;
pub mod row_lab;
pub mod rule_grammar;
pub mod rule_motifs;
pub mod save_tables;
pub mod seccomp;
pub mod stale;
pub mod witness;

use std::io::Write as _;
use std::process::{Command, Output};

/// Whether this process can make the network and mount namespaces every
/// test that touches the backends needs (root with `CAP_SYS_ADMIN`, tried,
/// not guessed from the user id: uid 0 without its capabilities, as in a
/// plain `docker run` or under `setpriv --bounding-set -all`, cannot); if
/// not, says on stderr (one line) that the calling test is skipped and why.
/// See [`root_or_skip`].
pub fn runs_as_root() -> bool {
    static WHY_NOT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let Some(why) = WHY_NOT.get_or_init(why_namespaces_cannot_be_made) else {
        return true;
    };
    // Written to the descriptor itself: the harness keeps what `eprintln!`
    // says of a test that passes.
    let thread = std::thread::current();
    let _ = writeln!(
        std::io::stderr(),
        "skipped {}: it needs root that can make network and mount namespaces ({why}) and the real backends; the in-process tests need none (docs/testing.md)",
        thread.name().unwrap_or("a test")
    );
    false
}

/// Why this process cannot make a network and a mount namespace, if it
/// cannot: `unshare(CLONE_NEWNET | CLONE_NEWNS)` tried in a forked child
/// (unshare moves only the calling thread, and a test must not move the
/// harness's), whose exit status is the errno.
fn why_namespaces_cannot_be_made() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some(format!("uid {} is not root", nix::unistd::geteuid()));
    }
    // SAFETY: the child calls only unshare(2) and _exit(2), both
    // async-signal-safe, so forking a threaded process is sound.
    let child = match unsafe { libc::fork() } {
        -1 => return Some(format!("fork: {}", nix::errno::Errno::last())),
        0 => unsafe {
            let made = libc::unshare(libc::CLONE_NEWNET | libc::CLONE_NEWNS);
            libc::_exit(if made == 0 { 0 } else { *libc::__errno_location() })
        },
        child => nix::unistd::Pid::from_raw(child),
    };
    match nix::sys::wait::waitpid(child, None) {
        Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => None,
        Ok(nix::sys::wait::WaitStatus::Exited(_, errno)) => Some(format!(
            "unshare(CLONE_NEWNET | CLONE_NEWNS) is refused here: {}",
            nix::errno::Errno::from_raw(errno)
        )),
        other => Some(format!("the child that tried unshare ended as {other:?}")),
    }
}

/// Returns from the calling test, after one line on stderr saying why, when
/// the process cannot make namespaces ([`runs_as_root`]): the first line of every test that makes a
/// network or mount namespace.
macro_rules! root_or_skip {
    () => {
        if !$crate::common::runs_as_root() {
            return;
        }
    };
}
pub(crate) use root_or_skip;

/// Moves the calling thread into a new, empty network namespace.
/// Child processes spawned from this thread inherit it.
pub fn enter_new_netns() {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET) needs root");
}

/// Runs a shell script (in the caller's namespace) and panics if it fails.
pub fn sh(script: &str) -> String {
    let out = sh_output(script);
    assert!(
        out.status.success(),
        "script failed: {script}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn sh_output(script: &str) -> Output {
    Command::new("sh")
        .arg("-ec")
        .arg(script)
        .output_within_limit()
        .expect("run sh")
}

/// `-A` lines printed by a save tool (e.g. `iptables-legacy-save`).
pub fn save_rule_lines(save_tool: &str) -> u64 {
    let save = sh(save_tool);
    let lines = iptables_wrapper::save_text::lines(save.as_bytes());
    lines
        .filter(|line| matches!(line, iptables_wrapper::save_text::Line::Rule { .. }))
        .count() as u64
}

use std::path::{Path, PathBuf};

/// Copies a program to `to` in a child process (`cp`), never through a
/// descriptor of this test process. Tests run in parallel threads, and a
/// thread that forks while another holds a freshly copied file open for
/// writing hands that descriptor to its child until the child's exec: the
/// kernel then refuses to run the file (ETXTBSY, "Text file busy", exit 126
/// from a shell), a race seen in CI.
pub fn copy_program(from: &Path, to: &Path) {
    let out = Command::new("cp")
        .arg("--")
        .arg(from)
        .arg(to)
        .output_within_limit()
        .expect("run cp");
    assert!(
        out.status.success(),
        "cp {} {}: {}",
        from.display(),
        to.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes a script and makes it executable, by way of [`copy_program`]: the
/// text goes to a file that is never run, and `cp` makes the one that is.
pub fn write_program(to: &Path, text: &str) {
    let draft = to.with_extension("draft");
    std::fs::write(&draft, text).unwrap();
    copy_program(&draft, to);
    std::fs::remove_file(&draft).unwrap();
    std::fs::set_permissions(to, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// The stand-in backend of tests/shim/stub_backend.rs (it reports the
/// argv, `argv[0]` included, descriptors and environment it was given),
/// compiled with rustc once per test binary.
pub fn stub_backend() -> &'static Path {
    static STUB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    STUB.get_or_init(|| {
        let stub = Path::new(env!("CARGO_TARGET_TMPDIR")).join(concat!("stub-backend-", env!("CARGO_CRATE_NAME")));
        let out = Command::new(std::env::var_os("RUSTC").unwrap_or("rustc".into()))
            .args(["--edition", "2021", "-O", "-o"])
            .arg(&stub)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/shim/stub_backend.rs"))
            .output_within_limit()
            .expect("rustc runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        stub
    })
}

/// The wrapper under test.
pub const WRAPPER: &str = env!("CARGO_BIN_EXE_iptables-wrapper");

/// A simulated node seen from inside a container: a fresh network namespace
/// (the "host kernel"), a fake host root, its own xtables lock file, and a
/// directory with the six command links made by `iptables-wrapper install`.
pub struct Node {
    pub dir: PathBuf,
    pub host_root: PathBuf,
    pub bin: PathBuf,
    pub lockfile: PathBuf,
}

impl Node {
    /// Enters a new network namespace and lays out the node's directories.
    pub fn new(name: &str) -> Node {
        enter_new_netns();
        let dir = std::env::temp_dir().join(format!("iptw-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let node = Node {
            host_root: dir.join("host"),
            bin: dir.join("bin"),
            lockfile: dir.join("xtables.lock"),
            dir,
        };
        std::fs::create_dir_all(node.host_root.join("etc/alternatives")).unwrap();
        std::fs::create_dir_all(&node.bin).unwrap();
        let out = Command::new(WRAPPER)
            .args(["install", "--dir"])
            .arg(&node.bin)
            .output_within_limit()
            .unwrap();
        assert!(
            out.status.success(),
            "install failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        node
    }

    /// Points the host's `/etc/alternatives/<group>` at `target`, atomically.
    pub fn set_host_link(&self, group: &str, target: &str) {
        let link = self.host_root.join("etc/alternatives").join(group);
        let temporary = link.with_extension("new");
        let _ = std::fs::remove_file(&temporary);
        std::os::unix::fs::symlink(target, &temporary).unwrap();
        std::fs::rename(&temporary, &link).unwrap();
    }

    /// A wrapped command (`iptables`, `ip6tables-save`, ...) with the node's
    /// environment and no inherited override.
    pub fn command(&self, name: &str) -> Command {
        let mut command = Command::new(self.bin.join(name));
        self.isolate(&mut command);
        command
    }

    /// The wrapper's own command line (`detect`, `install`, ...).
    pub fn wrapper(&self) -> Command {
        let mut command = Command::new(WRAPPER);
        self.isolate(&mut command);
        command
    }

    pub fn isolate(&self, command: &mut Command) {
        command
            .env("IPTABLES_WRAPPER_HOST_ROOT", &self.host_root)
            .env("IPTABLES_WRAPPER_RUN_DIR", self.dir.join("run"))
            .env("XTABLES_LOCKFILE", &self.lockfile)
            .env_remove("IPTABLES_MODE")
            .env_remove("IPTABLES_WRAPPER_SBIN")
            .env_remove("IPTABLES_WRAPPER_LOG");
    }

    /// Runs a setup script in the node's namespace, with the node's lock file.
    pub fn sh(&self, script: &str) -> String {
        sh(&format!(
            "export XTABLES_LOCKFILE={}\n{script}",
            self.lockfile.display()
        ))
    }

    /// `NAME -V` through the wrapper, asking for its warnings on stderr
    /// (`IPTABLES_WRAPPER_LOG=warn`; a plain call keeps them off stderr).
    pub fn version_with_warnings(&self, name: &str) -> Output {
        self.command(name)
            .env("IPTABLES_WRAPPER_LOG", "warn")
            .arg("-V")
            .output_within_limit()
            .unwrap()
    }

    /// What `iptables -V` through the wrapper reports: "nft" or "legacy".
    pub fn version_mode(&self, name: &str) -> String {
        let out = self.command(name).arg("-V").output_within_limit().unwrap();
        assert!(
            out.status.success(),
            "{name} -V failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        if stdout.contains("(nf_tables)") {
            "nft".into()
        } else if stdout.contains("(legacy)") {
            "legacy".into()
        } else {
            panic!("unexpected -V output: {stdout}")
        }
    }

    /// `detect --json`, parsed.
    pub fn detect(&self) -> serde_json::Value {
        let out = self.wrapper().args(["detect", "--json"]).output_within_limit().unwrap();
        assert!(
            out.status.success(),
            "detect failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("detect --json prints one JSON object")
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.join(relative)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Legacy tables listed in this thread's namespace.
pub fn legacy_tables(family_file: &str) -> String {
    std::fs::read_to_string(Path::new("/proc/thread-self/net").join(family_file)).unwrap_or_default()
}

/// The part of an `strace -f` trace that comes before the backend: every
/// line before the first `execve` of a program in `/usr/sbin` (where the
/// backends are, whatever their file is called: `iptables-nft`,
/// `xtables-legacy-multi`). Panics if the backend never ran.
pub fn until_backend(trace: &str) -> String {
    let until: Vec<&str> = trace
        .lines()
        .take_while(|line| !line.contains("execve(\"/usr/sbin/"))
        .collect();
    assert!(until.len() < trace.lines().count(), "the backend never ran: {trace}");
    until.join("\n")
}

/// Sets `path`'s modification time (a record made to look older).
pub fn set_modified(path: &Path, time: std::time::SystemTime) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|file| file.set_modified(time))
        .unwrap_or_else(|error| panic!("set the modification time of {}: {error}", path.display()));
}

/// Runs `command` (program, arguments and environment) in a mount namespace
/// of its own (private: nothing reaches the machine's) with a tmpfs over
/// `/proc`, so no procfs can be read.
pub fn without_proc(command: &Command) -> Output {
    let mut hidden = Command::new("timeout");
    hidden
        .args([
            "20",
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount -t tmpfs none /proc && exec \"$@\"",
            "sh",
        ])
        .arg(command.get_program())
        .args(command.get_args())
        .env_clear();
    for (name, value) in command.get_envs() {
        if let Some(value) = value {
            hidden.env(name, value);
        }
    }
    hidden.output_within_limit().unwrap()
}

/// Runs `command` with stdout and stderr captured; if it is still running
/// after `limit`, kills it (a loop would otherwise outlive the test) and
/// panics with `hangs`.
pub fn output_within(command: &mut Command, limit: std::time::Duration, hangs: &str) -> Output {
    let child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_within(child, limit, hangs)
}

/// Waits for `child` and what it wrote (read as it comes, so a child
/// writing more than a pipe holds still ends); if it is still running
/// after `limit`, kills it and panics with `hangs` and its stderr.
pub fn wait_within(child: std::process::Child, limit: std::time::Duration, hangs: &str) -> Output {
    let pid = child.id() as libc::pid_t;
    let (ended, watched) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        // SAFETY: kill(2) of the child not yet waited for (its pid not reused).
        watched.recv_timeout(limit) == Err(std::sync::mpsc::RecvTimeoutError::Timeout)
            && unsafe { libc::kill(pid, libc::SIGKILL) } == 0
    });
    let out = child.wait_with_output().unwrap();
    let _ = ended.send(());
    if watchdog.join().unwrap() {
        panic!("{hangs}; stderr: {}", String::from_utf8_lossy(&out.stderr));
    }
    out
}

/// How long a test waits for a command it runs before killing it and
/// failing: a hang fails its test instead of holding the suite (the
/// slowest guest of the kernel matrix runs a command in seconds).
pub const CHILD_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// `Command::output` within [`CHILD_LIMIT`]: stdin empty, stdout and
/// stderr captured, whatever the command set (a command with stdio of its
/// own: spawn it and [`wait_within`]); past the limit the command is killed
/// and the test fails.
pub trait OutputWithin {
    fn output_within_limit(&mut self) -> std::io::Result<Output>;
    /// `Command::status` within [`CHILD_LIMIT`] (stdio as set, else inherited).
    fn status_within_limit(&mut self) -> std::io::Result<std::process::ExitStatus>;
}

impl OutputWithin for Command {
    fn output_within_limit(&mut self) -> std::io::Result<Output> {
        let hangs = format!("{self:?} did not end within {CHILD_LIMIT:?}: killed");
        let child = self
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        Ok(wait_within(child, CHILD_LIMIT, &hangs))
    }

    fn status_within_limit(&mut self) -> std::io::Result<std::process::ExitStatus> {
        let hangs = format!("{self:?} did not end within {CHILD_LIMIT:?}: killed");
        Ok(wait_within(self.spawn()?, CHILD_LIMIT, &hangs).status)
    }
}

/// The signals tests send to the processes they start.
const SENT_SIGNALS: [libc::c_int; 4] = [libc::SIGHUP, libc::SIGINT, libc::SIGTERM, libc::SIGPIPE];

/// Starts `command` with SIGHUP, SIGINT, SIGTERM and SIGPIPE at their
/// defaults and unblocked, whatever the test runner left them as (`nohup`
/// ignores SIGHUP, a background job of a non-interactive shell SIGINT):
/// the wrapper keeps a signal its caller ignores ignored, so a test that
/// sends one sets the disposition it needs. Further `pre_exec`s run after.
pub fn default_signals(command: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: only signal(2) and sigprocmask(2), async-signal-safe, between
    // fork and exec.
    unsafe {
        command.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for signal in SENT_SIGNALS {
                libc::signal(signal, libc::SIG_DFL);
                libc::sigaddset(&mut set, signal);
            }
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            Ok(())
        })
    }
}
