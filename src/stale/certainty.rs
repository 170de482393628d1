//! Whether a family's decision is one no single source can fake: the
//! evidence that contradicts it, one line per piece.
//!
//! A decision (by the override or the host link: nothing else is certain
//! enough to start from, see [`super::certainty()`]) is contradicted by
//! any host link candidate that exists and points to the other backend (all of them
//! are read, not only the first: `/etc/alternatives`, `/usr/sbin`, `/sbin`,
//! NixOS's, k3s's `aux/` links; for IPv6 the `ip6tables` ones, and the
//! `iptables` ones only where no `ip6tables` one exists) or exists and
//! cannot tell (a regular file, a dangling link, a link to a name that is
//! no backend), and by
//! kubelet's or kube-proxy's hint chains present in the family in the
//! backend to be emptied and not in the chosen one, chain by chain
//! (kubelet writes `KUBE-IPTABLES-HINT` and `KUBE-KUBELET-CANARY`,
//! kube-proxy `KUBE-PROXY-CANARY`), and by kube-proxy's nftables table in
//! nft when the decision is legacy: there, that writer still uses the
//! other backend. Hint chains that cannot be read contradict too: nothing
//! shows they are absent. So do a known firewall writer's chains (Docker,
//! Calico, Cilium, flannel, ufw, netavark, the CNI plugins) in the backend
//! to be emptied that the chosen one does not hold alike, chain by chain,
//! with rules where they have rules.

use super::find;
use crate::decision::Decision;
use crate::escape::Shown as _;
use crate::family::Family;
use crate::host_link::{self, HostLinks};
use crate::kernel::KernelReader;
use crate::mode::Mode;

/// The hint chains of each writer: kubelet writes two, kube-proxy one. A
/// writer's chain in the backend to be emptied and not in the chosen one
/// says the writer still uses the other backend: a writer that moved
/// writes all of its chains anew, and one stray empty chain (which any
/// container can leave) does not stand for a writer's whole state.
const WRITERS: [&[&str]; 2] = [&["KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"], &["KUBE-PROXY-CANARY"]];

/// The evidence contradicting `decision` for `family`, one line each
/// (empty: nothing contradicts it). `stale` is what the other backend
/// holds in the family, `chosen` what the decided one holds.
pub fn contradictions(
    decision: &Decision,
    family: Family,
    kernel: &mut KernelReader,
    stale: &find::Finding,
    chosen: &find::Finding,
) -> Vec<String> {
    let mode = decision.mode;
    let mut lines = Vec::new();
    if let HostLinks::Found { link, later, .. } = host_link::read(&host_link::host_root(), family, true) {
        let candidates: Vec<&host_link::HostLink> = std::iter::once(&link).chain(&later).collect();
        for candidate in own_names_first(family, candidates) {
            let shown = match candidate.shown_chain() {
                chain if chain.is_empty() => candidate.path.shown().to_string(),
                chain => format!("{} {chain}", candidate.path.shown()),
            };
            if let Err(why) = &candidate.answer {
                lines.push(format!("host link {shown} exists but cannot tell which backend: {why}"));
            } else if candidate.answer == Ok(mode.other()) {
                lines.push(format!("host link {shown} points to {}", mode.other()));
            }
        }
    }
    let hints = |backend: Mode, kernel: &mut KernelReader| -> Result<Vec<&'static str>, String> {
        let found = match backend {
            Mode::Nft => kernel.nft_lookups().map(|r| r.value.hint_chains)?,
            Mode::Legacy => kernel.legacy_hint_chains(false).map(|r| r.value)?,
        };
        Ok(found.iter().filter(|h| h.family == family).map(|h| h.chain).collect())
    };
    let in_stale = hints(mode.other(), kernel);
    let in_chosen = hints(mode, kernel);
    match (&in_stale, &in_chosen) {
        // The stale backend itself cannot be read: nothing is removed, for
        // that reason, which says what reading it needs.
        (Err(_), _) if stale.unknown().is_some() => {}
        (Err(why), _) => lines.push(format!("{}'s hint chains cannot be read: {why}", mode.other())),
        (Ok(stale_hints), Err(why)) if !stale_hints.is_empty() => lines.push(format!(
            "{} {} holds hint chains ({}), and whether {mode} holds any cannot be read: {why}",
            mode.other(),
            family.label(),
            stale_hints.join(", ")
        )),
        (Ok(stale_hints), Ok(chosen_hints)) => {
            for writer in WRITERS {
                let missing = stale_hints
                    .iter()
                    .filter(|c| writer.contains(c) && !chosen_hints.contains(c));
                for chain in missing {
                    lines.push(format!(
                        "{} {} mangle chain {chain} (a hint chain kubelet or kube-proxy writes) is in {} only, the backend to be emptied",
                        mode.other(),
                        family.label(),
                        mode.other()
                    ));
                }
            }
        }
        _ => {}
    }
    lines.extend(writer_chains_only_in(stale, chosen));
    if mode == Mode::Legacy {
        if let Ok(reading) = kernel.nft_lookups() {
            if reading.value.kube_proxy_tables.is_some_and(|t| t.contains(&family)) {
                lines.push(format!(
                    "nft table {} kube-proxy (kube-proxy's nftables mode) is there, in the backend to be emptied",
                    family.nft_name()
                ));
            }
        }
    }
    lines
}

/// Firewall writers known by the names of the user chains they make, and
/// those prefixes. A writer that moved to the chosen backend wrote each of
/// its chains there anew, with its rules: each of its chains holding rules
/// in the backend to be emptied must be in the chosen one too, in the same
/// table, holding rules (an empty chain is what anybody can make: an
/// admin's `iptables -N DOCKER-USER` does not stand for Docker's state),
/// and each of its empty chains must be there too, empty or not (Docker
/// with no published port leaves its `DOCKER` chain empty in both).
const WRITER_CHAIN_PREFIXES: [(&str, &[&str]); 7] = [
    ("Docker", &["DOCKER"]),
    ("Calico", &["cali-"]),
    ("Cilium", &["CILIUM_"]),
    ("flannel", &["FLANNEL-"]),
    ("ufw", &["ufw-", "ufw6-"]),
    ("netavark", &["NETAVARK"]),
    ("CNI plugins", &["CNI-"]),
];

/// One line per writer whose user chains in `stale` the decided backend
/// (`chosen`, the same family) does not hold alike: chain by chain, in the
/// same table, with rules where the stale one has rules.
fn writer_chains_only_in(stale: &find::Finding, chosen: &find::Finding) -> Vec<String> {
    let (mode, family) = (chosen.backend, chosen.family);
    let writer_chains = |finding: &find::Finding, prefixes: &[&str]| -> Vec<(&'static str, String, u64)> {
        finding
            .tables()
            .iter()
            .flat_map(|t| {
                t.chains
                    .iter()
                    .filter(|c| !c.builtin && prefixes.iter().any(|p| c.name.starts_with(p)))
                    .map(move |c| (t.name, c.name.clone(), c.rules))
            })
            .collect()
    };
    if chosen.unknown().is_some() {
        return Vec::new(); // the removal stops on that by itself
    }
    let mut lines = Vec::new();
    for (writer, prefixes) in WRITER_CHAIN_PREFIXES {
        let chains = writer_chains(stale, prefixes);
        if chains.is_empty() {
            continue;
        }
        let in_chosen = writer_chains(chosen, prefixes);
        let mut missing: Vec<String> = chains
            .iter()
            .filter(|(table, name, rules)| {
                !in_chosen
                    .iter()
                    .any(|(t, n, r)| t == table && n == name && (*rules == 0 || *r > 0))
            })
            .map(|(table, name, rules)| match rules {
                0 => format!("{table} {name}"),
                1 => format!("{table} {name} with 1 rule"),
                n => format!("{table} {name} with {n} rules"),
            })
            .collect();
        if missing.is_empty() {
            continue;
        }
        missing.sort_unstable();
        let more = missing.len().saturating_sub(3);
        missing.truncate(3);
        lines.push(format!(
            "{} {} holds {writer}'s chains that {mode} does not hold alike ({}{}): {writer} still writes to {} (a writer that moved wrote each of its chains anew, with its rules; an empty chain is what anybody can make)",
            mode.other(),
            family.label(),
            missing.join(", "),
            if more > 0 { format!(", and {more} more") } else { String::new() },
            mode.other()
        ));
    }
    lines
}

/// The candidates that speak for `family`: where one bears the family's
/// own name (`ip6tables`), the `iptables` ones read for a layout that
/// links only the IPv4 names do not (a Debian host switched one
/// alternatives group at a time has `ip6tables -> ip6tables-nft` beside
/// `iptables -> iptables-legacy`).
fn own_names_first(family: Family, candidates: Vec<&host_link::HostLink>) -> Vec<&host_link::HostLink> {
    let own = |c: &&host_link::HostLink| c.path.file_name().is_some_and(|n| n == family.program());
    if candidates.iter().any(own) {
        candidates.into_iter().filter(own).collect()
    } else {
        candidates
    }
}
