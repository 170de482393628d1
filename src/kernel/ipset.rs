//! An ipset's kernel index, by name: what an `-m set` match or a `SET`
//! target holds in its x_tables info (legacy's entry blob, nf_tables'
//! compat expression) in place of the set's name, so the same rule reads
//! back differently in a namespace whose set of that name has another
//! index.
//!
//! Asked as iptables' own set extension asks it: getsockopt `SO_IP_SET`
//! with `IP_SET_OP_GET_BYNAME` on a raw IPv4 socket, a read of the
//! reader's namespace (it needs `CAP_NET_ADMIN` there) that creates
//! nothing and loads no module: without ipset in the kernel there is no
//! set, and the answer is that.

use nix::sys::socket::{socket, AddressFamily, SockFlag, SockProtocol, SockType};
use std::io;
use std::os::fd::OwnedFd;

/// `SO_IP_SET`, at level `SOL_IP`.
const SO_IP_SET: libc::c_int = 83;
/// `IP_SET_OP_GET_BYNAME`: the index of a set named in the request.
const GET_BYNAME: u32 = 6;
/// The oldest protocol version the kernel's sockopt answers to (and every
/// kernel since ipset's merge answers to it).
const PROTOCOL_MIN: u32 = 6;
/// `IPSET_MAXNAMELEN`: a set's name and its NUL.
pub const MAXNAMELEN: usize = 32;
/// `IPSET_INVALID_ID`: no set of that name.
const INVALID_ID: u16 = u16::MAX;
/// `struct ip_set_req_get_set`: op, version, then the name or the index.
const REQUEST_LEN: usize = 8 + MAXNAMELEN;

/// A socket to ask the namespace it was opened in.
pub struct IpsetSocket(OwnedFd);

impl IpsetSocket {
    /// Opens the socket (a raw one: `CAP_NET_RAW`).
    pub fn open() -> io::Result<IpsetSocket> {
        socket(
            AddressFamily::Inet,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::Raw,
        )
        .map(IpsetSocket)
        .map_err(io::Error::from)
    }

    /// The index of the set named `name` in the socket's namespace; None
    /// when there is no such set (or no ipset in the kernel at all).
    pub fn index_of(&self, name: &str) -> io::Result<Option<u16>> {
        if name.len() >= MAXNAMELEN || name.contains('\0') {
            return Ok(None);
        }
        let mut request = [0u8; REQUEST_LEN];
        request[..4].copy_from_slice(&GET_BYNAME.to_ne_bytes());
        request[4..8].copy_from_slice(&PROTOCOL_MIN.to_ne_bytes());
        request[8..8 + name.len()].copy_from_slice(name.as_bytes());
        match super::legacy::getsockopt_exact(&self.0, libc::SOL_IP, SO_IP_SET, &mut request) {
            Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => return Ok(None),
            asked => asked?,
        }
        let index = u16::from_ne_bytes([request[8], request[9]]);
        Ok((index != INVALID_ID).then_some(index))
    }
}
