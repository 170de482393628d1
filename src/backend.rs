//! Finds the chosen backend's program and execs it in place of the wrapper.

use crate::command::WrappedCommand;
use crate::mode::Mode;
use std::ffi::{CString, OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Overrides the directories backends are looked up in.
pub const SBIN_VAR: &str = "IPTABLES_WRAPPER_SBIN";

/// Where the wrapper itself lives, for the loop check and the search path.
pub const SELF_EXE: &str = "/proc/self/exe";

const SYSTEM_DIRS: [&str; 3] = ["/usr/sbin", "/sbin", "/usr/bin"];

/// A backend program to exec, with the argv[0] it expects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    pub path: PathBuf,
    pub argv0: String,
}

/// Why no backend could be run.
#[derive(Debug)]
pub enum BackendError {
    /// No candidate exists.
    Missing {
        mode: Mode,
        command: &'static str,
        tried: Vec<PathBuf>,
    },
    /// Every candidate that exists is the wrapper itself.
    Loop {
        mode: Mode,
        command: &'static str,
        wrapper_copies: Vec<PathBuf>,
    },
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::Missing { mode, command, tried } => write!(
                f,
                "no {mode} backend for {command}: tried {}; install the iptables package that provides it ({})",
                join_paths(tried),
                providing_package(*mode)
            ),
            BackendError::Loop { mode, command, wrapper_copies } => write!(
                f,
                "no {mode} backend for {command}: {} would run the wrapper itself (a loop); point them at the real xtables-{mode}-multi or set {SBIN_VAR}",
                join_paths(wrapper_copies)
            ),
        }
    }
}

fn join_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn providing_package(mode: Mode) -> &'static str {
    match mode {
        Mode::Nft => "Debian/Ubuntu/Alpine: iptables; Fedora: iptables-nft",
        Mode::Legacy => "Debian/Ubuntu: iptables; Alpine/Fedora: iptables-legacy",
    }
}

/// The directories searched for backends: `IPTABLES_WRAPPER_SBIN` alone when
/// set, otherwise the wrapper's own directory, then the usual system ones.
pub fn search_dirs() -> Vec<PathBuf> {
    if let Some(dirs) = std::env::var_os(SBIN_VAR).filter(|v| !v.is_empty()) {
        return std::env::split_paths(&dirs).collect();
    }
    let own_dir = std::fs::read_link(SELF_EXE)
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    let mut dirs: Vec<PathBuf> = own_dir.into_iter().collect();
    for dir in SYSTEM_DIRS {
        if !dirs.iter().any(|d| d == Path::new(dir)) {
            dirs.push(PathBuf::from(dir));
        }
    }
    dirs
}

/// Finds the program that runs `command` in `mode`: `xtables-<mode>-multi`
/// (given the command's own name as argv[0]), else `<command>-<mode>`.
/// Never the wrapper itself.
pub fn locate(command: &WrappedCommand, mode: Mode) -> Result<Backend, BackendError> {
    let wrapper = std::fs::metadata(SELF_EXE).ok().map(|m| (m.dev(), m.ino()));
    let multi = format!("xtables-{mode}-multi");
    let single = format!("{}-{mode}", command.name);
    let mut tried = Vec::new();
    let mut wrapper_copies = Vec::new();
    for dir in search_dirs() {
        for (file, argv0) in [(&multi, command.name), (&single, single.as_str())] {
            let path = dir.join(file);
            tried.push(path.clone());
            let Ok(meta) = std::fs::metadata(&path) else { continue };
            if !meta.is_file() {
                continue;
            }
            if Some((meta.dev(), meta.ino())) == wrapper {
                wrapper_copies.push(path);
                continue;
            }
            return Ok(Backend {
                path,
                argv0: argv0.to_string(),
            });
        }
    }
    let command = command.name;
    if wrapper_copies.is_empty() {
        Err(BackendError::Missing { mode, command, tried })
    } else {
        Err(BackendError::Loop {
            mode,
            command,
            wrapper_copies,
        })
    }
}

/// Replaces this process with the backend: same PID, arguments (after
/// argv[0]), environment and file descriptors. Returns only on failure.
pub fn exec(backend: &Backend, args: &[OsString]) -> std::io::Error {
    let to_c =
        |s: &OsStr| CString::new(s.as_bytes()).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput));
    let argv: Result<Vec<CString>, _> = std::iter::once(OsStr::new(&backend.argv0))
        .chain(args.iter().map(OsString::as_os_str))
        .map(to_c)
        .collect();
    let (path, argv) = match (to_c(backend.path.as_os_str()), argv) {
        (Ok(path), Ok(argv)) => (path, argv),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    match nix::unistd::execv(&path, &argv) {
        Err(errno) => std::io::Error::from(errno),
        Ok(never) => match never {},
    }
}
