//! A witness of `stale` read back into a packet the topology can send:
//! the text "tcp any → 10.2.0.2:9999, forwarded in by any interface, out
//! by any interface, NEW (now: ...; after: ...)" parsed, and each "any"
//! (a value no rule names) given a value of the topology's that no rule of
//! the state's family names. It decides which witnesses can be replayed
//! and why the others cannot.

use super::netns_topology::{Family, CLIENT, ROUTER, ROUTER_TCP, ROUTER_UDP, SERVER, SERVER_TCP, SERVER_UDP};
use super::rule_grammar::{Line, State};
use std::net::{IpAddr, SocketAddr};

/// The addresses the replay topology adds, no rule of the grammar names
/// them: a client source, a router address, a server address, per family.
pub const EXTRA_SOURCE: [&str; 2] = ["198.51.100.5", "fc00:51::5"];
pub const EXTRA_ROUTER: [&str; 2] = ["198.18.0.1", "fc00:18::1"];
pub const EXTRA_SERVER: [&str; 2] = ["198.19.0.2", "fc00:19::2"];
/// A port no rule of the grammar names, listened on as the others.
pub const EXTRA_PORT: u16 = 7777;

fn extra(addresses: [&'static str; 2], family: Family) -> &'static str {
    addresses[usize::from(family == Family::V6)]
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Way {
    Input,
    Forward,
    Output,
}

/// A packet as a witness says it; None: "any".
#[derive(Clone, Debug, PartialEq)]
pub struct Said {
    pub protocol: String,
    pub source: Option<IpAddr>,
    pub source_port: Option<u16>,
    pub destination: Option<IpAddr>,
    pub destination_port: Option<u16>,
    pub way: Way,
    pub in_interface: Option<String>,
    pub out_interface: Option<String>,
    pub state: String,
    pub marked: bool,
}

/// A witness: its packet, whether a second such packet is the one
/// stopped, the packet it is sent after (a list written), whether only
/// one order of the copies stops it, whether its reply is stopped after.
#[derive(Clone, Debug)]
pub struct Witness {
    pub text: String,
    pub packet: Said,
    pub second: bool,
    pub primer: Option<Said>,
    pub one_order: bool,
    pub reply_stopped: bool,
}

fn address(text: &str) -> Option<Option<IpAddr>> {
    let bare = text.trim_start_matches('[').trim_end_matches(']');
    if bare == "any" {
        return Some(None);
    }
    bare.parse().ok().map(Some)
}

fn port(text: &str) -> Option<Option<u16>> {
    if text == "any" {
        return Some(None);
    }
    text.parse().ok().map(Some)
}

fn interface(text: &str) -> Option<String> {
    (text != "any interface").then(|| text.to_string())
}

/// "tcp any → 10.2.0.2:9999, forwarded in by rc, out by any interface, NEW, mark 0x1".
fn said(text: &str) -> Option<Said> {
    let (protocol, rest) = text.split_once(' ')?;
    let (from, rest) = rest.split_once(" → ")?;
    let (to, rest) = rest.split_once(", ")?;
    let (source, source_port) = match from.rsplit_once(':') {
        Some((host, p)) if from.starts_with('[') || from.matches(':').count() == 1 => (address(host)?, port(p)?),
        _ => (address(from)?, None),
    };
    let (host, p) = to.rsplit_once(':')?;
    let (destination, destination_port) = (address(host)?, port(p)?);
    let mut parts = rest.split(", ");
    let way_text = parts.next()?;
    let (way, in_interface, out_interface) = if let Some(i) = way_text.strip_prefix("arriving for the host by ") {
        (Way::Input, interface(i), None)
    } else if let Some(i) = way_text.strip_prefix("forwarded in by ") {
        let o = parts.next()?.strip_prefix("out by ")?;
        (Way::Forward, interface(i), interface(o))
    } else {
        let o = way_text.strip_prefix("sent by the host out by ")?;
        (Way::Output, None, interface(o))
    };
    let state = parts.next()?.to_string();
    let marked = parts.any(|p| p.starts_with("mark ") || p.starts_with("connmark "));
    Some(Said {
        protocol: protocol.to_string(),
        source,
        source_port,
        destination,
        destination_port,
        way,
        in_interface,
        out_interface,
        state,
        marked,
    })
}

/// Reads a witness (as [`super::differential::FamilyVerdict::witnesses`] gives it).
pub fn parse(text: &str) -> Option<Witness> {
    let now = text.rfind(" (now")?;
    let head = &text[..now];
    let one_order = text[now..].starts_with(" (now, ");
    let (head, primer) = match head.find(" (sent after ") {
        Some(at) => {
            let inner = &head[at + " (sent after ".len()..];
            let end = inner.find(", whose address the ")?;
            (&head[..at], Some(said(&inner[..end])?))
        }
        None => (head, None),
    };
    const SECOND: &str = " (a second such packet, meeting what the first wrote)";
    let second = head.ends_with(SECOND);
    let head = head.strip_suffix(SECOND).unwrap_or(head);
    Some(Witness {
        text: text.to_string(),
        packet: said(head)?,
        second,
        primer,
        one_order,
        reply_stopped: text[now..].contains(", but its reply is "),
    })
}

/// What a family's rules name: addresses (with their prefixes), ports and
/// interfaces, read from every word of both copies.
pub struct Named {
    sources: Vec<(IpAddr, u8)>,
    destinations: Vec<(IpAddr, u8)>,
    ports: Vec<(u16, u16)>,
    interfaces: Vec<String>,
}

fn network(word: &str) -> Option<(IpAddr, u8)> {
    let word = word.trim_start_matches('[');
    let (host, prefix) = word.split_once('/').unwrap_or((word, ""));
    let host = host.split(']').next().unwrap_or(host);
    let host = match host.parse::<IpAddr>() {
        Ok(a) => a,
        // "10.2.0.2:8080" (a DNAT's to-destination).
        Err(_) => host.rsplit_once(':').and_then(|(h, _)| h.parse().ok())?,
    };
    let full = if host.is_ipv4() { 32 } else { 128 };
    Some((host, prefix.parse().unwrap_or(full)))
}

fn within(address: IpAddr, (net, prefix): (IpAddr, u8)) -> bool {
    match (address, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

impl Named {
    pub fn of(state: &State, family: Family) -> Named {
        let mut named = Named {
            sources: Vec::new(),
            destinations: Vec::new(),
            ports: Vec::new(),
            interfaces: Vec::new(),
        };
        let Some((_, stale, live)) = state.families.iter().find(|(f, _, _)| *f == family) else {
            return named;
        };
        for line in stale.iter().chain(live) {
            let Line::Rule { rule, .. } = line else { continue };
            let words: Vec<&str> = rule.split_whitespace().collect();
            for (at, word) in words.iter().enumerate() {
                let next = words.get(at + 1).copied().unwrap_or_default();
                match *word {
                    "-s" | "--source" | "--src-range" => named.sources.extend(network(next)),
                    "-d" | "--destination" | "--dst-range" | "--to-destination" | "--to" => {
                        named.destinations.extend(network(next))
                    }
                    "-i" | "-o" | "--in-interface" | "--out-interface" => named.interfaces.push(next.to_string()),
                    "--dport" | "--sport" | "--dports" | "--sports" | "--to-ports" | "--ports" => {
                        for item in next.split(',') {
                            let (low, high) = item.split_once([':', '-']).unwrap_or((item, item));
                            if let (Ok(low), Ok(high)) = (low.parse(), high.parse()) {
                                named.ports.push((low, high));
                            }
                        }
                    }
                    _ => {}
                }
                if word.contains(['.', ':']) {
                    if let Some(p) = word.rsplit(':').next().and_then(|p| p.parse().ok()) {
                        if word.contains('.') || word.contains("]:") {
                            named.ports.push((p, p));
                        }
                    }
                }
            }
        }
        named
    }

    fn source_named(&self, address: IpAddr) -> bool {
        self.sources.iter().any(|n| within(address, *n))
    }

    fn destination_named(&self, address: IpAddr) -> bool {
        self.destinations.iter().any(|n| within(address, *n))
    }

    fn port_named(&self, port: u16) -> bool {
        self.ports.iter().any(|(low, high)| (*low..=*high).contains(&port))
    }
}

/// A packet the client sends: from `source`, to `to`, TCP or UDP.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Send {
    pub tcp: bool,
    pub source: IpAddr,
    pub to: SocketAddr,
}

/// A witness as the topology sends it; `reply_stopped`: it arrives, but
/// no exchange completes.
#[derive(Clone, Debug)]
pub struct Replay {
    pub send: Send,
    pub primer: Option<Send>,
    pub second: bool,
    pub one_order: bool,
    pub reply_stopped: bool,
}

/// The value `said` names, or the first of `choices` no rule names.
fn pick<T: Copy + PartialEq>(
    said: Option<T>,
    choices: &[T],
    named: impl Fn(T) -> bool,
    what: &str,
) -> Result<T, String> {
    match said {
        Some(value) if choices.contains(&value) => Ok(value),
        Some(_) => Err(format!("a {what} the topology has not")),
        None => choices
            .iter()
            .copied()
            .find(|c| !named(*c))
            .ok_or_else(|| format!("every {what} of the topology named by a rule")),
    }
}

/// `packet` as the client sends it in `family`, or why it cannot be.
fn sent(packet: &Said, family: Family, named: &Named) -> Result<Send, String> {
    let tcp = match packet.protocol.as_str() {
        "tcp" => true,
        "udp" => false,
        other => return Err(format!("protocol {other}")),
    };
    if packet.state != "NEW" {
        return Err(format!("state {}", packet.state));
    }
    if packet.marked {
        return Err("a mark or connmark".into());
    }
    if packet.source_port.is_some() {
        return Err("a source port".into());
    }
    let interface = |said: &Option<String>, ours: &str| match said {
        Some(name) if name == ours => Ok(()),
        Some(name) => Err(format!("interface {name}")),
        None if named.interfaces.iter().any(|i| i.trim_start_matches('!') == ours) => {
            Err(format!("any interface, where a rule names {ours}"))
        }
        None => Ok(()),
    };
    let ip = |text: &str| -> IpAddr { text.parse().unwrap() };
    let (destinations, tcp_ports, udp_ports) = match packet.way {
        Way::Output => return Err("sent by the host".into()),
        Way::Input => {
            interface(&packet.in_interface, "rc")?;
            let other = match family {
                Family::V4 => "10.2.0.1",
                Family::V6 => "fd00:2::1",
            };
            (
                vec![ip(ROUTER.of(family)), ip(other), ip(extra(EXTRA_ROUTER, family))],
                &ROUTER_TCP[..],
                &ROUTER_UDP[..],
            )
        }
        Way::Forward => {
            interface(&packet.in_interface, "rc")?;
            interface(&packet.out_interface, "rs")?;
            (
                vec![ip(SERVER.of(family)), ip(extra(EXTRA_SERVER, family))],
                &SERVER_TCP[..],
                &SERVER_UDP[..],
            )
        }
    };
    let sources = [ip(CLIENT.of(family)), ip(extra(EXTRA_SOURCE, family))];
    let source = pick(packet.source, &sources, |a| named.source_named(a), "source")?;
    let held: Vec<u16> = if tcp { tcp_ports.to_vec() } else { udp_ports.to_vec() };
    let mut ports = held.clone();
    ports.push(EXTRA_PORT);
    let addresses: Vec<IpAddr> = match packet.destination {
        Some(a) if destinations.contains(&a) => vec![a],
        Some(_) => return Err("a destination the topology has not".into()),
        None => destinations
            .iter()
            .copied()
            .filter(|a| !named.destination_named(*a))
            .collect(),
    };
    let ports: Vec<u16> = match packet.destination_port {
        Some(p) => vec![p],
        None => ports.into_iter().filter(|p| !named.port_named(*p)).collect(),
    };
    // The topology's own UDP listeners answer from the host's first
    // address: to another, only a port they do not hold.
    let answers = |a: &IpAddr, p: &u16| tcp || *a == destinations[0] || !held.contains(p);
    let to = addresses
        .iter()
        .flat_map(|a| ports.iter().map(move |p| (*a, *p)))
        .find(|(a, p)| answers(a, p))
        .ok_or_else(|| {
            format!(
                "no {} destination and port of the topology that no rule names",
                if tcp { "tcp" } else { "udp" }
            )
        })?;
    Ok(Send {
        tcp,
        source,
        to: SocketAddr::new(to.0, to.1),
    })
}

/// `witness` as the topology replays it in `family`, or why it cannot be.
pub fn replay(witness: &Witness, family: Family, named: &Named) -> Result<Replay, String> {
    let send = sent(&witness.packet, family, named)?;
    let primer = match &witness.primer {
        Some(p) => Some(sent(p, family, named).map_err(|why| format!("its first packet: {why}"))?),
        None => None,
    };
    Ok(Replay {
        send,
        primer,
        second: witness.second,
        one_order: witness.one_order,
        reply_stopped: witness.reply_stopped,
    })
}
