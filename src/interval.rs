//! The long-running modes' clock: an interval as the command line gives it
//! (`60s`, `5m`, `1h`), and a sleep between two runs that ends early, and
//! for good, on SIGTERM or SIGINT (what a container runtime sends to stop
//! a container), so that the process exits cleanly even as PID 1, where a
//! signal without a handler is ignored.
//!
//! The two signals are blocked for the whole process and taken with
//! `sigtimedwait`, so none is lost between two sleeps; the sleep is
//! measured on the monotonic clock, which a wall-clock step cannot move.

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

/// SIGTERM and SIGINT, blocked: taken only by [`Stoppable::sleep`].
pub struct Stoppable {
    signals: libc::sigset_t,
}

impl Stoppable {
    /// Blocks SIGTERM and SIGINT for the process. Err: why not.
    pub fn block() -> Result<Stoppable, String> {
        // SAFETY: sigemptyset and sigaddset fill a sigset_t of our own;
        // sigprocmask only changes this (single) thread's mask.
        unsafe {
            let mut signals: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut signals);
            libc::sigaddset(&mut signals, libc::SIGTERM);
            libc::sigaddset(&mut signals, libc::SIGINT);
            if libc::sigprocmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut()) != 0 {
                return Err(format!("cannot block SIGTERM: {}", std::io::Error::last_os_error()));
            }
            Ok(Stoppable { signals })
        }
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
            match taken {
                libc::SIGTERM => return Some("SIGTERM"),
                libc::SIGINT => return Some("SIGINT"),
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
