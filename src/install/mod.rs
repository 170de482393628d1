//! `iptables-wrapper install`: points the six command names at the wrapper.
//!
//! Every name is checked before any is changed, so a refusal changes
//! nothing. Each link is made under a random temporary name and renamed
//! into place, so a concurrent caller always finds a working command. A
//! failure midway (a busy or read-only name) puts back what this run
//! changed itself (`change`): old links are re-made, replaced files are
//! restored from a hard link kept until the end, and a name another
//! process changed since is left as it made it; if even that fails, the
//! error names each name left changed. It succeeds only when all six names
//! resolve to the wrapper at its end. The
//! wrapper's own file is never replaced or removed. Two kinds of link are
//! left alone unless `--force` is given, because a package upgrade would
//! put them back and silently drop the wrapper: an alternatives link
//! (Debian's `/usr/sbin/iptables -> /etc/alternatives/iptables`, Fedora's in
//! `/usr/bin`, reached through `/usr/sbin -> bin`), which is registered
//! instead, and a link to another program that is neither a backend nor
//! this wrapper (Wolfi's `iptables-wrappers` package and its
//! `/usr/bin/iptables-wrapper`). Run it at image build
//! time; at run time the wrapper never rewrites anything.

mod change;

use crate::command::COMMAND_NAMES;
use crate::escape::Shown as _;
use crate::mode::mode_named_by;
use crate::own_file;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// What happened to one command name.
#[derive(Debug, PartialEq, Eq)]
pub enum LinkOutcome {
    Created,
    Replaced,
    AlreadyInPlace,
}

/// What install did: the target each link holds, as written (the
/// wrapper's name alone when it is in the same directory), and each name's
/// outcome.
#[derive(Debug)]
pub struct Installed {
    pub target: PathBuf,
    pub links: Vec<(PathBuf, LinkOutcome)>,
}

#[derive(Debug)]
pub enum InstallError {
    /// The directory to install into cannot be found (missing, unreadable).
    NoDirectory(PathBuf, io::Error),
    /// What was named as the directory is something else.
    NotADirectory(PathBuf),
    /// A regular file stands where a link should go, and `--force` was not given.
    RegularFile(PathBuf),
    /// Something `--force` does not replace (a directory, a device).
    NeitherLinkNorFile(PathBuf),
    /// The name is the wrapper's own file.
    OwnFile(PathBuf),
    /// The name is an alternatives link (`-> /etc/alternatives/NAME`) and
    /// `--force` was not given: the next package upgrade would put it back.
    Alternatives { path: PathBuf, target: PathBuf },
    /// The name leads to another program that is neither a backend nor
    /// this wrapper (Wolfi's `iptables-wrappers`, a detect script), and
    /// `--force` was not given.
    OtherProgram { path: PathBuf, program: PathBuf },
    /// A check failed; nothing was changed.
    Check(PathBuf, io::Error),
    /// Every name was changed, but these no longer resolve to the wrapper:
    /// another process changed them meanwhile.
    ChangedMeanwhile(Vec<PathBuf>),
    /// Changing a name failed after `changed_before` others were changed;
    /// `left_changed` lists the names still changed after putting back what
    /// could be (empty: nothing is changed).
    Change {
        path: PathBuf,
        error: io::Error,
        changed_before: usize,
        left_changed: Vec<PathBuf>,
    },
}

impl InstallError {
    /// The exit status: 2 for a request that can never be done (replacing
    /// the wrapper's own file), 1 otherwise.
    pub fn exit_status(&self) -> i32 {
        match self {
            InstallError::OwnFile(_) => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for InstallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InstallError::NoDirectory(dir, e) if e.kind() == io::ErrorKind::NotFound => write!(
                f,
                "{}: no such directory; create it first or name an existing one with --dir; nothing was changed",
                dir.shown()
            ),
            InstallError::NoDirectory(dir, e) => write!(
                f,
                "{}: {e}; name a directory the wrapper can reach with --dir; nothing was changed",
                dir.shown()
            ),
            InstallError::NotADirectory(dir) => write!(
                f,
                "{}: not a directory; name a directory with --dir; nothing was changed",
                dir.shown()
            ),
            InstallError::RegularFile(path) => write!(
                f,
                "{}: a regular file, replaced only with --force; nothing was changed",
                path.shown()
            ),
            InstallError::NeitherLinkNorFile(path) => write!(
                f,
                "{}: neither a symlink nor a regular file; remove it yourself or install into another directory; nothing was changed",
                path.shown()
            ),
            InstallError::OwnFile(path) => write!(
                f,
                "{}: the wrapper's own file, never replaced; keep the wrapper under another name (for example iptables-wrapper) or install into another directory; nothing was changed",
                path.shown()
            ),
            InstallError::Alternatives { path, target } => write!(
                f,
                "{} -> {} is an alternatives link: a package upgrade would put it back and drop the wrapper; register the wrapper in that group instead (update-alternatives --install, on Fedora and RHEL alternatives --install, then --set: see the README's recipes), or pass --force to replace the link anyway; nothing was changed",
                path.shown(),
                target.shown()
            ),
            InstallError::OtherProgram { path, program } => write!(
                f,
                "{} leads to {}, another program (neither a backend nor this wrapper, such as Wolfi's iptables-wrappers package); its package would put its links back on upgrade: remove that package (apk del iptables-wrappers), or pass --force to replace the link anyway; nothing was changed",
                path.shown(),
                program.shown()
            ),
            InstallError::Check(path, e) => write!(f, "{}: {e}; nothing was changed", path.shown()),
            InstallError::ChangedMeanwhile(paths) => write!(
                f,
                "{}: no longer leading to the wrapper after install linked them (another process changed them meanwhile); run install again once it is done",
                shown(paths)
            ),
            InstallError::Change {
                path,
                error,
                changed_before: 0,
                ..
            } => write!(f, "{}: {error}; nothing was changed", path.shown()),
            InstallError::Change {
                path,
                error,
                left_changed,
                ..
            } if left_changed.is_empty() => write!(
                f,
                "{}: {error}; every name changed before it was put back as it was, nothing is changed",
                path.shown()
            ),
            InstallError::Change {
                path,
                error,
                left_changed,
                ..
            } => write!(
                f,
                "{}: {error}; putting back failed, these now link to the wrapper: {}",
                path.shown(),
                shown(left_changed)
            ),
        }
    }
}

/// Links each command name in `dir` to `wrapper` (the wrapper's own file,
/// absolute). Symlinks are replaced; regular files only with `force`; the
/// wrapper's own file and anything else never.
pub fn install(dir: &Path, wrapper: &Path, force: bool) -> Result<Installed, InstallError> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(InstallError::NotADirectory(dir.to_path_buf())),
        Err(e) => return Err(InstallError::NoDirectory(dir.to_path_buf(), e)),
    }
    // A wrapper in the same directory is linked by name, so the links keep
    // working when the directory is mounted or copied elsewhere.
    let target = match wrapper.parent() {
        Some(parent) if same_dir(parent, dir) => PathBuf::from(wrapper.file_name().expect("the wrapper has a name")),
        _ => wrapper.to_path_buf(),
    };
    let own_id = std::fs::metadata(wrapper)
        .map(|meta| own_file::file_id(&meta))
        .map_err(|e| InstallError::Check(wrapper.to_path_buf(), e))?;
    // Check every name before changing any, so a refusal changes nothing.
    let mut plan = Vec::new();
    for name in COMMAND_NAMES {
        let path = dir.join(name);
        let outcome = match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => LinkOutcome::Created,
            Err(e) => return Err(InstallError::Check(path, e)),
            Ok(meta) if meta.file_type().is_symlink() => {
                let stored = std::fs::read_link(&path).map_err(|e| InstallError::Check(path.clone(), e))?;
                if stored == target {
                    LinkOutcome::AlreadyInPlace
                } else {
                    existing_link(&path, stored, own_id, force)?
                }
            }
            Ok(meta) if own_file::file_id(&meta) == own_id => return Err(InstallError::OwnFile(path)),
            Ok(meta) if meta.is_file() && force => LinkOutcome::Replaced,
            Ok(meta) if meta.is_file() => return Err(InstallError::RegularFile(path)),
            Ok(_) => return Err(InstallError::NeitherLinkNorFile(path)),
        };
        plan.push((path, outcome));
    }
    let dir_fd = open_dir(dir).map_err(|e| InstallError::Check(dir.to_path_buf(), e))?;
    let mut changed = Vec::new();
    for ((path, outcome), name) in plan.iter().zip(COMMAND_NAMES) {
        if *outcome == LinkOutcome::AlreadyInPlace {
            continue;
        }
        match change::change(dir_fd.as_fd(), name, &target) {
            Ok(one) => changed.push(one),
            Err(error) => {
                let changed_before = changed.len();
                let left_changed = change::put_back(dir_fd.as_fd(), changed)
                    .into_iter()
                    .map(|name| dir.join(name))
                    .collect();
                return Err(InstallError::Change {
                    path: path.clone(),
                    error,
                    changed_before,
                    left_changed,
                });
            }
        }
    }
    for one in changed {
        change::forget(dir_fd.as_fd(), one);
    }
    // Another process may have changed a name since (another install, a
    // package): success only if all six resolve to the wrapper now.
    let elsewhere: Vec<PathBuf> = plan
        .iter()
        .map(|(path, _)| path)
        .filter(|path| std::fs::metadata(path).map_or(true, |meta| own_file::file_id(&meta) != own_id))
        .cloned()
        .collect();
    if !elsewhere.is_empty() {
        return Err(InstallError::ChangedMeanwhile(elsewhere));
    }
    Ok(Installed { target, links: plan })
}

/// What to do with a link at `path` (stored target `stored`) that does not
/// name the wrapper the way install would. An alternatives link that leads
/// to the wrapper already (registered with `update-alternatives`) is in
/// place; any other alternatives link, and a link leading to a program
/// that is neither a backend nor the wrapper, is refused without `force`.
/// A dangling link, or one leading to a backend or to the wrapper by
/// another path, is replaced.
fn existing_link(
    path: &Path,
    stored: PathBuf,
    own_id: own_file::FileId,
    force: bool,
) -> Result<LinkOutcome, InstallError> {
    let leads_to = std::fs::canonicalize(path).ok();
    let is_own = leads_to
        .as_deref()
        .and_then(|p| std::fs::metadata(p).ok())
        .is_some_and(|meta| own_file::file_id(&meta) == own_id);
    let absolute = path.parent().map_or_else(|| stored.clone(), |dir| dir.join(&stored));
    let in_alternatives = match (
        absolute.parent().map(std::fs::canonicalize),
        std::fs::canonicalize(ALTERNATIVES_DIR),
    ) {
        (Some(Ok(parent)), Ok(alternatives)) => parent == alternatives,
        _ => false,
    };
    if in_alternatives {
        return match (is_own, force) {
            (true, _) => Ok(LinkOutcome::AlreadyInPlace),
            (false, true) => Ok(LinkOutcome::Replaced),
            (false, false) => Err(InstallError::Alternatives {
                path: path.to_path_buf(),
                target: stored,
            }),
        };
    }
    let names_backend = leads_to
        .as_deref()
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
        .and_then(mode_named_by)
        .is_some();
    match leads_to {
        Some(program) if !is_own && !names_backend && !force => Err(InstallError::OtherProgram {
            path: path.to_path_buf(),
            program,
        }),
        _ => Ok(LinkOutcome::Replaced),
    }
}

/// Where Debian's `update-alternatives` and Fedora's `alternatives` keep
/// the links they manage.
const ALTERNATIVES_DIR: &str = "/etc/alternatives";

/// Paths for a message, comma-separated.
fn shown(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.shown().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `dir` open, for the changes made relative to it.
fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let raw = openat(None, dir, flags, Mode::empty())?;
    // SAFETY: openat returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
