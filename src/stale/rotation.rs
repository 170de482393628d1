//! The stale rules' backups kept in one directory (`stale --backups-in
//! DIR`): the name of the next one, the run that writes it there, and the
//! pruning to the newest N (`--keep-backups N`).
//!
//! A backup is named `stale-backup-<sequence>-<UTC time>`, its sequence
//! number one more than the highest in the directory. The newest is the
//! highest number, never the latest time: a clock stepped back (a node
//! without a clock battery, before NTP) cannot make the backup just written
//! look older than the others and be pruned. The time is for the reader.
//! Older `stale-backup-*` directories without a number come before every
//! numbered one, in the order of their names.

use super::{Options, EXIT_STALE};
use crate::escape::Shown as _;
use crate::on_node::NodePaths;
use crate::standard_fds::say;
use crate::warnings_record::utc_time;
use std::path::{Path, PathBuf};

/// The start of every backup directory's name.
pub const PREFIX: &str = "stale-backup-";

/// Digits of the sequence number, at least: names then sort as they count
/// up to 999999; past it, the order is the number's, not the name's.
const SEQUENCE_DIGITS: usize = 6;

/// A backup directory's place in the order: its sequence number (0 when it
/// has none), then its name.
fn rank(name: &str) -> Option<(u64, String)> {
    let rest = name.strip_prefix(PREFIX)?;
    let digits = rest.split('-').next().unwrap_or_default();
    let numbered =
        digits.len() >= SEQUENCE_DIGITS && rest.len() > digits.len() && digits.bytes().all(|b| b.is_ascii_digit());
    // A number too large for 64 bits counts as the largest: no next one.
    let sequence = if numbered {
        digits.parse().unwrap_or(u64::MAX)
    } else {
        0
    };
    Some((sequence, name.to_string()))
}

/// The backup directories in `dir` (not symlinks), oldest first. A
/// missing `dir` holds none.
fn backups(dir: &Path) -> Result<Vec<(u64, String)>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot list {}: {e}", dir.shown())),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.shown()))?;
        let is_dir = entry.file_type().map(|kind| kind.is_dir()).unwrap_or(false);
        if let (true, Some(name)) = (is_dir, entry.file_name().to_str()) {
            found.extend(rank(name));
        }
    }
    found.sort();
    Ok(found)
}

/// The path of the next backup in `dir`, stamped with `now` (Unix time).
/// Err when the highest number there has no next one: wrapping to 0 would
/// make the new backup the oldest, the first pruned.
pub fn next_backup(dir: &Path, now: u64) -> Result<PathBuf, String> {
    let highest = backups(dir)?.pop();
    let sequence = match highest {
        None => 1,
        Some((highest, name)) => highest.checked_add(1).ok_or_else(|| {
            format!(
                "{} holds {}, whose sequence number has no next one: move the backups there elsewhere (or rename that one), or give another --backups-in; nothing was removed",
                dir.shown(),
                crate::escape::printable(&name)
            )
        })?,
    };
    let stamp: String = utc_time(now).chars().filter(|c| *c != '-' && *c != ':').collect();
    Ok(dir.join(format!("{PREFIX}{sequence:0SEQUENCE_DIGITS$}-{stamp}")))
}

/// Removes all but the newest `keep` (1 or more) backups in `dir`, and
/// never `just_written` (the only copy of what a removal just emptied,
/// whatever others a concurrent run may have added); the paths removed, or
/// why one could not be.
pub fn prune(dir: &Path, keep: usize, just_written: Option<&Path>) -> Result<Vec<PathBuf>, String> {
    let found = backups(dir)?;
    let old = found.len().saturating_sub(keep.max(1));
    let mut removed = Vec::new();
    for (_, name) in &found[..old] {
        let path = dir.join(name);
        if just_written.is_some_and(|written| written.file_name() == Some(std::ffi::OsStr::new(name))) {
            continue;
        }
        std::fs::remove_dir_all(&path).map_err(|e| format!("cannot remove the old backup {}: {e}", path.shown()))?;
        removed.push(path);
    }
    Ok(removed)
}

/// Runs `stale` with its backup in `dir` (`--backups-in`; `on_host`: the
/// same directory as the node names it), says how to undo it, then prunes
/// there to the newest `keep`, never the backup just written.
pub fn run_in(dir: &Path, on_host: Option<&Path>, keep: Option<usize>, options: &mut Options) -> i32 {
    if options.remove {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        match next_backup(dir, now) {
            Ok(next) => options.backup_dir = Some(next),
            Err(problem) => {
                say(&format!("stale: {problem}"));
                return EXIT_STALE;
            }
        }
    }
    let mut status = super::run(options);
    let node = NodePaths { inside: dir, on_host };
    for line in options
        .backup_dir
        .as_deref()
        .map(|backup| node.undo_lines(backup))
        .unwrap_or_default()
    {
        say(&format!("stale: {line}"));
    }
    if let Some(keep) = keep {
        match prune(dir, keep, options.backup_dir.as_deref()) {
            Ok(removed) => {
                for old in removed {
                    let shown = node
                        .shown(&old)
                        .map_or(String::new(), |path| format!(" (on the node: {path})"));
                    say(&format!("stale: removed the old backup {}{shown}", old.shown()));
                }
            }
            Err(problem) => {
                say(&format!("stale: {problem}"));
                status = status.max(EXIT_STALE);
            }
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::{next_backup, prune, rank};

    #[test]
    fn the_backup_just_written_is_never_pruned() {
        let dir = std::env::temp_dir().join(format!("iptw-rotation-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for name in [
            "stale-backup-000001-20261202T120000Z",
            "stale-backup-000002-20261202T120000Z",
        ] {
            std::fs::create_dir_all(dir.join(name)).unwrap();
        }
        let written = dir.join("stale-backup-000001-20261202T120000Z");
        assert_eq!(prune(&dir, 1, Some(&written)), Ok(vec![]));
        assert!(written.exists());
        assert_eq!(prune(&dir, 1, None), Ok(vec![written]));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_number_after_the_largest() {
        let dir = std::env::temp_dir().join(format!("iptw-rotation-wrap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for highest in ["18446744073709551615", "99999999999999999999999"] {
            let name = format!("stale-backup-{highest}-20261202T120000Z");
            std::fs::create_dir_all(dir.join(&name)).unwrap();
            let err = next_backup(&dir, 0).unwrap_err();
            assert!(err.contains(&name) && err.contains("no next one"), "{err}");
            std::fs::remove_dir_all(dir.join(&name)).unwrap();
        }
        std::fs::create_dir_all(dir.join("stale-backup-18446744073709551614-20261202T120000Z")).unwrap();
        let next = next_backup(&dir, 0).unwrap();
        assert!(
            next.ends_with("stale-backup-18446744073709551615-19700101T000000Z"),
            "{next:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_sequence_past_six_digits_is_still_the_newest() {
        assert!(
            super::rank("stale-backup-1000000-20261202T120000Z") > super::rank("stale-backup-999999-20261202T120000Z")
        );
        assert_eq!(super::rank("stale-backup-20261202T120000Z").map(|r| r.0), Some(0));
    }

    #[test]
    fn the_sequence_orders_not_the_time() {
        let mut names = vec![
            "stale-backup-000010-20000101T000000Z",
            "stale-backup-000009-20261202T120000Z",
            "stale-backup-20261202T120000Z",
            "stale-backup-000011-19990101T000000Z",
        ];
        names.sort_by_key(|name| rank(name));
        assert_eq!(
            names,
            [
                "stale-backup-20261202T120000Z",
                "stale-backup-000009-20261202T120000Z",
                "stale-backup-000010-20000101T000000Z",
                "stale-backup-000011-19990101T000000Z",
            ]
        );
        assert_eq!(rank("other"), None);
    }
}
