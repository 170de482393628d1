//! A packet's fate through the iptables tables of one or two backends:
//! each hook's tables in the kernel's order (raw, mangle, nat, filter,
//! security), at each table every copy given, in the order given (both
//! backends hook a table at the same hook and priority, so each copy
//! meets what the one before let through). Within a table: its built-in
//! chain's rules in order, user chains by `-j` (back at `RETURN` or the
//! chain's end) and `-g` (back to the caller's caller), the policy where
//! a built-in chain ends. nat chains meet only a connection's first
//! packet, and once a copy's nat rule translates it, the other copy's nat
//! table at that hook is not consulted (the kernel's first binding wins).
//! Security's two priorities (legacy 50, iptables-nft 150) are
//! taken as one place after filter, and a `DNAT` does not change the way
//! a packet takes (arriving, forwarded): both are approximations; a
//! `REDIRECT` in PREROUTING makes it arrive for the host.
//!
//! A rule whose tests the model cannot evaluate but whose target it
//! knows is taken both ways, matching and not (each such rule again at
//! each meeting, at most [`LEAVES`] ways in all): where every way ends
//! alike, that is the fate; else it is unknown at the first such rule.

use super::host::Host;
use super::order;
use super::packet::{CtState, Packet, Way};
use super::rule::{Rule, Tri};
use super::target::Action;
use crate::stale::effects::Kept;
use crate::stale::saved_rules::{surely_keeps, SavedTable};
use std::collections::{HashMap, HashSet};
use std::fmt;

/// One table of one backend, its rules read once.
#[derive(Default)]
pub struct ModelTable {
    pub chains: HashMap<Vec<u8>, Vec<Rule>>,
    policies: HashMap<Vec<u8>, Vec<u8>>,
    /// Per user chain, the first rule in the save that jumps or goes to
    /// it: its chain and its index there.
    pub first_callers: HashMap<Vec<u8>, (Vec<u8>, usize)>,
}

/// One backend's copy of a family: its name (`legacy`, `nft`) and tables.
pub struct Copy {
    pub backend: &'static str,
    pub tables: Vec<(Vec<u8>, ModelTable)>,
    /// Whether it keeps connection tracking on (a rule whose row in the
    /// table of effects says so): without it no packet meets a nat table.
    tracks: bool,
}

impl Copy {
    /// Reads each rule of `tables` once.
    pub fn read(backend: &'static str, saved_tables: &[(Vec<u8>, SavedTable)]) -> Copy {
        let tables: Vec<(Vec<u8>, ModelTable)> = saved_tables
            .iter()
            .map(|(name, saved)| {
                let mut table = ModelTable::default();
                for (chain, policy) in &saved.policies {
                    table.policies.insert(chain.clone(), policy.clone());
                }
                // Each target looked up once, not among every chain.
                let user_chains: HashSet<&[u8]> = saved
                    .policies
                    .iter()
                    .filter(|(_, policy)| policy.as_slice() == b"-")
                    .map(|(chain, _)| chain.as_slice())
                    .collect();
                for (chain, text) in &saved.rules {
                    let rules = table.chains.entry(chain.clone()).or_default();
                    let rule = Rule::read(text, rules.len() + 1, |t| user_chains.contains(t));
                    if let Action::Jump(callee) | Action::Goto(callee) = &rule.action {
                        table
                            .first_callers
                            .entry(callee.clone())
                            .or_insert((chain.clone(), rules.len()));
                    }
                    rules.push(rule);
                }
                (name.clone(), table)
            })
            .collect();
        // A nat table alone, of either backend, keeps nothing on (its
        // chains see only what a connection's tracking already follows).
        let tracks = saved_tables.iter().any(|(_, table)| {
            table
                .rules
                .iter()
                .any(|(_, rule)| surely_keeps(rule, table) == Kept::Conntrack)
        });
        Copy {
            backend,
            tables,
            tracks,
        }
    }

    /// Each rule's table, chain and text.
    pub fn rules_held(&self) -> HashSet<(&[u8], &[u8], &[u8])> {
        self.tables
            .iter()
            .flat_map(|(name, table)| {
                table.chains.iter().flat_map(move |(chain, rules)| {
                    rules
                        .iter()
                        .map(move |r| (name.as_slice(), chain.as_slice(), r.text.as_slice()))
                })
            })
            .collect()
    }

    pub fn table(&self, name: &[u8]) -> Option<&ModelTable> {
        self.tables.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
}

/// A [`Step`]'s backend where routing, not a rule, left the way unknown.
pub const ROUTING: &str = "routing";
/// A [`Step`]'s backend where a native nftables chain (not read) met the
/// packet.
pub const NATIVE: &str = "nftables";

/// Where a fate was decided or the packet changed: a rule or a policy
/// (or routing by a mark, [`ROUTING`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub backend: &'static str,
    pub table: Vec<u8>,
    pub chain: Vec<u8>,
    /// The rule's number in its chain; None for the policy.
    pub rule: Option<usize>,
    /// The rule as printed, or the policy.
    pub text: Vec<u8>,
}

impl Step {
    /// Whether it is an `ACCEPT` policy: it lets the packet on to the
    /// next table, deciding and changing nothing.
    pub fn lets_on(&self) -> bool {
        self.rule.is_none() && self.text == b"ACCEPT"
    }
}

impl fmt::Display for Step {
    /// `legacy nat PREROUTING rule 1 MARK --set-xmark 0x8000/0x8000`,
    /// `nft filter INPUT policy ACCEPT`.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        if self.backend == ROUTING {
            return write!(f, "routing after {} by {}", s(&self.chain), s(&self.text));
        }
        if self.backend == NATIVE {
            return write!(f, "{} at {}", s(&self.text), s(&self.chain));
        }
        write!(f, "{} {} {} ", self.backend, s(&self.table), s(&self.chain))?;
        match self.rule {
            Some(n) => {
                let text = s(&self.text);
                let verdict = ["-j ", "-g ", "--jump ", "--goto "]
                    .iter()
                    .filter_map(|w| text.find(w).map(|at| text[at + w.len()..].to_string()))
                    .next()
                    .unwrap_or_else(|| text.splitn(3, ' ').nth(2).unwrap_or_default().to_string());
                write!(f, "rule {n} {verdict}")
            }
            None => write!(f, "policy {}", s(&self.text)),
        }
    }
}

/// How a packet's way through the hooks ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Passed,
    Dropped,
    Queued,
    /// A rule not modelled decided, or may have.
    Unknown,
}

/// A packet's fate: how it ended, the steps that changed or decided it
/// (the last one decided), and the packet as it left (what it wrote).
#[derive(Clone, Debug)]
pub struct Fate {
    pub end: End,
    pub steps: Vec<Step>,
    pub packet: Packet,
}

/// How one chain ends for a packet.
enum Flow {
    Accept,
    Drop,
    Queue,
    /// `RETURN`, or the chain's end.
    Return,
    Unknown,
}

/// Calls deeper than this (iptables refuses loops) end as unknown.
const DEPTH: usize = 64;

/// The most ways a packet's fate is followed along, each rule not
/// evaluated taken as matching or not.
const LEAVES: usize = 256;

/// Walks one table's chains.
struct Walk<'a> {
    copy: &'a Copy,
    host: &'a Host,
    /// The built-in chain the walk began at.
    hook: &'a [u8],
    table_name: &'a [u8],
    table: &'a ModelTable,
    steps: &'a mut Vec<Step>,
    /// A nat rule translated the packet: the nat tables after this one at
    /// the same hook are not consulted (the kernel's first binding wins).
    translated: bool,
    /// How rules not evaluated are taken, in the order met (true: as
    /// matching); `taken` of them so far.
    choices: &'a [bool],
    taken: &'a mut usize,
    /// A rule not evaluated was met beyond `choices`.
    out_of_choices: &'a mut bool,
}

impl Walk<'_> {
    fn step(&self, chain: &[u8], rule: Option<&Rule>, policy: &[u8]) -> Step {
        Step {
            backend: self.copy.backend,
            table: self.table_name.to_vec(),
            chain: chain.to_vec(),
            rule: rule.map(|r| r.number),
            text: rule.map_or(policy.to_vec(), |r| r.text.clone()),
        }
    }

    fn chain(&mut self, name: &[u8], packet: &mut Packet, depth: usize) -> Flow {
        if depth > DEPTH {
            self.steps.push(self.step(name, None, b"(called too deep)"));
            return Flow::Unknown;
        }
        let Some(rules) = self.table.chains.get(name) else {
            return Flow::Return;
        };
        for rule in rules {
            let matched = rule.matches(packet);
            if matched == Tri::No {
                continue;
            }
            let step = self.step(name, Some(rule), b"");
            if matched == Tri::Unknown {
                // A rule that may match: unknown, unless it could only go on
                // or the way it is taken is chosen.
                if rule.action == Action::GoOn && !rule.writes_a_list() {
                    continue;
                }
                let choosable = !rule.writes_a_list() && rule.action != Action::Unknown;
                match self.choices.get(*self.taken) {
                    Some(&matching) if choosable => {
                        *self.taken += 1;
                        if !matching {
                            continue;
                        }
                    }
                    _ => {
                        *self.out_of_choices |= choosable;
                        self.steps.push(step);
                        return Flow::Unknown;
                    }
                }
            }
            let flow = match &rule.action {
                Action::GoOn if rule.writes_a_list() => {
                    self.steps.push(step);
                    continue;
                }
                Action::GoOn => continue,
                Action::Accept => Flow::Accept,
                Action::Drop => Flow::Drop,
                Action::Queue => Flow::Queue,
                Action::Return => {
                    self.steps.push(step);
                    return Flow::Return;
                }
                Action::Unknown => Flow::Unknown,
                Action::Jump(chain) => match self.chain(chain, packet, depth + 1) {
                    Flow::Return => continue,
                    other => return other,
                },
                Action::Goto(chain) => return self.chain(chain, packet, depth + 1),
                Action::Marks(marking) => {
                    marking.apply(packet);
                    self.steps.push(step);
                    continue;
                }
                Action::Untrack => {
                    packet.state = CtState::Untracked;
                    self.steps.push(step);
                    continue;
                }
                Action::Dnat(address, port) => {
                    self.translated = true;
                    // The kernel counts no rewrite into what it was.
                    packet.dnat = match (address, packet.destination) {
                        _ if packet.destination_unread => None,
                        (Some(a), Some(d)) if *a != d => Some(true),
                        (Some(_), None) => Some(true),
                        _ => Some(port.is_some_and(|p| packet.destination_port != Some(p))),
                    };
                    // Routed by its new destination, where the host's
                    // addresses are read.
                    if let Some(local) = address.and_then(|a| self.host.is_local(a)) {
                        packet.for_the_host = Some(local);
                        if packet.way != Way::Output {
                            packet.way = if local { Way::Input } else { Way::Forward };
                        }
                    }
                    packet.destination = address.or(packet.destination);
                    packet.destination_port = port.or(packet.destination_port);
                    Flow::Accept
                }
                Action::Redirect(port) => {
                    self.translated = true;
                    // To one of the host's addresses, maybe the one it had.
                    packet.dnat = match port {
                        Some(p) if packet.destination_port != Some(*p) => Some(true),
                        _ if packet.for_the_host == Some(false) => Some(true),
                        _ => None,
                    };
                    packet.destination_unread = true;
                    packet.for_the_host = Some(true);
                    if packet.way != Way::Output {
                        packet.way = Way::Input;
                    }
                    packet.destination_port = port.or(packet.destination_port);
                    Flow::Accept
                }
                Action::Netmap if matches!(self.hook, b"PREROUTING" | b"OUTPUT") => {
                    self.translated = true;
                    packet.dnat = match packet.destination {
                        None if !packet.destination_unread => Some(true),
                        _ => None,
                    };
                    packet.destination_unread = true;
                    packet.for_the_host = None;
                    Flow::Accept
                }
                Action::Snat(address, port) => {
                    self.translated = true;
                    let local = match address {
                        None => Some(true),
                        Some(a) => self.host.is_local(*a),
                    };
                    packet.source_translated(*address, *port, local);
                    Flow::Accept
                }
                Action::Netmap => {
                    self.translated = true;
                    packet.source_translated(None, None, None);
                    Flow::Accept
                }
            };
            self.steps.push(step);
            return flow;
        }
        Flow::Return
    }
}

/// The fate of `packet` through `copies` (each hook's table of the first,
/// then of the second, ...), each rule not evaluated taken both ways (see
/// the module's note).
pub fn fate(copies: &[&Copy], host: &Host, packet: &Packet) -> Fate {
    fate_ordered(copies, 0, host, packet)
}

/// [`fate`], with `copies` taken in reverse at the hooks `reversed_at`
/// holds ([`order::bit`]).
pub fn fate_ordered(copies: &[&Copy], reversed_at: u8, host: &Host, packet: &Packet) -> Fate {
    let fate_choosing = |choices: &[bool]| fate_choosing(copies, reversed_at, host, packet, choices);
    let (first, chooses) = fate_choosing(&[]);
    if !chooses {
        return first;
    }
    let mut ways = std::collections::VecDeque::from([vec![true], vec![false]]);
    let mut ends: Vec<Fate> = Vec::new();
    while let Some(choices) = ways.pop_front() {
        let (fate, chooses) = fate_choosing(&choices);
        if !chooses {
            ends.push(fate);
        } else if ends.len() + ways.len() + 2 <= LEAVES {
            ways.extend([true, false].map(|c| [choices.as_slice(), &[c]].concat()));
        } else {
            return first;
        }
    }
    match ends.iter().all(|f| f.end == ends[0].end && f.end != End::Unknown) {
        true => ends.swap_remove(0),
        false => first,
    }
}

/// The fate of `packet` with the rules not evaluated taken as `choices`
/// says; and whether one was met beyond them.
fn fate_choosing(copies: &[&Copy], reversed_at: u8, host: &Host, packet: &Packet, choices: &[bool]) -> (Fate, bool) {
    let mut packet = packet.clone();
    let mut steps = Vec::new();
    let (mut taken, mut out_of_choices) = (0, false);
    let tracked = copies.iter().any(|c| c.tracks);
    let arrived_marked = packet.mark;
    let mut plan: Vec<order::Hook> = order::hooks(packet.way).to_vec();
    let mut at = 0;
    while let Some(&(hook, tables)) = plan.get(at) {
        let hook = &hook;
        at += 1;
        let way = packet.way;
        for table_name in tables {
            if *table_name == b"nat" {
                packet.untranslate();
                if packet.state != CtState::New || !tracked {
                    continue;
                }
            }
            let reversed = reversed_at & order::bit(hook) != 0;
            let ordered: Vec<&Copy> = match reversed {
                true => copies.iter().rev().copied().collect(),
                false => copies.to_vec(),
            };
            for copy in ordered {
                let Some(table) = copy.table(table_name) else { continue };
                if !table.policies.contains_key(*hook) && !table.chains.contains_key(*hook) {
                    continue;
                }
                let mut walk = Walk {
                    copy,
                    host,
                    hook,
                    table_name,
                    table,
                    steps: &mut steps,
                    translated: false,
                    choices,
                    taken: &mut taken,
                    out_of_choices: &mut out_of_choices,
                };
                let end = match walk.chain(hook, &mut packet, 0) {
                    Flow::Accept if walk.translated => break,
                    Flow::Accept => continue,
                    Flow::Drop => End::Dropped,
                    Flow::Queue => End::Queued,
                    Flow::Unknown => End::Unknown,
                    Flow::Return => {
                        let policy = table.policies.get(*hook).map_or(&b"ACCEPT"[..], Vec::as_slice);
                        let step = walk.step(hook, None, policy);
                        steps.push(step);
                        match policy {
                            b"ACCEPT" | b"-" => continue,
                            b"DROP" => End::Dropped,
                            _ => End::Unknown,
                        }
                    }
                };
                return (Fate { end, steps, packet }, out_of_choices);
            }
        }
        // Past a native nftables chain, or routed by a mark a routing rule
        // reads: not read, so the fate is unknown.
        if let Some((backend, text)) = host.unread_past(hook, way, arrived_marked, packet.mark) {
            let chain = hook.to_vec();
            let (table, rule, text) = (Vec::new(), None, text.into_bytes());
            steps.push(Step {
                backend,
                table,
                chain,
                rule,
                text,
            });
            let end = End::Unknown;
            return (Fate { end, steps, packet }, out_of_choices);
        }
        // Routed after PREROUTING by where a nat rule sent it; sent to
        // the host itself, back in by lo after POSTROUTING.
        if packet.way != way {
            plan = order::hooks(packet.way).to_vec();
        }
        if *hook == b"POSTROUTING" && packet.way == Way::Output && packet.for_the_host == Some(true) {
            packet.in_interface = Some(b"lo".to_vec());
            plan.extend(order::LOOPED);
        }
    }
    (
        Fate {
            end: End::Passed,
            steps,
            packet,
        },
        out_of_choices,
    )
}
