//! What the decision reads of the host, behind one trait ([`Host`]): the
//! settings, files (the host root's links, the lock file: each a
//! [`FileReading`] its source's module defines), which backends the
//! running kernel has, and the kernel's answers (hint chains, kube-proxy's
//! tables, rule counts, legacy's tables). It decides nothing.
//!
//! [`LiveHost`] reads the real host, as each read has always been made: its
//! methods call the same functions, and `decide_on` is generic over the
//! trait and `read` over the reading (one copy per implementation, no
//! dynamic dispatch), so a wrapped call makes the same system calls as
//! before. Unit tests decide over a recorded host (`recorded`), without
//! root.

use super::legacy_state::describe_state;
use crate::family::Family;
use crate::host_link;
use crate::kernel::legacy::{self, LegacyFamily};
use crate::kernel::modules::{self, Presence};
use crate::kernel::{CountComparison, HintChain, KernelReader, NftLookups, Reading};
use crate::mode::Mode;
use crate::settings::{self, Settings};
use std::path::PathBuf;

/// One family's legacy tables, as far as they could be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LegacyTables {
    /// None listed in `/proc/net/ip*_tables_names` (or no such file).
    NoneListed,
    /// The list cannot be read: why.
    Unlisted(String),
    /// Listed, but `GET_INFO` was refused: their names, and why.
    Unopened { listed: Vec<String>, why: String },
    /// Each listed table, in order.
    Opened {
        listed: Vec<String>,
        tables: Vec<LegacyTable>,
    },
}

/// One listed legacy table, from `GET_INFO` and, when walked, `GET_ENTRIES`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegacyTable {
    pub name: String,
    /// It holds only its policies and its end.
    pub empty: bool,
    /// The most rules it can hold, by its entry count.
    pub rule_upper_bound: u64,
    /// Not walked (None); walked, with what in it changes a packet's fate
    /// (`filter holds 3 rules, policy FORWARD DROP`; None when nothing
    /// does); or the walk failed, with why.
    pub walked: Option<Result<Option<String>, String>>,
}

/// A reading of files, defined by the source that makes it (the host
/// link's candidates, the lock file): a source that reads a file needs no
/// method of [`Host`] of its own. The value says what to read (a root, a
/// family); [`Host::read`] reads it.
pub trait FileReading: 'static {
    /// What the reading finds.
    type Found: Clone + 'static;
    /// Reads the real host, as the source has always read it.
    fn read_live(&self) -> Self::Found;
    /// What a recorded host finds where a test recorded nothing: the quiet
    /// host's (no host root, no file).
    #[cfg(test)]
    fn unrecorded() -> Self::Found;
}

/// What the decision reads of the host. Each method is one reading; how
/// the answers are weighed is the sources' modules'.
pub trait Host {
    /// The settings in force.
    fn settings(&self) -> &Settings;
    /// Where the host's root is mounted (`IPTABLES_WRAPPER_HOST_ROOT`).
    fn host_root(&self) -> PathBuf;
    /// What `reading` finds in the host's files.
    fn read<R: FileReading>(&mut self, reading: &R) -> R::Found;
    /// nf_tables' hint chains and kube-proxy tables, in one round trip.
    fn nft_lookups(&mut self) -> Result<Reading<NftLookups>, String>;
    /// Legacy's hint chains (see [`KernelReader::legacy_hint_chains`]).
    fn legacy_hint_chains(&mut self, first_family_found: bool) -> Result<Reading<Vec<HintChain>>, String>;
    /// Whether legacy may hold a rule, in either family.
    fn legacy_may_hold_rules(&mut self) -> Result<bool, String>;
    /// Whether no legacy table is listed, in either family.
    fn legacy_has_no_tables(&mut self) -> bool;
    /// Whether nf_tables is in the kernel, as far as files tell.
    fn nf_tables_presence(&mut self) -> &Presence;
    /// Whether `mode`'s backend for `family` is in the running kernel,
    /// settled with the module lists (not loaded becomes missing when no
    /// module could load it).
    fn backend_presence(&mut self, mode: Mode, family: Family) -> Presence;
    /// Why this process cannot use `mode`'s backend for `family`, if known.
    fn unusable(&mut self, mode: Mode, family: Family) -> Option<String>;
    /// Both backends' rule counts compared (exactly with `exact`).
    fn compare_rule_counts(&mut self, exact: bool) -> Result<CountComparison, String>;
    /// `family`'s listed legacy tables; those of at most `walk_up_to_bytes`
    /// are walked for their state.
    fn legacy_tables(&mut self, family: Family, walk_up_to_bytes: u32) -> LegacyTables;
}

/// The real host: this process's settings and files, and the kernel through
/// a [`KernelReader`] (kept by the caller, to be asked again).
pub struct LiveHost<'k> {
    kernel: &'k mut KernelReader,
}

impl<'k> LiveHost<'k> {
    pub fn new(kernel: &'k mut KernelReader) -> LiveHost<'k> {
        LiveHost { kernel }
    }
}

impl Host for LiveHost<'_> {
    fn settings(&self) -> &Settings {
        settings::current()
    }

    fn host_root(&self) -> PathBuf {
        host_link::host_root()
    }

    fn read<R: FileReading>(&mut self, reading: &R) -> R::Found {
        reading.read_live()
    }

    fn nft_lookups(&mut self) -> Result<Reading<NftLookups>, String> {
        self.kernel.nft_lookups()
    }

    fn legacy_hint_chains(&mut self, first_family_found: bool) -> Result<Reading<Vec<HintChain>>, String> {
        self.kernel.legacy_hint_chains(first_family_found)
    }

    fn legacy_may_hold_rules(&mut self) -> Result<bool, String> {
        self.kernel.legacy_may_hold_rules()
    }

    fn legacy_has_no_tables(&mut self) -> bool {
        self.kernel.legacy_has_no_tables()
    }

    fn nf_tables_presence(&mut self) -> &Presence {
        self.kernel.nf_tables_presence()
    }

    fn backend_presence(&mut self, mode: Mode, family: Family) -> Presence {
        match mode {
            Mode::Nft => self.kernel.nf_tables_presence().clone().or_missing(modules::NF_TABLES),
            Mode::Legacy => modules::x_tables(family).or_missing(modules::x_tables_module(family)),
        }
    }

    fn unusable(&mut self, mode: Mode, family: Family) -> Option<String> {
        self.kernel.unusable(mode, family)
    }

    fn compare_rule_counts(&mut self, exact: bool) -> Result<CountComparison, String> {
        self.kernel.compare_rule_counts(exact)
    }

    fn legacy_tables(&mut self, family: Family, walk_up_to_bytes: u32) -> LegacyTables {
        let listed = match legacy::listed_tables(family) {
            Ok(Some(names)) if !names.is_empty() => names,
            Ok(_) => return LegacyTables::NoneListed,
            Err(why) => return LegacyTables::Unlisted(why),
        };
        let opened = match LegacyFamily::open_listed(family, listed.clone()) {
            Ok(opened) => opened,
            Err(e) => {
                return LegacyTables::Unopened {
                    listed,
                    why: e.to_string(),
                }
            }
        };
        let tables = opened
            .tables
            .iter()
            .map(|table| LegacyTable {
                name: table.name.clone(),
                empty: table.is_empty(),
                rule_upper_bound: table.rule_upper_bound(),
                walked: (table.size <= walk_up_to_bytes).then(|| {
                    opened
                        .contents(table)
                        .map(|contents| describe_state(&table.name, &contents))
                        .map_err(|e| e.to_string())
                }),
            })
            .collect();
        LegacyTables::Opened { listed, tables }
    }
}
