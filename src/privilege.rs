//! What reading the kernel's firewall state needs, said in one place for
//! every message about a read the kernel refused: the netlink and
//! getsockopt reads need CAP_NET_ADMIN (root has it), so a refusal (EPERM,
//! or EACCES) says so instead of only "Operation not permitted".

use std::io;

/// The clause to add after `error` from a read of the kernel's tables:
/// what the read needs when the error is a refusal, empty otherwise.
pub fn needed_when_refused(error: &io::Error) -> &'static str {
    match error.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => "; reading them needs root or CAP_NET_ADMIN",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::needed_when_refused;
    use std::io;

    #[test]
    fn only_a_refusal_says_what_is_needed() {
        assert!(needed_when_refused(&io::Error::from_raw_os_error(libc::EPERM)).contains("CAP_NET_ADMIN"));
        assert!(needed_when_refused(&io::Error::from_raw_os_error(libc::EACCES)).contains("root"));
        assert_eq!(needed_when_refused(&io::Error::from_raw_os_error(libc::ENOENT)), "");
    }
}
