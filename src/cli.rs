//! The wrapper's own command line, used when it is invoked under a name that
//! is not one of the six iptables commands (normally `iptables-wrapper`).
//! A usage error is one line naming what was wrong, then "see --help".

use crate::command::{WrappedCommand, COMMAND_NAMES};
use crate::decision::{self, Depth};
use crate::escape::{printable, quoted};
use crate::install::{self, Installed, LinkOutcome};
use crate::metrics;
use crate::own_file;
use crate::report;
use crate::settings;
use crate::stale;
use crate::standard_fds::say;
use std::ffi::CStr;
use std::io::Write;
use std::path::PathBuf;

const USAGE: &str = "\
usage: iptables-wrapper detect [-v] [--json | --format text|json|prometheus] [--for COMMAND]
       iptables-wrapper install [--dir DIR] [--force]
       iptables-wrapper stale [--json] [-v] | stale --remove [--backup-dir DIR] [--json]
                        [--allow-opening] [--despite-contradiction]
       iptables-wrapper COMMAND [ARGS...]
       iptables-wrapper --version | --help

Invoked as iptables, iptables-save, iptables-restore, ip6tables, ip6tables-save
or ip6tables-restore, or given one of them as COMMAND (as xtables-nft-multi
and xtables-legacy-multi are), it decides on every call whether this host uses
iptables-nft or iptables-legacy and execs that backend.

  detect     print the verdict (first word: nft or legacy, then why) and one
             line per warning; -v adds the source that decided, the settings
             and every piece of evidence read and how; --json (--format json)
             for all of it as one JSON object; --for one of the six command
             names (default iptables); --format prometheus: both families'
             state as Prometheus/OpenMetrics text (docs/metrics.md)
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
             empty each stale table; exit 0 when nothing stale remains;
             a table holding a DROP/REJECT rule or non-ACCEPT policy the
             host's backend does not also enforce is left (exit 1) unless
             --allow-opening; a decision other evidence contradicts is
             refused (exit 2), by IPTABLES_MODE removed with
             --despite-contradiction

Settings: environment variables; all but IPTABLES_WRAPPER_LOG and
XTABLES_LOCKFILE also as files in /etc/iptables-wrapper/ named after them,
which reach callers that clear the environment (a variable set and not empty
wins over its file; detect shows where each came from):
  IPTABLES_MODE               nft, legacy or auto (default): overrides detection
  IPTABLES_WRAPPER_HOST_ROOT  where the host's filesystem is mounted (/host;
                              a relative path is ignored)
  IPTABLES_WRAPPER_SBIN       directories to find the backends in (absolute
                              paths; others are ignored)
  IPTABLES_WRAPPER_LOG        log to stderr at this level: off, error, warn, info,
                              debug (shows each decision) or trace; unset, a
                              wrapped call prints nothing of its own except
                              errors (and warnings when stderr is a terminal)
  IPTABLES_WRAPPER_RUN_DIR    runtime directory (/run/iptables-wrapper); its file
                              `warnings` records the warnings of wrapped calls
  XTABLES_LOCKFILE            the xtables lock file (/run/xtables.lock)";

/// Runs the command line (`args` after `argv[0]`); returns the exit status.
pub fn run(args: &[&CStr]) -> i32 {
    let mut utf8_args = Vec::with_capacity(args.len());
    for arg in args {
        match arg.to_str() {
            Ok(arg) => utf8_args.push(arg),
            Err(_) => return usage_error(&format!("argument {} is not valid UTF-8", quoted(arg.to_bytes()))),
        }
    }
    let mut args = utf8_args.into_iter();
    let first = args.next();
    let extra = args.clone().next();
    match (first, extra) {
        (Some("detect"), _) => detect(args),
        (Some("install"), _) => run_install(args),
        (Some("stale"), _) => run_stale(args),
        (Some(option @ ("--version" | "-V" | "version" | "--help" | "-h" | "help")), Some(extra)) => usage_error(
            &format!("{option} takes no arguments, got {}", quoted(extra.as_bytes())),
        ),
        (Some("--version" | "-V" | "version"), None) => print_out(&format!(
            "iptables-wrapper {} commit {} target {}\n",
            env!("CARGO_PKG_VERSION"),
            env!("IPTW_GIT_COMMIT"),
            env!("IPTW_BUILD_TARGET")
        )),
        (Some("--help" | "-h" | "help"), None) => print_out(&format!("{USAGE}\n")),
        (Some(other), _) => usage_error(&format!("unknown command or option {}", quoted(other.as_bytes()))),
        (None, _) => usage_error("a command is required: detect, install, stale or one of the six iptables commands"),
    }
}

/// The options given so far, to refuse one given twice (the second would
/// silently win, or mean nothing). Option values are taken by the option,
/// so only names starting with `-` reach it.
#[derive(Default)]
struct Given<'a>(Vec<&'a str>);

impl<'a> Given<'a> {
    /// Records `option` (`-v` and `--verbose` are one); a usage error's
    /// text if it was given before.
    fn again(&mut self, option: &'a str) -> Option<String> {
        let name = if option == "--verbose" { "-v" } else { option };
        if !name.starts_with('-') {
            return None;
        }
        if self.0.contains(&name) {
            let shown = if name == "-v" { "-v (--verbose)" } else { name };
            return Some(format!("{shown} given twice; give it once"));
        }
        self.0.push(name);
        None
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

/// The forms of the `detect` report.
#[derive(Clone, Copy, PartialEq, Eq)]
enum DetectFormat {
    Text,
    Json,
    Prometheus,
}

fn detect<'a>(mut args: impl Iterator<Item = &'a str>) -> i32 {
    let mut format = None;
    let mut verbose = false;
    let mut command = None;
    let mut given = Given::default();
    while let Some(arg) = args.next() {
        let option = if arg.starts_with("--format=") { "--format" } else { arg };
        if let Some(repeated) = given.again(option) {
            return usage_error(&repeated);
        }
        let (option, chosen) = match arg {
            "-v" | "--verbose" => {
                verbose = true;
                continue;
            }
            "--for" => match args.next() {
                Some(name) => match WrappedCommand::from_name(name) {
                    Some(named) => {
                        command = Some(named);
                        continue;
                    }
                    None => {
                        return usage_error(&format!(
                            "--for {}: not one of {}",
                            quoted(name.as_bytes()),
                            COMMAND_NAMES.join(", ")
                        ))
                    }
                },
                None => return usage_error(&format!("--for needs one of {}", COMMAND_NAMES.join(", "))),
            },
            "--json" => ("--json", Some("json")),
            "--format" => ("--format", args.next()),
            _ if arg.starts_with("--format=") => ("--format", arg.strip_prefix("--format=")),
            other => return usage_error(&format!("unknown detect option {}", quoted(other.as_bytes()))),
        };
        let chosen = match (chosen, chosen.and_then(format_named)) {
            (_, Some(chosen)) => chosen,
            (None, None) => return usage_error("--format needs one of: text, json, prometheus"),
            (Some(value), None) => {
                return usage_error(&format!(
                    "--format needs one of: text, json, prometheus, not {}",
                    quoted(value.as_bytes())
                ))
            }
        };
        if format.is_some() {
            return usage_error(&format!(
                "{option}: a format is already given (by --json or --format); give one"
            ));
        }
        format = Some(chosen);
    }
    let format = format.unwrap_or(DetectFormat::Text);
    if format == DetectFormat::Prometheus {
        if command.is_some() {
            return usage_error(
                "--for goes with the text and JSON reports; --format prometheus covers iptables and ip6tables",
            );
        }
        return match metrics::exposition() {
            Ok(text) => print_out(&text),
            Err(invalid) => {
                say(&invalid.to_string());
                2
            }
        };
    }
    let command = command.unwrap_or_else(|| WrappedCommand::from_name("iptables").expect("a known name"));
    let decision = match decision::decide(&command, Depth::Everything) {
        Ok(decision) => decision,
        Err(invalid) => {
            say(&invalid.to_string());
            return 2;
        }
    };
    let settings = settings::current();
    if format == DetectFormat::Json {
        print_out(&format!("{}\n", report::json(&decision, settings)))
    } else if verbose {
        print_out(&report::verbose_text(&decision, settings))
    } else {
        print_out(&report::text(&decision))
    }
}

/// The format a `--format` value names, if any.
fn format_named(value: &str) -> Option<DetectFormat> {
    match value {
        "text" => Some(DetectFormat::Text),
        "json" => Some(DetectFormat::Json),
        "prometheus" => Some(DetectFormat::Prometheus),
        _ => None,
    }
}

fn run_stale<'a>(mut args: impl Iterator<Item = &'a str>) -> i32 {
    let mut options = stale::Options::default();
    let mut given = Given::default();
    while let Some(arg) = args.next() {
        if let Some(repeated) = given.again(arg) {
            return usage_error(&repeated);
        }
        match arg {
            "--json" => options.json = true,
            "-v" | "--verbose" => options.verbose = true,
            "--remove" => options.remove = true,
            "--allow-opening" => options.allow_opening = true,
            "--despite-contradiction" => options.despite_contradiction = true,
            "--backup-dir" => match args.next() {
                Some("") | None => return usage_error("--backup-dir needs a directory"),
                Some(value) => options.backup_dir = Some(PathBuf::from(value)),
            },
            other => return usage_error(&format!("unknown stale option {}", quoted(other.as_bytes()))),
        }
    }
    if options.backup_dir.is_some() && !options.remove {
        return usage_error("--backup-dir goes with --remove");
    }
    if options.allow_opening && !options.remove {
        return usage_error("--allow-opening goes with --remove");
    }
    if options.despite_contradiction && !options.remove {
        return usage_error("--despite-contradiction goes with --remove");
    }
    stale::run(&options)
}

fn run_install<'a>(mut args: impl Iterator<Item = &'a str>) -> i32 {
    let mut dir = None;
    let mut force = false;
    let mut given = Given::default();
    while let Some(arg) = args.next() {
        if let Some(repeated) = given.again(arg) {
            return usage_error(&repeated);
        }
        match arg {
            "--force" => force = true,
            "--dir" => match args.next() {
                Some("") => return usage_error("--dir needs a directory, not an empty string"),
                Some(value) => dir = Some(PathBuf::from(value)),
                None => return usage_error("--dir needs a directory"),
            },
            other => return usage_error(&format!("unknown install option {}", quoted(other.as_bytes()))),
        }
    }
    let Some(wrapper) = own_file::resolved_path() else {
        say(&format!(
            "install: the wrapper's own file: neither {} nor the path it was run by resolves; run it by its full path",
            own_file::PROC_SELF_EXE
        ));
        return 1;
    };
    let dir = dir.unwrap_or_else(|| wrapper.parent().expect("an absolute path has a parent").to_path_buf());
    match install::install(&dir, &wrapper, force) {
        Ok(Installed { target, links }) => {
            let mut out = String::new();
            for (path, outcome) in links {
                let done = match outcome {
                    LinkOutcome::Created => "created",
                    LinkOutcome::Replaced => "replaced",
                    LinkOutcome::AlreadyInPlace => "already in place",
                };
                out.push_str(&format!("{done}: {} -> {}\n", path.display(), target.display()));
            }
            print_out(&out)
        }
        Err(e) => {
            say(&format!("install: {}", printable(&e.to_string())));
            e.exit_status()
        }
    }
}
