//! The warnings record: where a wrapped call's warnings go when nobody asked
//! to see them on stderr.
//!
//! A caller that reads anything on stderr as a failure (Docker's engine,
//! kube-proxy parsing `iptables-restore` errors) must see only the backend's
//! output, yet an operator must be able to find disagreements and stale
//! legacy rules. So every warning is kept in the file `warnings` of the
//! runtime directory (`/run/iptables-wrapper/warnings` by default): one line
//! per distinct warning, the UTC time it was last seen first, most recent
//! first, with control characters escaped.
//!
//! Some warnings need reads of their own, which the decision does not make
//! (stale legacy tables under an nft host link: two procfs files, about
//! 30 us a call; whether the kernel has the backend the override or the link
//! picked). A call makes them only when its warnings will be seen: on stderr,
//! or here when the record is [`due`], that is missing or last written a
//! minute ago. So on a busy node one call a minute looks, and the others
//! pay one `fstatat` (of the record's path: the directory is opened only
//! when the record is not fresh); calls whose warnings nobody would see (no usable
//! runtime directory, or one this process cannot write in, and stderr not
//! showing them) never look. A warning may
//! therefore reach the record up to a minute after its cause appears.
//!
//! Writes are bounded: a call that looked rewrites the record when it is a
//! minute old (the times are refreshed, and the file's age says when a call
//! last looked, even with no warning at all) or when it has a warning the
//! record lacks, unless the record was written less than a second ago. The
//! record keeps at most 32 warnings, each cut at 1 KiB, so it stays under
//! 40 KiB. Calls that did not look never touch it; a call that looked reads
//! it (one small file) and rewrites it by a rename. When the runtime
//! directory is unusable, or not writable (a read-only mount, mode 0500 for a
//! user other than root: one `faccessat2`, asked only of a record that is
//! due), the record is simply not kept. Lines read back from an earlier
//! record, which anyone with the user's rights could have written, are held
//! to these rules again (see `carried`).
//!
//! Not syslog: on a node every container has its own `/dev/log` or none,
//! the host's journal would need a socket round trip per call, and the
//! record must not grow with the call rate.

use crate::escape::printable;
use crate::escape::Shown as _;
use crate::run_dir::{self, RunDir};
use std::borrow::Cow;

/// The record's file name in the runtime directory.
pub const FILE_NAME: &str = "warnings";
/// Rewrite a record of the same warnings at most this often (seconds).
pub const REFRESH_SECONDS: u64 = 60;
/// Never rewrite the record more often than this (seconds).
pub const MIN_REWRITE_SECONDS: u64 = 1;
/// Warnings kept; the least recently seen are dropped first.
pub const MAX_WARNINGS: usize = 32;
/// A warning's text is cut at this many bytes.
pub const MAX_WARNING_BYTES: usize = 1024;

const MAX_FILE_BYTES: usize = 64 * 1024;
const HEADER: &str = "# iptables-wrapper warnings, most recently seen first (UTC); written at unix time ";

/// Whether a call should look for every warning for the record's sake:
/// the record can be kept here (a directory this process can write in,
/// and a clock to date it), and it is missing or was last written
/// [`REFRESH_SECONDS`] ago (or in the future: a clock set back). Whether
/// the directory is writable is asked only of a record that is due, so a
/// call that finds a fresh record pays nothing for it.
pub fn due() -> bool {
    let now = unix_now();
    let fresh = |written: i64, now: u64| (0..REFRESH_SECONDS as i64).contains(&(now as i64 - written));
    // The usual case, a record written within the minute: one `fstatat` of
    // its path, and the directory is not opened. Not due, which is also the
    // answer for a directory that cannot be used; any other finding is
    // looked at through the directory, checked.
    if let (Some(written), Some(now)) = (run_dir::modified_by_path(FILE_NAME), now) {
        if fresh(written, now) {
            return false;
        }
    }
    let Some(dir) = RunDir::open_or_create() else {
        return false;
    };
    let stale = match (dir.modified(FILE_NAME), now) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(written), Some(now)) => !fresh(written, now),
    };
    stale && dir.writable()
}

/// Records the `warnings` (unescaped texts) of a call that looked for every
/// warning, bounded as the module says.
pub fn record(warnings: &[String]) {
    let (Some(dir), Some(now)) = (RunDir::open_or_create(), unix_now()) else {
        return;
    };
    if !dir.writable() {
        return;
    }
    let previous = dir.read(FILE_NAME, MAX_FILE_BYTES).unwrap_or_default();
    let previous = String::from_utf8_lossy(&previous);
    // The file's own time, as `due` reads it (the header repeats it for people).
    let written_at = dir.modified(FILE_NAME).and_then(|at| u64::try_from(at).ok());
    let current: Vec<String> = warnings.iter().map(|w| one_line(w)).collect();
    let Some(contents) = updated(&previous, written_at, &current, now) else {
        return;
    };
    if let Err(e) = dir.replace(FILE_NAME, contents.as_bytes()) {
        log::debug!("warnings record in {} not written: {e}", dir.path().shown());
    }
}

/// The time in Unix seconds, None when no clock answers. Asked of the
/// kernel by a plain system call: the vDSO route costs a call that only
/// checks the record's age two page faults, about 5 us here, more than the
/// syscall. Where the syscall is refused (a seccomp filter), libc's
/// `clock_gettime` answers from the vDSO.
fn unix_now() -> Option<u64> {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: both write one timespec into `now`, which outlives the calls.
    let answered = unsafe {
        libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_REALTIME, &mut now) == 0
            || libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) == 0
    };
    answered.then(|| u64::try_from(now.tv_sec).ok()).flatten()
}

/// The new contents of a record that holds `previous` and was written at
/// `written_at` (Unix seconds), or None when it should be left as it is.
fn updated(previous: &str, written_at: Option<u64>, current: &[String], now: u64) -> Option<String> {
    let mut lines = previous.lines();
    let written_at = written_at.filter(|_| lines.next().is_some_and(|header| header.starts_with(HEADER)));
    // (time last seen, warning) of the record's lines, as this module
    // writes them (see `carried`); a record that needed cleaning is
    // rewritten as soon as one with a new warning would be.
    let mut entries: Vec<(&str, Cow<str>)> = Vec::new();
    let mut clean = true;
    for line in lines {
        match carried(line) {
            Some((seen, warning)) if entries.len() < MAX_WARNINGS && !entries.iter().any(|(_, w)| *w == warning) => {
                clean &= matches!(warning, Cow::Borrowed(_));
                entries.push((seen, warning));
            }
            _ => clean = false,
        }
    }
    let all_recorded = clean && current.iter().all(|w| entries.iter().any(|(_, known)| known == w));
    if let Some(written_at) = written_at.filter(|&at| at <= now) {
        let wait = if all_recorded {
            REFRESH_SECONDS
        } else {
            MIN_REWRITE_SECONDS
        };
        if now - written_at < wait {
            return None;
        }
    }
    let seen_now = utc_time(now);
    let mut out = format!("{HEADER}{now}\n");
    let mut written: Vec<&String> = Vec::new();
    for warning in current {
        if written.len() < MAX_WARNINGS && !written.contains(&warning) {
            out.push_str(&format!("{seen_now} {warning}\n"));
            written.push(warning);
        }
    }
    let earlier = entries.iter().filter(|(_, w)| !current.iter().any(|c| c == w));
    for (seen, warning) in earlier.take(MAX_WARNINGS - written.len()) {
        out.push_str(&format!("{seen} {warning}\n"));
    }
    Some(out)
}

/// A warning as one record line: control characters escaped, cut at
/// `MAX_WARNING_BYTES` on a character boundary.
fn one_line(warning: &str) -> String {
    cut(printable(warning)).into_owned()
}

/// Marks a warning cut at `MAX_WARNING_BYTES`.
const CUT_MARK: &str = " [cut]";

/// `line` cut at `MAX_WARNING_BYTES` on a character boundary, marked.
fn cut(line: Cow<'_, str>) -> Cow<'_, str> {
    if line.len() <= MAX_WARNING_BYTES {
        return line;
    }
    let mut end = MAX_WARNING_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}{CUT_MARK}", &line[..end]))
}

/// A line of an earlier record as (time last seen, warning), made to hold
/// what this module promises of its lines, whoever wrote the file: a time
/// not in the record's own form drops the line; a warning with control
/// characters is escaped, one over the length limit is cut (a line this
/// module wrote is taken as it is: escaping it again would double its
/// backslashes on every rewrite).
fn carried(line: &str) -> Option<(&str, Cow<'_, str>)> {
    let (seen, warning) = line.split_once(' ')?;
    if !is_utc_time(seen) || warning.is_empty() {
        return None;
    }
    let escaped = if warning.chars().any(char::is_control) {
        printable(warning)
    } else {
        Cow::Borrowed(warning)
    };
    let written_cut = escaped.len() <= MAX_WARNING_BYTES + CUT_MARK.len() && escaped.ends_with(CUT_MARK);
    Some((seen, if written_cut { escaped } else { cut(escaped) }))
}

/// Whether `text` has the form of [`utc_time`]'s `2026-11-29T22:40:01Z`.
fn is_utc_time(text: &str) -> bool {
    const FORM: &[u8] = b"0000-00-00T00:00:00Z";
    text.len() == FORM.len()
        && text.bytes().zip(FORM).all(|(byte, &form)| {
            if form == b'0' {
                byte.is_ascii_digit()
            } else {
                byte == form
            }
        })
}

/// `2026-11-29T22:40:01Z` for a Unix time.
pub fn utc_time(unix: u64) -> String {
    let (days, second_of_day) = (unix / 86_400, unix % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times() {
        assert_eq!(utc_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_time(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_time(1_795_992_001), "2026-11-29T22:40:01Z");
        assert_eq!(utc_time(1_798_590_001), "2026-12-30T00:20:01Z");
    }

    #[test]
    fn rewrites_only_when_needed() {
        let a = vec!["a warning".to_string()];
        let first = updated("", None, &a, 1000).expect("a new record is written");
        assert!(first.ends_with(" a warning\n"), "{first}");
        let at = Some(1000);
        assert_eq!(updated(&first, at, &a, 1030), None, "same warnings, fresh record");
        assert!(
            updated(&first, at, &a, 1000 + REFRESH_SECONDS).is_some(),
            "refreshed after a minute"
        );
        let b = vec!["another".to_string()];
        assert_eq!(updated(&first, at, &b, 1000), None, "at most one write a second");
        let both = updated(&first, at, &b, 1001).expect("a new warning is added");
        let lines: Vec<&str> = both.lines().skip(1).collect();
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].ends_with(" another") && lines[1].ends_with(" a warning"),
            "{both}"
        );
        // A clock that went back does not freeze the record.
        assert!(updated(&both, Some(1001), &a, 10).is_some());
        // Nor does a file that is not a record.
        assert!(updated("something else\n", Some(1000), &a, 1001).is_some());
    }

    #[test]
    fn a_look_without_warnings_is_recorded_once_a_minute() {
        let first = updated("", None, &[], 1000).expect("a missing record is written, empty");
        assert_eq!(first.lines().count(), 1, "{first}");
        assert_eq!(updated(&first, Some(1000), &[], 1059), None);
        assert!(updated(&first, Some(1000), &[], 1060).is_some());
        let with = updated(&first, Some(1000), &["w".to_string()], 1010).unwrap();
        let kept = updated(&with, Some(1010), &[], 2000).expect("refreshed");
        assert!(
            kept.lines().nth(1).unwrap().ends_with(" w"),
            "earlier warnings stay: {kept}"
        );
    }

    #[test]
    fn a_warning_repeated_in_one_call_is_written_once() {
        let current: Vec<String> = ["a", "a", "b", "b"].iter().map(|w| w.to_string()).collect();
        let record = updated("", None, &current, 1000).unwrap();
        let lines: Vec<&str> = record.lines().skip(1).collect();
        assert_eq!(lines.len(), 2, "{record}");
    }

    #[test]
    fn an_earlier_record_is_held_to_the_records_promises() {
        let long = "x".repeat(50_000);
        let previous = format!(
            "{HEADER}1000\n2026-11-29T22:40:01Z a\u{1b}[2J forged\r\n2026-11-29T22:40:01Z {long}\nnot a time line\n\
             2026-11-29T22:40:01Z kept \\n as written\n2026-11-29T22:40:01Z kept \\n as written\n"
        );
        // Nothing new to add, but the record needs cleaning: rewritten after a second.
        assert_eq!(updated(&previous, Some(1000), &[], 1000), None);
        let cleaned = updated(&previous, Some(1000), &[], 1001).expect("cleaned");
        let lines: Vec<&str> = cleaned.lines().skip(1).collect();
        assert_eq!(lines.len(), 3, "{cleaned}");
        assert_eq!(lines[0], "2026-11-29T22:40:01Z a\\u{1b}[2J forged");
        assert!(lines[1].len() <= 21 + MAX_WARNING_BYTES + CUT_MARK.len() && lines[1].ends_with(CUT_MARK));
        assert_eq!(
            lines[2], "2026-11-29T22:40:01Z kept \\n as written",
            "not escaped twice"
        );
        assert!(!cleaned.chars().any(|c| c.is_control() && c != '\n'));
        // A clean record stays as it is, and is not rewritten early.
        assert_eq!(updated(&cleaned, Some(1001), &[], 1002), None);
        assert_eq!(
            updated(&cleaned, Some(1001), &[], 1001 + REFRESH_SECONDS)
                .as_deref()
                .map(|r| r.lines().skip(1).collect::<Vec<_>>()),
            Some(lines)
        );
    }

    #[test]
    fn bounded() {
        let mut record = String::new();
        for round in 0..(MAX_WARNINGS as u64 + 5) {
            let warning = vec![format!("warning {round}")];
            let written_at = (round > 0).then(|| 1000 + 2 * (round - 1));
            record = updated(&record, written_at, &warning, 1000 + 2 * round).unwrap();
        }
        assert_eq!(record.lines().count(), MAX_WARNINGS + 1);
        assert!(record
            .lines()
            .nth(1)
            .unwrap()
            .ends_with(&format!("warning {}", MAX_WARNINGS + 4)));
        let long = one_line(&"é".repeat(MAX_WARNING_BYTES));
        assert!(long.len() <= MAX_WARNING_BYTES + 6 && long.ends_with("[cut]"));
        assert_eq!(one_line("a\nb\u{1b}[2J"), "a\\nb\\u{1b}[2J");
    }
}
