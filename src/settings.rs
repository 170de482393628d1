//! The wrapper's settings, and where each one comes from: the caller's
//! environment where the variable is set and not empty, else the settings
//! directory `/etc/iptables-wrapper`, else the default.
//!
//! Many callers run iptables with an environment of their own: firewalld
//! gives its backend only `LANG=C`, podman's conmon runs the network
//! teardown with only `PATH` and a few variables of its own, sudo's
//! `env_reset` and systemd units do the same. A setting that an image or a
//! pod gives by environment never reaches those calls; a file does. So every
//! setting an image or a pod may need to pin can also be a file in the
//! settings directory, named exactly as the variable and holding its value
//! (`echo nft > /etc/iptables-wrapper/IPTABLES_MODE` in a Dockerfile). That
//! is also what a Kubernetes ConfigMap mounted as a volume is, one file per
//! key through its `..data` link, updated in place; a ConfigMap whose keys
//! are the variable names works as a volume and as `envFrom` alike.
//!
//! A file holds one value on one line; blank lines and lines starting with
//! `#` are skipped, spaces and tabs around the value are dropped, and an
//! empty value is no value (as an empty variable is). Names starting with
//! `.` (the ConfigMap's own `..data` entries) are skipped. Anything else is
//! bad input that names the file, the line and what would be right, and
//! nothing runs: an unknown name (a typo would otherwise pin nothing
//! silently), an invalid value (even where the environment overrides it, so
//! a broken file does not go unnoticed until a caller without the variable
//! comes), a file that cannot be read.
//!
//! These files pick the program root runs (`IPTABLES_WRAPPER_SBIN`) and the
//! backend of every call, so they are used only where nobody but root (or
//! the wrapper's own user) could have written them: the directory, each
//! file, each link on the way and every directory up to `/` (the rule of
//! sshd and sudo, in [`crate::trust`]); and only regular files are read,
//! opened without blocking (a FIFO would hold every call, a link to
//! `/proc/self/fd/0` would read the caller's stdin). Anything else is bad
//! input. A ConfigMap volume passes: root's files, mounted read-only. A key
//! whose link leads through `..data` to nothing is absent: kubelet swaps
//! `..data` to the new version before it removes the links of keys the new
//! version no longer has.
//!
//! Which settings: `IPTABLES_MODE`, `IPTABLES_WRAPPER_HOST_ROOT`,
//! `IPTABLES_WRAPPER_SBIN` and `IPTABLES_WRAPPER_RUN_DIR`. Not
//! `IPTABLES_WRAPPER_LOG`: the log goes to the caller's stderr, which callers
//! read (kube-proxy parses `iptables-restore`'s, Docker takes any output as a
//! failure), so a file must not switch it on for every caller. Not
//! `XTABLES_LOCKFILE`: the backend reads that variable itself, and the
//! wrapper must look at the lock file the backend will use.
//!
//! Cost: read once per call, on first use. Without the directory that is one
//! failed `openat`; with it, a `newfstatat` of each of `/`, `/etc` and the
//! directory and an `fstat` of it, the listing (two `getdents64`), and per
//! file a `newfstatat`, `open`, `fstat`, two `read`s and `close` (a
//! ConfigMap key's two links: two `newfstatat` and two `readlink` more, and
//! one of its version's directory; one `statfs` for its volume's directory,
//! mode 0777 on a read-only mount). What it cannot see: a ConfigMap update
//! that lands between the reads of two files gives one call the old value
//! of one and the new value of the other.

use crate::environment;
use crate::escape::{printable_bytes, quoted};
use crate::mode::{self, Mode, OVERRIDE_VAR};
use crate::trust;
use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The settings directory: one file per setting, named as its variable.
pub const SETTINGS_DIR: &str = "/etc/iptables-wrapper";

/// Where the host's filesystem is mounted (the host link, its `lib/modules`).
pub const HOST_ROOT_VAR: &str = "IPTABLES_WRAPPER_HOST_ROOT";

/// The directories backends are looked up in.
pub const SBIN_VAR: &str = "IPTABLES_WRAPPER_SBIN";

/// The wrapper's runtime directory (warnings record, count cache, backups).
pub const RUN_DIR_VAR: &str = "IPTABLES_WRAPPER_RUN_DIR";

/// The settings that can be given by file, in the order `detect` shows them.
pub const FILE_SETTINGS: [&str; 4] = [OVERRIDE_VAR, HOST_ROOT_VAR, SBIN_VAR, RUN_DIR_VAR];

/// Settings that are read from the environment only, and why.
const ENVIRONMENT_ONLY: [(&str, &str); 2] = [
    (
        "IPTABLES_WRAPPER_LOG",
        "the log goes to the caller's stderr, so only the caller's environment may ask for it",
    ),
    (
        "XTABLES_LOCKFILE",
        "the backend reads it from its environment itself, so only the caller's environment may set it",
    ),
];

/// The link in a Kubernetes ConfigMap volume to its current version's
/// directory; each key is a link through it.
const CONFIGMAP_DATA: &str = "..data";

/// The longest setting file read.
const MAX_FILE_BYTES: usize = 4096;

/// Where a setting's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    Environment,
    File { path: PathBuf, line: usize },
    Default,
}

impl Origin {
    /// A stable key for machine-readable output.
    pub fn key(&self) -> &'static str {
        match self {
            Origin::Environment => "environment",
            Origin::File { .. } => "file",
            Origin::Default => "default",
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Environment => f.write_str("environment"),
            Origin::File { path, line } => write!(f, "{} line {line}", printable_bytes(path.as_os_str().as_bytes())),
            Origin::Default => f.write_str("default"),
        }
    }
}

/// A value given for a setting but not used, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unused {
    pub origin: Origin,
    pub value: OsString,
    pub why: &'static str,
}

/// One setting: the value in effect, where it came from, what was not used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting {
    pub name: &'static str,
    /// `None`: the default applies.
    pub value: Option<OsString>,
    pub origin: Origin,
    pub unused: Vec<Unused>,
}

/// Settings that cannot be used: one line naming where, what and what
/// would be right, with outside text escaped (shown as it is).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidSetting(pub String);

impl fmt::Display for InvalidSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Every setting, and the first problem found, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// In the order of [`FILE_SETTINGS`].
    pub settings: Vec<Setting>,
    /// The override, parsed (`None`: detect).
    pub mode: Option<Mode>,
    /// Bad input: nothing may run while this is set.
    pub invalid: Option<InvalidSetting>,
}

impl Settings {
    pub fn get(&self, name: &str) -> &Setting {
        self.settings
            .iter()
            .find(|setting| setting.name == name)
            .expect("one of FILE_SETTINGS")
    }

    /// The value in effect, if any (`None`: the default).
    pub fn value(&self, name: &str) -> Option<&OsStr> {
        self.get(name).value.as_deref()
    }
}

/// This call's settings, read on first use.
pub fn current() -> &'static Settings {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    SETTINGS.get_or_init(|| {
        let (files, invalid) = match read_dir(Path::new(SETTINGS_DIR)) {
            Ok(files) => (files, None),
            Err(invalid) => (Vec::new(), Some(invalid)),
        };
        let environment = environment::vars(FILE_SETTINGS);
        let from_environment = |name: &str| {
            let index = FILE_SETTINGS.iter().position(|setting| *setting == name)?;
            environment[index].clone()
        };
        let mut settings = resolve(&from_environment, &files);
        settings.invalid = invalid.or(settings.invalid);
        settings
    })
}

/// A value read from a setting file.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FileValue {
    name: &'static str,
    path: PathBuf,
    line: usize,
    value: Vec<u8>,
}

/// Reads the settings directory: absent is no files. The directory, the
/// files and every link on the way are used only where trusted
/// ([`trust`]): a file another user may write would pick the program root
/// runs.
fn read_dir(dir: &Path) -> Result<Vec<FileValue>, InvalidSetting> {
    let shown = |path: &Path| printable_bytes(path.as_os_str().as_bytes()).into_owned();
    let cannot_list = |e: Errno| InvalidSetting(format!("cannot read the settings directory {}: {e}", shown(dir)));
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let opened = match openat(None, dir, flags, nix::sys::stat::Mode::empty()) {
        Ok(raw) => raw,
        Err(Errno::ENOENT) => return Ok(Vec::new()),
        Err(Errno::ENOTDIR) => {
            return Err(InvalidSetting(format!(
                "{} is not a directory: settings are files in the directory {SETTINGS_DIR}, one per setting, named as its variable",
                shown(dir)
            )))
        }
        Err(e) => return Err(cannot_list(e)),
    };
    // SAFETY: openat returned a new descriptor that nothing else owns.
    let dir_fd = unsafe { OwnedFd::from_raw_fd(opened) };
    let untrusted = |refused: trust::Refused| InvalidSetting(refused.message().to_string());
    let trusted_dir = trust::check_trusted(dir, "the settings directory").map_err(untrusted)?;
    let listed = nix::sys::stat::fstat(dir_fd.as_raw_fd()).map_err(cannot_list)?;
    if (listed.st_dev, listed.st_ino) != (trusted_dir.stat.st_dev, trusted_dir.stat.st_ino) {
        return Err(InvalidSetting(format!(
            "the settings directory {} was replaced while it was checked; try again",
            shown(dir)
        )));
    }
    let data_link = trusted_dir.path.join(CONFIGMAP_DATA);
    let mut files = Vec::new();
    for file_name in names(&dir_fd).map_err(cannot_list)? {
        let path = dir.join(&file_name);
        let Some(name) = FILE_SETTINGS.iter().copied().find(|name| OsStr::new(name) == file_name) else {
            let problem = match ENVIRONMENT_ONLY.iter().find(|(name, _)| OsStr::new(name) == file_name) {
                Some((name, why)) => format!("{name} cannot be set by file ({why})"),
                None => format!(
                    "not a setting: expected files named {} (names starting with \".\" are skipped)",
                    FILE_SETTINGS.join(", ")
                ),
            };
            return Err(InvalidSetting(format!("{}: {problem}", shown(&path))));
        };
        let trusted = match trust::check_trusted_in(&trusted_dir, Path::new(&file_name), "the settings file") {
            Ok(trusted) => trusted,
            // kubelet swaps a ConfigMap's `..data` link before it removes
            // the links of the keys the new version no longer has.
            Err(trust::Refused::Absent { message, links }) if links.contains(&data_link) => {
                log::debug!("{message}: a ConfigMap key being removed, read as absent");
                continue;
            }
            Err(refused) => return Err(untrusted(refused)),
        };
        let contents = trust::open_regular(&trusted, "the settings file")
            .map_err(InvalidSetting)
            .and_then(|file| {
                read_small(file).map_err(|e| InvalidSetting(format!("cannot read {}: {e}", shown(&path))))
            })?;
        if let Some((line, value)) =
            parse_file(&contents).map_err(|problem| InvalidSetting(format!("{} {problem}", shown(&path))))?
        {
            files.push(FileValue {
                name,
                path,
                line,
                value: value.to_vec(),
            });
        }
    }
    Ok(files)
}

/// The names in the directory `dir`, but those starting with `.`, by
/// `getdents64` into a buffer of its own (no `opendir`: libc's allocation
/// for it costs system calls of its own). Not inlined, nor is
/// [`read_small`]: their buffers would join `read_dir`'s stack frame, which
/// every call enters, and take it onto a page of stack a call without the
/// settings directory never needs.
#[inline(never)]
fn names(dir: &OwnedFd) -> Result<Vec<OsString>, Errno> {
    // struct linux_dirent64: u64 inode, i64 offset, u16 record length, u8 type, name.
    const NAME_AT: usize = 19;
    let mut buffer = [0u8; 2048];
    let mut names = Vec::new();
    loop {
        // SAFETY: the kernel writes at most buffer.len() bytes into it.
        let filled = unsafe { libc::syscall(libc::SYS_getdents64, dir.as_raw_fd(), buffer.as_mut_ptr(), buffer.len()) };
        let filled = match filled {
            0 => return Ok(names),
            n if n > 0 => n as usize,
            _ => match Errno::last() {
                Errno::EINTR => continue,
                e => return Err(e),
            },
        };
        let mut at = 0;
        while at + NAME_AT < filled {
            let length = u16::from_ne_bytes([buffer[at + 16], buffer[at + 17]]) as usize;
            let record = &buffer[at + NAME_AT..(at + length).min(filled)];
            let name = record.split(|&b| b == 0).next().unwrap_or_default();
            if !name.starts_with(b".") {
                names.push(OsString::from_vec(name.to_vec()));
            }
            at += length.max(1);
        }
    }
}

/// The contents of `file`, refused when longer than [`MAX_FILE_BYTES`].
#[inline(never)]
fn read_small(mut file: std::fs::File) -> io::Result<Vec<u8>> {
    let mut buffer = [0u8; MAX_FILE_BYTES + 1];
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    if filled > MAX_FILE_BYTES {
        return Err(io::Error::other(format!("longer than {MAX_FILE_BYTES} bytes")));
    }
    Ok(buffer[..filled].to_vec())
}

/// The value line of a setting file and its number; `None` when it has none.
/// Err: "line N: what is wrong and what would be right".
fn parse_file(contents: &[u8]) -> Result<Option<(usize, &[u8])>, String> {
    let mut found = None;
    for (index, line) in contents.split(|&b| b == b'\n').enumerate() {
        let value = line.trim_ascii();
        if value.is_empty() || value.starts_with(b"#") {
            continue;
        }
        let number = index + 1;
        if value.contains(&0) {
            return Err(format!("line {number}: a NUL byte; the file holds one value"));
        }
        if let Some((first, _)) = found {
            return Err(format!(
                "line {number}: a second value {} (the first is on line {first}); the file holds one value, on one line",
                quoted(value)
            ));
        }
        found = Some((number, value));
    }
    Ok(found)
}

/// Each setting from the environment (`env`), else the files, else the
/// default; every value given is checked.
fn resolve(env: &dyn Fn(&str) -> Option<OsString>, files: &[FileValue]) -> Settings {
    let mut invalid = None;
    let mut mode = None;
    let mut settings = Vec::new();
    for name in FILE_SETTINGS {
        let given = env(name)
            .filter(|value| !value.is_empty())
            .map(|value| (Origin::Environment, value.into_vec()))
            .into_iter()
            .chain(files.iter().filter(|file| file.name == name).map(|file| {
                (
                    Origin::File {
                        path: file.path.clone(),
                        line: file.line,
                    },
                    file.value.clone(),
                )
            }));
        let mut setting = Setting {
            name,
            value: None,
            origin: Origin::Default,
            unused: Vec::new(),
        };
        for (origin, value) in given {
            let why_unused = match check(name, &value) {
                Err(problem) => {
                    let whole = match &origin {
                        Origin::File { .. } => format!("{origin}: {problem}"),
                        _ => problem,
                    };
                    invalid.get_or_insert(InvalidSetting(whole));
                    continue;
                }
                Ok(_) if setting.value.is_some() => "the environment wins over the file",
                Ok(Checked::Ignored(why)) => why,
                Ok(Checked::Usable(parsed_mode)) => {
                    if name == OVERRIDE_VAR {
                        mode = parsed_mode;
                    }
                    setting.value = Some(OsString::from_vec(value));
                    setting.origin = origin;
                    continue;
                }
            };
            setting.unused.push(Unused {
                origin,
                value: OsString::from_vec(value),
                why: why_unused,
            });
        }
        settings.push(setting);
    }
    Settings {
        settings,
        mode,
        invalid,
    }
}

/// What a given value is good for.
enum Checked {
    /// Used; for `IPTABLES_MODE`, the mode it pins (`None`: detect).
    Usable(Option<Mode>),
    /// Not used, as if not given, for this reason (logged at debug level).
    Ignored(&'static str),
}

/// Checks a value of setting `name`. Err: bad input, in one line.
fn check(name: &str, value: &[u8]) -> Result<Checked, String> {
    match name {
        OVERRIDE_VAR => mode::parse_override(value)
            .map(Checked::Usable)
            .map_err(|invalid| invalid.to_string()),
        HOST_ROOT_VAR if !value.starts_with(b"/") => {
            let why = "not an absolute path (it would mean the caller's working directory)";
            log::debug!("{HOST_ROOT_VAR}={} ignored: {why}", quoted(value));
            Ok(Checked::Ignored(why))
        }
        _ => Ok(Checked::Usable(None)),
    }
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
