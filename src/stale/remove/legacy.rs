//! The legacy half of a removal: each stale legacy family read, saved and
//! judged under the xtables lock, then read once more and emptied table by
//! table. Legacy has no generation to tie the emptying to: a writer that
//! bypasses the lock and writes between two readings changes what they
//! read, so a change between the readings around the save means reading
//! again, and a change between the judgement and the emptying, to any
//! table of the family (one that held nothing too), leaves the family.

use super::{Proven, Removing};
use crate::family::Family;
use crate::kernel::legacy::LegacyTableImage;
use crate::kernel::IPTABLES_TABLES;
use crate::mode::Mode;
use crate::stale::find::{self, Finding, StaleTable};
use crate::stale::proof;
use crate::stale::removal_report::Removal;
use crate::stale::save_tool;
use crate::stale::show;
use std::fmt::Write as _;
use std::path::Path;

/// Readings of the legacy tables that may be spoilt by a writer that
/// bypasses the lock before the removal gives up on a family.
const LEGACY_TRIES: usize = 3;

impl Removing<'_> {
    /// Each legacy family read afresh and judged, under the xtables lock.
    pub(super) fn judge_legacy(&self, legacy: &[Family], removal: &mut Removal) -> Vec<Proven> {
        let mut judged = Vec::new();
        for &family in legacy {
            let finding = find::find(Mode::Legacy, family);
            if let Some(why) = &finding.unknown {
                removal.fail_all(&[&finding], why);
                continue;
            }
            if finding.tables.is_empty() {
                continue; // emptied meanwhile (by another removal)
            }
            match self.judge_legacy_family(&finding) {
                Ok(((save, verdicts), legacy_read)) => judged.push(Proven {
                    finding,
                    save,
                    verdicts,
                    images: Vec::new(),
                    legacy_read,
                }),
                Err(why) => removal.fail_all(&[&finding], &why),
            }
        }
        judged
    }

    /// Reads every table of a legacy family ([`family_images`]), saves it,
    /// reads them again (a difference: a writer that bypasses the xtables
    /// lock, so again), and judges the save against the stale tables;
    /// returns the verdicts and that reading. Called with the xtables lock
    /// held.
    fn judge_legacy_family(
        &self,
        finding: &Finding,
    ) -> Result<(proof::Verdicts, Vec<Option<LegacyTableImage>>), String> {
        let family = finding.family;
        let names: Vec<&str> = finding.tables.iter().map(|t| t.name).collect();
        for _ in 0..LEGACY_TRIES {
            let whole = family_images(family)?;
            let save = save_tool::legacy(family)?.stdout;
            if family_images(family)? != whole {
                continue;
            }
            let live = of_tables(&whole, &names);
            let verdicts = self.judge(Mode::Legacy, family, &save, &names, || {
                proof::prove_legacy("the backup", family, &save, &names, &live, &self.private_lock)
            })?;
            return Ok((verdicts, whole));
        }
        Err(format!(
            "the tables changed while the xtables lock was held, in each of {LEGACY_TRIES} readings: something writes to them without taking the lock; nothing removed"
        ))
    }

    /// Empties each legacy family that may go, table by table, once every
    /// table of it is read again as it was judged: a writer that bypasses
    /// the xtables lock and wrote during the judgement, the proof or the
    /// backups (to a stale table, or to one that was empty then) leaves the
    /// family (what it wrote is in no backup, or was not judged with it).
    pub(super) fn empty_legacy(&self, judged: &[Proven], removal: &mut Removal) {
        for proven in judged {
            let family = proven.finding.family;
            match family_images(family) {
                Ok(now) if now == proven.legacy_read => {}
                Ok(_) => {
                    removal.fail_all(&[&proven.finding], "the tables changed after they were judged, while the xtables lock was held: something writes to them without taking the lock; nothing removed");
                    continue;
                }
                Err(why) => {
                    removal.fail_all(
                        &[&proven.finding],
                        &format!("reading again before the emptying: {why}; nothing removed"),
                    );
                    continue;
                }
            }
            removal.record_verdicts(&proven.finding, &proven.verdicts);
            for (_, table) in proven.proven_tables() {
                let what = (Mode::Legacy, family, table.name);
                match empty_legacy_table(family, table, &self.private_lock) {
                    Ok(()) => removal.emptied.push((what, show::table_summary(table))),
                    Err(why) => removal.failed.push((what, why)),
                }
            }
        }
    }
}

/// Replaces a legacy table by an empty one (its built-in chains, ACCEPT
/// policies) in one commit of `<family>-legacy-restore`.
fn empty_legacy_table(family: Family, table: &StaleTable, private_lock: &Path) -> Result<(), String> {
    let mut input = format!("*{}\n", table.name);
    for chain in &table.builtin_chains {
        let _ = writeln!(input, ":{chain} ACCEPT [0:0]");
    }
    input.push_str("COMMIT\n");
    proof::restore(Mode::Legacy, family, input.as_bytes(), private_lock)
}

/// Every table of a legacy family that exists, empty or not (None for one
/// not listed): what the removal's judgement rests on, since one family's
/// tables go together or not at all.
fn family_images(family: Family) -> Result<Vec<Option<LegacyTableImage>>, String> {
    proof::legacy_images(family, &IPTABLES_TABLES)
}

/// The images of `names` in a reading of the whole family.
fn of_tables(whole: &[Option<LegacyTableImage>], names: &[&str]) -> Vec<Option<LegacyTableImage>> {
    names
        .iter()
        .map(|name| {
            let at = IPTABLES_TABLES.iter().position(|table| table == name);
            at.and_then(|at| whole[at].clone())
        })
        .collect()
}
