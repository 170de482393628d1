//! The one write the wrapper ever sends to nf_tables: emptying tables that
//! `stale --remove` proved its backup of, in one transaction that the
//! kernel commits only if the ruleset is still at the generation the backup
//! was read at.
//!
//! Emptying a table flushes each of its chains, deletes its user chains and
//! sets its base chains' policies to `accept`, as the image read at that
//! generation lists them: base chains that exist stay (no hook is added),
//! the table itself stays. The batch carries `NFNL_BATCH_GENID`, so a
//! commit by anyone else since the backup (a rule added by a component
//! still writing to this backend) makes the kernel refuse the whole batch
//! with `ERESTART` and change nothing; the caller then backs up, proves and
//! tries again. Kernels before 4.19 ignore the attribute: there the batch
//! is not tied to the generation (the caller's re-read afterwards still
//! shows what a writer added).

use std::io;

use nix::errno::Errno;
use nix::sys::socket::{recv, setsockopt, sockopt, MsgFlags};
use std::os::fd::AsRawFd;

use super::image::NftTableImage;
use super::netlink::{
    messages, Request, NFTA_CHAIN_NAME, NFTA_CHAIN_TABLE, NFTA_RULE_CHAIN, NFTA_RULE_TABLE, NLMSG_ERROR,
};
use super::{NftSocket, NF_ACCEPT, RECV_BUFFER_LEN};
use crate::family::Family;

const NFTA_CHAIN_POLICY: u16 = 5;

/// How a batch ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Emptied {
    /// Committed: every table is empty.
    Done,
    /// The generation moved since the images were read: nothing changed.
    GenerationMoved,
}

impl NftSocket {
    /// Empties each `(family, table, image)` in one transaction, committed
    /// only at `generation`. An error (the kernel refused a message or the
    /// commit) also means nothing changed: a transaction is all or nothing.
    pub fn empty_tables(&self, generation: u32, tables: &[(Family, &str, &NftTableImage)]) -> io::Result<Emptied> {
        let mut changes = Vec::new();
        for &(family, table, image) in tables {
            for chain in image.chains() {
                if chain.rules > 0 {
                    // DELRULE without a handle flushes the chain.
                    changes.push(
                        Request::new(libc::NFT_MSG_DELRULE, family)
                            .attr(NFTA_RULE_TABLE, table)
                            .attr(NFTA_RULE_CHAIN, &chain.name),
                    );
                }
            }
            for chain in image.chains() {
                match chain.policy {
                    None => changes.push(
                        Request::new(libc::NFT_MSG_DELCHAIN, family)
                            .attr(NFTA_CHAIN_TABLE, table)
                            .attr(NFTA_CHAIN_NAME, &chain.name),
                    ),
                    Some(policy) if policy != NF_ACCEPT => changes.push(
                        Request::new(libc::NFT_MSG_NEWCHAIN, family)
                            .attr(NFTA_CHAIN_TABLE, table)
                            .attr(NFTA_CHAIN_NAME, &chain.name)
                            .attr_u32(NFTA_CHAIN_POLICY, NF_ACCEPT),
                    ),
                    Some(_) => {}
                }
            }
        }
        if changes.is_empty() {
            return Ok(Emptied::Done);
        }
        let first_seq = self.take_seqs(changes.len() + 2);
        let mut datagram = Vec::new();
        Request::batch(libc::NFNL_MSG_BATCH_BEGIN, Some(generation)).encode(
            &mut datagram,
            libc::NLM_F_REQUEST,
            first_seq,
        );
        for (seq, change) in (first_seq.wrapping_add(1)..).zip(&changes) {
            change.encode(&mut datagram, libc::NLM_F_REQUEST | libc::NLM_F_ACK, seq);
        }
        let end_seq = first_seq.wrapping_add(changes.len() as u32 + 1);
        Request::batch(libc::NFNL_MSG_BATCH_END, None).encode(&mut datagram, libc::NLM_F_REQUEST, end_seq);
        self.make_room(datagram.len(), changes.len());
        self.send(&datagram)?;

        // The kernel handles a batch within the send: every reply is queued.
        let mut acknowledged = 0;
        let mut moved = false;
        let mut refused = None;
        let mut buffer = vec![0; RECV_BUFFER_LEN];
        loop {
            let datagram = match recv(self.fd.as_raw_fd(), &mut buffer, MsgFlags::MSG_DONTWAIT) {
                Err(Errno::EAGAIN) => break,
                Err(Errno::EINTR) => continue,
                // Sent: the kernel has committed or refused it already.
                Err(errno) => {
                    return Err(io::Error::other(format!(
                        "reading the kernel's replies to the batch: {errno}: whether it was committed is unknown (see the state read after the removal)"
                    )))
                }
                Ok(len) => &buffer[..len.min(RECV_BUFFER_LEN)],
            };
            for message in messages(datagram) {
                let message = message?;
                if message.seq.wrapping_sub(first_seq) > changes.len() as u32 + 1 || message.kind != NLMSG_ERROR {
                    continue; // left over from an abandoned request
                }
                match message.error_code()? {
                    Ok(()) => acknowledged += 1,
                    Err(Errno::ERESTART) => moved = true,
                    Err(errno) => refused = refused.or(Some(errno)),
                }
            }
        }
        if moved {
            return Ok(Emptied::GenerationMoved);
        }
        if let Some(errno) = refused {
            return Err(io::Error::other(format!(
                "the kernel refused the batch ({errno}): nothing changed"
            )));
        }
        if acknowledged != changes.len() {
            return Err(io::Error::other(format!(
                "{acknowledged} of {} changes acknowledged: whether the batch was committed is unknown",
                changes.len()
            )));
        }
        Ok(Emptied::Done)
    }

    /// Room in the socket's buffers for a batch of `len` bytes and the
    /// kernel's acknowledgement of each of its `changes` (each one a
    /// datagram of its own, about 1 KiB of buffer): otherwise a large
    /// table's batch is refused as too long (EMSGSIZE), or its
    /// acknowledgements overflow (ENOBUFS) after it was committed. The
    /// `FORCE` options pass `net.core.{w,r}mem_max` with `CAP_NET_ADMIN`,
    /// which the batch needs anyway; without it the defaults stay.
    fn make_room(&self, len: usize, changes: usize) {
        const PER_ACK: usize = 2048;
        const MARGIN: usize = 256 * 1024;
        if let Err(e) = setsockopt(&self.fd, sockopt::SndBufForce, &(len + MARGIN)) {
            log::debug!("SO_SNDBUFFORCE {}: {e}", len + MARGIN);
        }
        if let Err(e) = setsockopt(&self.fd, sockopt::RcvBufForce, &(changes * PER_ACK + MARGIN)) {
            log::debug!("SO_RCVBUFFORCE {}: {e}", changes * PER_ACK + MARGIN);
        }
    }
}
