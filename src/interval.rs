//! The long-running modes' clock: an interval as the command line gives it
//! (`60s`, `5m`, `1h`), and a sleep between two runs that ends early, and
//! for good, on SIGTERM, SIGINT or SIGHUP (SIGTERM is what a container
//! runtime sends to stop a container), so that the process exits cleanly
//! even as PID 1, where a signal without a handler is ignored.
//!
//! The signals are blocked for the whole process and taken with
//! `sigtimedwait` while it sleeps, so none is lost between two sleeps; the
//! sleep is measured on the monotonic clock, which a wall-clock step cannot
//! move. While a run works they are let in to a handler, which ends the
//! process there and then: a run that waits (on a hung file system, a
//! backend that does not return) cannot keep it from stopping.

use std::time::{Duration, Instant};

/// The longest interval taken (a day): longer is surely a typo.
const LONGEST: Duration = Duration::from_secs(86_400);

/// Parses `60s`, `5m` or `1h` (a whole number and its unit), from 1 s to a
/// day. Err: the usage error's text.
pub fn parse(option: &str, value: &str) -> Result<Duration, String> {
    let wanted = format!(
        "{option} needs a duration from 1s to 24h such as 60s, 5m or 1h, not {}",
        crate::escape::quoted(value.as_bytes())
    );
    let split = value.find(|c: char| !c.is_ascii_digit()).unwrap_or(value.len());
    let (number, unit) = value.split_at(split);
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(wanted),
    };
    match number.parse::<u64>().ok().and_then(|n| n.checked_mul(seconds)) {
        Some(total) if total >= 1 && Duration::from_secs(total) <= LONGEST => Ok(Duration::from_secs(total)),
        _ => Err(wanted),
    }
}

/// The signals that ask the process to end: SIGTERM (a container
/// runtime), SIGINT (a terminal) and SIGHUP (a terminal that went away).
pub const STOP_SIGNALS: [(libc::c_int, &str); 3] = [
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGINT, "SIGINT"),
    (libc::SIGHUP, "SIGHUP"),
];

/// The stop signals, blocked: taken by [`Stoppable::sleep`] between two
/// runs, and by a handler while a run works ([`Stoppable::working`]).
pub struct Stoppable {
    signals: libc::sigset_t,
}

impl Stoppable {
    /// Gives the stop signals `on_stop`, which must end the process and do
    /// only what a signal handler may (async-signal-safe calls), and
    /// blocks them for the process. Err: why not.
    pub fn block(on_stop: extern "C" fn(libc::c_int)) -> Result<Stoppable, String> {
        // SAFETY: sigemptyset and sigaddset fill sigset_t values of our
        // own; sigaction installs a handler the caller vouches for;
        // sigprocmask only changes this (single) thread's mask.
        unsafe {
            let mut signals: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut signals);
            for (signal, _) in STOP_SIGNALS {
                // A SIGHUP ignored by the caller (nohup) stays ignored.
                let mut current: libc::sigaction = std::mem::zeroed();
                let ignored = libc::sigaction(signal, std::ptr::null(), &mut current) == 0
                    && current.sa_sigaction == libc::SIG_IGN
                    && signal == libc::SIGHUP;
                if !ignored {
                    libc::sigaddset(&mut signals, signal);
                }
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop as usize;
            // Another stop signal, or a SIGPIPE from its message on a
            // closed stderr, waits until the handler has ended the process.
            action.sa_mask = signals;
            libc::sigaddset(&mut action.sa_mask, libc::SIGPIPE);
            for (signal, name) in STOP_SIGNALS {
                if libc::sigismember(&signals, signal) == 1
                    && libc::sigaction(signal, &action, std::ptr::null_mut()) != 0
                {
                    return Err(format!("cannot handle {name}: {}", std::io::Error::last_os_error()));
                }
            }
            if libc::sigprocmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut()) != 0 {
                return Err(format!("cannot block SIGTERM: {}", std::io::Error::last_os_error()));
            }
            Ok(Stoppable { signals })
        }
    }

    /// Runs `work` with the stop signals let in: one that comes while it
    /// works (or came before) runs the handler at once, even while `work`
    /// waits in a system call.
    pub fn working<T>(&self, work: impl FnOnce() -> T) -> T {
        // SAFETY: sigprocmask only changes this (single) thread's mask.
        unsafe { libc::sigprocmask(libc::SIG_UNBLOCK, &self.signals, std::ptr::null_mut()) };
        let result = work();
        // SAFETY: as above.
        unsafe { libc::sigprocmask(libc::SIG_BLOCK, &self.signals, std::ptr::null_mut()) };
        result
    }

    /// Sleeps `interval`; `Some(name)` of the signal that asked the process
    /// to end, if one came first (or was already pending).
    pub fn sleep(&self, interval: Duration) -> Option<&'static str> {
        let until = Instant::now() + interval;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let timeout = libc::timespec {
                tv_sec: left.as_secs() as _,
                tv_nsec: left.subsec_nanos() as _,
            };
            // SAFETY: a valid signal set and timespec, no siginfo wanted.
            let taken = unsafe { libc::sigtimedwait(&self.signals, std::ptr::null_mut(), &timeout) };
            if let Some((_, name)) = STOP_SIGNALS.iter().find(|(signal, _)| *signal == taken) {
                return Some(name);
            }
            match taken {
                _ if left.is_zero() => return None,
                // EAGAIN (the time is up) or EINTR: look at the clock again.
                _ => continue,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse;
    use std::time::Duration;

    #[test]
    fn durations_with_their_unit() {
        assert_eq!(parse("--interval", "60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("--interval", "5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("--interval", "24h"), Ok(Duration::from_secs(86_400)));
    }

    #[test]
    fn refused_with_what_would_be_right() {
        for bad in [
            "",
            "60",
            "0s",
            "1.5m",
            "-1s",
            "25h",
            "60 s",
            "1d",
            "99999999999999999999s",
        ] {
            let err = parse("--interval", bad).expect_err(bad);
            assert!(err.starts_with("--interval needs a duration from 1s to 24h"), "{err}");
        }
    }
}
