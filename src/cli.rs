//! The wrapper's own command line, used when it is invoked under a name that
//! is not one of the six iptables commands (normally `iptables-wrapper`).
//! A usage error is one line naming what was wrong, then "see --help".

use crate::command::WrappedCommand;
use crate::decision::{self, Depth};
use crate::install::{self, LinkOutcome};
use crate::own_file;
use crate::report::{self, printable};
use crate::stale;
use crate::standard_fds::say;
use std::ffi::CStr;
use std::io::Write;
use std::path::PathBuf;

const USAGE: &str = "\
usage: iptables-wrapper detect [--json] [--for COMMAND]
       iptables-wrapper install [--dir DIR] [--force]
       iptables-wrapper stale [--json] [-v] | stale --remove [--backup-dir DIR] [--json]
       iptables-wrapper --version | --help

Invoked as iptables, iptables-save, iptables-restore, ip6tables, ip6tables-save
or ip6tables-restore, it decides on every call whether this host uses
iptables-nft or iptables-legacy and execs that backend.

  detect     print the mode (first line: nft or legacy), the source that
             decided and every piece of evidence read; --json for one JSON
             object; --for one of the six command names (default iptables)
  install    link the six command names to this wrapper in DIR (default: the
             wrapper's directory); --force replaces regular files, never
             the wrapper's own file; a failure midway puts every name back
  stale      show what the backend the host does not use still holds (rules,
             user chains, DROP policies) per family, table and chain; -v adds
             the rules in iptables-save form; exit 0 nothing stale, 1 stale,
             2 refused (the host's backend is not certain: only the override,
             the host link or a hint chain in one backend alone are)
             --remove: save that backend's rules into --backup-dir DIR
             (default: a new directory in the runtime directory), then
             empty each stale table; exit 0 when nothing stale remains

Environment:
  IPTABLES_MODE               nft, legacy or auto (default): overrides detection
  IPTABLES_WRAPPER_HOST_ROOT  where the host's filesystem is mounted (/host)
  IPTABLES_WRAPPER_SBIN       directories to find the backends in (absolute
                              paths; others are ignored)
  IPTABLES_WRAPPER_LOG        log to stderr at this level: off, error, warn, info,
                              debug (shows each decision) or trace; unset, a
                              wrapped call prints nothing of its own except
                              errors (and warnings when stderr is a terminal)
  IPTABLES_WRAPPER_RUN_DIR    runtime directory (/run/iptables-wrapper); its file
                              `warnings` records the warnings of wrapped calls
  XTABLES_LOCKFILE            the xtables lock file (/run/xtables.lock)";

/// Runs the command line (`args` after argv[0]); returns the exit status.
pub fn run(args: &[&CStr]) -> i32 {
    let args: Vec<String> = match args.iter().map(|arg| arg.to_str().map(str::to_string)).collect() {
        Ok(args) => args,
        Err(_) => return usage_error("an argument is not valid UTF-8"),
    };
    let mut args = args.iter().map(String::as_str);
    match args.next() {
        Some("detect") => detect(args),
        Some("install") => run_install(args),
        Some("stale") => run_stale(args),
        Some("--version" | "-V" | "version") => {
            println!(
                "iptables-wrapper {} commit {} target {}",
                env!("CARGO_PKG_VERSION"),
                env!("IPTW_GIT_COMMIT"),
                env!("IPTW_BUILD_TARGET")
            );
            0
        }
        Some("--help" | "-h" | "help") => print_out(&format!("{USAGE}\n")),
        Some(other) => usage_error(&format!("unknown command or option {:?}", printable(other))),
        None => usage_error("a command is required (detect or install)"),
    }
}

fn usage_error(problem: &str) -> i32 {
    say(&format!("{problem}; see iptables-wrapper --help"));
    2
}

/// Writes `text` to stdout; a failure (a full disk) is an error, not a crash.
fn print_out(text: &str) -> i32 {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Ok(()) => 0,
        Err(e) => {
            say(&format!("cannot write to stdout: {e}"));
            1
        }
    }
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
            other => return usage_error(&format!("unknown detect option {:?}", printable(other))),
        }
    }
    let decision = match decision::decide(&command, Depth::Everything) {
        Ok(decision) => decision,
        Err(invalid) => {
            say(&printable(&invalid.to_string()));
            return 2;
        }
    };
    if json {
        print_out(&format!("{}\n", report::json(&decision)))
    } else {
        print_out(&report::text(&decision))
    }
}

fn run_stale<'a>(mut args: impl Iterator<Item = &'a str>) -> i32 {
    let mut options = stale::Options::default();
    while let Some(arg) = args.next() {
        match arg {
            "--json" => options.json = true,
            "-v" | "--verbose" => options.verbose = true,
            "--remove" => options.remove = true,
            "--backup-dir" => match args.next() {
                Some("") | None => return usage_error("--backup-dir needs a directory"),
                Some(value) => options.backup_dir = Some(PathBuf::from(value)),
            },
            other => return usage_error(&format!("unknown stale option {:?}", printable(other))),
        }
    }
    if options.backup_dir.is_some() && !options.remove {
        return usage_error("--backup-dir goes with --remove");
    }
    stale::run(&options)
}

fn run_install<'a>(mut args: impl Iterator<Item = &'a str>) -> i32 {
    let mut dir = None;
    let mut force = false;
    while let Some(arg) = args.next() {
        match arg {
            "--force" => force = true,
            "--dir" => match args.next() {
                Some("") => return usage_error("--dir needs a directory, not an empty string"),
                Some(value) => dir = Some(PathBuf::from(value)),
                None => return usage_error("--dir needs a directory"),
            },
            other => return usage_error(&format!("unknown install option {:?}", printable(other))),
        }
    }
    let Some(wrapper) = own_file::resolved_path() else {
        say(&format!(
            "install: cannot find the wrapper's own file (neither {} nor the path it was run by resolves)",
            own_file::PROC_SELF_EXE
        ));
        return 1;
    };
    let dir = dir.unwrap_or_else(|| wrapper.parent().expect("an absolute path has a parent").to_path_buf());
    match install::install(&dir, &wrapper, force) {
        Ok(outcomes) => {
            let mut out = String::new();
            for (path, outcome) in outcomes {
                let done = match outcome {
                    LinkOutcome::Created => "created",
                    LinkOutcome::Replaced => "replaced",
                    LinkOutcome::AlreadyInPlace => "already in place",
                };
                out.push_str(&format!("{done}: {} -> {}\n", path.display(), wrapper.display()));
            }
            print_out(&out)
        }
        Err(e) => {
            say(&format!("install: {}", printable(&e.to_string())));
            e.exit_status()
        }
    }
}
