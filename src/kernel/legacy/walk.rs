//! Walking one table's entry blob (GET_ENTRIES) into its chains, their
//! rules and the built-in chains' policies, the way libiptc parses it.
//!
//! The blob is a sequence of entries (`ipt_entry` / `ip6t_entry`, then the
//! matches, then the target), each `next_offset` bytes long. A builtin chain
//! starts at its `hook_entry` offset and ends with its policy entry; a user
//! chain starts with an `ERROR` entry carrying its name and ends with a
//! `RETURN` entry; the table ends with one more `ERROR` entry.
//!
//! It sees one blob and the GET_INFO it was read for, nothing else: a blob
//! that does not add up to that GET_INFO (the table replaced by one of the
//! same size between the two reads) is no reading, and the caller reads
//! again.

use super::abi::{
    read_u16, EntryTarget, Layout, ERROR_TARGET, EXTENSION_MAXNAMELEN, HOOK_CHAINS, NUM_HOOKS, VERDICT_ACCEPT,
    VERDICT_DROP,
};
use super::{invalid_data, TableInfo};
use crate::kernel::bytes::until_nul;
use std::io;
use std::mem::{offset_of, size_of};

/// The result of walking a table's entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableEntries {
    /// Rules as `iptables-legacy-save` prints them (`-A` lines).
    pub rules: u64,
    /// Names of the user-defined chains.
    pub user_chains: Vec<String>,
}

/// A built-in chain's policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    Accept,
    Drop,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Accept => "ACCEPT",
            Policy::Drop => "DROP",
        }
    }
}

/// One chain of a table, as the walk found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainContents {
    pub name: String,
    /// The built-in chain's policy; None for a user chain.
    pub policy: Option<Policy>,
    /// Rules as `iptables-legacy-save` prints them (`-A` lines).
    pub rules: u64,
}

/// Every chain of a table, in the blob's order (built-in chains first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableContents {
    pub chains: Vec<ChainContents>,
}

impl TableContents {
    /// Rules in all chains.
    pub fn rules(&self) -> u64 {
        self.chains.iter().map(|chain| chain.rules).sum()
    }

    /// The user chains.
    pub fn user_chains(&self) -> impl Iterator<Item = &ChainContents> {
        self.chains.iter().filter(|chain| chain.policy.is_none())
    }

    /// The built-in chains whose policy is not ACCEPT.
    pub fn non_accept_policies(&self) -> impl Iterator<Item = &ChainContents> {
        self.chains
            .iter()
            .filter(|chain| chain.policy.is_some_and(|policy| policy != Policy::Accept))
    }

    /// Whether the table changes some packet's fate: a rule, or a policy
    /// other than ACCEPT. (An empty user chain does not; neither does a
    /// table as a read-only `iptables-legacy -L` leaves it.)
    pub fn applies_to_packets(&self) -> bool {
        self.rules() > 0 || self.non_accept_policies().next().is_some()
    }

    /// Whether the table holds anything a write left: a rule, a user chain
    /// (an empty hint chain too) or a policy other than ACCEPT.
    pub fn holds_state(&self) -> bool {
        self.applies_to_packets() || self.user_chains().next().is_some()
    }

    pub(super) fn entries(&self) -> TableEntries {
        TableEntries {
            rules: self.rules(),
            user_chains: self.user_chains().map(|chain| chain.name.clone()).collect(),
        }
    }
}

/// Walks the blob the way libiptc (and so `iptables-legacy-save`) parses it:
/// every entry but the `ERROR` ones is a rule, except the last entry of each
/// chain (a builtin chain's policy or a user chain's `RETURN` tail).
///
/// Returns None if the blob does not match `info` (the table was replaced by
/// one of the same size between the two reads) and an error if it is
/// malformed.
pub(super) fn walk(layout: &Layout, blob: &[u8], info: &TableInfo) -> io::Result<Option<TableContents>> {
    let mut contents = TableContents::default();
    let mut entries = 0u32;
    // The chain being walked: its name, whether it is built in, its
    // non-ERROR entries so far and the last one's target.
    let mut current: Option<(String, bool, u64, Entry)> = None;
    let mut offset = 0usize;
    let mut reached_end = false;
    // A built-in chain whose last entry is no policy: the blob is not the
    // table `info` describes.
    let mut policies_read = true;
    let mut close = |current: Option<(String, bool, u64, Entry)>, contents: &mut TableContents| {
        if let Some((name, builtin, in_chain_entries, last)) = current {
            let policy = if builtin {
                let policy = last.policy();
                policies_read &= policy.is_some();
                Some(policy.unwrap_or(Policy::Accept))
            } else {
                None
            };
            contents.chains.push(ChainContents {
                name,
                policy,
                rules: in_chain_entries.saturating_sub(1),
            });
        }
    };
    while offset < blob.len() {
        let entry = Entry::parse(layout, blob, offset)?;
        entries += 1;
        let is_error = entry.target_name() == ERROR_TARGET;
        let hook = info.hook_entries.iter().position(|&start| start == offset as u32);
        if is_error || hook.is_some() {
            // The previous chain's last entry was its policy or tail.
            close(current.take(), &mut contents);
        }
        let end = entry.end;
        if is_error {
            if end == blob.len() {
                reached_end = true;
            } else {
                current = Some((entry.error_name(), false, 0, entry));
            }
        } else {
            if let Some(index) = hook {
                current = Some((hook_chain(info.valid_hooks, index).to_string(), true, 0, entry));
            } else {
                match current.as_mut() {
                    Some((_, _, _, last)) => *last = entry,
                    None => return Err(invalid_data("an entry outside any chain")),
                }
            }
            if let Some((_, _, in_chain_entries, _)) = current.as_mut() {
                *in_chain_entries += 1;
            }
        }
        offset = end;
    }
    close(current.take(), &mut contents);
    if !reached_end {
        return Err(invalid_data("the table does not end with an ERROR entry"));
    }
    // The formula from the entry counts: each chain has one policy or tail,
    // each user chain a head, and the table an end.
    let user = contents.user_chains().count() as u64;
    let builtin = contents.chains.len() as u64 - user;
    let expected_rules = u64::from(info.num_entries).checked_sub(u64::from(info.builtin_chains()) + 2 * user + 1);
    let consistent = policies_read
        && entries == info.num_entries
        && builtin == u64::from(info.builtin_chains())
        && expected_rules == Some(contents.rules());
    Ok(consistent.then_some(contents))
}

/// The chain name of the `index`-th valid hook.
fn hook_chain(valid_hooks: u32, index: usize) -> &'static str {
    (0..NUM_HOOKS)
        .filter(|hook| valid_hooks & (1 << hook) != 0)
        .nth(index)
        .map_or("?", |hook| HOOK_CHAINS[hook])
}

/// One entry of the blob, bounds-checked.
struct Entry<'a> {
    target: &'a [u8],
    /// Offset of the next entry.
    end: usize,
}

impl<'a> Entry<'a> {
    fn parse(layout: &Layout, blob: &'a [u8], offset: usize) -> io::Result<Entry<'a>> {
        let fixed = blob
            .get(offset..offset + layout.entry_size)
            .ok_or_else(|| invalid_data("truncated entry"))?;
        let target_offset = usize::from(read_u16(fixed, layout.target_offset_at));
        let next_offset = usize::from(read_u16(fixed, layout.next_offset_at));
        if target_offset < layout.entry_size || target_offset + size_of::<EntryTarget>() > next_offset {
            return Err(invalid_data("bad target or next offset"));
        }
        let target = blob
            .get(offset + target_offset..offset + next_offset)
            .ok_or_else(|| invalid_data("entry runs past the table"))?;
        Ok(Entry {
            target,
            end: offset + next_offset,
        })
    }

    /// The target's name (`""` for the standard verdict target).
    fn target_name(&self) -> &'a [u8] {
        let at = offset_of!(EntryTarget, name);
        until_nul(&self.target[at..at + EXTENSION_MAXNAMELEN])
    }

    /// The policy a built-in chain's last entry carries: a standard target
    /// (no name) whose verdict is ACCEPT or DROP; None for anything else.
    fn policy(&self) -> Option<Policy> {
        if !self.target_name().is_empty() {
            return None;
        }
        let at = size_of::<EntryTarget>();
        let verdict = i32::from_ne_bytes(self.target.get(at..at + size_of::<i32>())?.try_into().ok()?);
        match verdict {
            VERDICT_ACCEPT => Some(Policy::Accept),
            VERDICT_DROP => Some(Policy::Drop),
            _ => None,
        }
    }

    /// An `ERROR` target's data (`xt_error_target.errorname`): a chain name.
    fn error_name(&self) -> String {
        String::from_utf8_lossy(until_nul(&self.target[size_of::<EntryTarget>()..])).into_owned()
    }
}

#[cfg(test)]
mod tests {
    //! An `ipt_entry` blob written out byte by byte at the offsets of the
    //! kernel headers (not the [`Layout`]'s): one rule, the INPUT policy
    //! DROP and the table's end. Its fields are in the machine's order: each
    //! is written as its big-endian bytes and reversed on a little-endian
    //! machine.
    use super::*;
    use crate::family::Family;

    /// Writes a field given as its big-endian bytes in the machine's order.
    fn put(blob: &mut [u8], at: usize, big_endian: &[u8]) {
        let field = &mut blob[at..at + big_endian.len()];
        field.copy_from_slice(big_endian);
        if cfg!(target_endian = "little") {
            field.reverse();
        }
    }

    /// A standard-target entry (152 bytes) whose verdict is `verdict` (big endian).
    fn standard_entry(blob: &mut [u8], at: usize, verdict: [u8; 4]) {
        put(blob, at + 88, &[0, 112]); // target_offset
        put(blob, at + 90, &[0, 152]); // next_offset
        put(blob, at + 96, &[0, 0, 0, 0, 0, 0, 0x01, 0x00]); // packets, never read
        put(blob, at + 112, &[0, 40]); // target_size; name "" (standard)
        put(blob, at + 144, &verdict);
    }

    #[test]
    fn a_blob_walks_to_the_chains_its_bytes_hold() {
        let mut blob = vec![0u8; 480];
        standard_entry(&mut blob, 0, [0xff, 0xff, 0xff, 0xfe]); // -2: ACCEPT, a rule
        standard_entry(&mut blob, 152, [0xff, 0xff, 0xff, 0xff]); // -1: DROP, the policy
        put(&mut blob, 304 + 88, &[0, 112]);
        put(&mut blob, 304 + 90, &[0, 176]);
        put(&mut blob, 304 + 112, &[0, 64]);
        blob[304 + 114..304 + 119].copy_from_slice(b"ERROR");
        blob[304 + 144..304 + 149].copy_from_slice(b"ERROR");
        let info = TableInfo {
            name: "filter".into(),
            valid_hooks: 1 << 1,
            num_entries: 3,
            size: 480,
            hook_entries: vec![0],
        };
        let contents = walk(&Layout::of(Family::Ipv4), &blob, &info).unwrap().unwrap();
        assert_eq!(
            contents.chains,
            [ChainContents {
                name: "INPUT".into(),
                policy: Some(Policy::Drop),
                rules: 1
            }]
        );
        // The same bytes read in the other byte order are no table.
        let mut swapped = blob.clone();
        for at in [88, 90, 152 + 88, 152 + 90, 304 + 88, 304 + 90] {
            swapped.swap(at, at + 1);
        }
        assert!(walk(&Layout::of(Family::Ipv4), &swapped, &info).is_err());
    }
}
