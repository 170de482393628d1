//! Which stale tables' twins do not count because another nftables base
//! chain meets packets between the two backends' copies.
//!
//! Both backends hook an iptables table at the same point: the same hook
//! and, but for `security`, the same priority (legacy's `NF_IP_PRI_*`, the
//! priorities iptables-nft gives its base chains). A base chain of another
//! table at that very hook and priority (a native `inet` or `ip` table's,
//! or one of a table not iptables-nft's own) runs in the order the hooks
//! were registered, so it can run after the live copy and before the stale
//! one: what it changes (a `meta mark set 0`) the stale copy may change
//! back, and the live twin, having run before it, cannot stand in for
//! that. Such a table's twins do not count; it goes only where nothing in
//! it needs a twin.

use super::find;
use crate::family::Family;
use crate::kernel::modules;
use crate::kernel::nft::{HookedChain, NftSocket};
use crate::kernel::IPTABLES_TABLES;

/// Per iptables table whose hook and priority one of `others` (the base
/// chains not iptables-nft's own, from [`others`]) shares: its name and
/// that chain, as `nft` names it.
pub fn shared(others: &[HookedChain]) -> Vec<(&'static str, String)> {
    IPTABLES_TABLES
        .iter()
        .filter_map(|&table| {
            let points: Vec<(u32, i32)> = find::builtin_chains_of(table)
                .iter()
                .filter_map(|chain| find::iptables_nft_base_chain(table, chain))
                .map(|(hook, priority, _)| (hook, priority))
                .collect();
            others
                .iter()
                .find(|h| points.contains(&(h.hook, h.priority)))
                .map(|h| (table, h.shown.clone()))
        })
        .collect()
}

/// Every base chain `family`'s packets meet that is not iptables-nft's
/// own (a native `inet`, `ip` or `ip6` table's), at any priority: what the
/// fates cannot read. Empty where nf_tables is not in the kernel. Read
/// only. `own`: iptables-nft's own tables with their base chains, where
/// already read (the live save's).
pub fn others(family: Family, own: Option<&[(&'static str, Vec<String>)]>) -> Result<Vec<HookedChain>, String> {
    if !modules::nf_tables_readable()? {
        return Ok(Vec::new());
    }
    let unread = |e: std::io::Error| format!("the nftables base chains of {} cannot be read: {e}", family.label());
    let socket = NftSocket::open().map_err(unread)?;
    let read;
    let own = match own {
        Some(own) => own,
        None => {
            read = find::nft_own_base_chains(&socket, family).map_err(unread)?;
            &read[..]
        }
    };
    let hooked = socket.hooked_chains(family).map_err(unread)?;
    let is_own = |h: &HookedChain| {
        h.in_family
            && own
                .iter()
                .any(|(table, base)| *table == h.table && base.contains(&h.chain))
    };
    Ok(hooked.into_iter().filter(|h| !is_own(h)).collect())
}
