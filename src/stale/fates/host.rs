//! The host's own addresses, as the fates model reads them: whether a
//! packet is for the host (`addrtype LOCAL`, the way a `DNAT`ed packet
//! takes after PREROUTING, a packet the host sends to itself looping back
//! to INPUT). Read once per judgement from the network namespace the
//! command runs in; not read (unit tests over save text), the way a
//! packet was tried on stays after a `DNAT`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The addresses of the host's interfaces, where read.
#[derive(Clone, Debug, Default)]
pub struct Host {
    locals: Option<Vec<IpAddr>>,
}

impl Host {
    /// This network namespace's addresses (none where they cannot be read:
    /// then as [`Host::unread`]).
    pub fn read() -> Host {
        Host {
            locals: interface_addresses(),
        }
    }

    /// Addresses not read (unit tests over save text).
    #[cfg(test)]
    pub fn unread() -> Host {
        Host::default()
    }

    /// These addresses (unit tests).
    #[cfg(test)]
    pub fn with(locals: &[&str]) -> Host {
        Host {
            locals: Some(locals.iter().map(|a| a.parse().unwrap()).collect()),
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
