//! Where `stale --remove` keeps its backup, and how the files get there.
//!
//! The directory is `--backup-dir DIR` (made 0700 when missing) or a new
//! `stale-backup-<UTC time>` in the runtime directory. An existing
//! directory is used only when the caller owns it and nobody else may write
//! to it, nor to any directory above it (sticky ones aside, as `/tmp`), so
//! that nobody else can swap a backup before the undo. The path is resolved
//! first (links followed), then each component of the resolved path is
//! opened from `/` without following links and checked through its open
//! descriptor, and the resolved path is the one printed: a link someone else
//! owns can neither pass the checks nor later re-point the printed undo.
//!
//! Its path must be one a shell line carries as printed (no control or
//! invisible character, no byte that is not UTF-8): the undo of each file,
//! `<tool> < <path>` ([`undo`], the path one shell word), is printed to be
//! run as it is.
//!
//! Each file is written under no name or a random one ([`crate::temporary`]),
//! synced, then linked under its name (mode 0600): a reader never sees a
//! part, and a file that was there before is never replaced. A removal that backs up again (the ruleset
//! moved under it) replaces only the file it wrote itself.

use crate::escape::{self, Shown as _};
use crate::run_dir::RunDir;
use crate::temporary::{self, Placement};
use crate::warnings_record::utc_time;
use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, mkdirat, FileStat, Mode as FileMode, SFlag};
use nix::unistd::{unlinkat, Uid, UnlinkatFlags};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The backup directory, open.
pub struct BackupDir {
    fd: OwnedFd,
    /// Absolute.
    pub path: PathBuf,
}

impl BackupDir {
    /// `dir` (made, mode 0700, when missing), or a new directory
    /// `stale-backup-<UTC time>` in the runtime directory.
    pub fn open(dir: Option<&Path>) -> Result<BackupDir, String> {
        let Some(dir) = dir else {
            return BackupDir::new_in_run_dir();
        };
        let dir = absolute(dir)?;
        match mkdirat(None, &dir, FileMode::S_IRWXU) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(format!("cannot make {}: {e}", dir.shown())),
        }
        let backup = BackupDir::open_existing(&dir)?;
        let stat = fstat(backup.fd.as_raw_fd()).map_err(|e| format!("{}: {e}", backup.path.shown()))?;
        if stat.st_uid != Uid::effective().as_raw() || stat.st_mode & 0o022 != 0 {
            return Err(format!(
                "{} is owned by uid {} with mode {:04o}: a backup directory must be the caller's (uid {}) and writable by nobody else; give a new directory",
                backup.path.shown(),
                stat.st_uid,
                stat.st_mode & 0o7777,
                Uid::effective()
            ));
        }
        Ok(backup)
    }

    fn new_in_run_dir() -> Result<BackupDir, String> {
        let run_dir = RunDir::open_or_create().ok_or_else(|| {
            "the runtime directory cannot be used (IPTABLES_WRAPPER_RUN_DIR must name a directory of this user with mode 0700, or a path where one can be made); give --backup-dir DIR".to_string()
        })?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|_| "the clock is before 1970: give --backup-dir DIR".to_string())?
            .as_secs();
        let stamp: String = utc_time(now).chars().filter(|c| *c != '-' && *c != ':').collect();
        let run_dir_path = absolute(run_dir.path())?;
        for attempt in 1..100 {
            let name = match attempt {
                1 => format!("stale-backup-{stamp}"),
                n => format!("stale-backup-{stamp}.{n}"),
            };
            let path = run_dir_path.join(&name);
            match mkdirat(None, &path, FileMode::S_IRWXU) {
                Ok(()) => return BackupDir::open_existing(&path),
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(format!("cannot make {}: {e}", path.shown())),
            }
        }
        Err(format!(
            "too many backups named stale-backup-{stamp} in {}",
            run_dir_path.shown()
        ))
    }

    /// Opens `path` (absolute) resolved, a directory whose ancestors nobody
    /// else may write to: each component opened from `/` without following
    /// links, and checked by `fstat` of what was opened.
    fn open_existing(path: &Path) -> Result<BackupDir, String> {
        let resolved = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.shown()))?;
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let open_at = |dir: Option<&OwnedFd>, name: &Path, shown: &Path| {
            let raw = openat(dir.map(|fd| fd.as_raw_fd()), name, flags, FileMode::empty()).map_err(|e| {
                let changed = if e == Errno::ELOOP { " (it became a link)" } else { "" };
                format!("{}: {e}{changed}", shown.shown())
            })?;
            // SAFETY: openat returned a new descriptor that nothing else owns.
            Ok::<_, String>(unsafe { OwnedFd::from_raw_fd(raw) })
        };
        if !escape::shell_safe(&resolved.shown()) {
            return Err(format!(
                "{} holds a character a printed undo cannot carry (a control or invisible character, or a byte that is not UTF-8): give another directory",
                resolved.shown()
            ));
        }
        let mut walked = PathBuf::from("/");
        let mut fd = open_at(None, &walked, &walked)?;
        for component in resolved.components().skip(1) {
            let stat = fstat(fd.as_raw_fd()).map_err(|e| format!("{}: {e}", walked.shown()))?;
            if let Some(why) = open_to_others(&stat) {
                return Err(format!(
                    "{} is {why}: someone else could replace the backup directory {} in it",
                    walked.shown(),
                    resolved.shown()
                ));
            }
            walked.push(component);
            fd = open_at(Some(&fd), Path::new(component.as_os_str()), &walked)?;
        }
        match fstat(fd.as_raw_fd()) {
            Ok(stat) if stat.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFDIR.bits() => {
                Ok(BackupDir { fd, path: resolved })
            }
            Ok(_) => Err(format!("{}: not a directory", resolved.shown())),
            Err(e) => Err(format!("{}: {e}", resolved.shown())),
        }
    }

    /// Writes `contents` to a new file `name` (mode 0600) whole; with
    /// `replace`, over the file of that name this removal wrote before.
    pub fn write(&self, name: &str, contents: &[u8], replace: bool) -> std::io::Result<PathBuf> {
        let placement = if replace { Placement::Replace } else { Placement::New };
        let mode = FileMode::S_IRUSR | FileMode::S_IWUSR;
        temporary::write_file(self.fd.as_fd(), name.as_ref(), contents, mode, placement, true)?;
        Ok(self.path.join(name))
    }

    /// A path in the directory for a file a restore tool makes (its lock).
    pub fn private_path(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Removes the directory, if it is empty (nothing was backed up).
    pub fn remove_empty(&self) {
        let _ = unlinkat(None, &self.path, UnlinkatFlags::RemoveDir);
    }

    /// Removes a file the removal made for itself.
    pub fn remove(&self, name: &str) {
        let _ = unlinkat(Some(self.fd.as_raw_fd()), name, UnlinkatFlags::NoRemoveDir);
    }
}

/// The command that restores the backup file at `path` (as shown) with
/// `tool`, to be run as printed: `path` one shell word.
pub fn undo(tool: &str, path: &str) -> String {
    format!("{tool} < {}", escape::shell_word(path))
}

/// Why a directory lets someone other than root and the caller change
/// what is in it, if it does: another owner, or group or world write
/// without the sticky bit.
fn open_to_others(stat: &FileStat) -> Option<String> {
    let owner = stat.st_uid;
    if owner != 0 && owner != Uid::effective().as_raw() {
        return Some(format!("owned by uid {owner}"));
    }
    let sticky = stat.st_mode & libc::S_ISVTX != 0;
    if stat.st_mode & 0o022 != 0 && !sticky {
        return Some(format!("writable by others (mode {:04o})", stat.st_mode & 0o7777));
    }
    None
}

/// `path` made absolute from the working directory (resolved when opened).
fn absolute(path: &Path) -> Result<PathBuf, String> {
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    std::env::current_dir().map(|cwd| cwd.join(path)).map_err(|e| {
        format!(
            "{}: the working directory is unknown ({e}): give an absolute path",
            path.shown()
        )
    })
}
