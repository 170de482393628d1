//! Files of the kernel's own procfs, told apart from what can stand in for
//! them.
//!
//! A table list under `/proc` is the kernel's word only when `/proc` is a
//! procfs and the path to the file crosses no mount inside it. A tmpfs or a
//! directory at `/proc`, or a directory bind-mounted over
//! `/proc/<pid>/task/<tid>/net` by a process that then execs the wrapper
//! (same pid, same `thread-self`), would list whatever it was given; so
//! would the real procfs `net` directory of another network namespace bound
//! there. So `/proc` is opened once per process and checked with `fstatfs`
//! (`PROC_SUPER_MAGIC`), and files are opened from it with `openat2`'s
//! `RESOLVE_NO_XDEV`, which fails on any mount crossed on the way. Through
//! an unmounted procfs path, `thread-self` is the calling thread, so its
//! `net` is this network namespace's (a procfs of a PID namespace that
//! cannot see the caller has no `thread-self` target: the file is absent).
//! In the main thread `self` is the same directory, one lookup cheaper, and
//! is used instead.
//!
//! Where `openat2` is missing (before Linux 5.6) or refused (seccomp
//! profiles that predate it), files are opened with `openat` and their own
//! `fstatfs` must say procfs: a tmpfs or a plain directory mounted inside
//! is still refused, a procfs directory of another namespace bound inside is
//! not seen.

use crate::privilege::noted;
use nix::sys::statfs::{fstatfs, PROC_SUPER_MAGIC};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

/// `struct open_how` of `<linux/openat2.h>` (libc's cannot be built here:
/// it is marked non-exhaustive).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Where procfs is expected.
pub const ROOT: &str = "/proc";

/// `/proc`, open (`O_PATH`) and checked to be a procfs, or why not; once
/// per process.
fn root() -> Result<BorrowedFd<'static>, &'static str> {
    static ROOT_FD: OnceLock<Result<OwnedFd, String>> = OnceLock::new();
    let root = ROOT_FD.get_or_init(|| {
        let path = CString::new(ROOT).expect("no NUL");
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
        // SAFETY: `path` is NUL-terminated; a returned descriptor is new.
        // (musl's `open` follows O_CLOEXEC with an fcntl; `openat` does not.)
        let raw = unsafe { libc::openat(libc::AT_FDCWD, path.as_ptr(), flags) };
        if raw < 0 {
            return Err(format!("{ROOT}: {}", noted(io::Error::last_os_error())));
        }
        // SAFETY: open returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        match fstatfs(&fd) {
            Ok(fs) if fs.filesystem_type() == PROC_SUPER_MAGIC => Ok(fd),
            Ok(fs) => Err(format!(
                "{ROOT} is not the kernel's procfs (filesystem type {:#x}: a tmpfs or a directory put there)",
                fs.filesystem_type().0
            )),
            Err(errno) => Err(format!("{ROOT}: fstatfs: {errno}")),
        }
    });
    match root {
        // SAFETY: the descriptor lives in a static and is never closed.
        Ok(fd) => Ok(unsafe { BorrowedFd::borrow_raw(fd.as_raw_fd()) }),
        Err(why) => Err(why.as_str()),
    }
}

/// The whole of a small file, read with plain `read`s until end of file
/// (`std`'s `read_to_end` first asks `fstat` and `lseek` for a size hint).
pub fn read_all(fd: OwnedFd) -> io::Result<Vec<u8>> {
    let mut contents = Vec::new();
    let mut buffer = [0u8; 512];
    loop {
        match nix::unistd::read(fd.as_raw_fd(), &mut buffer) {
            Ok(0) => return Ok(contents),
            Ok(n) => contents.extend_from_slice(&buffer[..n]),
            Err(nix::errno::Errno::EINTR) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
}

/// Whether `/proc` is the kernel's procfs.
pub fn is_mounted() -> bool {
    root().is_ok()
}

/// Opens `/proc/<relative>` with `flags` (`O_CLOEXEC` is added) if it is
/// the kernel's own file: `ErrorKind::NotFound` only when procfs itself
/// says the file is absent; any doubt about `/proc` or the path is another
/// error, which says why.
pub fn open(relative: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
    let root = root().map_err(io::Error::other)?;
    let relative = &*through_self(relative);
    let path = CString::new(relative).map_err(|_| io::Error::other("a NUL in a procfs path"))?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: libc::RESOLVE_NO_XDEV,
    };
    // SAFETY: `path` is NUL-terminated and `how` is an open_how of the size
    // passed; a returned descriptor is new.
    let raw = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    } as libc::c_int;
    if raw >= 0 {
        // SAFETY: openat2 returned a new descriptor that nothing else owns.
        return Ok(unsafe { OwnedFd::from_raw_fd(raw) });
    }
    let error = noted(io::Error::last_os_error());
    match error.raw_os_error() {
        Some(libc::EXDEV) => Err(io::Error::other(format!(
            "{ROOT}/{relative}: a mount inside {ROOT} on the way (something is mounted over part of procfs), so it is not the kernel's own file"
        ))),
        // No openat2 (before 5.6), or a seccomp profile that predates it.
        Some(libc::ENOSYS | libc::EPERM) => open_checked(root, &path, relative, flags),
        _ => Err(error),
    }
}

/// `thread-self/...` as `self/...` in the process's main thread, where both
/// name the same directory (the thread group's leader is that thread, so
/// `/proc/<pid>/net` is its network namespace), and `self` takes procfs one
/// lookup of a directory of this process fewer (`task/<tid>`: about 6 us of
/// a wrapped call that lists the legacy tables, measured). Any other thread
/// keeps `thread-self`: it may be in a namespace of its own.
fn through_self(relative: &str) -> std::borrow::Cow<'_, str> {
    let Some(rest) = relative.strip_prefix("thread-self/") else {
        return relative.into();
    };
    // SAFETY: neither call has arguments or side effects.
    let main_thread = unsafe { libc::syscall(libc::SYS_gettid) == libc::getpid() as libc::c_long };
    if main_thread {
        ["self/", rest].concat().into()
    } else {
        relative.into()
    }
}

/// `openat`, then the file's own `fstatfs` must say procfs.
fn open_checked(root: BorrowedFd, path: &CString, relative: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: `path` is NUL-terminated; a returned descriptor is new.
    let raw = unsafe { libc::openat(root.as_raw_fd(), path.as_ptr(), flags | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(noted(io::Error::last_os_error()));
    }
    // SAFETY: openat returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    match fstatfs(&fd) {
        Ok(fs) if fs.filesystem_type() == PROC_SUPER_MAGIC => Ok(fd),
        Ok(_) => Err(io::Error::other(format!(
            "{ROOT}/{relative} is not on procfs (something is mounted over part of {ROOT}), so it is not the kernel's own file"
        ))),
        Err(errno) => Err(io::Error::from(errno)),
    }
}
