//! Removing what is stale, only when asked (`stale --remove`): each stale
//! table backed up, the backup proven, then the table emptied, then a fresh
//! read.
//!
//! The backup is the stale backend's full save of each family that holds a
//! stale table (its own save tool, never with `-t`), byte for byte,
//! `iptables-<backend>.rules` and `ip6tables-<backend>.rules` in the backup
//! directory ([`BackupDir`]). A table is emptied only when restoring that
//! save into a scratch namespace gives the same table ([`proof`]); one that
//! fails is left as it is, with the reason, and the exit status says
//! something stale remains. Every backup is written before anything is
//! emptied: a backup that cannot be written stops the removal before
//! anything changes.
//!
//! Writers are held off from the backup to the emptying. Legacy: the xtables
//! lock is held from before the first reading to after the last (the backend
//! tools the removal runs get a lock file of their own meanwhile), so every
//! writer that takes the lock waits; the tables are read before and after
//! the save, and a change between the two (a writer that bypasses the lock)
//! means reading again. Each table is then replaced by an empty one (its
//! built-in chains, ACCEPT policies) by `<family>-legacy-restore`, one
//! commit per table; legacy tables stay registered. nft: the tables and the
//! save are read at one generation, and the emptying is one transaction that
//! the kernel commits only at that generation ([`NftSocket::empty_tables`]);
//! when anything committed meanwhile, it waits a little longer each time
//! (writers come in bursts), backs up, proves and tries again, five attempts
//! at most, then stops with what is left and why.

use super::backup::BackupDir;
use super::find::{self, Finding, StaleTable};
use super::opening;
use super::proof;
use super::removal_report::{removal_json, report, Removal};
use super::show::{self, print_out};
use super::{HostBackend, Options, EXIT_NOTHING_STALE, EXIT_STALE};
use crate::escape::printable;
use crate::escape::Shown as _;
use crate::family::Family;
use crate::kernel::nft::{Emptied, NftSocket, NftTableImage};
use crate::mode::Mode;
use crate::standard_fds::say;
use crate::xtables_lock::{self, HeldLock};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// How long the removal waits for the xtables lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// Readings of the legacy tables that may be spoilt by a writer that
/// bypasses the lock before the removal gives up on a family.
const LEGACY_TRIES: usize = 3;
/// Attempts at the nft removal while the generation keeps moving.
const NFT_TRIES: usize = 5;
/// The wait before the next nft attempt, times the attempts so far.
const NFT_BACKOFF: Duration = Duration::from_millis(100);
/// The lock file the restore tools get while the removal holds the real one.
const PRIVATE_LOCK: &str = ".xtables.lock";

/// One family of one backend, read afresh, backed up and proven.
struct Proven {
    finding: Finding,
    /// The backup: the save's sections of the proven tables, as proven.
    save: Vec<u8>,
    /// Per stale table: whether its backup restores it exactly.
    verdicts: Vec<Result<(), String>>,
    /// nft: the tables' images at the generation of the save.
    images: Vec<NftTableImage>,
}

impl Proven {
    fn file_name(&self) -> String {
        format!("{}-{}.rules", self.finding.family.program(), self.finding.backend)
    }

    fn proven_tables(&self) -> impl Iterator<Item = (usize, &StaleTable)> {
        self.finding
            .tables
            .iter()
            .enumerate()
            .filter(|(index, _)| self.verdicts[*index].is_ok())
    }
}

/// One nft attempt: the generation its proofs were read at, and the proofs.
type NftAttempt = Option<(u32, Vec<Proven>)>;

/// Runs the removal; exit 0 when nothing stale remains.
pub fn run(hosts: &[HostBackend], options: &Options) -> i32 {
    let before: Vec<Finding> = hosts.iter().map(|h| find::find(h.stale(), h.family)).collect();
    let stop = |why: String| stopped(hosts, options, &before, &why);
    if let Some(unknown) = before.iter().find_map(|f| f.unknown.as_ref()) {
        return stop(format!("{unknown}; nothing was changed"));
    }
    if before.iter().all(|f| f.tables.is_empty()) {
        let out = if options.json {
            format!(
                "{}\n",
                show::json(hosts, &before, &[], Some(removal_json(None, &Removal::default(), None)))
            )
        } else {
            format!(
                "{}nothing stale: nothing removed, no backup written\n",
                show::text(hosts, &before, &[])
            )
        };
        return print_out(&out).err().unwrap_or(EXIT_NOTHING_STALE);
    }
    if let Err(why) = proof::scratch_namespace_available() {
        return stop(format!("{why}; nothing was changed: no table is removed unproven"));
    }
    let backup = match BackupDir::open(options.backup_dir.as_deref()) {
        Ok(dir) => dir,
        Err(why) => return stop(format!("backup: {why}; nothing was changed")),
    };
    // The families each backend holds stale tables in; what they hold is
    // read again once writers are held off (another removal may have run).
    let stale_in = |backend: Mode| -> Vec<Family> {
        before
            .iter()
            .filter(|f| f.backend == backend && !f.tables.is_empty())
            .map(|f| f.family)
            .collect()
    };
    let (legacy, nft) = (stale_in(Mode::Legacy), stale_in(Mode::Nft));
    let mut removal = Removal::default();
    let private_lock = backup.private_path(PRIVATE_LOCK);
    // Held until the tables have been read again after the removal.
    let nft_before: Vec<&Finding> = before
        .iter()
        .filter(|f| nft.contains(&f.family) && f.backend == Mode::Nft)
        .collect();
    let lock = match remove(
        &legacy,
        &nft_before,
        &backup,
        &private_lock,
        options.allow_opening,
        &mut removal,
    ) {
        Ok(lock) => lock,
        Err(why) => {
            backup.remove(PRIVATE_LOCK);
            return stop(format!(
                "backup into {}: {why}; nothing was changed",
                backup.path.shown()
            ));
        }
    };
    let after: Vec<Finding> = hosts.iter().map(|h| find::find(h.stale(), h.family)).collect();
    drop(lock);
    backup.remove(PRIVATE_LOCK);
    let dir = if removal.files.is_empty() {
        backup.remove_empty();
        None
    } else {
        Some(backup.path.as_path())
    };
    report(hosts, options, dir, &removal, &after)
}

/// Stops the removal before anything changed: one line on stderr and, with
/// `--json`, the one JSON object on stdout, its removal saying why.
fn stopped(hosts: &[HostBackend], options: &Options, before: &[Finding], why: &str) -> i32 {
    if options.json {
        let removal = removal_json(None, &Removal::default(), Some(why));
        let _ = print_out(&format!("{}\n", show::json(hosts, before, &[], Some(removal))));
    }
    say(&format!("stale --remove: {}", printable(why)));
    EXIT_STALE
}

/// Proves and removes; Err (with nothing changed) when a backup cannot be
/// written. Returns the xtables lock, if it was taken. `nft_before`: the
/// nft families' findings before the removal, named with the reason when
/// no attempt ever reads a steady ruleset.
fn remove(
    legacy: &[Family],
    nft_before: &[&Finding],
    backup: &BackupDir,
    private_lock: &Path,
    allow_opening: bool,
    removal: &mut Removal,
) -> Result<Option<HeldLock>, String> {
    let mut lock = None;
    let mut legacy_proven = Vec::new();
    if !legacy.is_empty() {
        match xtables_lock::hold(LOCK_WAIT) {
            Ok(held) => lock = Some(held),
            Err(why) => {
                let findings: Vec<Finding> = legacy.iter().map(|&f| find::find(Mode::Legacy, f)).collect();
                removal.fail_all(
                    &findings.iter().collect::<Vec<_>>(),
                    &format!("{why}; nothing was changed"),
                );
            }
        }
    }
    if lock.is_some() {
        for &family in legacy {
            let finding = find::find(Mode::Legacy, family);
            if let Some(why) = &finding.unknown {
                removal.fail_all(&[&finding], why);
                continue;
            }
            if finding.tables.is_empty() {
                continue; // emptied meanwhile (by another removal)
            }
            match prove_legacy(&finding, private_lock, allow_opening) {
                Ok((save, verdicts)) => legacy_proven.push(Proven {
                    finding,
                    save,
                    verdicts,
                    images: Vec::new(),
                }),
                Err(why) => removal.fail_all(&[&finding], &why),
            }
        }
    }
    let mut written: HashSet<String> = HashSet::new();
    let nft: Vec<Family> = nft_before.iter().map(|f| f.family).collect();
    let nft = nft.as_slice();
    let nft_socket = if nft.is_empty() {
        None
    } else {
        match NftSocket::open() {
            Ok(socket) => Some(socket),
            Err(e) => {
                let findings: Vec<Finding> = nft.iter().map(|&f| find::find(Mode::Nft, f)).collect();
                removal.fail_all(
                    &findings.iter().collect::<Vec<_>>(),
                    &format!("nf_tables cannot be read: {e}"),
                );
                None
            }
        }
    };
    let mut nft_attempt = match &nft_socket {
        Some(socket) => prove_nft(socket, nft, private_lock, allow_opening),
        None => Ok(None),
    };
    // Every backup on disk before anything is emptied.
    let nft_first: &[Proven] = match &nft_attempt {
        Ok(Some((_, proven))) => proven,
        _ => &[],
    };
    for proven in legacy_proven.iter().chain(nft_first).filter(|p| !p.save.is_empty()) {
        let name = proven.file_name();
        let path = backup
            .write(&name, &proven.save, false)
            .map_err(|e| format!("{name}: {e}"))?;
        removal.files.push((
            path,
            format!("{}-{}-restore", proven.finding.family.program(), proven.finding.backend),
        ));
        written.insert(name);
    }
    for proven in &legacy_proven {
        removal.record_verdicts(&proven.finding, &proven.verdicts);
        for (_, table) in proven.proven_tables() {
            let what = (Mode::Legacy, proven.finding.family, table.name);
            match empty_legacy(proven.finding.family, table, private_lock) {
                Ok(()) => removal.emptied.push((what, show::table_summary(table))),
                Err(why) => removal.failed.push((what, why)),
            }
        }
    }
    let Some(socket) = nft_socket else {
        return Ok(lock);
    };
    // What each failure names: the tables of the last attempt read, at
    // first those found before the removal.
    let mut last_findings: Vec<Finding> = nft_before.iter().map(|&f| f.clone()).collect();
    let mut read_steady = false;
    for attempt in 1..=NFT_TRIES {
        let (generation, proven) = match nft_attempt {
            Err(why) => {
                removal.fail_all(&last_findings.iter().collect::<Vec<_>>(), &why);
                return Ok(lock);
            }
            Ok(None) => {
                std::thread::sleep(NFT_BACKOFF * attempt as u32);
                nft_attempt = prove_nft(&socket, nft, private_lock, allow_opening);
                continue;
            }
            Ok(Some(attempt)) => attempt,
        };
        read_steady = true;
        if attempt > 1 {
            for one in proven.iter().filter(|p| !p.save.is_empty()) {
                let name = one.file_name();
                let replace = written.contains(&name);
                let path = match backup.write(&name, &one.save, replace) {
                    Ok(path) => path,
                    Err(e) => {
                        let findings: Vec<&Finding> = to_fail(&proven);
                        removal.fail_all(
                            &findings,
                            &format!("backing up again: {name}: {e}; nothing removed from nft"),
                        );
                        return Ok(lock);
                    }
                };
                if !replace {
                    removal
                        .files
                        .push((path, format!("{}-nft-restore", one.finding.family.program())));
                    written.insert(name);
                }
            }
        }
        let to_empty: Vec<(Family, &str, &NftTableImage)> = proven
            .iter()
            .flat_map(|p| {
                p.proven_tables()
                    .map(move |(index, table)| (p.finding.family, table.name, &p.images[index]))
            })
            .collect();
        match socket.empty_tables(generation, &to_empty) {
            Ok(Emptied::Done) => {
                for proven in &proven {
                    removal.record_verdicts(&proven.finding, &proven.verdicts);
                    for (_, table) in proven.proven_tables() {
                        removal.emptied.push((
                            (Mode::Nft, proven.finding.family, table.name),
                            show::table_summary(table),
                        ));
                    }
                }
                return Ok(lock);
            }
            Ok(Emptied::GenerationMoved) => {
                // Writers come in bursts (a sync, a restore): let one end.
                std::thread::sleep(NFT_BACKOFF * attempt as u32);
                last_findings = proven.into_iter().map(|p| p.finding).collect();
                nft_attempt = prove_nft(&socket, nft, private_lock, allow_opening);
            }
            Err(e) => {
                removal.fail_all(&to_fail(&proven), &format!("emptying: {e}"));
                return Ok(lock);
            }
        }
    }
    if let Ok(Some((_, proven))) = &nft_attempt {
        last_findings = proven.iter().map(|p| p.finding.clone()).collect();
    }
    let why = if read_steady {
        format!("the nf_tables ruleset changed between the backup and the removal in each of {NFT_TRIES} attempts (another program keeps committing); nothing removed from nft")
    } else {
        format!("the nf_tables ruleset changed while it was being read in each of {NFT_TRIES} attempts (another program keeps committing), so no backup could be read at one generation and proven; nothing removed from nft")
    };
    removal.fail_all(&last_findings.iter().collect::<Vec<_>>(), &why);
    Ok(lock)
}

/// The findings of proofs, to be left with a reason.
fn to_fail(proven: &[Proven]) -> Vec<&Finding> {
    proven.iter().map(|p| &p.finding).collect()
}

/// Reads a legacy family's stale tables, saves it, reads the tables again
/// (a difference: a writer that bypasses the xtables lock, so again), and
/// proves the save against them. Called with the xtables lock held.
/// Returns the proven backup and a verdict per stale table.
fn prove_legacy(finding: &Finding, private_lock: &Path, allow_opening: bool) -> Result<proof::Verdicts, String> {
    let family = finding.family;
    let names: Vec<&str> = finding.tables.iter().map(|t| t.name).collect();
    for _ in 0..LEGACY_TRIES {
        let live = proof::legacy_images(family, &names)?;
        let save = find::save(Mode::Legacy, family)?.stdout;
        if proof::legacy_images(family, &names)? != live {
            continue;
        }
        let opens = opening::held_back(&save, Mode::Nft, family, &names, allow_opening, private_lock)?;
        return proof::prove_legacy("the backup", family, &save, &names, &live, private_lock)
            .map(|proven| opening::held_open(proven, opens, &names));
    }
    Err(format!(
        "the tables changed while the xtables lock was held, in each of {LEGACY_TRIES} readings: something writes to them without taking the lock; nothing removed"
    ))
}

/// One nft attempt: each family's stale tables read afresh, their images
/// and the save all at one generation (returned with the proofs); Ok(None)
/// when the generation moved while reading.
fn prove_nft(
    socket: &NftSocket,
    families: &[Family],
    private_lock: &Path,
    allow_opening: bool,
) -> Result<NftAttempt, String> {
    let generation = socket
        .generation()
        .map_err(|e| format!("nf_tables cannot be read: {e}"))?;
    let mut read = Vec::new();
    for &family in families {
        // The save first: its notes serve the finding, which needs no save
        // of its own then; the generation check below covers all three.
        let save = find::save(Mode::Nft, family)?;
        let finding = find::find_beside(Mode::Nft, family, Some(&save));
        if let Some(why) = &finding.unknown {
            return Err(why.clone());
        }
        if finding.tables.is_empty() {
            continue; // emptied meanwhile (by another removal)
        }
        let names: Vec<&'static str> = finding.tables.iter().map(|t| t.name).collect();
        let Some((images, at)) = proof::nft_images(socket, family, &names)? else {
            return Ok(None);
        };
        if at != generation {
            return Ok(None);
        }
        read.push((finding, names, images, save.stdout));
    }
    if socket
        .generation()
        .map_err(|e| format!("nf_tables cannot be read: {e}"))?
        != generation
    {
        return Ok(None);
    }
    let mut proven = Vec::new();
    for (finding, names, images, save) in read {
        let family = finding.family;
        let opens = opening::held_back(&save, Mode::Legacy, family, &names, allow_opening, private_lock)?;
        let (save, verdicts) = opening::held_open(
            proof::prove_nft("the backup", family, &save, &names, &images, private_lock)?,
            opens,
            &names,
        );
        proven.push(Proven {
            finding,
            save,
            verdicts,
            images,
        });
    }
    Ok(Some((generation, proven)))
}

/// Replaces a legacy table by an empty one (its built-in chains, ACCEPT
/// policies) in one commit of `<family>-legacy-restore`.
fn empty_legacy(family: Family, table: &StaleTable, private_lock: &Path) -> Result<(), String> {
    let mut input = format!("*{}\n", table.name);
    for chain in &table.builtin_chains {
        let _ = writeln!(input, ":{chain} ACCEPT [0:0]");
    }
    input.push_str("COMMIT\n");
    proof::restore(Mode::Legacy, family, input.as_bytes(), private_lock)
}
