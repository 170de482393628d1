//! The wrapper's own command line, used when it is invoked under a name that
//! is not one of the six iptables commands (normally `iptables-wrapper`).
//! A usage error is one line naming what was wrong, then "see --help".

use crate::backend;
use crate::command::{self, WrappedCommand, COMMAND_NAMES};
use crate::decision::{self, Depth};
use crate::escape::Shown as _;
use crate::escape::{printable, quoted};
use crate::install::{self, Installed, LinkOutcome};
use crate::interval;
use crate::metrics;
use crate::own_file;
use crate::report;
use crate::settings;
use crate::stale::{self, rotation};
use crate::standard_fds::say;
use crate::textfile;
use std::ffi::CStr;
use std::io::Write;
use std::path::{Path, PathBuf};

const USAGE: &str = "\
usage: iptables-wrapper detect [-v] [--json | --format text|json|prometheus] [--for COMMAND]
       iptables-wrapper install [--dir DIR] [--force]
       iptables-wrapper stale [--json] [-v] | stale --remove [--backup-dir DIR] [--json]
                        [--allow-opening] [--despite-contradiction]
       iptables-wrapper stale [--remove[=true|false]] --backups-in DIR [--keep-backups N] [--backups-on-host PATH] [--exit-zero]
       iptables-wrapper metrics --textfile PATH [--interval D]
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
             state as Prometheus/OpenMetrics text (docs/metrics.md); exit 3:
             the chosen backend's program is missing (the first warning)
  install    link the six command names to this wrapper in DIR (default: the
             wrapper's directory); links to a backend are replaced; regular
             files, alternatives links and links to another program only
             with --force; the wrapper's own file never; a failure midway
             puts back what it changed
  stale      show what the backend the host does not use still holds (rules,
             user chains, DROP policies) per family, table and chain, and
             the chains of a table --remove would leave beside the host
             backend's, rule against rule; -v adds the rules in
             iptables-save form; exit 0 nothing stale, 1 stale,
             2 refused (the host's backend is not certain: only the override,
             the host link or a hint chain in one backend alone are)
             --remove: save that backend's rules into --backup-dir DIR
             (default: a new directory in the runtime directory), then
             empty each stale table; exit 0 when nothing stale remains;
             a table holding a DROP/REJECT rule or non-ACCEPT policy the
             host's backend does not also enforce is left (exit 1) unless
             --allow-opening; a decision other evidence contradicts is
             refused (exit 2), by IPTABLES_MODE removed with
             --despite-contradiction;
             --backups-in DIR: the backup is DIR/stale-backup-<number>-<UTC
             time>, numbered one past the highest there; --keep-backups N
             then keeps the N highest numbers (the one just written among
             them), deleting older ones; --backups-on-host PATH: DIR's
             path on the node (a hostPath), for the undo lines on stderr
             to name the files as the node's operator types them;
             --remove=false shows only;
             --exit-zero: exit 0 whatever happened (an init container),
             after a line on stderr with the status it stands for
  metrics    write the metrics of detect --format prometheus to PATH (via
             a new file and a rename) every D (default 60s) until SIGTERM;
             (D: 60s, 5m, 1h); when the wrapper cannot answer, says why
             and removes PATH; SIGTERM, SIGINT or SIGHUP: removes PATH,
             exits 0

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
        (Some("metrics"), _) => run_metrics(args),
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
        (Some(other), _) if command::another_tables_program(other) => usage_error(&format!(
            "{} is not a command the wrapper runs: COMMAND is one of {}; run that program itself",
            quoted(other.as_bytes()),
            COMMAND_NAMES.join(", ")
        )),
        (Some(other), _) => usage_error(&format!("unknown command or option {}", quoted(other.as_bytes()))),
        (None, _) => {
            usage_error("a command is required: detect, install, stale, metrics or one of the six iptables commands")
        }
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
        let refused = match (command, verbose) {
            (Some(_), _) => {
                "--for goes with the text and JSON reports; --format prometheus covers iptables and ip6tables"
            }
            (None, true) => {
                "-v goes with the text report; --format prometheus has one form (every metric, both families)"
            }
            (None, false) => "",
        };
        if !refused.is_empty() {
            return usage_error(refused);
        }
        return match metrics::exposition() {
            Ok(text) => print_out(&text),
            Err(invalid) => {
                say(&invalid.to_string());
                2
            }
        };
    }
    // A removal of stale tables that died before its report left them
    // half done, and its backup is the only copy of what it emptied.
    for line in stale::in_progress::notice() {
        say(&format!("detect: {line}"));
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
    // The search a wrapped call makes, without the exec.
    let backend = backend::locate(&command, decision.mode);
    let printed = if format == DetectFormat::Json {
        print_out(&format!("{}\n", report::json(&decision, settings, &backend)))
    } else if verbose {
        print_out(&report::verbose_text(&decision, settings, &backend))
    } else {
        print_out(&report::text(&decision, &backend))
    };
    match (printed, &backend) {
        (0, Err(_)) => EXIT_BACKEND_CANNOT_RUN,
        (printed, _) => printed,
    }
}

/// `detect`'s exit status when the report is printed but the chosen
/// backend's program is not found (or would run the wrapper itself): every
/// call of the command would fail.
const EXIT_BACKEND_CANNOT_RUN: i32 = 3;

/// The format a `--format` value names, if any.
fn format_named(value: &str) -> Option<DetectFormat> {
    match value {
        "text" => Some(DetectFormat::Text),
        "json" => Some(DetectFormat::Json),
        "prometheus" => Some(DetectFormat::Prometheus),
        _ => None,
    }
}

fn run_metrics<'a>(mut args: impl Iterator<Item = &'a str>) -> i32 {
    let mut path = None;
    let mut every = std::time::Duration::from_secs(60);
    let mut given = Given::default();
    while let Some(arg) = args.next() {
        if let Some(repeated) = given.again(arg) {
            return usage_error(&repeated);
        }
        match (arg, args.next()) {
            ("--textfile", Some(value)) if value.starts_with('/') => path = Some(PathBuf::from(value)),
            ("--textfile", _) => {
                return usage_error("--textfile needs an absolute path, such as /textfile/iptables_wrapper.prom")
            }
            ("--interval", Some(value)) => match interval::parse("--interval", value) {
                Ok(chosen) => every = chosen,
                Err(problem) => return usage_error(&problem),
            },
            ("--interval", None) => return usage_error("--interval needs a duration such as 60s, 5m or 1h"),
            (other, _) => return usage_error(&format!("unknown metrics option {}", quoted(other.as_bytes()))),
        }
    }
    match path {
        Some(path) => textfile::run(&path, every),
        None => usage_error("metrics needs --textfile PATH (detect --format prometheus prints them once)"),
    }
}

/// What `stale` is asked beyond [`stale::Options`]: where its backups are
/// kept, how many, and whether its status is the process's.
#[derive(Default)]
struct Rotation<'a> {
    backups_in: Option<&'a str>,
    keep: Option<usize>,
    exit_zero: bool,
    /// `--backups-in`'s directory as the node names it.
    on_host: Option<&'a str>,
}

fn run_stale<'a>(mut args: impl Iterator<Item = &'a str>) -> i32 {
    let mut options = stale::Options::default();
    let mut rotation = Rotation::default();
    let mut given = Given::default();
    while let Some(arg) = args.next() {
        let option = arg.split_once('=').map_or(arg, |(name, _)| name);
        if let Some(repeated) = given.again(option) {
            return usage_error(&repeated);
        }
        match arg {
            "--json" => options.json = true,
            "-v" | "--verbose" => options.verbose = true,
            "--remove" | "--remove=true" => options.remove = true,
            "--remove=false" => options.remove = false,
            _ if option == "--remove" => {
                return usage_error(&format!(
                    "{}: give --remove=true or --remove=false",
                    quoted(arg.as_bytes())
                ))
            }
            "--exit-zero" => rotation.exit_zero = true,
            "--allow-opening" => options.allow_opening = true,
            "--despite-contradiction" => options.despite_contradiction = true,
            "--backup-dir" => match args.next() {
                Some("") | None => return usage_error("--backup-dir needs a directory"),
                Some(value) => options.backup_dir = Some(PathBuf::from(value)),
            },
            "--backups-in" => match args.next() {
                Some(value) if value.starts_with('/') => rotation.backups_in = Some(value),
                _ => return usage_error("--backups-in needs the absolute path of a directory"),
            },
            "--backups-on-host" => match args.next() {
                Some(value) if value.starts_with('/') => rotation.on_host = Some(value),
                _ => return usage_error("--backups-on-host needs the absolute path on the node of --backups-in DIR"),
            },
            "--keep-backups" => match args.next().map(|value| (value, value.parse::<usize>())) {
                Some((_, Ok(keep))) if keep >= 1 => rotation.keep = Some(keep),
                Some((value, _)) => {
                    return usage_error(&format!(
                        "--keep-backups needs a whole number of backups to keep, 1 or more, not {}",
                        quoted(value.as_bytes())
                    ))
                }
                None => return usage_error("--keep-backups needs a whole number of backups to keep, 1 or more"),
            },
            other => return usage_error(&format!("unknown stale option {}", quoted(other.as_bytes()))),
        }
    }
    if options.backup_dir.is_some() && !options.remove {
        return usage_error("--backup-dir goes with --remove");
    }
    if options.backup_dir.is_some() && rotation.backups_in.is_some() {
        return usage_error("--backup-dir names one backup, --backups-in the directory of them; give one");
    }
    if rotation.on_host.is_some() && rotation.backups_in.is_none() {
        return usage_error("--backups-on-host goes with --backups-in DIR, the directory it names on the node");
    }
    if rotation.keep.is_some() && rotation.backups_in.is_none() {
        return usage_error("--keep-backups goes with --backups-in DIR, the directory of the backups it keeps");
    }
    if options.allow_opening && !options.remove {
        return usage_error("--allow-opening goes with --remove");
    }
    if options.despite_contradiction && !options.remove {
        return usage_error("--despite-contradiction goes with --remove");
    }
    let status = match rotation.backups_in.map(Path::new) {
        Some(dir) => rotation::run_in(dir, rotation.on_host.map(Path::new), rotation.keep, &mut options),
        None => stale::run(&options),
    };
    if !rotation.exit_zero {
        return status;
    }
    let meaning = match status {
        stale::EXIT_NOTHING_STALE => "nothing stale",
        stale::EXIT_STALE => "something stale, or a removal that failed",
        _ => "refused: the host's backend is not certain, or a setting is invalid",
    };
    say(&format!(
        "stale: exit status {status} ({meaning}); exiting 0 (--exit-zero)"
    ));
    0
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
                out.push_str(&format!("{done}: {} -> {}\n", path.shown(), target.shown()));
            }
            print_out(&out)
        }
        Err(e) => {
            say(&format!("install: {}", printable(&e.to_string())));
            e.exit_status()
        }
    }
}
