//! What `/run/xtables.lock` (or `XTABLES_LOCKFILE`) says: at most a tie-breaker.
//!
//! Legacy iptables creates this file with mode 0600 and flocks it around its
//! calls; iptables-nft never creates it. But go-iptables (Docker's
//! libnetwork, flannel, CNI plugins, Antrea) creates it the same way and
//! flocks it whatever the backend, so on an nft host running Docker it is
//! 0600 from boot and often held. kubelet's hostPath `FileOrCreate` makes it
//! 0644. So the file alone proves nothing: it is evidence for legacy only
//! when it is a regular file that is 0600 or held right now, and the
//! decision lets it decide only when the kernel also shows legacy traces (a
//! legacy rule or DROP policy; an empty listed table is none) and
//! nothing stronger decided.
//!
//! [`hold`] takes the lock as legacy iptables does, for `stale --remove`:
//! every legacy writer that respects it waits until the removal is done.

use crate::environment;
use crate::escape::Shown as _;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::PathBuf;

pub const LOCKFILE_VAR: &str = "XTABLES_LOCKFILE";
pub const DEFAULT_LOCKFILE: &str = "/run/xtables.lock";

/// The lock file's state, as far as it bears on the mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockFileState {
    pub path: PathBuf,
    pub observed: LockObservation,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockObservation {
    Absent,
    /// Something other than a regular file (a directory a hostPath mount
    /// made, `/dev/null`, ...): no lock file, no evidence.
    NotAFile {
        kind: &'static str,
    },
    /// A regular file that `/proc/locks` lists a lock on (by its own device
    /// and inode): some iptables user holds it right now.
    Held {
        mode: u32,
    },
    /// A regular file with mode 0600, as legacy iptables and go-iptables
    /// create it.
    Mode0600,
    /// A regular file as neither leaves it (e.g. 0644 from kubelet).
    Other {
        mode: u32,
    },
}

impl LockFileState {
    /// Whether the file is a (weak) hint for legacy.
    pub fn hints_legacy(&self) -> bool {
        matches!(self.observed, LockObservation::Held { .. } | LockObservation::Mode0600)
    }

    pub fn describe(&self) -> String {
        match self.observed {
            LockObservation::Absent => "absent".to_string(),
            LockObservation::NotAFile { kind } => format!("{kind}, not a lock file: no evidence"),
            LockObservation::Held { mode } => {
                format!("mode {mode:04o}, locked right now (by legacy iptables, or go-iptables with either backend)")
            }
            LockObservation::Mode0600 => {
                "mode 0600: created by legacy iptables, or by go-iptables with either backend".to_string()
            }
            LockObservation::Other { mode } => format!("mode {mode:04o}: not created by iptables"),
        }
    }
}

/// The lock file path, as iptables itself chooses it.
pub fn lockfile_path() -> PathBuf {
    let [given] = environment::vars([LOCKFILE_VAR]);
    match given {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(DEFAULT_LOCKFILE),
    }
}

/// The xtables lock, held until dropped.
pub struct HeldLock {
    _file: std::fs::File,
}

/// Takes the xtables lock at the path iptables uses, as iptables does
/// (opened with `O_CREAT`, mode 0600, then `flock(LOCK_EX)`), waiting up to
/// `wait` for whoever holds it. The descriptor is inherited by every
/// program run while it is held (never `O_CLOEXEC`): the lock is released
/// only when the last of them ends, so a restore still emptying tables
/// after the wrapper alone was killed keeps writers that take the lock
/// waiting until it is done.
pub fn hold(wait: std::time::Duration) -> Result<HeldLock, String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let path = lockfile_path();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("cannot open the xtables lock {}: {e}", path.shown()))?;
    // SAFETY: fcntl on a descriptor this function owns; std opens every
    // file close-on-exec, which this clears.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFD, 0) } != 0 {
        let error = std::io::Error::last_os_error();
        return Err(format!("cannot pass the xtables lock {} on: {error}", path.shown()));
    }
    let deadline = std::time::Instant::now() + wait;
    loop {
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(HeldLock { _file: file });
        }
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EWOULDBLOCK) && error.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("cannot take the xtables lock {}: {error}", path.shown()));
        }
        if std::time::Instant::now() >= deadline {
            return Err(format!(
                "the xtables lock {} stayed held for {} s",
                path.shown(),
                wait.as_secs()
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Reads the lock file's metadata and, for a regular file, whether
/// `/proc/locks` lists a lock on it.
pub fn inspect() -> LockFileState {
    let path = lockfile_path();
    let observed = match std::fs::metadata(&path) {
        Err(_) => LockObservation::Absent,
        Ok(meta) if !meta.is_file() => LockObservation::NotAFile {
            kind: file_kind(&meta.file_type()),
        },
        Ok(meta) => {
            let mode = meta.permissions().mode() & 0o7777;
            if is_locked(meta.dev(), meta.ino()) {
                LockObservation::Held { mode }
            } else if mode == 0o600 {
                LockObservation::Mode0600
            } else {
                LockObservation::Other { mode }
            }
        }
    };
    LockFileState { path, observed }
}

fn file_kind(file_type: &std::fs::FileType) -> &'static str {
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Whether /proc/locks lists a lock on the file with this device and inode.
fn is_locked(dev: u64, ino: u64) -> bool {
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else {
        return false;
    };
    let wanted = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    locks_list(&locks, &wanted)
}

/// Whether a /proc/locks text has a line whose `MAJ:MIN:INODE` field is `wanted`.
fn locks_list(locks: &str, wanted: &str) -> bool {
    // "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF"; blocked waiters
    // start with "1: -> FLOCK ..." and name the same file.
    locks
        .lines()
        .any(|line| line.split_whitespace().any(|field| field == wanted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_locks_lines() {
        let locks =
            "1: FLOCK  ADVISORY  WRITE 4242 00:1a:5678 0 EOF\n1: -> FLOCK  ADVISORY  WRITE 4243 00:1a:5678 0 EOF\n";
        assert!(locks_list(locks, "00:1a:5678"));
        assert!(!locks_list(locks, "00:1a:567"));
        assert!(!locks_list("", "00:1a:5678"));
    }
}
