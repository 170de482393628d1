//! Finds the chosen backend's program and execs it in place of the wrapper.
//!
//! Only absolute directories are searched: an empty or relative entry in
//! `IPTABLES_WRAPPER_SBIN` (environment or settings file) would mean the
//! caller's working directory, so it is ignored, and an error names it. A
//! candidate runs only if it is a regular file someone may execute and is
//! not the wrapper itself (compared by device and inode, without `/proc`:
//! see `own_file`); if the kernel still refuses to run it (a `noexec`
//! mount), the search goes on. A wrapper run under a backend's own name (a
//! copy installed in a backend's place, found by another wrapper's search)
//! runs nothing, so that copies cannot run each other without end. The exec
//! passes the caller's
//! `argv[0]` as given, environment, descriptors, signal state, working
//! directory and limits untouched: the wrapper changes none of them.
//!
//! The process name (`comm`, what `pgrep -x` matches) is the one thing the
//! exec cannot keep: the kernel takes it from the file name executed, not
//! from `argv[0]`. A direct call through `/usr/sbin/iptables` is named
//! `iptables`; a wrapped one is named after the backend's own link for the
//! command (`iptables-nft`; `iptables-nft-sa` for `iptables-nft-save`, the
//! kernel keeps 15 bytes), which is why that link is run in preference to
//! the `xtables-<mode>-multi` it leads to (the multi-call binary dispatches
//! on `argv[0]`, not on the name it was run by).
//!
//! Directories that a settings file names (`IPTABLES_WRAPPER_SBIN` from a
//! file) and the candidates in them get the settings file's own checks
//! ([`crate::trust`]): a component owned by another user, or writable by
//! others, stops the search with one line and nothing is run. A value from
//! the environment is the caller's own choice and is not checked. The cost,
//! only when the file gives the setting: one `lstat` per component of each
//! directory searched and of the candidate taken (`readlink` and the
//! target's `lstat` for a link; 6 system calls for `/usr/sbin/iptables-nft`).

use crate::command::WrappedCommand;
use crate::escape::Shown as _;
use crate::escape::{printable_bytes, quoted};
use crate::mode::{mode_named_by, Mode};
use crate::own_file::{self, OwnFile};
use crate::package_hint;
use crate::settings::{self, Origin, SBIN_VAR};
use crate::trust::{self, Refused};
use std::ffi::{CStr, CString};
use std::fmt;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where backends are looked for when `IPTABLES_WRAPPER_SBIN` gives no value.
pub const SYSTEM_DIRS: [&str; 3] = ["/usr/sbin", "/sbin", "/usr/bin"];

/// A backend program to exec. It runs the command its `argv[0]`'s file name
/// names (one of the six), whatever its own file is called.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    pub path: PathBuf,
}

/// Why no backend ran.
#[derive(Debug)]
pub enum BackendError {
    /// No candidate exists.
    Missing {
        mode: Mode,
        command: &'static str,
        tried: Vec<PathBuf>,
        skipped: Vec<(PathBuf, &'static str)>,
        /// `IPTABLES_WRAPPER_SBIN`'s entries that were not searched.
        ignored: Vec<PathBuf>,
        /// Where `IPTABLES_WRAPPER_SBIN` came from (`Default`: not given).
        sbin_origin: Origin,
    },
    /// Every runnable candidate is the wrapper itself.
    Loop {
        mode: Mode,
        command: &'static str,
        wrapper_copies: Vec<PathBuf>,
    },
    /// The kernel refused to run the last candidate.
    Exec { path: PathBuf, error: io::Error },
    /// The wrapper was run under a backend's own name: it runs nothing, so
    /// that copies of it cannot run each other without end.
    StandingIn { path: PathBuf, mode: Mode },
    /// A directory or program that a settings file chose may be changed by
    /// someone other than root and the caller: one line saying which.
    Untrusted(String),
}

impl BackendError {
    /// The wrapper's exit status: 1 when nothing could be found, 2 (as for
    /// a settings file refused) when a settings file chose an untrusted
    /// program, 126 (as a shell) when the found program could not be run.
    pub fn exit_status(&self) -> i32 {
        match self {
            BackendError::Missing { .. } | BackendError::Loop { .. } | BackendError::StandingIn { .. } => 1,
            BackendError::Untrusted(_) => 2,
            BackendError::Exec { .. } => 126,
        }
    }
}

/// Paths are shown escaped (`escape::printable_bytes`): the text is shown
/// as it is.
impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::Missing {
                mode,
                command,
                tried,
                skipped,
                ignored,
                sbin_origin,
            } => {
                let given = match sbin_origin {
                    Origin::File { .. } => format!("{SBIN_VAR} (from {sbin_origin})"),
                    _ => SBIN_VAR.to_string(),
                };
                if tried.is_empty() && skipped.is_empty() {
                    write!(f, "no {mode} backend for {command}: {given} names no absolute directory")?;
                } else if tried.is_empty() {
                    write!(f, "no {mode} backend for {command}")?;
                } else {
                    write!(f, "no {mode} backend for {command}: tried {}", join_paths(tried))?;
                }
                if !ignored.is_empty() {
                    let entries: Vec<String> = ignored.iter().map(|entry| quoted(entry.as_os_str().as_bytes())).collect();
                    write!(
                        f,
                        "; ignored {given} entries {} (not absolute paths: they would mean the caller's working directory)",
                        entries.join(", ")
                    )?;
                }
                for (path, why) in skipped {
                    write!(f, "; skipped {} ({why})", shown(path))?;
                }
                if tried.is_empty() && skipped.is_empty() {
                    write!(f, "; give it absolute directories (as /usr/sbin)")
                } else {
                    write!(
                        f,
                        "; install the iptables package that provides it ({})",
                        package_hint::providing_package(*mode)
                    )
                }
            }
            BackendError::Loop {
                mode,
                command,
                wrapper_copies,
            } => write!(
                f,
                "no {mode} backend for {command}: {} would run the wrapper itself (a loop); point them at the real xtables-{mode}-multi or set {SBIN_VAR}",
                join_paths(wrapper_copies)
            ),
            BackendError::Exec { path, error } => write!(f, "cannot exec {}: {error}", shown(path)),
            BackendError::StandingIn { path, mode } => write!(
                f,
                "{} is the wrapper (a copy of it, or a link to one) in the place of the {mode} backend, so it runs nothing: wrappers that find each other as backends would run each other without end; put the real backend there (the iptables package's xtables-{mode}-multi and its links)",
                shown(path)
            ),
            BackendError::Untrusted(why) => write!(f, "{why}"),
        }
    }
}

fn shown(path: &Path) -> std::borrow::Cow<'_, str> {
    printable_bytes(path.as_os_str().as_bytes())
}

fn join_paths(paths: &[PathBuf]) -> String {
    paths.iter().map(|p| shown(p)).collect::<Vec<_>>().join(", ")
}

/// When the wrapper was exec'd under a backend's own name (`iptables-nft`,
/// `xtables-legacy-multi`, `iptables-nft-save`, ...; see
/// `mode::mode_named_by`): why it must run nothing at all, whatever its
/// arguments, before it decides anything.
///
/// Whoever ran that name wanted the backend and got a wrapper installed in
/// its place: most likely another wrapper, or a copy of this one, whose
/// search found it there, as the backend to exec or as the save tool to
/// read the kernel through. Deciding and running "the backend" again could
/// run that other wrapper again, and so on without end (an exec loop, or a
/// chain of save tools each waiting on the next): the search's loop guard
/// recognises only the wrapper's own file, and a copy is another file. A
/// caller that runs a backend by its name gets the same one line, not the
/// wrapper's own command line. The name is the path the kernel was given
/// (`AT_EXECFN`), so it costs no system call; a wrapper linked under a
/// backend's name and called by another name (`/usr/sbin/iptables` leading
/// to it) is not affected.
pub fn standing_in_for_a_backend() -> Option<BackendError> {
    let path = own_file::exec_path()?;
    let name = path.as_os_str().as_bytes().rsplit(|&b| b == b'/').next()?;
    // A quick test first, for every call: each backend name is `iptables-`,
    // `ip6tables-` or `xtables-` followed by its mode; none of the six
    // command names is.
    let rest = [&b"iptables-"[..], b"ip6tables-", b"xtables-"]
        .iter()
        .find_map(|prefix| name.strip_prefix(*prefix))?;
    if !(rest.starts_with(b"nft") || rest.starts_with(b"legacy")) {
        return None;
    }
    let mode = mode_named_by(std::str::from_utf8(name).ok()?)?;
    Some(BackendError::StandingIn {
        path: path.to_path_buf(),
        mode,
    })
}

/// The directories `IPTABLES_WRAPPER_SBIN` names, from the environment or
/// the settings file, when it gives any value: its absolute entries to
/// search, and the others, ignored. `None`: the usual system directories,
/// then the wrapper's own directory (the resolved one, looked up only when
/// the system directories hold no backend).
fn configured_dirs() -> Option<(Vec<PathBuf>, Vec<PathBuf>)> {
    let value = settings::current().value(SBIN_VAR)?;
    let (dirs, ignored): (Vec<PathBuf>, Vec<PathBuf>) = std::env::split_paths(value).partition(|dir| dir.is_absolute());
    for dir in &ignored {
        log::debug!(
            "{SBIN_VAR} entry {} ignored: not an absolute path",
            quoted(dir.as_os_str().as_bytes())
        );
    }
    Some((dirs, ignored))
}

/// The wrapper's own directory, if it is not one of the system ones.
fn own_dir() -> Option<PathBuf> {
    let dir = own_file::resolved_path()?.parent()?.to_path_buf();
    (!SYSTEM_DIRS.iter().any(|system| dir == Path::new(system))).then_some(dir)
}

/// What a search looks for, and what it saw besides the candidates it offered.
struct Search {
    own_file: OwnFile,
    /// `<family>-<mode>[-save|-restore]`: `iptables-nft`,
    /// `ip6tables-legacy-save`, the backend's link for the command
    single: String,
    /// `xtables-<mode>-multi`
    multi: String,
    tried: Vec<PathBuf>,
    skipped: Vec<(PathBuf, &'static str)>,
    wrapper_copies: Vec<PathBuf>,
}

impl Search {
    /// Offers each runnable candidate in `dir` to `take`; Ok(true) once
    /// taken. With `checked` (a directory a settings file chose), the
    /// directory and the candidate offered must be trusted ([`trust`]);
    /// Err: why one is not.
    fn dir(&mut self, dir: &Path, checked: bool, take: &mut dyn FnMut(Backend) -> bool) -> Result<bool, String> {
        let trusted_dir = match checked.then(|| trust::check_trusted(dir, &format!("{SBIN_VAR} directory"))) {
            Some(Err(Refused::Untrusted(why))) => return Err(why),
            Some(Err(Refused::Absent { .. })) => {
                self.tried.push(dir.join(&self.single));
                return Ok(false);
            }
            Some(Ok(trusted)) => Some(trusted),
            None => None,
        };
        for file in [&self.single, &self.multi] {
            let path = dir.join(file);
            let Ok(meta) = std::fs::metadata(&path) else {
                self.tried.push(path);
                continue;
            };
            if !meta.is_file() {
                log::debug!("{} skipped: not a regular file", path.shown());
                self.skipped.push((path, "not a regular file"));
            } else if !may_execute(&meta) {
                log::debug!("{} skipped: not executable", path.shown());
                self.skipped.push((path, "not executable"));
            } else if self.own_file.is(own_file::file_id(&meta)) {
                self.wrapper_copies.push(path);
            } else {
                if let Some(trusted_dir) = &trusted_dir {
                    // The program, and each link on the way to it.
                    trust::check_trusted_in(trusted_dir, Path::new(file), &format!("{SBIN_VAR} program"))
                        .map_err(|refused| refused.message().to_string())?;
                }
                if take(Backend { path }) {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }
}

/// Offers every runnable candidate for `command` in `mode` to `take`, in
/// order (the backend's link for the command, else `xtables-<mode>-multi`,
/// in each directory in turn; never the wrapper itself), until `take`
/// returns true. Err when none was taken: why.
fn search(command: &WrappedCommand, mode: Mode, take: &mut dyn FnMut(Backend) -> bool) -> Result<(), BackendError> {
    let (program, action) = command
        .name
        .split_once('-')
        .map_or((command.name, None), |(p, a)| (p, Some(a)));
    // Joined, not formatted: a call that needs no other formatting then
    // runs none of `core::fmt` (cold code, page by page).
    let mut single = [program, "-", mode.name()].concat();
    if let Some(action) = action {
        single.push('-');
        single.push_str(action);
    }
    let mut search = Search {
        own_file: OwnFile::identify(),
        single,
        multi: ["xtables-", mode.name(), "-multi"].concat(),
        tried: Vec::new(),
        skipped: Vec::new(),
        wrapper_copies: Vec::new(),
    };
    let mut ignored = Vec::new();
    let taken = match configured_dirs() {
        Some((dirs, not_absolute)) => {
            ignored = not_absolute;
            let checked = matches!(settings::current().get(SBIN_VAR).origin, Origin::File { .. });
            let mut taken = false;
            for dir in &dirs {
                if search.dir(dir, checked, take).map_err(BackendError::Untrusted)? {
                    taken = true;
                    break;
                }
            }
            taken
        }
        None => {
            let mut unchecked = |search: &mut Search, dir: &Path| search.dir(dir, false, take).unwrap_or(false);
            SYSTEM_DIRS.iter().any(|dir| unchecked(&mut search, Path::new(dir)))
                || own_dir().is_some_and(|dir| unchecked(&mut search, &dir))
        }
    };
    let command = command.name;
    if taken {
        Ok(())
    } else if search.wrapper_copies.is_empty() {
        Err(BackendError::Missing {
            mode,
            command,
            tried: search.tried,
            skipped: search.skipped,
            ignored,
            sbin_origin: settings::current().get(SBIN_VAR).origin.clone(),
        })
    } else {
        Err(BackendError::Loop {
            mode,
            command,
            wrapper_copies: search.wrapper_copies,
        })
    }
}

/// The first runnable program for `command` in `mode` (see `search`).
pub fn locate(command: &WrappedCommand, mode: Mode) -> Result<Backend, BackendError> {
    let mut found = None;
    search(command, mode, &mut |backend| {
        found = Some(backend);
        true
    })?;
    Ok(found.expect("search took a backend"))
}

/// A program shipped beside the backends that is not one (`ipset`, which
/// `stale --remove`'s proof runs): the first runnable `file` where the
/// backends are looked for (`IPTABLES_WRAPPER_SBIN`'s absolute entries,
/// else the system directories, then the wrapper's own), with the same
/// checks: a regular file someone may execute, never the wrapper itself,
/// and trusted when a settings file chose the directory. Err: where it was
/// looked for, or why a candidate was refused.
pub fn locate_beside(file: &str) -> Result<PathBuf, String> {
    let (dirs, checked) = match configured_dirs() {
        Some((dirs, _)) => (
            dirs,
            matches!(settings::current().get(SBIN_VAR).origin, Origin::File { .. }),
        ),
        None => (SYSTEM_DIRS.iter().map(PathBuf::from).chain(own_dir()).collect(), false),
    };
    let own_file = OwnFile::identify();
    let mut tried = Vec::new();
    for dir in &dirs {
        let trusted_dir = match checked.then(|| trust::check_trusted(dir, &format!("{SBIN_VAR} directory"))) {
            Some(Err(Refused::Untrusted(why))) => return Err(why),
            Some(Err(Refused::Absent { .. })) => {
                tried.push(dir.join(file));
                continue;
            }
            Some(Ok(trusted)) => Some(trusted),
            None => None,
        };
        let path = dir.join(file);
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() && may_execute(&meta) && !own_file.is(own_file::file_id(&meta)) => {
                if let Some(trusted_dir) = &trusted_dir {
                    trust::check_trusted_in(trusted_dir, Path::new(file), &format!("{SBIN_VAR} program"))
                        .map_err(|refused| refused.message().to_string())?;
                }
                return Ok(path);
            }
            _ => tried.push(path),
        }
    }
    Err(format!("none runnable at {}", join_paths(&tried)))
}

/// Execs the first program for `command` in `mode` that the kernel runs,
/// with `argv0` (the caller's, whose file name is `command`'s) and `args`;
/// `before_exec` sees each one about to be run. Returns only when nothing
/// ran.
pub fn run(
    command: &WrappedCommand,
    mode: Mode,
    argv0: &CStr,
    args: &[&CStr],
    before_exec: &dyn Fn(&Backend),
) -> BackendError {
    let mut exec_error = None;
    let searched = search(command, mode, &mut |backend| {
        before_exec(&backend);
        let error = exec(&backend, argv0, args);
        log::debug!("{} not run: {error}", backend.path.shown());
        exec_error = Some(BackendError::Exec {
            path: backend.path,
            error,
        });
        false
    });
    exec_error.unwrap_or_else(|| searched.expect_err("a backend is only taken by running it"))
}

/// Whether the effective user may execute a file with this metadata (root:
/// any execute bit; others: the bit of the owner, group or others class).
fn may_execute(meta: &std::fs::Metadata) -> bool {
    let mode = meta.mode();
    match mode & 0o111 {
        0 => return false,
        0o111 => return true,
        _ => {}
    }
    // SAFETY: these calls only read the process's credentials.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if euid == 0 {
        return true;
    }
    if meta.uid() == euid {
        return mode & 0o100 != 0;
    }
    if meta.gid() == egid
        || nix::unistd::getgroups().is_ok_and(|groups| groups.iter().any(|g| g.as_raw() == meta.gid()))
    {
        return mode & 0o010 != 0;
    }
    mode & 0o001 != 0
}

/// Replaces this process with the backend: same PID, arguments (`argv[0]`
/// included), environment and file descriptors. Returns only on failure.
fn exec(backend: &Backend, argv0: &CStr, args: &[&CStr]) -> io::Error {
    let Ok(path) = CString::new(backend.path.as_os_str().as_bytes()) else {
        return io::Error::from(io::ErrorKind::InvalidInput);
    };
    let argv: Vec<*const libc::c_char> = std::iter::once(argv0.as_ptr())
        .chain(args.iter().map(|arg| arg.as_ptr()))
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    // SAFETY: path and every argv entry are NUL-terminated strings that live
    // until the call returns, and argv ends with a null pointer. execv passes
    // the process's environment as it is.
    unsafe { libc::execv(path.as_ptr(), argv.as_ptr()) };
    io::Error::last_os_error()
}
