//! One nf_tables table's whole state, read so that two tables can be
//! compared: what `stale --remove` proves its backup against.
//!
//! An image holds everything the kernel says of the table, as the kernel
//! encodes it: the table's own attributes, each chain, each rule with its
//! expressions, each set with its elements, each stateful object and each
//! flowtable. Only what differs between two identical tables in two
//! namespaces is left out: handles and ids (the kernel numbers objects as
//! they are made), counters (a base chain's, a `counter` expression's), a
//! set element's time left, and in an IPv4 rule the IPv6 part of a compat
//! `recent` or `connlimit` match's mask, which the kernel never reads
//! there. Chains, sets, elements, objects and
//! flowtables are kept sorted (their order means nothing); rules keep their
//! order within their chain (it is what they mean). Anything a tool cannot
//! express or bytes it would change therefore show as a difference.
//!
//! Read with read requests only (GETTABLE, GETCHAIN, GETRULE, GETSET,
//! GETSETELEM, GETOBJ, GETFLOWTABLE dumps), bracketed by the generation:
//! an image belongs to the generation it was read at, or it is read again.

use std::collections::BTreeMap;
use std::io;
use std::ops::ControlFlow;

use super::netlink::{
    attributes, be_u32, nested, Request, NFTA_CHAIN_HOOK, NFTA_CHAIN_NAME, NFTA_CHAIN_TABLE, NFTA_RULE_CHAIN,
    NFTA_RULE_HANDLE, NFTA_RULE_POSITION, NFTA_RULE_TABLE, NFTA_TABLE_NAME,
};
use super::{receive_buffer, DumpInterrupted, NftSocket, NF_ACCEPT};
use crate::family::Family;
use crate::kernel::bytes::until_nul;

/// `NFT_MSG_GETFLOWTABLE` (libc lacks it).
const NFT_MSG_GETFLOWTABLE: libc::c_int = 23;

/// Attempts at reading an image while the generation keeps moving.
const IMAGE_TRIES: usize = 5;

// Attribute numbers from <linux/netfilter/nf_tables.h>.
const NFTA_TABLE_USE: u16 = 3;
const NFTA_TABLE_HANDLE: u16 = 4;
const NFTA_TABLE_PAD: u16 = 5;
const NFTA_TABLE_OWNER: u16 = 7;
const NFTA_CHAIN_HANDLE: u16 = 2;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_COUNTERS: u16 = 8;
const NFTA_CHAIN_PAD: u16 = 9;
const NFTA_CHAIN_ID: u16 = 11;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_RULE_PAD: u16 = 8;
const NFTA_RULE_ID: u16 = 9;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_SET_TABLE: u16 = 1;
const NFTA_SET_NAME: u16 = 2;
const NFTA_SET_ID: u16 = 10;
const NFTA_SET_PAD: u16 = 14;
const NFTA_SET_HANDLE: u16 = 16;
const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
const NFTA_SET_ELEM_LIST_SET: u16 = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
const NFTA_SET_ELEM_EXPIRATION: u16 = 5;
const NFTA_SET_ELEM_PAD: u16 = 8;
const NFTA_OBJ_TABLE: u16 = 1;
const NFTA_OBJ_HANDLE: u16 = 6;
const NFTA_OBJ_PAD: u16 = 7;
const NFTA_FLOWTABLE_TABLE: u16 = 1;
const NFTA_FLOWTABLE_HANDLE: u16 = 5;
const NFTA_FLOWTABLE_PAD: u16 = 6;

/// Everything one table holds, without what two identical tables differ in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NftTableImage {
    /// False when the table does not exist.
    pub exists: bool,
    /// The table's attributes but its name, handle, owner and use.
    pub(super) table: Vec<u8>,
    /// Its use count (`NFTA_TABLE_USE`): its chains, sets, objects and
    /// flowtables. Not compared ([`NftTableImage::difference`]): a restore
    /// makes every built-in chain, where the table may have had fewer.
    pub(super) use_count: u32,
    /// By chain name: the chain's attributes.
    pub(super) chains: BTreeMap<Vec<u8>, Vec<u8>>,
    /// By chain name: a base chain's policy (None for a user chain).
    pub(super) policies: BTreeMap<Vec<u8>, Option<u32>>,
    /// By chain name: its rules, in order.
    pub(super) rules: BTreeMap<Vec<u8>, Vec<Vec<u8>>>,
    /// By set name: the set's attributes and its elements.
    sets: BTreeMap<Vec<u8>, SetImage>,
    objects: Vec<Vec<u8>>,
    flowtables: Vec<Vec<u8>>,
}

/// A set's attributes and its elements, sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct SetImage {
    attributes: Vec<u8>,
    elements: Vec<Vec<u8>>,
}

/// What emptying needs to know of one chain of an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainSummary {
    pub name: String,
    /// A base chain's policy; None for a user chain.
    pub policy: Option<u32>,
    pub rules: usize,
}

impl NftTableImage {
    /// How many sets it holds, named and anonymous.
    pub fn set_count(&self) -> usize {
        self.sets.len()
    }

    /// Its chains: name, policy and rules.
    pub fn chains(&self) -> Vec<ChainSummary> {
        self.policies
            .iter()
            .map(|(name, policy)| ChainSummary {
                name: String::from_utf8_lossy(name).into_owned(),
                policy: *policy,
                rules: self.rules.get(name).map_or(0, Vec::len),
            })
            .collect()
    }

    /// The first difference between this image and `other`, in words (this
    /// one is "the table", the other "the restored one"); None when equal.
    pub fn difference(&self, other: &NftTableImage) -> Option<String> {
        if self == other {
            return None;
        }
        if self.exists != other.exists {
            return Some(if other.exists {
                "the table does not exist, the restored one does".into()
            } else {
                "the restore does not make the table at all".into()
            });
        }
        if self.table != other.table {
            return Some("the table's own attributes (flags, user data) differ".into());
        }
        // iptables-nft's save declares every built-in chain of a table and
        // its restore makes them all, where the table had only those used:
        // an extra base chain, empty, policy accept, changes no packet's
        // fate (and one with a hook iptables-nft would not give it differs
        // in its attributes from any chain of the table, so it is not extra).
        let extra_empty_base = |name: &Vec<u8>| {
            !self.chains.contains_key(name)
                && other.policies.get(name) == Some(&Some(NF_ACCEPT))
                && !other.rules.contains_key(name)
        };
        let restored_chains: BTreeMap<Vec<u8>, Vec<u8>> = other
            .chains
            .iter()
            .filter(|(name, _)| !extra_empty_base(name))
            .map(|(name, chain)| (name.clone(), chain.clone()))
            .collect();
        if let Some(why) = first_difference("chain", &self.chains, &restored_chains) {
            return Some(why);
        }
        for (chain, rules) in &self.rules {
            let restored = other.rules.get(chain).map(Vec::as_slice).unwrap_or_default();
            if rules.as_slice() != restored {
                let at = rules.iter().zip(restored).position(|(a, b)| a != b);
                let at = at.unwrap_or(rules.len().min(restored.len()));
                return Some(format!(
                    "chain {:?}: rule {} of {} differs (the restored chain has {} rules)",
                    String::from_utf8_lossy(chain),
                    at + 1,
                    rules.len(),
                    restored.len()
                ));
            }
        }
        if let Some(chain) = other.rules.keys().find(|chain| !self.rules.contains_key(*chain)) {
            return Some(format!(
                "chain {:?}: the restored one has rules the table does not",
                String::from_utf8_lossy(chain)
            ));
        }
        if let Some(why) = first_difference("set", &self.sets, &other.sets) {
            return Some(why);
        }
        if self.objects != other.objects {
            return Some(format!(
                "stateful objects differ ({} in the table, {} restored)",
                self.objects.len(),
                other.objects.len()
            ));
        }
        (self.flowtables != other.flowtables).then(|| {
            format!(
                "flowtables differ ({} in the table, {} restored)",
                self.flowtables.len(),
                other.flowtables.len()
            )
        })
    }
}

/// The first name under which `mine` and `restored` differ, in words.
fn first_difference<V: PartialEq>(
    what: &str,
    mine: &BTreeMap<Vec<u8>, V>,
    restored: &BTreeMap<Vec<u8>, V>,
) -> Option<String> {
    let name = |key: &Vec<u8>| String::from_utf8_lossy(key).into_owned();
    for (key, value) in mine {
        match restored.get(key) {
            None => return Some(format!("{what} {:?} is not in what the backup restores", name(key))),
            Some(other) if other != value => return Some(format!("{what} {:?} differs", name(key))),
            Some(_) => {}
        }
    }
    restored.keys().find(|key| !mine.contains_key(*key)).map(|key| {
        format!(
            "the backup restores {what} {:?}, which the table does not hold",
            name(key)
        )
    })
}

impl NftSocket {
    /// The image of table `table` of `family` and the generation it belongs
    /// to (GETGEN before and after all its dumps agreed); read again while
    /// the generation moves, [`DumpInterrupted`] after a few tries.
    pub fn table_image(&self, family: Family, table: &str) -> io::Result<(NftTableImage, u32)> {
        for _ in 0..IMAGE_TRIES {
            let before = self.generation()?;
            let image = match self.read_image(family, table) {
                Err(e) if DumpInterrupted::is(&e) => continue,
                image => image?,
            };
            if self.generation()? == before {
                return Ok((image, before));
            }
        }
        Err(io::Error::other(DumpInterrupted))
    }

    fn read_image(&self, family: Family, table: &str) -> io::Result<NftTableImage> {
        let mut image = NftTableImage::default();
        let name = table.as_bytes();
        let buffer = &mut receive_buffer();
        self.dump_all(buffer, &Request::new(libc::NFT_MSG_GETTABLE, family), |payload| {
            if attribute(payload, NFTA_TABLE_NAME).map(until_nul) == Some(name) {
                image.exists = true;
                image.use_count = attribute(payload, NFTA_TABLE_USE).and_then(be_u32).unwrap_or(0);
                image.table = without(
                    payload,
                    &[
                        NFTA_TABLE_NAME,
                        NFTA_TABLE_HANDLE,
                        NFTA_TABLE_USE,
                        NFTA_TABLE_PAD,
                        NFTA_TABLE_OWNER,
                    ],
                );
            }
        })?;
        if !image.exists {
            return Ok(image);
        }
        self.dump_all(buffer, &Request::new(libc::NFT_MSG_GETCHAIN, family), |payload| {
            if attribute(payload, NFTA_CHAIN_TABLE).map(until_nul) == Some(name) {
                let chain = attribute(payload, NFTA_CHAIN_NAME).map(until_nul).unwrap_or_default();
                let kept = without(
                    payload,
                    &[
                        NFTA_CHAIN_TABLE,
                        NFTA_CHAIN_HANDLE,
                        NFTA_CHAIN_COUNTERS,
                        NFTA_CHAIN_PAD,
                        NFTA_CHAIN_ID,
                    ],
                );
                let policy = attribute(payload, NFTA_CHAIN_HOOK).map(|_| {
                    attribute(payload, NFTA_CHAIN_POLICY)
                        .and_then(be_u32)
                        .unwrap_or(NF_ACCEPT)
                });
                image.policies.insert(chain.to_vec(), policy);
                image.chains.insert(chain.to_vec(), kept);
            }
        })?;
        // One dump per chain: the kernel resumes a dump's every batch by
        // walking from the start of what it dumps, so one dump of the whole
        // table costs the square of its rules (55,000 rules: seconds), one
        // per chain only the square of each chain's.
        let chains: Vec<Vec<u8>> = image.chains.keys().cloned().collect();
        for chain in chains {
            let rules = Request::new(libc::NFT_MSG_GETRULE, family)
                .attr(NFTA_RULE_TABLE, table)
                .attr_bytes(NFTA_RULE_CHAIN, &chain);
            self.dump_all(buffer, &rules, |payload| {
                let chain = attribute(payload, NFTA_RULE_CHAIN).map(until_nul).unwrap_or_default();
                image
                    .rules
                    .entry(chain.to_vec())
                    .or_default()
                    .push(rule_without_state(payload, family));
            })?;
        }
        let mut sets = Vec::new();
        self.dump_all(buffer, &Request::new(libc::NFT_MSG_GETSET, family), |payload| {
            if attribute(payload, NFTA_SET_TABLE).map(until_nul) == Some(name) {
                let set = attribute(payload, NFTA_SET_NAME).map(until_nul).unwrap_or_default();
                let kept = without(payload, &[NFTA_SET_TABLE, NFTA_SET_ID, NFTA_SET_PAD, NFTA_SET_HANDLE]);
                sets.push((String::from_utf8_lossy(set).into_owned(), kept));
            }
        })?;
        for (set, attributes_kept) in sets {
            let mut elements = Vec::new();
            let request = Request::new(libc::NFT_MSG_GETSETELEM, family)
                .attr(NFTA_SET_ELEM_LIST_TABLE, table)
                .attr(NFTA_SET_ELEM_LIST_SET, &set);
            self.dump_all(buffer, &request, |payload| {
                for (kind, list) in attributes(payload) {
                    if kind != NFTA_SET_ELEM_LIST_ELEMENTS {
                        continue;
                    }
                    for (_, element) in nested(list).filter(|&(kind, _)| kind == NFTA_LIST_ELEM) {
                        elements.push(encode(nested(element).filter(|&(kind, _)| {
                            kind != NFTA_SET_ELEM_EXPIRATION && kind != NFTA_SET_ELEM_PAD
                        })));
                    }
                }
            })?;
            elements.sort();
            image.sets.insert(
                set.into_bytes(),
                SetImage {
                    attributes: attributes_kept,
                    elements,
                },
            );
        }
        self.dump_all(buffer, &Request::new(libc::NFT_MSG_GETOBJ, family), |payload| {
            if attribute(payload, NFTA_OBJ_TABLE).map(until_nul) == Some(name) {
                image
                    .objects
                    .push(without(payload, &[NFTA_OBJ_TABLE, NFTA_OBJ_HANDLE, NFTA_OBJ_PAD]));
            }
        })?;
        self.dump_all(buffer, &Request::new(NFT_MSG_GETFLOWTABLE, family), |payload| {
            if attribute(payload, NFTA_FLOWTABLE_TABLE).map(until_nul) == Some(name) {
                image.flowtables.push(without(
                    payload,
                    &[NFTA_FLOWTABLE_TABLE, NFTA_FLOWTABLE_HANDLE, NFTA_FLOWTABLE_PAD],
                ));
            }
        })?;
        image.objects.sort();
        image.flowtables.sort();
        Ok(image)
    }

    /// A dump read whole; one that stopped early or that the kernel flagged
    /// interrupted is an error.
    fn dump_all(&self, buffer: &mut [u8], request: &Request, mut on_object: impl FnMut(&[u8])) -> io::Result<()> {
        self.dump_into(buffer, request, |payload| {
            on_object(payload);
            ControlFlow::Continue(())
        })?
        .complete()
    }
}

/// The value of the first top-level attribute of type `kind`.
fn attribute(payload: &[u8], kind: u16) -> Option<&[u8]> {
    attributes(payload).find(|&(k, _)| k == kind).map(|(_, value)| value)
}

/// The top-level attributes of `payload` but those in `dropped`, encoded.
fn without(payload: &[u8], dropped: &[u16]) -> Vec<u8> {
    encode(attributes(payload).filter(|(kind, _)| !dropped.contains(kind)))
}

/// The attributes of a `match` expression (iptables-nft's compat matches).
const NFTA_MATCH_NAME: u16 = 1;
const NFTA_MATCH_REV: u16 = 2;
const NFTA_MATCH_INFO: u16 = 3;

/// A `match` expression's data with the bytes an IPv4 rule never reads
/// zeroed (see [`crate::kernel::legacy::ipv4_unread_mask`]): kube-proxy's
/// `-m recent --set` without `--mask` fills 16 mask bytes, its save's
/// `--mask 255.255.255.255` restores 4.
fn match_without_unread(data: &[u8]) -> Vec<u8> {
    let find = |wanted: u16| nested(data).find(|&(kind, _)| kind == wanted).map(|(_, value)| value);
    let name = find(NFTA_MATCH_NAME).map(until_nul).unwrap_or_default();
    let revision = find(NFTA_MATCH_REV).and_then(be_u32).unwrap_or(0);
    let Some(unread) = crate::kernel::legacy::ipv4_unread_mask(name, revision) else {
        return data.to_vec();
    };
    let kept: Vec<(u16, Vec<u8>)> = nested(data)
        .map(|(kind, value)| {
            let mut value = value.to_vec();
            if kind == NFTA_MATCH_INFO && unread.end <= value.len() {
                value[unread.clone()].fill(0);
            }
            (kind, value)
        })
        .collect();
    encode(kept.iter().map(|(kind, value)| (*kind, value.as_slice())))
}

/// A rule's attributes without its handle, position and ids, and without
/// the packets and bytes its `counter` expressions hold.
fn rule_without_state(payload: &[u8], family: Family) -> Vec<u8> {
    let mut out = Vec::new();
    for (kind, value) in attributes(payload) {
        match kind {
            NFTA_RULE_TABLE | NFTA_RULE_CHAIN | NFTA_RULE_HANDLE | NFTA_RULE_POSITION | NFTA_RULE_PAD
            | NFTA_RULE_ID => {}
            NFTA_RULE_EXPRESSIONS => {
                let expressions = nested(value).map(|(kind, expression)| {
                    let named = |wanted: &[u8]| {
                        nested(expression).any(|(kind, name)| kind == NFTA_EXPR_NAME && until_nul(name) == wanted)
                    };
                    let (is_counter, is_ipv4_match) = (named(b"counter"), family == Family::Ipv4 && named(b"match"));
                    let parts: Vec<(u16, Vec<u8>)> = nested(expression)
                        .filter(|&(kind, _)| !(is_counter && kind == NFTA_EXPR_DATA))
                        .map(|(kind, data)| match kind {
                            NFTA_EXPR_DATA if is_ipv4_match => (kind, match_without_unread(data)),
                            _ => (kind, data.to_vec()),
                        })
                        .collect();
                    (kind, encode(parts.iter().map(|(kind, data)| (*kind, data.as_slice()))))
                });
                let expressions: Vec<(u16, Vec<u8>)> = expressions.collect();
                push(
                    &mut out,
                    kind,
                    &encode(expressions.iter().map(|(k, v)| (*k, v.as_slice()))),
                );
            }
            _ => push(&mut out, kind, value),
        }
    }
    out
}

/// Attributes encoded as the kernel encodes them (type, length, value,
/// padding), so equal attributes give equal bytes.
fn encode<'a>(attributes: impl Iterator<Item = (u16, &'a [u8])>) -> Vec<u8> {
    let mut out = Vec::new();
    for (kind, value) in attributes {
        push(&mut out, kind, value);
    }
    out
}

fn push(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    out.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize((out.len() + 3) & !3, 0);
}
