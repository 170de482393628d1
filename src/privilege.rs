//! What reading the kernel's firewall state needs, said in one place for
//! every message about a read that failed: the netlink and getsockopt reads
//! need CAP_NET_ADMIN (root has it), so a refusal (EPERM, or EACCES) says
//! so instead of only "Operation not permitted"; and they need file
//! descriptors (`/proc`, a netlink socket, a raw socket, a procfs file).
//!
//! Each failed read notes its cause here ([`note_failure`]), so that what
//! is said of an unknown state names the real cause: descriptors that ran
//! out (`RLIMIT_NOFILE`), no procfs, a refusal (the caller lacks
//! CAP_NET_ADMIN), or none of these. A wrapped call never falls to the default past a read that
//! failed for want of a descriptor: it refuses ([`ran_out_refusal`]).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// A read failed with EMFILE or ENFILE.
static DESCRIPTORS_RAN_OUT: AtomicBool = AtomicBool::new(false);
/// A read was refused (EPERM, EACCES).
static REFUSED: AtomicBool = AtomicBool::new(false);

/// Notes why a read of the kernel's state failed (an errno; other errors
/// are not noted).
pub fn note_failure(errno: Option<i32>) {
    match errno {
        Some(libc::EMFILE | libc::ENFILE) => DESCRIPTORS_RAN_OUT.store(true, Ordering::Relaxed),
        Some(libc::EPERM | libc::EACCES) => REFUSED.store(true, Ordering::Relaxed),
        _ => {}
    }
}

/// [`note_failure`] of an I/O error, passed on.
pub fn noted(error: io::Error) -> io::Error {
    note_failure(error.raw_os_error());
    error
}

/// Whether a read of the kernel's state failed for want of a descriptor.
pub fn descriptors_ran_out() -> bool {
    DESCRIPTORS_RAN_OUT.load(Ordering::Relaxed)
}

/// The process's descriptor limit (`RLIMIT_NOFILE`, soft), as words.
fn descriptor_limit() -> String {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct given.
    match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } {
        0 => format!("RLIMIT_NOFILE {}", limit.rlim_cur),
        _ => "RLIMIT_NOFILE".to_string(),
    }
}

/// Why a wrapped call refuses when descriptors ran out: one line naming
/// the limit and what would be right.
pub fn ran_out_refusal(command: &str) -> String {
    format!(
        "{command}: the descriptor limit ({}) leaves too few to read the kernel's state (EMFILE), and the choice of backend must not rest on a read that failed: raise it (ulimit -n 16 or more) or set IPTABLES_MODE; nothing was run",
        descriptor_limit()
    )
}

/// What a warning about an unknown state says is its cause: descriptors
/// that ran out, no procfs at `/proc` (`proc_mounted` false), or a read the
/// kernel refused (a caller without CAP_NET_ADMIN: not root, or root with
/// the capability dropped); empty when none of these (the evidence's own
/// reasons say why).
pub fn unknown_cause(proc_mounted: impl FnOnce() -> bool) -> String {
    if descriptors_ran_out() {
        format!("; descriptors ran out ({}): raise the limit", descriptor_limit())
    } else if !proc_mounted() {
        "; /proc is not the kernel's procfs here (not mounted, or something else put there): mount procfs at /proc"
            .to_string()
    } else if REFUSED.load(Ordering::Relaxed) {
        "; reading it needs CAP_NET_ADMIN (root)".to_string()
    } else {
        String::new()
    }
}

/// The clause to add after `error` from a read of the kernel's tables:
/// what the read needs when the error is a refusal, empty otherwise.
pub fn needed_when_refused(error: &io::Error) -> &'static str {
    match error.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => "; reading them needs root or CAP_NET_ADMIN",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::{needed_when_refused, unknown_cause};

    #[test]
    fn the_cause_of_an_unknown_is_named_only_where_known() {
        assert!(unknown_cause(|| false).contains("/proc is not the kernel's procfs"));
    }
    use std::io;

    #[test]
    fn only_a_refusal_says_what_is_needed() {
        assert!(needed_when_refused(&io::Error::from_raw_os_error(libc::EPERM)).contains("CAP_NET_ADMIN"));
        assert!(needed_when_refused(&io::Error::from_raw_os_error(libc::EACCES)).contains("root"));
        assert_eq!(needed_when_refused(&io::Error::from_raw_os_error(libc::ENOENT)), "");
    }
}
