//! The wrapper's own command line, used when it is invoked under a name that
//! is not one of the six iptables commands (normally `iptables-wrapper`).

use crate::backend::SELF_EXE;
use crate::command::WrappedCommand;
use crate::decision::{self, Depth};
use crate::install::{self, LinkOutcome};
use crate::report;
use std::ffi::OsString;
use std::path::PathBuf;

const USAGE: &str = "\
usage: iptables-wrapper detect [--json] [--for COMMAND]
       iptables-wrapper install [--dir DIR] [--force]
       iptables-wrapper --version | --help

Invoked as iptables, iptables-save, iptables-restore, ip6tables, ip6tables-save
or ip6tables-restore, it decides on every call whether this host uses
iptables-nft or iptables-legacy and execs that backend.

  detect     print the mode (first line: nft or legacy), the source that
             decided and every piece of evidence read; --json for one JSON
             object; --for one of the six command names (default iptables)
  install    link the six command names to this wrapper in DIR (default: the
             wrapper's directory); --force replaces regular files

Environment:
  IPTABLES_MODE               nft, legacy or auto (default): overrides detection
  IPTABLES_WRAPPER_HOST_ROOT  where the host's filesystem is mounted (/host)
  IPTABLES_WRAPPER_SBIN       directories to find the backends in
  IPTABLES_WRAPPER_LOG        log level on stderr: off, error, warn (default), info,
                              debug (shows each decision) or trace
  XTABLES_LOCKFILE            the xtables lock file (/run/xtables.lock)";

/// Runs the command line; returns the exit status.
pub fn run(args: Vec<OsString>) -> i32 {
    let args: Vec<String> = match args.into_iter().map(OsString::into_string).collect() {
        Ok(args) => args,
        Err(arg) => return usage_error(&format!("argument is not valid UTF-8: {arg:?}")),
    };
    let mut args = args.iter().map(String::as_str);
    match args.next() {
        Some("detect") => detect(args),
        Some("install") => run_install(args),
        Some("--version" | "-V" | "version") => {
            println!(
                "iptables-wrapper {} commit {} target {}",
                env!("CARGO_PKG_VERSION"),
                env!("IPTW_GIT_COMMIT"),
                env!("IPTW_BUILD_TARGET")
            );
            0
        }
        Some("--help" | "-h" | "help") => {
            println!("{USAGE}");
            0
        }
        Some(other) => usage_error(&format!("unknown command or option {other:?}")),
        None => usage_error("a command is required"),
    }
}

fn usage_error(problem: &str) -> i32 {
    eprintln!("iptables-wrapper: {problem}\n{USAGE}");
    2
}

fn detect<'a>(mut args: impl Iterator<Item = &'a str>) -> i32 {
    let mut json = false;
    let mut command = WrappedCommand::from_name("iptables").expect("a known name");
    while let Some(arg) = args.next() {
        match arg {
            "--json" => json = true,
            "--for" => match args.next().and_then(WrappedCommand::from_name) {
                Some(named) => command = named,
                None => return usage_error("--for needs one of: iptables, iptables-save, iptables-restore, ip6tables, ip6tables-save, ip6tables-restore"),
            },
            other => return usage_error(&format!("unknown detect option {other:?}")),
        }
    }
    let decision = match decision::decide(&command, Depth::Everything) {
        Ok(decision) => decision,
        Err(invalid) => {
            eprintln!("iptables-wrapper: {invalid}");
            return 2;
        }
    };
    if json {
        println!("{}", report::json(&decision));
    } else {
        print!("{}", report::text(&decision));
    }
    0
}

fn run_install<'a>(mut args: impl Iterator<Item = &'a str>) -> i32 {
    let mut dir = None;
    let mut force = false;
    while let Some(arg) = args.next() {
        match arg {
            "--force" => force = true,
            "--dir" => match args.next() {
                Some(value) => dir = Some(PathBuf::from(value)),
                None => return usage_error("--dir needs a directory"),
            },
            other => return usage_error(&format!("unknown install option {other:?}")),
        }
    }
    let wrapper = match std::fs::read_link(SELF_EXE) {
        Ok(path) => path,
        Err(e) => {
            eprintln!("iptables-wrapper: cannot find the wrapper's own path ({SELF_EXE}): {e}");
            return 1;
        }
    };
    let dir = dir.unwrap_or_else(|| wrapper.parent().expect("an absolute path has a parent").to_path_buf());
    match install::install(&dir, &wrapper, force) {
        Ok(outcomes) => {
            for (path, outcome) in outcomes {
                let done = match outcome {
                    LinkOutcome::Created => "created",
                    LinkOutcome::Replaced => "replaced",
                    LinkOutcome::AlreadyInPlace => "already in place",
                };
                println!("{done}: {} -> {}", path.display(), wrapper.display());
            }
            0
        }
        Err(e) => {
            eprintln!("iptables-wrapper: install: {e}");
            1
        }
    }
}
