//! The host's own addresses, as the fates model reads them: whether a
//! packet is for the host (`addrtype LOCAL`, the way a `DNAT`ed packet
//! takes after PREROUTING, a packet the host sends to itself looping back
//! to INPUT); and the policy routing rules that read a packet's mark
//! (`ip rule ... fwmark`: routes are not modelled, so a mark such a rule
//! reads, changed before routing, leaves the way unknown); and the native
//! nftables base chains at each hook (not read: a packet past one has no
//! known fate). Read once per
//! judgement from the network namespace the command runs in; addresses
//! not read (unit tests over save text), the way a packet was tried on
//! stays after a `DNAT`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::family::Family;
use crate::kernel::ip_rules::{self, MarkRule};
use crate::kernel::nft::HookedChain;

use super::packet::Way;
use super::walk::{NATIVE, ROUTING};

/// The addresses of the host's interfaces, where read; the family's
/// routing rules that read the mark (Err: why they could not be read).
#[derive(Clone, Debug)]
pub struct Host {
    pub family: Family,
    locals: Option<Vec<IpAddr>>,
    mark_rules: Result<Vec<MarkRule>, String>,
    /// The base chains not iptables-nft's own (native nftables), per hook
    /// as iptables names it: not read, so a packet past them has no known
    /// fate.
    native: Vec<(&'static [u8], String)>,
}

impl Host {
    /// This network namespace's addresses (none where they cannot be read:
    /// then as [`Host::unread`]) and `family`'s rules that route by mark.
    pub fn read(family: Family, native: &[HookedChain]) -> Host {
        const HOOKS: [&[u8]; 5] = [b"PREROUTING", b"INPUT", b"FORWARD", b"OUTPUT", b"POSTROUTING"];
        Host {
            family,
            locals: interface_addresses(),
            mark_rules: ip_rules::mark_rules(family).map_err(|e| e.to_string()),
            native: native
                .iter()
                .filter_map(|h| Some((*HOOKS.get(h.hook as usize)?, h.shown.clone())))
                .collect(),
        }
    }

    /// What the model cannot read past `hook` for a packet on `way`: a
    /// native nftables chain there ([`NATIVE`]), or routing after it
    /// (PREROUTING; OUTPUT for what the host sends) by a mark changed from
    /// `arrived` to `now` in a bit a routing rule reads ([`ROUTING`]); as a
    /// step's backend and text.
    pub fn unread_past(&self, hook: &[u8], way: Way, arrived: u32, now: u32) -> Option<(&'static str, String)> {
        if let Some((_, shown)) = self.native.iter().find(|(h, _)| *h == hook) {
            return Some((NATIVE, format!("native nftables chain {shown}")));
        }
        let routed = hook == b"PREROUTING" || (hook == b"OUTPUT" && way == Way::Output);
        let rule = routed.then(|| self.routes_apart(arrived, now)).flatten()?;
        Some((ROUTING, rule))
    }

    /// Addresses not read, no rule routing by mark (unit tests over save
    /// text).
    #[cfg(test)]
    pub fn unread() -> Host {
        Host {
            family: Family::Ipv4,
            locals: None,
            mark_rules: Ok(Vec::new()),
            native: Vec::new(),
        }
    }

    /// These addresses (unit tests).
    #[cfg(test)]
    pub fn with(locals: &[&str]) -> Host {
        Host {
            locals: Some(locals.iter().map(|a| a.parse().unwrap()).collect()),
            ..Host::unread()
        }
    }

    /// An IPv6 family's host, nothing read (unit tests).
    #[cfg(test)]
    pub fn ipv6() -> Host {
        Host {
            family: Family::Ipv6,
            ..Host::unread()
        }
    }

    /// A native nftables base chain at `hook` (unit tests).
    #[cfg(test)]
    pub fn with_native(hook: &'static [u8], shown: &str) -> Host {
        Host {
            native: vec![(hook, shown.to_string())],
            ..Host::unread()
        }
    }

    /// These rules routing by mark (unit tests).
    #[cfg(test)]
    pub fn routing_by(mark_rules: &[MarkRule]) -> Host {
        Host {
            mark_rules: Ok(mark_rules.to_vec()),
            ..Host::unread()
        }
    }

    /// The routing rule that reads a bit in which marks `from` and `to`
    /// differ, said (`ip rule 100: fwmark 0x1/0xffffffff lookup 7`); or
    /// that the rules could not be read. None where none reads one.
    fn routes_apart(&self, from: u32, to: u32) -> Option<String> {
        let changed = from ^ to;
        if changed == 0 {
            return None;
        }
        match &self.mark_rules {
            Err(why) => Some(format!("ip rule (not read: {why})")),
            Ok(rules) => rules.iter().find(|r| r.mask & changed != 0).map(|r| r.to_string()),
        }
    }

    /// Whether `address` is one of the host's: None where not read (a
    /// loopback address always is).
    pub fn is_local(&self, address: IpAddr) -> Option<bool> {
        if address.is_loopback() {
            return Some(true);
        }
        Some(self.locals.as_ref()?.contains(&address))
    }
}

/// `getifaddrs(3)`'s IPv4 and IPv6 addresses.
fn interface_addresses() -> Option<Vec<IpAddr>> {
    let mut first: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `first` with a list freed below.
    if unsafe { libc::getifaddrs(&mut first) } != 0 {
        return None;
    }
    let mut found = Vec::new();
    let mut at = first;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs returned.
        let entry = unsafe { &*at };
        if !entry.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr of the family it names.
            match i32::from(unsafe { (*entry.ifa_addr).sa_family }) {
                libc::AF_INET => {
                    let v4 = unsafe { &*(entry.ifa_addr as *const libc::sockaddr_in) };
                    found.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))));
                }
                libc::AF_INET6 => {
                    let v6 = unsafe { &*(entry.ifa_addr as *const libc::sockaddr_in6) };
                    found.push(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.s6_addr)));
                }
                _ => {}
            }
        }
        at = entry.ifa_next;
    }
    // SAFETY: the list getifaddrs returned, freed once.
    unsafe { libc::freeifaddrs(first) };
    Some(found)
}
