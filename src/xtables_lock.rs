//! What `/run/xtables.lock` says: a weak hint that legacy iptables runs here.
//!
//! Only legacy iptables creates this file (mode 0600) or locks it. kubelet's
//! hostPath `FileOrCreate` makes it 0644, so its existence alone proves
//! nothing; and a container that itself ran legacy leaves the same traces.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
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
    /// Held right now (listed in /proc/locks): a legacy command is running.
    Locked,
    /// A 0600 regular file: legacy iptables created it since boot.
    CreatedByLegacy,
    /// Present, but not as legacy iptables leaves it (e.g. 0644 from kubelet).
    Inconclusive {
        mode: u32,
    },
}

impl LockFileState {
    /// Whether the file is a (weak) hint for legacy.
    pub fn hints_legacy(&self) -> bool {
        matches!(
            self.observed,
            LockObservation::Locked | LockObservation::CreatedByLegacy
        )
    }

    pub fn describe(&self) -> String {
        match self.observed {
            LockObservation::Absent => "absent".to_string(),
            LockObservation::Locked => "locked right now (a legacy iptables command is running)".to_string(),
            LockObservation::CreatedByLegacy => "mode 0600: created by legacy iptables".to_string(),
            LockObservation::Inconclusive { mode } => format!("mode {mode:04o}: not created by iptables"),
        }
    }
}

/// The lock file path, as iptables itself chooses it.
pub fn lockfile_path() -> PathBuf {
    match std::env::var_os(LOCKFILE_VAR) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(DEFAULT_LOCKFILE),
    }
}

/// Reads the lock file's metadata and whether /proc/locks lists it.
pub fn inspect() -> LockFileState {
    let path = lockfile_path();
    let observed = match std::fs::metadata(&path) {
        Err(_) => LockObservation::Absent,
        Ok(meta) => {
            let mode = meta.permissions().mode() & 0o7777;
            if is_locked(meta.dev(), meta.ino()) {
                LockObservation::Locked
            } else if meta.is_file() && mode == 0o600 {
                LockObservation::CreatedByLegacy
            } else {
                LockObservation::Inconclusive { mode }
            }
        }
    };
    LockFileState { path, observed }
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
