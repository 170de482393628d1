//! The exact rule count of the iptables tables in nf_tables: GETRULE dumps
//! bracketed by the generation and the commit wait, checked for datagrams
//! that resumed in the wrong place (`DumpOrder`), and read again while the
//! ruleset keeps changing ([`RulesetKeptChanging`]); why that is never a
//! torn count is argued at [`NftSocket::count_rules`].
//!
//! Of each rule it reads only its table, chain, handle and predecessor, not
//! what the rule does. What no check sees is in the notes of the `nft`
//! module (a transaction prepared and then aborted while a dump resumes).

use std::io;
use std::ops::ControlFlow;

use super::netlink::{
    attributes, be_u64, Request, NFTA_RULE_CHAIN, NFTA_RULE_HANDLE, NFTA_RULE_POSITION, NFTA_RULE_TABLE,
};
use super::{DumpEnd, NftSocket};
use crate::family::Family;
use crate::kernel::bytes::until_nul;
use crate::kernel::IPTABLES_TABLES;

/// Attempts at a count while the ruleset keeps changing under it.
const COUNT_TRIES: usize = 5;

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

impl NftSocket {
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
                if settled {
                    ""
                } else {
                    " (moved before the commit mutex)"
                },
                if reading.consistent {
                    ""
                } else {
                    ", dump not of one state"
                },
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

/// Whether `name` is one of the iptables tables.
fn is_iptables_table(name: &[u8]) -> bool {
    IPTABLES_TABLES.iter().any(|table| name == table.as_bytes())
}

#[cfg(test)]
mod tests {
    //! A NEWRULE payload written out: nfgenmsg, then the attributes, whose
    //! headers are in the machine's order and whose handles are big-endian
    //! u64 on every machine.
    use super::*;

    /// An attribute: header in the machine's order, value as given, padded.
    fn attribute(kind: u16, value: &[u8]) -> Vec<u8> {
        let len = (4 + value.len()) as u16;
        let mut out = if cfg!(target_endian = "big") {
            [len.to_be_bytes(), kind.to_be_bytes()].concat()
        } else {
            [len.to_le_bytes(), kind.to_le_bytes()].concat()
        };
        out.extend_from_slice(value);
        out.resize(out.len().next_multiple_of(4), 0);
        out
    }

    #[test]
    fn a_rule_message_gives_its_handle_and_position() {
        let payload = [
            vec![2, 0, 0, 0], // nfgenmsg: NFPROTO_IPV4
            attribute(NFTA_RULE_TABLE, b"filter\0"),
            attribute(NFTA_RULE_CHAIN, b"INPUT\0"),
            attribute(NFTA_RULE_HANDLE, &[0, 0, 0, 0, 0, 0, 0x01, 0x02]),
            attribute(NFTA_RULE_POSITION, &[0, 0, 0, 1, 0, 0, 0, 5]),
        ]
        .concat();
        let rule = RuleMessage::parse(&payload);
        assert_eq!(rule.table, Some(&b"filter"[..]));
        assert_eq!(rule.chain, Some(&b"INPUT"[..]));
        assert_eq!(rule.handle, Some(0x0102));
        assert_eq!(rule.position, Some(0x0000_0001_0000_0005));
        // The fingerprint hashes the handles in network order: one value on
        // every machine (FNV-1a of those bytes, computed apart in Python).
        let mut fingerprint = Fingerprint::new();
        fingerprint.add(Family::Ipv4, &rule);
        assert_eq!(fingerprint.0, 0x433e_53ae_ee2a_c060);
    }
}
