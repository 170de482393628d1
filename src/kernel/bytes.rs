//! Byte helpers shared by the readers of the kernel's answers: netlink
//! attributes (nf_tables) and x_tables structure fields (legacy). They read
//! bytes as given and know nothing of where they came from.

/// A NUL-terminated string (a netlink string attribute, a C string field)
/// without its terminating NUL and what follows it.
pub(super) fn until_nul(value: &[u8]) -> &[u8] {
    value.split(|&b| b == 0).next().unwrap_or(value)
}
