//! Whether removing a stale family changes what a concrete packet meets:
//! packets tried ([`candidates`]) through the kernel as it runs now (each
//! hook's tables of both backends, in every order [`order`] tries: which
//! registered last is not read, so a packet stopped in any order is
//! stopped now, the order said where not every one stops it) and through
//! the host's backend alone. A packet stopped now
//! (dropped or queued) that passes after is a witness: removing the family
//! opens a flow. A packet meets what an earlier one like it wrote (a
//! `recent` list), so each is sent twice; and each is sent again after
//! each packet that the stale copy's rules write into a list for
//! ([`primer::PRIMERS`] at most), meeting what it wrote.
//!
//! A packet that passes after, but meets a rule not modelled that only
//! the stale copy holds (or that a change only it made leads to) now,
//! holds its table: "cannot tell", naming the rule and the packet.
//!
//! The model ([`rule`], [`walk`]) is three-valued: a rule it cannot
//! evaluate makes the fate unknown, never "passes" nor "stopped"; an
//! unknown fate names the rule ("cannot tell"). A witness holds its
//! family; finding none holds nothing less: the judgement by twins
//! ([`super::opening`]) still decides what goes.

mod candidates;
mod host;
mod order;
mod packet;
mod primer;
mod rule;
mod target;
mod walk;
mod witness;

#[cfg(test)]
mod tests;

use crate::stale::saved_rules::SavedTable;
pub use host::Host;
use packet::{ListEntry, Packet};
use primer::primers;
use walk::{fate, fate_ordered, Copy, End, Fate, Step};
use witness::{end_said, reply_said, said_steps, unknown_said};
pub use witness::{said, Found, Witness};

/// A rule's table, chain and text as saved.
pub type Place = (Vec<u8>, Vec<u8>, Vec<u8>);

/// The fate of `packet` sent twice through `copies` (the second meets
/// what the first wrote): the first's fate, unless the second's is
/// stopped or unknown where the first passed; and whether the second's.
fn twice(copies: &[&Copy], order: u8, host: &Host, packet: &Packet) -> (Fate, bool) {
    let first = fate_ordered(copies, order, host, packet);
    if first.end != End::Passed {
        return (first, false);
    }
    let mut again = packet.clone();
    again.lists = first.packet.lists.clone();
    let mut second = fate_ordered(copies, order, host, &again);
    if second.end == End::Passed {
        return (first, false);
    }
    // What the first wrote, then what decided the second.
    second.steps.splice(0..0, first.steps);
    (second, true)
}

/// A packet tried: what is said of it, its fates now (each order) and
/// after (each with whether a second such packet decided it), the first
/// stale rule of the packet it was sent after, and the packet as sent
/// after (none for a reply, whose own reply is not followed).
struct Trial {
    said: String,
    nows: Vec<(Fate, bool)>,
    /// Each of `nows`' order ([`order::orders`]).
    orders: Vec<u8>,
    after: (Fate, bool),
    primed_place: Option<Place>,
    sent: Option<Packet>,
}

/// The place of the first rule of the `stale_name` copy among `steps`.
fn first_stale(steps: &[Step], stale_name: &str) -> Option<Place> {
    steps
        .iter()
        .find(|s| s.backend == stale_name && s.rule.is_some())
        .map(|s| (s.table.clone(), s.chain.clone(), s.text.clone()))
}

/// `packet`, and where the host sends it to no address named, again from
/// and to its own loopback address: back in by `lo`, it meets INPUT with
/// what OUTPUT and POSTROUTING did to it.
fn looped_too(packet: Packet, host: &Host) -> Vec<Packet> {
    let mut packets = vec![packet.clone()];
    if packet.way == packet::Way::Output && packet.destination.is_none() {
        let loopback = match host.family {
            crate::family::Family::Ipv4 => std::net::IpAddr::from([127, 0, 0, 1]),
            crate::family::Family::Ipv6 => std::net::Ipv6Addr::LOCALHOST.into(),
        };
        packets.push(Packet {
            source: packet.source.or(Some(loopback)),
            destination: Some(loopback),
            ..packet
        });
    }
    packets
}

/// Per name in `tables`: what the fates say of removing that table of
/// `stale` (the stale backend's tables, read from its save, as `stale_name`
/// names it) where `live` (the host's backend's) stays, on `host`; per
/// name, a packet a stale nat rule sends elsewhere than it goes after,
/// passing both ways (a change that holds nothing); and how many packets
/// were tried.
pub fn judged(
    stale: &[(Vec<u8>, SavedTable)],
    stale_name: &'static str,
    live: &[(Vec<u8>, SavedTable)],
    live_name: &'static str,
    tables: &[&str],
    host: &Host,
) -> (Vec<Found>, Vec<Option<Witness>>, usize) {
    let stale = Copy::read(stale_name, stale);
    let live = Copy::read(live_name, live);
    let live_rules = live.rules_held();
    let mut seen = std::collections::HashSet::new();
    let packets: Vec<Packet> = candidates::candidates(&stale, &live)
        .into_iter()
        .flat_map(|p| looped_too(p, host))
        .map(|p| p.on_its_way(host))
        .filter(|p| seen.insert(p.clone()))
        .collect();
    let contested = order::contested(&stale, &live);
    let primers = primers(&stale, &live, host, &packets, contested);
    let neighbours_stopped = neighbour_discovery_stopped(&live, host);
    let mut found = vec![Found::Nothing; tables.len()];
    let mut changes: Vec<Option<Witness>> = vec![None; tables.len()];
    let mut unknown: Option<Step> = None;
    let mut undecided: Option<(String, Place)> = None;
    let mut tried = 0;
    let tries = packets.iter().map(|p| (p, None)).chain(
        primers
            .iter()
            .flat_map(|primer| packets.iter().map(move |p| (p, Some(primer)))),
    );
    // Each packet tried, and where it passes both now and after, its reply.
    let mut trials: Vec<Trial> = Vec::new();
    for (packet, primer) in tries {
        let with_lists = |lists: &[ListEntry]| Packet {
            lists: lists.to_vec(),
            ..packet.clone()
        };
        let (now_packet, after_packet) = match primer {
            Some(primer) if *packet != primer.packet => (packet.clone(), with_lists(&primer.after)),
            Some(_) => continue,
            None => (packet.clone(), packet.clone()),
        };
        tried += 1;
        let after = twice(&[&live], 0, host, &after_packet);
        let orders = order::orders(contested, packet.way);
        let nows: Vec<(Fate, bool)> = orders
            .iter()
            .map(|&o| match primer {
                Some(primer) => twice(&[&stale, &live], o, host, &with_lists(primer.now_in(o))),
                None => twice(&[&stale, &live], o, host, &now_packet),
            })
            .collect();
        let primed = primer.map(|p| format!(" ({})", p.said)).unwrap_or_default();
        let passed = |(f, _): &(Fate, bool)| f.end == End::Passed;
        let replies = match (primer, nows.iter().all(passed) && passed(&after)) {
            (None, true) => nows
                .iter()
                .chain([&after])
                .map(|(f, _)| f.packet.reply_to(&now_packet))
                .collect::<Option<Vec<Packet>>>(),
            _ => None,
        };
        if let Some(replies) = replies {
            // What the first packet met, then what met its reply.
            let answered = |copies: &[&Copy], order: u8, first: &Fate, reply: &Packet| {
                let mut fate = fate_ordered(copies, order, host, reply);
                fate.steps.splice(0..0, first.steps.iter().cloned());
                (fate, false)
            };
            let reply_nows = (orders.iter().zip(&nows).zip(&replies))
                .map(|((&o, (now, _)), reply)| answered(&[&stale, &live], o, now, reply))
                .collect();
            trials.push(Trial {
                said: format!("the reply to {packet}"),
                nows: reply_nows,
                orders: orders.clone(),
                after: answered(&[&live], 0, &after.0, &replies[replies.len() - 1]),
                primed_place: None,
                sent: None,
            });
        }
        trials.push(Trial {
            said: format!("{packet}{primed}"),
            nows,
            orders,
            after,
            primed_place: primer.and_then(|p| p.place.clone()),
            sent: Some(after_packet),
        });
    }
    // Witnesses found, each with the steps that stopped it now and
    // whether its reply passes after too.
    let mut witnesses: Vec<(Witness, Vec<Step>, bool)> = Vec::new();
    for Trial {
        said: said_packet,
        nows,
        orders,
        after: (after, after_again),
        primed_place,
        sent,
    } in &trials
    {
        let after_again = *after_again;
        for (fate, _) in nows.iter().chain([&(after.clone(), after_again)]) {
            if fate.end == End::Unknown && unknown.is_none() {
                unknown = fate.steps.last().cloned();
            }
        }
        // Passing now and after, sent elsewhere by a stale nat rule: a
        // change that holds nothing (a redirect), said.
        let whither = |f: &Fate| {
            (
                f.packet.destination,
                f.packet.destination_port,
                f.packet.destination_unread,
            )
        };
        let moved = nows.iter().all(|(n, _)| n.end == End::Passed) && after.end == End::Passed;
        let nat_rule = |n: &Fate| {
            let by_stale = |s: &&Step| s.backend == stale_name && s.table == b"nat" && s.rule.is_some();
            n.steps.iter().rev().find(by_stale).cloned()
        };
        let rewritten = nows.iter().find(|(n, _)| whither(n) != whither(after));
        if let (true, true, Some((now, _))) = (moved, primed_place.is_none() && sent.is_some(), rewritten) {
            let at = tables.iter().position(|t| *t == "nat");
            if let (Some(at), Some(step)) = (at, nat_rule(now)) {
                changes[at].get_or_insert(Witness {
                    packet: said_packet.clone(),
                    order: None,
                    now: format!("passes {}", said_steps(now)),
                    after: format!("passes {}", said_steps(after)),
                    stale_rule: Some((step.table, step.chain, step.text)),
                });
            }
        }
        // Stopped now, unknown after: cannot tell, at the stale rule it
        // met first (or the one that wrote the list it was sent after).
        let stopped = |(f, _): &&(Fate, bool)| matches!(f.end, End::Dropped | End::Queued);
        if let (End::Unknown, Some((now, _)), None) = (after.end, nows.iter().find(|n| stopped(n)), &undecided) {
            let place = first_stale(&now.steps, stale_name).or_else(|| primed_place.clone());
            if let (Some(place), Some(last)) = (place, after.steps.last()) {
                let said = format!(
                    "{said_packet} is {} now by {}; without the {stale_name} copy, the model cannot tell what {} does to it",
                    end_said(now.end),
                    said_steps(now),
                    unknown_said(last)
                );
                undecided = Some((said, place));
            }
        }
        // Unknown after too, but for a packet a stale change made other.
        let otherwise_unknown = |now: &Fate| after.end == End::Unknown && after.packet != now.packet;
        if after.end != End::Passed && !nows.iter().any(|(n, _)| otherwise_unknown(n)) {
            continue;
        }
        // Which copy the kernel runs first is not read: stopped in any
        // order counts. Where all stop it, and one only a second such
        // packet, that is what is said (it holds in all); where some,
        // the order is said.
        let witnessed = nows
            .iter()
            .enumerate()
            .filter(|(_, n)| stopped(n) && after.end == End::Passed)
            .max_by_key(|(_, (_, again))| *again);
        let Some((order, (now, again))) = witnessed else {
            // Unknown now only for what the stale copy alone holds or did
            // (a rule of its own, or the list entry it wrote).
            let stale_only = |s: &Step| {
                s.backend == stale_name
                    && s.rule.is_some()
                    && !live_rules.contains(&(s.table.as_slice(), s.chain.as_slice(), s.text.as_slice()))
            };
            let by_stale = nows
                .iter()
                .filter(|(n, _)| n.end == End::Unknown && (after.end == End::Passed || otherwise_unknown(n)))
                .find_map(|(n, _)| {
                    let last = n.steps.last()?;
                    let by = n.steps.iter().find(|s| stale_only(s));
                    let place = by.map(|b| (b.table.clone(), b.chain.clone(), b.text.clone()));
                    Some((by, last, place.or_else(|| primed_place.clone())?))
                });
            if let (Some((by, last, place)), None) = (by_stale, &undecided) {
                let decides = match by {
                    Some(by) if by == last => format!("{} is not modelled, and decides", unknown_said(by)),
                    Some(by) => format!(
                        "after {}, the model cannot tell what {} does to",
                        unknown_said(by),
                        unknown_said(last)
                    ),
                    None => format!("the model cannot tell what {} does to", unknown_said(last)),
                };
                let said = format!(
                    "{decides} {said_packet}, which without the {stale_name} copy {} {}",
                    match after.end {
                        End::Passed => "passes:",
                        _ => "meets unchanged",
                    },
                    said_steps(after)
                );
                undecided = Some((said, place));
            }
            continue;
        };
        let stale_rule = first_stale(&now.steps, stale_name).or_else(|| primed_place.clone());
        if let (Some(why), None) = (&neighbours_stopped, &undecided) {
            let said = format!(
                "{said_packet} would pass without the {stale_name} copy, but only where its neighbours are already known: {why}"
            );
            let first_table = || {
                (
                    tables.first().unwrap_or(&"").as_bytes().to_vec(),
                    Vec::new(),
                    Vec::new(),
                )
            };
            undecided = Some((said, stale_rule.clone().unwrap_or_else(first_table)));
        }
        if neighbours_stopped.is_some() {
            continue;
        }
        let witness = Witness {
            packet: format!(
                "{said_packet}{}",
                if *again {
                    " (a second such packet, meeting what the first wrote)"
                } else {
                    ""
                },
            ),
            order: match nows.iter().all(|n| stopped(&n)) {
                true => None,
                false => Some(order::said(
                    orders[order],
                    orders.get(1).copied().unwrap_or(0),
                    stale_name,
                    live_name,
                )),
            },
            now: format!("{} {}", end_said(now.end), said_steps(now)),
            after: format!("{} {}", end_said(after.end), said_steps(after)),
            stale_rule,
        };
        // Its reply after: where stopped, said (the packet arrives, but
        // no exchange completes).
        let reply_after = sent
            .as_ref()
            .and_then(|sent| after.packet.reply_to(sent))
            .map(|reply| fate(&[&live], host, &reply))
            .filter(|reply| reply.end != End::Passed);
        let answered = reply_after.is_none();
        let witness = match reply_after {
            Some(reply) => Witness {
                after: format!("{}, but its reply is {}", witness.after, reply_said(&reply)),
                ..witness
            },
            None => witness,
        };
        witnesses.push((witness, now.steps.clone(), answered));
    }
    // Per table, the first witness a stale rule of it stopped, one whose
    // reply passes after before one whose reply is stopped; else the
    // first table takes the first witness.
    witnesses.sort_by_key(|(_, _, answered)| !answered);
    for (witness, steps, _) in &witnesses {
        for (name, said) in tables.iter().zip(found.iter_mut()) {
            let by_it = steps
                .iter()
                .any(|s| s.backend == stale_name && s.table == name.as_bytes() && !s.lets_on());
            if by_it && !matches!(said, Found::Opens(_)) {
                // The side-by-side view starts at this table's first rule met.
                let in_it: Vec<Step> = steps.iter().filter(|s| s.table == name.as_bytes()).cloned().collect();
                *said = Found::Opens(Witness {
                    stale_rule: first_stale(&in_it, stale_name).or_else(|| witness.stale_rule.clone()),
                    ..witness.clone()
                });
            }
        }
    }
    if let (Some((witness, _, _)), false) = (witnesses.first(), found.iter().any(|f| matches!(f, Found::Opens(_)))) {
        if let Some(first) = found.first_mut() {
            *first = Found::Opens(witness.clone());
        }
    }
    if let Some((said, place)) = undecided {
        let at = tables.iter().position(|name| name.as_bytes() == place.0).unwrap_or(0);
        if let Some(found @ Found::Nothing) = found.get_mut(at) {
            *found = Found::Undecided(said, place);
        }
    }
    if let Some(step) = unknown {
        for (name, said) in tables.iter().zip(found.iter_mut()) {
            let elsewhere = step.backend == stale_name && step.table != name.as_bytes();
            if *said == Found::Nothing && !elsewhere {
                *said = Found::CannotTell(unknown_said(&step));
            }
        }
    }
    (found, changes, tried)
}

/// In IPv6, what stops neighbour discovery without the stale copy (an
/// `icmpv6` solicitation or advertisement, arriving or sent, untracked),
/// or may (a rule not modelled decides it), said: then no packet crosses
/// a link whose neighbour is not yet known.
fn neighbour_discovery_stopped(live: &Copy, host: &Host) -> Option<String> {
    if host.family != crate::family::Family::Ipv6 {
        return None;
    }
    [packet::Way::Input, packet::Way::Output].into_iter().find_map(|way| {
        let discovery = Packet {
            protocol: b"icmpv6".to_vec(),
            state: packet::CtState::Untracked,
            ..Packet::unnamed(way)
        };
        let after = fate(&[live], host, &discovery);
        match (after.end, after.steps.last()) {
            (End::Dropped | End::Queued, _) => Some(format!(
                "neighbour discovery ({discovery}) is {} {}",
                end_said(after.end),
                said_steps(&after)
            )),
            // A set's members, say, not read: it may be stopped.
            (End::Unknown, Some(last)) => Some(format!(
                "the model cannot tell what {} does to neighbour discovery ({discovery})",
                unknown_said(last)
            )),
            _ => None,
        }
    })
}
