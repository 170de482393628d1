//! The packets tried: one that no rule names anything of on each way,
//! and for each rule that one copy holds and the other does not hold in
//! the same table and chain, a packet its tests match (with the tests of
//! the first rule that jumps to its chain, up to a built-in chain), once
//! at the low and once at the high edge of its port ranges; and each
//! packet of a stale rule again with what a live rule that stops packets,
//! or lets them on (`ACCEPT`, `RETURN`), names (its protocol, interfaces,
//! addresses, ports) where the stale rule names nothing, at most
//! [`BLOCKS_MERGED`] rules of each kind a packet: a stale rule's
//! packet (`-s A`) rewritten into a live block's (`-i eth0`); and again
//! with what the block names of a reply (`-i eth1 --sport 8080`) named of
//! the packet it answers (`-o eth1 --dport 8080`); for a `DNAT`, a packet
//! already addressed where it sends. At most
//! [`CANDIDATES`] packets: a family's rules are read once, never each
//! against each.

use super::packet::{Packet, Way};
use super::rule::{Rule, Test};
use super::target::Action;
use super::walk::{Copy, ModelTable};
use std::collections::HashSet;

/// The most packets tried per family.
pub const CANDIDATES: usize = 256;

/// The live rules dropping or queueing packets, and those accepting or
/// returning them, each stale rule's packets are tried with again (this
/// many of each).
const BLOCKS_MERGED: usize = 16;

/// Prefixes excluded by a `! -s` each stale rule's packet is tried from
/// (the lowest, so the same state gives the same packets).
const EXCLUDED: usize = 4;

/// Callers followed up from a user chain.
const CALLERS: usize = 8;

/// The ways a packet meets a built-in chain on.
fn ways_of(chain: &[u8]) -> &'static [Way] {
    match chain {
        b"PREROUTING" => &[Way::Input, Way::Forward],
        b"INPUT" => &[Way::Input],
        b"FORWARD" => &[Way::Forward],
        b"OUTPUT" => &[Way::Output],
        b"POSTROUTING" => &[Way::Forward, Way::Output],
        _ => &[],
    }
}

/// The first rule of `table` that jumps or goes to `chain`, and its chain.
fn first_caller<'a>(table: &'a ModelTable, chain: &[u8]) -> Option<(&'a [u8], &'a Rule)> {
    let (caller, index) = table.first_callers.get(chain)?;
    Some((caller.as_slice(), table.chains.get(caller)?.get(*index)?))
}

/// Sets in `packet` what `rule`'s tests name, where not set already;
/// `high`: ports at the high edge of their ranges.
fn name_from(rule: &Rule, packet: &mut Packet, high: bool) {
    for cond in rule.conds.iter().filter(|c| !c.negated) {
        let edge = |ranges: &[(u16, u16)]| ranges.first().map(|&(low, top)| if high { top } else { low });
        match &cond.test {
            Test::Protocol(p) if p.as_slice() != b"all" && p.as_slice() != b"0" => packet.protocol = p.clone(),
            Test::Source(net) => packet.source = packet.source.or(Some(net.address)),
            Test::Destination(net) => packet.destination = packet.destination.or(Some(net.address)),
            Test::InInterface(name) if packet.way != Way::Output && packet.in_interface.is_none() => {
                packet.in_interface = Some(interface(name))
            }
            Test::OutInterface(name) if packet.way != Way::Input && packet.out_interface.is_none() => {
                packet.out_interface = Some(interface(name))
            }
            Test::DestinationPorts(r) | Test::AnyPorts(r) => {
                packet.destination_port = packet.destination_port.or(edge(r))
            }
            Test::SourcePorts(r) => packet.source_port = packet.source_port.or(edge(r)),
            Test::States { states, .. } => packet.state = states.first().copied().unwrap_or(packet.state),
            Test::Mark(value, mask) => packet.mark = (packet.mark & !mask) | (value & mask),
            Test::Connmark(value, mask) => packet.connmark = (packet.connmark & !mask) | (value & mask),
            _ => {}
        }
    }
}

/// `packet` with what `block` names where `packet` names nothing, but
/// its marks and state (and its protocol where `rule`, the stale rule it
/// was made for, names one): what a stale rule writes or meets is the
/// stale rule's packet's, not what the block reads.
fn merged(packet: &Packet, rule: &Rule, block: &Rule) -> Packet {
    let mut merged = packet.clone();
    name_from(block, &mut merged, false);
    if rule.conds.iter().any(|c| matches!(c.test, Test::Protocol(_))) {
        merged.protocol = packet.protocol.clone();
    }
    merged.mark = packet.mark;
    merged.connmark = packet.connmark;
    merged.state = packet.state;
    merged
}

/// `rule` with what it names of a packet's source named of its
/// destination, and of its destination named of its source: a block of
/// replies read as what names the packets they answer.
fn reversed(rule: &Rule) -> Rule {
    let mut reversed = rule.clone();
    for cond in &mut reversed.conds {
        cond.test = match std::mem::replace(&mut cond.test, Test::Always) {
            Test::Source(net) => Test::Destination(net),
            Test::Destination(net) => Test::Source(net),
            Test::InInterface(name) => Test::OutInterface(name),
            Test::OutInterface(name) => Test::InInterface(name),
            Test::SourcePorts(r) => Test::DestinationPorts(r),
            Test::DestinationPorts(r) => Test::SourcePorts(r),
            other => other,
        };
    }
    reversed
}

/// `rule` without its tests of addresses.
fn without_addresses(rule: &Rule) -> Rule {
    let mut bare = rule.clone();
    bare.conds
        .retain(|c| !matches!(c.test, Test::Source(_) | Test::Destination(_)));
    bare
}

/// `rule` of `chain` with the tests of the first rules that jump or go to
/// its chain, up to a built-in chain, added.
fn with_callers(table: &ModelTable, chain: &[u8], rule: &Rule) -> Rule {
    let mut whole = rule.clone();
    let mut at = chain;
    for _ in 0..CALLERS {
        let Some((caller_chain, caller)) = first_caller(table, at) else {
            break;
        };
        whole.conds.extend(caller.conds.iter().cloned());
        at = caller_chain;
    }
    whole
}

/// An interface `-i`/`-o`'s name matches (`eth+`: `eth0`).
fn interface(pattern: &[u8]) -> Vec<u8> {
    match pattern.strip_suffix(b"+") {
        Some(prefix) => [prefix, b"0"].concat(),
        None => pattern.to_vec(),
    }
}

/// The packets `rule` of `chain` in `table` is tried with.
fn packets_for(table: &ModelTable, chain: &[u8], rule: &Rule) -> Vec<Packet> {
    // The rule, then the callers up to a built-in chain.
    let mut path = vec![rule];
    let mut at = chain;
    while ways_of(at).is_empty() && path.len() <= CALLERS {
        let Some((caller_chain, caller)) = first_caller(table, at) else {
            break;
        };
        path.push(caller);
        at = caller_chain;
    }
    let mut packets = Vec::new();
    for &way in ways_of(at) {
        for high in [false, true] {
            let mut packet = Packet::unnamed(way);
            for rule in &path {
                name_from(rule, &mut packet, high);
            }
            // A `DNAT` to where the packet already goes rewrites nothing.
            let same = match (&rule.action, packet.destination) {
                (Action::Dnat(Some(to), port), None) => Some(Packet {
                    destination: Some(*to),
                    destination_port: packet.destination_port.or(*port),
                    ..packet.clone()
                }),
                _ => None,
            };
            packets.push(packet);
            packets.extend(same);
        }
    }
    packets
}

/// The packets tried for two copies of a family (see the module's note),
/// at most [`CANDIDATES`]; the first one of each way names nothing.
pub fn candidates(stale: &Copy, live: &Copy) -> Vec<Packet> {
    let mut seen = HashSet::new();
    let mut packets = Vec::new();
    let mut add = |packet: Packet, packets: &mut Vec<Packet>| {
        if packets.len() < CANDIDATES && seen.insert(packet.clone()) {
            packets.push(packet);
        }
    };
    for way in [Way::Input, Way::Forward, Way::Output] {
        add(Packet::unnamed(way), &mut packets);
    }
    // In the order of the tables, then of the chains' names: the same
    // state gives the same packets, and so the same witness, every run.
    // Each with what its chain's callers test, up to a built-in chain
    // (`-A FORWARD -i eth0 -j NP`, `-A NP -p tcp --dport 8080 -j DROP`).
    let live_rules = || {
        live.tables.iter().flat_map(|(_, table)| {
            let mut chains: Vec<_> = table.chains.iter().collect();
            chains.sort_by(|a, b| a.0.cmp(b.0));
            chains
                .into_iter()
                .flat_map(move |(chain, rules)| rules.iter().map(move |rule| with_callers(table, chain, rule)))
        })
    };
    // The rules stopping packets, then those letting them on before a
    // policy or a later block does (`-s A -m mark ! --mark M -j ACCEPT`
    // before a `DROP` policy): what either names, a stale change can move
    // a packet across.
    let blocks: Vec<Rule> = live_rules()
        .filter(|rule| matches!(rule.action, Action::Drop | Action::Queue))
        .take(BLOCKS_MERGED)
        .collect();
    let accepts: Vec<Rule> = live_rules()
        .filter(|rule| matches!(rule.action, Action::Accept | Action::Return))
        .take(BLOCKS_MERGED)
        .collect();
    // The lowest prefixes a rule of either copy excludes a source from.
    let mut excluded: Vec<std::net::IpAddr> = [stale, live]
        .iter()
        .flat_map(|copy| copy.tables.iter().flat_map(|(_, t)| t.chains.values().flatten()))
        .flat_map(|rule| &rule.conds)
        .filter_map(|c| match (&c.test, c.negated) {
            (Test::Source(net), true) => Some(net.address),
            _ => None,
        })
        .collect();
    excluded.sort();
    excluded.dedup();
    excluded.truncate(EXCLUDED);
    // Each copy's rules the other lacks, taken in turn.
    let mut lacking = [differing(stale, live), differing(live, stale)].map(Vec::into_iter);
    loop {
        let mut any = false;
        for (from_stale, rules) in [true, false].into_iter().zip(&mut lacking) {
            if let Some((table, chain, rule)) = rules.next() {
                any = true;
                for packet in packets_for(table, chain, rule) {
                    // The blocks' first, then the packet as it is, then the
                    // accepts' (a witness names the fewest things it can).
                    // Each block as the packet's, and as its reply's: with
                    // the addresses, and without (a reply to a rewritten
                    // source is addressed to it, not to the packet's).
                    let merges = |rules: &[Rule]| -> Vec<Packet> {
                        match from_stale {
                            true => rules
                                .iter()
                                .flat_map(|other| {
                                    let reply = reversed(other);
                                    let bare = without_addresses(&reply);
                                    [other.clone(), reply, bare]
                                })
                                .map(|other| merged(&packet, rule, &other))
                                .collect(),
                            false => Vec::new(),
                        }
                    };
                    let (stopped, let_on) = (merges(&blocks), merges(&accepts));
                    // From inside a prefix a rule excludes (`! -s 10.0.1.0/24`).
                    let inside = excluded
                        .iter()
                        .filter(|_| from_stale && packet.source.is_none())
                        .map(|address| Packet {
                            source: Some(*address),
                            ..packet.clone()
                        });
                    let inside: Vec<Packet> = inside.collect();
                    for candidate in stopped.into_iter().chain([packet.clone()]).chain(let_on).chain(inside) {
                        add(candidate, &mut packets);
                    }
                }
            }
        }
        if !any || packets.len() >= CANDIDATES {
            return packets;
        }
    }
}

/// The rules of `one` that `other` does not hold in the same table and
/// chain, in the order of its tables and chains.
fn differing<'a>(one: &'a Copy, other: &Copy) -> Vec<(&'a ModelTable, &'a [u8], &'a Rule)> {
    let held = other.rules_held();
    let mut found = Vec::new();
    for (name, table) in &one.tables {
        let mut chains: Vec<_> = table.chains.iter().collect();
        chains.sort_by(|a, b| a.0.cmp(b.0));
        for (chain, rules) in chains {
            for rule in rules {
                if !held.contains(&(name.as_slice(), chain.as_slice(), rule.text.as_slice())) {
                    found.push((table, chain.as_slice(), rule));
                }
            }
        }
    }
    found
}
