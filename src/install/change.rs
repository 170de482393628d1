//! How `install` changes one name, and how it puts back only what it
//! changed itself.
//!
//! Each link is made under a random name ([`crate::temporary`]) and renamed
//! over the command name; the inode of the link it made is kept. Another
//! `install` into the same directory at the same time (a second container
//! sharing the volume, where both are PID 1) can neither take that
//! temporary name nor be undone by this one: putting back first takes
//! whatever the name holds aside in one rename (an exchange, where the old
//! link or file goes back in the same step), and keeps the undo only if
//! what it took is the very link this run made; anything else goes back.

use crate::temporary;
use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::sys::stat::fstatat;
use nix::unistd::{unlinkat, UnlinkatFlags};
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

/// What stood at a name before install changed it.
pub enum Previous {
    Absent,
    Link(PathBuf),
    /// A regular file, kept under this random hard link until install ends.
    File(OsString),
}

/// One name install changed: what was there, and the inode of the link
/// install put there.
pub struct Changed {
    pub name: &'static str,
    pub previous: Previous,
    ours: u64,
}

/// Points `name` in `dir` at `target`; returns what stood there.
pub fn change(dir: BorrowedFd<'_>, name: &'static str, target: &Path) -> io::Result<Changed> {
    let previous = match fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Err(Errno::ENOENT) => Previous::Absent,
        Err(errno) => return Err(errno.into()),
        Ok(stat) if stat.st_mode & libc::S_IFMT == libc::S_IFLNK => {
            Previous::Link(nix::fcntl::readlinkat(Some(dir.as_raw_fd()), name)?.into())
        }
        Ok(_) => Previous::File(temporary::hard_link_named(dir, name.as_ref())?),
    };
    match temporary::replace_with_symlink(dir, name.as_ref(), target) {
        Ok(ours) => Ok(Changed { name, previous, ours }),
        Err(e) => {
            if let Previous::File(kept) = &previous {
                remove(dir, kept);
            }
            Err(e)
        }
    }
}

/// Removes the hard link kept for a replaced file, once install is done.
pub fn forget(dir: BorrowedFd<'_>, changed: Changed) {
    if let Previous::File(kept) = changed.previous {
        remove(dir, &kept);
    }
}

/// Undoes `changed`, last first; returns the names it could not put back
/// (a replaced file then stays under its kept link). A name another
/// process has changed since is left as that process made it: it is no
/// longer this run's change.
pub fn put_back(dir: BorrowedFd<'_>, changed: Vec<Changed>) -> Vec<PathBuf> {
    let mut left_changed = Vec::new();
    for changed in changed.into_iter().rev() {
        if put_back_one(dir, &changed).is_err() {
            left_changed.push(PathBuf::from(changed.name));
        }
    }
    left_changed.reverse();
    left_changed
}

fn put_back_one(dir: BorrowedFd<'_>, changed: &Changed) -> io::Result<()> {
    let name = OsStr::new(changed.name);
    let restored = match &changed.previous {
        Previous::Absent => {
            // Take what the name holds aside; only this run's link stays gone.
            let aside = temporary::random_name(name);
            match rename(dir, name, &aside, libc::RENAME_NOREPLACE) {
                Err(Errno::ENOENT) => return Ok(()),
                // No RENAME_NOREPLACE on this file system: a check, then
                // the removal.
                Err(Errno::EINVAL) if inode(dir, name) == Some(changed.ours) => {
                    remove(dir, name);
                    return Ok(());
                }
                Err(Errno::EINVAL) => return Ok(()),
                Err(errno) => return Err(errno.into()),
                Ok(()) => {}
            }
            if inode(dir, &aside) != Some(changed.ours) {
                // Another run's: back, unless the name is taken again.
                if rename(dir, &aside, name, libc::RENAME_NOREPLACE).is_ok() {
                    return Ok(());
                }
            }
            remove(dir, &aside);
            return Ok(());
        }
        Previous::Link(old_target) => temporary::symlink_named(dir, name, old_target)?,
        // The kept file goes back; its name then holds what it replaced.
        Previous::File(kept) => kept.clone(),
    };
    let exchanged = match rename(dir, &restored, name, libc::RENAME_EXCHANGE) {
        Ok(()) => Ok(()),
        // The name is gone meanwhile: what was there goes back.
        Err(Errno::ENOENT) => rename(dir, &restored, name, libc::RENAME_NOREPLACE).map_err(io::Error::from),
        // No exchange on this file system: a check, then a rename.
        Err(Errno::EINVAL) if inode(dir, name) == Some(changed.ours) => {
            rename(dir, &restored, name, 0).map_err(io::Error::from)
        }
        Err(Errno::EINVAL) => {
            remove(dir, &restored);
            return Ok(());
        }
        Err(errno) => Err(errno.into()),
    };
    if let Err(e) = exchanged {
        // A replaced file's kept link stays: the file is not lost.
        if !matches!(changed.previous, Previous::File(_)) {
            remove(dir, &restored);
        }
        return Err(e);
    }
    // `restored`, if still there, holds what the name held: this run's
    // link, or another's, which goes back.
    match inode(dir, &restored) {
        None => return Ok(()),
        Some(inode) if inode != changed.ours => rename(dir, &restored, name, libc::RENAME_EXCHANGE)?,
        Some(_) => {}
    }
    remove(dir, &restored);
    Ok(())
}

/// The inode `name` in `dir` holds itself (a link is not followed).
fn inode(dir: BorrowedFd<'_>, name: &OsStr) -> Option<u64> {
    fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .ok()
        .map(|stat| temporary::inode_of(&stat))
}

fn remove(dir: BorrowedFd<'_>, name: &OsStr) {
    let _ = unlinkat(Some(dir.as_raw_fd()), name, UnlinkatFlags::NoRemoveDir);
}

/// `renameat2` within `dir` (`flags`: `RENAME_NOREPLACE`, `RENAME_EXCHANGE`).
fn rename(dir: BorrowedFd<'_>, from: &OsStr, to: &OsStr, flags: libc::c_uint) -> nix::Result<()> {
    let from = CString::new(from.as_bytes()).map_err(|_| Errno::EINVAL)?;
    let to = CString::new(to.as_bytes()).map_err(|_| Errno::EINVAL)?;
    // SAFETY: both names are NUL-terminated; renameat2 only reads them.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            dir.as_raw_fd(),
            from.as_ptr(),
            dir.as_raw_fd(),
            to.as_ptr(),
            flags,
        )
    };
    Errno::result(rc).map(drop)
}
