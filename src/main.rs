//! Entry point: invoked as one of the six iptables commands, decide and exec
//! the backend; under any other name, run the wrapper's own command line.

use iptables_wrapper::backend;
use iptables_wrapper::cli;
use iptables_wrapper::command::WrappedCommand;
use iptables_wrapper::decision::{self, Depth};
use log::LevelFilter;
use std::ffi::OsString;
use std::io::Write;
use std::path::Path;

/// The log level variable; the default level is `warn`.
const LOG_VAR: &str = "IPTABLES_WRAPPER_LOG";

fn main() {
    if let Err(problem) = init_logging() {
        eprintln!("iptables-wrapper: {problem}; nothing was run");
        std::process::exit(2);
    }
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_default();
    let invoked = Path::new(&argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let rest: Vec<OsString> = args.collect();
    let status = match WrappedCommand::from_name(invoked) {
        Some(command) => run_backend(&command, &rest),
        None => cli::run(rest),
    };
    std::process::exit(status);
}

/// Logs to stderr at the level `IPTABLES_WRAPPER_LOG` names (default warn).
fn init_logging() -> Result<(), String> {
    let requested = std::env::var(LOG_VAR).unwrap_or_default();
    let level = match requested.as_str() {
        "" => LevelFilter::Warn,
        name => name
            .parse()
            .map_err(|_| format!("invalid {LOG_VAR}={requested:?}: expected off, error, warn, info, debug or trace"))?,
    };
    env_logger::Builder::new()
        .filter_level(level)
        .format(|out, record| {
            writeln!(
                out,
                "iptables-wrapper: {}: {}",
                record.level().as_str().to_lowercase(),
                record.args()
            )
        })
        .target(env_logger::Target::Stderr)
        .init();
    Ok(())
}

/// Decides, then replaces this process with the backend. Returns only on failure.
fn run_backend(command: &WrappedCommand, args: &[OsString]) -> i32 {
    let decision = match decision::decide(command, Depth::Decide) {
        Ok(decision) => decision,
        Err(invalid) => {
            eprintln!("iptables-wrapper: {invalid}; nothing was run");
            return 2;
        }
    };
    for warning in decision.warnings() {
        log::warn!("{warning}");
    }
    let backend = match backend::locate(command, decision.mode) {
        Ok(backend) => backend,
        Err(e) => {
            eprintln!(
                "iptables-wrapper: {e} ({} was chosen because: {})",
                decision.mode, decision.reason
            );
            return 1;
        }
    };
    log::debug!(
        "{}: mode={} source={} ({}); exec {} as {}; decided in {:.3} ms",
        command.name,
        decision.mode,
        decision.decided_by.key(),
        decision.reason,
        backend.path.display(),
        backend.argv0,
        decision.took.as_secs_f64() * 1e3
    );
    let error = backend::exec(&backend, args);
    eprintln!("iptables-wrapper: cannot exec {}: {error}", backend.path.display());
    126
}
