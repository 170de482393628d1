//! One saved rule read as the fates model evaluates it: its matches as
//! tests on a [`Packet`] (true, false or unknown) and its target as an
//! action. What a target does is read from the table of effects
//! ([`crate::stale::effects::EFFECTS`], in [`super::target`]); the options
//! of the matches and targets below are read where each is evaluated:
//!
//! | read | as |
//! |---|---|
//! | `-p`, `-s`, `-d`, `-i`, `-o` (each with `!`) | the packet's protocol, addresses, interfaces |
//! | `-m tcp`/`udp`/`sctp`/`udplite` `--dport`, `--sport` | ports and ranges |
//! | `-m multiport` `--dports`, `--sports`, `--ports` | lists of ports and ranges |
//! | `-m conntrack --ctstate`, `-m state --state` | the connection's state; `DNAT`, `SNAT`: a nat rule met by a connection's first packet rewrote it (known for it and its reply, unknown for another later packet) |
//! | `-m addrtype --dst-type LOCAL`, `--src-type LOCAL` | to one of the host's addresses ([`super::host`]: arriving for it, or sent to itself); from one: sent by it or arriving by `lo` |
//! | `-m mark --mark`, `-m connmark --mark` | the mark under its mask |
//! | `-m comment` | always true |
//! | `-m recent` `--name`, `--set`, `--rcheck`, `--update`, `--remove`, `--rsource`, `--rdest`, `--seconds`, `--mask` of all ones | a named list written and read |
//! | `MARK`, `CONNMARK` (`--set-xmark`, `--set-mark`, `--and-mark`, `--or-mark`, `--xor-mark`, `--save-mark`, `--restore-mark`) | the marks rewritten |
//! | `DNAT --to-destination`, `SNAT`, `MASQUERADE` | the destination rewritten; the nat chain ends |
//! | `REDIRECT --to-ports` | to one of the host's addresses (a test of the destination address: unknown) and port; arriving for the host from then on; the nat chain ends |
//! | `NETMAP` | in PREROUTING and OUTPUT to an address of its range (a test of the destination address: unknown), else the source; the nat chain ends |
//! | `NOTRACK`, `CT --notrack` | the packet untracked |
//!
//! Anything else (another match, another option, another target that
//! changes packets) is unknown: a packet that meets it has no known fate.

use super::packet::{CtState, Packet, Way};
use super::target::{target, Action};
use crate::stale::saved_rules::quoted_words;
use std::net::IpAddr;

/// A value of three: a match that cannot be evaluated is `Unknown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tri {
    Yes,
    No,
    Unknown,
}

/// An address and its prefix length or mask (`-s`, `-d`).
#[derive(Clone, Copy, Debug)]
pub struct Net {
    pub address: IpAddr,
    mask: u128,
}

impl Net {
    fn parse(text: &[u8]) -> Option<Net> {
        let text = std::str::from_utf8(text).ok()?;
        let (address, mask) = text.split_once('/').unwrap_or((text, ""));
        let address: IpAddr = address.parse().ok()?;
        let width = if address.is_ipv4() { 32 } else { 128 };
        let ones = |n: u32| if n == 0 { 0 } else { u128::MAX << (width - n) } & bits_mask(width);
        let mask = if mask.is_empty() {
            bits_mask(width)
        } else if let Ok(length) = mask.parse::<u32>() {
            if length > width {
                return None;
            }
            ones(length)
        } else {
            bits(mask.parse().ok()?)
        };
        Some(Net { address, mask })
    }

    fn contains(&self, address: IpAddr) -> bool {
        address.is_ipv4() == self.address.is_ipv4() && bits(address) & self.mask == bits(self.address) & self.mask
    }
}

fn bits_mask(width: u32) -> u128 {
    if width == 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    }
}

fn bits(address: IpAddr) -> u128 {
    match address {
        IpAddr::V4(v4) => u32::from(v4).into(),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// What a `-m recent` rule does with its list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListOp {
    Set,
    Check,
    Remove,
}

/// One test a rule makes of a packet.
#[derive(Clone, Debug)]
pub enum Test {
    Protocol(Vec<u8>),
    Source(Net),
    Destination(Net),
    InInterface(Vec<u8>),
    OutInterface(Vec<u8>),
    DestinationPorts(Vec<(u16, u16)>),
    SourcePorts(Vec<(u16, u16)>),
    AnyPorts(Vec<(u16, u16)>),
    /// The states named, and whether `DNAT`, `SNAT` are among them.
    States {
        states: Vec<CtState>,
        dnat: bool,
        snat: bool,
    },
    /// `-m addrtype --dst-type LOCAL` (destination) or `--src-type LOCAL`.
    Local {
        destination: bool,
    },
    Mark(u32, u32),
    Connmark(u32, u32),
    List {
        name: Vec<u8>,
        destination: bool,
        op: ListOp,
    },
    Always,
    Unknown,
}

/// A test, negated by a `!` before it.
#[derive(Clone, Debug)]
pub struct Cond {
    pub test: Test,
    pub negated: bool,
}

/// One rule: where it is, as printed, its tests and its action.
#[derive(Clone, Debug)]
pub struct Rule {
    pub text: Vec<u8>,
    /// 1 for a chain's first rule.
    pub number: usize,
    pub conds: Vec<Cond>,
    pub action: Action,
}

/// Whether `text` is an address of all ones (`-m recent --mask`'s default,
/// as the save tools print it: the whole address counts).
fn all_ones(text: &[u8]) -> bool {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse::<IpAddr>().ok())
        .is_some_and(|a| bits(a) == bits_mask(if a.is_ipv4() { 32 } else { 128 }))
}

/// A number as iptables prints it: decimal or `0x` hexadecimal.
pub fn number(text: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(text).ok()?;
    match text.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// `value[/mask]`, the mask all ones where not given.
pub fn masked(text: &[u8]) -> Option<(u32, u32)> {
    let mut parts = text.splitn(2, |&b| b == b'/');
    let value = number(parts.next()?)?;
    let mask = parts.next().map_or(Some(u32::MAX), number)?;
    Some((value, mask))
}

/// `80`, `1024:65535`, and lists of them (`80,443,1000:2000`).
fn port_ranges(text: &[u8]) -> Option<Vec<(u16, u16)>> {
    text.split(|&b| b == b',')
        .map(|part| {
            let port = |p: &[u8]| std::str::from_utf8(p).ok()?.parse::<u16>().ok();
            match part.iter().position(|&b| b == b':') {
                Some(at) => Some((port(&part[..at])?, port(&part[at + 1..])?)),
                None => port(part).map(|p| (p, p)),
            }
        })
        .collect()
}

/// `--ctstate`'s words (`NEW,ESTABLISHED`, `DNAT`); a word not known: unknown.
fn states(value: &[u8]) -> Test {
    let (mut states, mut dnat, mut snat) = (Vec::new(), false, false);
    for word in value.split(|&b| b == b',') {
        match (word, CtState::named(word)) {
            (_, Some(state)) => states.push(state),
            (b"DNAT", None) => dnat = true,
            (b"SNAT", None) => snat = true,
            _ => return Test::Unknown,
        }
    }
    Test::States { states, dnat, snat }
}

/// Any of `tris` true: yes; else any unknown: unknown; else no.
fn any_of(tris: &[Tri]) -> Tri {
    if tris.contains(&Tri::Yes) {
        Tri::Yes
    } else if tris.contains(&Tri::Unknown) {
        Tri::Unknown
    } else {
        Tri::No
    }
}

/// The protocol a `-p` word names, as packets here carry it.
fn protocol_name(word: &[u8]) -> Vec<u8> {
    let lower = word.to_ascii_lowercase();
    match lower.as_slice() {
        b"6" => b"tcp".to_vec(),
        b"17" => b"udp".to_vec(),
        b"1" => b"icmp".to_vec(),
        b"58" | b"icmpv6" | b"ipv6-icmp" => b"icmpv6".to_vec(),
        _ => lower,
    }
}

/// The matches whose options this model reads ([`PORT_MATCHES`] aside).
const MODELLED_MATCHES: [&[u8]; 12] = [
    b"addrtype",
    b"comment",
    b"conntrack",
    b"state",
    b"mark",
    b"connmark",
    b"multiport",
    b"recent",
    b"tcp",
    b"udp",
    b"sctp",
    b"udplite",
];

/// The matches whose `--dport` and `--sport` this model reads.
const PORT_MATCHES: [&[u8]; 4] = [b"tcp", b"udp", b"sctp", b"udplite"];

impl Rule {
    /// Reads `text` (`-A CHAIN ...`), the `number`th rule of its chain;
    /// `is_chain` tells a user chain of its table from a target.
    pub fn read(text: &[u8], number: usize, is_chain: impl Fn(&[u8]) -> bool) -> Rule {
        let words = quoted_words(text);
        let mut conds = Vec::new();
        let mut module: Vec<u8> = Vec::new();
        let mut negated = false;
        let mut list: Option<(Vec<u8>, bool, Option<ListOp>)> = None;
        let mut action = Action::GoOn;
        let mut at = 2.min(words.len());
        let mut push = |test: Test, negated: &mut bool| {
            conds.push(Cond {
                test,
                negated: std::mem::take(negated),
            });
        };
        while at < words.len() {
            let word = words[at].as_slice();
            let value = words.get(at + 1).map(Vec::as_slice).unwrap_or_default();
            // An option's value, where the next word is one: taken.
            let has_value = !value.is_empty() && !value.starts_with(b"-") && value != b"!";
            at += 1;
            let test = match word {
                b"!" => {
                    negated = true;
                    continue;
                }
                b"-j" | b"--jump" | b"-g" | b"--goto" => {
                    let options = &words[(at + 1).min(words.len())..];
                    action = if is_chain(value) {
                        if matches!(word, b"-g" | b"--goto") {
                            Action::Goto(value.to_vec())
                        } else {
                            Action::Jump(value.to_vec())
                        }
                    } else {
                        target(value, options)
                    };
                    break;
                }
                b"-p" | b"--protocol" => Test::Protocol(protocol_name(value)),
                b"-s" | b"--source" => Net::parse(value).map_or(Test::Unknown, Test::Source),
                b"-d" | b"--destination" => Net::parse(value).map_or(Test::Unknown, Test::Destination),
                b"-i" | b"--in-interface" => Test::InInterface(value.to_vec()),
                b"-o" | b"--out-interface" => Test::OutInterface(value.to_vec()),
                b"-m" | b"--match" => {
                    module = value.to_vec();
                    at += 1;
                    if MODELLED_MATCHES.contains(&value) {
                        continue;
                    }
                    push(Test::Unknown, &mut negated);
                    continue;
                }
                b"--comment" => Test::Always,
                b"--dport" | b"--destination-port" if PORT_MATCHES.contains(&module.as_slice()) => {
                    port_ranges(value).map_or(Test::Unknown, Test::DestinationPorts)
                }
                b"--sport" | b"--source-port" if PORT_MATCHES.contains(&module.as_slice()) => {
                    port_ranges(value).map_or(Test::Unknown, Test::SourcePorts)
                }
                b"--dports" | b"--destination-ports" if module == b"multiport" => {
                    port_ranges(value).map_or(Test::Unknown, Test::DestinationPorts)
                }
                b"--sports" | b"--source-ports" if module == b"multiport" => {
                    port_ranges(value).map_or(Test::Unknown, Test::SourcePorts)
                }
                b"--ports" if module == b"multiport" => port_ranges(value).map_or(Test::Unknown, Test::AnyPorts),
                b"--ctstate" | b"--state" if matches!(module.as_slice(), b"conntrack" | b"state") => states(value),
                b"--dst-type" | b"--src-type" if module == b"addrtype" && value == b"LOCAL" => Test::Local {
                    destination: word == b"--dst-type",
                },
                b"--mark" if module == b"mark" || module == b"connmark" => match masked(value) {
                    Some((v, m)) if module == b"mark" => Test::Mark(v, m),
                    Some((v, m)) => Test::Connmark(v, m),
                    None => Test::Unknown,
                },
                _ if module == b"recent" => {
                    let entry = list.get_or_insert((b"DEFAULT".to_vec(), false, None));
                    match word {
                        b"--name" => entry.0 = value.to_vec(),
                        b"--seconds" => {}
                        b"--set" => entry.2 = Some(ListOp::Set),
                        b"--rcheck" | b"--update" => entry.2 = Some(ListOp::Check),
                        b"--remove" => entry.2 = Some(ListOp::Remove),
                        b"--mask" if all_ones(value) => {}
                        b"--rsource" => entry.1 = false,
                        b"--rdest" => entry.1 = true,
                        _ => {
                            at += usize::from(has_value);
                            push(Test::Unknown, &mut negated);
                            continue;
                        }
                    }
                    at += usize::from(matches!(word, b"--name" | b"--seconds" | b"--mask"));
                    continue;
                }
                _ => {
                    at += usize::from(has_value);
                    push(Test::Unknown, &mut negated);
                    continue;
                }
            };
            // Each option read above takes a value.
            at += 1;
            push(test, &mut negated);
        }
        if let Some((name, destination, op)) = list {
            let test = op.map_or(Test::Unknown, |op| Test::List { name, destination, op });
            conds.push(Cond { test, negated: false });
        }
        Rule {
            text: text.to_vec(),
            number,
            conds,
            action,
        }
    }

    /// Whether a test of the rule writes a list (`-m recent --set`, `--remove`).
    pub fn writes_a_list(&self) -> bool {
        self.conds.iter().any(|c| {
            matches!(
                c.test,
                Test::List {
                    op: ListOp::Set | ListOp::Remove,
                    ..
                }
            )
        })
    }

    /// Whether the rule's tests match `packet`, writing what a list test
    /// writes where it is reached (a test after a false one is not).
    pub fn matches(&self, packet: &mut Packet) -> Tri {
        let mut result = Tri::Yes;
        for cond in &self.conds {
            let mut tri = test(&cond.test, packet, result == Tri::Yes);
            if cond.negated {
                tri = match tri {
                    Tri::Yes => Tri::No,
                    Tri::No => Tri::Yes,
                    Tri::Unknown => Tri::Unknown,
                };
            }
            match tri {
                Tri::No => return Tri::No,
                Tri::Unknown => result = Tri::Unknown,
                Tri::Yes => {}
            }
        }
        result
    }
}

fn in_ranges(port: Option<u16>, ranges: &[(u16, u16)]) -> bool {
    port.is_some_and(|p| ranges.iter().any(|&(low, high)| low <= p && p <= high))
}

/// An interface name against `-i`/`-o`'s, which may end in `+`.
fn interface_is(name: &Option<Vec<u8>>, pattern: &[u8]) -> bool {
    let Some(name) = name else { return false };
    match pattern.strip_suffix(b"+") {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

/// One test of `packet`; `writes`: every test before it matched, so a
/// list test writes what it does (one after an unknown test makes the
/// list itself unknown: [`Tri::Unknown`]).
fn test(test: &Test, packet: &mut Packet, writes: bool) -> Tri {
    let yes = |b: bool| if b { Tri::Yes } else { Tri::No };
    let with_ports = || PORT_MATCHES.contains(&packet.protocol.as_slice());
    match test {
        Test::Protocol(p) => yes(p.as_slice() == b"all" || p.as_slice() == b"0" || *p == packet.protocol),
        Test::Source(_) if packet.source_unread => Tri::Unknown,
        Test::Source(net) => yes(packet.source.is_some_and(|a| net.contains(a))),
        Test::Destination(_) if packet.destination_unread => Tri::Unknown,
        Test::Destination(net) => yes(packet.destination.is_some_and(|a| net.contains(a))),
        Test::InInterface(name) => yes(interface_is(&packet.in_interface, name)),
        Test::OutInterface(name) => yes(interface_is(&packet.out_interface, name)),
        Test::DestinationPorts(r) => yes(with_ports() && in_ranges(packet.destination_port, r)),
        Test::SourcePorts(r) => yes(with_ports() && in_ranges(packet.source_port, r)),
        Test::AnyPorts(r) => {
            yes(with_ports() && (in_ranges(packet.destination_port, r) || in_ranges(packet.source_port, r)))
        }
        Test::States { states, dnat, snat } => {
            // What a connection's first packet met decides a later one's.
            let rewritten = |named: bool, rewritten: Option<bool>| match (named, packet.state, rewritten) {
                (false, _, _) => Tri::No,
                (true, _, None) => Tri::Unknown,
                (true, CtState::New, Some(r)) => yes(r),
                (true, _, Some(r)) if packet.reply => yes(r),
                (true, _, _) => Tri::Unknown,
            };
            any_of(&[
                yes(states.contains(&packet.state)),
                rewritten(*dnat, packet.dnat),
                rewritten(*snat, packet.snat),
            ])
        }
        Test::Local { destination: true } => packet.for_the_host.map_or(Tri::Unknown, yes),
        Test::Local { destination: false } => {
            yes(packet.way == Way::Output || packet.in_interface.as_deref() == Some(b"lo"))
        }
        Test::Mark(value, mask) => yes(packet.mark & mask == *value),
        Test::Connmark(value, mask) => yes(packet.connmark & mask == *value),
        Test::Always => Tri::Yes,
        Test::Unknown => Tri::Unknown,
        Test::List { destination: true, .. } if packet.destination_unread => Tri::Unknown,
        Test::List { destination: false, .. } if packet.source_unread => Tri::Unknown,
        Test::List { name, destination, op } => {
            let address = if *destination {
                packet.destination
            } else {
                packet.source
            };
            let entry = (name.clone(), address);
            let listed = packet.lists.contains(&entry);
            match op {
                ListOp::Set if !writes => Tri::Unknown,
                ListOp::Set => {
                    if !listed {
                        packet.lists.push(entry);
                    }
                    Tri::Yes
                }
                ListOp::Check => yes(listed),
                ListOp::Remove if listed && !writes => Tri::Unknown,
                ListOp::Remove => {
                    packet.lists.retain(|e| *e != entry);
                    yes(listed)
                }
            }
        }
    }
}
