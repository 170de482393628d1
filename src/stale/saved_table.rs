//! One table of a save, indexed by chain: what the judgement asks of a
//! table (a chain's rules, its policy, whether a name is a user chain, the
//! chains a packet can reach) answered in time of what is asked, not of
//! the table. A kube-proxy node holds tens of thousands of user chains and
//! rules; a scan of the whole table per question made the judgement grow
//! with their square.

use super::saved_rules::targets;
use crate::save_text;
use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};

/// One table of a save: its chains and its rules, in the order printed,
/// as [`save_text::Table`] reads them, with an index by chain built at the
/// first question (so `policies` and `rules` may be cut before it, as
/// [`SavedTable::retain_chains`] does).
#[derive(Clone, Debug, Default)]
pub(super) struct SavedTable {
    /// `(chain, policy)` of each declared chain; `-` for a user chain.
    pub(super) policies: Vec<(Vec<u8>, Vec<u8>)>,
    /// `(chain, whole rule from "-A")`.
    pub(super) rules: Vec<(Vec<u8>, Vec<u8>)>,
    index: OnceCell<HashMap<Vec<u8>, Chain>>,
}

/// What the index holds of one chain name.
#[derive(Clone, Debug, Default)]
struct Chain {
    /// The first declaration's place in `policies`.
    declared: Option<usize>,
    /// Whether any declaration is a user chain's (`-`).
    user: bool,
    /// Its rules' places in `rules`, in order.
    rules: Vec<usize>,
}

/// The tables of a save, by name, in order.
pub(super) fn parse(save: &[u8]) -> Vec<(Vec<u8>, SavedTable)> {
    save_text::tables(save)
        .into_iter()
        .map(|(name, table)| {
            let table = SavedTable {
                policies: table.policies,
                rules: table.rules,
                index: OnceCell::new(),
            };
            (name, table)
        })
        .collect()
}

/// The table called `name` among `tables`.
pub(super) fn named<'a>(tables: &'a [(Vec<u8>, SavedTable)], name: &[u8]) -> Option<&'a SavedTable> {
    tables.iter().find(|(n, _)| n == name).map(|(_, table)| table)
}

impl SavedTable {
    fn index(&self) -> &HashMap<Vec<u8>, Chain> {
        self.index.get_or_init(|| {
            let mut index: HashMap<Vec<u8>, Chain> = HashMap::new();
            for (at, (chain, policy)) in self.policies.iter().enumerate() {
                let entry = index.entry(chain.clone()).or_default();
                entry.declared.get_or_insert(at);
                entry.user |= policy.as_slice() == b"-";
            }
            for (at, (chain, _)) in self.rules.iter().enumerate() {
                match index.get_mut(chain.as_slice()) {
                    Some(entry) => entry.rules.push(at),
                    None => {
                        index.insert(
                            chain.clone(),
                            Chain {
                                rules: vec![at],
                                ..Chain::default()
                            },
                        );
                    }
                }
            }
            index
        })
    }

    /// Keeps only the declarations and rules of the chains `keep` holds for.
    pub(super) fn retain_chains(&mut self, keep: impl Fn(&[u8]) -> bool) {
        self.policies.retain(|(chain, _)| keep(chain));
        self.rules.retain(|(chain, _)| keep(chain));
        self.index = OnceCell::new();
    }

    /// Whether `name` is a user chain declared in this table.
    pub(super) fn is_user_chain(&self, name: &[u8]) -> bool {
        self.index().get(name).is_some_and(|c| c.user)
    }

    /// The rules of `chain`, in order, as printed.
    pub(super) fn chain(&self, chain: &[u8]) -> Vec<&[u8]> {
        self.index().get(chain).map_or_else(Vec::new, |c| {
            c.rules.iter().map(|&at| self.rules[at].1.as_slice()).collect()
        })
    }

    /// The policy of `chain`, if declared.
    pub(super) fn policy(&self, chain: &[u8]) -> Option<&[u8]> {
        let at = self.index().get(chain)?.declared?;
        Some(self.policies[at].1.as_slice())
    }

    /// The chains a packet can reach: the built-in ones, and the user
    /// chains a reachable chain jumps or goes to. A user chain nothing
    /// reaches filters nothing.
    pub(super) fn reachable_chains(&self) -> HashSet<Vec<u8>> {
        let mut reached: HashSet<Vec<u8>> = self
            .policies
            .iter()
            .filter(|(_, p)| p.as_slice() != b"-")
            .map(|(c, _)| c.clone())
            .collect();
        let mut to_read: Vec<Vec<u8>> = reached.iter().cloned().collect();
        while let Some(chain) = to_read.pop() {
            for rule in self.chain(&chain) {
                for target in targets(rule) {
                    if self.is_user_chain(&target) && !reached.contains(&target) {
                        reached.insert(target.clone());
                        to_read.push(target);
                    }
                }
            }
        }
        reached
    }

    /// The user chains all of whose rules `keeps` holds for, given the
    /// chains kept so far (a jump to one of them may be kept), to a fixed
    /// point from every user chain.
    pub(super) fn user_chains_where(&self, keeps: impl Fn(&[u8], &HashSet<Vec<u8>>) -> bool) -> HashSet<Vec<u8>> {
        let mut kept: HashSet<Vec<u8>> = self
            .policies
            .iter()
            .filter(|(_, p)| p.as_slice() == b"-")
            .map(|(c, _)| c.clone())
            .collect();
        loop {
            let unsure: Vec<Vec<u8>> = kept
                .iter()
                .filter(|c| self.chain(c).iter().any(|r| !keeps(r, &kept)))
                .cloned()
                .collect();
            if unsure.is_empty() {
                return kept;
            }
            for c in unsure {
                kept.remove(&c);
            }
        }
    }
}
