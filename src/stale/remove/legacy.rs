//! The legacy half of a removal: each stale legacy family read, saved and
//! judged under the xtables lock, then read once more just before its
//! restore and emptied table by table. Legacy has no generation to tie the
//! emptying to: a writer that bypasses the lock and writes between two
//! readings changes what they read, so a change between the readings
//! around the save means reading again, and a change between the
//! judgement and the emptying, to any table of the family (one that held
//! nothing too), leaves the family. A family is emptied by one restore
//! process fed all of its tables, in [`EMPTYING_ORDER`] (which says why
//! that order).

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
use crate::stale::signals;
use std::fmt::Write as _;
use std::path::Path;

/// The order a family's legacy tables are emptied in: against the path of
/// a packet, the tables that read what others set first. raw (NOTRACK),
/// mangle (MARK), nat (its DNAT, the marks kube-proxy sets there) feed what
/// filter and security match; so while the restore commits one table after
/// the other, every table still kept sees the packets it saw before (its
/// feeders are kept too) and only tables already gone stop deciding. The
/// other order would leave a kept filter matching unmarked, tracked,
/// untranslated packets: a DROP keyed on a mark or a translated address
/// would stop matching, a state nobody judged.
pub const EMPTYING_ORDER: [&str; 5] = ["security", "filter", "nat", "mangle", "raw"];

/// Readings of the legacy tables that may be spoilt by a writer that
/// bypasses the lock before the removal gives up on a family.
const LEGACY_TRIES: usize = 3;

impl Removing<'_> {
    /// Each legacy family of `legacy` (as the first look found it) read
    /// afresh and judged, under the xtables lock.
    pub(super) fn judge_legacy(&self, legacy: &[&Finding], removal: &mut Removal) -> Vec<Proven> {
        let mut judged = Vec::new();
        for looked in legacy {
            match self.judge_legacy_family(looked.family) {
                Ok(Some(proven)) => judged.push(proven),
                Ok(None) => {} // emptied meanwhile (by another removal)
                Err((finding, why)) => removal.fail_all(&[finding.as_deref().unwrap_or(looked)], &why),
            }
        }
        judged
    }

    /// Reads every table of a legacy family ([`family_images`]) and finds
    /// its stale tables in that reading, saves it, reads them again (a
    /// difference: a writer that bypasses the xtables lock, so again), and
    /// judges the save against the stale tables. None: nothing is stale
    /// now. Called with the xtables lock held; Err names what it read, if
    /// it read it.
    fn judge_legacy_family(&self, family: Family) -> Result<Option<Proven>, (Option<Box<Finding>>, String)> {
        for _ in 0..LEGACY_TRIES {
            let whole = family_images(family).map_err(|why| (None, why))?;
            let finding = find::legacy_from_images(family, &whole);
            if let Some(why) = finding.unknown() {
                return Err((None, why.to_string()));
            }
            if finding.tables().is_empty() {
                return Ok(None);
            }
            let names: Vec<&str> = finding.tables().iter().map(|t| t.name).collect();
            let save = match save_tool::legacy(family) {
                Ok(save) => save.stdout,
                Err(why) => return Err((Some(Box::new(finding)), why)),
            };
            match family_images(family) {
                Ok(again) if again == whole => {}
                Ok(_) => continue,
                Err(why) => return Err((Some(Box::new(finding)), why)),
            }
            let live = of_tables(&whole, &names);
            let judged = self.judge(Mode::Legacy, family, &save, &names, || {
                proof::prove_legacy("the backup", family, &save, &names, &live, &self.private_lock)
            });
            return match judged {
                Ok((save, verdicts)) => Ok(Some(Proven {
                    finding,
                    save,
                    verdicts,
                    images: Vec::new(),
                    legacy_read: whole,
                })),
                Err(why) => Err((Some(Box::new(finding)), why)),
            };
        }
        Err((
            None,
            format!("the tables changed while the xtables lock was held, in each of {LEGACY_TRIES} readings: something writes to them without taking the lock; nothing removed"),
        ))
    }

    /// Empties each family of `judged` by one `<family>-legacy-restore`,
    /// fed all of its tables at once, in [`EMPTYING_ORDER`], where it is
    /// read again just before, every table of it, as it was judged: a
    /// writer that bypasses the xtables lock and wrote since the judgement
    /// (to a stale table, or to one that was empty then) leaves the family
    /// (what it wrote is in no backup, or was not judged with it).
    pub(super) fn empty_legacy(&self, judged: &[Proven], removal: &mut Removal) {
        for proven in judged {
            let family = proven.finding.family;
            let mut tables: Vec<&StaleTable> = proven.proven_tables().map(|(_, table)| table).collect();
            if tables.is_empty() {
                removal.record_verdicts(&proven.finding, &proven.verdicts);
                continue;
            }
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
            tables.sort_by_key(|table| EMPTYING_ORDER.iter().position(|name| *name == table.name));
            let emptied = empty_legacy_tables(family, &tables, &self.private_lock);
            signals::reached(&format!("emptied:legacy:{}", family.label()));
            // A restore that failed part of the way: what each table holds now.
            let now = emptied.as_ref().err().map(|_| find::find(Mode::Legacy, family));
            for table in tables {
                let what = (Mode::Legacy, family, table.name);
                let failed = match (&emptied, &now) {
                    (Err(why), Some(now))
                        if now.unknown().is_some() || now.tables().iter().any(|t| t.name == table.name) =>
                    {
                        Some(why.clone())
                    }
                    _ => None,
                };
                match failed {
                    None => removal.emptied.push((what, show::table_summary(table))),
                    Some(why) => removal.failed.push((what, why)),
                }
            }
        }
    }
}

/// Replaces legacy tables by empty ones (their built-in chains, ACCEPT
/// policies), in the order given, by one `<family>-legacy-restore`: one
/// commit per table, nothing but the parsing of an empty table between two.
fn empty_legacy_tables(family: Family, tables: &[&StaleTable], private_lock: &Path) -> Result<(), String> {
    let mut input = String::new();
    for table in tables {
        let _ = writeln!(input, "*{}", table.name);
        for chain in &table.builtin_chains {
            let _ = writeln!(input, ":{chain} ACCEPT [0:0]");
        }
        input.push_str("COMMIT\n");
    }
    proof::restore_apart(Mode::Legacy, family, input.as_bytes(), private_lock)
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
