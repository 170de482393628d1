//! Legacy x_tables state, read through getsockopt on a raw socket.
//!
//! Only tables that `/proc/thread-self/net/ip{,6}_tables_names` already lists
//! are ever looked up: looking up any other table creates it.

use crate::family::Family;
use std::io;

/// What `*_SO_GET_INFO` says about one listed table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInfo {
    pub name: String,
    pub valid_hooks: u32,
    pub num_entries: u32,
    pub size: u32,
}

impl TableInfo {
    /// Most rules the table can hold given its entry count (no user chains).
    pub fn rule_upper_bound(&self) -> u64 {
        unimplemented!()
    }
}

/// The result of walking a table's entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableEntries {
    /// Rules as `iptables-legacy-save` prints them (`-A` lines).
    pub rules: u64,
    /// Names of the user-defined chains.
    pub user_chains: Vec<String>,
}

/// The legacy tables of one family that exist in this network namespace.
pub struct LegacyFamily {
    pub family: Family,
    /// GET_INFO of every listed table, in listing order.
    pub tables: Vec<TableInfo>,
}

impl LegacyFamily {
    /// Reads the table list and GET_INFO of each listed table.
    pub fn open(family: Family) -> io::Result<LegacyFamily> {
        let _ = family;
        unimplemented!()
    }

    pub fn table(&self, name: &str) -> Option<&TableInfo> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// Walks a listed table's entries (GET_ENTRIES) for the exact count.
    pub fn entries(&self, table: &TableInfo) -> io::Result<TableEntries> {
        let _ = table;
        unimplemented!()
    }
}
