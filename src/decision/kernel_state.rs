//! The third source: the kernel's state, read directly and without side
//! effects. In order: kubelet's and kube-proxy's hint chains in the mangle
//! table (nft first: a hint in nft decides nft, then one in legacy decides
//! legacy), kube-proxy's nftables tables (they decide nft where legacy
//! holds no rules: such a table holds none of iptables' own, so it cannot
//! outweigh rules iptables wrote), then the rule counts of both backends
//! (see `counts`). Each step is a function `decide` calls in turn; the
//! nft lookups the first one makes (one round trip) serve the later ones.
//!
//! A backend that cannot be read is unknown, never empty: its hint chains
//! are unknown, not absent. With no legacy table at all, nft decides
//! (nothing could favour legacy), and a wrapped call does not count nft's
//! rules. What it cannot
//! see: hint chains or tables made by something other than kubelet and
//! kube-proxy under the same names, and where netlink is refused and the
//! save tool cannot show them, kube-proxy's nftables tables.

use super::collector::Collector;
use super::evidence::{Evidence, Finding};
use super::host::Host;
use super::reason::Reason;
use super::source::Source;
use crate::kernel::modules::Presence;
use crate::kernel::{HintChain, NftLookups, Reading, HINT_CHAINS};
use crate::mode::Mode;

/// nf_tables' point lookups, as the hint chains read them.
pub(super) type NftReading = Result<Reading<NftLookups>, String>;

/// Reads the hint chains, nft's (with kube-proxy's tables, in the same
/// lookups) then legacy's; a hint in nft decides nft, then one in legacy
/// decides legacy. Returns nft's lookups for the steps after it.
pub(super) fn read_hint_chains(collector: &mut Collector, host: &mut impl Host) -> NftReading {
    let nft_lookups = host.nft_lookups();
    record_hints(
        collector,
        Mode::Nft,
        nft_lookups.as_ref().map(|r| (&r.value.hint_chains, &r.method)),
    );
    if let Some(hint) = nft_lookups.as_ref().ok().and_then(|r| r.value.hint_chains.first()) {
        collector.decide(
            Mode::Nft,
            Source::HintChain,
            Reason::HintChain {
                chain: hint.chain,
                family: hint.family,
                found_in: Mode::Nft,
                nft_read: true,
            },
        );
        if collector.done() {
            return nft_lookups;
        }
    }

    let legacy_hints = host.legacy_hint_chains(collector.depth.stops_early());
    record_hints(
        collector,
        Mode::Legacy,
        legacy_hints.as_ref().map(|r| (&r.value, &r.method)),
    );
    if let Some(hint) = legacy_hints.as_ref().ok().and_then(|r| r.value.first()) {
        collector.decide(
            Mode::Legacy,
            Source::HintChain,
            Reason::HintChain {
                chain: hint.chain,
                family: hint.family,
                found_in: Mode::Legacy,
                nft_read: nft_lookups.is_ok(),
            },
        );
    }
    nft_lookups
}

/// Kube-proxy's nftables tables, from nft's lookups: they decide nft where
/// legacy holds no rules.
pub(super) fn read_kube_proxy_tables(collector: &mut Collector, host: &mut impl Host, nft_lookups: &NftReading) {
    let Ok(reading) = nft_lookups else { return };
    match &reading.value.kube_proxy_tables {
        Some(families) if !families.is_empty() => {
            // A native table holds nothing iptables wrote (kube-proxy's
            // nftables mode writes no iptables rule): it decides
            // iptables' backend only where legacy holds no iptables
            // rule to weigh against it.
            let legacy_rules = host.legacy_may_hold_rules();
            let decides = !matches!(legacy_rules, Ok(true));
            for family in families {
                collector.add(|| Evidence {
                    source: Source::KubeProxyTable,
                    location: format!("nft table {} kube-proxy", family.nft_name()),
                    finding: Finding::Known(if decides {
                        "present".into()
                    } else {
                        "present, but it holds no iptables rules and legacy may hold some: the rule counts decide"
                            .into()
                    }),
                    method: reading.method.clone(),
                    points_to: decides.then_some(Mode::Nft),
                });
            }
            if decides {
                let family = families[0];
                let legacy = match legacy_rules {
                    Ok(_) => "legacy holds no rules",
                    Err(_) => "legacy cannot be read",
                };
                collector.decide(
                    Mode::Nft,
                    Source::KubeProxyTable,
                    format!("kube-proxy's nftables table found ({}), {legacy}", family.label()),
                );
            }
        }
        Some(_) => {}
        None => collector.add(|| Evidence {
            source: Source::KubeProxyTable,
            location: "nft tables ip/ip6 kube-proxy".into(),
            finding: Finding::unknown_aside("netlink refused; the save tool cannot show them"),
            method: reading.method.clone(),
            points_to: None,
        }),
    }
}

/// No legacy table at all: legacy holds no rule, so no count can favour
/// it, and the lock file has no legacy table to stand beside. Whatever nft
/// holds, the answer is nft, so a wrapped call skips counting nft's rules
/// (a netlink round trip of lookups); `detect` decides the same way, for
/// the same reason, and still counts both as evidence. Only where
/// nf_tables is known to be there (its lookups answered): where it may be
/// lacking, the default decides with that in mind.
pub(super) fn read_absent_legacy(collector: &mut Collector, host: &mut impl Host, nft_lookups: &NftReading) {
    if nft_lookups.is_ok()
        && matches!(host.nf_tables_presence(), Presence::Present(_) | Presence::Askable(_))
        && host.legacy_has_no_tables()
    {
        collector.decide(
            Mode::Nft,
            Source::RuleCounts,
            "no legacy table exists, so legacy holds no rules and no count can favour it",
        );
    }
}

/// Records one backend's hint chains: each one found, absent when none was,
/// unknown when they could not be read.
fn record_hints(collector: &mut Collector, mode: Mode, reading: Result<(&Vec<HintChain>, &String), &String>) {
    match reading {
        Ok((hints, method)) => {
            if hints.is_empty() {
                collector.add(|| Evidence {
                    source: Source::HintChain,
                    location: format!("{mode} mangle chains {}", HINT_CHAINS.join(", ")),
                    finding: Finding::Absent("absent (ipv4, ipv6)".into()),
                    method: method.clone(),
                    points_to: None,
                });
            }
            for hint in hints {
                collector.add(|| Evidence {
                    source: Source::HintChain,
                    location: hint_location(mode, hint),
                    finding: Finding::Known("present".into()),
                    method: method.clone(),
                    points_to: Some(mode),
                });
            }
        }
        Err(why) => collector.add(|| Evidence {
            source: Source::HintChain,
            location: format!("{mode} mangle hint chains"),
            finding: Finding::unknown(why.as_str()),
            method: "none".into(),
            points_to: None,
        }),
    }
}

fn hint_location(mode: Mode, hint: &HintChain) -> String {
    format!("{} {} mangle chain {}", mode, hint.family.label(), hint.chain)
}
