//! The caller's standard descriptors (0, 1, 2), kept exactly as given, and
//! the wrapper's own messages on stderr.
//!
//! A caller may start the wrapper with stdin, stdout or stderr closed, and the
//! backend must find them closed too. While the wrapper runs, a closed one is
//! held by a placeholder (an `O_PATH` descriptor of `/`, close-on-exec): files
//! the wrapper opens can then never take fd 0, 1 or 2 (a message meant for
//! stderr would land in them), writes to the placeholder fail harmlessly, and
//! `execve` closes it again, so the backend inherits the caller's table
//! unchanged. The wrapper's own messages are written only when fd 2 was open.

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
    for closed in standard.iter().filter(|p| p.revents & libc::POLLNVAL != 0) {
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
    if !stderr_open() {
        return;
    }
    let line = format!("iptables-wrapper: {message}\n");
    let mut rest = line.as_bytes();
    while !rest.is_empty() {
        // SAFETY: writes from a live buffer of the given length.
        let written = unsafe { libc::write(2, rest.as_ptr().cast(), rest.len()) };
        match written {
            n if n > 0 => rest = &rest[n as usize..],
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return,
        }
    }
}
