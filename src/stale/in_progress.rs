//! The record of a removal in progress: what a removal killed before its
//! report leaves behind, so that no later run is silent about it.
//!
//! A removal writes the file `stale-removal` in the runtime directory
//! ([`crate::run_dir`], under `/run`: it lives as long as the tables it
//! describes, until a reboot) before its first emptying, synced with its
//! directory, and removes it after its report. It names when and by which
//! process, each backend and family and the tables to be emptied, the backup
//! directory and the undo commands. The removal holds an exclusive `flock`
//! on it while it runs: a record that can be locked is one whose removal
//! died. A removal that cannot write its record stops before changing
//! anything.
//!
//! While the file is there, `stale`, `stale --remove`, `detect` and the
//! metrics say so ([`notice`]), reading the kernel to tell which of the
//! recorded tables are empty now and which still hold something. A later
//! removal judges afresh what is stale (a half-emptied family's remaining
//! tables among it), and takes the record over rather than writing a second
//! one; its own part goes after its report.
//!
//! An interrupted removal's backup is the only copy of what it emptied, and
//! no report ever named it: its part stays in the record, and is named,
//! counted and kept by every later removal, until its backup directory is
//! removed by hand (whether its undo was run, or what it emptied is still
//! wanted, only a person can tell). A part whose backup is gone is neither
//! shown nor counted, and the next removal drops it.

use crate::escape::Shown as _;
use crate::family::Family;
use crate::mode::Mode;
use crate::run_dir::RunDir;
use crate::stale::find;
use crate::temporary;
use crate::warnings_record::utc_time;
use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag};
use nix::sys::stat::Mode as FileMode;
use nix::unistd::{fsync, linkat, unlinkat, UnlinkatFlags};
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;

/// The record's name in the runtime directory.
pub const RECORD: &str = "stale-removal";
/// The largest record read.
const MAX_LEN: usize = 64 * 1024;

/// One removal's part of the record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// When it was written (UTC) and by which process.
    pub time: String,
    pub pid: u32,
    pub backup: String,
    /// Per backend and family, the tables it empties.
    pub tables: Vec<(Mode, Family, Vec<String>)>,
    pub undo: Vec<String>,
}

impl Part {
    /// A part for this process, now.
    pub fn now(backup: &Path, tables: Vec<(Mode, Family, Vec<String>)>, undo: Vec<String>) -> Part {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Part {
            time: utc_time(now),
            pid: std::process::id(),
            backup: backup.shown().into_owned(),
            tables,
            undo,
        }
    }

    fn text(&self) -> String {
        let mut text = format!("removal {} {}\nbackup {}\n", self.time, self.pid, self.backup);
        for (backend, family, tables) in &self.tables {
            text.push_str(&format!("empty {backend} {} {}\n", family.label(), tables.join(" ")));
        }
        for undo in &self.undo {
            text.push_str(&format!("undo {undo}\n"));
        }
        text.push_str("end\n");
        text
    }

    /// The recorded tables that hold nothing now, and those that do (or
    /// cannot be read), as `backend family table` each.
    fn emptied_and_left(&self) -> (Vec<String>, Vec<String>) {
        let (mut emptied, mut left) = (Vec::new(), Vec::new());
        for (backend, family, tables) in &self.tables {
            let finding = find::find(*backend, *family);
            for table in tables {
                let named = format!("{backend} {} {table}", family.label());
                let holds = finding.tables().iter().any(|t| t.name == table.as_str());
                if finding.unknown().is_some() || holds {
                    left.push(named);
                } else {
                    emptied.push(named);
                }
            }
        }
        (emptied, left)
    }

    /// The line that says what this part left: `running` for a removal
    /// that still holds the record.
    fn line(&self, running: bool) -> String {
        let (emptied, left) = self.emptied_and_left();
        let list = |tables: &[String]| {
            if tables.is_empty() {
                "nothing".to_string()
            } else {
                tables.join(", ")
            }
        };
        let (what, until) = if running {
            ("a removal in progress", "")
        } else {
            ("an interrupted removal", "; named until its backup is removed")
        };
        format!(
            "{what} ({}, pid {}) emptied {}, left {}{until}; backup {}; undo: {}",
            self.time,
            self.pid,
            list(&emptied),
            list(&left),
            self.backup,
            self.undo.join("; ")
        )
    }

    /// Whether its backup directory is still there (not removed by hand):
    /// until then the part is named, counted and kept.
    fn backed_up(&self) -> bool {
        Path::new(&self.backup).is_dir()
    }
}

/// Parses a record; the parts that were written whole (a part cut short
/// was being written, before anything was emptied).
fn parse(text: &str) -> Vec<Part> {
    let mut parts = Vec::new();
    let mut part: Option<Part> = None;
    for line in text.lines() {
        let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
        match (key, part.as_mut()) {
            ("removal", _) => {
                let (time, pid) = rest.split_once(' ').unwrap_or((rest, ""));
                part = Some(Part {
                    time: time.to_string(),
                    pid: pid.parse().unwrap_or(0),
                    backup: String::new(),
                    tables: Vec::new(),
                    undo: Vec::new(),
                });
            }
            ("backup", Some(part)) => part.backup = rest.to_string(),
            ("empty", Some(part)) => {
                let mut words = rest.split(' ');
                let backend = words
                    .next()
                    .and_then(|name| [Mode::Legacy, Mode::Nft].into_iter().find(|m| m.name() == name));
                let family = words
                    .next()
                    .and_then(|label| Family::BOTH.into_iter().find(|f| f.label() == label));
                if let (Some(backend), Some(family)) = (backend, family) {
                    part.tables.push((backend, family, words.map(str::to_string).collect()));
                }
            }
            ("undo", Some(part)) => part.undo.push(rest.to_string()),
            ("end", Some(_)) => parts.extend(part.take()),
            _ => {}
        }
    }
    parts
}

/// `flock(how | LOCK_NB)`.
fn lock(file: &File, how: libc::c_int) -> Result<(), Errno> {
    // SAFETY: flock on a descriptor this process holds open.
    Errno::result(unsafe { libc::flock(file.as_raw_fd(), how | libc::LOCK_NB) }).map(drop)
}

/// The record as it is: its parts, and whether a live removal holds it.
struct Found {
    parts: Vec<Part>,
    running: bool,
}

/// What the runtime directory holds under the record's name.
enum Record {
    Absent,
    /// Something is there that is not a private regular file of this
    /// user: never read, never replaced, always shown.
    Unreadable,
    Read(Found),
}

fn found(dir: &RunDir) -> Record {
    let Some((mut file, _)) = dir.open_private(RECORD) else {
        let at = Some(dir.fd().as_raw_fd());
        return match nix::sys::stat::fstatat(at, RECORD, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Err(Errno::ENOENT) => Record::Absent,
            _ => Record::Unreadable,
        };
    };
    let running = lock(&file, libc::LOCK_SH) == Err(Errno::EWOULDBLOCK);
    let mut bytes = Vec::new();
    if (&mut file).take(MAX_LEN as u64).read_to_end(&mut bytes).is_err() {
        return Record::Unreadable;
    }
    Record::Read(Found {
        parts: parse(&String::from_utf8_lossy(&bytes)),
        running,
    })
}

/// Why a record that is there is not read, and what to do.
fn unreadable(dir: &RunDir) -> String {
    format!(
        "a record of a removal is at {} but is not a private regular file of this user: an interrupted removal may have left it; read it, then move it away (a removal refuses while it is there)",
        dir.path().join(RECORD).shown()
    )
}

/// One line per removal the record names whose backup is there (and for a
/// removal in progress), each saying what it emptied, what it left, its
/// backup and its undo; none without a record.
pub fn notice() -> Vec<String> {
    let Some(dir) = RunDir::open() else {
        return Vec::new();
    };
    let found = match found(&dir) {
        Record::Absent => return Vec::new(),
        Record::Unreadable => return vec![unreadable(&dir)],
        Record::Read(found) => found,
    };
    let last = found.parts.len().saturating_sub(1);
    found
        .parts
        .iter()
        .enumerate()
        .map(|(at, part)| (part, found.running && at == last))
        .filter(|(part, running)| *running || part.backed_up())
        .map(|(part, running)| part.line(running))
        .collect()
}

/// How many removals the record names that died before their report and
/// whose backup is there (a removal that holds it still runs); 0 without a
/// record. Reads no table.
pub fn interrupted() -> usize {
    match RunDir::open().map(|dir| found(&dir)) {
        None | Some(Record::Absent) => 0,
        Some(Record::Unreadable) => 1,
        Some(Record::Read(f)) => {
            let earlier = &f.parts[..f.parts.len() - usize::from(f.running && !f.parts.is_empty())];
            earlier.iter().filter(|part| part.backed_up()).count()
        }
    }
}

/// The record of this removal, held (locked) until [`Held::finish`].
pub struct Held {
    dir: RunDir,
    /// Open and locked: the lock goes when the process does.
    _file: File,
    earlier: Vec<Part>,
}

/// Writes the record of a removal about to empty `part`'s tables, taking
/// over a record an interrupted removal left (its parts kept in the new
/// one). Err: the record cannot be written, or another removal holds it.
pub fn begin(part: &Part) -> Result<Held, String> {
    let dir = RunDir::open_or_create().ok_or_else(|| {
        "the runtime directory cannot be used for the record of the removal (IPTABLES_WRAPPER_RUN_DIR must name a directory of this user with mode 0700, or a path where one can be made)".to_string()
    })?;
    let earlier = match found(&dir) {
        Record::Read(Found { running: true, parts }) => {
            let pid = parts.last().map_or(0, |p| p.pid);
            return Err(format!("another removal is in progress (pid {pid})"));
        }
        Record::Read(Found { parts, .. }) => Some(parts),
        Record::Unreadable => return Err(unreadable(&dir)),
        Record::Absent => None,
    };
    let mut text: String = earlier.iter().flatten().map(Part::text).collect();
    text.push_str(&part.text());
    let file = place(&dir, &text, earlier.is_some()).map_err(|e| {
        format!(
            "the record of the removal cannot be written in {}: {e}",
            dir.path().shown()
        )
    })?;
    Ok(Held {
        dir,
        _file: file,
        earlier: earlier.unwrap_or_default(),
    })
}

/// Writes `text` into a new locked file, synced, and gives it the record's
/// name (over an interrupted one with `replace`, else only where none is).
fn place(dir: &RunDir, text: &str, replace: bool) -> std::io::Result<File> {
    let at = Some(dir.fd().as_raw_fd());
    let flags = OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let temporary = temporary::random_name(RECORD.as_ref());
    let raw = openat(at, temporary.as_os_str(), flags, FileMode::S_IRUSR | FileMode::S_IWUSR)?;
    // SAFETY: openat returned a new descriptor that nothing else owns.
    let mut file = unsafe { File::from_raw_fd(raw) };
    let written = (|| {
        lock(&file, libc::LOCK_EX)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        if replace {
            renameat(at, temporary.as_os_str(), at, RECORD)?;
        } else {
            linkat(
                at,
                temporary.as_os_str(),
                at,
                std::ffi::OsStr::new(RECORD),
                AtFlags::empty(),
            )?;
        }
        Ok::<_, std::io::Error>(())
    })();
    if written.is_err() || !replace {
        let _ = unlinkat(at, temporary.as_os_str(), UnlinkatFlags::NoRemoveDir);
    }
    written?;
    fsync(dir.fd().as_raw_fd())?;
    Ok(file)
}

impl Held {
    /// The removal's own part, now `part`: written again, the earlier
    /// parts kept (an nft attempt after the first may empty other tables).
    pub fn rewrite(&mut self, part: &Part) -> Result<(), String> {
        let mut text: String = self.earlier.iter().map(Part::text).collect();
        text.push_str(&part.text());
        self._file = place(&self.dir, &text, true).map_err(|e| {
            format!(
                "the record of the removal cannot be written again in {}: {e}",
                self.dir.path().shown()
            )
        })?;
        Ok(())
    }

    /// After the report: the record goes, but for the earlier removals'
    /// parts whose backup is still there.
    pub fn finish(self) {
        let kept: String = self.earlier.iter().filter(|p| p.backed_up()).map(Part::text).collect();
        let at = Some(self.dir.fd().as_raw_fd());
        let done = if kept.is_empty() {
            unlinkat(at, RECORD, UnlinkatFlags::NoRemoveDir).map_err(std::io::Error::from)
        } else {
            place(&self.dir, &kept, true).map(drop)
        };
        if let Err(e) = done.and_then(|()| Ok(fsync(self.dir.fd().as_raw_fd())?)) {
            log::warn!("the record of the removal stays in {}: {e}", self.dir.path().shown());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_a_part_cut_short_is_none() {
        let part = Part {
            time: "2024-01-02T03:04:05Z".into(),
            pid: 42,
            backup: "/run/iptables-wrapper/stale-backup-1".into(),
            tables: vec![
                (Mode::Legacy, Family::Ipv4, vec!["filter".into(), "nat".into()]),
                (Mode::Legacy, Family::Ipv6, vec!["filter".into()]),
            ],
            undo: vec!["iptables-legacy-restore < /x/iptables-legacy.rules".into()],
        };
        let text = part.text();
        assert_eq!(parse(&text), vec![part.clone()]);
        let cut = &text[..text.len() - 4];
        assert_eq!(parse(&format!("{text}{cut}")), vec![part]);
    }
}
