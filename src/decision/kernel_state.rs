//! The third source: the kernel's state, read directly and without side
//! effects. In order: kubelet's and kube-proxy's hint chains in the mangle
//! table (nft first: a hint in nft decides nft, then one in legacy decides
//! legacy), kube-proxy's nftables tables (they decide nft where legacy
//! holds no rules: such a table holds none of iptables' own, so it cannot
//! outweigh rules iptables wrote), then the rule counts of both backends
//! (see `counts`).
//!
//! A backend that cannot be read is unknown, never empty: its hint chains
//! are unknown, not absent. With no legacy table at all, nft decides
//! (nothing could favour legacy), and a wrapped call does not count nft's
//! rules. What it cannot
//! see: hint chains or tables made by something other than kubelet and
//! kube-proxy under the same names, and where netlink is refused and the
//! save tool cannot show them, kube-proxy's nftables tables.

use super::collector::Collector;
use super::counts::{read_rule_counts, RuleCounts};
use super::evidence::{Evidence, Finding, Source};
use super::reason::Reason;
use crate::kernel::modules::Presence;
use crate::kernel::{HintChain, KernelReader, HINT_CHAINS};
use crate::mode::Mode;

/// Reads the kernel's state; returns the rule counts when they were read.
pub(super) fn read_kernel(collector: &mut Collector, kernel: &mut KernelReader) -> Option<RuleCounts> {
    let nft_lookups = kernel.nft_lookups();
    let nft_hints = match &nft_lookups {
        Ok(reading) => reading.value.hint_chains.clone(),
        Err(_) => Vec::new(),
    };
    record_hints(
        collector,
        Mode::Nft,
        nft_lookups.as_ref().map(|r| (&r.value.hint_chains, &r.method)),
    );
    if let Some(hint) = nft_hints.first() {
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
            return None;
        }
    }

    let legacy_hints = kernel.legacy_hint_chains(collector.depth.stops_early());
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
        if collector.done() {
            return None;
        }
    }

    if let Ok(reading) = &nft_lookups {
        match &reading.value.kube_proxy_tables {
            Some(families) if !families.is_empty() => {
                // A native table holds nothing iptables wrote (kube-proxy's
                // nftables mode writes no iptables rule): it decides
                // iptables' backend only where legacy holds no iptables
                // rule to weigh against it.
                let legacy_rules = kernel.legacy_may_hold_rules();
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
                    if collector.done() {
                        return None;
                    }
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

    // No legacy table at all: legacy holds no rule, so no count can favour
    // it, and the lock file has no legacy table to stand beside. Whatever nft
    // holds, the answer is nft, so a wrapped call skips counting nft's rules
    // (a netlink round trip of lookups); `detect` decides the same way, for
    // the same reason, and still counts both as evidence. Only where
    // nf_tables is known to be there (its lookups answered): where it may be
    // lacking, the default below decides with that in mind.
    if nft_lookups.is_ok()
        && matches!(kernel.nf_tables_presence(), Presence::Present(_) | Presence::Askable(_))
        && kernel.legacy_has_no_tables()
    {
        collector.decide(
            Mode::Nft,
            Source::RuleCounts,
            "no legacy table exists, so legacy holds no rules and no count can favour it",
        );
        if collector.done() {
            return None;
        }
    }

    read_rule_counts(collector, kernel)
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
