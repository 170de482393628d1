//! What a table's image says of the table as `tables` reads it (the table,
//! its chains with their rules counted, its sets), so that a reader that
//! needs both reads the table's rules once: one dump per chain is what
//! reading a table costs, and a family of a large node has tens of
//! thousands of chains.

use super::image::NftTableImage;
use super::netlink::nested;
use super::tables::{chain_of, has_counter, table_of, NftChain, NftTable};
use crate::family::Family;

impl NftTableImage {
    /// The table, as a GETTABLE dump shows it (None: it does not exist).
    pub fn nft_table(&self, family: Family, name: &str) -> Option<NftTable> {
        self.exists.then(|| NftTable {
            name: name.to_string(),
            use_count: self.use_count,
            ..table_of(family, nested(&self.table))
        })
    }

    /// Its chains, by name, each with its rules counted.
    pub fn nft_chains(&self) -> Vec<NftChain> {
        self.chains
            .values()
            .map(|attributes| {
                let (_, mut chain) = chain_of(nested(attributes));
                let rules = self.rules.get(chain.name.as_bytes()).map_or(&[][..], Vec::as_slice);
                chain.rules = rules.len() as u64;
                chain.rules_without_counter = rules.iter().filter(|rule| !has_counter(nested(rule))).count() as u64;
                chain
            })
            .collect()
    }
}
