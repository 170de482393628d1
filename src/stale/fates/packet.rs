//! One concrete packet as the fates model sees it: the fields the
//! modelled matches read and the modelled targets write, and the way it
//! takes through the host (arriving for it, forwarded, or sent by it).
//!
//! A field no rule named is `None`: an address, a port or an interface
//! unlike every one the rules name, so a rule naming one does not match
//! it. Named state (a `recent` list's entries) is carried along so that a
//! second packet of the same kind meets what the first one wrote.

use std::fmt;
use std::net::IpAddr;

/// The way a packet takes through the hooks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Way {
    /// Arrives for the host: PREROUTING, then INPUT.
    Input,
    /// Forwarded: PREROUTING, FORWARD, POSTROUTING.
    Forward,
    /// Sent by the host: OUTPUT, POSTROUTING.
    Output,
}

/// A connection-tracking state as `-m conntrack --ctstate` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtState {
    New,
    Established,
    Related,
    Invalid,
    Untracked,
}

impl CtState {
    /// The state a `--ctstate`/`--state` word names (`DNAT`, `SNAT` and
    /// words not known here: none).
    pub fn named(word: &[u8]) -> Option<CtState> {
        Some(match word {
            b"NEW" => CtState::New,
            b"ESTABLISHED" => CtState::Established,
            b"RELATED" => CtState::Related,
            b"INVALID" => CtState::Invalid,
            b"UNTRACKED" => CtState::Untracked,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            CtState::New => "NEW",
            CtState::Established => "ESTABLISHED",
            CtState::Related => "RELATED",
            CtState::Invalid => "INVALID",
            CtState::Untracked => "UNTRACKED",
        }
    }
}

/// One entry of a list kept by name (`-m recent`): the list and the
/// address it holds.
pub type ListEntry = (Vec<u8>, Option<IpAddr>);

/// A reply's own destination, before its connection's source nat is undone.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Untranslated {
    destination: Option<IpAddr>,
    destination_port: Option<u16>,
    for_the_host: Option<bool>,
}

/// A packet, with what the rules it met wrote.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Packet {
    pub way: Way,
    /// The protocol's name as `-p` spells it (`tcp`, `udp`, ...).
    pub protocol: Vec<u8>,
    pub source: Option<IpAddr>,
    pub destination: Option<IpAddr>,
    pub source_port: Option<u16>,
    pub destination_port: Option<u16>,
    pub in_interface: Option<Vec<u8>>,
    pub out_interface: Option<Vec<u8>>,
    pub state: CtState,
    pub mark: u32,
    pub connmark: u32,
    /// A nat rule rewrote its destination (`DNAT`, `REDIRECT`) or its
    /// source (`SNAT`, `MASQUERADE`) into another value: what `--ctstate
    /// DNAT`/`SNAT` reads (the kernel counts no rewrite into what it was).
    /// None: whether the new value is another is not known.
    pub dnat: Option<bool>,
    pub snat: Option<bool>,
    /// Its source as a nat rule rewrote it: address (None: not read, as
    /// `MASQUERADE`'s), port, and whether the address is the host's.
    pub source_nat: Option<(Option<IpAddr>, Option<u16>, Option<bool>)>,
    /// A test of its source address is unknown: a reply from an address
    /// not read (after `REDIRECT`, `NETMAP`).
    pub source_unread: bool,
    /// A reply whose connection's source was rewritten: the destination it
    /// takes at the first nat place it meets (PREROUTING's or OUTPUT's),
    /// where the kernel undoes the rewrite; before it, it is addressed to
    /// the rewritten source.
    pub untranslated: Option<Untranslated>,
    /// A nat rule rewrote its destination to an address not read here
    /// (`REDIRECT`: one of the host's own; `NETMAP`: one of its range): a
    /// test of its destination address is unknown.
    pub destination_unread: bool,
    /// Whether its destination is one of the host's addresses (None: not
    /// known, as after `NETMAP`): what `addrtype --dst-type LOCAL` reads.
    pub for_the_host: Option<bool>,
    /// A reply: a later packet of a connection whose first packet's way
    /// (its nat, its connection's mark) is known.
    pub reply: bool,
    /// The entries of named lists this packet meets (written by an
    /// earlier packet, or by a rule this one met).
    pub lists: Vec<ListEntry>,
}

impl Packet {
    /// A packet on `way` that no rule names anything of: tcp, NEW, no mark.
    pub fn unnamed(way: Way) -> Packet {
        Packet {
            way,
            protocol: b"tcp".to_vec(),
            source: None,
            destination: None,
            source_port: None,
            destination_port: None,
            in_interface: None,
            out_interface: None,
            state: CtState::New,
            mark: 0,
            connmark: 0,
            dnat: Some(false),
            snat: Some(false),
            source_nat: None,
            source_unread: false,
            untranslated: None,
            destination_unread: false,
            for_the_host: Some(way == Way::Input),
            reply: false,
            lists: Vec::new(),
        }
    }
}

impl Packet {
    /// The packet with its way through the hooks as the host's addresses
    /// say: arriving for the host where its destination is one of them,
    /// forwarded where it is not (a packet tried on the other way could
    /// not be sent); sent by the host to one of them loops back to it.
    pub fn on_its_way(mut self, host: &super::host::Host) -> Packet {
        let local = self.destination.and_then(|a| host.is_local(a));
        match (self.way, local) {
            (Way::Input | Way::Forward, Some(true)) => self.way = Way::Input,
            (Way::Input | Way::Forward, Some(false)) => self.way = Way::Forward,
            _ => {}
        }
        self.for_the_host = Some(match self.way {
            Way::Output => local == Some(true),
            way => way == Way::Input,
        });
        self
    }
}

impl Packet {
    /// `SNAT`, `MASQUERADE`, a source `NETMAP`: its source rewritten (see
    /// [`Packet::source_nat`]).
    /// Counted as a rewrite where the new source is known to be another:
    /// a named address is not "any"; what the host sends carries one of
    /// its own addresses, which `MASQUERADE`, or a `SNAT` to one of them,
    /// may keep.
    pub fn source_translated(&mut self, address: Option<IpAddr>, port: Option<u16>, local: Option<bool>) {
        self.snat = match (address, self.source) {
            _ if self.source_unread => None,
            (Some(a), Some(s)) if a == s => Some(port.is_some_and(|p| self.source_port != Some(p))),
            (Some(_), Some(_)) => Some(true),
            _ if self.way != Way::Output => Some(true),
            (Some(_), None) if local == Some(false) => Some(true),
            _ => None,
        };
        self.source_nat = Some((address, port, local));
    }

    /// At a nat place: a reply's destination as its connection's source
    /// nat is undone.
    pub fn untranslate(&mut self) {
        if let Some(own) = self.untranslated.take() {
            self.destination = own.destination;
            self.destination_port = own.destination_port;
            self.destination_unread = false;
            self.for_the_host = own.for_the_host;
        }
    }

    /// The reply to `sent` (a connection's first packet), this being
    /// `sent` as it left: from where it went (its destination as a nat
    /// rule rewrote it; an address not read, a test of its source is
    /// unknown) back to its source (as a nat rule rewrote it, until the
    /// first nat place), ports and interfaces swapped, ESTABLISHED, with
    /// its connection's mark, nat and lists; no mark of its own. None
    /// where `sent` is no first packet.
    pub fn reply_to(&self, sent: &Packet) -> Option<Packet> {
        if sent.state != CtState::New || self.state != CtState::New {
            return None;
        }
        let way = match self.way {
            Way::Input => Way::Output,
            Way::Output => Way::Input,
            Way::Forward => Way::Forward,
        };
        let own = Untranslated {
            destination: sent.source,
            destination_port: sent.source_port,
            for_the_host: Some(way == Way::Input),
        };
        let (destination, destination_port, for_the_host, untranslated) = match self.source_nat {
            Some((address, port, local)) => (address, port.or(sent.source_port), local, Some(own.clone())),
            None => (own.destination, own.destination_port, own.for_the_host, None),
        };
        Some(Packet {
            way,
            protocol: self.protocol.clone(),
            source: self.destination.filter(|_| !self.destination_unread),
            destination,
            source_port: self.destination_port,
            destination_port,
            in_interface: self.out_interface.clone(),
            out_interface: sent.in_interface.clone(),
            state: CtState::Established,
            mark: 0,
            connmark: self.connmark,
            dnat: self.dnat,
            snat: self.snat,
            source_nat: None,
            source_unread: self.destination_unread,
            destination_unread: untranslated.is_some() && destination.is_none(),
            untranslated,
            for_the_host,
            reply: true,
            lists: self.lists.clone(),
        })
    }
}

/// "any" for a value no rule names.
fn shown<T: fmt::Display>(value: &Option<T>) -> String {
    value.as_ref().map_or("any".into(), T::to_string)
}

fn shown_address(address: &Option<IpAddr>) -> String {
    match address {
        Some(IpAddr::V6(v6)) => format!("[{v6}]"),
        other => shown(other),
    }
}

impl fmt::Display for Packet {
    /// `tcp any → 10.1.0.1:8080, arriving for the host by any interface,
    /// NEW` ("any": a value no rule names), with a mark where not 0.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let interface = |name: &Option<Vec<u8>>| {
            name.as_ref()
                .map_or("any interface".into(), |n| String::from_utf8_lossy(n).into_owned())
        };
        write!(
            f,
            "{} {}{} → {}:{}, ",
            String::from_utf8_lossy(&self.protocol),
            shown_address(&self.source),
            self.source_port.map(|p| format!(":{p}")).unwrap_or_default(),
            shown_address(&self.destination),
            shown(&self.destination_port),
        )?;
        match self.way {
            Way::Input => write!(f, "arriving for the host by {}", interface(&self.in_interface))?,
            Way::Forward => write!(
                f,
                "forwarded in by {}, out by {}",
                interface(&self.in_interface),
                interface(&self.out_interface)
            )?,
            Way::Output => write!(f, "sent by the host out by {}", interface(&self.out_interface))?,
        }
        write!(f, ", {}", self.state.name())?;
        if self.mark != 0 {
            write!(f, ", mark {:#x}", self.mark)?;
        }
        if self.connmark != 0 {
            write!(f, ", connmark {:#x}", self.connmark)?;
        }
        Ok(())
    }
}
