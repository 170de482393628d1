//! Bytes of a legacy rule that the kernel never reads for the rule's
//! family, which the backup proof must not weigh: in IPv4 tables, the last
//! 12 bytes of the `union nf_inet_addr` mask of the `recent` (revision 1
//! and later) and `connlimit` matches. An IPv4 rule reads only the first 4
//! (`recent_mt` masks an address it zero-initialised, `connlimit_mt` masks
//! with `mask.ip`). libxt_recent fills all 16 bytes when no `--mask` is
//! given (kube-proxy's ClientIP session affinity writes `-m recent --set`
//! so), while the `--mask 255.255.255.255` its save prints restores 4; the
//! same for connlimit. Zeroed in both images, the two compare equal, as the
//! packets they match are the same.

use super::abi::{read_u16, EntryTarget, Layout, EXTENSION_MAXNAMELEN};
use crate::family::Family;
use crate::kernel::bytes::until_nul;
use std::mem::{offset_of, size_of};

/// `struct xt_entry_match`'s header, laid out as `xt_entry_target`'s:
/// `match_size` (u16), the name, the revision (u8).
const MATCH_HEADER: usize = size_of::<EntryTarget>();
const NAME_AT: usize = offset_of!(EntryTarget, name);
const REVISION_AT: usize = NAME_AT + EXTENSION_MAXNAMELEN;
/// `sizeof(union nf_inet_addr)`, of which IPv4 uses the first 4 bytes.
const ADDRESS_LEN: usize = 16;
const IPV4_ADDRESS_LEN: usize = 4;

/// IPv4 matches whose mask's IPv6 part is never read: name, first revision
/// with the mask, where the mask is in the match's data.
const IPV4_MASKS: [(&[u8], u8, usize); 2] = [
    // struct xt_recent_mtinfo_v1: seconds, hit_count, check_set, invert,
    // name[200], side, then the mask (4-aligned).
    (b"recent", 1, 212),
    // struct xt_connlimit_info: the mask first.
    (b"connlimit", 0, 0),
];

/// Where, in the data of match `name` of `revision` in an IPv4 rule, lie
/// the bytes the kernel never reads (the IPv6 part of its mask); None for
/// any other match. The data is the same `struct` in an nf_tables rule's
/// `match` expression (iptables-nft's compat), so both proofs use this.
pub(crate) fn ipv4_unread_mask(name: &[u8], revision: u32) -> Option<std::ops::Range<usize>> {
    IPV4_MASKS
        .iter()
        .find(|(match_name, first_revision, _)| name == *match_name && revision >= u32::from(*first_revision))
        .map(|(_, _, mask_at)| mask_at + IPV4_ADDRESS_LEN..mask_at + ADDRESS_LEN)
}

/// Zeroes the bytes the kernel never reads in `entry`, one entry of a
/// `family` table's blob (a malformed match ends the walk: what is left is
/// compared whole).
pub(super) fn zero_unread(family: Family, layout: &Layout, entry: &mut [u8]) {
    if family != Family::Ipv4 {
        return;
    }
    if entry.len() < layout.entry_size {
        return;
    }
    let matches_end = usize::from(read_u16(entry, layout.target_offset_at)).min(entry.len());
    let mut at = layout.entry_size;
    while at + MATCH_HEADER <= matches_end {
        let size = usize::from(read_u16(entry, at));
        if size < MATCH_HEADER || at + size > matches_end {
            return;
        }
        let name = until_nul(&entry[at + NAME_AT..at + REVISION_AT]);
        let revision = entry[at + REVISION_AT];
        if let Some(unread) = ipv4_unread_mask(name, u32::from(revision)) {
            let unread = at + MATCH_HEADER + unread.start..at + MATCH_HEADER + unread.end;
            if unread.end <= at + size {
                entry[unread].fill(0);
            }
        }
        at += size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 entry with one match `name` of `revision` whose data is
    /// `data_len` bytes of 0xff, then a 32-byte target.
    fn entry(name: &[u8], revision: u8, data_len: usize) -> Vec<u8> {
        let layout = Layout::of(Family::Ipv4);
        let match_size = MATCH_HEADER + data_len;
        let target_offset = layout.entry_size + match_size;
        let mut entry = vec![0u8; target_offset + 32];
        entry[layout.target_offset_at..layout.target_offset_at + 2]
            .copy_from_slice(&(target_offset as u16).to_ne_bytes());
        let at = layout.entry_size;
        entry[at..at + 2].copy_from_slice(&(match_size as u16).to_ne_bytes());
        entry[at + NAME_AT..at + NAME_AT + name.len()].copy_from_slice(name);
        entry[at + REVISION_AT] = revision;
        entry[at + MATCH_HEADER..target_offset].fill(0xff);
        entry
    }

    #[test]
    fn only_the_ipv6_part_of_an_ipv4_mask_is_zeroed() {
        let layout = Layout::of(Family::Ipv4);
        let data = layout.entry_size + MATCH_HEADER;
        let mut recent = entry(b"recent", 1, 228);
        zero_unread(Family::Ipv4, &layout, &mut recent);
        assert!(recent[data..data + 216].iter().all(|&b| b == 0xff));
        assert!(recent[data + 216..data + 228].iter().all(|&b| b == 0));

        let mut connlimit = entry(b"connlimit", 1, 32);
        zero_unread(Family::Ipv4, &layout, &mut connlimit);
        assert!(connlimit[data..data + 4].iter().all(|&b| b == 0xff));
        assert!(connlimit[data + 4..data + 16].iter().all(|&b| b == 0));
        assert!(connlimit[data + 16..data + 32].iter().all(|&b| b == 0xff));
    }

    #[test]
    fn other_matches_revisions_and_families_are_left_whole() {
        let layout = Layout::of(Family::Ipv4);
        for (name, revision, len) in [(&b"recent"[..], 0, 212), (b"comment", 0, 256), (b"recentx", 1, 228)] {
            let original = entry(name, revision, len);
            let mut kept = original.clone();
            zero_unread(Family::Ipv4, &layout, &mut kept);
            assert_eq!(kept, original, "{}", String::from_utf8_lossy(name));
        }
        let original = entry(b"recent", 1, 228);
        let mut ipv6 = original.clone();
        zero_unread(Family::Ipv6, &layout, &mut ipv6);
        assert_eq!(ipv6, original);
    }
}
