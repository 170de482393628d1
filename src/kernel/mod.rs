//! Reads the kernel's firewall state without side effects, and only as much
//! of it as a question needs: legacy x_tables through getsockopt, nf_tables
//! through netlink, each falling back to its save tool when the kernel
//! refuses the direct query. A backend is only asked once [`modules`] shows
//! it is in the kernel (asking could load it); a backend whose state cannot
//! be read is unknown, never empty, and one whose refusal proves that its
//! own backend program would be refused too is also unusable from this
//! process ([`KernelReader::unusable`]).
//!
//! This module holds the tables and chains every reader names and the types
//! of the readings; [`KernelReader`] (in `reader`) opens the sources and
//! asks them, [`nft`] and [`legacy`] speak to the kernel.

mod bytes;
pub mod count_cache;
pub mod ip_rules;
pub mod ipset;
pub mod legacy;
pub mod modules;
pub mod nft;
pub mod procfs;
mod reader;
pub mod save_tools;

use crate::family::Family;
use crate::mode::Mode;

pub use reader::KernelReader;

/// The tables iptables-nft and iptables-legacy use; only these are counted.
pub const IPTABLES_TABLES: [&str; 5] = ["raw", "mangle", "filter", "security", "nat"];

/// The built-in chains of each iptables table, as iptables-nft creates them.
pub const BUILTIN_CHAINS: [(&str, &[&str]); 5] = [
    ("raw", &["PREROUTING", "OUTPUT"]),
    ("mangle", &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]),
    ("filter", &["INPUT", "FORWARD", "OUTPUT"]),
    ("security", &["INPUT", "FORWARD", "OUTPUT"]),
    ("nat", &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"]),
];

/// Hint chains, created in the mangle table (IPv4 and IPv6) with the host's
/// iptables: kubelet's two and kube-proxy's canary. All rank alike.
pub const HINT_CHAINS: [&str; 3] = ["KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY", "KUBE-PROXY-CANARY"];

/// The nftables table kube-proxy keeps its rules in when in nftables mode.
pub const KUBE_PROXY_TABLE: &str = "kube-proxy";

/// A value and how it was obtained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading<T> {
    pub value: T,
    pub method: String,
}

/// A rule count known to lie within `low..=high`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleBounds {
    pub low: u64,
    pub high: u64,
}

impl RuleBounds {
    pub fn exact(rules: u64) -> RuleBounds {
        RuleBounds {
            low: rules,
            high: rules,
        }
    }

    pub fn is_exact(&self) -> bool {
        self.low == self.high
    }
}

/// A hint chain found in one backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HintChain {
    pub family: Family,
    pub chain: &'static str,
}

/// What the nf_tables point lookups found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NftLookups {
    pub hint_chains: Vec<HintChain>,
    /// Families with a `kube-proxy` table; `None` when it could not be asked.
    pub kube_proxy_tables: Option<Vec<Family>>,
}

/// How the rule counts compare, once known well enough.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountVerdict {
    /// Legacy holds strictly more rules.
    Legacy,
    /// nft holds strictly more rules.
    Nft,
    /// Both hold the same number: no reason to pick either.
    Tie,
}

impl CountVerdict {
    pub fn mode(self) -> Option<Mode> {
        match self {
            CountVerdict::Legacy => Some(Mode::Legacy),
            CountVerdict::Nft => Some(Mode::Nft),
            CountVerdict::Tie => None,
        }
    }
}

/// Both backends' counts (IPv4 and IPv6 together) and their verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountComparison {
    pub legacy: Reading<RuleBounds>,
    pub nft: Reading<RuleBounds>,
    pub verdict: CountVerdict,
}

/// The verdict the bounds already settle, if any.
pub fn verdict_from_bounds(legacy: RuleBounds, nft: RuleBounds) -> Option<CountVerdict> {
    if legacy.low > nft.high {
        Some(CountVerdict::Legacy)
    } else if legacy.high < nft.low {
        Some(CountVerdict::Nft)
    } else if legacy.is_exact() && nft.is_exact() && legacy.low == nft.low {
        Some(CountVerdict::Tie)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(low: u64, high: u64) -> RuleBounds {
        RuleBounds { low, high }
    }

    #[test]
    fn bounds_settle_only_when_apart() {
        assert_eq!(verdict_from_bounds(b(10, 20), b(0, 9)), Some(CountVerdict::Legacy));
        assert_eq!(verdict_from_bounds(b(0, 9), b(10, 20)), Some(CountVerdict::Nft));
        assert_eq!(verdict_from_bounds(b(0, 0), b(0, 0)), Some(CountVerdict::Tie));
        assert_eq!(verdict_from_bounds(b(5, 5), b(5, 5)), Some(CountVerdict::Tie));
        assert_eq!(verdict_from_bounds(b(0, 10), b(5, 5)), None);
        assert_eq!(verdict_from_bounds(b(5, 5), b(5, 9)), None);
        assert_eq!(verdict_from_bounds(b(5, 5), b(6, 9)), Some(CountVerdict::Nft));
        // An nft dump that stopped one past the exact legacy count.
        assert_eq!(verdict_from_bounds(b(7, 7), b(8, 100)), Some(CountVerdict::Nft));
    }
}
