//! The fallback when the kernel refuses a direct query (no CAP_NET_ADMIN,
//! seccomp, an old kernel): run the backend's own save tool and read its
//! output line by line. `*-save` without `-t` only lists existing tables, so
//! this creates nothing either.
//!
//! Whatever the caller did with SIGCHLD, which the wrapper inherits and must
//! leave as it is for the backend: set to ignored, it would have the kernel
//! reap the save tool before the wrapper waits for it (`No child process`);
//! blocked, the save tool's end would leave a SIGCHLD pending for the
//! backend. So the save tool is started, read and waited for by a helper
//! process of the wrapper's (sharing its memory, while the wrapper waits,
//! as `vfork` does) whose own SIGCHLD is at its default. The helper never
//! execs and ends with exit signal 0, so its end raises no signal either:
//! the wrapper's disposition, mask and pending signals are never touched.
//! Only a stop of the helper (job control) still sends the wrapper a
//! SIGCHLD, as any child's stop does. Where the helper cannot be started
//! (qemu-user refuses `CLONE_VM` without `CLONE_THREAD`), the save tool is
//! the wrapper's own child, as before: right unless SIGCHLD is ignored.

use crate::backend;
use crate::command::WrappedCommand;
use crate::escape::Shown as _;
use crate::family::Family;
use crate::kernel::HINT_CHAINS;
use crate::mode::Mode;
use crate::save_text;
use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};

/// What one save tool printed, reduced to what the decision needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SavedRules {
    /// Hint chains declared in the mangle table.
    pub hint_chains: Vec<&'static str>,
    /// `-A` lines.
    pub rules: u64,
}

/// Runs `<family>-save` of `mode` and summarises its output.
pub fn read(mode: Mode, family: Family) -> Result<SavedRules, String> {
    let command = WrappedCommand::save_tool(family);
    let tool = backend::locate(&command, mode).map_err(|e| e.to_string())?;
    in_helper(|| {
        let mut child = Command::new(&tool.path)
            .arg0(command.name)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", tool.path.shown()))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let summary = summarise(BufReader::new(stdout));
        let status = child.wait().map_err(|e| e.to_string())?;
        match summary {
            Ok(summary) if status.success() => Ok(summary),
            Ok(_) => Err(format!("{} {}", tool.path.shown(), status)),
            Err(e) => Err(format!("reading {}: {e}", tool.path.shown())),
        }
    })?
}

/// The helper's stack: untouched pages of it cost nothing (zero-filled, not
/// in the file), and it is far larger than the save tool's reading needs (no
/// recursion). After `.bss`, as the allocator's arena (see `allocator`;
/// where lld links, as there).
#[repr(align(16))]
struct HelperStack(UnsafeCell<[u8; HELPER_STACK_BYTES]>);
const HELPER_STACK_BYTES: usize = 512 * 1024;
// SAFETY: used by one helper at a time, while the only thread waits.
unsafe impl Sync for HelperStack {}
#[cfg_attr(target_env = "musl", link_section = ".sbss.helper_stack")]
static HELPER_STACK: HelperStack = HelperStack(UnsafeCell::new([0; HELPER_STACK_BYTES]));

/// Runs `task` in a helper process: it shares the wrapper's memory, has a
/// copy of its descriptor table, its own signal dispositions (SIGCHLD at its
/// default) and mask, and the wrapper waits until it has ended (`CLONE_VM |
/// CLONE_VFORK`, as `vfork`), then reaps it (exit signal 0: no SIGCHLD, and
/// no reaping by the kernel).
fn in_helper<T, F: FnOnce() -> T>(task: F) -> Result<T, String> {
    struct Job<F, T> {
        task: Option<F>,
        result: Option<T>,
    }
    extern "C" fn helper<F: FnOnce() -> T, T>(job: *mut c_void) -> c_int {
        // SAFETY: `in_helper` passes its live Job and waits until this ends.
        let job = unsafe { &mut *job.cast::<Job<F, T>>() };
        // SAFETY: changes this helper's own copy of the disposition only.
        unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
        job.result = job.task.take().map(|task| task());
        0
    }
    let mut job = Job {
        task: Some(task),
        result: None,
    };
    let stack_top = HELPER_STACK.0.get() as usize + HELPER_STACK_BYTES;
    // SAFETY: the helper runs on its own stack, unused by anyone else, with
    // `job`, which outlives it: with CLONE_VFORK, clone returns once the
    // helper has ended, and this thread is the only one.
    let pid = unsafe {
        libc::clone(
            helper::<F, T>,
            stack_top as *mut c_void,
            libc::CLONE_VM | libc::CLONE_VFORK,
            std::ptr::addr_of_mut!(job).cast(),
        )
    };
    if pid < 0 {
        let error = std::io::Error::last_os_error();
        // qemu-user emulates CLONE_VM only as a thread (EINVAL otherwise):
        // run the task here, as a plain child of the wrapper's. It works
        // unless the caller ignores SIGCHLD.
        if error.raw_os_error() == Some(libc::EINVAL) {
            log::debug!("cannot start a helper process ({error}): the save tool runs as the wrapper's own child");
            return Ok(job.task.take().expect("the helper never ran")());
        }
        return Err(format!("cannot start a helper process: {error}"));
    }
    let mut status = 0;
    // SAFETY: waits for this process's own child, writing a live integer.
    while unsafe { libc::waitpid(pid, &mut status, libc::__WALL) } < 0 {
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("waiting for the helper process: {error}"));
        }
    }
    job.result
        .ok_or_else(|| format!("the helper process ended early ({})", ExitStatus::from_raw(status)))
}

/// Counts `-A` lines and spots hint chains in `*mangle`, streaming. Lines
/// are bytes, not text: a rule comment in any encoding (say Latin-1 `0xE9`)
/// is just counted.
fn summarise(mut output: impl BufRead) -> std::io::Result<SavedRules> {
    let mut summary = SavedRules::default();
    let mut in_mangle = false;
    let mut line = Vec::new();
    loop {
        line.clear();
        if output.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        match save_text::line(&line) {
            save_text::Line::Table(table) => in_mangle = table == b"mangle",
            save_text::Line::Rule { .. } => summary.rules += 1,
            save_text::Line::Chain { name, .. } if in_mangle => {
                if let Some(hint) = HINT_CHAINS.iter().find(|h| h.as_bytes() == name) {
                    summary.hint_chains.push(hint);
                }
            }
            _ => {}
        }
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarises_a_save() {
        let save = "# Generated\n*mangle\n:PREROUTING ACCEPT [0:0]\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n*filter\n:KUBE-KUBELET-CANARY - [0:0]\n-A INPUT -j ACCEPT\n-A FORWARD -m comment --comment \"-A x\" -j DROP\nCOMMIT\n";
        let summary = summarise(save.as_bytes()).unwrap();
        assert_eq!(
            summary,
            SavedRules {
                hint_chains: vec!["KUBE-IPTABLES-HINT"],
                rules: 2
            }
        );
    }

    #[test]
    fn bytes_that_are_not_utf8_are_counted() {
        let save = b"*mangle\n:KUBE-PROXY-CANARY - [0:0]\n-A INPUT -m comment --comment caf\xe9 -j ACCEPT\nCOMMIT\n";
        let summary = summarise(&save[..]).unwrap();
        assert_eq!(summary.rules, 1);
        assert_eq!(summary.hint_chains, vec!["KUBE-PROXY-CANARY"]);
    }
}
