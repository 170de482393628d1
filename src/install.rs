//! `iptables-wrapper install`: points the six command names at the wrapper.
//!
//! Each link is made under a temporary name and renamed into place, so a
//! concurrent caller always finds a working command. Run it at image build
//! time; at run time the wrapper never rewrites anything.

use crate::command::COMMAND_NAMES;
use std::fmt;
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

/// What happened to one command name.
#[derive(Debug, PartialEq, Eq)]
pub enum LinkOutcome {
    Created,
    Replaced,
    AlreadyInPlace,
}

#[derive(Debug)]
pub enum InstallError {
    /// A regular file (or directory) stands where a link should go.
    NotALink(PathBuf),
    Io(PathBuf, io::Error),
}

impl fmt::Display for InstallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InstallError::NotALink(path) => write!(
                f,
                "{} exists and is not a symlink; refusing to replace it (use --force to replace a regular file)",
                path.display()
            ),
            InstallError::Io(path, e) => write!(f, "{}: {e}", path.display()),
        }
    }
}

/// Links each command name in `dir` to `wrapper`. Symlinks are replaced;
/// regular files only with `force`; directories never. When one name is
/// refused, none is changed.
pub fn install(dir: &Path, wrapper: &Path, force: bool) -> Result<Vec<(PathBuf, LinkOutcome)>, InstallError> {
    // A wrapper in the same directory is linked by name, so the links keep
    // working when the directory is mounted or copied elsewhere.
    let target = match wrapper.parent() {
        Some(parent) if same_dir(parent, dir) => PathBuf::from(wrapper.file_name().expect("the wrapper has a name")),
        _ => wrapper.to_path_buf(),
    };
    // Check every name before changing any, so a refusal changes nothing.
    let mut plan = Vec::new();
    for name in COMMAND_NAMES {
        let path = dir.join(name);
        let outcome = match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => LinkOutcome::Created,
            Err(e) => return Err(InstallError::Io(path, e)),
            Ok(meta) if meta.file_type().is_symlink() => {
                if std::fs::read_link(&path).ok().as_deref() == Some(target.as_path()) {
                    LinkOutcome::AlreadyInPlace
                } else {
                    LinkOutcome::Replaced
                }
            }
            Ok(meta) if meta.is_file() && force => LinkOutcome::Replaced,
            Ok(_) => return Err(InstallError::NotALink(path)),
        };
        plan.push((path, outcome));
    }
    for (path, outcome) in &plan {
        if *outcome != LinkOutcome::AlreadyInPlace {
            replace_with_link(path, &target).map_err(|e| InstallError::Io(path.clone(), e))?;
        }
    }
    Ok(plan)
}

/// Makes `path` a symlink to `target` in one rename.
fn replace_with_link(path: &Path, target: &Path) -> io::Result<()> {
    let name = path
        .file_name()
        .expect("command names are file names")
        .to_string_lossy();
    let temporary = path.with_file_name(format!(".{name}.iptables-wrapper.{}", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    symlink(target, &temporary)?;
    std::fs::rename(&temporary, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temporary);
    })
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
