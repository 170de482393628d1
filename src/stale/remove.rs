//! Removing what is stale, only when asked (`stale --remove`): each stale
//! table backed up, the backup proven, then the table emptied, then a fresh
//! read.
//!
//! The backup is the stale backend's full save of each family that holds a
//! stale table (its own save tool, without `-t`; for iptables-nft, where
//! that fails, each stale table's own: [`super::save_tool`]), cut to the tables
//! emptied, byte for byte,
//! `iptables-<backend>.rules` and `ip6tables-<backend>.rules` in the backup
//! directory ([`BackupDir`]). A table is emptied only when restoring that
//! save into a scratch namespace gives the same table ([`proof`]) and the
//! rest of its family may go with it ([`judge`]); a family with a table
//! that fails is left as it is, with the reasons, and the exit status says
//! something stale remains. Every backup is written before anything is
//! emptied: a backup that cannot be written stops the removal before
//! anything changes.
//!
//! Writers are held off from the backup to the emptying. Legacy: the xtables
//! lock is held from before the first reading to after the last (the backend
//! tools the removal runs get a lock file of their own meanwhile), so every
//! writer that takes the lock waits; the tables are read before and after
//! the save, and a change between the two (a writer that bypasses the lock)
//! means reading again; they are read once more just before the emptying,
//! and a change since the judgement leaves the family (`remove/legacy.rs`).
//! Each table is then replaced by an empty one (its
//! built-in chains, ACCEPT policies) by one `<family>-legacy-restore` fed
//! all of the family's tables, one commit per table in the order
//! `remove/legacy.rs` gives and says why; legacy tables stay registered.
//! nft: the tables and the
//! save are read at one generation, and the emptying is one transaction that
//! the kernel commits only at that generation ([`NftSocket::empty_tables`]);
//! when anything committed meanwhile, it waits a little longer each time
//! (writers come in bursts), backs up, proves and tries again, five attempts
//! at most, then stops with what is left and why.
//!
//! Before the first emptying, whichever nft attempt makes it, the removal
//! writes its record ([`in_progress`]), and writes it again before a later
//! attempt that empties other tables; a SIGTERM, SIGINT or SIGHUP that
//! came before the first emptying stops it with nothing changed (the
//! record removed), one after it waits for the report ([`signals`]).

use super::backup::{self, BackupDir};
use super::find::{self, Finding, StaleTable};
use super::in_progress::{self, Part};
use super::judge;
use super::look::Look;
use super::proof;
use super::removal_report::{nothing_stale, report, stopped, Removal};
use super::signals::{self, NoTurningBack};
use super::{HostBackend, Options};
use crate::escape::Shown as _;
use crate::family::Family;
use crate::kernel::legacy::LegacyTableImage;
use crate::kernel::nft::{NftSocket, NftTableImage};
use crate::mode::Mode;
use crate::standard_fds::say;
use crate::xtables_lock::{self, HeldLock};
use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

mod legacy;
mod nft;

/// How long the removal waits for the xtables lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);
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
    /// legacy: every table of the family, as read before the save it was
    /// judged by.
    legacy_read: Vec<Option<LegacyTableImage>>,
}

impl Proven {
    fn file_name(&self) -> String {
        format!("{}-{}.rules", self.finding.family.program(), self.finding.backend)
    }

    fn proven_tables(&self) -> impl Iterator<Item = (usize, &StaleTable)> {
        self.finding
            .tables()
            .iter()
            .enumerate()
            .filter(|(index, _)| self.verdicts[*index].is_ok())
    }
}

/// Runs the removal, top to bottom: what is stale (from the first
/// [`Look`]), stop where nothing can be removed safely, then per backend
/// judge each family (its backup proven, what may go: [`judge`]), back up,
/// empty, and read again to report. Exit 0 when nothing stale remains.
pub fn run(hosts: &[HostBackend], options: &Options, look: &mut Look) -> i32 {
    signals::catch();
    let before: Vec<Finding> = hosts.iter().map(|h| look.of(h.stale(), h.family).clone()).collect();
    let stop = |why: String| stopped(hosts, options, &before, &why);
    if let Some(unknown) = before.iter().find_map(Finding::unknown) {
        return stop(format!("{unknown}; nothing was changed"));
    }
    if before.iter().all(|f| f.tables().is_empty()) {
        return nothing_stale(hosts, options, &before);
    }
    if let Err(why) = proof::scratch_namespace_available() {
        return stop(format!("{why}; nothing was changed: no table is removed unproven"));
    }
    let backup = match BackupDir::open(options.backup_dir.as_deref()) {
        Ok(dir) => dir,
        Err(why) => return stop(format!("backup: {why}; nothing was changed")),
    };
    let removing = Removing {
        backup: &backup,
        private_lock: backup.private_path(PRIVATE_LOCK),
        allow_opening: options.allow_opening,
    };
    // The families each backend holds stale tables in; what they hold is
    // read again once writers are held off (another removal may have run).
    let legacy: Vec<&Finding> = before
        .iter()
        .filter(|f| f.backend == Mode::Legacy && !f.tables().is_empty())
        .collect();
    let nft_before: Vec<&Finding> = before
        .iter()
        .filter(|f| f.backend == Mode::Nft && !f.tables().is_empty())
        .collect();
    let mut removal = Removal::default();
    // Held until the tables have been read again after the removal, and
    // the record and the signals until the report.
    let begun = match removing.remove(&legacy, &nft_before, &mut removal) {
        Ok(begun) => begun,
        Err(why) => {
            backup.remove(PRIVATE_LOCK);
            // Nothing was emptied: no backup this removal wrote is an undo.
            remove_unused_backups(&backup, &mut removal);
            backup.remove_empty();
            let status = stop(format!("{why}; nothing was changed"));
            return signals::exit_status().unwrap_or(status);
        }
    };
    remove_unused_backups(&backup, &mut removal);
    let after: Vec<Finding> = hosts.iter().map(|h| find::find(h.stale(), h.family)).collect();
    let (record, no_turning_back) = match begun {
        Begun::Emptied(lock, under_way) => {
            drop(lock);
            (Some(under_way.record), Some(under_way.no_turning_back))
        }
        Begun::Nothing(lock) => {
            drop(lock);
            (None, None)
        }
        Begun::NoLock => (None, None),
    };
    backup.remove(PRIVATE_LOCK);
    let dir = if removal.files.is_empty() {
        backup.remove_empty();
        None
    } else {
        Some(backup.path.as_path())
    };
    let status = report(hosts, options, dir, &removal, &after);
    if let Some(record) = record {
        record.finish();
    }
    drop(no_turning_back);
    match signals::came() {
        Some(signal) => {
            say(&format!(
                "stale --remove: {signal} came during the removal: it emptied what it had begun to and reported first"
            ));
            signals::exit_status().unwrap_or(status)
        }
        None => status,
    }
}

/// How far a removal went: the xtables lock was not taken; it was, and
/// nothing was to be emptied; or the emptying happened, with its record
/// and the signals held off until the report.
enum Begun {
    NoLock,
    Nothing(HeldLock),
    Emptied(HeldLock, Box<Emptying>),
}

/// An emptying under way: its record, what the record says, and the
/// signals held off.
struct Emptying {
    record: in_progress::Held,
    part: Part,
    no_turning_back: NoTurningBack,
}

/// What has the record name an nft attempt's tables before it empties them.
type BeforeEmptying<'a> = dyn FnMut(&[Proven], &Removal) -> Result<(), NotRecorded> + 'a;

/// Why no record could be had before an emptying.
enum NotRecorded {
    /// Nothing was emptied yet (the first record cannot be written, or a
    /// signal came): the removal stops with nothing changed.
    Stop(String),
    /// The record, already written, cannot be written again to name what
    /// a later attempt would empty: that is not emptied.
    Kept(String),
}

impl NotRecorded {
    fn why(self) -> String {
        match self {
            NotRecorded::Stop(why) | NotRecorded::Kept(why) => why,
        }
    }
}

/// What each step of one removal needs: where its backups go, the lock
/// file the restore tools get while the removal holds the real one, and
/// whether it may open the host (`--allow-opening`).
struct Removing<'a> {
    backup: &'a BackupDir,
    private_lock: PathBuf,
    allow_opening: bool,
}

impl Removing<'_> {
    /// Judges, backs up and empties; Err (with nothing changed) when a
    /// backup or the record cannot be written, or a signal came before the
    /// first emptying. Every backup and the record are on disk before
    /// anything is emptied. `legacy` and `nft_before`: the families' findings
    /// of the first look, named with the reason where no reading under the
    /// lock is had.
    fn remove(&self, legacy: &[&Finding], nft_before: &[&Finding], removal: &mut Removal) -> Result<Begun, String> {
        let Some(lock) = self.hold_xtables_lock(legacy, nft_before, removal) else {
            return Ok(Begun::NoLock);
        };
        let legacy_judged = self.judge_legacy(legacy, removal);
        let nft: Vec<Family> = nft_before.iter().map(|f| f.family).collect();
        let socket = self.open_nft(&nft, removal);
        let first = match &socket {
            Some(socket) => self.judge_nft(socket, &nft),
            None => Ok(None),
        };
        let first_judged: &[Proven] = match &first {
            Ok(Some((_, judged))) => judged,
            _ => &[],
        };
        let mut written = HashSet::new();
        for judged in legacy_judged.iter().chain(first_judged) {
            self.back_up(judged, &mut written, removal)
                .map_err(|e| format!("backup into {}: {e}", self.backup.path.shown()))?;
        }
        let to_empty: Vec<&Proven> = legacy_judged.iter().chain(first_judged).collect();
        let mut emptying = None;
        if to_empty.iter().any(|p| p.proven_tables().next().is_some()) {
            self.record_before_emptying(&mut emptying, &to_empty, removal)
                .map_err(NotRecorded::why)?;
        }
        // Each family's verdicts are recorded as it is emptied (of nothing,
        // when none of its tables may go).
        self.empty_legacy(&legacy_judged, removal);
        if let Some(socket) = socket {
            // A later nft attempt may empty what the record does not name
            // yet, or be the first emptying of all.
            let mut before_emptying = |judged: &[Proven], removal: &Removal| {
                let to_empty: Vec<&Proven> = legacy_judged.iter().chain(judged).collect();
                self.record_before_emptying(&mut emptying, &to_empty, removal)
            };
            self.empty_nft(&socket, nft_before, first, written, removal, &mut before_emptying)?;
        }
        Ok(match emptying {
            Some(under_way) => Begun::Emptied(lock, Box::new(under_way)),
            None => Begun::Nothing(lock),
        })
    }

    /// Before emptying `to_empty`'s proven tables: the record written, and
    /// from then on the signals held off; where the record names other
    /// tables (a later nft attempt judged others), written again.
    fn record_before_emptying(
        &self,
        emptying: &mut Option<Emptying>,
        to_empty: &[&Proven],
        removal: &Removal,
    ) -> Result<(), NotRecorded> {
        let part = self.part(to_empty, removal);
        let stopped = |signal| NotRecorded::Stop(format!("stopped by {signal} before anything was emptied"));
        if let (Some(signal), Some(_), true) = (signals::came(), &emptying, removal.emptied.is_empty()) {
            // Recorded, nothing emptied yet (the kernel refused an nft
            // attempt): the record goes, and with it the signals' hold.
            if let Some(under_way) = emptying.take() {
                under_way.record.finish();
            }
            return Err(stopped(signal));
        }
        let Some(under_way) = emptying else {
            let no_turning_back = NoTurningBack::hold();
            if let Some(signal) = signals::came() {
                return Err(stopped(signal));
            }
            let record = in_progress::begin(&part).map_err(NotRecorded::Stop)?;
            signals::reached("record");
            *emptying = Some(Emptying {
                record,
                part,
                no_turning_back,
            });
            return Ok(());
        };
        if under_way.part.tables != part.tables {
            under_way.record.rewrite(&part).map_err(NotRecorded::Kept)?;
            under_way.part = part;
        }
        Ok(())
    }

    /// The record of what is about to be emptied: `to_empty`'s proven
    /// tables, the backup directory and the undo of each of their backups.
    fn part(&self, to_empty: &[&Proven], removal: &Removal) -> Part {
        let whose: Vec<(Mode, Family)> = to_empty.iter().map(|p| (p.finding.backend, p.finding.family)).collect();
        let tables = to_empty
            .iter()
            .map(|p| {
                let names = p.proven_tables().map(|(_, t)| t.name.to_string()).collect();
                (p.finding.backend, p.finding.family, names)
            })
            .collect();
        let undo = removal
            .files
            .iter()
            .filter(|(of, _, _)| whose.contains(of))
            .map(|(_, file, tool)| backup::undo(tool, &file.shown()))
            .collect();
        Part::now(&self.backup.path, tables, undo)
    }

    /// The xtables lock, whichever backend is stale: legacy's writers
    /// take it, so they wait while a stale legacy backend is judged and
    /// emptied, and while a live legacy backend is read for the twins of a
    /// stale nft one and that is emptied (None, with every stale family
    /// left, when it cannot be taken).
    fn hold_xtables_lock(
        &self,
        legacy: &[&Finding],
        nft_before: &[&Finding],
        removal: &mut Removal,
    ) -> Option<HeldLock> {
        match xtables_lock::hold(LOCK_WAIT) {
            Ok(held) => Some(held),
            Err(why) => {
                let all: Vec<&Finding> = legacy.iter().chain(nft_before).copied().collect();
                removal.fail_all(&all, &format!("{why}; nothing was changed"));
                None
            }
        }
    }

    /// One family's verdict ([`judge::as_one`]): whether removing it would
    /// open the host the other backend filters, and its backup's proof.
    fn judge(
        &self,
        stale: Mode,
        family: Family,
        save: &[u8],
        names: &[&str],
        prove: impl FnOnce() -> Result<proof::Verdicts, String>,
    ) -> Result<proof::Verdicts, String> {
        let opens = judge::held_back(
            save,
            stale.other(),
            family,
            names,
            self.allow_opening,
            &self.private_lock,
        )?;
        Ok(judge::as_one(prove()?, opens, names))
    }

    /// The nf_tables socket, when nft holds anything stale (None, with every
    /// nft table left, when it cannot be opened).
    fn open_nft(&self, nft: &[Family], removal: &mut Removal) -> Option<NftSocket> {
        if nft.is_empty() {
            return None;
        }
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
    }

    /// Writes one family's backup (again, in a later nft attempt, in
    /// place of the one written before); none when nothing of it goes.
    fn back_up(&self, judged: &Proven, written: &mut HashSet<String>, removal: &mut Removal) -> Result<(), String> {
        if judged.save.is_empty() {
            return Ok(());
        }
        let name = judged.file_name();
        let replace = written.contains(&name);
        let path = self
            .backup
            .write(&name, &judged.save, replace)
            .map_err(|e| format!("{name}: {e}"))?;
        signals::reached(&format!("backup:{name}"));
        if !replace {
            removal.files.push((
                (judged.finding.backend, judged.finding.family),
                path,
                format!("{}-{}-restore", judged.finding.family.program(), judged.finding.backend),
            ));
            written.insert(name);
        }
        Ok(())
    }
}

/// Deletes the backups of each backend and family nothing was emptied
/// from ([`Removal::take_unused_backups`]).
fn remove_unused_backups(backup: &BackupDir, removal: &mut Removal) {
    for unused in removal.take_unused_backups() {
        if let Some(name) = unused.file_name().and_then(|n| n.to_str()) {
            backup.remove(name);
        }
    }
}
