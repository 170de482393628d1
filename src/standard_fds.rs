//! The caller's standard descriptors (0, 1, 2), kept exactly as given, and
//! the wrapper's own messages on stderr.
//!
//! A caller may start the wrapper with stdin, stdout or stderr closed, and the
//! backend must find them closed too. While the wrapper runs, a closed one is
//! held by a placeholder (an `O_PATH` descriptor of `/`, close-on-exec): files
//! the wrapper opens can then never take fd 0, 1 or 2 (a message meant for
//! stderr would land in them), writes to the placeholder fail harmlessly, and
//! `execve` closes it again, so the backend inherits the caller's table
//! unchanged. An `O_PATH` descriptor (which `poll` reports as invalid, like a
//! closed one) is open: it is left as it is. The wrapper's own messages are
//! written only when fd 2 was open.
//!
//! Writing them never costs the call: a stderr pipe or socket whose reader
//! has gone raises SIGPIPE, which the wrapper does not ignore (the backend
//! inherits its dispositions) and which would kill it before the exec. So
//! SIGPIPE is blocked around each write and the one the write raised is
//! taken back before the caller's mask returns: the backend inherits no
//! pending SIGPIPE the caller did not have. The `log` records (asked for with
//! `IPTABLES_WRAPPER_LOG`) go the same way, one write per line.

use log::LevelFilter;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

static STDERR_OPEN: AtomicBool = AtomicBool::new(true);

/// Holds every closed standard descriptor with a close-on-exec placeholder.
/// Call first thing in `main`, before anything opens a file.
pub fn hold_closed() {
    let mut standard = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: polls three descriptors of a live array without waiting; a
    // closed one comes back as POLLNVAL.
    if unsafe { libc::poll(standard.as_mut_ptr(), 3, 0) } <= 0 {
        return;
    }
    // SAFETY: F_GETFD only reads the descriptor's flags; it works on an
    // O_PATH descriptor, where poll does not.
    let is_open = |fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1;
    for closed in standard
        .iter()
        .filter(|p| p.revents & libc::POLLNVAL != 0 && !is_open(p.fd))
    {
        if closed.fd == 2 {
            STDERR_OPEN.store(false, Ordering::Relaxed);
        }
        // The lowest free number is this one: lower ones are open by now.
        // SAFETY: plain open of a constant path; the result is checked.
        let placeholder = unsafe { libc::open(c"/".as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if placeholder != closed.fd && placeholder >= 0 {
            // SAFETY: both are descriptors this process owns; dup3 sets
            // close-on-exec on the copy.
            unsafe {
                libc::dup3(placeholder, closed.fd, libc::O_CLOEXEC);
                libc::close(placeholder);
            }
        }
    }
}

/// Whether the caller gave the wrapper a stderr.
pub fn stderr_open() -> bool {
    STDERR_OPEN.load(Ordering::Relaxed)
}

/// Whether stderr is a terminal (a person is watching).
pub fn stderr_is_terminal() -> bool {
    stderr_open() && std::io::stderr().is_terminal()
}

/// Writes one line `iptables-wrapper: <message>` to stderr in one write, if
/// the caller gave the wrapper a stderr; never fails.
pub fn say(message: &str) {
    if stderr_open() {
        write_to_stderr(format!("iptables-wrapper: {message}\n").as_bytes());
    }
}

/// Writes `bytes` to fd 2 whole, giving up on the first error, with SIGPIPE
/// blocked: a reader that has gone costs the message, never the call.
///
/// The SIGPIPE a failed write raises is queued for this thread, unless this
/// thread already has one pending (standard signals do not queue twice), and
/// `sigtimedwait` takes a thread's own pending signal before the process's.
/// So it is taken back, before the caller's mask returns, exactly when no
/// thread-directed SIGPIPE was pending before: a caller's pending SIGPIPE,
/// of either kind, stays for the backend, and no other is added.
fn write_to_stderr(mut rest: &[u8]) {
    // SAFETY: sigset operations on local sets; the mask is restored below.
    let (sigpipe, callers_mask, already_pending) = unsafe {
        let mut sigpipe: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut sigpipe);
        libc::sigaddset(&mut sigpipe, libc::SIGPIPE);
        let mut callers_mask: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_BLOCK, &sigpipe, &mut callers_mask);
        // A SIGPIPE can be pending here only if the caller blocks it (then
        // sigpending tells whether one is, and only /proc which kind).
        let mut pending: libc::sigset_t = std::mem::zeroed();
        let already_pending = libc::sigismember(&callers_mask, libc::SIGPIPE) == 1
            && libc::sigpending(&mut pending) == 0
            && libc::sigismember(&pending, libc::SIGPIPE) == 1
            && thread_has_sigpipe_pending();
        (sigpipe, callers_mask, already_pending)
    };
    let mut broken = false;
    while !rest.is_empty() {
        // SAFETY: writes from a live buffer of the given length.
        let written = unsafe { libc::write(2, rest.as_ptr().cast(), rest.len()) };
        match written {
            n if n > 0 => rest = &rest[n as usize..],
            0 => break,
            _ => match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => {}
                errno => {
                    broken = errno == Some(libc::EPIPE);
                    break;
                }
            },
        }
    }
    // SAFETY: takes one pending SIGPIPE without waiting, then restores the
    // mask the caller gave.
    unsafe {
        if broken && !already_pending {
            let now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            libc::sigtimedwait(&sigpipe, std::ptr::null_mut(), &now);
        }
        libc::sigprocmask(libc::SIG_SETMASK, &callers_mask, std::ptr::null_mut());
    }
}

/// Whether this thread's own pending set (`SigPnd` in
/// `/proc/thread-self/status`, not the process's `ShdPnd`) holds SIGPIPE;
/// when that cannot be read, yes (the caller's signal is never taken).
fn thread_has_sigpipe_pending() -> bool {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("SigPnd:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .map_or(true, |mask| mask & (1 << (libc::SIGPIPE - 1)) != 0)
}

/// The `log` records asked for, as `iptables-wrapper: <level>: <message>`
/// lines on stderr.
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            let level = record.level().as_str().to_ascii_lowercase();
            write_to_stderr(format!("iptables-wrapper: {level}: {}\n", record.args()).as_bytes());
        }
    }

    fn flush(&self) {}
}

/// Logs to stderr at `level`, if the caller gave the wrapper a stderr.
pub fn log_to_stderr(level: LevelFilter) {
    static LOGGER: StderrLog = StderrLog;
    if stderr_open() && log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
}
