//! What a removal did (the backups written, the tables emptied and those
//! left, with why) and its report: in words, or as the `removal` member of
//! `stale --json`'s object; its exit status.

use super::backup::undo;
use super::find::Finding;
use super::show::{self, print_out};
use super::{HostBackend, Options, EXIT_NOTHING_STALE, EXIT_STALE};
use crate::escape::Shown as _;
use crate::escape::{printable, string};
use crate::family::Family;
use crate::mode::Mode;
use crate::standard_fds::say;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What the removal did, for the report.
#[derive(Default)]
pub struct Removal {
    /// Each backup written: the backend and family whose tables it holds,
    /// its path, the tool that restores it.
    pub files: Vec<((Mode, Family), PathBuf, String)>,
    pub emptied: Vec<(Table, String)>,
    pub failed: Vec<(Table, String)>,
}

impl Removal {
    /// Takes out of the report the backups of each backend and family that
    /// nothing was emptied from, and returns their paths (to be removed).
    /// Such a backup was written for an attempt that did not happen (a
    /// later nft attempt left the family, or its emptying failed): offered
    /// as an undo, it would write back an older state than the kernel's.
    pub fn take_unused_backups(&mut self) -> Vec<PathBuf> {
        let emptied: Vec<(Mode, Family)> = self.emptied.iter().map(|((b, f, _), _)| (*b, *f)).collect();
        let (used, unused) = std::mem::take(&mut self.files)
            .into_iter()
            .partition(|(whose, _, _)| emptied.contains(whose));
        self.files = used;
        unused.into_iter().map(|(_, path, _)| path).collect()
    }

    /// Every stale table of `findings` left, for `why`.
    pub fn fail_all(&mut self, findings: &[&Finding], why: &str) {
        for finding in findings {
            for table in finding.tables() {
                self.failed
                    .push(((finding.backend, finding.family, table.name), why.to_string()));
            }
        }
    }

    /// The tables of `finding` whose `verdicts` (one per table) failed.
    pub fn record_verdicts(&mut self, finding: &Finding, verdicts: &[Result<(), String>]) {
        for (table, verdict) in finding.tables().iter().zip(verdicts) {
            if let Err(why) = verdict {
                self.failed
                    .push(((finding.backend, finding.family, table.name), why.clone()));
            }
        }
    }
}

/// The report after a removal; its exit status.
pub fn report(
    hosts: &[HostBackend],
    options: &Options,
    dir: Option<&Path>,
    removal: &Removal,
    after: &[Finding],
) -> i32 {
    let status = if removal.failed.is_empty() {
        show::status(after)
    } else {
        EXIT_STALE
    };
    let out = if options.json {
        format!(
            "{}\n",
            show::json(hosts, after, &[], Some(removal_json(dir, removal, None)))
        )
    } else {
        let mut out = match dir {
            Some(dir) => format!("backup: {}\n", dir.shown()),
            None if removal.failed.is_empty() => "no backup written: nothing was proven, nothing removed\n".to_string(),
            None => "no backup written: nothing was proven, nothing removed, for the reasons below\n".to_string(),
        };
        for (_, file, tool) in &removal.files {
            let _ = writeln!(out, "  {} (undo: {})", file.shown(), undo(tool, &file.shown()));
        }
        for ((backend, family, table), summary) in &removal.emptied {
            let _ = writeln!(out, "emptied: {backend} {} {table} (held {summary})", family.label());
        }
        for ((backend, family, table), why) in &removal.failed {
            let _ = writeln!(
                out,
                "left as it was: {backend} {} {table}: {}",
                family.label(),
                printable(why)
            );
        }
        out.push_str("after the removal:\n");
        out.push_str(&show::text(hosts, after, &[]));
        if status == EXIT_NOTHING_STALE {
            out.push_str("nothing stale remains\n");
        } else {
            out.push_str("stale state remains (see above)\n");
        }
        out
    };
    match print_out(&out) {
        Ok(()) => status,
        Err(failed) => {
            // The report is lost: where the backup is must not be.
            if let Some(dir) = dir {
                say(&format!("stale --remove: the backup is in {}", dir.shown()));
            }
            failed
        }
    }
}

/// The report of a removal that found nothing stale (exit 0).
pub fn nothing_stale(hosts: &[HostBackend], options: &Options, before: &[Finding]) -> i32 {
    let out = if options.json {
        format!(
            "{}\n",
            show::json(hosts, before, &[], Some(removal_json(None, &Removal::default(), None)))
        )
    } else {
        format!(
            "{}nothing stale: nothing removed, no backup written\n",
            show::text(hosts, before, &[])
        )
    };
    print_out(&out).err().unwrap_or(EXIT_NOTHING_STALE)
}

/// Stops the removal before anything changed: one line on stderr and, with
/// `--json`, the one JSON object on stdout, its removal saying why.
pub fn stopped(hosts: &[HostBackend], options: &Options, before: &[Finding], why: &str) -> i32 {
    if options.json {
        let removal = removal_json(None, &Removal::default(), Some(why));
        let _ = print_out(&format!("{}\n", show::json(hosts, before, &[], Some(removal))));
    }
    say(&format!("stale --remove: {}", printable(why)));
    EXIT_STALE
}

pub type Table = (Mode, Family, &'static str);

/// The removal as JSON; `stopped`: why it stopped before changing anything.
pub fn removal_json(dir: Option<&Path>, removal: &Removal, stopped: Option<&str>) -> String {
    let Removal { files, emptied, failed } = removal;
    let table = |(backend, family, name): &Table| {
        format!(
            "\"backend\":{},\"family\":{},\"table\":{}",
            string(backend.name()),
            string(family.label()),
            string(name)
        )
    };
    let files: Vec<String> = files
        .iter()
        .map(|(_, file, tool)| format!("{{\"path\":{},\"undo\":{}}}", string(&file.shown()), string(tool)))
        .collect();
    let emptied: Vec<String> = emptied.iter().map(|(t, _)| format!("{{{}}}", table(t))).collect();
    let failed: Vec<String> = failed
        .iter()
        .map(|(t, why)| format!("{{{},\"error\":{}}}", table(t), string(why)))
        .collect();
    format!(
        "{{\"backup_dir\":{},\"backup_files\":[{}],\"emptied\":[{}],\"failed\":[{}],\"stopped\":{}}}",
        dir.map_or("null".into(), |d| string(&d.shown())),
        files.join(","),
        emptied.join(","),
        failed.join(","),
        stopped.map_or("null".into(), string)
    )
}
