//! What a saved rule's target does to a packet in the fates model: a
//! target by its row in the table of effects ([`effects::EFFECTS`]:
//! accepts, blocks, queues, returns, observes), and for those that change
//! or translate, the options read here (`MARK`, `CONNMARK`, `DNAT`,
//! `REDIRECT`, `NETMAP`, `SNAT`, `MASQUERADE`, `NOTRACK`, `CT --notrack`); any other
//! is unknown.

use super::packet::Packet;
use super::rule::{masked, number};
use crate::stale::effects::{self, Does, Kind};
use std::net::IpAddr;

/// What a rule does to a packet its tests match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// No target, or one that only observes (`LOG`): the chain goes on.
    GoOn,
    Accept,
    Drop,
    Queue,
    Return,
    Jump(Vec<u8>),
    Goto(Vec<u8>),
    /// `MARK` or `CONNMARK`: `(and, xor)` on the mark, on the connection's
    /// mark, then whether the connection's mark is copied in or out.
    Marks(Marking),
    /// `DNAT`: the new destination and port, where given; the nat chain ends.
    Dnat(Option<IpAddr>, Option<u16>),
    /// `REDIRECT`: to one of the host's own addresses, at the port where
    /// given; the nat chain ends.
    Redirect(Option<u16>),
    /// `NETMAP`: the destination (PREROUTING, OUTPUT) or source (else)
    /// into its range; the nat chain ends.
    Netmap,
    /// `SNAT`, `MASQUERADE`: the source's new address and port where read
    /// (`MASQUERADE`'s address is the way out's: not read); the chain ends.
    Snat(Option<IpAddr>, Option<u16>),
    Untrack,
    Unknown,
}

/// What a `MARK` or `CONNMARK` does: each mark becomes `(m & !clear) ^ set`,
/// and a copy between them under masks (`--save-mark`, `--restore-mark`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marking {
    connection: bool,
    clear: u32,
    set: u32,
    copy: Option<Copy>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Copy {
    /// `--save-mark`: the packet's mark into the connection's.
    Save { nfmask: u32, ctmask: u32 },
    /// `--restore-mark`: the connection's mark into the packet's.
    Restore { nfmask: u32, ctmask: u32 },
}

/// The value of `--option` among a target's options.
fn option<'a>(options: &'a [Vec<u8>], name: &[u8]) -> Option<&'a [u8]> {
    options
        .windows(2)
        .find(|pair| pair[0] == name)
        .map(|pair| pair[1].as_slice())
}

/// A target by its row in the table of effects, and for the ones that
/// change or translate, by the options this model reads.
pub fn target(name: &[u8], options: &[Vec<u8>]) -> Action {
    let has = |flag: &[u8]| options.iter().any(|o| o == flag);
    match effects::of(name, Kind::Target).does {
        Does::Accepts => Action::Accept,
        Does::Returns => Action::Return,
        Does::Observes => Action::GoOn,
        Does::Blocks => Action::Drop,
        Does::Queues if has(b"--queue-bypass") => Action::Unknown,
        Does::Queues => Action::Queue,
        Does::Translates => match name {
            b"DNAT" => match option(options, b"--to-destination").and_then(nat_address) {
                Some((address, port)) => Action::Dnat(address, port),
                None => Action::Unknown,
            },
            b"SNAT" => match option(options, b"--to-source").and_then(nat_address) {
                Some((address, port)) => Action::Snat(address, port),
                None => Action::Unknown,
            },
            b"MASQUERADE" => match option(options, b"--to-ports") {
                None => Action::Snat(None, None),
                Some(ports) => first_port(ports).map_or(Action::Unknown, |p| Action::Snat(None, Some(p))),
            },
            b"NETMAP" => Action::Netmap,
            b"REDIRECT" => match option(options, b"--to-ports") {
                None => Action::Redirect(None),
                Some(ports) => first_port(ports).map_or(Action::Unknown, |p| Action::Redirect(Some(p))),
            },
            _ => Action::Unknown,
        },
        Does::Changes => match name {
            b"MARK" | b"CONNMARK" => marking(name == b"CONNMARK", options).map_or(Action::Unknown, Action::Marks),
            b"NOTRACK" => Action::Untrack,
            b"CT" if has(b"--notrack") && options.len() == 1 => Action::Untrack,
            _ => Action::Unknown,
        },
        Does::Reads => Action::Unknown,
    }
}

/// `MARK`'s or `CONNMARK`'s options, where one of those read here.
fn marking(connection: bool, options: &[Vec<u8>]) -> Option<Marking> {
    let word = options.first()?.as_slice();
    let value = options.get(1).map(Vec::as_slice);
    let mask = |name: &[u8]| option(options, name).map_or(Some(u32::MAX), number);
    let mut marking = Marking {
        connection,
        clear: 0,
        set: 0,
        copy: None,
    };
    match word {
        b"--set-xmark" => (marking.set, marking.clear) = masked(value?)?,
        b"--set-mark" => {
            let (v, m) = masked(value?)?;
            (marking.set, marking.clear) = (v, m | v);
        }
        b"--and-mark" => marking.clear = !number(value?)?,
        b"--or-mark" => (marking.set, marking.clear) = (number(value?)?, number(value?)?),
        b"--xor-mark" => marking.set = number(value?)?,
        b"--save-mark" | b"--restore-mark" if connection => {
            let (nfmask, ctmask) = match option(options, b"--mask") {
                Some(m) => (number(m)?, number(m)?),
                None => (mask(b"--nfmask")?, mask(b"--ctmask")?),
            };
            marking.copy = Some(if word == b"--save-mark" {
                Copy::Save { nfmask, ctmask }
            } else {
                Copy::Restore { nfmask, ctmask }
            });
        }
        _ => return None,
    }
    Some(marking)
}

impl Marking {
    pub fn apply(&self, packet: &mut Packet) {
        let mark = if self.connection {
            &mut packet.connmark
        } else {
            &mut packet.mark
        };
        *mark = (*mark & !self.clear) ^ self.set;
        match self.copy {
            // As the kernel's xt_CONNMARK computes them.
            Some(Copy::Save { nfmask, ctmask }) => {
                packet.connmark = (packet.connmark & !ctmask) ^ (packet.mark & nfmask)
            }
            Some(Copy::Restore { nfmask, ctmask }) => {
                packet.mark = (packet.mark & !nfmask) ^ (packet.connmark & ctmask)
            }
            None => {}
        }
    }
}

/// The first port of `9`, `9-10`.
fn first_port(text: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(text).ok()?;
    text.split('-').next()?.parse().ok()
}

/// `DNAT --to-destination`'s or `SNAT --to-source`'s
/// `[address][:port[-port]]` (`[v6]:port`), the first of a range; None
/// where not read.
fn nat_address(text: &[u8]) -> Option<(Option<IpAddr>, Option<u16>)> {
    let text = String::from_utf8_lossy(text);
    let first = |s: &str| s.split('-').next().unwrap_or_default().to_string();
    let (address, port) = if let Some(rest) = text.strip_prefix('[') {
        match rest.split_once(']') {
            Some((a, p)) => (a.to_string(), p.strip_prefix(':').map(first)),
            None => return None,
        }
    } else if text.matches(':').count() == 1 {
        let (a, p) = text.split_once(':').unwrap_or_default();
        (a.to_string(), Some(first(p)))
    } else {
        (text.to_string(), None)
    };
    let address = first(&address);
    let address = if address.is_empty() {
        None
    } else {
        Some(address.parse().ok()?)
    };
    match port.map(|p| p.parse::<u16>()) {
        Some(Err(_)) => None,
        Some(Ok(p)) => Some((address, Some(p))),
        None => Some((address, None)),
    }
}
