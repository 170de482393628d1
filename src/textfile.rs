//! `iptables-wrapper metrics --textfile PATH --interval D`: the metrics of
//! `detect --format prometheus` kept in a file for node-exporter's textfile
//! collector, rewritten every interval until SIGTERM.
//!
//! Each write goes to a new file beside PATH, made under no name or a
//! random one that no other process can hold, and is renamed over PATH, so
//! a reader sees a whole file, the old or the new. When the wrapper cannot answer (a
//! setting it cannot read or parse) or the file cannot be written, the log
//! says why and PATH is removed: the collector then serves no numbers
//! rather than old ones, and the "no metrics" alert of
//! examples/prometheus-rules.yaml fires. On SIGTERM, SIGINT or SIGHUP
//! (unless ignored, as under nohup) it removes PATH too and exits 0:
//! numbers nobody refreshes are not served. The signal is acted on at once
//! while sleeping and while a run reads or writes, but for one wait: where
//! the kernel refuses netlink and a save tool is run instead, the loop
//! waits for it as `vfork` does (a wait only a fatal signal ends), and the
//! signal is acted on when the save tool has ended.

use crate::escape::printable;
use crate::escape::Shown as _;
use crate::interval::{Stoppable, STOP_SIGNALS};
use crate::metrics;
use crate::standard_fds::say;
use crate::temporary::{self, Placement};
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;
use std::ffi::CString;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

/// Writes PATH every `interval` until asked to end; returns the exit status.
pub fn run(path: &Path, interval: Duration) -> i32 {
    let stop_path = CString::new(path.as_os_str().as_bytes()).expect("a path from the command line has no NUL");
    let _ = ON_STOP.set(OnStop {
        path: stop_path,
        said: format!(": {} removed, exiting\n", path.shown()),
    });
    let stoppable = match Stoppable::block(stop_now) {
        Ok(stoppable) => stoppable,
        Err(problem) => {
            say(&format!("metrics: {problem}"));
            return 1;
        }
    };
    let mut failing = false;
    loop {
        let written = stoppable.working(|| {
            metrics::exposition()
                .map_err(|invalid| invalid.to_string())
                .and_then(|text| write_whole(path, &text))
        });
        match written {
            Ok(()) if failing => {
                say(&format!("metrics: {} written again", path.shown()));
                failing = false;
            }
            Ok(()) => {}
            Err(problem) => {
                // Said on every failed write: one line an interval.
                say(&format!("metrics: {}: {} removed", printable(&problem), path.shown()));
                remove(path);
                failing = true;
            }
        }
        if let Some(signal) = stoppable.sleep(interval) {
            remove(path);
            say(&format!("metrics: {signal}: {} removed, exiting", path.shown()));
            return 0;
        }
    }
}

/// What a stop signal that comes while a run works does: remove PATH and
/// say so, as the loop does between two runs.
struct OnStop {
    path: CString,
    /// The message's end, after `metrics: SIGNAL`.
    said: String,
}

static ON_STOP: OnceLock<OnStop> = OnceLock::new();

/// The stop signals' handler: removes PATH, says so and exits 0, with
/// async-signal-safe calls only (`unlink`, `write`, `_exit`). A file the
/// run was writing under a random name may stay (not a `*.prom` name: the
/// collector does not read it).
extern "C" fn stop_now(signal: libc::c_int) {
    if let Some(on_stop) = ON_STOP.get() {
        let name = STOP_SIGNALS
            .iter()
            .find(|(stop, _)| *stop == signal)
            .map_or("signal", |(_, name)| name);
        // SAFETY: unlink and write only read the buffers given; a failure
        // costs the removal or the message, as in the loop.
        unsafe {
            libc::unlink(on_stop.path.as_ptr());
            for part in ["iptables-wrapper: metrics: ", name, on_stop.said.as_str()] {
                libc::write(2, part.as_ptr().cast(), part.len());
            }
        }
    }
    // SAFETY: _exit ends the process without running anything else.
    unsafe { libc::_exit(0) }
}

/// Writes `text` to a new file beside `path` (mode 0644, less the umask),
/// under no name or a random one ([`temporary`]): not a `*.prom` name,
/// which the collector would read, and nothing already there is opened, so
/// neither a link nor a FIFO planted beside PATH can redirect or block the
/// write. Then renames it over `path`.
fn write_whole(path: &Path, text: &str) -> Result<(), String> {
    let (Some(name), parent) = (path.file_name(), path.parent()) else {
        return Err(format!("{} names no file", path.shown()));
    };
    let parent = match parent {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let raw = openat(None, parent, flags, Mode::empty()).map_err(|e| format!("cannot open {}: {e}", parent.shown()))?;
    // SAFETY: openat returned a new descriptor that nothing else owns.
    let dir = unsafe { OwnedFd::from_raw_fd(raw) };
    let mode = Mode::from_bits_truncate(0o644);
    temporary::write_file(dir.as_fd(), name, text.as_bytes(), mode, Placement::Replace, false)
        .map_err(|e| format!("cannot write {}: {e}", path.shown()))
}

/// Removes PATH; a file already gone is fine.
fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            say(&format!("metrics: cannot remove {}: {e}", path.shown()));
        }
    }
}
