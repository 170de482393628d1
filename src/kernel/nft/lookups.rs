//! Point lookups of nf_tables objects: whether tables and chains exist, and
//! the rules the built-in chains of the iptables tables hold, each in one
//! round trip whatever the size of the ruleset.
//!
//! A lookup sees one object as it is at that instant, not a committed state:
//! a chain's `NFTA_CHAIN_USE` can show part of a transaction still being
//! prepared (see the notes of the `nft` module), so the built-in chains'
//! figure is a lower bound, never an exact count. Which user chains exist,
//! and the rules in them, no lookup shows.

use std::io;

use nix::errno::Errno;

use super::netlink::{
    attributes, be_u32, Request, NFTA_CHAIN_HOOK, NFTA_CHAIN_NAME, NFTA_CHAIN_TABLE, NFTA_CHAIN_USE, NFTA_TABLE_NAME,
};
use super::NftSocket;
use crate::family::Family;
use crate::kernel::BUILTIN_CHAINS;

/// A table, or a chain in a table, to look up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NftObject {
    pub family: Family,
    pub table: &'static str,
    /// None to look up the table itself.
    pub chain: Option<&'static str>,
}

impl NftSocket {
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
}

impl Request {
    /// GETTABLE for a table, GETCHAIN for a chain.
    fn lookup(object: &NftObject) -> Request {
        match object.chain {
            None => Request::new(libc::NFT_MSG_GETTABLE, object.family).attr(NFTA_TABLE_NAME, object.table),
            Some(chain) => Request::new(libc::NFT_MSG_GETCHAIN, object.family)
                .attr(NFTA_CHAIN_TABLE, object.table)
                .attr(NFTA_CHAIN_NAME, chain),
        }
    }
}
