//! A recorded host for unit tests: each reading the decision makes, set in
//! advance, and the names of the kernel's readings asked, in order. It
//! decides nothing; `rows_tests` decides over it.
//!
//! [`Recorded::default`] is a quiet nft host: no override, no host root,
//! no lock file (each file reading's [`FileReading::unrecorded`]), nf_tables
//! and legacy x_tables present and usable, no hint chain, no kube-proxy
//! table, no legacy table, no rule. What a file reading finds is recorded
//! by its type ([`Recorded::found`]), so a source that reads a file needs
//! nothing here.

use super::host::{FileReading, Host, LegacyTables};
use crate::family::Family;
use crate::host_link::{HostLink, HostLinks};
use crate::kernel::modules::Presence;
use crate::kernel::{CountComparison, CountVerdict, HintChain, NftLookups, Reading, RuleBounds};
use crate::mode::{Mode, OVERRIDE_VAR};
use crate::settings::{Origin, Setting, Settings, FILE_SETTINGS};
use std::any::{Any, TypeId};
use std::ffi::OsString;
use std::path::PathBuf;

/// Every reading, as the host would answer it.
pub(super) struct Recorded {
    pub settings: Settings,
    /// What file readings find, each by its reading's type, as
    /// [`Recorded::found`] records it; the last recorded for a type counts.
    pub files: Vec<(TypeId, Box<dyn Any>)>,
    pub nft_lookups: Result<NftLookups, String>,
    pub legacy_hints: Result<Vec<HintChain>, String>,
    pub legacy_may_hold_rules: Result<bool, String>,
    pub legacy_has_no_tables: bool,
    pub nf_tables: Presence,
    pub x_tables: Presence,
    /// Why this process cannot use each backend, if it cannot.
    pub unusable: [Option<String>; 2],
    /// Legacy's and nft's rules; Err: the counts cannot be read.
    pub counts: Result<(RuleBounds, RuleBounds), String>,
    pub legacy_tables: LegacyTables,
    /// The kernel's readings asked, by name, in order.
    pub kernel_reads: Vec<&'static str>,
}

impl Default for Recorded {
    fn default() -> Recorded {
        Recorded {
            settings: settings_with(None, Origin::Default),
            files: Vec::new(),
            nft_lookups: Ok(NftLookups {
                hint_chains: Vec::new(),
                kube_proxy_tables: Some(Vec::new()),
            }),
            legacy_hints: Ok(Vec::new()),
            legacy_may_hold_rules: Ok(false),
            legacy_has_no_tables: true,
            nf_tables: Presence::Present("recorded".into()),
            x_tables: Presence::Present("recorded".into()),
            unusable: [None, None],
            counts: Ok((RuleBounds::exact(0), RuleBounds::exact(0))),
            legacy_tables: LegacyTables::NoneListed,
            kernel_reads: Vec::new(),
        }
    }
}

impl Recorded {
    /// This host, where reading `R` finds `found`.
    pub fn found<R: FileReading>(mut self, found: R::Found) -> Recorded {
        self.files.push((TypeId::of::<R>(), Box::new(found)));
        self
    }
}

/// Settings with `IPTABLES_MODE` set to `value` from `origin` (None: unset).
pub(super) fn settings_with(value: Option<&str>, origin: Origin) -> Settings {
    let settings = FILE_SETTINGS
        .iter()
        .map(|&name| Setting {
            name,
            value: (name == OVERRIDE_VAR).then_some(value).flatten().map(OsString::from),
            origin: if name == OVERRIDE_VAR {
                origin.clone()
            } else {
                Origin::Default
            },
            unused: Vec::new(),
        })
        .collect();
    let mode = value.and_then(|value| crate::mode::parse_override(value.as_bytes()).ok().flatten());
    Settings {
        settings,
        mode,
        invalid: None,
    }
}

/// A host link at `path` whose chain ends in `target`, naming `answer`.
pub(super) fn link(path: &str, target: &str, answer: Result<Mode, String>) -> HostLinks {
    HostLinks::Found {
        link: HostLink {
            path: path.into(),
            chain: vec![PathBuf::from(target)],
            answer,
        },
        missing: Vec::new(),
        later: Vec::new(),
    }
}

fn reading<T>(value: T, method: &str) -> Reading<T> {
    Reading {
        value,
        method: method.into(),
    }
}

impl Host for Recorded {
    fn settings(&self) -> &Settings {
        &self.settings
    }

    fn host_root(&self) -> PathBuf {
        PathBuf::from("/host")
    }

    fn read<R: FileReading>(&mut self, _reading: &R) -> R::Found {
        self.files
            .iter()
            .rev()
            .find(|(read, _)| *read == TypeId::of::<R>())
            .and_then(|(_, found)| found.downcast_ref::<R::Found>())
            .map_or_else(R::unrecorded, Clone::clone)
    }

    fn nft_lookups(&mut self) -> Result<Reading<NftLookups>, String> {
        self.kernel_reads.push("nft lookups");
        self.nft_lookups.clone().map(|value| reading(value, "recorded lookups"))
    }

    fn legacy_hint_chains(&mut self, _first_family_found: bool) -> Result<Reading<Vec<HintChain>>, String> {
        self.kernel_reads.push("legacy hint chains");
        self.legacy_hints.clone().map(|value| reading(value, "recorded mangle"))
    }

    fn legacy_may_hold_rules(&mut self) -> Result<bool, String> {
        self.kernel_reads.push("legacy may hold rules");
        self.legacy_may_hold_rules.clone()
    }

    fn legacy_has_no_tables(&mut self) -> bool {
        self.kernel_reads.push("legacy table list");
        self.legacy_has_no_tables
    }

    fn nf_tables_presence(&mut self) -> &Presence {
        self.kernel_reads.push("nf_tables presence");
        &self.nf_tables
    }

    fn backend_presence(&mut self, mode: Mode, _family: Family) -> Presence {
        self.kernel_reads.push("backend presence");
        match mode {
            Mode::Nft => self.nf_tables.clone(),
            Mode::Legacy => self.x_tables.clone(),
        }
    }

    fn unusable(&mut self, mode: Mode, _family: Family) -> Option<String> {
        self.kernel_reads.push("usable");
        self.unusable[usize::from(mode == Mode::Legacy)].clone()
    }

    fn compare_rule_counts(&mut self, _exact: bool) -> Result<CountComparison, String> {
        self.kernel_reads.push("rule counts");
        let (legacy, nft) = self.counts.clone()?;
        let verdict = match (legacy.low > nft.high, legacy.high < nft.low) {
            (true, _) => CountVerdict::Legacy,
            (_, true) => CountVerdict::Nft,
            _ => CountVerdict::Tie,
        };
        Ok(CountComparison {
            legacy: reading(legacy, "recorded GET_INFO"),
            nft: reading(nft, "recorded netlink"),
            verdict,
        })
    }

    fn legacy_tables(&mut self, _family: Family, _walk_up_to_bytes: u32) -> LegacyTables {
        self.kernel_reads.push("legacy tables");
        self.legacy_tables.clone()
    }
}
