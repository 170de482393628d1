//! Entry point: invoked as one of the six iptables commands, decide and exec
//! the backend; under any other name, the same with one of the six as the
//! first argument (the multi-call form of `xtables-*-multi`), else run the
//! wrapper's own command line.
//!
//! `main` is the C entry point (`#![no_main]`): Rust's usual start-up would
//! set SIGPIPE to ignored and put `/dev/null` on closed standard descriptors
//! before any of this code runs, and the backend would inherit both. Here
//! the process starts exactly as the caller made it, and the wrapper changes
//! nothing the backend inherits.
//!
//! Run under a backend's own name (`iptables-nft`, `xtables-nft-multi`, ...),
//! it runs nothing at all: it is a copy of the wrapper in a backend's place,
//! and deciding again could run another copy without end (see `backend`).
//!
//! A wrapped call writes nothing of its own to stdout or stderr unless the
//! caller asked (`IPTABLES_WRAPPER_LOG` set) or stderr is a terminal: its
//! warnings go to the warnings record. Errors where nothing runs always go
//! to stderr.
#![no_main]

use iptables_wrapper::allocator::{BumpArena, CALL_ARENA_BYTES};
use iptables_wrapper::backend;
use iptables_wrapper::cli;
use iptables_wrapper::command::{self, WrappedCommand, COMMAND_NAMES};
use iptables_wrapper::decision::{self, Depth};
use iptables_wrapper::environment;
use iptables_wrapper::escape::Shown as _;
use iptables_wrapper::escape::{printable, printable_bytes, quoted};
use iptables_wrapper::privilege;
use iptables_wrapper::standard_fds::{self, say};
use iptables_wrapper::warnings_record;
use log::LevelFilter;
use std::ffi::{c_char, c_int, CStr};
use std::io::Write;

/// Every allocation of a wrapped call, see `allocator`. In a section of its
/// own after `.bss` (see `allocator`: the small statics then share pages).
/// Only where lld links (the musl targets): GNU ld's scripts, which link the
/// static glibc targets, put `.sbss` before `.data` on ppc64le, which would
/// write 1.5 MB of zeros into the file; there it stays in `.bss`.
#[global_allocator]
#[cfg_attr(target_env = "musl", link_section = ".sbss.arena")]
static ALLOCATOR: BumpArena<CALL_ARENA_BYTES> = BumpArena::new();

/// The log level variable.
const LOG_VAR: &str = "IPTABLES_WRAPPER_LOG";

/// Where the wrapper's own log lines go.
enum Logging {
    /// `IPTABLES_WRAPPER_LOG` names a level: log at it to stderr.
    Requested(LevelFilter),
    /// Not set: warnings only, and only to a terminal.
    Quiet,
}

/// # Safety
/// Called by the C runtime with the process's own argc and argv.
#[no_mangle]
pub unsafe extern "C" fn main(argc: c_int, argv: *const *const c_char, _envp: *const *const c_char) -> c_int {
    standard_fds::hold_closed();
    // SAFETY: the C runtime passes argc valid, NUL-terminated strings.
    let args: Vec<&CStr> = (0..argc.max(0) as usize)
        .map(|i| unsafe { *argv.add(i) })
        .take_while(|arg| !arg.is_null())
        .map(|arg| unsafe { CStr::from_ptr(arg) })
        .collect();
    let status = run(&args);
    let _ = std::io::stdout().flush();
    status
}

fn run(args: &[&CStr]) -> i32 {
    if let Some(standing_in) = backend::standing_in_for_a_backend() {
        say(&format!("{standing_in}; nothing was run"));
        return standing_in.exit_status();
    }
    let logging = match logging_requested() {
        Ok(logging) => logging,
        Err(problem) => {
            say(&format!("{problem}; nothing was run"));
            return 2;
        }
    };
    if let Logging::Requested(level) = logging {
        init_logger(level);
    }
    let (argv0, rest) = args
        .split_first()
        .map_or((c"", &[][..]), |(first, rest)| (*first, rest));
    if let Some(command) = wrapped_command(argv0.to_bytes()) {
        return run_backend(&command, argv0, rest, &logging);
    }
    // The multi-call form, as xtables-*-multi take it: `iptables-wrapper
    // iptables -L` is a call of `iptables -L`, and the backend's argv[0] is
    // the name given (as xtables-*-multi pass it on).
    if let Some((name, args)) = rest.split_first() {
        if let Some(command) = wrapped_command(name.to_bytes()) {
            return run_backend(&command, name, args, &logging);
        }
    }
    // Under another program's name (an `ebtables` link), only the
    // multi-call form is answered: what the caller meant is not the
    // wrapper's own command line.
    let invoked_as = basename(argv0.to_bytes());
    if std::str::from_utf8(invoked_as).is_ok_and(command::another_tables_program) {
        say(&format!(
            "invoked as {}: the wrapper answers only to {} and to its own name (iptables-wrapper); under another name, its first argument must be one of them; nothing was run",
            quoted(invoked_as),
            COMMAND_NAMES.join(", ")
        ));
        return 2;
    }
    cli::run(rest)
}

/// The command a program name (its basename) is, if one of the six.
fn wrapped_command(name: &[u8]) -> Option<WrappedCommand> {
    std::str::from_utf8(basename(name))
        .ok()
        .and_then(WrappedCommand::from_name)
}

/// A path's last component.
fn basename(path: &[u8]) -> &[u8] {
    path.rsplit(|&b| b == b'/').next().unwrap_or_default()
}

/// Reads `IPTABLES_WRAPPER_LOG`: unset or empty means quiet.
fn logging_requested() -> Result<Logging, String> {
    let [requested] = environment::vars([LOG_VAR]);
    let Some(requested) = requested.filter(|v| !v.is_empty()) else {
        return Ok(Logging::Quiet);
    };
    let expected = "expected off, error, warn, info, debug or trace";
    let shown = quoted(requested.as_encoded_bytes());
    let Some(name) = requested.to_str() else {
        return Err(format!("invalid {LOG_VAR}={shown}: not valid UTF-8; {expected}"));
    };
    name.parse()
        .map(Logging::Requested)
        .map_err(|_| format!("invalid {LOG_VAR}={shown}: {expected}"))
}

/// Logs to stderr at `level`, if the caller gave the wrapper a stderr; a
/// stderr whose reader has gone costs the lines, never the call.
fn init_logger(level: LevelFilter) {
    standard_fds::log_to_stderr(level);
}

/// Decides, then replaces this process with the backend, which gets `argv0`
/// (the caller's, as given) and `args`. Returns only on failure.
fn run_backend(command: &WrappedCommand, argv0: &CStr, args: &[&CStr], logging: &Logging) -> i32 {
    let to_terminal = matches!(logging, Logging::Quiet) && standard_fds::stderr_is_terminal();
    let on_stderr = match logging {
        Logging::Requested(level) => *level >= LevelFilter::Warn && standard_fds::stderr_open(),
        Logging::Quiet => to_terminal,
    };
    // Warnings that need reads of their own are looked for only when they
    // will be seen: on stderr, or in the warnings record when it is due.
    let depth = if on_stderr || warnings_record::due() {
        Depth::DecideAndWarn
    } else {
        Depth::Decide
    };
    let decision = match decision::decide(command, depth) {
        Ok(decision) => decision,
        Err(invalid) => {
            say(&format!("{invalid}; nothing was run"));
            return 2;
        }
    };
    // A read that failed for want of a descriptor leaves the state unknown
    // where it was needed: below the sources that decide without it, the
    // choice would fall past it to the default.
    if privilege::descriptors_ran_out() && !decision.decided_by.facts().stands_on_what_it_found {
        say(&privilege::ran_out_refusal(command.name));
        return 2;
    }
    // A call that did not look has no reader for its warnings either.
    let warnings = if depth == Depth::DecideAndWarn {
        let warnings = decision.warnings();
        warnings_record::record(&warnings);
        warnings
    } else {
        Vec::new()
    };
    for warning in &warnings {
        if to_terminal {
            say(&format!("warn: {}", printable(warning)));
        } else {
            log::warn!("{}", printable(warning));
        }
    }
    let failure = backend::run(command, decision.mode, argv0, args, &|backend| {
        log::debug!(
            "{}: mode={} source={} ({}); exec {} as {}; decided in {}",
            command.name,
            decision.mode,
            decision.decided_by.key(),
            printable(&decision.reason.to_string()),
            backend.path.shown(),
            printable_bytes(argv0.to_bytes()),
            decision.took.map_or("(not timed)".to_string(), |took| format!(
                "{:.3} ms",
                took.as_secs_f64() * 1e3
            ))
        )
    });
    say(&format!(
        "{failure} ({} was chosen because: {}); nothing was run",
        decision.mode,
        printable(&decision.reason.to_string())
    ));
    failure.exit_status()
}
