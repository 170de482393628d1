//! nf_tables state, read over NETLINK_NETFILTER with point lookups and
//! streamed dumps.
//!
//! Only read requests are ever sent (GETTABLE, GETCHAIN, GETRULE, GETGEN),
//! and one empty batch that waits for the commit mutex and commits nothing
//! ([`NftSocket::wait_for_commits`]), so nothing here changes the ruleset or
//! its generation id. The first
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
//! Requests and replies are encoded by hand: a `nlmsghdr`, a `nfgenmsg`
//! (family, version 0, res_id 0), then netlink attributes.

use std::cell::Cell;
use std::io;
use std::ops::ControlFlow;
use std::os::fd::{AsRawFd, OwnedFd};

use libc::c_int;
use nix::errno::Errno;
use nix::sys::socket::{
    bind, connect, recv, send, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr, SockFlag,
    SockProtocol, SockType,
};
use nix::sys::time::{TimeVal, TimeValLike};

use crate::family::Family;
use crate::kernel::{BUILTIN_CHAINS, IPTABLES_TABLES};

// Attribute numbers from <linux/netfilter/nf_tables.h> (libc lacks them).
const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_USE: u16 = 6;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_HANDLE: u16 = 3;
const NFTA_RULE_POSITION: u16 = 6;
const NFTA_GEN_ID: u16 = 1;
/// `NFNL_BATCH_GENID` from `<linux/netfilter/nfnetlink.h>`.
const NFNL_BATCH_GENID: u16 = 1;

const NLMSG_HEADER_LEN: usize = std::mem::size_of::<libc::nlmsghdr>();
/// `struct nfgenmsg`: family (u8), version (u8), res_id (u16, big endian).
const NFGENMSG_LEN: usize = 4;
const NLA_HEADER_LEN: usize = std::mem::size_of::<libc::nlattr>();
/// `SO_NETNS_COOKIE` from `<asm-generic/socket.h>` (libc lacks it here).
const SO_NETNS_COOKIE: c_int = 71;

/// One `recv`: the kernel sends dump datagrams of at most about 32 KiB.
const RECV_BUFFER_LEN: usize = 64 * 1024;
/// `SO_RCVBUF` (capped by `net.core.rmem_max`): room for the replies to a
/// batch of lookups, which the kernel drops if they do not fit (ENOBUFS).
/// Dumps need less: the kernel fills one datagram ahead of the reader.
const SOCKET_RECEIVE_BUFFER: usize = 256 * 1024;
/// Attempts at a count while the ruleset keeps changing under it.
const COUNT_TRIES: usize = 5;

/// How long to wait for the kernel's next reply before giving up.
const RECEIVE_TIMEOUT_SECONDS: i64 = 2;

/// A table, or a chain in a table, to look up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NftObject {
    pub family: Family,
    pub table: &'static str,
    /// None to look up the table itself.
    pub chain: Option<&'static str>,
}

/// A rule count that may have stopped early, read within one generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleCount {
    pub rules: u64,
    /// False when the dump stopped early because `rules` passed the limit.
    pub complete: bool,
    /// The nf_tables generation the count belongs to: GETGEN before the
    /// dumps, the commit mutex then taken with that same id, and GETGEN
    /// after them all agreed. None when the generation moved during each
    /// attempt and the count is two consecutive dumps that read the iptables
    /// tables' rules identically (see [`NftSocket::count_rules`]).
    pub generation: Option<u32>,
}

/// The ruleset changed during every attempt at a count: it is unknown.
#[derive(Debug)]
pub struct RulesetKeptChanging;

impl std::fmt::Display for RulesetKeptChanging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the nf_tables ruleset changed during each of {COUNT_TRIES} counts (generation moved): count unknown"
        )
    }
}

impl std::error::Error for RulesetKeptChanging {}

impl RulesetKeptChanging {
    /// Whether `error` says the count is unknown because of churn (rather
    /// than the kernel refusing the query).
    pub fn is(error: &io::Error) -> bool {
        error.get_ref().is_some_and(|inner| inner.is::<RulesetKeptChanging>())
    }
}

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
        )?;
        setsockopt(&fd, sockopt::RcvBuf, &SOCKET_RECEIVE_BUFFER)?;
        // A reply that never comes is an error, not a hang.
        setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::seconds(RECEIVE_TIMEOUT_SECONDS))?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
        connect(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
        Ok(NftSocket {
            fd,
            next_seq: Cell::new(1),
        })
    }

    /// Point lookups, all in one round trip: whether each object exists.
    pub fn exists(&self, objects: &[NftObject]) -> io::Result<Vec<bool>> {
        let requests: Vec<Request> = objects.iter().map(Request::lookup).collect();
        let outcomes = self.round_trip(&requests, |_, _| {})?;
        outcomes
            .into_iter()
            .map(|outcome| match outcome {
                Ok(()) => Ok(true),
                Err(Errno::ENOENT) => Ok(false),
                Err(errno) => Err(errno.into()),
            })
            .collect()
    }

    /// The rules in the built-in chains of the iptables tables of `families`:
    /// a lower bound on their rule count, whatever the number of user chains.
    ///
    /// Point lookups of each built-in chain, all in one round trip. A base
    /// chain cannot be jumped to, so its `NFTA_CHAIN_USE` is its rule count;
    /// a same-named chain that is not a base chain (no `NFTA_CHAIN_HOOK`) is
    /// left out, as its use also counts the jumps into it.
    pub fn builtin_chain_rules(&self, families: &[Family]) -> io::Result<u64> {
        let objects: Vec<NftObject> = families
            .iter()
            .flat_map(|&family| {
                BUILTIN_CHAINS.iter().flat_map(move |&(table, chains)| {
                    chains.iter().map(move |&chain| NftObject {
                        family,
                        table,
                        chain: Some(chain),
                    })
                })
            })
            .collect();
        let requests: Vec<Request> = objects.iter().map(Request::lookup).collect();
        let mut rules = 0;
        let outcomes = self.round_trip(&requests, |_, payload| {
            let mut is_base_chain = false;
            let mut chain_use = 0;
            for (kind, value) in attributes(payload) {
                match kind {
                    NFTA_CHAIN_HOOK => is_base_chain = true,
                    NFTA_CHAIN_USE => chain_use = be_u32(value).unwrap_or(0),
                    _ => {}
                }
            }
            if is_base_chain {
                rules += u64::from(chain_use);
            }
        })?;
        for outcome in outcomes {
            match outcome {
                Ok(()) | Err(Errno::ENOENT) => {}
                Err(errno) => return Err(errno.into()),
            }
        }
        Ok(rules)
    }

    /// Counts the rules of the iptables tables of `families` (GETRULE dumps),
    /// stopping as soon as the count exceeds `stop_above`.
    ///
    /// One dump per family, on one fresh socket per attempt, counting the
    /// rules of the iptables tables. An attempt is taken as the count of one
    /// generation when GETGEN before it, the commit mutex taken with that
    /// generation ([`NftSocket::wait_for_commits`]) and GETGEN after it agree,
    /// no dump was flagged interrupted, and every dump read as one state
    /// (`DumpOrder`). Why that is never a torn count:
    ///
    /// - The rules a dump shows are those active in the current generation
    ///   (`nft_is_active`: the rule's genmask against `gencursor`). Only a
    ///   commit changes that, by flipping `gencursor`, and it bumps the
    ///   generation (`base_seq`) just *before* the flip, both under the
    ///   commit mutex. A transaction being prepared marks its new rules
    ///   inactive and its deleted ones inactive only from the next
    ///   generation; an abort undoes that. None of it changes what a dump
    ///   shows.
    /// - GETGEN alone can read a bumped generation whose flip is still to
    ///   come (the committing thread between the two stores, or preempted
    ///   there): a dump then mixes both rulesets under one generation. Once
    ///   the commit mutex has been taken and released after that GETGEN,
    ///   the commit that made the generation has finished (flip included),
    ///   and any later commit bumps the generation before it flips. So if
    ///   GETGEN after the dumps still gives the same id, no flip happened
    ///   between the mutex and that GETGEN, and every dump saw one ruleset.
    /// - A dump spans many datagrams; each resumes by skipping as many list
    ///   entries as the previous ones walked, inactive entries included. A
    ///   transaction being prepared inserts inactive entries (and an abort
    ///   removes them) without moving the generation, so a later datagram
    ///   can start a few rules early (repeating rules) or late (skipping
    ///   them). `DumpOrder` catches every repeat and every skip that does
    ///   not end exactly at the start of a chain (each rule names its
    ///   chain, its handle and its predecessor's handle).
    ///
    /// When the generation moved during an attempt (any commit in the
    /// namespace moves it, also one in a table iptables-nft never touches),
    /// two consecutive attempts that each read as one state and read the
    /// same rules of the iptables tables (same tables, chains, rule handles
    /// and order) give the count, with no generation: a commit that changed
    /// those tables during the first would have given the second other
    /// rules (handles are never reused within a table), or a table or chain
    /// read twice. After `COUNT_TRIES` attempts without either, the count
    /// is [`RulesetKeptChanging`].
    ///
    /// Not one dump per table: the kernel's table filter (`NFTA_RULE_TABLE`)
    /// stops at the first table of that name in its list, active or not.
    /// While a transaction that replaces a table (as every
    /// `iptables-nft-restore` does) is being committed, the old table, its
    /// rules no longer active, still precedes the new one: a filtered dump
    /// then counts nothing in that table. A dump of the whole family walks
    /// both tables and counts the active rules only. It also serialises the
    /// rules of other nf_tables tables (kube-proxy's own, say), which are
    /// skipped after parsing their names.
    pub fn count_rules(&self, families: &[Family], stop_above: Option<u64>) -> io::Result<RuleCount> {
        let limit = stop_above.unwrap_or(u64::MAX);
        let mut previous: Option<DumpReading> = None;
        for attempt in 1..=COUNT_TRIES {
            let before = self.generation()?;
            let settled = self.wait_for_commits(before)?;
            let reading = self.read_rules(families, limit)?;
            let after = self.generation()?;
            if settled && before == after && reading.consistent && !reading.interrupted {
                return Ok(reading.count(Some(before)));
            }
            if reading.consistent && previous.as_ref().is_some_and(|p| p.same_rules(&reading)) {
                log::debug!("nf_tables count attempt {attempt}: generation moved, the same rules read twice");
                return Ok(reading.count(None));
            }
            log::debug!(
                "nf_tables count attempt {attempt}: generation {before} -> {after}{}{}{}, read again",
                if settled { "" } else { " (moved before the commit mutex)" },
                if reading.consistent { "" } else { ", dump not of one state" },
                if reading.interrupted { ", dump interrupted" } else { "" },
            );
            previous = reading.consistent.then_some(reading);
        }
        Err(io::Error::other(RulesetKeptChanging))
    }

    /// One attempt: the dumps of `families` on a fresh socket, counted and
    /// checked, stopping once the count passes `limit`.
    fn read_rules(&self, families: &[Family], limit: u64) -> io::Result<DumpReading> {
        let socket = NftSocket::open()?;
        let mut reading = DumpReading {
            rules: 0,
            complete: true,
            consistent: true,
            interrupted: false,
            fingerprint: Fingerprint::new(),
        };
        for &family in families {
            let request = Request::new(libc::NFT_MSG_GETRULE, family);
            let mut order = DumpOrder::default();
            let outcome = socket.dump(&request, |payload| {
                let rule = RuleMessage::parse(payload);
                order.see(&rule);
                if !rule.table.is_some_and(is_iptables_table) {
                    return ControlFlow::Continue(());
                }
                reading.fingerprint.add(family, &rule);
                reading.rules += 1;
                if reading.rules > limit {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })?;
            reading.consistent &= !order.broken;
            reading.interrupted |= outcome.interrupted;
            if matches!(outcome.end, DumpEnd::Stopped) {
                reading.complete = false;
                break;
            }
        }
        Ok(reading)
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
        let mut datagram = Vec::new();
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
    fn dump(&self, request: &Request, mut on_object: impl FnMut(&[u8]) -> ControlFlow<()>) -> io::Result<DumpOutcome> {
        let seq = self.take_seqs(1);
        let mut datagram = Vec::new();
        request.encode(&mut datagram, libc::NLM_F_REQUEST | libc::NLM_F_DUMP, seq);
        self.send(&datagram)?;

        let mut interrupted = false;
        let mut buffer = vec![0; RECV_BUFFER_LEN];
        loop {
            for message in messages(self.recv(&mut buffer)?) {
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

/// How a dump ended.
enum DumpEnd {
    /// NLMSG_DONE: every object was seen.
    Done,
    /// The caller stopped reading; the rest is still pending on the socket.
    Stopped,
}

struct DumpOutcome {
    end: DumpEnd,
    /// The kernel flagged NLM_F_DUMP_INTR on a message: the generation moved
    /// between two of the dump's datagrams.
    interrupted: bool,
}

/// One attempt at a count: what its dumps read.
struct DumpReading {
    rules: u64,
    complete: bool,
    /// Every dump read as one state ([`DumpOrder`]).
    consistent: bool,
    interrupted: bool,
    /// The iptables tables' rules read, in order.
    fingerprint: Fingerprint,
}

impl DumpReading {
    fn count(&self, generation: Option<u32>) -> RuleCount {
        RuleCount {
            rules: self.rules,
            complete: self.complete,
            generation,
        }
    }

    /// Whether both read the same rules of the iptables tables, in the same
    /// order, as far as they read.
    fn same_rules(&self, other: &DumpReading) -> bool {
        (self.rules, self.complete, self.fingerprint.0) == (other.rules, other.complete, other.fingerprint.0)
    }
}

/// A rule message's names and handles (`None` where absent).
struct RuleMessage<'a> {
    table: Option<&'a [u8]>,
    chain: Option<&'a [u8]>,
    handle: Option<u64>,
    /// The handle of the rule before it in its chain, as the kernel walked
    /// it; absent for the first rule of a chain.
    position: Option<u64>,
}

impl<'a> RuleMessage<'a> {
    fn parse(payload: &'a [u8]) -> RuleMessage<'a> {
        let mut rule = RuleMessage {
            table: None,
            chain: None,
            handle: None,
            position: None,
        };
        for (kind, value) in attributes(payload) {
            match kind {
                NFTA_RULE_TABLE => rule.table = Some(until_nul(value)),
                NFTA_RULE_CHAIN => rule.chain = Some(until_nul(value)),
                NFTA_RULE_HANDLE => rule.handle = be_u64(value),
                NFTA_RULE_POSITION => rule.position = be_u64(value),
                _ => {}
            }
        }
        rule
    }
}

/// Checks that one family's rule dump reads as one state of the kernel's
/// lists, whatever datagrams it came in.
///
/// The kernel walks tables, their chains, then each chain's rules in list
/// order, and gives each rule its table, chain, handle and (but for the
/// first of a chain) the handle of the active rule before it. Read in one
/// state, each table's rules come as one run, each chain's as one run
/// within it, the first without a predecessor and every other naming the
/// rule just read. A datagram that resumed early repeats a rule (its
/// predecessor is not the last one read, or its chain or table was already
/// left); one that resumed late skips one (its predecessor was never read).
/// A skip that ends exactly at the start of a chain not yet read cannot be
/// told from a chain that ended there.
#[derive(Default)]
struct DumpOrder {
    current: Option<(Vec<u8>, Vec<u8>, u64)>,
    tables_left: Vec<Vec<u8>>,
    chains_left: std::collections::HashSet<Vec<u8>>,
    broken: bool,
}

impl DumpOrder {
    fn see(&mut self, rule: &RuleMessage) {
        let (Some(table), Some(chain), Some(handle)) = (rule.table, rule.chain, rule.handle) else {
            self.broken = true;
            return;
        };
        match &mut self.current {
            Some((t, c, last)) if t.as_slice() == table && c.as_slice() == chain => {
                if rule.position != Some(*last) {
                    self.broken = true;
                }
                *last = handle;
                return;
            }
            Some((t, c, _)) if t.as_slice() == table => {
                let left = std::mem::take(c);
                self.chains_left.insert(left);
            }
            Some((t, _, _)) => {
                let left = std::mem::take(t);
                self.tables_left.push(left);
                self.chains_left.clear();
            }
            None => {}
        }
        if rule.position.is_some()
            || self.chains_left.contains(chain)
            || self.tables_left.iter().any(|t| t.as_slice() == table)
        {
            self.broken = true;
        }
        self.current = Some((table.to_vec(), chain.to_vec(), handle));
    }
}

/// FNV-1a (64 bits) over the family, table, chain, handle and predecessor
/// of each rule of the iptables tables read.
struct Fingerprint(u64);

impl Fingerprint {
    fn new() -> Fingerprint {
        Fingerprint(0xcbf2_9ce4_8422_2325)
    }

    fn add(&mut self, family: Family, rule: &RuleMessage) {
        let family = [matches!(family, Family::Ipv6) as u8];
        let handle = rule.handle.unwrap_or(0).to_be_bytes();
        let position = rule.position.map_or([0xff; 8], u64::to_be_bytes);
        for part in [
            &family[..],
            rule.table.unwrap_or_default(),
            &[0],
            rule.chain.unwrap_or_default(),
            &[0],
            &handle,
            &position,
        ] {
            for &byte in part {
                self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
    }
}

const NLMSG_NOOP: u16 = libc::NLMSG_NOOP as u16;
const NLMSG_ERROR: u16 = libc::NLMSG_ERROR as u16;
const NLMSG_DONE: u16 = libc::NLMSG_DONE as u16;
const NLM_F_DUMP_INTR: u16 = libc::NLM_F_DUMP_INTR as u16;

/// An nf_tables read request: message, family and string attributes.
struct Request {
    message_type: u16,
    family: Family,
    attributes: Vec<(u16, &'static str)>,
    /// A batch message: family AF_UNSPEC, res_id the nf_tables subsystem.
    batch: bool,
    /// `NFNL_BATCH_GENID` (a batch's BATCH_BEGIN).
    generation: Option<u32>,
}

impl Request {
    fn new(nft_msg: c_int, family: Family) -> Request {
        Request {
            message_type: ((libc::NFNL_SUBSYS_NFTABLES << 8) | nft_msg) as u16,
            family,
            attributes: Vec::new(),
            batch: false,
            generation: None,
        }
    }

    /// BATCH_BEGIN (with the generation it expects) or BATCH_END of an
    /// nf_tables batch.
    fn batch(kind: c_int, generation: Option<u32>) -> Request {
        Request {
            message_type: kind as u16,
            family: Family::Ipv4, // not sent: a batch message says AF_UNSPEC
            attributes: Vec::new(),
            batch: true,
            generation,
        }
    }

    fn attr(mut self, kind: u16, value: &'static str) -> Request {
        self.attributes.push((kind, value));
        self
    }

    /// GETTABLE for a table, GETCHAIN for a chain.
    fn lookup(object: &NftObject) -> Request {
        match object.chain {
            None => Request::new(libc::NFT_MSG_GETTABLE, object.family).attr(NFTA_TABLE_NAME, object.table),
            Some(chain) => Request::new(libc::NFT_MSG_GETCHAIN, object.family)
                .attr(NFTA_CHAIN_TABLE, object.table)
                .attr(NFTA_CHAIN_NAME, chain),
        }
    }

    /// Appends the request as one netlink message to `datagram`.
    fn encode(&self, datagram: &mut Vec<u8>, flags: c_int, seq: u32) {
        let start = datagram.len();
        datagram.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_len, set below
        datagram.extend_from_slice(&self.message_type.to_ne_bytes());
        datagram.extend_from_slice(&(flags as u16).to_ne_bytes());
        datagram.extend_from_slice(&seq.to_ne_bytes());
        datagram.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid: the kernel fills it in
        let family = match self.family {
            Family::Ipv4 => libc::NFPROTO_IPV4,
            Family::Ipv6 => libc::NFPROTO_IPV6,
        };
        if self.batch {
            let res_id = (libc::NFNL_SUBSYS_NFTABLES as u16).to_be_bytes();
            datagram.extend_from_slice(&[libc::AF_UNSPEC as u8, libc::NFNETLINK_V0 as u8, res_id[0], res_id[1]]);
        } else {
            datagram.extend_from_slice(&[family as u8, libc::NFNETLINK_V0 as u8, 0, 0]);
        }
        if let Some(generation) = self.generation {
            datagram.extend_from_slice(&((NLA_HEADER_LEN + 4) as u16).to_ne_bytes());
            datagram.extend_from_slice(&NFNL_BATCH_GENID.to_ne_bytes());
            datagram.extend_from_slice(&generation.to_be_bytes());
        }
        for &(kind, value) in &self.attributes {
            // NLA_STRING, NUL-terminated as the kernel's nla_strcmp expects.
            let len = NLA_HEADER_LEN + value.len() + 1;
            datagram.extend_from_slice(&(len as u16).to_ne_bytes());
            datagram.extend_from_slice(&kind.to_ne_bytes());
            datagram.extend_from_slice(value.as_bytes());
            datagram.push(0);
            datagram.resize(align4(datagram.len()), 0);
        }
        let len = (datagram.len() - start) as u32;
        datagram[start..start + 4].copy_from_slice(&len.to_ne_bytes());
    }
}

/// One netlink message of a received datagram.
struct Message<'a> {
    kind: u16,
    flags: u16,
    seq: u32,
    /// Everything after the `nlmsghdr`.
    payload: &'a [u8],
}

impl Message<'_> {
    /// The error code of an NLMSG_ERROR or NLMSG_DONE message: a negative
    /// errno, or 0 (an ACK, or a dump that completed).
    fn error_code(&self) -> io::Result<Result<(), Errno>> {
        let code = self
            .payload
            .get(..4)
            .map(|bytes| i32::from_ne_bytes(bytes.try_into().unwrap()))
            .ok_or_else(|| invalid_data("netlink error message too short"))?;
        Ok(match code {
            0 => Ok(()),
            code => Err(Errno::from_raw(-code)),
        })
    }
}

/// The netlink messages of a datagram; an error for a malformed one.
fn messages(datagram: &[u8]) -> impl Iterator<Item = io::Result<Message<'_>>> {
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
fn attributes(payload: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    nested(payload.get(NFGENMSG_LEN..).unwrap_or_default())
}

/// Whether `name` is one of the iptables tables.
fn is_iptables_table(name: &[u8]) -> bool {
    IPTABLES_TABLES.iter().any(|table| name == table.as_bytes())
}

/// A string attribute without its terminating NUL.
fn until_nul(value: &[u8]) -> &[u8] {
    value.split(|&b| b == 0).next().unwrap_or(value)
}

/// A u32 attribute in network byte order.
fn be_u32(value: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(value.try_into().ok()?))
}

/// A u64 attribute in network byte order.
fn be_u64(value: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(value.try_into().ok()?))
}

fn align4(len: usize) -> usize {
    (len + 3) & !3
}

fn invalid_data(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

// What `iptables-wrapper stale` reads of the iptables tables in nf_tables:
// enough to show their chains and to tell a table iptables-nft made from a
// native nftables table of the same name. Dumps, one table at a time; read
// requests only, like everything here.

const NFTA_TABLE_FLAGS: u16 = 2;
const NFTA_TABLE_USE: u16 = 3;
const NFTA_TABLE_USERDATA: u16 = 6;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;

/// An nf_tables table, as GETTABLE shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NftTable {
    pub family: Family,
    pub name: String,
    /// `NFTA_TABLE_FLAGS` (dormant, owner, ...).
    pub flags: u32,
    /// `NFTA_TABLE_USE`: its chains, sets, objects and flowtables.
    pub use_count: u32,
    /// Whether it carries `NFTA_TABLE_USERDATA` (`nft`'s table comments).
    pub has_userdata: bool,
}

/// A chain of an nf_tables table, with its rules counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NftChain {
    pub name: String,
    /// For a base chain: hook number, priority and type.
    pub base: Option<BaseChain>,
    pub rules: u64,
    /// Rules without a `counter` expression (iptables-nft gives every rule one).
    pub rules_without_counter: u64,
}

/// What makes a chain a base chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseChain {
    pub hook: u32,
    pub priority: i32,
    pub chain_type: String,
    /// `NF_ACCEPT` (1) or `NF_DROP` (0).
    pub policy: u32,
}

/// `NF_ACCEPT`, as a base chain's policy.
pub const NF_ACCEPT: u32 = 1;

impl NftSocket {
    /// Every table of `family` (a GETTABLE dump).
    pub fn tables(&self, family: Family) -> io::Result<Vec<NftTable>> {
        let mut tables = Vec::new();
        let request = Request::new(libc::NFT_MSG_GETTABLE, family);
        let end = self.dump(&request, |payload| {
            let mut table = NftTable {
                family,
                name: String::new(),
                flags: 0,
                use_count: 0,
                has_userdata: false,
            };
            for (kind, value) in attributes(payload) {
                match kind {
                    NFTA_TABLE_NAME => table.name = String::from_utf8_lossy(until_nul(value)).into_owned(),
                    NFTA_TABLE_FLAGS => table.flags = be_u32(value).unwrap_or(0),
                    NFTA_TABLE_USE => table.use_count = be_u32(value).unwrap_or(0),
                    NFTA_TABLE_USERDATA => table.has_userdata = true,
                    _ => {}
                }
            }
            tables.push(table);
            ControlFlow::Continue(())
        })?;
        dump_complete(end)?;
        Ok(tables)
    }

    /// The chains of table `table` of `family`, in the kernel's order, each
    /// with its rules counted: a GETCHAIN dump of the family (the kernel
    /// filters chain dumps by no table, so the replies are) and a GETRULE
    /// dump filtered to the table.
    pub fn chains(&self, family: Family, table: &'static str) -> io::Result<Vec<NftChain>> {
        let mut chains = Vec::new();
        let request = Request::new(libc::NFT_MSG_GETCHAIN, family);
        let end = self.dump(&request, |payload| {
            let mut chain = NftChain {
                name: String::new(),
                base: None,
                rules: 0,
                rules_without_counter: 0,
            };
            let (mut hook, mut priority, mut chain_type, mut policy) = (None, 0, String::new(), NF_ACCEPT);
            let mut in_table = false;
            for (kind, value) in attributes(payload) {
                match kind {
                    NFTA_CHAIN_TABLE => in_table = until_nul(value) == table.as_bytes(),
                    NFTA_CHAIN_NAME => chain.name = String::from_utf8_lossy(until_nul(value)).into_owned(),
                    NFTA_CHAIN_HOOK => {
                        for (kind, value) in nested(value) {
                            match kind {
                                NFTA_HOOK_HOOKNUM => hook = be_u32(value),
                                NFTA_HOOK_PRIORITY => priority = be_u32(value).unwrap_or(0) as i32,
                                _ => {}
                            }
                        }
                    }
                    NFTA_CHAIN_TYPE => chain_type = String::from_utf8_lossy(until_nul(value)).into_owned(),
                    NFTA_CHAIN_POLICY => policy = be_u32(value).unwrap_or(NF_ACCEPT),
                    _ => {}
                }
            }
            if !in_table {
                return ControlFlow::Continue(());
            }
            chain.base = hook.map(|hook| BaseChain {
                hook,
                priority,
                chain_type,
                policy,
            });
            chains.push(chain);
            ControlFlow::Continue(())
        })?;
        dump_complete(end)?;
        let request = Request::new(libc::NFT_MSG_GETRULE, family).attr(NFTA_RULE_TABLE, table);
        let end = self.dump(&request, |payload| {
            let mut chain_name: &[u8] = &[];
            let mut counted = false;
            for (kind, value) in attributes(payload) {
                match kind {
                    NFTA_RULE_CHAIN => chain_name = until_nul(value),
                    NFTA_RULE_EXPRESSIONS => {
                        counted = nested(value)
                            .filter(|&(kind, _)| kind == NFTA_LIST_ELEM)
                            .any(|(_, expr)| {
                                nested(expr).any(|(kind, name)| kind == NFTA_EXPR_NAME && until_nul(name) == b"counter")
                            })
                    }
                    _ => {}
                }
            }
            if let Some(chain) = chains.iter_mut().find(|c| c.name.as_bytes() == chain_name) {
                chain.rules += 1;
                if !counted {
                    chain.rules_without_counter += 1;
                }
            }
            ControlFlow::Continue(())
        })?;
        dump_complete(end)?;
        Ok(chains)
    }
}

/// A dump that stopped early, or that the kernel flagged interrupted, is no
/// reading.
fn dump_complete(outcome: DumpOutcome) -> io::Result<()> {
    match outcome {
        DumpOutcome {
            end: DumpEnd::Done,
            interrupted: false,
        } => Ok(()),
        _ => Err(io::Error::other(
            "the nf_tables ruleset changed during the dump; read again",
        )),
    }
}

/// The attributes nested in an attribute's value, as (type, value). Stops
/// at the first malformed attribute.
fn nested(value: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
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
