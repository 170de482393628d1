//! The wire format of nf_tables read requests and their replies, encoded
//! and parsed by hand: a `nlmsghdr`, a `nfgenmsg` (family, version 0,
//! res_id 0), then netlink attributes.
//!
//! It builds datagrams and splits received ones into messages and
//! attributes; it sends nothing and knows nothing of what the attributes
//! mean beyond their numbers.

use std::io;

use libc::c_int;
use nix::errno::Errno;

use crate::family::Family;

// Attribute numbers from <linux/netfilter/nf_tables.h> (libc lacks them).
pub(super) const NFTA_TABLE_NAME: u16 = 1;
pub(super) const NFTA_CHAIN_TABLE: u16 = 1;
pub(super) const NFTA_CHAIN_NAME: u16 = 3;
pub(super) const NFTA_CHAIN_HOOK: u16 = 4;
pub(super) const NFTA_CHAIN_USE: u16 = 6;
pub(super) const NFTA_RULE_TABLE: u16 = 1;
pub(super) const NFTA_RULE_CHAIN: u16 = 2;
pub(super) const NFTA_RULE_HANDLE: u16 = 3;
pub(super) const NFTA_RULE_POSITION: u16 = 6;
pub(super) const NFTA_GEN_ID: u16 = 1;
/// `NFNL_BATCH_GENID` from `<linux/netfilter/nfnetlink.h>`.
const NFNL_BATCH_GENID: u16 = 1;

const NLMSG_HEADER_LEN: usize = std::mem::size_of::<libc::nlmsghdr>();
/// `struct nfgenmsg`: family (u8), version (u8), res_id (u16, big endian).
const NFGENMSG_LEN: usize = 4;
const NLA_HEADER_LEN: usize = std::mem::size_of::<libc::nlattr>();

pub(super) const NLMSG_NOOP: u16 = libc::NLMSG_NOOP as u16;
pub(super) const NLMSG_ERROR: u16 = libc::NLMSG_ERROR as u16;
pub(super) const NLMSG_DONE: u16 = libc::NLMSG_DONE as u16;
pub(super) const NLM_F_DUMP_INTR: u16 = libc::NLM_F_DUMP_INTR as u16;

/// `nfgenmsg`'s family for `family`: `NFPROTO_IPV4` or `NFPROTO_IPV6`.
pub(super) fn family_nfproto(family: Family) -> u8 {
    (match family {
        Family::Ipv4 => libc::NFPROTO_IPV4,
        Family::Ipv6 => libc::NFPROTO_IPV6,
    }) as u8
}

/// An nf_tables request: message, family and attributes (a string, NUL
/// terminated, or a big-endian u32).
pub(super) struct Request {
    message_type: u16,
    /// `nfgenmsg`'s family: `NFPROTO_IPV4`, `NFPROTO_IPV6` or `NFPROTO_INET`.
    nfproto: u8,
    /// The attributes, already in their wire form (each header, value and
    /// padding): one buffer, not one per attribute.
    attributes: Vec<u8>,
    /// A batch message: family AF_UNSPEC, res_id the nf_tables subsystem.
    batch: bool,
    /// `NFNL_BATCH_GENID` (a batch's BATCH_BEGIN).
    generation: Option<u32>,
}

impl Request {
    pub(super) fn new(nft_msg: c_int, family: Family) -> Request {
        Request::for_nfproto(nft_msg, family_nfproto(family))
    }

    pub(super) fn for_nfproto(nft_msg: c_int, nfproto: u8) -> Request {
        Request {
            message_type: ((libc::NFNL_SUBSYS_NFTABLES << 8) | nft_msg) as u16,
            nfproto,
            attributes: Vec::new(),
            batch: false,
            generation: None,
        }
    }

    /// BATCH_BEGIN (with the generation it expects) or BATCH_END of an
    /// nf_tables batch.
    pub(super) fn batch(kind: c_int, generation: Option<u32>) -> Request {
        Request {
            message_type: kind as u16,
            nfproto: 0, // not sent: a batch message says AF_UNSPEC
            attributes: Vec::new(),
            batch: true,
            generation,
        }
    }

    /// A string attribute, NUL-terminated as the kernel's `nla_strcmp`
    /// expects (NLA_STRING).
    pub(super) fn attr(self, kind: u16, value: &str) -> Request {
        self.attr_bytes(kind, value.as_bytes())
    }

    /// A string attribute given as the bytes the kernel holds (a name read
    /// back from it need not be UTF-8), NUL-terminated.
    pub(super) fn attr_bytes(mut self, kind: u16, value: &[u8]) -> Request {
        self.push_attribute(kind, &[value, &[0]]);
        self
    }

    /// A u32 attribute in network byte order (NLA_U32 of nf_tables).
    pub(super) fn attr_u32(mut self, kind: u16, value: u32) -> Request {
        self.push_attribute(kind, &[&value.to_be_bytes()]);
        self
    }

    /// Appends one attribute whose value is `pieces`, one after the other.
    fn push_attribute(&mut self, kind: u16, pieces: &[&[u8]]) {
        let len = NLA_HEADER_LEN + pieces.iter().map(|piece| piece.len()).sum::<usize>();
        self.attributes.reserve(align4(len));
        self.attributes.extend_from_slice(&(len as u16).to_ne_bytes());
        self.attributes.extend_from_slice(&kind.to_ne_bytes());
        for piece in pieces {
            self.attributes.extend_from_slice(piece);
        }
        self.attributes.resize(align4(self.attributes.len()), 0);
    }

    /// Appends the request as one netlink message to `datagram`.
    pub(super) fn encode(&self, datagram: &mut Vec<u8>, flags: c_int, seq: u32) {
        let start = datagram.len();
        datagram.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_len, set below
        datagram.extend_from_slice(&self.message_type.to_ne_bytes());
        datagram.extend_from_slice(&(flags as u16).to_ne_bytes());
        datagram.extend_from_slice(&seq.to_ne_bytes());
        datagram.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid: the kernel fills it in
        let family = self.nfproto;
        if self.batch {
            let res_id = (libc::NFNL_SUBSYS_NFTABLES as u16).to_be_bytes();
            datagram.extend_from_slice(&[libc::AF_UNSPEC as u8, libc::NFNETLINK_V0 as u8, res_id[0], res_id[1]]);
        } else {
            datagram.extend_from_slice(&[family, libc::NFNETLINK_V0 as u8, 0, 0]);
        }
        if let Some(generation) = self.generation {
            datagram.extend_from_slice(&((NLA_HEADER_LEN + 4) as u16).to_ne_bytes());
            datagram.extend_from_slice(&NFNL_BATCH_GENID.to_ne_bytes());
            datagram.extend_from_slice(&generation.to_be_bytes());
        }
        datagram.extend_from_slice(&self.attributes);
        let len = (datagram.len() - start) as u32;
        datagram[start..start + 4].copy_from_slice(&len.to_ne_bytes());
    }
}

/// One netlink message of a received datagram.
pub(super) struct Message<'a> {
    pub(super) kind: u16,
    pub(super) flags: u16,
    pub(super) seq: u32,
    /// Everything after the `nlmsghdr`.
    pub(super) payload: &'a [u8],
}

impl Message<'_> {
    /// The error code of an NLMSG_ERROR or NLMSG_DONE message: a negative
    /// errno, or 0 (an ACK, or a dump that completed).
    pub(super) fn error_code(&self) -> io::Result<Result<(), Errno>> {
        let code = self
            .payload
            .get(..4)
            .map(|bytes| i32::from_ne_bytes(bytes.try_into().unwrap()))
            .ok_or_else(|| invalid_data("netlink error message too short"))?;
        Ok(match code {
            0 => Ok(()),
            code => {
                crate::privilege::note_failure(Some(-code));
                Err(Errno::from_raw(-code))
            }
        })
    }
}

/// The netlink messages of a datagram; an error for a malformed one.
pub(super) fn messages(datagram: &[u8]) -> impl Iterator<Item = io::Result<Message<'_>>> {
    let mut rest = datagram;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let header = rest.get(..NLMSG_HEADER_LEN)?;
        let len = u32::from_ne_bytes(header[0..4].try_into().unwrap()) as usize;
        if !(NLMSG_HEADER_LEN..=rest.len()).contains(&len) {
            rest = &[];
            return Some(Err(invalid_data("malformed netlink message")));
        }
        let message = Message {
            kind: u16::from_ne_bytes(header[4..6].try_into().unwrap()),
            flags: u16::from_ne_bytes(header[6..8].try_into().unwrap()),
            seq: u32::from_ne_bytes(header[8..12].try_into().unwrap()),
            payload: &rest[NLMSG_HEADER_LEN..len],
        };
        rest = &rest[align4(len).min(rest.len())..];
        Some(Ok(message))
    })
}

/// The top-level attributes of an nf_tables message payload (after its
/// `nfgenmsg`), as (type, value). Stops at the first malformed attribute.
pub(super) fn attributes(payload: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    nested(payload.get(NFGENMSG_LEN..).unwrap_or_default())
}

/// A u32 attribute in network byte order.
pub(super) fn be_u32(value: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(value.try_into().ok()?))
}

/// A u64 attribute in network byte order.
pub(super) fn be_u64(value: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(value.try_into().ok()?))
}

fn align4(len: usize) -> usize {
    (len + 3) & !3
}

pub(super) fn invalid_data(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// The attributes nested in an attribute's value, as (type, value). Stops
/// at the first malformed attribute.
pub(super) fn nested(value: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut rest = value;
    std::iter::from_fn(move || {
        let header = rest.get(..NLA_HEADER_LEN)?;
        let len = u16::from_ne_bytes([header[0], header[1]]) as usize;
        let kind = u16::from_ne_bytes([header[2], header[3]]) & libc::NLA_TYPE_MASK as u16;
        let value = rest.get(NLA_HEADER_LEN..len)?;
        rest = &rest[align4(len).min(rest.len())..];
        Some((kind, value))
    })
}

#[cfg(test)]
mod tests {
    //! Byte fixtures, written out: the netlink header and the attribute
    //! headers are in the machine's order (so the fixture has a big-endian
    //! and a little-endian form), the nf_tables values in network order on
    //! every machine.
    use super::*;

    /// A GETGEN reply: nlmsghdr { len 28, type NFT_MSG_NEWGEN of
    /// nf_tables (0x0a0f), flags 0x0002, seq 0x01020304, pid 0 }, nfgenmsg,
    /// NFTA_GEN_ID = 0x00012345.
    #[cfg(target_endian = "big")]
    const GEN_REPLY: [u8; 28] = [
        0, 0, 0, 28, 0x0a, 0x0f, 0, 2, 1, 2, 3, 4, 0, 0, 0, 0, // nlmsghdr
        0, 0, 0x23, 0x45, // nfgenmsg: AF_UNSPEC, v0, res_id (big endian)
        0, 8, 0, 1, 0, 1, 0x23, 0x45, // nlattr { len 8, type 1 }, value
    ];
    #[cfg(target_endian = "little")]
    const GEN_REPLY: [u8; 28] = [
        28, 0, 0, 0, 0x0f, 0x0a, 2, 0, 4, 3, 2, 1, 0, 0, 0, 0, // nlmsghdr
        0, 0, 0x23, 0x45, // nfgenmsg: AF_UNSPEC, v0, res_id (big endian)
        8, 0, 1, 0, 0, 1, 0x23, 0x45, // nlattr { len 8, type 1 }, value
    ];

    #[test]
    fn a_reply_decodes_to_the_values_its_bytes_hold() {
        let decoded: Vec<_> = messages(&GEN_REPLY).collect::<io::Result<_>>().unwrap();
        assert_eq!(decoded.len(), 1);
        let message = &decoded[0];
        assert_eq!((message.kind, message.flags, message.seq), (0x0a0f, 2, 0x0102_0304));
        let attrs: Vec<_> = attributes(message.payload).collect();
        assert_eq!(attrs, [(NFTA_GEN_ID, &[0, 1, 0x23, 0x45][..])]);
        assert_eq!(be_u32(attrs[0].1), Some(0x0001_2345));
        assert_eq!(be_u64(&[0, 0, 0, 1, 0, 0, 0x01, 0x02]), Some(0x0000_0001_0000_0102));
        assert_eq!(be_u32(&[1, 2, 3]), None);
    }

    #[test]
    fn a_request_encodes_to_the_bytes_the_kernel_reads() {
        let mut datagram = Vec::new();
        Request::new(libc::NFT_MSG_GETCHAIN, Family::Ipv6)
            .attr(NFTA_CHAIN_TABLE, "nat")
            .attr_u32(NFTA_CHAIN_USE, 0x0a0b_0c0d)
            .encode(&mut datagram, libc::NLM_F_REQUEST, 0x0102_0304);
        // type (10 << 8) | NFT_MSG_GETCHAIN (4), flags NLM_F_REQUEST.
        #[cfg(target_endian = "big")]
        let header = [0, 0, 0, 36, 0x0a, 0x04, 0, 1, 1, 2, 3, 4, 0, 0, 0, 0];
        #[cfg(target_endian = "little")]
        let header = [36, 0, 0, 0, 0x04, 0x0a, 1, 0, 4, 3, 2, 1, 0, 0, 0, 0];
        #[cfg(target_endian = "big")]
        let (name_header, use_header) = ([0, 8, 0, 1], [0, 8, 0, 6]);
        #[cfg(target_endian = "little")]
        let (name_header, use_header) = ([8, 0, 1, 0], [8, 0, 6, 0]);
        let mut want = header.to_vec();
        want.extend_from_slice(&[10, 0, 0, 0]); // NFPROTO_IPV6, v0, res_id 0
        want.extend_from_slice(&name_header);
        want.extend_from_slice(b"nat\0");
        want.extend_from_slice(&use_header);
        want.extend_from_slice(&[0x0a, 0x0b, 0x0c, 0x0d]);
        assert_eq!(datagram, want);
    }

    #[test]
    fn a_batch_begin_carries_its_generation_in_network_order() {
        let mut datagram = Vec::new();
        Request::batch(libc::NFNL_MSG_BATCH_BEGIN, Some(0x0001_0203)).encode(&mut datagram, 0, 7);
        // nfgenmsg: AF_UNSPEC, v0, res_id NFNL_SUBSYS_NFTABLES in network order.
        assert_eq!(datagram[16..20], [0, 0, 0, 10]);
        assert_eq!(datagram[24..28], [0, 1, 2, 3]);
        #[cfg(target_endian = "big")]
        assert_eq!(datagram[..4], [0, 0, 0, 28]);
        #[cfg(target_endian = "little")]
        assert_eq!(datagram[..4], [28, 0, 0, 0]);
    }

    #[test]
    fn an_error_message_gives_its_errno() {
        // struct nlmsgerr: error -2 (ENOENT) in the machine's order.
        let payload = (-2i32).to_be_bytes();
        #[cfg(target_endian = "little")]
        let payload = {
            let mut p = payload;
            p.reverse();
            p
        };
        let message = Message {
            kind: NLMSG_ERROR,
            flags: 0,
            seq: 1,
            payload: &payload,
        };
        assert_eq!(message.error_code().unwrap(), Err(Errno::ENOENT));
    }
}
