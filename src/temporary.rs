//! Files and links put in place under a name no other process can hold:
//! how the runtime directory's files, the backups, the metrics textfile
//! and `install`'s links are written.
//!
//! A name built from the process id is not enough: two processes that are
//! each PID 1 of their own PID namespace (two containers sharing a volume
//! or an emptyDir) have the same id, and one would unlink or overwrite the
//! other's temporary file. So a file is made first without any name
//! (`O_TMPFILE`), written, and only then linked in with `linkat`; where the
//! file system or the kernel cannot do that, or linking an unnamed file is
//! refused (it needs `CAP_DAC_READ_SEARCH`, or `/proc` for the
//! `/proc/self/fd` route), the file is created under a random name
//! (`getrandom`) with `O_EXCL`, which fails rather than open anything that
//! is already there: another's file, a link, a FIFO that would block. A
//! name that is taken is never removed; another random name is tried.

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, Mode};
use nix::unistd::{fsync, linkat, unlinkat, UnlinkatFlags};
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Write as _};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd};
use std::os::unix::ffi::OsStrExt as _;

/// How a new file takes its name.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Placement {
    /// Replaces whatever file holds the name, in one rename.
    Replace,
    /// Only where the name is free: a file already there is kept, and the
    /// write fails with `EEXIST`.
    New,
}

/// How many random names are tried before giving up: one taken name is
/// already a sign that something fills the directory with them.
const NAME_TRIES: usize = 8;

/// Writes `contents` whole into a new file (`mode`, less the umask) named
/// `name` in `dir`: a reader of `name` sees the old file or the new one,
/// never a part. With `sync`, the file and the directory reach the disk
/// before this returns. On failure, nothing is left behind but what was
/// there before.
pub fn write_file(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    contents: &[u8],
    mode: Mode,
    placement: Placement,
    sync: bool,
) -> io::Result<()> {
    let unnamed_flags = OFlag::O_TMPFILE | OFlag::O_WRONLY | OFlag::O_CLOEXEC;
    if let Ok(raw) = openat(Some(dir.as_raw_fd()), ".", unnamed_flags, mode) {
        // SAFETY: openat returned a new descriptor that nothing else owns.
        let mut file = unsafe { File::from_raw_fd(raw) };
        file.write_all(contents)?;
        if sync {
            file.sync_all()?;
        }
        if let Some(placed) = link_unnamed(dir, &file, name, placement) {
            placed?;
            return synced(dir, sync);
        }
        // Linking an unnamed file is refused here: a named one then.
    }
    write_named(dir, name, contents, mode, placement, sync)
}

/// [`write_file`] through a file created under a random name, where an
/// unnamed one cannot be made or linked.
fn write_named(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    contents: &[u8],
    mode: Mode,
    placement: Placement,
    sync: bool,
) -> io::Result<()> {
    let (temporary, mut file) = create_named(dir, name, mode)?;
    let written = (|| {
        file.write_all(contents)?;
        if sync {
            file.sync_all()?;
        }
        drop(file);
        give_name(dir, &temporary, name, placement)?;
        synced(dir, sync)
    })();
    // Renamed into place, the temporary name is gone; otherwise it is ours.
    if written.is_err() || placement == Placement::New {
        let _ = unlinkat(Some(dir.as_raw_fd()), temporary.as_os_str(), UnlinkatFlags::NoRemoveDir);
    }
    written
}

/// Makes `name` in `dir` a symlink to `target` in one rename, replacing
/// what was there. Returns the new link's inode, by which a later undo
/// knows whether the name still holds this link.
pub fn replace_with_symlink(dir: BorrowedFd<'_>, name: &OsStr, target: &std::path::Path) -> io::Result<u64> {
    let temporary = symlink_named(dir, name, target)?;
    let placed = fstatat(
        Some(dir.as_raw_fd()),
        temporary.as_os_str(),
        AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .and_then(|stat| {
        renameat(
            Some(dir.as_raw_fd()),
            temporary.as_os_str(),
            Some(dir.as_raw_fd()),
            name,
        )?;
        Ok(inode_of(&stat))
    });
    if placed.is_err() {
        let _ = unlinkat(Some(dir.as_raw_fd()), temporary.as_os_str(), UnlinkatFlags::NoRemoveDir);
    }
    Ok(placed?)
}

/// A stat's inode number: `ino_t` is 32 bits in armv7's glibc `struct
/// stat` (as built here), 64 on the other targets.
#[allow(clippy::useless_conversion)]
pub fn inode_of(stat: &nix::sys::stat::FileStat) -> u64 {
    u64::from(stat.st_ino)
}

/// A new symlink to `target` in `dir` under a random name beside `name`;
/// returns that name.
pub fn symlink_named(dir: BorrowedFd<'_>, name: &OsStr, target: &std::path::Path) -> io::Result<OsString> {
    with_random_name(name, |temporary| {
        nix::unistd::symlinkat(target, Some(dir.as_raw_fd()), temporary)
    })
}

/// A new hard link to `name` in `dir` under a random name beside it;
/// returns that name.
pub fn hard_link_named(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OsString> {
    with_random_name(name, |temporary| {
        linkat(
            Some(dir.as_raw_fd()),
            name,
            Some(dir.as_raw_fd()),
            temporary,
            AtFlags::empty(),
        )
    })
}

/// `.NAME.<16 random hex digits>.tmp`: hidden, beside `name`, and not a
/// name a reader of `name`'s kind of file picks up (`*.prom`).
pub fn random_name(name: &OsStr) -> OsString {
    let mut random = OsString::from(".");
    random.push(name);
    random.push(format!(".{:016x}.tmp", random_u64()));
    random
}

/// Creates a file under a random name beside `name`, exclusively and
/// without following links or blocking on what it finds.
fn create_named(dir: BorrowedFd<'_>, name: &OsStr, mode: Mode) -> io::Result<(OsString, File)> {
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let mut opened = None;
    let temporary = with_random_name(name, |temporary| {
        opened = Some(openat(Some(dir.as_raw_fd()), temporary, flags, mode)?);
        Ok(())
    })?;
    let raw = opened.expect("a name is returned only once its file is open");
    // SAFETY: openat returned a new descriptor that nothing else owns.
    Ok((temporary, unsafe { File::from_raw_fd(raw) }))
}

/// Runs `make` with random names beside `name` until one is free.
fn with_random_name(name: &OsStr, mut make: impl FnMut(&OsStr) -> nix::Result<()>) -> io::Result<OsString> {
    for _ in 0..NAME_TRIES {
        let temporary = random_name(name);
        match make(&temporary) {
            Ok(()) => return Ok(temporary),
            Err(Errno::EEXIST) => continue,
            Err(errno) => return Err(errno.into()),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{NAME_TRIES} random temporary names beside {} were all taken",
            name.to_string_lossy()
        ),
    ))
}

/// Gives the named temporary file `name`.
fn give_name(dir: BorrowedFd<'_>, temporary: &OsStr, name: &OsStr, placement: Placement) -> io::Result<()> {
    let dir = Some(dir.as_raw_fd());
    match placement {
        Placement::Replace => renameat(dir, temporary, dir, name)?,
        Placement::New => linkat(dir, temporary, dir, name, AtFlags::empty())?,
    }
    Ok(())
}

/// Links the unnamed `file` in as `name`; None when linking an unnamed
/// file is refused here (then a named temporary file is used instead).
fn link_unnamed(dir: BorrowedFd<'_>, file: &File, name: &OsStr, placement: Placement) -> Option<io::Result<()>> {
    let link_as = |as_name: &OsStr| -> nix::Result<()> {
        let empty = c"";
        let as_c_name = CString::new(as_name.as_bytes()).map_err(|_| Errno::EINVAL)?;
        // SAFETY: both paths are NUL-terminated; linkat only reads them.
        let rc = unsafe {
            libc::linkat(
                file.as_raw_fd(),
                empty.as_ptr(),
                dir.as_raw_fd(),
                as_c_name.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        match Errno::last() {
            // Without CAP_DAC_READ_SEARCH: through /proc, if it is there.
            Errno::ENOENT | Errno::EPERM => {
                let through_proc = format!("/proc/self/fd/{}", file.as_raw_fd());
                linkat(
                    None,
                    OsStr::new(&through_proc),
                    Some(dir.as_raw_fd()),
                    as_name,
                    AtFlags::AT_SYMLINK_FOLLOW,
                )
            }
            errno => Err(errno),
        }
    };
    let refused = |errno: Errno| matches!(errno, Errno::ENOENT | Errno::EPERM | Errno::EACCES | Errno::EXDEV);
    match placement {
        Placement::New => match link_as(name) {
            Ok(()) => Some(Ok(())),
            Err(errno) if refused(errno) => None,
            Err(errno) => Some(Err(errno.into())),
        },
        Placement::Replace => {
            let mut refusal = None;
            let temporary = with_random_name(name, |temporary| {
                link_as(temporary).inspect_err(|errno| {
                    if refused(*errno) {
                        refusal = Some(*errno);
                    }
                })
            });
            if refusal.is_some() {
                return None;
            }
            let temporary = match temporary {
                Ok(temporary) => temporary,
                Err(e) => return Some(Err(e)),
            };
            let placed = give_name(dir, &temporary, name, Placement::Replace);
            if placed.is_err() {
                let _ = unlinkat(Some(dir.as_raw_fd()), temporary.as_os_str(), UnlinkatFlags::NoRemoveDir);
            }
            Some(placed)
        }
    }
}

/// With `sync`, the directory's entries reach the disk.
fn synced(dir: BorrowedFd<'_>, sync: bool) -> io::Result<()> {
    if sync {
        fsync(dir.as_raw_fd())?;
    }
    Ok(())
}

/// 64 random bits from the kernel (`getrandom`, never waiting for the
/// entropy pool: a name needs to be unpredictable enough not to collide,
/// and `O_EXCL` catches the collision anyway); where even that fails, the
/// clock, the process id and a counter.
fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most bytes.len() bytes into the buffer.
    let got = unsafe {
        libc::syscall(
            libc::SYS_getrandom,
            bytes.as_mut_ptr(),
            bytes.len(),
            libc::GRND_NONBLOCK,
        )
    };
    if got == bytes.len() as libc::c_long {
        return u64::from_ne_bytes(bytes);
    }
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64);
    let count = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    nanos ^ (u64::from(std::process::id()) << 32) ^ count.rotate_left(17)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> (std::path::PathBuf, File) {
        let dir = std::env::temp_dir().join(format!("iptw-temporary-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let fd = File::open(&dir).unwrap();
        (dir, fd)
    }

    #[test]
    fn replaces_and_leaves_nothing_else() {
        let (path, dir) = scratch("replace");
        let mode = Mode::S_IRUSR | Mode::S_IWUSR;
        write_file(dir.as_fd(), "state".as_ref(), b"one", mode, Placement::Replace, false).unwrap();
        write_file(dir.as_fd(), "state".as_ref(), b"two", mode, Placement::Replace, true).unwrap();
        assert_eq!(std::fs::read(path.join("state")).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["state"]);
        let mode = std::fs::metadata(path.join("state")).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0);
        std::fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_new_file_never_replaces() {
        let (path, dir) = scratch("new");
        let mode = Mode::S_IRUSR | Mode::S_IWUSR;
        write_file(dir.as_fd(), "backup".as_ref(), b"first", mode, Placement::New, true).unwrap();
        let again = write_file(dir.as_fd(), "backup".as_ref(), b"second", mode, Placement::New, true);
        assert_eq!(again.unwrap_err().raw_os_error(), Some(libc::EEXIST));
        assert_eq!(std::fs::read(path.join("backup")).unwrap(), b"first");
        assert_eq!(std::fs::read_dir(&path).unwrap().count(), 1);
        std::fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn without_an_unnamed_file_a_random_name_serves_alike() {
        let (path, dir) = scratch("named");
        let mode = Mode::S_IRUSR | Mode::S_IWUSR;
        let name = "state".as_ref();
        write_named(dir.as_fd(), name, b"one", mode, Placement::Replace, false).unwrap();
        write_named(dir.as_fd(), name, b"two", mode, Placement::Replace, true).unwrap();
        let again = write_named(dir.as_fd(), name, b"three", mode, Placement::New, true);
        assert_eq!(again.unwrap_err().raw_os_error(), Some(libc::EEXIST));
        assert_eq!(std::fs::read(path.join("state")).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["state"]);
        std::fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn random_names_differ_and_stay_hidden() {
        let (a, b) = (random_name("iptables".as_ref()), random_name("iptables".as_ref()));
        assert_ne!(a, b);
        let a = a.to_str().unwrap();
        assert!(a.starts_with(".iptables.") && a.ends_with(".tmp"), "{a}");
    }
}
