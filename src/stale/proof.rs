//! The proof that a backup restores exactly what a removal takes away.
//!
//! A table is emptied only when its backup, restored with the stale
//! backend's own restore tool into a scratch network namespace the wrapper
//! makes for the proof, reads back through the wrapper's own kernel readers
//! byte for byte as the live table does: x_tables' GET_INFO and entry blob
//! (counters aside) for legacy; for nf_tables the table, its chains, rules
//! with their expressions, sets with their elements, stateful objects and
//! flowtables (handles, counters and timers aside: see
//! [`crate::kernel::nft::NftTableImage`]). This one comparison catches what
//! a save tool cannot express (`iptables-nft-save` drops anonymous sets,
//! ranges, repeated matches without a word), names a restore tool refuses
//! (an nft chain name of 29 characters or more), bytes a save changes, and
//! a save that does not restore at all (a comment holding a newline).
//!
//! The sets the restored rules name are the host's, given to the scratch
//! namespace first at the host's indices ([`super::ipsets`]): a rule holds
//! a set's index, not its name.
//!
//! The scratch namespace is made by a thread of the wrapper's own
//! (`unshare(CLONE_NEWNET)`, which needs `CAP_SYS_ADMIN`): the restore tool
//! runs as its child, in that namespace, and the thread reads the restored
//! tables there. The namespace goes away with the thread. Where it cannot be
//! made, nothing is proven and nothing is removed.

use super::ipsets::HostSets;
use crate::backend;
use crate::command::WrappedCommand;
use crate::escape::Shown as _;
use crate::family::Family;
use crate::kernel::legacy::{self, LegacyFamily, LegacyTableImage};
use crate::kernel::nft::{DumpInterrupted, NftSocket, NftTableImage};
use crate::mode::Mode;
use crate::save_text;
use crate::xtables_lock::LOCKFILE_VAR;
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `task` in a thread of its own in a new, empty network namespace.
pub fn in_scratch_namespace<T: Send>(task: impl FnOnce() -> Result<T, String> + Send) -> Result<T, String> {
    std::thread::scope(|scope| {
        let thread = scope.spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).map_err(|errno| {
                let needs = if errno == nix::errno::Errno::EPERM {
                    " (making one needs CAP_SYS_ADMIN)"
                } else {
                    ""
                };
                format!("no scratch network namespace can be made to prove the backup in: unshare(CLONE_NEWNET): {errno}{needs}")
            })?;
            task()
        });
        thread
            .join()
            .unwrap_or_else(|_| Err("the proof's thread ended early".into()))
    })
}

/// An xtables lock that only the wrapper's own restores take: an anonymous
/// file (memfd) that children inherit, named by its `/proc/self/fd` path.
/// A command that only looks proves with it, so it neither waits for the
/// host's writers nor creates `/run/xtables.lock`, which is evidence.
pub struct AnonymousLock {
    _file: std::os::fd::OwnedFd,
    path: std::path::PathBuf,
}

impl AnonymousLock {
    pub fn new() -> Result<AnonymousLock, String> {
        use std::os::fd::AsRawFd as _;
        let file = nix::sys::memfd::memfd_create(c"iptables-wrapper-lock", nix::sys::memfd::MemFdCreateFlag::empty())
            .map_err(|errno| format!("no lock for the proof's restore can be made: memfd_create: {errno}"))?;
        let path = format!("/proc/self/fd/{}", file.as_raw_fd()).into();
        Ok(AnonymousLock { _file: file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Whether a scratch namespace can be made here at all.
pub fn scratch_namespace_available() -> Result<(), String> {
    in_scratch_namespace(|| Ok(()))
}

/// Restores `input` with `backend`'s own `<family>-restore` (no
/// `--noflush`: each table in it replaced) in this thread's namespace. Its
/// xtables lock is `private_lock`: the removal holds the real one.
pub fn restore(backend: Mode, family: Family, input: &[u8], private_lock: &Path) -> Result<(), String> {
    run_restore(backend, family, input, private_lock, false)
}

/// [`restore`] in a process group of its own, so that the signals a
/// terminal sends the wrapper's group (Ctrl-C, a hang-up) do not reach it:
/// for the emptying, which must not stop between two tables.
pub fn restore_apart(backend: Mode, family: Family, input: &[u8], private_lock: &Path) -> Result<(), String> {
    run_restore(backend, family, input, private_lock, true)
}

fn run_restore(backend: Mode, family: Family, input: &[u8], private_lock: &Path, apart: bool) -> Result<(), String> {
    let name = match family {
        Family::Ipv4 => "iptables-restore",
        Family::Ipv6 => "ip6tables-restore",
    };
    let command = WrappedCommand::from_name(name).expect("a known name");
    let tool = backend::locate(&command, backend).map_err(|e| e.to_string())?;
    let mut restore = Command::new(&tool.path);
    restore.arg0(command.name).env(LOCKFILE_VAR, private_lock);
    if backend == Mode::Legacy {
        restore.arg("--wait=10");
    }
    if apart {
        restore.process_group(0);
    }
    let mut child = restore
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", tool.path.shown()))?;
    let fed = child.stdin.take().expect("stdin is piped").write_all(input);
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    match (fed, output.status.success()) {
        (Ok(()), true) => Ok(()),
        (fed, _) => Err(format!(
            "{}-{backend}-restore {}: {}{}",
            family.program(),
            output.status,
            String::from_utf8_lossy(output.stderr.trim_ascii()),
            fed.err()
                .map(|e| format!(" (writing its input: {e})"))
                .unwrap_or_default()
        )),
    }
}

/// The images of `tables` of `family` in this thread's namespace (None for
/// a table that does not exist). Only listed tables are looked up.
pub fn legacy_images(family: Family, tables: &[&str]) -> Result<Vec<Option<LegacyTableImage>>, String> {
    let listed = legacy::listed_tables(family)?.unwrap_or_default();
    let wanted: Vec<String> = listed
        .into_iter()
        .filter(|name| tables.contains(&name.as_str()))
        .collect();
    let family_tables = LegacyFamily::open_listed(family, wanted)
        .map_err(|e| format!("legacy {} tables cannot be read: {e}", family.label()))?;
    tables
        .iter()
        .map(|name| match family_tables.table(name) {
            None => Ok(None),
            Some(info) => family_tables
                .image(info)
                .map(Some)
                .map_err(|e| format!("legacy {} {name}: {e}", family.label())),
        })
        .collect()
}

/// The images of `tables` of `family` in this thread's namespace, all read
/// at one generation, which is returned with them; None when the ruleset
/// kept changing while they were read (read again later).
pub fn nft_images(
    socket: &NftSocket,
    family: Family,
    tables: &[&str],
) -> Result<Option<(Vec<NftTableImage>, u32)>, String> {
    let mut images = Vec::new();
    let mut generation = None;
    for table in tables {
        let (image, at) = match socket.table_image(family, table) {
            Err(e) if DumpInterrupted::is(&e) => return Ok(None),
            read => read.map_err(|e| format!("nf_tables {} {table}: {e}", family.nft_name()))?,
        };
        if generation.is_some_and(|g| g != at) {
            return Ok(None);
        }
        generation = Some(at);
        images.push(image);
    }
    Ok(Some((images, generation.unwrap_or_default())))
}

/// The backup proven (the save's sections of the tables that passed,
/// exactly as restored), and per table Ok or why it failed.
pub type Verdicts = (Vec<u8>, Vec<Result<(), String>>);

/// Proves `save`'s sections of the tables `names` against their `live`
/// images (`subject` names the save in a verdict: "the backup"):
/// `restored_by` restores an input into a new scratch namespace and
/// reads the chosen tables back. Tables that differ are dropped from the
/// input, and the rest proven again, until every table in it restores
/// exactly; a restore that fails for several tables is tried table by table.
/// The backup is then exactly what was last restored, so the undo restores
/// only what is removed (never a table left as it was, such as a native one
/// the save cannot express).
fn narrowed<I>(
    subject: &str,
    save: &[u8],
    names: &[&str],
    live: &[I],
    mut restored_by: impl FnMut(&[u8], &[&str]) -> Result<Vec<I>, String>,
    difference: impl Fn(&I, &I) -> Option<String>,
) -> Result<Verdicts, String> {
    let mut verdicts: Vec<Result<(), String>> = vec![Ok(()); names.len()];
    loop {
        let candidates: Vec<usize> = (0..names.len()).filter(|&i| verdicts[i].is_ok()).collect();
        if candidates.is_empty() {
            return Ok((Vec::new(), verdicts));
        }
        let chosen: Vec<&str> = candidates.iter().map(|&i| names[i]).collect();
        let input = save_text::sections(save, &chosen);
        match restored_by(&input, &chosen) {
            Ok(restored) => {
                let mut all_exact = true;
                for (&index, restored) in candidates.iter().zip(&restored) {
                    if let Some(why) = difference(&live[index], restored) {
                        verdicts[index] = Err(format!("{subject} does not restore it exactly: {why}"));
                        all_exact = false;
                    }
                }
                if all_exact {
                    return Ok((input, verdicts));
                }
            }
            Err(why) if candidates.len() == 1 => verdicts[candidates[0]] = Err(why),
            Err(_) => {
                for &index in &candidates {
                    let alone = save_text::sections(save, &[names[index]]);
                    if let Err(why) = restored_by(&alone, &[names[index]]) {
                        verdicts[index] = Err(why);
                    }
                }
            }
        }
    }
}

/// `narrowed` for legacy: `save` of `family` against the tables' `live`
/// images, each restore with legacy's own tool in a new scratch namespace.
pub fn prove_legacy(
    subject: &str,
    family: Family,
    save: &[u8],
    names: &[&str],
    live: &[Option<LegacyTableImage>],
    private_lock: &Path,
) -> Result<Verdicts, String> {
    let restored_by = |input: &[u8], chosen: &[&str]| {
        let sets = HostSets::read(subject, input)?;
        in_scratch_namespace(|| {
            sets.recreate()?;
            restore(Mode::Legacy, family, input, private_lock)
                .map_err(|why| format!("{subject} does not restore: {why}"))?;
            legacy_images(family, chosen)
        })
    };
    narrowed(subject, save, names, live, restored_by, legacy_difference)
}

/// `narrowed` for nf_tables: as [`prove_legacy`], with nft's own tool.
pub fn prove_nft(
    subject: &str,
    family: Family,
    save: &[u8],
    names: &[&str],
    live: &[NftTableImage],
    private_lock: &Path,
) -> Result<Verdicts, String> {
    let restored_by = |input: &[u8], chosen: &[&str]| {
        let sets = HostSets::read(subject, input)?;
        in_scratch_namespace(|| {
            let scratch =
                NftSocket::open().map_err(|e| format!("nf_tables cannot be read in the scratch namespace: {e}"))?;
            sets.recreate()?;
            restore(Mode::Nft, family, input, private_lock)
                .map_err(|why| format!("{subject} does not restore: {why}"))?;
            match nft_images(&scratch, family, chosen)? {
                Some((images, _)) => Ok(images),
                None => Err("the scratch namespace's nf_tables ruleset changed while it was read".into()),
            }
        })
    };
    narrowed(subject, save, names, live, restored_by, NftTableImage::difference)
}

/// `LegacyTableImage::difference` for tables that may be missing.
fn legacy_difference(live: &Option<LegacyTableImage>, restored: &Option<LegacyTableImage>) -> Option<String> {
    match (live, restored) {
        (Some(live), Some(restored)) => live.difference(restored),
        (Some(_), None) => Some("the restore does not make the table at all".into()),
        (None, Some(_)) => Some("the table is gone, but the restore makes one".into()),
        (None, None) => None,
    }
}
