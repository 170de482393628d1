//! `iptables-wrapper metrics --textfile PATH --interval D`: the metrics of
//! `detect --format prometheus` kept in a file for node-exporter's textfile
//! collector, rewritten every interval until SIGTERM.
//!
//! Each write goes to `PATH.tmp` and is renamed over PATH, so a reader sees
//! a whole file, the old or the new. When the wrapper cannot answer (a
//! setting it cannot read or parse) or the file cannot be written, the log
//! says why and PATH is removed: the collector then serves no numbers
//! rather than old ones, and the "no metrics" alert of
//! examples/prometheus-rules.yaml fires. On SIGTERM or SIGINT it removes
//! PATH too and exits 0: numbers nobody refreshes are not served.

use crate::escape::printable;
use crate::interval::Stoppable;
use crate::metrics;
use crate::standard_fds::say;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Writes PATH every `interval` until asked to end; returns the exit status.
pub fn run(path: &Path, interval: Duration) -> i32 {
    let stoppable = match Stoppable::block() {
        Ok(stoppable) => stoppable,
        Err(problem) => {
            say(&format!("metrics: {problem}"));
            return 1;
        }
    };
    let temporary = temporary_path(path);
    let mut failing = false;
    loop {
        let written = metrics::exposition()
            .map_err(|invalid| invalid.to_string())
            .and_then(|text| write_whole(path, &temporary, &text));
        match written {
            Ok(()) if failing => {
                say(&format!("metrics: {} written again", path.display()));
                failing = false;
            }
            Ok(()) => {}
            Err(problem) => {
                // Said on every failed write: one line an interval.
                say(&format!("metrics: {}: {} removed", printable(&problem), path.display()));
                remove(path, &temporary);
                failing = true;
            }
        }
        if let Some(signal) = stoppable.sleep(interval) {
            remove(path, &temporary);
            say(&format!("metrics: {signal}: {} removed, exiting", path.display()));
            return 0;
        }
    }
}

/// `PATH.tmp`: beside PATH (a rename stays in one file system), and not a
/// `*.prom` name, which the collector would read.
fn temporary_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".tmp");
    PathBuf::from(name)
}

/// Writes `text` to `temporary` (mode 0644, never through a symlink), then
/// renames it over `path`.
fn write_whole(path: &Path, temporary: &Path, text: &str) -> Result<(), String> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(temporary)
        .map_err(|e| format!("cannot write {}: {e}", temporary.display()))?;
    file.write_all(text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", temporary.display()))?;
    drop(file);
    std::fs::rename(temporary, path)
        .map_err(|e| format!("cannot rename {} to {}: {e}", temporary.display(), path.display()))
}

/// Removes PATH and its temporary file; a file already gone is fine.
fn remove(path: &Path, temporary: &Path) {
    for file in [temporary, path] {
        if let Err(e) = std::fs::remove_file(file) {
            if e.kind() != std::io::ErrorKind::NotFound {
                say(&format!("metrics: cannot remove {}: {e}", file.display()));
            }
        }
    }
}
