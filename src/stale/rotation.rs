//! The stale rules' backups kept in one directory (`stale --backups-in
//! DIR`): the name of the next one, and the pruning to the newest N
//! (`--keep-backups N`).
//!
//! A backup is named `stale-backup-<sequence>-<UTC time>`, its sequence
//! number one more than the highest in the directory. The newest is the
//! highest number, never the latest time: a clock stepped back (a node
//! without a clock battery, before NTP) cannot make the backup just written
//! look older than the others and be pruned. The time is for the reader.
//! Older `stale-backup-*` directories without a number come before every
//! numbered one, in the order of their names.

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
    let sequence = if numbered { digits.parse().unwrap_or(0) } else { 0 };
    Some((sequence, name.to_string()))
}

/// The backup directories in `dir` (not symlinks), oldest first. A
/// missing `dir` holds none.
fn backups(dir: &Path) -> Result<Vec<(u64, String)>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot list {}: {e}", dir.display())),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        let is_dir = entry.file_type().map(|kind| kind.is_dir()).unwrap_or(false);
        if let (true, Some(name)) = (is_dir, entry.file_name().to_str()) {
            found.extend(rank(name));
        }
    }
    found.sort();
    Ok(found)
}

/// The path of the next backup in `dir`, stamped with `now` (Unix time).
pub fn next_backup(dir: &Path, now: u64) -> Result<PathBuf, String> {
    let sequence = backups(dir)?.last().map_or(0, |(sequence, _)| *sequence) + 1;
    let stamp: String = utc_time(now).chars().filter(|c| *c != '-' && *c != ':').collect();
    Ok(dir.join(format!("{PREFIX}{sequence:0SEQUENCE_DIGITS$}-{stamp}")))
}

/// Removes all but the newest `keep` (1 or more) backups in `dir`; the
/// paths removed, or why one could not be.
pub fn prune(dir: &Path, keep: usize) -> Result<Vec<PathBuf>, String> {
    let found = backups(dir)?;
    let old = found.len().saturating_sub(keep.max(1));
    let mut removed = Vec::new();
    for (_, name) in &found[..old] {
        let path = dir.join(name);
        std::fs::remove_dir_all(&path).map_err(|e| format!("cannot remove the old backup {}: {e}", path.display()))?;
        removed.push(path);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::rank;

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
