//! nf_tables state, read over NETLINK_NETFILTER with point lookups and
//! streamed dumps.
//!
//! Only read requests are ever sent (GETTABLE, GETCHAIN, GETRULE, GETGEN,
//! and for `stale` GETSET, GETSETELEM, GETOBJ, GETFLOWTABLE), and one empty
//! batch that waits for the commit mutex and commits nothing
//! ([`NftSocket::wait_for_commits`]), so nothing here changes the ruleset or
//! its generation id; the one exception is `empty`, which only
//! `stale --remove` calls ([`NftSocket::empty_tables`]). The first
//! nf_tables message can autoload the `nf_tables` module: callers check
//! [`crate::kernel::modules::nf_tables`] before opening an [`NftSocket`].
//!
//! What the reads cost:
//! - [`NftSocket::exists`] and [`NftSocket::generation`]: one round trip,
//!   independent of the ruleset size (several lookups share one datagram);
//! - [`NftSocket::builtin_chain_rules`]: point lookups of the built-in
//!   chains, one round trip, independent of the number of user chains (a
//!   GETCHAIN dump would cost more than linearly in the chains: the kernel
//!   rescans the chain list for every batch it sends);
//! - [`NftSocket::count_rules`]: GETRULE dumps, where the kernel serialises
//!   every rule whole (hundreds of bytes each with xt matches). They are
//!   streamed through a fixed buffer and abandoned as soon as the count
//!   passes the caller's limit; one per family, not per table (see there).
//!
//! Counts from one state: a dump spans many datagrams, and a ruleset
//! committed meanwhile (a full `iptables-nft-restore` in another process)
//! can tear it without the kernel flagging `NLM_F_DUMP_INTR`. So every
//! count is bracketed by GETGEN before and after, with the commit mutex
//! taken and released after the first, and every dump is checked for
//! datagrams that resumed in the wrong place; when the generation moved the
//! count is read again, a few times at most, and two identical readings of
//! the iptables tables give it then (commits in other tables move the
//! generation too); else it is unknown ([`RulesetKeptChanging`]), never a
//! guess. [`NftSocket::count_rules`] argues why from the kernel's commit
//! path. A count is tagged with the generation it belongs to, if one.
//!
//! What a count cannot be taken from: `NFTA_CHAIN_USE` and `NFTA_TABLE_USE`.
//! They are O(1) point lookups (one built-in chain's use is its exact rule
//! count, and a table whose use equals its built-in chains has no other
//! chain), but the kernel changes them while a transaction is *prepared*
//! (`nft_use_inc` in `nf_tables_newrule`, `nft_use_dec` in
//! `nf_tables_delrule_deactivate` and `nft_delchain`, all under the commit
//! mutex), whereas the generation moves only at the commit. A lookup during
//! another process's restore sees part of it with the generation unchanged
//! before and after (the test `chain_use_counts_show_a_transaction_before_its_commit`
//! catches such values between two committed states), and read-only netlink
//! offers no way to wait for the commit mutex. So `use` values are never an
//! exact count here. They still give [`NftSocket::builtin_chain_rules`]'s
//! lower bound: a value seen mid-transaction is at most the larger of the
//! states before and after it when the transaction prepares its deletions
//! before its additions, as iptables-nft's restores do (each table they load
//! is deleted first). The residual cases are a transaction that adds before
//! it deletes, or adds and is then aborted.
//!
//! Hence exact counts pay the kernel's GETRULE dump, which costs more than
//! linearly in one chain's rules: each batch (at most about 32 KiB, whatever
//! the reader's buffer) resumes by walking the chain from its start. Measured
//! (bench/run.sh, IPv4 tie, first call, wrapper / all four save-and-counts,
//! several runs): one long user chain 50k + 50k 0.50-0.70, 100k + 100k
//! 0.62-1.01 and 6.7-18x the 50k figure; `iptables-nft-save` alone, which
//! pays the same dump in smaller batches, took 1.07-1.14x the wrapper's
//! first call at 100k. Kube-proxy-like 50k + 50k 0.24-0.26, 100k + 100k
//! 0.32-0.45 (4-6x the 50k figure). Per-chain dumps (`NFTA_RULE_CHAIN`)
//! resume the same way and cannot help one long chain; for many short
//! chains they would scale better, but they filter by table name and so
//! miss a table being replaced (see [`NftSocket::count_rules`]). Repeated
//! calls on an unchanged ruleset take the count from [`super::count_cache`].
//!
//! What no check here sees: a transaction prepared and then aborted, or a
//! table with an owner removed when its process exits, takes entries out of
//! the kernel's lists without moving the generation; a dump that resumes
//! just then skips rules, unseen when the skip ends at the start of a chain
//! (see `DumpOrder`).
//!
//! Requests and replies are encoded by hand (`netlink`). This module holds
//! the socket, its round trips and dumps, the generation and the wait for
//! commits; the point lookups are in `lookups`, the counting dumps in
//! `count`, and what `iptables-wrapper stale` reads in `tables` and
//! `image` (`summary`: what an image says of its table as `tables` reads
//! it, so that a table's rules are dumped once for both).

mod count;
mod empty;
mod image;
mod lookups;
mod netlink;
mod summary;
mod tables;

use crate::privilege::noted;
use std::cell::Cell;
use std::io;
use std::ops::ControlFlow;
use std::os::fd::{AsRawFd, OwnedFd};

use libc::c_int;
use nix::errno::Errno;
use nix::sys::socket::{
    connect, recv, send, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol,
    SockType,
};
use nix::sys::time::{TimeVal, TimeValLike};

use crate::family::Family;
use netlink::{
    attributes, be_u32, invalid_data, messages, Request, NFTA_GEN_ID, NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP,
    NLM_F_DUMP_INTR,
};

pub use count::{RuleCount, RulesetKeptChanging};
pub use empty::Emptied;
pub use image::NftTableImage;
pub use lookups::NftObject;
pub use tables::{BaseChain, HookedChain, NftChain, NftTable, NF_ACCEPT};

/// `SO_NETNS_COOKIE` from `<asm-generic/socket.h>` (libc lacks it here).
const SO_NETNS_COOKIE: c_int = 71;

/// One `recv`: the kernel sends dump datagrams of at most about 32 KiB.
const RECV_BUFFER_LEN: usize = 64 * 1024;
/// `SO_RCVBUF` (capped by `net.core.rmem_max`): room for the replies to a
/// batch of lookups, which the kernel drops if they do not fit (ENOBUFS).
/// Dumps need less: the kernel fills one datagram ahead of the reader.
const SOCKET_RECEIVE_BUFFER: usize = 256 * 1024;

/// How long to wait for the kernel's next reply before giving up.
const RECEIVE_TIMEOUT_SECONDS: i64 = 2;

/// A NETLINK_NETFILTER socket connected to the kernel, in the network
/// namespace of the thread that opened it. Needs CAP_NET_ADMIN to query.
///
/// It serves the round trips (lookups, generation). Each dump attempt runs
/// on a socket of its own (opening one costs microseconds), opened in the
/// calling thread's namespace: a dump abandoned early, or interrupted, keeps
/// the kernel's dump state busy on its socket until that socket is closed.
pub struct NftSocket {
    fd: OwnedFd,
    /// Sequence number for the next request; replies with another number
    /// (left over from an abandoned request) are skipped.
    next_seq: Cell<u32>,
}

impl NftSocket {
    /// Opens the socket and connects it to the kernel. Sends nothing.
    pub fn open() -> io::Result<NftSocket> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkNetFilter,
        )
        .map_err(|errno| noted(errno.into()))?;
        setsockopt(&fd, sockopt::RcvBuf, &SOCKET_RECEIVE_BUFFER)?;
        // A reply that never comes is an error, not a hang.
        setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::seconds(RECEIVE_TIMEOUT_SECONDS))?;
        // connect binds the socket to a port of its own (netlink's
        // autobind): no `bind` call of its own is needed.
        connect(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
        Ok(NftSocket {
            fd,
            next_seq: Cell::new(1),
        })
    }

    /// Waits for any nf_tables transaction in progress in this namespace to
    /// end, and says whether the generation then was still `generation`.
    ///
    /// Sends an empty batch (BATCH_BEGIN with `NFNL_BATCH_GENID`, then
    /// BATCH_END): the kernel takes the commit mutex for it (waiting for a
    /// transaction being prepared or committed), compares the generation
    /// (`ERESTART` when it moved), finds nothing to commit and releases the
    /// mutex. An empty commit returns before anything else: no generation
    /// bump, no notification, no audit record, nothing changed. The kernel
    /// handles a batch within the `send`, so its only reply, the `ERESTART`,
    /// is queued before `send` returns; a successful batch sends nothing.
    /// Kernels that ignore the attribute (before 4.19) still wait for the
    /// mutex; the GETGEN after the dumps then does the comparison.
    pub fn wait_for_commits(&self, generation: u32) -> io::Result<bool> {
        let first_seq = self.take_seqs(2);
        let mut datagram = Vec::new();
        Request::batch(libc::NFNL_MSG_BATCH_BEGIN, Some(generation)).encode(
            &mut datagram,
            libc::NLM_F_REQUEST,
            first_seq,
        );
        Request::batch(libc::NFNL_MSG_BATCH_END, None).encode(
            &mut datagram,
            libc::NLM_F_REQUEST,
            first_seq.wrapping_add(1),
        );
        self.send(&datagram)?;

        let mut settled = true;
        let mut buffer = vec![0; RECV_BUFFER_LEN];
        loop {
            let datagram = match recv(self.fd.as_raw_fd(), &mut buffer, MsgFlags::MSG_DONTWAIT) {
                Err(Errno::EAGAIN) => return Ok(settled),
                Err(Errno::EINTR) => continue,
                Err(errno) => return Err(errno.into()),
                Ok(len) => &buffer[..len.min(RECV_BUFFER_LEN)],
            };
            for message in messages(datagram) {
                let message = message?;
                if message.seq.wrapping_sub(first_seq) > 1 || message.kind != NLMSG_ERROR {
                    continue; // left over from an abandoned request
                }
                match message.error_code()? {
                    Ok(()) => {}
                    Err(Errno::ERESTART) => settled = false,
                    Err(errno) => return Err(errno.into()),
                }
            }
        }
    }

    /// The cookie of this socket's network namespace (`SO_NETNS_COOKIE`,
    /// Linux 5.14+): unique for the whole boot, unlike the namespace's inode
    /// number, which is reused once the namespace is gone.
    pub fn netns_cookie(&self) -> io::Result<u64> {
        let mut cookie = 0u64;
        let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
        // SAFETY: `cookie` is valid for writes of `len` bytes during the
        // call; the fd stays open (borrowed from self).
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_NETNS_COOKIE,
                (&mut cookie as *mut u64).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        if len as usize != std::mem::size_of::<u64>() {
            return Err(invalid_data("SO_NETNS_COOKIE answer of the wrong size"));
        }
        Ok(cookie)
    }

    /// The nf_tables generation id of this network namespace (GETGEN).
    pub fn generation(&self) -> io::Result<u32> {
        // GETGEN ignores the family; any will do.
        let request = Request::new(libc::NFT_MSG_GETGEN, Family::Ipv4);
        let mut generation = None;
        let outcomes = self.round_trip(&[request], |_, payload| {
            generation = attributes(payload)
                .find(|&(kind, _)| kind == NFTA_GEN_ID)
                .and_then(|(_, value)| be_u32(value));
        })?;
        outcomes[0]?;
        generation.ok_or_else(|| invalid_data("GETGEN reply without NFTA_GEN_ID"))
    }

    /// Sends all `requests` in one datagram, each with NLM_F_ACK and its own
    /// sequence number, and reads until each has its ACK or error. Object
    /// messages are passed to `on_reply` with the index of their request.
    fn round_trip(
        &self,
        requests: &[Request],
        mut on_reply: impl FnMut(usize, &[u8]),
    ) -> io::Result<Vec<Result<(), Errno>>> {
        if requests.is_empty() {
            return Ok(Vec::new()); // the kernel refuses an empty datagram
        }
        let first_seq = self.take_seqs(requests.len());
        // Room for lookups of the longest names without growing.
        let mut datagram = Vec::with_capacity(requests.len() * 96);
        for (seq, request) in (first_seq..).zip(requests) {
            request.encode(&mut datagram, libc::NLM_F_REQUEST | libc::NLM_F_ACK, seq);
        }
        self.send(&datagram)?;

        let mut outcomes = vec![None; requests.len()];
        let mut buffer = vec![0; RECV_BUFFER_LEN];
        while outcomes.iter().any(Option::is_none) {
            for message in messages(self.recv(&mut buffer)?) {
                let message = message?;
                let index = message.seq.wrapping_sub(first_seq) as usize;
                if index >= requests.len() || outcomes[index].is_some() {
                    continue; // left over from an abandoned request
                }
                match message.kind {
                    // Without CAP_NET_ADMIN the kernel answers the first
                    // request with EPERM and drops the rest of the datagram:
                    // any error but "no such object" ends the round trip.
                    NLMSG_ERROR => match message.error_code()? {
                        Err(errno) if errno != Errno::ENOENT => return Err(errno.into()),
                        outcome => outcomes[index] = Some(outcome),
                    },
                    NLMSG_NOOP | NLMSG_DONE => {}
                    _ => on_reply(index, message.payload),
                }
            }
        }
        Ok(outcomes.into_iter().flatten().collect())
    }

    /// Runs one dump, passing the payload of each object message to
    /// `on_object`, which may break to abandon the rest of the dump.
    fn dump(&self, request: &Request, on_object: impl FnMut(&[u8]) -> ControlFlow<()>) -> io::Result<DumpOutcome> {
        self.dump_into(&mut receive_buffer(), request, on_object)
    }

    /// [`NftSocket::dump`] receiving into `buffer` (from [`receive_buffer`]):
    /// a reader that dumps once per chain reuses one, where a buffer of
    /// its own per dump costs the allocator a mapping each time.
    fn dump_into(
        &self,
        buffer: &mut [u8],
        request: &Request,
        mut on_object: impl FnMut(&[u8]) -> ControlFlow<()>,
    ) -> io::Result<DumpOutcome> {
        let seq = self.take_seqs(1);
        let mut datagram = Vec::new();
        request.encode(&mut datagram, libc::NLM_F_REQUEST | libc::NLM_F_DUMP, seq);
        self.send(&datagram)?;

        let mut interrupted = false;
        loop {
            for message in messages(self.recv(buffer)?) {
                let message = message?;
                if message.seq != seq {
                    continue; // left over from an abandoned request
                }
                interrupted |= message.flags & NLM_F_DUMP_INTR != 0;
                match message.kind {
                    NLMSG_NOOP => {}
                    NLMSG_ERROR | NLMSG_DONE => {
                        return match message.error_code()? {
                            Ok(()) => Ok(DumpOutcome {
                                end: DumpEnd::Done,
                                interrupted,
                            }),
                            Err(errno) => Err(errno.into()),
                        };
                    }
                    _ => {
                        if on_object(message.payload).is_break() {
                            return Ok(DumpOutcome {
                                end: DumpEnd::Stopped,
                                interrupted,
                            });
                        }
                    }
                }
            }
        }
    }

    /// Reserves `count` consecutive sequence numbers and returns the first.
    fn take_seqs(&self, count: usize) -> u32 {
        let first = self.next_seq.get();
        self.next_seq.set(first.wrapping_add(count as u32));
        first
    }

    fn send(&self, datagram: &[u8]) -> io::Result<()> {
        loop {
            match send(self.fd.as_raw_fd(), datagram, MsgFlags::empty()) {
                Err(Errno::EINTR) => continue,
                Err(errno) => return Err(errno.into()),
                Ok(_) => return Ok(()),
            }
        }
    }

    /// Receives one datagram (one or more netlink messages) into `buffer`.
    fn recv<'b>(&self, buffer: &'b mut [u8]) -> io::Result<&'b [u8]> {
        loop {
            // MSG_TRUNC: returns the real length, so truncation shows.
            match recv(self.fd.as_raw_fd(), buffer, MsgFlags::MSG_TRUNC) {
                Err(Errno::EINTR) => continue,
                Err(errno) => return Err(errno.into()),
                Ok(len) if len > buffer.len() => {
                    return Err(invalid_data("netlink datagram larger than the receive buffer"))
                }
                Ok(len) => return Ok(&buffer[..len]),
            }
        }
    }
}

/// A buffer for one `recv` of a dump.
fn receive_buffer() -> Vec<u8> {
    vec![0; RECV_BUFFER_LEN]
}

/// How a dump ended.
enum DumpEnd {
    /// NLMSG_DONE: every object was seen.
    Done,
    /// The caller stopped reading; the rest is still pending on the socket.
    Stopped,
}

/// A dump that stopped early or that the kernel flagged interrupted: the
/// ruleset changed while it was read, and reading again may succeed.
#[derive(Debug)]
pub struct DumpInterrupted;

impl std::fmt::Display for DumpInterrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the nf_tables ruleset changed during a dump; read again")
    }
}

impl std::error::Error for DumpInterrupted {}

impl DumpInterrupted {
    /// Whether `error` is this (rather than the kernel refusing the dump).
    pub fn is(error: &io::Error) -> bool {
        error.get_ref().is_some_and(|inner| inner.is::<DumpInterrupted>())
    }
}

impl DumpOutcome {
    /// Ok when the dump was read whole and not interrupted.
    fn complete(&self) -> io::Result<()> {
        match self {
            DumpOutcome {
                end: DumpEnd::Done,
                interrupted: false,
            } => Ok(()),
            _ => Err(io::Error::other(DumpInterrupted)),
        }
    }
}

struct DumpOutcome {
    end: DumpEnd,
    /// The kernel flagged NLM_F_DUMP_INTR on a message: the generation moved
    /// between two of the dump's datagrams.
    interrupted: bool,
}
