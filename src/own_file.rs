//! The wrapper's own file on disk: its identity (device and inode) for the
//! loop guard, and its path for `install`.
//!
//! The kernel hands every process the path it was exec'd by (the auxiliary
//! vector's `AT_EXECFN`); stat'ing that path identifies the wrapper without
//! `/proc`, which a container may hide. `/proc/self/exe` is the fallback, and
//! also confirms a match on the loop path, because the exec'd path is only a
//! name: a link switched between the exec and the stat could now name the
//! real backend.

use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The kernel's link to the running program; absent when `/proc` is hidden.
pub const PROC_SELF_EXE: &str = "/proc/self/exe";

/// A file's identity: device and inode.
pub type FileId = (u64, u64);

/// The identity of a file's metadata.
pub fn file_id(meta: &std::fs::Metadata) -> FileId {
    (meta.dev(), meta.ino())
}

/// The path this process was exec'd by, as given to `execve` (relative to
/// the working directory then, which the wrapper never changes).
pub fn exec_path() -> Option<&'static Path> {
    // SAFETY: getauxval only reads the auxiliary vector; for AT_EXECFN the
    // kernel stores a NUL-terminated string that lives as long as the process.
    let address = unsafe { libc::getauxval(libc::AT_EXECFN) };
    if address == 0 {
        return None;
    }
    // SAFETY: a non-zero AT_EXECFN points at that string (see above).
    let name = unsafe { CStr::from_ptr(address as *const libc::c_char) };
    Some(Path::new(OsStr::from_bytes(name.to_bytes())))
}

/// Recognises the wrapper's own file among candidate backends.
pub struct OwnFile {
    exec_path_id: Option<FileId>,
}

impl OwnFile {
    /// One stat of the exec'd path; `/proc` is read only if that fails.
    pub fn identify() -> OwnFile {
        let exec_path_id = exec_path()
            .and_then(|path| std::fs::metadata(path).ok())
            .map(|meta| file_id(&meta));
        OwnFile { exec_path_id }
    }

    /// Whether `candidate` is the wrapper's own file.
    pub fn is(&self, candidate: FileId) -> bool {
        let by_proc = || std::fs::metadata(PROC_SELF_EXE).ok().map(|meta| file_id(&meta));
        match self.exec_path_id {
            // A match is confirmed through /proc when it can be read.
            Some(id) if id == candidate => by_proc().map_or(true, |running| running == candidate),
            Some(_) => false,
            None => by_proc() == Some(candidate),
        }
    }
}

/// The wrapper's own file as an absolute path with no symlinks:
/// `/proc/self/exe`, else the exec'd path resolved.
pub fn resolved_path() -> Option<PathBuf> {
    std::fs::read_link(PROC_SELF_EXE)
        .ok()
        .filter(|path| path.is_absolute())
        .or_else(|| exec_path().and_then(|path| path.canonicalize().ok()))
}
