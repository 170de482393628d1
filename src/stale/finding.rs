//! What one family of a backend is found to hold that the host no longer
//! uses ([`super::find`] reads it): its stale tables and their chains, the
//! tables left alone and why, and whether the family could be read at all
//! (a family is Known or Unknown, never "none" for "could not tell").

use crate::family::Family;
use crate::mode::Mode;

/// One chain's stale state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaleChain {
    pub name: String,
    /// True for a built-in chain (then `policy` is its policy).
    pub builtin: bool,
    pub policy: Option<&'static str>,
    pub rules: u64,
}

/// A table holding state, with the chains that hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaleTable {
    pub name: &'static str,
    pub chains: Vec<StaleChain>,
    /// The built-in chains an empty table of this name declares.
    pub builtin_chains: Vec<&'static str>,
}

impl StaleTable {
    pub fn rules(&self) -> u64 {
        self.chains.iter().map(|c| c.rules).sum()
    }
}

/// A table left alone, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeftTable {
    pub name: String,
    pub why: String,
}

/// What one family of the stale backend holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub family: Family,
    pub backend: Mode,
    pub held: Held,
    /// Tables with state that are not the backend's own to remove (those
    /// seen before a reading failed, where one did).
    pub left: Vec<LeftTable>,
    /// The save tool it was read through, where the kernel refused the
    /// wrapper's own reads (None: read from the kernel directly).
    pub read_by: Option<String>,
}

/// What is known of a family's stale tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Held {
    /// Read: the tables holding state, and those of them whose own save
    /// failed, and why (they can be neither backed up nor removed).
    Known {
        tables: Vec<StaleTable>,
        unsaved: Vec<LeftTable>,
    },
    /// Not read, and why: anything may be there.
    Unknown(String),
}

impl Finding {
    /// Nothing found yet.
    pub(super) fn empty(backend: Mode, family: Family) -> Finding {
        Finding {
            family,
            backend,
            held: Held::Known {
                tables: Vec::new(),
                unsaved: Vec::new(),
            },
            left: Vec::new(),
            read_by: None,
        }
    }

    /// The stale tables known (none where the family could not be read).
    pub fn tables(&self) -> &[StaleTable] {
        match &self.held {
            Held::Known { tables, .. } => tables,
            Held::Unknown(_) => &[],
        }
    }

    /// The stale tables whose own save failed, and why.
    pub fn unsaved(&self) -> &[LeftTable] {
        match &self.held {
            Held::Known { unsaved, .. } => unsaved,
            Held::Unknown(_) => &[],
        }
    }

    /// Why the family could not be read, if it could not.
    pub fn unknown(&self) -> Option<&str> {
        match &self.held {
            Held::Known { .. } => None,
            Held::Unknown(why) => Some(why),
        }
    }

    /// Whether anything stale is known or may be there.
    pub fn is_stale(&self) -> bool {
        !self.tables().is_empty() || self.unknown().is_some()
    }

    /// A stale table found (while the family is being read).
    pub(super) fn add_table(&mut self, table: StaleTable) {
        if let Held::Known { tables, .. } = &mut self.held {
            tables.push(table);
        }
    }

    /// A stale table found whose own save failed (while reading).
    pub(super) fn add_unsaved(&mut self, table: LeftTable) {
        if let Held::Known { unsaved, .. } = &mut self.held {
            unsaved.push(table);
        }
    }
}
