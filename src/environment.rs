//! The caller's environment variables, several read in one pass.
//!
//! `std::env::var_os` takes the environment's lock, copies the name to add a
//! NUL, and has musl's `getenv` scan the whole environment with `strncmp`,
//! once per name; the wrapper's names share the `IPTABLES_WRAPPER_` prefix,
//! so every comparison runs far into it. Measured with callgrind on a wrapped
//! `iptables -V` with the override (35 variables, 1.3 KB): 9,700 of a call's
//! 17,100 user-space instructions went to five such lookups. [`vars`] walks
//! the environment once for all the names a module reads, comparing a first
//! byte before anything else, and costs a few hundred.
//!
//! It reads `environ` without `std`'s lock, which only guards against
//! `std::env::set_var` in another thread: the wrapper sets no variable, in
//! any thread (the backend gets the environment exactly as the caller gave
//! it). Values are copied out, as `var_os` copies them.

use std::ffi::{c_char, CStr, OsString};
use std::os::unix::ffi::OsStringExt;

extern "C" {
    /// The C library's environment: `NAME=value` strings, then NULL.
    static environ: *const *const c_char;
}

/// The values of `names` in the environment, in their order: `None` for a
/// name not set. Where a name is set more than once (a caller's `execve` can
/// pass anything), the first one counts, as with `getenv`.
pub fn vars<const N: usize>(names: [&str; N]) -> [Option<OsString>; N] {
    let mut values = [const { None }; N];
    // SAFETY: `environ` is the C library's NULL-terminated array of
    // NUL-terminated strings, which nothing in this process changes (see the
    // module's doc); it is read, never written.
    let mut entry = unsafe { environ };
    if entry.is_null() {
        return values;
    }
    loop {
        // SAFETY: `entry` points into that array, at or before its NULL.
        let pointer = unsafe { *entry };
        if pointer.is_null() {
            return values;
        }
        for (name, value) in names.iter().zip(values.iter_mut()) {
            if value.is_none() {
                // SAFETY: a non-NULL entry is a NUL-terminated string.
                *value = unsafe { value_of(pointer, name) };
            }
        }
        // SAFETY: not past the NULL, which ends the loop above.
        entry = unsafe { entry.add(1) };
    }
}

/// The value in `entry` (`NAME=value`) when its name is `name`. Reads no
/// further into an entry than the first byte that differs, so most entries
/// cost one comparison (no `strlen` of each).
///
/// # Safety
/// `entry` points to a NUL-terminated string.
unsafe fn value_of(entry: *const c_char, name: &str) -> Option<OsString> {
    let mut at = entry.cast::<u8>();
    for &expected in name.as_bytes() {
        // SAFETY: the bytes read so far matched `name`, which holds no NUL,
        // so the string's NUL is at `at` or later.
        if unsafe { *at } != expected {
            return None;
        }
        // SAFETY: as above; the byte just read was not the NUL.
        at = unsafe { at.add(1) };
    }
    // SAFETY: as above.
    if unsafe { *at } != b'=' {
        return None;
    }
    // SAFETY: the value starts after the `=` and ends at the string's NUL.
    let value = unsafe { CStr::from_ptr(at.add(1).cast()) };
    Some(OsString::from_vec(value.to_bytes().to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_whole() {
        let value = |entry: &CStr| unsafe { value_of(entry.as_ptr(), "IPTABLES_MODE") };
        assert_eq!(value(c"IPTABLES_MODE=nft"), Some("nft".into()));
        assert_eq!(value(c"IPTABLES_MODE="), Some("".into()));
        assert_eq!(value(c"IPTABLES_MODE==x"), Some("=x".into()));
        assert_eq!(value(c"IPTABLES_MODEX=nft"), None);
        assert_eq!(value(c"IPTABLES_MOD=nft"), None);
        assert_eq!(value(c"IPTABLES_MODE"), None);
        assert_eq!(value(c""), None);
    }

    #[test]
    fn reads_what_var_os_reads() {
        // The test process's own environment: whatever it holds, the one
        // pass and std's lookups agree.
        let names = ["PATH", "HOME", "IPTABLES_WRAPPER_NOT_SET_ANYWHERE", "CARGO_PKG_NAME"];
        let values = vars(names);
        for (name, value) in names.iter().zip(values) {
            assert_eq!(value, std::env::var_os(name), "{name}");
        }
    }
}
