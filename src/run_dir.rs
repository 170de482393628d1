//! The wrapper's own runtime directory: where it may keep small state
//! between calls (a count cache, a record of its warnings).
//!
//! `IPTABLES_WRAPPER_RUN_DIR`, or `/run/iptables-wrapper` by default. The
//! directory is used only when it is exactly what the wrapper would have made
//! itself: a real directory (not a symlink), owned by the effective user, with
//! no access for group or others. Files in it are likewise used only when they
//! are regular files of the effective user with no group or other access, are
//! opened without following symlinks, and are replaced whole by a rename.
//! Anything else (a read-only `/run`, a relative path, another owner, a link)
//! means the directory is not used, which costs speed or the record, never
//! correctness: every caller must work without it.

use crate::escape::Shown as _;
use crate::settings::{self, RUN_DIR_VAR};
use crate::temporary::{self, Placement};
use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::geteuid;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

pub const DEFAULT_RUN_DIR: &str = "/run/iptables-wrapper";

/// The runtime directory, open and checked.
pub struct RunDir {
    fd: OwnedFd,
    path: PathBuf,
    /// The directory's mode bits, as its `fstat` showed them.
    mode: libc::mode_t,
}

impl RunDir {
    /// Opens the directory if it exists and is safe to use; never creates it.
    pub fn open() -> Option<RunDir> {
        RunDir::open_at(configured_path()?, false)
    }

    /// Opens the directory, creating it (mode 0700) if it is missing.
    pub fn open_or_create() -> Option<RunDir> {
        RunDir::open_at(configured_path()?, true)
    }

    fn open_at(path: PathBuf, create: bool) -> Option<RunDir> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let opened = match openat(None, &path, flags, Mode::empty()) {
            Err(Errno::ENOENT) if create => match mkdirat(None, &path, Mode::S_IRWXU) {
                Ok(()) | Err(Errno::EEXIST) => openat(None, &path, flags, Mode::empty()),
                Err(errno) => Err(errno),
            },
            other => other,
        };
        let fd = match opened {
            // SAFETY: openat returned a new descriptor that nothing else owns.
            Ok(raw) => unsafe { OwnedFd::from_raw_fd(raw) },
            Err(errno) => {
                log::debug!("runtime directory {} not used: {errno}", path.shown());
                return None;
            }
        };
        match fstat(fd.as_raw_fd()) {
            Ok(stat) if is_private(&stat, SFlag::S_IFDIR) => Some(RunDir {
                fd,
                path,
                mode: stat.st_mode as libc::mode_t,
            }),
            Ok(_) => {
                log::debug!(
                    "runtime directory {} not used: not a directory of this user with mode 0700",
                    path.shown()
                );
                None
            }
            Err(errno) => {
                log::debug!("runtime directory {} not used: {errno}", path.shown());
                None
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this process may create files here: not a read-only mount,
    /// and write and search access for the effective user (root needs no
    /// mode bits). One `faccessat2` (`AT_EACCESS`); where that system call
    /// is missing (before Linux 5.8) or refused, the owner's write bit, as
    /// the directory's `fstat` showed it, decides for a user other than root,
    /// and a read-only mount shows only when a write fails.
    pub fn writable(&self) -> bool {
        // SAFETY: the path is a NUL-terminated literal; nothing is written.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_faccessat2,
                self.fd.as_raw_fd(),
                c".".as_ptr(),
                libc::W_OK | libc::X_OK,
                libc::AT_EACCESS,
            )
        };
        if rc == 0 {
            return true;
        }
        match Errno::last() {
            Errno::ENOSYS | Errno::EPERM => geteuid().is_root() || self.mode & Mode::S_IWUSR.bits() != 0,
            errno => {
                log::debug!("runtime directory {} not writable: {errno}", self.path.shown());
                false
            }
        }
    }

    /// The contents of file `name`, if it is a private regular file of this
    /// user of at most `max_len` bytes; None otherwise (absent, too large,
    /// someone else's, a link, unreadable).
    pub fn read(&self, name: &str, max_len: usize) -> Option<Vec<u8>> {
        let (mut file, stat) = self.open_private(name)?;
        if stat.st_size as u64 > max_len as u64 {
            return None;
        }
        let mut contents = Vec::with_capacity(stat.st_size as usize);
        // One byte more than allowed shows a file that grew since fstat.
        (&mut file).take(max_len as u64 + 1).read_to_end(&mut contents).ok()?;
        (contents.len() <= max_len).then_some(contents)
    }

    /// File `name` open for reading, with its `fstat`, if it is a private
    /// regular file of this user (opened without following a link).
    pub fn open_private(&self, name: &str) -> Option<(File, FileStat)> {
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let raw = openat(Some(self.fd.as_raw_fd()), name, flags, Mode::empty()).ok()?;
        // SAFETY: openat returned a new descriptor that nothing else owns.
        let file = unsafe { File::from_raw_fd(raw) };
        let stat = fstat(file.as_raw_fd()).ok()?;
        is_private(&stat, SFlag::S_IFREG).then_some((file, stat))
    }

    /// The open directory, for files made in it by their own rules.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// When file `name` was last modified (seconds since the Unix epoch), if
    /// it is a private regular file of this user; one `fstatat`, not
    /// following a link.
    pub fn modified(&self, name: &str) -> Option<i64> {
        let stat = fstatat(Some(self.fd.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
        is_private(&stat, SFlag::S_IFREG).then_some(mtime(&stat))
    }

    /// Replaces file `name` with `contents` in one rename (mode 0600), so a
    /// reader sees the old file or the new one, never a part; written under
    /// no name or a random one ([`temporary`]), which no other process
    /// sharing the directory can hold.
    pub fn replace(&self, name: &str, contents: &[u8]) -> io::Result<()> {
        let mode = Mode::S_IRUSR | Mode::S_IWUSR;
        temporary::write_file(
            self.fd.as_fd(),
            name.as_ref(),
            contents,
            mode,
            Placement::Replace,
            false,
        )
    }
}

/// When file `name` of the configured directory was last modified, if it
/// is a private regular file of this user: one `fstatat` of its path (not
/// following a link there), without opening the directory or checking it.
/// Only for a question to which an unusable directory gives the same answer
/// as a file that is there (see `warnings_record::due`).
pub fn modified_by_path(name: &str) -> Option<i64> {
    let path = configured_path()?.join(name);
    let stat = fstatat(None, &path, AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
    is_private(&stat, SFlag::S_IFREG).then_some(mtime(&stat))
}

/// A stat's modification time in seconds: `time_t` is 32 bits in armv7's
/// glibc `struct stat` (as built here), 64 on the other targets.
#[allow(clippy::useless_conversion)]
fn mtime(stat: &FileStat) -> i64 {
    i64::from(stat.st_mtime)
}

/// The configured directory: absolute paths only (a relative one would
/// depend on the caller's working directory).
fn configured_path() -> Option<PathBuf> {
    let path = match settings::current().value(RUN_DIR_VAR) {
        Some(value) => PathBuf::from(value),
        None => PathBuf::from(DEFAULT_RUN_DIR),
    };
    if path.is_absolute() {
        Some(path)
    } else {
        log::debug!("{RUN_DIR_VAR}={} is not an absolute path: not used", path.shown());
        None
    }
}

/// Of the given file type, owned by the effective user, no group or other access.
fn is_private(stat: &FileStat, kind: SFlag) -> bool {
    let mode = stat.st_mode as libc::mode_t;
    (mode & SFlag::S_IFMT.bits()) == kind.bits() && stat.st_uid == geteuid().as_raw() && mode & 0o077 == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("iptw-run-dir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn creates_private_and_round_trips() {
        let path = scratch("create");
        let dir = RunDir::open_at(path.clone(), true).expect("created");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(dir.read("state", 64), None);
        dir.replace("state", b"one").unwrap();
        dir.replace("state", b"two").unwrap();
        assert_eq!(dir.read("state", 64).as_deref(), Some(&b"two"[..]));
        assert_eq!(dir.read("state", 2), None, "larger than allowed");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert!((now - 5..=now + 5).contains(&dir.modified("state").unwrap()));
        assert_eq!(dir.modified("absent"), None);
        let mode = std::fs::metadata(path.join("state")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn refuses_what_it_would_not_have_made() {
        let path = scratch("refuse");
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(RunDir::open_at(path.clone(), false).is_none(), "group/other access");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = path.with_extension("link");
        let _ = std::fs::remove_file(&link);
        symlink(&path, &link).unwrap();
        assert!(RunDir::open_at(link.clone(), true).is_none(), "a symlink");
        let dir = RunDir::open_at(path.clone(), false).expect("private directory");
        std::fs::write(path.join("open"), b"x").unwrap();
        std::fs::set_permissions(path.join("open"), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(dir.read("open", 64), None, "a file others can read");
        symlink(path.join("open"), path.join("linked")).unwrap();
        assert_eq!(dir.read("linked", 64), None, "a symlinked file");
        assert_eq!(dir.modified("open"), None, "a file others can read");
        assert_eq!(dir.modified("linked"), None, "a symlinked file");
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_dir_all(&path).unwrap();
    }
}
