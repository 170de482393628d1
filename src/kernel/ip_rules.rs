//! The policy routing rules that read a packet's mark (`ip rule ...
//! fwmark M/MASK`), read over NETLINK_ROUTE with one `RTM_GETRULE` dump
//! per family. Only `stale` asks (its packet model does not route: a mark
//! such a rule reads may send a packet another way); nothing is written.

use std::io;
use std::os::fd::AsRawFd;

use nix::errno::Errno;
use nix::sys::socket::{
    connect, recv, send, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType,
};

use crate::family::Family;

// From <linux/fib_rules.h> (libc lacks them).
const FRA_PRIORITY: u16 = 6;
const FRA_FWMARK: u16 = 10;
const FRA_TABLE: u16 = 15;
const FRA_FWMASK: u16 = 16;
/// `struct fib_rule_hdr`: family, dst_len, src_len, tos, table, two
/// reserved bytes, action (u8 each), flags (u32).
const FIB_RULE_HDR_LEN: usize = 12;
const NLMSG_HEADER_LEN: usize = std::mem::size_of::<libc::nlmsghdr>();

/// A rule that routes by the mark: `ip rule` priority, `fwmark MARK/MASK`,
/// and the table it looks up (0 where it names none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkRule {
    pub priority: u32,
    pub mark: u32,
    pub mask: u32,
    pub table: u32,
}

impl std::fmt::Display for MarkRule {
    /// `ip rule 100: fwmark 0x1/0xffffffff lookup 7`, as `ip rule` lists it.
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "ip rule {}: fwmark {:#x}/{:#x}", self.priority, self.mark, self.mask)?;
        match self.table {
            0 => Ok(()),
            table => write!(f, " lookup {table}"),
        }
    }
}

/// The rules of `family` that read the mark, in this network namespace.
pub fn mark_rules(family: Family) -> io::Result<Vec<MarkRule>> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    connect(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
    let rtgen_family = match family {
        Family::Ipv4 => libc::AF_INET,
        Family::Ipv6 => libc::AF_INET6,
    } as u8;
    let length = (NLMSG_HEADER_LEN + FIB_RULE_HDR_LEN) as u32;
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    let mut request = Vec::with_capacity(length as usize);
    request.extend_from_slice(&length.to_ne_bytes());
    request.extend_from_slice(&libc::RTM_GETRULE.to_ne_bytes());
    request.extend_from_slice(&flags.to_ne_bytes());
    request.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    request.extend_from_slice(&0u32.to_ne_bytes()); // port: the kernel's
    request.push(rtgen_family);
    request.extend_from_slice(&[0; FIB_RULE_HDR_LEN - 1]);
    send(fd.as_raw_fd(), &request, MsgFlags::empty())?;

    let mut rules = Vec::new();
    let mut buffer = vec![0u8; 32 * 1024];
    loop {
        let len = match recv(fd.as_raw_fd(), &mut buffer, MsgFlags::empty()) {
            Err(Errno::EINTR) => continue,
            other => other?,
        };
        let mut datagram = &buffer[..len];
        while datagram.len() >= NLMSG_HEADER_LEN {
            let message_len = u32::from_ne_bytes(datagram[0..4].try_into().unwrap()) as usize;
            let message_type = u16::from_ne_bytes(datagram[4..6].try_into().unwrap());
            if message_len < NLMSG_HEADER_LEN || message_len > datagram.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a truncated RTM_GETRULE reply",
                ));
            }
            let body = &datagram[NLMSG_HEADER_LEN..message_len];
            match message_type {
                t if t == libc::NLMSG_DONE as u16 => return Ok(rules),
                t if t == libc::NLMSG_ERROR as u16 => {
                    let errno = body.get(0..4).map_or(0, |b| i32::from_ne_bytes(b.try_into().unwrap()));
                    return Err(io::Error::from_raw_os_error(-errno));
                }
                t if t == libc::RTM_NEWRULE => rules.extend(mark_rule(body)),
                _ => {}
            }
            datagram = &datagram[message_len.next_multiple_of(4).min(datagram.len())..];
        }
    }
}

/// The rule a `RTM_NEWRULE` body holds, where it reads the mark.
fn mark_rule(body: &[u8]) -> Option<MarkRule> {
    let header = body.get(..FIB_RULE_HDR_LEN)?;
    let mut rule = MarkRule {
        priority: 0,
        mark: 0,
        mask: u32::MAX,
        table: u32::from(header[4]),
    };
    let mut reads_mark = false;
    let mut attributes = &body[FIB_RULE_HDR_LEN..];
    while attributes.len() >= 4 {
        let len = u16::from_ne_bytes([attributes[0], attributes[1]]) as usize;
        let kind = u16::from_ne_bytes([attributes[2], attributes[3]]) & 0x3fff;
        let value = attributes.get(4..len)?;
        let word = value.get(..4).map(|b| u32::from_ne_bytes(b.try_into().unwrap()));
        match kind {
            FRA_PRIORITY => rule.priority = word?,
            FRA_FWMARK => (rule.mark, reads_mark) = (word?, true),
            FRA_FWMASK => (rule.mask, reads_mark) = (word?, true),
            FRA_TABLE => rule.table = word?,
            _ => {}
        }
        attributes = &attributes[len.next_multiple_of(4).min(attributes.len())..];
    }
    (reads_mark && rule.mask != 0).then_some(rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `RTM_NEWRULE` body: the header, then `(type, u32)` attributes.
    fn body(table: u8, attributes: &[(u16, u32)]) -> Vec<u8> {
        let mut body = vec![libc::AF_INET as u8, 0, 0, 0, table, 0, 0, 1, 0, 0, 0, 0];
        for (kind, value) in attributes {
            body.extend_from_slice(&8u16.to_ne_bytes());
            body.extend_from_slice(&kind.to_ne_bytes());
            body.extend_from_slice(&value.to_ne_bytes());
        }
        body
    }

    #[test]
    fn a_rule_with_a_fwmark_reads_the_mark_and_one_without_does_not() {
        let read = mark_rule(&body(0, &[(FRA_PRIORITY, 100), (FRA_FWMARK, 1), (FRA_TABLE, 7)])).unwrap();
        assert_eq!(
            read,
            MarkRule {
                priority: 100,
                mark: 1,
                mask: u32::MAX,
                table: 7
            }
        );
        assert_eq!(read.to_string(), "ip rule 100: fwmark 0x1/0xffffffff lookup 7");
        let masked = mark_rule(&body(254, &[(FRA_FWMARK, 0x100), (FRA_FWMASK, 0xff00)])).unwrap();
        assert_eq!((masked.mask, masked.table), (0xff00, 254));
        assert_eq!(mark_rule(&body(254, &[(FRA_PRIORITY, 32766), (FRA_TABLE, 254)])), None);
        assert_eq!(mark_rule(&body(254, &[(FRA_FWMARK, 0), (FRA_FWMASK, 0)])), None);
    }
}
