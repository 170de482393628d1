//! What `iptables-wrapper stale` reads of the iptables tables in nf_tables:
//! enough to show their chains and to tell a table iptables-nft made from a
//! native nftables table of the same name. Dumps, one table at a time; read
//! requests only, like everything here.
//!
//! Each dump is taken as the kernel sends it, with no generation bracket
//! (unlike the counts of `count`): a ruleset committed between the chain
//! dump and the rule dump can mix two states in one reading. A dump the
//! kernel flags interrupted is refused ([`super::DumpInterrupted`]).

use std::io;
use std::ops::ControlFlow;

use super::netlink::{
    attributes, be_u32, family_nfproto, nested, Request, NFTA_CHAIN_HOOK, NFTA_CHAIN_NAME, NFTA_CHAIN_TABLE,
    NFTA_RULE_CHAIN, NFTA_RULE_TABLE, NFTA_TABLE_NAME,
};
use super::{receive_buffer, DumpInterrupted, NftSocket};
use crate::family::Family;
use crate::kernel::bytes::until_nul;

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
const NFTA_SET_TABLE: u16 = 1;

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
        read_again_while_interrupted(|| self.read_tables(family))
    }

    fn read_tables(&self, family: Family) -> io::Result<Vec<NftTable>> {
        let mut tables = Vec::new();
        let request = Request::new(libc::NFT_MSG_GETTABLE, family);
        let end = self.dump(&request, |payload| {
            tables.push(table_of(family, attributes(payload)));
            ControlFlow::Continue(())
        })?;
        end.complete()?;
        Ok(tables)
    }

    /// The chains of table `table` of `family`, in the kernel's order, each
    /// with its rules counted: a GETCHAIN dump of the family (the kernel
    /// filters chain dumps by no table, so the replies are) and a GETRULE
    /// dump per chain (one of the whole table would cost the square of its
    /// rules: the kernel resumes each batch from the start).
    pub fn chains(&self, family: Family, table: &'static str) -> io::Result<Vec<NftChain>> {
        read_again_while_interrupted(|| self.read_chains(family, table))
    }

    fn read_chains(&self, family: Family, table: &'static str) -> io::Result<Vec<NftChain>> {
        let mut chains = Vec::new();
        let request = Request::new(libc::NFT_MSG_GETCHAIN, family);
        let end = self.dump(&request, |payload| {
            let (in_table, chain) = chain_of(attributes(payload));
            if in_table == table.as_bytes() {
                chains.push(chain);
            }
            ControlFlow::Continue(())
        })?;
        end.complete()?;
        // One dump per chain: a dump of the whole table costs the square of
        // its rules (the kernel resumes each batch from the start).
        let buffer = &mut receive_buffer();
        for chain in &mut chains {
            let request = Request::new(libc::NFT_MSG_GETRULE, family)
                .attr(NFTA_RULE_TABLE, table)
                .attr(NFTA_RULE_CHAIN, &chain.name);
            let end = self.dump_into(buffer, &request, |payload| {
                chain.rules += 1;
                if !has_counter(attributes(payload)) {
                    chain.rules_without_counter += 1;
                }
                ControlFlow::Continue(())
            })?;
            end.complete()?;
        }
        Ok(chains)
    }
}

/// A table, from the attributes of one GETTABLE reply (or what an image
/// keeps of them).
pub(super) fn table_of<'a>(family: Family, attributes: impl Iterator<Item = (u16, &'a [u8])>) -> NftTable {
    let mut table = NftTable {
        family,
        name: String::new(),
        flags: 0,
        use_count: 0,
        has_userdata: false,
    };
    for (kind, value) in attributes {
        match kind {
            NFTA_TABLE_NAME => table.name = String::from_utf8_lossy(until_nul(value)).into_owned(),
            NFTA_TABLE_FLAGS => table.flags = be_u32(value).unwrap_or(0),
            NFTA_TABLE_USE => table.use_count = be_u32(value).unwrap_or(0),
            NFTA_TABLE_USERDATA => table.has_userdata = true,
            _ => {}
        }
    }
    table
}

/// Whether a rule (the attributes of a GETRULE reply, or what an image
/// keeps of them) holds a `counter` expression.
pub(super) fn has_counter<'a>(attributes: impl Iterator<Item = (u16, &'a [u8])>) -> bool {
    attributes
        .filter(|&(kind, _)| kind == NFTA_RULE_EXPRESSIONS)
        .any(|(_, value)| {
            nested(value)
                .filter(|&(kind, _)| kind == NFTA_LIST_ELEM)
                .any(|(_, expr)| {
                    nested(expr).any(|(kind, name)| kind == NFTA_EXPR_NAME && until_nul(name) == b"counter")
                })
        })
}

/// A chain's table and the chain (its rules not counted), from the
/// attributes of one GETCHAIN reply (or what an image keeps of them: no
/// table).
pub(super) fn chain_of<'a>(attributes: impl Iterator<Item = (u16, &'a [u8])>) -> (&'a [u8], NftChain) {
    let mut chain = NftChain {
        name: String::new(),
        base: None,
        rules: 0,
        rules_without_counter: 0,
    };
    let (mut hook, mut priority, mut chain_type, mut policy) = (None, 0, String::new(), NF_ACCEPT);
    let mut table: &[u8] = b"";
    for (kind, value) in attributes {
        match kind {
            NFTA_CHAIN_TABLE => table = until_nul(value),
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
    chain.base = hook.map(|hook| BaseChain {
        hook,
        priority,
        chain_type,
        policy,
    });
    (table, chain)
}

/// A base chain of any table that meets `family`'s packets: one of the
/// family's own tables or of an `inet` one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookedChain {
    /// As `nft` names it: `inet site pre`.
    pub shown: String,
    /// Its table's family is the family itself (not `inet`).
    pub in_family: bool,
    pub table: String,
    pub chain: String,
    pub hook: u32,
    pub priority: i32,
}

impl NftSocket {
    /// Every base chain `family`'s packets meet: GETCHAIN dumps of the
    /// family and of `inet`.
    pub fn hooked_chains(&self, family: Family) -> io::Result<Vec<HookedChain>> {
        read_again_while_interrupted(|| {
            let mut hooked = Vec::new();
            for (nfproto, in_family) in [(family_nfproto(family), true), (libc::NFPROTO_INET as u8, false)] {
                let request = Request::for_nfproto(libc::NFT_MSG_GETCHAIN, nfproto);
                let end = self.dump(&request, |payload| {
                    let (table, chain) = chain_of(attributes(payload));
                    if let Some(base) = chain.base {
                        let table = String::from_utf8_lossy(table).into_owned();
                        let family_name = if in_family { family.nft_name() } else { "inet" };
                        hooked.push(HookedChain {
                            shown: format!("{family_name} {table} {}", chain.name),
                            in_family,
                            table,
                            chain: chain.name,
                            hook: base.hook,
                            priority: base.priority,
                        });
                    }
                    ControlFlow::Continue(())
                })?;
                end.complete()?;
            }
            Ok(hooked)
        })
    }
}

impl NftSocket {
    /// The table of each set of `family`, named and anonymous, one entry a
    /// set (a GETSET dump: the table's `use` count leaves anonymous sets
    /// out).
    pub fn set_tables(&self, family: Family) -> io::Result<Vec<String>> {
        read_again_while_interrupted(|| self.read_set_tables(family))
    }

    fn read_set_tables(&self, family: Family) -> io::Result<Vec<String>> {
        let mut tables = Vec::new();
        let end = self.dump(&Request::new(libc::NFT_MSG_GETSET, family), |payload| {
            if let Some((_, table)) = attributes(payload).find(|&(kind, _)| kind == NFTA_SET_TABLE) {
                tables.push(String::from_utf8_lossy(until_nul(table)).into_owned());
            }
            ControlFlow::Continue(())
        })?;
        end.complete()?;
        Ok(tables)
    }
}

/// Readings of one dump before an interrupted one is given up.
const DUMP_TRIES: usize = 5;

/// `read`, again while the kernel says the ruleset changed during its
/// dumps ([`DumpInterrupted`], after the last try too).
fn read_again_while_interrupted<T>(mut read: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let mut tries = 1;
    loop {
        match read() {
            Err(e) if DumpInterrupted::is(&e) && tries < DUMP_TRIES => tries += 1,
            result => return result,
        }
    }
}
