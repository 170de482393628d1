//! A stand-in backend for tests/shim.rs, compiled by the test with rustc.
//! It starts from the C entry point, so nothing runs before it looks at what
//! it inherited (Rust's usual start-up would change the very things tested).
//!
//!   stub report FILE   writes its argv, descriptor table, signal state
//!                      (pending signals too), process name, umask,
//!                      working directory, limits and environment
//!   stub flood         writes lines to stdout until stopped (exit 3 if a
//!                      write fails instead of the process being killed)
#![no_main]

use std::ffi::{c_char, c_int, CStr};
use std::fmt::Write as _;
use std::io::Write as _;

extern "C" {
    fn fcntl(fd: c_int, cmd: c_int, ...) -> c_int;
}
const F_GETFD: c_int = 1;
const F_GETFL: c_int = 3;

#[no_mangle]
pub unsafe extern "C" fn main(argc: c_int, argv: *const *const c_char, _envp: *const *const c_char) -> c_int {
    let args: Vec<String> = (0..argc as usize)
        .map(|i| CStr::from_ptr(*argv.add(i)).to_string_lossy().into_owned())
        .collect();
    match args.get(1).map(String::as_str) {
        Some("report") => report(&args),
        Some("flood") => loop {
            if std::io::stdout().write_all(b"-A INPUT -j ACCEPT\n").is_err() {
                return 3;
            }
        },
        _ => 64,
    }
}

unsafe fn report(args: &[String]) -> c_int {
    let mut out = String::new();
    // Descriptors first: reading files below takes the lowest free numbers.
    for fd in 0..256 {
        let fd_flags = fcntl(fd, F_GETFD);
        if fd_flags == -1 {
            continue;
        }
        let target = std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .map_or("?".into(), |t| t.display().to_string());
        let _ = writeln!(out, "fd {fd} -> {target} fd_flags={fd_flags} status_flags={:o}", fcntl(fd, F_GETFL));
    }
    let _ = writeln!(out, "argv {args:?}");
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for line in status.lines() {
        let kept = ["SigPnd", "ShdPnd", "SigIgn", "SigBlk", "SigCgt", "Umask", "NoNewPrivs"];
        if kept.iter().any(|k| line.starts_with(k)) {
            let _ = writeln!(out, "{line}");
        }
    }
    // The process name the kernel gave at exec (from the file name run).
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
    let _ = writeln!(out, "comm {}", comm.trim_end());
    let _ = writeln!(out, "cwd {:?}", std::env::current_dir().ok());
    let _ = writeln!(
        out,
        "{}",
        std::fs::read_to_string("/proc/self/limits").unwrap_or_default()
    );
    for (name, value) in std::env::vars_os() {
        let _ = writeln!(out, "env {name:?}={value:?}");
    }
    match std::fs::write(&args[2], out) {
        Ok(()) => 0,
        Err(_) => 65,
    }
}
