//! What SIGTERM, SIGINT and SIGHUP do to a removal (`stale --remove`).
//!
//! From the start of the removal they are caught (a flag, nothing else;
//! one the caller ignores stays ignored, as under `nohup`), so
//! none of them ends the process between two steps. From the record on
//! ([`NoTurningBack`]) they are also blocked (pending until the report).
//! Before each emptying while nothing is emptied yet (an nft attempt after
//! one the kernel refused, too) the removal looks at the flag and the
//! pending ones and, when one came, stops with nothing changed. Once
//! something is emptied, it empties every family it judged, reads again
//! and reports, then says which signal came and exits with 128 + its
//! number.
//! The restore tool that empties legacy tables runs in a process group of
//! its own, so a terminal's Ctrl-C or hang-up (sent to the wrapper's group)
//! does not end it between two tables either. SIGKILL cannot be caught:
//! what it leaves is the record of the removal ([`super::in_progress`]).
//!
//! `IPTABLES_WRAPPER_STALE_KILL_AFTER=STEP` is a test seam, read only here
//! and only by a removal: the removal sends itself SIGKILL right after the
//! step so named ([`reached`]), so that the fault tests can stop it where no
//! outside tool runs (the nft emptying is one netlink batch the wrapper
//! sends itself, a backup is a file it writes itself).

use std::sync::atomic::{AtomicI32, Ordering};

/// The signals a removal finishes its emptying despite.
pub const CAUGHT: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// The test seam: the step after which the removal kills itself.
const KILL_AFTER_VAR: &str = "IPTABLES_WRAPPER_STALE_KILL_AFTER";

/// The last of [`CAUGHT`] that came; 0 while none has.
static CAME: AtomicI32 = AtomicI32::new(0);

extern "C" fn note(signal: libc::c_int) {
    CAME.store(signal, Ordering::SeqCst);
}

/// Catches [`CAUGHT`] for the rest of the process (a removal ends it),
/// but for those the caller ignores (`nohup` ignores SIGHUP): they stay
/// ignored.
pub fn catch() {
    for signal in CAUGHT {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe; the sigactions are fully initialised.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            let mut before: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = note as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, &mut before);
            if before.sa_sigaction == libc::SIG_IGN {
                libc::sigaction(signal, &before, std::ptr::null_mut());
            }
        }
    }
}

/// The signal that came, if any, by name: caught, or held off
/// ([`NoTurningBack`]) and pending.
pub fn came() -> Option<&'static str> {
    match number() {
        Some(libc::SIGTERM) => Some("SIGTERM"),
        Some(libc::SIGINT) => Some("SIGINT"),
        Some(libc::SIGHUP) => Some("SIGHUP"),
        _ => None,
    }
}

/// The exit status after a signal came: 128 + its number.
pub fn exit_status() -> Option<i32> {
    number().map(|signal| 128 + signal)
}

/// The number of the signal of [`CAUGHT`] that came, or is pending.
fn number() -> Option<libc::c_int> {
    match CAME.load(Ordering::SeqCst) {
        0 => {
            // SAFETY: sigpending fills an initialised set.
            let pending = unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigpending(&mut set);
                set
            };
            // SAFETY: sigismember reads an initialised set.
            CAUGHT
                .into_iter()
                .find(|&signal| unsafe { libc::sigismember(&pending, signal) } == 1)
        }
        signal => Some(signal),
    }
}

/// Held from just before the first emptying to the end of the report: the
/// signals of [`CAUGHT`] blocked in this thread (the one that empties).
pub struct NoTurningBack {
    before: libc::sigset_t,
}

impl NoTurningBack {
    pub fn hold() -> NoTurningBack {
        // SAFETY: plain sigset operations on initialised sets.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut before: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for signal in CAUGHT {
                libc::sigaddset(&mut set, signal);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut before);
            NoTurningBack { before }
        }
    }
}

impl Drop for NoTurningBack {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `hold`; a pending signal is
        // then handled by `note`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.before, std::ptr::null_mut());
        }
    }
}

/// The test seam: SIGKILL to this process when `step` is the one
/// `IPTABLES_WRAPPER_STALE_KILL_AFTER` names.
pub fn reached(step: &str) {
    if std::env::var_os(KILL_AFTER_VAR).is_some_and(|named| named == step) {
        // SAFETY: raise has no memory effects; SIGKILL ends the process.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
    }
}
