//! Whether a path may be trusted to decide what root runs: the rule of
//! sshd's `StrictModes` and sudo's checks of its own files.
//!
//! A path is trusted when every component from `/` down to the last one,
//! and every symbolic link followed on the way (then each component of its
//! target in turn, at most [`MAX_LINKS`] links), is owned by root or by this
//! process's effective user, and every directory and regular file on the way
//! is writable by nobody else: group and other write bits clear. A
//! world-writable directory with the sticky bit is not trusted either
//! (anyone may add an entry to it). A link's own mode bits mean nothing (its
//! owner counts); the type of the last component is the caller's to check.
//!
//! The one exception: a directory or file with write bits for others on a
//! read-only mount, which nobody can write through. That is what a
//! Kubernetes ConfigMap volume is inside its container: kubelet makes its
//! directory mode 0777 (the emptyDir it wraps) and mounts it read-only.
//! What this cannot see: another, writable mount of the same filesystem
//! elsewhere (on the node, the ConfigMap's directory is reachable only
//! through kubelet's own root-only directories).
//!
//! API:
//! - [`check_trusted`]`(path, what)`: the walk from `/` for an absolute path;
//!   the result holds the path without links and the last component's
//!   status (the caller checks its type and, where it must be its own, its
//!   owner).
//! - [`check_trusted_in`]`(dir, name, what)`: the same walk from a directory
//!   already found trusted, for an entry in it (its ancestors are not
//!   checked again).
//! - [`open_regular`]`(trusted, what)`: opens a trusted regular file for
//!   reading without blocking (`O_NONBLOCK`, `O_NOFOLLOW`, `O_NOCTTY`; a
//!   FIFO or a device is never opened) and confirms by `fstat` that the file
//!   opened is the regular file checked.
//! - [`Refused`]: `Absent` when a component does not exist (with the links
//!   followed to it, so a caller can tell a link dangling into a replaced
//!   ConfigMap `..data` from a mistake), `Untrusted` otherwise; each holds
//!   one line that names the path given, the component at fault and what
//!   would be right.
//!
//! Cost: one `newfstatat` per component (`readlink` too for a link, a
//! `statfs` only for a component with write bits for others), and
//! `geteuid` only when a component is not owned by root.

use crate::escape::printable_bytes;
use nix::errno::Errno;
use nix::fcntl::{open, readlink, OFlag};
use nix::sys::stat::{fstat, lstat, FileStat, Mode, SFlag};
use nix::sys::statvfs::{statvfs, FsFlags};
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// The most links followed in one walk (the kernel's own limit).
pub const MAX_LINKS: usize = 40;

/// A path found trusted: each component checked, as the walk left it.
#[derive(Clone, Debug)]
pub struct Trusted {
    /// The path as given (for messages).
    pub shown: PathBuf,
    /// The same place without links: every prefix a checked directory.
    pub path: PathBuf,
    /// The last component's status (`lstat`: not a link).
    pub stat: FileStat,
}

impl Trusted {
    /// The last component's type bits (`SFlag::S_IFREG`, `S_IFDIR`, ...).
    pub fn kind(&self) -> SFlag {
        SFlag::from_bits_truncate(self.stat.st_mode & SFlag::S_IFMT.bits())
    }
}

/// Why a path is not trusted, in one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// A component does not exist; `links` are the links followed to it,
    /// without links themselves, in the order followed.
    Absent { message: String, links: Vec<PathBuf> },
    /// It exists, and may not be trusted or could not be checked.
    Untrusted(String),
}

impl Refused {
    pub fn message(&self) -> &str {
        match self {
            Refused::Absent { message, .. } | Refused::Untrusted(message) => message,
        }
    }
}

fn shown(path: &Path) -> String {
    printable_bytes(path.as_os_str().as_bytes()).into_owned()
}

/// Checks the absolute `path`, every component from `/`; `what` names it
/// in messages ("the settings directory").
pub fn check_trusted(path: &Path, what: &str) -> Result<Trusted, Refused> {
    if !path.is_absolute() {
        return Err(Refused::Untrusted(format!(
            "{what} {} is not an absolute path: give it from /",
            shown(path)
        )));
    }
    let root = Path::new("/");
    let stat = stat_checked(root, path, what)?;
    let start = Trusted {
        shown: path.to_path_buf(),
        path: root.to_path_buf(),
        stat,
    };
    walk(start, path, path, what)
}

/// Checks the entry `name` (a relative path) of the trusted directory
/// `dir`, following links from there; `what` names it in messages.
pub fn check_trusted_in(dir: &Trusted, name: &Path, what: &str) -> Result<Trusted, Refused> {
    let shown_as = dir.shown.join(name);
    let start = Trusted {
        shown: shown_as.clone(),
        ..dir.clone()
    };
    walk(start, name, &shown_as, what)
}

/// Opens the trusted regular file `trusted` for reading, without blocking
/// and without following a link; Err: one line naming it.
pub fn open_regular(trusted: &Trusted, what: &str) -> Result<File, String> {
    let about = |problem: String| format!("{what} {}: {problem}", shown(&trusted.shown));
    let not_regular = |kind: SFlag, path: &Path| {
        about(format!(
            "{} is {}, not a regular file; only a regular file is read",
            shown(path),
            kind_name(kind)
        ))
    };
    if trusted.kind() != SFlag::S_IFREG {
        return Err(not_regular(trusted.kind(), &trusted.path));
    }
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    let raw = open(&trusted.path, flags, Mode::empty())
        .map_err(|e| about(format!("cannot open {}: {e}", shown(&trusted.path))))?;
    // SAFETY: open returned a new descriptor that nothing else owns.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(raw) });
    let opened = fstat(file.as_raw_fd()).map_err(|e| about(format!("cannot check it once open: {e}")))?;
    let kind = SFlag::from_bits_truncate(opened.st_mode & SFlag::S_IFMT.bits());
    if kind != SFlag::S_IFREG {
        return Err(not_regular(kind, &trusted.path));
    }
    if (opened.st_dev, opened.st_ino) != (trusted.stat.st_dev, trusted.stat.st_ino) {
        return Err(about(format!(
            "{} was replaced while it was checked; try again",
            shown(&trusted.path)
        )));
    }
    trust_owner(&opened, &trusted.path).map_err(&about)?;
    trust_writers(&opened, &trusted.path).map_err(&about)?;
    Ok(file)
}

/// Follows `rest` from `at` (a trusted directory), checking each component.
fn walk(mut at: Trusted, rest: &Path, shown_as: &Path, what: &str) -> Result<Trusted, Refused> {
    let mut pending: Vec<OsString> = Vec::new();
    push_components(&mut pending, rest);
    let mut links: Vec<PathBuf> = Vec::new();
    while let Some(name) = pending.pop() {
        if at.kind() != SFlag::S_IFDIR {
            return Err(Refused::Untrusted(format!(
                "{what} {}: {} is {}, not a directory",
                shown(shown_as),
                shown(&at.path),
                kind_name(at.kind())
            )));
        }
        let next = match name.as_bytes() {
            b".." => at.path.parent().unwrap_or(Path::new("/")).to_path_buf(),
            _ => at.path.join(&name),
        };
        let stat = match stat_checked(&next, shown_as, what) {
            Err(Refused::Absent { message, .. }) => {
                let message = match links.last() {
                    Some(link) => format!("{message} (the link {} leads there)", shown(link)),
                    None => message,
                };
                return Err(Refused::Absent { message, links });
            }
            other => other?,
        };
        if SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFLNK {
            if links.len() == MAX_LINKS {
                return Err(Refused::Untrusted(format!(
                    "{what} {}: more than {MAX_LINKS} links on the way (a loop?)",
                    shown(shown_as)
                )));
            }
            let target = readlink(&next).map_err(|e| {
                Refused::Untrusted(format!(
                    "{what} {}: cannot read the link {}: {e}",
                    shown(shown_as),
                    shown(&next)
                ))
            })?;
            let target = PathBuf::from(target);
            links.push(next);
            if target.is_absolute() {
                let root = Path::new("/");
                at = Trusted {
                    path: root.to_path_buf(),
                    stat: stat_checked(root, shown_as, what)?,
                    ..at
                };
            }
            push_components(&mut pending, &target);
            continue;
        }
        at = Trusted { path: next, stat, ..at };
    }
    Ok(at)
}

/// A path's components, pushed so that the first is popped first.
fn push_components(pending: &mut Vec<OsString>, path: &Path) {
    let start = pending.len();
    for component in path.components() {
        match component {
            Component::Normal(name) => pending.push(name.to_os_string()),
            Component::ParentDir => pending.push("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    pending[start..].reverse();
}

/// `lstat` of `path`, with its owner and writers checked (a link's mode
/// bits are not; a component that is neither a directory nor a regular
/// file is the caller's to refuse by type).
fn stat_checked(path: &Path, shown_as: &Path, what: &str) -> Result<FileStat, Refused> {
    let about = |problem: String| format!("{what} {}: {problem}", shown(shown_as));
    let stat = match lstat(path) {
        Ok(stat) => stat,
        Err(Errno::ENOENT) => {
            return Err(Refused::Absent {
                message: about(format!("{} does not exist", shown(path))),
                links: Vec::new(),
            })
        }
        Err(e) => return Err(Refused::Untrusted(about(format!("cannot check {}: {e}", shown(path))))),
    };
    trust_owner(&stat, path).map_err(|problem| Refused::Untrusted(about(problem)))?;
    let kind = SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits());
    if kind == SFlag::S_IFDIR || kind == SFlag::S_IFREG {
        trust_writers(&stat, path).map_err(|problem| Refused::Untrusted(about(problem)))?;
    }
    Ok(stat)
}

/// Err: `path` is owned by neither root nor this process's user.
fn trust_owner(stat: &FileStat, path: &Path) -> Result<(), String> {
    if stat.st_uid == 0 {
        return Ok(());
    }
    let user = nix::unistd::geteuid().as_raw();
    if stat.st_uid == user {
        return Ok(());
    }
    let owners = match user {
        0 => "root".to_string(),
        user => format!("root or uid {user} (this process's user)"),
    };
    Err(format!(
        "{} is owned by uid {}; only what {owners} owns is trusted (chown root {})",
        shown(path),
        stat.st_uid,
        shown(path)
    ))
}

/// Err: others than its owner may write `path` (a directory or a regular
/// file), and its mount is not read-only.
fn trust_writers(stat: &FileStat, path: &Path) -> Result<(), String> {
    let mode = stat.st_mode;
    if mode & 0o022 == 0 {
        return Ok(());
    }
    if statvfs(path).is_ok_and(|fs| fs.flags().contains(FsFlags::ST_RDONLY)) {
        return Ok(());
    }
    let who = if mode & 0o002 != 0 {
        let sticky = if mode & 0o1000 != 0 && stat.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFDIR.bits() {
            " (the sticky bit does not stop anyone from adding an entry)"
        } else {
            ""
        };
        format!("every user{sticky}")
    } else {
        format!("its group (gid {})", stat.st_gid)
    };
    Err(format!(
        "{} (mode {:04o}) is writable by {who}; only what nobody but its owner may write is trusted (chmod go-w {}, or keep the file where that holds)",
        shown(path),
        mode & 0o7777,
        shown(path)
    ))
}

fn kind_name(kind: SFlag) -> &'static str {
    match kind {
        SFlag::S_IFREG => "a regular file",
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFLNK => "a symbolic link",
        SFlag::S_IFIFO => "a FIFO (named pipe)",
        SFlag::S_IFSOCK => "a socket",
        SFlag::S_IFCHR => "a character device",
        SFlag::S_IFBLK => "a block device",
        _ => "of an unknown type",
    }
}
