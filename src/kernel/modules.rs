//! Whether the running kernel has each backend, found from files alone.
//!
//! Asking nf_tables over netlink, or looking up a legacy table, can make the
//! kernel load a module, so presence is settled before anything is asked,
//! from reads that cannot load anything, cheapest first:
//! - `/sys/module/<name>` exists for every loaded module, but for a built-in
//!   one only when it has parameters: built-in nf_tables usually has none;
//! - `/proc/modules` lists the loaded modules; a full procfs without it
//!   means a kernel without module support, where asking loads nothing (a
//!   procfs mounted with `subset=pid` hides it, and `/proc/version` with it:
//!   that says nothing about module support);
//! - `/proc/thread-self/net/ip{,6}_tables_names` exists in every network
//!   namespace once the family's x_tables is in the kernel;
//! - `modules.builtin` (what is built in) and `modules.dep` (what could be
//!   loaded) of the running kernel's release (`uname -r`), under the host
//!   root first (`IPTABLES_WRAPPER_HOST_ROOT`: a container's own
//!   `/lib/modules` rarely matches the host's kernel), then here. They are
//!   read only when the cheaper checks leave the answer open.
//!
//! Where these reads cannot tell, the answer is [`Presence::Unknown`], with
//! the reason, and the backend is not asked.

use crate::escape::Shown as _;
use crate::family::Family;
use crate::host_link;
use crate::kernel::legacy;
use crate::kernel::procfs;
use std::ffi::CStr;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

/// The kernel module behind nf_tables (`iptables-nft`).
pub const NF_TABLES: &str = "nf_tables";

/// The kernel module behind a family's legacy x_tables (`iptables-legacy`).
pub fn x_tables_module(family: Family) -> &'static str {
    match family {
        Family::Ipv4 => "ip_tables",
        Family::Ipv6 => "ip6_tables",
    }
}

/// What the files say about one backend's module; each variant carries how
/// that was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Presence {
    /// In the kernel now (loaded or built in): asking loads nothing.
    Present(String),
    /// The kernel cannot load modules, so asking loads nothing; whether the
    /// backend is built in shows in the answer.
    Askable(String),
    /// Not in the kernel now (it holds nothing), but a module may be loaded
    /// later: asking could load it.
    NotLoaded(String),
    /// Not in this kernel at all: not loaded, not built in, no module to load.
    Missing(String),
    /// Cannot be told without asking, and asking could load it.
    Unknown(String),
}

impl Presence {
    /// One phrase for reports: the state, then how it was found.
    pub fn describe(&self) -> String {
        match self {
            Presence::Present(how) => format!("present ({how})"),
            Presence::Askable(how) => format!("askable ({how})"),
            Presence::NotLoaded(how) => format!("not loaded ({how})"),
            Presence::Missing(how) => format!("not in this kernel ({how})"),
            Presence::Unknown(why) => format!("unknown ({why})"),
        }
    }

    /// Settles whether a backend that is not loaded could be: [`NotLoaded`]
    /// becomes [`Missing`] when no module for it exists. Reads `modules.dep`,
    /// so it is only called where that matters.
    ///
    /// [`NotLoaded`]: Presence::NotLoaded
    /// [`Missing`]: Presence::Missing
    pub fn or_missing(self, module: &str) -> Presence {
        let Presence::NotLoaded(how) = self else {
            return self;
        };
        match loadable(module) {
            Ok((false, why)) => Presence::Missing(format!("{how}; {why}")),
            Ok((true, why)) => Presence::NotLoaded(format!("{how}; {why}")),
            Err(why) => Presence::NotLoaded(format!("{how}; whether it could be loaded is unknown: {why}")),
        }
    }
}

/// nf_tables' presence, without `modules.dep` (see [`Presence::or_missing`]).
pub fn nf_tables() -> Presence {
    let sys_module = Path::new("/sys/module");
    if sys_module.join(NF_TABLES).exists() {
        return Presence::Present("/sys/module/nf_tables exists: loaded or built in".into());
    }
    if kernel_without_modules() {
        return Presence::Askable(
            "no /proc/modules in a full procfs: the kernel has no module support, so asking loads nothing".into(),
        );
    }
    // Every loaded module has a /sys/module entry; without sysfs, ask /proc.
    if !sys_module.is_dir() {
        match std::fs::read_to_string(PROC_MODULES) {
            Ok(modules) if lists_module(&modules, NF_TABLES) => {
                return Presence::Present(format!("listed in {PROC_MODULES}"))
            }
            Ok(_) => {}
            Err(e) => {
                return Presence::Unknown(format!(
                    "neither /sys/module nor {PROC_MODULES} can be read ({e}{})",
                    if proc_shows_only_processes() {
                        "; /proc shows only processes (subset=pid), which says nothing about module support"
                    } else {
                        ""
                    }
                ))
            }
        }
    }
    // Not a loaded module: either built in (without a sysfs entry) or absent.
    match find_in_module_list("modules.builtin", NF_TABLES) {
        Ok((true, file)) => Presence::Present(format!("built in: listed in {}", file.shown())),
        Ok((false, file)) => Presence::NotLoaded(format!(
            "not a loaded module, not built in per {}",
            file.shown()
        )),
        Err(why) => Presence::Unknown(format!(
            "not a loaded module, and whether it is built in cannot be read: {why}; mount the host's /lib/modules under {}",
            host_link::host_root().shown()
        )),
    }
}

/// Whether nf_tables can be read without loading it: true where it is in
/// the kernel (or the kernel loads no modules), false where it is not; Err
/// where that is unknown, as asking could load it.
pub fn nf_tables_readable() -> Result<bool, String> {
    match nf_tables() {
        Presence::Present(_) | Presence::Askable(_) => Ok(true),
        Presence::NotLoaded(_) | Presence::Missing(_) => Ok(false),
        Presence::Unknown(why) => Err(format!(
            "whether nf_tables is in the kernel is unknown, and asking could load it: {why}"
        )),
    }
}

/// A family's legacy x_tables presence, from its table list (the kernel's
/// own, see [`legacy::listed_tables`]), without `modules.dep` (see
/// [`Presence::or_missing`]).
pub fn x_tables(family: Family) -> Presence {
    let file = legacy::names_file(family);
    match legacy::listed_tables(family) {
        Ok(Some(_)) => Presence::Present(format!("{file} exists")),
        Ok(None) => Presence::NotLoaded(format!("no {file}")),
        Err(why) => Presence::Unknown(why),
    }
}

/// Whether `module` could be loaded into this kernel, and how that is known.
fn loadable(module: &str) -> Result<(bool, String), String> {
    if kernel_without_modules() {
        return Ok((false, "the kernel has no module support".into()));
    }
    let (listed, file) = find_in_module_list("modules.dep", module)?;
    let verdict = if listed { "a module to load" } else { "no module" };
    Ok((listed, format!("{verdict} per {}", file.shown())))
}

const PROC_MODULES: &str = "/proc/modules";
/// In every full procfs, whatever the kernel's configuration.
const PROC_VERSION: &str = "/proc/version";

/// A full procfs without `/proc/modules`: the kernel has no module support,
/// so nothing can ever be loaded. A procfs that shows only processes
/// (`subset=pid`, systemd's `ProcSubset=pid`) lacks `/proc/modules` too, and
/// says nothing about module support: it lacks `/proc/version` as well,
/// which every full procfs has.
fn kernel_without_modules() -> bool {
    !Path::new(PROC_MODULES).exists() && procfs::is_mounted() && Path::new(PROC_VERSION).exists()
}

/// A procfs without `/proc/version`: mounted with `subset=pid`.
fn proc_shows_only_processes() -> bool {
    procfs::is_mounted() && !Path::new(PROC_VERSION).exists()
}

/// Whether `/proc/modules` text lists `module` (its first field).
fn lists_module(modules: &str, module: &str) -> bool {
    modules.lines().any(|line| line.split(' ').next() == Some(module))
}

/// Looks `module` up in a module list of the running kernel
/// (`modules.builtin`: one path a line; `modules.dep`: a path, a colon, its
/// dependencies), streaming and stopping at the first match. Returns whether
/// it is listed and which file said so.
fn find_in_module_list(list: &str, module: &str) -> Result<(bool, PathBuf), String> {
    let candidates = module_list_candidates(list)?;
    let Some(file) = candidates.iter().find(|path| path.exists()) else {
        let tried: Vec<String> = candidates.iter().map(|p| p.shown().to_string()).collect();
        return Err(format!("no {list} at {}", tried.join(", ")));
    };
    let reader = File::open(file).map_err(|e| format!("{}: {e}", file.shown()))?;
    let mut reader = BufReader::new(reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => return Ok((false, file.clone())),
            Ok(_) => {
                let path = line.split(|&b| b == b':').next().unwrap_or_default();
                if module_name_is(path.trim_ascii(), module) {
                    return Ok((true, file.clone()));
                }
            }
            Err(e) => return Err(format!("{}: {e}", file.shown())),
        }
    }
}

/// Whether a module file path (`kernel/net/netfilter/nf_tables.ko.zst`)
/// names `module`; the kernel treats `-` and `_` in names alike.
fn module_name_is(path: &[u8], module: &str) -> bool {
    let file_name = path.rsplit(|&b| b == b'/').next().unwrap_or_default();
    let Some(stem) = file_name
        .windows(3)
        .position(|w| w == b".ko")
        .map(|end| &file_name[..end])
    else {
        return false;
    };
    stem.len() == module.len()
        && stem
            .iter()
            .zip(module.bytes())
            .all(|(a, b)| a == &b || (matches!(a, b'-' | b'_') && matches!(b, b'-' | b'_')))
}

/// Where a module list of the running kernel may be, in the order tried.
fn module_list_candidates(list: &str) -> Result<Vec<PathBuf>, String> {
    let release = kernel_release()?;
    let host_root = host_link::host_root();
    let roots = [host_root.as_path(), Path::new("/")];
    Ok(roots
        .iter()
        .flat_map(|root| {
            ["lib/modules", "usr/lib/modules"]
                .iter()
                .map(|dir| root.join(dir).join(&release).join(list))
                .collect::<Vec<_>>()
        })
        .collect())
}

/// The running kernel's release, as `uname -r` prints it.
fn kernel_release() -> Result<String, String> {
    let mut name = std::mem::MaybeUninit::<libc::utsname>::uninit();
    // SAFETY: `name` is valid for writes of a utsname.
    if unsafe { libc::uname(name.as_mut_ptr()) } != 0 {
        return Err(format!("uname: {}", io::Error::last_os_error()));
    }
    // SAFETY: uname filled `name`; its fields are NUL-terminated.
    let name = unsafe { name.assume_init() };
    // SAFETY: `release` is a NUL-terminated array inside `name`.
    let release = unsafe { CStr::from_ptr(name.release.as_ptr()) };
    Ok(release.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_file_names() {
        assert!(module_name_is(b"kernel/net/netfilter/nf_tables.ko", "nf_tables"));
        assert!(module_name_is(b"kernel/net/netfilter/nf_tables.ko.zst", "nf_tables"));
        assert!(module_name_is(
            b"kernel/net/ipv4/netfilter/ip_tables.ko.xz",
            "ip_tables"
        ));
        assert!(module_name_is(b"updates/ip-tables.ko", "ip_tables"));
        assert!(!module_name_is(b"kernel/net/ipv6/netfilter/ip6_tables.ko", "ip_tables"));
        assert!(!module_name_is(b"kernel/net/netfilter/nf_tables_set.ko", "nf_tables"));
        assert!(!module_name_is(b"kernel/net/netfilter/nf_tables", "nf_tables"));
    }

    #[test]
    fn proc_modules_lines() {
        let modules = "nf_tables_set 16384 0 - Live 0x0\nnf_tables 258048 1 nf_tables_set, Live 0x0\n";
        assert!(lists_module(modules, "nf_tables"));
        assert!(lists_module(modules, "nf_tables_set"));
        assert!(!lists_module(modules, "ip_tables"));
    }
}
